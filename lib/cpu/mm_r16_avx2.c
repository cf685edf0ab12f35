/* mm_r16_avx2: the products of mm_r16.c's strips (the same layout, repacked at load) on CPUs with AVX2 but no
 * AVX-512 VNNI: Q4_K, Q5_K, IQ4_XS, Q4_0, Q4_1, IQ4_NL and MXFP4 (cpu_r16_avx2_has says why not the others).
 *
 * Why: on an AVX2 CPU (Zen 2 / Zen 3, Intel before Ice Lake) the row dots of mmv.c spend their time on horizontal
 * sums and per-row scales, as they did on AVX-512 before the strips. Here a 64-byte strip vector is two halves of
 * 8 rows each (lane r of half h: row 8h + r); each half is swept with the rows in the 8 int32 lanes, one token at a
 * time in decode (8 independent sums fill AVX2's 16 registers), and for batches up to 4 tokens a sweep (each
 * vector unpacked once for all of them, one sub-block or block at a time); every step after the integer sums is
 * lane-wise.
 *
 * Integer dots: vpmaddubsw (unsigned x signed bytes, int16 pair sums) then vpmaddwd by 1. Its pair sums saturate
 * past 32767, so only small codes go in unsigned (Q4_K / Q5_K's, Q4_0 / Q4_1's); the codebook types, whose AVX-512
 * kernels multiply a code + 128 (IQ4_NL, MXFP4, IQ4_XS), multiply the signed value instead (|w| · sign(x, w): at
 * most 2 · 128 · 127; activations are in [-127, 127]), which is exactly the AVX-512 kernels' sum minus their offset
 * term, so that term is not subtracted here.
 *
 * Math: per (row, token) the exact integers and the f32 block steps of mm_r16.c's AVX-512 kernels and of the scalar
 * dots, in the same order, so the same bits (test-ops compares every type's AVX2 strips with the AVX-512 ones and the
 * file's layout). Batches of any size sweep the strips (the strip's block from cache after the first sweep); AVX2
 * has no strip GEMM.
 */
#include <stddef.h>
#include <string.h>

#include "mm_q32.h"
#include "mm_r16.h"
#include "quant.h"

/* Where the strips beat AVX2's dots of the file's layout (one Zen 4 core capped at AVX2, a 151936 x 1024 matrix from
 * DRAM, bench-repack): Q4_K 1.15x, Q5_K 1.15x, IQ4_XS 1.53x, Q4_0 1.06x, Q4_1 1.11x, IQ4_NL 1.07x, MXFP4 1.12x. Not
 * Q6_K (0.76x), Q8_0 (0.84-0.90x), Q5_0 / Q5_1 (0.95-0.97x), Q2_K, Q3_K: those stay as stored on AVX2. */
int cpu_r16_avx2_has(int32_t type) {
    switch (type) {
    case INFER_TYPE_Q4_K:
    case INFER_TYPE_Q5_K:
    case INFER_TYPE_IQ4_XS:
    case INFER_TYPE_Q4_0:
    case INFER_TYPE_Q4_1:
    case INFER_TYPE_IQ4_NL:
    case INFER_TYPE_MXFP4: return 1;
    default: return 0;
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "mm_strip.h"

#define A2 __attribute__((target("avx2,fma,f16c")))
#define A2_INLINE static inline __attribute__((always_inline))

enum { A2_ROWS = 8 };

/* half h of the strip vector holding dword d of a 256-value block's 16 rows */
A2 A2_INLINE __m256i a2_v(const char *b, int32_t type, int d, int h) {
    return _mm256_loadu_si256((const __m256i *)(b + 64 * cpu_r16_pos(type, d) + 32 * h));
}

/* acc + per lane the 4 products of unsigned codes w (at most 63: the int16 pair sums stay exact) and signed x */
A2 A2_INLINE __m256i a2_dp(__m256i acc, __m256i w, __m256i x) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
}

/* the same for signed values w (any int8), x in [-127, 127] */
A2 A2_INLINE __m256i a2_dp_signed(__m256i acc, __m256i w, __m256i x) {
    return a2_dp(acc, _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
}

/* the low f16 of each dword lane as f32 */
A2 A2_INLINE __m256 a2_ph(__m256i v) {
    const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, lo), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(p));
}

