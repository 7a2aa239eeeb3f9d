/* The prefix cache's disk tier: block files (every header field and the checksum
 * checked), the directory's index and quota, and the engine with --kv-cache-dir:
 * a warm restart, eviction to disk and back under a small pool, files damaged on
 * disk.  Outputs (tokens and logprobs) are compared bitwise with a run with the
 * prefix cache off. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/disk_file.h"
#include "cache/disk_tier.h"
#include "engine_rig.h"
#include "test.h"
#include "testfs.h"

#define BS 16
#define DATA 4096

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 7));
}

static struct disk_block_id block_id(const int32_t *tokens, const char *ns, const char *salt)
{
    struct path_key root = path_key_root(ns, salt);
    return (struct disk_block_id){.ns = ns, .salt = salt, .key = path_key_child(root, tokens, BS),
                                  .parent = root, .tokens = tokens, .block_size = BS, .data_bytes = DATA};
}

static void file_path(char *buf, size_t n, const char *dir, struct path_key key)
{
    char name[DISK_FILE_NAME_MAX];
    disk_file_name(key, name);
    snprintf(buf, n, "%s/%s", dir, name);
}

static int count_files(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        n += strstr(de->d_name, needle) != NULL;
    if (d)
        closedir(d);
    return n;
}

static void flip_byte(const char *path, long off)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        return;
    if (off < 0) {
        fseek(f, 0, SEEK_END);
        off += ftell(f);
    }
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

/* A block written and read back is the same bytes; each kind of damage or mismatch
 * is refused, and the destination is never handed over. */
static void test_file_roundtrip_and_rejects(void)
{
    char dir[512], err[HR_ERRLEN], path[1024];
    if (!testfs_mkdtemp(dir, sizeof dir, "disk-file")) {
        CHECK(0);
        return;
    }
    int32_t tokens[BS], other[BS];
    for (int i = 0; i < BS; i++) {
        tokens[i] = 100 + i;
        other[i] = 100 + i + (i == BS - 1);
    }
    static unsigned char data[DATA], back[DATA];
    fill(data, DATA, 1);
    struct disk_block_id id = block_id(tokens, "model-a|bf16|16|cpu-avx2", "");
    CHECK_OK(disk_file_write(dir, &id, data, 1, err, sizeof err), err);
    CHECK(count_files(dir, DISK_FILE_TMP) == 0);
    CHECK_OK(disk_file_read(dir, &id, back, err, sizeof err), err);
    CHECK(!memcmp(data, back, DATA));

    /* Same key asked under another namespace, salt, parent or tokens: refused. */
    struct disk_block_id w = id;
    w.ns = "model-a|bf16|16|cpu-avx512";
    CHECK(disk_file_read(dir, &w, back, err, sizeof err) == HR_ERR_FORMAT);
    w = id;
    w.salt = "tenant-b";
    CHECK(disk_file_read(dir, &w, back, err, sizeof err) == HR_ERR_FORMAT);
    w = id;
    w.parent.lo ^= 1;
    CHECK(disk_file_read(dir, &w, back, err, sizeof err) == HR_ERR_FORMAT);
    w = id;
    w.tokens = other;
    CHECK(disk_file_read(dir, &w, back, err, sizeof err) == HR_ERR_FORMAT);
    w = id;
    w.key.hi ^= 1;
    CHECK(disk_file_read(dir, &w, back, err, sizeof err) == HR_ERR_NOT_FOUND);

    file_path(path, sizeof path, dir, id.key);
    /* One flipped bit in the data, in the header, in the checksum. */
    long offs[3] = {-100, 20, -1};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(disk_file_write(dir, &id, data, 2 + k, err, sizeof err), err);
        flip_byte(path, offs[k]);
        CHECK_MSG(disk_file_read(dir, &id, back, err, sizeof err) == HR_ERR_FORMAT, "flip at %ld", offs[k]);
    }
    /* Truncated, and empty. */
    CHECK_OK(disk_file_write(dir, &id, data, 9, err, sizeof err), err);
    CHECK(truncate(path, (off_t)disk_file_size(&id) - 1) == 0);
    CHECK(disk_file_read(dir, &id, back, err, sizeof err) == HR_ERR_FORMAT);
    CHECK(truncate(path, 0) == 0);
    CHECK(disk_file_read(dir, &id, back, err, sizeof err) == HR_ERR_FORMAT);
    /* A write into a directory that is gone fails cleanly. */
    char gone[600];
    snprintf(gone, sizeof gone, "%s/missing", dir);
    CHECK(disk_file_write(gone, &id, data, 10, err, sizeof err) == HR_ERR_IO);
    testfs_rmtree(dir);
}

