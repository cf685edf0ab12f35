/* test-cuda-kernels: the CUDA attention, ssm_conv, gdn and moe kernels against their CPU twins
 * (cpu_<op>, lib/cpu/, run on the calling thread) on the same random inputs, plus the float64
 * references of tests/ref.c where the CPU computes differently on purpose (moe_ffn: the CPU quantises
 * activations to 8 bits, the GPU multiplies f32 activations).
 *
 * Inputs have physical ranges: GDN decay gates g = softplus(a + dt) * ssm_a in about (-20, 0), beta
 * in (0, 1); attention queries up to +-200 so scores reach ~100 and need the max subtracted; shapes
 * with tails (odd head_dim, channel and column counts), batch 1 and > 1, GQA ratios 1/2/3/8/16, padded
 * strides. Device outputs start as NaN (and padding between rows must stay NaN).
 * Attention runs the default variant and, for head_dim 64/128/256, ATTN_MMA (tensor cores) too; over
 * Q8_0 cells the default only (ATTN_MMA must refuse them), with and without llama.cpp's Hadamard
 * rotation (rot_k / rot_v), q prepared so that its rotation lies on the Q8_0 grid: the CPU rounds
 * (rotated) q itself (llama.cpp's CPU way), the GPU dequantises K and keeps q, so on such a q both
 * score the same values and the f16 tolerances hold.
 * Tolerances (max |gpu - cpu| over a case):
 *   attn      2e-5 (outputs are convex combinations of |v| <= 1; f32 sums in another order); 1e-4 with
 *             |q| up to 30 or 200, where the scores' own f32 rounding (~1e-5) moves the weights
 *   ssm_conv  y: 1e-6 |y| + 1e-7 (only expf differs); state and snapshots bit-exact (copies)
 *   gdn       2e-5 * max |cpu| over out and state (f32 dot products in another order, expf)
 *   moe_route ids exact (ties: lower id), weights 2e-6 relative (expf may differ by 2 ulp)
 *   moe_ffn   vs float64: 2e-4 * max |ref|; vs CPU: the same for F32 weights, else an NMSE of 1e-3
 *             (the CPU's Q8 / f16-rounded activations)
 * Without a device every group prints SKIP (no CUDA device) and the binary exits 77.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "device.h"
#include "kernels.h"
#include "quant.h"
#include "ref.h"
#include "t.h"

#ifdef INFER_CUDA

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f; }
static void fill(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = frand(lo, hi);
}

#define CK(x) T_CHECK((x) == cudaSuccess, "%s: %s", #x, cudaGetErrorString(x))

/* A device copy of n bytes of host memory (src NULL: NaN-poisoned). */
static void *dev(const void *src, size_t n) {
    void *d = NULL;
    CK(cudaMalloc(&d, n ? n : 4));
    if (src) CK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
    else CK(cudaMemset(d, 0xFF, n ? n : 4));
    return d;
}
static void *host(const void *d, size_t n) {
    void *h = malloc(n ? n : 4);
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    return h;
}
static float *nans(int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memset(x, 0xFF, sizeof(float) * (size_t)(n ? n : 1));
    return x;
}

/* max |a - b| over n values, NaN counting as infinite; *amax gets max |b|. */
static double max_diff(const float *a, const float *b, int64_t n, double *amax) {
    double m = 0, am = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > am) am = fabs(b[i]);
    }
    if (amax) *amax = am;
    return m;
}

/* ---- attn ---- */

/* nt tokens at positions first_pos.. (the last nt cells of a prefill when first_pos = n_kv - nt), cells
 * of type kt (F16 or Q8_0) */
