/* bench-repack: one matrix x one token on one thread, as the file stores it (mmv.c's dots) and repacked into 16-row
 * strips (mm_r16.c), both from DRAM (a matrix of the given size, far above the caches) and from cache (a 1024 x 1024
 * one), plus the packing speed at load. The two products are checked equal bit for bit.
 *   bench-repack [-t TYPE] [-n N_IN] [-o N_OUT] [-r REPS]   (defaults: every repacked type, 1024, 151936, 10)
 * Weights are random bytes with each block's f16 scales set to a small normal value (the values do not matter
 * for speed; they are finite, so the equality check means something). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "cpu/mm_r16.h"
#include "quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* n_out rows of random blocks whose f16 scales (d, and dmin or m where there is one) are 2^-7 (MXFP4: 2^-1) */
static void *weights(int32_t type, int64_t n_in, int64_t n_out) {
    const size_t row = quant_row_bytes(type, n_in), bb = quant_row_bytes(type, quant_type(type)->blck);
    unsigned char *w = malloc(row * (size_t)n_out);
    if (!w) return NULL;
    unsigned s = 1;
    for (size_t i = 0; i < row * (size_t)n_out; i++) w[i] = (unsigned char)((s = s * 1103515245u + 12345u) >> 16);
    const int scale_at = type == INFER_TYPE_Q6_K ? 208 : type == INFER_TYPE_Q2_K ? 80 : type == INFER_TYPE_Q3_K ? 108 : 0;
    const int n_scales = type == INFER_TYPE_Q4_K || type == INFER_TYPE_Q5_K || type == INFER_TYPE_Q4_1 ||
                                 type == INFER_TYPE_Q5_1 || type == INFER_TYPE_Q2_K ? 2 : 1;
    for (size_t b = 0; b < row * (size_t)n_out / bb; b++) {
        if (type == INFER_TYPE_MXFP4) { /* one E8M0 byte */
            w[b * bb] = 127;
            continue;
        }
        for (int k = 0; k < n_scales; k++) {
            w[b * bb + (size_t)scale_at + 2 * (size_t)k] = 0x00;
            w[b * bb + (size_t)scale_at + 2 * (size_t)k + 1] = 0x20; /* 2^-7 */
        }
    }
    return w;
}

/* ms per product of the file's layout and of the strips; 0 when they differ */
static int run(int32_t type, int64_t n_in, int64_t n_out, int reps, int quiet) {
    void *w = weights(type, n_in, n_out);
    const size_t rb = cpu_r16_bytes(type, n_in, n_out), row = quant_row_bytes(type, n_in);
    void *r = malloc(rb);
    float *x = malloc(sizeof(float) * (size_t)n_in), *y0 = malloc(sizeof(float) * (size_t)n_out);
    float *y1 = malloc(sizeof(float) * (size_t)n_out);
    void *xq = malloc(cpu_act_row_bytes(type, n_in));
    if (!w || !r || !x || !y0 || !y1 || !xq) {
        fprintf(stderr, "bench-repack: out of memory\n");
        return 1;
    }
    memset(r, 0, rb);
    for (int64_t i = 0; i < n_in; i++) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    struct quantize_args qa = {.type = mmv_act_type_cpu(type), .x = x, .y = xq, .n = n_in, .n_rows = 1, .x_stride = n_in};
    double t0 = now();
    cpu_r16_pack(type, w, n_in, n_out, r);
    const double pack = now() - t0;
    struct mm_args a = {.type = type, .w = w, .n_in = n_in, .n_out = n_out, .n_tokens = 1, .xq = xq, .y = y0,
                        .epilogue = MMV_PLAIN};
    struct mm_args b = a;
    b.type = type | CPU_R16, b.w = r, b.y = y1;
    int rc = cpu_quantize(&qa, NULL) != INFER_OK || cpu_mm(&a, NULL) != INFER_OK || cpu_mm(&b, NULL) != INFER_OK;
    double tf = 0, tr = 0;
    for (int k = 0; k < reps && !rc; k++) { /* alternating, so that a slow spell of the machine hits both */
        t0 = now();
        cpu_mm(&a, NULL);
        tf += now() - t0;
        t0 = now();
        cpu_mm(&b, NULL);
        tr += now() - t0;
    }
    const int same = !rc && memcmp(y0, y1, sizeof(float) * (size_t)n_out) == 0;
    const double mb = (double)(row * (size_t)n_out) / 1e6;
    if (!quiet)
        printf("| %s | %lld x %lld | %.3f ms, %.1f GB/s | %.3f ms, %.1f GB/s | %.2fx | %.2f GB/s | %s |\n",
               quant_type(type)->name, (long long)n_out, (long long)n_in, tf / reps * 1e3, mb * reps / tf / 1e3,
               tr / reps * 1e3, mb * reps / tr / 1e3, tf / tr, mb / pack / 1e3, same ? "yes" : "NO");
    free(w), free(r), free(x), free(y0), free(y1), free(xq);
    return rc || !same;
}

int main(int argc, char **argv) {
    int32_t only = -1;
    int64_t n_in = 1024, n_out = 151936;
    int reps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) only = quant_type_by_name(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_in = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "-o")) n_out = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    }
    const int32_t types[] = {INFER_TYPE_Q8_0, INFER_TYPE_Q4_0,  INFER_TYPE_Q4_1, INFER_TYPE_Q5_0,  INFER_TYPE_Q5_1,
                             INFER_TYPE_IQ4_NL, INFER_TYPE_MXFP4, INFER_TYPE_Q2_K, INFER_TYPE_Q3_K, INFER_TYPE_Q4_K,
                             INFER_TYPE_Q5_K, INFER_TYPE_Q6_K, INFER_TYPE_IQ4_XS};
    printf("CPU ISA: %s; one thread, one token\n\n", cpu_isa());
    printf("| type | matrix | as stored | repacked | speed-up | packing | same bits |\n|---|---|---|---|---|---|---|\n");
    int bad = 0;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        if (only >= 0 && types[k] != only) continue;
        if (!cpu_r16_takes(types[k], n_in)) {
            printf("| %s | - | not repacked on this CPU (or INFER_CPU_ISA) | | | | |\n", quant_type(types[k])->name);
            continue;
        }
        bad |= run(types[k], n_in, n_out, reps, 0);
        bad |= run(types[k], 1024, 1024, 1, 1); /* warm the small one's pages */
        bad |= run(types[k], 1024, 1024, reps * 200, 0);
    }
    return bad;
}
