/* test-llama-synth: every synthetic architecture written by synth loads AND evaluates in the real
 * llama.cpp. For each arch (the hybrids also with the MTP layer; every arch also with a tied LM head,
 * and as random valid Q4_K_M/Q8_0 blocks) and each file type F32 F16 Q8_0 Q4_K_M, llama.cpp loads
 * the file (with load_mtp, so its loader checks the MTP tensors too), reports our dims, decodes a
 * 16-token prompt and returns finite, non-constant logits over our vocabulary; with MTP it also
 * builds its MTP draft context over the model. llama.cpp's loader checks every tensor name, shape and
 * key type against its own tables, so this is the test that synth (and therefore our arch table)
 * names and shapes things right. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/synth.h"
#include "../t.h"
#include "llama_peer.h"

static char dir[] = "/tmp/test-llama-synth-XXXXXX";

/* Writes sp, loads it in llama.cpp, decodes, checks; label names the case in messages. */
static void eval_params(const struct llama_peer *pe, const struct synth_params *sp, const char *label) {
    const int mtp = sp->mtp;
    char path[256];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    if (synth_write(sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s: %s", label, infer_last_error());
        return;
    }
    /* llama.cpp's n_layer is the trunk: block_count less the nextn (MTP) layers */
    const struct llama_peer_expect want = {sp->n_embd,    sp->n_layer, sp->n_head,
                                           sp->n_head_kv, sp->n_vocab, mtp};
    const char *why = NULL;
    void *model = llama_peer_model_load(pe, path, mtp, &want, &why);
    T_CHECK(model != NULL, "llama.cpp loads %s: %s", label, why);
    if (!model) {
        unlink(path);
        return;
    }
    void *ctx = llama_peer_context(pe, model, 64, LLAMA_PEER_CTX_DEFAULT, NULL);
    T_CHECK(ctx != NULL, "llama.cpp context for %s", label);
    if (ctx) {
        int32_t tokens[16];
        for (int i = 0; i < 16; i++)
            tokens[i] = (int32_t)((i * 37 + 11) % (sp->n_vocab - 8));
        float *logits = malloc(sizeof(float) * (size_t)sp->n_vocab);
        const int32_t rc = llama_peer_eval(pe, ctx, tokens, 16, logits, sp->n_vocab);
        int finite = rc == 0, varied = 0;
        for (int32_t i = 0; rc == 0 && i < sp->n_vocab; i++) {
            finite &= isfinite(logits[i]) != 0;
            varied |= logits[i] != logits[0];
        }
        T_CHECK(rc == 0 && finite && varied, "%s: decode rc %d, finite %d, varied %d", label, rc, finite,
                varied);
        free(logits);
        if (mtp) {
            void *draft = llama_peer_context(pe, model, 64, LLAMA_PEER_CTX_MTP, ctx);
            T_CHECK(draft != NULL, "llama.cpp builds the MTP draft context of %s", label);
            if (draft) pe->ctx_free(draft);
        }
        pe->ctx_free(ctx);
    }
    pe->model_free(model);
    unlink(path);
}

static void eval_one(const struct llama_peer *pe, const char *arch, const char *ftype, int mtp, int tied,
                     int random_blocks) {
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.mtp = mtp, sp.seed = 7, sp.random_blocks = random_blocks;
    if (tied) sp.tied = 1;
    char label[128];
    snprintf(label, sizeof label, "%s %s mtp=%d tied=%d random_blocks=%d", arch, ftype, mtp, tied,
             random_blocks);
    eval_params(pe, &sp, label);
}

/* INFER_CONFORMANCE_PRESETS="qwen3-0.6b,qwen35-0.8b,...": real shapes as random Q4_K_M blocks (with
 * MTP where the arch has it). Opt-in: these files are hundreds of MB to GBs. */
static void eval_presets(const struct llama_peer *pe, const char *list) {
    char names[512];
    snprintf(names, sizeof names, "%s", list);
    for (char *save = NULL, *name = strtok_r(names, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        struct synth_params sp;
        memset(&sp, 0, sizeof sp);
        sp.ftype = "Q4_K_M", sp.random_blocks = 1, sp.seed = 7;
        if (synth_preset(name, &sp) != INFER_OK) {
            T_CHECK(0, "preset %s: %s", name, infer_last_error());
            continue;
        }
        sp.mtp = !strcmp(sp.arch, "qwen3next") || !strcmp(sp.arch, "qwen35") || !strcmp(sp.arch, "qwen35moe");
        char label[128];
        snprintf(label, sizeof label, "preset %s (%s) Q4_K_M random blocks mtp=%d", name, sp.arch, sp.mtp);
        eval_params(pe, &sp, label);
        printf("%s: done\n", label);
    }
}

int main(void) {
    struct llama_peer pe;
    const char *why = NULL;
    const int ready = llama_peer_load(&pe, &why);
    if (ready <= 0) {
        if (ready == 0)
            T_SKIP_PEER("llama.cpp peer: %s", why);
        else
            T_CHECK(0, "llama.cpp peer: %s", why);
        return t_done();
    }
    if (!mkdtemp(dir)) return 1;
    static const char *const archs[] = {"llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe"};
    static const char *const ftypes[] = {"F32", "F16", "Q8_0", "Q4_K_M"};
    for (int a = 0; a < 6; a++) {
        const int hybrid = a >= 3;
        for (int f = 0; f < 4; f++) {
            eval_one(&pe, archs[a], ftypes[f], 0, 0, 0);
            if (hybrid) eval_one(&pe, archs[a], ftypes[f], 1, 0, 0);
        }
        eval_one(&pe, archs[a], "Q8_0", hybrid, 1, 0);
        eval_one(&pe, archs[a], "Q4_K_M", hybrid, 0, 1); /* random valid blocks, as for the big presets */
        eval_one(&pe, archs[a], "Q8_0", 0, 0, 1);
    }
    const char *presets = getenv("INFER_CONFORMANCE_PRESETS");
    if (presets) eval_presets(&pe, presets);
    rmdir(dir);
    return t_done();
}
