/* model_tp: a model's weights sharded over the devices of a tensor-parallel group (tp.h), and the ranks' views.
 *
 * Each rank's shards go into one buffer of its device (offsets rounded up to 256 bytes, as model_upload) and are
 * described by descriptors in gpu[r].tensors (indexed as the file's) with the shards' shapes. A whole tensor (a
 * replicated norm or router) is uploaded from the mapping; a cut one is gathered into host memory first. A view is
 * a shallow copy of the model whose hyperparameters and layers are the rank's: the forward pass runs it with the
 * same layer code as a one-device model, and its smaller heads and FFNs size its rank's cells and scratch.
 */
#include <inttypes.h>
#include <string.h>

#include "model.h"
#include "quant.h"
#include "tp.h"

#define MODEL_TP_ALIGN 256

static uint64_t model_tp_round(uint64_t n) { return (n + MODEL_TP_ALIGN - 1) & ~(uint64_t)(MODEL_TP_ALIGN - 1); }

/* sl[i] (one per file tensor) = what rank r holds of tensor i: the layers' tensors (the MTP blocks' cut as the
 * trunk's attention and FFN, their own norms and eh_proj whole, their head's vocabulary rows), the final norm and
 * rope_freqs, its vocabulary rows of the head and, on rank 0, the token table (whole: with a tied head, rank 0's rows
 * of the head are rows of it). */
static void model_tp_slices(const struct infer_model *m, int32_t r, const struct tp_rank *rk, struct tp_slice *sl) {
    const struct gguf_tensor *base = m->gguf->tensors;
    memset(sl, 0, (size_t)m->gguf->n_tensors * sizeof *sl);
    for (int64_t il = 0; il < m->hp.n_layer_all; il++)
        for (int role = 0; role < ARCH_T_COUNT; role++) {
            const struct gguf_tensor **slot = model_layer_slot(&m->layers[il], (enum arch_role)role);
            if (slot && *slot) tp_slice_of(m, il, (enum arch_role)role, *slot, r, rk, &sl[*slot - base]);
        }
    const struct gguf_tensor *everyone[] = {m->output_norm, m->rope_freqs};
    for (size_t g = 0; g < sizeof everyone / sizeof *everyone; g++)
        if (everyone[g]) tp_slice_of(m, -1, ARCH_T_OUTPUT_NORM, everyone[g], r, rk, &sl[everyone[g] - base]);
    tp_slice_of(m, -1, ARCH_T_OUTPUT, m->output, r, rk, &sl[m->output - base]);
    if (r == 0) tp_slice_of(m, -1, ARCH_T_TOKEN_EMBD, m->token_embd, r, rk, &sl[m->token_embd - base]);
}

uint64_t model_tp_rank_bytes(const struct infer_model *m, int32_t r, const struct tp_rank *rk, struct tp_slice *sl) {
    const struct gguf_file *f = m->gguf;
    uint64_t need = 0;
    model_tp_slices(m, r, rk, sl);
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (sl[i].copy) need += model_tp_round(tp_slice_tensor(&f->tensors[i], &sl[i]).nbytes);
    return need;
}

/* Rank r's shards sl (need bytes) into gpu (its backend made): the fit check, one buffer, the copies. */
static infer_status model_tp_upload_rank(const struct infer_model *m, int32_t r, const struct tp_slice *sl,
                                         uint64_t need, struct model_gpu *gpu) {
    infer_status st = INFER_OK;
    const struct gguf_file *f = m->gguf;
    struct infer_backend *be = gpu->be;
    size_t free_b = 0, total_b = 0;
    TRY(be->ops->mem_info(be, &free_b, &total_b));
    if (need + MODEL_UPLOAD_RESERVE > (uint64_t)free_b)
        return infer_fail(INFER_E_OOM, "%s: split_mode tensor: rank %d's shards on CUDA device %d need %.1f MiB of "
                          "device memory (plus %" PRIu64 " MiB for the contexts) but it has %.1f MiB free of %.1f MiB; "
                          "use more devices, a smaller quantisation or -sm layer with expert offload", f->path, r,
                          gpu->device, (double)need / 1048576.0, MODEL_UPLOAD_RESERVE >> 20, (double)free_b / 1048576.0,
                          (double)total_b / 1048576.0);
    gpu->tensors = xcalloc((size_t)f->n_tensors + 1, sizeof *gpu->tensors);
    if (!gpu->tensors) return INFER_OOM("the device tensor table");
    TRY(be->ops->alloc(be, (size_t)need, &gpu->weights));
    uint64_t off = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if (!sl[i].copy) continue;
        const struct gguf_tensor *t = &f->tensors[i];
        struct gguf_tensor d = tp_slice_tensor(t, &sl[i]);
        d.data = (char *)gpu->weights + off;
        if (d.nbytes == t->nbytes) {
            TRY(be->ops->upload(be, (void *)d.data, t->data, (size_t)t->nbytes));
        } else { /* a cut tensor: gathered on the host (upload stages pageable memory before it returns) */
            void *tmp = xmalloc((size_t)d.nbytes);
            if (!tmp) return INFER_OOM("a shard's host copy");
            tp_slice_copy(t, &sl[i], tmp);
            st = be->ops->upload(be, (void *)d.data, tmp, (size_t)d.nbytes);
            xfree(tmp);
            if (st != INFER_OK) goto fail;
        }
        gpu->tensors[i] = d;
        off += model_tp_round(d.nbytes);
    }
    TRY(be->ops->sync(be));
fail:
    return st;
}

