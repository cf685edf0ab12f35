/* context: the public context API (include/infer.h "contexts") — creation with every buffer sized
 * up front, batch validation, decode, logits and sequence truncation.
 *
 * Why validate first: infer_decode checks the whole batch (ids, sequences, positions, room) before
 * anything is written, so INFER_E_ARG and INFER_E_CTX_FULL leave the context exactly as it was. The
 * sequence lengths (the only state that says which cells are live) change only after the forward pass
 * succeeded; a failed pass may have written cells past a sequence's end, which nothing reads. (A
 * recurrent layer's state is updated in place, so after a failed pass of a hybrid model the sequences
 * of that batch must be truncated to a kept state or cleared; the CPU ops fail only on bad shapes,
 * which context creation rules out.)
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctx_scratch.h"
#include "ctx_stages.h"
#include "forward.h"
#include "quant.h"
#include "tp.h"

infer_ctx_params infer_ctx_params_default(void) {
    infer_ctx_params p = {0, 512, 1, 0, INFER_TYPE_F16, 0};
    return p;
}

/* The tensor types the forward pass expects where it reads floats, and the shapes its ops take. */
static infer_status ctx_check_model(const struct infer_model *m) {
    const struct arch_row *a = m->arch;
    if (m->rope_freqs)
        return infer_fail(INFER_E_UNSUPPORTED, "context: %s: rope_freqs.weight (frequency factors) is not supported",
                          a->name);
    if (m->hp.n_embd % 32 || m->hp.head_dim % 2 || m->hp.n_rot > m->hp.head_dim)
        return infer_fail(INFER_E_UNSUPPORTED, "context: n_embd %lld head_dim %lld n_rot %lld: expected n_embd a "
                          "multiple of 32, head_dim even, n_rot <= head_dim", (long long)m->hp.n_embd,
                          (long long)m->hp.head_dim, (long long)m->hp.n_rot);
    if (m->hp.head_dim > 512 || m->hp.d_state > 256 || (m->hp.d_conv && (m->hp.d_conv < 2 || m->hp.d_conv > 16)))
        return infer_fail(INFER_E_UNSUPPORTED, "context: head_dim %lld, ssm.state_size %lld, ssm.conv_kernel %lld: "
                          "the ops take head_dim <= 512, state_size <= 256, conv_kernel 2..16", (long long)m->hp.head_dim,
                          (long long)m->hp.d_state, (long long)m->hp.d_conv);
    if (m->output_norm->type != INFER_TYPE_F32)
        return infer_fail(INFER_E_UNSUPPORTED, "context: output_norm.weight is %s: expected F32",
                          infer_type_name(m->output_norm->type));
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *f32s[] = {L->attn_norm, L->ffn_norm, L->post_attn_norm, L->attn_q_norm,
                                            L->attn_k_norm, L->ffn_gate_inp, L->ffn_gate_inp_shexp, L->ssm_conv1d,
                                            L->ssm_dt_bias, L->ssm_a, L->ssm_norm, L->nextn_enorm, L->nextn_hnorm,
                                            L->nextn_shared_head_norm};
        for (size_t i = 0; i < sizeof f32s / sizeof *f32s; i++)
            if (f32s[i] && f32s[i]->type != INFER_TYPE_F32)
                return infer_fail(INFER_E_UNSUPPORTED, "context: %s is %s: expected F32", f32s[i]->name,
                                  infer_type_name(f32s[i]->type));
        if (L->ffn_gate && L->ffn_gate->type != L->ffn_up->type)
            return infer_fail(INFER_E_UNSUPPORTED, "context: blk.%lld: ffn_gate %s and ffn_up %s: the fused gate/up "
                              "product needs one type", (long long)il, infer_type_name(L->ffn_gate->type),
                              infer_type_name(L->ffn_up->type));
        if (L->ffn_gate_shexp && L->ffn_gate_shexp->type != L->ffn_up_shexp->type)
            return infer_fail(INFER_E_UNSUPPORTED, "context: blk.%lld: ffn_gate_shexp %s and ffn_up_shexp %s: the "
                              "fused gate/up product needs one type", (long long)il,
                              infer_type_name(L->ffn_gate_shexp->type), infer_type_name(L->ffn_up_shexp->type));
        if (L->ffn_gate_exps && L->ffn_gate_exps->type != L->ffn_up_exps->type)
            return infer_fail(INFER_E_UNSUPPORTED, "context: blk.%lld: ffn_gate_exps %s and ffn_up_exps %s: expected "
                              "one type", (long long)il, infer_type_name(L->ffn_gate_exps->type),
                              infer_type_name(L->ffn_up_exps->type));
    }
    return INFER_OK;
}

