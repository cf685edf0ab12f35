/* attn.cu: causal attention of f32 queries over the f16 or Q8_0 KV cache, grouped-query heads (attn_args).
 *
 * out[t][h] = sum_j softmax_j(scale * q[t][h].k[j][g]) v[j][g],  g = h / G (G = n_head / n_head_kv),
 * j = 0..min(pos[t], n_kv-1). The softmax is the online (flash) form like lib/cpu/attn.c: per query
 * row a running max m, sum l and accumulator acc, rescaled by exp(m_old - m_new) when the max moves.
 *
 * Two kernels. ATTN_SIMT (attn_kernel, FlashAttention-2 style on CUDA cores) serves decode and prefill:
 * a block owns "rows" = (token, head) pairs of ONE KV group (hb heads of the group x bt tokens, at
 * most 4096 / head_dim rows and 32 / DPT, DPT = ceil(head_dim / 128)), so every K/V cell it loads
 * serves all of them: decode puts all query heads of a group in a block (K/V read once per group),
 * prefill puts up to 32 / G tokens x G heads in a block. Per tile of tk cells (tk * head_dim <= 4096):
 *   1. K tile -> shared memory as f32, rows head_dim+1 apart (odd stride: conflict-free columns), and
 *      the V tile as f16 (both loads coalesced over the cells' contiguous head_dim values);
 *   2. scores S[jj][r] = scale * q[r].k[jj], one (row, cell) item per thread, q rows in shared memory;
 *      cells past a row's pos are -inf (causal mask);
 *   3. one warp per row: tile max, new running max, p = exp(s - m), l = l * corr + sum p;
 *   4. thread tid owns dims tid + 128 i (i < DPT) of every row in registers: acc = acc * corr + sum_jj
 *      p[jj][r] v[jj][d], V from the shared tile.
 * Q8_0 cells (template Q8): the K tile is dequantised on the load (value = q * d, exact in f32, q stays
 * f32: the CPU rounds q to Q8_0 instead, like llama.cpp's CPU; llama.cpp's CUDA tile kernels also
 * dequantise K), and the V tile is kept as the raw blocks (head_dim / 32 blocks of 34 bytes per cell,
 * smaller than the f16 tile, so the same shared memory) and dequantised in step 4.
 * Rotation (rot_k / rot_v, Q8_0 only): after the q load each warp rotates whole rot_k chunks of the
 * q tile in shared memory (warp_hadamard, common.cuh: kv_hadamard's butterflies spread over the lanes,
 * the CPU's f32 arithmetic bit for bit); at the end the normalised rows are staged in the q tile (no
 * longer read), rotated in rot_v chunks the same way, then written; with splits attn_merge rotates the
 * merged row instead, a warp per chunk (the rotation is linear, so it commutes with the merge up to
 * rounding). ATTN_MMA rotates the same way (below).
 * Shared memory stays under 48 KB for every head_dim <= 512 (q <= 16 KB, K tile <= 16.6 KB, V tile
 * <= 8.3 KB, scores <= 8 KB).
 * Decode (n_tokens <= ATTN_SPLIT_TOKENS, scratch given): flash-decoding; the live cells are split over
 * attn_splits() blocks per group (grid.z; from n_kv, so a graph keeps its launch), attn_split_cells() each (from
 * the positions, read on the device), each writes (m, l, acc) per row to scratch as
 * [split][token][head][2 + head_dim], and attn_merge (one block per (token, head)) combines them:
 * M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. Without scratch (or larger
 * batches) there is one split and the first kernel writes out = acc / l itself.
 * Grid: x = n_head_kv * ceil(G / hb), y = ceil(n_tokens / bt), z = splits; 128 threads.
 * Bytes per call: K and V cells up to the largest pos of each block, once per block (decode: once
 * per KV group), q and out once; split partials 2 * splits * n_tokens * n_head * (head_dim + 2) * 4.
 * Variants (a->variant): ATTN_SIMT, the kernel above; ATTN_MMA, the tensor-core FlashAttention-2
 * kernel further down (head_dim 64/128/256, one split, f16 and Q8_0 cells); ATTN_AUTO runs
 * attn_auto_variant (kernels.h): ATTN_MMA for prefill, i.e. n_tokens > ATTN_SPLIT_TOKENS with at least
 * ATTN_MMA_MIN_ROWS = 32 (token, head) rows per KV group, at those head_dims; ATTN_SIMT for the rest.
 * Why, from work per byte (no device has timed either yet):
 *   - shared memory bounds the SIMT kernel: its score loop issues two shared loads (q, a broadcast,
 *     and k) per FMA instruction, its P V loop about one per DPT; at one warp-wide load a clock per SM
 *     that is 16-32 of the SM's 128 f32 FMAs a clock. An MMA step is 16 x 8 x 16 = 2048 multiply-adds
 *     for 6 words a lane, a hi + lo pair 4096 for 10 loads: ~400 per load instruction, so the tensor
 *     kernel is bound by the tensor rate instead: f16 x f16 + f32 accumulate, 1024 (sm_80) / 2048
 *     (sm_90) / 128-256 (GeForce sm_86 / sm_89 / sm_120) multiply-adds a clock per SM, halved by the
 *     hi + lo splits (a third for Q8_0's P V);
 *   - global memory: a block reads its KV group's cells once per 64 rows (MMA) against 32 / DPT rows
 *     (SIMT: 32 at head_dim <= 128, 16 at 256), so prefill's K/V bytes halve, or quarter at 256;
 *   - an MMA block computes all 64 rows whether live or not: with r live rows its useful rate is
 *     r / 64 of the above. At r >= 32 it is at least even with the SIMT kernel on the slowest case
 *     (GeForce sm_86: 128 / 2 * 32 / 64 = 32 multiply-adds a clock, Q8_0's P V 21, against 16-32) and
 *     far ahead on sm_80 / sm_90 (256+), with half the K/V bytes; below 32 rows, and for decode, the
 *     SIMT kernel wins: decode reads each cell once per KV group either way, and flash-decoding spreads
 *     the cells over up to ATTN_SPLIT_MAX blocks where the tensor kernel has one block per group
 *     walking them all.
 */
