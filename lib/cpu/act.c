/* act: SiLU, SwiGLU (silu(gate) * up) and row softmax(scale * x).
 * Softmax subtracts the row max and sums the exponentials in double like ggml's soft_max; elementwise
 * ops are split over rows.
 */
#include "cpu.h"

static void act_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct act_args *a = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->n, *x2 = a->x2 ? a->x2 + r * a->n : NULL;
        float *y = a->y + r * a->n;
        if (a->op == ACT_SILU) {
            for (int64_t i = 0; i < a->n; i++) y[i] = cpu_silu(x[i]);
        } else if (a->op == ACT_SWIGLU) {
            for (int64_t i = 0; i < a->n; i++) y[i] = cpu_silu(x[i]) * x2[i];
        } else {
            float max = -INFINITY;
            for (int64_t i = 0; i < a->n; i++) max = fmaxf(max, a->scale * x[i]);
            double sum = 0;
            for (int64_t i = 0; i < a->n; i++) {
                y[i] = expf(a->scale * x[i] - max);
                sum += y[i];
            }
            float inv = (float)(1.0 / sum);
            for (int64_t i = 0; i < a->n; i++) y[i] *= inv;
        }
    }
}

infer_status cpu_act(const struct act_args *a, struct pool *p) {
    if (!a->x || !a->y || a->n <= 0 || a->n_rows < 0 || a->op < ACT_SILU || a->op > ACT_SOFTMAX ||
        (a->op == ACT_SWIGLU && !a->x2))
        return infer_fail(INFER_E_ARG, "cpu_act: op %d n %lld: expected op 0..2, n > 0, x2 for SwiGLU", a->op,
                          (long long)a->n);
    pool_for(p, a->n_rows, 1, act_rows, (void *)a);
    return INFER_OK;
}
