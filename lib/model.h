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

/* One CUDA device holding part of a model's weights (model_upload.c). */
struct model_gpu {
    struct infer_backend *be;    /* owned */
    void *weights;               /* owned: one buffer of be */
    struct gguf_tensor *tensors; /* (gguf->n_tensors + 1) indexed as gguf->tensors: copies of the descriptors placed
                                    here (data in weights); zeroed where not placed. The last: a tensor-parallel
                                    rank 0's rows of a tied head (model_tp.c) */
    int device;                  /* the CUDA device id */
};

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
    /* weights on devices (n_gpu_layers != 0, model_upload.c): each CUDA device gpu[k] holding part of the
     * model has one buffer of its backend (owned) with the tensors placed there, described by gpu[k].tensors,
     * copies of the file's descriptors whose data point there. Each layer (and the token table, the head)
     * points at the copies of the device that runs it; everything else at the file's descriptors, whose data
     * stay in the mapping. A CPU model: n_gpu 0, layer_gpu NULL, embd_gpu = head_gpu = -1, gpu_layer0 n_layer,
     * gpu_head 0. */
    struct model_gpu gpu[INFER_MAX_DEVICES];
    int32_t n_gpu;
    int32_t *layer_gpu;  /* (n_layer_all) index into gpu[] of the device running layer il; -1: the host */
    int32_t embd_gpu, head_gpu; /* the token lookup's and the head's (output_norm, output, MTP blocks) device */
    int32_t gpu_layer0;  /* the first trunk layer on a device (n_layer: none) */
    int gpu_head;        /* the head is on a device */
    /* the head device's own copy of token_embd (model_homes.embd_head: a tied head's, or one of its own), which the
     * MTP blocks read where the token table is on another device: their draft tokens' rows stay there. NULL: they
     * read token_embd */
    const struct gguf_tensor *mtp_embd;
    /* tensor parallelism (split_mode tensor, model_tp.c): gpu[r] holds rank r's shards (tp.h) and tp_view[r] is the
     * model as rank r sees it: its hyperparameters (its heads, its FFN columns) and layers pointing at its shards,
     * the token table and the head rank 0's. The layers above keep pointing at the file. tp_n 0: none. */
    int32_t tp_n;
    struct infer_model *tp_view[INFER_MAX_DEVICES]; /* owned by the model; a view owns nothing */
    int32_t tp_world, tp_rank0; /* the group's ranks, and gpu[0]'s rank (processes on several hosts: each its own) */
    /* matrices the CPU computes, repacked at load (model_repack.c): one buffer (owned) and the copies of their
     * descriptors (owned, type | CPU_R16, data in it) that the host's layers and the head point at */
    void *repacked;
    struct gguf_tensor *repacked_tensors;
    int64_t n_repacked;
    uint64_t repacked_bytes;
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

/* Where a load puts a model (the plan's homes, plan.c): each layer's home (n_layer_all: -1 the host, else a CUDA
 * device id), the token table's, the head's (output_norm, output; the MTP blocks are layers), and the layers
 * whose routed experts stay in host memory although their layer is on a device (NULL: none). A tied head on
 * another device than the token table gets its own copy of token_embd there, and so does an untied one with
 * embd_head (plan.c plan_embd_head: the MTP blocks read it, model.mtp_embd). */
struct model_homes {
    const int32_t *layer;
    const uint8_t *exps_host;
    int32_t embd, head;
    int embd_head;
};
/* Homes (into layer, n_layer_all) of llama.cpp's one-device rule: model_placement(n) on CUDA device `device`. */
void model_homes_one(const struct infer_model *m, int32_t n, int device, int32_t *layer, struct model_homes *h);
/* Bytes the tensors placed on CUDA device `device` take there (each rounded up to 256). */
uint64_t model_weight_bytes(const struct infer_model *m, const struct model_homes *h, int device);
/* Makes the backend of CUDA device `device` (backend_cuda_create, or a stand-in in tests). */
typedef infer_status (*model_gpu_fn)(int device, struct infer_backend **out);
/* For each device h names (in the order its layers come), a backend from make (NULL: backend_cuda_create), the
 * fit check (its placed weights plus MODEL_UPLOAD_RESERVE within its free memory, else INFER_E_OOM with both
 * numbers before any allocation), one buffer and the copies; then points the layers, the token table and the
 * head at their devices' copies and sets exps_host on the layers h keeps experts of. On failure nothing of the
 * model changes. Progress from lo to hi by bytes copied. */
infer_status model_upload(struct infer_model *m, const struct model_homes *h, model_gpu_fn make,
                          const infer_model_params *p, float lo, float hi);
/* Frees a device's backend, buffer and table (a model_gpu not yet in a model, or one of a model's). */
void model_gpu_free(struct model_gpu *g);
/* Repacks the matrices the host computes (the layers whose home is the host, the head when it is there) into the CPU
 * backend's faster layout where it has one (mm_r16.c), points those layers and the head at the copies and releases
 * the file's pages of the originals. Nothing to repack: INFER_OK, nothing changes; on failure nothing changes. */
infer_status model_repack(struct infer_model *m);
/* Frees what model_repack made (model_free calls it). */
void model_repack_free(struct infer_model *m);
/* Frees what model_upload placed (model_free calls it). */
void model_upload_free(struct infer_model *m);
/* Tensor parallelism over the n CUDA devices devs (rank order): every trunk layer's shards (tp.h) uploaded to its
 * rank's device, the token table and the head to rank 0's, each device's fit checked before any allocation (else
 * INFER_E_OOM with both numbers), and the ranks' views (tp_view). The MTP blocks stay in the file (drafting on the
 * GPU is refused). On failure nothing of the model changes. Progress from lo to hi. */
infer_status model_upload_tp(struct infer_model *m, const int *devs, int32_t n, model_gpu_fn make,
                             const infer_model_params *p, float lo, float hi);
/* The same for this process's n devices as ranks rank0 .. rank0 + n - 1 of a group of world ranks over several
 * processes, joined through the group's id (backend.h; NULL: this process's devices are the whole group). */
infer_status model_upload_tp_ranks(struct infer_model *m, const int *devs, int32_t n, int32_t world, int32_t rank0,
                                   const uint8_t *id, model_gpu_fn make, const infer_model_params *p, float lo,
                                   float hi);

#endif