/* int32 lanes of byte k of each dword */
A2 A2_INLINE __m256i a2_byte(__m256i v, int k) {
    return _mm256_and_si256(_mm256_srli_epi32(v, 8 * k), _mm256_set1_epi32(0xff));
}

/* a pshufb control: the dword pattern `base` (byte indices 0..3, 0x80 for zero) for every dword of a 128-bit lane */
A2 A2_INLINE __m256i a2_pick(uint32_t base) {
    const int q = 0x04040404;
    return _mm256_add_epi32(_mm256_set1_epi32((int)base), _mm256_set_epi32(3 * q, 2 * q, q, 0, 3 * q, 2 * q, q, 0));
}

/* Q4_K / Q5_K's f32 block step: acc + (d·dy)·sumi - (dmin·dy)·summ, dd = d | dmin << 16 */
A2 A2_INLINE __m256 a2_step_k4(__m256 acc, __m256i dd, float dy, __m256i sumi, __m256i summ) {
    const __m256 d = a2_ph(dd), dmin = a2_ph(_mm256_srli_epi32(dd, 16)), vy = _mm256_set1_ps(dy);
    return _mm256_add_ps(acc, _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, vy), _mm256_cvtepi32_ps(sumi)),
                                            _mm256_mul_ps(_mm256_mul_ps(dmin, vy), _mm256_cvtepi32_ps(summ))));
}

/* IQ4_XS: acc + (d·dy)·sumi, d the low f16 of each lane of dd (sumi of signed values: no offset to take back) */
A2 A2_INLINE __m256 a2_step(__m256 acc, __m256i dd, float dy, __m256i sumi) {
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(a2_ph(dd), _mm256_set1_ps(dy)), _mm256_cvtepi32_ps(sumi)));
}

/* The header of a Q4_K / Q5_K strip block for rows 8h..8h+7: the 8 sub-block scales and mins as bytes of two dwords
 * each (mmv_k_unpack in lanes) */
A2 A2_INLINE void a2_k4_head(const char *b, int32_t type, int h, __m256i sc[2], __m256i mn[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), c3f = _mm256_set1_epi8(0x3f), c03 = _mm256_set1_epi8(3);
    const __m256i u0 = a2_v(b, type, 1, h), u1 = a2_v(b, type, 2, h), u2 = a2_v(b, type, 3, h);
    sc[0] = _mm256_and_si256(u0, c3f);
    sc[1] = _mm256_or_si256(_mm256_and_si256(u2, m4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), c03), 4));
    mn[0] = _mm256_and_si256(u1, c3f);
    mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), c03), 4));
}

/* Σ_j m_j · (token y's sum over sub-block j) per lane, mn as a2_k4_head gives them */
A2 A2_INLINE __m256i a2_k4_mins(const __m256i mn[2], const block_q8_K *y) {
    const __m256i pick[2] = {a2_pick(0x80018000u), a2_pick(0x80038002u)};
    const __m256i s16 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), _mm256_set1_epi16(1));
    const __m128i pr = _mm_packs_epi32(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
    int32_t bs[4];
    _mm_storeu_si128((__m128i *)bs, pr);
    __m256i c = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++)
        c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_shuffle_epi8(mn[k / 2], pick[k % 2]), _mm256_set1_epi32(bs[k])));
    return c;
}

/* Q4_K (q5 0) / Q5_K (q5 1), rows 8h..8h+7 of the strip, one token (its Q8_K row x): mm_r16.c's r16_tile_k4 on 8
 * lanes, the high nibbles shifted down (vpmaddubsw takes codes up to 63). */
