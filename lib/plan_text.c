/* plan_text: a plan as the text llm-run --dry-run prints (infer_plan_text).
 *
 * Layout of the text: one line for the model and the context, the placement (layer segments, experts kept
 * on the host, embedding, head; under tensor parallelism the trunk's segment names the group), a table of MiB
 * per home (weights, KV, state, scratch, overhead, total, free), how the devices' memory and overhead were
 * known, then KV bytes per token, the context that would fit, whether it all fits, and a note on splits.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "plan.h"

struct plan_out {
    char *buf;
    int32_t cap, len;
};

static void out_printf(struct plan_out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int32_t room = o->len < o->cap ? o->cap - o->len : 0;
    const int n = vsnprintf(room ? o->buf + o->len : NULL, (size_t)room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += n;
}

static void out_home(char *s, size_t cap, int32_t home) {
    if (home == PLAN_HOST)
        snprintf(s, cap, "host (CPU)");
    else
        snprintf(s, cap, "CUDA%d", home);
}

static double mib(uint64_t b) { return (double)b / 1048576.0; }

/* split_mode tensor's group: its devices, as "CUDA0+CUDA1". */
static void out_group(char *s, size_t cap, const struct plan *p) {
    size_t n = 0;
    s[0] = 0;
    for (int32_t r = 0; r < p->tp && n < cap; r++)
        n += (size_t)snprintf(s + n, cap - n, "%sCUDA%d", r ? "+" : "", p->tp_dev[r]);
}

static void out_range(struct plan_out *o, const struct plan *p, const char *what, int32_t first, int32_t last,
                      int32_t home) {
    char h[PLAN_MAX_DEVICES * 8 + 32], r[64];
    out_home(h, sizeof h, home);
    if (p->split_mode == INFER_SPLIT_TENSOR && home == p->gpu && first < p->n_layer) { /* trunk layers: the group */
        out_group(h, sizeof h - 16, p);
        snprintf(h + strlen(h), 16, " (shards)");
    }
    if (first == last)
        snprintf(r, sizeof r, "%s %d", what, first);
    else
        snprintf(r, sizeof r, "%ss %d-%d", what, first, last);
    out_printf(o, "  %-26s %s\n", r, h);
}

static void out_placement(struct plan_out *o, const struct plan *p) {
    for (int32_t i = 0; i < p->n_seg; i++) {
        const struct plan_segment *s = &p->seg[i];
        const int32_t last = s->first + s->count - 1;
        if (s->first < p->n_layer)
            out_range(o, p, "layer", s->first, last < p->n_layer ? last : p->n_layer - 1, s->home);
        if (last >= p->n_layer)
            out_range(o, p, "MTP block", s->first > p->n_layer ? s->first : p->n_layer, last, s->home);
    }
    for (int32_t il = 0; il < p->n_layer_all;) { /* runs of layers whose experts live apart from the layer */
        if (p->exps_home[il] == p->layer_home[il]) {
            il++;
            continue;
        }
        int32_t end = il;
        while (end + 1 < p->n_layer_all && p->exps_home[end + 1] == p->exps_home[il] &&
               p->exps_home[end + 1] != p->layer_home[end + 1])
            end++;
        out_range(o, p, "experts of layer", il, end, p->exps_home[il]);
        il = end + 1;
    }
    char h[32];
    out_home(h, sizeof h, p->home_embd);
    out_printf(o, "  %-26s %s\n", "token embedding", h);
    out_home(h, sizeof h, p->home_head);
    if (p->embd_head) out_printf(o, "  %-26s %s\n", "its copy for the MTP block", h);
    out_printf(o, "  %-26s %s\n", "output head", h);
}

static void out_memory_row(struct plan_out *o, const char *name, const struct plan_bytes *b, uint64_t free_b,
                           int device) {
    out_printf(o, "  %-8s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f", name, mib(b->weights), mib(b->kv), mib(b->state),
               mib(b->scratch), mib(b->overhead), mib(plan_bytes_total(b)));
    if (device)
        out_printf(o, " %10.1f%s\n", mib(free_b), plan_bytes_total(b) > free_b ? "  does not fit" : "");
    else
        out_printf(o, " %10s\n", "-");
}

