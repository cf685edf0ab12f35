/* mmv: the dot products of a weight row with one activation row, for every weight type, cpu_mmv, and
 * cpu_mmv_multi (the parts in turn through cpu_mmv: the CPU twin of CUDA's one-launch form).
 *
 * Math (llama.cpp's CPU vec_dot, docs/quant.md §5): the activations are quantised once per op to the weight
 * type's partner (Q8_K for K-quants and IQ4_XS, Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4, Q8_1 for Q4_1/Q5_1); per
 * block the integer sum Σ scale·q_w·q_x is exact, then multiplied by the f32 product of the two block
 * scales (Q4_1/Q5_1 add m·s, s = d_x·Σq_x from the Q8_1 block). Float weights
 * take f32 activations, rounded to f16 (F16) or bf16 (BF16) first as ggml does, and multiply in f32.
 * Layout: w rows are n_in/blck blocks packed; activation rows likewise in the partner type.
 *
 * Variants (enum cpu_isa_level): the scalar functions are the reference; AVX2 versions (maddubs/madd on
 * 32 bytes) and AVX-512 F/BW/VL + VNNI versions (dpbusd on 64 bytes, two 32-element groups at a time)
 * are picked at run time with __builtin_cpu_supports, compiled with per-function target attributes so
 * the library builds for any x86-64; other architectures get the scalar code. INFER_CPU_ISA=avx2|scalar
 * caps the level. SIMD variants keep the integer sums exact and change only the f32 summation order;
 * the AVX-512 K-quant dots (Q2_K to Q6_K) and 32-value dots (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) keep
 * the scalar reference's per-block f32 steps, which the prefill GEMMs of mm_kq.c and mm_q32.c reproduce
 * lane by lane, so mm and mmv agree bit for bit and a prompt's logits do not depend on its batching.
 * note: a four-row Q4_K/Q6_K dot (shared activation work) was 20% faster from cache but 2-3x slower from
 * DRAM on long rows (four interleaved row streams starve the prefetchers), so decode keeps one row at a time.
 * Several tokens (speculative verification) share one row instead: cpu_vec_dot_xn (Q4_K, Q6_K, AVX-512).
 */
#include <stdlib.h>
#include <string.h>

#include "amx.h"
#include "cpu.h"
#include "mmv_iq.h"
#include "mm_r16.h"

#if defined(__x86_64__) || defined(__i386__)
#define MMV_X86 1
#include <immintrin.h>

#include "mm_strip.h"
#endif


/* ---------------- scalar reference kernels ---------------- */

static float dot_f32(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(a[i] * b[i]);
    return (float)s;
}

static float dot_f16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(blocks_f16_to_f32(a[i]) * blocks_f16_to_f32(blocks_f32_to_f16(b[i])));
    return (float)s;
}

static float dot_bf16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(blocks_bf16_to_f32(a[i]) * blocks_bf16_to_f32(blocks_f32_to_bf16(b[i])));
    return (float)s;
}

/* The 32-value types' block terms: the exact integer sum times the f32 scale product (Q4_1 / Q5_1 plus
 * m·s). Every dot of these types, scalar, AVX-512 and the GEMM of mm_q32.c, adds them in block order
 * (s += term), so they agree bit for bit; the AVX2 dots sum in another order (no GEMM at that level). */
static inline float blk_q8_0(const block_q8_0 *a, const block_q8_0 *b) {
    int sumi = 0;
    for (int j = 0; j < 32; j++) sumi += a->qs[j] * b->qs[j];
    return (float)sumi * (blocks_f16_to_f32(a->d) * blocks_f16_to_f32(b->d));
}

static inline float blk_q4_0(const block_q4_0 *a, const block_q8_0 *b) {
    int sumi = 0;
    for (int j = 0; j < 16; j++) sumi += ((a->qs[j] & 0xF) - 8) * b->qs[j] + ((a->qs[j] >> 4) - 8) * b->qs[j + 16];
    return (float)sumi * (blocks_f16_to_f32(a->d) * blocks_f16_to_f32(b->d));
}

/* Σ kv[q]·y over a 32-value block of 16-entry codebook codes (IQ4_NL, MXFP4) */
static inline int mmv_kv_sumi(const int8_t *kv, const uint8_t *qs, const int8_t *y) {
    int sumi = 0;
    for (int j = 0; j < 16; j++) sumi += kv[qs[j] & 0xF] * y[j] + kv[qs[j] >> 4] * y[j + 16];
    return sumi;
}

static inline float blk_iq4_nl(const block_iq4_nl *a, const block_q8_0 *b) {
    const int sumi = mmv_kv_sumi(blocks_kvalues_iq4nl, a->qs, b->qs);
    return (float)sumi * (blocks_f16_to_f32(a->d) * blocks_f16_to_f32(b->d));
}

/* MXFP4 as IQ4_NL: its codebook (E2M1 doubled), its scale 2^(e-128) instead of an f16. */
static inline float blk_mxfp4(const block_mxfp4 *a, const block_q8_0 *b) {
    const int sumi = mmv_kv_sumi(blocks_kvalues_mxfp4, a->qs, b->qs);
    return (float)sumi * (blocks_e8m0_half(a->e) * blocks_f16_to_f32(b->d));
}

/* Q4_1 / Q5_1 (w = d·q + m) pair with Q8_1, whose s = d_x·Σq_x turns the offset into one product per block:
 * Σ w·x = d·d_x·Σ q·q_x + m·s. Q5_0 (w = d·(q - 16)) pairs with Q8_0. Bit j of qh is bit 4 of value j. */
static inline float blk_q4_1(const block_q4_1 *a, const block_q8_1 *b) {
    int sumi = 0;
    for (int j = 0; j < 16; j++) sumi += (a->qs[j] & 0xF) * b->qs[j] + (a->qs[j] >> 4) * b->qs[j + 16];
    return (blocks_f16_to_f32(a->d) * blocks_f16_to_f32(b->d)) * (float)sumi +
           blocks_f16_to_f32(a->m) * blocks_f16_to_f32(b->s);
}

static inline float blk_q5_0(const block_q5_0 *a, const block_q8_0 *b) {
    const uint32_t qh = blocks_qh32(a->qh);
    int sumi = 0;
    for (int j = 0; j < 32; j++) sumi += (blocks_q5_q(a->qs, qh, j) - 16) * b->qs[j];
    return (float)sumi * (blocks_f16_to_f32(a->d) * blocks_f16_to_f32(b->d));
}

static inline float blk_q5_1(const block_q5_1 *a, const block_q8_1 *b) {
    const uint32_t qh = blocks_qh32(a->qh);
    int sumi = 0;
    for (int j = 0; j < 32; j++) sumi += blocks_q5_q(a->qs, qh, j) * b->qs[j];
    return (blocks_f16_to_f32(a->d) * blocks_f16_to_f32(b->d)) * (float)sumi +
           blocks_f16_to_f32(a->m) * blocks_f16_to_f32(b->s);
}

#define MMV_DOT_Q32(name, wt, xt)                                                                                  \
    static float dot_##name(int64_t n, const void *w, const void *x) {                                              \
        const wt *a = w;                                                                                           \
        const xt *b = x;                                                                                           \
        float s = 0;                                                                                               \
        for (int64_t i = 0; i < n / QK8_0; i++) s += blk_##name(a + i, b + i);                                     \
        return s;                                                                                                  \
    }
MMV_DOT_Q32(q8_0, block_q8_0, block_q8_0)
MMV_DOT_Q32(q4_0, block_q4_0, block_q8_0)
MMV_DOT_Q32(iq4_nl, block_iq4_nl, block_q8_0)
MMV_DOT_Q32(q4_1, block_q4_1, block_q8_1)
MMV_DOT_Q32(q5_0, block_q5_0, block_q8_0)
MMV_DOT_Q32(q5_1, block_q5_1, block_q8_1)
MMV_DOT_Q32(mxfp4, block_mxfp4, block_q8_0)

/* Σ m_j · (bsums of sub-block j): the min term of Q4_K/Q5_K, exact in int. */
static inline int mmv_k_mins(const uint8_t *scales, const int16_t *bsums, uint8_t sc[8]) {
    int summ = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t m;
        blocks_get_scale_min_k4(j, scales, &sc[j], &m);
        summ += m * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    return summ;
}

/* Q2_K: 16 sub-blocks of 16 values, each a 4-bit scale (low nibble) and 4-bit min (high nibble); the
 * 32-byte half h of qs holds values 128h + 32k + l in bits 2k of byte l. The min term uses the bsums. */
static float dot_q2_k(int64_t n, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int summ = 0, sumi = 0;
        for (int j = 0; j < 16; j++) summ += (a[i].scales[j] >> 4) * b[i].bsums[j];
        for (int g = 0; g < 8; g++) { /* 32 values 32g..32g+31: sub-blocks 2g, 2g+1 */
            const uint8_t *q = a[i].qs + 32 * (g / 4);
            const int8_t *y = b[i].qs + 32 * g;
            const int shift = 2 * (g % 4);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 16; l++) {
                s0 += ((q[l] >> shift) & 3) * y[l];
                s1 += ((q[l + 16] >> shift) & 3) * y[l + 16];
            }
            sumi += (a[i].scales[2 * g] & 0xF) * s0 + (a[i].scales[2 * g + 1] & 0xF) * s1;
        }
        s += (blocks_f16_to_f32(a[i].d) * b[i].d) * (float)sumi - (blocks_f16_to_f32(a[i].dmin) * b[i].d) * (float)summ;
    }
    return s;
}

/* Q3_K: the 2 low bits as in Q2_K, bit g of hmask[l] (g = value / 32) clear means q - 4; 16 signed 6-bit
 * scales (blocks_q3_K_scale). */
