/* mm_q32: the prefill GEMM for the 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4) on
 * AVX-512 VNNI, the twin of mm_kq.c for K-quants.
 *
 * Why: cpu_mm's row-by-row dots unpack every weight block once per token. Here each worker repacks a strip
 * of Q32_ROWS = 16 weight rows once per call into its own scratch, then sweeps all tokens over it, Q32_TOK
 * at a time: vpdpbusd of one repacked vector with a token's 4 activation bytes broadcast gives the 16
 * rows' partial sums in the 16 int32 lanes (lane r is y[t][r0 + r]).
 *
 * Repacked strip, per block (struct q32_block): q[g] = 64 bytes, byte 4r+k = row r's code of element
 * 4g+k as an unsigned byte; d (and m for Q4_1/Q5_1) per row as f32. vpdpbusd multiplies unsigned by
 * signed bytes, so signed weights are stored with an offset that the activations' block sums take back:
 * Q4_0 q (w = q - 8), Q5_0 q (w = q - 16), Q8_0 q + 128, IQ4_NL / MXFP4 kvalue + 128 (MXFP4's d: its E8M0
 * exponent as blocks_e8m0_half); Q4_1 / Q5_1 codes are
 * unsigned already and their min pairs with the Q8_1 block's s. A per-call table (struct mm_q32_act) holds
 * each token block's d and its offset · Σq_x (Q8_0 activations) or s (Q8_1).
 *
 * Math: per block the exact integer sum, then the scalar reference of mmv.c step for step (its blk_*
 * terms), s += sumi·(d·dy) or s += (d·dy)·sumi + m·s_x in block order, so every element is bit-identical
 * to the scalar dot and to the AVX-512 dots cpu_mm uses otherwise, whatever the thread count or batching
 * (test-ops checks it). Other ISA levels and short batches keep the dots.
 *
 * AMX (amx.h): on a CPU with AMX-INT8 tiles, whole groups of 16 tokens take q32_tile_amx, whose one TDPBSUD per block
 * yields the same exact integers as the vpdpbusd chain; the f32 steps are q32_step's in both, so the same bits.
 */
#include <stddef.h>

#include "mm_q32.h"
#include "mm_r16.h"
#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "amx.h"
#include "mm_strip.h"

#define Q32_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define Q32_INLINE static inline __attribute__((always_inline))

/* Q32_MIN_TOKENS as mm_kq's KQ_MIN_TOKENS: speculative verification batches (2..5 tokens) keep the dots. */
enum { Q32_ROWS = MM_STRIP_ROWS, Q32_TOK = MM_STRIP_TOK, Q32_MIN_TOKENS = 6, Q32_GROUPS = QK8_0 / 4 };

struct q32_block {
    uint8_t q[Q32_GROUPS][64];
    float d[Q32_ROWS], m[Q32_ROWS];
};

/* where a type keeps its fields (byte offsets in a block); qh < 0: no fifth bit */
struct q32_kind {
    int32_t type;
    size_t bs;
    int qs, qh, off; /* off: what the stored code adds to the weight's integer value */
    int has_min, q8;
    const int8_t *kv; /* a 16-entry codebook (IQ4_NL, MXFP4) */
    int e8m0;         /* MXFP4: d is an E8M0 exponent byte */
};

static const struct q32_kind q32_kinds[] = {
    {.type = INFER_TYPE_Q8_0, .bs = sizeof(block_q8_0), .qs = offsetof(block_q8_0, qs), .qh = -1, .off = 128, .q8 = 1},
    {.type = INFER_TYPE_Q4_0, .bs = sizeof(block_q4_0), .qs = offsetof(block_q4_0, qs), .qh = -1, .off = 8},
    {.type = INFER_TYPE_Q4_1, .bs = sizeof(block_q4_1), .qs = offsetof(block_q4_1, qs), .qh = -1, .has_min = 1},
    {.type = INFER_TYPE_Q5_0, .bs = sizeof(block_q5_0), .qs = offsetof(block_q5_0, qs), .qh = offsetof(block_q5_0, qh),
     .off = 16},
    {.type = INFER_TYPE_Q5_1, .bs = sizeof(block_q5_1), .qs = offsetof(block_q5_1, qs), .qh = offsetof(block_q5_1, qh),
     .has_min = 1},
    {.type = INFER_TYPE_IQ4_NL, .bs = sizeof(block_iq4_nl), .qs = offsetof(block_iq4_nl, qs), .qh = -1, .off = 128,
     .kv = blocks_kvalues_iq4nl},
    {.type = INFER_TYPE_MXFP4, .bs = sizeof(block_mxfp4), .qs = offsetof(block_mxfp4, qs), .qh = -1, .off = 128,
     .kv = blocks_kvalues_mxfp4, .e8m0 = 1},
};

