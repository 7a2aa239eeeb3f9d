/* The prefix cache's host-RAM tier (--kv-cache-host-mib): the tier's index (exact
 * matches only, LRU, its quota of slots, namespaces, pending copies, salts), and the
 * engine with the tier: blocks evicted from a small pool and copied back, with the
 * disk tier below it (the cascade host -> disk, the shutdown flush), on the engine
 * thread, a reset, bad settings.  Outputs (tokens and logprobs) are compared bitwise
 * with runs with the prefix cache off; expected counts are computed from the prompts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/host_tier.h"
#include "engine_rig.h"
#include "test.h"
#include "testfs.h"

#define BS 16
#define DATA 1024

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 7));
}

struct blk {
    int32_t tokens[BS];
    struct path_key key, parent;
    const char *salt;
};

/* Block b of a chain of blocks under salt: tokens b*100 + i + seed. */
static void make_chain(struct blk *out, int n, const char *salt, int seed)
{
    struct path_key parent = path_key_root("ns|bf16|16|cpu", salt);
    for (int b = 0; b < n; b++) {
        for (int i = 0; i < BS; i++)
            out[b].tokens[i] = b * 100 + i + seed;
        out[b].parent = parent;
        out[b].key = path_key_child(parent, out[b].tokens, BS);
        out[b].salt = salt;
        parent = out[b].key;
    }
}

static int put(struct host_tier *ht, const struct blk *b, unsigned seed)
{
    int slot = host_tier_insert(ht, host_tier_victim(ht), b->salt, b->key, b->parent, b->tokens);
    if (slot >= 0)
        fill(host_tier_data(ht, slot), DATA, seed);
    return slot;
}

static int find(struct host_tier *ht, const struct blk *b)
{
    return host_tier_find(ht, b->salt, b->key, b->parent, b->tokens);
}

static int data_is(const struct host_tier *ht, int slot, unsigned seed)
{
    static unsigned char want[DATA];
    fill(want, DATA, seed);
    return slot >= 0 && !memcmp(host_tier_data(ht, slot), want, DATA);
}

/* Five slots: the sixth block evicts the least recently used; a hit makes a block the
 * most recently used; every block's bytes stay its own. */
