/* test-cuda-mm: the CUDA prefill matmul (cuda_mm, kernels/mm.cu) in both modes, the tensor-core kernel
 * (INFER_MATMUL=mma) and the cuBLAS baseline (INFER_MATMUL=cublas), against a float64 reference.
 *
 * Every weight type, the three epilogues (MMV_ADD both with add aliasing y and apart), shapes with
 * tails: n_out 67 / 130 / 200 / 4096 against 64-row tiles, n_tokens 9 / 33 / 64 / 130 / 512 against
 * 64-token tiles, n_in from one block to 4096 (32-value types with an odd number of units, a half
 * K step; float types with odd n_in and n_in = 1), and shapes the cuBLAS mode must split into two
 * row chunks (4096 x 9000) or two token chunks (8192 x 67, 2100 tokens). Outputs start as NaN.
 * Reference: W dequantised by lib/quant.c (bit-exact with llama.cpp) times the f32 x, in float64.
 * Bounds: both modes round x (and float W; quantised W after dequantisation) to f16 and sum exact
 * f16 x f16 products in f32. Per product the relative error is <= 2u + u^2 with u = 2^-11 (9.8e-4),
 * the f32 sum adds <= n * 2^-23 relative to sum |w x| even with truncating tensor-core adds (4.9e-4
 * at n = 4096), and an f16 subnormal is off by at most 2^-25 absolute. So every output obeys
 *   |y - ref| <= 2e-3 * sum_c |w x| + 3e-8 * (sum_c |x| + sum_c |w|)      (a worst case: cannot fail
 * by chance), with the SwiGLU product's error propagated (|silu'| <= 1.1) and 1e-4 |ref| for __expf.
 * The typical error is far smaller: rounding errors are independent, so the relative L2 error over
 * an output is ~sqrt(2) * 2^-11 / sqrt(3) ~ 4e-4; it is checked against 2e-3.
 * Host groups, run everywhere (no device needed): the cuBLAS mode's chunk planner (mm_plan_chunks,
 * kernels.h: hand-worked plans and invariants over a sweep); mm's W decoders compiled for the CPU
 * against f16(quant_dequant_row), bit for bit; the tensor-core kernel's tiling emulated on the CPU
 * (cuda_mm_emulate_host) against the same reference and bounds, for every type, tails and
 * epilogue; the launcher's refusals. Without a device the GPU groups print SKIP (no CUDA device)
 * and the binary exits 77 once the host groups have passed (1 if one failed).
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

/* ---- host: the cuBLAS mode's chunk plan ---- */

static void check_plan(int64_t n_in, int64_t n_out, int64_t n_tokens, int swiglu, size_t scratch) {
    struct mm_chunks c;
    const int ok = mm_plan_chunks(n_in, n_out, n_tokens, swiglu, scratch, &c);
    T_CHECK(ok, "plan %lld x %lld, %lld tokens: a plan exists", (long long)n_in, (long long)n_out, (long long)n_tokens);
    if (!ok) return;
    const size_t xbytes = (size_t)c.tokens * (size_t)n_in * 2, wbytes = (size_t)c.rows * (size_t)n_in * 2;
    const size_t tbytes = swiglu ? (size_t)c.rows * (size_t)c.tokens * 4 : 0;
    /* a partial chunk is a multiple of MM_CHUNK_ALIGN unless fewer than that fit */
    T_CHECK(c.tokens >= 1 && c.tokens <= n_tokens &&
                (c.tokens == n_tokens || c.tokens % MM_CHUNK_ALIGN == 0 || c.tokens < MM_CHUNK_ALIGN) && c.rows >= 1 &&
                c.rows <= n_out && (c.rows == n_out || c.rows % MM_CHUNK_ALIGN == 0 || c.rows < MM_CHUNK_ALIGN),
            "plan %lld x %lld, %lld tokens: chunks %lld tokens, %lld rows", (long long)n_in, (long long)n_out,
            (long long)n_tokens, (long long)c.tokens, (long long)c.rows);
    T_CHECK(xbytes <= c.w_off && c.w_off + wbytes <= c.t_off && c.t_off + tbytes <= scratch &&
                c.w_off % MM_SCRATCH_ALIGN == 0 && c.t_off % MM_SCRATCH_ALIGN == 0,
            "plan %lld x %lld, %lld tokens: parts [0,%zu) [%zu,+%zu) [%zu,+%zu) inside %zu bytes, aligned",
            (long long)n_in, (long long)n_out, (long long)n_tokens, xbytes, c.w_off, wbytes, c.t_off, tbytes, scratch);
}

