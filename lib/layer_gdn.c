/* layer_gdn: the Gated DeltaNet (linear attention) block of qwen35, qwen35moe and qwen3next
 * (docs/qwen35.md §4.4):
 *   n = RMSNorm(x) * attn_norm
 *   qkv = W_qkv n  [q (Hk x d) | k (Hk x d) | v (Hv x d)];  z = W_gate n;  b, a = W_beta n, W_alpha n
 *   (qwen3next: one fused W_ba, grouped by key head; the gdn op reads it in place)
 *   c = SiLU(causal depthwise conv1d(qkv)) with the sequence's carried window   (ssm_conv op)
 *   o = gated delta rule over c's q, k, v with beta = sigmoid(b), decay = exp(softplus(a + dt) * A)
 *       on the sequence's recurrent state                                        (gdn op)
 *   (a device's decode run of up to MMV_MAX_TOKENS tokens: both in one gdn_conv launch; the window is a
 *   ring indexed by position, read through the device copy of the positions so graphs replay)
 *   o = RMSNorm(o per head) * ssm_norm * SiLU(z)                                 (norm op; on a device, when
 *       every run of the batch is a gdn_conv run, inside gdn_conv: one launch per run for the whole chain)
 *   x += W_out o
 * The conv and the recurrence run once per run of consecutive tokens of one sequence, each on that
 * sequence's state; with snapshots on (a drafting context) the ops also write the state after each of
 * the run's last n_ring tokens into the cache's ring, which is what makes rollback exact. */
#include "forward.h"

/* Whether every run of consecutive tokens of one sequence has at most MMV_MAX_TOKENS tokens: a decode batch,
 * each of whose runs takes gdn_conv where the backend has it. */
static int gdn_runs_short(const struct infer_ctx *c, int32_t n_tokens) {
    int32_t run = 0;
    for (int32_t t = 0; t < n_tokens; t++) {
        run = t > 0 && c->seq[t] == c->seq[t - 1] ? run + 1 : 1;
        if (run > MMV_MAX_TOKENS) return 0;
    }
    return 1;
}

