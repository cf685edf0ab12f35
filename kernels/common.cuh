/* common.cuh: small device helpers shared by the kernels: warp reductions, unaligned-safe integer
 * loads from quantised blocks, and launch-error plumbing. Included only by nvcc. */
#ifndef INFER_COMMON_CUH
#define INFER_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

#define WARP_SIZE 32

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* 4 bytes from an address that is only 2-byte aligned (Q8_0, Q4_0, IQ4_NL and Q6_K blocks have
 * odd sizes): two 16-bit loads. */
static __device__ __forceinline__ int load_int_a2(const uint8_t *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (int)((uint32_t)q[0] | ((uint32_t)q[1] << 16));
}

/* 4 bytes from a 4-byte aligned address. */
static __device__ __forceinline__ int load_int_a4(const uint8_t *p) { return *(const int *)p; }

#endif
