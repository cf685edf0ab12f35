/* gdn: the gated delta rule of a Gated DeltaNet layer (contract in kernels.h gdn_args, math in
 * docs/qwen35.md §4.4 and §5).
 *
 * Recurrent form, llama.cpp's CPU order of operations (ggml_compute_forward_gated_delta_net_one_chunk;
 * the dot products use eight partial sums like ggml's SIMD vec_dot, not its exact lanes): per token
 * the state is scaled by expf(g), then per value column c (contiguous over the key index i, S[i][c] at
 * state[j][c][i]) d = beta (v_c - S[:,c].k), S[:,c] += k d, o_c = S[:,c].q / sqrt(d_state). A column
 * only depends on itself, so the decay, update and output are fused into one pass over each column.
 * Gates: beta = sigmoid(b), g = softplus(a + dt_bias) * ssm_a (softplus(x) = x above 20); q and k are
 * L2-normalised per token: x / sqrt(||x||^2 + eps), as the llama.cpp of our peer builds it (rms_norm with
 * eps / n, then a scale by 1/sqrt(n); upstream later moved to x / max(||x||, eps)). With the small q, k
 * of random-weight models the eps term shows at 1e-4, so the form matters for conformance.
 *
 * Chunked form (WY / UT, §5.2), chunks of GDN_CHUNK tokens, the last one partial. With gamma the cumulated
 * g inside the chunk (double: it reaches -1000 and its differences must stay exact to f32 rounding),
 * A[t][s] = beta_t (k_t.k_s) e^(gamma_t - gamma_s) (s < t), forward substitution gives
 * U = (I+A)^-1 (beta v) and W = (I+A)^-1 (beta e^gamma k). Then, per value column c of the incoming state:
 *   vn[t] = U[t][c] - W[t].S[:,c]
 *   o[t][c] = e^gamma_t q_t.S[:,c] + sum_{s<=t} (q_t.k_s) e^(gamma_t - gamma_s) vn[s]
 *   S[:,c] = e^gamma_L S[:,c] + sum_s vn[s] e^(gamma_L - gamma_s) k_s
 * Every line reads only column c, so the chunk is one pass over the state, column by column, like the
 * recurrence. With snapshots the tokens from snap_from on run recurrently (each needs its own state), so a
 * call stopped at any token t >= snap_from gives that snapshot bit for bit.
 * Work is split over value heads; each head owns its state block, so the workers never share a write.
 */
#include "cpu.h"

/* The loops are plain C the compiler vectorises; on AVX-512 machines they are compiled a second time for it
 * (gdn_head_avx512; 1.2x on a Qwen3.5-0.8B prefill, Zen 4). The sums keep their order (eight explicit partial
 * sums, no contraction under -std=c11), so both copies give the same bits. */
#define GDN_INLINE static inline __attribute__((always_inline))
#if defined(__x86_64__)
#define GDN_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma")))
#endif

enum { GDN_MAX_D = 256, GDN_CHUNK = 64 };
/* GDN_AUTO runs chunked from this many tokens on. Measured here (AMD EPYC, shared, 512 tokens, 16 heads,
 * d_state 128, best of 3, 1 thread): recurrent 144 ms, chunked 141-185 ms (2 threads: 145 / 144 ms). The
 * chunk does ~25% more flops and only ties on this CPU, but it is the form the GPU prefill will take
 * (tensor cores), so prefill runs it here too and the conformance tests check it against llama.cpp. */
enum { GDN_AUTO_CHUNKED = 64 };

/* Key head and a/b column of value head j. */
static inline int gdn_khead(const struct gdn_args *a, int j) {
    return a->grouped ? j / (a->n_vhead / a->n_group) : j % a->n_group;
}
static inline int64_t gdn_ab_idx(const struct gdn_args *a, int j) {
    int r = a->ab_group;
    return r > 0 ? (int64_t)(j / r) * 2 * r + j % r : j;
}

