/* forward: embedding lookup, the layer stack and the LM head, as llama.cpp's llm_build_llama /
 * llm_build_qwen3 / llm_build_qwen3moe graphs compute them (see forward.h for the context).
 *
 * Every matrix product goes through forward_matmul(s): the input is quantised once into the backend's
 * activation type for that weight type (Q8_K for K-quants, Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL, Q8_1 for
 * Q4_1/Q5_1, f32 for float weights) as ggml's CPU mul_mat does, then mmv (n_tokens <= MMV_MAX_TOKENS)
 * or mm runs. Products of one input go through forward_matmuls: at decode one mmv_multi launch per activation
 * type (any mix of weight types is one on CUDA), the same bits as the products one by one.
 * The head only runs over the rows that asked for logits (llama.cpp's output selection),
 * gathered into xn.
 * On a device the batch's token ids, positions and asked rows are uploaded first, then the whole pass
 * is queued through the backend's run(), which replays a captured CUDA graph for decode-sized batches.
 * A split context (forward.h) runs its segments in turn, each through its stage's run(): x leaves a
 * device segment by a queued copy into the stage's page-locked x_host (part of the graph), the host
 * copies it into the next stage's x (or x_host, which that segment's first queued copy reads), and the
 * stage is synchronised before its output is read. Expert offload cuts a device segment into pieces at each
 * layer whose routed experts stay in host memory (forward_pieces; forward.h).
 */
#include <string.h>

#include "forward.h"

infer_status forward_matmul(struct infer_ctx *c, const struct gguf_tensor *w, const struct gguf_tensor *w2,
                            const float *x, int32_t n_tokens, float *y, const float *add, int32_t epilogue,
                            int32_t *xq_type) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    const int32_t at = be->ops->mmv_act_type(w->type);
    if (at >= 0 && *xq_type != at) {
        struct quantize_args qa = {at, x, c->xq, n_in, n_tokens, n_in};
        TRY(be->ops->quantize(be, &qa));
        *xq_type = at;
    }
    const void *xq = at >= 0 ? c->xq : NULL;
    if (n_tokens <= MMV_MAX_TOKENS) {
        struct mmv_args a = {w->type, w->data, w2 ? w2->data : NULL, n_in, n_out, n_tokens, xq, x, y, add, epilogue, 0};
        TRY(be->ops->mmv(be, &a));
    } else {
        struct mm_args a = {w->type, w->data, w2 ? w2->data : NULL, n_in, n_out, n_tokens, xq, x, y, add, epilogue, 0};
        TRY(be->ops->mm(be, &a));
    }
fail:
    return st;
}

/* The activation type for the launch over the pending products (bit k of pending): the one x is already
 * quantised to when a pending product reads it (no quantize), else the first pending quantised product's; -1
 * when only float products are left. */
static int32_t forward_matmuls_act(struct infer_backend *be, const struct forward_product *p, int32_t n,
                                   uint32_t pending, int32_t xq_type) {
    int32_t at = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!(pending >> i & 1)) continue;
        const int32_t a = be->ops->mmv_act_type(p[i].w->type);
        if (a >= 0 && a == xq_type) return a;
        if (a >= 0 && at < 0) at = a;
    }
    return at;
}

