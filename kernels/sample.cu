/* sample.cu: one token per row of logits on the device, lib/sampler.c's chain (kernels.h sample_args),
 * so that decoding copies back one int instead of a row of n_vocab floats.
 *
 * One block of 1024 threads per row (large rows: sliced over many blocks, see the end of this comment):
 *   1. the row is copied to scratch (NaN -> -inf) and the row's penalties applied there (the input stays
 *      untouched: infer_logits may still want it); a block argmax (ties: lowest id) gives max and the
 *      greedy token.
 *   2. candidates: with top-k on and k <= SAMPLE_MAX_CAND exactly the top k; otherwise the top
 *      SAMPLE_MAX_CAND ("truncated"). The k-th candidate is found by a radix select on order-preserving
 *      keys (4 passes of 8 bits, shared histogram), then the candidates are compacted in id order (tiles
 *      of 1024, ballot prefix sums; among keys equal to the k-th the lowest ids are kept) and sorted
 *      (bitonic, logit desc, id asc) into shared memory. Without top-k and top-p (min-p alone or
 *      nothing) the host keeps id order, so the survivors (logit >= min_logit) are compacted in id order
 *      instead, and the row is refused if more than SAMPLE_MAX_CAND survive.
 *   3. top-p's normaliser z: the host sums expf(l - max) over the top-k set in its order (sorted with
 *      top-k, by id without). When that set is in shared memory one thread sums it in the same order;
 *      a truncated set (top-k off or above SAMPLE_MAX_CAND, top_p < 1) is summed by the whole block as a
 *      tree, which may round differently (see "exactness").
 *   4. min-p (a prefix of the sorted candidates), top-p (one thread walks the prefix in float exactly as
 *      the host does), temperature, and the draw: exp in double into shared memory, one thread sums and
 *      walks them in the host's order. A truncated set whose cut does not fall inside the candidates
 *      (neither min-p nor top-p stops before the last one) is refused: out = SAMPLE_REFUSED.
 * Exactness: every float step is the host's operation on the same values in the same order
 * (__fmul_rn / __fadd_rn where nvcc could fuse; division is IEEE; log(min_p) is taken on the host), except
 * (a) CUDA's expf / exp may differ from glibc's by an ulp, and (b) the tree-summed z of (3). Both can
 * only move a decision that lies within a few ulps of a boundary: top-p's cumulative sum against top_p,
 * or u * total against a running sum. Everywhere else the token is the host's.
 * Limits: with top-k on and k <= SAMPLE_MAX_CAND (the default chain: 40) a row is never refused; without
 * it a row is refused when more than SAMPLE_MAX_CAND tokens survive min-p / are needed to reach top_p
 * (flat rows: e.g. uniform logits in [-10, 10] over 32000 tokens at top-p 0.9; peaked LLM rows pass).
 * Penalty tokens are not range-checked on the device (the host builds them from accepted tokens).
 * Cost: the row is read once to copy, 4 times by the select, once to compact (L2-resident); the
 * sequential walks touch at most SAMPLE_MAX_CAND shared entries.
 * The list (sample_args.list, for spec_accept): step 4's survivors, their ids and s.w / total, written by the whole
 * block after the draw, so it is the distribution the token was drawn from, in the order it was drawn in.
 * Large rows (n_vocab >= 2 SAMPLE_SLICE: 248320 is 61 slices) that are greedy or cut by a top-k within
 * SAMPLE_MAX_CAND (the default chain) do that work on many blocks instead of one: each slice of 4096 its copy,
 * argmax and own top k, then one block per row merges the slices' lists (sample_slice_kernel,
 * sample_merge_kernel below; same candidates, same token). Other chains keep one block per row.
 */
#include <limits.h>
#include <math.h>

#include "common.cuh"

enum { SAMPLE_THREADS = 1024, SAMPLE_WARPS = SAMPLE_THREADS / WARP_SIZE };

struct sample_cand {
    float l;
    int32_t id;
};

