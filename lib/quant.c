/* quant: the ggml type table and the reference row (de)quantisers on the CPU.
 *
 * Decoding is kernels/blocks.h applied block by block, so the host and the CUDA kernels share one
 * definition and both equal ggml's dequantize_row_<t> bit for bit. The quantisers follow ggml's
 * quantize_row_<t>_ref algorithms (docs/quant.md §4) operation for operation, in the
 * same float order, so they reproduce its bytes: this file is compiled with -std=c11, which turns
 * off FMA contraction, and every reduction below runs in ggml's index order. Which variant each
 * quantiser mirrors is stated at the function: the quantize_row_<t>_ref of every type but IQ4_NL/IQ4_XS
 * (llama-quantize's ntry = 7 search); without an importance matrix llama-quantize calls those _ref
 * functions for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K and MXFP4, so files we write match its bytes.
 *
 * Layout: type table; f16/bf16 helpers; rounding helpers; one quantiser per type; the row dispatch.
 */
#include "quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "blocks.h"

/* ---- the type table: every ggml id below GGML_TYPE_COUNT (43); removed ids have no name ---- */

#define T(name, blck, bytes, deq, qnt, sup) {name, blck, bytes, deq, qnt, sup}
static const struct quant_type quant_types[INFER_TYPE_COUNT] = {
    [0] = T("F32", 1, 4, 1, 1, 1),
    [1] = T("F16", 1, 2, 1, 1, 1),
    [2] = T("Q4_0", 32, 18, 1, 1, 1),
    [3] = T("Q4_1", 32, 20, 1, 1, 1),
    [6] = T("Q5_0", 32, 22, 1, 1, 1),
    [7] = T("Q5_1", 32, 24, 1, 1, 1),
    [8] = T("Q8_0", 32, 34, 1, 1, 1),
    [9] = T("Q8_1", 32, 36, 0, 1, 0),
    [10] = T("Q2_K", 256, 84, 1, 1, 1),
    [11] = T("Q3_K", 256, 110, 1, 1, 1),
    [12] = T("Q4_K", 256, 144, 1, 1, 1),
    [13] = T("Q5_K", 256, 176, 1, 1, 1),
    [14] = T("Q6_K", 256, 210, 1, 1, 1),
    [15] = T("Q8_K", 256, 292, 1, 1, 0),
    [16] = T("IQ2_XXS", 256, 66, 1, 0, 1),
    [17] = T("IQ2_XS", 256, 74, 1, 0, 1),
    [18] = T("IQ3_XXS", 256, 98, 1, 0, 1),
    [19] = T("IQ1_S", 256, 50, 1, 0, 1),
    [20] = T("IQ4_NL", 32, 18, 1, 1, 1),
    [21] = T("IQ3_S", 256, 110, 1, 0, 1),
    [22] = T("IQ2_S", 256, 82, 1, 0, 1),
    [23] = T("IQ4_XS", 256, 136, 1, 1, 1),
    [24] = T("I8", 1, 1, 0, 0, 0),
    [25] = T("I16", 1, 2, 0, 0, 0),
    [26] = T("I32", 1, 4, 0, 0, 0),
    [27] = T("I64", 1, 8, 0, 0, 0),
    [28] = T("F64", 1, 8, 0, 0, 0),
    [29] = T("IQ1_M", 256, 56, 1, 0, 1),
    [30] = T("BF16", 1, 2, 1, 1, 1),
    [34] = T("TQ1_0", 256, 54, 1, 0, 1),
    [35] = T("TQ2_0", 256, 66, 1, 0, 1),
    [39] = T("MXFP4", 32, 17, 1, 1, 1),
    [40] = T("NVFP4", 64, 36, 0, 0, 0),
    [41] = T("Q1_0", 128, 18, 0, 0, 0),
    [42] = T("Q2_0", 64, 18, 0, 0, 0),
};
#undef T

const struct quant_type *quant_type(int32_t type) {
    if (type < 0 || type >= INFER_TYPE_COUNT || !quant_types[type].name) return NULL;
    return &quant_types[type];
}

static int quant_ascii_lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }

