/* moe.cu: the mixture-of-experts router and expert FFN (moe_route_args, moe_ffn_args; CPU twin
 * lib/cpu/moe.c).
 *
 * cuda_moe_route: one warp per token. Lane l holds logits l, l+32, ... (n_expert <= 512) in
 * registers; softmax p_e = e^(z_e - max) / sum (sum in double, like the CPU); then n_expert_used
 * rounds of a warp arg-max over the experts not yet taken (larger logit wins, equal logits go to the
 * lower id), so ids come out by decreasing probability. norm: weights divided by their sum (double,
 * in top-k order). Bytes: the logits once, ids and weights once.
 *
 * cuda_moe_ffn: y[t] = sum_k w[t][k] down_e(silu(gate_e x[t]) * up_e x[t]), e = ids[t][k], in two
 * kernels with the hidden vectors in a->scratch ((n_tokens, n_expert_used, n_ff) f32,
 * moe_ffn_scratch_floats):
 *   moe_gate_up: grid (n_ff / 4, min(n_tokens * n_expert_used, 65535)), one warp per hidden row f of
 *     (token, expert) pairs blockIdx.y, + gridDim.y, ...: h = silu(gate_e[f].x) * (up_e[f].x);
 *   moe_down: grid (n_embd / 4, min(n_tokens, 65535)), one warp per output row i of tokens blockIdx.y,
 *     + gridDim.y, ..., the k experts in top-k order: y = sum_k w_k (down_e[i].h_k) (deterministic).
 * Weights are dequantised on the fly with the kernels/blocks.h decoders (32 values per lane step)
 * and dotted with f32 activations; the CPU quantises x and h to 8 bits first (llama.cpp's CPU path),
 * so the two agree to activation-quantisation noise, and exactly-float weights agree to rounding.
 * Every selected expert runs in one launch per matrix (grouped). Bytes: each selected expert's three
 * matrices once per token using it (decode: once), x and h from L2.
 * Batches of MOE_GROUPED_TOKENS tokens or more go to moe_mm.cu instead: tokens sorted by expert and
 * grouped GEMMs on tensor cores, each expert read once per 64 of its pairs.
 * note: a q8 + dp4a version sharing mmv.cu's decoders is the next step for decode.
 */
#include "common.cuh"
#include "quant.h"

enum { MOE_WARPS = 4, MOE_THREADS = MOE_WARPS * WARP_SIZE, MOE_ROUTE_PER_LANE = 16,
       MOE_MAX_EXPERT = MOE_ROUTE_PER_LANE * WARP_SIZE, MOE_MAX_USED = WARP_SIZE };

/* ---- router ---- */

static __device__ __forceinline__ bool moe_better(float v, int e, float bv, int be) {
    return e >= 0 && (be < 0 || v > bv || (v == bv && e < be));
}

static __global__ void __launch_bounds__(MOE_THREADS) moe_route_kernel(const __grid_constant__ struct moe_route_args a) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int64_t t = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / WARP_SIZE;
    if (t >= a.n_tokens) return; /* whole warp */
    const float *z = a.logits + t * a.n_expert;
    float zl[MOE_ROUTE_PER_LANE];
    float mx = -INFINITY;
#pragma unroll
    for (int m = 0; m < MOE_ROUTE_PER_LANE; m++) {
        const int e = lane + WARP_SIZE * m;
        zl[m] = e < a.n_expert ? z[e] : -INFINITY;
        mx = fmaxf(mx, zl[m]);
    }
    mx = warp_max(mx);
    double sum = 0.0;
#pragma unroll
    for (int m = 0; m < MOE_ROUTE_PER_LANE; m++)
        if (lane + WARP_SIZE * m < a.n_expert) sum += (double)expf(zl[m] - mx);
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    uint32_t taken = 0;
    double wsum = 0.0;
    float mine = 0.0f; /* lane k keeps weight k */
    for (int k = 0; k < a.n_expert_used; k++) {
        float bv = -INFINITY;
        int be = -1;
#pragma unroll
        for (int m = 0; m < MOE_ROUTE_PER_LANE; m++) {
            const int e = lane + WARP_SIZE * m;
            if (e < a.n_expert && !(taken >> m & 1u) && moe_better(zl[m], e, bv, be)) bv = zl[m], be = e;
        }
#pragma unroll
        for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (moe_better(ov, oe, bv, be)) bv = ov, be = oe;
        }
        if (be % WARP_SIZE == lane) taken |= 1u << (be / WARP_SIZE);
        const float w = (float)((double)expf(bv - mx) / sum);
        wsum += w;
        if (lane == k) mine = w;
        if (lane == 0) a.ids[t * a.n_expert_used + k] = be;
    }
    if (lane < a.n_expert_used) a.weights[t * a.n_expert_used + lane] = a.norm ? (float)(mine / wsum) : mine;
}

