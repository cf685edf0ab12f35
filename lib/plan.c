/* plan: placement, accounting and automatic fit (see plan.h for what a plan says and why).
 *
 * Layout: plan_place() sets every home from two numbers (trunk layers on the GPU, MoE layers whose experts
 * stay on the host); plan_home_bytes() sums what one home holds at a given context size; plan_fit() is the
 * automatic choice of those two numbers; plan_tp() is tensor parallelism's placement and plan_tp_home_bytes()
 * its accounting (per rank, on the rank's view of the model); plan_make() resolves the params and puts it
 * together.
 */
#include "plan.h"

#include <inttypes.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "ctx_stages.h"

static uint64_t plan_round(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

uint64_t plan_bytes_total(const struct plan_bytes *b) {
    return b->weights + b->kv + b->state + b->scratch + b->overhead;
}

int32_t plan_tp_rank_of(const struct plan *p, int32_t home) {
    for (int32_t r = 0; p->split_mode == INFER_SPLIT_TENSOR && r < p->tp; r++)
        if (p->tp_dev[r] == home) return r;
    return -1;
}

int plan_uses(const struct plan *p, int32_t home) {
    if (plan_tp_rank_of(p, home) >= 0) return 1;
    if (p->home_embd == home || p->home_head == home) return 1;
    for (int32_t il = 0; il < p->n_layer_all; il++)
        if (p->layer_home[il] == home || p->exps_home[il] == home) return 1;
    return 0;
}

int plan_uses_gpu(const struct plan *p) {
    for (int32_t d = 0; d < p->n_dev; d++)
        if (plan_uses(p, d)) return 1;
    return plan_uses(p, p->gpu);
}

int plan_is_split(const struct plan *p) {
    if (p->split_mode == INFER_SPLIT_TENSOR) return 0;
    int32_t homes = plan_uses(p, PLAN_HOST);
    for (int32_t d = 0; d < PLAN_MAX_DEVICES; d++) homes += plan_uses(p, d);
    return homes > 1;
}

int plan_offloads_experts(const struct plan *p) {
    for (int32_t il = 0; il < p->n_layer_all; il++)
        if (p->exps_home[il] != p->layer_home[il]) return 1;
    return 0;
}

/* ---- placement ---- */

static int plan_has_experts(const struct infer_model *m, int32_t il) { return m->layers[il].ffn_gate_exps != NULL; }

/* The device of GPU entry i of n (the GPU layers in order, then the head when it goes too): main_gpu, or with a
 * layer split llama.cpp's rule, the first device whose cumulative share exceeds i / n. */
static int32_t plan_device_of(const struct plan *p, int32_t i, int32_t n) {
    if (p->split_mode != INFER_SPLIT_LAYER) return p->gpu;
    const double x = (double)i / (double)n;
    double cum = 0;
    int32_t last = p->gpu;
    for (int32_t d = 0; d < p->n_dev; d++) {
        if (p->share[d] <= 0) continue;
        cum += p->share[d];
        last = d;
        if (x < cum) return d;
    }
    return last;
}

/* The runs of layer_home. */
static void plan_segments(struct plan *p) {
    p->n_seg = 0;
    for (int32_t il = 0; il < p->n_layer_all; il++) {
        if (p->n_seg > 0 && p->seg[p->n_seg - 1].home == p->layer_home[il]) {
            p->seg[p->n_seg - 1].count++;
            continue;
        }
        p->seg[p->n_seg++] = (struct plan_segment){.first = il, .count = 1, .home = p->layer_home[il]};
    }
}

/* Whether the head's device keeps a copy of the token table for the MTP blocks, whose draft tokens' rows are read
 * there (a layer split puts the table with layer 0): a tied head has that copy anyway; an untied one gets it when
 * the context planned for drafts (the table's bytes more there), else each draft's row is read on the host and goes
 * up (ctx_stage_desc.embd_away). The host's table (expert offload) stays where it is: device memory is short. */
static int plan_embd_head(const struct plan *p, const struct infer_model *m) {
    const int apart = p->home_head != PLAN_HOST && p->home_embd != PLAN_HOST && p->home_embd != p->home_head;
    const int reads = p->n_layer_all > p->n_layer && !m->layers[p->n_layer].nextn_embed_tokens;
    return apart && reads && (m->tied || p->ctx.n_draft > 0);
}

/* The layers and the head where a load puts them (model_placement, the one rule: the last n_gpu trunk layers
 * on the GPU, the head and the MTP blocks too when n_gpu > n_layer; with a layer split those in turn over the
 * devices); the experts of the first n_cpu_moe MoE layers on the host; the embedding with layer 0 when the
 * head is on a GPU (everything is) and no experts are offloaded, else on the host. */
static void plan_place(struct plan *p, const struct infer_model *m, int32_t n_gpu, int32_t n_cpu_moe) {
    int32_t layer0;
    int head;
    model_placement(&m->hp, n_gpu, &layer0, &head);
    const int32_t n_entries = p->n_layer - layer0 + head;
    p->n_gpu_layers = n_gpu;
    p->n_cpu_moe = n_cpu_moe;
    p->home_head = head ? plan_device_of(p, n_entries - 1, n_entries) : PLAN_HOST;
    int32_t moe_seen = 0;
    for (int32_t il = 0; il < p->n_layer_all; il++) {
        const int on_gpu = il < p->n_layer ? il >= layer0 : head;
        p->layer_home[il] = !on_gpu ? PLAN_HOST : il < p->n_layer ? plan_device_of(p, il - layer0, n_entries) : p->home_head;
        p->exps_home[il] = p->layer_home[il];
        if (!plan_has_experts(m, il)) continue;
        if (moe_seen < n_cpu_moe) p->exps_home[il] = PLAN_HOST;
        moe_seen++;
        if (p->ot_exps[il] != PLAN_NO_OVERRIDE) p->exps_home[il] = p->ot_exps[il];
    }
    int offload = 0;
    for (int32_t il = 0; il < p->n_layer_all; il++) {
        p->exps_off[il] = p->exps_home[il] == PLAN_HOST && p->layer_home[il] != PLAN_HOST;
        offload |= p->exps_off[il];
    }
    /* the token table (one row read per token) stays on the host where GPU memory is short, as llama.cpp keeps it:
     * under expert offload, unless it is also the (tied) head */
    p->home_embd = head && !(offload && !m->tied) ? p->layer_home[0] : PLAN_HOST;
    p->embd_head = plan_embd_head(p, m);
    plan_segments(p);
}

/* ---- tensor overrides (llama.cpp's -ot PATTERN=DEVICE) ---- */

struct plan_override {
    regex_t re;
    int32_t home;
};

/* Parses "PATTERN=DEVICE[,...]" into ot (at most cap entries); *n of them compiled (free them with regfree). */
static infer_status plan_overrides_parse(const char *spec, struct plan_override *ot, int32_t cap, int32_t *n) {
    *n = 0;
    for (const char *s = spec; s && *s;) {
        const char *end = strchr(s, ',');
        const size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *eq = memchr(s, '=', len);
        if (!eq || eq == s)
            return infer_fail(INFER_E_ARG, "tensor overrides: '%.*s': expected PATTERN=DEVICE (DEVICE CPU or CUDA0...)",
                              (int)len, s);
        const char *dev = eq + 1;
        const size_t dev_len = len - (size_t)(dev - s);
        int32_t home;
        char *tail = NULL;
        if (dev_len == 3 && !memcmp(dev, "CPU", 3)) {
            home = PLAN_HOST;
        } else if (dev_len > 4 && !memcmp(dev, "CUDA", 4) && dev[4] >= '0' && dev[4] <= '9' &&
                   (home = (int32_t)strtol(dev + 4, &tail, 10), tail == dev + dev_len) && home < PLAN_MAX_DEVICES) {
        } else {
            return infer_fail(INFER_E_ARG, "tensor overrides: '%.*s': unknown device '%.*s' (expected CPU or CUDA0, "
                              "CUDA1, ...)", (int)len, s, (int)dev_len, dev);
        }
        if (*n == cap) return infer_fail(INFER_E_ARG, "tensor overrides: more than %d patterns", cap);
        /* the pattern, with \d (which POSIX lacks and llama.cpp's users write) as [0-9] */
        char pat[512];
        size_t o = 0;
        for (const char *c = s; c < eq; c++) {
            if (o + 6 >= sizeof pat) return infer_fail(INFER_E_ARG, "tensor overrides: pattern '%.*s' is too long",
                                                       (int)(eq - s), s);
            if (c[0] == '\\' && c + 1 < eq && c[1] == 'd') {
                memcpy(pat + o, "[0-9]", 5), o += 5, c++;
                continue;
            }
            pat[o++] = *c;
        }
        pat[o] = 0;
        if (regcomp(&ot[*n].re, pat, REG_EXTENDED | REG_NOSUB))
            return infer_fail(INFER_E_ARG, "tensor overrides: '%.*s' is not a valid regular expression", (int)(eq - s), s);
        ot[(*n)++].home = home;
        s = end ? end + 1 : s + len;
    }
    return INFER_OK;
}

/* The home the first matching override gives name, or PLAN_NO_OVERRIDE. */
static int32_t plan_override_home(const struct plan_override *ot, int32_t n, const char *name) {
    for (int32_t i = 0; i < n; i++)
        if (regexec(&ot[i].re, name, 0, NULL, 0) == 0) return ot[i].home;
    return PLAN_NO_OVERRIDE;
}

/* ot_exps of every MoE layer from its three expert tensors (they must agree). */
static infer_status plan_overrides_experts(struct plan *p, const struct infer_model *m, const struct plan_override *ot,
                                           int32_t n) {
    for (int32_t il = 0; il < p->n_layer_all; il++) {
        p->ot_exps[il] = PLAN_NO_OVERRIDE;
        const struct model_layer *L = &m->layers[il];
        if (!L->ffn_gate_exps) continue;
        const struct gguf_tensor *t[3] = {L->ffn_gate_exps, L->ffn_up_exps, L->ffn_down_exps};
        int32_t h[3];
        for (int i = 0; i < 3; i++) h[i] = plan_override_home(ot, n, t[i]->name);
        if (h[0] != h[1] || h[0] != h[2])
            return infer_fail(INFER_E_UNSUPPORTED, "tensor overrides: %s, %s and %s go to different devices; the routed "
                              "experts of a layer run in one place", t[0]->name, t[1]->name, t[2]->name);
        p->ot_exps[il] = h[0];
    }
    return INFER_OK;
}

/* After placement: every override must describe what runs — the routed experts on the host under a GPU layer,
 * or anything on the home it already has. */
static infer_status plan_overrides_check(const struct plan *p, const struct infer_model *m, const struct plan_override *ot,
                                         int32_t n) {
    const struct gguf_file *f = m->gguf;
    for (int64_t i = 0; i < f->n_tensors && n > 0; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const int32_t want = plan_override_home(ot, n, t->name);
        if (want == PLAN_NO_OVERRIDE) continue;
        int il = -1;
        const int layer = sscanf(t->name, "blk.%d.", &il) == 1 && il >= 0 && il < p->n_layer_all;
        if (layer && model_is_expert_tensor(t->name)) {
            if (p->exps_home[il] != PLAN_HOST && p->exps_home[il] != p->layer_home[il])
                return infer_fail(INFER_E_UNSUPPORTED, "tensor overrides: %s to CUDA%d while layer %d runs on %s: routed "
                                  "experts can stay on the CPU under a GPU layer, not the other way", t->name,
                                  p->exps_home[il], il, p->layer_home[il] == PLAN_HOST ? "the CPU" : "another GPU");
            continue;
        }
        const int32_t home = layer ? p->layer_home[il] : p->home_head;
        if (want != home && !(strcmp(t->name, "token_embd.weight") == 0 && want == p->home_embd)) {
            char dev[16];
            if (want == PLAN_HOST) snprintf(dev, sizeof dev, "CPU");
            else snprintf(dev, sizeof dev, "CUDA%d", want);
            return infer_fail(INFER_E_UNSUPPORTED, "tensor overrides: %s to %s: only routed experts (ffn_*_exps) can be "
                              "moved away from their layer (to the CPU); place whole layers with -ngl", t->name, dev);
        }
    }
    return INFER_OK;
}

/* ---- accounting ---- */

/* The home of tensor t under p; *also is a second home (a tied head's copy of token_embd) or -2. */
static int32_t plan_tensor_home(const struct plan *p, const struct infer_model *m, const struct gguf_tensor *t,
                                int32_t *also) {
    int il = -1;
    *also = -2;
    if (sscanf(t->name, "blk.%d.", &il) == 1 && il >= 0 && il < p->n_layer_all)
        return strstr(t->name, "_exps.") ? p->exps_home[il] : p->layer_home[il];
    if (strcmp(t->name, "token_embd.weight") == 0) {
        if ((m->tied || p->embd_head) && p->home_head != p->home_embd) *also = p->home_head;
        return p->home_embd;
    }
    return p->home_head; /* output_norm, output, rope_freqs */
}

/* The stages of a context under p as infer_ctx_create builds them (ctx_stages.c, the same function), as
 * dimensions at context size n_ctx, with each stage's home; gives how many. */
static int32_t plan_stages(const struct plan *p, const struct infer_model *m, int32_t n_ctx, struct ctx_dims *st,
                           int32_t *home) {
    struct ctx_stages sp;
    if (ctx_stages_make(m, p->layer_home, p->home_embd, p->home_head, p->embd_head, p->exps_off, &sp) != INFER_OK)
        return 0;
    for (int32_t k = 0; k < sp.n_st; k++) {
        st[k] = p->ctx;
        st[k].n_ctx = n_ctx;
        st[k].on_device = sp.st[k].home != CTX_HOST;
        st[k].heads = sp.st[k].heads;
        st[k].x_host = sp.st[k].x_host;
        st[k].exps_host = sp.st[k].exps_host;
        st[k].embd_away = sp.st[k].embd_away;
        home[k] = sp.st[k].home;
    }
    return sp.n_st;
}

/* Scratch of every stage at home: the host keeps every stage's host arrays (and page-locked buffers); each
 * stage's backend buffers are at the stage's home. */
static uint64_t plan_scratch_bytes(const struct plan *p, const struct infer_model *m, int32_t home, int32_t n_ctx) {
    struct ctx_dims st[CTX_MAX_STAGES];
    int32_t st_home[CTX_MAX_STAGES];
    const int32_t n = plan_stages(p, m, n_ctx, st, st_home);
    const uint64_t align = home == PLAN_HOST ? 1 : PLAN_ALIGN;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (home == PLAN_HOST)
            total += ctx_scratch_bytes(m, &st[i], CTX_SCRATCH_HOST, 1) + ctx_scratch_bytes(m, &st[i], CTX_SCRATCH_PINNED, 1);
        if (home == st_home[i]) total += ctx_scratch_bytes(m, &st[i], CTX_SCRATCH_BACKEND, align);
    }
    return total;
}

