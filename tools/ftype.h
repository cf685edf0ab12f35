/* ftype: which tensor gets which type in a file of a given llama.cpp file type (llama-quantize's
 * default rules without an imatrix; docs/quant.md §6). Shared by
 * `llm-gguf synth` and `llm-gguf quantize`. */
#ifndef INFER_FTYPE_H
#define INFER_FTYPE_H

#include <stdint.h>

/* llama_ftype ids (general.file_type) */
enum {
    FTYPE_F32 = 0,
    FTYPE_F16 = 1,
    FTYPE_Q4_0 = 2,
    FTYPE_Q4_1 = 3,
    FTYPE_Q8_0 = 7,
    FTYPE_Q5_0 = 8,
    FTYPE_Q5_1 = 9,
    FTYPE_Q2_K = 10,
    FTYPE_Q3_K_S = 11,
    FTYPE_Q3_K_M = 12,
    FTYPE_Q3_K_L = 13,
    FTYPE_Q4_K_M = 15,
    FTYPE_Q6_K = 18,
    FTYPE_IQ2_XXS = 19,
    FTYPE_IQ2_XS = 20,
    FTYPE_Q2_K_S = 21,
    FTYPE_IQ3_XS = 22,
    FTYPE_IQ3_XXS = 23,
    FTYPE_IQ1_S = 24,
    FTYPE_IQ4_NL = 25,
    FTYPE_IQ3_S = 26,
    FTYPE_IQ3_M = 27,
    FTYPE_IQ2_S = 28,
    FTYPE_IQ2_M = 29,
    FTYPE_IQ4_XS = 30,
    FTYPE_IQ1_M = 31,
    FTYPE_BF16 = 32,
    FTYPE_TQ1_0 = 36,
    FTYPE_TQ2_0 = 37,
    FTYPE_MXFP4_MOE = 38
};

/* llama-quantize's name ("Q3_K_M", case-insensitive) -> ftype id; -1 if unknown. */
int32_t ftype_by_name(const char *name);
/* The short name ("Q3_K_M"), or NULL for an id we do not write. */
const char *ftype_name(int32_t ftype);
/* llama.cpp's description (llama_model_ftype_name: "Q3_K - Medium", "all F32"), or NULL. */
const char *ftype_desc(int32_t ftype);
/* The names we write, space-separated, for usage messages. */
const char *ftype_names(void);

struct ftype_model {
    int32_t n_layer;   /* trunk layers + MTP layers (block_count) */
    int32_t n_gqa;     /* n_head / n_head_kv */
    int32_t n_expert;  /* 0 for dense */
    int tied;          /* token_embd doubles as the LM head */
    int shexp;         /* each MoE block also has a shared expert: two ffn_down tensors per block */
};

/* The type tensor `name` of shape ne (n_dims) gets. Norms, biases, routers, ssm_conv1d, ssm_a, ssm_dt
 * and 1-D tensors stay F32; a row length not divisible by the chosen block falls back like llama.cpp. */
int32_t ftype_tensor_type(int32_t ftype, const char *name, int n_dims, const int64_t *ne, const struct ftype_model *m);

#endif
