/* The prefix cache: the tree itself (leases, namespaces, collisions, eviction,
 * invalidation), then exact reuse in the engine: every output compared bitwise
 * with the same request on an engine without the cache. */
#include <string.h>

#include "cache/prefix_cache.h"
#include "engine_rig.h"
#include "test.h"

#define BS 16

/* ------------------------------------------------------------------ the tree */

struct tree_rig {
    struct block_pool pool;
    struct prefix_cache pc;
};

static int tree_init(struct tree_rig *t, int n_blocks, int max_entries)
{
    char err[HR_ERRLEN];
    memset(t, 0, sizeof *t);
    if (block_pool_init(&t->pool, n_blocks, err, sizeof err) != HR_OK ||
        prefix_cache_init(&t->pc, &t->pool, BS, max_entries, 42, err, sizeof err) != HR_OK) {
        fprintf(stderr, "  tree_init: %s\n", err);
        return 0;
    }
    return 1;
}

static void tree_free(struct tree_rig *t)
{
    prefix_cache_free(&t->pc);
    CHECK(block_pool_n_free(&t->pool) == block_pool_capacity(&t->pool));
    block_pool_free(&t->pool);
}

/* A "sequence" of n tokens whose blocks are freshly allocated, then published. */
static void publish(struct tree_rig *t, const char *salt, const int32_t *tok, int n, int32_t *table)
{
    int nb = (n + BS - 1) / BS;
    CHECK(block_pool_alloc(&t->pool, -1, table, nb, NULL, 0) == HR_OK);
    prefix_cache_insert(&t->pc, salt, tok, n / BS, table);
    block_pool_release_n(&t->pool, table, nb); /* the sequence ends; the cache keeps its blocks */
}

static void test_tree_lookup_and_leases(void)
{
    struct tree_rig t;
    if (!tree_init(&t, 32, 32)) {
        CHECK(0);
        return;
    }
    int32_t tok[100], table[8], got[8];
    for (int i = 0; i < 100; i++)
        tok[i] = i * 7 % 50;
    publish(&t, NULL, tok, 64, table); /* 4 full blocks */
    CHECK(t.pc.st.entries == 4);
    CHECK(block_pool_n_free(&t.pool) == 28);
    /* Matches stop at floor((n - 1) / bs) blocks: at least one token is computed. */
    struct prefix_lease l;
    int owner;
    CHECK(prefix_cache_lookup(&t.pc, NULL, tok, 64, got, &l, &owner) == 3);
    CHECK(!memcmp(got, table, 3 * sizeof *got));
    for (int b = 0; b < 3; b++)
        CHECK(block_pool_refcount(&t.pool, got[b]) == 2);
    CHECK(t.pc.st.open_leases == 1);
    prefix_cache_lease_abort(&t.pc, &l);
    CHECK(t.pc.st.open_leases == 0 && block_pool_refcount(&t.pool, got[0]) == 1);
    CHECK(prefix_cache_lookup(&t.pc, NULL, tok, 65, got, &l, &owner) == 4);
    prefix_cache_lease_prepare(&t.pc, &l, &owner);
    prefix_cache_lease_commit(&t.pc, &l, &owner);
    CHECK(t.pc.st.open_leases == 0 && block_pool_refcount(&t.pool, got[3]) == 2);
    block_pool_release_n(&t.pool, got, 4); /* the committed sequence ends */
    /* A different second block: only the first matches. */
    int32_t other[100];
    memcpy(other, tok, sizeof other);
    other[20] = 49;
    CHECK(prefix_cache_match_len(&t.pc, NULL, other, 100) == 1);
    /* Fewer than a block, or exactly one block: nothing to match. */
    CHECK(prefix_cache_match_len(&t.pc, NULL, tok, 15) == 0);
    CHECK(prefix_cache_match_len(&t.pc, NULL, tok, 16) == 0);
    CHECK(prefix_cache_match_len(&t.pc, NULL, tok, 17) == 1);
    /* Inserting an existing path adds nothing. */
    publish(&t, NULL, tok, 64, table);
    CHECK(t.pc.st.entries == 4);
    tree_free(&t);
}

