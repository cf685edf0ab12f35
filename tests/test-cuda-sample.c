/* test-cuda-sample: cuda_sample (kernels/sample.cu) against its CPU twin cpu_sample on the same rows,
 * penalty pairs and uniforms (cpu_sample itself is checked against a reference of the chain in
 * test-sample-op). Vocab 1, 7, 1000, 1024, 1025, 32000 and 151936; logits continuous, tied, peaked,
 * with NaN / -inf, all equal; every parameter family (greedy, top-k only incl. 1 and 1024, top-p only,
 * min-p only, temperature only with a small vocabulary, the defaults, everything with penalties, top-k
 * 2000 + top-p, min_p > 1, top_p 0); 4 rows per launch with a padded stride.
 * Expected: the same token, except
 *   - SAMPLE_REFUSED, allowed only where the kernel keeps a truncated candidate set (top-k off or above
 *     SAMPLE_MAX_CAND, n_vocab > SAMPLE_MAX_CAND), and never where top-k <= SAMPLE_MAX_CAND;
 *   - a different token where the host's decision lies within rounding of a boundary (kernels/sample.cu
 *     "exactness": CUDA's expf / exp vs glibc's, and the tree-summed z of a truncated set): top-p's
 *     cumulative probability within 1e-4 + 4 e_z (relative) of top_p, e_z the relative error of the host's
 *     own float z, or u * total within 1e-9 of a running sum (not the last), all recomputed here in
 *     double. Such rows are printed, counted, and must stay under 1%.
 * The input logits must come back unchanged. The launcher refuses a set nothing can cut (no top-k <=
 * SAMPLE_MAX_CAND, top-p or min-p, n_vocab > SAMPLE_MAX_CAND) and missing buffers.
 * Without a device the test prints SKIP (no CUDA device) and exits 77. tests/emu/run-sample.sh builds
 * this file with SAMPLE_EMU against the kernel run on the CPU (a block as 1024 fibers), no GPU needed.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "device.h"
#include "kernels.h"
#include "sample_rows.h"
#include "t.h"

#ifdef SAMPLE_EMU /* tests/emu/run-sample.sh: "device" memory is host memory, the kernel runs as fibers */
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
int emu_sample(const struct sample_args *a);
#define cuda_sample(a, s) emu_sample(a)
#define cudaGetErrorString(e) ((e) ? "error" : "no error")
#define cudaMalloc(p, n) ((*(p) = malloc(n)) ? 0 : 1)
#define cudaMemcpy(d, s, n, kind) (memcpy(d, s, n), 0)
#define cudaMemset(d, v, n) (memset(d, v, n), 0)
#define cudaDeviceSynchronize() 0
#define cudaGetLastError() ((void)0)
#define cudaFree free
#define device_count(why) 1
#endif
#ifndef SAMPLE_VOCABS
#define SAMPLE_VOCABS 1, 7, 1000, 1024, 1025, 32000, 151936
#endif

#if defined(INFER_CUDA) || defined(SAMPLE_EMU)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static double urand(void) { return (double)rnd() / 4294967296.0; }

#define CK(x) T_CHECK((x) == cudaSuccess, "%s: %s", #x, cudaGetErrorString(x))

static void *dev(const void *src, size_t n) {
    void *d = NULL;
    CK(cudaMalloc(&d, n ? n : 4));
    if (src) CK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
    else CK(cudaMemset(d, 0xFF, n ? n : 4));
    return d;
}

struct dcand {
    int32_t id;
    double l;
};
static int dcand_cmp(const void *x, const void *y) {
    const struct dcand *a = x, *b = y;
    if (a->l != b->l) return a->l > b->l ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* How close the host's decisions on this row lie to a boundary, in double: the smallest relative
 * distance of top-p's cumulative probability from top_p (*mp), and of u * total from a running sum of
 * the draw other than the last (*mu); *mz is the relative error of the host's own float z (summed in its
 * order), a measure of how far another summation order may land. Penalised logits are computed as the
 * op does (sample_penalise). */
