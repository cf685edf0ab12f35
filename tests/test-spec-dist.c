/* test-spec-dist: at temperature > 0, speculative decoding (rejection sampling against the MTP draft,
 * lib/spec.c) produces tokens with exactly plain sampling's distribution — a chi-squared test.
 *
 * The model: a small qwen35 (vocabulary 259, n_embd 64) whose MTP head agrees with it up to noise
 * (synth --mtp-noise 0.1), so about half of the drafts are accepted and both branches of the
 * rule (accept the draft; on rejection draw from norm(max(0, p - q))) and the bonus token after a full
 * acceptance all run. (A random MTP head's top tokens are unrelated to the target's: nearly every draft
 * would be rejected. This target is a bigram table, its state unused: rollback is test-spec-rollback's.) The sampler: temperature 3, top-k 4, top-p and min-p off, so each step's
 * distribution has 4 tokens and the first three generated tokens fall into at most 64 cells.
 * Each trial returns the context to the checkpoint after the prompt and runs infer_spec_step (the prompt's
 * last token as `last`) until three tokens are out. The expected probability of (t1, t2, t3) is
 * p(t1) p(t2 | t1) p(t3 | t1 t2), each factor the sampler's own distribution (sampler_probs) on the logits
 * of a plain context (n_draft 0) after that prefix.
 * The test: Pearson's chi-squared over the cells (those with fewer than 5 expected pooled into one),
 * failing when its p-value is below ALPHA = 1e-6, with n_draft 1 and 2, N_TRIALS = 20000 trials each; plain
 * sampling (infer_sampler_sample on the same logits) runs through the same test as a control of the
 * expected table. A token outside the support (probability 0) is a failure on its own. Each trial has its
 * own sampler, seeded from the trial's index, so a run is deterministic and every trial starts with an empty
 * penalty window; over seeds each of the chi-squared checks fails by chance with probability 1e-6.
 * The p-value (the regularised upper incomplete gamma function) is checked first against closed forms.
 * With penalties (dist_params: a window of one token, a presence bonus) the table's rows are the sampler's
 * after the prefix (row 2's window: t2 alone), the bonus must move the table by over 0.25 in total variation
 * (so a row with the wrong window would fail), and the speculative run is n_draft 2, whose verification row 2
 * must drop d_0 from the window again.
 * On a device (the emulator in check-emu) the same tests run once more with the model at -ngl 99, where this
 * chain takes the device path (lib/spec.c SPEC_LISTS: the drafts' draws, the lists, the rows' penalties and
 * spec_accept on the device), n_draft 1 and 2 (with penalties 2) with N_TRIALS_DEVICE trials each (quick, the
 * sanitizers' run: n_draft 2, a fifth of them), the table from a plain context on the device; its steps must
 * move no row of logits over the bus.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "sampler.h"
#include "spec.h"
#include "t.h"

enum { N_VOCAB = 259, N_PROMPT = 8, N_TOK = 3, TOP_K = 4, N_TRIALS = 20000, N_TRIALS_DEVICE = 1000,
       N_CELLS = TOP_K * TOP_K * TOP_K };
static const double ALPHA = 1e-6, MIN_EXPECTED = 5;
static const float TEMP = 3.0f;

static char dir[] = "/tmp/test-spec-dist-XXXXXX";

/* The chain under test; pen: a window of one token with a negative presence penalty (a bonus, which pulls the
 * window's token into the next row's top k where a penalty would only push a token that is seldom there), so that
 * each verification row's window is the draft before it alone (with 2 drafts the first leaves again:
 * lib/sampler.c sampler_rows_penalties' drop of a draft). */
static infer_sampler_params dist_params(uint64_t seed, int pen) {
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = TEMP, sp.top_k = TOP_K, sp.top_p = 1, sp.min_p = 0, sp.seed = seed;
    if (pen) sp.penalty_last_n = 1, sp.presence_penalty = -5.0f;
    return sp;
}

/* Q(a, x) = Gamma(a, x) / Gamma(a): the series of P(a, x) below x = a + 1, the continued fraction of Q
 * (modified Lentz) above. Q(df / 2, chi2 / 2) is the chi-squared upper tail. */
