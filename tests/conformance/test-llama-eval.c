/* test-llama-eval: every synthetic architecture written by synth loads AND evaluates in the real
 * llama.cpp: for each arch (hybrids also with the MTP layer, all also with a tied LM head) and each
 * file type F32 F16 Q8_0 Q4_K_M, llama.cpp loads the file, decodes a 16-token prompt, and returns
 * finite, non-constant logits over our vocabulary. llama.cpp's loader checks every tensor name,
 * shape and key type against its own tables, so this is the test that synth (and therefore our arch
 * table) names and shapes things right. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/synth.h"
#include "../t.h"
#include "llama_peer.h"

static char dir[] = "/tmp/test-llama-eval-XXXXXX";

static void eval_one(const struct llama_peer *pe, const char *arch, const char *ftype, int mtp, int tied) {
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.mtp = mtp, sp.seed = 7;
    if (tied) sp.tied = 1;
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%s-%d%d.gguf", dir, arch, ftype, mtp, tied);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return;
    }
    void *model = pe->model_load(path, pe->model_default_params());
    T_CHECK(model != NULL, "llama.cpp loads %s %s mtp=%d tied=%d", arch, ftype, mtp, tied);
    if (!model) return;
    void *ctx = pe->init_from_model(model, pe->context_default_params());
    T_CHECK(ctx != NULL, "llama.cpp context for %s %s", arch, ftype);
    if (ctx) {
        const int32_t n_vocab = pe->vocab_n_tokens(pe->model_get_vocab(model));
        int32_t tokens[16];
        for (int i = 0; i < 16; i++) tokens[i] = (int32_t)((i * 37 + 11) % (n_vocab - 8));
        int32_t rc = pe->decode(ctx, pe->batch_get_one(tokens, 16));
        const float *logits = rc == 0 ? pe->get_logits_ith(ctx, -1) : NULL;
        int finite = logits != NULL, varied = 0;
        for (int32_t i = 0; logits && i < n_vocab; i++) {
            finite &= isfinite(logits[i]);
            varied |= logits[i] != logits[0];
        }
        T_CHECK(n_vocab == sp.n_vocab && rc == 0 && finite && varied,
                "%s %s mtp=%d tied=%d: decode rc %d, n_vocab %d (ours %d), finite %d, varied %d", arch, ftype, mtp, tied, rc,
                n_vocab, sp.n_vocab, finite, varied);
        pe->ctx_free(ctx);
    }
    pe->model_free(model);
    unlink(path);
}

int main(void) {
    struct llama_peer pe;
    const char *why = NULL;
    if (!llama_peer_load(&pe, &why)) {
        T_SKIP("llama.cpp peer: %s", why);
        return t_done();
    }
    if (!mkdtemp(dir)) return 1;
    static const char *const archs[] = {"llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe"};
    static const char *const ftypes[] = {"F32", "F16", "Q8_0", "Q4_K_M"};
    for (int a = 0; a < 6; a++) {
        const int hybrid = a >= 3;
        for (int f = 0; f < 4; f++) {
            eval_one(&pe, archs[a], ftypes[f], 0, 0);
            if (hybrid) eval_one(&pe, archs[a], ftypes[f], 1, 0);
        }
        eval_one(&pe, archs[a], "Q8_0", hybrid, 1);
    }
    rmdir(dir);
    return t_done();
}