static void margins(const float *row, const struct sample_args *a, double u, double *mp, double *mu, double *mz) {
    const int32_t n = a->n_vocab;
    struct dcand *c = malloc((size_t)n * sizeof *c);
    float *v = malloc((size_t)n * sizeof *v);
    for (int32_t i = 0; i < n; i++) v[i] = isnan(row[i]) ? -INFINITY : row[i];
    for (int32_t j = 0; j < a->n_pen; j++)
        v[a->pen[2 * j]] = sample_penalise(v[a->pen[2 * j]], a->pen[2 * j + 1], a->repeat_penalty, a->frequency_penalty,
                                           a->presence_penalty);
    for (int32_t i = 0; i < n; i++) c[i].id = i, c[i].l = v[i];
    qsort(c, (size_t)n, sizeof *c, dcand_cmp);
    *mp = *mu = INFINITY;
    const double max = c[0].l;
    int32_t k = a->top_k > 0 && a->top_k < n ? a->top_k : n;
    double z = 0;
    float zf = 0;
    for (int32_t i = 0; i < k; i++) z += exp(c[i].l - max);
    if (k < n)
        for (int32_t i = 0; i < k; i++) zf += expf((float)c[i].l - (float)max);
    else
        for (int32_t i = 0; i < n; i++) zf += expf(v[i] - (float)max);
    *mz = fabs(zf - z) / z;
    if (a->min_p > 0) {
        const float min_logit = (float)max + logf(a->min_p);
        int32_t m = 0;
        while (m < k && c[m].l >= min_logit) m++;
        k = m > 0 ? m : 1;
    }
    if (a->top_p < 1) {
        double cum = 0;
        for (int32_t i = 0; i < k; i++) {
            cum += exp(c[i].l - max) / z;
            const double d = fabs(cum - a->top_p) / (a->top_p > 1e-3 ? a->top_p : 1e-3);
            if (d < *mp) *mp = d;
            if (cum >= a->top_p) {
                k = i + 1;
                break;
            }
        }
    }
    double m2 = c[0].l / a->temp, total = 0, cum = 0;
    for (int32_t i = 0; i < k; i++) total += exp(c[i].l / a->temp - m2);
    for (int32_t i = 0; i + 1 < k; i++) {
        cum += exp(c[i].l / a->temp - m2);
        const double d = fabs(u * total - cum) / total;
        if (d < *mu) *mu = d;
    }
    free(c), free(v);
}

struct stats {
    int rows, refused, near;
};

static void run_case(const char *name, struct sample_args p, int32_t n, int mode, struct stats *st) {
    enum { ROWS = 4, HIST = 64 };
    const int64_t stride = n + 5;
    float *l = malloc((size_t)(ROWS * stride) * sizeof *l);
    double u[ROWS];
    int32_t pairs[2 * HIST], want[ROWS], got[ROWS];
    for (int r = 0; r < ROWS; r++) {
        sample_fill_row(l + r * stride, n, mode, rnd);
        for (int64_t i = n; i < stride; i++) l[r * stride + i] = 1e30f; /* padding: must never be read */
        u[r] = r == 0 ? 0.0 : r == ROWS - 1 ? 1.0 - 0x1.0p-53 : urand();
    }
    int32_t np = 0;
    if (p.repeat_penalty != 1 || p.frequency_penalty != 0 || p.presence_penalty != 0) {
        int32_t *cnt = calloc((size_t)n, sizeof *cnt);
        for (int j = 0; j < HIST; j++) cnt[rnd() % (uint32_t)(n < 40 ? n : 40)]++;
        for (int32_t t = 0; t < n; t++)
            if (cnt[t]) pairs[2 * np] = t, pairs[2 * np + 1] = cnt[t], np++;
        free(cnt);
    }
    p.logits = l, p.stride = stride, p.n_rows = ROWS, p.n_vocab = n, p.pen = np ? pairs : NULL, p.n_pen = np;
    p.u = u, p.out = want;
    p.scratch = malloc(sample_scratch_bytes(ROWS, n));
    T_CHECK(cpu_sample(&p, NULL) == INFER_OK, "%s: cpu_sample: %s", name, infer_last_error());
    free(p.scratch);

    struct sample_args d = p;
    const size_t lb = (size_t)(ROWS * stride) * sizeof *l;
    d.logits = dev(l, lb);
    d.pen = np ? dev(pairs, (size_t)np * 2 * sizeof *pairs) : NULL;
    d.u = dev(u, sizeof u);
    d.out = dev(NULL, sizeof got);
    d.scratch = dev(NULL, sample_scratch_bytes(ROWS, n));
    const cudaError_t e = cuda_sample(&d, 0);
    T_CHECK(e == cudaSuccess, "%s n %d: cuda_sample: %s", name, n, cudaGetErrorString(e));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, d.out, sizeof got, cudaMemcpyDeviceToHost));
    float *back = malloc(lb);
    CK(cudaMemcpy(back, d.logits, lb, cudaMemcpyDeviceToHost));
    T_CHECK(!memcmp(back, l, lb), "%s n %d: the input logits changed", name, n);

    const int truncatable = !(p.top_k > 0 && p.top_k <= SAMPLE_MAX_CAND) && n > SAMPLE_MAX_CAND;
    for (int r = 0; r < ROWS; r++) {
        st->rows++;
        if (got[r] == want[r]) continue;
        if (got[r] == SAMPLE_REFUSED) {
            st->refused++;
            T_CHECK(truncatable, "%s, %s logits, n %d, row %d: refused with top-k %d", name, sample_mode_name[mode], n, r,
                    p.top_k);
            continue;
        }
        double mp, mu, mz;
        margins(l + r * stride, &p, u[r], &mp, &mu, &mz);
        const int near = mp < 1e-4 + 4 * mz || mu < 1e-9;
        st->near += near;
        if (near)
            printf("note: %s, %s logits, n %d, row %d: gpu %d, cpu %d, within rounding (margins: top-p %.3g, "
                   "draw %.3g, z %.3g)\n", name, sample_mode_name[mode], n, r, got[r], want[r], mp, mu, mz);
        T_CHECK(near, "%s, %s logits, n %d, row %d (u %.17g): gpu %d, cpu %d (margins: top-p %.3g, draw %.3g, z %.3g)",
                name, sample_mode_name[mode], n, r, u[r], got[r], want[r], mp, mu, mz);
    }
    cudaFree((void *)d.logits), cudaFree((void *)d.pen), cudaFree((void *)d.u), cudaFree(d.out), cudaFree(d.scratch);
    free(l), free(back);
}

