/* cache: the per-sequence memory of a context — KV cells for attention layers, the conv window and
 * recurrent state for Gated DeltaNet layers, and what speculative decoding needs to roll them back.
 *
 * Why this layout: the attention op (kernels.h attn_args) reads cell j as position j of one
 * sequence, so each sequence owns a contiguous block of n_ctx cells and its positions are always
 * 0..len-1 (no cell map, no holes). Truncation of attention layers is then just a shorter len.
 * A recurrent layer cannot forget tokens, so truncation restores its state from a snapshot: the
 * ring holds the state after each of the last n_ring positions (written by the ops themselves,
 * kernels.h snap_*), the checkpoint one explicitly saved state; position 0 is the zero state.
 *
 * Every buffer is memory of the context's backend (device memory on CUDA): it is zeroed and copied
 * with the backend's zero / copy ops, never touched from the host.
 * Layout (cells of kv type: f16 or Q8_0 rows; f32 states):
 *   k, v      [kv layer][seq][cell][n_head_kv * head_dim]   kv layers: trunk attention layers, then
 *                                                           the MTP block when the context drafts
 *   conv      [gdn layer][seq][ssm_conv_ring(d_conv) * conv channels]  ssm [gdn layer][seq][Hv * d_state^2]
 *             (the conv window as a ring of slots indexed by position, kernels.h ssm_conv_args)
 * *   ring_conv [seq][slot][gdn layer][conv_win_n]   ring_ssm [seq][slot][gdn layer][ssm_n]   slot = pos % n_ring
 *             (a conv snapshot is the window after its position: d_conv-1 rows of conv channels, oldest
 *             first; restoring writes each row into the live ring's slot of its position, the other slots
 *             being rewritten before they are read)
 *   h         [seq][n_embd]         the target's post-norm hidden state of the last position (MTP input)
 *   ring_h    [seq][slot][n_embd]   ckpt_*: [seq][...] one saved copy of conv (its window), ssm and h
 */
#ifndef INFER_CACHE_H
#define INFER_CACHE_H

#include <stdint.h>

#include "backend.h"
#include "model.h"

struct kv_cache {
    struct infer_backend *be; /* borrowed: owns every buffer below but the host arrays */
    int32_t n_seq, n_ctx, n_ring;
    int32_t n_kv_layer, n_gdn;
    int32_t *kv_of;          /* (n_layer_all) kv layer of a model layer, -1 if none */
    int32_t *gdn_of;         /* (n_layer_all) gdn layer of a model layer, -1 if none */
    int32_t type;            /* the cells' type: INFER_TYPE_F16 or INFER_TYPE_Q8_0 */
    int64_t row;             /* n_head_kv * head_dim: values per cell */
    size_t row_bytes;        /* bytes per cell: kv_cell_bytes(type, row) */
    int32_t rot_k, rot_v;    /* Q8_0: llama.cpp's Hadamard rotation of K and V rows (kernels.h kv_rot_k/v), 0: none */
    int64_t conv_ch;         /* conv channels (2 n_group d_state + d_inner) */
    int64_t conv_slots;      /* ring slots: ssm_conv_ring(d_conv) */
    int64_t conv_win;        /* rows of a saved window: d_conv - 1 */
    int64_t conv_n, ssm_n;   /* floats per (gdn layer, seq), live */
    int64_t conv_win_n;      /* floats of a saved conv window per (gdn layer, seq): conv_win * conv_ch */
    int64_t n_embd_h;        /* n_embd when hidden states are kept (drafting contexts), else 0 */
    void *k, *v;
    float *conv, *ssm, *h;
    float *ring_conv, *ring_ssm, *ring_h;
    float *ckpt_conv, *ckpt_ssm, *ckpt_h;
    int32_t *len;            /* (n_seq) cells in use */
    int32_t *mtp_len;        /* (n_seq) MTP-block cells in step with the target (drafting contexts) */
    int32_t *ring_lo;        /* (n_seq) lowest position whose ring snapshot is valid */
    int32_t *ckpt_len;       /* (n_seq) length at the checkpoint, -1 for none */
};

/* What a cache keeps for layer il of m: KV cells, recurrent state, or nothing (MTP blocks a context does not
 * draft with, when mtp = 0, and MTP blocks past the first). The one rule kv_cache_create and plan.c follow. */
enum kv_cache_kind { KV_CACHE_NONE, KV_CACHE_CELLS, KV_CACHE_STATE };
enum kv_cache_kind kv_cache_layer(const struct infer_model *m, int32_t il, int mtp);

