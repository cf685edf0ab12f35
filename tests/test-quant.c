/* test-quant: the type table, the half/bfloat16 conversions, the dequantisers and the quantisers,
 * against llama.cpp's own ggml (libggml-base.so from the peer) bit for bit, and against float64
 * computations and hand-worked values where the peer is not needed. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "peer.h"
#include "quant.h"
#include "t.h"

/* ---- deterministic random numbers ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unit(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
static float rng_gauss(void) {
    const double u = rng_unit() + 1e-300, v = rng_unit();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A finite half in a realistic scale range (2^-14 .. 2^2, either sign), sometimes 0 or subnormal. */
static uint16_t rand_half(void) {
    const uint32_t r = (uint32_t)rng_u64();
    if (r % 64 == 0) return 0;
    if (r % 64 == 1) return (uint16_t)((r >> 8) & 0x83FF); /* subnormal */
    const uint32_t exp = 1 + (r >> 8) % 17;
    return (uint16_t)(((r >> 16) & 0x8000) | exp << 10 | ((r >> 20) & 0x3FF));
}

/* ---- the peer ---- */

typedef void (*peer_deq_fn)(const void *x, float *y, int64_t k);
typedef void (*peer_q_fn)(const float *x, void *y, int64_t k);
typedef size_t (*peer_qw_fn)(const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *imatrix);
typedef struct { uint16_t bits; } peer_bf16;

static void *peer;
static const char *peer_why = "peer not opened";

/* A peer symbol; when the peer lacks it, peer_why says so for the skip that follows. */
static void *psym(const char *name) {
    static char why[128];
    void *p = peer_sym(peer, name);
    if (peer && !p) {
        snprintf(why, sizeof why, "%s not exported by the peer", name);
        peer_why = why;
    }
    return p;
}

/* ---- type table ---- */

