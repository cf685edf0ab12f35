/* quantize.cu: f32 activations -> CUDA 8-bit activations (the q8 split layout of kernels.h).
 *
 * Per 32 values: d = amax / 127, q = round(x / d) (half away from zero), and ds = (d, d * sum(q)),
 * the same numbers as ggml's quantize_row_q8_1 except that the sum is of the rounded values, which
 * the mmv kernels need exactly (sum_i d*q_i*w_i with a per-block weight offset).
 * One warp owns one 32-value group: each lane one value, two warp reductions (amax, sum q).
 * Bytes: reads 4n per row, writes n + 8n/32 per row.
 */
#include "common.cuh"

enum { QUANTIZE_THREADS = 256, QUANTIZE_GROUPS_PER_BLOCK = QUANTIZE_THREADS / WARP_SIZE };

static __global__ void __launch_bounds__(QUANTIZE_THREADS)
quantize_q8_split_kernel(const __grid_constant__ struct quantize_args a) {
    const int64_t n_groups = a.n / Q8_SPLIT_BLOCK;
    const int64_t g = (int64_t)blockIdx.x * QUANTIZE_GROUPS_PER_BLOCK + threadIdx.x / WARP_SIZE;
    const int row = blockIdx.y;
    if (g >= n_groups) return; /* whole warps leave together: the reductions stay full-warp */
    const int lane = threadIdx.x % WARP_SIZE;
    const float x = a.x[(int64_t)row * a.x_stride + g * Q8_SPLIT_BLOCK + lane];
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : (int)roundf(x / d);
    const float qsum = warp_sum((float)q); /* exact: |sum| <= 32 * 127 */
    int8_t *qs = (int8_t *)a.y;
    qs[(int64_t)row * a.n + g * Q8_SPLIT_BLOCK + lane] = (int8_t)q;
    if (lane == 0) {
        float2 *ds = (float2 *)((char *)a.y + q8_split_ds_offset(a.n, a.n_rows));
        ds[(int64_t)row * n_groups + g] = make_float2(d, d * qsum);
    }
}

extern "C" cudaError_t cuda_quantize(const struct quantize_args *a, cudaStream_t s) {
    if (!a->x || !a->y || a->type != INFER_TYPE_Q8_1 || a->n <= 0 || a->n % Q8_SPLIT_BLOCK != 0 || a->n_rows <= 0 ||
        a->n_rows > 65535 || a->x_stride < a->n)
        return cudaErrorInvalidValue;
    const int64_t n_groups = a->n / Q8_SPLIT_BLOCK;
    dim3 grid((unsigned)((n_groups + QUANTIZE_GROUPS_PER_BLOCK - 1) / QUANTIZE_GROUPS_PER_BLOCK), (unsigned)a->n_rows);
    launch_kernel(quantize_q8_split_kernel, grid, QUANTIZE_THREADS, 0, s, *a);
    return cudaGetLastError();
}
