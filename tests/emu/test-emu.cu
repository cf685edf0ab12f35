/* test-emu: the CUDA emulator (emu/) checked against what CUDA defines, with kernels of its own.
 *
 * Built twice: by g++ into build-emu* (the emulator) and by nvcc into build/ (a real GPU, where one is
 * present), so every check that is not marked emulator-only is also a check of the emulator's claims on
 * hardware. Checks:
 *   - shuffles (idx / up / down / xor, widths 32 and 8, 4- and 8-byte values), ballot / any / all, the
 *     __reduce_*_sync forms and __syncthreads_count / _and / _or against values worked out by hand;
 *   - mma.sync m16n8k16 through kernels/ptx.cuh: fragments loaded per the PTX ISA layout, D = A B + C
 *     against a float64 product;
 *   - launch limits: 1025 threads, z = 65, grid y = 65536, a block above the kernel's __launch_bounds__
 *     (each cudaErrorInvalidValue, as CUDA 13.0 returned them on an H100), dynamic shared memory above 48 KiB
 *     without / with cudaFuncSetAttribute;
 *   - streams: a pageable host-to-device source is staged at the call; graphs capture by value, replay,
 *     update in place, refuse a changed topology; calls CUDA forbids while capturing fail and invalidate;
 *   - cuBLAS cublasGemmEx (f16 in, f32 out, A transposed) against float64, and its argument checks;
 *   - NCCL when two devices exist: two ranks as threads, then as processes (this one and a helper: the
 *     test binary run again with TEST_EMU_NCCL_ROLE, the unique id in TEST_EMU_NCCL_ID), each doing every
 *     collective kind (all-reduce, all-gather, reduce-scatter, broadcast, an int32 max reduce) with counts
 *     above one round of the emulator's process mode, and an all-reduce captured in a graph and replayed;
 *     a clique from ncclCommInitAll driven from one thread through a group; four ranks in two processes
 *     (ranks 0-1 here from one thread through groups, 2-3 in the helper on two threads; a GPU machine needs
 *     four devices, the emulator gives each process its own 0 and 1 and checks a first element whose float
 *     sum is right only in rank order).
 * Emulator only (INFER_EMU): each bug finder reports and fails the context (a missing barrier through the
 * thread-order check, an inter-block race, __syncthreads after an early return, a shuffle naming an exited
 * lane or reading outside its mask, a mask without the caller, divergent collectives, mma.sync by half a
 * warp, a kernel given another device's memory), cudaDeviceReset recovering each time; a launch's copied
 * arguments with zeroed padding (no stale heap bytes for the pointer scan to mistake); lazy execution (a
 * read CUDA does not order sees stale data: the legacy stream against a non-blocking one, an async copy
 * into pinned memory, a first event query); the memory limit (INFER_EMU_MEM, set here to 256M); a
 * launch into another device's stream; the counters; NCCL across processes: a partner that never joins
 * (ncclCommInitRank fails after INFER_EMU_NCCL_TIMEOUT, its segment removed), one killed after joining
 * (the all-reduce fails at once: a report, a failed stream, ncclRemoteError), one that never calls the
 * collective (the helper's all-reduce fails after its 1 s timeout), mismatched collectives (both processes
 * report); under ASan, an out-of-bounds device read caught in a child process.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <nccl.h>

#include "../t.h"
#include "common.cuh"
#include "ptx.cuh"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef INFER_EMU
#include "emu_api.h"
#endif

#define CK(call) T_CHECK((call) == cudaSuccess, "%s", #call)

/* ---- kernels ---- */

__global__ void k_collectives(int *out, double *dout) {
    const int tid = threadIdx.x, lane = tid % 32;
    int *o = out + tid * 16;
    o[0] = __shfl_sync(0xffffffffu, lane * 10, 5);
    o[1] = __shfl_up_sync(0xffffffffu, lane, 3);
    o[2] = __shfl_down_sync(0xffffffffu, lane, 3);
    o[3] = __shfl_xor_sync(0xffffffffu, lane, 1);
    o[4] = __shfl_sync(0xffffffffu, lane, 2, 8);     /* lane 2 of each group of 8 */
    o[5] = __shfl_up_sync(0xffffffffu, lane, 3, 8);
    o[6] = __shfl_down_sync(0xffffffffu, lane, 3, 8);
    o[7] = __shfl_xor_sync(0xffffffffu, lane, 4, 8);
    o[8] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[9] = __any_sync(0xffffffffu, lane == 31);
    o[10] = __all_sync(0xffffffffu, lane < 31);
    o[11] = (int)__reduce_add_sync(0xffffffffu, (unsigned)lane);
    o[12] = __reduce_min_sync(0xffffffffu, 100 - lane);
    o[13] = __reduce_max_sync(0xffffffffu, lane - 7);
    o[14] = __syncthreads_count(tid % 5 == 0);
    o[15] = __syncthreads_or(tid == 17) + 2 * __syncthreads_and(tid < 1000);
    dout[tid] = __shfl_xor_sync(0xffffffffu, 0.25 + lane, 16);
}

/* Loads A (16 x 16, row-major halves), B (16 x 8, row-major halves) and C (16 x 8 floats) into the
 * fragments of ptx_mma_16816, as the PTX ISA lays them out, and stores D back row-major. */
__global__ void k_mma(const uint16_t *A, const uint16_t *B, const float *C, float *D) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    uint32_t a[4];
    for (int r = 0; r < 4; r++) {
        const int row = g + (r % 2) * 8, col = 2 * t + (r / 2) * 8;
        a[r] = (uint32_t)A[row * 16 + col] | (uint32_t)A[row * 16 + col + 1] << 16;
    }
    const uint32_t b0 = (uint32_t)B[(2 * t) * 8 + g] | (uint32_t)B[(2 * t + 1) * 8 + g] << 16;
    const uint32_t b1 = (uint32_t)B[(2 * t + 8) * 8 + g] | (uint32_t)B[(2 * t + 9) * 8 + g] << 16;
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    ptx_mma_16816(c, a, b0, b1);
    D[g * 8 + 2 * t] = c[0], D[g * 8 + 2 * t + 1] = c[1];
    D[(g + 8) * 8 + 2 * t] = c[2], D[(g + 8) * 8 + 2 * t + 1] = c[3];
}

__global__ void __launch_bounds__(64) k_bounded(int *p) { p[threadIdx.x] = 1; }

