/* mm_f: the prefill GEMM for float weights (F32, F16, BF16) on AVX-512 and AVX2, the twin of mm_kq.c / mm_q32.c for the
 * quantised types.
 *
 * Why: cpu_mm's row-by-row dots convert a row's weights and round the token's activations once per (row, token);
 * a 512-token prompt converted every F16 / BF16 weight 512 times. Here the activations are rounded once per call,
 * and a register tile of MF_ROWS rows x MF_TOK tokens converts each weight vector once for MF_TOK tokens. One
 * token (decode) keeps the dots.
 *
 * Layout: the file's rows as they are. A float row already is what this GEMM reads (16 contiguous values per
 * vector), so nothing is repacked at load: a repacked copy could only widen F16 / BF16 to f32, twice the memory.
 *
 * Math: each (row, token) keeps the two 16-lane accumulators of mmv.c's AVX-512 dot (elements 32i + j and
 * 32i + 16 + j in lane j), fed by the same fused multiply-adds in the same order, and ends in the same reduction
 * (the two added, then _mm512_reduce_add_ps, then + 0.0f for the dot's empty tail), so every element equals the dot
 * bit for bit and batching never changes a result (test-ops checks it). Rows of a length that is no multiple of 32
 * (the dot's AVX2 tail) keep the dots.
 *
 * AVX2 (a CPU without AVX-512, or a->variant): tiles of MF2_ROWS x MF2_TOK on 8 lanes, each (row, token) with the
 * two accumulators of mmv.c's AVX2 dot (elements 16i + j and 16i + 8 + j) and its horizontal sum, so the AVX2 dot's
 * bits; rows of a multiple of 16 values.
 */
#include <string.h>

#include "mm_f.h"
#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "mm_strip.h"

#define MF_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define MF_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MF_INLINE static inline __attribute__((always_inline))

/* A tile: 4 rows x 3 tokens x 2 accumulators = 24 of the 32 vector registers. MF_CHUNK_BYTES: the rounded
 * activations one sweep over the rows reuses, about half of a Zen 4 / Sapphire Rapids L2. */
enum { MF_ROWS = 4, MF_TOK = 3, MF_CHUNK_BYTES = 512 * 1024 };
/* AVX2: 2 rows x 3 tokens x 2 accumulators = 12 of the 16 vector registers */
enum { MF2_ROWS = 2, MF2_TOK = 3 };

struct mf_job {
    const struct mm_args *a;
    const float *xr; /* n_tokens x n_in activations rounded as the dot rounds them (F32: a->x itself) */
    size_t w_row;    /* bytes per weight row */
    int64_t chunk;   /* tokens per sweep over the rows */
    int avx2;        /* the AVX2 tiles */
};

/* 16 weights of row w from element i as f32 */
MF_AVX512 MF_INLINE __m512 mf_load(int32_t type, const char *w, int64_t i) {
    if (type == INFER_TYPE_F32) return _mm512_loadu_ps((const float *)w + i);
    if (type == INFER_TYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i)));
    return mm_strip_load_bf16((const uint16_t *)w + i);
}

/* out[t][r] = dot(row r, token t) for nr <= MF_ROWS rows and nt <= MF_TOK tokens (constants in every caller) */
MF_AVX512 MF_INLINE void mf_tile(int32_t type, const char *w, size_t w_row, int nr, const float *x, int64_t n_in,
                                 int nt, float out[MF_TOK][MF_ROWS]) {
    __m512 acc[MF_ROWS][MF_TOK][2];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) _Pragma("GCC unroll 3") for (int t = 0; t < nt; t++)
        acc[r][t][0] = acc[r][t][1] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n_in; i += 32) {
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            const __m512 w0 = mf_load(type, w + r * w_row, i), w1 = mf_load(type, w + r * w_row, i + 16);
            _Pragma("GCC unroll 3") for (int t = 0; t < nt; t++) {
                acc[r][t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + t * n_in + i), acc[r][t][0]);
                acc[r][t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + t * n_in + i + 16), acc[r][t][1]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) _Pragma("GCC unroll 3") for (int t = 0; t < nt; t++)
        out[t][r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][t][0], acc[r][t][1])) + 0.0f;
}

#define MF_TILE_CASE(t, r, n)                                                                                      \
    case (r) * 8 + (n):                                                                                            \
        mf_tile(t, w, w_row, r, x, n_in, n, out);                                                                  \
        break;
#define MF_TILE_ROWS(t, r) MF_TILE_CASE(t, r, 1) MF_TILE_CASE(t, r, 2) MF_TILE_CASE(t, r, 3)
#define MF_TILE_TYPE(t)                                                                                            \
    case t:                                                                                                        \
        switch (nr * 8 + nt) {                                                                                     \
            MF_TILE_ROWS(t, 1)                                                                                     \
            MF_TILE_ROWS(t, 2)                                                                                     \
            MF_TILE_ROWS(t, 3)                                                                                     \
            MF_TILE_ROWS(t, 4)                                                                                     \
        default:                                                                                                   \
            break;                                                                                                 \
        }                                                                                                          \
        break;

