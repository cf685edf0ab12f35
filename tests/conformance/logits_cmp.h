/* logits_cmp: how the conformance tests compare rows of logits (or hidden states) with llama.cpp's:
 * relative L2 error per row and argmax agreement, summarised over a range of rows. */
#ifndef TEST_LOGITS_CMP_H
#define TEST_LOGITS_CMP_H

struct cmp {
    double max_rel, mean_rel; /* relative L2 error ||a - ref|| / ||ref|| per row: largest, mean */
    int agree;                /* rows with the same argmax */
};

/* The first index of the largest of n values. */
int cmp_argmax(const float *x, int n);
/* ||a - ref|| / ||ref|| in double (the absolute norm when ref is all zero). */
double cmp_rel_l2(const float *a, const float *ref, int n);
/* Rows from..to-1 of a and ref, n values each. */
struct cmp cmp_rows(const float *a, const float *ref, int n, int from, int to);
/* The larger spread of the two (the smaller agreement). */
struct cmp cmp_worse(struct cmp a, struct cmp b);

#endif
