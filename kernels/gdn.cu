/* gdn.cu: the gated delta rule of a Gated DeltaNet layer, recurrent form (gdn_args; CPU twin
 * lib/cpu/gdn.c, math in docs/qwen35.md §4.4).
 *
 * Per token t and value head j (key head kh = grouped ? j / (n_vhead / n_group) : j % n_group):
 *   beta = sigmoid(b), g = softplus(a + dt_bias[j]) * ssm_a[j] (softplus(x) = x above 20);
 *   q, k = x / sqrt(||x||^2 + eps) in the CPU's rms form: sum of squares in double, then
 *          (x * 1/sqrt(mean + eps/n)) * 1/sqrt(n);
 *   per value column c (S[:,c] contiguous over the key index i at state[j][c][i]):
 *     S[:,c] *= e^g;  d = beta (v_c - S[:,c].k);  S[:,c] += k d;  out[t][j][c] = S[:,c].q / sqrt(D).
 * A column only depends on itself, so the state splits over blocks by columns: block (j, y) owns
 * columns 16y .. 16y+15 of head j; warp w owns 4 of them, lane l holds S[l + 32n][c] (n < ceil(D/32))
 * in registers for the whole call, so the state is read once and written once per call (coalesced:
 * a warp reads 128 contiguous bytes per n). Per token the block normalises q and k into shared
 * memory (each block of the head recomputes them: D values, cheap), thread 0 computes the gates, and
 * each warp does two warp-reduced dots per column. Snapshots: token t >= snap_from writes S after
 * token t to ring slot (snap_pos0 + t) % snap_ring (n_vhead * D^2 floats each).
 * Bytes: the state twice (n_vhead D^2 * 8), q/k per block of a head, v, a, b, out once.
 * GDN_CHUNKED (the WY/UT chunked form for prefill) is not written yet: cudaErrorInvalidValue;
 * GDN_AUTO runs the recurrence at every length.
 */
#include "common.cuh"

enum { GDN_WARPS = 4, GDN_THREADS = GDN_WARPS * WARP_SIZE, GDN_CPW = 4, GDN_COLS = GDN_WARPS * GDN_CPW,
       GDN_MAX_D = 256 };

