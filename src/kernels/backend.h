/* The backend interface: the seam between the model code and a device.
 *
 * The backend owns memory.  It allocates the forward's activations and scratch
 * (alloc), the KV store's slab (kv_alloc) and its own per-step state (reserve);
 * weights are bound through it (bind_weights: the CPU keeps the mmap, a device
 * uploads).  Pointers it hands out are backend memory: the model code passes them
 * (and offsets into them) to ops, never dereferences them; only to_host makes bytes
 * readable on the host.  A step starts with begin_step, which takes the step's batch
 * once (positions, block tables, slots, logits rows), runs the step's block copies
 * (copy-on-write, before any kernel) and computes the RoPE table from the positions;
 * the ops then read the backend's copy of the batch.  Ops return nothing: the first
 * failure of a step is kept and reported by sync (a device reports its errors late),
 * and a step whose sync fails is a failed step.
 *
 * Determinism contract (DESIGN.md "Determinism"): every output element is computed
 * by one thread with a reduction order that depends only on the reduced length,
 * never on the number of rows, the split over threads, or where KV blocks lie. */
#ifndef HEARTH_KERNELS_BACKEND_H
#define HEARTH_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/dsample.h"
#include "kv/batch.h"
#include "kv/kv_store.h"
#include "model/config.h"
#include "model/weights.h"

struct backend;

struct backend_ops {
    /* ---- start-up (the step path allocates nothing) */

    /* Sizes the backend's own step state for a model of geometry cfg and steps of up to
     * max_tok tokens at contexts up to max_ctx positions (<= 0 or above the model's
     * context: the model's): the batch copy, the RoPE table, matmul scratch (MoE rows count top_k per
     * token), attention's split workspace.  cfg must outlive the backend's use of it. */
    enum hr_status (*reserve)(struct backend *be, const struct model_config *cfg, int max_tok, int max_ctx,
                              char *err, size_t errlen);
    /* bytes of backend memory (64-byte aligned), or NULL with a message. */
    void *(*alloc)(struct backend *be, size_t bytes, char *err, size_t errlen);
    void (*mem_free)(struct backend *be, void *p);
    /* Allocates kv->slab for the geometry kv_store_layout gave kv (zeroed). */
    enum hr_status (*kv_alloc)(struct backend *be, struct kv_store *kv, char *err, size_t errlen);
    void (*kv_free)(struct backend *be, struct kv_store *kv);
    /* The weights as the ops read them: *bound is host itself on the CPU (zero copy),
     * a device's uploaded copy elsewhere.  Binding a new set before unbinding the old
     * one swaps models (reload). */
    enum hr_status (*bind_weights)(struct backend *be, const struct weights *host, const struct weights **bound,
                                   char *err, size_t errlen);
    void (*unbind_weights)(struct backend *be, const struct weights *bound);
    /* Bytes of device memory free now and in all; both 0 for a backend on host memory
     * (the engine sizes its pool from the machine's available memory then). */
    enum hr_status (*mem_info)(struct backend *be, size_t *free_bytes, size_t *total_bytes, char *err,
                               size_t errlen);

    /* ---- cache tiers: one block, every layer, to or from host memory [kv->block_bytes] */

    /* Synchronous: the copy is done when the call returns (any host memory).  Ordered
     * after every copy queued before (kv_export_async / kv_import_async). */
    enum hr_status (*kv_export)(struct backend *be, const struct kv_store *kv, int block, void *dst, char *err,
                                size_t errlen);
    enum hr_status (*kv_import)(struct backend *be, struct kv_store *kv, int block, const void *src, char *err,
                                size_t errlen);
    /* Host memory for the host-RAM tier, allocated at start-up: memory the device copies
     * to and from at full rate (pinned, cudaHostAlloc, on a GPU; a private anonymous
     * mapping on the CPU), readable and writable by the CPU.  NULL with a message. */
    void *(*host_alloc)(struct backend *be, size_t bytes, char *err, size_t errlen);
    /* Waits for queued copies first; p may be NULL. */
    void (*host_free)(struct backend *be, void *p, size_t bytes);
    /* Queued copies between a block of the store and host_alloc memory, on the backend's
     * copy stream (a GPU: a non-blocking stream of its own; the CPU copies at once).
     * Queued copies run in the order they were queued, each after the step work queued
     * before it (an export reads what the steps before it wrote), and the next
     * begin_step's work runs after all of them (a block exported may be handed to a new
     * sequence and written by the next step; a block imported is read by it): the host
     * never waits for a copy, the device orders them.  An export's dst may be read by
     * the CPU only after kv_copies_wait; an import's src must not change until then
     * (a later queued export into it is fine: it runs after the import). */
    enum hr_status (*kv_export_async)(struct backend *be, const struct kv_store *kv, int block, void *dst, char *err,
                                      size_t errlen);
    enum hr_status (*kv_import_async)(struct backend *be, struct kv_store *kv, int block, const void *src,
                                      char *err, size_t errlen);
    /* Waits until every queued copy is done; a failure of one is reported (what the
     * copies since the last wait wrote is then not to be trusted). */
    enum hr_status (*kv_copies_wait)(struct backend *be, char *err, size_t errlen);