static void test_lru_and_quota(void)
{
    static unsigned char arena[5 * DATA + DATA / 2];
    struct host_tier ht;
    char err[HR_ERRLEN];
    CHECK_OK(host_tier_init(&ht, arena, sizeof arena, BS, DATA, err, sizeof err), err);
    CHECK(ht.n_slots == 5 && ht.st.capacity_blocks == 5 && ht.st.capacity_bytes == 5 * DATA);
    struct blk b[8];
    make_chain(b, 8, "", 0);
    for (int i = 0; i < 5; i++)
        CHECK(put(&ht, &b[i], (unsigned)i) >= 0);
    CHECK(ht.st.blocks == 5 && ht.st.bytes == 5 * DATA && ht.st.evicted_blocks_total == 0);
    for (int i = 0; i < 5; i++)
        CHECK_MSG(data_is(&ht, find(&ht, &b[i]), (unsigned)i), "block %d", i);
    /* Order of use now 0..4 (finds in order): 0 is the least recently used. */
    CHECK(find(&ht, &b[0]) >= 0); /* 1 is now */
    CHECK(put(&ht, &b[5], 5) >= 0);
    CHECK(find(&ht, &b[1]) < 0 && !host_tier_has(&ht, b[1].key));
    CHECK(put(&ht, &b[6], 6) >= 0);
    CHECK(find(&ht, &b[2]) < 0);
    CHECK(ht.st.evicted_blocks_total == 2 && ht.st.blocks == 5);
    int keep[] = {0, 3, 4, 5, 6};
    for (int i = 0; i < 5; i++)
        CHECK_MSG(data_is(&ht, find(&ht, &b[keep[i]]), (unsigned)keep[i]), "block %d", keep[i]);
    /* The victim is what host_tier_get shows before the insert takes it. */
    struct host_block hb;
    int v = host_tier_victim(&ht);
    CHECK(host_tier_get(&ht, v, &hb) && path_key_eq(hb.key, b[0].key) && !hb.pending);
    CHECK(!memcmp(hb.tokens, b[0].tokens, sizeof b[0].tokens));
    /* A held slot is never the victim; every slot held: no victim. */
    host_tier_hold(&ht, v, true);
    int v2 = host_tier_victim(&ht);
    CHECK(v2 >= 0 && v2 != v && host_tier_get(&ht, v2, &hb) && path_key_eq(hb.key, b[3].key));
    for (int i = 0; i < 5; i++)
        host_tier_hold(&ht, find(&ht, &b[keep[i]]), true);
    CHECK(host_tier_victim(&ht) < 0);
    for (int i = 0; i < 5; i++)
        host_tier_hold(&ht, find(&ht, &b[keep[i]]), false);
    CHECK(host_tier_victim(&ht) >= 0);
    host_tier_remove(&ht, find(&ht, &b[3]));
    CHECK(ht.st.blocks == 4 && find(&ht, &b[3]) < 0);
    CHECK(!host_tier_get(&ht, host_tier_victim(&ht), &hb)); /* a free slot first */
    host_tier_clear(&ht);
    CHECK(ht.st.blocks == 0 && ht.st.bytes == 0 && find(&ht, &b[0]) < 0);
    for (int i = 0; i < 5; i++)
        CHECK(put(&ht, &b[i], (unsigned)i) >= 0);
    CHECK(ht.st.blocks == 5 && ht.st.evicted_blocks_total == 2);
    host_tier_free(&ht);

    /* An arena smaller than a block is refused with a reason; one block's worth holds one. */
    CHECK(host_tier_init(&ht, arena, DATA - 1, BS, DATA, err, sizeof err) == HR_ERR_INVALID);
    CHECK_MSG(strstr(err, "--kv-cache-host-mib") != NULL, "%s", err);
    CHECK_OK(host_tier_init(&ht, arena, DATA, BS, DATA, err, sizeof err), err);
    CHECK(ht.n_slots == 1);
    CHECK(put(&ht, &b[0], 0) >= 0 && put(&ht, &b[1], 1) >= 0);
    CHECK(find(&ht, &b[0]) < 0 && data_is(&ht, find(&ht, &b[1]), 1));
    host_tier_free(&ht);
}

/* A block is found only when key, parent, tokens and salt all match; the same tokens
 * under another salt are another block; a key that names another block is counted and
 * never used. */
static void test_exact_and_namespaces(void)
{
    static unsigned char arena[8 * DATA];
    struct host_tier ht;
    char err[HR_ERRLEN];
    CHECK_OK(host_tier_init(&ht, arena, sizeof arena, BS, DATA, err, sizeof err), err);
    struct blk a[2], b[2];
    make_chain(a, 2, "tenant-a", 0);
    make_chain(b, 2, "tenant-b", 0); /* the same tokens */
    CHECK(!path_key_eq(a[0].key, b[0].key));
    CHECK(put(&ht, &a[0], 1) >= 0 && put(&ht, &a[1], 2) >= 0);
    CHECK(find(&ht, &b[0]) < 0 && find(&ht, &b[1]) < 0);
    CHECK(put(&ht, &b[0], 3) >= 0);
    CHECK(data_is(&ht, find(&ht, &a[0]), 1) && data_is(&ht, find(&ht, &b[0]), 3));

    /* a[1]'s key asked with a wrong parent, tokens or salt. */
    struct blk w = a[1];
    w.parent.lo ^= 1;
    CHECK(find(&ht, &w) < 0);
    w = a[1];
    w.tokens[BS - 1]++;
    CHECK(find(&ht, &w) < 0);
    w = a[1];
    w.salt = "tenant-b";
    CHECK(find(&ht, &w) < 0);
    w.salt = NULL; /* NULL is "" */
    CHECK(find(&ht, &w) < 0);
    CHECK_MSG(ht.st.mismatches_total == 4, "%lld", (long long)ht.st.mismatches_total);
    CHECK(data_is(&ht, find(&ht, &a[1]), 2));

    /* NULL and "" are the same namespace. */
    struct blk n[1];
    make_chain(n, 1, "", 9);
    CHECK(put(&ht, &n[0], 4) >= 0);
    n[0].salt = NULL;
    CHECK(data_is(&ht, find(&ht, &n[0]), 4));
    host_tier_free(&ht);
}

