/* backend_cuda: the CUDA backend — device memory, one stream, and the op table over kernels/<op>.cu.
 *
 * Ops are queued on the backend's stream and return at once; download and sync wait for the stream.
 * run() captures what a function queues into a CUDA graph and replays it whenever the caller's key comes
 * again (the decode step: one launch instead of hundreds). A backend keeps the graphs of its last
 * BACKEND_CUDA_GRAPHS keys, so the several pieces of one decode step (expert offload cuts a step into
 * pieces around the CPU's experts) each replay their own; a new key takes the least recently used slot,
 * updating that executable graph in place (cudaGraphExecUpdate) when only kernel arguments changed, or
 * instantiating it anew. INFER_CUDA_GRAPHS=0 in the environment turns graphs off (every run calls fn directly).
 * upload is cudaMemcpyAsync from (usually pageable) host memory: CUDA stages pageable sources before
 * returning, so the caller may reuse src at once. stage_in / stage_out copy to and from page-locked memory
 * (host_alloc, cudaMallocHost) without waiting, which is what a captured graph may hold (a copy touching
 * pageable memory ends a capture with cudaErrorStreamCaptureUnsupported). Launcher results map to statuses: a launcher's
 * shape / type refusal (cudaErrorInvalidValue) is INFER_E_UNSUPPORTED, anything else INFER_E_DEVICE,
 * both naming the op and the CUDA error.
 * Every call first makes the backend's device current on the calling thread (backend_cuda_current), so one
 * thread may drive the backends of several devices in turn (a layer split over GPUs).
 * Built without CUDA, backend_cuda_create is a stub that refuses, so callers compile everywhere.
 */
#include "backend.h"
#include "device.h"

#ifdef INFER_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { BACKEND_CUDA_GRAPHS = 128 }; /* a decode step's pieces: 2 per offloaded layer + 1, for a few shapes */

struct backend_cuda {
    struct infer_backend base;
    int device;
    cudaStream_t stream;
    int graphs;            /* 0: run() never captures */
    struct backend_cuda_graph {
        cudaGraphExec_t exec; /* NULL: free */
        uint64_t key, used;   /* used: the run counter at its last launch */
    } cache[BACKEND_CUDA_GRAPHS];
    uint64_t runs;
    struct cuda_mm_state *mm; /* the prefill matmul's mode (INFER_MATMUL) and its cuBLAS handle / scratch */
    ncclComm_t comm;          /* a rank of a tensor-parallel group (backend_cuda_tp_join / _borrow); else NULL */
    int owns_comm;            /* 1: joined here (destroyed with the backend); 0: borrowed from another backend */
    /* the thread that launches this rank's graphs of a group (backend_cuda_group_run), started on first need */
    struct backend_cuda_launcher {
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int started, quit;
        cudaGraphExec_t job; /* to launch; NULL once launched */
        cudaError_t err;     /* the last launch's */
    } launcher;
};

static struct backend_cuda *backend_cuda_of(struct infer_backend *b) { return b->impl; }

/* Makes the backend's device current on the calling thread (several devices, one thread: every call may follow
 * another device's). cudaGetDevice first: setting an already current device is not free on every driver. */
static cudaError_t backend_cuda_current(struct infer_backend *b) {
    int cur = -1;
    const cudaError_t e = cudaGetDevice(&cur);
    if (e != cudaSuccess) return e;
    return cur == backend_cuda_of(b)->device ? cudaSuccess : cudaSetDevice(backend_cuda_of(b)->device);
}

static void backend_cuda_launcher_stop(struct backend_cuda_launcher *l);

