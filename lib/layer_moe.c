/* layer_moe: the routed-expert FFN block of qwen3moe, qwen35moe and qwen3next (llama.cpp build_moe_ffn
 * with softmax gating, norm_w = true, no weight scale), plus the sigmoid-gated shared expert of the
 * hybrid archs (docs/qwen35.md §4.5):
 *   n = RMSNorm(x) * ffn_norm (post_attention_norm);  p = softmax(W_router n) over all experts
 *   w = p[top-k] / sum(p[top-k]);  x += sum_k w_k down_e(silu(gate_e n) * up_e n)
 *   shared expert: s = sigmoid(w_sg . n) * down_s(silu(gate_s n) * up_s n)
 *   x += moe + s      (in llama.cpp's order: the gate scales the down product's output, which is
 *                      added to the routed sum before the residual — scaling the hidden activations
 *                      instead would change their 8-bit quantisation)
 * The routers are F32 (never quantised), so they take f32 n. */
#include "forward.h"

/* c->h += sigmoid(w_sg . n) * shared expert(n), n = c->xn (consumed: the down product lands there). */
static infer_status layer_moe_shared(struct infer_ctx *c, const struct model_layer *L, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const int64_t n_embd = c->m->hp.n_embd;
    int32_t xq_type = -2;
    TRY(forward_matmul(c, L->ffn_gate_inp_shexp, NULL, c->xn, n_tokens, c->shg, NULL, MMV_PLAIN, &xq_type));
    TRY(forward_matmul(c, L->ffn_gate_shexp, L->ffn_up_shexp, c->xn, n_tokens, c->sh, NULL, MMV_SWIGLU, &xq_type));
    xq_type = -2;
    TRY(forward_matmul(c, L->ffn_down_shexp, NULL, c->sh, n_tokens, c->xn, NULL, MMV_PLAIN, &xq_type));
    struct act_args g = {ACT_SIGMOID_MUL_ROW, c->xn, c->shg, c->xn, n_embd, n_tokens, 0, 1};
    TRY(c->be->ops->act(c->be, &g));
    TRY(forward_add(c, c->h, c->xn, n_embd, n_tokens));
fail:
    return st;
}

infer_status layer_moe(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct model_layer *L = &c->m->layers[il];
    const struct arch_hparams *hp = &c->m->hp;
    const int64_t n_embd = hp->n_embd;
    struct infer_backend *be = c->be;
    int32_t xq_type = -2;
    TRY(forward_norm(c, c->x, forward_ffn_norm(L), c->xn, n_embd, n_tokens));
    TRY(forward_matmul(c, L->ffn_gate_inp, NULL, c->xn, n_tokens, c->router, NULL, MMV_PLAIN, &xq_type));
    struct moe_route_args r = {c->router, c->moe_ids, c->moe_w, n_tokens, (int32_t)hp->n_expert,
                               (int32_t)hp->n_expert_used, 1};
    TRY(be->ops->moe_route(be, &r));
    struct moe_ffn_args f = {L->ffn_gate_exps->type, L->ffn_down_exps->type, L->ffn_gate_exps->data,
                             L->ffn_up_exps->data, L->ffn_down_exps->data, c->xn, c->moe_ids, c->moe_w, c->h, n_embd,
                             hp->n_ff_exp, (int32_t)hp->n_expert, (int32_t)hp->n_expert_used, n_tokens, c->moe_scratch};
    TRY(be->ops->moe_ffn(be, &f));
    if (L->ffn_gate_shexp) TRY(layer_moe_shared(c, L, n_tokens));
    TRY(forward_add(c, c->x, c->h, n_embd, n_tokens));
fail:
    return st;
}
