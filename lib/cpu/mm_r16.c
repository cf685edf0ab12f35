/* mm_r16: matrices repacked once at load into strips of 16 rows (the 32-value types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL, MXFP4, and Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS), and the AVX-512 VNNI matrix x 1..8 tokens that reads
 * them (decode, speculative verification).
 *
 * Why: the row-by-row dots of mmv.c spend most of their instructions on horizontal sums and per-row scale
 * handling; one core did about 0.8x of llama.cpp's repacked decode. With 16 rows interleaved, vpdpbusd of one
 * 64-byte load against a token's 4 activation bytes broadcast gives the 16 rows' partial sums in the 16 int32
 * lanes, and every later step (sub-block scales, mins, the f32 block step) is one lane-wise vector op for 16 rows.
 *
 * Layout: strip s holds rows 16s..16s+15 (zero rows past n_out); per unit (a 256-value block; the 32-value types:
 * two blocks) some vectors of 64 bytes, lane r (4 bytes) belonging to row 16s+r. For the 256-value types vector
 * cpu_r16_pos(d) holds dword d of each row's block, so a gather of dword d of 16 rows (mm_kq.c's packers) becomes
 * one load; a 32-value unit is its header (the d's, Q4_1 / Q5_1's d | m), Q5's qh, then the qs dwords (Q8_0's + 128:
 * mm_r16.h). The vectors go in the order the kernels read them: a strip streams front to back (read out of order, a
 * block streamed at half the speed on Zen 4; Q3_K's hmask interleaved with its qs: 9.0 -> 14.7 GB/s). The repacked
 * matrix is the file's size (Q3_K's and Q6_K's blocks: 2 bytes more each, MXFP4's: 1), and a row comes back byte
 * for byte (cpu_r16_row).
 *
 * Math: per (row, token) the same exact integer sums and the same f32 block steps, in the same order, as the
 * scalar dots of mmv.c and the GEMMs of mm_kq.c / mm_q32.c / mm_iq.c, so a repacked matrix gives the file's results
 * bit for bit at any batch size (test-ops, test-repack check it). Batches of more than 8 tokens go to those GEMMs,
 * whose packers read strips. A CPU with AVX2 but not AVX-512 VNNI reads the same strips through mm_r16_avx2.c (every
 * batch size, the same bits).
 */
#include <stddef.h>
#include <string.h>

#include "mm_iq.h"
#include "mm_kq.h"
#include "mm_q32.h"
#include "mm_r16.h"
#include "quant.h"

/* dwords per block in the strip layout of the 256-value types; 0 for another type */
static int r16_block_dwords(int32_t type) {
    switch (type) {
    case INFER_TYPE_Q2_K: return (int)(sizeof(block_q2_K) / 4);
    case INFER_TYPE_Q3_K: return (int)((sizeof(block_q3_K) + 3) / 4);
    case INFER_TYPE_Q4_K: return (int)(sizeof(block_q4_K) / 4);
    case INFER_TYPE_Q5_K: return (int)(sizeof(block_q5_K) / 4);
    case INFER_TYPE_Q6_K: return (int)((sizeof(block_q6_K) + 3) / 4);
    case INFER_TYPE_IQ4_XS: return (int)(sizeof(block_iq4_xs) / 4);
    default: return 0;
    }
}

/* A strip's unit: one block of the 256-value types (r16_block_dwords vectors), or two blocks (64 values) of the
 * 32-value types (mm_r16.h's cpu_r16_q32_* layout; Q8_0's + 128 is taken back by the activation's block sum). */
static int r16_unit_values(int32_t type) { return cpu_r16_q32(type) ? 2 * QK8_0 : QK_K; }
static int r16_unit_vectors(int32_t type) {
    return cpu_r16_q32(type) ? cpu_r16_q32_vectors(type) : r16_block_dwords(type);
}

/* Where a 32-value type keeps its fields in a block: the header (d; d, m; MXFP4's exponent) and its size, qh, qs. */
struct r16_q32_fields {
    size_t bs, hdr, qh, qs;
};
static struct r16_q32_fields r16_q32_fields_of(int32_t type) {
    switch (type) {
    case INFER_TYPE_Q8_0: return (struct r16_q32_fields){.bs = sizeof(block_q8_0), .hdr = 2, .qs = offsetof(block_q8_0, qs)};
    case INFER_TYPE_Q4_0: return (struct r16_q32_fields){.bs = sizeof(block_q4_0), .hdr = 2, .qs = offsetof(block_q4_0, qs)};
    case INFER_TYPE_Q4_1: return (struct r16_q32_fields){.bs = sizeof(block_q4_1), .hdr = 4, .qs = offsetof(block_q4_1, qs)};
    case INFER_TYPE_Q5_0:
        return (struct r16_q32_fields){.bs = sizeof(block_q5_0), .hdr = 2, .qh = offsetof(block_q5_0, qh),
                                       .qs = offsetof(block_q5_0, qs)};
    case INFER_TYPE_Q5_1:
        return (struct r16_q32_fields){.bs = sizeof(block_q5_1), .hdr = 4, .qh = offsetof(block_q5_1, qh),
                                       .qs = offsetof(block_q5_1, qs)};
    case INFER_TYPE_IQ4_NL:
        return (struct r16_q32_fields){.bs = sizeof(block_iq4_nl), .hdr = 2, .qs = offsetof(block_iq4_nl, qs)};
    default: return (struct r16_q32_fields){.bs = sizeof(block_mxfp4), .hdr = 1, .qs = offsetof(block_mxfp4, qs)};
    }
}