int32_t quant_type_by_name(const char *name) {
    if (!name) return -1;
    for (int32_t t = 0; t < INFER_TYPE_COUNT; t++) {
        const char *a = quant_types[t].name, *b = name;
        if (!a) continue;
        while (*a && quant_ascii_lower((unsigned char)*a) == quant_ascii_lower((unsigned char)*b)) a++, b++;
        if (!*a && !*b) return t;
    }
    return -1;
}

size_t quant_row_bytes(int32_t type, int64_t n) {
    const struct quant_type *t = quant_type(type);
    if (!t || n < 0 || n % t->blck) return 0;
    return (size_t)(n / t->blck) * (size_t)t->bytes;
}

float quant_f16_to_f32(uint16_t h) { return blocks_f16_to_f32(h); }
uint16_t quant_f32_to_f16(float f) { return blocks_f32_to_f16(f); }
float quant_bf16_to_f32(uint16_t h) { return blocks_bf16_to_f32(h); }
uint16_t quant_f32_to_bf16(float f) { return blocks_f32_to_bf16(f); }

/* ---- rounding helpers (§4.1) ---- */

/* Round half to even through the 1.5*2^23 trick; valid for |f| <= 4194303. */
static inline int quant_nearest_int(float f) {
    const float v = f + 12582912.f;
    uint32_t i;
    memcpy(&i, &v, sizeof i);
    return (int)(i & 0x007FFFFF) - 0x00400000;
}

static inline int quant_min_i(int a, int b) { return a < b ? a : b; }
static inline int quant_max_i(int a, int b) { return a > b ? a : b; }
static inline int quant_clamp(int v, int lo, int hi) { return quant_max_i(lo, quant_min_i(hi, v)); }

/* Nearest codebook index; on a tie between neighbours the upper one (ggml's best_index_int8). */
static int quant_best_index(const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < val[mid]) hi = mid;
        else lo = mid;
    }
    return x - val[hi - 1] < val[hi] - x ? hi - 1 : hi;
}

/* The signed value of largest magnitude (first one on ties) and that magnitude. */
static float quant_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    *amax_out = amax;
    return max;
}

/* ---- 32-value block quantisers ---- */

/* Min and max by strict comparisons from +-FLT_MAX, as ggml: between 0 and -0 the running value
 * stays, and that sign reaches the stored m (C leaves fminf's choice between them open). */
static void quant_minmax(const float *x, int n, float *lo, float *hi) {
    *lo = FLT_MAX;
    *hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *lo) *lo = x[j];
        if (x[j] > *hi) *hi = x[j];
    }
}