/* Salts are interned while a block of theirs is held: many more salts than slots come
 * and go (ASan sees every copy freed), and the table never runs out. */
static void test_many_salts(void)
{
    static unsigned char arena[3 * DATA];
    struct host_tier ht;
    char err[HR_ERRLEN];
    CHECK_OK(host_tier_init(&ht, arena, sizeof arena, BS, DATA, err, sizeof err), err);
    static char names[64][32];
    for (int i = 0; i < 64; i++) {
        snprintf(names[i], sizeof names[i], "salt-%d", i);
        struct blk b[1];
        make_chain(b, 1, i % 4 == 3 ? "" : names[i], i);
        CHECK(put(&ht, &b[0], (unsigned)i) >= 0);
        CHECK(data_is(&ht, find(&ht, &b[0]), (unsigned)i));
    }
    /* "" and the salts of the 3 blocks held (the last three: 61, 62 ("") and 63). */
    CHECK_MSG(ht.n_salts == 3, "%d salts interned", ht.n_salts);
    CHECK(ht.st.blocks == 3 && ht.st.evicted_blocks_total == 61);
    host_tier_free(&ht);
}

/* Pending copies: a slot marked pending is pending until settled; a failed wait drops
 * exactly the pending ones. */
static void test_pending(void)
{
    static unsigned char arena[4 * DATA];
    struct host_tier ht;
    char err[HR_ERRLEN];
    CHECK_OK(host_tier_init(&ht, arena, sizeof arena, BS, DATA, err, sizeof err), err);
    struct blk b[4];
    make_chain(b, 4, "", 0);
    struct host_block hb;
    int s0 = put(&ht, &b[0], 0);
    host_tier_mark_pending(&ht, s0);
    CHECK(host_tier_any_pending(&ht) && host_tier_get(&ht, s0, &hb) && hb.pending);
    host_tier_settle(&ht);
    CHECK(!host_tier_any_pending(&ht) && host_tier_get(&ht, s0, &hb) && !hb.pending);
    int s1 = put(&ht, &b[1], 1), s2 = put(&ht, &b[2], 2);
    host_tier_mark_pending(&ht, s1);
    host_tier_mark_pending(&ht, s2);
    put(&ht, &b[3], 3); /* not pending */
    host_tier_drop_pending(&ht);
    CHECK(find(&ht, &b[0]) >= 0 && find(&ht, &b[3]) >= 0);
    CHECK(find(&ht, &b[1]) < 0 && find(&ht, &b[2]) < 0);
    CHECK(ht.st.blocks == 2 && !host_tier_any_pending(&ht));
    host_tier_free(&ht);
}

/* ------------------------------------------------------------------ the engine */

static struct hearth_engine *tier_engine(int pool_blocks, int host_blocks, const char *kv_dir, bool threaded)
{
    char dir[512], err[HR_ERRLEN];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    p.model_dir = dir;
    p.kv_cache_bytes = rig_kv_bytes(pool_blocks);
    p.max_num_seqs = 16;
    p.max_batched_tokens = 128;
    p.n_threads = 2;
    p.kv_cache_host_bytes = rig_kv_bytes(host_blocks);
    p.kv_cache_dir = kv_dir;
    p.kv_cache_disk_bytes = (size_t)64 << 20;
    struct hearth_engine *e = NULL;
    enum hr_status st = threaded ? hearth_engine_init(&e, &p, err, sizeof err)
                                 : engine_create(&e, &p, false, err, sizeof err);
    if (st != HR_OK)
        fprintf(stderr, "  engine_create: %s\n", err);
    return e;
}