/* The header's place for block e, lane r: 4 bytes in vector e (Q4_1 / Q5_1), else 2 bytes in vector 0. */
static size_t r16_q32_hdr_at(const struct r16_q32_fields *f, int e, int r) {
    return f->hdr == 4 ? (size_t)(64 * e + 4 * r) : (size_t)(32 * e + 2 * r);
}

/* Unit i (two blocks) of a 32-value type: vector by vector, each written whole (rows[r] NULL: zero lanes). */
static void r16_pack_q32(int32_t type, const char *const rows[CPU_R16_ROWS], char *unit, int64_t i) {
    const struct r16_q32_fields f = r16_q32_fields_of(type);
    const int qh0 = cpu_r16_q32_qh(type), qs0 = cpu_r16_q32_qs(type), flip = type == INFER_TYPE_Q8_0;
    memset(unit, 0, 64 * (size_t)qh0); /* MXFP4's exponents fill half of each 2-byte place */
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < CPU_R16_ROWS; r++)
            if (rows[r]) memcpy(unit + r16_q32_hdr_at(&f, e, r), rows[r] + (2 * i + e) * (int64_t)f.bs, f.hdr);
    for (int e = 0; cpu_r16_q32_q5(type) && e < 2; e++)
        for (int r = 0; r < CPU_R16_ROWS; r++) {
            uint32_t q = 0;
            if (rows[r]) memcpy(&q, rows[r] + (2 * i + e) * (int64_t)f.bs + f.qh, 4);
            memcpy(unit + 64 * (qh0 + e) + 4 * r, &q, 4);
        }
    for (int g = 0; g < cpu_r16_q32_dwords(type); g++)
        for (int e = 0; e < 2; e++)
            for (int r = 0; r < CPU_R16_ROWS; r++) {
                uint32_t q = 0;
                if (rows[r]) memcpy(&q, rows[r] + (2 * i + e) * (int64_t)f.bs + f.qs + 4 * g, 4);
                if (flip) q ^= 0x80808080u;
                memcpy(unit + 64 * (qs0 + 2 * g + e) + 4 * r, &q, 4);
            }
}

/* The inverse: lane r of the unit back into its two blocks (dst). */
static void r16_unpack_q32(int32_t type, const char *unit, char *dst, int r) {
    const struct r16_q32_fields f = r16_q32_fields_of(type);
    const int qh0 = cpu_r16_q32_qh(type), qs0 = cpu_r16_q32_qs(type);
    const uint32_t flip = type == INFER_TYPE_Q8_0 ? 0x80808080u : 0;
    for (int e = 0; e < 2; e++) {
        char *b = dst + e * (int64_t)f.bs;
        memcpy(b, unit + r16_q32_hdr_at(&f, e, r), f.hdr);
        if (cpu_r16_q32_q5(type)) memcpy(b + f.qh, unit + 64 * (qh0 + e) + 4 * r, 4);
        for (int g = 0; g < cpu_r16_q32_dwords(type); g++) {
            uint32_t q;
            memcpy(&q, unit + 64 * (qs0 + 2 * g + e) + 4 * r, 4);
            q ^= flip;
            memcpy(b + f.qs + 4 * g, &q, 4);
        }
    }
}

size_t cpu_r16_bytes(int32_t type, int64_t n_in, int64_t n_out) {
    const int v = r16_unit_vectors(type), uv = r16_unit_values(type);
    if (!v || n_in <= 0 || n_in % uv || n_out <= 0) return 0;
    const int64_t strips = (n_out + CPU_R16_ROWS - 1) / CPU_R16_ROWS;
    return (size_t)strips * (size_t)(n_in / uv) * (size_t)v * 64;
}

/* Unit i of a strip's 16 rows (rows[r]: row r in the file's layout, NULL past n_out: zero lanes), one vector after
 * the other so that every line is written whole. */
static void r16_pack_unit(int32_t type, const char *const rows[CPU_R16_ROWS], char *unit, int64_t i) {
    if (cpu_r16_q32(type)) {
        r16_pack_q32(type, rows, unit, i);
        return;
    }
    const int bb = (int)quant_row_bytes(type, QK_K);
    for (int o = 0; o < r16_block_dwords(type); o++) {
        const int whole = 4 * o + 4 <= bb; /* else Q6_K's last dword: 2 bytes and 2 of padding */
        char *v = unit + 64 * cpu_r16_pos(type, o);
        for (int r = 0; r < CPU_R16_ROWS; r++) {
            uint32_t w = 0;
            if (rows[r] && whole) memcpy(&w, rows[r] + i * bb + 4 * o, 4);
            else if (rows[r]) memcpy(&w, rows[r] + i * bb + 4 * o, 2);
            memcpy(v + 4 * r, &w, 4);
        }
    }
}

/* The inverse: lane r of a strip's unit back into the file's layout (dst). */
static void r16_unpack_unit(int32_t type, const char *unit, char *dst, int r) {
    if (cpu_r16_q32(type)) {
        r16_unpack_q32(type, unit, dst, r);
        return;
    }
    const size_t bb = quant_row_bytes(type, QK_K);
    uint8_t blk[64 * 4];
    for (int o = 0; o < r16_block_dwords(type); o++) memcpy(blk + 4 * o, unit + 64 * cpu_r16_pos(type, o) + 4 * r, 4);
    memcpy(dst, blk, bb);
}

void cpu_r16_pack(int32_t type, const void *src, int64_t n_in, int64_t n_out, void *dst) {
    const int64_t nu = n_in / r16_unit_values(type);
    const size_t row = quant_row_bytes(type, n_in), ub = (size_t)r16_unit_vectors(type) * 64;
    for (int64_t s = 0; s * CPU_R16_ROWS < n_out; s++) {
        const char *rows[CPU_R16_ROWS];
        for (int r = 0; r < CPU_R16_ROWS; r++)
            rows[r] = s * CPU_R16_ROWS + r < n_out ? (const char *)src + (s * CPU_R16_ROWS + r) * (int64_t)row : NULL;
        char *strip = (char *)dst + s * nu * (int64_t)ub;
        for (int64_t i = 0; i < nu; i++) r16_pack_unit(type, rows, strip + i * (int64_t)ub, i);
    }
}

