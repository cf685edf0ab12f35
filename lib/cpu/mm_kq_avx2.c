/* mm_kq_avx2: mm_kq.c's prefill GEMM (Q4_K, Q5_K, Q6_K and IQ4_XS weights x Q8_K activations) on CPUs with AVX2 but
 * no AVX-512 VNNI (Zen 2 / Zen 3, Intel before Ice Lake).
 *
 * Why: without it such a CPU multiplies a prompt by the strips' 4-token sweeps (mm_r16_avx2.c) or, for Q6_K and the
 * file's layout, by row-by-row dots, unpacking every weight vector again for every few tokens: prefill ran at about
 * 0.6x llama.cpp's AVX2 build. Here, as in mm_kq.c, each worker unpacks a strip of 16 rows once per call (gathered
 * from the file's rows, or loaded from the load-time strips) and sweeps all tokens over it, K2_TOK at a time.
 *
 * Layout (struct k2_block): mm_kq.c's kq_block, vector g holding byte 4r+k = row r's value of element 4g+k, read as
 * two halves of 8 rows (lane r of half h: row 8h + r). vpmaddubsw (unsigned x signed bytes, int16 pair sums) then
 * vpmaddwd by the sub-block's scale as an int16 pair widens and scales in one step. Its pair sums saturate past
 * 32767, so: Q4_K / Q5_K / Q6_K store their unsigned codes (0..15, 0..31, 0..63) and add 8 / 4 / 2 pair sums in
 * int16 before widening (at most 8·2·15·127, 4·2·31·127, 2·2·63·127: exact); IQ4_XS stores its codebook's signed
 * values and multiplies |w| by sign(x, w) (at most 2·127·127, widened at once), which is exactly mm_kq.c's sum of
 * value + 128 minus its 128·Σx offset, so that offset is not subtracted here.
 *
 * Math: per block the exact integers and the f32 steps of mm_kq.c's kq_step in the same order, so every element is
 * bit-identical to the AVX-512 GEMM and the scalar dots (test-ops checks both).
 */
#include <stddef.h>
#include <string.h>

#include "mm_kq.h"
#include "mm_r16.h"
#include "quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "mm_strip.h"

#define K2 __attribute__((target("avx2,fma,f16c")))
#define K2_INLINE static inline __attribute__((always_inline))

/* K2_MIN_TOKENS: below it the strips' 4-token sweeps cost less than unpacking the strip once (llm-bench, Qwen3-0.6B
 * shape, 2 Zen 4 threads capped at AVX2, t/s GEMM vs sweeps: Q4_K_M pp9 94 vs 106, pp12 115 vs 116, pp16 176 vs 121;
 * IQ4_XS, whose sweeps are cheaper: pp12 134 vs 149, pp16 156 vs 156, pp24 183 vs 165). */
enum { K2_ROWS = MM_STRIP_ROWS, K2_HALF = 8, K2_TOK = 4, K2_MIN_TOKENS = 12, K2_MIN_TOKENS_IQ4 = 16 };
enum k2_form { K2_K4, K2_K5, K2_Q6, K2_IQ4 };

struct k2_block {
    uint8_t q[QK_K / 4][64];
    int32_t sc[16][K2_ROWS]; /* sub-block j's scale per row as an int16 pair (Q4_K, Q5_K, IQ4_XS use 8) */
    int32_t mn[8][K2_ROWS];  /* per row an int16 pair multiplying bsums[2k], bsums[2k+1]: the mins, Q6_K's offset */
    float d[K2_ROWS], dmin[K2_ROWS];
};

struct k2_job {
    const struct mm_args *a;
    size_t w_row, x_row;
    int64_t nb;                /* blocks per row */
    int r16;                   /* the weights are mm_r16.c strips */
    size_t strip_bytes;        /* r16: bytes per strip of 16 rows */
    struct k2_block *scratch;  /* per worker: nb blocks, twice for SwiGLU */
    enum k2_form form;
};

