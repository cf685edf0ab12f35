/* plan: placement as data — where each part of a model lives (the host or CUDA device i) and what each
 * home's memory must then hold, computed from a bound model's tensor infos without reading weights.
 *
 * What a plan says:
 *   - the home of each layer, as contiguous segments of layers per home; MTP blocks follow the head;
 *   - the home of the token embedding and of the output head (output_norm + output);
 *   - a per-tensor override: the routed experts (ffn_{gate,up,down}_exps) of a layer may stay on the host
 *     while the rest of the layer is on a GPU;
 *   - the tensor-parallel degree (1 until tensor parallelism exists);
 *   - bytes per home: weights (each tensor rounded up to 256 on a device, as model_upload.c places them;
 *     exact on the host, where they are the mapped file), KV cells and recurrent state (kv_cache_bytes_of:
 *     exactly what cache.c allocates for the layers at that home), scratch (ctx_scratch_bytes: exactly what
 *     infer_ctx_create allocates there for each stage of the context: the host's and the GPU's of a layer
 *     split, forward.h) and a fixed overhead per GPU (PLAN_GPU_OVERHEAD).
 * Semantics are llama.cpp's: n_gpu_layers = N puts the LAST N trunk layers on the GPU, and the head too
 * when N > n_layer (N < 0: everything); n_cpu_moe = N keeps the routed experts of the first N MoE layers
 * on the host (>= the layer count: all). INFER_GPU_LAYERS_AUTO fits: the whole model if it fits the
 * context asked for, else (MoE) the experts of as few leading layers as needed on the host, else (dense)
 * as many trailing layers as fit. The GPU part goes to device main_gpu (one GPU for now). The layers' and the
 * head's homes are model_placement's (model_upload.c), the rule a load follows; infer_model_load runs every
 * plan, expert offload (plan_offloads_experts) included. Tensor overrides (llama.cpp's -ot) name homes by
 * pattern; only the routed experts may leave their layer's home (for the host).
 * Layout: plan.c computes (placement, accounting, fit); plan_text.c renders; plan_api.c is the public API.
 */
#ifndef INFER_PLAN_H
#define INFER_PLAN_H

#include <stdint.h>

#include "ctx_scratch.h"
#include "model.h"

#define PLAN_HOST (-1) /* the home of what stays in host memory; a home >= 0 is CUDA device i */
#define PLAN_MAX_DEVICES INFER_MAX_DEVICES
#define PLAN_NO_OVERRIDE (-2) /* ot_exps: no tensor override names the layer's experts */
#define PLAN_MAX_OVERRIDES 32 /* PATTERN=DEVICE entries of infer_model_params.tensor_overrides */
#define PLAN_ALIGN 256 /* a device allocation's granularity as the plan counts it (cudaMalloc aligns to 256) */

/* Kept free on each GPU in use beyond what the plan counts: the CUDA context's own allocations after the
 * free memory was measured (module images loaded lazily at first launch, the graph executables, the
 * stream), cuBLAS's handle with its 32 MiB workspace and 64 MiB scratch for each of the model's and the
 * context's backends when INFER_MATMUL=cublas (192 MiB), infer_sample's buffer (n_vocab * 8 bytes, 2 MiB
 * at a 248k vocabulary) and cudaMalloc's rounding of each of about 40 buffers to its 2 MiB pages (up to
 * 80 MiB). About 400 MiB summed; 512 MiB leaves room. A planning constant, to be replaced by a measurement
 * at start (issue 12). */
#define PLAN_GPU_OVERHEAD (UINT64_C(512) << 20)

struct plan_bytes {
    uint64_t weights, kv, state, scratch, overhead;
};

struct plan_segment {
    int32_t first, count, home; /* layers [first, first + count) of the model (trunk then MTP) live at home */
};