static const struct q32_kind *q32_kind_of(int32_t type) {
    for (size_t i = 0; i < sizeof q32_kinds / sizeof q32_kinds[0]; i++)
        if (q32_kinds[i].type == type) return &q32_kinds[i];
    return NULL;
}

struct q32_job {
    const struct mm_args *a;
    const struct q32_kind *k;
    size_t w_row, x_row;
    int64_t nb;                 /* blocks per row */
    size_t strip_bytes;         /* repacked at load (mm_r16.c): bytes per strip of 16 rows; 0: the file's rows */
    struct q32_block *scratch;  /* per worker: nb blocks, twice for SwiGLU */
    struct mm_q32_act *act;     /* n_tokens x nb */
    int amx;                    /* the AMX tiles' mode (amx.h), AMX_NONE: AVX-512 only */
};

/* bit 4 of the codes of group g (elements 4g..4g+3) from 16 rows' qh words: the 4 bits spread to the
 * bottom of each byte by one multiply (x·0x204081 puts bit k at bit 8k, no carries), then moved up */
Q32_AVX512 static inline __m512i q32_bit4(__m512i qh, int g) {
    const __m512i nib = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * g), _mm512_set1_epi32(0xF));
    const __m512i spread = _mm512_and_si512(_mm512_mullo_epi32(nib, _mm512_set1_epi32(0x204081)),
                                            _mm512_set1_epi32(0x01010101));
    return _mm512_slli_epi32(spread, 4);
}

/* Repacks nb blocks of rows w, w + w_row, ..., nr of them (rows >= nr come out zero). Q4/Q5 qs byte j
 * holds element j (low nibble) and j + 16 (high): the dword at 4u is group u (low) and 4 + u (high). */
Q32_AVX512 static void q32_pack(const struct q32_kind *k, const char *w, size_t w_row, int nr, int64_t nb,
                                struct q32_block *out) {
    const __mmask16 live = (__mmask16)((1u << nr) - 1);
    const __m512i idx = mm_strip_row_index(w_row);
    const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0F), k80 = _mm512_set1_epi8((char)0x80);
    const __m512i kv = k->kv ? mm_strip_codebook_u8(k->kv) : zero;
    for (int64_t i = 0; i < nb; i++) {
        const char *b = w + i * (int64_t)k->bs;
        struct q32_block *o = &out[i];
        if (k->q8) {
            for (int g = 0; g < Q32_GROUPS; g++) {
                __m512i v = _mm512_mask_i32gather_epi32(zero, live, idx, b + k->qs + 4 * g, 1);
                _mm512_storeu_si512(o->q[g], _mm512_xor_si512(v, k80));
            }
        } else {
            const __m512i qh = k->qh >= 0 ? _mm512_mask_i32gather_epi32(zero, live, idx, b + k->qh, 1) : zero;
            for (int u = 0; u < Q32_GROUPS / 2; u++) {
                __m512i v = _mm512_mask_i32gather_epi32(zero, live, idx, b + k->qs + 4 * u, 1);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
                if (k->qh >= 0) {
                    lo = _mm512_or_si512(lo, q32_bit4(qh, u));
                    hi = _mm512_or_si512(hi, q32_bit4(qh, u + Q32_GROUPS / 2));
                }
                if (k->kv) {
                    lo = _mm512_shuffle_epi8(kv, lo);
                    hi = _mm512_shuffle_epi8(kv, hi);
                }
                _mm512_storeu_si512(o->q[u], lo);
                _mm512_storeu_si512(o->q[u + Q32_GROUPS / 2], hi);
            }
        }
        /* d first in every block, m next in Q4_1 / Q5_1; MXFP4's exponent byte as blocks_e8m0_half */
        const __m512i dm = _mm512_mask_i32gather_epi32(zero, live, idx, b, 1);
        if (k->e8m0) { /* once per strip and block: blocks.h's scalar conversion will do */
            for (int r = 0; r < Q32_ROWS; r++) o->d[r] = r < nr ? blocks_e8m0_half((uint8_t)b[(size_t)r * w_row]) : 0.0f;
        } else {
            _mm512_storeu_ps(o->d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
        }
        _mm512_storeu_ps(o->m, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16))));
    }
}

/* The same blocks from a strip of mm_r16.c (units of two blocks, mm_r16.h's cpu_r16_q32_* layout): loads instead of
 * gathers. */
