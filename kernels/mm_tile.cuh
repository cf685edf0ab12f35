/* mm_tile.cuh: the tensor-core tile machinery shared by mm.cu (dense prefill GEMM) and moe_mm.cu (the
 * grouped expert GEMM): weight units decoded to f32 in blocks.h's arithmetic (wdec<T>), the 64 x 64 f16
 * weight tile in shared memory (fill_w), mma.sync m16n8k16 fragment loads (frag_a, frag_b) and a warp's
 * 32 x 32 step (mma_step). The block shape (MM_BM x MM_BN outputs, K steps of MM_BK, 4 warps) is fixed
 * here, and so is a block's whole K loop (mm_tile_loop); mm.cu's header describes the algorithm. Include after status.h (it has no C++ guard). */
#ifndef INFER_MM_TILE_CUH
#define INFER_MM_TILE_CUH

#include <cuda_fp16.h>

#include <type_traits>

#include "blocks.h"
#include "common.cuh"
#include "ptx.cuh"
#include "quant.h"

enum { MM_BM = 64, MM_BN = 64, MM_BK = 64, MM_LDK = MM_BK + 8, MM_WARPS = 4, MM_THREADS = MM_WARPS * WARP_SIZE };


static_assert(MM_BM * MM_BK / 32 == MM_THREADS, "one 32-value unit of the W tile per thread");
static_assert((MM_LDK * 2) % 16 == 0, "shared rows keep 16-byte alignment");
/* ---- W decoding: unit u (32 values, 0-based over the row) to f32, in blocks.h's arithmetic ---- */

#define MM_HD __device__ __forceinline__
#define MM_UNROLL _Pragma("unroll")

/* N words from a 2-byte aligned address (odd-sized blocks: two 16-bit loads each, like
 * load_int_a2), and byte i of such words. */
template <int N> static MM_HD void load_words(const uint8_t *p, uint32_t w[N]) {
    const uint16_t *h = (const uint16_t *)p;
MM_UNROLL
    for (int k = 0; k < N; k++) w[k] = (uint32_t)h[2 * k] | (uint32_t)h[2 * k + 1] << 16;
}
static MM_HD int byte_at(const uint32_t *w, int i) { return (int)((w[i / 4] >> (8 * (i % 4))) & 0xFF); }

/* IQ4 codebook entry k. */
static MM_HD float iq4_value(int k) { return (float)blocks_kvalues_iq4nl[k]; }

template <int T> struct wdec;

template <> struct wdec<INFER_TYPE_Q8_0> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {
        const block_q8_0 *b = (const block_q8_0 *)row + u;
        uint32_t q[8];
        load_words<8>((const uint8_t *)b->qs, q);
        const float d = blocks_f16_to_f32(b->d);
MM_UNROLL
        for (int i = 0; i < 32; i++) v[i] = (float)(int8_t)byte_at(q, i) * d;
    }
};

template <> struct wdec<INFER_TYPE_Q4_0> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {
        const block_q4_0 *b = (const block_q4_0 *)row + u;
        uint32_t q[4];
        load_words<4>(b->qs, q);
        const float d = blocks_f16_to_f32(b->d);
MM_UNROLL
        for (int j = 0; j < 16; j++) {
            v[j] = (float)((byte_at(q, j) & 0xF) - 8) * d;
            v[j + 16] = (float)((byte_at(q, j) >> 4) - 8) * d;
        }
    }
};

/* Q4_1 / Q5_0 / Q5_1 / MXFP4: blocks.h's block decoders as they are (byte loads; these types are rare in new files) */
#define MM_WDEC32(T, t)                                                                                      \
    template <> struct wdec<INFER_TYPE_##T> {                                                                \
        static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {                                 \
            blocks_dequant_##t((const block_##t *)row + u, v);                                               \
        }                                                                                                    \
    };
MM_WDEC32(Q4_1, q4_1)
MM_WDEC32(Q5_0, q5_0)
MM_WDEC32(Q5_1, q5_1)
MM_WDEC32(MXFP4, mxfp4)
#undef MM_WDEC32

template <> struct wdec<INFER_TYPE_IQ4_NL> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {
        const block_iq4_nl *b = (const block_iq4_nl *)row + u;
        uint32_t q[4];
        load_words<4>(b->qs, q);
        const float d = blocks_f16_to_f32(b->d);
MM_UNROLL
        for (int j = 0; j < 16; j++) {
            v[j] = d * iq4_value(byte_at(q, j) & 0xF);
            v[j + 16] = d * iq4_value(byte_at(q, j) >> 4);
        }
    }
};

