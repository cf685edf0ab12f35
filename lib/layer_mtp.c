/* layer_mtp: the MTP (nextn) block of the hybrid archs, which predicts the token after next
 * (docs/qwen35.md §6.1). For a token x at position p and the target's post-output_norm
 * hidden state h of position p - 1:
 *   u = W_eh [RMSNorm(E[x]) * enorm | RMSNorm(h) * hnorm]          (embedding half first)
 *   one full-attention decoder block at layer index n_layer, with its own KV cells (position p)
 *   y = RMSNorm(u') * shared_head_norm (or output_norm);  logits = output y  (or shared_head_head)
 * y is kept in c->mtp_hid: it is the h of the next draft step. The block reuses the context's
 * scratch (x, xn, ...), so it runs after the target's forward pass is done with them. */
#include "forward.h"
#include "quant.h"

/* The token rows where the stage lacks the token table (ctx_stage_desc.embd_away): the ids come to the host, their
 * rows are read from the file's table there (its pages fault back in if they were dropped) and go up into c->x. */
static infer_status mtp_embed_away(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    const struct infer_model *m = c->m;
    const struct gguf_tensor *e = gguf_find_tensor(m->gguf, m->token_embd->name);
    const int64_t n_embd = m->hp.n_embd;
    const size_t row = quant_row_bytes(e->type, n_embd);
    TRY(be->ops->download(be, c->mtp_ids, tokens, (size_t)n_tokens * sizeof(int32_t)));
    for (int32_t t = 0; t < n_tokens; t++) {
        if (c->mtp_ids[t] < 0 || c->mtp_ids[t] >= e->ne[1])
            return infer_fail(INFER_E_INTERNAL, "layer_mtp: token %d: expected an id in 0..%lld", c->mtp_ids[t],
                              (long long)e->ne[1] - 1);
        TRY(quant_dequant_row(e->type, (const char *)e->data + (size_t)c->mtp_ids[t] * row,
                              c->mtp_rows + (size_t)t * (size_t)n_embd, n_embd));
    }
    TRY(be->ops->upload(be, c->x, c->mtp_rows, (size_t)n_tokens * (size_t)n_embd * sizeof(float)));
    c->bus_bytes += (uint64_t)n_tokens * (sizeof(int32_t) + (uint64_t)n_embd * sizeof(float));
fail:
    return st;
}

infer_status layer_mtp_embed(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens) {
    const struct model_layer *L = &c->m->layers[c->m->hp.n_layer];
    if (c->mtp_rows) return mtp_embed_away(c, tokens, n_tokens);
    const struct gguf_tensor *table = c->m->mtp_embd ? c->m->mtp_embd : c->m->token_embd; /* the head device's */
    return forward_embed(c, L->nextn_embed_tokens ? L->nextn_embed_tokens : table, tokens, n_tokens);
}

infer_status layer_mtp_mixer(struct infer_ctx *c, const float *h, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct infer_model *m = c->m;
    const int32_t il = (int32_t)m->hp.n_layer;
    const struct model_layer *L = &m->layers[il];
    const int64_t n_embd = m->hp.n_embd;
    struct infer_backend *be = c->be;
    int32_t xq_type = -2;
    struct norm_args ne = {c->x, L->nextn_enorm->data, c->mtp_in, n_embd, n_tokens, n_embd, 2 * n_embd,
                           m->hp.rms_eps, NULL, 0};
    TRY(be->ops->norm(be, &ne));
    struct norm_args nh = {h, L->nextn_hnorm->data, c->mtp_in + n_embd, n_embd, n_tokens, n_embd, 2 * n_embd,
                           m->hp.rms_eps, NULL, 0};
    TRY(be->ops->norm(be, &nh));
    TRY(forward_matmul(c, L->nextn_eh_proj, NULL, c->mtp_in, n_tokens, c->x, NULL, MMV_PLAIN, &xq_type));
    TRY(layer_attn(c, il, n_tokens));
fail:
    return st;
}

infer_status layer_mtp_ffn(struct infer_ctx *c, int32_t n_tokens) {
    const int32_t il = (int32_t)c->m->hp.n_layer;
    if (c->off_layer && c->off_layer[il]) return layer_moe_offload(c, il, n_tokens); /* routed experts on the host */
    return forward_ffn(c, il, n_tokens);
}

infer_status layer_mtp_head(struct infer_ctx *c, int32_t n_tokens, float *out) {
    infer_status st = INFER_OK;
    const struct infer_model *m = c->m;
    const struct model_layer *L = &m->layers[m->hp.n_layer];
    const struct gguf_tensor *hn = L->nextn_shared_head_norm ? L->nextn_shared_head_norm : m->output_norm;
    TRY(forward_norm(c, c->x, hn, c->mtp_hid, m->hp.n_embd, n_tokens));
    if (out) {
        const struct gguf_tensor *head = L->nextn_shared_head_head ? L->nextn_shared_head_head : m->output;
        int32_t xq_type = -2;
        TRY(forward_matmul(c, head, NULL, c->mtp_hid, n_tokens, out, NULL, MMV_PLAIN, &xq_type));
    }
fail:
    return st;
}

infer_status layer_mtp(struct infer_ctx *c, const int32_t *tokens, const float *h, int32_t n_tokens, float *out) {
    infer_status st = INFER_OK;
    TRY(layer_mtp_embed(c, tokens, n_tokens));
    TRY(layer_mtp_mixer(c, h, n_tokens));
    TRY(layer_mtp_ffn(c, n_tokens));
    TRY(layer_mtp_head(c, n_tokens, out));
fail:
    return st;
}
