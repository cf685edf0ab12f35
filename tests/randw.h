/* randw: random valid weights of any type for the kernel tests, drawn from the caller's generator
 * (so each test keeps its own reproducible stream). */
#ifndef TEST_RANDW_H
#define TEST_RANDW_H

#include <stdint.h>

/* n_out rows of n_in weights of `type` into w: float types from uniform values in [-1, 1] (quantised
 * through lib/quant.c); quantised types as random bytes whose f16 scales are small finite numbers
 * (random bytes could spell NaN or Inf there). rnd returns 32 random bits per call. */
void randw_weights(int32_t type, uint8_t *w, int64_t n_in, int64_t n_out, uint32_t (*rnd)(void));

#endif
