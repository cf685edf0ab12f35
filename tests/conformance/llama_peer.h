/* llama_peer: the few llama.cpp entry points our conformance tests call, declared here (never copied
 * from llama.h). Structs that llama.cpp passes or returns by value are larger than 16 bytes, so on
 * x86-64 they travel in memory: an oversized stand-in is safe as long as it is the last argument,
 * and we only touch fields whose offsets we checked (llama.cpp v0.5.0, as shipped in the npm
 * package @node-llama-cpp/linux-x64 3.22.1). */
#ifndef TEST_LLAMA_PEER_H
#define TEST_LLAMA_PEER_H

#include <stdint.h>

typedef struct {
    unsigned char bytes[512];
} llama_blob; /* llama_model_params, llama_context_params, llama_model_quantize_params, llama_batch */

struct llama_peer {
    void *(*model_load)(const char *path, llama_blob params);
    void (*model_free)(void *model);
    llama_blob (*model_default_params)(void);
    llama_blob (*context_default_params)(void);
    void *(*init_from_model)(void *model, llama_blob params);
    void (*ctx_free)(void *ctx);
    llama_blob (*batch_get_one)(int32_t *tokens, int32_t n);
    int32_t (*decode)(void *ctx, llama_blob batch);
    float *(*get_logits_ith)(void *ctx, int32_t i);
    const void *(*model_get_vocab)(const void *model);
    int32_t (*vocab_n_tokens)(const void *vocab);
    llama_blob (*quantize_default_params)(void);
    uint32_t (*quantize)(const char *in, const char *out, const void *params);
    /* libggml-base.so */
    void (*dequantize_row[43])(const void *x, float *y, int64_t k); /* by ggml type id; NULL if absent */
};

/* Loads the peer once (quiet logging, CPU backends loaded). 0 and *why set if it is not installed. */
int llama_peer_load(struct llama_peer *p, const char **why);
/* llama_model_quantize with nthread 1 and the given llama_ftype; 0 on success. */
uint32_t llama_peer_quantize(const struct llama_peer *p, const char *in, const char *out, int32_t ftype);

#endif
