/* llama_peer: binding the llama.cpp oracle's C API at run time (see llama_peer.h). */
#include "llama_peer.h"

#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../peer.h"

static void quiet(int level, const char *text, void *user) { (void)level, (void)text, (void)user; }

#define BIND(lib, field, name) ((*(void **)&p->field = peer_sym(lib, name)) != NULL)

/* The defaults llama.cpp v0.5.0 returns (llama_model_default_params and friends); a field declared
 * at the wrong offset reads as some other default and fails here. */
static const char *check_layouts(const struct llama_peer *p) {
    const struct llama_peer_model_params m = p->model_default_params();
    if (m.devices || m.tensor_buft_overrides || m.n_gpu_layers != -1 || m.main_gpu != 0 || m.tensor_split ||
        m.progress_callback || m.kv_overrides || m.vocab_only || m.check_tensors || !m.use_extra_bufts ||
        m.no_host || m.no_alloc || m.load_mtp)
        return "llama_model_params layout differs from llama.cpp v0.5.0's";
    const struct llama_peer_context_params c = p->context_default_params();
    if (c.n_ctx != 512 || c.n_batch != 2048 || c.n_ubatch != 512 || c.n_seq_max != 1 || c.n_rs_seq != 0 ||
        c.n_outputs_max != 0 || c.n_outputs_max_per_seq != 1 || c.ctx_type != 0 || c.rope_freq_base != 0.0f ||
        c.yarn_ext_factor != -1.0f || c.yarn_beta_slow != -1.0f || c.yarn_orig_ctx != 0 ||
        c.defrag_thold != -1.0f || c.cb_eval || c.type_k != 1 || c.type_v != 1 || c.abort_callback ||
        c.embeddings || !c.offload_kqv || !c.no_perf || !c.op_offload || !c.swa_full || c.kv_unified ||
        c.samplers || c.n_samplers || c.ctx_other)
        return "llama_context_params layout differs from llama.cpp v0.5.0's";
    const struct llama_peer_quantize_params q = p->quantize_default_params();
    if (q.nthread != 0 || q.ftype != 7 || q.output_tensor_type != 43 || q.token_embedding_type != 43 ||
        q.allow_requantize || !q.quantize_output_tensor || q.only_copy || q.pure || q.keep_split ||
        q.dry_run || q.imatrix || q.kv_overrides || q.tt_overrides || q.prune_layers || q.max_buf_size == 0)
        return "llama_model_quantize_params layout differs from llama.cpp v0.5.0's";
    int32_t tok[3] = {1, 2, 3};
    const struct llama_peer_batch b = p->batch_get_one(tok, 3);
    if (b.n_tokens != 3 || b.token != tok || b.embd || b.pos || b.n_seq_id || b.seq_id || b.logits)
        return "llama_batch layout differs from llama.cpp v0.5.0's";
    return NULL;
}

/* INFER_PEER_CPU unset or empty: every backend of the folder, so llama.cpp picks its best CPU variant for
 * this machine (ggml_backend_load_all_from_path). Set to a variant name ("haswell", "x64"): that one
 * library alone (ggml_backend_load), so the bounds are also met on a CPU backend the machine would not
 * pick. NULL on success, else why not. */
static const char *load_cpu_backend(void *ggml, void (*load_all)(const char *)) {
    static char msg[4600];
    const char *variant = getenv("INFER_PEER_CPU");
    if (!variant || !*variant) {
        load_all(peer_bin_dir());
        return NULL;
    }
    void *(*load_one)(const char *) = (void *(*)(const char *))peer_sym(ggml, "ggml_backend_load");
    if (!load_one) return "the llama.cpp peer lacks ggml_backend_load";
    char path[4400];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", peer_bin_dir(), variant);
    if (load_one(path)) return NULL;
    /* ggml refuses a variant whose ggml_backend_score is 0 on this CPU, or a file that is not there */
    snprintf(msg, sizeof msg, "INFER_PEER_CPU=%s: ggml_backend_load(%s) failed (missing, or not for this CPU)",
             variant, path);
    return msg;
}

/* dl_iterate_phdr callback: the first loaded object named libggml-cpu-*.so into *user. */
static int find_cpu_lib(struct dl_phdr_info *info, size_t size, void *user) {
    (void)size;
    const char *slash = strrchr(info->dlpi_name, '/');
    const char *name = slash ? slash + 1 : info->dlpi_name;
    if (strncmp(name, "libggml-cpu-", 12) != 0) return 0;
    snprintf((char *)user, 64, "%s", name);
    return 1;
}

const char *llama_peer_cpu_variant(void) {
    static char name[64];
    name[0] = 0;
    dl_iterate_phdr(find_cpu_lib, name);
    return name[0] ? name : "none";
}