static void attn_run(int32_t kt, int32_t rot_k, int32_t rot_v, int nt, int nh, int nkv, int hd, int n_kv, int first_pos, float qr, int split) {
    const int q8 = kt == INFER_TYPE_Q8_0;
    const int64_t qs = (int64_t)nh * hd + 3, os = (int64_t)nh * hd + 5, ks = (int64_t)nkv * hd + (q8 ? 32 : 8);
    const int64_t nq = nt * qs, no = nt * os, nc = n_kv * ks;
    const size_t cb = q8 ? (size_t)(nc / 32) * 34 : 2 * (size_t)nc; /* bytes of K, and of V */
    float *q = malloc(sizeof(float) * (size_t)nq), *oc = nans(no);
    uint8_t *kv = malloc(2 * cb);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)nt);
    fill(q, nq, -qr, qr);
    if (q8) {
        float *f = malloc(sizeof(float) * 2 * (size_t)nc);
        fill(f, 2 * nc, -1, 1);
        T_CHECK(quant_quantize_row(INFER_TYPE_Q8_0, f, kv, 2 * nc) == INFER_OK, "q8_0 cells"); /* K then V */
        free(f);
        uint8_t qq[512 / 32 * 34];
        for (int64_t r = 0; r < (int64_t)nt * nh; r++) { /* each q head row: H(Q8_0(H q)), H q rounds to itself */
            float *qh = q + (r / nh) * qs + (r % nh) * hd;
            for (int c = 0; rot_k && c < hd; c += rot_k) kv_hadamard(qh + c, rot_k);
            quant_quantize_row(INFER_TYPE_Q8_0, qh, qq, hd);
            quant_dequant_row(INFER_TYPE_Q8_0, qq, qh, hd);
            for (int c = 0; rot_k && c < hd; c += rot_k) kv_hadamard(qh + c, rot_k);
        }
    } else {
        for (int64_t i = 0; i < 2 * nc; i++) ((uint16_t *)kv)[i] = blocks_f32_to_f16(frand(-1, 1));
    }
    for (int t = 0; t < nt; t++) pos[t] = first_pos + t;
    struct attn_args a = {q, kv, kv + cb, oc, pos, nt, nh, nkv, hd, n_kv, qs, ks, os, 1.0f / sqrtf((float)hd), NULL, 0, kt, rot_k, rot_v};
    T_CHECK(cpu_attn(&a, NULL) == INFER_OK, "cpu_attn: %s", infer_last_error());

    struct attn_args g = a;
    g.q = dev(q, sizeof(float) * (size_t)nq);
    g.k = dev(kv, 2 * cb);
    g.v = (const uint8_t *)g.k + cb;
    g.pos = dev(pos, sizeof(int32_t) * (size_t)nt);
    const size_t sf = attn_scratch_floats(&a);
    g.scratch = split && sf ? dev(NULL, sizeof(float) * sf) : NULL;
    /* the default, and the tensor-core kernel where it applies (it never splits) */
    const int mma = !q8 && (hd == 64 || hd == 128 || hd == 256);
    if (q8) {
        g.variant = ATTN_MMA;
        T_CHECK(cuda_attn(&g, 0) == cudaErrorInvalidValue, "attn: the tensor-core kernel refuses Q8_0 cells");
    }
    for (int variant = ATTN_AUTO; variant <= (mma ? ATTN_MMA : ATTN_AUTO); variant += mma ? ATTN_MMA : 1) {
        g.variant = variant;
        g.out = dev(NULL, sizeof(float) * (size_t)no);
        CK(cuda_attn(&g, 0));
        CK(cudaDeviceSynchronize());
        float *og = host(g.out, sizeof(float) * (size_t)no);
        double worst = 0;
        int pad_ok = 1;
        for (int t = 0; t < nt; t++) {
            double d = max_diff(og + t * os, oc + t * os, (int64_t)nh * hd, NULL);
            if (d > worst) worst = d;
            for (int64_t i = (int64_t)nh * hd; i < os; i++) pad_ok &= isnan(og[t * os + i]);
        }
        const double tol = qr <= 8 ? 2e-5 : 1e-4; /* scores of +-100 carry f32 rounding ~1e-5 into the exponent */
        T_CHECK(worst <= tol, "attn %s rot %d/%d %s nt=%d heads %d/%d hd=%d n_kv=%d pos0=%d |q|<=%g splits=%d: max |gpu - cpu| = %.3g",
                q8 ? "q8_0" : "f16", rot_k, rot_v, variant == ATTN_MMA ? "mma" : "auto", nt, nh, nkv, hd, n_kv, first_pos, qr,
                g.scratch && variant != ATTN_MMA ? attn_splits(&a) : 1, worst);
        T_CHECK(pad_ok, "attn variant %d nt=%d hd=%d: the kernel wrote between output rows", variant, nt, hd);
        cudaFree(g.out);
        free(og);
    }
    cudaFree((void *)g.q), cudaFree((void *)g.k), cudaFree((void *)g.pos), cudaFree(g.scratch);
    free(q), free(oc), free(kv), free(pos);
}

