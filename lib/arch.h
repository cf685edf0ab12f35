/* arch: every supported architecture as one table row, plus the one enumerator of the tensors a
 * model of that row and those hyperparameters must hold.
 *
 * Why a table: llama, qwen3, qwen3moe, qwen3next, qwen35 and qwen35moe differ only in which layer
 * kinds they stack (attention / gated deltanet), the FFN kind (dense / MoE / MoE + shared expert) and a
 * few flags. The loader (model.c) checks a file against arch_tensors(); synth writes exactly the same
 * list, so what we write is what we check. Hyperparameter keys are a second table (arch_keys), also
 * shared by the reader and the writer. Facts: docs/qwen35.md §2-3, llama.cpp llama-arch.cpp.
 *
 * Shapes are ggml ne order: ne[0] is the contiguous (row) dimension, a matrix {IN, OUT}.
 */
#ifndef INFER_ARCH_H
#define INFER_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum arch_id { ARCH_LLAMA, ARCH_QWEN3, ARCH_QWEN3MOE, ARCH_QWEN3NEXT, ARCH_QWEN35, ARCH_QWEN35MOE, ARCH_COUNT };

enum arch_ffn { ARCH_FFN_DENSE, ARCH_FFN_MOE, ARCH_FFN_MOE_SHEXP };
enum arch_rope { ARCH_ROPE_NORM, ARCH_ROPE_NEOX, ARCH_ROPE_IMROPE };
enum arch_layer_kind { ARCH_LAYER_ATTN, ARCH_LAYER_GDN };
enum arch_vheads { ARCH_VHEADS_NONE, ARCH_VHEADS_TILED, ARCH_VHEADS_GROUPED }; /* GDN value-head order */

enum {
    ARCH_F_QK_NORM = 1 << 0,        /* per-head RMSNorm on q and k (attn_q_norm / attn_k_norm) */
    ARCH_F_ATTN_GATE = 1 << 1,      /* attn_q packs [query(hd) | gate(hd)] per head; out *= sigmoid(gate) */
    ARCH_F_PARTIAL_ROPE = 1 << 2,   /* n_rot < head_dim allowed */
    ARCH_F_TIED_OK = 1 << 3,        /* output.weight may be absent (LM head = token_embd) */
    ARCH_F_MTP = 1 << 4,            /* may carry nextn_predict_layers MTP blocks */
    ARCH_F_HYBRID = 1 << 5,         /* GDN layers with attention every full_attention_interval */
    ARCH_F_POST_ATTN_NORM = 1 << 6, /* pre-FFN norm is post_attention_norm (else ffn_norm) */
    ARCH_F_SSM_BA = 1 << 7,         /* GDN beta/alpha fused in ssm_ba (qwen3next) */
    ARCH_F_ROPE_SECTIONS = 1 << 8,  /* rope.dimension_sections required */
};

struct arch_row {
    enum arch_id id;
    const char *name;      /* general.architecture */
    enum arch_ffn ffn;
    enum arch_rope rope;
    enum arch_vheads vheads;
    uint32_t flags;        /* ARCH_F_* */
    const char *tok_pre;   /* tokenizer.ggml.pre a converter writes */
};

/* The row for general.architecture, or NULL. */
const struct arch_row *arch_find(const char *name);
const struct arch_row *arch_get(enum arch_id id);

struct arch_hparams {
    int64_t n_vocab;
    int64_t n_embd;
    int64_t n_layer;        /* trunk layers = block_count - n_layer_nextn */
    int64_t n_layer_nextn;  /* MTP blocks blk.{n_layer}.. */
    int64_t n_layer_all;    /* block_count */
    int64_t n_head, n_head_kv;
    int64_t head_dim;       /* attention.key_length */
    int64_t head_dim_v;     /* attention.value_length (must equal head_dim) */
    int64_t n_rot;
    int64_t n_ff;
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int64_t d_conv, d_state, n_group, dt_rank, d_inner; /* GDN: kernel, head dim, Hk, Hv, Hv*d_state */
    int64_t full_attention_interval;
    int64_t n_ctx_train;
    int32_t rope_sections[4];
    float rope_freq_base;
    float rms_eps;
};