MF_AVX512 static void mf_tile_n(int32_t type, const char *w, size_t w_row, int nr, const float *x, int64_t n_in, int nt,
                                float out[MF_TOK][MF_ROWS]) {
    switch (type) {
        MF_TILE_TYPE(INFER_TYPE_F32)
        MF_TILE_TYPE(INFER_TYPE_F16)
        MF_TILE_TYPE(INFER_TYPE_BF16)
    default:
        break;
    }
}

/* 8 weights of row w from element i as f32 */
MF_AVX2 MF_INLINE __m256 mf2_load(int32_t type, const char *w, int64_t i) {
    if (type == INFER_TYPE_F32) return _mm256_loadu_ps((const float *)w + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (type == INFER_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* mmv.c's mmv_hsum: the two 128-bit halves added, then pairs, then the last two */
MF_AVX2 MF_INLINE float mf2_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* out[t][r] = dot(row r, token t) for nr <= MF2_ROWS rows and nt <= MF2_TOK tokens (constants in every caller) */
MF_AVX2 MF_INLINE void mf2_tile(int32_t type, const char *w, size_t w_row, int nr, const float *x, int64_t n_in, int nt,
                             float out[MF_TOK][MF_ROWS]) {
    __m256 acc[MF2_ROWS][MF2_TOK][2];
    _Pragma("GCC unroll 2") for (int r = 0; r < nr; r++) _Pragma("GCC unroll 3") for (int t = 0; t < nt; t++)
        acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n_in; i += 16) {
        _Pragma("GCC unroll 2") for (int r = 0; r < nr; r++) {
            const __m256 w0 = mf2_load(type, w + r * w_row, i), w1 = mf2_load(type, w + r * w_row, i + 8);
            _Pragma("GCC unroll 3") for (int t = 0; t < nt; t++) {
                acc[r][t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * n_in + i), acc[r][t][0]);
                acc[r][t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * n_in + i + 8), acc[r][t][1]);
            }
        }
    }
    _Pragma("GCC unroll 2") for (int r = 0; r < nr; r++) _Pragma("GCC unroll 3") for (int t = 0; t < nt; t++)
        out[t][r] = mf2_hsum(_mm256_add_ps(acc[r][t][0], acc[r][t][1]));
}

#define MF2_TILE_CASE(t, r, n)                                                                                     \
    case (r) * 8 + (n):                                                                                            \
        mf2_tile(t, w, w_row, r, x, n_in, n, out);                                                                 \
        break;
#define MF2_TILE_ROWS(t, r) MF2_TILE_CASE(t, r, 1) MF2_TILE_CASE(t, r, 2) MF2_TILE_CASE(t, r, 3)
#define MF2_TILE_TYPE(t)                                                                                           \
    case t:                                                                                                        \
        switch (nr * 8 + nt) {                                                                                     \
            MF2_TILE_ROWS(t, 1)                                                                                    \
            MF2_TILE_ROWS(t, 2)                                                                                    \
        default:                                                                                                   \
            break;                                                                                                 \
        }                                                                                                          \
        break;

MF_AVX2 static void mf2_tile_n(int32_t type, const char *w, size_t w_row, int nr, const float *x, int64_t n_in, int nt,
                           float out[MF_TOK][MF_ROWS]) {
    switch (type) {
        MF2_TILE_TYPE(INFER_TYPE_F32)
        MF2_TILE_TYPE(INFER_TYPE_F16)
        MF2_TILE_TYPE(INFER_TYPE_BF16)
    default:
        break;
    }
}

/* y's rows r0..r1 for every token: the tokens chunk by chunk, each chunk swept over the rows a tile at a time */
static void mf_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct mf_job *j = ctx;
    const struct mm_args *a = j->a;
    /* fewer tokens than a tile (a 2-token verification): one row at a time, as the dots stream (4 rows read side by
     * side defeat the hardware prefetch: Qwen3-0.6B F16 one-token decode 31 -> 17 t/s on Zen 4) */
    const int rows = a->n_tokens < MF_TOK ? 1 : j->avx2 ? MF2_ROWS : MF_ROWS;
    const int tok = j->avx2 ? MF2_TOK : MF_TOK;
    for (int64_t c0 = 0; c0 < a->n_tokens; c0 += j->chunk) {
        const int64_t c1 = c0 + j->chunk < a->n_tokens ? c0 + j->chunk : a->n_tokens;
        for (int64_t rb = r0; rb < r1; rb += rows) {
            const int nr = (int)(r1 - rb < rows ? r1 - rb : rows);
            for (int64_t tb = c0; tb < c1; tb += tok) {
                const int nt = (int)(c1 - tb < tok ? c1 - tb : tok);
                const float *x = j->xr + tb * a->n_in;
                const char *w = (const char *)a->w + rb * (int64_t)j->w_row;
                const char *w2 = a->w2 ? (const char *)a->w2 + rb * (int64_t)j->w_row : NULL;
                float g[MF_TOK][MF_ROWS], u[MF_TOK][MF_ROWS];
                if (j->avx2) {
                    mf2_tile_n(a->type, w, j->w_row, nr, x, a->n_in, nt, g);
                    if (a->epilogue == MMV_SWIGLU) mf2_tile_n(a->type, w2, j->w_row, nr, x, a->n_in, nt, u);
                } else {
                    mf_tile_n(a->type, w, j->w_row, nr, x, a->n_in, nt, g);
                    if (a->epilogue == MMV_SWIGLU) mf_tile_n(a->type, w2, j->w_row, nr, x, a->n_in, nt, u);
                }
                for (int t = 0; t < nt; t++)
                    for (int r = 0; r < nr; r++) { /* mm.c's epilogue, step for step */
                        const int64_t at = (tb + t) * a->n_out + rb + r;
                        float s = g[t][r];
                        if (a->epilogue == MMV_SWIGLU) s = cpu_silu(s) * u[t][r];
                        if (a->epilogue == MMV_ADD) s += a->add[at];
                        a->y[at] = s;
                    }
            }
        }
    }
}