static void attn_case(int nt, int nh, int nkv, int hd, int n_kv, int first_pos, float qr, int split) {
    attn_run(INFER_TYPE_F16, 0, 0, nt, nh, nkv, hd, n_kv, first_pos, qr, split);
}

static void test_attn(void) {
    attn_case(1, 8, 8, 64, 100, 99, 4, 1);        /* decode, G = 1, no split (short) */
    attn_case(1, 16, 8, 128, 1000, 999, 4, 1);    /* decode, G = 2, 3 splits */
    attn_case(1, 16, 8, 128, 1000, 999, 4, 0);    /* the same without scratch: one split */
    attn_case(1, 32, 4, 128, 4096, 4095, 200, 1); /* G = 8, 16 splits, scores ~100: max subtraction */
    attn_case(1, 32, 4, 128, 4096, 1500, 4, 1);   /* pos far below n_kv: empty splits */
    attn_case(4, 16, 2, 256, 777, 773, 30, 1);    /* speculative verify: 4 tokens, G = 8, hd 256 */
    attn_case(8, 16, 1, 512, 600, 592, 4, 1);     /* hd 512, G = 16: heads split over blocks */
    attn_case(3, 3, 1, 7, 9, 6, 4, 1);            /* odd head_dim and G = 3 */
    attn_case(37, 6, 3, 80, 57, 20, 8, 1);        /* prefill, G = 2, hd 80 */
    attn_case(100, 16, 2, 256, 100, 0, 200, 1);   /* prefill from 0, G = 8, large scores */
    attn_case(70, 8, 8, 64, 70, 0, 4, 1);         /* prefill, G = 1: 32 tokens per block */
    attn_case(150, 32, 8, 128, 180, 30, 8, 1);    /* prefill after a cached prefix, G = 4 */
    /* Q8_0 cells: decode with splits, verify, hd 512, prefill with G = 2 / 8; llama.cpp's rotation sizes
     * (rot_k = largest power of two dividing hd, rot_v = 64) but for one case of each kind */
    attn_run(INFER_TYPE_Q8_0, 0, 0, 1, 16, 8, 128, 1000, 999, 4, 1);
    attn_run(INFER_TYPE_Q8_0, 128, 64, 1, 16, 8, 128, 1000, 999, 4, 1);
    attn_run(INFER_TYPE_Q8_0, 128, 64, 1, 32, 4, 128, 4096, 4095, 200, 1);
    attn_run(INFER_TYPE_Q8_0, 256, 64, 4, 16, 2, 256, 777, 773, 30, 1);
    attn_run(INFER_TYPE_Q8_0, 512, 64, 8, 16, 1, 512, 600, 592, 4, 1);
    attn_run(INFER_TYPE_Q8_0, 0, 0, 37, 6, 3, 64, 57, 20, 8, 1);
    attn_run(INFER_TYPE_Q8_0, 64, 64, 37, 6, 3, 64, 57, 20, 8, 1);
    attn_run(INFER_TYPE_Q8_0, 256, 64, 100, 16, 2, 256, 100, 0, 200, 1);

    struct attn_args bad = {0};
    bad.n_tokens = 1, bad.n_head = 3, bad.n_head_kv = 2, bad.head_dim = 8, bad.n_kv = 4, bad.kv_type = INFER_TYPE_F16;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: missing pointers are an error");
    float f[4];
    uint16_t h[4];
    int32_t p[1] = {0};
    bad.q = f, bad.k = h, bad.v = h, bad.out = f, bad.pos = p;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: n_head not a multiple of n_head_kv is an error");
    bad.n_head = 2, bad.head_dim = 1024;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: head_dim 1024 is an error");
    bad.head_dim = 8, bad.variant = ATTN_MMA;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: the tensor-core kernel refuses head_dim 8");
    bad.variant = ATTN_AUTO, bad.kv_type = INFER_TYPE_F32;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: f32 cells are an error");
    bad.kv_type = INFER_TYPE_Q8_0, bad.kv_stride = 32;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: Q8_0 cells with head_dim 8 are an error");
    bad.head_dim = 64, bad.kv_stride = 128, bad.rot_k = 48;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: rot_k 48 is an error");
    bad.rot_k = 0, bad.rot_v = 128;
    T_CHECK(cuda_attn(&bad, 0) == cudaErrorInvalidValue, "attn: rot_v 128 over head_dim 64 is an error");
}

