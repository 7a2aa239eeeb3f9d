/* Prometheus metrics of the server (GET /metrics), in the text exposition format.
 * This header is the one definition site of every metric name hearth exports: the
 * server's own counters and histograms below, and the engine's gauges and counters
 * (from struct hearth_stats, prefix cache included) in metrics.c's table, which is
 * built from METRICS_ENGINE_LIST here. */
#ifndef HEARTH_SERVER_METRICS_H
#define HEARTH_SERVER_METRICS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <hearth.h>

#include "server/strbuf.h"

/* ---- the label every sample carries when the server has an --instance-name ---- */
#define METRICS_INSTANCE_LABEL "instance_name"
#define METRICS_INSTANCE_MAX 64 /* bytes of [A-Za-z0-9._:-] */

/* ---- names of the server's own metrics ---- */
#define METRICS_REQUESTS_TOTAL "hearth_http_requests_total"        /* counter {endpoint, code} */
#define METRICS_DISCONNECTS_TOTAL "hearth_client_disconnects_total" /* counter */
#define METRICS_STALLED_TOTAL "hearth_stalled_streams_total"         /* counter */
#define METRICS_TTFT "hearth_time_to_first_token_seconds"            /* histogram */
#define METRICS_ITL "hearth_inter_token_latency_seconds"              /* histogram */
#define METRICS_E2E "hearth_e2e_request_latency_seconds"              /* histogram */
#define METRICS_READY "hearth_model_ready"                            /* gauge 0/1 */

