/* The disk tier (see disk_tier.h). */
#define _GNU_SOURCE
#include "cache/disk_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "cache/disk_file.h"

#define DISK_TIER_QUEUE_MAX ((size_t)256 << 20)

struct disk_entry {
    struct path_key key;
    uint64_t bytes;
    int32_t chain;             /* next in the bucket, or the free list */
    int32_t lru_prev, lru_next;
    bool used;
};

struct disk_write {
    struct disk_write *next;
    uint64_t generation;
    char *ns, *salt;
    struct path_key key, parent;
    int32_t *tokens;           /* [block_size] */
    void *data;                /* [block_bytes] */
};

/* ------------------------------------------------------------------ index (under mu) */

static int disk_bucket(const struct disk_tier *dt, struct path_key k)
{
    return (int)((k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)) & (uint64_t)(dt->n_buckets - 1));
}

static int disk_find(const struct disk_tier *dt, struct path_key k)
{
    if (!dt->n_buckets)
        return -1;
    for (int i = dt->buckets[disk_bucket(dt, k)]; i >= 0; i = dt->entries[i].chain)
        if (path_key_eq(dt->entries[i].key, k))
            return i;
    return -1;
}

static void disk_lru_unlink(struct disk_tier *dt, int i)
{
    struct disk_entry *e = &dt->entries[i];
    if (e->lru_prev >= 0)
        dt->entries[e->lru_prev].lru_next = e->lru_next;
    else
        dt->lru_head = e->lru_next;
    if (e->lru_next >= 0)
        dt->entries[e->lru_next].lru_prev = e->lru_prev;
    else
        dt->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = -1;
}

static void disk_lru_push(struct disk_tier *dt, int i)
{
    struct disk_entry *e = &dt->entries[i];
    e->lru_prev = dt->lru_tail;
    e->lru_next = -1;
    if (dt->lru_tail >= 0)
        dt->entries[dt->lru_tail].lru_next = i;
    else
        dt->lru_head = i;
    dt->lru_tail = i;
}

static void disk_touch(struct disk_tier *dt, int i)
{
    if (dt->lru_tail == i)
        return;
    disk_lru_unlink(dt, i);
    disk_lru_push(dt, i);
}

/* Doubles the entry storage and rebuilds the buckets; false when out of memory. */
static bool disk_grow(struct disk_tier *dt)
{
    int cap = dt->cap ? dt->cap * 2 : 1024;
    struct disk_entry *en = realloc(dt->entries, (size_t)cap * sizeof *en);
    if (!en)
        return false;
    dt->entries = en;
    int32_t *bk = malloc((size_t)cap * 2 * sizeof *bk);
    if (!bk)
        return false;
    free(dt->buckets);
    dt->buckets = bk;
    dt->n_buckets = cap * 2;
    for (int i = 0; i < dt->n_buckets; i++)
        dt->buckets[i] = -1;
    for (int i = dt->cap; i < cap; i++) {
        en[i].used = false;
        en[i].chain = i + 1 < cap ? i + 1 : dt->free_head;
    }
    dt->free_head = dt->cap;
    for (int i = 0; i < dt->cap; i++) {
        if (!en[i].used)
            continue;
        int b = disk_bucket(dt, en[i].key);
        en[i].chain = dt->buckets[b];
        dt->buckets[b] = i;
    }
    dt->cap = cap;
    return true;
}

/* Adds or refreshes key (most recently used); -1 when out of memory. */
static int disk_index_add(struct disk_tier *dt, struct path_key key, uint64_t bytes)
{
    int i = disk_find(dt, key);
    if (i >= 0) {
        dt->st.bytes += (int64_t)bytes - (int64_t)dt->entries[i].bytes;
        dt->entries[i].bytes = bytes;
        disk_touch(dt, i);
        return i;
    }
    if (dt->free_head < 0 && !disk_grow(dt))
        return -1;
    i = dt->free_head;
    struct disk_entry *e = &dt->entries[i];
    dt->free_head = e->chain;
    e->key = key;
    e->bytes = bytes;
    e->used = true;
    int b = disk_bucket(dt, key);
    e->chain = dt->buckets[b];
    dt->buckets[b] = i;
    disk_lru_push(dt, i);
    dt->st.files++;
    dt->st.bytes += (int64_t)bytes;
    return i;
}

