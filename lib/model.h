/* model: a parsed GGUF file bound to its architecture row.
 *
 * model_bind reads and type-checks the hyperparameters (the arch_keys table), checks that they are
 * consistent, then finds every tensor arch_tensors() lists and checks its exact shape and that its type
 * is one libinfer computes with; tensors the architecture does not know are refused (as llama.cpp
 * does). The result holds borrowed pointers into the gguf_file (which it owns) for the forward pass.
 */
#ifndef INFER_MODEL_H
#define INFER_MODEL_H

#include "arch.h"
#include "backend.h"
#include "gguf.h"
#include "tokenizer.h"

/* Weights of one block; NULL where the layer kind / architecture has none. */
struct model_layer {
    enum arch_layer_kind kind;
    int is_mtp;
    const struct gguf_tensor *attn_norm, *post_attn_norm, *ffn_norm; /* ffn_norm or post_attention_norm */
    /* attention */
    const struct gguf_tensor *attn_q, *attn_k, *attn_v, *attn_out, *attn_q_norm, *attn_k_norm;
    /* gated deltanet */
    const struct gguf_tensor *ssm_qkv, *ssm_gate, *ssm_beta, *ssm_alpha, *ssm_ba, *ssm_conv1d, *ssm_dt_bias,
        *ssm_a, *ssm_norm, *ssm_out;
    /* FFN: dense, routed experts, shared expert */
    const struct gguf_tensor *ffn_gate, *ffn_up, *ffn_down;
    const struct gguf_tensor *ffn_gate_inp, *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps;
    const struct gguf_tensor *ffn_gate_inp_shexp, *ffn_gate_shexp, *ffn_up_shexp, *ffn_down_shexp;
    /* MTP (nextn) extras */
    const struct gguf_tensor *nextn_eh_proj, *nextn_enorm, *nextn_hnorm, *nextn_shared_head_norm,
        *nextn_embed_tokens, *nextn_shared_head_head;
};

struct infer_model {
    struct gguf_file *gguf; /* owned */
    const struct arch_row *arch;
    struct arch_hparams hp;
    const struct gguf_tensor *token_embd, *output_norm, *output; /* output == token_embd when tied */
    const struct gguf_tensor *rope_freqs;                        /* llama only; may be NULL */
    int tied;
    struct model_layer *layers; /* (hp.n_layer_all): trunk, then MTP blocks */
    struct tokenizer *tok;      /* owned; from the tokenizer.ggml.* metadata */
    /* weights on a device (n_gpu_layers > 0): every tensor's data points into dev_weights, memory of
     * be (owned), CUDA device `device`; NULL / -1 for a CPU model, whose data points into the mapping */
    struct infer_backend *be;
    void *dev_weights;
    int device;
};

/* Binds f (taken: freed on failure too) into a model. Gives *out. */
infer_status model_bind(struct gguf_file *f, struct infer_model **out);
/* Frees the model and its gguf_file. NULL is a no-op. */
void model_free(struct infer_model *m);
/* Reads and validates the hyperparameters of f for row a (used by model_bind; exposed for tools). */
infer_status model_read_hparams(const struct gguf_file *f, const struct arch_row *a, struct arch_hparams *hp);

/* Bytes the weights take on a device (each tensor rounded up to 256). */
uint64_t model_weight_bytes(const struct infer_model *m);
/* Copies every tensor into memory of be (device `device`) and points the tensors there; on success the
 * model owns be. INFER_E_OOM with the numbers when the weights do not fit. Progress from lo to hi. */
infer_status model_upload(struct infer_model *m, struct infer_backend *be, int device, const infer_model_params *p,
                          float lo, float hi);

#endif
