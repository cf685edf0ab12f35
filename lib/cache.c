/* cache: per-sequence storage of a context (see cache.h for the layout and why). */
#include "cache.h"

static infer_status kv_cache_buf(struct kv_cache *c, double bytes, const char *what, void *out) {
    *(void **)out = NULL;
    if (bytes <= 0) return INFER_OK;
    if (bytes > (double)(SIZE_MAX / 4))
        return infer_fail(INFER_E_OOM, "cache: %.0f bytes for %s: too large", bytes, what);
    const size_t n = (size_t)bytes;
    /* the backend's message says how many bytes and why: the cache adds only what they were for */
    if (c->be->ops->alloc(c->be, n, (void **)out) != INFER_OK)
        return infer_fail_context(INFER_E_OOM, "cache: %s", what);
    return c->be->ops->zero(c->be, *(void **)out, n);
}

enum kv_cache_kind kv_cache_layer(const struct infer_model *m, int32_t il, int mtp) {
    if (il >= m->hp.n_layer && (!mtp || il > m->hp.n_layer)) return KV_CACHE_NONE; /* MTP blocks past the first are unused */
    return m->layers[il].kind == ARCH_LAYER_GDN ? KV_CACHE_STATE : KV_CACHE_CELLS;
}

void kv_cache_bytes_of(const struct arch_hparams *hp, int32_t n_kv_layer, int32_t n_gdn, int hidden, int32_t n_seq,
                       int32_t n_ctx, int32_t n_ring, int32_t kv_type, struct kv_cache_bytes *out) {
    const double row_bytes = (double)kv_cell_bytes(kv_type, hp->n_head_kv * hp->head_dim);
    /* the conv window live as a ring of slots by position, saved as its d_conv-1 rows (kernels.h ssm_conv_args) */
    const double conv_ch = n_gdn ? (double)(2 * hp->n_group * hp->d_state + hp->d_inner) : 0;
    const double conv_n = ssm_conv_ring((int32_t)hp->d_conv) * conv_ch, win_n = (double)(hp->d_conv - 1) * conv_ch;
    const double ssm_n = n_gdn ? (double)(hp->d_inner * hp->d_state) : 0;
    const double cells = (double)n_kv_layer * n_seq * n_ctx, f = sizeof(float);
    const double conv = (double)n_gdn * n_seq * conv_n * f, ssm = (double)n_gdn * n_seq * ssm_n * f;
    const double win = (double)n_gdn * n_seq * win_n * f;
    const double h = hidden ? (double)n_seq * (double)hp->n_embd * f : 0;
    *out = (struct kv_cache_bytes){
        .k = cells * row_bytes, .v = cells * row_bytes,
        .conv = conv, .ssm = ssm, .ring_conv = win * n_ring, .ring_ssm = ssm * n_ring,
        .ckpt_conv = win, .ckpt_ssm = ssm,
        .h = h, .ring_h = h * n_ring, .ckpt_h = h,
    };
}

infer_status kv_cache_create(struct infer_backend *be, const struct infer_model *m, int32_t n_seq, int32_t n_ctx,
                             int32_t n_ring, int mtp, int32_t kv_type, struct kv_cache **out) {
    return kv_cache_create_range(be, m, 0, (int32_t)m->hp.n_layer, n_seq, n_ctx, n_ring, mtp, kv_type, out);
}