/* ---- hyperparameter keys: "<arch>.<suffix>" ---- */

enum arch_key_kind {
    ARCH_KEY_U32,     /* an integer scalar */
    ARCH_KEY_U32_ARR, /* an integer scalar, or a per-layer array whose elements are all equal */
    ARCH_KEY_F32,
    ARCH_KEY_I32x4,   /* rope.dimension_sections */
};

struct arch_key {
    const char *suffix;      /* "attention.head_count" */
    enum arch_key_kind kind;
    size_t off;              /* offsetof(struct arch_hparams, field) */
    uint32_t read;           /* bit (1 << arch_id): the arch reads it */
    uint32_t required;       /* bit: the arch requires it */
    double def;              /* default when optional and absent; <0: derived (see model.c) */
};

const struct arch_key *arch_keys(int *n);
/* The layer kind of layer il (0 <= il < n_layer_all); MTP layers are attention layers. */
enum arch_layer_kind arch_layer_kind(const struct arch_row *a, const struct arch_hparams *hp, int64_t il);

/* ---- tensors ---- */

enum arch_role {
    /* global */
    ARCH_T_TOKEN_EMBD, ARCH_T_OUTPUT_NORM, ARCH_T_OUTPUT, ARCH_T_ROPE_FREQS,
    /* per layer */
    ARCH_T_ATTN_NORM, ARCH_T_ATTN_Q, ARCH_T_ATTN_K, ARCH_T_ATTN_V, ARCH_T_ATTN_OUT, ARCH_T_ATTN_Q_NORM,
    ARCH_T_ATTN_K_NORM, ARCH_T_FFN_NORM, ARCH_T_POST_ATTN_NORM,
    ARCH_T_FFN_GATE, ARCH_T_FFN_UP, ARCH_T_FFN_DOWN,
    ARCH_T_FFN_GATE_INP, ARCH_T_FFN_GATE_EXPS, ARCH_T_FFN_UP_EXPS, ARCH_T_FFN_DOWN_EXPS,
    ARCH_T_FFN_GATE_INP_SHEXP, ARCH_T_FFN_GATE_SHEXP, ARCH_T_FFN_UP_SHEXP, ARCH_T_FFN_DOWN_SHEXP,
    ARCH_T_SSM_QKV, ARCH_T_SSM_GATE, ARCH_T_SSM_BETA, ARCH_T_SSM_ALPHA, ARCH_T_SSM_BA, ARCH_T_SSM_CONV1D,
    ARCH_T_SSM_DT_BIAS, ARCH_T_SSM_A, ARCH_T_SSM_NORM, ARCH_T_SSM_OUT,
    ARCH_T_NEXTN_EH_PROJ, ARCH_T_NEXTN_ENORM, ARCH_T_NEXTN_HNORM, ARCH_T_NEXTN_SHARED_HEAD_NORM,
    ARCH_T_NEXTN_EMBED_TOKENS, ARCH_T_NEXTN_SHARED_HEAD_HEAD,
    ARCH_T_COUNT
};

/* The name suffix of a role ("attn_q.weight", "ssm_a"); global roles give the full name. */
const char *arch_role_name(enum arch_role r);
/* 1 for roles a converter writes as F32 and llama-quantize never quantises (norms, router, conv, a, dt). */
int arch_role_is_f32(enum arch_role r);

struct arch_tensor {
    char name[64];          /* "blk.3.attn_k.weight" */
    int n_dims;
    int64_t ne[4];          /* unused dims are 1 */
    int required;
    int32_t layer;          /* -1 for global tensors */
    enum arch_role role;
    const char *dims;       /* the shape in words, for messages: "n_embd, n_head_kv*head_dim" */
};

/* Every tensor a model of (a, hp) may hold, in writing order (globals, then layer by layer): the trunk
 * plus hp->n_layer_nextn MTP blocks. output.weight is listed as optional when a->flags has TIED_OK.
 * Gives *out (xfree it). hp must have passed model validation (sizes are trusted). */
infer_status arch_tensors(const struct arch_row *a, const struct arch_hparams *hp, struct arch_tensor **out,
                          int64_t *n);

#endif