#include <cuda_fp16.h>

#include "common.cuh"
#include "ptx.cuh"

enum { ATTN_THREADS = 128, ATTN_WARPS = ATTN_THREADS / WARP_SIZE, ATTN_ROWS = 32, ATTN_TILE_FLOATS = 4096,
       ATTN_MAX_D = 512 };

/* Launch shape, computed on the host from the args alone. */
struct attn_plan {
    int32_t hb, bt, tk;          /* heads of the group, tokens per block; cells per tile */
    int32_t n_split;
};

static __host__ __device__ __forceinline__ int attn_round4(int n) { return (n + 3) & ~3; }

template <int DPT, bool Q8>
static __global__ void __launch_bounds__(ATTN_THREADS)
    attn_kernel(const __grid_constant__ struct attn_args a, const struct attn_plan p) {
    constexpr int RMAX = ATTN_ROWS / DPT;
    float *smem = dyn_smem<float>();
    const int D = a.head_dim, G = a.n_head / a.n_head_kv, tid = threadIdx.x;
    const int warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int n_hchunk = (G + p.hb - 1) / p.hb;
    const int g = blockIdx.x / n_hchunk, h0 = (blockIdx.x % n_hchunk) * p.hb;
    const int t0 = blockIdx.y * p.bt, split = blockIdx.z, rows = p.hb * p.bt, tk = p.tk;
    float *qs = smem;                              /* [rows][D] */
    float *ks = qs + attn_round4(rows * D);        /* [tk][D + 1] */
    float *P = ks + attn_round4(tk * (D + 1));     /* [tk][RMAX]: scores, then probabilities */
    float *m_s = P + tk * RMAX, *l_s = m_s + RMAX, *c_s = l_s + RMAX;
    int *last_s = (int *)(c_s + RMAX);             /* last visible cell of each row, -1: no row */
    uint16_t *vs = (uint16_t *)(last_s + RMAX);    /* [tk][D] f16: the V tile (Q8: [tk][D / 32] blocks) */

    if (tid < RMAX) {
        const int t = t0 + tid / p.hb, hl = tid % p.hb;
        const bool ok = tid < rows && t < a.n_tokens && h0 + hl < G;
        last_s[tid] = ok ? min(a.pos[t], a.n_kv - 1) : -1;
        m_s[tid] = -INFINITY, l_s[tid] = 0.0f, c_s[tid] = 0.0f;
    }
    for (int i = tid; i < rows * D; i += ATTN_THREADS) {
        const int r = i / D, d = i % D, t = t0 + r / p.hb, hl = r % p.hb;
        qs[i] = t < a.n_tokens && h0 + hl < G ? a.q[(int64_t)t * a.q_stride + (int64_t)(g * G + h0 + hl) * D + d] : 0.0f;
    }
    __syncthreads();
    if (a.rot_k) { /* block-uniform */
        for (int c = warp; c < rows * D / a.rot_k; c += ATTN_WARPS) warp_hadamard(qs + c * a.rot_k, a.rot_k, lane);
        __syncthreads();
    }
    int jmax = -1;
    for (int r = 0; r < rows; r++) jmax = max(jmax, last_s[r]);
    const int cells = attn_split_cells(&a, p.n_split, tk); /* from the live length: every block the same */
    const int j0 = split * cells, j1 = min(j0 + cells, jmax + 1);

    float acc[RMAX][DPT];
#pragma unroll
    for (int r = 0; r < RMAX; r++)
#pragma unroll
        for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;

    const uint16_t *kg = (const uint16_t *)a.k + (int64_t)g * D, *vg = (const uint16_t *)a.v + (int64_t)g * D;
    const int nbh = D / QK8_0, wbh = nbh * (int)(sizeof(block_q8_0) / 2); /* Q8: blocks, 16-bit words per head */
    const int64_t cb = a.kv_stride / QK8_0;                                /* Q8: blocks between cells */
    const block_q8_0 *kq = (const block_q8_0 *)a.k + (int64_t)g * nbh, *vq = (const block_q8_0 *)a.v + (int64_t)g * nbh;
    const block_q8_0 *vsq = (const block_q8_0 *)vs;
    for (int jt = j0; jt < j1; jt += tk) {
        const int n = min(tk, j1 - jt);
        if constexpr (Q8) {
            for (int i = tid; i < tk * D; i += ATTN_THREADS) {
                const int jj = i / D, d = i % D;
                ks[jj * (D + 1) + d] = jj < n ? blocks_value_q8_0(kq + (jt + jj) * cb + d / QK8_0, d % QK8_0) : 0.0f;
            }
            for (int i = tid; i < tk * wbh; i += ATTN_THREADS) { /* raw blocks, 2-byte words (blocks are 34 bytes) */
                const int jj = i / wbh, w = i % wbh;
                vs[i] = jj < n ? ((const uint16_t *)(vq + (jt + jj) * cb))[w] : 0;
            }
        } else {
            for (int i = tid; i < tk * D; i += ATTN_THREADS) {
                const int jj = i / D, d = i % D;
                const int64_t o = (int64_t)(jt + jj) * a.kv_stride + d;
                ks[jj * (D + 1) + d] = jj < n ? blocks_f16_to_f32(kg[o]) : 0.0f;
                vs[i] = jj < n ? vg[o] : 0;
            }
        }
        __syncthreads();
        for (int i = tid; i < rows * tk; i += ATTN_THREADS) {
            const int r = i / tk, jj = i % tk;
            float s = -INFINITY;
            if (jj < n && jt + jj <= last_s[r]) {
                const float *qr = qs + r * D, *kr = ks + jj * (D + 1);
                float dot = 0.0f;
                for (int d = 0; d < D; d++) dot += qr[d] * kr[d];
                s = dot * a.scale;
            }
            P[jj * RMAX + r] = s;
        }
        __syncthreads();
        for (int r = warp; r < rows; r += ATTN_WARPS) { /* warp-uniform: rows is per block */
            const float s0 = lane < tk ? P[lane * RMAX + r] : -INFINITY;
            const float s1 = lane + WARP_SIZE < tk ? P[(lane + WARP_SIZE) * RMAX + r] : -INFINITY;
            const float mo = m_s[r], mn = fmaxf(mo, warp_max(fmaxf(s0, s1)));
            const float p0 = s0 == -INFINITY ? 0.0f : expf(s0 - mn), p1 = s1 == -INFINITY ? 0.0f : expf(s1 - mn);
            if (lane < tk) P[lane * RMAX + r] = p0;
            if (lane + WARP_SIZE < tk) P[(lane + WARP_SIZE) * RMAX + r] = p1;
            const float ls = warp_sum(p0 + p1);
            __syncwarp(); /* every lane's read of m_s[r] before lane 0 rewrites it (racecheck, H100) */
            if (lane == 0) {
                const float c = mo == -INFINITY ? 0.0f : expf(mo - mn); /* acc and l are 0 while m is -inf */
                l_s[r] = l_s[r] * c + ls, m_s[r] = mn, c_s[r] = c;
            }
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < RMAX; r++) {
            if (r >= rows) break;
            const float c = c_s[r];
#pragma unroll
            for (int i = 0; i < DPT; i++) acc[r][i] *= c;
        }
        for (int jj = 0; jj < n; jj++) {
            float v[DPT];
#pragma unroll
            for (int i = 0; i < DPT; i++) {
                const int d = tid + i * ATTN_THREADS;
                if constexpr (Q8) v[i] = d < D ? blocks_value_q8_0(vsq + jj * nbh + d / QK8_0, d % QK8_0) : 0.0f;
                else v[i] = d < D ? blocks_f16_to_f32(vs[jj * D + d]) : 0.0f;
            }
            const float *pr = P + jj * RMAX;
#pragma unroll
            for (int r = 0; r < RMAX; r++) {
                if (r >= rows) break;
                const float pv = pr[r];
#pragma unroll
                for (int i = 0; i < DPT; i++) acc[r][i] += pv * v[i];
            }
        }
        __syncthreads(); /* ks and P are refilled by the next tile */
    }

    const bool stage = p.n_split == 1 && a.rot_v; /* rotate the output rows in the q tile before writing */
#pragma unroll
    for (int r = 0; r < RMAX; r++) {
        if (r >= rows) break;
        const int t = t0 + r / p.hb, hl = r % p.hb;
        if (t >= a.n_tokens || h0 + hl >= G) continue;
        const int h = g * G + h0 + hl;
        if (stage) {
            const float l = l_s[r], inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
            for (int i = 0; i < DPT; i++)
                if (tid + i * ATTN_THREADS < D) qs[r * D + tid + i * ATTN_THREADS] = acc[r][i] * inv;
        } else if (p.n_split > 1) {
            float *part = a.scratch + (((int64_t)split * a.n_tokens + t) * a.n_head + h) * (D + 2);
            if (tid == 0) part[0] = m_s[r], part[1] = l_s[r];
#pragma unroll
            for (int i = 0; i < DPT; i++)
                if (tid + i * ATTN_THREADS < D) part[2 + tid + i * ATTN_THREADS] = acc[r][i];
        } else {
            const float l = l_s[r], inv = l > 0.0f ? 1.0f / l : 0.0f;
            float *o = a.out + (int64_t)t * a.out_stride + (int64_t)h * D;
#pragma unroll
            for (int i = 0; i < DPT; i++)
                if (tid + i * ATTN_THREADS < D) o[tid + i * ATTN_THREADS] = acc[r][i] * inv;
        }
    }
    if (stage) { /* block-uniform; the last tile's __syncthreads ended every read of the q tile */
        __syncthreads();
        for (int c = warp; c < rows * D / a.rot_v; c += ATTN_WARPS) warp_hadamard(qs + c * a.rot_v, a.rot_v, lane);
        __syncthreads();
        for (int i = tid; i < rows * D; i += ATTN_THREADS) {
            const int r = i / D, t = t0 + r / p.hb, hl = r % p.hb;
            if (t < a.n_tokens && h0 + hl < G) a.out[(int64_t)t * a.out_stride + (int64_t)(g * G + h0 + hl) * D + i % D] = qs[i];
        }
    }
}

