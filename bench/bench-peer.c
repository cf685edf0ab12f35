/* bench-peer: llama.cpp's CPU or CUDA speed on a GGUF file, measured the way llama-bench measures it.
 *
 * The baseline our own benchmark is compared against: the same llama.cpp build the conformance
 * tests use as their oracle (the npm peer, bound at run time by tests/conformance/llama_peer), so no
 * second llama.cpp has to be built. Like llama-bench: one context (n_ctx = p + n, n_batch = n_ubatch
 * >= p, n_threads = n_threads_batch = -t), one warmup of each test, then r runs each starting from a
 * cleared KV cache (a fresh context where llama_memory_clear is missing):
 *   pp<p>: one llama_decode of p prompt tokens;  tg<n>: n single-token decodes.
 * Each run gives tokens/s; the row shows mean ± sample sd over the runs. Prints a llama-bench style
 * Markdown table to stdout and writes no files.
 * Usage: bench-peer -m MODEL [-p 512] [-n 128] [-r 5] [-t THREADS] [-fa -1|0|1] [-ngl N]
 *   (-p 0 or -n 0 skips that test; -fa: llama.cpp's flash attention, -1 = its default "auto")
 * -ngl N (default 0) is llama.cpp's n_gpu_layers, for the CUDA build of the same release
 * (@node-llama-cpp/linux-x64-cuda, see bench/gpu-peer-fetch.sh): with N > 0 llama.cpp must have found
 * a CUDA device (its libggml-cuda.so loaded), else bench-peer stops rather than time the CPU under a
 * CUDA label; the device is named on stderr and the backend column says "llama.cpp CUDA".
 * --cpu-moe is llama.cpp's flag of that name: every routed expert (the tensors "\.ffn_(up|down|gate)_exps"
 * finds) in the CPU's buffer type, the rest as -ngl says (backend column "llama.cpp CUDA cpu-moe"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tests/conformance/llama_peer.h"
#include "../tests/peer.h"

/* Entry points llama_peer does not bind (none travels a struct by value). */
struct bench_extra {
    int32_t (*model_desc)(const void *model, char *buf, size_t size);
    uint64_t (*model_size)(const void *model), (*model_n_params)(const void *model);
    void *(*get_memory)(const void *ctx);
    void (*memory_clear)(void *mem, bool data);
    void (*synchronize)(void *ctx);
    size_t (*dev_count)(void);
    void *(*dev_get)(size_t i);
    const char *(*dev_name)(void *dev), *(*dev_description)(void *dev);
    void *(*dev_by_type)(int type);      /* ggml_backend_dev_by_type (GGML_BACKEND_DEVICE_TYPE_CPU = 0) */
    void *(*dev_buffer_type)(void *dev); /* ggml_backend_dev_buffer_type */
};

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Token ids for the runs: spread over the vocabulary, deterministic (values do not change the speed). */
static int32_t bench_token(int i, int32_t n_vocab) {
    return (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)n_vocab);
}

struct bench_run {
    const struct llama_peer *pe;
    const struct bench_extra *ex;
    void *model;
    struct llama_peer_context_params cp;
    int32_t n_vocab;
};

/* Empties the KV cache of *ctx (or replaces the context when llama.cpp cannot clear it). 0 on failure. */
static int bench_reset(const struct bench_run *b, void **ctx) {
    if (b->ex->get_memory && b->ex->memory_clear) {
        b->ex->memory_clear(b->ex->get_memory(*ctx), true);
        return 1;
    }
    b->pe->ctx_free(*ctx);
    *ctx = b->pe->init_from_model(b->model, b->cp);
    return *ctx != NULL;
}

/* One timed run: p prompt tokens in one batch (p > 0) or n single-token decodes. Seconds, or -1. */
static double bench_once(const struct bench_run *b, void **ctx, int p, int n) {
    if (!bench_reset(b, ctx)) return -1;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(p > 0 ? p : 1));
    if (!tok) return -1;
    for (int i = 0; i < (p > 0 ? p : 1); i++)
        tok[i] = bench_token(i, b->n_vocab);
    double t0 = bench_now();
    int rc = 0;
    if (p > 0) rc = b->pe->decode(*ctx, b->pe->batch_get_one(tok, p));
    for (int i = 0; rc == 0 && i < n; i++) {
        tok[0] = bench_token(p + i + 1, b->n_vocab);
        rc = b->pe->decode(*ctx, b->pe->batch_get_one(tok, 1));
    }
    if (b->ex->synchronize) b->ex->synchronize(*ctx);
    double dt = bench_now() - t0;
    free(tok);
    return rc == 0 ? dt : -1;
}

