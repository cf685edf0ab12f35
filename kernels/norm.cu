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
 * with silu(g) = g / (1 + expf(-g)). That row arithmetic lives in norm_row.cuh, which gdn.cu's fused output norm
 * (gdn_conv) shares, so the fused form gives this kernel's bits.
 * norm_q (the fused RMSNorm + 8-bit quantisation of a matmul input) keeps this work split and sum,
 * then walks the row in 32-value groups, one warp per group, so thread tid still writes exactly its
 * columns tid + k*ROW_THREADS; each group is quantised as quantize.cu does (d = amax / 127, roundf,
 * (d, d * sum q)), so y and yq are bit-identical to norm followed by quantize.
 * Bytes per call: reads n_rows * n * 4 of x twice (the second read hits L1/L2), of gate once, w once
 * per block (cached); writes n_rows * n * 4.
 */
#include "common.cuh"
#include "norm_row.cuh"

enum { NORM_THREADS = 256, NORM_BLOCK_MIN_N = 1024 };

/* ROW_THREADS = 32: a warp per row; = NORM_THREADS: the block per row. */
template <int ROW_THREADS>
static __global__ void __launch_bounds__(NORM_THREADS) norm_kernel(const __grid_constant__ struct norm_args a) {
    constexpr int ROWS_PER_BLOCK = NORM_THREADS / ROW_THREADS;
    const int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    if (r >= a.n_rows) return; /* whole warps (ROW_THREADS = 32) or the whole block leave together */
    const int tid = threadIdx.x % ROW_THREADS;
    const float *x = a.x + r * a.x_stride; /* y may be x: no __restrict__ */
    const float scale = norm_row_scale<ROW_THREADS>(x, a.n, a.eps, tid);
    norm_row_store<ROW_THREADS>(x, a.y + r * a.y_stride, a.w, a.gate ? a.gate + r * a.gate_stride : NULL, a.n, scale,
                                tid);
}

template <int ROW_THREADS>
static __global__ void __launch_bounds__(NORM_THREADS) norm_q_kernel(const __grid_constant__ struct norm_q_args q) {
    constexpr int ROWS_PER_BLOCK = NORM_THREADS / ROW_THREADS;
    constexpr int WARPS_PER_ROW = ROW_THREADS / WARP_SIZE;
    const struct norm_args &a = q.norm;
    const int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / ROW_THREADS;
    if (r >= a.n_rows) return;
    const int tid = threadIdx.x % ROW_THREADS, lane = tid % WARP_SIZE;
    const float *x = a.x + r * a.x_stride;
    const float scale = norm_row_scale<ROW_THREADS>(x, a.n, a.eps, tid);
    float *y = a.y + r * a.y_stride;
    const int64_t n_groups = a.n / Q8_SPLIT_BLOCK;
    int8_t *qs = (int8_t *)q.yq + r * a.n;
    float2 *ds = (float2 *)((char *)q.yq + q8_split_ds_offset(a.n, a.n_rows)) + r * n_groups;
    for (int64_t g = tid / WARP_SIZE; g < n_groups; g += WARPS_PER_ROW) { /* warp-uniform trip count */
        const int64_t i = g * Q8_SPLIT_BLOCK + lane;
        float v = x[i] * scale;
        if (a.w) v *= a.w[i];
        y[i] = v;
        const float amax = warp_max(fabsf(v));
        const float d = amax / 127.0f;
        const int qv = amax == 0.0f ? 0 : (int)roundf(v / d);
        const float qsum = warp_sum((float)qv);
        qs[i] = (int8_t)qv;
        if (lane == 0) ds[g] = make_float2(d, d * qsum);
    }
}

extern "C" cudaError_t cuda_norm_q(const struct norm_q_args *q, cudaStream_t s) {
    const struct norm_args *a = &q->norm;
    if (!a->x || !a->y || !q->yq || a->gate || q->q_type != INFER_TYPE_Q8_1 || a->n <= 0 || a->n % Q8_SPLIT_BLOCK ||
        a->n_rows < 0 || a->x_stride < a->n || a->y_stride < a->n || !(a->eps >= 0.0f))
        return cudaErrorInvalidValue;
    if (a->n_rows == 0) return cudaGetLastError();
    if (a->n >= NORM_BLOCK_MIN_N) {
        launch_kernel(norm_q_kernel<NORM_THREADS>, (unsigned)a->n_rows, NORM_THREADS, 0, s, *q);
    } else {
        const int rows_per_block = NORM_THREADS / WARP_SIZE;
        launch_kernel(norm_q_kernel<WARP_SIZE>, (unsigned)((a->n_rows + rows_per_block - 1) / rows_per_block), NORM_THREADS, 0, s, *q);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_norm(const struct norm_args *a, cudaStream_t s) {
    if (!a->x || !a->y || a->n <= 0 || a->n_rows < 0 || a->x_stride < a->n || a->y_stride < a->n || !(a->eps >= 0.0f) ||
        (a->gate && a->gate_stride < a->n))
        return cudaErrorInvalidValue;
    if (a->n_rows == 0) return cudaGetLastError();
    if (a->n >= NORM_BLOCK_MIN_N) {
        launch_kernel(norm_kernel<NORM_THREADS>, (unsigned)a->n_rows, NORM_THREADS, 0, s, *a);
    } else {
        const int rows_per_block = NORM_THREADS / WARP_SIZE;
        launch_kernel(norm_kernel<WARP_SIZE>, (unsigned)((a->n_rows + rows_per_block - 1) / rows_per_block), NORM_THREADS, 0, s, *a);
    }
    return cudaGetLastError();
}
