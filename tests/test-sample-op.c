/* test-sample-op: the sample op (kernels.h sample_args) on the CPU, and infer_sample.
 * 1. cpu_sample against a reference of lib/sampler.c's chain written here from its header (a full sort
 *    instead of quickselect, penalties counted from a history, the float / double steps in the header's
 *    order), given the same u: vocab 1, 2, 7, 1000, 1025 and 32000; logits continuous, from few values
 *    (ties), peaked, with NaN and -inf, all equal; parameter sets greedy, top-k only (1, 40, 1024), top-p
 *    only, min-p only, temperature only, the defaults, everything with penalties, top-k 2000 + top-p, and
 *    the edges min_p > 1 and top_p 0. Several rows per call on two threads, one u per row.
 * 2. cpu_sample fed as infer_sample feeds it (u from the sampler's generator, its penalty pairs) against
 *    infer_sampler_sample over 300 steps where the chain sometimes leaves one token: the same tokens,
 *    which holds only if every non-greedy pick takes exactly one uniform.
 * 3. infer_sample on a CPU context (synthetic qwen3) against infer_sampler_sample(infer_logits(...)):
 *    the same tokens over a prompt and a generation, and its argument errors.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "infer.h"
#include "sampler.h"
#include "../tools/synth.h"
#include "sample_rows.h"
#include "t.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static double urand(void) { return (double)rnd() / 4294967296.0; } /* [0, 1) */