void cpu_r16_row(int32_t type, const void *r16, int64_t n_in, int64_t row, void *dst) {
    const int64_t nu = n_in / r16_unit_values(type);
    const size_t ub = (size_t)r16_unit_vectors(type) * 64, rb = quant_row_bytes(type, r16_unit_values(type));
    const char *strip = (const char *)r16 + (row / CPU_R16_ROWS) * nu * (int64_t)ub;
    for (int64_t i = 0; i < nu; i++)
        r16_unpack_unit(type, strip + i * (int64_t)ub, (char *)dst + i * (int64_t)rb, (int)(row % CPU_R16_ROWS));
}

void cpu_r16_unit(int32_t type, const void *strip, int64_t i, int r, void *dst) {
    r16_unpack_unit(type, (const char *)strip + i * 64 * (int64_t)r16_unit_vectors(type), dst, r);
}

#if defined(__x86_64__)
#include <immintrin.h>

#include "mm_strip.h"

#define R16_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define R16_INLINE static inline __attribute__((always_inline))
/* tokens per sweep of a strip: 2 x 8 sums per token stay in registers; more tokens sweep the strip again (from cache) */
enum { R16_TOK = 2 };

int cpu_r16_takes(int32_t type, int64_t n_in) {
    if (!r16_unit_vectors(type) || n_in <= 0 || n_in % r16_unit_values(type)) return 0;
    return cpu_isa_has(CPU_ISA_AVX512) || (cpu_isa_has(CPU_ISA_AVX2) && cpu_r16_avx2_has(type));
}


/* dword d of a strip block's 16 rows (cpu_r16_pos: d's place in the order the kernels read) */
R16_AVX512 R16_INLINE __m512i r16_v(const char *b, int32_t type, int d) {
    return _mm512_loadu_si512((const void *)(b + 64 * cpu_r16_pos(type, d)));
}

/* 4 activation bytes (group g of a Q8_K block) in every lane */
R16_AVX512 R16_INLINE __m512i r16_x4(const block_q8_K *y, int g) { return mm_strip_x4(y->qs + 4 * g); }

/* Strip block i (nd vectors) and the nt tokens' Q8_K block i. */
R16_AVX512 R16_INLINE const char *r16_block(const char *strip, int nd, int64_t i, const char *x, size_t x_row, int nt,
                                            const block_q8_K *y[R16_TOK]) {
    for (int t = 0; t < nt; t++) y[t] = (const block_q8_K *)(x + t * x_row) + i;
    return strip + i * 64 * nd;
}

/* a pshufb control: the dword pattern `base` (byte indices 0..3, 0x80 for zero) for every dword of a 128-bit lane */
R16_AVX512 R16_INLINE __m512i r16_pick(uint32_t base) {
    const int q = 0x04040404;
    return _mm512_add_epi32(_mm512_set1_epi32((int)base), _mm512_set_epi32(3 * q, 2 * q, q, 0, 3 * q, 2 * q, q, 0, 3 * q,
                                                                            2 * q, q, 0, 3 * q, 2 * q, q, 0));
}

/* int32 lanes of byte k of each dword */
R16_AVX512 R16_INLINE __m512i r16_byte(__m512i v, int k) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * k), _mm512_set1_epi32(0xff));
}

/* The f32 block step of Q4_K / Q5_K (mmv.c's scalar order): acc += (d·dy)·sumi - (dmin·dy)·summ. dd: d | dmin << 16. */
R16_AVX512 R16_INLINE __m512 r16_step_k4(__m512 acc, __m512i dd, float dy, __m512i sumi, __m512i summ) {
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    const __m512 vy = _mm512_set1_ps(dy);
    return _mm512_add_ps(acc, _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(d, vy), _mm512_cvtepi32_ps(sumi)),
                                            _mm512_mul_ps(_mm512_mul_ps(dmin, vy), _mm512_cvtepi32_ps(summ))));
}

/* Q6_K / IQ4_XS: acc += (d·dy)·(sumi - off), d the low f16 of each lane of dd */
R16_AVX512 R16_INLINE __m512 r16_step_off(__m512 acc, __m512i dd, float dy, __m512i sumi, __m512i off) {
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(dy)),
                                            _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi, off))));
}

/* Σ_j m_j·(bsums[2j] + bsums[2j+1]) per lane: mp[k] holds the int16 pair (m_2k, m_2k+1) of each row, bs the
 * activation's 8 sub-block sums as int16 pairs (bs_2k, bs_2k+1) in dwords k. */
R16_AVX512 R16_INLINE __m512i r16_mins(const __m512i mp[4], const int32_t bs[4]) {
    __m512i c = _mm512_madd_epi16(mp[0], _mm512_set1_epi32(bs[0]));
    for (int k = 1; k < 4; k++) c = _mm512_add_epi32(c, _mm512_madd_epi16(mp[k], _mm512_set1_epi32(bs[k])));
    return c;
}

/* the 32-value sub-block sums of a Q8_K block as int16 pairs: bs[k] = (bsums[4k] + bsums[4k+1], bsums[4k+2] + bsums[4k+3]) */
R16_AVX512 R16_INLINE void r16_bs_pairs(const block_q8_K *y, int32_t bs[4]) {
    const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), _mm256_set1_epi16(1));
    const __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)); /* |sums| <= 32·127 */
    _mm_storeu_si128((__m128i *)bs, p);
}

