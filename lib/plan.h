/* plan: placement as data — where each part of a model lives (the host or CUDA device i) and what each
 * home's memory must then hold, computed from a bound model's tensor infos without reading weights.
 *
 * What a plan says:
 *   - the home of each layer, as contiguous segments of layers per home; MTP blocks follow the head;
 *   - the home of the token embedding and of the output head (output_norm + output);
 *   - a per-tensor override: the routed experts (ffn_{gate,up,down}_exps) of a layer may stay on the host
 *     while the rest of the layer is on a GPU;
 *   - the tensor-parallel degree: 1, or with split_mode tensor the number of devices (the ranks, tp_dev) every
 *     trunk layer is cut over (tp.h); a trunk layer's home is then the group, recorded as its first device;
 *   - bytes per home: weights (each tensor rounded up to 256 on a device, as model_upload.c places them;
 *     exact on the host, where they are the mapped file; under tensor parallelism each rank's shards, as
 *     model_tp.c allocates them), KV cells and recurrent state (kv_cache_bytes_of: exactly what cache.c
 *     allocates for the layers at that home, or for a rank's own heads), scratch (ctx_scratch_bytes: exactly
 *     what infer_ctx_create allocates there for each stage of the context: the host's and the GPU's of a layer
 *     split, forward.h; each rank's under tensor parallelism) and an overhead per GPU (below).
 * Semantics are llama.cpp's: n_gpu_layers = N puts the LAST N trunk layers on the GPU, and the head too
 * when N > n_layer (N < 0: everything); n_cpu_moe = N keeps the routed experts of the first N MoE layers
 * on the host (>= the layer count: all). INFER_GPU_LAYERS_AUTO fits: the whole model if it fits the
 * context asked for, else (MoE) the experts of as few leading layers as needed on the host, else (dense)
 * as many trailing layers as fit; with split_mode tensor there is nothing to choose (every layer on every
 * rank), so the fit checks that every rank's part fits its device and refuses with the numbers when one does
 * not. The GPU part goes to device main_gpu, or spreads by split_mode. The layers' and the head's homes are
 * model_placement's (model_upload.c), the rule a load follows; infer_model_load runs every plan, expert
 * offload (plan_offloads_experts) and tensor parallelism included, and refuses what the plan refuses with the
 * same words (plan_tp_check, plan_tp_devices, tp_ranks). Tensor overrides (llama.cpp's -ot) name homes by
 * pattern; only the routed experts may leave their layer's home (for the host).
 * Layout: plan.c computes (placement, accounting, fit); plan_text.c renders; plan_api.c is the public API and
 * measures the devices.
 */
#ifndef INFER_PLAN_H
#define INFER_PLAN_H

#include <stdint.h>

#include "ctx_scratch.h"
#include "model.h"
#include "tp.h"

#define PLAN_HOST (-1) /* the home of what stays in host memory; a home >= 0 is CUDA device i */
#define PLAN_MAX_DEVICES INFER_MAX_DEVICES
#define PLAN_NO_OVERRIDE (-2) /* ot_exps: no tensor override names the layer's experts */
#define PLAN_MAX_OVERRIDES 32 /* PATTERN=DEVICE entries of infer_model_params.tensor_overrides */
#define PLAN_ALIGN 256 /* a device allocation's granularity as the plan counts it (cudaMalloc aligns to 256) */

/* The overhead per GPU in use: what the plan cannot count as buffers of its own.
 * Memory stated by the caller (infer_plan_params, llm-run --dry-run-mem): PLAN_GPU_OVERHEAD, the assumption
 * for a card not at hand: the CUDA context's allocations after the free memory was read (module images loaded
 * lazily at first launch, the graph executables, the stream), cuBLAS's handle with its 32 MiB workspace and
 * 64 MiB scratch for each of the model's and the context's backends when INFER_MATMUL=cublas (192 MiB),
 * infer_sample's buffer (n_vocab * 8 bytes, 2 MiB at a 248k vocabulary) and cudaMalloc's rounding of each of
 * about 40 buffers to its 2 MiB pages (up to 80 MiB): about 400 MiB summed, 512 leaving room.
 * Measured devices (plan_measure_devices: an automatic fit at load, llm-run --dry-run without --dry-run-mem):
 * PLAN_GPU_FLOOR + PLAN_GPU_BACKENDS times what one CUDA backend was seen to take on that device (its free
 * memory before and after backend_cuda_create: the stream and the matmul state, with INFER_MATMUL=cublas the
 * handle, workspace and scratch; allocated there at creation, not at a first product). The floor is what such
 * a reading cannot see: the driver's context already exists when the first reading is taken, module images
 * load at first launch, and the sample buffer and the page rounding come later (the 512 above less the
 * 192 MiB of cuBLAS state, which is now measured).
 * Tensor parallelism adds PLAN_TP_NCCL_RESERVE per rank: the NCCL communicator's buffers (ncclCommInitAll,
 * about 500 MiB per rank intra-node, NVIDIA/nccl issues 964 and 2366), not measured (it needs the group). */
#define PLAN_GPU_OVERHEAD (UINT64_C(512) << 20)
#define PLAN_GPU_FLOOR (UINT64_C(320) << 20)
#define PLAN_GPU_BACKENDS 2 /* CUDA backends per device in use: the model's (its weights) and the context's stage */
#define PLAN_TP_NCCL_RESERVE (UINT64_C(512) << 20)

