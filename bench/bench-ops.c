/* bench-ops: per-kernel speed on the local GPU, as a roofline table.
 *
 * First the denominator: device-to-device copy bandwidth (bytes read + written per second), measured
 * here, in this run, by infer_device_bandwidth's copy kernel (llm-bench's roofline uses the same). Then each op and variant at real model shapes: median µs over many replays
 * (CUDA events; inputs rotated across enough copies to defeat the 50 MB L2), GB/s from <op>_cost(),
 * and % of the copy bandwidth. Never part of `make test`.
 * mm (prefill, compute-bound) reports TFLOPS for both cuda_mm modes instead.
 * gdn: the fused Gated DeltaNet decode against the time to read and write its state once; multi: mmv_multi against
 * its products launched one by one. -t selects mmv's and mm's type.
 *   bench-ops [-o mmv,mm,gdn,multi] [-t TYPE] [-r REPEATS]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "kernels.h"
#include "quant.h"

#ifndef INFER_CUDA
int main(void) {
    printf("SKIP (built without CUDA)\n");
    return 77;
}
#else

#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "bench-ops: %s: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__);   \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Random valid blocks: random bytes with every f16 scale field replaced by a small finite value. */
static void fill_random_weights(int32_t type, uint8_t *dst, int64_t n_in, int64_t n_out) {
    const int64_t row = (int64_t)quant_row_bytes(type, n_in);
    float *tmp = malloc(sizeof(float) * (size_t)n_in);
    for (int64_t c = 0; c < n_in; c++) tmp[c] = ((float)(rnd() % 2001) - 1000.0f) * 1e-5f;
    /* note: quantising one random row and reusing it with perturbed bytes keeps setup fast for GB-sized
     * matrices; content does not change the speed of these kernels (no data-dependent branches). */
    if (quant_quantize_row(type, tmp, dst, n_in) != INFER_OK) {
        fprintf(stderr, "bench-ops: cannot quantise %s\n", quant_type(type)->name);
        exit(1);
    }
    for (int64_t r = 1; r < n_out; r++) memcpy(dst + r * row, dst, (size_t)row);
    free(tmp);
}

