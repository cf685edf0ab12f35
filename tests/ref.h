/* ref: float64 references of the ops (ref_<op>), written from the formulas in
 * docs/quant.md §3 and ggml's op definitions, independent of lib/cpu
 * (own block decoders, own f16 conversion through _Float16). Shapes follow kernels/kernels.h.
 */
#ifndef TEST_REF_H
#define TEST_REF_H

#include <stdint.h>

#include "kernels.h"

/* Exact half -> double, and f32 -> nearest-even half/bf16 -> double (the rounding ggml applies to
 * activations dotted with F16 / BF16 weights). */
double ref_f16(uint16_t h);
double ref_round_f16(float x);
double ref_round_bf16(float x);
/* Dequantises n elements (a multiple of the block size) of any type cpu_mmv supports, plus Q8_0, Q8_1 and
 * Q8_K activation blocks, into double. Returns 0, or -1 for an unknown type. */
int ref_dequant(int32_t type, const void *src, double *dst, int64_t n);
/* Bytes of a row of n elements of type, 0 if unknown. */
size_t ref_row_bytes(int32_t type, int64_t n);

/* y[t][r] = Σ_c W[r][c] · X[t][c] with the dequantised weight rows and the activations as the backend
 * sees them; the epilogue applied in double. yabs[t][r] = Σ |W||X| (the scale of the rounding error),
 * may be NULL. act_type: a block type of xq rows (Q8_0, Q8_1, Q8_K: the CPU's), REF_ACT_Q8_SPLIT for
 * CUDA's q8 split layout of all n_tokens rows (kernels.h), -1 for f32 x rounded like F16 / BF16 weights
 * (ggml's CPU dots), REF_ACT_F32 for x exactly as given. */
enum { REF_ACT_F32 = -2, REF_ACT_Q8_SPLIT = -3 };
void ref_mmv(const struct mm_args *a, int32_t act_type, double *y, double *yabs);
/* RMSNorm, times w, times silu(gate) when gate is set. */
void ref_norm(const struct norm_args *a, double *y);
void ref_rope(const struct rope_args *a, const float *x_in, double *y);
void ref_act(const struct act_args *a, double *y);
/* Attention over the dequantised cells (a->kv_type) with q as given, rotated by rot_k and the output by
 * rot_v (ref_hadamard): a caller comparing with the CPU's Q8_0 path passes a q whose rotation is already
 * on the Q8_0 grid (rounding it again changes nothing). */
void ref_attn(const struct attn_args *a, double *out);
/* y = H x per chunk of n of the len values, H the orthonormal Walsh-Hadamard matrix of size n in
 * Sylvester order (n 0: y = x). */
void ref_hadamard(const double *x, double *y, int len, int n);
void ref_moe_route(const struct moe_route_args *a, double *probs /* (n_tokens, n_expert) */);
/* MoE FFN in double on dequantised weights and unquantised activations. */
void ref_moe_ffn(const struct moe_ffn_args *a, double *y);
/* Depthwise causal conv + SiLU from the ring state_in (the args' layout: d_conv - 1 + MMV_MAX_TOKENS slots
 * indexed by position, token 0 at *a->pos); y (n_tokens, n_ch) and the final ring state_out. a->state,
 * a->snap are not read. */
void ref_ssm_conv(const struct ssm_conv_args *a, const float *state_in, double *y, double *state_out);
/* The snapshot of token t (kernels.h ssm_conv_args): the window after it, d_conv - 1 rows of n_ch, row i the input
 * of position *a->pos + t - (d_conv-2) + i (a->x for the run's positions, else the slot of state_in). */
void ref_ssm_conv_window(const struct ssm_conv_args *a, const float *state_in, int32_t t, float *win);
/* The gated delta rule as a plain double recurrence (docs/qwen35.md §4.4 steps 2, 5-7) from state_in (the
 * args' layout, S[i][c] at [j][c][i]): out (n_tokens, n_vhead, d_state) and the final state_out. */
void ref_gdn(const struct gdn_args *a, const float *state_in, double *out, double *state_out);
/* The sampling chain (kernels.h sample_args) of one row of logits (row `row` of the args: its window of penalties,
 * counted over the whole vocabulary) with the row's uniform u, step by step
 * as specified there (float where it says float, a full sort for the order): the token, and how close
 * its decisions lie to a boundary, recomputed in double (relative distances): *mp of top-p's cumulative
 * probability from top_p, *mu of u * total from a running sum of the draw (the last one excepted), and
 * *mz the relative error of the float z in the chain's order (how far another summation order may land).
 * A backend summing in another order may pick another token only where mp < 1e-4 + 4 mz or mu < 1e-9. */
int32_t ref_sample_row(const float *logits, const struct sample_args *a, int32_t row, double u, double *mp, double *mu,
                       double *mz);
/* The distribution ref_sample_row draws from (kernels.h sample_args.list): its survivors in the draw's order, each
 * exp(l - max) / total in double; one survivor (greedy, nothing left) with probability 1. n may exceed the list's
 * room (only SAMPLE_MAX_CAND are written). */
void ref_sample_list(const float *logits, const struct sample_args *a, int32_t row, struct sample_list *list);
/* spec_accept's rule (kernels.h) written from its comment over dense distributions: p and q (k + 1 and k rows of
 * n_vocab doubles, 0 outside the survivors) with each target row's survivors in draw order (order[i], n_order[i]
 * ids). Writes out (k + 2 ints) as the op does. */
void ref_spec_accept(const double *p, const double *q, int32_t n_vocab, const int32_t *const *order,
                     const int32_t *n_order, const struct spec_accept_args *a, int32_t *out);
/* spec_accept's greedy form as the host's greedy acceptance loop (lib/spec.c) takes it: row i emits the draft while
 * the test hook forces it, else its pick, and goes on while that pick is d_i (never past row force). */
void ref_spec_accept_greedy(const int32_t *drafts, const int32_t *picks, int32_t k, int32_t force, int32_t *out);
#endif
