/* arch: the architecture rows, the hyperparameter-key table and the tensor enumerator.
 *
 * Layout: rows, then keys (one line per key with a "reads" and a "requires" column of arch bits), then
 * role names, then arch_tensors(), which walks globals and then each layer: norms, the mixer of the
 * layer's kind (attention or GDN), the FFN of the row's kind, and for MTP layers the nextn.* extras.
 * Facts from docs/qwen35.md §2-3 and llama.cpp src/llama-arch.cpp / src/models/.
 */
#include "arch.h"

#include <stdio.h>
#include <string.h>

static const struct arch_row arch_rows[ARCH_COUNT] = {
    {ARCH_LLAMA, "llama", ARCH_FFN_DENSE, ARCH_ROPE_NORM, ARCH_VHEADS_NONE, ARCH_F_TIED_OK, "llama-bpe"},
    {ARCH_QWEN3, "qwen3", ARCH_FFN_DENSE, ARCH_ROPE_NEOX, ARCH_VHEADS_NONE, ARCH_F_QK_NORM | ARCH_F_TIED_OK, "qwen2"},
    {ARCH_QWEN3MOE, "qwen3moe", ARCH_FFN_MOE, ARCH_ROPE_NEOX, ARCH_VHEADS_NONE, ARCH_F_QK_NORM | ARCH_F_TIED_OK,
     "qwen2"},
    {ARCH_QWEN3NEXT, "qwen3next", ARCH_FFN_MOE_SHEXP, ARCH_ROPE_NEOX, ARCH_VHEADS_GROUPED,
     ARCH_F_QK_NORM | ARCH_F_ATTN_GATE | ARCH_F_PARTIAL_ROPE | ARCH_F_TIED_OK | ARCH_F_MTP | ARCH_F_HYBRID |
         ARCH_F_POST_ATTN_NORM | ARCH_F_SSM_BA,
     "qwen2"},
    {ARCH_QWEN35, "qwen35", ARCH_FFN_DENSE, ARCH_ROPE_IMROPE, ARCH_VHEADS_TILED,
     ARCH_F_QK_NORM | ARCH_F_ATTN_GATE | ARCH_F_PARTIAL_ROPE | ARCH_F_TIED_OK | ARCH_F_MTP | ARCH_F_HYBRID |
         ARCH_F_POST_ATTN_NORM | ARCH_F_ROPE_SECTIONS,
     "qwen35"},
    {ARCH_QWEN35MOE, "qwen35moe", ARCH_FFN_MOE_SHEXP, ARCH_ROPE_IMROPE, ARCH_VHEADS_TILED,
     ARCH_F_QK_NORM | ARCH_F_ATTN_GATE | ARCH_F_PARTIAL_ROPE | ARCH_F_TIED_OK | ARCH_F_MTP | ARCH_F_HYBRID |
         ARCH_F_POST_ATTN_NORM | ARCH_F_ROPE_SECTIONS,
     "qwen35"},
};

const struct arch_row *arch_find(const char *name) {
    for (int i = 0; i < ARCH_COUNT; i++)
        if (name && strcmp(arch_rows[i].name, name) == 0) return &arch_rows[i];
    return NULL;
}

const struct arch_row *arch_get(enum arch_id id) { return (unsigned)id < ARCH_COUNT ? &arch_rows[id] : NULL; }

/* ---- keys ---- */

#define B(a) (1u << (a))
#define ALL (B(ARCH_COUNT) - 1)
#define DENSE (B(ARCH_LLAMA) | B(ARCH_QWEN3) | B(ARCH_QWEN35))
#define MOE (B(ARCH_QWEN3MOE) | B(ARCH_QWEN3NEXT) | B(ARCH_QWEN35MOE))
#define SHEXP (B(ARCH_QWEN3NEXT) | B(ARCH_QWEN35MOE))
#define HYBRID (B(ARCH_QWEN3NEXT) | B(ARCH_QWEN35) | B(ARCH_QWEN35MOE))
#define SECTIONS (B(ARCH_QWEN35) | B(ARCH_QWEN35MOE))
#define H(f) offsetof(struct arch_hparams, f)

