/* forward: the forward pass of every architecture (llama, qwen3, qwen3moe, and the hybrid qwen35,
 * qwen35moe, qwen3next with their MTP block) and the context struct it runs in.
 *
 * Why one struct: infer_ctx (context.c, the public API) owns the backend, the KV cache and every
 * scratch buffer, all sized at creation for n_batch tokens, so a decode never allocates. The layer
 * files (layer_attn.c, layer_gdn.c, layer_ffn.c, layer_moe.c, layer_mtp.c) each transform the
 * residual stream x in place;
 * forward.c strings them together between the embedding lookup and the LM head.
 *
 * A layer split (the model loaded with 0 < n_gpu_layers <= n_layer, model_placement) is the same struct
 * twice: each STAGE is a context of its own for one backend (its scratch, the cache cells and state of its
 * own layers, its graph), built by the same creation code for a range of trunk layers. The public context
 * is stage 0, the host's; stage 1 (next_stage) the device's. A batch runs SEGMENTS in order, each a range of
 * layers on one stage: host (the token lookup, layers [0, l0)) -> device (layers [l0, n_layer)) -> host
 * (the head). x crosses each boundary once per batch through the device stage's page-locked x_host, and
 * the device segment is queued through its backend's run(), so decode batches replay a graph there. A
 * single-device context is one segment on itself. Expert offload (layers on the device whose routed experts
 * stay in host memory) cuts a device segment into PIECES at each such layer: a piece ends with the layer's
 * routing queued and copied out; the CPU backend off_be runs the selected experts while the device runs the
 * shared expert; the next piece begins by adding the experts' output. Sequence bookkeeping (lengths, truncation, checkpoints)
 * is applied to every stage's cache.
 */
#ifndef INFER_FORWARD_H
#define INFER_FORWARD_H

#include "backend.h"
#include "cache.h"
#include "ctx_scratch.h"
#include "model.h"

enum { FORWARD_MAX_SEG = INFER_MAX_DEVICES + 3 }; /* ctx_stages.h: CTX_MAX_SEGS */

/* One segment of the pass: trunk layers [il0, il1) on stage, after the token lookup (embeds) and before the
 * head (heads) when it runs them. */
struct forward_segment {
    struct infer_ctx *stage; /* borrowed: the public context or one of its stages */
    int32_t il0, il1;
    int embeds, heads;
};

