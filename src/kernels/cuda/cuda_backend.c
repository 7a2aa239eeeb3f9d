/* The CUDA backend: the ops of backend.h over the kernels of cuda_kernels.h, for
 * dense Qwen3 with bf16 weights and a bf16 KV store, on the default stream (the copies
 * of the cache tiers on a stream of their own, cuda_copy.h).
 *
 * Memory: every buffer the model code names is device memory (cudaMalloc); the
 * weights are uploaded once (bind_weights); the step's batch goes over in one copy
 * at begin_step, laid out as the attention kernels read it.  Activations stay f32 in
 * the model's buffers; a matmul rounds its input to bf16 in the backend's own buffer
 * (the GEMM is bf16 x bf16 with f32 accumulation), so every op keeps the meaning the
 * CPU gives it.  Kernel launches report their errors at once; errors a kernel raises
 * while it runs come back at the next synchronising copy or sync.  The first error of
 * a step is kept and reported by sync, and the rest of the step's ops do not run.
 *
 * Built only when nvcc is found (HEARTH_CUDA); the registry says so otherwise. */
#ifdef HEARTH_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_copy.h"
#include "kernels/cuda/cuda_dev.h"
#include "kernels/cuda/cuda_kernels.h"
#include "model/dummy_fill.h"

/* The step's batch as one block of device memory (and its host staging copy). */
struct cuda_step_area {
    size_t bytes;
    void *dev, *host;
    /* capacities */
    int max_tok, max_tables, max_qblocks, max_copies;
};

/* Decode steps replay captured graphs: one per bucket of rows (1, 2, 4, .. 32, then
 * every multiple of 32 to 256: cb_bucket_rows) and KV cap (the attention grid covers
 * the cap's positions; splits past a row's own position exit at once, so the cap
 * changes no bit). */
#define CB_GRAPH_BUCKETS 13
#define CB_GRAPH_MAX_ROWS 256
_Static_assert(4 + CB_GRAPH_MAX_ROWS / 32 < CB_GRAPH_BUCKETS, "cb_bucket's indices fit graphs[]");
#define CB_GRAPH_CAPS 3
static const int cb_graph_caps[CB_GRAPH_CAPS - 1] = {4096, 16384}; /* then max_ctx (none above it) */

enum cb_mode {
    CB_EAGER,   /* ops launch kernels */
    CB_CAPTURE, /* ops launch into the stream's capture; sync instantiates and replays it */
    CB_REPLAY,  /* the graph captured for them runs from begin_step; ops only note their arguments */
};

/* The ops as cb_op numbers them (the profile's rows). */
#define CB_OPS 12
static const char *const cb_op_names[CB_OPS] = {"between ops", "embed", "matmul", "matmul_add", "matmul qkv",
                                                 "matmul swiglu", "rmsnorm", "attn_prep", "attention", "moe",
                                                 "gather", "to_host"};

struct cb_graph {
    void *exec;     /* instantiated graph, or NULL */
    uint64_t hash;  /* the ops and arguments it was captured from */
};

struct cuda_backend {
    const struct cuda_kernels *K;
    struct cuda_dev_info info;
    const struct model_config *cfg;
    int max_tok;
    int max_ctx; /* positions a step's row may reach: the model's context or the user's --max-model-len */
    /* GEMM: the bf16 input of a matmul, and the K split's workspace and tickets */
    uint16_t *xb;              /* [cb_x_rows, max_k] bf16 */
    size_t xb_elems;
    uint16_t *sw;              /* [cb_x_rows, intermediate] bf16 SwiGLU outputs */
    void *gemm_work;
    size_t gemm_work_bytes;
    int *tickets;              /* zeroed once; every launch leaves them zero */
    size_t n_tickets;
    /* attention */
    void *attn_work;
    size_t attn_work_bytes;
    int *attn_tickets; /* [max_tok, n_kv_heads]: attention's split tickets, zero between launches */
    size_t attn_n_tickets;
    int kv_blocks, kv_block_size; /* of the store kv_alloc made (sizes the step area) */
    struct cuda_step_area area;
    /* the step: device views into the area */
    const struct batch *b;
    struct cuda_attn_batch ab;
    const int32_t *d_tokens;   /* [n_tok] */
    const int32_t *d_logit_tok; /* [n_logits] */
    const int32_t *d_pairs;    /* [n_copies, 2] */
    /* to_host's staging, page-locked */
    void *host;
    size_t host_bytes;
    /* sampling: up to CB_SAMPLE_QUEUE rows a wait, CB_SAMPLE_ROWS a launch; rows | mods |
     * biases | results, on the device and page-locked on the host, laid out alike */
    int s_vocab, s_mods_cap, s_bias_cap;
    float *s_work;             /* [CB_SAMPLE_ROWS, cuda_sample_stride(vocab)]: the rows' logits after bias
                                * and penalties, and their slices' words */
    void *s_dev, *s_host;
    size_t s_bytes;
    /* the step's first error */
    enum hr_status st;
    char msg[HR_ERRLEN];
    bool pending;              /* submitted and not yet waited for (cb_submit) */
    bool wait_always;          /* HEARTH_CUDA_SUBMIT=0: submit waits as sync does (comparisons) */
    bool replay_late;          /* HEARTH_CUDA_REPLAY_EARLY=0: a replay launches at the step's end */
    bool graph_pow2;           /* HEARTH_CUDA_GRAPH_POW2=1: buckets of powers of two only (comparisons) */
    /* every kernel runs on this stream (it orders with cudaMemcpy's default stream) */
    void *stream;
    /* CUDA graphs of decode steps, per (rows bucket, KV cap) */
    bool graphs_on;            /* !enforce_eager, and no graph went wrong */
    int graph_next;            /* rows graph_rows armed for the next begin_step (0: op by op) */
    enum cb_mode mode;
    struct cb_graph *cur;      /* the step's graph (capture or replay) */
    uint64_t hash;             /* the step's ops and their arguments so far */
    struct cb_graph graphs[CB_GRAPH_BUCKETS][CB_GRAPH_CAPS];
    uint64_t n_captured, n_replayed, n_eager; /* decode steps by how they ran (logged at free) */
    /* The bf16 copy of an f32 buffer that a matmul may take instead of converting it:
     * written by the op that wrote the buffer (RMSNorm and attention into xb, SwiGLU in
     * sw) or by the last conversion; every op but the matmuls forgets it first. */
    const float *b16_of;
    const uint16_t *b16_at;
    size_t b16_n;
    /* HEARTH_CUDA_PROFILE=1: every op waited for and timed (no graphs), logged at free */
    bool profile;
    int prof_op;               /* the op being timed, or -1 */
    int64_t prof_t;
    int64_t prof_ns[CB_OPS];
    int64_t prof_n[CB_OPS];
    /* the cache tiers' block copies: their own stream, ordered with the kernels by events */
    struct cuda_copier *copier;
};

static struct cuda_backend *cb_of(struct backend *be) { return be->impl; }

/* Keeps the first failure of the step; true when the op may run. */
static bool cb_ok(struct cuda_backend *c) { return c->st == HR_OK; }

static void cb_fail(struct cuda_backend *c, enum hr_status st, const char *msg)
{
    if (c->st == HR_OK && st != HR_OK) {
        c->st = st;
        snprintf(c->msg, sizeof c->msg, "%s", msg);
    }
}

/* ------------------------------------------------------------------ graphs */

static void cb_graphs_drop(struct cuda_backend *c)
{
    for (int i = 0; i < CB_GRAPH_BUCKETS; i++)
        for (int j = 0; j < CB_GRAPH_CAPS; j++) {
            cuda_dev_graph_free(c->graphs[i][j].exec);
            c->graphs[i][j] = (struct cb_graph){0};
        }
}