/* ---- the engine's, from struct hearth_stats: X(name, type, help, field) ---- */
#define METRICS_ENGINE_LIST(X) \
    X("hearth_kv_blocks_total", "gauge", "KV cache blocks in the pool", blocks_total) \
    X("hearth_kv_blocks_free", "gauge", "KV cache blocks free", blocks_free) \
    X("hearth_kv_blocks_used", "gauge", "KV cache blocks in use (sequences or the prefix cache)", blocks_used) \
    X("hearth_num_requests_running", "gauge", "sequences running", running) \
    X("hearth_num_requests_waiting", "gauge", "sequences waiting (queue depth)", waiting) \
    X("hearth_engine_steps_total", "counter", "engine steps", steps) \
    X("hearth_preemptions_total", "counter", "sequences preempted", preemptions) \
    X("hearth_prompt_tokens_total", "counter", "prompt tokens processed", prompt_tokens_total) \
    X("hearth_generation_tokens_total", "counter", "tokens generated", generation_tokens_total) \
    X("hearth_requests_total", "counter", "requests submitted to the engine", requests_total) \
    X("hearth_requests_finished_total", "counter", "requests finished", requests_finished) \
    X("hearth_prefix_cache_enabled", "gauge", "1 when exact prefix reuse is on", prefix_cache.enabled) \
    X("hearth_prefix_cache_entries", "gauge", "cached blocks (radix tree nodes)", prefix_cache.entries) \
    X("hearth_prefix_cache_blocks_held", "gauge", "KV blocks referenced by the prefix cache", \
      prefix_cache.blocks_held) \
    X("hearth_prefix_cache_open_leases", "gauge", "prefix leases not yet committed or aborted", \
      prefix_cache.open_leases) \
    X("hearth_prefix_cache_lookups_total", "counter", "prefix cache lookups", prefix_cache.lookups_total) \
    X("hearth_prefix_cache_hits_total", "counter", "lookups that matched at least one block", \
      prefix_cache.hits_total) \
    X("hearth_prefix_cache_misses_total", "counter", "lookups that matched nothing", prefix_cache.misses_total) \
    X("hearth_prefix_cache_lookup_tokens_total", "counter", "prompt tokens looked up", \
      prefix_cache.lookup_tokens_total) \
    X("hearth_prefix_cache_hit_tokens_total", "counter", "prompt tokens served from the cache", \
      prefix_cache.hit_tokens_total) \
    X("hearth_prefix_cache_inserted_blocks_total", "counter", "blocks published to the cache", \
      prefix_cache.inserted_blocks_total) \
    X("hearth_prefix_cache_evicted_blocks_total", "counter", "blocks evicted from the cache", \
      prefix_cache.evicted_blocks_total) \
    X("hearth_prefix_cache_collisions_total", "counter", "hash matches whose tokens differed", \
      prefix_cache.collisions_total) \
    X("hearth_prefix_cache_invalidations_total", "counter", "cache epochs bumped (reset, reload)", \
      prefix_cache.invalidations_total) \
    X("hearth_disk_cache_enabled", "gauge", "1 when the prefix cache has a disk tier (--kv-cache-dir)", \
      disk_cache.enabled) \
    X("hearth_disk_cache_files", "gauge", "block files in the disk tier", disk_cache.files) \
    X("hearth_disk_cache_bytes", "gauge", "bytes of the disk tier's block files", disk_cache.bytes) \
    X("hearth_disk_cache_quota_bytes", "gauge", "the disk tier's quota (--kv-cache-disk-mib)", \
      disk_cache.quota_bytes) \
    X("hearth_disk_cache_lookups_total", "counter", "prompts that missed in memory and were looked up on disk", \
      disk_cache.lookups_total) \
    X("hearth_disk_cache_hits_total", "counter", "disk lookups that found at least one block", \
      disk_cache.hits_total) \
    X("hearth_disk_cache_misses_total", "counter", "disk lookups that found no block", disk_cache.misses_total) \
    X("hearth_disk_cache_hit_blocks_total", "counter", "blocks disk lookups found", disk_cache.hit_blocks_total) \
    X("hearth_disk_cache_blocks_restored_total", "counter", "blocks read, verified and imported into the pool", \
      disk_cache.blocks_restored_total) \
    X("hearth_disk_cache_hit_tokens_total", "counter", "prompt tokens served from blocks restored from disk", \
      disk_cache.hit_tokens_total) \
    X("hearth_disk_cache_read_bytes_total", "counter", "bytes of block files read and verified", \
      disk_cache.read_bytes_total) \
    X("hearth_disk_cache_written_blocks_total", "counter", "block files written", disk_cache.written_blocks_total) \
    X("hearth_disk_cache_written_bytes_total", "counter", "bytes of block files written", \
      disk_cache.written_bytes_total) \
    X("hearth_disk_cache_write_errors_total", "counter", "block writes that failed (full disk, read-only)", \
      disk_cache.write_errors_total) \
    X("hearth_disk_cache_writes_dropped_total", "counter", "blocks not written (write queue full, over quota)", \
      disk_cache.writes_dropped_total) \
    X("hearth_disk_cache_files_rejected_total", "counter", \
      "truncated, torn, foreign or corrupt block files: removed, never loaded", disk_cache.files_rejected_total) \
    X("hearth_disk_cache_files_evicted_total", "counter", "block files removed to stay within the quota", \
      disk_cache.files_evicted_total) \
    X("hearth_disk_cache_pending_reads_total", "counter", \
      "blocks read from the write queue before their file was written", disk_cache.pending_reads_total) \
    X("hearth_host_cache_enabled", "gauge", "1 when the prefix cache has a host-RAM tier (--kv-cache-host-mib)", \
      host_cache.enabled) \
    X("hearth_host_cache_blocks", "gauge", "blocks held in the host tier", host_cache.blocks) \
    X("hearth_host_cache_bytes", "gauge", "bytes of the blocks held in the host tier", host_cache.bytes) \
    X("hearth_host_cache_capacity_blocks", "gauge", "blocks the host tier holds at most", \
      host_cache.capacity_blocks) \
    X("hearth_host_cache_capacity_bytes", "gauge", "bytes of the host tier's arena", host_cache.capacity_bytes) \
    X("hearth_host_cache_lookups_total", "counter", "sequences admitted past a miss in the pool, looked up in host RAM", \
      host_cache.lookups_total) \
    X("hearth_host_cache_hits_total", "counter", "host lookups that restored at least one block", \
      host_cache.hits_total) \
    X("hearth_host_cache_misses_total", "counter", "host lookups that restored no block", host_cache.misses_total) \
    X("hearth_host_cache_blocks_restored_total", "counter", "blocks copied from host RAM back into the pool", \
      host_cache.blocks_restored_total) \
    X("hearth_host_cache_hit_tokens_total", "counter", "prompt tokens served from blocks restored from host RAM", \
      host_cache.hit_tokens_total) \
    X("hearth_host_cache_stored_blocks_total", "counter", "blocks evicted from the pool and copied into host RAM", \
      host_cache.stored_blocks_total) \
    X("hearth_host_cache_bytes_in_total", "counter", "bytes copied from the pool into host RAM", \
      host_cache.bytes_in_total) \
    X("hearth_host_cache_bytes_out_total", "counter", "bytes copied from host RAM back into the pool", \
      host_cache.bytes_out_total) \
    X("hearth_host_cache_evicted_blocks_total", "counter", "blocks evicted from host RAM to make room", \
      host_cache.evicted_blocks_total) \
    X("hearth_host_cache_evicted_to_disk_total", "counter", "blocks evicted from host RAM and handed to the disk tier", \
      host_cache.evicted_to_disk_total) \
    X("hearth_host_cache_copy_errors_total", "counter", "copies to or from host RAM that failed", \
      host_cache.copy_errors_total) \
    X("hearth_host_cache_mismatches_total", "counter", "host keys that named another block (never used)", \
      host_cache.mismatches_total)

