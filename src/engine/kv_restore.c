/* The engine's side of the disk tier (see kv_restore.h). */
#include "engine/kv_restore.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/sequence.h"

/* Reads in flight hold their blocks in host memory: at most this much. */
#define KV_RESTORE_INFLIGHT_MAX ((size_t)1 << 30)

static void kv_restore_on_evict(void *ctx, const struct prefix_block *b)
{
    struct kv_restore *rs = ctx;
    if (disk_tier_has(&rs->dt, b->key))
        return; /* on disk already (it was restored from there, or written before) */
    void *buf = malloc(rs->kv->block_bytes);
    char err[HR_ERRLEN];
    if (!buf) {
        disk_tier_put(&rs->dt, rs->pc->ns_desc, b->salt, b->key, b->parent, b->tokens, NULL);
        return;
    }
    if (rs->be->ops->kv_export(rs->be, rs->kv, b->block, buf, err, sizeof err) != HR_OK) {
        log_warn("%s", err);
        free(buf);
        return;
    }
    disk_tier_put(&rs->dt, rs->pc->ns_desc, b->salt, b->key, b->parent, b->tokens, buf);
}

enum hr_status kv_restore_init(struct kv_restore *rs, const char *dir, uint64_t quota_bytes, struct prefix_cache *pc,
                               struct backend *be, struct kv_store *kv, bool sync_reads, void (*wake)(void *ctx),
                               void *ctx, char *err, size_t errlen)
{
    memset(rs, 0, sizeof *rs);
    rs->pc = pc;
    rs->be = be;
    rs->kv = kv;
    rs->block_size = kv->block_size;
    rs->sync_reads = sync_reads;
    rs->inflight_max = KV_RESTORE_INFLIGHT_MAX;
    rs->export_buf = malloc(kv->block_bytes);
    if (!rs->export_buf)
        return hr_err(err, errlen, HR_ERR_NOMEM, "disk cache: out of memory");
    enum hr_status st = disk_tier_init(&rs->dt, dir, quota_bytes, kv->block_size, kv->block_bytes,
                                       sync_reads ? NULL : wake, ctx, err, errlen);
    if (st != HR_OK) {
        free(rs->export_buf);
        memset(rs, 0, sizeof *rs);
        return st;
    }
    pc->on_evict = kv_restore_on_evict;
    pc->evict_ctx = rs;
    return HR_OK;
}

void kv_restore_free(struct kv_restore *rs)
{
    if (!rs || !rs->pc)
        return;
    rs->pc->on_evict = NULL;
    disk_tier_free(&rs->dt);
    free(rs->export_buf);
    memset(rs, 0, sizeof *rs);
}

static void kv_restore_flush_one(void *ctx, const struct prefix_block *b)
{
    struct kv_restore *rs = ctx;
    char err[HR_ERRLEN];
    if (rs->flush_failed || disk_tier_has(&rs->dt, b->key))
        return;
    if (rs->be->ops->kv_export(rs->be, rs->kv, b->block, rs->export_buf, err, sizeof err) != HR_OK ||
        disk_tier_write_now(&rs->dt, rs->pc->ns_desc, b->salt, b->key, b->parent, b->tokens, rs->export_buf, err,
                            sizeof err) != HR_OK) {
        /* One failure (a full disk, a directory gone) ends the flush: the rest would fail alike. */
        log_warn("%s; the other cached blocks are not written", err);
        rs->flush_failed = true;
    }
}

void kv_restore_flush(struct kv_restore *rs)
{
    if (!rs->pc)
        return;
    disk_tier_drain(&rs->dt);
    prefix_cache_for_each(rs->pc, kv_restore_flush_one, rs);
}

/* The waiting group (not g) that reads first block `key` at index `first`, or NULL. */
static const struct group *kv_restore_leader(const struct group_list *waiting, const struct group *g, int first,
                                             struct path_key key)
{
    for (const struct group *w = waiting->head; w; w = w->next)
        if (w != g && w->disk && w->disk->first == first && path_key_eq(w->disk->keys[1], key) &&
            !strcmp(w->salt, g->salt))
            return w;
    return NULL;
}

bool kv_restore_follower_waits(const struct group *g, const struct group_list *waiting)
{
    if (!g->disk_follow)
        return false;
    for (const struct group *w = waiting->head; w; w = w->next)
        if (w != g && w->disk && path_key_eq(w->disk->keys[1], g->disk_follow_key))
            return true;
    return false;
}