static float dot_q3_k(int64_t n, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int g = 0; g < 8; g++) {
            const uint8_t *q = a[i].qs + 32 * (g / 4);
            const int8_t *y = b[i].qs + 32 * g;
            const int shift = 2 * (g % 4);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 16; l++) {
                s0 += (((q[l] >> shift) & 3) - ((a[i].hmask[l] >> g) & 1 ? 0 : 4)) * y[l];
                s1 += (((q[l + 16] >> shift) & 3) - ((a[i].hmask[l + 16] >> g) & 1 ? 0 : 4)) * y[l + 16];
            }
            sumi += blocks_q3_K_scale(&a[i], 2 * g) * s0 + blocks_q3_K_scale(&a[i], 2 * g + 1) * s1;
        }
        s += (blocks_f16_to_f32(a[i].d) * b[i].d) * (float)sumi;
    }
    return s;
}

static float dot_q4_k(int64_t n, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8];
        int summ = mmv_k_mins(a[i].scales, b[i].bsums, sc), sumi = 0;
        for (int p = 0; p < 4; p++) {
            const uint8_t *q = a[i].qs + 32 * p;
            const int8_t *y = b[i].qs + 64 * p;
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 0xF) * y[l];
                s1 += (q[l] >> 4) * y[l + 32];
            }
            sumi += sc[2 * p] * s0 + sc[2 * p + 1] * s1;
        }
        s += (blocks_f16_to_f32(a[i].d) * b[i].d) * (float)sumi - (blocks_f16_to_f32(a[i].dmin) * b[i].d) * (float)summ;
    }
    return s;
}

static float dot_q5_k(int64_t n, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8];
        int summ = mmv_k_mins(a[i].scales, b[i].bsums, sc), sumi = 0;
        for (int p = 0; p < 4; p++) {
            const uint8_t *q = a[i].qs + 32 * p;
            const int8_t *y = b[i].qs + 64 * p;
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += ((q[l] & 0xF) | ((a[i].qh[l] >> (2 * p)) & 1) << 4) * y[l];
                s1 += ((q[l] >> 4) | ((a[i].qh[l] >> (2 * p + 1)) & 1) << 4) * y[l + 32];
            }
            sumi += sc[2 * p] * s0 + sc[2 * p + 1] * s1;
        }
        s += (blocks_f16_to_f32(a[i].d) * b[i].d) * (float)sumi - (blocks_f16_to_f32(a[i].dmin) * b[i].d) * (float)summ;
    }
    return s;
}

static float dot_q6_k(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *sc = a[i].scales + 8 * h, *y = b[i].qs + 128 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q0 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q1 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                sumi += sc[is] * q0 * y[l] + sc[is + 2] * q1 * y[l + 32] + sc[is + 4] * q2 * y[l + 64] +
                        sc[is + 6] * q3 * y[l + 96];
            }
        }
        s += (blocks_f16_to_f32(a[i].d) * b[i].d) * (float)sumi;
    }
    return s;
}

static inline int mmv_iq4_xs_scale(const block_iq4_xs *a, int ib) { return blocks_iq4_xs_scale(a, ib) - 32; }

static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    const int8_t *kv = blocks_kvalues_iq4nl;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = a[i].qs + 16 * ib;
            const int8_t *y = b[i].qs + 32 * ib;
            int t = 0;
            for (int j = 0; j < 16; j++) t += kv[q[j] & 0xF] * y[j] + kv[q[j] >> 4] * y[j + 16];
            sumi += mmv_iq4_xs_scale(&a[i], ib) * t;
        }
        s += (blocks_f16_to_f32(a[i].d) * b[i].d) * (float)sumi;
    }
    return s;
}

/* ---------------- AVX2 kernels ---------------- */
#ifdef MMV_X86
#define MMV_AVX2 __attribute__((target("avx2,fma,f16c")))

MMV_AVX2 static inline int32_t mmv_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

MMV_AVX2 static inline float mmv_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Σ a·b of signed bytes in 8 int32 lanes: |a| times b with a's sign, since maddubs wants one side unsigned. */
MMV_AVX2 static inline __m256i mmv_dot_i8(__m256i a, __m256i b) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15) then high nibbles (16..31). */
MMV_AVX2 static inline __m256i mmv_nibbles(const uint8_t *q) {
    __m128i t = _mm_loadu_si128((const __m128i *)q), m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(t, 4), m), _mm_and_si128(t, m));
}

MMV_AVX2 static float dot_f32_avx2(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    float s = mmv_hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

MMV_AVX2 static float dot_f16_avx2(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8)));
        __m256 x0 = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(b + i), _MM_FROUND_TO_NEAREST_INT));
        __m256 x1 = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(b + i + 8), _MM_FROUND_TO_NEAREST_INT));
        acc0 = _mm256_fmadd_ps(w0, x0, acc0);
        acc1 = _mm256_fmadd_ps(w1, x1, acc1);
    }
    float s = mmv_hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += blocks_f16_to_f32(a[i]) * blocks_f16_to_f32(blocks_f32_to_f16(b[i]));
    return s;
}

/* x rounded to bf16 (nearest even), kept as f32: ggml's fp32 -> bf16 for finite values. */
MMV_AVX2 static inline __m256 mmv_round_bf16(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

MMV_AVX2 static inline __m256 mmv_load_bf16(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

MMV_AVX2 static float dot_bf16_avx2(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(mmv_load_bf16(a + i), mmv_round_bf16(_mm256_loadu_ps(b + i)), acc0);
        acc1 = _mm256_fmadd_ps(mmv_load_bf16(a + i + 8), mmv_round_bf16(_mm256_loadu_ps(b + i + 8)), acc1);
    }
    float s = mmv_hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += blocks_bf16_to_f32(a[i]) * blocks_bf16_to_f32(blocks_f32_to_bf16(b[i]));
    return s;
}

MMV_AVX2 static float dot_q8_0_avx2(int64_t n, const void *w, const void *x) {
    const block_q8_0 *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i s = mmv_dot_i8(_mm256_loadu_si256((const __m256i *)a[i].qs), _mm256_loadu_si256((const __m256i *)b[i].qs));
        __m256 d = _mm256_set1_ps(_cvtsh_ss(a[i].d) * _cvtsh_ss(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
    }
    return mmv_hsum(acc);
}

MMV_AVX2 static float dot_q4_0_avx2(int64_t n, const void *w, const void *x) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i q = _mm256_sub_epi8(mmv_nibbles(a[i].qs), _mm256_set1_epi8(8));
        __m256i s = mmv_dot_i8(q, _mm256_loadu_si256((const __m256i *)b[i].qs));
        __m256 d = _mm256_set1_ps(_cvtsh_ss(a[i].d) * _cvtsh_ss(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
    }
    return mmv_hsum(acc);
}

/* A 16-entry codebook (blocks_kvalues_iq4nl, blocks_kvalues_mxfp4) in both 128-bit lanes, for shuffle_epi8 */
MMV_AVX2 static inline __m256i mmv_kv_table(const int8_t *kv) {
    __m128i t = _mm_loadu_si128((const __m128i *)kv);
    return _mm256_set_m128i(t, t);
}

/* Σ codebook[q]·y of one 32-value block (16 nibble bytes) in 8 int32 lanes */
MMV_AVX2 static inline __m256i mmv_kv_block(__m256i kv, const uint8_t *qs, const int8_t *y) {
    return mmv_dot_i8(_mm256_shuffle_epi8(kv, mmv_nibbles(qs)), _mm256_loadu_si256((const __m256i *)y));
}

MMV_AVX2 static float dot_iq4_nl_avx2(int64_t n, const void *w, const void *x) {
    const block_iq4_nl *a = w;
    const block_q8_0 *b = x;
    const __m256i kv = mmv_kv_table(blocks_kvalues_iq4nl);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i s = mmv_kv_block(kv, a[i].qs, b[i].qs);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(a[i].d) * _cvtsh_ss(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
    }
    return mmv_hsum(acc);
}

MMV_AVX2 static float dot_mxfp4_avx2(int64_t n, const void *w, const void *x) {
    const block_mxfp4 *a = w;
    const block_q8_0 *b = x;
    const __m256i kv = mmv_kv_table(blocks_kvalues_mxfp4);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i s = mmv_kv_block(kv, a[i].qs, b[i].qs);
        __m256 d = _mm256_set1_ps(blocks_e8m0_half(a[i].e) * _cvtsh_ss(b[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
    }
    return mmv_hsum(acc);
}

/* The 32 bits of a Q5 qh as 32 bytes, 0x10 where bit j (value j) is set: byte j takes qh byte j / 8,
 * then tests its own bit. */
MMV_AVX2 static inline __m256i mmv_q5_high(const uint8_t *qh) {
    const __m256i idx = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)blocks_qh32(qh)), idx);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* Σ u·y of unsigned u (< 128) and signed y bytes in 8 int32 lanes: no sign trick needed */
MMV_AVX2 static inline __m256i mmv_dot_u8(__m256i u, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

MMV_AVX2 static float dot_q4_1_avx2(int64_t n, const void *w, const void *x) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float sm = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i s = mmv_dot_u8(mmv_nibbles(a[i].qs), _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d) * _cvtsh_ss(b[i].d)), _mm256_cvtepi32_ps(s), acc);
        sm += _cvtsh_ss(a[i].m) * _cvtsh_ss(b[i].s);
    }
    return mmv_hsum(acc) + sm;
}