static void test_table(void) {
    static const struct { int32_t id; const char *name; int blck, bytes; size_t size; } k[] = {
        {INFER_TYPE_Q4_0, "Q4_0", 32, 18, sizeof(block_q4_0)},     {INFER_TYPE_Q4_1, "Q4_1", 32, 20, sizeof(block_q4_1)},
        {INFER_TYPE_Q5_0, "Q5_0", 32, 22, sizeof(block_q5_0)},     {INFER_TYPE_Q5_1, "Q5_1", 32, 24, sizeof(block_q5_1)},
        {INFER_TYPE_Q8_0, "Q8_0", 32, 34, sizeof(block_q8_0)},     {INFER_TYPE_Q8_1, "Q8_1", 32, 36, sizeof(block_q8_1)},
        {INFER_TYPE_Q2_K, "Q2_K", 256, 84, sizeof(block_q2_K)},    {INFER_TYPE_Q3_K, "Q3_K", 256, 110, sizeof(block_q3_K)},
        {INFER_TYPE_Q4_K, "Q4_K", 256, 144, sizeof(block_q4_K)},   {INFER_TYPE_Q5_K, "Q5_K", 256, 176, sizeof(block_q5_K)},
        {INFER_TYPE_Q6_K, "Q6_K", 256, 210, sizeof(block_q6_K)},   {INFER_TYPE_Q8_K, "Q8_K", 256, 292, sizeof(block_q8_K)},
        {INFER_TYPE_IQ4_NL, "IQ4_NL", 32, 18, sizeof(block_iq4_nl)}, {INFER_TYPE_IQ4_XS, "IQ4_XS", 256, 136, sizeof(block_iq4_xs)},
        {INFER_TYPE_F32, "F32", 1, 4, 4},                          {INFER_TYPE_F16, "F16", 1, 2, 2},
        {INFER_TYPE_BF16, "BF16", 1, 2, 2},                        {INFER_TYPE_MXFP4, "MXFP4", 32, 17, sizeof(block_mxfp4)},
        {INFER_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, sizeof(block_iq2_xxs)}, {INFER_TYPE_IQ2_XS, "IQ2_XS", 256, 74, sizeof(block_iq2_xs)},
        {INFER_TYPE_IQ2_S, "IQ2_S", 256, 82, sizeof(block_iq2_s)}, {INFER_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98, sizeof(block_iq3_xxs)},
        {INFER_TYPE_IQ3_S, "IQ3_S", 256, 110, sizeof(block_iq3_s)}, {INFER_TYPE_IQ1_S, "IQ1_S", 256, 50, sizeof(block_iq1_s)},
        {INFER_TYPE_IQ1_M, "IQ1_M", 256, 56, sizeof(block_iq1_m)}, {INFER_TYPE_TQ1_0, "TQ1_0", 256, 54, sizeof(block_tq1_0)},
        {INFER_TYPE_TQ2_0, "TQ2_0", 256, 66, sizeof(block_tq2_0)},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const struct quant_type *t = quant_type(k[i].id);
        T_CHECK(t && strcmp(t->name, k[i].name) == 0, "type %d name", (int)k[i].id);
        if (!t) continue;
        T_CHECK(t->blck == k[i].blck && t->bytes == k[i].bytes && (size_t)t->bytes == k[i].size,
                "%s: blck %d bytes %d, expected %d/%d (struct %zu)", t->name, t->blck, t->bytes, k[i].blck, k[i].bytes, k[i].size);
        T_CHECK(infer_type_block_size(k[i].id) == k[i].blck && infer_type_block_bytes(k[i].id) == k[i].bytes &&
                    strcmp(infer_type_name(k[i].id), k[i].name) == 0, "%s: public infer_type_* disagree", k[i].name);
    }
    static const int32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, -1, 43, 1000};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        T_CHECK(quant_type(removed[i]) == NULL && infer_type_name(removed[i]) == NULL &&
                    infer_type_block_size(removed[i]) == 0 && infer_type_block_bytes(removed[i]) == 0 &&
                    !infer_type_supported(removed[i]), "id %d must have no layout", (int)removed[i]);
    }
    int n_layout = 0;
    for (int32_t id = 0; id < INFER_TYPE_COUNT; id++) n_layout += quant_type(id) != NULL;
    T_CHECK(n_layout == 43 - 8, "%d ids with a layout, expected 35", n_layout);
    /* spot checks of the rest of ggml's table (docs/quant.md §2) */
    T_CHECK(infer_type_block_bytes(16) == 66 && infer_type_block_bytes(29) == 56 && infer_type_block_bytes(39) == 17 &&
                infer_type_block_size(40) == 64 && infer_type_block_size(41) == 128 && infer_type_block_bytes(28) == 8,
            "IQ2_XXS/IQ1_M/MXFP4/NVFP4/Q1_0/F64 sizes");
    static const int32_t sup[] = {0, 1, 30, 8, 2, 3, 6, 7, 10, 11, 12, 13, 14, 20, 23, 39, 16, 17, 18, 19, 21, 22, 29, 34, 35};
    int n_sup = 0;
    for (int32_t id = 0; id < INFER_TYPE_COUNT; id++) n_sup += infer_type_supported(id);
    T_CHECK(n_sup == 25, "%d supported types, expected 25", n_sup);
    for (size_t i = 0; i < sizeof sup / sizeof sup[0]; i++) T_CHECK(infer_type_supported(sup[i]), "type %d supported", (int)sup[i]);
    T_CHECK(quant_type_by_name("q4_k") == 12 && quant_type_by_name("Q4_K") == 12 && quant_type_by_name("iq4_xs") == 23 &&
                quant_type_by_name("bf16") == 30 && quant_type_by_name("f32") == 0 && quant_type_by_name("Q4_K_M") == -1 &&
                quant_type_by_name("") == -1 && quant_type_by_name(NULL) == -1 && quant_type_by_name("Q4") == -1,
            "quant_type_by_name");
    T_CHECK(quant_row_bytes(INFER_TYPE_Q4_K, 512) == 288 && quant_row_bytes(INFER_TYPE_Q4_K, 100) == 0 &&
                quant_row_bytes(4, 32) == 0 && quant_row_bytes(INFER_TYPE_F16, 3) == 6, "quant_row_bytes");

    /* error paths */
    float out[256], in[256] = {0};
    uint8_t blk[512] = {0};
    T_CHECK(quant_dequant_row(INFER_TYPE_Q4_K, blk, out, 100) == INFER_E_ARG, "dequant of a partial block");
    T_CHECK(quant_dequant_row(4, blk, out, 32) == INFER_E_UNSUPPORTED, "dequant of a removed id");
    T_CHECK(quant_dequant_row(INFER_TYPE_Q8_1, blk, out, 32) == INFER_E_UNSUPPORTED, "Q8_1 has no decoder");
    T_CHECK(quant_dequant_row(40, blk, out, 64) == INFER_E_UNSUPPORTED, "NVFP4 has no decoder");
    T_CHECK(quant_dequant_row(INFER_TYPE_Q8_0, NULL, out, 32) == INFER_E_ARG, "NULL src");
    T_CHECK(quant_quantize_row(16, in, blk, 256) == INFER_E_UNSUPPORTED, "IQ2_XXS has no quantiser");
    T_CHECK(quant_quantize_row(INFER_TYPE_Q8_0, in, blk, -32) == INFER_E_ARG, "negative length");
    T_CHECK(strlen(infer_last_error()) > 0, "a failure leaves a message");
    T_CHECK(quant_dequant_row(INFER_TYPE_Q8_0, blk, out, 0) == INFER_OK, "an empty row is fine");
}

/* ---- conversions ---- */

static void test_iq4_table(void) {
    static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    int bad = 0;
    for (int k = 0; k < 16; k++) bad += blocks_iq4nl_value(k) != kv[k] || blocks_kvalues_iq4nl[k] != kv[k];
    T_CHECK(bad == 0, "IQ4 codebook: %d entries differ", bad);
}

