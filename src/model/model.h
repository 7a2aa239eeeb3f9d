/* A loaded model: config + weights of one Hugging Face directory, and the forward
 * state that runs it on a backend. */
#ifndef HEARTH_MODEL_MODEL_H
#define HEARTH_MODEL_MODEL_H

#include <limits.h>

#include "base/arena.h"
#include "kernels/backend.h"
#include "kv/kv_store.h"
#include "model/config.h"
#include "model/weights.h"

struct model {
    struct model_config cfg;
    struct weights w;
    char dir[PATH_MAX];
};

/* How the weights come: from the directory's safetensors files, or (vLLM's
 * --load-format dummy) generated from the config alone, for benchmarks of shapes
 * whose checkpoints are not at hand (weights_load_dummy). */
enum model_load_format {
    MODEL_LOAD_FORMAT_SAFETENSORS,
    MODEL_LOAD_FORMAT_DUMMY,
};
/* "auto" or "safetensors", "dummy"; NULL or "" mean auto (safetensors). */
enum hr_status model_load_format_parse(const char *s, enum model_load_format *out, char *err, size_t errlen);

enum hr_status model_load(struct model *m, const char *dir, char *err, size_t errlen);
/* model_load with the weights in format f (the directory needs only config.json for
 * MODEL_LOAD_FORMAT_DUMMY). */
enum hr_status model_load_as(struct model *m, const char *dir, enum model_load_format f, char *err,
                             size_t errlen);
void model_free(struct model *m);

/* The KV store of a model of geometry c on a backend: kv_store_layout for a budget of
 * bytes, then the backend's slab.  model_kv_free gives the slab back (NULL-safe). */
size_t model_kv_bytes_per_token(const struct model_config *c, enum kv_dtype dtype);
enum hr_status model_kv_init(struct kv_store *kv, struct backend *be, const struct model_config *c,
                             enum kv_dtype dtype, int block_size, size_t budget_bytes, char *err, size_t errlen);
void model_kv_free(struct kv_store *kv, struct backend *be);

/* The model's fingerprint (model/fingerprint.c): config.json and
 * generation_config.json as bytes, and every weight file's header and size (dummy
 * weights: a marker instead); part of the prefix-cache namespace. */
enum hr_status model_fingerprint(const struct model *m, uint64_t *out, char *err, size_t errlen);

/* The forward pass of Qwen3 / Qwen3-MoE over a batch (src/model/qwen3.c). */
struct qwen3 {
    const struct model *m;
    const struct weights *w;   /* m's weights as bound to the backend */
    struct backend *be;
    int max_tok;               /* most tokens one forward may hold */
    void *scratch_mem;         /* backend memory under the scratch arena */
    struct arena scratch;      /* per-forward activations, reset at each call */
    int32_t *route_trace;      /* [n_layers, max_tok, top_k] host, eval hook: MoE experts chosen, or NULL */
    /* What qwen3_logits reads: set by a forward that succeeded, in the scratch arena. */
    const float *last_h;       /* [last_n_tok, hidden] residual stream after the last layer, or NULL */
    float *last_lx;            /* [last_n_logits, hidden] room for the normed logits rows */
    int last_n_tok, last_n_logits;
    /* A decode step the backend replays as a graph runs padded to its bucket (graph_rows). */
    struct batch pad;          /* rows, tokens, positions, slots, tok_row, logit_tok: [max_tok] */
    int32_t pad_table[1];      /* the padding rows' block table: block 0, read, never written */
};

/* Sizes the backend for m and steps of max_tok tokens at contexts up to max_ctx
 * positions (<= 0 or above it: the model's context), binds m's weights, and takes the
 * forward's scratch from the backend. */
enum hr_status qwen3_init(struct qwen3 *q, const struct model *m, struct backend *be, int max_tok, int max_ctx,
                          char *err, size_t errlen);
void qwen3_free(struct qwen3 *q);
/* Binds m's weights through the backend, then lets go of the weights bound before
 * (reload: m has the geometry of the model qwen3_init had). Nothing changes on failure. */
enum hr_status qwen3_bind(struct qwen3 *q, const struct model *m, char *err, size_t errlen);

/* Runs the batch: hands it to the backend (its block copies run first), writes every
 * token's K/V into kv at the batch's slots, then attends over the store; with logits
 * non-NULL (backend memory [b->n_logits, vocab]) also computes the logits rows that the
 * batch asks for. With logits NULL it stops before the final norm, and qwen3_logits
 * gives the logits rows piece by piece.  The batch must be built (batch_build) for kv's
 * block size and pool.  An error of any op fails the forward.  With logits NULL and
 * logits rows asked, a backend with submit is only started (not waited for): a fault
 * the device raises later fails the logits call that follows. */
enum hr_status qwen3_forward(struct qwen3 *q, const struct batch *b, struct kv_store *kv, float *logits, char *err,
                             size_t errlen);

/* logits[n, vocab] (backend memory): logits rows [first, first + n) of the batch b that
 * the last qwen3_forward ran (it must have succeeded; valid until the next forward).
 * The same bits as the rows of a one-pass forward, whatever the pieces. */
enum hr_status qwen3_logits(struct qwen3 *q, const struct batch *b, int first, int n, float *logits, char *err,
                            size_t errlen);

/* The same without a buffer of the caller's: after the last layer only the residual
 * stream is live, so the rest of the scratch arena holds the logits rows.
 * qwen3_reserve_logits (start-up only) grows the arena so that at least `rows` rows
 * fit even after a forward of max_tok tokens; qwen3_scratch_logit_rows says how many
 * fit after the last forward (more when it had fewer tokens); qwen3_logits_host
 * computes n of them (1 <= n <= that) and brings them to the host: *host [n, vocab],
 * the caller's to read and write until the next call or forward. */
enum hr_status qwen3_reserve_logits(struct qwen3 *q, int rows, char *err, size_t errlen);
int qwen3_scratch_logit_rows(const struct qwen3 *q);
enum hr_status qwen3_logits_host(struct qwen3 *q, const struct batch *b, int first, int n, float **host,
                                 char *err, size_t errlen);
/* The same rows left in backend memory: *logits [n, vocab], valid until the next call or
 * forward (a device samples them there, or brings some of them over).  Where the backend
 * can submit, they are queued, not waited for: the sample or to_host_rows that reads
 * them waits and reports a failure. */
enum hr_status qwen3_logits_dev(struct qwen3 *q, const struct batch *b, int first, int n, float **logits,
                                char *err, size_t errlen);

#endif
