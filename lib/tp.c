/* tp: the shards of tensor parallelism (see tp.h). */
#include <string.h>

#include "quant.h"
#include "tp.h"

/* Part r of n even parts of [0, units): the first parts are the shorter ones. */
static void tp_part(int64_t units, int32_t n, int32_t r, int64_t *lo, int64_t *hi) {
    *lo = units * r / n;
    *hi = units * (r + 1) / n;
}

/* The largest block (values) of the tensors of one role over m's layers (the MTP blocks' too): where its columns
 * may be cut. */
static int64_t tp_role_block(const struct infer_model *m, enum arch_role role) {
    int64_t b = 1;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        const struct gguf_tensor **slot = model_layer_slot(&m->layers[il], role);
        const struct quant_type *qt = slot && *slot ? quant_type((*slot)->type) : NULL;
        if (qt && qt->blck > b) b = qt->blck;
    }
    return b;
}

/* FFN columns [lo, hi) of n ranks' rank r, cut at whole blocks of the row-parallel weight `down`. */
static infer_status tp_ffn(const struct infer_model *m, const char *what, int64_t n_ff, enum arch_role down, int32_t n,
                           int32_t r, int64_t *lo, int64_t *hi) {
    *lo = *hi = 0;
    if (n_ff == 0) return INFER_OK;
    const int64_t blk = tp_role_block(m, down), units = n_ff / blk;
    if (units < n)
        return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor over %d devices: %s %lld is %lld block%s of %lld "
                          "values (the cut falls between blocks of its down projection): at most %lld devices",
                          n, what, (long long)n_ff, (long long)units, units == 1 ? "" : "s", (long long)blk,
                          (long long)units);
    tp_part(units, n, r, lo, hi);
    *lo *= blk;
    *hi = r == n - 1 ? n_ff : *hi * blk;
    return INFER_OK;
}

/* Query and KV heads of rank r of n. */
static infer_status tp_heads(const struct arch_hparams *hp, int32_t n, int32_t r, struct tp_rank *rk) {
    const int64_t nh = hp->n_head, nkv = hp->n_head_kv, g = nh / nkv;
    if (n <= nkv) { /* whole GQA groups */
        tp_part(nkv, n, r, &rk->kv0, &rk->kv1);
        rk->q0 = rk->kv0 * g, rk->q1 = rk->kv1 * g;
        return INFER_OK;
    }
    const int64_t rep = n / nkv; /* ranks sharing one KV head */
    if (n % nkv || g % rep)
        return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor over %d devices: attention.head_count_kv %lld with "
                          "head_count %lld: each device needs whole KV heads (at most %lld devices) or an equal share "
                          "of one KV head's %lld query heads (a device count that is a multiple of %lld and divides "
                          "%lld)", n, (long long)nkv, (long long)nh, (long long)nkv, (long long)g, (long long)nkv,
                          (long long)(nkv * g));
    rk->kv0 = r / rep, rk->kv1 = rk->kv0 + 1;
    rk->q0 = rk->kv0 * g + (r % rep) * (g / rep);
    rk->q1 = rk->q0 + g / rep;
    return INFER_OK;
}

/* Column c of a role's row-parallel weight must start a block. */
static infer_status tp_cut_check(const struct infer_model *m, enum arch_role role, const char *what, int64_t c) {
    const int64_t blk = tp_role_block(m, role);
    if (c % blk == 0) return INFER_OK;
    return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor: %s: a device's share starts at column %lld of %s, "
                      "inside a block of %lld values; use a device count that cuts at whole blocks (or -sm layer)",
                      what, (long long)c, arch_role_name(role), (long long)blk);
}

infer_status tp_ranks(const struct infer_model *m, int32_t n, struct tp_rank *out) {
    const struct arch_hparams *hp = &m->hp;
    const int hybrid = (m->arch->flags & ARCH_F_HYBRID) != 0;
    if (n < 1 || n > INFER_MAX_DEVICES)
        return infer_fail(INFER_E_ARG, "split_mode tensor: %d devices: expected 1..%d", n, INFER_MAX_DEVICES);
    if (hybrid && n > hp->n_group)
        return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor over %d devices: ssm.group_count %lld: the Gated "
                          "DeltaNet layers are cut at key heads, so at most %lld devices", n, (long long)hp->n_group,
                          (long long)hp->n_group);
    for (int32_t r = 0; r < n; r++) {
        struct tp_rank *rk = &out[r];
        memset(rk, 0, sizeof *rk);
        infer_status st = tp_heads(hp, n, r, rk);
        if (st == INFER_OK) st = tp_cut_check(m, ARCH_T_ATTN_OUT, "attention heads", rk->q0 * hp->head_dim);
        if (st == INFER_OK) st = tp_ffn(m, "feed_forward_length", hp->n_ff, ARCH_T_FFN_DOWN, n, r, &rk->f0, &rk->f1);
        if (st == INFER_OK)
            st = tp_ffn(m, "expert_feed_forward_length", hp->n_expert ? hp->n_ff_exp : 0, ARCH_T_FFN_DOWN_EXPS, n, r,
                        &rk->e0, &rk->e1);
        if (st == INFER_OK)
            st = tp_ffn(m, "expert_shared_feed_forward_length", hp->n_ff_shexp, ARCH_T_FFN_DOWN_SHEXP, n, r, &rk->s0,
                        &rk->s1);
        if (st != INFER_OK) return st;
        tp_part(hp->n_vocab, n, r, &rk->v0, &rk->v1);
        if (!hybrid) continue;
        tp_part(hp->n_group, n, r, &rk->g0, &rk->g1);
        const int64_t rep = hp->dt_rank / hp->n_group, d = hp->d_state;
        const int grouped = m->arch->vheads == ARCH_VHEADS_GROUPED;
        for (int64_t i = 0; i < (grouped ? 1 : rep); i++) { /* where each run of value heads starts in ssm_out */
            const int64_t v0 = grouped ? rk->g0 * rep : i * hp->n_group + rk->g0;
            if ((st = tp_cut_check(m, ARCH_T_SSM_OUT, "Gated DeltaNet value heads", v0 * d)) != INFER_OK) return st;
        }
    }
    return INFER_OK;
}

