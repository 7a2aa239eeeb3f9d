/* hearth — the public C API: an engine that serves one Qwen3-family model with
 * continuous batching over a paged, refcounted KV pool, and exact prefix reuse.
 *
 * Threads.  hearth_engine_init starts one engine thread that runs every step.  Any
 * thread may call hearth_submit, hearth_request_cancel, hearth_request_next_event,
 * hearth_engine_stats; one request handle may be used by one consumer thread at a
 * time.  Nothing here blocks the engine thread on a slow consumer: events queue up in
 * the request until the consumer takes them.
 *
 * Ownership.  Every pointer in a params struct is borrowed for the duration of the
 * call only: the engine copies what it keeps.  A struct hearth_request is owned by
 * the caller from hearth_submit until hearth_request_free; pointers inside an event
 * (its text) stay valid until that hearth_request_free.
 *
 * Errors.  Fallible functions return an enum hr_status (HR_OK on success) and write
 * a message naming the bad field into the caller's buffer err[errlen]. */
#ifndef HEARTH_H
#define HEARTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HEARTH_VERSION "0.1.0"

/* Status codes: the single definition site (src/base/status.h re-exports them). */
enum hr_status {
    HR_OK = 0,
    HR_ERR_IO,          /* a file could not be opened, read or mapped */
    HR_ERR_FORMAT,      /* a file or message is malformed */
    HR_ERR_INVALID,     /* a parameter or request is invalid */
    HR_ERR_UNSUPPORTED, /* valid but not supported by hearth */
    HR_ERR_NOMEM,       /* out of memory (start-up or admission only) */
    HR_ERR_FULL,        /* a pool or queue is full; retry later */
    HR_ERR_NOT_FOUND,   /* a named thing does not exist */
    HR_ERR_CANCELLED,   /* the work was cancelled */
    HR_ERR_INTERNAL,    /* a failure injected by a test hook or an unexpected condition */
};

const char *hr_status_str(enum hr_status st);

/* ------------------------------------------------------------------ engine */

/* The longest namespace string (cache_salt) a request may carry, in bytes: a client's
 * salt under a server-side prefix (--salt-per-key) fits (the one definition). */
#define HEARTH_CACHE_SALT_MAX 512