infer_status kv_cache_create_range(struct infer_backend *be, const struct infer_model *m, int32_t il0, int32_t il1,
                                   int32_t n_seq, int32_t n_ctx, int32_t n_ring, int mtp, int32_t kv_type,
                                   struct kv_cache **out) {
    infer_status st = INFER_OK;
    const struct arch_hparams *hp = &m->hp;
    *out = NULL;
    if (n_seq < 1 || n_ctx < 1 || n_ring < 0)
        return infer_fail(INFER_E_ARG, "cache: n_seq %d n_ctx %d n_ring %d: expected n_seq, n_ctx >= 1, n_ring >= 0",
                          n_seq, n_ctx, n_ring);
    if ((kv_type != INFER_TYPE_F16 && kv_type != INFER_TYPE_Q8_0) || (kv_type == INFER_TYPE_Q8_0 && hp->head_dim % 32))
        return infer_fail(INFER_E_ARG, "cache: kv type %d with head_dim %lld: expected F16, or Q8_0 with head_dim a "
                          "multiple of 32", kv_type, (long long)hp->head_dim);
    if (mtp && hp->n_layer_nextn < 1)
        return infer_fail(INFER_E_ARG, "cache: MTP cells asked of a model without an MTP layer");
    struct kv_cache *c = xcalloc(1, sizeof *c);
    if (!c) return INFER_OOM("cache");
    c->be = be, c->n_seq = n_seq, c->n_ctx = n_ctx, c->n_ring = n_ring;
    const int32_t n_all = (int32_t)hp->n_layer_all;
    c->kv_of = xcalloc((size_t)n_all, sizeof(int32_t));
    c->gdn_of = xcalloc((size_t)n_all, sizeof(int32_t));
    c->len = xcalloc((size_t)n_seq, sizeof(int32_t));
    c->mtp_len = xcalloc((size_t)n_seq, sizeof(int32_t));
    c->ring_lo = xcalloc((size_t)n_seq, sizeof(int32_t));
    c->ckpt_len = xcalloc((size_t)n_seq, sizeof(int32_t));
    if (!c->kv_of || !c->gdn_of || !c->len || !c->mtp_len || !c->ring_lo || !c->ckpt_len) {
        st = INFER_OOM("cache bookkeeping");
        goto fail;
    }
    for (int32_t s = 0; s < n_seq; s++) c->ckpt_len[s] = -1;
    for (int32_t il = 0; il < n_all; il++) {
        const int other = il < hp->n_layer && (il < il0 || il >= il1); /* another stage's layer */
        const enum kv_cache_kind kind = other ? KV_CACHE_NONE : kv_cache_layer(m, il, mtp);
        c->kv_of[il] = kind == KV_CACHE_CELLS ? c->n_kv_layer++ : -1;
        c->gdn_of[il] = kind == KV_CACHE_STATE ? c->n_gdn++ : -1;
    }
    c->type = kv_type, c->row = hp->n_head_kv * hp->head_dim, c->row_bytes = kv_cell_bytes(kv_type, c->row);
    if (kv_type == INFER_TYPE_Q8_0) c->rot_k = kv_rot_k(hp->head_dim), c->rot_v = kv_rot_v(hp->head_dim);
    c->conv_ch = c->n_gdn ? 2 * hp->n_group * hp->d_state + hp->d_inner : 0;
    c->conv_slots = ssm_conv_ring((int32_t)hp->d_conv);
    c->conv_win = (int32_t)hp->d_conv - 1;
    c->conv_n = c->conv_slots * c->conv_ch;
    c->conv_win_n = c->conv_win * c->conv_ch;
    c->ssm_n = c->n_gdn ? hp->d_inner * hp->d_state : 0;
    c->n_embd_h = mtp ? hp->n_embd : 0;
    struct kv_cache_bytes b;
    kv_cache_bytes_of(hp, c->n_kv_layer, c->n_gdn, mtp, n_seq, n_ctx, n_ring, kv_type, &b);
    TRY(kv_cache_buf(c, b.k, "the K cells", &c->k));
    TRY(kv_cache_buf(c, b.v, "the V cells", &c->v));
    TRY(kv_cache_buf(c, b.conv, "the conv windows", &c->conv));
    TRY(kv_cache_buf(c, b.ssm, "the recurrent states", &c->ssm));
    TRY(kv_cache_buf(c, b.h, "the hidden states", &c->h));
    TRY(kv_cache_buf(c, b.ring_conv, "the conv snapshots", &c->ring_conv));
    TRY(kv_cache_buf(c, b.ring_ssm, "the recurrent-state snapshots", &c->ring_ssm));
    TRY(kv_cache_buf(c, b.ring_h, "the hidden-state snapshots", &c->ring_h));
    TRY(kv_cache_buf(c, b.ckpt_conv, "the conv checkpoints", &c->ckpt_conv));
    TRY(kv_cache_buf(c, b.ckpt_ssm, "the recurrent-state checkpoints", &c->ckpt_ssm));
    TRY(kv_cache_buf(c, b.ckpt_h, "the hidden-state checkpoints", &c->ckpt_h));
    *out = c;
    return INFER_OK;
fail:
    kv_cache_free(c);
    return st;
}

void kv_cache_free(struct kv_cache *c) {
    if (!c) return;
    void *bufs[] = {c->k, c->v, c->conv, c->ssm, c->h, c->ring_conv, c->ring_ssm, c->ring_h, c->ckpt_conv,
                    c->ckpt_ssm, c->ckpt_h};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) c->be->ops->free(c->be, bufs[i]);
    xfree(c->kv_of), xfree(c->gdn_of), xfree(c->len), xfree(c->mtp_len), xfree(c->ring_lo), xfree(c->ckpt_len);
    xfree(c);
}

static size_t kv_cache_off(const struct kv_cache *c, int32_t layer, int32_t seq) {
    return (((size_t)c->kv_of[layer] * (size_t)c->n_seq + (size_t)seq) * (size_t)c->n_ctx) * c->row_bytes; /* bytes */
}

