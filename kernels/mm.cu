/* mm.cu: quantised matrix x many tokens (prefill), y[t][r] = epilogue( sum_c W[r][c] x[t][c] ), for
 * every weight type mmv takes; same epilogues (plain, + residual, SwiGLU of two matrices).
 *
 * Two modes, picked once per cuda_mm_state from env INFER_MATMUL (kernels.h):
 *
 * "mma" (default): a tensor-core GEMM that dequantises W on the fly. Block = 4 warps, output tile
 * MM_BM = 64 rows (outputs) x MM_BN = 64 tokens, K steps of MM_BK = 64 values. Per step:
 *   1. the 64 x 64 tile of W -> f16 in shared memory ws[row][k] (rows MM_LDK = 72 halves apart: 144-
 *      byte rows keep 16-byte stores aligned and make the fragment loads conflict-free, bank 4g + c);
 *      quantised types: thread t decodes the 32-value unit (t % 2) of row t / 2 (one q8 unit: a Q8_0 /
 *      Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL block, or a K-quant / IQ4_XS sub-block) with the math of
 *      blocks.h, so the values are bit-identical to lib/quant.c's before the f16 rounding; float types
 *      copy pairs, coalesced;
 *   2. the 64 x 64 tile of x (f32) -> f16 in xs[token][k], the same way;
 *   3. warp (wm, wn) = (warp % 2, warp / 2) owns rows 32wm.. and tokens 32wn..: 2 x 4 mma.sync
 *      m16n8k16 (f16 x f16 -> f32) per 16 values of K; W is the row-major A operand, x^T the
 *      column-major B operand, so both fragments are 32-bit pairs along K straight from shared memory.
 * SwiGLU keeps a second W tile and accumulator set. Tails: rows >= n_out, tokens >= n_tokens and
 * columns >= n_in (float types: any n_in; quantised: a 32-unit tail of the last 64-step) load as
 * zeros and are not stored. The epilogue reads add[o] before writing y[o] in the same thread, so add
 * may alias y. a->xq is not used: both modes take the f32 activations.
 *
 * "cublas": the baseline. x is converted to f16 in token chunks and W dequantised to f16 in row
 * chunks (mm_plan_chunks, kernels.h) inside the state's fixed scratch, then cublasGemmEx (f16 inputs,
 * f32 output, CUBLAS_COMPUTE_32F) writes y directly: y^T = W x^T in cuBLAS's column-major terms
 * (A = W chunk transposed, lda = n_in; B = x chunk, ldb = n_in; C = y + t0 * n_out + r0, ldc = n_out).
 * MMV_ADD is beta = 1 on y (add copied into y first unless it aliases y); SwiGLU writes the gate
 * product into y, the up product into the scratch's f32 part, then an epilogue kernel combines them.
 * cublasSetStream resets the handle's workspace, so every call sets the stream then the workspace.
 *
 * Accuracy: x (and W for float types) are rounded to f16 (11-bit significand), products are exact
 * and summed in f32: relative error ~2^-11 per term (test-ops states the bound). Activations
 * beyond the f16 range (|x| > 65504) become Inf; BF16 weights below 2^-24 in magnitude flush to 0.
 * Neither mode allocates, syncs or reads host memory per call (graph-capturable).
 *
 * Both modes run on the CPU under the emulator (make EMU=1: mma.sync and cuBLAS included), so test-ops
 * checks this file on every machine.
 * note: the mma kernel has no software pipelining yet (decode, sync, mma per step); it is the first
 * version: bench-ops -o mm compares it with the cuBLAS mode.
 */
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

extern "C" { /* status.h has no C++ guard; included first so quant.h's copy is a no-op */
#include "status.h"
}
#include "mm_tile.cuh"

enum { MM_MODE_MMA = 0, MM_MODE_CUBLAS = 1 };
#define MM_WORKSPACE_BYTES ((size_t)32 << 20)

struct cuda_mm_state {
    int mode;             /* MM_MODE_* */
    cublasHandle_t blas;  /* cublas mode only */
    void *workspace;      /* MM_WORKSPACE_BYTES, cuBLAS's own */
    void *scratch;        /* MM_SCRATCH_BYTES, the f16 copies */
};