static float time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/* A device buffer of n floats, uniform in [-scale, scale]. */
static float *dev_random(size_t n, float scale) {
    float *h = malloc(sizeof(float) * n), *d;
    for (size_t i = 0; i < n; i++) h[i] = scale * (((float)(rnd() % 2001) - 1000.0f) / 1000.0f);
    CK(cudaMalloc((void **)&d, sizeof(float) * n));
    CK(cudaMemcpy(d, h, sizeof(float) * n, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* The median of 5 timed groups of `repeats` calls of launch(it, arg) (one warm-up group first), in us a call. */
static double time_group(int repeats, void (*launch)(int it, void *arg), void *arg) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float ms[5];
    for (int g = -1; g < 5; g++) {
        CK(cudaEventRecord(e0, 0));
        for (int it = 0; it < repeats; it++) launch(it, arg);
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (g >= 0) ms[g] = time_ms(e0, e1) / (float)repeats;
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    qsort(ms, 5, sizeof(float), cmp_float);
    return ms[2] * 1e3;
}

struct shape {
    const char *what;
    int64_t n_in, n_out;
};

/* mmv over rotating copies of one matrix: call it fills the copy's weights in. */
struct mmv_bench {
    struct mmv_args a;
    const uint8_t *w;
    size_t bytes;
    int copies;
};

static void mmv_launch(int it, void *arg) {
    const struct mmv_bench *b = arg;
    struct mmv_args a = b->a;
    a.w = b->w + b->bytes * (size_t)(it % b->copies);
    CK(cuda_mmv(&a, 0));
}

static void bench_mmv(double bw, int repeats, int32_t only_type) {
    static const int32_t types[] = {INFER_TYPE_Q4_K, INFER_TYPE_Q5_K, INFER_TYPE_Q6_K, INFER_TYPE_Q8_0,
                                    INFER_TYPE_Q4_0, INFER_TYPE_IQ4_NL, INFER_TYPE_IQ4_XS, INFER_TYPE_F16,
                                    INFER_TYPE_BF16};
    static const struct shape shapes[] = {
        {"8B attn_q", 4096, 4096}, {"8B ffn_up", 4096, 14336}, {"8B ffn_down", 14336, 4096}, {"0.6B ffn_up", 1024, 3072}};
    static const int tokens[] = {1, 4, 8};
    printf("| op | type | shape | n_in x n_out | tokens | us | GB/s | %% of copy |\n|---|---|---|---|---|---|---|---|\n");
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int32_t type = types[ti];
            const struct shape sh = shapes[si];
            if (only_type >= 0 && type != only_type) continue;
            const size_t wbytes = quant_row_bytes(type, sh.n_in) * (size_t)sh.n_out;
            /* enough copies of W to exceed L2 several times over */
            const int copies = (int)(wbytes > ((size_t)400 << 20) ? 1 : ((size_t)400 << 20) / wbytes + 1);
            uint8_t *hw = malloc(wbytes);
            fill_random_weights(type, hw, sh.n_in, sh.n_out);
            uint8_t *dw;
            CK(cudaMalloc((void **)&dw, wbytes * (size_t)copies));
            for (int c = 0; c < copies; c++) CK(cudaMemcpy(dw + wbytes * (size_t)c, hw, wbytes, cudaMemcpyHostToDevice));
            free(hw);
            float *dx, *dy;
            void *dxq;
            CK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)sh.n_in * MMV_MAX_TOKENS));
            CK(cudaMalloc((void **)&dy, sizeof(float) * (size_t)sh.n_out * MMV_MAX_TOKENS));
            CK(cudaMalloc(&dxq, q8_split_bytes(sh.n_in, MMV_MAX_TOKENS)));
            CK(cudaMemset(dx, 0, sizeof(float) * (size_t)sh.n_in * MMV_MAX_TOKENS));
            for (size_t k = 0; k < sizeof tokens / sizeof *tokens; k++) {
                const int nt = tokens[k];
                struct quantize_args qa = {INFER_TYPE_Q8_1, dx, dxq, sh.n_in, nt, sh.n_in};
                CK(cuda_quantize(&qa, 0));
                /* note: back-to-back launches over rotating weight copies, timed as a group: the
                 * figure is throughput as inside a forward pass (launch latency overlapped), not the
                 * latency of one isolated launch. */
                struct mmv_bench b = {.a = {.type = type, .n_in = sh.n_in, .n_out = sh.n_out, .n_tokens = nt,
                                            .xq = dxq, .x = dx, .y = dy, .epilogue = MMV_PLAIN},
                                      .w = dw, .bytes = wbytes, .copies = copies};
                const double us = time_group(repeats, mmv_launch, &b);
                struct mmv_args ca = {0};
                ca.type = type, ca.n_in = sh.n_in, ca.n_out = sh.n_out, ca.n_tokens = nt, ca.epilogue = MMV_PLAIN;
                const struct op_cost cost = mmv_cost(&ca);
                const double bytes = cost.bytes_read + cost.bytes_written;
                printf("| mmv | %s | %s | %lld x %lld | %d | %.2f | %.0f | %.1f |\n", quant_type(type)->name, sh.what,
                       (long long)sh.n_in, (long long)sh.n_out, nt, us, bytes / us / 1e3, 100.0 * bytes / us / 1e3 / bw);
                fflush(stdout);
            }
            CK(cudaFree(dw));
            CK(cudaFree(dx));
            CK(cudaFree(dy));
            CK(cudaFree(dxq));
        }
    }
}

struct mm_bench {
    struct mm_args a;
    struct cuda_mm_state *st;
};

static void mm_launch(int it, void *arg) {
    (void)it;
    const struct mm_bench *b = arg;
    CK(cuda_mm(&b->a, b->st, 0));
}

/* mm (prefill): both modes of cuda_mm (INFER_MATMUL=mma, the tensor-core kernel; =cublas, the
 * dequantise + cublasGemmEx baseline) at 8B shapes; compute-bound, so the figure is TFLOPS. */
