/* ops_cuda: test-ops' cuda column, host args mirrored to the device (see ops_cuda.h). The byte count of
 * each buffer is the contract of kernels.h, computed from the args alone. */
#include "ops_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "util.h"

#ifdef INFER_CUDA
#include <cuda_runtime_api.h>

#define F4(n) (sizeof(float) * (size_t)(n))
#define I4(n) (sizeof(int32_t) * (size_t)(n))

/* Floats spanned by `rows` rows of n, stride apart (0 rows: none). */
static size_t span(int64_t rows, int64_t stride, int64_t n) {
    return rows > 0 ? F4((rows - 1) * stride + n) : 0;
}

/* Runs the launcher on the mirrored args: upload, launch, finish. */
#define CU_RUN(m, call) (dm_upload(&(m)) ? dm_finish(&(m), (m).err) : dm_finish(&(m), (int)(call)))

int cu_quantize(const struct quantize_args *h) {
    struct quantize_args d = *h;
    struct dmirror m = {0};
    dm_add(&m, &d.x, span(h->n_rows, h->x_stride, h->n), DM_IN);
    dm_add(&m, &d.y, h->n_rows > 0 && h->n > 0 ? q8_split_bytes(h->n, h->n_rows) : 0, DM_OUT);
    return CU_RUN(m, cuda_quantize(&d, 0));
}

/* The buffers mmv and mm share; xq only where the launcher reads it. */
static void mm_mirror(struct dmirror *m, int32_t type, int64_t n_in, int64_t n_out, int64_t nt,
                      const void **w, const void **w2, const void **xq, const float **x, float **y,
                      const float **add) {
    const size_t wb = ref_row_bytes(type, n_in) * (size_t)n_out;
    dm_add(m, w, wb, DM_IN);
    dm_add(m, w2, wb, DM_IN);
    if (xq) dm_add(m, xq, mmv_act_type_cuda(type) >= 0 ? q8_split_bytes(n_in, (int32_t)nt) : 0, DM_IN);
    dm_add(m, x, F4(nt * n_in), DM_IN);
    dm_add(m, y, F4(nt * n_out), DM_OUT);
    dm_add(m, add, F4(nt * n_out), DM_IN);
}

int cu_mmv(const struct mmv_args *h) {
    struct mmv_args d = *h;
    struct dmirror m = {0};
    if (h->n_tokens < 1 || h->n_in < 1 || h->n_out < 1)
        return (int)cuda_mmv(h, 0); /* the launcher's refusal */
    mm_mirror(&m, h->type, h->n_in, h->n_out, h->n_tokens, &d.w, &d.w2, &d.xq, &d.x, &d.y, &d.add);
    return CU_RUN(m, cuda_mmv(&d, 0));
}

int cu_mmv_multi(const struct mmv_multi_args *h) {
    struct mmv_multi_args d = *h;
    struct dmirror m = {0};
    if (h->n < 1 || h->n > MMV_MULTI_MAX) return (int)cuda_mmv_multi(h, 0); /* the launcher's refusal */
    for (int32_t k = 0; k < h->n; k++) {
        const struct mmv_args *p = &h->p[k];
        if (p->n_tokens < 1 || p->n_in < 1 || p->n_out < 1) return (int)cuda_mmv_multi(h, 0);
    }
    /* parts sharing x or xq share its device copy (dm_upload merges overlapping host ranges) */
    for (int32_t k = 0; k < h->n; k++) {
        struct mmv_args *p = &d.p[k];
        mm_mirror(&m, p->type, p->n_in, p->n_out, p->n_tokens, &p->w, &p->w2, &p->xq, &p->x, &p->y, &p->add);
    }
    return CU_RUN(m, cuda_mmv_multi(&d, 0));
}

static struct cuda_mm_state *cu_mm_states[2];
static int cu_mm_made[2];

