/* ref: float64 references of the ops; see ref.h. Slow and plain on purpose. */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../include/infer.h"
#include "../kernels/grids.h" /* the IQ types' codebooks (data; checked against ggml by test-quant) */

static const uint64_t ref_grid_iq2xxs[256] = BLOCKS_IQ2XXS_GRID, ref_grid_iq2xs[512] = BLOCKS_IQ2XS_GRID;
static const uint64_t ref_grid_iq2s[1024] = BLOCKS_IQ2S_GRID, ref_grid_iq1s[2048] = BLOCKS_IQ1S_GRID;
static const uint32_t ref_grid_iq3xxs[256] = BLOCKS_IQ3XXS_GRID, ref_grid_iq3s[512] = BLOCKS_IQ3S_GRID;

static const int ref_kv_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* MXFP4: the E2M1 values (sign, 2-bit exponent, 1-bit mantissa) 0 .5 1 1.5 2 3 4 6, negated from code 8 */
static const double ref_e2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

double ref_f16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp(m, -24);
    return s * ldexp(1024 + m, e - 25);
}

double ref_round_f16(float x) { return (double)(_Float16)x; }

double ref_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo = u & 0xffff, r = u & 0xffff0000u;
    if (lo > 0x8000 || (lo == 0x8000 && (u & 0x10000))) r += 0x10000;
    float f;
    memcpy(&f, &r, 4);
    return f;
}

static double rd_f16(const uint8_t *p) { return ref_f16((uint16_t)(p[0] | p[1] << 8)); }

static void ref_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

size_t ref_row_bytes(int32_t type, int64_t n) {
    switch (type) {
    case INFER_TYPE_F32: return (size_t)n * 4;
    case INFER_TYPE_F16:
    case INFER_TYPE_BF16: return (size_t)n * 2;
    case INFER_TYPE_Q8_0: return (size_t)n / 32 * 34;
    case INFER_TYPE_Q8_1: return (size_t)n / 32 * 36;
    case INFER_TYPE_Q4_1: return (size_t)n / 32 * 20;
    case INFER_TYPE_Q5_0: return (size_t)n / 32 * 22;
    case INFER_TYPE_Q5_1: return (size_t)n / 32 * 24;
    case INFER_TYPE_Q4_0:
    case INFER_TYPE_IQ4_NL: return (size_t)n / 32 * 18;
    case INFER_TYPE_MXFP4: return (size_t)n / 32 * 17;
    case INFER_TYPE_Q2_K: return (size_t)n / 256 * 84;
    case INFER_TYPE_Q3_K: return (size_t)n / 256 * 110;
    case INFER_TYPE_Q4_K: return (size_t)n / 256 * 144;
    case INFER_TYPE_Q5_K: return (size_t)n / 256 * 176;
    case INFER_TYPE_Q6_K: return (size_t)n / 256 * 210;
    case INFER_TYPE_IQ4_XS: return (size_t)n / 256 * 136;
    case INFER_TYPE_Q8_K: return (size_t)n / 256 * 292;
    case INFER_TYPE_IQ2_XXS:
    case INFER_TYPE_TQ2_0: return (size_t)n / 256 * 66;
    case INFER_TYPE_IQ2_XS: return (size_t)n / 256 * 74;
    case INFER_TYPE_IQ2_S: return (size_t)n / 256 * 82;
    case INFER_TYPE_IQ3_XXS: return (size_t)n / 256 * 98;
    case INFER_TYPE_IQ3_S: return (size_t)n / 256 * 110;
    case INFER_TYPE_IQ1_S: return (size_t)n / 256 * 50;
    case INFER_TYPE_IQ1_M: return (size_t)n / 256 * 56;
    case INFER_TYPE_TQ1_0: return (size_t)n / 256 * 54;
    }
    return 0;
}

/* The 4-bit quant e of 32 values packed as 16 bytes (low nibbles first), and a Q5 block's fifth bit e. */
static int ref_nib(const uint8_t *qs, int e) { return (e < 16 ? qs[e] : qs[e - 16] >> 4) & 0xF; }
static int ref_q5_bit(const uint8_t *qh, int e) { return (qh[e / 8] >> (e % 8)) & 1; }

static int ref_u16(const uint8_t *p) { return p[0] | p[1] << 8; }
static uint32_t ref_u32(const uint8_t *p) { return (uint32_t)ref_u16(p) | (uint32_t)ref_u16(p + 2) << 16; }

/* -1 if bit j of the 8 sign bits a 7-bit field stands for is set: the eighth bit is the parity of the seven. */
static double ref_sign7(int s7, int j) {
    int par = 0;
    for (int k = 0; k < 7; k++) par ^= (s7 >> k) & 1;
    return ((s7 | par << 7) >> j) & 1 ? -1.0 : 1.0;
}

/* Byte j of a codebook entry. */
static int ref_gb(uint64_t entry, int j) { return (int)((entry >> (8 * j)) & 0xFF); }

