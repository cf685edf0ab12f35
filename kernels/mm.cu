/* mm.cu: quantised matrix x many tokens (prefill), y[t][r] = epilogue( sum_c W[r][c] x[t][c] ), for
 * every weight type mmv takes; same epilogues (plain, + residual, SwiGLU of two matrices).
 *
 * Two modes, picked once per cuda_mm_state from env INFER_MATMUL (kernels.h):
 *
 * "mma" (default): a tensor-core GEMM that dequantises W on the fly. Block = 4 warps, output tile
 * MM_BM = 64 rows (outputs) x MM_BN = 64 tokens, K steps of MM_BK = 64 values. Per step:
 *   1. the 64 x 64 tile of W -> f16 in shared memory ws[row][k] (rows MM_LDK = 72 halves apart: 144-
 *      byte rows keep 16-byte stores aligned and make the fragment loads conflict-free, bank 4g + c);
 *      quantised types: thread t decodes the 32-value unit (t % 2) of row t / 2 (one q8 unit: a Q8_0 /
 *      Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL block, or a K-quant / IQ4_XS sub-block) with the math of
 *      blocks.h, so the values are bit-identical to lib/quant.c's before the f16 rounding; float types
 *      copy pairs, coalesced;
 *   2. the 64 x 64 tile of x (f32) -> f16 in xs[token][k], the same way;
 *   3. warp (wm, wn) = (warp % 2, warp / 2) owns rows 32wm.. and tokens 32wn..: 2 x 4 mma.sync
 *      m16n8k16 (f16 x f16 -> f32) per 16 values of K; W is the row-major A operand, x^T the
 *      column-major B operand, so both fragments are 32-bit pairs along K straight from shared memory.
 * SwiGLU keeps a second W tile and accumulator set. Tails: rows >= n_out, tokens >= n_tokens and
 * columns >= n_in (float types: any n_in; quantised: a 32-unit tail of the last 64-step) load as
 * zeros and are not stored. The epilogue reads add[o] before writing y[o] in the same thread, so add
 * may alias y. a->xq is not used: both modes take the f32 activations.
 *
 * "cublas": the baseline. x is converted to f16 in token chunks and W dequantised to f16 in row
 * chunks (mm_plan_chunks, kernels.h) inside the state's fixed scratch, then cublasGemmEx (f16 inputs,
 * f32 output, CUBLAS_COMPUTE_32F) writes y directly: y^T = W x^T in cuBLAS's column-major terms
 * (A = W chunk transposed, lda = n_in; B = x chunk, ldb = n_in; C = y + t0 * n_out + r0, ldc = n_out).
 * MMV_ADD is beta = 1 on y (add copied into y first unless it aliases y); SwiGLU writes the gate
 * product into y, the up product into the scratch's f32 part, then an epilogue kernel combines them.
 * cublasSetStream resets the handle's workspace, so every call sets the stream then the workspace.
 *
 * Accuracy: x (and W for float types) are rounded to f16 (11-bit significand), products are exact
 * and summed in f32: relative error ~2^-11 per term (test-ops states the bound). Activations
 * beyond the f16 range (|x| > 65504) become Inf; BF16 weights below 2^-24 in magnitude flush to 0.
 * Neither mode allocates, syncs or reads host memory per call (graph-capturable).
 *
 * Both modes run on the CPU under the emulator (make EMU=1: mma.sync and cuBLAS included), so test-ops
 * checks this file on every machine.
 * note: the mma kernel has no software pipelining yet (decode, sync, mma per step); it is the first
 * version: bench-ops -o mm compares it with the cuBLAS mode.
 */
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

extern "C" { /* status.h has no C++ guard; included first so quant.h's copy is a no-op */
#include "status.h"
}
#include "blocks.h"
#include "common.cuh"
#include "ptx.cuh"
#include "quant.h"

enum { MM_BM = 64, MM_BN = 64, MM_BK = 64, MM_LDK = MM_BK + 8, MM_WARPS = 4, MM_THREADS = MM_WARPS * WARP_SIZE };
enum { MM_MODE_MMA = 0, MM_MODE_CUBLAS = 1 };
#define MM_WORKSPACE_BYTES ((size_t)32 << 20)

static_assert(MM_BM * MM_BK / 32 == MM_THREADS, "one 32-value unit of the W tile per thread");
static_assert((MM_LDK * 2) % 16 == 0, "shared rows keep 16-byte alignment");

struct cuda_mm_state {
    int mode;             /* MM_MODE_* */
    cublasHandle_t blas;  /* cublas mode only */
    void *workspace;      /* MM_WORKSPACE_BYTES, cuBLAS's own */
    void *scratch;        /* MM_SCRATCH_BYTES, the f16 copies */
};

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

