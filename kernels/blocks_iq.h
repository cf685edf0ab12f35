/* blocks_iq.h: the lattice ("i-quant") types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M and the ternary
 * types TQ1_0, TQ2_0: block layouts and decoders, for the host and the device (included by blocks.h, whose
 * conventions hold: `static inline INFER_HD`, raw f16 fields, values equal to ggml's dequantize_row_<t> bit for
 * bit). Every value here is exact in binary32 (a half scale times at most 5 more bits), so no order matters.
 *
 * Layouts (256 values a block; byte offsets; docs/quant.md §3.13):
 *   IQ2_XXS  66 B: d @0, qs:u16[32] @2      per 32 values two words: 4 grid indices (bytes), then 4 x 7 sign bits
 *                                           and a 4-bit scale s in bits 28..31; y = d (0.5 + s) / 4 * grid * sign
 *   IQ2_XS   74 B: d @0, qs:u16[32] @2, scales[8] @66   u16 = 9-bit grid index | 7 sign bits << 9; 4-bit scale
 *                                           per 16 values
 *   IQ2_S    82 B: d @0, qs[64] @2, qh[8] @66, scales[8] @74   qs[0..31] low index bytes, qs[32..63] sign bytes,
 *                                           qh 2 high index bits per group of 8
 *   IQ3_XXS  98 B: d @0, qs[96] @2          64 index bytes (a 4-value grid each), then per 32 values a word of
 *                                           4 x 7 sign bits and the scale; y = d (0.5 + s) / 2 * grid * sign
 *   IQ3_S   110 B: d @0, qs[64] @2, qh[8] @66, signs[32] @74, scales[4] @106   9-bit indices; y = d (1 + 2 s) * ...
 *   IQ1_S    50 B: d @0, qs[32] @2, qh:u16[8] @34   11-bit indices (3 high bits per group in qh), scale in qh bits
 *                                           12..14, delta sign bit 15; y = d (2 s + 1) (grid + delta), delta = ±1/8
 *   IQ1_M    56 B: qs[32] @0, qh[16] @32, scales[8] @48   d is an f16 spread over the top nibbles of the four
 *                                           u16 scale words; 3-bit scales per 16 values, a delta sign per group
 *   TQ1_0    54 B: qs[48] @0, qh[4] @48, d @52   five (qs) or four (qh) ternary digits per byte, base 3, most
 *                                           significant first: digit n of byte q is ((uint8_t)(q * 3^n) * 3) >> 8
 *   TQ2_0    66 B: qs[64] @0, d @64          2 bits per value, y = (q - 1) d
 * Grid entries (grids.h) are groups of 8 values (IQ1, IQ2) or 4 (IQ3), byte j = value j. Signs: a 7-bit field
 * indexes blocks_ksigns, which adds the eighth bit so that every group has an even number of negatives.
 *
 * Decoders, for each type t: the integer form blocks_iq_<t>(b, g, v) (int8 values of group g, returns its
 * integer scale) and blocks_iqf_<t>(b) (the block's float factor); from them blocks_group_<t>(b, g, y) the 8
 * values 8g..8g+7, blocks_sub_<t>(b, j, y) the 32 values of sub-block j, blocks_value_<t>(b, e),
 * blocks_dequant_<t>(b, y). Grid entries through blocks_grid_<name>(k) on the host and the device.
 */
#ifndef INFER_BLOCKS_IQ_H
#define INFER_BLOCKS_IQ_H

#include "grids.h"

/* Every type of this file as X(TYPE, name): infer.h's INFER_TYPE_<TYPE>, block_<name>, blocks_*_<name>. */
#define BLOCKS_IQ_TYPES(X)                                                                                   \
    X(IQ2_XXS, iq2_xxs) X(IQ2_XS, iq2_xs) X(IQ2_S, iq2_s) X(IQ3_XXS, iq3_xxs) X(IQ3_S, iq3_s) X(IQ1_S, iq1_s)     \
    X(IQ1_M, iq1_m) X(TQ1_0, tq1_0) X(TQ2_0, tq2_0)
/* The same types as X(TYPE) alone, for the kernels' type lists. */
#define BLOCKS_IQ_TYPE_IDS(X) X(IQ2_XXS) X(IQ2_XS) X(IQ2_S) X(IQ3_XXS) X(IQ3_S) X(IQ1_S) X(IQ1_M) X(TQ1_0) X(TQ2_0)