/* ---- ssm_conv ---- */

static void conv_case(int64_t n_ch, int64_t xs, int nt, int dc, int ring, int pos0, int from) {
    const int nw = dc - 1;
    const int64_t ns = nw * n_ch;
    float *x = malloc(sizeof(float) * (size_t)(nt * xs + 1)), *st = malloc(sizeof(float) * (size_t)ns);
    float *w = malloc(sizeof(float) * (size_t)(n_ch * dc)), *yc = nans(nt * n_ch), *snc = nans(ring * ns);
    float *st0 = malloc(sizeof(float) * (size_t)ns);
    fill(x, nt * xs + 1, -3, 3);
    fill(st, ns, -3, 3);
    fill(w, n_ch * dc, -1, 1);
    memcpy(st0, st, sizeof(float) * (size_t)ns);
    struct ssm_conv_args a = {x, st, w, yc, n_ch, xs, nt, dc, ring ? snc : NULL, ns, ring, pos0, from};
    T_CHECK(cpu_ssm_conv(&a, NULL) == INFER_OK, "cpu_ssm_conv: %s", infer_last_error());

    struct ssm_conv_args g = a;
    g.x = dev(x, sizeof(float) * (size_t)(nt * xs + 1));
    g.state = dev(st0, sizeof(float) * (size_t)ns);
    g.w = dev(w, sizeof(float) * (size_t)(n_ch * dc));
    g.y = dev(NULL, sizeof(float) * (size_t)(nt * n_ch));
    g.snap = ring ? dev(NULL, sizeof(float) * (size_t)(ring * ns)) : NULL;
    CK(cuda_ssm_conv(&g, 0));
    CK(cudaDeviceSynchronize());
    float *yg = host(g.y, sizeof(float) * (size_t)(nt * n_ch)), *sg = host(g.state, sizeof(float) * (size_t)ns);
    int bad = 0;
    for (int64_t i = 0; i < nt * n_ch; i++)
        if (!(fabs((double)yg[i] - yc[i]) <= 1e-6 * fabs(yc[i]) + 1e-7)) bad++;
    T_CHECK(bad == 0, "ssm_conv n_ch=%lld nt=%d d_conv=%d: %d outputs off", (long long)n_ch, nt, dc, bad);
    T_CHECK(memcmp(sg, st, sizeof(float) * (size_t)ns) == 0, "ssm_conv n_ch=%lld nt=%d d_conv=%d: state differs",
            (long long)n_ch, nt, dc);
    if (ring) {
        float *sng = host(g.snap, sizeof(float) * (size_t)(ring * ns));
        int same = 1;
        for (int64_t i = 0; i < ring * ns; i++) same &= (isnan(sng[i]) && isnan(snc[i])) || sng[i] == snc[i];
        T_CHECK(same, "ssm_conv n_ch=%lld nt=%d ring=%d from=%d: snapshots differ", (long long)n_ch, nt, ring, from);
        free(sng);
        cudaFree(g.snap);
    }
    cudaFree((void *)g.x), cudaFree(g.state), cudaFree((void *)g.w), cudaFree(g.y);
    free(x), free(st), free(w), free(yc), free(snc), free(st0), free(yg), free(sg);
}

