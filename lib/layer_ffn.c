/* layer_ffn: the dense SwiGLU block, x += down(silu(gate(n)) * up(n)), n = RMSNorm(x) * ffn_norm.
 * gate and up run as one fused product (MMV_SWIGLU) over one quantised copy of n; down adds the
 * residual in its epilogue (MMV_ADD), so the block is three ops plus two quantisations. gate and up
 * share one type (checked at context creation). The pre-FFN norm is ffn_norm, or post_attention_norm in
 * the hybrid archs. */
#include "forward.h"

infer_status layer_ffn(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const struct model_layer *L = &c->m->layers[il];
    const int64_t n_embd = c->m->hp.n_embd;
    int32_t xq_type = -2;
    TRY(forward_norm_in(c, c->x, forward_ffn_norm(L), c->xn, n_embd, n_tokens, L->ffn_gate, &xq_type));
    TRY(forward_matmul(c, L->ffn_gate, L->ffn_up, c->xn, n_tokens, c->h, NULL, MMV_SWIGLU, &xq_type));
    xq_type = -2;
    TRY(forward_matmul(c, L->ffn_down, NULL, c->h, n_tokens, c->x, forward_residual(c), forward_residual_epilogue(c),
                       &xq_type));
fail:
    return st;
}
