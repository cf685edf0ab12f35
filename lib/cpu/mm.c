/* mm: quantised matrix x many tokens (prefill) and the shared row loop of cpu_mmv.
 *
 * y[t][r] = epilogue(dot(W[r], x[t])) with the dot products of mmv.c (cpu_vec_dot). Threads split
 * rows of the output (grain MM_ROWS); inside a range the loop is tiled MM_ROWS rows x MM_TOKENS tokens
 * so a tile of weight rows stays in L1/L2 while the activation tile is swept over it.
 * note: with n_tokens <= 8 (mmv) the activation tile is the whole input, read once per row.
 * With 2..8 tokens in a tile, Q4_K / Q6_K on AVX-512 VNNI take the multi-token dots (cpu_vec_dot_xn: each
 * weight block unpacked once for all tokens, the same results bit for bit); speculative verification
 * batches (2..5 tokens) otherwise cost nearly one single-token pass per token.
 * Q4_K / Q5_K / Q6_K batches of more than 8 tokens (Q5_K from 6) on AVX-512 VNNI go to the GEMM of
 * mm_kq.c instead (the same results, element by element).
 * Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 batches of 6 tokens or more on AVX-512 VNNI go to the GEMM of
 * mm_q32.c (the same results: those types' AVX-512 dots add the scalar reference's block terms in order);
 * 2..5-token verification batches keep the dots.
 * The lattice and ternary types (IQ1/IQ2/IQ3, TQ) from 3 tokens and Q2_K / Q3_K from 6 on AVX-512 VNNI go to
 * mm_iq.c's GEMM (the same results bit for bit: one exact integer per block, the dots' f32 steps).
 * F32 / F16 / BF16 batches of 2 tokens or more on AVX-512 go to mm_f.c's GEMM (the same results bit for bit: the
 * dot's accumulators and reduction per element).
 * Matrices repacked at load (type | CPU_R16, mm_r16.c) go to cpu_mm_r16 (the same results again; on AVX2 CPUs
 * mm_r16_avx2.c's kernels, the scalar dots' bits where the AVX2 dots of the file's layout sum in vector lanes).
 * On a CPU with AMX-INT8 (amx.h) the GEMMs of mm_kq.c and mm_q32.c run groups of 16 tokens through tiles (the same
 * results again).
 */
#include "cpu.h"
#include "mm_f.h"
#include "mm_iq.h"
#include "mm_kq.h"
#include "mm_q32.h"
#include "mm_r16.h"
#include "quant.h"

enum { MM_ROWS = 16, MM_TOKENS = 8 };

struct mm_job {
    const struct mm_args *a;
    cpu_vec_dot_fn dot;
    cpu_vec_dot_xn_fn xn; /* several tokens per weight row, or NULL */
    size_t w_row, x_row; /* bytes per weight row and per activation row */
    const char *x;       /* xq, or x for float weights */
};

static void mm_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct mm_job *j = ctx;
    const struct mm_args *a = j->a;
    const char *w = a->w, *w2 = a->w2;
    for (int64_t rb = r0; rb < r1; rb += MM_ROWS) {
        int64_t re = rb + MM_ROWS < r1 ? rb + MM_ROWS : r1;
        for (int64_t tb = 0; tb < a->n_tokens; tb += MM_TOKENS) {
            int64_t te = tb + MM_TOKENS < a->n_tokens ? tb + MM_TOKENS : a->n_tokens;
            for (int64_t r = rb; r < re; r++) {
                if (j->xn && te - tb >= 2) {
                    float s[MM_TOKENS], u[MM_TOKENS];
                    const char *x = j->x + tb * j->x_row;
                    j->xn(a->n_in, w + r * j->w_row, x, j->x_row, (int)(te - tb), s);
                    if (a->epilogue == MMV_SWIGLU) j->xn(a->n_in, w2 + r * j->w_row, x, j->x_row, (int)(te - tb), u);
                    for (int64_t t = tb; t < te; t++) {
                        float v = s[t - tb];
                        if (a->epilogue == MMV_SWIGLU) v = cpu_silu(v) * u[t - tb];
                        if (a->epilogue == MMV_ADD) v += a->add[t * a->n_out + r];
                        a->y[t * a->n_out + r] = v;
                    }
                    continue;
                }
                for (int64_t t = tb; t < te; t++) {
                    const char *x = j->x + t * j->x_row;
                    float s = j->dot(a->n_in, w + r * j->w_row, x);
                    if (a->epilogue == MMV_SWIGLU) s = cpu_silu(s) * j->dot(a->n_in, w2 + r * j->w_row, x);
                    if (a->epilogue == MMV_ADD) s += a->add[t * a->n_out + r];
                    a->y[t * a->n_out + r] = s;
                }
            }
        }
    }
}