extern "C" cudaError_t cuda_moe_route(const struct moe_route_args *a, cudaStream_t s) {
    if (!a->logits || !a->ids || !a->weights || a->n_tokens < 0 || a->n_expert < 1 || a->n_expert > MOE_MAX_EXPERT ||
        a->n_expert_used < 1 || a->n_expert_used > a->n_expert || a->n_expert_used > MOE_MAX_USED)
        return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaGetLastError();
    launch_kernel(moe_route_kernel, (unsigned)((a->n_tokens + MOE_WARPS - 1) / MOE_WARPS), MOE_THREADS, 0, s, *a);
    return cudaGetLastError();
}

/* ---- expert FFN ---- */

/* Values 32u .. 32u+31 of a weight row of type T (u counts 32-value units along the row). */
template <int T> static __device__ __forceinline__ void moe_unit(const uint8_t *row, int64_t u, float y[32]);
#define MOE_UNIT32(T, t)                                                                                     \
    template <> __device__ __forceinline__ void moe_unit<INFER_TYPE_##T>(const uint8_t *row, int64_t u, float y[32]) { \
        blocks_dequant_##t((const block_##t *)row + u, y);                                                   \
    }
#define MOE_UNIT256(T, t)                                                                                    \
    template <> __device__ __forceinline__ void moe_unit<INFER_TYPE_##T>(const uint8_t *row, int64_t u, float y[32]) { \
        blocks_sub_##t((const block_##t *)row + u / 8, (int)(u % 8), y);                                     \
    }
MOE_UNIT32(Q4_0, q4_0)
MOE_UNIT32(Q4_1, q4_1)
MOE_UNIT32(Q5_0, q5_0)
MOE_UNIT32(Q5_1, q5_1)
MOE_UNIT32(Q8_0, q8_0)
MOE_UNIT32(IQ4_NL, iq4_nl)
MOE_UNIT32(MXFP4, mxfp4)
MOE_UNIT256(Q2_K, q2_K)
MOE_UNIT256(Q3_K, q3_K)
MOE_UNIT256(Q4_K, q4_K)
MOE_UNIT256(Q5_K, q5_K)
MOE_UNIT256(Q6_K, q6_K)
MOE_UNIT256(IQ4_XS, iq4_xs)
BLOCKS_IQ_TYPES(MOE_UNIT256)
#undef MOE_UNIT32
#undef MOE_UNIT256

/* The weight types moe_ffn covers (gate/up and down independently; the weight types libinfer computes
 * with, as on the CPU); one switch dispatches. */
#define MOE_FLOAT_TYPES(X) X(F32) X(F16) X(BF16)
#define MOE_QUANT_TYPES(X) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(Q8_0) X(IQ4_NL) X(Q2_K) X(Q3_K) X(Q4_K) X(Q5_K) X(Q6_K) \
    X(IQ4_XS) X(MXFP4) BLOCKS_IQ_TYPE_IDS(X)

template <int T> static __device__ __forceinline__ float moe_float(const uint8_t *row, int64_t i) {
    if constexpr (T == INFER_TYPE_F32) return ((const float *)row)[i];
    else if constexpr (T == INFER_TYPE_F16) return blocks_f16_to_f32(((const uint16_t *)row)[i]);
    else return blocks_bf16_to_f32(((const uint16_t *)row)[i]);
}

/* Warp dot product of a weight row (n values of type T) with f32 x; every lane gets the sum. */
template <int T> static __device__ __forceinline__ float moe_row_dot(const uint8_t *row, const float *x, int64_t n) {
    const int lane = threadIdx.x % WARP_SIZE;
    float s = 0.0f;
    if constexpr (T == INFER_TYPE_F32 || T == INFER_TYPE_F16 || T == INFER_TYPE_BF16) {
        for (int64_t c = lane; c < n; c += WARP_SIZE) s += moe_float<T>(row, c) * x[c];
    } else {
        for (int64_t u = lane; u < n / 32; u += WARP_SIZE) {
            float w[32];
            moe_unit<T>(row, u, w);
            const float4 *x4 = (const float4 *)(x + 32 * u);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float4 xv = x4[i];
                s += w[4 * i] * xv.x + w[4 * i + 1] * xv.y + w[4 * i + 2] * xv.z + w[4 * i + 3] * xv.w;
            }
        }
    }
    return warp_sum(s);
}

/* Row bytes of both matrix types, computed on the host. */
struct moe_rows {
    size_t gu, dn;
};

