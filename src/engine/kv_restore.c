/* The engine's side of the tiers below the pool (see kv_restore.h). */
#include "engine/kv_restore.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/sequence.h"

/* Reads in flight hold their blocks in host memory: at most this much. */
#define KV_RESTORE_INFLIGHT_MAX ((size_t)1 << 30)

/* ------------------------------------------------------------------ evictions */

/* A block leaves the pool (or the host tier) for the disk: exported from the pool when
 * data is NULL, else copied from data (a host slot's settled bytes), and queued. */
static void kv_restore_to_disk(struct kv_restore *rs, const char *salt, struct path_key key, struct path_key parent,
                               const int32_t *tokens, int block, const void *data)
{
    if (disk_tier_has(&rs->dt, key))
        return; /* on disk already (it was restored from there, or written before) */
    void *buf = malloc(rs->kv->block_bytes);
    char err[HR_ERRLEN];
    if (!buf) {
        disk_tier_put(&rs->dt, rs->pc->ns_desc, salt, key, parent, tokens, NULL);
        return;
    }
    if (data) {
        memcpy(buf, data, rs->kv->block_bytes);
    } else if (rs->be->ops->kv_export(rs->be, rs->kv, block, buf, err, sizeof err) != HR_OK) {
        log_warn("%s", err);
        free(buf);
        return;
    }
    disk_tier_put(&rs->dt, rs->pc->ns_desc, salt, key, parent, tokens, buf);
}

/* Every copy queued into the host tier is done (the CPU may read any slot); false when
 * one failed: the slots being filled are dropped. */
static bool kv_restore_settle(struct kv_restore *rs)
{
    if (!host_tier_any_pending(&rs->ht))
        return true;
    char err[HR_ERRLEN];
    if (rs->be->ops->kv_copies_wait(rs->be, err, sizeof err) != HR_OK) {
        int64_t before = rs->ht.st.blocks;
        host_tier_drop_pending(&rs->ht);
        rs->ht.st.copy_errors_total += before - rs->ht.st.blocks;
        log_warn("%s: the blocks being copied into the host tier are dropped", err);
        return false;
    }
    host_tier_settle(&rs->ht);
    return true;
}

/* The host tier's least recently used block makes room: on to the disk tier. */
static void kv_restore_demote(struct kv_restore *rs, int slot)
{
    struct host_block hb;
    if (!rs->disk_on || !host_tier_get(&rs->ht, slot, &hb) || disk_tier_has(&rs->dt, hb.key))
        return;
    if (hb.pending && (!kv_restore_settle(rs) || !host_tier_get(&rs->ht, slot, &hb)))
        return; /* its copy in failed: nothing to pass on */
    kv_restore_to_disk(rs, hb.salt, hb.key, hb.parent, hb.tokens, -1, hb.data);
    rs->ht.st.evicted_to_disk_total++;
}

static void kv_restore_to_host(struct kv_restore *rs, const struct prefix_block *b)
{
    struct host_tier *ht = &rs->ht;
    if (host_tier_has(ht, b->key)) {
        host_tier_find(ht, b->salt, b->key, b->parent, b->tokens); /* the same bytes: only used again */
        return;
    }
    int slot = host_tier_victim(ht);
    if (slot >= 0) {
        kv_restore_demote(rs, slot);
        slot = host_tier_victim(ht);
    }
    if (slot >= 0)
        slot = host_tier_insert(ht, slot, b->salt, b->key, b->parent, b->tokens);
    if (slot < 0) { /* every slot held by an admission, or no memory for a new cache_salt: on to disk */
        if (rs->disk_on)
            kv_restore_to_disk(rs, b->salt, b->key, b->parent, b->tokens, b->block, NULL);
        return;
    }
    char err[HR_ERRLEN];
    if (rs->be->ops->kv_export_async(rs->be, rs->kv, b->block, host_tier_data(ht, slot), err, sizeof err) != HR_OK) {
        log_warn("host tier: %s", err);
        host_tier_remove(ht, slot);
        ht->st.copy_errors_total++;
        return;
    }
    host_tier_mark_pending(ht, slot);
    ht->st.stored_blocks_total++;
    ht->st.bytes_in_total += (int64_t)rs->kv->block_bytes;
}

static void kv_restore_on_evict(void *ctx, const struct prefix_block *b)
{
    struct kv_restore *rs = ctx;
    if (rs->host_on)
        kv_restore_to_host(rs, b);
    else
        kv_restore_to_disk(rs, b->salt, b->key, b->parent, b->tokens, b->block, NULL);
}

/* ------------------------------------------------------------------ life cycle */