Q32_AVX512 static void q32_pack_r16(int32_t type, const char *strip, int64_t nb, struct q32_block *out) {
    const size_t unit = 64 * (size_t)cpu_r16_q32_vectors(type);
    const __m512i kv = mm_strip_q32_book(type);
    for (int64_t i = 0; i < nb; i++) {
        const char *b = strip + (i / 2) * (int64_t)unit;
        const int e = (int)(i % 2);
        struct q32_block *o = &out[i];
        if (type == INFER_TYPE_Q8_0) {
            for (int g = 0; g < Q32_GROUPS; g++)
                _mm512_storeu_si512(o->q[g], _mm512_loadu_si512((const void *)(b + 64 * (cpu_r16_q32_qs(type) + 2 * g + e))));
        } else {
            for (int u = 0; u < Q32_GROUPS / 2; u++) {
                __m512i lo, hi;
                mm_strip_q32_nibbles(type, b, e, u, kv, &lo, &hi);
                _mm512_storeu_si512(o->q[u], lo);
                _mm512_storeu_si512(o->q[u + Q32_GROUPS / 2], hi);
            }
        }
        __m512 d, m;
        mm_strip_q32_scales(type, b, e, &d, &m);
        _mm512_storeu_ps(o->d, d);
        _mm512_storeu_ps(o->m, m);
    }
}

void mm_q32_act_fill(int32_t type, const void *xq, size_t x_row, int64_t nb, int64_t t0, int64_t t1,
                     struct mm_q32_act *act) {
    const struct q32_kind *k = q32_kind_of(type);
    for (int64_t t = t0; t < t1; t++) {
        const char *x = (const char *)xq + t * (int64_t)x_row;
        struct mm_q32_act *o = act + t * nb;
        for (int64_t i = 0; i < nb; i++) {
            if (k->has_min) {
                const block_q8_1 *y = (const block_q8_1 *)x + i;
                o[i].d = blocks_f16_to_f32(y->d);
                o[i].s = blocks_f16_to_f32(y->s);
                continue;
            }
            const block_q8_0 *y = (const block_q8_0 *)x + i;
            int32_t sum = 0;
            for (int e = 0; e < QK8_0; e++) sum += y->qs[e];
            o[i].d = blocks_f16_to_f32(y->d);
            o[i].c = k->off * sum;
        }
    }
}

/* the activation table for tokens t0..t1 */
static void q32_act_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct q32_job *j = ctx;
    mm_q32_act_fill(j->k->type, j->a->xq, j->x_row, j->nb, t0, t1, j->act);
}

/* A block's term of the 16 rows for one token (its table entry ya) from the block's exact integers s: the scalar
 * reference's f32 step, s += sumi·(d·dy) or (d·dy)·sumi + m·s_x */
Q32_AVX512 Q32_INLINE __m512 q32_step(const struct q32_block *o, const struct mm_q32_act *ya, __m512i s, int q81) {
    const __m512 dd = _mm512_mul_ps(_mm512_loadu_ps(o->d), _mm512_set1_ps(ya->d));
    if (q81)
        return _mm512_add_ps(_mm512_mul_ps(dd, _mm512_cvtepi32_ps(s)),
                             _mm512_mul_ps(_mm512_loadu_ps(o->m), _mm512_set1_ps(ya->s)));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_set1_epi32(ya->c))), dd);
}

/* out[t][r] = the dot of strip row r with token t (x + t·x_row, its table act + t·nb), nt <= Q32_TOK
 * tokens; nt and q81 (Q8_1 activations, the min term) are constants in every caller, and the unroll
 * pragmas keep the per-token accumulators in registers (as in mm_kq.c). */
Q32_AVX512 Q32_INLINE void q32_tile(const struct q32_block *blk, int64_t nb, const char *x, size_t x_row,
                                    const struct mm_q32_act *act, int nt, int q81, float out[Q32_TOK][Q32_ROWS]) {
    const size_t bs = q81 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t hdr = q81 ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
    const __m512i zero = _mm512_setzero_si512();
    __m512 acc[Q32_TOK];
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct q32_block *o = &blk[i];
        const char *y = x + i * (int64_t)bs + hdr;
        __m512i s[Q32_TOK];
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) s[t] = zero;
        _Pragma("GCC unroll 8") for (int g = 0; g < Q32_GROUPS; g++) {
            const __m512i wv = _mm512_loadu_si512(o->q[g]);
            _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++)
                s[t] = _mm512_dpbusd_epi32(s[t], wv, mm_strip_x4(y + t * x_row + 4 * g));
        }
        _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) acc[t] = _mm512_add_ps(acc[t], q32_step(o, &act[t * nb + i], s[t], q81));
    }
    _Pragma("GCC unroll 8") for (int t = 0; t < nt; t++) _mm512_storeu_ps(out[t], acc[t]);
}

