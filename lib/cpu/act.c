/* act: SiLU, SwiGLU (silu(gate) * up), row softmax(scale * x), the sigmoid gates x * sigmoid(x2) (per
 * element, or one scalar per row) and the residual add x + x2.
 * Softmax subtracts the row max and sums the exponentials in double like ggml's soft_max; elementwise
 * ops are split over rows. Each element is read before its output is written, so y may alias x or x2.
 */
#include "cpu.h"

static inline float act_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static void act_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct act_args *a = ctx;
    int64_t s2 = a->x2_stride ? a->x2_stride : a->n;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->n, *x2 = a->x2 ? a->x2 + r * s2 : NULL;
        float *y = a->y + r * a->n;
        if (a->op == ACT_SILU) {
            for (int64_t i = 0; i < a->n; i++) y[i] = cpu_silu(x[i]);
        } else if (a->op == ACT_SWIGLU) {
            for (int64_t i = 0; i < a->n; i++) y[i] = cpu_silu(x[i]) * x2[i];
        } else if (a->op == ACT_SIGMOID_MUL) {
            for (int64_t i = 0; i < a->n; i++) y[i] = x[i] * act_sigmoid(x2[i]);
        } else if (a->op == ACT_SIGMOID_MUL_ROW) {
            float g = act_sigmoid(x2[0]);
            for (int64_t i = 0; i < a->n; i++) y[i] = x[i] * g;
        } else if (a->op == ACT_ADD) {
            for (int64_t i = 0; i < a->n; i++) y[i] = x[i] + x2[i];
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
    int needs_x2 = a->op == ACT_SWIGLU || a->op == ACT_SIGMOID_MUL || a->op == ACT_SIGMOID_MUL_ROW || a->op == ACT_ADD;
    int64_t s2 = a->x2_stride ? a->x2_stride : a->n;
    if (!a->x || !a->y || a->n <= 0 || a->n_rows < 0 || a->op < ACT_SILU || a->op > ACT_ADD || (needs_x2 && !a->x2) ||
        s2 < (a->op == ACT_SIGMOID_MUL_ROW ? 1 : a->n))
        return infer_fail(INFER_E_ARG, "cpu_act: op %d n %lld x2_stride %lld: expected op 0..5, n > 0, x2 for the "
                          "two-input ops, x2_stride 0 or >= n (>= 1 per-row gate)", a->op, (long long)a->n,
                          (long long)a->x2_stride);
    pool_for(p, a->n_rows, 1, act_rows, (void *)a);
    return INFER_OK;
}