__global__ void k_add(int *p, int v) {
    if (threadIdx.x == 0) *p += v;
}

__global__ void k_dyn_smem(int *out, int n) {
    int *s = dyn_smem<int>();
    for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i;
    __syncthreads();
    if (threadIdx.x == 0) {
        long long sum = 0;
        for (int i = 0; i < n; i++) sum += s[i];
        *out = (int)(sum % 1000003);
    }
}

#ifdef INFER_EMU
__global__ void k_missing_barrier(float *out) {
    __shared__ float buf[128];
    buf[threadIdx.x] = (float)threadIdx.x;
    /* __syncthreads() missing: another thread's element may not be written yet */
    out[threadIdx.x] = buf[127 - threadIdx.x];
}
__global__ void k_block_race(int *cells) { /* block b reads what block b+1 writes */
    if (threadIdx.x == 0) cells[blockIdx.x] = cells[(blockIdx.x + 1) % gridDim.x] + 1;
}
__global__ void k_early_return(int *out) {
    if (threadIdx.x < 32) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void k_exited_lane(int *out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}
__global__ void k_outside_mask(int *out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)threadIdx.x, 20, 32);
}
__global__ void k_mask_without_self(int *out) { out[threadIdx.x] = (int)__ballot_sync(0xfffffffeu, 1); }
__global__ void k_divergent(int *out) {
    if (threadIdx.x < 16) __syncwarp();
    else __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void k_half_mma(float *out) {
    if (threadIdx.x >= 16) return;
    float c[4] = {0, 0, 0, 0};
    const uint32_t a[4] = {0, 0, 0, 0};
    ptx_mma_16816(c, a, 0, 0);
    out[threadIdx.x] = c[0];
}
__global__ void k_read(const float *p, float *out, int n) { *out = p[n]; }
struct ptr_arg {
    float *p;
};
__global__ void k_struct_float(struct ptr_arg a, float t) { *a.p = t; }
#endif

/* ---- helpers ---- */

static double h2d(uint16_t h) { return (double)__half2float(__ushort_as_half(h)); }

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand() { /* [0, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

#ifdef INFER_EMU
/* Runs a kernel that must be reported: the sync fails, a report is counted, its text holds `what`; then
 * the device is reset. */
template <typename F> static void expect_report(const char *name, const char *what, F launch) {
    const uint64_t before = emu_reports();
    launch();
    const cudaError_t e = cudaDeviceSynchronize();
    T_CHECK(e == cudaErrorLaunchFailure, "%s: sync gives %s, expected cudaErrorLaunchFailure", name, cudaGetErrorName(e));
    T_CHECK(emu_reports() == before + 1, "%s: %llu reports, expected 1", name, (unsigned long long)(emu_reports() - before));
    T_CHECK(strstr(emu_last_report(), what) != NULL, "%s: report '%s' does not say '%s'", name, emu_last_report(), what);
    T_CHECK(cudaDeviceReset() == cudaSuccess, "%s: cudaDeviceReset", name);
    cudaGetLastError();
}
#endif

/* ---- checks ---- */

static void check_collectives() {
    int *d = NULL;
    double *dd = NULL;
    CK(cudaMalloc(&d, 64 * 16 * sizeof(int)));
    CK(cudaMalloc(&dd, 64 * sizeof(double)));
    launch_kernel(k_collectives, 1, 64, 0, 0, d, dd);
    CK(cudaGetLastError());
    std::vector<int> o(64 * 16);
    std::vector<double> od(64);
    CK(cudaMemcpy(o.data(), d, o.size() * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(od.data(), dd, od.size() * sizeof(double), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int tid = 0; tid < 64; tid++) {
        const int l = tid % 32, *r = &o[(size_t)tid * 16];
        const int want[16] = {50,
                              l >= 3 ? l - 3 : l,
                              l + 3 < 32 ? l + 3 : l,
                              l ^ 1,
                              (l & ~7) + 2,
                              l % 8 >= 3 ? l - 3 : l,
                              l % 8 + 3 < 8 ? l + 3 : l,
                              l ^ 4,
                              (int)0x49249249u,
                              1,
                              0,
                              496,
                              69,
                              24,
                              13,
                              1 + 2};
        for (int i = 0; i < 16; i++)
            if (r[i] != want[i] && bad++ < 8) printf("  thread %d value %d: %d, expected %d\n", tid, i, r[i], want[i]);
        if (od[(size_t)tid] != 0.25 + (l ^ 16) && bad++ < 8) printf("  thread %d double shuffle %g\n", tid, od[(size_t)tid]);
    }
    T_CHECK(bad == 0, "collectives: %d wrong values", bad);
    cudaFree(d);
    cudaFree(dd);
}

static void check_mma() {
    uint16_t A[256], B[128];
    float C[128], D[128];
    for (int i = 0; i < 256; i++) A[i] = __half_as_ushort(__float2half_rn((float)(urand() * 4 - 2)));
    for (int i = 0; i < 128; i++) B[i] = __half_as_ushort(__float2half_rn((float)(urand() * 4 - 2)));
    for (int i = 0; i < 128; i++) C[i] = (float)(urand() - 0.5);
    uint16_t *dA = NULL, *dB = NULL;
    float *dC = NULL, *dD = NULL;
    CK(cudaMalloc(&dA, sizeof A));
    CK(cudaMalloc(&dB, sizeof B));
    CK(cudaMalloc(&dC, sizeof C));
    CK(cudaMalloc(&dD, sizeof D));
    CK(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice));
    launch_kernel(k_mma, 1, 32, 0, 0, dA, dB, dC, dD);
    CK(cudaGetLastError());
    CK(cudaMemcpy(D, dD, sizeof D, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 8; c++) {
            double ref = C[r * 8 + c];
            for (int k = 0; k < 16; k++) ref += h2d(A[r * 16 + k]) * h2d(B[k * 8 + c]);
            worst = fmax(worst, fabs(ref - D[r * 8 + c]));
        }
    T_CHECK(worst <= 2e-5, "mma.sync m16n8k16: max |D - A B - C| = %g (float accumulation of exact products)", worst);
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dD);
}

static void check_launch_limits() {
    int *d = NULL;
    CK(cudaMalloc(&d, 4096));
    launch_kernel(k_add, 1, 1025, 0, 0, d, 1);
    cudaError_t e = cudaGetLastError();
    T_CHECK(e == cudaErrorInvalidValue, "1025 threads: %s", cudaGetErrorName(e));
    launch_kernel(k_add, 1, dim3(1, 1, 65), 0, 0, d, 1);
    e = cudaGetLastError();
    T_CHECK(e == cudaErrorInvalidValue, "block z 65: %s", cudaGetErrorName(e));
    launch_kernel(k_add, dim3(1, 65536), 32, 0, 0, d, 1);
    e = cudaGetLastError();
    T_CHECK(e == cudaErrorInvalidValue, "grid y 65536: %s", cudaGetErrorName(e));
    launch_kernel(k_bounded, 1, 96, 0, 0, d);
    e = cudaGetLastError();
    T_CHECK(e == cudaErrorInvalidValue, "96 threads for __launch_bounds__(64): %s", cudaGetErrorName(e));
    launch_kernel(k_bounded, 1, 64, 0, 0, d);
    CK(cudaGetLastError());
    const int n = 16384; /* 64 KiB of ints */
    launch_kernel(k_dyn_smem, 1, 256, n * sizeof(int), 0, d, n);
    e = cudaGetLastError();
    T_CHECK(e != cudaSuccess, "64 KiB dynamic shared memory without the attribute is refused (%s)", cudaGetErrorName(e));
    CK(cudaFuncSetAttribute(k_dyn_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, n * (int)sizeof(int)));
    launch_kernel(k_dyn_smem, 1, 256, n * sizeof(int), 0, d, n);
    CK(cudaGetLastError());
    int got = 0;
    CK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
    T_CHECK(got == (int)((long long)n * (n - 1) / 2 % 1000003), "dynamic shared memory sum %d", got);
#ifdef INFER_EMU
    e = cudaFuncSetAttribute(k_dyn_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
    T_CHECK(e == cudaErrorInvalidValue, "200 KiB opt-in above sm_86's 99 KiB: %s", cudaGetErrorName(e));
    cudaGetLastError();
#endif
    cudaFree(d);
}

static void check_streams_and_graphs() {
    cudaStream_t s = NULL;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *d = NULL;
    CK(cudaMalloc(&d, sizeof(int)));
    /* a pageable source is staged when cudaMemcpyAsync returns */
    int x = 7;
    CK(cudaMemcpyAsync(d, &x, sizeof x, cudaMemcpyHostToDevice, s));
    x = 9;
    int got = 0;
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
    T_CHECK(got == 7, "pageable host-to-device source staged at the call: %d", got);

    /* forbidden while capturing: the capture is invalidated */
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch_kernel(k_add, 1, 32, 0, s, d, 1);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, 64);
    T_CHECK(e == cudaErrorStreamCaptureUnsupported, "cudaMalloc while capturing: %s", cudaGetErrorName(e));
    cudaGraph_t g = NULL;
    e = cudaStreamEndCapture(s, &g);
    T_CHECK(e == cudaErrorStreamCaptureInvalidated && !g, "end of an invalidated capture: %s", cudaGetErrorName(e));
    cudaGetLastError();
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    e = cudaStreamSynchronize(s);
    T_CHECK(e == cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of a capturing stream: %s", cudaGetErrorName(e));
    e = cudaStreamEndCapture(s, &g);
    T_CHECK(e == cudaErrorStreamCaptureInvalidated, "end after the refused sync: %s", cudaGetErrorName(e));
    cudaGetLastError();

    /* replay, arguments by value, update in place, topology change refused */
    CK(cudaMemsetAsync(d, 0, sizeof(int), s));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int v = 1;
    launch_kernel(k_add, 1, 32, 0, s, d, v);
    v = 100; /* captured by value: the graph keeps 1 */
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x1 = NULL;
    CK(cudaGraphInstantiate(&x1, g, 0));
    for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(x1, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
    T_CHECK(got == 3, "three replays of += 1: %d", got);
    cudaGraph_t g5 = NULL, g2 = NULL;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch_kernel(k_add, 1, 32, 0, s, d, 5);
    CK(cudaStreamEndCapture(s, &g5));
    cudaGraphExecUpdateResultInfo info;
    CK(cudaGraphExecUpdate(x1, g5, &info));
    CK(cudaGraphLaunch(x1, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
    T_CHECK(got == 8, "replay after cudaGraphExecUpdate with += 5: %d", got);
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch_kernel(k_add, 1, 32, 0, s, d, 1);
    launch_kernel(k_add, 1, 32, 0, s, d, 1);
    CK(cudaStreamEndCapture(s, &g2));
    e = cudaGraphExecUpdate(x1, g2, &info);
    T_CHECK(e == cudaErrorGraphExecUpdateFailure && info.result == cudaGraphExecUpdateErrorTopologyChanged,
            "update with another node count: %s, result %d", cudaGetErrorName(e), (int)info.result);
    cudaGetLastError();
    (void)v;
    cudaGraphExecDestroy(x1);
    cudaGraphDestroy(g), cudaGraphDestroy(g5), cudaGraphDestroy(g2);
    cudaFree(d);
    cudaStreamDestroy(s);
}

static void check_cublas() {
    const int m = 5, n = 3, k = 7, lda = 9, ldb = 8, ldc = 6; /* C (m x n) = A^T B, A stored k x m */
    std::vector<uint16_t> A((size_t)lda * m), B((size_t)ldb * n);
    std::vector<float> C((size_t)ldc * n, 0.5f);
    for (auto &a : A) a = __half_as_ushort(__float2half_rn((float)(urand() * 2 - 1)));
    for (auto &b : B) b = __half_as_ushort(__float2half_rn((float)(urand() * 2 - 1)));
    uint16_t *dA = NULL, *dB = NULL;
    float *dC = NULL;
    CK(cudaMalloc(&dA, A.size() * 2));
    CK(cudaMalloc(&dB, B.size() * 2));
    CK(cudaMalloc(&dC, C.size() * 4));
    CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice));
    cublasHandle_t h = NULL;
    T_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
    const float alpha = 2.0f, beta = 1.0f;
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA, CUDA_R_16F, lda, dB, CUDA_R_16F,
                                     ldb, &beta, dC, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    T_CHECK(st == CUBLAS_STATUS_SUCCESS, "cublasGemmEx: %d", (int)st);
    std::vector<float> out(C.size());
    CK(cudaMemcpy(out.data(), dC, out.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double ref = 0;
            for (int l = 0; l < k; l++) ref += h2d(A[(size_t)l + (size_t)i * lda]) * h2d(B[(size_t)l + (size_t)j * ldb]);
            worst = fmax(worst, fabs(2 * ref + 0.5 - out[(size_t)i + (size_t)j * ldc]));
        }
    T_CHECK(worst < 1e-5, "cublasGemmEx A^T B: max error %g", worst);
    st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, dA, CUDA_R_16F, k - 1, dB, CUDA_R_16F, ldb, &beta, dC,
                      CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    T_CHECK(st == CUBLAS_STATUS_INVALID_VALUE, "lda below k for A^T: status %d", (int)st);
    cublasDestroy(h);
    cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

/* ---- NCCL: ranks as threads and as processes ---- */

/* Counts above one round of the emulator's process mode (256 KiB of data a rank): several rounds. */
enum { NCCL_BIG = 70000, NCCL_HALF = 40000, NCCL_INTS = 1000 };

/* What nccl_rank and nccl_four return (a helper process's exit status): 0, or the first step that failed. */
static const char *nccl_step(int code) {
    static const char *const steps[] = {"ok", "setup", "all-reduce", "all-gather", "reduce-scatter", "broadcast",
                                        "reduce (int32 max)", "graph replay of an all-reduce"};
    if (code >= 0 && code < (int)(sizeof steps / sizeof *steps)) return steps[code];
    return code == -1 ? "not started" : code > 128 ? "killed by a signal" : "helper failed";
}

/* Rank r of 2 on device r: every collective kind against values worked out by hand (rank r's float element
 * i is 10 r + i), then an all-reduce captured in a graph and replayed twice. Run as a thread and as a
 * helper process. */
static int nccl_rank(ncclUniqueId id, int r) {
    if (cudaSetDevice(r) != cudaSuccess) return 1;
    ncclComm_t c = NULL;
    if (ncclCommInitRank(&c, 2, id, r) != ncclSuccess) return 1;
    const size_t n = 2 * NCCL_BIG;
    cudaStream_t s = NULL;
    float *send = NULL, *recv = NULL;
    int *isend = NULL, *irecv = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&send, n * 4) != cudaSuccess ||
        cudaMalloc(&recv, n * 4) != cudaSuccess || cudaMalloc(&isend, NCCL_INTS * 4) != cudaSuccess ||
        cudaMalloc(&irecv, NCCL_INTS * 4) != cudaSuccess)
        return 1;
    std::vector<float> h(n), got(n);
    std::vector<int> ih(NCCL_INTS), igot(NCCL_INTS);
    for (size_t i = 0; i < n; i++) h[i] = (float)(10 * r + (int)i);
    for (int i = 0; i < NCCL_INTS; i++) ih[(size_t)i] = r ? NCCL_INTS - 1 - i : i;
    cudaMemcpy(send, h.data(), n * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(isend, ih.data(), NCCL_INTS * 4, cudaMemcpyHostToDevice);
    auto fetch = [&](size_t count) {
        cudaStreamSynchronize(s);
        cudaMemcpy(got.data(), recv, count * 4, cudaMemcpyDeviceToHost);
    };
    int failed = 0; /* every step runs whatever failed before: the partner must not wait for a missing call */
    auto step = [&](int which, bool ok) {
        if (!ok && !failed) failed = which;
    };
    bool ok = true;
    ncclAllReduce(send, recv, NCCL_BIG, ncclFloat32, ncclSum, c, s);
    fetch(NCCL_BIG);
    for (size_t i = 0; i < NCCL_BIG; i++) ok &= got[i] == (float)(10 + 2 * i);
    step(2, ok);
    ncclAllGather(send, recv, NCCL_BIG, ncclFloat32, c, s);
    fetch(2 * NCCL_BIG);
    ok = true;
    for (size_t q = 0; q < 2; q++)
        for (size_t i = 0; i < NCCL_BIG; i++) ok &= got[q * NCCL_BIG + i] == (float)(10 * q + i);
    step(3, ok);
    ncclReduceScatter(send, recv, NCCL_HALF, ncclFloat32, ncclSum, c, s); /* rank r: both ranks' block r summed */
    fetch(NCCL_HALF);
    ok = true;
    for (size_t i = 0; i < NCCL_HALF; i++) ok &= got[i] == (float)(10 + 2 * ((size_t)r * NCCL_HALF + i));
    step(4, ok);
    ncclBroadcast(send, recv, NCCL_BIG, ncclFloat32, 1, c, s);
    fetch(NCCL_BIG);
    ok = true;
    for (size_t i = 0; i < NCCL_BIG; i++) ok &= got[i] == (float)(10 + i);
    step(5, ok);
    ncclReduce(isend, irecv, NCCL_INTS, ncclInt32, ncclMax, 0, c, s); /* to root 0: max(i, 999 - i) */
    cudaStreamSynchronize(s);
    cudaMemcpy(igot.data(), irecv, NCCL_INTS * 4, cudaMemcpyDeviceToHost);
    ok = true;
    for (int i = 0; r == 0 && i < NCCL_INTS; i++) ok &= igot[(size_t)i] == std::max(i, NCCL_INTS - 1 - i);
    step(6, ok);
    /* captured and replayed twice: send[0] += the other's, (0, 10) -> 10 -> 20 */
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (ok) ncclAllReduce(send, send, 1, ncclFloat32, ncclSum, c, s);
    ok = ok && cudaStreamEndCapture(s, &g) == cudaSuccess && cudaGraphInstantiate(&x, g, 0) == cudaSuccess &&
         cudaGraphLaunch(x, s) == cudaSuccess && cudaGraphLaunch(x, s) == cudaSuccess &&
         cudaStreamSynchronize(s) == cudaSuccess;
    cudaMemcpy(got.data(), send, 4, cudaMemcpyDeviceToHost);
    step(7, ok && got[0] == 20);
    if (x) cudaGraphExecDestroy(x);
    if (g) cudaGraphDestroy(g);
    cudaFree(send), cudaFree(recv), cudaFree(isend), cudaFree(irecv);
    cudaStreamDestroy(s);
    ncclCommDestroy(c);
    return failed;
}

/* The device of rank r of the 4-rank clique: each emulated process has its own devices 0 and 1; on a GPU
 * machine every rank needs its own. */
static int four_device(int r) {
#ifdef INFER_EMU
    return r % 2;
#else
    return r;
#endif
}

/* Ranks first .. first + n - 1 of 4, driven by this thread through groups: an in-place all-reduce of
 * NCCL_BIG floats, rank r's element i being 10 r + i. Emulator only: element 0 is 1e8, 1, -1e8, 1 on ranks
 * 0..3, which float sums give as 1 only in rank order (0 or 2 in others); NCCL's own order is its own. */
static int nccl_four(ncclUniqueId id, int first, int n) {
    ncclComm_t c[2] = {NULL, NULL};
    cudaStream_t s[2] = {NULL, NULL};
    float *buf[2] = {NULL, NULL};
    bool good = ncclGroupStart() == ncclSuccess;
    for (int j = 0; j < n; j++)
        good = good && cudaSetDevice(four_device(first + j)) == cudaSuccess &&
               ncclCommInitRank(&c[j], 4, id, first + j) == ncclSuccess;
    good = ncclGroupEnd() == ncclSuccess && good;
    std::vector<float> h(NCCL_BIG);
    for (int j = 0; good && j < n; j++) {
        const int r = first + j;
        for (size_t i = 0; i < NCCL_BIG; i++) h[i] = (float)(10 * r + (int)i);
#ifdef INFER_EMU
        const float order_probe[4] = {1e8f, 1.0f, -1e8f, 1.0f};
        h[0] = order_probe[r];
#endif
        good = cudaSetDevice(four_device(r)) == cudaSuccess &&
               cudaStreamCreateWithFlags(&s[j], cudaStreamNonBlocking) == cudaSuccess &&
               cudaMalloc(&buf[j], NCCL_BIG * 4) == cudaSuccess &&
               cudaMemcpy(buf[j], h.data(), NCCL_BIG * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    }
    if (!good) return 1;
    ncclGroupStart();
    for (int j = 0; j < n; j++)
        good &= ncclAllReduce(buf[j], buf[j], NCCL_BIG, ncclFloat32, ncclSum, c[j], s[j]) == ncclSuccess;
    ncclGroupEnd();
#ifdef INFER_EMU
    const float first_sum = 1.0f;
#else
    const float first_sum = 60.0f;
#endif
    for (int j = 0; j < n; j++) {
        cudaSetDevice(four_device(first + j));
        good &= cudaStreamSynchronize(s[j]) == cudaSuccess &&
                cudaMemcpy(h.data(), buf[j], NCCL_BIG * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
        good &= h[0] == first_sum;
        for (size_t i = 1; i < NCCL_BIG; i++) good &= h[i] == (float)(60 + 4 * i);
        cudaFree(buf[j]);
        cudaStreamDestroy(s[j]);
        ncclCommDestroy(c[j]);
    }
    return good ? 0 : 2;
}

/* Runs this test binary again as a helper process with rank(s) `role` of the clique `id`, handed over in
 * its environment as hex (as a launcher would); returns its pid, -1 on failure. */
static pid_t spawn_rank(const char *role, const ncclUniqueId &id) {
    char hex[2 * sizeof id.internal + 1];
    for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    std::string r = std::string("TEST_EMU_NCCL_ROLE=") + role, x = std::string("TEST_EMU_NCCL_ID=") + hex;
    std::vector<char *> env;
    for (char **e = environ; *e; e++) env.push_back(*e);
    env.push_back(&r[0]), env.push_back(&x[0]), env.push_back(NULL);
    char name[] = "test-emu";
    char *argv[] = {name, NULL};
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        execve("/proc/self/exe", argv, env.data());
        _exit(127);
    }
    return pid;
}

/* A helper's exit status; above 128: killed by signal (status - 128); -1: no helper. */
static int child_status(pid_t pid) {
    int st = 0;
    if (pid <= 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#ifdef INFER_EMU
static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Helper: rank 1 of 2 whose partner (the test) never calls the collective; its INFER_EMU_NCCL_TIMEOUT is 1 s.
 * The all-reduce must fail after about that long: a report, a failed stream, ncclRemoteError. */
static int nccl_stalled_partner(ncclUniqueId id) {
    ncclComm_t c = NULL;
    cudaStream_t s = NULL;
    float *buf = NULL;
    if (cudaSetDevice(1) != cudaSuccess || ncclCommInitRank(&c, 2, id, 1) != ncclSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&buf, 4) != cudaSuccess)
        return 1;
    const double t0 = now_s();
    if (ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, s) != ncclSuccess) return 2;
    if (cudaStreamSynchronize(s) != cudaErrorLaunchFailure) return 3;
    const double dt = now_s() - t0;
    if (dt < 0.9 || dt > 30) return 4;
    ncclResult_t a = ncclSuccess;
    if (ncclCommGetAsyncError(c, &a) != ncclSuccess || a != ncclRemoteError) return 5;
    if (!strstr(emu_last_report(), "INFER_EMU_NCCL_TIMEOUT")) return 6;
    if (ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, s) != ncclRemoteError) return 7;
    ncclCommDestroy(c);
    cudaStreamDestroy(s);
    cudaDeviceReset();
    return 0;
}

/* Rank r of 2 in a clique whose ranks call different collectives (an all-reduce of 3 + r floats): each
 * process reports the mismatch itself and fails, neither hangs. */
static int nccl_mismatched(ncclUniqueId id, int r) {
    ncclComm_t c = NULL;
    cudaStream_t s = NULL;
    float *buf = NULL;
    if (cudaSetDevice(r) != cudaSuccess || ncclCommInitRank(&c, 2, id, r) != ncclSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaMalloc(&buf, 16) != cudaSuccess)
        return 1;
    const uint64_t before = emu_reports();
    if (ncclAllReduce(buf, buf, 3 + (size_t)r, ncclFloat32, ncclSum, c, s) != ncclSuccess) return 2;
    if (cudaStreamSynchronize(s) != cudaErrorLaunchFailure) return 3;
    if (emu_reports() != before + 1 || !strstr(emu_last_report(), "differs between ranks")) return 4;
    ncclCommDestroy(c);
    cudaStreamDestroy(s);
    cudaDeviceReset();
    cudaGetLastError();
    return 0;
}
#endif

/* The helper process's part (TEST_EMU_NCCL_ROLE); its exit status is the result. */
static int nccl_helper(const char *role) {
    ncclUniqueId id;
    const char *hex = getenv("TEST_EMU_NCCL_ID");
    if (!hex || strlen(hex) != 2 * sizeof id.internal) return 100;
    for (size_t i = 0; i < sizeof id.internal; i++) {
        unsigned v = 0;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 100;
        id.internal[i] = (char)v;
    }
    if (!strcmp(role, "rank1")) return nccl_rank(id, 1);
    if (!strcmp(role, "ranks23")) { /* as two threads, one rank each */
        int e2 = -1, e3 = -1;
        std::thread t2([&] { e2 = nccl_four(id, 2, 1); }), t3([&] { e3 = nccl_four(id, 3, 1); });
        t2.join(), t3.join();
        return e2 ? e2 : e3;
    }
#ifdef INFER_EMU
    if (!strcmp(role, "die")) { /* joins, then dies before any collective */
        ncclComm_t c = NULL;
        if (cudaSetDevice(1) != cudaSuccess || ncclCommInitRank(&c, 2, id, 1) != ncclSuccess) return 1;
        raise(SIGKILL);
    }
    if (!strcmp(role, "stalled")) return nccl_stalled_partner(id);
    if (!strcmp(role, "mismatch")) return nccl_mismatched(id, 1);
#endif
    return 101;
}

/* Ranks as processes: this one and a helper (the test binary run again). Every collective kind and a graph
 * with one rank in each; then a 4-rank clique, ranks 0 and 1 here on one thread, 2 and 3 there on two. */
static void check_nccl_processes(int devices) {
    ncclUniqueId id;
    T_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    pid_t pid = spawn_rank("rank1", id);
    int mine = pid > 0 ? nccl_rank(id, 0) : -1, theirs = child_status(pid);
    T_CHECK(mine == 0 && theirs == 0, "NCCL ranks as processes: rank 0 %s (%d), rank 1 in a helper process %s (%d)",
            nccl_step(mine), mine, nccl_step(theirs), theirs);
#ifdef INFER_EMU
    const int need = 2;
#else
    const int need = 4;
#endif
    if (devices < need) {
        T_SKIP("NCCL: 4 ranks in 2 processes need 4 devices, %d found", devices);
    } else {
        T_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
        pid = spawn_rank("ranks23", id);
        mine = pid > 0 ? nccl_four(id, 0, 2) : -1, theirs = child_status(pid);
        T_CHECK(mine == 0 && theirs == 0, "NCCL 4 ranks in 2 processes: ranks 0-1 (one thread, groups) %s (%d), ranks "
                "2-3 (helper, two threads) %s (%d)", nccl_step(mine), mine, nccl_step(theirs), theirs);
    }
    CK(cudaSetDevice(0));
}

static void check_nccl() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        T_SKIP("NCCL: needs 2 devices, %d found", n);
        cudaGetLastError();
        return;
    }
    ncclUniqueId id;
    T_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    int res0 = -1, res1 = -1;
    std::thread t0([&] { res0 = nccl_rank(id, 0); }), t1([&] { res1 = nccl_rank(id, 1); });
    t0.join();
    t1.join();
    T_CHECK(res0 == 0 && res1 == 0, "NCCL ranks as threads: rank 0 %s, rank 1 %s", nccl_step(res0), nccl_step(res1));
    /* one thread driving both ranks: ncclCommInitAll and a group */
    ncclComm_t comms[2] = {NULL, NULL};
    T_CHECK(ncclCommInitAll(comms, 2, NULL) == ncclSuccess, "ncclCommInitAll");
    float *buf[2] = {NULL, NULL};
    cudaStream_t st[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        CK(cudaSetDevice(r));
        CK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
        CK(cudaMalloc(&buf[r], 4));
        const float v = (float)(r + 1);
        CK(cudaMemcpy(buf[r], &v, 4, cudaMemcpyHostToDevice));
    }
    ncclGroupStart();
    for (int r = 0; r < 2; r++) ncclAllReduce(buf[r], buf[r], 1, ncclFloat32, ncclSum, comms[r], st[r]);
    ncclGroupEnd();
    for (int r = 0; r < 2; r++) {
        float v = 0;
        CK(cudaSetDevice(r));
        CK(cudaStreamSynchronize(st[r]));
        CK(cudaMemcpy(&v, buf[r], 4, cudaMemcpyDeviceToHost));
        T_CHECK(v == 3.0f, "grouped all-reduce from one thread, rank %d: %g", r, v);
        cudaFree(buf[r]);
        cudaStreamDestroy(st[r]);
        ncclCommDestroy(comms[r]);
    }
    CK(cudaSetDevice(0));
    check_nccl_processes(n);
}

#ifdef INFER_EMU
static void check_bug_finders() {
    float *f = NULL;
    int *d = NULL;
    CK(cudaMalloc(&f, 128 * sizeof(float)));
    CK(cudaMalloc(&d, 64 * sizeof(int)));
    CK(cudaMemset(d, 0, 64 * sizeof(int)));
    expect_report("missing __syncthreads", "depends on thread order", [&] { launch_kernel(k_missing_barrier, 1, 128, 0, 0, f); });
    CK(cudaMalloc(&f, 128 * sizeof(float)));
    CK(cudaMalloc(&d, 64 * sizeof(int)));
    CK(cudaMemset(d, 0, 64 * sizeof(int)));
    expect_report("inter-block race", "depends on thread order", [&] { launch_kernel(k_block_race, 8, 32, 0, 0, d); });
    CK(cudaMalloc(&d, 64 * sizeof(int)));
    expect_report("__syncthreads after return", "returned before it", [&] { launch_kernel(k_early_return, 1, 64, 0, 0, d); });
    CK(cudaMalloc(&d, 64 * sizeof(int)));
    expect_report("shuffle with an exited lane", "has exited", [&] { launch_kernel(k_exited_lane, 1, 32, 0, 0, d); });
    CK(cudaMalloc(&d, 64 * sizeof(int)));
    expect_report("shuffle outside its mask", "not in the mask", [&] { launch_kernel(k_outside_mask, 1, 32, 0, 0, d); });
    CK(cudaMalloc(&d, 64 * sizeof(int)));
    expect_report("mask without the caller", "does not name the lane itself",
                  [&] { launch_kernel(k_mask_without_self, 1, 32, 0, 0, d); });
    CK(cudaMalloc(&d, 64 * sizeof(int)));
    expect_report("__syncwarp against __syncthreads", "divergent collective", [&] { launch_kernel(k_divergent, 1, 32, 0, 0, d); });
    CK(cudaMalloc(&f, 128 * sizeof(float)));
    expect_report("mma.sync by half a warp", "mma.sync", [&] { launch_kernel(k_half_mma, 1, 32, 0, 0, f); });
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    if (n >= 2) {
        float *other = NULL;
        CK(cudaMalloc(&other, 64));
        CK(cudaSetDevice(1));
        CK(cudaMalloc(&f, 64));
        expect_report("another device's memory", "point into device 0's memory", [&] { launch_kernel(k_read, 1, 1, 0, 0, other, f, 0); });
        CK(cudaSetDevice(0));
        cudaFree(other);
    }
}

/* The pointer scan reads every 8 bytes of a launch's arguments, padding included, so the padding must be
 * zero: (struct, float) is laid out float first, then 4 bytes of padding, and stale heap bytes there once
 * made a float and the top half of an old pointer look like another device's address (a CI failure). */
typedef emu::kernel_args_of<struct ptr_arg, float> struct_float_args;
/* built out of line into memory the compiler knows nothing of, as launch_kernel's make_shared does */
__attribute__((noinline)) static const struct_float_args *build_struct_float_args(void *buf, float t) {
    return new (buf) struct_float_args(k_struct_float, ptr_arg{NULL}, t);
}
static void check_argument_padding() {
    typedef struct_float_args args;
    alignas(args) unsigned char buf[sizeof(args)];
    memset(buf, 0xab, sizeof buf);
    asm volatile("" : : "r"(buf) : "memory"); /* the stale bytes are really there */
    const args *a = build_struct_float_args(buf, 1.0f);
    const unsigned char *b = (const unsigned char *)a->bytes();
    size_t stale = 0;
    for (size_t i = 0; i < a->size(); i++) stale += b[i] == 0xab;
    T_CHECK(a->size() == 16 && stale == 0, "kernel arguments (struct, float): %zu bytes, %zu stale", a->size(), stale);
    a->~args();
}

static void check_lazy() {
    cudaStream_t s = NULL;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int *d = NULL, got = -1;
    CK(cudaMalloc(&d, sizeof(int)));
    CK(cudaMemset(d, 0, sizeof(int)));
    CK(cudaDeviceSynchronize());
    launch_kernel(k_add, 1, 32, 0, s, d, 5);
    CK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost)); /* legacy stream: no order with s */
    T_CHECK(got == 0, "a blocking copy on the legacy stream does not wait for a non-blocking stream: %d", got);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
    T_CHECK(got == 5, "after cudaStreamSynchronize: %d", got);
    int *pinned = NULL;
    CK(cudaMallocHost(&pinned, sizeof(int)));
    *pinned = -1;
    launch_kernel(k_add, 1, 32, 0, s, d, 1);
    CK(cudaMemcpyAsync(pinned, d, sizeof(int), cudaMemcpyDeviceToHost, s));
    T_CHECK(*pinned == -1, "an async copy into pinned memory has not happened before a sync: %d", *pinned);
    cudaEvent_t e0 = NULL, e1 = NULL;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    CK(cudaEventRecord(e1, s));
    float ms = 0;
    cudaError_t e = cudaEventElapsedTime(&ms, e0, e1);
    T_CHECK(e == cudaErrorNotReady, "elapsed time before the events ran: %s", cudaGetErrorName(e));
    cudaGetLastError();
    e = cudaEventQuery(e1);
    T_CHECK(e == cudaErrorNotReady, "first query of a pending event: %s", cudaGetErrorName(e));
    int polls = 1;
    while (cudaEventQuery(e1) == cudaErrorNotReady && polls < 10) polls++;
    T_CHECK(polls == 1, "a polled event completes (after %d more polls)", polls);
    T_CHECK(*pinned == 6, "pinned copy done once the event after it completed: %d", *pinned);
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaFreeHost(pinned);
    cudaFree(d);
    cudaStreamDestroy(s);
}

static void check_memory_and_devices() {
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    T_CHECK(total_b == (size_t)256 << 20, "INFER_EMU_MEM=256M: total %zu", total_b);
    void *big = NULL;
    cudaError_t e = cudaMalloc(&big, (size_t)300 << 20);
    T_CHECK(e == cudaErrorMemoryAllocation && !big, "300 MiB on a 256 MiB device: %s", cudaGetErrorName(e));
    cudaGetLastError();
    void *p = NULL;
    CK(cudaMalloc(&p, (size_t)100 << 20));
    size_t free2 = 0;
    CK(cudaMemGetInfo(&free2, &total_b));
    T_CHECK(free_b - free2 == (size_t)100 << 20, "free memory drops by the allocation: %zu", free_b - free2);
    cudaFree(p);
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    T_CHECK(n == 2, "INFER_EMU_DEVICES=2: %d devices", n);
    if (n < 2) return;
    cudaStream_t s0 = NULL;
    CK(cudaStreamCreate(&s0));
    int *d = NULL;
    CK(cudaMalloc(&d, 4));
    CK(cudaSetDevice(1));
    launch_kernel(k_add, 1, 32, 0, s0, d, 1);
    e = cudaGetLastError();
    T_CHECK(e == cudaErrorInvalidResourceHandle, "a launch into device 0's stream from device 1: %s", cudaGetErrorName(e));
    emu_counters_reset();
    int *d1 = NULL;
    CK(cudaMalloc(&d1, 4));
    CK(cudaMemset(d1, 0, 4));
    launch_kernel(k_add, 1, 32, 0, 0, d1, 2);
    int got = 0;
    CK(cudaMemcpy(&got, d1, 4, cudaMemcpyDeviceToHost));
    struct emu_counters c0, c1;
    emu_counters_get(0, &c0);
    emu_counters_get(1, &c1);
    T_CHECK(c1.launches == 1 && c1.kernels == 1 && c1.d2h_bytes == 4 && c1.allocs == 1 && c1.syncs == 1,
            "device 1 counters: %llu launches, %llu kernels, %llu D2H bytes, %llu allocs, %llu syncs",
            (unsigned long long)c1.launches, (unsigned long long)c1.kernels, (unsigned long long)c1.d2h_bytes,
            (unsigned long long)c1.allocs, (unsigned long long)c1.syncs);
    T_CHECK(!c0.launches && !c0.kernels && !c0.d2h_bytes && !c0.allocs, "device 0 untouched meanwhile");
    cudaFree(d1);
    CK(cudaSetDevice(0));
    cudaFree(d);
    cudaStreamDestroy(s0);
}

/* A lost partner process fails the waiting rank instead of hanging it: one that never joins
 * (ncclCommInitRank fails after INFER_EMU_NCCL_TIMEOUT and removes the segment), one killed after joining
 * (the collective fails long before the timeout: the dead process is noticed), one that never calls the
 * collective (the helper's all-reduce fails after its 1 s timeout: nccl_stalled_partner). */
static void check_nccl_lost_partner() {
    ncclUniqueId id;
    ncclComm_t c = NULL;
    setenv("INFER_EMU_NCCL_TIMEOUT", "0.5", 1);
    CK(cudaSetDevice(0));
    T_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    double t0 = now_s();
    ncclResult_t e = ncclCommInitRank(&c, 2, id, 0);
    double dt = now_s() - t0;
    T_CHECK(e == ncclRemoteError && dt >= 0.5 && dt < 10, "a partner that never joins: %s after %.2f s (timeout 0.5 s)",
            ncclGetErrorString(e), dt);
    std::string seg = std::string("/dev/shm") + id.internal;
    T_CHECK(access(seg.c_str(), F_OK) != 0, "the failed clique's segment %s is removed", seg.c_str());
    if (c) ncclCommDestroy(c);

    setenv("INFER_EMU_NCCL_TIMEOUT", "30", 1);
    T_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    ncclGroupStart();
    e = ncclCommInitRank(&c, 2, id, 0);
    pid_t pid = spawn_rank("die", id);
    const ncclResult_t joined = ncclGroupEnd();
    T_CHECK(e == ncclSuccess && joined == ncclSuccess && pid > 0, "clique with a helper that dies: %s, %s",
            ncclGetErrorString(e), ncclGetErrorString(joined));
    seg = std::string("/dev/shm") + id.internal;
    T_CHECK(access(seg.c_str(), F_OK) != 0, "the segment %s is removed once every rank joined", seg.c_str());
    cudaStream_t s = NULL;
    float *buf = NULL;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&buf, 4));
    const uint64_t before = emu_reports();
    t0 = now_s();
    T_CHECK(ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, s) == ncclSuccess, "all-reduce queued");
    const cudaError_t se = cudaStreamSynchronize(s);
    dt = now_s() - t0;
    T_CHECK(se == cudaErrorLaunchFailure && dt < 15, "all-reduce with a dead partner: %s after %.1f s (timeout 30 s)",
            cudaGetErrorName(se), dt);
    ncclResult_t async = ncclSuccess;
    T_CHECK(ncclCommGetAsyncError(c, &async) == ncclSuccess && async == ncclRemoteError, "async error %s",
            ncclGetErrorString(async));
    T_CHECK(emu_reports() == before + 1 && strstr(emu_last_report(), "has exited"), "report: %s", emu_last_report());
    e = ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, c, s);
    T_CHECK(e == ncclRemoteError, "a collective on the failed communicator: %s", ncclGetErrorString(e));
    const int st = child_status(pid);
    T_CHECK(st == 128 + SIGKILL, "the helper killed itself: status %d", st);
    ncclCommDestroy(c);
    cudaStreamDestroy(s);
    CK(cudaDeviceReset());
    cudaGetLastError();

    T_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    ncclGroupStart();
    e = ncclCommInitRank(&c, 2, id, 0); /* this side waits with 30 s, the helper with 1 s */
    setenv("INFER_EMU_NCCL_TIMEOUT", "1", 1);
    pid = spawn_rank("stalled", id);
    setenv("INFER_EMU_NCCL_TIMEOUT", "60", 1);
    T_CHECK(ncclGroupEnd() == ncclSuccess && e == ncclSuccess && pid > 0, "clique with a stalled partner");
    const int code = child_status(pid);
    T_CHECK(code == 0, "the helper waiting for a partner that never calls the all-reduce: step %d failed", code);
    ncclCommDestroy(c);
}