static double gamma_q(double a, double x) {
    if (x <= 0) return 1;
    const double front = exp(-x + a * log(x) - lgamma(a));
    if (x < a + 1) {
        double term = 1 / a, sum = term;
        for (int n = 1; n < 10000 && term > sum * 1e-16; n++) {
            term *= x / (a + n);
            sum += term;
        }
        return 1 - front * sum;
    }
    const double tiny = 1e-300;
    double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        const double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        c = b + an / c;
        if (fabs(d) < tiny) d = tiny;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        if (fabs(d * c - 1) < 1e-16) break;
    }
    return front * h;
}

static double chi2_sf(double x, int df) { return gamma_q(df / 2.0, x / 2); }

/* Against closed forms: df 1 is erfc(sqrt(x / 2)); even df = 2m is e^(-x/2) sum_{k<m} (x/2)^k / k!. */
static void check_chi2_sf(void) {
    const double xs[] = {0.5, 3.841459, 10, 23.9281, 40, 64, 90, 130};
    for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
        const double x = xs[i], want1 = erfc(sqrt(x / 2));
        T_CHECK(fabs(chi2_sf(x, 1) - want1) <= 1e-12 + 1e-9 * want1, "chi2_sf(%g, 1) = %.12g, erfc form %.12g", x,
                chi2_sf(x, 1), want1);
        const int dfs[] = {2, 4, 64};
        for (int k = 0; k < 3; k++) {
            double term = 1, sum = 0;
            for (int j = 0; j < dfs[k] / 2; j++) {
                sum += term;
                term *= (x / 2) / (j + 1);
            }
            const double want = exp(-x / 2) * sum, got = chi2_sf(x, dfs[k]);
            T_CHECK(fabs(got - want) <= 1e-12 + 1e-9 * want, "chi2_sf(%g, %d) = %.12g, closed form %.12g", x, dfs[k],
                    got, want);
        }
    }
}

/* The expected table: the support (TOP_K tokens, in id order) and probabilities of the sampler's
 * distribution on the plain context's logits after the prompt, after prompt + s0[a], and after
 * prompt + s0[a] s1[a][b]; the logits themselves are kept for the control. */
struct table {
    int32_t s0[TOP_K], s1[TOP_K][TOP_K], s2[TOP_K][TOP_K][TOP_K];
    double p0[TOP_K], p1[TOP_K][TOP_K], p2[TOP_K][TOP_K][TOP_K];
    float row0[N_VOCAB], row1[TOP_K][N_VOCAB], row2[TOP_K][TOP_K][N_VOCAB];
};

/* The plain context's logits after prompt + prefix (n tokens) into row; the support of the sampler's
 * distribution on them into tok / prob. 0 when a decode fails or the support is not TOP_K tokens. */
static int expect_after(infer_ctx *plain, infer_sampler *s, const int32_t *prefix, int32_t n, float *row, int32_t *tok,
                        double *prob) {
    if (n > 0) {
        infer_batch b = {n, prefix, NULL, NULL, NULL};
        if (infer_seq_rm(plain, 0, N_PROMPT, -1) != INFER_OK || infer_decode(plain, &b) != INFER_OK) return 0;
    }
    memcpy(row, infer_logits(plain, -1), sizeof(float) * N_VOCAB);
    float probs[N_VOCAB];
    infer_sampler_reset(s); /* the window: the prefix's tokens */
    for (int32_t i = 0; i < n; i++) infer_sampler_accept(s, prefix[i]);
    sampler_probs(s, row, probs);
    int k = 0;
    for (int32_t i = 0; i < N_VOCAB; i++) {
        if (probs[i] <= 0) continue;
        if (k == TOP_K) return 0;
        tok[k] = i, prob[k] = probs[i], k++;
    }
    return k == TOP_K;
}

