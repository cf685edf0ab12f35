/* test-llama-greedy: 128-token greedy continuations identical to llama.cpp's on F32 models.
 *
 * Issue 3's acceptance item: for llama, qwen3 and qwen3moe synthetic F32 models (2 seeds each) and
 * 3 prompts of random token ids (lengths 8, 20, 40), llama.cpp and we each decode the prompt in one
 * batch and then take the argmax of our own last logits and decode it, 128 times, each from its own
 * history (llama.cpp with one thread and flash attention off, its f32 attention math, as in
 * test-llama-logits). The two token streams must be identical; a divergence is accepted only at a
 * near-tie, where llama.cpp's top-2 logit gap at that step is below 1e-3 (so float rounding may
 * legitimately pick either). After such a divergence the stream is not compared further: the two
 * runs continue from different histories. At most MAX_TIES (1) such divergences per run over all 18
 * streams: none was measured, and several would mean our numbers drift. Prints how many streams matched
 * fully and every divergence with its gap, and the llama.cpp CPU backend it ran on: tests/run.sh runs it
 * on the one llama.cpp picks and again on a fixed one (INFER_PEER_CPU, see llama_peer.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/synth.h"
#include "../t.h"
#include "llama_peer.h"

/* MAX_TIES: near-tie divergences accepted per run, over all 18 streams (0 measured on seven llama.cpp
 * CPU backends), so that a systematic near-tie problem fails */
enum { N_GEN = 128, MAX_PROMPT = 40, MAX_ALL = MAX_PROMPT + N_GEN, MAX_TIES = 1 };
#define TIE_GAP 1e-3

static char dir[] = "/tmp/test-llama-greedy-XXXXXX";
static int n_streams, n_matched, n_ties;
static double min_gap = 1e300; /* smallest llama.cpp top-2 gap over the compared steps */

/* argmax of x[n]; *gap (may be NULL): top-1 minus top-2 value. */
static int top2(const float *x, int n, double *gap) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    double second = -1e300;
    for (int i = 0; i < n; i++)
        if (i != b && x[i] > second) second = x[i];
    if (gap) *gap = (double)x[b] - second;
    return b;
}

/* llama.cpp greedy: decodes tokens[0..n_prompt) then N_GEN argmax steps, writing each chosen token
 * into tokens[n_prompt..] and its top-2 gap into gaps[0..N_GEN). 0 on failure. */
static int llama_greedy(const struct llama_peer *pe, void *model, int32_t *tokens, int n_prompt, int n_vocab,
                        double *gaps) {
    struct llama_peer_context_params cp =
        pe->context_default_params(); /* layout checked by llama_peer_load */
    cp.n_ctx = 256, cp.n_batch = cp.n_ubatch = 256;
    cp.n_threads = cp.n_threads_batch = 1; /* the test machine is small and shared, and its pool spins */
    cp.flash_attn_type = 0;
    void *ctx = pe->init_from_model(model, cp);
    if (!ctx) {
        T_CHECK(0, "llama.cpp context");
        return 0;
    }
    int ok = pe->decode(ctx, pe->batch_get_one(tokens, n_prompt)) == 0;
    for (int i = 0; ok && i < N_GEN; i++) {
        const float *l = pe->get_logits_ith(ctx, -1);
        if (!l) {
            ok = 0;
            break;
        }
        tokens[n_prompt + i] = top2(l, n_vocab, &gaps[i]);
        ok = pe->decode(ctx, pe->batch_get_one(tokens + n_prompt + i, 1)) == 0;
    }
    pe->ctx_free(ctx);
    T_CHECK(ok, "llama.cpp decodes the prompt and %d greedy steps", N_GEN);
    return ok;
}

/* Ours, the same way: tokens[n_prompt..n_prompt + N_GEN) are written. 0 on failure. */
static int ours_greedy(infer_model *m, int32_t *tokens, int n_prompt, int n_vocab) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = 256, p.n_batch = 64, p.n_threads = 1,
    p.kv_type = INFER_TYPE_F16; /* llama.cpp's default KV type */
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) {
        T_CHECK(0, "infer_ctx_create: %s", infer_last_error());
        return 0;
    }
    infer_batch b = {n_prompt, tokens, NULL, NULL, NULL};
    int ok = infer_decode(c, &b) == INFER_OK;
    for (int i = 0; ok && i < N_GEN; i++) {
        const float *l = infer_logits(c, -1);
        if (!l) {
            ok = 0;
            break;
        }
        tokens[n_prompt + i] = top2(l, n_vocab, NULL);
        infer_batch s = {1, tokens + n_prompt + i, NULL, NULL, NULL};
        ok = infer_decode(c, &s) == INFER_OK;
    }
    T_CHECK(ok, "our greedy decode: %s", infer_last_error());
    infer_ctx_free(c);
    return ok;
}

