/* test-gpu-like: the reference of test-cuda-e2e (tests/gpu_like.c, a CPU backend with the CUDA kernels'
 * numerics) checked on every machine, no device needed.
 *
 * Its ops against float64 (outputs start as NaN; tolerances are f32 summation error, far below any
 * rounding the ops model):
 *   - quantize (Q8_1, q8 split layout): per 32 values d == amax / 127 in f32, |x - d q| <= d / 2,
 *     |q| <= 127, ds.y == d * sum q, all-zero groups all zero;
 *   - mmv, every weight type mmv.cu takes, 1 / 3 / 8 tokens, the three epilogues: against the dequantised
 *     weights times the activations as quantised (d * q), |y - ref| <= 1e-5 sum |w x| + 1e-6
 *     (SwiGLU: the bound of each product carried through, as test-ops);
 *   - mm, every type, 75 tokens, the three epilogues: against the f16-rounded weights and activations,
 *     the same bound; in an EMU=1 build also bit-identical to mm.cu's tensor-core kernel itself run by the
 *     emulator (its tiling, fills and fragments; mma.sync summing each element's 16 products, then
 *     adding C);
 *   - attn (f16 and Q8_0 cells with the Hadamard rotation, head_dim 64 / 128 / 256, 1 / 3 / 8 decode tokens
 *     over a 4096-cell capacity, i.e. 16 splits merged, and a 40-token prefill, attn.cu's tensor-core kernel's
 *     arithmetic) against ref_attn, in an EMU=1 build also bit-identical to attn.cu's kernels run by the
 *     emulator; moe_ffn
 *     against ref_moe_ffn, gdn against ref_gdn: |y - ref| <= 2e-5 max |ref| (gdn: 1e-4, 7 tokens of
 *     recurrence, 70 tokens of the chunked form); in an EMU=1 build gdn also bit-identical to gdn.cu run by the
 *     emulator (recurrent, chunked with snapshots, d_state 40 / 128 / 256: every chunk shape);
 *   - gpu_like_probe finds the reference equal to itself, and the perturbed variant different in the
 *     rounding-sensitive ops only (so the probe that picks test-cuda-e2e's mode can tell);
 *   - the reference is deterministic: 1 and 2 threads give bit-identical logits.
 * Whole models (every arch in F32 / Q8_0 / Q4_K_M, test-cuda-e2e's scenarios; logits_pair.h):
 *   - the reference against the plain CPU backend within test-cuda-e2e's old bounds (PAIR_LOOSE: rows
 *     within 2e-3 F32 / 5e-2 quantised but 10% of them, those below 0.5: MoE routers pick other experts
 *     now and then; argmax equal on >= 90% of rows), and
 *     quantised files at a mean rel of at least PAIR_MIN_QUANT_DIFF = 2e-3 from it: the activation
 *     roundings differ (Q8_1 per 32 values against Q8_K / Q8_0);
 *   - the perturbed reference (a model of a real GPU's roundings) against the reference within
 *     test-cuda-e2e's device-mode bounds (PAIR_DEVICE), which rest on this measurement.
 * Every comparison prints its numbers.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "forward.h"
#include "gpu_like.h"
#include "logits_pair.h"
#include "quant.h"
#include "randw.h"
#include "ref.h"
#include "t.h"

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f; }
/* Activations in a physical range with a few outliers (they set a group's scale). */
static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = frand(-scale, scale) * (i % 97 == 0 ? 20.0f : 1.0f);
}
static float *nan_floats(size_t n) {
    float *y = malloc(n * sizeof *y);
    if (y) memset(y, 0xFF, n * sizeof *y);
    return y;
}

static struct infer_backend *ref_be;

/* ---- ops against float64 ---- */

static void check_quantize(void) {
    const int64_t n = 512;
    const int32_t rows = 3;
    float *x = malloc(sizeof(float) * n * rows);
    const size_t qb = q8_split_bytes(n, rows);
    uint8_t *y = malloc(qb);
    fill(x, (size_t)(n * rows), 2.0f);
    for (int i = 64; i < 96; i++) x[i] = 0.0f;   /* an all-zero group */
    x[n + 5] = -40.0f;                            /* a negative extreme */
    memset(y, 0xAB, qb);
    const struct quantize_args a = {.type = INFER_TYPE_Q8_1, .x = x, .y = y, .n = n, .n_rows = rows, .x_stride = n};
    T_CHECK(ref_be->ops->quantize(ref_be, &a) == INFER_OK, "quantize: %s", infer_last_error());
    const float *ds = (const float *)(y + q8_split_ds_offset(n, rows));
    int bad = 0;
    for (int32_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < n / 32; g++) {
            const float *xg = x + r * n + g * 32, *dg = ds + 2 * (r * (n / 32) + g);
            const int8_t *q = (const int8_t *)y + r * n + g * 32;
            float amax = 0.0f;
            int qsum = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xg[i]));
            for (int i = 0; i < 32; i++) {
                qsum += q[i];
                bad += q[i] < -127 || fabs((double)xg[i] - (double)dg[0] * q[i]) > 0.5 * dg[0] * (1 + 1e-6);
            }
            bad += dg[0] != amax / 127.0f || dg[1] != dg[0] * (float)qsum;
        }
    T_CHECK(bad == 0, "quantize q8 split: %d values or scales off their definition", bad);
    free(x), free(y);
}

