/* The CUDA kernels behind the backend, as a C ABI over device pointers.
 *
 * Each kernel variant (sm90a: Hopper; sm80: portable, PTX for compute_80 that the
 * driver compiles for any later card) is the same sources compiled twice, each copy
 * in its own C++ namespace, and reached through its table below; both load on an
 * H200, so both are tested there.  A variant is part of the prefix-cache namespace.
 *
 * Determinism (DESIGN.md "Determinism"): every output element has one reduction
 * order that depends only on the weight shape (GEMM: N, K and the card's SM count)
 * or the token's own position (attention), never on the number of rows, their
 * neighbours or where KV blocks lie.  No reduction uses atomics.
 *
 * Every function validates its arguments and reports a launch failure as a status
 * with a message; work is queued on `stream` (NULL: the default stream). */
#ifndef HEARTH_KERNELS_CUDA_CUDA_KERNELS_H
#define HEARTH_KERNELS_CUDA_CUDA_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "base/status.h"
#include "kernels/dsample.h"

/* What the GEMM does with y[m, n] = x[m, k] . w[n, k]^T. */
enum cuda_epi {
    CUDA_EPI_STORE_F32,   /* y (float [m, n]) = acc */
    CUDA_EPI_ADD_F32,     /* y (float [m, n]) = y + acc: the residual add */
    CUDA_EPI_STORE_BF16,  /* y (bf16 [m, n]) = bf16(acc) */
    CUDA_EPI_SWIGLU_BF16, /* y (bf16 [m, n]) = bf16(silu(x . w^T) * (x . w_up^T)) */
};

#define CUDA_GEMM_SEGS 3
/* Rows of the TMA tile's x copies: a buffer of whole boxes lets cuda_gemm.x_rows pay */
#define CUDA_GEMM_X_BOX 64

struct cuda_gemm {
    enum cuda_epi epi;
    void *y;              /* [m, n], float or bf16 by epi */
    float *y_f32;         /* SwiGLU only: also y widened to float [m, n] (exact), or NULL */
    const uint16_t *x;    /* bf16 [m, k] */
    const uint16_t *w;    /* bf16 [n, k] (SwiGLU: the gate) */
    const uint16_t *w_up; /* bf16 [n, k]: SwiGLU's up, else NULL */
    int m, n, k;          /* k a multiple of 64, n even */
    int x_rows;           /* rows x's buffer holds (0: m; else at least m): the TMA tile's last
                           * x copy reads rows past m up to the next multiple of
                           * CUDA_GEMM_X_BOX where the buffer has them (they reach only output rows past m, never
                           * stored), rather than have the copy fill zeros, which is slow */
    void *work;           /* gemm_workspace bytes (the K split's partial sums) */
    size_t work_bytes;
    int *tickets;         /* gemm_tickets counters, zeroed once when allocated: every
                           * launch leaves them zero, so shapes may share them */
    size_t n_tickets;
    /* More products of the same x in the same launch (q, k and v): y_more[i] [m,
     * n_more[i]] = x . w_more[i]^T, after y's columns in the tile order; the tile shape
     * and the K split are those of the summed width (gemm_workspace and gemm_tickets of
     * n + the more_n).  Not with SwiGLU. */
    int n_more;           /* 0 .. CUDA_GEMM_SEGS - 1 */
    const uint16_t *more_w[CUDA_GEMM_SEGS - 1];
    void *more_y[CUDA_GEMM_SEGS - 1];
    int more_n[CUDA_GEMM_SEGS - 1];
};

struct cuda_rmsnorm {
    float *y_f32;          /* [rows, dim] or NULL */
    uint16_t *y_bf16;      /* bf16 [rows, dim] or NULL */
    const float *x;        /* [*, dim] */
    const int32_t *x_rows; /* [rows]: row i reads x row x_rows[i] (a gather), or NULL: row i */
    const float *w;        /* [dim] */
    int rows, dim;
    float eps;
};