/* The cells and state of a cache of c (kv_cache_bytes_of) into b, each buffer rounded up to align. */
static void plan_cache_bytes(const struct kv_cache_bytes *c, uint64_t align, struct plan_bytes *b) {
    b->kv = plan_round((uint64_t)c->k, align) + plan_round((uint64_t)c->v, align);
    const double state[] = {c->conv, c->ssm, c->h, c->ring_conv, c->ring_ssm, c->ring_h, c->ckpt_conv, c->ckpt_ssm,
                            c->ckpt_h};
    b->state = 0;
    for (size_t i = 0; i < sizeof state / sizeof *state; i++) b->state += plan_round((uint64_t)state[i], align);
}

/* ---- tensor parallelism: each rank's part (tp.h, model_tp.c, context.c ctx_create_tp) ---- */

/* Rank r's view of m as model_tp.c makes it for sizing: its hyperparameters (its heads, its FFN columns). */
static void plan_tp_view(const struct plan *p, const struct infer_model *m, int32_t r, struct infer_model *v) {
    *v = *m;
    tp_hparams(m, &p->tp_rk[r], &v->hp);
}

/* Rank r's stage as ctx_create_tp builds it: every trunk layer on the rank's device, the logits on rank 0, each
 * rank's rows of the head. */
static struct ctx_dims plan_tp_dims(const struct plan *p, int32_t r, int32_t n_ctx) {
    struct ctx_dims d = p->ctx;
    d.n_ctx = n_ctx;
    d.on_device = 1;
    d.heads = r == 0;
    d.x_host = 0;
    d.exps_host = 0;
    d.head_rows = p->tp > 1 ? p->tp_rk[r].v1 - p->tp_rk[r].v0 : 0;
    return d;
}

