/* mm_strip: what the two strip GEMMs (mm_kq.c for K-quants and IQ4_XS, mm_q32.c for the 32-value types) share: the
 * tile of MM_STRIP_TOK tokens x MM_STRIP_ROWS weight rows one vpdpbusd sweep yields, its epilogue into y, and the
 * packers' row index and codebook table.
 * Included by x86-64 code only. */
#ifndef INFER_CPU_MM_STRIP_H
#define INFER_CPU_MM_STRIP_H

#include <immintrin.h>

#include "cpu.h"

enum { MM_STRIP_ROWS = 16, MM_STRIP_TOK = 8 };

#define MM_STRIP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))

/* dword offsets of a strip's 16 rows w_row bytes apart: one gather reads a 4-byte piece of each row's block */
MM_STRIP_AVX512 static inline __m512i mm_strip_row_index(size_t w_row) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32((int)w_row));
}

/* a 16-entry codebook + 128 as unsigned bytes in every 128-bit lane, for shuffle_epi8 of 4-bit codes */
MM_STRIP_AVX512 static inline __m512i mm_strip_codebook_u8(const int8_t *kv) {
    return _mm512_broadcast_i32x4(_mm_add_epi8(_mm_loadu_si128((const __m128i *)kv), _mm_set1_epi8((char)128)));
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

#endif