static uint64_t cb_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static int64_t cb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The profile: waits for the device and charges the time since the last mark to the
 * op that was running (the host's time between ops to row 0), then starts op. */
static void cb_prof_mark(struct cuda_backend *c, int op)
{
    if (!c->profile)
        return;
    char err[HR_ERRLEN];
    cuda_dev_sync(err, sizeof err);
    int64_t now = cb_now_ns();
    int was = c->prof_op < 0 ? 0 : c->prof_op;
    if (c->prof_t) {
        c->prof_ns[was] += now - c->prof_t;
        c->prof_n[was] += c->prof_op >= 0;
    }
    c->prof_op = op;
    c->prof_t = now;
}

/* Notes an op and its arguments (under a graph); true when the op is to launch its
 * kernels (not when its graph replays, nor after the step's first failure). */
static bool cb_op(struct cuda_backend *c, int op, uint64_t a, uint64_t b, uint64_t d, uint64_t e)
{
    if (c->st != HR_OK)
        return false;
    cb_prof_mark(c, op);
    if (op < 2 || op > 5) /* not a matmul: it may write any buffer */
        c->b16_of = NULL;
    if (c->mode != CB_EAGER)
        c->hash = cb_mix(cb_mix(cb_mix(cb_mix(cb_mix(c->hash, (uint64_t)op), a), b), d), e);
    return c->mode != CB_REPLAY;
}
#define CB_P(p) ((uint64_t)(uintptr_t)(p))

/* The rows a decode step of n tokens runs as under a graph: the next power of two up to
 * 32, then the next multiple of 32 (pow2: powers of two throughout, as before the
 * thirtieth session).  A padding row costs every matmul its share of the product (the
 * 8B's 129-192-row steps ran at 256), attention and the lm_head next to nothing. */
static int cb_bucket_rows(int n, bool pow2)
{
    int r = 1;
    while (r < n && (r < 32 || pow2))
        r *= 2;
    return r >= n ? r : (n + 31) / 32 * 32;
}

/* A bucket's index in graphs[]: 0..5 for 1..32 rows, then 4 + rows / 32 (6..12 for
 * 64..256). */
static int cb_bucket(int rows)
{
    if (rows > 32)
        return 4 + rows / 32;
    int i = 0;
    while ((1 << i) < rows)
        i++;
    return i;
}

static int cb_graph_rows(struct backend *be, const struct batch *b)
{
    struct cuda_backend *c = be->impl;
    c->graph_next = 0;
    if (!c->graphs_on || !c->cfg || b->n_tok < 1 || b->n_tok != b->n_rows || b->n_copies > c->area.max_copies)
        return 0; /* not every row a single token: a prefill or a mixed step */
    const int rows = cb_bucket_rows(b->n_tok, c->graph_pow2);
    if (rows > CB_GRAPH_MAX_ROWS || rows > c->max_tok)
        return 0;
    c->graph_next = rows;
    return c->graph_next;
}

/* Begins the step's graph (capture, or replay of one captured before) when
 * graph_rows armed it and the batch is the padded decode batch it asked for. */
static void cb_graph_start(struct cuda_backend *c, const struct batch *b, int armed)
{
    c->mode = CB_EAGER;
    c->cur = NULL;
    if (b->n_rows == b->n_tok)
        c->n_eager++; /* a decode step: back out below if it becomes a graph's */
    if (!armed || b->n_tok != armed || b->n_rows != b->n_tok)
        return;
    int cap = 0;
    while (cap < CB_GRAPH_CAPS - 1 && c->ab.max_kv > cb_graph_caps[cap])
        cap++;
    int cap_kv = cap < CB_GRAPH_CAPS - 1 && cb_graph_caps[cap] < c->max_ctx ? cb_graph_caps[cap] : c->max_ctx;
    if (c->ab.max_kv > cap_kv ||
        c->K->attn_workspace(b->n_tok, c->cfg->n_heads, c->cfg->head_dim, cap_kv) > c->attn_work_bytes)
        return;
    c->ab.max_kv = cap_kv; /* the kernels' arguments are the same at every step of the bucket */
    c->cur = &c->graphs[cb_bucket(armed)][cap];
    c->hash = 0x243f6a8885a308d3ull;
    c->n_eager--;
    if (c->cur->exec) {
        /* Launched now, behind the step's upload (unless replay_late): the device runs
         * the step while the host notes its ops, which the step's end then checks
         * against the capture's.  A bucket's steps have the same ops and arguments
         * (buffers fixed since the capture, the batch at the same offsets of the area),
         * so a difference is a bug of ours: that step fails, and graphs go off. */
        char err[HR_ERRLEN];
        enum hr_status st = c->replay_late ? HR_OK : cuda_dev_graph_launch(c->cur->exec, c->stream, err, sizeof err);
        if (st != HR_OK) {
            cb_fail(c, st, err); /* the step fails: its ops see the failure and skip */
            c->cur = NULL;
            c->n_eager++;
            return;
        }
        c->mode = CB_REPLAY;
        return;
    }
    char err[HR_ERRLEN];
    if (cuda_dev_capture_begin(c->stream, err, sizeof err) == HR_OK) {
        c->mode = CB_CAPTURE;
    } else {
        c->cur = NULL; /* op by op this time */
        c->n_eager++;
    }
}

/* At the step's sync or submit: a capture is instantiated and launched, a replay
 * (launched at begin_step) checked against its capture. */
static void cb_graph_finish(struct cuda_backend *c)
{
    enum cb_mode mode = c->mode;
    struct cb_graph *g = c->cur;
    c->mode = CB_EAGER;
    c->cur = NULL;
    char err[HR_ERRLEN];
    if (mode == CB_CAPTURE) {
        void *exec = NULL;
        enum hr_status st = cuda_dev_capture_end(c->stream, &exec, err, sizeof err);
        if (c->st != HR_OK) {
            cuda_dev_graph_free(exec); /* a failed step's ops are not a graph */
            return;
        }
        if (st != HR_OK) {
            cb_fail(c, st, err);
            return;
        }
        g->exec = exec;
        g->hash = c->hash;
        c->n_captured++;
    } else if (mode == CB_REPLAY) {
        if (c->st == HR_OK && c->hash != g->hash) {
            cb_fail(c, HR_ERR_INTERNAL,
                    "cuda graph: this step's ops differ from those its graph was captured from; graphs are off "
                    "from now on");
            cuda_dev_sync(err, sizeof err); /* the graph ran: done before it is destroyed */
            cb_graphs_drop(c);
            c->graphs_on = false;
            return;
        }
        c->n_replayed += c->st == HR_OK;
        if (!c->replay_late || c->st != HR_OK)
            return;
    } else {
        return;
    }
    cb_fail(c, cuda_dev_graph_launch(g->exec, c->stream, err, sizeof err), err);
}

/* ------------------------------------------------------------------ memory */

static void *cb_alloc(struct backend *be, size_t bytes, char *err, size_t errlen)
{
    cb_graphs_drop(cb_of(be)); /* graphs name buffers: any change of memory retires them */
    void *p = NULL;
    if (cuda_dev_alloc(&p, bytes, err, errlen) != HR_OK)
        return NULL;
    return p;
}

static void cb_mem_free(struct backend *be, void *p)
{
    cb_graphs_drop(cb_of(be));
    cuda_dev_free(p);
}

/* The step area for max_tok tokens once both the model (reserve) and the store
 * (kv_alloc) are known: block tables of every row (rows <= tokens) up to the store's
 * blocks, query blocks, copies. */
static enum hr_status cb_size_step(struct cuda_backend *c, char *err, size_t errlen)
{
    if (!c->cfg || !c->kv_blocks)
        return HR_OK;
    struct cuda_step_area *a = &c->area;
    int max_tok = c->max_tok;
    int64_t per_row = (int64_t)c->max_ctx / c->kv_block_size + 2;
    if (per_row > c->kv_blocks)
        per_row = c->kv_blocks;
    int64_t tables = (int64_t)max_tok * per_row;
    if (tables > (int64_t)1 << 28)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda backend: block tables of %lld entries", (long long)tables);
    a->max_tok = max_tok;
    a->max_tables = (int)tables;
    a->max_qblocks = max_tok;
    a->max_copies = max_tok * 4 + 64;
    /* positions, tok_row, tokens, logit_tok [max_tok] i32; slots [max_tok] i64;
     * row_table [max_tok] i32; tables; qblocks [2 * max_tok] i32; pairs [2 * copies] */
    size_t bytes = (size_t)max_tok * 8 + (size_t)max_tok * 4 * 5 + (size_t)a->max_tables * 4 +
                   (size_t)a->max_qblocks * 8 + (size_t)a->max_copies * 8 + 256;
    cuda_dev_free(a->dev);
    cuda_dev_host_free(a->host);
    a->dev = NULL;
    a->host = cuda_dev_host_alloc(bytes); /* page-locked: the step's one upload goes straight over */
    if (!a->host)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cuda backend: no host memory for the step's batch");
    a->bytes = bytes;
    return cuda_dev_alloc(&a->dev, bytes, err, errlen);
}

/* Attention's split workspace for steps of max_tok tokens at contexts up to max_ctx
 * (the kernels lay it out by the step's longest context: every token of a step may
 * be a long prompt's last chunk): sized at reserve, before the KV pool, so that the
 * pool can take what is left of the card. */
static enum hr_status cb_size_attention(struct cuda_backend *c, char *err, size_t errlen)
{
    cuda_dev_free(c->attn_work);
    cuda_dev_free(c->attn_tickets);
    c->attn_work = NULL;
    c->attn_tickets = NULL;
    c->attn_n_tickets = 0;
    c->attn_work_bytes =
        c->K->attn_workspace(c->max_tok, c->cfg->n_heads, c->cfg->head_dim, c->max_ctx);
    log_info("cuda: attention split workspace %.1f MiB (steps of %d tokens at contexts up to %d)",
             (double)c->attn_work_bytes / 1048576.0, c->max_tok, c->max_ctx);
    if (!c->attn_work_bytes)
        return HR_OK;
    enum hr_status st = cuda_dev_alloc(&c->attn_work, c->attn_work_bytes, err, errlen);
    size_t nt = (size_t)c->max_tok * (size_t)c->cfg->n_kv_heads; /* a query block has a token at least */
    if (st == HR_OK && (st = cuda_dev_alloc((void **)&c->attn_tickets, nt * sizeof(int), err, errlen)) == HR_OK &&
        (st = cuda_dev_memset(c->attn_tickets, 0, nt * sizeof(int), err, errlen)) == HR_OK)
        c->attn_n_tickets = nt;
    return st;
}

/* Rows a sampling launch takes at most (more go in several launches: rows are
 * independent, so how they are cut changes no result), and rows queued between two
 * waits (a decode step's logits rows, ENGINE_DEVICE_LOGIT_ROWS, in one wait: each wait
 * leaves the card idle for a round trip to the host). */
#define CB_SAMPLE_ROWS 64
#define CB_SAMPLE_QUEUE 256

static size_t cb_sample_off(const struct cuda_backend *c, int part)
{
    size_t off[4];
    off[0] = 0;
    off[1] = off[0] + (((size_t)CB_SAMPLE_QUEUE * sizeof(struct dsample_row) + 63) & ~(size_t)63);
    off[2] = off[1] + (((size_t)c->s_mods_cap * sizeof(struct dsample_mod) + 63) & ~(size_t)63);
    off[3] = off[2] + (((size_t)c->s_bias_cap * sizeof(float) + 63) & ~(size_t)63);
    return part < 4 ? off[part] : off[3] + (size_t)CB_SAMPLE_QUEUE * sizeof(struct dsample_out);
}

static void cb_sampling_free(struct cuda_backend *c)
{
    cuda_dev_free(c->s_work);
    cuda_dev_free(c->s_dev);
    cuda_dev_host_free(c->s_host);
    c->s_work = NULL;
    c->s_dev = c->s_host = NULL;
    c->s_vocab = 0;
}

/* One row has at most vocab mods and DSAMPLE_MAX_BIAS biases: any row fits a queue. */
static enum hr_status cb_size_sampling(struct cuda_backend *c, int vocab, char *err, size_t errlen)
{
    cb_sampling_free(c);
    c->s_mods_cap = 2 * vocab;
    c->s_bias_cap = 4 * DSAMPLE_MAX_BIAS;
    c->s_bytes = cb_sample_off(c, 4);
    enum hr_status st = cuda_dev_alloc((void **)&c->s_work,
                                       (size_t)CB_SAMPLE_ROWS * cuda_sample_stride(vocab) * sizeof(float), err, errlen);
    if (st == HR_OK)
        st = cuda_dev_alloc(&c->s_dev, c->s_bytes, err, errlen);
    if (st == HR_OK && !(c->s_host = cuda_dev_host_alloc(c->s_bytes)))
        st = hr_err(err, errlen, HR_ERR_NOMEM, "cuda backend: no page-locked host memory for sampling");
    if (st != HR_OK) {
        cb_sampling_free(c);
        return st;
    }
    c->s_vocab = vocab;
    return HR_OK;
}

static int cb_max_k(const struct model_config *c)
{
    int k = c->hidden_size;
    int dims[] = {c->n_heads * c->head_dim, c->intermediate_size, c->n_experts > 0 ? c->moe_intermediate_size : 0};
    for (int i = 0; i < 3; i++)
        k = dims[i] > k ? dims[i] : k;
    return k;
}

/* The rows of the matmuls' bf16 input buffers (xb, sw): max_tok in whole x copies of the
 * GEMM (cuda_gemm.x_rows) */
static int cb_x_rows(const struct cuda_backend *c)
{
    return (c->max_tok + CUDA_GEMM_X_BOX - 1) / CUDA_GEMM_X_BOX * CUDA_GEMM_X_BOX;
}

static enum hr_status cb_reserve(struct backend *be, const struct model_config *cfg, int max_tok, int max_ctx,
                                 char *err, size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    if (max_tok < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda backend: steps of %d tokens", max_tok);
    cb_graphs_drop(c);
    if (cfg->head_dim != 128)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "the CUDA attention kernels are built for head_dim 128 (this model has %d); use --device cpu",
                      cfg->head_dim);
    if (cfg->n_experts > CUDA_MOE_MAX_EXPERTS)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "the CUDA MoE block takes up to %d experts (this model has %d)",
                      CUDA_MOE_MAX_EXPERTS, cfg->n_experts);
    if (cfg->n_experts > 0 && cfg->hidden_size > CUDA_MOE_MAX_HIDDEN)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "the CUDA MoE block takes a hidden size up to %d (this model has %d); use --device cpu",
                      CUDA_MOE_MAX_HIDDEN, cfg->hidden_size);
    if (cfg->n_experts > 0 && (cfg->moe_intermediate_size % 64 || cfg->hidden_size % 64))
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "the CUDA MoE block needs hidden and moe_intermediate sizes that are multiples of 64 (%d, %d); "
                      "use --device cpu",
                      cfg->hidden_size, cfg->moe_intermediate_size);
    c->cfg = cfg;
    c->max_tok = max_tok;
    c->max_ctx = max_ctx > 0 && max_ctx < cfg->max_position_embeddings ? max_ctx : cfg->max_position_embeddings;
    /* the largest bf16 input of any matmul, in whole 64-row boxes of the GEMM's x copies
     * (cuda_gemm.x_rows), zeroed once so that no copy reads bytes never written */
    const size_t rows = (size_t)cb_x_rows(c);
    size_t xb = rows * (size_t)cb_max_k(cfg), swb = rows * (size_t)cfg->intermediate_size;
    cuda_dev_free(c->xb);
    c->xb = NULL;
    enum hr_status st = cuda_dev_alloc((void **)&c->xb, xb * 2, err, errlen);
    if (st == HR_OK)
        st = cuda_dev_memset(c->xb, 0, xb * 2, err, errlen);
    if (st != HR_OK)
        return st;
    c->xb_elems = xb;
    cuda_dev_free(c->sw);
    c->sw = NULL;
    if ((st = cuda_dev_alloc((void **)&c->sw, swb * 2, err, errlen)) != HR_OK ||
        (st = cuda_dev_memset(c->sw, 0, swb * 2, err, errlen)) != HR_OK)
        return st;
    /* the K split's workspace and tickets: the largest over the model's shapes */
    int H = cfg->hidden_size, Q = cfg->n_heads * cfg->head_dim, KV = cfg->n_kv_heads * cfg->head_dim;
    int I = cfg->intermediate_size, V = cfg->vocab_size;
    struct {
        int n, k;
        enum cuda_epi epi;
    } shapes[] = {{Q, H, CUDA_EPI_STORE_F32}, {KV, H, CUDA_EPI_STORE_F32}, {Q + 2 * KV, H, CUDA_EPI_STORE_F32},
                  {H, Q, CUDA_EPI_ADD_F32},
                  {I, H, CUDA_EPI_SWIGLU_BF16}, {H, I, CUDA_EPI_ADD_F32}, {V, H, CUDA_EPI_STORE_F32}};
    size_t work = 0, tickets = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t w = c->K->gemm_workspace(max_tok, shapes[i].n, shapes[i].k, shapes[i].epi);
        size_t t = c->K->gemm_tickets(max_tok, shapes[i].n, shapes[i].k, shapes[i].epi);
        work = w > work ? w : work;
        tickets = t > tickets ? t : tickets;
    }
    cuda_dev_free(c->gemm_work);
    cuda_dev_free(c->tickets);
    c->gemm_work = NULL;
    c->tickets = NULL;
    if (work && (st = cuda_dev_alloc(&c->gemm_work, work, err, errlen)) != HR_OK)
        return st;
    if (tickets && ((st = cuda_dev_alloc((void **)&c->tickets, tickets * sizeof(int), err, errlen)) != HR_OK ||
                    (st = cuda_dev_memset(c->tickets, 0, tickets * sizeof(int), err, errlen)) != HR_OK))
        return st;
    c->gemm_work_bytes = work;
    c->n_tickets = tickets;
    if ((st = cb_size_attention(c, err, errlen)) != HR_OK)
        return st;
    if ((st = cb_size_sampling(c, V, err, errlen)) != HR_OK)
        return st;
    return cb_size_step(c, err, errlen);
}

