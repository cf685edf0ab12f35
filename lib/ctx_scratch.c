/* ctx_scratch: the context's dimensions and its scratch table (see ctx_scratch.h for why). */
#include "ctx_scratch.h"

#include <stddef.h>

#include "forward.h"

static int64_t scratch_max(int64_t a, int64_t b) { return a > b ? a : b; }

infer_status ctx_dims_resolve(const struct infer_model *m, const infer_ctx_params *p, int on_device, const char *who,
                              struct ctx_dims *d) {
    const infer_ctx_params def = infer_ctx_params_default();
    const struct arch_hparams *hp = &m->hp;
    if (!p) p = &def;
    if (p->n_ctx < 0 || p->n_batch < 0 || p->n_seq < 0 || p->n_threads < 0 || p->n_seq > 256)
        return infer_fail(INFER_E_ARG, "%s: n_ctx %d n_batch %d n_seq %d n_threads %d: expected "
                          "n_ctx, n_batch, n_threads >= 0 and n_seq 0..256", who, p->n_ctx, p->n_batch, p->n_seq,
                          p->n_threads);
    if (p->kv_type == INFER_TYPE_F32)
        return infer_fail(INFER_E_UNSUPPORTED, "%s: kv_type F32: the attention op reads f16 or Q8_0 cells only", who);
    if (p->kv_type != INFER_TYPE_F16 && p->kv_type != INFER_TYPE_Q8_0)
        return infer_fail(INFER_E_ARG, "%s: kv_type %d: expected F16 (%d) or Q8_0 (%d)", who, p->kv_type,
                          INFER_TYPE_F16, INFER_TYPE_Q8_0);
    if (p->kv_type == INFER_TYPE_Q8_0 && hp->head_dim % 32) /* a head is whole Q8_0 blocks, like llama.cpp */
        return infer_fail(INFER_E_UNSUPPORTED, "%s: kv_type Q8_0: head_dim %lld is not a multiple of 32", who,
                          (long long)hp->head_dim);
    if (p->n_draft < 0 || p->n_draft > INFER_MAX_DRAFT)
        return infer_fail(INFER_E_ARG, "%s: n_draft %d: expected 0..%d", who, p->n_draft, INFER_MAX_DRAFT);
    if (p->n_draft > 0 && hp->n_layer_nextn < 1)
        return infer_fail(INFER_E_ARG, "%s: n_draft %d: the model (%s) has no MTP layer to draft with", who,
                          p->n_draft, m->arch->name);
    const int64_t train = hp->n_ctx_train;
    *d = (struct ctx_dims){
        .n_ctx = p->n_ctx ? p->n_ctx : (int32_t)(train > 0 && train < 4096 ? train : 4096),
        .n_batch = p->n_batch ? p->n_batch : 512,
        .n_seq = p->n_seq ? p->n_seq : 1,
        .n_draft = p->n_draft,
        .kv_type = p->kv_type,
        .on_device = on_device,
        .heads = 1,
    };
    return INFER_OK;
}

struct scratch_list {
    struct ctx_scratch_entry *e;
    int32_t n;
};

static void scratch_add(struct scratch_list *l, const char *name, size_t field, enum ctx_scratch_place place,
                        size_t count, size_t size) {
    if (l->n < CTX_SCRATCH_MAX) /* past it only counted: ctx_alloc_scratch refuses the table */
        l->e[l->n] = (struct ctx_scratch_entry){.name = name, .field = field, .place = place, .count = count, .size = size};
    l->n++;
}

#define DEV(f, count, size) scratch_add(&l, #f, offsetof(struct infer_ctx, f), CTX_SCRATCH_BACKEND, (count), (size))
#define HOST(f, count, size) scratch_add(&l, #f, offsetof(struct infer_ctx, f), CTX_SCRATCH_HOST, (count), (size))
#define PINNED(f, count, size) scratch_add(&l, #f, offsetof(struct infer_ctx, f), CTX_SCRATCH_PINNED, (count), (size))