#define Q32_TILE_CASE(n)                                                                                           \
    case n:                                                                                                        \
        if (q81) q32_tile(blk, nb, x, x_row, act, n, 1, out);                                                      \
        else q32_tile(blk, nb, x, x_row, act, n, 0, out);                                                          \
        break;

Q32_AVX512 static void q32_tile_n(const struct q32_block *blk, int64_t nb, const char *x, size_t x_row,
                                  const struct mm_q32_act *act, int nt, int q81, float out[Q32_TOK][Q32_ROWS]) {
    switch (nt) {
        Q32_TILE_CASE(1)
        Q32_TILE_CASE(2)
        Q32_TILE_CASE(3)
        Q32_TILE_CASE(4)
        Q32_TILE_CASE(5)
        Q32_TILE_CASE(6)
        Q32_TILE_CASE(7)
        Q32_TILE_CASE(8)
    default:
        break;
    }
}

/* q32_tile for AMX_TOK = 16 tokens through AMX tiles (amx.h, mode AMX_HW or AMX_EMU): per block one TDPBSUD of the
 * tokens' 32 activation bytes (the A tile, rows x_row apart) with the block's 8 unpacked vectors (the B tile) gives
 * the exact integers s[t] of q32_tile in a C tile, four blocks a round in tmm0..3; then q32_tile's f32 steps in
 * block order, so the same bits. */
#define Q32_AMX_DP(c, ta, tb, b)                                                                                   \
    do {                                                                                                           \
        AMX_ZERO(mode, c);                                                                                         \
        AMX_LOAD(mode, ta, y + (b) * (int64_t)bs, x_row);                                                         \
        AMX_LOAD(mode, tb, blk[i0 + (b)].q, 64);                                                                   \
        AMX_DPBSUD(mode, c, ta, tb);                                                                               \
    } while (0)

Q32_AVX512 static void q32_tile_amx(int mode, const struct q32_block *blk, int64_t nb, const char *x, size_t x_row,
                                    const struct mm_q32_act *act, int q81, float out[AMX_TOK][Q32_ROWS]) {
    const size_t bs = q81 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    const size_t hdr = q81 ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
    int32_t c[4][AMX_TOK][Q32_ROWS] __attribute__((aligned(64)));
    __m512 acc[AMX_TOK];
    for (int t = 0; t < AMX_TOK; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < nb; i0 += 4) {
        const int n = nb - i0 < 4 ? (int)(nb - i0) : 4;
        const char *y = x + i0 * (int64_t)bs + hdr;
        Q32_AMX_DP(0, 4, 5, 0);
        if (n > 1) Q32_AMX_DP(1, 6, 7, 1);
        if (n > 2) Q32_AMX_DP(2, 4, 5, 2);
        if (n > 3) Q32_AMX_DP(3, 6, 7, 3);
        AMX_STORE(mode, 0, c[0], 64);
        if (n > 1) AMX_STORE(mode, 1, c[1], 64);
        if (n > 2) AMX_STORE(mode, 2, c[2], 64);
        if (n > 3) AMX_STORE(mode, 3, c[3], 64);
        for (int b = 0; b < n; b++) {
            const struct q32_block *o = &blk[i0 + b];
            for (int t = 0; t < AMX_TOK; t++)
                acc[t] = _mm512_add_ps(acc[t], q32_step(o, &act[t * nb + i0 + b], _mm512_load_si512(c[b][t]), q81));
        }
    }
    for (int t = 0; t < AMX_TOK; t++) _mm512_storeu_ps(out[t], acc[t]);
}

