/* synth: synthetic GGUF models with random weights and real shapes, for tests and benchmarks.
 *
 * The tensor list comes from the architecture table (lib/arch.h), so what synth writes is exactly
 * what the loader checks. Weights are drawn from a seeded generator and quantised with our own
 * quantisers into the tensor-type mix of a Q4_K_M, Q8_0, F16 or F32 file (which tensors get which
 * type follows llama-quantize's rules), or, with random_blocks, written directly as random valid
 * quantised blocks (seconds for an 8B-27B shape). The vocabulary is a small valid byte-level BPE. */
#ifndef INFER_SYNTH_H
#define INFER_SYNTH_H

#include <stdint.h>

#include "status.h"

struct synth_params {
    const char *arch;     /* llama qwen3 qwen3moe qwen3next qwen35 qwen35moe */
    const char *ftype;    /* "F32" "F16" "Q8_0" "Q4_K_M" */
    int mtp;              /* 1: add the MTP (nextn) layer (qwen3next, qwen35, qwen35moe) */
    int random_blocks;    /* 1: random valid blocks instead of quantising random floats */
    uint64_t seed;
    /* dims; 0 = the arch's small default */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int32_t ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_conv, full_attention_interval;
    int32_t n_ctx_train;
    int tied;             /* 1: no output.weight (LM head tied to token_embd) */
};

/* Small defaults for an arch (a model that runs in milliseconds on a CPU). INFER_E_ARG for an unknown arch. */
infer_status synth_params_default(const char *arch, struct synth_params *p);
/* Real shapes by name: llama3-8b, qwen3-0.6b, qwen3-8b, qwen3-30b-a3b, qwen35-0.8b, qwen35-9b,
 * qwen35-27b, qwen35-35b-a3b, qwen3next-80b-a3b. Fills p (keeps ftype/mtp/seed/random_blocks). */
infer_status synth_preset(const char *name, struct synth_params *p);
/* Writes the model to path. */
infer_status synth_write(const struct synth_params *p, const char *path);

#endif
