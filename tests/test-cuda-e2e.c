/* test-cuda-e2e: whole models on the GPU (n_gpu_layers 99) against the same files on the CPU.
 *
 * On any machine:
 *   - a split of layers between GPU and CPU is refused (INFER_E_UNSUPPORTED) before any device work;
 *   - without a usable device, n_gpu_layers 99 is INFER_E_DEVICE with a message naming CUDA;
 *   - weights that do not fit in the device's free memory are INFER_E_OOM with both byte counts
 *     (model_upload against a stand-in backend that reports 64 MiB free), and nothing is allocated.
 * On a device, for llama, qwen3, qwen3moe, qwen35, qwen35moe and qwen3next in F32, Q8_0 and Q4_K_M:
 *   - a 40-token prompt in one batch (every row asked: the mm path), then 12 single-token decode steps
 *     (mmv, CUDA graphs replayed), then a 3-token batch (the verification shape): every logits row
 *     against the CPU context fed the same tokens. Bounds (relative L2 per row): F32 2e-3 (the GPU's
 *     prefill product rounds activations to f16), quantised 5e-2 (the CPU pairs K-quants with Q8_K
 *     activations per 256 values, the GPU with Q8_1 per 32, so the two roundings differ), and the
 *     argmax of at least 90% of rows the same; broken kernels give errors of order 1;
 *   - graphs change nothing: decode logits with graphs and with INFER_CUDA_GRAPHS=0 are bit-identical;
 *   - two sequences decoded in one batch (the graph key includes the sequence of each token) match
 *     the CPU;
 *   - infer_sample on the device picks what infer_sampler_sample picks from the downloaded logits.
 * Without a device the GPU part prints SKIP (no CUDA device) and the test exits 77 after the checks
 * above have passed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "model.h"
#include "t.h"

enum { N_PROMPT = 40, N_DECODE = 12, N_VERIFY = 3, N_CTX = 128 };

static char dir[] = "/tmp/test-cuda-e2e-XXXXXX";

static const char *synth_file(const char *arch, const char *ftype) {
    static char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 11;
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, arch, ftype);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return NULL;
    }
    return path;
}

static infer_model *load(const char *path, int32_t ngl) {
    infer_model_params p = infer_model_params_default();
    p.n_gpu_layers = ngl;
    infer_model *m = NULL;
    if (infer_model_load(path, &p, &m) != INFER_OK) T_CHECK(0, "load %s -ngl %d: %s", path, ngl, infer_last_error());
    return m;
}

static infer_ctx *make_ctx(const infer_model *m, int32_t n_seq) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_CTX, p.n_batch = 64, p.n_seq = n_seq, p.n_threads = 2;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) T_CHECK(0, "infer_ctx_create: %s", infer_last_error());
    return c;
}

static int argmax(const float *x, int32_t n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

struct cmp {
    double worst; /* max relative L2 over rows */
    int rows, same_argmax;
};

static void compare_rows(struct cmp *r, const infer_ctx *g, const infer_ctx *c, int32_t n_rows, int32_t n_vocab) {
    for (int32_t i = 0; i < n_rows; i++) {
        const float *lg = infer_logits(g, i), *lc = infer_logits(c, i);
        if (!lg || !lc) {
            T_CHECK(0, "logits row %d missing: %s", i, infer_last_error());
            r->worst = INFINITY;
            continue;
        }
        double d = 0, n = 0;
        for (int32_t v = 0; v < n_vocab; v++) d += ((double)lg[v] - lc[v]) * ((double)lg[v] - lc[v]), n += (double)lc[v] * lc[v];
        const double rel = sqrt(d / (n > 0 ? n : 1));
        if (!(rel <= r->worst)) r->worst = isnan(rel) ? INFINITY : fmax(r->worst, rel);
        r->rows++, r->same_argmax += argmax(lg, n_vocab) == argmax(lc, n_vocab);
    }
}

/* The same batch into both contexts, every row asked. */
static int decode_both(infer_ctx *g, infer_ctx *c, const int32_t *tok, const int32_t *seq, int32_t n) {
    int8_t want[64];
    for (int i = 0; i < n; i++) want[i] = 1;
    infer_batch b = {n, tok, NULL, seq, want};
    const int ok_g = infer_decode(g, &b) == INFER_OK;
    T_CHECK(ok_g, "gpu decode (%d tokens): %s", n, infer_last_error());
    const int ok_c = ok_g && infer_decode(c, &b) == INFER_OK;
    T_CHECK(!ok_g || ok_c, "cpu decode (%d tokens): %s", n, infer_last_error());
    return ok_c;
}

