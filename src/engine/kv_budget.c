/* Default KV pool size and max_model_len (see kv_budget.h). */
#include "engine/kv_budget.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

enum hr_status kv_budget_mem_available(uint64_t *out, char *err, size_t errlen)
{
    *out = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return hr_err(err, errlen, HR_ERR_IO, "cannot read /proc/meminfo to size the KV pool; give --kv-cache-mib");
    char line[256];
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            *out = (uint64_t)kib << 10;
            found = true;
            break;
        }
    }
    fclose(f);
    if (!found)
        return hr_err(err, errlen, HR_ERR_IO, "/proc/meminfo has no MemAvailable; give --kv-cache-mib");
    return HR_OK;
}

/* want bytes (a double: it may be negative or huge) capped at what max_tokens_needed
 * tokens use; false when memory, not the cap, bounds it below KV_BUDGET_MIN_BYTES. */
static bool kv_budget_fit(double want, uint64_t limit, size_t bytes_per_token, uint64_t max_tokens_needed,
                          size_t *out)
{
    uint64_t budget = want <= 0 ? 0 : want >= 18e18 ? UINT64_MAX : (uint64_t)want;
    if (budget > limit)
        budget = limit;
    uint64_t cap = UINT64_MAX;
    if (bytes_per_token > 0 && max_tokens_needed > 0 && max_tokens_needed < UINT64_MAX / bytes_per_token)
        cap = max_tokens_needed * bytes_per_token;
    if (budget >= cap)
        budget = cap;
    else if (budget < KV_BUDGET_MIN_BYTES)
        return false;
    *out = budget > SIZE_MAX ? SIZE_MAX : (size_t)budget;
    return true;
}

enum hr_status kv_budget_auto(uint64_t available, uint64_t weight_bytes, double fraction, size_t bytes_per_token,
                              uint64_t max_tokens_needed, size_t *out, char *err, size_t errlen)
{
    *out = 0;
    if (!(fraction > 0.0 && fraction <= 1.0))
        return hr_err(err, errlen, HR_ERR_INVALID, "--kv-cache-memory-fraction must be in (0, 1], got %g", fraction);
    uint64_t left = available > weight_bytes ? available - weight_bytes : 0;
    if (!kv_budget_fit((double)left * fraction, UINT64_MAX, bytes_per_token, max_tokens_needed, out))
        return hr_err(err, errlen, HR_ERR_NOMEM,
                      "%.0f MiB available beside %.0f MiB of weights leaves too little for the KV pool "
                      "(fraction %g); give --kv-cache-mib",
                      (double)available / 1048576.0, (double)weight_bytes / 1048576.0, fraction);
    return HR_OK;
}

enum hr_status kv_budget_device(uint64_t total, uint64_t free_now, double fraction, size_t bytes_per_token,
                                uint64_t max_tokens_needed, size_t *out, char *err, size_t errlen)
{
    *out = 0;
    if (!(fraction > 0.0 && fraction <= 1.0))
        return hr_err(err, errlen, HR_ERR_INVALID, "--gpu-memory-utilization must be in (0, 1], got %g", fraction);
    uint64_t used = total > free_now ? total - free_now : 0;
    if (!kv_budget_fit((double)total * fraction - (double)used, free_now, bytes_per_token, max_tokens_needed, out))
        return hr_err(err, errlen, HR_ERR_NOMEM,
                      "the device's weights and scratch use %.0f of %.0f MiB: --gpu-memory-utilization %g leaves "
                      "too little for the KV pool; raise it or give --kv-cache-mib",
                      (double)used / 1048576.0, (double)total / 1048576.0, fraction);
    return HR_OK;
}

enum hr_status kv_budget_max_model_len(int asked, int config_context, int64_t pool_tokens, int *out, int *lowered,
                                       char *err, size_t errlen)
{
    *out = 0;
    *lowered = 0;
    if (asked < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "--max-model-len must be >= 1, got %d", asked);
    if (asked > config_context)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "--max-model-len %d is above the model's context (max_position_embeddings %d)", asked,
                      config_context);
    if (asked > pool_tokens)
        return hr_err(err, errlen, HR_ERR_INVALID,
                      "--max-model-len %d is more than the KV pool holds (%" PRId64 " tokens); "
                      "raise --kv-cache-mib or lower --max-model-len",
                      asked, pool_tokens);
    if (asked > 0) {
        *out = asked;
        return HR_OK;
    }
    *out = config_context;
    if (pool_tokens < config_context) {
        *out = (int)pool_tokens;
        *lowered = 1;
    }
    if (*out < 2)
        return hr_err(err, errlen, HR_ERR_INVALID, "the KV pool holds %d tokens: too few to serve anything", *out);
    return HR_OK;
}
