/* Definitions behind tests/unit/test.h. */
#include "test.h"

int test_failed_checks, test_n_passed, test_n_failed, test_n_skipped;

const char *test_data_dir(void)
{
    const char *d = getenv("HEARTH_TEST_DATA");
    return d && *d ? d : "tests/data";
}

const char *test_cache_dir(void)
{
    const char *d = getenv("HEARTH_TEST_CACHE");
    return d && *d ? d : "tests/.cache";
}

char *test_path(char *buf, size_t n, const char *dir, const char *rel)
{
    snprintf(buf, n, "%s/%s", dir, rel);
    return buf;
}