/* beta and g (the log decay) of token t, head j. */
GDN_INLINE void gdn_gates(const struct gdn_args *a, int64_t t, int j, float *beta, float *g) {
    int64_t o = t * a->ab_stride + gdn_ab_idx(a, j);
    float x = a->a[o] + a->dt_bias[j];
    float sp = x > 20.0f ? x : logf(1.0f + expf(x));
    *beta = 1.0f / (1.0f + expf(-a->b[o]));
    *g = sp * a->ssm_a[j];
}

GDN_INLINE void gdn_l2(const float *x, float *y, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float mean = (float)(ss / n), sc = 1.0f / sqrtf(mean + eps / (float)n), sn = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) y[i] = (x[i] * sc) * sn;
}

/* Eight partial sums (the compiler turns them into vector lanes; one running sum stays scalar). */
GDN_INLINE float gdn_dot(const float *x, const float *y, int n) {
    float p[8] = {0, 0, 0, 0, 0, 0, 0, 0}, s = 0;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) p[l] += x[i + l] * y[i + l];
    for (; i < n; i++) s += x[i] * y[i];
    return s + ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
}

GDN_INLINE void gdn_snap(const struct gdn_args *a, int64_t t, int j, const float *S) {
    if (!a->snap || t < a->snap_from) return;
    size_t dd = (size_t)a->d_state * (size_t)a->d_state;
    memcpy(a->snap + ((a->snap_pos0 + t) % a->snap_ring) * a->snap_stride + (size_t)j * dd, S, sizeof(float) * dd);
}

/* Tokens [t0, t1) of head j, token by token, on the state block S. */
GDN_INLINE void gdn_recurrent(const struct gdn_args *a, int j, int64_t t0, int64_t t1, float *S) {
    int D = a->d_state, kh = gdn_khead(a, j);
    float q[GDN_MAX_D], k[GDN_MAX_D], scale = 1.0f / sqrtf((float)D);
    for (int64_t t = t0; t < t1; t++) {
        float beta, g;
        gdn_gates(a, t, j, &beta, &g);
        float eg = expf(g);
        gdn_l2(a->q + t * a->qk_stride + (int64_t)kh * D, q, D, a->eps);
        gdn_l2(a->k + t * a->qk_stride + (int64_t)kh * D, k, D, a->eps);
        const float *v = a->v + t * a->v_stride + (int64_t)j * D;
        float *out = a->out + (t * a->n_vhead + j) * D;
        for (int c = 0; c < D; c++) {
            float *col = S + (size_t)c * D;
            for (int i = 0; i < D; i++) col[i] *= eg;
            float d = (v[c] - gdn_dot(col, k, D)) * beta;
            for (int i = 0; i < D; i++) col[i] += k[i] * d;
            out[c] = gdn_dot(col, q, D) * scale;
        }
        gdn_snap(a, t, j, S);
    }
}

/* Per-worker scratch of the chunked form: q, k (then the decayed k), U, W as (GDN_CHUNK, d_state) rows;
 * A and P as (GDN_CHUNK, GDN_CHUNK); the per-token gates. */
struct gdn_scratch {
    float *q, *k, *u, *w, *A, *P;
    float beta[GDN_CHUNK], eg[GDN_CHUNK];
};
static size_t gdn_scratch_floats(int D) { return (size_t)4 * GDN_CHUNK * D + (size_t)2 * GDN_CHUNK * GDN_CHUNK; }
static void gdn_scratch_at(struct gdn_scratch *w, float *base, int D) {
    w->q = base;
    w->k = w->q + GDN_CHUNK * D;
    w->u = w->k + GDN_CHUNK * D;
    w->w = w->u + GDN_CHUNK * D;
    w->A = w->w + GDN_CHUNK * D;
    w->P = w->A + GDN_CHUNK * GDN_CHUNK;
}


