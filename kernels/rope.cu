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
 * Bytes per call: reads and writes 4 n_tokens n_head n_rot (plus 4 n_tokens of pos, cached).
 */
#include <math.h>

#include "common.cuh"

enum { ROPE_THREADS = 256 };

template <int MODE>
static __global__ void __launch_bounds__(ROPE_THREADS)
rope_kernel(const __grid_constant__ struct rope_args a, const float theta_scale) {
    const int half = a.n_rot / 2;
    const int64_t idx = (int64_t)blockIdx.x * ROPE_THREADS + threadIdx.x;
    if (idx >= (int64_t)a.n_tokens * a.n_head * half) return;
    const int i = (int)(idx % half);
    const int h = (int)((idx / half) % a.n_head);
    const int64_t t = idx / ((int64_t)half * a.n_head);
    float theta = (float)a.pos[t];
    for (int k = 0; k < i; k++) theta = __fmul_rn(theta, theta_scale);
    float sn, cs;
    sincosf(__fmul_rn(a.freq_scale, theta), &sn, &cs);
    float *x = a.x + t * a.token_stride + (int64_t)h * a.head_stride;
    const int i0 = MODE == ROPE_NEOX ? i : 2 * i, i1 = MODE == ROPE_NEOX ? i + half : 2 * i + 1;
    const float x0 = x[i0], x1 = x[i1];
    x[i0] = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
    x[i1] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs));
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
    if (a->mode == ROPE_NEOX) rope_kernel<ROPE_NEOX><<<(unsigned)blocks, ROPE_THREADS, 0, s>>>(*a, theta_scale);
    else rope_kernel<ROPE_NORMAL><<<(unsigned)blocks, ROPE_THREADS, 0, s>>>(*a, theta_scale);
    return cudaGetLastError();
}
