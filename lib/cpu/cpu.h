/* cpu: the CPU twins of the kernels (cpu_<op>, one op family per lib/cpu/<op>.c, the same names as
 * kernels/<op>.cu) and the thread pool they share.
 *
 * Each op takes the args struct of kernels/kernels.h plus the pool (NULL: run on the calling thread).
 * Work is split over rows of the output; an op returns INFER_E_UNSUPPORTED / INFER_E_ARG for a type or
 * shape it does not handle, never asserts. The quantised dot products mirror llama.cpp's CPU path:
 * activations in Q8_K (K-quants, IQ4_XS) or Q8_0 (Q8_0, Q4_0, IQ4_NL), exact integer sums per block,
 * f32 scale products; scalar code is the reference, AVX2 variants are picked at run time.
 */
#ifndef INFER_CPU_H
#define INFER_CPU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "blocks.h"
#include "kernels.h"
#include "status.h"

/* ---- pool: persistent pthreads; the calling thread is worker 0 ---- */
struct pool;
/* fn runs rows [begin, end) on worker ith; ranges are contiguous and multiples of the grain. */
typedef void (*pool_fn)(void *ctx, int64_t begin, int64_t end, int ith);
infer_status pool_create(int n_threads, struct pool **out);
void pool_free(struct pool *p); /* NULL is a no-op */
int pool_threads(const struct pool *p);
/* Splits [0, n) into one range per worker (grain-aligned) and waits for all. p NULL: fn(ctx, 0, n, 0). */
void pool_for(struct pool *p, int64_t n, int64_t grain, pool_fn fn, void *ctx);

/* ---- the ops ---- */
infer_status cpu_quantize(const struct quantize_args *a, struct pool *p);
infer_status cpu_mmv(const struct mmv_args *a, struct pool *p);
/* The parts in turn, each cpu_mmv (so each part's bits are its own mmv's); refuses a count outside
 * 1..MMV_MULTI_MAX, parts of different n_tokens and overlapping parts (mmv_multi_disjoint) before any runs. A part
 * cpu_mmv refuses stops the op there, the parts before it written. */
infer_status cpu_mmv_multi(const struct mmv_multi_args *a, struct pool *p);
infer_status cpu_mm(const struct mm_args *a, struct pool *p);
infer_status cpu_norm(const struct norm_args *a, struct pool *p);
infer_status cpu_rope(const struct rope_args *a, struct pool *p);
infer_status cpu_act(const struct act_args *a, struct pool *p);
infer_status cpu_attn(const struct attn_args *a, struct pool *p);
infer_status cpu_moe_route(const struct moe_route_args *a, struct pool *p);
infer_status cpu_moe_ffn(const struct moe_ffn_args *a, struct pool *p);
infer_status cpu_ssm_conv(const struct ssm_conv_args *a, struct pool *p);
infer_status cpu_gdn(const struct gdn_args *a, struct pool *p);
infer_status cpu_embed(const struct embed_args *a, struct pool *p);
infer_status cpu_kv_store(const struct kv_store_args *a, struct pool *p);
infer_status cpu_sample(const struct sample_args *a, struct pool *p);
infer_status cpu_spec_accept(const struct spec_accept_args *a, struct pool *p);

/* One quantised (or float) dot product of a weight row with one activation row of n elements:
 * the kernel cpu_mmv uses, exposed for the tests. variant is an enum cpu_isa_level: CPU_ISA_BEST = the
 * highest this CPU runs, else exactly that level (a type without a kernel of its own at that level gets
 * the next lower one); NULL when the CPU (or INFER_CPU_ISA) does not allow the level. */
/* CPU_ISA_AMX: AVX-512 VNNI plus AMX-INT8 tiles for the prefill GEMMs (lib/cpu/amx.h; its dots are AVX-512's). */
enum cpu_isa_level { CPU_ISA_BEST, CPU_ISA_SCALAR, CPU_ISA_AVX2, CPU_ISA_AVX512, CPU_ISA_AMX, CPU_ISA_N };
typedef float (*cpu_vec_dot_fn)(int64_t n, const void *w, const void *x);
cpu_vec_dot_fn cpu_vec_dot(int32_t weight_type, int variant);
/* a float type's dot that takes x already rounded to its precision, and the rounding (cpu_mm: once per token, not
 * once per row); NULL where dot has no such form (all but AVX-512's BF16) */
typedef void (*cpu_round_fn)(const float *x, float *out, int64_t n);
cpu_vec_dot_fn cpu_vec_dot_rounded(cpu_vec_dot_fn dot, cpu_round_fn *round);
/* The dots of one weight row with n_tok (2..8) activation rows x_stride bytes apart, each bit-identical to
 * cpu_vec_dot(weight_type, variant); NULL where that level has no multi-token kernel for the type. */
typedef void (*cpu_vec_dot_xn_fn)(int64_t n, const void *w, const void *x, size_t x_stride, int n_tok, float *out);
cpu_vec_dot_xn_fn cpu_vec_dot_xn(int32_t weight_type, int variant);
/* Whether a matmul of ISA variant v may take the AVX-512 VNNI GEMMs and strips (BEST, AVX512 or AMX). */
static inline int cpu_isa_avx512_variant(int v) { return v == CPU_ISA_BEST || v == CPU_ISA_AVX512 || v == CPU_ISA_AMX; }
/* Whether this CPU (capped by INFER_CPU_ISA=scalar|avx2|avx512) runs the level's kernels. */
int cpu_isa_has(int level);
/* Whether a matmul of ISA variant v runs the AVX2 kernels (mm_r16_avx2.c's strips, the AVX2 GEMMs): asked for, or AVX2
 * is this CPU's best level. */
static inline int cpu_isa_avx2_variant(int v) {
    return v == CPU_ISA_AVX2 || (v == CPU_ISA_BEST && !cpu_isa_has(CPU_ISA_AVX512));
}
/* Bytes of one activation row of n elements for a weight type (the mmv_act_type_cpu blocks, or f32). */
size_t cpu_act_row_bytes(int32_t weight_type, int64_t n);
/* "amx", "amx (emulated)", "avx512vnni", "avx2" or "scalar": what variant 0 picks (INFER_CPU_ISA / INFER_CPU_SCALAR=1
 * cap it; INFER_CPU_AMX=off|emu, amx.h). */
const char *cpu_isa(void);

/* Block layouts (block_<t>), QK4_0 / QK8_0 / QK_K and the f16/bf16 conversions come from
 * kernels/blocks.h, shared with the CUDA kernels. */
static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

#endif