/* Tokens [t0, t0 + L) of head j, L <= GDN_CHUNK, as one chunk on the state block S. */
GDN_INLINE void gdn_chunk(const struct gdn_args *a, int j, int64_t t0, int L, float *S, struct gdn_scratch *w) {
    int D = a->d_state, kh = gdn_khead(a, j);
    double gam[GDN_CHUNK], acc = 0;
    for (int t = 0; t < L; t++) {
        float g;
        gdn_gates(a, t0 + t, j, &w->beta[t], &g);
        gam[t] = acc += g;
        w->eg[t] = (float)exp(gam[t]);
        gdn_l2(a->q + (t0 + t) * a->qk_stride + (int64_t)kh * D, w->q + t * D, D, a->eps);
        gdn_l2(a->k + (t0 + t) * a->qk_stride + (int64_t)kh * D, w->k + t * D, D, a->eps);
    }
    /* A (strictly lower) and P (lower with the diagonal) */
    for (int t = 0; t < L; t++)
        for (int s = 0; s <= t; s++) {
            float e = (float)exp(gam[t] - gam[s]);
            w->P[t * GDN_CHUNK + s] = gdn_dot(w->q + t * D, w->k + s * D, D) * e;
            if (s < t) w->A[t * GDN_CHUNK + s] = w->beta[t] * gdn_dot(w->k + t * D, w->k + s * D, D) * e;
        }
    /* U = (I+A)^-1 beta v,  W = (I+A)^-1 beta e^gamma k  (forward substitution, row by row) */
    for (int t = 0; t < L; t++) {
        const float *v = a->v + (t0 + t) * a->v_stride + (int64_t)j * D;
        float *u = w->u + t * D, *ww = w->w + t * D, bt = w->beta[t], bk = w->beta[t] * w->eg[t];
        const float *k = w->k + t * D;
        for (int i = 0; i < D; i++) {
            u[i] = bt * v[i];
            ww[i] = bk * k[i];
        }
        for (int s = 0; s < t; s++) {
            float m = w->A[t * GDN_CHUNK + s];
            const float *us = w->u + s * D, *ws = w->w + s * D;
            for (int i = 0; i < D; i++) {
                u[i] -= m * us[i];
                ww[i] -= m * ws[i];
            }
        }
    }
    /* k_s -> e^(gamma_L - gamma_s) k_s, the weights of the state update */
    for (int s = 0; s < L; s++) {
        float e = (float)exp(gam[L - 1] - gam[s]);
        for (int i = 0; i < D; i++) w->k[s * D + i] *= e;
    }
    float egL = w->eg[L - 1], scale = 1.0f / sqrtf((float)D);
    for (int c = 0; c < D; c++) {
        float *col = S + (size_t)c * D, vn[GDN_CHUNK];
        for (int t = 0; t < L; t++) {
            vn[t] = w->u[t * D + c] - gdn_dot(w->w + t * D, col, D);
            float o = w->eg[t] * gdn_dot(w->q + t * D, col, D);
            for (int s = 0; s <= t; s++) o += w->P[t * GDN_CHUNK + s] * vn[s];
            a->out[((t0 + t) * a->n_vhead + j) * D + c] = o * scale;
        }
        for (int i = 0; i < D; i++) col[i] *= egL;
        for (int s = 0; s < L; s++) {
            const float *ks = w->k + s * D;
            for (int i = 0; i < D; i++) col[i] += vn[s] * ks[i];
        }
    }
}

struct gdn_job {
    const struct gdn_args *a;
    float *scratch; /* gdn_scratch_floats(d_state) per worker */
    int chunked;
    int avx512;     /* run gdn_head_avx512 */
};

/* Head j: chunks up to token cut, then token by token. */
GDN_INLINE void gdn_head(const struct gdn_args *a, int j, int64_t cut, float *S, struct gdn_scratch *w) {
    for (int64_t t = 0; t < cut; t += GDN_CHUNK) gdn_chunk(a, j, t, (int)(cut - t < GDN_CHUNK ? cut - t : GDN_CHUNK), S, w);
    gdn_recurrent(a, j, cut, a->n_tokens, S);
}

static void gdn_head_base(const struct gdn_args *a, int j, int64_t cut, float *S, struct gdn_scratch *w) {
    gdn_head(a, j, cut, S, w);
}

