/* Engine options shared by the subcommands that run the engine. */
#include "cli/engine_opts.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "kv/kv_store.h"
#include "model/model.h"

const char engine_opts_help[] =
    "engine options:\n"
    "  --model DIR                   Hugging Face model directory (required)\n"
    "  --device cpu|cuda|auto        where the model runs (default auto: CUDA when this build has it\n"
    "                                and a GPU is present, else the CPU)\n"
    "  --threads N                   kernel threads (default: all cores)\n"
    "  --kernel V                    force a kernel variant: avx512, avx512bf16, avx2, scalar\n"
    "                                (default: the best f32 variant this CPU has)\n"
    "  --compute f32|bf16            bf16: round activations to bf16 for the bf16 dot-product\n"
    "                                instructions (the avx512bf16 variant); exact either way\n"
    "  --kv-dtype bf16|f32           KV cache dtype (default bf16)\n"
    "  --kv-cache-mib N              KV pool size (default: see --kv-cache-memory-fraction)\n"
    "  --kv-cache-memory-fraction F  without --kv-cache-mib, the pool takes F of the memory available\n"
    "                                at start-up less the weights, at most what max-num-seqs sequences\n"
    "                                of max-model-len tokens use (default 0.5)\n"
    "  --max-model-len N             prompt + generated tokens of one sequence at most (default: the\n"
    "                                model's context, lowered to what the KV pool holds); on a GPU it\n"
    "                                also sizes attention's split workspace\n"
    "  --block-size N                tokens per KV block (default 16)\n"
    "  --max-num-seqs N              running sequences at most (default 64)\n"
    "  --max-batched-tokens N        tokens per step at most (default 512 on the CPU, 2048 on a GPU);\n"
    "                                larger steps raise throughput and inter-token latency, and on a\n"
    "                                GPU attention's split workspace grows with N x --max-model-len\n"
    "  --max-waiting N               queued requests at most (default: no limit)\n"
    "  --prefix-cache on|off         exact prefix KV reuse (default on)\n"
    "  --prefix-cache-max-entries N  cached blocks at most (N >= 1; default: the pool)\n"
    "  --kv-cache-dir DIR            the prefix cache's disk tier: blocks evicted from the pool, and\n"
    "                                every cached block at a clean shutdown, are written to DIR and\n"
    "                                read back (verified) when a prompt misses in memory, also after\n"
    "                                a restart; DIR must be this server's alone\n"
    "  --kv-cache-disk-mib N         the files in --kv-cache-dir at most, least recently used go\n"
    "                                first (default 1024)\n"
    "  --kv-cache-host-mib N         the prefix cache's host-RAM tier: blocks evicted from the pool are\n"
    "                                kept in N MiB of host memory (pinned on a GPU, allocated at start)\n"
    "                                and copied back when a prompt misses in the pool; the least\n"
    "                                recently used go on to --kv-cache-dir (default 0: none)\n"
    "  --schedule lpm|fcfs           admission order (default lpm: longest cached prefix first)\n"
    "  --max-wait-steps N            lpm: steps a request may wait before it goes first (default 32)\n"
    "  --no-mmap                     read the weights into memory instead of mapping the files (a file\n"
    "                                overwritten in place then cannot disturb a running server)\n"
    "  --load-format auto|dummy      dummy: random weights generated from config.json alone, on the\n"
    "                                device that runs them (benchmarks; outputs are meaningless)\n"
    "  --gpu-memory-utilization F    --device cuda without --kv-cache-mib: the KV pool takes what is\n"
    "                                left of F of the card's memory after weights and scratch (0.9)\n"
    "  --enforce-eager               --device cuda: run decode steps op by op, not as CUDA graphs\n"
    "                                (the same bits either way; graphs cut the launch overhead)\n"
    "  --no-device-sampling          --device cuda: bring every logits row to the host and sample\n"
    "                                there (default: requests without a grammar or prompt logprobs\n"
    "                                are sampled on the device; only tokens and logprobs come back)\n"
    "  --device-sampling-greedy-only --device cuda: sample only greedy requests on the device,\n"
    "                                those with a temperature on the host (default: all on the\n"
    "                                device; --device-sampling-all says so explicitly)\n";

void engine_opts_default(struct hearth_engine_params *p)
{
    hearth_engine_params_default(p);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    p->n_threads = n > 0 && n <= 1024 ? (int)n : 1;
}

static int engine_opts_int(const char *flag, const char *v, long lo, long hi, int *out)
{
    long x;
    if (!v || !args_int(flag, v, lo, hi, &x))
        return -1;
    *out = (int)x;
    return 1;
}

