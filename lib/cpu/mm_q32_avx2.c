/* mm_q32_avx2: mm_q32.c's prefill GEMM for the 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) on
 * CPUs with AVX2 but no AVX-512 VNNI, the twin of mm_kq_avx2.c.
 *
 * Why: such a CPU otherwise multiplies a prompt by row-by-row dots (Q8_0, Q5_0, Q5_1) or the strips' 4-token sweeps
 * (Q4_0, Q4_1, IQ4_NL, MXFP4), unpacking every block again for every few tokens: Qwen3-0.6B Q8_0 prefill ran at
 * 0.5x llama.cpp's AVX2 build. Here each worker unpacks a strip of 16 rows once per call (gathered from the file's
 * rows, or loaded from the load-time strips) and sweeps all tokens over it, Q2_TOK at a time, a half of 8 rows per
 * sweep.
 *
 * Layout (struct q2_block): mm_q32.c's q32_block, vector g holding byte 4r+k = row r's value of element 4g+k, read
 * as two 8-row halves; d (and Q4_1 / Q5_1's m) per row. The values: Q4_0 / Q4_1 / Q5_0 / Q5_1 their unsigned codes
 * (vpmaddubsw's pair sums of at most 2·15·127 or 2·31·127 added in int16 over 8 or 4 groups, exact, then widened;
 * Q4_0 / Q5_0's offset 8 / 16 taken back by the activation table's c, as in mm_q32.c); Q8_0, IQ4_NL and MXFP4 their
 * signed values, multiplied as |w| · sign(x, w) (at most 2·128·127) and widened per group: exactly mm_q32.c's sum of
 * value + 128 minus its offset term, which is not subtracted here.
 *
 * Math: per block the exact integer sum and q32_step's f32 operations in block order, so every element is
 * bit-identical to the AVX-512 GEMM and the scalar dots (test-ops checks it).
 */
#include <stddef.h>
#include <string.h>

#include "mm_q32.h"
#include "mm_r16.h"
#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "mm_strip.h"

#define Q2 __attribute__((target("avx2,fma,f16c")))
#define Q2_INLINE static inline __attribute__((always_inline))

/* Q2_MIN_TOKENS: below it the dots or the strips' 4-token sweeps cost less than unpacking the strip once (llm-bench,
 * Qwen3-0.6B shape, 2 Zen 4 threads capped at AVX2, t/s GEMM vs without: Q4_0 pp8 121 vs 134, pp12 130 vs 118, pp32
 * 165 vs 105; Q8_0, whose gathers from the file's rows cost more: pp12 68 vs 86, pp16 78 vs 72, pp32 122 vs 84). */
enum { Q2_ROWS = MM_STRIP_ROWS, Q2_HALF = 8, Q2_TOK = 4, Q2_GROUPS = QK8_0 / 4, Q2_MIN_TOKENS = 12, Q2_MIN_TOKENS_Q8 = 16 };
/* how a type's values are multiplied: unsigned codes summed in int16 over 8 (4-bit) or 4 (5-bit) groups, or signed */
enum q2_form { Q2_U4, Q2_U5, Q2_SIGNED };

struct q2_block {
    uint8_t q[Q2_GROUPS][64];
    float d[Q2_ROWS], m[Q2_ROWS];
};

struct q2_job {
    const struct mm_args *a;
    int32_t type;               /* the file's type */
    size_t w_row, x_row, bs;    /* bs: bytes per block in the file */
    int64_t nb;                 /* blocks per row */
    size_t strip_bytes;         /* repacked at load (mm_r16.c): bytes per strip of 16 rows; 0: the file's rows */
    struct q2_block *scratch;   /* per worker: nb blocks, twice for SwiGLU */
    struct mm_q32_act *act;     /* n_tokens x nb */
    enum q2_form form;
    int q81;                    /* Q8_1 activations: the min term */
};

static enum q2_form q2_form_of(int32_t type) {
    if (type == INFER_TYPE_Q8_0 || type == INFER_TYPE_IQ4_NL || type == INFER_TYPE_MXFP4) return Q2_SIGNED;
    return cpu_r16_q32_q5(type) ? Q2_U5 : Q2_U4;
}