void *kv_cache_k(const struct kv_cache *c, int32_t layer, int32_t seq) { return (char *)c->k + kv_cache_off(c, layer, seq); }
void *kv_cache_v(const struct kv_cache *c, int32_t layer, int32_t seq) { return (char *)c->v + kv_cache_off(c, layer, seq); }

float *kv_cache_conv(const struct kv_cache *c, int32_t layer, int32_t seq) {
    return c->conv + ((size_t)c->gdn_of[layer] * (size_t)c->n_seq + (size_t)seq) * (size_t)c->conv_n;
}
float *kv_cache_ssm(const struct kv_cache *c, int32_t layer, int32_t seq) {
    return c->ssm + ((size_t)c->gdn_of[layer] * (size_t)c->n_seq + (size_t)seq) * (size_t)c->ssm_n;
}
int64_t kv_cache_ring_stride_conv(const struct kv_cache *c) { return c->n_gdn * c->conv_win_n; }
int64_t kv_cache_ring_stride_ssm(const struct kv_cache *c) { return c->n_gdn * c->ssm_n; }
float *kv_cache_ring_conv(const struct kv_cache *c, int32_t layer, int32_t seq) {
    if (!c->ring_conv) return NULL;
    return c->ring_conv + (size_t)seq * (size_t)c->n_ring * (size_t)kv_cache_ring_stride_conv(c) +
           (size_t)c->gdn_of[layer] * (size_t)c->conv_win_n;
}
float *kv_cache_ring_ssm(const struct kv_cache *c, int32_t layer, int32_t seq) {
    if (!c->ring_ssm) return NULL;
    return c->ring_ssm + (size_t)seq * (size_t)c->n_ring * (size_t)kv_cache_ring_stride_ssm(c) +
           (size_t)c->gdn_of[layer] * (size_t)c->ssm_n;
}

void kv_cache_advanced(struct kv_cache *c, int32_t seq, int32_t new_len) {
    if (new_len - c->n_ring > c->ring_lo[seq]) c->ring_lo[seq] = new_len - c->n_ring;
    c->len[seq] = new_len;
}

infer_status kv_cache_put_h(struct kv_cache *c, int32_t seq, int32_t pos, int is_last, const float *h) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    const size_t n = (size_t)c->n_embd_h;
    if (!n) return INFER_OK;
    if (c->n_ring)
        TRY(be->ops->copy(be, c->ring_h + ((size_t)seq * (size_t)c->n_ring + (size_t)(pos % c->n_ring)) * n, h,
                          n * sizeof(float)));
    if (is_last) TRY(be->ops->copy(be, c->h + (size_t)seq * n, h, n * sizeof(float)));
fail:
    return st;
}

const float *kv_cache_h(const struct kv_cache *c, int32_t seq) {
    return c->n_embd_h ? c->h + (size_t)seq * (size_t)c->n_embd_h : NULL;
}

/* Copies the conv window after position last between a live ring and a saved window: its rows (positions
 * last-conv_win+1 .. last, in order) to or from their ring slots, one copy per stretch of consecutive slots (two
 * where the window wraps past the ring's end). */
static infer_status kv_cache_copy_window(struct kv_cache *c, float *ring, float *win, int32_t last, int to_live) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    const int64_t ch = c->conv_ch, first = ssm_conv_slot((int64_t)last - c->conv_win + 1, c->conv_slots);
    const int64_t n1 = first + c->conv_win <= c->conv_slots ? c->conv_win : c->conv_slots - first;
    const int64_t n2 = c->conv_win - n1;
    float *live1 = ring + first * ch, *saved2 = win + n1 * ch;
    const size_t b1 = (size_t)(n1 * ch) * sizeof(float), b2 = (size_t)(n2 * ch) * sizeof(float);
    TRY(be->ops->copy(be, to_live ? live1 : win, to_live ? win : live1, b1));
    if (n2 > 0) TRY(be->ops->copy(be, to_live ? ring : saved2, to_live ? saved2 : ring, b2));
fail:
    return st;
}

/* Copies the recurrent state and h of seq after position last between the live buffers and a saved copy: the
 * ring slot (slot >= 0) or the checkpoint (slot < 0); to_live picks the direction. */