A2 A2_INLINE __m256 a2_tile_k4(const char *strip, int64_t nb, const char *x, int q5, int h) {
    const int32_t type = q5 ? INFER_TYPE_Q5_K : INFER_TYPE_Q4_K;
    const size_t bstride = cpu_r16_bytes(type, QK_K, CPU_R16_ROWS);
    const int qs0 = q5 ? 12 : 4;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1), zero = _mm256_setzero_si256();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *y = (const block_q8_K *)x + i;
        const char *b = strip + i * (int64_t)bstride;
        const __m256i dd = a2_v(b, type, 0, h);
        __m256i sc[2], mn[2];
        a2_k4_head(b, type, h, sc, mn);
        __m256i slo[4], shi[4];
        for (int p = 0; p < 4; p++) slo[p] = shi[p] = zero;
        for (int u = 0; u < 8; u++) { /* the strip's order: qh u (Q5_K), then qs 8p + u for p = 0..3 */
            const __m256i qh = q5 ? a2_v(b, type, 4 + u, h) : zero;
            for (int p = 0; p < 4; p++) {
                const __m256i v = a2_v(b, type, qs0 + 8 * p + u, h);
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi32(v, 4), m4);
                if (q5) {
                    const __m256i hb = _mm256_srli_epi32(qh, 2 * p);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(hb, one), 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 1), one), 4));
                }
                const __m256i xl = mm_strip_x4_256(y->qs + 4 * (16 * p + u)), xh = mm_strip_x4_256(y->qs + 4 * (16 * p + 8 + u));
                if (q5) {
                    slo[p] = a2_dp(slo[p], lo, xl);
                    shi[p] = a2_dp(shi[p], hi, xh);
                } else { /* Q4_K: the 8 pair sums of at most 2 · 15 · 127 added in int16, exact; widened below */
                    slo[p] = _mm256_add_epi16(slo[p], _mm256_maddubs_epi16(lo, xl));
                    shi[p] = _mm256_add_epi16(shi[p], _mm256_maddubs_epi16(hi, xh));
                }
            }
        }
        for (int p = 0; !q5 && p < 4; p++) {
            slo[p] = _mm256_madd_epi16(slo[p], _mm256_set1_epi16(1));
            shi[p] = _mm256_madd_epi16(shi[p], _mm256_set1_epi16(1));
        }
        __m256i sumi = zero;
        for (int p = 0; p < 4; p++) {
            const __m256i s0 = a2_byte(sc[p / 2], 2 * (p % 2)), s1 = a2_byte(sc[p / 2], 2 * (p % 2) + 1);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_mullo_epi32(slo[p], s0), _mm256_mullo_epi32(shi[p], s1)));
        }
        acc = a2_step_k4(acc, dd, y->d, sumi, a2_k4_mins(mn, y));
    }
    return acc;
}

/* IQ4_XS, rows 8h..8h+7, one token: r16_tile_iq4 on 8 lanes, the codebook's signed values (no offset to undo). */
A2 A2_INLINE __m256 a2_tile_iq4(const char *strip, int64_t nb, const char *x, int h) {
    const int32_t type = INFER_TYPE_IQ4_XS;
    const size_t bstride = cpu_r16_bytes(type, QK_K, CPU_R16_ROWS);
    const __m256i m4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)blocks_kvalues_iq4nl));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *y = (const block_q8_K *)x + i;
        const char *b = strip + i * (int64_t)bstride;
        const __m256i dh = a2_v(b, type, 0, h), sl = a2_v(b, type, 1, h);
        __m256i sumi = zero;
        for (int j0 = 0; j0 < 8; j0 += 4) {
            __m256i slo[4], shi[4];
            for (int e = 0; e < 4; e++) slo[e] = shi[e] = zero;
            for (int u = 0; u < 4; u++)
                for (int e = 0; e < 4; e++) {
                    const int j = j0 + e;
                    const __m256i v = a2_v(b, type, 2 + 4 * j + u, h);
                    const __m256i lo = _mm256_shuffle_epi8(kv, _mm256_and_si256(v, m4));
                    const __m256i hi = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi32(v, 4), m4));
                    slo[e] = a2_dp_signed(slo[e], lo, mm_strip_x4_256(y->qs + 4 * (8 * j + u)));
                    shi[e] = a2_dp_signed(shi[e], hi, mm_strip_x4_256(y->qs + 4 * (8 * j + 4 + u)));
                }
            for (int e = 0; e < 4; e++) {
                const int j = j0 + e;
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0xF));
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(dh, 16 + 2 * j), _mm256_set1_epi32(3));
                const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
                sumi = _mm256_add_epi32(sumi, _mm256_mullo_epi32(_mm256_add_epi32(slo[e], shi[e]), ls));
            }
        }
        acc = a2_step(acc, dh, y->d, sumi);
    }
    return acc;
}

