/* test-sampler: each stage of the sampler against hand-worked cases (llama.cpp's rules), and the draw
 * against the softmax computed here in double: with 20,000 draws every token's frequency must lie
 * within 5 standard deviations of its expected probability, and filtered tokens must never appear.
 * Greedy picks the lowest id among equal maxima; the same seed gives the same sequence. With the peer
 * installed, llama.cpp's own samplers (penalties, top-k, top-p, min-p, temp applied in that order
 * through llama_sampler_apply) must leave the same candidates with the same logits as our chain. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdbool.h>

#include "peer.h"
#include "sampler.h"
#include "t.h"

#define N_DRAW 20000
#define V_MAX 16

static infer_sampler_params base(void) {
    infer_sampler_params p = infer_sampler_params_default();
    p.temp = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 1234;
    return p;
}

static int greedy(infer_sampler_params p, const float *l, int n, const int32_t *hist, int n_hist) {
    infer_sampler *s = NULL;
    p.temp = 0.0f;
    if (infer_sampler_create(&p, n, &s) != INFER_OK) return -2;
    for (int i = 0; i < n_hist; i++) infer_sampler_accept(s, hist[i]);
    int32_t t = infer_sampler_sample(s, l);
    infer_sampler_free(s);
    return t;
}

/* Draws N_DRAW tokens (the window is the history's length and the history is re-accepted before each
 * draw, so the drawn tokens fall out and the penalties stay fixed) and
 * compares with want[] (unnormalised weights; 0 = must never be drawn). */
static void check_dist(const char *what, infer_sampler_params p, const float *l, int n, const double *want,
                       const int32_t *hist, int n_hist) {
    infer_sampler *s = NULL;
    int count[V_MAX] = {0};
    if (n_hist) p.penalty_last_n = n_hist;
    if (infer_sampler_create(&p, n, &s) != INFER_OK) {
        T_CHECK(0, "%s: create: %s", what, infer_last_error());
        return;
    }
    for (int d = 0; d < N_DRAW; d++) {
        for (int i = 0; i < n_hist; i++) infer_sampler_accept(s, hist[i]);
        int32_t t = infer_sampler_sample(s, l);
        if (t < 0 || t >= n) {
            T_CHECK(0, "%s: token %d out of range", what, t);
            break;
        }
        count[t]++;
    }
    infer_sampler_free(s);
    double z = 0;
    for (int i = 0; i < n; i++) z += want[i];
    for (int i = 0; i < n; i++) {
        const double q = want[i] / z, f = (double)count[i] / N_DRAW, sd = sqrt(q * (1 - q) / N_DRAW);
        if (q == 0)
            T_CHECK(count[i] == 0, "%s: token %d filtered out but drawn %d times", what, i, count[i]);
        else
            T_CHECK(fabs(f - q) <= 5 * sd + 1e-9, "%s: token %d frequency %.4f, expected %.4f (sd %.4f)", what, i, f,
                    q, sd);
    }
}

/* ---- llama.cpp's samplers (layouts of llama.h: llama_token_data, llama_token_data_array) ----
 * In this release llama_sampler_init_penalties takes n_vocab first (found by its window: with the
 * four-argument form the window is whatever the register holds). */
struct peer_tok {
    int32_t id;
    float logit, p;
};
struct peer_arr {
    struct peer_tok *data;
    size_t size;
    int64_t selected;
    bool sorted;
};
static struct {
    void *(*penalties)(int32_t, int32_t, float, float, float); /* n_vocab, last_n, repeat, freq, present */
    void *(*top_k)(int32_t);
    void *(*top_p)(float, size_t);
    void *(*min_p)(float, size_t);
    void *(*temp)(float);
    void (*apply)(void *, struct peer_arr *);
    void (*accept)(void *, int32_t);
    void (*free)(void *);
} lp;