/* What home holds under split_mode tensor at context size n_ctx: on a rank's device its shards, the cells and state
 * of its heads (ctx_check_fit's count on its view), its stage's scratch and the overhead with NCCL's; on the host
 * the tensors no rank holds and every stage's host arrays. */
static void plan_tp_home_bytes(const struct plan *p, const struct infer_model *m, int32_t home, int32_t n_ctx,
                               struct plan_bytes *b) {
    struct infer_model v;
    memset(b, 0, sizeof *b);
    if (home == PLAN_HOST) {
        b->weights = p->tp_host_weights;
        for (int32_t r = 0; r < p->tp; r++) {
            plan_tp_view(p, m, r, &v);
            const struct ctx_dims d = plan_tp_dims(p, r, n_ctx);
            b->scratch += ctx_scratch_bytes(&v, &d, CTX_SCRATCH_HOST, 1);
            b->scratch += ctx_scratch_bytes(&v, &d, CTX_SCRATCH_PINNED, 1);
        }
        return;
    }
    const int32_t r = plan_tp_rank_of(p, home);
    if (r < 0) return;
    plan_tp_view(p, m, r, &v);
    const struct ctx_dims d = plan_tp_dims(p, r, n_ctx);
    const int drafting = d.n_draft > 0, mtp = ctx_dims_mtp(&d);
    int32_t n_kv = 0, n_gdn = 0;
    for (int32_t il = 0; il < p->n_layer_all; il++) {
        const enum kv_cache_kind kind = il < p->n_layer || mtp ? kv_cache_layer(&v, il, drafting) : KV_CACHE_NONE;
        n_kv += kind == KV_CACHE_CELLS;
        n_gdn += kind == KV_CACHE_STATE;
    }
    struct kv_cache_bytes c;
    kv_cache_bytes_of(&v.hp, n_kv, n_gdn, mtp, d.n_seq, n_ctx, drafting ? d.n_draft + 1 : 0, d.kv_type, &c);
    b->weights = p->tp_weights[r];
    plan_cache_bytes(&c, PLAN_ALIGN, b);
    b->scratch = ctx_scratch_bytes(&v, &d, CTX_SCRATCH_BACKEND, PLAN_ALIGN);
    b->overhead = p->dev_overhead[home] + PLAN_TP_NCCL_RESERVE;
}

