/* Minimal test harness shared by every tests/unit/test_*.c.
 * A test binary defines test functions, lists them in main with TEST_RUN, and ends
 * with TEST_END; tests/run.sh reads the "RESULT passed=N failed=N" line it prints. */
#ifndef HEARTH_TEST_H
#define HEARTH_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int test_failed_checks;   /* checks failed inside the current test */
extern int test_n_passed, test_n_failed, test_n_skipped;

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    test_failed_checks++; } } while (0)

#define CHECK_MSG(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); test_failed_checks++; } } while (0)

/* A status-returning call that must succeed; prints the module's message. */
#define CHECK_OK(call, errbuf) do { enum hr_status st_ = (call); if (st_ != HR_OK) { \
    fprintf(stderr, "  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, \
            hr_status_str(st_), (errbuf)); test_failed_checks++; } } while (0)

#define TEST_RUN(fn) do { test_failed_checks = 0; fn(); \
    if (test_failed_checks) { test_n_failed++; printf("FAIL %s\n", #fn); } \
    else { test_n_passed++; printf("ok   %s\n", #fn); } fflush(stdout); } while (0)

/* TEST_SANITIZED: defined when built with AddressSanitizer (make asan; gcc says so with
 * __SANITIZE_ADDRESS__, clang with __has_feature). */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif

/* A test that cannot run here (no GPU): counted and shown as skipped, with why. */
#define TEST_SKIP(name, ...) do { test_n_skipped++; printf("SKIP %s: ", name); printf(__VA_ARGS__); \
    putchar('\n'); fflush(stdout); } while (0)

#define TEST_END() do { if (test_n_skipped) \
        printf("RESULT passed=%d failed=%d skipped=%d\n", test_n_passed, test_n_failed, test_n_skipped); \
    else printf("RESULT passed=%d failed=%d\n", test_n_passed, test_n_failed); \
    return test_n_failed ? 1 : 0; } while (0)

/* Test data: tests/data (checked in) and tests/.cache (fetched by scripts/testdata.sh). */
const char *test_data_dir(void);   /* $HEARTH_TEST_DATA or "tests/data" */
const char *test_cache_dir(void);  /* $HEARTH_TEST_CACHE or "tests/.cache" */
char *test_path(char *buf, size_t n, const char *dir, const char *rel);

#endif
