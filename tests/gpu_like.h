/* gpu_like: a CPU backend with the CUDA backend's numerics, the reference test-cuda-e2e compares the
 * GPU with (a context on it comes from ctx_create_on, lib/forward.h).
 *
 * Its ops are the CPU backend's (lib/cpu) where kernels/<op>.cu computes the same numbers, and scalar
 * re-enactments of the kernels where the CUDA path rounds differently:
 *   mmv_act_type  every quantised weight pairs with Q8_1 in the q8 split layout (kernels.h), float
 *                 weights with f32 x (mmv_act_type_cuda);
 *   quantize      Q8_1: per 32 values d = amax / 127, q = roundf(x / d), ds = (d, d * sum q) (quantize.cu);
 *   mmv           per 32-value unit xd * (s0 * sum_lo(wq xq) + s1 * sum_hi(wq xq)) - min * (xd sum xq), the
 *                 integer codes and scales of mmv.cu's unit decoders, units summed per lane (lane = unit
 *                 % 32) then by the warp's xor butterfly; float weights: lane-strided f32 sums, butterfly;
 *   mm            W (dequantised as blocks.h does) and x rounded to f16 (mm.cu's mma.sync m16n8k16 path, xq
 *                 unused): per 16 values of K the exact f16 products summed in f32 in K order, then added
 *                 to the f32 accumulator, as the emulator's mma.sync models the instruction;
 *   norm          the sum of squares with fmaf, thread-strided (32 threads a row below n = 1024, else 256)
 *                 and reduced like norm.cu (the fused norm_q / rope_norm are bit-identical to norm then
 *                 quantize / rope on the device, so this backend leaves them out);
 *   attn          the variant ATTN_AUTO runs (attn_auto_variant). Prefill (ATTN_MMA) per (token, head):
 *                 q split into f16 hi + lo, tiles of 64 / 16 cells (head_dim 64 / more), scores from the
 *                 mma steps (16 exact products summed, then added), Q8_0 K per 32-value block the codes'
 *                 partial then + d * partial, the tile max, p = expf(s - m), the row sum over 4 lanes then
 *                 their xor butterfly, p split hi + lo against V (Q8_0: d q split, three steps). Else the
 *                 SIMT kernel per (token, head): tiles of tk cells (64 / 32 / 16 by head_dim),
 *                 the tile's max, p = expf(s - m), the tile sum over two cells per lane then the
 *                 butterfly, acc rescaled per tile; decode batches (<= ATTN_SPLIT_TOKENS tokens, for
 *                 which the device forward always passes scratch) split the n_kv capacity over
 *                 attn_splits() parts merged as attn_merge does; Q8_0 cells: K and V dequantised, q f32;
 *   moe_route     the softmax sum in double per lane (experts l, l + 32, ...) then the butterfly;
 *   moe_ffn       f32 activations against dequantised weights (moe.cu), 32 values per lane step summed
 *                 four products at a time, h = silu(gate) * up in f32, the experts in top-k order; from
 *                 MOE_GROUPED_TOKENS tokens on (moe_mm.cu) every pair's x and h rows scaled by a power of
 *                 two, rounded to f16 and dotted with f16 weights as mm, scaled back, then summed in top-k order;
 *   gdn           the recurrence: a column's dots over the lanes (key index lane + 32 n) then the butterfly;
 *                 GDN_CHUNKED and GDN_AUTO from 64 tokens (up to snap_from): gdn.cu's chunked kernel, its
 *                 f16 hi / lo operand splits, power-of-two scales per 16 value columns and mma steps.
 * rope, act, embed, kv_store, ssm_conv and sample compute what the CPU's do (the kernels' headers
 * state it; rope only differs by sincosf against sinf / cosf, a few ulps).
 * Every op was found bit-identical to its kernel's source run on the CPU (g++ -ffp-contract=off, glibc
 * libm, the kernels' warps as fibers; mm and gdn against mm.cu's and gdn.cu's kernels on the emulator,
 * which test-gpu-like repeats in EMU=1 builds), so a device running the kernels' float operations as
 * written gives these numbers bit for bit. A GPU differs by what the code leaves open: nvcc's FMA contraction, CUDA's __expf / expf /
 * sincosf against glibc's, and the tensor cores' own accumulation. The "perturbed" variant adds exactly
 * those (fmaf where nvcc would contract a product into a sum, expf and sinf / cosf one ulp off, __expf as
 * exp2f(x log2 e), the 16 products of an mma step summed exactly): its distance from the plain variant is
 * what test-cuda-e2e may expect between a GPU and the reference (test-gpu-like measures it).
 * Scalar C, rows split over the backend's own thread pool; meant for the tests' tiny models.
 */
#ifndef TEST_GPU_LIKE_H
#define TEST_GPU_LIKE_H

#include "backend.h"

/* The reference (ctx_backend_fn). */
infer_status gpu_like_backend_create(int n_threads, struct infer_backend **out);
/* The reference plus a model of the roundings a real device adds (see above). */
infer_status gpu_like_backend_create_perturbed(int n_threads, struct infer_backend **out);

/* Runs a fixed set of small op calls (quantize, mmv, mm, norm, rope, act, attn, moe, gdn, kv_store, embed)
 * on dev and on the reference, on the same inputs, and compares the outputs bit for bit: the number of
 * calls that differ (their names in why), or -1 when a call failed (the reason in why). *n_strict counts
 * the differing calls of ops whose arithmetic leaves no device a choice (quantize, kv_store, embed: integer
 * work and single IEEE operations, nothing nvcc could fuse), where any difference is a bug. dev is any
 * backend (its memory is reached through alloc / upload / download). */
int gpu_like_probe(struct infer_backend *dev, int *n_strict, char *why, size_t why_size);

#endif
