/* moe: the router (softmax over experts, top-k, optional renormalisation of the k weights) and the
 * expert FFN y[t] = Σ_k w[t][k] · down_e(silu(gate_e x[t]) · up_e x[t]).
 *
 * Decode-sized batches (<= MMV_MAX_TOKENS tokens) run token by token: x quantised once, then the gate / up rows of
 * all K selected experts as one threaded job (SwiGLU per row), the K hidden vectors quantised, the down rows of
 * all K as one job, each output the one-token dot cpu_mmv computes; quantising x and the hidden vector to each
 * matrix's activation type exactly like a dense FFN, so a MoE layer with one expert equals the dense chain bit for
 * bit, and the experts spread over the threads however small each one is. Larger batches group the
 * tokens by expert: each expert's tokens go through one product (cpu_mm, or cpu_mmv over up to 8 tokens, as a
 * dense FFN of that many tokens would), which reads each selected expert's weights once per batch instead of
 * once per token; each (token, slot) output is kept and the weighted sum is taken in slot order as in the
 * token loop. Scratch comes from one allocation per call.
 *
 * Experts repacked at load (type | CPU_R16, model_repack.c; each expert's matrix its own strips of 16 rows, expert
 * e at e · cpu_r16_bytes): the decode takes 16 rows at a time through cpu_r16_strip_dot, the grouped prefill
 * multiplies the expert's strips through cpu_mmv / cpu_mm; both the same bits as the file's layout.
 */
#include <string.h>

#include "cpu.h"
#include "mm_q32.h"
#include "mm_r16.h"
#include "quant.h"

