/* A loaded model: config + weights of one Hugging Face directory, and the forward
 * state that runs it on a backend. */
#ifndef HEARTH_MODEL_MODEL_H
#define HEARTH_MODEL_MODEL_H

#include <limits.h>

#include "base/arena.h"
#include "engine/batch.h"
#include "kernels/backend.h"
#include "kv/kv_store.h"
#include "model/config.h"
#include "model/weights.h"

struct model {
    struct model_config cfg;
    struct weights w;
    char dir[PATH_MAX];
};

enum hr_status model_load(struct model *m, const char *dir, char *err, size_t errlen);
void model_free(struct model *m);

/* The forward pass of Qwen3 / Qwen3-MoE over a batch (src/model/qwen3.c). */
struct qwen3 {
    const struct model *m;
    struct backend *be;
    int max_tok;               /* most tokens one forward may hold */
    struct arena scratch;      /* per-forward activations, reset at each call */
    int fail_next;             /* test hook: the next forward fails (nothing written) */
    int32_t *route_trace;      /* [n_layers, max_tok, top_k] eval hook: MoE experts chosen, or NULL */
};

enum hr_status qwen3_init(struct qwen3 *q, const struct model *m, struct backend *be, int max_tok, char *err,
                          size_t errlen);
void qwen3_free(struct qwen3 *q);

/* Runs the batch: writes every token's K/V into kv at the batch's slots, then
 * attends over the store; writes logits[b->n_logits, vocab] for the rows that ask.
 * The batch must be built (batch_build) for kv's block size and pool. */
enum hr_status qwen3_forward(struct qwen3 *q, const struct batch *b, struct kv_store *kv, float *logits, char *err,
                             size_t errlen);

#endif