void tp_hparams(const struct infer_model *m, const struct tp_rank *rk, struct arch_hparams *hp) {
    *hp = m->hp;
    hp->n_head = rk->q1 - rk->q0;
    hp->n_head_kv = rk->kv1 - rk->kv0;
    hp->n_ff = rk->f1 - rk->f0;
    hp->n_ff_exp = rk->e1 - rk->e0;
    hp->n_ff_shexp = rk->s1 - rk->s0;
    if (m->arch->flags & ARCH_F_HYBRID) {
        const int64_t rep = m->hp.dt_rank / m->hp.n_group;
        hp->n_group = rk->g1 - rk->g0;
        hp->dt_rank = hp->n_group * rep;
        hp->d_inner = hp->dt_rank * m->hp.d_state;
    }
}

static void tp_run(int64_t (*runs)[2], int32_t *n, int64_t lo, int64_t hi) {
    if (*n >= TP_MAX_RUNS) return; /* tp_value_runs bounds the count */
    runs[*n][0] = lo, runs[*n][1] = hi;
    (*n)++;
}

/* The runs of rank rk's value heads, in the model's value-head order (tiled: head i * Hk + k reads key head k;
 * grouped: head k * rep + i), each scaled by `scale` (rows or columns per head) and moved by `at`. */
static void tp_value_runs(const struct infer_model *m, const struct tp_rank *rk, int64_t scale, int64_t at,
                          int64_t (*runs)[2], int32_t *n) {
    const int64_t hk = m->hp.n_group, rep = m->hp.dt_rank / hk;
    if (m->arch->vheads == ARCH_VHEADS_GROUPED || rep == 1) {
        tp_run(runs, n, at + rk->g0 * rep * scale, at + rk->g1 * rep * scale);
        return;
    }
    for (int64_t i = 0; i < rep; i++) tp_run(runs, n, at + (i * hk + rk->g0) * scale, at + (i * hk + rk->g1) * scale);
}

