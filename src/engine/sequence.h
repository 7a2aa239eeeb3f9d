/* Sequences and groups.  A request is a group of n sequences sharing one prompt:
 * sample 0 computes the prompt; when its prompt is complete the siblings fork from
 * it (sharing its blocks) and each copies the shared tail block on its first write.
 *
 * A sequence's tokens are its prompt then what it generated; `committed` of them
 * have their K/V in the store.  The scheduler feeds tokens[committed .. n_tokens) in
 * chunks; when a chunk reaches n_tokens the last token's logits are sampled.  A
 * decode step is a chunk of one, and recomputation after preemption is a prefill of
 * the prompt and the generated tokens alike. */
#ifndef HEARTH_ENGINE_SEQUENCE_H
#define HEARTH_ENGINE_SEQUENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/path_key.h"
#include "cache/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/stop.h"
#include "grammar/grammar_mask.h"
#include "tokenizer/tokenizer.h"

enum group_state {
    GROUP_STATE_WAITING,  /* queued, or preempted and waiting to be recomputed */
    GROUP_STATE_RUNNING,  /* admitted: holds blocks */
    GROUP_STATE_DONE,
};

struct group;

struct seq {
    struct group *g;
    int index;                 /* sample index in the group */
    int32_t *tokens;           /* [cap] prompt then generated */
    int n_tokens, cap;
    int committed;             /* tokens whose K/V are in the store */
    int32_t *table;            /* [max_table] block ids, held (one reference each) */
    int n_table, max_table;
    int n_generated;
    bool finished;
    enum hearth_finish_reason finish;
    int32_t stop_token;
    struct detok detok;        /* streaming detokenizer (when the model has a tokenizer) */
    struct stop_matcher stop;  /* stop strings on the detokenized text */
    bool has_text;
    int published;             /* full blocks inserted into the prefix cache */
    struct prefix_lease lease; /* during admission only */
    struct grammar_seq *gram;  /* the output's grammar state, or NULL (unconstrained) */
};

struct group {
    struct hearth_request *req;
    struct group *next, *prev; /* in the engine's waiting or running list */
    enum group_state state;
    int n;
    struct seq *seqs;          /* [n] */
    bool forked;               /* the siblings exist (sample 0's prompt is complete) */
    int n_prompt;
    int index_base;            /* sample i's randomness is keyed by index_base + i */
    bool prompt_lp;            /* score the prompt (no cache hit; logits of every prompt position) */
    int prompt_lp_done;        /* prompt positions scored so far (recomputation does not repeat them) */
    int max_tokens;
    int max_context;
    int32_t *stop_ids;         /* [n_stop_ids]: eos (unless ignore_eos) and the request's stop ids */
    int n_stop_ids;
    struct sampler_params sp;
    struct sampler_logit_bias *bias; /* [n_bias], owned (sp points here) */
    struct grammar_compiled *grammar; /* one reference, or NULL */
    char *salt;                /* cache_salt: the prefix-cache namespace ("" for none) */
    int64_t arrival;           /* submission order */
    int64_t arrival_step;      /* the step at which it was queued */
    bool admitted_once;        /* cached_tokens is fixed at the first admission */
    bool failing;              /* its step failed: it is being ended */
    int64_t admitted;          /* admission order: the most recent is preempted first */
    int cached_tokens;
    int completion_tokens;
    struct disk_read *disk;    /* blocks of its prompt read from the disk tier (kv_restore.h), or NULL */
    bool disk_wait;            /* that read is in flight: not admitted until it is back */
    bool disk_looked_up;
    bool disk_follow;          /* another waiting group reads the same first blocks: wait for it, */
    struct path_key disk_follow_key; /* ... the key of that first block, then take them from memory */
};

/* A doubly linked list of groups (the engine's intake queue, the scheduler's lists). */
struct group_list {
    struct group *head, *tail;
    int n_groups;
};

void group_list_push_back(struct group_list *l, struct group *g);
void group_list_push_front(struct group_list *l, struct group *g);
void group_list_remove(struct group_list *l, struct group *g);

/* Frees a group that holds no blocks (its request reference already dropped). */
void group_free(struct group *g);

/* Active sequences are those that take part in steps: unfinished, and forked or sample 0. */
static inline bool seq_active(const struct seq *s)
{
    return !s->finished && (s->index == 0 || s->g->forked);
}

#endif
