/* The scheduler: which sequences run in the next step, and with how many tokens.
 *
 * Decodes first (in admission order), then prefill chunks of admitted sequences,
 * then new admissions first come, first served — all within max_batched_tokens
 * tokens and max_num_seqs sequences.  A group is admitted all or nothing: blocks for
 * every token of every sample it brings, or it waits.  When a running sequence needs
 * a block and none is free, the most recently admitted group is preempted: its
 * blocks are freed and it is recomputed later, bit for bit the same. */
#ifndef HEARTH_ENGINE_SCHEDULER_H
#define HEARTH_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/prefix_cache.h"
#include "engine/kv_restore.h"
#include "engine/sequence.h"
#include "kv/batch.h"
#include "kv/block_pool.h"

enum sched_order {
    SCHED_ORDER_LPM,  /* longest cached prefix first, unless someone waited too long */
    SCHED_ORDER_FCFS,
};

/* The scheduler's state: the block pool and prefix cache it allocates from (the
 * engine's), its limits, and its two lists.  Owned by the engine thread. */
struct sched {
    struct block_pool *pool;   /* not owned */
    struct prefix_cache *pc;   /* not owned; NULL: no prefix cache */
    struct kv_restore *restore; /* not owned; NULL: no tier below the pool */
    int block_size;
    int max_num_seqs, max_batched_tokens, max_wait_steps;
    enum sched_order order;
    struct group_list waiting; /* FCFS; preempted groups go back to the front */
    struct group_list running; /* in admission order */
    int64_t step_no;           /* the step being planned (the engine counts) */
    int64_t next_admission;
    int64_t n_preemptions;
};

struct sched_row {
    struct seq *s;
    int query_len;
    bool sample;               /* the chunk reaches the sequence's last token */
    bool all_logits;           /* logits of every token (prompt logprobs) */
};

/* Logits rows one step may spend on prompt logprobs (on top of one per sequence). */
#define SCHED_PROMPT_LOGITS 16

struct sched_plan {
    struct sched_row *rows;    /* [max_num_seqs] */
    struct batch *batch;       /* the step's batch: receives its block copies (copy-on-write) */
    int n_rows;
    int n_tok;
    int prompt_logits_left;    /* of SCHED_PROMPT_LOGITS */
};

/* Fills plan for the next step (may admit and preempt groups); the copy-on-write
 * copies its rows need are appended to plan->batch in the order they must run. */
void sched_plan(struct sched *sc, struct sched_plan *plan);
/* Frees the group's blocks and puts it back at the front of the waiting list. */
void sched_preempt(struct sched *sc, struct group *g);
/* Releases every block a sequence holds. */
void sched_release_seq(struct sched *sc, struct seq *s);

#endif
