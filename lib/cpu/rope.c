/* rope: rotary position embedding in place, normal (pairs 2i, 2i+1) and NeoX (pairs i, i + n_rot/2),
 * rotating only the first n_rot dims of each head (partial rotation, as Qwen3.5's 64 of 256).
 * Angles follow ggml's rope_f32 without YaRN: theta_0 = pos, theta_{i+1} = theta_i * freq_base^(-2/n_rot)
 * in f32, then the angle is freq_scale * theta_i. Threads split tokens.
 */
#include "cpu.h"

enum { ROPE_MAX_ROT = 1024 };

static void rope_tokens(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct rope_args *a = ctx;
    const float theta_scale = powf(a->freq_base, -2.0f / (float)a->n_rot);
    const int half = a->n_rot / 2;
    float cs[ROPE_MAX_ROT / 2], sn[ROPE_MAX_ROT / 2];
    for (int64_t t = t0; t < t1; t++) {
        float theta = (float)a->pos[t];
        for (int i = 0; i < half; i++) {
            cs[i] = cosf(a->freq_scale * theta);
            sn[i] = sinf(a->freq_scale * theta);
            theta *= theta_scale;
        }
        for (int h = 0; h < a->n_head; h++) {
            float *x = a->x + t * a->token_stride + h * a->head_stride;
            for (int i = 0; i < half; i++) {
                int i0 = a->mode == ROPE_NEOX ? i : 2 * i, i1 = a->mode == ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = x[i0], x1 = x[i1];
                x[i0] = x0 * cs[i] - x1 * sn[i];
                x[i1] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

infer_status cpu_rope(const struct rope_args *a, struct pool *p) {
    if (!a->x || !a->pos || a->n_tokens < 0 || a->n_head < 1 || a->n_rot < 2 || a->n_rot % 2 ||
        a->n_rot > a->head_dim || a->n_rot > ROPE_MAX_ROT || (a->mode != ROPE_NORMAL && a->mode != ROPE_NEOX))
        return infer_fail(INFER_E_ARG, "cpu_rope: n_rot %d head_dim %d mode %d: expected even n_rot in 2..min(head_dim, %d), "
                          "mode 0 or 2", a->n_rot, a->head_dim, a->mode, ROPE_MAX_ROT);
    pool_for(p, a->n_tokens, 1, rope_tokens, (void *)a);
    return INFER_OK;
}
