/* backend: one compute device behind a table of functions (the shape of ggml_backend_i).
 *
 * The forward pass calls ops only through this table, so the same layer code runs on the CPU
 * (backend_cpu.c -> lib/cpu/<op>.c) and on CUDA (backend_cuda.c -> kernels/<op>.cu). Every op takes the
 * args struct of kernels/kernels.h; pointers in it are memory of this backend (alloc / upload). On the
 * CPU ops run synchronously; a device backend may queue them until sync. An entry may be NULL when a
 * backend lacks the op: callers get INFER_E_UNSUPPORTED from the backend_* wrappers below.
 */
#ifndef INFER_BACKEND_H
#define INFER_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "status.h"

struct infer_backend;

struct infer_backend_ops {
    const char *name; /* "cpu", "cuda" */
    void (*destroy)(struct infer_backend *b);
    /* memory: *out is NULL on failure; free(NULL) is a no-op */
    infer_status (*alloc)(struct infer_backend *b, size_t bytes, void **out);
    void (*free)(struct infer_backend *b, void *p);
    infer_status (*upload)(struct infer_backend *b, void *dst, const void *src, size_t bytes);
    infer_status (*download)(struct infer_backend *b, void *dst, const void *src, size_t bytes);
    infer_status (*sync)(struct infer_backend *b);
    /* dst = src, both memory of this backend, queued like an op; zero: dst = bytes of 0 */
    infer_status (*copy)(struct infer_backend *b, void *dst, const void *src, size_t bytes);
    infer_status (*zero)(struct infer_backend *b, void *dst, size_t bytes);
    /* Free and total bytes of the backend's memory (a device's); the CPU reports 0 and 0 (unknown). */
    infer_status (*mem_info)(struct infer_backend *b, size_t *free_bytes, size_t *total_bytes);
    /* Host memory for data that crosses the bus every batch (a split context's hidden state): page-locked
     * on CUDA, so a copy needs no bounce buffer and a graph may hold it; ordinary memory on the CPU. */
    infer_status (*host_alloc)(struct infer_backend *b, size_t bytes, void **out);
    void (*host_free)(struct infer_backend *b, void *p);
    /* dst = src between memory of this backend and host_alloc memory, queued like an op (no staging and no
     * wait, unlike upload / download), so a captured graph may hold them; the bytes are there after sync. */
    infer_status (*stage_in)(struct infer_backend *b, void *dst, const void *src_host, size_t bytes);
    infer_status (*stage_out)(struct infer_backend *b, void *dst_host, const void *src, size_t bytes);
    /* Runs fn(arg), which only queues ops on b. With key != 0 a device backend may capture those ops
     * into a graph and, on its next call with the same key, replay the graph instead of calling fn. So
     * for one key fn must queue the same ops with the same arguments every time, and read whatever
     * changes between calls (token ids, positions) from backend memory. */
    infer_status (*run)(struct infer_backend *b, uint64_t key, infer_status (*fn)(void *arg), void *arg);
    /* ops */
    int32_t (*mmv_act_type)(int32_t weight_type); /* activation type quantize must produce for mmv/mm */
    infer_status (*quantize)(struct infer_backend *b, const struct quantize_args *a);
    infer_status (*mmv)(struct infer_backend *b, const struct mmv_args *a);
    infer_status (*mm)(struct infer_backend *b, const struct mm_args *a);
    /* several mmv products in one launch (kernels.h); NULL: callers run the products one by one */
    infer_status (*mmv_multi)(struct infer_backend *b, const struct mmv_multi_args *a);
    infer_status (*norm)(struct infer_backend *b, const struct norm_args *a);
    infer_status (*rope)(struct infer_backend *b, const struct rope_args *a);
    infer_status (*act)(struct infer_backend *b, const struct act_args *a);
    infer_status (*attn)(struct infer_backend *b, const struct attn_args *a);
    infer_status (*moe_route)(struct infer_backend *b, const struct moe_route_args *a);
    infer_status (*moe_ffn)(struct infer_backend *b, const struct moe_ffn_args *a);
    infer_status (*ssm_conv)(struct infer_backend *b, const struct ssm_conv_args *a);
    infer_status (*gdn)(struct infer_backend *b, const struct gdn_args *a);
    /* fused forms (kernels.h); NULL on the CPU, where callers run the unfused pair */
    infer_status (*norm_q)(struct infer_backend *b, const struct norm_q_args *a);
    infer_status (*rope_norm)(struct infer_backend *b, const struct rope_norm_args *a);
    infer_status (*gdn_conv)(struct infer_backend *b, const struct gdn_conv_args *a);
    infer_status (*embed)(struct infer_backend *b, const struct embed_args *a);
    infer_status (*kv_store)(struct infer_backend *b, const struct kv_store_args *a);
    infer_status (*sample)(struct infer_backend *b, const struct sample_args *a); /* SAMPLE_REFUSED rows: use the host */
    infer_status (*spec_accept)(struct infer_backend *b, const struct spec_accept_args *a);
};

