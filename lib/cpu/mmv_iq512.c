/* mmv_iq512: AVX-512 dots of lattice and ternary types with Q8_K activations, for mmv.c's table (its AVX-512 level,
 * where the CPU also has VBMI: Ice Lake, Sapphire Rapids, Zen 4).
 *
 * mmv_iq.c's AVX2 dots build each 8-value group from a grid entry loaded by a scalar load: 32 to 64 loads and
 * inserts a block, and those loads are what bounds decode. Here a block's grid lookups are vector permutes: the
 * grids hold few distinct values (IQ2: 8, 25, 43; IQ3_XXS: eight), so an entry packs into a 16-bit word of 2- or
 * 3-bit codes, a 256-entry grid into 8 vectors of words, and 32 indices are looked up at once by vpermt2w (64 entries
 * each) and masked moves on the index's high bits. vpmultishiftqb pulls each value's code into a byte and vpermb maps
 * it to the value; the 7-bit sign fields go through vpermt2b (the 128 sign bytes), explicit sign bytes are taken as
 * they are, to a mask that negates y. A 512-entry grid (IQ2_XS, IQ3_S) takes 8 vpermt2w. The other types keep their
 * AVX2 dots: on Zen 4 this form measured no faster for IQ2_S (1024 entries: 16 vpermt2w) nor for a zmm TQ2_0 dot,
 * and IQ1_S / IQ1_M's grid has 2048 entries.
 *
 * Each block's sum is the exact integer the scalar dot computes, left in 16 int32 lanes; four blocks' lanes are
 * summed together (a transposing add tree) and added to the row's sum with the scalar dot's f32 steps, block by
 * block, so every level agrees bit for bit (test-ops).
 * note: against the AVX2 dots, one Zen 4 thread from cache (bench-dots, 256 rows of 4096, 2026-11-29): IQ2_XXS
 * 1.8x, IQ2_XS 1.35x, IQ3_XXS 1.9-2.0x, IQ3_S 1.7-1.85x (ggml's AVX2 dots: 1.0-1.8x). Decode stays compute-bound on two
 * cores; see docs/DESIGN.md §15.
 */
#include <pthread.h>
#include <string.h>

#include "cpu.h"
#include "mmv_iq.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define IQ512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c")))

/* The constant vectors, built once (the code tables from blocks_iq.h's grids). */
struct iq512_consts {
    _Alignas(64) uint16_t iq2xxs[256]; /* an IQ2 entry's 8 values as 2-bit codes, value j at bit 2j */
    _Alignas(64) uint16_t iq2xs[512];
    _Alignas(64) uint16_t iq3xxs[256]; /* an IQ3 entry's 4 values as 3-bit codes, value j at bit 3j */
    _Alignas(64) uint16_t iq3s[512];
    _Alignas(64) uint8_t ksigns[128];  /* blocks_ksigns */
    _Alignas(64) uint8_t idx2[64];     /* IQ2_XXS: byte 2G <- group G's index byte (8 (G / 4) + G % 4) */
    _Alignas(64) uint8_t packs[64];    /* byte G <- byte 8 (G / 4) + G % 4: four fields a qword, packed in order */
    _Alignas(64) uint8_t fields2[64];  /* multishift: byte k < 4 of a qword <- bits 32 + 7k.. (IQ2_XXS's sign fields) */
    _Alignas(64) uint8_t fields3[64];  /* multishift: byte k < 4 <- bits 7k.. (IQ3_XXS's) */
    _Alignas(64) uint8_t codes2[64];   /* multishift: byte b of a qword <- bits 2b.. */
    _Alignas(64) uint8_t codes3[64];   /* multishift: bytes 0..3 <- bits 3b.., bytes 4..7 <- bits 16 + 3 (b - 4).. */
    _Alignas(64) uint8_t vals2[64];    /* a code's value, the code in the low bits of the byte */
    _Alignas(64) uint8_t vals3[64];
    _Alignas(64) uint8_t vals3s[64];
    _Alignas(64) uint8_t nibbles[64];  /* multishift: word n < 16 <- bits 4n.. (a nibble of 8 bytes) */
    _Alignas(64) uint8_t qh3[2][64];   /* multishift: word e's high byte <- bits 32h + e.. (IQ3_S's qh) */
    _Alignas(64) uint16_t groups2[4][32]; /* zmm j: qword g holds group 8j + g's code word, four times */
    _Alignas(64) uint16_t groups3[4][32]; /* zmm j: qword g holds entries 16j + 2g and 16j + 2g + 1, twice */
    _Alignas(64) uint16_t scales[4][32];  /* zmm j: words 0..15 <- word 4 (2j), 16..31 <- word 4 (2j + 1) */
    _Alignas(64) uint16_t scales32[4][32]; /* zmm j: words 0..15 <- word 2j, 16..31 <- word 2j + 1 */
    _Alignas(64) uint16_t scales16[4][32]; /* zmm j: words 8m..8m + 7 <- word 4j + m */
    int ok; /* every grid value found among the codes' values */
};

