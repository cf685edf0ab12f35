/* bench-dots: our CPU dot products against llama.cpp's own (ggml_vec_dot_<t>_<partner> from the npm peer's
 * libggml-cpu for this CPU), on the same random weight rows and the same quantised activations, one thread.
 *
 * Per type: ROWS rows of 4096 values (256 rows stay in cache: the kernels' compute speed; -r 16384 streams them
 * from DRAM), the best of 10 passes each, alternating ours and ggml's so a shared machine's load hits both alike.
 *   bench-dots [-t q4_K,iq2_xxs] [-r ROWS] [-l LIB]   (LIB: the peer's libggml-cpu-<variant>.so, default
 *   sapphirerapids; INFER_PEER_DIR as the tests')
 * Never part of `make test`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu.h"
#include "quant.h"
#include "../tests/peer.h"
#include "../tests/randw.h"

typedef void (*ggml_dot)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);

static uint32_t seed = 1;
static uint32_t rnd(void) {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *types = "q8_0,q4_0,iq4_nl,mxfp4,q4_K,q6_K,iq4_xs,q2_K,q3_K,iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,"
                        "iq1_m,tq1_0,tq2_0";
    const char *lib = "libggml-cpu-sapphirerapids.so";
    int rows = 256;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-t")) types = argv[i + 1];
        else if (!strcmp(argv[i], "-r")) rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-l")) lib = argv[i + 1];
    }
    const char *why = "";
    void *h = peer_open(lib, &why);
    if (!h) {
        fprintf(stderr, "bench-dots: %s: %s\n", lib, why);
        return 1;
    }
    void (*init)(void) = (void (*)(void))peer_sym(h, "ggml_cpu_init");
    if (init) init(); /* the f16 tables ggml's dots read */
    const int n = 4096;
    float *xf = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) xf[i] = (float)((int)(rnd() % 2001) - 1000) / 1000.0f;
    printf("%-8s %6s %12s %8s %12s %8s %8s\n", "type", "rows", "ours us", "GB/s", "ggml us", "GB/s", "ggml/ours");
    char list[512];
    snprintf(list, sizeof list, "%s", types);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const int32_t t = quant_type_by_name(name), at = t >= 0 ? mmv_act_type_cpu(t) : -1;
        cpu_vec_dot_fn ours = t >= 0 ? cpu_vec_dot(t, CPU_ISA_BEST) : NULL;
        char sym[64];
        snprintf(sym, sizeof sym, "ggml_vec_dot_%s_%s", name,
                 at == INFER_TYPE_Q8_K ? "q8_K" : at == INFER_TYPE_Q8_1 ? "q8_1" : "q8_0");
        ggml_dot theirs = (ggml_dot)peer_sym(h, sym);
        if (!ours || !theirs || at < 0) {
            printf("%-8s skipped (%s)\n", name, !ours ? "no dot here" : "no such ggml symbol");
            continue;
        }
        const size_t rb = quant_row_bytes(t, n);
        uint8_t *w = malloc(rb * (size_t)rows), *xq = malloc(cpu_act_row_bytes(t, n));
        randw_weights(t, w, n, rows, rnd);
        quant_quantize_row(at, xf, xq, n);
        double best_o = 1e30, best_p = 1e30;
        volatile float sink = 0;
        for (int rep = 0; rep < 10; rep++) {
            const double t0 = now();
            for (int r = 0; r < rows; r++) sink += ours(n, w + (size_t)r * rb, xq);
            const double t1 = now();
            for (int r = 0; r < rows; r++) {
                float s;
                theirs(n, &s, 0, w + (size_t)r * rb, 0, xq, 0, 1);
                sink += s;
            }
            const double t2 = now();
            best_o = t1 - t0 < best_o ? t1 - t0 : best_o;
            best_p = t2 - t1 < best_p ? t2 - t1 : best_p;
        }
        const double gb = (double)rb * rows / 1e9;
        printf("%-8s %6d %12.1f %8.2f %12.1f %8.2f %8.2f\n", name, rows, best_o * 1e6, gb / best_o, best_p * 1e6,
               gb / best_p, best_p / best_o);
        free(w);
        free(xq);
    }
    free(xf);
    return 0;
}
