/* norm_row.cuh: one row of the norm op (kernels.h norm_args) as norm.cu's kernels compute it, ROW_THREADS threads a
 * row (a warp, or a whole block), thread tid owning the columns tid, tid + ROW_THREADS, ...:
 *   scale = 1 / sqrtf(sum of squares (fmaf, thread-strided, then the warp's butterfly and the warps in order) / n + eps)
 *   y = (x * scale) * w * silu(gate)   (w, gate NULL: left out)
 * Shared by norm.cu and by gdn.cu's fused output norm (gdn_conv with norm_done), so that the fused form gives the
 * norm op's bits. X is const float *, or const volatile float * for a row other blocks wrote during the same launch
 * (read from L2, past a stale L1 line). Each thread reads only its own columns before writing them: y may be x. */
#ifndef INFER_NORM_ROW_CUH
#define INFER_NORM_ROW_CUH

#include "common.cuh"

static __device__ __forceinline__ float norm_silu(float v) { return v / (1.0f + expf(-v)); }

/* 1 / sqrt(mean(x^2) + eps) of the row x of n values. ROW_THREADS = WARP_SIZE: every lane of the warp calls it;
 * more: every thread of the block (a barrier inside). */
template <int ROW_THREADS, typename X>
static __device__ __forceinline__ float norm_row_scale(X x, int64_t n, float eps, int tid) {
    constexpr int WARPS_PER_ROW = ROW_THREADS / WARP_SIZE;
    float ss = 0.0f;
    for (int64_t i = tid; i < n; i += ROW_THREADS) {
        const float v = x[i];
        ss = fmaf(v, v, ss);
    }
    ss = warp_sum(ss);
    if constexpr (WARPS_PER_ROW > 1) {
        __shared__ float part[WARPS_PER_ROW];
        if (tid % WARP_SIZE == 0) part[tid / WARP_SIZE] = ss;
        __syncthreads();
        ss = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS_PER_ROW; w++) ss += part[w];
    }
    return 1.0f / sqrtf(ss / (float)n + eps);
}

/* y = (x * scale) * w * silu(g) on the thread's columns; w and g may be NULL. */
template <int ROW_THREADS, typename X>
static __device__ __forceinline__ void norm_row_store(X x, float *y, const float *w, const float *g, int64_t n,
                                                      float scale, int tid) {
    for (int64_t i = tid; i < n; i += ROW_THREADS) {
        float v = x[i] * scale;
        if (w) v *= w[i];
        if (g) v *= norm_silu(g[i]);
        y[i] = v;
    }
}

#endif
