/* attn_tile_avx2: attn_tile.c's causal attention over f16 cells on CPUs with AVX2 but no AVX-512, with the same bits.
 *
 * Why: without it such a CPU runs attn.c's loop, one (token, head) and one key at a time with a horizontal sum per
 * score and a scalar expf: in prefill it was a quarter of the time (perf, one Zen 4 thread capped at AVX2, Qwen3-0.6B
 * shape, 512 tokens), after the AVX2 GEMMs.
 *
 * The two forms of attn_tile.c on 8 lanes, every row's operations those of its header in the same order (blocks of 16
 * keys, the fma chains over the head dimension and over the keys, the maximum, the in-order sum of the p_j, at_exp's
 * polynomial with 2^n applied by one multiply: n is in [-126, 0], so 2^n is a normal float and y · 2^n rounds as
 * vscalefps does), so every row comes out with the bits the AVX-512 forms give (test-ops compares them):
 *   - tile form (prefill): 8 query rows of one KV head in the 8 lanes, each block's 16 keys widened once for them;
 *   - decode form (few rows): one token's heads of a KV head, the block's 16 keys in two 8-lane halves (K transposed
 *     in 8 x 8 tiles).
 */
#include <math.h>
#include <string.h>

#include "attn_tile.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AT2 __attribute__((target("avx2,fma,f16c")))

enum { AT2_KEYS = 16, AT2_ROWS = 8, AT2_MAX_DIM = 256, AT2_MAX_GROUP = 16, AT2_MIN_ROWS = 8 };

/* attn_tile.c's at_exp on 8 lanes: e^x for x in [-87.3, 0] (0 below, x = -inf included) */
AT2 static inline __m256 at2_exp(__m256 x) {
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), live);
}

/* values i..i+7 of KV head g's cell `key` as f32 (zeros past the cache) */
AT2 static inline __m256 at2_cell8(const struct attn_args *a, const uint16_t *cells, int g, int32_t key, int i) {
    if (key >= a->n_kv) return _mm256_setzero_ps();
    const uint16_t *src = cells + (int64_t)key * a->kv_stride + (int64_t)g * a->head_dim + i;
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src));
}

/* keys j0..j0+15 of KV head g as f32 rows */
AT2 static void at2_widen(const struct attn_args *a, const uint16_t *cells, int g, int32_t j0,
                          float out[AT2_KEYS][AT2_MAX_DIM]) {
    for (int j = 0; j < AT2_KEYS; j++)
        for (int i = 0; i < a->head_dim; i += 8) _mm256_storeu_ps(out[j] + i, at2_cell8(a, cells, g, j0 + j, i));
}

/* r[c] = column c of the 8 x 8 block of rows r */
AT2 static void at2_transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int a = 0; a < 2; a++) { /* u[4a + b], 128-bit lane L: rows 4a..4a+3 at column 4L + b */
        u[4 * a] = _mm256_shuffle_ps(t[4 * a], t[4 * a + 2], 0x44);
        u[4 * a + 1] = _mm256_shuffle_ps(t[4 * a], t[4 * a + 2], 0xEE);
        u[4 * a + 2] = _mm256_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0x44);
        u[4 * a + 3] = _mm256_shuffle_ps(t[4 * a + 1], t[4 * a + 3], 0xEE);
    }
    for (int b = 0; b < 4; b++) { /* column b: lane 0 of u[b], u[4 + b]; column 4 + b: their lane 1 */
        r[b] = _mm256_permute2f128_ps(u[b], u[4 + b], 0x20);
        r[4 + b] = _mm256_permute2f128_ps(u[b], u[4 + b], 0x31);
    }
}

struct at2_tile_scratch {
    float qt[AT2_MAX_DIM][AT2_ROWS]; /* the tile's scaled queries, transposed */
    float ot[AT2_MAX_DIM][AT2_ROWS]; /* its outputs so far, transposed */
    float kf[AT2_KEYS][AT2_MAX_DIM], vf[AT2_KEYS][AT2_MAX_DIM];
};

struct at2_decode_scratch {
    float kt[AT2_MAX_DIM][AT2_KEYS]; /* the block's keys, transposed */
    float vf[AT2_KEYS][AT2_MAX_DIM];
    float q[AT2_MAX_GROUP][AT2_MAX_DIM], o[AT2_MAX_GROUP][AT2_MAX_DIM];
    float m[AT2_MAX_GROUP], l[AT2_MAX_GROUP];
};

union at2_scratch {
    struct at2_tile_scratch tile;
    struct at2_decode_scratch decode;
};

struct at2_job {
    const struct attn_args *a;
    int group;
    int64_t n_rows, n_tiles;    /* rows per KV head, tiles per KV head */
    union at2_scratch *scratch; /* one per worker */
};

