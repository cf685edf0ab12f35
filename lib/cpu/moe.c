/* moe: the router (softmax over experts, top-k, optional renormalisation of the k weights) and the
 * expert FFN y[t] = Σ_k w[t][k] · down_e(silu(gate_e x[t]) · up_e x[t]).
 *
 * Decode-sized batches (<= MMV_MAX_TOKENS tokens) run token by token and expert by expert through cpu_mmv
 * (fused SwiGLU epilogue), quantising x and the hidden vector to each matrix's activation type exactly like a
 * dense FFN, so a MoE layer with one expert equals the dense chain bit for bit. Larger batches group the
 * tokens by expert: each expert's tokens go through one product (cpu_mm, or cpu_mmv over up to 8 tokens, as a
 * dense FFN of that many tokens would), which reads each selected expert's weights once per batch instead of
 * once per token; each (token, slot) output is kept and the weighted sum is taken in slot order as in the
 * token loop. Scratch comes from one allocation per call.
 */
#include <string.h>

#include "cpu.h"
#include "quant.h"

static void moe_route_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct moe_route_args *a = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const float *z = a->logits + t * a->n_expert;
        int32_t *ids = a->ids + t * a->n_expert_used;
        float *w = a->weights + t * a->n_expert_used;
        float max = -INFINITY;
        for (int e = 0; e < a->n_expert; e++) max = fmaxf(max, z[e]);
        double sum = 0;
        for (int e = 0; e < a->n_expert; e++) sum += expf(z[e] - max);
        /* selection by repeated max: k is small (<= 16); ties go to the lower expert id */
        double wsum = 0;
        for (int k = 0; k < a->n_expert_used; k++) {
            int best = -1;
            for (int e = 0; e < a->n_expert; e++) {
                int taken = 0;
                for (int i = 0; i < k; i++) taken |= ids[i] == e;
                if (!taken && (best < 0 || z[e] > z[best])) best = e;
            }
            ids[k] = best;
            w[k] = (float)(expf(z[best] - max) / sum);
            wsum += w[k];
        }
        if (a->norm)
            for (int k = 0; k < a->n_expert_used; k++) w[k] = (float)(w[k] / wsum);
    }
}

infer_status cpu_moe_route(const struct moe_route_args *a, struct pool *p) {
    if (!a->logits || !a->ids || !a->weights || a->n_tokens < 0 || a->n_expert < 1 || a->n_expert_used < 1 ||
        a->n_expert_used > a->n_expert)
        return infer_fail(INFER_E_ARG, "cpu_moe_route: n_expert %d n_expert_used %d: expected 1 <= used <= n_expert",
                          a->n_expert, a->n_expert_used);
    pool_for(p, a->n_tokens, 1, moe_route_rows, (void *)a);
    return INFER_OK;
}

/* Quantises one f32 row to the activation type of weight type wt (or leaves it f32). */
static infer_status moe_quantize(int32_t wt, const float *x, void *xq, int64_t n, struct pool *p) {
    int32_t at = mmv_act_type_cpu(wt);
    if (at < 0) return INFER_OK;
    struct quantize_args q = {at, x, xq, n, 1, n};
    return cpu_quantize(&q, p);
}

/* One product of c rows: mmv up to MMV_MAX_TOKENS rows (the dense FFN's choice), else mm. */
static infer_status moe_product(int32_t type, const void *w, const void *w2, int64_t n_in, int64_t n_out, int32_t c,
                                const void *xq, const float *x, float *y, int32_t epilogue, struct pool *p) {
    if (c <= MMV_MAX_TOKENS) {
        struct mmv_args v = {type, w, w2, n_in, n_out, c, xq, x, y, NULL, epilogue, 0};
        return cpu_mmv(&v, p);
    }
    struct mm_args m = {type, w, w2, n_in, n_out, c, xq, x, y, NULL, epilogue, 0};
    return cpu_mm(&m, p);
}

/* Quantises c rows of n floats to the activation type of weight type wt (or leaves them f32). */
static infer_status moe_quantize_rows(int32_t wt, const float *x, void *xq, int64_t n, int32_t c, struct pool *p) {
    const int32_t at = mmv_act_type_cpu(wt);
    if (at < 0) return INFER_OK;
    struct quantize_args q = {at, x, xq, n, c, n};
    return cpu_quantize(&q, p);
}

