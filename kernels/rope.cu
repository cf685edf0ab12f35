/* rope.cu: rotary position embedding in place (kernels.h rope_args), ggml's rope_f32 without YaRN.
 *   ROPE_NORMAL rotates pairs (2i, 2i+1), ROPE_NEOX pairs (i, i + n_rot/2), for i < n_rot/2:
 *     x0' = x0 cos(a) - x1 sin(a),  x1' = x0 sin(a) + x1 cos(a),  a = freq_scale * theta_i
 *   dims >= n_rot are left as they are (partial rotation).
 * Layout: token t head h starts at x + t*token_stride + h*head_stride; pos (n_tokens).
 * Work split: a thread owns one pair (t, h, i) over a flat index, i fastest (so a warp covers
 * consecutive pairs of one head); no thread touches another's values, so in place is safe.
 * Angles as the CPU op computes them, to match it to f32 rounding: theta_scale =
 * powf(freq_base, -2/n_rot) is computed once on the host (the same libm powf as lib/cpu/rope.c; the
 * device powf may differ by ulps, and i repeated multiplications would amplify that), then
 * theta_i = pos * theta_scale^i by i float multiplications in the CPU's order. The rotation uses
 * __fmul_rn so nvcc cannot contract it into FMAs the CPU does not do; what remains is sincosf
 * (2 ulp) against libm's sinf / cosf.
 * rope_norm (QK-norm fused in): one warp per (token, head): the head's sum of squares as norm.cu's
 * warp-per-row path sums it (lane-strided fmaf, warp tree), scale = 1 / sqrtf(ss / D + eps), each
 * value (x * scale) * w, then the rotation above on those values: bit-identical to norm then rope.
 * A lane owns whole pairs and the unrotated tail dims lane + 32k, and has read all it sums before the
 * warp reduction, so src == x is safe.
 * Bytes per call: reads and writes 4 n_tokens n_head n_rot (plus 4 n_tokens of pos, cached).
 */
#include <math.h>

#include "common.cuh"

enum { ROPE_THREADS = 256 };

/* sin and cos of pair i's angle at position pos (both kernels, so they agree bit for bit). */
static __device__ __forceinline__ void rope_sincos(float pos, int i, float theta_scale, float freq_scale, float *sn,
                                                   float *cs) {
    float theta = pos;
    for (int k = 0; k < i; k++) theta = __fmul_rn(theta, theta_scale);
    sincosf(__fmul_rn(freq_scale, theta), sn, cs);
}

template <int MODE>
static __global__ void __launch_bounds__(ROPE_THREADS)
rope_kernel(const __grid_constant__ struct rope_args a, const float theta_scale) {
    const int half = a.n_rot / 2;
    const int64_t idx = (int64_t)blockIdx.x * ROPE_THREADS + threadIdx.x;
    if (idx >= (int64_t)a.n_tokens * a.n_head * half) return;
    const int i = (int)(idx % half);
    const int h = (int)((idx / half) % a.n_head);
    const int64_t t = idx / ((int64_t)half * a.n_head);
    float sn, cs;
    rope_sincos((float)a.pos[t], i, theta_scale, a.freq_scale, &sn, &cs);
    float *x = a.x + t * a.token_stride + (int64_t)h * a.head_stride;
    const int i0 = MODE == ROPE_NEOX ? i : 2 * i, i1 = MODE == ROPE_NEOX ? i + half : 2 * i + 1;
    const float x0 = x[i0], x1 = x[i1];
    x[i0] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
    x[i1] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
}

enum { ROPE_NORM_WARPS = ROPE_THREADS / WARP_SIZE };