/* y = epilogue(W x) of mmv (mm: 0) or mm (1) against float64 with the operands the op sees. */
static void check_matmul(int32_t type, int64_t n_in, int64_t n_out, int32_t nt, int epilogue, int mm) {
    const size_t row = quant_row_bytes(type, n_in);
    uint8_t *w = malloc(row * (size_t)n_out), *w2 = malloc(row * (size_t)n_out), *xq = malloc(q8_split_bytes(n_in, nt));
    float *x = malloc(sizeof(float) * (size_t)(n_in * nt)), *add = malloc(sizeof(float) * (size_t)(n_out * nt));
    float *y = nan_floats((size_t)(n_out * nt)), *wr = malloc(sizeof(float) * (size_t)n_in), *wr2 = malloc(sizeof(float) * (size_t)n_in);
    double *xr = malloc(sizeof(double) * (size_t)(n_in * nt));
    randw_weights(type, w, n_in, n_out, rnd);
    randw_weights(type, w2, n_in, n_out, rnd);
    fill(x, (size_t)(n_in * nt), 1.0f);
    fill(add, (size_t)(n_out * nt), 1.0f);
    const int quantised = quant_type(type)->blck > 1;
    infer_status st = INFER_OK;
    if (quantised && !mm) {
        const struct quantize_args qa = {.type = INFER_TYPE_Q8_1, .x = x, .y = xq, .n = n_in, .n_rows = nt, .x_stride = n_in};
        st = ref_be->ops->quantize(ref_be, &qa);
    }
    if (st == INFER_OK && mm) {
        const struct mm_args a = {.type = type, .w = w, .w2 = epilogue == MMV_SWIGLU ? w2 : NULL, .n_in = n_in,
                                  .n_out = n_out, .n_tokens = nt, .x = x, .y = y,
                                  .add = epilogue == MMV_ADD ? add : NULL, .epilogue = epilogue};
        st = ref_be->ops->mm(ref_be, &a);
    } else if (st == INFER_OK) {
        const struct mmv_args a = {.type = type, .w = w, .w2 = epilogue == MMV_SWIGLU ? w2 : NULL, .n_in = n_in,
                                   .n_out = n_out, .n_tokens = nt, .xq = quantised ? xq : NULL, .x = x, .y = y,
                                   .add = epilogue == MMV_ADD ? add : NULL, .epilogue = epilogue};
        st = ref_be->ops->mmv(ref_be, &a);
    }
    T_CHECK(st == INFER_OK, "%s type %d: %s", mm ? "mm" : "mmv", type, infer_last_error());
    /* the activations as the op sees them: d * q (mmv, quantised weights), f16 (mm), else x */
    const float *ds = (const float *)(xq + q8_split_ds_offset(n_in, nt));
    for (int64_t i = 0; i < n_in * nt; i++) {
        const int64_t t = i / n_in, c = i % n_in;
        xr[i] = mm ? ref_round_f16(x[i])
              : quantised ? (double)ds[2 * (t * (n_in / 32) + c / 32)] * ((const int8_t *)xq)[i]
                          : x[i];
    }
    int bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < n_out && st == INFER_OK; r++) {
        quant_dequant_row(type, w + row * (size_t)r, wr, n_in);
        quant_dequant_row(type, w2 + row * (size_t)r, wr2, n_in);
        for (int32_t t = 0; t < nt; t++) {
            double s = 0, sa = 0, s2 = 0, sa2 = 0;
            for (int64_t c = 0; c < n_in; c++) {
                const double wv = mm ? ref_round_f16(wr[c]) : wr[c], wv2 = mm ? ref_round_f16(wr2[c]) : wr2[c];
                s += wv * xr[t * n_in + c], sa += fabs(wv * xr[t * n_in + c]);
                s2 += wv2 * xr[t * n_in + c], sa2 += fabs(wv2 * xr[t * n_in + c]);
            }
            double want = s, tol = 1e-5 * sa + 1e-6;
            if (epilogue == MMV_ADD) want += add[t * n_out + r];
            if (epilogue == MMV_SWIGLU) {
                want = s / (1 + exp(-s)) * s2;
                tol = 1e-5 * (sa * fabs(s2) + sa2 * fabs(s)) + 1e-6;
            }
            const double err = fabs((double)y[t * n_out + r] - want);
            bad += !(err <= tol);
            worst = fmax(worst, err / tol);
        }
    }
    T_CHECK(bad == 0, "%s type %d %lldx%lld tokens %d epilogue %d: %d outputs off (worst %.3g x tol)", mm ? "mm" : "mmv",
            type, (long long)n_in, (long long)n_out, nt, epilogue, bad, worst);
    free(w), free(w2), free(xq), free(x), free(add), free(y), free(wr), free(wr2), free(xr);
}

/* every weight type mmv.cu / mm.cu compute */
static const int32_t matmul_types[] = {
    INFER_TYPE_F32,  INFER_TYPE_F16,  INFER_TYPE_BF16,    INFER_TYPE_Q8_0,   INFER_TYPE_Q4_0,    INFER_TYPE_Q4_1,
    INFER_TYPE_Q5_0, INFER_TYPE_Q5_1, INFER_TYPE_IQ4_NL,  INFER_TYPE_MXFP4,  INFER_TYPE_IQ4_XS,  INFER_TYPE_Q2_K,
    INFER_TYPE_Q3_K, INFER_TYPE_Q4_K, INFER_TYPE_Q5_K,    INFER_TYPE_Q6_K,   INFER_TYPE_IQ2_XXS, INFER_TYPE_IQ2_XS,
    INFER_TYPE_IQ2_S, INFER_TYPE_IQ3_XXS, INFER_TYPE_IQ3_S, INFER_TYPE_IQ1_S, INFER_TYPE_IQ1_M, INFER_TYPE_TQ1_0,
    INFER_TYPE_TQ2_0};
