/* mmv.cu: quantised matrix x few vectors (decode and speculative verification, 1..8 tokens).
 *
 * y[t][r] = sum_c W[r][c] x[t][c], with W kept in its GGUF blocks and x quantised once per op to
 * the q8 split layout (int8 values + (d, d*sum q) per 32; kernels.h). Every weight type is seen as a
 * row of 32-value units, one unit per q8 group, and each unit is an integer dp4a dot product plus a
 * float scale:  unit = xd * (wscale * sum(wq * xq)) - wmin * (xd * sum xq)   (K-quants with a min)
 * Work split: one warp per output row (all tokens at once, so W is read once for the whole batch),
 * lanes stride over the units of the row, a warp reduction at the end, then the epilogue
 * (plain / + residual / SwiGLU of two matrices). Float weights (F32/F16/BF16) use f32 x directly.
 * mmv_multi: up to four such products in one grid (the products of one input: GDN's qkv / gate / beta /
 * alpha, attention's q / k / v), each part its own run of blocks and its own type (a switch per block); a
 * row is the same code as mmv's (mmv_row), so a part's bits are its separate launch's.
 * Bytes per call: the weights once (n_out * row bytes), x (L2-resident), y once.
 * note: the weight read is the whole cost at batch 1; loads are 16-byte where the block layout is
 * 16-byte aligned (Q4_K, Q5_K qs; IQ4_XS 8-byte), 2-byte pairs where blocks have odd sizes.
 */
#include "blocks.h"
#include "common.cuh"
#include "quant.h"

enum { MMV_WARPS = 4, MMV_THREADS = MMV_WARPS * WARP_SIZE };

/* One 32-value unit of a weight row, decoded to what the integer dot needs:
 *   sum_i w_i x_i = sum_h scale[h] * xd * sum_{i in half h} q_i xq_i  -  min * xs
 * (xs = xd * sum xq). q holds 32 signed or unsigned 8-bit codes packed four per int; the two halves
 * (16 values each) may have different scales (Q2_K, Q3_K, Q6_K); min is the block-min term (K-quants
 * with a min, Q4_0's -8 and Q5_0's -16 offsets, minus Q4_1's / Q5_1's m), or Q2_K's min per half,
 * hmin[h] * xd * sum_{i in half h} xq_i. */
struct wunit {
    int q[8];
    float scale[2];
    float min;
    float hmin[2]; /* types with a min per 16-value half (Q2_K, unit_hmin): min of each half, min unused */
};

/* Whether type T's units carry a min per 16-value half (wunit.hmin) instead of one per unit. */
template <int T> struct unit_hmin {
    static constexpr bool value = T == INFER_TYPE_Q2_K;
};

/* Four nibbles (one per byte, low nibble) -> four packed signed bytes of a 16-entry codebook. */
static __device__ __forceinline__ int kv_lookup4(const int8_t *kv, uint32_t nib4) {
    /* note: L1-cached; lanes index it divergently */
    return (int)(((uint32_t)(uint8_t)kv[nib4 & 15]) | ((uint32_t)(uint8_t)kv[(nib4 >> 8) & 15] << 8) |
                 ((uint32_t)(uint8_t)kv[(nib4 >> 16) & 15] << 16) | ((uint32_t)(uint8_t)kv[(nib4 >> 24) & 15] << 24));
}

static __device__ __forceinline__ int iq4_lookup4(uint32_t nib4) { return kv_lookup4(blocks_kvalues_iq4nl, nib4); }

/* ---- per type: decode unit u (0-based over the row) into a wunit ---- */

template <int T> struct unit_dot;

template <> struct unit_dot<INFER_TYPE_Q8_0> {
    static constexpr int PER_BLOCK = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q8_0 *b = (const block_q8_0 *)row + u;
#pragma unroll
        for (int k = 0; k < 8; k++) w.q[k] = load_int_a2((const uint8_t *)b->qs + 4 * k);
        w.scale[0] = w.scale[1] = blocks_f16_to_f32(b->d);
        w.min = 0.0f;
    }
};

template <> struct unit_dot<INFER_TYPE_Q4_0> {
    static constexpr int PER_BLOCK = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q4_0 *b = (const block_q4_0 *)row + u;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int v = load_int_a2(b->qs + 4 * k);
            w.q[k] = v & 0x0F0F0F0F, w.q[k + 4] = (v >> 4) & 0x0F0F0F0F;
        }
        const float d = blocks_f16_to_f32(b->d);
        w.scale[0] = w.scale[1] = d;
        w.min = 8.0f * d; /* w = d * (q - 8) */
    }
};