static void test_ssm_conv(void) {
    conv_case(1000, 1000, 1, 4, 0, 0, 0);    /* decode, a partial block */
    conv_case(300, 310, 17, 4, 5, 7, 10);    /* prefill, padded rows, snapshot ring wraps */
    conv_case(129, 129, 0, 4, 0, 0, 0);      /* no tokens: the state stays */
    conv_case(64, 64, 5, 2, 3, 0, 0);        /* d_conv 2, a snapshot per token */
    conv_case(96, 100, 6, 16, 2, 1, 3);      /* d_conv 16 (the limit) */
    struct ssm_conv_args bad = {0};
    bad.n_ch = 8, bad.x_stride = 8, bad.n_tokens = 1, bad.d_conv = 17;
    T_CHECK(cuda_ssm_conv(&bad, 0) == cudaErrorInvalidValue, "ssm_conv: d_conv 17 is an error");
}

/* ---- gdn ---- */

enum { GDN_T_GROUPED = 1, GDN_T_AB_GROUP = 2, GDN_T_SNAP = 4 };

static void gdn_case(int nt, int ng, int nv, int D, int flags, int variant) {
    const int64_t qks = (int64_t)ng * D + 7, vs = (int64_t)nv * D + 5, abs_ = 2 * (int64_t)nv;
    const int64_t ns = (int64_t)nv * D * D, no = (int64_t)nt * nv * D;
    const int r = nv / ng, ring = flags & GDN_T_SNAP ? (nt < 3 ? nt : 3) : 0, from = nt - ring - 1 > 0 ? nt - ring - 1 : 0;
    float *q = malloc(sizeof(float) * (size_t)(nt * qks + 1)), *k = malloc(sizeof(float) * (size_t)(nt * qks + 1));
    float *v = malloc(sizeof(float) * (size_t)(nt * vs + 1)), *ab = malloc(sizeof(float) * (size_t)(nt * abs_ + 1));
    float *dt = malloc(sizeof(float) * (size_t)nv), *sa = malloc(sizeof(float) * (size_t)nv);
    float *st = malloc(sizeof(float) * (size_t)ns), *st0 = malloc(sizeof(float) * (size_t)ns);
    float *oc = nans(no), *snc = nans(ring * ns);
    fill(q, nt * qks + 1, -1, 1), fill(k, nt * qks + 1, -1, 1), fill(v, nt * vs + 1, -1, 1);
    fill(ab, nt * abs_ + 1, -4, 4), fill(dt, nv, -1, 1), fill(st, ns, -0.3f, 0.3f);
    for (int j = 0; j < nv; j++) sa[j] = -expf(frand(-2, 1.5f)); /* g = softplus(.) * ssm_a in about (-20, 0) */
    memcpy(st0, st, sizeof(float) * (size_t)ns);
    const int abg = flags & GDN_T_AB_GROUP;
    struct gdn_args a = {q, k, v, abg ? ab + r : ab + nv, ab, dt, sa, st, oc, nt, ng, nv, D, qks, vs, abs_,
                         (flags & GDN_T_GROUPED) != 0, abg ? r : 0, 1e-6f, GDN_RECURRENT,
                         ring ? snc : NULL, ns, ring, 2, from};
    T_CHECK(cpu_gdn(&a, NULL) == INFER_OK, "cpu_gdn: %s", infer_last_error());

    struct gdn_args g = a;
    g.q = dev(q, sizeof(float) * (size_t)(nt * qks + 1));
    g.k = dev(k, sizeof(float) * (size_t)(nt * qks + 1));
    g.v = dev(v, sizeof(float) * (size_t)(nt * vs + 1));
    float *dab = dev(ab, sizeof(float) * (size_t)(nt * abs_ + 1));
    g.b = dab, g.a = abg ? dab + r : dab + nv;
    g.dt_bias = dev(dt, sizeof(float) * (size_t)nv);
    g.ssm_a = dev(sa, sizeof(float) * (size_t)nv);
    g.state = dev(st0, sizeof(float) * (size_t)ns);
    g.out = dev(NULL, sizeof(float) * (size_t)no);
    g.snap = ring ? dev(NULL, sizeof(float) * (size_t)(ring * ns)) : NULL;
    g.variant = variant;
    CK(cuda_gdn(&g, 0));
    CK(cudaDeviceSynchronize());
    float *og = host(g.out, sizeof(float) * (size_t)no), *sg = host(g.state, sizeof(float) * (size_t)ns);
    double mo, ms;
    const double dout = max_diff(og, oc, no, &mo), dst = max_diff(sg, st, ns, &ms);
    T_CHECK(dout <= 2e-5 * mo + 1e-7 && dst <= 2e-5 * ms + 1e-7,
            "gdn nt=%d heads %d/%d D=%d flags=%d variant=%d: max |gpu - cpu| out %.3g (max %.3g), state %.3g (max %.3g)",
            nt, ng, nv, D, flags, variant, dout, mo, dst, ms);
    if (ring) {
        float *sng = host(g.snap, sizeof(float) * (size_t)(ring * ns));
        double msn;
        const double dsn = max_diff(sng, snc, ring * ns, &msn); /* from <= nt - ring: every slot is written */
        T_CHECK(dsn <= 2e-5 * msn + 1e-7,
                "gdn nt=%d ring=%d from=%d: snapshots off (max diff %.3g)", nt, ring, from, dsn);
        free(sng);
        cudaFree(g.snap);
    }
    cudaFree((void *)g.q), cudaFree((void *)g.k), cudaFree((void *)g.v), cudaFree(dab), cudaFree((void *)g.dt_bias);
    cudaFree((void *)g.ssm_a), cudaFree(g.state), cudaFree(g.out);
    free(q), free(k), free(v), free(ab), free(dt), free(sa), free(st), free(st0), free(oc), free(snc), free(og), free(sg);
}