/* What home holds at context size n_ctx: weights, cells and state of its layers, scratch, overhead. */
static void plan_home_bytes(const struct plan *p, const struct infer_model *m, int32_t home, int32_t n_ctx,
                            struct plan_bytes *b) {
    if (p->split_mode == INFER_SPLIT_TENSOR) {
        plan_tp_home_bytes(p, m, home, n_ctx, b);
        return;
    }
    const uint64_t align = home == PLAN_HOST ? 1 : PLAN_ALIGN;
    const int drafting = p->ctx.n_draft > 0;
    memset(b, 0, sizeof *b);
    if (home != PLAN_HOST && !plan_uses(p, home)) return; /* the host always keeps the context's host arrays */
    const struct gguf_file *f = m->gguf;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        int32_t also;
        const int32_t h = plan_tensor_home(p, m, &f->tensors[i], &also);
        if (h == home || also == home) b->weights += plan_round(f->tensors[i].nbytes, align);
    }
    int32_t n_kv = 0, n_gdn = 0;
    for (int32_t il = 0; il < p->n_layer_all; il++) {
        if (p->layer_home[il] != home) continue;
        const enum kv_cache_kind kind = kv_cache_layer(m, il, drafting);
        n_kv += kind == KV_CACHE_CELLS;
        n_gdn += kind == KV_CACHE_STATE;
    }
    struct kv_cache_bytes c;
    kv_cache_bytes_of(&m->hp, n_kv, n_gdn, drafting && p->home_head == home, p->ctx.n_seq, n_ctx,
                      drafting ? p->ctx.n_draft + 1 : 0, p->ctx.kv_type, &c);
    plan_cache_bytes(&c, align, b);
    b->scratch = plan_scratch_bytes(p, m, home, n_ctx);
    if (home != PLAN_HOST) b->overhead = p->dev_overhead[home];
}