/* Every op the model's forward pass calls must be in the backend's table. */
static infer_status ctx_check_ops(const infer_ctx *c) {
    const struct infer_backend_ops *o = c->be->ops;
    const int hybrid = (c->m->arch->flags & ARCH_F_HYBRID) != 0, moe = c->m->hp.n_expert > 0;
    const struct { const char *name; int needed, present; } ops[] = {
        {"quantize", 1, o->quantize != NULL}, {"mmv", 1, o->mmv != NULL},         {"mm", 1, o->mm != NULL},
        {"norm", 1, o->norm != NULL},         {"rope", 1, o->rope != NULL},       {"act", 1, o->act != NULL},
        {"attn", 1, o->attn != NULL},         {"embed", 1, o->embed != NULL},     {"kv_store", 1, o->kv_store != NULL},
        {"moe_route", moe, o->moe_route != NULL}, {"moe_ffn", moe, o->moe_ffn != NULL},
        {"ssm_conv", hybrid, o->ssm_conv != NULL}, {"gdn", hybrid, o->gdn != NULL},
    };
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (ops[i].needed && !ops[i].present)
            return infer_fail(INFER_E_UNSUPPORTED, "infer_ctx_create: the %s backend has no %s op, which %s models need",
                              o->name, ops[i].name, c->m->arch->name);
    return INFER_OK;
}

/* Allocates every buffer of the scratch table (ctx_scratch.c) into its field of c, keeping the table for the free. */
static infer_status ctx_alloc_scratch(infer_ctx *c) {
    const int32_t n = ctx_scratch_table(c->m, &c->dims, c->scratch);
    if (n > CTX_SCRATCH_MAX)
        return infer_fail(INFER_E_INTERNAL, "context: %d scratch buffers: CTX_SCRATCH_MAX is %d", n, CTX_SCRATCH_MAX);
    c->n_scratch = n;
    for (int32_t i = 0; i < c->n_scratch; i++) {
        const struct ctx_scratch_entry *e = &c->scratch[i];
        void **field = (void **)((char *)c + e->field);
        const size_t bytes = (size_t)ctx_scratch_entry_bytes(e);
        if (e->place == CTX_SCRATCH_HOST) {
            *field = xcalloc(1, bytes);
            if (!*field) return infer_fail(INFER_E_OOM, "context: %zu bytes of host memory for %s", bytes, e->name);
        } else if (e->place == CTX_SCRATCH_PINNED) {
            /* the backend's message has the bytes and why */
            if (c->be->ops->host_alloc(c->be, bytes, field) != INFER_OK)
                return infer_fail_context(INFER_E_OOM, "context: page-locked host memory for %s", e->name);
        } else if (c->be->ops->alloc(c->be, bytes, field) != INFER_OK) {
            return infer_fail(INFER_E_OOM, "context: %zu bytes of scratch (%s) do not fit", bytes, e->name);
        }
    }
    return INFER_OK;
}

/* One stage of a context (forward.h): its description (ctx_stages.h), where it runs and the layers whose experts
 * run on the host. */
struct ctx_stage {
    const struct ctx_stage_desc *d;
    int device;          /* d->home >= 0: on this CUDA device, unless make */
    ctx_backend_fn make; /* a device stage on this backend instead (a test hook); the CPU's for the host */
    const uint8_t *exps_host; /* (n_layer_all) layers whose routed experts run on the host; NULL: none */
};

/* A device stage's cells, recurrent state and scratch against its device's free memory, before any of them is
 * allocated: a context that cannot fit is one error with both numbers, never a failed allocation halfway. */