struct sample_smem {
    sample_cand cand[SAMPLE_MAX_CAND];
    float e[SAMPLE_MAX_CAND];  /* expf(l - max) of cand */
    double w[SAMPLE_MAX_CAND]; /* the draw's weights */
    uint32_t hist[256];
    int32_t wg[SAMPLE_WARPS], we[SAMPLE_WARPS];
    float rf[SAMPLE_WARPS];
    int32_t ri[SAMPLE_WARPS];
    /* broadcasts */
    float bf;
    double bd;
    int32_t bi, sel_rem, n_cut, refused;
    uint32_t sel_prefix;
};

/* Order-preserving key of a non-NaN float (-0 as +0, which compares equal): larger float, larger key. */
static __device__ __forceinline__ uint32_t sample_key(float x) {
    const uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static __device__ __forceinline__ float sample_unkey(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
/* The chain's total order: logit descending, then id ascending. */
static __device__ __forceinline__ bool sample_before(float la, int32_t ia, float lb, int32_t ib) {
    return la > lb || (la == lb && ia < ib);
}

/* Row r's list (sample_args.list) when it has a single survivor: a greedy row, every logit -inf. */
static __device__ void sample_list_one(const struct sample_args &a, int32_t r, int32_t id, float l) {
    if (a.list && threadIdx.x == 0) a.list[r].n = 1, a.list[r].id[0] = id, a.list[r].p[0] = 1.0, a.list[r].l[0] = l;
}

static __device__ float sample_block_sum(float x, sample_smem &s) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    x = warp_sum(x);
    if (lane == 0) s.rf[warp] = x;
    __syncthreads();
    if (warp == 0) {
        x = warp_sum(lane < SAMPLE_WARPS ? s.rf[lane] : 0.0f);
        if (lane == 0) s.bf = x;
    }
    __syncthreads();
    x = s.bf;
    __syncthreads();
    return x;
}

/* The first (logit, id) of the order over the block; every thread gets it. */
static __device__ void sample_block_best(float *l, int32_t *id, sample_smem &s) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    float bl = *l;
    int32_t bi = *id;
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) {
        const float ol = __shfl_xor_sync(0xffffffffu, bl, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (sample_before(ol, oi, bl, bi)) bl = ol, bi = oi;
    }
    if (lane == 0) s.rf[warp] = bl, s.ri[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < SAMPLE_WARPS; w++)
            if (sample_before(s.rf[w], s.ri[w], bl, bi)) bl = s.rf[w], bi = s.ri[w];
        s.bf = bl, s.bi = bi;
    }
    __syncthreads();
    *l = s.bf, *id = s.bi;
    __syncthreads();
}

/* Radix select: the key T of the k-th (1-based) largest key of v[0..n), and how many elements with key
 * T belong to the top k (*need). */
static __device__ void sample_select(const float *v, int32_t n, int32_t k, uint32_t *T, int32_t *need,
                                     sample_smem &s) {
    uint32_t prefix = 0, mask = 0;
    int32_t rem = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += SAMPLE_THREADS) s.hist[i] = 0;
        __syncthreads();
        for (int32_t i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
            const uint32_t key = sample_key(v[i]);
            if ((key & mask) == prefix) atomicAdd(&s.hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int32_t above = 0, b = 255;
            for (; b > 0; b--) {
                if (above + (int32_t)s.hist[b] >= rem) break;
                above += (int32_t)s.hist[b];
            }
            s.sel_rem = rem - above;
            s.sel_prefix = prefix | ((uint32_t)b << shift);
        }
        __syncthreads();
        rem = s.sel_rem, prefix = s.sel_prefix, mask |= 255u << shift;
    }
    *T = prefix, *need = rem;
    __syncthreads();
}

/* Compacts, in id order, the elements with key > T and the first `need` (by id) with key == T into
 * s.cand; returns how many qualify (only the first SAMPLE_MAX_CAND are written). Element i's id is
 * ids[i] (ascending), or i when ids is NULL. */
