/* gdn.cu: the gated delta rule of a Gated DeltaNet layer (gdn_args; CPU twin lib/cpu/gdn.c, math in
 * docs/qwen35.md §4.4 and §5.2): the recurrent form, and the chunked (WY / UT) form on tensor cores for prefill.
 *
 * Recurrent form (gdn_recurrent_kernel). Per token t and value head j (key head kh = grouped ?
 * j / (n_vhead / n_group) : j % n_group):
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
 *
 * Fused decode form (gdn_conv_kernel, gdn_conv_args: up to MMV_MAX_TOKENS tokens): the recurrent kernel with
 * the conv in front, in one launch. Per token each block convolves (ssm_conv_kernel's arithmetic: taps in
 * order, unfused, then SiLU) the 2 D q / k channels of its key head into qn / kn and its 16 columns' v
 * channels; the rest is the recurrent kernel's, so out, state and snapshots are bit for bit ssm_conv then
 * gdn on the device. The conv window is the cache's ring indexed by position (kernels.h ssm_conv_args):
 * tokens read positions p0-d_conv+1 .. p0-1 from it, and after the last token each channel's owner (q, k:
 * the key head's first value head, column block 0; v: the column's block) writes the run's inputs to the
 * slots of p0 .. p0+n-1, which are none of those read since the ring has d_conv-1 + MMV_MAX_TOKENS slots:
 * no block waits for another. The position comes from device memory (pos), so a graph replays. Extra cost
 * over the pair: the key head's q / k conv recomputed by every block of the head (2 D d_conv loads per
 * block and token, cached); saved: conv output written and read back, a launch.
 * The output's gated RMSNorm (norm_done not NULL): a block owns 16 value columns, the norm reduces over the
 * whole head (D = 128: 8 blocks), so the head's last block to finish does it. Every block writes its columns
 * of out, fences them (__threadfence), then thread 0 adds one to the head's counter; the block that draws
 * gridDim.y - 1 knows every column of the head is written and visible: it fences again (acquire), reads the
 * head's n_tokens rows back through volatile loads (L2, never a stale L1 line) and normalises them in place, a
 * warp per row with norm.cu's code (norm_row.cuh), so out is bit for bit gdn_conv then the norm op; it sets the
 * counter back to 0, which the next launch on the stream sees (a replayed graph finds it zero). The head's other
 * blocks exit without waiting for anything, so no block can spin on one that is not resident. Cost: one
 * atomic per block, and the last block's rereads of its head's n_tokens D floats from L2, just written; saved:
 * the norm launch. The emulator runs a launch's blocks one after another: it checks the count's logic (which
 * block finishes, the reset), not the fences, which only a device exercises.
 *
 * Chunked form (gdn_chunk_kernel): GDN_CHUNKED, and GDN_AUTO from GDN_AUTO_CHUNKED = 64 tokens (the CPU's
 * threshold). With snapshots it covers tokens [0, snap_from) and the recurrent kernel the rest, launched
 * after it on the same stream (each snapshot needs its own state), so a call stopped at any token t >=
 * snap_from gives that snapshot bit for bit. Chunks of C = 64 tokens (C = 32 for d_state > 128, where 64
 * rows of q and k would not fit in shared memory), the last one partial. Per chunk, with gamma the
 * cumulated g (double, each thread summing in token order: the CPU's running sum bit for bit), Q, K the
 * normalised rows and S the incoming state, the CPU's U - W S is regrouped as one product (W = T
 * diag(beta e^gamma) K, U = T diag(beta) V, so U - W S = T R):
 *   A[t][s] = beta_t (k_t.k_s) e^(gamma_t - gamma_s) (s < t),  P[t][s] = (q_t.k_s) e^(gamma_t - gamma_s) (s <= t)
 *   T = (I + A)^-1                       forward substitution, CUDA cores
 *   X = K S,  Y = Q S                    R[t] = beta_t (v_t - e^gamma_t X[t]),  vn = T R
 *   out[t] = (e^gamma_t Y[t] + (P vn)[t]) / sqrt(D)
 *   S <- e^gamma_{L-1} S + sum_s e^(gamma_{L-1} - gamma_s) k_s vn[s]^T
 * Blocking: block (j, y) owns value columns 64y .. 64y+63 of head j (grid n_vhead x ceil(Dp / 64), Dp =
 * d_state rounded up to 16; 4 warps of 16 columns) and loops over the chunks; its columns of S^T live in
 * registers as mma C fragments for the whole call (read once, written once), and serve directly as the
 * B operand of K S and Q S. Per chunk: the gates; q, k rows normalised (a warp per token) into shared
 * memory; A and P (a warp per 16-row tile of each, tiles left of the diagonal only; a warp takes A's tile
 * m and P's tile MT-1-m: equal work); X, Y (each warp, its columns); T by forward substitution, a thread
 * per column s (columns are independent: no barrier), while the others form R; then per warp vn = T R
 * (lower triangle only), out = e^gamma Y + P vn, and the state update (vn e^(gamma_{L-1} - gamma) as the
 * A operand, K as B). A and P are computed by every column block of a head (redundant for d_state 128:
 * 2 blocks), the price of keeping each block's state in registers.
 * Tensor cores: K K^T, Q K^T, K S, Q S, T R, P vn and the state update, all through ptx_mma_16816
 * (m16n8k16, f16 x f16 -> f32). f32 accuracy from f16 inputs: each operand x = hi + lo (hi = f16(x),
 * lo = f16(x - hi)) and hi hi + hi lo + lo hi (three MMAs; lo lo is below 2^-22). Range: operands are scaled
 * by a power of two (exact) before the split and the f32 result scaled back: q and k (norm <= 1) and P
 * (|P| <= 1) by 2^12, S, R, vn and T by the power that brings their largest |value| (per warp; T per
 * block) into [2^13, 2^14), so no hi overflows f16 and small values keep an absolute error near 2^-25 of
 * that largest value instead of vanishing as f16 subnormals. The decay factors e^(gamma_t - gamma_s) <= 1
 * of A and P are applied in f32 to the MMA results; those of the state update (and P's, in P vn) enter
 * an operand, where a factor that underflows costs at most 2^-25 of the operand's largest entry.
 * d_state not a multiple of 16 (40, 72): q, k, S and v are zero-padded to Dp in shared memory and
 * registers, exact; every d_state the recurrent kernel takes (1..256) runs chunked, none falls back.
 * Shared memory (dynamic, opted in above 48 KiB with cudaFuncAttributeMaxDynamicSharedMemorySize): the
 * gates; q rows (C x (Dp + 8) floats), reused once read for T (C x (C + 8)) and each warp's R / vn tile
 * (16 x (C + 8)); k rows (C x (Dp + 8)); P with A transposed above the diagonal (C x (C + 8)); rows 8
 * floats longer than needed so the fragments' float2 loads do not conflict. d_state 128: 91,664 bytes
 * (64: 75,280; 256 with C = 32: 73,504), one block per SM on sm_86/89/120 (99 KiB).
 * Bytes per chunk and block: q, k rows read (2 C D * 4: each column block of the head reads them), v and
 * out for its 64 columns (2 * C * 64 * 4), a, b (2 C * 4); the state once per call. MMAs per warp and
 * full chunk (C 64, Dp 128): 240 (A, P) + 384 (X, Y) + 60 (T R) + 60 (P vn) + 192 (state) = 936.
 * Accuracy (emulator, test-ops): NMSE against the float64 recurrence and against the recurrent kernel at most
 * 4.5e-14 (out and state, d_state 128, up to 2000 tokens), 8e-14 for d_state 72 (recurrent: 6e-14); the
 * tests hold both forms to 1e-11; gpu_like re-enacts the kernel and test-gpu-like finds it bit-identical on
 * the emulator. Not yet run on a device (so GDN_AUTO takes it unmeasured, like the CPU): ptxas (CUDA 13)
 * gives the d_state 128 instance 254 registers and ~90 bytes of spill, the 256 one ~410; the column-wise
 * substitution (up to C^2 / 2 dependent FMAs on one thread per chunk) is the likely hot spot.
 */
