/* model: bind a parsed GGUF file to its architecture row.
 *
 * Three passes, each failing with a message that names the file, the item and expected vs got:
 *   1. hyperparameters: every key of arch_keys() the row reads, type-checked (a per-layer array is
 *      accepted only when all its elements are equal), defaults and derived values filled in;
 *   2. consistency: sizes that must agree (heads, GDN dims, experts) and sane bounds, so that later
 *      size arithmetic cannot overflow;
 *   3. tensors: every entry of arch_tensors() found, its shape exact, its type one we compute with;
 *      then any tensor left over is refused (llama.cpp: "wrong number of tensors").
 */
#include "model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "quant.h"

#define MODEL_MAX_DIM (INT64_C(1) << 24)   /* any width, head count or expert count */
#define MODEL_MAX_VOCAB (INT64_C(1) << 24)
#define MODEL_MAX_LAYERS 4096

/* ---- 1. hyperparameters ---- */

static int model_is_int(enum gguf_vtype t) {
    return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 || t == GGUF_I32 ||
           t == GGUF_U64 || t == GGUF_I64;
}

/* Element i of an integer array as int64 (u64 values above INT64_MAX come back negative: refused later). */
static int64_t model_arr_int(const struct gguf_value *v, uint64_t i) {
    switch (v->elem_type) {
    case GGUF_U8: return ((const uint8_t *)v->v.arr)[i];
    case GGUF_I8: return ((const int8_t *)v->v.arr)[i];
    case GGUF_U16: return ((const uint16_t *)v->v.arr)[i];
    case GGUF_I16: return ((const int16_t *)v->v.arr)[i];
    case GGUF_U32: return ((const uint32_t *)v->v.arr)[i];
    case GGUF_I32: return ((const int32_t *)v->v.arr)[i];
    case GGUF_U64: return (int64_t)((const uint64_t *)v->v.arr)[i];
    case GGUF_I64: return ((const int64_t *)v->v.arr)[i];
    default: return -1;
    }
}

static int64_t model_scalar_int(const struct gguf_value *v) {
    if (v->type == GGUF_U64 && v->v.u > (uint64_t)INT64_MAX) return -1;
    return (v->type == GGUF_U8 || v->type == GGUF_U16 || v->type == GGUF_U32 || v->type == GGUF_U64) ? (int64_t)v->v.u
                                                                                                        : v->v.i;
}

static infer_status model_read_key(const struct gguf_file *f, const char *key, const struct arch_key *k,
                                   const struct gguf_kv *kv, struct arch_hparams *hp) {
    const struct gguf_value *v = &kv->val;
    char *field = (char *)hp + k->off;
    if (k->kind == ARCH_KEY_F32) {
        if (v->type != GGUF_F32 && v->type != GGUF_F64)
            return infer_fail(INFER_E_FORMAT, "%s: key '%s' has type %s, expected f32", f->path, key,
                              gguf_vtype_name(v->type));
        *(float *)field = (float)v->v.f;
        return INFER_OK;
    }
    if (k->kind == ARCH_KEY_I32x4) {
        if (v->type != GGUF_ARR || !model_is_int(v->elem_type) || v->n != 4)
            return infer_fail(INFER_E_FORMAT, "%s: key '%s' has type %s[%" PRIu64 "], expected i32[4]", f->path, key,
                              gguf_vtype_name(v->elem_type), v->type == GGUF_ARR ? v->n : 1);
        for (int i = 0; i < 4; i++) {
            int64_t x = model_arr_int(v, (uint64_t)i);
            if (x < 0 || x > MODEL_MAX_DIM)
                return infer_fail(INFER_E_FORMAT, "%s: key '%s' element %d = %" PRId64 ", expected 0..%" PRId64,
                                  f->path, key, i, x, MODEL_MAX_DIM);
            ((int32_t *)field)[i] = (int32_t)x;
        }
        return INFER_OK;
    }
    int64_t x;
    if (v->type == GGUF_ARR && k->kind == ARCH_KEY_U32_ARR && model_is_int(v->elem_type)) {
        if (v->n == 0) return infer_fail(INFER_E_FORMAT, "%s: key '%s' is an empty array", f->path, key);
        x = model_arr_int(v, 0);
        for (uint64_t i = 1; i < v->n; i++)
            if (model_arr_int(v, i) != x)
                return infer_fail(INFER_E_UNSUPPORTED,
                                  "%s: key '%s' differs per layer (element 0 = %" PRId64 ", element %" PRIu64
                                  " = %" PRId64 "); libinfer needs one value for every layer",
                                  f->path, key, x, i, model_arr_int(v, i));
    } else if (model_is_int(v->type)) {
        x = model_scalar_int(v);
    } else {
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' has type %s, expected u32%s", f->path, key,
                          gguf_vtype_name(v->type == GGUF_ARR ? v->elem_type : v->type),
                          k->kind == ARCH_KEY_U32_ARR ? " or an array of u32" : "");
    }
    if (x < 0 || x > UINT32_MAX)
        return infer_fail(INFER_E_FORMAT, "%s: key '%s' = %" PRId64 ", expected a u32", f->path, key, x);
    *(int64_t *)field = x;
    return INFER_OK;
}