static infer_status ctx_check_fit(const infer_ctx *c, const struct ctx_stage *stage) {
    const struct infer_model *m = c->m;
    const int drafting = c->n_draft > 0, mtp = ctx_dims_mtp(&c->dims);
    int32_t n_kv = 0, n_gdn = 0;
    for (int32_t il = 0; il < (int32_t)m->hp.n_layer_all; il++) {
        const int mine = (il >= stage->d->il0 && il < stage->d->il1) || (il >= m->hp.n_layer && mtp);
        const enum kv_cache_kind kind = mine ? kv_cache_layer(m, il, drafting) : KV_CACHE_NONE;
        n_kv += kind == KV_CACHE_CELLS;
        n_gdn += kind == KV_CACHE_STATE;
    }
    struct kv_cache_bytes b;
    kv_cache_bytes_of(&m->hp, n_kv, n_gdn, mtp, c->n_seq, c->n_ctx,
                      drafting ? c->n_draft + 1 : 0, c->dims.kv_type, &b);
    const double parts[] = {b.k, b.v, b.conv, b.ssm, b.ring_conv, b.ring_ssm, b.ckpt_conv, b.ckpt_ssm, b.h, b.ring_h,
                            b.ckpt_h};
    double cache = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) cache += parts[i];
    const double scratch = (double)ctx_scratch_bytes(m, &c->dims, CTX_SCRATCH_BACKEND, 256);
    size_t free_b = 0, total_b = 0;
    infer_status st = c->be->ops->mem_info(c->be, &free_b, &total_b);
    if (st != INFER_OK || cache + scratch <= (double)free_b) return st;
    return infer_fail(INFER_E_OOM, "infer_ctx_create: the context's part on CUDA device %d (layers %d-%d%s) needs "
                      "%.1f MiB (KV cells and recurrent state %.1f, scratch %.1f) but it has %.1f MiB free of %.1f MiB; "
                      "use a smaller context (-c), fewer sequences (-np), q8_0 cells (-ctk q8_0) or fewer layers on the "
                      "GPU", stage->device, stage->d->il0, stage->d->il1 - 1, stage->d->heads ? " and the head" : "",
                      (cache + scratch) / 1048576.0, cache / 1048576.0, scratch / 1048576.0, (double)free_b / 1048576.0,
                      (double)total_b / 1048576.0);
}

/* One stage (a whole context when it spans every layer and runs the head). */
static infer_status ctx_create(const infer_model *m, const infer_ctx_params *p, const struct ctx_stage *stage,
                               infer_ctx **out) {
    infer_status st = INFER_OK;
    *out = NULL;
    struct ctx_dims dims;
    const int on_device = stage->d->home != CTX_HOST && !stage->make;
    if ((st = ctx_dims_resolve(m, p, on_device, "infer_ctx_create", &dims)) != INFER_OK) return st;
    dims.heads = stage->d->heads;
    dims.exps_host = stage->d->exps_host;
    dims.x_host = stage->d->x_host && on_device;
    dims.head_rows = stage->d->head_rows;
    dims.embd_away = stage->d->embd_away && on_device;
    if ((st = ctx_check_model(m)) != INFER_OK) return st;
    infer_ctx *c = xcalloc(1, sizeof *c);
    if (!c) return INFER_OOM("context");
    c->m = m;
    c->dims = dims;
    c->n_ctx = dims.n_ctx;
    c->n_batch = dims.n_batch;
    c->n_seq = dims.n_seq;
    c->n_draft = dims.n_draft;
    c->spec_force = -1;
    c->on_device = dims.on_device;
    c->head_v0 = stage->d->head_v0;
    c->head_rows = stage->d->head_rows;
    int n_threads = p ? p->n_threads : 0;
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)(n < 64 ? n : 64) : 1;
    }
    /* a machine shared with other jobs: two spinning pools on too few cores wait out each other's time slices at
     * every op (tests/run.sh sets 1 while it runs test programs side by side) */
    const int cap = getenv("INFER_MAX_THREADS") ? atoi(getenv("INFER_MAX_THREADS")) : 0;
    if (cap >= 1 && cap < n_threads) n_threads = cap;
    if (c->on_device)
        TRY(backend_cuda_create(stage->device, &c->be)); /* the context's own stream on the stage's device */
    else if (stage->d->home != CTX_HOST)
        TRY(stage->make(n_threads, &c->be));
    else
        TRY(backend_cpu_create(n_threads, &c->be));
    TRY(ctx_check_ops(c));
    if (c->on_device) TRY(ctx_check_fit(c, stage));
    /* every stage keeps snapshots of its recurrent layers for the drafts' rollback; the MTP block's cells and
     * hidden states live with the head (every rank of a tensor-parallel group: ctx_dims_mtp) */
    TRY(kv_cache_create_range(c->be, m, stage->d->il0, stage->d->il1, c->n_seq, c->n_ctx,
                              c->n_draft ? c->n_draft + 1 : 0, ctx_dims_mtp(&dims), dims.kv_type, &c->kv));
    TRY(ctx_alloc_scratch(c));
    if (c->gdn_done) /* gdn_conv's counters start at zero; every launch leaves them so */
        TRY(c->be->ops->zero(c->be, c->gdn_done, sizeof(uint32_t) * (size_t)m->hp.dt_rank));
    if (dims.exps_host) { /* the host's part of expert offload: the stage's flags and its own CPU backend */
        for (int32_t il = 0; il < (int32_t)m->hp.n_layer_all; il++)
            c->off_layer[il] = stage->exps_host[il] && ((il >= stage->d->il0 && il < stage->d->il1) ||
                                                        (il >= m->hp.n_layer && stage->d->heads));
        TRY(backend_cpu_create(n_threads, &c->off_be));
    }
    if (!c->on_device) {
        c->dpos = c->pos;
        c->dout = c->out_ids;
    }
    c->seg[0] = (struct forward_segment){.stage = c, .il0 = stage->d->il0, .il1 = stage->d->il1, .embeds = 1,
                                         .heads = stage->d->heads};
    c->n_seg = 1;
    *out = c;
    return INFER_OK;