/* Q4_K (q5 0) and Q5_K (q5 1): out[t][r] = dot of strip row r with token t, nt <= R16_TOK. Block dwords: 0 d | dmin,
 * 1..3 the packed scales and mins, Q5_K 4..11 qh, then qs (32 dwords): qs dword 8p+u = elements 64p+4u.. (low
 * nibbles, sub-block 2p) and 64p+32+4u.. (high, sub-block 2p+1). The four p at once: 8 independent sums per token,
 * as vpdpbusd's latency needs. */
R16_AVX512 R16_INLINE void r16_tile_k4(const char *strip, int64_t nb, const char *x, size_t x_row, int nt, int q5,
                                       float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    const int32_t type = q5 ? INFER_TYPE_Q5_K : INFER_TYPE_Q4_K;
    const int nd = r16_block_dwords(type), qs0 = q5 ? 12 : 4;
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i c3f = _mm512_set1_epi8(0x3f), c03 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    /* pshufb picking bytes (2k, 2k+1) of each dword as two int16 */
    const __m512i pick[2] = {r16_pick(0x80018000u), r16_pick(0x80038002u)};
    __m512 acc[R16_TOK];
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *y[R16_TOK];
        const char *b = r16_block(strip, nd, i, x, x_row, nt, y);
        /* mmv_k_unpack in lanes: bytes 0..3 of sc[0] are scales 0..3, of sc[1] scales 4..7; mn likewise */
        const __m512i dd = r16_v(b, type, 0), u0 = r16_v(b, type, 1), u1 = r16_v(b, type, 2), u2 = r16_v(b, type, 3);
        const __m512i sc[2] = {_mm512_and_si512(u0, c3f),
                               _mm512_or_si512(_mm512_and_si512(u2, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), c03), 4))};
        const __m512i mn[2] = {_mm512_and_si512(u1, c3f),
                               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4),
                                               _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), c03), 4))};
        __m512i slo[4][R16_TOK], shi[4][R16_TOK];
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
            slo[p][t] = shi[p][t] = zero;
        _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) {
            const __m512i qh = q5 ? r16_v(b, type, 4 + u) : zero;
            _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                const __m512i v = r16_v(b, type, qs0 + 8 * p + u);
                __m512i lo = _mm512_and_si512(v, m4), hi;
                if (q5) { /* bit 2p of qh byte l is bit 4 of the low nibble's value, bit 2p+1 the high one's */
                    const __m512i h = _mm512_srli_epi32(qh, 2 * p);
                    lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(h, one), 4));
                    hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), m4),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 1), one), 4));
                } else { /* the high nibble in place: 16 times the value, divided out below exactly */
                    hi = _mm512_andnot_si512(m4, v);
                }
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
                    slo[p][t] = _mm512_dpbusd_epi32(slo[p][t], lo, r16_x4(y[t], 16 * p + u));
                    shi[p][t] = _mm512_dpbusd_epi32(shi[p][t], hi, r16_x4(y[t], 16 * p + 8 + u));
                }
            }
        }
        __m512i sumi[R16_TOK];
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) sumi[t] = zero;
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            const __m512i s0 = r16_byte(sc[p / 2], 2 * (p % 2)), s1 = r16_byte(sc[p / 2], 2 * (p % 2) + 1);
            _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
                const __m512i h = q5 ? shi[p][t] : _mm512_srai_epi32(shi[p][t], 4);
                sumi[t] = _mm512_add_epi32(sumi[t], _mm512_add_epi32(_mm512_mullo_epi32(slo[p][t], s0), _mm512_mullo_epi32(h, s1)));
            }
        }
        const __m512i mp[4] = {_mm512_shuffle_epi8(mn[0], pick[0]), _mm512_shuffle_epi8(mn[0], pick[1]),
                               _mm512_shuffle_epi8(mn[1], pick[0]), _mm512_shuffle_epi8(mn[1], pick[1])};
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
            int32_t bs[4];
            r16_bs_pairs(y[t], bs);
            acc[t] = r16_step_k4(acc[t], dd, y[t]->d, sumi[t], r16_mins(mp, bs));
        }
    }
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* Σ_k p_k · (bsums[2k], bsums[2k+1]) per lane: p holds a row's eight int16 pairs of per-sub-block factors, y a token's
 * Q8_K block (its sixteen 16-value sums) */
R16_AVX512 R16_INLINE __m512i r16_bsums_dot(const __m512i p[8], const block_q8_K *y) {
    __m512i c = _mm512_setzero_si512();
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
        int32_t pr;
        memcpy(&pr, y->bsums + 2 * k, 4);
        c = _mm512_add_epi32(c, _mm512_madd_epi16(p[k], _mm512_set1_epi32(pr)));
    }
    return c;
}

/* Q2_K (q3 0) and Q3_K (q3 1). Q2_K block dwords: 0..3 the 16 scale bytes (low nibble the scale, high nibble the
 * min of sub-block j = byte j), 4..19 qs, 20 d | dmin. Q3_K: 0..7 hmask, 8..23 qs, 24..26 the packed scales, 27 d.
 * qs dword 8h+u (h the half) holds in bits 2k of its bytes the elements 128h + 32k + 4u.., of sub-block 8h + 2k +
 * u/4; a Q3_K element 128h + 32k + l has its third bit in bit 4h + k of hmask byte l, and its code (q | h << 2) is
 * the value + 4, the 4 taken back through the bsums (Q2_K's mins likewise). Per half 4 shifts x 2 sub-blocks: 8
 * independent sums per token. */