static MM_HD float silu(float v) { return v / (1.0f + __expf(-v)); }

/* ---- the tensor-core kernel ---- */

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

/* Tokens n0.. and columns k0.. of x as an MM_BN x MM_BK f16 tile s[token][k]; zeros outside. */
static MM_HD void fill_x(const float *x, int64_t n_tokens, int64_t n_in, int64_t n0, int64_t k0, int tid, uint16_t *s) {
    for (int i = tid; i < MM_BN * MM_BK / 2; i += MM_THREADS) {
        const int n = i / (MM_BK / 2), kp = i % (MM_BK / 2);
        const int64_t t = n0 + n, c = k0 + 2 * kp;
        float v0 = 0.0f, v1 = 0.0f;
        if (t < n_tokens) {
            const float *xr = x + t * n_in;
            if (c < n_in) v0 = xr[c];
            if (c + 1 < n_in) v1 = xr[c + 1];
        }
        *(uint32_t *)(s + n * MM_LDK + 2 * kp) = pack_h2(v0, v1);
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

/* Warp (wm, wn) owns rows 32wm + 16mt (mt < 2) and tokens 32wn + 8nt (nt < 4) of the block's tile. */
template <bool SWIGLU>
static MM_HD void store_tile(const struct mm_args &a, const float acc[2][4][4], const float acc2[2][4][4], int64_t m0,
                             int64_t n0, int wm, int wn, int g, int c) {
MM_UNROLL
    for (int mt = 0; mt < 2; mt++)
MM_UNROLL
        for (int nt = 0; nt < 4; nt++)
MM_UNROLL
            for (int e = 0; e < 4; e++) {
                const int64_t r = m0 + 32 * wm + 16 * mt + g + (e >= 2 ? 8 : 0);
                const int64_t t = n0 + 32 * wn + 8 * nt + 2 * c + (e & 1);
                if (r >= a.n_out || t >= a.n_tokens) continue;
                const int64_t o = t * a.n_out + r;
                float v = acc[mt][nt][e];
                if (a.epilogue == MMV_ADD) v += a.add[o]; /* read before the write below: add may be y */
                if constexpr (SWIGLU) v = silu(v) * acc2[mt][nt][e];
                a.y[o] = v;
            }
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

template <int T, bool SWIGLU>
static __global__ void __launch_bounds__(MM_THREADS) mm_kernel(const __grid_constant__ struct mm_args a, const size_t rb) {
    __shared__ __align__(16) uint16_t ws[MM_BM * MM_LDK], xs[MM_BN * MM_LDK], w2s[SWIGLU ? MM_BM * MM_LDK : 8];
    const int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE, g = lane / 4, c = lane % 4;
    const int wm = warp % 2, wn = warp / 2;
    const int64_t m0 = (int64_t)blockIdx.x * MM_BM, n0 = (int64_t)blockIdx.y * MM_BN;
    float acc[2][4][4], acc2[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mt][nt][e] = acc2[mt][nt][e] = 0.0f;

    for (int64_t k0 = 0; k0 < a.n_in; k0 += MM_BK) {
        __syncthreads(); /* the previous step's tiles are consumed */
        fill_w<T>((const uint8_t *)a.w, rb, a.n_out, a.n_in, m0, k0, tid, ws);
        if constexpr (SWIGLU) fill_w<T>((const uint8_t *)a.w2, rb, a.n_out, a.n_in, m0, k0, tid, w2s);
        fill_x(a.x, a.n_tokens, a.n_in, n0, k0, tid, xs);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MM_BK / 16; kk++) {
            const int kw = 8 * kk + c;
            uint32_t b[4][2];
#pragma unroll
            for (int nt = 0; nt < 4; nt++) frag_b((const uint32_t *)xs, 32 * wn + 8 * nt + g, kw, b[nt]);
            mma_step(acc, (const uint32_t *)ws, b, wm, g, kw);
            if constexpr (SWIGLU) mma_step(acc2, (const uint32_t *)w2s, b, wm, g, kw);
        }
    }
    store_tile<SWIGLU>(a, acc, acc2, m0, n0, wm, wn, g, c);
}

template <int T> static cudaError_t mma_launch(const struct mm_args *a, size_t rb, cudaStream_t s) {
    const dim3 grid((unsigned)((a->n_out + MM_BM - 1) / MM_BM), (unsigned)((a->n_tokens + MM_BN - 1) / MM_BN));
    if (a->epilogue == MMV_SWIGLU) launch_kernel(mm_kernel<T, true>, grid, MM_THREADS, 0, s, *a, rb);
    else launch_kernel(mm_kernel<T, false>, grid, MM_THREADS, 0, s, *a, rb);
    return cudaGetLastError();
}

/* ---- the cuBLAS baseline ---- */

/* Rows r0 .. r0+nr-1 of W as f16, rows n_in apart (quantised types: n_in a multiple of 32, so every
 * unit's 64 bytes stay 16-byte aligned). */
template <int T>
static __global__ void dequant_f16_kernel(const uint8_t *w, size_t rb, int64_t n_in, int64_t r0, int64_t nr, uint16_t *out) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    if constexpr (is_float_type<T>::value) {
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nr * n_in; i += step)
            out[i] = __half_as_ushort(__float2half_rn(fval<T>(w + (r0 + i / n_in) * rb, i % n_in)));
    } else {
        const int64_t units = n_in / 32;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nr * units; i += step) {
            float v[32];
            wdec<T>::unit(w + (r0 + i / units) * rb, i % units, v);
            store32_h(out + (i / units) * n_in + 32 * (i % units), v);
        }
    }
}