static __device__ int32_t sample_compact(const float *v, const int32_t *ids, int32_t n, uint32_t T, int32_t need,
                                         sample_smem &s) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const unsigned lt = (1u << lane) - 1u;
    int32_t run_g = 0, run_e = 0;
    for (int32_t base = 0; base < n; base += SAMPLE_THREADS) {
        const int32_t i = base + (int32_t)threadIdx.x;
        float x = 0.0f;
        bool g = false, e = false;
        if (i < n) {
            x = v[i];
            const uint32_t key = sample_key(x);
            g = key > T, e = key == T;
        }
        const unsigned bg = __ballot_sync(0xffffffffu, g), be = __ballot_sync(0xffffffffu, e);
        if (lane == 0) s.wg[warp] = __popc(bg), s.we[warp] = __popc(be);
        __syncthreads();
        int32_t pg = 0, pe = 0, tg = 0, te = 0;
        for (int w = 0; w < SAMPLE_WARPS; w++) {
            if (w < warp) pg += s.wg[w], pe += s.we[w];
            tg += s.wg[w], te += s.we[w];
        }
        const int32_t rg = run_g + pg + __popc(bg & lt), re = run_e + pe + __popc(be & lt);
        if (g || (e && re < need)) {
            const int32_t pos = rg + min(re, need);
            if (pos < SAMPLE_MAX_CAND) s.cand[pos] = sample_cand{x, ids ? ids[i] : i};
        }
        run_g += tg, run_e += te;
        __syncthreads();
    }
    return run_g + min(run_e, need);
}

/* Sorts s.cand[0..m) into the chain's order (bitonic over the next power of two, padded). */
static __device__ void sample_sort(int32_t m, sample_smem &s) {
    int32_t p = 1;
    while (p < m) p <<= 1;
    for (int32_t i = m + (int32_t)threadIdx.x; i < p; i += SAMPLE_THREADS) s.cand[i] = sample_cand{-INFINITY, INT_MAX};
    __syncthreads();
    for (int32_t k = 2; k <= p; k <<= 1)
        for (int32_t j = k >> 1; j > 0; j >>= 1) {
            const int32_t i = (int32_t)threadIdx.x, ij = i ^ j;
            if (i < p && ij > i) {
                const sample_cand a = s.cand[i], b = s.cand[ij];
                const bool first = (i & k) == 0; /* this half ascends in the order */
                if (first ? sample_before(b.l, b.id, a.l, a.id) : sample_before(a.l, a.id, b.l, b.id))
                    s.cand[i] = b, s.cand[ij] = a;
            }
            __syncthreads();
        }
}

/* s.e[i] = expf(cand[i].l - max) for i < m. */
static __device__ void sample_exps(int32_t m, float max, sample_smem &s) {
    for (int32_t i = threadIdx.x; i < m; i += SAMPLE_THREADS) s.e[i] = expf(s.cand[i].l - max);
    __syncthreads();
}

/* The host's z: a float sum of s.e[0..m) in index order, on one thread. */
static __device__ float sample_seq_sum(int32_t m, sample_smem &s) {
    if (threadIdx.x == 0) {
        float z = 0.0f;
        for (int32_t i = 0; i < m; i++) z += s.e[i];
        s.bf = z;
    }
    __syncthreads();
    const float z = s.bf;
    __syncthreads();
    return z;
}

/* 4. min-p, top-p, temperature and the draw over the m sorted candidates in s.cand (their s.e filled),
 * z top-p's normaliser; writes row r's token. */