enum hr_status kv_restore_init(struct kv_restore *rs, const struct kv_restore_opts *o, struct prefix_cache *pc,
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
    bool disk = o->disk_dir && *o->disk_dir;
    enum hr_status st = HR_OK;
    if (o->host_bytes) {
        if (o->host_bytes < kv->block_bytes)
            return hr_err(err, errlen, HR_ERR_INVALID,
                          "--kv-cache-host-mib: %zu bytes hold no KV block (one block is %zu bytes here)",
                          o->host_bytes, kv->block_bytes);
        size_t bytes = o->host_bytes / kv->block_bytes * kv->block_bytes;
        if (!(rs->host_arena = be->ops->host_alloc(be, bytes, err, errlen)))
            return HR_ERR_NOMEM;
        rs->host_arena_bytes = bytes;
        st = host_tier_init(&rs->ht, rs->host_arena, bytes, kv->block_size, kv->block_bytes, err, errlen);
        rs->host_on = st == HR_OK;
        if (st == HR_OK && !(rs->held = malloc((size_t)rs->ht.n_slots * sizeof *rs->held)))
            st = hr_err(err, errlen, HR_ERR_NOMEM, "host tier: out of memory");
    }
    if (st == HR_OK && disk) {
        rs->export_buf = malloc(kv->block_bytes);
        if (!rs->export_buf)
            st = hr_err(err, errlen, HR_ERR_NOMEM, "disk cache: out of memory");
        if (st == HR_OK)
            st = disk_tier_init(&rs->dt, o->disk_dir, o->disk_quota, kv->block_size, kv->block_bytes,
                                sync_reads ? NULL : wake, ctx, err, errlen);
        rs->disk_on = st == HR_OK;
    }
    if (st != HR_OK) {
        kv_restore_free(rs);
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
    if (rs->pc->evict_ctx == rs)
        rs->pc->on_evict = NULL;
    if (rs->disk_on)
        disk_tier_free(&rs->dt);
    host_tier_free(&rs->ht);
    free(rs->held);
    if (rs->host_arena)
        rs->be->ops->host_free(rs->be, rs->host_arena, rs->host_arena_bytes); /* after its copies */
    free(rs->export_buf);
    memset(rs, 0, sizeof *rs);
}

void kv_restore_clear(struct kv_restore *rs)
{
    kv_restore_clear_host(rs);
    if (rs->disk_on)
        disk_tier_clear(&rs->dt);
}

void kv_restore_clear_host(struct kv_restore *rs)
{
    if (rs->host_on)
        host_tier_clear(&rs->ht); /* copies still queued into its slots land in free slots */
}

static void kv_restore_flush_pool(void *ctx, const struct prefix_block *b)
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

static void kv_restore_flush_host(void *ctx, const struct host_block *b)
{
    struct kv_restore *rs = ctx;
    char err[HR_ERRLEN];
    if (rs->flush_failed || disk_tier_has(&rs->dt, b->key))
        return;
    if (disk_tier_write_now(&rs->dt, rs->pc->ns_desc, b->salt, b->key, b->parent, b->tokens, b->data, err,
                            sizeof err) != HR_OK) {
        log_warn("%s; the other cached blocks are not written", err);
        rs->flush_failed = true;
    }
}

void kv_restore_flush(struct kv_restore *rs)
{
    if (!rs->pc || !rs->disk_on)
        return;
    disk_tier_drain(&rs->dt);
    /* The pool's blocks first: they were used last. */
    prefix_cache_for_each(rs->pc, kv_restore_flush_pool, rs);
    if (rs->host_on && kv_restore_settle(rs))
        host_tier_for_each(&rs->ht, kv_restore_flush_host, rs);
}

/* ------------------------------------------------------------------ lookups */

/* How many blocks of tokens [n] the host tier holds from block k on, whose parent's key
 * is key (a check of keys only: the scheduler's estimate). */
static int kv_restore_host_run(struct kv_restore *rs, const int32_t *tokens, int n, int k, struct path_key key)
{
    int bs = rs->block_size, max = (n - 1) / bs, h = 0;
    while (k + h < max) {
        key = path_key_child(key, tokens + (size_t)(k + h) * bs, bs);
        if (!host_tier_has(&rs->ht, key))
            break;
        h++;
    }
    return h;
}

int kv_restore_cached_len(struct kv_restore *rs, const struct group *g)
{
    const struct seq *s0 = &g->seqs[0];
    struct path_key key;
    int k = prefix_cache_match_key(rs->pc, g->salt, s0->tokens, s0->n_tokens, &key);
    if (rs->host_on)
        k += kv_restore_host_run(rs, s0->tokens, s0->n_tokens, k, key);
    /* Blocks read from disk continue a hit that reaches them. */
    if (g->disk && !g->disk_wait && k >= g->disk->first && g->disk->first + g->disk->n_ok > k)
        k = g->disk->first + g->disk->n_ok;
    return k;
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
    if (!rs->disk_on || g->prompt_lp || max < 1 || g->disk || s0->finished)
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
    /* The disk continues where the host tier stops (the blocks found there become the
     * most recently used: they should still be there when the group is admitted). */
    while (rs->host_on && m < max &&
           host_tier_find(&rs->ht, g->salt, keys[m + 1], keys[m], s0->tokens + (size_t)m * bs) >= 0)
        m++;
    int c = m < max ? disk_tier_count_run(&rs->dt, keys + m + 1, max - m) : 0;
    if (m < max)
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
    if (!rs->disk_on)
        return;
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

/* The key of s's block k - 1 (the pool's cache matched it a moment ago), or false. */
static bool kv_restore_parent(struct kv_restore *rs, const struct seq *s, int k, struct path_key *parent)
{
    return prefix_cache_match_key(rs->pc, s->g->salt, s->tokens, k * rs->block_size + 1, parent) == k;
}

void kv_restore_hold(struct kv_restore *rs, const struct seq *s, int k)
{
    int bs = rs->block_size, max = (s->n_tokens - 1) / bs;
    struct path_key parent;
    if (!rs->host_on || s->g->prompt_lp || k >= max || !kv_restore_parent(rs, s, k, &parent))
        return;
    for (int b = k; b < max; b++) {
        const int32_t *t = s->tokens + (size_t)b * bs;
        struct path_key key = path_key_child(parent, t, bs);
        int slot = host_tier_find(&rs->ht, s->g->salt, key, parent, t);
        if (slot < 0)
            break;
        struct host_block hb;
        host_tier_get(&rs->ht, slot, &hb);
        if (rs->n_held < rs->ht.n_slots && !hb.held) {
            host_tier_hold(&rs->ht, slot, true);
            rs->held[rs->n_held++] = slot;
        }
        parent = key;
    }
}

void kv_restore_release_holds(struct kv_restore *rs)
{
    for (int i = 0; i < rs->n_held; i++)
        host_tier_hold(&rs->ht, rs->held[i], false);
    rs->n_held = 0;
}

/* s's blocks from k on that the host tier holds, imported (queued) into its table. */
static int kv_restore_from_host(struct kv_restore *rs, struct seq *s, int k)
{
    int bs = rs->block_size, max = (s->n_tokens - 1) / bs;
    if (k >= max)
        return 0;
    struct host_tier *ht = &rs->ht;
    struct path_key parent;
    if (!kv_restore_parent(rs, s, k, &parent))
        return 0;
    int n = 0;
    char err[HR_ERRLEN];
    for (int b = k; b < max && b < s->n_table; b++) {
        const int32_t *t = s->tokens + (size_t)b * bs;
        struct path_key key = path_key_child(parent, t, bs);
        int slot = host_tier_find(ht, s->g->salt, key, parent, t);
        if (slot < 0)
            break;
        if (rs->be->ops->kv_import_async(rs->be, rs->kv, s->table[b], host_tier_data(ht, slot), err, sizeof err) !=
            HR_OK) {
            log_warn("host tier: %s", err);
            ht->st.copy_errors_total++;
            break;
        }
        parent = key;
        n++;
    }
    ht->st.lookups_total++;
    if (n > 0)
        ht->st.hits_total++;
    else
        ht->st.misses_total++;
    ht->st.blocks_restored_total += n;
    ht->st.hit_tokens_total += (int64_t)n * bs;
    ht->st.bytes_out_total += (int64_t)n * (int64_t)rs->kv->block_bytes;
    return n;
}

/* Sample 0's blocks read from disk for its group, imported from block k on. */
static int kv_restore_from_disk(struct kv_restore *rs, struct seq *s, int k)
{
    struct group *g = s->g;
    struct disk_read *rd = g->disk;
    if (!rd || g->disk_wait || s->index != 0)
        return 0;
    int n = 0;
    /* The hit must reach the first block read (it may have shrunk meanwhile: then the
     * blocks read cannot follow it, and the prompt is computed). */
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

int kv_restore_apply(struct kv_restore *rs, struct seq *s, int k)
{
    int n = 0;
    if (rs->host_on && !s->g->prompt_lp)
        n = kv_restore_from_host(rs, s, k);
    if (rs->disk_on)
        n += kv_restore_from_disk(rs, s, k + n);
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
