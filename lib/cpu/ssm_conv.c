/* ssm_conv: the causal depthwise conv1d of a Gated DeltaNet layer with its carried window, then SiLU
 * (llama.cpp ggml_ssm_conv + silu; contract in kernels.h ssm_conv_args).
 *
 * X = the d_conv-1 state rows followed by the input rows is never built: row r of X is state row r for
 * r < d_conv-1, else input row r-(d_conv-1). Taps are summed in float in order 0..d_conv-1 like ggml.
 * Each worker owns a range of channels and walks the tokens in order (rows stay contiguous); the state
 * of its channels is only replaced after its last token, since the early snapshots and outputs still
 * read the old window.
 */
#include "cpu.h"

enum { SSM_CONV_MAX = 16 }; /* d_conv limit (the models use 4) */

static inline const float *conv_row(const struct ssm_conv_args *a, int64_t r) {
    int64_t nw = a->d_conv - 1;
    return r < nw ? a->state + r * a->n_ch : a->x + (r - nw) * a->x_stride;
}

static void conv_channels(void *ctx, int64_t c0, int64_t c1, int ith) {
    (void)ith;
    const struct ssm_conv_args *a = ctx;
    int nw = a->d_conv - 1;
    for (int64_t t = 0; t < a->n_tokens; t++) {
        const float *rows[SSM_CONV_MAX];
        for (int i = 0; i < a->d_conv; i++) rows[i] = conv_row(a, t + i);
        float *y = a->y + t * a->n_ch;
        for (int64_t ch = c0; ch < c1; ch++) {
            const float *w = a->w + ch * a->d_conv;
            float s = 0;
            for (int i = 0; i < a->d_conv; i++) s += w[i] * rows[i][ch];
            y[ch] = cpu_silu(s);
        }
        if (a->snap && t >= a->snap_from) { /* the window after token t: X rows t+1 .. t+d_conv-1 */
            float *sn = a->snap + ((a->snap_pos0 + t) % a->snap_ring) * a->snap_stride;
            for (int i = 0; i < nw; i++) memcpy(sn + i * a->n_ch + c0, rows[i + 1] + c0, sizeof(float) * (size_t)(c1 - c0));
        }
    }
    /* new state row i = X row n_tokens + i; ascending i only reads rows not yet replaced */
    for (int i = 0; i < nw; i++)
        memmove(a->state + i * a->n_ch + c0, conv_row(a, a->n_tokens + i) + c0, sizeof(float) * (size_t)(c1 - c0));
}

infer_status cpu_ssm_conv(const struct ssm_conv_args *a, struct pool *p) {
    if (!a->x || !a->state || !a->w || !a->y || a->n_ch <= 0 || a->x_stride < a->n_ch || a->n_tokens < 0 ||
        a->d_conv < 2 || a->d_conv > SSM_CONV_MAX)
        return infer_fail(INFER_E_ARG, "cpu_ssm_conv: n_ch %lld x_stride %lld n_tokens %d d_conv %d: expected n_ch > 0, "
                          "x_stride >= n_ch, n_tokens >= 0, d_conv 2..%d", (long long)a->n_ch, (long long)a->x_stride,
                          a->n_tokens, a->d_conv, SSM_CONV_MAX);
    if (a->snap && (a->snap_ring <= 0 || a->snap_pos0 < 0 || a->snap_stride < (int64_t)(a->d_conv - 1) * a->n_ch))
        return infer_fail(INFER_E_ARG, "cpu_ssm_conv: snapshot ring %d, pos0 %d, stride %lld: expected ring > 0, pos0 >= 0, "
                          "stride >= (d_conv-1)*n_ch = %lld", a->snap_ring, a->snap_pos0, (long long)a->snap_stride,
                          (long long)(a->d_conv - 1) * a->n_ch);
    pool_for(p, a->n_ch, 64, conv_channels, (void *)a);
    return INFER_OK;
}
