/* act.cu: elementwise activations and the row softmax (kernels.h act_args).
 *   SILU            y = x * sigmoid(x)            SWIGLU           y = silu(x) * x2
 *   SIGMOID_MUL     y = x * sigmoid(x2)           SIGMOID_MUL_ROW  y[r][i] = x[r][i] * sigmoid(x2[r * x2_stride])
 *   ADD             y = x + x2                    SOFTMAX          y = softmax(scale * x) per row
 * Layout: x and y (n_rows, n) packed; x2 rows x2_stride floats apart (0: n).
 * Elementwise work split: a thread owns one column of a row; blockIdx.x covers the columns, blockIdx.y
 * strides over the rows (so any n_rows fits the 65535 limit of grid.y). Every element is read and
 * written by the same thread, so y may be x or x2 (exactly; a shifted overlap would race). For
 * SIGMOID_MUL_ROW every thread of a row reads the row's gate, which must not lie inside y (the
 * launcher refuses an overlap).
 * Softmax: one block per row (blockIdx.x strides over rows); a thread owns columns tid, tid + 256, ...
 * through three passes (max of scale*x; y = expf(scale*x - max) and its sum; y *= 1/sum), so y == x is
 * safe. The sum is accumulated in float per thread then reduced as a tree; the CPU twin sums in
 * double: relative difference ~ (n / 256 + 8) * 2^-24 at worst.
 * Matching the CPU: sigmoid(v) = 1 / (1 + expf(-v)), silu(v) = v / (1 + expf(-v)) (CUDA expf: 2 ulp),
 * and scale * x is rounded before the max subtraction (__fmul_rn: no FMA contraction), so expf sees
 * the CPU's exact arguments.
 * Bytes per call: elementwise reads 4 n_rows n (x) + 4 n_rows n (x2, or 4 n_rows for the row gate),
 * writes 4 n_rows n; softmax reads x twice and y once, writes y twice (L2-resident rows).
 */
#include "common.cuh"

enum { ACT_THREADS = 256, ACT_MAX_GRID_Y = 65535, ACT_SOFTMAX_MAX_BLOCKS = 65535 };

static __device__ __forceinline__ float act_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
static __device__ __forceinline__ float act_silu(float v) { return v / (1.0f + expf(-v)); }

template <int OP>
static __global__ void __launch_bounds__(ACT_THREADS) act_elem_kernel(const __grid_constant__ struct act_args a) {
    const int64_t i = (int64_t)blockIdx.x * ACT_THREADS + threadIdx.x;
    if (i >= a.n) return;
    const int64_t s2 = a.x2_stride ? a.x2_stride : a.n;
    for (int64_t r = blockIdx.y; r < a.n_rows; r += gridDim.y) {
        const float x = a.x[r * a.n + i];
        float v;
        if constexpr (OP == ACT_SILU) v = act_silu(x);
        else if constexpr (OP == ACT_SWIGLU) v = act_silu(x) * a.x2[r * s2 + i];
        else if constexpr (OP == ACT_SIGMOID_MUL) v = x * act_sigmoid(a.x2[r * s2 + i]);
        else if constexpr (OP == ACT_SIGMOID_MUL_ROW) v = x * act_sigmoid(a.x2[r * s2]);
        else v = x + a.x2[r * s2 + i]; /* ACT_ADD */
        a.y[r * a.n + i] = v;
    }
}

/* Sum or max over the block; every thread gets the result. part is reused: the trailing barrier
 * keeps the next call from overwriting it while slow threads still read. */
template <bool MAX>
static __device__ __forceinline__ float act_block_reduce(float v, float *part) {
    constexpr int WARPS = ACT_THREADS / WARP_SIZE;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (threadIdx.x % WARP_SIZE == 0) part[threadIdx.x / WARP_SIZE] = v;
    __syncthreads();
    v = part[0];
#pragma unroll
    for (int w = 1; w < WARPS; w++) v = MAX ? fmaxf(v, part[w]) : v + part[w];
    __syncthreads();
    return v;
}

static __global__ void __launch_bounds__(ACT_THREADS) act_softmax_kernel(const __grid_constant__ struct act_args a) {
    __shared__ float part[ACT_THREADS / WARP_SIZE];
    for (int64_t r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
        const float *x = a.x + r * a.n;
        float *y = a.y + r * a.n;
        float mx = -INFINITY;
        for (int64_t i = threadIdx.x; i < a.n; i += ACT_THREADS) mx = fmaxf(mx, __fmul_rn(a.scale, x[i]));
        mx = act_block_reduce<true>(mx, part);
        float sum = 0.0f;
        for (int64_t i = threadIdx.x; i < a.n; i += ACT_THREADS) {
            const float e = expf(__fmul_rn(a.scale, x[i]) - mx);
            y[i] = e;
            sum += e;
        }
        const float inv = 1.0f / act_block_reduce<false>(sum, part);
        for (int64_t i = threadIdx.x; i < a.n; i += ACT_THREADS) y[i] *= inv;
    }
}

extern "C" cudaError_t cuda_act(const struct act_args *a, cudaStream_t s) {
    const bool needs_x2 = a->op == ACT_SWIGLU || a->op == ACT_SIGMOID_MUL || a->op == ACT_SIGMOID_MUL_ROW || a->op == ACT_ADD;
    const int64_t s2 = a->x2_stride ? a->x2_stride : a->n;
    if (!a->x || !a->y || a->n <= 0 || a->n_rows < 0 || a->op < ACT_SILU || a->op > ACT_ADD || (needs_x2 && !a->x2) ||
        s2 < (a->op == ACT_SIGMOID_MUL_ROW ? 1 : a->n))
        return cudaErrorInvalidValue;
    if (a->n_rows == 0) return cudaGetLastError();
    if (a->op == ACT_SIGMOID_MUL_ROW) { /* the gates must survive the writes of y */
        const uintptr_t y0 = (uintptr_t)a->y, y1 = (uintptr_t)(a->y + (int64_t)a->n_rows * a->n);
        const uintptr_t g0 = (uintptr_t)a->x2, g1 = (uintptr_t)(a->x2 + (int64_t)(a->n_rows - 1) * s2 + 1);
        if (g0 < y1 && y0 < g1) return cudaErrorInvalidValue;
    }
    if (a->op == ACT_SOFTMAX) {
        const unsigned blocks = (unsigned)(a->n_rows < ACT_SOFTMAX_MAX_BLOCKS ? a->n_rows : ACT_SOFTMAX_MAX_BLOCKS);
        launch_kernel(act_softmax_kernel, blocks, ACT_THREADS, 0, s, *a);
        return cudaGetLastError();
    }
    const dim3 grid((unsigned)((a->n + ACT_THREADS - 1) / ACT_THREADS),
                    (unsigned)(a->n_rows < ACT_MAX_GRID_Y ? a->n_rows : ACT_MAX_GRID_Y));
    switch (a->op) {
#define ACT_CASE(op) case op: launch_kernel(act_elem_kernel<op>, grid, ACT_THREADS, 0, s, *a); break;
        ACT_CASE(ACT_SILU) ACT_CASE(ACT_SWIGLU) ACT_CASE(ACT_SIGMOID_MUL) ACT_CASE(ACT_SIGMOID_MUL_ROW) ACT_CASE(ACT_ADD)
#undef ACT_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