/* ---- the reference: the chain of lib/sampler.c's header, step by step ---- */
struct rc {
    int32_t id;
    float l;
};
static int rc_cmp(const void *x, const void *y) {
    const struct rc *a = x, *b = y;
    if (a->l != b->l) return a->l > b->l ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int32_t ref_sample(const float *logits, int32_t n, const int32_t *hist, int32_t n_hist,
                          const infer_sampler_params *p, double u) {
    struct rc *c = malloc((size_t)n * sizeof *c), *s = malloc((size_t)n * sizeof *s);
    int32_t *cnt = calloc((size_t)n, sizeof *cnt);
    for (int32_t i = 0; i < n; i++) c[i].id = i, c[i].l = isnan(logits[i]) ? -INFINITY : logits[i];
    if (p->penalty_last_n > 0 && (p->repeat_penalty != 1 || p->frequency_penalty != 0 || p->presence_penalty != 0)) {
        for (int32_t j = n_hist > p->penalty_last_n ? n_hist - p->penalty_last_n : 0; j < n_hist; j++) cnt[hist[j]]++;
        for (int32_t t = 0; t < n; t++)
            if (cnt[t]) {
                float l = c[t].l;
                l = l <= 0 ? l * p->repeat_penalty : l / p->repeat_penalty;
                c[t].l = l - ((float)cnt[t] * p->frequency_penalty + p->presence_penalty);
            }
    }
    memcpy(s, c, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, rc_cmp);
    const float max = s[0].l;
    int32_t pick = s[0].id;
    if (p->temp <= 0 || max == -INFINITY) goto done;
    /* top-k: the set, sorted; without it the whole row in id order */
    const int topk = p->top_k > 0 && p->top_k < n;
    struct rc *set = topk ? s : c;
    int32_t k = topk ? p->top_k : n;
    float z = 0;
    for (int32_t i = 0; i < k; i++) z += expf(set[i].l - max);
    if (p->min_p > 0) { /* keeps the set's order */
        const float min_logit = max + logf(p->min_p);
        int32_t m = 0;
        for (int32_t i = 0; i < k; i++)
            if (set[i].l >= min_logit) set[m++] = set[i];
        if (m == 0) { /* nothing left: the chain returns its first candidate */
            pick = set[0].id;
            goto done;
        }
        k = m;
    }
    if (p->top_p < 1) {
        if (!topk) qsort(set, (size_t)k, sizeof *set, rc_cmp);
        float cum = 0;
        for (int32_t i = 0; i < k; i++) {
            cum += expf(set[i].l - max) / z;
            if (cum >= p->top_p) {
                k = i + 1;
                break;
            }
        }
    }
    float m2 = -INFINITY;
    for (int32_t i = 0; i < k; i++) {
        if (p->temp != 1) set[i].l /= p->temp;
        if (set[i].l > m2) m2 = set[i].l;
    }
    double total = 0, cum = 0;
    for (int32_t i = 0; i < k; i++) total += exp((double)set[i].l - m2);
    pick = set[k - 1].id;
    for (int32_t i = 0; i < k; i++) {
        cum += exp((double)set[i].l - m2);
        if (u * total < cum) {
            pick = set[i].id;
            break;
        }
    }
done:
    free(c), free(s), free(cnt);
    return pick;
}

/* ---- inputs ---- */
/* A history of n_hist tokens under n (so the penalties hit repeated and single tokens). */
static void fill_hist(int32_t *h, int32_t n_hist, int32_t n) {
    for (int32_t j = 0; j < n_hist; j++) h[j] = (int32_t)(rnd() % (uint32_t)(n < 30 ? n : 30));
}

/* The penalty pairs of the last last_n tokens of h, as infer_sample hands them to the op. */
static int32_t hist_pairs(const int32_t *h, int32_t n_hist, int32_t last_n, int32_t n, int32_t *pairs) {
    int32_t *cnt = calloc((size_t)n, sizeof *cnt), np = 0;
    for (int32_t j = n_hist > last_n ? n_hist - last_n : 0; j < n_hist; j++) cnt[h[j]]++;
    for (int32_t t = n - 1; t >= 0; t--) /* descending: the order must not matter */
        if (cnt[t]) pairs[2 * np] = t, pairs[2 * np + 1] = cnt[t], np++;
    free(cnt);
    return np;
}

struct pset {
    const char *name;
    infer_sampler_params p;
};

static infer_sampler_params ps(float temp, int32_t k, float top_p, float min_p, float rep, float freq, float pres) {
    infer_sampler_params p = infer_sampler_params_default();
    p.temp = temp, p.top_k = k, p.top_p = top_p, p.min_p = min_p, p.repeat_penalty = rep;
    p.frequency_penalty = freq, p.presence_penalty = pres, p.penalty_last_n = 64;
    return p;
}

static void test_reference(struct pool *pool) {
    const struct pset sets[] = {
        {"greedy", ps(0, 40, 0.95f, 0.05f, 1, 0, 0)},
        {"greedy + penalties", ps(0, 0, 1, 0, 1.5f, 0.3f, 0.6f)},
        {"top-k 40", ps(1, 40, 1, 0, 1, 0, 0)},
        {"top-k 1", ps(1, 1, 1, 0, 1, 0, 0)},
        {"top-k 1024", ps(1, 1024, 1, 0, 1, 0, 0)},
        {"top-p 0.9", ps(1, 0, 0.9f, 0, 1, 0, 0)},
        {"top-p 0.3", ps(1, 0, 0.3f, 0, 1, 0, 0)},
        {"min-p 0.05", ps(1, 0, 1, 0.05f, 1, 0, 0)},
        {"temp 0.7", ps(0.7f, 0, 1, 0, 1, 0, 0)},
        {"defaults", ps(0.8f, 40, 0.95f, 0.05f, 1, 0, 0)},
        {"all + penalties", ps(1.3f, 50, 0.8f, 0.02f, 1.3f, 0.2f, 0.4f)},
        {"top-k 2000 + top-p 0.95", ps(0.9f, 2000, 0.95f, 0, 1.1f, 0, 0)},
        {"min-p 0.05 + top-p 0.9, penalties", ps(1, 0, 0.9f, 0.05f, 1, -0.1f, -0.2f)},
        {"min-p 1.5 (nothing survives)", ps(1, 0, 1, 1.5f, 1, 0, 0)},
        {"top-p 0", ps(1, 0, 0, 0, 1, 0, 0)},
    };
    const int32_t vocabs[] = {1, 2, 7, 1000, 1025, 32000};
    enum { ROWS = 3, HIST = 80 };
    int n_cases = 0, n_bad = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++) {
        const int32_t n = vocabs[vi];
        float *l = malloc((size_t)ROWS * (size_t)(n + 3) * sizeof *l);
        void *scratch = malloc(sample_scratch_bytes(ROWS, n));
        for (size_t si = 0; si < sizeof sets / sizeof *sets; si++)
            for (int mode = 0; mode < MODE_N; mode++) {
                const infer_sampler_params *p = &sets[si].p;
                int32_t hist[HIST], pairs[2 * HIST], out[ROWS];
                double u[ROWS];
                fill_hist(hist, HIST, n);
                const int pen = p->repeat_penalty != 1 || p->frequency_penalty != 0 || p->presence_penalty != 0;
                const int32_t np = pen ? hist_pairs(hist, HIST, p->penalty_last_n, n, pairs) : 0;
                for (int r = 0; r < ROWS; r++)
                    sample_fill_row(l + (size_t)r * (size_t)(n + 3), n, mode, rnd), u[r] = urand();
                u[0] = 0.0, u[ROWS - 1] = 1.0 - 0x1.0p-53; /* the ends of [0, 1) */
                const struct sample_args a = {.logits = l, .stride = n + 3, .n_rows = ROWS, .n_vocab = n,
                                              .pen = np ? pairs : NULL, .n_pen = np,
                                              .repeat_penalty = p->repeat_penalty,
                                              .frequency_penalty = p->frequency_penalty,
                                              .presence_penalty = p->presence_penalty, .top_k = p->top_k,
                                              .top_p = p->top_p, .min_p = p->min_p, .temp = p->temp, .u = u,
                                              .out = out, .scratch = scratch};
                const infer_status st = cpu_sample(&a, pool);
                T_CHECK(st == INFER_OK, "cpu_sample %s n %d: %s", sets[si].name, n, infer_last_error());
                for (int r = 0; r < ROWS; r++) {
                    const int32_t want = ref_sample(l + (size_t)r * (size_t)(n + 3), n, hist, pen ? HIST : 0, p, u[r]);
                    n_cases++;
                    if (out[r] != want && n_bad++ < 10)
                        T_CHECK(0, "%s, %s logits, n_vocab %d, row %d (u %.17g): cpu_sample %d, reference %d",
                                sets[si].name, sample_mode_name[mode], n, r, u[r], out[r], want);
                }
            }
        free(l), free(scratch);
    }
    T_CHECK(n_bad == 0, "cpu_sample equals the reference on %d of %d rows", n_cases - n_bad, n_cases);

    /* argument errors name the op */
    float l1[4] = {0};
    int32_t o1, badpen[2] = {7, 1};
    void *scr = malloc(sample_scratch_bytes(1, 4));
    struct sample_args b = {.logits = l1, .stride = 4, .n_rows = 1, .n_vocab = 4, .repeat_penalty = 1, .top_p = 1,
                            .temp = 1, .out = &o1, .scratch = scr};
    T_CHECK(cpu_sample(&b, pool) == INFER_E_ARG && strstr(infer_last_error(), "cpu_sample"), "temp > 0 without u");
    b.temp = 0, b.pen = badpen, b.n_pen = 1;
    T_CHECK(cpu_sample(&b, pool) == INFER_E_ARG && strstr(infer_last_error(), "token 7"), "penalty token out of range");
    b.n_pen = 0, b.stride = 3;
    T_CHECK(cpu_sample(&b, pool) == INFER_E_ARG, "stride < n_vocab");
    int32_t push[1] = {9}, drop[1] = {-1};
    b.stride = 4, b.n_rows = 2, b.pen_push = push, b.pen_drop = drop;
    T_CHECK(cpu_sample(&b, pool) == INFER_E_ARG && strstr(infer_last_error(), "pushed token 0 (9)"),
            "a pushed token out of range");
    push[0] = 1, drop[0] = -2;
    T_CHECK(cpu_sample(&b, pool) == INFER_E_ARG && strstr(infer_last_error(), "dropped -2"),
            "a drop of a push not made yet");
    free(scr);
}

