/* common.cuh: what every kernel file shares: the one way to launch a kernel and to reach dynamic shared
 * memory, warp reductions, unaligned-safe integer loads from quantised blocks. Included by nvcc, and by
 * g++ for the CUDA emulator (INFER_EMU: emu/include stands in for the CUDA headers, see emu/README.md). */
#ifndef INFER_COMMON_CUH
#define INFER_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

#define WARP_SIZE 32

/* launch_kernel(kernel, grid, block, shared_bytes, stream, args...): kernel<<<grid, block, shared_bytes,
 * stream>>>(args...). Launch errors are read with cudaGetLastError as after <<<>>>. The emulator defines
 * it as a macro that runs the kernel over fibers when the stream reaches it. */
#ifndef INFER_EMU
template <typename... P, typename... A>
static inline void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t s,
                                 A... args) {
    kernel<<<grid, block, shared_bytes, s>>>(args...);
}

/* The block's dynamic shared memory (the launch's shared_bytes), 16-byte aligned. */
template <typename T> static __device__ __forceinline__ T *dyn_smem() {
    extern __shared__ __align__(16) unsigned char dyn_smem_bytes[];
    return (T *)dyn_smem_bytes;
}
#endif

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

/* kv_hadamard(x, n) by the 32 lanes of a warp, x in shared memory (n a power of two >= 32): the scaling
 * lane-strided, then each butterfly stage's n / 2 pairs spread over the lanes, a __syncwarp between stages. Every
 * element goes through the f32 operations of the serial loop in the same order (a stage's pairs are disjoint),
 * so the result is kv_hadamard's bit for bit. Every lane of the warp must call it. */
static __device__ __forceinline__ void warp_hadamard(float *x, int n, int lane) {
    const float s = 1.0f / sqrtf((float)n);
    for (int i = lane; i < n; i += WARP_SIZE) x[i] *= s;
    __syncwarp();
    for (int len = 1; len < n; len <<= 1) {
        for (int q = lane; q < n / 2; q += WARP_SIZE) {
            const int j = q / len * 2 * len + q % len;
            const float u = x[j], v = x[j + len];
            x[j] = u + v, x[j + len] = u - v;
        }
        __syncwarp();
    }
}

/* 4 bytes from an address that is only 2-byte aligned (Q8_0, Q4_0, IQ4_NL and Q6_K blocks have
 * odd sizes): two 16-bit loads. */
static __device__ __forceinline__ int load_int_a2(const uint8_t *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (int)((uint32_t)q[0] | ((uint32_t)q[1] << 16));
}

/* 4 bytes from any address (MXFP4's 17-byte blocks): four byte loads. */
static __device__ __forceinline__ int load_int_a1(const uint8_t *p) {
    return (int)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* 4 bytes from a 4-byte aligned address. */
static __device__ __forceinline__ int load_int_a4(const uint8_t *p) { return *(const int *)p; }

#endif
