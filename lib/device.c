/* device: CUDA device discovery (a stub answering "none" in CPU-only builds) and the public device
 * API of include/infer.h: count, name, memory, and the bandwidth probe (kernels/copy.cu timed with
 * CUDA events) that gives llm-bench its roofline denominator. */
#include "device.h"

#include <stdio.h>

#include "backend.h"

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

/* ---- public API ---- */

/* INFER_OK when device i exists; INFER_E_DEVICE saying why not otherwise. */
static infer_status device_check(int32_t i) {
    const char *why = NULL;
    const int n = device_count(&why);
    if (n == 0) return infer_fail(INFER_E_DEVICE, "device %d: no usable CUDA device (%s)", i, why ? why : "?");
    if (i < 0 || i >= n) return infer_fail(INFER_E_DEVICE, "device %d: no such device (%d found)", i, n);
    return INFER_OK;
}

int32_t infer_device_count(void) {
    const char *why = NULL;
    const int n = device_count(&why);
    if (n == 0) infer_fail(INFER_E_DEVICE, "no usable CUDA device (%s)", why ? why : "?");
    return n;
}

int32_t infer_device_name(int32_t i, char *buf, int32_t cap) {
    char name[320];
    if (cap < 0 || (!buf && cap > 0)) {
        infer_fail(INFER_E_ARG, "infer_device_name: buf %p with cap %d", (void *)buf, cap);
        return -1;
    }
    if (device_check(i) != INFER_OK || device_describe(i, name, sizeof name, NULL) != INFER_OK) return -1;
    return snprintf(buf, (size_t)cap, "%s", name);
}

infer_status infer_device_memory(int32_t i, uint64_t *total, uint64_t *free_bytes) {
    if (total) *total = 0;
    if (free_bytes) *free_bytes = 0;
    infer_status st = device_check(i);
    if (st != INFER_OK) return st;
#ifdef INFER_CUDA
    int prev = 0, set = 0;
    size_t f = 0, t = 0;
    CU_TRY(cudaGetDevice(&prev));
    CU_TRY(cudaSetDevice(i));
    set = 1;
    CU_TRY(cudaMemGetInfo(&f, &t));
    if (total) *total = t;
    if (free_bytes) *free_bytes = f;
fail:
    if (set) cudaSetDevice(prev);
#endif
    return st;
}

infer_status device_backend_bytes(int i, uint64_t *free_before, uint64_t *bytes) {
    *free_before = *bytes = 0;
    infer_status st = device_check(i);
    if (st != INFER_OK) return st;
#ifdef INFER_CUDA
    int prev = 0, set = 0;
    struct infer_backend *be = NULL;
    size_t f0 = 0, f1 = 0, t = 0;
    CU_TRY(cudaGetDevice(&prev));
    CU_TRY(cudaSetDevice(i));
    set = 1;
    CU_TRY(cudaMemGetInfo(&f0, &t)); /* after the context exists: what a backend adds, not the driver's own */
    TRY(backend_cuda_create(i, &be));
    TRY(be->ops->mem_info(be, &f1, &t));
    *free_before = f0;
    *bytes = f0 > f1 ? f0 - f1 : 0;
fail:
    if (be) be->ops->destroy(be);
    if (set) cudaSetDevice(prev);
#endif
    return st;
}

#ifdef INFER_EMU /* the emulator's speed means nothing: a short run that exercises the same code */
#define BW_BYTES ((size_t)4 << 20)
#define BW_RUNS 2
#else
#define BW_BYTES ((size_t)1 << 30) /* per buffer: far beyond any L2 */
#define BW_RUNS 20
#endif

infer_status infer_device_bandwidth(int32_t i, double *bytes_per_s) {
    if (!bytes_per_s) return infer_fail(INFER_E_ARG, "infer_device_bandwidth: bytes_per_s is NULL");
    *bytes_per_s = 0;
    infer_status st = device_check(i);
    if (st != INFER_OK) return st;
#ifdef INFER_CUDA
    int prev = 0, set = 0;
    void *src = NULL, *dst = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    size_t f = 0, t = 0;
    float best = 0;
    CU_TRY(cudaGetDevice(&prev));
    CU_TRY(cudaSetDevice(i));
    set = 1;
    CU_TRY(cudaMemGetInfo(&f, &t));
    /* two buffers within half of the free memory, in whole MiB (so the copy takes the 16-byte path) */
    const size_t n = f / 4 < BW_BYTES ? (f / 4) & ~(((size_t)1 << 20) - 1) : BW_BYTES;
    if (n == 0) {
        st = infer_fail(INFER_E_OOM, "device %d: %zu bytes free, the bandwidth probe needs 4 MiB", i, f);
        goto fail;
    }
    CU_TRY(cudaMalloc(&src, n));
    CU_TRY(cudaMalloc(&dst, n));
    CU_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU_TRY(cudaEventCreate(&e0));
    CU_TRY(cudaEventCreate(&e1));
    CU_TRY(cudaMemsetAsync(src, 1, n, s));
    CU_TRY(cudaMemsetAsync(dst, 0, n, s));
    CU_TRY(cuda_copy(dst, src, n, s)); /* warm-up: first-launch costs and clock ramp out of the timing */
    for (int r = 0; r < BW_RUNS; r++) {
        float ms = 0;
        CU_TRY(cudaEventRecord(e0, s));
        CU_TRY(cuda_copy(dst, src, n, s));
        CU_TRY(cudaEventRecord(e1, s));
        CU_TRY(cudaEventSynchronize(e1));
        CU_TRY(cudaEventElapsedTime(&ms, e0, e1));
        if (ms > 0 && (best == 0 || ms < best)) best = ms;
    }
    if (best <= 0) {
        st = infer_fail(INFER_E_DEVICE, "device %d: the bandwidth probe timed no copy above 0 ms", i);
        goto fail;
    }
    *bytes_per_s = 2.0 * (double)n / (1e-3 * (double)best); /* read + write */
fail:
    /* note: cleanup errors are ignored: after a failure they only repeat it */
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    cudaFree(src);
    cudaFree(dst);
    if (set) cudaSetDevice(prev);
#endif
    return st;
}
