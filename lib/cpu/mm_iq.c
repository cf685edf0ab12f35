/* mm_iq: the prefill GEMM for the lattice and ternary types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M,
 * TQ1_0, TQ2_0) and Q2_K / Q3_K on AVX-512 VNNI, beside mm_kq.c (Q4_K-Q6_K, IQ4_XS) and mm_q32.c (32-value types).
 *
 * Why: their dots spend most of their time building the weight vectors from the grids (mmv_iq.c), once per token
 * in cpu_mm's row-by-row loop. Here each worker unpacks a strip of IQ_ROWS = 16 weight rows once per call into
 * its scratch and sweeps every token over it, so the grid work is paid once per call instead of once per token.
 *
 * Repacked strip, per block (struct iq_strip): w[p] = 64 bytes, the int16 pair (2p, 2p+1) of each of the 16 rows,
 * each value ls_g * v (blocks_iq.h's integer form with the group's scale folded in: |ls v| <= 31 * 62 fits int16),
 * and the rows' block factors f. Activations: the Q8_K codes widened to int16 once per call. vpdpwssd of a
 * repacked vector with a token's broadcast pair adds both products into each row's int32 lane.
 *
 * Q2_K's mins: per block the rows' 16 mins as int16 pairs against the token's Q8_K bsums, a second sum.
 *
 * Math: per block the exact integer sum Σ ls_g v x (the same integer as the dots'), then (f · d_x) · sumi added in
 * block order (Q2_K: minus (fm · d_x) · Σ m bsums): every element equals the scalar dots (and the SIMD dots cpu_mm
 * takes otherwise) bit for bit, whatever the batching (test-ops).
 *
 * AVX2 (a CPU without AVX-512 VNNI, or a->variant): the same strips read as two halves of 8 rows, vpmaddwd in place
 * of vpdpwssd (the same two products into each row's int32 lane) then an add, 4 tokens a sweep; the same f32 steps,
 * so the same bits.
 */
#include <stddef.h>
#include <string.h>

#include "mm_iq.h"
#include "mm_r16.h"
#include "mmv_iq.h"
#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "mm_strip.h"

#define IQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define IQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define IQ_INLINE static inline __attribute__((always_inline))

/* MIN_TOKENS: from 3 tokens one unpacking per call beats one per token (the dots unpack each time); Q2_K / Q3_K,
 * whose dots are cheap, from 6 as mm_q32's */
enum { IQ_ROWS = MM_STRIP_ROWS, IQ_TOK = MM_STRIP_TOK, IQ_MIN_TOKENS = 3, IQ_PAIRS = QK_K / 2, IQ2_TOK = 4 };

struct iq_strip {
    int16_t w[IQ_PAIRS][IQ_ROWS][2];
    float f[IQ_ROWS];
    int16_t m[8][IQ_ROWS][2]; /* Q2_K: the 16 mins as pairs */
    float fm[IQ_ROWS];
};

struct iq_job {
    const struct mm_args *a;
    cpu_iq_unpack_fn unpack;
    int has_min;              /* Q2_K */
    int32_t r16;              /* the file type when repacked at load (mm_r16.c), else 0 */
    size_t w_row, x_row;
    size_t strip_bytes;       /* repacked: bytes per strip of 16 rows */
    int64_t nb;               /* blocks per row */
    struct iq_strip *scratch; /* per worker: nb blocks, twice for SwiGLU */
    int32_t *x16;             /* n_tokens x n_in / 2: the codes as int16 pairs */
    float *dx;                /* n_tokens x nb: the activation blocks' d */
    int avx2;                 /* the AVX2 tiles (no AVX-512 here, or asked for) */
};

/* a token's block's bsums as 8 int16 pairs */
static inline const int32_t *iq_bsums(const struct iq_job *j, int64_t t, int64_t i) {
    const block_q8_K *x = (const block_q8_K *)((const char *)j->a->xq + t * j->x_row);
    return (const int32_t *)(const void *)x[i].bsums;
}

/* nr rows of w (the rest zero) into nb repacked blocks; r16 (Q2_K / Q3_K repacked at load, mm_r16.c): w is their
 * strip, each row's block read back through cpu_r16_unit. */
