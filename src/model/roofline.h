/* The roofline of a forward step and of the throughput workload: a step cannot take
 * less than the bytes it must read over the memory's read bandwidth, nor less than
 * its flops over the peak arithmetic rate; its roofline is the larger of the two.
 *
 * Bytes of a step: every weight its rows use, once (a dense model: all of them; an
 * MoE layer: attention, router and lm_head, and the experts the rows touch, taken as
 * the expected number of distinct experts among rows x top_k uniform draws), plus
 * each row's K and V over its context.  Flops: the rows' matmuls (their top_k
 * experts), an lm_head row for each row that samples, attention over each row's
 * context.  The embedding gather and the norms are left out (a lower bound). */
#ifndef HEARTH_MODEL_ROOFLINE_H
#define HEARTH_MODEL_ROOFLINE_H

#include <stddef.h>

#include "model/model.h"

struct roofline {
    double fixed_bytes;  /* weights every step reads: attention, dense MLPs, routers, lm_head */
    double expert_bytes; /* one expert's gate + up + down, summed over the MoE layers */
    int n_experts;       /* experts of an MoE layer (0: dense) */
    int top_k;           /* experts a token runs */
    double kv_pos_bytes; /* K and V of one position, every layer */
    double tok_flops;    /* matmul flops of one token through the layers (its top_k experts) */
    double lm_flops;     /* one lm_head row */
    double attn_flops;   /* one (query, key) pair: q.k and p.v over every head and layer */
};

/* The model's costs; kv_pos_bytes: what the KV pool stores a position. */
void roofline_of(const struct model *m, size_t kv_pos_bytes, struct roofline *r);

/* The expected number of distinct experts among rows tokens' top_k choices, each token
 * choosing top_k distinct experts uniformly: E (1 - (1 - k/E)^rows). */
double roofline_experts(int n_experts, int top_k, double rows);

/* Weight bytes a step of rows tokens reads: the fixed ones and the experts they touch
 * (rows = 1: what one decoded token reads). */
double roofline_weight_bytes(const struct roofline *r, double rows);

/* Seconds a step can take at best: bytes over gbs (GB/s), flops over tflops. */
double roofline_step_s(double bytes, double flops, double gbs, double tflops);

/* A decode step of rows rows, each sampling, whose contexts (the positions each row
 * attends, itself included) sum to ctx_sum. */
double roofline_decode_s(const struct roofline *r, int rows, double ctx_sum, double gbs, double tflops);

/* c requests of prompt prompt tokens and out generated tokens, all at once: the
 * prompts (every weight read at least once, one sampled row each), then out - 1
 * decode steps of c rows at contexts prompt + 1 .. prompt + out - 1. */
double roofline_workload_s(const struct roofline *r, int c, int prompt, int out, double gbs, double tflops);

#endif