struct cuda_embed {
    float *out;            /* [n_tok, dim] */
    const uint16_t *table; /* bf16 [vocab, dim] */
    const int32_t *tokens; /* [n_tok]; an id outside the vocabulary gives a zero row */
    int n_tok, dim, vocab;
};

/* The paged, layer-major KV store in device memory, bf16, as the CPU's:
 * [n_layers, n_blocks, 2 (K, V), n_kv_heads, block_size, head_dim]. */
struct cuda_kv {
    uint16_t *slab;
    int n_layers, n_blocks, n_kv_heads, block_size, head_dim;
};

/* The step's batch as the attention kernels read it (device arrays, uploaded once a
 * step).  A query block is up to cuda_attn_block_tokens(group) consecutive tokens of
 * one row; how tokens are cut into blocks changes no output bit. */
struct cuda_attn_batch {
    int n_tok;
    const int32_t *positions; /* [n_tok] position of each token */
    const int64_t *slots;     /* [n_tok] KV slot of each token (block * block_size + offset) */
    const int32_t *tok_row;   /* [n_tok] batch row of each token */
    const int32_t *row_table; /* [n_rows] offset of each row's block table in tables */
    const int32_t *tables;    /* the rows' block tables, one after another */
    int n_qblocks;
    const int32_t *qblocks;   /* [n_qblocks, 2]: first token, token count */
    int max_kv;               /* the largest position + 1 among the tokens */
    int max_qtok;             /* the most tokens in a query block (0: not known) */
    int n_dec;                /* the first n_dec query blocks have at most CUDA_ATTN_DEC_ROWS rows (tokens x
                               * query heads a KV head) each: they take the decode walk (0: none marked) */
};

/* q/k norm, RoPE and the K/V write of one layer, one block per token:
 * q and k rows become rope(rmsnorm(row) * norm); cos/sin come from the position alone
 * (double precision, rounded to float); k and v are stored at the tokens' slots. */
struct cuda_attn_prep {
    float *q;                   /* [n_tok, n_heads, head_dim], rewritten in place */
    const float *k, *v;         /* [n_tok, n_kv_heads, head_dim] */
    const float *q_norm, *k_norm; /* [head_dim] */
    float eps;
    double rope_theta;
    int n_heads, layer;
    struct cuda_kv kv;
    const struct cuda_attn_batch *b;
};

struct cuda_attention {
    float *out_f32;       /* [n_tok, n_heads, head_dim] or NULL */
    uint16_t *out_bf16;   /* bf16 [n_tok, n_heads, head_dim] or NULL */
    const float *q;       /* [n_tok, n_heads, head_dim] */
    int n_heads, layer;
    float scale;
    struct cuda_kv kv;
    const struct cuda_attn_batch *b;
    void *work;           /* attn_workspace bytes */
    size_t work_bytes;
    int *tickets;         /* [n_qblocks, n_kv_heads], zero between launches (each leaves them zero): needed
                           * when a row has more than one split (max_kv > CUDA_ATTN_SPLIT) */
    size_t n_tickets;
    int chunk;            /* splits a block of a prompt's query block walks one after another (0: the launch
                           * picks); a launch shape, the same bits whatever it is */
    int q_smem;           /* a prompt's walk reads q from shared memory, three blocks an SM (1), or holds it in
                           * registers, two (-1); 0: HEARTH_CUDA_ATTN_QS.  The same bits either way */
};

/* Copies every layer of block pairs[i][0] to block pairs[i][1]; no destination may
 * also be a source in the same list. */
struct cuda_block_copy {
    struct cuda_kv kv;
    const int32_t *pairs; /* device [n, 2]: src, dst */
    int n;
};

/* The MoE block of one layer (moe.cu): h += the rank-order weighted sum of the top-k
 * experts' SwiGLU MLPs of xn, routed, sorted and computed on the device. */
