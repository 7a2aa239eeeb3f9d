/* Replays every file of the fuzz corpus (tests/fuzz/corpus/<target>/) through the
 * fuzz targets' own code, so that `make test` (and `make asan`) cover the inputs the
 * fuzzers found.  Names carry the expectation: ok-* must parse, bad-* must be
 * refused; any other name (crashers added later) must only not crash. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "test.h"

#define LLVMFuzzerTestOneInput fuzz_safetensors_entry
#include "../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_config_entry
#include "../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_http_entry
#include "../fuzz/fuzz_http.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_grammar_entry
#include "../fuzz/fuzz_grammar.c"
#undef LLVMFuzzerTestOneInput

static const char *corpus_dir(void)
{
    const char *d = getenv("HEARTH_FUZZ_CORPUS");
    return d && *d ? d : "tests/fuzz/corpus";
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs run() on every file of corpus/<target>; returns the number of files. */
static int replay(const char *target, enum hr_status (*run)(const uint8_t *, size_t),
                  int (*entry)(const uint8_t *, size_t))
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", corpus_dir(), target);
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return 0;
    char *names[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; i < n; i++) {
        char p[2048], err[HR_ERRLEN];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        char *buf;
        size_t len;
        CHECK_OK(fileio_read_all(p, 0, &buf, &len, err, sizeof err), err);
        if (!buf)
            continue;
        /* an exact-size copy, so that ASan sees a read one past the end */
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, buf, len);
        free(buf);
        enum hr_status st = run(exact, len);
        entry(exact, len);
        if (!strncmp(names[i], "ok-", 3))
            CHECK_MSG(st == HR_OK, "%s/%s: %s", target, names[i], hr_status_str(st));
        else if (!strncmp(names[i], "bad-", 4))
            CHECK_MSG(st != HR_OK, "%s/%s parsed", target, names[i]);
        free(exact);
        free(names[i]);
    }
    return n;
}

static void test_replay_safetensors(void)
{
    int n = replay("safetensors", fuzz_safetensors_run, fuzz_safetensors_entry);
    CHECK(n >= 10);
    printf("  %d safetensors inputs\n", n);
}

static void test_replay_config(void)
{
    int n = replay("config", fuzz_config_run, fuzz_config_entry);
    CHECK(n >= 10);
    printf("  %d config inputs\n", n);
}

static void test_replay_http(void)
{
    int n = replay("http", fuzz_http_run, fuzz_http_entry);
    CHECK(n >= 10);
    printf("  %d http inputs\n", n);
}

static void test_replay_grammar(void)
{
    int n = replay("grammar", fuzz_grammar_run, fuzz_grammar_entry);
    CHECK(n >= 10);
    printf("  %d grammar inputs\n", n);
}

int main(void)
{
    TEST_RUN(test_replay_safetensors);
    TEST_RUN(test_replay_config);
    TEST_RUN(test_replay_http);
    TEST_RUN(test_replay_grammar);
    TEST_END();
}