struct hearth_engine_params {
    const char *model_dir;      /* Hugging Face directory: config.json, *.safetensors, tokenizer.json */
    int n_threads;              /* kernel threads (>= 1) */
    const char *device;         /* NULL/"auto" (CUDA when built in and a GPU is present, else the CPU),
                                   "cpu" or "cuda" */
    const char *kernel;         /* NULL/"auto", "avx512", "avx512bf16", "avx2", "scalar" */
    const char *compute;        /* NULL/"f32", or "bf16": activations rounded to bf16 for the bf16
                                   dot-product instructions (the avx512bf16 kernel); exact either way */
    const char *kv_dtype;       /* "bf16" (default) or "f32" */
    size_t kv_cache_bytes;      /* KV pool budget; the pool is allocated whole at init (0, the
                                   default: kv_cache_fraction of the memory available, see below) */
    double kv_cache_fraction;   /* with kv_cache_bytes 0: this fraction of MemAvailable less the
                                   weights, at most what max_num_seqs sequences of max_model_len
                                   tokens use (0: 0.5) */
    int max_model_len;          /* prompt + generated tokens of one sequence at most (0, the default:
                                   the config's context, lowered to what the pool holds) */
    int block_size;             /* tokens per KV block (default 16) */
    int max_num_seqs;           /* running sequences at most (default 64) */
    int max_batched_tokens;     /* tokens per step at most (0, the default: 512 on the CPU, 2048 on a GPU) */
    int max_waiting;            /* queued requests at most before submit says HR_ERR_FULL (0: no limit) */
    bool prefix_cache;          /* exact prefix KV reuse (default on) */
    int prefix_cache_max_entries; /* cached blocks at most (0: bounded by the pool only) */
    const char *schedule;       /* "lpm" (default: longest cached prefix first) or "fcfs" */
    int max_wait_steps;         /* lpm: a group waiting longer than this goes first (default 32) */
    bool no_mmap;               /* read the weights into memory instead of mapping the files */
    const char *load_format;    /* NULL/"auto"/"safetensors": the directory's files; "dummy": weights
                                   generated from config.json alone (benchmarks of shapes whose
                                   checkpoints are not at hand; vLLM's name) */
    double gpu_memory_utilization; /* a device backend with kv_cache_bytes 0: the KV pool takes what
                                   is left of this fraction of the card's memory once weights and
                                   scratch are in (vLLM's meaning; 0: 0.9) */
    const char *kv_cache_dir;   /* the prefix cache's disk tier: full blocks evicted from the pool, and
                                   every cached block at a clean shutdown, are kept there and read back
                                   on a later miss, across restarts (NULL: no disk tier) */
    size_t kv_cache_disk_bytes; /* the directory's files at most, least recently used go first
                                   (0: 1 GiB) */
    bool enforce_eager;         /* a device backend runs every step op by op: no CUDA graphs for
                                   decode steps (vLLM's name; graphs change no bit, only the speed) */
    bool no_device_sampling;    /* a device backend brings every logits row to the host and the CPU
                                   samples it (default: rows without a grammar or prompt logprobs
                                   are sampled on the device; their tokens may differ from the
                                   CPU's where a draw falls within rounding of a boundary) */
    bool device_sampling_greedy_only; /* with device sampling, only greedy requests: those with a
                                   temperature are sampled on the host threads (default: every
                                   request on the device) */
    size_t kv_cache_host_bytes; /* the prefix cache's host-RAM tier: blocks evicted from the pool are
                                   kept in this much host memory (pinned on a GPU, allocated at
                                   init), least recently used go on to the disk tier when there is
                                   one; a prompt that misses in the pool continues there (0: none) */
};

void hearth_engine_params_default(struct hearth_engine_params *p);

struct hearth_engine;

/* Loads the model, allocates the KV pool and starts the engine thread. */
enum hr_status hearth_engine_init(struct hearth_engine **out, const struct hearth_engine_params *p, char *err,
                                  size_t errlen);
/* Cancels everything in flight, stops the engine thread, frees everything.  Requests
 * still held by callers receive a final error event and must still be freed. */
void hearth_engine_free(struct hearth_engine *e);

struct hearth_model_info {
    const char *model_dir;
    int vocab_size;
    int max_context;            /* max_position_embeddings */
    int max_model_len;          /* tokens of one sequence at most (<= max_context, <= the pool) */
    int64_t kv_pool_tokens;     /* tokens the KV pool holds (blocks x block size) */
    int block_size;
    int max_num_seqs;
    int n_threads;
    const char *kernel;         /* the kernel variant running, e.g. "cpu-avx512" */
    const char *kv_dtype;       /* "bf16" or "f32" */
    bool has_tokenizer;
    bool has_chat_template;
    int n_eos;
    const int32_t *eos_ids;     /* [n_eos]: stop tokens from generation_config.json / config.json */
};
void hearth_engine_model_info(const struct hearth_engine *e, struct hearth_model_info *out);

/* ------------------------------------------------------------------ requests */

struct hearth_logit_bias {
    int32_t token;
    float bias;
};

#define HEARTH_MAX_TOKENS_AUTO (-1)

/* Structured output: what the text of a request's output must match. */
enum hearth_grammar_kind {
    HEARTH_GRAMMAR_NONE = 0,
    HEARTH_GRAMMAR_GBNF,        /* a GBNF grammar (llama.cpp's format), start rule "root" */
    HEARTH_GRAMMAR_JSON_SCHEMA, /* a JSON Schema (text) */
    HEARTH_GRAMMAR_JSON_OBJECT, /* any JSON object (JSON mode); the text is ignored */
    HEARTH_GRAMMAR_REGEX,       /* a regular expression the whole output matches */
    HEARTH_GRAMMAR_CHOICE,      /* a JSON array of strings: the output is one of them */
};

