/* llama_peer: the few llama.cpp entry points our conformance tests call, bound at run time.
 *
 * The declarations are our own, written from the field lists of llama.h in llama.cpp v0.5.0 (the
 * source shipped in node-llama-cpp 3.22.1 as llama/gitRelease.bundle, the same release as the npm
 * binaries in @node-llama-cpp/linux-x64 3.22.1). Three structs travel by value (model, context and
 * batch), so their layouts must be exact: llama_peer_load checks every default value it can see
 * against what llama.cpp documents, and llama_peer_model_load checks that the model llama.cpp built
 * has the dimensions the caller expects and that the progress callback we passed was called (a
 * shifted field would drop it). enums are int-sized; bool is C's _Bool (one byte on x86-64). The MTP
 * entry points come from src/llama-ext.h (exported with C++ linkage, plain C types only). */
#ifndef TEST_LLAMA_PEER_H
#define TEST_LLAMA_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct llama_peer_model_params { /* llama_model_params */
    void *devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers;
    int32_t split_mode, load_mode, lazy_mode; /* enums */
    int32_t main_gpu;
    const float *tensor_split;
    bool (*progress_callback)(float progress, void *user);
    void *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
};

struct llama_peer_context_params { /* llama_context_params */
    uint32_t n_ctx, n_batch, n_ubatch, n_seq_max, n_rs_seq, n_outputs_max, n_outputs_max_per_seq;
    int32_t n_threads, n_threads_batch;
    int32_t ctx_type, rope_scaling_type, pooling_type, attention_type, flash_attn_type; /* enums */
    float rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
    uint32_t yarn_orig_ctx;
    float defrag_thold;
    void *cb_eval, *cb_eval_user_data;
    int32_t type_k, type_v; /* ggml_type */
    void *abort_callback, *abort_callback_data;
    bool embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified;
    void *samplers;
    size_t n_samplers;
    void *ctx_other;
};

struct llama_peer_quantize_params { /* llama_model_quantize_params */
    int32_t nthread;
    int32_t ftype, output_tensor_type, token_embedding_type; /* enums */
    bool allow_requantize, quantize_output_tensor, only_copy, pure, keep_split, dry_run;
    const void *imatrix, *kv_overrides, *tt_overrides;
    const int32_t *prune_layers;
    size_t max_buf_size;
};

struct llama_peer_imatrix { /* llama_model_imatrix_data: per tensor, ne[0] * ne[2] weights */
    const char *name;
    const float *data;
    size_t size;
};

struct llama_peer_batch { /* llama_batch */
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
};

enum { LLAMA_PEER_CTX_DEFAULT = 0, LLAMA_PEER_CTX_MTP = 1 };

struct llama_peer {
    /* libllama */
    struct llama_peer_model_params (*model_default_params)(void);
    struct llama_peer_context_params (*context_default_params)(void);
    struct llama_peer_quantize_params (*quantize_default_params)(void);
    void *(*model_load)(const char *path, struct llama_peer_model_params params);
    void (*model_free)(void *model);
    void *(*init_from_model)(void *model, struct llama_peer_context_params params);
    void (*ctx_free)(void *ctx);
    uint32_t (*n_ctx)(const void *ctx);
    struct llama_peer_batch (*batch_get_one)(int32_t *tokens, int32_t n_tokens);
    int32_t (*decode)(void *ctx, struct llama_peer_batch batch);
    float *(*get_logits_ith)(void *ctx, int32_t i);
    const void *(*model_get_vocab)(const void *model);
    int32_t (*vocab_n_tokens)(const void *vocab);
    /* llama_tokenize / llama_detokenize: the snprintf rule, but a short buffer gives minus the count */
    int32_t (*tokenize)(const void *vocab, const char *text, int32_t len, int32_t *out, int32_t cap,
                        bool add_special, bool parse_special);
    int32_t (*detokenize)(const void *vocab, const int32_t *ids, int32_t n, char *text, int32_t cap,
                          bool remove_special, bool unparse_special);
    int32_t (*model_n_embd)(const void *model), (*model_n_layer)(const void *model),
        (*model_n_head)(const void *model), (*model_n_head_kv)(const void *model),
        (*model_n_layer_nextn)(const void *model);
    uint32_t (*quantize)(const char *in, const char *out, const struct llama_peer_quantize_params *params);
    int32_t (*model_desc)(const void *model, char *buf, size_t cap); /* "llama ?B Q3_K - Medium" */
    /* MTP staging API (src/llama-ext.h, C++ linkage: bound by mangled name). set_embeddings_nextn(ctx, on,
     * masked) makes a context keep h_nextn, the post-output_norm hidden state (the MTP head's input on a
     * target context, its own output on an MTP one); get_embeddings_nextn_ith reads row i of it (unmasked:
     * token i of the batch; masked: output i). */
    void (*set_embeddings_nextn)(void *ctx, bool value, bool masked);
    float *(*get_embeddings_nextn_ith)(void *ctx, int32_t i);
    /* libggml-base: ggml's row decoders by ggml type id (F16/BF16: the fp16/bf16 row converters); NULL if
     * absent */
    void (*dequantize_row[43])(const void *x, float *y, int64_t k);
};

