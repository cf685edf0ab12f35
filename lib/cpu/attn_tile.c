/* attn_tile: causal attention over f16 cells on AVX-512, 16 keys at a time, in two forms that give the same bits.
 *
 * Why: attn.c's loop takes one (token, head) and one key at a time, with a horizontal sum per score and a scalar
 * expf: in prefill it cost as much as every matmul together (perf, Qwen3-0.6B shape, 512 tokens). Here:
 *   - tile form (prefill): 16 query rows of one KV head (tokens x the heads sharing it) in the 16 lanes. Per block
 *     of 16 keys, K and V are widened to f32 once for all 16 rows; scores, softmax and the V update are lane-wise
 *     (no horizontal step at all): s_j = Σ_i q_i k_ji by a broadcast K value times the transposed queries, the
 *     running max and sum per lane, o_i = o_i c + Σ_j p_j v_ji by a broadcast V value times the 16 p_j vectors.
 *   - decode form (few rows): one token's heads of a KV head; the 16 keys of a block in the lanes (K transposed in
 *     16 x 16 tiles), the same operations in the same order per (row, key, dim), so a row comes out with the same
 *     bits whichever form, batch or tile computed it (a decode step, an MTP verification and a prefill agree).
 *
 * Per row, the arithmetic both forms perform (q pre-scaled: q_i = scale * q_i):
 *   for each block b of 16 keys j from 0 while 16 b <= last:
 *     s_j = fma chain over i = 0..d-1 of q_i k_ji;  s_j = -inf past last (or past the cache)
 *     m' = max(m, max_j s_j);  c = exp(m - m');  p_j = exp(s_j - m')
 *     l = l c + (((p_0 + p_1) + p_2) ... + p_15);  o_i = fma chain over j of p_j v_ji, started from o_i c
 *   out_i = o_i (1 / l)
 * A block past a row's last (the tile runs to its longest row) has every p_j = 0 and c = 1 exactly, so it leaves
 * the row unchanged: the tile form's extra blocks cost time, not bits. exp is at_exp below (cephes' expf
 * polynomial: within 1 ulp of e^x on a 200M-point sweep of [-87.3, 0], where every argument lies; exactly 1 at 0,
 * exactly 0 below -87.3).
 */
#include <math.h>
#include <string.h>

#include "attn_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

enum { AT_KEYS = 16, AT_ROWS = 16, AT_MAX_DIM = 256, AT_MAX_GROUP = 16, AT_MIN_ROWS = 8 };

/* e^x per lane: x = n ln2 + r, |r| <= ln2 / 2, e^r by cephes' degree-7 form, times 2^n; 0 where e^x would be
 * below FLT_MIN (x = -inf included). */
AT_AVX512 static inline __m512 at_exp(__m512 x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(y, n));
}

/* values i..i+15 of KV head g's cell `key` as f32 (zeros past the cache) */
AT_AVX512 static inline __m512 at_cell16(const struct attn_args *a, const uint16_t *cells, int g, int32_t key, int i) {
    if (key >= a->n_kv) return _mm512_setzero_ps();
    const uint16_t *src = cells + (int64_t)key * a->kv_stride + (int64_t)g * a->head_dim + i;
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)src));
}

/* keys j0..j0+15 of KV head g as f32 rows */
AT_AVX512 static void at_widen(const struct attn_args *a, const uint16_t *cells, int g, int32_t j0,
                               float out[AT_KEYS][AT_MAX_DIM]) {
    for (int j = 0; j < AT_KEYS; j++)
        for (int i = 0; i < a->head_dim; i += 16) _mm512_storeu_ps(out[j] + i, at_cell16(a, cells, g, j0 + j, i));
}

