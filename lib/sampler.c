/* sampler: picks the next token from a row of logits (include/infer.h "sampling").
 *
 * The stages and their rules are llama.cpp's default chain, in its order:
 *   penalties  over the last penalty_last_n accepted tokens: a token seen c > 0 times has its logit
 *              divided by repeat_penalty when positive (multiplied when <= 0), then lowered by
 *              c * frequency_penalty + presence_penalty;
 *   top-k      keeps the k largest logits;
 *   top-p      softmax over what is left, sorted descending; keeps the shortest prefix whose
 *              cumulative probability reaches top_p;
 *   min-p      keeps the tokens with logit >= max logit + log(min_p) (probability >= min_p * max);
 *   temp       divides the logits by temp; then one draw from their softmax.
 * temp <= 0 is greedy: the argmax of the penalised logits (the filters always keep the maximum).
 * Ties go to the lowest id everywhere, so results do not depend on the sort's stability.
 *
 * Why this shape: the candidates are {id, logit} pairs filtered in place. top-k selects with a
 * quickselect and sorts only k entries; without top-k, min-p (a threshold on the logit, which depends
 * only on the maximum) drops the tail before sorting, with top-p's normaliser taken over the set
 * before that drop, which gives exactly the sequential result (both keep a prefix of one order).
 * The draw uses a private xoshiro256** seeded with splitmix64: the same seed gives the same tokens
 * on every platform, and nothing else in the process can disturb the sequence. Every non-greedy pick
 * takes exactly one uniform u, drawn before the chain runs; the chain is then a function of (logits,
 * penalties, u), which the backends' sample op (kernels.h) computes where the logits live: infer_sample
 * hands it u and the window's (token, count) pairs and copies back only the token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward.h"
#include "kernels.h"
#include "sampler.h"

struct infer_sampler {
    infer_sampler_params p;
    int32_t n_vocab;
    struct sampler_cand *cand; /* (n_vocab) working set */
    int32_t *count;            /* (n_vocab) occurrences of each token in the ring */
    int32_t *ring;             /* (penalty_last_n) last accepted tokens */
    int32_t ring_head, ring_len;
    int32_t *pairs;            /* (penalty_last_n, 2) infer_sample's penalty list */
    uint64_t rng[4];
};

infer_sampler_params infer_sampler_params_default(void) {
    infer_sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 0.0f, 0.0f, 64, 0};
    return p;
}

static uint64_t sampler_splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t sampler_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t sampler_next(uint64_t *s) {
    const uint64_t r = sampler_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = sampler_rotl(s[3], 45);
    return r;
}

void infer_sampler_reset(infer_sampler *s) {
    if (!s) return;
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = sampler_splitmix(&x);
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->ring_head = s->ring_len = 0;
}