static int peer_bind(void) {
    const char *why = NULL;
    void *h = peer_open("libggml-base.so", &why);
    h = h ? peer_open("libggml.v0.5.0.so", &why) : NULL;
    h = h ? peer_open("libllama.v0.5.0.so", &why) : NULL;
    if (!h) {
        T_SKIP_PEER("llama.cpp peer: %s", why ? why : "not installed");
        return 0;
    }
    *(void **)&lp.penalties = peer_sym(h, "llama_sampler_init_penalties");
    *(void **)&lp.top_k = peer_sym(h, "llama_sampler_init_top_k");
    *(void **)&lp.top_p = peer_sym(h, "llama_sampler_init_top_p");
    *(void **)&lp.min_p = peer_sym(h, "llama_sampler_init_min_p");
    *(void **)&lp.temp = peer_sym(h, "llama_sampler_init_temp");
    *(void **)&lp.apply = peer_sym(h, "llama_sampler_apply");
    *(void **)&lp.accept = peer_sym(h, "llama_sampler_accept");
    *(void **)&lp.free = peer_sym(h, "llama_sampler_free");
    T_CHECK(lp.penalties && lp.top_k && lp.top_p && lp.min_p && lp.temp && lp.apply && lp.accept && lp.free,
            "llama_sampler_* symbols");
    return lp.free != NULL;
}

static int by_id(const void *x, const void *y) {
    return ((const struct peer_tok *)x)->id - ((const struct peer_tok *)y)->id;
}