/* Q5_0 / Q5_1: bits 4k..4k+3 of qh (the fifth bits of four consecutive values) to bit 4 of four bytes. */
static __device__ __forceinline__ int q5_high4(uint32_t qh, int k) {
    const uint32_t h = (qh >> (4 * k)) & 0xF;
    return (int)((h & 1) << 4 | (h & 2) << 11 | (h & 4) << 18 | (h & 8) << 25);
}

/* 32 unsigned 4-bit codes (+ the fifth bits of qh for Q5) of a 32-value block; qs 2-byte aligned. */
template <bool Q5> static __device__ __forceinline__ void q4q5_codes(const uint8_t *qs, uint32_t qh, wunit &w) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int v = load_int_a2(qs + 4 * k);
        w.q[k] = v & 0x0F0F0F0F, w.q[k + 4] = (v >> 4) & 0x0F0F0F0F;
        if constexpr (Q5) w.q[k] |= q5_high4(qh, k), w.q[k + 4] |= q5_high4(qh, k + 4);
    }
}

template <> struct unit_dot<INFER_TYPE_Q4_1> {
    static constexpr int PER_BLOCK = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q4_1 *b = (const block_q4_1 *)row + u;
        q4q5_codes<false>(b->qs, 0, w);
        w.scale[0] = w.scale[1] = blocks_f16_to_f32(b->d);
        w.min = -blocks_f16_to_f32(b->m); /* w = d * q + m */
    }
};

template <> struct unit_dot<INFER_TYPE_Q5_0> {
    static constexpr int PER_BLOCK = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q5_0 *b = (const block_q5_0 *)row + u;
        q4q5_codes<true>(b->qs, (uint32_t)load_int_a2(b->qh), w);
        const float d = blocks_f16_to_f32(b->d);
        w.scale[0] = w.scale[1] = d;
        w.min = 16.0f * d; /* w = d * (q - 16) */
    }
};

template <> struct unit_dot<INFER_TYPE_Q5_1> {
    static constexpr int PER_BLOCK = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q5_1 *b = (const block_q5_1 *)row + u;
        q4q5_codes<true>(b->qs, (uint32_t)load_int_a2(b->qh), w);
        w.scale[0] = w.scale[1] = blocks_f16_to_f32(b->d);
        w.min = -blocks_f16_to_f32(b->m); /* w = d * q + m */
    }
};

/* The 32 codes of a block's 16 nibble bytes through a 16-entry codebook; A2: qs is 2-byte aligned (else byte
 * loads: MXFP4's 17-byte blocks). */
template <bool A2> static __device__ __forceinline__ void kv_codes(const int8_t *kv, const uint8_t *qs, wunit &w) {
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t v = (uint32_t)(A2 ? load_int_a2(qs + 4 * k) : load_int_a1(qs + 4 * k));
        w.q[k] = kv_lookup4(kv, v), w.q[k + 4] = kv_lookup4(kv, v >> 4);
    }
}

template <> struct unit_dot<INFER_TYPE_IQ4_NL> {
    static constexpr int PER_BLOCK = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_iq4_nl *b = (const block_iq4_nl *)row + u;
        kv_codes<true>(blocks_kvalues_iq4nl, b->qs, w);
        w.scale[0] = w.scale[1] = blocks_f16_to_f32(b->d);
        w.min = 0.0f;
    }
};

/* MXFP4 as IQ4_NL with its own codebook and a power-of-two scale */
template <> struct unit_dot<INFER_TYPE_MXFP4> {
    static constexpr int PER_BLOCK = 1;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_mxfp4 *b = (const block_mxfp4 *)row + u;
        kv_codes<false>(blocks_kvalues_mxfp4, b->qs, w);
        w.scale[0] = w.scale[1] = blocks_e8m0_half(b->e);
        w.min = 0.0f;
    }
};

