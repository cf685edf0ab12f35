/* moe_mm.cu: the expert FFN of a prefill batch as grouped GEMMs on tensor cores (moe_ffn_args; the
 * per-pair kernels of moe.cu serve decode and verification batches; CPU twin lib/cpu/moe.c).
 *
 * A batch of T tokens, each routed to k experts, is P = T k (token, expert) pairs. moe.cu reads an
 * expert's matrices once per pair; here each expert's matrices are read once per tile of up to 64 of its
 * pairs, and the products run on tensor cores through mm_tile.cuh (the dense prefill GEMM's tile):
 *   1. moe_plan (one block, thread e for expert e): the pairs sorted by expert, stably (pair order inside
 *      an expert, so the plan is the same in every thread order), and the tile list: per expert with c
 *      pairs, ceil(c / 64) tiles of (expert, first sorted pair, pairs); the count goes to device memory.
 *      Each thread scans the ids twice (count, then place) from a shared copy, chunks of 1024: P * n_expert
 *      comparisons, broadcast reads; ids out of range are left out (the combine makes their token NaN,
 *      as moe.cu does).
 *   2. moe_mm_gate_up: grid (n_ff / 64 row tiles, moe_grouped_max_tiles), a block per (row tile, pair tile),
 *      blocks past the tile count return at once (the grid is fixed, so a graph can hold it): the expert's
 *      gate and up tiles (fill_w) against the pairs' token rows of x gathered to f16, two accumulator sets,
 *      h = silu(g) * u as moe.cu computes it, stored at the pair's row of h (the per-pair layout). Each
 *      gathered row is first scaled by a power of two (row_shift: its largest |value| into [2^13, 2^14),
 *      one warp per row over the whole row), and the sums scaled back exactly: f16's range then never
 *      clips a row (h does pass 65504), nor do its subnormals cut small rows.
 *   3. moe_mm_down: the same over n_embd row tiles, the pairs' h rows gathered to f16, each pair's down
 *      projection stored at its row of yp.
 *   4. moe_combine: y[t][i] = sum over k in top-k order of w[t][k] yp[t k + k][i] (moe.cu's order).
 * Accuracy: x, h (each row scaled as above) and the weights are rounded to f16 as in mm.cu (relative
 * error ~2^-11 per product, f32 sums): test-ops holds it to 2e-3 of max |ref| (measured 3e-4 .. 7e-4). Bytes: every expert's three matrices once per 64 of its pairs;
 * x, h and yp once each way. Nothing allocates or syncs (graph-capturable).
 */
extern "C" { /* status.h has no C++ guard; included first so quant.h's copy is a no-op */
#include "status.h"
}
#include "mm_tile.cuh"

enum { PLAN_THREADS = 512, PLAN_CHUNK = 1024, COMBINE_THREADS = 256 };
static_assert(PLAN_THREADS >= 512, "one plan thread per expert: moe.cu routes at most 512 experts");

/* Where the plan lives in scratch (moe_grouped_scratch_floats's layout). */
struct moe_plan {
    float *h;      /* (P, n_ff) */
    float *yp;     /* (P, n_embd) */
    int32_t *sorted; /* (P) pair indices, by expert */
    int32_t *tiles;  /* (max_tiles, 3): expert, first sorted index, pairs */
    int32_t *n_tiles;
};