int cu_mm(const struct mm_args *h, int mode) {
    if (!cu_mm_made[mode]) {
        const char *old = getenv("INFER_MATMUL");
        char *keep = old ? strdup(old) : NULL;
        setenv("INFER_MATMUL", mode ? "cublas" : "mma", 1);
        const cudaError_t e = cuda_mm_state_create(&cu_mm_states[mode]);
        if (keep)
            setenv("INFER_MATMUL", keep, 1);
        else
            unsetenv("INFER_MATMUL");
        free(keep);
        if (e != cudaSuccess) return (int)e;
        cu_mm_made[mode] = 1;
    }
    struct mm_args d = *h;
    struct dmirror m = {0};
    d.xq = NULL; /* both modes take the f32 activations */
    if (h->n_tokens < 1 || h->n_in < 1 || h->n_out < 1) return (int)cuda_mm(&d, cu_mm_states[mode], 0);
    mm_mirror(&m, h->type, h->n_in, h->n_out, h->n_tokens, &d.w, &d.w2, NULL, &d.x, &d.y, &d.add);
    return CU_RUN(m, cuda_mm(&d, cu_mm_states[mode], 0));
}

static void norm_mirror(struct dmirror *m, struct norm_args *d, const struct norm_args *h) {
    dm_add(m, &d->x, span(h->n_rows, h->x_stride, h->n), DM_IN);
    dm_add(m, &d->w, F4(h->n), DM_IN);
    dm_add(m, &d->y, span(h->n_rows, h->y_stride, h->n), DM_OUT);
    dm_add(m, &d->gate, span(h->n_rows, h->gate_stride, h->n), DM_IN);
}

int cu_norm(const struct norm_args *h) {
    struct norm_args d = *h;
    struct dmirror m = {0};
    norm_mirror(&m, &d, h);
    return CU_RUN(m, cuda_norm(&d, 0));
}

int cu_norm_q(const struct norm_q_args *h) {
    struct norm_q_args d = *h;
    struct dmirror m = {0};
    norm_mirror(&m, &d.norm, &h->norm);
    dm_add(&m, &d.yq, h->norm.n_rows > 0 && h->norm.n > 0 ? q8_split_bytes(h->norm.n, h->norm.n_rows) : 0,
           DM_OUT);
    return CU_RUN(m, cuda_norm_q(&d, 0));
}

/* Floats from a head's first value to the last value of the last head of the last token. */
static size_t heads_span(int32_t n_tokens, int64_t ts, int32_t n_head, int64_t hs, int32_t hd) {
    return n_tokens > 0 && n_head > 0 ? F4((n_tokens - 1) * ts + (n_head - 1) * hs + hd) : 0;
}

int cu_rope(const struct rope_args *h) {
    struct rope_args d = *h;
    struct dmirror m = {0};
    dm_add(&m, &d.x, heads_span(h->n_tokens, h->token_stride, h->n_head, h->head_stride, h->head_dim),
           DM_OUT);
    dm_add(&m, &d.pos, I4(h->n_tokens > 0 ? h->n_tokens : 0), DM_IN);
    return CU_RUN(m, cuda_rope(&d, 0));
}

int cu_rope_norm(const struct rope_norm_args *h) {
    struct rope_norm_args d = *h;
    const struct rope_args *r = &h->rope;
    struct dmirror m = {0};
    dm_add(&m, &d.rope.x, heads_span(r->n_tokens, r->token_stride, r->n_head, r->head_stride, r->head_dim),
           DM_OUT);
    dm_add(&m, &d.rope.pos, I4(r->n_tokens > 0 ? r->n_tokens : 0), DM_IN);
    dm_add(&m, &d.src,
           heads_span(r->n_tokens, h->src_token_stride, r->n_head, h->src_head_stride, r->head_dim), DM_IN);
    dm_add(&m, &d.w, F4(r->head_dim > 0 ? r->head_dim : 0), DM_IN);
    return CU_RUN(m, cuda_rope_norm(&d, 0));
}

int cu_act(const struct act_args *h) {
    struct act_args d = *h;
    struct dmirror m = {0};
    const int64_t s2 = h->x2_stride ? h->x2_stride : h->n;
    dm_add(&m, &d.x, span(h->n_rows, h->n, h->n), DM_IN);
    dm_add(&m, &d.x2, span(h->n_rows, s2, h->op == ACT_SIGMOID_MUL_ROW ? 1 : h->n), DM_IN);
    dm_add(&m, &d.y, span(h->n_rows, h->n, h->n), DM_OUT);
    return CU_RUN(m, cuda_act(&d, 0));
}