/* One configuration on n random logits with a history: llama.cpp's stages one by one, then ours. */
static void peer_compare(const infer_sampler_params *p, int n, uint64_t seed) {
    float *l = malloc(sizeof(float) * (size_t)n);
    struct peer_tok *d = malloc(sizeof *d * (size_t)n);
    int32_t hist[48];
    uint64_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) { /* roughly normal, sd 2: sums of uniforms */
        double u = 0;
        for (int k = 0; k < 4; k++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, u += (double)(x >> 11) * 0x1.0p-53;
        l[i] = (float)((u - 2.0) * 3.5);
        d[i] = (struct peer_tok){i, l[i], 0};
    }
    for (int i = 0; i < 48; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, hist[i] = (int32_t)(x % 40);
    void *st[5];
    int ns = 0;
    st[ns++] = lp.penalties(n, p->penalty_last_n, p->repeat_penalty, p->frequency_penalty, p->presence_penalty);
    if (p->top_k > 0) st[ns++] = lp.top_k(p->top_k);
    if (p->top_p < 1) st[ns++] = lp.top_p(p->top_p, 0);
    if (p->min_p > 0) st[ns++] = lp.min_p(p->min_p, 0);
    st[ns++] = lp.temp(p->temp);
    for (int i = 0; i < 48; i++) lp.accept(st[0], hist[i]);
    struct peer_arr a = {d, (size_t)n, -1, false};
    for (int i = 0; i < ns; i++) lp.apply(st[i], &a);
    for (int i = 0; i < ns; i++) lp.free(st[i]);

    infer_sampler *s = NULL;
    const struct sampler_cand *c = NULL;
    infer_sampler_create(p, n, &s);
    for (int i = 0; i < 48; i++) infer_sampler_accept(s, hist[i]);
    int32_t k = s ? sampler_filter(s, l, &c) : 0;
    struct peer_tok *ours = malloc(sizeof *ours * (size_t)(k ? k : 1));
    for (int32_t i = 0; i < k; i++) ours[i] = (struct peer_tok){c[i].id, c[i].logit, 0};
    qsort(ours, (size_t)k, sizeof *ours, by_id);
    qsort(a.data, a.size, sizeof *a.data, by_id);
    int same = (size_t)k == a.size;
    float worst = 0;
    for (int32_t i = 0; same && i < k; i++) {
        same = ours[i].id == a.data[i].id;
        float e = fabsf(ours[i].logit - a.data[i].logit) / (1 + fabsf(a.data[i].logit));
        if (e > worst) worst = e;
    }
    T_CHECK(same && worst <= 1e-6f, "llama.cpp chain (k %d p %.2f min_p %.2f temp %.2f rep %.2f freq %.2f pres %.2f "
            "last_n %d) keeps %zu, ours %d, worst logit error %g", p->top_k, (double)p->top_p, (double)p->min_p,
            (double)p->temp, (double)p->repeat_penalty, (double)p->frequency_penalty, (double)p->presence_penalty,
            p->penalty_last_n, a.size, k, (double)worst);
    infer_sampler_free(s);
    free(ours);
    free(l);
    free(d);
}

int main(void) {
    infer_sampler *s = NULL;
    infer_sampler_params p = base();

    /* ---- arguments ---- */
    T_CHECK(infer_sampler_create(&p, 0, &s) == INFER_E_ARG && !s, "n_vocab 0 refused");
    p.penalty_last_n = -1;
    T_CHECK(infer_sampler_create(&p, 4, &s) == INFER_E_ARG && strstr(infer_last_error(), "penalty_last_n"),
            "negative penalty_last_n refused: %s", infer_last_error());
    p = base();
    p.top_p = NAN;
    T_CHECK(infer_sampler_create(&p, 4, &s) == INFER_E_ARG, "NaN top_p refused");
    p = base();
    T_CHECK(infer_sampler_create(&p, 4, &s) == INFER_OK && s, "create");
    T_CHECK(infer_sampler_sample(s, NULL) == -1, "NULL logits: -1");
    T_CHECK(infer_sampler_sample(NULL, (const float[]){0, 0, 0, 0}) == -1, "NULL sampler: -1");
    infer_sampler_accept(s, 99); /* out of range: ignored, must not crash */
    infer_sampler_accept(s, -1);
    infer_sampler_free(s);
    infer_sampler_free(NULL);

    /* ---- greedy: argmax, ties to the lowest id, NaN ignored ---- */
    p = base();
    T_CHECK(greedy(p, (const float[]){1, 3, 3, 2}, 4, NULL, 0) == 1, "greedy tie -> lowest id");
    T_CHECK(greedy(p, (const float[]){NAN, -1, 5, NAN}, 4, NULL, 0) == 2, "greedy skips NaN");
    T_CHECK(greedy(p, (const float[]){-INFINITY, -INFINITY}, 2, NULL, 0) == 0, "all -inf -> 0");
    {
        float big[1000];
        for (int i = 0; i < 1000; i++) big[i] = (float)((i * 37) % 1000) * 0.001f;
        big[613] = 2.0f;
        T_CHECK(greedy(p, big, 1000, NULL, 0) == 613, "greedy over 1000");
    }

    /* ---- penalties (hand-worked; greedy shows which side of a boundary the penalised logit lands) ---- */
    const int32_t h0[] = {0}, h00[] = {0, 0};
    p = base(), p.repeat_penalty = 1.1f; /* 2 / 1.1 = 1.818 < 1.9 */
    T_CHECK(greedy(p, (const float[]){2.0f, 1.9f}, 2, h0, 1) == 1, "repeat 1.1 divides a positive logit");
    p.repeat_penalty = 1.04f; /* 2 / 1.04 = 1.923 > 1.9 */
    T_CHECK(greedy(p, (const float[]){2.0f, 1.9f}, 2, h0, 1) == 0, "repeat 1.04 keeps it above");
    p.repeat_penalty = 1.1f; /* -1 * 1.1 = -1.1 < -1.05 (dividing would give -0.909) */
    T_CHECK(greedy(p, (const float[]){-1.0f, -1.05f}, 2, h0, 1) == 1, "repeat multiplies a negative logit");
    p.repeat_penalty = 1.1f; /* 0 * 1.1 = 0 stays the max (0 counts as non-positive) */
    T_CHECK(greedy(p, (const float[]){0.0f, -0.01f}, 2, h0, 1) == 0, "zero logit unchanged by repeat");
    p = base(), p.frequency_penalty = 0.4f; /* 3 - 2 * 0.4 = 2.2 > 2 */
    T_CHECK(greedy(p, (const float[]){3, 2}, 2, h00, 2) == 0, "frequency 0.4 x 2");
    p.frequency_penalty = 0.6f; /* 3 - 1.2 = 1.8 < 2 */
    T_CHECK(greedy(p, (const float[]){3, 2}, 2, h00, 2) == 1, "frequency 0.6 x 2");
    p = base(), p.presence_penalty = 0.9f; /* once, whatever the count: 3 - 0.9 = 2.1 */
    T_CHECK(greedy(p, (const float[]){3, 2}, 2, h00, 2) == 0, "presence 0.9");
    p.presence_penalty = 1.2f;
    T_CHECK(greedy(p, (const float[]){3, 2}, 2, h00, 2) == 1, "presence 1.2");
    p = base(), p.repeat_penalty = 2.0f, p.penalty_last_n = 2;
    const int32_t h_old[] = {0, 5, 6};
    T_CHECK(greedy(p, (const float[]){2.0f, 1.9f, 0, 0, 0, 0, 0}, 7, h_old, 3) == 0, "token out of the window");
    p.penalty_last_n = 0;
    T_CHECK(greedy(p, (const float[]){2.0f, 1.9f}, 2, h0, 1) == 0, "penalty_last_n 0: off");
    {
        /* all three at once, checked on the distribution: logits {2, -1, 0.5, 1}, history 0 1 1:
         * token 0: 2 / 2 - (1 * 0.5 + 0.25) = 0.25; token 1: -1 * 2 - (2 * 0.5 + 0.25) = -3.25 */
        const int32_t h[] = {0, 1, 1};
        const float l[] = {2, -1, 0.5f, 1};
        const double w[] = {exp(0.25), exp(-3.25), exp(0.5), exp(1.0)};
        p = base(), p.repeat_penalty = 2, p.frequency_penalty = 0.5f, p.presence_penalty = 0.25f;
        check_dist("penalties", p, l, 4, w, h, 3);
    }

    /* ---- the filters; probabilities {0.4, 0.3, 0.2, 0.1} as logits ---- */
    const float l4[] = {logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f)};
    p = base();
    check_dist("no filter", p, l4, 4, (const double[]){0.4, 0.3, 0.2, 0.1}, NULL, 0);
    p = base(), p.top_k = 2;
    check_dist("top-k 2", p, l4, 4, (const double[]){0.4, 0.3, 0, 0}, NULL, 0);
    p = base(), p.top_k = 1;
    check_dist("top-k 1", p, l4, 4, (const double[]){1, 0, 0, 0}, NULL, 0);
    p = base(), p.top_p = 0.72f; /* cumulative 0.4 0.7 0.9: the third reaches 0.72 */
    check_dist("top-p 0.72", p, l4, 4, (const double[]){0.4, 0.3, 0.2, 0}, NULL, 0);
    p = base(), p.top_p = 0.72f, p.top_k = 3; /* top-p over top-k's renormalised set: 4/9, 7/9 */
    check_dist("top-k 3 + top-p 0.72", p, l4, 4, (const double[]){0.4, 0.3, 0, 0}, NULL, 0);
    p = base(), p.top_p = 0.1f; /* the first alone already reaches it */
    check_dist("top-p 0.1", p, l4, 4, (const double[]){1, 0, 0, 0}, NULL, 0);
    p = base(), p.min_p = 0.6f; /* keeps p >= 0.24 */
    check_dist("min-p 0.6", p, l4, 4, (const double[]){0.4, 0.3, 0, 0}, NULL, 0);
    p = base(), p.min_p = 0.3f; /* keeps p >= 0.12 */
    check_dist("min-p 0.3", p, l4, 4, (const double[]){0.4, 0.3, 0.2, 0}, NULL, 0);
    /* top-p then min-p: top-p's cumulative sum is over the whole set (0.4 0.7 0.9 >= 0.75), not over
     * what min-p leaves (that would give 0.44 0.78 and keep two) */
    p = base(), p.top_p = 0.75f, p.min_p = 0.3f;
    check_dist("top-p 0.75 + min-p 0.3", p, l4, 4, (const double[]){0.4, 0.3, 0.2, 0}, NULL, 0);
    p = base(), p.top_p = 0.65f, p.min_p = 0.1f;
    check_dist("top-p 0.65 + min-p 0.1", p, l4, 4, (const double[]){0.4, 0.3, 0, 0}, NULL, 0);
    /* temperature after the filters: softmax(logit / 0.5) = p^2 over the survivors */
    p = base(), p.temp = 0.5f, p.top_k = 3;
    check_dist("temp 0.5 + top-k 3", p, l4, 4, (const double[]){0.16, 0.09, 0.04, 0}, NULL, 0);
    p = base(), p.temp = 2.0f;
    check_dist("temp 2", p, l4, 4, (const double[]){sqrt(0.4), sqrt(0.3), sqrt(0.2), sqrt(0.1)}, NULL, 0);
    {
        /* the default chain on 16 tokens with ties: top-k 8 keeps ids 0..7 (ties to the lowest ids) */
        float l[16];
        double w[16];
        for (int i = 0; i < 16; i++) l[i] = (float)(i / 2) * -0.25f; /* pairs of equal logits */
        p = infer_sampler_params_default(), p.min_p = 0, p.top_p = 1, p.top_k = 7, p.seed = 9;
        for (int i = 0; i < 16; i++) w[i] = i < 7 ? exp((double)l[i] / 0.8) : 0;
        check_dist("top-k 7 through a tie", p, l, 16, w, NULL, 0);
    }

    /* ---- reproducibility ---- */
    {
        float l[V_MAX];
        for (int i = 0; i < V_MAX; i++) l[i] = (float)sin(i * 1.7) * 2;
        int32_t a[200], b[200], c[200];
        int32_t *seqs[] = {a, b, c};
        const uint64_t seeds[] = {42, 42, 43};
        for (int k = 0; k < 3; k++) {
            p = infer_sampler_params_default(), p.seed = seeds[k], p.repeat_penalty = 1.3f;
            infer_sampler_create(&p, V_MAX, &s);
            for (int i = 0; i < 200; i++) seqs[k][i] = infer_sampler_sample(s, l);
            if (k == 0) { /* reset gives the same sequence again */
                infer_sampler_reset(s);
                int same = 1;
                for (int i = 0; i < 200; i++) same &= infer_sampler_sample(s, l) == a[i];
                T_CHECK(same, "reset restarts the sequence");
            }
            infer_sampler_free(s);
        }
        T_CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same tokens");
        T_CHECK(memcmp(a, c, sizeof a) != 0, "another seed, other tokens");
    }

    /* ---- against llama.cpp's samplers ---- */
    if (peer_bind()) {
        const struct {
            int32_t k, last_n;
            float top_p, min_p, temp, rep, freq, pres;
        } cfg[] = {
            {40, 64, 0.95f, 0.05f, 0.8f, 1.0f, 0, 0},   {0, 64, 1.0f, 0.0f, 1.0f, 1.3f, 0, 0},
            {0, 16, 1.0f, 0.0f, 0.7f, 1.1f, 0.2f, 0.5f}, {10, 64, 1.0f, 0.0f, 1.5f, 1.0f, 0, 0},
            {0, 64, 0.9f, 0.0f, 1.0f, 1.0f, 0, 0},     {0, 64, 1.0f, 0.1f, 1.0f, 1.0f, 0, 0},
            {0, 64, 0.5f, 0.02f, 0.6f, 1.2f, 0.1f, 0.3f}, {100, 8, 0.7f, 0.05f, 1.2f, 0.9f, -0.1f, -0.2f},
            {5, 64, 0.99f, 0.0f, 2.0f, 1.0f, 0, 0},    {0, 0, 0.8f, 0.1f, 1.0f, 1.5f, 1, 1},
        };
        for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++)
            for (int rep = 0; rep < 3; rep++) {
                p = base();
                p.top_k = cfg[i].k, p.penalty_last_n = cfg[i].last_n, p.top_p = cfg[i].top_p, p.min_p = cfg[i].min_p;
                p.temp = cfg[i].temp, p.repeat_penalty = cfg[i].rep, p.frequency_penalty = cfg[i].freq;
                p.presence_penalty = cfg[i].pres;
                peer_compare(&p, rep == 2 ? 32000 : 500, i * 10 + (size_t)rep);
            }
    }
    return t_done();
}