struct infer_ctx {
    const struct infer_model *m;
    struct infer_backend *be;
    struct kv_cache *kv;
    int32_t n_ctx, n_batch, n_seq;
    int32_t n_draft;   /* MTP draft length (0: no drafting; then the mtp_* buffers are NULL) */
    struct ctx_dims dims; /* the resolved sizes the buffers below were allocated for */
    struct ctx_scratch_entry scratch[CTX_SCRATCH_MAX]; /* every buffer below, as allocated (ctx_scratch.c) */
    int32_t n_scratch;
    /* scratch, T = n_batch tokens; all from be->ops->alloc, sized by ctx_scratch_table */
    float *x;          /* (T, n_embd) residual stream */
    float *xn;         /* (T, max(n_embd, n_head*head_dim)) normed input of a block; gathered rows for the head */
    float *q;          /* (T, n_head * head_dim); later the attention output */
    float *qg;         /* gated attention: (T, n_head * 2 * head_dim) query and gate per head; else NULL */
    float *k, *v;      /* (T, n_head_kv * head_dim) */
    float *att;        /* (T, n_head * head_dim) */
    float *h;          /* (T, n_ff) dense FFN hidden; (T, n_embd) MoE output */
    float *sh;         /* shared expert: (T, n_ff_shexp) hidden; else NULL */
    float *shg;        /* shared expert: (T) gate logits */
    void *xq;          /* (T, max n_in) activations in the backend's 8-bit types (<= 4 bytes per value) */
    float *router;     /* (T, n_expert) MoE router logits */
    int32_t *moe_ids;  /* (T, n_expert_used) */
    float *moe_w;      /* (T, n_expert_used) */
    /* gated deltanet (hybrid archs; else NULL): CD = 2 * n_group * d_state + d_inner conv channels */
    float *g_qkv;      /* (T, CD) projected q | k | v before the conv */
    float *g_conv;     /* (T, CD) after the conv and SiLU */
    float *g_z;        /* (T, d_inner) output-gate projection */
    float *g_ab;       /* (T, 2 * dt_rank): beta then alpha projections (qwen3next: the fused ssm_ba row) */
    float *g_out;      /* (T, d_inner) the delta-rule output, then gated-normed */
    uint32_t *gdn_done; /* (dt_rank) device contexts: gdn_conv's output-norm arrival counters, zero between launches */
    float *logits;     /* (T, n_vocab): rows of the tokens that asked, packed (device memory on CUDA) */
    /* MTP drafting (n_draft > 0) */
    float *hid;        /* (T, n_embd) the target's post-output_norm hidden state of every token */
    float *mtp_h;      /* (T, n_embd) the h each MTP row pairs with (the hidden state one position back) */
    float *mtp_in;     /* (T, 2 * n_embd) [RMSNorm(E[x]) * enorm | RMSNorm(h) * hnorm] */
    float *mtp_hid;    /* (T, n_embd) the MTP block's normed output (the next draft step's h) */
    float *mtp_logits; /* (n_draft, n_vocab) logits of each MTP draft step */
    int32_t *draft_tok; /* (n_draft + 1) the step's last token, then its drafts: each draft step's input */
    int32_t *mtp_ids;   /* (T) host: the MTP block's token ids where its stage lacks the token table (embd_away) */
    float *mtp_rows;    /* (T, n_embd) page-locked: their rows, read from the file's table on the host */
    void *draft_scratch; /* the sample op's scratch for a greedy draft's argmax */
    /* host, read by the sampler: (n_draft, n_vocab) each draft's distribution q (temp > 0), then (n_vocab) a target
     * distribution p and the residual max(0, p - q) */
    float *spec_q, *spec_p, *spec_r;
    /* device contexts, temp > 0 where the chain runs as lists (spec.c SPEC_LISTS): the step's uniforms (drafts at
     * 0, acceptances at n_draft, residual and bonus draws at 2 n_draft); the lists (n_draft drafts', then n_draft + 1
     * verification rows'); the sample op's draws from those rows (n_draft + 1), then spec_accept's out (n_draft + 2);
     * the sample op's scratch for the n_draft + 1 rows */
    double *spec_u;
    struct sample_list *spec_lists;
    int32_t *spec_ints;
    void *spec_scratch;
    /* per batch (host) */
    int32_t *pos, *seq;   /* (T) the position and sequence of each token */
    int32_t *out_row;     /* (T) row of token i in logits, -1 if not asked */
    int32_t *out_ids;     /* (T) the batch index of each logits row, in row order */
    /* device contexts (the model's weights on a GPU; on_device = 1): what crosses to the device */
    int on_device;
    int32_t *dtok, *dpos, *dout; /* backend copies of the tokens, c->pos and c->out_ids (the CPU: NULL,
                                    pos and out_ids themselves) */
    float *attn_scratch;  /* split-K partials of decode attention (attn_scratch_floats at n_ctx); CPU: NULL */
    float *moe_scratch;   /* the expert FFN's hidden vectors (moe_ffn_scratch_floats at T); CPU: NULL */
    float *logits_host;   /* host copy of logits, downloaded by the first infer_logits after a batch */
    int logits_ready;
    int32_t n_out;        /* logits rows of the last batch */
    int32_t *next;        /* (n_seq) scratch for validating positions */
    int32_t n_tokens;     /* of the last successful batch; 0 before any */
    int32_t xq_type;      /* activation type currently in xq for xn / q (-2: stale) */
    int64_t spec_steps, spec_drafted, spec_accepted; /* infer_spec_step counters */
    int32_t spec_force; /* test hook (spec_force_accept): drafts the next step accepts; -1: the rule decides */
    int32_t spec_kept;  /* rows of the last step's verification batch still in logits (spec_verify_logits) */
    int32_t spec_drafts; /* drafts of the last step in mtp_logits (spec_draft_logits) */
    int32_t spec_draft_ids[INFER_MAX_DRAFT]; /* and their ids (spec_last_drafts) */
    int spec_drafts_dev;      /* they stayed in the head stage's draft_tok (spec.c spec_resident) */
    /* set by infer_spec_step for one infer_decode (which clears it): the batch's ids already in the first stage's
     * device memory, copied there into dtok instead of uploading the host's */
    const int32_t *dev_tokens;
    void *sample_buf;         /* infer_sample's backend buffer (u, token, penalties, scratch), on first use */
    size_t sample_buf_bytes;
    /* the layer split (see the top): segments of the pass, in order (in the public context); its other stage */
    struct forward_segment seg[FORWARD_MAX_SEG];
    int32_t n_seg;
    struct infer_ctx *next_stage; /* owned; NULL for the last stage */
    float *x_host;        /* a device stage of a split: (T, n_embd) x crossing the bus (host_alloc: page-locked) */
    uint64_t bus_bytes;   /* moved between host and device by this context's batches (infer_ctx_bus_bytes) */
    /* expert offload (a device stage whose layers keep routed experts in host memory; else NULL): per such
     * layer the routing is computed here, the normed hidden state and the routing go down to off_be's MoE op,
     * the shared expert runs here meanwhile, and the experts' output comes back (forward.c) */
    struct infer_backend *off_be; /* owned: the CPU backend that runs those experts */
    uint8_t *off_layer;   /* (n_layer_all) 1: layer il's routed experts run on off_be */
    float *off_x;         /* (T, n_embd) page-locked: the normed hidden state, going to the CPU */
    int32_t *off_ids;     /* (T, n_expert_used) page-locked: the selected experts */
    float *off_w;         /* (T, n_expert_used) page-locked: their weights */
    float *off_y;         /* (T, n_embd) page-locked: the experts' weighted sum, coming back */
    /* tensor parallelism (tp.h, forward_tp.c): rank tp_rank of a group whose stages, in rank order, are the public
     * context's tp[] (borrowed; tp[0] is the public context, the others chained through next_stage). Each rank runs
     * the same layer code on its shards; a block's last product is a partial sum, added up by an all-reduce of x,
     * rank 0's with the residual. tp_n 0: no group. */
    int32_t tp_rank, tp_n;
    struct infer_ctx *tp[INFER_MAX_DEVICES];
    /* a group of several ranks cuts the head at vocabulary rows: this rank's rows head_v0.. (head_rows of them; 0:
     * the head is whole on rank 0), their logits (T, head_rows) and, ranks > 0, (CTX_TP_HEAD_ROWS, n_vocab) rows
     * of its part of the reduce into rank 0's logits */
    int64_t head_v0, head_rows;
    float *head_part, *head_sum;
    /* (the public context of a group of several ranks in this process) the last batch's rows of logits still in
     * the ranks' head_part, not yet reduced into rank 0's logits (forward_tp_gather: on first need, so that a greedy
     * infer_sample never moves the vocabulary), and the reduces run so far (the tests) */
    int32_t tp_head_pending, tp_gathers;
    /* a group over several processes (the model's tp_world > tp_n; tp_serve.c; else NULL): the public context's
     * message to the other processes (rank 0's batches and sequence edits), in host memory and in each local rank's
     * device memory */
    int32_t *tp_msg_host;
    void *tp_msg[INFER_MAX_DEVICES];
};