#include <cuda_fp16.h>

#include "common.cuh"
#include "norm_row.cuh"
#include "ptx.cuh"

enum { GDN_WARPS = 4, GDN_THREADS = GDN_WARPS * WARP_SIZE, GDN_CPW = 4, GDN_COLS = GDN_WARPS * GDN_CPW,
       GDN_MAX_D = 256 };
/* chunked form: value columns per warp and per block; GDN_AUTO runs chunked from GDN_AUTO_CHUNKED tokens on
 * (the CPU's threshold); q and k (norm <= 1) and P (|P| <= 1) enter the f16 operands scaled by 2^GDN_QK_EXP */
enum { GDN_CW = 16, GDN_CB = GDN_WARPS * GDN_CW, GDN_AUTO_CHUNKED = 64, GDN_QK_EXP = 12 };

static __device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The recurrent kernels' pieces, shared by gdn_recurrent_kernel and gdn_conv_kernel (the same bits either way).
 * A warp holds columns cbase .. cbase + GDN_CPW - 1 of a head's state, key index lane + 32 n in S[m][n]. */
template <int NI>
static __device__ __forceinline__ void gdn_state_load(float (&S)[GDN_CPW][NI], const float *Sg, int D, int cbase, int lane) {
#pragma unroll
    for (int m = 0; m < GDN_CPW; m++)
#pragma unroll
        for (int n = 0; n < NI; n++) {
            const int c = cbase + m, i = lane + WARP_SIZE * n;
            S[m][n] = c < D && i < D ? Sg[(size_t)c * D + i] : 0.0f;
        }
}

template <int NI>
static __device__ __forceinline__ void gdn_state_store(const float (&S)[GDN_CPW][NI], float *Sg, int D, int cbase, int lane) {
#pragma unroll
    for (int m = 0; m < GDN_CPW; m++)
#pragma unroll
        for (int n = 0; n < NI; n++) {
            const int c = cbase + m, i = lane + WARP_SIZE * n;
            if (c < D && i < D) Sg[(size_t)c * D + i] = S[m][n];
        }
}

/* The gates of the token whose a / b sit at offset o, head j: beta = sigmoid(b), g = softplus(a + dt_bias) * ssm_a
 * (the decay's exponent; the recurrence takes e^g). Both forms and the CPU compute it so, bit for bit. */
static __device__ __forceinline__ void gdn_gates(const struct gdn_args &a, int64_t o, int j, float *beta, float *g) {
    const float x = a.a[o] + a.dt_bias[j];
    const float sp = x > 20.0f ? x : logf(1.0f + expf(x));
    *beta = 1.0f / (1.0f + expf(-a.b[o]));
    *g = sp * a.ssm_a[j];
}

/* 1 / RMS of a q or k row from its sum of squares ss (the CPU's L2 norm with eps over D, regrouped). */
static __device__ __forceinline__ float gdn_qk_rscale(const struct gdn_args &a, double ss, int D) {
    return 1.0f / sqrtf((float)(ss / D) + a.eps / (float)D);
}

/* Token t's q / k L2 norms and gates: sq, sk are each thread's sums of squares of its q / k values, already in qn /
 * kn (unnormalised); leaves them normalised and scaled by sn there, the warp's registers kr / qr, and gate = {beta,
 * e^g}. Two barriers; the caller's next token must sync before rewriting qn, kn, red or gate. */
template <int NI>
static __device__ __forceinline__ void gdn_norm_gates(const struct gdn_args &a, int64_t t, int64_t ab, int j, double sq,
                                                      double sk, float *qn, float *kn, double (*red)[GDN_WARPS],
                                                      float *gate, float sn, float (&kr)[NI], float (&qr)[NI]) {
    const int D = a.d_state, tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    sq = warp_sum_f64(sq), sk = warp_sum_f64(sk);
    if (lane == 0) red[0][warp] = sq, red[1][warp] = sk;
    if (tid == 0) {
        float g;
        gdn_gates(a, t * a.ab_stride + ab, j, &gate[0], &g);
        gate[1] = expf(g);
    }
    __syncthreads();
    double SQ = 0.0, SK = 0.0;
#pragma unroll
    for (int w = 0; w < GDN_WARPS; w++) SQ += red[0][w], SK += red[1][w];
    const float scq = gdn_qk_rscale(a, SQ, D), sck = gdn_qk_rscale(a, SK, D);
    for (int i = tid; i < D; i += GDN_THREADS) qn[i] = (qn[i] * scq) * sn, kn[i] = (kn[i] * sck) * sn;
    __syncthreads();
#pragma unroll
    for (int n = 0; n < NI; n++) {
        const int i = lane + WARP_SIZE * n;
        kr[n] = i < D ? kn[i] : 0.0f, qr[n] = i < D ? qn[i] : 0.0f;
    }
}