/* block e's scales of a 32-value unit for rows 8h..8h+7: d (MXFP4: 2^(e-128) of its exponent) and Q4_1 / Q5_1's m */
A2 A2_INLINE void a2_q32_scales(int32_t type, const char *unit, int e, int h, __m256 *d, __m256 *m) {
    if (cpu_r16_q32_min(type)) {
        const __m256i dm = _mm256_loadu_si256((const __m256i *)(unit + 64 * e + 32 * h));
        *d = a2_ph(dm);
        *m = a2_ph(_mm256_srli_epi32(dm, 16));
        return;
    }
    const __m128i h16 = _mm_loadu_si128((const __m128i *)(unit + 32 * e + 16 * h));
    *m = _mm256_setzero_ps();
    if (type != INFER_TYPE_MXFP4) {
        *d = _mm256_cvtph_ps(h16);
        return;
    }
    /* exponent bits e - 1, or for e = 0, 1 the subnormals 2^-128, 2^-127 (mm_strip_q32_scales) */
    const __m256i xe = _mm256_cvtepu16_epi32(h16);
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(xe, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), xe);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), xe);
    *d = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

/* A 32-value block's f32 step (mmv.c's block term): acc + sumi·(d·dy) (the codebook types' sums already lack the
 * offset, the others take the table's c back) or acc + (d·dy)·sumi + m·s for Q4_1 */
A2 A2_INLINE __m256 a2_q32_step(__m256 acc, __m256 d, __m256 m, const struct mm_q32_act *ya, __m256i sumi, int mins,
                                int book) {
    const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(ya->d));
    if (mins)
        return _mm256_add_ps(acc, _mm256_add_ps(_mm256_mul_ps(dd, _mm256_cvtepi32_ps(sumi)),
                                                _mm256_mul_ps(m, _mm256_set1_ps(ya->s))));
    const __m256i si = book ? sumi : _mm256_sub_epi32(sumi, _mm256_set1_epi32(ya->c));
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(si), dd));
}

/* Q4_0, Q4_1, IQ4_NL or MXFP4, rows 8h..8h+7, one token (its activation row x and block table act): r16_tile_q32 on
 * 8 lanes. IQ4_NL and MXFP4 multiply their codebooks' signed values (their sums lack the + 128 · Σx the table's c would
 * take back). */
A2 A2_INLINE __m256 a2_tile_q32(int32_t type, const char *strip, int64_t nb32, const char *x,
                                const struct mm_q32_act *act, int h) {
    const int mins = cpu_r16_q32_min(type), qs0 = cpu_r16_q32_qs(type);
    const int book = type == INFER_TYPE_IQ4_NL || type == INFER_TYPE_MXFP4; /* signed values through a codebook */
    const size_t unit = 64 * (size_t)cpu_r16_q32_vectors(type);
    const size_t xbs = mins ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t xqs = mins ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
    const __m256i zero = _mm256_setzero_si256(), m4 = _mm256_set1_epi8(0x0F);
    const int8_t *values = type == INFER_TYPE_MXFP4 ? blocks_kvalues_mxfp4 : blocks_kvalues_iq4nl;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)values));
    __m256 acc = _mm256_setzero_ps();
    /* the block's 8 vpmaddubsw pair sums add up in int16 where they stay exact: Q4_0 / Q4_1 codes (at most
     * 8 · 2 · 15 · 127) and MXFP4's values (|w| <= 12); IQ4_NL's (|w| up to 127) are widened one by one */
    const int s16 = type != INFER_TYPE_IQ4_NL;
    for (int64_t i = 0; i < nb32; i += 2) {
        const char *b = strip + (i / 2) * (int64_t)unit;
        for (int e = 0; e < 2; e++) {
            const char *y = x + (i + e) * (int64_t)xbs + xqs;
            __m256i s[4] = {zero, zero, zero, zero};
            for (int u = 0; u < 4; u++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(b + 64 * (qs0 + 2 * u + e) + 32 * h));
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi32(w, 4), m4);
                __m256i xl = mm_strip_x4_256(y + 4 * u), xh = mm_strip_x4_256(y + 16 + 4 * u);
                if (book) { /* |w| times sign(x, w) */
                    lo = _mm256_shuffle_epi8(kv, lo);
                    hi = _mm256_shuffle_epi8(kv, hi);
                    xl = _mm256_sign_epi8(xl, lo), xh = _mm256_sign_epi8(xh, hi);
                    lo = _mm256_abs_epi8(lo), hi = _mm256_abs_epi8(hi);
                }
                if (s16) {
                    s[u % 2] = _mm256_add_epi16(s[u % 2], _mm256_maddubs_epi16(lo, xl));
                    s[2 + u % 2] = _mm256_add_epi16(s[2 + u % 2], _mm256_maddubs_epi16(hi, xh));
                } else {
                    s[u % 2] = a2_dp(s[u % 2], lo, xl);
                    s[2 + u % 2] = a2_dp(s[2 + u % 2], hi, xh);
                }
            }
            const __m256i sumi = s16 ? _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(s[0], s[1]),
                                                                         _mm256_add_epi16(s[2], s[3])),
                                                        _mm256_set1_epi16(1))
                                     : _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3]));
            __m256 d, m;
            a2_q32_scales(type, b, e, h, &d, &m);
            acc = a2_q32_step(acc, d, m, &act[i + e], sumi, mins, book);
        }
    }
    return acc;
}

