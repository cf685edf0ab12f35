/* mm_kq: the prefill GEMM for Q4_K, Q5_K, Q6_K and IQ4_XS weights x Q8_K activations on AVX-512 VNNI.
 *
 * Why: cpu_mm's row-by-row dots unpack every weight block once per token, which for a long prompt is
 * most of the prefill time. Here each worker unpacks a strip of KQ_ROWS = 16 weight rows once per call
 * into its own scratch (from the file's rows by gathers, or by plain loads from the strips mm_r16.c repacked
 * them into at load), then sweeps all tokens over it,
 * KQ_TOK at a time. vpdpbusd of one repacked vector with a token's 4 activation bytes broadcast gives
 * the 16 rows' partial sums in the 16 int32 lanes: no horizontal sums, lane r is y[t][r0 + r].
 *
 * Repacked strip, per 256-element block (struct kq_block): q[g] = 64 bytes, byte 4r+k = row r's quant
 * of element 4g+k as an unsigned byte (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63, IQ4_XS its codebook value + 128);
 * sc[j] = sub-block j's scale per row (IQ4_XS: the 6-bit scale - 32); mn[k] = per row an int16 pair multiplying
 * the activation's bsums[2k], bsums[2k+1] (Q4_K/Q5_K: the min m_k twice, Q6_K: scales 2k, 2k+1, for the -32
 * offset, IQ4_XS: scale k twice, for the -128 offset); d, dmin per row as f32.
 *
 * Math: per block exactly the scalar reference of mmv.c (exact integer sums, then
 * s += (d·dy)·sumi - (dmin·dy)·summ for Q4_K/Q5_K, s += (d·dy)·(sumi - 32·c) for Q6_K, (d·dy)·(sumi - 128·c)
 * for IQ4_XS, the same f32 operations in the same order), so every element is bit-identical to the dots cpu_mm
 * uses otherwise (test-ops checks mm against mmv). Other types, ISA levels and short batches keep the dot loop.
 *
 * AMX (amx.h): on a CPU with AMX-INT8 tiles, whole groups of 16 tokens take kq_tile_amx, one TDPBSUD per sub-block
 * (the same exact integers as the vpdpbusd chain) and kq_step's f32 steps as kq_tile, so the same bits.
 */
#include <stddef.h>

#include "mm_kq.h"
#include "mm_r16.h"
#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "amx.h"
#include "mm_strip.h"

#define KQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define KQ_INLINE static inline __attribute__((always_inline))

/* Dword `off` (a byte offset in the block, a multiple of 4) of 16 rows' blocks: a gather from the file's rows
 * (idx, live: mm_strip_row_index, the rows present), or with r16 (the type id; 0: none) one load from a strip block
 * of mm_r16.c. */
KQ_AVX512 KQ_INLINE __m512i kq_fetch(const char *b, int r16, __m512i idx, __mmask16 live, size_t off) {
    if (r16) return _mm512_loadu_si512((const void *)(b + 64 * cpu_r16_pos(r16, (int)(off / 4))));
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, b + off, 1);
}

/* KQ_MIN_TOKENS: packing a strip costs about two tokens of row-by-row dots. On one matrix in cache the GEMM
 * wins from 4 tokens (4 tokens 0.27 vs 0.34 ms, 8 tokens 0.34 vs 0.68 ms, Q4_K 1024 x 3072, one thread), but
 * in a whole model streaming its weights from DRAM the dots win up to 5 tokens (llm-bench, 2 threads,
 * Qwen3-0.6B Q4_K_M shape: pp4 102 vs 77 t/s with the dots; pp6 98 vs 86, pp7 121 vs 104 with the GEMM),
 * which is what speculative verification batches (2..5 tokens) run. */
enum { KQ_ROWS = MM_STRIP_ROWS, KQ_TOK = MM_STRIP_TOK, KQ_MIN_TOKENS = 6 };
/* the block forms: Q4_K / Q5_K (scales and mins), Q6_K (16 scales, offset 32), IQ4_XS (8 scales, offset 128) */
enum kq_form { KQ_K4, KQ_Q6, KQ_IQ4 };

struct kq_block {
    uint8_t q[QK_K / 4][64];
    int32_t sc[16][KQ_ROWS]; /* Q4_K uses 8 */
    int32_t mn[8][KQ_ROWS];
    float d[KQ_ROWS], dmin[KQ_ROWS];
};