/* def < 0: derived after reading (head_count_kv = head_count, key_length = n_embd/n_head, n_rot =
 * key_length, n_ff_exp = n_ff/n_expert_used, n_ff_shexp = n_ff, n_vocab from the tokenizer). */
static const struct arch_key arch_key_table[] = {
    {"context_length", ARCH_KEY_U32, H(n_ctx_train), ALL, ALL, 0},
    {"embedding_length", ARCH_KEY_U32, H(n_embd), ALL, ALL, 0},
    {"block_count", ARCH_KEY_U32, H(n_layer_all), ALL, ALL, 0},
    {"vocab_size", ARCH_KEY_U32, H(n_vocab), ALL, 0, -1},
    {"feed_forward_length", ARCH_KEY_U32_ARR, H(n_ff), ALL, DENSE, 0},
    {"attention.head_count", ARCH_KEY_U32_ARR, H(n_head), ALL, ALL, 0},
    {"attention.head_count_kv", ARCH_KEY_U32_ARR, H(n_head_kv), ALL, 0, -1},
    {"attention.key_length", ARCH_KEY_U32, H(head_dim), ALL, 0, -1},
    {"attention.value_length", ARCH_KEY_U32, H(head_dim_v), ALL, 0, -1},
    {"attention.layer_norm_rms_epsilon", ARCH_KEY_F32, H(rms_eps), ALL, ALL, 0},
    {"rope.dimension_count", ARCH_KEY_U32, H(n_rot), ALL, 0, -1},
    {"rope.freq_base", ARCH_KEY_F32, H(rope_freq_base), ALL, 0, 10000.0},
    {"rope.dimension_sections", ARCH_KEY_I32x4, H(rope_sections), SECTIONS, SECTIONS, 0},
    {"expert_count", ARCH_KEY_U32, H(n_expert), MOE, MOE, 0},
    {"expert_used_count", ARCH_KEY_U32, H(n_expert_used), MOE, MOE, 0},
    {"expert_feed_forward_length", ARCH_KEY_U32, H(n_ff_exp), MOE, 0, -1},
    {"expert_shared_feed_forward_length", ARCH_KEY_U32, H(n_ff_shexp), SHEXP, 0, -1},
    {"ssm.conv_kernel", ARCH_KEY_U32, H(d_conv), HYBRID, HYBRID, 0},
    {"ssm.state_size", ARCH_KEY_U32, H(d_state), HYBRID, HYBRID, 0},
    {"ssm.group_count", ARCH_KEY_U32, H(n_group), HYBRID, HYBRID, 0},
    {"ssm.time_step_rank", ARCH_KEY_U32, H(dt_rank), HYBRID, HYBRID, 0},
    {"ssm.inner_size", ARCH_KEY_U32, H(d_inner), HYBRID, HYBRID, 0},
    {"full_attention_interval", ARCH_KEY_U32, H(full_attention_interval), HYBRID, 0, 4},
    {"nextn_predict_layers", ARCH_KEY_U32, H(n_layer_nextn), HYBRID, 0, 0},
};

const struct arch_key *arch_keys(int *n) {
    *n = (int)(sizeof arch_key_table / sizeof arch_key_table[0]);
    return arch_key_table;
}

enum arch_layer_kind arch_layer_kind(const struct arch_row *a, const struct arch_hparams *hp, int64_t il) {
    if (!(a->flags & ARCH_F_HYBRID) || il >= hp->n_layer) return ARCH_LAYER_ATTN;
    return (il + 1) % hp->full_attention_interval == 0 ? ARCH_LAYER_ATTN : ARCH_LAYER_GDN;
}

/* ---- tensors ---- */

