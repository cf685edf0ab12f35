/* layer_mtp: the MTP (nextn) block of the hybrid archs, which predicts the token after next
 * (docs/qwen35.md §6.1). For a token x at position p and the target's post-output_norm
 * hidden state h of position p - 1:
 *   u = W_eh [RMSNorm(E[x]) * enorm | RMSNorm(h) * hnorm]          (embedding half first)
 *   one full-attention decoder block at layer index n_layer, with its own KV cells (position p)
 *   y = RMSNorm(u') * shared_head_norm (or output_norm);  logits = output y  (or shared_head_head)
 * y is kept in c->mtp_hid: it is the h of the next draft step. The block reuses the context's
 * scratch (x, xn, ...), so it runs after the target's forward pass is done with them. */
#include <string.h>

#include "forward.h"

infer_status layer_mtp(struct infer_ctx *c, const int32_t *tokens, const float *h, int32_t n_tokens, int32_t n_out,
                       float *out) {
    infer_status st = INFER_OK;
    const struct infer_model *m = c->m;
    const int32_t il = (int32_t)m->hp.n_layer;
    const struct model_layer *L = &m->layers[il];
    const int64_t n_embd = m->hp.n_embd;
    struct infer_backend *be = c->be;
    int32_t xq_type = -2;

    TRY(forward_embed(c, L->nextn_embed_tokens ? L->nextn_embed_tokens : m->token_embd, tokens, n_tokens));
    struct norm_args ne = {c->x, L->nextn_enorm->data, c->mtp_in, n_embd, n_tokens, n_embd, 2 * n_embd,
                           m->hp.rms_eps, NULL, 0};
    TRY(be->ops->norm(be, &ne));
    struct norm_args nh = {h, L->nextn_hnorm->data, c->mtp_in + n_embd, n_embd, n_tokens, n_embd, 2 * n_embd,
                           m->hp.rms_eps, NULL, 0};
    TRY(be->ops->norm(be, &nh));
    TRY(forward_matmul(c, L->nextn_eh_proj, NULL, c->mtp_in, n_tokens, c->x, NULL, MMV_PLAIN, &xq_type));
    TRY(layer_attn(c, il, n_tokens));
    TRY(forward_ffn(c, il, n_tokens));
    const struct gguf_tensor *hn = L->nextn_shared_head_norm ? L->nextn_shared_head_norm : m->output_norm;
    TRY(forward_norm(c, c->x, hn, c->mtp_hid, n_embd, n_tokens));
    if (n_out > 0) {
        for (int32_t t = 0; t < n_tokens; t++)
            if (c->out_row[t] >= 0)
                memcpy(c->xn + (size_t)c->out_row[t] * n_embd, c->mtp_hid + (size_t)t * n_embd,
                       (size_t)n_embd * sizeof(float));
        const struct gguf_tensor *head = L->nextn_shared_head_head ? L->nextn_shared_head_head : m->output;
        xq_type = -2;
        TRY(forward_matmul(c, head, NULL, c->xn, n_out, out, NULL, MMV_PLAIN, &xq_type));
    }
    TRY(be->ops->sync(be));
fail:
    return st;
}
