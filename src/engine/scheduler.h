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

struct hearth_engine;
struct seq;
struct group;

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
    int n_rows;
    int n_tok;
    int prompt_logits_left;    /* of SCHED_PROMPT_LOGITS */
};

/* Fills plan for the next step (may admit and preempt groups). */
void sched_plan(struct hearth_engine *e, struct sched_plan *plan);
/* Frees the group's blocks and puts it back at the front of the waiting list. */
void sched_preempt(struct hearth_engine *e, struct group *g);
/* Releases every block a sequence holds. */
void sched_release_seq(struct hearth_engine *e, struct seq *s);

#endif