R16_AVX512 R16_INLINE void r16_tile_q23(int q3, const char *strip, int64_t nb, const char *x, size_t x_row, int nt,
                                        float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    const int32_t type = q3 ? INFER_TYPE_Q3_K : INFER_TYPE_Q2_K;
    const int qs0 = q3 ? 8 : 4;
    const __m512i m3 = _mm512_set1_epi8(3), c4 = _mm512_set1_epi8(4), zero = _mm512_setzero_si512();
    const __m512i nib = _mm512_set1_epi32(0xF);
    /* pshufb picking bytes (2k, 2k+1) of each dword as two int16: Q2_K's min pairs */
    const __m512i pick[2] = {r16_pick(0x80018000u), r16_pick(0x80038002u)};
    __m512 acc[R16_TOK];
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *y[R16_TOK];
        const char *b = r16_block(strip, r16_block_dwords(type), i, x, x_row, nt, y);
        const __m512i dd = r16_v(b, type, q3 ? 27 : 20);
        /* the sub-block scales as int32 lanes: Q2_K's low nibbles; Q3_K's signed 6 bits (blocks_q3_K_scale) */
        const __m512i sv[4] = {r16_v(b, type, q3 ? 24 : 0), r16_v(b, type, q3 ? 25 : 1), r16_v(b, type, q3 ? 26 : 2),
                               q3 ? zero : r16_v(b, type, 3)};
        __m512i scl[16];
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
            if (!q3) {
                scl[j] = _mm512_and_si512(r16_byte(sv[j / 4], j % 4), nib);
                continue;
            }
            const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(r16_byte(sv[(j % 8) / 4], j % 4), 4 * (j / 8)), nib);
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(r16_byte(sv[2], j % 4), 2 * (j / 4)), _mm512_set1_epi32(3));
            scl[j] = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
        }
        __m512i sumi[R16_TOK];
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) sumi[t] = zero;
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m512i s[4][2][R16_TOK];
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++)
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) s[k][e][t] = zero;
            _Pragma("GCC unroll 8") for (int u = 0; u < 8; u++) {
                const __m512i hm = q3 ? r16_v(b, type, u) : zero, v = r16_v(b, type, qs0 + 8 * h + u);
                _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                    __m512i q = _mm512_and_si512(_mm512_srli_epi32(v, 2 * k), m3);
                    if (q3) { /* hmask bit g to bit 2 of each byte */
                        const int g = 4 * h + k;
                        q = _mm512_or_si512(q, _mm512_and_si512(g >= 2 ? _mm512_srli_epi32(hm, g - 2)
                                                                       : _mm512_slli_epi32(hm, 2 - g), c4));
                    }
                    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
                        s[k][u / 4][t] = _mm512_dpbusd_epi32(s[k][u / 4][t], q, r16_x4(y[t], 32 * h + 8 * k + u));
                }
            }
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
                const int j = 8 * h + 2 * k + e;
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
                    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(s[k][e][t], scl[j]));
            }
        }
        /* per sub-block pair the int16 factors of the bsums: Q2_K its mins (high nibbles), Q3_K its scales (x 4) */
        __m512i sp[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
            sp[k] = q3 ? _mm512_or_si512(_mm512_and_si512(scl[2 * k], _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(scl[2 * k + 1], 16))
                       : _mm512_and_si512(_mm512_srli_epi16(_mm512_shuffle_epi8(sv[k / 2], pick[k % 2]), 4), _mm512_set1_epi16(0xF));
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
            const __m512i c = r16_bsums_dot(sp, y[t]);
            acc[t] = q3 ? r16_step_off(acc[t], dd, y[t]->d, sumi[t], _mm512_slli_epi32(c, 2))
                        : r16_step_k4(acc[t], dd, y[t]->d, sumi[t], c);
        }
    }
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* Q6_K: block dwords 0..31 ql, 32..47 qh, 48..51 the 16 signed scales, 52 d. For (h, u) the ql dwords 16h+u and
 * 16h+8+u and the qh dword 32+8h+u make groups 32h+8k+u (k 0..3): elements 128h+32k+4u.., sub-block 8h+2k+u/4.
 * u and u+4 at once: 8 independent sums per token. */
