/* blocks.h: ggml's quantised block layouts and their per-block decoders, written once for the CPU
 * (gcc, C11) and the CUDA kernels (nvcc, C++): every function is `static inline INFER_HD`.
 *
 * Why one header: a weight must decode to the same bits on the host and on the device, and both
 * must equal llama.cpp's dequantize_row_<t> (docs/quant.md §3). So the half/bfloat16
 * conversions are integer bit manipulation (no F16C, no cuda_fp16.h), half fields are uint16_t, and
 * every value is computed in ggml's order: (d * scale_int) * q_int - (dmin * min_int). The products
 * before a final add are exact in binary32 (§3.0), so FMA contraction (nvcc's default) cannot
 * change a result; Q6_K's (d*sc)*q may round but has no add after it.
 *
 * Layouts (byte offsets in one block; little-endian; a row of n values is n/blck blocks):
 *   Q4_0   18 B / 32:  d:f16 @0, qs[16] @2            low nibbles = values 0..15, high = 16..31
 *   Q4_1   20 B / 32:  d @0, m @2, qs[16] @4          y = q*d + m
 *   Q5_0   22 B / 32:  d @0, qh:u32 @2, qs[16] @6     bit j of qh = bit 4 of value j
 *   Q5_1   24 B / 32:  d @0, m @2, qh @4, qs[16] @8
 *   Q8_0   34 B / 32:  d @0, qs:i8[32] @2
 *   Q8_1   36 B / 32:  d @0, s @2 (= d * sum q on the CPU), qs:i8[32] @4
 *   Q2_K   84 B / 256: scales[16] @0 (lo nibble scale, hi nibble min), qs[64] @16, d @80, dmin @82
 *   Q3_K  110 B / 256: hmask[32] @0, qs[64] @32, scales[12] @96 (16 x 6-bit), d @108
 *   Q4_K  144 B / 256: d @0, dmin @2, scales[12] @4 (8 x (6-bit sc, 6-bit m)), qs[128] @16
 *   Q5_K  176 B / 256: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
 *   Q6_K  210 B / 256: ql[128] @0, qh[64] @128, scales:i8[16] @192, d @208
 *   Q8_K  292 B / 256: d:f32 @0, qs:i8[256] @4, bsums:i16[16] @260
 *   IQ4_NL 18 B / 32:  d @0, qs[16] @2                 y = d * kvalues[nibble]
 *   IQ4_XS 136 B / 256: d @0, scales_h:u16 @2, scales_l[4] @4, qs[128] @8
 *   MXFP4  17 B / 32:  e:u8 @0, qs[16] @1              y = 2^(e-128) * kvalues_mxfp4[nibble] (E2M1 doubled)
 *   IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0: blocks_iq.h (included at the end)
 *
 * Decoders, for each type t above except Q8_1 (activations only):
 *   blocks_dequant_<t>(const block_<t> *b, float *y)    the whole block (blck values)
 *   blocks_value_<t>(const block_<t> *b, int i)         value i of the block
 *   blocks_sub_<t>(const block_<t> *b, int j, float *y) 32 values 32j..32j+31 (256-value types)
 * plus blocks_get_scale_min_k4 (Q4_K/Q5_K scales), blocks_q3_K_scale, blocks_iq4_xs_scale,
 * blocks_iq4nl_value and blocks_kvalues_iq4nl[16] (a __device__ array under nvcc), and for MXFP4
 * blocks_mxfp4_value, blocks_kvalues_mxfp4[16] and blocks_e8m0_half.
 */
#ifndef INFER_BLOCKS_H
#define INFER_BLOCKS_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDA_ARCH__
#include "ptx.cuh" /* the device conversion below */
#endif

#ifdef __CUDACC__
#define INFER_HD __host__ __device__
#else
#define INFER_HD
#endif

#ifdef __cplusplus
#define BLOCKS_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define BLOCKS_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

/* ---- block structs (half fields are raw IEEE binary16 bits) ---- */

typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[32]; } block_q8_1;
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } block_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[128]; } block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[32]; uint8_t qs[128]; } block_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } block_q8_K;
typedef struct { uint16_t d; uint8_t qs[16]; } block_iq4_nl;
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } block_iq4_xs;
typedef struct { uint8_t e; uint8_t qs[16]; } block_mxfp4;