/* Element e of the lattice and ternary types (docs/quant.md §3.13); g = e / 8 is its group, j = e % 8. */
static double ref_elem_iq(int32_t type, const uint8_t *b, int e) {
    const int g = e / 8, j = e % 8, ib = e / 32;
    switch (type) {
    case INFER_TYPE_IQ2_XXS: { /* d, then per 32 values 4 index bytes and a word of signs and scale */
        const uint32_t aux = ref_u32(b + 2 + 8 * ib + 4);
        const int idx = b[2 + 8 * ib + g % 4];
        return rd_f16(b) * (0.5 + (aux >> 28)) / 4 * ref_gb(ref_grid_iq2xxs[idx], j) * ref_sign7((aux >> 7 * (g % 4)) & 127, j);
    }
    case INFER_TYPE_IQ2_XS: { /* d, 32 x u16 (index | signs << 9), scales[8] @66 */
        const int q = ref_u16(b + 2 + 2 * g), s = (b[66 + ib] >> 4 * ((e % 32) / 16)) & 15;
        return rd_f16(b) * (0.5 + s) / 4 * ref_gb(ref_grid_iq2xs[q & 511], j) * ref_sign7(q >> 9, j);
    }
    case INFER_TYPE_IQ2_S: { /* d, index bytes @2, sign bytes @34, qh @66, scales @74 */
        const int idx = b[2 + g] | ((b[66 + ib] >> 2 * (g % 4)) & 3) << 8, s = (b[74 + ib] >> 4 * ((e % 32) / 16)) & 15;
        return rd_f16(b) * (0.5 + s) / 4 * ref_gb(ref_grid_iq2s[idx], j) * ((b[34 + g] >> j) & 1 ? -1.0 : 1.0);
    }
    case INFER_TYPE_IQ3_XXS: { /* d, 64 index bytes (4 values each), then per 32 values a word of signs and scale */
        const uint32_t aux = ref_u32(b + 2 + 64 + 4 * ib);
        const int idx = b[2 + 2 * g + j / 4];
        return rd_f16(b) * (0.5 + (aux >> 28)) / 2 * ref_gb(ref_grid_iq3xxs[idx], j % 4) * ref_sign7((aux >> 7 * (g % 4)) & 127, j);
    }
    case INFER_TYPE_IQ3_S: { /* d, index bytes @2, qh @66 (bit k of qh[ib]: index k of the 32 values), signs @74, scales @106 */
        const int k = 2 * g + j / 4, idx = b[2 + k] | ((b[66 + ib] >> (k % 8)) & 1) << 8;
        const int s = (b[106 + ib / 2] >> 4 * (ib % 2)) & 15;
        return rd_f16(b) * (1 + 2 * s) * ref_gb(ref_grid_iq3s[idx], j % 4) * ((b[74 + g] >> j) & 1 ? -1.0 : 1.0);
    }
    case INFER_TYPE_IQ1_S: { /* d, index bytes @2, u16 qh @34: 3 index bits per group, scale bits 12..14, delta sign */
        const int qh = ref_u16(b + 34 + 2 * ib), idx = b[2 + g] | ((qh >> 3 * (g % 4)) & 7) << 8;
        const double delta = qh & 0x8000 ? -0.125 : 0.125;
        return rd_f16(b) * (2 * ((qh >> 12) & 7) + 1) * ((int8_t)ref_gb(ref_grid_iq1s[idx], j) + delta);
    }
    case INFER_TYPE_IQ1_M: { /* index bytes @0, qh @32 (a nibble per group), u16 scales @48 (top nibbles: the f16 d) */
        int sc[4];
        for (int k = 0; k < 4; k++) sc[k] = ref_u16(b + 48 + 2 * k);
        const double d = ref_f16((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0xF0) | ((sc[2] >> 4) & 0xF00) | (sc[3] & 0xF000)));
        const int nib = (b[32 + g / 2] >> 4 * (g % 2)) & 15, idx = b[g] | (nib & 7) << 8;
        const int s = (sc[ib / 2] >> (6 * (ib % 2) + 3 * ((g % 4) / 2))) & 7;
        return d * (2 * s + 1) * ((int8_t)ref_gb(ref_grid_iq1s[idx], j) + (nib & 8 ? -0.125 : 0.125));
    }
    case INFER_TYPE_TQ1_0: { /* base-3 digits, most significant first: qs[0..31] 5 each, qs[32..47] 5, qh[0..3] 4; d @52 */
        static const int pow3[5] = {1, 3, 9, 27, 81};
        const int byte = e < 160 ? b[e % 32] : e < 240 ? b[32 + (e - 160) % 16] : b[48 + (e - 240) % 4];
        const int n = e < 160 ? e / 32 : e < 240 ? (e - 160) / 16 : (e - 240) / 4;
        return rd_f16(b + 52) * ((((byte * pow3[n]) & 255) * 3 >> 8) - 1);
    }
    case INFER_TYPE_TQ2_0: /* 2 bits a value: bits 2 ((e % 128) / 32) of byte 32 (e / 128) + e % 32; d @64 */
        return rd_f16(b + 64) * (((b[32 * (e / 128) + e % 32] >> 2 * ((e % 128) / 32)) & 3) - 1);
    }
    return NAN;
}

