/* The weights of a Qwen3 / Qwen3-MoE checkpoint, bound to the config: every tensor's
 * presence, shape and dtype is checked before use.  Matrices stay in their stored
 * dtype in the mmap'd files; norm vectors are widened to f32 at load. */
#ifndef HEARTH_MODEL_WEIGHTS_H
#define HEARTH_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/config.h"
#include "model/safetensors.h"

/* A row-major matrix [rows, cols] in its stored dtype (F32, BF16 or F16). */
struct weights_mat {
    enum safetensors_dtype dtype;
    int64_t rows;
    int64_t cols;
    const void *data;      /* [rows, cols]; NULL for a dummy matrix */
    uint64_t fill_seed;    /* --load-format dummy: nonzero, element i is
                            * dummy_fill_bf16(fill_seed, i, DUMMY_FILL_SCALE) and the
                            * backend generates it where it keeps the weights */
};

struct weights_expert {
    struct weights_mat gate;   /* [moe_inter, hidden] */
    struct weights_mat up;     /* [moe_inter, hidden] */
    struct weights_mat down;   /* [hidden, moe_inter] */
};

struct weights_layer {
    float *attn_norm;          /* [hidden] */
    float *ffn_norm;           /* [hidden] (post_attention_layernorm) */
    float *q_norm;             /* [head_dim] */
    float *k_norm;             /* [head_dim] */
    struct weights_mat q;      /* [n_heads * head_dim, hidden] */
    struct weights_mat k;      /* [n_kv_heads * head_dim, hidden] */
    struct weights_mat v;      /* [n_kv_heads * head_dim, hidden] */
    struct weights_mat o;      /* [hidden, n_heads * head_dim] */
    bool is_moe;
    /* dense MLP (!is_moe) */
    struct weights_mat gate;   /* [inter, hidden] */
    struct weights_mat up;     /* [inter, hidden] */
    struct weights_mat down;   /* [hidden, inter] */
    /* MoE (is_moe) */
    struct weights_mat router;        /* [n_experts, hidden] */
    struct weights_expert *experts;   /* [n_experts] */
    int n_experts;                    /* experts' length (0 for a dense layer) */
};

struct weights {
    struct safetensors st;
    struct weights_mat embed;     /* [vocab, hidden] */
    struct weights_mat lm_head;   /* [vocab, hidden]; the embedding when tied */
    float *final_norm;            /* [hidden] */
    struct weights_layer *layers; /* [n_layers] */
    int n_layers;
    int64_t n_params;             /* distinct parameters (tied embedding counted once) */
    int64_t weight_bytes;         /* bytes of the tensors used */
    int64_t n_active_params;      /* parameters one token uses (MoE: top-k experts only) */
    bool dummy;                   /* --load-format dummy: no files, every matrix a fill seed */
    bool host_copy;               /* made by weights_host_materialize (its matrices generated) */
    bool experts_fused;           /* experts stored as transformers 5's fused gate_up_proj / down_proj */
    int n_owned;
    void **owned;                 /* [n_owned] aligned copies of tensors stored misaligned in a file */
};

/* Loads and checks every tensor of the model in dir against cfg.  Errors name the
 * file and the tensor. */
enum hr_status weights_load(struct weights *w, const struct model_config *cfg, const char *dir,
                            char *err, size_t errlen);
/* --load-format dummy: the tensors cfg needs, without files.  Matrices are bf16 with
 * data NULL and a fill seed (from the tensor's name and seed); norms are ones.  A
 * backend binding them generates the values (weights_dummy_fill on the host). */
enum hr_status weights_load_dummy(struct weights *w, const struct model_config *cfg, uint64_t seed, char *err,
                                  size_t errlen);
/* dst[i] = the bf16 bits of element first + i of dummy matrix m, for i < n. */
void weights_dummy_fill(const struct weights_mat *m, uint16_t *dst);
/* A copy of src whose dummy matrices are generated into host memory (a backend that
 * computes on the host binds this); everything else is shared with src, which must
 * outlive it.  weights_host_free frees the copy and what it generated. */
enum hr_status weights_host_materialize(const struct weights *src, struct weights **out, char *err, size_t errlen);
void weights_host_free(struct weights *w);
void weights_free(struct weights *w);

#endif
