/* logits_cmp: row comparisons of the conformance tests (see logits_cmp.h). */
#include "logits_cmp.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

int cmp_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

double cmp_rel_l2(const float *a, const float *ref, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double max_abs_diff(const float *a, const float *ref, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - ref[i]);
        m = d > m ? d : m;
    }
    return m;
}

struct cmp cmp_rows_print(const char *label, const float *a, const float *ref, int n, int from, int to) {
    struct cmp r = {0, 0, from, 0, 0, 0};
    for (int i = from; i < to; i++) {
        const float *ai = a + (size_t)i * n, *ri = ref + (size_t)i * n;
        const double e = cmp_rel_l2(ai, ri, n);
        if (e > r.max_rel) r.max_rel = e, r.worst = i;
        r.mean_rel += e / (to - from);
        const int ours = cmp_argmax(ai, n), theirs = cmp_argmax(ri, n);
        if (ours == theirs) {
            r.agree++;
            continue;
        }
        const double gap = (double)ri[theirs] - ri[ours], err = max_abs_diff(ai, ri, n);
        const int tie = gap < err;
        r.ties += tie, r.flips += !tie;
        if (label)
            printf("  %s row %d: argmax llama.cpp %d, ours %d; llama.cpp's gap %.3g %s the row's max |error| %.3g "
                   "(%s)\n", label, i, theirs, ours, gap, tie ? "<" : ">=", err, tie ? "near-tie" : "NOT a near-tie");
    }
    return r;
}

struct cmp cmp_rows(const float *a, const float *ref, int n, int from, int to) {
    return cmp_rows_print(NULL, a, ref, n, from, to);
}

struct cmp cmp_worse(struct cmp a, struct cmp b) {
    const int b_worse = b.max_rel > a.max_rel;
    return (struct cmp){.max_rel = b_worse ? b.max_rel : a.max_rel,
                        .mean_rel = a.mean_rel > b.mean_rel ? a.mean_rel : b.mean_rel,
                        .worst = b_worse ? b.worst : a.worst,
                        .agree = a.agree < b.agree ? a.agree : b.agree,
                        .ties = a.ties > b.ties ? a.ties : b.ties,
                        .flips = a.flips > b.flips ? a.flips : b.flips};
}
