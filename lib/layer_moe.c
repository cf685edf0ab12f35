/* layer_moe: the routed-expert FFN block of qwen3moe, qwen35moe and qwen3next (llama.cpp build_moe_ffn
 * with softmax gating, norm_w = true, no weight scale), plus the sigmoid-gated shared expert of the
 * hybrid archs (docs/qwen35.md §4.5):
 *   n = RMSNorm(x) * ffn_norm (post_attention_norm);  p = softmax(W_router n) over all experts
 *   w = p[top-k] / sum(p[top-k]);  x += sum_k w_k down_e(silu(gate_e n) * up_e n)
 *   shared expert: s = sigmoid(w_sg . n) * down_s(silu(gate_s n) * up_s n)
 *   x += moe + s      (in llama.cpp's order: the gate scales the down product's output, which is
 *                      added to the routed sum before the residual — scaling the hidden activations
 *                      instead would change their 8-bit quantisation)
 * The routers are F32 (never quantised), so they take f32 n. The products of n (router, shared gate, shared
 * gate / up) run together in the routing step, one launch at decode (forward_matmuls); the shared expert's down
 * product waits for the routed experts, which leave sh / shg alone. */
#include "forward.h"

/* c->xn = sigmoid(w_sg . n) * shared expert(n), from c->shg = w_sg . n and c->sh = silu(gate_s n) * up_s n
 * (layer_moe_route's); xn is overwritten (the down product lands there). */
static infer_status layer_moe_shared_into_xn(struct infer_ctx *c, const struct model_layer *L, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const int64_t n_embd = c->m->hp.n_embd;
    int32_t xq_type = -2;
    TRY(forward_matmul(c, L->ffn_down_shexp, NULL, c->sh, n_tokens, c->xn, NULL, MMV_PLAIN, &xq_type));
    struct act_args g = {ACT_SIGMOID_MUL_ROW, c->xn, c->shg, c->xn, n_embd, n_tokens, 0, 1};
    TRY(c->be->ops->act(c->be, &g));
fail:
    return st;
}

/* c->xn = RMSNorm(x) * ffn_norm; c->moe_ids / c->moe_w = the top-k experts of each token and their weights; with
 * a shared expert also c->shg = w_sg . n and c->sh = silu(gate_s n) * up_s n. */
static infer_status layer_moe_route(struct infer_ctx *c, const struct model_layer *L, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct arch_hparams *hp = &c->m->hp;
    int32_t xq_type = -2;
    TRY(forward_norm(c, c->x, forward_ffn_norm(L), c->xn, hp->n_embd, n_tokens));
    const struct forward_product in[3] = {
        {.w = L->ffn_gate_inp, .y = c->router, .epilogue = MMV_PLAIN},
        {.w = L->ffn_gate_inp_shexp, .y = c->shg, .epilogue = MMV_PLAIN},
        {.w = L->ffn_gate_shexp, .w2 = L->ffn_up_shexp, .y = c->sh, .epilogue = MMV_SWIGLU},
    };
    TRY(forward_matmuls(c, in, L->ffn_gate_shexp ? 3 : 1, c->xn, n_tokens, &xq_type));
    struct moe_route_args r = {c->router, c->moe_ids, c->moe_w, n_tokens, (int32_t)hp->n_expert,
                               (int32_t)hp->n_expert_used, 1};
    TRY(c->be->ops->moe_route(c->be, &r));
fail:
    return st;
}

/* The routed experts of L over x (n_tokens rows, routing ids / w) into y, on backend be. */
static infer_status layer_moe_experts(struct infer_ctx *c, struct infer_backend *be, const struct model_layer *L,
                                      const float *x, const int32_t *ids, const float *w, float *y, float *scratch,
                                      int32_t n_tokens) {
    const struct arch_hparams *hp = &c->m->hp;
    struct moe_ffn_args f = {.type_gate_up = L->ffn_gate_exps->type, .type_down = L->ffn_down_exps->type,
                             .gate = L->ffn_gate_exps->data, .up = L->ffn_up_exps->data,
                             .down = L->ffn_down_exps->data, .x = x, .ids = ids, .weights = w, .y = y,
                             .n_embd = hp->n_embd, .n_ff = hp->n_ff_exp, .n_expert = (int32_t)hp->n_expert,
                             .n_expert_used = (int32_t)hp->n_expert_used, .n_tokens = n_tokens, .scratch = scratch};
    return be->ops->moe_ffn(be, &f);
}