static __global__ void __launch_bounds__(PLAN_THREADS) moe_plan_kernel(const __grid_constant__ struct moe_ffn_args a,
                                                                    const struct moe_plan p) {
    __shared__ int32_t chunk[PLAN_CHUNK];
    __shared__ int32_t count[PLAN_THREADS], first[PLAN_THREADS], tile0[PLAN_THREADS];
    const int e = threadIdx.x;
    const int64_t pairs = (int64_t)a.n_tokens * a.n_expert_used;
    int32_t c = 0;
    for (int64_t c0 = 0; c0 < pairs; c0 += PLAN_CHUNK) {
        const int n = (int)(pairs - c0 < (int64_t)PLAN_CHUNK ? pairs - c0 : (int64_t)PLAN_CHUNK);
        __syncthreads(); /* the previous chunk is read */
        for (int i = e; i < n; i += PLAN_THREADS) chunk[i] = a.ids[c0 + i];
        __syncthreads();
        if (e < a.n_expert) /* an id out of range matches no thread */
            for (int i = 0; i < n; i++) c += chunk[i] == e;
    }
    count[e] = c;
    __syncthreads();
    if (e == 0) { /* 512 sums: one thread keeps it simple and ordered */
        int32_t f = 0, t = 0;
        for (int x = 0; x < PLAN_THREADS; x++) {
            first[x] = f, tile0[x] = t;
            f += count[x];
            t += (count[x] + MOE_TILE_PAIRS - 1) / MOE_TILE_PAIRS;
        }
        *p.n_tiles = t;
    }
    __syncthreads();
    for (int32_t i = 0; i * MOE_TILE_PAIRS < c; i++) {
        int32_t *tl = p.tiles + 3 * (tile0[e] + i);
        tl[0] = e, tl[1] = first[e] + i * MOE_TILE_PAIRS;
        tl[2] = c - i * MOE_TILE_PAIRS < MOE_TILE_PAIRS ? c - i * MOE_TILE_PAIRS : MOE_TILE_PAIRS;
    }
    int32_t at = first[e];
    for (int64_t c0 = 0; c0 < pairs; c0 += PLAN_CHUNK) {
        const int n = (int)(pairs - c0 < (int64_t)PLAN_CHUNK ? pairs - c0 : (int64_t)PLAN_CHUNK);
        __syncthreads();
        for (int i = e; i < n; i += PLAN_THREADS) chunk[i] = a.ids[c0 + i];
        __syncthreads();
        if (e < a.n_expert)
            for (int i = 0; i < n; i++)
                if (chunk[i] == e) p.sorted[at++] = (int32_t)(c0 + i);
    }
}

/* The power of two that brings a row's largest |value| m into [2^13, 2^14) (1 for a zero or non-finite
 * m, clamped to 2^+-100): f16 then keeps every row in range (h reaches far past 65504 in some layers) and
 * its small values out of f16's subnormals; the products are exact and the sums f32, so scaling the
 * output back by the inverse power is exact too. */
static MM_HD int row_shift(float m) {
    if (!(m > 0.0f) || !(m <= 3.4e38f)) return 0;
    int ex;
    (void)frexpf(m, &ex); /* m < 2^ex */
    const int sh = 14 - ex;
    return sh > 100 ? 100 : sh < -100 ? -100 : sh;
}

/* The tile's pairs' rows src[pair / div] (n_in floats each, rows n_in apart), columns k0.., each times its
 * scale, as an MM_BN x MM_BK f16 tile s[slot][k]; zeros past the tile's pairs and past n_in. */
static MM_HD void fill_rows(const float *src, const int32_t *pair, const float *scale, int n_pairs, int div, int64_t n_in,
                            int64_t k0, int tid, uint16_t *s) {
    for (int i = tid; i < MM_BN * MM_BK / 2; i += MM_THREADS) {
        const int n = i / (MM_BK / 2), kp = i % (MM_BK / 2);
        const int64_t c = k0 + 2 * kp;
        float v0 = 0.0f, v1 = 0.0f;
        if (n < n_pairs) {
            const float *r = src + (int64_t)(pair[n] / div) * n_in;
            if (c < n_in) v0 = r[c] * scale[n];
            if (c + 1 < n_in) v1 = r[c + 1] * scale[n];
        }
        *(uint32_t *)(s + n * MM_LDK + 2 * kp) = pack_h2(v0, v1);
    }
}

/* One block: rows m0.. of the expert's matrix (w, and w2 when GATED) against the tile's pairs; out[pair][row]
 * = acc (or silu(acc) * acc2). */