BLOCKS_ASSERT(sizeof(block_q4_0) == 18, "block_q4_0 is 18 bytes");
BLOCKS_ASSERT(sizeof(block_q4_1) == 20, "block_q4_1 is 20 bytes");
BLOCKS_ASSERT(sizeof(block_q5_0) == 22, "block_q5_0 is 22 bytes");
BLOCKS_ASSERT(sizeof(block_q5_1) == 24, "block_q5_1 is 24 bytes");
BLOCKS_ASSERT(sizeof(block_q8_0) == 34, "block_q8_0 is 34 bytes");
BLOCKS_ASSERT(sizeof(block_q8_1) == 36, "block_q8_1 is 36 bytes");
BLOCKS_ASSERT(sizeof(block_q2_K) == 84, "block_q2_K is 84 bytes");
BLOCKS_ASSERT(sizeof(block_q3_K) == 110, "block_q3_K is 110 bytes");
BLOCKS_ASSERT(sizeof(block_q4_K) == 144, "block_q4_K is 144 bytes");
BLOCKS_ASSERT(sizeof(block_q5_K) == 176, "block_q5_K is 176 bytes");
BLOCKS_ASSERT(sizeof(block_q6_K) == 210, "block_q6_K is 210 bytes");
BLOCKS_ASSERT(sizeof(block_q8_K) == 292, "block_q8_K is 292 bytes");
BLOCKS_ASSERT(sizeof(block_iq4_nl) == 18, "block_iq4_nl is 18 bytes");
BLOCKS_ASSERT(sizeof(block_iq4_xs) == 136, "block_iq4_xs is 136 bytes");
BLOCKS_ASSERT(sizeof(block_mxfp4) == 17, "block_mxfp4 is 17 bytes");

/* ---- the 16-entry codebooks (IQ4_NL / IQ4_XS, MXFP4) ---- */

/* Each as an array for kernels that index it (a __device__ array under nvcc, so host code there must use
 * blocks_<book>_value instead), and as two constants holding its 16 signed bytes (entry 0 in the low byte). */
#ifdef __CUDACC__
#define BLOCKS_CODEBOOK(name, values) static __device__ const int8_t name[16] = values
#else
#define BLOCKS_CODEBOOK(name, values) static const int8_t name[16] = values
#endif

/* Entry k (0..15) of the codebook packed as lo (entries 0..7) and hi (8..15), without a memory table. */
static inline INFER_HD int blocks_codebook_entry(uint64_t lo, uint64_t hi, int k) {
    return (int)(int8_t)(uint8_t)(((k < 8 ? lo : hi) >> (8 * (k & 7))) & 0xFF);
}

#define BLOCKS_KVALUES_IQ4NL {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
BLOCKS_CODEBOOK(blocks_kvalues_iq4nl, BLOCKS_KVALUES_IQ4NL);

static inline INFER_HD int blocks_iq4nl_value(int k) {
    return blocks_codebook_entry(0xF6EADDCFBFAD9881ull,  /* -127 -104 -83 -65 -49 -35 -22 -10 */
                                 0x7159453526190D01ull,  /*    1   13  25  38  53  69  89 113 */
                                 k);
}

/* MXFP4's codebook: the E2M1 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled to integers (the
 * block scale is halved to match, blocks_e8m0_half). */
#define BLOCKS_KVALUES_MXFP4 {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
BLOCKS_CODEBOOK(blocks_kvalues_mxfp4, BLOCKS_KVALUES_MXFP4);

static inline INFER_HD int blocks_mxfp4_value(int k) {
    return blocks_codebook_entry(0x0C08060403020100ull,  /* 0 1 2 3 4 6 8 12 */
                                 0xF4F8FAFCFDFEFF00ull,  /* 0 -1 -2 -3 -4 -6 -8 -12 */
                                 k);
}

/* ---- f16 / bf16 <-> f32, bit-exact with ggml ---- */

static inline INFER_HD float blocks_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* An E8M0 scale halved, 2^(e-128), as ggml's GGML_E8M0_TO_FP32_HALF: exponent bits e-1, and for e = 0, 1 the
 * subnormals 2^-128, 2^-127. */