MMV_AVX2 static float dot_q5_0_avx2(int64_t n, const void *w, const void *x) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i q = _mm256_sub_epi8(_mm256_or_si256(mmv_nibbles(a[i].qs), mmv_q5_high(a[i].qh)), _mm256_set1_epi8(16));
        __m256i s = mmv_dot_i8(q, _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d) * _cvtsh_ss(b[i].d)), _mm256_cvtepi32_ps(s), acc);
    }
    return mmv_hsum(acc);
}

MMV_AVX2 static float dot_q5_1_avx2(int64_t n, const void *w, const void *x) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    __m256 acc = _mm256_setzero_ps();
    float sm = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        __m256i q = _mm256_or_si256(mmv_nibbles(a[i].qs), mmv_q5_high(a[i].qh));
        __m256i s = mmv_dot_u8(q, _mm256_loadu_si256((const __m256i *)b[i].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d) * _cvtsh_ss(b[i].d)), _mm256_cvtepi32_ps(s), acc);
        sm += _cvtsh_ss(a[i].m) * _cvtsh_ss(b[i].s);
    }
    return mmv_hsum(acc) + sm;
}

MMV_AVX2 static float dot_iq4_xs_avx2(int64_t n, const void *w, const void *x) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    const __m256i kv = mmv_kv_table(blocks_kvalues_iq4nl);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            __m256i q = _mm256_shuffle_epi8(kv, mmv_nibbles(a[i].qs + 16 * ib));
            __m256i y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * ib));
            /* the sub-block scale goes into the int16 -> int32 widening (madd) instead of a mullo */
            __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16((short)mmv_iq4_xs_scale(&a[i], ib))));
        }
        /* the scalar dot's f32 step per block: every level (and mm_kq's GEMM) gives the same bits */
        s += (_cvtsh_ss(a[i].d) * b[i].d) * (float)mmv_hsum_i32(sumi);
    }
    return s;
}

/* Q3_K's 16 scales as signed bytes (-32..31): the low nibbles of bytes 0-7 (scales 0-7) and their high
 * nibbles (8-15), the top 2 bits from bytes 8-11, two bits per scale (docs/quant.md §3.5). */
MMV_AVX2 static inline __m128i mmv_q3_k_scales(const uint8_t *scales) {
    uint32_t u[3], o[4];
    memcpy(u, scales, 12);
    o[0] = (u[0] & 0x0f0f0f0f) | (u[2] & 0x03030303) << 4;
    o[1] = (u[1] & 0x0f0f0f0f) | ((u[2] >> 2) & 0x03030303) << 4;
    o[2] = ((u[0] >> 4) & 0x0f0f0f0f) | ((u[2] >> 4) & 0x03030303) << 4;
    o[3] = ((u[1] >> 4) & 0x0f0f0f0f) | ((u[2] >> 6) & 0x03030303) << 4;
    return _mm_sub_epi8(_mm_loadu_si128((const __m128i *)o), _mm_set1_epi8(32));
}

/* 32 values per step (group g: qs half g/4, bits 2(g%4)); maddubs (q <= 3, or 7 for Q3_K: no int16
 * saturation) then madd with the two 16-value scales of the group. */
MMV_AVX2 static float dot_q2_k_avx2(int64_t n, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        const __m256i summ = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)b[i].bsums));
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                const int g = 4 * h + k;
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * k), m3);
                __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * g)));
                __m256i s = _mm256_set_m128i(_mm_set1_epi16(a[i].scales[2 * g + 1] & 0xF), _mm_set1_epi16(a[i].scales[2 * g] & 0xF));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].dmin) * b[i].d), _mm256_cvtepi32_ps(summ), accm);
    }
    return mmv_hsum(acc) - mmv_hsum(accm);
}

MMV_AVX2 static float dot_q3_k_avx2(int64_t n, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sc8 = mmv_q3_k_scales(a[i].scales);
        int8_t sc[16];
        _mm_storeu_si128((__m128i *)sc, sc8);
        /* q - 4 with q = the 3-bit code 0..7: the -4 is 4·Σ_j sc_j·bsums_j, exact in int */
        __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)b[i].bsums));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 2));
        const __m256i hm = _mm256_loadu_si256((const __m256i *)a[i].hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                const int g = 4 * h + k;
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, g), one), 2);
                __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv, 2 * k), m3), hb);
                __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * g)));
                __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[2 * g + 1]), _mm_set1_epi16(sc[2 * g]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return mmv_hsum(acc);
}

/* The 12 packed scale bytes of Q4_K/Q5_K (docs/quant.md §3.6) as 8 scales and 8 mins, branch-free:
 * bytes 0-3 hold sc0-3 (6 bits) + the top 2 bits of sc4-7, bytes 4-7 the same for the mins,
 * bytes 8-11 the low nibbles of sc4-7 (low) and m4-7 (high). */
static inline void mmv_k_unpack(const uint8_t *scales, uint32_t sc[2], uint32_t m[2]) {
    uint32_t u0, u1, u2;
    memcpy(&u0, scales, 4);
    memcpy(&u1, scales + 4, 4);
    memcpy(&u2, scales + 8, 4);
    sc[0] = u0 & 0x3f3f3f3f;
    m[0] = u1 & 0x3f3f3f3f;
    sc[1] = (u2 & 0x0f0f0f0f) | ((u0 >> 6) & 0x03030303) << 4;
    m[1] = ((u2 >> 4) & 0x0f0f0f0f) | ((u1 >> 6) & 0x03030303) << 4;
}

/* Σ_j m_j · (bsums[2j] + bsums[2j+1]) as 4 int32 lanes. */
MMV_AVX2 static inline __m128i mmv_k_mins_sse(const uint32_t m[2], const int16_t *bsums) {
    __m128i m16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m[1], (int)m[0]));
    __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bsums), _mm_loadu_si128((const __m128i *)(bsums + 8)));
    return _mm_madd_epi16(m16, bs);
}

MMV_AVX2 static float dot_q4_k_avx2(int64_t n, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t sc[2], mn[2];
        mmv_k_unpack(a[i].scales, sc, mn);
        __m128i summ = mmv_k_mins_sse(mn, b[i].bsums);
        __m256i sumi = _mm256_setzero_si256();
        for (int p = 0; p < 4; p++) {
            uint32_t s2 = sc[p / 2] >> (16 * (p % 2)); /* sub-blocks 2p and 2p+1 in the low two bytes */
            __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * p));
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * p));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * p + 32));
            __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), y0);
            __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), y1);
            p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16((short)(s2 & 0xff)));
            p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16((short)((s2 >> 8) & 0xff)));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        float d = _cvtsh_ss(a[i].d) * b[i].d, dmin = _cvtsh_ss(a[i].dmin) * b[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(summ), accm);
    }
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return mmv_hsum(acc) - _mm_cvtss_f32(m);
}

MMV_AVX2 static float dot_q5_k_avx2(int64_t n, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t sc4[2], mn[2];
        mmv_k_unpack(a[i].scales, sc4, mn);
        const uint8_t *sc = (const uint8_t *)sc4;
        __m128i summ = mmv_k_mins_sse(mn, b[i].bsums);
        __m256i sumi = _mm256_setzero_si256();
        __m256i qh = _mm256_loadu_si256((const __m256i *)a[i].qh);
        for (int p = 0; p < 4; p++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * p));
            /* bit 2p of qh (low nibbles) and 2p+1 (high nibbles) become bit 4 of the 5-bit value */
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), one), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), one), 4);
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * p));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(b[i].qs + 64 * p + 32));
            __m256i p0 = _mm256_maddubs_epi16(_mm256_or_si256(_mm256_and_si256(q, m4), h0), y0);
            __m256i p1 = _mm256_maddubs_epi16(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1), y1);
            p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16(sc[2 * p]));
            p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[2 * p + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
        accm = _mm_fmadd_ps(_mm_set1_ps(_cvtsh_ss(a[i].dmin) * b[i].d), _mm_cvtepi32_ps(summ), accm);
    }
    __m128 m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return mmv_hsum(acc) - _mm_cvtss_f32(m);
}

MMV_AVX2 static float dot_q6_k_avx2(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sumi = _mm256_setzero_si256();
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
            __m256i q[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4)),
                _mm256_or_si256(_mm256_and_si256(l1, m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4)),
            };
            for (int k = 0; k < 4; k++) {
                __m256i y = _mm256_loadu_si256((const __m256i *)(b[i].qs + 128 * h + 32 * k));
                const __m256i p = _mm256_maddubs_epi16(q[k], y); /* q·y, pairs within int16 (q <= 63) */
                /* scales j, j + 1 (j = 8h + 2k) as int16 on values 0..15 and 16..31: one byte shuffle, widened */
                const __m128i pick = _mm_add_epi8(_mm_set1_epi8((char)(8 * h + 2 * k)),
                                                  _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
                const __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        /* the -32 offset once a block: 32 · Σ_j scale_j · (the Q8_K block's sum over sub-block j) */
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)b[i].bsums));
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d) * b[i].d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return mmv_hsum(acc);
}
#endif

#ifdef MMV_X86
/* ---------------- AVX-512 (F/BW/VL) + VNNI kernels ----------------
 * dpbusd sums four u8·s8 products into each int32 lane with no int16 saturation step, so the weight side
 * is made unsigned: 4/5/6-bit quants already are (their offset, -8 or -32, becomes a multiple of Σy,
 * from the Q8_K bsums or a second dpbusd with a constant), the IQ4 table is shifted by +128 (then
 * -128·Σy), and Q8_0 x Q8_0 uses |x| with x's sign moved onto y. Two 32-element groups share one
 * 512-bit register; the per-group scales multiply the int32 lanes (mullo), the sums stay exact. */