/* r[c] = column c of the 16 x 16 block of rows r: pairs interleaved, then 4-row groups, then 128-bit lanes */
AT_AVX512 static void at_transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int a = 0; a < 4; a++) { /* u[4a + b], 128-bit lane L: rows 4a..4a+3 at column 4L + b */
        u[4 * a] = _mm512_shuffle_ps(t[4 * a], t[4 * a + 2], 0x44);
        u[4 * a + 1] = _mm512_shuffle_ps(t[4 * a], t[4 * a + 2], 0xEE);
        u[4 * a + 2] = _mm512_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0x44);
        u[4 * a + 3] = _mm512_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0xEE);
    }
    for (int b = 0; b < 4; b++) { /* column 4L + b gathers lane L of u[b], u[4 + b], u[8 + b], u[12 + b] */
        const __m512 lo01 = _mm512_shuffle_f32x4(u[b], u[4 + b], 0x44), hi01 = _mm512_shuffle_f32x4(u[b], u[4 + b], 0xEE);
        const __m512 lo23 = _mm512_shuffle_f32x4(u[8 + b], u[12 + b], 0x44), hi23 = _mm512_shuffle_f32x4(u[8 + b], u[12 + b], 0xEE);
        r[b] = _mm512_shuffle_f32x4(lo01, lo23, 0x88);
        r[4 + b] = _mm512_shuffle_f32x4(lo01, lo23, 0xDD);
        r[8 + b] = _mm512_shuffle_f32x4(hi01, hi23, 0x88);
        r[12 + b] = _mm512_shuffle_f32x4(hi01, hi23, 0xDD);
    }
}

/* ---- scratch (per worker) and the job ---- */

struct at_tile_scratch {
    float qt[AT_MAX_DIM][AT_ROWS]; /* the tile's scaled queries, transposed */
    float ot[AT_MAX_DIM][AT_ROWS]; /* its outputs so far, transposed */
    float kf[AT_KEYS][AT_MAX_DIM], vf[AT_KEYS][AT_MAX_DIM];
};

struct at_decode_scratch {
    float kt[AT_MAX_DIM][AT_KEYS]; /* the block's keys, transposed */
    float vf[AT_KEYS][AT_MAX_DIM];
    float q[AT_MAX_GROUP][AT_MAX_DIM], o[AT_MAX_GROUP][AT_MAX_DIM];
    float m[AT_MAX_GROUP], l[AT_MAX_GROUP];
};

/* 64 KiB a worker, on the heap (not every caller's thread has the stack for it) */
union at_scratch {
    struct at_tile_scratch tile;
    struct at_decode_scratch decode;
};

struct at_job {
    const struct attn_args *a;
    int group;
    int64_t n_rows, n_tiles;  /* rows per KV head, tiles per KV head */
    union at_scratch *scratch; /* one per worker */
};

/* ---- tile form: item = (KV head, tile of 16 rows), row = token * group + head within the group ---- */

