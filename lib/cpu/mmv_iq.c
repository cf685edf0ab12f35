/* mmv_iq: dot products of the lattice and ternary types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M,
 * TQ1_0, TQ2_0) with Q8_K activations, for mmv.c's table, and the integer-form unpackers mm_iq.c's GEMM uses.
 *
 * Every one of these types decodes, per group of 8 values, to int8 values v and a small integer scale ls, with
 * one float factor f per block (blocks_iq.h's integer form): a block's dot is (f d_x) Σ_g ls_g Σ_j v_j x_j, the
 * sum exact in int32 (|v| <= 62, ls <= 31, |x| <= 127 over 256 values < 2^31), added to the row's sum block by
 * block. The variants:
 *   scalar: the block unpacked group by group (blocks_iq_<t>) into struct iq_block, the integer sums in C;
 *   AVX2 (AVX-512 machines run it too): each 32-value vector built straight from four grid entries (IQ3: eight)
 *     and the signs (a 128-entry table of sign bytes for the 7-bit fields, a shuffle for explicit sign bytes),
 *     |w| times y with w's sign by maddubs (pairs <= 2 * 62 * 127 fit int16), madd with the groups' scales;
 *     IQ1 as 8 sign(grid) + delta, TQ as digits times y minus the Q8_K bsums.
 * Every variant computes the same integer per block and the same f32 steps, so they agree bit for bit (test-ops).
 * note: per byte these dots are compute-bound (the grid loads), near ggml's own: 0.4-0.9x of its AVX2 dots from
 * cache on Sapphire Rapids; prefill takes mm_iq.c's GEMM instead, which unpacks each block once per call.
 */
#include <string.h>

#include "cpu.h"
#include "mmv_iq.h"

#if defined(__x86_64__) || defined(__i386__)
#define MMV_IQ_X86 1
#include <immintrin.h>
#endif

#define IQ_UNPACK(t)                                                                                         \
    static void unpack_##t(const void *w, int64_t i, struct iq_block *u) {                                   \
        const block_##t *b = (const block_##t *)w + i;                                                       \
        for (int g = 0; g < 32; g++) u->ls[g] = blocks_iq_##t(b, g, u->v + 8 * g);                           \
        u->f = blocks_iqf_##t(b);                                                                            \
        memset(u->m, 0, sizeof u->m);                                                                        \
        u->fm = 0.0f;                                                                                        \
    }
IQ_UNPACK(iq2_xxs)
IQ_UNPACK(iq2_xs)
IQ_UNPACK(iq2_s)
IQ_UNPACK(iq3_xxs)
IQ_UNPACK(iq3_s)
IQ_UNPACK(iq1_s)
IQ_UNPACK(iq1_m)
IQ_UNPACK(tq1_0)
IQ_UNPACK(tq2_0)
#undef IQ_UNPACK

/* Q2_K and Q3_K in the same form, for mm_iq.c's GEMM (their dots are mmv.c's): Q2_K v = the 2-bit code, ls = the
 * low nibble of the scale byte of its 16 values, m = the high nibble, f = d, fm = dmin; Q3_K v = code - 4, ls = the
 * signed 6-bit scale, f = d. As dot_q2_k / dot_q3_k compute them. */
static void unpack_q2_K(const void *w, int64_t i, struct iq_block *u) {
    const block_q2_K *b = (const block_q2_K *)w + i;
    for (int c = 0; c < 8; c++) { /* values 32c..32c+31: bits 2 (c % 4) of qs[32 (c / 4) ..] */
        const uint8_t *q = b->qs + 32 * (c / 4);
        for (int l = 0; l < 32; l++) u->v[32 * c + l] = (int8_t)((q[l] >> (2 * (c % 4))) & 3);
    }
    for (int g = 0; g < 32; g++) u->ls[g] = b->scales[g / 2] & 0xF;
    for (int j = 0; j < 16; j++) u->m[j] = b->scales[j] >> 4;
    u->f = blocks_f16_to_f32(b->d);
    u->fm = blocks_f16_to_f32(b->dmin);
}