template <> struct wdec<INFER_TYPE_IQ4_XS> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {
        const block_iq4_xs *b = (const block_iq4_xs *)row + u / 8;
        const int ib = (int)(u % 8);
        uint32_t q[4];
        load_words<4>(b->qs + 16 * ib, q);
        const float dl = blocks_f16_to_f32(b->d) * (float)(blocks_iq4_xs_scale(b, ib) - 32);
MM_UNROLL
        for (int l = 0; l < 16; l++) {
            v[l] = dl * iq4_value(byte_at(q, l) & 0xF);
            v[l + 16] = dl * iq4_value(byte_at(q, l) >> 4);
        }
    }
};

/* Q2_K sub-blocks 2j, 2j+1 (j = u % 8): qs half j / 4, bits 2 (j % 4); per 16 values (d * sc) * q - dmin * m. */
template <> struct wdec<INFER_TYPE_Q2_K> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {
        const block_q2_K *b = (const block_q2_K *)row + u / 8;
        const int j = (int)(u % 8), shift = 2 * (j % 4);
        uint32_t q[8];
        load_words<8>(b->qs + 32 * (j / 4), q);
        const float d = blocks_f16_to_f32(b->d), dmin = blocks_f16_to_f32(b->dmin);
MM_UNROLL
        for (int h = 0; h < 2; h++) {
            const int sc = b->scales[2 * j + h];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
MM_UNROLL
            for (int l = 16 * h; l < 16 * h + 16; l++) v[l] = dl * (float)((byte_at(q, l) >> shift) & 3) - ml;
        }
    }
};

/* Q3_K: the 2 low bits as Q2_K, bit j of hmask[l] clear means - 4; (d * sc) * q per 16 values. */
template <> struct wdec<INFER_TYPE_Q3_K> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {
        const block_q3_K *b = (const block_q3_K *)row + u / 8;
        const int j = (int)(u % 8), shift = 2 * (j % 4);
        uint32_t q[8], hm[8];
        load_words<8>(b->qs + 32 * (j / 4), q);
        load_words<8>(b->hmask, hm);
        const float d = blocks_f16_to_f32(b->d);
MM_UNROLL
        for (int h = 0; h < 2; h++) {
            const float dl = d * (float)blocks_q3_K_scale(b, 2 * j + h);
MM_UNROLL
            for (int l = 16 * h; l < 16 * h + 16; l++)
                v[l] = dl * (float)(((byte_at(q, l) >> shift) & 3) - ((byte_at(hm, l) >> j) & 1 ? 0 : 4));
        }
    }
};

/* Q4_K / Q5_K sub-block j: (d * sc) * q - (dmin * m), Q5_K's fifth bit from bit j of qh[l]. */
template <int T> static MM_HD void k4_unit(const uint8_t *row, int64_t u, float v[32]) {
    typedef typename std::conditional<T == INFER_TYPE_Q4_K, block_q4_K, block_q5_K>::type block;
    const block *b = (const block *)row + u / 8;
    const int j = (int)(u % 8), shift = 4 * (j % 2);
    uint32_t s[3], q[8], h[8];
    load_words<3>(b->scales, s);
    load_words<8>(b->qs + 32 * (j / 2), q);
    if constexpr (T == INFER_TYPE_Q5_K) load_words<8>(b->qh, h);
    uint8_t sc, m;
    blocks_get_scale_min_k4_u32(j, s[0], s[1], s[2], &sc, &m);
    const float d1 = blocks_f16_to_f32(b->d) * (float)sc, m1 = blocks_f16_to_f32(b->dmin) * (float)m;
MM_UNROLL
    for (int l = 0; l < 32; l++) {
        int qv = (byte_at(q, l) >> shift) & 0xF;
        if constexpr (T == INFER_TYPE_Q5_K) qv += (byte_at(h, l) >> j) & 1 ? 16 : 0;
        v[l] = d1 * (float)qv - m1;
    }
}
template <> struct wdec<INFER_TYPE_Q4_K> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) { k4_unit<INFER_TYPE_Q4_K>(row, u, v); }
};
template <> struct wdec<INFER_TYPE_Q5_K> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) { k4_unit<INFER_TYPE_Q5_K>(row, u, v); }
};

