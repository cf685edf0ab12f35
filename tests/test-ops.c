/* test-ops: every op and weight type from one table of cases, in three columns:
 *   ref   float64 references (tests/ref.c: from the formulas, independent of lib/ and kernels/)
 *   cpu   lib/cpu through the CPU backend, every ISA level the machine runs (scalar, AVX2, AVX-512 VNNI)
 *   cuda  the launchers cuda_<op> (kernels/) on device buffers: tests/ops_cuda.c mirrors the very host
 *         buffers the cpu column uses (exact sizes, aliasing kept, outputs uploaded NaN-filled, every
 *         input-only buffer read back and required unchanged), so one runner drives both columns, on a
 *         GPU under nvcc and on the CPU under the emulator (make EMU=1: build-emu/ always runs it).
 * A case is {op, types, shape, params, input range, NMSE bound, paddings, flags, columns}; it runs once per
 * type and column on the same seeded inputs, in physical ranges (attention scores that need the max
 * subtracted, MoE logits +-8, GDN decays in (-20, 0)); outputs start as NaN so an unwritten element fails,
 * and padding between output rows must come back untouched. Checks (NMSE = sum (y - ref)^2 / sum ref^2):
 *   quantize  cpu (Q8_0, Q8_1, Q8_K): within half a step (+127 * 2^-11 for Q8_0's f16 d), bit for bit llama.cpp's
 *             quantize_row_*_ref (peer); cuda (q8 split, "q8_1"): d = amax / 127, q = roundf(x / d),
 *             s = d * sum q, exactly
 *   mmv, mm   ref on the activations the backend used; per output |y - ref| <= cpu 1e-6 sum|wx|, cuda
 *             mmv 1e-5 sum|wx| + 1e-6, cuda mm (x and W in f16) 2e-3 sum|wx| + 3e-8 (sum|x| + sum|w|) and
 *             relative L2 <= 2e-3 in both INFER_MATMUL modes (mma, cublas: its chunk planner by hand-worked
 *             plans and a sweep, and two shapes that chunk); + 1e-7 |ref| for the residual, SwiGLU propagated
 *             (|silu'| <= 1.1) + 1e-6 |ref| (cuda mm 1e-4). cpu also: fused epilogues bit for bit the
 *             unfused chain, mm the mmv dots, ggml's vec_dot (peer); the 32-value types at AVX-512 (dots,
 *             GEMM of mm_q32.c) the scalar dots
 *   mmv_multi a type per part, mixed ("q4_K+q6_K+f32"): every part within mmv's bound of ref on the activations
 *             the column used (cpu: each part's partner type; cuda: one q8 split for every quantised part) and
 *             bit for bit a separate mmv of that part in the same column; nothing written between the outputs
 *   norm      NMSE (table) and 1e-5 |ref| + 1e-12; norm_q (cuda): y and its 8-bit activations bit for bit
 *             norm then quantize on the device
 *   rope      NMSE (table), dims past n_rot and the gaps untouched; cuda also within 1e-5 (|x0| + |x1|) of
 *             its CPU twin per pair; rope_norm (cuda): bit for bit norm then rope on the device
 *   act       NMSE and 2e-6 |ref| (softmax 1e-5 |ref| + 1e-12), ADD bit for bit; in place = out of place
 *   ssm_conv  NMSE 1e-12, the window exactly, split calls and snapshots bit for bit; cuda y within
 *             1e-6 |y| + 1e-7 of its CPU twin
 *   ssm_conv  (its window a ring indexed by position: positions below 0 and runs longer than the ring too)
 *   gdn_conv  (fused, cuda) bit for bit the CUDA pair ssm_conv, gdn (out, state, ring, snapshots); every
 *             column NMSE 1e-11 against ref_ssm_conv then ref_gdn, the ring exactly (cpu runs the pair); with the
 *             output norm (norm_done): bit for bit the CUDA chain ssm_conv, gdn, gated norm, its counters back at 0
 *             and a replay on them the same bits; every column NMSE 1e-11 against ref_norm of the reference's out
 *   gdn       NMSE 1e-11 (out and state) against ref and against the recurrent form; split calls (recurrent)
 *             and snapshots bit for bit; cuda too, its chunked tensor-core kernel included (measured at most
 *             8e-14, like its recurrent one: the same bound)
 *   attn      NMSE (table: 1e-9, 1e-8 / 1e-7 for |q| of 30 / 200) and per output 1e-6 + 4 * 2^-24 * scale *
 *             sum |q| (the scores' f32 rounding, |k| <= 1); cuda: AUTO, ATTN_SIMT split-K + merge and unsplit,
 *             ATTN_MMA (head_dim 64/128/256), f16 and Q8_0 cells with and without rotation, all to the same
 *             bounds; AUTO bit for bit the variant the rule picks (MMA: > 8 tokens, >= 32 rows per KV group);
 *             rotated: bit for bit the unrotated call on q and out rotated by kv_hadamard; cpu: raw q = q rounded
 *   embed     the float64 dequantised rows rounded to f32; kv_store: f16 nearest even / Q8_0 d = f16(amax / 127),
 *             nearest q (rotated: 1e-4 of a step), other bytes untouched; cuda cells = its CPU twin's
 *   moe_route the reference top-k as a set, by decreasing probability (ties: lower id), weights 1e-6
 *             relative; cuda ids = its CPU twin's, weights within 2e-6
 *   moe_ffn   NMSE (table); cpu bit for bit its unfused chain; cuda within 2e-4 max |ref| (per-pair kernels),
 *             from MOE_GROUPED_TOKENS tokens on (grouped tensor-core GEMMs, f16 operands) 2e-3 max |ref| and
 *             NMSE <= 4e-6
 *   sample    ref_sample_row's token (each row's window of penalties: pushes and drops) except within rounding
 *             of a boundary (ref.h; at most 1% of the rows or one); cuda also its CPU twin's, SAMPLE_REFUSED
 *             only for a truncated set, a set nothing cuts refused and, where the chain allows a list, its list:
 *             the reference's survivors in order, probabilities within 1e-12 relative; cuda the twin's within
 *             4 ulps
 *   spec_accept ref_spec_accept (the rule over dense distributions, ref.h) exactly, on random lists that overlap
 *             partly, drafts drawn from q, out of p, or with q 0; p == q rows (residual 0); the test hook; cuda
 *             its CPU twin's. cpu also: with k = 1, the first token of a step follows p (chi-squared, 200000 steps).
 *             The greedy form (no lists) against ref_spec_accept_greedy (the host's greedy loop) exactly: drafts
 *             kept, a pick that differs, the hook
 *   errors    hostile arguments: INFER_E_* (cpu), cudaErrorInvalidValue before the device is touched (cuda)
 *   pool (cpu), backend (cuda: op table, memory, OOM), mm_plan (cuda, host arithmetic)
 *
 * Usage: test-ops [-o op1,op2] [-t q4_K,f16] [-b ref,cpu,cuda] [-n threads] [--list]
 * Without a CUDA device the cuda column prints `SKIP (no CUDA device)` once; exit 0 when the other columns
 * passed, 77 only if everything was skipped.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "backend.h"
#include "cpu/attn_tile.h"
#include "cpu/cpu.h"
#include "cpu/mm_f.h"
#include "cpu/mm_iq.h"
#include "cpu/mm_kq.h"
#include "cpu/mm_q32.h"
#include "cpu/mm_r16.h"
#include "device.h"
#include "ops_cuda.h"
#include "peer.h"
#include "quant.h"
#include "ref.h"
#include "sample_rows.h"
#include "t.h"
#include "util.h"

/* ---- types ---- */
static const struct { const char *name; int32_t id; } tops_types[] = {
    {"f32", INFER_TYPE_F32},   {"f16", INFER_TYPE_F16},       {"bf16", INFER_TYPE_BF16}, {"q8_0", INFER_TYPE_Q8_0},
    {"q4_0", INFER_TYPE_Q4_0}, {"q4_K", INFER_TYPE_Q4_K},     {"q5_K", INFER_TYPE_Q5_K}, {"q6_K", INFER_TYPE_Q6_K},
    {"q2_K", INFER_TYPE_Q2_K}, {"q3_K", INFER_TYPE_Q3_K},
    {"iq4_nl", INFER_TYPE_IQ4_NL}, {"iq4_xs", INFER_TYPE_IQ4_XS}, {"q8_K", INFER_TYPE_Q8_K}, {"q8_1", INFER_TYPE_Q8_1},
    {"q4_1", INFER_TYPE_Q4_1}, {"q5_0", INFER_TYPE_Q5_0}, {"q5_1", INFER_TYPE_Q5_1}, {"mxfp4", INFER_TYPE_MXFP4},
    {"iq2_xxs", INFER_TYPE_IQ2_XXS}, {"iq2_xs", INFER_TYPE_IQ2_XS}, {"iq2_s", INFER_TYPE_IQ2_S},
    {"iq3_xxs", INFER_TYPE_IQ3_XXS}, {"iq3_s", INFER_TYPE_IQ3_S}, {"iq1_s", INFER_TYPE_IQ1_S}, {"iq1_m", INFER_TYPE_IQ1_M},
    {"tq1_0", INFER_TYPE_TQ1_0}, {"tq2_0", INFER_TYPE_TQ2_0},
};
#define N_TYPES (int)(sizeof tops_types / sizeof tops_types[0])
#define ALL_W "f32,f16,bf16,q8_0,q4_0,q2_K,q3_K,q4_K,q5_K,q6_K,iq4_nl,iq4_xs,mxfp4"
#define FLOAT_W "f32,f16,bf16"
/* the legacy 32-value types with a min or a fifth bit (Q8_1 partners on the CPU); in a few cases only */
#define LEGACY_W "q4_1,q5_0,q5_1"
/* every type of the 32-value GEMM (lib/cpu/mm_q32.c) */
#define Q32_W "q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,mxfp4"
/* the lattice and ternary types (blocks_iq.h, lib/cpu/mmv_iq.c): random blocks only (no quantiser) */
#define IQ_W "iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m,tq1_0,tq2_0"

static int32_t tops_type_id(const char *s, size_t len) {
    for (int i = 0; i < N_TYPES; i++)
        if (strlen(tops_types[i].name) == len && strncasecmp(tops_types[i].name, s, len) == 0) return tops_types[i].id;
    return -1;
}
static const char *tops_type_name(int32_t id) {
    for (int i = 0; i < N_TYPES; i++)
        if (tops_types[i].id == id) return tops_types[i].name;
    return "?";
}

/* ---- the case table ---- */
enum { COL_REF, COL_CPU, COL_CUDA, COL_N };
#define ONLY_CPU (1 << COL_CPU)
#define ONLY_CUDA (1 << COL_CUDA)
static const char *const col_name[COL_N] = {"ref", "cpu", "cuda"};

/* op-specific flags (tcase.flags) */
enum { MM_T_QUANTISED = 1, MM_T_ALIAS = 2, MM_T_CUBLAS = 4 };          /* mmv, mm */
enum { NORM_T_W = 1, NORM_T_GATE = 2, NORM_T_ALIAS = 4 };               /* norm, norm_q */
enum { ROPE_T_SCALE = 1, ROPE_T_GATED = 2, ROPE_T_INPLACE = 4 };        /* rope, rope_norm */
enum { GDN_T_GROUPED = 1, GDN_T_AB_GROUP = 2, GDN_T_SNAP = 4 };         /* gdn: param[1] */

struct tcase {
    const char *op;
    const char *types;  /* weight types ("" for float ops) */
    int64_t ne[4];      /* op shape, see the runners */
    int32_t param[2];
    float lo, hi;       /* input range */
    float fparam;       /* softmax / attention scale, rope max position */
    double tol;         /* NMSE bound against the reference (0: the runner's own checks) */
    int64_t aux[3];     /* paddings, first positions, bases: see the runners */
    int32_t flags;      /* *_T_* */
    int32_t cols;       /* columns that run it (1 << COL_*), 0: all */
    int32_t slow;       /* 1: left out by t_quick (the sanitizers' run): a smaller case takes the same code path */
};

