/* test-llama-kvq8: our Q8_0 KV cache against llama.cpp's (type_k = type_v = q8_0, which llama.cpp
 * runs only with flash attention on) on synthetic F32 qwen3 (GQA 2) and qwen35 (hybrid) models.
 *
 * Per model: a 56-token prompt in one batch with logits at every position, then 24 greedy decode steps
 * (tokens picked from our logits, fed to both engines). llama.cpp runs twice, with a q8_0 cache and
 * with an f16 cache (flash attention on for both, one thread); ours runs with a Q8_0 cache.
 * Both engines rotate q, K and V by the same Walsh-Hadamard matrices (llama.cpp's attn_rot_k / attn_rot_v,
 * on by default for quantised caches), quantise the same K/V rows the same way (d = amax/127, round to
 * nearest) and round q to Q8_0 for the scores, so with F32 weights ours must stay at the F32 conformance
 * level against llama.cpp's q8_0 run. The prompt rows and the decode rows are checked apart, per case:
 *   - relative L2 error of the worst row and the mean over the section within the case's bounds (cases[],
 *     about 10x the worst measured);
 *   - the same argmax at every row but near-ties (logits_cmp.h: llama.cpp's gap between its top token and
 *     ours below that row's largest |error|), at most MAX_TIES per section, each printed;
 * and over all rows the mean at least 4x below what the q8_0 cache itself changes in llama.cpp (its q8_0
 * run against its f16 run, printed), which checks that the comparison can see a cache-type mismatch:
 * without our rotation the comparison gave max rel L2 1.2e-2 (qwen3) and 6e-3 (qwen35), failing.
 * Near-ties are the one known difference: llama.cpp's AVX2 quantiser rounds half to even, ours (ggml's
 * _ref form) half away from zero. tests/run.sh runs this test on the llama.cpp CPU backend the machine
 * picks and again on a fixed one (INFER_PEER_CPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/synth.h"
#include "../t.h"
#include "llama_peer.h"
#include "logits_cmp.h"

enum { N_PROMPT = 56, N_GEN = 24, N_ALL = N_PROMPT + N_GEN, GGML_TYPE_F16 = 1, GGML_TYPE_Q8_0 = 8, MAX_TIES = 1 };

static char dir[] = "/tmp/test-llama-kvq8-XXXXXX";

/* llama.cpp's logits for tokens[0..N_PROMPT) in one batch, then one token at a time: out (N_ALL, n_vocab),
 * with K and V cells of ggml type kv and flash attention on. 0 on failure. */
static int llama_run(const struct llama_peer *pe, void *model, const int32_t *tokens, int n_vocab, int32_t kv,
                     float *out) {
    struct llama_peer_context_params cp = pe->context_default_params(); /* layout checked by llama_peer_load */
    cp.n_ctx = 256, cp.n_batch = cp.n_ubatch = 256;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = 1; /* LLAMA_FLASH_ATTN_TYPE_ENABLED: a quantised V cache needs it */
    cp.type_k = cp.type_v = kv;
    void *ctx = pe->init_from_model(model, cp);
    if (!ctx) {
        T_CHECK(0, "llama.cpp context with kv type %d", kv);
        return 0;
    }
    const int ok = llama_peer_logits_run(pe, ctx, tokens, N_PROMPT, N_ALL, n_vocab, out);
    pe->ctx_free(ctx);
    T_CHECK(ok, "llama.cpp (kv type %d) decodes the prompt and %d steps", kv, N_GEN);
    return ok;
}