/* n jobs over n_prefix shared prefixes of 32..95 tokens, each with a suffix of its own;
 * every output is computed alone with the prefix cache off (the reference). */
static void make_jobs(struct job *jobs, int n, int n_prefix, const char *salt)
{
    static int32_t prefixes[4][96];
    static int plen[4];
    for (int k = 0; k < n_prefix; k++) {
        plen[k] = 32 + (int)rig_rnd(64);
        for (int i = 0; i < plen[k]; i++)
            prefixes[k][i] = (int32_t)rig_rnd(512);
    }
    rig_cache_on = 0;
    struct hearth_engine *ref = rig_engine(rig_kv_bytes(256), 8, 128, 1);
    rig_cache_on = 1;
    CHECK(ref != NULL);
    for (int i = 0; i < n; i++) {
        struct job *j = &jobs[i];
        rig_make_job(j, 512);
        int k = i % n_prefix;
        memcpy(j->prompt, prefixes[k], (size_t)plen[k] * sizeof(int32_t));
        int suffix = 1 + (int)rig_rnd(40);
        for (int t = 0; t < suffix; t++)
            j->prompt[plen[k] + t] = (int32_t)rig_rnd(512);
        j->n_prompt = plen[k] + suffix;
        j->p.prompt_ids = j->prompt;
        j->p.n_prompt_ids = j->n_prompt;
        j->p.max_tokens = 4 + (int)rig_rnd(20);
        j->p.cache_salt = salt;
        j->arrive_step = (int)rig_rnd(6);
        if (ref)
            CHECK(rig_run_alone(ref, j));
    }
    hearth_engine_free(ref);
}

static int check_same(struct job *jobs, int n, const char *what)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!rig_same_out(&jobs[i].alone, &jobs[i].together, 1)) {
            CHECK_MSG(0, "%s: request %d (prompt %d) differs from the cache-off run", what, i, jobs[i].n_prompt);
            bad++;
        }
    return bad;
}

static struct hearth_stats stats(struct hearth_engine *e)
{
    engine_step(e); /* publishes the stats (nothing to run) */
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    return st;
}

/* A pool of 40 (then 24) blocks and 16 requests over 4 shared prefixes, 3 rounds:
 * blocks are evicted to host RAM while they run and copied back for later requests;
 * outputs equal the cache-off runs; no block or lease leaks; the tier's books add up. */
static void evict_to_host_and_back(int pool_blocks, int host_blocks)
{
    static struct job jobs[16];
    make_jobs(jobs, 16, 4, "s");
    struct hearth_engine *e = tier_engine(pool_blocks, host_blocks, NULL, false);
    CHECK(e != NULL);
    if (!e)
        return;
    int64_t cached = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 16; i++)
            jobs[i].arrive_step = round == 0 ? (int)rig_rnd(6) : 3 * i;
        CHECK(rig_run_together(e, jobs, 16));
        check_same(jobs, 16, round == 0 ? "round 0" : "round 1+");
        rig_check_idle(e);
        CHECK(engine_max_block_refcount(e) <= 1);
        for (int i = 0; i < 16; i++)
            cached += jobs[i].together.cached_tokens;
    }
    struct hearth_stats st = stats(e);
    const struct hearth_host_cache_stats *h = &st.host_cache;
    fprintf(stderr,
            "  pool %d, host %d blocks, 16 requests, 3 rounds: %lld stored, %lld restored (%lld hits of %lld "
            "lookups), %lld evicted, %lld preemptions\n",
            pool_blocks, host_blocks, (long long)h->stored_blocks_total, (long long)h->blocks_restored_total,
            (long long)h->hits_total, (long long)h->lookups_total, (long long)h->evicted_blocks_total,
            (long long)st.preemptions);
    CHECK(h->enabled && h->capacity_blocks == host_blocks);
    CHECK_MSG(h->stored_blocks_total > 0 && h->blocks_restored_total > 0, "stored %lld, restored %lld",
              (long long)h->stored_blocks_total, (long long)h->blocks_restored_total);
    CHECK(h->hit_tokens_total == h->blocks_restored_total * BS);
    CHECK(h->bytes_in_total == h->stored_blocks_total * (int64_t)rig_kv_bytes(1));
    CHECK(h->bytes_out_total == h->blocks_restored_total * (int64_t)rig_kv_bytes(1));
    CHECK(h->hits_total + h->misses_total == h->lookups_total && h->hits_total > 0);
    CHECK(h->blocks == h->stored_blocks_total - h->evicted_blocks_total && h->blocks <= host_blocks);
    CHECK(h->copy_errors_total == 0 && h->mismatches_total == 0 && h->evicted_to_disk_total == 0);
    /* cached_tokens counts the blocks from host RAM: more than the pool alone served. */
    CHECK_MSG(cached == st.prefix_cache.hit_tokens_total + h->hit_tokens_total || st.preemptions > 0,
              "cached %lld, pool %lld + host %lld", (long long)cached, (long long)st.prefix_cache.hit_tokens_total,
              (long long)h->hit_tokens_total);
    hearth_engine_free(e);
}