infer_status infer_sampler_create(const infer_sampler_params *p, int32_t n_vocab, infer_sampler **out) {
    if (!out) return infer_fail(INFER_E_ARG, "infer_sampler_create: out is NULL");
    *out = NULL;
    infer_sampler_params d = infer_sampler_params_default();
    if (!p) p = &d;
    if (n_vocab < 1) return infer_fail(INFER_E_ARG, "infer_sampler_create: n_vocab %d: expected >= 1", n_vocab);
    if (isnan(p->temp) || isnan(p->top_p) || isnan(p->min_p) || !isfinite(p->repeat_penalty) ||
        p->repeat_penalty <= 0 || !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return infer_fail(INFER_E_ARG, "infer_sampler_create: temp %g top_p %g min_p %g repeat_penalty %g presence %g "
                          "frequency %g: expected numbers, repeat_penalty > 0", (double)p->temp, (double)p->top_p,
                          (double)p->min_p, (double)p->repeat_penalty, (double)p->presence_penalty,
                          (double)p->frequency_penalty);
    if (p->penalty_last_n < 0)
        return infer_fail(INFER_E_ARG, "infer_sampler_create: penalty_last_n %d: expected >= 0", p->penalty_last_n);
    infer_sampler *s = xcalloc(1, sizeof *s);
    if (!s) return INFER_OOM("sampler");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = xmalloc((size_t)n_vocab * sizeof *s->cand);
    s->count = xcalloc((size_t)n_vocab, sizeof *s->count);
    s->ring = xmalloc((size_t)(p->penalty_last_n ? p->penalty_last_n : 1) * sizeof *s->ring);
    s->pairs = xmalloc((size_t)(p->penalty_last_n ? p->penalty_last_n : 1) * 2 * sizeof *s->pairs);
    if (!s->cand || !s->count || !s->ring || !s->pairs) {
        infer_sampler_free(s);
        return INFER_OOM("sampler arrays");
    }
    infer_sampler_reset(s);
    *out = s;
    return INFER_OK;
}

void infer_sampler_free(infer_sampler *s) {
    if (!s) return;
    xfree(s->cand);
    xfree(s->count);
    xfree(s->ring);
    xfree(s->pairs);
    xfree(s);
}

void infer_sampler_accept(infer_sampler *s, int32_t token) {
    if (!s || token < 0 || token >= s->n_vocab || s->p.penalty_last_n == 0) return;
    const int32_t n = s->p.penalty_last_n;
    if (s->ring_len == n) {
        s->count[s->ring[s->ring_head]]--;
    } else {
        s->ring_len++;
    }
    s->ring[s->ring_head] = token;
    s->ring_head = (s->ring_head + 1) % n;
    s->count[token]++;
}

/* Descending logit, then ascending id: a total order, so every sort and selection is deterministic. */
static int sampler_before(const struct sampler_cand *a, const struct sampler_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int sampler_cmp(const void *x, const void *y) {
    const struct sampler_cand *a = x, *b = y;
    return sampler_before(a, b) ? -1 : sampler_before(b, a) ? 1 : 0;
}

/* Moves the k first entries of the order to c[0..k) (unsorted): Hoare quickselect, median of three. */
static void sampler_select(struct sampler_cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        struct sampler_cand a = c[lo], b = c[mid], d = c[hi], piv;
        if (sampler_before(&a, &b))
            piv = sampler_before(&b, &d) ? b : sampler_before(&a, &d) ? d : a;
        else
            piv = sampler_before(&a, &d) ? a : sampler_before(&b, &d) ? d : b;
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (sampler_before(&c[i], &piv)) i++;
            while (sampler_before(&piv, &c[j])) j--;
            if (i <= j) {
                struct sampler_cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

static int sampler_penalties_on(const infer_sampler_params *p) {
    return p->penalty_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

static void sampler_penalties(infer_sampler *s) {
    const infer_sampler_params *p = &s->p;
    if (!sampler_penalties_on(p)) return;
    for (int32_t i = 0; i < s->ring_len; i++) {
        const int32_t t = s->ring[i], c = s->count[t];
        if (c <= 0) continue; /* already applied: counts are negated below until the loop ends */
        s->cand[t].logit = sample_penalise(s->cand[t].logit, c, p->repeat_penalty, p->frequency_penalty,
                                           p->presence_penalty);
        s->count[t] = -c;
    }
    for (int32_t i = 0; i < s->ring_len; i++)
        if (s->count[s->ring[i]] < 0) s->count[s->ring[i]] = -s->count[s->ring[i]];
}

int32_t sampler_filter(infer_sampler *s, const float *logits, const struct sampler_cand **out) {
    const infer_sampler_params *p = &s->p;
    struct sampler_cand *c = s->cand;
    int32_t n = s->n_vocab;
    *out = c;
    for (int32_t i = 0; i < n; i++) {
        c[i].id = i;
        c[i].logit = isnan(logits[i]) ? -INFINITY : logits[i]; /* NaN would break the total order */
    }
    sampler_penalties(s);
    return sampler_chain(c, n, p);
}

int32_t sampler_chain(struct sampler_cand *c, int32_t n, const infer_sampler_params *p) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > c[best].logit) best = i;
    if (p->temp <= 0 || c[best].logit == -INFINITY) {
        c[0] = c[best];
        return 1;
    }
    const float max = c[best].logit;
    int sorted = 0;
    if (p->top_k > 0 && p->top_k < n) {
        sampler_select(c, n, p->top_k);
        n = p->top_k;
        qsort(c, (size_t)n, sizeof *c, sampler_cmp);
        sorted = 1;
    }
    /* top-p's probabilities are normalised over the set it receives (after top-k) */
    float z = 0.0f;
    for (int32_t i = 0; i < n; i++) z += expf(c[i].logit - max);
    if (p->min_p > 0.0f) {
        const float min_logit = max + logf(p->min_p);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (c[i].logit >= min_logit) c[k++] = c[i];
        n = k;
    }
    if (p->top_p < 1.0f) {
        if (!sorted) qsort(c, (size_t)n, sizeof *c, sampler_cmp);
        float cum = 0.0f;
        for (int32_t i = 0; i < n; i++) {
            cum += expf(c[i].logit - max) / z;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->temp != 1.0f)
        for (int32_t i = 0; i < n; i++) c[i].logit /= p->temp;
    return n;
}

int32_t sampler_pick(const struct sampler_cand *c, int32_t n, double u) {
    if (n <= 1) return c[0].id; /* the loop below would pick it too: u < 1 = total */
    /* softmax over the survivors, inverse CDF in double */
    float max = c[0].logit;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    double total = 0.0, cum = 0.0;
    for (int32_t i = 0; i < n; i++) total += exp((double)c[i].logit - max);
    u *= total;
    for (int32_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - max);
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id; /* rounding left u at the very top */
}

int32_t sampler_sample_u(infer_sampler *s, const float *logits, double u) {
    const struct sampler_cand *c;
    const int32_t n = sampler_filter(s, logits, &c);
    return sampler_pick(c, n, u);
}

int32_t infer_sampler_sample(infer_sampler *s, const float *logits) {
    if (!s || !logits) return -1;
    /* one uniform per call when temp > 0, whatever the chain leaves: the generator's sequence then does
     * not depend on the logits, and infer_sample (which draws before the chain runs) matches it */
    const double u = sampler_is_greedy(s) ? 0.0 : sampler_uniform(s);
    const int32_t pick = sampler_sample_u(s, logits, u);
    infer_sampler_accept(s, pick);
    return pick;
}

int sampler_is_greedy(const infer_sampler *s) { return s->p.temp <= 0; }

double sampler_uniform(infer_sampler *s) { return (double)(sampler_next(s->rng) >> 11) * 0x1.0p-53; }

int32_t sampler_penalty_pairs(infer_sampler *s, int32_t *pairs) {
    if (!sampler_penalties_on(&s->p)) return 0;
    int32_t n = 0;
    for (int32_t i = 0; i < s->ring_len; i++) { /* each token once: counts negated until the loop ends */
        const int32_t t = s->ring[i], c = s->count[t];
        if (c <= 0) continue;
        pairs[2 * n] = t, pairs[2 * n + 1] = c, n++;
        s->count[t] = -c;
    }
    for (int32_t i = 0; i < n; i++) s->count[pairs[2 * i]] = pairs[2 * i + 1];
    return n;
}

void sampler_probs(infer_sampler *s, const float *logits, float *probs) {
    const struct sampler_cand *c;
    const int32_t n = sampler_filter(s, logits, &c);
    memset(probs, 0, (size_t)s->n_vocab * sizeof(float));
    float max = c[0].logit;
    for (int32_t i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) total += exp((double)c[i].logit - max);
    for (int32_t i = 0; i < n; i++) probs[c[i].id] = (float)(exp((double)c[i].logit - max) / total);
}

int32_t sampler_draw(infer_sampler *s, const float *probs, double total) {
    const double u = sampler_uniform(s) * total;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last = i;
        if (u < cum) return i;
    }
    return last; /* rounding left u at the very top */
}

int32_t sampler_vocab(const infer_sampler *s) { return s->n_vocab; }

/* infer_sample's buffer in c's backend memory: u (double) | tokens (n_rows int32 at 8, padded to 16 bytes) |
 * penalty pairs (room for the window) and the drops of INFER_MAX_DRAFT pushes (sampler_rows_penalties) | the op's
 * scratch for n_rows rows | one sample_list (sampler_list_off). Grown on first use, freed with the context. */
static size_t sampler_list_off(size_t scr_off, int32_t n_rows, int32_t n_vocab) {
    return (scr_off + sample_scratch_bytes(n_rows, n_vocab) + 15) & ~(size_t)15;
}

static infer_status sampler_ctx_buf(infer_ctx *c, const infer_sampler *s, int32_t n_rows, size_t *pen_off,
                                    size_t *scr_off) {
    const size_t pen_cap = ((size_t)(s->p.penalty_last_n ? s->p.penalty_last_n : 1) * 2 + INFER_MAX_DRAFT) *
                           sizeof(int32_t);
    *pen_off = (8 + (size_t)n_rows * sizeof(int32_t) + 15) & ~(size_t)15;
    *scr_off = *pen_off + ((pen_cap + 15) & ~(size_t)15);
    const size_t need = sampler_list_off(*scr_off, n_rows, s->n_vocab) + sizeof(struct sample_list);
    if (c->sample_buf_bytes >= need) return INFER_OK;
    c->be->ops->free(c->be, c->sample_buf);
    c->sample_buf = NULL, c->sample_buf_bytes = 0;
    infer_status st = c->be->ops->alloc(c->be, need, &c->sample_buf);
    if (st == INFER_OK) c->sample_buf_bytes = need;
    return st;
}

/* The sample op's arguments for one row l of n logits: s's chain, its penalty pairs pen (n_pen, in b's memory), and
 * infer_sample's buffer b (sampler_ctx_buf): u at 0, the token at 8, the scratch at scr_off. */
static struct sample_args sampler_op_args(const infer_sampler *s, const float *l, int32_t n, const int32_t *pen,
                                          int32_t n_pen, char *b, size_t scr_off) {
    return (struct sample_args){.logits = l, .stride = n, .n_rows = 1, .n_vocab = n, .pen = n_pen ? pen : NULL,
                                .n_pen = n_pen, .repeat_penalty = s->p.repeat_penalty,
                                .frequency_penalty = s->p.frequency_penalty, .presence_penalty = s->p.presence_penalty,
                                .top_k = s->p.top_k, .top_p = s->p.top_p, .min_p = s->p.min_p, .temp = s->p.temp,
                                .u = (const double *)b, .out = (int32_t *)(b + 8), .scratch = b + scr_off};
}

int sampler_has_penalties(const infer_sampler *s) { return sampler_penalties_on(&s->p); }

int sampler_lists_ok(const infer_sampler *s) {
    const int small_k = s->p.top_k > 0 && s->p.top_k <= SAMPLE_MAX_CAND;
    return !sampler_is_greedy(s) && (small_k || s->n_vocab <= SAMPLE_MAX_CAND);
}

infer_status sampler_rows_penalties(infer_ctx *c, infer_sampler *s, int32_t n_rows, const int32_t *push,
                                    struct sample_args *a) {
    infer_status st = INFER_OK;
    if (!sampler_penalties_on(&s->p)) return INFER_OK;
    if (n_rows < 1 || n_rows > INFER_MAX_DRAFT + 1)
        return infer_fail(INFER_E_ARG, "sampler_rows_penalties: %d rows: expected 1..%d", n_rows, INFER_MAX_DRAFT + 1);
    /* The window, oldest first, then the pushes: push j takes the window past n_win tokens once ring_len + j
     * reaches n_win, and the token at index ring_len + j - n_win of that sequence leaves. */
    const int32_t n_win = s->p.penalty_last_n, first = s->ring_len < n_win ? 0 : s->ring_head;
    int32_t drop[INFER_MAX_DRAFT];
    for (int32_t j = 0; j + 1 < n_rows; j++) {
        const int32_t e = s->ring_len + j - n_win;
        drop[j] = e < 0 ? -1 : e < s->ring_len ? s->ring[(first + e) % n_win] : -2 - (e - s->ring_len);
    }
    const int32_t n_pen = sampler_penalty_pairs(s, s->pairs);
    size_t pen_off, scr_off;
    TRY(sampler_ctx_buf(c, s, 1, &pen_off, &scr_off));
    int32_t *pen = (int32_t *)((char *)c->sample_buf + pen_off), *drop_dev = pen + 2 * n_win;
    if (n_pen) TRY(c->be->ops->upload(c->be, pen, s->pairs, (size_t)n_pen * 2 * sizeof *pen));
    if (n_rows > 1) TRY(c->be->ops->upload(c->be, drop_dev, drop, (size_t)(n_rows - 1) * sizeof *drop));
    if (c->on_device) c->bus_bytes += ((size_t)n_pen * 2 + (size_t)(n_rows - 1)) * sizeof *pen;
    a->pen = n_pen ? pen : NULL, a->n_pen = n_pen;
    a->pen_push = n_rows > 1 ? push : NULL, a->pen_drop = n_rows > 1 ? drop_dev : NULL;
    a->repeat_penalty = s->p.repeat_penalty;
    a->frequency_penalty = s->p.frequency_penalty, a->presence_penalty = s->p.presence_penalty;
fail:
    return st;
}

struct sample_args sampler_list_args(const infer_sampler *s, const float *logits, int32_t n_rows, const double *u,
                                     int32_t *out, void *scratch, struct sample_list *list) {
    return (struct sample_args){.logits = logits, .stride = s->n_vocab, .n_rows = n_rows, .n_vocab = s->n_vocab,
                                .repeat_penalty = 1.0f, .top_k = s->p.top_k, .top_p = s->p.top_p,
                                .min_p = s->p.min_p, .temp = s->p.temp, .u = u, .out = out, .scratch = scratch,
                                .list = list};
}

void sampler_chain_key(const infer_sampler *s, int32_t key[4]) {
    key[0] = s->p.top_k;
    memcpy(key + 1, &s->p.temp, sizeof(float));
    memcpy(key + 2, &s->p.top_p, sizeof(float));
    memcpy(key + 3, &s->p.min_p, sizeof(float));
}

/* Rank k's sample op over row `row` of its head part (its vocabulary rows head_v0..), s's chain: the n_pen window
 * pairs (token, count) that fall in its rows, mapped to them in loc (room for n_pen) and uploaded to k's infer_sample
 * buffer (sampler_ctx_buf; *scr_off: its scratch offset there). */
static infer_status sample_tp_rank_args(infer_ctx *k, infer_sampler *s, int32_t row, const int32_t *pairs,
                                        int32_t n_pen, int32_t *loc, struct sample_args *a, size_t *scr_off) {
    infer_status st = INFER_OK;
    const int64_t v0 = k->head_v0, rows = k->head_rows;
    int32_t n_loc = 0;
    for (int32_t j = 0; j < n_pen; j++)
        if (pairs[2 * j] >= v0 && pairs[2 * j] < v0 + rows) {
            loc[2 * n_loc] = pairs[2 * j] - (int32_t)v0;
            loc[2 * n_loc + 1] = pairs[2 * j + 1];
            n_loc++;
        }
    size_t pen_off;
    TRY(sampler_ctx_buf(k, s, 1, &pen_off, scr_off));
    char *b = k->sample_buf;
    if (n_loc) TRY(k->be->ops->upload(k->be, b + pen_off, loc, (size_t)n_loc * 2 * sizeof(int32_t)));
    *a = sampler_op_args(s, k->head_part + (size_t)row * (size_t)rows, (int32_t)rows, (const int32_t *)(b + pen_off),
                         n_loc, b, *scr_off);
fail:
    return st;
}

/* Greedy sampling over a tensor-parallel group whose logits are not gathered yet (forward_tp.c): each rank's sample
 * op takes the argmax of its own vocabulary rows (the window's penalties of those rows), and the best of the ranks'
 * picks is the token, ties to the lowest id as in the whole row (the ranks hold ascending rows): an int and a float
 * per rank cross the bus instead of the row. *pick stays SAMPLE_REFUSED when a rank's backend cannot. */
static infer_status sample_tp_greedy(infer_ctx *c, infer_sampler *s, int32_t row, int32_t *pick) {
    infer_status st = INFER_OK;
    const int32_t n_pen = sampler_penalty_pairs(s, s->pairs);
    int32_t *loc = xmalloc((size_t)(n_pen > 0 ? n_pen : 1) * 2 * sizeof *loc);
    if (!loc) return INFER_OOM("infer_sample: a rank's penalty pairs");
    float best = 0.0f;
    int32_t best_id = -1, refused = 0;
    for (int32_t r = 0; r < c->tp_n && !refused; r++) {
        infer_ctx *k = c->tp[r];
        const int64_t v0 = k->head_v0, rows = k->head_rows;
        struct sample_args a;
        size_t scr_off;
        TRY(sample_tp_rank_args(k, s, row, s->pairs, n_pen, loc, &a, &scr_off));
        char *b = k->sample_buf;
        const float *l = a.logits;
        st = k->be->ops->sample ? k->be->ops->sample(k->be, &a) : INFER_E_UNSUPPORTED;
        if (st == INFER_E_UNSUPPORTED) {
            st = INFER_OK;
            refused = 1;
            break;
        }
        TRY(st);
        int32_t p = SAMPLE_REFUSED;
        float v = 0.0f;
        TRY(k->be->ops->download(k->be, &p, b + 8, sizeof p));
        if (p < 0 || p >= rows) {
            refused = 1;
            break;
        }
        TRY(k->be->ops->download(k->be, &v, l + p, sizeof v));
        /* the value the rank's op compared: NaN as -inf, then its penalty */
        v = isnan(v) ? -INFINITY : v;
        const int32_t seen = n_pen ? s->count[v0 + p] : 0;
        if (seen > 0) v = sample_penalise(v, seen, s->p.repeat_penalty, s->p.frequency_penalty, s->p.presence_penalty);
        if (best_id < 0 || v > best) {
            best = v;
            best_id = (int32_t)v0 + p;
        }
        c->bus_bytes += sizeof p + sizeof v;
    }
    if (!refused) *pick = best_id;
fail:
    xfree(loc);
    return st;
}

/* Sampling at temperature > 0 over a tensor-parallel group whose logits are not gathered yet, for a chain cut by a
 * top-k the sample op's lists hold: each rank's sample op lists its rows' top k (penalised with the window's pairs of
 * those rows; temp 1, no top-p / min-p, so the list's logits are the penalised logits themselves), and the host runs
 * the chain's stages after the penalties (sampler_chain) and the draw with u over the union of the ranks' lists. The
 * row's top k are in that union (whatever outranks a token in its rank's rows outranks it in the row), so with the
 * union larger than k the chain selects, sorts and sums exactly what it would over the whole row: the same token. A
 * list per rank crosses the bus instead of the row. *pick stays SAMPLE_REFUSED where this does not apply. */
static infer_status sample_tp_topk(infer_ctx *c, infer_sampler *s, int32_t row, double u, int32_t *pick) {
    infer_status st = INFER_OK;
    const int32_t k_top = s->p.top_k;
    if (sampler_is_greedy(s) || k_top <= 0 || k_top > SAMPLE_MAX_CAND) return INFER_OK;
    const int32_t n_pen = sampler_penalty_pairs(s, s->pairs);
    int32_t *loc = xmalloc((size_t)(n_pen > 0 ? n_pen : 1) * 2 * sizeof *loc);
    struct sample_list *list = xmalloc(sizeof *list);
    struct sampler_cand *u_cand = xmalloc((size_t)c->tp_n * (size_t)k_top * sizeof *u_cand);
    int32_t n_union = 0, refused = 0;
    if (!loc || !list || !u_cand) {
        st = INFER_OOM("infer_sample: the ranks' lists");
        goto fail;
    }
    for (int32_t r = 0; r < c->tp_n && !refused; r++) {
        infer_ctx *k = c->tp[r];
        const int64_t v0 = k->head_v0, rows = k->head_rows;
        struct sample_args a;
        size_t scr_off;
        TRY(sample_tp_rank_args(k, s, row, s->pairs, n_pen, loc, &a, &scr_off));
        char *b = k->sample_buf;
        const double u_rank = 0.0; /* the rank's own draw is not used */
        TRY(k->be->ops->upload(k->be, b, &u_rank, sizeof u_rank));
        a.temp = 1.0f, a.top_p = 1.0f, a.min_p = 0.0f; /* the top k alone, their logits as penalised (s's top_k kept) */
        a.list = (struct sample_list *)(b + sampler_list_off(scr_off, 1, s->n_vocab));
        st = k->be->ops->sample ? k->be->ops->sample(k->be, &a) : INFER_E_UNSUPPORTED;
        if (st == INFER_E_UNSUPPORTED) {
            st = INFER_OK;
            refused = 1;
            break;
        }
        TRY(st);
        TRY(k->be->ops->download(k->be, list, a.list, sizeof *list));
        c->bus_bytes += sizeof *list;
        if (list->n < 1 || list->n > k_top || list->n > rows) {
            refused = 1;
            break;
        }
        for (int32_t i = 0; i < list->n; i++) {
            u_cand[n_union].id = (int32_t)v0 + list->id[i];
            u_cand[n_union].logit = list->l[i];
            n_union++;
        }
    }
    if (!refused && n_union > k_top) { /* else the chain would skip its top-k here: gather the row instead */
        const int32_t n = sampler_chain(u_cand, n_union, &s->p);
        *pick = sampler_pick(u_cand, n, u);
    }
fail:
    xfree(loc);
    xfree(list);
    xfree(u_cand);
    return st;
}

/* A pick that came back from h's backend: an error unless it is a token id. */
static infer_status sampler_pick_check(const infer_ctx *h, int32_t pick, int32_t n_vocab) {
    if (pick >= 0 && pick < n_vocab) return INFER_OK;
    return infer_fail(INFER_E_DEVICE, "infer_sample: the %s backend picked token %d: expected 0..%d", h->be->ops->name,
                      pick, n_vocab - 1);
}

infer_status infer_sample(infer_ctx *c, infer_sampler *s, int32_t i, int32_t *token) {
    infer_status st = INFER_OK;
    if (token) *token = -1;
    if (!c || !s || !token) return infer_fail(INFER_E_ARG, "infer_sample: context, sampler or token is NULL");
    const int32_t n_vocab = c->m->hp.n_vocab, t = i < 0 ? c->n_tokens + i : i;
    if (s->n_vocab != n_vocab)
        return infer_fail(INFER_E_ARG, "infer_sample: sampler for %d tokens: expected the model's %d", s->n_vocab,
                          n_vocab);
    if (t < 0 || t >= c->n_tokens || c->out_row[t] < 0)
        return infer_fail(INFER_E_ARG, "infer_sample: token %d of the last batch (%d tokens): expected one whose "
                          "logits were asked for", i, c->n_tokens);
    const double u = sampler_is_greedy(s) ? 0.0 : sampler_uniform(s);
    int32_t pick = SAMPLE_REFUSED;
    infer_ctx *h = forward_head_stage(c); /* where the logits are */
    if (c->tp_head_pending && sampler_is_greedy(s)) TRY(sample_tp_greedy(c, s, c->out_row[t], &pick));
    if (c->tp_head_pending && !sampler_is_greedy(s)) TRY(sample_tp_topk(c, s, c->out_row[t], u, &pick));
    if (pick == SAMPLE_REFUSED && c->tp_head_pending) TRY(forward_tp_gather(c)); /* the whole row, on rank 0 */
    if (pick == SAMPLE_REFUSED && h->be->ops->sample) {
        size_t pen_off, scr_off;
        TRY(sampler_ctx_buf(h, s, 1, &pen_off, &scr_off));
        char *b = h->sample_buf;
        const int32_t n_pen = sampler_penalty_pairs(s, s->pairs);
        TRY(h->be->ops->upload(h->be, b, &u, sizeof u));
        if (n_pen) TRY(h->be->ops->upload(h->be, b + pen_off, s->pairs, (size_t)n_pen * 2 * sizeof(int32_t)));
        const struct sample_args a = sampler_op_args(s, h->logits + (size_t)c->out_row[t] * (size_t)n_vocab, n_vocab,
                                                     (const int32_t *)(b + pen_off), n_pen, b, scr_off);
        st = h->be->ops->sample(h->be, &a);
        if (st == INFER_OK) TRY(h->be->ops->download(h->be, &pick, b + 8, sizeof pick));
        else if (st != INFER_E_UNSUPPORTED) goto fail;
        st = INFER_OK;
    }
    if (pick == SAMPLE_REFUSED) { /* the device could not: the host chain, with the same u */
        const float *l = infer_logits(c, t);
        if (!l) return infer_fail(INFER_E_ARG, "infer_sample: no host logits for token %d", i);
        pick = sampler_sample_u(s, l, u);
    }
    TRY(sampler_pick_check(h, pick, n_vocab));
    infer_sampler_accept(s, pick);
    *token = pick;
fail:
    return st;
}