static enum hr_status cb_kv_alloc(struct backend *be, struct kv_store *kv, char *err, size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    if (kv->dtype != KV_DTYPE_BF16)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "the CUDA backend stores KV in bf16 (--kv-dtype bf16)");
    if (kv->head_dim != 128)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED, "the CUDA attention kernels are built for head_dim 128, not %d",
                      kv->head_dim);
    void *p = NULL;
    cb_graphs_drop(c);
    size_t bytes = kv_store_slab_bytes(kv);
    enum hr_status st = cuda_dev_alloc(&p, bytes, err, errlen);
    if (st == HR_OK)
        st = cuda_dev_memset(p, 0, bytes, err, errlen);
    if (st != HR_OK) {
        cuda_dev_free(p);
        return st;
    }
    kv->slab = p;
    c->kv_blocks = kv->n_blocks;
    c->kv_block_size = kv->block_size;
    return cb_size_step(c, err, errlen);
}

static void cb_kv_free(struct backend *be, struct kv_store *kv)
{
    cb_graphs_drop(cb_of(be));
    char err[HR_ERRLEN];
    cuda_copier_wait(cb_of(be)->copier, err, sizeof err); /* no copy may still read or write the slab */
    cuda_dev_free(kv->slab);
    kv->slab = NULL;
}

/* ------------------------------------------------------------------ weights */

static enum hr_status cb_upload_mat(const struct weights_mat *h, struct weights_mat *d, const char *what, char *err,
                                    size_t errlen)
{
    *d = *h;
    d->data = NULL;
    if (h->dtype != SAFETENSORS_DTYPE_BF16)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "the CUDA backend needs bf16 weights (%s is %s); use --device cpu", what,
                      safetensors_dtype_name(h->dtype));
    if (h->cols % 64 || h->rows % 2)
        return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                      "the CUDA GEMM needs k a multiple of 64 and n even (%s is [%lld, %lld])", what,
                      (long long)h->rows, (long long)h->cols);
    size_t bytes = (size_t)h->rows * (size_t)h->cols * 2;
    void *p = NULL;
    enum hr_status st = cuda_dev_alloc(&p, bytes, err, errlen);
    if (st == HR_OK && !h->data && h->fill_seed) /* --load-format dummy: generated here */
        st = cuda_dev_fill_bf16(p, bytes / 2, h->fill_seed, DUMMY_FILL_SCALE, err, errlen);
    else if (st == HR_OK)
        st = cuda_dev_copy(p, h->data, bytes, err, errlen);
    if (st != HR_OK) {
        cuda_dev_free(p);
        return st;
    }
    d->data = p;
    return HR_OK;
}

