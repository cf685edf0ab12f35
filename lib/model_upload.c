/* model_upload: the weights of a model in a device's memory (infer_model_params.n_gpu_layers).
 *
 * Every tensor is copied once, at load, into one device buffer (offsets rounded up to 256 bytes, the
 * alignment cudaMalloc itself gives), and its data pointer is switched to the copy: the forward pass
 * then reads weights through the same pointers whatever the backend. The file mapping stays for the
 * metadata. Before any allocation the weights plus a reserve for the contexts must fit in the device's
 * free memory, else INFER_E_OOM with both numbers (a model that does not fit is one clear error, not a
 * failed cudaMalloc halfway through). Progress goes from lo to hi by bytes copied.
 */
#include <inttypes.h>

#include "model.h"

#define MODEL_UPLOAD_ALIGN 256
#define MODEL_UPLOAD_RESERVE (UINT64_C(256) << 20) /* kept free for the contexts' caches and scratch */

static uint64_t model_upload_round(uint64_t n) { return (n + MODEL_UPLOAD_ALIGN - 1) & ~(uint64_t)(MODEL_UPLOAD_ALIGN - 1); }

uint64_t model_weight_bytes(const struct infer_model *m) {
    uint64_t total = 0;
    for (int64_t i = 0; i < m->gguf->n_tensors; i++) total += model_upload_round(m->gguf->tensors[i].nbytes);
    return total;
}

infer_status model_upload(struct infer_model *m, struct infer_backend *be, int device, const infer_model_params *p,
                          float lo, float hi) {
    infer_status st = INFER_OK;
    struct gguf_file *f = m->gguf;
    const uint64_t total = model_weight_bytes(m);
    size_t free_b = 0, total_b = 0;
    TRY(be->ops->mem_info(be, &free_b, &total_b));
    if (total + MODEL_UPLOAD_RESERVE > (uint64_t)free_b)
        return infer_fail(INFER_E_OOM, "%s: the weights need %.1f MiB of device memory (plus %" PRIu64 " MiB for the "
                          "contexts) but CUDA device %d has %.1f MiB free of %.1f MiB; use a smaller quantisation or "
                          "-ngl 0 (CPU)", f->path, (double)total / 1048576.0, MODEL_UPLOAD_RESERVE >> 20, device,
                          (double)free_b / 1048576.0, (double)total_b / 1048576.0);
    TRY(be->ops->alloc(be, (size_t)total, &m->dev_weights));
    uint64_t off = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        char *dst = (char *)m->dev_weights + off;
        TRY(be->ops->upload(be, dst, t->data, (size_t)t->nbytes));
        t->data = dst;
        off += model_upload_round(t->nbytes);
        if (p->progress && p->progress(lo + (hi - lo) * (float)((double)off / (double)total), p->progress_user)) {
            st = infer_fail(INFER_E_CANCELLED, "model load cancelled by the progress callback while uploading "
                            "the weights");
            goto fail;
        }
    }
    TRY(be->ops->sync(be));
    m->be = be;
    m->device = device;
    return INFER_OK;
fail:
    /* tensors already switched point into the buffer freed here: the model is freed by the caller */
    be->ops->free(be, m->dev_weights);
    m->dev_weights = NULL;
    return st;
}