template <int T, bool GATED>
static __device__ __forceinline__ void moe_tile(const uint8_t *w, const uint8_t *w2, size_t rb, int64_t n_out, int64_t n_in,
                                                const float *src, int div, const int32_t *pair, int n_pairs, float *out) {
    __shared__ __align__(16) uint16_t ws[MM_BM * MM_LDK], xs[MM_BN * MM_LDK], w2s[GATED ? MM_BM * MM_LDK : 8];
    __shared__ float scale[MM_BN], unscale[MM_BN];
    const int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE, g = lane / 4, c = lane % 4;
    const int wm = warp % 2, wn = warp / 2;
    const int64_t m0 = (int64_t)blockIdx.x * MM_BM;
    __syncthreads(); /* the tile's pairs are in shared memory */
    for (int n = warp; n < MM_BN; n += MM_WARPS) { /* warp-uniform */
        float m = 0.0f;
        if (n < n_pairs) {
            const float *r = src + (int64_t)(pair[n] / div) * n_in;
            for (int64_t i = lane; i < n_in; i += WARP_SIZE) m = fmaxf(m, fabsf(r[i]));
            m = warp_max(m);
        }
        if (lane == 0) {
            const int sh = row_shift(m);
            scale[n] = ldexpf(1.0f, sh), unscale[n] = ldexpf(1.0f, -sh);
        }
    }
    float acc[2][4][4], acc2[2][4][4];
    const auto fill_pairs = [&](int64_t k0, uint16_t *s) { fill_rows(src, pair, scale, n_pairs, div, n_in, k0, tid, s); };
    mm_tile_loop<T, GATED>(w, w2, rb, n_out, n_in, m0, fill_pairs, ws, w2s, xs, acc, acc2);
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t r = m0 + 32 * wm + 16 * mt + g + (i >= 2 ? 8 : 0);
                const int n = 32 * wn + 8 * nt + 2 * c + (i & 1);
                if (r >= n_out || n >= n_pairs) continue;
                float v = acc[mt][nt][i] * unscale[n];
                if constexpr (GATED) v = v / (1.0f + expf(-v)) * (acc2[mt][nt][i] * unscale[n]); /* moe.cu's silu(g) * u */
                out[(int64_t)pair[n] * n_out + r] = v;
            }
}

/* The tile's expert and its pairs in shared memory; false for a block past the tile count (block-uniform). */
static __device__ __forceinline__ bool moe_tile_pairs(const struct moe_plan &p, int32_t pair[MOE_TILE_PAIRS], int *e,
                                                      int *n) {
    const int32_t t = (int32_t)blockIdx.y;
    if (t >= *p.n_tiles) return false;
    const int32_t *tl = p.tiles + 3 * t;
    *e = tl[0], *n = tl[2];
    for (int i = threadIdx.x; i < *n; i += MM_THREADS) pair[i] = p.sorted[tl[1] + i];
    return true; /* moe_tile's first barrier orders these writes before their reads */
}

template <int T>
static __global__ void __launch_bounds__(MM_THREADS)
    moe_mm_gate_up(const __grid_constant__ struct moe_ffn_args a, const struct moe_plan p, const size_t rb) {
    __shared__ int32_t pair[MOE_TILE_PAIRS];
    int e, n;
    if (!moe_tile_pairs(p, pair, &e, &n)) return;
    const size_t off = (size_t)e * (size_t)a.n_ff * rb;
    moe_tile<T, true>((const uint8_t *)a.gate + off, (const uint8_t *)a.up + off, rb, a.n_ff, a.n_embd, a.x,
                      a.n_expert_used, pair, n, p.h);
}

template <int T>
static __global__ void __launch_bounds__(MM_THREADS)
    moe_mm_down(const __grid_constant__ struct moe_ffn_args a, const struct moe_plan p, const size_t rb) {
    __shared__ int32_t pair[MOE_TILE_PAIRS];
    int e, n;
    if (!moe_tile_pairs(p, pair, &e, &n)) return;
    moe_tile<T, false>((const uint8_t *)a.down + (size_t)e * (size_t)a.n_embd * rb, NULL, rb, a.n_embd, a.n_ff, p.h, 1,
                       pair, n, p.yp);
}

