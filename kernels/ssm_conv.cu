/* ssm_conv.cu: the causal depthwise conv1d of a Gated DeltaNet layer with its carried window, then
 * SiLU (ssm_conv_args; CPU twin lib/cpu/ssm_conv.c).
 *
 * With X = the d_conv-1 state rows followed by the n_tokens input rows:
 *   y[t][ch] = silu( sum_{i<d_conv} w[ch][i] X[t+i][ch] ),  then state = the last d_conv-1 rows of X.
 * One thread per channel walks the tokens in order with the window (d_conv-1 values) and the d_conv
 * taps in registers: each token reads one x value, writes one y value, and shifts the window; the
 * state is read once at the start and written once at the end (own channel only, so no other thread
 * can see a half-replaced window). Snapshots: token t >= snap_from writes the window after token t to
 * ring slot (snap_pos0 + t) % snap_ring. Taps are summed in order 0..d_conv-1 with unfused multiply
 * and add (__fmul_rn / __fadd_rn) like the CPU, so y differs from it only through expf in the SiLU.
 * Layouts: x rows x_stride floats apart, state / snapshot rows n_ch apart, y packed; loads and stores
 * are coalesced over channels. Bytes: x and y once, the state twice, w once, snapshots as asked.
 */
#include "common.cuh"

enum { CONV_THREADS = 128, CONV_MAX = 16 }; /* d_conv limit, as on the CPU (the models use 4) */

static __global__ void __launch_bounds__(CONV_THREADS) ssm_conv_kernel(const __grid_constant__ struct ssm_conv_args a) {
    const int64_t ch = (int64_t)blockIdx.x * CONV_THREADS + threadIdx.x;
    if (ch >= a.n_ch) return;
    const int nw = a.d_conv - 1;
    float win[CONV_MAX], w[CONV_MAX];
#pragma unroll
    for (int i = 0; i < CONV_MAX; i++) {
        win[i] = i < nw ? a.state[(int64_t)i * a.n_ch + ch] : 0.0f;
        w[i] = i < a.d_conv ? a.w[ch * a.d_conv + i] : 0.0f;
    }
    for (int64_t t = 0; t < a.n_tokens; t++) {
        const float x = a.x[t * a.x_stride + ch];
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < CONV_MAX; i++)
            if (i < a.d_conv) s = __fadd_rn(s, __fmul_rn(w[i], i < nw ? win[i] : x));
        a.y[t * a.n_ch + ch] = s / (1.0f + expf(-s));
#pragma unroll
        for (int i = 0; i + 1 < CONV_MAX; i++) /* ascending: win[i + 1] is read before it moves */
            if (i < nw) win[i] = i + 1 < nw ? win[i + 1] : x;
        if (a.snap && t >= a.snap_from) {
            float *sn = a.snap + ((a.snap_pos0 + t) % a.snap_ring) * a.snap_stride;
#pragma unroll
            for (int i = 0; i < CONV_MAX; i++)
                if (i < nw) sn[(int64_t)i * a.n_ch + ch] = win[i];
        }
    }
#pragma unroll
    for (int i = 0; i < CONV_MAX; i++)
        if (i < nw) a.state[(int64_t)i * a.n_ch + ch] = win[i];
}

extern "C" cudaError_t cuda_ssm_conv(const struct ssm_conv_args *a, cudaStream_t s) {
    if (!a->x || !a->state || !a->w || !a->y || a->n_ch <= 0 || a->x_stride < a->n_ch || a->n_tokens < 0 ||
        a->d_conv < 2 || a->d_conv > CONV_MAX)
        return cudaErrorInvalidValue;
    if (a->snap && (a->snap_ring <= 0 || a->snap_pos0 < 0 || a->snap_stride < (int64_t)(a->d_conv - 1) * a->n_ch))
        return cudaErrorInvalidValue;
    const int64_t blocks = (a->n_ch + CONV_THREADS - 1) / CONV_THREADS;
    if (blocks > 2147483647) return cudaErrorInvalidValue;
    launch_kernel(ssm_conv_kernel, (unsigned)blocks, CONV_THREADS, 0, s, *a);
    return cudaGetLastError();
}