static void test_tree_namespaces(void)
{
    struct tree_rig t;
    if (!tree_init(&t, 32, 32)) {
        CHECK(0);
        return;
    }
    int32_t tok[64], table[4];
    for (int i = 0; i < 64; i++)
        tok[i] = i;
    publish(&t, "tenant-a", tok, 64, table);
    CHECK(prefix_cache_match_len(&t.pc, "tenant-a", tok, 64) == 3);
    CHECK(prefix_cache_match_len(&t.pc, "tenant-b", tok, 64) == 0);
    CHECK(prefix_cache_match_len(&t.pc, NULL, tok, 64) == 0);
    publish(&t, "tenant-b", tok, 64, table);
    CHECK(t.pc.st.entries == 8); /* no node shared */
    prefix_cache_invalidate(&t.pc);
    CHECK(prefix_cache_match_len(&t.pc, "tenant-a", tok, 64) == 0 && t.pc.st.entries == 0);
    CHECK(block_pool_n_free(&t.pool) == 32 && t.pc.st.invalidations_total == 1);
    tree_free(&t);
}

static void test_tree_collisions(void)
{
    struct tree_rig t;
    if (!tree_init(&t, 64, 64)) {
        CHECK(0);
        return;
    }
    t.pc.hook_hash_collide = true;
    int32_t a[48], b[48], table[3];
    for (int i = 0; i < 48; i++) {
        a[i] = i;
        b[i] = i + (i >= 16 ? 1000 : 0); /* same first block */
    }
    publish(&t, NULL, a, 48, table);
    publish(&t, NULL, b, 48, table);
    CHECK(t.pc.st.entries == 5);
    CHECK(prefix_cache_match_len(&t.pc, NULL, a, 48) == 2);
    CHECK(prefix_cache_match_len(&t.pc, NULL, b, 48) == 2);
    CHECK(t.pc.st.collisions_total > 0);
    b[40] = 7;
    CHECK(prefix_cache_match_len(&t.pc, NULL, b, 48) == 2);
    b[20] = 7;
    CHECK(prefix_cache_match_len(&t.pc, NULL, b, 48) == 1);
    tree_free(&t);
}

static void test_tree_eviction(void)
{
    struct tree_rig t;
    if (!tree_init(&t, 16, 6)) {
        CHECK(0);
        return;
    }
    int32_t p1[64], p2[64], p3[64], table[4];
    for (int i = 0; i < 64; i++) {
        p1[i] = i;
        p2[i] = 100 + i;
        p3[i] = 200 + i;
    }
    publish(&t, NULL, p1, 64, table);
    publish(&t, NULL, p2, 32, table);
    CHECK(t.pc.st.entries == 6);
    /* Over max_entries: the least recently used leaves go (p1's tail first). */
    struct prefix_lease l;
    int32_t got[4];
    int owner;
    CHECK(prefix_cache_lookup(&t.pc, NULL, p2, 33, got, &l, &owner) == 2); /* p2 pinned and fresh */
    publish(&t, NULL, p3, 32, table);
    CHECK(t.pc.st.entries == 6);
    CHECK(prefix_cache_match_len(&t.pc, NULL, p1, 64) == 2);
    CHECK(prefix_cache_match_len(&t.pc, NULL, p2, 33) == 2);
    CHECK(prefix_cache_match_len(&t.pc, NULL, p3, 33) == 2);
    /* Pool pressure: pinned blocks never go. */
    int freed = prefix_cache_evict(&t.pc, 16);
    CHECK(freed == 4);
    CHECK(prefix_cache_match_len(&t.pc, NULL, p2, 33) == 2);
    prefix_cache_lease_abort(&t.pc, &l);
    CHECK(prefix_cache_evict(&t.pc, 16) == 2 && t.pc.st.entries == 0);
    CHECK(t.pc.st.evicted_blocks_total == 8);
    tree_free(&t);
}

/* ------------------------------------------------------------------ the engine */

static struct hearth_engine *eng(int cache, int blocks)
{
    rig_cache_on = cache;
    struct hearth_engine *e = rig_engine(rig_kv_bytes(blocks), 16, 128, 1);
    rig_cache_on = 1;
    CHECK(e != NULL);
    return e;
}

