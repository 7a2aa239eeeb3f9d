/* Token sampling: logit bias, penalties, temperature, min-p, top-k, top-p, a counter-based RNG,
 * and logprobs.
 *
 * Order (vLLM V1's sampler, checked against its documentation):
 *   1. logit bias (added),
 *   2. penalties: repetition (tokens in the prompt or the output: positive logits divided,
 *      negative multiplied, as HF and vLLM), then frequency (minus penalty x count in the
 *      output), then presence (minus penalty once if in the output), as OpenAI and vLLM;
 *   3. temperature < SAMPLER_GREEDY_EPS: greedy, argmax with ties to the lower id; otherwise
 *      divide by the temperature,
 *   4. min-p (keep tokens whose probability >= min_p x the top probability),
 *   5. top-k (the k best; ties to the lower id, so exactly k survive),
 *   6. top-p over what is left, renormalised (smallest prefix whose mass reaches top_p),
 *   7. draw one token from the survivors with a uniform from Philox-4x32-10 keyed by
 *      (seed, seq_index, step).
 *
 * Logprobs (logprobs, n_logprobs): by default those of the raw model distribution,
 * log_softmax(logits) before bias, penalties and temperature, as vLLM V1's default
 * (logprobs_mode "raw_logprobs"). SAMPLER_LOGPROBS_PENALIZED reports log_softmax of the logits
 * after bias and penalties, before temperature (vLLM V0's distribution without temperature).
 *
 * Determinism: the result depends only on the arguments (no state across calls, no threads,
 * plain float/double arithmetic, sums in a fixed order). Sampling allocates nothing. */
#ifndef HEARTH_ENGINE_SAMPLER_H
#define HEARTH_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define SAMPLER_MAX_LOGPROBS 20
#define SAMPLER_GREEDY_EPS 1e-5f /* temperatures below this are greedy (vLLM's epsilon) */

enum sampler_logprobs_mode {
    SAMPLER_LOGPROBS_RAW = 0,   /* log_softmax of the model's logits (default) */
    SAMPLER_LOGPROBS_PENALIZED, /* log_softmax after logit bias and penalties, before temperature */
};

struct sampler_logit_bias {
    int32_t token;
    float bias; /* [-100, 100], added to the logit; entries for one token add up */
};

struct sampler_params {
    float temperature;        /* >= 0; below SAMPLER_GREEDY_EPS: greedy */
    int top_k;                /* >= 0; 0 = off; above the vocab = off */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off */
    float presence_penalty;   /* [-2, 2]; 0 = off */
    float frequency_penalty;  /* [-2, 2]; 0 = off */
    const struct sampler_logit_bias *logit_bias; /* [n_logit_bias]; not owned, must outlive use */
    int n_logit_bias;
    uint64_t seed;            /* see sampler_seed_draw for requests without one */
    bool logprobs;            /* report the sampled token's logprob */
    int n_logprobs;           /* 0..SAMPLER_MAX_LOGPROBS alternatives (top_logprobs); implies logprobs */
    enum sampler_logprobs_mode logprobs_mode;
    bool ignore_eos;          /* for the engine: do not stop at eos ids (sampling is unaffected) */
};

/* Neutral parameters: temperature 1, no filters, no penalties, seed 0, no logprobs. */
void sampler_params_default(struct sampler_params *p);

/* Checks every field against its range; vocab bounds the logit bias ids. The message names the
 * field (OpenAI's spelling where one exists). */
enum hr_status sampler_params_validate(const struct sampler_params *p, int vocab, char *err, size_t errlen);

struct sampler_logprob {
    int32_t token;
    float logprob;
};

struct sampler_result {
    int32_t token;     /* the sampled token */
    float logprob;     /* its logprob (0 unless logprobs or n_logprobs) */
    int n_top;         /* = n_logprobs */
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS]; /* [n_top], best first, ties to the lower id */
};

struct sampler_cand;

/* Per-thread working memory for one vocabulary size; allocated once. */
struct sampler_scratch {
    int vocab;
    float *x;                    /* [vocab] logits after bias and penalties */
    struct sampler_cand *cand;   /* [vocab] surviving candidates */
    struct sampler_cand *heap;   /* [vocab] partial selection / sorted prefix */
    uint32_t *count;             /* [vocab] occurrences in the output; all zero between calls */
    uint8_t *seen;               /* [vocab] token in prompt or output; all zero between calls */
    double *bin_mass;            /* [4096] top-p: probability mass per logit bin */
    int *bin_count;              /* [4096] top-p: candidates per logit bin */
    float *w;                    /* [vocab] temperature alone: every token's weight */
    double *run;                 /* [vocab / 1024 + 1] the weights' running sum at every 1,024th token */
};

enum hr_status sampler_scratch_init(struct sampler_scratch *s, int vocab, char *err, size_t errlen);
void sampler_scratch_free(struct sampler_scratch *s); /* no-op on NULL or zeroed */

/* Steps 1-2: writes the logits after bias and penalties into out [vocab] (out may be
 * s->x). history holds the prompt then the output: [n_prompt + n_generated] token ids,
 * each in [0, vocab). NaN logits count as -inf, +inf as FLT_MAX. */
void sampler_process_logits(const struct sampler_params *p, const float *logits, int vocab,
                            const int32_t *history, int n_prompt, int n_generated,
                            struct sampler_scratch *s, float *out);

/* One sampling step for one sequence. logits [vocab]; history as above (repetition over the
 * prompt and the output, presence/frequency over the output only); seq_index and step (the
 * index of the token being generated) key the random draw with p->seed. p must have passed
 * sampler_params_validate for this vocab. Returns the token (also in out->token).
 * With no finite logit at all, returns token 0. */
int32_t sampler_sample(const struct sampler_params *p, const float *logits, int vocab,
                       const int32_t *history, int n_prompt, int n_generated,
                       uint64_t seq_index, uint64_t step, struct sampler_scratch *s,
                       struct sampler_result *out);

/* Scores a given token under the raw model distribution, log_softmax(logits): its
 * logprob and the n_top best alternatives (prompt logprobs).  Allocates nothing. */
void sampler_score(const float *logits, int vocab, int32_t token, int n_top, struct sampler_scratch *s,
                   struct sampler_result *out);

/* Philox-4x32-10 (Salmon et al., SC'11): one block of 4 random words. */
void sampler_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The uniform in [0, 1) (53 bits) used for (seed, seq_index, step). */
double sampler_uniform(uint64_t seed, uint64_t seq_index, uint64_t step);

/* e^v for v <= 0 (+0 included; below -200, and -inf, 0): the sampling weights.  Our own
 * evaluation in double, rounded once to float, in IEEE double operations only, so every
 * CPU and every vector width gives the same bits and the weights of a whole vocabulary
 * are computed in vector registers; glibc's expf is scalar (and its FMA build may differ
 * from its plain one).  It is the correctly rounded e^v on every float v in [-128, 0]
 * sampled in steps of 7 ulps (160 million; glibc's expf differs from that on 0.009%),
 * and the tokens drawn are those of expf on every case compared (6,000). */
float sampler_exp(float v);

/* A fresh random seed (getrandom), for requests that give none; report it to the client. */
uint64_t sampler_seed_draw(void);

#endif
