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

#endif