static struct iq512_consts iq512_c;
static pthread_once_t iq512_once = PTHREAD_ONCE_INIT;

/* The index of v among vals, or -1. */
static int iq512_code(const uint8_t *vals, int n, int v) {
    for (int i = 0; i < n; i++)
        if (vals[i] == v) return i;
    return -1;
}

/* A grid entry's n values as codes of `bits` bits (value j at bit bits * j); 0 where a value is not in vals. */
static int iq512_codes(uint64_t entry, int n, const uint8_t *vals, int n_vals, int bits, uint16_t *out) {
    int w = 0;
    for (int j = 0; j < n; j++) {
        const int k = iq512_code(vals, n_vals, blocks_grid_u8(entry, j));
        if (k < 0) return 0;
        w |= k << (bits * j);
    }
    *out = (uint16_t)w;
    return 1;
}

static void iq512_init(void) {
    struct iq512_consts *c = &iq512_c;
    static const uint8_t v2[3] = {0x08, 0x19, 0x2b}, v3[8] = {0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e};
    static const uint8_t v3s[8] = {1, 3, 5, 7, 9, 11, 13, 15};
    int ok = 1;
    for (int e = 0; e < 512; e++) {
        ok &= iq512_codes(blocks_grid_iq2xs(e), 8, v2, 3, 2, &c->iq2xs[e]);
        ok &= iq512_codes(blocks_grid_iq3s(e), 4, v3s, 8, 3, &c->iq3s[e]);
        if (e < 256) ok &= iq512_codes(blocks_grid_iq2xxs(e), 8, v2, 3, 2, &c->iq2xxs[e]);
        if (e < 256) ok &= iq512_codes(blocks_grid_iq3xxs(e), 4, v3, 8, 3, &c->iq3xxs[e]);
    }
    for (int s = 0; s < 128; s++) c->ksigns[s] = (uint8_t)blocks_ksigns(s);
    for (int b = 0; b < 64; b++) {
        const int G = b / 2, k = b % 8;
        c->idx2[b] = (uint8_t)(b % 2 ? 0 : 8 * (G / 4) + G % 4);
        c->packs[b] = (uint8_t)(b < 32 ? 8 * (b / 4) + b % 4 : 0);
        c->fields2[b] = (uint8_t)(k < 4 ? 32 + 7 * k : 32);
        c->fields3[b] = (uint8_t)(k < 4 ? 7 * k : 0);
        c->codes2[b] = (uint8_t)(2 * k);
        c->codes3[b] = (uint8_t)(k < 4 ? 3 * k : 16 + 3 * (k - 4));
        c->vals2[b] = v2[b % 4 < 3 ? b % 4 : 0];
        c->vals3[b] = v3[b % 8];
        c->vals3s[b] = v3s[b % 8];
        c->nibbles[b] = (uint8_t)(b % 2 == 0 && b < 32 ? 4 * (b / 2) : 0);
        for (int h = 0; h < 2; h++) c->qh3[h][b] = (uint8_t)(b % 2 ? 32 * h + b / 2 : 0);
    }
    for (int j = 0; j < 4; j++)
        for (int w = 0; w < 32; w++) {
            const int g = w / 4;
            c->groups2[j][w] = (uint16_t)(8 * j + g);
            c->groups3[j][w] = (uint16_t)(16 * j + 2 * g + w % 2);
            c->scales[j][w] = (uint16_t)(4 * (2 * j + w / 16));
            c->scales32[j][w] = (uint16_t)(2 * j + w / 16);
            c->scales16[j][w] = (uint16_t)(4 * j + w / 8);
        }
    c->ok = ok;
}