struct cuda_moe {
    float *h;                  /* [n_tok, hidden]: += the block's output */
    const float *xn;           /* [n_tok, hidden]: the normed input */
    const uint16_t *router;    /* bf16 [n_experts, hidden] (computed in f32) */
    const uint16_t *gate, *up; /* bf16 [n_experts, inter, hidden] */
    const uint16_t *down;      /* bf16 [n_experts, hidden, inter] */
    int n_tok, hidden, inter, n_experts, top_k;
    int norm_topk;             /* renormalise the top-k weights to sum 1 */
    void *work;                /* moe_workspace bytes */
    size_t work_bytes;
    int32_t *trace;            /* host [n_tok, top_k]: the experts chosen (a synchronous copy), or NULL */
};
#define CUDA_MOE_MAX_EXPERTS 1024
#define CUDA_MOE_MAX_HIDDEN 6144 /* the router keeps 8 tokens' f32 rows in shared memory */

/* The kernels' arithmetic revision, in the backend's name (so in the prefix cache's
 * namespace): raise it whenever a kernel's sums change, so that KV kept by an older
 * build (the disk tier) is never taken for this one's. */
#define CUDA_KERNELS_REV 4 /* 4: the narrow tiles: no K split where 16-wide column tiles fill the SMs */

/* Sampling on the device (sample.cu; kernels/dsample.h defines the arithmetic): one
 * block per row, each row's result a function of its own inputs alone. */
struct cuda_sample {
    const float *logits;             /* [*, vocab]: row rows[i].logit_row */
    int vocab, n_rows;
    const struct dsample_row *rows;  /* device [n_rows] */
    const struct dsample_mod *mods;  /* device [n_mods]: the rows' mod_first index it */
    int n_mods;
    const float *biases;             /* device [n_biases]: the mods' bias_first index it */
    int n_biases;
    float *work;                     /* device [n_rows, cuda_sample_stride(vocab)]: each row's logits
                                      * after bias and penalties [vocab], then what its slices
                                      * found [CUDA_SAMPLE_META] */
    struct dsample_out *out;         /* device [n_rows] */
    int plain_draws, plain_topk;     /* 1: some row is a plain draw / plain top-k draw (dsample.h,
                                      * copies 1): their slice kernels are launched (else those
                                      * rows walk their whole row, as others do) */
    int plain_lp;                    /* 1: some row's logprobs are plain (dsample_plain_lp): the
                                      * logprobs' slice kernel is launched */
    int mod_rows;                    /* 1: some row has bias or penalties: their values are
                                      * written in slices (dsample_sliceable's copies) */
};
/* Sets a's hints from the launch's a->n_rows rows as the host holds them (rows): what
 * they ask of the slice kernels. */
static inline void cuda_sample_hints(struct cuda_sample *a, const struct dsample_row *rows)
{
    for (int i = 0; i < a->n_rows; i++) {
        const struct dsample_row *r = &rows[i];
        a->plain_draws |= dsample_plain_draw(r, a->vocab, 1);
        a->plain_topk |= dsample_plain_topk(r, a->vocab, 1);
        a->plain_lp |= dsample_plain_lp(r, 1);
        a->mod_rows |= r->n_mods > 0;
    }
}

/* The words a work row keeps for its slices' maxima, masses and lists. */
#define CUDA_SAMPLE_META 16384
#ifdef __CUDACC__
#define CUDA_SAMPLE_HD __host__ __device__
#else
#define CUDA_SAMPLE_HD
#endif
static inline CUDA_SAMPLE_HD size_t cuda_sample_stride(int vocab)
{
    return (((size_t)vocab + 3) & ~(size_t)3) + CUDA_SAMPLE_META;
}

/* Positions per KV split of attention: a row's walk is cut at multiples of this
 * (absolute positions), and the pieces combined in order. */
#define CUDA_ATTN_SPLIT 256
/* Query rows (tokens x the query heads of one KV head) of one attention block: four
 * m16 tiles of the tensor cores. */
#define CUDA_ATTN_ROWS 64
/* Query rows of a decode block (the transposed walk's eight mma columns): a decode
 * token of up to 8 query heads a KV head, or a few tokens of fewer. */
#define CUDA_ATTN_DEC_ROWS 8

