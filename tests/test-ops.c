/* test-ops: every backend op, every type, ref (float64, tests/ref.c) <-> cpu (<-> cuda once it lands).
 *
 * Cases live in one table {op, types, shape, params, input range, tolerance}. Inputs use a fixed seed
 * and physical ranges (attention scores large enough to need max-subtraction, MoE logits spread over
 * ±8); outputs are pre-filled with NaN so an unwritten element fails. Floats compare by NMSE against
 * the reference; the quantised dot products also per element against Σ|w·x| (exact integer sums, so
 * ~1e-6 relative), against the scalar variant, and bit-for-bit / per element against the real
 * llama.cpp (libggml-base quantize_row_*_ref, libggml-cpu vec_dot) when `make peer` installed it
 * (without it a T_SKIP_PEER: a failure under INFER_REQUIRE_PEER=1).
 * Fused ops (SwiGLU and residual epilogues, MoE FFN) are compared with the unfused chain of CPU ops.
 *
 * Usage: test-ops [-o op1,op2] [-t q4_K,f16] [-b cpu|cuda] [-n threads] [--list]
 * Each case runs on every selected backend; without a CUDA device a CUDA case prints
 * `SKIP (no CUDA device)`.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"
#include "cpu/cpu.h"
#include "device.h"
#include "peer.h"
#include "quant.h"
#include "ref.h"
#include "t.h"

/* ---- types ---- */
static const struct { const char *name; int32_t id; } tops_types[] = {
    {"f32", INFER_TYPE_F32},   {"f16", INFER_TYPE_F16},       {"bf16", INFER_TYPE_BF16}, {"q8_0", INFER_TYPE_Q8_0},
    {"q4_0", INFER_TYPE_Q4_0}, {"q4_K", INFER_TYPE_Q4_K},     {"q5_K", INFER_TYPE_Q5_K}, {"q6_K", INFER_TYPE_Q6_K},
    {"iq4_nl", INFER_TYPE_IQ4_NL}, {"iq4_xs", INFER_TYPE_IQ4_XS}, {"q8_K", INFER_TYPE_Q8_K},
};
#define N_TYPES (int)(sizeof tops_types / sizeof tops_types[0])
#define ALL_W "f32,f16,bf16,q8_0,q4_0,q4_K,q5_K,q6_K,iq4_nl,iq4_xs"

static int32_t tops_type_id(const char *s, size_t len) {
    for (int i = 0; i < N_TYPES; i++)
        if (strlen(tops_types[i].name) == len && strncasecmp(tops_types[i].name, s, len) == 0) return tops_types[i].id;
    return -1;
}
static const char *tops_type_name(int32_t id) {
    for (int i = 0; i < N_TYPES; i++)
        if (tops_types[i].id == id) return tops_types[i].name;
    return "?";
}
static int tops_blck(int32_t t) {
    return t == INFER_TYPE_F32 || t == INFER_TYPE_F16 || t == INFER_TYPE_BF16 ? 1
           : t == INFER_TYPE_Q8_0 || t == INFER_TYPE_Q4_0 || t == INFER_TYPE_IQ4_NL ? 32 : 256;
}

/* ---- the case table ---- */
enum { GDN_T_GROUPED = 1, GDN_T_AB_GROUP = 2, GDN_T_SNAP = 4 }; /* gdn case flags (param[1]) */
struct tcase {
    const char *op;
    const char *types;  /* weight types ("" for float ops) */
    int64_t ne[4];      /* op shape, see the runners */
    int32_t param[2];
    float lo, hi;       /* input range */
    float fparam;       /* softmax / attention scale, rope max position */
    double tol;         /* NMSE bound (0: the runner's own checks) */
};

