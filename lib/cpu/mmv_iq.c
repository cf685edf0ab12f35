/* mmv_iq: dot products of the lattice and ternary types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M,
 * TQ1_0, TQ2_0) with Q8_K activations, for mmv.c's table, and the integer-form unpackers mm_iq.c's GEMM uses.
 *
 * Every one of these types decodes, per group of 8 values, to int8 values v and a small integer scale ls, with
 * one float factor f per block (blocks_iq.h's integer form): a block's dot is (f d_x) Σ_g ls_g Σ_j v_j x_j, the
 * sum exact in int32 (|v| <= 62, ls <= 31, |x| <= 127 over 256 values < 2^31), added to the row's sum block by
 * block. The variants:
 *   scalar: the block unpacked group by group (blocks_iq_<t>) into struct iq_block, the integer sums in C;
 *   AVX2 (AVX-512 machines run it too, but for IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S where the CPU has VBMI:
 *     mmv_iq512.c's permute lookups): each 32-value vector built straight from four grid entries (IQ3: eight)
 *     and the signs (a 128-entry table of sign bytes for the 7-bit fields, a shuffle for explicit sign bytes),
 *     |w| times y with w's sign by maddubs (pairs <= 2 * 62 * 127 fit int16), madd with the groups' scales. Where
 *     a block's indices or scales need bit-fiddling (IQ2_XS, IQ2_S, IQ3_S, IQ1), vector ops unpack a chunk of 8
 *     blocks first (struct iq_prep). IQ1 multiplies the grid and takes the deltas' part from the Q8_K bsums (IQ1_S)
 *     or through an offset (IQ1_M); TQ1_0 steps its base-3 digits with byte adds, TQ as digits times y minus the
 *     bsums.
 * Every variant computes the same integer per block and the same f32 steps, so they agree bit for bit (test-ops).
 * note: per byte these dots are compute-bound (the grid loads). From cache, one thread, against ggml's AVX2 dots on
 * Zen 4 (bench-dots, 2026-11-29): 0.85-1.1x for the IQ types, 0.75-0.8x for TQ1_0 / TQ2_0 (ggml keeps its block
 * sums in a float vector; the bit-for-bit rule here costs a horizontal sum per block). Prefill takes mm_iq.c's
 * GEMM instead, which unpacks each block once per call.
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

/* Four 8-byte table rows in one vector (row k in qword k), and eight 4-byte ones (row k in dword k). (Broadcast loads
 * and blends instead, which keep off the shuffle port, measured 3-6 % slower on Zen 4.) */
MMV_IQ_AVX2 static inline __m256i iq_rows4(const uint64_t *t, int i0, int i1, int i2, int i3) {
    return _mm256_set_epi64x((long long)t[i3], (long long)t[i2], (long long)t[i1], (long long)t[i0]);
}

MMV_IQ_AVX2 static inline __m256i iq_rows8(const uint32_t *t, const uint16_t *i) {
    return _mm256_set_epi32((int)t[i[7]], (int)t[i[6]], (int)t[i[5]], (int)t[i[4]], (int)t[i[3]], (int)t[i[2]], (int)t[i[1]],
                            (int)t[i[0]]);
}

/* Σ w·y of 32 values, w unsigned (<= 127) with its signs as 0xFF / 0x01 bytes, y the activations; int32 lanes
 * with ls_lo on values 0..15 and ls_hi on 16..31. maddubs pairs stay below 2 * 62 * 127. */
MMV_IQ_AVX2 static inline __m256i iq_dot32(__m256i w, __m256i sg, const int8_t *y, __m256i ls) {
    const __m256i p = _mm256_maddubs_epi16(w, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y), sg));
    return _mm256_madd_epi16(p, ls);
}

/* What a block's dot reads besides its bytes, unpacked with vector ops for a chunk of blocks before any of them is
 * multiplied (IQ_PREP_DOT_AVX2): the grid indices (IQ2_XS: and the sign fields), IQ1_M's per-group δ + 9, and the
 * scales as madd factors (iq_scales2's pairs, or ls | ls << 16). Unpacked block by block, each lookup waited on the
 * vector store it reads from: IQ1_M's dot went from 0.73x to 0.95x of ggml's on Zen 4 by the chunks alone. */