/* An engine with the prefix cache and one without, for comparing outputs. */
struct pair {
    struct hearth_engine *on, *off;
};

static bool pair_open(struct pair *p, int on_blocks, int off_blocks)
{
    p->on = eng(1, on_blocks);
    p->off = eng(0, off_blocks);
    if (p->on && p->off)
        return true;
    hearth_engine_free(p->on);
    hearth_engine_free(p->off);
    return false;
}

/* Every test ends with the cache engine idle: no lease, free + cached = capacity. */
static void pair_close(struct pair *p)
{
    rig_check_idle(p->on);
    hearth_engine_free(p->on);
    hearth_engine_free(p->off);
}

/* Request b after request a shares `shared` prompt tokens: b's output equals b on a
 * cache-less engine, and cached_tokens is what the rule says. */
static void shared_prefix_case(int shared, int len_b)
{
    struct pair pr;
    if (!pair_open(&pr, 256, 256))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    struct job a, b;
    rig_make_job(&a, 512);
    rig_make_job(&b, 512);
    a.n_prompt = a.p.n_prompt_ids = 100;
    b.n_prompt = b.p.n_prompt_ids = len_b;
    memcpy(b.prompt, a.prompt, (size_t)shared * sizeof(int32_t));
    if (shared < len_b)
        b.prompt[shared] = (a.prompt[shared] + 1) % 512;
    CHECK(rig_run_alone(on, &a));
    CHECK(rig_run_alone(on, &b));
    struct out warm = b.alone;
    CHECK(rig_run_alone(off, &b));
    CHECK_MSG(rig_same_out(&warm, &b.alone, 1), "shared %d: warm output differs from cache-off", shared);
    int full = shared / BS, cap = (len_b - 1) / BS;
    int want = (full < cap ? full : cap) * BS;
    CHECK_MSG(warm.cached_tokens == want, "shared %d len %d: cached %d, want %d", shared, len_b, warm.cached_tokens,
              want);
    CHECK(b.alone.cached_tokens == 0);
    rig_check_idle(off);
    pair_close(&pr);
}

static void test_shared_prefix_lengths(void)
{
    shared_prefix_case(0, 80);        /* nothing shared */
    shared_prefix_case(9, 80);        /* less than a block */
    shared_prefix_case(48, 80);       /* exactly 3 blocks */
    shared_prefix_case(57, 80);       /* 3 blocks and a partial one */
    shared_prefix_case(100, 100);     /* the whole prompt */
    shared_prefix_case(64, 64);       /* whole prompt, block aligned: the last block is recomputed */
}

/* Many requests on one long prefix that nobody has computed yet, arriving together:
 * the prefix is computed once and reused as soon as its blocks are published. */
static void test_early_reuse(void)
{
    struct pair pr;
    if (!pair_open(&pr, 256, 256))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    static struct job jobs[8];
    int32_t prefix[200];
    for (int i = 0; i < 200; i++)
        prefix[i] = (int32_t)rig_rnd(512);
    for (int i = 0; i < 8; i++) {
        rig_make_job(&jobs[i], 512);
        jobs[i].n_prompt = jobs[i].p.n_prompt_ids = 200 + 10 + i;
        memcpy(jobs[i].prompt, prefix, sizeof prefix);
        jobs[i].arrive_step = i < 4 ? 0 : 1 + i;
        CHECK(rig_run_alone(off, &jobs[i]));
    }
    struct hearth_stats before;
    hearth_engine_stats(on, &before);
    CHECK(rig_run_together(on, jobs, 8));
    int hits = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_MSG(rig_same_out(&jobs[i].alone, &jobs[i].together, 1), "job %d differs", i);
        hits += jobs[i].together.cached_tokens > 0;
    }
    CHECK_MSG(hits == 7, "%d of 8 requests hit the shared prefix", hits);
    struct hearth_stats st;
    hearth_engine_stats(on, &st);
    /* The shared 12 blocks were computed once: at most one request's prefill of them. */
    CHECK(st.prompt_tokens_total < 200 + 8 * 30);
    pair_close(&pr);
}

