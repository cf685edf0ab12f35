/* forward_tp: the pass of a tensor-parallel group (tp.h), one thread driving every rank.
 *
 * Each rank is a stage of the context running the same layer code on its shards. Per batch: the batch's positions
 * go to every rank, the tokens and the asked rows to rank 0; rank 0 looks the tokens up while the others zero x,
 * and an all-reduce hands x to all. Then, block by block, every rank queues its part (its heads, its FFN columns;
 * rank 0's last product adds the residual, the others' write their partial sum into x) and one all-reduce of x
 * adds them up, leaving the same bits on every rank (so the next block's norms and routing agree everywhere). Each
 * rank computes the logits of its vocabulary rows of the head, and one reduce per CTX_TP_HEAD_ROWS outputs gathers
 * them into rank 0's logits: with every rank in this process on first need (infer_logits, a sampler that needs the
 * whole row), so that greedy sampling (sampler.c) compares one candidate per rank instead of moving the vocabulary;
 * with followers in other processes at once (they run the reduce in step with rank 0's batches). NCCL needs a thread driving several devices to queue each collective on all of them in one
 * group, so the ranks' ops are queued block by block, in rank order, between the all-reduces. With the group over
 * several processes (hosts), each runs this pass for its own ranks, the others following rank 0's batches
 * (tp_serve.c). A decode-sized pass (and an MTP block) is captured as one CUDA graph per rank and replayed
 * (forward_stage_run, backend_cuda_group_run); a group over several processes launches every op each step.
 */
#include <string.h>

#include "forward.h"

/* x of every rank = the sum of the ranks' x. */
static infer_status forward_tp_allreduce(struct infer_ctx *c, int32_t n_tokens) {
    struct infer_backend *bes[INFER_MAX_DEVICES];
    float *bufs[INFER_MAX_DEVICES];
    for (int32_t r = 0; r < c->tp_n; r++) {
        bes[r] = c->tp[r]->be;
        bufs[r] = c->tp[r]->x;
    }
    return backend_cuda_allreduce(bes, bufs, c->tp_n, (size_t)n_tokens * (size_t)c->m->hp.n_embd);
}

/* x of every rank = rank 0's: the ranks from r0 on (those not holding rank 0's x) zero theirs, and the all-reduce
 * hands rank 0's to all. */
static infer_status forward_tp_share_x(struct infer_ctx *c, int32_t r0, int32_t n_tokens) {
    infer_status st = INFER_OK;
    for (int32_t r = r0; r < c->tp_n; r++) {
        struct infer_ctx *s = c->tp[r];
        TRY(s->be->ops->zero(s->be, s->x, (size_t)n_tokens * (size_t)s->m->hp.n_embd * sizeof(float)));
    }
    TRY(forward_tp_allreduce(c, n_tokens));
fail:
    return st;
}

/* The logits of the n_out asked rows: the whole head on rank 0 when the group is one rank; else each rank's rows
 * into its head_part, gathered after the pass (forward_tp_run). A drafting group's ranks each keep every token's
 * normed hidden state (hid, the MTP block's input), rows or not. */
static infer_status forward_tp_head(struct infer_ctx *c, int32_t n_tokens, int32_t n_out) {
    infer_status st = INFER_OK;
    if (c->head_rows == 0) return c->tp_rank == 0 ? forward_head(c, n_tokens, n_out) : INFER_OK;
    for (int32_t r = 0; r < c->tp_n; r++) TRY(forward_head_to(c->tp[r], n_tokens, n_out, c->tp[r]->head_part));
fail:
    return st;
}

/* n_out rows of the ranks' head_part into dst (rank 0's memory, full rows), CTX_TP_HEAD_ROWS at a time: each rank
 * places its logits at its columns of zeroed full rows (rank 0: dst) and a reduce sums them into rank 0's. Every
 * other column is a zero, so each logit arrives exactly as its rank computed it. */
static infer_status forward_tp_gather_rows(struct infer_ctx *c, int32_t n_out, float *dst) {
    infer_status st = INFER_OK;
    const int64_t V = c->m->hp.n_vocab;
    for (int32_t t0 = 0; t0 < n_out; t0 += CTX_TP_HEAD_ROWS) {
        const int32_t nt = n_out - t0 < CTX_TP_HEAD_ROWS ? n_out - t0 : CTX_TP_HEAD_ROWS;
        struct infer_backend *bes[INFER_MAX_DEVICES];
        float *sums[INFER_MAX_DEVICES];
        for (int32_t r = 0; r < c->tp_n; r++) {
            struct infer_ctx *s = c->tp[r];
            float *sum = s->tp_rank == 0 ? dst + (size_t)t0 * (size_t)V : s->head_sum;
            TRY(s->be->ops->zero(s->be, sum, (size_t)nt * (size_t)V * sizeof(float)));
            for (int32_t t = 0; t < nt; t++) {
                const float *part = s->head_part + (size_t)(t0 + t) * (size_t)s->head_rows;
                TRY(s->be->ops->copy(s->be, sum + (size_t)t * (size_t)V + s->head_v0, part,
                                     (size_t)s->head_rows * sizeof(float)));
            }
            bes[r] = s->be;
            sums[r] = sum;
        }
        TRY(backend_cuda_reduce(bes, sums, c->tp_n, (size_t)nt * (size_t)V));
    }
fail:
    return st;
}

infer_status forward_tp_gather(struct infer_ctx *c) {
    const int32_t n_out = c->tp_head_pending;
    if (n_out <= 0) return INFER_OK;
    c->tp_head_pending = 0;
    c->tp_gathers++;
    return forward_tp_gather_rows(c, n_out, c->logits);
}