static uint64_t plan_dev_total(const struct plan *p, const struct infer_model *m, int32_t d, int32_t n_ctx) {
    struct plan_bytes b;
    plan_home_bytes(p, m, d, n_ctx, &b);
    return plan_bytes_total(&b);
}

/* The first device the plan uses whose total at n_ctx exceeds its free memory, or -1 when every one fits. */
static int32_t plan_unfit_device(const struct plan *p, const struct infer_model *m, int32_t n_ctx) {
    for (int32_t d = 0; d < p->n_dev; d++)
        if (plan_uses(p, d) && plan_dev_total(p, m, d, n_ctx) > p->dev_free[d]) return d;
    return -1;
}

static int plan_gpu_fits(const struct plan *p, const struct infer_model *m) {
    return plan_unfit_device(p, m, p->ctx.n_ctx) < 0;
}

/* The largest n_ctx in [0, n_ctx_max] with which every device fits (each total grows with n_ctx). */
static int32_t plan_ctx_fit(const struct plan *p, const struct infer_model *m) {
    if (plan_unfit_device(p, m, p->n_ctx_max) < 0) return p->n_ctx_max;
    int32_t lo = 0, hi = p->n_ctx_max; /* fits(lo) or lo = 0; fits(hi) does not */
    while (hi - lo > 1) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (plan_unfit_device(p, m, mid) < 0)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* ---- automatic fit ---- */

static infer_status plan_fit(struct plan *p, const struct infer_model *m, int32_t n_cpu_moe_min) {
    const int32_t all = p->n_layer + 1;
    plan_place(p, m, all, n_cpu_moe_min);
    if (plan_gpu_fits(p, m)) return INFER_OK;
    if (p->n_moe > 0) {
        for (int32_t k = n_cpu_moe_min + 1; k <= p->n_moe; k++) {
            plan_place(p, m, all, k);
            if (plan_gpu_fits(p, m)) return INFER_OK;
        }
        struct plan_bytes b;
        const int32_t d = plan_unfit_device(p, m, p->ctx.n_ctx);
        plan_home_bytes(p, m, d, p->ctx.n_ctx, &b);
        return infer_fail(INFER_E_OOM, "automatic fit: with every routed expert in host memory, the rest of %s needs "
                          "%.1f MiB on CUDA device %d (weights %.1f, KV %.1f, state %.1f, scratch %.1f, overhead "
                          "%.1f MiB) but it has %.1f MiB free; use a smaller context (-c) or -ngl 0 (CPU)", p->arch,
                          (double)plan_bytes_total(&b) / 1048576.0, d, (double)b.weights / 1048576.0,
                          (double)b.kv / 1048576.0, (double)b.state / 1048576.0, (double)b.scratch / 1048576.0,
                          (double)b.overhead / 1048576.0, (double)p->dev_free[d] / 1048576.0);
    }
    for (int32_t n = p->n_layer; n > 0; n--) {
        plan_place(p, m, n, n_cpu_moe_min);
        if (plan_gpu_fits(p, m)) return INFER_OK;
    }
    plan_place(p, m, 0, n_cpu_moe_min); /* not even one layer: the host runs it all */
    return INFER_OK;
}

/* ---- a layer split over several devices ---- */

/* The devices' shares of the GPU layers (split_mode layer): tensor_split normalised, or the devices' free memory
 * when it is all 0 (equal shares when that is not known). p->gpu becomes the first device with a share. */
static infer_status plan_shares(struct plan *p, const infer_model_params *mp) {
    double sum = 0;
    for (int32_t d = 0; d < PLAN_MAX_DEVICES; d++) {
        const float t = mp->tensor_split[d];
        if (!(t >= 0.0f) || !isfinite(t))
            return infer_fail(INFER_E_ARG, "plan: tensor_split[%d] = %g: expected a share >= 0", d, (double)t);
        if (t > 0 && d >= p->n_dev)
            return infer_fail(INFER_E_ARG, "plan: tensor_split gives device %d a share but %d device%s known", d,
                              p->n_dev, p->n_dev == 1 ? " is" : "s are");
        sum += t;
    }
    if (p->n_dev == 0)
        return infer_fail(INFER_E_ARG, "plan: split_mode layer: no CUDA device known (state their memory: "
                          "infer_plan_params.free_bytes, llm-run --dry-run-mem)");
    for (int32_t d = 0; d < p->n_dev; d++) {
        const int unknown = p->dev_free[d] == UINT64_MAX;
        p->share[d] = sum > 0 ? mp->tensor_split[d] : unknown ? 1.0 : (double)p->dev_free[d];
    }
    double total = 0;
    for (int32_t d = 0; d < p->n_dev; d++) total += p->share[d];
    p->gpu = -1;
    for (int32_t d = 0; d < p->n_dev; d++) {
        p->share[d] = total > 0 ? p->share[d] / total : 1.0 / p->n_dev;
        if (p->gpu < 0 && p->share[d] > 0) p->gpu = d;
    }
    p->split_mode = INFER_SPLIT_LAYER;
    return INFER_OK;
}

/* ---- tensor parallelism: the placement ---- */

infer_status plan_tp_check(const struct infer_model *m, const infer_model_params *mp) {
    const int all = mp->n_gpu_layers < 0 || mp->n_gpu_layers > m->hp.n_layer; /* INFER_GPU_LAYERS_AUTO too */
    const int ot = mp->tensor_overrides && *mp->tensor_overrides;
    if (all && !mp->n_cpu_moe && !ot) return INFER_OK;
    return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor puts every layer on every device: it takes n_gpu_layers "
                      "above the layer count (-ngl 99) and no expert offload (--n-cpu-moe, -ot); got n_gpu_layers %d, "
                      "n_cpu_moe %d%s", mp->n_gpu_layers, mp->n_cpu_moe, ot ? ", tensor overrides" : "");
}

