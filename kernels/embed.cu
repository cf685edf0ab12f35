/* embed.cu: embedding lookup (cuda_embed, ggml_get_rows) and KV cache writes (cuda_kv_store), the CUDA
 * twins of lib/cpu/embed.c.
 *
 * embed: y[t][i] = value i of row ids[t] of the table, decoded with the block decoders of blocks.h (the
 * same code lib/quant.c uses, so the values are bit-identical to the CPU's). Grid (ceil(n_embd / 256),
 * n_tokens); each thread decodes one element. Bytes: n_tokens rows of the table read, n_tokens * n_embd
 * floats written. An id outside the table writes NaNs (the launcher cannot read ids: no host reads).
 * kv_store: cells[pos[t]][i] = f16(x[t][i]), round to nearest even like the CPU's conversion. Grid
 * (ceil(row / 256), n_tokens), one element per thread. Q8_0 cells: one warp per block of 32 values,
 * amax by warp reduction, then the CPU's arithmetic in the same order (d = amax / 127, id = 1 / d,
 * q = roundf(x * id), IEEE division: no fast math), so the cells are bit-identical to cpu_kv_store's.
 * Grid (ceil(row / 32 / 8), n_tokens), 8 warps per CUDA block. With rot (llama.cpp's Hadamard rotation):
 * one warp per chunk of rot values, rotated in shared memory by warp_hadamard (common.cuh: the
 * butterflies of kv_hadamard, each stage's pairs spread over the lanes: the same f32 operations per
 * element as the CPU's sequential loop), then quantised block by block as above. Grid
 * (ceil(row / rot / 8), n_tokens).
 */
#include "common.cuh"

enum { EMBED_THREADS = 256 };

static __device__ float embed_value(int32_t type, const uint8_t *row, int64_t i) {
    switch (type) {
    case INFER_TYPE_F32: return ((const float *)row)[i];
    case INFER_TYPE_F16: return blocks_f16_to_f32(((const uint16_t *)row)[i]);
    case INFER_TYPE_BF16: return blocks_bf16_to_f32(((const uint16_t *)row)[i]);
    case INFER_TYPE_Q4_0: return blocks_value_q4_0((const block_q4_0 *)row + i / 32, (int)(i % 32));
    case INFER_TYPE_Q4_1: return blocks_value_q4_1((const block_q4_1 *)row + i / 32, (int)(i % 32));
    case INFER_TYPE_Q5_0: return blocks_value_q5_0((const block_q5_0 *)row + i / 32, (int)(i % 32));
    case INFER_TYPE_Q5_1: return blocks_value_q5_1((const block_q5_1 *)row + i / 32, (int)(i % 32));
    case INFER_TYPE_Q8_0: return blocks_value_q8_0((const block_q8_0 *)row + i / 32, (int)(i % 32));
    case INFER_TYPE_IQ4_NL: return blocks_value_iq4_nl((const block_iq4_nl *)row + i / 32, (int)(i % 32));
    case INFER_TYPE_MXFP4: return blocks_value_mxfp4((const block_mxfp4 *)row + i / 32, (int)(i % 32));
#define EMBED_IQ_VALUE(T, t) case INFER_TYPE_##T: return blocks_value_##t((const block_##t *)row + i / 256, (int)(i % 256));
        BLOCKS_IQ_TYPES(EMBED_IQ_VALUE)
#undef EMBED_IQ_VALUE
    case INFER_TYPE_Q2_K: return blocks_value_q2_K((const block_q2_K *)row + i / 256, (int)(i % 256));
    case INFER_TYPE_Q3_K: return blocks_value_q3_K((const block_q3_K *)row + i / 256, (int)(i % 256));
    case INFER_TYPE_Q4_K: return blocks_value_q4_K((const block_q4_K *)row + i / 256, (int)(i % 256));
    case INFER_TYPE_Q5_K: return blocks_value_q5_K((const block_q5_K *)row + i / 256, (int)(i % 256));
    case INFER_TYPE_Q6_K: return blocks_value_q6_K((const block_q6_K *)row + i / 256, (int)(i % 256));
    case INFER_TYPE_IQ4_XS: return blocks_value_iq4_xs((const block_iq4_xs *)row + i / 256, (int)(i % 256));
    default: return __int_as_float(0x7fc00000);
    }
}