static const struct tcase tops_cases[] = {
    /* quantize: {n, rows} */
    {"quantize", "q8_0", {96, 5}, {0}, -3, 3, 0, 0},
    {"quantize", "q8_0,q8_K", {4096, 2}, {0}, -1, 1, 0, 0},
    {"quantize", "q8_K", {512, 3}, {0}, -20, 0.5f, 0, 0},
    /* mmv: {n_in, n_out, n_tokens}, param[0] = epilogue; n_in with a tail block for 32-blocks */
    {"mmv", ALL_W, {256 * 3, 37, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", "f32,f16,bf16,q8_0,q4_0,iq4_nl", {256 * 3 + 32, 19, 2}, {MMV_PLAIN}, -1, 1, 0, 0},
    /* float rows whose length leaves a tail for each SIMD width (32, then 16, then 1 at a time) */
    {"mmv", "f32,f16,bf16", {256 * 3 + 32 + 16 + 5, 11, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", ALL_W, {512, 64, 3}, {MMV_ADD}, -2, 2, 0, 0},
    {"mmv", ALL_W, {512, 40, 8}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mmv", ALL_W, {4096, 4096, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", "q4_K", {4096, 12288, 2}, {MMV_SWIGLU}, -1, 1, 0, 0},
    /* param[1] = 1: weights from lib/quant.c's quantisers (llama-quantize's values) instead of random bits */
    {"mmv", "q8_0,q4_0,q4_K,q5_K,q6_K,iq4_nl,iq4_xs", {2048, 48, 4}, {MMV_PLAIN, 1}, -1, 1, 0, 0},
    /* mm: {n_in, n_out, n_tokens} */
    {"mm", ALL_W, {512, 33, 19}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", "q4_K,q8_0,q6_K", {1024, 70, 64}, {MMV_ADD}, -1, 1, 0, 0},
    /* norm: {n, rows}, param[0] = with weight, param[1] = gated (gate rows 2n apart, like z slices) */
    {"norm", "", {4096, 3}, {1}, -4, 4, 0, 1e-10},
    {"norm", "", {33, 1}, {0}, -0.01f, 0.01f, 0, 1e-10},
    {"norm", "", {128, 7}, {1, 1}, -4, 4, 0, 1e-12},
    {"norm", "", {40, 2}, {0, 1}, -1, 1, 0, 1e-12},
    /* rope: {n_tokens, n_head, head_dim, n_rot}, param[0] = mode, fparam = max position */
    {"rope", "", {5, 4, 128, 128}, {ROPE_NORMAL}, -2, 2, 64, 1e-10},
    {"rope", "", {5, 4, 128, 128}, {ROPE_NEOX}, -2, 2, 64, 1e-10},
    {"rope", "", {3, 8, 256, 64}, {ROPE_NEOX}, -2, 2, 4000, 1e-7},
    {"rope", "", {2, 2, 64, 32}, {ROPE_NORMAL}, -2, 2, 30000, 1e-6},
    /* act: {n, rows}, param[0] = op, fparam = softmax scale */
    {"act", "", {1000, 3}, {ACT_SILU}, -20, 20, 0, 1e-10},
    {"act", "", {4097, 2}, {ACT_SWIGLU}, -8, 8, 0, 1e-10},
    {"act", "", {151, 4}, {ACT_SOFTMAX}, -100, 100, 1.0f, 1e-10},
    {"act", "", {64, 1}, {ACT_SOFTMAX}, -3, 3, 0.125f, 1e-10},
    /* param[1]: x2_stride (0: n); the two-input ops also run in place on x and on x2 */
    {"act", "", {1000, 3}, {ACT_SIGMOID_MUL}, -8, 8, 0, 1e-12},
    {"act", "", {256, 5}, {ACT_SIGMOID_MUL, 300}, -8, 8, 0, 1e-12},
    {"act", "", {300, 4}, {ACT_SIGMOID_MUL_ROW, 1}, -8, 8, 0, 1e-12},
    {"act", "", {64, 3}, {ACT_SIGMOID_MUL_ROW, 0}, -8, 8, 0, 1e-12},
    {"act", "", {4097, 2}, {ACT_ADD}, -8, 8, 0, 1e-12},
    /* ssm_conv: {n_ch, n_tokens, d_conv}, param[0] = snapshot ring size (0: none) */
    {"ssm_conv", "", {96, 1, 4}, {0}, -2, 2, 0, 1e-12},
    {"ssm_conv", "", {200, 2, 4}, {3}, -2, 2, 0, 1e-12},
    {"ssm_conv", "", {1000, 37, 4}, {4}, -2, 2, 0, 1e-12},
    {"ssm_conv", "", {64, 5, 2}, {5}, -2, 2, 0, 1e-12},
    /* gdn: {n_tokens, n_group, n_vhead, d_state}, param[0] = variant, param[1] = GDN_T_* flags */
    {"gdn", "", {1, 2, 4, 128}, {GDN_RECURRENT, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {2, 2, 6, 64}, {GDN_RECURRENT, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    {"gdn", "", {5, 2, 6, 32}, {GDN_RECURRENT, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {37, 2, 4, 128}, {GDN_RECURRENT, GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {65, 1, 3, 128}, {GDN_AUTO, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    {"gdn", "", {1, 2, 4, 128}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {2, 2, 6, 64}, {GDN_CHUNKED, GDN_T_GROUPED | GDN_T_AB_GROUP}, -1, 1, 0, 1e-11},
    {"gdn", "", {63, 2, 4, 128}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {64, 1, 2, 128}, {GDN_CHUNKED, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    {"gdn", "", {65, 2, 6, 128}, {GDN_CHUNKED, GDN_T_GROUPED | GDN_T_AB_GROUP}, -1, 1, 0, 1e-11},
    {"gdn", "", {130, 2, 4, 128}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {130, 1, 2, 64}, {GDN_CHUNKED, GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {70, 2, 4, 32}, {GDN_CHUNKED, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    /* attn: {n_tokens, n_head, n_head_kv, head_dim}, param[0] = n_kv, fparam = scale (0: 1/sqrt(d)) */
    {"attn", "", {1, 8, 2, 128}, {37}, -4, 4, 1.0f, 1e-9},
    {"attn", "", {5, 16, 2, 256}, {40}, -1, 1, 0, 1e-9},
    {"attn", "", {3, 4, 4, 64}, {3}, -16, 16, 1.0f, 1e-9},
    /* Q8_0 cells (types "q8_0"), param[1] = rot_k (then rot_v = 64): decode with GQA 4, a GQA-8 prefill
     * batch, a longer cache; without and with llama.cpp's Hadamard rotation */
    {"attn", "q8_0", {1, 8, 2, 128}, {37}, -4, 4, 1.0f, 1e-9},
    {"attn", "q8_0", {5, 16, 2, 256}, {40}, -1, 1, 0, 1e-9},
    {"attn", "q8_0", {7, 6, 2, 64}, {300}, -2, 2, 0, 1e-9},
    {"attn", "q8_0", {1, 8, 2, 128}, {37, 128}, -4, 4, 1.0f, 1e-9},
    {"attn", "q8_0", {5, 16, 2, 256}, {40, 256}, -1, 1, 0, 1e-9},
    {"attn", "q8_0", {7, 6, 2, 64}, {300, 64}, -2, 2, 0, 1e-9},
    /* embed: {n_embd, n_rows, n_tokens}; kv_store: {row, n_cells, n_tokens}, param[0] = rot (Q8_0) */
    {"embed", ALL_W, {512, 40, 7}, {0}, -1, 1, 0, 0},
    {"kv_store", "", {256, 20, 6}, {0}, -70000, 70000, 0, 0},
    {"kv_store", "", {40, 3, 3}, {0}, -1, 1, 0, 0},
    {"kv_store", "q8_0", {256, 20, 6}, {0}, -3, 3, 0, 0},
    {"kv_store", "q8_0", {64, 3, 3}, {0}, -1e4, 1e4, 0, 0},
    {"kv_store", "q8_0", {256, 20, 6}, {128}, -3, 3, 0, 0},
    {"kv_store", "q8_0", {512, 5, 3}, {64}, -1e4, 1e4, 0, 0},
    /* moe_route: {n_tokens, n_expert, n_expert_used}, param[0] = norm */
    {"moe_route", "", {3, 64, 8}, {1}, -8, 8, 0, 0},
    {"moe_route", "", {2, 128, 8}, {0}, -8, 8, 0, 0},
    {"moe_route", "", {1, 4, 1}, {1}, -1, 1, 0, 0},
    /* moe_ffn: {n_tokens, n_embd, n_ff, n_expert}, param[0] = n_expert_used, param[1] = down type */
    {"moe_ffn", "q4_K", {2, 256, 512, 4}, {2, INFER_TYPE_Q6_K}, -1, 1, 0, 1e-3},
    {"moe_ffn", "q8_0", {1, 128, 96, 3}, {3, INFER_TYPE_Q8_0}, -1, 1, 0, 1e-3},
    /* errors: hostile arguments get a status, never a crash; pool: {n, grain, threads} */
    {"errors", "", {0}, {0}, 0, 0, 0, 0},
    {"pool", "", {1000, 3, 7}, {0}, 0, 0, 0, 0},
    {"pool", "", {5, 16, 3}, {0}, 0, 0, 0, 0},
    {"moe_ffn", "f16", {3, 64, 64, 8}, {2, INFER_TYPE_F16}, -1, 1, 0, 1e-6}, /* x rounded to f16 */
    /* ---- mm through the prefill GEMM (lib/cpu/mm_kq.c: Q4_K, Q5_K, Q6_K on AVX-512 VNNI; other CPUs run the
     * dots): n_out not a multiple of its 16-row strips, strips split over the threads, token counts leaving
     * 1..7-token tails of its 8-token tiles; mm-vs-mmv then compares the GEMM with the row-by-row dots
     * (mmv's last chunk of 1..3 tokens) bit for bit. {n_in, n_out, n_tokens} ---- */
    {"mm", "q4_K,q5_K,q6_K", {768, 37, 17}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", "q4_K,q5_K,q6_K", {1280, 93, 11}, {MMV_PLAIN, 1}, -1, 1, 0, 0},
    {"mm", "q4_K,q5_K,q6_K", {2048, 300, 42}, {MMV_PLAIN}, -8, 8, 0, 0},
    {"mm", "q4_K,q5_K,q6_K", {512, 50, 13}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mm", "q4_K,q5_K,q6_K", {256, 16, 4}, {MMV_ADD}, -2, 2, 0, 0},
    /* ---- the multi-token dots (mmv.c *_xn: Q4_K, Q6_K on AVX-512 VNNI) that 2..8-token tiles take: real
     * quantised and random weights, odd block counts (Q4_K pairs blocks), every fused epilogue; the mm rows
     * leave 2- and 5-token mmv chunks that mm-vs-mmv compares bit for bit with the GEMM ---- */
    {"mmv", "q4_K,q6_K", {1280, 37, 2}, {MMV_PLAIN, 1}, -1, 1, 0, 0},
    {"mmv", "q4_K,q6_K", {768, 21, 3}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", "q4_K,q6_K", {2048, 40, 4}, {MMV_PLAIN, 1}, -1, 1, 0, 0},
    {"mmv", "q4_K,q6_K", {1280, 33, 5}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mmv", "q4_K,q6_K", {768, 19, 7}, {MMV_ADD, 1}, -2, 2, 0, 0},
    {"mm", "q4_K,q6_K", {1280, 45, 10}, {MMV_PLAIN, 1}, -1, 1, 0, 0},
    {"mm", "q4_K,q6_K", {768, 29, 13}, {MMV_PLAIN}, -1, 1, 0, 0},
};
#define N_CASES (int)(sizeof tops_cases / sizeof tops_cases[0])

/* ---- helpers ---- */
static uint64_t tops_rng = 0x9E3779B97F4A7C15ull;
static uint32_t tops_u32(void) {
    tops_rng ^= tops_rng << 13;
    tops_rng ^= tops_rng >> 7;
    tops_rng ^= tops_rng << 17;
    return (uint32_t)(tops_rng >> 16);
}
static float tops_unif(float lo, float hi) { return lo + (hi - lo) * (float)(tops_u32() & 0xffffff) / 16777216.0f; }
static void tops_fill(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = tops_unif(lo, hi);
}
static float *tops_nan(int64_t n) {
    float *y = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) y[i] = NAN;
    return y;
}
static void tops_put_f16(uint8_t *p, float v) {
    uint16_t h = blocks_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random weights: random bits with the block scales set to sane magnitudes (values ~0.01-0.1). */
static void *tops_weights(int32_t type, int64_t n_rows, int64_t n) {
    size_t rb = ref_row_bytes(type, n), bytes = rb * (size_t)n_rows;
    uint8_t *w = malloc(bytes);
    if (type == INFER_TYPE_F32 || type == INFER_TYPE_F16 || type == INFER_TYPE_BF16) {
        for (size_t i = 0; i < (size_t)(n * n_rows); i++) {
            float v = tops_unif(-0.1f, 0.1f);
            if (type == INFER_TYPE_F32) memcpy(w + 4 * i, &v, 4);
            if (type == INFER_TYPE_F16) tops_put_f16(w + 2 * i, v);
            if (type == INFER_TYPE_BF16) {
                uint16_t h = blocks_f32_to_bf16(v);
                memcpy(w + 2 * i, &h, 2);
            }
        }
        return w;
    }
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)tops_u32();
    size_t bb = ref_row_bytes(type, tops_blck(type));
    for (uint8_t *b = w; b < w + bytes; b += bb) {
        float s = tops_unif(0.5f, 2.0f) * (tops_u32() & 1 ? 1 : -1);
        switch (type) {
        case INFER_TYPE_Q8_0: tops_put_f16(b, s * 1e-3f); break;
        case INFER_TYPE_Q4_0:
        case INFER_TYPE_IQ4_NL: tops_put_f16(b, s * 1e-2f); break;
        case INFER_TYPE_Q4_K:
        case INFER_TYPE_Q5_K:
            tops_put_f16(b, fabsf(s) * 3e-4f);
            tops_put_f16(b + 2, fabsf(s) * 1e-3f);
            break;
        case INFER_TYPE_Q6_K: tops_put_f16(b + 208, s * 3e-4f); break;
        case INFER_TYPE_IQ4_XS: tops_put_f16(b, s * 3e-4f); break;
        }
    }
    return w;
}

/* Weights as llama-quantize makes them: gaussian-ish rows through quant_quantize_row. */
static void *tops_weights_quantised(int32_t type, int64_t n_rows, int64_t n) {
    size_t rb = ref_row_bytes(type, n);
    uint8_t *w = malloc(rb * (size_t)n_rows);
    float *row = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n; i++) row[i] = 0.02f * (tops_unif(-1, 1) + tops_unif(-1, 1) + tops_unif(-1, 1));
        if (quant_quantize_row(type, row, w + r * rb, n) != INFER_OK) memset(w + r * rb, 0, rb);
    }
    free(row);
    return w;
}

static double tops_nmse(const float *y, const double *r, int64_t n, int *nan) {
    double num = 0, den = 0;
    *nan = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) *nan = 1;
        num += (y[i] - r[i]) * (y[i] - r[i]);
        den += r[i] * r[i];
    }
    return den > 0 ? num / den : num;
}

#define TOPS_NMSE(y, r, n, tol, ...)                                                                         \
    do {                                                                                                     \
        int nan_;                                                                                            \
        double e_ = tops_nmse((y), (r), (n), &nan_);                                                         \
        T_CHECK(!nan_ && e_ <= (tol), "%s: NMSE %.3g > %.3g%s", desc, e_, (double)(tol), nan_ ? " (NaN/Inf)" : ""); \
    } while (0)

/* ---- the peer ---- */
typedef void (*peer_vec_dot)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
typedef void (*peer_quantize)(const float *x, void *y, int64_t k);
static void *tops_peer_cpu(void) {
    static int tried;
    static void *h;
    if (tried) return h;
    tried = 1;
    if (!peer_open("libggml-base.so", NULL)) return NULL;
    /* the most capable CPU variant this machine runs (zen4/icelake: AVX-512 VNNI), as
     * ggml_backend_load_best would pick: each variant library scores the CPU, 0 = cannot run here */
    static const char *variants[] = {"libggml-cpu-zen4.so", "libggml-cpu-icelake.so", "libggml-cpu-skylakex.so",
                                     "libggml-cpu-haswell.so"};
    for (size_t i = 0; !h && i < sizeof variants / sizeof variants[0]; i++) {
        void *v = peer_open(variants[i], NULL);
        int (*score)(void) = (int (*)(void))peer_sym(v, "ggml_backend_score");
        if (v && score && score() > 0) h = v;
    }
    if (!h) h = peer_open("libggml-cpu-x64.so", NULL);
    /* ggml_cpu_init fills the f16 tables the vec_dot functions read; without it every scale is 0 */
    void (*init)(void) = (void (*)(void))peer_sym(h, "ggml_cpu_init");
    if (init) init();
    return h;
}
static const char *tops_peer_dot_name(int32_t t) {
    switch (t) {
    case INFER_TYPE_Q8_0: return "ggml_vec_dot_q8_0_q8_0";
    case INFER_TYPE_Q4_0: return "ggml_vec_dot_q4_0_q8_0";
    case INFER_TYPE_IQ4_NL: return "ggml_vec_dot_iq4_nl_q8_0";
    case INFER_TYPE_Q4_K: return "ggml_vec_dot_q4_K_q8_K";
    case INFER_TYPE_Q5_K: return "ggml_vec_dot_q5_K_q8_K";
    case INFER_TYPE_Q6_K: return "ggml_vec_dot_q6_K_q8_K";
    case INFER_TYPE_IQ4_XS: return "ggml_vec_dot_iq4_xs_q8_K";
    }
    return NULL;
}

/* ---- runners: each returns after its checks; `be` is the backend under test ---- */
struct tctx {
    const struct tcase *c;
    int32_t type;
    struct infer_backend *be;
    char desc[160];
};

static void run_quantize(struct tctx *x) {
    const char *desc = x->desc;
    int64_t n = x->c->ne[0], rows = x->c->ne[1];
    float *in = malloc(sizeof(float) * n * rows);
    tops_fill(in, n * rows, x->c->lo, x->c->hi);
    size_t rb = ref_row_bytes(x->type, n);
    uint8_t *q = malloc(rb * rows), *pq = malloc(rb * rows);
    memset(q, 0xAB, rb * rows);
    struct quantize_args a = {x->type, in, q, n, (int32_t)rows, n};
    T_CHECK(x->be->ops->quantize(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    /* every value within half a step of the input (d is per block) */
    double *dq = malloc(sizeof(double) * n), worst = 0;
    int blck = tops_blck(x->type);
    for (int64_t r = 0; r < rows; r++) {
        ref_dequant(x->type, q + r * rb, dq, n);
        for (int64_t i = 0; i < n; i++) {
            double amax = 0;
            for (int64_t j = i / blck * blck; j < (i / blck + 1) * blck; j++) amax = fmax(amax, fabs(in[r * n + j]));
            double step = amax / 127;
            worst = fmax(worst, fabs(dq[i] - in[r * n + i]) / (step > 0 ? step : 1));
        }
    }
    /* Q8_0 rounds with the f32 d but stores d as f16: up to 127·2^-11 steps more */
    double bound = x->type == INFER_TYPE_Q8_0 ? 0.5 + 127.0 / 2048 : 0.5 + 1e-3;
    T_CHECK(worst <= bound, "%s: dequantised error %.4g steps > %.4g", desc, worst, bound);
    void *base = peer_open("libggml-base.so", NULL);
    peer_quantize pref = (peer_quantize)peer_sym(base, x->type == INFER_TYPE_Q8_0 ? "quantize_row_q8_0_ref" : "quantize_row_q8_K_ref");
    if (pref) {
        for (int64_t r = 0; r < rows; r++) pref(in + r * n, pq + r * rb, n);
        T_CHECK(memcmp(q, pq, rb * rows) == 0, "%s: not bit-exact with llama.cpp's quantize_row_%s_ref", desc,
                tops_type_name(x->type));
    } else {
        static int once;
        if (!once++) T_SKIP_PEER("llama.cpp peer not installed: quantize not compared bit for bit");
    }
    free(in);
    free(q);
    free(pq);
    free(dq);
}

/* Quantised activations as the backend wants them for weight type t (NULL for float weights). */
static void *tops_act(struct infer_backend *be, int32_t t, const float *xf, int64_t n_in, int64_t n_tokens) {
    int32_t at = be->ops->mmv_act_type(t);
    if (at < 0) return NULL;
    void *xq = malloc(ref_row_bytes(at, n_in) * n_tokens);
    struct quantize_args q = {at, xf, xq, n_in, (int32_t)n_tokens, n_in};
    if (be->ops->quantize(be, &q) != INFER_OK) {
        free(xq);
        return NULL;
    }
    return xq;
}

static infer_status tops_matmul(struct infer_backend *be, const struct mm_args *a, int mmv) {
    if (!mmv) return be->ops->mm(be, a);
    struct mmv_args v = {a->type, a->w, a->w2, a->n_in, a->n_out, (int32_t)a->n_tokens, a->xq, a->x, a->y, a->add,
                         a->epilogue, a->variant};
    return be->ops->mmv(be, &v);
}

static void run_matmul(struct tctx *x, int mmv) {
    const char *desc = x->desc;
    int64_t n_in = x->c->ne[0], n_out = x->c->ne[1], nt = x->c->ne[2];
    int32_t t = x->type, epi = x->c->param[0];
    if (n_in % tops_blck(t)) return; /* the tail shape is for 32-blocks only */
    float *xf = malloc(sizeof(float) * n_in * nt), *add = malloc(sizeof(float) * n_out * nt);
    tops_fill(xf, n_in * nt, x->c->lo, x->c->hi);
    tops_fill(add, n_out * nt, -1, 1);
    void *w = x->c->param[1] ? tops_weights_quantised(t, n_out, n_in) : tops_weights(t, n_out, n_in), *w2 = epi == MMV_SWIGLU ? tops_weights(t, n_out, n_in) : NULL;
    void *xq = tops_act(x->be, t, xf, n_in, nt);
    int32_t at = x->be->ops->mmv_act_type(t);
    struct mm_args a = {t, w, w2, n_in, n_out, nt, xq, xf, NULL, epi == MMV_ADD ? add : NULL, epi, 0};
    double *ref = malloc(sizeof(double) * n_out * nt), *rabs = malloc(sizeof(double) * n_out * nt);
    ref_mmv(&a, at, ref, rabs);
    double rel = 1e-6; /* observed <= 3e-8: f32 rounding of the scale products and sums */
    float *y0 = NULL;
    /* CPU: every ISA level (best, scalar, avx2, avx512vnni) the machine runs; a level it lacks is a SKIP */
    int n_var = strncmp(desc, "cpu ", 4) ? 2 : CPU_ISA_N;
    for (int variant = 0; variant < n_var; variant++) {
        if (n_var == CPU_ISA_N && !cpu_isa_has(variant) && variant != CPU_ISA_BEST) {
            static int skipped[CPU_ISA_N];
            static const char *names[CPU_ISA_N] = {"best", "scalar", "avx2", "avx512vnni"};
            if (!skipped[variant]++) T_SKIP("this CPU (or INFER_CPU_ISA) lacks %s: its kernels untested", names[variant]);
            continue;
        }
        float *y = tops_nan(n_out * nt);
        a.y = y;
        a.variant = variant;
        infer_status st = tops_matmul(x->be, &a, mmv);
        T_CHECK(st == INFER_OK, "%s: %s", desc, infer_last_error());
        double worst = 0;
        int64_t iw = 0;
        for (int64_t i = 0; i < n_out * nt; i++) {
            double e = fabs(y[i] - ref[i]) / (rabs[i] + 1e-30);
            if (!(e <= worst)) {
                worst = isnan(e) ? INFINITY : e;
                iw = i;
            }
        }
        T_CHECK(worst <= rel, "%s variant %d: |cpu - ref| / sum|wx| = %.3g > %.1g at %lld (cpu %.9g ref %.9g)", desc,
                variant, worst, rel, (long long)iw, y[iw], ref[iw]);
        if (variant == 0) y0 = y;
        else free(y);
    }
    /* fused epilogues against the unfused chain: bit-identical */
    if (epi != MMV_PLAIN) {
        float *g = tops_nan(n_out * nt), *u = tops_nan(n_out * nt);
        struct mm_args p = a;
        p.epilogue = MMV_PLAIN;
        p.w2 = NULL;
        p.add = NULL;
        p.variant = 0;
        p.y = g;
        tops_matmul(x->be, &p, mmv);
        if (epi == MMV_SWIGLU) {
            p.w = w2;
            p.y = u;
            tops_matmul(x->be, &p, mmv);
            struct act_args s = {ACT_SWIGLU, g, u, g, n_out * nt, 1, 0, 0};
            x->be->ops->act(x->be, &s);
        } else {
            for (int64_t i = 0; i < n_out * nt; i++) g[i] += add[i];
        }
        T_CHECK(memcmp(g, y0, sizeof(float) * n_out * nt) == 0, "%s: fused epilogue differs from the unfused chain", desc);
        free(g);
        free(u);
    }
    /* mm against mmv on the same inputs: the same dot products, so identical */
    if (!mmv && epi == MMV_PLAIN) {
        float *yv = tops_nan(n_out * nt);
        for (int64_t t0 = 0; t0 < nt; t0 += MMV_MAX_TOKENS) {
            int64_t k = nt - t0 < MMV_MAX_TOKENS ? nt - t0 : MMV_MAX_TOKENS;
            struct mm_args s = a;
            s.n_tokens = k;
            s.variant = 0;
            s.x = xf + t0 * n_in;
            s.xq = xq ? (const char *)xq + t0 * ref_row_bytes(at, n_in) : NULL;
            s.y = yv + t0 * n_out;
            tops_matmul(x->be, &s, 1);
        }
        T_CHECK(memcmp(yv, y0, sizeof(float) * n_out * nt) == 0, "%s: mm differs from mmv", desc);
        free(yv);
    }
    /* one dot product against llama.cpp's own vec_dot (ISA and generic), plain epilogue, first row */
    void *peer = tops_peer_cpu();
    const char *pn = tops_peer_dot_name(t);
    int half = t == INFER_TYPE_F16 || t == INFER_TYPE_BF16;
    if (!pn && half) pn = t == INFER_TYPE_F16 ? "ggml_vec_dot_f16" : "ggml_vec_dot_bf16";
    if (peer && mmv && epi == MMV_PLAIN && pn) {
        char name[96];
        for (int gen = 0; gen < 2; gen++) {
            snprintf(name, sizeof name, "%s%s", pn, gen ? "_generic" : "");
            peer_vec_dot f = (peer_vec_dot)peer_sym(peer, name);
            if (!f) continue;
            float s = NAN;
            if (half) { /* ggml rounds the activations to the weight's half type first */
                uint16_t *xh = malloc(2 * n_in);
                for (int64_t i = 0; i < n_in; i++)
                    xh[i] = t == INFER_TYPE_F16 ? blocks_f32_to_f16(xf[i]) : blocks_f32_to_bf16(xf[i]);
                f((int)n_in, &s, 0, w, 0, xh, 0, 1);
                free(xh);
            } else {
                f((int)n_in, &s, 0, w, 0, xq, 0, 1);
            }
            T_CHECK(fabs(s - y0[0]) <= 1e-6 * rabs[0], "%s: llama.cpp %s = %.9g, cpu = %.9g", desc, name, s, y0[0]);
        }
    } else if (!peer && mmv) {
        static int once;
        if (!once++) T_SKIP_PEER("llama.cpp peer not installed: dot products not compared with ggml");
    }
    free(y0);
    free(xf);
    free(add);
    free(w);
    free(w2);
    free(xq);
    free(ref);
    free(rabs);
}

static void run_norm(struct tctx *x) {
    const char *desc = x->desc;
    int64_t n = x->c->ne[0], rows = x->c->ne[1];
    float *in = malloc(sizeof(float) * n * rows), *w = malloc(sizeof(float) * n), *y = tops_nan(n * rows);
    tops_fill(in, n * rows, x->c->lo, x->c->hi);
    tops_fill(w, n, 0.5f, 1.5f);
    float *gate = malloc(sizeof(float) * 2 * n * rows);
    tops_fill(gate, 2 * n * rows, -6, 6);
    struct norm_args a = {in, x->c->param[0] ? w : NULL, y, n, (int32_t)rows, n, n, 1e-6f,
                          x->c->param[1] ? gate : NULL, 2 * n};
    double *r = malloc(sizeof(double) * n * rows);
    T_CHECK(x->be->ops->norm(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    ref_norm(&a, r);
    TOPS_NMSE(y, r, n * rows, x->c->tol);
    free(gate);
    free(in);
    free(w);
    free(y);
    free(r);
}

static void run_rope(struct tctx *x) {
    const char *desc = x->desc;
    int32_t nt = (int32_t)x->c->ne[0], nh = (int32_t)x->c->ne[1], hd = (int32_t)x->c->ne[2], nr = (int32_t)x->c->ne[3];
    int64_t n = (int64_t)nt * nh * hd;
    float *in = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    int32_t *pos = malloc(sizeof(int32_t) * nt);
    tops_fill(in, n, x->c->lo, x->c->hi);
    memcpy(y, in, sizeof(float) * n);
    for (int t = 0; t < nt; t++) pos[t] = (int32_t)(tops_u32() % (uint32_t)x->c->fparam);
    pos[0] = (int32_t)x->c->fparam - 1;
    struct rope_args a = {y, pos, nt, nh, hd, nr, (int64_t)nh * hd, hd, x->c->param[0], 1e6f, 1.0f};
    double *r = malloc(sizeof(double) * n);
    T_CHECK(x->be->ops->rope(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    ref_rope(&a, in, r);
    TOPS_NMSE(y, r, n, x->c->tol);
    int pass = 1; /* dims past n_rot pass through untouched */
    for (int64_t i = 0; i < n; i++)
        if (i % hd >= nr && y[i] != in[i]) pass = 0;
    T_CHECK(pass, "%s: dims >= n_rot changed", desc);
    free(in);
    free(y);
    free(pos);
    free(r);
}

static void run_act(struct tctx *x) {
    const char *desc = x->desc;
    int64_t n = x->c->ne[0], rows = x->c->ne[1];
    int32_t op = x->c->param[0];
    int64_t s2 = x->c->param[1] ? x->c->param[1] : n, n2 = s2 * rows; /* x2 rows s2 apart */
    int two = op != ACT_SILU && op != ACT_SOFTMAX;
    float *in = malloc(sizeof(float) * n * rows), *in2 = malloc(sizeof(float) * n2), *y = tops_nan(n * rows);
    tops_fill(in, n * rows, x->c->lo, x->c->hi);
    tops_fill(in2, n2, op == ACT_SWIGLU ? -2 : x->c->lo, op == ACT_SWIGLU ? 2 : x->c->hi);
    struct act_args a = {op, in, two ? in2 : NULL, y, n, (int32_t)rows, x->c->fparam, x->c->param[1]};
    double *r = malloc(sizeof(double) * n * rows);
    T_CHECK(x->be->ops->act(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    ref_act(&a, r);
    TOPS_NMSE(y, r, n * rows, x->c->tol);
    /* in place: y aliasing x, and (packed x2 of a per-element op) y aliasing x2, give the same bits */
    float *al = malloc(sizeof(float) * (n * rows > n2 ? n * rows : n2));
    for (int k = 0; k < (two ? 2 : 1); k++) {
        if (k == 1 && (s2 != n || op == ACT_SIGMOID_MUL_ROW)) break;
        struct act_args b = a;
        memcpy(al, k ? in2 : in, sizeof(float) * (size_t)(k ? n2 : n * rows));
        if (k) b.x2 = al; else b.x = al;
        b.y = al;
        T_CHECK(x->be->ops->act(x->be, &b) == INFER_OK && memcmp(al, y, sizeof(float) * (size_t)(n * rows)) == 0,
                "%s: y aliasing %s differs from the out-of-place result", desc, k ? "x2" : "x");
    }
    free(al);
    free(in);
    free(in2);
    free(y);
    free(r);
}

/* embed: every row picked is the float64 dequantisation of that table row, exactly (a dequantised
 * value is exact in f32). */
static void run_embed(struct tctx *x) {
    const char *desc = x->desc;
    const int64_t n = x->c->ne[0], rows = x->c->ne[1];
    const int32_t nt = (int32_t)x->c->ne[2];
    void *w = tops_weights(x->type, rows, n);
    int32_t *ids = malloc(sizeof(int32_t) * nt);
    for (int32_t t = 0; t < nt; t++) ids[t] = (int32_t)(tops_u32() % (uint32_t)rows);
    ids[0] = (int32_t)rows - 1;
    float *y = tops_nan(n * nt);
    double *r = malloc(sizeof(double) * n);
    struct embed_args a = {x->type, w, n, rows, ids, nt, y};
    T_CHECK(x->be->ops->embed(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    const size_t rb = ref_row_bytes(x->type, n);
    int same = 1;
    for (int32_t t = 0; t < nt; t++) {
        ref_dequant(x->type, (const char *)w + (size_t)ids[t] * rb, r, n);
        for (int64_t i = 0; i < n; i++) same &= (double)y[t * n + i] == r[i];
    }
    T_CHECK(same, "%s: rows equal their float64 dequantisation", desc);
    int32_t bad = (int32_t)rows;
    struct embed_args e = a;
    e.ids = &bad, e.n_tokens = 1;
    T_CHECK(x->be->ops->embed(x->be, &e) == INFER_E_ARG, "%s: an id past the table is INFER_E_ARG", desc);
    free(w), free(ids), free(y), free(r);
}

/* kv_store into Q8_0 cells (cells row + 32 values apart): per block of 32 of a stored row, d is the
 * f16 of amax / 127, the largest magnitude gets |q| = 127 and every q is the nearest step
 * (|x / d - q| <= 1/2, d unrounded, in double); the other bytes are untouched. With rot, x is the row
 * rotated by ref_hadamard: the op rotates in f32, so d may be one f16 step away and the steps get
 * 1e-4 of slack. */
static void run_kv_store_q8_0(struct tctx *x) {
    const char *desc = x->desc;
    const int64_t row = x->c->ne[0], n_cells = x->c->ne[1], stride = row + 32, cb = (int64_t)ref_row_bytes(INFER_TYPE_Q8_0, stride);
    const int32_t nt = (int32_t)x->c->ne[2];
    float *in = malloc(sizeof(float) * row * nt);
    tops_fill(in, row * nt, x->c->lo, x->c->hi);
    uint8_t *cells = malloc((size_t)(cb * n_cells));
    memset(cells, 0xAB, (size_t)(cb * n_cells));
    int32_t *pos = malloc(sizeof(int32_t) * nt);
    for (int32_t t = 0; t < nt; t++) pos[t] = (int32_t)((t * 7 + 2) % n_cells);
    const int32_t rot = x->c->param[0];
    struct kv_store_args a = {in, cells, pos, row, row, stride, nt, INFER_TYPE_Q8_0, rot};
    double *xr = malloc(sizeof(double) * row), *xd = malloc(sizeof(double) * row);
    T_CHECK(x->be->ops->kv_store(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    int ok = 1, n_bad = 0;
    for (int64_t c = 0; c < n_cells; c++) {
        int32_t t = -1;
        for (int32_t k = 0; k < nt; k++)
            if (pos[k] == c) t = k;
        const uint8_t *cell = cells + c * cb;
        const int64_t stored = t < 0 ? 0 : (int64_t)ref_row_bytes(INFER_TYPE_Q8_0, row);
        for (int64_t i = stored; i < cb; i++) ok &= cell[i] == 0xAB;
        if (t >= 0) {
            for (int64_t i = 0; i < row; i++) xd[i] = in[t * row + i];
            ref_hadamard(xd, xr, (int)row, rot);
        }
        for (int64_t b = 0; t >= 0 && b < row / 32; b++) {
            const double *xb = xr + b * 32;
            const uint8_t *blk = cell + b * 34;
            double amax = 0;
            for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(xb[i]));
            const double d = amax / 127, d16 = ref_f16((uint16_t)(blk[0] | blk[1] << 8)), want = ref_round_f16((float)d);
            int bok = rot ? fabs(d16 - want) <= 1e-3 * want : d16 == want;
            for (int i = 0; i < 32; i++) {
                const int q = (int8_t)blk[2 + i];
                bok &= fabs(xb[i] / d - q) <= 0.5 + (rot ? 1e-4 : 1e-6) && (fabs(xb[i]) != amax || abs(q) == 127 || rot);
            }
            if (!bok && n_bad++ < 3) printf("  cell %lld block %lld: d %.9g (want %.9g)\n", (long long)c, (long long)b, d16, d);
            ok &= bok;
        }
    }
    T_CHECK(ok, "%s: cells at pos hold Q8_0(x) (d = f16(amax/127), nearest q), the rest untouched", desc);
    free(in), free(cells), free(pos), free(xr), free(xd);
}

/* kv_store: the named cells hold the nearest-even halves of their rows (overflow to inf included),
 * the others are untouched. */
static void run_kv_store(struct tctx *x) {
    const char *desc = x->desc;
    if (x->type == INFER_TYPE_Q8_0) {
        run_kv_store_q8_0(x);
        return;
    }
    const int64_t row = x->c->ne[0], n_cells = x->c->ne[1], stride = row + 3;
    const int32_t nt = (int32_t)x->c->ne[2];
    float *in = malloc(sizeof(float) * row * nt);
    tops_fill(in, row * nt, x->c->lo, x->c->hi);
    uint16_t *cells = malloc(sizeof(uint16_t) * stride * n_cells);
    memset(cells, 0xAB, sizeof(uint16_t) * stride * n_cells);
    int32_t *pos = malloc(sizeof(int32_t) * nt);
    for (int32_t t = 0; t < nt; t++) pos[t] = (int32_t)((t * 7 + 2) % n_cells); /* distinct while nt <= n_cells / gcd */
    struct kv_store_args a = {in, cells, pos, row, row, stride, nt, INFER_TYPE_F16, 0};
    T_CHECK(x->be->ops->kv_store(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    int ok = 1;
    for (int64_t c = 0; c < n_cells; c++) {
        int32_t t = -1;
        for (int32_t k = 0; k < nt; k++)
            if (pos[k] == c) t = k;
        for (int64_t i = 0; i < stride; i++) {
            const uint16_t h = cells[c * stride + i];
            if (t < 0 || i >= row) {
                ok &= h == 0xABAB;
            } else {
                const double want = ref_round_f16(in[t * row + i]), got = ref_f16(h);
                ok &= got == want || (isinf(want) && isinf(got) && (want > 0) == (got > 0));
            }
        }
    }
    T_CHECK(ok, "%s: cells at pos hold f16(x), the rest untouched", desc);
    free(in), free(cells), free(pos);
}

/* ssm_conv: against ref_ssm_conv (outputs by NMSE, the new window exactly: it is copied inputs), the
 * window carried over two calls equal to one call bit for bit, and each snapshot equal to the window
 * of a run stopped after that token. */
static void run_ssm_conv(struct tctx *x) {
    const char *desc = x->desc;
    struct infer_backend *be = x->be;
    int64_t nc = x->c->ne[0], xs = nc + 3; /* input rows wider than n_ch, as in the qkv projection */
    int32_t nt = (int32_t)x->c->ne[1], dc = (int32_t)x->c->ne[2], ring = x->c->param[0];
    int64_t nw = (int64_t)(dc - 1) * nc;
    float *in = malloc(sizeof(float) * xs * nt), *w = malloc(sizeof(float) * nc * dc), *s0 = malloc(sizeof(float) * nw);
    float *st = malloc(sizeof(float) * nw), *y = tops_nan(nc * nt), *snap = tops_nan(nw * (ring ? ring : 1));
    tops_fill(in, xs * nt, x->c->lo, x->c->hi);
    tops_fill(w, nc * dc, -0.8f, 0.8f);
    tops_fill(s0, nw, x->c->lo, x->c->hi);
    memcpy(st, s0, sizeof(float) * nw);
    int32_t from = ring && nt > ring ? nt - ring : 0, pos0 = 5;
    struct ssm_conv_args a = {in, st, w, y, nc, xs, nt, dc, ring ? snap : NULL, nw, ring, pos0, from};
    T_CHECK(be->ops->ssm_conv(be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    double *r = malloc(sizeof(double) * nc * nt), *rs = malloc(sizeof(double) * nw);
    ref_ssm_conv(&a, s0, r, rs);
    TOPS_NMSE(y, r, nc * nt, x->c->tol);
    int same = 1;
    for (int64_t i = 0; i < nw; i++) same &= st[i] == rs[i];
    T_CHECK(same, "%s: new window differs from the last d_conv-1 inputs", desc);
    /* two calls (split after the first token, and in the middle) = one call */
    for (int32_t n1 = 1; n1 < nt; n1 += (nt - 1) / 2 > 1 ? (nt - 1) / 2 : 1) {
        float *y2 = tops_nan(nc * nt), *st2 = malloc(sizeof(float) * nw);
        memcpy(st2, s0, sizeof(float) * nw);
        struct ssm_conv_args b = {in, st2, w, y2, nc, xs, n1, dc, NULL, 0, 0, 0, 0};
        be->ops->ssm_conv(be, &b);
        b.x = in + n1 * xs;
        b.y = y2 + n1 * nc;
        b.n_tokens = nt - n1;
        be->ops->ssm_conv(be, &b);
        T_CHECK(!memcmp(y2, y, sizeof(float) * nc * nt) && !memcmp(st2, st, sizeof(float) * nw),
                "%s: split after %d tokens differs from one call", desc, n1);
        free(y2);
        free(st2);
    }
    /* snapshot of token t = the window of a run of the first t+1 tokens */
    for (int32_t t = from; ring && t < nt; t++) {
        float *yt = tops_nan(nc * nt), *stt = malloc(sizeof(float) * nw);
        memcpy(stt, s0, sizeof(float) * nw);
        struct ssm_conv_args b = {in, stt, w, yt, nc, xs, t + 1, dc, NULL, 0, 0, 0, 0};
        be->ops->ssm_conv(be, &b);
        T_CHECK(!memcmp(snap + ((pos0 + t) % ring) * nw, stt, sizeof(float) * nw), "%s: snapshot of token %d", desc, t);
        free(yt);
        free(stt);
    }
    free(in);
    free(w);
    free(s0);
    free(st);
    free(y);
    free(snap);
    free(r);
    free(rs);
}

/* gdn inputs in physical ranges: q, k, v like SiLU'd conv outputs; ssm_a = -exp(A_log) and a, dt_bias such
 * that g = softplus(a + dt_bias) * ssm_a lies in (-20, 0); b spread so beta covers (0.02, 0.98). */
struct gdn_in {
    float *q, *k, *v, *ab, *dt, *ssm_a, *s0;
    int64_t qks, vs, abs;
};
static void gdn_in_make(struct gdn_in *g, int32_t nt, int32_t ng, int32_t nv, int32_t d, float lo, float hi) {
    g->qks = (int64_t)ng * d + 7; /* padded rows: q, k and v are slices of the conv output */
    g->vs = (int64_t)nv * d + 5;
    g->abs = 2 * (int64_t)nv;     /* b then a, both forms fit */
    g->q = malloc(sizeof(float) * g->qks * nt);
    g->k = malloc(sizeof(float) * g->qks * nt);
    g->v = malloc(sizeof(float) * g->vs * nt);
    g->ab = malloc(sizeof(float) * g->abs * nt);
    g->dt = malloc(sizeof(float) * nv);
    g->ssm_a = malloc(sizeof(float) * nv);
    g->s0 = malloc(sizeof(float) * nv * d * d);
    tops_fill(g->q, g->qks * nt, lo, hi);
    tops_fill(g->k, g->qks * nt, lo, hi);
    tops_fill(g->v, g->vs * nt, lo, hi);
    for (int64_t t = 0; t < nt; t++)
        for (int32_t j = 0; j < 2 * nv; j++) g->ab[t * g->abs + j] = tops_unif(-4, 4);
    for (int32_t j = 0; j < nv; j++) {
        g->dt[j] = tops_unif(-1, 1);
        g->ssm_a[j] = -expf(tops_unif(-2, 1.5f));
    }
    tops_fill(g->s0, (int64_t)nv * d * d, -0.3f, 0.3f);
}
static void gdn_in_free(struct gdn_in *g) {
    free(g->q);
    free(g->k);
    free(g->v);
    free(g->ab);
    free(g->dt);
    free(g->ssm_a);
    free(g->s0);
}
static struct gdn_args gdn_args_of(const struct gdn_in *g, const struct tcase *c, float *state, float *out, int32_t nt) {
    int32_t ng = (int32_t)c->ne[1], nv = (int32_t)c->ne[2], d = (int32_t)c->ne[3], fl = c->param[1];
    int32_t r = nv / ng;
    struct gdn_args a = {g->q, g->k, g->v, fl & GDN_T_AB_GROUP ? g->ab + r : g->ab + nv, g->ab, g->dt, g->ssm_a,
                         state, out, nt, ng, nv, d, g->qks, g->vs, g->abs, (fl & GDN_T_GROUPED) != 0,
                         fl & GDN_T_AB_GROUP ? r : 0, 1e-6f, c->param[0], NULL, 0, 0, 0, 0};
    return a;
}

/* gdn: the variant against the float64 recurrence (outputs and final state), chunked against recurrent,
 * two calls against one, each snapshot bit-exact against a run stopped after its token. */
static void run_gdn(struct tctx *x) {
    const char *desc = x->desc;
    struct infer_backend *be = x->be;
    const struct tcase *c = x->c;
    int32_t nt = (int32_t)c->ne[0], nv = (int32_t)c->ne[2], d = (int32_t)c->ne[3];
    int64_t ns = (int64_t)nv * d * d, no = (int64_t)nt * nv * d;
    struct gdn_in g;
    gdn_in_make(&g, nt, (int32_t)c->ne[1], nv, d, c->lo, c->hi);
    int32_t ring = c->param[1] & GDN_T_SNAP ? (nt < 4 ? nt : 4) : 0, from = nt - ring, pos0 = 3;
    float *st = malloc(sizeof(float) * ns), *out = tops_nan(no), *snap = tops_nan(ns * (ring ? ring : 1));
    memcpy(st, g.s0, sizeof(float) * ns);
    struct gdn_args a = gdn_args_of(&g, c, st, out, nt);
    if (ring) {
        a.snap = snap;
        a.snap_stride = ns;
        a.snap_ring = ring;
        a.snap_pos0 = pos0;
        a.snap_from = from;
    }
    T_CHECK(be->ops->gdn(be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    double *r = malloc(sizeof(double) * no), *rs = malloc(sizeof(double) * ns);
    ref_gdn(&a, g.s0, r, rs);
    TOPS_NMSE(out, r, no, c->tol);
    TOPS_NMSE(st, rs, ns, c->tol);
    /* chunked (or auto) against recurrent on the same inputs: both are the recurrence to f32 rounding */
    if (c->param[0] != GDN_RECURRENT) {
        float *st2 = malloc(sizeof(float) * ns), *out2 = tops_nan(no);
        memcpy(st2, g.s0, sizeof(float) * ns);
        struct gdn_args b = gdn_args_of(&g, c, st2, out2, nt);
        b.variant = GDN_RECURRENT;
        be->ops->gdn(be, &b);
        double *ro = malloc(sizeof(double) * no), *rst = malloc(sizeof(double) * ns);
        for (int64_t i = 0; i < no; i++) ro[i] = out2[i];
        for (int64_t i = 0; i < ns; i++) rst[i] = st2[i];
        TOPS_NMSE(out, ro, no, c->tol);
        TOPS_NMSE(st, rst, ns, c->tol);
        free(st2);
        free(out2);
        free(ro);
        free(rst);
    }
    /* two calls = one call: bit for bit token by token; the chunked form regroups its chunks, so NMSE */
    if (nt > 1) {
        int32_t n1 = nt / 2;
        float *st2 = malloc(sizeof(float) * ns), *out2 = tops_nan(no);
        memcpy(st2, g.s0, sizeof(float) * ns);
        struct gdn_args b = gdn_args_of(&g, c, st2, out2, n1);
        be->ops->gdn(be, &b);
        b.q += n1 * g.qks;
        b.k += n1 * g.qks;
        b.v += n1 * g.vs;
        b.a += n1 * g.abs;
        b.b += n1 * g.abs;
        b.out += (int64_t)n1 * nv * d;
        b.n_tokens = nt - n1;
        be->ops->gdn(be, &b);
        if (c->param[0] == GDN_RECURRENT) {
            T_CHECK(!memcmp(out2, out, sizeof(float) * no) && !memcmp(st2, st, sizeof(float) * ns),
                    "%s: split after %d tokens differs from one call", desc, n1);
        } else {
            TOPS_NMSE(out2, r, no, c->tol);
            TOPS_NMSE(st2, rs, ns, c->tol);
        }
        free(st2);
        free(out2);
    }
    /* snapshot of token t = the state of the same call stopped after token t */
    for (int32_t t = from; ring && t < nt; t++) {
        float *st2 = malloc(sizeof(float) * ns), *out2 = tops_nan(no), *sn2 = tops_nan(ns * ring);
        memcpy(st2, g.s0, sizeof(float) * ns);
        struct gdn_args b = a;
        b.state = st2;
        b.out = out2;
        b.n_tokens = t + 1;
        b.snap = sn2;
        be->ops->gdn(be, &b);
        T_CHECK(!memcmp(snap + ((pos0 + t) % ring) * ns, st2, sizeof(float) * ns), "%s: snapshot of token %d", desc, t);
        free(st2);
        free(out2);
        free(sn2);
    }
    gdn_in_free(&g);
    free(st);
    free(out);
    free(snap);
    free(r);
    free(rs);
}

/* attn over f16 cells, or Q8_0 cells (types "q8_0", cells 32 values wider than a row): against ref_attn
 * on the dequantised cells. For Q8_0 q goes in already rounded to Q8_0 (the CPU rounds it, like
 * llama.cpp's CPU flash attention, and rounding twice changes nothing), and on the CPU the raw q must
 * then give the same output bit for bit. */
static void run_attn(struct tctx *x) {
    const char *desc = x->desc;
    int32_t nt = (int32_t)x->c->ne[0], nh = (int32_t)x->c->ne[1], nkv = (int32_t)x->c->ne[2], hd = (int32_t)x->c->ne[3];
    int32_t ncell = x->c->param[0];
    const int q8 = x->type == INFER_TYPE_Q8_0;
    const int32_t kt = q8 ? INFER_TYPE_Q8_0 : INFER_TYPE_F16;
    const int64_t ks = (int64_t)nkv * hd + (q8 ? 32 : 0); /* values between cells */
    int64_t nq = (int64_t)nt * nh * hd, nc = (int64_t)ncell * ks;
    float *q = malloc(sizeof(float) * nq), *o = tops_nan(nq), *kf = malloc(sizeof(float) * nc);
    const size_t kb = q8 ? ref_row_bytes(INFER_TYPE_Q8_0, nc) : 2 * (size_t)nc;
    uint8_t *k = malloc(kb), *v = malloc(kb);
    int32_t *pos = malloc(sizeof(int32_t) * nt);
    tops_fill(q, nq, x->c->lo, x->c->hi);
    for (int kvi = 0; kvi < 2; kvi++) {
        uint8_t *cells = kvi ? v : k;
        tops_fill(kf, nc, -1, 1);
        if (q8) T_CHECK(quant_quantize_row(INFER_TYPE_Q8_0, kf, cells, nc) == INFER_OK, "%s: cells", desc);
        else
            for (int64_t i = 0; i < nc; i++) ((uint16_t *)cells)[i] = blocks_f32_to_f16(kf[i]);
    }
    float *q_raw = NULL;
    const int32_t rot_k = x->c->param[1], rot_v = rot_k ? 64 : 0;
    if (q8) { /* q = H(Q8_0(H q)), so H q is on the Q8_0 grid up to f32 rounding and rounds to itself */
        q_raw = malloc(sizeof(float) * nq);
        memcpy(q_raw, q, sizeof(float) * nq);
        for (int64_t c = 0; rot_k && c < nq; c += rot_k) kv_hadamard(q + c, rot_k);
        uint8_t *qq = malloc(ref_row_bytes(INFER_TYPE_Q8_0, nq));
        quant_quantize_row(INFER_TYPE_Q8_0, q, qq, nq);
        quant_dequant_row(INFER_TYPE_Q8_0, qq, q, nq);
        for (int64_t c = 0; rot_k && c < nq; c += rot_k) kv_hadamard(q + c, rot_k);
        free(qq);
    }
    for (int t = 0; t < nt; t++) pos[t] = ncell - nt + t; /* the last nt positions: a causal prefill batch */
    float scale = x->c->fparam > 0 ? x->c->fparam : 1.0f / sqrtf((float)hd);
    struct attn_args a = {q, k, v, o, pos, nt, nh, nkv, hd, ncell, (int64_t)nh * hd, ks, (int64_t)nh * hd, scale, NULL, 0, kt, rot_k, rot_v};
    double *r = malloc(sizeof(double) * nq);
    T_CHECK(x->be->ops->attn(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    ref_attn(&a, r);
    TOPS_NMSE(o, r, nq, x->c->tol);
    if (q8 && !strncmp(desc, "cpu", 3)) {
        float *o2 = tops_nan(nq);
        struct attn_args a2 = a;
        a2.q = q_raw, a2.out = o2;
        T_CHECK(x->be->ops->attn(x->be, &a2) == INFER_OK && !memcmp(o, o2, sizeof(float) * nq),
                "%s: raw q gives the output of q rounded to Q8_0, bit for bit", desc);
        free(o2);
    }
    free(q), free(q_raw), free(o), free(kf), free(k), free(v), free(pos), free(r);
}

static void run_moe_route(struct tctx *x) {
    const char *desc = x->desc;
    int32_t nt = (int32_t)x->c->ne[0], ne = (int32_t)x->c->ne[1], nk = (int32_t)x->c->ne[2];
    float *z = malloc(sizeof(float) * nt * ne), *w = tops_nan(nt * nk);
    int32_t *ids = malloc(sizeof(int32_t) * nt * nk);
    double *p = malloc(sizeof(double) * nt * ne);
    tops_fill(z, nt * ne, x->c->lo, x->c->hi);
    struct moe_route_args a = {z, ids, w, nt, ne, nk, x->c->param[0]};
    T_CHECK(x->be->ops->moe_route(x->be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    ref_moe_route(&a, p);
    for (int t = 0; t < nt; t++) {
        /* the reference top-k as a set: the k largest probabilities */
        double kth = INFINITY, sel = 0;
        for (int k = 0; k < nk; k++) {
            double best = -1;
            for (int e = 0; e < ne; e++)
                if (p[t * ne + e] < kth && p[t * ne + e] > best) best = p[t * ne + e];
            kth = best;
            sel += best;
        }
        for (int k = 0; k < nk; k++) {
            int32_t e = ids[t * nk + k];
            T_CHECK(e >= 0 && e < ne && p[t * ne + e] >= kth, "%s: token %d pick %d = expert %d not in the top-k", desc, t, k, e);
            if (e < 0 || e >= ne) continue;
            double want = p[t * ne + e] / (x->c->param[0] ? sel : 1.0);
            T_CHECK(fabs(w[t * nk + k] - want) <= 1e-6 * want + 1e-9, "%s: token %d weight %d = %.9g, ref %.9g", desc, t, k,
                    w[t * nk + k], want);
        }
    }
    free(z);
    free(w);
    free(ids);
    free(p);
}

static void run_moe_ffn(struct tctx *x) {
    const char *desc = x->desc;
    struct infer_backend *be = x->be;
    int32_t nt = (int32_t)x->c->ne[0], ne = (int32_t)x->c->ne[3], nk = x->c->param[0];
    int64_t E = x->c->ne[1], F = x->c->ne[2];
    int32_t tg = x->type, td = x->c->param[1];
    void *gate = tops_weights(tg, ne * F, E), *up = tops_weights(tg, ne * F, E), *down = tops_weights(td, ne * E, F);
    float *in = malloc(sizeof(float) * nt * E), *w = malloc(sizeof(float) * nt * nk), *y = tops_nan(nt * E);
    int32_t *ids = malloc(sizeof(int32_t) * nt * nk);
    tops_fill(in, nt * E, x->c->lo, x->c->hi);
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < nk; k++) {
            ids[t * nk + k] = (t + 3 * k) % ne; /* distinct per token since nk <= ne and 3 is coprime-ish */
            w[t * nk + k] = tops_unif(0.1f, 0.6f);
        }
    struct moe_ffn_args a = {tg, td, gate, up, down, in, ids, w, y, E, F, ne, nk, nt, NULL};
    T_CHECK(be->ops->moe_ffn(be, &a) == INFER_OK, "%s: %s", desc, infer_last_error());
    double *r = malloc(sizeof(double) * nt * E);
    ref_moe_ffn(&a, r);
    TOPS_NMSE(y, r, nt * E, x->c->tol);
    /* the unfused chain: quantize, mmv gate, mmv up, swiglu, quantize, mmv down, weighted sum */
    float *g = malloc(sizeof(float) * F), *u = malloc(sizeof(float) * F), *o = malloc(sizeof(float) * E);
    float *yc = malloc(sizeof(float) * nt * E);
    size_t gb = ref_row_bytes(tg, E), db = ref_row_bytes(td, F);
    for (int t = 0; t < nt; t++) {
        for (int64_t i = 0; i < E; i++) yc[t * E + i] = 0;
        void *xq = tops_act(be, tg, in + t * E, E, 1);
        for (int k = 0; k < nk; k++) {
            int e = ids[t * nk + k];
            struct mm_args m = {tg, (char *)gate + e * F * gb, NULL, E, F, 1, xq, in + t * E, g, NULL, MMV_PLAIN, 0};
            be->ops->mm(be, &m);
            m.w = (char *)up + e * F * gb;
            m.y = u;
            be->ops->mm(be, &m);
            struct act_args s = {ACT_SWIGLU, g, u, g, F, 1, 0, 0};
            be->ops->act(be, &s);
            void *hq = tops_act(be, td, g, F, 1);
            struct mm_args d = {td, (char *)down + e * E * db, NULL, F, E, 1, hq, g, o, NULL, MMV_PLAIN, 0};
            be->ops->mm(be, &d);
            for (int64_t i = 0; i < E; i++) yc[t * E + i] += w[t * nk + k] * o[i];
            free(hq);
        }
        free(xq);
    }
    T_CHECK(memcmp(yc, y, sizeof(float) * nt * E) == 0, "%s: fused moe_ffn differs from the unfused chain", desc);
    free(gate);
    free(up);
    free(down);
    free(in);
    free(w);
    free(y);
    free(ids);
    free(r);
    free(g);
    free(u);
    free(o);
    free(yc);
}

static void run_errors(struct tctx *x) {
    const char *desc = x->desc;
    struct infer_backend *be = x->be;
    float f[512] = {0}, y[512];
    uint8_t q[2048] = {0};
    int32_t pos[1] = {-1}, ids[2] = {0, 99};
    struct mmv_args m = {INFER_TYPE_Q2_K, q, NULL, 256, 1, 1, q, f, y, NULL, MMV_PLAIN, 0};
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_UNSUPPORTED, "%s: Q2_K mmv", desc);
    m.type = INFER_TYPE_Q4_K;
    m.n_in = 200; /* not a multiple of 256 */
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: n_in 200 for Q4_K", desc);
    m.n_in = 256;
    m.n_tokens = 9;
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: mmv with 9 tokens", desc);
    m.n_tokens = 1;
    m.epilogue = MMV_SWIGLU; /* no w2 */
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: SwiGLU without w2", desc);
    m.epilogue = 7;
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: epilogue 7", desc);
    struct quantize_args qa = {INFER_TYPE_F32, f, q, 256, 1, 256};
    T_CHECK(be->ops->quantize(be, &qa) == INFER_E_UNSUPPORTED, "%s: quantize to F32", desc);
    qa.type = INFER_TYPE_Q8_0;
    qa.n = 33;
    T_CHECK(be->ops->quantize(be, &qa) == INFER_E_ARG, "%s: quantize n 33", desc);
    uint16_t kv[64] = {0};
    struct attn_args at = {f, kv, kv, y, pos, 1, 3, 2, 8, 4, 24, 16, 24, 1, NULL, 0, INFER_TYPE_F16, 0, 0};
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: 3 heads over 2 kv heads", desc);
    at.n_head = 4;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: negative position", desc);
    pos[0] = 0;
    at.kv_type = INFER_TYPE_F32;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_UNSUPPORTED, "%s: attention over f32 cells", desc);
    at.kv_type = INFER_TYPE_Q8_0;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: Q8_0 cells with head_dim 8", desc);
    at.head_dim = 64, at.kv_stride = 128, at.q_stride = at.out_stride = 256, at.rot_k = 48;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: Q8_0 rot_k 48", desc);
    at.kv_type = INFER_TYPE_F16, at.rot_k = 64;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: a rotation of f16 cells", desc);
    pos[0] = -1;
    struct kv_store_args ks = {f, q, pos + 0, 40, 40, 64, 0, INFER_TYPE_Q8_0, 0};
    T_CHECK(be->ops->kv_store(be, &ks) == INFER_E_ARG, "%s: Q8_0 cells of 40 values", desc);
    ks.row = ks.x_stride = 64, ks.rot = 128;
    T_CHECK(be->ops->kv_store(be, &ks) == INFER_E_ARG, "%s: Q8_0 rot 128 over rows of 64", desc);
    ks.rot = 0, ks.type = INFER_TYPE_BF16;
    T_CHECK(be->ops->kv_store(be, &ks) == INFER_E_UNSUPPORTED, "%s: bf16 cells", desc);
    struct rope_args ro = {f, pos, 1, 1, 64, 65, 64, 64, ROPE_NORMAL, 1e4f, 1};
    T_CHECK(be->ops->rope(be, &ro) == INFER_E_ARG, "%s: n_rot 65 > head_dim", desc);
    struct moe_route_args mr = {f, ids, y, 1, 4, 5, 1};
    T_CHECK(be->ops->moe_route(be, &mr) == INFER_E_ARG, "%s: top-5 of 4 experts", desc);
    struct moe_ffn_args mf = {INFER_TYPE_F32, INFER_TYPE_F32, f, f, f, f, ids, f, y, 4, 4, 4, 2, 1, NULL};
    T_CHECK(be->ops->moe_ffn(be, &mf) == INFER_E_ARG, "%s: expert id 99 of 4", desc);
    struct act_args ac = {6, f, f, y, 4, 1, 0, 0};
    T_CHECK(be->ops->act(be, &ac) == INFER_E_ARG, "%s: act op 6", desc);
    ac.op = ACT_ADD;
    ac.x2 = NULL;
    T_CHECK(be->ops->act(be, &ac) == INFER_E_ARG, "%s: ACT_ADD without x2", desc);
    struct ssm_conv_args sc = {f, f, f, y, 8, 8, 2, 1, NULL, 0, 0, 0, 0};
    T_CHECK(be->ops->ssm_conv(be, &sc) == INFER_E_ARG, "%s: ssm_conv d_conv 1", desc);
    sc.d_conv = 4;
    sc.snap = y;
    T_CHECK(be->ops->ssm_conv(be, &sc) == INFER_E_ARG, "%s: ssm_conv snapshot ring 0", desc);
    struct gdn_args gd = {f, f, f, f, f, f, f, y, y, 1, 2, 3, 4, 8, 12, 6, 0, 0, 1e-6f, GDN_RECURRENT, NULL, 0, 0, 0, 0};
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn 3 value heads over 2 key heads", desc);
    gd.n_vhead = 4;
    gd.v_stride = 16;
    gd.ab_group = 3;
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn ab_group 3 for 4 / 2 heads", desc);
    gd.ab_group = 0;
    gd.variant = 3;
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn variant 3", desc);
    gd.variant = GDN_RECURRENT;
    gd.d_state = 512;
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn d_state 512", desc);
    struct pool *p = NULL;
    T_CHECK(pool_create(0, &p) == INFER_E_ARG && p == NULL, "%s: pool of 0 threads", desc);
}

struct tops_pool_job {
    int *hits;
    int64_t grain, n;
    int bad;
};
static void tops_pool_fn(void *ctx, int64_t b, int64_t e, int ith) {
    struct tops_pool_job *j = ctx;
    if (b % j->grain || (e % j->grain && e != j->n) || ith < 0) j->bad = 1;
    for (int64_t i = b; i < e; i++) __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
}

static void run_pool(struct tctx *x) {
    const char *desc = x->desc;
    int64_t n = x->c->ne[0];
    struct pool *p = NULL;
    T_CHECK(pool_create((int)x->c->ne[2], &p) == INFER_OK, "%s: %s", desc, infer_last_error());
    int *hits = calloc((size_t)n, sizeof(int));
    struct tops_pool_job j = {hits, x->c->ne[1], n, 0};
    for (int rep = 0; rep < 50; rep++) pool_for(p, n, j.grain, tops_pool_fn, &j);
    int ok = !j.bad;
    for (int64_t i = 0; i < n; i++) ok &= hits[i] == 50;
    T_CHECK(ok, "%s: every index exactly once per call, grain-aligned ranges", desc);
    pool_free(p);
    free(hits);
}

static void run_case(struct tctx *x) {
    const char *op = x->c->op;
    if (!strcmp(op, "quantize")) run_quantize(x);
    else if (!strcmp(op, "mmv")) run_matmul(x, 1);
    else if (!strcmp(op, "mm")) run_matmul(x, 0);
    else if (!strcmp(op, "norm")) run_norm(x);
    else if (!strcmp(op, "rope")) run_rope(x);
    else if (!strcmp(op, "act")) run_act(x);
    else if (!strcmp(op, "attn")) run_attn(x);
    else if (!strcmp(op, "ssm_conv")) run_ssm_conv(x);
    else if (!strcmp(op, "gdn")) run_gdn(x);
    else if (!strcmp(op, "embed")) run_embed(x);
    else if (!strcmp(op, "kv_store")) run_kv_store(x);
    else if (!strcmp(op, "moe_route")) run_moe_route(x);
    else if (!strcmp(op, "moe_ffn")) run_moe_ffn(x);
    else if (!strcmp(op, "errors")) run_errors(x);
    else if (!strcmp(op, "pool")) run_pool(x);
}

/* Is `s` in the comma list `list` (NULL list: everything)? */
static int tops_in(const char *list, const char *s) {
    if (!list) return 1;
    size_t n = strlen(s);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, s, n) == 0) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *ops = NULL, *types = NULL, *backends = "cpu,cuda";
    int list = 0, n_threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) ops = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) backends = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--list")) list = 1;
        else {
            fprintf(stderr, "usage: %s [-o op1,op2] [-t q4_K,...] [-b cpu|cuda] [-n threads] [--list]\n", argv[0]);
            return 2;
        }
    }
    struct infer_backend *cpu = NULL;
    if (!list && backend_cpu_create(n_threads, &cpu) != INFER_OK) {
        printf("FAIL: backend_cpu_create: %s\n", infer_last_error());
        return 1;
    }
    if (!list) printf("cpu: %s, %d threads\n", cpu_isa(), n_threads);
    const char *why = NULL;
    int n_dev = device_count(&why);
    for (int ci = 0; ci < N_CASES; ci++) {
        const struct tcase *c = &tops_cases[ci];
        if (!tops_in(ops, c->op)) continue;
        /* one run per type of the case ("" = a float op, one run) */
        const char *p = c->types;
        do {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            int32_t t = len ? tops_type_id(p, len) : -1;
            char tname[16];
            snprintf(tname, sizeof tname, "%.*s", (int)len, p);
            p += len + (e != NULL);
            if (len && types && !tops_in(types, tname)) continue;
            for (int b = 0; b < 2; b++) {
                const char *bn = b ? "cuda" : "cpu";
                if (!tops_in(backends, bn) || (b == 1 && !strcmp(c->op, "pool"))) continue; /* pool: CPU only */
                struct tctx x = {c, t, cpu, {0}};
                snprintf(x.desc, sizeof x.desc, "%s %s %s ne=[%lld,%lld,%lld,%lld] p=[%d,%d]", bn, c->op, len ? tname : "f32",
                         (long long)c->ne[0], (long long)c->ne[1], (long long)c->ne[2], (long long)c->ne[3], c->param[0],
                         c->param[1]);
                if (list) {
                    printf("%s\n", x.desc);
                    continue;
                }
                if (b == 1) {
                    if (n_dev == 0) T_SKIP("no CUDA device");
                    else T_SKIP("CUDA backend not built into this test yet: %s", x.desc);
                    continue;
                }
                int before = t_fail;
                run_case(&x);
                if (t_fail == before) printf("ok   %s\n", x.desc);
                fflush(stdout);
            }
        } while (*p);
    }
    (void)why;
    backend_free(cpu);
    if (list) return 0;
    return t_done();
}