static void backend_cuda_destroy(struct infer_backend *b) {
    struct backend_cuda *c = backend_cuda_of(b);
    backend_cuda_launcher_stop(&c->launcher);
    if (backend_cuda_current(b) != cudaSuccess) cudaGetLastError(); /* the frees below then report their own errors */
    for (int i = 0; i < BACKEND_CUDA_GRAPHS; i++)
        if (c->cache[i].exec && cudaGraphExecDestroy(c->cache[i].exec) != cudaSuccess) cudaGetLastError();
    if (c->stream) {
        cudaError_t e = cudaStreamSynchronize(c->stream);
        if (e == cudaSuccess) e = cudaStreamDestroy(c->stream);
        if (e != cudaSuccess) infer_log(INFER_LOG_WARN, "cuda backend: destroying the stream: %s", cudaGetErrorString(e));
    }
    cuda_mm_state_free(c->mm);
    if (c->comm && c->owns_comm) {
        const ncclResult_t r = ncclCommDestroy(c->comm);
        if (r != ncclSuccess) infer_log(INFER_LOG_WARN, "cuda backend: ncclCommDestroy: %s", ncclGetErrorString(r));
    }
    xfree(c);
}

static infer_status backend_cuda_alloc(struct infer_backend *b, size_t bytes, void **out) {
    struct backend_cuda *c = backend_cuda_of(b);
    *out = NULL;
    cudaError_t e = backend_cuda_current(b);
    if (e == cudaSuccess) e = cudaMalloc(out, bytes ? bytes : 1);
    if (e == cudaSuccess) return INFER_OK;
    *out = NULL;
    cudaGetLastError(); /* not sticky: keep it from surfacing in the next launcher's cudaGetLastError */
    if (e != cudaErrorMemoryAllocation)
        return infer_fail(INFER_E_DEVICE, "cuda backend: cudaMalloc(%zu bytes) on device %d: %s", bytes, c->device,
                          cudaGetErrorString(e));
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    return infer_fail(INFER_E_OOM, "cuda backend: out of memory allocating %zu bytes on device %d (%zu of %zu bytes free)",
                      bytes, c->device, free_b, total_b);
}

static void backend_cuda_free_buf(struct infer_backend *b, void *p) {
    if (!p) return;
    cudaError_t e = backend_cuda_current(b);
    if (e == cudaSuccess) e = cudaFree(p);
    if (e != cudaSuccess) infer_log(INFER_LOG_WARN, "cuda backend: cudaFree on device %d: %s", backend_cuda_of(b)->device,
                                    cudaGetErrorString(e));
}

static infer_status backend_cuda_upload(struct infer_backend *b, void *dst, const void *src, size_t bytes) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    if (bytes) CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, backend_cuda_of(b)->stream));
fail:
    return st;
}

static infer_status backend_cuda_download(struct infer_backend *b, void *dst, const void *src, size_t bytes) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    struct backend_cuda *c = backend_cuda_of(b);
    if (bytes) CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CU_TRY(cudaStreamSynchronize(c->stream));
fail:
    return st;
}

static infer_status backend_cuda_sync(struct infer_backend *b) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    CU_TRY(cudaStreamSynchronize(backend_cuda_of(b)->stream));
fail:
    return st;
}

static infer_status backend_cuda_copy(struct infer_backend *b, void *dst, const void *src, size_t bytes) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    if (bytes) CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, backend_cuda_of(b)->stream));
fail:
    return st;
}

static infer_status backend_cuda_zero(struct infer_backend *b, void *dst, size_t bytes) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    if (bytes) CU_TRY(cudaMemsetAsync(dst, 0, bytes, backend_cuda_of(b)->stream));
fail:
    return st;
}

static infer_status backend_cuda_host_alloc(struct infer_backend *b, size_t bytes, void **out) {
    *out = NULL;
    const cudaError_t e = cudaMallocHost(out, bytes ? bytes : 1);
    if (e == cudaSuccess) return INFER_OK;
    *out = NULL;
    cudaGetLastError();
    return infer_fail(e == cudaErrorMemoryAllocation ? INFER_E_OOM : INFER_E_DEVICE,
                      "cuda backend: cudaMallocHost(%zu bytes) for device %d: %s", bytes, backend_cuda_of(b)->device,
                      cudaGetErrorString(e));
}