static __global__ void __launch_bounds__(EMBED_THREADS) embed_kernel(const struct embed_args a, size_t row_bytes) {
    const int64_t i = (int64_t)blockIdx.x * EMBED_THREADS + threadIdx.x, t = blockIdx.y;
    if (i >= a.n_embd) return;
    const int32_t id = a.ids[t];
    float v = __int_as_float(0x7fc00000);
    if (id >= 0 && id < a.n_rows) v = embed_value(a.type, (const uint8_t *)a.table + (size_t)id * row_bytes, i);
    a.y[t * a.n_embd + i] = v;
}

static __global__ void __launch_bounds__(EMBED_THREADS) kv_store_kernel(const struct kv_store_args a) {
    const int64_t i = (int64_t)blockIdx.x * EMBED_THREADS + threadIdx.x, t = blockIdx.y;
    if (i >= a.row) return;
    ((uint16_t *)a.cells)[(size_t)a.pos[t] * (size_t)a.cell_stride + (size_t)i] = blocks_f32_to_f16(a.x[t * a.x_stride + i]);
}

static __global__ void __launch_bounds__(EMBED_THREADS) kv_store_q8_0_kernel(const struct kv_store_args a) {
    const int64_t b = (int64_t)blockIdx.x * (EMBED_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE, t = blockIdx.y;
    const int lane = threadIdx.x % WARP_SIZE;
    if (b >= a.row / QK8_0) return; /* warp-uniform */
    const float x = a.x[t * a.x_stride + b * QK8_0 + lane];
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q8_0 *y = (block_q8_0 *)a.cells + (size_t)a.pos[t] * (size_t)(a.cell_stride / QK8_0) + (size_t)b;
    y->qs[lane] = (int8_t)roundf(x * id);
    if (lane == 0) y->d = blocks_f32_to_f16(d);
}

static __global__ void __launch_bounds__(EMBED_THREADS) kv_store_q8_0_rot_kernel(const struct kv_store_args a) {
    __shared__ float sh[EMBED_THREADS / WARP_SIZE][512];
    const int w = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, n = a.rot;
    const int64_t c = (int64_t)blockIdx.x * (EMBED_THREADS / WARP_SIZE) + w, t = blockIdx.y; /* chunk c of row t */
    if (c >= a.row / n) return; /* warp-uniform */
    float *x = sh[w];
    for (int i = lane; i < n; i += WARP_SIZE) x[i] = a.x[t * a.x_stride + c * n + i];
    warp_hadamard(x, n, lane); /* each lane scales the values it loaded: no __syncwarp needed before */
    block_q8_0 *y = (block_q8_0 *)a.cells + (size_t)a.pos[t] * (size_t)(a.cell_stride / QK8_0) + (size_t)(c * n / QK8_0);
    for (int b = 0; b < n / QK8_0; b++) {
        const float v = x[b * QK8_0 + lane];
        const float amax = warp_max(fabsf(v));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].qs[lane] = (int8_t)roundf(v * id);
        if (lane == 0) y[b].d = blocks_f32_to_f16(d);
    }
}