static size_t moe_align(size_t n) { return (n + 63) & ~(size_t)63; }

/* Prefill: the tokens grouped by expert (see the top). */
static infer_status moe_ffn_grouped(const struct moe_ffn_args *a, struct pool *p) {
    infer_status st = INFER_OK;
    const int32_t K = a->n_expert_used, T = a->n_tokens, E = a->n_expert;
    const int64_t n_embd = a->n_embd, n_ff = a->n_ff;
    const size_t gu_row = quant_row_bytes(a->type_gate_up, n_embd), dn_row = quant_row_bytes(a->type_down, n_ff);
    const size_t n_slot = (size_t)T * (size_t)K;
    int32_t *count = xcalloc((size_t)E + 1, sizeof *count), *start = xcalloc((size_t)E + 1, sizeof *start);
    int32_t *slots = xcalloc(n_slot + 1, sizeof *slots);
    char *scratch = NULL;
    if (!count || !start || !slots) {
        st = INFER_OOM("moe grouping");
        goto fail;
    }
    for (size_t s = 0; s < n_slot; s++) {
        const int32_t e = a->ids[s];
        if (e < 0 || e >= E) {
            st = infer_fail(INFER_E_ARG, "cpu_moe_ffn: token %d expert id %d: expected 0..%d", (int)(s / (size_t)K), e,
                            E - 1);
            goto fail;
        }
        count[e]++;
    }
    int32_t c_max = 0;
    for (int32_t e = 0; e < E; e++) {
        start[e + 1] = start[e] + count[e];
        c_max = count[e] > c_max ? count[e] : c_max;
        count[e] = 0;
    }
    for (size_t s = 0; s < n_slot; s++) slots[start[a->ids[s]] + count[a->ids[s]]++] = (int32_t)s; /* token order */
    /* scratch: x rows | their activations | h rows | their activations | the expert's outputs | every slot's output */
    const size_t c = (size_t)c_max;
    const size_t b_x = moe_align(c * (size_t)n_embd * 4), b_xq = moe_align(c * cpu_act_row_bytes(a->type_gate_up, n_embd));
    const size_t b_h = moe_align(c * (size_t)n_ff * 4), b_hq = moe_align(c * cpu_act_row_bytes(a->type_down, n_ff));
    const size_t b_o = moe_align(c * (size_t)n_embd * 4), b_all = n_slot * (size_t)n_embd * 4;
    scratch = xmalloc(b_x + b_xq + b_h + b_hq + b_o + b_all);
    if (!scratch) {
        st = INFER_OOM("moe scratch");
        goto fail;
    }
    float *xg = (float *)scratch, *hg = (float *)(scratch + b_x + b_xq), *og = (float *)(scratch + b_x + b_xq + b_h + b_hq);
    void *xq = scratch + b_x, *hq = scratch + b_x + b_xq + b_h;
    float *out = (float *)(scratch + b_x + b_xq + b_h + b_hq + b_o);
    for (int32_t e = 0; e < E; e++) {
        const int32_t ce = start[e + 1] - start[e];
        if (ce == 0) continue;
        const int32_t *sl = slots + start[e];
        for (int32_t i = 0; i < ce; i++)
            memcpy(xg + (size_t)i * n_embd, a->x + (size_t)(sl[i] / K) * n_embd, (size_t)n_embd * 4);
        TRY(moe_quantize_rows(a->type_gate_up, xg, xq, n_embd, ce, p));
        TRY(moe_product(a->type_gate_up, (const char *)a->gate + (size_t)e * n_ff * gu_row,
                        (const char *)a->up + (size_t)e * n_ff * gu_row, n_embd, n_ff, ce, xq, xg, hg, MMV_SWIGLU, p));
        TRY(moe_quantize_rows(a->type_down, hg, hq, n_ff, ce, p));
        TRY(moe_product(a->type_down, (const char *)a->down + (size_t)e * n_embd * dn_row, NULL, n_ff, n_embd, ce, hq,
                        hg, og, MMV_PLAIN, p));
        for (int32_t i = 0; i < ce; i++) memcpy(out + (size_t)sl[i] * n_embd, og + (size_t)i * n_embd, (size_t)n_embd * 4);
    }
    for (int32_t t = 0; t < T; t++) { /* the weighted sum in slot order, as the token loop adds */
        float *y = a->y + (size_t)t * n_embd;
        for (int64_t i = 0; i < n_embd; i++) y[i] = 0;
        for (int32_t k = 0; k < K; k++) {
            const float wk = a->weights[(size_t)t * K + k], *o = out + ((size_t)t * K + k) * n_embd;
            for (int64_t i = 0; i < n_embd; i++) y[i] += wk * o[i];
        }
    }
fail:
    xfree(scratch);
    xfree(count);
    xfree(start);
    xfree(slots);
    return st;
}

