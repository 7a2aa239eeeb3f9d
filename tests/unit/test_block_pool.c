/* Block pool: refcounts, all-or-nothing allocation, copy-on-write (the pool names the
 * copy, the CPU backend makes it across every layer at the step's start), the
 * backend's export/import of blocks, and the asserts on our own misuse (checked in a
 * forked child). */
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kv/block_pool.h"
#include "test.h"

static char err[HR_ERRLEN];
static struct backend be; /* the CPU backend: owns the stores' slabs */
static struct model_config geo = {.n_layers = 3, .n_heads = 2, .n_kv_heads = 2, .head_dim = 4, .hidden_size = 8};

/* A tiny geometry: 3 layers, 2 kv heads, head_dim 4, 4 tokens a block, f32. */
static void make_store(struct kv_store *kv, int n_blocks)
{
    size_t block = (size_t)3 * 2 * 2 * 4 * 4 * 4; /* layers * (K,V) * heads * tokens * dim * f32 */
    CHECK_OK(kv_store_layout(kv, 3, 2, 4, KV_DTYPE_F32, 4, block * (size_t)n_blocks + block / 2, err, sizeof err),
             err);
    CHECK(kv->n_blocks == n_blocks);
    CHECK(kv->block_bytes == block);
    CHECK_OK(be.ops->kv_alloc(&be, kv, err, sizeof err), err);
}

static void store_free(struct kv_store *kv) { be.ops->kv_free(&be, kv); }

/* The step's copies, as the engine hands them to the backend: a batch with no rows. */
static void run_copies(struct kv_store *kv, const int *src, const int *dst, int n)
{
    struct batch b;
    CHECK_OK(batch_init(&b, kv->block_size, 1, 8, err, sizeof err), err); /* room for 4 copies */
    for (int i = 0; i < n; i++)
        batch_add_copy(&b, src[i], dst[i]);
    CHECK_OK(batch_build(&b, kv->n_blocks, err, sizeof err), err);
    CHECK_OK(be.ops->begin_step(&be, &b, kv, err, sizeof err), err);
    CHECK_OK(be.ops->sync(&be, err, sizeof err), err);
    batch_free(&b);
}

/* Writes a value that names (block tag, layer, K/V, head, element) into every element. */
static void fill_block(struct kv_store *kv, int id, float tag)
{
    for (int l = 0; l < kv->n_layers; l++)
        for (int s = 0; s < 2; s++)
            for (int h = 0; h < kv->n_kv_heads; h++) {
                float *p = kv_store_head(kv, id, l, s, h);
                for (int e = 0; e < kv->block_size * kv->head_dim; e++)
                    p[e] = tag * 10000.0f + (float)(l * 1000 + s * 100 + h * 50 + e);
            }
}

static int block_has(struct kv_store *kv, int id, float tag)
{
    for (int l = 0; l < kv->n_layers; l++)
        for (int s = 0; s < 2; s++)
            for (int h = 0; h < kv->n_kv_heads; h++) {
                const float *p = kv_store_head(kv, id, l, s, h);
                for (int e = 0; e < kv->block_size * kv->head_dim; e++)
                    if (p[e] != tag * 10000.0f + (float)(l * 1000 + s * 100 + h * 50 + e))
                        return 0;
            }
    return 1;
}

