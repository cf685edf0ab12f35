/* gpu_like: the CPU backend with the CUDA kernels' numerics (what and why: gpu_like.h). Each op below
 * names the kernel it re-enacts; "lane" and "butterfly" mean the warp layout of that kernel, computed
 * here one lane after another. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "gpu_like.h"
#include "quant.h"
#include "randw.h"

enum { GL_WARP = 32, GL_MAX_D = 512 };

struct gl {
    struct infer_backend base;
    struct pool *pool;
    int perturb; /* GL_P_* roundings a device may add (gpu_like.h); 0: the reference */
};

static const struct gl *gl_of(const struct infer_backend *b) { return b->impl; }

/* ---- arithmetic the device may round differently ---- */

/* The perturbed variant's roundings (all by default; GL_PERTURB=<mask> in the environment picks some, to
 * measure each alone): fmaf where nvcc contracts, expf one ulp off, __expf as glibc expf instead of the
 * emulator's ex2 of x * log2(e), the mma step's
 * exact sum, sin / cos one ulp off. */
enum { GL_P_FMA = 1, GL_P_EXP = 2, GL_P_FAST_EXP = 4, GL_P_MMA = 8, GL_P_ROPE = 16, GL_P_ALL = 31 };

/* a * b + c: two roundings, or nvcc's contraction into one fma. */
static inline float gl_madd(int perturb, float a, float b, float c) { return perturb & GL_P_FMA ? fmaf(a, b, c) : a * b + c; }

/* CUDA expf (2 ulp) against glibc's: the perturbed variant is one ulp off. */
static inline float gl_exp(int perturb, float x) {
    const float e = expf(x);
    return perturb & GL_P_EXP && e > 0.0f && isfinite(e) ? nextafterf(e, 0.0f) : e;
}

/* __expf (mmv / mm SwiGLU): ex2.approx of x * log2(e). */
static inline float gl_fast_exp(int perturb, float x) { return perturb & GL_P_FAST_EXP ? expf(x) : exp2f(x * 1.44269504f); }

static inline float gl_f16(float v) { return blocks_f16_to_f32(blocks_f32_to_f16(v)); }

/* common.cuh warp_sum: v += shfl_xor(v, o) for o = 16 .. 1; every lane ends with lane 0's value. */
static float gl_warp_sum(const float v[GL_WARP]) {
    float a[GL_WARP], b[GL_WARP];
    memcpy(a, v, sizeof a);
    for (int o = GL_WARP / 2; o > 0; o >>= 1) {
        for (int l = 0; l < GL_WARP; l++) b[l] = a[l] + a[l ^ o];
        memcpy(a, b, sizeof a);
    }
    return a[0];
}

static double gl_warp_sum_f64(const double v[GL_WARP]) {
    double a[GL_WARP], b[GL_WARP];
    memcpy(a, v, sizeof a);
    for (int o = GL_WARP / 2; o > 0; o >>= 1) {
        for (int l = 0; l < GL_WARP; l++) b[l] = a[l] + a[l ^ o];
        memcpy(a, b, sizeof a);
    }
    return a[0];
}

static int gl_float_type(int32_t t) { return t == INFER_TYPE_F32 || t == INFER_TYPE_F16 || t == INFER_TYPE_BF16; }

static float gl_fval(int32_t t, const uint8_t *row, int64_t i) {
    if (t == INFER_TYPE_F32) return ((const float *)row)[i];
    if (t == INFER_TYPE_F16) return blocks_f16_to_f32(((const uint16_t *)row)[i]);
    return blocks_bf16_to_f32(((const uint16_t *)row)[i]);
}

/* ---- quantize: Q8_1 in the q8 split layout (quantize.cu) ---- */

static infer_status gl_quantize(struct infer_backend *b, const struct quantize_args *a) {
    if (a->type != INFER_TYPE_Q8_1) return cpu_quantize(a, gl_of(b)->pool);
    if (a->n <= 0 || a->n % Q8_SPLIT_BLOCK || a->n_rows <= 0)
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like quantize: n %lld rows %d: expected a multiple of 32",
                          (long long)a->n, a->n_rows);
    const int64_t n_groups = a->n / Q8_SPLIT_BLOCK;
    int8_t *qs = a->y;
    float *ds = (float *)((char *)a->y + q8_split_ds_offset(a->n, a->n_rows));
    for (int32_t r = 0; r < a->n_rows; r++)
        for (int64_t g = 0; g < n_groups; g++) {
            const float *x = a->x + r * a->x_stride + g * Q8_SPLIT_BLOCK;
            float amax = 0.0f;
            for (int i = 0; i < Q8_SPLIT_BLOCK; i++) amax = fmaxf(amax, fabsf(x[i]));
            const float d = amax / 127.0f;
            float qsum = 0.0f; /* exact: |sum| <= 32 * 127 */
            for (int i = 0; i < Q8_SPLIT_BLOCK; i++) {
                const int q = amax == 0.0f ? 0 : (int)roundf(x[i] / d);
                qs[r * a->n + g * Q8_SPLIT_BLOCK + i] = (int8_t)q;
                qsum += (float)q;
            }
            ds[2 * (r * n_groups + g)] = d;
            ds[2 * (r * n_groups + g) + 1] = d * qsum;
        }
    return INFER_OK;
}

/* ---- mmv (mmv.cu) ---- */

/* The weight types of mmv.cu / mm.cu / moe.cu (MMV_TYPES): every type libinfer computes with. */
static int gl_mmv_type(int32_t t) { return infer_type_supported(t); }

/* One 32-value unit of a weight row as mmv.cu's unit_dot<T>::load decodes it: integer codes, the
 * scales of values 0..15 and 16..31, the block-min term, or (Q2_K) a min per half. */
struct gl_unit {
    int q[32];
    float scale[2];
    float min;
    float hmin[2]; /* Q2_K (mmv.cu's unit_hmin): the min of each 16-value half; min unused */
    int has_hmin;
};

/* The lattice and ternary types: groups 4j..4j+3 of the block, a scale per half (blocks_iq.h's integer form). */
#define GL_IQ_UNIT(T, t)                                                                                     \
    case INFER_TYPE_##T: {                                                                                   \
        const block_##t *b = (const block_##t *)row + u / 8;                                                 \
        for (int g = 0; g < 4; g++) {                                                                        \
            int8_t v[8];                                                                                     \
            const int ls = blocks_iq_##t(b, 4 * (int)(u % 8) + g, v);                                        \
            for (int k = 0; k < 8; k++) w->q[8 * g + k] = v[k];                                              \
            if (g % 2 == 0) w->scale[g / 2] = blocks_iqf_##t(b) * (float)ls;                                 \
        }                                                                                                    \
        return 1;                                                                                            \
    }

static int gl_unit_load(int32_t type, const uint8_t *row, int64_t u, struct gl_unit *w) {
    w->min = 0.0f;
    w->has_hmin = 0;
    switch (type) {
    case INFER_TYPE_Q8_0: {
        const block_q8_0 *b = (const block_q8_0 *)row + u;
        for (int i = 0; i < 32; i++) w->q[i] = b->qs[i];
        w->scale[0] = w->scale[1] = blocks_f16_to_f32(b->d);
        return 1;
    }
    case INFER_TYPE_Q4_0: {
        const block_q4_0 *b = (const block_q4_0 *)row + u;
        for (int j = 0; j < 16; j++) w->q[j] = b->qs[j] & 0xF, w->q[j + 16] = b->qs[j] >> 4;
        const float d = blocks_f16_to_f32(b->d);
        w->scale[0] = w->scale[1] = d;
        w->min = 8.0f * d;
        return 1;
    }
    case INFER_TYPE_Q4_1: {
        const block_q4_1 *b = (const block_q4_1 *)row + u;
        for (int j = 0; j < 16; j++) w->q[j] = b->qs[j] & 0xF, w->q[j + 16] = b->qs[j] >> 4;
        w->scale[0] = w->scale[1] = blocks_f16_to_f32(b->d);
        w->min = -blocks_f16_to_f32(b->m);
        return 1;
    }
    case INFER_TYPE_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)row + u;
        for (int i = 0; i < 32; i++) w->q[i] = blocks_q5_q(b->qs, blocks_qh32(b->qh), i);
        const float d = blocks_f16_to_f32(b->d);
        w->scale[0] = w->scale[1] = d;
        w->min = 16.0f * d;
        return 1;
    }
    case INFER_TYPE_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)row + u;
        for (int i = 0; i < 32; i++) w->q[i] = blocks_q5_q(b->qs, blocks_qh32(b->qh), i);
        w->scale[0] = w->scale[1] = blocks_f16_to_f32(b->d);
        w->min = -blocks_f16_to_f32(b->m);
        return 1;
    }
    case INFER_TYPE_IQ4_NL: {
        const block_iq4_nl *b = (const block_iq4_nl *)row + u;
        for (int j = 0; j < 16; j++)
            w->q[j] = blocks_iq4nl_value(b->qs[j] & 0xF), w->q[j + 16] = blocks_iq4nl_value(b->qs[j] >> 4);
        w->scale[0] = w->scale[1] = blocks_f16_to_f32(b->d);
        return 1;
    }
    case INFER_TYPE_MXFP4: {
        const block_mxfp4 *b = (const block_mxfp4 *)row + u;
        for (int j = 0; j < 16; j++)
            w->q[j] = blocks_mxfp4_value(b->qs[j] & 0xF), w->q[j + 16] = blocks_mxfp4_value(b->qs[j] >> 4);
        w->scale[0] = w->scale[1] = blocks_e8m0_half(b->e);
        return 1;
    }
    case INFER_TYPE_IQ4_XS: {
        const block_iq4_xs *b = (const block_iq4_xs *)row + u / 8;
        const int ib = (int)(u % 8);
        const uint8_t *qs = b->qs + 16 * ib;
        for (int l = 0; l < 16; l++)
            w->q[l] = blocks_iq4nl_value(qs[l] & 0xF), w->q[l + 16] = blocks_iq4nl_value(qs[l] >> 4);
        w->scale[0] = w->scale[1] = blocks_f16_to_f32(b->d) * (float)(blocks_iq4_xs_scale(b, ib) - 32);
        return 1;
    }
    case INFER_TYPE_Q2_K: {
        const block_q2_K *b = (const block_q2_K *)row + u / 8;
        const int j = (int)(u % 8);
        for (int l = 0; l < 32; l++) w->q[l] = (b->qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3;
        for (int h = 0; h < 2; h++) {
            const int sc = b->scales[2 * j + h];
            w->scale[h] = blocks_f16_to_f32(b->d) * (float)(sc & 0xF);
            w->hmin[h] = blocks_f16_to_f32(b->dmin) * (float)(sc >> 4);
        }
        w->has_hmin = 1;
        return 1;
    }
    case INFER_TYPE_Q3_K: {
        const block_q3_K *b = (const block_q3_K *)row + u / 8;
        const int j = (int)(u % 8);
        for (int l = 0; l < 32; l++)
            w->q[l] = ((b->qs[32 * (j / 4) + l] >> (2 * (j % 4))) & 3) - ((b->hmask[l] >> j) & 1 ? 0 : 4);
        const float d = blocks_f16_to_f32(b->d);
        w->scale[0] = d * (float)blocks_q3_K_scale(b, 2 * j), w->scale[1] = d * (float)blocks_q3_K_scale(b, 2 * j + 1);
        return 1;
    }
    case INFER_TYPE_Q4_K:
    case INFER_TYPE_Q5_K: {
        const int j = (int)(u % 8), shift = 4 * (j % 2);
        const uint8_t *qs, *qh = NULL, *scales;
        uint16_t d, dmin;
        if (type == INFER_TYPE_Q4_K) {
            const block_q4_K *b = (const block_q4_K *)row + u / 8;
            qs = b->qs, scales = b->scales, d = b->d, dmin = b->dmin;
        } else {
            const block_q5_K *b = (const block_q5_K *)row + u / 8;
            qs = b->qs, qh = b->qh, scales = b->scales, d = b->d, dmin = b->dmin;
        }
        for (int l = 0; l < 32; l++) {
            w->q[l] = (qs[32 * (j / 2) + l] >> shift) & 0xF;
            if (qh) w->q[l] |= ((qh[l] >> j) & 1) << 4;
        }
        uint8_t sc, m;
        blocks_get_scale_min_k4(j, scales, &sc, &m);
        w->scale[0] = w->scale[1] = blocks_f16_to_f32(d) * (float)sc;
        w->min = blocks_f16_to_f32(dmin) * (float)m;
        return 1;
    }
    case INFER_TYPE_Q6_K: {
        const block_q6_K *b = (const block_q6_K *)row + u / 8;
        const int un = (int)(u % 8);
        for (int l = 0; l < 32; l++) w->q[l] = blocks_q6_K_q(b, 32 * un + l);
        const float d = blocks_f16_to_f32(b->d);
        w->scale[0] = d * (float)b->scales[2 * un], w->scale[1] = d * (float)b->scales[2 * un + 1];
        return 1;
    }
    BLOCKS_IQ_TYPES(GL_IQ_UNIT)
    default:
        return 0;
    }
}
#undef GL_IQ_UNIT

