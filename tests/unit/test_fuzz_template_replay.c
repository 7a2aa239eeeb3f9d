/* Replays the chat-template fuzz corpus (tests/fuzz/corpus/template/) through the fuzz target's
 * own code in every `make test` / `make asan`. Names carry the expectation: ok-* must render,
 * bad-* must be refused with an error; other names (crashers found later) must only not crash. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "test.h"

#include "../fuzz/fuzz_template.c"

static const char *corpus_dir(void)
{
    const char *d = getenv("HEARTH_FUZZ_CORPUS");
    return d && *d ? d : "tests/fuzz/corpus";
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_replay_template(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/template", corpus_dir());
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    char *names[4096];
    int n = 0, ok = 0, bad = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096)
        if (e->d_name[0] != '.')
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int i = 0; i < n; i++) {
        char p[2048], err[HR_ERRLEN];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        char *buf = NULL;
        size_t len = 0;
        CHECK_OK(fileio_read_all(p, 0, &buf, &len, err, sizeof err), err);
        if (buf) {
            /* an exact-size copy, so that ASan sees a read one past the end */
            uint8_t *exact = malloc(len ? len : 1);
            memcpy(exact, buf, len);
            free(buf);
            enum hr_status st = fuzz_template_run(exact, len);
            LLVMFuzzerTestOneInput(exact, len);
            if (!strncmp(names[i], "ok-", 3)) {
                CHECK_MSG(st == HR_OK, "template/%s: %s", names[i], hr_status_str(st));
                ok++;
            } else if (!strncmp(names[i], "bad-", 4)) {
                CHECK_MSG(st != HR_OK, "template/%s rendered", names[i]);
                bad++;
            }
            free(exact);
        }
        free(names[i]);
    }
    CHECK(n >= 10 && ok >= 3 && bad >= 3);
    printf("  %d template inputs (%d ok-, %d bad-)\n", n, ok, bad);
}

int main(void)
{
    TEST_RUN(test_replay_template);
    TEST_END();
}