#define MMV_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* two 32-byte halves into one register */
MMV_AVX512 static inline __m512i mmv_cat(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* int32 lanes 0-7 = a, 8-15 = b */
MMV_AVX512 static inline __m512i mmv_set2(int a, int b) { return mmv_cat(_mm256_set1_epi32(a), _mm256_set1_epi32(b)); }

MMV_AVX512 static inline __m512 mmv_set2_ps(float a, float b) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(a))),
                                               _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

MMV_AVX512 static inline __m512i mmv_load_2x32(const int8_t *p0, const int8_t *p1) {
    return mmv_cat(_mm256_loadu_si256((const __m256i *)p0), _mm256_loadu_si256((const __m256i *)p1));
}

MMV_AVX512 static float dot_f32_avx512(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    return s + (i < n ? dot_f32_avx2(n - i, a + i, b + i) : 0.0f);
}

MMV_AVX512 static float dot_f16_avx512(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i)));
        __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16)));
        __m512 x0 = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(b + i), _MM_FROUND_TO_NEAREST_INT));
        __m512 x1 = _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_loadu_ps(b + i + 16), _MM_FROUND_TO_NEAREST_INT));
        acc0 = _mm512_fmadd_ps(w0, x0, acc0);
        acc1 = _mm512_fmadd_ps(w1, x1, acc1);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    return s + (i < n ? dot_f16_avx2(n - i, a + i, b + i) : 0.0f);
}

/* The BF16 dot; x_rounded: x already rounded to bf16, as cpu_mm passes it (one rounding per product instead of one
 * per row: Qwen3-0.6B BF16 tg64, one thread, Zen 4: 14.6 -> 17.2 t/s). The same bits either way: rounding a rounded
 * value changes nothing, and the tail goes through dot_bf16_avx2. (The same for F16, whose round trip is two
 * conversions, measured 13 % slower there, for no reason found: F16 keeps its dot.) */
MMV_AVX512 static inline __attribute__((always_inline)) float bf16_dot_avx512(int64_t n, const void *w, const void *x,
                                                                              int x_rounded) {
    const uint16_t *a = w;
    const float *b = x;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        /* mmv_round_bf16 / mmv_load_bf16 in 16 lanes (mm_strip.h: mm_f.c's GEMM rounds and loads the same way) */
        const __m512 x0 = _mm512_loadu_ps(b + i), x1 = _mm512_loadu_ps(b + i + 16);
        acc0 = _mm512_fmadd_ps(mm_strip_load_bf16(a + i), x_rounded ? x0 : mm_strip_round_bf16(x0), acc0);
        acc1 = _mm512_fmadd_ps(mm_strip_load_bf16(a + i + 16), x_rounded ? x1 : mm_strip_round_bf16(x1), acc1);
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    return s + (i < n ? dot_bf16_avx2(n - i, a + i, b + i) : 0.0f);
}

MMV_AVX512 static float dot_bf16_avx512(int64_t n, const void *w, const void *x) { return bf16_dot_avx512(n, w, x, 0); }

MMV_AVX512 static float dot_bf16_rounded_avx512(int64_t n, const void *w, const void *x) {
    return bf16_dot_avx512(n, w, x, 1);
}

/* x rounded as dot_bf16_avx512 rounds it: 16 at a time, the rest as dot_bf16_avx2's scalar tail */
MMV_AVX512 static void round_bf16_avx512(const float *x, float *out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, mm_strip_round_bf16(_mm512_loadu_ps(x + i)));
    for (; i < n; i++) out[i] = blocks_bf16_to_f32(blocks_f32_to_bf16(x[i]));
}

/* The 32-value types on AVX-512 keep the scalar reference's f32 steps (blk_*: s += term, block by block)
 * so that the prefill GEMM of mm_q32.c can reproduce them lane by lane and a prompt gives the same logits
 * however it is batched. Eight blocks at a time: four dpbusd registers of two blocks each, their exact
 * integer sums gathered into eight int32 lanes (mmv_sum8), the eight terms in one register (mmv_terms8),
 * then added to s in block order; a tail of fewer than eight blocks takes the scalar terms. */

/* 4-bit codes 0..15 of two blocks (16 bytes of nibbles each) in one register, as the y bytes lie */
MMV_AVX512 static inline __m512i mmv_nib2(const uint8_t *q0, const uint8_t *q1) {
    return mmv_cat(mmv_nibbles(q0), mmv_nibbles(q1));
}

/* Two Q5 blocks' 5-bit codes (0..31) in one register: the nibbles, plus 0x10 in the bytes whose qh bit is set
 * (both qh words as one 64-bit byte mask) */
MMV_AVX512 static inline __m512i mmv_q5_2(const uint8_t *qs0, const uint8_t *qh0, const uint8_t *qs1, const uint8_t *qh1) {
    const __mmask64 h = (__mmask64)blocks_qh32(qh0) | (__mmask64)blocks_qh32(qh1) << 32;
    return _mm512_or_si512(mmv_nib2(qs0, qs1), _mm512_maskz_mov_epi8(h, _mm512_set1_epi8(0x10)));
}

/* A codebook + 128 as unsigned bytes (IQ4: 1..241, MXFP4: 116..140) in every 128-bit lane, for shuffle_epi8 */
MMV_AVX512 static inline __m512i mmv_kv_table_u8(const int8_t *kv) {
    __m128i t = _mm_add_epi8(_mm_loadu_si128((const __m128i *)kv), _mm_set1_epi8((char)128));
    return _mm512_broadcast_i32x4(t);
}

/* dpbusd lanes of blocks a[0] (lanes 0-7) and a[1] (8-15); unsigned codes times y, minus off·y where the
 * weight is signed (a second dpbusd with the constant); Q8_0 moves its sign onto y instead */
MMV_AVX512 static inline __m512i pair_q8_0(const block_q8_0 *a, const block_q8_0 *b) {
    const __m512i q = mmv_load_2x32(a[0].qs, a[1].qs), y = mmv_load_2x32(b[0].qs, b[1].qs);
    const __m512i ys = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(q), _mm512_setzero_si512(), y);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), ys);
}
MMV_AVX512 static inline __m512i mmv_dot_off(__m512i q, __m512i y, char off) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, q, y), _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(off), y));
}
MMV_AVX512 static inline __m512i pair_q4_0(const block_q4_0 *a, const block_q8_0 *b) {
    return mmv_dot_off(mmv_nib2(a[0].qs, a[1].qs), mmv_load_2x32(b[0].qs, b[1].qs), 8);
}
MMV_AVX512 static inline __m512i pair_iq4_nl(const block_iq4_nl *a, const block_q8_0 *b) {
    const __m512i q = _mm512_shuffle_epi8(mmv_kv_table_u8(blocks_kvalues_iq4nl), mmv_nib2(a[0].qs, a[1].qs));
    return mmv_dot_off(q, mmv_load_2x32(b[0].qs, b[1].qs), (char)128);
}
MMV_AVX512 static inline __m512i pair_mxfp4(const block_mxfp4 *a, const block_q8_0 *b) {
    const __m512i q = _mm512_shuffle_epi8(mmv_kv_table_u8(blocks_kvalues_mxfp4), mmv_nib2(a[0].qs, a[1].qs));
    return mmv_dot_off(q, mmv_load_2x32(b[0].qs, b[1].qs), (char)128);
}
MMV_AVX512 static inline __m512i pair_q5_0(const block_q5_0 *a, const block_q8_0 *b) {
    return mmv_dot_off(mmv_q5_2(a[0].qs, a[0].qh, a[1].qs, a[1].qh), mmv_load_2x32(b[0].qs, b[1].qs), 16);
}
MMV_AVX512 static inline __m512i pair_q4_1(const block_q4_1 *a, const block_q8_1 *b) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), mmv_nib2(a[0].qs, a[1].qs), mmv_load_2x32(b[0].qs, b[1].qs));
}
MMV_AVX512 static inline __m512i pair_q5_1(const block_q5_1 *a, const block_q8_1 *b) {
    const __m512i q = mmv_q5_2(a[0].qs, a[0].qh, a[1].qs, a[1].qh);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, mmv_load_2x32(b[0].qs, b[1].qs));
}

/* eight blocks' integer sums in block order from four pair registers: the 128-bit quarters of each block
 * summed (quarter j of a = block j, of b = block 4 + j), then the 4 lanes of each quarter */
MMV_AVX512 static inline __m256i mmv_sum8(__m512i p0, __m512i p1, __m512i p2, __m512i p3) {
    const __m512i a = _mm512_add_epi32(_mm512_shuffle_i32x4(p0, p1, 0x88), _mm512_shuffle_i32x4(p0, p1, 0xDD));
    const __m512i b = _mm512_add_epi32(_mm512_shuffle_i32x4(p2, p3, 0x88), _mm512_shuffle_i32x4(p2, p3, 0xDD));
    const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i v = _mm512_add_epi32(u, _mm512_shuffle_epi32(u, _MM_PERM_BADC)); /* lane 4j: block j, 4j+1: 4+j */
    const __m512i order = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, v));
}

/* f16 in the low half of each dword, as f32 */
MMV_AVX512 static inline __m256 mmv_half8(__m256i v) { return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(v)); }

/* MXFP4's E8M0 exponent (the low byte of each dword) as blocks_e8m0_half: 2^(e-128), bits (e - 1) << 23, and the
 * subnormals 2^-128, 2^-127 for e = 0, 1 */
