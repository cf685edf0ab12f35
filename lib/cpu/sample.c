/* sample: the CPU twin of kernels/sample.cu — one token per row of logits (kernels.h sample_args).
 * Why it calls into lib/sampler.c: the chain's definition lives there (sampler_chain, sampler_pick), and
 * the op must give exactly the token infer_sampler_sample gives for the same logits, penalties and u;
 * what is the op's own is the row layout, the penalties as (token, count) pairs and the caller's u.
 * Rows run in parallel; row r uses candidates at scratch + r * n_vocab {id, logit} pairs.
 */
#include "cpu.h"
#include "sampler.h"

static void sample_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct sample_args *a = ctx;
    const infer_sampler_params p = {a->temp, a->top_k, a->top_p, a->min_p, a->repeat_penalty, a->presence_penalty,
                                    a->frequency_penalty, 0, 0};
    for (int64_t r = r0; r < r1; r++) {
        struct sampler_cand *c = (struct sampler_cand *)a->scratch + r * a->n_vocab;
        const float *l = a->logits + r * a->stride;
        for (int32_t i = 0; i < a->n_vocab; i++) {
            c[i].id = i;
            c[i].logit = isnan(l[i]) ? -INFINITY : l[i];
        }
        for (int32_t j = 0; j < a->n_pen; j++) {
            float *v = &c[a->pen[2 * j]].logit;
            *v = sample_penalise(*v, a->pen[2 * j + 1], a->repeat_penalty, a->frequency_penalty, a->presence_penalty);
        }
        const int32_t n = sampler_chain(c, a->n_vocab, &p);
        a->out[r] = sampler_pick(c, n, a->temp <= 0 ? 0.0 : a->u[r]);
    }
}

infer_status cpu_sample(const struct sample_args *a, struct pool *p) {
    if (!a->logits || !a->out || !a->scratch || a->n_rows < 0 || a->n_vocab < 1 || a->stride < a->n_vocab ||
        a->n_pen < 0 || (a->n_pen && !a->pen) || (a->temp > 0 && !a->u))
        return infer_fail(INFER_E_ARG, "cpu_sample: %d rows of %d logits (stride %lld), %d penalties: expected "
                          "buffers, n_vocab >= 1, stride >= n_vocab, and u when temp > 0", a->n_rows, a->n_vocab,
                          (long long)a->stride, a->n_pen);
    for (int32_t j = 0; j < a->n_pen; j++)
        if (a->pen[2 * j] < 0 || a->pen[2 * j] >= a->n_vocab || a->pen[2 * j + 1] < 1)
            return infer_fail(INFER_E_ARG, "cpu_sample: penalty pair %d (token %d, count %d): expected a token "
                              "0..%d and a count >= 1", j, a->pen[2 * j], a->pen[2 * j + 1], a->n_vocab - 1);
    pool_for(p, a->n_rows, 1, sample_rows, (void *)a);
    return INFER_OK;
}
