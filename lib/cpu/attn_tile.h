/* attn_tile: causal attention over f16 cells on AVX-512 (attn_tile.c) and AVX2 (attn_tile_avx2.c), called by
 * cpu_attn. */
#ifndef INFER_CPU_ATTN_TILE_H
#define INFER_CPU_ATTN_TILE_H

#include "cpu.h"

/* Whether cpu_attn_tile computes this call: F16 cells, head_dim a multiple of 16 up to 256, at most 16 query heads
 * per KV head, a CPU with AVX-512. a is already validated by cpu_attn. */
int cpu_attn_tile_takes(const struct attn_args *a);
/* out = attention, every row the same bits whatever the batch (prefill tiles and the decode form agree); fails
 * only when its scratch (64 KiB a thread) cannot be allocated. */
infer_status cpu_attn_tile(const struct attn_args *a, struct pool *p);
/* The same two forms on AVX2 (attn_tile_avx2.c, for CPUs without AVX-512): the same limits and the same bits. */
int cpu_attn_tile_avx2_takes(const struct attn_args *a);
infer_status cpu_attn_tile_avx2(const struct attn_args *a, struct pool *p);

/* What both files' tile forms share. The rows of tile `tile` of KV head g, n rows a tile (row = token · group + head
 * within the group, n_rows of them): each row's last key, its query and its output (NULL past the end, where the row
 * repeats the tile's last one); returns the longest row's last key. */
static inline int32_t attn_tile_rows(const struct attn_args *a, int group, int64_t n_rows, int g, int64_t tile, int n,
                                     int32_t *last, const float **qrow, float **orow) {
    int32_t max_last = 0;
    for (int r = 0; r < n; r++) {
        int64_t row = tile * n + r;
        const int live = row < n_rows;
        if (!live) row = n_rows - 1;
        const int64_t t = row / group;
        const int h = g * group + (int)(row % group);
        last[r] = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
        if (last[r] > max_last) max_last = last[r];
        qrow[r] = a->q + t * a->q_stride + (int64_t)h * a->head_dim;
        orow[r] = live ? a->out + t * a->out_stride + (int64_t)h * a->head_dim : NULL;
    }
    return max_last;
}

/* Work item `it` as (KV head, tile), the tiles in the order first, last, second, second last, ...: the pool's
 * contiguous claims then hold tiles of about equal total length (a causal tile's cost grows with its position). */
static inline void attn_tile_item(const struct attn_args *a, int64_t n_tiles, int64_t it, int *g, int64_t *tile) {
    const int64_t z = it / a->n_head_kv;
    *g = (int)(it % a->n_head_kv);
    *tile = z % 2 ? n_tiles - 1 - z / 2 : z / 2;
}

#endif