template <int T>
static __global__ void __launch_bounds__(MOE_THREADS)
    moe_gate_up(const __grid_constant__ struct moe_ffn_args a, const struct moe_rows rb) {
    const int64_t f = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / WARP_SIZE;
    if (f >= a.n_ff) return; /* whole warp */
    const int64_t pairs = (int64_t)a.n_tokens * a.n_expert_used;
    for (int64_t pair = blockIdx.y; pair < pairs; pair += gridDim.y) { /* grid.y is capped at 65535 */
        const int64_t t = pair / a.n_expert_used;
        const int e = a.ids[pair];
        float h = __int_as_float(0x7fc00000); /* an id out of range poisons the row (the CPU returns an error) */
        if (e >= 0 && e < a.n_expert) {
            const size_t off = ((size_t)e * a.n_ff + f) * rb.gu;
            const float *x = a.x + t * a.n_embd;
            const float g = moe_row_dot<T>((const uint8_t *)a.gate + off, x, a.n_embd);
            const float u = moe_row_dot<T>((const uint8_t *)a.up + off, x, a.n_embd);
            h = g / (1.0f + expf(-g)) * u;
        }
        if (threadIdx.x % WARP_SIZE == 0) a.scratch[pair * a.n_ff + f] = h;
    }
}

template <int T>
static __global__ void __launch_bounds__(MOE_THREADS)
    moe_down(const __grid_constant__ struct moe_ffn_args a, const struct moe_rows rb) {
    const int64_t i = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / WARP_SIZE;
    if (i >= a.n_embd) return; /* whole warp */
    for (int64_t t = blockIdx.y; t < a.n_tokens; t += gridDim.y) { /* grid.y is capped at 65535 */
        float y = 0.0f;
        for (int k = 0; k < a.n_expert_used; k++) {
            const int64_t pair = t * a.n_expert_used + k;
            const int e = a.ids[pair];
            if (e < 0 || e >= a.n_expert) {
                y = __int_as_float(0x7fc00000);
                break;
            }
            const float o = moe_row_dot<T>((const uint8_t *)a.down + ((size_t)e * a.n_embd + i) * rb.dn,
                                           a.scratch + pair * a.n_ff, a.n_ff);
            y += a.weights[pair] * o;
        }
        if (threadIdx.x % WARP_SIZE == 0) a.y[t * a.n_embd + i] = y;
    }
}

static bool moe_type_ok(int32_t type, int64_t n) {
    const struct quant_type *qt = quant_type(type);
    switch (type) {
#define MOE_CASE(t) case INFER_TYPE_##t:
        MOE_FLOAT_TYPES(MOE_CASE) return n > 0;
        MOE_QUANT_TYPES(MOE_CASE) return qt && n > 0 && n % qt->blck == 0 && n % 32 == 0;
#undef MOE_CASE
    default: return false;
    }
}

extern "C" cudaError_t cuda_moe_ffn(const struct moe_ffn_args *a, cudaStream_t s) {
    if (!a->gate || !a->up || !a->down || !a->x || !a->ids || !a->weights || !a->y || !a->scratch ||
        a->n_tokens < 0 || a->n_expert < 1 || a->n_expert_used < 1 || !moe_type_ok(a->type_gate_up, a->n_embd) ||
        !moe_type_ok(a->type_down, a->n_ff))
        return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaGetLastError();
    if (a->n_tokens >= MOE_GROUPED_TOKENS) return cuda_moe_ffn_grouped(a, s); /* moe_mm.cu */
    const int64_t pairs = (int64_t)a->n_tokens * a->n_expert_used;
    const int64_t gx = (a->n_ff + MOE_WARPS - 1) / MOE_WARPS, dx = (a->n_embd + MOE_WARPS - 1) / MOE_WARPS;
    if (gx > 2147483647 || dx > 2147483647) return cudaErrorInvalidValue;
    const struct moe_rows rb = {quant_row_bytes(a->type_gate_up, a->n_embd), quant_row_bytes(a->type_down, a->n_ff)};
    const dim3 ggrid((unsigned)gx, (unsigned)(pairs < 65535 ? pairs : 65535)),
        dgrid((unsigned)dx, (unsigned)(a->n_tokens < 65535 ? a->n_tokens : 65535));
    switch (a->type_gate_up) {
#define MOE_GU(t) case INFER_TYPE_##t: launch_kernel(moe_gate_up<INFER_TYPE_##t>, ggrid, MOE_THREADS, 0, s, *a, rb); break;
        MOE_FLOAT_TYPES(MOE_GU) MOE_QUANT_TYPES(MOE_GU)
#undef MOE_GU
    default: return cudaErrorInvalidValue;
    }
    switch (a->type_down) {
#define MOE_DN(t) case INFER_TYPE_##t: launch_kernel(moe_down<INFER_TYPE_##t>, dgrid, MOE_THREADS, 0, s, *a, rb); break;
        MOE_FLOAT_TYPES(MOE_DN) MOE_QUANT_TYPES(MOE_DN)
#undef MOE_DN
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
