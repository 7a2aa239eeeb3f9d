/* The batch layout: derived arrays follow DESIGN.md's identities, and every kind of
 * malformed batch is rejected with a status (never an assert). */
#include <string.h>

#include "kv/batch.h"
#include "test.h"

#define NB 16

static void build_two_rows(struct batch *b, int32_t *t0, int32_t *t1)
{
    char err[HR_ERRLEN];
    int32_t toks[40];
    for (int i = 0; i < 40; i++)
        toks[i] = i;
    batch_reset(b);
    CHECK_OK(batch_add_row(b, 7, toks, 5, 18, t0, 2, BATCH_LOGITS_LAST, err, sizeof err), err);
    CHECK_OK(batch_add_row(b, 9, toks, 3, 0, t1, 1, BATCH_LOGITS_ALL, err, sizeof err), err);
    CHECK_OK(batch_build(b, NB, err, sizeof err), err);
}

static void test_layout(void)
{
    struct batch b;
    char err[HR_ERRLEN];
    CHECK_OK(batch_init(&b, 16, 4, 64, err, sizeof err), err);
    int32_t t0[2] = {5, 2}, t1[1] = {11};
    build_two_rows(&b, t0, t1);
    CHECK(b.n_rows == 2 && b.n_tok == 8 && b.n_logits == 4);
    CHECK(b.rows[0].query_offset == 0 && b.rows[1].query_offset == 5);
    CHECK(b.rows[0].kv_len == 23 && b.rows[1].kv_len == 3);
    /* Row 0: positions 18..22 live in block t0[1] = 2 at offsets 2..6. */
    for (int i = 0; i < 5; i++) {
        CHECK(b.positions[i] == 18 + i);
        CHECK(b.slots[i] == 2 * 16 + 2 + i);
        CHECK(b.tok_row[i] == 0);
    }
    for (int i = 0; i < 3; i++) {
        CHECK(b.positions[5 + i] == i);
        CHECK(b.slots[5 + i] == 11 * 16 + i);
    }
    CHECK(b.logit_tok[0] == 4 && b.logit_tok[1] == 5 && b.logit_tok[3] == 7);
    CHECK(b.rows[1].logit_offset == 1);
    batch_free(&b);
}

static void test_malformed(void)
{
    struct batch b;
    char err[HR_ERRLEN];
    CHECK_OK(batch_init(&b, 16, 4, 64, err, sizeof err), err);
    int32_t t0[2] = {5, 2}, t1[1] = {11};

    build_two_rows(&b, t0, t1);
    b.rows[0].kv_len = 22;
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID && strstr(err, "kv_len"));

    build_two_rows(&b, t0, t1);
    b.rows[1].query_offset = 4;
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID && strstr(err, "query_offset"));

    build_two_rows(&b, t0, t1);
    b.rows[0].n_table = 1; /* 16 slots for kv_len 23 */
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID && strstr(err, "cover"));

    build_two_rows(&b, t0, t1);
    CHECK(batch_validate(&b, 11, err, sizeof err) == HR_ERR_INVALID && strstr(err, "outside"));

    build_two_rows(&b, t0, t1);
    b.slots[3] = 999;
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID && strstr(err, "slot"));

    build_two_rows(&b, t0, t1);
    b.positions[6] = 7;
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID);

    build_two_rows(&b, t0, t1);
    b.n_tok = 9;
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID);

    build_two_rows(&b, t0, t1);
    b.n_logits = 3;
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID);

    build_two_rows(&b, t0, t1);
    b.rows[0].context_len = -1;
    CHECK(batch_validate(&b, NB, err, sizeof err) == HR_ERR_INVALID);

    /* Two rows whose tables share a block at the same offsets write one slot. */
    int32_t s0[1] = {3}, s1[1] = {3};
    int32_t toks[4] = {1, 2, 3, 4};
    batch_reset(&b);
    CHECK_OK(batch_add_row(&b, 0, toks, 2, 0, s0, 1, BATCH_LOGITS_LAST, err, sizeof err), err);
    CHECK_OK(batch_add_row(&b, 1, toks, 2, 0, s1, 1, BATCH_LOGITS_LAST, err, sizeof err), err);
    CHECK(batch_build(&b, NB, err, sizeof err) == HR_ERR_INVALID && strstr(err, "slot"));

    /* A row that does not fit is refused and changes nothing. */
    batch_reset(&b);
    int32_t big[80] = {0}, tb[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    CHECK(batch_add_row(&b, 0, big, 80, 0, tb, 8, BATCH_LOGITS_LAST, err, sizeof err) == HR_ERR_FULL);
    CHECK(b.n_rows == 0 && b.n_tok == 0);
    batch_free(&b);
}

int main(void)
{
    TEST_RUN(test_layout);
    TEST_RUN(test_malformed);
    TEST_END();
}
