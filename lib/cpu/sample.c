/* sample: the CPU twin of kernels/sample.cu — one token per row of logits (kernels.h sample_args).
 * Why it calls into lib/sampler.c: the chain's definition lives there (sampler_chain, sampler_pick), and
 * the op must give exactly the token infer_sampler_sample gives for the same logits, penalties and u;
 * what is the op's own is the row layout, the penalties as (token, count) pairs (each row's window moved on by the
 * pushed tokens before it) and the caller's u.
 * Rows run in parallel; row r uses candidates at scratch + r * n_vocab {id, logit} pairs.
 */
#include "cpu.h"
#include "sampler.h"

/* The list of n survivors c (sampler_chain's, tempered): sampler_pick's weights over their total, in its order;
 * no survivor (min_p > 1) is sampler_pick's c[0] alone, logit -inf. */
static void sample_list_fill(struct sample_list *l, const struct sampler_cand *c, int32_t n) {
    if (n <= 1) {
        l->n = 1, l->id[0] = c[0].id, l->p[0] = 1.0, l->l[0] = n == 1 ? c[0].logit : -INFINITY;
        return;
    }
    float max = c[0].logit;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        l->id[i] = c[i].id;
        l->l[i] = c[i].logit;
        l->p[i] = exp((double)c[i].logit - max);
        total += l->p[i];
    }
    for (int32_t i = 0; i < n; i++) l->p[i] /= total;
    l->n = n;
}

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
            const int32_t t = a->pen[2 * j];
            const int32_t cnt = sample_row_count(a->pen_push, a->pen_drop, (int32_t)r, t, a->pen[2 * j + 1]);
            if (cnt > 0)
                c[t].logit = sample_penalise(c[t].logit, cnt, a->repeat_penalty, a->frequency_penalty,
                                             a->presence_penalty);
        }
        for (int32_t i = 0; a->pen_push && i < r; i++) { /* the pushed tokens no pair holds, each once */
            const int32_t t = a->pen_push[i];
            if (!sample_push_first(a->pen_push, i, a->pen, a->n_pen)) continue;
            const int32_t cnt = sample_row_count(a->pen_push, a->pen_drop, (int32_t)r, t, 0);
            if (cnt > 0)
                c[t].logit = sample_penalise(c[t].logit, cnt, a->repeat_penalty, a->frequency_penalty,
                                             a->presence_penalty);
        }
        const int32_t n = sampler_chain(c, a->n_vocab, &p);
        a->out[r] = sampler_pick(c, n, a->temp <= 0 ? 0.0 : a->u[r]);
        if (a->list) sample_list_fill(a->list + r, c, n);
    }
}

infer_status cpu_sample(const struct sample_args *a, struct pool *p) {
    if (!a->logits || !a->out || !a->scratch || a->n_rows < 0 || a->n_vocab < 1 || a->stride < a->n_vocab ||
        a->n_pen < 0 || (a->n_pen && !a->pen) || (a->temp > 0 && !a->u))
        return infer_fail(INFER_E_ARG, "cpu_sample: %d rows of %d logits (stride %lld), %d penalties: expected "
                          "buffers, n_vocab >= 1, stride >= n_vocab, and u when temp > 0", a->n_rows, a->n_vocab,
                          (long long)a->stride, a->n_pen);
    if (a->list && a->temp > 0 && !(a->top_k > 0 && a->top_k <= SAMPLE_MAX_CAND) && a->n_vocab > SAMPLE_MAX_CAND)
        return infer_fail(INFER_E_ARG, "cpu_sample: a list of %d logits with top-k %d: a list holds at most %d "
                          "survivors, so it needs top-k within that or a vocabulary that small", a->n_vocab, a->top_k,
                          SAMPLE_MAX_CAND);
    for (int32_t j = 0; j < a->n_pen; j++)
        if (a->pen[2 * j] < 0 || a->pen[2 * j] >= a->n_vocab || a->pen[2 * j + 1] < 1)
            return infer_fail(INFER_E_ARG, "cpu_sample: penalty pair %d (token %d, count %d): expected a token "
                              "0..%d and a count >= 1", j, a->pen[2 * j], a->pen[2 * j + 1], a->n_vocab - 1);
    for (int32_t j = 0; a->pen_push && j + 1 < a->n_rows; j++) {
        const int32_t t = a->pen_push[j], d = a->pen_drop ? a->pen_drop[j] : 0;
        if (t < 0 || t >= a->n_vocab || !a->pen_drop || d >= a->n_vocab || (d <= -2 && -2 - d >= j))
            return infer_fail(INFER_E_ARG, "cpu_sample: pushed token %d (%d), dropped %d: expected a token 0..%d and "
                              "a drop of -1, a token or -2 - i for an earlier push i", j, t, d, a->n_vocab - 1);
    }
    pool_for(p, a->n_rows, 1, sample_rows, (void *)a);
    return INFER_OK;
}