static void backend_cuda_host_free(struct infer_backend *b, void *p) {
    if (!p) return;
    const cudaError_t e = cudaFreeHost(p);
    if (e != cudaSuccess) infer_log(INFER_LOG_WARN, "cuda backend: cudaFreeHost for device %d: %s",
                                    backend_cuda_of(b)->device, cudaGetErrorString(e));
}

static infer_status backend_cuda_stage_in(struct infer_backend *b, void *dst, const void *src_host, size_t bytes) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    if (bytes) CU_TRY(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, backend_cuda_of(b)->stream));
fail:
    return st;
}

static infer_status backend_cuda_stage_out(struct infer_backend *b, void *dst_host, const void *src, size_t bytes) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    if (bytes) CU_TRY(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, backend_cuda_of(b)->stream));
fail:
    return st;
}

static infer_status backend_cuda_mem_info(struct infer_backend *b, size_t *free_bytes, size_t *total_bytes) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    *free_bytes = *total_bytes = 0;
    CU_TRY(cudaMemGetInfo(free_bytes, total_bytes));
fail:
    return st;
}

/* The slot holding key's graph (*found 1), else the least recently used one, emptied of its key (*found 0). */
static struct backend_cuda_graph *backend_cuda_slot(struct backend_cuda *c, uint64_t key, int *found) {
    struct backend_cuda_graph *lru = &c->cache[0];
    for (int i = 0; i < BACKEND_CUDA_GRAPHS; i++) {
        if (c->cache[i].exec && c->cache[i].key == key) {
            *found = 1;
            return &c->cache[i];
        }
        if (c->cache[i].used < lru->used) lru = &c->cache[i];
    }
    *found = 0;
    lru->key = 0;
    return lru;
}

/* g as slot's executable graph under key: its graph updated in place when only arguments changed, else anew. */
static infer_status backend_cuda_install(struct backend_cuda_graph *slot, cudaGraph_t g, uint64_t key) {
    infer_status st = INFER_OK;
    if (slot->exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(slot->exec, g, &info) != cudaSuccess) { /* topology changed: rebuild */
            cudaGetLastError();
            CU_TRY(cudaGraphExecDestroy(slot->exec));
            slot->exec = NULL;
        }
    }
    if (!slot->exec) CU_TRY(cudaGraphInstantiate(&slot->exec, g, 0));
    slot->key = key;
fail:
    return st;
}

/* Capture fn's ops into a graph (or reuse the one captured under the same key) and launch it: a group of one
 * (backend_cuda_group_run). */
static infer_status backend_cuda_run(struct infer_backend *b, uint64_t key, infer_status (*fn)(void *), void *arg) {
    infer_status st = INFER_OK;
    CU_TRY(backend_cuda_current(b));
    st = backend_cuda_group_run(&b, 1, key, fn, arg);
fail:
    return st;
}

/* A launcher's cudaError_t as a status naming the op. */
static infer_status backend_cuda_status(cudaError_t e, const char *op) {
    if (e == cudaSuccess) return INFER_OK;
    if (e == cudaErrorInvalidValue)
        return infer_fail(INFER_E_UNSUPPORTED, "cuda %s: shape, type or arguments not supported by the kernel (%s)", op,
                          cudaGetErrorString(e));
    return infer_fail(INFER_E_DEVICE, "cuda %s: %s", op, cudaGetErrorString(e));
}

#define BACKEND_CUDA_OP(op, T)                                                                               \
    static infer_status backend_cuda_##op(struct infer_backend *b, const struct T *a) {                      \
        const cudaError_t e = backend_cuda_current(b);                                                       \
        return backend_cuda_status(e != cudaSuccess ? e : cuda_##op(a, backend_cuda_of(b)->stream), #op);    \
    }