static void q32_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    const struct q32_job *j = ctx;
    const struct mm_args *a = j->a;
    const int swiglu = a->epilogue == MMV_SWIGLU, q81 = j->k->has_min;
    struct q32_block *s1 = j->scratch + (size_t)ith * (size_t)j->nb * (swiglu ? 2 : 1), *s2 = s1 + j->nb;
    if (j->amx) amx_begin(j->amx, QK8_0);
    for (int64_t rb = r0; rb < r1; rb += Q32_ROWS) {
        const int nr = (int)(r1 - rb < Q32_ROWS ? r1 - rb : Q32_ROWS);
        if (j->strip_bytes) {
            const size_t at = (size_t)(rb / Q32_ROWS) * j->strip_bytes;
            q32_pack_r16(j->k->type, (const char *)a->w + at, j->nb, s1);
            if (swiglu) q32_pack_r16(j->k->type, (const char *)a->w2 + at, j->nb, s2);
        } else {
            q32_pack(j->k, (const char *)a->w + rb * j->w_row, j->w_row, nr, j->nb, s1);
            if (swiglu) q32_pack(j->k, (const char *)a->w2 + rb * j->w_row, j->w_row, nr, j->nb, s2);
        }
        int64_t tb = 0;
        for (; j->amx && a->n_tokens - tb >= AMX_TOK; tb += AMX_TOK) {
            const char *x = (const char *)a->xq + tb * j->x_row;
            const struct mm_q32_act *ya = j->act + tb * j->nb;
            float g[AMX_TOK][Q32_ROWS], u[AMX_TOK][Q32_ROWS];
            q32_tile_amx(j->amx, s1, j->nb, x, j->x_row, ya, q81, g);
            if (swiglu) q32_tile_amx(j->amx, s2, j->nb, x, j->x_row, ya, q81, u);
            mm_strip_out(a, tb, Q32_TOK, rb, nr, g, u);
            mm_strip_out(a, tb + Q32_TOK, Q32_TOK, rb, nr, g + Q32_TOK, u + Q32_TOK);
        }
        for (; tb < a->n_tokens; tb += Q32_TOK) {
            const int nt = (int)(a->n_tokens - tb < Q32_TOK ? a->n_tokens - tb : Q32_TOK);
            const char *x = (const char *)a->xq + tb * j->x_row;
            const struct mm_q32_act *ya = j->act + tb * j->nb;
            float g[Q32_TOK][Q32_ROWS], u[Q32_TOK][Q32_ROWS];
            q32_tile_n(s1, j->nb, x, j->x_row, ya, nt, q81, g);
            if (swiglu) q32_tile_n(s2, j->nb, x, j->x_row, ya, nt, q81, u);
            mm_strip_out(a, tb, nt, rb, nr, g, u);
        }
    }
    if (j->amx) amx_end(j->amx);
}

int cpu_mm_q32_takes(const struct mm_args *a) {
    if (!q32_kind_of(a->type)) return 0;
    if (!cpu_isa_avx512_variant(a->variant)) return 0;
    if (!cpu_isa_has(CPU_ISA_AVX512) || a->n_tokens < Q32_MIN_TOKENS) return 0;
    /* the gathers index rows with int32 byte offsets */
    return quant_row_bytes(a->type, a->n_in) * Q32_ROWS < (size_t)INT32_MAX;
}

infer_status cpu_mm_q32(const struct mm_args *a, struct pool *p) {
    const int64_t nb = a->n_in / QK8_0;
    const size_t per = (size_t)nb * (a->epilogue == MMV_SWIGLU ? 2 : 1);
    const size_t strips = sizeof(struct q32_block) * per * (size_t)pool_threads(p);
    char *raw = xmalloc(strips + sizeof(struct mm_q32_act) * (size_t)nb * (size_t)a->n_tokens + 64);
    if (!raw) return INFER_OOM("cpu_mm_q32 scratch");
    struct q32_block *scratch = (struct q32_block *)(raw + (64 - (uintptr_t)raw % 64));
    const int32_t type = cpu_r16_base(a->type);
    struct q32_job j = {.a = a, .k = q32_kind_of(type), .w_row = quant_row_bytes(type, a->n_in),
                        .x_row = cpu_act_row_bytes(type, a->n_in), .nb = nb, .scratch = scratch,
                        .strip_bytes = cpu_r16_is(a->type) ? cpu_r16_bytes(type, a->n_in, Q32_ROWS) : 0,
                        .act = (struct mm_q32_act *)((char *)scratch + strips), .amx = cpu_amx_for(a->variant)};
    pool_for(p, a->n_tokens, 1, q32_act_rows, &j);
    pool_for(p, a->n_out, Q32_ROWS, q32_rows, &j);
    xfree(raw);
    return INFER_OK;
}

#else /* not x86-64: the dot loop of cpu_mm serves */
void mm_q32_act_fill(int32_t type, const void *xq, size_t x_row, int64_t nb, int64_t t0, int64_t t1,
                     struct mm_q32_act *act) {
    (void)type, (void)xq, (void)x_row, (void)nb, (void)t0, (void)t1, (void)act;
}
int cpu_mm_q32_takes(const struct mm_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_mm_q32(const struct mm_args *a, struct pool *p) {
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_q32: weight type %d: no GEMM on this architecture", a->type);
}
#endif