fail:
    infer_ctx_free(c);
    return st;
}

/* The context of m whose layer il runs at layer_home[il] (CTX_HOST or a device; n_layer_all), its token table at
 * embd_home and its head at head_home, the layers flagged in exps_host (NULL: none) keeping their routed experts
 * on the host: one stage per home (ctx_stages.c), chained in order through next_stage from the public context
 * (the first), and the segments of the pass. dev_make: the devices' stages run on it instead of CUDA (a test hook). */
static infer_status ctx_create_placed(const infer_model *m, const infer_ctx_params *p, const int32_t *layer_home,
                                      int32_t embd_home, int32_t head_home, const uint8_t *exps_host,
                                      ctx_backend_fn dev_make, infer_ctx **out) {
    infer_status st = INFER_OK;
    struct ctx_stages sp;
    infer_ctx *stages[CTX_MAX_STAGES] = {NULL};
    TRY(ctx_stages_make(m, layer_home, embd_home, head_home, m->mtp_embd != NULL, exps_host, &sp));
    if (sp.n_seg > FORWARD_MAX_SEG)
        return infer_fail(INFER_E_UNSUPPORTED, "infer_ctx_create: %d segments: at most %d", sp.n_seg, FORWARD_MAX_SEG);
    for (int32_t k = 0; k < sp.n_st; k++) {
        const struct ctx_stage stage = {.d = &sp.st[k], .device = sp.st[k].home, .make = dev_make,
                                        .exps_host = exps_host};
        TRY(ctx_create(m, p, &stage, &stages[k]));
        if (k > 0) stages[k - 1]->next_stage = stages[k]; /* the public context frees the chain */
    }
    infer_ctx *c = stages[0];
    for (int32_t i = 0; i < sp.n_seg; i++) {
        const struct ctx_seg_desc *g = &sp.seg[i];
        c->seg[i] = (struct forward_segment){.stage = stages[g->stage], .il0 = g->il0, .il1 = g->il1,
                                             .embeds = g->embeds, .heads = g->heads};
    }
    c->n_seg = sp.n_seg;
    *out = c;
    return INFER_OK;
fail:
    infer_ctx_free(stages[0]); /* and the stages linked to it */
    return st;
}

/* The context of a model sharded over a tensor-parallel group (model_upload_tp): one stage per local rank, each on
 * the rank's view of the model (its heads and FFN columns, so its own cells and scratch) and using the model's
 * communicator of its device, chained in rank order from the first (the public context; the token lookup and the
 * head run there when it is the group's rank 0). A group over several processes also gets the message buffers
 * through which rank 0's process leads the others (tp_serve.c). */