template <> struct unit_dot<INFER_TYPE_IQ4_XS> {
    static constexpr int PER_BLOCK = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_iq4_xs *b = (const block_iq4_xs *)row + u / 8;
        const int ib = (int)(u % 8);
        const uint2 *qs = (const uint2 *)(b->qs + 16 * ib); /* 8-byte aligned: qs at offset 8, blocks of 136 */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint2 v = qs[h];
            w.q[2 * h] = iq4_lookup4(v.x), w.q[2 * h + 4] = iq4_lookup4(v.x >> 4);
            w.q[2 * h + 1] = iq4_lookup4(v.y), w.q[2 * h + 5] = iq4_lookup4(v.y >> 4);
        }
        w.scale[0] = w.scale[1] = blocks_f16_to_f32(b->d) * (float)(blocks_iq4_xs_scale(b, ib) - 32);
        w.min = 0.0f;
    }
};

/* Q2_K unit u = sub-blocks 2j, 2j+1 (j = u % 8): qs half j / 4, bits 2 (j % 4); each 16-value half its own
 * 4-bit scale (low nibble) and min (high nibble). */
template <> struct unit_dot<INFER_TYPE_Q2_K> {
    static constexpr int PER_BLOCK = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q2_K *b = (const block_q2_K *)row + u / 8;
        const int j = (int)(u % 8), shift = 2 * (j % 4);
        const uint8_t *qs = b->qs + 32 * (j / 4); /* offset 16 in 84-byte blocks: 4-byte aligned */
#pragma unroll
        for (int k = 0; k < 8; k++) w.q[k] = (load_int_a4(qs + 4 * k) >> shift) & 0x03030303;
        const float d = blocks_f16_to_f32(b->d), dmin = blocks_f16_to_f32(b->dmin);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int sc = b->scales[2 * j + h];
            w.scale[h] = d * (float)(sc & 0xF);
            w.hmin[h] = dmin * (float)(sc >> 4);
        }
        w.min = 0.0f;
    }
};

/* Q3_K unit u: the 2 low bits as Q2_K, bit j of hmask[l] clear means - 4; signed 6-bit scales per half. */
template <> struct unit_dot<INFER_TYPE_Q3_K> {
    static constexpr int PER_BLOCK = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q3_K *b = (const block_q3_K *)row + u / 8;
        const int j = (int)(u % 8), shift = 2 * (j % 4);
        const uint8_t *qs = b->qs + 32 * (j / 4); /* 110-byte blocks: 2-byte aligned */
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int lo = (load_int_a2(qs + 4 * k) >> shift) & 0x03030303;
            const int hi = ((load_int_a2(b->hmask + 4 * k) >> j) & 0x01010101) << 2;
            w.q[k] = __vsubss4(lo | hi, 0x04040404); /* q - 4, bytewise */
        }
        const float d = blocks_f16_to_f32(b->d);
        w.scale[0] = d * (float)blocks_q3_K_scale(b, 2 * j), w.scale[1] = d * (float)blocks_q3_K_scale(b, 2 * j + 1);
        w.min = 0.0f;
    }
};

template <> struct unit_dot<INFER_TYPE_Q4_K> {
    static constexpr int PER_BLOCK = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q4_K *b = (const block_q4_K *)row + u / 8;
        const int j = (int)(u % 8), shift = 4 * (j % 2);
        const int4 *qs4 = (const int4 *)(b->qs + 32 * (j / 2)); /* 16-byte aligned: qs at offset 16 */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int4 v = qs4[h];
            w.q[4 * h + 0] = (v.x >> shift) & 0x0F0F0F0F, w.q[4 * h + 1] = (v.y >> shift) & 0x0F0F0F0F;
            w.q[4 * h + 2] = (v.z >> shift) & 0x0F0F0F0F, w.q[4 * h + 3] = (v.w >> shift) & 0x0F0F0F0F;
        }
        const uint32_t *s32 = (const uint32_t *)b->scales; /* offset 4: 4-byte aligned */
        uint8_t sc, m;
        blocks_get_scale_min_k4_u32(j, s32[0], s32[1], s32[2], &sc, &m);
        w.scale[0] = w.scale[1] = blocks_f16_to_f32(b->d) * (float)sc;
        w.min = blocks_f16_to_f32(b->dmin) * (float)m;
    }
};