int cu_attn(const struct attn_args *h) {
    struct attn_args d = *h;
    struct dmirror m = {0};
    const int64_t row = (int64_t)h->n_head * h->head_dim;
    const size_t cells = h->n_kv > 0 ? kv_cell_bytes(h->kv_type, (int64_t)(h->n_kv - 1) * h->kv_stride +
                                                                     (int64_t)h->n_head_kv * h->head_dim)
                                     : 0;
    dm_add(&m, &d.q, span(h->n_tokens, h->q_stride, row), DM_IN);
    dm_add(&m, &d.k, cells, DM_IN);
    dm_add(&m, &d.v, cells, DM_IN);
    dm_add(&m, &d.out, span(h->n_tokens, h->out_stride, row), DM_OUT);
    dm_add(&m, &d.pos, I4(h->n_tokens > 0 ? h->n_tokens : 0), DM_IN);
    dm_add(&m, &d.scratch, F4(attn_scratch_floats(h)), DM_OUT);
    return CU_RUN(m, cuda_attn(&d, 0));
}

/* The conv's mirrors (x, ring, w, y, snapshots, pos) into m, with d. */
static void cu_conv_mirror(struct dmirror *m, struct ssm_conv_args *d, const struct ssm_conv_args *h) {
    const int64_t ring = h->d_conv > 0 ? (int64_t)ssm_conv_ring(h->d_conv) * h->n_ch : 0;
    const int64_t win = h->d_conv > 0 ? (int64_t)(h->d_conv - 1) * h->n_ch : 0; /* a snapshot's rows */
    dm_add(m, &d->x, span(h->n_tokens, h->x_stride, h->n_ch), DM_IN);
    dm_add(m, &d->state, ring > 0 ? F4(ring) : 0, DM_OUT);
    dm_add(m, &d->w, h->d_conv > 0 ? F4(h->n_ch * h->d_conv) : 0, DM_IN);
    dm_add(m, &d->y, span(h->n_tokens, h->n_ch, h->n_ch), DM_OUT);
    dm_add(m, &d->snap, win > 0 ? span(h->snap_ring, h->snap_stride, win) : 0, DM_OUT);
    dm_add(m, &d->pos, I4(1), DM_IN);
}

int cu_ssm_conv(const struct ssm_conv_args *h) {
    struct ssm_conv_args d = *h;
    struct dmirror m = {0};
    cu_conv_mirror(&m, &d, h);
    return CU_RUN(m, cuda_ssm_conv(&d, 0));
}

/* The gdn mirrors but q, k, v (the fused form computes them). */
static void cu_gdn_mirror(struct dmirror *m, struct gdn_args *d, const struct gdn_args *h) {
    const int32_t nv = h->n_vhead, r = h->ab_group;
    const int64_t ab_last =
        r > 0 ? (int64_t)((nv - 1) / r) * 2 * r + (nv - 1) % r : nv - 1; /* the largest idx(j) */
    const int64_t ns = (int64_t)nv * h->d_state * h->d_state;
    dm_add(m, &d->a, span(h->n_tokens, h->ab_stride, ab_last + 1), DM_IN);
    dm_add(m, &d->b, span(h->n_tokens, h->ab_stride, ab_last + 1), DM_IN);
    dm_add(m, &d->dt_bias, F4(nv), DM_IN);
    dm_add(m, &d->ssm_a, F4(nv), DM_IN);
    dm_add(m, &d->state, F4(ns), DM_OUT);
    dm_add(m, &d->out, span(h->n_tokens, (int64_t)nv * h->d_state, (int64_t)nv * h->d_state), DM_OUT);
    dm_add(m, &d->snap, span(h->snap_ring, h->snap_stride, ns), DM_OUT);
}

int cu_gdn(const struct gdn_args *h) {
    struct gdn_args d = *h;
    struct dmirror m = {0};
    dm_add(&m, &d.q, span(h->n_tokens, h->qk_stride, (int64_t)h->n_group * h->d_state), DM_IN);
    dm_add(&m, &d.k, span(h->n_tokens, h->qk_stride, (int64_t)h->n_group * h->d_state), DM_IN);
    dm_add(&m, &d.v, span(h->n_tokens, h->v_stride, (int64_t)h->n_vhead * h->d_state), DM_IN);
    cu_gdn_mirror(&m, &d, h);
    return CU_RUN(m, cuda_gdn(&d, 0));
}