static void unpack_q3_K(const void *w, int64_t i, struct iq_block *u) {
    const block_q3_K *b = (const block_q3_K *)w + i;
    for (int c = 0; c < 8; c++) { /* values 32c..32c+31: the low bits as Q2_K's, bit c of hmask[l] clear: - 4 */
        const uint8_t *q = b->qs + 32 * (c / 4);
        for (int l = 0; l < 32; l++)
            u->v[32 * c + l] = (int8_t)(((q[l] >> (2 * (c % 4))) & 3) - 4 + 4 * ((b->hmask[l] >> c) & 1));
    }
    for (int g = 0; g < 32; g++) u->ls[g] = blocks_q3_K_scale(b, g / 2);
    memset(u->m, 0, sizeof u->m);
    u->f = blocks_f16_to_f32(b->d);
    u->fm = 0.0f;
}

cpu_iq_unpack_fn cpu_iq_unpacker(int32_t type) {
    switch (type) {
    case INFER_TYPE_Q2_K: return unpack_q2_K;
    case INFER_TYPE_Q3_K: return unpack_q3_K;
#define IQ_UNPACKER(T, t) case INFER_TYPE_##T: return unpack_##t;
        BLOCKS_IQ_TYPES(IQ_UNPACKER)
#undef IQ_UNPACKER
    default: return NULL;
    }
}

/* Σ_g ls_g Σ_j v_j x_j over one block, exact. */
static int32_t iq_sum_scalar(const struct iq_block *u, const int8_t *x) {
    int32_t s = 0;
    for (int g = 0; g < 32; g++) {
        int32_t gs = 0;
        for (int j = 0; j < 8; j++) gs += u->v[8 * g + j] * x[8 * g + j];
        s += u->ls[g] * gs;
    }
    return s;
}

/* The scalar dot of any of these types: each block unpacked, its exact sum, the f32 step the SIMD dots repeat. */
static inline float iq_dot(int64_t n, const void *w, const void *x, cpu_iq_unpack_fn unpack) {
    const block_q8_K *b = x;
    struct iq_block u;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack(w, i, &u);
        s += (u.f * b[i].d) * (float)iq_sum_scalar(&u, b[i].qs);
    }
    return s;
}

#ifdef MMV_IQ_X86
#define MMV_IQ_AVX2 __attribute__((target("avx2,fma,f16c")))

/* The 8 sign bytes (0xFF: negate, 0x01: keep) of a 7-bit sign field (blocks_ksigns: the eighth bit makes
 * the count even), as constant expressions: 128 entries, 1 KiB. */
#define IQ_P7(i) (((i) ^ (i) >> 1 ^ (i) >> 2 ^ (i) >> 3 ^ (i) >> 4 ^ (i) >> 5 ^ (i) >> 6) & 1)
#define IQ_K7(i) ((i) | IQ_P7(i) << 7)
#define IQ_SB(i, j) ((IQ_K7(i) >> (j) & 1 ? 0xFFull : 0x01ull) << (8 * (j)))
#define IQ_S(i) (IQ_SB(i, 0) | IQ_SB(i, 1) | IQ_SB(i, 2) | IQ_SB(i, 3) | IQ_SB(i, 4) | IQ_SB(i, 5) | IQ_SB(i, 6) | IQ_SB(i, 7))
#define IQ_S4(i) IQ_S(i), IQ_S(i + 1), IQ_S(i + 2), IQ_S(i + 3)
#define IQ_S16(i) IQ_S4(i), IQ_S4(i + 4), IQ_S4(i + 8), IQ_S4(i + 12)
static const uint64_t iq_signs7[128] = {IQ_S16(0), IQ_S16(16), IQ_S16(32), IQ_S16(48),
                                        IQ_S16(64), IQ_S16(80), IQ_S16(96), IQ_S16(112)};

MMV_IQ_AVX2 static inline int32_t iq_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Σ w·y of 32 values, w unsigned (<= 127) with its signs as 0xFF / 0x01 bytes, y the activations; int32 lanes
 * with ls_lo on values 0..15 and ls_hi on 16..31. maddubs pairs stay below 2 * 62 * 127. */
MMV_IQ_AVX2 static inline __m256i iq_dot32(__m256i w, __m256i sg, const int8_t *y, int ls_lo, int ls_hi) {
    const __m256i p = _mm256_maddubs_epi16(w, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y), sg));
    return _mm256_madd_epi16(p, _mm256_set_m128i(_mm_set1_epi16((short)ls_hi), _mm_set1_epi16((short)ls_lo)));
}

/* Sign bytes (0xFF / 0x01) from four bytes of explicit sign bits (IQ2_S, IQ3_S): bit j of byte l for value 8l + j. */
MMV_IQ_AVX2 static inline __m256i iq_signs_bits(uint32_t s4) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s4),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_or_si256(neg, _mm256_set1_epi8(1));
}