/* The index: built from the directory (temporary files removed, foreign names
 * ignored), least recently used files removed past the quota. */
static void test_tier_index_and_quota(void)
{
    char dir[512], err[HR_ERRLEN];
    if (!testfs_mkdtemp(dir, sizeof dir, "disk-tier")) {
        CHECK(0);
        return;
    }
    testfs_write_str(dir, "0123456789abcdef0123456789abcdef.kvb.tmp.1.2", "torn");
    testfs_write_str(dir, "notes.txt", "not ours");
    static unsigned char data[DATA];
    int32_t tokens[6][BS];
    struct disk_block_id ids[6];
    for (int b = 0; b < 6; b++) {
        for (int i = 0; i < BS; i++)
            tokens[b][i] = b * 1000 + i;
        ids[b] = block_id(tokens[b], "ns", "");
    }
    size_t fb = disk_file_size(&ids[0]);
    struct disk_tier dt;
    /* Room for three files. */
    CHECK_OK(disk_tier_init(&dt, dir, 3 * fb + fb / 2, BS, DATA, NULL, NULL, err, sizeof err), err);
    CHECK(count_files(dir, DISK_FILE_TMP) == 0);
    CHECK(dt.st.files == 0);
    for (int b = 0; b < 5; b++) {
        fill(data, DATA, (unsigned)b);
        CHECK_OK(disk_tier_write_now(&dt, "ns", "", ids[b].key, ids[b].parent, tokens[b], data, err, sizeof err),
                 err);
    }
    struct hearth_disk_cache_stats st;
    disk_tier_stats(&dt, &st);
    CHECK(st.files == 3 && st.files_evicted_total == 2 && st.written_blocks_total == 5);
    CHECK(st.bytes == (int64_t)(3 * fb));
    CHECK(!disk_tier_has(&dt, ids[0].key) && !disk_tier_has(&dt, ids[1].key));
    CHECK(disk_tier_has(&dt, ids[2].key) && disk_tier_has(&dt, ids[4].key));
    CHECK(count_files(dir, DISK_FILE_SUFFIX) == 3);

    /* A read stops at the first block it cannot use; a damaged one is removed. */
    struct disk_read *rd = disk_read_new("ns", "", 0, 3, BS, DATA);
    CHECK(rd != NULL);
    if (rd) {
        rd->keys[0] = ids[2].parent;
        for (int b = 0; b < 3; b++) {
            rd->keys[b + 1] = ids[2 + b].key;
            memcpy(rd->tokens + b * BS, tokens[2 + b], sizeof tokens[0]);
        }
        /* Not a chain: block 3's file names the root as its parent, not block 2. */
        disk_tier_read_now(&dt, rd);
        CHECK(rd->n_ok == 1);
        fill(data, DATA, 2);
        CHECK(!memcmp(rd->data, data, DATA));
        disk_read_free(rd);
    }
    disk_tier_stats(&dt, &st);
    CHECK(st.files_rejected_total == 1 && st.files == 2);
    disk_tier_free(&dt);

    /* A restart finds the files left; a quota of less than one file keeps none and
     * writes none. */
    CHECK_OK(disk_tier_init(&dt, dir, 3 * fb, BS, DATA, NULL, NULL, err, sizeof err), err);
    CHECK(dt.st.files == 2);
    disk_tier_clear(&dt);
    CHECK(dt.st.files == 0 && count_files(dir, DISK_FILE_SUFFIX) == 0);
    disk_tier_free(&dt);
    CHECK_OK(disk_tier_init(&dt, dir, fb - 1, BS, DATA, NULL, NULL, err, sizeof err), err);
    CHECK_OK(disk_tier_write_now(&dt, "ns", "", ids[0].key, ids[0].parent, tokens[0], data, err, sizeof err), err);
    disk_tier_stats(&dt, &st);
    CHECK(st.files == 0 && st.writes_dropped_total == 1);
    disk_tier_free(&dt);
    CHECK(count_files(dir, "notes.txt") == 1);
    testfs_rmtree(dir);
}

