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
#include <string.h>
#include <unistd.h>

#include "ctx_scratch.h"
#include "forward.h"
#include "quant.h"

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
    c->n_scratch = ctx_scratch_table(c->m, &c->dims, c->scratch);
    for (int32_t i = 0; i < c->n_scratch; i++) {
        const struct ctx_scratch_entry *e = &c->scratch[i];
        void **field = (void **)((char *)c + e->field);
        const size_t bytes = (size_t)ctx_scratch_entry_bytes(e);
        if (e->place == CTX_SCRATCH_HOST) {
            *field = xcalloc(1, bytes);
            if (!*field) return infer_fail(INFER_E_OOM, "context: %zu bytes of host memory for %s", bytes, e->name);
        } else if (e->place == CTX_SCRATCH_PINNED) {
            if (c->be->ops->host_alloc(c->be, bytes, field) != INFER_OK)
                return infer_fail(INFER_E_OOM, "context: %zu bytes of page-locked host memory (%s): %s", bytes,
                                  e->name, infer_last_error());
        } else if (c->be->ops->alloc(c->be, bytes, field) != INFER_OK) {
            return infer_fail(INFER_E_OOM, "context: %zu bytes of scratch (%s) do not fit", bytes, e->name);
        }
    }
    return INFER_OK;
}

/* One stage of a context (forward.h): the trunk layers [il0, il1) whose cells it holds, where it runs, and
 * whether it runs the head (only that stage has logits; ctx_scratch_table reads it from ctx_dims.heads). */
struct ctx_stage {
    int32_t il0, il1;
    int on_device;       /* on the model's CUDA device */
    ctx_backend_fn make; /* else on this backend (NULL: the CPU's) */
    int heads;
    const uint8_t *exps_host; /* (n_layer_all) layers whose routed experts run on the host; NULL: none */
};

/* Whether a device stage runs layers (of its range, or the MTP blocks with the head) whose experts stay on the host. */
static int ctx_stage_offloads(const struct infer_model *m, const struct ctx_stage *st) {
    if (!st->exps_host || (!st->on_device && !st->make)) return 0;
    for (int32_t il = 0; il < (int32_t)m->hp.n_layer_all; il++)
        if (st->exps_host[il] && ((il >= st->il0 && il < st->il1) || (il >= m->hp.n_layer && st->heads))) return 1;
    return 0;
}

/* The stage of a context (a whole one when the stage spans every layer and runs the head). */
static infer_status ctx_create(const infer_model *m, const infer_ctx_params *p, const struct ctx_stage *stage,
                               infer_ctx **out) {
    infer_status st = INFER_OK;
    *out = NULL;
    struct ctx_dims dims;
    if ((st = ctx_dims_resolve(m, p, stage->on_device, "infer_ctx_create", &dims)) != INFER_OK) return st;
    dims.heads = stage->heads;
    dims.exps_host = ctx_stage_offloads(m, stage);
    if (dims.n_draft > 0 && m->be)
        return infer_fail(INFER_E_UNSUPPORTED, "infer_ctx_create: n_draft %d: MTP drafting on the GPU is not supported "
                          "yet; load the model with n_gpu_layers 0 to draft on the CPU", dims.n_draft);
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
    int n_threads = p ? p->n_threads : 0;
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)(n < 64 ? n : 64) : 1;
    }
    if (c->on_device)
        TRY(backend_cuda_create(m->device, &c->be)); /* the context's own stream on the model's device */
    else if (stage->make)
        TRY(stage->make(n_threads, &c->be));
    else
        TRY(backend_cpu_create(n_threads, &c->be));
    TRY(ctx_check_ops(c));
    TRY(kv_cache_create_range(c->be, m, stage->il0, stage->il1, c->n_seq, c->n_ctx, c->n_draft ? c->n_draft + 1 : 0,
                              c->n_draft > 0, dims.kv_type, &c->kv));
    TRY(ctx_alloc_scratch(c));
    if (dims.exps_host) { /* the host's part of expert offload: its flags and its own CPU backend */
        for (int32_t il = 0; il < (int32_t)m->hp.n_layer_all; il++) /* the stage's own layers only */
            c->off_layer[il] = stage->exps_host[il] &&
                               ((il >= stage->il0 && il < stage->il1) || (il >= m->hp.n_layer && stage->heads));
        TRY(backend_cpu_create(n_threads, &c->off_be));
    }
    if (!c->on_device) {
        c->dpos = c->pos;
        c->dout = c->out_ids;
    }
    c->seg[0] = (struct forward_segment){.stage = c, .il0 = stage->il0, .il1 = stage->il1, .embeds = 1,
                                         .heads = stage->heads};
    c->n_seg = 1;
    *out = c;
    return INFER_OK;
