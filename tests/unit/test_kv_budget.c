/* The KV pool's default budget and max_model_len (src/engine/kv_budget.c): the
 * arithmetic on given numbers, and MemAvailable read from /proc/meminfo. */
#include <stdint.h>
#include <string.h>

#include "engine/kv_budget.h"
#include "test.h"

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

static void test_auto_budget(void)
{
    char err[HR_ERRLEN];
    size_t b = 0;
    /* half of (16 GiB - 2 GiB of weights): 7 GiB, below the cap of 64 x 40960 tokens x 112 KiB */
    CHECK_OK(kv_budget_auto(16 * GIB, 2 * GIB, 0.5, 114688, 64 * 40960, &b, err, sizeof err), err);
    CHECK(b == 7 * GIB);
    /* the cap: 2 sequences of 4096 tokens at 512 bytes */
    CHECK_OK(kv_budget_auto(16 * GIB, 0, 0.9, 512, 2 * 4096, &b, err, sizeof err), err);
    CHECK(b == 2 * 4096 * 512);
    /* a cap below the minimum is still the cap */
    CHECK_OK(kv_budget_auto(16 * GIB, 0, 0.5, 512, 16, &b, err, sizeof err), err);
    CHECK(b == 16 * 512);
    /* weights larger than the memory: an error that says what to do */
    CHECK(kv_budget_auto(1 * GIB, 2 * GIB, 0.5, 512, 1u << 30, &b, err, sizeof err) == HR_ERR_NOMEM);
    CHECK(strstr(err, "--kv-cache-mib") != NULL);
    CHECK(kv_budget_auto(20 * MIB, 0, 0.5, 512, 1u << 30, &b, err, sizeof err) == HR_ERR_NOMEM);
    CHECK(kv_budget_auto(16 * GIB, 0, 0.0, 512, 1, &b, err, sizeof err) == HR_ERR_INVALID);
    CHECK(kv_budget_auto(16 * GIB, 0, 1.5, 512, 1, &b, err, sizeof err) == HR_ERR_INVALID);
}

static void test_max_model_len(void)
{
    char err[HR_ERRLEN];
    int m = 0, low = 0;
    CHECK_OK(kv_budget_max_model_len(0, 40960, 2336, &m, &low, err, sizeof err), err);
    CHECK(m == 2336 && low == 1);
    CHECK_OK(kv_budget_max_model_len(0, 4096, 1 << 20, &m, &low, err, sizeof err), err);
    CHECK(m == 4096 && low == 0);
    /* given: kept when it fits */
    CHECK_OK(kv_budget_max_model_len(1000, 4096, 2048, &m, &low, err, sizeof err), err);
    CHECK(m == 1000 && low == 0);
    CHECK(kv_budget_max_model_len(3000, 4096, 2048, &m, &low, err, sizeof err) == HR_ERR_INVALID);
    CHECK(strstr(err, "2048 tokens") && strstr(err, "--kv-cache-mib"));
    CHECK(kv_budget_max_model_len(5000, 4096, 1 << 20, &m, &low, err, sizeof err) == HR_ERR_INVALID);
    CHECK(strstr(err, "max_position_embeddings 4096") != NULL);
    CHECK(kv_budget_max_model_len(0, 4096, 1, &m, &low, err, sizeof err) == HR_ERR_INVALID);
}

static void test_device_budget(void)
{
    char err[HR_ERRLEN];
    size_t b = 0;
    /* a 140 GiB card, 20 GiB in use (weights, scratch, context): 0.9 * 140 - 20 = 106 GiB */
    CHECK_OK(kv_budget_device(140 * GIB, 120 * GIB, 0.9, 114688, (uint64_t)1 << 40, &b, err, sizeof err), err);
    CHECK(b == 106 * GIB);
    /* capped at what max_num_seqs sequences can use: 64 x 40960 tokens x 112 KiB = 280 GiB > 106: not binding;
     * 4 x 4096 tokens x 112 KiB = 1.75 GiB is */
    CHECK_OK(kv_budget_device(140 * GIB, 120 * GIB, 0.9, 114688, 4 * 4096, &b, err, sizeof err), err);
    CHECK(b == (size_t)4 * 4096 * 114688);
    /* never more than is free: 1.0 of a card another process holds half of */
    CHECK_OK(kv_budget_device(80 * GIB, 30 * GIB, 1.0, 512, (uint64_t)1 << 40, &b, err, sizeof err), err);
    CHECK(b == 30 * GIB);
    /* the weights already take more than the fraction: an error naming the flag */
    CHECK(kv_budget_device(80 * GIB, 10 * GIB, 0.5, 512, (uint64_t)1 << 40, &b, err, sizeof err) == HR_ERR_NOMEM);
    CHECK(strstr(err, "--gpu-memory-utilization 0.5") && strstr(err, "71680 of 81920 MiB"));
    CHECK(kv_budget_device(80 * GIB, 10 * GIB, 0.0, 512, 1, &b, err, sizeof err) == HR_ERR_INVALID);
    CHECK(kv_budget_device(80 * GIB, 10 * GIB, 1.01, 512, 1, &b, err, sizeof err) == HR_ERR_INVALID);
}

static void test_mem_available(void)
{
    char err[HR_ERRLEN];
    uint64_t a = 0;
    CHECK_OK(kv_budget_mem_available(&a, err, sizeof err), err);
    CHECK_MSG(a > 16 * MIB && a < ((uint64_t)1 << 50), "MemAvailable %llu", (unsigned long long)a);
}

int main(void)
{
    TEST_RUN(test_auto_budget);
    TEST_RUN(test_max_model_len);
    TEST_RUN(test_device_budget);
    TEST_RUN(test_mem_available);
    TEST_END();
}
