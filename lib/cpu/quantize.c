/* quantize: f32 activations -> 8-bit blocks, once per matmul input (the CPU's vec_dot_type).
 *
 * Q8_0 follows quantize_row_q8_0_ref (d = amax/127, q = roundf(x / d) via the f32 reciprocal, d stored as
 * f16); Q8_1 (the partner of Q4_1/Q5_1) is Q8_0 plus s = f16(d * Σq), quantize_row_q8_1_ref; Q8_K follows
 * quantize_row_q8_K_ref (signed max, iscale = -127/max, nearest-even, bsums per 16).
 * All three are bit-exact with libggml-base's *_ref functions, which the tests check. Note: llama.cpp's AVX2
 * quantize_row_q8_0 rounds half-to-even instead, so a tie can differ by one step from an AVX2 llama.cpp
 * build; the ref form is the one every ISA can reproduce.
 * Rows are split over the pool.
 */
#include "cpu.h"

/* roundf(v) without the libm call (a call per value was 3 % of a one-thread Qwen3-0.6B Q8_0 decode): the truncated
 * integer plus one step away from zero where the exact fraction is a half or more. Equal to roundf for every float
 * of magnitude up to 200 (checked exhaustively); a block's values are at most 127 in magnitude. */
static inline int8_t quantize_round(float v) {
    const int32_t i = (int32_t)v;
    const float f = v - (float)i; /* exact */
    return (int8_t)(i + (f >= 0.5f) - (f <= -0.5f));
}

/* the block's largest magnitude, compared as ggml's MAX(amax, fabsf(v)) compares */
static inline float quantize_amax(const float *x) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) {
        const float ax = fabsf(x[j]);
        amax = amax > ax ? amax : ax;
    }
    return amax;
}

static void quantize_q8_0_row(const float *x, block_q8_0 *y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        const float amax = quantize_amax(x);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = blocks_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) y[b].qs[j] = quantize_round(x[j] * id);
    }
}

static void quantize_q8_1_row(const float *x, block_q8_1 *y, int64_t n) {
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        const float amax = quantize_amax(x);
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        y[b].d = blocks_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) {
            y[b].qs[j] = quantize_round(x[j] * id);
            sum += y[b].qs[j];
        }
        y[b].s = blocks_f32_to_f16((float)sum * d); /* the f32 d, not its f16 rounding, as ggml */
    }
}

static inline int quantize_nearest_int(float f) {
    float v = f + 12582912.0f; /* 1.5 * 2^23: the low mantissa bits are round-half-even(f) */
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static void quantize_q8_k_row(const float *x, block_q8_K *y, int64_t n) {
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        /* note: ggml leaves bsums unwritten for an all-zero block; zeros are the same values */
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = quantize_nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += y[b].qs[16 * g + i];
            y[b].bsums[g] = (int16_t)s;
        }
        y[b].d = 1.0f / iscale;
    }
}

struct quantize_job {
    const struct quantize_args *a;
    size_t row_bytes;
};

static void quantize_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct quantize_job *j = ctx;
    const struct quantize_args *a = j->a;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->x_stride;
        void *y = (char *)a->y + r * j->row_bytes;
        if (a->type == INFER_TYPE_Q8_0)
            quantize_q8_0_row(x, y, a->n);
        else if (a->type == INFER_TYPE_Q8_1)
            quantize_q8_1_row(x, y, a->n);
        else
            quantize_q8_k_row(x, y, a->n);
    }
}

infer_status cpu_quantize(const struct quantize_args *a, struct pool *p) {
    int64_t blck;
    size_t bytes;
    if (a->type == INFER_TYPE_Q8_0) {
        blck = QK8_0;
        bytes = sizeof(block_q8_0);
    } else if (a->type == INFER_TYPE_Q8_1) {
        blck = QK8_0;
        bytes = sizeof(block_q8_1);
    } else if (a->type == INFER_TYPE_Q8_K) {
        blck = QK_K;
        bytes = sizeof(block_q8_K);
    } else {
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_quantize: type %d: expected Q8_0, Q8_1 or Q8_K", a->type);
    }
    if (a->n <= 0 || a->n % blck || a->n_rows < 0 || a->x_stride < a->n)
        return infer_fail(INFER_E_ARG, "cpu_quantize: n %lld: expected a positive multiple of %lld",
                          (long long)a->n, (long long)blck);
    struct quantize_job j = {a, (size_t)(a->n / blck) * bytes};
    pool_for(p, a->n_rows, 1, quantize_rows, &j);
    return INFER_OK;
}