infer_status forward_matmuls(struct infer_ctx *c, const struct forward_product *p, int32_t n, const float *x,
                             int32_t n_tokens, int32_t *xq_type) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    if (n < 1 || n > 32) return infer_fail(INFER_E_ARG, "forward_matmuls: %d products: expected 1..32", n);
    const int64_t n_in = p[0].w->ne[0];
    for (int32_t i = 1; i < n; i++)
        if (p[i].w->ne[0] != n_in)
            return infer_fail(INFER_E_ARG, "forward_matmuls: product %d reads %lld values, product 0 %lld", i,
                              (long long)p[i].w->ne[0], (long long)n_in);
    if (n_tokens > MMV_MAX_TOKENS || !be->ops->mmv_multi) {
        for (int32_t i = 0; i < n; i++)
            TRY(forward_matmul(c, p[i].w, p[i].w2, x, n_tokens, p[i].y, p[i].add, p[i].epilogue, xq_type));
        return INFER_OK;
    }
    uint32_t pending = n == 32 ? 0xFFFFFFFFu : (1u << n) - 1;
    while (pending) {
        const int32_t at = forward_matmuls_act(be, p, n, pending, *xq_type);
        if (at >= 0 && *xq_type != at) {
            struct quantize_args qa = {.type = at, .x = x, .y = c->xq, .n = n_in, .n_rows = n_tokens, .x_stride = n_in};
            TRY(be->ops->quantize(be, &qa));
            *xq_type = at;
        }
        /* this launch: the pending products that read x in type at, and the float ones */
        struct mmv_multi_args m = {.n = 0};
        for (int32_t i = 0; i < n; i++) {
            const int32_t a = be->ops->mmv_act_type(p[i].w->type);
            if (!(pending >> i & 1) || (a >= 0 && a != at)) continue;
            pending &= ~(1u << i);
            m.p[m.n++] = (struct mmv_args){.type = p[i].w->type, .w = p[i].w->data, .w2 = p[i].w2 ? p[i].w2->data : NULL,
                                           .n_in = n_in, .n_out = p[i].w->ne[1], .n_tokens = n_tokens,
                                           .xq = a >= 0 ? c->xq : NULL, .x = x, .y = p[i].y, .add = p[i].add,
                                           .epilogue = p[i].epilogue};
            if (m.n == MMV_MULTI_MAX) break; /* the rest in the next launch */
        }
        if (m.n == 1) TRY(be->ops->mmv(be, &m.p[0]));
        else TRY(be->ops->mmv_multi(be, &m));
    }
fail:
    return st;
}

infer_status forward_norm(struct infer_ctx *c, const float *x, const struct gguf_tensor *w, float *y, int64_t n,
                          int32_t n_rows) {
    struct norm_args a = {x, w->data, y, n, n_rows, n, n, c->m->hp.rms_eps, NULL, 0};
    return c->be->ops->norm(c->be, &a);
}

infer_status forward_norm_in(struct infer_ctx *c, const float *x, const struct gguf_tensor *w, float *y, int64_t n,
                             int32_t n_rows, const struct gguf_tensor *next, int32_t *xq_type) {
    struct infer_backend *be = c->be;
    const int32_t at = be->ops->mmv_act_type(next->type);
    *xq_type = -2;
    if (!be->ops->norm_q || at != INFER_TYPE_Q8_1 || n % 32) return forward_norm(c, x, w, y, n, n_rows);
    struct norm_q_args a = {{x, w->data, y, n, n_rows, n, n, c->m->hp.rms_eps, NULL, 0}, at, c->xq};
    infer_status st = be->ops->norm_q(be, &a);
    if (st == INFER_OK) *xq_type = at;
    return st;
}

infer_status forward_ids_in(struct infer_ctx *c, struct infer_ctx *s, const int32_t *tokens, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const size_t bytes = (size_t)n_tokens * sizeof(int32_t);
    if (c->dev_tokens) return s->be->ops->copy(s->be, s->dtok, c->dev_tokens, bytes);
    TRY(s->be->ops->upload(s->be, s->dtok, tokens, bytes));
    c->bus_bytes += bytes;
fail:
    return st;
}

infer_status forward_embed(struct infer_ctx *c, const struct gguf_tensor *e, const int32_t *tokens,
                           int32_t n_tokens) {
    struct embed_args a = {e->type, e->data, c->m->hp.n_embd, e->ne[1], tokens, n_tokens, c->x};
    return c->be->ops->embed(c->be, &a);
}

infer_status forward_add(struct infer_ctx *c, float *y, const float *x2, int64_t n, int32_t n_rows) {
    struct act_args a = {ACT_ADD, y, x2, y, n, n_rows, 0, 0};
    return c->be->ops->act(c->be, &a);
}