static void test_alloc_release(void)
{
    struct kv_store kv;
    struct block_pool pool;
    make_store(&kv, 8);
    CHECK_OK(block_pool_init(&pool, kv.n_blocks, err, sizeof err), err);
    CHECK(block_pool_capacity(&pool) == 8);
    CHECK(block_pool_n_free(&pool) == 8);

    int ids[8];
    CHECK_OK(block_pool_alloc(&pool, -1, ids, 3, err, sizeof err), err);
    CHECK(block_pool_n_free(&pool) == 5);
    for (int i = 0; i < 3; i++) {
        CHECK(ids[i] >= 0 && ids[i] < 8);
        CHECK(block_pool_refcount(&pool, ids[i]) == 1);
        for (int j = 0; j < i; j++)
            CHECK(ids[i] != ids[j]);
    }
    block_pool_retain(&pool, ids[1]);
    block_pool_retain(&pool, ids[1]);
    CHECK(block_pool_refcount(&pool, ids[1]) == 3);
    block_pool_release(&pool, ids[1]);
    CHECK(block_pool_refcount(&pool, ids[1]) == 2);
    CHECK(block_pool_n_free(&pool) == 5); /* still held */
    block_pool_release(&pool, ids[1]);
    block_pool_release(&pool, ids[1]);
    CHECK(block_pool_refcount(&pool, ids[1]) == 0);
    CHECK(block_pool_n_free(&pool) == 6);

    /* Zero blocks is fine and changes nothing; a negative count is invalid. */
    CHECK_OK(block_pool_alloc(&pool, -1, ids + 3, 0, err, sizeof err), err);
    CHECK(block_pool_n_free(&pool) == 6);
    CHECK(block_pool_alloc(&pool, -1, ids + 3, -1, err, sizeof err) == HR_ERR_INVALID);

    int rest[2] = {ids[0], ids[2]};
    block_pool_release_n(&pool, rest, 2);
    CHECK(block_pool_n_free(&pool) == 8);
    for (int i = 0; i < 8; i++)
        CHECK(block_pool_refcount(&pool, i) == 0);

    /* Every id can be handed out once, and all come back. */
    int all[8];
    CHECK_OK(block_pool_alloc(&pool, -1, all, 8, err, sizeof err), err);
    int seen[8] = {0};
    for (int i = 0; i < 8; i++)
        seen[all[i]]++;
    for (int i = 0; i < 8; i++)
        CHECK(seen[i] == 1);
    CHECK(block_pool_n_free(&pool) == 0);
    block_pool_release_n(&pool, all, 8);
    CHECK(block_pool_n_free(&pool) == 8);

    block_pool_free(&pool);
    block_pool_free(&pool); /* zeroed: no-op */
    block_pool_free(NULL);
    store_free(&kv);
}

static void test_all_or_nothing(void)
{
    struct kv_store kv;
    struct block_pool pool;
    make_store(&kv, 8);
    CHECK_OK(block_pool_init(&pool, kv.n_blocks, err, sizeof err), err);
    int a[8], b[8];
    CHECK_OK(block_pool_alloc(&pool, -1, a, 5, err, sizeof err), err);
    for (int i = 0; i < 8; i++)
        b[i] = -7;
    err[0] = 0;
    CHECK(block_pool_alloc(&pool, -1, b, 4, err, sizeof err) == HR_ERR_FULL);
    CHECK_MSG(strstr(err, "4 blocks needed") && strstr(err, "3 of 8 free"), "message: %s", err);
    CHECK(block_pool_n_free(&pool) == 3);
    for (int i = 0; i < 8; i++)
        CHECK(b[i] == -7); /* nothing written */
    for (int i = 0; i < 8; i++) {
        int held = 0;
        for (int j = 0; j < 5; j++)
            held |= a[j] == i;
        CHECK(block_pool_refcount(&pool, i) == held);
    }
    /* Exactly what is free still succeeds. */
    CHECK_OK(block_pool_alloc(&pool, -1, b, 3, err, sizeof err), err);
    CHECK(block_pool_n_free(&pool) == 0);
    CHECK(block_pool_alloc(&pool, -1, b + 3, 1, err, sizeof err) == HR_ERR_FULL);
    block_pool_release_n(&pool, a, 5);
    block_pool_release_n(&pool, b, 3);
    CHECK(block_pool_n_free(&pool) == block_pool_capacity(&pool));
    block_pool_free(&pool);
    store_free(&kv);
}

static void test_copy_on_write(void)
{
    struct kv_store kv;
    struct block_pool pool;
    make_store(&kv, 4);
    CHECK_OK(block_pool_init(&pool, kv.n_blocks, err, sizeof err), err);

    int shared;
    CHECK_OK(block_pool_alloc(&pool, -1, &shared, 1, err, sizeof err), err);
    fill_block(&kv, shared, 1.0f);

    /* Refcount 1: make_writable is a no-op and names no copy. */
    int id = shared, from = 99;
    CHECK_OK(block_pool_make_writable(&pool, &id, &from, err, sizeof err), err);
    CHECK(id == shared && from == -1);
    CHECK(block_pool_n_free(&pool) == 3);

    /* Two holders: the writer gets a fresh block and the copy to make, the other keeps
     * the original. */
    block_pool_retain(&pool, shared);
    int mine = shared;
    CHECK_OK(block_pool_make_writable(&pool, &mine, &from, err, sizeof err), err);
    CHECK(mine != shared && from == shared);
    CHECK(block_pool_refcount(&pool, shared) == 1);
    CHECK(block_pool_refcount(&pool, mine) == 1);
    CHECK(block_pool_n_free(&pool) == 2);
    CHECK(!block_has(&kv, mine, 1.0f)); /* the pool copies nothing itself */
    run_copies(&kv, &from, &mine, 1);
    CHECK(block_has(&kv, mine, 1.0f));   /* every layer, K and V, every head copied */
    CHECK(block_has(&kv, shared, 1.0f));
    fill_block(&kv, mine, 2.0f);         /* writing the copy leaves the original intact */
    CHECK(block_has(&kv, shared, 1.0f));
    CHECK(block_has(&kv, mine, 2.0f));

    /* A full pool: the copy fails and nothing changes. */
    int fill[2];
    CHECK_OK(block_pool_alloc(&pool, -1, fill, 2, err, sizeof err), err);
    block_pool_retain(&pool, shared);
    int other = shared;
    CHECK(block_pool_make_writable(&pool, &other, &from, err, sizeof err) == HR_ERR_FULL);
    CHECK(other == shared && from == -1);
    CHECK(block_pool_refcount(&pool, shared) == 2);
    block_pool_release(&pool, shared);

    block_pool_release_n(&pool, fill, 2);
    block_pool_release(&pool, shared);
    block_pool_release(&pool, mine);
    CHECK(block_pool_n_free(&pool) == block_pool_capacity(&pool));
    block_pool_free(&pool);
    store_free(&kv);
}