/* Ours with a Q8_0 cache: the prompt in one batch, then greedy steps written into tokens[N_PROMPT..]. */
static int ours_run(infer_model *m, int32_t *tokens, int n_vocab, float *out) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = 256, p.n_batch = 64, p.n_threads = 2, p.kv_type = INFER_TYPE_Q8_0;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) {
        T_CHECK(0, "infer_ctx_create (kv_type Q8_0): %s", infer_last_error());
        return 0;
    }
    int8_t flags[N_ALL];
    memset(flags, 1, sizeof flags);
    infer_batch b = {N_PROMPT, tokens, NULL, NULL, flags};
    int ok = infer_decode(c, &b) == INFER_OK;
    for (int i = 0; ok && i < N_PROMPT; i++) {
        const float *l = infer_logits(c, i);
        if (!l) ok = 0;
        else memcpy(out + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
    for (int i = N_PROMPT; ok && i < N_ALL; i++) {
        tokens[i] = cmp_argmax(out + (size_t)(i - 1) * n_vocab, n_vocab);
        infer_batch s = {1, tokens + i, NULL, NULL, NULL};
        ok = infer_decode(c, &s) == INFER_OK;
        const float *l = ok ? infer_logits(c, -1) : NULL;
        if (!l) ok = 0;
        else memcpy(out + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
    T_CHECK(ok, "our decode with a Q8_0 cache: %s", infer_last_error());
    infer_ctx_free(c);
    return ok;
}

/* Per case: bounds on the relative L2 error against llama.cpp's q8_0 run, about 10x the largest measured
 * over the prompt and decode sections on the llama.cpp CPU backends listed below cases[]. */
struct kase {
    const char *arch;
    double row, mean; /* the worst row, the mean over a section */
};

/* Rows from..to of ours against llama.cpp's q8_0 run: the worst row and the mean within the case's bounds;
 * an argmax mismatch only at a near-tie (logits_cmp.h), at most MAX_TIES per section, each printed. */
static void check_section(const struct kase *k, const char *name, const float *ours, const float *q8, int n_vocab,
                          int from, int to) {
    char label[64];
    snprintf(label, sizeof label, "%s kv q8_0 %s", k->arch, name);
    const struct cmp c = cmp_rows_print(label, ours, q8, n_vocab, from, to);
    printf("  %-20s ours vs llama.cpp q8_0: rel L2 max %.2e (row %d) mean %.2e argmax %d/%d\n", label, c.max_rel,
           c.worst, c.mean_rel, c.agree, to - from);
    T_CHECK(c.max_rel <= k->row, "%s: max rel L2 %.3g at row %d (<= %.3g)", label, c.max_rel, c.worst, k->row);
    T_CHECK(c.mean_rel <= k->mean, "%s: mean rel L2 %.3g (<= %.3g)", label, c.mean_rel, k->mean);
    T_CHECK(c.flips == 0, "%s: %d argmax mismatches not at a near-tie", label, c.flips);
    T_CHECK(c.ties <= MAX_TIES, "%s: %d near-tie argmax mismatches (<= %d)", label, c.ties, MAX_TIES);
}

static void check_one(const struct llama_peer *pe, const struct kase *k) {
    const char *arch = k->arch;
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = "F32", sp.seed = 13;
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, arch);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s: %s", arch, infer_last_error());
        return;
    }
    infer_model *m = NULL;
    void *lm = NULL;
    float *ours = NULL, *q8 = NULL, *f16 = NULL;
    if (infer_model_load(path, NULL, &m) != INFER_OK) {
        T_CHECK(0, "load %s: %s", path, infer_last_error());
        goto done;
    }
    const int n_vocab = infer_vocab_size(m);
    ours = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    q8 = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    f16 = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    lm = pe->model_load(path, pe->model_default_params());
    if (!ours || !q8 || !f16 || !lm) {
        T_CHECK(0, "%s: llama.cpp loads the model, buffers", arch);
        goto done;
    }
    int32_t tokens[N_ALL];
    for (int i = 0; i < N_PROMPT; i++) tokens[i] = (int32_t)((i * 37 + 11) % (n_vocab - 8));
    if (!ours_run(m, tokens, n_vocab, ours) || !llama_run(pe, lm, tokens, n_vocab, GGML_TYPE_Q8_0, q8) ||
        !llama_run(pe, lm, tokens, n_vocab, GGML_TYPE_F16, f16))
        goto done;
    check_section(k, "prompt", ours, q8, n_vocab, 0, N_PROMPT);
    check_section(k, "decode", ours, q8, n_vocab, N_PROMPT, N_ALL);
    const struct cmp all = cmp_rows(ours, q8, n_vocab, 0, N_ALL), eff = cmp_rows(q8, f16, n_vocab, 0, N_ALL);
    printf("  %-20s llama.cpp q8_0 vs f16: rel L2 max %.2e mean %.2e argmax %d/%d\n", arch, eff.max_rel,
           eff.mean_rel, eff.agree, N_ALL);
    T_CHECK(4 * all.mean_rel <= eff.mean_rel, "%s kv q8_0: mean rel L2 %.3g is not 4x below the q8_0 cache's own "
            "effect in llama.cpp (%.3g)", arch, all.mean_rel, eff.mean_rel);
done:
    if (lm) pe->model_free(lm);
    infer_model_free(m);
    free(ours), free(q8), free(f16);
    unlink(path);
}

/* About 10x the largest measured over both sections on seven llama.cpp CPU backends (sapphirerapids, the
 * one this Xeon with AMX picks, and zen4, icelake, skylakex, haswell, sse42, x64 forced): row / mean in each
 * comment. qwen3's worst is haswell's, whose AVX2 quantiser rounds a half to even where ours rounds it away
 * from zero: one decode row at 2.9e-4, every other row near 2.5e-7 on all seven. The q8_0 cache's own
 * effect in llama.cpp (mean over all rows) is 6.3e-3 for qwen3 and 1.9e-3 for qwen35. */
static const struct kase cases[] = {
    {.arch = "qwen3", .row = 3e-3, .mean = 1.5e-4},  /* 2.9e-4 / 1.3e-5 (haswell; 3.0e-7 / 2.6e-7 elsewhere) */
    {.arch = "qwen35", .row = 4e-3, .mean = 1.5e-3}, /* 3.6e-4 / 1.5e-4 on all seven */
};

int main(void) {
    struct llama_peer pe;
    const char *why = NULL;
    const int got = llama_peer_load(&pe, &why);
    if (got == 0) {
        T_SKIP_PEER("llama.cpp peer: %s", why);
        return t_done();
    }
    T_CHECK(got == 1, "llama.cpp peer: %s", why ? why : ""); /* a layout mismatch fails, never skips */
    if (got != 1) return t_done();
    if (!mkdtemp(dir)) return 1;
    printf("llama.cpp CPU backend: %s\n", llama_peer_cpu_variant());
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_one(&pe, &cases[i]);
    rmdir(dir);
    return t_done();
}