static void bench_mm(int repeats, int32_t only_type) {
    static const int32_t types[] = {INFER_TYPE_Q4_K, INFER_TYPE_Q6_K, INFER_TYPE_Q8_0, INFER_TYPE_IQ4_XS, INFER_TYPE_F16};
    static const struct shape shapes[] = {{"8B attn_q", 4096, 4096}, {"8B ffn_up", 4096, 14336}, {"8B ffn_down", 14336, 4096}};
    static const int tokens[] = {64, 512};
    static const char *modes[] = {"mma", "cublas"};
    struct cuda_mm_state *st[2];
    for (int m = 0; m < 2; m++) {
        setenv("INFER_MATMUL", modes[m], 1);
        CK(cuda_mm_state_create(&st[m]));
    }
    unsetenv("INFER_MATMUL");
    const int reps = repeats / 10 > 3 ? repeats / 10 : 3;
    printf("\n| op | mode | type | shape | n_in x n_out | tokens | us | TFLOPS |\n|---|---|---|---|---|---|---|---|\n");
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const int32_t type = types[ti];
            const struct shape sh = shapes[si];
            if (only_type >= 0 && type != only_type) continue;
            const size_t wbytes = quant_row_bytes(type, sh.n_in) * (size_t)sh.n_out;
            uint8_t *hw = malloc(wbytes), *dw;
            fill_random_weights(type, hw, sh.n_in, sh.n_out);
            CK(cudaMalloc((void **)&dw, wbytes));
            CK(cudaMemcpy(dw, hw, wbytes, cudaMemcpyHostToDevice));
            free(hw);
            float *dx, *dy;
            CK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)sh.n_in * 512));
            CK(cudaMalloc((void **)&dy, sizeof(float) * (size_t)sh.n_out * 512));
            CK(cudaMemset(dx, 0, sizeof(float) * (size_t)sh.n_in * 512));
            for (size_t k = 0; k < sizeof tokens / sizeof *tokens; k++)
                for (int m = 0; m < 2; m++) {
                    struct mm_bench b = {.a = {.type = type, .w = dw, .n_in = sh.n_in, .n_out = sh.n_out,
                                               .n_tokens = tokens[k], .x = dx, .y = dy, .epilogue = MMV_PLAIN},
                                         .st = st[m]};
                    const double us = time_group(reps, mm_launch, &b);
                    const double flops = 2.0 * (double)sh.n_in * (double)sh.n_out * tokens[k];
                    printf("| mm | %s | %s | %s | %lld x %lld | %d | %.1f | %.1f |\n", modes[m], quant_type(type)->name,
                           sh.what, (long long)sh.n_in, (long long)sh.n_out, tokens[k], us, flops / us / 1e6);
                    fflush(stdout);
                }
            CK(cudaFree(dw));
            CK(cudaFree(dx));
            CK(cudaFree(dy));
        }
    }
    cuda_mm_state_free(st[0]);
    cuda_mm_state_free(st[1]);
}

/* ---- gdn_conv: the fused Gated DeltaNet decode of one layer (conv, norms, gates, state update, output norm) at
 * the Qwen3.5 shapes. Issue 13's goal is one decode call within 1.2x the time to read and write the layer's
 * recurrent state once at the copy bandwidth: the "x state" column. Rows with a ring are an MTP verification run
 * (every token's state also goes to its snapshot slot, counted in the bytes). ---- */
struct gdn_bench {
    struct gdn_conv_args a;
    int copies;
    size_t state_floats, conv_floats, snap_floats, csnap_floats;
    float *state, *conv_state, *snap, *csnap;
};

static void gdn_launch(int it, void *arg) {
    struct gdn_bench *b = arg;
    struct gdn_conv_args a = b->a;
    const size_t c = (size_t)(it % b->copies);
    a.gdn.state = b->state + c * b->state_floats;
    a.conv.state = b->conv_state + c * b->conv_floats;
    if (a.gdn.snap) a.gdn.snap = b->snap + c * b->snap_floats;
    if (a.conv.snap) a.conv.snap = b->csnap + c * b->csnap_floats;
    CK(cuda_gdn_conv(&a, 0));
}

