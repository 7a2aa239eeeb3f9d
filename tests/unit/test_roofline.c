/* roofline: the costs of the two bf16 fixtures, counted by hand from their configs
 * (below), and the step and workload bounds at rates where the answer is plain
 * arithmetic. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "model/model.h"
#include "model/roofline.h"
#include "test.h"

static char err[HR_ERRLEN];

/* The fixture's costs (kv_pos_bytes as given); the model is freed at once. */
static int costs(const char *name, size_t kv_pos_bytes, struct roofline *r)
{
    char dir[1024];
    struct model m;
    snprintf(dir, sizeof dir, "%s/fixtures/%s", test_data_dir(), name);
    enum hr_status st = model_load(&m, dir, err, sizeof err);
    CHECK_MSG(st == HR_OK, "%s: %s", name, err);
    if (st != HR_OK)
        return 0;
    roofline_of(&m, kv_pos_bytes, r);
    model_free(&m);
    return 1;
}

static int near(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(1.0, fabs(b));
}

/* qwen3moe-tiny-bf16: hidden 64, 4 q heads and 2 KV heads of 32, 2 layers (layer 1
 * dense: mlp_only_layers), 8 experts of moe_intermediate 32, top 2, vocab 512, an
 * lm_head of its own.  A layer's attention: q [128, 64] + k [64, 64] + v [64, 64] +
 * o [64, 128] = 24,576 weights = 49,152 bytes; the dense MLP: 3 x [128, 64] = 24,576
 * weights; the router [8, 64] = 512; an expert 3 x 32 x 64 = 6,144; the lm_head
 * [512, 64] = 32,768. */
static void test_moe_fixture(void)
{
    struct roofline r;
    if (!costs("qwen3moe-tiny-bf16", 512, &r))
        return;
    CHECK_MSG(near(r.fixed_bytes, 2 * 49152.0 + 1024 + 49152 + 65536), "fixed bytes %.0f", r.fixed_bytes);
    CHECK_MSG(near(r.expert_bytes, 12288.0), "expert bytes %.0f", r.expert_bytes);
    CHECK(r.n_experts == 8 && r.top_k == 2);
    /* 2 x 49,152 (attention) + 1,024 (router) + 2 x 12,288 (two experts) + 49,152 (dense MLP) */
    CHECK_MSG(near(r.tok_flops, 98304.0 + 1024 + 24576 + 49152), "token flops %.0f", r.tok_flops);
    CHECK_MSG(near(r.lm_flops, 65536.0), "lm_head flops %.0f", r.lm_flops);
    CHECK_MSG(near(r.attn_flops, 4.0 * 4 * 32 * 2), "attention flops %.0f", r.attn_flops);
    CHECK(near(r.kv_pos_bytes, 512.0));
    /* one token reads the fixed weights and its two experts: 214,016 + 2 x 12,288 */
    CHECK_MSG(near(roofline_weight_bytes(&r, 1), 238592.0), "weights a token %.0f", roofline_weight_bytes(&r, 1));

    /* one row at context 10, 1 GB/s and 1 TFLOP/s: bytes 214,016 + 2 x 12,288 + 10 x 512
     * = 243,712 (243.712 us) against 238,592 + 10,240 flops (0.25 us) */
    CHECK_MSG(near(roofline_decode_s(&r, 1, 10, 1, 1), 243712e-9), "decode %.9g", roofline_decode_s(&r, 1, 10, 1, 1));
    /* a rate of 1e-6 TFLOP/s: 248,832 flops take 0.248832 s, the bytes at 1,000 GB/s far less */
    CHECK(near(roofline_decode_s(&r, 1, 10, 1000, 1e-6), 0.248832));
    /* two requests of 3 + 2 tokens, bytes only: the prompts read 214,016 + 12,288 x
     * 8 (1 - 0.75^6) = 294,824 bytes; the one decode step 214,016 + 12,288 x 3.5 + 8 x
     * 512 = 261,120 */
    CHECK_MSG(near(roofline_workload_s(&r, 2, 3, 2, 1, 1e9), 555944e-9), "workload %.9g",
              roofline_workload_s(&r, 2, 3, 2, 1, 1e9));

}

/* qwen3-tiny-bf16: the same attention and dense MLP in both layers, the lm_head tied
 * to the embedding [512, 64]. */
static void test_dense_fixture(void)
{
    struct roofline r;
    if (!costs("qwen3-tiny-bf16", 0, &r))
        return;
    CHECK_MSG(near(r.fixed_bytes, 2 * (49152.0 + 49152) + 65536), "fixed bytes %.0f", r.fixed_bytes);
    CHECK(r.expert_bytes == 0 && r.n_experts == 0 && r.top_k == 0);
    CHECK_MSG(near(r.tok_flops, 2 * (49152.0 + 49152)), "token flops %.0f", r.tok_flops);
    /* 8 rows at contexts summing to 100, compute-bound at 1e-6 TFLOP/s: 8 x (196,608 +
     * 65,536) + 100 x 1,024 = 2,199,552 flops */
    CHECK(near(roofline_decode_s(&r, 8, 100, 1e6, 1e-6), 2.199552));
}

static void test_experts(void)
{
    CHECK(roofline_experts(8, 2, 1) == 2.0);      /* one token: its own k */
    CHECK(near(roofline_experts(8, 2, 2), 3.5)); /* 8 (1 - 0.75^2) */
    CHECK(roofline_experts(4, 4, 3) == 4.0);      /* every expert */
    CHECK(roofline_experts(8, 2, 0) == 0.0 && roofline_experts(0, 2, 5) == 0.0);
    double prev = 0;
    for (int rows = 1; rows <= 4096; rows *= 2) { /* never falls as rows grow, never past E */
        double e = roofline_experts(128, 8, rows);
        CHECK_MSG(e >= prev && e <= 128.0, "%d rows: %.3f", rows, e);
        prev = e;
    }
    CHECK(roofline_experts(128, 8, 4096.0 * 1048576.0) == 128.0); /* a prompt batch past INT_MAX rows */
}

int main(void)
{
    TEST_RUN(test_experts);
    TEST_RUN(test_moe_fixture);
    TEST_RUN(test_dense_fixture);
    TEST_END();
}