template <> struct unit_dot<INFER_TYPE_Q5_K> {
    static constexpr int PER_BLOCK = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q5_K *b = (const block_q5_K *)row + u / 8;
        const int j = (int)(u % 8), shift = 4 * (j % 2);
        const int4 *qs4 = (const int4 *)(b->qs + 32 * (j / 2)); /* qs at offset 48: 16-byte aligned */
        const int4 *qh4 = (const int4 *)b->qh;                  /* qh at offset 16 */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int4 v = qs4[h], hb = qh4[h];
            w.q[4 * h + 0] = ((v.x >> shift) & 0x0F0F0F0F) | (((hb.x >> j) & 0x01010101) << 4);
            w.q[4 * h + 1] = ((v.y >> shift) & 0x0F0F0F0F) | (((hb.y >> j) & 0x01010101) << 4);
            w.q[4 * h + 2] = ((v.z >> shift) & 0x0F0F0F0F) | (((hb.z >> j) & 0x01010101) << 4);
            w.q[4 * h + 3] = ((v.w >> shift) & 0x0F0F0F0F) | (((hb.w >> j) & 0x01010101) << 4);
        }
        const uint32_t *s32 = (const uint32_t *)b->scales; /* offset 4: 4-byte aligned */
        uint8_t sc, m;
        blocks_get_scale_min_k4_u32(j, s32[0], s32[1], s32[2], &sc, &m);
        w.scale[0] = w.scale[1] = blocks_f16_to_f32(b->d) * (float)sc;
        w.min = blocks_f16_to_f32(b->dmin) * (float)m;
    }
};

template <> struct unit_dot<INFER_TYPE_Q6_K> {
    static constexpr int PER_BLOCK = 8;
    static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {
        const block_q6_K *b = (const block_q6_K *)row + u / 8;
        const int un = (int)(u % 8), h = un / 4, k = un % 4;
        const uint8_t *ql = b->ql + 64 * h + 32 * (k & 1);
        const uint8_t *qh = b->qh + 32 * h;
        const int lshift = 4 * (k >> 1), hshift = 2 * k;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int lo = (load_int_a2(ql + 4 * i) >> lshift) & 0x0F0F0F0F;
            const int hi = ((load_int_a2(qh + 4 * i) >> hshift) & 0x03030303) << 4;
            w.q[i] = __vsubss4(lo | hi, 0x20202020); /* q - 32, bytewise */
        }
        const float d = blocks_f16_to_f32(b->d);
        w.scale[0] = d * (float)b->scales[2 * un], w.scale[1] = d * (float)b->scales[2 * un + 1];
        w.min = 0.0f;
    }
};

/* The lattice and ternary types (blocks_iq.h's integer form): unit j is groups 4j..4j+3 of its block, int8 values
 * as they are; each 16-value half has one integer scale (these formats never change scale inside 16 values), times
 * the block factor. */
#define MMV_IQ_UNIT(T, t)                                                                                    \
    template <> struct unit_dot<INFER_TYPE_##T> {                                                            \
        static constexpr int PER_BLOCK = 8;                                                                  \
        static __device__ __forceinline__ void load(const uint8_t *row, int64_t u, wunit &w) {               \
            const block_##t *b = (const block_##t *)row + u / 8;                                             \
            const int j = (int)(u % 8);                                                                      \
            const float f = blocks_iqf_##t(b);                                                               \
            _Pragma("unroll") for (int g = 0; g < 4; g++) {                                                  \
                int8_t v[8];                                                                                 \
                const int ls = blocks_iq_##t(b, 4 * j + g, v);                                               \
                memcpy(&w.q[2 * g], v, 8);                                                                   \
                if (g % 2 == 0) w.scale[g / 2] = f * (float)ls;                                              \
            }                                                                                                \
            w.min = 0.0f;                                                                                    \
        }                                                                                                    \
    };
BLOCKS_IQ_TYPES(MMV_IQ_UNIT)
#undef MMV_IQ_UNIT

#define MMV_IQ_BYTES(TY, ty) T == INFER_TYPE_##TY ? sizeof(block_##ty) :
template <int T> struct unit_bytes {
    static constexpr int value = T == INFER_TYPE_Q8_0 ? sizeof(block_q8_0) : T == INFER_TYPE_Q4_0 ? sizeof(block_q4_0)
                               : T == INFER_TYPE_Q4_1 ? sizeof(block_q4_1) : T == INFER_TYPE_Q5_0 ? sizeof(block_q5_0)
                               : T == INFER_TYPE_Q5_1 ? sizeof(block_q5_1)
                               : T == INFER_TYPE_IQ4_NL ? sizeof(block_iq4_nl) : T == INFER_TYPE_IQ4_XS ? sizeof(block_iq4_xs)
                               : T == INFER_TYPE_MXFP4 ? sizeof(block_mxfp4)
                               : T == INFER_TYPE_Q2_K ? sizeof(block_q2_K) : T == INFER_TYPE_Q3_K ? sizeof(block_q3_K)
                               : T == INFER_TYPE_Q4_K ? sizeof(block_q4_K) : T == INFER_TYPE_Q5_K ? sizeof(block_q5_K)
                               : BLOCKS_IQ_TYPES(MMV_IQ_BYTES) sizeof(block_q6_K);
};
#undef MMV_IQ_BYTES