static void test_plan(void) {
    struct mm_chunks c;
    /* worked by hand: avail = 64 MiB - 1024; x takes 512 * 4096 * 2 = 4 MiB; all 4096 rows fit (32 MiB) */
    T_CHECK(mm_plan_chunks(4096, 4096, 512, 0, MM_SCRATCH_BYTES, &c) && c.tokens == 512 && c.rows == 4096 &&
                c.w_off == 4194304 && c.t_off == 4194304 + 33554432,
            "plan 4096 x 4096, 512 tokens: %lld tokens, %lld rows, w at %zu, t at %zu", (long long)c.tokens,
            (long long)c.rows, c.w_off, c.t_off);
    /* a long row: (avail / 2) / 37888 = 885 tokens -> 832; rows (avail - 31522816) / (37888 + 3328) = 863 -> 832 */
    T_CHECK(mm_plan_chunks(18944, 4096, 2048, 1, MM_SCRATCH_BYTES, &c) && c.tokens == 832 && c.rows == 832 &&
                c.w_off == 31522816,
            "plan 18944 x 4096, 2048 tokens, swiglu: %lld tokens, %lld rows, w at %zu", (long long)c.tokens,
            (long long)c.rows, c.w_off);
    /* the shapes test_device uses to split W rows, then x tokens */
    T_CHECK(mm_plan_chunks(4096, 9000, 9, 1, MM_SCRATCH_BYTES, &c) && c.tokens == 9 && c.rows > 4500 && c.rows < 9000 &&
                mm_plan_chunks(4096, 9000, 9, 0, MM_SCRATCH_BYTES, &c) && c.rows > 4500 && c.rows < 9000,
            "plan 4096 x 9000, 9 tokens: two row chunks (%lld rows)", (long long)c.rows);
    T_CHECK(mm_plan_chunks(8192, 67, 2100, 0, MM_SCRATCH_BYTES, &c) && c.tokens == 1984 && c.rows == 67,
            "plan 8192 x 67, 2100 tokens: two token chunks (%lld tokens)", (long long)c.tokens);
    T_CHECK(!mm_plan_chunks(20000000, 16, 16, 0, MM_SCRATCH_BYTES, &c) && c.tokens == 0,
            "a row longer than half the scratch has no plan");
    T_CHECK(!mm_plan_chunks(4096, 16, 16, 0, 512, &c), "a scratch below the alignment slack has no plan");
    T_CHECK(!mm_plan_chunks(0, 16, 16, 0, MM_SCRATCH_BYTES, &c) && !mm_plan_chunks(16, 16, 0, 0, MM_SCRATCH_BYTES, &c),
            "empty shapes have no plan");
    static const int64_t n_ins[] = {1, 95, 256, 4096, 14336, 18944, 151936};
    static const int64_t n_outs[] = {1, 67, 4096, 151936};
    static const int64_t n_toks[] = {9, 130, 512, 8192};
    for (size_t i = 0; i < sizeof n_ins / sizeof *n_ins; i++)
        for (size_t o = 0; o < sizeof n_outs / sizeof *n_outs; o++)
            for (size_t t = 0; t < sizeof n_toks / sizeof *n_toks; t++)
                for (int sw = 0; sw < 2; sw++) {
                    check_plan(n_ins[i], n_outs[o], n_toks[t], sw, MM_SCRATCH_BYTES);
                    check_plan(n_ins[i], n_outs[o], n_toks[t], sw, (size_t)3 << 20); /* a small scratch */
                }
}

#ifdef INFER_CUDA

/* ---- random inputs ---- */

static uint64_t rng = 0x452821E638D01377ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f; }


static const int32_t types[] = {INFER_TYPE_F32, INFER_TYPE_F16, INFER_TYPE_BF16, INFER_TYPE_Q8_0, INFER_TYPE_Q4_0,
                                INFER_TYPE_IQ4_NL, INFER_TYPE_IQ4_XS, INFER_TYPE_Q4_K, INFER_TYPE_Q5_K, INFER_TYPE_Q6_K};