enum metrics_endpoint {
    METRICS_ENDPOINT_COMPLETIONS,
    METRICS_ENDPOINT_CHAT,
    METRICS_ENDPOINT_OTHER,
    METRICS_ENDPOINT_COUNT,
};

#define METRICS_MAX_BUCKETS 24

struct metrics_histogram {
    const char *name;
    const char *help;
    int n_bounds;
    const double *bounds;                    /* [n_bounds] upper bounds, increasing */
    int64_t counts[METRICS_MAX_BUCKETS + 1]; /* [n_bounds + 1]: per bucket, the last is +Inf */
    double sum;
    int64_t count;
};

struct metrics {
    pthread_mutex_t lock;
    int64_t requests[METRICS_ENDPOINT_COUNT][600]; /* [endpoint][http status] */
    int64_t disconnects;
    struct metrics_histogram ttft, itl, e2e;
    char label[METRICS_INSTANCE_MAX + 24];   /* {instance_name="NAME"}, or "" */
    char label_pre[METRICS_INSTANCE_MAX + 24]; /* instance_name="NAME", (before other labels), or "" */
};

enum hr_status metrics_init(struct metrics *m, char *err, size_t errlen);
void metrics_free(struct metrics *m);
/* Whether name is a valid --instance-name (1..METRICS_INSTANCE_MAX bytes of [A-Za-z0-9._:-]). */
bool metrics_instance_valid(const char *name);
/* Labels every sample with instance_name="name" (a valid name; NULL: none). */
void metrics_set_instance(struct metrics *m, const char *name);

void metrics_count_request(struct metrics *m, enum metrics_endpoint ep, int http_status);
void metrics_count_disconnect(struct metrics *m);
void metrics_observe_ttft(struct metrics *m, double seconds);
void metrics_observe_itl(struct metrics *m, double seconds);
void metrics_observe_e2e(struct metrics *m, double seconds);

/* Appends the exposition text: the server's metrics, then the engine's when stats is
 * non-NULL (NULL while the model loads). */
enum hr_status metrics_render(struct metrics *m, const struct hearth_stats *stats, bool ready, struct strbuf *out);

#endif