enum { N_MATMUL_TYPES = sizeof matmul_types / sizeof matmul_types[0] };

static void check_matmuls(void) {
    for (int k = 0; k < N_MATMUL_TYPES; k++)
        for (int ep = MMV_PLAIN; ep <= MMV_SWIGLU; ep++) {
            check_matmul(matmul_types[k], 512, 37, 1, ep, 0);
            check_matmul(matmul_types[k], 256, 37, 3, ep, 0);
            check_matmul(matmul_types[k], 256, 37, 8, ep, 0);
            check_matmul(matmul_types[k], 256, 70, 75, ep, 1);
        }
}

#ifdef INFER_EMU
/* mm against mm.cu's tensor-core kernel run by the emulator (INFER_MATMUL=mma): bit for bit. */
static void check_mm_kernel(void) {
    int bad = 0, n = 0;
    struct cuda_mm_state *st = NULL;
    setenv("INFER_MATMUL", "mma", 1);
    T_CHECK(cuda_mm_state_create(&st) == cudaSuccess, "cuda_mm_state_create");
    unsetenv("INFER_MATMUL");
    for (int k = 0; st && k < N_MATMUL_TYPES; k++)
        for (int ep = MMV_PLAIN; ep <= MMV_SWIGLU; ep++) {
            const int32_t t = matmul_types[k];
            const int64_t n_in = 512, n_out = 70, nt = 75;
            const size_t rb = quant_row_bytes(t, n_in), wb = rb * n_out, xb = sizeof(float) * n_in * nt;
            const size_t yb = sizeof(float) * n_out * nt;
            uint8_t *w = malloc(wb), *w2 = malloc(wb);
            float *x = malloc(xb), *add = malloc(yb), *y1 = nan_floats((size_t)(n_out * nt));
            float *y2 = nan_floats((size_t)(n_out * nt));
            randw_weights(t, w, n_in, n_out, rnd);
            randw_weights(t, w2, n_in, n_out, rnd);
            fill(x, (size_t)(n_in * nt), 2.0f);
            fill(add, (size_t)(n_out * nt), 1.0f);
            void *dw = NULL, *dw2 = NULL, *dx = NULL, *dadd = NULL, *dy = NULL;
            cudaError_t e = cudaMalloc(&dw, wb);
            if (!e) e = cudaMalloc(&dw2, wb);
            if (!e) e = cudaMalloc(&dx, xb);
            if (!e) e = cudaMalloc(&dadd, yb);
            if (!e) e = cudaMalloc(&dy, yb);
            if (!e) e = cudaMemcpy(dw, w, wb, cudaMemcpyHostToDevice);
            if (!e) e = cudaMemcpy(dw2, w2, wb, cudaMemcpyHostToDevice);
            if (!e) e = cudaMemcpy(dx, x, xb, cudaMemcpyHostToDevice);
            if (!e) e = cudaMemcpy(dadd, add, yb, cudaMemcpyHostToDevice);
            if (!e) e = cudaMemcpy(dy, y1, yb, cudaMemcpyHostToDevice);
            struct mm_args a = {.type = t, .w = dw, .w2 = ep == MMV_SWIGLU ? dw2 : NULL, .n_in = n_in, .n_out = n_out,
                                .n_tokens = nt, .x = dx, .y = dy, .add = ep == MMV_ADD ? dadd : NULL, .epilogue = ep};
            if (!e) e = cuda_mm(&a, st, 0);
            if (!e) e = cudaMemcpy(y1, dy, yb, cudaMemcpyDeviceToHost);
            T_CHECK(e == cudaSuccess, "cuda_mm type %d: %s", t, cudaGetErrorString(e));
            a.w = w, a.w2 = ep == MMV_SWIGLU ? w2 : NULL, a.x = x, a.y = y2, a.add = ep == MMV_ADD ? add : NULL;
            T_CHECK(ref_be->ops->mm(ref_be, &a) == INFER_OK, "mm: %s", infer_last_error());
            bad += memcmp(y1, y2, yb) != 0, n++;
            cudaFree(dw), cudaFree(dw2), cudaFree(dx), cudaFree(dadd), cudaFree(dy);
            free(w), free(w2), free(x), free(add), free(y1), free(y2);
        }
    cuda_mm_state_free(st);
    T_CHECK(bad == 0, "mm bit-identical to mm.cu's kernel on the emulator: %d of %d calls differ", bad, n);
}

/* gdn against gdn.cu on the emulator (recurrent, and the chunked tensor-core kernel with the recurrent tail after
 * snap_from): out, state and snapshots bit for bit. {n_tokens, n_group, n_vhead, d_state, variant, grouped, snapshots} */
