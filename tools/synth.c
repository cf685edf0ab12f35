/* synth: synthetic GGUF models of every architecture, with random weights and real shapes.
 *
 * The tensor list is arch_tensors() and the metadata keys are arch_keys(), the very tables the loader
 * checks against. Weights come from a seeded generator, one stream per tensor (so the bytes do not
 * depend on the order the writer asks for them), and are quantised with our quantisers into the type
 * ftype_tensor_type() picks; with random_blocks the quantised types get random bytes with their f16
 * scale fields forced to small finite values, which writes an 8B-27B shape in seconds. Tensor data is
 * produced by the writer's fill callback, one tensor at a time, so nothing model-sized is held here.
 * The vocabulary (synth_vocab) is a valid byte-level BPE: 256 byte tokens, merged tokens, control tokens.
 * mtp_agree (synth.h) replaces a few tensors by set values: zero output projections, a bigram LM head
 * (synth_agree_output) and a pass-through MTP head (synth_agree_row), for speculative-decoding tests.
 */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "blocks.h"
#include "ftype.h"
#include "gguf.h"
#include "quant.h"

/* ---- defaults and presets ---- */

infer_status synth_params_default(const char *arch, struct synth_params *p) {
    const struct arch_row *a = arch_find(arch);
    if (!a) return infer_fail(INFER_E_ARG, "synth: unknown architecture '%s'", arch ? arch : "(null)");
    memset(p, 0, sizeof *p);
    p->arch = a->name;
    p->ftype = "F32";
    p->seed = 42;
    /* every row length a multiple of 256 so K-quant files need no fallback types */
    p->n_vocab = 640;
    p->n_embd = 256;
    p->n_layer = (a->flags & ARCH_F_HYBRID) ? 4 : 2;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->head_dim = 64;
    p->n_ff = 512;
    p->n_ctx_train = 4096;
    if (a->ffn != ARCH_FFN_DENSE) {
        p->n_expert = 8;
        p->n_expert_used = 2;
        p->n_ff_exp = 256;
    }
    if (a->ffn == ARCH_FFN_MOE_SHEXP) p->n_ff_shexp = 256;
    if (a->id == ARCH_QWEN35MOE) p->n_ff = 0; /* real qwen35moe files have no feed_forward_length */
    if (a->flags & ARCH_F_HYBRID) {
        p->ssm_d_state = 64;
        p->ssm_n_group = 2;
        p->ssm_dt_rank = 4;
        p->ssm_d_conv = 4;
        p->full_attention_interval = 4;
    }
    return INFER_OK;
}

struct synth_preset {
    const char *name, *arch;
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int32_t d_state, n_group, dt_rank, n_ctx_train;
    int tied;
};

static const struct synth_preset synth_presets[] = {
    {"llama3-8b", "llama", 128256, 4096, 32, 32, 8, 128, 14336, 0, 0, 0, 0, 0, 0, 0, 8192, 0},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 28, 16, 8, 128, 3072, 0, 0, 0, 0, 0, 0, 0, 40960, 1},
    {"qwen3-8b", "qwen3", 151936, 4096, 36, 32, 8, 128, 12288, 0, 0, 0, 0, 0, 0, 0, 40960, 0},
    {"qwen3-30b-a3b", "qwen3moe", 151936, 2048, 48, 32, 4, 128, 6144, 128, 8, 768, 0, 0, 0, 0, 40960, 0},
    {"qwen35-0.8b", "qwen35", 248320, 1024, 24, 8, 2, 256, 3584, 0, 0, 0, 0, 128, 16, 16, 262144, 1},
    {"qwen35-9b", "qwen35", 248320, 4096, 32, 16, 4, 256, 12288, 0, 0, 0, 0, 128, 16, 32, 262144, 0},
    {"qwen35-27b", "qwen35", 248320, 5120, 64, 24, 4, 256, 17408, 0, 0, 0, 0, 128, 16, 48, 262144, 0},
    {"qwen35-35b-a3b", "qwen35moe", 248320, 2048, 40, 16, 2, 256, 0, 256, 8, 512, 512, 128, 16, 32, 262144, 0},
    {"qwen3next-80b-a3b", "qwen3next", 151936, 2048, 48, 16, 2, 256, 5120, 512, 10, 512, 512, 128, 16, 32, 262144, 0},
    /* not a released model: the ~1B Qwen3.5-MoE shape of the MTP benchmark (count in synth.h) */
    {"qwen35moe-1b", "qwen35moe", 32000, 1024, 16, 8, 2, 256, 0, 64, 8, 256, 256, 128, 16, 16, 262144, 0},
};