template <int MODE>
static __global__ void __launch_bounds__(ROPE_THREADS)
rope_norm_kernel(const __grid_constant__ struct rope_norm_args a, const float theta_scale) {
    const struct rope_args &r = a.rope;
    const int64_t row = (int64_t)blockIdx.x * ROPE_NORM_WARPS + threadIdx.x / WARP_SIZE;
    if (row >= (int64_t)r.n_tokens * r.n_head) return; /* whole warps */
    const int lane = threadIdx.x % WARP_SIZE, D = r.head_dim, half = r.n_rot / 2;
    const int64_t t = row / r.n_head;
    const int h = (int)(row % r.n_head);
    const float *src = a.src + t * a.src_token_stride + (int64_t)h * a.src_head_stride; /* may be x */
    float *x = r.x + t * r.token_stride + (int64_t)h * r.head_stride;
    float ss = 0.0f;
    for (int i = lane; i < D; i += WARP_SIZE) ss = fmaf(src[i], src[i], ss);
    ss = warp_sum(ss);
    const float scale = 1.0f / sqrtf(ss / (float)D + a.eps);
    const float pos = (float)r.pos[t];
    for (int i = lane; i < half; i += WARP_SIZE) {
        const int i0 = MODE == ROPE_NEOX ? i : 2 * i, i1 = MODE == ROPE_NEOX ? i + half : 2 * i + 1;
        const float x0 = src[i0] * scale * a.w[i0], x1 = src[i1] * scale * a.w[i1];
        float sn, cs;
        rope_sincos(pos, i, theta_scale, r.freq_scale, &sn, &cs);
        x[i0] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
        x[i1] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
    }
    for (int i = r.n_rot + lane; i < D; i += WARP_SIZE) x[i] = src[i] * scale * a.w[i];
}

extern "C" cudaError_t cuda_rope_norm(const struct rope_norm_args *a, cudaStream_t s) {
    const struct rope_args *r = &a->rope;
    if (!r->x || !r->pos || !a->src || !a->w || r->n_tokens < 0 || r->n_head < 1 || r->n_rot < 2 || r->n_rot % 2 ||
        r->n_rot > r->head_dim || r->head_dim > 1024 || (r->mode != ROPE_NORMAL && r->mode != ROPE_NEOX) ||
        !(a->eps >= 0.0f))
        return cudaErrorInvalidValue;
    const int64_t rows = (int64_t)r->n_tokens * r->n_head, blocks = (rows + ROPE_NORM_WARPS - 1) / ROPE_NORM_WARPS;
    if (blocks > 2147483647) return cudaErrorInvalidValue;
    if (rows == 0) return cudaGetLastError();
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_rot); /* host libm, as lib/cpu/rope.c */
    if (r->mode == ROPE_NEOX) launch_kernel(rope_norm_kernel<ROPE_NEOX>, (unsigned)blocks, ROPE_THREADS, 0, s, *a, theta_scale);
    else launch_kernel(rope_norm_kernel<ROPE_NORMAL>, (unsigned)blocks, ROPE_THREADS, 0, s, *a, theta_scale);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_rope(const struct rope_args *a, cudaStream_t s) {
    if (!a->x || !a->pos || a->n_tokens < 0 || a->n_head < 1 || a->n_rot < 2 || a->n_rot % 2 || a->n_rot > a->head_dim ||
        (a->mode != ROPE_NORMAL && a->mode != ROPE_NEOX))
        return cudaErrorInvalidValue;
    const int64_t pairs = (int64_t)a->n_tokens * a->n_head * (a->n_rot / 2);
    const int64_t blocks = (pairs + ROPE_THREADS - 1) / ROPE_THREADS;
    if (blocks > 2147483647) return cudaErrorInvalidValue;
    if (pairs == 0) return cudaGetLastError();
    const float theta_scale = powf(a->freq_base, -2.0f / (float)a->n_rot); /* host libm, as lib/cpu/rope.c */
    if (a->mode == ROPE_NEOX) launch_kernel(rope_kernel<ROPE_NEOX>, (unsigned)blocks, ROPE_THREADS, 0, s, *a, theta_scale);
    else launch_kernel(rope_kernel<ROPE_NORMAL>, (unsigned)blocks, ROPE_THREADS, 0, s, *a, theta_scale);
    return cudaGetLastError();
}