R16_AVX512 R16_INLINE void r16_tile_q6(const char *strip, int64_t nb, const char *x, size_t x_row, int nt,
                                       float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    const int32_t type = INFER_TYPE_Q6_K;
    const __m512i m4 = _mm512_set1_epi8(0x0F), c30 = _mm512_set1_epi8(0x30), zero = _mm512_setzero_si512();
    /* pshufb putting bytes (2k, 2k+1) of each dword into the high halves of two int16 (then >> 8: sign-extended) */
    const __m512i pick[2] = {r16_pick(0x01800080u), r16_pick(0x03800280u)};
    __m512 acc[R16_TOK];
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *y[R16_TOK];
        const char *b = r16_block(strip, r16_block_dwords(type), i, x, x_row, nt, y);
        const __m512i scv[4] = {r16_v(b, type, 48), r16_v(b, type, 49), r16_v(b, type, 50), r16_v(b, type, 51)};
        const __m512i dd = r16_v(b, type, 52);
        __m512i sumi[R16_TOK];
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) sumi[t] = zero;
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            __m512i s[2][4][R16_TOK];
            _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) s[e][k][t] = zero;
            _Pragma("GCC unroll 4") for (int uu = 0; uu < 4; uu++) _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
                const int u = 4 * e + uu;
                const __m512i l0 = r16_v(b, type, 16 * h + u), l1 = r16_v(b, type, 16 * h + 8 + u);
                const __m512i hb = r16_v(b, type, 32 + 8 * h + u);
                /* bits 2k..2k+1 of the qh byte as bits 4-5 */
                const __m512i q[4] = {
                    _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi32(hb, 4), c30)),
                    _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi32(hb, 2), c30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(l0, 4), m4), _mm512_and_si512(hb, c30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(l1, 4), m4),
                                    _mm512_and_si512(_mm512_srli_epi32(hb, 2), c30))};
                _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
                    s[e][k][t] = _mm512_dpbusd_epi32(s[e][k][t], q[k], r16_x4(y[t], 32 * h + 8 * k + u));
            }
            _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                const int j = 8 * h + 2 * k + e; /* sub-block: signed scale byte j%4 of dword 48 + j/4 */
                const __m512i scj = _mm512_srai_epi32(_mm512_slli_epi32(scv[j / 4], 24 - 8 * (j % 4)), 24);
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
                    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(s[e][k][t], scj));
            }
        }
        /* the -32 offset: Σ_j sc_j·bsums_j, the pairs (sc_2k, sc_2k+1) against (bsums[2k], bsums[2k+1]) */
        __m512i sp[8];
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) sp[k] = _mm512_srai_epi16(_mm512_shuffle_epi8(scv[k / 2], pick[k % 2]), 8);
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
            acc[t] = r16_step_off(acc[t], dd, y[t]->d, sumi[t], _mm512_slli_epi32(r16_bsums_dot(sp, y[t]), 5));
    }
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* IQ4_XS: block dword 0 d | scales_h << 16, 1 scales_l, 2..33 qs: qs dword 4j+u = elements 32j+4u.. (low nibbles)
 * and 32j+16+4u.. (high), both sub-block j, each through the codebook + 128 (the -128 through the bsums). Four
 * sub-blocks at once, low and high nibbles apart: 8 independent sums per token. */
R16_AVX512 R16_INLINE void r16_tile_iq4(const char *strip, int64_t nb, const char *x, size_t x_row, int nt,
                                        float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    const int32_t type = INFER_TYPE_IQ4_XS;
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i kv = mm_strip_codebook_u8(blocks_kvalues_iq4nl);
    __m512 acc[R16_TOK];
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const block_q8_K *y[R16_TOK];
        const char *b = r16_block(strip, r16_block_dwords(type), i, x, x_row, nt, y);
        const __m512i dh = r16_v(b, type, 0), sl = r16_v(b, type, 1);
        __m512i sumi[R16_TOK], c[R16_TOK];
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) sumi[t] = c[t] = zero;
        _Pragma("GCC unroll 2") for (int j0 = 0; j0 < 8; j0 += 4) {
            __m512i slo[4][R16_TOK], shi[4][R16_TOK];
            _Pragma("GCC unroll 4") for (int e = 0; e < 4; e++) _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
                slo[e][t] = shi[e][t] = zero;
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) _Pragma("GCC unroll 4") for (int e = 0; e < 4; e++) {
                const int j = j0 + e;
                const __m512i v = r16_v(b, type, 2 + 4 * j + u);
                const __m512i lo = _mm512_shuffle_epi8(kv, _mm512_and_si512(v, m4));
                const __m512i hi = _mm512_shuffle_epi8(kv, _mm512_and_si512(_mm512_srli_epi32(v, 4), m4));
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
                    slo[e][t] = _mm512_dpbusd_epi32(slo[e][t], lo, r16_x4(y[t], 8 * j + u));
                    shi[e][t] = _mm512_dpbusd_epi32(shi[e][t], hi, r16_x4(y[t], 8 * j + 4 + u));
                }
            }
            _Pragma("GCC unroll 4") for (int e = 0; e < 4; e++) {
                const int j = j0 + e;
                /* the 6-bit scale - 32: low nibble j of scales_l, bits 2j..2j+1 of scales_h as bits 4-5 */
                const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0xF));
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(dh, 16 + 2 * j), _mm512_set1_epi32(3));
                const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
                const __m512i lp = _mm512_or_si512(_mm512_and_si512(ls, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(ls, 16));
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
                    int32_t pr;
                    memcpy(&pr, y[t]->bsums + 2 * j, 4);
                    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(_mm512_add_epi32(slo[e][t], shi[e][t]), ls));
                    c[t] = _mm512_add_epi32(c[t], _mm512_madd_epi16(lp, _mm512_set1_epi32(pr)));
                }
            }
        }
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
            acc[t] = r16_step_off(acc[t], dh, y[t]->d, sumi[t], _mm512_slli_epi32(c[t], 7));
    }
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

/* A 32-value type (units of two blocks, mm_r16.h's layout): out[t][r] = dot of strip row r with token t, nt <=
 * R16_TOK, act the tokens' block table (nb32 blocks a token). Per block the exact integer sum, then mmv.c's block
 * term (blk_q8_0 and kin: sumi·(d·dy); Q4_1 / Q5_1: (d·dy)·sumi + m·s), in block order. Two blocks x the low and
 * high halves of a block's elements x two alternating chains: 8 independent sums per token. */
