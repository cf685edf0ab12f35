/* test-api: the public API as a user sees it (include/infer.h only, plus synth to make a model):
 * load, metadata and tensor queries, the tokenizer wrappers, and the error contract (status, NULL
 * out-parameter, a message naming the file). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infer.h"
#include "../tools/synth.h"
#include "t.h"

int main(void) {
    char dir[] = "/tmp/test-api-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char path[256];
    snprintf(path, sizeof path, "%s/qwen3.gguf", dir);
    struct synth_params sp;
    T_CHECK(synth_params_default("qwen3", &sp) == INFER_OK, "synth defaults");
    sp.ftype = "Q8_0";
    T_CHECK(synth_write(&sp, path) == INFER_OK, "synth: %s", infer_last_error());

    infer_model *m = NULL;
    infer_status st = infer_model_load(path, NULL, &m);
    T_CHECK(st == INFER_OK && m, "load: %s", infer_last_error());
    if (!m) return t_done();
    T_CHECK(!strcmp(infer_model_arch(m), "qwen3"), "arch %s", infer_model_arch(m));

    /* metadata: every key listed, values as text */
    int64_t n = infer_model_meta_count(m);
    int found = 0;
    for (int64_t i = 0; i < n; i++) found += !strcmp(infer_model_meta_key(m, i), "general.architecture");
    T_CHECK(n > 10 && found == 1, "%lld keys, architecture listed %d times", (long long)n, found);
    char buf[64];
    int32_t len = infer_model_meta_str(m, "general.architecture", buf, sizeof buf);
    T_CHECK(len == 5 && !strcmp(buf, "qwen3"), "meta_str architecture: %d '%s'", len, buf);
    len = infer_model_meta_str(m, "qwen3.block_count", buf, sizeof buf);
    T_CHECK(len > 0 && atoi(buf) == sp.n_layer, "block_count '%s' vs %d", buf, sp.n_layer);
    T_CHECK(infer_model_meta_str(m, "no.such.key", buf, sizeof buf) == -1, "absent key is -1");
    len = infer_model_meta_str(m, "general.architecture", NULL, 0);
    T_CHECK(len == 5, "size query with cap 0: %d", len);

    /* tensors */
    int64_t ti = infer_model_find_tensor(m, "token_embd.weight");
    infer_tensor_info info;
    T_CHECK(ti >= 0 && infer_model_tensor(m, ti, &info) == INFER_OK && !strcmp(info.name, "token_embd.weight") &&
                info.ne[0] == sp.n_embd && info.ne[1] == sp.n_vocab && info.nbytes > 0,
            "token_embd info");
    T_CHECK(infer_model_tensor(m, infer_model_tensor_count(m), &info) == INFER_E_ARG, "index past the end is INFER_E_ARG");
    T_CHECK(infer_model_find_tensor(m, "nope") == -1, "absent tensor is -1");

    /* tokens: a round trip through the model's vocabulary */
    const char *text = "Hello world, this is libinfer!";
    int32_t ids[128];
    int32_t nt = infer_tokenize(m, text, strlen(text), ids, 128, 0);
    T_CHECK(nt > 0 && nt < (int32_t)strlen(text), "tokenize: %d tokens", nt);
    T_CHECK(infer_tokenize(m, text, strlen(text), NULL, 0, 0) == nt, "size query gives the same count");
    char out[256];
    int32_t nb = infer_detokenize(m, ids, nt, out, sizeof out - 1, 0);
    T_CHECK(nb == (int32_t)strlen(text) && !memcmp(out, text, (size_t)nb), "detokenize round trip (%d bytes)", nb);
    infer_token_stream ts;
    memset(&ts, 0, sizeof ts);
    size_t pos = 0;
    for (int32_t i = 0; i < nt; i++) {
        int32_t k = infer_token_stream_put(m, &ts, ids[i], 0, out + pos, (int32_t)(sizeof out - pos));
        if (k > 0) pos += (size_t)k;
    }
    int32_t k = infer_token_stream_flush(&ts, out + pos, (int32_t)(sizeof out - pos));
    if (k > 0) pos += (size_t)k;
    T_CHECK(pos == strlen(text) && !memcmp(out, text, pos), "streaming round trip");
    T_CHECK(infer_vocab_size(m) == sp.n_vocab, "vocab size %d vs %d", infer_vocab_size(m), sp.n_vocab);
    T_CHECK(infer_token_to_piece(m, infer_vocab_size(m), out, sizeof out, 0) == -1, "invalid id is -1");
    int32_t eos = infer_token_eos(m);
    T_CHECK(eos >= 0 && infer_token_is_eog(m, eos), "eos %d ends generation", eos);
    infer_model_free(m);
    infer_model_free(NULL);

    /* the error contract */
    m = (infer_model *)dir;
    st = infer_model_load("/nonexistent/x.gguf", NULL, &m);
    T_CHECK(st == INFER_E_IO && m == NULL && strstr(infer_last_error(), "/nonexistent/x.gguf"), "missing file: %s",
            infer_last_error());
    T_CHECK(infer_model_load(NULL, NULL, &m) == INFER_E_ARG, "NULL path");
    T_CHECK(!strncmp(infer_status_str(INFER_E_FORMAT), "INFER_E_FORMAT", 14), "status string");
    unlink(path);
    rmdir(dir);
    return t_done();
}