/* Blocks queued for the disk are found and read back before their files exist (a
 * request right after an eviction), with the checks a file gets; a cleared tier's
 * queued blocks are not. */
static void test_queued_blocks(void)
{
    char dir[512], err[HR_ERRLEN];
    if (!testfs_mkdtemp(dir, sizeof dir, "disk-queue")) {
        CHECK(0);
        return;
    }
    enum { NB = 6 };
    int32_t tokens[NB][BS];
    struct path_key keys[NB + 1];
    keys[0] = path_key_root("ns", "");
    for (int b = 0; b < NB; b++) {
        for (int i = 0; i < BS; i++)
            tokens[b][i] = 7 * b + i;
        keys[b + 1] = path_key_child(keys[b], tokens[b], BS);
    }
    struct disk_tier dt;
    CHECK_OK(disk_tier_init(&dt, dir, (uint64_t)1 << 24, BS, DATA, NULL, NULL, err, sizeof err), err);
    disk_tier_hold_writes(&dt, true);
    for (int b = 0; b < NB; b++) {
        unsigned char *data = malloc(DATA);
        if (data)
            fill(data, DATA, 50u + (unsigned)b);
        disk_tier_put(&dt, "ns", "", keys[b + 1], keys[b], tokens[b], data);
    }
    struct hearth_disk_cache_stats st;
    disk_tier_stats(&dt, &st);
    CHECK(st.files == 0 && st.written_blocks_total == 0);
    CHECK(disk_tier_count_run(&dt, keys + 1, NB) == NB);
    static unsigned char want[DATA];
    for (int pass = 0; pass < 2; pass++) { /* queued, then from the files */
        struct disk_read *rd = disk_read_new("ns", "", 0, NB, BS, DATA);
        CHECK(rd != NULL);
        if (!rd)
            break;
        memcpy(rd->keys, keys, sizeof keys);
        memcpy(rd->tokens, tokens, sizeof tokens);
        disk_tier_read_now(&dt, rd);
        CHECK_MSG(rd->n_ok == NB, "pass %d: %d of %d blocks read", pass, rd->n_ok, NB);
        for (int b = 0; b < rd->n_ok; b++) {
            fill(want, DATA, 50u + (unsigned)b);
            CHECK_MSG(!memcmp(rd->data + (size_t)b * DATA, want, DATA), "pass %d: block %d's bytes", pass, b);
        }
        /* another block's tokens under block 3's key: the read stops there */
        rd->tokens[3 * BS] ^= 1;
        disk_tier_read_now(&dt, rd);
        CHECK(rd->n_ok == 3);
        disk_read_free(rd);
        disk_tier_stats(&dt, &st);
        if (pass == 0) {
            CHECK_MSG(st.pending_reads_total == NB + 3 && st.files == 0, "%lld pending reads, %lld files",
                      (long long)st.pending_reads_total, (long long)st.files);
            disk_tier_hold_writes(&dt, false);
            disk_tier_drain(&dt);
            disk_tier_stats(&dt, &st);
            CHECK(st.files == NB && st.written_blocks_total == NB);
        } else {
            CHECK(st.pending_reads_total == NB + 3);
        }
    }
    /* queued, then cleared: gone */
    disk_tier_clear(&dt);
    disk_tier_hold_writes(&dt, true);
    unsigned char *data = malloc(DATA);
    if (data)
        fill(data, DATA, 1);
    disk_tier_put(&dt, "ns", "", keys[1], keys[0], tokens[0], data);
    CHECK(disk_tier_count_run(&dt, keys + 1, NB) == 1);
    disk_tier_clear(&dt);
    CHECK(disk_tier_count_run(&dt, keys + 1, NB) == 0);
    disk_tier_free(&dt); /* stopping writes what is queued and current: nothing here */
    CHECK(count_files(dir, DISK_FILE_SUFFIX) == 0);
    testfs_rmtree(dir);
}