static infer_status ctx_create_tp(const infer_model *m, const infer_ctx_params *p, infer_ctx **out) {
    infer_status st = INFER_OK;
    infer_ctx *st_[INFER_MAX_DEVICES] = {NULL};
    struct tp_rank rk[INFER_MAX_DEVICES];
    if (p && p->n_draft > 0 && m->tp_world > m->tp_n)
        return infer_fail(INFER_E_UNSUPPORTED, "infer_ctx_create: n_draft %d: MTP drafting under tensor parallelism "
                          "over several processes is not supported yet; run the group's GPUs from one process",
                          p->n_draft);
    TRY(tp_ranks(m, m->tp_world, rk)); /* as the load cut them: each rank's rows of the head */
    for (int32_t r = 0; r < m->tp_n; r++) {
        const int32_t rank = m->tp_rank0 + r;
        const int cut = m->tp_world > 1; /* a group of one keeps the whole head on rank 0 */
        const struct ctx_stage_desc d = {.home = m->gpu[r].device, .il0 = 0, .il1 = (int32_t)m->hp.n_layer,
                                         .heads = rank == 0, .head_v0 = cut ? rk[rank].v0 : 0,
                                         .head_rows = cut ? rk[rank].v1 - rk[rank].v0 : 0};
        const struct ctx_stage stage = {.d = &d, .device = m->gpu[r].device};
        TRY(ctx_create(m->tp_view[r], p, &stage, &st_[r]));
        if (r > 0) st_[r - 1]->next_stage = st_[r]; /* the public context frees the chain */
        st_[r]->tp_rank = rank;
        TRY(backend_cuda_tp_borrow(st_[r]->be, m->gpu[r].be));
    }
    infer_ctx *c = st_[0];
    c->tp_n = m->tp_n;
    memcpy(c->tp, st_, sizeof st_);
    if (m->tp_world > m->tp_n) {
        const size_t bytes = tp_msg_ints(c->n_batch) * sizeof(int32_t);
        c->tp_msg_host = xcalloc(1, bytes);
        if (!c->tp_msg_host) {
            st = INFER_OOM("the group's message");
            goto fail;
        }
        for (int32_t r = 0; r < c->tp_n; r++) TRY(st_[r]->be->ops->alloc(st_[r]->be, bytes, &c->tp_msg[r]));
    }
    *out = c;
    return INFER_OK;
fail:
    infer_ctx_free(st_[0]); /* and the ranks linked to it */
    return st;
}

infer_status infer_ctx_create(const infer_model *m, const infer_ctx_params *p, infer_ctx **out) {
    if (!out) return infer_fail(INFER_E_ARG, "infer_ctx_create: out is NULL");
    *out = NULL;
    if (!m) return infer_fail(INFER_E_ARG, "infer_ctx_create: model is NULL");
    if (m->tp_n > 0) return ctx_create_tp(m, p, out);
    const int64_t n_all = m->hp.n_layer_all;
    int32_t *home = xcalloc((size_t)n_all, sizeof *home);
    uint8_t *exps_host = xcalloc((size_t)n_all, 1);
    infer_status st = INFER_OK;
    if (!home || !exps_host) {
        st = INFER_OOM("the context's placement");
        goto done;
    }
    for (int64_t il = 0; il < n_all; il++) {
        const int32_t k = m->layer_gpu ? m->layer_gpu[il] : -1;
        home[il] = k >= 0 ? m->gpu[k].device : CTX_HOST;
        exps_host[il] = (uint8_t)m->layers[il].exps_host;
    }
    const int32_t embd = m->embd_gpu >= 0 ? m->gpu[m->embd_gpu].device : CTX_HOST;
    const int32_t head = m->head_gpu >= 0 ? m->gpu[m->head_gpu].device : CTX_HOST;
    st = ctx_create_placed(m, p, home, embd, head, exps_host, NULL, out);
done:
    xfree(home);
    xfree(exps_host);
    return st;
}

infer_status ctx_create_offload_on(const infer_model *m, const infer_ctx_params *p, int32_t n_gpu_layers,
                                   int32_t n_cpu_moe, ctx_backend_fn make, infer_ctx **out) {
    if (!out) return infer_fail(INFER_E_ARG, "ctx_create_offload_on: out is NULL");
    *out = NULL;
    if (!m || !make || n_cpu_moe < 0)
        return infer_fail(INFER_E_ARG, "ctx_create_offload_on: model or make is NULL, or n_cpu_moe < 0");
    if (m->n_gpu > 0)
        return infer_fail(INFER_E_ARG, "ctx_create_offload_on: the model's weights are on a device; a backend of its "
                          "own needs a model loaded with n_gpu_layers 0");
    const int64_t n_all = m->hp.n_layer_all;
    int32_t *layer = xcalloc((size_t)n_all, sizeof *layer);
    uint8_t *exps_host = xcalloc((size_t)n_all, 1);
    infer_status st = INFER_OK;
    if (!layer || !exps_host) {
        st = INFER_OOM("the context's placement");
        goto done;
    }
    struct model_homes h;
    model_homes_one(m, n_gpu_layers, 0, layer, &h); /* the "device" is 0: make's backend */
    int32_t seen = 0;
    for (int64_t il = 0; il < n_all; il++)
        if (m->layers[il].ffn_gate_exps) exps_host[il] = seen++ < n_cpu_moe;
    st = ctx_create_placed(m, p, layer, h.embd, h.head, exps_host, make, out);
done:
    xfree(layer);
    xfree(exps_host);
    return st;
}