/* A reset while a request runs on cached blocks: refcounts go 2 → 1 → 0 and the
 * output does not change. */
static void test_evict_while_running(void)
{
    struct pair pr;
    if (!pair_open(&pr, 128, 128))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    struct job a, b;
    rig_make_job(&a, 512);
    rig_make_job(&b, 512);
    a.n_prompt = a.p.n_prompt_ids = b.n_prompt = b.p.n_prompt_ids = 90;
    memcpy(b.prompt, a.prompt, 80 * sizeof(int32_t));
    b.p.max_tokens = 30;
    CHECK(rig_run_alone(on, &a));
    char err[HR_ERRLEN];
    CHECK_OK(hearth_submit(on, &b.p, &b.r, err, sizeof err), err);
    engine_step(on);
    struct group *g = on->sched.running.head;
    CHECK(g && g->seqs[0].committed == 90);
    int blk = g ? g->seqs[0].table[0] : 0;
    CHECK(g && block_pool_refcount(&on->pool, blk) == 2);
    hearth_prefix_cache_reset(on);
    engine_step(on);
    CHECK(block_pool_refcount(&on->pool, blk) == 1);
    memset(&b.together, 0, sizeof b.together);
    for (int guard = 0; !b.together.done && guard < 1000; guard++) {
        rig_drain(&b, &b.together);
        engine_step(on);
    }
    hearth_request_free(b.r);
    CHECK(block_pool_refcount(&on->pool, blk) == 0 || on->pc.st.entries > 0);
    CHECK(rig_run_alone(off, &b));
    CHECK(rig_same_out(&b.alone, &b.together, 1));
    CHECK(b.together.cached_tokens == 80);
    pair_close(&pr);
}

static void test_group_on_cached_prefix(void)
{
    struct pair pr;
    if (!pair_open(&pr, 256, 256))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    struct job a, b;
    rig_make_job(&a, 512);
    rig_make_job(&b, 512);
    a.n_prompt = a.p.n_prompt_ids = b.n_prompt = b.p.n_prompt_ids = 70;
    memcpy(b.prompt, a.prompt, 70 * sizeof(int32_t));
    b.p.n = 3;
    b.p.temperature = 1.0f;
    CHECK(rig_run_alone(on, &a));
    CHECK(rig_run_alone(on, &b));
    struct out warm = b.alone;
    CHECK(rig_run_alone(off, &b));
    CHECK(rig_same_out(&warm, &b.alone, 3));
    CHECK(warm.cached_tokens == 64);
    pair_close(&pr);
}

static void test_salts_never_share(void)
{
    struct hearth_engine *on = eng(1, 256);
    if (!on)
        return;
    struct job a;
    rig_make_job(&a, 512);
    a.n_prompt = a.p.n_prompt_ids = 100;
    a.p.cache_salt = "alice";
    CHECK(rig_run_alone(on, &a));
    a.p.cache_salt = "bob";
    CHECK(rig_run_alone(on, &a));
    CHECK(a.alone.cached_tokens == 0);
    a.p.cache_salt = NULL;
    CHECK(rig_run_alone(on, &a));
    CHECK(a.alone.cached_tokens == 0);
    a.p.cache_salt = "alice";
    CHECK(rig_run_alone(on, &a));
    CHECK(a.alone.cached_tokens == 96);
    /* Reset: the next one misses. */
    hearth_prefix_cache_reset(on);
    CHECK(rig_run_alone(on, &a));
    CHECK(a.alone.cached_tokens == 0);
    struct hearth_stats st;
    hearth_engine_stats(on, &st);
    CHECK(st.prefix_cache.invalidations_total == 1);
    rig_check_idle(on);
    hearth_engine_free(on);
}