static int build_table(infer_ctx *plain, infer_sampler *s, const int32_t *prompt, struct table *t) {
    infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
    int ok = infer_decode(plain, &b) == INFER_OK && infer_seq_checkpoint(plain, 0) == INFER_OK &&
             expect_after(plain, s, NULL, 0, t->row0, t->s0, t->p0);
    for (int a = 0; ok && a < TOP_K; a++) {
        ok = expect_after(plain, s, &t->s0[a], 1, t->row1[a], t->s1[a], t->p1[a]);
        for (int b2 = 0; ok && b2 < TOP_K; b2++) {
            const int32_t ab[2] = {t->s0[a], t->s1[a][b2]};
            ok = expect_after(plain, s, ab, 2, t->row2[a][b2], t->s2[a][b2], t->p2[a][b2]);
        }
    }
    return ok;
}

static int slot_of(const int32_t *support, int32_t tok) {
    for (int i = 0; i < TOP_K; i++)
        if (support[i] == tok) return i;
    return -1;
}

/* The cell of (t1, t2, t3): (a * TOP_K + b) * TOP_K + c by support slots; -1 outside the support. */
static int cell_of(const struct table *t, const int32_t *tok) {
    const int a = slot_of(t->s0, tok[0]);
    const int b = a < 0 ? -1 : slot_of(t->s1[a], tok[1]);
    const int c = b < 0 ? -1 : slot_of(t->s2[a][b], tok[2]);
    return c < 0 ? -1 : (a * TOP_K + b) * TOP_K + c;
}

static double cell_prob(const struct table *t, int cell) {
    const int a = cell / (TOP_K * TOP_K), b = (cell / TOP_K) % TOP_K, c = cell % TOP_K;
    return t->p0[a] * t->p1[a][b] * t->p2[a][b][c];
}

/* The total variation distance between the token triples of two tables. */
static double table_tv(const struct table *x, const struct table *y) {
    double d = 0;
    for (int cell = 0; cell < N_CELLS; cell++) { /* x's triples, and y's that x lacks */
        const int a = cell / (TOP_K * TOP_K), b = (cell / TOP_K) % TOP_K, c = cell % TOP_K;
        const int32_t tx[N_TOK] = {x->s0[a], x->s1[a][b], x->s2[a][b][c]};
        const int32_t ty[N_TOK] = {y->s0[a], y->s1[a][b], y->s2[a][b][c]};
        const int in_y = cell_of(y, tx), in_x = cell_of(x, ty);
        d += fabs(cell_prob(x, cell) - (in_y < 0 ? 0 : cell_prob(y, in_y)));
        if (in_x < 0) d += cell_prob(y, cell);
    }
    return d / 2;
}

/* Pearson's statistic of count[] against the table over n trials, cells under MIN_EXPECTED pooled;
 * checks its p-value against ALPHA and that nothing fell outside the support. */
static void check_counts(const char *what, const struct table *t, const long *count, long outside, long n) {
    double chi2 = 0, pool_e = 0, pool_o = 0, total_p = 0;
    int bins = 0;
    for (int i = 0; i < N_CELLS; i++) {
        const double e = cell_prob(t, i) * (double)n;
        total_p += cell_prob(t, i);
        if (e < MIN_EXPECTED) {
            pool_e += e, pool_o += (double)count[i];
            continue;
        }
        chi2 += ((double)count[i] - e) * ((double)count[i] - e) / e, bins++;
    }
    if (pool_e > 0) chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, bins++;
    const double pv = chi2_sf(chi2, bins - 1);
    printf("  %-34s chi2 %8.2f, %d bins, p-value %.3g\n", what, chi2, bins, pv);
    T_CHECK(fabs(total_p - 1) < 1e-5, "%s: the expected table sums to %.8f", what, total_p);
    T_CHECK(outside == 0, "%s: %ld of %ld trials produced a token of probability 0", what, outside, n);
    T_CHECK(pv >= ALPHA, "%s: chi2 %.2f with %d degrees of freedom, p-value %.3g < %g", what, chi2, bins - 1, pv, ALPHA);
}