/* ---- tile form: item = (KV head, tile of 8 rows), row = token * group + head within the group ---- */

AT2 static void at2_tile(const struct at2_job *jb, int g, int64_t tile, struct at2_tile_scratch *sc) {
    const struct attn_args *a = jb->a;
    const int d = a->head_dim;
    int32_t last[AT2_ROWS];
    const float *qrow[AT2_ROWS];
    float *orow[AT2_ROWS];
    const int32_t max_last = attn_tile_rows(a, jb->group, jb->n_rows, g, tile, AT2_ROWS, last, qrow, orow);
    for (int i = 0; i < d; i++) {
        for (int r = 0; r < AT2_ROWS; r++) sc->qt[i][r] = qrow[r][i] * a->scale;
        _mm256_storeu_ps(sc->ot[i], _mm256_setzero_ps());
    }
    const __m256i lastv = _mm256_loadu_si256((const __m256i *)last);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m = ninf, l = _mm256_setzero_ps();
    for (int32_t j0 = 0; j0 <= max_last; j0 += AT2_KEYS) {
        at2_widen(a, (const uint16_t *)a->k, g, j0, sc->kf);
        at2_widen(a, (const uint16_t *)a->v, g, j0, sc->vf);
        __m256 s[AT2_KEYS];
        for (int jh = 0; jh < AT2_KEYS; jh += 8) { /* 8 keys a pass: their sums stay in registers */
            __m256 acc[8];
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) acc[j] = _mm256_setzero_ps();
            for (int i = 0; i < d; i++) {
                const __m256 qv = _mm256_loadu_ps(sc->qt[i]);
                _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
                    acc[j] = _mm256_fmadd_ps(qv, _mm256_set1_ps(sc->kf[jh + j][i]), acc[j]);
            }
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) s[jh + j] = acc[j];
        }
        __m256 mb = ninf;
        _Pragma("GCC unroll 16") for (int j = 0; j < AT2_KEYS; j++) {
            const __m256i out = _mm256_cmpgt_epi32(_mm256_set1_epi32(j0 + j), lastv);
            s[j] = _mm256_blendv_ps(s[j], ninf, _mm256_castsi256_ps(out));
            mb = _mm256_max_ps(mb, s[j]);
        }
        const __m256 m2 = _mm256_max_ps(m, mb);
        const __m256 c = at2_exp(_mm256_sub_ps(m, m2));
        __m256 sum = _mm256_setzero_ps();
        _Pragma("GCC unroll 16") for (int j = 0; j < AT2_KEYS; j++) {
            s[j] = at2_exp(_mm256_sub_ps(s[j], m2)); /* now p_j */
            sum = j ? _mm256_add_ps(sum, s[j]) : s[j];
        }
        l = _mm256_add_ps(_mm256_mul_ps(l, c), sum);
        m = m2;
        for (int i = 0; i < d; i++) {
            __m256 o = _mm256_mul_ps(_mm256_loadu_ps(sc->ot[i]), c);
            _Pragma("GCC unroll 16") for (int j = 0; j < AT2_KEYS; j++)
                o = _mm256_fmadd_ps(s[j], _mm256_set1_ps(sc->vf[j][i]), o);
            _mm256_storeu_ps(sc->ot[i], o);
        }
    }
    float inv[AT2_ROWS];
    _mm256_storeu_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), l));
    for (int r = 0; r < AT2_ROWS; r++)
        if (orow[r])
            for (int i = 0; i < d; i++) orow[r][i] = sc->ot[i][r] * inv[r];
}

/* the items in attn_tile_item's order */
AT2 static void at2_tile_items(void *ctx, int64_t i0, int64_t i1, int ith) {
    const struct at2_job *jb = ctx;
    for (int64_t it = i0; it < i1; it++) {
        int g;
        int64_t tile;
        attn_tile_item(jb->a, jb->n_tiles, it, &g, &tile);
        at2_tile(jb, g, tile, &jb->scratch[ith].tile);
    }
}

/* ---- decode form: item = (token, KV head), the group's heads one after another per block ---- */