static inline INFER_HD float blocks_e8m0_half(uint8_t e) {
    return blocks_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

static inline INFER_HD uint32_t blocks_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* Exact: subnormals scale by 2^-24 (exact), Inf stays Inf, NaN keeps its payload with the quiet bit
 * set (what ggml's conversion and F16C give). */
static inline INFER_HD float blocks_f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    /* note: one hardware conversion instead of ~15 integer ops on the GPU's hot path; identical
     * for every finite and infinite value (the conversion is exact), NaN payloads aside. */
    return ptx_cvt_f32_f16(h);
#endif
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0x1F) return blocks_bits_f32(sign | 0x7F800000u | (man ? 0x400000u : 0) | (man << 13));
    if (exp == 0) return blocks_bits_f32(sign | blocks_f32_bits((float)man * (1.0f / 16777216.0f)));
    return blocks_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even; |x| >= 65520 -> Inf; NaN -> 0x7E00 | sign (ggml_compute_fp32_to_fp16). */
static inline INFER_HD uint16_t blocks_f32_to_f16(float f) {
    const uint32_t u = blocks_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00;
    if (a >= 0x477FF000u) return sign | 0x7C00; /* 65520: the first value that rounds to Inf */
    uint32_t q, rem, half;
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        if (a < 0x33000000u) return sign;  /* below 2^-25: rounds to 0 */
        const uint32_t shift = 126 - (a >> 23); /* 14..24 */
        const uint32_t m = (a & 0x7FFFFF) | 0x800000;
        q = m >> shift;
        rem = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
    } else {
        const uint32_t r = a - 0x38000000u; /* rebias the exponent from 127 to 15 */
        q = r >> 13;
        rem = r & 0x1FFF;
        half = 0x1000;
    }
    if (rem > half || (rem == half && (q & 1))) q++; /* a carry into the exponent is correct */
    return (uint16_t)(sign | q);
}

static inline INFER_HD float blocks_bf16_to_f32(uint16_t h) { return blocks_bits_f32((uint32_t)h << 16); }

/* Round to nearest even; NaN quieted (ggml_compute_fp32_to_bf16). */
static inline INFER_HD uint16_t blocks_f32_to_bf16(float f) {
    const uint32_t u = blocks_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* ---- scale unpacking ---- */

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes q. */
/* Q4_K/Q5_K: 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes read as three
 * little-endian words s0 s1 s2 (the form the GPU loads them in). */
static inline INFER_HD void blocks_get_scale_min_k4_u32(int j, uint32_t s0, uint32_t s1, uint32_t s2, uint8_t *sc,
                                                      uint8_t *m) {
    const int sh = 8 * (j & 3);
    if (j < 4) {
        *sc = (uint8_t)((s0 >> sh) & 63);
        *m = (uint8_t)((s1 >> sh) & 63);
    } else {
        *sc = (uint8_t)(((s2 >> sh) & 0xF) | (((s0 >> sh) >> 6 & 3) << 4));
        *m = (uint8_t)(((s2 >> sh) >> 4 & 0xF) | (((s1 >> sh) >> 6 & 3) << 4));
    }
}

static inline INFER_HD void blocks_get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    uint32_t s[3];
    for (int i = 0; i < 3; i++)
        s[i] = (uint32_t)q[4 * i] | (uint32_t)q[4 * i + 1] << 8 | (uint32_t)q[4 * i + 2] << 16 | (uint32_t)q[4 * i + 3] << 24;
    blocks_get_scale_min_k4_u32(j, s[0], s[1], s[2], sc, m);
}

/* Q3_K: signed 6-bit scale of sub-block i (0..15, 16 values each), -32..31. */
static inline INFER_HD int blocks_q3_K_scale(const block_q3_K *b, int i) {
    const int lo = i < 8 ? b->scales[i] & 0xF : b->scales[i - 8] >> 4;
    const int hi = (b->scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* IQ4_XS: the 6-bit scale of sub-block ib (0..7), still biased by 32. */
static inline INFER_HD int blocks_iq4_xs_scale(const block_iq4_xs *b, int ib) {
    return ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b->scales_h >> (2 * ib)) & 3) << 4);
}