static MM_HD float silu(float v) { return v / (1.0f + __expf(-v)); }

/* ---- the tensor-core kernel ---- */

/* Tokens n0.. and columns k0.. of x as an MM_BN x MM_BK f16 tile s[token][k]; zeros outside. */
static MM_HD void fill_x(const float *x, int64_t n_tokens, int64_t n_in, int64_t n0, int64_t k0, int tid, uint16_t *s) {
    for (int i = tid; i < MM_BN * MM_BK / 2; i += MM_THREADS) {
        const int n = i / (MM_BK / 2), kp = i % (MM_BK / 2);
        const int64_t t = n0 + n, c = k0 + 2 * kp;
        float v0 = 0.0f, v1 = 0.0f;
        if (t < n_tokens) {
            const float *xr = x + t * n_in;
            if (c < n_in) v0 = xr[c];
            if (c + 1 < n_in) v1 = xr[c + 1];
        }
        *(uint32_t *)(s + n * MM_LDK + 2 * kp) = pack_h2(v0, v1);
    }
}

/* Warp (wm, wn) owns rows 32wm + 16mt (mt < 2) and tokens 32wn + 8nt (nt < 4) of the block's tile. */
template <bool SWIGLU>
static MM_HD void store_tile(const struct mm_args &a, const float acc[2][4][4], const float acc2[2][4][4], int64_t m0,
                             int64_t n0, int wm, int wn, int g, int c) {
MM_UNROLL
    for (int mt = 0; mt < 2; mt++)
MM_UNROLL
        for (int nt = 0; nt < 4; nt++)
MM_UNROLL
            for (int e = 0; e < 4; e++) {
                const int64_t r = m0 + 32 * wm + 16 * mt + g + (e >= 2 ? 8 : 0);
                const int64_t t = n0 + 32 * wn + 8 * nt + 2 * c + (e & 1);
                if (r >= a.n_out || t >= a.n_tokens) continue;
                const int64_t o = t * a.n_out + r;
                float v = acc[mt][nt][e];
                if (a.epilogue == MMV_ADD) v += a.add[o]; /* read before the write below: add may be y */
                if constexpr (SWIGLU) v = silu(v) * acc2[mt][nt][e];
                a.y[o] = v;
            }
}

template <int T, bool SWIGLU>
static __global__ void __launch_bounds__(MM_THREADS) mm_kernel(const __grid_constant__ struct mm_args a, const size_t rb) {
    __shared__ __align__(16) uint16_t ws[MM_BM * MM_LDK], xs[MM_BN * MM_LDK], w2s[SWIGLU ? MM_BM * MM_LDK : 8];
    const int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE, g = lane / 4, c = lane % 4;
    const int wm = warp % 2, wn = warp / 2;
    const int64_t m0 = (int64_t)blockIdx.x * MM_BM, n0 = (int64_t)blockIdx.y * MM_BN;
    float acc[2][4][4], acc2[2][4][4];
    const auto fill_tokens = [&](int64_t k0, uint16_t *s) { fill_x(a.x, a.n_tokens, a.n_in, n0, k0, tid, s); };
    mm_tile_loop<T, SWIGLU>((const uint8_t *)a.w, (const uint8_t *)a.w2, rb, a.n_out, a.n_in, m0, fill_tokens, ws, w2s, xs,
                            acc, acc2);
    store_tile<SWIGLU>(a, acc, acc2, m0, n0, wm, wn, g, c);
}

template <int T> static cudaError_t mma_launch(const struct mm_args *a, size_t rb, cudaStream_t s) {
    const dim3 grid((unsigned)((a->n_out + MM_BM - 1) / MM_BM), (unsigned)((a->n_tokens + MM_BN - 1) / MM_BN));
    if (a->epilogue == MMV_SWIGLU) launch_kernel(mm_kernel<T, true>, grid, MM_THREADS, 0, s, *a, rb);
    else launch_kernel(mm_kernel<T, false>, grid, MM_THREADS, 0, s, *a, rb);
    return cudaGetLastError();
}

/* ---- the cuBLAS baseline ---- */

/* Rows r0 .. r0+nr-1 of W as f16, rows n_in apart (quantised types: n_in a multiple of 32, so every
 * unit's 64 bytes stay 16-byte aligned). */