infer_status ctx_create_split_on(const infer_model *m, const infer_ctx_params *p, int32_t n_gpu_layers,
                                 ctx_backend_fn make, infer_ctx **out) {
    return ctx_create_offload_on(m, p, n_gpu_layers, 0, make, out);
}

infer_status ctx_create_on(const infer_model *m, const infer_ctx_params *p, ctx_backend_fn make, infer_ctx **out) {
    return ctx_create_split_on(m, p, -1, make, out);
}

void infer_ctx_free(infer_ctx *c) {
    if (!c) return;
    if (c->tp_msg_host) { /* the other processes of the group stop following */
        if (tp_send(c, TP_MSG_STOP, NULL, 0, 0, 0) != INFER_OK)
            infer_log(INFER_LOG_WARN, "infer_ctx_free: telling the group's other processes to stop: %s",
                      infer_last_error());
        for (int32_t r = 0; r < c->tp_n; r++) c->tp[r]->be->ops->free(c->tp[r]->be, c->tp_msg[r]);
        xfree(c->tp_msg_host);
    }
    infer_ctx_free(c->next_stage);
    for (int32_t i = 0; i < c->n_scratch; i++) {
        const struct ctx_scratch_entry *e = &c->scratch[i];
        void *buf = *(void **)((char *)c + e->field);
        if (e->place == CTX_SCRATCH_HOST)
            xfree(buf);
        else if (e->place == CTX_SCRATCH_PINNED)
            c->be->ops->host_free(c->be, buf);
        else
            c->be->ops->free(c->be, buf);
    }
    backend_free(c->off_be);
    if (c->be) {
        c->be->ops->free(c->be, c->sample_buf);
        kv_cache_free(c->kv);
        backend_free(c->be);
    }
    xfree(c);
}

INFER_API uint64_t infer_ctx_bus_bytes(const infer_ctx *c) {
    uint64_t n = 0;
    for (; c; c = c->next_stage) n += c->bus_bytes; /* the batches count in the public stage, logits in the head's */
    return n;
}

/* Fills c->pos / c->seq / c->out_row for b, or fails leaving the sequences as they were. */
static infer_status ctx_validate(infer_ctx *c, const infer_batch *b, int32_t *n_out) {
    const int32_t n = b->n_tokens, n_vocab = (int32_t)c->m->hp.n_vocab;
    if (n < 1 || n > c->n_batch || !b->token)
        return infer_fail(INFER_E_ARG, "infer_decode: n_tokens %d%s: expected 1..n_batch (%d) tokens", n,
                          b->token ? "" : " with token NULL", c->n_batch);
    memcpy(c->next, c->kv->len, (size_t)c->n_seq * sizeof(int32_t));
    int32_t full = -1;
    *n_out = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t s = b->seq_id ? b->seq_id[i] : 0;
        if (b->token[i] < 0 || b->token[i] >= n_vocab)
            return infer_fail(INFER_E_ARG, "infer_decode: token[%d] = %d: expected an id in 0..%d", i, b->token[i],
                              n_vocab - 1);
        if (s < 0 || s >= c->n_seq)
            return infer_fail(INFER_E_ARG, "infer_decode: seq_id[%d] = %d: expected 0..%d", i, s, c->n_seq - 1);
        if (b->pos && b->pos[i] != c->next[s])
            return infer_fail(INFER_E_ARG, "infer_decode: pos[%d] = %d for sequence %d: expected %d (positions of a "
                              "sequence are consecutive and continue it)", i, b->pos[i], s, c->next[s]);
        if (c->next[s] >= c->n_ctx && full < 0) full = s;
        c->seq[i] = s;
        c->pos[i] = c->next[s]++;
        const int want = b->logits ? b->logits[i] != 0 : i == n - 1;
        c->out_row[i] = want ? (*n_out)++ : -1;
    }
    if (full >= 0)
        return infer_fail(INFER_E_CTX_FULL, "infer_decode: sequence %d would pass n_ctx (%d positions) with this "
                          "batch", full, c->n_ctx);
    return INFER_OK;
}

struct ctx_mtp_job {
    infer_ctx *c, *h;
    const int32_t *tok;
    int32_t n_tokens;
};
/* The block's inputs (each token's previous h) and the block itself: fixed by the batch's sequences, so a device
 * replays it as a graph. */