/* ---- 32-value types ---- */

static inline INFER_HD float blocks_value_q4_0(const block_q4_0 *b, int i) {
    const int q = (i < 16 ? b->qs[i] & 0xF : b->qs[i - 16] >> 4) - 8;
    return (float)q * blocks_f16_to_f32(b->d);
}
static inline INFER_HD void blocks_dequant_q4_0(const block_q4_0 *b, float *y) {
    const float d = blocks_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b->qs[j] & 0xF) - 8) * d;
        y[j + 16] = (float)((b->qs[j] >> 4) - 8) * d;
    }
}

static inline INFER_HD float blocks_value_q4_1(const block_q4_1 *b, int i) {
    const int q = i < 16 ? b->qs[i] & 0xF : b->qs[i - 16] >> 4;
    return (float)q * blocks_f16_to_f32(b->d) + blocks_f16_to_f32(b->m);
}
static inline INFER_HD void blocks_dequant_q4_1(const block_q4_1 *b, float *y) {
    const float d = blocks_f16_to_f32(b->d), m = blocks_f16_to_f32(b->m);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b->qs[j] & 0xF) * d + m;
        y[j + 16] = (float)(b->qs[j] >> 4) * d + m;
    }
}

static inline INFER_HD uint32_t blocks_qh32(const uint8_t *qh) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

/* The 5-bit unsigned quant i of a Q5_0/Q5_1 block. */
static inline INFER_HD int blocks_q5_q(const uint8_t *qs, uint32_t qh, int i) {
    const int lo = i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
    return lo | (int)((qh >> i) & 1) << 4;
}

static inline INFER_HD float blocks_value_q5_0(const block_q5_0 *b, int i) {
    return (float)(blocks_q5_q(b->qs, blocks_qh32(b->qh), i) - 16) * blocks_f16_to_f32(b->d);
}
static inline INFER_HD void blocks_dequant_q5_0(const block_q5_0 *b, float *y) {
    const float d = blocks_f16_to_f32(b->d);
    const uint32_t qh = blocks_qh32(b->qh);
    for (int i = 0; i < 32; i++) y[i] = (float)(blocks_q5_q(b->qs, qh, i) - 16) * d;
}

static inline INFER_HD float blocks_value_q5_1(const block_q5_1 *b, int i) {
    return (float)blocks_q5_q(b->qs, blocks_qh32(b->qh), i) * blocks_f16_to_f32(b->d) + blocks_f16_to_f32(b->m);
}
static inline INFER_HD void blocks_dequant_q5_1(const block_q5_1 *b, float *y) {
    const float d = blocks_f16_to_f32(b->d), m = blocks_f16_to_f32(b->m);
    const uint32_t qh = blocks_qh32(b->qh);
    for (int i = 0; i < 32; i++) y[i] = (float)blocks_q5_q(b->qs, qh, i) * d + m;
}

static inline INFER_HD float blocks_value_q8_0(const block_q8_0 *b, int i) {
    return (float)b->qs[i] * blocks_f16_to_f32(b->d);
}
static inline INFER_HD void blocks_dequant_q8_0(const block_q8_0 *b, float *y) {
    const float d = blocks_f16_to_f32(b->d);
    for (int i = 0; i < 32; i++) y[i] = (float)b->qs[i] * d;
}

static inline INFER_HD float blocks_value_iq4_nl(const block_iq4_nl *b, int i) {
    const int k = i < 16 ? b->qs[i] & 0xF : b->qs[i - 16] >> 4;
    return blocks_f16_to_f32(b->d) * (float)blocks_iq4nl_value(k);
}
static inline INFER_HD void blocks_dequant_iq4_nl(const block_iq4_nl *b, float *y) {
    const float d = blocks_f16_to_f32(b->d);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)blocks_iq4nl_value(b->qs[j] & 0xF);
        y[j + 16] = d * (float)blocks_iq4nl_value(b->qs[j] >> 4);
    }
}