/* The devices a plan is made for. */
struct plan_devices {
    int32_t n;
    int measured;                        /* 1: read from the devices; 0: stated by the caller */
    uint64_t free[PLAN_MAX_DEVICES];     /* free memory */
    uint64_t backend[PLAN_MAX_DEVICES];  /* measured: what one CUDA backend takes there (0: not measured) */
};

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
    int embd_head;              /* the head's device keeps its own copy of the token table for the MTP blocks
                                   (plan_embd_head; model_homes.embd_head) */
    int32_t *layer_home;        /* (n_layer_all) */
    int32_t *exps_home;         /* (n_layer_all) the routed experts' home; layer_home but where n_cpu_moe or a
                                   tensor override says */
    int32_t *ot_exps;           /* (n_layer_all) the home a tensor override gives the layer's experts, or
                                   PLAN_NO_OVERRIDE (overrides win over n_cpu_moe) */
    uint8_t *exps_off;          /* (n_layer_all) 1: the layer is on a GPU, its routed experts on the host */
    int32_t split_mode;         /* INFER_SPLIT_NONE: the GPU part on gpu; INFER_SPLIT_LAYER: spread by share;
                                   INFER_SPLIT_TENSOR: every trunk layer cut over tp_dev */
    double share[PLAN_MAX_DEVICES]; /* a layer split: each device's share of the GPU layers (sum 1) */
    struct plan_segment *seg;   /* (n_seg) runs of layer_home */
    int32_t n_seg;
    int32_t tp;                 /* tensor-parallel degree: 1, or the ranks of split_mode tensor */
    int32_t tp_dev[PLAN_MAX_DEVICES]; /* split_mode tensor: rank r's device (tp_dev[0] = gpu) */
    struct tp_rank tp_rk[PLAN_MAX_DEVICES]; /* split_mode tensor: what rank r holds (tp.h) */
    uint64_t tp_weights[PLAN_MAX_DEVICES]; /* split_mode tensor: rank r's shards on its device (model_tp.c) */
    uint64_t tp_host_weights;   /* split_mode tensor: the tensors no rank holds (the MTP blocks), in the mapping */
    int auto_fit;               /* 1: the fit chose n_gpu_layers and n_cpu_moe */
    int fit_on;                 /* the fit was asked (infer_model_params.fit) */
    struct ctx_dims ctx;        /* the context planned for */
    int32_t n_dev;              /* devices known (measured or stated) */
    int measured;               /* 1: free memory and backends measured (plan_measure_devices); 0: stated */
    uint64_t dev_free[PLAN_MAX_DEVICES];
    uint64_t dev_overhead[PLAN_MAX_DEVICES]; /* each device's overhead if in use (PLAN_GPU_OVERHEAD says how) */
    struct plan_bytes host, dev[PLAN_MAX_DEVICES];
    uint64_t kv_per_token;      /* KV bytes of one position of one sequence, every layer with cells */
    int32_t n_ctx_fit;          /* the largest n_ctx that fits the GPU beside the placed weights; -1: no GPU */
    int32_t n_ctx_max;          /* the bound of that search: the model's training context (or n_ctx if more) */
    int fits;                   /* every device's total <= its free memory */
};

/* The plan for m (a bound model; no tensor data is read) with model params mp, context params cp (NULL:
 * defaults) and the devices dev (measured by the caller or stated). Gives *out. INFER_E_ARG for bad params
 * (negative n_cpu_moe, main_gpu not among the devices when the GPU is used); INFER_E_UNSUPPORTED for what a
 * load refuses (split_mode tensor: plan_tp_check, plan_tp_devices, tp_ranks); INFER_E_OOM when an automatic
 * fit finds nothing that fits (the message has the numbers). */
infer_status plan_make(const struct infer_model *m, const infer_model_params *mp, const infer_ctx_params *cp,
                       const struct plan_devices *dev, struct plan **out);
void plan_free(struct plan *p); /* NULL is a no-op */

/* split_mode tensor takes every layer on the GPU and no expert offload: INFER_E_UNSUPPORTED saying so otherwise
 * (checked by the load before any device is touched, and by the plan). */
infer_status plan_tp_check(const struct infer_model *m, const infer_model_params *mp);
/* split_mode tensor's devices out of n_dev: those tensor_split gives a share (all 0: every device), in order, the
 * shares equal; *n of them into devs. INFER_E_ARG / INFER_E_UNSUPPORTED for a share of a device not known or
 * shares that differ, INFER_E_DEVICE for no device. */
infer_status plan_tp_devices(const infer_model_params *mp, int32_t n_dev, int32_t *devs, int32_t *n);

/* The CUDA devices (at most PLAN_MAX_DEVICES) and their free memory; n = 0 when there is none. With backends,
 * also what one CUDA backend takes on each (device_backend_bytes: one made and freed there), for the
 * overhead (plan_api.c). */
infer_status plan_measure_devices(struct plan_devices *dev, int backends);
/* Total bytes of one home's breakdown. */
uint64_t plan_bytes_total(const struct plan_bytes *b);
/* 1 when parts live in more than one home (the host, devices): a layer split or expert offload; 0 for tensor
 * parallelism (no layer crosses between homes: every rank runs every layer). */
int plan_is_split(const struct plan *p);
/* 1 when any device holds a part. */
int plan_uses_gpu(const struct plan *p);
/* 1 when the routed experts of a layer live elsewhere than the layer (n_cpu_moe or an override under GPU
 * layers): expert offload. */
int plan_offloads_experts(const struct plan *p);
/* 1 when home holds any layer, experts, the embedding or the head, or is a rank's device. */
int plan_uses(const struct plan *p, int32_t home);
/* The rank whose device is home under split_mode tensor, or -1. */
int32_t plan_tp_rank_of(const struct plan *p, int32_t home);
/* Renders p as text like snprintf: returns the length needed without the NUL (plan_text.c). */
int32_t plan_text(const struct plan *p, char *buf, int32_t cap);

#endif