enum { A2_TOK = 4 };

/* Q4_K / Q5_K for NT (2..4) tokens at once (prefill, verification): each weight vector unpacked once for all of them;
 * per sub-block pair p and token the vpmaddubsw pair sums added in int16 (Q4_K: 8 of at most 2·15·127, Q5_K: 4 of
 * at most 2·31·127, both below 32768: exact), widened once. The same integers and f32 steps as a2_tile_k4. */
A2 A2_INLINE void a2_tile_k4_n(const char *strip, int64_t nb, const char *x, size_t x_row, int q5, int h, int nt,
                               __m256 acc[A2_TOK]) {
    const int32_t type = q5 ? INFER_TYPE_Q5_K : INFER_TYPE_Q4_K;
    const size_t bstride = cpu_r16_bytes(type, QK_K, CPU_R16_ROWS);
    const int qs0 = q5 ? 12 : 4, run = q5 ? 4 : 8; /* int16 sums per widening */
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const __m256i zero = _mm256_setzero_si256();
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const char *b = strip + i * (int64_t)bstride;
        const block_q8_K *y[A2_TOK];
        for (int t = 0; t < nt; t++) y[t] = (const block_q8_K *)(x + t * x_row) + i;
        __m256i sc[2], mn[2];
        a2_k4_head(b, type, h, sc, mn);
        __m256i sumi[A2_TOK];
        for (int t = 0; t < nt; t++) sumi[t] = zero;
        for (int p = 0; p < 4; p++) {
            const __m256i s0 = a2_byte(sc[p / 2], 2 * (p % 2)), s1 = a2_byte(sc[p / 2], 2 * (p % 2) + 1);
            __m256i lo16[A2_TOK], hi16[A2_TOK];
            for (int t = 0; t < nt; t++) lo16[t] = hi16[t] = zero;
            for (int u = 0; u < 8; u++) {
                const __m256i v = a2_v(b, type, qs0 + 8 * p + u, h);
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi32(v, 4), m4);
                if (q5) {
                    const __m256i hb = _mm256_srli_epi32(a2_v(b, type, 4 + u, h), 2 * p);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(hb, one), 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 1), one), 4));
                }
                for (int t = 0; t < nt; t++) {
                    lo16[t] = _mm256_add_epi16(lo16[t], _mm256_maddubs_epi16(lo, mm_strip_x4_256(y[t]->qs + 4 * (16 * p + u))));
                    hi16[t] = _mm256_add_epi16(hi16[t], _mm256_maddubs_epi16(hi, mm_strip_x4_256(y[t]->qs + 4 * (16 * p + 8 + u))));
                }
                if ((u + 1) % run) continue;
                for (int t = 0; t < nt; t++) { /* widened and scaled: s·(a + b) = s·a + s·b, exact in int32 */
                    const __m256i l = _mm256_mullo_epi32(_mm256_madd_epi16(lo16[t], ones16), s0);
                    const __m256i g = _mm256_mullo_epi32(_mm256_madd_epi16(hi16[t], ones16), s1);
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(l, g));
                    lo16[t] = hi16[t] = zero;
                }
            }
        }
        const __m256i dd = a2_v(b, type, 0, h);
        for (int t = 0; t < nt; t++) acc[t] = a2_step_k4(acc[t], dd, y[t]->d, sumi[t], a2_k4_mins(mn, y[t]));
    }
}

