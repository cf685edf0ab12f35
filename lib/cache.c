/* cache: KV cache storage (see cache.h for the layout and why). */
#include "cache.h"

#include <string.h>

infer_status kv_cache_create(struct infer_backend *be, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int64_t row,
                             struct kv_cache **out) {
    infer_status st = INFER_OK;
    *out = NULL;
    if (n_layer < 1 || n_seq < 1 || n_ctx < 1 || row < 1)
        return infer_fail(INFER_E_ARG, "kv cache: n_layer %d n_seq %d n_ctx %d row %lld: expected all >= 1", n_layer,
                          n_seq, n_ctx, (long long)row);
    /* halves per tensor; doubles so an absurd n_ctx * n_seq is refused instead of wrapping */
    double halves = (double)n_layer * n_seq * n_ctx * (double)row;
    if (halves * 2 > (double)(SIZE_MAX / 4))
        return infer_fail(INFER_E_OOM, "kv cache: %.0f bytes for K and V (n_layer %d x n_seq %d x n_ctx %d x %lld "
                          "f16): too large", halves * 4, n_layer, n_seq, n_ctx, (long long)row);
    struct kv_cache *c = xcalloc(1, sizeof *c);
    if (!c) return INFER_OOM("kv cache");
    c->be = be, c->n_layer = n_layer, c->n_seq = n_seq, c->n_ctx = n_ctx, c->row = row;
    size_t bytes = (size_t)halves * sizeof(uint16_t);
    c->len = xcalloc((size_t)n_seq, sizeof *c->len);
    if (!c->len) {
        st = INFER_OOM("kv cache lengths");
        goto fail;
    }
    if ((st = be->ops->alloc(be, bytes, (void **)&c->k)) != INFER_OK ||
        (st = be->ops->alloc(be, bytes, (void **)&c->v)) != INFER_OK) {
        st = infer_fail(INFER_E_OOM, "kv cache: %zu bytes each for K and V (n_layer %d x n_seq %d x n_ctx %d x %lld "
                        "f16) do not fit", bytes, n_layer, n_seq, n_ctx, (long long)row);
        goto fail;
    }
    *out = c;
    return INFER_OK;
fail:
    kv_cache_free(c);
    return st;
}

void kv_cache_free(struct kv_cache *c) {
    if (!c) return;
    c->be->ops->free(c->be, c->k);
    c->be->ops->free(c->be, c->v);
    xfree(c->len);
    xfree(c);
}

static size_t kv_cache_off(const struct kv_cache *c, int32_t layer, int32_t seq) {
    return (((size_t)layer * (size_t)c->n_seq + (size_t)seq) * (size_t)c->n_ctx) * (size_t)c->row;
}

uint16_t *kv_cache_k(const struct kv_cache *c, int32_t layer, int32_t seq) { return c->k + kv_cache_off(c, layer, seq); }
uint16_t *kv_cache_v(const struct kv_cache *c, int32_t layer, int32_t seq) { return c->v + kv_cache_off(c, layer, seq); }
