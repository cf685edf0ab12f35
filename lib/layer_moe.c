/* layer_moe: the routed-expert FFN block of qwen3moe (llama.cpp build_moe_ffn with softmax gating,
 * norm_w = true, no weight scale, no shared expert):
 *   n = RMSNorm(x) * ffn_norm;  p = softmax(W_router n) over all experts;  top-k experts by p
 *   w = p[top-k] / sum(p[top-k]);  x += sum_k w_k down_e(silu(gate_e n) * up_e n)
 * The router is F32 (never quantised), so its product takes f32 n. */
#include "forward.h"

infer_status layer_moe(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct model_layer *L = &c->m->layers[il];
    const struct arch_hparams *hp = &c->m->hp;
    const int64_t n_embd = hp->n_embd;
    struct infer_backend *be = c->be;
    int32_t xq_type = -2;
    TRY(forward_norm(c, c->x, L->ffn_norm, c->xn, n_embd, n_tokens));
    TRY(forward_matmul(c, L->ffn_gate_inp, NULL, c->xn, n_tokens, c->router, NULL, MMV_PLAIN, &xq_type));
    struct moe_route_args r = {c->router, c->moe_ids, c->moe_w, n_tokens, (int32_t)hp->n_expert,
                               (int32_t)hp->n_expert_used, 1};
    TRY(be->ops->moe_route(be, &r));
    struct moe_ffn_args f = {L->ffn_gate_exps->type, L->ffn_down_exps->type, L->ffn_gate_exps->data,
                             L->ffn_up_exps->data, L->ffn_down_exps->data, c->xn, c->moe_ids, c->moe_w, c->h, n_embd,
                             hp->n_ff_exp, (int32_t)hp->n_expert, (int32_t)hp->n_expert_used, n_tokens};
    TRY(be->ops->moe_ffn(be, &f));
    TRY(be->ops->sync(be));
    /* note: a host loop (CPU backend memory); a device backend needs an add op here */
    for (size_t i = 0; i < (size_t)n_tokens * (size_t)n_embd; i++) c->x[i] += c->h[i];
fail:
    return st;
}