/* The rows of half h present (lane r: row 8h + r < nr) and their byte offsets from the strip's first row */
K2 K2_INLINE void k2_lanes(size_t w_row, int nr, int h, __m256i *idx, __m256i *live) {
    const __m256i r = _mm256_add_epi32(_mm256_set1_epi32(K2_HALF * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    *idx = _mm256_mullo_epi32(r, _mm256_set1_epi32((int)w_row));
    *live = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), r);
}

/* Dword `off` (a byte offset in the block, a multiple of 4) of half h's 8 rows: a gather from the file's rows, or with
 * r16 (the type id; 0: none) half a strip vector. Absent rows read zero. */
K2 K2_INLINE __m256i k2_fetch(const char *b, int r16, __m256i idx, __m256i live, size_t off, int h) {
    if (r16) return _mm256_loadu_si256((const __m256i *)(b + 64 * cpu_r16_pos(r16, (int)(off / 4)) + 32 * h));
    return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(b + off), idx, live, 1);
}

K2 K2_INLINE void k2_store(uint8_t q[64], int h, __m256i v) { _mm256_storeu_si256((__m256i *)(q + 32 * h), v); }
K2 K2_INLINE void k2_store32(int32_t v16[K2_ROWS], int h, __m256i v) { _mm256_storeu_si256((__m256i *)(v16 + 8 * h), v); }

/* each lane's low int16 in both halves: vpmaddwd's scale operand */
K2 K2_INLINE __m256i k2_pair(__m256i v) {
    return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(v, 16));
}

/* the f16 in the low (high) half of each lane as f32, into f[8h..8h+7] */
K2 K2_INLINE void k2_f16(float f[K2_ROWS], int h, __m256i v, int high) {
    int32_t l[K2_HALF];
    _mm256_storeu_si256((__m256i *)l, v);
    for (int r = 0; r < K2_HALF; r++) f[K2_HALF * h + r] = quant_f16_to_f32((uint16_t)((uint32_t)l[r] >> (16 * high)));
}

/* d, dmin, scales and mins of half h's Q4_K / Q5_K blocks (mm_kq.c's kq_head_k4 on 8 lanes) */
K2 static void k2_head_k4(const char *b, int r16, __m256i idx, __m256i live, int h, struct k2_block *o) {
    const __m256i ff = _mm256_set1_epi32(0xff);
    const __m256i c3f = _mm256_set1_epi8(0x3f), c0f = _mm256_set1_epi8(0x0f), c03 = _mm256_set1_epi8(3);
    const __m256i dd = k2_fetch(b, r16, idx, live, 0, h); /* d | dmin << 16 */
    const __m256i u0 = k2_fetch(b, r16, idx, live, 4, h);
    const __m256i u1 = k2_fetch(b, r16, idx, live, 8, h);
    const __m256i u2 = k2_fetch(b, r16, idx, live, 12, h);
    const __m256i sc[2] = {_mm256_and_si256(u0, c3f),
                           _mm256_or_si256(_mm256_and_si256(u2, c0f),
                                           _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), c03), 4))};
    const __m256i mn[2] = {_mm256_and_si256(u1, c3f),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), c0f),
                                           _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), c03), 4))};
    for (int j = 0; j < 8; j++) {
        k2_store32(o->sc[j], h, k2_pair(_mm256_and_si256(_mm256_srli_epi32(sc[j / 4], 8 * (j % 4)), ff)));
        k2_store32(o->mn[j], h, k2_pair(_mm256_and_si256(_mm256_srli_epi32(mn[j / 4], 8 * (j % 4)), ff)));
    }
    k2_f16(o->d, h, dd, 0);
    k2_f16(o->dmin, h, dd, 1);
}

/* Q4_K (q5 0) / Q5_K (q5 1): qs dword 32p+4u is group 16p+u (low nibbles) and 16p+8+u (high); Q5_K's fifth bit is
 * bit 2p (low) or 2p+1 (high) of qh dword 4u (mm_kq.c's packers) */