static enum hr_status cb_upload_vec(const float *h, int n, float **d, char *err, size_t errlen)
{
    *d = NULL;
    enum hr_status st = cuda_dev_alloc((void **)d, (size_t)n * sizeof(float), err, errlen);
    if (st == HR_OK)
        st = cuda_dev_copy(*d, h, (size_t)n * sizeof(float), err, errlen);
    return st;
}

/* One matrix of every expert (which: 0 gate, 1 up, 2 down) into one allocation
 * [n_experts, rows, cols], which the grouped GEMM indexes by expert; the layer owns
 * it from the start (out0->data, expert 0's view), so the caller's unbind frees it
 * whatever fails. */
static const struct weights_mat *cb_expert_mat(const struct weights_expert *x, int which)
{
    return which == 0 ? &x->gate : which == 1 ? &x->up : &x->down;
}

static enum hr_status cb_upload_stack(const struct weights_layer *h, struct weights_layer *d, int which,
                                      const char *what, char *err, size_t errlen)
{
    const struct weights_mat *m0 = cb_expert_mat(&h->experts[0], which);
    size_t per = (size_t)m0->rows * (size_t)m0->cols;
    uint16_t *base = NULL;
    enum hr_status st = cuda_dev_alloc((void **)&base, per * 2 * (size_t)h->n_experts, err, errlen);
    if (st != HR_OK)
        return st;
    *(struct weights_mat *)cb_expert_mat(&d->experts[0], which) = (struct weights_mat){.data = base};
    for (int e = 0; st == HR_OK && e < h->n_experts; e++) {
        const struct weights_mat *m = cb_expert_mat(&h->experts[e], which);
        struct weights_mat *o = (struct weights_mat *)cb_expert_mat(&d->experts[e], which);
        if (m->dtype != SAFETENSORS_DTYPE_BF16 || m->rows != m0->rows || m->cols != m0->cols)
            return hr_err(err, errlen, HR_ERR_UNSUPPORTED,
                          "the CUDA backend needs bf16 experts of one shape (%s, expert %d is %s [%lld, %lld]); use "
                          "--device cpu",
                          what, e, safetensors_dtype_name(m->dtype), (long long)m->rows, (long long)m->cols);
        *o = *m;
        o->data = base + (size_t)e * per;
        if (!m->data && m->fill_seed) /* --load-format dummy: generated here */
            st = cuda_dev_fill_bf16(base + (size_t)e * per, per, m->fill_seed, DUMMY_FILL_SCALE, err, errlen);
        else
            st = cuda_dev_copy(base + (size_t)e * per, m->data, per * 2, err, errlen);
    }
    return st;
}

/* The router and the experts of an MoE layer. */
static enum hr_status cb_upload_experts(const struct weights_layer *h, struct weights_layer *d,
                                        const struct model_config *cfg, const char *what, char *err, size_t errlen)
{
    if (h->n_experts != cfg->n_experts || !h->experts)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda backend: %s has %d experts, the config %d", what,
                      h->n_experts, cfg->n_experts);
    enum hr_status st = cb_upload_mat(&h->router, &d->router, what, err, errlen);
    if (st != HR_OK)
        return st;
    d->experts = calloc((size_t)h->n_experts, sizeof *d->experts);
    if (!d->experts)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cuda backend: out of memory");
    d->n_experts = h->n_experts;
    for (int which = 0; st == HR_OK && which < 3; which++)
        st = cb_upload_stack(h, d, which, what, err, errlen);
    return st;
}

static void cb_unbind_weights(struct backend *be, const struct weights *bound)
{
    if (!bound)
        return;
    cb_graphs_drop(cb_of(be));
    struct weights *w = (struct weights *)bound;
    if (w->lm_head.data != w->embed.data)
        cuda_dev_free((void *)w->lm_head.data);
    cuda_dev_free((void *)w->embed.data);
    cuda_dev_free(w->final_norm);
    for (int l = 0; w->layers && l < w->n_layers; l++) {
        struct weights_layer *L = &w->layers[l];
        cuda_dev_free(L->attn_norm);
        cuda_dev_free(L->ffn_norm);
        cuda_dev_free(L->q_norm);
        cuda_dev_free(L->k_norm);
        const struct weights_mat *m[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down, &L->router};
        for (int i = 0; i < 8; i++)
            cuda_dev_free((void *)m[i]->data);
        if (L->experts) { /* each of gate, up, down: one allocation for every expert */
            cuda_dev_free((void *)L->experts[0].gate.data);
            cuda_dev_free((void *)L->experts[0].up.data);
            cuda_dev_free((void *)L->experts[0].down.data);
            free(L->experts);
        }
    }
    free(w->layers);
    free(w);
}

static enum hr_status cb_bind_weights(struct backend *be, const struct weights *host, const struct weights **bound,
                                      char *err, size_t errlen)
{
    const struct model_config *cfg = cb_of(be)->cfg;
    *bound = NULL;
    if (!cfg)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda backend: weights bound before reserve");
    cb_graphs_drop(cb_of(be));
    struct weights *w = calloc(1, sizeof *w);
    if (!w)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cuda backend: out of memory");
    w->n_layers = host->n_layers;
    w->n_params = host->n_params;
    w->weight_bytes = host->weight_bytes;
    w->n_active_params = host->n_active_params;
    w->layers = calloc((size_t)host->n_layers, sizeof *w->layers);
    enum hr_status st = w->layers ? HR_OK : hr_err(err, errlen, HR_ERR_NOMEM, "cuda backend: out of memory");
    int H = cfg->hidden_size, HD = cfg->head_dim;
    if (st == HR_OK)
        st = cb_upload_mat(&host->embed, &w->embed, "the embedding", err, errlen);
    if (st == HR_OK && host->lm_head.data == host->embed.data && host->lm_head.fill_seed == host->embed.fill_seed)
        w->lm_head = w->embed; /* tied: one copy */
    else if (st == HR_OK)
        st = cb_upload_mat(&host->lm_head, &w->lm_head, "lm_head", err, errlen);
    if (st == HR_OK)
        st = cb_upload_vec(host->final_norm, H, &w->final_norm, err, errlen);
    for (int l = 0; st == HR_OK && l < host->n_layers; l++) {
        const struct weights_layer *h = &host->layers[l];
        struct weights_layer *d = &w->layers[l];
        char what[64];
        snprintf(what, sizeof what, "a matrix of layer %d", l);
        d->is_moe = h->is_moe;
        if ((st = cb_upload_vec(h->attn_norm, H, &d->attn_norm, err, errlen)) != HR_OK ||
            (st = cb_upload_vec(h->ffn_norm, H, &d->ffn_norm, err, errlen)) != HR_OK ||
            (st = cb_upload_vec(h->q_norm, HD, &d->q_norm, err, errlen)) != HR_OK ||
            (st = cb_upload_vec(h->k_norm, HD, &d->k_norm, err, errlen)) != HR_OK)
            break;
        const struct weights_mat *hm[] = {&h->q, &h->k, &h->v, &h->o, &h->gate, &h->up, &h->down};
        struct weights_mat *dm[] = {&d->q, &d->k, &d->v, &d->o, &d->gate, &d->up, &d->down};
        for (int i = 0; st == HR_OK && i < (h->is_moe ? 4 : 7); i++)
            st = cb_upload_mat(hm[i], dm[i], what, err, errlen);
        if (st == HR_OK && h->is_moe)
            st = cb_upload_experts(h, d, cfg, what, err, errlen);
    }
    if (st != HR_OK) {
        cb_unbind_weights(be, w);
        return st;
    }
    *bound = w;
    return HR_OK;
}

static enum hr_status cb_mem_info(struct backend *be, size_t *free_bytes, size_t *total_bytes, char *err,
                                  size_t errlen)
{
    (void)be;
    return cuda_dev_mem_info(free_bytes, total_bytes, err, errlen);
}

/* ------------------------------------------------------------------ cache tiers */

static size_t cb_slice_off(const struct kv_store *kv, int block, int layer)
{
    return ((size_t)layer * (size_t)kv->n_blocks + (size_t)block) * kv->layer_bytes;
}

/* Queues the copy of every layer of a block (its slices lie n_blocks slices apart in
 * the layer-major slab) to or from host [n_layers, layer_bytes]: one 2D copy on the
 * copy stream. */
static enum hr_status cb_kv_queue(struct cuda_backend *c, const struct kv_store *kv, int block, void *host,
                                  bool to_host, char *err, size_t errlen)
{
    if (block < 0 || block >= kv->n_blocks)
        return hr_err(err, errlen, HR_ERR_INVALID, "kv %s: block %d outside the pool (%d)",
                      to_host ? "export" : "import", block, kv->n_blocks);
    uint8_t *dev = kv->slab + cb_slice_off(kv, block, 0);
    size_t stride = (size_t)kv->n_blocks * kv->layer_bytes;
    if (to_host)
        return cuda_copier_copy2d(c->copier, host, kv->layer_bytes, dev, stride, kv->layer_bytes,
                                  (size_t)kv->n_layers, err, errlen);
    return cuda_copier_copy2d(c->copier, dev, stride, host, kv->layer_bytes, kv->layer_bytes, (size_t)kv->n_layers,
                              err, errlen);
}

/* The synchronous forms go through the copy stream too, then wait: they stay ordered
 * with the queued ones (the disk tier may import into a block whose export to the
 * host tier is still queued). */
static enum hr_status cb_kv_export(struct backend *be, const struct kv_store *kv, int block, void *dst, char *err,
                                   size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    enum hr_status st = cb_kv_queue(c, kv, block, dst, true, err, errlen);
    return st == HR_OK ? cuda_copier_wait(c->copier, err, errlen) : st;
}