AT_AVX512 static void at_tile(const struct at_job *jb, int g, int64_t tile, struct at_tile_scratch *sc) {
    const struct attn_args *a = jb->a;
    const int d = a->head_dim;
    int32_t last[AT_ROWS];
    const float *qrow[AT_ROWS];
    float *orow[AT_ROWS];
    const int32_t max_last = attn_tile_rows(a, jb->group, jb->n_rows, g, tile, AT_ROWS, last, qrow, orow);
    for (int i = 0; i < d; i++) {
        for (int r = 0; r < AT_ROWS; r++) sc->qt[i][r] = qrow[r][i] * a->scale;
        _mm512_storeu_ps(sc->ot[i], _mm512_setzero_ps());
    }
    const __m512i lastv = _mm512_loadu_si512(last);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m = ninf, l = _mm512_setzero_ps();
    for (int32_t j0 = 0; j0 <= max_last; j0 += AT_KEYS) {
        at_widen(a, (const uint16_t *)a->k, g, j0, sc->kf);
        at_widen(a, (const uint16_t *)a->v, g, j0, sc->vf);
        __m512 s[AT_KEYS];
        _Pragma("GCC unroll 16") for (int j = 0; j < AT_KEYS; j++) s[j] = _mm512_setzero_ps();
        for (int i = 0; i < d; i++) {
            const __m512 qv = _mm512_loadu_ps(sc->qt[i]);
            _Pragma("GCC unroll 16") for (int j = 0; j < AT_KEYS; j++) s[j] = _mm512_fmadd_ps(qv, _mm512_set1_ps(sc->kf[j][i]), s[j]);
        }
        __m512 mb = ninf;
        _Pragma("GCC unroll 16") for (int j = 0; j < AT_KEYS; j++) {
            const __mmask16 in = _mm512_cmp_epi32_mask(_mm512_set1_epi32(j0 + j), lastv, _MM_CMPINT_LE);
            s[j] = _mm512_mask_mov_ps(ninf, in, s[j]);
            mb = _mm512_max_ps(mb, s[j]);
        }
        const __m512 m2 = _mm512_max_ps(m, mb);
        const __m512 c = at_exp(_mm512_sub_ps(m, m2));
        __m512 sum = _mm512_setzero_ps();
        _Pragma("GCC unroll 16") for (int j = 0; j < AT_KEYS; j++) {
            s[j] = at_exp(_mm512_sub_ps(s[j], m2)); /* now p_j */
            sum = j ? _mm512_add_ps(sum, s[j]) : s[j];
        }
        l = _mm512_add_ps(_mm512_mul_ps(l, c), sum);
        m = m2;
        for (int i = 0; i < d; i++) {
            __m512 o = _mm512_mul_ps(_mm512_loadu_ps(sc->ot[i]), c);
            _Pragma("GCC unroll 16") for (int j = 0; j < AT_KEYS; j++) o = _mm512_fmadd_ps(s[j], _mm512_set1_ps(sc->vf[j][i]), o);
            _mm512_storeu_ps(sc->ot[i], o);
        }
    }
    float inv[AT_ROWS];
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), l));
    for (int r = 0; r < AT_ROWS; r++)
        if (orow[r])
            for (int i = 0; i < d; i++) orow[r][i] = sc->ot[i][r] * inv[r];
}

/* the items in attn_tile_item's order */
AT_AVX512 static void at_tile_items(void *ctx, int64_t i0, int64_t i1, int ith) {
    const struct at_job *jb = ctx;
    for (int64_t it = i0; it < i1; it++) {
        int g;
        int64_t tile;
        attn_tile_item(jb->a, jb->n_tiles, it, &g, &tile);
        at_tile(jb, g, tile, &jb->scratch[ith].tile);
    }
}

/* ---- decode form: item = (token, KV head); per block, the group's scores side by side, then head by head ---- */

/* sh[h0 .. h0+nh-1] = the scores of heads h0.. against the block's 16 keys (kt), -inf outside `in`: one FMA chain over
 * i per head, nh chains side by side (called with a constant nh, so they stay in registers) */
AT_AVX512 static inline void at_scores(const struct at_decode_scratch *sc, int d, int h0, int nh, __mmask16 in,
                                       __m512 sh[AT_MAX_GROUP]) {
    __m512 acc[4];
    for (int c = 0; c < nh; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < d; i++) {
        const __m512 k = _mm512_loadu_ps(sc->kt[i]);
        for (int c = 0; c < nh; c++) acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(sc->q[h0 + c][i]), k, acc[c]);
    }
    for (int c = 0; c < nh; c++) sh[h0 + c] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), in, acc[c]);
}