struct infer_backend {
    const struct infer_backend_ops *ops;
    void *impl; /* the backend's own state */
};

/* CPU backend with n_threads workers (the calling thread is one of them). Gives *out. */
infer_status backend_cpu_create(int n_threads, struct infer_backend **out);
/* CUDA backend on device `device` with one stream (backend_cuda.c). Gives *out; INFER_E_DEVICE when no
 * device is usable, INFER_E_UNSUPPORTED in a build without CUDA. */
infer_status backend_cuda_create(int device, struct infer_backend **out);
/* Tensor parallelism (tp.h). A group's id (NCCL's unique id) for processes joining one group. */
#define INFER_TP_ID_BYTES 128
infer_status backend_cuda_tp_id(uint8_t id[INFER_TP_ID_BYTES]);
/* Joins n CUDA backends, one per device, in rank order, into one NCCL communicator: with id NULL they are the whole
 * group (ncclCommInitAll, world = n); else ranks rank0 .. rank0 + n - 1 of world over several processes
 * (ncclCommInitRank, each process with the same id). Each backend keeps its rank's and destroys it when freed. */
infer_status backend_cuda_tp_join(struct infer_backend *const *bes, int32_t n, int32_t world, int32_t rank0,
                                  const uint8_t *id);
/* b (a context's backend) uses from's communicator (the model's backend of the same device), not owning it. */
infer_status backend_cuda_tp_borrow(struct infer_backend *b, struct infer_backend *from);
/* bufs[r] (bytes in bes[r]'s memory) = the group's rank 0's, queued on each rank's stream as one NCCL group. */
infer_status backend_cuda_broadcast(struct infer_backend *const *bes, void *const *bufs, int32_t n, size_t bytes);
/* bufs[r] (count floats in bes[r]'s memory) = the sum of every rank's, the same bits on every rank; queued on each
 * rank's stream as one NCCL group (one thread drives every rank). */
infer_status backend_cuda_allreduce(struct infer_backend *const *bes, float *const *bufs, int32_t n, size_t count);
/* The group's rank 0's bufs (count floats) = the sum of every rank's; the others' unchanged. As allreduce, one
 * NCCL group. */
infer_status backend_cuda_reduce(struct infer_backend *const *bes, float *const *bufs, int32_t n, size_t count);
/* Runs fn, which queues ops on the n backends' streams (a tensor-parallel group's pass, its collectives included),
 * as one CUDA graph per backend: captured together the first time key comes (0: no graphs, fn runs as is; so
 * with INFER_CUDA_GRAPHS=0 or a backend not CUDA), else replayed. Each backend keeps its graph in its own cache
 * (run()'s). Every rank but the first launches from a thread of its own (NCCL: one thread launching graphs with
 * collectives on several devices may deadlock); returns once every launch has returned. */
infer_status backend_cuda_group_run(struct infer_backend *const *bes, int32_t n, uint64_t key,
                                    infer_status (*fn)(void *), void *arg);
/* Releases a backend from any *_create; NULL is a no-op. */
void backend_free(struct infer_backend *b);

#endif