infer_status forward_residual_add(struct infer_ctx *c, const float *y, int32_t n_rows) {
    const int64_t n_embd = c->m->hp.n_embd;
    if (c->tp_rank > 0) return c->be->ops->copy(c->be, c->x, y, (size_t)n_rows * (size_t)n_embd * sizeof(float));
    return forward_add(c, c->x, y, n_embd, n_rows);
}

infer_status forward_ffn(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    const struct model_layer *L = &c->m->layers[il];
    if (L->ffn_gate_exps) return layer_moe(c, il, n_tokens);
    return layer_ffn(c, il, n_tokens);
}

infer_status forward_gather(struct infer_ctx *c, const float *src, int32_t n_tokens, int32_t n_out) {
    struct embed_args a = {INFER_TYPE_F32, src, c->m->hp.n_embd, n_tokens, c->dout, n_out, c->xn};
    return c->be->ops->embed(c->be, &a);
}

struct forward_job {
    struct infer_ctx *c;                /* the segment's stage */
    const struct forward_segment *seg;
    const int32_t *tokens;              /* backend memory */
    int32_t n_tokens, n_out;
    int x_in, x_out;                    /* x arrives in / leaves through c->x_host */
    /* the piece of the segment this job queues (expert offload cuts a segment at each offloaded layer): layers
     * [il0, il1) whole, then, when il1 < seg->il1, layer il1 up to its routing; resume: il0's offloaded MoE
     * block is finished first (the CPU's output arrives) */
    int32_t il0, il1;
    int resume;
};

infer_status forward_mixer(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    if (c->m->layers[il].kind == ARCH_LAYER_GDN) return layer_gdn(c, il, n_tokens);
    return layer_attn(c, il, n_tokens);
}

infer_status forward_layer(struct infer_ctx *c, int32_t il, int32_t n_tokens) {
    infer_status st = INFER_OK;
    TRY(forward_mixer(c, il, n_tokens));
    TRY(forward_ffn(c, il, n_tokens));
fail:
    return st;
}

infer_status forward_head(struct infer_ctx *c, int32_t n_tokens, int32_t n_out) {
    return forward_head_to(c, n_tokens, n_out, c->logits);
}

infer_status forward_head_to(struct infer_ctx *c, int32_t n_tokens, int32_t n_out, float *y) {
    infer_status st = INFER_OK;
    const struct infer_model *m = c->m;
    const int64_t n_embd = m->hp.n_embd;
    /* over the asked rows only: gather, norm in place, project. A drafting context keeps every token's normed hidden
     * state (the MTP block's input) and gathers from it. */
    const float *src = c->x;
    if (c->hid) {
        TRY(forward_norm(c, c->x, m->output_norm, c->hid, n_embd, n_tokens));
        src = c->hid;
    }
    if (n_out > 0) {
        int32_t xq_type = -2;
        TRY(forward_gather(c, src, n_tokens, n_out));
        if (!c->hid) TRY(forward_norm_in(c, c->xn, m->output_norm, c->xn, n_embd, n_out, m->output, &xq_type));
        TRY(forward_matmul(c, m->output, NULL, c->xn, n_out, y, NULL, MMV_PLAIN, &xq_type));
    }
fail:
    return st;
}

/* Everything a piece of a segment queues on its stage's backend: the part a device backend may capture as a
 * graph. */
static infer_status forward_body(void *arg) {
    infer_status st = INFER_OK;
    const struct forward_job *j = arg;
    struct infer_ctx *c = j->c;
    struct infer_backend *be = c->be;
    const struct infer_model *m = c->m;
    const int64_t n_embd = m->hp.n_embd;
    const size_t x_bytes = (size_t)j->n_tokens * (size_t)n_embd * sizeof(float);
    int32_t il = j->il0;
    if (j->resume) {
        TRY(layer_moe_offload_finish(c, il, j->n_tokens));
        il++;
    } else if (j->seg->embeds) {
        TRY(forward_embed(c, m->token_embd, j->tokens, j->n_tokens));
    } else if (j->x_in) {
        TRY(be->ops->stage_in(be, c->x, c->x_host, x_bytes));
    }
    for (; il < j->il1; il++) TRY(forward_layer(c, il, j->n_tokens));
    if (j->il1 < j->seg->il1) { /* an offloaded layer: its mixer, then its routing handed to the host */
        TRY(forward_mixer(c, il, j->n_tokens));
        return layer_moe_offload_start(c, il, j->n_tokens);
    }
    if (!j->seg->heads) {
        if (j->x_out) TRY(be->ops->stage_out(be, c->x_host, c->x, x_bytes));
        return INFER_OK;
    }
    TRY(forward_head(c, j->n_tokens, j->n_out));
fail:
    return st;
}