/* the activations of tokens t0..t1 rounded as the AVX-512 dot rounds them: F16 to f16 (cvtps_ph, to nearest even),
 * BF16 to bf16 (mm_strip_round_bf16, the dot's own) */
MF_AVX512 static void mf_round_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct mf_job *j = ctx;
    const struct mm_args *a = j->a;
    float *xr = (float *)j->xr;
    for (int64_t i = t0 * a->n_in; i < t1 * a->n_in; i += 16) {
        const __m512 v = _mm512_loadu_ps(a->x + i);
        const __m512 r = a->type == INFER_TYPE_F16 ? _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
                                                   : mm_strip_round_bf16(v);
        _mm512_storeu_ps(xr + i, r);
    }
}

/* the activations of tokens t0..t1 rounded as the AVX2 dot rounds them: F16 to f16 (cvtps_ph, to nearest even),
 * BF16 to bf16 (mmv.c's mmv_round_bf16: nearest even on the bits) */
MF_AVX2 static void mf2_round_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct mf_job *j = ctx;
    const struct mm_args *a = j->a;
    float *xr = (float *)j->xr;
    for (int64_t i = t0 * a->n_in; i < t1 * a->n_in; i += 8) {
        const __m256 v = _mm256_loadu_ps(a->x + i);
        __m256 r;
        if (a->type == INFER_TYPE_F16) {
            r = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
        } else {
            const __m256i u = _mm256_castps_si256(v);
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            const __m256i s = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
            r = _mm256_castsi256_ps(_mm256_and_si256(s, _mm256_set1_epi32((int)0xffff0000u)));
        }
        _mm256_storeu_ps(xr + i, r);
    }
}

int cpu_mm_f_takes(const struct mm_args *a) {
    const int32_t t = a->type;
    if (t != INFER_TYPE_F32 && t != INFER_TYPE_F16 && t != INFER_TYPE_BF16) return 0;
    if (cpu_isa_avx2_variant(a->variant))
        return cpu_isa_has(CPU_ISA_AVX2) && __builtin_cpu_supports("f16c") && a->n_tokens >= 2 && a->n_in % 16 == 0;
    if (!cpu_isa_avx512_variant(a->variant)) return 0;
    /* one token keeps the dots: this call's second pool hand-off (the rounding) cost more than rounding the token
     * once per row saves (Qwen3-0.6B F16 decode, Zen 4: 18-19 vs 22-28 t/s) */
    return cpu_isa_has(CPU_ISA_AVX512) && a->n_tokens >= 2 && a->n_in % 32 == 0;
}

infer_status cpu_mm_f(const struct mm_args *a, struct pool *p) {
    const int f32 = a->type == INFER_TYPE_F32; /* its activations are used as they are */
    float *xr = f32 ? NULL : xmalloc(sizeof(float) * (size_t)a->n_in * (size_t)a->n_tokens);
    if (!f32 && !xr) return INFER_OOM("cpu_mm_f's activations");
    int64_t chunk = MF_CHUNK_BYTES / (a->n_in * (int64_t)sizeof(float)) / MF_TOK * MF_TOK;
    struct mf_job j = {.a = a, .xr = f32 ? a->x : xr, .w_row = quant_row_bytes(a->type, a->n_in),
                       .chunk = chunk > MF_TOK ? chunk : MF_TOK, .avx2 = cpu_isa_avx2_variant(a->variant)};
    if (!f32) pool_for(p, a->n_tokens, 1, j.avx2 ? mf2_round_rows : mf_round_rows, &j);
    pool_for(p, a->n_out, MF_ROWS, mf_rows, &j);
    xfree(xr);
    return INFER_OK;
}

#else /* not x86-64: the dot loop of cpu_mm serves */
int cpu_mm_f_takes(const struct mm_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_mm_f(const struct mm_args *a, struct pool *p) {
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_f: weight type %d: no GEMM on this architecture", a->type);
}
#endif