static enum hr_status cb_kv_import(struct backend *be, struct kv_store *kv, int block, const void *src, char *err,
                                   size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    enum hr_status st = cb_kv_queue(c, kv, block, (void *)src, false, err, errlen);
    return st == HR_OK ? cuda_copier_wait(c->copier, err, errlen) : st;
}

static enum hr_status cb_kv_export_async(struct backend *be, const struct kv_store *kv, int block, void *dst,
                                         char *err, size_t errlen)
{
    return cb_kv_queue(cb_of(be), kv, block, dst, true, err, errlen);
}

static enum hr_status cb_kv_import_async(struct backend *be, struct kv_store *kv, int block, const void *src,
                                         char *err, size_t errlen)
{
    return cb_kv_queue(cb_of(be), kv, block, (void *)src, false, err, errlen);
}

static enum hr_status cb_kv_copies_wait(struct backend *be, char *err, size_t errlen)
{
    return cuda_copier_wait(cb_of(be)->copier, err, errlen);
}

/* The host tier's memory: pinned, so that its copies are DMA transfers the copy stream
 * queues without staging. */
static void *cb_host_alloc(struct backend *be, size_t bytes, char *err, size_t errlen)
{
    (void)be;
    void *p = cuda_dev_host_alloc(bytes);
    if (!p)
        hr_err(err, errlen, HR_ERR_NOMEM, "cuda: no page-locked host memory for the host tier (%zu bytes)", bytes);
    return p;
}

static void cb_host_free(struct backend *be, void *p, size_t bytes)
{
    (void)bytes;
    char err[HR_ERRLEN];
    cuda_copier_wait(cb_of(be)->copier, err, sizeof err);
    cuda_dev_host_free(p);
}

/* ------------------------------------------------------------------ the step */

static struct cuda_kv cb_kv(const struct kv_store *kv)
{
    return (struct cuda_kv){.slab = (uint16_t *)kv->slab, .n_layers = kv->n_layers, .n_blocks = kv->n_blocks,
                            .n_kv_heads = kv->n_kv_heads, .block_size = kv->block_size, .head_dim = kv->head_dim};
}

/* The step's first failure (then cleared) where there was one, else st. */
static enum hr_status cb_step_status(struct cuda_backend *c, enum hr_status st, char *err, size_t errlen)
{
    c->pending = false;
    if (c->st != HR_OK) {
        st = c->st;
        hr_err(err, errlen, st, "%s", c->msg);
        c->st = HR_OK;
    }
    return st;
}

static enum hr_status cb_sync(struct backend *be, char *err, size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    cb_graph_finish(c);
    enum hr_status st = cuda_dev_sync(err, errlen);
    cb_prof_mark(c, -1);
    return cb_step_status(c, st, err, errlen);
}

/* Launches the step's graph if it is the capture just made (a replay runs from
 * begin_step) and returns: the ops that follow queue behind it.  Every failure the
 * host sees (an op's arguments, a launch) is in c->st by now and is reported here,
 * after a wait; what is left is a fault the device raises as it runs, which CUDA
 * makes sticky (every later call fails with it).  The profile times every op, so it
 * waits as sync does. */
static enum hr_status cb_submit(struct backend *be, char *err, size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    cb_graph_finish(c);
    if (c->profile || c->wait_always || c->st != HR_OK)
        return cb_sync(be, err, errlen);
    c->pending = true;
    return HR_OK;
}

/* Waits for submitted work before a call that reads its results or starts anew. */
static enum hr_status cb_wait_pending(struct backend *be, char *err, size_t errlen)
{
    return cb_of(be)->pending ? cb_sync(be, err, errlen) : HR_OK;
}

/* Places n elements of `size` bytes at *off of the area (8-byte aligned). */
static size_t cb_take(size_t *off, size_t n, size_t size)
{
    size_t at = (*off + 7) & ~(size_t)7;
    *off = at + n * size;
    return at;
}

static enum hr_status cb_begin_step(struct backend *be, const struct batch *b, struct kv_store *kv, char *err,
                                    size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    struct cuda_step_area *a = &c->area;
    /* a step submitted and never waited for (its logits not read): its failure is this
     * call's, and its upload must be done before the area is written again */
    enum hr_status pst = cb_wait_pending(be, err, errlen);
    if (pst != HR_OK)
        return pst;
    int armed = c->graph_next;
    c->graph_next = 0;
    c->mode = CB_EAGER;
    c->b16_of = NULL;
    c->st = HR_OK;
    c->msg[0] = 0;
    /* the step's work (its block copies first) after the cache tiers' copies queued before it */
    enum hr_status fst = cuda_copier_fence(c->copier, err, errlen);
    if (fst != HR_OK)
        return fst;
    if (!a->dev || b->n_tok > a->max_tok)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda backend: a step of %d tokens (reserved for %d)", b->n_tok,
                      a->max_tok);
    int group = c->cfg->n_heads / c->cfg->n_kv_heads, bt = cuda_attn_block_tokens(group);
    int n_tab = 0, n_qb = 0, max_kv = 0, max_qtok = 0;
    for (int r = 0; r < b->n_rows; r++) {
        const struct batch_row *row = &b->rows[r];
        n_tab += (row->kv_len + b->block_size - 1) / b->block_size;
        n_qb += (row->query_len + bt - 1) / bt;
        max_kv = row->kv_len > max_kv ? row->kv_len : max_kv;
        int qt = row->query_len < bt ? row->query_len : bt;
        max_qtok = qt > max_qtok ? qt : max_qtok;
    }
    if (n_tab > a->max_tables || n_qb > a->max_qblocks || b->n_copies > a->max_copies)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda backend: the step's batch is larger than its upload area");
    size_t need = c->K->attn_workspace(b->n_tok, c->cfg->n_heads, c->cfg->head_dim, max_kv);
    if (need > c->attn_work_bytes)
        return hr_err(err, errlen, HR_ERR_NOMEM,
                      "cuda backend: attention needs %zu bytes of split workspace, %zu reserved (a longer context "
                      "than the store was sized for)",
                      need, c->attn_work_bytes);
    /* lay out and fill the host copy, then one upload */
    /* what a graph's kernels read lies at offsets that depend on the token, row and
     * query-block counts alone (the same at every step of a bucket); tables and
     * copies, whose lengths vary, come last */
    size_t off = 0;
    size_t o_pos = cb_take(&off, (size_t)b->n_tok, 4), o_slot = cb_take(&off, (size_t)b->n_tok, 8);
    size_t o_row = cb_take(&off, (size_t)b->n_tok, 4), o_tok = cb_take(&off, (size_t)b->n_tok, 4);
    size_t o_rt = cb_take(&off, (size_t)b->n_rows, 4), o_qb = cb_take(&off, (size_t)n_qb * 2, 4);
    size_t o_lt = cb_take(&off, (size_t)b->n_tok, 4), o_tab = cb_take(&off, (size_t)n_tab, 4);
    size_t o_pairs = cb_take(&off, (size_t)b->n_copies * 2, 4);
    uint8_t *h = a->host;
    memcpy(h + o_pos, b->positions, (size_t)b->n_tok * 4);
    memcpy(h + o_slot, b->slots, (size_t)b->n_tok * 8);
    memcpy(h + o_row, b->tok_row, (size_t)b->n_tok * 4);
    memcpy(h + o_tok, b->tokens, (size_t)b->n_tok * 4);
    memcpy(h + o_lt, b->logit_tok, (size_t)b->n_logits * 4);
    int32_t *rt = (int32_t *)(h + o_rt), *tab = (int32_t *)(h + o_tab), *qb = (int32_t *)(h + o_qb);
    int32_t *pairs = (int32_t *)(h + o_pairs);
    int tb = 0, q = 0;
    for (int r = 0; r < b->n_rows; r++) {
        const struct batch_row *row = &b->rows[r];
        int nb = (row->kv_len + b->block_size - 1) / b->block_size;
        rt[r] = tb;
        memcpy(tab + tb, row->block_table, (size_t)nb * 4);
        tb += nb;
    }
    /* the decode walk's query blocks first, then the others: which walk a block takes
     * changes no bit */
    for (int r = 0; r < b->n_rows; r++)
        q = cuda_attn_row_qblocks(qb, q, b->rows[r].query_offset, b->rows[r].query_len, group, true);
    int n_dec = q;
    for (int r = 0; r < b->n_rows; r++)
        q = cuda_attn_row_qblocks(qb, q, b->rows[r].query_offset, b->rows[r].query_len, group, false);
    for (int i = 0; i < b->n_copies; i++) {
        pairs[2 * i] = b->copies[i].src;
        pairs[2 * i + 1] = b->copies[i].dst;
    }
    /* queued: the host goes on to the ops while it runs (the area is written again
     * only after the step's wait) */
    enum hr_status st = cuda_dev_copy_async(a->dev, a->host, off, c->stream, err, errlen);
    if (st != HR_OK)
        return st;
    uint8_t *d = a->dev;
    c->b = b;
    c->ab = (struct cuda_attn_batch){
        .n_tok = b->n_tok, .positions = (const int32_t *)(d + o_pos), .slots = (const int64_t *)(d + o_slot),
        .tok_row = (const int32_t *)(d + o_row), .row_table = (const int32_t *)(d + o_rt),
        .tables = (const int32_t *)(d + o_tab), .n_qblocks = n_qb, .qblocks = (const int32_t *)(d + o_qb),
        .max_kv = max_kv, .max_qtok = max_qtok, .n_dec = n_dec};
    c->d_tokens = (const int32_t *)(d + o_tok);
    c->d_logit_tok = (const int32_t *)(d + o_lt);
    c->d_pairs = (const int32_t *)(d + o_pairs);
    /* the copies in list order: one launch each, so a later copy into a block wins */
    for (int i = 0; i < b->n_copies && st == HR_OK; i++) {
        struct cuda_block_copy bc = {.kv = cb_kv(kv), .pairs = c->d_pairs + 2 * i, .n = 1};
        st = c->K->block_copy(&bc, c->stream, err, errlen);
    }
    if (st == HR_OK)
        cb_graph_start(c, b, armed);
    return st;
}