infer_status synth_preset(const char *name, struct synth_params *p) {
    for (size_t i = 0; i < sizeof synth_presets / sizeof synth_presets[0]; i++) {
        const struct synth_preset *s = &synth_presets[i];
        if (!name || strcmp(name, s->name) != 0) continue;
        struct synth_params keep = *p;
        infer_status st = synth_params_default(s->arch, p);
        if (st != INFER_OK) return st;
        if (keep.ftype) p->ftype = keep.ftype;
        p->mtp = keep.mtp;
        p->seed = keep.seed;
        p->random_blocks = keep.random_blocks;
        p->sparse = keep.sparse;
        p->mtp_agree = keep.mtp_agree, p->mtp_noise = keep.mtp_noise;
        p->n_vocab = s->n_vocab, p->n_embd = s->n_embd, p->n_layer = s->n_layer, p->n_head = s->n_head;
        p->n_head_kv = s->n_head_kv, p->head_dim = s->head_dim, p->n_ff = s->n_ff;
        p->n_expert = s->n_expert, p->n_expert_used = s->n_expert_used, p->n_ff_exp = s->n_ff_exp;
        p->n_ff_shexp = s->n_ff_shexp, p->n_ctx_train = s->n_ctx_train, p->tied = s->tied;
        if (s->d_state) p->ssm_d_state = s->d_state, p->ssm_n_group = s->n_group, p->ssm_dt_rank = s->dt_rank;
        return INFER_OK;
    }
    return infer_fail(INFER_E_ARG, "synth: unknown preset '%s'", name ? name : "(null)");
}

/* ---- the generator: splitmix64 seeding, xorshift64* stream ---- */

static uint64_t synth_mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t synth_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

static float synth_uniform(uint64_t *s) { return (float)(synth_next(s) >> 40) * (1.0f / 16777216.0f); }

/* Irwin-Hall of 4 uniforms, scaled to unit variance: gaussian enough for weights. */
static float synth_gauss(uint64_t *s) {
    float x = synth_uniform(s) + synth_uniform(s) + synth_uniform(s) + synth_uniform(s) - 2.0f;
    return x * 1.7320508f;
}

/* ---- vocabulary ---- */

struct synth_vocab {
    char **tokens;     /* (n_vocab) */
    int32_t *types;    /* (n_vocab) llama token types: 1 normal, 3 control */
    char **merges;     /* (n_merges) "left right" */
    int64_t n_vocab, n_merges;
    int32_t bos, eos, pad;
};

static void synth_vocab_free(struct synth_vocab *v) {
    for (int64_t i = 0; v->tokens && i < v->n_vocab; i++) xfree(v->tokens[i]);
    for (int64_t i = 0; v->merges && i < v->n_merges; i++) xfree(v->merges[i]);
    xfree(v->tokens);
    xfree(v->types);
    xfree(v->merges);
    memset(v, 0, sizeof *v);
}

/* GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others for U+0100.. in order. */
static void synth_byte_token(int b, char out[4]) {
    int cp = b, n = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        n = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

/* Merged token k is L[k/16] + letter(k%16), L = the 16 letter tokens 'a'..'p' followed by the merged
 * tokens themselves: all distinct (the last letter and the prefix determine (k/16, k%16)), and every
 * merge's two sides and its result are tokens. */
static infer_status synth_vocab_make(const struct arch_row *a, int64_t n_vocab, struct synth_vocab *v) {
    static const char *const ctl_qwen[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    static const char *const ctl_llama[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                            "<|end_header_id|>", "<|eot_id|>"};
    const int llama = a->id == ARCH_LLAMA;
    const char *const *ctl = llama ? ctl_llama : ctl_qwen;
    const int64_t n_ctl = llama ? 5 : 3;
    memset(v, 0, sizeof *v);
    if (n_vocab < 256 + n_ctl)
        return infer_fail(INFER_E_ARG, "synth: n_vocab %lld is too small, expected at least %lld", (long long)n_vocab,
                          (long long)(256 + n_ctl));
    v->n_vocab = n_vocab;
    v->n_merges = n_vocab - 256 - n_ctl;
    v->tokens = xcalloc((size_t)n_vocab, sizeof *v->tokens);
    v->types = xcalloc((size_t)n_vocab, sizeof *v->types);
    v->merges = xcalloc((size_t)v->n_merges + 1, sizeof *v->merges);
    if (!v->tokens || !v->types || !v->merges) goto oom;
    for (int b = 0; b < 256; b++) {
        char s[4];
        synth_byte_token(b, s);
        if (!(v->tokens[b] = xstrdup(s))) goto oom;
        v->types[b] = 1;
    }
    for (int64_t k = 0; k < v->n_merges; k++) {
        int64_t li = k / 16;
        const char *left = li < 16 ? v->tokens['a' + li] : v->tokens[256 + li - 16];
        char right = (char)('a' + k % 16);
        size_t n = strlen(left);
        char *t = xmalloc(n + 2), *m = xmalloc(n + 3);
        if (!t || !m) {
            xfree(t), xfree(m);
            goto oom;
        }
        memcpy(t, left, n), t[n] = right, t[n + 1] = 0;
        memcpy(m, left, n), m[n] = ' ', m[n + 1] = right, m[n + 2] = 0;
        v->tokens[256 + k] = t, v->merges[k] = m, v->types[256 + k] = 1;
    }
    for (int64_t i = 0; i < n_ctl; i++) {
        int64_t id = n_vocab - n_ctl + i;
        if (!(v->tokens[id] = xstrdup(ctl[i]))) goto oom;
        v->types[id] = 3;
    }
    v->bos = (int32_t)(n_vocab - n_ctl);        /* <|begin_of_text|> / <|endoftext|> */
    v->eos = (int32_t)(n_vocab - 1);           /* <|eot_id|> / <|im_end|> */
    v->pad = (int32_t)(n_vocab - n_ctl + (llama ? 1 : 0));
    return INFER_OK;
oom:
    synth_vocab_free(v);
    return INFER_OOM("the synthetic vocabulary");
}

/* ---- weights ---- */

/* Where a random block's f16 scales go and which values they get (|w| ~ 0.02 on average; the ternary types
 * 0.013 / 0.01: louder random ternary models amplified the float differences between llama.cpp's own CPU
 * backends to twice its spread between its settings in test-llama-logits). */
static const struct { int32_t type; int off_d; float d; int off_m; float m; } synth_scales[] = {
    {INFER_TYPE_Q4_0, 0, 3e-3f, -1, 0},      {INFER_TYPE_Q4_1, 0, 3e-3f, 2, -0.024f},
    {INFER_TYPE_Q5_0, 0, 2.5e-3f, -1, 0},    {INFER_TYPE_Q5_1, 0, 1.5e-3f, 2, -0.024f},
    {INFER_TYPE_Q8_0, 0, 3e-4f, -1, 0},      {INFER_TYPE_Q2_K, 80, 1e-3f, 82, 1e-3f},
    {INFER_TYPE_Q3_K, 108, 3e-4f, -1, 0},    {INFER_TYPE_Q4_K, 0, 2e-4f, 2, 2e-4f},
    {INFER_TYPE_Q5_K, 0, 1e-4f, 2, 1e-4f},   {INFER_TYPE_Q6_K, 208, 2e-5f, -1, 0},
    {INFER_TYPE_IQ4_NL, 0, 2e-4f, -1, 0},    {INFER_TYPE_IQ4_XS, 0, 2e-4f, -1, 0},
    {INFER_TYPE_IQ2_XXS, 0, 4e-4f, -1, 0},   {INFER_TYPE_IQ2_XS, 0, 4e-4f, -1, 0},
    {INFER_TYPE_IQ2_S, 0, 4e-4f, -1, 0},     {INFER_TYPE_IQ3_XXS, 0, 2e-4f, -1, 0},
    {INFER_TYPE_IQ3_S, 0, 2e-4f, -1, 0},     {INFER_TYPE_IQ1_S, 0, 3.5e-3f, -1, 0},
    {INFER_TYPE_TQ1_0, 52, 0.02f, -1, 0},    {INFER_TYPE_TQ2_0, 64, 0.02f, -1, 0},
};

struct synth_job {
    const struct synth_params *p;
    const struct arch_tensor **list; /* (n) in writer order */
    int32_t *types;                  /* (n) */
    int64_t n;
    float *row;                      /* (max ne0) */
    /* mtp_agree: the permutation cycle of the bigram table and the stream indexes it is built from */
    int32_t *next;                   /* (n_vocab) next[x] = the bigram successor of x; -1 for control tokens */
    int64_t i_embd, i_onorm;         /* list indexes of token_embd and output_norm */
    float rms_eps;
};

static void synth_put16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8); }

