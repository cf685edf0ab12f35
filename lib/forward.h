/* forward: the CPU/backend forward pass of the attention-only architectures (llama, qwen3,
 * qwen3moe) and the context struct it runs in.
 *
 * Why one struct: infer_ctx (context.c, the public API) owns the backend, the KV cache and every
 * scratch buffer, all sized at creation for n_batch tokens, so a decode never allocates. The layer
 * files (layer_attn.c, layer_ffn.c, layer_moe.c) each transform the residual stream x in place;
 * forward.c strings them together between the embedding lookup and the LM head.
 */
#ifndef INFER_FORWARD_H
#define INFER_FORWARD_H

#include "backend.h"
#include "cache.h"
#include "model.h"

struct infer_ctx {
    const struct infer_model *m;
    struct infer_backend *be;
    struct kv_cache *kv;
    int32_t n_ctx, n_batch, n_seq;
    /* scratch, T = n_batch tokens; all from be->ops->alloc */
    float *x;          /* (T, n_embd) residual stream */
    float *xn;         /* (T, max(n_embd, n_head*head_dim)) normed input of a block; gathered rows for the head */
    float *q;          /* (T, n_head * head_dim); later the attention output */
    float *k, *v;      /* (T, n_head_kv * head_dim) */
    float *att;        /* (T, n_head * head_dim) */
    float *h;          /* (T, n_ff) dense FFN hidden; (T, n_embd) MoE output */
    void *xq;          /* (T, max n_in) activations in the backend's 8-bit types (<= 4 bytes per value) */
    float *router;     /* (T, n_expert) MoE router logits */
    int32_t *moe_ids;  /* (T, n_expert_used) */
    float *moe_w;      /* (T, n_expert_used) */
    float *logits;     /* (T, n_vocab): rows of the tokens that asked, packed */
    /* per batch (host) */
    int32_t *pos, *seq;   /* (T) the position and sequence of each token */
    int32_t *out_row;     /* (T) row of token i in logits, -1 if not asked */
    int32_t *next;        /* (n_seq) scratch for validating positions */
    int32_t n_tokens;     /* of the last successful batch; 0 before any */
    int32_t xq_type;      /* activation type currently in xq for xn / q (-2: stale) */
};

/* Runs the layers over tokens already validated into c->pos / c->seq / c->out_row (n_out rows asked),
 * writing K/V cells at those positions. The caller updates the sequence lengths after success. */
infer_status forward_run(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, int32_t n_out);

/* y = epilogue(W x): quantises x (n_tokens rows of W's n_in) into c->xq unless *xq_type already says it
 * holds x in W's activation type (pass a variable set to -2 after x changes), then mmv or mm. */
infer_status forward_matmul(struct infer_ctx *c, const struct gguf_tensor *w, const struct gguf_tensor *w2,
                            const float *x, int32_t n_tokens, float *y, const float *add, int32_t epilogue,
                            int32_t *xq_type);
/* RMSNorm of n_rows rows of n floats with weight w (an F32 tensor). */
infer_status forward_norm(struct infer_ctx *c, const float *x, const struct gguf_tensor *w, float *y, int64_t n,
                          int32_t n_rows);

infer_status layer_attn(struct infer_ctx *c, int32_t il, int32_t n_tokens);
infer_status layer_ffn(struct infer_ctx *c, int32_t il, int32_t n_tokens);
infer_status layer_moe(struct infer_ctx *c, int32_t il, int32_t n_tokens);

#endif