static void test_evict_to_host_and_back(void)
{
    evict_to_host_and_back(40, 256);
    evict_to_host_and_back(24, 256);
    evict_to_host_and_back(24, 12); /* the host tier evicts too */
}

/* Runs unrelated jobs on e until no block of j's prompt is left in the pool. */
static void push_out_of_pool(struct hearth_engine *e, const struct job *j)
{
    for (int guard = 0; guard < 40; guard++) {
        if (prefix_cache_match_len(&e->pc, j->p.cache_salt, j->prompt, j->n_prompt) == 0)
            return;
        struct job x;
        rig_make_job(&x, 512);
        x.n_prompt = 120;
        for (int i = 0; i < x.n_prompt; i++)
            x.prompt[i] = (int32_t)rig_rnd(512);
        x.prompt[0] = (j->prompt[0] + 1) % 512; /* no block of j's path */
        x.p.prompt_ids = x.prompt;
        x.p.n_prompt_ids = x.n_prompt;
        x.p.max_tokens = 8;
        x.p.cache_salt = j->p.cache_salt;
        CHECK(rig_run_alone(e, &x));
    }
    CHECK_MSG(0, "the pool kept a block of the prompt");
}

/* A job of known prompt: its cached tokens on a rerun, once its blocks left the pool,
 * are its whole prompt's blocks, counted from the prompt; they came from host RAM (or
 * from the disk below it), and another salt finds none of them. */
static void test_exact_counts(void)
{
    static struct job jobs[1], other[1];
    make_jobs(jobs, 1, 1, NULL);
    struct job *a = &jobs[0];
    int want = (a->n_prompt - 1) / BS; /* the blocks a lookup may take */
    struct hearth_engine *e = tier_engine(24, 64, NULL, false);
    CHECK(e != NULL);
    if (!e)
        return;
    a->arrive_step = 0;
    CHECK(rig_run_together(e, jobs, 1));
    check_same(jobs, 1, "first run");
    push_out_of_pool(e, a);
    struct hearth_stats before = stats(e);
    CHECK(before.host_cache.blocks >= want);
    CHECK(rig_run_together(e, jobs, 1));
    check_same(jobs, 1, "from host RAM");
    struct hearth_stats after = stats(e);
    CHECK_MSG(a->together.cached_tokens == want * BS, "cached %d, want %d", a->together.cached_tokens, want * BS);
    CHECK_MSG(after.host_cache.blocks_restored_total - before.host_cache.blocks_restored_total == want,
              "restored %lld, want %d",
              (long long)(after.host_cache.blocks_restored_total - before.host_cache.blocks_restored_total), want);
    CHECK(after.host_cache.hits_total - before.host_cache.hits_total == 1);

    /* The same prompt under another salt: nothing from any tier. */
    *other = *a;
    other->p.cache_salt = "tenant-b";
    other->p.prompt_ids = other->prompt;
    CHECK(rig_run_together(e, other, 1));
    check_same(other, 1, "another salt");
    struct hearth_stats salted = stats(e);
    CHECK(other->together.cached_tokens == 0);
    CHECK(salted.host_cache.blocks_restored_total == after.host_cache.blocks_restored_total);

    /* A reset empties the host tier too. */
    push_out_of_pool(e, a);
    hearth_prefix_cache_reset(e);
    struct hearth_stats reset = stats(e);
    CHECK_MSG(reset.host_cache.blocks == 0, "%lld blocks left", (long long)reset.host_cache.blocks);
    CHECK(rig_run_together(e, jobs, 1));
    check_same(jobs, 1, "after a reset");
    CHECK(a->together.cached_tokens == 0);
    rig_check_idle(e);
    hearth_engine_free(e);
}