/* The residual a block's last product adds: x, except on the ranks > 0 of a tensor-parallel group, whose partial
 * sums the all-reduce adds to rank 0's x. */
static inline const float *forward_residual(const struct infer_ctx *c) { return c->tp_rank > 0 ? NULL : c->x; }
static inline int32_t forward_residual_epilogue(const struct infer_ctx *c) { return c->tp_rank > 0 ? MMV_PLAIN : MMV_ADD; }

/* The stage that runs the head: its logits (device memory on CUDA) are the context's. */
static inline struct infer_ctx *forward_head_stage(const struct infer_ctx *c) { return c->seg[c->n_seg - 1].stage; }

/* A test hook: infer_ctx_create for a model on the host (n_gpu_layers 0) whose backend is made by
 * make(n_threads, &be) instead of backend_cpu_create, e.g. a CPU backend with other numerics
 * (tests/gpu_like.c). The backend must have host memory (the context reads pos / logits directly, as
 * for the CPU); the context owns it and frees it with backend_free. INFER_E_ARG for a device model. */
typedef infer_status (*ctx_backend_fn)(int n_threads, struct infer_backend **out);
infer_status ctx_create_on(const infer_model *m, const infer_ctx_params *p, ctx_backend_fn make, infer_ctx **out);
/* A test hook: the context of a host model (n_gpu_layers 0) split as a load with n_gpu_layers would split it
 * (model_placement): what that puts on the device runs on a backend made by make (host memory, as for
 * ctx_create_on), the rest on the CPU backend, in the same segments. n_gpu_layers 0: ctx_create without it;
 * past the layer count: ctx_create_on. INFER_E_ARG for a device model. */