static void test_gdn(void) {
    gdn_case(1, 2, 4, 128, 0, GDN_AUTO);                                    /* decode, tiled heads */
    gdn_case(5, 2, 8, 128, GDN_T_GROUPED | GDN_T_AB_GROUP | GDN_T_SNAP, GDN_RECURRENT); /* qwen3next form */
    gdn_case(64, 4, 4, 64, 0, GDN_AUTO);                                    /* prefill length (AUTO: recurrent) */
    gdn_case(3, 1, 3, 40, GDN_T_SNAP, GDN_RECURRENT);                       /* odd D: partial lanes and columns */
    gdn_case(2, 2, 2, 256, GDN_T_GROUPED, GDN_RECURRENT);                   /* the D limit */
    gdn_case(6, 3, 6, 32, GDN_T_SNAP, GDN_AUTO);                            /* snapshots from token 2 */

    struct gdn_args bad = {0};
    float f[8];
    bad.q = bad.k = bad.v = bad.a = bad.b = bad.dt_bias = bad.ssm_a = f, bad.state = bad.out = f;
    bad.n_tokens = 1, bad.n_group = 1, bad.n_vhead = 1, bad.d_state = 2, bad.qk_stride = 2, bad.v_stride = 2;
    bad.ab_stride = 2, bad.eps = 1e-6f, bad.variant = GDN_CHUNKED;
    T_CHECK(cuda_gdn(&bad, 0) == cudaErrorInvalidValue, "gdn: GDN_CHUNKED is not implemented on CUDA yet");
    bad.variant = GDN_RECURRENT, bad.d_state = 512, bad.qk_stride = bad.v_stride = 512;
    T_CHECK(cuda_gdn(&bad, 0) == cudaErrorInvalidValue, "gdn: d_state 512 is an error");
}

/* ---- moe ---- */