static void check_gdn_kernel(void) {
    static const int c[][7] = {{9, 2, 4, 64, GDN_RECURRENT, 1, 0}, {70, 1, 2, 128, GDN_AUTO, 0, 0},
                               {70, 2, 4, 40, GDN_CHUNKED, 1, 3}, {40, 1, 2, 256, GDN_CHUNKED, 0, 2}};
    int bad = 0;
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        const int nt = c[k][0], ng = c[k][1], nv = c[k][2], D = c[k][3], ring = c[k][6];
        const int64_t cd = 2 * (int64_t)ng * D + (int64_t)nv * D, ns = (int64_t)nv * D * D;
        const size_t qb = sizeof(float) * (size_t)(nt * cd), abb = sizeof(float) * (size_t)(nt * 2 * nv);
        const size_t sb = sizeof(float) * (size_t)ns, ob = sizeof(float) * (size_t)(nt * nv * D), rb = sb * (ring ? ring : 1);
        float *qkv = malloc(qb), *ab = malloc(abb), *dt = malloc(sizeof(float) * nv), *sa = malloc(sizeof(float) * nv);
        float *st = malloc(sb), *st2 = malloc(sb), *o = nan_floats((size_t)(nt * nv * D)), *o2 = nan_floats((size_t)(nt * nv * D));
        float *sn = nan_floats((size_t)(ns * (ring ? ring : 1))), *sn2 = nan_floats((size_t)(ns * (ring ? ring : 1)));
        fill(qkv, (size_t)(nt * cd), 1.0f);
        fill(ab, (size_t)(nt * 2 * nv), 2.0f);
        fill(st, (size_t)ns, 0.2f);
        for (int i = 0; i < nv; i++) dt[i] = frand(-1, 1), sa[i] = -frand(0.1f, 2.0f);
        void *dq = NULL, *dab = NULL, *ddt = NULL, *dsa = NULL, *dst = NULL, *dout = NULL, *dsn = NULL;
        cudaError_t e = cudaMalloc(&dq, qb);
        if (!e) e = cudaMalloc(&dab, abb);
        if (!e) e = cudaMalloc(&ddt, sizeof(float) * nv);
        if (!e) e = cudaMalloc(&dsa, sizeof(float) * nv);
        if (!e) e = cudaMalloc(&dst, sb);
        if (!e) e = cudaMalloc(&dout, ob);
        if (!e) e = cudaMalloc(&dsn, rb);
        if (!e) e = cudaMemcpy(dq, qkv, qb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dab, ab, abb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(ddt, dt, sizeof(float) * nv, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dsa, sa, sizeof(float) * nv, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dst, st, sb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dout, o, ob, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dsn, sn, rb, cudaMemcpyHostToDevice);
        const int abg = c[k][5] ? nv / ng : 0;
        struct gdn_args a = {.q = dq, .k = (float *)dq + ng * D, .v = (float *)dq + 2 * ng * D,
                             .a = (float *)dab + (abg ? abg : nv), .b = dab, .dt_bias = ddt, .ssm_a = dsa, .state = dst,
                             .out = dout, .n_tokens = nt, .n_group = ng, .n_vhead = nv, .d_state = D, .qk_stride = cd,
                             .v_stride = cd, .ab_stride = 2 * nv, .grouped = c[k][5], .ab_group = abg, .eps = 1e-6f,
                             .variant = c[k][4], .snap = ring ? dsn : NULL, .snap_stride = ns, .snap_ring = ring,
                             .snap_pos0 = 1, .snap_from = nt - ring};
        if (!e) e = cuda_gdn(&a, 0);
        if (!e) e = cudaMemcpy(o2, dout, ob, cudaMemcpyDeviceToHost);
        if (!e) e = cudaMemcpy(st2, dst, sb, cudaMemcpyDeviceToHost);
        if (!e) e = cudaMemcpy(sn2, dsn, rb, cudaMemcpyDeviceToHost);
        T_CHECK(e == cudaSuccess, "cuda_gdn case %zu: %s", k, cudaGetErrorString(e));
        a.q = qkv, a.k = qkv + ng * D, a.v = qkv + 2 * ng * D, a.a = ab + (abg ? abg : nv), a.b = ab, a.dt_bias = dt;
        a.ssm_a = sa, a.state = st, a.out = o, a.snap = ring ? sn : NULL;
        T_CHECK(ref_be->ops->gdn(ref_be, &a) == INFER_OK, "gdn: %s", infer_last_error());
        const int diff = memcmp(o, o2, ob) != 0 || memcmp(st, st2, sb) != 0 || (ring && memcmp(sn, sn2, rb) != 0);
        T_CHECK(!diff, "gdn bit-identical to gdn.cu on the emulator: %d tokens, d_state %d, variant %d differ", nt, D,
                c[k][4]);
        bad += diff;
        cudaFree(dq), cudaFree(dab), cudaFree(ddt), cudaFree(dsa), cudaFree(dst), cudaFree(dout), cudaFree(dsn);
        free(qkv), free(ab), free(dt), free(sa), free(st), free(st2), free(o), free(o2), free(sn), free(sn2);
    }
    printf("gdn: %d of %zu calls bit-identical to gdn.cu on the emulator\n", (int)(sizeof c / sizeof *c) - bad,
           sizeof c / sizeof *c);
}