static infer_status kv_cache_copy_state(struct kv_cache *c, int32_t seq, int32_t last, int32_t slot, int to_live) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    const size_t cn = (size_t)c->conv_n, wn = (size_t)c->conv_win_n, sn = (size_t)c->ssm_n, hn = (size_t)c->n_embd_h;
    for (int32_t g = 0; g < c->n_gdn; g++) {
        float *live_c = c->conv + ((size_t)g * (size_t)c->n_seq + (size_t)seq) * cn;
        float *live_s = c->ssm + ((size_t)g * (size_t)c->n_seq + (size_t)seq) * sn;
        float *sc, *ss;
        if (slot >= 0) {
            size_t base = (size_t)seq * (size_t)c->n_ring + (size_t)slot;
            sc = c->ring_conv + (base * (size_t)c->n_gdn + (size_t)g) * wn;
            ss = c->ring_ssm + (base * (size_t)c->n_gdn + (size_t)g) * sn;
        } else {
            sc = c->ckpt_conv + ((size_t)seq * (size_t)c->n_gdn + (size_t)g) * wn;
            ss = c->ckpt_ssm + ((size_t)seq * (size_t)c->n_gdn + (size_t)g) * sn;
        }
        TRY(kv_cache_copy_window(c, live_c, sc, last, to_live));
        TRY(be->ops->copy(be, to_live ? live_s : ss, to_live ? ss : live_s, sn * sizeof(float)));
    }
    if (hn) {
        float *live_h = c->h + (size_t)seq * hn;
        float *sh = slot >= 0 ? c->ring_h + ((size_t)seq * (size_t)c->n_ring + (size_t)slot) * hn
                              : c->ckpt_h + (size_t)seq * hn;
        TRY(be->ops->copy(be, to_live ? live_h : sh, to_live ? sh : live_h, hn * sizeof(float)));
    }
fail:
    return st;
}

/* The lowest position of seq whose ring snapshot is valid (old - n_ring at most positions back). */
static int32_t kv_cache_ring_from(const struct kv_cache *c, int32_t seq) {
    const int32_t old = c->len[seq];
    return c->ring_lo[seq] > old - c->n_ring ? c->ring_lo[seq] : old - c->n_ring;
}

infer_status kv_cache_truncate_check(const struct kv_cache *c, int32_t seq, int32_t len) {
    const int32_t old = c->len[seq];
    if (len >= old || len <= 0 || (!c->n_gdn && !c->n_embd_h)) return INFER_OK;
    const int32_t lo = kv_cache_ring_from(c, seq);
    if ((c->n_ring > 0 && len - 1 >= lo) || c->ckpt_len[seq] == len) return INFER_OK;
    return infer_fail(INFER_E_UNSUPPORTED, "cache: sequence %d (%d positions) cannot be truncated to %d: a "
                      "recurrent model keeps its state only for lengths %d..%d (n_draft snapshots), its "
                      "checkpoint (%d) and 0", seq, old, len, c->n_ring ? lo + 1 : old, old, c->ckpt_len[seq]);
}

infer_status kv_cache_truncate(struct kv_cache *c, int32_t seq, int32_t len) {
    infer_status st = INFER_OK;
    struct infer_backend *be = c->be;
    const int32_t old = c->len[seq];
    if (len >= old) return INFER_OK;
    TRY(kv_cache_truncate_check(c, seq, len));
    if (len <= 0) {
        len = 0;
        for (int32_t g = 0; g < c->n_gdn; g++) {
            TRY(be->ops->zero(be, c->conv + ((size_t)g * (size_t)c->n_seq + (size_t)seq) * (size_t)c->conv_n,
                              (size_t)c->conv_n * sizeof(float)));
            TRY(be->ops->zero(be, c->ssm + ((size_t)g * (size_t)c->n_seq + (size_t)seq) * (size_t)c->ssm_n,
                              (size_t)c->ssm_n * sizeof(float)));
        }
        if (c->n_embd_h)
            TRY(be->ops->zero(be, c->h + (size_t)seq * (size_t)c->n_embd_h, (size_t)c->n_embd_h * sizeof(float)));
        c->ring_lo[seq] = 0;
    } else if (c->n_gdn || c->n_embd_h) {
        const int32_t p = len - 1; /* the state after position p is wanted (kv_cache_truncate_check: held) */
        const int32_t lo = kv_cache_ring_from(c, seq);
        if (c->n_ring > 0 && p >= lo)
            TRY(kv_cache_copy_state(c, seq, p, p % c->n_ring, 1));
        else
            TRY(kv_cache_copy_state(c, seq, p, -1, 1));
        /* what stays valid: [lo, len); the next batch snapshots its own positions from len on */
        c->ring_lo[seq] = lo < len ? lo : len;
    }
    if (c->ckpt_len[seq] > len) c->ckpt_len[seq] = -1;
    if (c->mtp_len[seq] > len) c->mtp_len[seq] = len;
    c->len[seq] = len;
fail:
    return st;
}

infer_status kv_cache_checkpoint(struct kv_cache *c, int32_t seq) {
    infer_status st = kv_cache_copy_state(c, seq, c->len[seq] - 1, -1, 0);
    if (st == INFER_OK) c->ckpt_len[seq] = c->len[seq];
    return st;
}