/* Element e of a block, per docs/quant.md §3. */
static double ref_elem(int32_t type, const uint8_t *b, int e) {
    switch (type) {
    case INFER_TYPE_Q8_0: return rd_f16(b) * (int8_t)b[2 + e];
    case INFER_TYPE_Q8_1: return rd_f16(b) * (int8_t)b[4 + e];
    case INFER_TYPE_Q4_1: return rd_f16(b) * ref_nib(b + 4, e) + rd_f16(b + 2);
    case INFER_TYPE_Q5_0: return rd_f16(b) * (ref_nib(b + 6, e) + 16 * ref_q5_bit(b + 2, e) - 16);
    case INFER_TYPE_Q5_1: return rd_f16(b) * (ref_nib(b + 8, e) + 16 * ref_q5_bit(b + 4, e)) + rd_f16(b + 2);
    case INFER_TYPE_Q4_0: return rd_f16(b) * (((e < 16 ? b[2 + e] : b[2 + e - 16] >> 4) & 0xF) - 8);
    case INFER_TYPE_IQ4_NL: return rd_f16(b) * ref_kv_iq4[(e < 16 ? b[2 + e] : b[2 + e - 16] >> 4) & 0xF];
    case INFER_TYPE_MXFP4: return ldexp(ref_e2m1[ref_nib(b + 1, e)], b[0] - 127); /* E8M0: 2^(e-127) */
    case INFER_TYPE_Q8_K: {
        float d;
        memcpy(&d, b, 4);
        return (double)d * (int8_t)b[4 + e];
    }
    case INFER_TYPE_Q2_K: { /* scales @0, qs @16, d @80, dmin @82 */
        int h = e / 128, r = e % 128, sc = b[e / 16];
        int q = (b[16 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
        return rd_f16(b + 80) * (sc & 15) * q - rd_f16(b + 82) * (sc >> 4);
    }
    case INFER_TYPE_Q3_K: { /* hmask @0, qs @32, scales @96, d @108 */
        int h = e / 128, r = e % 128, s = e / 16;
        int lo = s < 8 ? b[96 + s] & 15 : b[96 + s - 8] >> 4, hi = (b[96 + 8 + s % 4] >> (2 * (s / 4))) & 3;
        int q = ((b[32 + 32 * h + r % 32] >> (2 * (r / 32))) & 3) - ((b[r % 32] >> (e / 32)) & 1 ? 0 : 4);
        return rd_f16(b + 108) * ((lo | hi << 4) - 32) * q;
    }
    case INFER_TYPE_Q4_K:
    case INFER_TYPE_Q5_K: {
        int j = e / 32, p = e / 64, sc, m;
        const uint8_t *qs = b + (type == INFER_TYPE_Q4_K ? 16 : 48);
        ref_scale_min(j, b + 4, &sc, &m);
        int q = (e % 64 < 32) ? qs[32 * p + e % 32] & 0xF : qs[32 * p + e % 32] >> 4;
        if (type == INFER_TYPE_Q5_K) q += 16 * ((b[16 + e % 32] >> j) & 1);
        return rd_f16(b) * sc * q - rd_f16(b + 2) * m;
    }
    case INFER_TYPE_Q6_K: {
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t *ql = b, *qh = b + 128;
        int lo = (k == 0) ? ql[64 * h + l] & 0xF : (k == 1) ? ql[64 * h + 32 + l] & 0xF
               : (k == 2) ? ql[64 * h + l] >> 4 : ql[64 * h + 32 + l] >> 4;
        int q = (lo | ((qh[32 * h + l] >> (2 * k)) & 3) << 4) - 32;
        return rd_f16(b + 208) * (int8_t)b[192 + e / 16] * q;
    }
    case INFER_TYPE_IQ4_XS: {
        int ib = e / 32, j = e % 32;
        int sh = b[2] | b[3] << 8;
        int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | ((sh >> 2 * ib) & 3) << 4;
        int q = j < 16 ? b[8 + 16 * ib + j] & 0xF : b[8 + 16 * ib + j - 16] >> 4;
        return rd_f16(b) * (ls - 32) * ref_kv_iq4[q];
    }
    }
    return ref_elem_iq(type, b, e);
}

int ref_dequant(int32_t type, const void *src, double *dst, int64_t n) {
    const uint8_t *s = src;
    if (type == INFER_TYPE_F32) {
        for (int64_t i = 0; i < n; i++) dst[i] = ((const float *)src)[i];
        return 0;
    }
    if (type == INFER_TYPE_F16 || type == INFER_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(s[2 * i] | s[2 * i + 1] << 8);
            if (type == INFER_TYPE_F16) {
                dst[i] = ref_f16(h);
            } else {
                uint32_t u = (uint32_t)h << 16;
                float f;
                memcpy(&f, &u, 4);
                dst[i] = f;
            }
        }
        return 0;
    }
    size_t bb = ref_row_bytes(type, 256);
    if (!bb) return -1;
    int blck = ref_row_bytes(type, 32) ? 32 : 256; /* 256-value types: 0 bytes for 32 values */
    bb = ref_row_bytes(type, blck);
    for (int64_t i = 0; i < n; i++) dst[i] = ref_elem(type, s + (i / blck) * bb, (int)(i % blck));
    return 0;
}

/* Σ_c w_c x_c of one row and its Σ |w_c x_c| (added to *sa). With Q8_1 blocks (the CPU's partner of Q4_1 / Q5_1)
 * the min m of each weight block meets the block's stored s = f16(d·Σq), not Σ d·q, as ggml's vec_dot computes:
 * Σ (w_c - m) x_c + m·s per block. wq: the row's blocks; xq: the token's Q8_1 row (NULL otherwise). */
static double ref_row_dot(int32_t type, const uint8_t *wq, const double *w, const double *x, const uint8_t *xq, int64_t n,
                          double *sa) {
    const int min = xq && (type == INFER_TYPE_Q4_1 || type == INFER_TYPE_Q5_1);
    const size_t bb = ref_row_bytes(type, 32);
    double s = 0;
    for (int64_t c = 0; c < n; c++) {
        const double m = min ? rd_f16(wq + (size_t)(c / 32) * bb + 2) : 0;
        s += (w[c] - m) * x[c];
        *sa += fabs((w[c] - m) * x[c]);
        if (min && c % 32 == 0) {
            const double ms = m * rd_f16(xq + (size_t)(c / 32) * 36 + 2);
            s += ms;
            *sa += fabs(ms);
        }
    }
    return s;
}

void ref_mmv(const struct mm_args *a, int32_t act_type, double *y, double *yabs) {
    double *w = malloc(sizeof(double) * a->n_in), *w2 = malloc(sizeof(double) * a->n_in);
    double *x = malloc(sizeof(double) * a->n_in * a->n_tokens);
    size_t wb = ref_row_bytes(a->type, a->n_in);
    for (int64_t t = 0; t < a->n_tokens; t++) {
        double *xt = x + t * a->n_in;
        const float *xf = a->x + t * a->n_in;
        if (act_type == REF_ACT_Q8_SPLIT) { /* the q8 split layout: int8 rows, then (d, s) per 32 values */
            const int8_t *q = (const int8_t *)a->xq + t * a->n_in;
            const float *ds = (const float *)((const char *)a->xq + q8_split_ds_offset(a->n_in, (int32_t)a->n_tokens));
            for (int64_t c = 0; c < a->n_in; c++) xt[c] = (double)ds[2 * (t * (a->n_in / 32) + c / 32)] * q[c];
        } else if (act_type == REF_ACT_F32) {
            for (int64_t c = 0; c < a->n_in; c++) xt[c] = xf[c];
        } else if (act_type >= 0) {
            ref_dequant(act_type, (const char *)a->xq + t * ref_row_bytes(act_type, a->n_in), xt, a->n_in);
        } else {
            for (int64_t c = 0; c < a->n_in; c++)
                xt[c] = a->type == INFER_TYPE_F16 ? ref_round_f16(xf[c]) : a->type == INFER_TYPE_BF16 ? ref_round_bf16(xf[c]) : xf[c];
        }
    }
    for (int64_t r = 0; r < a->n_out; r++) {
        ref_dequant(a->type, (const char *)a->w + r * wb, w, a->n_in);
        if (a->epilogue == MMV_SWIGLU) ref_dequant(a->type, (const char *)a->w2 + r * wb, w2, a->n_in);
        for (int64_t t = 0; t < a->n_tokens; t++) {
            const double *xt = x + t * a->n_in;
            const uint8_t *xq = act_type == INFER_TYPE_Q8_1 ? (const uint8_t *)a->xq + t * ref_row_bytes(act_type, a->n_in) : NULL;
            double sa = 0;
            double s = ref_row_dot(a->type, (const uint8_t *)a->w + r * wb, w, xt, xq, a->n_in, &sa);
            if (a->epilogue == MMV_SWIGLU) {
                const double s2 = ref_row_dot(a->type, (const uint8_t *)a->w2 + r * wb, w2, xt, xq, a->n_in, &sa);
                s = s / (1 + exp(-s)) * s2;
            }
            if (a->epilogue == MMV_ADD) s += a->add[t * a->n_out + r];
            y[t * a->n_out + r] = s;
            if (yabs) yabs[t * a->n_out + r] = sa;
        }
    }
    free(w);
    free(w2);
    free(x);
}

void ref_norm(const struct norm_args *a, double *y) {
    for (int r = 0; r < a->n_rows; r++) {
        const float *x = a->x + r * a->x_stride;
        double ss = 0;
        for (int64_t i = 0; i < a->n; i++) ss += (double)x[i] * x[i];
        double sc = 1 / sqrt(ss / a->n + a->eps);
        for (int64_t i = 0; i < a->n; i++) {
            double v = x[i] * sc * (a->w ? a->w[i] : 1.0);
            if (a->gate) {
                double g = a->gate[r * a->gate_stride + i];
                v *= g / (1 + exp(-g));
            }
            y[r * a->n + i] = v;
        }
    }
}

void ref_rope(const struct rope_args *a, const float *x_in, double *y) {
    int half = a->n_rot / 2;
    for (int t = 0; t < a->n_tokens; t++)
        for (int h = 0; h < a->n_head; h++) {
            const float *x = x_in + t * a->token_stride + h * a->head_stride;
            double *o = y + ((int64_t)t * a->n_head + h) * a->head_dim;
            for (int i = 0; i < a->head_dim; i++) o[i] = x[i];
            for (int i = 0; i < half; i++) {
                double th = a->pos[t] * (double)a->freq_scale * pow(a->freq_base, -2.0 * i / a->n_rot);
                int i0 = a->mode == ROPE_NEOX ? i : 2 * i, i1 = a->mode == ROPE_NEOX ? i + half : 2 * i + 1;
                o[i0] = x[i0] * cos(th) - x[i1] * sin(th);
                o[i1] = x[i0] * sin(th) + x[i1] * cos(th);
            }
        }
}

void ref_act(const struct act_args *a, double *y) {
    int64_t s2 = a->x2_stride ? a->x2_stride : a->n;
    for (int64_t r = 0; r < a->n_rows; r++) {
        const float *x = a->x + r * a->n, *x2 = a->x2 ? a->x2 + r * s2 : NULL;
        double *o = y + r * a->n;
        if (a->op == ACT_SIGMOID_MUL || a->op == ACT_SIGMOID_MUL_ROW || a->op == ACT_ADD) {
            for (int64_t i = 0; i < a->n; i++) {
                double g = a->op == ACT_SIGMOID_MUL_ROW ? x2[0] : x2[i];
                o[i] = a->op == ACT_ADD ? (double)x[i] + g : x[i] / (1 + exp(-g));
            }
        } else if (a->op == ACT_SOFTMAX) {
            double m = -INFINITY, s = 0;
            for (int64_t i = 0; i < a->n; i++) m = fmax(m, (double)a->scale * x[i]);
            for (int64_t i = 0; i < a->n; i++) s += exp((double)a->scale * x[i] - m);
            for (int64_t i = 0; i < a->n; i++) o[i] = exp((double)a->scale * x[i] - m) / s;
        } else {
            for (int64_t i = 0; i < a->n; i++) {
                double v = x[i] / (1 + exp(-(double)x[i]));
                o[i] = a->op == ACT_SWIGLU ? v * x2[i] : v;
            }
        }
    }
}

/* Values off..off+n-1 of a row of KV cells of type (F16 halves or Q8_0 blocks; off a block multiple). */
static void ref_kv_values(int32_t type, const void *cells, int64_t off, int n, double *out) {
    if (type == INFER_TYPE_F16)
        for (int i = 0; i < n; i++) out[i] = ref_f16(((const uint16_t *)cells)[off + i]);
    else
        ref_dequant(type, (const uint8_t *)cells + ref_row_bytes(type, off), out, n);
}

/* y = H x for each chunk of n values of len (n 0: y = x); H[i][j] = (-1)^popcount(i & j) / sqrt(n), the
 * Sylvester-order Walsh-Hadamard matrix. */
void ref_hadamard(const double *x, double *y, int len, int n) {
    for (int c = 0; c < len; c += n ? n : len)
        for (int i = 0; i < (n ? n : len); i++) {
            double s = 0;
            if (!n) s = x[c + i];
            for (int j = 0; n && j < n; j++) s += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1 : 1) * x[c + j];
            y[c + i] = n ? s / sqrt((double)n) : s;
        }
}