struct hearth_request_params {
    /* The prompt: text (tokenized with the model's tokenizer), or token ids. */
    const char *prompt;         /* NUL-terminated UTF-8, or NULL */
    const int32_t *prompt_ids;  /* [n_prompt_ids], used when prompt is NULL */
    int n_prompt_ids;

    int n;                      /* samples of this prompt (>= 1) */
    int max_tokens;             /* tokens to generate at most per sample (>= 0; max_model_len caps it);
                                   HEARTH_MAX_TOKENS_AUTO: up to max_model_len, lowered so that the
                                   n samples fit the pool together */

    /* Sampling.  has_* false: the checkpoint's generation_config.json default,
     * else the neutral value (temperature 1, top_p 1, top_k off). */
    bool has_temperature, has_top_p, has_top_k;
    float temperature, top_p;
    int top_k;
    float min_p;                /* 0 = off */
    float repetition_penalty;   /* 1 = off (0 is taken as 1) */
    float presence_penalty, frequency_penalty;
    const struct hearth_logit_bias *logit_bias;
    int n_logit_bias;
    bool has_seed;
    uint64_t seed;              /* without one, the engine draws one and reports it */
    int sample_index_base;      /* sample i draws its randomness as index base + i: lets a client
                                   reproduce one sample of an n > 1 request alone (default 0) */
    bool logprobs;              /* report the sampled token's logprob */
    int top_logprobs;           /* 0..20 alternatives per token */
    bool prompt_logprobs;       /* also score every prompt token after the first (PROMPT_LOGPROB
                                   events, with top_logprobs alternatives); such a request
                                   computes its whole prompt (no prefix-cache hit) */
    bool ignore_eos;

    /* Stopping. */
    const char *const *stop;    /* [n_stop] strings, matched on the detokenized text */
    int n_stop;
    const int32_t *stop_token_ids; /* [n_stop_token_ids], besides the model's eos ids */
    int n_stop_token_ids;
    bool skip_special_tokens;   /* in the text of token events (default false here; servers set it) */

    const char *cache_salt;     /* prefix-cache namespace of this request (tenant isolation), or NULL;
                                   at most HEARTH_CACHE_SALT_MAX bytes */
    size_t max_queued_bytes;    /* events queued and not yet taken by the caller, in bytes, at most:
                                   past it the request is cancelled (a consumer that stopped
                                   reading); 0: no bound */

    /* Constrained decoding: tokens the grammar forbids get probability zero before sampling
     * (so logprobs are those of the masked distribution), and a stop token is allowed only
     * where the output is complete. Compiled (or found in a cache) inside hearth_submit. */
    enum hearth_grammar_kind grammar_kind;
    const char *grammar;        /* the source text for grammar_kind (NUL-terminated) */
    bool grammar_after_think;   /* the constraint starts after the model's </think> token */
};

void hearth_request_params_default(struct hearth_request_params *p);

struct hearth_request;

/* Validates and queues a request.  On success *out is a handle the caller owns. */
enum hr_status hearth_submit(struct hearth_engine *e, const struct hearth_request_params *p,
                             struct hearth_request **out, char *err, size_t errlen);

/* Asks the engine to stop the request; its blocks are freed at the next step
 * boundary and a final HEARTH_EVENT_DONE (finish reason "cancelled") follows. */
void hearth_request_cancel(struct hearth_request *r);

/* Frees the handle.  A request still running is cancelled first. */
void hearth_request_free(struct hearth_request *r);