struct iq_prep {
    uint16_t idx[64];
    int8_t delta[32];
    uint32_t lsp[8];
};

/* The scales of a block with two per 32 values (IQ2_XS, IQ2_S: a nibble each, ls = 2 n + 1), as dwords ls_lo |
 * ls_hi << 16, one per 32 values, built for the whole block at once. */
MMV_IQ_AVX2 static inline void iq_scale_pairs(const uint8_t *scales, uint32_t lsp[8]) {
    long long s8;
    memcpy(&s8, scales, 8);
    const __m256i s = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(s8)), f = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1);
    const __m256i lo = _mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(s, f), 1), one);
    const __m256i hi = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(s, 4), 1), one);
    _mm256_storeu_si256((__m256i *)lsp, _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16)));
}

/* madd's factors from one ls_lo | ls_hi << 16 dword: ls_lo on the words of values 0..15, ls_hi on 16..31 (a broadcast
 * load and one byte shuffle) */
MMV_IQ_AVX2 static inline __m256i iq_scales2(const uint32_t *lsp) {
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
                                          2, 3, 2, 3);
    return _mm256_shuffle_epi8(_mm256_set1_epi32((int)*lsp), pick);
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
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, _mm256_set1_epi16((short)ls)));
    }
    return iq_hsum_i32(acc);
}

MMV_IQ_AVX2 static void iq2_xs_prep(const block_iq2_xs *b, struct iq_prep *u) {
    iq_scale_pairs(b->scales, u->lsp);
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 16 * h));
        _mm256_storeu_si256((__m256i *)(u->idx + 16 * h), _mm256_and_si256(q, _mm256_set1_epi16(511)));
        _mm256_storeu_si256((__m256i *)(u->idx + 32 + 16 * h), _mm256_srli_epi16(q, 9));
    }
}

MMV_IQ_AVX2 static int32_t iq_sum_iq2_xs(const block_iq2_xs *b, const block_q8_K *x, const struct iq_prep *u) {
    (void)b; /* everything it needs is in u */
    const uint32_t *lsp = u->lsp;
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t *q = u->idx + 4 * ib, *sq = u->idx + 32 + 4 * ib;
        const __m256i g = iq_rows4(blocks_iq2xs_grid, q[0], q[1], q[2], q[3]);
        const __m256i sg = iq_rows4(iq_signs7, sq[0], sq[1], sq[2], sq[3]);
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, iq_scales2(lsp + ib)));
    }
    return iq_hsum_i32(acc);
}

/* IQ2_S: group 4 ib + k's index is qs[4 ib + k] | bits 2k..2k+1 of qh[ib] << 8: qh's bytes spread to 16-bit lanes
 * (lane 4 ib + k), multiplied by 2^(8 - 2k) and masked */
MMV_IQ_AVX2 static void iq2_s_prep(const block_iq2_s *b, struct iq_prep *u) {
    iq_scale_pairs(b->scales, u->lsp);
    long long h8;
    memcpy(&h8, b->qh, 8);
    const __m256i h = _mm256_set1_epi64x(h8), up = _mm256_setr_epi16(256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4, 256, 64, 16, 4);
    for (int half = 0; half < 2; half++) {
        const char z = -1, b0 = (char)(4 * half), b1 = (char)(b0 + 1), b2 = (char)(b0 + 2), b3 = (char)(b0 + 3);
        const __m256i pick = _mm256_setr_epi8(b0, z, b0, z, b0, z, b0, z, b1, z, b1, z, b1, z, b1, z, b2, z, b2, z, b2, z, b2, z, b3, z,
                                              b3, z, b3, z, b3, z);
        const __m256i f = _mm256_and_si256(_mm256_mullo_epi16(_mm256_shuffle_epi8(h, pick), up), _mm256_set1_epi16(0x300));
        const __m256i q = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16 * half)));
        _mm256_storeu_si256((__m256i *)(u->idx + 16 * half), _mm256_or_si256(q, f));
    }
}