AT_AVX512 static void at_decode(const struct attn_args *a, int group, int64_t t, int g, struct at_decode_scratch *sc) {
    const int d = a->head_dim;
    const int32_t last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
    for (int hh = 0; hh < group; hh++) {
        const float *q = a->q + t * a->q_stride + (int64_t)(g * group + hh) * d;
        for (int i = 0; i < d; i++) sc->q[hh][i] = q[i] * a->scale;
        memset(sc->o[hh], 0, sizeof(float) * (size_t)d);
        sc->m[hh] = -INFINITY;
        sc->l[hh] = 0.0f;
    }
    const uint16_t *kc = a->k;
    for (int32_t j0 = 0; j0 <= last; j0 += AT_KEYS) {
        for (int i0 = 0; i0 < d; i0 += 16) {
            __m512 r[16];
            for (int j = 0; j < AT_KEYS; j++) r[j] = at_cell16(a, kc, g, j0 + j, i0);
            at_transpose16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(sc->kt[i0 + i], r[i]);
        }
        at_widen(a, (const uint16_t *)a->v, g, j0, sc->vf);
        const __mmask16 in = _mm512_cmp_epi32_mask(
            _mm512_add_epi32(_mm512_set1_epi32(j0), _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)),
            _mm512_set1_epi32(last), _MM_CMPINT_LE);
        /* the group's score chains up to 4 heads at a time: one chain is d FMAs in a row, latency-bound alone */
        __m512 sh[AT_MAX_GROUP];
        int h0 = 0;
        for (; h0 + 4 <= group; h0 += 4) at_scores(sc, d, h0, 4, in, sh);
        for (; h0 + 2 <= group; h0 += 2) at_scores(sc, d, h0, 2, in, sh);
        if (h0 < group) at_scores(sc, d, h0, 1, in, sh);
        for (int hh = 0; hh < group; hh++) {
            const __m512 s = sh[hh];
            const float mb = _mm512_reduce_max_ps(s);
            const float m2 = sc->m[hh] > mb ? sc->m[hh] : mb;
            const float c = _mm512_cvtss_f32(at_exp(_mm512_set1_ps(sc->m[hh] - m2)));
            float p[AT_KEYS];
            _mm512_storeu_ps(p, at_exp(_mm512_sub_ps(s, _mm512_set1_ps(m2))));
            float sum = p[0];
            for (int j = 1; j < AT_KEYS; j++) sum += p[j];
            sc->l[hh] = sc->l[hh] * c + sum;
            sc->m[hh] = m2;
            const __m512 cv = _mm512_set1_ps(c);
            for (int i = 0; i < d; i += 16) {
                __m512 o = _mm512_mul_ps(_mm512_loadu_ps(sc->o[hh] + i), cv);
                _Pragma("GCC unroll 16") for (int j = 0; j < AT_KEYS; j++) o = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_loadu_ps(sc->vf[j] + i), o);
                _mm512_storeu_ps(sc->o[hh] + i, o);
            }
        }
    }
    for (int hh = 0; hh < group; hh++) {
        float *out = a->out + t * a->out_stride + (int64_t)(g * group + hh) * d;
        const float inv = 1.0f / sc->l[hh];
        for (int i = 0; i < d; i++) out[i] = sc->o[hh][i] * inv;
    }
}

AT_AVX512 static void at_decode_items(void *ctx, int64_t i0, int64_t i1, int ith) {
    const struct at_job *jb = ctx;
    for (int64_t it = i0; it < i1; it++)
        at_decode(jb->a, jb->group, it / jb->a->n_head_kv, (int)(it % jb->a->n_head_kv), &jb->scratch[ith].decode);
}

int cpu_attn_tile_takes(const struct attn_args *a) {
    return a->kv_type == INFER_TYPE_F16 && a->head_dim % 16 == 0 && a->head_dim <= AT_MAX_DIM &&
           a->n_head / a->n_head_kv <= AT_MAX_GROUP && cpu_isa_has(CPU_ISA_AVX512);
}

infer_status cpu_attn_tile(const struct attn_args *a, struct pool *p) {
    const int group = a->n_head / a->n_head_kv;
    const int64_t n_rows = (int64_t)a->n_tokens * group;
    char *raw = xmalloc(sizeof(union at_scratch) * (size_t)pool_threads(p) + 64);
    if (!raw) return INFER_OOM("cpu_attn_tile scratch");
    struct at_job jb = {.a = a, .group = group, .n_rows = n_rows, .n_tiles = (n_rows + AT_ROWS - 1) / AT_ROWS,
                        .scratch = (union at_scratch *)(raw + (64 - (uintptr_t)raw % 64))};
    if (n_rows >= AT_MIN_ROWS) pool_for(p, jb.n_tiles * a->n_head_kv, 1, at_tile_items, &jb);
    else pool_for(p, (int64_t)a->n_tokens * a->n_head_kv, 1, at_decode_items, &jb);
    xfree(raw);
    return INFER_OK;
}

#else /* not x86-64: attn.c's loop serves */
int cpu_attn_tile_takes(const struct attn_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_attn_tile(const struct attn_args *a, struct pool *p) {
    (void)a;
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_attn_tile: no AVX-512 form on this architecture");
}
#endif