static __device__ void sample_finish(const struct sample_args &a, int32_t r, int32_t m, float z, bool truncated, bool topk,
                                     bool top_p, bool min_p, float min_logit, sample_smem &s) {
    if (threadIdx.x == 0) {
        int32_t k = m;
        if (min_p) {
            if (topk || top_p) { /* sorted: a prefix */
                k = 0;
                while (k < m && s.cand[k].l >= min_logit) k++;
            } /* else the compaction kept exactly those */
        }
        bool cut = k < m;
        if (top_p) {
            float cum = 0.0f;
            for (int32_t i = 0; i < k; i++) {
                cum += s.e[i] / z;
                if (cum >= a.top_p) {
                    k = i + 1, cut = true;
                    break;
                }
            }
        }
        s.n_cut = k;
        s.refused = truncated && !cut;
    }
    __syncthreads();
    const int32_t k = s.n_cut;
    if (s.refused) {
        if (threadIdx.x == 0) a.out[r] = SAMPLE_REFUSED;
        if (a.list && threadIdx.x == 0) a.list[r].n = 0;
        return;
    }
    float lmax = -INFINITY;
    for (int32_t i = threadIdx.x; i < k; i += SAMPLE_THREADS) {
        const float l = a.temp != 1.0f ? s.cand[i].l / a.temp : s.cand[i].l;
        s.cand[i].l = l;
        lmax = fmaxf(lmax, l);
    }
    int32_t dummy = 0;
    sample_block_best(&lmax, &dummy, s); /* the max of the tempered survivors (ids ignored) */
    for (int32_t i = threadIdx.x; i < k; i += SAMPLE_THREADS) s.w[i] = exp((double)s.cand[i].l - (double)lmax);
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0, cum = 0.0;
        for (int32_t i = 0; i < k; i++) total += s.w[i];
        const double u = a.u[r] * total;
        /* no survivor (min_p > 1): the host returns its first candidate, id 0 when unsorted */
        int32_t pick = k > 0 ? s.cand[k - 1].id : topk || top_p ? s.cand[0].id : 0;
        for (int32_t i = 0; i < k; i++) {
            cum += s.w[i];
            if (u < cum) {
                pick = s.cand[i].id;
                break;
            }
        }
        a.out[r] = pick;
        s.bd = total;
    }
    if (!a.list) return;
    __syncthreads();
    struct sample_list *li = a.list + r;
    for (int32_t i = threadIdx.x; i < k; i += SAMPLE_THREADS)
        li->id[i] = s.cand[i].id, li->p[i] = s.w[i] / s.bd, li->l[i] = s.cand[i].l;
    if (threadIdx.x == 0 && k == 0) /* no survivor: the host's pick alone, logit -inf */
        li->id[0] = a.out[r], li->p[0] = 1.0, li->l[0] = -INFINITY;
    if (threadIdx.x == 0) li->n = k > 0 ? k : 1;
}

/* Row r's penalties on the tokens lo..lo+len-1 of its copy v (v[0] is token lo): the pairs' tokens with their
 * counts in row r's window, then the pushed tokens no pair holds (sample_row_count, sample_push_first). The two
 * loops touch distinct tokens, each once. */
static __device__ void sample_penalise_row(const struct sample_args &a, int32_t r, float *v, int32_t lo, int32_t len) {
    for (int32_t j = threadIdx.x; j < a.n_pen; j += SAMPLE_THREADS) {
        const int32_t t = a.pen[2 * j];
        if (t < lo || t - lo >= len) continue; /* another slice's */
        const int32_t c = sample_row_count(a.pen_push, a.pen_drop, r, t, a.pen[2 * j + 1]);
        if (c > 0) v[t - lo] = sample_penalise(v[t - lo], c, a.repeat_penalty, a.frequency_penalty, a.presence_penalty);
    }
    if (!a.pen_push) return;
    for (int32_t i = threadIdx.x; i < r; i += SAMPLE_THREADS) {
        const int32_t t = a.pen_push[i];
        if (t < lo || t - lo >= len || !sample_push_first(a.pen_push, i, a.pen, a.n_pen)) continue;
        const int32_t c = sample_row_count(a.pen_push, a.pen_drop, r, t, 0);
        if (c > 0) v[t - lo] = sample_penalise(v[t - lo], c, a.repeat_penalty, a.frequency_penalty, a.presence_penalty);
    }
}