int32_t ctx_scratch_table(const struct infer_model *m, const struct ctx_dims *d, struct ctx_scratch_entry *out) {
    struct scratch_list l = {.e = out, .n = 0};
    const struct arch_hparams *hp = &m->hp;
    const size_t T = (size_t)d->n_batch, F = sizeof(float), I = sizeof(int32_t);
    const int64_t hd = hp->head_dim, nq = hp->n_head * hd, nk = hp->n_head_kv * hd, n_embd = hp->n_embd;
    const int hybrid = (m->arch->flags & ARCH_F_HYBRID) != 0, moe = hp->n_expert > 0;
    const int shexp = m->arch->ffn == ARCH_FFN_MOE_SHEXP;
    const int64_t cd = hybrid ? 2 * hp->n_group * hp->d_state + hp->d_inner : 0, vd = hybrid ? hp->d_inner : 0;
    const int64_t n_h = scratch_max(hp->n_ff, moe ? n_embd : 0);
    /* xq holds the 8-bit activations of the widest matmul input */
    int64_t n_in_max = scratch_max(scratch_max(n_embd, nq), scratch_max(scratch_max(hp->n_ff, hp->n_ff_exp), hp->n_ff_shexp));
    const int mtp = ctx_dims_mtp(d);
    n_in_max = scratch_max(n_in_max, scratch_max(vd, mtp ? 2 * n_embd : 0));
    const int64_t n_e = hp->n_expert > 0 ? hp->n_expert : 1, n_used = hp->n_expert_used > 0 ? hp->n_expert_used : 1;
    const size_t V = (size_t)hp->n_vocab;
    DEV(x, T * (size_t)n_embd, F);
    DEV(xn, T * (size_t)scratch_max(n_embd, nq), F);
    DEV(q, T * (size_t)nq, F);
    if (m->arch->flags & ARCH_F_ATTN_GATE) DEV(qg, T * (size_t)(2 * nq), F);
    DEV(k, T * (size_t)nk, F);
    DEV(v, T * (size_t)nk, F);
    DEV(att, T * (size_t)nq, F);
    DEV(h, T * (size_t)n_h, F);
    if (shexp) {
        DEV(sh, T * (size_t)hp->n_ff_shexp, F);
        DEV(shg, T, F);
    }
    DEV(xq, T * (size_t)n_in_max, F);
    DEV(router, T * (size_t)n_e, F);
    DEV(moe_ids, T * (size_t)n_used, I);
    DEV(moe_w, T * (size_t)n_used, F);
    if (hybrid) {
        DEV(g_qkv, T * (size_t)cd, F);
        DEV(g_conv, T * (size_t)cd, F);
        DEV(g_z, T * (size_t)vd, F);
        DEV(g_ab, T * (size_t)(2 * hp->dt_rank), F);
        DEV(g_out, T * (size_t)vd, F);
    }
    if (d->heads) DEV(logits, T * V, F);
    if (d->head_rows > 0) { /* a rank's logits of its rows, and (but rank 0's logits) its part of their reduce */
        DEV(head_part, T * (size_t)d->head_rows, F);
        if (!d->heads) DEV(head_sum, (size_t)CTX_TP_HEAD_ROWS * V, F);
    }
    if (mtp) {
        DEV(hid, T * (size_t)n_embd, F);
        DEV(mtp_h, T * (size_t)n_embd, F);
        DEV(mtp_in, T * (size_t)(2 * n_embd), F);
        DEV(mtp_hid, T * (size_t)n_embd, F);
    }
    if (mtp && d->heads) { /* the drafts and their acceptance: where the whole rows are (rank 0 of a group) */
        DEV(mtp_logits, (size_t)d->n_draft * V, F);
        DEV(draft_tok, (size_t)d->n_draft + 1, I);
        DEV(draft_scratch, 2 * V, F); /* the sample op's scratch for one row: sample_scratch_bytes(1, V) */
        if (d->embd_away) { /* the MTP block's token ids come down, their rows from the file's table go up */
            HOST(mtp_ids, T, I);
            PINNED(mtp_rows, T * (size_t)n_embd, F);
        }
        if (d->on_device) { /* spec.c SPEC_LISTS: drafting and acceptance at temp > 0 on the device */
            DEV(spec_u, 3 * (size_t)d->n_draft + 1, sizeof(double));
            DEV(spec_lists, 2 * (size_t)d->n_draft + 1, sizeof(struct sample_list));
            DEV(spec_ints, 2 * (size_t)d->n_draft + 3, I);
            DEV(spec_scratch, sample_scratch_bytes(d->n_draft + 1, (int32_t)V), 1);
        }
        HOST(spec_q, (size_t)d->n_draft * V, F);
        HOST(spec_p, V, F);
        HOST(spec_r, V, F);
    }
    HOST(pos, T, I);
    HOST(seq, T, I);
    HOST(out_row, T, I);
    HOST(next, (size_t)d->n_seq, I);
    HOST(out_ids, T, I);
    if (d->on_device) {
        DEV(dtok, T, I);
        DEV(dpos, T, I);
        DEV(dout, T, I);
        const struct attn_args at = {.n_tokens = ATTN_SPLIT_TOKENS, .n_head = (int32_t)hp->n_head,
                                     .head_dim = (int32_t)hd, .n_kv = d->n_ctx};
        DEV(attn_scratch, attn_scratch_floats(&at), F);
        if (hybrid) DEV(gdn_done, (size_t)hp->dt_rank, I); /* zeroed at creation (context.c) */
        if (moe) {
            /* the grouped path (batches from MOE_GROUPED_TOKENS on) also keeps outputs and a plan */
            const struct moe_ffn_args mf = {.n_tokens = d->n_batch, .n_expert_used = (int32_t)n_used,
                                            .n_ff = hp->n_ff_exp, .n_embd = n_embd, .n_expert = (int32_t)hp->n_expert};
            DEV(moe_scratch, moe_ffn_scratch_floats(&mf), F);
        }
        if (d->heads) HOST(logits_host, T * V, F);
        if (d->x_host) PINNED(x_host, T * (size_t)n_embd, F); /* a split's device stage: x arrives and leaves through it */
    }
    if (d->exps_host) { /* expert offload: what crosses to the CPU's MoE op and back */
        PINNED(off_x, T * (size_t)n_embd, F);
        PINNED(off_ids, T * (size_t)n_used, I);
        PINNED(off_w, T * (size_t)n_used, F);
        PINNED(off_y, T * (size_t)n_embd, F);
        HOST(off_layer, (size_t)hp->n_layer_all, 1);
    }
    return l.n;
}

uint64_t ctx_scratch_entry_bytes(const struct ctx_scratch_entry *e) {
    return (uint64_t)(e->count ? e->count : 1) * (uint64_t)e->size;
}

uint64_t ctx_scratch_bytes(const struct infer_model *m, const struct ctx_dims *d, enum ctx_scratch_place place,
                           uint64_t align) {
    struct ctx_scratch_entry e[CTX_SCRATCH_MAX];
    const int32_t n_all = ctx_scratch_table(m, d, e), n = n_all < CTX_SCRATCH_MAX ? n_all : CTX_SCRATCH_MAX;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (e[i].place != place) continue;
        const uint64_t b = ctx_scratch_entry_bytes(&e[i]);
        total += (b + align - 1) / align * align;
    }
    return total;
}