int engine_opts_parse(struct hearth_engine_params *p, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    static const char *ints[] = {"--threads", "--block-size", "--max-num-seqs", "--max-batched-tokens",
                                 "--max-waiting", "--max-wait-steps"};
    int *dst[] = {&p->n_threads, &p->block_size, &p->max_num_seqs, &p->max_batched_tokens, &p->max_waiting,
                  &p->max_wait_steps};
    long lo[] = {1, KV_BLOCK_SIZE_MIN, 1, 1, 0, 1}, hi[] = {1024, KV_BLOCK_SIZE_MAX, 65536, 1 << 20, 1 << 30, 1 << 30};
    for (int k = 0; k < 6; k++)
        if (args_is(a, ints[k]))
            return engine_opts_int(ints[k], args_value(argc, argv, i), lo[k], hi[k], dst[k]);
    if (!strcmp(a, "--no-mmap")) {
        p->no_mmap = true;
        return 1;
    }
    if (!strcmp(a, "--enforce-eager")) {
        p->enforce_eager = true;
        return 1;
    }
    if (!strcmp(a, "--no-device-sampling")) {
        p->no_device_sampling = true;
        return 1;
    }
    if (!strcmp(a, "--device-sampling-all")) {
        p->device_sampling_greedy_only = false;
        return 1;
    }
    if (!strcmp(a, "--device-sampling-greedy-only")) {
        p->device_sampling_greedy_only = true;
        return 1;
    }
    if (args_is(a, "--model")) {
        return (p->model_dir = args_value(argc, argv, i)) ? 1 : -1;
    } else if (args_is(a, "--device")) {
        return (p->device = args_value(argc, argv, i)) ? 1 : -1;
    } else if (args_is(a, "--kernel")) {
        return (p->kernel = args_value(argc, argv, i)) ? 1 : -1;
    } else if (args_is(a, "--compute")) {
        /* checked with the kernel by the backend */
        return (p->compute = args_value(argc, argv, i)) ? 1 : -1;
    } else if (args_is(a, "--kv-dtype")) {
        const char *v = args_value(argc, argv, i);
        enum kv_dtype dt;
        char err[HR_ERRLEN];
        if (!v)
            return -1;
        if (kv_dtype_parse(v, &dt, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth: --kv-dtype: %s\n", err);
            return -1;
        }
        p->kv_dtype = v;
        return 1;
    } else if (args_is(a, "--kv-cache-mib")) {
        int mib;
        if (engine_opts_int("--kv-cache-mib", args_value(argc, argv, i), 1, 1 << 22, &mib) < 0)
            return -1;
        p->kv_cache_bytes = (size_t)mib << 20;
        return 1;
    } else if (args_is(a, "--kv-cache-memory-fraction")) {
        const char *v = args_value(argc, argv, i);
        return v && args_double("--kv-cache-memory-fraction", v, 0.001, 1.0, &p->kv_cache_fraction) ? 1 : -1;
    } else if (args_is(a, "--gpu-memory-utilization")) {
        const char *v = args_value(argc, argv, i);
        return v && args_double("--gpu-memory-utilization", v, 0.01, 1.0, &p->gpu_memory_utilization) ? 1 : -1;
    } else if (args_is(a, "--load-format")) {
        const char *v = args_value(argc, argv, i);
        enum model_load_format f;
        char err[HR_ERRLEN];
        if (!v)
            return -1;
        if (model_load_format_parse(v, &f, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth: %s\n", err);
            return -1;
        }
        p->load_format = v;
        return 1;
    } else if (args_is(a, "--max-model-len")) {
        return engine_opts_int("--max-model-len", args_value(argc, argv, i), 2, 1 << 30, &p->max_model_len);
    } else if (args_is(a, "--prefix-cache")) {
        const char *v = args_value(argc, argv, i);
        if (!v || (strcmp(v, "on") && strcmp(v, "off"))) {
            fprintf(stderr, "hearth: --prefix-cache must be on or off\n");
            return -1;
        }
        p->prefix_cache = !strcmp(v, "on");
        return 1;
    } else if (args_is(a, "--prefix-cache-max-entries")) {
        return engine_opts_int("--prefix-cache-max-entries", args_value(argc, argv, i), 1, 1 << 30,
                               &p->prefix_cache_max_entries);
    } else if (args_is(a, "--kv-cache-dir")) {
        return (p->kv_cache_dir = args_value(argc, argv, i)) ? 1 : -1;
    } else if (args_is(a, "--kv-cache-disk-mib")) {
        int mib;
        if (engine_opts_int("--kv-cache-disk-mib", args_value(argc, argv, i), 1, 1 << 30, &mib) < 0)
            return -1;
        p->kv_cache_disk_bytes = (size_t)mib << 20;
        return 1;
    } else if (args_is(a, "--kv-cache-host-mib")) {
        int mib;
        if (engine_opts_int("--kv-cache-host-mib", args_value(argc, argv, i), 0, 1 << 26, &mib) < 0)
            return -1;
        p->kv_cache_host_bytes = (size_t)mib << 20;
        return 1;
    } else if (args_is(a, "--schedule")) {
        const char *v = args_value(argc, argv, i);
        if (!v || (strcmp(v, "lpm") && strcmp(v, "fcfs"))) {
            fprintf(stderr, "hearth: --schedule must be lpm or fcfs\n");
            return -1;
        }
        p->schedule = v;
        return 1;
    }
    return 0;
}