static void route_case(int nt, int ne, int nk, int norm, int ties) {
    float *z = malloc(sizeof(float) * (size_t)(nt * ne)), *wc = nans(nt * nk);
    int32_t *ic = malloc(sizeof(int32_t) * (size_t)(nt * nk));
    fill(z, nt * ne, -6, 6);
    if (ties)
        for (int64_t i = 0; i < nt * ne; i++) z[i] = (float)(rnd() % 5); /* many equal logits */
    struct moe_route_args a = {z, ic, wc, nt, ne, nk, norm};
    T_CHECK(cpu_moe_route(&a, NULL) == INFER_OK, "cpu_moe_route: %s", infer_last_error());
    struct moe_route_args g = a;
    g.logits = dev(z, sizeof(float) * (size_t)(nt * ne));
    g.ids = dev(NULL, sizeof(int32_t) * (size_t)(nt * nk));
    g.weights = dev(NULL, sizeof(float) * (size_t)(nt * nk));
    CK(cuda_moe_route(&g, 0));
    CK(cudaDeviceSynchronize());
    int32_t *ig = host(g.ids, sizeof(int32_t) * (size_t)(nt * nk));
    float *wg = host(g.weights, sizeof(float) * (size_t)(nt * nk));
    int ids_bad = 0, w_bad = 0;
    for (int64_t i = 0; i < nt * nk; i++) {
        ids_bad += ig[i] != ic[i];
        w_bad += !(fabs((double)wg[i] - wc[i]) <= 2e-6 * fabs(wc[i]));
    }
    T_CHECK(ids_bad == 0 && w_bad == 0, "moe_route nt=%d n_expert=%d used=%d norm=%d ties=%d: %d ids, %d weights differ",
            nt, ne, nk, norm, ties, ids_bad, w_bad);
    cudaFree((void *)g.logits), cudaFree(g.ids), cudaFree(g.weights);
    free(z), free(wc), free(ic), free(ig), free(wg);
}

/* n_expert matrices (n_out, n_in) of a type: float types from random values, others quantised. */
static void *moe_weights(int32_t type, int64_t n_rows, int64_t n_in) {
    const size_t rb = quant_row_bytes(type, n_in);
    uint8_t *w = malloc(rb * (size_t)n_rows);
    float *row = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t r = 0; r < n_rows; r++) {
        fill(row, n_in, -0.5f, 0.5f);
        T_CHECK(quant_quantize_row(type, row, w + rb * (size_t)r, n_in) == INFER_OK, "quantise %s", quant_type(type)->name);
    }
    free(row);
    return w;
}

static void ffn_case(int32_t tg, int32_t td, int64_t E, int64_t F, int ne, int nk, int nt) {
    const size_t gb = quant_row_bytes(tg, E) * (size_t)(ne * F), db = quant_row_bytes(td, F) * (size_t)(ne * E);
    void *gate = moe_weights(tg, ne * F, E), *up = moe_weights(tg, ne * F, E), *down = moe_weights(td, ne * E, F);
    float *x = malloc(sizeof(float) * (size_t)(nt * E)), *w = malloc(sizeof(float) * (size_t)(nt * nk)), *yc = nans(nt * E);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(nt * nk));
    fill(x, nt * E, -2, 2);
    for (int t = 0; t < nt; t++)
        for (int k = 0; k < nk; k++) {
            ids[t * nk + k] = (t + 3 * k + 1) % ne;
            w[t * nk + k] = frand(0.1f, 0.6f);
        }
    struct moe_ffn_args a = {tg, td, gate, up, down, x, ids, w, yc, E, F, ne, nk, nt, NULL};
    T_CHECK(cpu_moe_ffn(&a, NULL) == INFER_OK, "cpu_moe_ffn: %s", infer_last_error());
    double *r = malloc(sizeof(double) * (size_t)(nt * E));
    ref_moe_ffn(&a, r);

    struct moe_ffn_args g = a;
    g.gate = dev(gate, gb), g.up = dev(up, gb), g.down = dev(down, db);
    g.x = dev(x, sizeof(float) * (size_t)(nt * E));
    g.ids = dev(ids, sizeof(int32_t) * (size_t)(nt * nk));
    g.weights = dev(w, sizeof(float) * (size_t)(nt * nk));
    g.y = dev(NULL, sizeof(float) * (size_t)(nt * E));
    g.scratch = dev(NULL, sizeof(float) * moe_ffn_scratch_floats(&a));
    CK(cuda_moe_ffn(&g, 0));
    CK(cudaDeviceSynchronize());
    float *yg = host(g.y, sizeof(float) * (size_t)(nt * E));
    double dref = 0, rmax = 0, e2 = 0, r2 = 0;
    for (int64_t i = 0; i < nt * E; i++) {
        const double d = fabs((double)yg[i] - r[i]);
        if (!(d <= dref)) dref = isnan(d) ? INFINITY : d;
        if (fabs(r[i]) > rmax) rmax = fabs(r[i]);
        e2 += ((double)yg[i] - yc[i]) * ((double)yg[i] - yc[i]), r2 += r[i] * r[i];
    }
    const char *nm = quant_type(tg)->name, *nd = quant_type(td)->name;
    T_CHECK(dref <= 2e-4 * rmax, "moe_ffn %s/%s E=%lld F=%lld experts %d/%d nt=%d: max |gpu - f64| = %.3g (max %.3g)",
            nm, nd, (long long)E, (long long)F, nk, ne, nt, dref, rmax);
    if (tg == INFER_TYPE_F32 && td == INFER_TYPE_F32) {
        const double dc = max_diff(yg, yc, nt * E, NULL);
        T_CHECK(dc <= 2e-4 * rmax, "moe_ffn F32 E=%lld F=%lld nt=%d: max |gpu - cpu| = %.3g", (long long)E, (long long)F,
                nt, dc);
    } else {
        T_CHECK(e2 <= 1e-3 * r2, "moe_ffn %s/%s E=%lld F=%lld nt=%d: NMSE gpu vs cpu %.3g", nm, nd, (long long)E,
                (long long)F, nt, r2 > 0 ? e2 / r2 : e2);
    }
    cudaFree((void *)g.gate), cudaFree((void *)g.up), cudaFree((void *)g.down), cudaFree((void *)g.x);
    cudaFree((void *)g.ids), cudaFree((void *)g.weights), cudaFree(g.y), cudaFree(g.scratch);
    free(gate), free(up), free(down), free(x), free(w), free(yc), free(ids), free(r), free(yg);
}