/* float64 value of a half, from the IEEE definition */
static double half_ref(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_f16(void) {
    /* f16 -> f32: exhaustive, against float64 (finite), the NaN rule, and the peer */
    float (*p_h2f)(uint16_t) = (float (*)(uint16_t))psym("ggml_fp16_to_fp32");
    int bad_ref = 0, bad_peer = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = quant_f16_to_f32((uint16_t)h);
        if (((h >> 10) & 31) == 31) {
            const uint32_t want = (h & 0x8000) << 16 | 0x7F800000 | ((h & 0x3FF) ? 0x400000 : 0) | (h & 0x3FF) << 13;
            bad_ref += f32_bits(f) != want;
        } else {
            bad_ref += (double)f != half_ref((uint16_t)h) || (f == 0 && (f32_bits(f) >> 31) != (h >> 15));
        }
        if (p_h2f) bad_peer += f32_bits(f) != f32_bits(p_h2f((uint16_t)h));
    }
    T_CHECK(bad_ref == 0, "f16->f32: %d of 65536 differ from the IEEE value", bad_ref);
    if (p_h2f) T_CHECK(bad_peer == 0, "f16->f32: %d of 65536 differ from ggml_fp16_to_fp32", bad_peer);
    else T_SKIP_PEER("ggml_fp16_to_fp32: %s", peer_why);

    /* f32 -> f16: hand-worked special values */
    static const struct { uint32_t in; uint16_t out; } c[] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000}, {0x3F800000, 0x3C00}, {0xBF800000, 0xBC00},
        {0x7F800000, 0x7C00}, {0xFF800000, 0xFC00}, {0x7FC00000, 0x7E00}, {0xFFC00001, 0xFE00}, {0x7F800001, 0x7E00},
        {0x477FE000, 0x7BFF},             /* 65504, the largest half */
        {0x477FEFFF, 0x7BFF},             /* just below 65520 */
        {0x477FF000, 0x7C00},             /* 65520 rounds to Inf */
        {0x33800000, 0x0001},             /* 2^-24, the smallest subnormal */
        {0x33000000, 0x0000},             /* 2^-25: a tie, to even (0) */
        {0x33000001, 0x0001},             /* just above the tie */
        {0x33C00000, 0x0002},             /* 1.5 * 2^-24: a tie, to even (2) */
        {0x38800000, 0x0400},             /* 2^-14, the smallest normal */
        {0x387FE000, 0x03FF + 1},         /* 0x3FF.C ulps: rounds up into the smallest normal */
        {0x3F801000, 0x3C00},             /* 1 + 2^-11: a tie, to even */
        {0x3F803000, 0x3C02},             /* 1 + 3*2^-11: a tie, to even (up) */
        {0x3F801001, 0x3C01},             /* just above the tie */
        {0x00000001, 0x0000},             /* f32 denormal */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const uint16_t h = quant_f32_to_f16(bits_f32(c[i].in));
        T_CHECK(h == c[i].out, "f32->f16(0x%08x) = 0x%04x, expected 0x%04x", c[i].in, h, c[i].out);
    }
    /* every half survives f16 -> f32 -> f16 (NaNs come back as the canonical quiet NaN) */
    int bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const int nan = ((h >> 10) & 31) == 31 && (h & 0x3FF);
        bad_rt += quant_f32_to_f16(quant_f16_to_f32((uint16_t)h)) != (nan ? ((h & 0x8000) | 0x7E00) : h);
    }
    T_CHECK(bad_rt == 0, "f16 round trip: %d halves changed", bad_rt);

    /* f32 -> f16 and f32 -> bf16 over a stride of all 2^32 patterns, against the peer */
    uint16_t (*p_f2h)(float) = (uint16_t (*)(float))psym("ggml_fp32_to_fp16");
    peer_bf16 (*p_f2b)(float) = (peer_bf16 (*)(float))psym("ggml_fp32_to_bf16");
    float (*p_b2f)(peer_bf16) = (float (*)(peer_bf16))psym("ggml_bf16_to_fp32");
    if (p_f2h && p_f2b && p_b2f) {
        int bad_h = 0, bad_b = 0, bad_bf = 0;
        for (uint64_t u = 0; u < (1ull << 32); u += 509) {
            const float f = bits_f32((uint32_t)u);
            bad_h += quant_f32_to_f16(f) != p_f2h(f);
            bad_b += quant_f32_to_bf16(f) != p_f2b(f).bits;
        }
        for (uint32_t h = 0; h < 65536; h++) {
            const peer_bf16 b = {(uint16_t)h};
            bad_bf += f32_bits(quant_bf16_to_f32((uint16_t)h)) != f32_bits(p_b2f(b));
        }
        T_CHECK(bad_h == 0, "f32->f16: %d of 8.4M patterns differ from ggml_fp32_to_fp16", bad_h);
        T_CHECK(bad_b == 0, "f32->bf16: %d of 8.4M patterns differ from ggml_fp32_to_bf16", bad_b);
        T_CHECK(bad_bf == 0, "bf16->f32: %d of 65536 differ from ggml_bf16_to_fp32", bad_bf);
    } else {
        T_SKIP_PEER("f32->f16/bf16 against the peer: %s", peer_why);
    }

    /* bf16: hand-worked values (round to nearest even on the low 16 bits; NaN quieted) */
    static const struct { uint32_t in; uint16_t out; } b[] = {
        {0x3F800000, 0x3F80}, {0x3F808000, 0x3F80}, {0x3F818000, 0x3F82}, {0x3F808001, 0x3F81},
        {0x7F800000, 0x7F80}, {0x7F800001, 0x7FC0}, {0xFF810000, 0xFFC1}, {0x7F7FFFFF, 0x7F80}, {0x00000001, 0x0000},
        {0x00018000, 0x0002},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) {
        const uint16_t h = quant_f32_to_bf16(bits_f32(b[i].in));
        T_CHECK(h == b[i].out, "f32->bf16(0x%08x) = 0x%04x, expected 0x%04x", b[i].in, h, b[i].out);
    }
    T_CHECK(f32_bits(quant_bf16_to_f32(0x3F81)) == 0x3F810000, "bf16->f32");
}

