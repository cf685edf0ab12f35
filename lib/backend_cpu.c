/* backend_cpu: the CPU backend — host memory, a thread pool, and the op table over lib/cpu/<op>.c.
 * Ops run synchronously on the calling thread plus the pool's workers; sync is a no-op.
 */
#include <string.h>

#include "backend.h"
#include "cpu/cpu.h"

struct backend_cpu {
    struct infer_backend base;
    struct pool *pool;
};

static struct pool *backend_cpu_pool(struct infer_backend *b) { return ((struct backend_cpu *)b->impl)->pool; }

static void backend_cpu_destroy(struct infer_backend *b) {
    struct backend_cpu *c = b->impl;
    pool_free(c->pool);
    xfree(c);
}

static infer_status backend_cpu_alloc(struct infer_backend *b, size_t bytes, void **out) {
    (void)b;
    *out = xmalloc(bytes ? bytes : 1);
    if (*out && bytes >= ((size_t)4 << 20)) xhuge_hint(*out, bytes); /* KV cells, the big scratch */
    return *out ? INFER_OK
                : infer_fail(INFER_E_OOM, "out of memory allocating %zu bytes of host memory", bytes);
}

static void backend_cpu_free_buf(struct infer_backend *b, void *p) {
    (void)b;
    xfree(p);
}

static infer_status backend_cpu_copy(struct infer_backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes) memcpy(dst, src, bytes);
    return INFER_OK;
}

static infer_status backend_cpu_zero(struct infer_backend *b, void *dst, size_t bytes) {
    (void)b;
    if (bytes) memset(dst, 0, bytes);
    return INFER_OK;
}

static infer_status backend_cpu_sync(struct infer_backend *b) {
    (void)b;
    return INFER_OK;
}

static infer_status backend_cpu_mem_info(struct infer_backend *b, size_t *free_bytes, size_t *total_bytes) {
    (void)b;
    *free_bytes = *total_bytes = 0;
    return INFER_OK;
}

static infer_status backend_cpu_run(struct infer_backend *b, uint64_t key, infer_status (*fn)(void *), void *arg) {
    (void)b, (void)key;
    return fn(arg);
}

#define BACKEND_CPU_OP(op, T)                                                                                \
    static infer_status backend_cpu_##op(struct infer_backend *b, const struct T *a) {                       \
        return cpu_##op(a, backend_cpu_pool(b));                                                             \
    }
BACKEND_CPU_OP(quantize, quantize_args)
BACKEND_CPU_OP(mmv, mmv_args)
BACKEND_CPU_OP(mmv_multi, mmv_multi_args)
BACKEND_CPU_OP(mm, mm_args)
BACKEND_CPU_OP(norm, norm_args)
BACKEND_CPU_OP(rope, rope_args)
BACKEND_CPU_OP(act, act_args)
BACKEND_CPU_OP(attn, attn_args)
BACKEND_CPU_OP(moe_route, moe_route_args)
BACKEND_CPU_OP(moe_ffn, moe_ffn_args)
BACKEND_CPU_OP(ssm_conv, ssm_conv_args)
BACKEND_CPU_OP(gdn, gdn_args)
BACKEND_CPU_OP(embed, embed_args)
BACKEND_CPU_OP(kv_store, kv_store_args)
BACKEND_CPU_OP(sample, sample_args)
BACKEND_CPU_OP(spec_accept, spec_accept_args)

static const struct infer_backend_ops backend_cpu_ops = {
    .name = "cpu",
    .destroy = backend_cpu_destroy,
    .alloc = backend_cpu_alloc,
    .free = backend_cpu_free_buf,
    .upload = backend_cpu_copy,
    .download = backend_cpu_copy,
    .sync = backend_cpu_sync,
    .copy = backend_cpu_copy,
    .zero = backend_cpu_zero,
    .mem_info = backend_cpu_mem_info,
    .host_alloc = backend_cpu_alloc,
    .host_free = backend_cpu_free_buf,
    .stage_in = backend_cpu_copy,
    .stage_out = backend_cpu_copy,
    .run = backend_cpu_run,
    .mmv_act_type = mmv_act_type_cpu,
    .quantize = backend_cpu_quantize,
    .mmv = backend_cpu_mmv,
    .mm = backend_cpu_mm,
    .mmv_multi = backend_cpu_mmv_multi,
    .norm = backend_cpu_norm,
    .rope = backend_cpu_rope,
    .act = backend_cpu_act,
    .attn = backend_cpu_attn,
    .moe_route = backend_cpu_moe_route,
    .moe_ffn = backend_cpu_moe_ffn,
    .ssm_conv = backend_cpu_ssm_conv,
    .gdn = backend_cpu_gdn,
    .embed = backend_cpu_embed,
    .kv_store = backend_cpu_kv_store,
    .sample = backend_cpu_sample,
    .spec_accept = backend_cpu_spec_accept,
};

infer_status backend_cpu_create(int n_threads, struct infer_backend **out) {
    infer_status st = INFER_OK;
    *out = NULL;
    struct backend_cpu *c = xcalloc(1, sizeof *c);
    if (!c) return INFER_OOM("cpu backend");
    TRY(pool_create(n_threads, &c->pool));
    (void)cpu_isa(); /* probes the CPU once here, before worker threads race to do it */
    c->base.ops = &backend_cpu_ops;
    c->base.impl = c;
    *out = &c->base;
    return INFER_OK;
fail:
    xfree(c);
    return st;
}

void backend_free(struct infer_backend *b) {
    if (b) b->ops->destroy(b);
}