template <> struct wdec<INFER_TYPE_Q6_K> {
    static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {
        const block_q6_K *b = (const block_q6_K *)row + u / 8;
        const int un = (int)(u % 8), h = un / 4, k = un % 4;
        uint32_t ql[8], qh[8];
        load_words<8>(b->ql + 64 * h + 32 * (k & 1), ql);
        load_words<8>(b->qh + 32 * h, qh);
        const int lshift = 4 * (k >> 1), hshift = 2 * k;
        const float d = blocks_f16_to_f32(b->d);
        const float d0 = d * (float)b->scales[2 * un], d1 = d * (float)b->scales[2 * un + 1];
MM_UNROLL
        for (int l = 0; l < 32; l++) {
            const int qv = (((byte_at(ql, l) >> lshift) & 0xF) | ((byte_at(qh, l) >> hshift) & 3) << 4) - 32;
            v[l] = (l < 16 ? d0 : d1) * (float)qv;
        }
    }
};

/* The lattice and ternary types: sub-block u % 8 through blocks.h's decoder (grid lookups, byte loads). */
#define MM_WDEC_IQ(T, t)                                                                                     \
    template <> struct wdec<INFER_TYPE_##T> {                                                                \
        static MM_HD void unit(const uint8_t *row, int64_t u, float v[32]) {                                 \
            blocks_sub_##t((const block_##t *)row + u / 8, (int)(u % 8), v);                                 \
        }                                                                                                    \
    };
BLOCKS_IQ_TYPES(MM_WDEC_IQ)
#undef MM_WDEC_IQ

template <int T> struct is_float_type {
    static constexpr bool value = T == INFER_TYPE_F32 || T == INFER_TYPE_F16 || T == INFER_TYPE_BF16;
};
template <int T> static MM_HD float fval(const uint8_t *row, int64_t i) {
    if constexpr (T == INFER_TYPE_F32) return ((const float *)row)[i];
    else if constexpr (T == INFER_TYPE_F16) return blocks_f16_to_f32(((const uint16_t *)row)[i]);
    else return blocks_bf16_to_f32(((const uint16_t *)row)[i]);
}

/* f16 bits of two floats, the first in the low half (the lower K index, as mma fragments want). */
static MM_HD uint32_t pack_h2(float lo, float hi) {
    return (uint32_t)__half_as_ushort(__float2half_rn(lo)) | (uint32_t)__half_as_ushort(__float2half_rn(hi)) << 16;
}
/* 32 values as f16 to a 16-byte aligned address. */
static MM_HD void store32_h(uint16_t *dst, const float v[32]) {
    uint4 *d4 = (uint4 *)dst;
MM_UNROLL
    for (int i = 0; i < 4; i++)
        d4[i] = make_uint4(pack_h2(v[8 * i], v[8 * i + 1]), pack_h2(v[8 * i + 2], v[8 * i + 3]),
                           pack_h2(v[8 * i + 4], v[8 * i + 5]), pack_h2(v[8 * i + 6], v[8 * i + 7]));
}

/* Rows m0.. and columns k0.. of W as an MM_BM x MM_BK f16 tile s[row][k]; zeros outside the matrix. */
template <int T>
static MM_HD void fill_w(const uint8_t *w, size_t rb, int64_t n_out, int64_t n_in, int64_t m0, int64_t k0, int tid,
                         uint16_t *s) {
    if constexpr (is_float_type<T>::value) {
        for (int i = tid; i < MM_BM * MM_BK / 2; i += MM_THREADS) {
            const int m = i / (MM_BK / 2), kp = i % (MM_BK / 2);
            const int64_t r = m0 + m, c = k0 + 2 * kp;
            float v0 = 0.0f, v1 = 0.0f;
            if (r < n_out) {
                const uint8_t *row = w + r * rb;
                if (c < n_in) v0 = fval<T>(row, c);
                if (c + 1 < n_in) v1 = fval<T>(row, c + 1);
            }
            *(uint32_t *)(s + m * MM_LDK + 2 * kp) = pack_h2(v0, v1);
        }
    } else {
        const int m = tid / (MM_BK / 32), h = tid % (MM_BK / 32);
        const int64_t r = m0 + m, u = k0 / 32 + h;
        float v[32];
        if (r < n_out && u < n_in / 32) {
            wdec<T>::unit(w + r * rb, u, v);
        } else {
MM_UNROLL
            for (int i = 0; i < 32; i++) v[i] = 0.0f;
        }
        store32_h(s + m * MM_LDK + 32 * h, v);
    }
}