/* mmv against mmv.cu's kernel on the emulator, the same q8 split activations on both sides: bit for bit. */
static void check_mmv_kernel(void) {
    int bad = 0, n = 0;
    for (int k = 0; k < N_MATMUL_TYPES; k++) {
        const int32_t t = matmul_types[k], nt = 1 + k % 8, ep = k % 3;
        const int64_t n_in = 512, n_out = 37;
        const size_t rb = quant_row_bytes(t, n_in), wb = rb * n_out, xb = sizeof(float) * n_in * nt;
        const size_t qb = q8_split_bytes(n_in, nt), yb = sizeof(float) * n_out * nt;
        uint8_t *w = malloc(wb), *w2 = malloc(wb), *xq = malloc(qb);
        float *x = malloc(xb), *add = malloc(yb), *y1 = nan_floats((size_t)(n_out * nt)), *y2 = nan_floats((size_t)(n_out * nt));
        randw_weights(t, w, n_in, n_out, rnd);
        randw_weights(t, w2, n_in, n_out, rnd);
        fill(x, (size_t)(n_in * nt), 2.0f);
        fill(add, (size_t)(n_out * nt), 1.0f);
        const int quantised = quant_type(t)->blck > 1;
        const struct quantize_args qa = {.type = INFER_TYPE_Q8_1, .x = x, .y = xq, .n = n_in, .n_rows = nt, .x_stride = n_in};
        T_CHECK(!quantised || ref_be->ops->quantize(ref_be, &qa) == INFER_OK, "quantize: %s", infer_last_error());
        void *dw = NULL, *dw2 = NULL, *dx = NULL, *dq = NULL, *dadd = NULL, *dy = NULL;
        cudaError_t e = cudaMalloc(&dw, wb);
        if (!e) e = cudaMalloc(&dw2, wb);
        if (!e) e = cudaMalloc(&dx, xb);
        if (!e) e = cudaMalloc(&dq, qb);
        if (!e) e = cudaMalloc(&dadd, yb);
        if (!e) e = cudaMalloc(&dy, yb);
        if (!e) e = cudaMemcpy(dw, w, wb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dw2, w2, wb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dx, x, xb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dq, xq, qb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dadd, add, yb, cudaMemcpyHostToDevice);
        struct mmv_args a = {.type = t, .w = dw, .w2 = ep == MMV_SWIGLU ? dw2 : NULL, .n_in = n_in, .n_out = n_out,
                             .n_tokens = nt, .xq = quantised ? dq : NULL, .x = dx, .y = dy,
                             .add = ep == MMV_ADD ? dadd : NULL, .epilogue = ep};
        if (!e) e = cuda_mmv(&a, 0);
        if (!e) e = cudaMemcpy(y1, dy, yb, cudaMemcpyDeviceToHost);
        T_CHECK(e == cudaSuccess, "cuda_mmv type %d: %s", t, cudaGetErrorString(e));
        a.w = w, a.w2 = ep == MMV_SWIGLU ? w2 : NULL, a.xq = quantised ? xq : NULL, a.x = x, a.y = y2;
        a.add = ep == MMV_ADD ? add : NULL;
        T_CHECK(ref_be->ops->mmv(ref_be, &a) == INFER_OK, "mmv: %s", infer_last_error());
        if (memcmp(y1, y2, yb) != 0) {
            bad++;
            printf("  mmv type %s (%d tokens, epilogue %d) differs from mmv.cu's kernel\n", quant_type(t)->name, nt, ep);
        }
        n++;
        cudaFree(dw), cudaFree(dw2), cudaFree(dx), cudaFree(dq), cudaFree(dadd), cudaFree(dy);
        free(w), free(w2), free(xq), free(x), free(add), free(y1), free(y2);
    }
    T_CHECK(bad == 0, "mmv bit-identical to mmv.cu's kernel on the emulator: %d of %d types differ", bad, n);
}
#endif

/* max |y - ref| <= tol * max |ref| */
static void check_near(const char *what, const float *y, const double *want, size_t n, double tol) {
    double mx = 0, err = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(want[i]));
    for (size_t i = 0; i < n; i++) err = fmax(err, isnan(y[i]) ? INFINITY : fabs(y[i] - want[i]));
    T_CHECK(err <= tol * mx, "%s: max error %.3g of max |ref| %.3g (bound %.0e relative)", what, err, mx, tol);
}