/* The page-locked buffer to_host and to_host_rows copy into, at least bytes long: sized
 * for the largest piece once (after the first steps it never grows), so a step's
 * logits come back at the bus's rate. */
static enum hr_status cb_host_room(struct cuda_backend *c, size_t bytes, char *err, size_t errlen)
{
    if (bytes <= c->host_bytes)
        return HR_OK;
    void *p = cuda_dev_host_alloc(bytes);
    if (!p)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cuda backend: no page-locked host memory for %zu bytes", bytes);
    cuda_dev_host_free(c->host);
    c->host = p;
    c->host_bytes = bytes;
    return HR_OK;
}

static enum hr_status cb_to_host(struct backend *be, const void *src, size_t bytes, void **host, char *err,
                                 size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    *host = NULL;
    enum hr_status pst = cb_wait_pending(be, err, errlen);
    if (pst != HR_OK)
        return pst;
    cb_prof_mark(c, 11);
    enum hr_status hst = cb_host_room(c, bytes, err, errlen);
    if (hst != HR_OK)
        return hst;
    enum hr_status st = cuda_dev_copy(c->host, src, bytes, err, errlen);
    cb_prof_mark(c, -1);
    if (st == HR_OK)
        *host = c->host;
    return st;
}

/* ------------------------------------------------------------------ sampling */

static enum hr_status cb_sample_check(const struct dsample_row *r, int vocab, const struct dsample_mod *mods,
                                      int n_mods, int n_biases, int *row_biases, char *err, size_t errlen)
{
    if (r->logit_row < 0 || r->n_logprobs < 0 || r->n_logprobs > DSAMPLE_MAX_TOP || r->n_mods < 0 ||
        r->n_mods > vocab || r->mod_first < 0 || r->mod_first > n_mods - r->n_mods)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda sample: bad row (logits row %d, %d mods at %d)",
                      r->logit_row, r->n_mods, r->mod_first);
    int nb = 0;
    for (int j = 0; j < r->n_mods; j++) {
        const struct dsample_mod *m = &mods[r->mod_first + j];
        if (m->token < 0 || m->token >= vocab || m->n_bias < 0 || m->bias_first < 0 ||
            m->bias_first > n_biases - m->n_bias)
            return hr_err(err, errlen, HR_ERR_INVALID, "cuda sample: bad mod (token %d, %d biases at %d)",
                          (int)m->token, (int)m->n_bias, (int)m->bias_first);
        nb += m->n_bias;
    }
    if (nb > DSAMPLE_MAX_BIAS)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda sample: a row with %d logit biases (at most %d)", nb,
                      DSAMPLE_MAX_BIAS);
    *row_biases = nb;
    return HR_OK;
}

/* The sample op's launches; each launch's wait also waits for a submitted step (and
 * reports its failure), cb_sample the rest. */
static enum hr_status cb_sample_launches(struct cuda_backend *c, const float *logits, int vocab,
                                         const struct dsample_row *rows, int n, const struct dsample_mod *mods,
                                         int n_mods, const float *biases, int n_biases, struct dsample_out *out,
                                         char *err, size_t errlen)
{
    if (!c->s_dev || vocab != c->s_vocab || n < 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda sample: not sized for %d rows of %d (reserve: %d)", n,
                      vocab, c->s_vocab);
    char *h = c->s_host, *d = c->s_dev;
    struct dsample_row *hr = (struct dsample_row *)(h + cb_sample_off(c, 0));
    struct dsample_mod *hm = (struct dsample_mod *)(h + cb_sample_off(c, 1));
    float *hb = (float *)(h + cb_sample_off(c, 2));
    const struct dsample_out *ho = (const struct dsample_out *)(h + cb_sample_off(c, 3));
    for (int i0 = 0; i0 < n;) {
        /* A queue's rows, their mods and biases packed and renumbered. */
        int k = 0, nm = 0, nb = 0;
        while (i0 + k < n && k < CB_SAMPLE_QUEUE) {
            const struct dsample_row *r = &rows[i0 + k];
            int rb = 0;
            enum hr_status st = cb_sample_check(r, vocab, mods, n_mods, n_biases, &rb, err, errlen);
            if (st != HR_OK)
                return st;
            if (k > 0 && (nm + r->n_mods > c->s_mods_cap || nb + rb > c->s_bias_cap))
                break;
            hr[k] = *r;
            hr[k].mod_first = nm;
            for (int j = 0; j < r->n_mods; j++) {
                struct dsample_mod m = mods[r->mod_first + j];
                memcpy(hb + nb, biases + m.bias_first, (size_t)m.n_bias * sizeof *hb);
                m.bias_first = nb;
                nb += m.n_bias;
                hm[nm++] = m;
            }
            k++;
        }
        /* All queued behind the step's work (submitted, not waited for): the rows up,
         * the launches of up to CB_SAMPLE_ROWS rows (one after another on the stream:
         * they share the work rows), the results down; then the one wait, which also
         * reports the step's failure.  The page-locked rows are written again only after
         * it. */
        struct dsample_row *drows = (struct dsample_row *)(d + cb_sample_off(c, 0));
        struct dsample_mod *dmods = (struct dsample_mod *)(d + cb_sample_off(c, 1));
        float *dbias = (float *)(d + cb_sample_off(c, 2));
        struct dsample_out *dout = (struct dsample_out *)(d + cb_sample_off(c, 3));
        enum hr_status st = cuda_dev_copy_async(drows, hr, (size_t)k * sizeof *hr, c->stream, err, errlen);
        if (st == HR_OK && nm)
            st = cuda_dev_copy_async(dmods, hm, (size_t)nm * sizeof *hm, c->stream, err, errlen);
        if (st == HR_OK && nb)
            st = cuda_dev_copy_async(dbias, hb, (size_t)nb * sizeof *hb, c->stream, err, errlen);
        for (int l0 = 0; st == HR_OK && l0 < k; l0 += CB_SAMPLE_ROWS) {
            struct cuda_sample a = {
                .logits = logits, .vocab = vocab, .n_rows = k - l0 < CB_SAMPLE_ROWS ? k - l0 : CB_SAMPLE_ROWS,
                .rows = drows + l0, .mods = dmods, .n_mods = nm, .biases = dbias, .n_biases = nb,
                .work = c->s_work, .out = dout + l0,
            };
            cuda_sample_hints(&a, hr + l0); /* the slices' kernels where rows need them */
            st = c->K->sample(&a, c->stream, err, errlen);
        }
        if (st == HR_OK)
            st = cuda_dev_copy_async((void *)ho, dout, (size_t)k * sizeof *ho, c->stream, err, errlen);
        char werr[HR_ERRLEN];
        enum hr_status wst = cuda_dev_stream_sync(c->stream, werr, sizeof werr);
        if (st == HR_OK && wst != HR_OK)
            st = hr_err(err, errlen, wst, "%s", werr);
        st = cb_step_status(c, st, err, errlen);
        if (st != HR_OK)
            return st;
        memcpy(out + i0, ho, (size_t)k * sizeof *ho);
        i0 += k;
    }
    return HR_OK;
}

static enum hr_status cb_sample(struct backend *be, const float *logits, int vocab, const struct dsample_row *rows,
                                int n, const struct dsample_mod *mods, int n_mods, const float *biases, int n_biases,
                                struct dsample_out *out, char *err, size_t errlen)
{
    enum hr_status st =
        cb_sample_launches(cb_of(be), logits, vocab, rows, n, mods, n_mods, biases, n_biases, out, err, errlen);
    /* a step submitted and not waited for yet (no rows, or bad ones): its wait, whose
     * failure comes first (a wait writes err only when it fails) */
    enum hr_status pst = cb_wait_pending(be, err, errlen);
    return pst != HR_OK ? pst : st;
}

static enum hr_status cb_to_host_rows(struct backend *be, const float *src, int dim, const int32_t *rows, int n,
                                      void **host, char *err, size_t errlen)
{
    struct cuda_backend *c = cb_of(be);
    *host = NULL;
    enum hr_status pst = cb_wait_pending(be, err, errlen);
    if (pst != HR_OK)
        return pst;
    size_t row = (size_t)dim * sizeof(float), bytes = (size_t)n * row;
    if (n < 0 || dim < 1)
        return hr_err(err, errlen, HR_ERR_INVALID, "cuda to_host_rows: %d rows of %d", n, dim);
    enum hr_status hst = cb_host_room(c, bytes, err, errlen);
    if (hst != HR_OK)
        return hst;
    /* runs of consecutive rows go in one copy */
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && rows[j] == rows[j - 1] + 1)
            j++;
        enum hr_status st = cuda_dev_copy((char *)c->host + (size_t)i * row, src + (size_t)rows[i] * dim,
                                          (size_t)(j - i) * row, err, errlen);
        if (st != HR_OK)
            return st;
        i = j;
    }
    *host = c->host;
    return HR_OK;
}

/* ------------------------------------------------------------------ ops */

