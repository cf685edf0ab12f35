/* test-sampler: each stage of the sampler against hand-worked cases (llama.cpp's rules), and the draw
 * against the softmax computed here in double: with 20,000 draws every token's frequency must lie
 * within 5 standard deviations of its expected probability, and filtered tokens must never appear.
 * Greedy picks the lowest id among equal maxima; the same seed gives the same sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
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
    return t_done();
}
