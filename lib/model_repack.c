/* model_repack: the matrices the CPU computes, repacked once at load into the CPU backend's strip layout
 * (cpu/mm_r16.c), as llama.cpp's CPU backend repacks its weights.
 *
 * Which: every matrix a host layer or a host head multiplies through forward_matmul(s) (attention and Gated DeltaNet
 * projections, the dense FFN, the shared expert, the MTP projection, the LM head) whose type and row length the
 * CPU takes (cpu_r16_takes); and the routed experts (3-D: each expert's matrix its own strips, expert e at
 * e · cpu_r16_bytes) of the host's layers and of the layers whose experts expert offload keeps on the host, where
 * their rows are whole strips (moe.c reads them 16 rows at a time). The token table keeps the file's layout: the
 * embedding lookup reads a few rows of the file even when the head is tied to it and repacked. A tensor two slots
 * share is repacked once. The copies of the descriptors carry type | CPU_R16, so only the CPU backend ever sees them.
 * Memory: the repacked form is the file's size (Q6_K: 2 bytes more per 210-byte block); the file's pages of the
 * originals are released after the copy (gguf_drop_pages), so the resident total stays about the model's size.
 */
#include <string.h>

#include "cpu/mm_r16.h"
#include "model.h"
#include "quant.h"

/* The matrix slots of a layer that go through forward_matmul(s). */
static const struct gguf_tensor **repack_slot(struct model_layer *L, int k) {
    const struct gguf_tensor **s[] = {&L->attn_q,        &L->attn_k,         &L->attn_v,         &L->attn_out,
                                      &L->ssm_qkv,       &L->ssm_gate,       &L->ssm_beta,       &L->ssm_alpha,
                                      &L->ssm_ba,        &L->ssm_out,        &L->ffn_gate,       &L->ffn_up,
                                      &L->ffn_down,      &L->ffn_gate_shexp, &L->ffn_up_shexp,   &L->ffn_down_shexp,
                                      &L->ffn_gate_inp_shexp, &L->nextn_eh_proj, &L->nextn_shared_head_head};
    return k < (int)(sizeof s / sizeof s[0]) ? s[k] : NULL;
}

/* The routed experts' slots (moe.c's cpu_moe_ffn multiplies them). */
static const struct gguf_tensor **repack_expert_slot(struct model_layer *L, int k) {
    const struct gguf_tensor **s[] = {&L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps};
    return k < (int)(sizeof s / sizeof s[0]) ? s[k] : NULL;
}

static int repack_wanted(const struct gguf_tensor *t) {
    return t && t->ne[2] == 1 && t->ne[3] == 1 && cpu_r16_takes(t->type, t->ne[0]);
}

static int repack_expert_wanted(const struct gguf_tensor *t) {
    return t && t->ne[3] == 1 && t->ne[1] % CPU_R16_ROWS == 0 && cpu_r16_takes(t->type, t->ne[0]);
}

static int repack_on_host(const struct infer_model *m, int64_t il) { return !m->layer_gpu || m->layer_gpu[il] < 0; }
static int repack_experts_on_host(const struct infer_model *m, int64_t il) {
    return repack_on_host(m, il) || m->layers[il].exps_host;
}

/* Calls fn on every slot to repack (the head's too), with the index of its tensor in the file. */
static void repack_each(struct infer_model *m, void (*fn)(struct infer_model *m, const struct gguf_tensor **slot,
                                                          int64_t ti, void *ctx), void *ctx) {
    const struct gguf_tensor *base = m->gguf->tensors;
    const struct gguf_tensor *end = base + m->gguf->n_tensors;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        const struct gguf_tensor **s;
        for (int k = 0; repack_on_host(m, il) && (s = repack_slot(&m->layers[il], k)); k++)
            if (repack_wanted(*s) && *s >= base && *s < end) fn(m, s, *s - base, ctx);
        for (int k = 0; repack_experts_on_host(m, il) && (s = repack_expert_slot(&m->layers[il], k)); k++)
            if (repack_expert_wanted(*s) && *s >= base && *s < end) fn(m, s, *s - base, ctx);
    }
    if (!m->gpu_head && repack_wanted(m->output) && m->output >= base && m->output < base + m->gguf->n_tensors)
        fn(m, &m->output, m->output - base, ctx);
}