static infer_status ctx_mtp_inputs(const infer_ctx *c, infer_ctx *h, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const size_t n_embd = (size_t)c->m->hp.n_embd;
    int32_t prev[256]; /* per sequence: its previous token in this batch, -1 before the first (n_seq <= 256) */
    for (int32_t s = 0; s < c->n_seq; s++) prev[s] = -1;
    for (int32_t t = 0; t < n_tokens; t++) {
        const int32_t s = c->seq[t];
        TRY(h->be->ops->copy(h->be, h->mtp_h + (size_t)t * n_embd,
                             prev[s] < 0 ? kv_cache_h(h->kv, s) : h->hid + (size_t)prev[s] * n_embd,
                             n_embd * sizeof(float)));
        prev[s] = t;
    }
fail:
    return st;
}
static infer_status ctx_mtp_follow_body(void *arg) {
    infer_status st = INFER_OK;
    const struct ctx_mtp_job *j = arg;
    infer_ctx *c = j->c, *h = j->h;
    if (h->tp_n > 0) { /* every rank its own copy of the states, its part of the block */
        for (int32_t r = 0; r < h->tp_n; r++) TRY(ctx_mtp_inputs(c, h->tp[r], j->n_tokens));
        return forward_tp_mtp(h, j->tok, j->n_tokens, FORWARD_MTP_H_BATCH, -1, NULL);
    }
    TRY(ctx_mtp_inputs(c, h, j->n_tokens));
    TRY(layer_mtp(h, j->tok, h->mtp_h, j->n_tokens, NULL));
fail:
    return st;
}

/* Keeps the MTP block in step with the target after a batch: runs it over the same tokens with the
 * target's hidden states shifted by one (token t pairs with the h of the position before it: that of
 * its sequence's previous token in the batch, or the sequence's last h from the cache), filling its KV
 * cells, then records the batch's hidden states in the cache (llama.cpp common_speculative draft-mtp
 * process()). All on the head's stage h, where the block, its cells and the hidden states live. */
static infer_status ctx_mtp_follow(infer_ctx *c, const int32_t *tokens, int32_t n_tokens) {
    infer_status st = INFER_OK;
    infer_ctx *h = forward_head_stage(c);
    struct infer_backend *be = h->be;
    struct kv_cache *kv = h->kv;
    const size_t n_embd = (size_t)c->m->hp.n_embd;
    int32_t seen[256] = {0}; /* n_seq <= 256 */
    for (int32_t t = 0; t < n_tokens; t++) {
        const int32_t s = c->seq[t];
        if (!seen[s] && kv->mtp_len[s] != c->pos[t])
            return infer_fail(INFER_E_INTERNAL, "infer_decode: MTP cells of sequence %d hold %d positions, expected %d",
                              s, kv->mtp_len[s], c->pos[t]);
        seen[s] = 1;
    }
    const int32_t *tok = tokens;
    if (h->on_device) { /* the batch's ids are in dtok of the stage that ran the lookup (forward_segment_run) */
        if (c->seg[0].stage != h) {
            TRY(be->ops->upload(be, h->dtok, tokens, (size_t)n_tokens * sizeof(int32_t)));
            h->bus_bytes += (uint64_t)n_tokens * sizeof(int32_t);
        }
        tok = h->dtok;
    }
    struct ctx_mtp_job job = {.c = c, .h = h, .tok = tok, .n_tokens = n_tokens};
    TRY(forward_stage_run(h, forward_mtp_graph_key(h, 1, n_tokens, c->seq, n_tokens), ctx_mtp_follow_body, &job));
    /* a tensor-parallel group: every rank keeps the (same) hidden states, the MTP block's input on its rank */
    for (int32_t r = 0; r < (h->tp_n > 0 ? h->tp_n : 1); r++) {
        infer_ctx *k = h->tp_n > 0 ? h->tp[r] : h;
        for (int32_t t = 0; t < n_tokens; t++) {
            const int32_t s = c->seq[t];
            if (c->pos[t] >= c->next[s] - k->kv->n_ring || c->pos[t] == c->next[s] - 1)
                TRY(kv_cache_put_h(k->kv, s, c->pos[t], c->pos[t] == c->next[s] - 1, k->hid + (size_t)t * n_embd));
            k->kv->mtp_len[s] = c->pos[t] + 1;
        }
    }
fail:
    return st;
}