infer_status ctx_create_split_on(const infer_model *m, const infer_ctx_params *p, int32_t n_gpu_layers,
                                 ctx_backend_fn make, infer_ctx **out);
/* ctx_create_split_on with expert offload as a load with n_cpu_moe would place it: the routed experts of the
 * first n_cpu_moe MoE layers, where those layers are on the device part, run on a CPU backend of their own. */
infer_status ctx_create_offload_on(const infer_model *m, const infer_ctx_params *p, int32_t n_gpu_layers,
                                   int32_t n_cpu_moe, ctx_backend_fn make, infer_ctx **out);

/* Runs the segments over tokens already validated into c->pos / c->seq / c->out_row (n_out rows asked),
 * writing K/V cells at those positions. The caller updates the sequence lengths after success. */
infer_status forward_run(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, int32_t n_out);

/* y = epilogue(W x): quantises x (n_tokens rows of W's n_in) into c->xq unless *xq_type already says it
 * holds x in W's activation type (pass a variable set to -2 after x changes), then mmv or mm. */
infer_status forward_matmul(struct infer_ctx *c, const struct gguf_tensor *w, const struct gguf_tensor *w2,
                            const float *x, int32_t n_tokens, float *y, const float *add, int32_t epilogue,
                            int32_t *xq_type);
/* One product of forward_matmuls: forward_matmul's w, w2, y, add and epilogue. */
struct forward_product {
    const struct gguf_tensor *w, *w2;
    float *y;
    const float *add;
    int32_t epilogue;
};
/* The n products of one input x (every w of the same n_in; outputs disjoint): the results of n forward_matmul calls,
 * bit for bit. A decode-sized batch (mmv) on a backend with mmv_multi runs them as one launch per activation
 * type x needs (float weights join any; on CUDA every quantised type shares one, so any mix is one launch),
 * x quantised once per type; a lone product of a launch runs as plain mmv. Else (prefill) forward_matmul each. */
infer_status forward_matmuls(struct infer_ctx *c, const struct forward_product *p, int32_t n, const float *x,
                             int32_t n_tokens, int32_t *xq_type);
/* RMSNorm of n_rows rows of n floats with weight w (an F32 tensor). */
infer_status forward_norm(struct infer_ctx *c, const float *x, const struct gguf_tensor *w, float *y, int64_t n,
                          int32_t n_rows);

/* forward_norm for a norm whose output y feeds a product with weight `next`: a backend with the fused
 * norm_q op also writes y's 8-bit activations into c->xq and sets *xq_type (so forward_matmul skips its
 * quantize); otherwise plain forward_norm and *xq_type = -2. */
infer_status forward_norm_in(struct infer_ctx *c, const float *x, const struct gguf_tensor *w, float *y, int64_t n,
                             int32_t n_rows, const struct gguf_tensor *next, int32_t *xq_type);
/* The pre-FFN norm of a block: ffn_norm, or post_attention_norm (hybrid archs). */
static inline const struct gguf_tensor *forward_ffn_norm(const struct model_layer *L) {
    return L->ffn_norm ? L->ffn_norm : L->post_attn_norm;
}
/* x[t] = row tokens[t] of token_embd (or emb), dequantised. */
infer_status forward_embed(struct infer_ctx *c, const struct gguf_tensor *emb, const int32_t *tokens,
                           int32_t n_tokens);