struct plan {
    const char *arch;           /* general.architecture, borrowed from the model */
    int32_t n_layer, n_layer_all, n_attn, n_gdn, n_moe; /* trunk, trunk + MTP; trunk attention / GDN / MoE layers */
    int32_t n_gpu_layers;       /* resolved: 0..n_layer + 1 (n_layer + 1: the head too) */
    int32_t n_cpu_moe;          /* resolved: 0..n_moe, MoE layers (the first) whose experts stay on the host */
    int32_t gpu;                /* the device of the GPU part (main_gpu); a layer split: its first device */
    int32_t home_embd, home_head;
    int32_t *layer_home;        /* (n_layer_all) */
    int32_t *exps_home;         /* (n_layer_all) the routed experts' home; layer_home but where n_cpu_moe or a
                                   tensor override says */
    int32_t *ot_exps;           /* (n_layer_all) the home a tensor override gives the layer's experts, or
                                   PLAN_NO_OVERRIDE (overrides win over n_cpu_moe) */
    uint8_t *exps_off;          /* (n_layer_all) 1: the layer is on a GPU, its routed experts on the host */
    int32_t split_mode;         /* INFER_SPLIT_NONE: the GPU part on gpu; INFER_SPLIT_LAYER: spread by share */
    double share[PLAN_MAX_DEVICES]; /* a layer split: each device's share of the GPU layers (sum 1) */
    struct plan_segment *seg;   /* (n_seg) runs of layer_home */
    int32_t n_seg;
    int32_t tp;                 /* tensor-parallel degree: 1 */
    int auto_fit;               /* 1: the fit chose n_gpu_layers and n_cpu_moe */
    int fit_on;                 /* the fit was asked (infer_model_params.fit) */
    struct ctx_dims ctx;        /* the context planned for */
    int32_t n_dev;              /* devices known (measured or stated) */
    int measured;               /* 1: free memory from infer_device_memory; 0: stated by the caller */
    uint64_t dev_free[PLAN_MAX_DEVICES];
    struct plan_bytes host, dev[PLAN_MAX_DEVICES];
    uint64_t kv_per_token;      /* KV bytes of one position of one sequence, every layer with cells */
    int32_t n_ctx_fit;          /* the largest n_ctx that fits the GPU beside the placed weights; -1: no GPU */
    int32_t n_ctx_max;          /* the bound of that search: the model's training context (or n_ctx if more) */
    int fits;                   /* every device's total <= its free memory */
};

/* The plan for m (a bound model; no tensor data is read) with model params mp, context params cp (NULL:
 * defaults) and n_dev devices offering dev_free bytes (measured by the caller or stated). Gives *out.
 * INFER_E_ARG for bad params (negative n_cpu_moe, main_gpu not among the n_dev devices when the GPU is
 * used); INFER_E_OOM when an automatic fit finds nothing that fits (the message has the numbers). */
infer_status plan_make(const struct infer_model *m, const infer_model_params *mp, const infer_ctx_params *cp,
                       const uint64_t *dev_free, int32_t n_dev, struct plan **out);
void plan_free(struct plan *p); /* NULL is a no-op */

/* The free memory of every CUDA device (at most PLAN_MAX_DEVICES); *n_dev = 0 when there is none (plan_api.c). */
infer_status plan_measure_devices(uint64_t *dev_free, int32_t *n_dev);
/* Total bytes of one home's breakdown. */
uint64_t plan_bytes_total(const struct plan_bytes *b);
/* 1 when parts live in more than one home (the host, devices): a layer split or expert offload. */
int plan_is_split(const struct plan *p);
/* 1 when any device holds a part. */
int plan_uses_gpu(const struct plan *p);
/* 1 when the routed experts of a layer live elsewhere than the layer (n_cpu_moe or an override under GPU
 * layers): expert offload. */
int plan_offloads_experts(const struct plan *p);
/* 1 when home holds any layer, experts, the embedding or the head. */
int plan_uses(const struct plan *p, int32_t home);
/* Renders p as text like snprintf: returns the length needed without the NUL (plan_text.c). */
int32_t plan_text(const struct plan *p, char *buf, int32_t cap);

#endif