template <int T>
static __global__ void dequant_f16_kernel(const uint8_t *w, size_t rb, int64_t n_in, int64_t r0, int64_t nr, uint16_t *out) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    if constexpr (is_float_type<T>::value) {
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nr * n_in; i += step)
            out[i] = __half_as_ushort(__float2half_rn(fval<T>(w + (r0 + i / n_in) * rb, i % n_in)));
    } else {
        const int64_t units = n_in / 32;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nr * units; i += step) {
            float v[32];
            wdec<T>::unit(w + (r0 + i / units) * rb, i % units, v);
            store32_h(out + (i / units) * n_in + 32 * (i % units), v);
        }
    }
}

static __global__ void f32_to_f16_kernel(const float *x, int64_t n, uint16_t *out) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

/* y[t0 + t][r0 + r] = silu(y[..]) * up[t * nr + r] for the chunk's nt tokens and nr rows. */
static __global__ void swiglu_chunk_kernel(float *y, const float *up, int64_t n_out, int64_t r0, int64_t nr, int64_t t0,
                                           int64_t nt) {
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nr * nt; i += step) {
        float *o = y + (t0 + i / nr) * n_out + r0 + i % nr;
        *o = silu(*o) * up[i];
    }
}

/* Blocks of 256 threads for n grid-stride items. */
static unsigned grid_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 8192 ? 8192 : b);
}

static cudaError_t blas_error(cublasStatus_t e) {
    switch (e) {
    case CUBLAS_STATUS_SUCCESS: return cudaSuccess;
    case CUBLAS_STATUS_ALLOC_FAILED: return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_INVALID_VALUE: case CUBLAS_STATUS_NOT_SUPPORTED: return cudaErrorInvalidValue;
    default: return cudaErrorUnknown;
    }
}