MMV_IQ_AVX2 static int32_t iq_sum_iq2_s(const block_iq2_s *b, const block_q8_K *x, const struct iq_prep *u) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t *i = u->idx + 4 * ib;
        const __m256i g = iq_rows4(blocks_iq2s_grid, i[0], i[1], i[2], i[3]);
        const __m256i sg = iq_signs_bits(blocks_le32(b->qs + 32 + 4 * ib));
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, iq_scales2(u->lsp + ib)));
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
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, _mm256_set1_epi16((short)ls)));
    }
    return iq_hsum_i32(acc);
}

/* IQ3_S: group 8 ib + k's index is qs[8 ib + k] | bit k of qh[ib] << 8 (lanes of qh[ib] times 2^(8 - k), masked);
 * one scale per 32 values, as ls | ls << 16 */
MMV_IQ_AVX2 static void iq3_s_prep(const block_iq3_s *b, struct iq_prep *u) {
    const __m256i up = _mm256_setr_epi16(256, 128, 64, 32, 16, 8, 4, 2, 256, 128, 64, 32, 16, 8, 4, 2);
    const char z = -1;
    const __m256i pick = _mm256_setr_epi8(0, z, 0, z, 0, z, 0, z, 0, z, 0, z, 0, z, 0, z, 1, z, 1, z, 1, z, 1, z, 1, z, 1, z, 1, z, 1, z);
    for (int j = 0; j < 4; j++) {
        const __m256i h = _mm256_set1_epi16((short)(b->qh[2 * j] | b->qh[2 * j + 1] << 8));
        const __m256i f = _mm256_and_si256(_mm256_mullo_epi16(_mm256_shuffle_epi8(h, pick), up), _mm256_set1_epi16(0x100));
        const __m256i q = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16 * j)));
        _mm256_storeu_si256((__m256i *)(u->idx + 16 * j), _mm256_or_si256(q, f));
    }
    for (int ib = 0; ib < 8; ib++) u->lsp[ib] = (uint32_t)(1 + 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 15)) * 0x10001u;
}

MMV_IQ_AVX2 static int32_t iq_sum_iq3_s(const block_iq3_s *b, const block_q8_K *x, const struct iq_prep *u) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ib++) {
        const __m256i g = iq_rows8(blocks_iq3s_grid, u->idx + 8 * ib);
        const __m256i sg = iq_signs_bits(blocks_le32(b->signs + 4 * ib));
        acc = _mm256_add_epi32(acc, iq_dot32(g, sg, y + 32 * ib, _mm256_set1_epi32((int)u->lsp[ib])));
    }
    return iq_hsum_i32(acc);
}

/* IQ1_M: v = 8 g + δ with g in {-1, 0, 1} (8 sign(g) via sign_epi8) and δ ±1 per group of 8; u = v + 9 is never
 * negative, so maddubs takes it as it is, and the 9 Σ y it adds comes off the block's total from the bsums (one scale
 * per 16 values, as the bsums): Σ ls v y = Σ ls u y - 9 Σ_s ls_s bsum_s, the same integer. d9 holds δ + 9. */
MMV_IQ_AVX2 static inline __m256i iq1_m_dot32(__m256i g, __m256i d9, const int8_t *y, __m256i ls) {
    const __m256i u = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), d9);
    const __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)y));
    return _mm256_madd_epi16(p, ls);
}

/* An IQ1 block's 32 grid indices (q | 3 high bits << 8) from the 32 qs bytes and the 32 high-bit fields (bytes
 * 0..7) */
MMV_IQ_AVX2 static inline void iq1_indices(const uint8_t *qs, __m128i hi0, __m128i hi1, uint16_t idx[32]) {
    const __m256i a = _mm256_or_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)qs)),
                                      _mm256_slli_epi16(_mm256_cvtepu8_epi16(hi0), 8));
    const __m256i b = _mm256_or_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16))),
                                      _mm256_slli_epi16(_mm256_cvtepu8_epi16(hi1), 8));
    _mm256_storeu_si256((__m256i *)idx, a);
    _mm256_storeu_si256((__m256i *)(idx + 16), b);
}