fail:
    infer_ctx_free(c);
    return st;
}

/* The context of m placed as (layer0, head) (model_placement): one stage when the device holds nothing or
 * everything; else a split (forward.h) into the host stage (the token lookup, layers [0, layer0), the head)
 * and the device stage (layers [layer0, n_layer)), run as three segments host -> device -> host. exps_host
 * (n_layer_all flags, NULL: none): the device stage's layers whose routed experts run on the host (expert
 * offload). dev_make: the device part's backend when it is not CUDA (a test hook). */
static infer_status ctx_create_placed(const infer_model *m, const infer_ctx_params *p, int32_t layer0, int head,
                                      const uint8_t *exps_host, ctx_backend_fn dev_make, infer_ctx **out) {
    infer_status st = INFER_OK;
    const int32_t n_layer = (int32_t)m->hp.n_layer;
    struct ctx_stage host = {.il0 = 0, .il1 = n_layer, .on_device = 0, .make = NULL, .heads = 1};
    struct ctx_stage dev = {.il0 = 0, .il1 = n_layer, .on_device = dev_make == NULL, .make = dev_make, .heads = 1,
                            .exps_host = exps_host};
    if (head) return ctx_create(m, p, &dev, out);
    if (layer0 >= n_layer) return ctx_create(m, p, &host, out);
    if (p && p->n_draft > 0)
        return infer_fail(INFER_E_UNSUPPORTED, "infer_ctx_create: n_draft %d: MTP drafting on the GPU is not supported "
                          "yet (the model has layers there); load it with n_gpu_layers 0 to draft on the CPU", p->n_draft);
    host.il1 = layer0, dev.il0 = layer0, dev.heads = 0;
    infer_ctx *c = NULL, *d = NULL;
    TRY(ctx_create(m, p, &host, &c));
    TRY(ctx_create(m, p, &dev, &d));
    c->next_stage = d; /* a device stage has its page-locked x_host from the scratch table (ctx_scratch.c) */
    c->seg[0] = (struct forward_segment){.stage = c, .il0 = 0, .il1 = layer0, .embeds = 1, .heads = 0};
    c->seg[1] = (struct forward_segment){.stage = d, .il0 = layer0, .il1 = n_layer, .embeds = 0, .heads = 0};
    c->seg[2] = (struct forward_segment){.stage = c, .il0 = n_layer, .il1 = n_layer, .embeds = 0, .heads = 1};
    c->n_seg = 3;
    *out = c;
    return INFER_OK;
fail:
    infer_ctx_free(c); /* and d, once linked */
    return st;
}

infer_status infer_ctx_create(const infer_model *m, const infer_ctx_params *p, infer_ctx **out) {
    if (!out) return infer_fail(INFER_E_ARG, "infer_ctx_create: out is NULL");
    *out = NULL;
    if (!m) return infer_fail(INFER_E_ARG, "infer_ctx_create: model is NULL");
    uint8_t *exps_host = xcalloc((size_t)m->hp.n_layer_all, 1);
    if (!exps_host) return INFER_OOM("expert offload flags");
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) exps_host[il] = (uint8_t)m->layers[il].exps_host;
    const infer_status st = ctx_create_placed(m, p, m->gpu_layer0, m->gpu_head, exps_host, NULL, out);
    xfree(exps_host);
    return st;
}

infer_status ctx_create_offload_on(const infer_model *m, const infer_ctx_params *p, int32_t n_gpu_layers,
                                   int32_t n_cpu_moe, ctx_backend_fn make, infer_ctx **out) {
    if (!out) return infer_fail(INFER_E_ARG, "ctx_create_offload_on: out is NULL");
    *out = NULL;
    if (!m || !make || n_cpu_moe < 0)
        return infer_fail(INFER_E_ARG, "ctx_create_offload_on: model or make is NULL, or n_cpu_moe < 0");
    if (m->be)
        return infer_fail(INFER_E_ARG, "ctx_create_offload_on: the model's weights are on a device; a backend of its "
                          "own needs a model loaded with n_gpu_layers 0");
    int32_t layer0;
    int head;
    model_placement(&m->hp, n_gpu_layers, &layer0, &head);
    uint8_t *exps_host = xcalloc((size_t)m->hp.n_layer_all, 1);
    if (!exps_host) return INFER_OOM("expert offload flags");
    int32_t seen = 0;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++)
        if (m->layers[il].ffn_gate_exps) exps_host[il] = seen++ < n_cpu_moe;
    const infer_status st = ctx_create_placed(m, p, layer0, head, exps_host, make, out);
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