static void bench_gdn(double bw, int repeats) {
    static const struct {
        const char *what;
        int32_t n_group, n_vhead, d;
    } shapes[] = {{"0.8B", 16, 16, 128}, {"9B, 35B-A3B", 16, 32, 128}, {"27B", 16, 48, 128}};
    static const struct {
        int32_t tokens, ring;
    } runs[] = {{1, 0}, {1, 4}, {4, 4}};
    const int32_t d_conv = 4;
    printf("\n| op | shape | n_group x n_vhead x d | tokens | ring | us | GB/s | %% of copy | state r+w us | "
           "x state |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int32_t ng = shapes[si].n_group, nv = shapes[si].n_vhead, d = shapes[si].d;
        const int64_t n_ch = (int64_t)(2 * ng + nv) * d, vd = (int64_t)nv * d;
        for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ri++) {
            const int32_t nt = runs[ri].tokens, ring = runs[ri].ring;
            struct gdn_bench b = {.state_floats = (size_t)nv * d * d,
                                  .conv_floats = (size_t)ssm_conv_ring(d_conv) * (size_t)n_ch};
            b.snap_floats = (size_t)ring * b.state_floats;
            b.csnap_floats = (size_t)ring * (size_t)(d_conv - 1) * (size_t)n_ch;
            const size_t per_copy = sizeof(float) * (b.state_floats + b.conv_floats + b.snap_floats + b.csnap_floats);
            b.copies = (int)(((size_t)400 << 20) / per_copy + 1); /* past the L2 several times over */
            b.state = dev_random(b.state_floats * (size_t)b.copies, 0.05f);
            b.conv_state = dev_random(b.conv_floats * (size_t)b.copies, 1.0f);
            b.snap = ring ? dev_random(b.snap_floats * (size_t)b.copies, 0.0f) : NULL;
            b.csnap = ring ? dev_random(b.csnap_floats * (size_t)b.copies, 0.0f) : NULL;
            float *x = dev_random((size_t)nt * (size_t)n_ch, 1.0f), *ab = dev_random(2 * (size_t)nt * nv, 1.0f);
            float *dt_bias = dev_random((size_t)nv, 0.5f), *ssm_a = dev_random((size_t)nv, 0.0f); /* no decay */
            float *w = dev_random((size_t)n_ch * d_conv, 0.5f), *out = dev_random((size_t)nt * vd, 0.0f);
            float *norm_w = dev_random((size_t)d, 1.0f), *gate = dev_random((size_t)nt * vd, 1.0f);
            uint32_t *done;
            int32_t *pos;
            CK(cudaMalloc((void **)&done, sizeof(uint32_t) * (size_t)nv));
            CK(cudaMemset(done, 0, sizeof(uint32_t) * (size_t)nv));
            CK(cudaMalloc((void **)&pos, sizeof(int32_t)));
            CK(cudaMemset(pos, 0, sizeof(int32_t)));
            b.a = (struct gdn_conv_args){
                .conv = {.x = x, .w = w, .n_ch = n_ch, .x_stride = n_ch, .n_tokens = nt, .d_conv = d_conv,
                         .snap = b.csnap, .snap_stride = (int64_t)(d_conv - 1) * n_ch, .snap_ring = ring, .pos = pos},
                .gdn = {.a = ab + nv, .b = ab, .dt_bias = dt_bias, .ssm_a = ssm_a, .out = out, .n_tokens = nt,
                        .n_group = ng, .n_vhead = nv, .d_state = d, .qk_stride = n_ch, .v_stride = n_ch,
                        .ab_stride = 2 * nv, .eps = 1e-6f, .variant = GDN_AUTO, .snap = b.snap,
                        .snap_stride = (int64_t)b.state_floats, .snap_ring = ring},
                .norm_w = norm_w, .norm_gate = gate, .norm_eps = 1e-6f, .norm_done = done};
            const double us = time_group(repeats, gdn_launch, &b);
            const struct op_cost cost = gdn_cost(&b.a.gdn);
            const double state_bytes = sizeof(float) * (double)b.state_floats;
            const double bytes = cost.bytes_read + cost.bytes_written + (ring ? nt * state_bytes : 0);
            const double state_us = 2.0 * state_bytes / (bw * 1e3); /* bw in GB/s: bytes / (bw * 1e3) is us */
            printf("| gdn_conv | %s | %d x %d x %d | %d | %d | %.2f | %.0f | %.1f | %.2f | %.2f |\n", shapes[si].what,
                   ng, nv, d, nt, ring, us, bytes / us / 1e3, 100.0 * bytes / us / 1e3 / bw, state_us, us / state_us);
            fflush(stdout);
            float *bufs[] = {b.state, b.conv_state, b.snap, b.csnap, x, ab, dt_bias, ssm_a, w, out, norm_w, gate};
            for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) CK(cudaFree(bufs[i]));
            CK(cudaFree(done));
            CK(cudaFree(pos));
        }
    }
}