void ref_attn(const struct attn_args *a, double *out) {
    const int d = a->head_dim, group = a->n_head / a->n_head_kv;
    const int64_t row = (int64_t)a->n_head_kv * d;
    /* every cell's K and V rows once, (n_kv, n_head_kv, d) */
    double *K = malloc(sizeof(double) * (size_t)(a->n_kv * row)), *V = malloc(sizeof(double) * (size_t)(a->n_kv * row));
    for (int j = 0; j < a->n_kv; j++) {
        ref_kv_values(a->kv_type, a->k, j * a->kv_stride, (int)row, K + j * row);
        ref_kv_values(a->kv_type, a->v, j * a->kv_stride, (int)row, V + j * row);
    }
    double *p = malloc(sizeof(double) * a->n_kv), *q = malloc(sizeof(double) * d), *o = malloc(sizeof(double) * d);
    for (int t = 0; t < a->n_tokens; t++)
        for (int h = 0; h < a->n_head; h++) {
            for (int i = 0; i < d; i++) o[i] = a->q[t * a->q_stride + h * d + i];
            ref_hadamard(o, q, d, a->rot_k);
            const int g = h / group, last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
            double m = -INFINITY, s = 0;
            for (int j = 0; j <= last; j++) {
                const double *kv = K + j * row + g * d;
                double dot = 0;
                for (int i = 0; i < d; i++) dot += q[i] * kv[i];
                p[j] = dot * a->scale;
                m = fmax(m, p[j]);
            }
            for (int j = 0; j <= last; j++) s += (p[j] = exp(p[j] - m));
            for (int i = 0; i < d; i++) o[i] = 0;
            for (int j = 0; j <= last; j++)
                for (int i = 0; i < d; i++) o[i] += p[j] * V[j * row + g * d + i];
            for (int i = 0; i < d; i++) o[i] /= s;
            ref_hadamard(o, out + ((int64_t)t * a->n_head + h) * d, d, a->rot_v);
        }
    free(K), free(V), free(p), free(q), free(o);
}