/* cpu_sample fed like infer_sample against infer_sampler_sample, step after step. */
static void test_sequence(void) {
    enum { N = 1000, STEPS = 300 };
    const infer_sampler_params sets[] = {
        ps(0.9f, 0, 0.5f, 0, 1.2f, 0.1f, 0.1f), /* peaked rows leave one token, flat rows many */
        ps(0.8f, 40, 0.95f, 0.05f, 1.1f, 0, 0),
        ps(0, 0, 1, 0, 1.3f, 0, 0.5f),
    };
    float l[N];
    int32_t pairs[2 * 64];
    void *scratch = malloc(sample_scratch_bytes(1, N));
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        infer_sampler *s1 = NULL, *s2 = NULL;
        infer_sampler_create(&sets[si], N, &s1);
        infer_sampler_create(&sets[si], N, &s2);
        int same = 1, singles = 0;
        for (int step = 0; step < STEPS && s1 && s2; step++) {
            sample_fill_row(l, N, step % 3 ? MODE_CONT : MODE_PEAK, rnd);
            if (step % 3 == 0) l[rnd() % N] = 40; /* one token takes all the mass */
            singles += step % 3 == 0;
            const int32_t want = infer_sampler_sample(s2, l);
            const double u = sets[si].temp <= 0 ? 0.0 : sampler_uniform(s1);
            const int32_t np = sampler_penalty_pairs(s1, pairs);
            int32_t got = -2;
            const struct sample_args a = {.logits = l, .stride = N, .n_rows = 1, .n_vocab = N, .pen = pairs,
                                          .n_pen = np, .repeat_penalty = sets[si].repeat_penalty,
                                          .frequency_penalty = sets[si].frequency_penalty,
                                          .presence_penalty = sets[si].presence_penalty, .top_k = sets[si].top_k,
                                          .top_p = sets[si].top_p, .min_p = sets[si].min_p, .temp = sets[si].temp,
                                          .u = &u, .out = &got, .scratch = scratch};
            if (cpu_sample(&a, NULL) != INFER_OK) got = -3;
            infer_sampler_accept(s1, got);
            if (got != want && same) T_CHECK(0, "set %zu step %d: op %d, infer_sampler_sample %d", si, step, got, want);
            same &= got == want;
        }
        T_CHECK(same && singles > 50, "set %zu: %d steps (%d with one survivor) give the same tokens", si, STEPS, singles);
        infer_sampler_free(s1), infer_sampler_free(s2);
    }
    free(scratch);
}

