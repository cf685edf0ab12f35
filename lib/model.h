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
    int exps_host; /* the layer is on the device but its routed experts stay in host memory (expert offload) */
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
    /* weights on a device (n_gpu_layers != 0, model_upload.c): the tensors placed there are copied into
     * dev_weights, memory of be (owned) on CUDA device `device`, and described by dev_tensors, copies of the
     * file's descriptors whose data points there. The layers (and the head) on the device point at those
     * copies; everything else at the file's descriptors, whose data stays in the mapping.
     * A CPU model: be, dev_weights, dev_tensors NULL, device -1, gpu_layer0 n_layer, gpu_head 0. */
    struct infer_backend *be;
    void *dev_weights;
    struct gguf_tensor *dev_tensors; /* (gguf->n_tensors) indexed as gguf->tensors; zeroed where not uploaded */
    int device;
    int32_t gpu_layer0; /* the first trunk layer on the device (n_layer: none) */
    int gpu_head;       /* token_embd, output_norm, output and the MTP blocks on the device too */
};

/* Binds f (taken: freed on failure too) into a model. Gives *out. */
infer_status model_bind(struct gguf_file *f, struct infer_model **out);
/* Frees the model and its gguf_file. NULL is a no-op. */
void model_free(struct infer_model *m);
/* Reads and validates the hyperparameters of f for row a (used by model_bind; exposed for tools). */
infer_status model_read_hparams(const struct gguf_file *f, const struct arch_row *a, struct arch_hparams *hp);

/* The slot of layer L that holds the tensor of a per-layer role (arch.h), or NULL for a global role. */
const struct gguf_tensor **model_layer_slot(struct model_layer *L, enum arch_role role);

/* Where n_gpu_layers = n puts a model of hp, llama.cpp's rule: the last min(n, n_layer) trunk layers on the
 * device, and with n > n_layer the head too (output_norm, output, the MTP blocks; and here the token table,
 * so the whole pass runs there); n < 0 means everything. *layer0: the first trunk layer on the device
 * (n_layer: none); *head: whether the head is there. */
void model_placement(const struct arch_hparams *hp, int32_t n, int32_t *layer0, int *head);
#define MODEL_UPLOAD_RESERVE (UINT64_C(256) << 20) /* device memory the fit check keeps free for the contexts */
/* The routed-expert tensors (ffn_{gate,up,down}_exps): what expert offload keeps in host memory. */
int model_is_expert_tensor(const char *name);
/* Bytes the tensors of a placement take on a device (each rounded up to 256): the layers from layer0 and the
 * head as model_placement says, less the routed experts of the layers flagged in exps_host (n_layer_all
 * flags; NULL: none), which stay in host memory. */
uint64_t model_weight_bytes(const struct infer_model *m, int32_t layer0, int head, const uint8_t *exps_host);
/* Copies the tensors of the placement (layer0, head, exps_host as model_weight_bytes) into memory of be
 * (device `device`) and points the layers (and head) placed there at device copies of their descriptors;
 * a flagged layer's experts keep the file's descriptors (the mapping) and the layer gets exps_host = 1. On
 * success the model owns be. INFER_E_OOM with both numbers, before any allocation, when they do not fit.
 * Progress from lo to hi. */
infer_status model_upload(struct infer_model *m, struct infer_backend *be, int device, int32_t layer0, int head,
                          const uint8_t *exps_host, const infer_model_params *p, float lo, float hi);

#endif