static infer_status backend_cuda_mm(struct infer_backend *b, const struct mm_args *a) {
    struct backend_cuda *c = backend_cuda_of(b);
    const cudaError_t e = backend_cuda_current(b);
    return backend_cuda_status(e != cudaSuccess ? e : cuda_mm(a, c->mm, c->stream), "mm");
}

BACKEND_CUDA_OP(quantize, quantize_args)
BACKEND_CUDA_OP(mmv, mmv_args)
BACKEND_CUDA_OP(mmv_multi, mmv_multi_args)
BACKEND_CUDA_OP(norm, norm_args)
BACKEND_CUDA_OP(rope, rope_args)
BACKEND_CUDA_OP(act, act_args)
BACKEND_CUDA_OP(embed, embed_args)
BACKEND_CUDA_OP(kv_store, kv_store_args)
BACKEND_CUDA_OP(attn, attn_args)
BACKEND_CUDA_OP(moe_route, moe_route_args)
BACKEND_CUDA_OP(moe_ffn, moe_ffn_args)
BACKEND_CUDA_OP(ssm_conv, ssm_conv_args)
BACKEND_CUDA_OP(gdn, gdn_args)
BACKEND_CUDA_OP(norm_q, norm_q_args)
BACKEND_CUDA_OP(rope_norm, rope_norm_args)
BACKEND_CUDA_OP(gdn_conv, gdn_conv_args)
BACKEND_CUDA_OP(sample, sample_args)
BACKEND_CUDA_OP(spec_accept, spec_accept_args)

static const struct infer_backend_ops backend_cuda_ops = {
    .name = "cuda",
    .destroy = backend_cuda_destroy,
    .alloc = backend_cuda_alloc,
    .free = backend_cuda_free_buf,
    .upload = backend_cuda_upload,
    .download = backend_cuda_download,
    .sync = backend_cuda_sync,
    .copy = backend_cuda_copy,
    .zero = backend_cuda_zero,
    .mem_info = backend_cuda_mem_info,
    .host_alloc = backend_cuda_host_alloc,
    .host_free = backend_cuda_host_free,
    .stage_in = backend_cuda_stage_in,
    .stage_out = backend_cuda_stage_out,
    .run = backend_cuda_run,
    .mmv_act_type = mmv_act_type_cuda,
    .quantize = backend_cuda_quantize,
    .mmv = backend_cuda_mmv,
    .mm = backend_cuda_mm,
    .mmv_multi = backend_cuda_mmv_multi,
    .norm = backend_cuda_norm,
    .rope = backend_cuda_rope,
    .act = backend_cuda_act,
    .embed = backend_cuda_embed,
    .kv_store = backend_cuda_kv_store,
    .attn = backend_cuda_attn,
    .moe_route = backend_cuda_moe_route,
    .moe_ffn = backend_cuda_moe_ffn,
    .ssm_conv = backend_cuda_ssm_conv,
    .gdn = backend_cuda_gdn,
    .norm_q = backend_cuda_norm_q,
    .rope_norm = backend_cuda_rope_norm,
    .gdn_conv = backend_cuda_gdn_conv,
    .sample = backend_cuda_sample,
    .spec_accept = backend_cuda_spec_accept,
};