struct kq_job {
    const struct mm_args *a;
    size_t w_row, x_row;
    int64_t nb;           /* blocks per row */
    int r16;              /* the weights are mm_r16.c strips */
    size_t strip_bytes;   /* r16: bytes per strip of 16 rows */
    struct kq_block *scratch; /* per worker: nb blocks, twice for SwiGLU */
    enum kq_form form;
    int amx; /* the AMX tiles' mode (amx.h), AMX_NONE: AVX-512 only */
    void (*pack)(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16, struct kq_block *out);
};

/* d, dmin, scales and mins of 16 rows' Q4_K / Q5_K blocks (the same header layout): mmv.c's
 * mmv_k_unpack on 16 lanes, from three gathered dwords of the 12 packed scale bytes. */
KQ_AVX512 static void kq_head_k4(const char *b, int r16, __m512i idx, __mmask16 live, struct kq_block *o) {
    const __m512i ff = _mm512_set1_epi32(0xff);
    const __m512i c3f = _mm512_set1_epi8(0x3f), c0f = _mm512_set1_epi8(0x0f), c03 = _mm512_set1_epi8(3);
    __m512i dd = kq_fetch(b, r16, idx, live, 0); /* d | dmin << 16 */
    __m512i u0 = kq_fetch(b, r16, idx, live, 4);
    __m512i u1 = kq_fetch(b, r16, idx, live, 8);
    __m512i u2 = kq_fetch(b, r16, idx, live, 12);
    __m512i sc[2] = {_mm512_and_si512(u0, c3f), _mm512_or_si512(_mm512_and_si512(u2, c0f),
                                                                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), c03), 4))};
    __m512i mn[2] = {_mm512_and_si512(u1, c3f),
                     _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), c0f),
                                     _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), c03), 4))};
    for (int j = 0; j < 8; j++) {
        __m512i m = _mm512_and_si512(_mm512_srli_epi32(mn[j / 4], 8 * (j % 4)), ff);
        _mm512_storeu_si512(o->sc[j], _mm512_and_si512(_mm512_srli_epi32(sc[j / 4], 8 * (j % 4)), ff));
        _mm512_storeu_si512(o->mn[j], _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
    }
    _mm512_storeu_ps(o->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
    _mm512_storeu_ps(o->dmin, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
}

/* Q4_K qs byte 32p+l holds element 64p+l (low nibble) and 64p+32+l (high): the dword at 32p+4u is
 * group 16p+u (low) and 16p+8+u (high). Rows >= nr come out zero. */
KQ_AVX512 static void kq_pack_q4_k(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                                struct kq_block *out) {
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    const __m512i idx = mm_strip_row_index(w_row), m4 = _mm512_set1_epi8(0x0F);
    for (int64_t i = 0; i < nb; i++) {
        const char *b = w + i * (int64_t)bstride;
        struct kq_block *o = &out[i];
        for (int p = 0; p < 4; p++)
            for (int u = 0; u < 8; u++) {
                __m512i v = kq_fetch(b, r16, idx, live, offsetof(block_q4_K, qs) + 32 * p + 4 * u);
                _mm512_storeu_si512(o->q[16 * p + u], _mm512_and_si512(v, m4));
                _mm512_storeu_si512(o->q[16 * p + 8 + u], _mm512_and_si512(_mm512_srli_epi32(v, 4), m4));
            }
        kq_head_k4(b, r16, idx, live, o);
    }
}

/* Q5_K: as Q4_K, plus bit 2p (low nibbles) or 2p+1 (high) of qh[l] as bit 4; qh's dword 4u serves both. */
KQ_AVX512 static void kq_pack_q5_k(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                                struct kq_block *out) {
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    const __m512i idx = mm_strip_row_index(w_row), m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    for (int64_t i = 0; i < nb; i++) {
        const char *b = w + i * (int64_t)bstride;
        struct kq_block *o = &out[i];
        for (int u = 0; u < 8; u++) {
            __m512i h = kq_fetch(b, r16, idx, live, offsetof(block_q5_K, qh) + 4 * u);
            for (int p = 0; p < 4; p++) {
                __m512i v = kq_fetch(b, r16, idx, live, offsetof(block_q5_K, qs) + 32 * p + 4 * u);
                __m512i h0 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * p), one), 4);
                __m512i h1 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, 2 * p + 1), one), 4);
                _mm512_storeu_si512(o->q[16 * p + u], _mm512_or_si512(_mm512_and_si512(v, m4), h0));
                _mm512_storeu_si512(o->q[16 * p + 8 + u], _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(v, 4), m4), h1));
            }
        }
        kq_head_k4(b, r16, idx, live, o);
    }
}