/* One block per (token, head): merges the n_split partials of that row (and rotates it with rot_v). */
static __global__ void __launch_bounds__(ATTN_THREADS) attn_merge(const __grid_constant__ struct attn_args a, int n_split) {
    __shared__ float ob[ATTN_MAX_D];
    const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head, D = a.head_dim;
    const size_t split_stride = (size_t)a.n_tokens * a.n_head * (D + 2);
    const float *part = a.scratch + ((size_t)t * a.n_head + h) * (D + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, part[s * split_stride]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float m = part[s * split_stride];
        if (m != -INFINITY) L += part[s * split_stride + 1] * expf(m - M);
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    float *o = a.out + (int64_t)t * a.out_stride + (int64_t)h * D;
    for (int d = threadIdx.x; d < D; d += ATTN_THREADS) {
        float acc = 0.0f;
        for (int s = 0; s < n_split; s++) {
            const float m = part[s * split_stride];
            if (m != -INFINITY) acc += part[s * split_stride + 2 + d] * expf(m - M);
        }
        if (a.rot_v) ob[d] = acc * inv;
        else o[d] = acc * inv;
    }
    if (a.rot_v) { /* block-uniform */
        __syncthreads();
        for (int c = threadIdx.x / WARP_SIZE; c < D / a.rot_v; c += ATTN_WARPS)
            warp_hadamard(ob + c * a.rot_v, a.rot_v, threadIdx.x % WARP_SIZE);
        __syncthreads();
        for (int d = threadIdx.x; d < D; d += ATTN_THREADS) o[d] = ob[d];
    }
}

/* ---- ATTN_MMA: the tensor-core prefill kernel (mma.sync m16n8k16, f16 x f16 -> f32) ----
 * Block: 4 warps, 64 rows ((token, head) pairs of one KV group as above); warp w owns rows 16w..16w+15,
 * lane (g = lane / 4, c = lane % 4) the rows 16w+g and 16w+g+8 of every fragment (PTX fragment layouts).
 * To keep f32 accuracy with f16 inputs, q and p are split: x = hi + lo, hi = f16(x), lo = f16(x - hi),
 * and each product is two MMAs (K and V are f16 already, so S = q_hi k + q_lo k is exact to ~2^-22).
 * Per tile of TK cells: K and V copied (f16, rows D+8 halves apart) to shared memory; S (16 x TK per
 * warp) in registers; masked, scaled, the running max / sum per row reduced over the 4 lanes of a row
 * group; P reused straight from the S registers as the A operand of P V; O (16 x D per warp) lives in
 * registers, rescaled per row. Q hi/lo sit in shared memory for the whole block.
 * Grid: x = n_head_kv * ceil(G / hb), y = ceil(n_tokens / bt), hb = min(G, 64), bt = 64 / hb; 128 threads.
 * Bytes per call: K and V cells up to the largest pos of each block, once per block; q and out once.
 * Q8_0 cells (template Q8), the same accuracy class as f16 cells, two different exact forms:
 *   - K: the int8 codes q go to the K tile as f16 (exact) and the block scales d (f16, so exact in f32)
 *     beside it; S takes per 32-value block the partial dot of (q_hi + q_lo) with the codes (four MMAs
 *     into a zeroed fragment), then adds d * partial in f32: the products are as exact as f16 cells'
 *     and d is applied in f32 once per block, as the SIMT kernel's q * d dequantisation does per value.
 *     K's scale runs along S's columns (cells), so it can wait until after the MMAs;
 *   - V: its scale runs along P V's reduction (cells), so it cannot be pulled out of the MMA; instead
 *     each value d * q (11-bit d times 8-bit q: at most 18 significant bits, a multiple of 2^-24) is
 *     split exactly into f16 hi + lo, and P V is p_hi v_hi + p_lo v_hi + p_hi v_lo (three MMAs; the
 *     dropped p_lo v_lo is below 2^-22 of the term, the size of p's own split error). Exact while
 *     |d q| < 65520 (f16's range, what an f16 cache holds); folding d into p instead would lose p's
 *     low bits to f16 subnormals for small d. Shared memory: the codes' tile, V hi and lo tiles, the
 *     scales (D = 256: 91.5 KB, under sm_86/89/120's 99 KB).
 * Rotation (rot_k / rot_v): each warp rotates chunks of rot_k q values with warp_hadamard in a scratch
 * row in the (still unused) K tile, then splits them into the Q tiles; at the end each warp stages its
 * 16 normalised rows as f32 over the Q tiles (their last read was before the tile loop's last barrier),
 * rotates them in rot_v chunks, then writes them: the SIMT kernel's convention and arithmetic. */
enum { MMA_WARPS = 4, MMA_ROWS = 16 * MMA_WARPS, MMA_THREADS = MMA_WARPS * WARP_SIZE };

/* f16 bits of x (round to nearest even) and of the remainder x - f16(x). */
static __device__ __forceinline__ void f16_split(float x, uint32_t &hi, uint32_t &lo) {
    const __half h = __float2half_rn(x);
    hi = __half_as_ushort(h);
    lo = __half_as_ushort(__float2half_rn(x - __half2float(h)));
}
static __device__ __forceinline__ void pack_split(float x0, float x1, uint32_t &hi, uint32_t &lo) {
    uint32_t h0, l0, h1, l1;
    f16_split(x0, h0, l0);
    f16_split(x1, h1, l1);
    hi = h0 | h1 << 16, lo = l0 | l1 << 16; /* the lower index in the low half */
}

template <int D, bool Q8> struct mma_shape {
    static constexpr int TK = D == 64 ? 64 : 16; /* cells per tile */
    static constexpr int LD = D + 8;             /* halves per shared row: 16-byte rows, conflict-free pairs */
    static constexpr int NB = D / QK8_0;         /* Q8: blocks per head row */
    static constexpr int NKV = Q8 ? 3 : 2;       /* K/V tiles of halves: K, V (Q8: K's codes, V hi, V lo) */
    static constexpr size_t SMEM =
        (size_t)2 * (2 * MMA_ROWS * LD + NKV * TK * LD) + (Q8 ? sizeof(float) * TK * NB : 0) + sizeof(int) * MMA_ROWS;
};

/* c += (q hi + q lo) x K over the 16 dims kk * 16.. of rows rA, rB and the 8 cells of K tile rows cell.. (two MMAs). */
static __device__ __forceinline__ void mma_qk16(float c[4], const uint32_t *qh32, const uint32_t *ql32,
                                                const uint32_t *ks32, int ld2, int rA, int rB, int cell, int w0) {
    const uint32_t b0 = ks32[cell * ld2 + w0], b1 = ks32[cell * ld2 + w0 + 4];
    const uint32_t ah[4] = {qh32[rA * ld2 + w0], qh32[rB * ld2 + w0], qh32[rA * ld2 + w0 + 4], qh32[rB * ld2 + w0 + 4]};
    const uint32_t al[4] = {ql32[rA * ld2 + w0], ql32[rB * ld2 + w0], ql32[rA * ld2 + w0 + 4], ql32[rB * ld2 + w0 + 4]};
    ptx_mma_16816(c, ah, b0, b1);
    ptx_mma_16816(c, al, b0, b1);
}

/* B fragment of a V tile (rows = cells, LD halves apart) at v0 = the lane's first cell and dim. */
static __device__ __forceinline__ void v_frag(const uint16_t *v0, int ld, uint32_t &b0, uint32_t &b1) {
    b0 = (uint32_t)v0[0] | (uint32_t)v0[ld] << 16;
    b1 = (uint32_t)v0[8 * ld] | (uint32_t)v0[9 * ld] << 16;
}

template <int D, bool Q8>
static __global__ void __launch_bounds__(MMA_THREADS)
    attn_mma_kernel(const __grid_constant__ struct attn_args a, const struct attn_plan p) {
    constexpr int TK = mma_shape<D, Q8>::TK, LD = mma_shape<D, Q8>::LD, NB = mma_shape<D, Q8>::NB;
    constexpr int NT = TK / 8, ND = D / 8;
    float *smem = dyn_smem<float>();
    uint16_t *qh = (uint16_t *)smem, *ql = qh + MMA_ROWS * LD, *ks = ql + MMA_ROWS * LD, *vs = ks + TK * LD;
    uint16_t *vl = vs + TK * LD;                         /* Q8: the lo halves of V */
    float *dks = (float *)(vs + (Q8 ? 2 : 1) * TK * LD); /* Q8: [TK][NB] scales of the K tile's blocks */
    int *last_s = (int *)(dks + (Q8 ? TK * NB : 0));
    const int G = a.n_head / a.n_head_kv, tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int gq = lane / 4, cq = lane % 4;
    const int n_hchunk = (G + p.hb - 1) / p.hb;
    const int g = blockIdx.x / n_hchunk, h0 = (blockIdx.x % n_hchunk) * p.hb, t0 = blockIdx.y * p.bt;
    const int rows = p.hb * p.bt;

    if (tid < MMA_ROWS) {
        const int t = t0 + tid / p.hb, hl = tid % p.hb;
        last_s[tid] = tid < rows && t < a.n_tokens && h0 + hl < G ? min(a.pos[t], a.n_kv - 1) : -1;
    }
    if (a.rot_k) { /* block-uniform: one warp per chunk of rot_k values, rotated in the (still free) K tile */
        float *x = (float *)ks + warp * a.rot_k;
        for (int c = warp; c < MMA_ROWS * D / a.rot_k; c += MMA_WARPS) {
            const int r = c * a.rot_k / D, d0 = c * a.rot_k % D, t = t0 + r / p.hb, hl = r % p.hb;
            const bool ok = r < rows && t < a.n_tokens && h0 + hl < G;
            const float *qr = a.q + (int64_t)t * a.q_stride + (int64_t)(g * G + h0 + hl) * D + d0;
            for (int i = lane; i < a.rot_k; i += WARP_SIZE) x[i] = ok ? qr[i] : 0.0f;
            warp_hadamard(x, a.rot_k, lane);
            for (int i = lane; i < a.rot_k; i += WARP_SIZE) {
                uint32_t hi, lo;
                f16_split(x[i], hi, lo);
                qh[r * LD + d0 + i] = (uint16_t)hi, ql[r * LD + d0 + i] = (uint16_t)lo;
            }
            __syncwarp(); /* every lane's reads of x before the next chunk overwrites it */
        }
    } else {
        for (int i = tid; i < MMA_ROWS * D; i += MMA_THREADS) {
            const int r = i / D, d = i % D, t = t0 + r / p.hb, hl = r % p.hb;
            const float x = r < rows && t < a.n_tokens && h0 + hl < G
                                ? a.q[(int64_t)t * a.q_stride + (int64_t)(g * G + h0 + hl) * D + d] : 0.0f;
            uint32_t hi, lo;
            f16_split(x, hi, lo);
            qh[r * LD + d] = (uint16_t)hi, ql[r * LD + d] = (uint16_t)lo;
        }
    }
    __syncthreads();
    int jmax = -1;
    for (int r = 0; r < rows; r++) jmax = max(jmax, last_s[r]);
    const int rA = 16 * warp + gq, rB = rA + 8, lastA = last_s[rA], lastB = last_s[rB];

    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float mA = -INFINITY, mB = -INFINITY, lA = 0.0f, lB = 0.0f;
    const uint16_t *kg = (const uint16_t *)a.k + (int64_t)g * D, *vg = (const uint16_t *)a.v + (int64_t)g * D;
    const int64_t cb = a.kv_stride / QK8_0; /* Q8: blocks between cells */
    const block_q8_0 *kq = (const block_q8_0 *)a.k + (int64_t)g * NB, *vq = (const block_q8_0 *)a.v + (int64_t)g * NB;
    const uint32_t *qh32 = (const uint32_t *)qh, *ql32 = (const uint32_t *)ql, *ks32 = (const uint32_t *)ks;

    for (int jt = 0; jt <= jmax; jt += TK) {
        const int n = min(TK, jmax + 1 - jt);
        if constexpr (Q8) { /* K: the int8 codes as f16 (exact) and the scales; V: d * q split into hi + lo (exact) */
            for (int i = tid; i < TK * D; i += MMA_THREADS) {
                const int jj = i / D, d = i % D;
                uint32_t kc = 0, hi = 0, lo = 0;
                if (jj < n) {
                    const int64_t bo = (int64_t)(jt + jj) * cb + d / QK8_0;
                    kc = __half_as_ushort(__float2half_rn((float)kq[bo].qs[d % QK8_0]));
                    f16_split(blocks_value_q8_0(vq + bo, d % QK8_0), hi, lo);
                }
                ks[jj * LD + d] = (uint16_t)kc, vs[jj * LD + d] = (uint16_t)hi, vl[jj * LD + d] = (uint16_t)lo;
            }
            for (int i = tid; i < TK * NB; i += MMA_THREADS) {
                const int jj = i / NB, b = i % NB;
                dks[i] = jj < n ? blocks_f16_to_f32(kq[(int64_t)(jt + jj) * cb + b].d) : 0.0f;
            }
        } else {
            for (int i = tid; i < TK * D / 2; i += MMA_THREADS) { /* pairs of halves; rows past n are 0 */
                const int jj = i / (D / 2), c2 = i % (D / 2);
                const int64_t o2 = (int64_t)(jt + jj) * a.kv_stride + 2 * c2;
                ((uint32_t *)ks)[jj * (LD / 2) + c2] = jj < n ? *(const uint32_t *)(kg + o2) : 0u;
                ((uint32_t *)vs)[jj * (LD / 2) + c2] = jj < n ? *(const uint32_t *)(vg + o2) : 0u;
            }
        }
        __syncthreads();
        /* S = Q K^T for this warp's 16 rows: NT tiles of 8 cells */
        float sc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
            if constexpr (Q8) { /* per 32-value block: its partial dot, then times the cell's scale (f32) */
#pragma unroll
                for (int b = 0; b < NB; b++) {
                    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma_qk16(t, qh32, ql32, ks32, LD / 2, rA, rB, 8 * nt + gq, 16 * b + cq);
                    mma_qk16(t, qh32, ql32, ks32, LD / 2, rA, rB, 8 * nt + gq, 16 * b + 8 + cq);
                    const float d0 = dks[(8 * nt + 2 * cq) * NB + b], d1 = dks[(8 * nt + 2 * cq + 1) * NB + b];
                    sc[nt][0] += d0 * t[0], sc[nt][1] += d1 * t[1], sc[nt][2] += d0 * t[2], sc[nt][3] += d1 * t[3];
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++)
                    mma_qk16(sc[nt], qh32, ql32, ks32, LD / 2, rA, rB, 8 * nt + gq, 8 * kk + cq);
            }
        }
        /* mask, scale, online softmax per row (c0 c1: row A, c2 c3: row B) */
        float mxA = -INFINITY, mxB = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = jt + 8 * nt + 2 * cq + (e & 1);
                const bool ok = j < jt + n && j <= (e < 2 ? lastA : lastB);
                sc[nt][e] = ok ? sc[nt][e] * a.scale : -INFINITY;
                if (e < 2) mxA = fmaxf(mxA, sc[nt][e]);
                else mxB = fmaxf(mxB, sc[nt][e]);
            }
        mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 1)), mxA = fmaxf(mxA, __shfl_xor_sync(0xffffffffu, mxA, 2));
        mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 1)), mxB = fmaxf(mxB, __shfl_xor_sync(0xffffffffu, mxB, 2));
        const float nA = fmaxf(mA, mxA), nB = fmaxf(mB, mxB);
        const float cA = mA == -INFINITY ? 0.0f : expf(mA - nA), cB = mB == -INFINITY ? 0.0f : expf(mB - nB);
        float sA = 0.0f, sB = 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float x = sc[nt][e];
                const float pv = x == -INFINITY ? 0.0f : expf(x - (e < 2 ? nA : nB));
                sc[nt][e] = pv;
                if (e < 2) sA += pv;
                else sB += pv;
            }
        sA += __shfl_xor_sync(0xffffffffu, sA, 1), sA += __shfl_xor_sync(0xffffffffu, sA, 2);
        sB += __shfl_xor_sync(0xffffffffu, sB, 1), sB += __shfl_xor_sync(0xffffffffu, sB, 2);
        lA = lA * cA + sA, lB = lB * cB + sB, mA = nA, mB = nB;