static inline INFER_HD float blocks_value_mxfp4(const block_mxfp4 *b, int i) {
    const int k = i < 16 ? b->qs[i] & 0xF : b->qs[i - 16] >> 4;
    return (float)blocks_mxfp4_value(k) * blocks_e8m0_half(b->e);
}
static inline INFER_HD void blocks_dequant_mxfp4(const block_mxfp4 *b, float *y) {
    const float d = blocks_e8m0_half(b->e);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)blocks_mxfp4_value(b->qs[j] & 0xF) * d;
        y[j + 16] = (float)blocks_mxfp4_value(b->qs[j] >> 4) * d;
    }
}

/* ---- 256-value K types: element e, sub-block j = e/32 ---- */

/* Q2_K: h = e/128 selects a 32-byte half of qs, (e%128)/32 the 2-bit plane, e/16 the scale. */
static inline INFER_HD float blocks_value_q2_K(const block_q2_K *b, int e) {
    const int r = e % 128, sc = b->scales[e / 16];
    const int q = (b->qs[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3;
    return blocks_f16_to_f32(b->d) * (float)(sc & 0xF) * (float)q - blocks_f16_to_f32(b->dmin) * (float)(sc >> 4);
}
static inline INFER_HD void blocks_sub_q2_K(const block_q2_K *b, int j, float *y) {
    const float d = blocks_f16_to_f32(b->d), dmin = blocks_f16_to_f32(b->dmin);
    const uint8_t *q = b->qs + 32 * (j / 4);
    const int shift = 2 * (j % 4);
    for (int half = 0; half < 2; half++) {
        const int sc = b->scales[2 * j + half];
        const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
        for (int l = 0; l < 16; l++) y[16 * half + l] = dl * (float)((q[16 * half + l] >> shift) & 3) - ml;
    }
}

/* Q3_K: 2 low bits as in Q2_K; the hmask bit (4h + r/32) of hmask[e%32] clear means subtract 4. */
static inline INFER_HD float blocks_value_q3_K(const block_q3_K *b, int e) {
    const int h = e / 128, r = e % 128, w = r % 32;
    const int q = ((b->qs[32 * h + w] >> (2 * (r / 32))) & 3) - ((b->hmask[w] >> (4 * h + r / 32)) & 1 ? 0 : 4);
    return blocks_f16_to_f32(b->d) * (float)blocks_q3_K_scale(b, e / 16) * (float)q;
}
static inline INFER_HD void blocks_sub_q3_K(const block_q3_K *b, int j, float *y) {
    const float d = blocks_f16_to_f32(b->d);
    const uint8_t *q = b->qs + 32 * (j / 4);
    const int shift = 2 * (j % 4), hbit = j; /* 4h + r/32 == j */
    for (int half = 0; half < 2; half++) {
        const float dl = d * (float)blocks_q3_K_scale(b, 2 * j + half);
        for (int l = 0; l < 16; l++) {
            const int w = 16 * half + l;
            const int v = ((q[w] >> shift) & 3) - ((b->hmask[w] >> hbit) & 1 ? 0 : 4);
            y[w] = dl * (float)v;
        }
    }
}

/* Q4_K: the 32-byte group j/2 holds sub-block j in its low (j even) or high (j odd) nibbles. */
static inline INFER_HD float blocks_value_q4_K(const block_q4_K *b, int e) {
    const int j = e / 32;
    uint8_t sc, m;
    blocks_get_scale_min_k4(j, b->scales, &sc, &m);
    const int q = (b->qs[32 * (j / 2) + e % 32] >> (4 * (j % 2))) & 0xF;
    return blocks_f16_to_f32(b->d) * (float)sc * (float)q - blocks_f16_to_f32(b->dmin) * (float)m;
}
static inline INFER_HD void blocks_sub_q4_K(const block_q4_K *b, int j, float *y) {
    uint8_t sc, m;
    blocks_get_scale_min_k4(j, b->scales, &sc, &m);
    const float d1 = blocks_f16_to_f32(b->d) * (float)sc, m1 = blocks_f16_to_f32(b->dmin) * (float)m;
    const uint8_t *q = b->qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; l++) y[l] = d1 * (float)((q[l] >> shift) & 0xF) - m1;
}

/* Q5_K: the low 4 bits as in Q4_K, bit j of qh[e%32] adds 16. */
static inline INFER_HD float blocks_value_q5_K(const block_q5_K *b, int e) {
    const int j = e / 32, l = e % 32;
    uint8_t sc, m;
    blocks_get_scale_min_k4(j, b->scales, &sc, &m);
    const int q = ((b->qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) + ((b->qh[l] >> j) & 1 ? 16 : 0);
    return blocks_f16_to_f32(b->d) * (float)sc * (float)q - blocks_f16_to_f32(b->dmin) * (float)m;
}
static inline INFER_HD void blocks_sub_q5_K(const block_q5_K *b, int j, float *y) {
    uint8_t sc, m;
    blocks_get_scale_min_k4(j, b->scales, &sc, &m);
    const float d1 = blocks_f16_to_f32(b->d) * (float)sc, m1 = blocks_f16_to_f32(b->dmin) * (float)m;
    const uint8_t *q = b->qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; l++) y[l] = d1 * (float)(((q[l] >> shift) & 0xF) + ((b->qh[l] >> j) & 1 ? 16 : 0)) - m1;
}

/* Q6_K: h = e/128, k = (e%128)/32 picks the ql half (k&1) and nibble (k>>1) and the 2 qh bits 2k. */
static inline INFER_HD int blocks_q6_K_q(const block_q6_K *b, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF;
    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return (lo | hi << 4) - 32;
}
static inline INFER_HD float blocks_value_q6_K(const block_q6_K *b, int e) {
    return blocks_f16_to_f32(b->d) * (float)b->scales[e / 16] * (float)blocks_q6_K_q(b, e);
}
static inline INFER_HD void blocks_sub_q6_K(const block_q6_K *b, int j, float *y) {
    const float d = blocks_f16_to_f32(b->d);
    const float d0 = d * (float)b->scales[2 * j], d1 = d * (float)b->scales[2 * j + 1];
    for (int l = 0; l < 32; l++) y[l] = (l < 16 ? d0 : d1) * (float)blocks_q6_K_q(b, 32 * j + l);
}

static inline INFER_HD float blocks_value_q8_K(const block_q8_K *b, int e) { return b->d * (float)b->qs[e]; }
static inline INFER_HD void blocks_sub_q8_K(const block_q8_K *b, int j, float *y) {
    for (int l = 0; l < 32; l++) y[l] = b->d * (float)b->qs[32 * j + l];
}

/* IQ4_XS: sub-block ib has dl = d * (scale - 32); its 16 bytes hold values 0..15 low, 16..31 high. */
static inline INFER_HD float blocks_value_iq4_xs(const block_iq4_xs *b, int e) {
    const int ib = e / 32, l = e % 32;
    const float dl = blocks_f16_to_f32(b->d) * (float)(blocks_iq4_xs_scale(b, ib) - 32);
    const int k = l < 16 ? b->qs[16 * ib + l] & 0xF : b->qs[16 * ib + l - 16] >> 4;
    return dl * (float)blocks_iq4nl_value(k);
}
static inline INFER_HD void blocks_sub_iq4_xs(const block_iq4_xs *b, int ib, float *y) {
    const float dl = blocks_f16_to_f32(b->d) * (float)(blocks_iq4_xs_scale(b, ib) - 32);
    const uint8_t *qs = b->qs + 16 * ib;
    for (int l = 0; l < 16; l++) {
        y[l] = dl * (float)blocks_iq4nl_value(qs[l] & 0xF);
        y[l + 16] = dl * (float)blocks_iq4nl_value(qs[l] >> 4);
    }
}

/* Whole 256-value blocks: the 8 sub-blocks in order. */
#define BLOCKS_DEQUANT_K(t)                                                                                  \
    static inline INFER_HD void blocks_dequant_##t(const block_##t *b, float *y) {                           \
        for (int j = 0; j < 8; j++) blocks_sub_##t(b, j, y + 32 * j);                                        \
    }
BLOCKS_DEQUANT_K(q2_K)
BLOCKS_DEQUANT_K(q3_K)
BLOCKS_DEQUANT_K(q4_K)
BLOCKS_DEQUANT_K(q5_K)
BLOCKS_DEQUANT_K(q6_K)
BLOCKS_DEQUANT_K(q8_K)
BLOCKS_DEQUANT_K(iq4_xs)
#undef BLOCKS_DEQUANT_K

#include "blocks_iq.h" /* the lattice and ternary types */

#endif