void ref_moe_route(const struct moe_route_args *a, double *probs) {
    for (int t = 0; t < a->n_tokens; t++) {
        const float *z = a->logits + t * a->n_expert;
        double m = -INFINITY, s = 0;
        for (int e = 0; e < a->n_expert; e++) m = fmax(m, z[e]);
        for (int e = 0; e < a->n_expert; e++) s += exp(z[e] - m);
        for (int e = 0; e < a->n_expert; e++) probs[t * a->n_expert + e] = exp(z[e] - m) / s;
    }
}

void ref_moe_ffn(const struct moe_ffn_args *a, double *y) {
    int64_t E = a->n_embd, F = a->n_ff;
    size_t gb = ref_row_bytes(a->type_gate_up, E), db = ref_row_bytes(a->type_down, F);
    double *wg = malloc(sizeof(double) * E), *wu = malloc(sizeof(double) * E), *wd = malloc(sizeof(double) * F);
    double *h = malloc(sizeof(double) * F);
    for (int t = 0; t < a->n_tokens; t++) {
        const float *x = a->x + t * E;
        for (int64_t i = 0; i < E; i++) y[t * E + i] = 0;
        for (int k = 0; k < a->n_expert_used; k++) {
            int e = a->ids[t * a->n_expert_used + k];
            double wk = a->weights[t * a->n_expert_used + k];
            for (int64_t f = 0; f < F; f++) {
                ref_dequant(a->type_gate_up, (const char *)a->gate + ((size_t)e * F + f) * gb, wg, E);
                ref_dequant(a->type_gate_up, (const char *)a->up + ((size_t)e * F + f) * gb, wu, E);
                double g = 0, u = 0;
                for (int64_t i = 0; i < E; i++) {
                    g += wg[i] * x[i];
                    u += wu[i] * x[i];
                }
                h[f] = g / (1 + exp(-g)) * u;
            }
            for (int64_t i = 0; i < E; i++) {
                ref_dequant(a->type_down, (const char *)a->down + ((size_t)e * E + i) * db, wd, F);
                double s = 0;
                for (int64_t f = 0; f < F; f++) s += wd[f] * h[f];
                y[t * E + i] += wk * s;
            }
        }
    }
    free(wg);
    free(wu);
    free(wd);
    free(h);
}