/* ---- dequantisers ---- */

struct deq_case {
    int32_t type;
    const char *peer_name;
    int n_half;            /* half fields to make finite */
    size_t half_off[2];
    int f32_d;             /* Q8_K: d is f32 at 0 */
    int e8m0;              /* MXFP4: byte 0 is an exponent, kept at most 252 so that 12 * 2^(e-128) is finite */
    int iq1m;              /* IQ1_M: the f16 scale is the top nibbles of the four scale words */
};

/* Value i of block b through the per-element and per-sub-block decoders of blocks.h, which the CUDA
 * kernels use: they must agree with the whole-block decoder bit for bit. */
static void decode_alt(int32_t type, const void *b, float *by_value, float *by_sub) {
    switch (type) {
#define CASE32(T, t)                                                                                         \
    case T:                                                                                                  \
        for (int i = 0; i < 32; i++) by_value[i] = blocks_value_##t((const block_##t *)b, i);                \
        blocks_dequant_##t((const block_##t *)b, by_sub);                                                    \
        break;
#define CASE256(T, t)                                                                                        \
    case T:                                                                                                  \
        for (int i = 0; i < 256; i++) by_value[i] = blocks_value_##t((const block_##t *)b, i);               \
        for (int j = 0; j < 8; j++) blocks_sub_##t((const block_##t *)b, j, by_sub + 32 * j);                \
        break;
        CASE32(INFER_TYPE_Q4_0, q4_0)
        CASE32(INFER_TYPE_Q4_1, q4_1)
        CASE32(INFER_TYPE_Q5_0, q5_0)
        CASE32(INFER_TYPE_Q5_1, q5_1)
        CASE32(INFER_TYPE_Q8_0, q8_0)
        CASE32(INFER_TYPE_IQ4_NL, iq4_nl)
        CASE32(INFER_TYPE_MXFP4, mxfp4)
        CASE256(INFER_TYPE_Q2_K, q2_K)
        CASE256(INFER_TYPE_Q3_K, q3_K)
        CASE256(INFER_TYPE_Q4_K, q4_K)
        CASE256(INFER_TYPE_Q5_K, q5_K)
        CASE256(INFER_TYPE_Q6_K, q6_K)
        CASE256(INFER_TYPE_Q8_K, q8_K)
        CASE256(INFER_TYPE_IQ4_XS, iq4_xs)
        CASE256(INFER_TYPE_IQ2_XXS, iq2_xxs)
        CASE256(INFER_TYPE_IQ2_XS, iq2_xs)
        CASE256(INFER_TYPE_IQ2_S, iq2_s)
        CASE256(INFER_TYPE_IQ3_XXS, iq3_xxs)
        CASE256(INFER_TYPE_IQ3_S, iq3_s)
        CASE256(INFER_TYPE_IQ1_S, iq1_s)
        CASE256(INFER_TYPE_IQ1_M, iq1_m)
        CASE256(INFER_TYPE_TQ1_0, tq1_0)
        CASE256(INFER_TYPE_TQ2_0, tq2_0)
#undef CASE32
#undef CASE256
    default: break;
    }
}