static void iq_pack(cpu_iq_unpack_fn unpack, int32_t r16, const char *w, size_t w_row, int nr, int64_t nb,
                    struct iq_strip *out) {
    struct iq_block u;
    char blk[sizeof(block_q3_K) + 2];
    for (int64_t i = 0; i < nb; i++) {
        struct iq_strip *o = &out[i];
        for (int r = 0; r < IQ_ROWS; r++) {
            if (r >= nr) {
                for (int p = 0; p < IQ_PAIRS; p++) o->w[p][r][0] = o->w[p][r][1] = 0;
                for (int p = 0; p < 8; p++) o->m[p][r][0] = o->m[p][r][1] = 0;
                o->f[r] = o->fm[r] = 0.0f;
                continue;
            }
            if (r16) {
                cpu_r16_unit(r16, w, i, r, blk);
                unpack(blk, 0, &u);
            } else {
                unpack(w + (size_t)r * w_row, i, &u);
            }
            for (int p = 0; p < IQ_PAIRS; p++) {
                const int ls = u.ls[p / 4];
                o->w[p][r][0] = (int16_t)(ls * u.v[2 * p]);
                o->w[p][r][1] = (int16_t)(ls * u.v[2 * p + 1]);
            }
            for (int p = 0; p < 8; p++) o->m[p][r][0] = (int16_t)u.m[2 * p], o->m[p][r][1] = (int16_t)u.m[2 * p + 1];
            o->f[r] = u.f;
            o->fm[r] = u.fm;
        }
    }
}

/* the activations of tokens t0..t1 as int16 pairs, and each block's d */
IQ_AVX512 static void iq_act_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct iq_job *j = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const block_q8_K *x = (const block_q8_K *)((const char *)j->a->xq + t * j->x_row);
        int16_t *o = (int16_t *)(j->x16 + t * j->nb * IQ_PAIRS);
        for (int64_t i = 0; i < j->nb; i++) {
            for (int e = 0; e < QK_K; e += 32)
                _mm512_storeu_si512(o + i * QK_K + e, _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(x[i].qs + e))));
            j->dx[t * j->nb + i] = x[i].d;
        }
    }
}

/* iq_act_rows on AVX2 */
IQ_AVX2 static void iq_act_rows_avx2(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct iq_job *j = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const block_q8_K *x = (const block_q8_K *)((const char *)j->a->xq + t * j->x_row);
        int16_t *o = (int16_t *)(j->x16 + t * j->nb * IQ_PAIRS);
        for (int64_t i = 0; i < j->nb; i++) {
            for (int e = 0; e < QK_K; e += 16)
                _mm256_storeu_si256((__m256i *)(o + i * QK_K + e), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x[i].qs + e))));
            j->dx[t * j->nb + i] = x[i].d;
        }
    }
}

/* out[t][r] = the dot of strip row r with token t (nt <= IQ_TOK and mins constants in every caller: the
 * accumulators stay in registers); bs: token t's block i's bsums pairs at bs + t * bs_tok + i * bs_blk. */
IQ_AVX512 IQ_INLINE void iq_tile(const struct iq_strip *blk, int64_t nb, const int32_t *x16, const float *dx,
                                 const int32_t *bs, int64_t bs_tok, int64_t bs_blk, int nt, int mins,
                                 float out[IQ_TOK][IQ_ROWS]) {
    const int64_t xs = nb * IQ_PAIRS; /* pairs per token */
    __m512 acc[IQ_TOK];
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct iq_strip *o = &blk[i];
        const int32_t *x = x16 + i * IQ_PAIRS;
        __m512i s[IQ_TOK], sm[IQ_TOK];
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) s[t] = sm[t] = _mm512_setzero_si512();
        for (int p = 0; p < IQ_PAIRS; p++) {
            const __m512i wv = _mm512_loadu_si512(o->w[p]);
            _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)
                s[t] = _mm512_dpwssd_epi32(s[t], wv, _mm512_set1_epi32(x[t * xs + p]));
        }
        if (mins)
            _Pragma("GCC unroll 8") for (int p = 0; p < 8; p++) {
                const __m512i mv = _mm512_loadu_si512(o->m[p]);
                _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)
                    sm[t] = _mm512_dpwssd_epi32(sm[t], mv, _mm512_set1_epi32(bs[t * bs_tok + i * bs_blk + p]));
            }
        const __m512 f = _mm512_loadu_ps(o->f), fm = _mm512_loadu_ps(o->fm);
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) {
            const __m512 d = _mm512_set1_ps(dx[t * nb + i]);
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(f, d), _mm512_cvtepi32_ps(s[t]));
            if (mins) v = _mm512_sub_ps(v, _mm512_mul_ps(_mm512_mul_ps(fm, d), _mm512_cvtepi32_ps(sm[t])));
            acc[t] = _mm512_add_ps(acc[t], v);
        }
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

#define IQ_TILE_CASE(n)                                                                                      \
    case n:                                                                                                  \
        if (mins) iq_tile(blk, nb, x16, dx, bs, bs_tok, bs_blk, n, 1, out);                                  \
        else iq_tile(blk, nb, x16, dx, bs, bs_tok, bs_blk, n, 0, out);                                       \
        break;