/* One token's delta rule on the warp's columns: S = e^g S; S += k (beta (v - S^T k))^T; out = S^T q * scale. Column c's
 * v is vr[c - vbase]. */
template <int NI>
static __device__ __forceinline__ void gdn_step_cols(float (&S)[GDN_CPW][NI], const float (&kr)[NI], const float (&qr)[NI],
                                                     float beta, float eg, const float *vr, int vbase, float *out,
                                                     float scale, int D, int cbase, int lane) {
#pragma unroll
    for (int m = 0; m < GDN_CPW; m++) {
        const int c = cbase + m;
        if (c >= D) break; /* warp-uniform */
        float dk = 0.0f;
#pragma unroll
        for (int n = 0; n < NI; n++) S[m][n] *= eg, dk += S[m][n] * kr[n];
        const float d = (vr[c - vbase] - warp_sum(dk)) * beta;
        float o = 0.0f;
#pragma unroll
        for (int n = 0; n < NI; n++) S[m][n] += kr[n] * d, o += S[m][n] * qr[n];
        o = warp_sum(o);
        if (lane == 0) out[c] = o * scale;
    }
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
    gdn_state_load(S, Sg, D, cbase, lane);
    const float scale = 1.0f / sqrtf((float)D), sn = 1.0f / sqrtf((float)D);
    for (int64_t t = 0; t < a.n_tokens; t++) {
        const float *q = a.q + t * a.qk_stride + (int64_t)kh * D, *k = a.k + t * a.qk_stride + (int64_t)kh * D;
        double sq = 0.0, sk = 0.0;
        for (int i = tid; i < D; i += GDN_THREADS) {
            const float x = q[i], y = k[i];
            qn[i] = x, kn[i] = y;
            sq += (double)(x * x), sk += (double)(y * y);
        }
        float kr[NI], qr[NI];
        gdn_norm_gates(a, t, ab, j, sq, sk, qn, kn, red, gate, sn, kr, qr);
        const float *v = a.v + t * a.v_stride + (int64_t)j * D;
        gdn_step_cols(S, kr, qr, gate[0], gate[1], v, 0, a.out + (t * a.n_vhead + j) * D, scale, D, cbase, lane);
        if (a.snap && t >= a.snap_from)
            gdn_state_store(S, a.snap + ((a.snap_pos0 + t) % a.snap_ring) * a.snap_stride + (size_t)j * dd, D, cbase,
                            lane);
        __syncthreads(); /* qn, kn, red and gate are rewritten by the next token */
    }
    gdn_state_store(S, Sg, D, cbase, lane);
}

/* ---- the fused decode form (gdn_conv_args): the conv, then the recurrence, in one launch ---- */

/* The input of channel ch at position p: the run's row for p >= p0, else the ring's slot. */
static __device__ __forceinline__ float gdn_conv_in(const struct ssm_conv_args &c, int64_t ch, int64_t p, int64_t p0,
                                                    int64_t ring) {
    return p >= p0 ? c.x[(p - p0) * c.x_stride + ch] : c.state[ssm_conv_slot(p, ring) * c.n_ch + ch];
}

/* SiLU(conv) of channel ch for token t, the arithmetic of ssm_conv_kernel (taps in order, unfused). */
static __device__ __forceinline__ float gdn_conv_at(const struct ssm_conv_args &c, int64_t ch, int64_t t, int64_t p0,
                                                    int64_t ring) {
    const int nw = c.d_conv - 1;
    float s = 0.0f;
    for (int i = 0; i < c.d_conv; i++)
        s = __fadd_rn(s, __fmul_rn(c.w[ch * c.d_conv + i], gdn_conv_in(c, ch, p0 + t - nw + i, p0, ring)));
    return s / (1.0f + expf(-s));
}

/* The output norm of head j (gdn_conv_args norm_done; header): called by every thread of every block of the head
 * once its columns of out are written; the head's last block to arrive normalises the head's rows, a warp per token,
 * and rezeroes the counter. */
static __device__ __forceinline__ void gdn_conv_out_norm(const struct gdn_conv_args &f, int j) {
    const struct gdn_args &a = f.gdn;
    const int D = a.d_state, tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    __threadfence(); /* release: this thread's columns of out before the count that announces them */
    __syncthreads(); /* every thread's columns fenced before thread 0 counts */
    bool drew_last = false;
    if (tid == 0) drew_last = atomicAdd(f.norm_done + j, 1u) == gridDim.y - 1;
    if (!__syncthreads_or(drew_last)) return; /* the whole block: another block of the head finishes it */
    __threadfence();   /* acquire: the other blocks' columns, announced by their counts */
    if (tid == 0) f.norm_done[j] = 0; /* every block of the head has counted: ready for the next launch */
    for (int64_t t = warp; t < a.n_tokens; t += GDN_WARPS) {
        float *o = a.out + (t * a.n_vhead + j) * D;
        const volatile float *x = o; /* written by other blocks during this launch */
        const float *g = f.norm_gate ? f.norm_gate + (t * a.n_vhead + j) * D : NULL;
        const float scale = norm_row_scale<WARP_SIZE>(x, D, f.norm_eps, lane);
        norm_row_store<WARP_SIZE>(x, o, f.norm_w, g, D, scale, lane);
    }
}

/* gdn_recurrent_kernel with q, k and its columns' v computed from the conv ring instead of read. Each block
 * convolves its key head's q, k channels itself (every column block of the head: 2 D channels, d_conv taps),
 * and its own 16 value columns' v channels. Afterwards the ring takes the run's inputs: q, k channels from the
 * head's first block (value head j0 of the key head, column block 0), v channels from their column's block.
 * No block reads what another writes: tokens read positions p0-d_conv+1 .. p0-1 from the ring, the writes go
 * to the slots of p0 .. p0+n-1, distinct since n <= ring - (d_conv-1) (launcher). The one exception, the output
 * norm, reads the head's out only once the count says every block of the head has written it. */