MMV_AVX512 static inline __m256 mmv_e8m0_8(__m256i v) {
    const __m256i e = _mm256_and_si256(v, _mm256_set1_epi32(0xFF));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

/* What opens the blocks of w (and pairs with x's): an f16 d, d and m with Q8_1's d and s, an E8M0 exponent. */
enum { MMV_T_D, MMV_T_Q81, MMV_T_E8M0 };

/* the eight blocks' terms: sumi·(d·dy), or (d·dy)·sumi + m·s (MMV_T_Q81); d then m (s) open every block of w, x */
MMV_AVX512 static inline __m256 mmv_terms8(__m256i sumi, const void *w, int w_bs, const void *x, int x_bs, int kind) {
    const __m256i k = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
    const __m256i gw = _mm256_i32gather_epi32((const int *)w, _mm256_mullo_epi32(k, _mm256_set1_epi32(w_bs)), 1);
    const __m256i gx = _mm256_i32gather_epi32((const int *)x, _mm256_mullo_epi32(k, _mm256_set1_epi32(x_bs)), 1);
    const __m256 dd = _mm256_mul_ps(kind == MMV_T_E8M0 ? mmv_e8m0_8(gw) : mmv_half8(gw), mmv_half8(gx));
    if (kind != MMV_T_Q81) return _mm256_mul_ps(_mm256_cvtepi32_ps(sumi), dd);
    const __m256 ms = _mm256_mul_ps(mmv_half8(_mm256_srli_epi32(gw, 16)), mmv_half8(_mm256_srli_epi32(gx, 16)));
    return _mm256_add_ps(_mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)), ms);
}

MMV_AVX512 static inline float mmv_add8(float s, __m256 terms) {
    float t[8];
    _mm256_storeu_ps(t, terms);
    for (int k = 0; k < 8; k++) s += t[k];
    return s;
}


#define MMV_DOT_Q32_AVX512(name, wt, xt, kind)                                                                      \
    MMV_AVX512 static float dot_##name##_avx512(int64_t n, const void *w, const void *x) {                          \
        const wt *a = w;                                                                                           \
        const xt *b = x;                                                                                           \
        const int64_t nb = n / QK8_0;                                                                              \
        float s = 0;                                                                                               \
        int64_t i = 0;                                                                                             \
        for (; i + 8 <= nb; i += 8) {                                                                              \
            const __m256i sumi = mmv_sum8(pair_##name(a + i, b + i), pair_##name(a + i + 2, b + i + 2),            \
                                          pair_##name(a + i + 4, b + i + 4), pair_##name(a + i + 6, b + i + 6));   \
            s = mmv_add8(s, mmv_terms8(sumi, a + i, sizeof(wt), b + i, sizeof(xt), kind));                         \
        }                                                                                                          \
        for (; i < nb; i++) s += blk_##name(a + i, b + i);                                                         \
        return s;                                                                                                  \
    }
MMV_DOT_Q32_AVX512(q8_0, block_q8_0, block_q8_0, MMV_T_D)
MMV_DOT_Q32_AVX512(q4_0, block_q4_0, block_q8_0, MMV_T_D)
MMV_DOT_Q32_AVX512(iq4_nl, block_iq4_nl, block_q8_0, MMV_T_D)
MMV_DOT_Q32_AVX512(q4_1, block_q4_1, block_q8_1, MMV_T_Q81)
MMV_DOT_Q32_AVX512(q5_0, block_q5_0, block_q8_0, MMV_T_D)
MMV_DOT_Q32_AVX512(q5_1, block_q5_1, block_q8_1, MMV_T_Q81)
MMV_DOT_Q32_AVX512(mxfp4, block_mxfp4, block_q8_0, MMV_T_E8M0)

MMV_AVX512 static float dot_iq4_xs_avx512(int64_t n, const void *w, const void *x) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    const __m512i zero = _mm512_setzero_si512(), kv = mmv_kv_table_u8(blocks_kvalues_iq4nl), k128 = _mm512_set1_epi8((char)128);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i sumi = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) { /* sub-blocks 2k and 2k+1 */
            __m512i q = _mm512_shuffle_epi8(kv, mmv_nib2(a[i].qs + 32 * k, a[i].qs + 32 * k + 16));
            __m512i y = _mm512_loadu_si512((const void *)(b[i].qs + 64 * k));
            __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, q, y), _mm512_dpbusd_epi32(zero, k128, y));
            __m512i sc = mmv_set2(mmv_iq4_xs_scale(&a[i], 2 * k), mmv_iq4_xs_scale(&a[i], 2 * k + 1));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, sc));
        }
        /* the scalar dot's f32 step per block, as mm_kq's GEMM does: batching never changes a result */
        s += (_cvtsh_ss(a[i].d) * b[i].d) * (float)_mm512_reduce_add_epi32(sumi);
    }
    return s;
}

/* Q2_K / Q3_K: two 32-value groups per register (4h+2k in the lower half, 4h+2k+1 in the upper: the same
 * qs half, bits 4k and 4k+2), the 16-value scales by lane (lane l: sub-block 8h + 4k + l/4), and the scalar
 * reference's per-block f32 step, so the two agree bit for bit. */
MMV_AVX512 static inline __m512i mmv_q23_scale_ix(int h, int k) {
    return _mm512_add_epi32(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_set1_epi32(8 * h + 4 * k));
}

MMV_AVX512 static inline int mmv_reduce8(__m256i v) { return _mm512_reduce_add_epi32(_mm512_zextsi256_si512(v)); }

MMV_AVX512 static float dot_q2_k_avx512(int64_t n, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    const __m512i zero = _mm512_setzero_si512(), m3 = _mm512_set1_epi8(3);
    const __m512i sh[2] = {mmv_cat(_mm256_set1_epi16(0), _mm256_set1_epi16(2)), mmv_cat(_mm256_set1_epi16(4), _mm256_set1_epi16(6))};
    const __m128i m4 = _mm_set1_epi8(0x0F);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        const __m512i sc = _mm512_cvtepu8_epi32(_mm_and_si128(sc8, m4));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4));
        const int summ = mmv_reduce8(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)b[i].bsums)));
        __m512i sumi = zero;
        for (int h = 0; h < 2; h++) {
            const __m256i q256 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            const __m512i qv = mmv_cat(q256, q256);
            for (int k = 0; k < 2; k++) {
                __m512i q = _mm512_and_si512(_mm512_srlv_epi16(qv, sh[k]), m3);
                __m512i p = _mm512_dpbusd_epi32(zero, q, _mm512_loadu_si512((const void *)(b[i].qs + 128 * h + 64 * k)));
                sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(mmv_q23_scale_ix(h, k), sc)));
            }
        }
        s += (_cvtsh_ss(a[i].d) * b[i].d) * (float)_mm512_reduce_add_epi32(sumi) - (_cvtsh_ss(a[i].dmin) * b[i].d) * (float)summ;
    }
    return s;
}

MMV_AVX512 static float dot_q3_k_avx512(int64_t n, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    const __m512i zero = _mm512_setzero_si512(), m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    const __m512i sh[2] = {mmv_cat(_mm256_set1_epi16(0), _mm256_set1_epi16(2)), mmv_cat(_mm256_set1_epi16(4), _mm256_set1_epi16(6))};
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sc8 = mmv_q3_k_scales(a[i].scales);
        const __m512i sc = _mm512_cvtepi8_epi32(sc8);
        /* the -4 of q - 4: 4·Σ_j sc_j·bsums_j */
        const int off = mmv_reduce8(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)b[i].bsums)));
        const __m256i hm256 = _mm256_loadu_si256((const __m256i *)a[i].hmask);
        const __m512i hm = mmv_cat(hm256, hm256);
        __m512i sumi = zero;
        for (int h = 0; h < 2; h++) {
            const __m256i q256 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * h));
            const __m512i qv = mmv_cat(q256, q256);
            for (int k = 0; k < 2; k++) {
                /* group g = 4h + 2k (+1 upper) takes bit g of hmask as bit 2 of its code */
                const __m512i hsh = mmv_cat(_mm256_set1_epi16((short)(4 * h + 2 * k)), _mm256_set1_epi16((short)(4 * h + 2 * k + 1)));
                __m512i hb = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hm, hsh), one), 2);
                __m512i q = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(qv, sh[k]), m3), hb);
                __m512i p = _mm512_dpbusd_epi32(zero, q, _mm512_loadu_si512((const void *)(b[i].qs + 128 * h + 64 * k)));
                sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(p, _mm512_permutexvar_epi32(mmv_q23_scale_ix(h, k), sc)));
            }
        }
        s += (_cvtsh_ss(a[i].d) * b[i].d) * (float)(_mm512_reduce_add_epi32(sumi) - 4 * off);
    }
    return s;
}

/* The integer parts of one Q4_K x Q8_K block: sumi as 16 int32 partial sums, summ (the min term) as 4.
 * The sub-block scales reach the int16 lanes by pshufb from one broadcast register. */
MMV_AVX512 static inline void mmv_q4_k_ints(const block_q4_K *a, const block_q8_K *b, __m512i *sumi, __m128i *summ) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* pshufb indices putting scale byte i (0x80: a zero byte) into the int16 lanes of the lower 256 bits
     * and scale byte j into those of the upper: (low nibbles, high nibbles) x (k = 0, 1) are sub-blocks
     * (0|2, 1|3, 4|6, 5|7) */
#define MMV_SCIX(i, j) _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16((short)(0x8000 | (i))), _mm512_set1_epi16((short)(0x8000 | (j))))
    const __m512i ix[4] = {MMV_SCIX(0, 2), MMV_SCIX(1, 3), MMV_SCIX(4, 6), MMV_SCIX(5, 7)};