/* Bytes of one expert's (n_out, n_in) matrix: the file's rows, or its strips when repacked. */
static size_t moe_expert_bytes(int32_t type, int64_t n_in, int64_t n_out) {
    if (cpu_r16_is(type)) return cpu_r16_bytes(cpu_r16_base(type), n_in, n_out);
    return (size_t)n_out * quant_row_bytes(type, n_in);
}

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
    const size_t gu_exp = moe_expert_bytes(a->type_gate_up, n_embd, n_ff);
    const size_t dn_exp = moe_expert_bytes(a->type_down, n_ff, n_embd);
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
        TRY(moe_product(a->type_gate_up, (const char *)a->gate + (size_t)e * gu_exp, (const char *)a->up + (size_t)e * gu_exp,
                        n_embd, n_ff, ce, xq, xg, hg, MMV_SWIGLU, p));
        TRY(moe_quantize_rows(a->type_down, hg, hq, n_ff, ce, p));
        TRY(moe_product(a->type_down, (const char *)a->down + (size_t)e * dn_exp, NULL, n_ff, n_embd, ce, hq,
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

/* Decode: the K selected experts of one token as one job per stage, so every thread has work even when one
 * expert's matrices are a few hundred rows (a pool_for per expert and matrix left cores idle at each of its
 * 4K barriers). Each output is the dot cpu_mmv computes for one token, the same bits. */
struct moe_spread {
    const struct moe_ffn_args *a;
    const int32_t *ids;      /* the token's K expert ids */
    cpu_vec_dot_fn dot_gu, dot_dn; /* NULL: that matrix is repacked */
    size_t gu_row, dn_row;
    int32_t gu_type, dn_type;      /* the file's types */
    size_t gu_exp, dn_exp;         /* bytes per expert */
    size_t gu_strip, dn_strip;     /* repacked: bytes per strip of 16 rows */
    const struct mm_q32_act *gu_act, *dn_act; /* repacked 32-value types: x's table, the K rows of hq's */
    int64_t dn_nb;                 /* blocks of 32 per row of hq (dn_act's stride) */
    const void *xq;          /* the token's activations (gate / up type) */
    float *h;                /* K x n_ff */
    const char *hq;          /* K rows of h quantised (down type) */
    size_t hq_row;
    float *o;                /* K x n_embd */
};

/* Repacked: 16 rows (one strip of an expert) at a time; the grain keeps ranges on strips, n_ff being whole strips */
static void moe_spread_gate_up_r16(const struct moe_spread *j, int64_t r0, int64_t r1) {
    const int64_t n_ff = j->a->n_ff;
    for (int64_t r = r0; r < r1; r += CPU_R16_ROWS) {
        const int64_t k = r / n_ff;
        const size_t at = (size_t)j->ids[k] * j->gu_exp + (size_t)(r % n_ff / CPU_R16_ROWS) * j->gu_strip;
        float g[CPU_R16_ROWS], u[CPU_R16_ROWS];
        cpu_r16_strip_dot(j->gu_type, (const char *)j->a->gate + at, j->a->n_embd, j->xq, j->gu_act, g);
        cpu_r16_strip_dot(j->gu_type, (const char *)j->a->up + at, j->a->n_embd, j->xq, j->gu_act, u);
        for (int i = 0; i < CPU_R16_ROWS; i++) j->h[r + i] = cpu_silu(g[i]) * u[i];
    }
}

static void moe_spread_down_r16(const struct moe_spread *j, int64_t r0, int64_t r1) {
    const int64_t n_embd = j->a->n_embd;
    for (int64_t r = r0; r < r1; r += CPU_R16_ROWS) {
        const int64_t k = r / n_embd;
        const size_t at = (size_t)j->ids[k] * j->dn_exp + (size_t)(r % n_embd / CPU_R16_ROWS) * j->dn_strip;
        const struct mm_q32_act *act = j->dn_act ? j->dn_act + k * j->dn_nb : NULL;
        cpu_r16_strip_dot(j->dn_type, (const char *)j->a->down + at, j->a->n_ff, j->hq + (size_t)k * j->hq_row, act,
                          j->o + r);
    }
}

static void moe_spread_gate_up(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct moe_spread *j = ctx;
    const int64_t n_ff = j->a->n_ff;
    if (!j->dot_gu) {
        moe_spread_gate_up_r16(j, r0, r1);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const int64_t k = r / n_ff, row = (int64_t)j->ids[k] * n_ff + r % n_ff;
        const float g = j->dot_gu(j->a->n_embd, (const char *)j->a->gate + (size_t)row * j->gu_row, j->xq);
        j->h[r] = cpu_silu(g) * j->dot_gu(j->a->n_embd, (const char *)j->a->up + (size_t)row * j->gu_row, j->xq);
    }
}

static void moe_spread_down(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct moe_spread *j = ctx;
    const int64_t n_embd = j->a->n_embd;
    if (!j->dot_dn) {
        moe_spread_down_r16(j, r0, r1);
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const int64_t k = r / n_embd, row = (int64_t)j->ids[k] * n_embd + r % n_embd;
        j->o[r] = j->dot_dn(j->a->n_ff, (const char *)j->a->down + (size_t)row * j->dn_row, j->hq + (size_t)k * j->hq_row);
    }
}

/* A repacked expert matrix (n_out, n_in) the strips can serve: its type takes strips and n_out is whole strips (so
 * that the decode's 16-row ranges never straddle two experts). */
static int moe_r16_ok(int32_t type, int64_t n_in, int64_t n_out) {
    return !cpu_r16_is(type) || (cpu_r16_takes(cpu_r16_base(type), n_in) && n_out % CPU_R16_ROWS == 0);
}

infer_status cpu_moe_ffn(const struct moe_ffn_args *a, struct pool *p) {
    infer_status st = INFER_OK;
    const int32_t gu_type = cpu_r16_base(a->type_gate_up), dn_type = cpu_r16_base(a->type_down);
    size_t gu_row = quant_row_bytes(gu_type, a->n_embd);
    size_t dn_row = quant_row_bytes(dn_type, a->n_ff);
    size_t xq_bytes = cpu_act_row_bytes(a->type_gate_up, a->n_embd);
    size_t hq_bytes = cpu_act_row_bytes(a->type_down, a->n_ff);
    if (!gu_row || !dn_row || !xq_bytes || !hq_bytes || !moe_r16_ok(a->type_gate_up, a->n_embd, a->n_ff) ||
        !moe_r16_ok(a->type_down, a->n_ff, a->n_embd))
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_moe_ffn: types %d/%d with n_embd %lld n_ff %lld: expected supported "
                          "types and block-multiple sizes (repacked: whole strips of 16 rows)", a->type_gate_up,
                          a->type_down, (long long)a->n_embd, (long long)a->n_ff);
    if (!a->gate || !a->up || !a->down || !a->x || !a->ids || !a->weights || !a->y || a->n_tokens < 0 ||
        a->n_expert_used < 1)
        return infer_fail(INFER_E_ARG, "cpu_moe_ffn: missing pointer or n_expert_used %d < 1", a->n_expert_used);
    if (a->n_tokens > MMV_MAX_TOKENS) return moe_ffn_grouped(a, p);
    const int32_t K = a->n_expert_used;
    const int r16_gu = cpu_r16_is(a->type_gate_up), r16_dn = cpu_r16_is(a->type_down);
    const cpu_vec_dot_fn dot_gu = r16_gu ? NULL : cpu_vec_dot(gu_type, CPU_ISA_BEST);
    const cpu_vec_dot_fn dot_dn = r16_dn ? NULL : cpu_vec_dot(dn_type, CPU_ISA_BEST);
    if ((!dot_gu && !r16_gu) || (!dot_dn && !r16_dn))
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_moe_ffn: types %d/%d have no CPU dot product", a->type_gate_up,
                          a->type_down);
    /* the repacked 32-value types' activation tables (mm_q32_act_fill): x's, and the K hidden rows' */
    const int gu_act = r16_gu && cpu_r16_q32(gu_type), dn_act = r16_dn && cpu_r16_q32(dn_type);
    const int64_t gu_nb = a->n_embd / QK8_0, dn_nb = a->n_ff / QK8_0;
    /* scratch: xq (n_embd quantised) | h (K x n_ff f32) | hq (K rows quantised) | o (K x n_embd f32) | the tables */
    const size_t hq_row = hq_bytes;
    const size_t off_h = moe_align(xq_bytes), off_hq = off_h + moe_align((size_t)K * (size_t)a->n_ff * 4);
    const size_t off_o = off_hq + moe_align((size_t)K * hq_row);
    const size_t off_ga = off_o + moe_align((size_t)K * (size_t)a->n_embd * 4);
    const size_t off_da = off_ga + moe_align(gu_act ? sizeof(struct mm_q32_act) * (size_t)gu_nb : 0);
    const size_t total = off_da + (dn_act ? sizeof(struct mm_q32_act) * (size_t)dn_nb * (size_t)K : 0);
    char *scratch = xmalloc(total);
    if (!scratch) return INFER_OOM("moe scratch");
    struct moe_spread j = {.a = a, .dot_gu = dot_gu, .dot_dn = dot_dn, .gu_row = gu_row, .dn_row = dn_row,
                           .gu_type = gu_type, .dn_type = dn_type,
                           .gu_exp = moe_expert_bytes(a->type_gate_up, a->n_embd, a->n_ff),
                           .dn_exp = moe_expert_bytes(a->type_down, a->n_ff, a->n_embd),
                           .gu_strip = r16_gu ? cpu_r16_bytes(gu_type, a->n_embd, CPU_R16_ROWS) : 0,
                           .dn_strip = r16_dn ? cpu_r16_bytes(dn_type, a->n_ff, CPU_R16_ROWS) : 0,
                           .gu_act = gu_act ? (const struct mm_q32_act *)(scratch + off_ga) : NULL,
                           .dn_act = dn_act ? (const struct mm_q32_act *)(scratch + off_da) : NULL, .dn_nb = dn_nb,
                           .xq = scratch, .h = (float *)(scratch + off_h), .hq = scratch + off_hq, .hq_row = hq_row,
                           .o = (float *)(scratch + off_o)};
    const int32_t at_down = mmv_act_type_cpu(a->type_down);
    if (at_down < 0) j.hq = (const char *)j.h, j.hq_row = (size_t)a->n_ff * 4; /* float down weights take f32 h */
    for (int32_t t = 0; t < a->n_tokens; t++) {
        const float *x = a->x + (int64_t)t * a->n_embd;
        float *y = a->y + (int64_t)t * a->n_embd;
        j.ids = a->ids + (int64_t)t * K;
        for (int32_t k = 0; k < K; k++)
            if (j.ids[k] < 0 || j.ids[k] >= a->n_expert) {
                st = infer_fail(INFER_E_ARG, "cpu_moe_ffn: token %d expert id %d: expected 0..%d", t, j.ids[k],
                                a->n_expert - 1);
                goto fail;
            }
        TRY(moe_quantize(a->type_gate_up, x, scratch, a->n_embd, p));
        j.xq = mmv_act_type_cpu(a->type_gate_up) >= 0 ? (const void *)scratch : (const void *)x; /* float weights: f32 x */
        if (gu_act) mm_q32_act_fill(gu_type, j.xq, xq_bytes, gu_nb, 0, 1, (struct mm_q32_act *)(scratch + off_ga));
        pool_for(p, (int64_t)K * a->n_ff, 16, moe_spread_gate_up, &j);
        if (at_down >= 0) { /* the K hidden rows, packed */
            const struct quantize_args q = {.type = at_down, .x = j.h, .y = scratch + off_hq, .n = a->n_ff, .n_rows = K,
                                            .x_stride = a->n_ff};
            TRY(cpu_quantize(&q, p));
        }
        if (dn_act) mm_q32_act_fill(dn_type, j.hq, hq_row, dn_nb, 0, K, (struct mm_q32_act *)(scratch + off_da));
        pool_for(p, (int64_t)K * a->n_embd, 16, moe_spread_down, &j);
        for (int64_t i = 0; i < a->n_embd; i++) y[i] = 0;
        for (int32_t k = 0; k < K; k++) { /* the weighted sum in slot order */
            const float wk = a->weights[(int64_t)t * K + k], *o = j.o + (size_t)k * a->n_embd;
            for (int64_t i = 0; i < a->n_embd; i++) y[i] += wk * o[i];
        }
    }
fail:
    xfree(scratch);
    return st;
}
