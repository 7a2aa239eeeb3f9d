/* A host reference of the device sampler (kernels/dsample.h), written apart from the
 * kernel: the row's parameters as the engine packs them (dev_sample_row_params), the
 * logits after bias and penalties from the CPU's own sampler_process_logits,
 * then a full sort of the candidates and plain prefix sums of the fixed-point weights.
 * The kernel (histograms and radix descents, no sort) must give the same bytes. */
#ifndef HEARTH_TESTS_DSAMPLE_REF_H
#define HEARTH_TESTS_DSAMPLE_REF_H

#include "engine/sampler.h"
#include "kernels/dsample.h"

/* out: as the device writes it (unused top entries zero).  *margin: how close the CPU
 * sampler's decision comes to a boundary (top-p limit, the draw's cumulative edges,
 * min-p), relative, in double; below ~1e-6 the two samplers may differ. */
/* The same from a row's parameters and its logits after bias and penalties x [vocab]
 * (logits: the raw row, for raw logprobs). */
void dsample_ref_row(const struct dsample_row *r, const float *logits, const float *x, int vocab,
                     struct dsample_out *out, double *margin);

void dsample_ref(const struct sampler_params *p, const float *logits, int vocab, const int32_t *history,
                 int n_prompt, int n_generated, uint64_t seq_index, uint64_t step, struct sampler_scratch *s,
                 struct dsample_out *out, double *margin);

#endif
