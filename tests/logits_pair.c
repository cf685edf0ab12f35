/* logits_pair: see logits_pair.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "gpu_like.h"
#include "logits_pair.h"

static char pair_msg[512];

const char *pair_error(void) { return pair_msg; }

void pair_stats_init(struct pair_stats *s) {
    memset(s, 0, sizeof *s);
    s->min_tie_ratio = INFINITY;
}

void pair_stats_free(struct pair_stats *s) {
    free(s->rel);
    pair_stats_init(s);
}

/* Rows over bound, and whether every row is within top. */
static int pair_over(const struct pair_stats *s, double bound, double top, int *all_below_top) {
    int n = 0;
    *all_below_top = 1;
    for (int i = 0; i < s->rows; i++) {
        n += !(s->rel[i] <= bound);
        *all_below_top &= s->rel[i] <= top;
    }
    return n;
}

int pair_within(const struct pair_stats *s, enum pair_mode mode, const char *ftype, char *msg, size_t msg_size) {
    const int f32 = !strcmp(ftype, "F32") || !strcmp(ftype, "F16");
    const double mean = s->rows ? s->sum_rel / s->rows : INFINITY;
    const int flips_max = (int)ceil(PAIR_FLIPS * s->rows);
    int ok = s->rows > 0 && isfinite(s->worst), below_top = 1, over = 0;
    double row_bound = PAIR_EXACT_REL_L2;
    if (mode == PAIR_EXACT) {
        over = pair_over(s, row_bound, row_bound, &below_top);
        ok = ok && over == 0 && s->argmax_differ == 0;
    } else if (mode == PAIR_DEVICE) {
        row_bound = f32 ? PAIR_DEVICE_ROW_F32 : PAIR_DEVICE_ROW_QUANT;
        over = pair_over(s, row_bound, PAIR_ROW_MAX, &below_top);
        ok = ok && mean <= (f32 ? PAIR_DEVICE_MEAN_F32 : PAIR_DEVICE_MEAN_QUANT) &&
             over <= (int)ceil(PAIR_DEVICE_OUTLIERS * s->rows) && below_top && s->argmax_differ <= flips_max;
    } else {
        row_bound = f32 ? PAIR_LOOSE_F32 : PAIR_LOOSE_QUANT;
        over = pair_over(s, row_bound, PAIR_ROW_MAX, &below_top);
        ok = ok && over <= (int)ceil(PAIR_LOOSE_OUTLIERS * s->rows) && below_top && s->argmax_differ * 10 <= s->rows;
    }
    snprintf(msg, msg_size, "%d rows (%d bit-identical): rel worst %.3g mean %.3g, %d over %.0e, argmax differs on %d",
             s->rows, s->identical, s->worst, mean, over, row_bound, s->argmax_differ);
    return ok;
}

int32_t pair_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Rows 0..n_rows-1 of the last batch (batch indices: every row was asked). */
static infer_status pair_compare(const infer_ctx *a, const infer_ctx *b, int32_t n_rows, int32_t n_vocab,
                                 struct pair_stats *s) {
    for (int32_t i = 0; i < n_rows; i++) {
        const float *la = infer_logits(a, i), *lb = infer_logits(b, i);
        if (!la || !lb) {
            snprintf(pair_msg, sizeof pair_msg, "logits row %d missing: %s", i, infer_last_error());
            s->worst = INFINITY;
            return INFER_E_INTERNAL;
        }
        double d2 = 0, n2 = 0, dmax = 0;
        for (int32_t v = 0; v < n_vocab; v++) {
            const double d = (double)la[v] - lb[v];
            d2 += d * d, n2 += (double)lb[v] * lb[v];
            dmax = fmax(dmax, fabs(d));
        }
        const double rel = isnan(d2) ? INFINITY : sqrt(d2 / (n2 > 0 ? n2 : 1));
        if (s->rows == s->cap) {
            const int cap = s->cap ? 2 * s->cap : 256;
            double *r = realloc(s->rel, (size_t)cap * sizeof *r);
            if (!r) {
                snprintf(pair_msg, sizeof pair_msg, "out of memory");
                return INFER_E_OOM;
            }
            s->rel = r, s->cap = cap;
        }
        s->rel[s->rows++] = rel;
        s->worst = fmax(s->worst, rel);
        s->sum_rel += rel;
        s->identical += memcmp(la, lb, (size_t)n_vocab * sizeof(float)) == 0;
        const int ia = pair_argmax(la, n_vocab), ib = pair_argmax(lb, n_vocab);
        s->argmax_differ += ia != ib;
        double second = -INFINITY;
        for (int32_t v = 0; v < n_vocab; v++)
            if (v != ib) second = fmax(second, lb[v]);
        const double gap = (double)lb[ib] - second;
        if (dmax > 0) s->min_tie_ratio = fmin(s->min_tie_ratio, gap / (2 * dmax));
    }
    return INFER_OK;
}

/* The same batch into both contexts, every row asked. */
static infer_status pair_decode(infer_ctx *a, infer_ctx *b, const int32_t *tok, const int32_t *seq, int32_t n) {
    int8_t *want = malloc((size_t)n);
    if (!want) return INFER_E_OOM;
    memset(want, 1, (size_t)n);
    infer_batch batch = {.n_tokens = n, .token = tok, .seq_id = seq, .logits = want};
    infer_status st = infer_decode(a, &batch);
    if (st != INFER_OK) {
        snprintf(pair_msg, sizeof pair_msg, "context a: decode of %d tokens: %s", n, infer_last_error());
    } else if ((st = infer_decode(b, &batch)) != INFER_OK) {
        snprintf(pair_msg, sizeof pair_msg, "context b: decode of %d tokens: %s", n, infer_last_error());
    }
    free(want);
    return st;
}

