/* model_upload: the weights of a model in devices' memory (infer_model_params.n_gpu_layers, split_mode).
 *
 * Where each part goes is the plan's (plan.c: homes of the layers, the token table, the head and the routed
 * experts; model_homes_one is llama.cpp's one-device rule for callers without a plan). For each device the
 * tensors placed there are copied once, at load, into one device buffer (offsets rounded up to 256 bytes, the
 * alignment cudaMalloc itself gives) and described by copies of their descriptors (m->gpu[k].tensors, data
 * pointing into the buffer); the layers on the device are rebound to those copies. The parsed file is never
 * rewritten: its descriptors keep pointing into the mapping, which is what the layers left on the CPU read,
 * and so do the routed experts that expert offload keeps on the host. Before any allocation each device's
 * placed weights plus a reserve for the contexts must fit in its free memory, else INFER_E_OOM with both
 * numbers (a model that does not fit is one clear error at load, not a failed cudaMalloc halfway through).
 */
#include <inttypes.h>
#include <string.h>

#include "model.h"

#define MODEL_UPLOAD_ALIGN 256

static uint64_t model_upload_round(uint64_t n) { return (n + MODEL_UPLOAD_ALIGN - 1) & ~(uint64_t)(MODEL_UPLOAD_ALIGN - 1); }

void model_placement(const struct arch_hparams *hp, int32_t n, int32_t *layer0, int *head) {
    const int64_t n_layer = hp->n_layer;
    const int all = n < 0 || n > n_layer;
    *layer0 = (int32_t)(all ? 0 : n_layer - n);
    *head = all;
}

void model_homes_one(const struct infer_model *m, int32_t n, int device, int32_t *layer, struct model_homes *h) {
    int32_t layer0;
    int head;
    model_placement(&m->hp, n, &layer0, &head);
    for (int64_t il = 0; il < m->hp.n_layer_all; il++)
        layer[il] = (il < m->hp.n_layer ? il >= layer0 : head) ? device : -1;
    *h = (struct model_homes){.layer = layer, .exps_host = NULL, .embd = head ? device : -1, .head = head ? device : -1};
}

int model_is_expert_tensor(const char *name) {
    return strstr(name, ".ffn_gate_exps.") || strstr(name, ".ffn_up_exps.") || strstr(name, ".ffn_down_exps.");
}

/* The file index of t, a descriptor of the file or of a device's copies (the layers point at those after a load). */
static int64_t model_tensor_index(const struct infer_model *m, const struct gguf_tensor *t) {
    const uintptr_t p = (uintptr_t)t, n = (uintptr_t)m->gguf->n_tensors * sizeof *t;
    for (int32_t k = 0; k < m->n_gpu; k++) {
        const uintptr_t d = (uintptr_t)m->gpu[k].tensors;
        if (p >= d && p < d + n) return (int64_t)((p - d) / sizeof *t);
    }
    return t - m->gguf->tensors;
}

static void model_mark(const struct infer_model *m, const struct gguf_tensor *t, uint8_t *placed) {
    if (t) placed[model_tensor_index(m, t)] = 1;
}

/* Marks in placed (one flag per file tensor) the tensors h puts on CUDA device `device`. */
static void model_upload_mark(const struct infer_model *m, const struct model_homes *h, int device, uint8_t *placed) {
    memset(placed, 0, (size_t)m->gguf->n_tensors);
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        if (h->layer[il] != device) continue;
        const struct model_layer *L = &m->layers[il];
        for (int r = 0; r < ARCH_T_COUNT; r++) {
            const struct gguf_tensor **slot = model_layer_slot((struct model_layer *)L, (enum arch_role)r);
            if (slot && *slot && !(h->exps_host && h->exps_host[il] && model_is_expert_tensor((*slot)->name)))
                model_mark(m, *slot, placed);
        }
    }
    if (h->embd == device || (h->embd_head && h->head == device)) model_mark(m, m->token_embd, placed);
    if (h->head == device) {
        model_mark(m, m->output_norm, placed);
        model_mark(m, m->output, placed);
        model_mark(m, m->rope_freqs, placed);
    }
}

uint64_t model_weight_bytes(const struct infer_model *m, const struct model_homes *h, int device) {
    const struct gguf_file *f = m->gguf;
    uint8_t *placed = xcalloc((size_t)f->n_tensors + 1, 1);
    if (!placed) return UINT64_MAX; /* no fit check passes */
    model_upload_mark(m, h, device, placed);
    uint64_t total = 0;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (placed[i]) total += model_upload_round(f->tensors[i].nbytes);
    xfree(placed);
    return total;
}

