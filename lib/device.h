/* device: which CUDA devices this process can use. Built without CUDA, or on a machine whose driver
 * is missing or too old (cudaGetDeviceCount fails, e.g. error 35 "insufficient driver"), the answer
 * is zero devices and a reason; every GPU test turns that into a loud SKIP. */
#ifndef INFER_DEVICE_H
#define INFER_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Number of usable CUDA devices (0 when none); *why (may be NULL) explains a zero. */
int device_count(const char **why);
/* Name and memory of device i, for messages and benchmark headers. */
infer_status device_describe(int i, char *name, size_t cap, size_t *total_mem);
/* What one CUDA backend (backend_cuda_create: its stream and matmul state; with INFER_MATMUL=cublas the cuBLAS
 * handle, its workspace and scratch, all allocated at creation) takes of device i: one is made and freed there,
 * *bytes = the device's free memory before less after (0 when it grew meanwhile), *free_before the former. The
 * calling thread's current device is kept. For the plan's overhead (plan.h). */
infer_status device_backend_bytes(int i, uint64_t *free_before, uint64_t *bytes);
/* The public device API (infer_device_*, include/infer.h) is implemented in device.c on top of these. */

#ifdef INFER_CUDA
#include <cuda_runtime_api.h>
/* CU_TRY: one checked CUDA call; allocation failure is INFER_E_OOM, anything else INFER_E_DEVICE,
 * with the call, file and line. Needs `infer_status st` and a `fail:` label, like TRY. */
#define CU_TRY(x)                                                                                            \
    do {                                                                                                     \
        cudaError_t cu_err_ = (x);                                                                           \
        if (cu_err_ != cudaSuccess) {                                                                        \
            st = infer_fail(cu_err_ == cudaErrorMemoryAllocation ? INFER_E_OOM : INFER_E_DEVICE,             \
                            "%s failed at %s:%d: %s", #x, __FILE__, __LINE__, cudaGetErrorString(cu_err_));  \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

/* kernels/copy.cu: copies bytes device to device with a kernel (queued on s; dst and src must not
 * overlap); 16-byte aligned pointers and lengths take the fast path. */
cudaError_t cuda_copy(void *dst, const void *src, size_t bytes, cudaStream_t s);
#endif

#endif