int cu_gdn_conv(const struct gdn_conv_args *h) {
    struct gdn_conv_args d = *h;
    struct dmirror m = {0};
    cu_conv_mirror(&m, &d.conv, &h->conv);
    cu_gdn_mirror(&m, &d.gdn, &h->gdn);
    const int64_t no = (int64_t)h->gdn.n_tokens * h->gdn.n_vhead * h->gdn.d_state;
    dm_add(&m, &d.norm_w, F4(h->gdn.d_state), DM_IN);
    dm_add(&m, &d.norm_gate, F4(no > 0 ? no : 0), DM_IN);
    dm_add(&m, &d.norm_done, I4(h->gdn.n_vhead > 0 ? h->gdn.n_vhead : 0), DM_OUT); /* as the call leaves them */
    return CU_RUN(m, cuda_gdn_conv(&d, 0));
}

int cu_embed(const struct embed_args *h) {
    struct embed_args d = *h;
    struct dmirror m = {0};
    dm_add(&m, &d.table, ref_row_bytes(h->type, h->n_embd) * (size_t)h->n_rows, DM_IN);
    dm_add(&m, &d.ids, I4(h->n_tokens > 0 ? h->n_tokens : 0), DM_IN);
    dm_add(&m, &d.y, span(h->n_tokens, h->n_embd, h->n_embd), DM_OUT);
    return CU_RUN(m, cuda_embed(&d, 0));
}

int cu_kv_store(const struct kv_store_args *h, size_t cells_bytes) {
    struct kv_store_args d = *h;
    struct dmirror m = {0};
    dm_add(&m, &d.x, span(h->n_tokens, h->x_stride, h->row), DM_IN);
    dm_add(&m, &d.cells, cells_bytes, DM_OUT);
    dm_add(&m, &d.pos, I4(h->n_tokens > 0 ? h->n_tokens : 0), DM_IN);
    return CU_RUN(m, cuda_kv_store(&d, 0));
}

int cu_moe_route(const struct moe_route_args *h) {
    struct moe_route_args d = *h;
    struct dmirror m = {0};
    dm_add(&m, &d.logits, span(h->n_tokens, h->n_expert, h->n_expert), DM_IN);
    dm_add(&m, &d.ids, span(h->n_tokens, h->n_expert_used, h->n_expert_used), DM_OUT);
    dm_add(&m, &d.weights, span(h->n_tokens, h->n_expert_used, h->n_expert_used), DM_OUT);
    return CU_RUN(m, cuda_moe_route(&d, 0));
}

int cu_moe_ffn(const struct moe_ffn_args *h) {
    struct moe_ffn_args d = *h;
    struct dmirror m = {0};
    const size_t gb = ref_row_bytes(h->type_gate_up, h->n_embd) * (size_t)(h->n_expert * h->n_ff);
    const size_t db = ref_row_bytes(h->type_down, h->n_ff) * (size_t)(h->n_expert * h->n_embd);
    dm_add(&m, &d.gate, gb, DM_IN);
    dm_add(&m, &d.up, gb, DM_IN);
    dm_add(&m, &d.down, db, DM_IN);
    dm_add(&m, &d.x, span(h->n_tokens, h->n_embd, h->n_embd), DM_IN);
    dm_add(&m, &d.ids, span(h->n_tokens, h->n_expert_used, h->n_expert_used), DM_IN);
    dm_add(&m, &d.weights, span(h->n_tokens, h->n_expert_used, h->n_expert_used), DM_IN);
    dm_add(&m, &d.y, span(h->n_tokens, h->n_embd, h->n_embd), DM_OUT);
    dm_add(&m, &d.scratch, F4(moe_ffn_scratch_floats(h)), DM_OUT);
    return CU_RUN(m, cuda_moe_ffn(&d, 0));
}

