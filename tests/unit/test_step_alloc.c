/* The step path allocates nothing: malloc and friends are interposed (this binary's
 * definitions take precedence over the C library's for the whole process, the
 * library's threads included) and counted while engine_step runs, over steps that
 * take prefill chunks, decodes, a group of n > 1 forking and copying its shared
 * tail, prefix-cache hits and publication, preemption and requests ending.  The
 * documented exceptions (a request's event queue or text outgrowing what it was given
 * at submission, a namespace root for a new cache_salt) are kept out of the workload:
 * events are drained every step, carry no text, and every request has the salt of a
 * priming request run before the counting starts (its namespace root exists).  The
 * same workload runs again with a host-RAM tier under the small pool
 * (--kv-cache-host-mib): blocks copied out to it and back allocate nothing either.
 * Under a sanitizer, which brings its own allocator, the test reports a skip. */
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "engine_rig.h"
#include "test.h"

#ifndef TEST_SANITIZED
static atomic_int counting;
static atomic_long n_allocs;

/* glibc's own entry points, which its malloc, calloc, ... call. */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);

static void count(void)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
}

void *malloc(size_t n)
{
    count();
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    count();
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    count();
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    count();
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    count();
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

static int n_steps;
static long step_allocs;

static void count_on(void)
{
    atomic_store(&n_allocs, 0);
    atomic_store(&counting, 1);
}

static void count_off(void)
{
    atomic_store(&counting, 0);
    step_allocs += atomic_load(&n_allocs);
    n_steps++;
}

static struct hearth_engine *host_tier_engine(void)
{
    char dir[512], err[HR_ERRLEN];
    snprintf(dir, sizeof dir, "%s/fixtures/qwen3-tiny", test_data_dir());
    struct hearth_engine_params p;
    hearth_engine_params_default(&p);
    p.model_dir = dir;
    p.kv_cache_bytes = rig_kv_bytes(40);
    p.max_num_seqs = 12;
    p.max_batched_tokens = 48;
    p.n_threads = 2;
    p.kv_cache_host_bytes = rig_kv_bytes(64);
    struct hearth_engine *e = NULL;
    if (engine_create(&e, &p, false, err, sizeof err) != HR_OK)
        fprintf(stderr, "  engine_create: %s\n", err);
    return e;
}

static void step_allocates_nothing(bool host_tier)
{
    enum { NJ = 16 };
    step_allocs = 0;
    n_steps = 0;
    struct hearth_engine *ref = rig_engine(rig_kv_bytes(256), 32, 512, 1);
    /* a small pool (preemption) and small steps (chunked prefill), 2 threads */
    struct hearth_engine *e = host_tier ? host_tier_engine() : rig_engine(rig_kv_bytes(40), 12, 48, 2);
    CHECK(ref && e);
    if (!ref || !e) {
        hearth_engine_free(ref);
        hearth_engine_free(e);
        return;
    }
    /* The same jobs for both engines (made and run alone once). */
    static struct job jobs[NJ];
    static bool made;
    for (int i = 0; i < NJ && !made; i++) {
        rig_make_job(&jobs[i], 512);
        if (i >= NJ / 2) /* a shared prefix: cache hits */
            memcpy(jobs[i].prompt, jobs[0].prompt, (size_t)(jobs[0].n_prompt < jobs[i].n_prompt ? jobs[0].n_prompt
                                                                                                 : jobs[i].n_prompt) *
                                                       sizeof(int32_t));
        jobs[i].p.n = i % 5 == 1 ? 3 : 1; /* groups fork and copy their shared tail */
        jobs[i].arrive_step = 2 * i;
        CHECK(rig_run_alone(ref, &jobs[i]));
    }
    made = true;
    static struct job prime;
    if (!host_tier)
        rig_make_job(&prime, 512);
    CHECK(rig_run_alone(e, &prime));
    /* With the host tier the jobs run twice: the second time, what the first pushed out
     * of the pool comes back from host RAM. */
    for (int round = 0; round < (host_tier ? 2 : 1); round++) {
        CHECK(rig_run_together_around(e, jobs, NJ, count_on, count_off));
        for (int i = 0; i < NJ; i++)
            CHECK(rig_same_out(&jobs[i].alone, &jobs[i].together, jobs[i].p.n));
    }
    long allocs = step_allocs;
    int steps = n_steps;
    struct hearth_stats st;
    hearth_engine_stats(e, &st);
    CHECK_MSG(allocs == 0, "%ld allocations in %d steps", allocs, steps);
    CHECK_MSG(steps > 50 && st.preemptions > 0 && st.prefix_cache.hits_total > 0,
              "the workload must exercise the paths: %d steps, %lld preemptions, %lld hits", steps,
              (long long)st.preemptions, (long long)st.prefix_cache.hits_total);
    if (host_tier)
        CHECK_MSG(st.host_cache.stored_blocks_total > 0 && st.host_cache.blocks_restored_total > 0,
                  "the workload must use the host tier: %lld blocks stored, %lld restored",
                  (long long)st.host_cache.stored_blocks_total, (long long)st.host_cache.blocks_restored_total);
    /* The counter itself counts: an allocation while counting is seen. */
    atomic_store(&n_allocs, 0);
    atomic_store(&counting, 1);
    void *volatile p = malloc(32);
    atomic_store(&counting, 0);
    CHECK(atomic_load(&n_allocs) == 1);
    free(p);
    rig_check_idle(e);
    hearth_engine_free(e);
    hearth_engine_free(ref);
}

static void test_step_allocates_nothing(void) { step_allocates_nothing(false); }
static void test_step_allocates_nothing_with_host_tier(void) { step_allocates_nothing(true); }
#endif

int main(void)
{
#ifdef TEST_SANITIZED
    printf("skip: the sanitizer's allocator replaces malloc (checked by make test)\n");
#else
    TEST_RUN(test_step_allocates_nothing);
    TEST_RUN(test_step_allocates_nothing_with_host_tier);
#endif
    TEST_END();
}
