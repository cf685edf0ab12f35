/* ftype: llama-quantize's default per-tensor type rules (no imatrix) for the file types we write.
 *
 * Order of the decision, as in llama.cpp's llama-quant.cpp (llama_tensor_get_type_impl):
 *   1. not quantisable (1-D, *_norm.weight, routers, ssm_conv1d, names not ending in "weight") -> F32;
 *   2. float ftypes: every quantisable tensor gets the ftype's float type (no further rules);
 *   3. quantised ftypes start from the default type (Q3_K_S/M/L -> Q3_K, Q4_K_M -> Q4_K, IQ2_S -> IQ2_XS,
 *      IQ2_M -> IQ2_S, IQ3_XS/S/M -> IQ3_S, ...), then:
 *      output.weight (or token_embd when tied) -> Q6_K (Q5_K for the IQ1/IQ2 types and IQ3_XXS) unless the
 *      default is Q8_0 or ne0 is not a multiple of the default's block (-> Q8_0); an untied token_embd
 *      -> Q2_K (IQ1_S/M, IQ2_XXS/XS), IQ3_S (IQ2_S/M, IQ3_XXS) or Q4_K (TQ1_0/TQ2_0); the IQ1/IQ2 types
 *      then have their own small rule set (ftype_iq2_rules); for the others attn_v-like tensors (attn_v,
 *      attn_qkv, attn_kv_b), attn_k, attn_q, ffn_up/gate, ffn_down and attn_output get the per-ftype bumps
 *      of docs/quant.md §6; with exactly 8 experts attn_v and attn_k -> Q8_0 and attn_output -> Q5_K (not
 *      for Q3_K_L, Q2_K_S, TQ or the legacy types). IQ3_XXS takes llama.cpp's rules without an imatrix
 *      (attn_v -> IQ3_S, ffn_down -> Q4_K/Q3_K), which llama-quantize itself only ever applies in a dry run:
 *      it refuses IQ3_XXS tensors without an imatrix;
 *      MXFP4_MOE instead: output.weight (or the tied token_embd) -> Q8_0, expert tensors (ne2 > 1) ->
 *      MXFP4, every other quantisable tensor -> Q8_0, with no further rule;
 *   4. fallback when ne0 % 256 != 0 for a 256-block type: Q2_K, Q3_K, TQ1_0, TQ2_0 -> Q4_0, Q4_K -> Q5_0,
 *      Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS and the IQ1/IQ2/IQ3 types -> IQ4_NL; then F16 if even that block
 *      does not divide ne0.
 * The layer index the rules use is the block number in the name: llama-quantize walks tensors in
 * layer order and every architecture here has exactly one attn_v-like tensor and (dense) one ffn_down
 * per block, so its counters equal it. Not reproduced: the 70B rule (llama.cpp's model type 70B puts
 * Q3_K/Q4_K attn_v at Q5_K) and Falcon's rules; none of our architectures has them.
 */
#include "ftype.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "../include/infer.h"

