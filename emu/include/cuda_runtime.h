/* cuda_runtime.h (emulator): the runtime API (cuda_runtime_api.h) and, for C++ (the kernels compiled by
 * g++), the device side: CUDA's keywords, built-in variables, vector types, intrinsics, warp collectives
 * and the launch (emu_device.h). */
#ifndef INFER_EMU_CUDA_RUNTIME_H
#define INFER_EMU_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
#include "emu_device.h"

/* C++ overloads the real header has: a kernel is passed as itself, not as const void *. */
template <typename T> static inline cudaError_t cudaFuncSetAttribute(T *func, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)func, attr, value);
}
template <typename T> static inline cudaError_t cudaMalloc(T **ptr, size_t size) {
    return cudaMalloc((void **)ptr, size);
}
template <typename T> static inline cudaError_t cudaMallocHost(T **ptr, size_t size) {
    return cudaMallocHost((void **)ptr, size);
}
#endif

#endif