static const struct iq512_consts *iq512_consts(void) {
    pthread_once(&iq512_once, iq512_init);
    return &iq512_c;
}

int cpu_iq512_ready(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vbmi") && iq512_consts()->ok;
}

#define IQ512_V(p) _mm512_load_si512((const void *)(p))

/* 32 bytes at p as 32 words */
IQ512 static inline __m512i iq512_words(const uint8_t *p) {
    return _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)p));
}

/* The word t[idx] of each of 32 words, t a table of n words (n / 32 vectors, n = 256 or 512): vpermt2w looks up
 * 64 entries at once, masked moves on the index's bits 6, 7, ... pick among the results. */
IQ512 static inline __attribute__((always_inline)) __m512i iq512_lookup(__m512i idx, const uint16_t *t, int n) {
    __m512i r[16];
#pragma GCC unroll 16
    for (int p = 0; p < n / 64; p++)
        r[p] = _mm512_permutex2var_epi16(IQ512_V(t + 64 * p), idx, IQ512_V(t + 64 * p + 32));
#pragma GCC unroll 4
    for (int bit = 64, m = n / 64; m > 1; bit *= 2, m /= 2) {
        const __mmask32 k = _mm512_test_epi16_mask(idx, _mm512_set1_epi16((short)bit));
#pragma GCC unroll 8
        for (int p = 0; p < m / 2; p++) r[p] = _mm512_mask_mov_epi16(r[2 * p], k, r[2 * p + 1]);
    }
    return r[0];
}

/* The scales of the 16 nibbles of s8 as 2 s + 1, word n for nibble n (bits 4n..). */
IQ512 static inline __m512i iq512_nibble_scales(long long s8, const struct iq512_consts *c) {
    const __m512i n = _mm512_and_si512(_mm512_multishift_epi64_epi8(IQ512_V(c->nibbles), _mm512_set1_epi64(s8)),
                                       _mm512_set1_epi16(15));
    return _mm512_add_epi16(_mm512_add_epi16(n, n), _mm512_set1_epi16(1));
}

/* 64 unsigned values from 8 code words: qword g of the picked words holds group g's codes (2-bit) or two entries'
 * (3-bit); multishift brings each value's code to the low bits of its byte, vpermb maps it to the value. */
IQ512 static inline __m512i iq512_values(__m512i words, const uint8_t *shifts, const uint8_t *vals) {
    return _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(IQ512_V(shifts), words), IQ512_V(vals));
}

/* The sign masks of 32 groups from their 7-bit sign fields (bytes 0..31 of f, bit 7 ignored): blocks_ksigns through
 * vpermt2b over the 128 sign bytes; sg[j] the bits of values 64j..64j+63 (bit 8g + i: value i of group 8j + g). */
IQ512 static inline void iq512_ksigns(__m512i f, const struct iq512_consts *c, uint64_t sg[8]) {
    _mm512_storeu_si512(sg, _mm512_permutex2var_epi8(IQ512_V(c->ksigns), f, IQ512_V(c->ksigns + 64)));
}

/* The sign masks and scales of a block whose 32-value parts ib = 0..7 each have one 32-bit word in qword ib of aux
 * (4 sign fields of 7 bits at bits fields[k].., the 4-bit scale above them, at bit ls_at): sg[j] the sign bits of
 * values 64j..64j+63 (bit 8g + i: value i of group 8j + g), *ls the scales 2 s + 1 at word 4 ib. */