#undef MMV_SCIX
    uint32_t sc4[2], mn[2];
    mmv_k_unpack(a->scales, sc4, mn);
    const __m512i sc = _mm512_set1_epi64((long long)((uint64_t)sc4[1] << 32 | sc4[0]));
    __m512i acc = _mm512_setzero_si512();
    for (int k = 0; k < 2; k++) {
        /* 64 bytes of qs = groups p = 2k (bytes 0-31) and 2k+1 (32-63); low nibbles are sub-blocks
         * 4k and 4k+2 (y 128k+0..31, +64..95), high nibbles 4k+1 and 4k+3 (y +32..63, +96..127).
         * maddubs (q <= 15, so no int16 saturation) then madd with the scales: each int32 lane sums the
         * same 4 elements times their scale as vpdpbusd would */
        __m512i q = _mm512_loadu_si512((const void *)(a->qs + 64 * k));
        __m512i y0 = _mm512_loadu_si512((const void *)(b->qs + 128 * k));
        __m512i y1 = _mm512_loadu_si512((const void *)(b->qs + 128 * k + 64));
        __m512i ylo = _mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(1, 0, 1, 0));
        __m512i yhi = _mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(3, 2, 3, 2));
        __m512i plo = _mm512_maddubs_epi16(_mm512_and_si512(q, m4), ylo);
        __m512i phi = _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), yhi);
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(plo, _mm512_shuffle_epi8(sc, ix[2 * k])));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(phi, _mm512_shuffle_epi8(sc, ix[2 * k + 1])));
    }
    *sumi = acc;
    *summ = mmv_k_mins_sse(mn, b->bsums);
}

/* Per block the scalar reference's f32 steps, s += (d·dy)·sumi - (dmin·dy)·summ, so that mm_kq.c's GEMM
 * (one output per lane, no horizontal sums) gives bit-identical results. Blocks go in pairs so that one
 * horizontal reduction and one set of f32 vector ops serve both; the adds into s stay in block order. */
/* One Q4_K / Q5_K block's f32 step, as the scalar reference: (d*dy)*sumi - (dmin*dy)*summ, with sumi the
 * sum of sumi's 16 lanes, summ that of summ's 4, and dm the block's (d, dmin) halves. */
MMV_AVX512 static inline float mmv_k_block_f32(__m512i sumi, __m128i summ, const void *dm, float dy) {
    __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    __m128i sm = _mm_hadd_epi32(s4, summ);
    sm = _mm_hadd_epi32(sm, sm); /* sumi, summ, sumi, summ */
    uint32_t dd;
    memcpy(&dd, dm, 4); /* d, dmin */
    __m128 f = _mm_mul_ps(_mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dd)), _mm_set1_ps(dy)), _mm_cvtepi32_ps(sm));
    return _mm_cvtss_f32(f) - _mm_cvtss_f32(_mm_movehdup_ps(f));
}

MMV_AVX512 static float dot_q4_k_avx512(int64_t n, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const int64_t nb = n / QK_K;
    float s = 0;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m512i sa, sb;
        __m128i ma, mb;
        mmv_q4_k_ints(&a[i], &b[i], &sa, &ma);
        mmv_q4_k_ints(&a[i + 1], &b[i + 1], &sb, &mb);
        /* 128-bit lanes: a's four partial sums, b's, then each beside its min term: [S S M M] per block */
        __m512i t = _mm512_add_epi32(_mm512_shuffle_i64x2(sa, sb, 0x44), _mm512_shuffle_i64x2(sa, sb, 0xEE));
        t = _mm512_add_epi32(_mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(3, 1, 3, 1)));
        __m256i h = _mm256_hadd_epi32(_mm512_castsi512_si256(t), _mm256_set_m128i(mb, ma));
        h = _mm256_add_epi32(h, _mm256_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
        uint16_t da, dma, db, dmb;
        memcpy(&da, &a[i].d, 2);
        memcpy(&dma, &a[i].dmin, 2);
        memcpy(&db, &a[i + 1].d, 2);
        memcpy(&dmb, &a[i + 1].dmin, 2);
        __m256 d = _mm256_cvtph_ps(_mm_set_epi32(dmb, db, dma, da)); /* d, 0, dmin, 0 per block */
        __m256 dy = _mm256_set_m128(_mm_set1_ps(b[i + 1].d), _mm_set1_ps(b[i].d));
        __m256 f = _mm256_mul_ps(_mm256_mul_ps(d, dy), _mm256_cvtepi32_ps(h));
        f = _mm256_sub_ps(f, _mm256_permute_ps(f, _MM_SHUFFLE(3, 2, 3, 2)));
        s += _mm_cvtss_f32(_mm256_castps256_ps128(f));
        s += _mm_cvtss_f32(_mm256_extractf128_ps(f, 1));
    }
    if (i < nb) {
        __m512i sumi;
        __m128i summ;
        mmv_q4_k_ints(&a[i], &b[i], &sumi, &summ);
        s += mmv_k_block_f32(sumi, summ, &a[i].d, b[i].d);
    }
    return s;
}

/* The per-block f32 steps of the scalar reference, as dot_q4_k_avx512 (mm_kq.c matches them). */
MMV_AVX512 static float dot_q5_k_avx512(int64_t n, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0F);
    const __m512i ix[4] = {mmv_set2(0, 2), mmv_set2(1, 3), mmv_set2(4, 6), mmv_set2(5, 7)}; /* as Q4_K */
    const __m512i b4 = _mm512_set1_epi8(0x10);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t sc4[2], mn[2];
        mmv_k_unpack(a[i].scales, sc4, mn);
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, (int)sc4[1], (int)sc4[0])));
        __m128i summ = mmv_k_mins_sse(mn, b[i].bsums);
        __m512i sumi = _mm512_setzero_si512();
        __m256i qh256 = _mm256_loadu_si256((const __m256i *)a[i].qh);
        __m512i qh = mmv_cat(qh256, qh256);
        for (int k = 0; k < 2; k++) {
            /* as Q4_K; group p takes bit 2p of qh for its low nibbles, 2p+1 for its high ones, so the
             * lower half (p = 2k) shifts qh by 4k, the upper half (p = 2k+1) by 4k+2 */
            __m512i sh = mmv_cat(_mm256_set1_epi16((short)(4 * k)), _mm256_set1_epi16((short)(4 * k + 2)));
            __m512i hs = _mm512_srlv_epi16(qh, sh); /* bit 0 of each byte to bit 4 (low nibbles), bit 1 (high) */
            __m512i hlo = _mm512_and_si512(_mm512_slli_epi16(hs, 4), b4);
            __m512i hhi = _mm512_and_si512(_mm512_slli_epi16(hs, 3), b4);
            __m512i q = _mm512_loadu_si512((const void *)(a[i].qs + 64 * k));
            __m512i y0 = _mm512_loadu_si512((const void *)(b[i].qs + 128 * k));
            __m512i y1 = _mm512_loadu_si512((const void *)(b[i].qs + 128 * k + 64));
            __m512i ylo = _mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(1, 0, 1, 0));
            __m512i yhi = _mm512_shuffle_i64x2(y0, y1, _MM_SHUFFLE(3, 2, 3, 2));
            __m512i plo = _mm512_dpbusd_epi32(zero, _mm512_or_si512(_mm512_and_si512(q, m4), hlo), ylo);
            __m512i phi = _mm512_dpbusd_epi32(zero, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), hhi), yhi);
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(plo, _mm512_permutexvar_epi32(ix[2 * k], sc)));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(phi, _mm512_permutexvar_epi32(ix[2 * k + 1], sc)));
        }
        s += mmv_k_block_f32(sumi, summ, &a[i].d, b[i].d);
    }
    return s;
}

MMV_AVX512 static float dot_q6_k_avx512(int64_t n, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    /* int32 lane l of a 64-element group covers elements 4l..4l+3, scale index l/4 */
    const __m512i idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    /* the two qh shifts of a group pair: lower 32 bytes by s, upper by s + 2 */
    const __m512i sh0 = mmv_cat(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i sh1 = mmv_cat(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sc8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        __m512i sc = _mm512_cvtepi8_epi32(sc8);
        /* the -32 offset: Σ_j sc_j·32·bsums_j, exact in int */
        __m256i cm = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)b[i].bsums));
        __m128i c4 = _mm_add_epi32(_mm256_castsi256_si128(cm), _mm256_extracti128_si256(cm, 1));
        c4 = _mm_add_epi32(c4, _mm_shuffle_epi32(c4, _MM_SHUFFLE(1, 0, 3, 2)));
        c4 = _mm_add_epi32(c4, _mm_shuffle_epi32(c4, _MM_SHUFFLE(2, 3, 0, 1)));
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            /* q0 | q1 (ql low nibbles, qh bits 0-1 | 2-3) and q2 | q3 (high nibbles, bits 4-5 | 6-7) */
            __m512i l = _mm512_loadu_si512((const void *)(a[i].ql + 64 * h));
            __m256i hb256 = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
            __m512i hb = mmv_cat(hb256, hb256);
            __m512i q01 = _mm512_or_si512(_mm512_and_si512(l, m4),
                                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh0), m2), 4));
            __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh1), m2), 4));
            __m512i y01 = _mm512_loadu_si512((const void *)(b[i].qs + 128 * h));
            __m512i y23 = _mm512_loadu_si512((const void *)(b[i].qs + 128 * h + 64));
            __m512i s01 = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(8 * h)), sc);
            __m512i s23 = _mm512_permutexvar_epi32(_mm512_add_epi32(idx, _mm512_set1_epi32(8 * h + 4)), sc);
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(_mm512_dpbusd_epi32(zero, q01, y01), s01));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(_mm512_dpbusd_epi32(zero, q23, y23), s23));
        }
        s += _cvtsh_ss(a[i].d) * b[i].d * (float)(_mm512_reduce_add_epi32(sumi) - 32 * _mm_cvtsi128_si32(c4));
    }
    return s;
}