/* With every hash equal, behaviour and outputs are unchanged. */
static void test_forced_collisions(void)
{
    struct pair pr;
    if (!pair_open(&pr, 256, 256))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    on->pc.hook_hash_collide = true;
    static struct job jobs[6];
    int32_t prefix[64];
    for (int i = 0; i < 64; i++)
        prefix[i] = (int32_t)rig_rnd(512);
    for (int i = 0; i < 6; i++) {
        rig_make_job(&jobs[i], 512);
        if (i % 2)
            memcpy(jobs[i].prompt, prefix, sizeof prefix);
        jobs[i].n_prompt = jobs[i].p.n_prompt_ids = 80;
        jobs[i].arrive_step = 8 * i;
        CHECK(rig_run_alone(off, &jobs[i]));
    }
    CHECK(rig_run_together(on, jobs, 6));
    for (int i = 0; i < 6; i++) {
        CHECK(rig_same_out(&jobs[i].alone, &jobs[i].together, 1));
        CHECK(jobs[i].together.cached_tokens == (i % 2 && i > 1 ? 64 : 0));
    }
    CHECK(on->pc.st.collisions_total > 0);
    pair_close(&pr);
}

/* A pool so small that groups are preempted: recomputation hits their own
 * published blocks, outputs unchanged; cancellations at random steps leak nothing. */
static void test_preempt_and_cancel_with_cache(void)
{
    struct pair pr;
    if (!pair_open(&pr, 40, 256))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    static struct job jobs[16];
    for (int i = 0; i < 16; i++) {
        rig_make_job(&jobs[i], 512);
        jobs[i].n_prompt = jobs[i].p.n_prompt_ids = 30 + (int)rig_rnd(90);
        if (i % 3 == 0)
            memcpy(jobs[i].prompt, jobs[0].prompt, 30 * sizeof(int32_t));
        jobs[i].arrive_step = (int)rig_rnd(20);
        CHECK(rig_run_alone(off, &jobs[i]));
        if (i % 5 == 4)
            jobs[i].cancel_step = jobs[i].arrive_step + (int)rig_rnd(4);
    }
    CHECK(rig_run_together(on, jobs, 16));
    for (int i = 0; i < 16; i++) {
        if (jobs[i].together.done_reason == HEARTH_FINISH_CANCELLED)
            continue;
        CHECK_MSG(rig_same_out(&jobs[i].alone, &jobs[i].together, 1), "job %d differs", i);
    }
    struct hearth_stats st;
    hearth_engine_stats(on, &st);
    CHECK_MSG(st.preemptions > 0, "no preemption happened");
    CHECK(st.prefix_cache.hit_tokens_total > 0);
    pair_close(&pr);
}

/* A failed forward publishes nothing and leaks nothing; the next request is exact. */
static void test_forward_failure(void)
{
    struct pair pr;
    if (!pair_open(&pr, 128, 128))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    struct job a;
    rig_make_job(&a, 512);
    a.n_prompt = a.p.n_prompt_ids = 100;
    char err[HR_ERRLEN];
    CHECK_OK(engine_inject_fault(on, 0, 3, err, sizeof err), err);
    CHECK(rig_run_alone(on, &a));
    CHECK(a.alone.done_reason == HEARTH_FINISH_ERROR && a.alone.n_tok[0] == 0);
    CHECK(on->pc.st.entries == 0);
    rig_check_idle(on);
    CHECK(rig_run_alone(on, &a));
    struct out first = a.alone;
    CHECK(first.cached_tokens == 0 && first.done_reason == HEARTH_FINISH_LENGTH);
    CHECK(rig_run_alone(off, &a));
    CHECK(rig_same_out(&first, &a.alone, 1));
    pair_close(&pr);
}

/* A chat's second turn (first prompt + answer + new message) hits the first turn's
 * prompt and answer, computed during the first turn's decode. */