static __global__ void __launch_bounds__(SAMPLE_THREADS) sample_kernel(const __grid_constant__ struct sample_args a,
                                                                     const float log_min_p) {
    __shared__ sample_smem s;
    const int32_t n = a.n_vocab, r = blockIdx.x;
    const float *x = a.logits + (int64_t)r * a.stride;
    float *v = (float *)a.scratch + (int64_t)r * n;

    /* 1. penalised copy, argmax */
    for (int32_t i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
        const float f = x[i];
        v[i] = isnan(f) ? -INFINITY : f;
    }
    __syncthreads();
    sample_penalise_row(a, r, v, 0, n);
    __syncthreads();
    float max = -INFINITY;
    int32_t best = INT_MAX;
    for (int32_t i = threadIdx.x; i < n; i += SAMPLE_THREADS)
        if (sample_before(v[i], i, max, best)) max = v[i], best = i;
    sample_block_best(&max, &best, s);
    if (a.temp <= 0.0f || max == -INFINITY) {
        if (threadIdx.x == 0) a.out[r] = best;
        sample_list_one(a, r, best, max);
        return;
    }

    /* 2-3. candidates and z */
    const bool topk = a.top_k > 0 && a.top_k < n, top_p = a.top_p < 1.0f, min_p = a.min_p > 0.0f;
    const float min_logit = __fadd_rn(max, log_min_p);
    const int32_t kset = topk ? a.top_k : n; /* the set top-p normalises over */
    int32_t m;                                /* candidates in s.cand */
    float z = 1.0f;
    bool truncated = false;
    uint32_t T;
    int32_t need;
    if (!topk && !top_p) { /* id order, min-p alone (or nothing: then n <= SAMPLE_MAX_CAND, the launcher checked) */
        m = sample_compact(v, NULL, n, min_p ? sample_key(min_logit) : 0u, INT_MAX, s);
        if (m > SAMPLE_MAX_CAND) {
            if (threadIdx.x == 0) a.out[r] = SAMPLE_REFUSED;
            if (a.list && threadIdx.x == 0) a.list[r].n = 0;
            return;
        }
    } else {
        truncated = kset > SAMPLE_MAX_CAND;
        m = truncated ? SAMPLE_MAX_CAND : kset;
        if (truncated && top_p) { /* z over the whole set, as a tree */
            float part = 0.0f;
            if (topk) {
                sample_select(v, n, kset, &T, &need, s);
                for (int32_t i = threadIdx.x; i < n; i += SAMPLE_THREADS)
                    if (sample_key(v[i]) > T) part += expf(v[i] - max);
                if (threadIdx.x == 0) part += (float)need * expf(sample_unkey(T) - max);
            } else {
                for (int32_t i = threadIdx.x; i < n; i += SAMPLE_THREADS) part += expf(v[i] - max);
            }
            z = sample_block_sum(part, s);
        }
        sample_select(v, n, m, &T, &need, s);
        sample_compact(v, NULL, n, T, need, s);
        if (!truncated && !topk && top_p) { /* the whole row: the host sums it by id, before sorting */
            sample_exps(m, max, s);
            z = sample_seq_sum(m, s);
        }
        sample_sort(m, s);
        sample_exps(m, max, s);
        if (!truncated && topk) z = sample_seq_sum(m, s);
    }

    sample_finish(a, r, m, z, truncated, topk, top_p, min_p, min_logit, s);
}

/* ---- one row over many blocks (large vocabularies: greedy, and top-k within SAMPLE_MAX_CAND) ----
 * A row of n >= 2 SAMPLE_SLICE logits is cut into S slices of SAMPLE_SLICE; sample_slice_kernel (grid S x
 * rows) copies and penalises its slice, takes its argmax and, when the chain draws, the slice's own top k in
 * id order (the select and compaction above on the slice). A token of the row's top k is in its slice's top k
 * (whatever ranks before it in its slice ranks before it in the row), so the slices' lists, concatenated in
 * slice order (id order), hold the row's top k and keep its ties. sample_merge_kernel (a block per row) takes
 * the best of the slices' argmaxes (ties: lowest id), then selects and compacts the k from that union and runs
 * the single-block kernel's steps 2-4 on them: the same candidates, sums and draw, so the same token.
 * Per row the scratch's second half (n floats after the rows' penalised copies) holds S headers (max, argmax,
 * count, pad) and S * k candidate slots, 4 S + 2 S k <= n words; the union (S * k logits, then their ids) goes
 * to the row's penalised copy, which the merge no longer reads. */