/* Deterministic per-stream prompt of random ids (splitmix64 of seed and index). */
static void make_prompt(int32_t *tokens, int n, uint64_t seed, int n_vocab) {
    for (int i = 0; i < n; i++) {
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)i * 0xBF58476D1CE4E5B9ull + 1;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        tokens[i] = (int32_t)((z ^ (z >> 31)) % (uint64_t)n_vocab);
    }
}

static void check_model(const struct llama_peer *pe, const char *arch, uint64_t seed) {
    static const int prompt_lens[] = {8, 20, 40};
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = "F32", sp.seed = seed;
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%llu.gguf", dir, arch, (unsigned long long)seed);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s seed %llu: %s", arch, (unsigned long long)seed, infer_last_error());
        return;
    }
    infer_model *m = NULL;
    void *lm = NULL;
    if (infer_model_load(path, NULL, &m) != INFER_OK) {
        T_CHECK(0, "load %s: %s", path, infer_last_error());
        goto done;
    }
    lm = pe->model_load(path, pe->model_default_params());
    if (!lm) {
        T_CHECK(0, "%s: llama.cpp loads the model", path);
        goto done;
    }
    const int n_vocab = infer_vocab_size(m);
    for (int k = 0; k < 3; k++) {
        const int np = prompt_lens[k];
        int32_t ref[MAX_ALL], ours[MAX_ALL];
        double gaps[N_GEN];
        make_prompt(ref, np, seed * 1000 + (uint64_t)k, n_vocab);
        memcpy(ours, ref, sizeof(int32_t) * (size_t)np);
        if (!llama_greedy(pe, lm, ref, np, n_vocab, gaps) || !ours_greedy(m, ours, np, n_vocab)) continue;
        n_streams++;
        int d = 0;
        while (d < N_GEN && ref[np + d] == ours[np + d])
            d++;
        for (int i = 0; i < d && i < N_GEN; i++)
            min_gap = gaps[i] < min_gap ? gaps[i] : min_gap;
        if (d == N_GEN) {
            n_matched++;
            printf("  %-8s seed %llu prompt %2d: %d/%d tokens identical\n", arch, (unsigned long long)seed,
                   np, N_GEN, N_GEN);
            continue;
        }
        printf("  %-8s seed %llu prompt %2d: diverges at step %d (llama.cpp %d, ours %d), llama.cpp top-2 "
               "gap %.3g\n",
               arch, (unsigned long long)seed, np, d, ref[np + d], ours[np + d], gaps[d]);
        n_ties += gaps[d] < TIE_GAP;
        T_CHECK(gaps[d] < TIE_GAP,
                "%s seed %llu prompt %d: divergence at step %d is a near-tie (gap %.3g < %g)", arch,
                (unsigned long long)seed, np, d, gaps[d], TIE_GAP);
    }
done:
    if (lm) pe->model_free(lm);
    infer_model_free(m);
    unlink(path);
}

int main(void) {
    struct llama_peer pe;
    const char *why = NULL;
    const int got = llama_peer_load(&pe, &why);
    if (got == 0) {
        T_SKIP_PEER("llama.cpp peer: %s", why);
        return t_done();
    }
    T_CHECK(got == 1, "llama.cpp peer: %s", why ? why : "");
    if (got != 1) return t_done();
    printf("llama.cpp CPU backend: %s\n", llama_peer_cpu_variant());
    if (!mkdtemp(dir)) return 1;
    static const char *const archs[] = {"llama", "qwen3", "qwen3moe"};
    for (int a = 0; a < 3; a++)
        for (uint64_t s = 1; s <= 2; s++)
            check_model(&pe, archs[a], s * 7 + 3);
    rmdir(dir);
    printf(
        "  %d/%d greedy streams of %d tokens identical to llama.cpp's; %d diverged at a near-tie (gap < %g); "
        "smallest llama.cpp top-2 gap on an agreed step %.3g\n",
        n_matched, n_streams, N_GEN, n_ties, TIE_GAP, min_gap);
    T_CHECK(n_streams == 18, "all 18 streams ran (%d)", n_streams);
    T_CHECK(n_ties <= MAX_TIES, "%d streams diverged at a near-tie (<= %d)", n_ties, MAX_TIES);
    return t_done();
}
