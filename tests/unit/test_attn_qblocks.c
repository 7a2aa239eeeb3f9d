/* The CUDA attention's query-block layout (cuda_attn_row_qblocks), which the backend
 * and test_cuda lay out with: every row cut into blocks of cuda_attn_block_tokens(group)
 * tokens from its first, the blocks of at most CUDA_ATTN_DEC_ROWS rows first (rows in
 * order), then the others.  Host code: runs without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_kernels.h"
#include "test.h"

#define MAX_ROWS 40
#define MAX_QB 4096

static void check_layout(int group, const int *len, int n_rows)
{
    static int32_t got[2 * MAX_QB], want[2 * MAX_QB], other[2 * MAX_QB];
    int tok0[MAX_ROWS], t = 0;
    for (int r = 0; r < n_rows; r++) {
        tok0[r] = t;
        t += len[r];
    }
    int q = 0;
    for (int r = 0; r < n_rows; r++)
        q = cuda_attn_row_qblocks(got, q, tok0[r], len[r], group, true);
    int n_dec = q;
    for (int r = 0; r < n_rows; r++)
        q = cuda_attn_row_qblocks(got, q, tok0[r], len[r], group, false);

    /* the expectation, written out: cut each row, then sort the cuts into two lists */
    int bt = cuda_attn_block_tokens(group), nw = 0, no = 0;
    for (int r = 0; r < n_rows; r++)
        for (int start = 0; start < len[r]; start += bt) {
            int n = len[r] - start < bt ? len[r] - start : bt;
            int32_t *dst = n * group <= CUDA_ATTN_DEC_ROWS ? want + 2 * nw++ : other + 2 * no++;
            dst[0] = tok0[r] + start;
            dst[1] = n;
        }
    CHECK_MSG(n_dec == nw, "group %d: %d decode blocks, want %d", group, n_dec, nw);
    memcpy(want + 2 * nw, other, (size_t)no * 2 * sizeof(int32_t));
    CHECK_MSG(q == nw + no && !memcmp(got, want, (size_t)q * 2 * sizeof(int32_t)),
              "group %d, %d rows: the layout differs", group, n_rows);
}

static void test_layouts(void)
{
    static const int groups[] = {1, 2, 3, 4, 5, 8, 16, 64, 128};
    srand(7);
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
        int len[MAX_ROWS];
        /* a decode step; a prompt alone; then random mixes with empty, short and long rows */
        for (int r = 0; r < MAX_ROWS; r++)
            len[r] = 1;
        check_layout(groups[gi], len, MAX_ROWS);
        len[0] = 1000;
        check_layout(groups[gi], len, 1);
        for (int trial = 0; trial < 50; trial++) {
            int n_rows = 1 + rand() % MAX_ROWS;
            for (int r = 0; r < n_rows; r++) {
                int k = rand() % 4;
                len[r] = k == 0 ? 0 : k == 1 ? 1 : k == 2 ? 1 + rand() % 9 : rand() % 100;
            }
            check_layout(groups[gi], len, n_rows);
        }
    }
}

int main(void)
{
    TEST_RUN(test_layouts);
    TEST_END();
}