/* quantize_row_q4_0_ref: d = max/-8, q = min(15, trunc(x/d + 8.5)). */
static void quant_q4_0(const float *x, block_q4_0 *y) {
    float amax;
    const float max = quant_absmax(x, 32, &amax);
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    y->d = blocks_f32_to_f16(d);
    for (int j = 0; j < 16; j++) {
        const int q0 = quant_min_i(15, (int)(x[j] * id + 8.5f));
        const int q1 = quant_min_i(15, (int)(x[j + 16] * id + 8.5f));
        y->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

/* quantize_row_q4_1_ref: d = (max - min)/15, m = min, q = min(15, trunc((x - min)/d + 0.5)). */
static void quant_q4_1(const float *x, block_q4_1 *y) {
    float lo, hi;
    quant_minmax(x, 32, &lo, &hi);
    const float d = (hi - lo) / ((1 << 4) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    y->d = blocks_f32_to_f16(d);
    y->m = blocks_f32_to_f16(lo);
    for (int j = 0; j < 16; j++) {
        const int q0 = quant_min_i(15, (int8_t)((x[j] - lo) * id + 0.5f));
        const int q1 = quant_min_i(15, (int8_t)((x[j + 16] - lo) * id + 0.5f));
        y->qs[j] = (uint8_t)(q0 | q1 << 4);
    }
}

/* The 5th bits of 32 codes, bit j for code j (Q5_0 / Q5_1 qh, little-endian). */
static void quant_put_qh(const int *q, uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++) h |= (uint32_t)((q[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

/* quantize_row_q5_0_ref: d = max/-16, q = min(31, trunc(x/d + 16.5)). llama-quantize's fallback for
 * Q4_K rows that 256 does not divide. */
static void quant_q5_0(const float *x, block_q5_0 *y) {
    float amax;
    const float max = quant_absmax(x, 32, &amax);
    const float d = max / -16;
    const float id = d ? 1.0f / d : 0.0f;
    int q[32];
    y->d = blocks_f32_to_f16(d);
    for (int j = 0; j < 32; j++) q[j] = quant_min_i(31, (int)(int8_t)(x[j] * id + 16.5f));
    for (int j = 0; j < 16; j++) y->qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
    quant_put_qh(q, y->qh);
}

/* quantize_row_q5_1_ref: d = (max - min)/31, m = min, q = trunc((x - min)/d + 0.5). */
static void quant_q5_1(const float *x, block_q5_1 *y) {
    float lo, hi;
    quant_minmax(x, 32, &lo, &hi);
    const float d = (hi - lo) / ((1 << 5) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    int q[32];
    y->d = blocks_f32_to_f16(d);
    y->m = blocks_f32_to_f16(lo);
    for (int j = 0; j < 32; j++) q[j] = (int)(uint8_t)((x[j] - lo) * id + 0.5f);
    for (int j = 0; j < 16; j++) y->qs[j] = (uint8_t)((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
    quant_put_qh(q, y->qh);
}

/* roundf(v) without the libm call (the CPU backend quantises every matmul's activations here; a call per value was
 * 3 % of a one-thread Qwen3-0.6B Q8_0 decode): the truncated integer plus one step away from zero where the exact
 * fraction is a half or more. Equal to roundf for every float of magnitude up to 200 (checked exhaustively); a
 * block's values are at most 127 in magnitude. */
static inline int8_t quant_round_away(float v) {
    const int32_t i = (int32_t)v;
    const float f = v - (float)i; /* exact */
    return (int8_t)(i + (f >= 0.5f) - (f <= -0.5f));
}

/* quantize_row_q8_0_ref: d = amax/127, q = roundf(x * (1/d)) (half away from zero, f32 d). amax as fmaxf keeps it
 * (a NaN value skipped), without the call. */
static float quant_q8_32(const float *x, int8_t *qs, uint16_t *dh) {
    float amax = 0;
    for (int j = 0; j < 32; j++) {
        const float ax = fabsf(x[j]);
        amax = ax > amax ? ax : amax;
    }
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    *dh = blocks_f32_to_f16(d);
    for (int j = 0; j < 32; j++) qs[j] = quant_round_away(x[j] * id);
    return d;
}

static void quant_q8_0(const float *x, block_q8_0 *y) { quant_q8_32(x, y->qs, &y->d); }

/* quantize_row_q8_1_ref: as Q8_0, plus s = f16(d * sum q) with the integer sum of the rounded q. */
static void quant_q8_1(const float *x, block_q8_1 *y) {
    const float d = quant_q8_32(x, y->qs, &y->d);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += y->qs[j];
    y->s = blocks_f32_to_f16((float)sum * d);
}

/* ---- Q8_K (§4.4): d = 1/(-127/max), so d has the opposite sign of max ---- */

static void quant_q8_K(const float *x, block_q8_K *y) {
    float amax;
    const float max = quant_absmax(x, 256, &amax);
    memset(y, 0, sizeof *y); /* ggml leaves bsums unwritten for an all-zero block; we write zeros */
    if (!amax) return;
    const float iscale = -127.f / max;
    for (int j = 0; j < 256; j++) y->qs[j] = (int8_t)quant_min_i(127, quant_nearest_int(iscale * x[j]));
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += y->qs[16 * g + i];
        y->bsums[g] = (int16_t)s;
    }
    y->d = 1 / iscale;
}

/* ---- Q4_K / Q5_K (§4.5) ---- */

/* make_qkx2_quants: an asymmetric fit x ~ scale*L - the_min over n values with weights w, searching
 * nstep+1 trial scales around nmax/(max-min) and keeping the least weighted squared error (use_mad:
 * absolute error, as Q2_K asks). */
static inline float quant_err(float diff, int use_mad) { return use_mad ? fabsf(diff) : diff * diff; }

static float quant_qkx2(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min, float rmin,
                        float rdelta, int nstep, int use_mad) {
    uint8_t Laux[32];
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)quant_clamp(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
        const float diff = scale * L[i] + min - x[i];
        best_error += w[i] * quant_err(diff, use_mad);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = quant_clamp(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                const float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += w[i] * quant_err(diff, use_mad);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The shared front half of quantize_row_q4_K_ref / q5_K_ref: per sub-block fits, 6-bit scales and
 * mins packed into scales[12], d and dmin, then L[256] requantised against the stored values. */
static void quant_k_scales(const float *x, int nmax, float rmin, int nstep, uint8_t *scales12, uint16_t *dh,
                           uint16_t *dminh, uint8_t *L) {
    float w[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xj[l] * xj[l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(xj[l]);
        scales[j] = quant_qkx2(32, nmax, xj, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, 0);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales12, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        /* ggml stores nearest_int into a uint8_t before the MIN: keep that truncation */
        const int ls = quant_min_i(63, (uint8_t)quant_nearest_int(inv_scale * scales[j]));
        const int lm = quant_min_i(63, (uint8_t)quant_nearest_int(inv_min * mins[j]));
        if (j < 4) {
            scales12[j] = (uint8_t)ls;
            scales12[j + 4] = (uint8_t)lm;
        } else {
            scales12[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            scales12[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales12[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *dh = blocks_f32_to_f16(max_scale / 63.f);
    *dminh = blocks_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        blocks_get_scale_min_k4(j, scales12, &sc, &m);
        const float d = blocks_f16_to_f32(*dh) * sc;
        if (!d) continue; /* keep the fit's L, as ggml does */
        const float dm = blocks_f16_to_f32(*dminh) * m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)quant_clamp(quant_nearest_int((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

static void quant_q4_K(const float *x, block_q4_K *y) {
    uint8_t L[256];
    quant_k_scales(x, 15, -1.f, 20, y->scales, &y->d, &y->dmin, L);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) y->qs[32 * p + l] = (uint8_t)(L[64 * p + l] | L[64 * p + 32 + l] << 4);
}

static void quant_q5_K(const float *x, block_q5_K *y) {
    uint8_t L[256];
    quant_k_scales(x, 31, -0.5f, 15, y->scales, &y->d, &y->dmin, L);
    memset(y->qh, 0, sizeof y->qh);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            const int l1 = L[64 * p + l], l2 = L[64 * p + 32 + l];
            y->qh[l] |= (uint8_t)((l1 >> 4) << (2 * p) | (l2 >> 4) << (2 * p + 1));
            y->qs[32 * p + l] = (uint8_t)((l1 & 0xF) | (l2 & 0xF) << 4);
        }
}

/* ---- Q2_K / Q3_K (§4.5) ---- */

/* Q2_K and Q3_K store 2-bit codes: byte l of each 32-byte group p holds codes 128p + l + 32s in bits 2s. */
static void quant_pack2(const uint8_t *L, uint8_t *qs) {
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *Lp = L + 128 * p + l;
            qs[32 * p + l] = (uint8_t)(Lp[0] | Lp[32] << 2 | Lp[64] << 4 | Lp[96] << 6);
        }
}

/* quantize_row_q2_K_ref: per 16 values make_qkx2_quants (nmax 3, weights |x|, 16 trial scales from
 * nmax - 0.5 by 0.1, absolute error); 4-bit scales and mins against max/15; L requantised. */
static void quant_q2_K(const float *x, block_q2_K *y) {
    float w[16], scales[16], mins[16], max_scale = 0, max_min = 0;
    uint8_t L[256];
    for (int j = 0; j < 16; j++) {
        for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
        scales[j] = quant_qkx2(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, 1);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    memset(y->scales, 0, sizeof y->scales);
    y->d = 0;
    y->dmin = 0;
    if (max_scale > 0) {
        const float iscale = 15.f / max_scale;
        for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)quant_nearest_int(iscale * scales[j]);
        y->d = blocks_f32_to_f16(max_scale / 15.f);
    }
    if (max_min > 0) {
        const float iscale = 15.f / max_min;
        for (int j = 0; j < 16; j++) y->scales[j] |= (uint8_t)(quant_nearest_int(iscale * mins[j]) << 4);
        y->dmin = blocks_f32_to_f16(max_min / 15.f);
    }
    for (int j = 0; j < 16; j++) {
        const float d = blocks_f16_to_f32(y->d) * (y->scales[j] & 0xF);
        if (!d) continue; /* keep the fit's L, as ggml does */
        const float dm = blocks_f16_to_f32(y->dmin) * (y->scales[j] >> 4);
        for (int i = 0; i < 16; i++) {
            const int l = quant_nearest_int((x[16 * j + i] + dm) / d);
            L[16 * j + i] = (uint8_t)quant_clamp(l, 0, 3);
        }
    }
    quant_pack2(L, y->qs);
}

/* make_q3_quants with do_rmse: a symmetric fit x ~ scale * l, l in [-nmax, nmax-1], from iscale =
 * -nmax/max, then up to 5 passes that move single l to the value that best raises sumlx^2/suml2
 * (weights x^2). Returns the scale; L = l + nmax. */
static float quant_q3_fit(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = quant_absmax(x, n, &amax);
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = quant_clamp(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        L[i] = (int8_t)l;
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx <= 0) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            const int new_l = quant_clamp(quant_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l;
                sumlx = slx;
                suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* quantize_row_q3_K_ref: per 16 values make_q3_quants (nmax 4); 6-bit signed scales against
 * -max/32 (the scale of largest magnitude, first on ties); L requantised; high bits into hmask. */
static void quant_q3_K(const float *x, block_q3_K *y) {
    float scales[16], amax = 0;
    int8_t L[256];
    for (int j = 0; j < 16; j++) scales[j] = quant_q3_fit(16, 4, x + 16 * j, L + 16 * j);
    const float max_scale = quant_absmax(scales, 16, &amax);
    memset(y->scales, 0, sizeof y->scales);
    y->d = 0;
    if (max_scale) {
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; j++) {
            /* ggml keeps nearest_int in an int8_t before the clamp */
            const int l = quant_clamp((int8_t)quant_nearest_int(iscale * scales[j]), -32, 31) + 32;
            if (j < 8) y->scales[j] = (uint8_t)(l & 0xF);
            else y->scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            y->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        y->d = blocks_f32_to_f16(1 / iscale);
    }
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? y->scales[j] & 0xF : y->scales[j - 8] >> 4;
        const int sc = (lo | ((y->scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
        const float d = blocks_f16_to_f32(y->d) * sc;
        if (!d) continue; /* keep the fit's L, as ggml does */
        for (int i = 0; i < 16; i++) {
            const int l = quant_nearest_int(x[16 * j + i] / d);
            L[16 * j + i] = (int8_t)(quant_clamp(l, -4, 3) + 4);
        }
    }
    /* bit 2 of code j goes to hmask[j % 32], bit j / 32 */
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t L2[256];
    for (int j = 0; j < 256; j++) {
        if (L[j] > 3) y->hmask[j % 32] |= (uint8_t)(1u << (j / 32));
        L2[j] = (uint8_t)(L[j] & 3);
    }
    quant_pack2(L2, y->qs);
}

/* ---- Q6_K (§4.6) ---- */

/* make_qx_quants with rmse_type 1 (weights x^2), no importance weights: a symmetric fit
 * x ~ scale * l, l in [-nmax, nmax-1], trying 18 scales around -nmax/max. Returns the scale and
 * L = l + nmax of the best trial. */
static void quant_qx_sums(int n, int nmax, const float *x, float iscale, float *sumlx, float *suml2, uint8_t *L) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = quant_clamp(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        *sumlx += w * x[i] * l;
        *suml2 += w * l * l;
        if (L) L[i] = (uint8_t)(l + nmax);
    }
}

static float quant_qx(int n, int nmax, const float *x, uint8_t *L) {
    float amax, sumlx, suml2;
    const float max = quant_absmax(x, n, &amax);
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    quant_qx_sums(n, nmax, x, -nmax / max, &sumlx, &suml2, L);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        const float iscale = -(nmax + 0.1f * is) / max;
        quant_qx_sums(n, nmax, x, iscale, &sumlx, &suml2, NULL);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            quant_qx_sums(n, nmax, x, iscale, &sumlx, &suml2, L);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quant_q6_K(const float *x, block_q6_K *y) {
    float scales[16], max_abs = 0;
    uint8_t L[256];
    for (int ib = 0; ib < 16; ib++) scales[ib] = quant_qx(16, 32, x + 16 * ib, L + 16 * ib);
    const float max_scale = quant_absmax(scales, 16, &max_abs);
    memset(y, 0, sizeof *y);
    if (max_abs < 1e-15f) return;
    const float iscale = -128.f / max_scale;
    y->d = blocks_f32_to_f16(1 / iscale);
    for (int ib = 0; ib < 16; ib++) y->scales[ib] = (int8_t)quant_min_i(127, quant_nearest_int(iscale * scales[ib]));
    for (int j = 0; j < 16; j++) {
        const float d = blocks_f16_to_f32(y->d) * y->scales[j];
        if (!d) continue; /* keep the fit's L, as ggml does (they decode to 0 anyway) */
        for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)(quant_clamp(quant_nearest_int(x[16 * j + i] / d), -32, 31) + 32);
    }
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *Lh = L + 128 * h;
            y->ql[64 * h + l] = (uint8_t)((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
            y->ql[64 * h + l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
            y->qh[32 * h + l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
        }
}

/* ---- IQ4_NL / IQ4_XS (§4.7): llama-quantize's search (quantize_iq4_nl / quantize_iq4_xs with no
 * importance matrix, ntry = 7), the variant files are made with. quantize_row_iq4_xs_ref is the same
 * search; quantize_row_iq4_nl_ref skips it (ntry = -1) and is not what we mirror. ---- */

/* One IQ4 super-block of n_sub 32-value blocks: per block, the weighted least-squares scale over the
 * codebook with 15 trial scales; IQ4_XS then stores the scales as 6-bit multiples of -max/32. */
static void quant_iq4(const float *x, int n_sub, uint16_t *dh, uint8_t *q4, uint16_t *scales_h, uint8_t *scales_l) {
    const int8_t *kv = blocks_kvalues_iq4nl;
    const int ntry = 7;
    float scales[8], max_scale = 0, amax_scale = 0;
    uint8_t L[256];
    memset(q4, 0, (size_t)(16 * n_sub));
    for (int ib = 0; ib < n_sub; ib++) {
        const float *xb = x + 32 * ib;
        float w[32], amax;
        for (int j = 0; j < 32; j++) w[j] = xb[j] * xb[j];
        const float max = quant_absmax(xb, 32, &amax);
        if (amax < 1e-15f) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / kv[0];
        float id = 1 / d, sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = kv[quant_best_index(kv, id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (itry + kv[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                const float q = kv[quant_best_index(kv, id * xb[j])];
                sumqx += w[j] * q * xb[j];
                sumq2 += w[j] * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) {
            amax_scale = fabsf(d);
            max_scale = d;
        }
    }
    if (n_sub > 1) {
        const float d = -max_scale / 32;
        const float id = d ? 1 / d : 0.f;
        *dh = blocks_f32_to_f16(d);
        *scales_h = 0;
        for (int ib = 0; ib < n_sub; ib++) {
            const int l = quant_clamp(quant_nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)quant_best_index(kv, idl * x[32 * ib + j]);
            const int ls = l + 32;
            if (ib % 2 == 0) scales_l[ib / 2] = (uint8_t)(ls & 0xF);
            else scales_l[ib / 2] |= (uint8_t)((ls & 0xF) << 4);
            *scales_h |= (uint16_t)((ls >> 4) << (2 * ib));
        }
    } else {
        *dh = blocks_f32_to_f16(scales[0]);
        const float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)quant_best_index(kv, id * x[j]);
    }
    for (int i = 0; i < n_sub; i++)
        for (int j = 0; j < 16; j++) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

static void quant_iq4_nl(const float *x, block_iq4_nl *y) { quant_iq4(x, 1, &y->d, y->qs, NULL, NULL); }
static void quant_iq4_xs(const float *x, block_iq4_xs *y) { quant_iq4(x, 8, &y->d, y->qs, &y->scales_h, y->scales_l); }

/* ---- MXFP4: quantize_row_mxfp4_ref (the scale from the block's largest magnitude, then each value's nearest
 * codebook entry) ---- */

/* The entry nearest to x at scale d, the first of equals (best_index_mxfp4). */
static int quant_mxfp4_index(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)blocks_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf((float)blocks_kvalues_mxfp4[i] * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static void quant_mxfp4(const float *x, block_mxfp4 *y) {
    float amax = 0;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    /* 2^(e-127) is the largest power of two not above amax, over 4 (E2M1's largest value is 6 = 1.5 * 4);
     * through int so that a block below 2^-125 wraps as ggml's conversion does on x86 */
    y->e = amax > 0 ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
    const float d = blocks_e8m0_half(y->e);
    for (int j = 0; j < 16; j++)
        y->qs[j] = (uint8_t)(quant_mxfp4_index(x[j], d) | quant_mxfp4_index(x[j + 16], d) << 4);
}

/* ---- row dispatch ---- */

static infer_status quant_check(int32_t type, const void *src, const void *dst, int64_t n, int quantize,
                                const struct quant_type **out) {
    const struct quant_type *t = quant_type(type);
    if (!src || !dst || n < 0) return infer_fail(INFER_E_ARG, "quant: NULL buffer or negative length %lld", (long long)n);
    if (!t || !(quantize ? t->quantize : t->dequant))
        return infer_fail(INFER_E_UNSUPPORTED, "quant: type %d (%s) has no %s", (int)type, t ? t->name : "unknown",
                          quantize ? "quantiser" : "decoder");
    if (n % t->blck)
        return infer_fail(INFER_E_ARG, "quant: row of %lld values is not a multiple of the %s block size %d",
                          (long long)n, t->name, (int)t->blck);
    *out = t;
    return INFER_OK;
}

#define QUANT_DEQUANT(btype, fn)                                                                             \
    for (int64_t i = 0; i < nb; i++) fn((const btype *)src + i, dst + i * t->blck);                          \
    break
#define QUANT_QUANTIZE(btype, fn)                                                                            \
    for (int64_t i = 0; i < nb; i++) fn(src + i * t->blck, (btype *)dst + i);                                \
    break

infer_status quant_dequant_row(int32_t type, const void *src, float *dst, int64_t n) {
    const struct quant_type *t;
    infer_status st = quant_check(type, src, dst, n, 0, &t);
    if (st != INFER_OK) return st;
    const int64_t nb = n / t->blck;
    const uint16_t *h = (const uint16_t *)src;
    switch (type) {
    case INFER_TYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); break;
    case INFER_TYPE_F16: for (int64_t i = 0; i < n; i++) dst[i] = blocks_f16_to_f32(h[i]); break;
    case INFER_TYPE_BF16: for (int64_t i = 0; i < n; i++) dst[i] = blocks_bf16_to_f32(h[i]); break;
    case INFER_TYPE_Q4_0: QUANT_DEQUANT(block_q4_0, blocks_dequant_q4_0);
    case INFER_TYPE_Q4_1: QUANT_DEQUANT(block_q4_1, blocks_dequant_q4_1);
    case INFER_TYPE_Q5_0: QUANT_DEQUANT(block_q5_0, blocks_dequant_q5_0);
    case INFER_TYPE_Q5_1: QUANT_DEQUANT(block_q5_1, blocks_dequant_q5_1);
    case INFER_TYPE_Q8_0: QUANT_DEQUANT(block_q8_0, blocks_dequant_q8_0);
    case INFER_TYPE_Q2_K: QUANT_DEQUANT(block_q2_K, blocks_dequant_q2_K);
    case INFER_TYPE_Q3_K: QUANT_DEQUANT(block_q3_K, blocks_dequant_q3_K);
    case INFER_TYPE_Q4_K: QUANT_DEQUANT(block_q4_K, blocks_dequant_q4_K);
    case INFER_TYPE_Q5_K: QUANT_DEQUANT(block_q5_K, blocks_dequant_q5_K);
    case INFER_TYPE_Q6_K: QUANT_DEQUANT(block_q6_K, blocks_dequant_q6_K);
    case INFER_TYPE_Q8_K: QUANT_DEQUANT(block_q8_K, blocks_dequant_q8_K);
    case INFER_TYPE_IQ4_NL: QUANT_DEQUANT(block_iq4_nl, blocks_dequant_iq4_nl);
    case INFER_TYPE_IQ4_XS: QUANT_DEQUANT(block_iq4_xs, blocks_dequant_iq4_xs);
    case INFER_TYPE_MXFP4: QUANT_DEQUANT(block_mxfp4, blocks_dequant_mxfp4);
    case INFER_TYPE_IQ2_XXS: QUANT_DEQUANT(block_iq2_xxs, blocks_dequant_iq2_xxs);
    case INFER_TYPE_IQ2_XS: QUANT_DEQUANT(block_iq2_xs, blocks_dequant_iq2_xs);
    case INFER_TYPE_IQ2_S: QUANT_DEQUANT(block_iq2_s, blocks_dequant_iq2_s);
    case INFER_TYPE_IQ3_XXS: QUANT_DEQUANT(block_iq3_xxs, blocks_dequant_iq3_xxs);
    case INFER_TYPE_IQ3_S: QUANT_DEQUANT(block_iq3_s, blocks_dequant_iq3_s);
    case INFER_TYPE_IQ1_S: QUANT_DEQUANT(block_iq1_s, blocks_dequant_iq1_s);
    case INFER_TYPE_IQ1_M: QUANT_DEQUANT(block_iq1_m, blocks_dequant_iq1_m);
    case INFER_TYPE_TQ1_0: QUANT_DEQUANT(block_tq1_0, blocks_dequant_tq1_0);
    case INFER_TYPE_TQ2_0: QUANT_DEQUANT(block_tq2_0, blocks_dequant_tq2_0);
    default: return infer_fail(INFER_E_INTERNAL, "quant: type table and decoder switch disagree on %d", (int)type);
    }
    return INFER_OK;
}

infer_status quant_quantize_row(int32_t type, const float *src, void *dst, int64_t n) {
    const struct quant_type *t;
    infer_status st = quant_check(type, src, dst, n, 1, &t);
    if (st != INFER_OK) return st;
    const int64_t nb = n / t->blck;
    uint16_t *h = (uint16_t *)dst;
    switch (type) {
    case INFER_TYPE_F32: memmove(dst, src, (size_t)n * sizeof(float)); break;
    case INFER_TYPE_F16: for (int64_t i = 0; i < n; i++) h[i] = blocks_f32_to_f16(src[i]); break;
    case INFER_TYPE_BF16: for (int64_t i = 0; i < n; i++) h[i] = blocks_f32_to_bf16(src[i]); break;
    case INFER_TYPE_Q4_0: QUANT_QUANTIZE(block_q4_0, quant_q4_0);
    case INFER_TYPE_Q4_1: QUANT_QUANTIZE(block_q4_1, quant_q4_1);
    case INFER_TYPE_Q5_0: QUANT_QUANTIZE(block_q5_0, quant_q5_0);
    case INFER_TYPE_Q5_1: QUANT_QUANTIZE(block_q5_1, quant_q5_1);
    case INFER_TYPE_Q8_0: QUANT_QUANTIZE(block_q8_0, quant_q8_0);
    case INFER_TYPE_Q8_1: QUANT_QUANTIZE(block_q8_1, quant_q8_1);
    case INFER_TYPE_Q2_K: QUANT_QUANTIZE(block_q2_K, quant_q2_K);
    case INFER_TYPE_Q3_K: QUANT_QUANTIZE(block_q3_K, quant_q3_K);
    case INFER_TYPE_Q4_K: QUANT_QUANTIZE(block_q4_K, quant_q4_K);
    case INFER_TYPE_Q5_K: QUANT_QUANTIZE(block_q5_K, quant_q5_K);
    case INFER_TYPE_Q6_K: QUANT_QUANTIZE(block_q6_K, quant_q6_K);
    case INFER_TYPE_Q8_K: QUANT_QUANTIZE(block_q8_K, quant_q8_K);
    case INFER_TYPE_IQ4_NL: QUANT_QUANTIZE(block_iq4_nl, quant_iq4_nl);
    case INFER_TYPE_IQ4_XS: QUANT_QUANTIZE(block_iq4_xs, quant_iq4_xs);
    case INFER_TYPE_MXFP4: QUANT_QUANTIZE(block_mxfp4, quant_mxfp4);
    default: return infer_fail(INFER_E_INTERNAL, "quant: type table and quantiser switch disagree on %d", (int)type);
    }
    return INFER_OK;
}