infer_status infer_decode(infer_ctx *c, const infer_batch *b) {
    infer_status st = INFER_OK;
    int32_t n_out = 0;
    if (!c || !b) return infer_fail(INFER_E_ARG, "infer_decode: %s is NULL", c ? "batch" : "context");
    c->n_tokens = 0; /* logits of the previous batch are gone whatever happens */
    forward_head_stage(c)->logits_ready = 0;
    c->tp_head_pending = 0;
    c->spec_kept = 0;
    TRY(ctx_validate(c, b, &n_out));
    TRY(tp_send(c, TP_MSG_DECODE, b, 0, 0, 0));
    TRY(forward_run(c, b->token, b->n_tokens, n_out));
    if (c->n_draft) TRY(ctx_mtp_follow(c, b->token, b->n_tokens));
    for (int32_t s = 0; s < c->n_seq; s++)
        if (c->next[s] != c->kv->len[s])
            for (infer_ctx *stage = c; stage; stage = stage->next_stage) kv_cache_advanced(stage->kv, s, c->next[s]);
    c->n_tokens = b->n_tokens;
    c->n_out = n_out;
fail:
    c->dev_tokens = NULL; /* one batch's */
    return st;
}

const float *infer_logits(const infer_ctx *c, int32_t i) {
    if (!c || c->n_tokens == 0) return NULL;
    if (i < 0) i = c->n_tokens + i;
    if (i < 0 || i >= c->n_tokens || c->out_row[i] < 0) return NULL;
    const size_t n_vocab = (size_t)c->m->hp.n_vocab;
    if (c->tp_n > 0 && c->tp_rank != 0) return NULL; /* a process following the group's rank 0 has no head */
    /* the logits stay on the device until asked for; the host copy is a cache of them, so the context is
     * logically unchanged (hence the non-const head stage) */
    infer_ctx *h = forward_head_stage(c);
    if (!h->on_device) return h->logits + (size_t)c->out_row[i] * n_vocab;
    if (c->tp_head_pending && forward_tp_gather(c->tp[0]) != INFER_OK) return NULL; /* reduced on first need */
    if (!h->logits_ready) {
        if (h->be->ops->download(h->be, h->logits_host, h->logits, (size_t)c->n_out * n_vocab * sizeof(float)) !=
            INFER_OK)
            return NULL;
        h->logits_ready = 1;
        h->bus_bytes += (uint64_t)c->n_out * n_vocab * sizeof(float);
    }
    return h->logits_host + (size_t)c->out_row[i] * n_vocab;
}

infer_status infer_seq_rm(infer_ctx *c, int32_t seq, int32_t p0, int32_t p1) {
    if (!c) return infer_fail(INFER_E_ARG, "infer_seq_rm: context is NULL");
    if (seq < 0 || seq >= c->n_seq)
        return infer_fail(INFER_E_ARG, "infer_seq_rm: sequence %d: expected 0..%d", seq, c->n_seq - 1);
    const int32_t len = c->kv->len[seq];
    if (p0 < 0) p0 = 0;
    if (p1 >= 0 && p1 <= p0) return INFER_OK; /* empty range */
    if (p0 >= len) return INFER_OK;           /* nothing held there */
    if (p1 >= 0 && p1 < len)
        return infer_fail(INFER_E_ARG, "infer_seq_rm: [%d, %d) of sequence %d (%d positions): only a suffix or the "
                          "whole sequence can be removed", p0, p1, seq, len);
    infer_status st = INFER_OK;
    for (infer_ctx *stage = c; stage; stage = stage->next_stage) /* every stage can, or nothing changes */
        TRY(kv_cache_truncate_check(stage->kv, seq, p0));
    TRY(tp_send(c, TP_MSG_SEQ_RM, NULL, seq, p0, p1));
    for (infer_ctx *stage = c; stage; stage = stage->next_stage) TRY(kv_cache_truncate(stage->kv, seq, p0));
fail:
    return st;
}

infer_status infer_seq_checkpoint(infer_ctx *c, int32_t seq) {
    if (!c) return infer_fail(INFER_E_ARG, "infer_seq_checkpoint: context is NULL");
    if (seq < 0 || seq >= c->n_seq)
        return infer_fail(INFER_E_ARG, "infer_seq_checkpoint: sequence %d: expected 0..%d", seq, c->n_seq - 1);
    infer_status st = INFER_OK;
    TRY(tp_send(c, TP_MSG_SEQ_CHECKPOINT, NULL, seq, 0, 0));
    for (infer_ctx *stage = c; stage; stage = stage->next_stage) TRY(kv_cache_checkpoint(stage->kv, seq));
fail:
    return st;
}

int32_t infer_seq_pos_max(const infer_ctx *c, int32_t seq) {
    if (!c || seq < 0 || seq >= c->n_seq) return -1;
    return c->kv->len[seq] - 1;
}
