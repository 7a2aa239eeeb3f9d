/* The prefix cache's disk tier as the engine uses it (src/cache/disk_tier.h does the
 * files and the I/O thread).
 *
 * - Blocks evicted from the pool are exported (kv_export) and queued for writing,
 *   unless their file exists already; at a clean shutdown every cached block is
 *   written (kv_restore_flush).
 * - A group that arrives is looked up on disk past what the memory cache holds: the
 *   blocks found are read and verified by the I/O thread while the group waits
 *   (g->disk_wait; the scheduler skips it, the others run).  With no engine thread
 *   (tests that step by hand) the read happens at once, on the caller's thread.
 * - At admission the blocks read are imported (kv_import) into the sequence's fresh
 *   blocks right after its memory hit, and count as committed and cached tokens; the
 *   first step publishes them to the memory cache like computed blocks.
 * Everything here runs on the engine thread. */
#ifndef HEARTH_ENGINE_KV_RESTORE_H
#define HEARTH_ENGINE_KV_RESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/disk_tier.h"
#include "cache/prefix_cache.h"
#include "kernels/backend.h"
#include "kv/kv_store.h"

struct group;
struct group_list;
struct seq;

struct kv_restore {
    struct disk_tier dt;
    struct prefix_cache *pc;   /* not owned */
    struct backend *be;        /* not owned */
    struct kv_store *kv;       /* not owned */
    int block_size;
    bool sync_reads;           /* no engine thread: read at once */
    size_t inflight, inflight_max; /* bytes of reads not yet imported */
    void *export_buf;          /* [block_bytes]: the shutdown flush's */
    bool flush_failed;
};

/* Opens the tier (disk_tier_init) and hooks it to pc's evictions.  wake(ctx) runs on
 * the I/O thread when a read is done. */
enum hr_status kv_restore_init(struct kv_restore *rs, const char *dir, uint64_t quota_bytes, struct prefix_cache *pc,
                               struct backend *be, struct kv_store *kv, bool sync_reads, void (*wake)(void *ctx),
                               void *ctx, char *err, size_t errlen);
/* Finishes queued writes and stops the tier.  No-op on a zeroed one. */
void kv_restore_free(struct kv_restore *rs);

/* Writes every block pc holds that is not on disk yet (a clean shutdown). */
void kv_restore_flush(struct kv_restore *rs);

/* A group that just arrived: starts the read of the blocks of its prompt that are on
 * disk past its memory hit (g waits for it), if any.  When a group of waiting already
 * reads the same first block, g follows it: it reads only its blocks past those the
 * two share, and the scheduler holds it until that group is admitted, then in-batch
 * sharing until the shared blocks are published and g hits them in memory. */
void kv_restore_start(struct kv_restore *rs, struct group *g, const struct group_list *waiting);
/* g follows a group of waiting whose read it shares and which is not admitted yet. */
bool kv_restore_follower_waits(const struct group *g, const struct group_list *waiting);
/* Takes the reads the I/O thread finished: their groups may be admitted. */
void kv_restore_poll(struct kv_restore *rs);
/* At admission of s (sample 0 of its group), whose blocks [0, k) came from the memory
 * cache and whose table holds fresh blocks after them: imports the blocks read for
 * its group from block k on.  Returns how many (the caller commits them). */
int kv_restore_apply(struct kv_restore *rs, struct seq *s, int k);
/* The group ends: lets go of its read. */
void kv_restore_drop(struct kv_restore *rs, struct group *g);

#endif