K2 static void k2_pack_k45(int q5, const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                           struct k2_block *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const size_t qs = q5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
    for (int h = 0; h < 2; h++) {
        __m256i idx, live;
        k2_lanes(w_row, nr, h, &idx, &live);
        for (int64_t i = 0; i < nb; i++) {
            const char *b = w + i * (int64_t)bstride;
            struct k2_block *o = &out[i];
            for (int u = 0; u < 8; u++) {
                const __m256i qh = q5 ? k2_fetch(b, r16, idx, live, offsetof(block_q5_K, qh) + 4 * u, h) : m4;
                for (int p = 0; p < 4; p++) {
                    const __m256i v = k2_fetch(b, r16, idx, live, qs + 32 * p + 4 * u, h);
                    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi32(v, 4), m4);
                    if (q5) {
                        const __m256i hb = _mm256_srli_epi32(qh, 2 * p);
                        lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(hb, one), 4));
                        hi = _mm256_or_si256(hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 1), one), 4));
                    }
                    k2_store(o->q[16 * p + u], h, lo);
                    k2_store(o->q[16 * p + 8 + u], h, hi);
                }
            }
            k2_head_k4(b, r16, idx, live, h, o);
        }
    }
}

K2 static void k2_pack_q4_k(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                            struct k2_block *out) {
    k2_pack_k45(0, w, w_row, nr, nb, bstride, r16, out);
}

K2 static void k2_pack_q5_k(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                            struct k2_block *out) {
    k2_pack_k45(1, w, w_row, nr, nb, bstride, r16, out);
}

/* Q6_K: mm_kq.c's kq_pack_q6_k on 8 lanes (codes 0..63, the 16 signed scales, their pairs for the offset) */
K2 static void k2_pack_q6_k(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                            struct k2_block *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), lo16 = _mm256_set1_epi32(0xFFFF);
    for (int h = 0; h < 2; h++) {
        __m256i idx, live;
        k2_lanes(w_row, nr, h, &idx, &live);
        for (int64_t i = 0; i < nb; i++) {
            const char *b = w + i * (int64_t)bstride;
            struct k2_block *o = &out[i];
            for (int s = 0; s < 2; s++)
                for (int u = 0; u < 8; u++) {
                    const size_t ql = offsetof(block_q6_K, ql) + 64 * s + 4 * u;
                    const __m256i l0 = k2_fetch(b, r16, idx, live, ql, h), l1 = k2_fetch(b, r16, idx, live, ql + 32, h);
                    const __m256i hb = k2_fetch(b, r16, idx, live, offsetof(block_q6_K, qh) + 32 * s + 4 * u, h);
                    const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                                           _mm256_and_si256(_mm256_srli_epi32(l0, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi32(l1, 4), m4)};
                    for (int k = 0; k < 4; k++) {
                        const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2 * k), m2), 4);
                        k2_store(o->q[32 * s + 8 * k + u], h, _mm256_or_si256(lo[k], hi));
                    }
                }
            __m256i sc[16];
            for (int q = 0; q < 4; q++) {
                const __m256i v = k2_fetch(b, r16, idx, live, offsetof(block_q6_K, scales) + 4 * q, h);
                for (int e = 0; e < 4; e++) sc[4 * q + e] = _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * e), 24);
            }
            for (int j = 0; j < 16; j++) k2_store32(o->sc[j], h, k2_pair(sc[j]));
            for (int k = 0; k < 8; k++)
                k2_store32(o->mn[k], h, _mm256_or_si256(_mm256_and_si256(sc[2 * k], lo16), _mm256_slli_epi32(sc[2 * k + 1], 16)));
            /* d: the high half of the dword ending the block (never past it), or a strip block's dword 52 */
            if (r16) k2_f16(o->d, h, k2_fetch(b, r16, idx, live, offsetof(block_q6_K, d), h), 0);
            else k2_f16(o->d, h, k2_fetch(b, r16, idx, live, offsetof(block_q6_K, d) - 2, h), 1);
        }
    }
}

