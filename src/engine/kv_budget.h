/* The default size of the KV pool and of max_model_len.
 *
 * Without --kv-cache-mib the pool takes a fraction of the memory the machine has
 * available at start-up (MemAvailable in /proc/meminfo, less the weights, which are
 * mapped and will be resident), like vLLM's --gpu-memory-utilization, capped at what
 * max_num_seqs sequences of max_model_len tokens can ever use at once: beyond that
 * only the prefix cache would gain, and a shared machine keeps the rest.
 *
 * max_model_len defaults to the config's context, lowered to what the pool holds so
 * that one sequence of that length always fits (the engine preempts others for it);
 * a value given by the user above either bound is an error. */
#ifndef HEARTH_ENGINE_KV_BUDGET_H
#define HEARTH_ENGINE_KV_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KV_BUDGET_DEFAULT_FRACTION 0.5   /* of the available memory the weights leave */
#define KV_BUDGET_MIN_BYTES ((size_t)16 << 20)

/* MemAvailable of /proc/meminfo in bytes; HR_ERR_IO when it cannot be read. */
enum hr_status kv_budget_mem_available(uint64_t *out, char *err, size_t errlen);

/* The pool's budget: fraction (0 < f <= 1) of (available - weight_bytes), at most
 * max_tokens_needed * bytes_per_token; HR_ERR_NOMEM when the memory, not that cap,
 * bounds it below KV_BUDGET_MIN_BYTES. */
enum hr_status kv_budget_auto(uint64_t available, uint64_t weight_bytes, double fraction, size_t bytes_per_token,
                              uint64_t max_tokens_needed, size_t *out, char *err, size_t errlen);

/* On a device (--gpu-memory-utilization, vLLM's meaning): the pool takes what is left
 * of fraction * total once the weights and scratch are in (total - free_now is what
 * they, and everything else on the card, use), at most max_tokens_needed *
 * bytes_per_token; HR_ERR_NOMEM when that leaves less than KV_BUDGET_MIN_BYTES. */
#define KV_BUDGET_DEFAULT_GPU_UTILIZATION 0.9
enum hr_status kv_budget_device(uint64_t total, uint64_t free_now, double fraction, size_t bytes_per_token,
                                uint64_t max_tokens_needed, size_t *out, char *err, size_t errlen);

/* max_model_len: `asked` (0: not given), the config's context and the pool's tokens.
 * Sets *lowered when the default was lowered to the pool. */
enum hr_status kv_budget_max_model_len(int asked, int config_context, int64_t pool_tokens, int *out, int *lowered,
                                       char *err, size_t errlen);

#endif