/* N_TRIALS speculative runs of N_TOK tokens from the checkpoint (the prompt's last token not decoded). */
static void check_spec(const infer_model *m, const int32_t *prompt, const struct table *t, int32_t n_draft,
                       int on_device, int pen) {
    const long n_trials = !on_device ? N_TRIALS : t_quick() ? N_TRIALS_DEVICE / 5 : N_TRIALS_DEVICE;
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = 32, cp.n_batch = 8, cp.n_threads = 1, cp.n_draft = n_draft;
    infer_ctx *c = NULL;
    infer_sampler *s = NULL;
    infer_batch b = {N_PROMPT - 1, prompt, NULL, NULL, NULL};
    int ok = infer_ctx_create(m, &cp, &c) == INFER_OK && infer_decode(c, &b) == INFER_OK &&
             infer_seq_checkpoint(c, 0) == INFER_OK;
    T_CHECK(ok, "n_draft %d: context and prompt: %s", n_draft, infer_last_error());
    long count[N_CELLS] = {0}, outside = 0, n = 0;
    const uint64_t bus0 = c ? infer_ctx_bus_bytes(c) : 0;
    for (; ok && n < n_trials; n++) {
        int32_t got[N_TOK + INFER_MAX_DRAFT], n_got = 0, last = prompt[N_PROMPT - 1], k = 0;
        const infer_sampler_params sp = dist_params(1000 + (uint64_t)n_draft + 7919 * (uint64_t)n, pen);
        infer_sampler_free(s), s = NULL; /* each trial its own generator and an empty window */
        ok = infer_sampler_create(&sp, N_VOCAB, &s) == INFER_OK && infer_seq_rm(c, 0, N_PROMPT - 1, -1) == INFER_OK;
        while (ok && n_got < N_TOK) {
            ok = infer_spec_step(c, s, 0, last, got + n_got, INFER_MAX_DRAFT + 1, &k) == INFER_OK;
            n_got += k, last = got[n_got - 1];
        }
        const int cell = ok ? cell_of(t, got) : -1;
        if (cell < 0) {
            outside++;
        } else {
            count[cell]++;
        }
    }
    T_CHECK(ok, "n_draft %d: speculative trial %ld: %s", n_draft, n, infer_last_error());
    const infer_spec_stats st = infer_spec_get_stats(c);
    char what[64];
    snprintf(what, sizeof what, "%s%s, n_draft %d (%.2f accepted)", on_device ? "device" : "speculative",
             pen ? " + penalty" : "", n_draft, st.n_drafted ? (double)st.n_accepted / (double)st.n_drafted : 0.0);
    if (on_device) { /* the decode of the prompt's tokens left no trace: the bus bytes are the steps' */
        const uint64_t per_step = st.n_steps ? (infer_ctx_bus_bytes(c) - bus0) / (uint64_t)st.n_steps : 0;
        T_CHECK(ok && per_step > 0 && per_step < N_VOCAB * sizeof(float), "n_draft %d on the device: %llu bytes over "
                "the bus per step: expected no row of logits (%zu bytes)", n_draft, (unsigned long long)per_step,
                N_VOCAB * sizeof(float));
    }
    if (ok) check_counts(what, t, count, outside, n);
    T_CHECK(st.n_accepted > st.n_drafted / 5 && st.n_accepted < st.n_drafted * 4 / 5,
            "n_draft %d: %lld of %lld drafts accepted: both branches of the rule must run often", n_draft,
            (long long)st.n_accepted, (long long)st.n_drafted);
    infer_sampler_free(s), infer_ctx_free(c);
}

/* The control: plain sampling from the same logits rows, through the same test. */
static void check_plain(const struct table *t, int pen) {
    infer_sampler *s = NULL;
    long count[N_CELLS] = {0}, outside = 0;
    for (long n = 0; n < N_TRIALS; n++) {
        const infer_sampler_params sp = dist_params(999 + 7919 * (uint64_t)n, pen);
        infer_sampler_free(s), s = NULL; /* each trial its own generator and an empty window */
        if (infer_sampler_create(&sp, N_VOCAB, &s) != INFER_OK) {
            T_CHECK(0, "sampler: %s", infer_last_error());
            return;
        }
        int32_t tok[N_TOK];
        tok[0] = infer_sampler_sample(s, t->row0);
        const int a = slot_of(t->s0, tok[0]);
        tok[1] = a < 0 ? -1 : infer_sampler_sample(s, t->row1[a]);
        const int b = a < 0 ? -1 : slot_of(t->s1[a], tok[1]);
        tok[2] = b < 0 ? -1 : infer_sampler_sample(s, t->row2[a][b]);
        const int cell = b < 0 ? -1 : cell_of(t, tok);
        if (cell < 0) {
            outside++;
        } else {
            count[cell]++;
        }
    }
    check_counts(pen ? "plain sampling + penalty (control)" : "plain sampling (control)", t, count, outside, N_TRIALS);
    infer_sampler_free(s);
}