/* Q6_K element 128h+32k+l: ql[64h+l] (k 0, 2) or ql[64h+32+l] (k 1, 3), low nibble for k < 2, high
 * for k >= 2, plus bits 2k..2k+1 of qh[32h+l] as bits 4-5; group 32h+8k+u for l = 4u..4u+3. */
KQ_AVX512 static void kq_pack_q6_k(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                                struct kq_block *out) {
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    const __m512i idx = mm_strip_row_index(w_row), m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    for (int64_t i = 0; i < nb; i++) {
        const char *b = w + i * (int64_t)bstride;
        struct kq_block *o = &out[i];
        for (int h = 0; h < 2; h++)
            for (int u = 0; u < 8; u++) {
                const size_t ql = offsetof(block_q6_K, ql) + 64 * h + 4 * u;
                __m512i l0 = kq_fetch(b, r16, idx, live, ql);
                __m512i l1 = kq_fetch(b, r16, idx, live, ql + 32);
                __m512i hb = kq_fetch(b, r16, idx, live, offsetof(block_q6_K, qh) + 32 * h + 4 * u);
                __m512i lo[4] = {_mm512_and_si512(l0, m4), _mm512_and_si512(l1, m4),
                                 _mm512_and_si512(_mm512_srli_epi32(l0, 4), m4),
                                 _mm512_and_si512(_mm512_srli_epi32(l1, 4), m4)};
                for (int k = 0; k < 4; k++) {
                    __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 2 * k), m2), 4);
                    _mm512_storeu_si512(o->q[32 * h + 8 * k + u], _mm512_or_si512(lo[k], hi));
                }
            }
        /* the 16 signed scales from four gathered dwords, d from the dword ending the block */
        for (int q = 0; q < 4; q++) {
            __m512i v = kq_fetch(b, r16, idx, live, offsetof(block_q6_K, scales) + 4 * q);
            for (int e = 0; e < 4; e++)
                _mm512_storeu_si512(o->sc[4 * q + e], _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * e), 24));
        }
        for (int k = 0; k < 8; k++) {
            __m512i lo = _mm512_and_si512(_mm512_loadu_si512(o->sc[2 * k]), _mm512_set1_epi32(0xffff));
            _mm512_storeu_si512(o->mn[k], _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_loadu_si512(o->sc[2 * k + 1]), 16)));
        }
        /* d: the high half of the dword ending the block, or a strip block's dword 52 (low half, zero padded) */
        __m512i dd = r16 ? kq_fetch(b, r16, idx, live, offsetof(block_q6_K, d))
                         : _mm512_srli_epi32(kq_fetch(b, r16, idx, live, offsetof(block_q6_K, d) - 2), 16);
        _mm512_storeu_ps(o->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
        _mm512_storeu_ps(o->dmin, _mm512_setzero_ps());
    }
}

/* IQ4_XS qs byte 16j+l holds element 32j+l (low nibble) and 32j+16+l (high): the dword at 16j+4u is group 8j+u
 * (low) and 8j+4+u (high), each nibble through the codebook + 128. Scale j: low nibble j of scales_l, bits 2j..2j+1
 * of scales_h as bits 4-5, minus 32. */
KQ_AVX512 static void kq_pack_iq4_xs(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                                struct kq_block *out) {
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    const __m512i idx = mm_strip_row_index(w_row), m4 = _mm512_set1_epi8(0x0F);
    const __m512i kv = mm_strip_codebook_u8(blocks_kvalues_iq4nl);
    for (int64_t i = 0; i < nb; i++) {
        const char *b = w + i * (int64_t)bstride;
        struct kq_block *o = &out[i];
        for (int j = 0; j < 8; j++)
            for (int u = 0; u < 4; u++) {
                __m512i v = kq_fetch(b, r16, idx, live, offsetof(block_iq4_xs, qs) + 16 * j + 4 * u);
                _mm512_storeu_si512(o->q[8 * j + u], _mm512_shuffle_epi8(kv, _mm512_and_si512(v, m4)));
                _mm512_storeu_si512(o->q[8 * j + 4 + u], _mm512_shuffle_epi8(kv, _mm512_and_si512(_mm512_srli_epi32(v, 4), m4)));
            }
        const __m512i dh = kq_fetch(b, r16, idx, live, 0); /* d | scales_h << 16 */
        const __m512i sl = kq_fetch(b, r16, idx, live, offsetof(block_iq4_xs, scales_l));
        for (int j = 0; j < 8; j++) {
            const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0xF));
            const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(dh, 16 + 2 * j), _mm512_set1_epi32(3));
            const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
            _mm512_storeu_si512(o->sc[j], ls);
            _mm512_storeu_si512(o->mn[j], _mm512_or_si512(_mm512_and_si512(ls, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(ls, 16)));
        }
        _mm512_storeu_ps(o->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh)));
        _mm512_storeu_ps(o->dmin, _mm512_setzero_ps());
    }
}

