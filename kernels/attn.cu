/* attn.cu: causal attention of f32 queries over the f16 KV cache, grouped-query heads (attn_args).
 *
 * out[t][h] = sum_j softmax_j(scale * q[t][h].k[j][g]) v[j][g],  g = h / G (G = n_head / n_head_kv),
 * j = 0..min(pos[t], n_kv-1). The softmax is the online (flash) form like lib/cpu/attn.c: per query
 * row a running max m, sum l and accumulator acc, rescaled by exp(m_old - m_new) when the max moves.
 *
 * One kernel serves decode and prefill (FlashAttention-2 style on CUDA cores, no tensor cores yet):
 * a block owns "rows" = (token, head) pairs of ONE KV group (hb heads of the group x bt tokens, at
 * most 4096 / head_dim rows and 32 / DPT, DPT = ceil(head_dim / 128)), so every K/V cell it loads
 * serves all of them: decode puts all query heads of a group in a block (K/V read once per group),
 * prefill puts up to 32 / G tokens x G heads in a block. Per tile of tk cells (tk * head_dim <= 4096):
 *   1. K tile -> shared memory as f32, rows head_dim+1 apart (odd stride: conflict-free columns);
 *   2. scores S[jj][r] = scale * q[r].k[jj], one (row, cell) item per thread, q rows in shared memory;
 *      cells past a row's pos are -inf (causal mask);
 *   3. one warp per row: tile max, new running max, p = exp(s - m), l = l * corr + sum p;
 *   4. thread tid owns dims tid + 128 i (i < DPT) of every row in registers: acc = acc * corr + sum_jj
 *      p[jj][r] v[jj][d], V read straight from global memory (coalesced over d).
 * Decode (n_tokens <= ATTN_SPLIT_TOKENS, scratch given): flash-decoding; the cells are split over
 * attn_splits() blocks per group (grid.z), each writes (m, l, acc) per row to scratch as
 * [split][token][head][2 + head_dim], and attn_merge (one block per (token, head)) combines them:
 * M = max m_s, L = sum l_s e^(m_s - M), out = sum acc_s e^(m_s - M) / L. Without scratch (or larger
 * batches) there is one split and the first kernel writes out = acc / l itself.
 * Grid: x = n_head_kv * ceil(G / hb), y = ceil(n_tokens / bt), z = splits; 128 threads.
 * Bytes per call: K and V cells up to the largest pos of each block, once per block (decode: once
 * per KV group), q and out once; split partials 2 * splits * n_tokens * n_head * (head_dim + 2) * 4.
 * note: scores and the V update run on CUDA cores from shared memory; an mma.sync (f16 x f16 -> f32)
 * version of steps 2 and 4 is the next step for prefill.
 */
#include "common.cuh"

enum { ATTN_THREADS = 128, ATTN_WARPS = ATTN_THREADS / WARP_SIZE, ATTN_ROWS = 32, ATTN_TILE_FLOATS = 4096,
       ATTN_MAX_D = 512 };

/* Launch shape, computed on the host from the args alone. */
struct attn_plan {
    int32_t hb, bt, tk;          /* heads of the group, tokens per block; cells per tile */
    int32_t n_split, split_cells;
};

static __host__ __device__ __forceinline__ int attn_round4(int n) { return (n + 3) & ~3; }