/* Warmup plus r runs of one test; prints its row. 0 on failure. */
static int bench_test(const struct bench_run *b, void **ctx, const char *model_col, const char *backend,
                      int threads, int p, int n, int r) {
    if (bench_once(b, ctx, p, p > 0 ? 0 : 1) < 0) return 0; /* warmup: the pp batch, or 1 token */
    double sum = 0, sum2 = 0;
    const int n_tok = p > 0 ? p : n;
    for (int i = 0; i < r; i++) {
        double dt = bench_once(b, ctx, p, p > 0 ? 0 : n);
        if (dt <= 0) return 0;
        double ts = n_tok / dt;
        sum += ts, sum2 += ts * ts;
    }
    double mean = sum / r, var = r > 1 ? (sum2 - r * mean * mean) / (r - 1) : 0;
    char test[32];
    snprintf(test, sizeof test, "%s%d", p > 0 ? "pp" : "tg", n_tok);
    char tps[48];
    snprintf(tps, sizeof tps, "%.2f ± %.2f", mean, var > 0 ? sqrt(var) : 0.0);
    printf("%s %-14s | %7d | %15s | %20s |\n", model_col, backend, threads, test, tps);
    fflush(stdout);
    return 1;
}

static int bench_usage(void) {
    fprintf(stderr, "usage: bench-peer -m MODEL [-p 512] [-n 128] [-r 5] [-t THREADS] [-fa -1|0|1] [-ngl N] "
            "[--cpu-moe]\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int p = 512, n = 128, r = 5, fa = -1, ngl = 0, cpu_moe = 0;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu-moe")) {
            cpu_moe = 1;
            continue;
        }
        if (i + 1 >= argc) return bench_usage();
        const char *o = argv[i], *v = argv[++i];
        if (!strcmp(o, "-m"))
            path = v;
        else if (!strcmp(o, "-p"))
            p = atoi(v);
        else if (!strcmp(o, "-n"))
            n = atoi(v);
        else if (!strcmp(o, "-r"))
            r = atoi(v);
        else if (!strcmp(o, "-t"))
            threads = atoi(v);
        else if (!strcmp(o, "-fa"))
            fa = atoi(v);
        else if (!strcmp(o, "-ngl"))
            ngl = atoi(v);
        else
            return bench_usage();
    }
    if (!path || p < 0 || n < 0 || p + n == 0 || r < 1 || threads < 1 || fa < -1 || fa > 1 || ngl < 0)
        return bench_usage();

    struct llama_peer pe;
    const char *why = NULL;
    if (llama_peer_load(&pe, &why) != 1) {
        fprintf(stderr, "bench-peer: llama.cpp peer: %s; INFER_PEER_DIR names its folder\n", why);
        return 1;
    }
    void *lib = peer_open("libllama.v0.5.0.so", &why);
    struct bench_extra ex = {0};
    *(void **)&ex.model_desc = peer_sym(lib, "llama_model_desc");
    *(void **)&ex.model_size = peer_sym(lib, "llama_model_size");
    *(void **)&ex.model_n_params = peer_sym(lib, "llama_model_n_params");
    *(void **)&ex.get_memory = peer_sym(lib, "llama_get_memory");
    *(void **)&ex.memory_clear = peer_sym(lib, "llama_memory_clear");
    *(void **)&ex.synchronize = peer_sym(lib, "llama_synchronize");
    *(void **)&ex.dev_count = peer_sym(peer_open("libggml.v0.5.0.so", &why), "ggml_backend_dev_count");
    *(void **)&ex.dev_get = peer_sym(peer_open("libggml.v0.5.0.so", &why), "ggml_backend_dev_get");
    *(void **)&ex.dev_name = peer_sym(peer_open("libggml-base.so", &why), "ggml_backend_dev_name");
    *(void **)&ex.dev_description = peer_sym(peer_open("libggml-base.so", &why), "ggml_backend_dev_description");
    if (ngl > 0) { /* llama.cpp quietly runs on the CPU when its CUDA backend did not load: refuse instead */
        void *cuda = NULL;
        for (size_t i = 0; ex.dev_count && ex.dev_get && ex.dev_name && i < ex.dev_count() && !cuda; i++)
            if (!strncmp(ex.dev_name(ex.dev_get(i)), "CUDA", 4)) cuda = ex.dev_get(i);
        if (!cuda) {
            const char *cwhy = "no libggml-cuda.so beside libllama (the CPU build of the peer?)";
            if (peer_bin_dir()) peer_open("libggml-cuda.so", &cwhy);
            fprintf(stderr, "bench-peer: -ngl %d: llama.cpp found no CUDA device (%s)\n", ngl, cwhy);
            return 1;
        }
        fprintf(stderr, "bench-peer: llama.cpp device %s: %s\n", ex.dev_name(cuda),
                ex.dev_description ? ex.dev_description(cuda) : "?");
    }

    struct llama_peer_buft_override ot[2] = {{NULL, NULL}, {NULL, NULL}};
    if (cpu_moe) { /* llama.cpp's --cpu-moe: the experts in the CPU device's buffer type */
        *(void **)&ex.dev_by_type = peer_sym(peer_open("libggml.v0.5.0.so", &why), "ggml_backend_dev_by_type");
        *(void **)&ex.dev_buffer_type = peer_sym(peer_open("libggml-base.so", &why), "ggml_backend_dev_buffer_type");
        void *cpu = ex.dev_by_type ? ex.dev_by_type(0) : NULL;
        ot[0].pattern = "\\.ffn_(up|down|gate)_exps";
        ot[0].buft = cpu && ex.dev_buffer_type ? ex.dev_buffer_type(cpu) : NULL;
        if (!ot[0].buft) {
            fprintf(stderr, "bench-peer: --cpu-moe: llama.cpp's CPU buffer type not found\n");
            return 1;
        }
    }
    void *model = llama_peer_model_load_ngl(&pe, path, 0, ngl, cpu_moe ? ot : NULL, NULL, &why);
    if (!model) {
        fprintf(stderr, "bench-peer: %s: %s\n", path, why);
        return 1;
    }
    struct bench_run b = {&pe, &ex, model, pe.context_default_params(),
                          pe.vocab_n_tokens(pe.model_get_vocab(model))};
    b.cp.n_ctx = (uint32_t)(p + n + 1); /* + the tg warmup token is cleared before each run; 1 spare */
    b.cp.n_batch = b.cp.n_ubatch = (uint32_t)(p > 512 ? p : 512);
    b.cp.n_threads = b.cp.n_threads_batch = threads;
    b.cp.flash_attn_type = fa;
    void *ctx = pe.init_from_model(model, b.cp);
    if (!ctx) {
        fprintf(stderr, "bench-peer: llama.cpp could not create a context\n");
        pe.model_free(model);
        return 1;
    }

    /* model | size | params as llama-bench prints them */
    char desc[128] = "?", size[32] = "?", params[32] = "?", model_col[256];
    if (ex.model_desc) ex.model_desc(model, desc, sizeof desc);
    if (ex.model_size) {
        double s = (double)ex.model_size(model);
        if (s < 1024.0 * 1024 * 1024)
            snprintf(size, sizeof size, "%.2f MiB", s / (1024.0 * 1024));
        else
            snprintf(size, sizeof size, "%.2f GiB", s / (1024.0 * 1024 * 1024));
    }
    if (ex.model_n_params) {
        double q = (double)ex.model_n_params(model);
        if (q < 1e9)
            snprintf(params, sizeof params, "%.2f M", q / 1e6);
        else
            snprintf(params, sizeof params, "%.2f B", q / 1e9);
    }
    snprintf(model_col, sizeof model_col, "| %-30s | %10s | %10s |", desc, size, params);
    printf("| %-30s | %10s | %10s | %-14s | %7s | %15s | %20s |\n", "model", "size", "params", "backend",
           "threads", "test", "t/s");
    printf("| ------------------------------ | ---------: | ---------: | -------------- | ------: | "
           "--------------: | "
           "-------------------: |\n");
    const char *backend = ngl > 0 ? (cpu_moe ? "llama.cpp CUDA cpu-moe" : "llama.cpp CUDA") : "llama.cpp CPU";
    int ok = 1;
    if (p > 0) ok = bench_test(&b, &ctx, model_col, backend, threads, p, 0, r);
    if (ok && n > 0) ok = bench_test(&b, &ctx, model_col, backend, threads, 0, n, r);
    if (!ok) fprintf(stderr, "bench-peer: llama_decode failed\n");
    if (ctx) pe.ctx_free(ctx);
    pe.model_free(model);
    return ok ? 0 : 1;
}