R16_AVX512 R16_INLINE void r16_tile_q32(int32_t type, const char *strip, int64_t nb32, const char *x, size_t x_row,
                                        const struct mm_q32_act *act, int nt, float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    const int mins = cpu_r16_q32_min(type), qs0 = cpu_r16_q32_qs(type);
    const size_t unit = 64 * (size_t)cpu_r16_q32_vectors(type);
    const size_t xbs = mins ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t xqs = mins ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
    const __m512i zero = _mm512_setzero_si512(), kv = mm_strip_q32_book(type);
    __m512 acc[R16_TOK];
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb32; i += 2) {
        const char *b = strip + (i / 2) * (int64_t)unit;
        const char *y[R16_TOK][2]; /* token t's activation quants of block i + e */
        _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++)
            y[t][e] = x + t * x_row + (i + e) * (int64_t)xbs + xqs;
        __m512i s[2][2][2][R16_TOK]; /* block e, half h (elements 0..15, 16..31), chain */
        _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)
            _Pragma("GCC unroll 2") for (int c = 0; c < 2; c++) _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
                s[e][h][c][t] = zero;
        if (type == INFER_TYPE_Q8_0) { /* the codes whole, in the order stored: dword g of block e at qs0 + 2g + e */
            _Pragma("GCC unroll 8") for (int g = 0; g < QK8_0 / 4; g++) _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
                const __m512i w = _mm512_loadu_si512((const void *)(b + 64 * (qs0 + 2 * g + e)));
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++)
                    s[e][g / 4][g % 2][t] = _mm512_dpbusd_epi32(s[e][g / 4][g % 2][t], w, mm_strip_x4(y[t][e] + 4 * g));
            }
        } else {
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
                __m512i lo, hi;
                mm_strip_q32_nibbles(type, b, e, u, kv, &lo, &hi);
                _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
                    s[e][0][u % 2][t] = _mm512_dpbusd_epi32(s[e][0][u % 2][t], lo, mm_strip_x4(y[t][e] + 4 * u));
                    s[e][1][u % 2][t] = _mm512_dpbusd_epi32(s[e][1][u % 2][t], hi, mm_strip_x4(y[t][e] + 16 + 4 * u));
                }
            }
        }
        _Pragma("GCC unroll 2") for (int e = 0; e < 2; e++) {
            __m512 d, m;
            mm_strip_q32_scales(type, b, e, &d, &m);
            _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) {
                const struct mm_q32_act *ya = &act[t * nb32 + i + e];
                const __m512i sumi = _mm512_add_epi32(_mm512_add_epi32(s[e][0][0][t], s[e][0][1][t]),
                                                      _mm512_add_epi32(s[e][1][0][t], s[e][1][1][t]));
                const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(ya->d));
                __m512 v;
                if (mins)
                    v = _mm512_add_ps(_mm512_mul_ps(dd, _mm512_cvtepi32_ps(sumi)), _mm512_mul_ps(m, _mm512_set1_ps(ya->s)));
                else
                    v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sumi, _mm512_set1_epi32(ya->c))), dd);
                acc[t] = _mm512_add_ps(acc[t], v);
            }
        }
    }
    _Pragma("GCC unroll 2") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

#define R16_TILE_Q32(t, n)                                                                                        \
    case t:                                                                                                        \
        r16_tile_q32(t, strip, nb, x, x_row, act, n, out);                                                         \
        break;
#define R16_TILE_CASE(n)                                                                                          \
    case n:                                                                                                        \
        switch (type) {                                                                                            \
            R16_TILE_Q32(INFER_TYPE_Q8_0, n)                                                                       \
            R16_TILE_Q32(INFER_TYPE_Q4_0, n)                                                                       \
            R16_TILE_Q32(INFER_TYPE_Q4_1, n)                                                                       \
            R16_TILE_Q32(INFER_TYPE_Q5_0, n)                                                                       \
            R16_TILE_Q32(INFER_TYPE_Q5_1, n)                                                                       \
            R16_TILE_Q32(INFER_TYPE_IQ4_NL, n)                                                                     \
            R16_TILE_Q32(INFER_TYPE_MXFP4, n)                                                                      \
        case INFER_TYPE_Q2_K:                                                                                      \
            r16_tile_q23(0, strip, nb, x, x_row, n, out);                                                              \
            break;                                                                                                 \
        case INFER_TYPE_Q3_K:                                                                                      \
            r16_tile_q23(1, strip, nb, x, x_row, n, out);                                                              \
            break;                                                                                                 \
        case INFER_TYPE_Q4_K:                                                                                      \
            r16_tile_k4(strip, nb, x, x_row, n, 0, out);                                                           \
            break;                                                                                                 \
        case INFER_TYPE_Q5_K:                                                                                      \
            r16_tile_k4(strip, nb, x, x_row, n, 1, out);                                                           \
            break;                                                                                                 \
        case INFER_TYPE_Q6_K:                                                                                      \
            r16_tile_q6(strip, nb, x, x_row, n, out);                                                              \
            break;                                                                                                 \
        default:                                                                                                   \
            r16_tile_iq4(strip, nb, x, x_row, n, out);                                                             \
            break;                                                                                                 \
        }                                                                                                          \
        break;
/* nb: blocks per row (of 32 values for the 32-value types, else of 256); act: their activation table at the first
 * token */
R16_AVX512 static void r16_tile(int32_t type, const char *strip, int64_t nb, const char *x, size_t x_row,
                                const struct mm_q32_act *act, int nt, float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    switch (nt) {
        R16_TILE_CASE(1)
        R16_TILE_CASE(2)
    default:
        break;
    }
}

void cpu_r16_strip_dot(int32_t type, const void *strip, int64_t n_in, const void *xq, const struct mm_q32_act *act,
                       float out[CPU_R16_ROWS]) {
    float o[MM_STRIP_TOK][MM_STRIP_ROWS];
    const int64_t nb = n_in / (cpu_r16_q32(type) ? QK8_0 : QK_K);
    if (cpu_isa_avx2_variant(CPU_ISA_BEST)) cpu_r16_tile_avx2(type, strip, nb, xq, 0, act, 1, o);
    else r16_tile(type, strip, nb, xq, 0, act, 1, o);
    memcpy(out, o[0], sizeof o[0]);
}