/* unit_times_x: xd * (scale0 * s0 + scale1 * s1) - min * (xd sum xq), s0 / s1 the dp4a sums; with a min per
 * half (Q2_K) xd * (scale0 * s0 + scale1 * s1 - (hmin0 * m0 + hmin1 * m1)), m0 / m1 the halves' sums of xq. */
static float gl_unit_times_x(int perturb, const struct gl_unit *w, const int8_t *xq, const float *ds) {
    int s0 = 0, s1 = 0, m0 = 0, m1 = 0;
    for (int i = 0; i < 16; i++) s0 += w->q[i] * xq[i], m0 += xq[i];
    for (int i = 16; i < 32; i++) s1 += w->q[i] * xq[i], m1 += xq[i];
    if (w->has_hmin) {
        if (!(perturb & GL_P_FMA))
            return ds[0] * (w->scale[0] * (float)s0 + w->scale[1] * (float)s1 - (w->hmin[0] * (float)m0 + w->hmin[1] * (float)m1));
        const float mins = fmaf(w->hmin[0], (float)m0, w->hmin[1] * (float)m1);
        return ds[0] * (fmaf(w->scale[0], (float)s0, w->scale[1] * (float)s1) - mins);
    }
    if (!(perturb & GL_P_FMA)) return ds[0] * (w->scale[0] * (float)s0 + w->scale[1] * (float)s1) - w->min * ds[1];
    const float in = fmaf(w->scale[0], (float)s0, w->scale[1] * (float)s1);
    return fmaf(ds[0], in, -(w->min * ds[1]));
}

/* row_dots: one warp, every token of the batch. acc[t] gets the row's dot with token t. */
static void gl_row_dots(const struct mmv_args *a, int perturb, const uint8_t *row, float acc[MMV_MAX_TOKENS]) {
    float lanes[MMV_MAX_TOKENS][GL_WARP];
    memset(lanes, 0, sizeof lanes);
    if (gl_float_type(a->type)) {
        for (int64_t c = 0; c < a->n_in; c++) {
            const float wv = gl_fval(a->type, row, c);
            for (int t = 0; t < a->n_tokens; t++)
                lanes[t][c % GL_WARP] = gl_madd(perturb, wv, a->x[t * a->n_in + c], lanes[t][c % GL_WARP]);
        }
    } else {
        const int64_t n_units = a->n_in / Q8_SPLIT_BLOCK;
        const int8_t *xq = a->xq;
        const float *ds = (const float *)((const char *)a->xq + q8_split_ds_offset(a->n_in, a->n_tokens));
        struct gl_unit w;
        for (int64_t u = 0; u < n_units; u++) {
            gl_unit_load(a->type, row, u, &w);
            for (int t = 0; t < a->n_tokens; t++)
                lanes[t][u % GL_WARP] += gl_unit_times_x(perturb, &w, xq + t * a->n_in + u * Q8_SPLIT_BLOCK,
                                                         ds + 2 * (t * n_units + u));
        }
    }
    for (int t = 0; t < a->n_tokens; t++) acc[t] = gl_warp_sum(lanes[t]);
}

struct gl_mmv_job {
    const struct mmv_args *a;
    int perturb;
    size_t rb;
};

static void gl_mmv_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct gl_mmv_job *j = ctx;
    const struct mmv_args *a = j->a;
    for (int64_t r = r0; r < r1; r++) {
        float acc[MMV_MAX_TOKENS], acc2[MMV_MAX_TOKENS];
        gl_row_dots(a, j->perturb, (const uint8_t *)a->w + r * j->rb, acc);
        if (a->epilogue == MMV_SWIGLU) gl_row_dots(a, j->perturb, (const uint8_t *)a->w2 + r * j->rb, acc2);
        for (int t = 0; t < a->n_tokens; t++) {
            const int64_t o = t * a->n_out + r;
            float v = acc[t];
            if (a->epilogue == MMV_ADD) v += a->add[o];
            else if (a->epilogue == MMV_SWIGLU) v = v / (1.0f + gl_fast_exp(j->perturb, -v)) * acc2[t];
            a->y[o] = v;
        }
    }
}

static infer_status gl_mmv(struct infer_backend *b, const struct mmv_args *a) {
    const size_t rb = quant_row_bytes(a->type, a->n_in);
    if (!rb || !gl_mmv_type(a->type) || a->n_tokens < 1 || a->n_tokens > MMV_MAX_TOKENS || a->n_out < 1 ||
        (!gl_float_type(a->type) && (a->n_in % Q8_SPLIT_BLOCK || !a->xq)) || (a->epilogue == MMV_SWIGLU && !a->w2) ||
        (a->epilogue == MMV_ADD && !a->add))
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like mmv: type %d n_in %lld tokens %d epilogue %d", a->type,
                          (long long)a->n_in, a->n_tokens, a->epilogue);
    const struct gl_mmv_job j = {.a = a, .perturb = gl_of(b)->perturb, .rb = rb};
    pool_for(gl_of(b)->pool, a->n_out, 1, gl_mmv_rows, (void *)&j);
    return INFER_OK;
}

/* mmv_multi: each part as mmv (mmv.cu's rows are mmv's whichever kernel runs them). */
static infer_status gl_mmv_multi(struct infer_backend *b, const struct mmv_multi_args *a) {
    infer_status st = INFER_OK;
    if (a->n < 1 || a->n > MMV_MULTI_MAX || !mmv_multi_disjoint(a))
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like mmv_multi: %d products", a->n);
    for (int32_t k = 0; k < a->n; k++) {
        if (a->p[k].n_tokens != a->p[0].n_tokens)
            return infer_fail(INFER_E_UNSUPPORTED, "gpu_like mmv_multi: products of different token counts");
    }
    for (int32_t k = 0; k < a->n; k++) TRY(gl_mmv(b, &a->p[k]));
fail:
    return st;
}

/* ---- mm: the tensor-core path (mm.cu "mma") ---- */

/* A row of W as mm.cu's fill_w stores it: decoded in blocks.h's arithmetic (lib/quant.c's, bit for
 * bit), then rounded to f16. */
static void gl_w_f16(int32_t type, const uint8_t *row, int64_t n, float *out) {
    if (gl_float_type(type)) {
        for (int64_t i = 0; i < n; i++) out[i] = gl_f16(gl_fval(type, row, i));
        return;
    }
    (void)quant_dequant_row(type, row, out, n); /* valid: gl_mmv_type has a decoder for every type */
    for (int64_t i = 0; i < n; i++) out[i] = gl_f16(out[i]);
}

/* mma.sync m16n8k16 with f32 accumulation, K in steps of 16 from 0: the 16 f16 x f16 products are exact
 * in f32. How the hardware adds them to the accumulator is not documented (it is neither of these); the
 * plain variant sums them in f32 in K order, then adds the sum (the emulator's mma.sync, emu/exec.cc);
 * the perturbed one adds their exact sum with one rounding. */
static float gl_mma_dot(int perturb, const float *w, const float *x, int64_t n) {
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < n; k0 += 16) {
        const int64_t k1 = k0 + 16 < n ? k0 + 16 : n;
        if (perturb & GL_P_MMA) {
            double s = 0.0;
            for (int64_t k = k0; k < k1; k++) s += (double)w[k] * x[k];
            acc = (float)((double)acc + s);
        } else {
            float s = 0.0f;
            for (int64_t k = k0; k < k1; k++) s += w[k] * x[k];
            acc += s;
        }
    }
    return acc;
}

struct gl_mm_job {
    const struct mm_args *a;
    int perturb;
    size_t rb;
    const float *xh; /* (n_tokens, n_in) x rounded to f16 */
    float *wbuf;     /* per worker: 2 rows of n_in */
};

static void gl_mm_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    const struct gl_mm_job *j = ctx;
    const struct mm_args *a = j->a;
    float *w = j->wbuf + (size_t)ith * 2 * (size_t)a->n_in, *w2 = w + a->n_in;
    for (int64_t r = r0; r < r1; r++) {
        gl_w_f16(a->type, (const uint8_t *)a->w + r * j->rb, a->n_in, w);
        if (a->epilogue == MMV_SWIGLU) gl_w_f16(a->type, (const uint8_t *)a->w2 + r * j->rb, a->n_in, w2);
        for (int64_t t = 0; t < a->n_tokens; t++) {
            const int64_t o = t * a->n_out + r;
            float v = gl_mma_dot(j->perturb, w, j->xh + t * a->n_in, a->n_in);
            if (a->epilogue == MMV_ADD) v += a->add[o]; /* read before the write: add may be y */
            if (a->epilogue == MMV_SWIGLU)
                v = v / (1.0f + gl_fast_exp(j->perturb, -v)) * gl_mma_dot(j->perturb, w2, j->xh + t * a->n_in, a->n_in);
            a->y[o] = v;
        }
    }
}

static infer_status gl_mm(struct infer_backend *b, const struct mm_args *a) {
    const struct gl *g = gl_of(b);
    const size_t rb = quant_row_bytes(a->type, a->n_in);
    if (!rb || !gl_mmv_type(a->type) || a->n_tokens < 1 || a->n_out < 1 || !a->x || (a->epilogue == MMV_SWIGLU && !a->w2) ||
        (a->epilogue == MMV_ADD && !a->add))
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like mm: type %d n_in %lld epilogue %d", a->type, (long long)a->n_in,
                          a->epilogue);
    const size_t nx = (size_t)a->n_tokens * (size_t)a->n_in;
    const int nw = pool_threads(g->pool);
    float *xh = xmalloc(nx * sizeof(float)), *wbuf = xmalloc((size_t)nw * 2 * (size_t)a->n_in * sizeof(float));
    if (!xh || !wbuf) {
        xfree(xh), xfree(wbuf);
        return INFER_OOM("gpu_like mm scratch");
    }
    for (size_t i = 0; i < nx; i++) xh[i] = gl_f16(a->x[i]);
    const struct gl_mm_job j = {.a = a, .perturb = g->perturb, .rb = rb, .xh = xh, .wbuf = wbuf};
    pool_for(g->pool, a->n_out, 1, gl_mm_rows, (void *)&j);
    xfree(xh), xfree(wbuf);
    return INFER_OK;
}

/* ---- norm (norm.cu norm_kernel) ---- */

struct gl_norm_job {
    const struct norm_args *a;
    int perturb;
};

static void gl_norm_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct gl_norm_job *j = ctx;
    const struct norm_args *a = j->a;
    const int row_threads = a->n >= 1024 ? 256 : GL_WARP; /* NORM_BLOCK_MIN_N, NORM_THREADS */
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->x_stride;
        float part[256], ss = 0.0f;
        for (int tid = 0; tid < row_threads; tid++) {
            part[tid] = 0.0f;
            for (int64_t i = tid; i < a->n; i += row_threads) part[tid] = fmaf(x[i], x[i], part[tid]);
        }
        if (row_threads == GL_WARP) {
            ss = gl_warp_sum(part);
        } else {
            for (int w = 0; w < row_threads / GL_WARP; w++) ss += gl_warp_sum(part + GL_WARP * w);
        }
        const float scale = 1.0f / sqrtf(ss / (float)a->n + a->eps);
        float *y = a->y + r * a->y_stride;
        const float *gate = a->gate ? a->gate + r * a->gate_stride : NULL;
        for (int64_t i = 0; i < a->n; i++) {
            float v = x[i] * scale;
            if (a->w) v *= a->w[i];
            if (gate) v *= gate[i] / (1.0f + gl_exp(j->perturb, -gate[i]));
            y[i] = v;
        }
    }
}