/* Runs one job of n prompt tokens (a path of its own) and g generated on e. */
static void run_filler(struct hearth_engine *e, const struct job *j, int n, int g)
{
    struct job x;
    rig_make_job(&x, 512);
    x.n_prompt = n;
    for (int i = 0; i < n; i++)
        x.prompt[i] = (int32_t)rig_rnd(512);
    x.prompt[0] = (j->prompt[0] + 1) % 512;
    x.p.prompt_ids = x.prompt;
    x.p.n_prompt_ids = n;
    x.p.max_tokens = g;
    x.p.cache_salt = j->p.cache_salt;
    CHECK(rig_run_alone(e, &x));
}

/* Blocks of j's prompt path the host tier holds. */
static int in_host(struct hearth_engine *e, const struct job *j)
{
    struct path_key key = path_key_root(e->pc.ns_desc, j->p.cache_salt);
    int n = 0;
    for (int b = 0; b < (j->n_prompt - 1) / BS; b++) {
        key = path_key_child(key, j->prompt + b * BS, BS);
        n += host_tier_has(&e->restore.ht, key);
    }
    return n;
}

/* A full host tier whose least recently used blocks are the prompt's: admitting it
 * makes room in the pool, whose evictions go to the host tier; the blocks it is about
 * to copy back are held, the others make room, and the whole prompt comes back. */
static void test_full_host_tier(void)
{
    static struct job jobs[1];
    make_jobs(jobs, 1, 1, NULL);
    struct job *a = &jobs[0];
    int want = (a->n_prompt - 1) / BS;
    struct hearth_engine *e = tier_engine(24, 40, NULL, false);
    CHECK(e != NULL);
    if (!e)
        return;
    CHECK(rig_run_together(e, jobs, 1));
    push_out_of_pool(e, a);
    /* Fillers of one whole block until the host tier is full, a's blocks still in it. */
    for (int guard = 0; guard < 100 && stats(e).host_cache.blocks < 40; guard++)
        run_filler(e, a, 20, 2);
    struct hearth_stats before = stats(e);
    CHECK_MSG(before.host_cache.blocks == 40 && in_host(e, a) == want, "host %lld blocks, %d of a's %d",
              (long long)before.host_cache.blocks, in_host(e, a), want);
    CHECK(block_pool_n_free(&e->pool) < want + 1); /* a's admission evicts from the pool */
    CHECK(rig_run_together(e, jobs, 1));
    check_same(jobs, 1, "from a full host tier");
    struct hearth_stats after = stats(e);
    CHECK_MSG(a->together.cached_tokens == want * BS, "cached %d of %d", a->together.cached_tokens, want * BS);
    CHECK(after.host_cache.evicted_blocks_total > before.host_cache.evicted_blocks_total);
    rig_check_idle(e);
    hearth_engine_free(e);
}

/* Host RAM above a disk tier: blocks pushed out of the pool go to host RAM, blocks
 * pushed out of host RAM go on to disk, and a prompt whose blocks lie in both comes
 * back whole; at a clean shutdown the blocks in host RAM are written too. */