int cu_sample(const struct sample_args *h) {
    struct sample_args d = *h;
    struct dmirror m = {0};
    dm_add(&m, &d.logits, span(h->n_rows, h->stride, h->n_vocab), DM_IN);
    dm_add(&m, &d.pen, I4(2 * (h->n_pen > 0 ? h->n_pen : 0)), DM_IN);
    dm_add(&m, &d.pen_push, I4(h->n_rows > 1 ? h->n_rows - 1 : 0), DM_IN);
    dm_add(&m, &d.pen_drop, I4(h->n_rows > 1 ? h->n_rows - 1 : 0), DM_IN);
    dm_add(&m, &d.u, sizeof(double) * (size_t)(h->n_rows > 0 ? h->n_rows : 0), DM_IN);
    dm_add(&m, &d.out, I4(h->n_rows > 0 ? h->n_rows : 0), DM_OUT);
    dm_add(&m, &d.scratch, h->n_rows > 0 && h->n_vocab > 0 ? sample_scratch_bytes(h->n_rows, h->n_vocab) : 0,
           DM_OUT);
    dm_add(&m, &d.list, sizeof(struct sample_list) * (size_t)(h->n_rows > 0 ? h->n_rows : 0), DM_OUT);
    return CU_RUN(m, cuda_sample(&d, 0));
}

int cu_spec_accept(const struct spec_accept_args *h) {
    struct spec_accept_args d = *h;
    struct dmirror m = {0};
    const size_t k = (size_t)(h->k > 0 ? h->k : 0);
    dm_add(&m, &d.target, sizeof(struct sample_list) * (k + 1), DM_IN);
    dm_add(&m, &d.draft, sizeof(struct sample_list) * k, DM_IN);
    dm_add(&m, &d.drafts, I4(k), DM_IN);
    dm_add(&m, &d.p_draw, I4(k + 1), DM_IN);
    dm_add(&m, &d.u_acc, sizeof(double) * k, DM_IN);
    dm_add(&m, &d.u_res, sizeof(double) * (k + 1), DM_IN);
    dm_add(&m, &d.out, I4(k + 2), DM_OUT);
    return CU_RUN(m, cuda_spec_accept(&d, 0));
}

const char *cu_error(int e) {
    return e == DM_INPUT_WRITTEN ? "the kernel wrote into an input buffer"
           : e < 0               ? "too many buffers"
                                 : cudaGetErrorString((cudaError_t)e);
}

int cu_refused(int e) { return e == (int)cudaErrorInvalidValue; }
int32_t cu_act_type(int32_t weight_type) { return mmv_act_type_cuda(weight_type); }

void cu_done(void) {
    for (int i = 0; i < 2; i++) {
        if (cu_mm_made[i]) cuda_mm_state_free(cu_mm_states[i]);
        cu_mm_states[i] = NULL, cu_mm_made[i] = 0;
    }
}

#else /* no CUDA in this build: every call is refused before anything runs */
int cu_quantize(const struct quantize_args *a) { return (void)a, -1; }
int cu_mmv(const struct mmv_args *a) { return (void)a, -1; }
int cu_mm(const struct mm_args *a, int mode) { return (void)a, (void)mode, -1; }
int cu_mmv_multi(const struct mmv_multi_args *a) { return (void)a, -1; }
int cu_norm(const struct norm_args *a) { return (void)a, -1; }
int cu_norm_q(const struct norm_q_args *a) { return (void)a, -1; }
int cu_rope(const struct rope_args *a) { return (void)a, -1; }
int cu_rope_norm(const struct rope_norm_args *a) { return (void)a, -1; }
int cu_act(const struct act_args *a) { return (void)a, -1; }
int cu_attn(const struct attn_args *a) { return (void)a, -1; }
int cu_ssm_conv(const struct ssm_conv_args *a) { return (void)a, -1; }
int cu_gdn(const struct gdn_args *a) { return (void)a, -1; }
int cu_gdn_conv(const struct gdn_conv_args *a) { return (void)a, -1; }
int cu_embed(const struct embed_args *a) { return (void)a, -1; }
int cu_kv_store(const struct kv_store_args *a, size_t cells_bytes) { return (void)a, (void)cells_bytes, -1; }
int cu_moe_route(const struct moe_route_args *a) { return (void)a, -1; }
int cu_moe_ffn(const struct moe_ffn_args *a) { return (void)a, -1; }
int cu_sample(const struct sample_args *a) { return (void)a, -1; }
int cu_spec_accept(const struct spec_accept_args *a) { return (void)a, -1; }
const char *cu_error(int e) { return (void)e, "built without CUDA"; }
int cu_refused(int e) { return (void)e, 0; }
int32_t cu_act_type(int32_t weight_type) { return (void)weight_type, -1; }
void cu_done(void) {}
#endif
