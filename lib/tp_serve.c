/* tp_serve: a tensor-parallel group over several processes (hosts), led by the process of the group's rank 0.
 *
 * Why a leader: every rank must queue the same collectives in the same order, so every process must run the same
 * batches and the same sequence edits. The user's program runs in rank 0's process (it has the token table, the
 * head and the logits); the others run infer_tp_serve, which follows it. Before rank 0's context changes — a
 * batch infer_decode has validated, a truncation or checkpoint that will succeed, the context's end — tp_send
 * broadcasts one message of fixed size over the group's communicator (NCCL is the only transport); a follower
 * receives it and makes the same call on its own context, whose ranks then meet rank 0's in the same collectives.
 */
#include <string.h>

#include "forward.h"

/* The header's ints (TP_MSG_HEADER of them); tokens, sequences and logits flags follow, n_batch each. */
enum { TP_H_KIND, TP_H_N, TP_H_SEQ, TP_H_P0, TP_H_P1 };

/* The message broadcast from rank 0 into every local rank's buffer. */
static infer_status tp_broadcast(struct infer_ctx *c) {
    struct infer_backend *bes[INFER_MAX_DEVICES];
    for (int32_t r = 0; r < c->tp_n; r++) bes[r] = c->tp[r]->be;
    return backend_cuda_broadcast(bes, c->tp_msg, c->tp_n, tp_msg_ints(c->n_batch) * sizeof(int32_t));
}

infer_status tp_send(struct infer_ctx *c, int32_t kind, const infer_batch *b, int32_t seq, int32_t p0, int32_t p1) {
    infer_status st = INFER_OK;
    if (!c->tp_msg_host || c->tp_rank != 0) return INFER_OK; /* one process, or a follower */
    int32_t *h = c->tp_msg_host;
    const int32_t nb = c->n_batch, n = b ? b->n_tokens : 0;
    memset(h, 0, tp_msg_ints(nb) * sizeof(int32_t));
    h[TP_H_KIND] = kind, h[TP_H_N] = n, h[TP_H_SEQ] = seq, h[TP_H_P0] = p0, h[TP_H_P1] = p1;
    int32_t *tok = h + TP_MSG_HEADER, *sq = tok + nb, *lg = sq + nb;
    for (int32_t i = 0; i < n; i++) {
        tok[i] = b->token[i];
        sq[i] = b->seq_id ? b->seq_id[i] : 0;
        lg[i] = b->logits ? b->logits[i] != 0 : i == n - 1;
    }
    TRY(c->be->ops->upload(c->be, c->tp_msg[0], h, tp_msg_ints(nb) * sizeof(int32_t)));
    TRY(tp_broadcast(c));
fail:
    return st;
}

INFER_API infer_status infer_tp_serve(infer_ctx *c) {
    infer_status st = INFER_OK;
    if (!c) return infer_fail(INFER_E_ARG, "infer_tp_serve: context is NULL");
    if (!c->tp_msg_host || c->tp_rank == 0)
        return infer_fail(INFER_E_ARG, "infer_tp_serve: the context is not a follower of a group over several "
                          "processes (a model loaded with split_mode tensor, tp_world above this process's devices "
                          "and tp_rank0 > 0)");
    const int32_t nb = c->n_batch;
    int32_t *h = c->tp_msg_host, *tok = h + TP_MSG_HEADER, *sq = tok + nb, *lg = sq + nb;
    int8_t *flags = xcalloc((size_t)nb, 1);
    if (!flags) return INFER_OOM("infer_tp_serve: logits flags");
    for (;;) {
        TRY(tp_broadcast(c));
        TRY(c->be->ops->download(c->be, h, c->tp_msg[0], tp_msg_ints(nb) * sizeof(int32_t)));
        const int32_t kind = h[TP_H_KIND], n = h[TP_H_N];
        if (kind == TP_MSG_STOP) break;
        if (kind == TP_MSG_DECODE && n >= 1 && n <= nb) {
            for (int32_t i = 0; i < n; i++) flags[i] = (int8_t)(lg[i] != 0);
            const infer_batch b = {n, tok, NULL, sq, flags};
            TRY(infer_decode(c, &b));
        } else if (kind == TP_MSG_SEQ_RM) {
            TRY(infer_seq_rm(c, h[TP_H_SEQ], h[TP_H_P0], h[TP_H_P1]));
        } else if (kind == TP_MSG_SEQ_CHECKPOINT) {
            TRY(infer_seq_checkpoint(c, h[TP_H_SEQ]));
        } else {
            st = infer_fail(INFER_E_INTERNAL, "infer_tp_serve: message %d with %d tokens from rank 0: not one this "
                            "build sends (are both processes the same version?)", kind, n);
            goto fail;
        }
    }
fail:
    xfree(flags);
    return st;
}