static __global__ void __launch_bounds__(COMBINE_THREADS) moe_combine(const __grid_constant__ struct moe_ffn_args a,
                                                                    const struct moe_plan p) {
    const int64_t o = (int64_t)blockIdx.x * COMBINE_THREADS + threadIdx.x;
    if (o >= (int64_t)a.n_tokens * a.n_embd) return;
    const int64_t t = o / a.n_embd, i = o % a.n_embd;
    float y = 0.0f;
    for (int k = 0; k < a.n_expert_used; k++) {
        const int64_t pr = t * a.n_expert_used + k;
        const int e = a.ids[pr];
        if (e < 0 || e >= a.n_expert) {
            y = __int_as_float(0x7fc00000); /* an id out of range poisons the row (the CPU returns an error) */
            break;
        }
        y = a.weights[pr] * p.yp[pr * a.n_embd + i] + y;
    }
    a.y[o] = y;
}

static bool moe_mm_type_ok(int32_t type, int64_t n) {
    const struct quant_type *qt = quant_type(type);
    switch (type) {
#define MOE_MM_CASE(t) case INFER_TYPE_##t:
        MM_TYPES(MOE_MM_CASE) return qt && n > 0 && n % qt->blck == 0 && (qt->blck == 1 || n % 32 == 0);
#undef MOE_MM_CASE
    default: return false;
    }
}

extern "C" cudaError_t cuda_moe_ffn_grouped(const struct moe_ffn_args *a, cudaStream_t s) {
    if (!a->gate || !a->up || !a->down || !a->x || !a->ids || !a->weights || !a->y || !a->scratch || a->n_tokens < 0 ||
        a->n_expert < 1 || a->n_expert > PLAN_THREADS || a->n_expert_used < 1 || a->n_expert_used > a->n_expert ||
        !moe_mm_type_ok(a->type_gate_up, a->n_embd) || !moe_mm_type_ok(a->type_down, a->n_ff))
        return cudaErrorInvalidValue;
    if (a->n_tokens == 0) return cudaGetLastError();
    const int64_t pairs = (int64_t)a->n_tokens * a->n_expert_used, tiles = moe_grouped_max_tiles(pairs, a->n_expert);
    const int64_t out = (int64_t)a->n_tokens * a->n_embd;
    const int64_t gx = (a->n_ff + MM_BM - 1) / MM_BM, dx = (a->n_embd + MM_BM - 1) / MM_BM;
    if (tiles > 65535 || pairs > 2147483647 || gx > 2147483647 || dx > 2147483647 ||
        (out + COMBINE_THREADS - 1) / COMBINE_THREADS > 2147483647)
        return cudaErrorInvalidValue;
    struct moe_plan p;
    p.h = a->scratch;
    p.yp = p.h + pairs * a->n_ff;
    p.sorted = (int32_t *)(p.yp + pairs * a->n_embd);
    p.tiles = p.sorted + pairs;
    p.n_tiles = p.tiles + 3 * tiles;
    const size_t gu = quant_row_bytes(a->type_gate_up, a->n_embd), dn = quant_row_bytes(a->type_down, a->n_ff);
    launch_kernel(moe_plan_kernel, 1, PLAN_THREADS, 0, s, *a, p);
    const dim3 ggrid((unsigned)gx, (unsigned)tiles), dgrid((unsigned)dx, (unsigned)tiles);
    switch (a->type_gate_up) {
#define MOE_MM_GU(t) case INFER_TYPE_##t: launch_kernel(moe_mm_gate_up<INFER_TYPE_##t>, ggrid, MM_THREADS, 0, s, *a, p, gu); break;
        MM_TYPES(MOE_MM_GU)
#undef MOE_MM_GU
    default: return cudaErrorInvalidValue;
    }
    switch (a->type_down) {
#define MOE_MM_DN(t) case INFER_TYPE_##t: launch_kernel(moe_mm_down<INFER_TYPE_##t>, dgrid, MM_THREADS, 0, s, *a, p, dn); break;
        MM_TYPES(MOE_MM_DN)
#undef MOE_MM_DN
    default: return cudaErrorInvalidValue;
    }
    launch_kernel(moe_combine, (unsigned)((out + COMBINE_THREADS - 1) / COMBINE_THREADS), COMBINE_THREADS, 0, s, *a, p);
    return cudaGetLastError();
}
