/* layer_attn: the self-attention block of llama / qwen3 / qwen3moe and the gated full-attention
 * block of the hybrid archs (and their MTP block):
 *   n = RMSNorm(x) * attn_norm;  q, k, v = Wq n, Wk n, Wv n   (one launch at decode: forward_matmuls)
 *   gated (qwen35*, qwen3next): Wq n packs [query | gate] per head (2 * head_dim rows each)
 *   qwen3 / gated: q, k = per-head RMSNorm(q) * attn_q_norm, (k) * attn_k_norm
 *   q, k = RoPE(q, k) over the first n_rot dims at each token's position (llama: adjacent pairs;
 *   others NeoX halves; qwen35's IMROPE is NeoX for text, docs/qwen35.md §4.1)
 *   K/V cells at those positions <- k, v (f16 or Q8_0, the context's kv type);  o = softmax(q K^T / sqrt(head_dim)) V
 *   gated: o *= sigmoid(gate)
 *   x += Wo o   (residual fused in the epilogue)
 * Every token's K/V is stored before any attention runs, so a token attends to the earlier tokens
 * of its own batch through the cache. Attention runs once per run of consecutive tokens of one
 * sequence (the op attends over one sequence's cells), so sequences in one batch never mix. */
#include <math.h>

#include "forward.h"

/* cells pos[t] of seq[t] <- rows of src (n_tokens, row) in the cell type, one kv_store per run of a sequence */
static infer_status layer_attn_store(struct infer_ctx *c, int32_t il, const float *src, int is_v, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const int64_t row = c->kv->row;
    for (int32_t t0 = 0, t1; t0 < n_tokens; t0 = t1) {
        for (t1 = t0 + 1; t1 < n_tokens && c->seq[t1] == c->seq[t0]; t1++) {}
        void *cells = is_v ? kv_cache_v(c->kv, il, c->seq[t0]) : kv_cache_k(c->kv, il, c->seq[t0]);
        struct kv_store_args a = {src + (size_t)t0 * (size_t)row, cells, c->dpos + t0, row, row, row, t1 - t0, c->kv->type,
                                  is_v ? c->kv->rot_v : c->kv->rot_k};
        TRY(c->be->ops->kv_store(c->be, &a));
    }
fail:
    return st;
}

infer_status layer_attn(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct infer_model *m = c->m;
    const struct model_layer *L = &m->layers[il];
    const struct arch_hparams *hp = &m->hp;
    const int32_t hd = (int32_t)hp->head_dim, nh = (int32_t)hp->n_head, nkv = (int32_t)hp->n_head_kv;
    const int64_t n_embd = hp->n_embd, nq = (int64_t)nh * hd, nk = (int64_t)nkv * hd;
    struct infer_backend *be = c->be;
    int32_t xq_type = -2;

    const int gated = (m->arch->flags & ARCH_F_ATTN_GATE) != 0;
    TRY(forward_norm_in(c, c->x, L->attn_norm, c->xn, n_embd, n_tokens, L->attn_q, &xq_type));
    const struct forward_product qkv[3] = { /* one launch at decode (forward_matmuls) */
        {.w = L->attn_q, .y = gated ? c->qg : c->q, .epilogue = MMV_PLAIN},
        {.w = L->attn_k, .y = c->k, .epilogue = MMV_PLAIN},
        {.w = L->attn_v, .y = c->v, .epilogue = MMV_PLAIN},
    };
    TRY(forward_matmuls(c, qkv, 3, c->xn, n_tokens, &xq_type));
    const int32_t mode = m->arch->rope == ARCH_ROPE_NORM ? ROPE_NORMAL : ROPE_NEOX;
    struct rope_args rq = {c->q, c->dpos, n_tokens, nh, hd, (int32_t)hp->n_rot, nq, hd, mode, hp->rope_freq_base, 1.0f};
    struct rope_args rk = {c->k, c->dpos, n_tokens, nkv, hd, (int32_t)hp->n_rot, nk, hd, mode, hp->rope_freq_base, 1.0f};
    if (L->attn_q_norm && be->ops->rope_norm) { /* QK-norm and RoPE in one pass per head */
        struct rope_norm_args fq = {rq, gated ? c->qg : c->q, gated ? 2 * nq : nq, gated ? 2 * hd : hd,
                                    L->attn_q_norm->data, hp->rms_eps};
        TRY(be->ops->rope_norm(be, &fq));
        struct rope_norm_args fk = {rk, c->k, nk, hd, L->attn_k_norm->data, hp->rms_eps};
        TRY(be->ops->rope_norm(be, &fk));
    } else {
        if (L->attn_q_norm) {
            /* gated: the norm also packs the query halves of qg into q */
            struct norm_args nq_ = {gated ? c->qg : c->q, L->attn_q_norm->data, c->q, hd, n_tokens * nh,
                                    gated ? 2 * hd : hd, hd, hp->rms_eps, NULL, 0};
            TRY(be->ops->norm(be, &nq_));
            TRY(forward_norm(c, c->k, L->attn_k_norm, c->k, hd, n_tokens * nkv));
        }
        TRY(be->ops->rope(be, &rq));
        TRY(be->ops->rope(be, &rk));
    }
    TRY(layer_attn_store(c, il, c->k, 0, n_tokens));
    TRY(layer_attn_store(c, il, c->v, 1, n_tokens));

    for (int32_t t0 = 0, t1; t0 < n_tokens; t0 = t1) {
        for (t1 = t0 + 1; t1 < n_tokens && c->seq[t1] == c->seq[t0]; t1++) {}
        /* n_kv is the sequence's capacity, not its length: each query stops at its own position (read
         * from dpos), so the arguments do not change from one decode step to the next (CUDA graphs) */
        const int32_t s = c->seq[t0];
        struct attn_args a = {c->q + (size_t)t0 * nq, kv_cache_k(c->kv, il, s), kv_cache_v(c->kv, il, s),
                              c->att + (size_t)t0 * nq, c->dpos + t0, t1 - t0, nh, nkv, hd, c->n_ctx, nq, nk, nq,
                              1.0f / sqrtf((float)hd), t1 - t0 <= ATTN_SPLIT_TOKENS ? c->attn_scratch : NULL, 0,
                              c->kv->type, c->kv->rot_k, c->kv->rot_v};
        TRY(be->ops->attn(be, &a));
    }
    if (gated) {
        struct act_args g = {ACT_SIGMOID_MUL, c->att, c->qg + hd, c->att, hd, n_tokens * nh, 0, 2 * hd};
        TRY(be->ops->act(be, &g));
    }
    xq_type = -2;
    TRY(forward_matmul(c, L->attn_out, NULL, c->att, n_tokens, c->x, forward_residual(c), forward_residual_epilogue(c),
                       &xq_type));
fail:
    return st;
}