/* IQ1_M: group k's field is nibble k % 2 of qh[k / 2]: its low 3 bits the index's high bits, bit 3 the delta sign */
MMV_IQ_AVX2 static inline void iq1_m_fields(const block_iq1_m *b, struct iq_prep *u) {
    const __m128i h = _mm_loadu_si128((const __m128i *)b->qh), f = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(h, f), hi = _mm_and_si128(_mm_srli_epi16(h, 4), f);
    const __m128i n0 = _mm_unpacklo_epi8(lo, hi), n1 = _mm_unpackhi_epi8(lo, hi), seven = _mm_set1_epi8(7);
    iq1_indices(b->qs, _mm_and_si128(n0, seven), _mm_and_si128(n1, seven), u->idx);
    /* δ + 9: 10 + 2 c with c = -1 where bit 3 is set (δ = -1), else 0 */
    const __m128i eight = _mm_set1_epi8(8), ten = _mm_set1_epi8(10);
    const __m128i c0 = _mm_cmpeq_epi8(_mm_and_si128(n0, eight), eight), c1 = _mm_cmpeq_epi8(_mm_and_si128(n1, eight), eight);
    _mm_storeu_si128((__m128i *)u->delta, _mm_add_epi8(ten, _mm_add_epi8(c0, c0)));
    _mm_storeu_si128((__m128i *)(u->delta + 16), _mm_add_epi8(ten, _mm_add_epi8(c1, c1)));
}

/* The 16 3-bit fields of four 16-bit words w4 (field m of word k, bits 3m..3m+2, in lane 4k + m): each word in 4
 * lanes, then multiplied so that its field lands in the top 3 bits */
MMV_IQ_AVX2 static inline __m256i iq_fields3(long long w4) {
    const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7,
                                          6, 7, 6, 7);
    const __m256i up = _mm256_setr_epi16(8192, 1024, 128, 16, 8192, 1024, 128, 16, 8192, 1024, 128, 16, 8192, 1024, 128, 16);
    return _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(_mm256_set1_epi64x(w4), pick), up), 13);
}

/* IQ1_S: group 4 ib + k's high bits are bits 3k..3k+2 of qh[ib] (k < 4) */
MMV_IQ_AVX2 static void iq1_s_prep(const block_iq1_s *b, struct iq_prep *u) {
    long long h0, h1;
    memcpy(&h0, b->qh, 8);
    memcpy(&h1, b->qh + 4, 8);
    const __m256i f0 = iq_fields3(h0), f1 = iq_fields3(h1);
    iq1_indices(b->qs, _mm256_castsi256_si128(_mm256_packus_epi16(f0, _mm256_permute2x128_si256(f0, f0, 0x11))),
                _mm256_castsi256_si128(_mm256_packus_epi16(f1, _mm256_permute2x128_si256(f1, f1, 0x11))), u->idx);
}

/* IQ1_M's scales: 16-value group s's is field s % 4 of word s / 4 (ls = 2 f + 1), so the 16 as words are the
 * ls_lo | ls_hi << 16 dwords of iq_scales2 */
MMV_IQ_AVX2 static inline void iq1_m_scale_pairs(const block_iq1_m *b, uint32_t lsp[8]) {
    long long s4;
    memcpy(&s4, b->scales, 8);
    const __m256i ls = _mm256_add_epi16(_mm256_slli_epi16(iq_fields3(s4), 1), _mm256_set1_epi16(1));
    _mm256_storeu_si256((__m256i *)lsp, ls);
}

/* the 4 grid rows of groups 4 ib..4 ib + 3 */
MMV_IQ_AVX2 static inline __m256i iq1_grid4(const uint16_t *idx) {
    return iq_rows4(blocks_iq1s_grid, idx[0], idx[1], idx[2], idx[3]);
}

/* IQ1_S: one delta and one scale per 32 values, so the delta's part is ls δ (Σ of the 32 y) from the bsums, and the
 * vectors only multiply the grid: Σ ls (8 g + δ) y = Σ ls (8 Σ g y + δ Σ y), the same integer */
