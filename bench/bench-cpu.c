/* bench-cpu: per-op throughput of the CPU backend (bench-ops.c is the GPU twin; they may merge).
 *
 * First the machine's copy bandwidth (memcpy of 256 MiB, the roofline denominator), then for each
 * weight type a decode-sized mmv (n_in x n_out, 1 token) on 1..N threads: µs per call, weight GB/s
 * and % of the copy bandwidth. Weights are random bits with sane scales (values do not matter for
 * speed); the weight set is larger than the last-level cache so every call streams from DRAM.
 * -l all also times every ISA level the CPU has (scalar, avx2, avx512vnni: cpu_vec_dot variants),
 * interleaved call by call so a shared machine's load hits them alike; -c keeps one weight matrix hot in
 * cache instead (the kernels' compute speed rather than DRAM's).
 * Usage: bench-cpu [-t q4_K,q8_0] [-n max_threads] [-s n_in,n_out] [-l all] [-c]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "backend.h"
#include "cpu/cpu.h"

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const struct { const char *name; int32_t id; double bpw; } bench_types[] = {
    {"f16", INFER_TYPE_F16, 16},  {"bf16", INFER_TYPE_BF16, 16}, {"q8_0", INFER_TYPE_Q8_0, 8.5},
    {"q4_0", INFER_TYPE_Q4_0, 4.5}, {"q4_K", INFER_TYPE_Q4_K, 4.5}, {"q5_K", INFER_TYPE_Q5_K, 5.5},
    {"q6_K", INFER_TYPE_Q6_K, 6.5625}, {"iq4_nl", INFER_TYPE_IQ4_NL, 4.5}, {"iq4_xs", INFER_TYPE_IQ4_XS, 4.25},
    {"q4_1", INFER_TYPE_Q4_1, 5},     {"q5_0", INFER_TYPE_Q5_0, 5.5},   {"q5_1", INFER_TYPE_Q5_1, 6},
    {"q2_K", INFER_TYPE_Q2_K, 2.625}, {"q3_K", INFER_TYPE_Q3_K, 3.4375}, {"mxfp4", INFER_TYPE_MXFP4, 4.25},
    {"iq2_xxs", INFER_TYPE_IQ2_XXS, 2.0625}, {"iq2_xs", INFER_TYPE_IQ2_XS, 2.3125}, {"iq2_s", INFER_TYPE_IQ2_S, 2.5625},
    {"iq3_xxs", INFER_TYPE_IQ3_XXS, 3.0625}, {"iq3_s", INFER_TYPE_IQ3_S, 3.4375}, {"iq1_s", INFER_TYPE_IQ1_S, 1.5625},
    {"iq1_m", INFER_TYPE_IQ1_M, 1.75},      {"tq1_0", INFER_TYPE_TQ1_0, 1.6875}, {"tq2_0", INFER_TYPE_TQ2_0, 2.0625},
};

static int bench_in(const char *list, const char *s) {
    if (!list) return 1;
    size_t n = strlen(s);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncasecmp(p, s, n) == 0) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *types = "q4_K,q6_K,q8_0";
    int max_threads = 2, all_levels = 0, hot = 0;
    int64_t n_in = 4096, n_out = 4096;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "-c")) {
            hot = 1;
            continue;
        }
        if (!strcmp(argv[i], "-l")) all_levels = !strcmp(v, "all");
        else if (!strcmp(argv[i], "-t")) types = v;
        else if (!strcmp(argv[i], "-n")) max_threads = atoi(v);
        else if (!strcmp(argv[i], "-s")) sscanf(v, "%lld,%lld", (long long *)&n_in, (long long *)&n_out);
        i++; /* the option's value */
    }
    size_t cb = (size_t)256 << 20;
    char *src = malloc(cb), *dst = malloc(cb);
    memset(src, 1, cb);
    memset(dst, 2, cb);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now();
        memcpy(dst, src, cb);
        double dt = bench_now() - t0;
        if (dt < best) best = dt;
    }
    double copy_gbs = 2.0 * cb / best / 1e9; /* read + write */
    free(src);
    free(dst);
    printf("cpu %s, memcpy %.1f GB/s (read+write), mmv %lldx%lld, 1 token, weights %s\n", cpu_isa(), copy_gbs,
           (long long)n_in, (long long)n_out, hot ? "hot in cache" : "streamed from DRAM");
    static const char *level_names[CPU_ISA_N] = {"best", "scalar", "avx2", "avx512", "amx"};
    int levels[CPU_ISA_N], n_levels = 0;
    levels[n_levels++] = CPU_ISA_BEST;
    for (int l = CPU_ISA_SCALAR; all_levels && l < CPU_ISA_N; l++)
        if (cpu_isa_has(l)) levels[n_levels++] = l;
    printf("%-8s %7s %-7s %10s %8s %9s\n", "type", "threads", "isa", "us/call", "GB/s", "%copy");
    for (size_t ti = 0; ti < sizeof bench_types / sizeof bench_types[0]; ti++) {
        if (!bench_in(types, bench_types[ti].name)) continue;
        int32_t t = bench_types[ti].id;
        size_t wbytes = (size_t)(n_in * n_out * bench_types[ti].bpw / 8);
        int n_mat = hot ? 1 : (int)((512u << 20) / wbytes) + 1; /* rotate over > 512 MiB: nothing stays cached */
        if (n_mat > 16) n_mat = 16;
        uint8_t **w = malloc(sizeof *w * n_mat);
        for (int m = 0; m < n_mat; m++) {
            w[m] = malloc(wbytes);
            for (size_t i = 0; i < wbytes; i++) w[m][i] = (uint8_t)(i * 2654435761u >> 13);
        }
        float *x = malloc(sizeof(float) * n_in), *y = malloc(sizeof(float) * n_out);
        for (int64_t i = 0; i < n_in; i++) x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
        void *xq = malloc(cpu_act_row_bytes(t, n_in));
        int32_t at = mmv_act_type_cpu(t);
        if (at >= 0) {
            struct quantize_args q = {at, x, xq, n_in, 1, n_in};
            cpu_quantize(&q, NULL);
        }
        for (int nth = 1; nth <= max_threads; nth++) {
            struct infer_backend *be;
            if (backend_cpu_create(nth, &be) != INFER_OK) return 1;
            /* round robin over the levels, one call each, until every level has had 1 s and 10 calls;
             * every call takes the next matrix, so no level finds its weights left in cache by another */
            int iters[CPU_ISA_N] = {0};
            double spent[CPU_ISA_N] = {0}, total = 0;
            for (int it = 0; total < 1.0 * n_levels || it < 10; it++) {
                total = 0;
                for (int k = 0; k < n_levels; k++) {
                    struct mmv_args a = {t, w[(it * n_levels + k) % n_mat], NULL, n_in, n_out, 1, xq, x, y, NULL, MMV_PLAIN, levels[k]};
                    double t0 = bench_now();
                    be->ops->mmv(be, &a);
                    spent[k] += bench_now() - t0;
                    iters[k]++;
                    total += spent[k];
                }
            }
            for (int k = 0; k < n_levels; k++) {
                double us = spent[k] / iters[k] * 1e6, gbs = wbytes / (spent[k] / iters[k]) / 1e9;
                printf("%-8s %7d %-7s %10.1f %8.2f %8.1f%%\n", bench_types[ti].name, nth, level_names[levels[k]], us, gbs,
                       100 * gbs / (copy_gbs / 2));
            }
            backend_free(be);
        }
        for (int m = 0; m < n_mat; m++) free(w[m]);
        free(w);
        free(x);
        free(y);
        free(xq);
    }
    return 0;
}
