/* bench-ops: per-kernel speed on the local GPU, as a roofline table.
 *
 * First the denominator: device-to-device copy bandwidth (bytes read + written per second), measured
 * here, in this run, by infer_device_bandwidth's copy kernel (llm-bench's roofline uses the same). Then each op and variant at real model shapes: median µs over many replays
 * (CUDA events; inputs rotated across enough copies to defeat the 50 MB L2), GB/s from <op>_cost(),
 * and % of the copy bandwidth. Never part of `make test`.
 * mm (prefill, compute-bound) reports TFLOPS for both cuda_mm modes instead.
 *   bench-ops [-o mmv|mm|mmv,mm] [-t TYPE] [-r REPEATS]
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

struct shape {
    const char *what;
    int64_t n_in, n_out;
};

static void bench_mmv(double bw, int repeats, int32_t only_type) {
    static const int32_t types[] = {INFER_TYPE_Q4_K, INFER_TYPE_Q5_K, INFER_TYPE_Q6_K, INFER_TYPE_Q8_0,
                                    INFER_TYPE_Q4_0, INFER_TYPE_IQ4_NL, INFER_TYPE_IQ4_XS, INFER_TYPE_F16,
                                    INFER_TYPE_BF16};
    static const struct shape shapes[] = {
        {"8B attn_q", 4096, 4096}, {"8B ffn_up", 4096, 14336}, {"8B ffn_down", 14336, 4096}, {"0.6B ffn_up", 1024, 3072}};
    static const int tokens[] = {1, 4, 8};
    printf("| op | type | shape | n_in x n_out | tokens | us | GB/s | %% of copy |\n|---|---|---|---|---|---|---|---|\n");
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
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
                 * latency of one isolated launch. Median over 5 groups. */
                float ms[5];
                for (int g = -1; g < 5; g++) {
                    CK(cudaEventRecord(e0, 0));
                    for (int it = 0; it < repeats; it++) {
                        struct mmv_args a = {0};
                        a.type = type, a.w = dw + wbytes * (size_t)(it % copies), a.n_in = sh.n_in;
                        a.n_out = sh.n_out, a.n_tokens = nt, a.xq = dxq, a.x = dx, a.y = dy, a.epilogue = MMV_PLAIN;
                        CK(cuda_mmv(&a, 0));
                    }
                    CK(cudaEventRecord(e1, 0));
                    CK(cudaEventSynchronize(e1));
                    if (g >= 0) ms[g] = time_ms(e0, e1) / (float)repeats;
                }
                qsort(ms, 5, sizeof(float), cmp_float);
                const double us = ms[2] * 1e3;
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
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
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
                    struct mm_args a = {0};
                    a.type = type, a.w = dw, a.n_in = sh.n_in, a.n_out = sh.n_out, a.n_tokens = tokens[k];
                    a.x = dx, a.y = dy, a.epilogue = MMV_PLAIN;
                    float ms[5];
                    for (int g = -1; g < 5; g++) {
                        CK(cudaEventRecord(e0, 0));
                        for (int it = 0; it < reps; it++) CK(cuda_mm(&a, st[m], 0));
                        CK(cudaEventRecord(e1, 0));
                        CK(cudaEventSynchronize(e1));
                        if (g >= 0) ms[g] = time_ms(e0, e1) / (float)reps;
                    }
                    qsort(ms, 5, sizeof(float), cmp_float);
                    const double us = ms[2] * 1e3, flops = 2.0 * (double)sh.n_in * (double)sh.n_out * tokens[k];
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

/* ops is a comma-separated list: "mmv", "mm", "mmv,mm" */
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
            fprintf(stderr, "usage: bench-ops [-o mmv|mm|mmv,mm] [-t TYPE] [-r REPEATS]\n");
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
    return 0;
}
#endif
