/* model_upload: the weights of a model in a device's memory (infer_model_params.n_gpu_layers).
 *
 * The placement is llama.cpp's (model_placement): the last n_gpu_layers trunk layers go to the device,
 * and with n_gpu_layers > n_layer the head too (then every tensor goes, the token table included, and the
 * whole pass runs there). The tensors placed there are copied once, at load, into one device buffer
 * (offsets rounded up to 256 bytes, the alignment cudaMalloc itself gives) and described by copies of
 * their descriptors (m->dev_tensors, data pointing into the buffer); the layers on the device are rebound
 * to those copies. The parsed file is never rewritten: its descriptors keep pointing into the mapping,
 * which is what the layers left on the CPU read. Before any allocation the placed weights plus a reserve
 * for the contexts must fit in the device's free memory, else INFER_E_OOM with both numbers (a model that
 * does not fit is one clear error at load, not a failed cudaMalloc halfway through). Progress goes from
 * lo to hi by bytes copied.
 * Expert offload (exps_host): the routed experts of flagged layers are not copied; those layers keep the
 * file's descriptors for them (host memory, which the CPU backend's MoE op reads) and are marked exps_host.
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

int model_is_expert_tensor(const char *name) {
    return strstr(name, ".ffn_gate_exps.") || strstr(name, ".ffn_up_exps.") || strstr(name, ".ffn_down_exps.");
}

/* The file index of t, a descriptor of the file or its device copy (after an upload the layers point at those). */
static int64_t model_tensor_index(const struct infer_model *m, const struct gguf_tensor *t) {
    const uintptr_t p = (uintptr_t)t, d = (uintptr_t)m->dev_tensors;
    const uintptr_t n = (uintptr_t)m->gguf->n_tensors * sizeof *t;
    if (m->dev_tensors && p >= d && p < d + n) return (int64_t)((p - d) / sizeof *t);
    return t - m->gguf->tensors;
}

/* Marks in placed (one flag per file tensor) the tensors of placement (layer0, head, exps_host). */
static void model_upload_mark(const struct infer_model *m, int32_t layer0, int head, const uint8_t *exps_host,
                              uint8_t *placed) {
    const struct gguf_file *f = m->gguf;
    for (int64_t i = 0; i < f->n_tensors; i++) placed[i] = (uint8_t)head;
    for (int64_t il = layer0; il < m->hp.n_layer; il++)
        for (int r = 0; r < ARCH_T_COUNT; r++) {
            const struct gguf_tensor **slot = model_layer_slot(&m->layers[il], (enum arch_role)r);
            if (slot && *slot) placed[model_tensor_index(m, *slot)] = 1;
        }
    for (int64_t il = 0; exps_host && il < m->hp.n_layer_all; il++) {
        const struct model_layer *L = &m->layers[il];
        if (!exps_host[il] || !L->ffn_gate_exps) continue;
        placed[model_tensor_index(m, L->ffn_gate_exps)] = 0;
        placed[model_tensor_index(m, L->ffn_up_exps)] = 0;
        placed[model_tensor_index(m, L->ffn_down_exps)] = 0;
    }
}

uint64_t model_weight_bytes(const struct infer_model *m, int32_t layer0, int head, const uint8_t *exps_host) {
    const struct gguf_file *f = m->gguf;
    uint8_t *placed = xcalloc((size_t)f->n_tensors + 1, 1);
    if (!placed) return UINT64_MAX; /* no fit check passes */
    model_upload_mark(m, layer0, head, exps_host, placed);
    uint64_t total = 0;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (placed[i]) total += model_upload_round(f->tensors[i].nbytes);
    xfree(placed);
    return total;
}

/* Points t (a tensor reference of the model) at its device copy when it has one. */
static void model_upload_rebind(const struct infer_model *m, const struct gguf_tensor **t) {
    if (*t && m->dev_tensors[*t - m->gguf->tensors].data) *t = &m->dev_tensors[*t - m->gguf->tensors];
}

infer_status model_upload(struct infer_model *m, struct infer_backend *be, int device, int32_t layer0, int head,
                          const uint8_t *exps_host, const infer_model_params *p, float lo, float hi) {
    infer_status st = INFER_OK;
    struct gguf_file *f = m->gguf;
    const int64_t n_layer = m->hp.n_layer;
    uint8_t *placed = NULL;
    struct gguf_tensor *copies = NULL;
    void *buf = NULL;
    const uint64_t total = model_weight_bytes(m, layer0, head, exps_host);
    size_t free_b = 0, total_b = 0;
    TRY(be->ops->mem_info(be, &free_b, &total_b));
    if (total + MODEL_UPLOAD_RESERVE > (uint64_t)free_b) {
        char what[96];
        if (head) snprintf(what, sizeof what, "every layer and the head%s", exps_host ? " but the host's experts" : "");
        else snprintf(what, sizeof what, "the last %" PRId64 " of %" PRId64 " layers", n_layer - layer0, n_layer);
        return infer_fail(INFER_E_OOM, "%s: the weights on the GPU (%s) need %.1f MiB of device memory (plus %" PRIu64
                          " MiB for the contexts) but CUDA device %d has %.1f MiB free of %.1f MiB; put fewer layers "
                          "on the GPU (-ngl), use a smaller quantisation or -ngl 0 (CPU)", f->path, what,
                          (double)total / 1048576.0, MODEL_UPLOAD_RESERVE >> 20, device, (double)free_b / 1048576.0,
                          (double)total_b / 1048576.0);
    }
    placed = xcalloc((size_t)f->n_tensors + 1, 1);
    copies = xcalloc((size_t)f->n_tensors + 1, sizeof *copies);
    if (!placed || !copies) {
        st = INFER_OOM("the device tensor table");
        goto fail;
    }
    model_upload_mark(m, layer0, head, exps_host, placed);
    TRY(be->ops->alloc(be, (size_t)total, &buf));
    uint64_t off = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if (!placed[i]) continue;
        const struct gguf_tensor *t = &f->tensors[i];
        char *dst = (char *)buf + off;
        TRY(be->ops->upload(be, dst, t->data, (size_t)t->nbytes));
        copies[i] = *t;
        copies[i].data = dst;
        off += model_upload_round(t->nbytes);
        if (p->progress && p->progress(lo + (hi - lo) * (float)((double)off / (double)total), p->progress_user)) {
            st = infer_fail(INFER_E_CANCELLED, "model load cancelled by the progress callback while uploading "
                            "the weights");
            goto fail;
        }
    }
    TRY(be->ops->sync(be));
    /* only now, with every copy in place, does the model point at them */
    m->dev_tensors = copies, m->dev_weights = buf;
    for (int64_t il = 0; il < m->hp.n_layer_all; il++)
        for (int r = 0; r < ARCH_T_COUNT; r++) {
            const struct gguf_tensor **slot = model_layer_slot(&m->layers[il], (enum arch_role)r);
            if (slot) model_upload_rebind(m, slot);
        }
    model_upload_rebind(m, &m->token_embd);
    model_upload_rebind(m, &m->output_norm);
    model_upload_rebind(m, &m->output);
    model_upload_rebind(m, &m->rope_freqs);
    for (int64_t il = 0; exps_host && il < m->hp.n_layer_all; il++)
        m->layers[il].exps_host = exps_host[il] && m->layers[il].ffn_gate_exps && (il < n_layer ? il >= layer0 : head);
    m->be = be;
    m->device = device;
    m->gpu_layer0 = layer0, m->gpu_head = head;
    xfree(placed);
    return INFER_OK;
fail:
    be->ops->free(be, buf);
    xfree(placed);
    xfree(copies);
    return st;
}
