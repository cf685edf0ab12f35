/* ssm_conv: the causal depthwise conv1d of a Gated DeltaNet layer with its carried window, then SiLU
 * (llama.cpp ggml_ssm_conv + silu; contract in kernels.h ssm_conv_args).
 *
 * The window is a ring of ssm_conv_ring(d_conv) slots indexed by position: tap i of token t reads position
 * p0 + t - (d_conv-1) + i, from the input rows for positions >= p0, else from the ring. Taps are summed in
 * float in order 0..d_conv-1 like ggml. Each worker owns a range of channels and walks the tokens in order
 * (rows stay contiguous); token t's input goes into its slot after its own output, which is safe in place
 * for any run length: it evicts position p0 + t - ring, older than anything token t or a later one reads.
 * Snapshots copy the window's d_conv-1 slots after token t into the snapshot's rows in position order.
 */
#include "cpu.h"

enum { SSM_CONV_MAX = 16 }; /* d_conv limit (the models use 4) */

static void conv_channels(void *ctx, int64_t c0, int64_t c1, int ith) {
    (void)ith;
    const struct ssm_conv_args *a = ctx;
    const int64_t nw = a->d_conv - 1, ring = ssm_conv_ring(a->d_conv), p0 = *a->pos;
    const size_t nb = sizeof(float) * (size_t)(c1 - c0);
    for (int64_t t = 0; t < a->n_tokens; t++) {
        const float *rows[SSM_CONV_MAX];
        for (int i = 0; i < a->d_conv; i++) {
            const int64_t p = p0 + t - nw + i;
            rows[i] = p >= p0 ? a->x + (p - p0) * a->x_stride : a->state + ssm_conv_slot(p, ring) * a->n_ch;
        }
        float *y = a->y + t * a->n_ch;
        for (int64_t ch = c0; ch < c1; ch++) {
            const float *w = a->w + ch * a->d_conv;
            float s = 0;
            for (int i = 0; i < a->d_conv; i++) s += w[i] * rows[i][ch];
            y[ch] = cpu_silu(s);
        }
        memcpy(a->state + ssm_conv_slot(p0 + t, ring) * a->n_ch + c0, a->x + t * a->x_stride + c0, nb);
        if (a->snap && t >= a->snap_from) { /* the window after token t: positions p0+t-nw+1 .. p0+t */
            float *sn = a->snap + ((a->snap_pos0 + t) % a->snap_ring) * a->snap_stride;
            for (int64_t i = 0; i < nw; i++)
                memcpy(sn + i * a->n_ch + c0, a->state + ssm_conv_slot(p0 + t - nw + 1 + i, ring) * a->n_ch + c0, nb);
        }
    }
}

infer_status cpu_ssm_conv(const struct ssm_conv_args *a, struct pool *p) {
    if (!a->x || !a->state || !a->w || !a->y || !a->pos || a->n_ch <= 0 || a->x_stride < a->n_ch || a->n_tokens < 0 ||
        a->d_conv < 2 || a->d_conv > SSM_CONV_MAX || *a->pos < 0)
        return infer_fail(INFER_E_ARG, "cpu_ssm_conv: n_ch %lld x_stride %lld n_tokens %d d_conv %d pos %d: expected n_ch > 0, "
                          "x_stride >= n_ch, n_tokens >= 0, d_conv 2..%d, a position >= 0", (long long)a->n_ch,
                          (long long)a->x_stride, a->n_tokens, a->d_conv, a->pos ? *a->pos : -1, SSM_CONV_MAX);
    const int64_t win = (int64_t)(a->d_conv - 1) * a->n_ch;
    if (a->snap && (a->snap_ring <= 0 || a->snap_pos0 < 0 || a->snap_stride < win))
        return infer_fail(INFER_E_ARG, "cpu_ssm_conv: snapshot ring %d, pos0 %d, stride %lld: expected ring > 0, pos0 >= 0, "
                          "stride >= (d_conv-1)*n_ch = %lld", a->snap_ring, a->snap_pos0, (long long)a->snap_stride,
                          (long long)win);
    pool_for(p, a->n_ch, 64, conv_channels, (void *)a);
    return INFER_OK;
}