enum hearth_event_type {
    HEARTH_EVENT_PROMPT_LOGPROB, /* prompt token at position `index` (1..prompt_tokens-1), all before any TOKEN */
    HEARTH_EVENT_TOKEN,         /* one generated token of sample `index` */
    HEARTH_EVENT_FINISH,        /* sample `index` finished (finish_reason) */
    HEARTH_EVENT_DONE,          /* the whole request finished; usage is final; last event */
};

enum hearth_finish_reason {
    HEARTH_FINISH_NONE,
    HEARTH_FINISH_STOP,         /* an eos / stop token id, or a stop string */
    HEARTH_FINISH_LENGTH,       /* max_tokens or the context window */
    HEARTH_FINISH_CANCELLED,
    HEARTH_FINISH_ERROR,        /* message says why */
};

const char *hearth_finish_reason_str(enum hearth_finish_reason r);

#define HEARTH_MAX_TOP_LOGPROBS 20

struct hearth_logprob {
    int32_t token;
    float logprob;
};

struct hearth_event {
    enum hearth_event_type type;
    int index;                  /* sample index 0..n-1 (TOKEN, FINISH) */
    /* TOKEN */
    int32_t token;
    float logprob;              /* when logprobs or top_logprobs was asked */
    int n_top;
    struct hearth_logprob top[HEARTH_MAX_TOP_LOGPROBS]; /* best first */
    const char *text;           /* text this token completes (may be empty: held back for UTF-8
                                   or a possible stop string); NUL-terminated; owned by the request */
    size_t text_len;
    /* FINISH / DONE */
    enum hearth_finish_reason finish_reason;
    int32_t stop_token;         /* FINISH by a stop token: its id, else -1 */
    bool is_stop_token;         /* TOKEN: this token is an eos / stop id, the sample ends with it
                                   (its text is empty; OpenAI's logprobs leave it out) */
    /* DONE */
    int prompt_tokens;
    int cached_tokens;          /* prompt tokens served from the prefix cache */
    int completion_tokens;      /* over all samples */
    uint64_t seed;              /* the seed used (drawn when the request gave none) */
    char message[256];          /* FINISH/DONE with HEARTH_FINISH_ERROR */
};

/* Takes the next event.  timeout_ms < 0 waits without limit, 0 only looks (no wait);
 * returns HR_ERR_FULL when the timeout passes with no event, HR_ERR_NOT_FOUND after the
 * DONE event was taken. */
enum hr_status hearth_request_next_event(struct hearth_request *r, struct hearth_event *ev, int timeout_ms);

/* ------------------------------------------------------------------ text */

/* Encodes text with the model's tokenizer: *ids (malloc'd, the caller frees) gets
 * *n ids.  HR_ERR_INVALID when the model has no tokenizer or the text is not UTF-8. */
enum hr_status hearth_tokenize(struct hearth_engine *e, const char *text, size_t len, int32_t **ids, int *n,
                               char *err, size_t errlen);
/* Same, giving up with HR_ERR_FULL once the text has more than max_ids ids (0: no bound),
 * without tokenizing the rest (a text whose length alone rules it out is not looked at). */
enum hr_status hearth_tokenize_max(struct hearth_engine *e, const char *text, size_t len, int max_ids, int32_t **ids,
                                   int *n, char *err, size_t errlen);
/* Decodes ids: *text (malloc'd, NUL-terminated, the caller frees). */
enum hr_status hearth_detokenize(struct hearth_engine *e, const int32_t *ids, int n, bool skip_special_tokens,
                                 char **text, size_t *len, char *err, size_t errlen);

/* The raw bytes of one token (with a byte-level tokenizer, possibly part of a UTF-8
 * character): *bytes points into the engine's tokenizer, valid until
 * hearth_engine_free.  HR_ERR_INVALID for an id outside the vocabulary or a model
 * without a tokenizer. */
enum hr_status hearth_token_bytes(struct hearth_engine *e, int32_t id, const char **bytes, size_t *len, char *err,
                                  size_t errlen);

/* ------------------------------------------------------------------ control */