static void check_attn(int D, int q8, int nt) {
    const int nh = 4, nkv = 2, n_kv = 4096, filled = 700;
    const int64_t stride = (int64_t)nkv * D;
    const int32_t type = q8 ? INFER_TYPE_Q8_0 : INFER_TYPE_F16, rk = q8 ? kv_rot_k(D) : 0, rv = q8 ? kv_rot_v(D) : 0;
    const size_t cb = kv_cell_bytes(type, stride) * n_kv;
    void *k = calloc(1, cb), *v = calloc(1, cb);
    float *rows = malloc(sizeof(float) * (size_t)(stride * filled)), *q = malloc(sizeof(float) * (size_t)(nt * nh * D));
    float *o = nan_floats((size_t)(nt * nh * D));
    double *want = malloc(sizeof(double) * (size_t)(nt * nh * D));
    int32_t *cells = malloc(sizeof(int32_t) * filled), pos[64];
    for (int i = 0; i < filled; i++) cells[i] = i;
    for (int t = 0; t < nt; t++) pos[t] = nt > ATTN_SPLIT_TOKENS ? t : filled - nt + t;
    fill(q, (size_t)(nt * nh * D), 1.0f);
    for (int kvv = 0; kvv < 2; kvv++) {
        fill(rows, (size_t)(stride * filled), 1.0f);
        const struct kv_store_args s = {.x = rows, .cells = kvv ? v : k, .pos = cells, .row = stride, .x_stride = stride,
                                        .cell_stride = stride, .n_tokens = filled, .type = type, .rot = kvv ? rv : rk};
        T_CHECK(ref_be->ops->kv_store(ref_be, &s) == INFER_OK, "kv_store: %s", infer_last_error());
    }
    const struct attn_args a = {.q = q, .k = k, .v = v, .out = o, .pos = pos, .n_tokens = nt, .n_head = nh,
                                .n_head_kv = nkv, .head_dim = D, .n_kv = n_kv, .q_stride = nh * D,
                                .kv_stride = stride, .out_stride = nh * D, .scale = 1.0f / sqrtf((float)D),
                                .kv_type = type, .rot_k = rk, .rot_v = rv};
    T_CHECK(ref_be->ops->attn(ref_be, &a) == INFER_OK, "attn: %s", infer_last_error());
    ref_attn(&a, want);
    char what[96];
    snprintf(what, sizeof what, "attn head_dim %d %s, %d tokens, %d splits", D, q8 ? "Q8_0 rotated" : "f16", nt,
             attn_splits(&a));
    check_near(what, o, want, (size_t)(nt * nh * D), 2e-5);
#ifdef INFER_EMU
    { /* the same call on attn.cu's kernels run by the emulator (split-K scratch where it splits, as the device
       * forward passes it): bit for bit */
        const size_t qb = sizeof(float) * (size_t)(nt * nh * D), sb = sizeof(float) * (attn_scratch_floats(&a) + 1);
        float *o2 = nan_floats((size_t)(nt * nh * D));
        void *dk = NULL, *dv = NULL, *dq = NULL, *dout = NULL, *dpos = NULL, *ds = NULL;
        cudaError_t e = cudaMalloc(&dk, cb);
        if (!e) e = cudaMalloc(&dv, cb);
        if (!e) e = cudaMalloc(&dq, qb);
        if (!e) e = cudaMalloc(&dout, qb);
        if (!e) e = cudaMalloc(&dpos, sizeof pos);
        if (!e) e = cudaMalloc(&ds, sb);
        if (!e) e = cudaMemcpy(dk, k, cb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dv, v, cb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dq, q, qb, cudaMemcpyHostToDevice);
        if (!e) e = cudaMemcpy(dpos, pos, sizeof pos, cudaMemcpyHostToDevice);
        struct attn_args d = a;
        d.q = dq, d.k = dk, d.v = dv, d.out = dout, d.pos = dpos, d.scratch = attn_splits(&a) > 1 ? ds : NULL;
        if (!e) e = cuda_attn(&d, 0);
        if (!e) e = cudaMemcpy(o2, dout, qb, cudaMemcpyDeviceToHost);
        T_CHECK(e == cudaSuccess, "%s: cuda_attn: %s", what, cudaGetErrorString(e));
        T_CHECK(e || !memcmp(o, o2, qb), "%s: bit-identical to attn.cu's %s on the emulator", what,
                attn_auto_variant(&d) == ATTN_MMA ? "ATTN_MMA" : "ATTN_SIMT");
        cudaFree(dk), cudaFree(dv), cudaFree(dq), cudaFree(dout), cudaFree(dpos), cudaFree(ds);
        free(o2);
    }
#endif
    free(k), free(v), free(rows), free(q), free(o), free(want), free(cells);
}

/* How the decode splits share the cells (kernels.h attn_split_cells), worked by hand: the live cells (up to the last
 * position of any token) over the n_kv-sized split count, in whole 64-cell tiles. A 262144-cell context holds 32
 * splits; 1000 live cells give 64 each (16 splits busy) where 262144 / 32 = 8192 would leave one split with them all. */
static void check_split_cells(void) {
    const struct { int32_t n_kv, n_tokens, pos0, splits, cells; } c[] = {
        {262144, 1, 999, 32, 64},      /* ceil(1000 / 32) = 32 -> one tile */
        {262144, 1, 99999, 32, 3136},  /* ceil(100000 / 32) = 3125 -> 49 tiles */
        {262144, 4, 5000, 32, 192},    /* the last token's 5004 cells: ceil(5004 / 32) = 157 -> 3 tiles */
        {2048, 2, 100, 8, 64},         /* 102 cells over 8 */
        {4096, 1, 9000, 16, 256},      /* pos past n_kv: the last cell, 4096 cells over 16 */
        {300, 1, 299, 1, 300},         /* no split: the whole capacity */
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        int32_t pos[8];
        for (int32_t t = 0; t < c[i].n_tokens; t++) pos[t] = c[i].pos0 + t;
        const struct attn_args a = {.pos = pos, .n_tokens = c[i].n_tokens, .n_kv = c[i].n_kv};
        const int32_t n = attn_splits(&a), cells = attn_split_cells(&a, n, 64);
        T_CHECK(n == c[i].splits && cells == c[i].cells, "n_kv %d, %d tokens from %d: %d splits of %d cells, expected "
                "%d of %d", c[i].n_kv, c[i].n_tokens, c[i].pos0, n, cells, c[i].splits, c[i].cells);
    }
}