template <int NI>
static __global__ void __launch_bounds__(GDN_THREADS) gdn_conv_kernel(const __grid_constant__ struct gdn_conv_args f) {
    const struct ssm_conv_args &c = f.conv;
    const struct gdn_args &a = f.gdn;
    __shared__ float qn[GDN_MAX_D], kn[GDN_MAX_D], vc[GDN_COLS];
    __shared__ double red[2][GDN_WARPS];
    __shared__ float gate[2]; /* beta, e^g */
    const int D = a.d_state, j = blockIdx.x, tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int kh = a.grouped ? j / (a.n_vhead / a.n_group) : j % a.n_group;
    const int r = a.ab_group;
    const int64_t ab = r > 0 ? (int64_t)(j / r) * 2 * r + j % r : j;
    const size_t dd = (size_t)D * D;
    const int c0 = blockIdx.y * GDN_COLS, cbase = c0 + warp * GDN_CPW;
    const int64_t kd = (int64_t)a.n_group * D, qch = (int64_t)kh * D, kch = kd + qch, vch = 2 * kd + (int64_t)j * D;
    const int64_t R = ssm_conv_ring(c.d_conv), p0 = *c.pos;
    float *Sg = a.state + (size_t)j * dd;

    float S[GDN_CPW][NI];
    gdn_state_load(S, Sg, D, cbase, lane);
    const float scale = 1.0f / sqrtf((float)D), sn = 1.0f / sqrtf((float)D);
    for (int64_t t = 0; t < a.n_tokens; t++) {
        double sq = 0.0, sk = 0.0;
        for (int i = tid; i < D; i += GDN_THREADS) {
            const float x = gdn_conv_at(c, qch + i, t, p0, R), y = gdn_conv_at(c, kch + i, t, p0, R);
            qn[i] = x, kn[i] = y;
            sq += (double)(x * x), sk += (double)(y * y);
        }
        if (tid < GDN_COLS && c0 + tid < D) vc[tid] = gdn_conv_at(c, vch + c0 + tid, t, p0, R);
        float kr[NI], qr[NI];
        gdn_norm_gates(a, t, ab, j, sq, sk, qn, kn, red, gate, sn, kr, qr);
        gdn_step_cols(S, kr, qr, gate[0], gate[1], vc, c0, a.out + (t * a.n_vhead + j) * D, scale, D, cbase, lane);
        if (a.snap && t >= a.snap_from)
            gdn_state_store(S, a.snap + ((a.snap_pos0 + t) % a.snap_ring) * a.snap_stride + (size_t)j * dd, D, cbase,
                            lane);
        __syncthreads(); /* qn, kn, vc, red and gate are rewritten by the next token */
    }
    gdn_state_store(S, Sg, D, cbase, lane);

    /* the ring and its snapshots, each channel by its one owner: conv snapshot of token t = the inputs of
     * positions p0+t-d_conv+2 .. p0+t as its rows in that order; then the run's inputs into their slots */
    const int nw = c.d_conv - 1;
    const bool qk_owner = blockIdx.y == 0 && j == (a.grouped ? kh * (a.n_vhead / a.n_group) : kh);
    const int nown = (qk_owner ? 2 * D : 0) + GDN_COLS;
    for (int e = tid; e < nown; e += GDN_THREADS) {
        int64_t ch;
        if (e < GDN_COLS) {
            if (c0 + e >= D) continue;
            ch = vch + c0 + e;
        } else {
            ch = e - GDN_COLS < D ? qch + (e - GDN_COLS) : kch + (e - GDN_COLS - D);
        }
        for (int64_t t = c.snap ? c.snap_from : c.n_tokens; t < c.n_tokens; t++) {
            float *sc = c.snap + ((c.snap_pos0 + t) % c.snap_ring) * c.snap_stride;
            for (int i = 0; i < nw; i++)
                sc[i * c.n_ch + ch] = gdn_conv_in(c, ch, p0 + t - nw + 1 + i, p0, R);
        }
        for (int64_t t = 0; t < c.n_tokens; t++)
            c.state[ssm_conv_slot(p0 + t, R) * c.n_ch + ch] = c.x[t * c.x_stride + ch];
    }
    if (f.norm_done) gdn_conv_out_norm(f, j);
}

template <int NI>
static cudaError_t gdn_conv_launch(const struct gdn_conv_args *a, cudaStream_t s) {
    const dim3 grid((unsigned)a->gdn.n_vhead, (unsigned)((a->gdn.d_state + GDN_COLS - 1) / GDN_COLS));
    launch_kernel(gdn_conv_kernel<NI>, grid, GDN_THREADS, 0, s, *a);
    return cudaGetLastError();
}

/* ---- the chunked form (GDN_CHUNKED) ---- */

/* f16 bits of x and of the remainder x - f16(x), two values packed (the lower index in the low half). */
static __device__ __forceinline__ void gdn_pack(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    const __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
    const __half l0 = __float2half_rn(x0 - __half2float(h0)), l1 = __float2half_rn(x1 - __half2float(h1));
    hi = (uint32_t)__half_as_ushort(h0) | (uint32_t)__half_as_ushort(h1) << 16;
    lo = (uint32_t)__half_as_ushort(l0) | (uint32_t)__half_as_ushort(l1) << 16;
}

/* 2^e as a float, e in -126..127 (exact). */
static __device__ __forceinline__ float gdn_pow2(int e) { return __int_as_float((127 + e) << 23); }

/* The power of two that brings amax into [2^13, 2^14): every operand value then has its f16 hi part normal or
 * at most 2^-25 * amax away from it, and none overflows f16. 0 for amax 0, NaN or inf. */
static __device__ __forceinline__ int gdn_scale_exp(float amax) {
    if (!(amax > 0.0f) || !(amax <= 3.0e38f)) return 0;
    const int e = ((__float_as_int(amax) >> 23) & 0xff) - 127; /* floor(log2 amax) (-127 for subnormals) */
    return min(max(13 - e, -60), 60);
}

/* c += A B with A = ah + al, B = bh + bl (f16 pairs): the three products that matter for f32 accuracy. */
static __device__ __forceinline__ void gdn_mma3(float c[4], const uint32_t ah[4], const uint32_t al[4], const uint32_t bh[2],
                                                const uint32_t bl[2]) {
    ptx_mma_16816(c, ah, bh[0], bh[1]);
    ptx_mma_16816(c, ah, bl[0], bl[1]);
    ptx_mma_16816(c, al, bh[0], bh[1]);
}