/* The shared expert of an offloaded layer, queued on its own while the host runs the routed experts. */
struct forward_shared_job {
    struct infer_ctx *c;
    int32_t il, n_tokens;
};

static infer_status forward_shared_body(void *arg) {
    const struct forward_shared_job *j = arg;
    return layer_moe_offload_shared(j->c, j->il, j->n_tokens);
}

/* The graph key of a batch's piece: the ops and their arguments follow from the piece, the token count, the
 * rows asked, each token's sequence (which KV cells and recurrent state it uses) and, with a snapshot ring
 * (drafting), each token's ring slot (the recurrent layers' snapshot argument, layer_gdn) — everything else
 * that changes is read from backend memory. 0 (no graph) for prefill-sized batches. */
uint64_t forward_graph_key(const struct infer_ctx *c, int32_t seg, int32_t piece, int32_t n_tokens, int32_t n_out) {
    if (!c->on_device || n_tokens > MMV_MAX_TOKENS) return 0;
    const int32_t ring = c->kv->n_ring;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the segment, the piece and the shape */
    const int32_t shape[4] = {seg, piece, n_tokens, n_out};
    for (int i = 0; i < 4 + n_tokens; i++) {
        h ^= (uint64_t)(uint32_t)(i < 4 ? shape[i] : c->seq[i - 4]);
        h *= 1099511628211ull;
        if (i >= 4 && ring > 0) {
            h ^= (uint64_t)(uint32_t)(c->pos[i - 4] % ring);
            h *= 1099511628211ull;
        }
    }
    return h | 1;
}

/* The graph key of an MTP block run on stage h (a draft step, or the block following a batch): 0 unless h is a
 * device holding the whole block (its token rows and routed experts there: no host step inside) and the batch is
 * decode-sized; else a hash of the kind and the caller's shape (n values: what fixes the arguments). */
uint64_t forward_mtp_graph_key(const struct infer_ctx *h, int32_t kind, int32_t n_tokens, const int32_t *shape,
                               int32_t n) {
    const int32_t il = (int32_t)h->m->hp.n_layer;
    if (!h->on_device || n_tokens > MMV_MAX_TOKENS || h->mtp_rows || (h->off_layer && h->off_layer[il])) return 0;
    uint64_t k = 1469598103934665603ull; /* FNV-1a, apart from the trunk's keys by the leading -2 */
    const int32_t head[3] = {-2, kind, n_tokens};
    for (int32_t i = 0; i < 3 + n; i++) {
        k ^= (uint64_t)(uint32_t)(i < 3 ? head[i] : shape[i - 3]);
        k *= 1099511628211ull;
    }
    return k | 1;
}

/* The first layer in [il, il1) whose routed experts run on the host, or il1. */
static int32_t forward_next_offload(const struct infer_ctx *s, int32_t il, int32_t il1) {
    if (!s->off_layer) return il1;
    while (il < il1 && !s->off_layer[il]) il++;
    return il;
}

/* The pieces of segment sg on stage s (one unless layers offload experts), in turn: each queued through run();
 * between two, the routing is read on the host (a sync), the shared expert is queued, and the host's experts
 * run meanwhile. */
