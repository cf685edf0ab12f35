/* ctx_scratch: every buffer infer_ctx_create allocates besides the caches, as one table.
 *
 * Why a table: the context allocates and frees its scratch from it, and the placement planner
 * (plan.c) sizes a device's memory from it, so what the plan counts is what the context takes, by
 * construction (tests/test-plan.c checks the two against a counting backend and the emulator's
 * allocation counter). Sizes depend on the model, on the context's resolved dimensions (ctx_dims) and
 * on the stage (forward.h): whether it runs on a device (the device copies of the batch, the split-K
 * attention and expert-FFN scratch) and whether it runs the head (the logits, and on a device their host
 * copy; a split's device stage has instead the page-locked x_host its hidden state crosses the bus through).
 * Layout: the dimensions and their resolution from infer_ctx_params, then the table.
 */
#ifndef INFER_CTX_SCRATCH_H
#define INFER_CTX_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

/* A context's sizes after defaults: what infer_ctx_create builds, for one stage of it (forward.h: a context
 * is one stage, or two for a layer split). */
struct ctx_dims {
    int32_t n_ctx, n_batch, n_seq, n_draft, kv_type;
    int on_device; /* the stage runs on the model's device */
    int heads;     /* the stage runs the head: it has the logits (every context but a split's device stage) */
    int exps_host; /* a device stage whose layers keep routed experts in host memory (expert offload) */
    int x_host;    /* a device stage of a pass of several segments: x crosses the bus (ctx_stages.h) */
    int embd_away; /* the head's device stage lacks the token table the MTP block reads (ctx_stages.h) */
    int64_t head_rows; /* a rank of a tensor-parallel group of several: its vocabulary rows of the head (else 0) */
};

/* The stage runs the MTP block: where the head runs or, under tensor parallelism, each rank with rows of it (every
 * rank keeps its heads' part of the block, its cells and the hidden states). */
static inline int ctx_dims_mtp(const struct ctx_dims *d) { return d->n_draft > 0 && (d->heads || d->head_rows > 0); }

enum { CTX_TP_HEAD_ROWS = 8 }; /* logits rows per reduce of a tensor-parallel head (forward_tp.c) */

/* Checks p (NULL: defaults) against m and resolves its zeros to the defaults, for a whole context (heads 1).
 * who names the caller in messages ("infer_ctx_create"). INFER_E_ARG / INFER_E_UNSUPPORTED as
 * infer_ctx_create documents. */
infer_status ctx_dims_resolve(const struct infer_model *m, const infer_ctx_params *p, int on_device, const char *who,
                              struct ctx_dims *d);

enum ctx_scratch_place {
    CTX_SCRATCH_BACKEND, /* memory of the context's backend (the device's on CUDA) */
    CTX_SCRATCH_HOST,    /* host memory, whatever the backend */
    CTX_SCRATCH_PINNED,  /* host memory from the backend's host_alloc (page-locked on CUDA): what crosses the bus */
};

struct ctx_scratch_entry {
    const char *name;            /* the infer_ctx field, for messages */
    size_t field;                /* offsetof(struct infer_ctx, <the pointer>) */
    enum ctx_scratch_place place;
    size_t count, size;          /* elements and bytes per element; a count of 0 still allocates one element */
};

#define CTX_SCRATCH_MAX 64

/* The buffers a context of m with dims d allocates, in allocation order; returns how many (past CTX_SCRATCH_MAX only
 * the first CTX_SCRATCH_MAX are written, and a context refuses the table). */
int32_t ctx_scratch_table(const struct infer_model *m, const struct ctx_dims *d, struct ctx_scratch_entry *out);
/* Bytes of one entry as allocated (count 0 -> one element). */
uint64_t ctx_scratch_entry_bytes(const struct ctx_scratch_entry *e);
/* Sum over the entries in place, each rounded up to align bytes (1: exact; 256: cudaMalloc's granularity). */
uint64_t ctx_scratch_bytes(const struct infer_model *m, const struct ctx_dims *d, enum ctx_scratch_place place,
                           uint64_t align);

#endif