/* The batch's ids into stage s's dtok (s on a device): copied there from c->dev_tokens when the drafts are on that
 * device already, else uploaded, their bytes counted in c->bus_bytes. */
infer_status forward_ids_in(struct infer_ctx *c, struct infer_ctx *s, const int32_t *tokens, int32_t n_tokens);
/* xn row r = src row c->dout[r] (rows of n_embd floats) for the n_out rows asked, through the embed op. */
infer_status forward_gather(struct infer_ctx *c, const float *src, int32_t n_tokens, int32_t n_out);
/* y = x + y2 (rows of n floats), through the backend's act op. */
infer_status forward_add(struct infer_ctx *c, float *y, const float *x2, int64_t n, int32_t n_rows);
/* x += y (rows of n_embd), the residual add closing a block; on a tensor-parallel rank > 0, x = y (forward_residual). */
infer_status forward_residual_add(struct infer_ctx *c, const float *y, int32_t n_rows);
/* One trunk layer: its mixer (attention or Gated DeltaNet) and its FFN block. */
infer_status forward_layer(struct infer_ctx *c, int32_t il, int32_t n_tokens);
/* The mixer of layer il (attention or Gated DeltaNet), residual included. */
infer_status forward_mixer(struct infer_ctx *c, int32_t il, int32_t n_tokens);
/* The head over the n_out rows asked of a batch of n_tokens (c->dout): gather, norm, project into c->logits; a
 * drafting context first keeps every token's normed hidden state in c->hid. */
infer_status forward_head(struct infer_ctx *c, int32_t n_tokens, int32_t n_out);
/* forward_head's logits of the asked rows into y (n_out, the head's rows) */
infer_status forward_head_to(struct infer_ctx *c, int32_t n_tokens, int32_t n_out, float *y);
/* Several processes (tp_serve.c): what the process of the group's rank 0 sends the others before changing its
 * context (a batch validated by infer_decode, a sequence's truncation or checkpoint, the end); nothing when the
 * group is this process's or this process follows. */
enum { TP_MSG_DECODE = 1, TP_MSG_SEQ_RM, TP_MSG_SEQ_CHECKPOINT, TP_MSG_STOP };
infer_status tp_send(struct infer_ctx *c, int32_t kind, const infer_batch *b, int32_t seq, int32_t p0, int32_t p1);
/* Int32s of a context's message: a header of TP_MSG_HEADER, then tokens, sequences and logits flags of up to n_batch
 * tokens. */
enum { TP_MSG_HEADER = 8 };
static inline size_t tp_msg_ints(int32_t n_batch) { return TP_MSG_HEADER + 3 * (size_t)n_batch; }
/* The pass of a tensor-parallel group (forward_tp.c), over tokens already validated into c (its rank 0). */
infer_status forward_tp_run(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, int32_t n_out);
/* The pending rows of logits (tp_head_pending) reduced into rank 0's logits; nothing when none are pending. */
infer_status forward_tp_gather(struct infer_ctx *c);
/* c->pos / c->seq of n_tokens to every rank of c's group (its host copies and its device's). */
infer_status forward_tp_positions(struct infer_ctx *c, int32_t n_tokens);
/* The hidden states each rank's MTP block pairs its tokens with: the sequence's last h (kv_cache_h, a step's first
 * draft), the block's own previous output (mtp_hid, the later drafts) or the batch's shifted states (mtp_h). */
enum forward_mtp_h { FORWARD_MTP_H_CACHE, FORWARD_MTP_H_DRAFT, FORWARD_MTP_H_BATCH };
/* The MTP block over n_tokens on every rank of c's group (c: rank 0, in this process), tokens in rank 0's memory,
 * positions already on every rank (forward_tp_positions), seq for FORWARD_MTP_H_CACHE; out: the logits' full rows in
 * rank 0's memory, gathered from the ranks' rows of the head (NULL: none). */
infer_status forward_tp_mtp(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens, enum forward_mtp_h which,
                            int32_t seq, float *out);