/* The hidden states rank s pairs the MTP block's tokens with. */
static const float *forward_tp_mtp_h(struct infer_ctx *s, enum forward_mtp_h which, int32_t seq) {
    if (which == FORWARD_MTP_H_CACHE) return kv_cache_h(s->kv, seq);
    return which == FORWARD_MTP_H_DRAFT ? s->mtp_hid : s->mtp_h;
}

/* The MTP block is a decoder block like the trunk's (forward_tp_run): rank 0 looks the tokens up (the others zero
 * x) and each of its parts is followed by an all-reduce of x, so every rank ends with the same mtp_hid. */
infer_status forward_tp_mtp(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, enum forward_mtp_h which,
                            int32_t seq, float *out) {
    infer_status st = INFER_OK;
    TRY(layer_mtp_embed(c, tokens, n_tokens));
    TRY(forward_tp_share_x(c, 1, n_tokens));
    for (int32_t r = 0; r < c->tp_n; r++) TRY(layer_mtp_mixer(c->tp[r], forward_tp_mtp_h(c->tp[r], which, seq), n_tokens));
    TRY(forward_tp_allreduce(c, n_tokens));
    for (int32_t r = 0; r < c->tp_n; r++) TRY(layer_mtp_ffn(c->tp[r], n_tokens));
    TRY(forward_tp_allreduce(c, n_tokens));
    if (!out || c->head_rows == 0) { /* no logits, or a group of one: the whole head on rank 0 */
        for (int32_t r = 0; r < c->tp_n; r++) TRY(layer_mtp_head(c->tp[r], n_tokens, r == 0 ? out : NULL));
        return INFER_OK;
    }
    for (int32_t r = 0; r < c->tp_n; r++) TRY(layer_mtp_head(c->tp[r], n_tokens, c->tp[r]->head_part));
    TRY(forward_tp_gather_rows(c, n_tokens, out));
fail:
    return st;
}

infer_status forward_tp_positions(struct infer_ctx *c, int32_t n_tokens) {
    infer_status st = INFER_OK;
    const size_t ids = (size_t)n_tokens * sizeof(int32_t);
    for (int32_t r = 0; r < c->tp_n; r++) {
        struct infer_ctx *s = c->tp[r];
        if (r > 0) {
            memcpy(s->pos, c->pos, ids);
            memcpy(s->seq, c->seq, ids);
        }
        TRY(s->be->ops->upload(s->be, s->dpos, s->pos, ids));
        c->bus_bytes += ids;
    }
fail:
    return st;
}

struct forward_tp_job {
    struct infer_ctx *c;
    int32_t n_tokens, n_out;
};

/* Everything the pass queues on the ranks' streams once the batch's ids and positions are there: the part a group
 * of devices captures as one graph per rank (backend_cuda_group_run). */
static infer_status forward_tp_body(void *arg) {
    infer_status st = INFER_OK;
    const struct forward_tp_job *j = arg;
    struct infer_ctx *c = j->c;
    const int head = c->tp_rank == 0; /* this process holds the group's rank 0 (several processes: one does) */
    if (head) TRY(forward_embed(c, c->m->token_embd, c->dtok, j->n_tokens)); /* rank 0 looks the tokens up */
    TRY(forward_tp_share_x(c, head, j->n_tokens));
    for (int32_t il = 0; il < c->m->hp.n_layer; il++) {
        for (int32_t r = 0; r < c->tp_n; r++) TRY(forward_mixer(c->tp[r], il, j->n_tokens));
        TRY(forward_tp_allreduce(c, j->n_tokens));
        for (int32_t r = 0; r < c->tp_n; r++) TRY(forward_ffn(c->tp[r], il, j->n_tokens));
        TRY(forward_tp_allreduce(c, j->n_tokens));
    }
    TRY(forward_tp_head(c, j->n_tokens, j->n_out));
fail:
    return st;
}

infer_status forward_stage_run(struct infer_ctx *h, uint64_t key, infer_status (*fn)(void *), void *arg) {
    if (h->tp_n == 0) return h->be->ops->run(h->be, key, fn, arg);
    struct infer_backend *bes[INFER_MAX_DEVICES];
    for (int32_t r = 0; r < h->tp_n; r++) bes[r] = h->tp[r]->be;
    return backend_cuda_group_run(bes, h->tp_n, h->tp_msg_host ? 0 : key, fn, arg);
}

infer_status forward_tp_run(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, int32_t n_out) {
    infer_status st = INFER_OK;
    TRY(forward_tp_positions(c, n_tokens)); /* the batch's description: every rank's layers read positions */
    for (int32_t r = 0; r < c->tp_n; r++) {
        struct infer_ctx *s = c->tp[r];
        if (n_out > 0 && (r == 0 || s->head_rows > 0)) { /* the asked rows, to every rank computing logits */
            TRY(s->be->ops->upload(s->be, s->dout, c->out_ids, (size_t)n_out * sizeof(int32_t)));
            c->bus_bytes += (uint64_t)n_out * sizeof(int32_t);
        }
    }
    if (c->tp_rank == 0) TRY(forward_ids_in(c, c, tokens, n_tokens));
    struct forward_tp_job j = {.c = c, .n_tokens = n_tokens, .n_out = n_out};
    TRY(forward_stage_run(c, forward_graph_key(c, -3, 0, n_tokens, n_out), forward_tp_body, &j));
    if (c->head_rows > 0 && n_out > 0) { /* the ranks' rows: gathered at once for followers, else on first need */
        c->tp_head_pending = n_out;
        if (c->tp_msg_host) TRY(forward_tp_gather(c));
    }
    for (int32_t r = 0; r < c->tp_n; r++) TRY(c->tp[r]->be->ops->sync(c->tp[r]->be));
fail:
    return st;
}
