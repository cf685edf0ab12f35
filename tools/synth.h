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
    int sparse;           /* 1: no tensor data written; the file is extended to its length (gguf_writer_write_sparse) */
    uint64_t seed;
    /* dims; 0 = the arch's small default */
    int32_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int32_t ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_conv, full_attention_interval;
    int32_t n_ctx_train;
    int tied;             /* 1: no output.weight (LM head tied to token_embd) */
    /* 1: a model whose MTP head agrees with the main model (implies mtp, untied). Every output projection
     * (attn_output, ssm_out, ffn_down, ffn_down_exps, ffn_down_shexp) is zero, so the residual stream stays
     * the token embedding and the main model is a bigram table: next(x) = argmax output*(RMSNorm(E[x])*
     * output_norm). output's rows are those normed embeddings scaled by 1/sqrt(n_embd) and permuted along
     * one cycle of the non-control tokens, so greedy decoding walks the whole vocabulary instead of a short
     * loop. nextn.eh_proj passes the embedding half through (identity, hidden half zero), nextn.enorm is
     * all ones and nextn.shared_head_norm equals output_norm: the MTP head computes the same table. */
    int mtp_agree;
    /* >0: gaussian noise of this standard deviation on eh_proj's pass-through block (implies mtp_agree),
     * which makes the MTP disagree on some tokens. The fraction of tokens on which it still agrees (= the
     * acceptance per drafted token, as greedy decoding walks the whole cycle) is ~Phi(1/sigma - sqrt(2 ln V)),
     * nearly independent of n_embd. Measured (float64, tests/test-synth.c): vocab 640: 0.1 -> 1.00,
     * 0.2 -> 0.96, 0.3 -> 0.61; vocab 4096 (n_embd 1024): 0.2 -> 0.87, 0.3 -> 0.29; vocab 32000
     * (qwen35moe-1b): 0.15 -> 0.985, 0.18 -> 0.90, 0.19 -> 0.85, 0.20 -> 0.78, 0.22 -> 0.59. */
    float mtp_noise;
};

/* Small defaults for an arch (a model that runs in milliseconds on a CPU). INFER_E_ARG for an unknown arch. */
infer_status synth_params_default(const char *arch, struct synth_params *p);
/* Real shapes by name: llama3-8b, qwen3-0.6b, qwen3-8b, qwen3-30b-a3b, qwen35-0.8b, qwen35-9b,
 * qwen35-27b, qwen35-35b-a3b, qwen3next-80b-a3b, and qwen35moe-1b (the MTP benchmark's Qwen3.5-MoE shape:
 * n_embd 1024, 16 layers, 64 experts top-8 of ff 256 + a shared ff 256, vocab 32000, attention 8/2 heads
 * of 256, GDN d_state 128 Hk 16 Hv 16: 1,040,405,376 parameters (335,762,304 active per token),
 * 1,101,032,832 with --mtp).
 * Fills p (keeps ftype/mtp/seed/random_blocks/sparse/mtp_agree/mtp_noise). */
infer_status synth_preset(const char *name, struct synth_params *p);
/* Writes the model to path. */
infer_status synth_write(const struct synth_params *p, const char *path);

#endif