infer_status plan_tp_devices(const infer_model_params *mp, int32_t n_dev, int32_t *devs, int32_t *n) {
    float share = 0;
    int any = 0;
    *n = 0;
    for (int32_t d = 0; d < INFER_MAX_DEVICES; d++) any |= mp->tensor_split[d] != 0;
    for (int32_t d = 0; d < INFER_MAX_DEVICES; d++) {
        const float t = mp->tensor_split[d];
        if (any && t == 0) continue;
        if (d >= n_dev) {
            if (!any) break;
            return infer_fail(INFER_E_ARG, "split_mode tensor: tensor_split gives device %d a share but %d device%s "
                              "known", d, n_dev, n_dev == 1 ? " is" : "s are");
        }
        if (!(t >= 0) || !isfinite(t) || (share > 0 && t != share))
            return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor: tensor_split[%d] = %g: the shards are equal, so "
                              "the devices' shares must be (0 leaves a device out)", d, (double)t);
        share = t;
        devs[(*n)++] = d;
    }
    if (*n == 0) return infer_fail(INFER_E_DEVICE, "split_mode tensor: no CUDA device");
    return INFER_OK;
}

/* Every layer on the group, the MTP blocks too, cut as the trunk's (its home recorded as rank 0's device), the token
 * table and the logits on rank 0, the head cut over the ranks; each rank's shards sized as model_tp.c allocates
 * them. */
