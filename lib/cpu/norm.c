/* norm: RMSNorm, y = x / sqrt(mean(x^2) + eps) * w, one row per output row; gated form (the GDN output
 * norm) multiplies by silu(gate) afterwards.
 * As ggml_compute_forward_rms_norm_f32: the sum of squares in double, the scale 1/sqrtf in f32; the
 * weight multiply and the SiLU product (separate ggml ops, llama.cpp build_norm_gated) follow in f32 in
 * that order. Rows are split over the pool.
 */
#include "cpu.h"

enum { NORM_GRAIN = 16384 };

static void norm_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct norm_args *a = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->x_stride;
        float *y = a->y + r * a->y_stride;
        double ss = 0;
        for (int64_t i = 0; i < a->n; i++) ss += (double)(x[i] * x[i]);
        float scale = 1.0f / sqrtf((float)(ss / (double)a->n) + a->eps);
        if (a->w)
            for (int64_t i = 0; i < a->n; i++) y[i] = (x[i] * scale) * a->w[i];
        else
            for (int64_t i = 0; i < a->n; i++) y[i] = x[i] * scale;
        if (a->gate) {
            const float *g = a->gate + r * a->gate_stride;
            for (int64_t i = 0; i < a->n; i++) y[i] *= cpu_silu(g[i]);
        }
    }
}

infer_status cpu_norm(const struct norm_args *a, struct pool *p) {
    if (!a->x || !a->y || a->n <= 0 || a->n_rows < 0 || a->x_stride < a->n || a->y_stride < a->n || !(a->eps >= 0) ||
        (a->gate && a->gate_stride < a->n))
        return infer_fail(INFER_E_ARG, "cpu_norm: n %lld, strides %lld/%lld/%lld, eps %g: expected n > 0, strides >= n, "
                          "eps >= 0", (long long)a->n, (long long)a->x_stride, (long long)a->y_stride,
                          (long long)a->gate_stride, (double)a->eps);
    /* at least NORM_GRAIN values a worker: a decode step's per-head norms (16 rows of 128) run inline instead of
     * paying a pool hand-off for a microsecond of work */
    const int64_t grain = NORM_GRAIN / a->n > 1 ? NORM_GRAIN / a->n : 1;
    pool_for(p, a->n_rows, grain, norm_rows, (void *)a);
    return INFER_OK;
}