static infer_status gl_norm(struct infer_backend *b, const struct norm_args *a) {
    if (!a->x || !a->y || a->n <= 0 || a->n_rows < 0 || a->x_stride < a->n || a->y_stride < a->n || !(a->eps >= 0.0f) ||
        (a->gate && a->gate_stride < a->n))
        return infer_fail(INFER_E_ARG, "gpu_like norm: n %lld", (long long)a->n);
    const struct gl_norm_job j = {.a = a, .perturb = gl_of(b)->perturb};
    pool_for(gl_of(b)->pool, a->n_rows, 1, gl_norm_rows, (void *)&j);
    return INFER_OK;
}

/* ---- rope: the CPU's (and rope.cu's) arithmetic; perturbed: sincosf one ulp off libm ---- */

static infer_status gl_rope(struct infer_backend *b, const struct rope_args *a) {
    const struct gl *g = gl_of(b);
    if (!(g->perturb & GL_P_ROPE)) return cpu_rope(a, g->pool);
    if (!a->x || !a->pos || a->n_tokens < 0 || a->n_head < 1 || a->n_rot < 2 || a->n_rot % 2 || a->n_rot > a->head_dim ||
        a->n_rot > 2 * GL_MAX_D || (a->mode != ROPE_NORMAL && a->mode != ROPE_NEOX))
        return infer_fail(INFER_E_ARG, "gpu_like rope: n_rot %d", a->n_rot);
    const float theta_scale = powf(a->freq_base, -2.0f / (float)a->n_rot);
    const int half = a->n_rot / 2;
    for (int32_t t = 0; t < a->n_tokens; t++) {
        float theta = (float)a->pos[t];
        for (int i = 0; i < half; i++) {
            const float ang = a->freq_scale * theta;
            const float cs = nextafterf(cosf(ang), 0.0f), sn = nextafterf(sinf(ang), 0.0f);
            theta *= theta_scale;
            for (int h = 0; h < a->n_head; h++) {
                float *x = a->x + t * a->token_stride + h * a->head_stride;
                const int i0 = a->mode == ROPE_NEOX ? i : 2 * i, i1 = a->mode == ROPE_NEOX ? i + half : 2 * i + 1;
                const float x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * cs - x1 * sn;
                x[i1] = x0 * sn + x1 * cs;
            }
        }
    }
    return INFER_OK;
}

/* ---- attn, decode and the rest (attn.cu attn_kernel, ATTN_SIMT, and attn_merge) ---- */

struct gl_attn_job {
    const struct attn_args *a;
    int perturb;
    int32_t tk, n_split, split_cells; /* split_cells: attn_split_cells, as every block of the kernel computes it */
};

/* Value d of kv head g in cell j, as the kernel loads it (f16 widened, or q * d). */
static float gl_cell(const struct attn_args *a, const void *cells, int64_t j, int g, int d) {
    if (a->kv_type == INFER_TYPE_Q8_0) {
        const block_q8_0 *b = (const block_q8_0 *)cells + j * (a->kv_stride / QK8_0) + (int64_t)g * (a->head_dim / QK8_0);
        return blocks_value_q8_0(b + d / QK8_0, d % QK8_0);
    }
    return blocks_f16_to_f32(((const uint16_t *)cells)[j * a->kv_stride + (int64_t)g * a->head_dim + d]);
}

/* One row's pass over the cells [j0, j1) of its split: the running (m, l, acc) of the kernel's rows. */
static void gl_attn_split(const struct gl_attn_job *jb, const float *q, int g, int32_t j0, int32_t j1, float *m_out,
                          float *l_out, float *acc) {
    const struct attn_args *a = jb->a;
    const int D = a->head_dim, pt = jb->perturb;
    float m = -INFINITY, l = 0.0f, p[64], vd[GL_MAX_D];
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    for (int32_t jt = j0; jt < j1; jt += jb->tk) {
        const int n = j1 - jt < jb->tk ? j1 - jt : jb->tk; /* the cells of this tile the row sees */
        float mx = -INFINITY;
        for (int jj = 0; jj < 64; jj++) {
            p[jj] = -INFINITY;
            if (jj >= n) continue;
            float dot = 0.0f;
            for (int d = 0; d < D; d++) dot = gl_madd(pt, q[d], gl_cell(a, a->k, jt + jj, g, d), dot);
            p[jj] = dot * a->scale;
            mx = fmaxf(mx, p[jj]);
        }
        const float mn = fmaxf(m, mx);
        float lanes[GL_WARP];
        for (int jj = 0; jj < 64; jj++) p[jj] = p[jj] == -INFINITY ? 0.0f : gl_exp(pt, p[jj] - mn);
        for (int ln = 0; ln < GL_WARP; ln++) lanes[ln] = p[ln] + p[ln + GL_WARP]; /* cells lane, lane + 32 */
        const float ls = gl_warp_sum(lanes);
        const float c = m == -INFINITY ? 0.0f : gl_exp(pt, m - mn);
        l = gl_madd(pt, l, c, ls), m = mn;
        for (int d = 0; d < D; d++) acc[d] *= c;
        for (int jj = 0; jj < n; jj++) {
            for (int d = 0; d < D; d++) vd[d] = gl_cell(a, a->v, jt + jj, g, d);
            for (int d = 0; d < D; d++) acc[d] = gl_madd(pt, p[jj], vd[d], acc[d]);
        }
    }
    *m_out = m, *l_out = l;
}

static void gl_attn_items(void *ctx, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const struct gl_attn_job *jb = ctx;
    const struct attn_args *a = jb->a;
    const int D = a->head_dim, G = a->n_head / a->n_head_kv, pt = jb->perturb;
    float q[GL_MAX_D], ms[ATTN_SPLIT_MAX], ls[ATTN_SPLIT_MAX];
    static _Thread_local float part[ATTN_SPLIT_MAX][GL_MAX_D];
    for (int64_t it = i0; it < i1; it++) {
        const int64_t t = it / a->n_head;
        const int h = (int)(it % a->n_head), g = h / G;
        memcpy(q, a->q + t * a->q_stride + (int64_t)h * D, sizeof(float) * (size_t)D);
        for (int c = 0; a->rot_k && c < D; c += a->rot_k) kv_hadamard(q + c, a->rot_k);
        const int32_t last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
        for (int s = 0; s < jb->n_split; s++) {
            const int32_t j0 = s * jb->split_cells, j1 = j0 + jb->split_cells < last + 1 ? j0 + jb->split_cells : last + 1;
            gl_attn_split(jb, q, g, j0, j1, &ms[s], &ls[s], part[s]);
        }
        float *o = a->out + t * a->out_stride + (int64_t)h * D;
        if (jb->n_split == 1) {
            const float inv = ls[0] > 0.0f ? 1.0f / ls[0] : 0.0f;
            for (int d = 0; d < D; d++) o[d] = part[0][d] * inv;
        } else { /* attn_merge */
            float M = -INFINITY, L = 0.0f;
            for (int s = 0; s < jb->n_split; s++) M = fmaxf(M, ms[s]);
            for (int s = 0; s < jb->n_split; s++)
                if (ms[s] != -INFINITY) L = gl_madd(pt, ls[s], gl_exp(pt, ms[s] - M), L);
            const float inv = L > 0.0f ? 1.0f / L : 0.0f;
            for (int d = 0; d < D; d++) {
                float acc = 0.0f;
                for (int s = 0; s < jb->n_split; s++)
                    if (ms[s] != -INFINITY) acc = gl_madd(pt, part[s][d], gl_exp(pt, ms[s] - M), acc);
                o[d] = acc * inv;
            }
        }
        for (int c = 0; a->rot_v && c < D; c += a->rot_v) kv_hadamard(o + c, a->rot_v);
    }
}

/* ---- attn, prefill (attn.cu attn_mma_kernel, ATTN_MMA: what ATTN_AUTO runs per attn_auto_variant) ---- */

/* One mma.sync m16n8k16 step for one element of C: the 16 products a[k] b[k * bs] (f16 values: exact in f32)
 * summed in k order, then added to c (the emulator's model); perturbed: their exact sum added with one rounding. */
static float gl_mma_step(int perturb, float c, const float *a, const float *b, int64_t bs) {
    if (perturb & GL_P_MMA) {
        double s = 0.0;
        for (int k = 0; k < 16; k++) s += (double)a[k] * b[k * bs];
        return (float)((double)c + s);
    }
    float s = 0.0f;
    for (int k = 0; k < 16; k++) s += a[k] * b[k * bs];
    return c + s;
}

/* The row (t, h) as the tensor kernel computes it: q (rotated) split into f16 hi + lo; per tile of TK cells the
 * scores from two MMAs per 16 dims (Q8_0: per 32-value block the codes' partial, then + d * partial), scaled and
 * masked; the tile max, p = expf(s - m), the row sum over the 4 lanes of a row group (lane c: cells 8 nt + 2c,
 * + 1 in order, then the xor 1, 2 butterfly); o rescaled, then per 16 cells p hi x v, p lo x v (Q8_0: v = d q
 * split, p hi x v hi, p lo x v hi, p hi x v lo). The kernel's tiles past the row's last cell (up to its block's
 * last) change nothing: a max of -inf, expf(0) = 1, a sum of 0. */