template <int DPT>
static __global__ void __launch_bounds__(ATTN_THREADS)
    attn_kernel(const __grid_constant__ struct attn_args a, const struct attn_plan p) {
    constexpr int RMAX = ATTN_ROWS / DPT;
    extern __shared__ float smem[];
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
    int jmax = -1;
    for (int r = 0; r < rows; r++) jmax = max(jmax, last_s[r]);
    const int j0 = split * p.split_cells, j1 = min(j0 + p.split_cells, jmax + 1);

    float acc[RMAX][DPT];
#pragma unroll
    for (int r = 0; r < RMAX; r++)
#pragma unroll
        for (int i = 0; i < DPT; i++) acc[r][i] = 0.0f;

    const uint16_t *kg = a.k + (int64_t)g * D, *vg = a.v + (int64_t)g * D;
    for (int jt = j0; jt < j1; jt += tk) {
        const int n = min(tk, j1 - jt);
        for (int i = tid; i < tk * D; i += ATTN_THREADS) {
            const int jj = i / D, d = i % D;
            ks[jj * (D + 1) + d] = jj < n ? blocks_f16_to_f32(kg[(int64_t)(jt + jj) * a.kv_stride + d]) : 0.0f;
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
                v[i] = d < D ? blocks_f16_to_f32(vg[(int64_t)(jt + jj) * a.kv_stride + d]) : 0.0f;
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

#pragma unroll
    for (int r = 0; r < RMAX; r++) {
        if (r >= rows) break;
        const int t = t0 + r / p.hb, hl = r % p.hb;
        if (t >= a.n_tokens || h0 + hl >= G) continue;
        const int h = g * G + h0 + hl;
        if (p.n_split > 1) {
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
}

/* One block per (token, head): merges the n_split partials of that row. */
static __global__ void __launch_bounds__(ATTN_THREADS) attn_merge(const __grid_constant__ struct attn_args a, int n_split) {
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
        o[d] = acc * inv;
    }
}

template <int DPT>
static cudaError_t attn_launch(const struct attn_args *a, const struct attn_plan &p, cudaStream_t s) {
    constexpr int RMAX = ATTN_ROWS / DPT;
    const int G = a->n_head / a->n_head_kv, D = a->head_dim;
    const dim3 grid((unsigned)(a->n_head_kv * ((G + p.hb - 1) / p.hb)), (unsigned)((a->n_tokens + p.bt - 1) / p.bt),
                    (unsigned)p.n_split);
    const size_t smem = sizeof(float) * (size_t)(attn_round4(p.hb * p.bt * D) + attn_round4(p.tk * (D + 1)) +
                                                 p.tk * RMAX + 4 * RMAX);
    attn_kernel<DPT><<<grid, ATTN_THREADS, smem, s>>>(*a, p);
    if (p.n_split > 1) attn_merge<<<(unsigned)(a->n_tokens * a->n_head), ATTN_THREADS, 0, s>>>(*a, p.n_split);
    return cudaGetLastError();
}

extern "C" cudaError_t cuda_attn(const struct attn_args *a, cudaStream_t s) {
    if (!a->q || !a->k || !a->v || !a->out || !a->pos || a->n_tokens < 0 || a->n_head_kv < 1 || a->n_head < 1 ||
        a->n_head % a->n_head_kv || a->head_dim < 1 || a->head_dim > ATTN_MAX_D || a->n_kv < 1)
        return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaGetLastError();
    if ((int64_t)a->n_tokens * a->n_head > 2147483647) return cudaErrorInvalidValue;
    const int D = a->head_dim, G = a->n_head / a->n_head_kv;
    const int dpt = D <= 128 ? 1 : D <= 256 ? 2 : 4;
    const int rcap = min(ATTN_ROWS / dpt, ATTN_TILE_FLOATS / D);
    struct attn_plan p;
    p.hb = min(G, rcap);
    p.bt = max(1, min(rcap / p.hb, a->n_tokens));
    p.tk = 64;
    while (p.tk > 8 && p.tk * (D + 1) > ATTN_TILE_FLOATS + 64) p.tk /= 2;
    p.n_split = a->scratch ? attn_splits(a) : 1;
    p.split_cells = (a->n_kv + p.n_split - 1) / p.n_split;
    if ((a->n_tokens + p.bt - 1) / p.bt > 65535) return cudaErrorInvalidValue;
    switch (dpt) {
    case 1: return attn_launch<1>(a, p, s);
    case 2: return attn_launch<2>(a, p, s);
    default: return attn_launch<4>(a, p, s);
    }
}