static void test_cascade_to_disk(void)
{
    char kvdir[512];
    if (!testfs_mkdtemp(kvdir, sizeof kvdir, "host-cascade")) {
        CHECK(0);
        return;
    }
    static struct job jobs[1];
    make_jobs(jobs, 1, 1, "c");
    struct job *a = &jobs[0];
    int want = (a->n_prompt - 1) / BS;
    /* A host tier of 4 blocks: pushing a's blocks out of the pool pushes most of them
     * out of host RAM too. */
    struct hearth_engine *e = tier_engine(24, 4, kvdir, false);
    CHECK(e != NULL);
    if (!e)
        return;
    CHECK(rig_run_together(e, jobs, 1));
    push_out_of_pool(e, a);
    disk_tier_drain(&e->restore.dt);
    struct hearth_stats before = stats(e);
    CHECK_MSG(before.host_cache.evicted_to_disk_total > 0 && before.disk_cache.written_blocks_total > 0,
              "to disk %lld, written %lld", (long long)before.host_cache.evicted_to_disk_total,
              (long long)before.disk_cache.written_blocks_total);
    CHECK(before.host_cache.evicted_to_disk_total <= before.host_cache.evicted_blocks_total);
    CHECK(rig_run_together(e, jobs, 1));
    check_same(jobs, 1, "from host RAM and disk");
    struct hearth_stats after = stats(e);
    int64_t from_host = after.host_cache.blocks_restored_total - before.host_cache.blocks_restored_total;
    int64_t from_disk = after.disk_cache.blocks_restored_total - before.disk_cache.blocks_restored_total;
    CHECK_MSG(a->together.cached_tokens == want * BS && from_host + from_disk == want && from_disk > 0,
              "cached %d of %d, %lld blocks from host RAM, %lld from disk", a->together.cached_tokens, want * BS,
              (long long)from_host, (long long)from_disk);
    rig_check_idle(e);
    hearth_engine_free(e);

    /* A big host tier: a's blocks leave the pool for host RAM only; the shutdown writes
     * them, and a fresh engine (no host tier) finds them all on disk. */
    testfs_rmtree(kvdir);
    e = tier_engine(24, 256, kvdir, false);
    CHECK(e != NULL);
    if (!e)
        return;
    CHECK(rig_run_together(e, jobs, 1));
    push_out_of_pool(e, a);
    struct hearth_stats mid = stats(e);
    CHECK(mid.disk_cache.written_blocks_total == 0 && mid.host_cache.evicted_blocks_total == 0);
    hearth_engine_free(e);
    e = tier_engine(256, 0, kvdir, false);
    CHECK(e != NULL);
    if (!e)
        return;
    CHECK(rig_run_together(e, jobs, 1));
    check_same(jobs, 1, "from disk after the host tier's flush");
    CHECK_MSG(a->together.cached_tokens == want * BS, "cached %d of %d", a->together.cached_tokens, want * BS);
    CHECK(!stats(e).host_cache.enabled);
    hearth_engine_free(e);
    testfs_rmtree(kvdir);
}

/* Both tiers under a small pool with many requests: outputs equal, nothing leaks. */
static void test_cascade_load(void)
{
    char kvdir[512];
    if (!testfs_mkdtemp(kvdir, sizeof kvdir, "host-load")) {
        CHECK(0);
        return;
    }
    static struct job jobs[16];
    make_jobs(jobs, 16, 4, NULL);
    struct hearth_engine *e = tier_engine(24, 8, kvdir, false);
    CHECK(e != NULL);
    if (!e)
        return;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 16; i++)
            jobs[i].arrive_step = round == 0 ? (int)rig_rnd(6) : 3 * i;
        CHECK(rig_run_together(e, jobs, 16));
        check_same(jobs, 16, "host and disk");
        rig_check_idle(e);
        CHECK(engine_max_block_refcount(e) <= 1);
    }
    struct hearth_stats st = stats(e);
    fprintf(stderr, "  host: %lld restored, %lld to disk; disk: %lld written, %lld restored\n",
            (long long)st.host_cache.blocks_restored_total, (long long)st.host_cache.evicted_to_disk_total,
            (long long)st.disk_cache.written_blocks_total, (long long)st.disk_cache.blocks_restored_total);
    CHECK(st.host_cache.blocks_restored_total > 0 && st.host_cache.evicted_to_disk_total > 0);
    CHECK(st.disk_cache.blocks_restored_total > 0 && st.disk_cache.files_rejected_total == 0);
    hearth_engine_free(e);
    testfs_rmtree(kvdir);
}

