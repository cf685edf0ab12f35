/* forward: embedding lookup, the layer stack and the LM head, as llama.cpp's llm_build_llama /
 * llm_build_qwen3 / llm_build_qwen3moe graphs compute them (see forward.h for the context).
 *
 * Every matrix product goes through forward_matmul: the input is quantised once into the backend's
 * activation type for that weight type (Q8_K for K-quants, Q8_0 for Q8_0/Q4_0/IQ4_NL, f32 for float
 * weights) as ggml's CPU mul_mat does, then mmv (n_tokens <= MMV_MAX_TOKENS) or mm runs. The head
 * only runs over the rows that asked for logits (llama.cpp's output selection), gathered into xn.
 */
#include <string.h>

#include "forward.h"

infer_status forward_matmul(struct infer_ctx *c, const struct gguf_tensor *w, const struct gguf_tensor *w2,
                            const float *x, int32_t n_tokens, float *y, const float *add, int32_t epilogue,
                            int32_t *xq_type) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    const int32_t at = be->ops->mmv_act_type(w->type);
    if (at >= 0 && *xq_type != at) {
        struct quantize_args qa = {at, x, c->xq, n_in, n_tokens, n_in};
        TRY(be->ops->quantize(be, &qa));
        *xq_type = at;
    }
    const void *xq = at >= 0 ? c->xq : NULL;
    if (n_tokens <= MMV_MAX_TOKENS) {
        struct mmv_args a = {w->type, w->data, w2 ? w2->data : NULL, n_in, n_out, n_tokens, xq, x, y, add, epilogue, 0};
        TRY(be->ops->mmv(be, &a));
    } else {
        struct mm_args a = {w->type, w->data, w2 ? w2->data : NULL, n_in, n_out, n_tokens, xq, x, y, add, epilogue, 0};
        TRY(be->ops->mm(be, &a));
    }
fail:
    return st;
}

infer_status forward_norm(struct infer_ctx *c, const float *x, const struct gguf_tensor *w, float *y, int64_t n,
                          int32_t n_rows) {
    struct norm_args a = {x, w->data, y, n, n_rows, n, n, c->m->hp.rms_eps, NULL, 0};
    return c->be->ops->norm(c->be, &a);
}

infer_status forward_embed(struct infer_ctx *c, const struct gguf_tensor *e, const int32_t *tokens,
                           int32_t n_tokens) {
    struct embed_args a = {e->type, e->data, c->m->hp.n_embd, e->ne[1], tokens, n_tokens, c->x};
    return c->be->ops->embed(c->be, &a);
}

infer_status forward_add(struct infer_ctx *c, float *y, const float *x2, int64_t n, int32_t n_rows) {
    struct act_args a = {ACT_ADD, y, x2, y, n, n_rows, 0, 0};
    return c->be->ops->act(c->be, &a);
}

infer_status forward_ffn(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    const struct model_layer *L = &c->m->layers[il];
    if (L->ffn_gate_exps) return layer_moe(c, il, n_tokens);
    return layer_ffn(c, il, n_tokens);
}

infer_status forward_run(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, int32_t n_out) {
    infer_status st = INFER_OK;
    const struct infer_model *m = c->m;
    const int64_t n_embd = m->hp.n_embd;
    TRY(forward_embed(c, m->token_embd, tokens, n_tokens));
    for (int32_t il = 0; il < (int32_t)m->hp.n_layer; il++) {
        if (m->layers[il].kind == ARCH_LAYER_GDN)
            TRY(layer_gdn(c, il, n_tokens));
        else
            TRY(layer_attn(c, il, n_tokens));
        TRY(forward_ffn(c, il, n_tokens));
    }
    /* the head over the asked rows only: gather, norm in place, project. A drafting context keeps
     * every token's normed hidden state (the MTP block's input) and gathers from it. */
    const float *src = c->x;
    if (c->hid) {
        TRY(forward_norm(c, c->x, m->output_norm, c->hid, n_embd, n_tokens));
        src = c->hid;
    }
    for (int32_t t = 0; t < n_tokens; t++)
        if (c->out_row[t] >= 0)
            memcpy(c->xn + (size_t)c->out_row[t] * n_embd, src + (size_t)t * n_embd, (size_t)n_embd * sizeof(float));
    if (n_out > 0) {
        int32_t xq_type = -2;
        if (!c->hid) TRY(forward_norm(c, c->xn, m->output_norm, c->xn, n_embd, n_out));
        TRY(forward_matmul(c, m->output, NULL, c->xn, n_out, c->logits, NULL, MMV_PLAIN, &xq_type));
    }
    TRY(c->be->ops->sync(c->be));
fail:
    return st;
}