KQ_AVX512 static inline __m512i kq_bcast(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* A block's term of the 16 rows for one token (its Q8_K block y), from the exact integers sumi = sum over sub-blocks
 * of scale x integer dot: the scalar reference's f32 steps (the offset or min through the bsums) */
KQ_AVX512 KQ_INLINE __m512 kq_step(const struct kq_block *o, const block_q8_K *y, __m512i sumi, enum kq_form form) {
    const __m512 d = _mm512_loadu_ps(o->d), dy = _mm512_set1_ps(y->d);
    __m512i c = _mm512_setzero_si512();
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
        c = _mm512_add_epi32(c, _mm512_madd_epi16(_mm512_loadu_si512(o->mn[k]), kq_bcast(y->bsums + 2 * k)));
    if (form != KQ_K4) { /* the offset: Q6_K 32, IQ4_XS 128 */
        const __m512i off = _mm512_slli_epi32(c, form == KQ_Q6 ? 5 : 7);
        return _mm512_mul_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi, off)));
    }
    return _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(d, dy), _mm512_cvtepi32_ps(sumi)),
                         _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(o->dmin), dy), _mm512_cvtepi32_ps(c)));
}

/* out[t][r] = the dot of strip row r with token t (x + t·x_row), nt <= KQ_TOK tokens; nt and form are
 * constants in every caller. The unroll pragmas keep the per-token accumulators in registers (without
 * them GCC -O2 keeps s[] and sumi[] in memory and the kernel runs at a third of the speed). */
KQ_AVX512 KQ_INLINE void kq_tile(const struct kq_block *blk, int64_t nb, const char *x, size_t x_row, int nt,
                                 enum kq_form form, float out[KQ_TOK][KQ_ROWS]) {
    const int q6 = form == KQ_Q6;
    const int n_sub = q6 ? 16 : 8, gps = q6 ? 4 : 8; /* sub-blocks per block, groups of 4 per sub-block */
    const __m512i zero = _mm512_setzero_si512();
    __m512 acc[KQ_TOK];
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct kq_block *o = &blk[i];
        const block_q8_K *y[KQ_TOK];
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) y[t] = (const block_q8_K *)(x + t * x_row) + i;
        __m512i sumi[KQ_TOK];
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) sumi[t] = zero;
        for (int j = 0; j < n_sub; j++) {
            __m512i s[KQ_TOK];
            _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) s[t] = zero;
            _Pragma("GCC unroll 8") for (int k = 0; k < gps; k++) {
                const int g = j * gps + k;
                __m512i wv = _mm512_loadu_si512(o->q[g]);
                _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) s[t] = _mm512_dpbusd_epi32(s[t], wv, kq_bcast(y[t]->qs + 4 * g));
            }
            __m512i sc = _mm512_loadu_si512(o->sc[j]);
            _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(s[t], sc));
        }
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm512_add_ps(acc[t], kq_step(o, y[t], sumi[t], form));
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

#define KQ_TILE_CASE(n)                                                                                           \
    case n:                                                                                                        \
        if (form == KQ_Q6) kq_tile(blk, nb, x, x_row, n, KQ_Q6, out);                                              \
        else if (form == KQ_IQ4) kq_tile(blk, nb, x, x_row, n, KQ_IQ4, out);                                       \
        else kq_tile(blk, nb, x, x_row, n, KQ_K4, out);                                                            \
        break;