    /* ---- the step */

    /* NULL on a backend without graphs.  Asked right before begin_step: the tokens a
     * step of batch b runs as when the backend replays it as one captured graph (a
     * bucket >= b->n_tok), or 0 to run it op by op.  A positive answer arms the next
     * begin_step, which must then get b padded to that many tokens: rows of one token
     * each (token 0 at position 0, slot -1: nothing stored; a one-block table) whose
     * outputs nobody reads.  Every row's bits are its own, so padding changes no bit of
     * the real rows, and a replay computes what the ops would. */
    int (*graph_rows)(struct backend *be, const struct batch *b);

    /* Takes the batch (built and validated) for the ops that follow, runs its block
     * copies in order, computes cos/sin of every token's position (in double, from
     * the position alone).  The batch stays the caller's and must not change until
     * the step ends. */
    enum hr_status (*begin_step)(struct backend *be, const struct batch *b, struct kv_store *kv, char *err,
                                 size_t errlen);
    /* Waits for the step's ops; the first failure since the last sync (then cleared). */
    enum hr_status (*sync)(struct backend *be, char *err, size_t errlen);
    /* NULL where sync is all there is.  Starts the ops queued so far (a device: the
     * step's graph) without waiting for them, so that the ops that follow (the logits,
     * the sampling) queue behind them on the device instead of after a round trip to
     * the host.  A failure known on the host (an op's arguments, a launch) is reported
     * here, as sync would; one the device raises later (a fault: sticky, every later
     * call fails too) by the next sync, sample, to_host, to_host_rows or begin_step,
     * each of which waits for the submitted ops first. */
    enum hr_status (*submit)(struct backend *be, char *err, size_t errlen);
    /* Makes bytes of backend memory at src readable on the host: *host = src on the
     * CPU; a device copies into its staging area.  The caller may read and write *host
     * (a sampler masks logits in place) until the next call. */
    enum hr_status (*to_host)(struct backend *be, const void *src, size_t bytes, void **host, char *err,
                              size_t errlen);

    /* out[n_tok, hidden] = the embedding rows of the batch's tokens, widened to f32. */
    void (*embed)(struct backend *be, float *out, const struct weights_mat *emb);
    /* y[m, n] = x[m, k] · w[n, k]^T; w in its stored dtype. */
    void (*matmul)(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w);
    /* y[m, n] += x[m, k] · w[n, k]^T (the residual add: each element is the plain
     * matmul's value added to y). */
    void (*matmul_add)(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w);
    /* ys[i][m, n_i] = x[m, k] · ws[i]^T for i < n_mats: several matrices that read the
     * same x (q/k/v) in one launch. */
    void (*matmul_multi)(struct backend *be, int n_mats, float *const *ys, const float *x, int m,
                         const struct weights_mat *const *ws);
    /* out[m, n] = silu(x · gate^T) * (x · up^T): the SwiGLU MLP's first half. */
    void (*matmul_swiglu)(struct backend *be, float *out, const float *x, int m, const struct weights_mat *gate,
                          const struct weights_mat *up);
    /* y[r] = x[r] / rms(x[r]) * w, for rows r < rows of length dim (y may be x). */
    void (*rmsnorm)(struct backend *be, float *y, const float *x, const float *w, int rows, int dim, float eps);
    /* The attention inputs of one layer, fused (one pass per token): every head row of
     * q[n_tok, n_heads, head_dim] and k[n_tok, n_kv_heads, head_dim] becomes
     * rope(rmsnorm(row) * norm) (q_norm / k_norm) with the step's RoPE table, then k
     * and v[n_tok, n_kv_heads, head_dim] are stored at the batch's slots. */
    void (*attn_prep)(struct backend *be, float *q, float *k, const float *v, const float *q_norm,
                      const float *k_norm, float eps, int n_heads, struct kv_store *kv, int layer);
    /* out[n_tok, n_heads, head_dim]: causal attention of q[n_tok, n_heads, head_dim]
     * over each row's KV in the store (positions 0..pos of the token's own row). */
    void (*attention)(struct backend *be, float *out, const float *q, const struct kv_store *kv, int layer,
                      int n_heads, float scale);
    /* Bytes of work memory the MoE block needs for n_tok tokens (the caller lends it,
     * so that it can share one region with the other phases of the forward). */
    size_t (*moe_work_bytes)(struct backend *be, int n_tok);
    /* The MoE block of layer L, residual included: h[n_tok, hidden] += the rank-order
     * weighted sum of the top-k experts' SwiGLU MLPs of xn[n_tok, hidden].  The router
     * computes in f32 whatever the compute mode (top-k is a discrete choice); softmax,
     * top-k (ties to the lower expert), optional renormalisation, grouping of rows per
     * expert and the grouped matmuls all run in the backend.  work: moe_work_bytes of
     * backend memory.  trace: NULL, or host int32 [n_tok, top_k] that receives the
     * experts chosen (an evaluation hook; a device may copy synchronously). */
    void (*moe)(struct backend *be, float *h, const float *xn, int n_tok, const struct weights_layer *L,
                void *work, int32_t *trace);
    /* dst[i] = src[logit_tok[first + i]] for i < n: rows [dim] of the tokens whose
     * logits the batch asks for. */
    void (*gather_logit_rows)(struct backend *be, float *dst, const float *src, int first, int n, int dim);