enum { SAMPLE_SLICE = 4096 };

struct sample_slices {
    int32_t n_slices;
    int32_t k; /* candidates per slice; 0: greedy */
};

static __device__ __forceinline__ int32_t *sample_row_area(const struct sample_args &a, int32_t r) {
    return (int32_t *)a.scratch + (int64_t)a.n_rows * a.n_vocab + (int64_t)r * a.n_vocab;
}

static __global__ void __launch_bounds__(SAMPLE_THREADS) sample_slice_kernel(const __grid_constant__ struct sample_args a,
                                                                           const struct sample_slices p) {
    __shared__ sample_smem s;
    const int32_t n = a.n_vocab, r = blockIdx.y, i0 = blockIdx.x * SAMPLE_SLICE;
    const int32_t len = min(SAMPLE_SLICE, n - i0);
    const float *x = a.logits + (int64_t)r * a.stride + i0;
    float *v = (float *)a.scratch + (int64_t)r * n + i0;
    int32_t *area = sample_row_area(a, r), *hdr = area + 4 * blockIdx.x;
    for (int32_t i = threadIdx.x; i < len; i += SAMPLE_THREADS) {
        const float f = x[i];
        v[i] = isnan(f) ? -INFINITY : f;
    }
    __syncthreads();
    sample_penalise_row(a, r, v, i0, len);
    __syncthreads();
    float max = -INFINITY;
    int32_t best = INT_MAX;
    for (int32_t i = threadIdx.x; i < len; i += SAMPLE_THREADS)
        if (sample_before(v[i], i0 + i, max, best)) max = v[i], best = i0 + i;
    sample_block_best(&max, &best, s);
    const int32_t kk = min(p.k, len);
    if (threadIdx.x == 0) hdr[0] = __float_as_int(max), hdr[1] = best, hdr[2] = kk;
    if (kk == 0) return;
    uint32_t T;
    int32_t need;
    sample_select(v, len, kk, &T, &need, s);
    sample_compact(v, NULL, len, T, need, s);
    __syncthreads();
    sample_cand *slot = (sample_cand *)(area + 4 * p.n_slices) + (int64_t)blockIdx.x * p.k;
    for (int32_t i = threadIdx.x; i < kk; i += SAMPLE_THREADS) slot[i] = sample_cand{s.cand[i].l, i0 + s.cand[i].id};
}

static __global__ void __launch_bounds__(SAMPLE_THREADS) sample_merge_kernel(const __grid_constant__ struct sample_args a,
                                                                           const struct sample_slices p,
                                                                           const float log_min_p) {
    __shared__ sample_smem s;
    __shared__ int32_t at[SAMPLE_THREADS + 1]; /* where each slice's list starts in the union */
    const int32_t r = blockIdx.x, S = p.n_slices;
    int32_t *area = sample_row_area(a, r);
    float max = -INFINITY;
    int32_t best = INT_MAX;
    for (int32_t i = threadIdx.x; i < S; i += SAMPLE_THREADS) {
        const float l = __int_as_float(area[4 * i]);
        if (sample_before(l, area[4 * i + 1], max, best)) max = l, best = area[4 * i + 1];
    }
    sample_block_best(&max, &best, s);
    if (a.temp <= 0.0f || max == -INFINITY) {
        if (threadIdx.x == 0) a.out[r] = best;
        sample_list_one(a, r, best, max);
        return;
    }
    if (threadIdx.x == 0) {
        at[0] = 0;
        for (int32_t i = 0; i < S; i++) at[i + 1] = at[i] + area[4 * i + 2];
    }
    __syncthreads();
    const int32_t U = at[S];
    const sample_cand *slot = (const sample_cand *)(area + 4 * S);
    float *uv = (float *)a.scratch + (int64_t)r * a.n_vocab;
    int32_t *uid = (int32_t *)uv + S * p.k;
    for (int32_t i = 0; i < S; i++) /* union: slice i's list at at[i] */
        for (int32_t j = threadIdx.x; j < at[i + 1] - at[i]; j += SAMPLE_THREADS) {
            const sample_cand c = slot[(int64_t)i * p.k + j];
            uv[at[i] + j] = c.l, uid[at[i] + j] = c.id;
        }
    __syncthreads();
    /* steps 2-3 of sample_kernel for top-k within SAMPLE_MAX_CAND (never truncated), on the union */
    const bool top_p = a.top_p < 1.0f, min_p = a.min_p > 0.0f;
    const float min_logit = __fadd_rn(max, log_min_p);
    uint32_t T;
    int32_t need;
    sample_select(uv, U, p.k, &T, &need, s);
    sample_compact(uv, uid, U, T, need, s);
    sample_sort(p.k, s);
    sample_exps(p.k, max, s);
    const float z = sample_seq_sum(p.k, s);
    sample_finish(a, r, p.k, z, false, true, top_p, min_p, min_logit, s);
}

