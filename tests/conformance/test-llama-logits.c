/* test-llama-logits: our forward pass against llama.cpp's on synthetic models.
 *
 * For llama, qwen3 and qwen3moe in F32 and F16: a 56-token prompt in one batch with logits at every
 * position, then 16 greedy decode steps (tokens picked from our logits, fed to both); for the hybrid
 * qwen35, qwen35moe and qwen3next (with their MTP layer, which the main pass skips) a 64-token prompt
 * and 64 steps, and the prompt once more token by token (our recurrent GDN form against the batched
 * one, and both against llama.cpp). Each position
 * compared with llama.cpp without flash attention (its f32 attention math, like ours): relative L2
 * error <= 1e-3 and the same argmax. For Q8_0 and Q4_K_M the bound is llama.cpp's own spread between
 * its settings — flash attention on against off, and CPU weight repacking off against on, the larger
 * of the two: ours against llama.cpp's defaults (flash off, repacking on) must stay within 2x that
 * mean relative L2 error (or 1e-3, whichever is larger) and the argmax agreement no more than 3
 * points below llama.cpp's self-agreement. The measured numbers are printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/synth.h"
#include "../t.h"
#include "llama_peer.h"
#include "logits_cmp.h"

enum { MAX_ALL = 128 };
static int N_PROMPT = 56, N_GEN = 16, N_ALL = 72; /* per architecture, see main */

static char dir[] = "/tmp/test-llama-logits-XXXXXX";

/* llama.cpp's logits for tokens[0..N_PROMPT) in one batch (every position) then one token at a time
 * for the rest: out (N_ALL, n_vocab). flash: llama.cpp's flash attention on (1) or off (0). One thread:
 * the test machine is small and shared, and its pool spins. 0 on failure. */
static int llama_run(const struct llama_peer *pe, void *model, const int32_t *tokens, int n_vocab, int flash,
                     float *out) {
    struct llama_peer_context_params cp = pe->context_default_params(); /* layout checked by llama_peer_load */
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = flash;
    void *ctx = pe->init_from_model(model, cp);
    if (!ctx) {
        T_CHECK(0, "llama.cpp context");
        return 0;
    }
    const int ok = llama_peer_logits_run(pe, ctx, tokens, N_PROMPT, N_ALL, n_vocab, out);
    pe->ctx_free(ctx);
    T_CHECK(ok, "llama.cpp decodes the prompt and %d steps", N_GEN);
    return ok;
}

/* Ours: the prompt in one batch (one_by_one: token by token) with every position's logits, then
 * greedy steps whose tokens are written into tokens[N_PROMPT..] (one_by_one: taken from there).
 * 0 on failure. */
