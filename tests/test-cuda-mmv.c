/* test-cuda-mmv: the CUDA activation quantiser and quantised matrix x vector kernels against a
 * float64 reference, for every weight type, tails, batch 1..8 and the three epilogues.
 *
 * The reference uses the weights dequantised by lib/quant.c (bit-exact with llama.cpp) and the
 * activations exactly as the GPU quantised them (d * q, read back), so the only difference left is
 * float summation order: the bound is 1e-5 of sum |w x|. The quantiser itself is checked against
 * its definition (d = amax / 127, q = round(x / d), s = d * sum q). Outputs start as NaN.
 * Without a device every case prints SKIP (no CUDA device).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "kernels.h"
#include "quant.h"
#include "randw.h"
#include "t.h"

#ifdef INFER_CUDA

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f; }


#define CK(x) T_CHECK((x) == cudaSuccess, "%s: %s", #x, cudaGetErrorString(x))

static void run_case(int32_t type, int64_t n_in, int64_t n_out, int nt, int epilogue) {
    const size_t row = quant_row_bytes(type, n_in), wbytes = row * (size_t)n_out;
    uint8_t *w = malloc(wbytes), *w2 = malloc(wbytes);
    float *x = malloc(sizeof(float) * (size_t)(n_in * nt)), *add = malloc(sizeof(float) * (size_t)(n_out * nt));
    float *y = malloc(sizeof(float) * (size_t)(n_out * nt)), *wrow = malloc(sizeof(float) * (size_t)n_in);
    float *wrow2 = malloc(sizeof(float) * (size_t)n_in);
    const size_t xqb = q8_split_bytes(n_in, nt);
    uint8_t *xq = malloc(xqb);
    randw_weights(type, w, n_in, n_out, rnd);
    randw_weights(type, w2, n_in, n_out, rnd);
    for (int64_t i = 0; i < n_in * nt; i++) x[i] = frand(-2, 2) * (i % 97 == 0 ? 20.0f : 1.0f);
    for (int64_t i = 0; i < n_out * nt; i++) add[i] = frand(-1, 1);

    void *dw, *dw2, *dx, *dxq, *dy, *dadd;
    CK(cudaMalloc(&dw, wbytes));
    CK(cudaMalloc(&dw2, wbytes));
    CK(cudaMalloc(&dx, sizeof(float) * (size_t)(n_in * nt)));
    CK(cudaMalloc(&dxq, xqb));
    CK(cudaMalloc(&dy, sizeof(float) * (size_t)(n_out * nt)));
    CK(cudaMalloc(&dadd, sizeof(float) * (size_t)(n_out * nt)));
    CK(cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw2, w2, wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * (size_t)(n_in * nt), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dadd, add, sizeof(float) * (size_t)(n_out * nt), cudaMemcpyHostToDevice));
    CK(cudaMemset(dy, 0xFF, sizeof(float) * (size_t)(n_out * nt))); /* NaN */

    const int32_t act = mmv_act_type_cuda(type);
    if (act >= 0) {
        struct quantize_args qa = {act, dx, dxq, n_in, nt, n_in};
        CK(cuda_quantize(&qa, 0));
        CK(cudaMemcpy(xq, dxq, xqb, cudaMemcpyDeviceToHost));
    }
    struct mmv_args a = {0};
    a.type = type, a.w = dw, a.w2 = epilogue == MMV_SWIGLU ? dw2 : NULL, a.n_in = n_in, a.n_out = n_out;
    a.n_tokens = nt, a.xq = act >= 0 ? dxq : NULL, a.x = dx, a.y = dy, a.add = epilogue == MMV_ADD ? dadd : NULL;
    a.epilogue = epilogue;
    CK(cuda_mmv(&a, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y, dy, sizeof(float) * (size_t)(n_out * nt), cudaMemcpyDeviceToHost));

    /* the activations the GPU used, and a check of the quantiser's definition */
    double *xr = malloc(sizeof(double) * (size_t)(n_in * nt));
    int qbad = 0;
    for (int t = 0; t < nt; t++) {
        for (int64_t g = 0; g < n_in / 32; g++) {
            const float *xg = x + t * n_in + g * 32;
            const int8_t *q = (const int8_t *)xq + t * n_in + g * 32;
            const float *ds = (const float *)(xq + q8_split_ds_offset(n_in, nt)) + 2 * (t * (n_in / 32) + g);
            float amax = 0;
            int qsum = 0;
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xg[i]));
            for (int i = 0; i < 32; i++) {
                if (act >= 0) {
                    qsum += q[i];
                    xr[t * n_in + g * 32 + i] = (double)ds[0] * q[i];
                    if (fabs((double)xg[i] - (double)ds[0] * q[i]) > 0.5001 * ds[0] + 1e-7) qbad++;
                } else {
                    xr[t * n_in + g * 32 + i] = xg[i];
                }
            }
            if (act >= 0 && (ds[0] != amax / 127.0f || fabsf(ds[1] - ds[0] * (float)qsum) > 1e-6f * fabsf(ds[1]) + 1e-30f)) qbad++;
        }
    }
    if (act >= 0) T_CHECK(qbad == 0, "quantize n=%lld rows=%d: %d values off their definition", (long long)n_in, nt, qbad);

    int bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < n_out; r++) {
        quant_dequant_row(type, w + row * (size_t)r, wrow, n_in);
        quant_dequant_row(type, w2 + row * (size_t)r, wrow2, n_in);
        for (int t = 0; t < nt; t++) {
            double s = 0, sa = 0, s2 = 0, sa2 = 0;
            for (int64_t c = 0; c < n_in; c++) {
                s += (double)wrow[c] * xr[t * n_in + c], sa += fabs((double)wrow[c] * xr[t * n_in + c]);
                s2 += (double)wrow2[c] * xr[t * n_in + c], sa2 += fabs((double)wrow2[c] * xr[t * n_in + c]);
            }
            double ref = s, tol = 1e-5 * sa + 1e-6;
            if (epilogue == MMV_ADD) ref += add[t * n_out + r];
            if (epilogue == MMV_SWIGLU) {
                ref = s / (1 + exp(-s)) * s2;
                tol = 1e-5 * (sa * fabs(s2) + sa2 * fabs(s)) + 1e-6;
            }
            const double err = fabs((double)y[t * n_out + r] - ref);
            if (!(err <= tol)) bad++;
            if (err / (tol + 1e-30) > worst) worst = err / tol;
        }
    }
    T_CHECK(bad == 0, "mmv %s %lldx%lld tokens=%d epilogue=%d: %d of %lld outputs off (worst %.3g x tol)",
            quant_type(type)->name, (long long)n_in, (long long)n_out, nt, epilogue, bad, (long long)(n_out * nt), worst);
    cudaFree(dw), cudaFree(dw2), cudaFree(dx), cudaFree(dxq), cudaFree(dy), cudaFree(dadd);
    free(w), free(w2), free(x), free(add), free(y), free(wrow), free(wrow2), free(xq), free(xr);
}