/* IQ4_XS: qs dword 16j+4u is group 8j+u (low nibbles) and 8j+4+u (high), each through the signed codebook; scale j
 * the low nibble j of scales_l with bits 2j..2j+1 of scales_h as bits 4-5, minus 32 */
K2 static void k2_pack_iq4_xs(const char *w, size_t w_row, int nr, int64_t nb, size_t bstride, int r16,
                              struct k2_block *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)blocks_kvalues_iq4nl));
    for (int h = 0; h < 2; h++) {
        __m256i idx, live;
        k2_lanes(w_row, nr, h, &idx, &live);
        for (int64_t i = 0; i < nb; i++) {
            const char *b = w + i * (int64_t)bstride;
            struct k2_block *o = &out[i];
            for (int j = 0; j < 8; j++)
                for (int u = 0; u < 4; u++) {
                    const __m256i v = k2_fetch(b, r16, idx, live, offsetof(block_iq4_xs, qs) + 16 * j + 4 * u, h);
                    k2_store(o->q[8 * j + u], h, _mm256_shuffle_epi8(kv, _mm256_and_si256(v, m4)));
                    k2_store(o->q[8 * j + 4 + u], h, _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi32(v, 4), m4)));
                }
            const __m256i dh = k2_fetch(b, r16, idx, live, 0, h); /* d | scales_h << 16 */
            const __m256i sl = k2_fetch(b, r16, idx, live, offsetof(block_iq4_xs, scales_l), h);
            for (int j = 0; j < 8; j++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(0xF));
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(dh, 16 + 2 * j), _mm256_set1_epi32(3));
                const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
                k2_store32(o->sc[j], h, k2_pair(ls));
            }
            k2_f16(o->d, h, dh, 0);
        }
    }
}

/* A block's term of half h's rows for one token (its Q8_K block y): kq_step's f32 steps on 8 lanes */
K2 K2_INLINE __m256 k2_step(const struct k2_block *o, const block_q8_K *y, __m256i sumi, enum k2_form form, int h) {
    const __m256 ddy = _mm256_mul_ps(_mm256_loadu_ps(o->d + K2_HALF * h), _mm256_set1_ps(y->d));
    if (form == K2_IQ4) return _mm256_mul_ps(ddy, _mm256_cvtepi32_ps(sumi));
    __m256i c = _mm256_setzero_si256();
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) c = _mm256_add_epi32(
        c, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(o->mn[k] + K2_HALF * h)), mm_strip_x4_256(y->bsums + 2 * k)));
    if (form == K2_Q6) return _mm256_mul_ps(ddy, _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, _mm256_slli_epi32(c, 5))));
    const __m256 dmy = _mm256_mul_ps(_mm256_loadu_ps(o->dmin + K2_HALF * h), _mm256_set1_ps(y->d));
    return _mm256_sub_ps(_mm256_mul_ps(ddy, _mm256_cvtepi32_ps(sumi)), _mm256_mul_ps(dmy, _mm256_cvtepi32_ps(c)));
}

/* acc[t][lane r] = the dot of row 8h + r with token t (x + t·x_row), nt <= K2_TOK tokens; nt and form are constants in
 * every caller (the unroll pragmas keep the per-token sums in registers, as in mm_kq.c) */