static void test_export_import(void)
{
    struct kv_store kv;
    struct block_pool pool;
    make_store(&kv, 4);
    CHECK_OK(block_pool_init(&pool, kv.n_blocks, err, sizeof err), err);
    int a, b;
    CHECK_OK(block_pool_alloc(&pool, -1, &a, 1, err, sizeof err), err);
    CHECK_OK(block_pool_alloc(&pool, -1, &b, 1, err, sizeof err), err);
    fill_block(&kv, a, 3.0f);
    fill_block(&kv, b, 4.0f);

    unsigned char *host = malloc(kv.block_bytes);
    CHECK(host != NULL);
    CHECK_OK(be.ops->kv_export(&be, &kv, a, host, err, sizeof err), err);
    for (int l = 0; l < kv.n_layers; l++) /* layer by layer: K then V of each */
        CHECK(memcmp(host + (size_t)l * kv.layer_bytes, kv_store_slice(&kv, a, l), kv.layer_bytes) == 0);
    /* Preempt: free the block, scribble over the slab, bring it back elsewhere. */
    block_pool_release(&pool, a);
    int c;
    CHECK_OK(block_pool_alloc(&pool, -1, &c, 1, err, sizeof err), err);
    fill_block(&kv, c, 5.0f);
    CHECK_OK(be.ops->kv_import(&be, &kv, c, host, err, sizeof err), err);
    CHECK(block_has(&kv, c, 3.0f));
    CHECK(block_has(&kv, b, 4.0f)); /* neighbour untouched */
    /* Block ids outside the pool are errors, not writes. */
    CHECK(be.ops->kv_export(&be, &kv, kv.n_blocks, host, err, sizeof err) == HR_ERR_INVALID);
    CHECK(be.ops->kv_import(&be, &kv, -1, host, err, sizeof err) == HR_ERR_INVALID);
    free(host);

    block_pool_release(&pool, b);
    block_pool_release(&pool, c);
    CHECK(block_pool_n_free(&pool) == 4);
    block_pool_free(&pool);
    store_free(&kv);
}

/* Blocks follow their predecessor when it is free, else the lowest free id comes first,
 * whatever order blocks were released in. */
static void test_runs(void)
{
    struct kv_store kv;
    struct block_pool pool;
    make_store(&kv, 130); /* three bitmap words */
    CHECK_OK(block_pool_init(&pool, kv.n_blocks, err, sizeof err), err);
    int a[130];
    CHECK_OK(block_pool_alloc(&pool, -1, a, 130, err, sizeof err), err);
    for (int i = 0; i < 130; i++)
        CHECK(a[i] == i);
    CHECK(block_pool_alloc(&pool, -1, a, 1, err, sizeof err) == HR_ERR_FULL);
    /* free 129, 100..104 and 5..7, in descending order */
    int rel[] = {129, 104, 103, 102, 101, 100, 7, 6, 5};
    block_pool_release_n(&pool, rel, 9);
    int b[3];
    CHECK_OK(block_pool_alloc(&pool, 101, b, 3, err, sizeof err), err); /* run after 101: 102, 103, 104 */
    CHECK(b[0] == 102 && b[1] == 103 && b[2] == 104);
    CHECK_OK(block_pool_alloc(&pool, 50, b, 3, err, sizeof err), err); /* 51 busy: lowest free, then its run */
    CHECK(b[0] == 5 && b[1] == 6 && b[2] == 7);
    CHECK_OK(block_pool_alloc(&pool, 129, b, 2, err, sizeof err), err); /* nothing after the last id */
    CHECK(b[0] == 100 && b[1] == 101);
    CHECK_OK(block_pool_alloc(&pool, 7, b, 1, err, sizeof err), err); /* 8 busy */
    CHECK(b[0] == 129);
    CHECK(block_pool_n_free(&pool) == 0);
    block_pool_free(&pool);
    store_free(&kv);
}