int llama_peer_load(struct llama_peer *p, const char **why) {
    static const struct {
        int id;
        const char *sym;
    } dq[] = {{1, "ggml_fp16_to_fp32_row"},  {2, "dequantize_row_q4_0"},    {3, "dequantize_row_q4_1"},
              {6, "dequantize_row_q5_0"},    {7, "dequantize_row_q5_1"},    {8, "dequantize_row_q8_0"},
              {10, "dequantize_row_q2_K"},   {11, "dequantize_row_q3_K"},   {12, "dequantize_row_q4_K"},
              {13, "dequantize_row_q5_K"},   {14, "dequantize_row_q6_K"},   {15, "dequantize_row_q8_K"},
              {20, "dequantize_row_iq4_nl"}, {23, "dequantize_row_iq4_xs"}, {30, "ggml_bf16_to_fp32_row"},
              {39, "dequantize_row_mxfp4"}};
    memset(p, 0, sizeof *p);
    void *base = peer_open("libggml-base.so", why);
    void *ggml = base ? peer_open("libggml.v0.5.0.so", why) : NULL;
    void *llama = ggml ? peer_open("libllama.v0.5.0.so", why) : NULL;
    if (!llama) return 0;
    void (*load_all)(const char *) =
        (void (*)(const char *))peer_sym(ggml, "ggml_backend_load_all_from_path");
    void (*backend_init)(void) = (void (*)(void))peer_sym(llama, "llama_backend_init");
    void (*log_set)(void (*)(int, const char *, void *), void *) =
        (void (*)(void (*)(int, const char *, void *), void *))peer_sym(llama, "llama_log_set");
    if (!load_all || !backend_init || !log_set || !BIND(llama, model_load, "llama_model_load_from_file") ||
        !BIND(llama, model_free, "llama_model_free") ||
        !BIND(llama, model_default_params, "llama_model_default_params") ||
        !BIND(llama, context_default_params, "llama_context_default_params") ||
        !BIND(llama, quantize_default_params, "llama_model_quantize_default_params") ||
        !BIND(llama, init_from_model, "llama_init_from_model") || !BIND(llama, ctx_free, "llama_free") ||
        !BIND(llama, n_ctx, "llama_n_ctx") || !BIND(llama, batch_get_one, "llama_batch_get_one") ||
        !BIND(llama, decode, "llama_decode") || !BIND(llama, get_logits_ith, "llama_get_logits_ith") ||
        !BIND(llama, model_get_vocab, "llama_model_get_vocab") ||
        !BIND(llama, vocab_n_tokens, "llama_vocab_n_tokens") || !BIND(llama, tokenize, "llama_tokenize") ||
        !BIND(llama, detokenize, "llama_detokenize") || !BIND(llama, model_n_embd, "llama_model_n_embd") ||
        !BIND(llama, model_n_layer, "llama_model_n_layer") ||
        !BIND(llama, model_n_head, "llama_model_n_head") ||
        !BIND(llama, model_n_head_kv, "llama_model_n_head_kv") ||
        !BIND(llama, model_n_layer_nextn, "llama_model_n_layer_nextn") ||
        !BIND(llama, quantize, "llama_model_quantize") || !BIND(llama, model_desc, "llama_model_desc") ||
        !BIND(llama, set_embeddings_nextn, "_Z26llama_set_embeddings_nextnP13llama_contextbb") ||
        !BIND(llama, get_embeddings_nextn_ith, "_Z30llama_get_embeddings_nextn_ithP13llama_contexti")) {
        *why = "the llama.cpp peer lacks a symbol we need (not llama.cpp v0.5.0?)";
        return -1;
    }
    for (size_t i = 0; i < sizeof dq / sizeof *dq; i++)
        *(void **)&p->dequantize_row[dq[i].id] = peer_sym(base, dq[i].sym);
    log_set(quiet, NULL);
    static int initialised;
    if (!initialised) {
        const char *bad_cpu = load_cpu_backend(ggml, load_all);
        if (bad_cpu) {
            *why = bad_cpu;
            return -1;
        }
        backend_init();
        initialised = 1;
    }
    const char *bad = check_layouts(p);
    if (bad) {
        *why = bad;
        return -1;
    }
    return 1;
}

static bool count_progress(float progress, void *user) {
    (void)progress;
    ++*(int *)user;
    return true;
}

void *llama_peer_model_load(const struct llama_peer *p, const char *path, int load_mtp,
                            const struct llama_peer_expect *e, const char **why) {
    return llama_peer_model_load_ngl(p, path, load_mtp, 0, NULL, e, why);
}

