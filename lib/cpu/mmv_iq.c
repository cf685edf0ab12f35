/* mmv_iq: dot products of the lattice and ternary types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M,
 * TQ1_0, TQ2_0) with Q8_K activations, for mmv.c's table.
 *
 * Every one of these types decodes, per group of 8 values, to int8 values v and a small integer scale ls, with
 * one float factor f per block (blocks_iq.h's integer form): a block's dot is f * d_x * Σ_g ls_g Σ_j v_j x_j,
 * the sum exact in int32 (|v| <= 62, ls <= 31, |x| <= 127 over 256 values < 2^31). So each type only supplies
 * its unpacking (blocks_iq_<t>, group by group into a 256-byte buffer) and one dot serves them all:
 *   scalar: the integer sums in C;
 *   AVX2: |v| x (x with v's sign) by maddubs (pairs <= 2 * 62 * 127 fit int16), madd with the group scales;
 *   AVX-512 VNNI: dpbusd on 64 values, the int32 lanes (half groups) times their scales.
 * Every variant computes the same integer per block and the same f32 steps, so they agree bit for bit.
 * note: the unpacking (a grid load and a sign mask per 8 values) costs more than the dot itself; a decode that
 * builds the vectors straight from the grids (ggml's set_epi64x of four entries) is the next step for speed.
 */
#include "cpu.h"
#include "mmv_iq.h"

#if defined(__x86_64__) || defined(__i386__)
#define MMV_IQ_X86 1
#include <immintrin.h>
#endif

/* One unpacked block: v[256] int8 values, ls[32] group scales, f the block factor. */
struct iq_block {
    int8_t v[256];
    int32_t ls[32];
    float f;
};

#define IQ_UNPACK(t)                                                                                         \
    static void unpack_##t(const void *w, int64_t i, struct iq_block *u) {                                   \
        const block_##t *b = (const block_##t *)w + i;                                                       \
        for (int g = 0; g < 32; g++) u->ls[g] = blocks_iq_##t(b, g, u->v + 8 * g);                           \
        u->f = blocks_iqf_##t(b);                                                                            \
    }
IQ_UNPACK(iq2_xxs)
IQ_UNPACK(iq2_xs)
IQ_UNPACK(iq2_s)
IQ_UNPACK(iq3_xxs)
IQ_UNPACK(iq3_s)
IQ_UNPACK(iq1_s)
IQ_UNPACK(iq1_m)
IQ_UNPACK(tq1_0)
IQ_UNPACK(tq2_0)
#undef IQ_UNPACK

typedef void (*iq_unpack_fn)(const void *w, int64_t i, struct iq_block *u);

/* Σ_g ls_g Σ_j v_j x_j over one block, exact. */
static int32_t iq_sum_scalar(const struct iq_block *u, const int8_t *x) {
    int32_t s = 0;
    for (int g = 0; g < 32; g++) {
        int32_t gs = 0;
        for (int j = 0; j < 8; j++) gs += u->v[8 * g + j] * x[8 * g + j];
        s += u->ls[g] * gs;
    }
    return s;
}

static inline float iq_dot(int64_t n, const void *w, const void *x, iq_unpack_fn unpack,
                           int32_t (*sum)(const struct iq_block *, const int8_t *)) {
    const block_q8_K *b = x;
    struct iq_block u;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack(w, i, &u);
        s += (u.f * b[i].d) * (float)sum(&u, b[i].qs);
    }
    return s;
}

#ifdef MMV_IQ_X86
#define MMV_IQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define MMV_IQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

MMV_IQ_AVX2 static int32_t iq_sum_avx2(const struct iq_block *u, const int8_t *x) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) { /* 32 values = 4 groups */
        const __m256i v = _mm256_loadu_si256((const __m256i *)(u->v + 32 * k));
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x + 32 * k));
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
        /* int16 lanes 4g..4g+3 belong to group g: its scale on each */
        const int32_t *ls = u->ls + 4 * k;
        const __m256i sc = _mm256_set_epi16((short)ls[3], (short)ls[3], (short)ls[3], (short)ls[3], (short)ls[2],
                                            (short)ls[2], (short)ls[2], (short)ls[2], (short)ls[1], (short)ls[1],
                                            (short)ls[1], (short)ls[1], (short)ls[0], (short)ls[0], (short)ls[0],
                                            (short)ls[0]);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

MMV_IQ_AVX512 static int32_t iq_sum_avx512(const struct iq_block *u, const int8_t *x) {
    __m512i acc = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) { /* 64 values = 8 groups = 16 int32 lanes */
        const __m512i v = _mm512_loadu_si512(u->v + 64 * k);
        const __m512i y = _mm512_loadu_si512(x + 64 * k);
        const __m512i av = _mm512_abs_epi8(v);
        const __m512i sy = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(v), _mm512_setzero_si512(), y);
        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), av, sy);
        /* lane 2g, 2g+1: group g's scale */
        const __m256i ls8 = _mm256_loadu_si256((const __m256i *)(u->ls + 8 * k));
        const __m512i sc = _mm512_permutexvar_epi32(_mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0),
                                                    _mm512_castsi256_si512(ls8));
        acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(d, sc));
    }
    return _mm512_reduce_add_epi32(acc);
}
#endif

#ifdef MMV_IQ_X86
#define IQ_DOTS(t)                                                                                           \
    float cpu_dot_##t(int64_t n, const void *w, const void *x) { return iq_dot(n, w, x, unpack_##t, iq_sum_scalar); } \
    MMV_IQ_AVX2 float cpu_dot_##t##_avx2(int64_t n, const void *w, const void *x) {                          \
        return iq_dot(n, w, x, unpack_##t, iq_sum_avx2);                                                     \
    }                                                                                                        \
    MMV_IQ_AVX512 float cpu_dot_##t##_avx512(int64_t n, const void *w, const void *x) {                      \
        return iq_dot(n, w, x, unpack_##t, iq_sum_avx512);                                                   \
    }
#else
#define IQ_DOTS(t)                                                                                           \
    float cpu_dot_##t(int64_t n, const void *w, const void *x) { return iq_dot(n, w, x, unpack_##t, iq_sum_scalar); }
#endif
IQ_DOTS(iq2_xxs)
IQ_DOTS(iq2_xs)
IQ_DOTS(iq2_s)
IQ_DOTS(iq3_xxs)
IQ_DOTS(iq3_s)
IQ_DOTS(iq1_s)
IQ_DOTS(iq1_m)
IQ_DOTS(tq1_0)
IQ_DOTS(tq2_0)
#undef IQ_DOTS