MMV_IQ_AVX2 static int32_t iq_sum_iq1_s(const block_iq1_s *b, const block_q8_K *x, const struct iq_prep *u) {
    const int8_t *y = x->qs;
    __m256i acc = _mm256_setzero_si256();
    int32_t sd = 0;
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ib++) {
        const int h = b->qh[ib];
        const int ls = 2 * ((h >> 12) & 7) + 1;
        const int ys = x->bsums[2 * ib] + x->bsums[2 * ib + 1];
        sd += ls * (h & 0x8000 ? -ys : ys);
        const __m256i gy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(y + 32 * ib)), iq1_grid4(u->idx + 4 * ib));
        const __m256i p = _mm256_maddubs_epi16(_mm256_set1_epi8(8), gy);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16((short)ls)));
    }
    return iq_hsum_i32(acc) + sd;
}

MMV_IQ_AVX2 static void iq1_m_prep(const block_iq1_m *b, struct iq_prep *u) {
    iq1_m_fields(b, u);
    iq1_m_scale_pairs(b, u->lsp);
}

MMV_IQ_AVX2 static int32_t iq_sum_iq1_m(const block_iq1_m *b, const block_q8_K *x, const struct iq_prep *u) {
    const int8_t *y = x->qs;
    (void)b; /* everything it needs is in u */
    const __m256i ls = _mm256_loadu_si256((const __m256i *)u->lsp);
    /* delta byte k of 4 spread over the 8 bytes of group k */
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                            3, 3, 3, 3);
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int ib = 0; ib < 8; ib++) {
        int32_t d4;
        memcpy(&d4, u->delta + 4 * ib, 4);
        const __m256i delta = _mm256_shuffle_epi8(_mm256_set1_epi32(d4), spread);
        acc = _mm256_add_epi32(acc, iq1_m_dot32(iq1_grid4(u->idx + 4 * ib), delta, y + 32 * ib, iq_scales2(u->lsp + ib)));
    }
    const __m256i ls9 = _mm256_add_epi16(_mm256_slli_epi16(ls, 3), ls);
    return iq_hsum_i32(_mm256_sub_epi32(acc, _mm256_madd_epi16(ls9, _mm256_loadu_si256((const __m256i *)x->bsums))));
}

/* Ternary: digits 0..2 (value + 1), Σ (q - 1) y = Σ q y - Σ y with Σ y from the Q8_K block's bsums. The digit
 * products go through maddubs into int16 lanes (a pair <= 2 * 3 * 127; TQ1_0's lanes add 10 of them, TQ2_0's 8)
 * and the bsums are taken from those lanes before the one widening madd: only the block's total matters. */
MMV_IQ_AVX2 static inline int32_t tq_total(__m256i s16, const block_q8_K *x) {
    const __m256i d = _mm256_sub_epi16(s16, _mm256_loadu_si256((const __m256i *)x->bsums));
    return iq_hsum_i32(_mm256_madd_epi16(d, _mm256_set1_epi16(1)));
}

/* TQ1_0's digits without a multiply. ggml's digit n of byte q is (m * 3) >> 8 with m = q 3^n mod 256, so m steps by
 * m <- 3 m mod 256 (two byte adds), and so does b = m ^ 0x80 (3 m + 128 = 3 b mod 256), whose signed compares give
 * (m * 3) >> 8 = [m >= 86] + [m >= 171] as 0, -1 or -2 in each byte. tq1_step returns b's next value, tq1_digits
 * the digits (0..2) of b. */
MMV_IQ_AVX2 static inline __m256i tq1_step(__m256i b) { return _mm256_add_epi8(b, _mm256_add_epi8(b, b)); }

MMV_IQ_AVX2 static inline __m256i tq1_digits(__m256i b) {
    const __m256i c1 = _mm256_cmpgt_epi8(b, _mm256_set1_epi8(85 - 128)), c2 = _mm256_cmpgt_epi8(b, _mm256_set1_epi8(42));
    return _mm256_abs_epi8(_mm256_add_epi8(c1, c2));
}

MMV_IQ_AVX2 static int32_t iq_sum_tq1_0(const block_tq1_0 *b, const block_q8_K *x) {
    const int8_t *y = x->qs;
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    __m256i s16 = _mm256_setzero_si256();
    /* bytes 0..31: digit n is value 32 n + j */
    __m256i m = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs), bias);