MMV_IQ_AVX2 static int32_t iq_sum_iq2_xxs(const block_iq2_xxs *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint32_t a0 = (uint32_t)b->qs[4 * ib] | (uint32_t)b->qs[4 * ib + 1] << 16;
        const uint32_t a1 = (uint32_t)b->qs[4 * ib + 2] | (uint32_t)b->qs[4 * ib + 3] << 16;
        const __m256i g = _mm256_set_epi64x((long long)blocks_iq2xxs_grid[a0 >> 24], (long long)blocks_iq2xxs_grid[(a0 >> 16) & 255],
                                            (long long)blocks_iq2xxs_grid[(a0 >> 8) & 255], (long long)blocks_iq2xxs_grid[a0 & 255]);
        const __m256i sg = _mm256_set_epi64x((long long)iq_signs7[(a1 >> 21) & 127], (long long)iq_signs7[(a1 >> 14) & 127],
                                             (long long)iq_signs7[(a1 >> 7) & 127], (long long)iq_signs7[a1 & 127]);
        const int ls = 2 * (int)(a1 >> 28) + 1;
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, ls, ls));
    }
    return iq_hsum_i32(acc);
}

MMV_IQ_AVX2 static int32_t iq_sum_iq2_xs(const block_iq2_xs *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t *q = b->qs + 4 * ib;
        const __m256i g = _mm256_set_epi64x((long long)blocks_iq2xs_grid[q[3] & 511], (long long)blocks_iq2xs_grid[q[2] & 511],
                                            (long long)blocks_iq2xs_grid[q[1] & 511], (long long)blocks_iq2xs_grid[q[0] & 511]);
        const __m256i sg = _mm256_set_epi64x((long long)iq_signs7[q[3] >> 9], (long long)iq_signs7[q[2] >> 9],
                                             (long long)iq_signs7[q[1] >> 9], (long long)iq_signs7[q[0] >> 9]);
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, 2 * (b->scales[ib] & 15) + 1, 2 * (b->scales[ib] >> 4) + 1));
    }
    return iq_hsum_i32(acc);
}

MMV_IQ_AVX2 static int32_t iq_sum_iq2_s(const block_iq2_s *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b->qs + 4 * ib;
        const int h = b->qh[ib];
        const __m256i g = _mm256_set_epi64x((long long)blocks_iq2s_grid[q[3] | (h << 2 & 0x300)],
                                            (long long)blocks_iq2s_grid[q[2] | (h << 4 & 0x300)],
                                            (long long)blocks_iq2s_grid[q[1] | (h << 6 & 0x300)],
                                            (long long)blocks_iq2s_grid[q[0] | (h << 8 & 0x300)]);
        const __m256i sg = iq_signs_bits(blocks_le32(b->qs + 32 + 4 * ib));
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, 2 * (b->scales[ib] & 15) + 1, 2 * (b->scales[ib] >> 4) + 1));
    }
    return iq_hsum_i32(acc);
}

MMV_IQ_AVX2 static int32_t iq_sum_iq3_xxs(const block_iq3_xxs *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b->qs + 8 * ib;
        const uint32_t a = blocks_le32(b->qs + 64 + 4 * ib);
        const __m256i g = _mm256_set_epi32((int)blocks_iq3xxs_grid[q[7]], (int)blocks_iq3xxs_grid[q[6]], (int)blocks_iq3xxs_grid[q[5]],
                                           (int)blocks_iq3xxs_grid[q[4]], (int)blocks_iq3xxs_grid[q[3]], (int)blocks_iq3xxs_grid[q[2]],
                                           (int)blocks_iq3xxs_grid[q[1]], (int)blocks_iq3xxs_grid[q[0]]);
        const __m256i sg = _mm256_set_epi64x((long long)iq_signs7[(a >> 21) & 127], (long long)iq_signs7[(a >> 14) & 127],
                                             (long long)iq_signs7[(a >> 7) & 127], (long long)iq_signs7[a & 127]);
        const int ls = 2 * (int)(a >> 28) + 1;
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, ls, ls));
    }
    return iq_hsum_i32(acc);
}