/* ------------------------------------------------------------------ the engine */

static struct hearth_engine *disk_engine(const char *kv_dir, int pool_blocks, int cache_on)
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
    p.prefix_cache = cache_on;
    p.kv_cache_dir = kv_dir;
    p.kv_cache_disk_bytes = (size_t)64 << 20;
    struct hearth_engine *e = NULL;
    if (engine_create(&e, &p, false, err, sizeof err) != HR_OK)
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
    struct hearth_engine *ref = NULL;
    rig_cache_on = 0;
    ref = rig_engine(rig_kv_bytes(256), 8, 128, 1);
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

static struct hearth_disk_cache_stats disk_stats(struct hearth_engine *e)
{
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    return st.disk_cache;
}

/* Serve, stop, start again on the same directory, serve the same prompts: each
 * prompt's shared blocks come from disk (cached tokens > 0), and every output is
 * bitwise the cache-off output. */
static void test_warm_restart(void)
{
    char kvdir[512];
    if (!testfs_mkdtemp(kvdir, sizeof kvdir, "disk-restart")) {
        CHECK(0);
        return;
    }
    static struct job jobs[8];
    make_jobs(jobs, 8, 2, NULL);
    struct hearth_engine *e = disk_engine(kvdir, 256, 1);
    CHECK(e != NULL);
    if (!e)
        return;
    CHECK(rig_run_together(e, jobs, 8));
    check_same(jobs, 8, "first run");
    rig_check_idle(e);
    struct hearth_disk_cache_stats d = disk_stats(e);
    CHECK(d.enabled && d.written_blocks_total == 0); /* nothing evicted yet */
    hearth_engine_free(e); /* the clean shutdown writes every cached block */
    CHECK(count_files(kvdir, DISK_FILE_SUFFIX) > 0);

    e = disk_engine(kvdir, 256, 1);
    CHECK(e != NULL);
    if (!e)
        return;
    for (int i = 0; i < 8; i++)
        jobs[i].arrive_step = 2 * i; /* one at a time: each is looked up on disk */
    CHECK(rig_run_together(e, jobs, 8));
    check_same(jobs, 8, "after the restart");
    d = disk_stats(e);
    CHECK_MSG(d.blocks_restored_total > 0 && d.hit_tokens_total == d.blocks_restored_total * BS,
              "restored %lld blocks, %lld tokens", (long long)d.blocks_restored_total,
              (long long)d.hit_tokens_total);
    CHECK(d.files_rejected_total == 0);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(jobs[i].together.cached_tokens == ((jobs[i].n_prompt - 1) / BS) * BS,
                  "request %d: %d cached of %d", i, jobs[i].together.cached_tokens, jobs[i].n_prompt);
    rig_check_idle(e);
    hearth_engine_free(e);

    /* All at once: the first of each shared prefix reads it, the others follow (they
     * read nothing and take the prefix from memory once it is published). */
    e = disk_engine(kvdir, 256, 1);
    CHECK(e != NULL);
    if (!e)
        return;
    for (int i = 0; i < 8; i++)
        jobs[i].arrive_step = 0;
    CHECK(rig_run_together(e, jobs, 8));
    check_same(jobs, 8, "all at once after a restart");
    d = disk_stats(e);
    /* Each block is read once: jobs 0 and 1 (the first of each prefix) read their whole
     * prompts, the others only their blocks past what they share with them. */
    int64_t distinct = 0;
    for (int i = 0; i < 8; i++) {
        int nb = (jobs[i].n_prompt - 1) / BS, shared = 0;
        const struct job *l = &jobs[i % 2];
        while (i >= 2 && shared < nb && shared < (l->n_prompt - 1) / BS &&
               !memcmp(jobs[i].prompt, l->prompt, (size_t)(shared + 1) * BS * sizeof(int32_t)))
            shared++;
        distinct += nb - shared;
    }
    CHECK_MSG(d.lookups_total == 8 && d.blocks_restored_total == distinct,
              "%lld lookups, %lld blocks restored, %lld distinct", (long long)d.lookups_total,
              (long long)d.blocks_restored_total, (long long)distinct);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(jobs[i].together.cached_tokens == ((jobs[i].n_prompt - 1) / BS) * BS,
                  "request %d: %d cached of %d", i, jobs[i].together.cached_tokens, jobs[i].n_prompt);
    rig_check_idle(e);
    hearth_engine_free(e);

    /* The same prompts in another namespace (cache_salt) find nothing. */
    for (int i = 0; i < 8; i++)
        jobs[i].p.cache_salt = "tenant-b";
    e = disk_engine(kvdir, 256, 1);
    if (e) {
        CHECK(rig_run_together(e, jobs, 8));
        check_same(jobs, 8, "another salt");
        CHECK(jobs[0].together.cached_tokens == 0);
        CHECK(disk_stats(e).blocks_restored_total == 0);
        rig_check_idle(e);
        hearth_engine_free(e);
    }
    testfs_rmtree(kvdir);
}