#define BAD(...) return infer_fail(INFER_E_FORMAT, __VA_ARGS__)

/* Consistency of the values read; P is the file name, A the arch name (for key names in messages). */
static infer_status model_check_hparams(const char *P, const struct arch_row *a, struct arch_hparams *hp) {
    const char *A = a->name;
    if (hp->n_layer_all < 1 || hp->n_layer_all > MODEL_MAX_LAYERS)
        BAD("%s: key '%s.block_count' = %" PRId64 ", expected 1..%d", P, A, hp->n_layer_all, MODEL_MAX_LAYERS);
    if (hp->n_layer_nextn >= hp->n_layer_all)
        BAD("%s: key '%s.nextn_predict_layers' = %" PRId64 ", expected less than block_count (%" PRId64 ")", P, A,
            hp->n_layer_nextn, hp->n_layer_all);
    hp->n_layer = hp->n_layer_all - hp->n_layer_nextn;
    const struct { const char *key; int64_t v; int needed; } dims[] = {
        {"embedding_length", hp->n_embd, 1},
        {"attention.head_count", hp->n_head, 1},
        {"feed_forward_length", hp->n_ff, a->ffn == ARCH_FFN_DENSE},
        {"expert_count", hp->n_expert, a->ffn != ARCH_FFN_DENSE},
        {"ssm.conv_kernel", hp->d_conv, (a->flags & ARCH_F_HYBRID) != 0},
        {"ssm.state_size", hp->d_state, (a->flags & ARCH_F_HYBRID) != 0},
        {"ssm.group_count", hp->n_group, (a->flags & ARCH_F_HYBRID) != 0},
        {"ssm.time_step_rank", hp->dt_rank, (a->flags & ARCH_F_HYBRID) != 0},
        {"full_attention_interval", hp->full_attention_interval, (a->flags & ARCH_F_HYBRID) != 0},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if ((dims[i].needed && dims[i].v < 1) || dims[i].v > MODEL_MAX_DIM)
            BAD("%s: key '%s.%s' = %" PRId64 ", expected 1..%" PRId64, P, A, dims[i].key, dims[i].v, MODEL_MAX_DIM);
    /* derived defaults (llama.cpp's): kv heads = heads, head dim = n_embd / n_head, n_rot = head dim */
    if (hp->n_head_kv == 0) hp->n_head_kv = hp->n_head;
    if (hp->head_dim == 0) hp->head_dim = hp->n_embd / hp->n_head;
    if (hp->head_dim_v == 0) hp->head_dim_v = hp->n_embd / hp->n_head;
    if (hp->n_rot == 0) hp->n_rot = hp->head_dim;
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0)
        BAD("%s: key '%s.attention.head_count_kv' = %" PRId64 ", expected a divisor of head_count (%" PRId64 ")", P, A,
            hp->n_head_kv, hp->n_head);
    if (hp->head_dim < 1 || hp->head_dim > MODEL_MAX_DIM)
        BAD("%s: key '%s.attention.key_length' = %" PRId64 ", expected 1..%" PRId64, P, A, hp->head_dim, MODEL_MAX_DIM);
    if (hp->head_dim_v != hp->head_dim)
        return infer_fail(INFER_E_UNSUPPORTED,
                          "%s: key '%s.attention.value_length' = %" PRId64 ", expected key_length (%" PRId64 ")", P, A,
                          hp->head_dim_v, hp->head_dim);
    if (hp->n_rot % 2 || hp->n_rot > hp->head_dim || (!(a->flags & ARCH_F_PARTIAL_ROPE) && hp->n_rot != hp->head_dim))
        BAD("%s: key '%s.rope.dimension_count' = %" PRId64 ", expected %s head dim (%" PRId64 ")", P, A, hp->n_rot,
            (a->flags & ARCH_F_PARTIAL_ROPE) ? "an even number up to the" : "the", hp->head_dim);
    if (!(hp->rms_eps > 0.0f) || !isfinite(hp->rms_eps))
        BAD("%s: key '%s.attention.layer_norm_rms_epsilon' = %g, expected a positive number", P, A, hp->rms_eps);
    if (!(hp->rope_freq_base > 0.0f) || !isfinite(hp->rope_freq_base))
        BAD("%s: key '%s.rope.freq_base' = %g, expected a positive number", P, A, hp->rope_freq_base);
    if (a->ffn != ARCH_FFN_DENSE) {
        if (hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
            BAD("%s: key '%s.expert_used_count' = %" PRId64 ", expected 1..expert_count (%" PRId64 ")", P, A,
                hp->n_expert_used, hp->n_expert);
        if (hp->n_ff_exp == 0 && hp->n_ff > 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
        if (hp->n_ff_exp < 1 || hp->n_ff_exp > MODEL_MAX_DIM)
            BAD("%s: key '%s.expert_feed_forward_length' = %" PRId64 ", expected 1..%" PRId64
                " (or feed_forward_length to derive it from)", P, A, hp->n_ff_exp, MODEL_MAX_DIM);
    }
    if (a->ffn == ARCH_FFN_MOE_SHEXP) {
        if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
        if (hp->n_ff_shexp < 1 || hp->n_ff_shexp > MODEL_MAX_DIM)
            BAD("%s: key '%s.expert_shared_feed_forward_length' = %" PRId64 ", expected 1..%" PRId64
                " (or feed_forward_length)", P, A, hp->n_ff_shexp, MODEL_MAX_DIM);
    }
    if (a->flags & ARCH_F_HYBRID) {
        if (hp->dt_rank % hp->n_group != 0)
            BAD("%s: key '%s.ssm.time_step_rank' = %" PRId64 ", expected a multiple of ssm.group_count (%" PRId64 ")",
                P, A, hp->dt_rank, hp->n_group);
        if (hp->d_inner != hp->dt_rank * hp->d_state)
            BAD("%s: key '%s.ssm.inner_size' = %" PRId64 ", expected time_step_rank*state_size = %" PRId64, P, A,
                hp->d_inner, hp->dt_rank * hp->d_state);
    }
    if ((a->flags & ARCH_F_ROPE_SECTIONS) &&
        hp->rope_sections[0] + hp->rope_sections[1] + hp->rope_sections[2] + hp->rope_sections[3] < 1)
        BAD("%s: key '%s.rope.dimension_sections' = [0, 0, 0, 0], expected sections summing to at least 1", P, A);
    if (hp->n_vocab < 1 || hp->n_vocab > MODEL_MAX_VOCAB)
        BAD("%s: vocabulary size %" PRId64 ", expected 1..%" PRId64, P, hp->n_vocab, MODEL_MAX_VOCAB);
    return INFER_OK;
}

infer_status model_read_hparams(const struct gguf_file *f, const struct arch_row *a, struct arch_hparams *hp) {
    infer_status st = INFER_OK;
    int nk;
    const struct arch_key *keys = arch_keys(&nk);
    memset(hp, 0, sizeof *hp);
    for (int i = 0; i < nk; i++) {
        const struct arch_key *k = &keys[i];
        if (!(k->read & (1u << a->id))) continue;
        char key[128];
        snprintf(key, sizeof key, "%s.%s", a->name, k->suffix);
        const struct gguf_kv *kv = gguf_find_kv(f, key);
        if (kv) {
            TRY(model_read_key(f, key, k, kv, hp));
        } else if (k->required & (1u << a->id)) {
            return infer_fail(INFER_E_FORMAT, "%s: missing key '%s' (required for %s)", f->path, key, a->name);
        } else if (k->def > 0) {
            if (k->kind == ARCH_KEY_F32) *(float *)((char *)hp + k->off) = (float)k->def;
            else *(int64_t *)((char *)hp + k->off) = (int64_t)k->def;
        }
    }
    /* the vocabulary is the tokenizer's; else <arch>.vocab_size; else token_embd's rows */
    const struct gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
    const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (tok && tok->val.type == GGUF_ARR) hp->n_vocab = (int64_t)tok->val.n;
    else if (hp->n_vocab == 0 && emb) hp->n_vocab = emb->ne[1];
    TRY(model_check_hparams(f->path, a, hp));
    /* MTP tensors with no MTP layer declared: say so, rather than report the last layer's missing tensors */
    for (int64_t i = 0; hp->n_layer_nextn == 0 && (a->flags & ARCH_F_MTP) && i < f->n_tensors; i++)
        if (strstr(f->tensors[i].name, ".nextn."))
            return infer_fail(INFER_E_FORMAT,
                              "%s: key '%s.nextn_predict_layers' is 0 or absent, but the file holds MTP tensor '%s'",
                              f->path, a->name, f->tensors[i].name);
    return INFER_OK;
fail:
    return st;
}

/* ---- 3. tensors ---- */

#define L(f) offsetof(struct model_layer, f)
static const size_t model_slot[ARCH_T_COUNT] = {
    [ARCH_T_ATTN_NORM] = L(attn_norm), [ARCH_T_ATTN_Q] = L(attn_q), [ARCH_T_ATTN_K] = L(attn_k),
    [ARCH_T_ATTN_V] = L(attn_v), [ARCH_T_ATTN_OUT] = L(attn_out), [ARCH_T_ATTN_Q_NORM] = L(attn_q_norm),
    [ARCH_T_ATTN_K_NORM] = L(attn_k_norm), [ARCH_T_FFN_NORM] = L(ffn_norm),
    [ARCH_T_POST_ATTN_NORM] = L(post_attn_norm), [ARCH_T_FFN_GATE] = L(ffn_gate), [ARCH_T_FFN_UP] = L(ffn_up),
    [ARCH_T_FFN_DOWN] = L(ffn_down), [ARCH_T_FFN_GATE_INP] = L(ffn_gate_inp),
    [ARCH_T_FFN_GATE_EXPS] = L(ffn_gate_exps), [ARCH_T_FFN_UP_EXPS] = L(ffn_up_exps),
    [ARCH_T_FFN_DOWN_EXPS] = L(ffn_down_exps), [ARCH_T_FFN_GATE_INP_SHEXP] = L(ffn_gate_inp_shexp),
    [ARCH_T_FFN_GATE_SHEXP] = L(ffn_gate_shexp), [ARCH_T_FFN_UP_SHEXP] = L(ffn_up_shexp),
    [ARCH_T_FFN_DOWN_SHEXP] = L(ffn_down_shexp), [ARCH_T_SSM_QKV] = L(ssm_qkv), [ARCH_T_SSM_GATE] = L(ssm_gate),
    [ARCH_T_SSM_BETA] = L(ssm_beta), [ARCH_T_SSM_ALPHA] = L(ssm_alpha), [ARCH_T_SSM_BA] = L(ssm_ba),
    [ARCH_T_SSM_CONV1D] = L(ssm_conv1d), [ARCH_T_SSM_DT_BIAS] = L(ssm_dt_bias), [ARCH_T_SSM_A] = L(ssm_a),
    [ARCH_T_SSM_NORM] = L(ssm_norm), [ARCH_T_SSM_OUT] = L(ssm_out), [ARCH_T_NEXTN_EH_PROJ] = L(nextn_eh_proj),
    [ARCH_T_NEXTN_ENORM] = L(nextn_enorm), [ARCH_T_NEXTN_HNORM] = L(nextn_hnorm),
    [ARCH_T_NEXTN_SHARED_HEAD_NORM] = L(nextn_shared_head_norm),
    [ARCH_T_NEXTN_EMBED_TOKENS] = L(nextn_embed_tokens), [ARCH_T_NEXTN_SHARED_HEAD_HEAD] = L(nextn_shared_head_head),
};

const struct gguf_tensor **model_layer_slot(struct model_layer *L, enum arch_role role) {
    if ((int)role < 0 || role >= ARCH_T_COUNT || !model_slot[role]) return NULL; /* offset 0 is `kind`: no slot */
    return (const struct gguf_tensor **)((char *)L + model_slot[role]);
}

static int model_shape_str(char *buf, size_t cap, int n_dims, const int64_t *ne) {
    int k = snprintf(buf, cap, "[");
    for (int i = 0; i < (n_dims ? n_dims : 1) && k < (int)cap; i++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (k < (int)cap) k += snprintf(buf + k, cap - (size_t)k, "]");
    return k;
}

static infer_status model_bind_tensors(struct infer_model *m) {
    infer_status st = INFER_OK;
    const struct gguf_file *f = m->gguf;
    struct arch_tensor *want = NULL;
    int64_t n_want = 0;
    char *seen = NULL;
    TRY(arch_tensors(m->arch, &m->hp, &want, &n_want));
    seen = xcalloc((size_t)f->n_tensors + 1, 1);
    if (!seen) {
        st = INFER_OOM("the tensor map");
        goto fail;
    }
    for (int64_t i = 0; i < n_want; i++) {
        const struct arch_tensor *w = &want[i];
        char exp[96], got[96];
        model_shape_str(exp, sizeof exp, w->n_dims, w->ne);
        int64_t idx = gguf_find_tensor_index(f, w->name);
        if (idx < 0) {
            if (!w->required) continue;
            st = infer_fail(INFER_E_FORMAT, "%s: missing tensor '%s' of shape %s (%s)", f->path, w->name, exp, w->dims);
            goto fail;
        }
        const struct gguf_tensor *t = &f->tensors[idx];
        seen[idx] = 1;
        if (memcmp(t->ne, w->ne, sizeof t->ne) != 0) {
            model_shape_str(got, sizeof got, t->n_dims, t->ne);
            st = infer_fail(INFER_E_FORMAT, "%s: tensor '%s' has shape %s, expected %s (%s)", f->path, w->name, got,
                            exp, w->dims);
            goto fail;
        }
        const struct quant_type *qt = quant_type(t->type);
        if (!qt || !qt->supported) {
            char id[32];
            snprintf(id, sizeof id, "type id %d", (int)t->type);
            st = infer_fail(INFER_E_UNSUPPORTED, "%s: unsupported tensor type %s in %s", f->path, qt ? qt->name : id,
                            w->name);
            goto fail;
        }
        switch (w->role) {
        case ARCH_T_TOKEN_EMBD: m->token_embd = t; break;
        case ARCH_T_OUTPUT_NORM: m->output_norm = t; break;
        case ARCH_T_OUTPUT: m->output = t; break;
        case ARCH_T_ROPE_FREQS: m->rope_freqs = t; break;
        default: *model_layer_slot(&m->layers[w->layer], w->role) = t; break;
        }
    }
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (!seen[i]) {
            st = infer_fail(INFER_E_FORMAT,
                            "%s: unexpected tensor '%s': not part of a %s model with these hyperparameters "
                            "(wrong number of tensors: %" PRId64 " in the file)",
                            f->path, f->tensors[i].name, m->arch->name, f->n_tensors);
            goto fail;
        }
    if (!m->output) {
        m->output = m->token_embd;
        m->tied = 1;
    }
fail:
    xfree(seen);
    xfree(want);
    return st;
}

/* ---- binding ---- */

infer_status model_bind(struct gguf_file *f, struct infer_model **out) {
    infer_status st = INFER_OK;
    struct infer_model *m = NULL;
    *out = NULL;
    const char *arch_name = NULL;
    const struct gguf_kv *kv = gguf_find_kv(f, "general.architecture");
    if (!kv) {
        st = infer_fail(INFER_E_FORMAT, "%s: missing key 'general.architecture'", f->path);
        goto fail;
    }
    if (kv->val.type != GGUF_STR) {
        st = infer_fail(INFER_E_FORMAT, "%s: key 'general.architecture' has type %s, expected string", f->path,
                        gguf_vtype_name(kv->val.type));
        goto fail;
    }
    arch_name = kv->val.v.str.s;
    const struct arch_row *a = arch_find(arch_name);
    if (!a) {
        st = infer_fail(INFER_E_UNSUPPORTED,
                        "%s: unknown architecture '%.64s' (supported: llama qwen3 qwen3moe qwen3next qwen35 qwen35moe)",
                        f->path, arch_name);
        goto fail;
    }
    m = xcalloc(1, sizeof *m);
    if (!m) {
        st = INFER_OOM("the model");
        goto fail;
    }
    m->gguf = f;
    m->arch = a;
    m->embd_gpu = m->head_gpu = -1;
    TRY(model_read_hparams(f, a, &m->hp));
    m->gpu_layer0 = (int32_t)m->hp.n_layer;
    m->layers = xcalloc((size_t)m->hp.n_layer_all, sizeof *m->layers);
    if (!m->layers) {
        st = INFER_OOM("the layer table");
        goto fail;
    }
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        m->layers[il].kind = arch_layer_kind(a, &m->hp, il);
        m->layers[il].is_mtp = il >= m->hp.n_layer;
    }
    TRY(model_bind_tensors(m));
    TRY(tokenizer_load(f, &m->tok));
    *out = m;
    return INFER_OK;
fail:
    if (m) model_free(m);
    else gguf_close(f);
    return st;
}

void model_free(struct infer_model *m) {
    if (!m) return;
    model_upload_free(m);
    model_repack_free(m);
    tokenizer_free(m->tok);
    gguf_close(m->gguf);
    xfree(m->layers);
    xfree(m);
}