K2 K2_INLINE void k2_tile(const struct k2_block *blk, int64_t nb, const char *x, size_t x_row, int nt, enum k2_form form,
                          int h, __m256 acc[K2_TOK]) {
    const int n_sub = form == K2_Q6 ? 16 : 8, gps = form == K2_Q6 ? 4 : 8; /* sub-blocks, groups of 4 per sub-block */
    const int run = form == K2_K4 ? 8 : form == K2_K5 ? 4 : 2;               /* int16 pair sums per widening */
    const __m256i zero = _mm256_setzero_si256();
    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const struct k2_block *o = &blk[i];
        const block_q8_K *y[K2_TOK];
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) y[t] = (const block_q8_K *)(x + t * x_row) + i;
        __m256i sumi[K2_TOK];
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) sumi[t] = zero;
        for (int j = 0; j < n_sub; j++) {
            const __m256i sc = _mm256_loadu_si256((const __m256i *)(o->sc[j] + K2_HALF * h));
            __m256i s16[K2_TOK];
            _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) s16[t] = zero;
            _Pragma("GCC unroll 8") for (int k = 0; k < gps; k++) {
                const int g = j * gps + k;
                const __m256i w = _mm256_loadu_si256((const __m256i *)(o->q[g] + 32 * h));
                if (form == K2_IQ4) { /* |w| · sign(x, w): a pair sum up to 2 · 127 · 127, widened at once */
                    const __m256i wa = _mm256_abs_epi8(w);
                    _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) {
                        const __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(mm_strip_x4_256(y[t]->qs + 4 * g), w));
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, sc));
                    }
                    continue;
                }
                _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++)
                    s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(w, mm_strip_x4_256(y[t]->qs + 4 * g)));
                if ((k + 1) % run) continue;
                _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) { /* widened and scaled: s·(a + b), exact */
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s16[t], sc));
                    s16[t] = zero;
                }
            }
        }
        _Pragma("GCC unroll 4") for (int t = 0; t < nt; t++) acc[t] = _mm256_add_ps(acc[t], k2_step(o, y[t], sumi[t], form, h));
    }
}

#define K2_TILE_CASE(n)                                                                                            \
    case n:                                                                                                        \
        if (form == K2_K4) k2_tile(blk, nb, xt, x_row, n, K2_K4, h, acc);                                           \
        else if (form == K2_K5) k2_tile(blk, nb, xt, x_row, n, K2_K5, h, acc);                                      \
        else if (form == K2_Q6) k2_tile(blk, nb, xt, x_row, n, K2_Q6, h, acc);                                      \
        else k2_tile(blk, nb, xt, x_row, n, K2_IQ4, h, acc);                                                        \
        break;

/* out[t][r] for nt <= MM_STRIP_TOK tokens and the strip's 16 rows */
K2 static void k2_tiles(const struct k2_block *blk, int64_t nb, const char *x, size_t x_row, int nt, enum k2_form form,
                        float out[MM_STRIP_TOK][MM_STRIP_ROWS]) {
    for (int t0 = 0; t0 < nt; t0 += K2_TOK) {
        const int n = nt - t0 < K2_TOK ? nt - t0 : K2_TOK;
        for (int h = 0; h < 2; h++) {
            __m256 acc[K2_TOK];
            const char *xt = x + t0 * x_row;
            switch (n) {
                K2_TILE_CASE(1)
                K2_TILE_CASE(2)
                K2_TILE_CASE(3)
                K2_TILE_CASE(4)
            default:
                break;
            }
            for (int t = 0; t < n; t++) _mm256_storeu_ps(out[t0 + t] + K2_HALF * h, acc[t]);
        }
    }
}