static void check_model(const char *arch, const char *ftype) {
    const char *path = synth_file(arch, ftype);
    if (!path) return;
    infer_model *mg = load(path, 99), *mc = load(path, 0);
    infer_ctx *g = mg ? make_ctx(mg, 1) : NULL, *c = mc ? make_ctx(mc, 1) : NULL;
    const int32_t n_vocab = mc ? infer_vocab_size(mc) : 0;
    struct cmp r = {0, 0, 0};
    int32_t tok[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) tok[i] = 1 + (i * 7919) % (n_vocab - 1 > 0 ? n_vocab - 1 : 1);
    int ok = g && c && decode_both(g, c, tok, NULL, N_PROMPT);
    if (ok) compare_rows(&r, g, c, N_PROMPT, n_vocab);
    for (int s = 0; ok && s < N_DECODE; s++) {
        int32_t t = argmax(infer_logits(c, -1), n_vocab);
        ok = decode_both(g, c, &t, NULL, 1);
        if (ok) compare_rows(&r, g, c, 1, n_vocab);
    }
    int32_t v[N_VERIFY] = {3, 5, 7};
    if (ok && decode_both(g, c, v, NULL, N_VERIFY)) compare_rows(&r, g, c, N_VERIFY, n_vocab);
    const double bound = !strcmp(ftype, "F32") ? 2e-3 : 5e-2;
    T_CHECK(r.rows == N_PROMPT + N_DECODE + N_VERIFY && r.worst <= bound && r.same_argmax * 10 >= r.rows * 9,
            "%s %s: %d rows, worst relative L2 %.3g (bound %.0e), argmax equal on %d", arch, ftype, r.rows, r.worst,
            bound, r.same_argmax);
    printf("  %-9s %-6s rows %d  worst rel L2 %.3g  argmax equal %d/%d\n", arch, ftype, r.rows, r.worst,
           r.same_argmax, r.rows);
    infer_ctx_free(g), infer_ctx_free(c), infer_model_free(mg), infer_model_free(mc);
    unlink(path);
}

/* Decode logits with and without graphs: the same kernels, so bit-identical. */
static void check_graphs(void) {
    const char *path = synth_file("qwen3", "Q4_K_M");
    infer_model *m = path ? load(path, 99) : NULL;
    infer_ctx *ctx[2] = {NULL, NULL};
    for (int k = 0; m && k < 2; k++) {
        if (k) setenv("INFER_CUDA_GRAPHS", "0", 1);
        ctx[k] = make_ctx(m, 1);
        unsetenv("INFER_CUDA_GRAPHS");
    }
    int32_t t = 9, diff = 0, steps = 0;
    for (int s = 0; ctx[0] && ctx[1] && s < 16; s++, steps++) {
        const float *l[2];
        for (int k = 0; k < 2; k++) {
            infer_batch b = {1, &t, NULL, NULL, NULL};
            if (infer_decode(ctx[k], &b) != INFER_OK) T_CHECK(0, "decode: %s", infer_last_error());
            l[k] = infer_logits(ctx[k], -1);
        }
        if (!l[0] || !l[1]) break;
        diff += memcmp(l[0], l[1], (size_t)infer_vocab_size(m) * sizeof(float)) != 0;
        t = argmax(l[0], infer_vocab_size(m));
    }
    T_CHECK(steps == 16 && diff == 0, "graphs vs INFER_CUDA_GRAPHS=0: %d of %d steps differ", diff, steps);
    infer_ctx_free(ctx[0]), infer_ctx_free(ctx[1]), infer_model_free(m);
    if (path) unlink(path);
}

/* infer_sample on the device (the sample op, or its host fallback) picks what infer_sampler_sample picks
 * from the downloaded logits with the same seed: greedy, the default chain, and a flat top-p-only chain
 * (more than the kernel's 1024 candidates survive: the host fallback). */
static void check_sample(void) {
    const char *path = synth_file("qwen3", "Q8_0");
    infer_model *m = path ? load(path, 99) : NULL;
    infer_ctx *c = m ? make_ctx(m, 1) : NULL;
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, same = 0, n = 0;
    infer_batch b = {8, tok, NULL, NULL, NULL};
    if (c && infer_decode(c, &b) != INFER_OK) T_CHECK(0, "decode: %s", infer_last_error());
    for (int k = 0; c && k < 3; k++) {
        infer_sampler_params sp = infer_sampler_params_default();
        sp.seed = 42 + (uint64_t)k;
        if (k == 0) sp.temp = 0;
        if (k == 2) sp.top_k = 0, sp.min_p = 0, sp.top_p = 0.999f, sp.temp = 5.0f;
        infer_sampler *s1 = NULL, *s2 = NULL;
        infer_sampler_create(&sp, infer_vocab_size(m), &s1), infer_sampler_create(&sp, infer_vocab_size(m), &s2);
        for (int i = 0; s1 && s2 && i < 20; i++, n++) {
            int32_t a = -1;
            if (infer_sample(c, s1, -1, &a) != INFER_OK) T_CHECK(0, "infer_sample: %s", infer_last_error());
            same += a == infer_sampler_sample(s2, infer_logits(c, -1));
        }
        infer_sampler_free(s1), infer_sampler_free(s2);
    }
    T_CHECK(n == 60 && same == n, "infer_sample on the GPU equals the host sampler: %d of %d", same, n);
    infer_ctx_free(c), infer_model_free(m);
    if (path) unlink(path);
}

