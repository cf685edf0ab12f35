/* copy.cu: device-to-device byte copy as a kernel (cuda_copy, declared in lib/device.h).
 * Written as a kernel rather than cudaMemcpy because its first use is the bandwidth probe
 * (infer_device_bandwidth): the roofline denominator should be what a streaming kernel of ours can
 * reach, not what the copy engine reaches.
 * Layout: when dst, src and bytes are all 16-byte aligned, thread t of block b moves the 16-byte words
 * b * COPY_THREADS * COPY_UNROLL + u * COPY_THREADS + t for u < COPY_UNROLL (all loads first, then the
 * stores: COPY_UNROLL loads in flight per thread, coalesced per u), grid-striding when the grid is
 * capped. Anything else (unaligned pointers, a length that is not a multiple of 16) takes a plain
 * byte-per-thread kernel: correct, slow, not used by the probe.
 * dst and src must not overlap. Bytes per call: reads `bytes`, writes `bytes`.
 */
#include "common.cuh"

enum { COPY_THREADS = 256, COPY_UNROLL = 4, COPY_MAX_BLOCKS = 1 << 20 };

static __global__ void __launch_bounds__(COPY_THREADS)
    copy16_kernel(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n16) {
    const size_t step = (size_t)gridDim.x * COPY_THREADS * COPY_UNROLL;
    for (size_t base = (size_t)blockIdx.x * COPY_THREADS * COPY_UNROLL + threadIdx.x; base < n16; base += step) {
        uint4 v[COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; u++) {
            const size_t i = base + (size_t)u * COPY_THREADS;
            v[u] = i < n16 ? src[i] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; u++) {
            const size_t i = base + (size_t)u * COPY_THREADS;
            if (i < n16) dst[i] = v[u];
        }
    }
}

static __global__ void __launch_bounds__(COPY_THREADS)
    copy1_kernel(uint8_t *__restrict__ dst, const uint8_t *__restrict__ src, size_t n) {
    const size_t step = (size_t)gridDim.x * COPY_THREADS;
    for (size_t i = (size_t)blockIdx.x * COPY_THREADS + threadIdx.x; i < n; i += step) dst[i] = src[i];
}

extern "C" cudaError_t cuda_copy(void *dst, const void *src, size_t bytes, cudaStream_t s) {
    if (bytes == 0) return cudaSuccess;
    if (!dst || !src) return cudaErrorInvalidValue;
    const bool aligned = (((uintptr_t)dst | (uintptr_t)src | (uintptr_t)bytes) & 15) == 0;
    const size_t per_block = (size_t)COPY_THREADS * (aligned ? COPY_UNROLL * 16 : 1);
    size_t blocks = (bytes + per_block - 1) / per_block;
    if (blocks > COPY_MAX_BLOCKS) blocks = COPY_MAX_BLOCKS; /* the loops stride over the rest */
    if (aligned)
        launch_kernel(copy16_kernel, (unsigned)blocks, COPY_THREADS, 0, s, (uint4 *)dst, (const uint4 *)src, bytes / 16);
    else
        launch_kernel(copy1_kernel, (unsigned)blocks, COPY_THREADS, 0, s, (uint8_t *)dst, (const uint8_t *)src, bytes);
    return cudaGetLastError();
}