static void test_multi_turn(void)
{
    struct pair pr;
    if (!pair_open(&pr, 256, 256))
        return;
    struct hearth_engine *on = pr.on, *off = pr.off;
    struct job t1, t2;
    rig_make_job(&t1, 512);
    t1.n_prompt = t1.p.n_prompt_ids = 50;
    t1.p.max_tokens = 40;
    CHECK(rig_run_alone(on, &t1));
    rig_make_job(&t2, 512);
    memcpy(t2.prompt, t1.prompt, 50 * sizeof(int32_t));
    memcpy(t2.prompt + 50, t1.alone.tok[0], 40 * sizeof(int32_t));
    for (int i = 90; i < 110; i++)
        t2.prompt[i] = (int32_t)rig_rnd(512);
    t2.n_prompt = t2.p.n_prompt_ids = 110;
    CHECK(rig_run_alone(on, &t2));
    struct out warm = t2.alone;
    /* The first turn's KV covers 89 tokens (the last answer token was never fed):
     * 5 full blocks. */
    CHECK_MSG(warm.cached_tokens == 80, "cached %d", warm.cached_tokens);
    CHECK(rig_run_alone(off, &t2));
    CHECK(rig_same_out(&warm, &t2.alone, 1));
    pair_close(&pr);
}

/* Admission that cannot get its blocks rolls everything back: the lease on the
 * cached prefix is aborted (refcounts as before, no open lease, free count as
 * before) and the group waits. */
static void test_admission_rollback(void)
{
    struct hearth_engine *e = eng(1, 20);
    if (!e)
        return;
    char err[HR_ERRLEN];
    struct job a, big, b;
    rig_make_job(&a, 512);
    a.n_prompt = a.p.n_prompt_ids = 100; /* 6 full blocks cached afterwards */
    a.p.max_tokens = 1;
    CHECK(rig_run_alone(e, &a));
    CHECK(e->pc.st.entries == 6);
    /* big holds the other 14 blocks while it runs. */
    rig_make_job(&big, 512);
    big.n_prompt = big.p.n_prompt_ids = 200;
    big.p.max_tokens = 20;
    CHECK_OK(hearth_submit(e, &big.p, &big.r, err, sizeof err), err);
    do /* its prefill, in 128-token steps */
        engine_step(e);
    while (e->sched.running.head && e->sched.running.head->seqs[0].committed < 200);
    CHECK(e->sched.running.head != NULL);
    /* b shares a's prefix (5 blocks hit) but needs 3 more blocks than are free. */
    rig_make_job(&b, 512);
    memcpy(b.prompt, a.prompt, 100 * sizeof(int32_t));
    b.n_prompt = b.p.n_prompt_ids = 130;
    int free_before = block_pool_n_free(&e->pool);
    int32_t rc_before[20];
    for (int i = 0; i < 20; i++)
        rc_before[i] = block_pool_refcount(&e->pool, i);
    int64_t lookups_before = e->pc.st.lookups_total;
    CHECK_OK(hearth_submit(e, &b.p, &b.r, err, sizeof err), err);
    engine_step(e);
    CHECK(e->sched.waiting.head != NULL); /* b could not be admitted */
    CHECK(e->pc.st.open_leases == 0);
    CHECK(e->pc.st.lookups_total > lookups_before); /* a lease was opened, then aborted */
    /* Every refcount and the free count are as before the attempt (big's decode
     * step took no new block: its 13th block has room). */
    int same = 1;
    for (int i = 0; i < 20; i++)
        if (block_pool_refcount(&e->pool, i) != rc_before[i]) {
            fprintf(stderr, "  block %d: refcount %d, was %d\n", i, block_pool_refcount(&e->pool, i), rc_before[i]);
            same = 0;
        }
    CHECK(same);
    CHECK(block_pool_n_free(&e->pool) == free_before);
    /* Once big is done, b is admitted and hits the prefix. */
    memset(&big.together, 0, sizeof big.together);
    memset(&b.together, 0, sizeof b.together);
    for (int guard = 0; (!big.together.done || !b.together.done) && guard < 1000; guard++) {
        engine_step(e);
        rig_drain(&big, &big.together);
        rig_drain(&b, &b.together);
    }
    CHECK(b.together.cached_tokens == 96);
    hearth_request_free(big.r);
    hearth_request_free(b.r);
    rig_check_idle(e);
    hearth_engine_free(e);
}

/* Under pool pressure, unused cached blocks are evicted before any running group
 * is preempted. */
