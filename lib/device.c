/* device: CUDA device discovery (a stub answering "none" in CPU-only builds). */
#include "device.h"

#include <stdio.h>

#ifdef INFER_CUDA

int device_count(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* note: any failure here means "no GPU": a CPU-only machine with the toolkit reports
         * cudaErrorInsufficientDriver (35), a container without devices cudaErrorNoDevice (100). */
        if (why) *why = cudaGetErrorString(e);
        cudaGetLastError(); /* clear the sticky error so later calls are not poisoned */
        return 0;
    }
    if (n == 0 && why) *why = "no CUDA device";
    return n;
}

infer_status device_describe(int i, char *name, size_t cap, size_t *total_mem) {
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, i);
    if (e != cudaSuccess) return infer_fail(INFER_E_DEVICE, "cudaGetDeviceProperties(%d): %s", i, cudaGetErrorString(e));
    snprintf(name, cap, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
    if (total_mem) *total_mem = prop.totalGlobalMem;
    return INFER_OK;
}

#else

int device_count(const char **why) {
    if (why) *why = "built without CUDA";
    return 0;
}

infer_status device_describe(int i, char *name, size_t cap, size_t *total_mem) {
    (void)name, (void)cap, (void)total_mem;
    return infer_fail(INFER_E_DEVICE, "device %d: built without CUDA", i);
}

#endif