/* IQ4_XS for NT (2..4) tokens at once: each vector's codebook values unpacked once for all of them, one sub-block at
 * a time (its low and high nibbles share its scale: one sum per token). The same integers and f32 steps as
 * a2_tile_iq4. */
A2 A2_INLINE void a2_tile_iq4_n(const char *strip, int64_t nb, const char *x, size_t x_row, int h, int nt,
                                __m256 acc[A2_TOK]) {
    const int32_t type = INFER_TYPE_IQ4_XS;
    const size_t bstride = cpu_r16_bytes(type, QK_K, CPU_R16_ROWS);
    const __m256i m4 = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)blocks_kvalues_iq4nl));
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const char *b = strip + i * (int64_t)bstride;
        const block_q8_K *y[A2_TOK];
        for (int t = 0; t < nt; t++) y[t] = (const block_q8_K *)(x + t * x_row) + i;
        const __m256i dh = a2_v(b, type, 0, h), sl = a2_v(b, type, 1, h);
        __m256i sumi[A2_TOK];
        for (int t = 0; t < nt; t++) sumi[t] = zero;
        for (int j = 0; j < 8; j++) {
            __m256i sj[A2_TOK];
            for (int t = 0; t < nt; t++) sj[t] = zero;
            for (int u = 0; u < 4; u++) {
                const __m256i v = a2_v(b, type, 2 + 4 * j + u, h);
                const __m256i lo = _mm256_shuffle_epi8(kv, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi32(v, 4), m4));
                for (int t = 0; t < nt; t++) {
                    sj[t] = a2_dp_signed(sj[t], lo, mm_strip_x4_256(y[t]->qs + 4 * (8 * j + u)));
                    sj[t] = a2_dp_signed(sj[t], hi, mm_strip_x4_256(y[t]->qs + 4 * (8 * j + 4 + u)));
                }
            }
            const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0xF));
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(dh, 16 + 2 * j), _mm256_set1_epi32(3));
            const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
            for (int t = 0; t < nt; t++) sumi[t] = _mm256_add_epi32(sumi[t], _mm256_mullo_epi32(sj[t], ls));
        }
        for (int t = 0; t < nt; t++) acc[t] = a2_step(acc[t], dh, y[t]->d, sumi[t]);
    }
}

/* Q4_0, Q4_1, IQ4_NL or MXFP4 for NT (2..4) tokens at once (act: the first token's table, nb32 entries a token):
 * each vector unpacked once for all of them; a block's low and high halves share its scale, so one sum per token
 * (Q4_0 / Q4_1: the 8 vpmaddubsw pair sums of a block added in int16, at most 8 · 2 · 15 · 127: exact). The same
 * integers and f32 steps as a2_tile_q32. */
A2 A2_INLINE void a2_tile_q32_n(int32_t type, const char *strip, int64_t nb32, const char *x, size_t x_row,
                                const struct mm_q32_act *act, int h, int nt, __m256 acc[A2_TOK]) {
    const int mins = cpu_r16_q32_min(type), qs0 = cpu_r16_q32_qs(type);
    const int book = type == INFER_TYPE_IQ4_NL || type == INFER_TYPE_MXFP4;
    const size_t unit = 64 * (size_t)cpu_r16_q32_vectors(type);
    const size_t xbs = mins ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t xqs = mins ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
    const __m256i zero = _mm256_setzero_si256(), m4 = _mm256_set1_epi8(0x0F), ones16 = _mm256_set1_epi16(1);
    const int8_t *values = type == INFER_TYPE_MXFP4 ? blocks_kvalues_mxfp4 : blocks_kvalues_iq4nl;
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)values));
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb32; i += 2) {
        const char *b = strip + (i / 2) * (int64_t)unit;
        for (int e = 0; e < 2; e++) {
            const char *y[A2_TOK];
            for (int t = 0; t < nt; t++) y[t] = x + t * x_row + (i + e) * (int64_t)xbs + xqs;
            __m256i s[A2_TOK];
            for (int t = 0; t < nt; t++) s[t] = zero;
            for (int u = 0; u < 4; u++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(b + 64 * (qs0 + 2 * u + e) + 32 * h));
                __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi32(w, 4), m4);
                if (book) {
                    lo = _mm256_shuffle_epi8(kv, lo);
                    hi = _mm256_shuffle_epi8(kv, hi);
                    for (int t = 0; t < nt; t++) {
                        s[t] = a2_dp_signed(s[t], lo, mm_strip_x4_256(y[t] + 4 * u));
                        s[t] = a2_dp_signed(s[t], hi, mm_strip_x4_256(y[t] + 16 + 4 * u));
                    }
                    continue;
                }
                for (int t = 0; t < nt; t++) { /* int16 pair sums, widened after the block */
                    s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(lo, mm_strip_x4_256(y[t] + 4 * u)));
                    s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(hi, mm_strip_x4_256(y[t] + 16 + 4 * u)));
                }
            }
            __m256 d, m;
            a2_q32_scales(type, b, e, h, &d, &m);
            for (int t = 0; t < nt; t++) {
                const __m256i sumi = book ? s[t] : _mm256_madd_epi16(s[t], ones16);
                acc[t] = a2_q32_step(acc[t], d, m, &act[t * nb32 + i + e], sumi, mins, book);
            }
        }
    }
}