/* Bytes of each buffer kv_cache_create allocates (0: not allocated), for n_kv_layer layers with cells, n_gdn
 * with recurrent state and, when hidden, the MTP input's hidden states. plan.c counts a cache with this. */
struct kv_cache_bytes {
    double k, v;                               /* the cells */
    double conv, ssm, ring_conv, ring_ssm;     /* recurrent state: live and n_ring snapshots */
    double ckpt_conv, ckpt_ssm;                /* the checkpoint (infer_seq_checkpoint), always there */
    double h, ring_h, ckpt_h;                  /* hidden states (drafting contexts) */
};
void kv_cache_bytes_of(const struct arch_hparams *hp, int32_t n_kv_layer, int32_t n_gdn, int hidden, int32_t n_seq,
                       int32_t n_ctx, int32_t n_ring, int32_t kv_type, struct kv_cache_bytes *out);

/* Gives *out with every sequence empty, for model m: cells of kv_type (F16 or Q8_0), n_ring snapshots per
 * sequence (0: none), the MTP block's cells and hidden states when mtp. INFER_E_OOM (with the byte count)
 * when it does not fit. */
infer_status kv_cache_create(struct infer_backend *be, const struct infer_model *m, int32_t n_seq, int32_t n_ctx,
                             int32_t n_ring, int mtp, int32_t kv_type, struct kv_cache **out);
/* kv_cache_create for one stage of a split context (forward.h): cells and state of the trunk layers [il0, il1)
 * only (and the MTP block's when mtp); the bookkeeping (lengths, ring, checkpoint) is that of every sequence. */
infer_status kv_cache_create_range(struct infer_backend *be, const struct infer_model *m, int32_t il0, int32_t il1,
                                   int32_t n_seq, int32_t n_ctx, int32_t n_ring, int mtp, int32_t kv_type,
                                   struct kv_cache **out);
void kv_cache_free(struct kv_cache *c); /* NULL is a no-op */
/* First cell of (model layer, seq) in k / v (cells row values = row_bytes apart); the layer must have cells. */
void *kv_cache_k(const struct kv_cache *c, int32_t layer, int32_t seq);
void *kv_cache_v(const struct kv_cache *c, int32_t layer, int32_t seq);
/* State of (model layer, seq) of a GDN layer; the ring base of that layer for seq (slot 0): a conv snapshot is the
 * window's d_conv-1 rows in position order (kernels.h ssm_conv_args), not the ring. */
float *kv_cache_conv(const struct kv_cache *c, int32_t layer, int32_t seq);
float *kv_cache_ssm(const struct kv_cache *c, int32_t layer, int32_t seq);
float *kv_cache_ring_conv(const struct kv_cache *c, int32_t layer, int32_t seq);
float *kv_cache_ring_ssm(const struct kv_cache *c, int32_t layer, int32_t seq);
/* Floats between ring slots of one layer (the same for every layer); a conv slot holds the d_conv-1 window rows. */
int64_t kv_cache_ring_stride_conv(const struct kv_cache *c);
int64_t kv_cache_ring_stride_ssm(const struct kv_cache *c);

/* After a batch took seq from old_len to new_len: records which ring snapshots are valid. */
void kv_cache_advanced(struct kv_cache *c, int32_t seq, int32_t new_len);
/* Truncates seq to len (< its length): attention cells are dropped, recurrent state and h restored to
 * what they were after position len - 1 (the zero state for len 0). INFER_E_UNSUPPORTED, nothing
 * changed, when the model is recurrent and no snapshot holds that position. */
infer_status kv_cache_truncate(struct kv_cache *c, int32_t seq, int32_t len);
/* Whether kv_cache_truncate(c, seq, len) would succeed (its INFER_E_UNSUPPORTED and message), changing nothing:
 * a split context asks every stage before truncating any. */
infer_status kv_cache_truncate_check(const struct kv_cache *c, int32_t seq, int32_t len);
/* Records h (n_embd_h floats) as the hidden state of position pos of seq: into the ring (when it has
 * slots) and, for the last position, as the live h. No-op without hidden states. */
infer_status kv_cache_put_h(struct kv_cache *c, int32_t seq, int32_t pos, int is_last, const float *h);
/* The live h of seq (zeros for an empty sequence); NULL without hidden states. */
const float *kv_cache_h(const struct kv_cache *c, int32_t seq);
/* Saves the recurrent state (and h) of seq at its current length. */
infer_status kv_cache_checkpoint(struct kv_cache *c, int32_t seq);

#endif