/* ---- host: mm's W decoders (compiled for the CPU too) give lib/quant.c's values rounded to f16 ---- */

static void test_decoders(void) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const int32_t t = types[i];
        const int64_t n_in = quant_type(t)->blck == 1 ? 77 : 512, n_rows = 8;
        const size_t rb = quant_row_bytes(t, n_in);
        uint8_t *w = malloc(rb * (size_t)n_rows);
        float *ref = malloc(sizeof(float) * (size_t)n_in);
        uint16_t *got = aligned_alloc(16, sizeof(uint16_t) * 512);
        randw_weights(t, w, n_in, n_rows, rnd);
        int bad = 0, first = -1;
        for (int64_t r = 0; r < n_rows; r++) {
            quant_dequant_row(t, w + rb * (size_t)r, ref, n_in);
            if (cuda_mm_dequant_row_host(t, w + rb * (size_t)r, n_in, got) != cudaSuccess) {
                bad++;
                continue;
            }
            for (int64_t c = 0; c < n_in; c++)
                if (got[c] != quant_f32_to_f16(ref[c])) {
                    if (first < 0) first = (int)(r * n_in + c);
                    bad++;
                }
        }
        T_CHECK(bad == 0, "mm decoder %s: %d of %lld values differ from f16(quant_dequant_row) (first at %d)",
                quant_type(t)->name, bad, (long long)(n_in * n_rows), first);
        free(w), free(ref), free(got);
    }
    uint16_t *out = aligned_alloc(16, 64);
    static const uint8_t zeros[144];
    T_CHECK(cuda_mm_dequant_row_host(INFER_TYPE_Q2_K, zeros, 256, out) == cudaErrorInvalidValue,
            "the host decoder refuses a type mm does not take");
    free(out);
}

/* ---- host: the launcher refuses what it cannot do, before touching the device ---- */

static void test_refusals(void) {
    setenv("INFER_MATMUL", "fast", 1);
    struct cuda_mm_state *st = (struct cuda_mm_state *)1;
    T_CHECK(cuda_mm_state_create(&st) == cudaErrorInvalidValue && st == NULL, "INFER_MATMUL=fast is refused");
    unsetenv("INFER_MATMUL"); /* the mma mode allocates nothing on the device */
    T_CHECK(cuda_mm_state_create(&st) == cudaSuccess && st, "the default mode's state");
    if (!st) return;
    static float dummy[4];
    struct mm_args a = {0};
    a.type = INFER_TYPE_Q2_K, a.w = dummy, a.x = dummy, a.y = dummy, a.n_in = 256, a.n_out = 1, a.n_tokens = 16;
    T_CHECK(cuda_mm(&a, st, 0) == cudaErrorInvalidValue, "an unsupported weight type is refused");
    a.type = INFER_TYPE_Q4_K, a.n_in = 128;
    T_CHECK(cuda_mm(&a, st, 0) == cudaErrorInvalidValue, "a row length off the block size is refused");
    a.n_in = 256, a.n_tokens = 0;
    T_CHECK(cuda_mm(&a, st, 0) == cudaErrorInvalidValue, "zero tokens are refused");
    a.n_tokens = 16, a.epilogue = MMV_SWIGLU;
    T_CHECK(cuda_mm(&a, st, 0) == cudaErrorInvalidValue, "SwiGLU without w2 is refused");
    a.epilogue = MMV_ADD;
    T_CHECK(cuda_mm(&a, st, 0) == cudaErrorInvalidValue, "ADD without add is refused");
    a.epilogue = 7;
    T_CHECK(cuda_mm(&a, st, 0) == cudaErrorInvalidValue, "an unknown epilogue is refused");
    a.epilogue = MMV_PLAIN, a.n_tokens = 64 * 65536;
    T_CHECK(cuda_mm(&a, st, 0) == cudaErrorInvalidValue, "more token tiles than a grid holds are refused");
    T_CHECK(cuda_mm(&a, NULL, 0) == cudaErrorInvalidValue, "no state is refused");
    cuda_mm_state_free(st);
}

/* ---- the reference, the bounds, the CPU emulation; then the device cases ---- */

#define CK(x) T_CHECK((x) == cudaSuccess, "%s: %s", #x, cudaGetErrorString(x))