int main(void) {
    const char *why = NULL;
    if (device_count(&why) == 0) {
        T_SKIP("no CUDA device: %s", why);
        return t_done();
    }
    static const int32_t types[] = {INFER_TYPE_F32, INFER_TYPE_F16, INFER_TYPE_BF16, INFER_TYPE_Q8_0, INFER_TYPE_Q4_0,
                                    INFER_TYPE_IQ4_NL, INFER_TYPE_IQ4_XS, INFER_TYPE_Q4_K, INFER_TYPE_Q5_K, INFER_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const int32_t t = types[i];
        const int64_t k = quant_type(t)->blck == 256 ? 256 : 32;
        run_case(t, k, 1, 1, MMV_PLAIN);           /* one block, one row */
        run_case(t, 3 * k, 37, 1, MMV_PLAIN);      /* odd rows: a partial thread block */
        run_case(t, 9 * k, 130, 3, MMV_ADD);       /* batch, residual */
        run_case(t, 11 * k, 67, 8, MMV_SWIGLU);    /* full batch, gate/up */
        run_case(t, 4096, 512, 2, MMV_PLAIN);      /* a real row length */
        run_case(t, 4096, 64, 1, MMV_ADD);
    }
    struct mmv_args bad = {0};
    bad.type = INFER_TYPE_Q2_K, bad.n_in = 256, bad.n_out = 1, bad.n_tokens = 1;
    T_CHECK(cuda_mmv(&bad, 0) == cudaErrorInvalidValue, "an unsupported weight type is an error");
    bad.type = INFER_TYPE_Q4_K, bad.n_in = 128;
    T_CHECK(cuda_mmv(&bad, 0) == cudaErrorInvalidValue, "a row length off the block size is an error");
    cudaGetLastError();
    return t_done();
}

#else
int main(void) {
    T_SKIP("no CUDA device: built without CUDA");
    return t_done();
}
#endif