/* The test on m's placement: the expected table from a plain context, the control (on the host only: it samples
 * rows the table holds), then the speculative runs. */
static void check_placement(const infer_model *m, const int32_t *prompt, int on_device, int pen) {
    static struct table t;
    infer_ctx *plain = NULL;
    infer_sampler *s = NULL;
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = 32, cp.n_batch = 8, cp.n_threads = 1;
    const infer_sampler_params spp = dist_params(0, pen);
    const int ok = infer_ctx_create(m, &cp, &plain) == INFER_OK && infer_sampler_create(&spp, N_VOCAB, &s) == INFER_OK &&
                   build_table(plain, s, prompt, &t);
    T_CHECK(ok, "%s: plain context and the expected table: %s", on_device ? "device" : "host", infer_last_error());
    if (ok && pen) { /* the penalty must move the distribution, or a row with the wrong window would pass */
        static struct table t0;
        const infer_sampler_params sp0 = dist_params(0, 0);
        infer_sampler *s0 = NULL;
        const int ok0 = infer_sampler_create(&sp0, N_VOCAB, &s0) == INFER_OK &&
                        infer_seq_rm(plain, 0, 0, -1) == INFER_OK && build_table(plain, s0, prompt, &t0);
        const double tv = ok0 ? table_tv(&t, &t0) : 0;
        printf("  the penalty moves %.3f of the triples' probability\n", tv);
        T_CHECK(ok0 && tv > 0.25, "the penalty moves %.3f of the probability: expected over 0.25", tv);
        infer_sampler_free(s0);
    }
    if (ok && !on_device) check_plain(&t, pen);
    for (int32_t n_draft = (on_device && t_quick()) || pen ? 2 : 1; ok && n_draft <= 2; n_draft++)
        check_spec(m, prompt, &t, n_draft, on_device, pen);
    infer_sampler_free(s), infer_ctx_free(plain);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    check_chi2_sf();
    struct synth_params sp;
    synth_params_default("qwen35", &sp);
    sp.ftype = "F32", sp.seed = 3, sp.mtp = 1, sp.mtp_agree = 1, sp.mtp_noise = 0.1f;
    sp.n_vocab = N_VOCAB, sp.n_embd = 64, sp.n_layer = 2, sp.full_attention_interval = 2, sp.n_head = 2;
    sp.n_head_kv = 1, sp.head_dim = 32, sp.n_ff = 128, sp.ssm_d_state = 16, sp.ssm_n_group = 1, sp.ssm_dt_rank = 2;
    char path[256];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    const int32_t prompt[N_PROMPT] = {5, 70, 33, 2, 99, 140, 7, 200};
    const int written = synth_write(&sp, path) == INFER_OK;
    T_CHECK(written, "synth: %s", infer_last_error());
    const char *why = NULL;
    const int n_dev = written ? device_count(&why) : 0;
    for (int on_device = 0; written && on_device <= (n_dev > 0); on_device++) {
        infer_model_params mp = infer_model_params_default();
        mp.n_gpu_layers = on_device ? 99 : 0;
        infer_model *m = NULL;
        if (infer_model_load(path, &mp, &m) == INFER_OK) {
            check_placement(m, prompt, on_device, 0);
            check_placement(m, prompt, on_device, 1);
        } else {
            T_CHECK(0, "model (-ngl %d): %s", mp.n_gpu_layers, infer_last_error());
        }
        infer_model_free(m);
    }
    if (written && n_dev == 0) T_SKIP("no CUDA device (%s): the device path", why ? why : "none");
    unlink(path);
    rmdir(dir);
    return t_done();
}