/* A fragment of the 16x16 tile at p (row-major f32, rows ld apart), p already at (row g, col 2t) of the lane;
 * scaled by sc. */
static __device__ __forceinline__ void gdn_frag_a(const float *p, int ld, float sc, uint32_t h[4], uint32_t l[4]) {
    const float2 x0 = *(const float2 *)p, x1 = *(const float2 *)(p + 8 * ld);
    const float2 x2 = *(const float2 *)(p + 8), x3 = *(const float2 *)(p + 8 * ld + 8);
    gdn_pack(x0.x * sc, x0.y * sc, h[0], l[0]);
    gdn_pack(x1.x * sc, x1.y * sc, h[1], l[1]);
    gdn_pack(x2.x * sc, x2.y * sc, h[2], l[2]);
    gdn_pack(x3.x * sc, x3.y * sc, h[3], l[3]);
}

/* B fragment (16 x 8) whose column n is the f32 row p + n ld (contiguous over k), p already at (n g, k 2t). */
static __device__ __forceinline__ void gdn_frag_b(const float *p, float sc, uint32_t h[2], uint32_t l[2]) {
    const float2 x0 = *(const float2 *)p, x1 = *(const float2 *)(p + 8);
    gdn_pack(x0.x * sc, x0.y * sc, h[0], l[0]);
    gdn_pack(x1.x * sc, x1.y * sc, h[1], l[1]);
}

/* Shared memory of a block (floats): the gates (gamma as double), then R0 = q rows, later T and the
 * warps' staging tiles; k rows; AP (P below and on the diagonal, A transposed above). */
static __host__ __device__ __forceinline__ int gdn_sm_gates(int C) { return (6 * C + 4 + 3) & ~3; }
static __host__ __device__ __forceinline__ int gdn_sm_r0(int C, int dp) {
    const int q = C * (dp + 8), t = (C + 16 * GDN_WARPS) * (C + 8);
    return q > t ? q : t;
}
static __host__ __device__ __forceinline__ size_t gdn_sm_bytes(int C, int dp) {
    return sizeof(float) * (size_t)(gdn_sm_gates(C) + gdn_sm_r0(C, dp) + C * (dp + 8) + C * (C + 8));
}

/* Tokens [0, cut) of value head blockIdx.x in chunks of C, on the value columns 64 blockIdx.y .. + 63 of its
 * state (16 per warp); DM >= d_state rounded up to 16 (Dp). See the header for the steps. */