MMV_IQ_AVX2 static int32_t iq_sum_iq3_s(const block_iq3_s *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b->qs + 8 * ib;
        const int h = b->qh[ib];
#define IQ3S(k) (int)blocks_iq3s_grid[q[k] | (h << (8 - (k)) & 256)]
        const __m256i g = _mm256_set_epi32(IQ3S(7), IQ3S(6), IQ3S(5), IQ3S(4), IQ3S(3), IQ3S(2), IQ3S(1), IQ3S(0));
#undef IQ3S
        const __m256i sg = iq_signs_bits(blocks_le32(b->signs + 4 * ib));
        const int ls = 1 + 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 15);
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, ls, ls));
    }
    return iq_hsum_i32(acc);
}

/* IQ1: v = 8 g + delta with g in {-1, 0, 1} (8 sign(g) via sign_epi8) and delta ±1 per group; Σ v·y by |v| times y
 * with v's sign, scales per 16 values. */
MMV_IQ_AVX2 static inline __m256i iq1_dot32(__m256i g, __m256i delta, const int8_t *y, int ls_lo, int ls_hi) {
    const __m256i v = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), delta);
    const __m256i yv = _mm256_loadu_si256((const __m256i *)y);
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yv, v));
    return _mm256_madd_epi16(p, _mm256_set_m128i(_mm_set1_epi16((short)ls_hi), _mm_set1_epi16((short)ls_lo)));
}

static inline long long iq1_delta8(int neg) { return neg ? -1LL : 0x0101010101010101LL; }

MMV_IQ_AVX2 static int32_t iq_sum_iq1_s(const block_iq1_s *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b->qs + 4 * ib;
        const int h = b->qh[ib];
        const __m256i g = _mm256_set_epi64x((long long)blocks_iq1s_grid[q[3] | (h >> 9 & 7) << 8], (long long)blocks_iq1s_grid[q[2] | (h >> 6 & 7) << 8],
                                            (long long)blocks_iq1s_grid[q[1] | (h >> 3 & 7) << 8], (long long)blocks_iq1s_grid[q[0] | (h & 7) << 8]);
        const __m256i delta = _mm256_set1_epi64x(iq1_delta8(h & 0x8000));
        const int ls = 2 * ((h >> 12) & 7) + 1;
        acc = _mm256_add_epi32(acc, iq1_dot32(g, delta, y + 32 * ib, ls, ls));
    }
    return iq_hsum_i32(acc);
}

MMV_IQ_AVX2 static int32_t iq_sum_iq1_m(const block_iq1_m *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *q = b->qs + 4 * ib, *qh = b->qh + 2 * ib;
        const __m256i g = _mm256_set_epi64x((long long)blocks_iq1s_grid[q[3] | (qh[1] << 4 & 0x700)],
                                            (long long)blocks_iq1s_grid[q[2] | (qh[1] << 8 & 0x700)],
                                            (long long)blocks_iq1s_grid[q[1] | (qh[0] << 4 & 0x700)],
                                            (long long)blocks_iq1s_grid[q[0] | (qh[0] << 8 & 0x700)]);
        const __m256i delta = _mm256_set_epi64x(iq1_delta8(qh[1] & 0x80), iq1_delta8(qh[1] & 0x08), iq1_delta8(qh[0] & 0x80),
                                                iq1_delta8(qh[0] & 0x08));
        const int sc = blocks_iq1_m_sc(b, ib / 2) >> (6 * (ib % 2));
        acc = _mm256_add_epi32(acc, iq1_dot32(g, delta, y + 32 * ib, 2 * (sc & 7) + 1, 2 * ((sc >> 3) & 7) + 1));
    }
    return iq_hsum_i32(acc);
}

/* Ternary: digits 0..2 (value + 1), Σ (q - 1) y = Σ q y - Σ y with Σ y from the Q8_K block's bsums. */
MMV_IQ_AVX2 static inline int32_t iq_bsum_all(const block_q8_K *x) {
    return iq_hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), _mm256_set1_epi16(1)));
}

/* Digit n of 16 bytes (in 16-bit lanes), as ggml extracts it: ((uint8)(q * 3^n) * 3) >> 8. */
MMV_IQ_AVX2 static inline __m256i tq1_digits16(__m256i q16, int pow3) {
    const __m256i m = _mm256_and_si256(_mm256_mullo_epi16(q16, _mm256_set1_epi16((short)pow3)), _mm256_set1_epi16(0xFF));
    return _mm256_srli_epi16(_mm256_mullo_epi16(m, _mm256_set1_epi16(3)), 8);
}