infer_status backend_cuda_create(int device, struct infer_backend **out) {
    infer_status st = INFER_OK;
    *out = NULL;
    const char *why = NULL;
    const int n = device_count(&why);
    if (n == 0) return infer_fail(INFER_E_DEVICE, "cuda backend: no usable CUDA device (%s)", why ? why : "none found");
    if (device < 0 || device >= n)
        return infer_fail(INFER_E_ARG, "cuda backend: device %d: expected 0..%d (%d devices)", device, n - 1, n);
    struct backend_cuda *c = xcalloc(1, sizeof *c);
    if (!c) return INFER_OOM("cuda backend");
    c->device = device;
    const char *graphs = getenv("INFER_CUDA_GRAPHS");
    c->graphs = !(graphs && !strcmp(graphs, "0"));
    CU_TRY(cudaSetDevice(device));
    CU_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    const cudaError_t mm_err = cuda_mm_state_create(&c->mm); /* after cudaSetDevice: cuBLAS mode allocates there */
    if (mm_err == cudaErrorInvalidValue) {
        const char *mode = getenv("INFER_MATMUL");
        st = infer_fail(INFER_E_ARG, "cuda backend: INFER_MATMUL=%s: expected mma or cublas", mode ? mode : "");
        goto fail;
    }
    CU_TRY(mm_err);
    c->base.ops = &backend_cuda_ops;
    c->base.impl = c;
    *out = &c->base;
    return INFER_OK;
fail:
    cuda_mm_state_free(c->mm);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
    xfree(c);
    return st;
}