template <int C, int DM>
static __global__ void __launch_bounds__(GDN_THREADS) gdn_chunk_kernel(const __grid_constant__ struct gdn_args a, int cut) {
    constexpr int MT = C / 16, NIM = DM / 8, LDC = C + 8;
    float *smem = dyn_smem<float>();
    const int D = a.d_state, Dp = (D + 15) & ~15, LDQ = Dp + 8, NI = Dp / 8;
    const int j = blockIdx.x, tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int gq = lane / 4, cq = lane % 4;
    const int kh = a.grouped ? j / (a.n_vhead / a.n_group) : j % a.n_group;
    const int r = a.ab_group;
    const int64_t ab = r > 0 ? (int64_t)(j / r) * 2 * r + j % r : j;
    double *gam = (double *)smem;                   /* [C] gamma, the cumulated g */
    float *gs = smem + 2 * C, *bet = gs + C, *eg = bet + C, *ed = eg + C, *tmax = ed + C;
    float *qs = smem + gdn_sm_gates(C);             /* [C][LDQ] normalised q */
    float *Tm = qs;                                 /* [C][LDC] T = (I + A)^-1, once q is no longer read */
    float *stg = qs + C * LDC + warp * 16 * LDC;    /* [16][LDC] this warp's R, then vn, as [column][token] */
    float *ks = qs + gdn_sm_r0(C, Dp);              /* [C][LDQ] normalised k */
    float *ap = ks + C * LDQ;                       /* [C][LDC] */
    const int cw = blockIdx.y * GDN_CB + warp * GDN_CW; /* the warp's first value column */
    const bool cols = cw < Dp;                      /* warp-uniform: past Dp the warp only helps */
    float *Sg = a.state + (size_t)j * D * D;
    const float sn = 1.0f / sqrtf((float)D), scale = 1.0f / sqrtf((float)D), sqk = gdn_pow2(GDN_QK_EXP);

    /* S^T (value column x key index) of the warp's 16 columns as C fragments: S[n] holds columns cw + gq
     * (0, 1) and cw + gq + 8 (2, 3) at key indices 8n + 2cq, + 1 */
    float S[NIM][4];
#pragma unroll
    for (int n = 0; n < NIM; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = cw + gq + 8 * (e >> 1), i = 8 * n + 2 * cq + (e & 1);
            S[n][e] = cols && c < D && i < D ? Sg[(size_t)c * D + i] : 0.0f;
        }

    for (int t0 = 0; t0 < cut; t0 += C) {
        const int L = min(C, cut - t0);
        /* gates; rows past L get beta 0, g 0 (then gamma = gamma_{L-1}: every decay factor is 1, A and P 0) */
        if (tid < C) {
            float beta = 0.0f, g = 0.0f;
            if (tid < L) gdn_gates(a, (int64_t)(t0 + tid) * a.ab_stride + ab, j, &beta, &g);
            gs[tid] = g, bet[tid] = beta;
        }
        /* q, k rows normalised as the recurrence does; a warp per token, zero past L and D */
        for (int t = warp; t < C; t += GDN_WARPS) {
            float *qr = qs + t * LDQ, *kr = ks + t * LDQ;
            if (t >= L) { /* warp-uniform */
                for (int i = lane; i < Dp; i += WARP_SIZE) qr[i] = 0.0f, kr[i] = 0.0f;
                continue;
            }
            const float *q = a.q + (int64_t)(t0 + t) * a.qk_stride + (int64_t)kh * D;
            const float *k = a.k + (int64_t)(t0 + t) * a.qk_stride + (int64_t)kh * D;
            double sq = 0.0, sk = 0.0;
            for (int i = lane; i < D; i += WARP_SIZE) {
                const float x = q[i], y = k[i];
                qr[i] = x, kr[i] = y;
                sq += (double)(x * x), sk += (double)(y * y);
            }
            sq = warp_sum_f64(sq), sk = warp_sum_f64(sk);
            const float scq = gdn_qk_rscale(a, sq, D), sck = gdn_qk_rscale(a, sk, D);
            for (int i = lane; i < Dp; i += WARP_SIZE) { /* each lane rereads only what it wrote */
                qr[i] = i < D ? (qr[i] * scq) * sn : 0.0f;
                kr[i] = i < D ? (kr[i] * sck) * sn : 0.0f;
            }
        }
        __syncthreads();
        /* gamma_t: each thread sums g in token order (the CPU's running sum, bit for bit), in double */
        if (tid < C) {
            double acc = 0.0, gt = 0.0;
            const int tl = min(tid, L - 1);
            for (int s = 0; s < L; s++) {
                acc += gs[s];
                if (s == tl) gt = acc;
            }
            gam[tid] = gt;
            eg[tid] = (float)exp(gt);       /* e^gamma_t */
            ed[tid] = (float)exp(acc - gt); /* e^(gamma_{L-1} - gamma_t) */
        }
        __syncthreads();

        /* P = (Q K^T) e^(gamma_t - gamma_s) (s <= t), A = beta_t (K K^T) e^(gamma_t - gamma_s) (s < t): task
         * (matrix, row tile m), the tiles left of and on the diagonal only; A's tile m and P's tile MT-1-m
         * share a warp, so the warps get equal work */
        for (int task = warp; task < 2 * MT; task += GDN_WARPS) {
            const bool isP = task >= MT;
            const int m = isP ? 2 * MT - 1 - task : task, nn = 2 * m + 2;
            const float *xa = (isP ? qs : ks) + (16 * m + gq) * LDQ + 2 * cq;
            float acc[2 * MT][4];
#pragma unroll
            for (int n = 0; n < 2 * MT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
            for (int kk = 0; kk < Dp / 16; kk++) {
                uint32_t ah[4], al[4];
                gdn_frag_a(xa + 16 * kk, LDQ, sqk, ah, al);
#pragma unroll
                for (int n = 0; n < 2 * MT; n++) {
                    if (n >= nn) break;
                    uint32_t bh[2], bl[2];
                    gdn_frag_b(ks + (8 * n + gq) * LDQ + 16 * kk + 2 * cq, sqk, bh, bl);
                    gdn_mma3(acc[n], ah, al, bh, bl);
                }
            }
            const float un = gdn_pow2(-2 * GDN_QK_EXP);
#pragma unroll
            for (int n = 0; n < 2 * MT; n++) {
                if (n >= nn) break;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int t = 16 * m + gq + 8 * (e >> 1), s = 8 * n + 2 * cq + (e & 1);
                    const float d = acc[n][e] * un, f = expf((float)(gam[t] - gam[s]));
                    if (isP && s <= t) ap[t * LDC + s] = d * f;
                    if (!isP && s < t) ap[s * LDC + t] = bet[t] * d * f;
                }
            }
        }

        /* X = K S, Y = Q S for the warp's columns (the incoming state as the B operand, from registers) */
        float X[MT][2][4], Y[MT][2][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int nn = 0; nn < 2; nn++)
#pragma unroll
                for (int e = 0; e < 4; e++) X[m][nn][e] = 0.0f, Y[m][nn][e] = 0.0f;
        int eS = 0;
        if (cols) {
            float amax = 0.0f;
#pragma unroll
            for (int n = 0; n < NIM; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) amax = fmaxf(amax, fabsf(S[n][e]));
            eS = gdn_scale_exp(warp_max(amax));
            const float sS = gdn_pow2(eS);
#pragma unroll
            for (int kk = 0; kk < DM / 16; kk++) {
                if (kk >= Dp / 16) break;
                uint32_t bh[2][2], bl[2][2]; /* [column tile][b0 b1] */
                gdn_pack(S[2 * kk][0] * sS, S[2 * kk][1] * sS, bh[0][0], bl[0][0]);
                gdn_pack(S[2 * kk + 1][0] * sS, S[2 * kk + 1][1] * sS, bh[0][1], bl[0][1]);
                gdn_pack(S[2 * kk][2] * sS, S[2 * kk][3] * sS, bh[1][0], bl[1][0]);
                gdn_pack(S[2 * kk + 1][2] * sS, S[2 * kk + 1][3] * sS, bh[1][1], bl[1][1]);
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    if (16 * m >= L) break; /* zero rows */
                    uint32_t kh4[4], kl4[4], qh4[4], ql4[4];
                    gdn_frag_a(ks + (16 * m + gq) * LDQ + 16 * kk + 2 * cq, LDQ, sqk, kh4, kl4);
                    gdn_frag_a(qs + (16 * m + gq) * LDQ + 16 * kk + 2 * cq, LDQ, sqk, qh4, ql4);
#pragma unroll
                    for (int nn = 0; nn < 2; nn++) {
                        gdn_mma3(X[m][nn], kh4, kl4, bh[nn], bl[nn]);
                        gdn_mma3(Y[m][nn], qh4, ql4, bh[nn], bl[nn]);
                    }
                }
            }
        }
        __syncthreads(); /* q is no longer read: R0 becomes T and the staging tiles; AP is complete */

        /* T = (I + A)^-1, forward substitution on CUDA cores, a thread per column s (columns are independent):
         * T[t][s] = -(A[t][s] + sum_{s<u<t} A[t][u] T[u][s]); the largest |T| sets T's operand scale */
        if (tid < C) {
            const int s = tid;
            float mx = 1.0f;
            for (int t = 0; t < C; t++) {
                float x = t == s ? 1.0f : 0.0f;
                if (t > s && t < L) {
                    float acc = ap[s * LDC + t];
                    for (int u = s + 1; u < t; u++) acc += ap[u * LDC + t] * Tm[u * LDC + s];
                    x = -acc;
                }
                Tm[t * LDC + s] = x;
                mx = fmaxf(mx, fabsf(x));
            }
            mx = warp_max(mx); /* C is a multiple of 32: whole warps */
            if (lane == 0) tmax[warp] = mx;
        }
        /* R = beta (V - e^gamma X) in X's registers, staged as [column][token] */
        int eR = 0;
        if (cols) {
            float amax = 0.0f;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int nn = 0; nn < 2; nn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int t = 16 * m + gq + 8 * (e >> 1), cl = 8 * nn + 2 * cq + (e & 1), c = cw + cl;
                        const float v = t < L && c < D ? a.v[(int64_t)(t0 + t) * a.v_stride + (int64_t)j * D + c] : 0.0f;
                        const float rv = bet[t] * (v - eg[t] * X[m][nn][e] * gdn_pow2(-GDN_QK_EXP - eS));
                        stg[cl * LDC + t] = rv;
                        amax = fmaxf(amax, fabsf(rv));
                    }
            eR = gdn_scale_exp(warp_max(amax));
        }
        __syncthreads(); /* T complete */

        if (cols) {
            float tm = tmax[0];
            for (int w = 1; w < C / WARP_SIZE; w++) tm = fmaxf(tm, tmax[w]);
            const int eT = gdn_scale_exp(tm);
            const float sT = gdn_pow2(eT), sR = gdn_pow2(eR);
            /* vn = T R (T lower triangular: tiles kk <= m) */
            float V[MT][2][4];
#pragma unroll
            for (int m = 0; m < MT; m++) {
#pragma unroll
                for (int nn = 0; nn < 2; nn++) V[m][nn][0] = V[m][nn][1] = V[m][nn][2] = V[m][nn][3] = 0.0f;
                if (16 * m >= L) continue; /* rows past L: vn = R = 0 */
#pragma unroll
                for (int kk = 0; kk <= m; kk++) {
                    uint32_t th[4], tl[4];
                    gdn_frag_a(Tm + (16 * m + gq) * LDC + 16 * kk + 2 * cq, LDC, sT, th, tl);
#pragma unroll
                    for (int nn = 0; nn < 2; nn++) {
                        uint32_t bh[2], bl[2];
                        gdn_frag_b(stg + (8 * nn + gq) * LDC + 16 * kk + 2 * cq, sR, bh, bl);
                        gdn_mma3(V[m][nn], th, tl, bh, bl);
                    }
                }
            }
            const float uv = gdn_pow2(-eT - eR);
            float amax = 0.0f;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int nn = 0; nn < 2; nn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) V[m][nn][e] *= uv, amax = fmaxf(amax, fabsf(V[m][nn][e]));
            const int eV = gdn_scale_exp(warp_max(amax));
            const float sV = gdn_pow2(eV);
            __syncwarp(); /* every lane's reads of R before vn replaces it */
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int nn = 0; nn < 2; nn++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        stg[(8 * nn + 2 * cq + (e & 1)) * LDC + 16 * m + gq + 8 * (e >> 1)] = V[m][nn][e];
            __syncwarp();

            /* out = (e^gamma_t Y + P vn) / sqrt(D) */
            const float uo = gdn_pow2(-GDN_QK_EXP - eS), up = gdn_pow2(-GDN_QK_EXP - eV);
