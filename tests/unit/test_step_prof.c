/* The engine's step profile (HEARTH_ENGINE_PROFILE=1): off, marks change nothing; on,
 * a request's prompt steps and decode steps are counted apart, with their rows, and
 * every step's time lands in its phases. */
#include <stdlib.h>
#include <string.h>

#include "engine/step_prof.h"
#include "engine_rig.h"
#include "test.h"

static void test_off(void)
{
    struct step_prof p;
    setenv("HEARTH_ENGINE_PROFILE", "1", 1);
    step_prof_init(&p);
    CHECK(p.on);
    setenv("HEARTH_ENGINE_PROFILE", "0", 1);
    step_prof_init(&p);
    CHECK(!p.on);
    unsetenv("HEARTH_ENGINE_PROFILE");
    step_prof_init(&p);
    CHECK(!p.on);
    step_prof_begin(&p);
    step_prof_kind(&p, true, 5);
    step_prof_mark(&p, STEP_PROF_FORWARD);
    struct step_prof zero;
    memset(&zero, 0, sizeof zero);
    CHECK(!memcmp(&p, &zero, sizeof p));
    step_prof_log(&p); /* nothing */
}

static void test_engine_steps(void)
{
    struct hearth_engine *e = rig_engine(rig_kv_bytes(64), 4, 32, 1);
    if (!e) {
        CHECK(0);
        return;
    }
    e->prof.on = true;
    struct job j;
    rig_make_job(&j, e->m.cfg.vocab_size);
    j.n_prompt = 70; /* three prompt steps of at most 32 tokens */
    for (int i = 0; i < j.n_prompt; i++)
        j.prompt[i] = (int32_t)((i * 37 + 11) % e->m.cfg.vocab_size);
    j.p.n_prompt_ids = j.n_prompt;
    j.p.max_tokens = 9;
    CHECK(rig_run_alone(e, &j));
    CHECK(j.alone.completion_tokens == 9);
    const struct step_prof *p = &e->prof;
    /* the first token comes with the prompt's last step; each other one is a decode step */
    CHECK_MSG(p->steps[1] == 8 && p->rows[1] == 8, "decode-only steps %lld, rows %lld", p->steps[1], p->rows[1]);
    CHECK_MSG(p->steps[0] == 3 && p->rows[0] == 3, "other steps %lld, rows %lld", p->steps[0], p->rows[0]);
    for (int k = 0; k < 2; k++) {
        long long total = 0;
        for (int i = 0; i < STEP_PROF_N; i++) {
            CHECK(p->ns[k][i] >= 0);
            total += p->ns[k][i];
        }
        CHECK(p->ns[k][STEP_PROF_FORWARD] > 0 && total >= p->ns[k][STEP_PROF_FORWARD]);
    }
    rig_check_idle(e);
    hearth_engine_free(e);
}

int main(void)
{
    TEST_RUN(test_off);
    TEST_RUN(test_engine_steps);
    TEST_END();
}