static __device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int NI> /* NI = ceil(d_state / 32) */
static __global__ void __launch_bounds__(GDN_THREADS) gdn_recurrent_kernel(const __grid_constant__ struct gdn_args a) {
    __shared__ float qn[GDN_MAX_D], kn[GDN_MAX_D];
    __shared__ double red[2][GDN_WARPS];
    __shared__ float gate[2]; /* beta, e^g */
    const int D = a.d_state, j = blockIdx.x, tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int kh = a.grouped ? j / (a.n_vhead / a.n_group) : j % a.n_group;
    const int r = a.ab_group;
    const int64_t ab = r > 0 ? (int64_t)(j / r) * 2 * r + j % r : j;
    const size_t dd = (size_t)D * D;
    const int cbase = blockIdx.y * GDN_COLS + warp * GDN_CPW;
    float *Sg = a.state + (size_t)j * dd;

    float S[GDN_CPW][NI];
#pragma unroll
    for (int m = 0; m < GDN_CPW; m++)
#pragma unroll
        for (int n = 0; n < NI; n++) {
            const int c = cbase + m, i = lane + WARP_SIZE * n;
            S[m][n] = c < D && i < D ? Sg[(size_t)c * D + i] : 0.0f;
        }
    const float scale = 1.0f / sqrtf((float)D), sn = 1.0f / sqrtf((float)D);
    for (int64_t t = 0; t < a.n_tokens; t++) {
        const float *q = a.q + t * a.qk_stride + (int64_t)kh * D, *k = a.k + t * a.qk_stride + (int64_t)kh * D;
        double sq = 0.0, sk = 0.0;
        for (int i = tid; i < D; i += GDN_THREADS) {
            const float x = q[i], y = k[i];
            qn[i] = x, kn[i] = y;
            sq += (double)(x * x), sk += (double)(y * y);
        }
        sq = warp_sum_f64(sq), sk = warp_sum_f64(sk);
        if (lane == 0) red[0][warp] = sq, red[1][warp] = sk;
        if (tid == 0) {
            const int64_t o = t * a.ab_stride + ab;
            const float x = a.a[o] + a.dt_bias[j];
            const float sp = x > 20.0f ? x : logf(1.0f + expf(x));
            gate[0] = 1.0f / (1.0f + expf(-a.b[o]));
            gate[1] = expf(sp * a.ssm_a[j]);
        }
        __syncthreads();
        double SQ = 0.0, SK = 0.0;
#pragma unroll
        for (int w = 0; w < GDN_WARPS; w++) SQ += red[0][w], SK += red[1][w];
        const float scq = 1.0f / sqrtf((float)(SQ / D) + a.eps / (float)D);
        const float sck = 1.0f / sqrtf((float)(SK / D) + a.eps / (float)D);
        for (int i = tid; i < D; i += GDN_THREADS) qn[i] = (qn[i] * scq) * sn, kn[i] = (kn[i] * sck) * sn;
        __syncthreads();
        float kr[NI], qr[NI];
#pragma unroll
        for (int n = 0; n < NI; n++) {
            const int i = lane + WARP_SIZE * n;
            kr[n] = i < D ? kn[i] : 0.0f, qr[n] = i < D ? qn[i] : 0.0f;
        }
        const float beta = gate[0], eg = gate[1];
        const float *v = a.v + t * a.v_stride + (int64_t)j * D;
        float *out = a.out + (t * a.n_vhead + j) * D;
#pragma unroll
        for (int m = 0; m < GDN_CPW; m++) {
            const int c = cbase + m;
            if (c >= D) break; /* warp-uniform */
            float dk = 0.0f;
#pragma unroll
            for (int n = 0; n < NI; n++) S[m][n] *= eg, dk += S[m][n] * kr[n];
            const float d = (v[c] - warp_sum(dk)) * beta;
            float o = 0.0f;
#pragma unroll
            for (int n = 0; n < NI; n++) S[m][n] += kr[n] * d, o += S[m][n] * qr[n];
            o = warp_sum(o);
            if (lane == 0) out[c] = o * scale;
        }
        if (a.snap && t >= a.snap_from) {
            float *sg = a.snap + ((a.snap_pos0 + t) % a.snap_ring) * a.snap_stride + (size_t)j * dd;
#pragma unroll
            for (int m = 0; m < GDN_CPW; m++)
#pragma unroll
                for (int n = 0; n < NI; n++) {
                    const int c = cbase + m, i = lane + WARP_SIZE * n;
                    if (c < D && i < D) sg[(size_t)c * D + i] = S[m][n];
                }
        }
        __syncthreads(); /* qn, kn, red and gate are rewritten by the next token */
    }
#pragma unroll
    for (int m = 0; m < GDN_CPW; m++)
#pragma unroll
        for (int n = 0; n < NI; n++) {
            const int c = cbase + m, i = lane + WARP_SIZE * n;
            if (c < D && i < D) Sg[(size_t)c * D + i] = S[m][n];
        }
}

template <int NI>
static cudaError_t gdn_launch(const struct gdn_args *a, cudaStream_t s) {
    const dim3 grid((unsigned)a->n_vhead, (unsigned)((a->d_state + GDN_COLS - 1) / GDN_COLS));
    launch_kernel(gdn_recurrent_kernel<NI>, grid, GDN_THREADS, 0, s, *a);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_gdn(const struct gdn_args *a, cudaStream_t s) {
    if (!a->q || !a->k || !a->v || !a->a || !a->b || !a->dt_bias || !a->ssm_a || !a->state || !a->out ||
        a->n_tokens < 0 || a->n_group <= 0 || a->n_vhead <= 0 || a->n_vhead % a->n_group || a->d_state <= 0 ||
        a->d_state > GDN_MAX_D || a->qk_stride < (int64_t)a->n_group * a->d_state ||
        a->v_stride < (int64_t)a->n_vhead * a->d_state || a->ab_stride < 0 || !(a->eps >= 0))
        return cudaErrorInvalidValue;
    if (a->ab_group < 0 || (a->ab_group > 0 && a->ab_group != a->n_vhead / a->n_group)) return cudaErrorInvalidValue;
    if (a->snap && (a->snap_ring <= 0 || a->snap_pos0 < 0 || a->snap_stride < (int64_t)a->n_vhead * a->d_state * a->d_state))
        return cudaErrorInvalidValue;
    if (a->variant != GDN_AUTO && a->variant != GDN_RECURRENT) return cudaErrorInvalidValue; /* chunked: not yet */
    if (a->n_vhead > 2147483647 / 2) return cudaErrorInvalidValue;
    const int ni = (a->d_state + WARP_SIZE - 1) / WARP_SIZE;
    if (ni <= 1) return gdn_launch<1>(a, s);
    if (ni <= 2) return gdn_launch<2>(a, s);
    if (ni <= 4) return gdn_launch<4>(a, s);
    return gdn_launch<8>(a, s);
}