static void gl_attn_mma_row(const struct gl_attn_job *jb, int64_t t, int h) {
    const struct attn_args *a = jb->a;
    const int D = a->head_dim, G = a->n_head / a->n_head_kv, g = h / G, pt = jb->perturb, TK = D == 64 ? 64 : 16;
    const int q8 = a->kv_type == INFER_TYPE_Q8_0, nb = D / QK8_0;
    float q[GL_MAX_D], qh[GL_MAX_D], ql[GL_MAX_D], acc[GL_MAX_D], kv[64 * 16], s[64], ph[64], pl[64];
    static _Thread_local float vh[16 * 256], vl[16 * 256]; /* head_dim <= 256 here */
    memcpy(q, a->q + t * a->q_stride + (int64_t)h * D, sizeof(float) * (size_t)D);
    for (int c = 0; a->rot_k && c < D; c += a->rot_k) kv_hadamard(q + c, a->rot_k);
    for (int d = 0; d < D; d++) qh[d] = gl_f16(q[d]), ql[d] = gl_f16(q[d] - qh[d]), acc[d] = 0.0f;
    const int32_t last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
    const int64_t cb = a->kv_stride / QK8_0;
    float m = -INFINITY, l = 0.0f;
    for (int32_t jt = 0; jt <= last; jt += TK) {
        float mx = -INFINITY;
        for (int jj = 0; jj < TK; jj++) {
            const int32_t j = jt + jj;
            s[jj] = -INFINITY;
            if (j > last) continue;
            float sc = 0.0f;
            if (q8) {
                const block_q8_0 *bk = (const block_q8_0 *)a->k + j * cb + (int64_t)g * nb;
                for (int b = 0; b < nb; b++) {
                    float part = 0.0f;
                    for (int i = 0; i < QK8_0; i++) kv[i] = (float)bk[b].qs[i];
                    for (int kk = 0; kk < 2; kk++) {
                        part = gl_mma_step(pt, part, qh + QK8_0 * b + 16 * kk, kv + 16 * kk, 1);
                        part = gl_mma_step(pt, part, ql + QK8_0 * b + 16 * kk, kv + 16 * kk, 1);
                    }
                    sc = gl_madd(pt, blocks_f16_to_f32(bk[b].d), part, sc);
                }
            } else {
                for (int d = 0; d < D; d++) kv[d] = gl_cell(a, a->k, j, g, d);
                for (int kk = 0; kk < D / 16; kk++) {
                    sc = gl_mma_step(pt, sc, qh + 16 * kk, kv + 16 * kk, 1);
                    sc = gl_mma_step(pt, sc, ql + 16 * kk, kv + 16 * kk, 1);
                }
            }
            s[jj] = sc * a->scale;
            mx = fmaxf(mx, s[jj]);
        }
        const float mn = fmaxf(m, mx), c = m == -INFINITY ? 0.0f : gl_exp(pt, m - mn);
        float lane[4];
        for (int jj = 0; jj < TK; jj++) s[jj] = s[jj] == -INFINITY ? 0.0f : gl_exp(pt, s[jj] - mn);
        for (int cq = 0; cq < 4; cq++) {
            lane[cq] = 0.0f;
            for (int nt = 0; nt < TK / 8; nt++) lane[cq] += s[8 * nt + 2 * cq], lane[cq] += s[8 * nt + 2 * cq + 1];
        }
        l = gl_madd(pt, l, c, (lane[0] + lane[1]) + (lane[2] + lane[3])), m = mn;
        for (int d = 0; d < D; d++) acc[d] *= c;
        for (int jj = 0; jj < TK; jj++) ph[jj] = gl_f16(s[jj]), pl[jj] = gl_f16(s[jj] - ph[jj]);
        for (int kc = 0; kc < TK / 16; kc++) {
            for (int jj = 0; jj < 16; jj++) { /* V rows [cell][D]: hi (f16 values, or d q's hi), lo (Q8_0) */
                const int32_t j = jt + 16 * kc + jj;
                for (int d = 0; d < D; d++) {
                    const float v = j <= last ? gl_cell(a, a->v, j, g, d) : 0.0f;
                    vh[jj * D + d] = gl_f16(v), vl[jj * D + d] = gl_f16(v - vh[jj * D + d]);
                }
            }
            for (int d = 0; d < D; d++) {
                acc[d] = gl_mma_step(pt, acc[d], ph + 16 * kc, vh + d, D);
                acc[d] = gl_mma_step(pt, acc[d], pl + 16 * kc, vh + d, D);
                if (q8) acc[d] = gl_mma_step(pt, acc[d], ph + 16 * kc, vl + d, D);
            }
        }
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *o = a->out + t * a->out_stride + (int64_t)h * D;
    for (int d = 0; d < D; d++) o[d] = acc[d] * inv;
    for (int c = 0; a->rot_v && c < D; c += a->rot_v) kv_hadamard(o + c, a->rot_v);
}

static void gl_attn_mma_items(void *ctx, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const struct gl_attn_job *jb = ctx;
    for (int64_t it = i0; it < i1; it++) gl_attn_mma_row(jb, it / jb->a->n_head, (int)(it % jb->a->n_head));
}

static infer_status gl_attn(struct infer_backend *b, const struct attn_args *a) {
    const int q8 = a->kv_type == INFER_TYPE_Q8_0;
    if (!a->q || !a->k || !a->v || !a->out || !a->pos || a->n_tokens < 0 || a->n_head_kv < 1 || a->n_head < 1 ||
        a->n_head % a->n_head_kv || a->head_dim < 1 || a->head_dim > GL_MAX_D || a->n_kv < 1 ||
        (a->kv_type != INFER_TYPE_F16 && !q8) || (q8 && (a->head_dim % QK8_0 || a->kv_stride % QK8_0)) ||
        !kv_rot_valid(a->rot_k, a->head_dim) || !kv_rot_valid(a->rot_v, a->head_dim) || (!q8 && (a->rot_k || a->rot_v)))
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like attn: head_dim %d kv_type %d", a->head_dim, a->kv_type);
    const int mma = a->variant == ATTN_MMA || (a->variant == ATTN_AUTO && attn_auto_variant(a) == ATTN_MMA);
    if (mma && a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like attn: ATTN_MMA at head_dim %d", a->head_dim);
    struct gl_attn_job j = {.a = a, .perturb = gl_of(b)->perturb, .tk = 64, .n_split = attn_splits(a)};
    if (mma) {
        pool_for(gl_of(b)->pool, (int64_t)a->n_tokens * a->n_head, 1, gl_attn_mma_items, &j);
        return INFER_OK;
    }
    while (j.tk > 8 && j.tk * (a->head_dim + 1) > 4096 + 64) j.tk /= 2; /* ATTN_TILE_FLOATS + 64 */
    j.split_cells = attn_split_cells(a, j.n_split, j.tk);
    pool_for(gl_of(b)->pool, (int64_t)a->n_tokens * a->n_head, 1, gl_attn_items, &j);
    return INFER_OK;
}

/* ---- moe (moe.cu) ---- */

/* moe_route_kernel: lane l holds the logits of experts l, l + 32, ...; the softmax sum in double per lane,
 * then the butterfly; selection and weights as the CPU (ties to the lower id, weights through double). */
static infer_status gl_moe_route(struct infer_backend *b, const struct moe_route_args *a) {
    const int pt = gl_of(b)->perturb;
    if (!a->logits || !a->ids || !a->weights || a->n_tokens < 0 || a->n_expert < 1 || a->n_expert > 16 * GL_WARP ||
        a->n_expert_used < 1 || a->n_expert_used > a->n_expert || a->n_expert_used > GL_WARP)
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like moe_route: %d of %d experts", a->n_expert_used, a->n_expert);
    for (int32_t t = 0; t < a->n_tokens; t++) {
        const float *z = a->logits + (int64_t)t * a->n_expert;
        int32_t *ids = a->ids + (int64_t)t * a->n_expert_used;
        float *w = a->weights + (int64_t)t * a->n_expert_used;
        float mx = -INFINITY;
        for (int e = 0; e < a->n_expert; e++) mx = fmaxf(mx, z[e]);
        double lanes[GL_WARP];
        for (int l = 0; l < GL_WARP; l++) {
            lanes[l] = 0.0;
            for (int e = l; e < a->n_expert; e += GL_WARP) lanes[l] += (double)gl_exp(pt, z[e] - mx);
        }
        const double sum = gl_warp_sum_f64(lanes);
        double wsum = 0.0;
        for (int k = 0; k < a->n_expert_used; k++) {
            int best = -1;
            for (int e = 0; e < a->n_expert; e++) {
                int taken = 0;
                for (int i = 0; i < k; i++) taken |= ids[i] == e;
                if (!taken && (best < 0 || z[e] > z[best])) best = e;
            }
            ids[k] = best;
            w[k] = (float)((double)gl_exp(pt, z[best] - mx) / sum);
            wsum += w[k];
        }
        if (a->norm)
            for (int k = 0; k < a->n_expert_used; k++) w[k] = (float)(w[k] / wsum);
    }
    return INFER_OK;
}

/* Values 32u .. 32u+31 of a quantised row as moe.cu decodes them (blocks.h's decoders, equal to
 * quant_dequant_row's): the block holding unit u, then its slice. */
static void gl_unit_values(int32_t type, const uint8_t *row, int64_t u, float w[32]) {
    const struct quant_type *qt = quant_type(type);
    const int64_t per_block = qt->blck / 32;
    float blk[256];
    (void)quant_dequant_row(type, row + (u / per_block) * qt->bytes, blk, qt->blck);
    memcpy(w, blk + 32 * (u % per_block), 32 * sizeof(float));
}

/* moe_row_dot: a warp's dot of a weight row (n values) with f32 x: lane l takes 32-value units l,
 * l + 32, ... (float weights: values l, l + 32, ...), four products per step, then the butterfly. */
static float gl_moe_row_dot(int perturb, int32_t type, const uint8_t *row, const float *x, int64_t n) {
    float lanes[GL_WARP];
    memset(lanes, 0, sizeof lanes);
    if (gl_float_type(type)) {
        for (int64_t c = 0; c < n; c++) lanes[c % GL_WARP] = gl_madd(perturb, gl_fval(type, row, c), x[c], lanes[c % GL_WARP]);
        return gl_warp_sum(lanes);
    }
    for (int64_t u = 0; u < n / 32; u++) {
        float w[32];
        gl_unit_values(type, row, u, w);
        const float *xu = x + 32 * u;
        float s = lanes[u % GL_WARP];
        for (int i = 0; i < 8; i++) {
            const float *wi = w + 4 * i, *xi = xu + 4 * i;
            if (perturb & GL_P_FMA) {
                float p = fmaf(wi[1], xi[1], wi[0] * xi[0]);
                p = fmaf(wi[2], xi[2], p);
                s += fmaf(wi[3], xi[3], p);
            } else {
                s += wi[0] * xi[0] + wi[1] * xi[1] + wi[2] * xi[2] + wi[3] * xi[3];
            }
        }
        lanes[u % GL_WARP] = s;
    }
    return gl_warp_sum(lanes);
}

struct gl_moe_job {
    const struct moe_ffn_args *a;
    int perturb;
    size_t gu, dn; /* row bytes */
    float *h;      /* (n_tokens, n_expert_used, n_ff) */
};

/* moe_gate_up then moe_down for the tokens [t0, t1). */
static void gl_moe_tokens(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct gl_moe_job *j = ctx;
    const struct moe_ffn_args *a = j->a;
    for (int64_t t = t0; t < t1; t++) {
        const float *x = a->x + t * a->n_embd;
        for (int k = 0; k < a->n_expert_used; k++) {
            const int64_t pair = t * a->n_expert_used + k;
            const int e = a->ids[pair];
            float *h = j->h + pair * a->n_ff;
            for (int64_t f = 0; f < a->n_ff; f++) {
                if (e < 0 || e >= a->n_expert) {
                    h[f] = NAN;
                    continue;
                }
                const size_t off = ((size_t)e * (size_t)a->n_ff + (size_t)f) * j->gu;
                const float gv = gl_moe_row_dot(j->perturb, a->type_gate_up, (const uint8_t *)a->gate + off, x, a->n_embd);
                const float uv = gl_moe_row_dot(j->perturb, a->type_gate_up, (const uint8_t *)a->up + off, x, a->n_embd);
                h[f] = gv / (1.0f + gl_exp(j->perturb, -gv)) * uv;
            }
        }
        for (int64_t i = 0; i < a->n_embd; i++) {
            float y = 0.0f;
            for (int k = 0; k < a->n_expert_used; k++) {
                const int64_t pair = t * a->n_expert_used + k;
                const int e = a->ids[pair];
                if (e < 0 || e >= a->n_expert) {
                    y = NAN;
                    break;
                }
                const float o = gl_moe_row_dot(j->perturb, a->type_down,
                                               (const uint8_t *)a->down + ((size_t)e * (size_t)a->n_embd + (size_t)i) * j->dn,
                                               j->h + pair * a->n_ff, a->n_ff);
                y = gl_madd(j->perturb, a->weights[pair], o, y);
            }
            a->y[t * a->n_embd + i] = y;
        }
    }
}

/* ---- moe_ffn from MOE_GROUPED_TOKENS tokens on (moe_mm.cu): per pair, its gathered row scaled by
 * row_shift's power of two and rounded to f16, every product an mma.sync dot over the expert's f16 rows,
 * the sums scaled back; y in top-k order. ---- */

/* moe_mm.cu's row_shift: the power of two bringing max |x| into [2^13, 2^14), clamped to +-100. */
static int gl_row_shift(const float *x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    if (!(m > 0.0f) || !(m <= 3.4e38f)) return 0;
    int ex;
    (void)frexpf(m, &ex);
    const int sh = 14 - ex;
    return sh > 100 ? 100 : sh < -100 ? -100 : sh;
}
/* x scaled by 2^sh, rounded to f16 (fill_rows). */
static void gl_row_f16(const float *x, int64_t n, int sh, float *out) {
    const float sc = ldexpf(1.0f, sh);
    for (int64_t i = 0; i < n; i++) out[i] = gl_f16(x[i] * sc);
}

struct gl_moe_grouped_job {
    const struct moe_ffn_args *a;
    int perturb;
    size_t gu, dn;
    float *h, *yp;  /* (pairs, n_ff), (pairs, n_embd) */
    float *wbuf;    /* per worker: 2 n_ff n_embd (gate, up) or n_embd n_ff (down) f16 values, then a row */
    int stage;      /* 0: gate / up, 1: down */
};

/* Expert e's pairs, stage by stage (moe_mm_gate_up, moe_mm_down). */
static void gl_moe_experts(void *ctx, int64_t e0, int64_t e1, int ith) {
    const struct gl_moe_grouped_job *j = ctx;
    const struct moe_ffn_args *a = j->a;
    const int64_t E = a->n_embd, F = a->n_ff, pairs = (int64_t)a->n_tokens * a->n_expert_used;
    float *w = j->wbuf + (size_t)ith * (2 * (size_t)F * (size_t)E + (size_t)(E > F ? E : F));
    float *row = w + 2 * F * E;
    for (int64_t e = e0; e < e1; e++) {
        int loaded = 0;
        for (int64_t pr = 0; pr < pairs; pr++) {
            if (a->ids[pr] != e) continue;
            if (!loaded) {
                if (j->stage == 0) {
                    for (int64_t f = 0; f < F; f++) {
                        const size_t off = ((size_t)e * (size_t)F + (size_t)f) * j->gu;
                        gl_w_f16(a->type_gate_up, (const uint8_t *)a->gate + off, E, w + f * E);
                        gl_w_f16(a->type_gate_up, (const uint8_t *)a->up + off, E, w + (F + f) * E);
                    }
                } else {
                    for (int64_t i = 0; i < E; i++)
                        gl_w_f16(a->type_down, (const uint8_t *)a->down + ((size_t)e * (size_t)E + (size_t)i) * j->dn, F,
                                 w + i * F);
                }
                loaded = 1;
            }
            if (j->stage == 0) {
                const float *x = a->x + (pr / a->n_expert_used) * E;
                const int sh = gl_row_shift(x, E);
                const float un = ldexpf(1.0f, -sh);
                gl_row_f16(x, E, sh, row);
                for (int64_t f = 0; f < F; f++) {
                    const float gv = gl_mma_dot(j->perturb, w + f * E, row, E) * un;
                    const float uv = gl_mma_dot(j->perturb, w + (F + f) * E, row, E) * un;
                    j->h[pr * F + f] = gv / (1.0f + gl_exp(j->perturb, -gv)) * uv;
                }
            } else {
                const int sh = gl_row_shift(j->h + pr * F, F);
                const float un = ldexpf(1.0f, -sh);
                gl_row_f16(j->h + pr * F, F, sh, row);
                for (int64_t i = 0; i < E; i++) j->yp[pr * E + i] = gl_mma_dot(j->perturb, w + i * F, row, F) * un;
            }
        }
    }
}

static infer_status gl_moe_grouped(const struct gl *g, const struct moe_ffn_args *a, size_t gu, size_t dn) {
    const int64_t E = a->n_embd, F = a->n_ff, pairs = (int64_t)a->n_tokens * a->n_expert_used;
    const int nw = pool_threads(g->pool);
    struct gl_moe_grouped_job j = {.a = a, .perturb = g->perturb, .gu = gu, .dn = dn};
    j.h = xmalloc((size_t)pairs * (size_t)(F + E) * sizeof(float));
    j.wbuf = xmalloc((size_t)nw * (2 * (size_t)F * (size_t)E + (size_t)(E > F ? E : F)) * sizeof(float));
    if (!j.h || !j.wbuf) {
        xfree(j.h), xfree(j.wbuf);
        return INFER_OOM("gpu_like grouped moe scratch");
    }
    j.yp = j.h + pairs * F;
    pool_for(g->pool, a->n_expert, 1, gl_moe_experts, &j);
    j.stage = 1;
    pool_for(g->pool, a->n_expert, 1, gl_moe_experts, &j);
    for (int64_t t = 0; t < a->n_tokens; t++)
        for (int64_t i = 0; i < E; i++) { /* moe_combine */
            float y = 0.0f;
            for (int k = 0; k < a->n_expert_used; k++) {
                const int64_t pr = t * a->n_expert_used + k;
                if (a->ids[pr] < 0 || a->ids[pr] >= a->n_expert) {
                    y = NAN;
                    break;
                }
                y = gl_madd(g->perturb, a->weights[pr], j.yp[pr * E + i], y);
            }
            a->y[t * E + i] = y;
        }
    xfree(j.h), xfree(j.wbuf);
    return INFER_OK;
}

static infer_status gl_moe_ffn(struct infer_backend *b, const struct moe_ffn_args *a) {
    const struct gl *g = gl_of(b);
    const size_t gu = quant_row_bytes(a->type_gate_up, a->n_embd), dn = quant_row_bytes(a->type_down, a->n_ff);
    if (!gu || !dn || !gl_mmv_type(a->type_gate_up) || !gl_mmv_type(a->type_down) ||
        (!gl_float_type(a->type_gate_up) && a->n_embd % 32) || (!gl_float_type(a->type_down) && a->n_ff % 32) ||
        !a->gate || !a->up || !a->down || !a->x || !a->ids || !a->weights || !a->y || a->n_tokens < 0 ||
        a->n_expert < 1 || a->n_expert_used < 1)
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like moe_ffn: types %d/%d", a->type_gate_up, a->type_down);
    if (a->n_tokens >= MOE_GROUPED_TOKENS) return gl_moe_grouped(g, a, gu, dn);
    struct gl_moe_job j = {.a = a, .perturb = g->perturb, .gu = gu, .dn = dn};
    j.h = xmalloc(((size_t)a->n_tokens * (size_t)a->n_expert_used * (size_t)a->n_ff + 1) * sizeof(float));
    if (!j.h) return INFER_OOM("gpu_like moe hidden vectors");
    pool_for(g->pool, a->n_tokens, 1, gl_moe_tokens, &j);
    xfree(j.h);
    return INFER_OK;
}

/* ---- gdn, chunked (gdn.cu gdn_chunk_kernel): GDN_CHUNKED, or GDN_AUTO from GL_GDN_AUTO_CHUNKED tokens, up to the
 * first snapshot token. Each value column group of 16 (a warp) keeps its own operand scales. ---- */
enum { GL_GDN_AUTO_CHUNKED = 64, GL_GDN_QK_EXP = 12 };

static float gl_pow2(int e) { return ldexpf(1.0f, e); }

/* gdn_scale_exp: the power of two that brings amax into [2^13, 2^14). */
static int gl_gdn_scale_exp(float amax) {
    if (!(amax > 0.0f) || !(amax <= 3.0e38f)) return 0;
    uint32_t u;
    memcpy(&u, &amax, sizeof u);
    const int k = 13 - ((int)((u >> 23) & 0xff) - 127);
    return k < -60 ? -60 : k > 60 ? 60 : k;
}

/* gdn_mma3 on one element: x and y (16 values each, already scaled) split into f16 hi + lo; hi hi, hi lo,
 * lo hi in that order. */
static float gl_mma3(int perturb, const float x[16], const float y[16], float c) {
    float xh[16], xl[16], yh[16], yl[16];
    for (int k = 0; k < 16; k++) {
        xh[k] = gl_f16(x[k]), xl[k] = gl_f16(x[k] - xh[k]);
        yh[k] = gl_f16(y[k]), yl[k] = gl_f16(y[k] - yh[k]);
    }
    c = gl_mma_step(perturb, c, xh, yh, 1); /* the attention section's step (gl_mma_dot's rule) */
    c = gl_mma_step(perturb, c, xh, yl, 1);
    return gl_mma_step(perturb, c, xl, yh, 1);
}

/* Per-worker arrays of the chunked form (chunk C <= 64, Dp <= 256). */
struct gl_gdn_chunk {
    float q[64 * 256], k[64 * 256];               /* normalised rows [C][Dp], zero past L and D */
    float P[64][64], A[64][64], T[64][64];
    float X[64][16], Y[64][16], R[64][16], V[64][16];
    float beta[64], eg[64], ed[64], g[64];
    double gam[64];
};

/* Tokens [0, cut) of head j on its state S, as gdn_chunk_kernel computes them. */
static void gl_gdn_chunked(const struct gdn_args *a, int64_t j, int cut, int pt, float *S, struct gl_gdn_chunk *w) {
    const int D = a->d_state, Dp = (D + 15) & ~15, C = Dp <= 128 ? 64 : 32;
    const int kh = a->grouped ? (int)j / (a->n_vhead / a->n_group) : (int)j % a->n_group;
    const int r = a->ab_group;
    const int64_t ab = r > 0 ? (j / r) * 2 * r + j % r : j;
    const float sn = 1.0f / sqrtf((float)D), scale = 1.0f / sqrtf((float)D), sqk = gl_pow2(GL_GDN_QK_EXP);
    float x[16], y[16];
    for (int t0 = 0; t0 < cut; t0 += C) {
        const int L = cut - t0 < C ? cut - t0 : C;
        for (int t = 0; t < C; t++) {
            w->beta[t] = 0.0f, w->g[t] = 0.0f;
            float *qr = w->q + t * Dp, *kr = w->k + t * Dp;
            memset(qr, 0, sizeof(float) * (size_t)Dp), memset(kr, 0, sizeof(float) * (size_t)Dp);
            if (t >= L) continue;
            const int64_t o = (int64_t)(t0 + t) * a->ab_stride + ab;
            const float xg = a->a[o] + a->dt_bias[j];
            const float sp = xg > 20.0f ? xg : logf(1.0f + gl_exp(pt, xg));
            w->beta[t] = 1.0f / (1.0f + gl_exp(pt, -a->b[o]));
            w->g[t] = sp * a->ssm_a[j];
            /* a warp per token: lane l sums the squares of i = l + 32 n in double, then the butterfly */
            const float *q = a->q + (int64_t)(t0 + t) * a->qk_stride + (int64_t)kh * D;
            const float *k = a->k + (int64_t)(t0 + t) * a->qk_stride + (int64_t)kh * D;
            double lq[GL_WARP], lk[GL_WARP];
            for (int l = 0; l < GL_WARP; l++) {
                lq[l] = 0.0, lk[l] = 0.0;
                for (int i = l; i < D; i += GL_WARP) lq[l] += (double)(q[i] * q[i]), lk[l] += (double)(k[i] * k[i]);
            }
            const double sq = gl_warp_sum_f64(lq), sk = gl_warp_sum_f64(lk);
            const float scq = 1.0f / sqrtf((float)(sq / D) + a->eps / (float)D);
            const float sck = 1.0f / sqrtf((float)(sk / D) + a->eps / (float)D);
            for (int i = 0; i < D; i++) qr[i] = (q[i] * scq) * sn, kr[i] = (k[i] * sck) * sn;
        }
        for (int t = 0; t < C; t++) {
            double acc = 0.0, gt = 0.0;
            const int tl = t < L - 1 ? t : L - 1;
            for (int s = 0; s < L; s++) {
                acc += w->g[s];
                if (s == tl) gt = acc;
            }
            w->gam[t] = gt, w->eg[t] = (float)exp(gt), w->ed[t] = (float)exp(acc - gt);
        }
        /* P and A */
        const float un = gl_pow2(-2 * GL_GDN_QK_EXP);
        for (int t = 0; t < C; t++)
            for (int s = 0; s <= t; s++) {
                float cp = 0.0f, ca = 0.0f;
                for (int kk = 0; kk < Dp / 16; kk++) {
                    for (int i = 0; i < 16; i++) y[i] = w->k[s * Dp + 16 * kk + i] * sqk;
                    for (int i = 0; i < 16; i++) x[i] = w->q[t * Dp + 16 * kk + i] * sqk;
                    cp = gl_mma3(pt, x, y, cp);
                    for (int i = 0; i < 16; i++) x[i] = w->k[t * Dp + 16 * kk + i] * sqk;
                    ca = gl_mma3(pt, x, y, ca);
                }
                const float f = gl_exp(pt, (float)(w->gam[t] - w->gam[s]));
                const float dp = cp * un, da = ca * un;
                w->P[t][s] = dp * f;
                w->A[t][s] = w->beta[t] * da * f;
            }
        /* T = (I + A)^-1, a column at a time */
        float tmax = 1.0f;
        for (int s = 0; s < C; s++)
            for (int t = 0; t < C; t++) {
                float v = t == s ? 1.0f : 0.0f;
                if (t > s && t < L) {
                    float acc = w->A[t][s];
                    for (int u = s + 1; u < t; u++) acc = gl_madd(pt, w->A[t][u], w->T[u][s], acc);
                    v = -acc;
                }
                w->T[t][s] = v;
                tmax = fmaxf(tmax, fabsf(v));
            }
        const int eT = gl_gdn_scale_exp(tmax);
        const float sT = gl_pow2(eT), egL = w->eg[L - 1];
        for (int cw = 0; cw < Dp; cw += 16) { /* a warp's 16 value columns */
#define GL_S(c, i) ((c) < D && (i) < D ? S[(size_t)(c) * D + (i)] : 0.0f)
            float amax = 0.0f;
            for (int c = cw; c < cw + 16; c++)
                for (int i = 0; i < Dp; i++) amax = fmaxf(amax, fabsf(GL_S(c, i)));
            const int eS = gl_gdn_scale_exp(amax);
            const float sS = gl_pow2(eS);
            for (int t = 0; t < C; t++)
                for (int cl = 0; cl < 16; cl++) {
                    float cx = 0.0f, cy = 0.0f;
                    for (int kk = 0; 16 * (t / 16) < L && kk < Dp / 16; kk++) {
                        for (int i = 0; i < 16; i++) y[i] = GL_S(cw + cl, 16 * kk + i) * sS;
                        for (int i = 0; i < 16; i++) x[i] = w->k[t * Dp + 16 * kk + i] * sqk;
                        cx = gl_mma3(pt, x, y, cx);
                        for (int i = 0; i < 16; i++) x[i] = w->q[t * Dp + 16 * kk + i] * sqk;
                        cy = gl_mma3(pt, x, y, cy);
                    }
                    w->X[t][cl] = cx, w->Y[t][cl] = cy;
                }
            amax = 0.0f;
            const float ux = gl_pow2(-GL_GDN_QK_EXP - eS);
            for (int t = 0; t < C; t++)
                for (int cl = 0; cl < 16; cl++) {
                    const int c = cw + cl;
                    const float v = t < L && c < D ? a->v[(int64_t)(t0 + t) * a->v_stride + j * D + c] : 0.0f;
                    w->R[t][cl] = w->beta[t] * gl_madd(pt, -(w->eg[t] * w->X[t][cl]), ux, v);
                    amax = fmaxf(amax, fabsf(w->R[t][cl]));
                }
            const int eR = gl_gdn_scale_exp(amax);
            const float sR = gl_pow2(eR), uv = gl_pow2(-eT - eR);
            amax = 0.0f;
            for (int t = 0; t < C; t++)
                for (int cl = 0; cl < 16; cl++) {
                    float cv = 0.0f;
                    for (int kk = 0; 16 * (t / 16) < L && kk <= t / 16; kk++) {
                        for (int i = 0; i < 16; i++) x[i] = w->T[t][16 * kk + i] * sT;
                        for (int i = 0; i < 16; i++) y[i] = w->R[16 * kk + i][cl] * sR;
                        cv = gl_mma3(pt, x, y, cv);
                    }
                    w->V[t][cl] = cv * uv;
                    amax = fmaxf(amax, fabsf(w->V[t][cl]));
                }
            const int eV = gl_gdn_scale_exp(amax);
            const float sV = gl_pow2(eV), uo = gl_pow2(-GL_GDN_QK_EXP - eS), up = gl_pow2(-GL_GDN_QK_EXP - eV);
            for (int t = 0; t < L; t++)
                for (int cl = 0; cl < 16 && cw + cl < D; cl++) {
                    float co = 0.0f;
                    for (int kk = 0; kk <= t / 16; kk++) {
                        for (int i = 0; i < 16; i++) x[i] = 16 * kk + i <= t ? w->P[t][16 * kk + i] * sqk : 0.0f;
                        for (int i = 0; i < 16; i++) y[i] = w->V[16 * kk + i][cl] * sV;
                        co = gl_mma3(pt, x, y, co);
                    }
                    a->out[((int64_t)(t0 + t) * a->n_vhead + j) * D + cw + cl] =
                        gl_madd(pt, co, up, w->eg[t] * (w->Y[t][cl] * uo)) * scale;
                }
            for (int cl = 0; cl < 16 && cw + cl < D; cl++)
                for (int i = 0; i < D; i++) {
                    float cu = 0.0f;
                    for (int kk = 0; 16 * kk < L && kk < C / 16; kk++) {
                        for (int s = 0; s < 16; s++) x[s] = w->V[16 * kk + s][cl] * (w->ed[16 * kk + s] * sV);
                        for (int s = 0; s < 16; s++) y[s] = w->k[(16 * kk + s) * Dp + i] * sqk;
                        cu = gl_mma3(pt, x, y, cu);
                    }
                    float *e = S + (size_t)(cw + cl) * D + i;
                    *e = gl_madd(pt, cu, up, *e * egL);
                }
#undef GL_S
        }
    }
}

/* ---- gdn, recurrent (gdn.cu gdn_recurrent_kernel), from token cut on ---- */

struct gl_gdn_job {
    const struct gdn_args *a;
    int perturb;
    int cut;                    /* tokens [0, cut) chunked */
    struct gl_gdn_chunk *chunk; /* one per pool thread */
};

/* q or k of one token normalised as the kernel does: the squares in double per thread (i = tid + 128 n),
 * the butterfly per warp, the four warps' sums in order. */
static void gl_gdn_l2(const struct gdn_args *a, const float *x, float *y) {
    const int D = a->d_state;
    double th[128], SQ = 0.0;
    for (int tid = 0; tid < 128; tid++) {
        th[tid] = 0.0;
        for (int i = tid; i < D; i += 128) th[tid] += (double)(x[i] * x[i]);
    }
    for (int w = 0; w < 4; w++) SQ += gl_warp_sum_f64(th + GL_WARP * w);
    const float sc = 1.0f / sqrtf((float)(SQ / D) + a->eps / (float)D), sn = 1.0f / sqrtf((float)D);
    for (int i = 0; i < D; i++) y[i] = (x[i] * sc) * sn;
}

static void gl_gdn_heads(void *ctx, int64_t j0, int64_t j1, int ith) {
    const struct gl_gdn_job *jb = ctx;
    const struct gdn_args *a = jb->a;
    const int D = a->d_state, ni = (D + GL_WARP - 1) / GL_WARP, pt = jb->perturb;
    const int NI = ni <= 1 ? 1 : ni <= 2 ? 2 : ni <= 4 ? 4 : 8; /* the kernel's template */
    const size_t dd = (size_t)D * (size_t)D;
    const float scale = 1.0f / sqrtf((float)D);
    float qn[256], kn[256];
    struct gl_gdn_chunk *w = jb->chunk ? jb->chunk + ith : NULL;
    for (int64_t j = j0; j < j1; j++) {
        if (jb->cut > 0) gl_gdn_chunked(a, j, jb->cut, pt, a->state + (size_t)j * dd, w);
        const int kh = a->grouped ? (int)j / (a->n_vhead / a->n_group) : (int)j % a->n_group;
        const int r = a->ab_group;
        const int64_t ab = r > 0 ? (j / r) * 2 * r + j % r : j;
        float *S = a->state + (size_t)j * dd;
        for (int64_t t = jb->cut; t < a->n_tokens; t++) {
            gl_gdn_l2(a, a->q + t * a->qk_stride + (int64_t)kh * D, qn);
            gl_gdn_l2(a, a->k + t * a->qk_stride + (int64_t)kh * D, kn);
            const int64_t o = t * a->ab_stride + ab;
            const float xg = a->a[o] + a->dt_bias[j];
            const float sp = xg > 20.0f ? xg : logf(1.0f + gl_exp(pt, xg));
            const float beta = 1.0f / (1.0f + gl_exp(pt, -a->b[o])), eg = gl_exp(pt, sp * a->ssm_a[j]);
            const float *v = a->v + t * a->v_stride + j * D;
            float *out = a->out + (t * a->n_vhead + j) * D;
            for (int c = 0; c < D; c++) {
                float *col = S + (size_t)c * D, dk[GL_WARP], od[GL_WARP];
                for (int l = 0; l < GL_WARP; l++) { /* lane l: key indices l + 32 n */
                    dk[l] = 0.0f;
                    for (int n = 0; n < NI; n++) {
                        const int i = l + GL_WARP * n;
                        if (i >= D) continue; /* the kernel's 0 * 0 terms */
                        col[i] *= eg;
                        dk[l] = gl_madd(pt, col[i], kn[i], dk[l]);
                    }
                }
                const float d = (v[c] - gl_warp_sum(dk)) * beta;
                for (int l = 0; l < GL_WARP; l++) {
                    od[l] = 0.0f;
                    for (int n = 0; n < NI; n++) {
                        const int i = l + GL_WARP * n;
                        if (i >= D) continue;
                        col[i] = gl_madd(pt, kn[i], d, col[i]);
                        od[l] = gl_madd(pt, col[i], qn[i], od[l]);
                    }
                }
                out[c] = gl_warp_sum(od) * scale;
            }
            if (a->snap && t >= a->snap_from)
                memcpy(a->snap + ((a->snap_pos0 + t) % a->snap_ring) * a->snap_stride + (size_t)j * dd, S, sizeof(float) * dd);
        }
    }
}

static infer_status gl_gdn(struct infer_backend *b, const struct gdn_args *a) {
    if (!a->q || !a->k || !a->v || !a->a || !a->b || !a->dt_bias || !a->ssm_a || !a->state || !a->out || a->n_tokens < 0 ||
        a->n_group <= 0 || a->n_vhead <= 0 || a->n_vhead % a->n_group || a->d_state <= 0 || a->d_state > 256 ||
        a->ab_group < 0 || (a->snap && a->snap_ring <= 0))
        return infer_fail(INFER_E_UNSUPPORTED, "gpu_like gdn: d_state %d", a->d_state);
    const int chunked = a->variant == GDN_CHUNKED || (a->variant == GDN_AUTO && a->n_tokens >= GL_GDN_AUTO_CHUNKED);
    const int cut = !chunked ? 0 : a->snap && a->snap_from < a->n_tokens ? (a->snap_from > 0 ? a->snap_from : 0) : a->n_tokens;
    struct gl_gdn_job j = {.a = a, .perturb = gl_of(b)->perturb, .cut = cut};
    if (cut > 0) {
        j.chunk = xmalloc(sizeof *j.chunk * (size_t)pool_threads(gl_of(b)->pool));
        if (!j.chunk) return INFER_OOM("gpu_like gdn chunk arrays");
    }
    pool_for(gl_of(b)->pool, a->n_vhead, 1, gl_gdn_heads, (void *)&j);
    xfree(j.chunk);
    return INFER_OK;
}

/* ---- the backend: host memory, the CPU's remaining ops ---- */

static int32_t gl_act_type(int32_t weight_type) { return gl_float_type(weight_type) ? -1 : INFER_TYPE_Q8_1; }

static void gl_destroy(struct infer_backend *b) {
    struct gl *g = b->impl;
    pool_free(g->pool);
    xfree(g);
}

static infer_status gl_alloc(struct infer_backend *b, size_t bytes, void **out) {
    (void)b;
    *out = xmalloc(bytes ? bytes : 1);
    return *out ? INFER_OK : INFER_OOM("gpu_like buffer");
}

static void gl_free_buf(struct infer_backend *b, void *p) {
    (void)b;
    xfree(p);
}

static infer_status gl_copy(struct infer_backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes) memcpy(dst, src, bytes);
    return INFER_OK;
}

static infer_status gl_zero(struct infer_backend *b, void *dst, size_t bytes) {
    (void)b;
    if (bytes) memset(dst, 0, bytes);
    return INFER_OK;
}

static infer_status gl_sync(struct infer_backend *b) {
    (void)b;
    return INFER_OK;
}

static infer_status gl_mem_info(struct infer_backend *b, size_t *free_bytes, size_t *total_bytes) {
    (void)b;
    *free_bytes = *total_bytes = 0;
    return INFER_OK;
}

static infer_status gl_run(struct infer_backend *b, uint64_t key, infer_status (*fn)(void *), void *arg) {
    (void)b, (void)key;
    return fn(arg);
}

#define GL_CPU_OP(op, T)                                                                                     \
    static infer_status gl_cpu_##op(struct infer_backend *b, const struct T *a) { return cpu_##op(a, gl_of(b)->pool); }
GL_CPU_OP(act, act_args)
GL_CPU_OP(ssm_conv, ssm_conv_args)
GL_CPU_OP(embed, embed_args)
GL_CPU_OP(kv_store, kv_store_args)
GL_CPU_OP(sample, sample_args)
GL_CPU_OP(spec_accept, spec_accept_args)
#undef GL_CPU_OP

static const struct infer_backend_ops gl_ops = {
    .name = "gpu_like",
    .destroy = gl_destroy,
    .alloc = gl_alloc,
    .free = gl_free_buf,
    .upload = gl_copy,
    .download = gl_copy,
    .sync = gl_sync,
    .copy = gl_copy,
    .zero = gl_zero,
    .mem_info = gl_mem_info,
    .host_alloc = gl_alloc, /* host memory throughout: what a device would page-lock is ordinary memory here */
    .host_free = gl_free_buf,
    .stage_in = gl_copy,
    .stage_out = gl_copy,
    .run = gl_run,
    .mmv_act_type = gl_act_type,
    .quantize = gl_quantize,
    .mmv = gl_mmv,
    .mm = gl_mm,
    .mmv_multi = gl_mmv_multi,
    .norm = gl_norm,
    .rope = gl_rope,
    .act = gl_cpu_act,
    .attn = gl_attn,
    .moe_route = gl_moe_route,
    .moe_ffn = gl_moe_ffn,
    .ssm_conv = gl_cpu_ssm_conv,
    .gdn = gl_gdn,
    .embed = gl_cpu_embed,
    .kv_store = gl_cpu_kv_store,
    .sample = gl_cpu_sample,
    .spec_accept = gl_cpu_spec_accept,
};

static infer_status gl_create(int n_threads, int perturb, struct infer_backend **out) {
    infer_status st = INFER_OK;
    *out = NULL;
    struct gl *g = xcalloc(1, sizeof *g);
    if (!g) return INFER_OOM("gpu_like backend");
    TRY(pool_create(n_threads, &g->pool));
    g->perturb = perturb;
    g->base.ops = &gl_ops;
    g->base.impl = g;
    *out = &g->base;
    return INFER_OK;
fail:
    xfree(g);
    return st;
}

infer_status gpu_like_backend_create(int n_threads, struct infer_backend **out) { return gl_create(n_threads, 0, out); }

infer_status gpu_like_backend_create_perturbed(int n_threads, struct infer_backend **out) {
    const char *e = getenv("GL_PERTURB");
    return gl_create(n_threads, e ? atoi(e) : GL_P_ALL, out);
}

/* ---- gpu_like_probe: small op calls on a device and on the reference, outputs compared bit for bit ---- */

/* A buffer on both sides: h for the reference, d (dev memory) holding the same bytes at the start. */
struct gl_twin {
    void *h, *d;
    size_t bytes;
};

struct gl_probe {
    struct infer_backend *dev, *ref;
    struct gl_twin t[12];
    int n_twins;
    uint64_t rng;
    int failed; /* a dev call failed */
};

static float gl_probe_rand(struct gl_probe *p, float scale) {
    p->rng = p->rng * 6364136223846793005ull + 1442695040888963407ull;
    return scale * ((float)(p->rng >> 40) / 8388608.0f - 1.0f);
}

static uint32_t gl_probe_rng;
static uint32_t gl_probe_bits(void) {
    gl_probe_rng = gl_probe_rng * 1664525u + 1013904223u;
    return gl_probe_rng;
}

/* A twin of bytes: init (may be NULL: NaN bytes, an output) copied to both sides. NULL when dev fails. */
static struct gl_twin *gl_twin_new(struct gl_probe *p, const void *init, size_t bytes) {
    if (p->failed || p->n_twins == (int)(sizeof p->t / sizeof p->t[0])) {
        p->failed = 1;
        return NULL;
    }
    struct gl_twin *t = &p->t[p->n_twins];
    t->bytes = bytes, t->h = xmalloc(bytes ? bytes : 1), t->d = NULL;
    if (!t->h) {
        p->failed = 1;
        return NULL;
    }
    p->n_twins++;
    if (init) memcpy(t->h, init, bytes);
    else memset(t->h, 0xFF, bytes);
    if (p->dev->ops->alloc(p->dev, bytes, &t->d) != INFER_OK || p->dev->ops->upload(p->dev, t->d, t->h, bytes) != INFER_OK)
        p->failed = 1;
    return p->failed ? NULL : t;
}

/* n random floats of the given scale as a twin. */
static struct gl_twin *gl_twin_rand(struct gl_probe *p, size_t n, float scale) {
    float *x = xmalloc(n * sizeof(float));
    if (!x) {
        p->failed = 1;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) x[i] = gl_probe_rand(p, scale) * (i % 41 == 0 ? 4.0f : 1.0f);
    struct gl_twin *t = gl_twin_new(p, x, n * sizeof(float));
    xfree(x);
    return t;
}

/* n_out rows of n_in random weights of type. */
static struct gl_twin *gl_twin_weights(struct gl_probe *p, int32_t type, int64_t n_in, int64_t n_out) {
    const size_t bytes = quant_row_bytes(type, n_in) * (size_t)n_out;
    uint8_t *w = xmalloc(bytes);
    if (!w) {
        p->failed = 1;
        return NULL;
    }
    gl_probe_rng = (uint32_t)(p->rng >> 32);
    randw_weights(type, w, n_in, n_out, gl_probe_bits);
    p->rng += 0x9E3779B97F4A7C15ull;
    struct gl_twin *t = gl_twin_new(p, w, bytes);
    xfree(w);
    return t;
}

/* 1: dev's copy of t equals the reference's bytes (NaNs included), 0: not, -1: dev failed. */
static int gl_twin_same(struct gl_probe *p, const struct gl_twin *t) {
    void *d = xmalloc(t->bytes ? t->bytes : 1);
    if (!d || p->dev->ops->download(p->dev, d, t->d, t->bytes) != INFER_OK) {
        xfree(d);
        return -1;
    }
    const int same = memcmp(d, t->h, t->bytes) == 0;
    xfree(d);
    return same;
}

static void gl_probe_reset(struct gl_probe *p) {
    for (int i = 0; i < p->n_twins; i++) {
        if (p->t[i].d) p->dev->ops->free(p->dev, p->t[i].d);
        xfree(p->t[i].h);
    }
    p->n_twins = 0;
}

#define GL_H(t) ((t)->h)
#define GL_D(t) ((t)->d)
/* Runs op on both backends: args built by the expression A(X) with X = GL_H for the reference and GL_D for
 * the device. */
#define GL_BOTH(p, op, T, A)                                                                                 \
    do {                                                                                                     \
        const struct T a_h_ = A(GL_H), a_d_ = A(GL_D);                                                       \
        if ((p)->ref->ops->op((p)->ref, &a_h_) != INFER_OK || (p)->dev->ops->op((p)->dev, &a_d_) != INFER_OK) \
            (p)->failed = 1;                                                                                 \
    } while (0)

/* Probe k: 1 its outputs are the same, 0 they differ, -1 a call failed, -2 no such probe. name set, and
 * strict = 1 for an op whose arithmetic leaves a device no choice (integer work, one IEEE operation per
 * value, no product that nvcc could fuse into a sum). */
static int gl_probe_case(struct gl_probe *p, int k, const char **name, int *strict) {
    struct gl_twin *x, *y, *w, *w2, *q, *o, *s;
    int same = 1;
    p->rng = 0x243F6A8885A308D3ull + (uint64_t)k;
    *strict = k == 0 || k == 15 || k == 16;
    switch (k) {
    case 0: {
        *name = "quantize q8 split";
        x = gl_twin_rand(p, 256 * 3, 2.0f), y = gl_twin_new(p, NULL, q8_split_bytes(256, 3));
        if (p->failed) break;
#define A(X) {.type = INFER_TYPE_Q8_1, .x = X(x), .y = X(y), .n = 256, .n_rows = 3, .x_stride = 256}
        GL_BOTH(p, quantize, quantize_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 1: case 2: case 3: case 4: {
        const int32_t types[] = {INFER_TYPE_F32, INFER_TYPE_Q4_K, INFER_TYPE_Q6_K, INFER_TYPE_Q8_0};
        const char *names[] = {"mmv F32 swiglu", "mmv Q4_K add", "mmv Q6_K", "mmv Q8_0 swiglu"};
        const int32_t t = types[k - 1], nt = k == 1 ? 1 : k == 2 ? 3 : 8, ep = k == 2 ? MMV_ADD : k == 3 ? MMV_PLAIN : MMV_SWIGLU;
        *name = names[k - 1];
        x = gl_twin_rand(p, 256 * (size_t)nt, 1.0f), w = gl_twin_weights(p, t, 256, 64), w2 = gl_twin_weights(p, t, 256, 64);
        struct gl_twin *add = gl_twin_rand(p, 64 * (size_t)nt, 1.0f);
        y = gl_twin_new(p, NULL, 64 * (size_t)nt * sizeof(float));
        q = gl_twin_new(p, NULL, q8_split_bytes(256, nt));
        if (p->failed) break;
        if (t != INFER_TYPE_F32) { /* the same activations on both sides: the reference's bytes */
            const struct quantize_args qa = {.type = INFER_TYPE_Q8_1, .x = x->h, .y = q->h, .n = 256, .n_rows = nt, .x_stride = 256};
            if (p->ref->ops->quantize(p->ref, &qa) != INFER_OK || p->dev->ops->upload(p->dev, q->d, q->h, q->bytes) != INFER_OK)
                p->failed = 1;
        }
#define A(X) {.type = t, .w = X(w), .w2 = ep == MMV_SWIGLU ? X(w2) : NULL, .n_in = 256, .n_out = 64, .n_tokens = nt,   \
               .xq = t == INFER_TYPE_F32 ? NULL : X(q), .x = X(x), .y = X(y), .add = ep == MMV_ADD ? X(add) : NULL,    \
               .epilogue = ep}
        if (!p->failed) GL_BOTH(p, mmv, mmv_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 5: case 6: {
        const int32_t t = k == 5 ? INFER_TYPE_Q8_0 : INFER_TYPE_F32, nt = k == 5 ? 40 : 20, ep = k == 5 ? MMV_SWIGLU : MMV_ADD;
        *name = k == 5 ? "mm Q8_0 swiglu" : "mm F32 add";
        x = gl_twin_rand(p, 256 * (size_t)nt, 1.0f), w = gl_twin_weights(p, t, 256, 72), w2 = gl_twin_weights(p, t, 256, 72);
        y = gl_twin_rand(p, 72 * (size_t)nt, 1.0f); /* the residual, added in place */
        if (p->failed) break;
#define A(X) {.type = t, .w = X(w), .w2 = ep == MMV_SWIGLU ? X(w2) : NULL, .n_in = 256, .n_out = 72, .n_tokens = nt,   \
               .x = X(x), .y = X(y), .add = ep == MMV_ADD ? X(y) : NULL, .epilogue = ep}
        GL_BOTH(p, mm, mm_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 7: case 8: {
        const int64_t n = k == 7 ? 64 : 1024;
        const int32_t rows = k == 7 ? 9 : 2;
        *name = k == 7 ? "norm 64 gated" : "norm 1024";
        x = gl_twin_rand(p, (size_t)n * rows, 3.0f), w = gl_twin_rand(p, (size_t)n, 1.0f), s = gl_twin_rand(p, (size_t)n * rows, 4.0f);
        y = gl_twin_new(p, NULL, (size_t)n * rows * sizeof(float));
        if (p->failed) break;
#define A(X) {.x = X(x), .w = X(w), .y = X(y), .n = n, .n_rows = rows, .x_stride = n, .y_stride = n, .eps = 1e-6f, \
               .gate = k == 7 ? X(s) : NULL, .gate_stride = n}
        GL_BOTH(p, norm, norm_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 9: {
        *name = "rope neox";
        const int32_t pos[5] = {0, 9, 300, 1000, 4095};
        x = gl_twin_rand(p, 5 * 4 * 64, 2.0f), q = gl_twin_new(p, pos, sizeof pos);
        if (p->failed) break;
#define A(X) {.x = X(x), .pos = X(q), .n_tokens = 5, .n_head = 4, .head_dim = 64, .n_rot = 64, .token_stride = 256,   \
               .head_stride = 64, .mode = ROPE_NEOX, .freq_base = 1000000.0f, .freq_scale = 1.0f}
        GL_BOTH(p, rope, rope_args, A);
#undef A
        same = gl_twin_same(p, x);
        break;
    }
    case 10: {
        *name = "act sigmoid_mul";
        x = gl_twin_rand(p, 300 * 3, 6.0f), w = gl_twin_rand(p, 300 * 3, 6.0f), y = gl_twin_new(p, NULL, 300 * 3 * sizeof(float));
        if (p->failed) break;
#define A(X) {.op = ACT_SIGMOID_MUL, .x = X(x), .x2 = X(w), .y = X(y), .n = 300, .n_rows = 3}
        GL_BOTH(p, act, act_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 11: case 12: {
        /* f16 cells of 2 kv heads of 64 in a 1024-cell capacity; decode (3 tokens, split in 4) or prefill */
        const int32_t nt = k == 11 ? 3 : 20, n_kv = 1024, filled = 700;
        *name = k == 11 ? "attn decode split" : "attn prefill";
        uint16_t *cells = xmalloc((size_t)n_kv * 128 * sizeof(uint16_t));
        int32_t pos[20];
        if (!cells) {
            p->failed = 1;
            break;
        }
        for (int i = 0; i < n_kv * 128; i++) cells[i] = blocks_f32_to_f16(i < filled * 128 ? gl_probe_rand(p, 1.0f) : 0.0f);
        for (int t = 0; t < nt; t++) pos[t] = k == 11 ? filled - nt + t : t;
        w = gl_twin_new(p, cells, (size_t)n_kv * 128 * sizeof(uint16_t));
        for (int i = 0; i < n_kv * 128; i++) cells[i] = blocks_f32_to_f16(i < filled * 128 ? gl_probe_rand(p, 1.0f) : 0.0f);
        w2 = gl_twin_new(p, cells, (size_t)n_kv * 128 * sizeof(uint16_t));
        xfree(cells);
        x = gl_twin_rand(p, (size_t)nt * 256, 1.0f), q = gl_twin_new(p, pos, sizeof pos);
        o = gl_twin_new(p, NULL, (size_t)nt * 256 * sizeof(float));
        s = gl_twin_new(p, NULL, 8 * 4 * 66 * 4 * sizeof(float)); /* attn_scratch_floats at 8 tokens, 4 splits */
        if (p->failed) break;
#define A(X) {.q = X(x), .k = X(w), .v = X(w2), .out = X(o), .pos = X(q), .n_tokens = nt, .n_head = 4, .n_head_kv = 2,  \
               .head_dim = 64, .n_kv = n_kv, .q_stride = 256, .kv_stride = 128, .out_stride = 256, .scale = 0.125f,   \
               .scratch = k == 11 ? X(s) : NULL, .kv_type = INFER_TYPE_F16}
        GL_BOTH(p, attn, attn_args, A);
#undef A
        same = gl_twin_same(p, o);
        break;
    }
    case 13: {
        *name = "moe_route + moe_ffn Q4_K/Q6_K";
        x = gl_twin_rand(p, 3 * 8, 3.0f);
        struct gl_twin *ids = gl_twin_new(p, NULL, 3 * 2 * sizeof(int32_t)), *wt = gl_twin_new(p, NULL, 3 * 2 * sizeof(float));
        w = gl_twin_weights(p, INFER_TYPE_Q4_K, 256, 8 * 256), w2 = gl_twin_weights(p, INFER_TYPE_Q4_K, 256, 8 * 256);
        struct gl_twin *dn = gl_twin_weights(p, INFER_TYPE_Q6_K, 256, 8 * 256), *xe = gl_twin_rand(p, 3 * 256, 1.0f);
        y = gl_twin_new(p, NULL, 3 * 256 * sizeof(float)), s = gl_twin_new(p, NULL, 3 * 2 * 256 * sizeof(float));
        if (p->failed) break;
#define A(X) {.logits = X(x), .ids = X(ids), .weights = X(wt), .n_tokens = 3, .n_expert = 8, .n_expert_used = 2, .norm = 1}
        GL_BOTH(p, moe_route, moe_route_args, A);
#undef A
        same = gl_twin_same(p, ids) == 1 && gl_twin_same(p, wt) == 1;
        if (same && !p->failed) {
#define A(X) {.type_gate_up = INFER_TYPE_Q4_K, .type_down = INFER_TYPE_Q6_K, .gate = X(w), .up = X(w2), .down = X(dn), \
               .x = X(xe), .ids = X(ids), .weights = X(wt), .y = X(y), .n_embd = 256, .n_ff = 256, .n_expert = 8,      \
               .n_expert_used = 2, .n_tokens = 3, .scratch = X(s)}
            GL_BOTH(p, moe_ffn, moe_ffn_args, A);
#undef A
            same = gl_twin_same(p, y);
        }
        break;
    }
    case 14: {
        /* 2 key heads, 4 value heads of 64 (grouped, fused ba as qwen3next), 3 tokens */
        *name = "gdn";
        const int64_t cd = 2 * 2 * 64 + 4 * 64;
        x = gl_twin_rand(p, 3 * (size_t)cd, 1.0f), w = gl_twin_rand(p, 3 * 8, 2.0f), w2 = gl_twin_rand(p, 4, 1.0f);
        float sa[4];
        for (int i = 0; i < 4; i++) sa[i] = -0.2f - 0.4f * (float)i;
        q = gl_twin_new(p, sa, sizeof sa), s = gl_twin_rand(p, 4 * 64 * 64, 0.1f);
        o = gl_twin_new(p, NULL, 3 * 4 * 64 * sizeof(float));
        if (p->failed) break;
#define A(X) {.q = X(x), .k = (float *)X(x) + 128, .v = (float *)X(x) + 256, .a = (float *)X(w) + 2, .b = X(w),       \
               .dt_bias = X(w2), .ssm_a = X(q), .state = X(s), .out = X(o), .n_tokens = 3, .n_group = 2, .n_vhead = 4,  \
               .d_state = 64, .qk_stride = cd, .v_stride = cd, .ab_stride = 8, .grouped = 1, .ab_group = 2, .eps = 1e-6f}
        GL_BOTH(p, gdn, gdn_args, A);
#undef A
        same = gl_twin_same(p, o) == 1 && gl_twin_same(p, s) == 1;
        break;
    }
    case 15: {
        *name = "kv_store Q8_0 rotated";
        const int32_t pos[3] = {5, 0, 2};
        x = gl_twin_rand(p, 3 * 256, 2.0f), q = gl_twin_new(p, pos, sizeof pos);
        y = gl_twin_new(p, NULL, kv_cell_bytes(INFER_TYPE_Q8_0, 6 * 256));
        if (p->failed) break;
#define A(X) {.x = X(x), .cells = X(y), .pos = X(q), .row = 256, .x_stride = 256, .cell_stride = 256, .n_tokens = 3, \
               .type = INFER_TYPE_Q8_0, .rot = 128}
        GL_BOTH(p, kv_store, kv_store_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 16: {
        *name = "embed Q4_K";
        const int32_t ids[4] = {3, 0, 9, 3};
        w = gl_twin_weights(p, INFER_TYPE_Q4_K, 256, 10), q = gl_twin_new(p, ids, sizeof ids);
        y = gl_twin_new(p, NULL, 4 * 256 * sizeof(float));
        if (p->failed) break;
#define A(X) {.type = INFER_TYPE_Q4_K, .table = X(w), .n_embd = 256, .n_rows = 10, .ids = X(q), .n_tokens = 4, .y = X(y)}
        GL_BOTH(p, embed, embed_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 17: {
        *name = "moe_ffn Q4_K/Q6_K grouped (12 tokens)";
        int32_t ids[12 * 2];
        float wts[12 * 2];
        for (int i = 0; i < 12 * 2; i++) ids[i] = (i / 2 + 3 * (i % 2)) % 4, wts[i] = 0.25f + 0.05f * (float)(i % 5);
        struct moe_ffn_args shape = {.n_embd = 256, .n_ff = 256, .n_expert = 4, .n_expert_used = 2, .n_tokens = 12};
        q = gl_twin_new(p, ids, sizeof ids);
        struct gl_twin *wt = gl_twin_new(p, wts, sizeof wts);
        w = gl_twin_weights(p, INFER_TYPE_Q4_K, 256, 4 * 256), w2 = gl_twin_weights(p, INFER_TYPE_Q4_K, 256, 4 * 256);
        struct gl_twin *dn = gl_twin_weights(p, INFER_TYPE_Q6_K, 256, 4 * 256);
        x = gl_twin_rand(p, 12 * 256, 1.0f), y = gl_twin_new(p, NULL, 12 * 256 * sizeof(float));
        s = gl_twin_new(p, NULL, moe_ffn_scratch_floats(&shape) * sizeof(float));
        if (p->failed) break;
#define A(X) {.type_gate_up = INFER_TYPE_Q4_K, .type_down = INFER_TYPE_Q6_K, .gate = X(w), .up = X(w2), .down = X(dn), \
               .x = X(x), .ids = X(q), .weights = X(wt), .y = X(y), .n_embd = 256, .n_ff = 256, .n_expert = 4,         \
               .n_expert_used = 2, .n_tokens = 12, .scratch = X(s)}
        GL_BOTH(p, moe_ffn, moe_ffn_args, A);
#undef A
        same = gl_twin_same(p, y);
        break;
    }
    case 18: {
        /* the chunked form (GDN_AUTO from 64 tokens): 1 key head, 2 value heads of 128 (tiled), 70 tokens, a full
         * chunk and a partial one */
        *name = "gdn chunked";
        const int64_t cd = 2 * 128 + 2 * 128;
        x = gl_twin_rand(p, 70 * (size_t)cd, 1.0f), w = gl_twin_rand(p, 70 * 4, 2.0f), w2 = gl_twin_rand(p, 2, 1.0f);
        const float sa[2] = {-0.3f, -1.1f};
        q = gl_twin_new(p, sa, sizeof sa), s = gl_twin_rand(p, 2 * 128 * 128, 0.1f);
        o = gl_twin_new(p, NULL, 70 * 2 * 128 * sizeof(float));
        if (p->failed) break;
#define A(X) {.q = X(x), .k = (float *)X(x) + 128, .v = (float *)X(x) + 256, .a = (float *)X(w) + 2, .b = X(w),        \
               .dt_bias = X(w2), .ssm_a = X(q), .state = X(s), .out = X(o), .n_tokens = 70, .n_group = 1, .n_vhead = 2, \
               .d_state = 128, .qk_stride = cd, .v_stride = cd, .ab_stride = 4, .eps = 1e-6f}
        GL_BOTH(p, gdn, gdn_args, A);
#undef A
        same = gl_twin_same(p, o) == 1 && gl_twin_same(p, s) == 1;
        break;
    }
    default:
        return -2;
    }
    return p->failed ? -1 : same;
}

int gpu_like_probe(struct infer_backend *dev, int *n_strict, char *why, size_t why_size) {
    struct gl_probe p;
    memset(&p, 0, sizeof p);
    p.dev = dev;
    why[0] = 0;
    *n_strict = 0;
    if (gpu_like_backend_create(1, &p.ref) != INFER_OK) {
        snprintf(why, why_size, "the reference backend: %s", infer_last_error());
        return -1;
    }
    int n_diff = 0;
    for (int k = 0;; k++) {
        const char *name = "";
        int strict = 0;
        const int r = gl_probe_case(&p, k, &name, &strict);
        gl_probe_reset(&p);
        if (r == -2) break;
        if (r == -1) {
            snprintf(why, why_size, "%s: %s", name, infer_last_error());
            n_diff = -1;
            break;
        }
        if (r == 0) {
            const size_t len = strlen(why);
            snprintf(why + len, why_size - len, "%s%s%s", len ? ", " : "", name, strict ? " (strict)" : "");
            n_diff++;
            *n_strict += strict;
        }
    }
    backend_free(p.ref);
    return n_diff;
}