static void check_moe_gdn(void) {
    const int32_t gu[] = {INFER_TYPE_F32, INFER_TYPE_Q8_0, INFER_TYPE_Q4_K, INFER_TYPE_IQ4_XS, INFER_TYPE_IQ2_XXS, INFER_TYPE_MXFP4};
    const int32_t dn[] = {INFER_TYPE_F16, INFER_TYPE_Q8_0, INFER_TYPE_Q6_K, INFER_TYPE_Q5_K, INFER_TYPE_IQ3_S, INFER_TYPE_Q2_K};
    for (int c = 0; c < 6; c++) {
        const int64_t E = 256, F = 256;
        const int n_exp = 8, used = 2, nt = 5;
        const size_t gb = quant_row_bytes(gu[c], E), db = quant_row_bytes(dn[c], F);
        uint8_t *g = malloc(gb * F * n_exp), *u = malloc(gb * F * n_exp), *d = malloc(db * E * n_exp);
        float *x = malloc(sizeof(float) * E * nt), *wt = malloc(sizeof(float) * nt * used), *y = nan_floats((size_t)(E * nt));
        double *want = malloc(sizeof(double) * E * nt);
        int32_t ids[5 * 2];
        randw_weights(gu[c], g, E, F * n_exp, rnd);
        randw_weights(gu[c], u, E, F * n_exp, rnd);
        randw_weights(dn[c], d, F, E * n_exp, rnd);
        fill(x, (size_t)(E * nt), 1.0f);
        for (int i = 0; i < nt * used; i++) ids[i] = (int32_t)(rnd() % n_exp), wt[i] = frand(0.1f, 1.0f);
        const struct moe_ffn_args a = {.type_gate_up = gu[c], .type_down = dn[c], .gate = g, .up = u, .down = d, .x = x,
                                       .ids = ids, .weights = wt, .y = y, .n_embd = E, .n_ff = F, .n_expert = n_exp,
                                       .n_expert_used = used, .n_tokens = nt};
        T_CHECK(ref_be->ops->moe_ffn(ref_be, &a) == INFER_OK, "moe_ffn: %s", infer_last_error());
        ref_moe_ffn(&a, want);
        char what[64];
        snprintf(what, sizeof what, "moe_ffn types %d / %d", gu[c], dn[c]);
        check_near(what, y, want, (size_t)(E * nt), 2e-5);
        free(g), free(u), free(d), free(x), free(wt), free(y), free(want);
    }
    for (int c = 0; c < 3; c++) { /* 7 tokens, tiled and grouped; 70 tokens chunked (a full chunk and a partial one) */
        const int grouped = c == 1, D = 64, ng = 2, nv = 4, nt = c == 2 ? 70 : 7, abg = grouped ? nv / ng : 0;
        const int64_t cd = 2 * ng * D + nv * D;
        float *qkv = malloc(sizeof(float) * nt * cd), *ab = malloc(sizeof(float) * nt * 2 * nv), dt[4], sa[4];
        float *st = malloc(sizeof(float) * nv * D * D), *st0 = malloc(sizeof(float) * nv * D * D);
        float *o = nan_floats((size_t)(nt * nv * D));
        double *want = malloc(sizeof(double) * nt * nv * D), *want_st = malloc(sizeof(double) * nv * D * D);
        fill(qkv, (size_t)(nt * cd), 1.0f);
        fill(ab, (size_t)(nt * 2 * nv), 2.0f);
        fill(st, (size_t)(nv * D * D), 0.1f);
        memcpy(st0, st, sizeof(float) * nv * D * D);
        for (int i = 0; i < nv; i++) dt[i] = frand(-1, 1), sa[i] = -frand(0.1f, 2.0f);
        const struct gdn_args a = {.q = qkv, .k = qkv + ng * D, .v = qkv + 2 * ng * D, .a = ab + (abg ? abg : nv), .b = ab,
                                   .dt_bias = dt, .ssm_a = sa, .state = st, .out = o, .n_tokens = nt, .n_group = ng,
                                   .n_vhead = nv, .d_state = D, .qk_stride = cd, .v_stride = cd, .ab_stride = 2 * nv,
                                   .grouped = grouped, .ab_group = abg, .eps = 1e-6f,
                                   .variant = c == 2 ? GDN_CHUNKED : GDN_AUTO};
        T_CHECK(ref_be->ops->gdn(ref_be, &a) == INFER_OK, "gdn: %s", infer_last_error());
        ref_gdn(&a, st0, want, want_st);
        check_near(c == 2 ? "gdn chunked" : grouped ? "gdn grouped, fused ba" : "gdn tiled", o, want, (size_t)(nt * nv * D), 1e-4);
        free(qkv), free(ab), free(st), free(st0), free(o), free(want), free(want_st);
    }
}

/* The probe that picks test-cuda-e2e's mode: the reference equals itself, the perturbed variant does not. */
static void check_probe(void) {
    char why[512];
    struct infer_backend *same = NULL, *pert = NULL;
    gpu_like_backend_create(2, &same);
    gpu_like_backend_create_perturbed(2, &pert);
    int strict = 0;
    const int n_same = same ? gpu_like_probe(same, &strict, why, sizeof why) : -1;
    T_CHECK(n_same == 0 && strict == 0, "probe of the reference against itself: %d ops differ (%s)", n_same, why);
    const int n_pert = pert ? gpu_like_probe(pert, &strict, why, sizeof why) : -1;
    T_CHECK(n_pert > 0 && strict == 0, "probe of the perturbed reference: %d ops differ, %d of them strict (%s)", n_pert,
            strict, why);
    printf("probe: the perturbed reference differs in %d ops (%s)\n", n_pert, why);
    backend_free(same), backend_free(pert);
}

/* ---- whole models ---- */

static char dir[] = "/tmp/test-gpu-like-XXXXXX";

static const char *synth_file(const char *arch, const char *ftype) {
    static char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 11; /* test-cuda-e2e's files */
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, arch, ftype);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return NULL;
    }
    return path;
}

static infer_status cpu_backend(int n_threads, struct infer_backend **out) { return backend_cpu_create(n_threads, out); }

enum { SCEN_BASIC, SCEN_LONG, SCEN_TWO_SEQ };

