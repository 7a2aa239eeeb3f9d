/* The engine's step profile (step_prof.h). */
#include "engine/step_prof.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"

static int64_t step_prof_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void step_prof_init(struct step_prof *p)
{
    memset(p, 0, sizeof *p);
    const char *v = getenv("HEARTH_ENGINE_PROFILE");
    p->on = v && strcmp(v, "1") == 0;
}

void step_prof_begin(struct step_prof *p)
{
    if (!p->on)
        return;
    p->decode = false;
    p->last = step_prof_now();
}

void step_prof_kind(struct step_prof *p, bool decode_only, int n_rows)
{
    if (!p->on)
        return;
    p->decode = decode_only;
    p->steps[decode_only]++;
    p->rows[decode_only] += n_rows;
}

void step_prof_mark(struct step_prof *p, enum step_prof_phase phase)
{
    if (!p->on)
        return;
    int64_t t = step_prof_now();
    p->ns[p->decode][phase] += t - p->last;
    p->last = t;
}

void step_prof_log(const struct step_prof *p)
{
    static const char *names[STEP_PROF_N] = {"plan", "batch", "forward", "commit", "logits", "sample", "done"};
    if (!p->on)
        return;
    for (int k = 0; k < 2; k++) {
        if (!p->steps[k])
            continue;
        int64_t total = 0;
        for (int i = 0; i < STEP_PROF_N; i++)
            total += p->ns[k][i];
        log_info("engine profile: %s steps %lld, %.1f rows each, %.3f ms a step", k ? "decode-only" : "other",
                 p->steps[k], (double)p->rows[k] / (double)p->steps[k], (double)total * 1e-6 / (double)p->steps[k]);
        for (int i = 0; i < STEP_PROF_N; i++)
            log_info("engine profile:   %-8s %9.3f ms a step (%4.1f%%)", names[i],
                     (double)p->ns[k][i] * 1e-6 / (double)p->steps[k],
                     total ? 100.0 * (double)p->ns[k][i] / (double)total : 0.0);
    }
}