/* The FFN block of layer il (dense, MoE, MoE + shared expert), residual included. */
infer_status forward_ffn(struct infer_ctx *c, int32_t il, int32_t n_tokens);

infer_status layer_attn(struct infer_ctx *c, int32_t il, int32_t n_tokens);
infer_status layer_gdn(struct infer_ctx *c, int32_t il, int32_t n_tokens);
/* The MTP block over n_tokens at c->pos / c->seq (c->dpos on a device): tokens (backend memory) with hidden states h
 * (n_tokens, n_embd); writes its own KV cells, c->mtp_hid, and the logits of every row into out (backend memory;
 * NULL: none). Queued: the caller syncs before the host reads. */
infer_status layer_mtp(struct infer_ctx *c, const int32_t *tokens, const float *h, int32_t n_tokens, float *out);
/* layer_mtp's four parts, which a tensor-parallel group runs with an all-reduce of x after the first three
 * (forward_tp_mtp): x = the tokens' rows; u = W_eh [..] and the attention block (residual included); the FFN block;
 * mtp_hid and the head's logits (the rank's vocabulary rows under tensor parallelism). */
infer_status layer_mtp_embed(struct infer_ctx *c, const int32_t *tokens, int32_t n_tokens);
infer_status layer_mtp_mixer(struct infer_ctx *c, const float *h, int32_t n_tokens);
infer_status layer_mtp_ffn(struct infer_ctx *c, int32_t n_tokens);
infer_status layer_mtp_head(struct infer_ctx *c, int32_t n_tokens, float *out);
/* Runs fn through stage h's backend's run() (a graph under key), or with h leading a tensor-parallel group through
 * the group's (one graph per rank, captured together; none for a group over several processes). */
infer_status forward_stage_run(struct infer_ctx *h, uint64_t key, infer_status (*fn)(void *), void *arg);
/* The graph key of piece `piece` of segment seg of a batch on stage c (a tensor-parallel pass: seg -3), from its
 * shape, sequences and ring slots (forward.c); 0 (no graph) for prefill-sized batches or a host stage. */
uint64_t forward_graph_key(const struct infer_ctx *c, int32_t seg, int32_t piece, int32_t n_tokens, int32_t n_out);
/* The graph key of an MTP block run on stage h (kind 0: a draft step, 1: following a batch), from the n values of
 * shape that fix its arguments; 0 (no graph) where a host step runs inside the block or the batch is prefill-sized. */
uint64_t forward_mtp_graph_key(const struct infer_ctx *h, int32_t kind, int32_t n_tokens, const int32_t *shape,
                               int32_t n);
infer_status layer_ffn(struct infer_ctx *c, int32_t il, int32_t n_tokens);
infer_status layer_moe(struct infer_ctx *c, int32_t il, int32_t n_tokens);
/* Expert offload of layer il's MoE block, in three parts (layer_moe.c): start queues the routing and the copies
 * of the normed hidden state and the routing into c->off_*; shared queues the shared expert (if any), whose
 * output waits in c->xn; finish queues the copy of the experts' output (c->off_y, written by the host in
 * between) and the residual adds. layer_moe_offload_host runs the experts on c->off_be. */
infer_status layer_moe_offload_start(struct infer_ctx *c, int32_t il, int32_t n_tokens);
infer_status layer_moe_offload_shared(struct infer_ctx *c, int32_t il, int32_t n_tokens);
infer_status layer_moe_offload_host(struct infer_ctx *c, int32_t il, int32_t n_tokens);
infer_status layer_moe_offload_finish(struct infer_ctx *c, int32_t il, int32_t n_tokens);
/* Bytes one offloaded layer moves over the bus for n_tokens: the normed hidden state and the routing down, the
 * experts' output up (0 on a stage whose "device" is a test hook's host memory). */
uint64_t layer_moe_offload_bus(const struct infer_ctx *c, int32_t n_tokens);
/* The four parts in turn, queued outside any graph (the MTP block's offloaded experts), the bus counted. */
infer_status layer_moe_offload(struct infer_ctx *c, int32_t il, int32_t n_tokens);

#endif