/* ---- float weights: 32 values against f32 activations ---- */

template <int T> static __device__ __forceinline__ float float_weight(const uint8_t *row, int64_t i);
template <> __device__ __forceinline__ float float_weight<INFER_TYPE_F32>(const uint8_t *row, int64_t i) {
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float float_weight<INFER_TYPE_F16>(const uint8_t *row, int64_t i) {
    return blocks_f16_to_f32(((const uint16_t *)row)[i]);
}
template <> __device__ __forceinline__ float float_weight<INFER_TYPE_BF16>(const uint8_t *row, int64_t i) {
    return blocks_bf16_to_f32(((const uint16_t *)row)[i]);
}

static __device__ __forceinline__ float silu(float v) { return v / (1.0f + __expf(-v)); }

/* Bytes of a row of n values of type T. */
template <int T> static __device__ __forceinline__ size_t row_bytes_of(int64_t n) {
    if constexpr (T == INFER_TYPE_F32) return (size_t)n * 4;
    else if constexpr (T == INFER_TYPE_F16 || T == INFER_TYPE_BF16) return (size_t)n * 2;
    else return (size_t)(n / (Q8_SPLIT_BLOCK * unit_dot<T>::PER_BLOCK)) * unit_bytes<T>::value;
}

/* sum over the unit of w * x for token t, from a decoded weight unit and that token's activations */
template <int T> static __device__ __forceinline__ float unit_times_x(const wunit &wu, const int4 xv[2], float2 xd) {
    int s0 = 0, s1 = 0;
    s0 = __dp4a(wu.q[0], xv[0].x, s0), s0 = __dp4a(wu.q[1], xv[0].y, s0);
    s0 = __dp4a(wu.q[2], xv[0].z, s0), s0 = __dp4a(wu.q[3], xv[0].w, s0);
    s1 = __dp4a(wu.q[4], xv[1].x, s1), s1 = __dp4a(wu.q[5], xv[1].y, s1);
    s1 = __dp4a(wu.q[6], xv[1].z, s1), s1 = __dp4a(wu.q[7], xv[1].w, s1);
    if constexpr (unit_hmin<T>::value) {
        /* a min per half needs that half's sum of xq (the q8 split's s covers all 32) */
        const int ones = 0x01010101;
        int m0 = 0, m1 = 0;
        m0 = __dp4a(ones, xv[0].x, m0), m0 = __dp4a(ones, xv[0].y, m0);
        m0 = __dp4a(ones, xv[0].z, m0), m0 = __dp4a(ones, xv[0].w, m0);
        m1 = __dp4a(ones, xv[1].x, m1), m1 = __dp4a(ones, xv[1].y, m1);
        m1 = __dp4a(ones, xv[1].z, m1), m1 = __dp4a(ones, xv[1].w, m1);
        return xd.x * (wu.scale[0] * (float)s0 + wu.scale[1] * (float)s1 - (wu.hmin[0] * (float)m0 + wu.hmin[1] * (float)m1));
    }
    return xd.x * (wu.scale[0] * (float)s0 + wu.scale[1] * (float)s1) - wu.min * xd.y;
}

/* Unit u of the row against all tokens. note: unrolling this over 2-8 units per step, loads issued
 * first, measured no faster on H100 (bench/results/2026-11-23-h100-mmv.md). */
template <int T, int NT>
static __device__ __forceinline__ void unit_dot_tokens(const struct mmv_args &a, const uint8_t *row, int64_t u,
                                                       float acc[NT]) {
    const int64_t n_units = a.n_in / Q8_SPLIT_BLOCK;
    const int8_t *xq = (const int8_t *)a.xq;
    const float2 *ds = (const float2 *)((const char *)a.xq + q8_split_ds_offset(a.n_in, a.n_tokens));
    wunit wu;
    unit_dot<T>::load(row, u, wu);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int4 *xp = (const int4 *)(xq + (int64_t)t * a.n_in + u * Q8_SPLIT_BLOCK);
        const int4 xv[2] = {xp[0], xp[1]};
        acc[t] += unit_times_x<T>(wu, xv, ds[(int64_t)t * n_units + u]);
    }
}