/* ---- mmv_multi: the products of one normed input in one launch, against the same products launched one after
 * another, at the Qwen3.6-27B shapes with Q4_K_M's types (llama-quantize gives attn_qkv / attn_v Q6_K on some
 * layers). ---- */
struct multi_bench {
    struct mmv_multi_args m;
    const uint8_t *w[MMV_MULTI_MAX]; /* each part's first copy */
    size_t copy_bytes[MMV_MULTI_MAX];
    int copies, separate;
};

static void multi_launch(int it, void *arg) {
    struct multi_bench *b = arg;
    struct mmv_multi_args m = b->m;
    for (int32_t i = 0; i < m.n; i++) m.p[i].w = b->w[i] + b->copy_bytes[i] * (size_t)(it % b->copies);
    if (!b->separate) {
        CK(cuda_mmv_multi(&m, 0));
        return;
    }
    for (int32_t i = 0; i < m.n; i++) CK(cuda_mmv(&m.p[i], 0));
}

static void bench_multi(double bw, int repeats) {
    static const struct {
        const char *what;
        int32_t n;
        int32_t type[MMV_MULTI_MAX];
        int64_t n_out[MMV_MULTI_MAX];
    } cases[] = {
        {"27B GDN in: qkv z beta alpha", 4, {INFER_TYPE_Q4_K, INFER_TYPE_Q4_K, INFER_TYPE_Q4_K, INFER_TYPE_Q4_K},
         {10240, 6144, 48, 48}},
        {"27B GDN in, qkv Q6_K", 4, {INFER_TYPE_Q6_K, INFER_TYPE_Q4_K, INFER_TYPE_Q4_K, INFER_TYPE_Q4_K},
         {10240, 6144, 48, 48}},
        {"27B attn in: q+gate k v", 3, {INFER_TYPE_Q4_K, INFER_TYPE_Q4_K, INFER_TYPE_Q6_K}, {12288, 1024, 1024}},
    };
    static const int tokens[] = {1, 4};
    const int64_t n_in = 5120;
    printf("\n| op | products | types | tokens | us | GB/s | %% of copy |\n|---|---|---|---|---|---|---|\n");
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        struct multi_bench b = {.m = {.n = cases[ci].n}};
        size_t total = 0, out_floats = 0;
        for (int32_t i = 0; i < b.m.n; i++) {
            b.copy_bytes[i] = quant_row_bytes(cases[ci].type[i], n_in) * (size_t)cases[ci].n_out[i];
            total += b.copy_bytes[i];
            out_floats += (size_t)cases[ci].n_out[i];
        }
        b.copies = (int)(((size_t)400 << 20) / total + 1);
        char types[64] = "";
        float *dx = dev_random((size_t)n_in * MMV_MAX_TOKENS, 1.0f);
        float *dy = dev_random(out_floats * MMV_MAX_TOKENS, 0.0f);
        void *dxq;
        CK(cudaMalloc(&dxq, q8_split_bytes(n_in, MMV_MAX_TOKENS)));
        for (int32_t i = 0, y = 0; i < b.m.n; y += (int32_t)cases[ci].n_out[i] * MMV_MAX_TOKENS, i++) {
            const int32_t type = cases[ci].type[i];
            uint8_t *hw = malloc(b.copy_bytes[i]), *dw;
            fill_random_weights(type, hw, n_in, cases[ci].n_out[i]);
            CK(cudaMalloc((void **)&dw, b.copy_bytes[i] * (size_t)b.copies));
            for (int c = 0; c < b.copies; c++)
                CK(cudaMemcpy(dw + b.copy_bytes[i] * (size_t)c, hw, b.copy_bytes[i], cudaMemcpyHostToDevice));
            free(hw);
            b.w[i] = dw;
            b.m.p[i] = (struct mmv_args){.type = type, .n_in = n_in, .n_out = cases[ci].n_out[i], .xq = dxq, .x = dx,
                                         .y = dy + y, .epilogue = MMV_PLAIN};
            snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s", i ? " " : "", quant_type(type)->name);
        }
        for (size_t k = 0; k < sizeof tokens / sizeof *tokens; k++) {
            const int nt = tokens[k];
            struct quantize_args qa = {.type = INFER_TYPE_Q8_1, .x = dx, .y = dxq, .n = n_in, .n_rows = nt,
                                       .x_stride = n_in};
            CK(cuda_quantize(&qa, 0));
            double bytes = 0;
            for (int32_t i = 0; i < b.m.n; i++) {
                b.m.p[i].n_tokens = nt;
                const struct op_cost cost = mmv_cost(&b.m.p[i]);
                bytes += cost.bytes_read + cost.bytes_written;
            }
            for (b.separate = 0; b.separate < 2; b.separate++) {
                const double us = time_group(repeats, multi_launch, &b);
                printf("| %s | %s | %s | %d | %.2f | %.0f | %.1f |\n", b.separate ? "mmv x n" : "mmv_multi",
                       cases[ci].what, types, nt, us, bytes / us / 1e3, 100.0 * bytes / us / 1e3 / bw);
                fflush(stdout);
            }
        }
        for (int32_t i = 0; i < b.m.n; i++) CK(cudaFree((void *)b.w[i]));
        CK(cudaFree(dx));
        CK(cudaFree(dy));
        CK(cudaFree(dxq));
    }
}