static void test_dequant(void) {
    static const struct deq_case cases[] = {
        {INFER_TYPE_Q4_0, "dequantize_row_q4_0", 1, {offsetof(block_q4_0, d)}, 0, 0, 0},
        {INFER_TYPE_Q4_1, "dequantize_row_q4_1", 2, {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}, 0, 0, 0},
        {INFER_TYPE_Q5_0, "dequantize_row_q5_0", 1, {offsetof(block_q5_0, d)}, 0, 0, 0},
        {INFER_TYPE_Q5_1, "dequantize_row_q5_1", 2, {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}, 0, 0, 0},
        {INFER_TYPE_Q8_0, "dequantize_row_q8_0", 1, {offsetof(block_q8_0, d)}, 0, 0, 0},
        {INFER_TYPE_Q2_K, "dequantize_row_q2_K", 2, {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)}, 0, 0, 0},
        {INFER_TYPE_Q3_K, "dequantize_row_q3_K", 1, {offsetof(block_q3_K, d)}, 0, 0, 0},
        {INFER_TYPE_Q4_K, "dequantize_row_q4_K", 2, {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}, 0, 0, 0},
        {INFER_TYPE_Q5_K, "dequantize_row_q5_K", 2, {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}, 0, 0, 0},
        {INFER_TYPE_Q6_K, "dequantize_row_q6_K", 1, {offsetof(block_q6_K, d)}, 0, 0, 0},
        {INFER_TYPE_Q8_K, "dequantize_row_q8_K", 0, {0}, 1, 0, 0},
        {INFER_TYPE_IQ4_NL, "dequantize_row_iq4_nl", 1, {offsetof(block_iq4_nl, d)}, 0, 0, 0},
        {INFER_TYPE_IQ4_XS, "dequantize_row_iq4_xs", 1, {offsetof(block_iq4_xs, d)}, 0, 0, 0},
        {INFER_TYPE_MXFP4, "dequantize_row_mxfp4", 0, {0}, 0, 1, 0},
        {INFER_TYPE_IQ2_XXS, "dequantize_row_iq2_xxs", 1, {offsetof(block_iq2_xxs, d)}, 0, 0, 0},
        {INFER_TYPE_IQ2_XS, "dequantize_row_iq2_xs", 1, {offsetof(block_iq2_xs, d)}, 0, 0, 0},
        {INFER_TYPE_IQ2_S, "dequantize_row_iq2_s", 1, {offsetof(block_iq2_s, d)}, 0, 0, 0},
        {INFER_TYPE_IQ3_XXS, "dequantize_row_iq3_xxs", 1, {offsetof(block_iq3_xxs, d)}, 0, 0, 0},
        {INFER_TYPE_IQ3_S, "dequantize_row_iq3_s", 1, {offsetof(block_iq3_s, d)}, 0, 0, 0},
        {INFER_TYPE_IQ1_S, "dequantize_row_iq1_s", 1, {offsetof(block_iq1_s, d)}, 0, 0, 0},
        {INFER_TYPE_IQ1_M, "dequantize_row_iq1_m", 0, {0}, 0, 0, 1},
        {INFER_TYPE_TQ1_0, "dequantize_row_tq1_0", 1, {offsetof(block_tq1_0, d)}, 0, 0, 0},
        {INFER_TYPE_TQ2_0, "dequantize_row_tq2_0", 1, {offsetof(block_tq2_0, d)}, 0, 0, 0},
    };
    enum { ROWS = 300, MAXN = 2048 };
    static uint8_t buf[MAXN / 32 * 36 + MAXN / 256 * 292];
    static float ours[MAXN], theirs[MAXN], by_value[256], by_sub[256];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct quant_type *t = quant_type(cases[c].type);
        peer_deq_fn fn = peer ? (peer_deq_fn)psym(cases[c].peer_name) : NULL;
        int bad_peer = 0, bad_alt = 0, bad_f = 0;
        for (int r = 0; r < ROWS; r++) {
            const int64_t nb = 1 + (int64_t)(rng_u64() % (uint64_t)(MAXN / t->blck)), n = nb * t->blck;
            for (size_t i = 0; i < (size_t)(nb * t->bytes); i++) buf[i] = (uint8_t)rng_u64();
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *blk = buf + b * t->bytes;
                for (int h = 0; h < cases[c].n_half; h++) {
                    const uint16_t v = rand_half();
                    memcpy(blk + cases[c].half_off[h], &v, 2);
                }
                if (cases[c].e8m0) blk[0] = (uint8_t)(rng_u64() % 253);
                if (cases[c].iq1m) blocks_iq1_m_put_half((block_iq1_m *)blk, rand_half());
                if (cases[c].f32_d) {
                    const float d = (float)(rng_unit() * 2 - 1) * 1e-2f;
                    memcpy(blk, &d, 4);
                }
            }
            T_CHECK(quant_dequant_row(cases[c].type, buf, ours, n) == INFER_OK, "%s dequant", t->name);
            for (int64_t i = 0; i < n; i++) bad_f += !isfinite(ours[i]);
            if (fn) {
                fn(buf, theirs, n);
                bad_peer += memcmp(ours, theirs, (size_t)n * sizeof(float)) != 0;
            }
            for (int64_t b = 0; b < nb; b++) {
                decode_alt(cases[c].type, buf + b * t->bytes, by_value, by_sub);
                bad_alt += memcmp(by_value, ours + b * t->blck, (size_t)t->blck * 4) != 0 ||
                           memcmp(by_sub, ours + b * t->blck, (size_t)t->blck * 4) != 0;
            }
        }
        T_CHECK(bad_f == 0, "%s: %d non-finite values from finite scales", t->name, bad_f);
        T_CHECK(bad_alt == 0, "%s: blocks_value/blocks_sub disagree with blocks_dequant in %d blocks", t->name, bad_alt);
        if (fn) T_CHECK(bad_peer == 0, "%s: %d of %d rows differ from %s", t->name, bad_peer, ROWS, cases[c].peer_name);
        else T_SKIP_PEER("%s against the peer: %s", t->name, peer_why);
    }
    /* a hand-worked Q4_K block: d = 1, dmin = 0.5, sub-block 5 has sc = 0x2A, m = 0x15 */
    block_q4_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3C00;
    b.dmin = 0x3800;
    b.scales[5 + 4] = 0xA | 0x5 << 4;           /* low nibbles of sc5, m5 */
    b.scales[1] = 2 << 6;                        /* high bits of sc5 */
    b.scales[5] = 1 << 6;                        /* high bits of m5 */
    b.qs[32 * 2 + 7] = 0x9 << 4;                 /* element 5*32+7: high nibble of group 2 */
    T_CHECK(blocks_value_q4_K(&b, 5 * 32 + 7) == 42.0f * 9 - 0.5f * 21, "hand Q4_K value: %g",
            (double)blocks_value_q4_K(&b, 5 * 32 + 7));
    /* a hand-worked MXFP4 block: e = 130 is a scale of 2^2 (halved E8M0); byte 3 holds code 0xB (-1.5, doubled -3)
     * for element 3 and code 0x9 (-0.5, doubled -1) for element 19; e = 0 is the subnormal 2^-128 */
    block_mxfp4 m;
    memset(&m, 0, sizeof m);
    m.e = 130;
    m.qs[3] = 0x9B;
    m.qs[5] = 0x07;
    T_CHECK(blocks_value_mxfp4(&m, 3) == -12.0f && blocks_value_mxfp4(&m, 19) == -4.0f &&
                blocks_value_mxfp4(&m, 5) == 48.0f && blocks_value_mxfp4(&m, 21) == 0.0f,
            "hand MXFP4 values: %g %g %g", (double)blocks_value_mxfp4(&m, 3), (double)blocks_value_mxfp4(&m, 19),
            (double)blocks_value_mxfp4(&m, 5));
    m.e = 0;
    T_CHECK(blocks_value_mxfp4(&m, 5) == ldexpf(12.0f, -128), "hand MXFP4 at e = 0: %g", (double)blocks_value_mxfp4(&m, 5));
}