IQ_AVX512 static void iq_tile_n(const struct iq_strip *blk, int64_t nb, const int32_t *x16, const float *dx,
                                const int32_t *bs, int64_t bs_tok, int64_t bs_blk, int nt, int mins,
                                float out[IQ_TOK][IQ_ROWS]) {
    switch (nt) {
        IQ_TILE_CASE(1)
        IQ_TILE_CASE(2)
        IQ_TILE_CASE(3)
        IQ_TILE_CASE(4)
        IQ_TILE_CASE(5)
        IQ_TILE_CASE(6)
        IQ_TILE_CASE(7)
        IQ_TILE_CASE(8)
    default: break;
    }
}

/* iq_tile on AVX2 for rows 8h..8h+7 and nt <= IQ2_TOK tokens: the same integers and f32 steps on 8 lanes */
IQ_AVX2 IQ_INLINE void iq_tile_avx2(const struct iq_strip *blk, int64_t nb, const int32_t *x16, const float *dx,
                                    const int32_t *bs, int64_t bs_tok, int64_t bs_blk, int nt, int mins, int h,
                                    __m256 acc[IQ2_TOK]) {
    const int64_t xs = nb * IQ_PAIRS; /* pairs per token */
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct iq_strip *o = &blk[i];
        const int32_t *x = x16 + i * IQ_PAIRS;
        __m256i s[IQ2_TOK], sm[IQ2_TOK];
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) s[t] = sm[t] = _mm256_setzero_si256();
        for (int p = 0; p < IQ_PAIRS; p++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)o->w[p][8 * h]);
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++)
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(wv, _mm256_set1_epi32(x[t * xs + p])));
        }
        if (mins)
            _Pragma("GCC unroll 8") for (int p = 0; p < 8; p++) {
                const __m256i mv = _mm256_loadu_si256((const __m256i *)o->m[p][8 * h]);
                _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++)
                    sm[t] = _mm256_add_epi32(sm[t], _mm256_madd_epi16(mv, _mm256_set1_epi32(bs[t * bs_tok + i * bs_blk + p])));
            }
        const __m256 f = _mm256_loadu_ps(o->f + 8 * h), fm = _mm256_loadu_ps(o->fm + 8 * h);
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
            const __m256 d = _mm256_set1_ps(dx[t * nb + i]);
            __m256 v = _mm256_mul_ps(_mm256_mul_ps(f, d), _mm256_cvtepi32_ps(s[t]));
            if (mins) v = _mm256_sub_ps(v, _mm256_mul_ps(_mm256_mul_ps(fm, d), _mm256_cvtepi32_ps(sm[t])));
            acc[t] = _mm256_add_ps(acc[t], v);
        }
    }
}

#define IQ2_TILE_CASE(n)                                                                                     \
    case n:                                                                                                  \
        if (mins) iq_tile_avx2(blk, nb, x, d, b, bs_tok, bs_blk, n, 1, h, acc);                              \
        else iq_tile_avx2(blk, nb, x, d, b, bs_tok, bs_blk, n, 0, h, acc);                                   \
        break;

/* iq_tile_n on AVX2: nt <= IQ_TOK tokens, IQ2_TOK a sweep of each half */
IQ_AVX2 static void iq_tile_n_avx2(const struct iq_strip *blk, int64_t nb, const int32_t *x16, const float *dx,
                                   const int32_t *bs, int64_t bs_tok, int64_t bs_blk, int nt, int mins,
                                   float out[IQ_TOK][IQ_ROWS]) {
    for (int t0 = 0; t0 < nt; t0 += IQ2_TOK) {
        const int n = nt - t0 < IQ2_TOK ? nt - t0 : IQ2_TOK;
        const int32_t *x = x16 + t0 * nb * IQ_PAIRS, *b = bs + t0 * bs_tok;
        const float *d = dx + t0 * nb;
        for (int h = 0; h < 2; h++) {
            __m256 acc[IQ2_TOK];
            switch (n) {
                IQ2_TILE_CASE(1)
                IQ2_TILE_CASE(2)
                IQ2_TILE_CASE(3)
                IQ2_TILE_CASE(4)
            default: break;
            }
            for (int t = 0; t < n; t++) _mm256_storeu_ps(out[t0 + t] + 8 * h, acc[t]);
        }
    }
}