IQ512 static inline void iq512_signs(__m512i aux, const uint8_t *fields, int ls_at, const struct iq512_consts *c,
                                     uint64_t sg[8], __m512i *ls) {
    iq512_ksigns(_mm512_permutexvar_epi8(IQ512_V(c->packs), _mm512_multishift_epi64_epi8(IQ512_V(fields), aux)), c, sg);
    const __m512i s = _mm512_and_si512(_mm512_srl_epi64(aux, _mm_cvtsi32_si128(ls_at)), _mm512_set1_epi64(15));
    *ls = _mm512_add_epi64(_mm512_add_epi64(s, s), _mm512_set1_epi64(1));
}

/* Σ w y over values 64j..64j+63: w the unsigned values, negated where the mask says (on y: |y| <= 127), the
 * pairs' int16 sums times the scales' words into acc. Pairs <= 2 * 62 * 127 fit int16. */
IQ512 static inline __m512i iq512_dot64(__m512i acc, __m512i w, uint64_t sg, const int8_t *y, __m512i ls) {
    const __m512i yv = _mm512_loadu_si512(y);
    const __m512i ys = _mm512_mask_sub_epi8(yv, _cvtu64_mask64(sg), _mm512_setzero_si512(), yv);
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(w, ys), ls);
}

/* IQ2_XXS: part ib's 8 bytes are its 4 grid indices and a 32-bit word of signs and scale. */
IQ512 static inline __m512i iq512_sum_iq2_xxs(const block_iq2_xxs *b, const block_q8_K *x,
                                              const struct iq512_consts *c) {
    const __m512i q = _mm512_loadu_si512(b->qs);
    const __m512i idx = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, IQ512_V(c->idx2), q);
    const __m512i codes = iq512_lookup(idx, c->iq2xxs, 256);
    uint64_t sg[8];
    __m512i ls;
    iq512_signs(q, c->fields2, 60, c, sg, &ls);
    __m512i acc = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        const __m512i g = _mm512_permutexvar_epi16(IQ512_V(c->groups2[j]), codes);
        const __m512i w = iq512_values(g, c->codes2, c->vals2);
        acc = iq512_dot64(acc, w, sg[j], x->qs + 64 * j, _mm512_permutexvar_epi16(IQ512_V(c->scales[j]), ls));
    }
    return acc;
}

/* IQ3_XXS: 64 index bytes (two grid entries a group), then part ib's word of signs and scale. */
IQ512 static inline __m512i iq512_sum_iq3_xxs(const block_iq3_xxs *b, const block_q8_K *x,
                                              const struct iq512_consts *c) {
    const __m512i lo = iq512_lookup(iq512_words(b->qs), c->iq3xxs, 256);
    const __m512i hi = iq512_lookup(iq512_words(b->qs + 32), c->iq3xxs, 256);
    uint64_t sg[8];
    __m512i ls;
    iq512_signs(_mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(b->qs + 64))), c->fields3, 28, c, sg, &ls);
    __m512i acc = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        const __m512i g = _mm512_permutex2var_epi16(lo, IQ512_V(c->groups3[j]), hi);
        const __m512i w = iq512_values(g, c->codes3, c->vals3);
        acc = iq512_dot64(acc, w, sg[j], x->qs + 64 * j, _mm512_permutexvar_epi16(IQ512_V(c->scales[j]), ls));
    }
    return acc;
}

/* IQ2_XS: a word per group, its grid index in bits 0..8 and its sign field above; a scale per 16 values. */
IQ512 static inline __m512i iq512_sum_iq2_xs(const block_iq2_xs *b, const block_q8_K *x, const struct iq512_consts *c) {
    const __m512i q = _mm512_loadu_si512(b->qs);
    const __m512i codes = iq512_lookup(_mm512_and_si512(q, _mm512_set1_epi16(511)), c->iq2xs, 512);
    uint64_t sg[8];
    iq512_ksigns(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9))), c, sg);
    long long s8;
    memcpy(&s8, b->scales, 8);
    const __m512i ls = iq512_nibble_scales(s8, c);
    __m512i acc = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        const __m512i w = iq512_values(_mm512_permutexvar_epi16(IQ512_V(c->groups2[j]), codes), c->codes2, c->vals2);
        acc = iq512_dot64(acc, w, sg[j], x->qs + 64 * j, _mm512_permutexvar_epi16(IQ512_V(c->scales16[j]), ls));
    }
    return acc;
}