/* Rows: {op, types, ne, param, lo, hi, fparam, tol, aux, flags, cols, slow}; trailing fields default to 0. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const struct tcase tops_cases[] = {
    /* ---- quantize: {n, rows}; the CPU's Q8_0 / Q8_1 / Q8_K blocks, CUDA's q8 split (q8_1); a zero group at 32..63 ---- */
    {"quantize", "q8_0,q8_1", {96, 5}, {0}, -3, 3, 0, 0},
    {"quantize", "q8_0,q8_K,q8_1", {4096, 2}, {0}, -1, 1, 0, 0},
    {"quantize", "q8_K", {512, 3}, {0}, -20, 0.5f, 0, 0},
    {"quantize", "q8_1", {32, 1}, {0}, -1e-3f, 1e-3f, 0, 0, .cols = ONLY_CUDA}, /* d an f16 subnormal in Q8_1 blocks */
    /* ---- mmv: {n_in, n_out, n_tokens}, param[0] = epilogue; flags MM_T_QUANTISED: llama-quantize's weights,
     * MM_T_ALIAS: add is y. n_in with a tail block for 32-blocks; tokens 1..8 ---- */
    {"mmv", ALL_W, {256, 1, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", ALL_W, {256 * 3, 37, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", IQ_W, {256 * 3, 37, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", IQ_W, {512, 64, 3}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_ALIAS},
    {"mmv", IQ_W, {256 * 5, 23, 5}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mmv", IQ_W, {2048, 40, 8}, {MMV_PLAIN}, -2, 2, 0, 0},
    {"mmv", "f32,f16,bf16,q8_0,q4_0,iq4_nl,mxfp4," LEGACY_W, {256 * 3 + 32, 19, 2}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", LEGACY_W, {256 * 3 + 32, 37, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", LEGACY_W, {512, 23, 5}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_ALIAS},
    {"mmv", LEGACY_W, {160, 17, 8}, {MMV_SWIGLU}, -1, 1, 0, 0},
    /* float rows whose length leaves a tail for each SIMD width (32, then 16, then 1 at a time) */
    {"mmv", FLOAT_W, {256 * 3 + 32 + 16 + 5, 11, 1}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", ALL_W, {512, 64, 3}, {MMV_ADD}, -2, 2, 0, 0},
    {"mmv", ALL_W, {256 * 9, 130, 4}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_ALIAS},
    {"mmv", ALL_W, {256 * 5, 23, 5}, {MMV_ADD}, -2, 2, 0, 0},
    {"mmv", ALL_W, {768, 29, 6}, {MMV_PLAIN}, -2, 2, 0, 0},
    {"mmv", ALL_W, {512, 17, 7}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mmv", ALL_W, {512, 40, 8}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mmv", ALL_W, {4096, 4096, 1}, {MMV_PLAIN}, -1, 1, 0, 0, .cols = ONLY_CPU},
    {"mmv", ALL_W, {4096, 512, 2}, {MMV_PLAIN}, -2, 2, 0, 0},
    {"mmv", "q4_K", {4096, 12288, 2}, {MMV_SWIGLU}, -1, 1, 0, 0, .cols = ONLY_CPU}, /* a real FFN (qwen3-8b gate / up) */
    {"mmv", "q8_0,q4_0,q5_0,q5_1,q4_K,q5_K,q6_K,iq4_nl,iq4_xs,mxfp4", {2048, 48, 4}, {MMV_PLAIN}, -1, 1, 0, 0, .flags = MM_T_QUANTISED},
    /* the multi-token dots (mmv.c *_xn: Q4_K, Q6_K on AVX-512 VNNI) that 2..8-token tiles take: odd block
     * counts (Q4_K pairs blocks), every fused epilogue */
    {"mmv", "q4_K,q6_K", {1280, 37, 2}, {MMV_PLAIN}, -1, 1, 0, 0, .flags = MM_T_QUANTISED},
    {"mmv", "q4_K,q6_K", {768, 21, 3}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mmv", "q4_K,q6_K", {2048, 40, 4}, {MMV_PLAIN}, -1, 1, 0, 0, .flags = MM_T_QUANTISED},
    {"mmv", "q4_K,q6_K", {1280, 33, 5}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mmv", "q4_K,q6_K", {768, 19, 7}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_QUANTISED},
    /* ---- mmv_multi: {n_in, rows of part 0, n_tokens, parts}, aux = rows of parts 1..3, param[0] = part k's
     * epilogue in bits 2k..2k+1; a type per part ("a+b+c", the last repeating): the mixes real files put on one
     * input (Q4_K_M's attention and GDN products, F32 routers, a one-row shared-expert gate) and odd row counts ---- */
    {"mmv_multi", "q4_K+q6_K+q5_K+q4_K,q8_0+f32+q4_0+iq4_xs,f16+bf16+f32,q4_K", {512, 37, 1, 4}, {0}, -1, 1, 0, 0, {50, 1, 19}},
    {"mmv_multi", "f32+f32+q4_K,q8_0+q6_K+q4_K", {256, 64, 1, 3}, {MMV_SWIGLU << 4}, -1, 1, 0, 0, {1, 23}},
    {"mmv_multi", "q4_K+q6_K+q4_K+q4_K,q2_K+q3_K+iq2_xs+mxfp4", {768, 29, 3, 4}, {0}, -2, 2, 0, 0, {13, 7, 6}},
    {"mmv_multi", "q5_0+q4_1+q8_0,iq3_s+tq2_0+iq1_m", {512, 17, 8, 3}, {MMV_ADD | MMV_SWIGLU << 2}, -1, 1, 0, 0, {33, 5}},
    {"mmv_multi", "q5_1+q5_0+f16+iq4_nl,q4_0+q4_1+bf16+mxfp4", {288, 11, 2, 4}, {MMV_ADD << 6}, -1, 1, 0, 0, {3, 9, 2}},
    {"mmv_multi", "q6_K", {256, 9, 5, 1}, {0}, -1, 1, 0, 0},
    /* ---- mm: {n_in, n_out, n_tokens}; CUDA runs INFER_MATMUL=mma and =cublas. Against its 64 x 64 tiles and
     * 64-value K steps: n_out 33 / 67 / 130, tokens 9 / 19 / 64 / 70, K one step, a half step (32-value
     * types: an odd number of units), odd for float types, one value ---- */
    {"mm", ALL_W, {512, 33, 19}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", FLOAT_W, {95, 67, 9}, {MMV_PLAIN}, -2, 2, 0, 0},
    {"mm", "q8_0,q4_0,iq4_nl,mxfp4," LEGACY_W, {96, 67, 9}, {MMV_PLAIN}, -2, 2, 0, 0},
    {"mm", FLOAT_W, {1, 5, 3}, {MMV_SWIGLU}, -2, 2, 0, 0},
    {"mm", FLOAT_W, {255, 130, 33}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_ALIAS},
    {"mm", "q8_0,q4_0,iq4_nl,q4_K,q5_K,q6_K,iq4_xs", {256, 130, 33}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_ALIAS},
    {"mm", LEGACY_W, {160, 33, 19}, {MMV_SWIGLU}, -2, 2, 0, 0},
    {"mm", ALL_W, {768, 67, 70}, {MMV_SWIGLU}, -2, 2, 0, 0},
    {"mm", IQ_W, {512, 33, 19}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", IQ_W, {768, 67, 70}, {MMV_ADD}, -2, 2, 0, 0},
    /* the GEMMs of IQ4_XS (mm_kq.c), Q2_K and Q3_K (mm_iq.c), from 6 tokens: strips and tiles with tails, every
     * epilogue; at every ISA level they equal the scalar dots bit for bit (5 tokens: still the dots) */
    {"mm", "iq4_xs,q2_K,q3_K", {768, 37, 17}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", "iq4_xs,q2_K,q3_K", {512, 33, 6}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_ALIAS},
    {"mm", "iq4_xs", {256, 17, 5}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mm", "iq4_xs", {1024, 45, 40}, {MMV_SWIGLU}, -8, 8, 0, 0, .cols = ONLY_CPU},
    {"mm", "q4_K,q8_0,q6_K", {1024, 70, 64}, {MMV_ADD}, -1, 1, 0, 0},
    {"mm", "f16,q4_K,q6_K", {4096, 130, 70}, {MMV_PLAIN}, -2, 2, 0, 0}, /* a real row length */
    /* the float GEMM (lib/cpu/mm_f.c, AVX-512, from 2 tokens): 4-row x 3-token tiles with tails, token chunks (rows of
     * 8192 values: 15 tokens a chunk), every epilogue, rows of 80 values (no multiple of 32: still the dots) */
    {"mm", "f32,f16,bf16", {96, 7, 2}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", "f32,f16,bf16", {8192, 6, 40}, {MMV_ADD}, -1, 1, 0, 0, .flags = MM_T_ALIAS, .cols = ONLY_CPU},
    {"mm", "f32,f16,bf16", {320, 23, 8}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mm", "f32,f16,bf16", {80, 9, 5}, {MMV_PLAIN}, -1, 1, 0, 0},
    /* the prefill GEMM (lib/cpu/mm_kq.c: Q4_K, Q5_K, Q6_K on AVX-512 VNNI; mm_kq_avx2.c on AVX2 from 12 tokens, its
     * 4-token tiles): n_out not a multiple of its 16-row strips (the gathers' absent rows), strips split over the
     * threads, 1..7-token tails of its 8-token tiles; mm-vs-mmv then compares the GEMM with the row-by-row dots bit
     * for bit, and the AVX2 level's GEMM must give the scalar dots' bits */
    {"mm", "q4_K,q5_K,q6_K", {768, 37, 17}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", "q4_K,q5_K,q6_K", {1280, 93, 11}, {MMV_PLAIN}, -1, 1, 0, 0, .flags = MM_T_QUANTISED},
    {"mm", "q4_K,q5_K,q6_K", {2048, 300, 42}, {MMV_PLAIN}, -8, 8, 0, 0, .cols = ONLY_CPU},
    {"mm", "q4_K,q5_K,q6_K", {512, 50, 13}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mm", "q4_K,q5_K,q6_K", {256, 16, 4}, {MMV_ADD}, -2, 2, 0, 0},
    {"mm", "q4_K,q6_K", {1280, 45, 10}, {MMV_PLAIN}, -1, 1, 0, 0, .flags = MM_T_QUANTISED},
    {"mm", "q4_K,q6_K", {768, 29, 13}, {MMV_PLAIN}, -1, 1, 0, 0},
    /* the 32-value GEMM (lib/cpu/mm_q32.c, AVX-512 VNNI, from 6 tokens): 17 / 33 / 45 rows against its 16-row
     * strips, 6..40 tokens against its 8-token tiles, every epilogue; it must equal the scalar dots bit for
     * bit (5 tokens: still the dots) */
    {"mm", Q32_W, {160, 17, 6}, {MMV_PLAIN}, -1, 1, 0, 0},
    {"mm", Q32_W, {288, 33, 13}, {MMV_PLAIN}, -2, 2, 0, 0},
    {"mm", "q8_0,q4_0,q5_0,q5_1,iq4_nl", {512, 33, 21}, {MMV_PLAIN}, -1, 1, 0, 0, .flags = MM_T_QUANTISED},
    {"mm", Q32_W, {1024, 45, 40}, {MMV_PLAIN}, -8, 8, 0, 0, .cols = ONLY_CPU},
    {"mm", Q32_W, {352, 17, 15}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mm", Q32_W, {96, 33, 7}, {MMV_ADD}, -2, 2, 0, 0, .flags = MM_T_ALIAS},
    {"mm", Q32_W, {64, 31, 9}, {MMV_ADD}, -2, 2, 0, 0},
    {"mm", Q32_W, {128, 17, 5}, {MMV_SWIGLU}, -1, 1, 0, 0},
    {"mm", Q32_W, {3072, 40, 11}, {MMV_PLAIN}, -1, 1, 0, 0, .cols = ONLY_CPU}, /* a real row length (FFN down) */
    /* the cuBLAS mode's chunks (mm_plan_chunks over MM_SCRATCH_BYTES): W in two row chunks with SwiGLU, x in
     * two token chunks with the residual in place; the tensor-core kernel does not chunk, so cublas only */
    {"mm", "q4_K", {65536, 520, 1}, {MMV_SWIGLU}, -1, 1, 0, 0, .flags = MM_T_CUBLAS, .cols = ONLY_CUDA},
    {"mm", "q8_0", {262144, 3, 64}, {MMV_ADD}, -1, 1, 0, 0, .flags = MM_T_CUBLAS | MM_T_ALIAS, .cols = ONLY_CUDA},
    /* ---- norm: {n, rows}, aux = {x pad, y pad}, flags NORM_T_W / GATE (gate rows 2n apart, like z slices) /
     * ALIAS (y is x); CUDA's warp-per-row path below 1024, block-per-row from 1024, rows past the grid's 65535 ---- */
    {"norm", "", {4096, 3}, {0}, -4, 4, 0, 1e-10, .flags = NORM_T_W},
    {"norm", "", {33, 1}, {0}, -0.01f, 0.01f, 0, 1e-10},
    {"norm", "", {128, 7}, {0}, -4, 4, 0, 1e-12, .flags = NORM_T_W | NORM_T_GATE},
    {"norm", "", {40, 2}, {0}, -1, 1, 0, 1e-12, .flags = NORM_T_GATE},
    {"norm", "", {1, 1}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W},
    {"norm", "", {7, 3}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W},
    {"norm", "", {64, 37}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W | NORM_T_ALIAS}, /* head norm in place */
    {"norm", "", {128, 300}, {0}, -3, 3, 0, 1e-12, {128}, NORM_T_W}, /* q read from (q, gate) pairs */
    {"norm", "", {128, 64}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W | NORM_T_GATE | NORM_T_ALIAS},
    {"norm", "", {100, 9}, {0}, -3, 3, 0, 1e-12, {5, 3}, NORM_T_W | NORM_T_GATE},
    {"norm", "", {1000, 5}, {0}, -3, 3, 0, 1e-12, {1, 2}},
    {"norm", "", {1023, 2}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W},
    {"norm", "", {1024, 3}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W},
    {"norm", "", {4096, 7}, {0}, -3, 3, 0, 1e-12, {0, 4096}, NORM_T_W}, /* MTP: two norms into one (n, 2n) buffer */
    {"norm", "", {5003, 4}, {0}, -3, 3, 0, 1e-12, {2, 1}, NORM_T_W | NORM_T_GATE},
    {"norm", "", {8192, 2}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W | NORM_T_ALIAS},
    {"norm", "", {5, 70001}, {0}, -3, 3, 0, 1e-12, .flags = NORM_T_W},
    /* norm_q (CUDA, fused): {n, rows}: bit-identical to norm then quantize on the device */
    {"norm_q", "", {64, 37}, {0}, -3, 3, 0, 0, .flags = NORM_T_W, .cols = ONLY_CUDA},
    {"norm_q", "", {4096, 3}, {0}, -3, 3, 0, 0, .flags = NORM_T_W, .cols = ONLY_CUDA},
    {"norm_q", "", {1024, 1}, {0}, -3, 3, 0, 0, .flags = NORM_T_W | NORM_T_ALIAS, .cols = ONLY_CUDA},
    {"norm_q", "", {896, 9}, {0}, -3, 3, 0, 0, .flags = NORM_T_W | NORM_T_ALIAS, .cols = ONLY_CUDA},
    /* ---- rope: {n_tokens, n_head, head_dim, n_rot}, param[0] = mode, fparam = max position, aux = {token pad,
     * head pad, freq_base (0: 1e6)}, ROPE_T_SCALE: freq_scale 0.25 ---- */
    {"rope", "", {5, 4, 128, 128}, {ROPE_NORMAL}, -2, 2, 64, 1e-10},
    {"rope", "", {5, 4, 128, 128}, {ROPE_NEOX}, -2, 2, 64, 1e-10},
    {"rope", "", {3, 8, 256, 64}, {ROPE_NEOX}, -2, 2, 4000, 1e-7},
    {"rope", "", {2, 2, 64, 32}, {ROPE_NORMAL}, -2, 2, 30000, 1e-6},
    {"rope", "", {1, 1, 64, 64}, {ROPE_NORMAL}, -2, 2, 1, 1e-10, {0, 0, 10000}},
    {"rope", "", {7, 32, 128, 128}, {ROPE_NEOX}, -2, 2, 40000, 1e-6},
    {"rope", "", {9, 5, 128, 64}, {ROPE_NEOX}, -2, 2, 2000, 1e-7, {256, 128}}, /* q read from (q, gate) pairs */
    {"rope", "", {4, 2, 10, 6}, {ROPE_NORMAL}, -2, 2, 500, 1e-7, {3, 1, 10000}, ROPE_T_SCALE},
    {"rope", "", {300, 8, 64, 32}, {ROPE_NEOX}, -2, 2, 131072, 1e-5, {17, 0, 500000}},
    /* rope_norm (CUDA, fused): {n_tokens, n_head, head_dim, n_rot}: bit-identical to norm then rope on the device */
    {"rope_norm", "", {5, 8, 128, 128}, {ROPE_NEOX}, -2, 2, 0, 0, .flags = ROPE_T_INPLACE, .cols = ONLY_CUDA},
    {"rope_norm", "", {3, 16, 128, 128}, {ROPE_NEOX}, -2, 2, 0, 0, .cols = ONLY_CUDA},
    {"rope_norm", "", {4, 8, 256, 64}, {ROPE_NEOX}, -2, 2, 0, 0, .flags = ROPE_T_GATED, .cols = ONLY_CUDA},
    {"rope_norm", "", {2, 3, 64, 64}, {ROPE_NORMAL}, -2, 2, 0, 0, .cols = ONLY_CUDA},
    /* ---- act: {n, rows}, param[0] = op, param[1] = x2_stride (0: n), fparam = softmax scale; every case also
     * runs with y aliasing x, and (packed x2 of a per-element op) y aliasing x2 ---- */
    {"act", "", {1000, 3}, {ACT_SILU}, -20, 20, 0, 1e-10},
    {"act", "", {1, 1}, {ACT_SILU}, -8, 8, 0, 1e-10},
    {"act", "", {4097, 2}, {ACT_SWIGLU}, -8, 8, 0, 1e-10},
    {"act", "", {7, 5}, {ACT_SWIGLU}, -8, 8, 0, 1e-10},
    {"act", "", {256, 4}, {ACT_SWIGLU, 300}, -8, 8, 0, 1e-10},
    {"act", "", {151, 4}, {ACT_SOFTMAX}, -100, 100, 1.0f, 1e-10},
    {"act", "", {64, 1}, {ACT_SOFTMAX}, -3, 3, 0.125f, 1e-10},
    {"act", "", {1, 1}, {ACT_SOFTMAX}, -100, 100, 1.0f, 1e-10},
    {"act", "", {300, 4}, {ACT_SOFTMAX}, -100, 100, 0.0884f, 1e-10},
    {"act", "", {4097, 2}, {ACT_SOFTMAX}, -100, 100, 1.0f, 1e-10},
    {"act", "", {1000, 3}, {ACT_SIGMOID_MUL}, -8, 8, 0, 1e-12},
    {"act", "", {256, 5}, {ACT_SIGMOID_MUL, 300}, -8, 8, 0, 1e-12},
    {"act", "", {33, 3}, {ACT_SIGMOID_MUL}, -8, 8, 0, 1e-12},
    {"act", "", {300, 4}, {ACT_SIGMOID_MUL_ROW, 1}, -8, 8, 0, 1e-12},
    {"act", "", {64, 3}, {ACT_SIGMOID_MUL_ROW, 0}, -8, 8, 0, 1e-12},
    {"act", "", {100, 3}, {ACT_SIGMOID_MUL_ROW, 107}, -8, 8, 0, 1e-12},
    {"act", "", {4097, 2}, {ACT_ADD}, -8, 8, 0, 1e-12},
    {"act", "", {999, 4}, {ACT_ADD, 1003}, -8, 8, 0, 1e-12},
    /* ---- ssm_conv: {n_ch, n_tokens, d_conv}, param[0] = snapshot ring size (0: none), aux = {x pad (0: 3),
     * first ring position (0: 5)} ---- */
    {"ssm_conv", "", {96, 1, 4}, {0}, -2, 2, 0, 1e-12},
    {"ssm_conv", "", {1000, 1, 4}, {0}, -3, 3, 0, 1e-12},
    {"ssm_conv", "", {200, 2, 4}, {3}, -2, 2, 0, 1e-12},
    {"ssm_conv", "", {1000, 37, 4}, {4}, -2, 2, 0, 1e-12},
    {"ssm_conv", "", {300, 17, 4}, {5}, -3, 3, 0, 1e-12, {10, 7}},
    {"ssm_conv", "", {64, 5, 2}, {5}, -2, 2, 0, 1e-12},
    {"ssm_conv", "", {96, 6, 16}, {2}, -3, 3, 0, 1e-12, {4, 1}}, /* d_conv 16, CUDA's limit */
    {"ssm_conv", "", {129, 0, 4}, {0}, -3, 3, 0, 1e-12},         /* no tokens: the window stays */
    {"ssm_conv", "", {8192, 3, 4}, {4}, -3, 3, 0, 1e-12},        /* a real conv width (qwen35 2 x 2048 + 4096) */
    {"ssm_conv", "", {96, 3, 4}, {3}, -3, 3, 0, 1e-12, {0, 1}},   /* position 1: taps of positions < 0 */
    {"ssm_conv", "", {64, 30, 4}, {2}, -3, 3, 0, 1e-12, {0, 23}}, /* more tokens than ring slots */
    /* ---- gdn: {n_tokens, n_group, n_vhead, d_state}, param[0] = variant, param[1] = GDN_T_* flags ---- */
    {"gdn", "", {1, 2, 4, 128}, {GDN_RECURRENT, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {2, 2, 6, 64}, {GDN_RECURRENT, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    {"gdn", "", {5, 2, 6, 32}, {GDN_RECURRENT, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {17, 2, 4, 128}, {GDN_RECURRENT, GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {3, 1, 3, 40}, {GDN_RECURRENT, GDN_T_SNAP}, -1, 1, 0, 1e-11},  /* odd d_state: partial lanes */
    /* d_state 72: CUDA's last block of 16 columns leaves a warp without columns that still loads q, k */
    {"gdn", "", {4, 2, 2, 72}, {GDN_RECURRENT, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {2, 2, 2, 256}, {GDN_RECURRENT, GDN_T_GROUPED}, -1, 1, 0, 1e-11}, /* CUDA's d_state limit */
    {"gdn", "", {6, 3, 6, 32}, {GDN_AUTO, GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {48, 2, 4, 32}, {GDN_AUTO, GDN_T_GROUPED}, -1, 1, 0, 1e-11}, /* under 64 tokens: recurrent */
    {"gdn", "", {65, 1, 3, 128}, {GDN_AUTO, GDN_T_GROUPED}, -1, 1, 0, 1e-11},  /* from 64 tokens: chunked */
    /* chunked: one token, a chunk short of full, full, one over, several, a long prefill (few heads) */
    {"gdn", "", {1, 2, 4, 128}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {2, 2, 6, 64}, {GDN_CHUNKED, GDN_T_GROUPED | GDN_T_AB_GROUP}, -1, 1, 0, 1e-11},
    {"gdn", "", {63, 2, 4, 128}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {64, 1, 2, 128}, {GDN_CHUNKED, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    {"gdn", "", {65, 2, 6, 128}, {GDN_CHUNKED, GDN_T_GROUPED | GDN_T_AB_GROUP}, -1, 1, 0, 1e-11},
    {"gdn", "", {130, 2, 4, 128}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {300, 2, 4, 128}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {2000, 1, 2, 128}, {GDN_AUTO, 0}, -1, 1, 0, 1e-11, .slow = 1},
    /* snapshots: chunked up to snap_from (mid-chunk), recurrent after, in one call */
    {"gdn", "", {130, 1, 2, 64}, {GDN_CHUNKED, GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {70, 2, 4, 32}, {GDN_CHUNKED, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {140, 2, 6, 128}, {GDN_CHUNKED, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    /* d_state not a multiple of 16 (zero-padded to 48 / 80), and 256 (CUDA: chunks of 32) */
    {"gdn", "", {100, 1, 3, 40}, {GDN_CHUNKED, GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {90, 2, 2, 72}, {GDN_CHUNKED, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {100, 2, 2, 256}, {GDN_CHUNKED, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    /* real models: qwen35 (tiled value heads) and qwen3next (grouped, fused ssm_ba), 16 k-heads / 32 v-heads */
    {"gdn", "", {2, 16, 32, 128}, {GDN_AUTO, 0}, -1, 1, 0, 1e-11},
    {"gdn", "", {3, 16, 32, 128}, {GDN_RECURRENT, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn", "", {80, 16, 32, 128}, {GDN_AUTO, GDN_T_GROUPED | GDN_T_AB_GROUP}, -1, 1, 0, 1e-11, .slow = 1},
    /* ---- gdn_conv (fused decode form, CUDA; cpu: its reference pair): {n_tokens, n_group, n_vhead, d_state},
     * param[1] = GDN_T_* flags, aux[1] = the run's position (0: 6) ---- */
    {"gdn_conv", "", {1, 2, 4, 128}, {0, 0}, -1, 1, 0, 1e-11},
    {"gdn_conv", "", {2, 2, 6, 64}, {0, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    {"gdn_conv", "", {5, 2, 6, 32}, {0, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn_conv", "", {8, 2, 4, 128}, {0, GDN_T_SNAP}, -1, 1, 0, 1e-11, {0, 9}},
    {"gdn_conv", "", {3, 1, 3, 40}, {0, GDN_T_SNAP}, -1, 1, 0, 1e-11, {0, 1}},
    {"gdn_conv", "", {4, 2, 2, 72}, {0, 0}, -1, 1, 0, 1e-11},
    {"gdn_conv", "", {2, 2, 2, 256}, {0, GDN_T_GROUPED}, -1, 1, 0, 1e-11},
    {"gdn_conv", "", {7, 3, 6, 32}, {0, GDN_T_SNAP}, -1, 1, 0, 1e-11, {0, 13}},
    {"gdn_conv", "", {1, 16, 32, 128}, {0, 0}, -1, 1, 0, 1e-11},
    {"gdn_conv", "", {5, 16, 32, 128}, {0, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP}, -1, 1, 0, 1e-11},
    {"gdn_conv", "", {6, 1, 4, 16}, {0, GDN_T_SNAP}, -1, 1, 0, 1e-11},               /* one column block a head */
    {"gdn_conv", "", {8, 2, 4, 256}, {0, GDN_T_GROUPED | GDN_T_SNAP}, -1, 1, 0, 1e-11}, /* 16 column blocks a head */
    /* ---- attn: {n_tokens, n_head, n_head_kv, head_dim}, param = {n_kv, rot_k (rot_v = 64 then)}, fparam = scale
     * (0: 1/sqrt(d)), q in [lo, hi], aux[0] = first position (0: the last n_tokens cells, a causal prefill).
     * f16 cells (types ""), Q8_0 cells (types "q8_0"); CUDA: the default with split-K scratch, ATTN_SIMT with and
     * without it, and ATTN_MMA for head_dim 64/128/256 ---- */
    {"attn", "", {1, 8, 2, 128}, {37}, -4, 4, 1.0f, 1e-9},
    {"attn", "", {5, 16, 2, 256}, {40}, -1, 1, 0, 1e-9},
    {"attn", "", {3, 4, 4, 64}, {3}, -16, 16, 1.0f, 1e-9},
    {"attn", "", {1, 8, 8, 64}, {100}, -4, 4, 0, 1e-9},                 /* decode, G = 1, no split */
    {"attn", "", {1, 16, 8, 128}, {600}, -4, 4, 0, 1e-9},               /* decode, G = 2, 2 splits */
    {"attn", "", {1, 32, 4, 128}, {2600}, -200, 200, 0, 1e-7},          /* G = 8, 10 splits, scores ~100 */
    {"attn", "", {1, 32, 4, 128}, {2048}, -4, 4, 0, 1e-9, {700}},       /* pos far below n_kv: empty splits */
    {"attn", "", {2, 8, 2, 128}, {2048}, -4, 4, 0, 1e-9, {100}},        /* early in a long context: only split 0 */
    {"attn", "", {8, 16, 1, 512}, {600}, -4, 4, 0, 1e-9},               /* hd 512, G = 16: heads over blocks */
    {"attn", "", {3, 3, 1, 7}, {9}, -4, 4, 0, 1e-9},                    /* odd head_dim, G = 3 */
    {"attn", "", {37, 6, 3, 80}, {57}, -8, 8, 0, 1e-9},                 /* prefill, G = 2, hd 80 */
    {"attn", "", {70, 8, 8, 64}, {70}, -4, 4, 0, 1e-9},                 /* prefill from 0, G = 1 */
    {"attn", "", {40, 16, 4, 128}, {60}, -8, 8, 0, 1e-9},               /* prefill after a cached prefix */
    {"attn", "", {100, 16, 2, 256}, {100}, -200, 200, 0, 1e-7},         /* prefill from 0, G = 8, large scores */
    /* real models: head_dim 256, GQA 24:4 (qwen35): speculative verify with splits, a prefill chunk */
    {"attn", "", {4, 24, 4, 256}, {777}, -30, 30, 0, 1e-8},
    {"attn", "", {64, 24, 4, 256}, {80}, -8, 8, 0, 1e-9},
    /* Q8_0 cells, param[1] = rot_k: without and with llama.cpp's Hadamard rotation */
    {"attn", "q8_0", {1, 8, 2, 128}, {37}, -4, 4, 1.0f, 1e-9},
    {"attn", "q8_0", {5, 16, 2, 256}, {40}, -1, 1, 0, 1e-9},
    {"attn", "q8_0", {7, 6, 2, 64}, {300}, -2, 2, 0, 1e-9},
    {"attn", "q8_0", {1, 8, 2, 128}, {37, 128}, -4, 4, 1.0f, 1e-9},
    {"attn", "q8_0", {5, 16, 2, 256}, {40, 256}, -1, 1, 0, 1e-9},
    {"attn", "q8_0", {7, 6, 2, 64}, {300, 64}, -2, 2, 0, 1e-9},
    {"attn", "q8_0", {1, 16, 8, 128}, {1000, 128}, -4, 4, 0, 1e-9},     /* decode with splits */
    {"attn", "q8_0", {1, 32, 4, 128}, {4096, 128}, -200, 200, 0, 1e-7, .slow = 1},
    {"attn", "q8_0", {8, 16, 1, 512}, {600, 512}, -4, 4, 0, 1e-9},
    {"attn", "q8_0", {4, 24, 4, 256}, {777, 256}, -30, 30, 0, 1e-8},
    /* prefill on the tensor cores (AUTO: ATTN_MMA), Q8_0 cells without and with the rotation */
    {"attn", "q8_0", {40, 16, 4, 128}, {60}, -8, 8, 0, 1e-9},
    {"attn", "q8_0", {40, 16, 4, 128}, {60, 128}, -8, 8, 0, 1e-9},
    {"attn", "q8_0", {70, 8, 8, 64}, {70, 64}, -4, 4, 0, 1e-9},       /* G = 1, one 64-cell tile then a partial */
    {"attn", "q8_0", {24, 8, 2, 256}, {50}, -200, 200, 0, 1e-7},      /* large scores */
    {"attn", "q8_0", {33, 24, 4, 256}, {80, 256}, -8, 8, 0, 1e-9},    /* G = 6: 64-row blocks across tokens */
    /* prefill batches with fewer than ATTN_MMA_MIN_ROWS rows per KV group: AUTO keeps ATTN_SIMT */
    {"attn", "", {12, 2, 2, 64}, {30}, -4, 4, 0, 1e-9},
    {"attn", "q8_0", {12, 4, 2, 128}, {40, 128}, -4, 4, 0, 1e-9},
    /* ---- embed: {n_embd, n_rows, n_tokens}; kv_store: {row, n_cells, n_tokens}, param[0] = rot (Q8_0) ---- */
    {"embed", ALL_W, {512, 40, 7}, {0}, -1, 1, 0, 0},
    {"embed", "f32,f16,bf16,q8_0,q4_0,iq4_nl,mxfp4," LEGACY_W, {96, 9, 5}, {0}, -1, 1, 0, 0},
    {"embed", FLOAT_W, {77, 3, 3}, {0}, -1, 1, 0, 0},
    {"embed", IQ_W, {512, 40, 7}, {0}, -1, 1, 0, 0},
    {"kv_store", "", {256, 20, 6}, {0}, -70000, 70000, 0, 0},
    {"kv_store", "", {40, 3, 3}, {0}, -1, 1, 0, 0},
    {"kv_store", "", {37, 4, 2}, {0}, -1e-6f, 1e-6f, 0, 0}, /* a tail past the 8-value groups; f16 subnormals */
    {"kv_store", "", {520, 17, 5}, {0}, -70000, 70000, 0, 0},
    {"kv_store", "q8_0", {256, 20, 6}, {0}, -3, 3, 0, 0},
    {"kv_store", "q8_0", {64, 3, 3}, {0}, -1e4, 1e4, 0, 0},
    {"kv_store", "q8_0", {512, 17, 5}, {0}, -70000, 70000, 0, 0},
    {"kv_store", "q8_0", {256, 20, 6}, {128}, -3, 3, 0, 0},
    {"kv_store", "q8_0", {512, 5, 3}, {64}, -1e4, 1e4, 0, 0},
    {"kv_store", "q8_0", {512, 17, 5}, {512}, -70000, 70000, 0, 0},
    /* ---- moe_route: {n_tokens, n_expert, n_expert_used}, param = {norm, ties (logits from 5 values)} ---- */
    {"moe_route", "", {3, 64, 8}, {1}, -8, 8, 0, 0},
    {"moe_route", "", {2, 128, 8}, {0}, -8, 8, 0, 0},
    {"moe_route", "", {1, 4, 1}, {1}, -1, 1, 0, 0},
    {"moe_route", "", {1, 8, 2}, {1}, -6, 6, 0, 0},
    {"moe_route", "", {3, 60, 4}, {0}, -6, 6, 0, 0},
    {"moe_route", "", {2, 512, 32}, {1}, -6, 6, 0, 0},   /* CUDA's limits */
    {"moe_route", "", {4, 40, 6}, {1, 1}, -6, 6, 0, 0},
    {"moe_route", "", {3, 256, 8}, {1}, -8, 8, 0, 0},    /* a real router: 256 experts, top-8 */
    /* ---- moe_ffn: {n_tokens, n_embd, n_ff, n_expert}, param = {n_expert_used, down type}, types = gate / up ---- */
    {"moe_ffn", "q4_K", {2, 256, 512, 4}, {2, INFER_TYPE_Q6_K}, -1, 1, 0, 1e-3},
    {"moe_ffn", "q8_0", {1, 128, 96, 3}, {3, INFER_TYPE_Q8_0}, -1, 1, 0, 1e-3},
    {"moe_ffn", "f16", {3, 64, 64, 8}, {2, INFER_TYPE_F16}, -1, 1, 0, 1e-6}, /* x rounded to f16 */
    {"moe_ffn", "f32", {1, 96, 40, 4}, {2, INFER_TYPE_F32}, -2, 2, 0, 1e-10},
    {"moe_ffn", "bf16", {2, 96, 64, 4}, {2, INFER_TYPE_BF16}, -2, 2, 0, 1e-4}, /* x rounded to bf16 */
    {"moe_ffn", "iq4_xs", {2, 256, 512, 4}, {2, INFER_TYPE_Q5_K}, -2, 2, 0, 1e-3},
    {"moe_ffn", "q2_K", {3, 256, 256, 4}, {2, INFER_TYPE_Q3_K}, -2, 2, 0, 1e-3},
    {"moe_ffn", "q4_0", {4, 320, 160, 5}, {5, INFER_TYPE_IQ4_NL}, -2, 2, 0, 1e-3},
    {"moe_ffn", "q4_1,q5_1", {3, 96, 64, 4}, {2, INFER_TYPE_Q5_0}, -2, 2, 0, 1e-3},
    {"moe_ffn", "mxfp4", {3, 128, 96, 4}, {2, INFER_TYPE_MXFP4}, -2, 2, 0, 1e-3}, /* MXFP4_MOE's experts */
    {"moe_ffn", "q4_K", {2, 256, 256, 256}, {8, INFER_TYPE_Q6_K}, -2, 2, 0, 1e-3}, /* 256 experts, top-8 */
    /* prefill-sized: tokens grouped by expert, experts with up to 8 tokens (mmv) and more (mm) */
    {"moe_ffn", "q4_K", {24, 256, 512, 4}, {2, INFER_TYPE_Q6_K}, -2, 2, 0, 1e-3},
    {"moe_ffn", "q8_0", {40, 128, 96, 16}, {3, INFER_TYPE_Q8_0}, -2, 2, 0, 1e-3},
    {"moe_ffn", "q5_0", {20, 64, 96, 3}, {2, INFER_TYPE_Q4_1}, -2, 2, 0, 1e-3},
    {"moe_ffn", "mxfp4", {20, 64, 96, 3}, {2, INFER_TYPE_MXFP4}, -2, 2, 0, 1e-3},
    /* the lattice types of low-bit MoE files (UD-IQ2_M, IQ3_XXS): gate / up one type, down another */
    {"moe_ffn", "iq2_xxs,iq2_s,iq1_m", {3, 256, 256, 4}, {2, INFER_TYPE_IQ3_S}, -2, 2, 0, 1e-3},
    {"moe_ffn", "iq2_xs,iq3_xxs,iq1_s,tq1_0", {20, 256, 256, 3}, {2, INFER_TYPE_TQ2_0}, -2, 2, 0, 1e-3},
    {"moe_ffn", "f32", {20, 96, 40, 3}, {2, INFER_TYPE_F32}, -2, 2, 0, 1e-10},
    /* the grouped path's plan: 256 experts top-8 (many tiles of a few pairs, most of the grid idle), and
     * two experts with 130 pairs each (three tiles apiece, the last of 2 pairs) */
    {"moe_ffn", "q4_K", {64, 256, 256, 256}, {8, INFER_TYPE_Q6_K}, -2, 2, 0, 1e-3, .slow = 1},
    {"moe_ffn", "q8_0", {130, 64, 96, 2}, {2, INFER_TYPE_Q8_0}, -2, 2, 0, 1e-3},
    /* ---- sample: {n_vocab, n_rows}, param = {parameter sets (bits of tops_sample_sets, 0: all), logit kinds
     * (bits of MODE_*, 0: all)}; a vocab-248320 row (qwen35) ---- */
    {"sample", "", {1, 4}, {0x6309, 0x9}, 0, 0, 0, 0},
    {"sample", "", {7, 4}, {0, 0x1b}, 0, 0, 0, 0},
    {"sample", "", {1000, 4}, {0}, 0, 0, 0, 0},
    {"sample", "", {1025, 4}, {0, 0x7}, 0, 0, 0, 0},
    {"sample", "", {32000, 4}, {0x7f3, 0x3}, 0, 0, 0, 0},
    {"sample", "", {248320, 2}, {0x423, 0x1}, 0, 0, 0, 0},
    /* sliced rows (sample.cu, 16 slices): greedy, penalties, top-k 40 / 1 / 1024, defaults, all, every kind */
    {"sample", "", {65536, 2}, {0x61f, 0}, 0, 0, 0, 0},
    /* ---- errors: hostile arguments get a status (CPU) or cudaErrorInvalidValue (the launchers), never a crash ---- */
    /* ---- spec_accept: {n_vocab, list length, steps}, param = {k} ---- */
    {"spec_accept", "", {50, 12, 400}, {1}, 0, 0, 0, 0},
    {"spec_accept", "", {300, 40, 300}, {4}, 0, 0, 0, 0},
    {"spec_accept", "", {5000, 1024, 60}, {3}, 0, 0, 0, 0},
    {"errors", "", {0}, {0}, 0, 0, 0, 0},
    /* ---- CPU only: the thread pool {n, grain, threads}; CUDA only: the backend's memory and op table, and
     * the cuBLAS mode's chunk planner (host arithmetic) ---- */
    {"pool", "", {1000, 3, 7}, {0}, 0, 0, 0, 0, .cols = ONLY_CPU},
    {"pool", "", {5, 16, 3}, {0}, 0, 0, 0, 0, .cols = ONLY_CPU},
    {"backend", "", {0}, {0}, 0, 0, 0, 0, .cols = ONLY_CUDA},
    {"mm_plan", "", {0}, {0}, 0, 0, 0, 0, .cols = ONLY_CUDA},
};
#pragma GCC diagnostic pop
#define N_CASES (int)(sizeof tops_cases / sizeof tops_cases[0])

/* ---- the column under test ---- */
struct tctx {
    const struct tcase *c;
    int32_t type;
    int col;
    struct infer_backend *cpu; /* the CPU backend: the cpu column, and the CUDA column's twin */
    const char *tname;         /* the type's name as the case lists it (mmv_multi: one per part, '+' between) */
    char desc[200];
};

/* The status of an op call: 0 or a failure naming the op and the error. */
static int tops_ok(struct tctx *x, const char *op, int st) {
    T_CHECK(st == 0, "%s: %s: %s", x->desc, op, x->col == COL_CUDA ? cu_error(st) : infer_last_error());
    return st == 0;
}
/* Runs the op in the column: the CPU backend's entry or the CUDA launcher on device mirrors. */
#define OP(x, op, a) tops_ok((x), #op, (x)->col == COL_CUDA ? cu_##op(a) : (int)(x)->cpu->ops->op((x)->cpu, (a)))
/* The same on the CPU, whatever the column (the CUDA column's twin and unfused chains). */
#define CPU_OP(x, op, a) ((x)->cpu->ops->op((x)->cpu, (a)) == INFER_OK)

#define NMSE(x, y, r, n, tol)                                                                                \
    do {                                                                                                     \
        int nan_;                                                                                            \
        double e_ = util_nmse((y), (r), (n), &nan_);                                                         \
        T_CHECK(!nan_ && e_ <= (tol), "%s: NMSE %.3g > %.3g%s", (x)->desc, e_, (double)(tol), nan_ ? " (NaN/Inf)" : ""); \
    } while (0)

/* The ref column: the reference itself must be finite (a check that its inputs are sane). */
static int tops_ref_only(struct tctx *x, const double *r, int64_t n) {
    if (x->col != COL_REF) return 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !isfinite(r[i]);
    T_CHECK(bad == 0, "%s: %lld reference values not finite", x->desc, (long long)bad);
    return 1;
}

/* Elements of y (n floats) that the op must not write, still bit-identical to the pre-fill. */
static void tops_untouched(struct tctx *x, const float *y, const float *before, int64_t n, int64_t row, int64_t stride,
                           const char *what) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (i % stride >= row) bad += memcmp(&y[i], &before[i], sizeof(float)) != 0;
    T_CHECK(bad == 0, "%s: %lld %s elements between rows written", x->desc, (long long)bad, what);
}

#include "ops_matmul.inc"
#include "ops_layers.inc"

/* ---- refusals ---- */

/* The CPU backend: hostile arguments get a status, never a crash. */
static void run_errors_cpu(struct tctx *x) {
    const char *desc = x->desc;
    struct infer_backend *be = x->cpu;
    float f[512] = {0}, y[512];
    uint8_t q[2048] = {0};
    int32_t pos[1] = {-1}, ids[2] = {0, 99};
    struct mmv_args m = {.type = 40 /* NVFP4 */, .w = q, .n_in = 256, .n_out = 1, .n_tokens = 1, .xq = q, .x = f, .y = y};
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_UNSUPPORTED, "%s: NVFP4 mmv", desc);
    m.type = INFER_TYPE_Q4_K;
    m.n_in = 200; /* not a multiple of 256 */
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: n_in 200 for Q4_K", desc);
    m.n_in = 256;
    m.n_tokens = 9;
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: mmv with 9 tokens", desc);
    m.n_tokens = 1;
    m.epilogue = MMV_SWIGLU; /* no w2 */
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: SwiGLU without w2", desc);
    m.epilogue = 7;
    T_CHECK(be->ops->mmv(be, &m) == INFER_E_ARG, "%s: epilogue 7", desc);
    m.epilogue = MMV_PLAIN;
    struct mmv_multi_args mm = {.n = 0, .p = {m, m}};
    mm.p[1].y = y + 8;
    T_CHECK(be->ops->mmv_multi(be, &mm) == INFER_E_ARG, "%s: mmv_multi of 0 products", desc);
    mm.n = MMV_MULTI_MAX + 1;
    T_CHECK(be->ops->mmv_multi(be, &mm) == INFER_E_ARG, "%s: mmv_multi of %d products", desc, MMV_MULTI_MAX + 1);
    mm.n = 2, mm.p[1].n_tokens = 2;
    T_CHECK(be->ops->mmv_multi(be, &mm) == INFER_E_ARG, "%s: mmv_multi of 1 and 2 tokens", desc);
    mm.p[1].n_tokens = 1, mm.p[1].y = y;
    T_CHECK(be->ops->mmv_multi(be, &mm) == INFER_E_ARG, "%s: mmv_multi with one output twice", desc);
    mm.p[1].y = f + 4; /* inside part 0's x */
    T_CHECK(be->ops->mmv_multi(be, &mm) == INFER_E_ARG, "%s: mmv_multi writing another part's input", desc);
    mm.p[1].y = y + 8, mm.p[1].type = 40;
    T_CHECK(be->ops->mmv_multi(be, &mm) == INFER_E_UNSUPPORTED, "%s: mmv_multi with an NVFP4 part", desc);
    struct quantize_args qa = {.type = INFER_TYPE_F32, .x = f, .y = q, .n = 256, .n_rows = 1, .x_stride = 256};
    T_CHECK(be->ops->quantize(be, &qa) == INFER_E_UNSUPPORTED, "%s: quantize to F32", desc);
    /* a list of a chain that keeps more survivors than a list holds; spec_accept with an empty list */
    static struct sample_list lists[2];
    static float big[2000];
    double u1[2] = {0.5, 0.5};
    struct sample_args sl = {.logits = big, .stride = 2000, .n_rows = 1, .n_vocab = 2000, .repeat_penalty = 1, .top_p = 1,
                             .temp = 1, .u = u1, .out = ids, .scratch = malloc(sample_scratch_bytes(1, 2000)),
                             .list = lists};
    T_CHECK(be->ops->sample(be, &sl) == INFER_E_ARG, "%s: a list of 2000 survivors", desc);
    free(sl.scratch);
    lists[0].n = 0, lists[1].n = 1;
    int32_t sa_out[3];
    struct spec_accept_args sa = {.target = lists, .draft = lists + 1, .drafts = ids, .p_draw = ids, .u_acc = u1,
                                  .u_res = u1, .k = 1, .force = -1, .out = sa_out};
    T_CHECK(be->ops->spec_accept(be, &sa) == INFER_E_ARG, "%s: spec_accept over an empty list", desc);
    qa.type = INFER_TYPE_Q8_0;
    qa.n = 33;
    T_CHECK(be->ops->quantize(be, &qa) == INFER_E_ARG, "%s: quantize n 33", desc);
    uint16_t kv[64] = {0};
    struct attn_args at = {.q = f, .k = kv, .v = kv, .out = y, .pos = pos, .n_tokens = 1, .n_head = 3, .n_head_kv = 2,
                           .head_dim = 8, .n_kv = 4, .q_stride = 24, .kv_stride = 16, .out_stride = 24, .scale = 1,
                           .kv_type = INFER_TYPE_F16};
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: 3 heads over 2 kv heads", desc);
    at.n_head = 4;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: negative position", desc);
    pos[0] = 0;
    at.kv_type = INFER_TYPE_F32;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_UNSUPPORTED, "%s: attention over f32 cells", desc);
    at.kv_type = INFER_TYPE_Q8_0;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: Q8_0 cells with head_dim 8", desc);
    at.head_dim = 64, at.kv_stride = 128, at.q_stride = at.out_stride = 256, at.rot_k = 48;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: Q8_0 rot_k 48", desc);
    at.kv_type = INFER_TYPE_F16, at.rot_k = 64;
    T_CHECK(be->ops->attn(be, &at) == INFER_E_ARG, "%s: a rotation of f16 cells", desc);
    pos[0] = -1;
    struct kv_store_args ks = {.x = f, .cells = q, .pos = pos, .row = 40, .x_stride = 40, .cell_stride = 64,
                               .type = INFER_TYPE_Q8_0};
    T_CHECK(be->ops->kv_store(be, &ks) == INFER_E_ARG, "%s: Q8_0 cells of 40 values", desc);
    ks.row = ks.x_stride = 64, ks.rot = 128;
    T_CHECK(be->ops->kv_store(be, &ks) == INFER_E_ARG, "%s: Q8_0 rot 128 over rows of 64", desc);
    ks.rot = 0, ks.type = INFER_TYPE_BF16;
    T_CHECK(be->ops->kv_store(be, &ks) == INFER_E_UNSUPPORTED, "%s: bf16 cells", desc);
    struct rope_args ro = {.x = f, .pos = pos, .n_tokens = 1, .n_head = 1, .head_dim = 64, .n_rot = 65, .token_stride = 64,
                           .head_stride = 64, .mode = ROPE_NORMAL, .freq_base = 1e4f, .freq_scale = 1};
    T_CHECK(be->ops->rope(be, &ro) == INFER_E_ARG, "%s: n_rot 65 > head_dim", desc);
    struct moe_route_args mr = {.logits = f, .ids = ids, .weights = y, .n_tokens = 1, .n_expert = 4, .n_expert_used = 5,
                                .norm = 1};
    T_CHECK(be->ops->moe_route(be, &mr) == INFER_E_ARG, "%s: top-5 of 4 experts", desc);
    struct moe_ffn_args mf = {.type_gate_up = INFER_TYPE_F32, .type_down = INFER_TYPE_F32, .gate = f, .up = f, .down = f,
                              .x = f, .ids = ids, .weights = f, .y = y, .n_embd = 4, .n_ff = 4, .n_expert = 4,
                              .n_expert_used = 2, .n_tokens = 1};
    T_CHECK(be->ops->moe_ffn(be, &mf) == INFER_E_ARG, "%s: expert id 99 of 4", desc);
    struct act_args ac = {.op = 6, .x = f, .x2 = f, .y = y, .n = 4, .n_rows = 1};
    T_CHECK(be->ops->act(be, &ac) == INFER_E_ARG, "%s: act op 6", desc);
    ac.op = ACT_ADD;
    ac.x2 = NULL;
    T_CHECK(be->ops->act(be, &ac) == INFER_E_ARG, "%s: ACT_ADD without x2", desc);
    const int32_t cpos = 3;
    struct ssm_conv_args sc = {.x = f, .state = f, .w = f, .y = y, .n_ch = 8, .x_stride = 8, .n_tokens = 2, .d_conv = 1,
                               .pos = &cpos};
    T_CHECK(be->ops->ssm_conv(be, &sc) == INFER_E_ARG, "%s: ssm_conv d_conv 1", desc);
    sc.d_conv = 4;
    sc.pos = pos; /* -1 */
    T_CHECK(be->ops->ssm_conv(be, &sc) == INFER_E_ARG, "%s: ssm_conv position -1", desc);
    sc.pos = &cpos;
    sc.snap = y;
    T_CHECK(be->ops->ssm_conv(be, &sc) == INFER_E_ARG, "%s: ssm_conv snapshot ring 0", desc);
    sc.snap_ring = 2, sc.snap_stride = 3 * 8 - 1;
    T_CHECK(be->ops->ssm_conv(be, &sc) == INFER_E_ARG, "%s: ssm_conv snapshots closer than the window's 3 x 8", desc);
    sc.snap_ring = 0, sc.snap_stride = 0;
    struct gdn_args gd = {.q = f, .k = f, .v = f, .a = f, .b = f, .dt_bias = f, .ssm_a = f, .state = y, .out = y,
                          .n_tokens = 1, .n_group = 2, .n_vhead = 3, .d_state = 4, .qk_stride = 8, .v_stride = 12,
                          .ab_stride = 6, .eps = 1e-6f, .variant = GDN_RECURRENT};
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn 3 value heads over 2 key heads", desc);
    gd.n_vhead = 4;
    gd.v_stride = 16;
    gd.ab_group = 3;
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn ab_group 3 for 4 / 2 heads", desc);
    gd.ab_group = 0;
    gd.variant = 3;
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn variant 3", desc);
    gd.variant = GDN_RECURRENT;
    gd.d_state = 512;
    T_CHECK(be->ops->gdn(be, &gd) == INFER_E_ARG, "%s: gdn d_state 512", desc);
    struct pool *p = NULL;
    T_CHECK(pool_create(0, &p) == INFER_E_ARG && p == NULL, "%s: pool of 0 threads", desc);
}

#ifdef INFER_CUDA
#define REFUSED(call, ...) T_CHECK((call) == cudaErrorInvalidValue, __VA_ARGS__)

/* The launchers: a shape or type they cannot do is cudaErrorInvalidValue before anything touches the
 * device (so host pointers suffice here). */
static void run_errors_cuda(struct tctx *x) {
    const char *desc = x->desc;
    static float f[4096], y[4096];
    static uint8_t q[4096];
    int32_t pos[2] = {0, 1}, ids[2] = {0, 1};
    struct mmv_args m = {.type = 40 /* NVFP4 */, .w = q, .n_in = 256, .n_out = 1, .n_tokens = 1, .xq = q, .x = f, .y = y};
    REFUSED(cuda_mmv(&m, 0), "%s: mmv NVFP4", desc);
    m.type = INFER_TYPE_Q4_K, m.n_in = 128;
    REFUSED(cuda_mmv(&m, 0), "%s: mmv Q4_K over 128 values", desc);
    m.n_in = 256, m.n_tokens = 9;
    REFUSED(cuda_mmv(&m, 0), "%s: mmv with 9 tokens", desc);
    m.n_tokens = 1, m.epilogue = MMV_SWIGLU;
    REFUSED(cuda_mmv(&m, 0), "%s: mmv SwiGLU without w2", desc);
    m.epilogue = MMV_ADD;
    REFUSED(cuda_mmv(&m, 0), "%s: mmv ADD without add", desc);
    m.epilogue = 7;
    REFUSED(cuda_mmv(&m, 0), "%s: mmv epilogue 7", desc);
    m.epilogue = MMV_PLAIN, m.xq = NULL;
    REFUSED(cuda_mmv(&m, 0), "%s: mmv Q4_K without quantised activations", desc);
    m.type = INFER_TYPE_F16, m.xq = q, m.x = NULL;
    REFUSED(cuda_mmv(&m, 0), "%s: mmv F16 without activations", desc);
    m.type = INFER_TYPE_Q4_K, m.x = f;
    struct mmv_multi_args mu = {.n = 0, .p = {m, m}};
    mu.p[1].y = y + 8;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi of 0 products", desc);
    mu.n = MMV_MULTI_MAX + 1;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi of %d products", desc, MMV_MULTI_MAX + 1);
    mu.n = 2, mu.p[1].n_tokens = 2;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi of 1 and 2 tokens", desc);
    mu.p[1].n_tokens = 1, mu.p[1].y = y;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi with one output twice", desc);
    mu.p[1].y = f + 4;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi writing another part's input", desc);
    mu.p[1].y = y + 8, mu.p[1].type = 40;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi with an NVFP4 part", desc);
    mu.p[1].type = INFER_TYPE_Q4_K, mu.p[1].n_in = 128;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi with a Q4_K part over 128 values", desc);
    mu.p[1].n_in = 256, mu.p[1].n_tokens = mu.p[0].n_tokens = 9;
    REFUSED(cuda_mmv_multi(&mu, 0), "%s: mmv_multi with 9 tokens", desc);
    struct quantize_args qa = {.type = INFER_TYPE_Q8_0, .x = f, .y = q, .n = 64, .n_rows = 1, .x_stride = 64};
    REFUSED(cuda_quantize(&qa, 0), "%s: quantize to Q8_0 blocks (CUDA makes the q8 split)", desc);
    qa.type = INFER_TYPE_Q8_1, qa.n = 33;
    REFUSED(cuda_quantize(&qa, 0), "%s: quantize n 33", desc);
    qa.n = 32, qa.n_rows = 65536;
    REFUSED(cuda_quantize(&qa, 0), "%s: quantize 65536 rows", desc);
    qa.n_rows = 1, qa.n = 0;
    REFUSED(cuda_quantize(&qa, 0), "%s: quantize n 0", desc);
    qa.n = 64, qa.x_stride = 32;
    REFUSED(cuda_quantize(&qa, 0), "%s: quantize x_stride < n", desc);
    qa.x_stride = 64, qa.y = NULL;
    REFUSED(cuda_quantize(&qa, 0), "%s: quantize without an output", desc);
    /* mm: the modes' state, then the launcher */
    setenv("INFER_MATMUL", "fast", 1);
    struct cuda_mm_state *st = (struct cuda_mm_state *)1;
    REFUSED(cuda_mm_state_create(&st), "%s: INFER_MATMUL=fast", desc);
    T_CHECK(st == NULL, "%s: a refused mm state is NULL", desc);
    unsetenv("INFER_MATMUL"); /* the mma mode allocates nothing on the device */
    T_CHECK(cuda_mm_state_create(&st) == cudaSuccess && st, "%s: the default mm state", desc);
    struct mm_args mm = {.type = 40 /* NVFP4 */, .w = f, .n_in = 256, .n_out = 1, .n_tokens = 16, .x = f, .y = y};
    REFUSED(cuda_mm(&mm, st, 0), "%s: mm NVFP4", desc);
    mm.type = INFER_TYPE_Q4_K, mm.n_in = 128;
    REFUSED(cuda_mm(&mm, st, 0), "%s: mm Q4_K over 128 values", desc);
    mm.n_in = 256, mm.n_tokens = 0;
    REFUSED(cuda_mm(&mm, st, 0), "%s: mm of 0 tokens", desc);
    mm.n_tokens = 16, mm.epilogue = MMV_SWIGLU;
    REFUSED(cuda_mm(&mm, st, 0), "%s: mm SwiGLU without w2", desc);
    mm.epilogue = MMV_ADD;
    REFUSED(cuda_mm(&mm, st, 0), "%s: mm ADD without add", desc);
    mm.epilogue = 7;
    REFUSED(cuda_mm(&mm, st, 0), "%s: mm epilogue 7", desc);
    mm.epilogue = MMV_PLAIN, mm.n_tokens = 64 * 65536;
    REFUSED(cuda_mm(&mm, st, 0), "%s: mm with more token tiles than a grid holds", desc);
    REFUSED(cuda_mm(&mm, NULL, 0), "%s: mm without a state", desc);
    cuda_mm_state_free(st);
    /* norm, act, rope and the fused forms */
    struct norm_args n = {.x = f, .y = f, .n = 0, .n_rows = 2, .x_stride = 8, .y_stride = 8, .eps = 1e-6f};
    REFUSED(cuda_norm(&n, 0), "%s: norm n 0", desc);
    n.n = 8, n.x_stride = 7;
    REFUSED(cuda_norm(&n, 0), "%s: norm x_stride < n", desc);
    n.x_stride = 8, n.gate = f, n.gate_stride = 4;
    REFUSED(cuda_norm(&n, 0), "%s: norm gate_stride < n", desc);
    n.gate = NULL, n.eps = -1.0f;
    REFUSED(cuda_norm(&n, 0), "%s: norm eps < 0", desc);
    struct act_args a = {.op = 6, .x = f, .x2 = f + 32, .y = f, .n = 8, .n_rows = 2, .scale = 1};
    REFUSED(cuda_act(&a, 0), "%s: act op 6", desc);
    a.op = ACT_SWIGLU, a.x2 = NULL;
    REFUSED(cuda_act(&a, 0), "%s: act SWIGLU without x2", desc);
    a.x2 = f + 32, a.x2_stride = 4;
    REFUSED(cuda_act(&a, 0), "%s: act x2_stride < n", desc);
    a.op = ACT_SIGMOID_MUL_ROW, a.x2 = f + 8, a.x2_stride = 1; /* the gates lie inside y */
    REFUSED(cuda_act(&a, 0), "%s: act SIGMOID_MUL_ROW with its gates inside y", desc);
    struct rope_args r = {.x = f, .pos = pos, .n_tokens = 2, .n_head = 1, .head_dim = 8, .n_rot = 5, .token_stride = 8,
                          .head_stride = 8, .mode = ROPE_NORMAL, .freq_base = 1e4f, .freq_scale = 1};
    REFUSED(cuda_rope(&r, 0), "%s: rope odd n_rot", desc);
    r.n_rot = 10;
    REFUSED(cuda_rope(&r, 0), "%s: rope n_rot > head_dim", desc);
    r.n_rot = 8, r.mode = 1;
    REFUSED(cuda_rope(&r, 0), "%s: rope mode 1", desc);
    struct norm_q_args nq = {.norm = {.x = f, .y = f, .n = 40, .n_rows = 1, .x_stride = 40, .y_stride = 40, .eps = 1e-6f},
                             .q_type = INFER_TYPE_Q8_1, .yq = q};
    REFUSED(cuda_norm_q(&nq, 0), "%s: norm_q n not a multiple of 32", desc);
    nq.norm.n = nq.norm.x_stride = nq.norm.y_stride = 32, nq.q_type = INFER_TYPE_Q8_0;
    REFUSED(cuda_norm_q(&nq, 0), "%s: norm_q to Q8_0", desc);
    r.mode = ROPE_NEOX;
    struct rope_norm_args rn = {.rope = r, .src = f, .src_token_stride = 8, .src_head_stride = 8, .eps = 1e-6f};
    REFUSED(cuda_rope_norm(&rn, 0), "%s: rope_norm without a weight", desc);
    /* embed, kv_store */
    struct embed_args e = {.type = 40 /* NVFP4 */, .table = q, .n_embd = 256, .n_rows = 1, .ids = ids, .n_tokens = 1, .y = y};
    REFUSED(cuda_embed(&e, 0), "%s: embed from an NVFP4 table", desc);
    e.type = INFER_TYPE_F32, e.n_tokens = 65536;
    REFUSED(cuda_embed(&e, 0), "%s: embed 65536 tokens", desc);
    struct kv_store_args kv = {.x = f, .cells = q, .pos = pos, .row = 40, .x_stride = 40, .cell_stride = 64, .n_tokens = 1,
                               .type = INFER_TYPE_Q8_0};
    REFUSED(cuda_kv_store(&kv, 0), "%s: kv_store Q8_0 rows of 40 values", desc);
    kv.row = kv.x_stride = 32, kv.cell_stride = 40;
    REFUSED(cuda_kv_store(&kv, 0), "%s: kv_store Q8_0 cell_stride 40", desc);
    kv.cell_stride = 32, kv.rot = 64;
    REFUSED(cuda_kv_store(&kv, 0), "%s: kv_store Q8_0 rot 64 over rows of 32", desc);
    kv.rot = 0, kv.type = INFER_TYPE_F32;
    REFUSED(cuda_kv_store(&kv, 0), "%s: kv_store into f32 cells", desc);
    kv.type = INFER_TYPE_F16, kv.rot = 32;
    REFUSED(cuda_kv_store(&kv, 0), "%s: kv_store a rotation of f16 cells", desc);
    /* attn */
    struct attn_args at = {.n_tokens = 1, .n_head = 3, .n_head_kv = 2, .head_dim = 8, .n_kv = 4, .kv_type = INFER_TYPE_F16};
    REFUSED(cuda_attn(&at, 0), "%s: attn without buffers", desc);
    at.q = f, at.k = q, at.v = q, at.out = y, at.pos = pos, at.q_stride = at.out_stride = 24, at.kv_stride = 16;
    REFUSED(cuda_attn(&at, 0), "%s: attn n_head not a multiple of n_head_kv", desc);
    at.n_head = 2, at.head_dim = 1024;
    REFUSED(cuda_attn(&at, 0), "%s: attn head_dim 1024", desc);
    at.head_dim = 8, at.variant = ATTN_MMA;
    REFUSED(cuda_attn(&at, 0), "%s: ATTN_MMA head_dim 8", desc);
    at.variant = 3;
    REFUSED(cuda_attn(&at, 0), "%s: attn variant 3", desc);
    at.variant = ATTN_AUTO, at.kv_type = INFER_TYPE_F32;
    REFUSED(cuda_attn(&at, 0), "%s: attn over f32 cells", desc);
    at.kv_type = INFER_TYPE_Q8_0, at.kv_stride = 32;
    REFUSED(cuda_attn(&at, 0), "%s: attn Q8_0 cells with head_dim 8", desc);
    at.head_dim = 64, at.kv_stride = 128, at.q_stride = at.out_stride = 128, at.rot_k = 48;
    REFUSED(cuda_attn(&at, 0), "%s: attn rot_k 48", desc);
    at.rot_k = 0, at.rot_v = 128;
    REFUSED(cuda_attn(&at, 0), "%s: attn rot_v 128 over head_dim 64", desc);
    at.rot_v = 0, at.kv_type = INFER_TYPE_F16, at.rot_k = 64;
    REFUSED(cuda_attn(&at, 0), "%s: attn a rotation of f16 cells", desc);
    at.rot_k = 0, at.variant = ATTN_MMA, at.kv_stride = 129;
    REFUSED(cuda_attn(&at, 0), "%s: ATTN_MMA over f16 cells an odd number of values apart", desc);
    /* ssm_conv, gdn */
    struct ssm_conv_args sc = {.x = f, .state = f, .w = f, .y = y, .n_ch = 8, .x_stride = 8, .n_tokens = 1, .d_conv = 17,
                               .pos = (const int32_t *)f};
    REFUSED(cuda_ssm_conv(&sc, 0), "%s: ssm_conv d_conv 17", desc);
    sc.d_conv = 1;
    REFUSED(cuda_ssm_conv(&sc, 0), "%s: ssm_conv d_conv 1", desc);
    sc.d_conv = 4, sc.snap = y;
    REFUSED(cuda_ssm_conv(&sc, 0), "%s: ssm_conv snapshot ring 0", desc);
    sc.snap_ring = 2, sc.snap_stride = 3 * 8 - 1;
    REFUSED(cuda_ssm_conv(&sc, 0), "%s: ssm_conv snapshots closer than the window's 3 x 8", desc);
    sc.snap_ring = 0, sc.snap_stride = 0;
    struct gdn_args gd = {.q = f, .k = f, .v = f, .a = f, .b = f, .dt_bias = f, .ssm_a = f, .state = y, .out = y,
                          .n_tokens = 1, .n_group = 2, .n_vhead = 3, .d_state = 4, .qk_stride = 8, .v_stride = 12,
                          .ab_stride = 6, .eps = 1e-6f, .variant = GDN_RECURRENT};
    REFUSED(cuda_gdn(&gd, 0), "%s: gdn 3 value heads over 2 key heads", desc);
    gd.n_vhead = 4, gd.v_stride = 16, gd.ab_group = 3;
    REFUSED(cuda_gdn(&gd, 0), "%s: gdn ab_group 3 for 4 / 2 heads", desc);
    gd.ab_group = 0, gd.variant = 3;
    REFUSED(cuda_gdn(&gd, 0), "%s: gdn variant 3", desc);
    gd.variant = GDN_RECURRENT, gd.d_state = 512, gd.qk_stride = 1024, gd.v_stride = 2048;
    REFUSED(cuda_gdn(&gd, 0), "%s: gdn d_state 512", desc);
    gd.d_state = 4, gd.qk_stride = 8, gd.v_stride = 16;
    struct gdn_conv_args gc = {.conv = sc, .gdn = gd};
    gc.conv.snap = NULL, gc.conv.n_ch = gc.conv.x_stride = 31, gc.conv.d_conv = 4;
    REFUSED(cuda_gdn_conv(&gc, 0), "%s: gdn_conv 31 channels for (2 * 2 + 4) heads of 4", desc);
    gc.conv.n_ch = gc.conv.x_stride = 32, gc.conv.n_tokens = gc.gdn.n_tokens = MMV_MAX_TOKENS + 1;
    REFUSED(cuda_gdn_conv(&gc, 0), "%s: gdn_conv over more than MMV_MAX_TOKENS tokens", desc);
    gc.conv.n_tokens = 1;
    REFUSED(cuda_gdn_conv(&gc, 0), "%s: gdn_conv token counts differ", desc);
    gc.gdn.n_tokens = 1, gc.norm_done = (uint32_t *)q, gc.norm_eps = -1.0f;
    REFUSED(cuda_gdn_conv(&gc, 0), "%s: gdn_conv output norm eps -1", desc);
    /* moe */
    struct moe_route_args mr = {.logits = f, .ids = ids, .weights = y, .n_tokens = 1, .n_expert = 4, .n_expert_used = 5,
                                .norm = 1};
    REFUSED(cuda_moe_route(&mr, 0), "%s: moe_route top-5 of 4 experts", desc);
    mr.n_expert = 1024, mr.n_expert_used = 8;
    REFUSED(cuda_moe_route(&mr, 0), "%s: moe_route 1024 experts", desc);
    struct moe_ffn_args mf = {.type_gate_up = INFER_TYPE_Q4_K, .type_down = INFER_TYPE_Q4_K, .n_embd = 128, .n_ff = 256};
    REFUSED(cuda_moe_ffn(&mf, 0), "%s: moe_ffn without buffers, rows off the block size", desc);
    /* sample: a set nothing cuts over a large vocabulary, a draw without u */
    struct sample_args sa = {.logits = f, .stride = 32000, .n_rows = 1, .n_vocab = 32000, .repeat_penalty = 1, .top_p = 1,
                             .temp = 1, .u = (const double *)f, .out = ids, .scratch = q};
    REFUSED(cuda_sample(&sa, 0), "%s: sample temperature alone over 32000 logits", desc);
    sa.top_k = 4000;
    REFUSED(cuda_sample(&sa, 0), "%s: sample top-k 4000 alone over 32000 logits", desc);
    sa.top_k = 0, sa.n_vocab = 1000, sa.stride = 1000, sa.u = NULL;
    REFUSED(cuda_sample(&sa, 0), "%s: sample temp > 0 without u", desc);
    sa.n_vocab = sa.stride = 2000, sa.u = (const double *)f, sa.top_p = 0.9f, sa.list = (struct sample_list *)q;
    REFUSED(cuda_sample(&sa, 0), "%s: a list of a chain with no top-k over 2000 logits", desc);
    struct spec_accept_args spa = {.target = (const struct sample_list *)q, .draft = (const struct sample_list *)q,
                                   .drafts = ids, .p_draw = ids, .u_acc = (const double *)f, .u_res = NULL, .k = 1,
                                   .out = ids};
    REFUSED(cuda_spec_accept(&spa, 0), "%s: spec_accept without u_res", desc);
    spa.u_res = (const double *)f, spa.k = -1;
    REFUSED(cuda_spec_accept(&spa, 0), "%s: spec_accept k -1", desc);
    cudaGetLastError();
}
#else
static void run_errors_cuda(struct tctx *x) { (void)x; }
#endif

/* ---- the CUDA backend: memory, one op through its table, errors ---- */
static void run_backend(struct tctx *x) {
    const char *desc = x->desc;
    struct infer_backend *b = NULL;
    infer_status st = backend_cuda_create(0, &b);
    T_CHECK(st == INFER_OK && b, "%s: backend_cuda_create(0): %s", desc, infer_last_error());
    if (!b) return;
    const struct infer_backend_ops *o = b->ops;
    T_CHECK(!strcmp(o->name, "cuda") && o->quantize && o->mmv && o->mm && o->mmv_multi && o->norm && o->rope && o->act &&
                o->attn && o->moe_route && o->moe_ffn && o->ssm_conv && o->gdn && o->norm_q && o->rope_norm &&
                o->gdn_conv && o->embed && o->kv_store && o->sample && o->spec_accept,
            "%s: the cuda op table ('%s') has every op, the fused forms included", desc, o->name);
    T_CHECK(!x->cpu->ops->norm_q && !x->cpu->ops->rope_norm && !x->cpu->ops->gdn_conv,
            "%s: the CPU has no fused forms (the pairs are their reference)", desc);
    T_CHECK(o->mmv_act_type(INFER_TYPE_Q4_K) == INFER_TYPE_Q8_1 && o->mmv_act_type(INFER_TYPE_F16) == -1,
            "%s: cuda mmv_act_type pairs quantised weights with Q8_1, float weights with f32", desc);
    enum { N = 4099 };
    float *h = malloc(N * 4), *back = util_nan(N);
    double *r = malloc(sizeof(double) * N);
    util_fill(h, N, -3, 3);
    void *d = NULL, *d0 = NULL;
    T_CHECK(o->alloc(b, N * 4, &d) == INFER_OK && d, "%s: alloc %d bytes: %s", desc, N * 4, infer_last_error());
    T_CHECK(o->alloc(b, 0, &d0) == INFER_OK && d0, "%s: alloc 0 bytes gives a pointer: %s", desc, infer_last_error());
    if (d) {
        T_CHECK(o->upload(b, d, h, N * 4) == INFER_OK && o->download(b, back, d, N * 4) == INFER_OK &&
                    !memcmp(back, h, N * 4),
                "%s: upload / download round trip is bit-exact: %s", desc, infer_last_error());
        /* norm in place through the table (on the backend's stream): 1 row of 4096, the 3 after it untouched */
        struct norm_args a = {.x = d, .y = d, .n = 4096, .n_rows = 1, .x_stride = 4096, .y_stride = 4096, .eps = 1e-5f};
        T_CHECK(o->norm(b, &a) == INFER_OK && o->sync(b) == INFER_OK && o->download(b, back, d, N * 4) == INFER_OK,
                "%s: norm through the table: %s", desc, infer_last_error());
        a.x = h;
        ref_norm(&a, r);
        int64_t bad = 0;
        for (int i = 0; i < N; i++) bad += i < 4096 ? !(fabs(back[i] - r[i]) <= 1e-5 * fabs(r[i]) + 1e-12) : back[i] != h[i];
        T_CHECK(bad == 0, "%s: norm through the table: %lld values off", desc, (long long)bad);
        /* a launcher refusal is INFER_E_UNSUPPORTED naming the op */
        struct act_args bad_act = {.op = ACT_ADD, .x = d, .y = d, .n = 16, .n_rows = 1};
        st = o->act(b, &bad_act);
        T_CHECK(st == INFER_E_UNSUPPORTED && strstr(infer_last_error(), "act"), "%s: ADD without x2: status %d, '%s'", desc, st,
                infer_last_error());
    }
    /* out of device memory is INFER_E_OOM with the sizes, and leaves nothing sticky behind */
    void *huge = (void *)&huge;
    st = o->alloc(b, (size_t)1 << 50, &huge);
    T_CHECK(st == INFER_E_OOM && huge == NULL && strstr(infer_last_error(), "free"), "%s: 1 PiB: status %d, '%s'", desc, st,
            infer_last_error());
    if (d) {
        struct norm_args a = {.x = d, .y = d, .n = 64, .n_rows = 1, .x_stride = 64, .y_stride = 64, .eps = 1e-5f};
        T_CHECK(o->norm(b, &a) == INFER_OK && o->sync(b) == INFER_OK, "%s: an op after the OOM still runs: %s", desc,
                infer_last_error());
    }
    o->free(b, d);
    o->free(b, d0);
    o->free(b, NULL);
    backend_free(b);
    backend_free(NULL);
    const int n_dev = device_count(NULL);
    struct infer_backend *b2 = (struct infer_backend *)&b2;
    st = backend_cuda_create(n_dev, &b2);
    T_CHECK(st == INFER_E_ARG && b2 == NULL, "%s: backend_cuda_create(%d) of %d devices: status %d", desc, n_dev, n_dev, st);
    free(h), free(back), free(r);
}

/* Without a device (or built without CUDA): backend_cuda_create's one clear error. */
static void check_create_without_device(void) {
    struct infer_backend *b = (struct infer_backend *)&b; /* not NULL: create must clear it */
    const infer_status st = backend_cuda_create(0, &b);
#ifdef INFER_CUDA
    const infer_status want = INFER_E_DEVICE;
#else
    const infer_status want = INFER_E_UNSUPPORTED;
#endif
    const char *msg = infer_last_error();
    T_CHECK(st == want && b == NULL && msg && strstr(msg, "cuda backend"),
            "backend_cuda_create without a device: status %d (want %d), out %p, message '%s'", st, want, (void *)b,
            msg ? msg : "(null)");
}

/* ---- the cuBLAS mode's chunk plan (kernels.h mm_plan_chunks: host arithmetic) ---- */
static void tops_plan(struct tctx *x, int64_t n_in, int64_t n_out, int64_t n_tokens, int swiglu, size_t scratch) {
    struct mm_chunks c;
    const int ok = mm_plan_chunks(n_in, n_out, n_tokens, swiglu, scratch, &c);
    T_CHECK(ok, "%s %lld x %lld, %lld tokens: a plan exists", x->desc, (long long)n_in, (long long)n_out, (long long)n_tokens);
    if (!ok) return;
    const size_t xbytes = (size_t)c.tokens * (size_t)n_in * 2, wbytes = (size_t)c.rows * (size_t)n_in * 2;
    const size_t tbytes = swiglu ? (size_t)c.rows * (size_t)c.tokens * 4 : 0;
    /* a partial chunk is a multiple of MM_CHUNK_ALIGN unless fewer than that fit */
    T_CHECK(c.tokens >= 1 && c.tokens <= n_tokens &&
                (c.tokens == n_tokens || c.tokens % MM_CHUNK_ALIGN == 0 || c.tokens < MM_CHUNK_ALIGN) && c.rows >= 1 &&
                c.rows <= n_out && (c.rows == n_out || c.rows % MM_CHUNK_ALIGN == 0 || c.rows < MM_CHUNK_ALIGN),
            "%s %lld x %lld, %lld tokens: chunks %lld tokens, %lld rows", x->desc, (long long)n_in, (long long)n_out,
            (long long)n_tokens, (long long)c.tokens, (long long)c.rows);
    T_CHECK(xbytes <= c.w_off && c.w_off + wbytes <= c.t_off && c.t_off + tbytes <= scratch &&
                c.w_off % MM_SCRATCH_ALIGN == 0 && c.t_off % MM_SCRATCH_ALIGN == 0,
            "%s %lld x %lld, %lld tokens: parts [0,%zu) [%zu,+%zu) [%zu,+%zu) inside %zu bytes, aligned", x->desc,
            (long long)n_in, (long long)n_out, (long long)n_tokens, xbytes, c.w_off, wbytes, c.t_off, tbytes, scratch);
}

static void run_mm_plan(struct tctx *x) {
    const char *desc = x->desc;
    struct mm_chunks c;
    /* worked by hand: avail = 64 MiB - 1024; x takes 512 * 4096 * 2 = 4 MiB; all 4096 rows fit (32 MiB) */
    T_CHECK(mm_plan_chunks(4096, 4096, 512, 0, MM_SCRATCH_BYTES, &c) && c.tokens == 512 && c.rows == 4096 &&
                c.w_off == 4194304 && c.t_off == 4194304 + 33554432,
            "%s 4096 x 4096, 512 tokens: %lld tokens, %lld rows, w at %zu, t at %zu", desc, (long long)c.tokens,
            (long long)c.rows, c.w_off, c.t_off);
    /* a long row: (avail / 2) / 37888 = 885 tokens -> 832; rows (avail - 31522816) / (37888 + 3328) = 863 -> 832 */
    T_CHECK(mm_plan_chunks(18944, 4096, 2048, 1, MM_SCRATCH_BYTES, &c) && c.tokens == 832 && c.rows == 832 &&
                c.w_off == 31522816,
            "%s 18944 x 4096, 2048 tokens, swiglu: %lld tokens, %lld rows, w at %zu", desc, (long long)c.tokens,
            (long long)c.rows, c.w_off);
    /* the mm rows' chunked shapes: 65536 x 520, 1 token, swiglu (x takes 131072 bytes; rows (avail - 131072) /
     * 131076 = 510 -> 448: chunks of 448 and 72 rows), and 262144 x 3, 64 tokens (tokens avail / 2 / 524288 =
     * 63, fewer than MM_CHUNK_ALIGN so kept: chunks of 63 and 1 token) */
    T_CHECK(mm_plan_chunks(65536, 520, 1, 1, MM_SCRATCH_BYTES, &c) && c.tokens == 1 && c.rows == 448 && c.w_off == 131072,
            "%s 65536 x 520, 1 token, swiglu: two row chunks (%lld rows)", desc, (long long)c.rows);
    T_CHECK(mm_plan_chunks(262144, 3, 64, 0, MM_SCRATCH_BYTES, &c) && c.tokens == 63 && c.rows == 3,
            "%s 262144 x 3, 64 tokens: two token chunks (%lld tokens)", desc, (long long)c.tokens);
    T_CHECK(!mm_plan_chunks(20000000, 16, 16, 0, MM_SCRATCH_BYTES, &c) && c.tokens == 0,
            "%s: a row longer than half the scratch has no plan", desc);
    T_CHECK(!mm_plan_chunks(4096, 16, 16, 0, 512, &c), "%s: a scratch below the alignment slack has no plan", desc);
    T_CHECK(!mm_plan_chunks(0, 16, 16, 0, MM_SCRATCH_BYTES, &c) && !mm_plan_chunks(16, 16, 0, 0, MM_SCRATCH_BYTES, &c),
            "%s: empty shapes have no plan", desc);
    static const int64_t n_ins[] = {1, 95, 256, 4096, 14336, 18944, 151936};
    static const int64_t n_outs[] = {1, 67, 4096, 151936};
    static const int64_t n_toks[] = {9, 130, 512, 8192};
    for (size_t i = 0; i < sizeof n_ins / sizeof *n_ins; i++)
        for (size_t o = 0; o < sizeof n_outs / sizeof *n_outs; o++)
            for (size_t t = 0; t < sizeof n_toks / sizeof *n_toks; t++)
                for (int sw = 0; sw < 2; sw++) {
                    tops_plan(x, n_ins[i], n_outs[o], n_toks[t], sw, MM_SCRATCH_BYTES);
                    tops_plan(x, n_ins[i], n_outs[o], n_toks[t], sw, (size_t)3 << 20); /* a small scratch */
                }
}

/* ---- the CPU's thread pool ---- */
struct tops_pool_job {
    int *hits;
    int64_t grain, n;
    int bad;
};
static void tops_pool_fn(void *ctx, int64_t b, int64_t e, int ith) {
    struct tops_pool_job *j = ctx;
    if (b % j->grain || (e % j->grain && e != j->n) || ith < 0) j->bad = 1;
    for (int64_t i = b; i < e; i++) __atomic_add_fetch(&j->hits[i], 1, __ATOMIC_RELAXED);
}

static void run_pool(struct tctx *x) {
    const char *desc = x->desc;
    const int64_t n = x->c->ne[0];
    struct pool *p = NULL;
    T_CHECK(pool_create((int)x->c->ne[2], &p) == INFER_OK, "%s: %s", desc, infer_last_error());
    int *hits = calloc((size_t)n, sizeof(int));
    struct tops_pool_job j = {hits, x->c->ne[1], n, 0};
    for (int rep = 0; rep < 50; rep++) pool_for(p, n, j.grain, tops_pool_fn, &j);
    int ok = !j.bad;
    for (int64_t i = 0; i < n; i++) ok &= hits[i] == 50;
    T_CHECK(ok, "%s: every index exactly once per call, grain-aligned ranges", desc);
    pool_free(p);
    free(hits);
}

/* ---- the driver ---- */

/* Whether column col runs case c of type t: the case's columns, then what each column can do. */
static int tops_applies(const struct tcase *c, int32_t t, int col) {
    if (c->cols && !(c->cols >> col & 1)) return 0;
    if (!strcmp(c->op, "quantize")) return col != COL_REF && (t == INFER_TYPE_Q8_1 || col != COL_CUDA);
    if (!strcmp(c->op, "errors") || !strcmp(c->op, "backend") || !strcmp(c->op, "mm_plan") || !strcmp(c->op, "pool") ||
        !strcmp(c->op, "kv_store") || !strcmp(c->op, "norm_q") || !strcmp(c->op, "rope_norm"))
        return col != COL_REF;
    return 1;
}

static void run_case(struct tctx *x) {
    const char *op = x->c->op;
    if (!strcmp(op, "quantize")) run_quantize(x);
    else if (!strcmp(op, "mmv")) run_matmul(x, 1);
    else if (!strcmp(op, "mm")) run_matmul(x, 0);
    else if (!strcmp(op, "mmv_multi")) run_mmv_multi(x);
    else if (!strcmp(op, "norm")) run_norm(x);
    else if (!strcmp(op, "norm_q")) run_norm_q(x);
    else if (!strcmp(op, "rope")) run_rope(x);
    else if (!strcmp(op, "rope_norm")) run_rope_norm(x);
    else if (!strcmp(op, "act")) run_act(x);
    else if (!strcmp(op, "attn")) run_attn(x);
    else if (!strcmp(op, "ssm_conv")) run_ssm_conv(x);
    else if (!strcmp(op, "gdn")) run_gdn(x);
    else if (!strcmp(op, "gdn_conv")) run_gdn_conv(x);
    else if (!strcmp(op, "embed")) run_embed(x);
    else if (!strcmp(op, "kv_store")) run_kv_store(x);
    else if (!strcmp(op, "moe_route")) run_moe_route(x);
    else if (!strcmp(op, "moe_ffn")) run_moe_ffn(x);
    else if (!strcmp(op, "sample")) run_sample(x);
    else if (!strcmp(op, "spec_accept")) run_spec_accept(x);
    else if (!strcmp(op, "errors")) x->col == COL_CUDA ? run_errors_cuda(x) : run_errors_cpu(x);
    else if (!strcmp(op, "backend")) run_backend(x);
    else if (!strcmp(op, "mm_plan")) run_mm_plan(x);
    else if (!strcmp(op, "pool")) run_pool(x);
}

/* Is `s` in the comma list `list` (NULL list: everything)? */
static int tops_in(const char *list, const char *s) {
    if (!list) return 1;
    const size_t n = strlen(s);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, s, n) == 0) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

/* tops_in for a type name of several parts ("q4_K+f32": mmv_multi): whether the list names any part or the whole. */
static int tops_in_parts(const char *list, const char *name) {
    if (tops_in(list, name)) return 1;
    for (const char *p = name; *p;) {
        const char *e = strchr(p, '+');
        char part[64];
        snprintf(part, sizeof part, "%.*s", (int)(e ? e - p : (ptrdiff_t)strlen(p)), p);
        if (tops_in(list, part)) return 1;
        p = e ? e + 1 : p + strlen(p);
    }
    return 0;
}

static double tops_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *ops = NULL, *types = NULL, *cols = "ref,cpu,cuda";
    int list = 0, n_threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) ops = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) types = argv[++i];
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) cols = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--list")) list = 1;
        else {
            fprintf(stderr, "usage: %s [-o op1,op2] [-t q4_K,...] [-b ref,cpu,cuda] [-n threads] [--list]\n", argv[0]);
            return 2;
        }
    }
    struct infer_backend *cpu = NULL;
    if (!list && backend_cpu_create(n_threads, &cpu) != INFER_OK) {
        printf("FAIL: backend_cpu_create: %s\n", infer_last_error());
        return 1;
    }
    const char *why = NULL;
    const int n_dev = list ? 0 : device_count(&why);
    int use[COL_N];
    for (int k = 0; k < COL_N; k++) use[k] = tops_in(cols, col_name[k]);
    if (!list) {
        printf("cpu: %s, %d threads; cuda: %d device(s)%s%s\n", cpu_isa(), n_threads, n_dev, why ? ", " : "", why ? why : "");
        if (use[COL_CUDA] && n_dev == 0) {
            T_SKIP("no CUDA device");
            use[COL_CUDA] = 0;
            if (use[COL_CPU]) check_create_without_device();
        }
    }
    double col_time[COL_N] = {0};
    for (int ci = 0; ci < N_CASES; ci++) {
        const struct tcase *c = &tops_cases[ci];
        if (!tops_in(ops, c->op) || (c->slow && t_quick())) continue;
        /* one run per type of the case ("" = a float op, one run) */
        const char *p = c->types;
        do {
            const char *e = strchr(p, ',');
            const size_t len = e ? (size_t)(e - p) : strlen(p);
            const int32_t t = len ? tops_type_id(p, len) : -1;
            char tname[64];
            snprintf(tname, sizeof tname, "%.*s", (int)len, p);
            p += len + (e != NULL);
            if (len && types && !tops_in_parts(types, tname)) continue;
            for (int col = 0; col < COL_N; col++) {
                if (!use[col] && !list) continue;
                if (!tops_applies(c, t, col) || (list && !tops_in(cols, col_name[col]))) continue;
                struct tctx x = {.c = c, .type = t, .col = col, .cpu = cpu, .tname = tname};
                snprintf(x.desc, sizeof x.desc, "%s %s %s ne=[%lld,%lld,%lld,%lld] p=[%d,%d]", col_name[col], c->op,
                         len ? tname : "f32", (long long)c->ne[0], (long long)c->ne[1], (long long)c->ne[2],
                         (long long)c->ne[3], c->param[0], c->param[1]);
                if (list) {
                    printf("%s\n", x.desc);
                    continue;
                }
                /* the same inputs in every column, whatever ran before */
                util_seed(0x9E3779B97F4A7C15ull ^ ((uint64_t)ci << 32) ^ (uint64_t)(uint32_t)t);
                const int before = t_fail;
                const double t0 = tops_now();
                run_case(&x);
                const double dt = tops_now() - t0;
                col_time[col] += dt;
                if (t_fail == before) printf("ok   %s (%.2f s)\n", x.desc, dt);
                fflush(stdout);
            }
        } while (*p);
    }
    cu_done();
    backend_free(cpu);
    if (list) return 0;
    printf("time: ref %.1f s, cpu %.1f s, cuda %.1f s\n", col_time[COL_REF], col_time[COL_CPU], col_time[COL_CUDA]);
    return t_done();
}