static void test_evict_before_preempt(void)
{
    struct hearth_engine *e = eng(1, 24);
    if (!e)
        return;
    struct job j;
    for (int i = 0; i < 3; i++) { /* fill the cache with 3 x 5 blocks nobody uses */
        rig_make_job(&j, 512);
        j.n_prompt = j.p.n_prompt_ids = 80;
        j.p.max_tokens = 1;
        CHECK(rig_run_alone(e, &j));
    }
    CHECK(e->pc.st.entries == 15);
    rig_make_job(&j, 512);
    j.n_prompt = j.p.n_prompt_ids = 150; /* 10 blocks, then 20 more tokens: needs evictions */
    j.p.max_tokens = 40;
    CHECK(rig_run_alone(e, &j));
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    CHECK(st.prefix_cache.evicted_blocks_total > 0);
    CHECK(st.preemptions == 0);
    CHECK(j.alone.completion_tokens == 40);
    rig_check_idle(e);
    hearth_engine_free(e);
}

/* Admission order: lpm takes the group with the longest cached prefix first, unless
 * an older group has waited more than max_wait_steps; fcfs takes the oldest. */
static int first_admitted(const char *schedule, int max_wait, int wait_steps)
{
    rig_cache_on = 1;
    char dir[512], err[HR_ERRLEN];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    p.model_dir = dir;
    p.kv_cache_bytes = rig_kv_bytes(128);
    p.max_num_seqs = 1; /* one group at a time */
    p.schedule = schedule;
    p.max_wait_steps = max_wait;
    struct hearth_engine *e = NULL;
    if (engine_create(&e, &p, false, err, sizeof err) != HR_OK)
        return -1;
    struct job warm, old, cached, busy;
    rig_make_job(&warm, 512);
    warm.n_prompt = warm.p.n_prompt_ids = 80;
    warm.p.max_tokens = 1;
    rig_run_alone(e, &warm);
    rig_make_job(&busy, 512);
    busy.p.max_tokens = 40;
    rig_make_job(&old, 512);
    old.n_prompt = old.p.n_prompt_ids = 80;
    rig_make_job(&cached, 512);
    memcpy(cached.prompt, warm.prompt, 80 * sizeof(int32_t));
    cached.n_prompt = cached.p.n_prompt_ids = 80;
    hearth_submit(e, &busy.p, &busy.r, err, sizeof err);
    engine_step(e); /* busy runs; the next two queue behind it */
    hearth_submit(e, &old.p, &old.r, err, sizeof err);
    for (int i = 0; i < wait_steps; i++)
        engine_step(e);
    hearth_submit(e, &cached.p, &cached.r, err, sizeof err);
    int first = -1;
    for (int guard = 0; first < 0 && guard < 1000; guard++) {
        engine_step(e);
        struct group *g = e->sched.running.head;
        if (g && g->req == old.r)
            first = 0;
        else if (g && g->req == cached.r)
            first = 1;
    }
    hearth_request_free(busy.r);
    hearth_request_free(old.r);
    hearth_request_free(cached.r);
    for (int guard = 0; guard < 100 && engine_step(e); guard++)
        ;
    hearth_engine_free(e);
    return first;
}

static void test_admission_order(void)
{
    CHECK(first_admitted("lpm", 1000, 0) == 1);  /* the cached one overtakes */
    CHECK(first_admitted("fcfs", 1000, 0) == 0); /* first come, first served */
    CHECK(first_admitted("lpm", 8, 30) == 0);    /* the old one waited too long */
}

int main(void)
{
    TEST_RUN(test_tree_lookup_and_leases);
    TEST_RUN(test_tree_namespaces);
    TEST_RUN(test_tree_collisions);
    TEST_RUN(test_tree_eviction);
    TEST_RUN(test_shared_prefix_lengths);
    TEST_RUN(test_early_reuse);
    TEST_RUN(test_evict_while_running);
    TEST_RUN(test_group_on_cached_prefix);
    TEST_RUN(test_salts_never_share);
    TEST_RUN(test_forced_collisions);
    TEST_RUN(test_preempt_and_cancel_with_cache);
    TEST_RUN(test_forward_failure);
    TEST_RUN(test_multi_turn);
    TEST_RUN(test_admission_rollback);
    TEST_RUN(test_evict_before_preempt);
    TEST_RUN(test_admission_order);
    TEST_END();
}