/* Binds the peer once (quiet logging, a CPU backend loaded: see llama_peer_cpu_variant) and checks the
 * struct layouts through the default values. Returns 0 with *why set if it is not installed or a library
 * does not dlopen (a test skips with T_SKIP_PEER: a failure under INFER_REQUIRE_PEER=1); -1 with *why set
 * if a symbol is missing, INFER_PEER_CPU names a variant that does not load, or a layout check fails (a
 * test must then fail, not skip); 1 when ready. */
int llama_peer_load(struct llama_peer *p, const char **why);

/* The CPU backend library llama.cpp runs on in this process ("libggml-cpu-zen4.so"), found among the
 * loaded objects; "none" before llama_peer_load. INFER_PEER_CPU=<variant> makes llama_peer_load load
 * libggml-cpu-<variant>.so alone instead of the one llama.cpp picks. */
const char *llama_peer_cpu_variant(void);

/* What the caller expects of a model; 0 = do not check. */
struct llama_peer_expect {
    int32_t n_embd, n_layer, n_head, n_head_kv, n_vocab, n_layer_nextn;
};
/* Loads on the CPU (load_mtp as given, so llama.cpp also checks the MTP tensors) and checks the
 * dims in *e (may be NULL) and that our progress callback ran. NULL on failure with *why set. */
void *llama_peer_model_load(const struct llama_peer *p, const char *path, int load_mtp,
                            const struct llama_peer_expect *e, const char **why);
/* llama_model_tensor_buft_override: tensors whose name the pattern (std::regex) finds go to buffer type buft;
 * an array of them ends with {NULL, NULL}. */
struct llama_peer_buft_override {
    const char *pattern;
    void *buft; /* ggml_backend_buffer_type_t */
};
/* The same with n_gpu_layers layers offloaded (bench-peer -ngl, with the CUDA build of the peer) and the tensor
 * overrides ot (NULL: none; e.g. bench-peer --cpu-moe, as llama.cpp's own flag). */
void *llama_peer_model_load_ngl(const struct llama_peer *p, const char *path, int load_mtp, int32_t n_gpu_layers,
                                const struct llama_peer_buft_override *ot, const struct llama_peer_expect *e,
                                const char **why);
/* The tokenizer of a GGUF file alone (vocab_only: no weights; a vocabulary-only file loads); NULL if
 * llama.cpp refuses it. Free with model_free; its vocabulary is model_get_vocab of it. */
void *llama_peer_vocab_load(const struct llama_peer *p, const char *path);
/* A context of n_ctx cells, 2 threads; ctx_type LLAMA_PEER_CTX_*; other: the main context for MTP
 * (or NULL). Checks llama_n_ctx so the passed struct is known to have arrived intact. */
void *llama_peer_context(const struct llama_peer *p, void *model, uint32_t n_ctx, int32_t ctx_type,
                         void *other);
/* Decodes n tokens as one batch and copies the last position's logits to out (n_vocab floats).
 * Returns llama_decode's status, or -100 if no logits came back. */
int32_t llama_peer_eval(const struct llama_peer *p, void *ctx, int32_t *tokens, int32_t n, float *out,
                        int32_t n_vocab);
/* tokens[0..n_prompt) in one batch with every position's logits, then tokens[n_prompt..n_all) one at a
 * time: out (n_all, n_vocab) holds the logits of every position. 1 on success, 0 if a decode failed. */
int llama_peer_logits_run(const struct llama_peer *p, void *ctx, const int32_t *tokens, int n_prompt, int n_all,
                          int32_t n_vocab, float *out);
/* llama_model_quantize with 1 thread and the given llama_ftype; 0 on success. */
uint32_t llama_peer_quantize(const struct llama_peer *p, const char *in, const char *out, int32_t ftype);
/* The same with an importance matrix: `im` ends with a NULL name (llama-quantize refuses the IQ1/IQ2/IQ3_XXS
 * tensor types, and Q2_K in a Q2_K_S file, without one). */
uint32_t llama_peer_quantize_imatrix(const struct llama_peer *p, const char *in, const char *out,
                                     int32_t ftype, const struct llama_peer_imatrix *im);

#endif