infer_status cpu_moe_ffn(const struct moe_ffn_args *a, struct pool *p) {
    infer_status st = INFER_OK;
    size_t gu_row = quant_row_bytes(a->type_gate_up, a->n_embd);
    size_t dn_row = quant_row_bytes(a->type_down, a->n_ff);
    size_t xq_bytes = cpu_act_row_bytes(a->type_gate_up, a->n_embd);
    size_t hq_bytes = cpu_act_row_bytes(a->type_down, a->n_ff);
    if (!gu_row || !dn_row || !xq_bytes || !hq_bytes)
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_moe_ffn: types %d/%d with n_embd %lld n_ff %lld: expected supported "
                          "types and block-multiple sizes", a->type_gate_up, a->type_down, (long long)a->n_embd,
                          (long long)a->n_ff);
    if (!a->gate || !a->up || !a->down || !a->x || !a->ids || !a->weights || !a->y || a->n_tokens < 0 ||
        a->n_expert_used < 1)
        return infer_fail(INFER_E_ARG, "cpu_moe_ffn: missing pointer or n_expert_used %d < 1", a->n_expert_used);
    if (a->n_tokens > MMV_MAX_TOKENS) return moe_ffn_grouped(a, p);
    /* scratch: xq (n_embd quantised) | h (n_ff f32) | hq (n_ff quantised) | o (n_embd f32) */
    size_t off_h = (xq_bytes + 63) & ~(size_t)63, off_hq = off_h + (((size_t)a->n_ff * 4 + 63) & ~(size_t)63);
    size_t off_o = off_hq + ((hq_bytes + 63) & ~(size_t)63), total = off_o + (size_t)a->n_embd * 4;
    char *scratch = xmalloc(total);
    if (!scratch) return INFER_OOM("moe scratch");
    float *h = (float *)(scratch + off_h), *o = (float *)(scratch + off_o);
    for (int32_t t = 0; t < a->n_tokens; t++) {
        const float *x = a->x + (int64_t)t * a->n_embd;
        float *y = a->y + (int64_t)t * a->n_embd;
        TRY(moe_quantize(a->type_gate_up, x, scratch, a->n_embd, p));
        for (int64_t i = 0; i < a->n_embd; i++) y[i] = 0;
        for (int32_t k = 0; k < a->n_expert_used; k++) {
            int32_t e = a->ids[(int64_t)t * a->n_expert_used + k];
            if (e < 0 || e >= a->n_expert) {
                st = infer_fail(INFER_E_ARG, "cpu_moe_ffn: token %d expert id %d: expected 0..%d", t, e, a->n_expert - 1);
                goto fail;
            }
            struct mmv_args gu = {a->type_gate_up, (const char *)a->gate + (size_t)e * a->n_ff * gu_row,
                                  (const char *)a->up + (size_t)e * a->n_ff * gu_row, a->n_embd, a->n_ff, 1, scratch,
                                  x, h, NULL, MMV_SWIGLU, 0};
            TRY(cpu_mmv(&gu, p));
            TRY(moe_quantize(a->type_down, h, scratch + off_hq, a->n_ff, p));
            struct mmv_args dn = {a->type_down, (const char *)a->down + (size_t)e * a->n_embd * dn_row, NULL, a->n_ff,
                                  a->n_embd, 1, scratch + off_hq, h, o, NULL, MMV_PLAIN, 0};
            TRY(cpu_mmv(&dn, p));
            float wk = a->weights[(int64_t)t * a->n_expert_used + k];
            for (int64_t i = 0; i < a->n_embd; i++) y[i] += wk * o[i];
        }
    }
fail:
    xfree(scratch);
    return st;
}