static infer_status plan_tp(struct plan *p, const struct infer_model *m, const infer_model_params *mp) {
    infer_status st = INFER_OK;
    const struct gguf_file *f = m->gguf;
    struct tp_slice *sl = NULL;
    uint8_t *held = NULL;
    TRY(plan_tp_check(m, mp));
    TRY(plan_tp_devices(mp, p->n_dev, p->tp_dev, &p->tp));
    TRY(tp_ranks(m, p->tp, p->tp_rk));
    sl = xcalloc((size_t)f->n_tensors + 1, sizeof *sl);
    held = xcalloc((size_t)f->n_tensors + 1, 1);
    if (!sl || !held) {
        st = INFER_OOM("the plan's shards");
        goto fail;
    }
    for (int32_t r = 0; r < p->tp; r++) {
        p->tp_weights[r] = model_tp_rank_bytes(m, r, &p->tp_rk[r], sl);
        for (int64_t i = 0; i < f->n_tensors; i++) held[i] |= (uint8_t)sl[i].copy;
    }
    p->tp_host_weights = 0;
    for (int64_t i = 0; i < f->n_tensors; i++)
        if (!held[i]) p->tp_host_weights += f->tensors[i].nbytes;
    p->split_mode = INFER_SPLIT_TENSOR;
    p->gpu = p->tp_dev[0];
    p->n_gpu_layers = p->n_layer + 1;
    p->n_cpu_moe = 0;
    for (int32_t il = 0; il < p->n_layer_all; il++) {
        p->layer_home[il] = p->gpu;
        p->exps_home[il] = p->layer_home[il];
        p->exps_off[il] = 0;
    }
    p->home_embd = p->home_head = p->gpu;
    plan_segments(p);
fail:
    xfree(sl);
    xfree(held);
    return st;
}

/* The automatic fit of split_mode tensor: every rank's part within its device's free memory, else the first rank
 * that does not fit, with its numbers. */
static infer_status plan_tp_fit(const struct plan *p, const struct infer_model *m) {
    const int32_t d = plan_unfit_device(p, m, p->ctx.n_ctx);
    if (d < 0) return INFER_OK;
    struct plan_bytes b;
    plan_home_bytes(p, m, d, p->ctx.n_ctx, &b);
    return infer_fail(INFER_E_OOM, "automatic fit: split_mode tensor over %d devices: rank %d's part of %s needs "
                      "%.1f MiB on CUDA device %d (weights %.1f, KV %.1f, state %.1f, scratch %.1f, overhead %.1f "
                      "MiB) but it has %.1f MiB free; use more devices (-ts), a smaller context (-c) or -sm layer "
                      "with expert offload", p->tp, plan_tp_rank_of(p, d), p->arch,
                      (double)plan_bytes_total(&b) / 1048576.0, d, (double)b.weights / 1048576.0,
                      (double)b.kv / 1048576.0, (double)b.state / 1048576.0, (double)b.scratch / 1048576.0,
                      (double)b.overhead / 1048576.0, (double)p->dev_free[d] / 1048576.0);
}

/* ---- the whole plan ---- */

void plan_free(struct plan *p) {
    if (!p) return;
    xfree(p->layer_home);
    xfree(p->exps_home);
    xfree(p->ot_exps);
    xfree(p->exps_off);
    xfree(p->seg);
    xfree(p);
}

