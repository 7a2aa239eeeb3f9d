/* The prefix cache's tiers below the pool as the engine uses them: host RAM
 * (src/cache/host_tier.h: the slots and their index) and disk (src/cache/disk_tier.h:
 * the files and the I/O thread), either or both.
 *
 * - A block evicted from the pool goes to the host tier when there is one: a slot is
 *   taken (the least recently used block in it goes on to the disk tier, when there is
 *   one and the block is not on disk yet) and the block is copied into it with a queued
 *   copy (kv_export_async: on a GPU, on the backend's copy stream; the step does not
 *   wait for it).  Without a host tier it is exported (kv_export) and queued for
 *   writing to disk, unless its file exists already.  At a clean shutdown every cached
 *   block, in the pool or in host RAM, that is not on disk is written (kv_restore_flush).
 * - A group that arrives is looked up on disk past what the pool and the host tier hold:
 *   the blocks found are read and verified by the I/O thread while the group waits
 *   (g->disk_wait; the scheduler skips it, the others run).  With no engine thread
 *   (tests that step by hand) the read happens at once, on the caller's thread.
 * - At admission every active sequence continues its pool hit in the host tier: the
 *   blocks found are imported (kv_import_async) into its fresh blocks; then sample 0
 *   continues with the blocks its group read from disk (kv_import).  They count as
 *   committed and cached tokens; the first step publishes them to the pool's cache like
 *   computed blocks (the backend orders the step after the queued copies).
 * Everything here runs on the engine thread. */
#ifndef HEARTH_ENGINE_KV_RESTORE_H
#define HEARTH_ENGINE_KV_RESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/disk_tier.h"
#include "cache/host_tier.h"
#include "cache/prefix_cache.h"
#include "kernels/backend.h"
#include "kv/kv_store.h"

struct group;
struct group_list;
struct seq;

struct kv_restore_opts {
    const char *disk_dir;      /* NULL or "": no disk tier */
    uint64_t disk_quota;       /* bytes of block files at most (> 0 with a disk tier) */
    size_t host_bytes;         /* 0: no host tier */
};

struct kv_restore {
    bool disk_on, host_on;
    struct disk_tier dt;
    struct host_tier ht;
    void *host_arena;          /* [host_arena_bytes]: the backend's host_alloc */
    size_t host_arena_bytes;
    struct prefix_cache *pc;   /* not owned */
    struct backend *be;        /* not owned */
    struct kv_store *kv;       /* not owned */
    int block_size;
    bool sync_reads;           /* no engine thread: read at once */
    size_t inflight, inflight_max; /* bytes of reads not yet imported */
    void *export_buf;          /* [block_bytes]: the shutdown flush's */
    bool flush_failed;
    int *held;                 /* [ht.n_slots]: host slots held by the admission under way */
    int n_held;
};

/* Opens the tiers o asks for (at least one) and hooks them to pc's evictions: the
 * host tier's arena from the backend (host_alloc), the disk tier's directory
 * (disk_tier_init).  wake(ctx) runs on the I/O thread when a read is done. */
enum hr_status kv_restore_init(struct kv_restore *rs, const struct kv_restore_opts *o, struct prefix_cache *pc,
                               struct backend *be, struct kv_store *kv, bool sync_reads, void (*wake)(void *ctx),
                               void *ctx, char *err, size_t errlen);
/* Finishes queued writes and copies and stops the tiers.  No-op on a zeroed one. */
void kv_restore_free(struct kv_restore *rs);

/* Empties both tiers (a cache reset). */
void kv_restore_clear(struct kv_restore *rs);
/* Empties the host tier (a reload: its blocks were computed by the old weights). */
void kv_restore_clear_host(struct kv_restore *rs);

/* Writes every block pc and the host tier hold that is not on disk yet (a clean
 * shutdown; nothing without a disk tier). */
void kv_restore_flush(struct kv_restore *rs);

/* Whole blocks of g's first sample's prompt that admitting it now would not compute:
 * its pool hit, continued in the host tier, then by the blocks its disk read brought
 * (the scheduler's order). */
int kv_restore_cached_len(struct kv_restore *rs, const struct group *g);

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
/* At admission of s (an active sequence) whose pool hit is k blocks: holds the blocks
 * of its path the host tier has from block k on, so that making room in the pool (whose
 * evictions go to the host tier) does not push out what s is about to copy back;
 * kv_restore_release_holds lets every hold go once the admission is done. */
void kv_restore_hold(struct kv_restore *rs, const struct seq *s, int k);
void kv_restore_release_holds(struct kv_restore *rs);
/* At admission of s (an active sequence), whose blocks [0, k) came from the pool's
 * cache and whose table holds fresh blocks after them: imports the blocks of its path
 * the host tier holds from block k on, then (sample 0) those read from disk for its
 * group that follow.  Returns how many (the caller commits them). */
int kv_restore_apply(struct kv_restore *rs, struct seq *s, int k);
/* The group ends: lets go of its read. */
void kv_restore_drop(struct kv_restore *rs, struct group *g);

#endif
