/* norm.cu: RMSNorm  y = x / sqrt(mean(x^2) + eps) * w,  and the gated form (the GDN output norm)
 * y = RMSNorm(x) * w * silu(gate)  (kernels.h norm_args).
 *
 * Layout: x (n_rows, n) rows x_stride floats apart, y rows y_stride apart (y may be x), gate rows
 * gate_stride apart, w (n) or NULL.
 * Work split: rows of n < NORM_BLOCK_MIN_N (head norms: 64..256 values, many rows) get one warp per
 * row, NORM_THREADS / 32 rows per block; longer rows (n_embd: 2048..8192) get the whole block.
 * A thread owns the columns lane, lane + row_threads, ...: it sums their squares, then after the
 * reduction writes exactly those columns, so y == x is safe (each element is read before it is
 * written, by the thread that writes it).
 * Precision: the sum of squares is accumulated in float per thread (fmaf) and reduced as a tree;
 * the CPU twin (ggml's rms_norm) sums in double. The relative difference of the scale is about
 * (n / row_threads + log2(row_threads)) * 2^-24 in the worst case, ~1e-6 at n = 8192 (the scale
 * enters with a square root, halving it). The rest follows the CPU order exactly:
 * scale = 1 / sqrtf(ss / n + eps) (IEEE sqrt and divide), y = (x * scale) * w, then y *= silu(gate)
 * with silu(g) = g / (1 + expf(-g)).
 * Bytes per call: reads n_rows * n * 4 of x twice (the second read hits L1/L2), of gate once, w once
 * per block (cached); writes n_rows * n * 4.
 */
#include "common.cuh"

enum { NORM_THREADS = 256, NORM_BLOCK_MIN_N = 1024 };

static __device__ __forceinline__ float norm_silu(float v) { return v / (1.0f + expf(-v)); }

/* ROW_THREADS = 32: a warp per row; = NORM_THREADS: the block per row. */
template <int ROW_THREADS>
static __global__ void __launch_bounds__(NORM_THREADS) norm_kernel(const __grid_constant__ struct norm_args a) {
    constexpr int ROWS_PER_BLOCK = NORM_THREADS / ROW_THREADS;
    constexpr int WARPS_PER_ROW = ROW_THREADS / WARP_SIZE;
    const int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    if (r >= a.n_rows) return; /* whole warps (ROW_THREADS = 32) or the whole block leave together */
    const int tid = threadIdx.x % ROW_THREADS;
    const float *x = a.x + r * a.x_stride; /* y may be x: no __restrict__ */
    float ss = 0.0f;
    for (int64_t i = tid; i < a.n; i += ROW_THREADS) ss = fmaf(x[i], x[i], ss);
    ss = warp_sum(ss);
    if constexpr (WARPS_PER_ROW > 1) {
        __shared__ float part[WARPS_PER_ROW];
        if (tid % WARP_SIZE == 0) part[tid / WARP_SIZE] = ss;
        __syncthreads();
        ss = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS_PER_ROW; w++) ss += part[w];
    }
    const float scale = 1.0f / sqrtf(ss / (float)a.n + a.eps);
    float *y = a.y + r * a.y_stride;
    const float *g = a.gate ? a.gate + r * a.gate_stride : NULL;
    for (int64_t i = tid; i < a.n; i += ROW_THREADS) {
        float v = x[i] * scale;
        if (a.w) v *= a.w[i];
        if (g) v *= norm_silu(g[i]);
        y[i] = v;
    }
}

extern "C" cudaError_t cuda_norm(const struct norm_args *a, cudaStream_t s) {
    if (!a->x || !a->y || a->n <= 0 || a->n_rows < 0 || a->x_stride < a->n || a->y_stride < a->n || !(a->eps >= 0.0f) ||
        (a->gate && a->gate_stride < a->n))
        return cudaErrorInvalidValue;
    if (a->n_rows == 0) return cudaGetLastError();
    if (a->n >= NORM_BLOCK_MIN_N) {
        norm_kernel<NORM_THREADS><<<(unsigned)a->n_rows, NORM_THREADS, 0, s>>>(*a);
    } else {
        const int rows_per_block = NORM_THREADS / WARP_SIZE;
        norm_kernel<WARP_SIZE><<<(unsigned)((a->n_rows + rows_per_block - 1) / rows_per_block), NORM_THREADS, 0, s>>>(*a);
    }
    return cudaGetLastError();
}