/* The signed codebook of IQ4_NL / MXFP4 in both 128-bit lanes (a pshufb table), else zero */
Q2 Q2_INLINE __m256i q2_book(int32_t type) {
    if (type != INFER_TYPE_IQ4_NL && type != INFER_TYPE_MXFP4) return _mm256_setzero_si256();
    const int8_t *kv = type == INFER_TYPE_MXFP4 ? blocks_kvalues_mxfp4 : blocks_kvalues_iq4nl;
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kv));
}

/* bit 4 of the codes of group g from 8 rows' qh words (mm_q32.c's q32_bit4 on 8 lanes) */
Q2 Q2_INLINE __m256i q2_bit4(__m256i qh, int g) {
    const __m256i nib = _mm256_and_si256(_mm256_srli_epi32(qh, 4 * g), _mm256_set1_epi32(0xF));
    const __m256i spread = _mm256_and_si256(_mm256_mullo_epi32(nib, _mm256_set1_epi32(0x204081)),
                                            _mm256_set1_epi32(0x01010101));
    return _mm256_slli_epi32(spread, 4);
}

/* Unpacks nb blocks of rows w, w + w_row, ..., nr of them (rows >= nr come out zero), half h at a time: a dword
 * gather per group. Q4/Q5 qs byte j holds element j (low nibble) and j + 16 (high): the dword at 4u is group u
 * (low) and 4 + u (high). */
Q2 static void q2_pack(int32_t type, size_t bs, const char *w, size_t w_row, int nr, int64_t nb, struct q2_block *out) {
    const int q8 = type == INFER_TYPE_Q8_0, q5 = cpu_r16_q32_q5(type), min = cpu_r16_q32_min(type);
    const size_t qs = q8 ? offsetof(block_q8_0, qs) : bs - QK8_0 / 2, qh = 2 * (size_t)(1 + min);
    const __m256i zero = _mm256_setzero_si256(), m4 = _mm256_set1_epi8(0x0F), kv = q2_book(type);
    for (int h = 0; h < 2; h++) {
        const __m256i r = _mm256_add_epi32(_mm256_set1_epi32(Q2_HALF * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i idx = _mm256_mullo_epi32(r, _mm256_set1_epi32((int)w_row));
        const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), r);
        for (int64_t i = 0; i < nb; i++) {
            const char *b = w + i * (int64_t)bs;
            struct q2_block *o = &out[i];
#define Q2_GATHER(off) _mm256_mask_i32gather_epi32(zero, (const int *)(b + (off)), idx, live, 1)
            if (q8) {
                for (int g = 0; g < Q2_GROUPS; g++) _mm256_storeu_si256((__m256i *)(o->q[g] + 32 * h), Q2_GATHER(qs + 4 * g));
            } else {
                const __m256i qhv = q5 ? Q2_GATHER(qh) : zero;
                for (int u = 0; u < Q2_GROUPS / 2; u++) {
                    const __m256i v = Q2_GATHER(qs + 4 * u);
                    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi32(v, 4), m4);
                    if (q5) {
                        lo = _mm256_or_si256(lo, q2_bit4(qhv, u));
                        hi = _mm256_or_si256(hi, q2_bit4(qhv, u + Q2_GROUPS / 2));
                    }
                    if (type == INFER_TYPE_IQ4_NL || type == INFER_TYPE_MXFP4) {
                        lo = _mm256_shuffle_epi8(kv, lo);
                        hi = _mm256_shuffle_epi8(kv, hi);
                    }
                    _mm256_storeu_si256((__m256i *)(o->q[u] + 32 * h), lo);
                    _mm256_storeu_si256((__m256i *)(o->q[u + Q2_GROUPS / 2] + 32 * h), hi);
                }
            }
            /* d first in every block, m next in Q4_1 / Q5_1; MXFP4's exponent byte as blocks_e8m0_half */
            int32_t dm[Q2_HALF];
            _mm256_storeu_si256((__m256i *)dm, Q2_GATHER(0));
#undef Q2_GATHER
            for (int k = 0; k < Q2_HALF; k++) {
                const uint32_t v = (uint32_t)dm[k];
                o->d[Q2_HALF * h + k] = type == INFER_TYPE_MXFP4 ? (Q2_HALF * h + k < nr ? blocks_e8m0_half((uint8_t)v) : 0.0f)
                                                                 : quant_f16_to_f32((uint16_t)v);
                o->m[Q2_HALF * h + k] = min ? quant_f16_to_f32((uint16_t)(v >> 16)) : 0.0f;
            }
        }
    }
}