KQ_AVX512 static void kq_tile_n(const struct kq_block *blk, int64_t nb, const char *x, size_t x_row, int nt,
                                enum kq_form form, float out[KQ_TOK][KQ_ROWS]) {
    switch (nt) {
        KQ_TILE_CASE(1)
        KQ_TILE_CASE(2)
        KQ_TILE_CASE(3)
        KQ_TILE_CASE(4)
        KQ_TILE_CASE(5)
        KQ_TILE_CASE(6)
        KQ_TILE_CASE(7)
        KQ_TILE_CASE(8)
    default:
        break;
    }
}

/* kq_tile for AMX_TOK = 16 tokens through AMX tiles (amx.h, mode AMX_HW or AMX_EMU): per sub-block (32 values, Q6_K
 * 16) one TDPBSUD of the tokens' activation bytes (the A tile, rows x_row apart) with the sub-block's unpacked vectors
 * (the B tile) gives kq_tile's exact integers s[t] in a C tile, four sub-blocks a round in tmm0..3; the scales and
 * kq_step as there, so the same bits. */
#define KQ_AMX_DP(c, ta, tb, sub)                                                                                  \
    do {                                                                                                           \
        AMX_ZERO(mode, c);                                                                                         \
        AMX_LOAD(mode, ta, y + (sub) * kb, x_row);                                                                 \
        AMX_LOAD(mode, tb, o->q[(sub) * kb / 4], 64);                                                              \
        AMX_DPBSUD(mode, c, ta, tb);                                                                               \
    } while (0)

KQ_AVX512 static void kq_tile_amx(int mode, const struct kq_block *blk, int64_t nb, const char *x, size_t x_row,
                                  enum kq_form form, float out[AMX_TOK][KQ_ROWS]) {
    const int n_sub = form == KQ_Q6 ? 16 : 8, kb = QK_K / n_sub; /* sub-blocks per block, values each */
    int32_t c[4][AMX_TOK][KQ_ROWS] __attribute__((aligned(64)));
    __m512 acc[AMX_TOK];
    for (int t = 0; t < AMX_TOK; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct kq_block *o = &blk[i];
        const char *y = x + i * (int64_t)sizeof(block_q8_K) + offsetof(block_q8_K, qs);
        __m512i sumi[AMX_TOK];
        for (int t = 0; t < AMX_TOK; t++) sumi[t] = _mm512_setzero_si512();
        for (int j = 0; j < n_sub; j += 4) {
            KQ_AMX_DP(0, 4, 5, j);
            KQ_AMX_DP(1, 6, 7, j + 1);
            KQ_AMX_DP(2, 4, 5, j + 2);
            KQ_AMX_DP(3, 6, 7, j + 3);
            AMX_STORE(mode, 0, c[0], 64);
            AMX_STORE(mode, 1, c[1], 64);
            AMX_STORE(mode, 2, c[2], 64);
            AMX_STORE(mode, 3, c[3], 64);
            for (int b = 0; b < 4; b++) {
                const __m512i sc = _mm512_loadu_si512(o->sc[j + b]);
                for (int t = 0; t < AMX_TOK; t++)
                    sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(_mm512_load_si512(c[b][t]), sc));
            }
        }
        for (int t = 0; t < AMX_TOK; t++) {
            const block_q8_K *yt = (const block_q8_K *)(x + t * x_row) + i;
            acc[t] = _mm512_add_ps(acc[t], kq_step(o, yt, sumi[t], form));
        }
    }
    for (int t = 0; t < AMX_TOK; t++) _mm512_storeu_ps(out[t], acc[t]);
}