static void cb_embed(struct backend *be, float *out, const struct weights_mat *emb)
{
    struct cuda_backend *c = cb_of(be);
    if (!cb_op(c, 1, CB_P(out), CB_P(emb->data), CB_P(c->d_tokens), (uint64_t)c->b->n_tok))
        return;
    char err[HR_ERRLEN];
    struct cuda_embed a = {.out = out, .table = emb->data, .tokens = c->d_tokens, .n_tok = c->b->n_tok,
                           .dim = (int)emb->cols, .vocab = (int)emb->rows};
    cb_fail(c, c->K->embed(&a, c->stream, err, sizeof err), err);
}

/* x[m, k] f32 rounded to bf16 into the backend's buffer. */
static const uint16_t *cb_bf16_input(struct cuda_backend *c, const float *x, int m, int64_t k)
{
    char err[HR_ERRLEN];
    size_t n = (size_t)m * (size_t)k;
    if (x == c->b16_of && n == c->b16_n)
        return c->b16_at; /* the op that wrote x left its bf16 copy: the same bits */
    if (n > c->xb_elems) {
        cb_fail(c, HR_ERR_INVALID, "cuda backend: a matmul input larger than reserved");
        return NULL;
    }
    enum hr_status st = c->K->to_bf16(c->xb, x, n, c->stream, err, sizeof err);
    cb_fail(c, st, err);
    if (st != HR_OK)
        return NULL;
    c->b16_of = x;
    c->b16_at = c->xb;
    c->b16_n = n;
    return c->xb;
}

/* An op wrote n floats at y and their bf16 roundings at at. */
static void cb_b16_left(struct cuda_backend *c, const float *y, const uint16_t *at, size_t n)
{
    if (c->st != HR_OK)
        return;
    c->b16_of = y;
    c->b16_at = at;
    c->b16_n = n;
}

/* bytes written at y over the buffer whose bf16 copy is kept make the copy stale */
static void cb_b16_overwritten(struct cuda_backend *c, const void *y, size_t bytes)
{
    const uint8_t *y0 = y, *k0 = (const uint8_t *)c->b16_of;
    if (k0 && y0 < k0 + c->b16_n * sizeof(float) && k0 < y0 + bytes)
        c->b16_of = NULL;
}

/* y = x . w^T (and the extra products of a matmul_multi: more_y[i] = x . more_w[i]^T,
 * one launch) by the epilogue epi; for SwiGLU also y32, the bf16 product widened. */
static void cb_gemm_segs(struct cuda_backend *c, enum cuda_epi epi, void *y, float *y32, const uint16_t *xb, int m,
                         const struct weights_mat *w, const struct weights_mat *up, int n_more,
                         float *const *more_y, const struct weights_mat *const *more_w)
{
    if (!cb_ok(c) || m == 0)
        return;
    char err[HR_ERRLEN];
    struct cuda_gemm g = {.epi = epi, .y = y, .y_f32 = y32, .x = xb, .w = w->data, .w_up = up ? up->data : NULL, .m = m,
                          .n = (int)w->rows, .k = (int)w->cols, .x_rows = cb_x_rows(c), .work = c->gemm_work,
                          .work_bytes = c->gemm_work_bytes, .tickets = c->tickets, .n_tickets = c->n_tickets,
                          .n_more = n_more};
    for (int i = 0; i < n_more; i++) {
        g.more_w[i] = more_w[i]->data;
        g.more_y[i] = more_y[i];
        g.more_n[i] = (int)more_w[i]->rows;
    }
    cb_fail(c, c->K->gemm(&g, c->stream, err, sizeof err), err);
    size_t esz = epi == CUDA_EPI_STORE_BF16 || epi == CUDA_EPI_SWIGLU_BF16 ? 2 : 4;
    cb_b16_overwritten(c, y, (size_t)m * (size_t)g.n * esz);
    for (int i = 0; i < n_more; i++)
        cb_b16_overwritten(c, more_y[i], (size_t)m * (size_t)g.more_n[i] * esz);
    if (y32)
        cb_b16_overwritten(c, y32, (size_t)m * (size_t)g.n * sizeof(float));
}

static void cb_gemm(struct cuda_backend *c, enum cuda_epi epi, void *y, const uint16_t *xb, int m,
                    const struct weights_mat *w, const struct weights_mat *up)
{
    cb_gemm_segs(c, epi, y, NULL, xb, m, w, up, 0, NULL, NULL);
}

static void cb_matmul(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    struct cuda_backend *c = cb_of(be);
    if (cb_op(c, 2, CB_P(y), CB_P(x), (uint64_t)m, CB_P(w->data)) && m > 0)
        cb_gemm(c, CUDA_EPI_STORE_F32, y, cb_bf16_input(c, x, m, w->cols), m, w, NULL);
}

static void cb_matmul_add(struct backend *be, float *y, const float *x, int m, const struct weights_mat *w)
{
    struct cuda_backend *c = cb_of(be);
    if (cb_op(c, 3, CB_P(y), CB_P(x), (uint64_t)m, CB_P(w->data)) && m > 0)
        cb_gemm(c, CUDA_EPI_ADD_F32, y, cb_bf16_input(c, x, m, w->cols), m, w, NULL);
}

static void cb_matmul_multi(struct backend *be, int n_mats, float *const *ys, const float *x, int m,
                            const struct weights_mat *const *ws)
{
    struct cuda_backend *c = cb_of(be);
    bool run = cb_op(c, 4, CB_P(x), (uint64_t)m, (uint64_t)n_mats, 0);
    for (int i = 0; i < n_mats; i++)
        run = cb_op(c, 4, CB_P(ys[i]), CB_P(ws[i]->data), 0, 0);
    if (!run || m == 0)
        return;
    const uint16_t *xb = cb_bf16_input(c, x, m, ws[0]->cols);
    /* q, k and v in one launch (fewer launches and a fuller grid at decode) where the
     * split workspace was sized for it: the attention projections, whole tiles each */
    int Q = c->cfg->n_heads * c->cfg->head_dim, KV = c->cfg->n_kv_heads * c->cfg->head_dim;
    bool fused = n_mats == 3 && ws[0]->rows == Q && ws[1]->rows == KV && ws[2]->rows == KV &&
                 Q % 128 == 0 && KV % 128 == 0 && ws[1]->cols == ws[0]->cols && ws[2]->cols == ws[0]->cols;
    if (fused) {
        cb_gemm_segs(c, CUDA_EPI_STORE_F32, ys[0], NULL, xb, m, ws[0], NULL, 2, ys + 1, ws + 1);
        return;
    }
    for (int i = 0; i < n_mats; i++)
        cb_gemm(c, CUDA_EPI_STORE_F32, ys[i], xb, m, ws[i], NULL);
}

/* silu(x gate^T) * (x up^T): the GEMM's SwiGLU epilogue writes bf16 into the
 * backend's buffer and, in the same launch, its exact widening: the f32 the op
 * promises. */
static void cb_matmul_swiglu(struct backend *be, float *out, const float *x, int m, const struct weights_mat *gate,
                             const struct weights_mat *up)
{
    struct cuda_backend *c = cb_of(be);
    if (!cb_op(c, 5, CB_P(out), CB_P(x), (uint64_t)m, CB_P(gate->data) ^ (CB_P(up->data) << 1)) || m == 0)
        return;
    size_t n = (size_t)m * (size_t)gate->rows;
    if (gate->rows > c->cfg->intermediate_size) {
        cb_fail(c, HR_ERR_INVALID, "cuda backend: a SwiGLU wider than reserved");
        return;
    }
    if (c->b16_at == c->sw)
        c->b16_of = NULL; /* the product goes to sw: its input must not come from there */
    cb_gemm_segs(c, CUDA_EPI_SWIGLU_BF16, c->sw, out, cb_bf16_input(c, x, m, gate->cols), m, gate, up, 0, NULL,
                 NULL);
    if (!cb_ok(c))
        return;
    cb_b16_left(c, out, c->sw, n); /* out is sw widened: sw is its bf16 copy */
}

static void cb_rmsnorm(struct backend *be, float *y, const float *x, const float *w, int rows, int dim, float eps)
{
    struct cuda_backend *c = cb_of(be);
    if (!cb_op(c, 6, CB_P(y), CB_P(x), CB_P(w), (uint64_t)rows << 32 | (uint32_t)dim) || rows == 0)
        return;
    char err[HR_ERRLEN];
    size_t n = (size_t)rows * (size_t)dim;
    struct cuda_rmsnorm a = {.y_f32 = y, .y_bf16 = n <= c->xb_elems ? c->xb : NULL, .x = x, .w = w, .rows = rows,
                             .dim = dim, .eps = eps};
    cb_fail(c, c->K->rmsnorm(&a, c->stream, err, sizeof err), err);
    if (a.y_bf16) /* the next matmul's input, already rounded */
        cb_b16_left(c, y, c->xb, n);
}

static void cb_attn_prep(struct backend *be, float *q, float *k, const float *v, const float *q_norm,
                         const float *k_norm, float eps, int n_heads, struct kv_store *kv, int layer)
{
    struct cuda_backend *c = cb_of(be);
    if (!cb_op(c, 7, CB_P(q), CB_P(k) ^ (CB_P(v) << 1), CB_P(kv->slab), (uint64_t)layer << 32 | (uint32_t)n_heads))
        return;
    char err[HR_ERRLEN];
    struct cuda_attn_prep a = {.q = q, .k = k, .v = v, .q_norm = q_norm, .k_norm = k_norm, .eps = eps,
                               .rope_theta = c->cfg->rope_theta, .n_heads = n_heads, .layer = layer,
                               .kv = cb_kv(kv), .b = &c->ab};
    cb_fail(c, c->K->attn_prep(&a, c->stream, err, sizeof err), err);
}