/* The same blocks from a strip of mm_r16.c (the 4-bit types AVX2 repacks: Q4_0, Q4_1, IQ4_NL, MXFP4; mm_r16.h's
 * cpu_r16_q32_* layout): loads instead of gathers */
Q2 static void q2_pack_r16(int32_t type, const char *strip, int64_t nb, struct q2_block *out) {
    const size_t unit = 64 * (size_t)cpu_r16_q32_vectors(type);
    const int qs = cpu_r16_q32_qs(type), min = cpu_r16_q32_min(type);
    const __m256i m4 = _mm256_set1_epi8(0x0F), kv = q2_book(type);
    const int book = type == INFER_TYPE_IQ4_NL || type == INFER_TYPE_MXFP4;
    for (int64_t i = 0; i < nb; i++) {
        const char *b = strip + (i / 2) * (int64_t)unit;
        const int e = (int)(i % 2);
        struct q2_block *o = &out[i];
        for (int h = 0; h < 2; h++)
            for (int u = 0; u < Q2_GROUPS / 2; u++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(b + 64 * (qs + 2 * u + e) + 32 * h));
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi32(v, 4), m4);
                if (book) {
                    lo = _mm256_shuffle_epi8(kv, lo);
                    hi = _mm256_shuffle_epi8(kv, hi);
                }
                _mm256_storeu_si256((__m256i *)(o->q[u] + 32 * h), lo);
                _mm256_storeu_si256((__m256i *)(o->q[u + Q2_GROUPS / 2] + 32 * h), hi);
            }
        /* the header: Q4_1 vector e lane r d | m << 16; the others bytes 32e + 2r (MXFP4: the exponent byte) */
        for (int r = 0; r < Q2_ROWS; r++) {
            uint32_t v = 0;
            memcpy(&v, min ? b + 64 * e + 4 * r : b + 32 * e + 2 * r, min ? 4 : 2);
            o->d[r] = type == INFER_TYPE_MXFP4 ? blocks_e8m0_half((uint8_t)v) : quant_f16_to_f32((uint16_t)v);
            o->m[r] = min ? quant_f16_to_f32((uint16_t)(v >> 16)) : 0.0f;
        }
    }
}

/* A block's term of half h's rows for one token (its table entry ya) from the block's exact integers s: q32_step's
 * f32 operations (a signed form's s already lacks the offset the table's c takes back) */
Q2 Q2_INLINE __m256 q2_step(const struct q2_block *o, const struct mm_q32_act *ya, __m256i s, enum q2_form form,
                            int q81, int h) {
    const __m256 dd = _mm256_mul_ps(_mm256_loadu_ps(o->d + Q2_HALF * h), _mm256_set1_ps(ya->d));
    if (q81)
        return _mm256_add_ps(_mm256_mul_ps(dd, _mm256_cvtepi32_ps(s)),
                             _mm256_mul_ps(_mm256_loadu_ps(o->m + Q2_HALF * h), _mm256_set1_ps(ya->s)));
    if (form != Q2_SIGNED) s = _mm256_sub_epi32(s, _mm256_set1_epi32(ya->c));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(s), dd);
}

/* acc[t][lane r] = the dot of row 8h + r with token t (x + t·x_row, its table act + t·nb), nt <= Q2_TOK; nt, form
 * and q81 are constants in every caller */
