/* logits_cmp: how the conformance tests compare rows of logits (or hidden states) with llama.cpp's:
 * relative L2 error per row and argmax agreement, summarised over a range of rows. */
#ifndef TEST_LOGITS_CMP_H
#define TEST_LOGITS_CMP_H

struct cmp {
    double max_rel, mean_rel; /* relative L2 error ||a - ref|| / ||ref|| per row: largest, mean */
    int worst;                /* the row of max_rel */
    int agree;                /* rows with the same argmax */
    /* Rows whose argmax differs, split by whether it is a near-tie: llama.cpp's gap between its top
     * logit and its logit of our top token is smaller than the largest |a - ref| of that row (the
     * error observed there), so rounding alone can explain the flip; flips: every other mismatch. */
    int ties, flips;
};

/* The first index of the largest of n values. */
int cmp_argmax(const float *x, int n);
/* ||a - ref|| / ||ref|| in double (the absolute norm when ref is all zero). */
double cmp_rel_l2(const float *a, const float *ref, int n);
/* Rows from..to-1 of a and ref, n values each. */
struct cmp cmp_rows(const float *a, const float *ref, int n, int from, int to);
/* The same, and one line per argmax mismatch (row, both tokens, llama.cpp's gap, the row's largest
 * error, near-tie or not), each starting with label. */
struct cmp cmp_rows_print(const char *label, const float *a, const float *ref, int n, int from, int to);
/* The larger spread of the two (the smaller agreement). */
struct cmp cmp_worse(struct cmp a, struct cmp b);

#endif