MMV_IQ_AVX2 static inline __m256i tq_madd16(__m256i q16, const int8_t *y) {
    return _mm256_madd_epi16(q16, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)y)));
}

MMV_IQ_AVX2 static int32_t iq_sum_tq1_0(const block_tq1_0 *b, const block_q8_K *x) {
    static const int pow3[5] = {1, 3, 9, 27, 81};
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    const __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->qs));
    const __m256i hi = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16)));
    const __m256i tail = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 32)));
    for (int n = 0; n < 5; n++) {
        acc = _mm256_add_epi32(acc, tq_madd16(tq1_digits16(lo, pow3[n]), y + 32 * n));
        acc = _mm256_add_epi32(acc, tq_madd16(tq1_digits16(hi, pow3[n]), y + 32 * n + 16));
        acc = _mm256_add_epi32(acc, tq_madd16(tq1_digits16(tail, pow3[n]), y + 160 + 16 * n));
    }
    /* values 240..255: digit (e - 240) / 4 of qh[(e - 240) % 4], the 4 bytes spread over the 16 lanes */
    int32_t qh;
    memcpy(&qh, b->qh, 4);
    const __m128i spread = _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    const __m256i q4 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_cvtsi32_si128(qh), spread));
    const __m256i p4 = _mm256_setr_epi16(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27);
    const __m256i m4 = _mm256_and_si256(_mm256_mullo_epi16(q4, p4), _mm256_set1_epi16(0xFF));
    acc = _mm256_add_epi32(acc, tq_madd16(_mm256_srli_epi16(_mm256_mullo_epi16(m4, _mm256_set1_epi16(3)), 8), y + 240));
    return iq_hsum_i32(acc) - iq_bsum_all(x);
}

MMV_IQ_AVX2 static int32_t iq_sum_tq2_0(const block_tq2_0 *b, const block_q8_K *x) {
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < 2; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
        for (int l = 0; l < 4; l++) {
            const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), _mm256_set1_epi8(3));
            const __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(x->qs + 128 * j + 32 * l)));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        }
    }
    return iq_hsum_i32(acc) - iq_bsum_all(x);
}

/* The AVX2 dots: the block sums above, then the scalar dot's f32 steps (so every variant gives the same bits); the
 * block factor as blocks_iqf_<t> computes it, its f16 through F16C (exact, as blocks_f16_to_f32). */
#define IQ_DOT_AVX2(t, factor)                                                                               \
    MMV_IQ_AVX2 float cpu_dot_##t##_avx2(int64_t n, const void *w, const void *x) {                          \
        const block_q8_K *b = x;                                                                             \
        const block_##t *a = w;                                                                              \
        float s = 0;                                                                                         \
        for (int64_t i = 0; i < n / QK_K; i++) s += ((factor) * b[i].d) * (float)iq_sum_##t(&a[i], &b[i]);   \
        return s;                                                                                            \
    }
IQ_DOT_AVX2(iq2_xxs, _cvtsh_ss(a[i].d) * 0.125f)
IQ_DOT_AVX2(iq2_xs, _cvtsh_ss(a[i].d) * 0.125f)
IQ_DOT_AVX2(iq2_s, _cvtsh_ss(a[i].d) * 0.125f)
IQ_DOT_AVX2(iq3_xxs, _cvtsh_ss(a[i].d) * 0.25f)
IQ_DOT_AVX2(iq3_s, _cvtsh_ss(a[i].d))
IQ_DOT_AVX2(iq1_s, _cvtsh_ss(a[i].d) * 0.125f)
IQ_DOT_AVX2(iq1_m, _cvtsh_ss(blocks_iq1_m_half(&a[i])) * 0.125f)
IQ_DOT_AVX2(tq1_0, _cvtsh_ss(a[i].d))
IQ_DOT_AVX2(tq2_0, _cvtsh_ss(a[i].d))
#undef IQ_DOT_AVX2
#endif

#define IQ_DOTS(t)                                                                                           \
    float cpu_dot_##t(int64_t n, const void *w, const void *x) { return iq_dot(n, w, x, unpack_##t); }
IQ_DOTS(iq2_xxs)
IQ_DOTS(iq2_xs)
IQ_DOTS(iq2_s)
IQ_DOTS(iq3_xxs)
IQ_DOTS(iq3_s)
IQ_DOTS(iq1_s)
IQ_DOTS(iq1_m)
IQ_DOTS(tq1_0)
IQ_DOTS(tq2_0)
#undef IQ_DOTS