infer_status cpu_mm(const struct mm_args *a, struct pool *p) {
    if (cpu_r16_is(a->type)) return cpu_mm_r16(a, p);
    cpu_vec_dot_fn dot = cpu_vec_dot(a->type, a->variant);
    if (!dot) return infer_fail(INFER_E_UNSUPPORTED, "cpu_mm: weight type %d has no CPU dot product", a->type);
    size_t x_row = cpu_act_row_bytes(a->type, a->n_in);
    size_t w_row = quant_row_bytes(a->type, a->n_in);
    if (a->n_in <= 0 || a->n_out <= 0 || a->n_tokens < 1 || x_row == 0 || w_row == 0)
        return infer_fail(INFER_E_ARG, "cpu_mm: shape n_in %lld n_out %lld n_tokens %lld: expected positive sizes, "
                          "n_in a multiple of the block size", (long long)a->n_in, (long long)a->n_out,
                          (long long)a->n_tokens);
    int quantised = mmv_act_type_cpu(a->type) >= 0;
    if (!a->w || !a->y || (quantised ? !a->xq : !a->x) || (a->epilogue == MMV_SWIGLU && !a->w2) ||
        (a->epilogue == MMV_ADD && !a->add) || a->epilogue < MMV_PLAIN || a->epilogue > MMV_SWIGLU)
        return infer_fail(INFER_E_ARG, "cpu_mm: missing pointer or bad epilogue %d", a->epilogue);
    /* up to one tile the multi-token dots beat the GEMM's repacking (Q4_K 1024 x 24576, one thread, from DRAM:
     * 6 tokens 2.5 vs 3.3 ms, 8 tokens 3.0 vs 3.8 ms; from cache about even for Q4_K, 1.4x for Q6_K) */
    cpu_vec_dot_xn_fn xn = cpu_vec_dot_xn(a->type, a->variant);
    if (cpu_mm_kq_takes(a) && !(xn && a->n_tokens <= MM_TOKENS)) return cpu_mm_kq(a, p);
    if (cpu_mm_kq_avx2_takes(a)) return cpu_mm_kq_avx2(a, p);
    if (cpu_mm_q32_takes(a)) return cpu_mm_q32(a, p);
    if (cpu_mm_q32_avx2_takes(a)) return cpu_mm_q32_avx2(a, p);
    if (cpu_mm_iq_takes(a)) return cpu_mm_iq(a, p);
    if (cpu_mm_f_takes(a)) return cpu_mm_f(a, p);
    struct mm_job j = {a, dot, xn, w_row, x_row, quantised ? a->xq : (const void *)a->x};
    /* BF16: the tokens' activations rounded once here, not once per row in the dot */
    cpu_round_fn round = NULL;
    const cpu_vec_dot_fn rounded = xn ? NULL : cpu_vec_dot_rounded(dot, &round);
    float *xr = rounded ? xmalloc(sizeof(float) * (size_t)(a->n_in * a->n_tokens)) : NULL;
    if (xr) {
        for (int64_t t = 0; t < a->n_tokens; t++) round(a->x + t * a->n_in, xr + t * a->n_in, a->n_in);
        j.dot = rounded;
        j.x = (const char *)xr;
    }
    pool_for(p, a->n_out, MM_ROWS, mm_rows, &j);
    xfree(xr);
    return INFER_OK;
}