void ref_ssm_conv(const struct ssm_conv_args *a, const float *state_in, double *y, double *state_out) {
    const int64_t nc = a->n_ch, nw = a->d_conv - 1, ring = a->d_conv - 1 + MMV_MAX_TOKENS, p0 = *a->pos;
    for (int64_t i = 0; i < ring * nc; i++) state_out[i] = state_in[i];
    for (int64_t t = 0; t < a->n_tokens; t++)
        for (int64_t ch = 0; ch < nc; ch++) {
            double s = 0;
            for (int i = 0; i < a->d_conv; i++) {
                const int64_t p = p0 + t - nw + i, slot = ((p % ring) + ring) % ring;
                s += (double)a->w[ch * a->d_conv + i] * (p >= p0 ? a->x[(p - p0) * a->x_stride + ch] : state_in[slot * nc + ch]);
            }
            y[t * nc + ch] = s / (1 + exp(-s));
        }
    for (int64_t t = 0; t < a->n_tokens; t++) /* in order: a later position takes its slot over */
        for (int64_t ch = 0; ch < nc; ch++) state_out[((p0 + t) % ring) * nc + ch] = a->x[t * a->x_stride + ch];
}

void ref_ssm_conv_window(const struct ssm_conv_args *a, const float *state_in, int32_t t, float *win) {
    const int64_t nc = a->n_ch, nw = a->d_conv - 1, ring = a->d_conv - 1 + MMV_MAX_TOKENS, p0 = *a->pos;
    for (int64_t i = 0; i < nw; i++) {
        const int64_t p = p0 + t - nw + 1 + i, slot = ((p % ring) + ring) % ring;
        for (int64_t ch = 0; ch < nc; ch++)
            win[i * nc + ch] = p >= p0 ? a->x[(p - p0) * a->x_stride + ch] : state_in[slot * nc + ch];
    }
}