/* IQ3_S: entry e's index is qs[e] | bit e of qh (as one 64-bit word) << 8, two entries a group; explicit sign bytes;
 * a scale nibble per 32 values. */
IQ512 static inline __m512i iq512_sum_iq3_s(const block_iq3_s *b, const block_q8_K *x, const struct iq512_consts *c) {
    long long h8;
    memcpy(&h8, b->qh, 8);
    const __m512i h = _mm512_set1_epi64(h8), bit8 = _mm512_set1_epi16(0x100);
    __m512i codes[2];
    for (int k = 0; k < 2; k++) {
        const __m512i hi = _mm512_and_si512(_mm512_multishift_epi64_epi8(IQ512_V(c->qh3[k]), h), bit8);
        const __m512i idx = _mm512_or_si512(iq512_words(b->qs + 32 * k), hi);
        codes[k] = iq512_lookup(idx, c->iq3s, 512);
    }
    uint64_t sg[4];
    memcpy(sg, b->signs, 32);
    uint32_t s4;
    memcpy(&s4, b->scales, 4);
    const __m512i ls = iq512_nibble_scales((long long)s4, c);
    __m512i acc = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        const __m512i g = _mm512_permutex2var_epi16(codes[0], IQ512_V(c->groups3[j]), codes[1]);
        const __m512i w = iq512_values(g, c->codes3, c->vals3s);
        acc = iq512_dot64(acc, w, sg[j], x->qs + 64 * j, _mm512_permutexvar_epi16(IQ512_V(c->scales32[j]), ls));
    }
    return acc;
}

/* The totals of four vectors' lanes, in order: pairs of lanes added while the vectors are interleaved, then the
 * four 128-bit quarters. */
IQ512 static inline __m128i iq512_hsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    const __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Four blocks at a time: their exact sums, then the scalar dot's f32 step for each in order. */
#define IQ512_DOT(t, factor)                                                                                 \
    IQ512 float cpu_dot_##t##_avx512(int64_t n, const void *w, const void *x) {                              \
        const struct iq512_consts *c = iq512_consts();                                                       \
        const block_q8_K *b = x;                                                                             \
        const block_##t *a = w;                                                                              \
        const int64_t nb = n / QK_K;                                                                         \
        float s = 0;                                                                                         \
        for (int64_t i0 = 0; i0 < nb; i0 += 4) {                                                             \
            __m512i v[4];                                                                                    \
            for (int k = 0; k < 4; k++)                                                                      \
                v[k] = i0 + k < nb ? iq512_sum_##t(&a[i0 + k], &b[i0 + k], c) : _mm512_setzero_si512();      \
            int32_t tot[4];                                                                                  \
            _mm_storeu_si128((__m128i *)tot, iq512_hsum4(v[0], v[1], v[2], v[3]));                           \
            for (int k = 0; k < 4 && i0 + k < nb; k++) {                                                     \
                const int64_t i = i0 + k;                                                                    \
                s += ((factor) * b[i].d) * (float)tot[k];                                                    \
            }                                                                                                \
        }                                                                                                    \
        return s;                                                                                            \
    }
IQ512_DOT(iq2_xxs, _cvtsh_ss(a[i].d) * 0.125f)
IQ512_DOT(iq3_xxs, _cvtsh_ss(a[i].d) * 0.25f)
IQ512_DOT(iq2_xs, _cvtsh_ss(a[i].d) * 0.125f)
IQ512_DOT(iq3_s, _cvtsh_ss(a[i].d))
#undef IQ512_DOT
#else
int cpu_iq512_ready(void) { return 0; }
#endif