static const struct {
    int32_t id;
    const char *name, *desc;
    int32_t base;
} ftype_table[] = {
    {FTYPE_F32, "F32", "all F32", INFER_TYPE_F32},
    {FTYPE_F16, "F16", "F16", INFER_TYPE_F16},
    {FTYPE_BF16, "BF16", "BF16", INFER_TYPE_BF16},
    {FTYPE_Q8_0, "Q8_0", "Q8_0", INFER_TYPE_Q8_0},
    {FTYPE_Q4_0, "Q4_0", "Q4_0", INFER_TYPE_Q4_0},
    {FTYPE_Q4_1, "Q4_1", "Q4_1", INFER_TYPE_Q4_1},
    {FTYPE_Q5_0, "Q5_0", "Q5_0", INFER_TYPE_Q5_0},
    {FTYPE_Q5_1, "Q5_1", "Q5_1", INFER_TYPE_Q5_1},
    {FTYPE_Q2_K, "Q2_K", "Q2_K - Medium", INFER_TYPE_Q2_K},
    {FTYPE_Q3_K_S, "Q3_K_S", "Q3_K - Small", INFER_TYPE_Q3_K},
    {FTYPE_Q3_K_M, "Q3_K_M", "Q3_K - Medium", INFER_TYPE_Q3_K},
    {FTYPE_Q3_K_L, "Q3_K_L", "Q3_K - Large", INFER_TYPE_Q3_K},
    {FTYPE_Q4_K_M, "Q4_K_M", "Q4_K - Medium", INFER_TYPE_Q4_K},
    {FTYPE_Q6_K, "Q6_K", "Q6_K", INFER_TYPE_Q6_K},
    {FTYPE_MXFP4_MOE, "MXFP4_MOE", "MXFP4 MoE", INFER_TYPE_MXFP4},
    {FTYPE_IQ4_NL, "IQ4_NL", "IQ4_NL - 4.5 bpw", INFER_TYPE_IQ4_NL},
    {FTYPE_IQ4_XS, "IQ4_XS", "IQ4_XS - 4.25 bpw", INFER_TYPE_IQ4_XS},
    /* no quantiser here for the IQ / TQ types: `llm-gguf synth` writes these with random blocks */
    {FTYPE_Q2_K_S, "Q2_K_S", "Q2_K - Small", INFER_TYPE_Q2_K},
    {FTYPE_IQ2_XXS, "IQ2_XXS", "IQ2_XXS - 2.0625 bpw", INFER_TYPE_IQ2_XXS},
    {FTYPE_IQ2_XS, "IQ2_XS", "IQ2_XS - 2.3125 bpw", INFER_TYPE_IQ2_XS},
    {FTYPE_IQ2_S, "IQ2_S", "IQ2_S - 2.5 bpw", INFER_TYPE_IQ2_XS}, /* sic: IQ2_S files are mostly IQ2_XS */
    {FTYPE_IQ2_M, "IQ2_M", "IQ2_M - 2.7 bpw", INFER_TYPE_IQ2_S},
    {FTYPE_IQ3_XXS, "IQ3_XXS", "IQ3_XXS - 3.0625 bpw", INFER_TYPE_IQ3_XXS},
    {FTYPE_IQ3_XS, "IQ3_XS", "IQ3_XS - 3.3 bpw", INFER_TYPE_IQ3_S},
    {FTYPE_IQ3_S, "IQ3_S", "IQ3_S - 3.4375 bpw", INFER_TYPE_IQ3_S},
    {FTYPE_IQ3_M, "IQ3_M", "IQ3_S mix - 3.66 bpw", INFER_TYPE_IQ3_S},
    {FTYPE_IQ1_S, "IQ1_S", "IQ1_S - 1.5625 bpw", INFER_TYPE_IQ1_S},
    {FTYPE_IQ1_M, "IQ1_M", "IQ1_M - 1.75 bpw", INFER_TYPE_IQ1_M},
    {FTYPE_TQ1_0, "TQ1_0", "TQ1_0 - 1.69 bpw ternary", INFER_TYPE_TQ1_0},
    {FTYPE_TQ2_0, "TQ2_0", "TQ2_0 - 2.06 bpw ternary", INFER_TYPE_TQ2_0},
};
#define FTYPE_N ((int)(sizeof ftype_table / sizeof ftype_table[0]))

int32_t ftype_by_name(const char *name) {
    for (int i = 0; name && i < FTYPE_N; i++)
        if (strcasecmp(name, ftype_table[i].name) == 0) return ftype_table[i].id;
    return -1;
}

const char *ftype_name(int32_t ftype) {
    for (int i = 0; i < FTYPE_N; i++)
        if (ftype_table[i].id == ftype) return ftype_table[i].name;
    return NULL;
}

const char *ftype_desc(int32_t ftype) {
    for (int i = 0; i < FTYPE_N; i++)
        if (ftype_table[i].id == ftype) return ftype_table[i].desc;
    return NULL;
}

const char *ftype_names(void) {
    return "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_M Q6_K MXFP4_MOE IQ4_NL IQ4_XS "
           "Q2_K_S IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M IQ1_S IQ1_M TQ1_0 TQ2_0";
}