struct cuda_kernels {
    const char *name; /* "sm90a" or "sm80" */
    /* Once per process and device, before any other call (kernel attributes). */
    enum hr_status (*prepare)(int sm_count, char *err, size_t errlen);
    size_t (*gemm_workspace)(int m, int n, int k, enum cuda_epi epi);
    size_t (*gemm_tickets)(int m, int n, int k, enum cuda_epi epi);
    /* The tile of a shape ("64x64": BM x BK; BN is 128), a function of (n, k, epi)
     * alone. */
    const char *(*gemm_tile)(int n, int k, enum cuda_epi epi);
    /* The K split of a shape (1: none): a function of (n, k, epi) and the SM count. */
    int (*gemm_split)(int n, int k, enum cuda_epi epi);
    enum hr_status (*gemm)(const struct cuda_gemm *g, void *stream, char *err, size_t errlen);
    enum hr_status (*rmsnorm)(const struct cuda_rmsnorm *a, void *stream, char *err, size_t errlen);
    enum hr_status (*embed)(const struct cuda_embed *a, void *stream, char *err, size_t errlen);
    enum hr_status (*attn_prep)(const struct cuda_attn_prep *a, void *stream, char *err, size_t errlen);
    size_t (*attn_workspace)(int n_tok, int n_heads, int head_dim, int max_kv);
    enum hr_status (*attention)(const struct cuda_attention *a, void *stream, char *err, size_t errlen);
    enum hr_status (*block_copy)(const struct cuda_block_copy *a, void *stream, char *err, size_t errlen);
    /* dst[i] = bf16(src[i]) for i < n (round to nearest even): a GEMM's input. */
    enum hr_status (*to_bf16)(uint16_t *dst, const float *src, size_t n, void *stream, char *err, size_t errlen);
    /* dst[i] = src[rows[i]] for i < n: rows of dim floats (device rows[n]). */
    enum hr_status (*gather_rows)(float *dst, const float *src, const int32_t *rows, int n, int dim, void *stream,
                                  char *err, size_t errlen);
    /* Bytes of work memory the MoE block needs for n_tok tokens of a shape. */
    size_t (*moe_workspace)(int n_tok, int hidden, int inter, int n_experts, int top_k);
    enum hr_status (*moe)(const struct cuda_moe *a, void *stream, char *err, size_t errlen);
    enum hr_status (*sample)(const struct cuda_sample *a, void *stream, char *err, size_t errlen);
    /* After prepare: "" with the default GEMM settings, else a short tag of those that
     * change its sums (a forced tile, the split's aims): part of the backend's name, so
     * a prefix cache (the disk tier too) never mixes KV of different settings. */
    const char *(*gemm_tag)(void);
};

extern const struct cuda_kernels cuda_kernels_sm90a;
extern const struct cuda_kernels cuda_kernels_sm80;

/* A variant by name ("sm90a", "sm80"), or NULL with a message when the name is
 * unknown or the device (compute capability major.minor) cannot run it. */
const struct cuda_kernels *cuda_kernels_pick(const char *name, int major, int minor, char *err, size_t errlen);

/* Tokens per attention query block for `group` query heads per KV head. */
static inline int cuda_attn_block_tokens(int group)
{
    return group >= CUDA_ATTN_ROWS ? 1 : CUDA_ATTN_ROWS / group;
}

/* Appends the query blocks of a row whose query_len tokens start at token tok0 to qb
 * ([*, 2]: first token, count) from index q: its decode blocks (at most
 * CUDA_ATTN_DEC_ROWS rows) when dec, else its others; returns the new count.  A batch
 * lays every row's decode blocks first (n_dec of them), then every row's others. */
static inline int cuda_attn_row_qblocks(int32_t *qb, int q, int tok0, int query_len, int group, bool dec)
{
    int bt = cuda_attn_block_tokens(group);
    for (int i = 0; i < query_len; i += bt) {
        int n = query_len - i < bt ? query_len - i : bt;
        if ((n * group <= CUDA_ATTN_DEC_ROWS) != dec)
            continue;
        qb[2 * q] = tok0 + i;
        qb[2 * q + 1] = n;
        q++;
    }
    return q;
}

#ifdef __cplusplus
}
#endif

#endif