int32_t plan_text(const struct plan *p, char *buf, int32_t cap) {
    struct plan_out o = {.buf = buf, .cap = cap > 0 && buf ? cap : 0, .len = 0};
    if (o.cap) buf[0] = 0;
    const char *kv = p->ctx.kv_type == INFER_TYPE_Q8_0 ? "q8_0" : "f16";
    out_printf(&o, "plan: %s, %d layers (%d attention, %d Gated DeltaNet, %d MoE)%s; context %d x %d sequence%s, KV %s, "
               "batch %d%s\n", p->arch, p->n_layer, p->n_attn, p->n_gdn, p->n_moe,
               p->n_layer_all > p->n_layer ? " + MTP" : "", p->ctx.n_ctx, p->ctx.n_seq, p->ctx.n_seq == 1 ? "" : "s",
               kv, p->ctx.n_batch, p->ctx.n_draft ? ", MTP drafting" : "");
    const int tensor = p->split_mode == INFER_SPLIT_TENSOR;
    char group[PLAN_MAX_DEVICES * 8 + 8] = "";
    if (tensor) out_group(group, sizeof group, p);
    out_printf(&o, "placement (%s): n_gpu_layers %d, n_cpu_moe %d, split mode %s, tensor parallel %d%s%s%s\n",
               p->auto_fit ? "automatic fit" : "as asked", p->n_gpu_layers, p->n_cpu_moe,
               tensor ? "tensor" : p->split_mode == INFER_SPLIT_LAYER ? "layer" : "none", p->tp, tensor ? " (" : "",
               group, tensor ? ")" : "");
    out_placement(&o, p);
    out_printf(&o, "memory (MiB) %8s %10s %10s %10s %10s %10s %10s\n", "weights", "KV", "state", "scratch", "overhead",
               "total", "free");
    out_memory_row(&o, "host", &p->host, 0, 0);
    for (int32_t i = 0; i < p->n_dev; i++) {
        char name[16];
        snprintf(name, sizeof name, "CUDA%d", i);
        out_memory_row(&o, name, &p->dev[i], p->dev_free[i], 1);
    }
    if (p->n_dev == 0)
        out_printf(&o, "device memory: no CUDA device\n");
    else if (p->measured) /* the overhead: plan.h PLAN_GPU_OVERHEAD */
        out_printf(&o, "device memory: measured; overhead per GPU: %.0f MiB floor + %d CUDA backends as measured at "
                   "start%s\n", mib(PLAN_GPU_FLOOR), PLAN_GPU_BACKENDS, tensor ? " + NCCL's reserve" : "");
    else
        out_printf(&o, "device memory: as stated; overhead per GPU: %.0f MiB assumed for CUDA and cuBLAS%s\n",
                   mib(PLAN_GPU_OVERHEAD), tensor ? " + NCCL's reserve" : "");
    out_printf(&o, "KV cache: %llu bytes per token per sequence\n", (unsigned long long)p->kv_per_token);
    if (p->n_ctx_fit >= 0)
        out_printf(&o, "context that would fit on the GPU%s: %d (searched up to %d)\n",
                   p->split_mode != INFER_SPLIT_NONE ? "s" : "", p->n_ctx_fit, p->n_ctx_max);
    else
        out_printf(&o, "context that would fit: - (nothing on a GPU)\n");
    out_printf(&o, "fits: %s\n", p->fits ? "yes" : "no");
    if (tensor)
        out_printf(&o, "note: tensor parallelism over %s: every layer's attention and Gated DeltaNet heads and its FFN "
                   "and experts' columns are cut over the devices, each holding its shards, the cells and state of its "
                   "own heads and %.0f MiB for NCCL; one all-reduce of the hidden state per block; the token table and "
                   "the head on CUDA%d%s\n", group, mib(PLAN_TP_NCCL_RESERVE), p->gpu,
                   p->n_layer_all > p->n_layer ? "; the MTP blocks stay in the file (drafting is refused)" : "");
    else if (plan_offloads_experts(p))
        out_printf(&o, "note: this plan keeps routed experts in host memory under GPU layers (expert offload: "
                   "the router and the shared expert run on the GPU, the selected experts on the CPU; per MoE layer "
                   "and token the normed hidden state, the routing and the experts' output cross the bus)\n");
    else if (plan_is_split(p))
        out_printf(&o, "note: this plan splits the layers between homes; it loads and runs (the hidden state "
                   "crosses the bus once per boundary per batch)\n");
    return o.len;
}