infer_status layer_moe(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct model_layer *L = &c->m->layers[il];
    const int64_t n_embd = c->m->hp.n_embd;
    TRY(layer_moe_route(c, L, n_tokens));
    TRY(layer_moe_experts(c, c->be, L, c->xn, c->moe_ids, c->moe_w, c->h, c->moe_scratch, n_tokens));
    if (L->ffn_gate_shexp) {
        TRY(layer_moe_shared_into_xn(c, L, n_tokens));
        TRY(forward_add(c, c->h, c->xn, n_embd, n_tokens));
    }
    TRY(forward_residual_add(c, c->h, n_tokens));
fail:
    return st;
}

/* Expert offload: the same sums in the same order as layer_moe (h = experts; h += shared; x += h), the
 * experts computed by the CPU backend from an exact copy of xn. */
infer_status layer_moe_offload_start(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct arch_hparams *hp = &c->m->hp;
    struct infer_backend *be = c->be;
    const size_t n_route = (size_t)n_tokens * (size_t)hp->n_expert_used;
    TRY(layer_moe_route(c, &c->m->layers[il], n_tokens));
    TRY(be->ops->stage_out(be, c->off_x, c->xn, (size_t)n_tokens * (size_t)hp->n_embd * sizeof(float)));
    TRY(be->ops->stage_out(be, c->off_ids, c->moe_ids, n_route * sizeof(int32_t)));
    TRY(be->ops->stage_out(be, c->off_w, c->moe_w, n_route * sizeof(float)));
fail:
    return st;
}

infer_status layer_moe_offload_shared(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    const struct model_layer *L = &c->m->layers[il];
    return L->ffn_gate_shexp ? layer_moe_shared_into_xn(c, L, n_tokens) : INFER_OK;
}

infer_status layer_moe_offload_host(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    return layer_moe_experts(c, c->off_be, &c->m->layers[il], c->off_x, c->off_ids, c->off_w, c->off_y, NULL,
                             n_tokens);
}

infer_status layer_moe_offload_finish(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const int64_t n_embd = c->m->hp.n_embd;
    TRY(c->be->ops->stage_in(c->be, c->h, c->off_y, (size_t)n_tokens * (size_t)n_embd * sizeof(float)));
    if (c->m->layers[il].ffn_gate_shexp) TRY(forward_add(c, c->h, c->xn, n_embd, n_tokens));
    TRY(forward_add(c, c->x, c->h, n_embd, n_tokens));
fail:
    return st;
}

uint64_t layer_moe_offload_bus(const struct infer_ctx *c, int32_t n_tokens) {
    if (!c->on_device) return 0; /* a test hook's "device" is host memory */
    const uint64_t row = (uint64_t)c->m->hp.n_embd * sizeof(float);
    const uint64_t route = (uint64_t)c->m->hp.n_expert_used * (sizeof(int32_t) + sizeof(float));
    return (uint64_t)n_tokens * (2 * row + route);
}

infer_status layer_moe_offload(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    TRY(layer_moe_offload_start(c, il, n_tokens));
    TRY(c->be->ops->sync(c->be)); /* the routing is on the host */
    TRY(layer_moe_offload_shared(c, il, n_tokens));
    TRY(layer_moe_offload_host(c, il, n_tokens));
    TRY(layer_moe_offload_finish(c, il, n_tokens));
    c->bus_bytes += layer_moe_offload_bus(c, n_tokens);
fail:
    return st;
}