Q2 Q2_INLINE void q2_tile(const struct q2_block *blk, int64_t nb, const char *x, size_t x_row,
                          const struct mm_q32_act *act, int nt, enum q2_form form, int q81, int h, __m256 acc[Q2_TOK]) {
    const size_t bs = q81 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t hdr = q81 ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
    const int run = form == Q2_U4 ? 8 : 4; /* int16 pair sums per widening */
    const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct q2_block *o = &blk[i];
        const char *y = x + i * (int64_t)bs + hdr;
        __m256i s[Q2_TOK], s16[Q2_TOK];
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) s[t] = s16[t] = zero;
        _Pragma("GCC unroll 8") for (int g = 0; g < Q2_GROUPS; g++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(o->q[g] + 32 * h));
            if (form == Q2_SIGNED) {
                const __m256i wa = _mm256_abs_epi8(w);
                _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
                    const __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(mm_strip_x4_256(y + t * x_row + 4 * g), w));
                    s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ones));
                }
                continue;
            }
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++)
                s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(w, mm_strip_x4_256(y + t * x_row + 4 * g)));
            if ((g + 1) % run) continue;
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
                s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(s16[t], ones));
                s16[t] = zero;
            }
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++)
            acc[t] = _mm256_add_ps(acc[t], q2_step(o, &act[t * nb + i], s[t], form, q81, h));
    }
}

#define Q2_TILE_CASE(n)                                                                                            \
    case n:                                                                                                        \
        if (form == Q2_SIGNED) q2_tile(blk, nb, xt, x_row, at, n, Q2_SIGNED, 0, h, acc);                           \
        else if (form == Q2_U5 && q81) q2_tile(blk, nb, xt, x_row, at, n, Q2_U5, 1, h, acc);                       \
        else if (form == Q2_U5) q2_tile(blk, nb, xt, x_row, at, n, Q2_U5, 0, h, acc);                              \
        else if (q81) q2_tile(blk, nb, xt, x_row, at, n, Q2_U4, 1, h, acc);                                        \
        else q2_tile(blk, nb, xt, x_row, at, n, Q2_U4, 0, h, acc);                                                 \
        break;

/* out[t][r] for nt <= MM_STRIP_TOK tokens (their table act, nb entries a token) and the strip's 16 rows */
Q2 static void q2_tiles(const struct q2_block *blk, int64_t nb, const char *x, size_t x_row,
                        const struct mm_q32_act *act, int nt, enum q2_form form, int q81,
                        float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    for (int t0 = 0; t0 < nt; t0 += Q2_TOK) {
        const int n = nt - t0 < Q2_TOK ? nt - t0 : Q2_TOK;
        const char *xt = x + t0 * x_row;
        const struct mm_q32_act *at = act + t0 * nb;
        for (int h = 0; h < 2; h++) {
            __m256 acc[Q2_TOK];
            switch (n) {
                Q2_TILE_CASE(1)
                Q2_TILE_CASE(2)
                Q2_TILE_CASE(3)
                Q2_TILE_CASE(4)
            default:
                break;
            }
            for (int t = 0; t < n; t++) _mm256_storeu_ps(out[t0 + t] + Q2_HALF * h, acc[t]);
        }
    }
}

/* the activation table for tokens t0..t1 */
static void q2_act_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct q2_job *j = ctx;
    mm_q32_act_fill(j->type, j->a->xq, j->x_row, j->nb, t0, t1, j->act);
}