/* The devices h uses, in the order of the pass (the token table's, then each layer's, then the head's). */
static int32_t model_upload_devices(const struct infer_model *m, const struct model_homes *h, int *dev) {
    int32_t n = 0;
    const int64_t n_all = m->hp.n_layer_all;
    for (int64_t i = -1; i <= n_all; i++) {
        const int32_t d = i < 0 ? h->embd : i == n_all ? h->head : h->layer[i];
        int seen = d < 0;
        for (int32_t k = 0; k < n; k++) seen |= dev[k] == d;
        if (!seen && n < INFER_MAX_DEVICES) dev[n++] = d;
    }
    return n;
}

/* Points *t at device k's copy of it when k has one. */
static void model_upload_rebind(struct infer_model *m, int32_t k, const struct gguf_tensor **t) {
    if (!*t || k < 0) return;
    const int64_t i = model_tensor_index(m, *t);
    if (m->gpu[k].tensors[i].data) *t = &m->gpu[k].tensors[i];
}

void model_gpu_free(struct model_gpu *g) {
    if (g->be && g->weights) g->be->ops->free(g->be, g->weights);
    backend_free(g->be);
    xfree(g->tensors);
    memset(g, 0, sizeof *g);
}

/* The fit check of device `device` on its backend be: INFER_E_OOM with both numbers when it does not fit. */
static infer_status model_upload_fits(const struct infer_model *m, const struct model_homes *h, int device,
                                      struct infer_backend *be, uint64_t need) {
    size_t free_b = 0, total_b = 0;
    infer_status st = be->ops->mem_info(be, &free_b, &total_b);
    if (st != INFER_OK) return st;
    if (need + MODEL_UPLOAD_RESERVE <= (uint64_t)free_b) return INFER_OK;
    int32_t first = -1, last = -1;
    for (int64_t il = 0; il < m->hp.n_layer; il++)
        if (h->layer[il] == device) {
            if (first < 0) first = (int32_t)il;
            last = (int32_t)il;
        }
    int experts_off = 0;
    for (int64_t il = 0; h->exps_host && il < m->hp.n_layer_all; il++)
        experts_off |= h->layer[il] == device && h->exps_host[il] && m->layers[il].ffn_gate_exps;
    const int64_t n_layer = m->hp.n_layer;
    const int head = h->head == device;
    char what[128];
    if (first < 0)
        snprintf(what, sizeof what, "the head");
    else if (first == 0 && last == n_layer - 1 && head)
        snprintf(what, sizeof what, "every layer and the head");
    else if (last == n_layer - 1 && !head)
        snprintf(what, sizeof what, "the last %" PRId64 " of %" PRId64 " layers", n_layer - first, n_layer);
    else
        snprintf(what, sizeof what, "layers %d-%d of %" PRId64 "%s", first, last, n_layer, head ? " and the head" : "");
    return infer_fail(INFER_E_OOM, "%s: the weights on CUDA device %d (%s%s) need %.1f MiB of device memory (plus %" PRIu64
                      " MiB for the contexts) but it has %.1f MiB free of %.1f MiB; put fewer layers on the GPU (-ngl), "
                      "keep routed experts on the CPU (--n-cpu-moe), use a smaller quantisation or -ngl 0 (CPU)",
                      m->gguf->path, device, what, experts_off ? "; the experts kept on the host not counted" : "",
                      (double)need / 1048576.0, MODEL_UPLOAD_RESERVE >> 20, (double)free_b / 1048576.0,
                      (double)total_b / 1048576.0);
}