static const char *const arch_role_names[ARCH_T_COUNT] = {
    [ARCH_T_TOKEN_EMBD] = "token_embd.weight",
    [ARCH_T_OUTPUT_NORM] = "output_norm.weight",
    [ARCH_T_OUTPUT] = "output.weight",
    [ARCH_T_ROPE_FREQS] = "rope_freqs.weight",
    [ARCH_T_ATTN_NORM] = "attn_norm.weight",
    [ARCH_T_ATTN_Q] = "attn_q.weight",
    [ARCH_T_ATTN_K] = "attn_k.weight",
    [ARCH_T_ATTN_V] = "attn_v.weight",
    [ARCH_T_ATTN_OUT] = "attn_output.weight",
    [ARCH_T_ATTN_Q_NORM] = "attn_q_norm.weight",
    [ARCH_T_ATTN_K_NORM] = "attn_k_norm.weight",
    [ARCH_T_FFN_NORM] = "ffn_norm.weight",
    [ARCH_T_POST_ATTN_NORM] = "post_attention_norm.weight",
    [ARCH_T_FFN_GATE] = "ffn_gate.weight",
    [ARCH_T_FFN_UP] = "ffn_up.weight",
    [ARCH_T_FFN_DOWN] = "ffn_down.weight",
    [ARCH_T_FFN_GATE_INP] = "ffn_gate_inp.weight",
    [ARCH_T_FFN_GATE_EXPS] = "ffn_gate_exps.weight",
    [ARCH_T_FFN_UP_EXPS] = "ffn_up_exps.weight",
    [ARCH_T_FFN_DOWN_EXPS] = "ffn_down_exps.weight",
    [ARCH_T_FFN_GATE_INP_SHEXP] = "ffn_gate_inp_shexp.weight",
    [ARCH_T_FFN_GATE_SHEXP] = "ffn_gate_shexp.weight",
    [ARCH_T_FFN_UP_SHEXP] = "ffn_up_shexp.weight",
    [ARCH_T_FFN_DOWN_SHEXP] = "ffn_down_shexp.weight",
    [ARCH_T_SSM_QKV] = "attn_qkv.weight",
    [ARCH_T_SSM_GATE] = "attn_gate.weight",
    [ARCH_T_SSM_BETA] = "ssm_beta.weight",
    [ARCH_T_SSM_ALPHA] = "ssm_alpha.weight",
    [ARCH_T_SSM_BA] = "ssm_ba.weight",
    [ARCH_T_SSM_CONV1D] = "ssm_conv1d.weight",
    [ARCH_T_SSM_DT_BIAS] = "ssm_dt.bias",
    [ARCH_T_SSM_A] = "ssm_a",
    [ARCH_T_SSM_NORM] = "ssm_norm.weight",
    [ARCH_T_SSM_OUT] = "ssm_out.weight",
    [ARCH_T_NEXTN_EH_PROJ] = "nextn.eh_proj.weight",
    [ARCH_T_NEXTN_ENORM] = "nextn.enorm.weight",
    [ARCH_T_NEXTN_HNORM] = "nextn.hnorm.weight",
    [ARCH_T_NEXTN_SHARED_HEAD_NORM] = "nextn.shared_head_norm.weight",
    [ARCH_T_NEXTN_EMBED_TOKENS] = "nextn.embed_tokens.weight",
    [ARCH_T_NEXTN_SHARED_HEAD_HEAD] = "nextn.shared_head_head.weight",
};

const char *arch_role_name(enum arch_role r) { return (unsigned)r < ARCH_T_COUNT ? arch_role_names[r] : "?"; }

int arch_role_is_f32(enum arch_role r) {
    switch (r) {
    case ARCH_T_OUTPUT_NORM: case ARCH_T_ROPE_FREQS: case ARCH_T_ATTN_NORM: case ARCH_T_ATTN_Q_NORM:
    case ARCH_T_ATTN_K_NORM: case ARCH_T_FFN_NORM: case ARCH_T_POST_ATTN_NORM: case ARCH_T_FFN_GATE_INP:
    case ARCH_T_FFN_GATE_INP_SHEXP: case ARCH_T_SSM_CONV1D: case ARCH_T_SSM_DT_BIAS: case ARCH_T_SSM_A:
    case ARCH_T_SSM_NORM: case ARCH_T_NEXTN_ENORM: case ARCH_T_NEXTN_HNORM: case ARCH_T_NEXTN_SHARED_HEAD_NORM:
        return 1;
    default:
        return 0;
    }
}