/* Ranks in two processes calling different collectives: both report it, as ranks as threads do. */
static void check_nccl_process_mismatch() {
    ncclUniqueId id;
    T_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    const pid_t pid = spawn_rank("mismatch", id);
    const int mine = pid > 0 ? nccl_mismatched(id, 0) : -1, theirs = child_status(pid);
    T_CHECK(mine == 0 && theirs == 0, "mismatched collectives across processes: step %d here, %d in the helper", mine,
            theirs);
    CK(cudaSetDevice(0));
}

static void check_asan_catches_oob() {
#if defined(__SANITIZE_ADDRESS__)
    fflush(stdout);
    char log[] = "/tmp/test-emu-asan-XXXXXX";
    const int fd = mkstemp(log);
    const pid_t pid = fd >= 0 ? fork() : -1;
    if (pid == 0) {
        dup2(fd, 2); /* ASan's report goes to the file, not the test's log */
        float *p = NULL, *out = NULL;
        cudaMalloc(&p, 64 * sizeof(float));
        cudaMalloc(&out, sizeof(float));
        launch_kernel(k_read, 1, 1, 0, 0, p, out, 64 + 3); /* 3 past the end */
        cudaDeviceSynchronize();
        _exit(0);
    }
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    char text[4096] = "";
    const ssize_t n = fd >= 0 ? pread(fd, text, sizeof text - 1, 0) : -1;
    text[n > 0 ? n : 0] = 0;
    T_CHECK(pid > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && strstr(text, "heap-buffer-overflow"),
            "ASan stops a kernel reading past its allocation: %.200s", text);
    if (fd >= 0) close(fd), unlink(log);
#else
    printf("note: ASan's catch of a device out-of-bounds read is checked in the SAN=1 build\n");
#endif
}
#endif

int main(void) {
#ifdef INFER_EMU
    setenv("INFER_EMU_DEVICES", "2", 1); /* before the emulator's first call */
    setenv("INFER_EMU_MEM", "256M", 1);
    setenv("INFER_EMU_NCCL_TIMEOUT", "60", 0); /* a lost helper fails the test in a minute, not ten */
#endif
    const char *role = getenv("TEST_EMU_NCCL_ROLE");
    if (role) return nccl_helper(role);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        T_SKIP("no CUDA device");
        return t_done();
    }
    check_collectives();
    check_mma();
    check_launch_limits();
    check_streams_and_graphs();
    check_cublas();
    check_nccl();
#ifdef INFER_EMU
    check_bug_finders();
    check_argument_padding();
    check_lazy();
    check_memory_and_devices();
    check_nccl_lost_partner();
    check_nccl_process_mismatch();
    check_asan_catches_oob();
    T_CHECK(emu_reports() == 11, "reports: %llu, expected the 9 planted bugs, the dead NCCL partner and the mismatch",
            (unsigned long long)emu_reports());
#endif
    return t_done();
}