/* W rows r0.. (nr) -> scratch f16, then C = W_chunk x_chunk^T into c (ldc floats apart). */
template <int T>
static cudaError_t blas_chunk(const struct mm_args *a, struct cuda_mm_state *st, const struct mm_chunks *p,
                              const void *w, size_t rb, int64_t r0, int64_t nr, int64_t nt, float beta, float *c,
                              int64_t ldc, cudaStream_t s) {
    uint16_t *xh = (uint16_t *)st->scratch, *wh = (uint16_t *)((char *)st->scratch + p->w_off);
    const int64_t n_items = is_float_type<T>::value ? nr * a->n_in : nr * (a->n_in / 32);
    launch_kernel(dequant_f16_kernel<T>, grid_for(n_items), 256, 0, s, (const uint8_t *)w, rb, a->n_in, r0, nr, wh);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const float alpha = 1.0f;
    return blas_error(cublasGemmEx(st->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)nt, (int)a->n_in, &alpha, wh,
                                   CUDA_R_16F, (int)a->n_in, xh, CUDA_R_16F, (int)a->n_in, &beta, c, CUDA_R_32F, (int)ldc,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <int T> static cudaError_t blas_launch(const struct mm_args *a, struct cuda_mm_state *st, size_t rb, cudaStream_t s) {
    struct mm_chunks p;
    const int swiglu = a->epilogue == MMV_SWIGLU;
    if (!mm_plan_chunks(a->n_in, a->n_out, a->n_tokens, swiglu, MM_SCRATCH_BYTES, &p)) return cudaErrorInvalidValue;
    cudaError_t e = blas_error(cublasSetStream(st->blas, s));
    if (e == cudaSuccess) e = blas_error(cublasSetWorkspace(st->blas, st->workspace, MM_WORKSPACE_BYTES));
    if (e != cudaSuccess) return e;
    if (a->epilogue == MMV_ADD && a->add != a->y) { /* beta = 1 accumulates onto the residual in y */
        e = cudaMemcpyAsync(a->y, a->add, sizeof(float) * (size_t)(a->n_tokens * a->n_out), cudaMemcpyDeviceToDevice, s);
        if (e != cudaSuccess) return e;
    }
    const float beta = a->epilogue == MMV_ADD ? 1.0f : 0.0f;
    float *up = (float *)((char *)st->scratch + p.t_off);
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += p.tokens) {
        const int64_t nt = a->n_tokens - t0 < p.tokens ? a->n_tokens - t0 : p.tokens;
        launch_kernel(f32_to_f16_kernel, grid_for(nt * a->n_in), 256, 0, s, a->x + t0 * a->n_in, nt * a->n_in, (uint16_t *)st->scratch);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        for (int64_t r0 = 0; r0 < a->n_out; r0 += p.rows) {
            const int64_t nr = a->n_out - r0 < p.rows ? a->n_out - r0 : p.rows;
            float *yc = a->y + t0 * a->n_out + r0;
            if ((e = blas_chunk<T>(a, st, &p, a->w, rb, r0, nr, nt, beta, yc, a->n_out, s)) != cudaSuccess) return e;
            if (!swiglu) continue;
            if ((e = blas_chunk<T>(a, st, &p, a->w2, rb, r0, nr, nt, 0.0f, up, nr, s)) != cudaSuccess) return e;
            launch_kernel(swiglu_chunk_kernel, grid_for(nr * nt), 256, 0, s, a->y, up, a->n_out, r0, nr, t0, nt);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}

/* ---- entry points ---- */

extern "C" cudaError_t cuda_mm_state_create(struct cuda_mm_state **out) {
    *out = NULL;
    const char *env = getenv("INFER_MATMUL");
    int mode;
    if (!env || !*env || !strcmp(env, "mma")) mode = MM_MODE_MMA;
    else if (!strcmp(env, "cublas")) mode = MM_MODE_CUBLAS;
    else return cudaErrorInvalidValue;
    struct cuda_mm_state *st = (struct cuda_mm_state *)xcalloc(1, sizeof *st);
    if (!st) return cudaErrorMemoryAllocation;
    st->mode = mode;
    cudaError_t e = cudaSuccess;
    if (mode == MM_MODE_CUBLAS) {
        e = blas_error(cublasCreate(&st->blas));
        if (e == cudaSuccess) e = cudaMalloc(&st->workspace, MM_WORKSPACE_BYTES);
        if (e == cudaSuccess) e = cudaMalloc(&st->scratch, MM_SCRATCH_BYTES);
    }
    if (e != cudaSuccess) {
        cuda_mm_state_free(st);
        return e;
    }
    *out = st;
    return cudaSuccess;
}

extern "C" void cuda_mm_state_free(struct cuda_mm_state *st) {
    if (!st) return;
    if (st->blas) cublasDestroy(st->blas);
    if (st->workspace) cudaFree(st->workspace);
    if (st->scratch) cudaFree(st->scratch);
    xfree(st);
}


template <int T> static cudaError_t launch_type(const struct mm_args *a, struct cuda_mm_state *st, size_t rb, cudaStream_t s) {
    return st->mode == MM_MODE_CUBLAS ? blas_launch<T>(a, st, rb, s) : mma_launch<T>(a, rb, s);
}

extern "C" cudaError_t cuda_mm(const struct mm_args *a, struct cuda_mm_state *st, cudaStream_t s) {
    if (!a || !st || !a->w || !a->x || !a->y) return cudaErrorInvalidValue;
    const struct quant_type *qt = quant_type(a->type);
    if (!qt || a->n_in <= 0 || a->n_out <= 0 || a->n_tokens < 1 || a->n_in % qt->blck != 0) return cudaErrorInvalidValue;
    if (a->epilogue < MMV_PLAIN || a->epilogue > MMV_SWIGLU || (a->epilogue == MMV_SWIGLU && !a->w2) ||
        (a->epilogue == MMV_ADD && !a->add))
        return cudaErrorInvalidValue;
    /* cuBLAS takes int sizes; the mma grid's y dimension is at most 65535 */
    if (a->n_in > 2147483647 || a->n_out > 2147483647 || (a->n_tokens + MM_BN - 1) / MM_BN > 65535) return cudaErrorInvalidValue;
    const size_t rb = quant_row_bytes(a->type, a->n_in);
    switch (a->type) {
#define MM_DISPATCH(t) case INFER_TYPE_##t: return launch_type<INFER_TYPE_##t>(a, st, rb, s);
        MM_TYPES(MM_DISPATCH)
#undef MM_DISPATCH
    default: return cudaErrorInvalidValue;
    }
}
