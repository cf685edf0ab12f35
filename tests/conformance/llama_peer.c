/* llama_peer: binding the llama.cpp oracle's C API at run time (see llama_peer.h). */
#include "llama_peer.h"

#include <stdio.h>
#include <string.h>

#include "../peer.h"

static void quiet(int level, const char *text, void *user) { (void)level, (void)text, (void)user; }

#define BIND(lib, field, name) ((*(void **)&p->field = peer_sym(lib, name)) != NULL)

int llama_peer_load(struct llama_peer *p, const char **why) {
    static const struct { int id; const char *name; } dq[] = {
        {0, NULL}, {1, "f16"}, {2, "q4_0"}, {3, "q4_1"}, {6, "q5_0"}, {7, "q5_1"}, {8, "q8_0"}, {10, "q2_K"},
        {11, "q3_K"}, {12, "q4_K"}, {13, "q5_K"}, {14, "q6_K"}, {20, "iq4_nl"}, {23, "iq4_xs"}, {30, "bf16"}};
    memset(p, 0, sizeof *p);
    void *base = peer_open("libggml-base.so", why);
    void *ggml = base ? peer_open("libggml.v0.5.0.so", why) : NULL;
    void *llama = ggml ? peer_open("libllama.v0.5.0.so", why) : NULL;
    if (!llama) return 0;
    void (*load_all)(const char *) = (void (*)(const char *))peer_sym(ggml, "ggml_backend_load_all_from_path");
    void (*log_set)(void (*)(int, const char *, void *), void *) =
        (void (*)(void (*)(int, const char *, void *), void *))peer_sym(llama, "llama_log_set");
    if (!load_all || !log_set || !BIND(llama, model_load, "llama_model_load_from_file") ||
        !BIND(llama, model_free, "llama_model_free") || !BIND(llama, model_default_params, "llama_model_default_params") ||
        !BIND(llama, context_default_params, "llama_context_default_params") ||
        !BIND(llama, init_from_model, "llama_init_from_model") || !BIND(llama, ctx_free, "llama_free") ||
        !BIND(llama, batch_get_one, "llama_batch_get_one") || !BIND(llama, decode, "llama_decode") ||
        !BIND(llama, get_logits_ith, "llama_get_logits_ith") || !BIND(llama, model_get_vocab, "llama_model_get_vocab") ||
        !BIND(llama, vocab_n_tokens, "llama_vocab_n_tokens") ||
        !BIND(llama, quantize_default_params, "llama_model_quantize_default_params") ||
        !BIND(llama, quantize, "llama_model_quantize")) {
        *why = "the llama.cpp peer lacks a symbol we need";
        return 0;
    }
    for (size_t i = 1; i < sizeof dq / sizeof *dq; i++) {
        char name[64];
        snprintf(name, sizeof name, "dequantize_row_%s", dq[i].name);
        if (!strcmp(dq[i].name, "f16")) snprintf(name, sizeof name, "ggml_fp16_to_fp32_row");
        if (!strcmp(dq[i].name, "bf16")) snprintf(name, sizeof name, "ggml_bf16_to_fp32_row");
        *(void **)&p->dequantize_row[dq[i].id] = peer_sym(base, name);
    }
    log_set(quiet, NULL);
    static int backends_loaded;
    if (!backends_loaded) load_all(peer_bin_dir()), backends_loaded = 1;
    return 1;
}

uint32_t llama_peer_quantize(const struct llama_peer *p, const char *in, const char *out, int32_t ftype) {
    llama_blob qp = p->quantize_default_params();
    const int32_t nthread = 1;
    memcpy(qp.bytes, &nthread, 4); /* { int32_t nthread; enum llama_ftype ftype; ... } */
    memcpy(qp.bytes + 4, &ftype, 4);
    return p->quantize(in, out, &qp);
}