static void iq_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    const struct iq_job *j = ctx;
    const struct mm_args *a = j->a;
    const int swiglu = a->epilogue == MMV_SWIGLU;
    struct iq_strip *s1 = j->scratch + (size_t)ith * (size_t)j->nb * (swiglu ? 2 : 1), *s2 = s1 + j->nb;
    for (int64_t rb = r0; rb < r1; rb += IQ_ROWS) {
        const int nr = (int)(r1 - rb < IQ_ROWS ? r1 - rb : IQ_ROWS);
        const size_t at = j->r16 ? (size_t)(rb / IQ_ROWS) * j->strip_bytes : (size_t)rb * j->w_row;
        iq_pack(j->unpack, j->r16, (const char *)a->w + at, j->w_row, nr, j->nb, s1);
        if (swiglu) iq_pack(j->unpack, j->r16, (const char *)a->w2 + at, j->w_row, nr, j->nb, s2);
        for (int64_t tb = 0; tb < a->n_tokens; tb += IQ_TOK) {
            const int nt = (int)(a->n_tokens - tb < IQ_TOK ? a->n_tokens - tb : IQ_TOK);
            const int32_t *x = j->x16 + tb * j->nb * IQ_PAIRS;
            const float *dx = j->dx + tb * j->nb;
            /* bsums in units of int32 pairs: a token's row of Q8_K blocks, a block */
            const int32_t *bs = iq_bsums(j, tb, 0);
            const int64_t bs_tok = (int64_t)(j->x_row / 4), bs_blk = (int64_t)(sizeof(block_q8_K) / 4);
            float g[IQ_TOK][IQ_ROWS], u[IQ_TOK][IQ_ROWS];
            if (j->avx2) {
                iq_tile_n_avx2(s1, j->nb, x, dx, bs, bs_tok, bs_blk, nt, j->has_min, g);
                if (swiglu) iq_tile_n_avx2(s2, j->nb, x, dx, bs, bs_tok, bs_blk, nt, j->has_min, u);
                mm_strip_out_c(a, tb, nt, rb, nr, g, u);
                continue;
            }
            iq_tile_n(s1, j->nb, x, dx, bs, bs_tok, bs_blk, nt, j->has_min, g);
            if (swiglu) iq_tile_n(s2, j->nb, x, dx, bs, bs_tok, bs_blk, nt, j->has_min, u);
            mm_strip_out(a, tb, nt, rb, nr, g, u);
        }
    }
}

int cpu_mm_iq_takes(const struct mm_args *a) {
    if (!cpu_iq_unpacker(a->type)) return 0;
    const int k = a->type == INFER_TYPE_Q2_K || a->type == INFER_TYPE_Q3_K;
    if (a->n_tokens < (k ? 6 : IQ_MIN_TOKENS)) return 0;
    if (cpu_isa_avx2_variant(a->variant)) return cpu_isa_has(CPU_ISA_AVX2);
    return cpu_isa_avx512_variant(a->variant) && cpu_isa_has(CPU_ISA_AVX512);
}

infer_status cpu_mm_iq(const struct mm_args *a, struct pool *p) {
    const int64_t nb = a->n_in / QK_K;
    const size_t per = (size_t)nb * (a->epilogue == MMV_SWIGLU ? 2 : 1);
    const size_t strips = sizeof(struct iq_strip) * per * (size_t)pool_threads(p);
    const size_t xb = sizeof(int32_t) * (size_t)(nb * IQ_PAIRS) * (size_t)a->n_tokens;
    char *raw = xmalloc(strips + xb + sizeof(float) * (size_t)nb * (size_t)a->n_tokens + 64);
    if (!raw) return INFER_OOM("cpu_mm_iq scratch");
    struct iq_strip *scratch = (struct iq_strip *)(raw + (64 - (uintptr_t)raw % 64));
    const int32_t type = cpu_r16_base(a->type);
    struct iq_job j = {.a = a, .unpack = cpu_iq_unpacker(type), .has_min = type == INFER_TYPE_Q2_K,
                       .r16 = cpu_r16_is(a->type) ? type : 0, .w_row = quant_row_bytes(type, a->n_in),
                       .strip_bytes = cpu_r16_is(a->type) ? cpu_r16_bytes(type, a->n_in, IQ_ROWS) : 0,
                       .x_row = cpu_act_row_bytes(type, a->n_in), .nb = nb, .scratch = scratch,
                       .x16 = (int32_t *)((char *)scratch + strips), .avx2 = cpu_isa_avx2_variant(a->variant)};
    j.dx = (float *)((char *)j.x16 + xb);
    pool_for(p, a->n_tokens, 1, j.avx2 ? iq_act_rows_avx2 : iq_act_rows, &j);
    pool_for(p, a->n_out, IQ_ROWS, iq_rows, &j);
    xfree(raw);
    return INFER_OK;
}

#else /* not x86-64: the dot loop of cpu_mm serves */
int cpu_mm_iq_takes(const struct mm_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_mm_iq(const struct mm_args *a, struct pool *p) {
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_iq: weight type %d: no GEMM on this architecture", a->type);
}
#endif