void *llama_peer_model_load_ngl(const struct llama_peer *p, const char *path, int load_mtp, int32_t n_gpu_layers,
                                const struct llama_peer_buft_override *ot, const struct llama_peer_expect *e,
                                const char **why) {
    static char msg[256];
    int calls = 0;
    struct llama_peer_model_params mp = p->model_default_params();
    mp.n_gpu_layers = n_gpu_layers;
    mp.tensor_buft_overrides = ot;
    mp.load_mtp = load_mtp != 0;
    mp.progress_callback = count_progress;
    mp.progress_callback_user_data = &calls;
    void *m = p->model_load(path, mp);
    if (!m) {
        *why = "llama_model_load_from_file failed";
        return NULL;
    }
    const struct llama_peer_expect got = {p->model_n_embd(m),
                                          p->model_n_layer(m),
                                          p->model_n_head(m),
                                          p->model_n_head_kv(m),
                                          p->vocab_n_tokens(p->model_get_vocab(m)),
                                          p->model_n_layer_nextn(m)};
    const struct llama_peer_expect want = e ? *e : (struct llama_peer_expect){0};
    if (calls == 0)
        snprintf(msg, sizeof msg, "the progress callback never ran: llama_model_params arrived garbled");
    else if ((want.n_embd && want.n_embd != got.n_embd) || (want.n_layer && want.n_layer != got.n_layer) ||
             (want.n_head && want.n_head != got.n_head) ||
             (want.n_head_kv && want.n_head_kv != got.n_head_kv) ||
             (want.n_vocab && want.n_vocab != got.n_vocab) ||
             (want.n_layer_nextn && want.n_layer_nextn != got.n_layer_nextn))
        snprintf(msg, sizeof msg,
                 "llama.cpp sees n_embd %d n_layer %d n_head %d n_head_kv %d n_vocab %d nextn %d", got.n_embd,
                 got.n_layer, got.n_head, got.n_head_kv, got.n_vocab, got.n_layer_nextn);
    else
        return m;
    p->model_free(m);
    *why = msg;
    return NULL;
}

void *llama_peer_vocab_load(const struct llama_peer *p, const char *path) {
    struct llama_peer_model_params mp = p->model_default_params();
    mp.vocab_only = true;
    return p->model_load(path, mp);
}

void *llama_peer_context(const struct llama_peer *p, void *model, uint32_t n_ctx, int32_t ctx_type,
                         void *other) {
    struct llama_peer_context_params cp = p->context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = cp.n_ubatch = n_ctx;
    cp.n_threads = cp.n_threads_batch = 2; /* the CI machine has 2 cores */
    const int cap = getenv("INFER_MAX_THREADS") ? atoi(getenv("INFER_MAX_THREADS")) : 0;
    if (cap == 1) cp.n_threads = cp.n_threads_batch = 1; /* as our contexts (lib/context.c) */
    cp.ctx_type = ctx_type;
    cp.ctx_other = other;
    void *c = p->init_from_model(model, cp);
    if (c && p->n_ctx(c) < n_ctx) { /* llama.cpp may round n_ctx up, never down */
        p->ctx_free(c);
        return NULL;
    }
    return c;
}

int32_t llama_peer_eval(const struct llama_peer *p, void *ctx, int32_t *tokens, int32_t n, float *out,
                        int32_t n_vocab) {
    const int32_t rc = p->decode(ctx, p->batch_get_one(tokens, n));
    if (rc != 0) return rc;
    const float *logits = p->get_logits_ith(ctx, -1);
    if (!logits) return -100;
    memcpy(out, logits, sizeof(float) * (size_t)n_vocab);
    return 0;
}

int llama_peer_logits_run(const struct llama_peer *p, void *ctx, const int32_t *tokens, int n_prompt, int n_all,
                          int32_t n_vocab, float *out) {
    int32_t *tok = malloc((size_t)n_all * sizeof *tok); /* llama_batch_get_one takes a mutable pointer */
    int8_t *flags = malloc((size_t)n_prompt);
    int ok = tok && flags;
    if (ok) {
        memcpy(tok, tokens, (size_t)n_all * sizeof *tok);
        memset(flags, 1, (size_t)n_prompt);
        struct llama_peer_batch b = p->batch_get_one(tok, n_prompt);
        b.logits = flags;
        ok = p->decode(ctx, b) == 0;
    }
    for (int i = 0; ok && i < n_prompt; i++) {
        const float *l = p->get_logits_ith(ctx, i);
        if (!l) ok = 0;
        else memcpy(out + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
    for (int i = n_prompt; ok && i < n_all; i++) {
        const float *l = p->decode(ctx, p->batch_get_one(tok + i, 1)) == 0 ? p->get_logits_ith(ctx, -1) : NULL;
        if (!l) ok = 0;
        else memcpy(out + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
    free(tok), free(flags);
    return ok;
}

uint32_t llama_peer_quantize(const struct llama_peer *p, const char *in, const char *out, int32_t ftype) {
    return llama_peer_quantize_imatrix(p, in, out, ftype, NULL);
}

uint32_t llama_peer_quantize_imatrix(const struct llama_peer *p, const char *in, const char *out,
                                     int32_t ftype, const struct llama_peer_imatrix *im) {
    struct llama_peer_quantize_params qp = p->quantize_default_params();
    qp.nthread = 1;
    qp.ftype = ftype;
    qp.imatrix = im;
    return p->quantize(in, out, &qp);
}