/* One checked NCCL call. */
#define NCCL_TRY(what, x)                                                                                     \
    do {                                                                                                     \
        const ncclResult_t nccl_r_ = (x);                                                                    \
        if (nccl_r_ != ncclSuccess) {                                                                        \
            st = infer_fail(INFER_E_DEVICE, "cuda backend: %s: %s", what, ncclGetErrorString(nccl_r_));      \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

infer_status backend_cuda_tp_id(uint8_t id[INFER_TP_ID_BYTES]) {
    infer_status st = INFER_OK;
    ncclUniqueId u;
    NCCL_TRY("ncclGetUniqueId", ncclGetUniqueId(&u));
    memcpy(id, u.internal, INFER_TP_ID_BYTES);
fail:
    return st;
}

infer_status backend_cuda_tp_join(struct infer_backend *const *bes, int32_t n, int32_t world, int32_t rank0,
                                  const uint8_t *id) {
    infer_status st = INFER_OK;
    ncclComm_t comms[INFER_MAX_DEVICES] = {NULL};
    int devs[INFER_MAX_DEVICES];
    int open = 0;
    if (n < 1 || n > INFER_MAX_DEVICES || (id ? rank0 < 0 || rank0 + n > world : world != n))
        return infer_fail(INFER_E_ARG, "backend_cuda_tp_join: ranks %d..%d of %d", rank0, rank0 + n - 1, world);
    for (int32_t r = 0; r < n; r++) {
        if (bes[r]->ops != &backend_cuda_ops || backend_cuda_of(bes[r])->comm)
            return infer_fail(INFER_E_ARG, "backend_cuda_tp_join: rank %d is not a CUDA backend outside a group", r);
        devs[r] = backend_cuda_of(bes[r])->device;
    }
    if (!id) {
        NCCL_TRY("ncclCommInitAll", ncclCommInitAll(comms, n, devs));
    } else { /* this process's ranks of a group over several processes: one thread joins them all in a group */
        ncclUniqueId u;
        memcpy(u.internal, id, INFER_TP_ID_BYTES);
        NCCL_TRY("ncclGroupStart", ncclGroupStart());
        open = 1;
        for (int32_t r = 0; r < n; r++) {
            CU_TRY(backend_cuda_current(bes[r]));
            NCCL_TRY("ncclCommInitRank", ncclCommInitRank(&comms[r], world, u, rank0 + r));
        }
        open = 0;
        NCCL_TRY("ncclCommInitRank (ncclGroupEnd)", ncclGroupEnd());
    }
    for (int32_t r = 0; r < n; r++) {
        backend_cuda_of(bes[r])->comm = comms[r];
        backend_cuda_of(bes[r])->owns_comm = 1;
    }
    return INFER_OK;
fail:
    if (open && ncclGroupEnd() != ncclSuccess) infer_log(INFER_LOG_WARN, "cuda backend: ncclGroupEnd after a failure");
    for (int32_t r = 0; r < n; r++)
        if (comms[r] && ncclCommDestroy(comms[r]) != ncclSuccess)
            infer_log(INFER_LOG_WARN, "cuda backend: ncclCommDestroy after a failure");
    return st;
}

infer_status backend_cuda_tp_borrow(struct infer_backend *b, struct infer_backend *from) {
    if (b->ops != &backend_cuda_ops || from->ops != &backend_cuda_ops || !backend_cuda_of(from)->comm ||
        backend_cuda_of(b)->device != backend_cuda_of(from)->device)
        return infer_fail(INFER_E_ARG, "backend_cuda_tp_borrow: needs two CUDA backends of one device, the second "
                          "in a group");
    backend_cuda_of(b)->comm = backend_cuda_of(from)->comm;
    backend_cuda_of(b)->owns_comm = 0;
    return INFER_OK;
}

/* One NCCL collective over every rank, each rank's part (call) queued on its stream, all in one group: one thread
 * driving several devices must queue a collective on all of them before NCCL may wait for any. */
typedef ncclResult_t (*backend_cuda_part_fn)(struct backend_cuda *c, void *buf, size_t count);

static infer_status backend_cuda_group(const char *what, struct infer_backend *const *bes, void *const *bufs,
                                       int32_t n, size_t count, backend_cuda_part_fn call) {
    infer_status st = INFER_OK;
    int open = 0;
    NCCL_TRY("ncclGroupStart", ncclGroupStart());
    open = 1;
    for (int32_t r = 0; r < n; r++) {
        CU_TRY(backend_cuda_current(bes[r]));
        NCCL_TRY(what, call(backend_cuda_of(bes[r]), bufs[r], count));
    }
    open = 0;
    NCCL_TRY("ncclGroupEnd", ncclGroupEnd());
fail:
    if (open && ncclGroupEnd() != ncclSuccess) infer_log(INFER_LOG_WARN, "cuda backend: ncclGroupEnd after a failure");
    return st;
}

static ncclResult_t backend_cuda_part_broadcast(struct backend_cuda *c, void *buf, size_t bytes) {
    return ncclBroadcast(buf, buf, bytes, ncclUint8, 0, c->comm, c->stream);
}

static ncclResult_t backend_cuda_part_sum(struct backend_cuda *c, void *buf, size_t count) {
    return ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, c->comm, c->stream);
}

static ncclResult_t backend_cuda_part_reduce(struct backend_cuda *c, void *buf, size_t count) {
    return ncclReduce(buf, buf, count, ncclFloat32, ncclSum, 0, c->comm, c->stream);
}

infer_status backend_cuda_broadcast(struct infer_backend *const *bes, void *const *bufs, int32_t n, size_t bytes) {
    return backend_cuda_group("ncclBroadcast", bes, bufs, n, bytes, backend_cuda_part_broadcast);
}

infer_status backend_cuda_allreduce(struct infer_backend *const *bes, float *const *bufs, int32_t n, size_t count) {
    return backend_cuda_group("ncclAllReduce", bes, (void *const *)bufs, n, count, backend_cuda_part_sum);
}

infer_status backend_cuda_reduce(struct infer_backend *const *bes, float *const *bufs, int32_t n, size_t count) {
    return backend_cuda_group("ncclReduce", bes, (void *const *)bufs, n, count, backend_cuda_part_reduce);
}

/* ---- a group's graphs (backend_cuda_group_run) ----
 * NCCL's documentation warns that one thread launching graphs with captured collectives on several devices may
 * deadlock (a cudaGraphLaunch may wait for its peers' launches), so every rank but the first launches its graphs
 * from a thread of its own, and the caller, having launched the first, waits until every launch has returned. */

static void *backend_cuda_launcher_main(void *arg) {
    struct backend_cuda *c = arg;
    struct backend_cuda_launcher *l = &c->launcher;
    const cudaError_t dev = cudaSetDevice(c->device);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->job && !l->quit) pthread_cond_wait(&l->cv, &l->mu);
        if (l->quit) break;
        const cudaGraphExec_t job = l->job;
        pthread_mutex_unlock(&l->mu);
        const cudaError_t e = dev != cudaSuccess ? dev : cudaGraphLaunch(job, c->stream);
        pthread_mutex_lock(&l->mu);
        l->err = e;
        l->job = NULL;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static infer_status backend_cuda_launcher_start(struct backend_cuda *c) {
    struct backend_cuda_launcher *l = &c->launcher;
    if (l->started) return INFER_OK;
    if (pthread_mutex_init(&l->mu, NULL) != 0) return INFER_OOM("a graph launcher's mutex");
    if (pthread_cond_init(&l->cv, NULL) != 0) {
        pthread_mutex_destroy(&l->mu);
        return INFER_OOM("a graph launcher's condition");
    }
    l->job = NULL, l->quit = 0;
    if (pthread_create(&l->thread, NULL, backend_cuda_launcher_main, c) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        return infer_fail(INFER_E_OOM, "cuda backend (device %d): cannot start a graph launcher thread", c->device);
    }
    l->started = 1;
    return INFER_OK;
}

static void backend_cuda_launcher_stop(struct backend_cuda_launcher *l) {
    if (!l->started) return;
    pthread_mutex_lock(&l->mu);
    l->quit = 1;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    l->started = 0;
}

static void backend_cuda_launcher_post(struct backend_cuda_launcher *l, cudaGraphExec_t job) {
    pthread_mutex_lock(&l->mu);
    l->job = job;
    l->err = cudaSuccess;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static cudaError_t backend_cuda_launcher_wait(struct backend_cuda_launcher *l) {
    pthread_mutex_lock(&l->mu);
    while (l->job) pthread_cond_wait(&l->cv, &l->mu);
    const cudaError_t e = l->err;
    pthread_mutex_unlock(&l->mu);
    return e;
}

/* Launches every rank's graph: ranks 1.. on their launchers, rank 0 here; returns once every launch returned. */
static infer_status backend_cuda_group_launch(struct infer_backend *const *bes, struct backend_cuda_graph *const *slot,
                                              int32_t n) {
    infer_status st = INFER_OK;
    int32_t posted = 1;
    for (; posted < n; posted++) {
        struct backend_cuda *c = backend_cuda_of(bes[posted]);
        if ((st = backend_cuda_launcher_start(c)) != INFER_OK) break;
        backend_cuda_launcher_post(&c->launcher, slot[posted]->exec);
    }
    cudaError_t e = st == INFER_OK ? backend_cuda_current(bes[0]) : cudaSuccess;
    if (st == INFER_OK && e == cudaSuccess) e = cudaGraphLaunch(slot[0]->exec, backend_cuda_of(bes[0])->stream);
    for (int32_t r = 1; r < posted; r++) { /* every posted launch returns before this does */
        const cudaError_t er = backend_cuda_launcher_wait(&backend_cuda_of(bes[r])->launcher);
        if (e == cudaSuccess) e = er;
    }
    if (st == INFER_OK && e != cudaSuccess)
        st = infer_fail(INFER_E_DEVICE, "cuda backend: launching a group's graphs: %s", cudaGetErrorString(e));
    return st;
}

infer_status backend_cuda_group_run(struct infer_backend *const *bes, int32_t n, uint64_t key,
                                    infer_status (*fn)(void *), void *arg) {
    infer_status st = INFER_OK;
    struct backend_cuda_graph *slot[INFER_MAX_DEVICES];
    cudaGraph_t g[INFER_MAX_DEVICES] = {NULL};
    if (!key || n < 1 || n > INFER_MAX_DEVICES) return fn(arg);
    for (int32_t r = 0; r < n; r++)
        if (bes[r]->ops != &backend_cuda_ops || !backend_cuda_of(bes[r])->graphs) return fn(arg);
    int all = 1;
    for (int32_t r = 0; r < n; r++) {
        int found = 0;
        slot[r] = backend_cuda_slot(backend_cuda_of(bes[r]), key, &found);
        all &= found;
    }
    if (!all) { /* capture every rank's stream at once: fn queues on all of them, the collectives across */
        cudaError_t e = cudaSuccess;
        int32_t began = 0;
        for (int32_t r = 0; r < n && e == cudaSuccess; r++) {
            e = backend_cuda_current(bes[r]);
            if (e == cudaSuccess)
                e = cudaStreamBeginCapture(backend_cuda_of(bes[r])->stream, cudaStreamCaptureModeThreadLocal);
            if (e == cudaSuccess) began++;
        }
        const infer_status fst = e == cudaSuccess ? fn(arg) : INFER_OK;
        for (int32_t r = 0; r < began; r++) {
            cudaError_t er = backend_cuda_current(bes[r]);
            if (er == cudaSuccess) er = cudaStreamEndCapture(backend_cuda_of(bes[r])->stream, &g[r]);
            if (e == cudaSuccess) e = er;
        }
        if (fst != INFER_OK) {
            st = fst;
            cudaGetLastError();
            goto fail;
        }
        CU_TRY(e);
        for (int32_t r = 0; r < n; r++) {
            CU_TRY(backend_cuda_current(bes[r]));
            TRY(backend_cuda_install(slot[r], g[r], key));
        }
    }
    for (int32_t r = 0; r < n; r++) slot[r]->used = ++backend_cuda_of(bes[r])->runs;
    TRY(backend_cuda_group_launch(bes, slot, n));
fail:
    for (int32_t r = 0; r < n; r++)
        if (g[r] && (backend_cuda_current(bes[r]) != cudaSuccess || cudaGraphDestroy(g[r]) != cudaSuccess))
            cudaGetLastError();
    return st;
}

#else

infer_status backend_cuda_create(int device, struct infer_backend **out) {
    *out = NULL;
    return infer_fail(INFER_E_UNSUPPORTED, "cuda backend (device %d): built without CUDA", device);
}

infer_status backend_cuda_tp_id(uint8_t id[INFER_TP_ID_BYTES]) {
    (void)id;
    return infer_fail(INFER_E_UNSUPPORTED, "a tensor-parallel group's id: built without CUDA (NCCL)");
}

infer_status backend_cuda_tp_join(struct infer_backend *const *bes, int32_t n, int32_t world, int32_t rank0,
                                  const uint8_t *id) {
    (void)bes, (void)world, (void)rank0, (void)id;
    return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor over %d devices: built without CUDA (NCCL)", n);
}

infer_status backend_cuda_tp_borrow(struct infer_backend *b, struct infer_backend *from) {
    (void)b, (void)from;
    return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor: built without CUDA (NCCL)");
}

infer_status backend_cuda_broadcast(struct infer_backend *const *bes, void *const *bufs, int32_t n, size_t bytes) {
    (void)bes, (void)bufs, (void)bytes;
    return infer_fail(INFER_E_UNSUPPORTED, "broadcast over %d ranks: built without CUDA (NCCL)", n);
}

infer_status backend_cuda_allreduce(struct infer_backend *const *bes, float *const *bufs, int32_t n, size_t count) {
    (void)bes, (void)bufs, (void)count;
    return infer_fail(INFER_E_UNSUPPORTED, "all-reduce over %d ranks: built without CUDA (NCCL)", n);
}

infer_status backend_cuda_reduce(struct infer_backend *const *bes, float *const *bufs, int32_t n, size_t count) {
    (void)bes, (void)bufs, (void)count;
    return infer_fail(INFER_E_UNSUPPORTED, "reduce over %d ranks: built without CUDA (NCCL)", n);
}

infer_status backend_cuda_group_run(struct infer_backend *const *bes, int32_t n, uint64_t key,
                                    infer_status (*fn)(void *), void *arg) {
    (void)bes, (void)n, (void)key;
    return fn(arg);
}

#endif