/* ops is a comma-separated list of mmv, mm, gdn, multi */
static int has_op(const char *ops, const char *op) {
    const size_t n = strlen(op);
    for (const char *p = ops; (p = strstr(p, op)) != NULL; p += n)
        if ((p == ops || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int repeats = 100;
    const char *ops = "mmv";
    int32_t only_type = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) ops = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            if ((only_type = quant_type_by_name(argv[++i])) < 0) {
                fprintf(stderr, "bench-ops: unknown type %s\n", argv[i]);
                return 2;
            }
        }
        else {
            fprintf(stderr, "usage: bench-ops [-o mmv,mm,gdn,multi] [-t TYPE] [-r REPEATS]\n");
            return 2;
        }
    }
    if (repeats < 1) repeats = 1;
    const char *why = NULL;
    if (device_count(&why) == 0) {
        printf("SKIP (no CUDA device: %s)\n", why);
        return 77;
    }
    char name[256];
    size_t mem = 0;
    if (device_describe(0, name, sizeof name, &mem) != INFER_OK) return 1;
    double bw = 0; /* the same copy-kernel probe as llm-bench's roofline, so both tools share a denominator */
    if (infer_device_bandwidth(0, &bw) != INFER_OK) {
        fprintf(stderr, "bench-ops: %s\n", infer_last_error());
        return 1;
    }
    bw /= 1e9;
    printf("device: %s, %.1f GiB; copy kernel bandwidth (read + write): %.0f GB/s\n\n", name, (double)mem / (1 << 30),
           bw);
    if (has_op(ops, "mmv")) bench_mmv(bw, repeats, only_type);
    if (has_op(ops, "mm")) bench_mm(repeats, only_type);
    if (has_op(ops, "gdn")) bench_gdn(bw, repeats);
    if (has_op(ops, "multi")) bench_multi(bw, repeats);
    return 0;
}
#endif