/* The engine thread: 8 requests at once, twice, with the tier under a small pool. */
static void test_threaded(void)
{
    static struct job jobs[8];
    make_jobs(jobs, 8, 2, NULL);
    struct hearth_engine *e = tier_engine(24, 64, NULL, true);
    CHECK(e != NULL);
    if (!e)
        return;
    char err[HR_ERRLEN];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 8; i++)
            CHECK_OK(hearth_submit(e, &jobs[i].p, &jobs[i].r, err, sizeof err), err);
        for (int i = 0; i < 8; i++) {
            struct hearth_event ev;
            memset(&jobs[i].together, 0, sizeof jobs[i].together);
            while (jobs[i].r && !jobs[i].together.done) {
                if (hearth_request_next_event(jobs[i].r, &ev, 20000) != HR_OK) {
                    CHECK_MSG(0, "request %d: no event within 20 s", i);
                    break;
                }
                rig_record(&jobs[i].together, &ev);
            }
            hearth_request_free(jobs[i].r);
            jobs[i].r = NULL;
        }
        check_same(jobs, 8, "threaded");
    }
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    CHECK(st.host_cache.stored_blocks_total > 0);
    hearth_engine_free(e);
}

/* Settings that cannot work are refused with a reason. */
static void test_bad_settings(void)
{
    char dir[512], err[HR_ERRLEN];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    p.model_dir = dir;
    p.kv_cache_bytes = rig_kv_bytes(64);
    p.n_threads = 1;
    struct hearth_engine *e = NULL;
    p.kv_cache_host_bytes = rig_kv_bytes(1) - 1; /* less than one block */
    CHECK(engine_create(&e, &p, false, err, sizeof err) == HR_ERR_INVALID && !e);
    CHECK_MSG(strstr(err, "--kv-cache-host-mib") && strstr(err, "block"), "%s", err);
    p.kv_cache_host_bytes = (size_t)1 << 62; /* more than the machine */
    CHECK(engine_create(&e, &p, false, err, sizeof err) == HR_ERR_INVALID && !e);
    CHECK_MSG(strstr(err, "more than this machine's memory"), "%s", err);
    p.kv_cache_host_bytes = rig_kv_bytes(8);
    p.prefix_cache = false;
    CHECK(engine_create(&e, &p, false, err, sizeof err) == HR_ERR_INVALID && !e);
    CHECK_MSG(strstr(err, "--kv-cache-host-mib needs the prefix cache"), "%s", err);
    p.prefix_cache = true;
    CHECK_OK(engine_create(&e, &p, false, err, sizeof err), err);
    if (e)
        CHECK(e->restore.host_on && e->restore.ht.n_slots == 8 && !e->restore.disk_on);
    hearth_engine_free(e);
}

int main(void)
{
    TEST_RUN(test_lru_and_quota);
    TEST_RUN(test_exact_and_namespaces);
    TEST_RUN(test_many_salts);
    TEST_RUN(test_pending);
    TEST_RUN(test_evict_to_host_and_back);
    TEST_RUN(test_exact_counts);
    TEST_RUN(test_full_host_tier);
    TEST_RUN(test_cascade_to_disk);
    TEST_RUN(test_cascade_load);
    TEST_RUN(test_threaded);
    TEST_RUN(test_bad_settings);
    TEST_END();
}