static struct sample_args ps(float temp, int32_t k, float top_p, float min_p, float rep, float freq, float pres) {
    struct sample_args a;
    memset(&a, 0, sizeof a);
    a.temp = temp, a.top_k = k, a.top_p = top_p, a.min_p = min_p;
    a.repeat_penalty = rep, a.frequency_penalty = freq, a.presence_penalty = pres;
    return a;
}

static void test_sample(void) {
    const struct {
        const char *name;
        struct sample_args p;
        int small_only; /* nothing cuts the set: the launcher refuses above SAMPLE_MAX_CAND */
    } sets[] = {
        {"greedy", ps(0, 40, 0.95f, 0.05f, 1, 0, 0), 0},
        {"greedy + penalties", ps(0, 0, 1, 0, 1.5f, 0.3f, 0.6f), 0},
        {"top-k 40", ps(1, 40, 1, 0, 1, 0, 0), 0},
        {"top-k 1", ps(1, 1, 1, 0, 1, 0, 0), 0},
        {"top-k 1024", ps(1, 1024, 1, 0, 1, 0, 0), 0},
        {"top-p 0.9", ps(1, 0, 0.9f, 0, 1, 0, 0), 0},
        {"top-p 0.3", ps(1, 0, 0.3f, 0, 1, 0, 0), 0},
        {"min-p 0.05", ps(1, 0, 1, 0.05f, 1, 0, 0), 0},
        {"temp 0.7", ps(0.7f, 0, 1, 0, 1, 0, 0), 1},
        {"defaults", ps(0.8f, 40, 0.95f, 0.05f, 1, 0, 0), 0},
        {"all + penalties", ps(1.3f, 50, 0.8f, 0.02f, 1.3f, 0.2f, 0.4f), 0},
        {"top-k 2000 + top-p 0.95", ps(0.9f, 2000, 0.95f, 0, 1.1f, 0, 0), 0},
        {"min-p 0.05 + top-p 0.9, penalties", ps(1, 0, 0.9f, 0.05f, 1, -0.1f, -0.2f), 0},
        {"min-p 1.5 (nothing survives)", ps(1, 0, 1, 1.5f, 1, 0, 0), 0},
        {"top-p 0", ps(1, 0, 0, 0, 1, 0, 0), 0},
    };
    const int32_t vocabs[] = {SAMPLE_VOCABS};
    struct stats st = {0, 0, 0};
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++)
        for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
            if (sets[si].small_only && vocabs[vi] > SAMPLE_MAX_CAND) continue;
            for (int mode = 0; mode < MODE_N; mode++) run_case(sets[si].name, sets[si].p, vocabs[vi], mode, &st);
        }
    T_CHECK(st.near * 100 <= st.rows, "%d of %d rows differ within rounding of a boundary: expected under 1%%", st.near,
            st.rows);
    printf("cuda sample: %d rows, %d refused (truncated sets), %d within rounding of a boundary\n", st.rows, st.refused,
           st.near);

    /* the launcher's refusals */
    float *dl = dev(NULL, 32000 * sizeof(float));
    double *du = dev(NULL, sizeof(double));
    int32_t *dout = dev(NULL, sizeof(int32_t));
    void *dscr = dev(NULL, sample_scratch_bytes(1, 32000));
    struct sample_args a = ps(1, 0, 1, 0, 1, 0, 0);
    a.logits = dl, a.stride = 32000, a.n_rows = 1, a.n_vocab = 32000, a.u = du, a.out = dout, a.scratch = dscr;
    T_CHECK(cuda_sample(&a, 0) == cudaErrorInvalidValue, "temperature alone over 32000 logits is refused");
    a.top_k = 4000;
    T_CHECK(cuda_sample(&a, 0) == cudaErrorInvalidValue, "top-k 4000 alone over 32000 logits is refused");
    a.temp = 0;
    T_CHECK(cuda_sample(&a, 0) == cudaSuccess, "greedy over 32000 logits runs");
    a.temp = 1, a.top_k = 0, a.n_vocab = 1000;
    T_CHECK(cuda_sample(&a, 0) == cudaSuccess, "temperature alone over 1000 logits runs");
    a.u = NULL;
    T_CHECK(cuda_sample(&a, 0) == cudaErrorInvalidValue, "temp > 0 without u is refused");
    CK(cudaDeviceSynchronize());
    cudaFree(dl), cudaFree(du), cudaFree(dout), cudaFree(dscr);
}

int main(void) {
    const char *why = NULL;
    if (device_count(&why) == 0) {
        T_SKIP("no CUDA device: sample: %s", why);
        return t_done();
    }
    test_sample();
    cudaGetLastError();
    return t_done();
}

#else
int main(void) {
    T_SKIP("no CUDA device: built without CUDA");
    return t_done();
}
#endif