static void k2_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    const struct k2_job *j = ctx;
    const struct mm_args *a = j->a;
    const int swiglu = a->epilogue == MMV_SWIGLU;
    struct k2_block *s1 = j->scratch + (size_t)ith * (size_t)j->nb * (swiglu ? 2 : 1), *s2 = s1 + j->nb;
    const int32_t type = cpu_r16_base(a->type);
    void (*pack)(const char *, size_t, int, int64_t, size_t, int, struct k2_block *) =
        type == INFER_TYPE_Q4_K ? k2_pack_q4_k : type == INFER_TYPE_Q5_K ? k2_pack_q5_k
        : type == INFER_TYPE_Q6_K ? k2_pack_q6_k : k2_pack_iq4_xs;
    for (int64_t rb = r0; rb < r1; rb += K2_ROWS) {
        const int nr = (int)(r1 - rb < K2_ROWS ? r1 - rb : K2_ROWS);
        /* a strip's first row; its blocks one row apart, or with r16 one strip block apart */
        const size_t at = j->r16 ? (size_t)(rb / K2_ROWS) * j->strip_bytes : (size_t)rb * j->w_row;
        const size_t bstride = j->r16 ? j->strip_bytes / (size_t)j->nb : quant_row_bytes(type, QK_K);
        const int r16 = j->r16 ? type : 0;
        pack((const char *)a->w + at, j->w_row, nr, j->nb, bstride, r16, s1);
        if (swiglu) pack((const char *)a->w2 + at, j->w_row, nr, j->nb, bstride, r16, s2);
        for (int64_t tb = 0; tb < a->n_tokens; tb += MM_STRIP_TOK) {
            const int nt = (int)(a->n_tokens - tb < MM_STRIP_TOK ? a->n_tokens - tb : MM_STRIP_TOK);
            const char *x = (const char *)a->xq + tb * j->x_row;
            float g[MM_STRIP_TOK][MM_STRIP_ROWS], u[MM_STRIP_TOK][MM_STRIP_ROWS];
            k2_tiles(s1, j->nb, x, j->x_row, nt, j->form, g);
            if (swiglu) k2_tiles(s2, j->nb, x, j->x_row, nt, j->form, u);
            mm_strip_out_c(a, tb, nt, rb, nr, g, u);
        }
    }
}

int cpu_mm_kq_avx2_takes(const struct mm_args *a) {
    const int32_t type = cpu_r16_base(a->type);
    if (type != INFER_TYPE_Q4_K && type != INFER_TYPE_Q5_K && type != INFER_TYPE_Q6_K && type != INFER_TYPE_IQ4_XS)
        return 0;
    const int avx2 = cpu_isa_avx2_variant(a->variant);
    if (!avx2 || !cpu_isa_has(CPU_ISA_AVX2)) return 0;
    if (a->n_tokens < (type == INFER_TYPE_IQ4_XS ? K2_MIN_TOKENS_IQ4 : K2_MIN_TOKENS)) return 0;
    /* the gathers index rows with int32 byte offsets */
    return quant_row_bytes(type, a->n_in) * K2_ROWS < (size_t)INT32_MAX;
}

infer_status cpu_mm_kq_avx2(const struct mm_args *a, struct pool *p) {
    const int64_t nb = a->n_in / QK_K;
    const size_t per = (size_t)nb * (a->epilogue == MMV_SWIGLU ? 2 : 1);
    char *raw = xmalloc(sizeof(struct k2_block) * per * (size_t)pool_threads(p) + 64);
    if (!raw) return INFER_OOM("cpu_mm_kq_avx2 scratch");
    const int32_t type = cpu_r16_base(a->type);
    const enum k2_form form = type == INFER_TYPE_Q4_K ? K2_K4 : type == INFER_TYPE_Q5_K ? K2_K5
                              : type == INFER_TYPE_Q6_K ? K2_Q6 : K2_IQ4;
    struct k2_job j = {.a = a, .w_row = quant_row_bytes(type, a->n_in), .x_row = cpu_act_row_bytes(type, a->n_in),
                       .nb = nb, .r16 = cpu_r16_is(a->type), .strip_bytes = cpu_r16_bytes(type, a->n_in, K2_ROWS),
                       .scratch = (struct k2_block *)(raw + (64 - (uintptr_t)raw % 64)), .form = form};
    pool_for(p, a->n_out, K2_ROWS, k2_rows, &j);
    xfree(raw);
    return INFER_OK;
}

#else /* not x86-64: the dot loop of cpu_mm serves */
int cpu_mm_kq_avx2_takes(const struct mm_args *a) {
    (void)a;
    return 0;
}
infer_status cpu_mm_kq_avx2(const struct mm_args *a, struct pool *p) {
    (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm_kq_avx2: weight type %d: no GEMM on this architecture", a->type);
}
#endif