#pragma unroll
            for (int m = 0; m < MT; m++) {
                if (16 * m >= L) break;
                float o[2][4];
#pragma unroll
                for (int nn = 0; nn < 2; nn++) o[nn][0] = o[nn][1] = o[nn][2] = o[nn][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk <= m; kk++) {
                    uint32_t ph[4], pl[4];
                    const int t = 16 * m + gq, s = 16 * kk + 2 * cq;
                    const float *pp = ap + t * LDC + s;
                    /* P lies on and below the diagonal; above it AP holds A */
#define GDN_P(dt, ds) (s + (ds) <= t + (dt) ? pp[(dt) * LDC + (ds)] * sqk : 0.0f)
                    gdn_pack(GDN_P(0, 0), GDN_P(0, 1), ph[0], pl[0]);
                    gdn_pack(GDN_P(8, 0), GDN_P(8, 1), ph[1], pl[1]);
                    gdn_pack(GDN_P(0, 8), GDN_P(0, 9), ph[2], pl[2]);
                    gdn_pack(GDN_P(8, 8), GDN_P(8, 9), ph[3], pl[3]);
#undef GDN_P
#pragma unroll
                    for (int nn = 0; nn < 2; nn++) {
                        uint32_t bh[2], bl[2];
                        gdn_frag_b(stg + (8 * nn + gq) * LDC + s, sV, bh, bl);
                        gdn_mma3(o[nn], ph, pl, bh, bl);
                    }
                }
#pragma unroll
                for (int nn = 0; nn < 2; nn++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int t = 16 * m + gq + 8 * (e >> 1), c = cw + 8 * nn + 2 * cq + (e & 1);
                        if (t < L && c < D)
                            a.out[((int64_t)(t0 + t) * a.n_vhead + j) * D + c] =
                                (eg[t] * (Y[m][nn][e] * uo) + o[nn][e] * up) * scale;
                    }
            }

            /* S^T = e^gamma_{L-1} S^T + Vd K, Vd[c][s] = vn[s][c] e^(gamma_{L-1} - gamma_s) (A operand, from the
             * staged vn), K[s][i] the B operand */
            uint32_t vh[MT][4], vl[MT][4];
#pragma unroll
            for (int kk = 0; kk < MT; kk++) {
                const int s = 16 * kk + 2 * cq;
                const float *vp = stg + gq * LDC + s;
                const float e0 = ed[s] * sV, e1 = ed[s + 1] * sV, e8 = ed[s + 8] * sV, e9 = ed[s + 9] * sV;
                gdn_pack(vp[0] * e0, vp[1] * e1, vh[kk][0], vl[kk][0]);
                gdn_pack(vp[8 * LDC] * e0, vp[8 * LDC + 1] * e1, vh[kk][1], vl[kk][1]);
                gdn_pack(vp[8] * e8, vp[9] * e9, vh[kk][2], vl[kk][2]);
                gdn_pack(vp[8 * LDC + 8] * e8, vp[8 * LDC + 9] * e9, vh[kk][3], vl[kk][3]);
            }
            const float egL = eg[L - 1];
#pragma unroll
            for (int n = 0; n < NIM; n++) {
                if (n >= NI) break;
                float u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int kk = 0; kk < MT; kk++) {
                    if (16 * kk >= L) break;
                    const float *kp = ks + (16 * kk + 2 * cq) * LDQ + 8 * n + gq;
                    uint32_t bh[2], bl[2];
                    gdn_pack(kp[0] * sqk, kp[LDQ] * sqk, bh[0], bl[0]);
                    gdn_pack(kp[8 * LDQ] * sqk, kp[9 * LDQ] * sqk, bh[1], bl[1]);
                    gdn_mma3(u, vh[kk], vl[kk], bh, bl);
                }