#pragma unroll
        for (int d = 0; d < ND; d++) o[d][0] *= cA, o[d][1] *= cA, o[d][2] *= cB, o[d][3] *= cB;
        /* O += P V, 16 cells per step; P's A fragment is two S tiles (Q8: p hi x v hi, p lo x v hi, p hi x v lo) */
#pragma unroll
        for (int kc = 0; kc < TK / 16; kc++) {
            uint32_t ph[4], pl[4];
            pack_split(sc[2 * kc][0], sc[2 * kc][1], ph[0], pl[0]);
            pack_split(sc[2 * kc][2], sc[2 * kc][3], ph[1], pl[1]);
            pack_split(sc[2 * kc + 1][0], sc[2 * kc + 1][1], ph[2], pl[2]);
            pack_split(sc[2 * kc + 1][2], sc[2 * kc + 1][3], ph[3], pl[3]);
            const int v0 = (16 * kc + 2 * cq) * LD + gq;
#pragma unroll
            for (int d = 0; d < ND; d++) {
                uint32_t b0, b1;
                v_frag(vs + v0 + 8 * d, LD, b0, b1);
                ptx_mma_16816(o[d], ph, b0, b1);
                ptx_mma_16816(o[d], pl, b0, b1);
                if constexpr (Q8) {
                    v_frag(vl + v0 + 8 * d, LD, b0, b1);
                    ptx_mma_16816(o[d], ph, b0, b1);
                }
            }
        }
        __syncthreads(); /* ks and vs are refilled by the next tile */
    }

    const float iA = lA > 0.0f ? 1.0f / lA : 0.0f, iB = lB > 0.0f ? 1.0f / lB : 0.0f;
    if (a.rot_v) { /* block-uniform: this warp's 16 rows staged as f32 over the q tiles (no longer read: the
                    * loop's last barrier), rotated by the warp in rot_v chunks, then written */
        float *os = smem + 16 * warp * D;
#pragma unroll
        for (int d = 0; d < ND; d++) {
            os[gq * D + 8 * d + 2 * cq] = o[d][0] * iA, os[gq * D + 8 * d + 2 * cq + 1] = o[d][1] * iA;
            os[(gq + 8) * D + 8 * d + 2 * cq] = o[d][2] * iB, os[(gq + 8) * D + 8 * d + 2 * cq + 1] = o[d][3] * iB;
        }
        __syncwarp();
        for (int c = 0; c < 16 * D / a.rot_v; c++) warp_hadamard(os + c * a.rot_v, a.rot_v, lane);
        for (int i = lane; i < 16 * D; i += WARP_SIZE) {
            const int r = 16 * warp + i / D;
            if (last_s[r] < 0) continue; /* no row here */
            const int t = t0 + r / p.hb, h = g * G + h0 + r % p.hb;
            a.out[(int64_t)t * a.out_stride + (int64_t)h * D + i % D] = os[i];
        }
        return;
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? rB : rA;
        if ((half ? lastB : lastA) < 0) continue; /* no row here */
        const int t = t0 + r / p.hb, h = g * G + h0 + r % p.hb;
        float *out = a.out + (int64_t)t * a.out_stride + (int64_t)h * D;
        const float inv = half ? iB : iA;
#pragma unroll
        for (int d = 0; d < ND; d++) {
            out[8 * d + 2 * cq] = o[d][2 * half] * inv;
            out[8 * d + 2 * cq + 1] = o[d][2 * half + 1] * inv;
        }
    }
}