static void synth_random_blocks(int32_t type, uint64_t *s, uint8_t *dst, size_t nbytes) {
    const struct quant_type *qt = quant_type(type);
    for (size_t i = 0; i < nbytes; i += 8) {
        uint64_t r = synth_next(s);
        size_t k = nbytes - i < 8 ? nbytes - i : 8;
        memcpy(dst + i, &r, k);
    }
    for (size_t k = 0; k < sizeof synth_scales / sizeof synth_scales[0]; k++) {
        if (synth_scales[k].type != type) continue;
        for (size_t b = 0; b + (size_t)qt->bytes <= nbytes; b += (size_t)qt->bytes) {
            float jitter = 0.5f + synth_uniform(s);
            synth_put16(dst + b + synth_scales[k].off_d, quant_f32_to_f16(synth_scales[k].d * jitter));
            if (synth_scales[k].off_m >= 0)
                synth_put16(dst + b + synth_scales[k].off_m, quant_f32_to_f16(synth_scales[k].m * jitter));
        }
    }
    /* IQ1_M's f16 scale is the top nibbles of its four scale words (@48, u16 each) */
    for (size_t b = 0; type == INFER_TYPE_IQ1_M && b + (size_t)qt->bytes <= nbytes; b += (size_t)qt->bytes) {
        blocks_iq1_m_put_half((block_iq1_m *)(dst + b), quant_f32_to_f16(3.5e-3f * (0.5f + synth_uniform(s))));
    }
    /* TQ2_0's values are q - 1 for 2-bit q, but ternary files hold only q 0..2 (ggml's quantiser): a random 3 (+2)
     * biases every row by +d/2, which washed the weights' signal out of the logits; 3 -> 1 (zero) is unbiased */
    for (size_t b = 0; type == INFER_TYPE_TQ2_0 && b + (size_t)qt->bytes <= nbytes; b += (size_t)qt->bytes)
        for (int k = 0; k < 64; k++) dst[b + k] &= (uint8_t)~((dst[b + k] & (dst[b + k] >> 1) & 0x55) << 1);
    /* TQ1_0 bytes as ggml's quantiser writes them: 5 (qh: 4, times 3) base-3 digits q packed as ceil(q * 256 /
     * 243); a file holds no other byte, so neither do ours */
    for (size_t b = 0; type == INFER_TYPE_TQ1_0 && b + (size_t)qt->bytes <= nbytes; b += (size_t)qt->bytes)
        for (int k = 0; k < 52; k++) {
            const uint32_t q = (uint32_t)(synth_next(s) % (k < 48 ? 243 : 81)) * (k < 48 ? 1 : 3);
            dst[b + k] = (uint8_t)((q * 256 + 242) / 243);
        }
    /* MXFP4's scale is a power of two 2^(e-128): e 119..121 puts |w| near 0.01 */
    for (size_t b = 0; type == INFER_TYPE_MXFP4 && b + (size_t)qt->bytes <= nbytes; b += (size_t)qt->bytes)
        dst[b] = (uint8_t)(119 + (int)(3.0f * synth_uniform(s)) % 3);
}

/* One value of a tensor of role r: norms near 1, ssm_a negative, the rest small gaussians. */
static float synth_value(enum arch_role r, uint64_t *s) {
    switch (r) {
    case ARCH_T_SSM_A: return -expf(synth_uniform(s) - 0.5f);
    case ARCH_T_SSM_DT_BIAS: return 0.1f * synth_gauss(s);
    case ARCH_T_SSM_CONV1D: return 0.05f * synth_gauss(s);
    case ARCH_T_TOKEN_EMBD: return 0.05f * synth_gauss(s);
    default: return arch_role_is_f32(r) && r != ARCH_T_FFN_GATE_INP && r != ARCH_T_FFN_GATE_INP_SHEXP
                        ? 1.0f + 0.05f * synth_gauss(s)
                        : 0.02f * synth_gauss(s);
    }
}

