/* The disk tier of the prefix cache: full KV blocks as files in one directory
 * (--kv-cache-dir), named by their path key, with an LRU quota over the directory
 * (--kv-cache-disk-mib), and one I/O thread that writes and reads them.
 *
 * The engine thread hands over blocks evicted from the pool (disk_tier_put: queued,
 * written by the I/O thread; the queue is bounded and a write that does not fit is
 * dropped and counted) and asks for the blocks a prompt misses in memory
 * (disk_tier_read_submit: read and verified by the I/O thread, reads before writes;
 * disk_tier_read_take_done hands back finished reads, and on_read_done is called
 * after each so that the engine thread wakes).  The index (which keys are on disk,
 * their sizes, their order of use) is built from the directory at start-up and kept
 * under the tier's mutex; file contents are only trusted after disk_file_read has
 * checked them.  The directory is the tier's alone: files it does not know are
 * ignored, temporary files of a crashed writer are removed at start-up. */
#ifndef HEARTH_CACHE_DISK_TIER_H
#define HEARTH_CACHE_DISK_TIER_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <hearth.h>

#include "base/status.h"
#include "cache/path_key.h"

struct disk_entry;

/* A read of n consecutive blocks of one prompt (blocks first .. first + n - 1). */
struct disk_read {
    struct disk_read *next;
    void *owner;               /* the caller's (never touched by the tier) */
    char *ns, *salt;
    int first, n;
    int n_ok;                  /* blocks read and verified, from the first (written by the I/O thread) */
    int block_size;
    size_t block_bytes;
    struct path_key *keys;     /* [n + 1]: the parent of block first, then each block's */
    int32_t *tokens;           /* [n, block_size] */
    unsigned char *data;       /* [n, block_bytes] */
};

struct disk_write;

struct disk_tier {
    char dir[PATH_MAX];
    uint64_t quota;            /* bytes of files at most */
    int block_size;
    size_t block_bytes;
    size_t write_queue_max;    /* bytes of queued writes at most */
    void (*on_read_done)(void *ctx);
    void *ctx;

    pthread_mutex_t mu;        /* guards everything below */
    pthread_cond_t cv;         /* work for the I/O thread */
    pthread_cond_t cv_idle;    /* the write queue became empty */
    pthread_t thread;
    bool thread_started, stopping;
    bool hold_writes;          /* the thread leaves queued writes alone until stopping (tests) */
    struct disk_write *w_head, *w_tail;
    size_t w_bytes;
    int busy;                  /* writes in progress */
    struct disk_write *w_cur;  /* the write in progress (found by lookups until indexed), or NULL */
    uint64_t generation;       /* bumped by disk_tier_clear: older queued writes are dropped */
    uint64_t tag;              /* unique temporary names */
    struct disk_read *r_head, *r_tail, *done_head, *done_tail;

    struct disk_entry *entries; /* [cap] */
    int cap, free_head;
    int32_t *buckets;          /* [n_buckets] */
    int n_buckets;
    int lru_head, lru_tail;    /* least recently used at the head */
    struct hearth_disk_cache_stats st;
};

/* Opens (creating it when missing) dir and indexes the block files in it (oldest
 * modification first in the LRU), removes temporary files, enforces the quota and
 * starts the I/O thread.  on_read_done(ctx) runs on the I/O thread after each read. */
enum hr_status disk_tier_init(struct disk_tier *dt, const char *dir, uint64_t quota_bytes, int block_size,
                              size_t block_bytes, void (*on_read_done)(void *ctx), void *ctx, char *err,
                              size_t errlen);
/* Finishes the queued writes, stops the thread, frees reads never taken.  Safe on a
 * zeroed tier. */
void disk_tier_free(struct disk_tier *dt);

/* How many of keys[0..n) are on disk or queued for it, counting from the first (stops
 * at the first absent); a read takes a queued block from the queue. */
int disk_tier_count_run(struct disk_tier *dt, const struct path_key *keys, int n);
bool disk_tier_has(struct disk_tier *dt, struct path_key key);

/* Queues a block for writing; takes data [block_bytes] (malloc'd) in every case.
 * NULL data (the caller ran out of memory), a full queue or a stopping tier: the
 * block is dropped and counted. */
void disk_tier_put(struct disk_tier *dt, const char *ns, const char *salt, struct path_key key,
                   struct path_key parent, const int32_t *tokens, void *data);
/* Writes a block on the calling thread (the shutdown flush); data stays the caller's. */
enum hr_status disk_tier_write_now(struct disk_tier *dt, const char *ns, const char *salt, struct path_key key,
                                   struct path_key parent, const int32_t *tokens, const void *data, char *err,
                                   size_t errlen);
/* Waits until every queued write is done (not while writes are held). */
void disk_tier_drain(struct disk_tier *dt);
/* Holds the queued writes in the queue (true) or lets the thread write them again:
 * tests use it to look blocks up while they wait for the disk. */
void disk_tier_hold_writes(struct disk_tier *dt, bool hold);

/* A read of n blocks (keys, tokens and owner for the caller to fill), or NULL. */
struct disk_read *disk_read_new(const char *ns, const char *salt, int first, int n, int block_size,
                                size_t block_bytes);
void disk_read_free(struct disk_read *rd);
void disk_tier_read_submit(struct disk_tier *dt, struct disk_read *rd);
/* Does rd on the calling thread (an engine with no thread of its own). */
void disk_tier_read_now(struct disk_tier *dt, struct disk_read *rd);
/* A finished read (the caller owns it), or NULL. */
struct disk_read *disk_tier_read_take_done(struct disk_tier *dt);

/* Removes every block file the tier knows of (a cache reset); queued writes are dropped. */
void disk_tier_clear(struct disk_tier *dt);

/* Counters the engine keeps through the tier. */
void disk_tier_count_lookup(struct disk_tier *dt, int blocks_found);
void disk_tier_count_restored(struct disk_tier *dt, int blocks, int tokens);
void disk_tier_stats(struct disk_tier *dt, struct hearth_disk_cache_stats *out);

#endif