infer_status model_upload(struct infer_model *m, const struct model_homes *h, model_gpu_fn make,
                          const infer_model_params *p, float lo, float hi) {
    infer_status st = INFER_OK;
    struct gguf_file *f = m->gguf;
    struct model_gpu gpu[INFER_MAX_DEVICES];
    int dev[INFER_MAX_DEVICES];
    uint64_t need[INFER_MAX_DEVICES], total = 0, done = 0;
    uint8_t *placed = xcalloc((size_t)f->n_tensors + 1, 1);
    int32_t *layer_gpu = xcalloc((size_t)m->hp.n_layer_all, sizeof *layer_gpu);
    memset(gpu, 0, sizeof gpu);
    const int32_t n_dev = model_upload_devices(m, h, dev);
    if (!placed || !layer_gpu) {
        st = INFER_OOM("the device tensor tables");
        goto fail;
    }
    /* every device's backend and fit check before any allocation */
    for (int32_t k = 0; k < n_dev; k++) {
        need[k] = model_weight_bytes(m, h, dev[k]);
        total += need[k];
        gpu[k].device = dev[k];
        TRY(make ? make(dev[k], &gpu[k].be) : backend_cuda_create(dev[k], &gpu[k].be));
        TRY(model_upload_fits(m, h, dev[k], gpu[k].be, need[k]));
    }
    for (int32_t k = 0; k < n_dev; k++) {
        struct infer_backend *be = gpu[k].be;
        gpu[k].tensors = xcalloc((size_t)f->n_tensors + 1, sizeof *gpu[k].tensors);
        if (!gpu[k].tensors) {
            st = INFER_OOM("the device tensor table");
            goto fail;
        }
        model_upload_mark(m, h, dev[k], placed);
        TRY(be->ops->alloc(be, (size_t)need[k], &gpu[k].weights));
        uint64_t off = 0;
        for (int64_t i = 0; i < f->n_tensors; i++) {
            if (!placed[i]) continue;
            const struct gguf_tensor *t = &f->tensors[i];
            char *dst = (char *)gpu[k].weights + off;
            TRY(be->ops->upload(be, dst, t->data, (size_t)t->nbytes));
            gpu[k].tensors[i] = *t;
            gpu[k].tensors[i].data = dst;
            off += model_upload_round(t->nbytes);
            done += model_upload_round(t->nbytes);
            if (p->progress && p->progress(lo + (hi - lo) * (float)((double)done / (double)total), p->progress_user)) {
                st = infer_fail(INFER_E_CANCELLED, "model load cancelled by the progress callback while uploading "
                                "the weights");
                goto fail;
            }
        }
        TRY(be->ops->sync(be));
    }
    /* only now, with every copy in place, does the model point at them */
    int32_t k_embd = -1, k_head = -1;
    for (int32_t k = 0; k < n_dev; k++) {
        m->gpu[k] = gpu[k];
        if (dev[k] == h->embd) k_embd = k;
        if (dev[k] == h->head) k_head = k;
    }
    m->n_gpu = n_dev;
    m->gpu_layer0 = (int32_t)m->hp.n_layer;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++) {
        int32_t k = -1;
        for (int32_t j = 0; j < n_dev; j++)
            if (dev[j] == h->layer[il]) k = j;
        layer_gpu[il] = k;
        if (k >= 0 && il < m->gpu_layer0) m->gpu_layer0 = (int32_t)il;
        for (int r = 0; r < ARCH_T_COUNT; r++) {
            const struct gguf_tensor **slot = model_layer_slot(&m->layers[il], (enum arch_role)r);
            if (slot) model_upload_rebind(m, k, slot);
        }
        m->layers[il].exps_host = k >= 0 && h->exps_host && h->exps_host[il] && m->layers[il].ffn_gate_exps;
    }
    const struct gguf_tensor *output = m->output; /* tied: token_embd, rebound below to the head's copy */
    const struct gguf_tensor *mtp_embd = m->token_embd; /* the head's copy, where it has one of its own */
    if (h->embd_head && k_head >= 0 && k_head != k_embd) {
        model_upload_rebind(m, k_head, &mtp_embd);
        m->mtp_embd = mtp_embd != m->token_embd ? mtp_embd : NULL;
    }
    model_upload_rebind(m, k_embd, &m->token_embd);
    model_upload_rebind(m, k_head, &output);
    model_upload_rebind(m, k_head, &m->output_norm);
    model_upload_rebind(m, k_head, &m->rope_freqs);
    m->output = output;
    m->layer_gpu = layer_gpu;
    m->embd_gpu = k_embd, m->head_gpu = k_head;
    m->gpu_head = k_head >= 0;
    xfree(placed);
    return INFER_OK;
fail:
    for (int32_t k = 0; k < n_dev; k++) model_gpu_free(&gpu[k]);
    xfree(placed);
    xfree(layer_gpu);
    return st;
}

void model_upload_free(struct infer_model *m) {
    for (int32_t k = 0; k < m->n_gpu; k++) model_gpu_free(&m->gpu[k]);
    m->n_gpu = 0;
    m->mtp_embd = NULL;
    for (int32_t k = 0; k < m->tp_n; k++) {
        xfree(m->tp_view[k]->layers);
        xfree(m->tp_view[k]);
        m->tp_view[k] = NULL;
    }
    m->tp_n = 0;
    xfree(m->layer_gpu);
    m->layer_gpu = NULL;
}