/* One warp per output row, all tokens: each weight byte is read once for the whole batch. */
template <int T, int NT>
static __device__ __forceinline__ void row_dots(const struct mmv_args &a, const uint8_t *row, float acc[NT]) {
    const int lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    if constexpr (T == INFER_TYPE_F32 || T == INFER_TYPE_F16 || T == INFER_TYPE_BF16) {
        for (int64_t c = lane; c < a.n_in; c += WARP_SIZE) {
            const float wv = float_weight<T>(row, c);
#pragma unroll
            for (int t = 0; t < NT; t++) acc[t] += wv * a.x[(int64_t)t * a.n_in + c];
        }
    } else {
        for (int64_t u = lane; u < a.n_in / Q8_SPLIT_BLOCK; u += WARP_SIZE) unit_dot_tokens<T, NT>(a, row, u, acc);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = warp_sum(acc[t]);
}

/* Output row r of a (all tokens) by the calling warp: the dots, then the epilogue. Both kernels run rows
 * through here, so mmv_multi's rows are mmv's, bit for bit. */
template <int T, int NT>
static __device__ __forceinline__ void mmv_row(const struct mmv_args &a, int64_t r) {
    const size_t rb = row_bytes_of<T>(a.n_in);
    const int lane = threadIdx.x % WARP_SIZE;
    float acc[NT], acc2[NT];
    row_dots<T, NT>(a, (const uint8_t *)a.w + r * rb, acc);
    if (a.epilogue == MMV_SWIGLU) row_dots<T, NT>(a, (const uint8_t *)a.w2 + r * rb, acc2);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        /* lane t writes token t's output: spreads the stores instead of serialising them on lane 0 */
        if (lane != t) continue;
        const int64_t o = (int64_t)t * a.n_out + r;
        float v = acc[t];
        if (a.epilogue == MMV_ADD) v += a.add[o];
        else if (a.epilogue == MMV_SWIGLU) v = silu(v) * acc2[t];
        a.y[o] = v;
    }
}

template <int T, int NT>
static __global__ void __launch_bounds__(MMV_THREADS) mmv_kernel(const __grid_constant__ struct mmv_args a) {
    const int64_t r = (int64_t)blockIdx.x * MMV_WARPS + threadIdx.x / WARP_SIZE;
    if (r >= a.n_out) return; /* whole warp */
    mmv_row<T, NT>(a, r);
}