/* The float64 products of every (token, row) and their error scales. */
struct refs {
    double *s, *s2;     /* W x, W2 x */
    double *e, *e2;     /* the per-output bound of each product (header) */
};

static void reference(int32_t type, const uint8_t *w, const uint8_t *w2, const float *x, int64_t n_in, int64_t n_out,
                      int64_t nt, int swiglu, struct refs *r) {
    const size_t rb = quant_row_bytes(type, n_in), n = (size_t)(nt * n_out);
    r->s = malloc(sizeof(double) * n), r->e = malloc(sizeof(double) * n);
    r->s2 = malloc(sizeof(double) * n), r->e2 = malloc(sizeof(double) * n);
    float *wr = malloc(sizeof(float) * (size_t)n_in);
    double *xabs = malloc(sizeof(double) * (size_t)nt);
    for (int64_t t = 0; t < nt; t++) {
        xabs[t] = 0;
        for (int64_t c = 0; c < n_in; c++) xabs[t] += fabs((double)x[t * n_in + c]);
    }
    for (int m = 0; m < (swiglu ? 2 : 1); m++) {
        double *s = m ? r->s2 : r->s, *e = m ? r->e2 : r->e;
        for (int64_t o = 0; o < n_out; o++) {
            quant_dequant_row(type, (m ? w2 : w) + rb * (size_t)o, wr, n_in);
            double wabs = 0;
            for (int64_t c = 0; c < n_in; c++) wabs += fabs((double)wr[c]);
            for (int64_t t = 0; t < nt; t++) {
                const float *xt = x + t * n_in;
                double acc = 0, sa = 0;
                for (int64_t c = 0; c < n_in; c++) {
                    const double p = (double)wr[c] * (double)xt[c];
                    acc += p, sa += fabs(p);
                }
                s[t * n_out + o] = acc;
                e[t * n_out + o] = 2e-3 * sa + 3e-8 * (xabs[t] + wabs);
            }
        }
    }
    free(wr), free(xabs);
}

static double silu_d(double v) { return v / (1.0 + exp(-v)); }

/* y against the reference within the per-output bound and the relative L2 bound (header). */
static void check_output(const struct refs *r, const float *y, const float *add, int64_t n_in, int64_t n_out, int64_t nt,
                         int epilogue, int alias, const char *what, int32_t type) {
    const size_t yn = (size_t)(nt * n_out);
    int bad = 0;
    double worst = 0, num = 0, den = 0;
    int64_t worst_at = 0;
    for (size_t i = 0; i < yn; i++) {
        double ref = r->s[i], tol = r->e[i];
        if (epilogue == MMV_ADD) ref += add[i], tol += 1e-6 * fabs(ref);
        if (epilogue == MMV_SWIGLU) {
            const double g = r->s[i], u = r->s2[i];
            ref = silu_d(g) * u;
            tol = 1.1 * r->e[i] * (fabs(u) + r->e2[i]) + fabs(silu_d(g)) * r->e2[i] + 1e-4 * fabs(ref);
        }
        const double err = fabs((double)y[i] - ref);
        if (!(err <= tol)) bad++;
        if (!(err <= worst * tol)) worst = err / tol, worst_at = (int64_t)i;
        num += (y[i] - ref) * (y[i] - ref), den += ref * ref;
    }
    const double rel = sqrt(num / (den > 0 ? den : 1e-300));
    T_CHECK(bad == 0 && rel <= 2e-3,
            "mm %s %s %lld x %lld, %lld tokens, epilogue %d%s: %d of %zu outputs off their bound (worst %.3g x at "
            "token %lld row %lld), relative L2 %.3g (bound 2e-3)",
            what, quant_type(type)->name, (long long)n_in, (long long)n_out, (long long)nt, epilogue,
            alias ? " (add = y)" : "", bad, yn, worst, (long long)(worst_at / n_out), (long long)(worst_at % n_out), rel);
}

/* The tensor-core kernel's tiling run on the CPU (cuda_mm_emulate_host): every index of the kernel
 * except the hardware mma itself, checked without a device. */