/* x / sqrt(||x||^2 + eps) in double */
static void ref_l2(const float *x, double *y, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double nrm = sqrt(ss + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] / nrm;
}

void ref_gdn(const struct gdn_args *a, const float *state_in, double *out, double *state_out) {
    int D = a->d_state, H = a->n_vhead, r = H / a->n_group;
    double *q = malloc(sizeof(double) * D), *k = malloc(sizeof(double) * D), *u = malloc(sizeof(double) * D);
    for (int j = 0; j < H; j++) {
        /* S[i][c] (key i, value c) kept row-major here; the args' layout only at the boundary */
        double *S = state_out + (size_t)j * D * D;
        for (int i = 0; i < D; i++)
            for (int c = 0; c < D; c++) S[i * D + c] = state_in[(size_t)j * D * D + (size_t)c * D + i];
        int g = a->grouped ? j / r : j % a->n_group;
        int64_t ab = a->ab_group ? (int64_t)(j / r) * 2 * r + j % r : j;
        for (int t = 0; t < a->n_tokens; t++) {
            double beta = 1 / (1 + exp(-(double)a->b[t * a->ab_stride + ab]));
            double x = (double)a->a[t * a->ab_stride + ab] + a->dt_bias[j];
            double decay = exp((x > 20 ? x : log1p(exp(x))) * a->ssm_a[j]);
            ref_l2(a->q + t * a->qk_stride + (int64_t)g * D, q, D, a->eps);
            ref_l2(a->k + t * a->qk_stride + (int64_t)g * D, k, D, a->eps);
            const float *v = a->v + t * a->v_stride + (int64_t)j * D;
            for (int i = 0; i < D * D; i++) S[i] *= decay;
            for (int c = 0; c < D; c++) {
                double sk = 0;
                for (int i = 0; i < D; i++) sk += S[i * D + c] * k[i];
                u[c] = beta * (v[c] - sk);
            }
            for (int i = 0; i < D; i++)
                for (int c = 0; c < D; c++) S[i * D + c] += k[i] * u[c];
            for (int c = 0; c < D; c++) {
                double o = 0;
                for (int i = 0; i < D; i++) o += S[i * D + c] * q[i];
                out[((int64_t)t * H + j) * D + c] = o / sqrt((double)D);
            }
        }
        /* back to the args' layout: S[i][c] at [c][i] */
        double *tmp = malloc(sizeof(double) * D * D);
        for (int i = 0; i < D; i++)
            for (int c = 0; c < D; c++) tmp[(size_t)c * D + i] = S[i * D + c];
        memcpy(S, tmp, sizeof(double) * D * D);
        free(tmp);
    }
    free(q);
    free(k);
    free(u);
}