template <int D, bool Q8>
static cudaError_t attn_mma_launch(const struct attn_args *a, cudaStream_t s) {
    const int G = a->n_head / a->n_head_kv;
    struct attn_plan p;
    p.hb = min(G, (int)MMA_ROWS);
    p.bt = max(1, min(MMA_ROWS / p.hb, a->n_tokens));
    p.tk = mma_shape<D, Q8>::TK, p.n_split = 1;
    if ((a->n_tokens + p.bt - 1) / p.bt > 65535) return cudaErrorInvalidValue;
    const size_t smem = mma_shape<D, Q8>::SMEM;
    if (smem > 48 * 1024) { /* an attribute of the current device's function, not a stream operation */
        const cudaError_t e =
            cudaFuncSetAttribute(attn_mma_kernel<D, Q8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    const dim3 grid((unsigned)(a->n_head_kv * ((G + p.hb - 1) / p.hb)), (unsigned)((a->n_tokens + p.bt - 1) / p.bt));
    launch_kernel(attn_mma_kernel<D, Q8>, grid, MMA_THREADS, smem, s, *a, p);
    return cudaGetLastError();
}

template <int DPT, bool Q8>
static cudaError_t attn_launch(const struct attn_args *a, const struct attn_plan &p, cudaStream_t s) {
    constexpr int RMAX = ATTN_ROWS / DPT;
    const int G = a->n_head / a->n_head_kv, D = a->head_dim;
    const dim3 grid((unsigned)(a->n_head_kv * ((G + p.hb - 1) / p.hb)), (unsigned)((a->n_tokens + p.bt - 1) / p.bt),
                    (unsigned)p.n_split);
    const size_t smem = sizeof(float) * (size_t)(attn_round4(p.hb * p.bt * D) + attn_round4(p.tk * (D + 1)) +
                                                 p.tk * RMAX + 4 * RMAX) + sizeof(uint16_t) * (size_t)(p.tk * D);
    launch_kernel(attn_kernel<DPT, Q8>, grid, ATTN_THREADS, smem, s, *a, p);
    if (p.n_split > 1) launch_kernel(attn_merge, (unsigned)(a->n_tokens * a->n_head), ATTN_THREADS, 0, s, *a, p.n_split);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_attn(const struct attn_args *a, cudaStream_t s) {
    if (!a->q || !a->k || !a->v || !a->out || !a->pos || a->n_tokens < 0 || a->n_head_kv < 1 || a->n_head < 1 ||
        a->n_head % a->n_head_kv || a->head_dim < 1 || a->head_dim > ATTN_MAX_D || a->n_kv < 1)
        return cudaErrorInvalidValue;
    if (a->variant < ATTN_AUTO || a->variant > ATTN_MMA) return cudaErrorInvalidValue;
    const bool q8 = a->kv_type == INFER_TYPE_Q8_0;
    if (a->kv_type != INFER_TYPE_F16 && !q8) return cudaErrorInvalidValue;
    if (!kv_rot_valid(a->rot_k, a->head_dim) || !kv_rot_valid(a->rot_v, a->head_dim) || (!q8 && (a->rot_k || a->rot_v)))
        return cudaErrorInvalidValue;
    if (q8 && (a->head_dim % QK8_0 || a->kv_stride % QK8_0)) return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaGetLastError();
    if ((int64_t)a->n_tokens * a->n_head > 2147483647) return cudaErrorInvalidValue;
    const int32_t variant = a->variant == ATTN_AUTO ? attn_auto_variant(a) : a->variant;
    if (variant == ATTN_MMA) { /* f16 cells: 4-byte K/V loads, so even strides and offsets */
        if (!q8 && (a->kv_stride % 2 || ((uintptr_t)a->k | (uintptr_t)a->v) % 4)) return cudaErrorInvalidValue;
        switch (a->head_dim) {
        case 64: return q8 ? attn_mma_launch<64, true>(a, s) : attn_mma_launch<64, false>(a, s);
        case 128: return q8 ? attn_mma_launch<128, true>(a, s) : attn_mma_launch<128, false>(a, s);
        case 256: return q8 ? attn_mma_launch<256, true>(a, s) : attn_mma_launch<256, false>(a, s);
        default: return cudaErrorInvalidValue;
        }
    }
    const int D = a->head_dim, G = a->n_head / a->n_head_kv;
    const int dpt = D <= 128 ? 1 : D <= 256 ? 2 : 4;
    const int rcap = min(ATTN_ROWS / dpt, ATTN_TILE_FLOATS / D);
    struct attn_plan p;
    p.hb = min(G, rcap);
    p.bt = max(1, min(rcap / p.hb, a->n_tokens));
    p.tk = 64;
    while (p.tk > 8 && p.tk * (D + 1) > ATTN_TILE_FLOATS + 64) p.tk /= 2;
    p.n_split = a->scratch ? attn_splits(a) : 1;
    if ((a->n_tokens + p.bt - 1) / p.bt > 65535) return cudaErrorInvalidValue;
    switch (dpt) {
    case 1: return q8 ? attn_launch<1, true>(a, p, s) : attn_launch<1, false>(a, p, s);
    case 2: return q8 ? attn_launch<2, true>(a, p, s) : attn_launch<2, false>(a, p, s);
    default: return q8 ? attn_launch<4, true>(a, p, s) : attn_launch<4, false>(a, p, s);
    }
}
