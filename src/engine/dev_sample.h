/* Sampling on the device, seen from the engine: the rows of a step whose requests allow
 * it, packed as the backend's sample op takes them (kernels/dsample.h), and the results
 * turned back into sampler results.  Only tokens and the logprobs asked for come back;
 * those rows' logits never leave the device.
 *
 * Which requests sample on the device is a property of the request alone (no grammar,
 * no prompt logprobs, at most DSAMPLE_MAX_BIAS logit biases) and of the engine's
 * settings, never of the batch: a request's tokens never depend on its neighbours. */
#ifndef HEARTH_ENGINE_DEV_SAMPLE_H
#define HEARTH_ENGINE_DEV_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/sampler.h"
#include "kernels/backend.h"
#include "kernels/dsample.h"

struct dev_sample {
    int vocab;
    struct dsample_row *rows;  /* [cap] */
    struct dsample_out *out;   /* [cap] */
    int n;
    size_t cap;
    struct dsample_mod *mods;  /* [cap_mods] */
    int n_mods;
    size_t cap_mods;
    float *biases;             /* [cap_biases] */
    int n_biases;
    size_t cap_biases;
    int32_t *slot;             /* [vocab]: token -> its mod in the row being added; -1 between adds */
};

/* Parameters whose rows the device may sample (validated ones). */
bool dev_sample_allowed(const struct sampler_params *p);

/* For rows of vocab tokens; cap rows to begin with (the arrays grow when a step needs more). */
enum hr_status dev_sample_init(struct dev_sample *ds, int vocab, int cap, char *err, size_t errlen);
void dev_sample_free(struct dev_sample *ds); /* no-op on zeroed */
void dev_sample_reset(struct dev_sample *ds);

/* A row's parameters as the device takes them (logits row 0, no mods): also what the
 * tests' host reference of the kernel starts from. */
void dev_sample_row_params(const struct sampler_params *p, uint64_t seq_index, uint64_t step, struct dsample_row *r);

/* Adds a row sampling logits row logit_row with p (dev_sample_allowed): history as
 * sampler_sample's (prompt then output), seq_index and step key the draw.  *index: the
 * row's index for dev_sample_result. */
enum hr_status dev_sample_add(struct dev_sample *ds, const struct sampler_params *p, int logit_row,
                              const int32_t *history, int n_prompt, int n_generated, uint64_t seq_index,
                              uint64_t step, int *index, char *err, size_t errlen);

/* Samples every row added on be (logits: backend memory [*, vocab]). */
enum hr_status dev_sample_run(struct dev_sample *ds, struct backend *be, const float *logits, char *err,
                              size_t errlen);

/* Row index's result, as sampler_sample would report it. */
void dev_sample_result(const struct dev_sample *ds, int index, struct sampler_result *r);

#endif
