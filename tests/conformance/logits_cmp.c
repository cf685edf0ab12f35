/* logits_cmp: row comparisons of the conformance tests (see logits_cmp.h). */
#include "logits_cmp.h"

#include <math.h>
#include <stddef.h>

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

struct cmp cmp_rows(const float *a, const float *ref, int n, int from, int to) {
    struct cmp r = {0, 0, 0};
    for (int i = from; i < to; i++) {
        double e = cmp_rel_l2(a + (size_t)i * n, ref + (size_t)i * n, n);
        r.max_rel = e > r.max_rel ? e : r.max_rel;
        r.mean_rel += e / (to - from);
        r.agree += cmp_argmax(a + (size_t)i * n, n) == cmp_argmax(ref + (size_t)i * n, n);
    }
    return r;
}

struct cmp cmp_worse(struct cmp a, struct cmp b) {
    return (struct cmp){a.max_rel > b.max_rel ? a.max_rel : b.max_rel,
                        a.mean_rel > b.mean_rel ? a.mean_rel : b.mean_rel, a.agree < b.agree ? a.agree : b.agree};
}