static void emulate_case(int32_t type, int64_t n_in, int64_t n_out, int64_t nt, int epilogue, int alias) {
    const size_t rb = quant_row_bytes(type, n_in), xn = (size_t)(nt * n_in), yn = (size_t)(nt * n_out);
    uint8_t *w = malloc(rb * (size_t)n_out), *w2 = malloc(rb * (size_t)n_out);
    float *x = malloc(sizeof(float) * xn), *add = malloc(sizeof(float) * yn), *y = malloc(sizeof(float) * yn);
    randw_weights(type, w, n_in, n_out, rnd);
    randw_weights(type, w2, n_in, n_out, rnd);
    for (size_t i = 0; i < xn; i++) x[i] = frand(-2, 2) * (i % 97 == 0 ? 20.0f : 1.0f);
    for (size_t i = 0; i < yn; i++) add[i] = frand(-1, 1);
    struct refs r;
    reference(type, w, w2, x, n_in, n_out, nt, epilogue == MMV_SWIGLU, &r);
    if (alias) memcpy(y, add, sizeof(float) * yn);
    else memset(y, 0xFF, sizeof(float) * yn);
    struct mm_args a = {0};
    a.type = type, a.w = w, a.w2 = epilogue == MMV_SWIGLU ? w2 : NULL, a.n_in = n_in, a.n_out = n_out, a.n_tokens = nt;
    a.x = x, a.y = y, a.add = epilogue == MMV_ADD ? (alias ? y : add) : NULL, a.epilogue = epilogue;
    T_CHECK(cuda_mm_emulate_host(&a) == cudaSuccess, "emulate %s", quant_type(type)->name);
    check_output(&r, y, add, n_in, n_out, nt, epilogue, alias, "mma emulated on the CPU", type);
    free(w), free(w2), free(x), free(add), free(y);
    free(r.s), free(r.s2), free(r.e), free(r.e2);
}

static void test_emulated(void) {
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const int32_t t = types[i];
        const int blck = quant_type(t)->blck;
        const int64_t k1 = blck == 256 ? 256 : blck == 32 ? 96 : 95;
        emulate_case(t, k1, 67, 9, MMV_PLAIN, 0);
        emulate_case(t, blck == 1 ? 255 : 512, 130, 70, MMV_ADD, 1);
        emulate_case(t, blck == 1 ? 769 : blck == 32 ? 800 : 768, 67, 33, MMV_SWIGLU, 0);
        emulate_case(t, blck == 1 ? 129 : 256, 64, 64, MMV_ADD, 0);
        if (blck == 1) emulate_case(t, 1, 5, 3, MMV_SWIGLU, 0);
    }
}

static const char *mode_name[2] = {"mma", "cublas"};

static void run_case(struct cuda_mm_state *const st[2], int32_t type, int64_t n_in, int64_t n_out, int64_t nt,
                     int epilogue, int alias) {
    const size_t rb = quant_row_bytes(type, n_in), wbytes = rb * (size_t)n_out;
    const size_t xn = (size_t)(nt * n_in), yn = (size_t)(nt * n_out);
    uint8_t *w = malloc(wbytes), *w2 = malloc(wbytes);
    float *x = malloc(sizeof(float) * xn), *add = malloc(sizeof(float) * yn), *y = malloc(sizeof(float) * yn);
    randw_weights(type, w, n_in, n_out, rnd);
    randw_weights(type, w2, n_in, n_out, rnd);
    for (size_t i = 0; i < xn; i++) x[i] = frand(-2, 2) * (i % 97 == 0 ? 20.0f : 1.0f);
    for (size_t i = 0; i < yn; i++) add[i] = frand(-1, 1);
    struct refs r;
    reference(type, w, w2, x, n_in, n_out, nt, epilogue == MMV_SWIGLU, &r);

    void *dw = NULL, *dw2 = NULL, *dx = NULL, *dy = NULL, *dadd = NULL;
    CK(cudaMalloc(&dw, wbytes));
    CK(cudaMalloc(&dw2, wbytes));
    CK(cudaMalloc(&dx, sizeof(float) * xn));
    CK(cudaMalloc(&dy, sizeof(float) * yn));
    CK(cudaMalloc(&dadd, sizeof(float) * yn));
    CK(cudaMemcpy(dw, w, wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw2, w2, wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x, sizeof(float) * xn, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dadd, add, sizeof(float) * yn, cudaMemcpyHostToDevice));

    for (int mode = 0; mode < 2; mode++) {
        if (alias) CK(cudaMemcpy(dy, add, sizeof(float) * yn, cudaMemcpyHostToDevice)); /* y += W x in place */
        else CK(cudaMemset(dy, 0xFF, sizeof(float) * yn));                          /* NaN */
        struct mm_args a = {0};
        a.type = type, a.w = dw, a.w2 = epilogue == MMV_SWIGLU ? dw2 : NULL, a.n_in = n_in, a.n_out = n_out;
        a.n_tokens = nt, a.x = dx, a.y = dy, a.add = epilogue == MMV_ADD ? (alias ? dy : dadd) : NULL;
        a.epilogue = epilogue;
        CK(cuda_mm(&a, st[mode], 0));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, dy, sizeof(float) * yn, cudaMemcpyDeviceToHost));

        check_output(&r, y, add, n_in, n_out, nt, epilogue, alias, mode_name[mode], type);
    }
    cudaFree(dw), cudaFree(dw2), cudaFree(dx), cudaFree(dy), cudaFree(dadd);
    free(w), free(w2), free(x), free(add), free(y);
    free(r.s), free(r.s2), free(r.e), free(r.e2);
}