#if defined(__x86_64__)
GDN_AVX512 static void gdn_head_avx512(const struct gdn_args *a, int j, int64_t cut, float *S, struct gdn_scratch *w) {
    gdn_head(a, j, cut, S, w);
}
#else
#define gdn_head_avx512 gdn_head_base
#endif

static void gdn_heads(void *ctx, int64_t j0, int64_t j1, int ith) {
    const struct gdn_job *job = ctx;
    const struct gdn_args *a = job->a;
    size_t dd = (size_t)a->d_state * (size_t)a->d_state;
    /* chunked up to the first snapshot token, recurrent from there */
    int64_t cut = !job->chunked ? 0 : a->snap && a->snap_from < a->n_tokens ? (a->snap_from > 0 ? a->snap_from : 0) : a->n_tokens;
    struct gdn_scratch w = {0};
    if (job->chunked) gdn_scratch_at(&w, job->scratch + (size_t)ith * gdn_scratch_floats(a->d_state), a->d_state);
    for (int64_t j = j0; j < j1; j++) {
        float *S = a->state + (size_t)j * dd;
        if (job->avx512) gdn_head_avx512(a, (int)j, cut, S, &w);
        else gdn_head_base(a, (int)j, cut, S, &w);
    }
}

infer_status cpu_gdn(const struct gdn_args *a, struct pool *p) {
    if (!a->q || !a->k || !a->v || !a->a || !a->b || !a->dt_bias || !a->ssm_a || !a->state || !a->out ||
        a->n_tokens < 0 || a->n_group <= 0 || a->n_vhead <= 0 || a->n_vhead % a->n_group || a->d_state <= 0 ||
        a->d_state > GDN_MAX_D || a->qk_stride < (int64_t)a->n_group * a->d_state ||
        a->v_stride < (int64_t)a->n_vhead * a->d_state || a->ab_stride < 0 || !(a->eps >= 0))
        return infer_fail(INFER_E_ARG, "cpu_gdn: n_tokens %d, heads %d/%d, d_state %d, strides %lld/%lld/%lld: expected "
                          "n_vhead a multiple of n_group, d_state 1..%d, rows at least one token wide", a->n_tokens,
                          a->n_group, a->n_vhead, a->d_state, (long long)a->qk_stride, (long long)a->v_stride,
                          (long long)a->ab_stride, GDN_MAX_D);
    if (a->ab_group < 0 || (a->ab_group > 0 && a->ab_group != a->n_vhead / a->n_group))
        return infer_fail(INFER_E_ARG, "cpu_gdn: ab_group %d: expected 0 or n_vhead / n_group = %d", a->ab_group,
                          a->n_vhead / a->n_group);
    if (a->snap && (a->snap_ring <= 0 || a->snap_pos0 < 0 ||
                    a->snap_stride < (int64_t)a->n_vhead * a->d_state * a->d_state))
        return infer_fail(INFER_E_ARG, "cpu_gdn: snapshot ring %d, pos0 %d, stride %lld: expected ring > 0, pos0 >= 0, "
                          "stride >= n_vhead*d_state^2", a->snap_ring, a->snap_pos0, (long long)a->snap_stride);
    if (a->variant < GDN_AUTO || a->variant > GDN_CHUNKED)
        return infer_fail(INFER_E_ARG, "cpu_gdn: variant %d: expected GDN_AUTO, GDN_RECURRENT or GDN_CHUNKED", a->variant);
    struct gdn_job job = {a, NULL, a->variant == GDN_CHUNKED || (a->variant == GDN_AUTO && a->n_tokens >= GDN_AUTO_CHUNKED),
                          cpu_isa_has(CPU_ISA_AVX512)};
    if (job.chunked) {
        job.scratch = xmalloc(sizeof(float) * gdn_scratch_floats(a->d_state) * (size_t)pool_threads(p));
        if (!job.scratch) return INFER_OOM("gdn chunk scratch");
    }
    pool_for(p, a->n_vhead, 1, gdn_heads, &job);
    xfree(job.scratch);
    return INFER_OK;
}