/* How many slices a row takes (0: one block, sample_kernel): large rows that are greedy or cut by a top-k the
 * candidates hold, when the slices' lists fit the scratch's second half. */
static struct sample_slices sample_plan(const struct sample_args *a) {
    struct sample_slices p = {0, 0};
    const int32_t S = (a->n_vocab + SAMPLE_SLICE - 1) / SAMPLE_SLICE;
    if (a->n_vocab < 2 * SAMPLE_SLICE || S > SAMPLE_THREADS) return p;
    const int32_t k = a->temp > 0.0f ? a->top_k : 0;
    if (a->temp > 0.0f && (a->top_k <= 0 || a->top_k > SAMPLE_MAX_CAND)) return p;
    if ((int64_t)4 * S + (int64_t)2 * S * k > a->n_vocab) return p;
    p.n_slices = S, p.k = k;
    return p;
}

cudaError_t cuda_sample(const struct sample_args *a, cudaStream_t s) {
    if (!a->logits || !a->out || !a->scratch || a->n_rows < 0 || a->n_vocab < 1 || a->stride < a->n_vocab ||
        a->n_pen < 0 || (a->n_pen && !a->pen) || (a->temp > 0.0f && !a->u) || (a->pen_push && !a->pen_drop))
        return cudaErrorInvalidValue;
    if (a->n_rows == 0) return cudaSuccess;
    /* nothing could cut a set larger than the candidates: the host samples */
    const bool small_k = a->top_k > 0 && a->top_k <= SAMPLE_MAX_CAND;
    if (a->temp > 0.0f && a->n_vocab > SAMPLE_MAX_CAND && !small_k && !(a->top_p < 1.0f) && !(a->min_p > 0.0f))
        return cudaErrorInvalidValue;
    if (a->list && a->temp > 0.0f && a->n_vocab > SAMPLE_MAX_CAND && !small_k) /* as the CPU twin: lists need a cut */
        return cudaErrorInvalidValue;
    const float log_min_p = a->min_p > 0.0f ? logf(a->min_p) : 0.0f; /* host libm: lib/sampler.c's bits */
    const struct sample_slices p = sample_plan(a);
    if (p.n_slices == 0) {
        launch_kernel(sample_kernel, a->n_rows, SAMPLE_THREADS, 0, s, *a, log_min_p);
        return cudaGetLastError();
    }
    if (a->n_rows > 65535) return cudaErrorInvalidValue; /* grid y */
    launch_kernel(sample_slice_kernel, dim3((unsigned)p.n_slices, (unsigned)a->n_rows), SAMPLE_THREADS, 0, s, *a, p);
    launch_kernel(sample_merge_kernel, a->n_rows, SAMPLE_THREADS, 0, s, *a, p, log_min_p);
    return cudaGetLastError();
}