/* Rank r's view: m with the rank's hyperparameters, and its layers, final norm, rope_freqs, rows of the head
 * and (rank 0) token table pointing at its shards. A tied head's rows on rank 0 are a descriptor of its own, in the
 * table's spare last slot. */
static infer_status model_tp_view(const struct infer_model *m, int32_t r, const struct tp_rank *rk,
                                  const struct model_gpu *gpu, struct infer_model **out) {
    const struct gguf_tensor *base = m->gguf->tensors;
    struct infer_model *v = xcalloc(1, sizeof *v);
    struct model_layer *layers = xcalloc((size_t)m->hp.n_layer_all, sizeof *layers);
    if (!v || !layers) {
        xfree(v);
        xfree(layers);
        return INFER_OOM("a rank's view of the model");
    }
    *v = *m;
    memset(v->gpu, 0, sizeof v->gpu);
    memset(v->tp_view, 0, sizeof v->tp_view);
    v->n_gpu = 0, v->tp_n = 0, v->layer_gpu = NULL;
    v->embd_gpu = v->head_gpu = -1;
    tp_hparams(m, rk, &v->hp);
    memcpy(layers, m->layers, (size_t)m->hp.n_layer_all * sizeof *layers);
    for (int64_t il = 0; il < m->hp.n_layer_all; il++)
        for (int role = 0; role < ARCH_T_COUNT; role++) {
            const struct gguf_tensor **slot = model_layer_slot(&layers[il], (enum arch_role)role);
            if (slot && *slot) *slot = &gpu->tensors[*slot - base];
        }
    v->output_norm = &gpu->tensors[m->output_norm - base];
    if (m->rope_freqs) v->rope_freqs = &gpu->tensors[m->rope_freqs - base];
    v->output = &gpu->tensors[m->output - base];
    if (r == 0) v->token_embd = &gpu->tensors[m->token_embd - base];
    if (r == 0 && m->tied) { /* rows v0..v1 of the whole table rank 0 holds */
        struct tp_slice rows = {.copy = 1, .n_rows = 1, .rows = {{rk->v0, rk->v1}}};
        struct gguf_tensor *head = &gpu->tensors[m->gguf->n_tensors];
        *head = tp_slice_tensor(m->output, &rows);
        head->data = (const char *)v->token_embd->data + (size_t)rk->v0 * quant_row_bytes(head->type, head->ne[0]);
        v->output = head;
    }
    v->layers = layers;
    *out = v;
    return INFER_OK;
}

infer_status model_upload_tp(struct infer_model *m, const int *devs, int32_t n, model_gpu_fn make,
                             const infer_model_params *p, float lo, float hi) {
    return model_upload_tp_ranks(m, devs, n, n, 0, NULL, make, p, lo, hi);
}

infer_status model_upload_tp_ranks(struct infer_model *m, const int *devs, int32_t n, int32_t world, int32_t rank0,
                                   const uint8_t *id, model_gpu_fn make, const infer_model_params *p, float lo,
                                   float hi) {
    infer_status st = INFER_OK;
    struct tp_rank rk[INFER_MAX_DEVICES];
    struct infer_backend *bes[INFER_MAX_DEVICES];
    struct model_gpu gpu[INFER_MAX_DEVICES];
    struct infer_model *views[INFER_MAX_DEVICES] = {NULL};
    struct tp_slice *sl = NULL;
    memset(gpu, 0, sizeof gpu);
    if (m->n_gpu || m->tp_n) return infer_fail(INFER_E_ARG, "model_upload_tp: the model is already on devices");
    if (n < 1 || rank0 < 0 || rank0 + n > world)
        return infer_fail(INFER_E_ARG, "split_mode tensor: this process's %d device%s as ranks %d.. of %d", n,
                          n == 1 ? "" : "s", rank0, world);
    TRY(tp_ranks(m, world, rk));
    sl = xcalloc((size_t)m->gguf->n_tensors + 1, sizeof *sl);
    if (!sl) return INFER_OOM("the shards' table");
    for (int32_t r = 0; r < n; r++) { /* every rank's backend before any upload */
        gpu[r].device = devs[r];
        TRY(make ? make(devs[r], &gpu[r].be) : backend_cuda_create(devs[r], &gpu[r].be));
    }
    for (int32_t r = 0; r < n; r++) {
        const int32_t g = rank0 + r; /* the rank in the group */
        const uint64_t need = model_tp_rank_bytes(m, g, &rk[g], sl);
        TRY(model_tp_upload_rank(m, g, sl, need, &gpu[r]));
        TRY(model_tp_view(m, g, &rk[g], &gpu[r], &views[r]));
        bes[r] = gpu[r].be;
        if (p->progress && p->progress(lo + (hi - lo) * (float)(r + 1) / (float)n, p->progress_user)) {
            st = infer_fail(INFER_E_CANCELLED, "model load cancelled by the progress callback while uploading the "
                            "shards");
            goto fail;
        }
    }
    xfree(sl);
    sl = NULL;
    /* the group's communicator, once per model: every context of it borrows the ranks' (an id serves one join) */
    TRY(backend_cuda_tp_join(bes, n, world, rank0, id));
    for (int32_t r = 0; r < n; r++) {
        m->gpu[r] = gpu[r];
        m->tp_view[r] = views[r];
    }
    m->n_gpu = n;
    m->tp_n = n;
    m->tp_world = world;
    m->tp_rank0 = rank0;
    return INFER_OK;
fail:
    xfree(sl);
    for (int32_t r = 0; r < n; r++) {
        if (views[r]) xfree(views[r]->layers);
        xfree(views[r]);
        model_gpu_free(&gpu[r]);
    }
    return st;
}