static void kq_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    const struct kq_job *j = ctx;
    const struct mm_args *a = j->a;
    const int swiglu = a->epilogue == MMV_SWIGLU;
    struct kq_block *s1 = j->scratch + (size_t)ith * (size_t)j->nb * (swiglu ? 2 : 1), *s2 = s1 + j->nb;
    if (j->amx) amx_begin(j->amx, j->form == KQ_Q6 ? 16 : 32); /* a sub-block's values */
    for (int64_t rb = r0; rb < r1; rb += KQ_ROWS) {
        const int nr = (int)(r1 - rb < KQ_ROWS ? r1 - rb : KQ_ROWS);
        /* a strip's first row; its blocks one row apart, or with r16 one strip block apart */
        const size_t at = j->r16 ? (size_t)(rb / KQ_ROWS) * j->strip_bytes : (size_t)rb * j->w_row;
        const size_t bstride = j->r16 ? j->strip_bytes / (size_t)j->nb : quant_row_bytes(cpu_r16_base(a->type), QK_K);
        const int r16 = j->r16 ? cpu_r16_base(a->type) : 0;
        j->pack((const char *)a->w + at, j->w_row, nr, j->nb, bstride, r16, s1);
        if (swiglu) j->pack((const char *)a->w2 + at, j->w_row, nr, j->nb, bstride, r16, s2);
        int64_t tb = 0;
        for (; j->amx && a->n_tokens - tb >= AMX_TOK; tb += AMX_TOK) {
            const char *x = (const char *)a->xq + tb * j->x_row;
            float g[AMX_TOK][KQ_ROWS], u[AMX_TOK][KQ_ROWS];
            kq_tile_amx(j->amx, s1, j->nb, x, j->x_row, j->form, g);
            if (swiglu) kq_tile_amx(j->amx, s2, j->nb, x, j->x_row, j->form, u);
            mm_strip_out(a, tb, KQ_TOK, rb, nr, g, u);
            mm_strip_out(a, tb + KQ_TOK, KQ_TOK, rb, nr, g + KQ_TOK, u + KQ_TOK);
        }
        for (; tb < a->n_tokens; tb += KQ_TOK) {
            const int nt = (int)(a->n_tokens - tb < KQ_TOK ? a->n_tokens - tb : KQ_TOK);
            const char *x = (const char *)a->xq + tb * j->x_row;
            float g[KQ_TOK][KQ_ROWS], u[KQ_TOK][KQ_ROWS];
            kq_tile_n(s1, j->nb, x, j->x_row, nt, j->form, g);
            if (swiglu) kq_tile_n(s2, j->nb, x, j->x_row, nt, j->form, u);
            mm_strip_out(a, tb, nt, rb, nr, g, u);
        }
    }
    if (j->amx) amx_end(j->amx);
}

int cpu_mm_kq_takes(const struct mm_args *a) {
    if (a->type != INFER_TYPE_Q4_K && a->type != INFER_TYPE_Q5_K && a->type != INFER_TYPE_Q6_K &&
        a->type != INFER_TYPE_IQ4_XS)
        return 0;
    if (!cpu_isa_avx512_variant(a->variant)) return 0;
    if (!cpu_isa_has(CPU_ISA_AVX512) || a->n_tokens < KQ_MIN_TOKENS) return 0;
    /* the gathers index rows with int32 byte offsets */
    return quant_row_bytes(a->type, a->n_in) * KQ_ROWS < (size_t)INT32_MAX;
}

infer_status cpu_mm_kq(const struct mm_args *a, struct pool *p) {
    const int64_t nb = a->n_in / QK_K;
    const size_t per = (size_t)nb * (a->epilogue == MMV_SWIGLU ? 2 : 1);
    char *raw = xmalloc(sizeof(struct kq_block) * per * (size_t)pool_threads(p) + 64);
    if (!raw) return INFER_OOM("cpu_mm_kq scratch");
    const int32_t type = cpu_r16_base(a->type);
    struct kq_job j = {.a = a, .w_row = quant_row_bytes(type, a->n_in), .x_row = cpu_act_row_bytes(type, a->n_in),
                       .nb = nb, .r16 = cpu_r16_is(a->type), .strip_bytes = cpu_r16_bytes(type, a->n_in, KQ_ROWS),
                       .scratch = (struct kq_block *)(raw + (64 - (uintptr_t)raw % 64)), .amx = cpu_amx_for(a->variant)};
    switch (type) {
    case INFER_TYPE_Q4_K: j.form = KQ_K4, j.pack = kq_pack_q4_k; break;
    case INFER_TYPE_Q5_K: j.form = KQ_K4, j.pack = kq_pack_q5_k; break;
    case INFER_TYPE_Q6_K: j.form = KQ_Q6, j.pack = kq_pack_q6_k; break;
    default: j.form = KQ_IQ4, j.pack = kq_pack_iq4_xs; break;
    }
    pool_for(p, a->n_out, KQ_ROWS, kq_rows, &j);
    xfree(raw);
    return INFER_OK;
}

#else /* not x86-64: the dot loop of cpu_mm serves */
int cpu_mm_kq_takes(const struct mm_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_mm_kq(const struct mm_args *a, struct pool *p) {
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_kq: weight type %d: no GEMM on this architecture", a->type);
}
#endif