struct arch_list {
    struct arch_tensor *t;
    int64_t n, cap;
};

/* Appends one entry; ne2 == 0 means a 2-D (or, with ne1 == 0, 1-D) tensor. */
static infer_status arch_add(struct arch_list *l, enum arch_role r, int32_t layer, int required, const char *dims,
                             int64_t ne0, int64_t ne1, int64_t ne2) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        void *p = xrealloc(l->t, (size_t)cap * sizeof *l->t);
        if (!p) return INFER_OOM("the tensor list");
        l->t = p;
        l->cap = cap;
    }
    struct arch_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    if (layer < 0) snprintf(t->name, sizeof t->name, "%s", arch_role_names[r]);
    else snprintf(t->name, sizeof t->name, "blk.%d.%s", (int)layer, arch_role_names[r]);
    t->n_dims = ne2 ? 3 : ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = ne2 ? ne2 : 1;
    t->ne[3] = 1;
    t->required = required;
    t->layer = layer;
    t->role = r;
    t->dims = dims;
    return INFER_OK;
}

#define ADD(r, req, dims, a0, a1, a2) TRY(arch_add(&l, (r), il, (req), (dims), (a0), (a1), (a2)))

infer_status arch_tensors(const struct arch_row *a, const struct arch_hparams *hp, struct arch_tensor **out,
                          int64_t *n) {
    infer_status st = INFER_OK;
    struct arch_list l = {0};
    const int64_t E = hp->n_embd, V = hp->n_vocab, hd = hp->head_dim, Hq = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t q_rows = (a->flags & ARCH_F_ATTN_GATE) ? 2 * Hq * hd : Hq * hd;
    const int64_t KD = hp->n_group * hp->d_state, CD = 2 * KD + hp->d_inner, Hv = hp->dt_rank;
    const int64_t NE = hp->n_expert, Fe = hp->n_ff_exp, Fs = hp->n_ff_shexp, F = hp->n_ff;
    int32_t il = -1;

    ADD(ARCH_T_TOKEN_EMBD, 1, "n_embd, n_vocab", E, V, 0);
    ADD(ARCH_T_OUTPUT_NORM, 1, "n_embd", E, 0, 0);
    ADD(ARCH_T_OUTPUT, !(a->flags & ARCH_F_TIED_OK), "n_embd, n_vocab", E, V, 0);
    if (a->id == ARCH_LLAMA) ADD(ARCH_T_ROPE_FREQS, 0, "n_rot/2", hp->n_rot / 2, 0, 0);

    for (il = 0; il < (int32_t)hp->n_layer_all; il++) {
        const int mtp = il >= hp->n_layer;
        ADD(ARCH_T_ATTN_NORM, 1, "n_embd", E, 0, 0);
        if (arch_layer_kind(a, hp, il) == ARCH_LAYER_ATTN) {
            ADD(ARCH_T_ATTN_Q, 1, (a->flags & ARCH_F_ATTN_GATE) ? "n_embd, 2*n_head*head_dim" : "n_embd, n_head*head_dim",
                E, q_rows, 0);
            ADD(ARCH_T_ATTN_K, 1, "n_embd, n_head_kv*head_dim", E, Hkv * hd, 0);
            ADD(ARCH_T_ATTN_V, 1, "n_embd, n_head_kv*head_dim", E, Hkv * hd, 0);
            ADD(ARCH_T_ATTN_OUT, 1, "n_head*head_dim, n_embd", Hq * hd, E, 0);
            if (a->flags & ARCH_F_QK_NORM) {
                ADD(ARCH_T_ATTN_Q_NORM, 1, "head_dim", hd, 0, 0);
                ADD(ARCH_T_ATTN_K_NORM, 1, "head_dim", hd, 0, 0);
            }
        } else {
            ADD(ARCH_T_SSM_QKV, 1, "n_embd, 2*group_count*state_size+inner_size", E, CD, 0);
            ADD(ARCH_T_SSM_GATE, 1, "n_embd, inner_size", E, hp->d_inner, 0);
            if (a->flags & ARCH_F_SSM_BA) {
                ADD(ARCH_T_SSM_BA, 1, "n_embd, 2*time_step_rank", E, 2 * Hv, 0);
            } else {
                ADD(ARCH_T_SSM_BETA, 1, "n_embd, time_step_rank", E, Hv, 0);
                ADD(ARCH_T_SSM_ALPHA, 1, "n_embd, time_step_rank", E, Hv, 0);
            }
            ADD(ARCH_T_SSM_CONV1D, 1, "conv_kernel, 2*group_count*state_size+inner_size", hp->d_conv, CD, 0);
            ADD(ARCH_T_SSM_DT_BIAS, 1, "time_step_rank", Hv, 0, 0);
            ADD(ARCH_T_SSM_A, 1, "time_step_rank", Hv, 0, 0);
            ADD(ARCH_T_SSM_NORM, 1, "state_size", hp->d_state, 0, 0);
            ADD(ARCH_T_SSM_OUT, 1, "inner_size, n_embd", hp->d_inner, E, 0);
        }
        ADD((a->flags & ARCH_F_POST_ATTN_NORM) ? ARCH_T_POST_ATTN_NORM : ARCH_T_FFN_NORM, 1, "n_embd", E, 0, 0);
        if (a->ffn == ARCH_FFN_DENSE) {
            ADD(ARCH_T_FFN_GATE, 1, "n_embd, n_ff", E, F, 0);
            ADD(ARCH_T_FFN_UP, 1, "n_embd, n_ff", E, F, 0);
            ADD(ARCH_T_FFN_DOWN, 1, "n_ff, n_embd", F, E, 0);
        } else {
            ADD(ARCH_T_FFN_GATE_INP, 1, "n_embd, n_expert", E, NE, 0);
            ADD(ARCH_T_FFN_GATE_EXPS, 1, "n_embd, n_ff_exp, n_expert", E, Fe, NE);
            ADD(ARCH_T_FFN_UP_EXPS, 1, "n_embd, n_ff_exp, n_expert", E, Fe, NE);
            ADD(ARCH_T_FFN_DOWN_EXPS, 1, "n_ff_exp, n_embd, n_expert", Fe, E, NE);
            if (a->ffn == ARCH_FFN_MOE_SHEXP) {
                ADD(ARCH_T_FFN_GATE_INP_SHEXP, 1, "n_embd", E, 0, 0);
                ADD(ARCH_T_FFN_GATE_SHEXP, 1, "n_embd, n_ff_shexp", E, Fs, 0);
                ADD(ARCH_T_FFN_UP_SHEXP, 1, "n_embd, n_ff_shexp", E, Fs, 0);
                ADD(ARCH_T_FFN_DOWN_SHEXP, 1, "n_ff_shexp, n_embd", Fs, E, 0);
            }
        }
        if (mtp) {
            ADD(ARCH_T_NEXTN_EH_PROJ, 1, "2*n_embd, n_embd", 2 * E, E, 0);
            ADD(ARCH_T_NEXTN_ENORM, 1, "n_embd", E, 0, 0);
            ADD(ARCH_T_NEXTN_HNORM, 1, "n_embd", E, 0, 0);
            ADD(ARCH_T_NEXTN_SHARED_HEAD_NORM, 0, "n_embd", E, 0, 0);
            ADD(ARCH_T_NEXTN_EMBED_TOKENS, 0, "n_embd, n_vocab", E, V, 0);
            ADD(ARCH_T_NEXTN_SHARED_HEAD_HEAD, 0, "n_embd, n_vocab", E, V, 0);
        }
    }
    *out = l.t;
    *n = l.n;
    return INFER_OK;
fail:
    xfree(l.t);
    return st;
}
