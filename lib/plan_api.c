/* plan_api: the public placement-plan API (include/infer.h "placement plans") over plan.c.
 *
 * infer_model_plan opens the file as infer_model_load does (gguf_open maps it; model_bind reads the
 * metadata and tensor infos and checks every shape) but reads no tensor data and uploads nothing, so a
 * plan for a 20 GB model takes the time of parsing its header. Devices not stated are measured: their free
 * memory, and what one CUDA backend takes on each (one made and freed there) for the overhead (plan.h).
 */
#include <string.h>

#include "device.h"
#include "plan.h"

struct infer_plan {
    struct plan *p; /* owned */
};

infer_status plan_measure_devices(struct plan_devices *dev, int backends) {
    infer_status st = INFER_OK;
    int n = device_count(NULL);
    memset(dev, 0, sizeof *dev);
    dev->measured = 1;
    if (n > PLAN_MAX_DEVICES) n = PLAN_MAX_DEVICES;
    for (int32_t i = 0; i < n; i++) {
        if (backends)
            TRY(device_backend_bytes(i, &dev->free[i], &dev->backend[i]));
        else
            TRY(infer_device_memory(i, NULL, &dev->free[i]));
    }
    dev->n = n;
fail:
    return st;
}

INFER_API infer_plan_params infer_plan_params_default(void) {
    infer_plan_params p = {.n_devices = 0};
    return p;
}

INFER_API infer_status infer_model_plan(const char *path, const infer_model_params *mp, const infer_ctx_params *cp,
                                        const infer_plan_params *pp, infer_plan **out) {
    infer_status st = INFER_OK;
    struct gguf_file *f = NULL;
    struct infer_model *m = NULL;
    struct plan *p = NULL;
    struct plan_devices dev;
    memset(&dev, 0, sizeof dev);
    if (!out) return infer_fail(INFER_E_ARG, "infer_model_plan: out is NULL");
    *out = NULL;
    if (!path) return infer_fail(INFER_E_ARG, "infer_model_plan: path is NULL");
    if (pp && (pp->n_devices < 0 || pp->n_devices > INFER_MAX_DEVICES))
        return infer_fail(INFER_E_ARG, "infer_model_plan: n_devices %d: expected 0 (measure) .. %d", pp->n_devices,
                          INFER_MAX_DEVICES);
    TRY(gguf_open(path, &f));
    st = model_bind(f, &m); /* takes f */
    if (st != INFER_OK) goto fail;
    if (pp && pp->n_devices > 0) { /* stated: the overhead is PLAN_GPU_OVERHEAD's assumption */
        dev.n = pp->n_devices;
        for (int32_t i = 0; i < dev.n; i++) dev.free[i] = pp->free_bytes[i];
    } else {
        TRY(plan_measure_devices(&dev, 1));
    }
    TRY(plan_make(m, mp, cp, &dev, &p));
    infer_plan *h = xcalloc(1, sizeof *h);
    if (!h) {
        st = INFER_OOM("plan");
        goto fail;
    }
    h->p = p;
    *out = h;
    model_free(m);
    return INFER_OK;
fail:
    plan_free(p);
    model_free(m);
    return st;
}

INFER_API void infer_plan_free(infer_plan *h) {
    if (!h) return;
    plan_free(h->p);
    xfree(h);
}

INFER_API int32_t infer_plan_text(const infer_plan *h, char *buf, int32_t cap) {
    if (!h || cap < 0 || (!buf && cap > 0)) {
        infer_fail(INFER_E_ARG, "infer_plan_text: plan %p, buf %p with cap %d", (const void *)h, (void *)buf, cap);
        return -1;
    }
    return plan_text(h->p, buf, cap);
}

INFER_API infer_plan_info infer_plan_get_info(const infer_plan *h) {
    infer_plan_info i = {.n_ctx_fit = -1};
    if (!h) return i;
    const struct plan *p = h->p;
    i = (infer_plan_info){
        .n_layer = p->n_layer,
        .n_gpu_layers = p->n_gpu_layers,
        .n_cpu_moe = p->n_cpu_moe,
        .gpu = p->gpu,
        .home_embd = p->home_embd,
        .home_head = p->home_head,
        .tp = p->tp,
        .auto_fit = p->auto_fit,
        .split = plan_is_split(p),
        .loads = 1,
        .offloads_experts = plan_offloads_experts(p),
        .fits = p->fits,
        .n_ctx = p->ctx.n_ctx,
        .n_ctx_fit = p->n_ctx_fit,
        .kv_bytes_per_token = p->kv_per_token,
    };
    return i;
}

INFER_API infer_status infer_plan_get_memory(const infer_plan *h, int32_t home, infer_plan_memory *out) {
    if (!h || !out) return infer_fail(INFER_E_ARG, "infer_plan_get_memory: plan or out is NULL");
    const struct plan *p = h->p;
    if (home != PLAN_HOST && (home < 0 || home >= p->n_dev))
        return infer_fail(INFER_E_ARG, "infer_plan_get_memory: home %d: expected -1 (host) or a device 0..%d", home,
                          p->n_dev - 1);
    const struct plan_bytes *b = home == PLAN_HOST ? &p->host : &p->dev[home];
    *out = (infer_plan_memory){
        .weights = b->weights,
        .kv = b->kv,
        .state = b->state,
        .scratch = b->scratch,
        .overhead = b->overhead,
        .total = plan_bytes_total(b),
        .free_bytes = home == PLAN_HOST ? 0 : p->dev_free[home],
    };
    return INFER_OK;
}

INFER_API int32_t infer_plan_tp_device(const infer_plan *h, int32_t rank) {
    if (!h || h->p->split_mode != INFER_SPLIT_TENSOR || rank < 0 || rank >= h->p->tp) return -2;
    return h->p->tp_dev[rank];
}

INFER_API int32_t infer_plan_layer_home(const infer_plan *h, int32_t il) {
    if (!h || il < 0 || il >= h->p->n_layer_all) return -2;
    return h->p->layer_home[il];
}

INFER_API int32_t infer_plan_experts_home(const infer_plan *h, int32_t il) {
    if (!h || il < 0 || il >= h->p->n_layer_all) return -2;
    return h->p->exps_home[il];
}
