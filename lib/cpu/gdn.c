/* gdn: the gated delta rule of a Gated DeltaNet layer (contract in kernels.h gdn_args, math in
 * ../shared/specs/qwen35.md §4.4 and §5).
 *
 * Recurrent form, llama.cpp's CPU numerics (ggml_compute_forward_gated_delta_net_one_chunk): per token
 * the state is scaled by expf(g), then per value column c (contiguous over the key index i, S[i][c] at
 * state[j][c][i]) d = beta (v_c - S[:,c].k), S[:,c] += k d, o_c = S[:,c].q / sqrt(d_state). A column
 * only depends on itself, so the decay, update and output are fused into one pass over each column.
 * Gates: beta = sigmoid(b), g = softplus(a + dt_bias) * ssm_a (softplus(x) = x above 20); q and k are
 * L2-normalised per token (sum of squares in double, x / max(||x||, eps)).
 * Work is split over value heads; each head owns its state block, so the workers never share a write.
 */
#include "cpu.h"

enum { GDN_MAX_D = 256 };

/* Key head and a/b column of value head j. */
static inline int gdn_khead(const struct gdn_args *a, int j) {
    return a->grouped ? j / (a->n_vhead / a->n_group) : j % a->n_group;
}
static inline int64_t gdn_ab_idx(const struct gdn_args *a, int j) {
    int r = a->ab_group;
    return r > 0 ? (int64_t)(j / r) * 2 * r + j % r : j;
}

/* beta and g (the log decay) of token t, head j. */
static inline void gdn_gates(const struct gdn_args *a, int64_t t, int j, float *beta, float *g) {
    int64_t o = t * a->ab_stride + gdn_ab_idx(a, j);
    float x = a->a[o] + a->dt_bias[j];
    float sp = x > 20.0f ? x : logf(1.0f + expf(x));
    *beta = 1.0f / (1.0f + expf(-a->b[o]));
    *g = sp * a->ssm_a[j];
}

static inline void gdn_l2(const float *x, float *y, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    float sc = 1.0f / fmaxf(sqrtf((float)ss), eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * sc;
}

static inline void gdn_snap(const struct gdn_args *a, int64_t t, int j, const float *S) {
    if (!a->snap || t < a->snap_from) return;
    size_t dd = (size_t)a->d_state * (size_t)a->d_state;
    memcpy(a->snap + ((a->snap_pos0 + t) % a->snap_ring) * a->snap_stride + (size_t)j * dd, S, sizeof(float) * dd);
}

/* Tokens [t0, t1) of head j, token by token, on the state block S. */
static void gdn_recurrent(const struct gdn_args *a, int j, int64_t t0, int64_t t1, float *S) {
    int D = a->d_state, kh = gdn_khead(a, j);
    float q[GDN_MAX_D], k[GDN_MAX_D], scale = 1.0f / sqrtf((float)D);
    for (int64_t t = t0; t < t1; t++) {
        float beta, g;
        gdn_gates(a, t, j, &beta, &g);
        float eg = expf(g);
        gdn_l2(a->q + t * a->qk_stride + (int64_t)kh * D, q, D, a->eps);
        gdn_l2(a->k + t * a->qk_stride + (int64_t)kh * D, k, D, a->eps);
        const float *v = a->v + t * a->v_stride + (int64_t)j * D;
        float *out = a->out + (t * a->n_vhead + j) * D;
        for (int c = 0; c < D; c++) {
            float *col = S + (size_t)c * D, kv = 0, o = 0;
            for (int i = 0; i < D; i++) {
                col[i] *= eg;
                kv += col[i] * k[i];
            }
            float d = (v[c] - kv) * beta;
            for (int i = 0; i < D; i++) {
                col[i] += k[i] * d;
                o += col[i] * q[i];
            }
            out[c] = o * scale;
        }
        gdn_snap(a, t, j, S);
    }
}

static void gdn_heads(void *ctx, int64_t j0, int64_t j1, int ith) {
    (void)ith;
    const struct gdn_args *a = ctx;
    size_t dd = (size_t)a->d_state * (size_t)a->d_state;
    for (int64_t j = j0; j < j1; j++) gdn_recurrent(a, (int)j, 0, a->n_tokens, a->state + (size_t)j * dd);
}

infer_status cpu_gdn(const struct gdn_args *a, struct pool *p) {
    if (!a->q || !a->k || !a->v || !a->a || !a->b || !a->dt_bias || !a->ssm_a || !a->state || !a->out ||
        a->n_tokens < 0 || a->n_group <= 0 || a->n_vhead <= 0 || a->n_vhead % a->n_group || a->d_state <= 0 ||
        a->d_state > GDN_MAX_D || a->qk_stride < (int64_t)a->n_group * a->d_state ||
        a->v_stride < (int64_t)a->n_vhead * a->d_state || a->ab_stride < 0 || !(a->eps >= 0))
        return infer_fail(INFER_E_ARG, "cpu_gdn: n_tokens %d, heads %d/%d, d_state %d, strides %lld/%lld/%lld: expected "
                          "n_vhead a multiple of n_group, d_state 1..%d, rows at least one token wide", a->n_tokens,
                          a->n_group, a->n_vhead, a->d_state, (long long)a->qk_stride, (long long)a->v_stride,
                          (long long)a->ab_stride, GDN_MAX_D);
    if (a->ab_group < 0 || (a->ab_group > 0 && a->ab_group != a->n_vhead / a->n_group))
        return infer_fail(INFER_E_ARG, "cpu_gdn: ab_group %d: expected 0 or n_vhead / n_group = %d", a->ab_group,
                          a->n_vhead / a->n_group);
    if (a->snap && (a->snap_ring <= 0 || a->snap_pos0 < 0 ||
                    a->snap_stride < (int64_t)a->n_vhead * a->d_state * a->d_state))
        return infer_fail(INFER_E_ARG, "cpu_gdn: snapshot ring %d, pos0 %d, stride %lld: expected ring > 0, pos0 >= 0, "
                          "stride >= n_vhead*d_state^2", a->snap_ring, a->snap_pos0, (long long)a->snap_stride);
    if (a->variant < GDN_AUTO || a->variant > GDN_CHUNKED)
        return infer_fail(INFER_E_ARG, "cpu_gdn: variant %d: expected GDN_AUTO, GDN_RECURRENT or GDN_CHUNKED", a->variant);
    if (a->variant == GDN_CHUNKED) return infer_fail(INFER_E_UNSUPPORTED, "cpu_gdn: GDN_CHUNKED not implemented yet");
    pool_for(p, a->n_vhead, 1, gdn_heads, (void *)a);
    return INFER_OK;
}
