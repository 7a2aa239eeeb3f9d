/* A step's sampling spread over host threads: the rows whose sample is a pure
 * function of their logits row (no grammar to advance between rows) are sampled at
 * once, each by whichever thread takes it, into its own result; the engine then
 * accepts them in row order as before.  sampler_sample is a function of its
 * arguments alone (each thread has its own scratch, left as it found it), so the
 * tokens and logprobs are the bytes one thread gives.
 *
 * Worth it where the host does nothing else meanwhile: a device backend, whose
 * steps of many rows otherwise wait on one thread sampling 152k-entry rows. */
#ifndef HEARTH_ENGINE_SAMPLE_ROWS_H
#define HEARTH_ENGINE_SAMPLE_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "engine/sampler.h"

struct sample_rows_item {
    const struct sampler_params *p;
    const float *logits;       /* [vocab] */
    const int32_t *history;    /* [n_prompt + n_generated] */
    int n_prompt, n_generated;
    uint64_t seq_index, step;
    struct sampler_result r;   /* written by sample_rows_run */
};

struct sample_rows {
    int n_threads;
    int vocab;
    struct threadpool tp;
    struct sampler_scratch *ss;     /* [n_threads] */
    struct sample_rows_item *items; /* [cap] */
    int *item_of;                   /* [cap] row -> item, or -1 */
    int cap, n;
};

/* n_threads >= 2 threads for rows of vocab entries, steps of up to cap rows. */
enum hr_status sample_rows_init(struct sample_rows *sr, int n_threads, int vocab, int cap, char *err, size_t errlen);
void sample_rows_free(struct sample_rows *sr);
/* Forgets the items (every row back to -1). */
void sample_rows_reset(struct sample_rows *sr);
/* The item for row (< cap), to be filled in. */
struct sample_rows_item *sample_rows_add(struct sample_rows *sr, int row);
/* Samples every item. */
void sample_rows_run(struct sample_rows *sr);
/* Row's result, or NULL when the row was not added. */
const struct sampler_result *sample_rows_result(const struct sample_rows *sr, int row);

#endif