static void cb_attention(struct backend *be, float *out, const float *q, const struct kv_store *kv, int layer,
                         int n_heads, float scale)
{
    struct cuda_backend *c = cb_of(be);
    if (!cb_op(c, 8, CB_P(out), CB_P(q), CB_P(kv->slab), (uint64_t)layer << 32 | (uint32_t)n_heads))
        return;
    char err[HR_ERRLEN];
    size_t n = (size_t)c->ab.n_tok * (size_t)n_heads * (size_t)kv->head_dim;
    struct cuda_attention a = {.out_f32 = out, .out_bf16 = n <= c->xb_elems ? c->xb : NULL, .q = q,
                               .n_heads = n_heads, .layer = layer, .scale = scale, .kv = cb_kv(kv), .b = &c->ab,
                               .work = c->attn_work, .work_bytes = c->attn_work_bytes,
                               .tickets = c->attn_tickets, .n_tickets = c->attn_n_tickets};
    cb_fail(c, c->K->attention(&a, c->stream, err, sizeof err), err);
    if (a.out_bf16) /* o_proj's input, already rounded */
        cb_b16_left(c, out, c->xb, n);
}

static size_t cb_moe_work_bytes(struct backend *be, int n_tok)
{
    const struct model_config *cfg = cb_of(be)->cfg;
    if (!cfg || cfg->n_experts < 1)
        return 0;
    return cb_of(be)->K->moe_workspace(n_tok, cfg->hidden_size, cfg->moe_intermediate_size, cfg->n_experts,
                                       cfg->n_experts_per_tok);
}

static void cb_moe(struct backend *be, float *h, const float *xn, int n_tok, const struct weights_layer *L,
                   void *work, int32_t *trace)
{
    struct cuda_backend *c = cb_of(be);
    if (!cb_op(c, 9, CB_P(h), CB_P(xn), CB_P(work), CB_P(L->router.data) ^ (uint64_t)n_tok) || n_tok == 0)
        return;
    if (trace && c->mode != CB_EAGER) { /* graph_rows is never asked for an evaluation's steps */
        cb_fail(c, HR_ERR_INTERNAL, "cuda backend: a routing trace asked of a graph step");
        return;
    }
    const struct model_config *cfg = c->cfg;
    char err[HR_ERRLEN];
    struct cuda_moe a = {.h = h, .xn = xn, .router = L->router.data, .gate = L->experts[0].gate.data,
                         .up = L->experts[0].up.data, .down = L->experts[0].down.data, .n_tok = n_tok,
                         .hidden = cfg->hidden_size, .inter = cfg->moe_intermediate_size,
                         .n_experts = cfg->n_experts, .top_k = cfg->n_experts_per_tok,
                         .norm_topk = cfg->norm_topk_prob, .work = work,
                         .work_bytes = cb_moe_work_bytes(be, n_tok), .trace = trace};
    cb_fail(c, c->K->moe(&a, c->stream, err, sizeof err), err);
}

static void cb_gather_logit_rows(struct backend *be, float *dst, const float *src, int first, int n, int dim)
{
    struct cuda_backend *c = cb_of(be);
    if (!cb_op(c, 10, CB_P(dst), CB_P(src), (uint64_t)first << 32 | (uint32_t)n, (uint64_t)dim) || n == 0)
        return;
    char err[HR_ERRLEN];
    cb_fail(c, c->K->gather_rows(dst, src, c->d_logit_tok + first, n, dim, c->stream, err, sizeof err), err);
}

static void cb_free(struct backend *be)
{
    struct cuda_backend *c = cb_of(be);
    if (!c)
        return;
    cuda_copier_free(c->copier);
    cuda_dev_free(c->xb);
    cuda_dev_free(c->sw);
    cuda_dev_free(c->gemm_work);
    cuda_dev_free(c->tickets);
    cuda_dev_free(c->attn_work);
    cuda_dev_free(c->attn_tickets);
    for (int i = 0; c->profile && i < CB_OPS; i++)
        if (c->prof_ns[i])
            log_info("cuda profile: %-14s %10.3f ms  %8lld calls  %8.1f us each", cb_op_names[i],
                     (double)c->prof_ns[i] / 1e6, (long long)c->prof_n[i],
                     c->prof_n[i] ? (double)c->prof_ns[i] / 1e3 / (double)c->prof_n[i] : 0.0);
    if (c->n_captured + c->n_replayed + c->n_eager)
        log_info("cuda: decode steps: %llu as graphs (%llu captured, %llu replays), %llu op by op",
                 (unsigned long long)(c->n_captured + c->n_replayed), (unsigned long long)c->n_captured,
                 (unsigned long long)c->n_replayed, (unsigned long long)c->n_eager);
    cb_graphs_drop(c);
    cuda_dev_stream_destroy(c->stream);
    cuda_dev_free(c->area.dev);
    cuda_dev_host_free(c->area.host);
    cuda_dev_host_free(c->host);
    cb_sampling_free(c);
    free(c);
    be->impl = NULL;
}

static const struct backend_ops cuda_ops = {
    .graph_rows = cb_graph_rows,
    .reserve = cb_reserve,
    .alloc = cb_alloc,
    .mem_free = cb_mem_free,
    .kv_alloc = cb_kv_alloc,
    .kv_free = cb_kv_free,
    .bind_weights = cb_bind_weights,
    .unbind_weights = cb_unbind_weights,
    .mem_info = cb_mem_info,
    .kv_export = cb_kv_export,
    .kv_import = cb_kv_import,
    .host_alloc = cb_host_alloc,
    .host_free = cb_host_free,
    .kv_export_async = cb_kv_export_async,
    .kv_import_async = cb_kv_import_async,
    .kv_copies_wait = cb_kv_copies_wait,
    .begin_step = cb_begin_step,
    .sync = cb_sync,
    .submit = cb_submit,
    .to_host = cb_to_host,
    .embed = cb_embed,
    .matmul = cb_matmul,
    .matmul_add = cb_matmul_add,
    .matmul_multi = cb_matmul_multi,
    .matmul_swiglu = cb_matmul_swiglu,
    .rmsnorm = cb_rmsnorm,
    .attn_prep = cb_attn_prep,
    .attention = cb_attention,
    .moe_work_bytes = cb_moe_work_bytes,
    .moe = cb_moe,
    .gather_logit_rows = cb_gather_logit_rows,
    .sample = cb_sample,
    .to_host_rows = cb_to_host_rows,
    .free = cb_free,
};

enum hr_status backend_cuda_init(struct backend *be, const struct backend_opts *o, char *err, size_t errlen)
{
    memset(be, 0, sizeof *be);
    if (o->compute && strcmp(o->compute, "bf16") != 0)
        return hr_err(err, errlen, HR_ERR_INVALID, "--device cuda computes in bf16 (not --compute %s)", o->compute);
    struct cuda_backend *c = calloc(1, sizeof *c);
    if (!c)
        return hr_err(err, errlen, HR_ERR_NOMEM, "cuda backend: out of memory");
    enum hr_status st = cuda_dev_init(0, &c->info, err, errlen);
    const char *want = o->kernel && *o->kernel && strcmp(o->kernel, "auto") ? o->kernel
                       : c->info.major == 9                               ? "sm90a"
                                                                          : "sm80";
    if (st == HR_OK && !(c->K = cuda_kernels_pick(want, c->info.major, c->info.minor, err, errlen)))
        st = HR_ERR_UNSUPPORTED;
    if (st == HR_OK)
        st = c->K->prepare(c->info.sm_count, err, errlen);
    if (st == HR_OK)
        st = cuda_dev_stream_create(&c->stream, err, errlen);
    if (st == HR_OK)
        st = cuda_copier_init(&c->copier, c->stream, err, errlen); /* ordered with the kernels' stream */
    if (st != HR_OK) {
        if (c->stream)
            cuda_dev_stream_destroy(c->stream);
        free(c);
        return st;
    }
    const char *prof = getenv("HEARTH_CUDA_PROFILE"), *sub = getenv("HEARTH_CUDA_SUBMIT"),
               *early = getenv("HEARTH_CUDA_REPLAY_EARLY"), *pow2 = getenv("HEARTH_CUDA_GRAPH_POW2");
    c->profile = prof && strcmp(prof, "1") == 0;
    c->wait_always = sub && strcmp(sub, "0") == 0;
    c->replay_late = early && strcmp(early, "0") == 0;
    c->graph_pow2 = pow2 && strcmp(pow2, "1") == 0;
    c->prof_op = -1;
    c->graphs_on = !o->enforce_eager && !c->profile; /* a graph's ops cannot be timed one by one */
    be->ops = &cuda_ops;
    be->impl = c;
    be->n_threads = o->n_threads;
    be->bf16_compute = true;
    /* the kernel variant, the kernels' revision, the runtime (its libraries' code changes
     * bits), the SM count (the K splits depend on it) and GEMM settings other than the
     * defaults */
    snprintf(be->name, sizeof be->name, "cuda-%s-k%d-rt%d-sm%d%s", c->K->name, CUDA_KERNELS_REV,
             c->info.runtime_version, c->info.sm_count, c->K->gemm_tag());
    snprintf(be->device, sizeof be->device, "cuda");
    snprintf(be->variant, sizeof be->variant, "%s", c->K->name);
    snprintf(be->isa, sizeof be->isa, "%s", c->K->name);
    return HR_OK;
}

#endif