static void test_moe(void) {
    route_case(1, 8, 2, 1, 0);      /* decode, qwen-like */
    route_case(5, 128, 8, 1, 0);    /* qwen3moe shape, batch */
    route_case(3, 60, 4, 0, 0);     /* no renormalisation, a partial lane row */
    route_case(2, 512, 32, 1, 0);   /* the limits */
    route_case(4, 40, 6, 1, 1);     /* equal logits: lower id first */
    ffn_case(INFER_TYPE_F32, INFER_TYPE_F32, 96, 40, 4, 2, 1);     /* exact float math vs the CPU; tails */
    ffn_case(INFER_TYPE_F16, INFER_TYPE_F16, 128, 64, 6, 3, 2);
    ffn_case(INFER_TYPE_Q8_0, INFER_TYPE_Q8_0, 256, 96, 8, 2, 1);
    ffn_case(INFER_TYPE_Q4_K, INFER_TYPE_Q6_K, 512, 256, 8, 4, 3); /* the usual K-quant mix */
    ffn_case(INFER_TYPE_IQ4_XS, INFER_TYPE_Q5_K, 256, 512, 4, 2, 2);
    ffn_case(INFER_TYPE_Q4_0, INFER_TYPE_IQ4_NL, 320, 160, 5, 5, 4); /* every expert used, 32-blocks */

    struct moe_ffn_args bad = {0};
    bad.type_gate_up = INFER_TYPE_Q4_K, bad.type_down = INFER_TYPE_Q4_K, bad.n_embd = 128, bad.n_ff = 256;
    T_CHECK(cuda_moe_ffn(&bad, 0) == cudaErrorInvalidValue, "moe_ffn: missing pointers / a row off the block size");
    struct moe_route_args rb = {0};
    rb.n_tokens = 1, rb.n_expert = 1024, rb.n_expert_used = 8;
    T_CHECK(cuda_moe_route(&rb, 0) == cudaErrorInvalidValue, "moe_route: 1024 experts is an error");
}

int main(void) {
    const char *why = NULL;
    if (device_count(&why) == 0) {
        T_SKIP("no CUDA device: attn: %s", why);
        T_SKIP("no CUDA device: ssm_conv: %s", why);
        T_SKIP("no CUDA device: gdn: %s", why);
        T_SKIP("no CUDA device: moe: %s", why);
        return t_done();
    }
    test_attn();
    test_ssm_conv();
    test_gdn();
    test_moe();
    cudaGetLastError();
    return t_done();
}

#else
int main(void) {
    T_SKIP("no CUDA device: built without CUDA");
    return t_done();
}
#endif