AT2 static void at2_decode(const struct attn_args *a, int group, int64_t t, int g, struct at2_decode_scratch *sc) {
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
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int32_t j0 = 0; j0 <= last; j0 += AT2_KEYS) {
        for (int jh = 0; jh < AT2_KEYS; jh += 8)
            for (int i0 = 0; i0 < d; i0 += 8) {
                __m256 r[8];
                for (int j = 0; j < 8; j++) r[j] = at2_cell8(a, kc, g, j0 + jh + j, i0);
                at2_transpose8(r);
                for (int i = 0; i < 8; i++) _mm256_storeu_ps(sc->kt[i0 + i] + jh, r[i]);
            }
        at2_widen(a, (const uint16_t *)a->v, g, j0, sc->vf);
        const __m256i lastv = _mm256_set1_epi32(last);
        const __m256 out0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_add_epi32(_mm256_set1_epi32(j0), lane), lastv));
        const __m256 out1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_add_epi32(_mm256_set1_epi32(j0 + 8), lane), lastv));
        for (int hh = 0; hh < group; hh++) {
            __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
            for (int i = 0; i < d; i++) {
                const __m256 qi = _mm256_set1_ps(sc->q[hh][i]);
                s0 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(sc->kt[i]), s0);
                s1 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(sc->kt[i] + 8), s1);
            }
            s0 = _mm256_blendv_ps(s0, _mm256_set1_ps(-INFINITY), out0);
            s1 = _mm256_blendv_ps(s1, _mm256_set1_ps(-INFINITY), out1);
            float sv[AT2_KEYS];
            _mm256_storeu_ps(sv, s0);
            _mm256_storeu_ps(sv + 8, s1);
            float mb = sv[0];
            for (int j = 1; j < AT2_KEYS; j++) mb = sv[j] > mb ? sv[j] : mb;
            const float m2 = sc->m[hh] > mb ? sc->m[hh] : mb;
            const float c = _mm256_cvtss_f32(at2_exp(_mm256_set1_ps(sc->m[hh] - m2)));
            float p[AT2_KEYS];
            _mm256_storeu_ps(p, at2_exp(_mm256_sub_ps(s0, _mm256_set1_ps(m2))));
            _mm256_storeu_ps(p + 8, at2_exp(_mm256_sub_ps(s1, _mm256_set1_ps(m2))));
            float sum = p[0];
            for (int j = 1; j < AT2_KEYS; j++) sum += p[j];
            sc->l[hh] = sc->l[hh] * c + sum;
            sc->m[hh] = m2;
            const __m256 cv = _mm256_set1_ps(c);
            for (int i = 0; i < d; i += 8) {
                __m256 o = _mm256_mul_ps(_mm256_loadu_ps(sc->o[hh] + i), cv);
                _Pragma("GCC unroll 16") for (int j = 0; j < AT2_KEYS; j++)
                    o = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(sc->vf[j] + i), o);
                _mm256_storeu_ps(sc->o[hh] + i, o);
            }
        }
    }
    for (int hh = 0; hh < group; hh++) {
        float *out = a->out + t * a->out_stride + (int64_t)(g * group + hh) * d;
        const float inv = 1.0f / sc->l[hh];
        for (int i = 0; i < d; i++) out[i] = sc->o[hh][i] * inv;
    }
}

AT2 static void at2_decode_items(void *ctx, int64_t i0, int64_t i1, int ith) {
    const struct at2_job *jb = ctx;
    for (int64_t it = i0; it < i1; it++)
        at2_decode(jb->a, jb->group, it / jb->a->n_head_kv, (int)(it % jb->a->n_head_kv), &jb->scratch[ith].decode);
}

int cpu_attn_tile_avx2_takes(const struct attn_args *a) {
    return a->kv_type == INFER_TYPE_F16 && a->head_dim % 16 == 0 && a->head_dim <= AT2_MAX_DIM &&
           a->n_head / a->n_head_kv <= AT2_MAX_GROUP && cpu_isa_has(CPU_ISA_AVX2) && __builtin_cpu_supports("f16c");
}

infer_status cpu_attn_tile_avx2(const struct attn_args *a, struct pool *p) {
    const int group = a->n_head / a->n_head_kv;
    const int64_t n_rows = (int64_t)a->n_tokens * group;
    char *raw = xmalloc(sizeof(union at2_scratch) * (size_t)pool_threads(p) + 64);
    if (!raw) return INFER_OOM("cpu_attn_tile_avx2 scratch");
    struct at2_job jb = {.a = a, .group = group, .n_rows = n_rows, .n_tiles = (n_rows + AT2_ROWS - 1) / AT2_ROWS,
                         .scratch = (union at2_scratch *)(raw + (64 - (uintptr_t)raw % 64))};
    if (n_rows >= AT2_MIN_ROWS) pool_for(p, jb.n_tiles * a->n_head_kv, 1, at2_tile_items, &jb);
    else pool_for(p, (int64_t)a->n_tokens * a->n_head_kv, 1, at2_decode_items, &jb);
    xfree(raw);
    return INFER_OK;
}

#else /* not x86-64: attn.c's loop serves */
int cpu_attn_tile_avx2_takes(const struct attn_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_attn_tile_avx2(const struct attn_args *a, struct pool *p) {
    (void)a;
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_attn_tile_avx2: no AVX2 form on this architecture");
}
#endif