/* Scenario scen on contexts of backends make_a / make_b (n_threads each); stats in s. */
static infer_status run_pair(const infer_model *m, ctx_backend_fn make_a, ctx_backend_fn make_b, int n_threads, int scen,
                             struct pair_stats *s) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = scen == SCEN_LONG ? 4096 : 128, p.n_batch = scen == SCEN_LONG ? PAIR_LONG_BATCH : 64;
    p.n_seq = scen == SCEN_TWO_SEQ ? 2 : 1, p.n_threads = n_threads;
    infer_ctx *a = NULL, *b = NULL;
    infer_status st = ctx_create_on(m, &p, make_a, &a);
    if (st == INFER_OK) st = ctx_create_on(m, &p, make_b, &b);
    if (st != INFER_OK) T_CHECK(0, "context: %s", infer_last_error());
    if (st == INFER_OK) {
        st = scen == SCEN_BASIC ? pair_basic(a, b, 40, 12, s) : scen == SCEN_LONG ? pair_long(a, b, s) : pair_two_seq(a, b, s);
        if (st != INFER_OK) T_CHECK(0, "scenario %d: %s", scen, pair_error());
    }
    infer_ctx_free(a), infer_ctx_free(b);
    return st;
}

/* The reference against the CPU (loose bounds, and measurably apart on quantised files) and the perturbed
 * reference against the reference (device bounds). */
static void check_model(const char *arch, const char *ftype, int scen) {
    const char *names[] = {"", " long", " two sequences"};
    const char *path = synth_file(arch, ftype);
    infer_model *m = NULL;
    infer_model_params mp = infer_model_params_default();
    mp.no_repack = 1; /* the GPU-like backend computes the file's layout */
    if (!path || infer_model_load(path, &mp, &m) != INFER_OK) {
        T_CHECK(0, "load %s %s: %s", arch, ftype, infer_last_error());
        return;
    }
    for (int k = 0; k < 2; k++) {
        struct pair_stats s;
        pair_stats_init(&s);
        const infer_status st = k == 0 ? run_pair(m, gpu_like_backend_create, cpu_backend, 2, scen, &s)
                                       : run_pair(m, gpu_like_backend_create_perturbed, gpu_like_backend_create, 2, scen, &s);
        char msg[256];
        const int ok = st == INFER_OK && pair_within(&s, k == 0 ? PAIR_LOOSE : PAIR_DEVICE, ftype, msg, sizeof msg);
        T_CHECK(ok, "%s %s%s, %s: %s", arch, ftype, names[scen], k == 0 ? "reference vs cpu" : "perturbed vs reference", msg);
        if (k == 0 && strcmp(ftype, "F32")) {
            const double mean = s.rows ? s.sum_rel / s.rows : 0;
            T_CHECK(mean >= PAIR_MIN_QUANT_DIFF, "%s %s%s: the reference is only %.3g from the cpu (mean rel), expected "
                    ">= %.0e: does it round activations as the GPU does?", arch, ftype, names[scen], mean,
                    PAIR_MIN_QUANT_DIFF);
        }
        printf("  %-9s %-6s%-14s %-11s %s\n", arch, ftype, names[scen], k == 0 ? "ref-cpu" : "pert-ref", msg);
        pair_stats_free(&s);
    }
    infer_model_free(m);
    unlink(path);
}

/* 1 and 2 worker threads give the same logits bit for bit (the GPU comparison assumes a deterministic
 * reference). */
static infer_status ref_1(int n, struct infer_backend **out) {
    (void)n;
    return gpu_like_backend_create(1, out);
}
static void check_deterministic(void) {
    const char *path = synth_file("qwen35moe", "Q4_K_M");
    infer_model *m = NULL;
    infer_model_params mp = infer_model_params_default();
    mp.no_repack = 1; /* the GPU-like backend computes the file's layout */
    if (!path || infer_model_load(path, &mp, &m) != INFER_OK) return;
    struct pair_stats s;
    pair_stats_init(&s);
    if (run_pair(m, ref_1, gpu_like_backend_create, 2, SCEN_BASIC, &s) == INFER_OK)
        T_CHECK(s.identical == s.rows && s.rows > 0, "1 vs 2 threads: %d of %d rows bit-identical", s.identical, s.rows);
    pair_stats_free(&s);
    infer_model_free(m);
    unlink(path);
}

int main(void) {
    check_split_cells();
    if (gpu_like_backend_create(2, &ref_be) != INFER_OK || !mkdtemp(dir)) {
        T_CHECK(0, "setup: %s", infer_last_error());
        return t_done();
    }
    check_quantize();
    check_matmuls();
#ifdef INFER_EMU
    check_mm_kernel();
    check_mmv_kernel();
    check_gdn_kernel();
#endif
    for (int D = 64; D <= 256; D *= 2)
        for (int q8 = 0; q8 < 2; q8++) {
            check_attn(D, q8, 1);
            check_attn(D, q8, 3);
            check_attn(D, q8, 8);
            check_attn(D, q8, 40);
        }
    check_moe_gdn();
    check_probe();
    check_deterministic();
    const char *archs[] = {"llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"};
    const char *types[] = {"F32", "Q8_0", "Q4_K_M"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++)
        for (size_t k = 0; k < sizeof types / sizeof *types; k++) check_model(archs[a], types[k], SCEN_BASIC);
    check_model("qwen3", "Q4_K_M", SCEN_LONG); /* test-cuda-e2e's long contexts */
    check_model("qwen3moe", "Q8_0", SCEN_LONG);
    check_model("qwen35moe", "Q4_K_M", SCEN_LONG);
    check_model("qwen3moe", "Q8_0", SCEN_TWO_SEQ);
    backend_free(ref_be);
    rmdir(dir);
    return t_done();
}