static uint64_t synth_stream(const struct synth_job *j, int64_t index) {
    return synth_mix(j->p->seed ^ synth_mix((uint64_t)index + 1));
}

/* mtp_agree: the roles whose output is added to the residual stream, written as zeros */
static int synth_agree_zero(enum arch_role r) {
    return r == ARCH_T_ATTN_OUT || r == ARCH_T_SSM_OUT || r == ARCH_T_FFN_DOWN || r == ARCH_T_FFN_DOWN_EXPS ||
           r == ARCH_T_FFN_DOWN_SHEXP;
}

/* mtp_agree: row r (of ne[1]) of the tensors whose values are set, not drawn. s is the tensor's stream. */
static void synth_agree_row(const struct synth_job *j, const struct arch_tensor *t, int64_t r, uint64_t *s,
                            float *row) {
    const int64_t n = t->ne[0], E = j->p->n_embd;
    switch (t->role) {
    case ARCH_T_NEXTN_ENORM:
        for (int64_t i = 0; i < n; i++) row[i] = 1.0f;
        break;
    case ARCH_T_NEXTN_SHARED_HEAD_NORM: { /* output_norm's own stream: the same values */
        uint64_t so = synth_stream(j, j->i_onorm);
        for (int64_t i = 0; i < n; i++) row[i] = synth_value(ARCH_T_OUTPUT_NORM, &so);
        break;
    }
    default: /* ARCH_T_NEXTN_EH_PROJ: [I + noise | 0] */
        for (int64_t i = 0; i < n; i++)
            row[i] = i < E ? (i == r ? 1.0f : 0.0f) + (j->p->mtp_noise > 0 ? j->p->mtp_noise * synth_gauss(s) : 0.0f)
                           : 0.0f;
        break;
    }
}

/* mtp_agree: output row next[z] = RMSNorm(E[z])*output_norm/sqrt(n_embd) for every non-control z (from the
 * float values token_embd and output_norm are quantised from); control tokens' rows stay zero. */
static infer_status synth_agree_output(const struct synth_job *j, const struct arch_tensor *t, int32_t type,
                                       uint8_t *dst, size_t nbytes) {
    const int64_t E = t->ne[0], V = t->ne[1];
    const size_t row_bytes = quant_row_bytes(type, E);
    float *on = xmalloc((size_t)E * sizeof *on);
    if (!on) return INFER_OOM("the output norm");
    uint64_t so = synth_stream(j, j->i_onorm), se = synth_stream(j, j->i_embd);
    for (int64_t i = 0; i < E; i++) on[i] = synth_value(ARCH_T_OUTPUT_NORM, &so);
    memset(dst, 0, nbytes);
    infer_status st = INFER_OK;
    for (int64_t z = 0; z < V; z++) {
        double ss = 0;
        for (int64_t i = 0; i < E; i++) {
            j->row[i] = synth_value(ARCH_T_TOKEN_EMBD, &se);
            ss += (double)j->row[i] * j->row[i];
        }
        if (j->next[z] < 0) continue;
        const double scale = 1.0 / sqrt(ss / (double)E + j->rms_eps) / sqrt((double)E);
        for (int64_t i = 0; i < E; i++) j->row[i] = (float)(j->row[i] * scale * on[i]);
        TRY(quant_quantize_row(type, j->row, dst + (size_t)j->next[z] * row_bytes, E));
    }
fail:
    xfree(on);
    return st;
}

