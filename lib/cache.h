/* cache: the KV cache of a context — per layer, per sequence, n_ctx cells of keys and values.
 *
 * Why this layout: the attention op (kernels.h attn_args) reads cell j as position j of one
 * sequence, so each sequence owns a contiguous block of n_ctx cells and its positions are always
 * 0..len-1 (no cell map, no holes). Truncation (infer_seq_rm) is then just a shorter len, and
 * appending writes cells len.. . Only f16 cells: the attention op takes f16 K/V.
 *
 * Layout: k[layer][seq][cell][n_head_kv * head_dim] f16, v the same; len[seq] cells in use.
 */
#ifndef INFER_CACHE_H
#define INFER_CACHE_H

#include <stdint.h>

#include "backend.h"

struct kv_cache {
    struct infer_backend *be; /* borrowed: owns k and v */
    int32_t n_layer, n_seq, n_ctx;
    int64_t row;              /* n_head_kv * head_dim: halves per cell */
    uint16_t *k, *v;          /* (n_layer, n_seq, n_ctx, row) f16 */
    int32_t *len;             /* (n_seq) cells in use */
};

/* Gives *out with every sequence empty; INFER_E_OOM (with the byte count) when it does not fit. */
infer_status kv_cache_create(struct infer_backend *be, int32_t n_layer, int32_t n_seq, int32_t n_ctx, int64_t row,
                             struct kv_cache **out);
void kv_cache_free(struct kv_cache *c); /* NULL is a no-op */
/* First cell of (layer, seq) in k / v. */
uint16_t *kv_cache_k(const struct kv_cache *c, int32_t layer, int32_t seq);
uint16_t *kv_cache_v(const struct kv_cache *c, int32_t layer, int32_t seq);

#endif