/* A pool of 40 (then 24) blocks and 16 requests over 4 shared prefixes: blocks are evicted to
 * disk while they run and read back by later requests; outputs equal the cache-off
 * runs, and no block or lease leaks. */
static void evict_to_disk_and_back(int pool_blocks)
{
    char kvdir[512];
    if (!testfs_mkdtemp(kvdir, sizeof kvdir, "disk-evict")) {
        CHECK(0);
        return;
    }
    static struct job jobs[16];
    make_jobs(jobs, 16, 4, "s");
    struct hearth_engine *e = disk_engine(kvdir, pool_blocks, 1);
    CHECK(e != NULL);
    if (!e)
        return;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 16; i++)
            jobs[i].arrive_step = round == 0 ? (int)rig_rnd(6) : 3 * i;
        CHECK(rig_run_together(e, jobs, 16));
        check_same(jobs, 16, round == 0 ? "round 0" : "round 1+");
        rig_check_idle(e);
        CHECK(engine_max_block_refcount(e) <= 1);
    }
    struct hearth_disk_cache_stats d = disk_stats(e);
    struct hearth_stats hs;
    hearth_engine_stats(e, &hs);
    fprintf(stderr, "  %d blocks, 16 requests, 3 rounds: %lld blocks written, %lld restored, %lld preemptions\n",
            pool_blocks, (long long)d.written_blocks_total, (long long)d.blocks_restored_total, (long long)hs.preemptions);
    /* Evicted blocks came back through the tier: read from their files, or from the
     * write queue when the writer thread had not got to them yet (a loaded machine
     * can leave every write queued until the end: written may still be 0 here). */
    CHECK_MSG(d.blocks_restored_total > 0, "written %lld, restored %lld", (long long)d.written_blocks_total,
              (long long)d.blocks_restored_total);
    CHECK(d.files_rejected_total == 0 && d.write_errors_total == 0);
    hearth_engine_free(e); /* the queued writes are done by now */
    int files = count_files(kvdir, ".kvb");
    CHECK_MSG(files > 0, "no block file on disk after the engine stopped (%lld written while it ran)",
              (long long)d.written_blocks_total);
    testfs_rmtree(kvdir);
}

static void test_evict_to_disk_and_back(void)
{
    evict_to_disk_and_back(40);
    evict_to_disk_and_back(24);
}

/* Files damaged between two runs — truncated, a bit flipped, one namespace's file
 * put under another's name — and a directory that disappears: each damaged file is
 * counted and removed, never loaded, and every output still equals the cache-off run. */