/* ---- sampling: the chain of kernels.h sample_args for one row ---- */
struct ref_cand {
    int32_t id;
    float l;
};
static int ref_cand_cmp(const void *x, const void *y) {
    const struct ref_cand *a = x, *b = y;
    if (a->l != b->l) return a->l > b->l ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* ref_sample_row, and with list non-NULL the distribution it draws from (the survivors in the draw's order). */
static int32_t ref_sample(const float *logits, const struct sample_args *a, int32_t row, double u, double *mp,
                          double *mu, double *mz, struct sample_list *list) {
    const int32_t n = a->n_vocab;
    struct ref_cand *c = malloc(sizeof *c * (size_t)n), *s = malloc(sizeof *s * (size_t)n);
    *mp = *mu = INFINITY, *mz = 0;
    for (int32_t i = 0; i < n; i++) c[i].id = i, c[i].l = isnan(logits[i]) ? -INFINITY : logits[i];
    /* the window's counts over the whole vocabulary: the pairs, then the row's pushes and drops, one at a time */
    int32_t *count = calloc((size_t)n, sizeof *count);
    for (int32_t j = 0; j < a->n_pen; j++) count[a->pen[2 * j]] += a->pen[2 * j + 1];
    for (int32_t j = 0; a->pen_push && j < row; j++) {
        count[a->pen_push[j]]++;
        const int32_t d = a->pen_drop[j];
        if (d >= 0) count[d]--;
        if (d <= -2) count[a->pen_push[-2 - d]]--;
    }
    for (int32_t t = 0; t < n; t++)
        if (count[t] > 0)
            c[t].l = sample_penalise(c[t].l, count[t], a->repeat_penalty, a->frequency_penalty, a->presence_penalty);
    free(count);
    memcpy(s, c, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, ref_cand_cmp);
    const float max = s[0].l;
    int32_t pick = s[0].id;
    if (a->temp <= 0 || max == -INFINITY) goto done;
    const int topk = a->top_k > 0 && a->top_k < n;
    struct ref_cand *set = topk ? s : c; /* sorted with top-k, else in id order */
    int32_t k = topk ? a->top_k : n;
    double z = 0; /* the double twin of the chain's float z, for the margins */
    float zf = 0;
    for (int32_t i = 0; i < k; i++) z += exp((double)set[i].l - max), zf += expf(set[i].l - max);
    *mz = fabs(zf - z) / z;
    if (a->min_p > 0) {
        const float min_logit = max + logf(a->min_p);
        int32_t m = 0;
        for (int32_t i = 0; i < k; i++)
            if (set[i].l >= min_logit) set[m++] = set[i];
        if (m == 0) { /* nothing left: the first candidate */
            pick = set[0].id;
            goto one;
        }
        k = m;
    }
    if (a->top_p < 1) {
        if (!topk) qsort(set, (size_t)k, sizeof *set, ref_cand_cmp);
        float cum = 0;
        double cumd = 0;
        for (int32_t i = 0; i < k; i++) {
            cum += expf(set[i].l - max) / zf;
            cumd += exp((double)set[i].l - max) / z;
            const double d = fabs(cumd - a->top_p) / (a->top_p > 1e-3 ? a->top_p : 1e-3);
            if (d < *mp) *mp = d;
            if (cum >= a->top_p) {
                k = i + 1;
                break;
            }
        }
    }
    float m2 = -INFINITY;
    for (int32_t i = 0; i < k; i++) {
        if (a->temp != 1) set[i].l /= a->temp;
        if (set[i].l > m2) m2 = set[i].l;
    }
    double total = 0, cum = 0;
    for (int32_t i = 0; i < k; i++) total += exp((double)set[i].l - m2);
    pick = set[k - 1].id;
    for (int32_t i = 0; i < k; i++) {
        cum += exp((double)set[i].l - m2);
        if (i + 1 < k && fabs(u * total - cum) / total < *mu) *mu = fabs(u * total - cum) / total;
        if (u * total < cum) {
            pick = set[i].id;
            break;
        }
    }
    if (list) {
        list->n = k;
        for (int32_t i = 0; i < k && i < SAMPLE_MAX_CAND; i++)
            list->id[i] = set[i].id, list->p[i] = exp((double)set[i].l - m2) / total, list->l[i] = set[i].l;
    }
    goto out;
done:
    if (list) list->n = 1, list->id[0] = pick, list->p[0] = 1.0, list->l[0] = max;
    goto out;
one:
    if (list) list->n = 1, list->id[0] = pick, list->p[0] = 1.0, list->l[0] = -INFINITY;
out:
    free(c);
    free(s);
    return pick;
}

int32_t ref_sample_row(const float *logits, const struct sample_args *a, int32_t row, double u, double *mp, double *mu,
                       double *mz) {
    return ref_sample(logits, a, row, u, mp, mu, mz, NULL);
}

void ref_sample_list(const float *logits, const struct sample_args *a, int32_t row, struct sample_list *list) {
    double mp, mu, mz;
    ref_sample(logits, a, row, 0.0, &mp, &mu, &mz, list);
}

void ref_spec_accept(const double *p, const double *q, int32_t n_vocab, const int32_t *const *order,
                     const int32_t *n_order, const struct spec_accept_args *a, int32_t *out) {
    int32_t n = 0;
    for (int32_t i = 0; i < a->k; i++) {
        const double *pi = p + (size_t)i * n_vocab, *qi = q + (size_t)i * n_vocab;
        const int32_t d = a->drafts[i];
        const int forced = a->force >= 0 && i < a->force;
        if (forced || (qi[d] > 0 && a->u_acc[i] * qi[d] < pi[d])) {
            out[1 + n++] = d;
            if (i == a->force) { /* the hook ends the step here */
                out[0] = n;
                return;
            }
            continue;
        }
        /* rejected: norm(max(0, p - q)) over p's survivors in their order */
        double total = 0;
        for (int32_t j = 0; j < n_order[i]; j++) {
            const int32_t c = order[i][j];
            total += pi[c] > qi[c] ? pi[c] - qi[c] : 0;
        }
        int32_t t = a->p_draw[i];
        if (total > 0) {
            const double u = a->u_res[i] * total;
            double cum = 0;
            for (int32_t j = 0; j < n_order[i]; j++) {
                const int32_t c = order[i][j];
                if (!(pi[c] > qi[c])) continue;
                cum += pi[c] - qi[c];
                t = c;
                if (u < cum) break;
            }
        }
        out[1 + n++] = t;
        out[0] = n;
        return;
    }
    out[1 + n++] = a->p_draw[a->k]; /* every draft kept */
    out[0] = n;
}

void ref_spec_accept_greedy(const int32_t *drafts, const int32_t *picks, int32_t k, int32_t force, int32_t *out) {
    int32_t n = 0;
    for (int32_t i = 0; i <= k; i++) { /* row i: the draft while forced, else the row's pick, kept when it is d_i */
        const int forced = force >= 0 && i < force;
        const int32_t t = forced ? drafts[i] : picks[i];
        const int kept = (forced || (i < k && t == drafts[i])) && i != force;
        out[1 + n++] = t;
        if (!kept) break;
    }
    out[0] = n;
}