/* ---- quantisers ---- */

enum { QN = 4096 };

/* Row kinds: gaussian at several scales (0-2), all zeros (3), a single outlier, uniform, sparse; then
 * ties (a coarse grid: equal magnitudes of both signs, values halfway between codes), tiny (1e-6: f16
 * scales subnormal; 1e-30: they round to 0) and huge (1e4; 1e30: f16 scales overflow) magnitudes, and
 * zeros of both signs. Kinds 0-2 have error bounds; 3 and 12 must decode to zeros. */
enum { ROW_KINDS = 13 };
static void gen_row(int kind, float *x, int n) {
    const float scales[] = {1e-3f, 1.0f, 37.0f};
    for (int i = 0; i < n; i++) x[i] = 0;
    switch (kind % ROW_KINDS) {
    case 0: case 1: case 2: for (int i = 0; i < n; i++) x[i] = scales[kind % ROW_KINDS] * rng_gauss(); break;
    case 3: break;
    case 4: for (int i = 0; i < n; i++) x[i] = 0.01f * rng_gauss(); x[rng_u64() % (uint64_t)n] = 50.0f; break;
    case 5: for (int i = 0; i < n; i++) x[i] = (float)(rng_unit() * 2 - 1); break;
    case 6: for (int i = 0; i < n; i += 1 + (int)(rng_u64() % 40)) x[i] = rng_gauss(); break;
    case 7: /* ties: per 16 values, half-integer multiples of k/32 (k in 8..20) after a first group of
             * integers (step 1, fitted exactly): Q3_K's stored scales then reproduce each step exactly
             * and its requantisation meets exact halves */
        for (int g = 0; g < n / 16; g++) {
            static const float half[16] = {-4, -3, -2.5f, -2, -1.5f, -1, -0.5f, 0, 0.5f, 1, 1.5f, 2, 2.5f, 3, -4, 3};
            const float step = g % 16 ? (float)(8 + (int)(rng_u64() % 13)) / 32 : 1.0f;
            for (int i = 0; i < 16; i++) x[16 * g + i] = g % 16 ? step * half[(i + 3 * g) % 16] : (float)(i % 8 - 4);
        }
        break;
    case 8: for (int i = 0; i < n; i++) x[i] = 1e-6f * rng_gauss(); break;
    case 9: for (int i = 0; i < n; i++) x[i] = 1e-30f * rng_gauss(); break;
    case 10: for (int i = 0; i < n; i++) x[i] = 1e4f * rng_gauss(); break;
    case 11: for (int i = 0; i < n; i++) x[i] = 1e30f * rng_gauss(); break;
    case 12: for (int i = 0; i < n; i++) x[i] = rng_u64() & 1 ? -0.0f : 0.0f; break;
    }
}