static infer_status forward_pieces(struct infer_ctx *c, int32_t k, struct forward_job *j) {
    infer_status st = INFER_OK;
    struct infer_ctx *s = j->c;
    struct infer_backend *be = s->be;
    j->il0 = j->seg->il0;
    j->resume = 0;
    for (int32_t piece = 0;; piece++) {
        j->il1 = forward_next_offload(s, j->il0 + j->resume, j->seg->il1);
        TRY(be->ops->run(be, forward_graph_key(s, k, 2 * piece, j->n_tokens, j->n_out), forward_body, j));
        if (j->il1 == j->seg->il1) break;
        TRY(be->ops->sync(be)); /* the routing is on the host */
        struct forward_shared_job sj = {.c = s, .il = j->il1, .n_tokens = j->n_tokens};
        if (c->m->layers[j->il1].ffn_gate_shexp)
            TRY(be->ops->run(be, forward_graph_key(s, k, 2 * piece + 1, j->n_tokens, j->n_out), forward_shared_body,
                             &sj));
        TRY(layer_moe_offload_host(s, j->il1, j->n_tokens));
        c->bus_bytes += layer_moe_offload_bus(s, j->n_tokens);
        j->il0 = j->il1;
        j->resume = 1;
    }
fail:
    return st;
}

/* Segment k of the batch on its stage s: the batch's description and x handed over from segment k - 1,
 * what the device needs uploaded, the queued pieces, and a sync (the next segment reads its output). */
static infer_status forward_segment_run(struct infer_ctx *c, int32_t k, const int32_t *tokens, int32_t n_tokens,
                                        int32_t n_out) {
    infer_status st = INFER_OK;
    const struct forward_segment *sg = &c->seg[k];
    struct infer_ctx *s = sg->stage;
    struct infer_backend *be = s->be;
    const size_t x_bytes = (size_t)n_tokens * (size_t)c->m->hp.n_embd * sizeof(float);
    struct forward_job j = {.c = s, .seg = sg, .tokens = tokens, .n_tokens = n_tokens, .n_out = n_out};
    if (s != c) { /* the stage's own copy of the batch (its layers read them from the host) */
        memcpy(s->pos, c->pos, (size_t)n_tokens * sizeof(int32_t));
        memcpy(s->seq, c->seq, (size_t)n_tokens * sizeof(int32_t));
        memcpy(s->out_ids, c->out_ids, (size_t)n_out * sizeof(int32_t));
    }
    if (k > 0) { /* x crosses the boundary: from where the previous segment left it to where this one reads */
        const struct infer_ctx *from = c->seg[k - 1].stage;
        const float *src = from->x_host ? from->x_host : from->x;
        float *dst = s->x_host ? s->x_host : s->x;
        if (dst != src) memcpy(dst, src, x_bytes);
        j.x_in = s->x_host != NULL;
    }
    j.x_out = k + 1 < c->n_seg && s->x_host != NULL;
    if (s->on_device) { /* the batch's ids and positions cross once, before the (captured) ops */
        if (sg->embeds) TRY(forward_ids_in(c, s, tokens, n_tokens));
        TRY(be->ops->upload(be, s->dpos, s->pos, (size_t)n_tokens * sizeof(int32_t)));
        if (sg->heads && n_out > 0) TRY(be->ops->upload(be, s->dout, s->out_ids, (size_t)n_out * sizeof(int32_t)));
        c->bus_bytes += (uint64_t)n_tokens * sizeof(int32_t) + (uint64_t)(sg->heads ? n_out : 0) * sizeof(int32_t);
        c->bus_bytes += (uint64_t)(j.x_in + j.x_out) * x_bytes;
        j.tokens = s->dtok;
    }
    TRY(forward_pieces(c, k, &j));
    TRY(be->ops->sync(be));
fail:
    return st;
}

infer_status forward_run(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, int32_t n_out) {
    infer_status st = INFER_OK;
    for (int32_t t = 0; t < n_tokens; t++)
        if (c->out_row[t] >= 0) c->out_ids[c->out_row[t]] = t;
    if (c->tp_n > 0) return forward_tp_run(c, tokens, n_tokens, n_out);
    for (int32_t k = 0; k < c->n_seg; k++) TRY(forward_segment_run(c, k, tokens, n_tokens, n_out));
fail:
    return st;
}