static __global__ void f32_to_f16_kernel(const float *x, int64_t n, uint16_t *out) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

/* y[t0 + t][r0 + r] = silu(y[..]) * up[t * nr + r] for the chunk's nt tokens and nr rows. */
static __global__ void swiglu_chunk_kernel(float *y, const float *up, int64_t n_out, int64_t r0, int64_t nr, int64_t t0,
                                           int64_t nt) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nr * nt; i += step) {
        float *o = y + (t0 + i / nr) * n_out + r0 + i % nr;
        *o = silu(*o) * up[i];
    }
}

/* Blocks of 256 threads for n grid-stride items. */
static unsigned grid_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

static cudaError_t blas_error(cublasStatus_t e) {
    switch (e) {
    case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
    case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE: case CUBLAS_STATUS_NOT_SUPPORTED: return cudaErrorInvalidValue;
    default: return cudaErrorUnknown;
    }
}

/* W rows r0.. (nr) -> scratch f16, then C = W_chunk x_chunk^T into c (ldc floats apart). */
template <int T>
static cudaError_t blas_chunk(const struct mm_args *a, struct cuda_mm_state *st, const struct mm_chunks *p,
                              const void *w, size_t rb, int64_t r0, int64_t nr, int64_t nt, float beta, float *c,
                              int64_t ldc, cudaStream_t s) {
    uint16_t *xh = (uint16_t *)st->scratch, *wh = (uint16_t *)((char *)st->scratch + p->w_off);
    const int64_t n_items = is_float_type<T>::value ? nr * a->n_in : nr * (a->n_in / 32);
    launch_kernel(dequant_f16_kernel<T>, grid_for(n_items), 256, 0, s, (const uint8_t *)w, rb, a->n_in, r0, nr, wh);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const float alpha = 1.0f;
    return blas_error(cublasGemmEx(st->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)nt, (int)a->n_in, &alpha, wh,
                                   CUDA_R_16F, (int)a->n_in, xh, CUDA_R_16F, (int)a->n_in, &beta, c, CUDA_R_32F, (int)ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <int T> static cudaError_t blas_launch(const struct mm_args *a, struct cuda_mm_state *st, size_t rb, cudaStream_t s) {
    struct mm_chunks p;
    const int swiglu = a->epilogue == MMV_SWIGLU;
    if (!mm_plan_chunks(a->n_in, a->n_out, a->n_tokens, swiglu, MM_SCRATCH_BYTES, &p)) return cudaErrorInvalidValue;
    cudaError_t e = blas_error(cublasSetStream(st->blas, s));
    if (e == cudaSuccess) e = blas_error(cublasSetWorkspace(st->blas, st->workspace, MM_WORKSPACE_BYTES));
    if (e != cudaSuccess) return e;
    if (a->epilogue == MMV_ADD && a->add != a->y) { /* beta = 1 accumulates onto the residual in y */
        e = cudaMemcpyAsync(a->y, a->add, sizeof(float) * (size_t)(a->n_tokens * a->n_out), cudaMemcpyDeviceToDevice, s);
        if (e != cudaSuccess) return e;
    }
    const float beta = a->epilogue == MMV_ADD ? 1.0f : 0.0f;
    float *up = (float *)((char *)st->scratch + p.t_off);
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += p.tokens) {
        const int64_t nt = a->n_tokens - t0 < p.tokens ? a->n_tokens - t0 : p.tokens;
        launch_kernel(f32_to_f16_kernel, grid_for(nt * a->n_in), 256, 0, s, a->x + t0 * a->n_in, nt * a->n_in, (uint16_t *)st->scratch);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        for (int64_t r0 = 0; r0 < a->n_out; r0 += p.rows) {
            const int64_t nr = a->n_out - r0 < p.rows ? a->n_out - r0 : p.rows;
            float *yc = a->y + t0 * a->n_out + r0;
            if ((e = blas_chunk<T>(a, st, &p, a->w, rb, r0, nr, nt, beta, yc, a->n_out, s)) != cudaSuccess) return e;
            if (!swiglu) continue;
            if ((e = blas_chunk<T>(a, st, &p, a->w2, rb, r0, nr, nt, 0.0f, up, nr, s)) != cudaSuccess) return e;
            launch_kernel(swiglu_chunk_kernel, grid_for(nr * nt), 256, 0, s, a->y, up, a->n_out, r0, nr, t0, nt);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}

/* ---- entry points ---- */

extern "C" cudaError_t cuda_mm_state_create(struct cuda_mm_state **out) {
    *out = NULL;
    const char *env = getenv("INFER_MATMUL");
    int mode;
    if (!env || !*env || !strcmp(env, "mma")) mode = MM_MODE_MMA;
    else if (!strcmp(env, "cublas")) mode = MM_MODE_CUBLAS;
    else return cudaErrorInvalidValue;
    struct cuda_mm_state *st = (struct cuda_mm_state *)xcalloc(1, sizeof *st);
    if (!st) return cudaErrorMemoryAllocation;
    st->mode = mode;
    cudaError_t e = cudaSuccess;
    if (mode == MM_MODE_CUBLAS) {
        e = blas_error(cublasCreate(&st->blas));
        if (e == cudaSuccess) e = cudaMalloc(&st->workspace, MM_WORKSPACE_BYTES);
        if (e == cudaSuccess) e = cudaMalloc(&st->scratch, MM_SCRATCH_BYTES);
    }
    if (e != cudaSuccess) {
        cuda_mm_state_free(st);
        return e;
    }
    *out = st;
    return cudaSuccess;
}

extern "C" void cuda_mm_state_free(struct cuda_mm_state *st) {
    if (!st) return;
    if (st->blas) cublasDestroy(st->blas);
    if (st->workspace) cudaFree(st->workspace);
    if (st->scratch) cudaFree(st->scratch);
    xfree(st);
}

/* The weight types both modes cover (blocks_iq.h's included); one switch over them dispatches. */
#define MM_TYPES(X) X(F32) X(F16) X(BF16) X(Q8_0) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(IQ4_NL) X(IQ4_XS) X(Q2_K) X(Q3_K) \
    X(Q4_K) X(Q5_K) X(Q6_K) X(MXFP4) BLOCKS_IQ_TYPE_IDS(X)

template <int T> static cudaError_t launch_type(const struct mm_args *a, struct cuda_mm_state *st, size_t rb, cudaStream_t s) {
    return st->mode == MM_MODE_CUBLAS ? blas_launch<T>(a, st, rb, s) : mma_launch<T>(a, rb, s);
}

extern "C" cudaError_t cuda_mm(const struct mm_args *a, struct cuda_mm_state *st, cudaStream_t s) {
    if (!a || !st || !a->w || !a->x || !a->y) return cudaErrorInvalidValue;
    const struct quant_type *qt = quant_type(a->type);
    if (!qt || a->n_in <= 0 || a->n_out <= 0 || a->n_tokens < 1 || a->n_in % qt->blck != 0) return cudaErrorInvalidValue;
    if (a->epilogue < MMV_PLAIN || a->epilogue > MMV_SWIGLU || (a->epilogue == MMV_SWIGLU && !a->w2) ||
        (a->epilogue == MMV_ADD && !a->add))
        return cudaErrorInvalidValue;
    /* cuBLAS takes int sizes; the mma grid's y dimension is at most 65535 */
    if (a->n_in > 2147483647 || a->n_out > 2147483647 || (a->n_tokens + MM_BN - 1) / MM_BN > 65535) return cudaErrorInvalidValue;
    const size_t rb = quant_row_bytes(a->type, a->n_in);
    switch (a->type) {
#define MM_DISPATCH(t) case INFER_TYPE_##t: return launch_type<INFER_TYPE_##t>(a, st, rb, s);
        MM_TYPES(MM_DISPATCH)
#undef MM_DISPATCH
    default: return cudaErrorInvalidValue;
    }
}