static int32_t pair_vocab(const infer_ctx *b) { return infer_vocab_size(b->m); }

/* Prompt tokens spread over the vocabulary (never 0). */
static void pair_prompt(int32_t *tok, int32_t n, int32_t from, int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++) tok[i] = 1 + ((from + i) * 7919) % (n_vocab - 1);
}

/* n single-token steps on sequence 0, each fed b's argmax, then the 3-token batch {3, 5, 7}. */
static infer_status pair_steps(infer_ctx *a, infer_ctx *b, int32_t n, int32_t n_vocab, struct pair_stats *s) {
    infer_status st = INFER_OK;
    for (int32_t k = 0; k < n && st == INFER_OK; k++) {
        int32_t t = pair_argmax(infer_logits(b, -1), n_vocab);
        st = pair_decode(a, b, &t, NULL, 1);
        if (st == INFER_OK) st = pair_compare(a, b, 1, n_vocab, s);
    }
    const int32_t v[3] = {3, 5, 7};
    if (st == INFER_OK) st = pair_decode(a, b, v, NULL, 3);
    if (st == INFER_OK) st = pair_compare(a, b, 3, n_vocab, s);
    return st;
}

infer_status pair_basic(infer_ctx *a, infer_ctx *b, int32_t n_prompt, int32_t n_decode, struct pair_stats *s) {
    const int32_t n_vocab = pair_vocab(b);
    int32_t *tok = malloc((size_t)n_prompt * sizeof *tok);
    if (!tok) return INFER_E_OOM;
    pair_prompt(tok, n_prompt, 0, n_vocab);
    infer_status st = pair_decode(a, b, tok, NULL, n_prompt);
    free(tok);
    if (st == INFER_OK) st = pair_compare(a, b, n_prompt, n_vocab, s);
    if (st == INFER_OK) st = pair_steps(a, b, n_decode, n_vocab, s);
    return st;
}

infer_status pair_long(infer_ctx *a, infer_ctx *b, struct pair_stats *s) {
    const int32_t n_vocab = pair_vocab(b);
    int32_t tok[PAIR_LONG_BATCH];
    infer_status st = INFER_OK;
    for (int k = 0; k < 2 && st == INFER_OK; k++) {
        const int32_t n = k ? PAIR_LONG_FILL : PAIR_LONG_BATCH;
        pair_prompt(tok, n, k * PAIR_LONG_BATCH, n_vocab);
        st = pair_decode(a, b, tok, NULL, n);
        if (st == INFER_OK) st = pair_compare(a, b, n, n_vocab, s);
    }
    if (st == INFER_OK) st = pair_steps(a, b, PAIR_LONG_DECODE, n_vocab, s);
    return st;
}

infer_status pair_two_seq(infer_ctx *a, infer_ctx *b, struct pair_stats *s) {
    const int32_t n_vocab = pair_vocab(b);
    const int32_t tok[8] = {4, 8, 15, 16, 23, 42, 7, 9}, seq[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    infer_status st = pair_decode(a, b, tok, seq, 8);
    if (st == INFER_OK) st = pair_compare(a, b, 8, n_vocab, s);
    for (int k = 0; k < 6 && st == INFER_OK; k++) {
        const int32_t t2[2] = {10 + k, 20 + k}, s2[2] = {0, 1};
        st = pair_decode(a, b, t2, s2, 2);
        if (st == INFER_OK) st = pair_compare(a, b, 2, n_vocab, s);
    }
    return st;
}

infer_status pair_two_prefill(infer_ctx *a, infer_ctx *b, struct pair_stats *s) {
    const int32_t n_vocab = pair_vocab(b), n0 = PAIR_TWO_PREFILL_0, n = PAIR_TWO_PREFILL_0 + PAIR_TWO_PREFILL_1;
    int32_t tok[PAIR_TWO_PREFILL_0 + PAIR_TWO_PREFILL_1], seq[PAIR_TWO_PREFILL_0 + PAIR_TWO_PREFILL_1];
    pair_prompt(tok, n0, 0, n_vocab);
    pair_prompt(tok + n0, n - n0, 500, n_vocab);
    for (int32_t i = 0; i < n; i++) seq[i] = i >= n0;
    infer_status st = pair_decode(a, b, tok, seq, n);
    if (st == INFER_OK) st = pair_compare(a, b, n, n_vocab, s);
    for (int k = 0; k < 3 && st == INFER_OK; k++) {
        const int32_t t2[2] = {30 + k, 40 + k}, s2[2] = {0, 1};
        st = pair_decode(a, b, t2, s2, 2);
        if (st == INFER_OK) st = pair_compare(a, b, 2, n_vocab, s);
    }
    return st;
}

int pair_probe_mode(enum pair_mode *mode, char *msg, size_t msg_size) {
    struct infer_backend *dev = NULL;
    char why[512];
    *mode = PAIR_DEVICE;
    if (backend_cuda_create(0, &dev) != INFER_OK) {
        snprintf(msg, msg_size, "cuda backend: %s", infer_last_error());
        return 0;
    }
    int n_strict = 0;
    const int n = gpu_like_probe(dev, &n_strict, why, sizeof why);
    backend_free(dev);
    if (n < 0) {
        snprintf(msg, msg_size, "the probe failed on the device: %s", why);
        return 0;
    }
    *mode = n == 0 ? PAIR_EXACT : PAIR_DEVICE;
    if (n == 0)
        snprintf(msg, msg_size, "exact mode: every probed op is bit-identical to the reference");
    else
        snprintf(msg, msg_size, "device mode: %d probed ops round differently from the reference (%s)", n, why);
    if (n_strict == 0) return 1;
    snprintf(msg, msg_size, "ops that no device may round differently differ from the reference: %s", why);
    return 0;
}