/* Keeps the MTP block in step with the target after a batch: runs it over the same tokens with the
 * target's hidden states shifted by one (token t pairs with the h of the position before it: that of
 * its sequence's previous token in the batch, or the sequence's last h from the cache), filling its KV
 * cells, then records the batch's hidden states in the cache (llama.cpp common_speculative draft-mtp
 * process()). */
static infer_status ctx_mtp_follow(infer_ctx *c, const int32_t *tokens, int32_t n_tokens) {
    infer_status st = INFER_OK;
    struct kv_cache *kv = c->kv;
    const size_t n_embd = (size_t)c->m->hp.n_embd;
    int32_t prev[256]; /* per sequence: its previous token in this batch, -1 before the first (n_seq <= 256) */
    for (int32_t s = 0; s < c->n_seq; s++) prev[s] = -1;
    for (int32_t t = 0; t < n_tokens; t++) {
        const int32_t s = c->seq[t];
        if (prev[s] < 0 && kv->mtp_len[s] != c->pos[t])
            return infer_fail(INFER_E_INTERNAL, "infer_decode: MTP cells of sequence %d hold %d positions, expected %d",
                              s, kv->mtp_len[s], c->pos[t]);
        TRY(c->be->ops->copy(c->be, c->mtp_h + (size_t)t * n_embd,
                             prev[s] < 0 ? kv_cache_h(kv, s) : c->hid + (size_t)prev[s] * n_embd, n_embd * sizeof(float)));
        prev[s] = t;
    }
    TRY(layer_mtp(c, tokens, c->mtp_h, n_tokens, 0, NULL));
    for (int32_t t = 0; t < n_tokens; t++) {
        const int32_t s = c->seq[t];
        if (c->pos[t] >= c->next[s] - kv->n_ring || c->pos[t] == c->next[s] - 1)
            TRY(kv_cache_put_h(kv, s, c->pos[t], c->pos[t] == c->next[s] - 1, c->hid + (size_t)t * n_embd));
        kv->mtp_len[s] = c->pos[t] + 1;
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
    c->spec_kept = 0;
    TRY(ctx_validate(c, b, &n_out));
    TRY(forward_run(c, b->token, b->n_tokens, n_out));
    if (c->n_draft) TRY(ctx_mtp_follow(c, b->token, b->n_tokens));
    for (int32_t s = 0; s < c->n_seq; s++)
        if (c->next[s] != c->kv->len[s])
            for (infer_ctx *stage = c; stage; stage = stage->next_stage) kv_cache_advanced(stage->kv, s, c->next[s]);
    c->n_tokens = b->n_tokens;
    c->n_out = n_out;
fail:
    return st;
}

const float *infer_logits(const infer_ctx *c, int32_t i) {
    if (!c || c->n_tokens == 0) return NULL;
    if (i < 0) i = c->n_tokens + i;
    if (i < 0 || i >= c->n_tokens || c->out_row[i] < 0) return NULL;
    const size_t n_vocab = (size_t)c->m->hp.n_vocab;
    /* the logits stay on the device until asked for; the host copy is a cache of them, so the context is
     * logically unchanged (hence the non-const head stage) */
    infer_ctx *h = forward_head_stage(c);
    if (!h->on_device) return h->logits + (size_t)c->out_row[i] * n_vocab;
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
    for (infer_ctx *stage = c; stage; stage = stage->next_stage) TRY(kv_cache_truncate(stage->kv, seq, p0));
fail:
    return st;
}

infer_status infer_seq_checkpoint(infer_ctx *c, int32_t seq) {
    if (!c) return infer_fail(INFER_E_ARG, "infer_seq_checkpoint: context is NULL");
    if (seq < 0 || seq >= c->n_seq)
        return infer_fail(INFER_E_ARG, "infer_seq_checkpoint: sequence %d: expected 0..%d", seq, c->n_seq - 1);
    infer_status st = INFER_OK;
    for (infer_ctx *stage = c; stage; stage = stage->next_stage) TRY(kv_cache_checkpoint(stage->kv, seq));
fail:
    return st;
}

int32_t infer_seq_pos_max(const infer_ctx *c, int32_t seq) {
    if (!c || seq < 0 || seq >= c->n_seq) return -1;
    return c->kv->len[seq] - 1;
}