/* Re-reads the model directory and bumps the prefix-cache epoch.  Requests in flight
 * finish first; new submissions wait.  On failure the old model keeps serving. */
enum hr_status hearth_engine_reload(struct hearth_engine *e, char *err, size_t errlen);
/* Empties the prefix cache (bumps its epoch): later requests miss. */
void hearth_prefix_cache_reset(struct hearth_engine *e);

/* ------------------------------------------------------------------ stats */

struct hearth_prefix_cache_stats {
    bool enabled;
    int64_t entries;            /* cached blocks (tree nodes) */
    int64_t blocks_held;        /* blocks referenced by the cache */
    int64_t open_leases;
    int64_t lookups_total, hits_total, misses_total;
    int64_t lookup_tokens_total, hit_tokens_total;
    int64_t inserted_blocks_total, evicted_blocks_total;
    int64_t collisions_total, invalidations_total;
};

/* The prefix cache's disk tier (--kv-cache-dir). */
struct hearth_disk_cache_stats {
    bool enabled;
    int64_t files, bytes;       /* block files in the directory, and their bytes */
    int64_t quota_bytes;
    int64_t lookups_total;      /* prompts that missed in memory and were looked up on disk */
    int64_t hits_total, misses_total; /* lookups that found at least one block / none */
    int64_t hit_blocks_total;   /* blocks those lookups found in the directory */
    int64_t blocks_restored_total; /* blocks read, verified and imported into the pool */
    int64_t hit_tokens_total;   /* prompt tokens served from restored blocks (in cached_tokens) */
    int64_t read_bytes_total;
    int64_t written_blocks_total, written_bytes_total;
    int64_t write_errors_total; /* writes that failed (a full disk, a read-only directory) */
    int64_t writes_dropped_total; /* blocks not written: the write queue was full, or over the quota */
    int64_t files_rejected_total; /* truncated, torn, foreign or corrupt files: removed, never loaded */
    int64_t files_evicted_total; /* removed to stay within the quota */
    int64_t pending_reads_total; /* blocks a read took from the write queue (evicted, not yet on disk) */
};

/* The prefix cache's host-RAM tier (--kv-cache-host-mib). */
struct hearth_host_cache_stats {
    bool enabled;
    int64_t blocks, bytes;      /* blocks held, and their bytes */
    int64_t capacity_blocks, capacity_bytes; /* the arena's slots */
    int64_t lookups_total;      /* sequences admitted past a miss in the pool, looked up here */
    int64_t hits_total, misses_total; /* lookups that restored at least one block / none */
    int64_t blocks_restored_total; /* blocks copied back into the pool */
    int64_t hit_tokens_total;   /* prompt tokens served from them (in cached_tokens) */
    int64_t stored_blocks_total; /* blocks evicted from the pool and copied in */
    int64_t bytes_in_total;     /* bytes copied in from the pool */
    int64_t bytes_out_total;    /* bytes copied back into the pool */
    int64_t evicted_blocks_total; /* blocks evicted to make room */
    int64_t evicted_to_disk_total; /* of those, handed to the disk tier (not on disk yet) */
    int64_t copy_errors_total;  /* copies that failed: the block is not kept, or not restored */
    int64_t mismatches_total;   /* keys that named another block (tokens, parent or salt): not used */
};

struct hearth_stats {
    int blocks_total, blocks_free, blocks_used;
    int running, waiting;       /* sequences */
    int64_t steps;
    int64_t preemptions;
    int64_t prompt_tokens_total, generation_tokens_total;
    int64_t requests_total, requests_finished;
    int64_t requests_stalled;   /* cancelled: their consumer let max_queued_bytes pile up */
    struct hearth_prefix_cache_stats prefix_cache;
    struct hearth_disk_cache_stats disk_cache;
    struct hearth_host_cache_stats host_cache;
};

void hearth_engine_stats(struct hearth_engine *e, struct hearth_stats *out);

#ifdef __cplusplus
}
#endif

#endif