struct r16_job {
    const struct mm_args *a;
    int32_t type; /* the file type */
    int64_t nb;   /* blocks per row */
    size_t strip_bytes, x_row;
    struct mm_q32_act *act; /* the 32-value types: n_tokens x nb (mm_q32_act_fill) */
    int avx2;               /* mm_r16_avx2.c's kernels, every batch size */
};

static void r16_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct r16_job *j = ctx;
    const struct mm_args *a = j->a;
    for (int64_t rb = r0; rb < r1; rb += CPU_R16_ROWS) {
        const int nr = (int)(r1 - rb < CPU_R16_ROWS ? r1 - rb : CPU_R16_ROWS);
        const size_t at = (size_t)(rb / CPU_R16_ROWS) * j->strip_bytes;
        const int step = j->avx2 ? MM_STRIP_TOK : R16_TOK;
        for (int64_t tb = 0; tb < a->n_tokens; tb += step) {
            const int nt = (int)(a->n_tokens - tb < step ? a->n_tokens - tb : step);
            const char *x = (const char *)a->xq + tb * j->x_row;
            float g[MM_STRIP_TOK][MM_STRIP_ROWS], u[MM_STRIP_TOK][MM_STRIP_ROWS];
            const struct mm_q32_act *ya = j->act ? j->act + tb * j->nb : NULL;
            const char *w = (const char *)a->w + at, *w2 = a->w2 ? (const char *)a->w2 + at : NULL;
            if (j->avx2) {
                cpu_r16_tile_avx2(j->type, w, j->nb, x, j->x_row, ya, nt, g);
                if (a->epilogue == MMV_SWIGLU) cpu_r16_tile_avx2(j->type, w2, j->nb, x, j->x_row, ya, nt, u);
                mm_strip_out_c(a, tb, nt, rb, nr, g, u);
                continue;
            }
            r16_tile(j->type, w, j->nb, x, j->x_row, ya, nt, g);
            if (a->epilogue == MMV_SWIGLU) r16_tile(j->type, w2, j->nb, x, j->x_row, ya, nt, u);
            mm_strip_out(a, tb, nt, rb, nr, g, u);
        }
    }
}

infer_status cpu_mm_r16(const struct mm_args *a, struct pool *p) {
    const int32_t type = cpu_r16_base(a->type);
    if (!cpu_r16_is(a->type) || !r16_unit_vectors(type))
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_r16: type id %d is no repacked type", a->type);
    const int avx2 = cpu_isa_avx2_variant(a->variant);
    if (avx2 ? !cpu_isa_has(CPU_ISA_AVX2) || !cpu_r16_avx2_has(type)
             : !cpu_isa_avx512_variant(a->variant) || !cpu_isa_has(CPU_ISA_AVX512))
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_r16: repacked %s has no kernel at ISA variant %d on this CPU",
                          quant_type(type)->name, a->variant);
    if (!cpu_r16_takes(type, a->n_in) || a->n_out <= 0 || a->n_tokens < 1)
        return infer_fail(INFER_E_ARG, "cpu_mm_r16: repacked %s, n_in %lld n_out %lld n_tokens %lld: this CPU (or "
                          "INFER_CPU_ISA) has no strips of the type, or the shape is not whole blocks",
                          quant_type(type)->name, (long long)a->n_in, (long long)a->n_out, (long long)a->n_tokens);
    if (!a->w || !a->y || !a->xq || (a->epilogue == MMV_SWIGLU && !a->w2) || (a->epilogue == MMV_ADD && !a->add) ||
        a->epilogue < MMV_PLAIN || a->epilogue > MMV_SWIGLU)
        return infer_fail(INFER_E_ARG, "cpu_mm_r16: missing pointer or bad epilogue %d", a->epilogue);
    const int q32 = cpu_r16_q32(type);
    if (!avx2 && a->n_tokens > CPU_R16_MAX_TOKENS) {
        if (q32) return cpu_mm_q32(a, p);
        return type == INFER_TYPE_Q2_K || type == INFER_TYPE_Q3_K ? cpu_mm_iq(a, p) : cpu_mm_kq(a, p);
    }
    if (avx2 && cpu_mm_kq_avx2_takes(a)) return cpu_mm_kq_avx2(a, p);
    if (avx2 && cpu_mm_q32_avx2_takes(a)) return cpu_mm_q32_avx2(a, p);
    struct r16_job j = {.a = a, .type = type, .nb = a->n_in / (q32 ? QK8_0 : QK_K),
                        .strip_bytes = cpu_r16_bytes(type, a->n_in, CPU_R16_ROWS),
                        .x_row = cpu_act_row_bytes(type, a->n_in), .avx2 = avx2};
    if (q32) {
        j.act = xmalloc(sizeof(struct mm_q32_act) * (size_t)j.nb * (size_t)a->n_tokens);
        if (!j.act) return INFER_OOM("cpu_mm_r16's activation table");
        mm_q32_act_fill(type, a->xq, j.x_row, j.nb, 0, a->n_tokens, j.act);
    }
    pool_for(p, a->n_out, CPU_R16_ROWS, r16_rows, &j);
    xfree(j.act);
    return INFER_OK;
}

#else /* not x86-64: nothing is repacked */
int cpu_r16_takes(int32_t type, int64_t n_in) {
    (void)type, (void)n_in;
    return 0;
}
void cpu_r16_strip_dot(int32_t type, const void *strip, int64_t n_in, const void *xq, const struct mm_q32_act *act,
                       float out[CPU_R16_ROWS]) {
    (void)type, (void)strip, (void)n_in, (void)xq, (void)act;
    memset(out, 0, sizeof(float) * CPU_R16_ROWS);
}
infer_status cpu_mm_r16(const struct mm_args *a, struct pool *p) {
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_r16: type id %d: no repacked kernels on this architecture", a->type);
}
#endif
