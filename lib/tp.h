/* tp: the shards of tensor parallelism (infer_model_params.split_mode INFER_SPLIT_TENSOR, llama.cpp's -sm tensor,
 * vLLM's tensor_parallel_size).
 *
 * Megatron's layout over n ranks (one CUDA device each). Every block's first products are column-parallel: a rank
 * keeps the rows of its own heads or FFN columns (attn_q/k/v, ffn_gate/up, ssm_qkv/gate/beta/alpha/ba and the conv
 * channels, each routed expert's gate/up); its last product is row-parallel: the rank keeps the matching input
 * columns (attn_output, ffn_down, ssm_out, each expert's down), so its output is a partial sum of the block's, and
 * one all-reduce per block adds them (rank 0 adds the residual in its product's epilogue, the others contribute
 * their partial alone). Norms, routers and the shared expert's gate are replicated; so the routing, computed from
 * bit-identical inputs, agrees on every rank. A rank's K/V cells and recurrent state are those of its own heads.
 * The token table lives on rank 0: the first all-reduce hands x to the others (they contribute zeros). The head
 * (output.weight, or the tied token table) is cut at vocabulary rows: each rank computes the logits of its rows,
 * and one reduce gathers them into rank 0's logits (forward_tp.c).
 *
 * Why these cuts: attention splits at KV heads (each rank whole GQA groups; with more ranks than KV heads, each KV
 * head replicated over an equal share of its query heads, as vLLM does), Gated DeltaNet at key heads (with the
 * value heads that read them, in the model's value-head order), FFNs at whole quantisation blocks of the
 * row-parallel weight (a column cut inside a block would need requantising). Shapes that do not cut are refused
 * naming the dimension.
 */
#ifndef INFER_TP_H
#define INFER_TP_H

#include "model.h"

enum { TP_MAX_RUNS = 64 }; /* runs of rows or columns of one shard (tiled value heads make one per repeat) */

/* What rank r holds: ranges [lo, hi) of the model's heads and FFN columns. */
struct tp_rank {
    int64_t q0, q1;   /* query heads */
    int64_t kv0, kv1; /* KV heads */
    int64_t f0, f1;   /* dense FFN columns */
    int64_t e0, e1;   /* each routed expert's FFN columns */
    int64_t s0, s1;   /* the shared expert's FFN columns */
    int64_t g0, g1;   /* Gated DeltaNet key heads (and the value heads reading them) */
    int64_t v0, v1;   /* vocabulary rows of the head (whole rows: no block is cut) */
};

/* The part of one tensor a rank holds: the rows of each matrix (runs over ne[1]; none: every row) and the columns of
 * each row (runs over ne[0]; none: every column), in order. copy: 0 when the rank holds nothing of it. */
struct tp_slice {
    int copy;
    int32_t n_rows, n_cols;
    int64_t rows[TP_MAX_RUNS][2], cols[TP_MAX_RUNS][2];
};

/* Each of n ranks' part of m (out: n entries), or INFER_E_UNSUPPORTED naming the dimension that does not cut. */
infer_status tp_ranks(const struct infer_model *m, int32_t n, struct tp_rank *out);
/* The hyperparameters of rank rk's part: its heads and FFN columns, the rest as m's. */
void tp_hparams(const struct infer_model *m, const struct tp_rank *rk, struct arch_hparams *hp);
/* The slice of t, the tensor of role `role` (of a layer when il >= 0), that rank `rank` (ranges rk) holds. */
void tp_slice_of(const struct infer_model *m, int64_t il, enum arch_role role, const struct gguf_tensor *t,
                 int32_t rank, const struct tp_rank *rk, struct tp_slice *s);
/* The descriptor of t's slice s (shape and bytes; data NULL, name and type t's). */
struct gguf_tensor tp_slice_tensor(const struct gguf_tensor *t, const struct tp_slice *s);
/* Writes t's slice s (tp_slice_tensor's nbytes) to dst. */
void tp_slice_copy(const struct gguf_tensor *t, const struct tp_slice *s, void *dst);
/* model_tp.c: what rank r (ranges rk) holds of m into sl (one per file tensor): the layers' shards (the MTP blocks'
 * too), the final norm and rope_freqs, its rows of the head and, on rank 0, the token table; returns the
 * bytes of its device buffer (each shard rounded up to 256), what model_upload_tp allocates there and what the plan
 * (plan.c) counts. */
uint64_t model_tp_rank_bytes(const struct infer_model *m, int32_t r, const struct tp_rank *rk, struct tp_slice *sl);

#endif