void tp_slice_of(const struct infer_model *m, int64_t il, enum arch_role role, const struct gguf_tensor *t,
                 int32_t rank, const struct tp_rank *rk, struct tp_slice *s) {
    const struct arch_hparams *hp = &m->hp;
    const int64_t hd = hp->head_dim, d = hp->d_state, kd = hp->n_group * hp->d_state;
    const int gated = (m->arch->flags & ARCH_F_ATTN_GATE) != 0;
    memset(s, 0, sizeof *s);
    s->copy = 1;
    if (il < 0) { /* the token table: rank 0's; the head: each rank its vocabulary rows; the rest: every rank's */
        if (role == ARCH_T_TOKEN_EMBD) s->copy = rank == 0;
        if (role == ARCH_T_OUTPUT) tp_run(s->rows, &s->n_rows, rk->v0, rk->v1);
        return;
    }
    (void)t;
    switch (role) {
    case ARCH_T_ATTN_Q:
        tp_run(s->rows, &s->n_rows, rk->q0 * hd * (gated ? 2 : 1), rk->q1 * hd * (gated ? 2 : 1));
        break;
    case ARCH_T_ATTN_K:
    case ARCH_T_ATTN_V:
        tp_run(s->rows, &s->n_rows, rk->kv0 * hd, rk->kv1 * hd);
        break;
    case ARCH_T_ATTN_OUT:
        tp_run(s->cols, &s->n_cols, rk->q0 * hd, rk->q1 * hd);
        break;
    case ARCH_T_FFN_GATE:
    case ARCH_T_FFN_UP:
        tp_run(s->rows, &s->n_rows, rk->f0, rk->f1);
        break;
    case ARCH_T_FFN_DOWN:
        tp_run(s->cols, &s->n_cols, rk->f0, rk->f1);
        break;
    case ARCH_T_FFN_GATE_EXPS:
    case ARCH_T_FFN_UP_EXPS:
        tp_run(s->rows, &s->n_rows, rk->e0, rk->e1);
        break;
    case ARCH_T_FFN_DOWN_EXPS:
        tp_run(s->cols, &s->n_cols, rk->e0, rk->e1);
        break;
    case ARCH_T_FFN_GATE_SHEXP:
    case ARCH_T_FFN_UP_SHEXP:
        tp_run(s->rows, &s->n_rows, rk->s0, rk->s1);
        break;
    case ARCH_T_FFN_DOWN_SHEXP:
        tp_run(s->cols, &s->n_cols, rk->s0, rk->s1);
        break;
    case ARCH_T_SSM_QKV:
    case ARCH_T_SSM_CONV1D: /* the conv's channels are qkv's rows: q | k | v */
        tp_run(s->rows, &s->n_rows, rk->g0 * d, rk->g1 * d);
        tp_run(s->rows, &s->n_rows, kd + rk->g0 * d, kd + rk->g1 * d);
        tp_value_runs(m, rk, d, 2 * kd, s->rows, &s->n_rows);
        break;
    case ARCH_T_SSM_GATE:
        tp_value_runs(m, rk, d, 0, s->rows, &s->n_rows);
        break;
    case ARCH_T_SSM_BETA:
    case ARCH_T_SSM_ALPHA:
        tp_value_runs(m, rk, 1, 0, s->rows, &s->n_rows);
        break;
    case ARCH_T_SSM_BA: { /* grouped by key head: rep beta rows then rep alpha rows */
        const int64_t rep2 = 2 * (hp->dt_rank / hp->n_group);
        tp_run(s->rows, &s->n_rows, rk->g0 * rep2, rk->g1 * rep2);
        break;
    }
    case ARCH_T_SSM_DT_BIAS:
    case ARCH_T_SSM_A: /* one value per value head */
        tp_value_runs(m, rk, 1, 0, s->cols, &s->n_cols);
        break;
    case ARCH_T_SSM_OUT:
        tp_value_runs(m, rk, d, 0, s->cols, &s->n_cols);
        break;
    case ARCH_T_NEXTN_EMBED_TOKENS: /* an MTP block's own token table and head: as the model's */
        s->copy = rank == 0;
        break;
    case ARCH_T_NEXTN_SHARED_HEAD_HEAD:
        tp_run(s->rows, &s->n_rows, rk->v0, rk->v1);
        break;
    default: /* norms, routers, the shared expert's gate: replicated */
        break;
    }
}

static int64_t tp_runs_len(const int64_t (*runs)[2], int32_t n, int64_t all) {
    if (n == 0) return all;
    int64_t len = 0;
    for (int32_t i = 0; i < n; i++) len += runs[i][1] - runs[i][0];
    return len;
}

struct gguf_tensor tp_slice_tensor(const struct gguf_tensor *t, const struct tp_slice *s) {
    struct gguf_tensor o = *t;
    o.data = NULL;
    o.ne[0] = tp_runs_len((const int64_t (*)[2])s->cols, s->n_cols, t->ne[0]);
    o.ne[1] = tp_runs_len((const int64_t (*)[2])s->rows, s->n_rows, t->ne[1]);
    o.nbytes = (uint64_t)quant_row_bytes(t->type, o.ne[0]) * (uint64_t)(o.ne[1] * o.ne[2] * o.ne[3]);
    return o;
}

void tp_slice_copy(const struct gguf_tensor *t, const struct tp_slice *s, void *dst) {
    const struct quant_type *qt = quant_type(t->type);
    const size_t row = quant_row_bytes(t->type, t->ne[0]);
    const int64_t n_mat = t->ne[2] * t->ne[3];
    const int32_t n_rows = s->n_rows ? s->n_rows : 1, n_cols = s->n_cols ? s->n_cols : 1;
    char *o = dst;
    for (int64_t z = 0; z < n_mat; z++) {
        const char *mat = (const char *)t->data + (size_t)z * (size_t)t->ne[1] * row;
        for (int32_t ri = 0; ri < n_rows; ri++) {
            const int64_t r0 = s->n_rows ? s->rows[ri][0] : 0, r1 = s->n_rows ? s->rows[ri][1] : t->ne[1];
            for (int64_t r = r0; r < r1; r++)
                for (int32_t ci = 0; ci < n_cols; ci++) {
                    const int64_t c0 = s->n_cols ? s->cols[ci][0] : 0, c1 = s->n_cols ? s->cols[ci][1] : t->ne[0];
                    const size_t off = (size_t)(c0 / qt->blck) * (size_t)qt->bytes;
                    const size_t len = (size_t)((c1 - c0) / qt->blck) * (size_t)qt->bytes;
                    memcpy(o, mat + (size_t)r * row + off, len);
                    o += len;
                }
        }
    }
}