/* infer_sample on a CPU context against the host chain on infer_logits. */
static void test_context(void) {
    char dir[] = "/tmp/test-sample-op-XXXXXX", path[256];
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/qwen3.gguf", dir);
    struct synth_params sp;
    synth_params_default("qwen3", &sp);
    sp.ftype = "Q8_0", sp.seed = 11;
    infer_model *m = NULL;
    T_CHECK(synth_write(&sp, path) == INFER_OK && infer_model_load(path, NULL, &m) == INFER_OK, "synth + load: %s",
            infer_last_error());
    unlink(path);
    rmdir(dir);
    if (!m) return;
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = 64, cp.n_batch = 16, cp.n_threads = 2;
    infer_ctx *c = NULL;
    T_CHECK(infer_ctx_create(m, &cp, &c) == INFER_OK, "context: %s", infer_last_error());
    const int32_t nv = infer_vocab_size(m);
    const infer_sampler_params sets[] = {ps(0.8f, 40, 0.95f, 0.05f, 1.2f, 0.1f, 0.2f), ps(1.5f, 0, 1, 0, 1, 0, 0),
                                         ps(0, 0, 1, 0, 1.3f, 0, 0)};
    for (size_t si = 0; c && si < sizeof sets / sizeof *sets; si++) {
        infer_seq_rm(c, 0, 0, -1);
        infer_sampler *s1 = NULL, *s2 = NULL;
        infer_sampler_create(&sets[si], nv, &s1);
        infer_sampler_create(&sets[si], nv, &s2);
        int32_t prompt[8];
        int8_t want_l[8];
        for (int i = 0; i < 8; i++) prompt[i] = 5 + (int32_t)(rnd() % (uint32_t)(nv - 10)), want_l[i] = i % 3 != 1 || i == 7;
        for (int i = 0; i < 8; i++) infer_sampler_accept(s1, prompt[i]), infer_sampler_accept(s2, prompt[i]);
        infer_batch b = {8, prompt, NULL, NULL, want_l};
        T_CHECK(infer_decode(c, &b) == INFER_OK, "prompt: %s", infer_last_error());
        int same = 1;
        const int32_t rows[] = {0, 2, -1, -3};
        for (size_t j = 0; j < 4; j++) {
            int32_t t = -2;
            T_CHECK(infer_sample(c, s1, rows[j], &t) == INFER_OK, "infer_sample(%d): %s", rows[j], infer_last_error());
            const int32_t w = infer_sampler_sample(s2, infer_logits(c, rows[j]));
            same &= t == w;
        }
        int32_t t = -1;
        for (int step = 0; step < 20; step++) {
            if (infer_sample(c, s1, -1, &t) != INFER_OK) t = -3;
            const int32_t w = infer_sampler_sample(s2, infer_logits(c, -1));
            if (t != w && same) T_CHECK(0, "set %zu step %d: infer_sample %d, host %d", si, step, t, w);
            same &= t == w;
            if (t < 0) break;
            infer_batch d = {1, &t, NULL, NULL, NULL};
            if (infer_decode(c, &d) != INFER_OK) break;
        }
        T_CHECK(same, "set %zu: infer_sample gives infer_sampler_sample's tokens", si);
        infer_sampler_free(s1), infer_sampler_free(s2);
    }
    if (c) { /* errors: rows not asked for or out of the batch, another vocabulary, NULLs */
        infer_sampler *s = NULL, *sw = NULL;
        infer_sampler_create(NULL, nv, &s);
        infer_sampler_create(NULL, nv + 1, &sw);
        int32_t prompt[3] = {5, 6, 7}, t = 0;
        infer_batch b = {3, prompt, NULL, NULL, NULL}; /* logits of the last token only */
        T_CHECK(infer_decode(c, &b) == INFER_OK, "decode");
        T_CHECK(infer_sample(c, s, 0, &t) == INFER_E_ARG && t == -1, "token 0 asked no logits");
        T_CHECK(infer_sample(c, s, 3, &t) == INFER_E_ARG, "token 3 of 3");
        T_CHECK(infer_sample(c, s, -4, &t) == INFER_E_ARG, "token -4 of 3");
        T_CHECK(infer_sample(c, sw, -1, &t) == INFER_E_ARG && strstr(infer_last_error(), "sampler for"), "sampler of another vocabulary: %s", infer_last_error());
        T_CHECK(infer_sample(c, s, -1, NULL) == INFER_E_ARG && infer_sample(NULL, s, -1, &t) == INFER_E_ARG,
                "NULL arguments");
        T_CHECK(infer_sample(c, s, 2, &t) == INFER_OK && t >= 0 && t < nv, "token 2 is -1's row: %d", t);
        infer_sampler_free(s), infer_sampler_free(sw);
    }
    infer_ctx_free(c);
    infer_model_free(m);
}

int main(void) {
    struct pool *pool = NULL;
    T_CHECK(pool_create(2, &pool) == INFER_OK, "pool");
    test_reference(pool);
    pool_free(pool);
    test_sequence();
    test_context();
    return t_done();
}