/* mma.sync m16n8k16 fragments (PTX ISA, g = lane / 4, c = lane % 4), 16 values of K starting at
 * word kw0 = 8 * kk of the shared rows (kw = kw0 + c: the K pair 2c):
 *   A (16 x 16, row-major = W rows):  a0 (row g, K 2c..2c+1)  a1 (row g+8, 2c..)  a2 (row g, 2c+8..)  a3 (row g+8, 2c+8..)
 *   B (16 x 8, "col" = x rows):       b0 (token g, K 2c..2c+1)  b1 (token g, 2c+8..)
 *   C (16 x 8 f32):                   c0 (row g, token 2c)  c1 (g, 2c+1)  c2 (g+8, 2c)  c3 (g+8, 2c+1)
 * Each register holds the lower K index in its low half. m = the tile's first row + g, n = its first
 * token + g. */
static MM_HD void frag_a(const uint32_t *s32, int m, int kw, uint32_t af[4]) {
    constexpr int LW = MM_LDK / 2; /* words per shared row */
    af[0] = s32[m * LW + kw], af[1] = s32[(m + 8) * LW + kw], af[2] = s32[m * LW + kw + 4], af[3] = s32[(m + 8) * LW + kw + 4];
}
static MM_HD void frag_b(const uint32_t *x32, int n, int kw, uint32_t bf[2]) {
    constexpr int LW = MM_LDK / 2;
    bf[0] = x32[n * LW + kw], bf[1] = x32[n * LW + kw + 4];
}

/* acc[mt][nt] += W rows (32wm + 16mt + 0..15) x x tokens (32wn + 8nt + 0..7)^T over 16 values at kw. */
static __device__ __forceinline__ void mma_step(float acc[2][4][4], const uint32_t *s32, const uint32_t b[4][2], int wm,
                                                int g, int kw) {
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        uint32_t af[4];
        frag_a(s32, 32 * wm + 16 * mt + g, kw, af);
#pragma unroll
        for (int nt = 0; nt < 4; nt++) ptx_mma_16816(acc[mt][nt], af, b[nt][0], b[nt][1]);
    }
}

/* A block's whole K loop: acc (and acc2 when GATED) = rows m0 .. m0+63 of w (w2) times the B tile's 64 rows, over
 * all n_in values: per MM_BK step the W tiles (fill_w) and the B tile (fill_b(k0, xs), the caller's rows: mm's
 * tokens, moe_mm's gathered pairs) go to shared memory, then 4 x 16 values of mma_step per warp. ws, w2s and xs
 * are the caller's shared tiles (w2s unused unless GATED). */
template <int T, bool GATED, typename FillB>
static __device__ __forceinline__ void mm_tile_loop(const uint8_t *w, const uint8_t *w2, size_t rb, int64_t n_out,
                                                    int64_t n_in, int64_t m0, FillB fill_b, uint16_t *ws, uint16_t *w2s,
                                                    uint16_t *xs, float acc[2][4][4], float acc2[2][4][4]) {
    const int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE, g = lane / 4, c = lane % 4;
    const int wm = warp % 2, wn = warp / 2;
MM_UNROLL
    for (int mt = 0; mt < 2; mt++)
MM_UNROLL
        for (int nt = 0; nt < 4; nt++)
MM_UNROLL
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = acc2[mt][nt][e] = 0.0f;
    for (int64_t k0 = 0; k0 < n_in; k0 += MM_BK) {
        __syncthreads(); /* the previous step's tiles are consumed */
        fill_w<T>(w, rb, n_out, n_in, m0, k0, tid, ws);
        if constexpr (GATED) fill_w<T>(w2, rb, n_out, n_in, m0, k0, tid, w2s);
        fill_b(k0, xs);
        __syncthreads();
MM_UNROLL
        for (int kk = 0; kk < MM_BK / 16; kk++) {
            const int kw = 8 * kk + c;
            uint32_t b[4][2];
MM_UNROLL
            for (int nt = 0; nt < 4; nt++) frag_b((const uint32_t *)xs, 32 * wn + 8 * nt + g, kw, b[nt]);
            mma_step(acc, (const uint32_t *)ws, b, wm, g, kw);
            if constexpr (GATED) mma_step(acc2, (const uint32_t *)w2s, b, wm, g, kw);
        }
    }
}

/* The weight types both modes cover (blocks_iq.h's included); one switch over them dispatches. */
#define MM_TYPES(X) X(F32) X(F16) X(BF16) X(Q8_0) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(IQ4_NL) X(IQ4_XS) X(Q2_K) X(Q3_K) \
    X(Q4_K) X(Q5_K) X(Q6_K) X(MXFP4) BLOCKS_IQ_TYPE_IDS(X)
#endif