static void test_damaged_files(void)
{
    char kvdir[512], path[1024], path2[1024];
    if (!testfs_mkdtemp(kvdir, sizeof kvdir, "disk-damage")) {
        CHECK(0);
        return;
    }
    static struct job jobs[4], other[4];
    make_jobs(jobs, 4, 4, "a");
    make_jobs(other, 4, 4, "b");
    struct hearth_engine *e = disk_engine(kvdir, 256, 1);
    if (!e) {
        CHECK(0);
        return;
    }
    CHECK(rig_run_together(e, jobs, 4));
    CHECK(rig_run_together(e, other, 4));
    hearth_engine_free(e);

    /* The first block file of jobs 0..2's prompts (namespace "a"). */
    struct path_key keys[4], okey;
    char desc[PREFIX_NS_DESC_MAX];
    e = disk_engine(kvdir, 256, 1);
    if (!e) {
        CHECK(0);
        return;
    }
    snprintf(desc, sizeof desc, "%s", e->pc.ns_desc);
    for (int i = 0; i < 3; i++)
        keys[i] = path_key_child(path_key_root(desc, "a"), jobs[i].prompt, BS);
    okey = path_key_child(path_key_root(desc, "b"), other[3].prompt, BS);
    file_path(path, sizeof path, kvdir, keys[0]);
    CHECK(truncate(path, 1000) == 0);
    file_path(path, sizeof path, kvdir, keys[1]);
    flip_byte(path, -5000);
    /* Namespace b's file under namespace a's name. */
    file_path(path, sizeof path, kvdir, keys[2]);
    file_path(path2, sizeof path2, kvdir, okey);
    CHECK(rename(path2, path) == 0);

    for (int i = 0; i < 4; i++)
        jobs[i].arrive_step = 2 * i;
    CHECK(rig_run_together(e, jobs, 4));
    check_same(jobs, 4, "damaged files");
    struct hearth_disk_cache_stats d = disk_stats(e);
    CHECK_MSG(d.files_rejected_total == 3, "rejected %lld", (long long)d.files_rejected_total);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(jobs[i].together.cached_tokens == 0, "request %d: %d cached from a damaged file", i,
                  jobs[i].together.cached_tokens);
    CHECK(jobs[3].together.cached_tokens > 0);
    rig_check_idle(e);

    /* The directory goes away under a running server: writes fail, it keeps serving. */
    testfs_rmtree(kvdir);
    CHECK(rig_run_together(e, other, 4));
    check_same(other, 4, "directory gone");
    hearth_engine_free(e); /* the shutdown flush fails, counted and logged */
}

/* The engine thread: reads go through the I/O thread while the others run. */
static void test_threaded_restore(void)
{
    char kvdir[512], model[512], err[HR_ERRLEN];
    if (!testfs_mkdtemp(kvdir, sizeof kvdir, "disk-thread")) {
        CHECK(0);
        return;
    }
    snprintf(model, sizeof model, "%s/fixtures/qwen3-tiny", test_data_dir());
    static struct job jobs[8];
    make_jobs(jobs, 8, 2, NULL);
    for (int round = 0; round < 2; round++) {
        struct hearth_engine_params p;
        hearth_engine_params_default(&p);
        p.model_dir = model;
        p.kv_cache_bytes = rig_kv_bytes(128);
        p.n_threads = 2;
        p.kv_cache_dir = kvdir;
        struct hearth_engine *e = NULL;
        CHECK_OK(hearth_engine_init(&e, &p, err, sizeof err), err);
        if (!e)
            break;
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
        check_same(jobs, 8, round ? "threaded, after a restart" : "threaded");
        if (round == 1) {
            struct hearth_disk_cache_stats d = disk_stats(e);
            CHECK(d.blocks_restored_total > 0);
        }
        hearth_engine_free(e);
    }
    /* Requests that go away while their blocks are being read, then the engine. */
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    p.model_dir = model;
    p.kv_cache_bytes = rig_kv_bytes(128);
    p.n_threads = 2;
    p.kv_cache_dir = kvdir;
    struct hearth_engine *e = NULL;
    CHECK_OK(hearth_engine_init(&e, &p, err, sizeof err), err);
    if (e) {
        for (int i = 0; i < 8; i++)
            CHECK_OK(hearth_submit(e, &jobs[i].p, &jobs[i].r, err, sizeof err), err);
        for (int i = 0; i < 8; i += 2)
            hearth_request_free(jobs[i].r);
        hearth_engine_free(e);
        for (int i = 1; i < 8; i += 2)
            hearth_request_free(jobs[i].r);
    }
    testfs_rmtree(kvdir);
}

int main(void)
{
    TEST_RUN(test_file_roundtrip_and_rejects);
    TEST_RUN(test_tier_index_and_quota);
    TEST_RUN(test_queued_blocks);
    TEST_RUN(test_warm_restart);
    TEST_RUN(test_evict_to_disk_and_back);
    TEST_RUN(test_damaged_files);
    TEST_RUN(test_threaded_restore);
    TEST_END();
}