static int ours_run(infer_model *m, int32_t *tokens, int n_vocab, int one_by_one, float *out) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = MAX_ALL, p.n_batch = 64, p.n_threads = 2;
    infer_ctx *c = NULL;
    infer_status st = infer_ctx_create(m, &p, &c);
    if (st != INFER_OK) {
        T_CHECK(0, "infer_ctx_create: %s", infer_last_error());
        return 0;
    }
    int8_t flags[MAX_ALL];
    memset(flags, 1, sizeof flags);
    int ok = 1;
    for (int i0 = 0; ok && i0 < N_PROMPT; i0 += one_by_one ? 1 : N_PROMPT) {
        infer_batch b = {one_by_one ? 1 : N_PROMPT, tokens + i0, NULL, NULL, flags};
        ok = infer_decode(c, &b) == INFER_OK;
        for (int i = 0; ok && i < b.n_tokens; i++) {
            const float *l = infer_logits(c, i);
            if (!l) ok = 0;
            else memcpy(out + (size_t)(i0 + i) * n_vocab, l, (size_t)n_vocab * sizeof(float));
        }
    }
    for (int i = N_PROMPT; ok && i < N_ALL; i++) {
        if (!one_by_one) tokens[i] = cmp_argmax(out + (size_t)(i - 1) * n_vocab, n_vocab);
        infer_batch s = {1, tokens + i, NULL, NULL, NULL};
        ok = infer_decode(c, &s) == INFER_OK;
        const float *l = ok ? infer_logits(c, -1) : NULL;
        if (!l) ok = 0;
        else memcpy(out + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
    T_CHECK(ok, "our decode: %s", infer_last_error());
    infer_ctx_free(c);
    return ok;
}

static void check_one(const struct llama_peer *pe, const char *arch, const char *ftype, int tied) {
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 11, sp.tied = tied;
    const int hybrid = !strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe") || !strcmp(arch, "qwen3next");
    sp.mtp = hybrid;
    N_PROMPT = hybrid ? 64 : 56, N_GEN = hybrid ? 64 : 16, N_ALL = N_PROMPT + N_GEN;
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%s%s.gguf", dir, arch, ftype, tied ? "-tied" : "");
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return;
    }
    infer_model *m = NULL;
    void *lm = NULL;
    float *ours = NULL, *ref = NULL, *refon = NULL, *ours1 = NULL, *refnr = NULL;
    void *lm_nr = NULL; /* the same file loaded without weight repacking */
    if (infer_model_load(path, NULL, &m) != INFER_OK) {
        T_CHECK(0, "load %s: %s", path, infer_last_error());
        goto done;
    }
    const int n_vocab = infer_vocab_size(m);
    ours = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    ref = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    refon = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    ours1 = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    refnr = malloc((size_t)N_ALL * n_vocab * sizeof(float));
    lm = pe->model_load(path, pe->model_default_params());
    struct llama_peer_model_params nr = pe->model_default_params();
    nr.use_extra_bufts = 0;
    lm_nr = pe->model_load(path, nr);
    if (!ours || !ref || !refon || !ours1 || !refnr || !lm || !lm_nr) {
        T_CHECK(0, "%s %s: llama.cpp loads the model, buffers", arch, ftype);
        goto done;
    }
    int32_t tokens[MAX_ALL];
    for (int i = 0; i < N_PROMPT; i++) tokens[i] = (int32_t)((i * 37 + 11) % (n_vocab - 8));
    if (!ours_run(m, tokens, n_vocab, 0, ours) || !llama_run(pe, lm, tokens, n_vocab, 0, ref) ||
        !llama_run(pe, lm, tokens, n_vocab, 1, refon) || !llama_run(pe, lm_nr, tokens, n_vocab, 0, refnr) ||
        (hybrid && !ours_run(m, tokens, n_vocab, 1, ours1)))
        goto done;
    if (hybrid) { /* token by token against one batch: the recurrent and chunked forms, same llama.cpp bounds */
        struct cmp o1 = cmp_rows(ours1, ref, n_vocab, 0, N_ALL), ob = cmp_rows(ours1, ours, n_vocab, 0, N_PROMPT);
        printf("  %-9s %-6s token by token: vs llama.cpp max rel L2 %.2e mean %.2e argmax %d/%d | vs our batch max "
               "%.2e\n", arch, ftype, o1.max_rel, o1.mean_rel, o1.agree, N_ALL, ob.max_rel);
        T_CHECK(ob.max_rel <= 1e-3 || strcmp(ftype, "F32"), "%s %s: token by token vs one batch: max rel L2 %.3g "
                "(<= 1e-3)", arch, ftype, ob.max_rel);
        memcpy(ours, ours1, (size_t)N_PROMPT * n_vocab * sizeof(float)); /* the checks below then cover both */
        struct cmp pp1 = cmp_rows(ours1, ref, n_vocab, 0, N_PROMPT);
        if (!strcmp(ftype, "F32") || !strcmp(ftype, "F16"))
            T_CHECK(pp1.max_rel <= 1e-3 && pp1.agree == N_PROMPT, "%s %s token by token: max rel L2 %.3g (<= 1e-3), "
                    "argmax %d/%d", arch, ftype, pp1.max_rel, pp1.agree, N_PROMPT);
    }
    const struct cmp self = cmp_worse(cmp_rows(refon, ref, n_vocab, 0, N_ALL), cmp_rows(refnr, ref, n_vocab, 0, N_ALL));
    struct cmp pp = cmp_rows(ours, ref, n_vocab, 0, N_PROMPT), dec = cmp_rows(ours, ref, n_vocab, N_PROMPT, N_ALL);
    const int is_float = !strcmp(ftype, "F32") || !strcmp(ftype, "F16");
    if (is_float) {
        printf("  %-8s %-6s%s prompt: max rel L2 %.2e mean %.2e argmax %d/%d | decode: max %.2e mean %.2e argmax %d/%d "
               "| llama.cpp's settings: max %.2e\n", arch, ftype, tied ? " tied" : "", pp.max_rel, pp.mean_rel, pp.agree, N_PROMPT,
               dec.max_rel, dec.mean_rel, dec.agree, N_GEN, self.max_rel);
        T_CHECK(pp.max_rel <= 1e-3 && pp.agree == N_PROMPT, "%s %s prompt: max rel L2 %.3g (<= 1e-3), argmax %d/%d",
                arch, ftype, pp.max_rel, pp.agree, N_PROMPT);
        T_CHECK(dec.max_rel <= 1e-3 && dec.agree == N_GEN, "%s %s decode: max rel L2 %.3g (<= 1e-3), argmax %d/%d",
                arch, ftype, dec.max_rel, dec.agree, N_GEN);
    } else {
        struct cmp all = cmp_rows(ours, ref, n_vocab, 0, N_ALL);
        double bound = 2 * self.mean_rel > 1e-3 ? 2 * self.mean_rel : 1e-3;
        double self_pct = 100.0 * self.agree / N_ALL, our_pct = 100.0 * all.agree / N_ALL;
        printf("  %-8s %-6s%s ours: mean rel L2 %.2e (max %.2e) argmax %.1f%% | llama.cpp's settings: mean %.2e "
               "(max %.2e) argmax %.1f%%\n", arch, ftype, tied ? " tied" : "", all.mean_rel, all.max_rel, our_pct, self.mean_rel,
               self.max_rel, self_pct);
        T_CHECK(all.mean_rel <= bound, "%s %s: mean rel L2 %.3g within max(2 x llama.cpp's spread %.3g, 1e-3)", arch,
                ftype, all.mean_rel, self.mean_rel);
        T_CHECK(our_pct >= self_pct - 3, "%s %s: argmax agreement %.1f%% >= llama.cpp's self-agreement %.1f%% - 3",
                arch, ftype, our_pct, self_pct);
    }
done:
    if (lm) pe->model_free(lm);
    if (lm_nr) pe->model_free(lm_nr);
    infer_model_free(m);
    free(ours), free(ref), free(refon), free(ours1), free(refnr);
    unlink(path);
}

int main(void) {
    struct llama_peer pe;
    const char *why = NULL;
    const int got = llama_peer_load(&pe, &why);
    if (got == 0) {
        T_SKIP("llama.cpp peer: %s", why);
        return t_done();
    }
    T_CHECK(got == 1, "llama.cpp peer: %s", why ? why : ""); /* a layout mismatch fails, never skips */
    if (got != 1) return t_done();
    if (!mkdtemp(dir)) return 1;
    static const char *const archs[] = {"llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"};
    static const char *const ftypes[] = {"F32", "F16", "Q8_0", "Q4_K_M"};
    for (int a = 0; a < 6; a++)
        for (int f = 0; f < 4; f++) check_one(&pe, archs[a], ftypes[f], 0);
    check_one(&pe, "qwen3", "F32", 1); /* LM head tied to token_embd */
    check_one(&pe, "llama", "Q8_0", 1);
    rmdir(dir);
    return t_done();
}