/* Two sequences in one batch, then each alone, against the CPU. */
static void check_two_sequences(void) {
    const char *path = synth_file("qwen3moe", "Q8_0");
    infer_model *mg = path ? load(path, 99) : NULL, *mc = path ? load(path, 0) : NULL;
    infer_ctx *g = mg ? make_ctx(mg, 2) : NULL, *c = mc ? make_ctx(mc, 2) : NULL;
    struct cmp r = {0, 0, 0};
    const int32_t n_vocab = mc ? infer_vocab_size(mc) : 0;
    int32_t tok[8] = {4, 8, 15, 16, 23, 42, 7, 9}, seq[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    int ok = g && c && decode_both(g, c, tok, seq, 8);
    if (ok) compare_rows(&r, g, c, 8, n_vocab);
    for (int s = 0; ok && s < 6; s++) {
        int32_t t2[2] = {10 + s, 20 + s}, s2[2] = {0, 1};
        ok = decode_both(g, c, t2, s2, 2);
        if (ok) compare_rows(&r, g, c, 2, n_vocab);
    }
    T_CHECK(r.rows == 20 && r.worst <= 5e-2, "two sequences: %d rows, worst relative L2 %.3g", r.rows, r.worst);
    infer_ctx_free(g), infer_ctx_free(c), infer_model_free(mg), infer_model_free(mc);
    if (path) unlink(path);
}

/* A stand-in device with 64 MiB free: the fit check must refuse before allocating. */
static int fake_allocs;
static infer_status fake_mem_info(struct infer_backend *b, size_t *f, size_t *t) {
    (void)b;
    *f = (size_t)64 << 20, *t = (size_t)80 << 30;
    return INFER_OK;
}
static infer_status fake_alloc(struct infer_backend *b, size_t n, void **out) {
    (void)b, (void)n;
    fake_allocs++;
    *out = NULL;
    return infer_fail(INFER_E_OOM, "fake");
}

static void check_fit(const char *path) {
    infer_model *m = load(path, 0);
    if (!m) return;
    struct infer_backend_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.name = "fake", ops.mem_info = fake_mem_info, ops.alloc = fake_alloc;
    struct infer_backend be = {&ops, NULL};
    infer_model_params p = infer_model_params_default();
    const infer_status st = model_upload(m, &be, 0, &p, 0.0f, 1.0f);
    const char *msg = infer_last_error();
    T_CHECK(st == INFER_E_OOM && fake_allocs == 0 && strstr(msg, "MiB free") && strstr(msg, "need"),
            "a model that does not fit: status %d, %d allocations, message '%s'", st, fake_allocs, msg);
    T_CHECK(m->be == NULL, "the model stays on the CPU after a refused upload");
    infer_model_free(m);
}

int main(void) {
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return t_done();
    }
    const char *path = synth_file("qwen3", "F32");
    if (path) {
        infer_model *m = NULL;
        infer_model_params p = infer_model_params_default();
        p.n_gpu_layers = 1; /* of 2 layers */
        T_CHECK(infer_model_load(path, &p, &m) == INFER_E_UNSUPPORTED && !m && strstr(infer_last_error(), "n_gpu_layers 1"),
                "a GPU/CPU split is refused: %s", infer_last_error());
        check_fit(path);
    }
    const char *why = NULL;
    if (device_count(&why) == 0) {
        if (path) {
            infer_model *m = NULL;
            infer_model_params p = infer_model_params_default();
            p.n_gpu_layers = 99;
            const infer_status st = infer_model_load(path, &p, &m);
            T_CHECK(st != INFER_OK && !m && strstr(infer_last_error(), "CUDA"),
                    "-ngl 99 without a device: status %d, '%s'", st, infer_last_error());
            unlink(path);
        }
        rmdir(dir);
        T_SKIP("no CUDA device: %s; end-to-end GPU logits", why ? why : "none");
        const int rc = t_done();
        return rc ? rc : 77;
    }
    if (path) unlink(path);
    const char *archs[] = {"llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"};
    const char *types[] = {"F32", "Q8_0", "Q4_K_M"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++)
        for (size_t k = 0; k < sizeof types / sizeof *types; k++) check_model(archs[a], types[k]);
    check_graphs();
    check_two_sequences();
    check_sample();
    rmdir(dir);
    return t_done();
}