template <int T>
static cudaError_t launch_type(const struct mmv_args *a, cudaStream_t s) {
    const dim3 grid((unsigned)((a->n_out + MMV_WARPS - 1) / MMV_WARPS));
    switch (a->n_tokens) {
#define MMV_CASE(nt) case nt: launch_kernel(mmv_kernel<T, nt>, grid, MMV_THREADS, 0, s, *a); break;
        MMV_CASE(1) MMV_CASE(2) MMV_CASE(3) MMV_CASE(4) MMV_CASE(5) MMV_CASE(6) MMV_CASE(7) MMV_CASE(8)
#undef MMV_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* The weight types the kernels cover (blocks_iq.h's types included); one switch over them dispatches. */
#define MMV_TYPES(X) X(F32) X(F16) X(BF16) X(Q8_0) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(IQ4_NL) X(IQ4_XS) X(Q2_K) X(Q3_K) \
    X(Q4_K) X(Q5_K) X(Q6_K) X(MXFP4) BLOCKS_IQ_TYPE_IDS(X)

/* Several products in one grid: part k takes the next ceil(n_out_k / MMV_WARPS) blocks, a warp per output row as
 * in mmv_kernel, and the part's type picks the row code at run time (uniform over a block: no divergence), so
 * any mix of types is one launch. note: the kernel holds every type's code and reads its part's args by a
 * run-time index (registers, where mmv_kernel's come from the constant bank): ptxas, sm_90, one token: 56
 * registers, 36 resident warps an SM, against 30-42 and 40-64 warps for mmv_kernel<T, 1>; a part-of-one-type
 * kernel measured 40-54, so one kernel for every mix; forward_matmuls sends a lone product to mmv. */
template <int NT>
static __global__ void __launch_bounds__(MMV_THREADS) mmv_multi_kernel(const __grid_constant__ struct mmv_multi_args a) {
    int k = 0;
    int64_t b = blockIdx.x;
    for (; k < a.n - 1; k++) {
        const int64_t nb = (a.p[k].n_out + MMV_WARPS - 1) / MMV_WARPS;
        if (b < nb) break;
        b -= nb;
    }
    const struct mmv_args &p = a.p[k];
    const int64_t r = b * MMV_WARPS + threadIdx.x / WARP_SIZE;
    if (r >= p.n_out) return; /* whole warp */
    switch (p.type) {
#define MMV_MULTI_ROW(t) case INFER_TYPE_##t: mmv_row<INFER_TYPE_##t, NT>(p, r); break;
        MMV_TYPES(MMV_MULTI_ROW)
#undef MMV_MULTI_ROW
    default: break; /* the launcher refused it */
    }
}

extern "C" int32_t mmv_act_type_cuda(int32_t weight_type) {
    switch (weight_type) {
    case INFER_TYPE_F32: case INFER_TYPE_F16: case INFER_TYPE_BF16: return -1;
    default: return INFER_TYPE_Q8_1;
    }
}

/* What a launcher refuses of one product (cudaErrorInvalidValue) before anything runs; cudaSuccess otherwise. */
static cudaError_t mmv_check(const struct mmv_args *a) {
    const struct quant_type *qt = quant_type(a->type);
    const int64_t blck = qt ? qt->blck : 1;
    if (a->n_in <= 0 || a->n_out <= 0 || a->n_in % blck != 0 || (blck > 1 && a->n_in % Q8_SPLIT_BLOCK != 0))
        return cudaErrorInvalidValue;
    if (!a->w || !a->y || (blck > 1 ? !a->xq : !a->x)) return cudaErrorInvalidValue; /* the kernel would fault */
    if (a->epilogue < MMV_PLAIN || a->epilogue > MMV_SWIGLU || (a->epilogue == MMV_SWIGLU && !a->w2) ||
        (a->epilogue == MMV_ADD && !a->add))
        return cudaErrorInvalidValue; /* an unknown epilogue would otherwise run as MMV_PLAIN */
    if (a->n_out > (int64_t)MMV_WARPS * 2147483647) return cudaErrorInvalidValue;
    if (a->n_tokens < 1 || a->n_tokens > MMV_MAX_TOKENS) return cudaErrorInvalidValue;
    switch (a->type) {
#define MMV_KNOWN(t) case INFER_TYPE_##t: return cudaSuccess;
        MMV_TYPES(MMV_KNOWN)
#undef MMV_KNOWN
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cuda_mmv(const struct mmv_args *a, cudaStream_t s) {
    const cudaError_t e = mmv_check(a);
    if (e != cudaSuccess) return e;
    switch (a->type) {
#define MMV_DISPATCH(t) case INFER_TYPE_##t: return launch_type<INFER_TYPE_##t>(a, s);
        MMV_TYPES(MMV_DISPATCH)
#undef MMV_DISPATCH
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t cuda_mmv_multi(const struct mmv_multi_args *a, cudaStream_t s) {
    if (a->n < 1 || a->n > MMV_MULTI_MAX) return cudaErrorInvalidValue;
    int64_t blocks = 0;
    for (int32_t k = 0; k < a->n; k++) {
        const cudaError_t e = mmv_check(&a->p[k]);
        if (e != cudaSuccess) return e;
        if (a->p[k].n_tokens != a->p[0].n_tokens) return cudaErrorInvalidValue; /* one NT per kernel */
        blocks += (a->p[k].n_out + MMV_WARPS - 1) / MMV_WARPS;
    }
    if (blocks > 2147483647 || !mmv_multi_disjoint(a)) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)blocks);
    switch (a->p[0].n_tokens) {
#define MMV_MULTI_CASE(nt) case nt: launch_kernel(mmv_multi_kernel<nt>, grid, MMV_THREADS, 0, s, *a); break;
        MMV_MULTI_CASE(1) MMV_MULTI_CASE(2) MMV_MULTI_CASE(3) MMV_MULTI_CASE(4) MMV_MULTI_CASE(5) MMV_MULTI_CASE(6)
        MMV_MULTI_CASE(7) MMV_MULTI_CASE(8)
#undef MMV_MULTI_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