/* The store is layer-major: consecutive blocks' slices of one layer are one run of memory. */
static void test_layout(void)
{
    struct kv_store kv;
    make_store(&kv, 8);
    for (int l = 0; l < kv.n_layers; l++)
        for (int b = 0; b + 1 < kv.n_blocks; b++) {
            CHECK((uint8_t *)kv_store_slice(&kv, b + 1, l) == (uint8_t *)kv_store_slice(&kv, b, l) + kv.layer_bytes);
            CHECK((uint8_t *)kv_store_head(&kv, b, l, 1, 0) ==
                  (uint8_t *)kv_store_head(&kv, b, l, 0, 0) + (size_t)kv.n_kv_heads * kv.head_bytes);
        }
    CHECK((uint8_t *)kv_store_slice(&kv, 0, 1) == kv.slab + (size_t)kv.n_blocks * kv.layer_bytes);
    store_free(&kv);
}

/* Runs fn in a child process; returns 1 when the child died of SIGABRT (HR_ASSERT). */
static int aborts(void (*fn)(struct block_pool *), struct block_pool *pool)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child's message is expected; keep the test log clean. */
        if (!freopen("/dev/null", "w", stderr))
            _exit(3);
        fn(pool);
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 0;
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void do_double_release(struct block_pool *p)
{
    int id;
    if (block_pool_alloc(p, -1, &id, 1, NULL, 0) != HR_OK)
        _exit(2);
    block_pool_release(p, id);
    block_pool_release(p, id);
}

static void do_retain_free(struct block_pool *p) { block_pool_retain(p, 0); }

static void do_writable_free(struct block_pool *p)
{
    int id = 1, from;
    block_pool_make_writable(p, &id, &from, NULL, 0);
}

static void test_misuse_asserts(void)
{
    struct kv_store kv;
    struct block_pool pool;
    make_store(&kv, 2);
    CHECK_OK(block_pool_init(&pool, kv.n_blocks, err, sizeof err), err);
    CHECK(aborts(do_double_release, &pool));
    CHECK(aborts(do_retain_free, &pool));
    CHECK(aborts(do_writable_free, &pool));
    CHECK(block_pool_n_free(&pool) == 2); /* the parent's pool is untouched */
    block_pool_free(&pool);
    store_free(&kv);

    struct block_pool bad;
    CHECK(block_pool_init(&bad, 0, err, sizeof err) == HR_ERR_INVALID);
    block_pool_free(&bad);
}

/* Copies run in list order (a later copy into a block wins), and a batch naming a
 * block outside the pool, or a block copied onto itself, is invalid. */
static void test_copy_order(void)
{
    struct kv_store kv;
    make_store(&kv, 4);
    fill_block(&kv, 0, 1.0f);
    fill_block(&kv, 1, 2.0f);
    fill_block(&kv, 2, 3.0f);
    int src[] = {0, 1, 3}, dst[] = {3, 3, 2}; /* 3 <- 0, then 3 <- 1, then 2 <- 3 (now block 1's) */
    run_copies(&kv, src, dst, 3);
    CHECK(block_has(&kv, 3, 2.0f));
    CHECK(block_has(&kv, 2, 2.0f));
    CHECK(block_has(&kv, 0, 1.0f) && block_has(&kv, 1, 2.0f));
    struct batch b;
    CHECK_OK(batch_init(&b, kv.block_size, 1, 1, err, sizeof err), err);
    batch_add_copy(&b, 0, 4);
    CHECK(batch_build(&b, kv.n_blocks, err, sizeof err) == HR_ERR_INVALID);
    batch_reset(&b);
    batch_add_copy(&b, 2, 2);
    CHECK(batch_build(&b, kv.n_blocks, err, sizeof err) == HR_ERR_INVALID);
    batch_free(&b);
    store_free(&kv);
}

int main(void)
{
    CHECK_OK(backend_create(&be, "cpu", &(struct backend_opts){.n_threads = 1}, err, sizeof err), err);
    CHECK_OK(be.ops->reserve(&be, &geo, 4, 0, err, sizeof err), err);
    TEST_RUN(test_alloc_release);
    TEST_RUN(test_all_or_nothing);
    TEST_RUN(test_copy_on_write);
    TEST_RUN(test_export_import);
    TEST_RUN(test_runs);
    TEST_RUN(test_layout);
    TEST_RUN(test_misuse_asserts);
    TEST_RUN(test_copy_order);
    backend_free(&be);
    TEST_END();
}