/* Bytes of a row of n elements of a type embed decodes; 0 for anything else. */
static size_t embed_row_bytes(int32_t type, int64_t n) {
    switch (type) {
    case INFER_TYPE_F32: return (size_t)n * 4;
    case INFER_TYPE_F16: case INFER_TYPE_BF16: return (size_t)n * 2;
    case INFER_TYPE_Q4_0: return n % 32 ? 0 : (size_t)(n / 32) * sizeof(block_q4_0);
    case INFER_TYPE_Q4_1: return n % 32 ? 0 : (size_t)(n / 32) * sizeof(block_q4_1);
    case INFER_TYPE_Q5_0: return n % 32 ? 0 : (size_t)(n / 32) * sizeof(block_q5_0);
    case INFER_TYPE_Q5_1: return n % 32 ? 0 : (size_t)(n / 32) * sizeof(block_q5_1);
    case INFER_TYPE_Q8_0: return n % 32 ? 0 : (size_t)(n / 32) * sizeof(block_q8_0);
    case INFER_TYPE_IQ4_NL: return n % 32 ? 0 : (size_t)(n / 32) * sizeof(block_iq4_nl);
    case INFER_TYPE_MXFP4: return n % 32 ? 0 : (size_t)(n / 32) * sizeof(block_mxfp4);
#define EMBED_IQ_BYTES(T, t) case INFER_TYPE_##T: return n % 256 ? 0 : (size_t)(n / 256) * sizeof(block_##t);
        BLOCKS_IQ_TYPES(EMBED_IQ_BYTES)
#undef EMBED_IQ_BYTES
    case INFER_TYPE_Q2_K: return n % 256 ? 0 : (size_t)(n / 256) * sizeof(block_q2_K);
    case INFER_TYPE_Q3_K: return n % 256 ? 0 : (size_t)(n / 256) * sizeof(block_q3_K);
    case INFER_TYPE_Q4_K: return n % 256 ? 0 : (size_t)(n / 256) * sizeof(block_q4_K);
    case INFER_TYPE_Q5_K: return n % 256 ? 0 : (size_t)(n / 256) * sizeof(block_q5_K);
    case INFER_TYPE_Q6_K: return n % 256 ? 0 : (size_t)(n / 256) * sizeof(block_q6_K);
    case INFER_TYPE_IQ4_XS: return n % 256 ? 0 : (size_t)(n / 256) * sizeof(block_iq4_xs);
    default: return 0;
    }
}

extern "C" cudaError_t cuda_embed(const struct embed_args *a, cudaStream_t s) {
    const size_t rb = embed_row_bytes(a->type, a->n_embd);
    if (!rb || !a->table || !a->ids || !a->y || a->n_tokens < 0 || a->n_tokens > 65535) return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaSuccess;
    dim3 grid((unsigned)((a->n_embd + EMBED_THREADS - 1) / EMBED_THREADS), (unsigned)a->n_tokens);
    launch_kernel(embed_kernel, grid, EMBED_THREADS, 0, s, *a, rb);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_kv_store(const struct kv_store_args *a, cudaStream_t s) {
    if (!a->x || !a->cells || !a->pos || a->row <= 0 || a->x_stride < a->row || a->cell_stride < a->row ||
        a->n_tokens < 0 || a->n_tokens > 65535 || (a->type != INFER_TYPE_F16 && a->type != INFER_TYPE_Q8_0))
        return cudaErrorInvalidValue;
    if (a->type == INFER_TYPE_Q8_0 && (a->row % QK8_0 || a->cell_stride % QK8_0)) return cudaErrorInvalidValue;
    if (!kv_rot_valid(a->rot, a->row) || (a->rot && a->type != INFER_TYPE_Q8_0)) return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaSuccess;
    if (a->rot) {
        const int64_t per = EMBED_THREADS / WARP_SIZE, nc = a->row / a->rot;
        launch_kernel(kv_store_q8_0_rot_kernel, dim3((unsigned)((nc + per - 1) / per), (unsigned)a->n_tokens), EMBED_THREADS, 0, s, *a);
        return cudaGetLastError();
    }
    if (a->type == INFER_TYPE_Q8_0) {
        const int64_t per = EMBED_THREADS / WARP_SIZE, nb = a->row / QK8_0;
        launch_kernel(kv_store_q8_0_kernel, dim3((unsigned)((nb + per - 1) / per), (unsigned)a->n_tokens), EMBED_THREADS, 0, s, *a);
        return cudaGetLastError();
    }
    dim3 grid((unsigned)((a->row + EMBED_THREADS - 1) / EMBED_THREADS), (unsigned)a->n_tokens);
    launch_kernel(kv_store_kernel, grid, EMBED_THREADS, 0, s, *a);
    return cudaGetLastError();
}