/* ---- several tokens per weight row (speculative verification, 2..8 tokens) ----
 * One weight row against n_tok Q8_K rows x_stride bytes apart: each block's quants and scales are unpacked
 * once and reused for every token, and per token the integer sums (exact, so their order is free) and the
 * f32 steps of the one-token kernel above are repeated lane by lane, so each result is bit-identical to
 * dot_q4_k_avx512 / dot_q6_k_avx512. The weights are laid out as the activation bytes they meet (no
 * activation shuffles) and the scales enter through maddubs + dpwssd (no mullo). */
enum { MMV_XN_MAX = 8 };
#define MMV_XN_INLINE MMV_AVX512 __attribute__((always_inline)) static inline

/* block i of token t's activation row */
MMV_XN_INLINE const block_q8_K *mmv_xn_row(const void *x, size_t x_stride, int t, int64_t i) {
    return (const block_q8_K *)((const char *)x + (size_t)t * x_stride) + i;
}

/* The activation scales of block i for tokens 0..7 (0 past nt), one per lane. */
MMV_XN_INLINE __m256 mmv_xn_dy(const void *x, size_t x_stride, int nt, int64_t i) {
#define MMV_DY(t) ((t) < nt ? mmv_xn_row(x, x_stride, t, i)->d : 0.0f)
    return _mm256_set_ps(MMV_DY(7), MMV_DY(6), MMV_DY(5), MMV_DY(4), MMV_DY(3), MMV_DY(2), MMV_DY(1), MMV_DY(0));
#undef MMV_DY
}

/* nt tokens' 4-lane partial sums into one total per lane (lane t = token t, 0 past nt), in registers. */
MMV_XN_INLINE __m256i mmv_xn_sums(const __m128i v[MMV_XN_MAX], int nt) {
    __m128i lo = _mm_hadd_epi32(v[0], v[1]);
    lo = _mm_hadd_epi32(lo, nt > 2 ? _mm_hadd_epi32(v[2], v[3]) : _mm_setzero_si128());
    if (nt <= 4) return _mm256_zextsi128_si256(lo);
    __m128i hi = _mm_hadd_epi32(_mm_hadd_epi32(v[4], v[5]), nt > 6 ? _mm_hadd_epi32(v[6], v[7]) : _mm_setzero_si128());
    return _mm256_set_m128i(hi, lo);
}

MMV_XN_INLINE __m128i mmv_xn_fold(__m512i v) {
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* nt is a constant at each call (the switch below), so the token loops unroll and stay in registers */
MMV_XN_INLINE void mmv_q4_k_xn(int64_t n, const block_q4_K *a, const void *x, size_t x_stride, int nt, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i six[4]; /* int16 lanes 0-15: scale 2p, 16-31: 2p+1 */
    for (int p = 0; p < 4; p++) six[p] = mmv_cat(_mm256_set1_epi16((short)(2 * p)), _mm256_set1_epi16((short)(2 * p + 1)));
    __m256 s = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t sc4[2], mn[2];
        mmv_k_unpack(a[i].scales, sc4, mn);
        const __m128i sc16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc4[1], (int)sc4[0]));
        /* register p: qs bytes 32p..32p+31, low nibbles (sub-block 2p) then high (2p+1) = y bytes 64p..64p+63;
         * its int16 scale lanes: sc[2p] in the lower half, sc[2p+1] in the upper */
        __m512i q[4], scv[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i g = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * p));
            __m512i v = mmv_cat(g, g);
            q[p] = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFFFF0000u, v, 4), m4);
            scv[p] = _mm512_permutexvar_epi16(six[p], _mm512_castsi128_si512(sc16));
        }
        const __m128i m16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)mn[1], (int)mn[0]));
        __m128i si[MMV_XN_MAX], sm[MMV_XN_MAX];
#pragma GCC unroll 8
        for (int t = 0; t < MMV_XN_MAX; t++) {
            si[t] = sm[t] = _mm_setzero_si128();
            if (t >= nt) continue;
            const block_q8_K *b = mmv_xn_row(x, x_stride, t, i);
            __m512i acc = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++)
                acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q[p], _mm512_loadu_si512((const void *)(b->qs + 64 * p))),
                                          scv[p]);
            si[t] = mmv_xn_fold(acc);
            sm[t] = _mm_madd_epi16(m16, _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)b->bsums),
                                                       _mm_loadu_si128((const __m128i *)(b->bsums + 8))));
        }
        /* lane t: s += (d·dy)·sumi - (dmin·dy)·summ, the one-token kernel's steps */
        const __m256 y = mmv_xn_dy(x, x_stride, nt, i);
        __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d)), y), _mm256_cvtepi32_ps(mmv_xn_sums(si, nt)));
        __m256 g = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(a[i].dmin)), y), _mm256_cvtepi32_ps(mmv_xn_sums(sm, nt)));
        s = _mm256_add_ps(s, _mm256_sub_ps(f, g));
    }
    float r[MMV_XN_MAX];
    _mm256_storeu_ps(r, s);
    memcpy(out, r, sizeof(float) * (size_t)nt);
}

MMV_XN_INLINE void mmv_q6_k_xn(int64_t n, const block_q6_K *a, const void *x, size_t x_stride, int nt, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    const __m512i sh0 = mmv_cat(_mm256_set1_epi16(0), _mm256_set1_epi16(2));
    const __m512i sh1 = mmv_cat(_mm256_set1_epi16(4), _mm256_set1_epi16(6));
    /* int16 lane m of register r (y bytes 64r..64r+63) pairs elements 2m, 2m+1: scale 4r + m/8 */
    const __m512i lane = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17,
                                                            16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    __m256 s = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].scales));
        __m512i q[4], scv[4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            /* as dot_q6_k_avx512: q0 | q1 then q2 | q3, 6-bit values 0..63 */
            __m512i l = _mm512_loadu_si512((const void *)(a[i].ql + 64 * h));
            __m256i hb256 = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
            __m512i hb = mmv_cat(hb256, hb256);
            q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh0), m2), 4));
            q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                           _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, sh1), m2), 4));
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            scv[r] = _mm512_permutexvar_epi16(_mm512_add_epi16(lane, _mm512_set1_epi16((short)(4 * r))), _mm512_castsi256_si512(sc16));
        __m128i si[MMV_XN_MAX];
#pragma GCC unroll 8
        for (int t = 0; t < MMV_XN_MAX; t++) {
            si[t] = _mm_setzero_si128();
            if (t >= nt) continue;
            const block_q8_K *b = mmv_xn_row(x, x_stride, t, i);
            /* the -32 offset, Σ_j 32·sc_j·bsums_j: the same int32 total as the one-token kernel */
            __m256i cm = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)b->bsums));
            __m512i acc = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(cm, 5)));
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(q[r], _mm512_loadu_si512((const void *)(b->qs + 64 * r))),
                                          scv[r]);
            si[t] = mmv_xn_fold(acc);
        }
        /* lane t: s += (d·dy)·sumi */
        __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(a[i].d)), mmv_xn_dy(x, x_stride, nt, i)),
                                 _mm256_cvtepi32_ps(mmv_xn_sums(si, nt)));
        s = _mm256_add_ps(s, f);
    }
    float r[MMV_XN_MAX];
    _mm256_storeu_ps(r, s);
    memcpy(out, r, sizeof(float) * (size_t)nt);
}

#define MMV_XN_SWITCH(f, a)                                                                                           \
    switch (n_tok) {                                                                                                 \
    case 2: f(n, a, x, x_stride, 2, out); break;                                                                     \
    case 3: f(n, a, x, x_stride, 3, out); break;                                                                     \
    case 4: f(n, a, x, x_stride, 4, out); break;                                                                     \
    case 5: f(n, a, x, x_stride, 5, out); break;                                                                     \
    case 6: f(n, a, x, x_stride, 6, out); break;                                                                     \
    case 7: f(n, a, x, x_stride, 7, out); break;                                                                     \
    default: f(n, a, x, x_stride, 8, out); break;                                                                    \
    }

MMV_AVX512 static void dot_q4_k_avx512_xn(int64_t n, const void *w, const void *x, size_t x_stride, int n_tok, float *out) {
    MMV_XN_SWITCH(mmv_q4_k_xn, (const block_q4_K *)w)
}

MMV_AVX512 static void dot_q6_k_avx512_xn(int64_t n, const void *w, const void *x, size_t x_stride, int n_tok, float *out) {
    MMV_XN_SWITCH(mmv_q6_k_xn, (const block_q6_K *)w)
}
#endif

/* ---------------- dispatch ---------------- */

struct mmv_type {
    int32_t type, act_type, blck;
    cpu_vec_dot_fn fn[CPU_ISA_N]; /* by enum cpu_isa_level; NULL = not written, a lower level serves */
    int vbmi;                     /* the AVX-512 dot needs VBMI too (mmv_iq512.c): without it AVX2's serves */
};

#ifdef MMV_X86
#define MMV_SIMD(f) f
#else
#define MMV_SIMD(f) NULL
#endif
#define MMV_FNS(s, f2, f5) {NULL, s, MMV_SIMD(f2), MMV_SIMD(f5)}, 0 /* no VBMI needed */