/* Forgets entry i and removes its file. */
static void disk_index_remove(struct disk_tier *dt, int i, bool unlink_file)
{
    struct disk_entry *e = &dt->entries[i];
    int32_t *p = &dt->buckets[disk_bucket(dt, e->key)];
    while (*p != i)
        p = &dt->entries[*p].chain;
    *p = e->chain;
    disk_lru_unlink(dt, i);
    if (unlink_file) {
        char name[DISK_FILE_NAME_MAX], path[PATH_MAX + DISK_FILE_NAME_MAX];
        disk_file_name(e->key, name);
        snprintf(path, sizeof path, "%s/%s", dt->dir, name);
        unlink(path);
    }
    dt->st.files--;
    dt->st.bytes -= (int64_t)e->bytes;
    e->used = false;
    e->chain = dt->free_head;
    dt->free_head = i;
}

/* Least recently used files go until the directory fits the quota (keep: -1 or an
 * entry that stays). */
static void disk_enforce_quota(struct disk_tier *dt, int keep)
{
    while ((uint64_t)dt->st.bytes > dt->quota && dt->lru_head >= 0) {
        int i = dt->lru_head == keep ? dt->entries[keep].lru_next : dt->lru_head;
        if (i < 0)
            break;
        disk_index_remove(dt, i, true);
        dt->st.files_evicted_total++;
    }
}

/* ------------------------------------------------------------------ start-up scan */

struct disk_found {
    struct path_key key;
    uint64_t bytes;
    int64_t mtime_ns;
};

static int disk_found_cmp(const void *a, const void *b)
{
    const struct disk_found *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

static enum hr_status disk_scan(struct disk_tier *dt, char *err, size_t errlen)
{
    DIR *d = opendir(dt->dir);
    if (!d)
        return hr_err(err, errlen, HR_ERR_IO, "--kv-cache-dir %s: %s", dt->dir, strerror(errno));
    struct disk_found *found = NULL;
    size_t n = 0, cap = 0;
    enum hr_status st = HR_OK;
    struct dirent *de;
    size_t sfx = strlen(DISK_FILE_SUFFIX);
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dt->dir, name);
        if (strstr(name, DISK_FILE_SUFFIX DISK_FILE_TMP)) {
            unlink(path); /* a writer died before its rename */
            continue;
        }
        struct path_key k;
        if (strlen(name) != 32 + sfx || strcmp(name + 32, DISK_FILE_SUFFIX) || !path_key_parse(name, &k))
            continue;
        struct stat sb;
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            struct disk_found *f = realloc(found, nc * sizeof *f);
            if (!f) {
                st = hr_err(err, errlen, HR_ERR_NOMEM, "disk cache: out of memory indexing %s", dt->dir);
                break;
            }
            found = f;
            cap = nc;
        }
        found[n++] = (struct disk_found){.key = k, .bytes = (uint64_t)sb.st_size,
                                         .mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec};
    }
    closedir(d);
    if (st == HR_OK) {
        if (n > 1)
            qsort(found, n, sizeof *found, disk_found_cmp);
        for (size_t i = 0; i < n && st == HR_OK; i++)
            if (disk_index_add(dt, found[i].key, found[i].bytes) < 0)
                st = hr_err(err, errlen, HR_ERR_NOMEM, "disk cache: out of memory indexing %s", dt->dir);
        disk_enforce_quota(dt, -1);
    }
    free(found);
    return st;
}

/* ------------------------------------------------------------------ the I/O thread */

static void disk_write_free(struct disk_write *w)
{
    if (!w)
        return;
    free(w->ns);
    free(w->salt);
    free(w->tokens);
    free(w->data);
    free(w);
}

void disk_read_free(struct disk_read *rd)
{
    if (!rd)
        return;
    free(rd->ns);
    free(rd->salt);
    free(rd->keys);
    free(rd->tokens);
    free(rd->data);
    free(rd);
}