static infer_status synth_fill(void *user, int64_t index, void *dst, size_t nbytes) {
    struct synth_job *j = user;
    if (index < 0 || index >= j->n) return infer_fail(INFER_E_INTERNAL, "synth: fill for tensor %lld", (long long)index);
    const struct arch_tensor *t = j->list[index];
    const int32_t type = j->types[index];
    const struct quant_type *qt = quant_type(type);
    uint64_t s = synth_stream(j, index);
    const int is_float = qt->blck == 1;
    const int agree_set = j->p->mtp_agree && (t->role == ARCH_T_NEXTN_ENORM || t->role == ARCH_T_NEXTN_EH_PROJ ||
                                              t->role == ARCH_T_NEXTN_SHARED_HEAD_NORM);
    if (j->p->mtp_agree && synth_agree_zero(t->role)) { /* zero bytes: zero scales, so 0.0 in every type */
        memset(dst, 0, nbytes);
        return INFER_OK;
    }
    if (j->p->mtp_agree && t->role == ARCH_T_OUTPUT) return synth_agree_output(j, t, type, dst, nbytes);
    /* mtp_agree: output is computed from token_embd's floats, so token_embd is never random blocks */
    const int random_ok = !(j->p->mtp_agree && t->role == ARCH_T_TOKEN_EMBD) && !agree_set;
    if ((j->p->random_blocks && !is_float && random_ok) || !qt->quantize) {
        synth_random_blocks(type, &s, dst, nbytes);
        return INFER_OK;
    }
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    const size_t row_bytes = quant_row_bytes(type, t->ne[0]);
    if (row_bytes * (size_t)rows != nbytes)
        return infer_fail(INFER_E_INTERNAL, "synth: %s: %zu bytes asked, expected %zu", t->name, nbytes,
                          row_bytes * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        if (agree_set) synth_agree_row(j, t, r, &s, j->row);
        else
            for (int64_t i = 0; i < t->ne[0]; i++) j->row[i] = synth_value(t->role, &s);
        infer_status st = quant_quantize_row(type, j->row, (uint8_t *)dst + (size_t)r * row_bytes, t->ne[0]);
        if (st != INFER_OK) return infer_fail_context(st, "synth: %s", t->name);
    }
    return INFER_OK;
}

/* ---- metadata ---- */

static infer_status synth_hparams(const struct arch_row *a, const struct synth_params *p, struct arch_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->n_vocab = p->n_vocab, hp->n_embd = p->n_embd, hp->n_layer = p->n_layer;
    hp->n_layer_nextn = ((a->flags & ARCH_F_MTP) && p->mtp) ? 1 : 0;
    hp->n_layer_all = hp->n_layer + hp->n_layer_nextn;
    hp->n_head = p->n_head, hp->n_head_kv = p->n_head_kv ? p->n_head_kv : p->n_head;
    hp->head_dim = hp->head_dim_v = p->head_dim ? p->head_dim : (p->n_head ? p->n_embd / p->n_head : 0);
    hp->n_rot = (a->flags & ARCH_F_PARTIAL_ROPE) ? hp->head_dim / 4 : hp->head_dim;
    hp->n_ff = p->n_ff;
    hp->n_expert = p->n_expert, hp->n_expert_used = p->n_expert_used, hp->n_ff_exp = p->n_ff_exp;
    hp->n_ff_shexp = p->n_ff_shexp;
    hp->d_conv = p->ssm_d_conv, hp->d_state = p->ssm_d_state, hp->n_group = p->ssm_n_group;
    hp->dt_rank = p->ssm_dt_rank, hp->d_inner = (int64_t)p->ssm_dt_rank * p->ssm_d_state;
    hp->full_attention_interval = p->full_attention_interval;
    hp->n_ctx_train = p->n_ctx_train;
    /* the real models' bases: llama3 5e5, qwen3 1e6, qwen3next / qwen3.5 1e7 */
    hp->rope_freq_base = a->id == ARCH_LLAMA ? 500000.0f : (a->flags & ARCH_F_HYBRID) ? 10000000.0f : 1000000.0f;
    hp->rms_eps = 1e-6f;
    /* M-RoPE sections in the proportions of the real [11, 11, 10, 0] (sum = n_rot/2) */
    int32_t half = (int32_t)(hp->n_rot / 2);
    hp->rope_sections[0] = half * 11 / 32, hp->rope_sections[1] = half * 11 / 32;
    hp->rope_sections[2] = half - 2 * (half * 11 / 32), hp->rope_sections[3] = 0;
    if (hp->n_embd < 1 || hp->n_layer < 1 || hp->n_head < 1 || hp->head_dim < 1 || hp->n_head % hp->n_head_kv)
        return infer_fail(INFER_E_ARG, "synth: inconsistent dims (n_embd %lld, n_layer %lld, n_head %lld/%lld)",
                          (long long)hp->n_embd, (long long)hp->n_layer, (long long)hp->n_head,
                          (long long)hp->n_head_kv);
    return INFER_OK;
}

