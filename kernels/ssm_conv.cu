/* ssm_conv.cu: the causal depthwise conv1d of a Gated DeltaNet layer with its carried window, then
 * SiLU (ssm_conv_args; CPU twin lib/cpu/ssm_conv.c).
 *
 * The window is a ring of R = ssm_conv_ring(d_conv) slots indexed by position (slot p mod R); with p0 =
 * *pos and X(p) the input row of position p (the ring's slot for p < p0):
 *   y[t][ch] = silu( sum_{i<d_conv} w[ch][i] X(p0+t-(d_conv-1)+i)[ch] ),  then slot(p0+t) = x[t].
 * One thread per channel reads the d_conv-1 slots of positions p0-d_conv+1 .. p0-1 once, then walks the
 * tokens in order with the window and the d_conv taps in registers: each token reads one x value, writes
 * one y value and its input into its slot (evicting position p0+t-R, which no later token reads), and
 * shifts the window. Snapshots: token t >= snap_from writes the window after token t (positions
 * p0+t-d_conv+2 .. p0+t, in that order) as the d_conv-1 rows of snapshot (snap_pos0 + t) % snap_ring, straight
 * from the registers. Taps are summed in order 0..d_conv-1 with unfused multiply and add (__fmul_rn /
 * __fadd_rn) like the CPU, so y differs from it only through expf in the SiLU. gdn.cu's fused gdn_conv_kernel does the same arithmetic per channel.
 * Layouts: x rows x_stride floats apart, ring / snapshot slots n_ch apart, y packed; loads and stores
 * are coalesced over channels. Bytes: x and y once, d_conv-1 slots read and n_tokens written, w once,
 * d_conv-1 rows per snapshot.
 */
#include "common.cuh"

enum { CONV_THREADS = 128, CONV_MAX = 16 }; /* d_conv limit, as on the CPU (the models use 4) */

static __global__ void __launch_bounds__(CONV_THREADS) ssm_conv_kernel(const __grid_constant__ struct ssm_conv_args a) {
    const int64_t ch = (int64_t)blockIdx.x * CONV_THREADS + threadIdx.x;
    if (ch >= a.n_ch) return;
    const int nw = a.d_conv - 1;
    const int64_t R = ssm_conv_ring(a.d_conv), p0 = *a.pos;
    float win[CONV_MAX], w[CONV_MAX];
#pragma unroll
    for (int i = 0; i < CONV_MAX; i++) { /* win[i]: position p0 - nw + i */
        win[i] = i < nw ? a.state[ssm_conv_slot(p0 - nw + i, R) * a.n_ch + ch] : 0.0f;
        w[i] = i < a.d_conv ? a.w[ch * a.d_conv + i] : 0.0f;
    }
    for (int64_t t = 0; t < a.n_tokens; t++) {
        const float x = a.x[t * a.x_stride + ch];
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < CONV_MAX; i++)
            if (i < a.d_conv) s = __fadd_rn(s, __fmul_rn(w[i], i < nw ? win[i] : x));
        a.y[t * a.n_ch + ch] = s / (1.0f + expf(-s));
        a.state[ssm_conv_slot(p0 + t, R) * a.n_ch + ch] = x;
#pragma unroll
        for (int i = 0; i + 1 < CONV_MAX; i++) /* ascending: win[i + 1] is read before it moves */
            if (i < nw) win[i] = i + 1 < nw ? win[i + 1] : x;
        if (a.snap && t >= a.snap_from) { /* win[i]: position p0 + t - nw + 1 + i */
            float *sn = a.snap + ((a.snap_pos0 + t) % a.snap_ring) * a.snap_stride;
#pragma unroll
            for (int i = 0; i < CONV_MAX; i++)
                if (i < nw) sn[i * a.n_ch + ch] = win[i];
        }
    }
}

extern "C" cudaError_t cuda_ssm_conv(const struct ssm_conv_args *a, cudaStream_t s) {
    if (!a->x || !a->state || !a->w || !a->y || !a->pos || a->n_ch <= 0 || a->x_stride < a->n_ch || a->n_tokens < 0 ||
        a->d_conv < 2 || a->d_conv > CONV_MAX)
        return cudaErrorInvalidValue;
    if (a->snap && (a->snap_ring <= 0 || a->snap_pos0 < 0 || a->snap_stride < (int64_t)(a->d_conv - 1) * a->n_ch))
        return cudaErrorInvalidValue;
    const int64_t blocks = (a->n_ch + CONV_THREADS - 1) / CONV_THREADS;
    if (blocks > 2147483647) return cudaErrorInvalidValue;
    launch_kernel(ssm_conv_kernel, (unsigned)blocks, CONV_THREADS, 0, s, *a);
    return cudaGetLastError();
}
