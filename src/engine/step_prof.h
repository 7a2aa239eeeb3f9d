/* The engine's step profile (HEARTH_ENGINE_PROFILE=1): wall time of each phase of a
 * step, decode-only steps (every row one token) apart from the others, logged when the
 * engine is freed.  A device backend works asynchronously: its forward's time shows up
 * in the phase that first waits for it (the logits'); HEARTH_CUDA_PROFILE=1 waits after
 * every op. */
#ifndef HEARTH_ENGINE_STEP_PROF_H
#define HEARTH_ENGINE_STEP_PROF_H

#include <stdbool.h>
#include <stdint.h>

enum step_prof_phase {
    STEP_PROF_PLAN,    /* intake and the scheduler's plan */
    STEP_PROF_BATCH,   /* the batch's rows and tables */
    STEP_PROF_FORWARD, /* the forward (launches, on a device) */
    STEP_PROF_COMMIT,  /* commits and prefix-cache publication */
    STEP_PROF_LOGITS,  /* logits rows: computed, brought over or sampled on the device */
    STEP_PROF_SAMPLE,  /* host sampling, accepting tokens, events */
    STEP_PROF_DONE,    /* finished groups, stats */
    STEP_PROF_N
};

struct step_prof {
    bool on;
    bool decode;                  /* the current step is decode-only */
    int64_t last;                 /* monotonic ns of the last mark */
    int64_t ns[2][STEP_PROF_N];   /* [decode-only?][phase] */
    long long steps[2];
    long long rows[2];            /* rows over the steps */
};

/* On when HEARTH_ENGINE_PROFILE=1. */
void step_prof_init(struct step_prof *p);
/* A step begins (its first mark follows). */
void step_prof_begin(struct step_prof *p);
/* Charges the time since the last mark to phase. */
void step_prof_mark(struct step_prof *p, enum step_prof_phase phase);
/* The step's kind, once the plan is known. */
void step_prof_kind(struct step_prof *p, bool decode_only, int n_rows);
/* Logs the totals (nothing when off). */
void step_prof_log(const struct step_prof *p);

#endif