    /* ---- sampling on the device: both NULL where the host samples (the CPU) */

    /* Samples n rows whose logits lie in backend memory (logits [*, vocab], after the
     * step's logits were computed; row rows[i].logit_row) as kernels/dsample.h defines;
     * mods [n_mods] and biases [n_biases] (host memory) are indexed by the rows and
     * mods.  out[n] (host) gets each row's token and the logprobs it asked for: nothing
     * else comes back.  Synchronous: it waits for every op before it (submit), and
     * reports their failure as its own.  Each row's result is a function of its logits row,
     * parameters and mods alone: never of the other rows, n, or the launch. */
    enum hr_status (*sample)(struct backend *be, const float *logits, int vocab, const struct dsample_row *rows,
                             int n, const struct dsample_mod *mods, int n_mods, const float *biases, int n_biases,
                             struct dsample_out *out, char *err, size_t errlen);
    /* Brings rows rows[0..n) of src [*, dim] (backend memory) to the host: *host [n, dim],
     * the caller's to read and write until the next call (as to_host's). */
    enum hr_status (*to_host_rows)(struct backend *be, const float *src, int dim, const int32_t *rows, int n,
                                   void **host, char *err, size_t errlen);

    void (*free)(struct backend *be);
};

/* What a caller asks of a backend; the backend checks every combination itself. */
struct backend_opts {
    int n_threads;             /* CPU threads (a device backend's host threads) */
    const char *kernel;        /* NULL, "" or "auto": the best this machine runs; else a variant name */
    const char *compute;       /* NULL or "f32"; "bf16": activations rounded to bf16 for matmuls */
    bool enforce_eager;        /* a device backend runs every step op by op (no graphs) */
};

struct backend {
    const struct backend_ops *ops;
    /* The backend's identity, part of the prefix-cache namespace: device, kernel
     * variant, compute dtype, library versions where they change bits. */
    char name[64];
    char device[16];           /* "cpu", "cuda", ... */
    char variant[32];          /* the kernel variant, e.g. "avx512" ("avx512bf16": bf16 compute) */
    char isa[16];              /* the variant's instruction set: its f32-compute twin's kernel name */
    bool bf16_compute;         /* activations are rounded to bf16 before matmuls */
    int n_threads;
    void *impl;
};

/* The registry: device is "cpu", "cuda" or "auto" (NULL or "" mean auto: CUDA when this
 * build has it and a GPU is present, else the CPU).  An unknown name, or a device this
 * build or machine lacks, is an error that says so. */
enum hr_status backend_create(struct backend *be, const char *device, const struct backend_opts *o, char *err,
                              size_t errlen);
/* Names of the devices the registry knows, for help texts: "cpu|cuda|auto". */
const char *backend_device_names(void);

/* The CPU backend.  o->kernel: NULL or "" picks the best the CPU supports (cpuid;
 * the environment variable HEARTH_KERNEL overrides); "avx512", "avx2" or "scalar"
 * forces one (an error if unsupported); "avx512bf16" is AVX-512 with bf16 compute,
 * which o->compute = "bf16" also selects. */
enum hr_status backend_cpu_init(struct backend *be, const struct backend_opts *o, char *err, size_t errlen);
/* Names of the variants this CPU supports, best first; returns how many. */
int backend_cpu_variants(const char **names, int cap);

/* The CUDA backend (built when nvcc is found): device 0; o->kernel "sm90a" or "sm80"
 * (NULL, "" or "auto": sm90a on Hopper, else sm80); bf16 compute. HR_ERR_UNSUPPORTED
 * with the reason when there is no driver or GPU. */
enum hr_status backend_cuda_init(struct backend *be, const struct backend_opts *o, char *err, size_t errlen);

/* A test backend that fails on command.  backend_fault_wrap wraps *be in place (the
 * wrapper has the same identity; freeing it frees the wrapped backend); every call goes
 * to the wrapped backend until backend_fault_arm(be, step, op): then op number op (0
 * for the first op after begin_step, counting every op the model code calls, to_host
 * included, begin_step and sync excluded) of step number step (0 for the next
 * begin_step) does not run and fails the step as a device error would: the rest of
 * that step's ops do not run either, and sync reports the error.  op = -1 fails
 * begin_step itself. */
enum hr_status backend_fault_wrap(struct backend *be, char *err, size_t errlen);
bool backend_is_fault(const struct backend *be);
void backend_fault_arm(struct backend *be, int64_t step, int op);
/* Ops the armed step has called so far (arm with an op past the end to count them). */
int backend_fault_ops_seen(const struct backend *be);

void backend_free(struct backend *be);

#endif