#pragma unroll
                for (int e = 0; e < 4; e++) S[n][e] = S[n][e] * egL + u[e] * up;
            }
        }
        __syncthreads(); /* the next chunk rewrites the gates, q, k, AP and R0 */
    }
    if (!cols) return;
#pragma unroll
    for (int n = 0; n < NIM; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int c = cw + gq + 8 * (e >> 1), i = 8 * n + 2 * cq + (e & 1);
            if (c < D && i < D) Sg[(size_t)c * D + i] = S[n][e];
        }
}

template <int NI>
static cudaError_t gdn_launch(const struct gdn_args *a, cudaStream_t s) {
    const dim3 grid((unsigned)a->n_vhead, (unsigned)((a->d_state + GDN_COLS - 1) / GDN_COLS));
    launch_kernel(gdn_recurrent_kernel<NI>, grid, GDN_THREADS, 0, s, *a);
    return cudaGetLastError();
}

static cudaError_t gdn_recurrent(const struct gdn_args *a, cudaStream_t s) {
    const int ni = (a->d_state + WARP_SIZE - 1) / WARP_SIZE;
    if (ni <= 1) return gdn_launch<1>(a, s);
    if (ni <= 2) return gdn_launch<2>(a, s);
    if (ni <= 4) return gdn_launch<4>(a, s);
    return gdn_launch<8>(a, s);
}

template <int C, int DM>
static cudaError_t gdn_chunk_launch(const struct gdn_args *a, int cut, cudaStream_t s) {
    const int dp = (a->d_state + 15) & ~15;
    const size_t smem = gdn_sm_bytes(C, dp);
    if (smem > 48 * 1024) { /* an attribute of the current device's function, not a stream operation */
        const cudaError_t e = cudaFuncSetAttribute(gdn_chunk_kernel<C, DM>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    const dim3 grid((unsigned)a->n_vhead, (unsigned)((dp + GDN_CB - 1) / GDN_CB));
    launch_kernel(gdn_chunk_kernel<C, DM>, grid, GDN_THREADS, smem, s, *a, cut);
    return cudaGetLastError();
}

/* The checks cuda_gdn and cuda_gdn_conv share (all but q, k, v, their strides and the variant). */
static bool gdn_args_ok(const struct gdn_args *a) {
    if (!a->a || !a->b || !a->dt_bias || !a->ssm_a || !a->state || !a->out || a->n_tokens < 0 || a->n_group <= 0 ||
        a->n_vhead <= 0 || a->n_vhead % a->n_group || a->d_state <= 0 || a->d_state > GDN_MAX_D || a->ab_stride < 0 ||
        !(a->eps >= 0) || a->n_vhead > 2147483647 / 2)
        return false;
    if (a->ab_group < 0 || (a->ab_group > 0 && a->ab_group != a->n_vhead / a->n_group)) return false;
    return !a->snap ||
           (a->snap_ring > 0 && a->snap_pos0 >= 0 && a->snap_stride >= (int64_t)a->n_vhead * a->d_state * a->d_state);
}

extern "C" cudaError_t cuda_gdn_conv(const struct gdn_conv_args *f, cudaStream_t s) {
    const struct ssm_conv_args *c = &f->conv;
    const struct gdn_args *a = &f->gdn;
    if (!gdn_args_ok(a) || !c->x || !c->state || !c->w || !c->pos || c->n_tokens != a->n_tokens ||
        a->n_tokens > MMV_MAX_TOKENS || c->d_conv < 2 || c->d_conv > 16 ||
        c->n_ch != (int64_t)(2 * a->n_group + a->n_vhead) * a->d_state || c->x_stride < c->n_ch)
        return cudaErrorInvalidValue;
    if (c->snap &&
        (c->snap_ring <= 0 || c->snap_pos0 < 0 || c->snap_stride < (int64_t)(c->d_conv - 1) * c->n_ch))
        return cudaErrorInvalidValue;
    if (f->norm_done && !(f->norm_eps >= 0.0f)) return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaSuccess;
    const int ni = (a->d_state + WARP_SIZE - 1) / WARP_SIZE;
    if (ni <= 1) return gdn_conv_launch<1>(f, s);
    if (ni <= 2) return gdn_conv_launch<2>(f, s);
    if (ni <= 4) return gdn_conv_launch<4>(f, s);
    return gdn_conv_launch<8>(f, s);
}

extern "C" cudaError_t cuda_gdn(const struct gdn_args *a, cudaStream_t s) {
    if (!gdn_args_ok(a) || !a->q || !a->k || !a->v || a->qk_stride < (int64_t)a->n_group * a->d_state ||
        a->v_stride < (int64_t)a->n_vhead * a->d_state || a->variant < GDN_AUTO || a->variant > GDN_CHUNKED)
        return cudaErrorInvalidValue;
    const bool chunked = a->variant == GDN_CHUNKED || (a->variant == GDN_AUTO && a->n_tokens >= GDN_AUTO_CHUNKED);
    /* chunked up to the first snapshot token (each snapshot needs its own state), recurrent from there */
    const int cut = !chunked ? 0 : a->snap && a->snap_from < a->n_tokens ? max(a->snap_from, 0) : a->n_tokens;
    if (cut > 0) {
        const int dp = (a->d_state + 15) & ~15;
        const cudaError_t e = dp <= 64 ? gdn_chunk_launch<64, 64>(a, cut, s)
                              : dp <= 128 ? gdn_chunk_launch<64, 128>(a, cut, s)
                                          : gdn_chunk_launch<32, 256>(a, cut, s);
        if (e != cudaSuccess || cut == a->n_tokens) return e;
    }
    struct gdn_args b = *a; /* the tokens from cut on, on the same stream */
    b.q += (int64_t)cut * a->qk_stride;
    b.k += (int64_t)cut * a->qk_stride;
    b.v += (int64_t)cut * a->v_stride;
    b.a += (int64_t)cut * a->ab_stride;
    b.b += (int64_t)cut * a->ab_stride;
    b.out += (int64_t)cut * a->n_vhead * a->d_state;
    b.n_tokens = a->n_tokens - cut;
    if (a->snap) b.snap_from = a->snap_from - cut, b.snap_pos0 = (int32_t)(((int64_t)a->snap_pos0 + cut) % a->snap_ring);
    return gdn_recurrent(&b, s);
}