static int32_t ftype_base(int32_t ftype) {
    for (int i = 0; i < FTYPE_N; i++)
        if (ftype_table[i].id == ftype) return ftype_table[i].base;
    return -1;
}

static int ftype_has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static int ftype_ends(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

static int ftype_quantisable(const char *name, int n_dims, const int64_t *ne) {
    int dims = n_dims;
    while (dims > 1 && ne[dims - 1] == 1) dims--; /* ggml_n_dims: trailing 1s do not count */
    if (dims < 2) return 0;
    if (!ftype_ends(name, "weight")) return 0;
    if (ftype_has(name, "_norm.weight") || ftype_has(name, "ffn_gate_inp.weight") ||
        ftype_has(name, "ffn_gate_inp_shexp.weight") || ftype_has(name, "ssm_conv1d.weight"))
        return 0;
    return 1;
}

/* llama.cpp's use_more_bits: the first and last eighth and every third layer in between. */
static int ftype_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int ftype_blck(int32_t t) {
    switch (t) {
    case INFER_TYPE_Q4_K: case INFER_TYPE_Q5_K: case INFER_TYPE_Q6_K: case INFER_TYPE_Q2_K: case INFER_TYPE_Q3_K:
    case INFER_TYPE_IQ4_XS:
    case INFER_TYPE_IQ2_XXS:
    case INFER_TYPE_IQ2_XS:
    case INFER_TYPE_IQ2_S:
    case INFER_TYPE_IQ3_XXS:
    case INFER_TYPE_IQ3_S:
    case INFER_TYPE_IQ1_S:
    case INFER_TYPE_IQ1_M:
    case INFER_TYPE_TQ1_0:
    case INFER_TYPE_TQ2_0:
        return 256;
    case INFER_TYPE_F32: case INFER_TYPE_F16: case INFER_TYPE_BF16:
        return 1;
    default:
        return 32;
    }
}

/* llama.cpp gives the IQ1 / IQ2 file types their own rule set, checked before the common one. */
static int ftype_iq2_group(int32_t f) {
    return f == FTYPE_IQ2_XXS || f == FTYPE_IQ2_XS || f == FTYPE_IQ2_S || f == FTYPE_IQ2_M ||
           f == FTYPE_IQ1_S || f == FTYPE_IQ1_M;
}

/* The IQ1 / IQ2 rule set, for tensors other than the head and token_embd. Its ffn_down rule counts ffn_down
 * tensors in llama-quantize's walk order (by block, then by name: ffn_down_exps before ffn_down_shexp), not
 * blocks, so with a shared expert only the first n/16 blocks are bumped. */
static int32_t ftype_iq2_rules(int32_t ftype, int32_t t, const char *name, int layer,
                               const struct ftype_model *m) {
    const int e8 = m->n_expert == 8, iq2s = ftype == FTYPE_IQ2_S || ftype == FTYPE_IQ2_M;
    if (ftype_has(name, "attn_v.weight") || ftype_has(name, "attn_qkv.weight") ||
        ftype_has(name, "attn_kv_b.weight"))
        return m->n_gqa >= 4 || m->n_expert >= 4 ? INFER_TYPE_Q4_K
               : iq2s                            ? INFER_TYPE_IQ3_S
                                                 : INFER_TYPE_Q2_K;
    if (ftype_has(name, "attn_k.weight")) return e8 ? INFER_TYPE_Q4_K : t;
    if (ftype_has(name, "ffn_down")) {
        const int per_block = m->n_expert > 0 && m->shexp ? 2 : 1;
        const int i_down = layer * per_block + (per_block == 2 && ftype_has(name, "ffn_down_shexp"));
        return layer >= 0 && i_down < m->n_layer / 8 ? (iq2s ? INFER_TYPE_IQ3_S : INFER_TYPE_Q2_K) : t;
    }
    if (ftype_has(name, "attn_output.weight")) {
        if (e8) return INFER_TYPE_Q5_K;
        if (ftype == FTYPE_IQ1_S || ftype == FTYPE_IQ1_M) return INFER_TYPE_IQ2_XXS;
        if (iq2s) return INFER_TYPE_IQ3_S;
    }
    return t;
}

int32_t ftype_tensor_type(int32_t ftype, const char *name, int n_dims, const int64_t *ne, const struct ftype_model *m) {
    int32_t base = ftype_base(ftype);
    if (base < 0 || !ftype_quantisable(name, n_dims, ne)) return INFER_TYPE_F32;
    if (base == INFER_TYPE_F32 || base == INFER_TYPE_F16 || base == INFER_TYPE_BF16) return base;

    int32_t t = base;
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1) layer = -1;
    const int n = m->n_layer, e8 = m->n_expert == 8, gqa4 = m->n_gqa >= 4;
    const int head = strcmp(name, "output.weight") == 0 || (m->tied && strcmp(name, "token_embd.weight") == 0);
    const int embd = !head && strcmp(name, "token_embd.weight") == 0;
    if (ftype == FTYPE_MXFP4_MOE) {
        t = !head && n_dims >= 3 && ne[2] > 1 ? INFER_TYPE_MXFP4 : INFER_TYPE_Q8_0;
    } else if (head) {
        if (ne[0] % ftype_blck(base) != 0) t = INFER_TYPE_Q8_0;
        else if (ftype_iq2_group(ftype) || ftype == FTYPE_IQ3_XXS)
            t = INFER_TYPE_Q5_K;
        else if (t != INFER_TYPE_Q8_0) t = INFER_TYPE_Q6_K;
    } else if (embd) {
        if (ftype == FTYPE_IQ2_XXS || ftype == FTYPE_IQ2_XS || ftype == FTYPE_IQ1_S || ftype == FTYPE_IQ1_M)
            t = INFER_TYPE_Q2_K;
        else if (ftype == FTYPE_IQ2_S || ftype == FTYPE_IQ2_M || ftype == FTYPE_IQ3_XXS)
            t = INFER_TYPE_IQ3_S;
        else if (ftype == FTYPE_TQ1_0 || ftype == FTYPE_TQ2_0)
            t = INFER_TYPE_Q4_K;
    } else if (ftype_iq2_group(ftype)) {
        t = ftype_iq2_rules(ftype, t, name, layer, m);
    } else if (ftype_has(name, "attn_v.weight") || ftype_has(name, "attn_qkv.weight") ||
               ftype_has(name, "attn_kv_b.weight")) {
        if (ftype == FTYPE_Q2_K)
            t = gqa4 ? INFER_TYPE_Q4_K : INFER_TYPE_Q3_K;
        else if (ftype == FTYPE_Q2_K_S && gqa4)
            t = INFER_TYPE_Q4_K;
        else if (ftype == FTYPE_IQ3_XXS)
            t = gqa4 ? INFER_TYPE_Q4_K : INFER_TYPE_IQ3_S; /* without an imatrix */
        else if ((ftype == FTYPE_IQ3_XS || ftype == FTYPE_IQ3_S) && gqa4)
            t = INFER_TYPE_Q4_K;
        else if (ftype == FTYPE_IQ3_M)
            t = INFER_TYPE_Q4_K;
        else if (ftype == FTYPE_Q3_K_M) t = layer >= 0 && layer < 2 ? INFER_TYPE_Q5_K : INFER_TYPE_Q4_K;
        else if (ftype == FTYPE_Q3_K_L) t = INFER_TYPE_Q5_K;
        else if (ftype == FTYPE_Q4_K_M && layer >= 0 && ftype_more_bits(layer, n)) t = INFER_TYPE_Q6_K;
        else if ((ftype == FTYPE_IQ4_NL || ftype == FTYPE_IQ4_XS) && gqa4) t = INFER_TYPE_Q5_K;
        if (e8) t = INFER_TYPE_Q8_0;
    } else if (ftype_has(name, "attn_k.weight")) {
        if (e8) t = INFER_TYPE_Q8_0;
        else if (ftype == FTYPE_IQ3_XS)
            t = INFER_TYPE_IQ3_XXS;
        else if (ftype == FTYPE_IQ3_XXS)
            t = INFER_TYPE_IQ2_S;
    } else if (ftype_has(name, "attn_q.weight")) {
        if (ftype == FTYPE_IQ3_XS)
            t = INFER_TYPE_IQ3_XXS;
        else if (ftype == FTYPE_IQ3_XXS)
            t = INFER_TYPE_IQ2_S;
    } else if (ftype_has(name, "attn_output.weight")) {
        if (e8) {
            if (ftype == FTYPE_Q2_K || ftype == FTYPE_Q3_K_S || ftype == FTYPE_Q3_K_M ||
                ftype == FTYPE_Q4_K_M || ftype == FTYPE_IQ3_XXS || ftype == FTYPE_IQ3_XS ||
                ftype == FTYPE_IQ3_S || ftype == FTYPE_IQ3_M || ftype == FTYPE_IQ4_NL || ftype == FTYPE_IQ4_XS)
                t = INFER_TYPE_Q5_K;
        } else if (ftype == FTYPE_Q2_K) {
            t = INFER_TYPE_Q3_K;
        } else if (ftype == FTYPE_IQ3_XXS) {
            t = INFER_TYPE_IQ3_S;
        } else if (ftype == FTYPE_Q3_K_M || ftype == FTYPE_IQ3_M) {
            t = INFER_TYPE_Q4_K;
        } else if (ftype == FTYPE_Q3_K_L) {
            t = INFER_TYPE_Q5_K;
        }
    } else if (ftype_has(name, "ffn_up") || ftype_has(name, "ffn_gate")) {
        if (ftype == FTYPE_IQ3_XS && layer >= n / 8 && layer < 7 * n / 8) t = INFER_TYPE_IQ3_XXS;
    } else if (ftype_has(name, "ffn_down")) {
        const int first8 = layer >= 0 && layer < n / 8;
        if (ftype == FTYPE_Q2_K) t = INFER_TYPE_Q3_K;
        else if (ftype == FTYPE_Q2_K_S && first8)
            t = INFER_TYPE_Q4_K;
        else if (ftype == FTYPE_IQ3_XXS)
            t = first8 ? INFER_TYPE_Q4_K : INFER_TYPE_Q3_K; /* without an imatrix */
        else if (ftype == FTYPE_Q3_K_M) t = layer >= 0 && layer < n / 16 ? INFER_TYPE_Q5_K : INFER_TYPE_Q4_K;
        else if (ftype == FTYPE_IQ3_M && (first8 || (e8 && layer >= 0 && ftype_more_bits(layer, n))))
            t = INFER_TYPE_Q4_K;
        else if (ftype == FTYPE_Q3_K_L) t = INFER_TYPE_Q5_K;
        else if (ftype == FTYPE_Q4_K_M && layer >= 0 && ftype_more_bits(layer, n)) t = INFER_TYPE_Q6_K;
        else if ((ftype == FTYPE_IQ4_NL || ftype == FTYPE_IQ4_XS) && first8) t = INFER_TYPE_Q5_K; /* without an imatrix */
    }

    if (ftype_blck(t) == 256 && ne[0] % 256 != 0) {
        switch (t) {
        case INFER_TYPE_Q4_K: t = INFER_TYPE_Q5_0; break;
        case INFER_TYPE_Q5_K: t = INFER_TYPE_Q5_1; break;
        case INFER_TYPE_Q6_K: t = INFER_TYPE_Q8_0; break;
        case INFER_TYPE_Q2_K:
        case INFER_TYPE_Q3_K:
        case INFER_TYPE_TQ1_0:
        case INFER_TYPE_TQ2_0:
            t = INFER_TYPE_Q4_0;
            break;
        default:
            t = INFER_TYPE_IQ4_NL;
            break; /* IQ4_XS and the IQ1 / IQ2 / IQ3 types */
        }
    }
    if (ne[0] % ftype_blck(t) != 0) t = INFER_TYPE_F16;
    return t;
}