#define A2_MULTI_CASE(n)                                                                                           \
    case n:                                                                                                        \
        if (type == INFER_TYPE_IQ4_XS) a2_tile_iq4_n(strip, nb, x, x_row, h, n, acc);                              \
        else if (type == INFER_TYPE_Q4_K || type == INFER_TYPE_Q5_K)                                               \
            a2_tile_k4_n(strip, nb, x, x_row, type == INFER_TYPE_Q5_K, h, n, acc);                                 \
        else a2_tile_q32_n(type, strip, nb, x, x_row, act, h, n, acc);                                             \
        break;

/* 2..4 tokens, rows 8h..8h+7 */
A2 static void a2_tile_multi(int32_t type, const char *strip, int64_t nb, const char *x, size_t x_row,
                             const struct mm_q32_act *act, int h, int nt, __m256 acc[A2_TOK]) {
    switch (nt) {
        A2_MULTI_CASE(2)
        A2_MULTI_CASE(3)
        A2_MULTI_CASE(4)
    default:
        break;
    }
}

A2 static __m256 a2_tile(int32_t type, const char *strip, int64_t nb, const char *x, const struct mm_q32_act *act,
                         int h) {
    switch (type) {
    case INFER_TYPE_Q4_K: return a2_tile_k4(strip, nb, x, 0, h);
    case INFER_TYPE_Q5_K: return a2_tile_k4(strip, nb, x, 1, h);
    case INFER_TYPE_IQ4_XS: return a2_tile_iq4(strip, nb, x, h);
    default: return a2_tile_q32(type, strip, nb, x, act, h);
    }
}

A2 void cpu_r16_tile_avx2(int32_t type, const char *strip, int64_t nb, const char *x, size_t x_row,
                          const struct mm_q32_act *act, int nt, float out[][CPU_R16_ROWS]) {
    int t = 0;
    while (nt - t >= 2) { /* 2..4 tokens a sweep */
        const int n = nt - t < A2_TOK ? nt - t : A2_TOK;
        for (int h = 0; h < 2; h++) {
            __m256 acc[A2_TOK];
            a2_tile_multi(type, strip, nb, x + t * x_row, x_row, act ? act + t * nb : NULL, h, n, acc);
            for (int k = 0; k < n; k++) _mm256_storeu_ps(out[t + k] + A2_ROWS * h, acc[k]);
        }
        t += n;
    }
    for (; t < nt; t++)
        for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(out[t] + A2_ROWS * h, a2_tile(type, strip, nb, x + t * x_row, act ? act + t * nb : NULL, h));
}

#else /* not x86-64: nothing is repacked */
void cpu_r16_tile_avx2(int32_t type, const char *strip, int64_t nb, const char *x, size_t x_row,
                       const struct mm_q32_act *act, int nt, float out[][CPU_R16_ROWS]) {
    (void)type, (void)strip, (void)nb, (void)x, (void)x_row, (void)act, (void)nt, (void)out;
}
#endif