infer_status plan_make(const struct infer_model *m, const infer_model_params *mp, const infer_ctx_params *cp,
                       const struct plan_devices *dev, struct plan **out) {
    infer_status st = INFER_OK;
    const infer_model_params defaults = infer_model_params_default();
    if (!mp) mp = &defaults;
    *out = NULL;
    if (mp->n_cpu_moe < 0)
        return infer_fail(INFER_E_ARG, "plan: n_cpu_moe %d: expected 0 (none), N (the first N MoE layers) or more than "
                          "the layer count (all)", mp->n_cpu_moe);
    if (mp->main_gpu < 0) return infer_fail(INFER_E_ARG, "plan: main_gpu %d: expected a device index >= 0", mp->main_gpu);
    if (mp->split_mode < INFER_SPLIT_NONE || mp->split_mode > INFER_SPLIT_TENSOR)
        return infer_fail(INFER_E_ARG, "plan: split_mode %d: expected none (0), layer (1) or tensor (2)", mp->split_mode);
    const int32_t n_dev = dev->n;
    if (n_dev < 0 || n_dev > PLAN_MAX_DEVICES)
        return infer_fail(INFER_E_ARG, "plan: %d devices: expected 0..%d", n_dev, PLAN_MAX_DEVICES);
    struct ctx_dims dims;
    st = ctx_dims_resolve(m, cp, 0, "plan", &dims);
    if (st != INFER_OK) return st;
    struct plan_override ot[PLAN_MAX_OVERRIDES];
    int32_t n_ot = 0;
    struct plan *p = xcalloc(1, sizeof *p);
    if (!p) return INFER_OOM("plan");
    const int32_t n_all = (int32_t)m->hp.n_layer_all;
    p->layer_home = xcalloc((size_t)n_all, sizeof *p->layer_home);
    p->exps_home = xcalloc((size_t)n_all, sizeof *p->exps_home);
    p->ot_exps = xcalloc((size_t)n_all, sizeof *p->ot_exps);
    p->exps_off = xcalloc((size_t)n_all, 1);
    p->seg = xcalloc((size_t)n_all, sizeof *p->seg);
    if (!p->layer_home || !p->exps_home || !p->ot_exps || !p->exps_off || !p->seg) {
        st = INFER_OOM("plan");
        goto fail;
    }
    p->arch = m->arch->name;
    p->n_layer = (int32_t)m->hp.n_layer;
    p->n_layer_all = n_all;
    for (int32_t il = 0; il < n_all; il++) {
        p->n_attn += il < p->n_layer && m->layers[il].kind == ARCH_LAYER_ATTN;
        p->n_gdn += il < p->n_layer && m->layers[il].kind == ARCH_LAYER_GDN;
        p->n_moe += plan_has_experts(m, il);
    }
    p->gpu = mp->main_gpu;
    p->tp = 1;
    p->ctx = dims;
    p->n_dev = n_dev;
    p->measured = dev->measured;
    for (int32_t i = 0; i < n_dev; i++) {
        p->dev_free[i] = dev->free[i];
        p->dev_overhead[i] = dev->measured ? PLAN_GPU_FLOOR + PLAN_GPU_BACKENDS * dev->backend[i] : PLAN_GPU_OVERHEAD;
    }
    p->fit_on = mp->fit != 0;
    p->n_ctx_max = (int32_t)(m->hp.n_ctx_train > dims.n_ctx ? m->hp.n_ctx_train : dims.n_ctx);
    const int32_t n_cpu_moe = mp->n_cpu_moe < p->n_moe ? mp->n_cpu_moe : p->n_moe;
    const int automatic = mp->n_gpu_layers == INFER_GPU_LAYERS_AUTO;
    int32_t n_gpu = mp->n_gpu_layers < 0 || mp->n_gpu_layers > p->n_layer ? p->n_layer + 1 : mp->n_gpu_layers;
    if (automatic && n_dev == 0) n_gpu = 0; /* nothing to fit on: the host */
    if (mp->split_mode == INFER_SPLIT_TENSOR) {
        TRY(plan_tp(p, m, mp));
        p->auto_fit = automatic && p->fit_on;
        if (p->auto_fit) TRY(plan_tp_fit(p, m));
    } else if (n_gpu > 0 && mp->split_mode == INFER_SPLIT_LAYER) {
        TRY(plan_shares(p, mp));
    } else if (n_gpu > 0 && p->gpu >= n_dev) {
        st = infer_fail(INFER_E_ARG, "plan: main_gpu %d: %d device%s known (state the memory of a device you do not "
                        "have: infer_plan_params.free_bytes, llm-run --dry-run-mem)", p->gpu, n_dev,
                        n_dev == 1 ? "" : "s");
        goto fail;
    }
    if (mp->split_mode != INFER_SPLIT_TENSOR) { /* plan_tp refused overrides */
        TRY(plan_overrides_parse(mp->tensor_overrides, ot, PLAN_MAX_OVERRIDES, &n_ot));
        TRY(plan_overrides_experts(p, m, ot, n_ot));
        if (automatic && n_gpu > 0 && p->fit_on) {
            p->auto_fit = 1;
            TRY(plan_fit(p, m, n_cpu_moe));
        } else {
            plan_place(p, m, n_gpu, n_cpu_moe);
        }
        TRY(plan_overrides_check(p, m, ot, n_ot));
    }
    plan_home_bytes(p, m, PLAN_HOST, dims.n_ctx, &p->host);
    p->fits = 1;
    for (int32_t i = 0; i < n_dev; i++) {
        plan_home_bytes(p, m, i, dims.n_ctx, &p->dev[i]);
        if (plan_bytes_total(&p->dev[i]) > p->dev_free[i]) p->fits = 0;
    }
    int32_t n_kv = 0;
    for (int32_t il = 0; il < n_all; il++) n_kv += kv_cache_layer(m, il, dims.n_draft > 0) == KV_CACHE_CELLS;
    struct kv_cache_bytes one;
    kv_cache_bytes_of(&m->hp, n_kv, 0, 0, 1, 1, 0, dims.kv_type, &one);
    p->kv_per_token = (uint64_t)(one.k + one.v);
    p->n_ctx_fit = plan_uses_gpu(p) && n_dev > 0 ? plan_ctx_fit(p, m) : -1;
    for (int32_t i = 0; i < n_ot; i++) regfree(&ot[i].re);
    *out = p;
    return INFER_OK;
fail:
    for (int32_t i = 0; i < n_ot; i++) regfree(&ot[i].re);
    plan_free(p);
    return st;
}