static void q2_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    const struct q2_job *j = ctx;
    const struct mm_args *a = j->a;
    const int swiglu = a->epilogue == MMV_SWIGLU;
    struct q2_block *s1 = j->scratch + (size_t)ith * (size_t)j->nb * (swiglu ? 2 : 1), *s2 = s1 + j->nb;
    for (int64_t rb = r0; rb < r1; rb += Q2_ROWS) {
        const int nr = (int)(r1 - rb < Q2_ROWS ? r1 - rb : Q2_ROWS);
        if (j->strip_bytes) {
            const size_t at = (size_t)(rb / Q2_ROWS) * j->strip_bytes;
            q2_pack_r16(j->type, (const char *)a->w + at, j->nb, s1);
            if (swiglu) q2_pack_r16(j->type, (const char *)a->w2 + at, j->nb, s2);
        } else {
            q2_pack(j->type, j->bs, (const char *)a->w + rb * j->w_row, j->w_row, nr, j->nb, s1);
            if (swiglu) q2_pack(j->type, j->bs, (const char *)a->w2 + rb * j->w_row, j->w_row, nr, j->nb, s2);
        }
        for (int64_t tb = 0; tb < a->n_tokens; tb += MM_STRIP_TOK) {
            const int nt = (int)(a->n_tokens - tb < MM_STRIP_TOK ? a->n_tokens - tb : MM_STRIP_TOK);
            const char *x = (const char *)a->xq + tb * j->x_row;
            const struct mm_q32_act *ya = j->act + tb * j->nb;
            float g[MM_STRIP_TOK][MM_STRIP_ROWS], u[MM_STRIP_TOK][MM_STRIP_ROWS];
            q2_tiles(s1, j->nb, x, j->x_row, ya, nt, j->form, j->q81, g);
            if (swiglu) q2_tiles(s2, j->nb, x, j->x_row, ya, nt, j->form, j->q81, u);
            mm_strip_out_c(a, tb, nt, rb, nr, g, u);
        }
    }
}

int cpu_mm_q32_avx2_takes(const struct mm_args *a) {
    const int32_t type = cpu_r16_base(a->type);
    if (!cpu_r16_q32(type)) return 0;
    /* strips only of the types AVX2 repacks (Q5_0, Q5_1, Q8_0 strips hold AVX-512's layout) */
    if (cpu_r16_is(a->type) && !cpu_r16_avx2_has(type)) return 0;
    const int avx2 = cpu_isa_avx2_variant(a->variant);
    if (!avx2 || !cpu_isa_has(CPU_ISA_AVX2)) return 0;
    if (a->n_tokens < (type == INFER_TYPE_Q8_0 ? Q2_MIN_TOKENS_Q8 : Q2_MIN_TOKENS)) return 0;
    /* the gathers index rows with int32 byte offsets */
    return quant_row_bytes(type, a->n_in) * Q2_ROWS < (size_t)INT32_MAX;
}

infer_status cpu_mm_q32_avx2(const struct mm_args *a, struct pool *p) {
    const int64_t nb = a->n_in / QK8_0;
    const size_t per = (size_t)nb * (a->epilogue == MMV_SWIGLU ? 2 : 1);
    const size_t strips = sizeof(struct q2_block) * per * (size_t)pool_threads(p);
    char *raw = xmalloc(strips + sizeof(struct mm_q32_act) * (size_t)nb * (size_t)a->n_tokens + 64);
    if (!raw) return INFER_OOM("cpu_mm_q32_avx2 scratch");
    struct q2_block *scratch = (struct q2_block *)(raw + (64 - (uintptr_t)raw % 64));
    const int32_t type = cpu_r16_base(a->type);
    struct q2_job j = {.a = a, .type = type, .w_row = quant_row_bytes(type, a->n_in),
                       .x_row = cpu_act_row_bytes(type, a->n_in), .bs = quant_row_bytes(type, QK8_0), .nb = nb,
                       .strip_bytes = cpu_r16_is(a->type) ? cpu_r16_bytes(type, a->n_in, Q2_ROWS) : 0,
                       .scratch = scratch, .act = (struct mm_q32_act *)((char *)scratch + strips),
                       .form = q2_form_of(type), .q81 = cpu_r16_q32_min(type)};
    pool_for(p, a->n_tokens, 1, q2_act_rows, &j);
    pool_for(p, a->n_out, Q2_ROWS, q2_rows, &j);
    xfree(raw);
    return INFER_OK;
}

#else /* not x86-64: the dot loop of cpu_mm serves */
int cpu_mm_q32_avx2_takes(const struct mm_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_mm_q32_avx2(const struct mm_args *a, struct pool *p) {
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_q32_avx2: weight type %d: no GEMM on this architecture", a->type);
}
#endif
