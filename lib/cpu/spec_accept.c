/* spec_accept: the CPU twin of kernels/spec_accept.cu (kernels.h spec_accept_args): the same rule, the same
 * double arithmetic in the same order (the shared spec_residual / spec_residual_pick), so both backends keep and
 * draw the same tokens from the same lists and uniforms. One thread: k <= INFER_MAX_DRAFT rows of at most
 * SAMPLE_MAX_CAND survivors. */
#include "cpu.h"

infer_status cpu_spec_accept(const struct spec_accept_args *a, struct pool *p) {
    (void)p;
    const int greedy = !a->target && !a->draft && !a->u_acc && !a->u_res;
    if ((!greedy && (!a->target || !a->draft || !a->u_acc || !a->u_res)) || !a->drafts || !a->p_draw || !a->out ||
        a->k < 0)
        return infer_fail(INFER_E_ARG, "cpu_spec_accept: k %d: expected k >= 0 and every buffer (greedy: no lists "
                          "and no uniforms)", a->k);
    if (greedy) {
        spec_accept_greedy(a);
        return INFER_OK;
    }
    for (int32_t i = 0; i <= a->k; i++)
        if (a->target[i].n < 1 || a->target[i].n > SAMPLE_MAX_CAND || (i < a->k && (a->draft[i].n < 1 ||
                                                                                     a->draft[i].n > SAMPLE_MAX_CAND)))
            return infer_fail(INFER_E_ARG, "cpu_spec_accept: row %d's lists hold %d and %d survivors: expected 1..%d",
                              i, a->target[i].n, i < a->k ? a->draft[i].n : 1, SAMPLE_MAX_CAND);
    double r[SAMPLE_MAX_CAND];
    int32_t n = 0;
    for (int32_t i = 0; i < a->k; i++) {
        const int32_t d = a->drafts[i];
        const double pd = sample_list_prob(a->target + i, d), qd = sample_list_prob(a->draft + i, d);
        if ((a->force >= 0 && i < a->force) || (qd > 0 && a->u_acc[i] * qd < pd)) {
            a->out[1 + n++] = d;
            if (i == a->force) goto done;
            continue;
        }
        for (int32_t c = 0; c < a->target[i].n; c++) r[c] = spec_residual(a->target + i, a->draft + i, c);
        a->out[1 + n++] = spec_residual_pick(a->target + i, r, a->u_res[i], a->p_draw[i]);
        goto done;
    }
    a->out[1 + n++] = a->p_draw[a->k];
done:
    a->out[0] = n;
    return INFER_OK;
}