static infer_status synth_keys(struct gguf_writer *w, const struct arch_row *a, const struct arch_hparams *hp,
                               int32_t ftype) {
    infer_status st = INFER_OK;
    char name[64], key[128];
    snprintf(name, sizeof name, "synth-%s", a->name);
    TRY(gguf_writer_set_str(w, "general.architecture", a->name));
    TRY(gguf_writer_set_str(w, "general.name", name));
    TRY(gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype));
    TRY(gguf_writer_set_u32(w, "general.quantization_version", 2));
    int nk;
    const struct arch_key *keys = arch_keys(&nk);
    for (int i = 0; i < nk; i++) {
        const struct arch_key *k = &keys[i];
        if (!(k->read & (1u << a->id)) || strcmp(k->suffix, "vocab_size") == 0) continue;
        snprintf(key, sizeof key, "%s.%s", a->name, k->suffix);
        const char *f = (const char *)hp + k->off;
        if (k->kind == ARCH_KEY_F32) {
            TRY(gguf_writer_set_f32(w, key, *(const float *)f));
        } else if (k->kind == ARCH_KEY_I32x4) {
            TRY(gguf_writer_set_arr(w, key, GGUF_I32, f, 4));
        } else {
            int64_t v = *(const int64_t *)f;
            int always = strcmp(k->suffix, "nextn_predict_layers") == 0;
            if (v > 0 || always) TRY(gguf_writer_set_u32(w, key, (uint32_t)v));
        }
    }
fail:
    return st;
}

static infer_status synth_tokenizer(struct gguf_writer *w, const struct arch_row *a, const struct synth_vocab *v) {
    infer_status st = INFER_OK;
    TRY(gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    TRY(gguf_writer_set_str(w, "tokenizer.ggml.pre", a->tok_pre));
    TRY(gguf_writer_set_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (uint64_t)v->n_vocab));
    TRY(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, v->types, (uint64_t)v->n_vocab));
    TRY(gguf_writer_set_str_arr(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (uint64_t)v->n_merges));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad));
    TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", a->id == ARCH_LLAMA));
fail:
    return st;
}

/* ---- writing ---- */

/* mtp_agree: next[] as one cycle through the non-control tokens in a seeded shuffled order (Fisher-Yates). */
static infer_status synth_agree_cycle(const struct synth_params *p, const struct synth_vocab *v, struct synth_job *j) {
    int32_t *order = xmalloc((size_t)v->n_vocab * sizeof *order);
    j->next = xmalloc((size_t)v->n_vocab * sizeof *j->next);
    if (!order || !j->next) {
        xfree(order);
        return INFER_OOM("the bigram cycle");
    }
    int64_t n = 0;
    for (int64_t x = 0; x < v->n_vocab; x++) {
        j->next[x] = -1;
        if (v->types[x] == 1) order[n++] = (int32_t)x;
    }
    uint64_t s = synth_mix(p->seed ^ 0x6d7470ull);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t k = (int64_t)(synth_next(&s) % (uint64_t)(i + 1));
        int32_t t = order[i];
        order[i] = order[k], order[k] = t;
    }
    for (int64_t i = 0; i < n; i++) j->next[order[i]] = order[(i + 1) % n];
    xfree(order);
    return INFER_OK;
}