struct repack_plan {
    int64_t *copy;   /* (n_tensors): index of the file tensor's copy, -1 none */
    int64_t n;
    uint64_t bytes;
};

/* the strips of ne[2] matrices (experts) one after the other */
static uint64_t repack_bytes(const struct gguf_tensor *t) {
    return (uint64_t)t->ne[2] * cpu_r16_bytes(t->type, t->ne[0], t->ne[1]);
}

static uint64_t repack_size(const struct gguf_tensor *t) { return (repack_bytes(t) + 63) / 64 * 64; }

static void repack_count(struct infer_model *m, const struct gguf_tensor **slot, int64_t ti, void *ctx) {
    (void)m;
    struct repack_plan *p = ctx;
    if (p->copy[ti] >= 0) return;
    p->copy[ti] = p->n++;
    p->bytes += repack_size(*slot);
}

static void repack_point(struct infer_model *m, const struct gguf_tensor **slot, int64_t ti, void *ctx) {
    const struct repack_plan *p = ctx;
    *slot = &m->repacked_tensors[p->copy[ti]];
}

infer_status model_repack(struct infer_model *m) {
    if (m->repacked || m->tp_n > 0) return INFER_OK;
    const struct gguf_file *f = m->gguf;
    struct repack_plan p = {.copy = xmalloc(sizeof(int64_t) * (size_t)(f->n_tensors > 0 ? f->n_tensors : 1))};
    if (!p.copy) return INFER_OOM("the repacking plan");
    for (int64_t i = 0; i < f->n_tensors; i++) p.copy[i] = -1;
    repack_each(m, repack_count, &p);
    if (p.n == 0) {
        xfree(p.copy);
        return INFER_OK;
    }
    char *raw = xmalloc(p.bytes + 64);
    struct gguf_tensor *copies = xcalloc((size_t)p.n, sizeof *copies);
    if (!raw || !copies) {
        xfree(raw);
        xfree(copies);
        xfree(p.copy);
        return infer_fail(INFER_E_OOM, "out of memory repacking %.1f MiB of weights for the CPU (no_repack, "
                          "llm-run --no-repack, computes them as stored)", (double)p.bytes / 1048576.0);
    }
    char *buf = raw + (64 - (uintptr_t)raw % 64);
    xhuge_hint(raw, p.bytes + 64);
    uint64_t at = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if (p.copy[i] < 0) continue;
        const struct gguf_tensor *t = &f->tensors[i];
        struct gguf_tensor *c = &copies[p.copy[i]];
        *c = *t;
        c->type = t->type | CPU_R16;
        c->data = buf + at;
        c->nbytes = repack_bytes(t);
        const size_t per_src = (size_t)t->ne[1] * quant_row_bytes(t->type, t->ne[0]);
        const size_t per_dst = cpu_r16_bytes(t->type, t->ne[0], t->ne[1]);
        for (int64_t e = 0; e < t->ne[2]; e++)
            cpu_r16_pack(t->type, (const char *)t->data + (size_t)e * per_src, t->ne[0], t->ne[1],
                         buf + at + (size_t)e * per_dst);
        gguf_drop_pages(f, t); /* at once: the resident peak stays near the model's size plus one tensor */
        at += repack_size(t);
    }
    m->repacked = raw;
    m->repacked_tensors = copies;
    m->n_repacked = p.n;
    m->repacked_bytes = p.bytes;
    repack_each(m, repack_point, &p);
    xfree(p.copy);
    return INFER_OK;
}

void model_repack_free(struct infer_model *m) {
    xfree(m->repacked);
    xfree(m->repacked_tensors);
    m->repacked = NULL;
    m->repacked_tensors = NULL;
    m->n_repacked = 0;
    m->repacked_bytes = 0;
}