infer_status layer_gdn(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct infer_model *m = c->m;
    const struct model_layer *L = &m->layers[il];
    const struct arch_hparams *hp = &m->hp;
    struct infer_backend *be = c->be;
    const int32_t d = (int32_t)hp->d_state, n_group = (int32_t)hp->n_group, n_vhead = (int32_t)hp->dt_rank;
    const int64_t kd = (int64_t)n_group * d, vd = hp->d_inner, cd = 2 * kd + vd, n_embd = hp->n_embd;
    const int fused_ba = L->ssm_ba != NULL;
    struct kv_cache *kv = c->kv;
    int32_t xq_type = -2;

    TRY(forward_norm_in(c, c->x, L->attn_norm, c->xn, n_embd, n_tokens, L->ssm_qkv, &xq_type));
    /* the products of n, one launch at decode (forward_matmuls). Beta rows then alpha rows share one (T, 2 Hv)
     * buffer: two products written side by side would need a strided output, so each goes to its own half,
     * tokens packed */
    const struct forward_product in[4] = {
        {.w = L->ssm_qkv, .y = c->g_qkv, .epilogue = MMV_PLAIN},
        {.w = L->ssm_gate, .y = c->g_z, .epilogue = MMV_PLAIN},
        {.w = fused_ba ? L->ssm_ba : L->ssm_beta, .y = c->g_ab, .epilogue = MMV_PLAIN},
        {.w = L->ssm_alpha, .y = c->g_ab + (size_t)n_tokens * n_vhead, .epilogue = MMV_PLAIN},
    };
    TRY(forward_matmuls(c, in, fused_ba ? 3 : 4, c->xn, n_tokens, &xq_type));
    /* the output norm inside gdn_conv only when every run goes there: a batch mixing runs keeps the one norm launch
     * over all its rows (the CPU always does) */
    const int norm_in_conv = be->ops->gdn_conv && c->gdn_done && gdn_runs_short(c, n_tokens);
    for (int32_t t0 = 0, t1; t0 < n_tokens; t0 = t1) {
        for (t1 = t0 + 1; t1 < n_tokens && c->seq[t1] == c->seq[t0]; t1++) {}
        const int32_t s = c->seq[t0], n = t1 - t0, snap_from = n > kv->n_ring ? n - kv->n_ring : 0;
        /* the ring slot of the run's first token rather than its position: the kernels only take it modulo the
         * ring, and so a decode step's arguments repeat and its graph replays (forward_graph_key) */
        const int32_t slot0 = kv->n_ring > 0 ? c->pos[t0] % kv->n_ring : c->pos[t0];
        const int32_t *pos = c->dpos + t0; /* backend memory: a replayed graph reads each step's position */
        struct ssm_conv_args ca = {.x = c->g_qkv + (size_t)t0 * cd, .state = kv_cache_conv(kv, il, s),
                                   .w = L->ssm_conv1d->data, .y = c->g_conv + (size_t)t0 * cd, .n_ch = cd,
                                   .x_stride = cd, .n_tokens = n, .d_conv = (int32_t)hp->d_conv,
                                   .snap = kv_cache_ring_conv(kv, il, s), .snap_stride = kv_cache_ring_stride_conv(kv),
                                   .snap_ring = kv->n_ring, .snap_pos0 = slot0, .snap_from = snap_from, .pos = pos};
        const float *qc = c->g_conv + (size_t)t0 * cd;
        const float *bp, *ap;
        int64_t ab_stride;
        if (fused_ba) {
            bp = c->g_ab + (size_t)t0 * 2 * n_vhead, ap = bp + n_vhead / n_group, ab_stride = 2 * n_vhead;
        } else {
            bp = c->g_ab + (size_t)t0 * n_vhead, ap = bp + (size_t)n_tokens * n_vhead, ab_stride = n_vhead;
        }
        struct gdn_args ga = {qc, qc + kd, qc + 2 * kd, ap, bp, L->ssm_dt_bias->data, L->ssm_a->data,
                              kv_cache_ssm(kv, il, s), c->g_out + (size_t)t0 * vd, n, n_group, n_vhead, d, cd, cd,
                              ab_stride, m->arch->vheads == ARCH_VHEADS_GROUPED, fused_ba ? n_vhead / n_group : 0,
                              hp->rms_eps, GDN_AUTO, kv_cache_ring_ssm(kv, il, s), kv_cache_ring_stride_ssm(kv),
                              kv->n_ring, slot0, snap_from};
        if (be->ops->gdn_conv && n <= MMV_MAX_TOKENS) { /* a decode run: conv, recurrence (and norm) in one launch */
            struct gdn_conv_args fa = {.conv = ca, .gdn = ga};
            fa.conv.y = NULL;
            fa.gdn.q = fa.gdn.k = fa.gdn.v = NULL;
            if (norm_in_conv) {
                fa.norm_w = L->ssm_norm->data;
                fa.norm_gate = c->g_z + (size_t)t0 * vd;
                fa.norm_eps = hp->rms_eps;
                fa.norm_done = c->gdn_done;
            }
            TRY(be->ops->gdn_conv(be, &fa));
            continue;
        }
        TRY(be->ops->ssm_conv(be, &ca));
        TRY(be->ops->gdn(be, &ga));
    }
    if (!norm_in_conv) {
        const struct norm_args gn = {.x = c->g_out, .w = L->ssm_norm->data, .y = c->g_out, .n = d,
                                     .n_rows = n_tokens * n_vhead, .x_stride = d, .y_stride = d,
                                     .eps = hp->rms_eps, .gate = c->g_z, .gate_stride = d};
        TRY(be->ops->norm(be, &gn));
    }
    xq_type = -2;
    TRY(forward_matmul(c, L->ssm_out, NULL, c->g_out, n_tokens, c->x, forward_residual(c), forward_residual_epilogue(c),
                       &xq_type));
fail:
    return st;
}