infer_status synth_write(const struct synth_params *params, const char *path) {
    infer_status st = INFER_OK;
    struct synth_params p;
    struct arch_hparams hp;
    struct arch_tensor *all = NULL;
    int64_t n_all = 0;
    struct synth_vocab vocab = {0};
    struct gguf_writer *w = NULL;
    struct synth_job job = {0};
    if (!params || !path) return infer_fail(INFER_E_ARG, "synth_write: NULL argument");
    const struct arch_row *a = arch_find(params->arch);
    if (!a) return infer_fail(INFER_E_ARG, "synth: unknown architecture '%s'", params->arch ? params->arch : "(null)");
    const int32_t ftype = ftype_by_name(params->ftype ? params->ftype : "F32");
    if (ftype < 0) return infer_fail(INFER_E_ARG, "synth: unknown file type '%s'", params->ftype);
    /* zero fields take the arch's small defaults */
    TRY(synth_params_default(a->name, &p));
#define SYNTH_TAKE(f) if (params->f) p.f = params->f
    SYNTH_TAKE(n_vocab); SYNTH_TAKE(n_embd); SYNTH_TAKE(n_layer); SYNTH_TAKE(n_head); SYNTH_TAKE(n_head_kv);
    SYNTH_TAKE(head_dim); SYNTH_TAKE(n_ff); SYNTH_TAKE(n_expert); SYNTH_TAKE(n_expert_used); SYNTH_TAKE(n_ff_exp);
    SYNTH_TAKE(n_ff_shexp); SYNTH_TAKE(ssm_d_state); SYNTH_TAKE(ssm_n_group); SYNTH_TAKE(ssm_dt_rank);
    SYNTH_TAKE(ssm_d_conv); SYNTH_TAKE(full_attention_interval); SYNTH_TAKE(n_ctx_train);
#undef SYNTH_TAKE
    p.ftype = params->ftype, p.mtp = params->mtp, p.random_blocks = params->random_blocks;
    p.sparse = params->sparse;
    p.seed = params->seed, p.tied = params->tied;
    p.mtp_agree = params->mtp_agree || params->mtp_noise > 0, p.mtp_noise = params->mtp_noise;
    if (p.mtp_agree) {
        if (!(a->flags & ARCH_F_MTP))
            return infer_fail(INFER_E_ARG, "synth: mtp_agree needs an arch with an MTP layer, not '%s'", a->name);
        if (!(p.mtp_noise >= 0 && p.mtp_noise < 100))
            return infer_fail(INFER_E_ARG, "synth: mtp_noise %g, expected 0..100", (double)p.mtp_noise);
        p.mtp = 1;
        p.tied = 0; /* the bigram table lives in output.weight */
    }
    TRY(synth_hparams(a, &p, &hp));
    TRY(arch_tensors(a, &hp, &all, &n_all));
    TRY(synth_vocab_make(a, hp.n_vocab, &vocab));
    TRY(gguf_writer_create(&w));
    TRY(synth_keys(w, a, &hp, ftype));
    TRY(synth_tokenizer(w, a, &vocab));

    job.p = &p;
    job.list = xcalloc((size_t)n_all, sizeof *job.list);
    job.types = xcalloc((size_t)n_all, sizeof *job.types);
    int64_t max_ne0 = 1;
    for (int64_t i = 0; i < n_all; i++) max_ne0 = all[i].ne[0] > max_ne0 ? all[i].ne[0] : max_ne0;
    job.row = xmalloc((size_t)max_ne0 * sizeof(float));
    if (!job.list || !job.types || !job.row) {
        st = INFER_OOM("the synth tensor table");
        goto fail;
    }
    const struct ftype_model fm = {(int32_t)hp.n_layer_all, (int32_t)(hp.n_head / hp.n_head_kv),
                                   (int32_t)hp.n_expert, p.tied, hp.n_ff_shexp > 0};
    for (int64_t i = 0; i < n_all; i++) {
        const struct arch_tensor *t = &all[i];
        int wanted = t->required || (t->role == ARCH_T_OUTPUT && !p.tied) || t->role == ARCH_T_NEXTN_SHARED_HEAD_NORM;
        if (!wanted) continue;
        int32_t type = ftype_tensor_type(ftype, t->name, t->n_dims, t->ne, &fm);
        /* mtp_agree: eh_proj is F16 in every quantised file. The bare identity would survive Q4_K (max error
         * 4e-4), but the noise would not: Q4_K / Q6_K / Q8_0 add errors up to 0.04 / 0.014 / 0.004 to a
         * sigma 0.19 block, so the agreement a sigma gives would depend on the file type. F16 holds 0 and 1
         * exactly and that noise to 2e-4. */
        if (p.mtp_agree && t->role == ARCH_T_NEXTN_EH_PROJ && ftype != FTYPE_F32) type = INFER_TYPE_F16;
        if (t->role == ARCH_T_TOKEN_EMBD) job.i_embd = job.n;
        if (t->role == ARCH_T_OUTPUT_NORM) job.i_onorm = job.n;
        job.list[job.n] = t;
        job.types[job.n++] = type;
        TRY(gguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, NULL));
    }
    job.rms_eps = hp.rms_eps;
    if (p.mtp_agree) TRY(synth_agree_cycle(&p, &vocab, &job));
    if (p.sparse)
        TRY(gguf_writer_write_sparse(w, path));
    else
        TRY(gguf_writer_write(w, path, synth_fill, &job));
fail:
    gguf_writer_free(w);
    synth_vocab_free(&vocab);
    xfree(job.list);
    xfree(job.types);
    xfree(job.row);
    xfree(job.next);
    xfree(all);
    return st;
}