void kv_restore_start(struct kv_restore *rs, struct group *g, const struct group_list *waiting)
{
    struct seq *s0 = &g->seqs[0];
    int bs = rs->block_size, max = (s0->n_tokens - 1) / bs;
    g->disk_follow = false;
    if (g->prompt_lp || max < 1 || g->disk || s0->finished)
        return;
    int m = prefix_cache_match_len(rs->pc, g->salt, s0->tokens, s0->n_tokens);
    if (m >= max)
        return;
    struct path_key *keys = malloc((size_t)(max + 1) * sizeof *keys);
    if (!keys)
        return;
    keys[0] = path_key_root(rs->pc->ns_desc, g->salt);
    for (int b = 0; b < max; b++)
        keys[b + 1] = path_key_child(keys[b], s0->tokens + (size_t)b * bs, bs);
    int c = disk_tier_count_run(&rs->dt, keys + m + 1, max - m);
    disk_tier_count_lookup(&rs->dt, c);
    const struct group *leader = c > 0 ? kv_restore_leader(waiting, g, m, keys[m + 1]) : NULL;
    if (leader) {
        /* The blocks both read come from the leader (through memory, once it has
         * published them); g reads only those past them. */
        const struct disk_read *lr = leader->disk;
        int j = 0;
        while (j < lr->n && j < c && path_key_eq(lr->keys[j + 1], keys[m + j + 1]))
            j++;
        g->disk_follow = true;
        g->disk_follow_key = keys[m + 1];
        m += j;
        c -= j;
    }
    size_t bytes = (size_t)c * rs->kv->block_bytes;
    struct disk_read *rd = NULL;
    if (c > 0 && rs->inflight + bytes <= rs->inflight_max)
        rd = disk_read_new(rs->pc->ns_desc, g->salt, m, c, bs, rs->kv->block_bytes);
    if (rd) {
        memcpy(rd->keys, keys + m, (size_t)(c + 1) * sizeof *keys);
        memcpy(rd->tokens, s0->tokens + (size_t)m * bs, (size_t)c * (size_t)bs * sizeof *rd->tokens);
        rd->owner = g;
        g->disk = rd;
        rs->inflight += bytes;
        if (rs->sync_reads) {
            disk_tier_read_now(&rs->dt, rd);
        } else {
            g->disk_wait = true;
            disk_tier_read_submit(&rs->dt, rd);
        }
    }
    free(keys);
}

static void kv_restore_release(struct kv_restore *rs, struct disk_read *rd)
{
    rs->inflight -= (size_t)rd->n * rs->kv->block_bytes;
    disk_read_free(rd);
}

void kv_restore_poll(struct kv_restore *rs)
{
    struct disk_read *rd;
    while ((rd = disk_tier_read_take_done(&rs->dt)) != NULL) {
        struct group *g = rd->owner;
        if (!g) {
            kv_restore_release(rs, rd); /* its group ended while it read */
            continue;
        }
        g->disk_wait = false;
    }
}

int kv_restore_apply(struct kv_restore *rs, struct seq *s, int k)
{
    struct group *g = s->g;
    struct disk_read *rd = g->disk;
    if (!rd || g->disk_wait || s->index != 0)
        return 0;
    int n = 0;
    /* The memory hit must reach the first block read (it may have shrunk meanwhile:
     * then the blocks read cannot follow it, and the prompt is computed). */
    if (k >= rd->first) {
        char err[HR_ERRLEN];
        for (int b = k; b < rd->first + rd->n_ok && b < s->n_table; b++) {
            const unsigned char *src = rd->data + (size_t)(b - rd->first) * rs->kv->block_bytes;
            if (rs->be->ops->kv_import(rs->be, rs->kv, s->table[b], src, err, sizeof err) != HR_OK) {
                log_warn("%s", err);
                break;
            }
            n++;
        }
    }
    disk_tier_count_restored(&rs->dt, n, n * rs->block_size);
    g->disk = NULL;
    kv_restore_release(rs, rd);
    return n;
}

void kv_restore_drop(struct kv_restore *rs, struct group *g)
{
    struct disk_read *rd = g->disk;
    if (!rd)
        return;
    g->disk = NULL;
    if (g->disk_wait)
        rd->owner = NULL; /* the I/O thread has it: freed when it comes back */
    else
        kv_restore_release(rs, rd);
    g->disk_wait = false;
}