/* The queued (or being written) block of key, or NULL (mu held).  A block evicted to
 * disk is found here until its file is indexed: a request that comes right after the
 * eviction would otherwise miss what the tier was given. */
static struct disk_write *disk_pending(const struct disk_tier *dt, struct path_key key)
{
    if (dt->w_cur && path_key_eq(dt->w_cur->key, key))
        return dt->w_cur;
    for (struct disk_write *w = dt->w_head; w; w = w->next)
        if (w->generation == dt->generation && path_key_eq(w->key, key))
            return w;
    return NULL;
}

/* Copies block b of rd from a pending write when it is the same block (namespace,
 * salt, parent and tokens, as a file read checks them); mu held. */
static bool disk_read_pending(const struct disk_tier *dt, struct disk_read *rd, int b)
{
    const struct disk_write *w = disk_pending(dt, rd->keys[b + 1]);
    size_t tb = (size_t)rd->block_size * sizeof *rd->tokens;
    if (!w || strcmp(w->ns, rd->ns) || strcmp(w->salt, rd->salt) || !path_key_eq(w->parent, rd->keys[b]) ||
        memcmp(w->tokens, rd->tokens + (size_t)b * rd->block_size, tb))
        return false;
    memcpy(rd->data + (size_t)b * rd->block_bytes, w->data, rd->block_bytes);
    return true;
}

/* Writes one block and indexes it (mu not held on entry or exit). */
static enum hr_status disk_write_block(struct disk_tier *dt, const char *ns, const char *salt, struct path_key key,
                                       struct path_key parent, const int32_t *tokens, const void *data, char *err,
                                       size_t errlen)
{
    struct disk_block_id id = {.ns = ns, .salt = salt, .key = key, .parent = parent, .tokens = tokens,
                               .block_size = dt->block_size, .data_bytes = dt->block_bytes};
    size_t bytes = disk_file_size(&id);
    pthread_mutex_lock(&dt->mu);
    uint64_t tag = dt->tag++;
    bool skip = disk_find(dt, key) >= 0 || bytes > dt->quota;
    if (bytes > dt->quota)
        dt->st.writes_dropped_total++;
    pthread_mutex_unlock(&dt->mu);
    if (skip)
        return HR_OK;
    enum hr_status st = disk_file_write(dt->dir, &id, data, tag, err, errlen);
    pthread_mutex_lock(&dt->mu);
    if (st == HR_OK) {
        int i = disk_index_add(dt, key, bytes);
        dt->st.written_blocks_total++;
        dt->st.written_bytes_total += (int64_t)bytes;
        disk_enforce_quota(dt, i);
    } else {
        dt->st.write_errors_total++;
    }
    pthread_mutex_unlock(&dt->mu);
    return st;
}