#pragma GCC unroll 5
    for (int n = 0; n < 5; n++) {
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(tq1_digits(m), _mm256_loadu_si256((const __m256i *)(y + 32 * n))));
        m = tq1_step(m);
    }
    /* bytes 32..47: digit n is value 160 + 16 n + j, so digits n (low half) and n + 1 (high half) meet the 32 values
     * from 160 + 16 n, and the pair moves on by two steps */
    const __m128i t = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(b->qs + 32)), _mm256_castsi256_si128(bias));
    __m256i tt = _mm256_set_m128i(_mm256_castsi256_si128(tq1_step(_mm256_castsi128_si256(t))), t);
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(tq1_digits(tt), _mm256_loadu_si256((const __m256i *)(y + 160))));
    tt = tq1_step(tq1_step(tt));
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(tq1_digits(tt), _mm256_loadu_si256((const __m256i *)(y + 192))));
    tt = tq1_step(tq1_step(tt));
    /* the last 32 values: digit 4 of bytes 32..47 (224..239) and qh's (240..255: lane j is digit j / 4 of
     * qh[j % 4], so dword k of qh's 4 bytes repeated is stepped k times) */
    int32_t qh;
    memcpy(&qh, b->qh, 4);
    const __m256i h0 = _mm256_xor_si256(_mm256_set1_epi32(qh), bias), h1 = tq1_step(h0), h2 = tq1_step(h1), h3 = tq1_step(h2);
    const __m256i h = _mm256_blend_epi32(_mm256_blend_epi32(h0, h1, 0x22), _mm256_blend_epi32(h2, h3, 0x88), 0xCC);
    tt = _mm256_blend_epi32(tt, _mm256_permute2x128_si256(h, h, 0x00), 0xF0);
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(tq1_digits(tt), _mm256_loadu_si256((const __m256i *)(y + 224))));
    return tq_total(s16, x);
}

MMV_IQ_AVX2 static int32_t iq_sum_tq2_0(const block_tq2_0 *b, const block_q8_K *x) {
    __m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * j));
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) {
            const __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), _mm256_set1_epi8(3));
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(x->qs + 128 * j + 32 * l))));
        }
    }
    return tq_total(s16, x);
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
IQ_DOT_AVX2(iq3_xxs, _cvtsh_ss(a[i].d) * 0.25f)
#define IQ_PREP_DOT_AVX2(t, factor)                                                                          \
    MMV_IQ_AVX2 float cpu_dot_##t##_avx2(int64_t n, const void *w, const void *x) {                          \
        enum { CHUNK = 8 };                                                                                  \
        const block_q8_K *b = x;                                                                             \
        const block_##t *a = w;                                                                              \
        struct iq_prep u[CHUNK];                                                                             \
        float s = 0;                                                                                         \
        for (int64_t i0 = 0; i0 < n / QK_K; i0 += CHUNK) {                                                   \
            const int64_t c = n / QK_K - i0 < CHUNK ? n / QK_K - i0 : CHUNK;                                 \
            for (int64_t k = 0; k < c; k++) t##_prep(&a[i0 + k], &u[k]);                                     \
            /* u is read back by plain loads (gcc may otherwise pull the indices out of its vectors) */       \
            __asm__ volatile("" ::: "memory");                                                               \
            for (int64_t k = 0; k < c; k++) {                                                                \
                const int64_t i = i0 + k;                                                                    \
                s += ((factor) * b[i].d) * (float)iq_sum_##t(&a[i], &b[i], &u[k]);                           \
            }                                                                                                \
        }                                                                                                    \
        return s;                                                                                            \
    }
IQ_PREP_DOT_AVX2(iq2_xs, _cvtsh_ss(a[i].d) * 0.125f)
IQ_PREP_DOT_AVX2(iq2_s, _cvtsh_ss(a[i].d) * 0.125f)
IQ_PREP_DOT_AVX2(iq3_s, _cvtsh_ss(a[i].d))
IQ_PREP_DOT_AVX2(iq1_s, _cvtsh_ss(a[i].d) * 0.125f)
IQ_PREP_DOT_AVX2(iq1_m, _cvtsh_ss(blocks_iq1_m_half(&a[i])) * 0.125f)
#undef IQ_PREP_DOT_AVX2
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
