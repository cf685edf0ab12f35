/* mm_strip: what the strip GEMMs (mm_kq.c for K-quants and IQ4_XS, mm_q32.c for the 32-value types, mm_iq.c) and
 * the load-time strips (mm_r16.c) share: the tile of MM_STRIP_TOK tokens x MM_STRIP_ROWS weight rows one vpdpbusd
 * sweep yields, its epilogue into y, a token's 4 codes broadcast, the packers' row index and codebook table, and the
 * codes and scales of a 32-value strip unit, the AVX2 kernels' broadcast and epilogue; and the bf16 load and rounding of
 * mmv.c's dot and mm_f.c's GEMM.
 * Included by x86-64 code only. */
#ifndef INFER_CPU_MM_STRIP_H
#define INFER_CPU_MM_STRIP_H

#include <immintrin.h>
#include <string.h>

#include "cpu.h"
#include "mm_r16.h"
#include "quant.h"

enum { MM_STRIP_ROWS = 16, MM_STRIP_TOK = 8 };

#define MM_STRIP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* the 4 bytes at p in every dword lane of a 256-bit vector (the AVX2 kernels' broadcast token codes) */
__attribute__((target("avx2"))) static inline __m256i mm_strip_x4_256(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* the 4 bytes at p (a token's 4 activation codes) in every dword lane, vpdpbusd's signed operand */
MM_STRIP_AVX512 static inline __m512i mm_strip_x4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* 16 bf16 values as f32 */
MM_STRIP_AVX512 static inline __m512 mm_strip_load_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* f32 rounded to bf16 (to nearest, ties to even, as ggml's conversion for every non-NaN value) and back */
MM_STRIP_AVX512 static inline __m512 mm_strip_round_bf16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

/* dword offsets of a strip's 16 rows w_row bytes apart: one gather reads a 4-byte piece of each row's block */
MM_STRIP_AVX512 static inline __m512i mm_strip_row_index(size_t w_row) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32((int)w_row));
}

/* a 16-entry codebook + 128 as unsigned bytes in every 128-bit lane, for shuffle_epi8 of 4-bit codes */
MM_STRIP_AVX512 static inline __m512i mm_strip_codebook_u8(const int8_t *kv) {
    return _mm512_broadcast_i32x4(_mm_add_epi8(_mm_loadu_si128((const __m128i *)kv), _mm_set1_epi8((char)128)));
}

/* A 32-value type's strip unit (mm_r16.h's layout, vectors from u): the unsigned codes of block e's elements 4g..4g+3
 * for g = u (lo) and g = u + 4 (hi) in the 16 lanes, as mm_q32.c's GEMM and mm_r16.c's kernels multiply them: the
 * nibbles, Q5_0 / Q5_1's fifth bit from qh (its 4 bits of a group spread to bit 4 of 4 bytes by one table lookup),
 * IQ4_NL / MXFP4 through their codebook + 128 (kv). Not Q8_0, whose codes are stored whole. */
MM_STRIP_AVX512 static inline void mm_strip_q32_nibbles(int32_t type, const char *unit, int e, int u, __m512i kv,
                                                         __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i w = _mm512_loadu_si512((const void *)(unit + 64 * (cpu_r16_q32_qs(type) + 2 * u + e)));
    *lo = _mm512_and_si512(w, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi32(w, 4), m4);
    if (cpu_r16_q32_q5(type)) {
        /* spread[n]: bit k of n at bit 4 of byte k */
        const __m512i spread = _mm512_set_epi32(0x10101010, 0x10101000, 0x10100010, 0x10100000, 0x10001010, 0x10001000,
                                                0x10000010, 0x10000000, 0x00101010, 0x00101000, 0x00100010, 0x00100000,
                                                0x00001010, 0x00001000, 0x00000010, 0x00000000);
        const __m512i nib = _mm512_set1_epi32(0xF);
        const __m512i qh = _mm512_loadu_si512((const void *)(unit + 64 * (cpu_r16_q32_qh(type) + e)));
        *lo = _mm512_or_si512(*lo, _mm512_permutexvar_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 4 * u), nib), spread));
        *hi = _mm512_or_si512(*hi, _mm512_permutexvar_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 4 * u + 16), nib),
                                                            spread));
    }
    if (type == INFER_TYPE_IQ4_NL || type == INFER_TYPE_MXFP4) {
        *lo = _mm512_shuffle_epi8(kv, *lo);
        *hi = _mm512_shuffle_epi8(kv, *hi);
    }
}

/* The codebook + 128 of a 32-value type with one (IQ4_NL, MXFP4), else zero. */
MM_STRIP_AVX512 static inline __m512i mm_strip_q32_book(int32_t type) {
    if (type == INFER_TYPE_IQ4_NL) return mm_strip_codebook_u8(blocks_kvalues_iq4nl);
    if (type == INFER_TYPE_MXFP4) return mm_strip_codebook_u8(blocks_kvalues_mxfp4);
    return _mm512_setzero_si512();
}

/* A 32-value strip unit's block e scales of the 16 rows as f32: d (MXFP4: blocks_e8m0_half of its exponent) and
 * Q4_1 / Q5_1's m (else zero). */
MM_STRIP_AVX512 static inline void mm_strip_q32_scales(int32_t type, const char *unit, int e, __m512 *d, __m512 *m) {
    if (cpu_r16_q32_min(type)) {
        const __m512i dm = _mm512_loadu_si512((const void *)(unit + 64 * e));
        *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
        *m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
        return;
    }
    const __m256i h = _mm256_loadu_si256((const __m256i *)(unit + 32 * e));
    *m = _mm512_setzero_ps();
    if (type != INFER_TYPE_MXFP4) {
        *d = _mm512_cvtph_ps(h);
        return;
    }
    /* 2^(e-128): exponent bits e - 1, or for e = 0, 1 the subnormals 2^-128, 2^-127 */
    const __m512i x = _mm512_cvtepu16_epi32(h);
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(x, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), x);
    *d = _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(x, _mm512_set1_epi32(2)), normal, sub));
}

/* The tile's nt tokens (from tb) into y's rows rb..rb+nr: g, or silu(g)·u (MMV_SWIGLU), plus add (MMV_ADD);
 * one masked vector store per token. g is overwritten. */
MM_STRIP_AVX512 static inline void
mm_strip_out(const struct mm_args *a, int64_t tb, int nt, int64_t rb, int nr, float g[MM_STRIP_TOK][MM_STRIP_ROWS],
             const float u[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nt; t++) {
        const int64_t at = (tb + t) * a->n_out + rb;
        if (a->epilogue == MMV_SWIGLU)
            for (int r = 0; r < nr; r++) g[t][r] = cpu_silu(g[t][r]) * u[t][r];
        __m512 s = _mm512_loadu_ps(g[t]);
        if (a->epilogue == MMV_ADD) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(live, a->add + at));
        _mm512_mask_storeu_ps(a->y + at, live, s);
    }
}

/* mm_strip_out without AVX-512 (the AVX2 kernels): the same values, element by element */
static inline void mm_strip_out_c(const struct mm_args *a, int64_t tb, int nt, int64_t rb, int nr,
                                  const float g[MM_STRIP_TOK][MM_STRIP_ROWS], const float u[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) {
            const int64_t at = (tb + t) * a->n_out + rb + r;
            float v = a->epilogue == MMV_SWIGLU ? cpu_silu(g[t][r]) * u[t][r] : g[t][r];
            if (a->epilogue == MMV_ADD) v = v + a->add[at];
            a->y[at] = v;
        }
}

#endif