typedef struct { uint16_t d; uint16_t qs[32]; } block_iq2_xxs;
typedef struct { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; } block_iq2_xs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } block_iq2_s;
typedef struct { uint16_t d; uint8_t qs[96]; } block_iq3_xxs;
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } block_iq3_s;
typedef struct { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; } block_iq1_s;
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } block_iq1_m;
typedef struct { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; } block_tq1_0;
typedef struct { uint8_t qs[64]; uint16_t d; } block_tq2_0;

BLOCKS_ASSERT(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs is 66 bytes");
BLOCKS_ASSERT(sizeof(block_iq2_xs) == 74, "block_iq2_xs is 74 bytes");
BLOCKS_ASSERT(sizeof(block_iq2_s) == 82, "block_iq2_s is 82 bytes");
BLOCKS_ASSERT(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs is 98 bytes");
BLOCKS_ASSERT(sizeof(block_iq3_s) == 110, "block_iq3_s is 110 bytes");
BLOCKS_ASSERT(sizeof(block_iq1_s) == 50, "block_iq1_s is 50 bytes");
BLOCKS_ASSERT(sizeof(block_iq1_m) == 56, "block_iq1_m is 56 bytes");
BLOCKS_ASSERT(sizeof(block_tq1_0) == 54, "block_tq1_0 is 54 bytes");
BLOCKS_ASSERT(sizeof(block_tq2_0) == 66, "block_tq2_0 is 66 bytes");

/* ---- the grids: a host array, and under nvcc a device twin that device code reads ---- */

#ifdef __CUDACC__
#define BLOCKS_GRID(type, name, n, values)                                                                     \
    static const type name[n] = values;                                                                      \
    static __device__ const type name##_dev[n] = values
#else
#define BLOCKS_GRID(type, name, n, values) static const type name[n] = values
#endif
#ifdef __CUDA_ARCH__
#define BLOCKS_GRID_AT(name, k) (name##_dev[k])
#else
#define BLOCKS_GRID_AT(name, k) (name[k])
#endif

BLOCKS_GRID(uint64_t, blocks_iq2xxs_grid, 256, BLOCKS_IQ2XXS_GRID);
BLOCKS_GRID(uint64_t, blocks_iq2xs_grid, 512, BLOCKS_IQ2XS_GRID);
BLOCKS_GRID(uint64_t, blocks_iq2s_grid, 1024, BLOCKS_IQ2S_GRID);
BLOCKS_GRID(uint32_t, blocks_iq3xxs_grid, 256, BLOCKS_IQ3XXS_GRID);
BLOCKS_GRID(uint32_t, blocks_iq3s_grid, 512, BLOCKS_IQ3S_GRID);
BLOCKS_GRID(uint64_t, blocks_iq1s_grid, 2048, BLOCKS_IQ1S_GRID);

static inline INFER_HD uint64_t blocks_grid_iq2xxs(int k) { return BLOCKS_GRID_AT(blocks_iq2xxs_grid, k); }
static inline INFER_HD uint64_t blocks_grid_iq2xs(int k) { return BLOCKS_GRID_AT(blocks_iq2xs_grid, k); }
static inline INFER_HD uint64_t blocks_grid_iq2s(int k) { return BLOCKS_GRID_AT(blocks_iq2s_grid, k); }
static inline INFER_HD uint32_t blocks_grid_iq3xxs(int k) { return BLOCKS_GRID_AT(blocks_iq3xxs_grid, k); }
static inline INFER_HD uint32_t blocks_grid_iq3s(int k) { return BLOCKS_GRID_AT(blocks_iq3s_grid, k); }
static inline INFER_HD uint64_t blocks_grid_iq1s(int k) { return BLOCKS_GRID_AT(blocks_iq1s_grid, k); }

/* The 8 sign bits of a 7-bit field: bit 7 makes the count of set bits even (ggml's ksigns_iq2xs table). */
static inline INFER_HD int blocks_ksigns(int s7) {
    int p = s7 ^ (s7 >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return s7 | (p & 1) << 7;
}

/* Byte j of a grid entry as an unsigned value (IQ2, IQ3) or a signed one (IQ1). */
static inline INFER_HD int blocks_grid_u8(uint64_t e, int j) { return (int)((e >> (8 * j)) & 0xFF); }
static inline INFER_HD int blocks_grid_i8(uint64_t e, int j) { return (int)(int8_t)(uint8_t)((e >> (8 * j)) & 0xFF); }

static inline INFER_HD uint32_t blocks_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The integer form every decoder below produces: group g (8 values) of a block is
 *     y[j] = f * (float)(ls * v[j])
 * with f the block's factor (its f16 scale times a power of two), ls a small positive integer scale and v[j] int8.
 * Both f * (ls * v) and ggml's (d * scale) * value are exact in binary32, so they are the same number; the CPU and
 * GPU dots use the integer form directly (int8 values against int8 activations). */

/* 0xFF in byte j where bit j of s is set, else 0. */
static inline INFER_HD uint64_t blocks_sign_mask8(int s) {
    const uint64_t x = ((uint64_t)(s & 0xFF) * 0x0101010101010101ull) & 0x8040201008040201ull;
    const uint64_t hi = ((x + 0x7F7F7F7F7F7F7F7Full) | x) & 0x8080808080808080ull;
    return (hi >> 7) * 0xFF;
}

/* 8 int8 values: the grid bytes (1..127), negated where bit j of signs is set (byte by byte in one word: g ^ 0xFF
 * plus 1 is -g and cannot carry for g >= 1). */
static inline INFER_HD void blocks_signed8(uint64_t grid, int signs, int8_t *v) {
    const uint64_t m = blocks_sign_mask8(signs);
    const uint64_t w = (grid ^ m) + (m & 0x0101010101010101ull);
    memcpy(v, &w, 8);
}

/* ---- IQ2: y = d (0.5 + s) / 4 * grid * sign = d/8 * (2s + 1) * grid * sign ---- */

static inline INFER_HD float blocks_iqf_iq2_xxs(const block_iq2_xxs *b) { return blocks_f16_to_f32(b->d) * 0.125f; }
static inline INFER_HD int blocks_iq_iq2_xxs(const block_iq2_xxs *b, int g, int8_t *v) {
    const int ib = g / 4, l = g % 4;
    const uint32_t aux1 = (uint32_t)b->qs[4 * ib + 2] | (uint32_t)b->qs[4 * ib + 3] << 16;
    const int idx = (b->qs[4 * ib + l / 2] >> (8 * (l % 2))) & 0xFF;
    blocks_signed8(blocks_grid_iq2xxs(idx), blocks_ksigns((int)(aux1 >> (7 * l)) & 127), v);
    return 2 * (int)(aux1 >> 28) + 1;
}

/* IQ2_XS and IQ2_S: the 4-bit scale of the 16 values holding group g, as 2s + 1. */
static inline INFER_HD int blocks_iq2_ls(const uint8_t *scales, int g) { return 2 * ((scales[g / 4] >> (4 * ((g % 4) / 2))) & 0xF) + 1; }

static inline INFER_HD float blocks_iqf_iq2_xs(const block_iq2_xs *b) { return blocks_f16_to_f32(b->d) * 0.125f; }
static inline INFER_HD int blocks_iq_iq2_xs(const block_iq2_xs *b, int g, int8_t *v) {
    const int q = b->qs[g];
    blocks_signed8(blocks_grid_iq2xs(q & 511), blocks_ksigns(q >> 9), v);
    return blocks_iq2_ls(b->scales, g);
}

static inline INFER_HD float blocks_iqf_iq2_s(const block_iq2_s *b) { return blocks_f16_to_f32(b->d) * 0.125f; }
static inline INFER_HD int blocks_iq_iq2_s(const block_iq2_s *b, int g, int8_t *v) {
    const int idx = b->qs[g] | ((b->qh[g / 4] >> (2 * (g % 4))) & 3) << 8;
    blocks_signed8(blocks_grid_iq2s(idx), b->qs[32 + g], v);
    return blocks_iq2_ls(b->scales, g);
}

/* ---- IQ3: two 4-value grid entries per group of 8 ---- */

/* IQ3_XXS: y = d (0.5 + s) / 2 * grid * sign = d/4 * (2s + 1) * grid * sign. */
static inline INFER_HD float blocks_iqf_iq3_xxs(const block_iq3_xxs *b) { return blocks_f16_to_f32(b->d) * 0.25f; }
static inline INFER_HD int blocks_iq_iq3_xxs(const block_iq3_xxs *b, int g, int8_t *v) {
    const uint32_t aux = blocks_le32(b->qs + 64 + 4 * (g / 4));
    const uint64_t grid = blocks_grid_iq3xxs(b->qs[2 * g]) | (uint64_t)blocks_grid_iq3xxs(b->qs[2 * g + 1]) << 32;
    blocks_signed8(grid, blocks_ksigns((int)(aux >> (7 * (g % 4))) & 127), v);
    return 2 * (int)(aux >> 28) + 1;
}

/* IQ3_S: y = d (1 + 2s) * grid * sign. */
static inline INFER_HD float blocks_iqf_iq3_s(const block_iq3_s *b) { return blocks_f16_to_f32(b->d); }
static inline INFER_HD int blocks_iq_iq3_s(const block_iq3_s *b, int g, int8_t *v) {
    const int ib = g / 4, l = g % 4;
    const int i0 = b->qs[2 * g] | ((b->qh[ib] >> (2 * l)) & 1) << 8;
    const int i1 = b->qs[2 * g + 1] | ((b->qh[ib] >> (2 * l + 1)) & 1) << 8;
    blocks_signed8(blocks_grid_iq3s(i0) | (uint64_t)blocks_grid_iq3s(i1) << 32, b->signs[g], v);
    return 1 + 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 0xF);
}

/* ---- IQ1: y = d (2s + 1) (grid + delta), grid bytes -1, 0, 1, delta = ±1/8: v = 8 grid ± 1, f = d/8 ---- */

static inline INFER_HD void blocks_iq1_v(uint64_t grid, int neg, int8_t *v) {
    for (int j = 0; j < 8; j++) v[j] = (int8_t)(8 * blocks_grid_i8(grid, j) + (neg ? -1 : 1));
}

static inline INFER_HD float blocks_iqf_iq1_s(const block_iq1_s *b) { return blocks_f16_to_f32(b->d) * 0.125f; }
static inline INFER_HD int blocks_iq_iq1_s(const block_iq1_s *b, int g, int8_t *v) {
    const int qh = b->qh[g / 4];
    blocks_iq1_v(blocks_grid_iq1s(b->qs[g] | ((qh >> (3 * (g % 4))) & 7) << 8), qh & 0x8000, v);
    return 2 * ((qh >> 12) & 7) + 1;
}

/* IQ1_M's scale words: the u16 scales[2k] | scales[2k+1] << 8, k = 0..3. */
static inline INFER_HD int blocks_iq1_m_sc(const block_iq1_m *b, int k) { return b->scales[2 * k] | b->scales[2 * k + 1] << 8; }

/* IQ1_M's block scale: the bits of an f16 whose four nibbles are the top nibbles of the four scale words. */
static inline INFER_HD uint16_t blocks_iq1_m_half(const block_iq1_m *b) {
    return (uint16_t)(blocks_iq1_m_sc(b, 0) >> 12 | (blocks_iq1_m_sc(b, 1) >> 8 & 0x00F0) |
                      (blocks_iq1_m_sc(b, 2) >> 4 & 0x0F00) | (blocks_iq1_m_sc(b, 3) & 0xF000));
}

/* Its inverse, for writers (synth, tests): the half h into the top nibbles of the scale words, the rest kept. */
static inline INFER_HD void blocks_iq1_m_put_half(block_iq1_m *b, uint16_t h) {
    for (int k = 0; k < 4; k++) b->scales[2 * k + 1] = (uint8_t)((b->scales[2 * k + 1] & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
}

static inline INFER_HD float blocks_iqf_iq1_m(const block_iq1_m *b) { return blocks_f16_to_f32(blocks_iq1_m_half(b)) * 0.125f; }

/* IQ1_M: a 3-bit scale per 16 values; per group 3 high index bits and the delta's sign in a nibble of qh. */
static inline INFER_HD int blocks_iq_iq1_m(const block_iq1_m *b, int g, int8_t *v) {
    const int ib = g / 4, l = g % 4, qh = b->qh[2 * ib + l / 2];
    const int idx = b->qs[g] | ((l % 2 ? qh << 4 : qh << 8) & 0x700);
    blocks_iq1_v(blocks_grid_iq1s(idx), qh & (l % 2 ? 0x80 : 0x08), v);
    return 2 * ((blocks_iq1_m_sc(b, ib / 2) >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1;
}

/* ---- ternary: y = (q - 1) d ---- */

/* TQ1_0: digit n (0 = most significant) of a byte holding base-3 digits, as ggml extracts it. */
static inline INFER_HD int blocks_tq1_digit(int byte, int n) {
    const int pow3 = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
    const int q = (byte * pow3) & 0xFF;
    return (q * 3) >> 8;
}

/* Value e: 0..159 from qs[0..31] (5 digits, digit e/32 of byte e%32), 160..239 from qs[32..47] (digit (e-160)/16),
 * 240..255 from qh[0..3] (digit (e-240)/4). */
static inline INFER_HD int blocks_tq1_q(const block_tq1_0 *b, int e) {
    if (e < 160) return blocks_tq1_digit(b->qs[e % 32], e / 32);
    if (e < 240) return blocks_tq1_digit(b->qs[32 + (e - 160) % 16], (e - 160) / 16);
    return blocks_tq1_digit(b->qh[(e - 240) % 4], (e - 240) / 4);
}

static inline INFER_HD float blocks_iqf_tq1_0(const block_tq1_0 *b) { return blocks_f16_to_f32(b->d); }
static inline INFER_HD int blocks_iq_tq1_0(const block_tq1_0 *b, int g, int8_t *v) {
    for (int j = 0; j < 8; j++) v[j] = (int8_t)(blocks_tq1_q(b, 8 * g + j) - 1);
    return 1;
}

/* TQ2_0: value e is bits 2 ((e%128)/32) of qs[32 (e/128) + e%32]. */
static inline INFER_HD float blocks_iqf_tq2_0(const block_tq2_0 *b) { return blocks_f16_to_f32(b->d); }
static inline INFER_HD int blocks_iq_tq2_0(const block_tq2_0 *b, int g, int8_t *v) {
    for (int j = 0; j < 8; j++) {
        const int e = 8 * g + j;
        v[j] = (int8_t)(((b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) - 1);
    }
    return 1;
}

/* ---- the common forms over the groups ---- */

#define BLOCKS_IQ_FORMS(t)                                                                                   \
    static inline INFER_HD void blocks_group_##t(const block_##t *b, int g, float *y) {                      \
        int8_t v[8];                                                                                         \
        const int ls = blocks_iq_##t(b, g, v);                                                               \
        const float f = blocks_iqf_##t(b);                                                                   \
        for (int j = 0; j < 8; j++) y[j] = f * (float)(ls * v[j]);                                           \
    }                                                                                                        \
    static inline INFER_HD void blocks_sub_##t(const block_##t *b, int j, float *y) {                        \
        for (int g = 0; g < 4; g++) blocks_group_##t(b, 4 * j + g, y + 8 * g);                              \
    }                                                                                                        \
    static inline INFER_HD float blocks_value_##t(const block_##t *b, int e) {                               \
        float y[8];                                                                                          \
        blocks_group_##t(b, e / 8, y);                                                                       \
        return y[e % 8];                                                                                     \
    }                                                                                                        \
    static inline INFER_HD void blocks_dequant_##t(const block_##t *b, float *y) {                           \
        for (int g = 0; g < 32; g++) blocks_group_##t(b, g, y + 8 * g);                                      \
    }
BLOCKS_IQ_FORMS(iq2_xxs)
BLOCKS_IQ_FORMS(iq2_xs)
BLOCKS_IQ_FORMS(iq2_s)
BLOCKS_IQ_FORMS(iq3_xxs)
BLOCKS_IQ_FORMS(iq3_s)
BLOCKS_IQ_FORMS(iq1_s)
BLOCKS_IQ_FORMS(iq1_m)
BLOCKS_IQ_FORMS(tq1_0)
BLOCKS_IQ_FORMS(tq2_0)
#undef BLOCKS_IQ_FORMS

#endif