static const struct mmv_type mmv_types[] = {
    {INFER_TYPE_F32, -1, 1, MMV_FNS(dot_f32, dot_f32_avx2, dot_f32_avx512)},
    {INFER_TYPE_F16, -1, 1, MMV_FNS(dot_f16, dot_f16_avx2, dot_f16_avx512)},
    {INFER_TYPE_BF16, -1, 1, MMV_FNS(dot_bf16, dot_bf16_avx2, dot_bf16_avx512)},
    {INFER_TYPE_Q8_0, INFER_TYPE_Q8_0, QK8_0, MMV_FNS(dot_q8_0, dot_q8_0_avx2, dot_q8_0_avx512)},
    {INFER_TYPE_Q4_0, INFER_TYPE_Q8_0, QK8_0, MMV_FNS(dot_q4_0, dot_q4_0_avx2, dot_q4_0_avx512)},
    {INFER_TYPE_Q4_1, INFER_TYPE_Q8_1, QK8_0, MMV_FNS(dot_q4_1, dot_q4_1_avx2, dot_q4_1_avx512)},
    {INFER_TYPE_Q5_0, INFER_TYPE_Q8_0, QK8_0, MMV_FNS(dot_q5_0, dot_q5_0_avx2, dot_q5_0_avx512)},
    {INFER_TYPE_Q5_1, INFER_TYPE_Q8_1, QK8_0, MMV_FNS(dot_q5_1, dot_q5_1_avx2, dot_q5_1_avx512)},
    {INFER_TYPE_IQ4_NL, INFER_TYPE_Q8_0, QK8_0, MMV_FNS(dot_iq4_nl, dot_iq4_nl_avx2, dot_iq4_nl_avx512)},
    {INFER_TYPE_Q2_K, INFER_TYPE_Q8_K, QK_K, MMV_FNS(dot_q2_k, dot_q2_k_avx2, dot_q2_k_avx512)},
    {INFER_TYPE_Q3_K, INFER_TYPE_Q8_K, QK_K, MMV_FNS(dot_q3_k, dot_q3_k_avx2, dot_q3_k_avx512)},
    {INFER_TYPE_Q4_K, INFER_TYPE_Q8_K, QK_K, MMV_FNS(dot_q4_k, dot_q4_k_avx2, dot_q4_k_avx512)},
    {INFER_TYPE_Q5_K, INFER_TYPE_Q8_K, QK_K, MMV_FNS(dot_q5_k, dot_q5_k_avx2, dot_q5_k_avx512)},
    {INFER_TYPE_Q6_K, INFER_TYPE_Q8_K, QK_K, MMV_FNS(dot_q6_k, dot_q6_k_avx2, dot_q6_k_avx512)},
    {INFER_TYPE_IQ4_XS, INFER_TYPE_Q8_K, QK_K, MMV_FNS(dot_iq4_xs, dot_iq4_xs_avx2, dot_iq4_xs_avx512)},
    {INFER_TYPE_MXFP4, INFER_TYPE_Q8_0, QK8_0, MMV_FNS(dot_mxfp4, dot_mxfp4_avx2, dot_mxfp4_avx512)},
#define MMV_IQ_ROW(T, t) {INFER_TYPE_##T, INFER_TYPE_Q8_K, QK_K, MMV_FNS(cpu_dot_##t, cpu_dot_##t##_avx2, NULL)}
#define MMV_IQ512_ROW(T, t)                                                                                  \
    {INFER_TYPE_##T, INFER_TYPE_Q8_K, QK_K,                                                                  \
     {NULL, cpu_dot_##t, MMV_SIMD(cpu_dot_##t##_avx2), MMV_SIMD(cpu_dot_##t##_avx512)}, 1}
    MMV_IQ512_ROW(IQ2_XXS, iq2_xxs), MMV_IQ512_ROW(IQ2_XS, iq2_xs), MMV_IQ_ROW(IQ2_S, iq2_s),
    MMV_IQ512_ROW(IQ3_XXS, iq3_xxs), MMV_IQ512_ROW(IQ3_S, iq3_s),   MMV_IQ_ROW(IQ1_S, iq1_s),
    MMV_IQ_ROW(IQ1_M, iq1_m),        MMV_IQ_ROW(TQ1_0, tq1_0),      MMV_IQ_ROW(TQ2_0, tq2_0),
#undef MMV_IQ_ROW
#undef MMV_IQ512_ROW
};

static const struct mmv_type *mmv_find(int32_t type) {
    for (size_t i = 0; i < sizeof mmv_types / sizeof mmv_types[0]; i++)
        if (mmv_types[i].type == type) return &mmv_types[i];
    return NULL;
}

/* The highest level this CPU runs, capped by INFER_CPU_ISA=scalar|avx2|avx512 (INFER_CPU_SCALAR=1 is the
 * older spelling of scalar) so tests and benchmarks can force a lower path. AMX above AVX-512 VNNI where
 * cpu_amx_probe finds the tiles (or emulates them, INFER_CPU_AMX=emu). */
static int mmv_level(void) {
    static int cached = -1;
    if (cached >= 0) return cached;
    int l = CPU_ISA_SCALAR;
#ifdef MMV_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
        l = CPU_ISA_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
            l = cpu_amx_probe() != AMX_NONE ? CPU_ISA_AMX : CPU_ISA_AVX512;
    }
#endif
    const char *e = getenv("INFER_CPU_ISA");
    int cap = CPU_ISA_AMX;
    if (getenv("INFER_CPU_SCALAR") || (e && !strcmp(e, "scalar"))) cap = CPU_ISA_SCALAR;
    else if (e && !strcmp(e, "avx2")) cap = CPU_ISA_AVX2;
    else if (e && !strcmp(e, "avx512")) cap = CPU_ISA_AVX512;
    cached = l < cap ? l : cap;
    return cached;
}

const char *cpu_isa(void) {
    static const char *names[] = {"scalar", "scalar", "avx2", "avx512vnni", "amx"};
    const int l = mmv_level();
    if (l == CPU_ISA_AMX && cpu_amx_probe() == AMX_EMU) return "amx (emulated)";
    return names[l];
}

int cpu_isa_has(int level) { return level >= CPU_ISA_SCALAR && level <= mmv_level(); }

/* Where dot (cpu_vec_dot's) is the AVX-512 BF16 dot: the one that takes x rounded beforehand, and the rounding;
 * else NULL. */
cpu_vec_dot_fn cpu_vec_dot_rounded(cpu_vec_dot_fn dot, cpu_round_fn *round) {
#ifdef MMV_X86
    if (dot == dot_bf16_avx512) {
        *round = round_bf16_avx512;
        return dot_bf16_rounded_avx512;
    }
#endif
    (void)dot;
    *round = NULL;
    return NULL;
}

cpu_vec_dot_fn cpu_vec_dot(int32_t weight_type, int variant) {
    const struct mmv_type *t = mmv_find(weight_type);
    if (!t || variant < 0 || variant >= CPU_ISA_N) return NULL;
    if (variant != CPU_ISA_BEST && !cpu_isa_has(variant)) return NULL;
    for (int l = variant == CPU_ISA_BEST ? mmv_level() : variant; l >= CPU_ISA_SCALAR; l--)
        if (t->fn[l] && (l != CPU_ISA_AVX512 || !t->vbmi || cpu_iq512_ready())) return t->fn[l];
    return NULL;
}

cpu_vec_dot_xn_fn cpu_vec_dot_xn(int32_t weight_type, int variant) {
    if (variant < 0 || variant >= CPU_ISA_N || (variant != CPU_ISA_BEST && !cpu_isa_has(variant))) return NULL;
    if ((variant == CPU_ISA_BEST ? mmv_level() : variant) < CPU_ISA_AVX512) return NULL;
#ifdef MMV_X86
    if (weight_type == INFER_TYPE_Q4_K) return dot_q4_k_avx512_xn;
    if (weight_type == INFER_TYPE_Q6_K) return dot_q6_k_avx512_xn;
#else
    (void)weight_type;
#endif
    return NULL;
}

int32_t mmv_act_type_cpu(int32_t weight_type) {
    const struct mmv_type *t = mmv_find(cpu_r16_base(weight_type)); /* a repacked matrix: its file type's */
    return t ? t->act_type : -1;
}

size_t cpu_act_row_bytes(int32_t weight_type, int64_t n) {
    const struct mmv_type *t = mmv_find(cpu_r16_base(weight_type));
    if (!t || n % t->blck) return 0;
    if (t->act_type == INFER_TYPE_Q8_0) return (size_t)(n / QK8_0) * sizeof(block_q8_0);
    if (t->act_type == INFER_TYPE_Q8_1) return (size_t)(n / QK8_0) * sizeof(block_q8_1);
    if (t->act_type == INFER_TYPE_Q8_K) return (size_t)(n / QK_K) * sizeof(block_q8_K);
    return (size_t)n * sizeof(float);
}

infer_status cpu_mmv(const struct mmv_args *a, struct pool *p) {
    if (a->n_tokens < 1 || a->n_tokens > MMV_MAX_TOKENS)
        return infer_fail(INFER_E_ARG, "cpu_mmv: n_tokens %d: expected 1..%d", a->n_tokens, MMV_MAX_TOKENS);
    struct mm_args m = {a->type, a->w, a->w2, a->n_in, a->n_out, a->n_tokens, a->xq, a->x,
                        a->y, a->add, a->epilogue, a->variant};
    return cpu_mm(&m, p);
}

infer_status cpu_mmv_multi(const struct mmv_multi_args *a, struct pool *p) {
    infer_status st = INFER_OK;
    if (a->n < 1 || a->n > MMV_MULTI_MAX)
        return infer_fail(INFER_E_ARG, "cpu_mmv_multi: %d products: expected 1..%d", a->n, MMV_MULTI_MAX);
    for (int32_t k = 1; k < a->n; k++)
        if (a->p[k].n_tokens != a->p[0].n_tokens)
            return infer_fail(INFER_E_ARG, "cpu_mmv_multi: product %d has %d tokens, product 0 %d", k, a->p[k].n_tokens,
                              a->p[0].n_tokens);
    if (!mmv_multi_disjoint(a))
        return infer_fail(INFER_E_ARG, "cpu_mmv_multi: a product's output overlaps another product's buffers");
    for (int32_t k = 0; k < a->n; k++) TRY(cpu_mmv(&a->p[k], p));
fail:
    return st;
}