/* Reads rd's blocks in order until one is missing or fails its checks (mu not held). */
static void disk_read_blocks(struct disk_tier *dt, struct disk_read *rd)
{
    rd->n_ok = 0;
    /* Ask for every file at once (the device reads them in parallel), then read them
     * in order. */
    for (int b = 0; b < rd->n; b++) {
        char name[DISK_FILE_NAME_MAX], path[PATH_MAX + DISK_FILE_NAME_MAX];
        disk_file_name(rd->keys[b + 1], name);
        snprintf(path, sizeof path, "%s/%s", dt->dir, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            break;
        posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
        close(fd);
    }
    for (int b = 0; b < rd->n; b++) {
        struct path_key key = rd->keys[b + 1];
        pthread_mutex_lock(&dt->mu);
        int i = disk_find(dt, key);
        if (i >= 0)
            disk_touch(dt, i);
        bool queued = i < 0 && disk_read_pending(dt, rd, b);
        if (queued)
            dt->st.pending_reads_total++;
        pthread_mutex_unlock(&dt->mu);
        if (queued) {
            rd->n_ok++;
            continue;
        }
        if (i < 0)
            break;
        struct disk_block_id want = {.ns = rd->ns, .salt = rd->salt, .key = key, .parent = rd->keys[b],
                                     .tokens = rd->tokens + (size_t)b * rd->block_size,
                                     .block_size = rd->block_size, .data_bytes = rd->block_bytes};
        char err[HR_ERRLEN];
        enum hr_status st = disk_file_read(dt->dir, &want, rd->data + (size_t)b * rd->block_bytes, err, sizeof err);
        pthread_mutex_lock(&dt->mu);
        if (st == HR_OK) {
            dt->st.read_bytes_total += (int64_t)disk_file_size(&want);
        } else {
            /* A file that is not what its name says is never used again. */
            if (st == HR_ERR_FORMAT) {
                dt->st.files_rejected_total++;
                log_warn("%s: removed", err);
            }
            i = disk_find(dt, key);
            if (i >= 0)
                disk_index_remove(dt, i, st == HR_ERR_FORMAT);
        }
        pthread_mutex_unlock(&dt->mu);
        if (st != HR_OK)
            break;
        rd->n_ok++;
    }
}

static void *disk_tier_thread(void *arg)
{
    struct disk_tier *dt = arg;
    pthread_mutex_lock(&dt->mu);
    for (;;) {
        while (!dt->stopping && !dt->r_head && (!dt->w_head || dt->hold_writes))
            pthread_cond_wait(&dt->cv, &dt->mu);
        if (dt->r_head && !dt->stopping) {
            struct disk_read *rd = dt->r_head;
            dt->r_head = rd->next;
            if (!dt->r_head)
                dt->r_tail = NULL;
            pthread_mutex_unlock(&dt->mu);
            disk_read_blocks(dt, rd);
            pthread_mutex_lock(&dt->mu);
            rd->next = NULL;
            if (dt->done_tail)
                dt->done_tail->next = rd;
            else
                dt->done_head = rd;
            dt->done_tail = rd;
            pthread_mutex_unlock(&dt->mu);
            if (dt->on_read_done)
                dt->on_read_done(dt->ctx);
            pthread_mutex_lock(&dt->mu);
            continue;
        }
        if (dt->w_head && (!dt->hold_writes || dt->stopping)) {
            struct disk_write *w = dt->w_head;
            dt->w_head = w->next;
            if (!dt->w_head)
                dt->w_tail = NULL;
            dt->w_bytes -= dt->block_bytes;
            bool stale = w->generation != dt->generation;
            dt->busy++;
            if (!stale)
                dt->w_cur = w;
            pthread_mutex_unlock(&dt->mu);
            char err[HR_ERRLEN];
            bool failed = !stale && disk_write_block(dt, w->ns, w->salt, w->key, w->parent, w->tokens, w->data,
                                                     err, sizeof err) != HR_OK;
            pthread_mutex_lock(&dt->mu);
            dt->w_cur = NULL; /* no reader holds it: they copy under mu */
            disk_write_free(w);
            /* A full disk fails every write: say so at the 1st, 2nd, 4th, 8th... */
            int64_t n = dt->st.write_errors_total;
            if (failed && (n & (n - 1)) == 0)
                log_warn("%s (%lld failed writes so far)", err, (long long)n);
            dt->busy--;
            if (!dt->w_head && !dt->busy)
                pthread_cond_broadcast(&dt->cv_idle);
            continue;
        }
        if (dt->stopping)
            break;
    }
    pthread_mutex_unlock(&dt->mu);
    return NULL;
}

/* ------------------------------------------------------------------ API */

enum hr_status disk_tier_init(struct disk_tier *dt, const char *dir, uint64_t quota_bytes, int block_size,
                              size_t block_bytes, void (*on_read_done)(void *ctx), void *ctx, char *err,
                              size_t errlen)
{
    memset(dt, 0, sizeof *dt);
    dt->free_head = dt->lru_head = dt->lru_tail = -1;
    if (!dir || !*dir || strlen(dir) >= sizeof dt->dir - DISK_FILE_NAME_MAX - 64)
        return hr_err(err, errlen, HR_ERR_INVALID, "--kv-cache-dir: empty or too long");
    if (quota_bytes == 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "--kv-cache-disk-mib must be >= 1");
    snprintf(dt->dir, sizeof dt->dir, "%s", dir);
    dt->quota = quota_bytes;
    dt->block_size = block_size;
    dt->block_bytes = block_bytes;
    dt->write_queue_max = DISK_TIER_QUEUE_MAX;
    dt->on_read_done = on_read_done;
    dt->ctx = ctx;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return hr_err(err, errlen, HR_ERR_IO, "--kv-cache-dir %s: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return hr_err(err, errlen, HR_ERR_IO, "--kv-cache-dir %s: not a directory", dir);
    pthread_mutex_init(&dt->mu, NULL);
    pthread_cond_init(&dt->cv, NULL);
    pthread_cond_init(&dt->cv_idle, NULL);
    dt->st.enabled = true; /* from here on disk_tier_free undoes init */
    dt->st.quota_bytes = (int64_t)quota_bytes;
    enum hr_status st = disk_scan(dt, err, errlen);
    if (st == HR_OK) {
        if (pthread_create(&dt->thread, NULL, disk_tier_thread, dt) != 0)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "disk cache: cannot start the I/O thread");
        else
            dt->thread_started = true;
    }
    if (st != HR_OK)
        disk_tier_free(dt);
    return st;
}

void disk_tier_free(struct disk_tier *dt)
{
    if (!dt || !dt->st.enabled)
        return;
    if (dt->thread_started) {
        pthread_mutex_lock(&dt->mu);
        dt->stopping = true;
        pthread_cond_broadcast(&dt->cv);
        pthread_mutex_unlock(&dt->mu);
        pthread_join(dt->thread, NULL);
    }
    while (dt->w_head) {
        struct disk_write *w = dt->w_head;
        dt->w_head = w->next;
        disk_write_free(w);
    }
    struct disk_read *lists[2] = {dt->r_head, dt->done_head};
    for (int l = 0; l < 2; l++)
        for (struct disk_read *rd = lists[l], *next; rd; rd = next) {
            next = rd->next;
            disk_read_free(rd);
        }
    free(dt->entries);
    free(dt->buckets);
    pthread_mutex_destroy(&dt->mu);
    pthread_cond_destroy(&dt->cv);
    pthread_cond_destroy(&dt->cv_idle);
    memset(dt, 0, sizeof *dt);
}

int disk_tier_count_run(struct disk_tier *dt, const struct path_key *keys, int n)
{
    pthread_mutex_lock(&dt->mu);
    int k = 0;
    while (k < n && (disk_find(dt, keys[k]) >= 0 || disk_pending(dt, keys[k])))
        k++;
    pthread_mutex_unlock(&dt->mu);
    return k;
}

bool disk_tier_has(struct disk_tier *dt, struct path_key key)
{
    return disk_tier_count_run(dt, &key, 1) == 1;
}

void disk_tier_put(struct disk_tier *dt, const char *ns, const char *salt, struct path_key key,
                   struct path_key parent, const int32_t *tokens, void *data)
{
    struct disk_write *w = calloc(1, sizeof *w);
    size_t tb = (size_t)dt->block_size * sizeof *tokens;
    if (w) {
        w->ns = strdup(ns);
        w->salt = strdup(salt ? salt : "");
        w->tokens = malloc(tb);
        w->data = data;
        data = NULL;
    }
    pthread_mutex_lock(&dt->mu);
    if (!w || !w->ns || !w->salt || !w->tokens || !w->data ||
        dt->w_bytes + dt->block_bytes > dt->write_queue_max || dt->stopping) {
        dt->st.writes_dropped_total++;
        pthread_mutex_unlock(&dt->mu);
        free(data);
        disk_write_free(w);
        return;
    }
    memcpy(w->tokens, tokens, tb);
    w->key = key;
    w->parent = parent;
    w->generation = dt->generation;
    if (dt->w_tail)
        dt->w_tail->next = w;
    else
        dt->w_head = w;
    dt->w_tail = w;
    dt->w_bytes += dt->block_bytes;
    pthread_cond_signal(&dt->cv);
    pthread_mutex_unlock(&dt->mu);
}

enum hr_status disk_tier_write_now(struct disk_tier *dt, const char *ns, const char *salt, struct path_key key,
                                   struct path_key parent, const int32_t *tokens, const void *data, char *err,
                                   size_t errlen)
{
    return disk_write_block(dt, ns, salt ? salt : "", key, parent, tokens, data, err, errlen);
}

void disk_tier_hold_writes(struct disk_tier *dt, bool hold)
{
    pthread_mutex_lock(&dt->mu);
    dt->hold_writes = hold;
    pthread_cond_signal(&dt->cv);
    pthread_mutex_unlock(&dt->mu);
}

void disk_tier_drain(struct disk_tier *dt)
{
    pthread_mutex_lock(&dt->mu);
    while (dt->w_head || dt->busy)
        pthread_cond_wait(&dt->cv_idle, &dt->mu);
    pthread_mutex_unlock(&dt->mu);
}

struct disk_read *disk_read_new(const char *ns, const char *salt, int first, int n, int block_size,
                                size_t block_bytes)
{
    struct disk_read *rd = calloc(1, sizeof *rd);
    if (!rd)
        return NULL;
    rd->ns = strdup(ns);
    rd->salt = strdup(salt ? salt : "");
    rd->first = first;
    rd->n = n;
    rd->block_size = block_size;
    rd->block_bytes = block_bytes;
    rd->keys = malloc((size_t)(n + 1) * sizeof *rd->keys);
    rd->tokens = malloc((size_t)n * (size_t)block_size * sizeof *rd->tokens);
    rd->data = malloc((size_t)n * block_bytes);
    if (!rd->ns || !rd->salt || !rd->keys || !rd->tokens || !rd->data) {
        disk_read_free(rd);
        return NULL;
    }
    return rd;
}

void disk_tier_read_submit(struct disk_tier *dt, struct disk_read *rd)
{
    pthread_mutex_lock(&dt->mu);
    rd->next = NULL;
    rd->n_ok = 0;
    if (dt->r_tail)
        dt->r_tail->next = rd;
    else
        dt->r_head = rd;
    dt->r_tail = rd;
    pthread_cond_signal(&dt->cv);
    pthread_mutex_unlock(&dt->mu);
}

void disk_tier_read_now(struct disk_tier *dt, struct disk_read *rd)
{
    disk_read_blocks(dt, rd);
}

struct disk_read *disk_tier_read_take_done(struct disk_tier *dt)
{
    pthread_mutex_lock(&dt->mu);
    struct disk_read *rd = dt->done_head;
    if (rd) {
        dt->done_head = rd->next;
        if (!dt->done_head)
            dt->done_tail = NULL;
        rd->next = NULL;
    }
    pthread_mutex_unlock(&dt->mu);
    return rd;
}

void disk_tier_clear(struct disk_tier *dt)
{
    pthread_mutex_lock(&dt->mu);
    dt->generation++;
    while (dt->lru_head >= 0)
        disk_index_remove(dt, dt->lru_head, true);
    pthread_mutex_unlock(&dt->mu);
}

void disk_tier_count_lookup(struct disk_tier *dt, int blocks_found)
{
    pthread_mutex_lock(&dt->mu);
    dt->st.lookups_total++;
    if (blocks_found > 0)
        dt->st.hits_total++;
    else
        dt->st.misses_total++;
    dt->st.hit_blocks_total += blocks_found;
    pthread_mutex_unlock(&dt->mu);
}

void disk_tier_count_restored(struct disk_tier *dt, int blocks, int tokens)
{
    pthread_mutex_lock(&dt->mu);
    dt->st.blocks_restored_total += blocks;
    dt->st.hit_tokens_total += tokens;
    pthread_mutex_unlock(&dt->mu);
}

void disk_tier_stats(struct disk_tier *dt, struct hearth_disk_cache_stats *out)
{
    if (!dt->st.enabled) {
        memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&dt->mu);
    *out = dt->st;
    pthread_mutex_unlock(&dt->mu);
}