static double rel_rms(const float *x, const float *y, int n) {
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) {
        e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

struct q_case {
    int32_t type;
    const char *peer_name;
    int iq_chunk;     /* the peer entry is quantize_<t>(src, dst, nrow, n, NULL) rather than a _ref */
    double max_rel;   /* bound on gaussian RMS relative error */
};

static void test_quantize(void) {
    /* Error bounds: a little above what ggml's own quantisers reach on gaussian rows of scale 1e-3,
     * 1 and 37 (measured; ours are bit-identical). At scale 1e-3 the f16 block scale of Q6_K is
     * subnormal, which costs it 2.15% against 1.8% at scale 1. */
    static const struct q_case cases[] = {
        {INFER_TYPE_Q8_0, "quantize_row_q8_0_ref", 0, 0.006},   {INFER_TYPE_Q8_1, "quantize_row_q8_1_ref", 0, 0.006},
        {INFER_TYPE_Q8_K, "quantize_row_q8_K_ref", 0, 0.008},   {INFER_TYPE_Q4_0, "quantize_row_q4_0_ref", 0, 0.095},
        {INFER_TYPE_Q4_K, "quantize_row_q4_K_ref", 0, 0.077},   {INFER_TYPE_Q5_K, "quantize_row_q5_K_ref", 0, 0.040},
        {INFER_TYPE_Q6_K, "quantize_row_q6_K_ref", 0, 0.023},   {INFER_TYPE_IQ4_NL, "quantize_iq4_nl", 1, 0.083},
        {INFER_TYPE_IQ4_XS, "quantize_iq4_xs", 1, 0.086},   {INFER_TYPE_Q5_0, "quantize_row_q5_0_ref", 0, 0.046},
        {INFER_TYPE_Q5_1, "quantize_row_q5_1_ref", 0, 0.042},   {INFER_TYPE_Q4_1, "quantize_row_q4_1_ref", 0, 0.085},
        {INFER_TYPE_Q2_K, "quantize_row_q2_K_ref", 0, 0.31},    {INFER_TYPE_Q3_K, "quantize_row_q3_K_ref", 0, 0.16},
        {INFER_TYPE_MXFP4, "quantize_row_mxfp4_ref", 0, 0.13},
    };
    enum { ROWS = 4 * ROW_KINDS };
    static float x[QN], y[QN], yp[QN];
    static uint8_t ours[QN * sizeof(float)], theirs[sizeof ours];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct quant_type *t = quant_type(cases[c].type);
        void *fn = peer ? psym(cases[c].peer_name) : NULL;
        const size_t rb = quant_row_bytes(cases[c].type, QN);
        int64_t blocks = 0, same = 0;
        double worst = 0, worst_vs_peer = 0;
        for (int r = 0; r < ROWS; r++) {
            gen_row(r, x, QN);
            T_CHECK(quant_quantize_row(cases[c].type, x, ours, QN) == INFER_OK, "%s quantize", t->name);
            /* Q8_1 has no decoder: decode it by hand, and check s = d * sum(q) */
            if (cases[c].type == INFER_TYPE_Q8_1) {
                int bad_s = 0;
                for (int b = 0; b < QN / 32; b++) {
                    const block_q8_1 *q = (const block_q8_1 *)ours + b;
                    int sum = 0;
                    for (int i = 0; i < 32; i++) sum += q->qs[i], y[32 * b + i] = (float)q->qs[i] * quant_f16_to_f32(q->d);
                    const double want = sum * (double)quant_f16_to_f32(q->d);
                    if (fabs(want) > 65000) continue; /* s overflows f16 (huge rows) */
                    /* s was rounded once from the f32 d, d once to f16 (absolutely, by 2^-25 when subnormal) */
                    bad_s += fabs(quant_f16_to_f32(q->s) - want) > 1e-3 * fabs(want) + abs(sum) * 0x1p-25 + 0x1p-24;
                }
                T_CHECK(bad_s == 0, "Q8_1: %d blocks with s != d * sum(q)", bad_s);
            } else {
                T_CHECK(quant_dequant_row(cases[c].type, ours, y, QN) == INFER_OK, "%s round trip", t->name);
            }
            const double e = rel_rms(x, y, QN);
            if (r % ROW_KINDS <= 2 && e > worst) worst = e; /* the gaussian rows */
            if (r % ROW_KINDS == 3 || r % ROW_KINDS == 12) {
                int nz = 0;
                for (int i = 0; i < QN; i++) nz += y[i] != 0;
                T_CHECK(nz == 0, "%s: an all-zero row decodes to %d nonzeros", t->name, nz);
            }
            if (!fn) continue;
            memset(theirs, 0, rb); /* ggml leaves Q8_K bsums of all-zero blocks unwritten */
            if (cases[c].iq_chunk) ((peer_qw_fn)fn)(x, theirs, 1, QN, NULL);
            else ((peer_q_fn)fn)(x, theirs, QN);
            for (int b = 0; b < QN / t->blck; b++, blocks++)
                same += memcmp(ours + (size_t)b * t->bytes, theirs + (size_t)b * t->bytes, (size_t)t->bytes) == 0;
            if (cases[c].type != INFER_TYPE_Q8_1) {
                quant_dequant_row(cases[c].type, theirs, yp, QN);
                const double ep = rel_rms(x, yp, QN);
                if (ep > 0 && e / ep - 1 > worst_vs_peer) worst_vs_peer = e / ep - 1;
            }
        }
        T_CHECK(worst < cases[c].max_rel, "%s: gaussian RMS relative error %.4f, bound %.4f", t->name, worst, cases[c].max_rel);
        if (fn) {
            printf("%-7s %lld of %lld blocks identical to %s; worst gaussian rel. RMS error %.5f\n", t->name,
                   (long long)same, (long long)blocks, cases[c].peer_name, worst);
            T_CHECK(same == blocks, "%s: %lld of %lld blocks differ from %s (our error up to %.2f%% above the peer's)",
                    t->name, (long long)(blocks - same), (long long)blocks, cases[c].peer_name, 100 * worst_vs_peer);
            T_CHECK(worst_vs_peer <= 0.01, "%s: error %.2f%% above the peer's", t->name, 100 * worst_vs_peer);
        } else {
            T_SKIP_PEER("%s against %s: %s", t->name, cases[c].peer_name, peer_why);
        }
    }

    /* Q8 quantisers: every value within half a step of its input (d is rounded to f16 after q) */
    for (int r = 0; r < 7; r++) {
        gen_row(r, x, QN);
        quant_quantize_row(INFER_TYPE_Q8_0, x, ours, QN);
        int bad = 0;
        for (int b = 0; b < QN / 32; b++) {
            const block_q8_0 *q = (const block_q8_0 *)ours + b;
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
            const double d = amax / 127.0;
            for (int i = 0; i < 32; i++) bad += fabs(q->qs[i] * d - x[32 * b + i]) > 0.5 * d * (1 + 1e-5) + 1e-30;
        }
        T_CHECK(bad == 0, "Q8_0 row kind %d: %d values off by more than half a step", r, bad);
        quant_quantize_row(INFER_TYPE_Q8_K, x, ours, QN);
        bad = 0;
        for (int b = 0; b < QN / 256; b++) {
            const block_q8_K *q = (const block_q8_K *)ours + b;
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int i = 0; i < 16; i++) s += q->qs[16 * g + i];
                bad += s != q->bsums[g];
            }
            for (int i = 0; i < 256; i++) bad += fabs((double)q->d * q->qs[i] - x[256 * b + i]) > 0.5 * fabs(q->d) * (1 + 1e-5) + 1e-30;
        }
        T_CHECK(bad == 0, "Q8_K row kind %d: %d bad values or bsums", r, bad);
    }

    /* F16/BF16 quantise = the conversion, and dequant inverts it exactly */
    for (int i = 0; i < QN; i++) x[i] = 100 * rng_gauss();
    quant_quantize_row(INFER_TYPE_F16, x, ours, QN);
    quant_dequant_row(INFER_TYPE_F16, ours, y, QN);
    int bad_h = 0;
    for (int i = 0; i < QN; i++) bad_h += y[i] != quant_f16_to_f32(quant_f32_to_f16(x[i])) || fabs(y[i] - x[i]) > fabs(x[i]) * 0x1p-11;
    T_CHECK(bad_h == 0, "F16 row round trip: %d bad", bad_h);
    quant_quantize_row(INFER_TYPE_BF16, x, ours, QN);
    quant_dequant_row(INFER_TYPE_BF16, ours, y, QN);
    bad_h = 0;
    for (int i = 0; i < QN; i++) bad_h += fabs(y[i] - x[i]) > fabs(x[i]) * 0x1p-8;
    T_CHECK(bad_h == 0, "BF16 row round trip: %d bad", bad_h);
    quant_quantize_row(INFER_TYPE_F32, x, ours, QN);
    T_CHECK(memcmp(ours, x, sizeof x) == 0, "F32 quantise is a copy");
}

int main(void) {
    peer = peer_open("libggml-base.so", &peer_why);
    test_table();
    test_iq4_table();
    test_f16();
    test_dequant();
    test_quantize();
    return t_done();
}