static void test_device(void) {
    struct cuda_mm_state *st[2] = {NULL, NULL};
    setenv("INFER_MATMUL", "mma", 1);
    CK(cuda_mm_state_create(&st[0]));
    setenv("INFER_MATMUL", "cublas", 1);
    CK(cuda_mm_state_create(&st[1]));
    unsetenv("INFER_MATMUL");
    if (!st[0] || !st[1]) goto done;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const int32_t t = types[i];
        const int blck = quant_type(t)->blck;
        /* row lengths: K-quants whole 256-blocks; 32-value types an odd number of units (a half last K
         * step of 64); float types odd lengths */
        const int64_t k1 = blck == 256 ? 256 : blck == 32 ? 96 : 95;
        const int64_t k256 = blck == 1 ? 255 : 256, k768 = blck == 1 ? 769 : blck == 32 ? 800 : 768;
        const int64_t k4096 = blck == 1 ? 4095 : 4096, k1280 = blck == 1 ? 1281 : blck == 32 ? 1312 : 1280;
        run_case(st, t, k1, 67, 9, MMV_PLAIN, 0);           /* one K step, partial row and token tiles */
        run_case(st, t, k256, 130, 33, MMV_ADD, 1);        /* residual added in place */
        run_case(st, t, k768, 67, 130, MMV_SWIGLU, 0);     /* gate / up, three token tiles */
        run_case(st, t, k4096, 130, 512, MMV_PLAIN, 0);    /* a real row length, 8 token tiles */
        run_case(st, t, blck == 1 ? 257 : 256, 4096, 130, MMV_ADD, 0); /* many row tiles, add apart from y */
        run_case(st, t, k1280, 200, 64, MMV_SWIGLU, 0);    /* exactly one token tile */
        if (blck == 1) run_case(st, t, 1, 67, 9, MMV_ADD, 0); /* a row of one value */
    }
    /* the cuBLAS mode's chunking (test_plan checks these shapes do split): W in two row chunks with
     * SwiGLU, x in two token chunks with the residual in place */
    run_case(st, INFER_TYPE_Q4_K, 4096, 9000, 9, MMV_SWIGLU, 0);
    run_case(st, INFER_TYPE_F16, 4096, 9000, 9, MMV_PLAIN, 0);
    run_case(st, INFER_TYPE_Q8_0, 8192, 67, 2100, MMV_ADD, 1);
done:
    cuda_mm_state_free(st[0]);
    cuda_mm_state_free(st[1]);
    cudaGetLastError();
}

#endif

int main(void) {
    test_plan();
#ifdef INFER_CUDA
    test_decoders();
    test_emulated();
    test_refusals();
    const char *why = NULL;
    if (device_count(&why) > 0) {
        test_device();
        return t_done();
    }
    T_SKIP("no CUDA device: mm mma: %s", why);
    T_SKIP("no CUDA device: mm cublas: %s", why);
#else
    T_SKIP("no CUDA device: mm mma: built without CUDA");
    T_SKIP("no CUDA device: mm cublas: built without CUDA");
#endif
    /* the host checks above ran; the GPU groups did not: report the binary as skipped unless one failed */
    const int rc = t_done();
    return rc == 0 ? 77 : rc;
}
