/* test-cuda-offload: expert offload — MoE layers on the GPU whose routed experts stay in host memory and run on
 * the CPU backend's MoE op (n_cpu_moe, --cpu-moe, tensor overrides), alone and under a layer split.
 *
 * On any machine:
 *   - the pieces themselves, without a device: a host model given expert offload by the test hook
 *     ctx_create_offload_on with the CPU backend standing in for the GPU gives the plain CPU context's logits bit
 *     for bit (qwen3moe, qwen35moe with its shared expert, qwen3next; every expert offloaded, two layers', and
 *     under a split at layer 1). One backend's numerics, so any difference is the offload: a piece skipped or run
 *     twice, the routing or the normed hidden state not handed over, the shared expert added twice or not at
 *     all, the experts' output not added back.
 * On a device (the emulator in check-emu):
 *   - qwen3moe, qwen35moe and qwen3next (4 layers) loaded with -ngl 99 --cpu-moe, -ngl 99 --n-cpu-moe 2,
 *     -ngl 99 -ot 'blk\.[01]\.ffn_.*_exps=CPU' (the same placement by pattern) and -ngl 3 --n-cpu-moe 99 (a split
 *     and offload together), in F32 (and Q4_K_M for two of them): a 40-token prompt, 12 decode steps and a
 *     3-token batch against the reference, the same file under ctx_create_offload_on with the GPU part on
 *     tests/gpu_like.c and the experts on the CPU backend — what the device runs, op for op (test-cuda-split's
 *     reasoning; exact mode: every row bit-identical on the emulator); the reference against the plain CPU
 *     context within test-gpu-like's loose bounds;
 *   - the load: the offloaded layers' expert tensors have no device copy and point into the file's mapping, and
 *     the device holds the rest;
 *   - graphs: a decode step launches one graph per piece (layers offloaded + 1) and one per shared expert, each
 *     replayed from the second step on (no kernel launched outside them: the backend keeps a graph per key),
 *     and gives the same logits with INFER_CUDA_GRAPHS=0;
 *   - the bus (emulator counters and infer_ctx_bus_bytes): per offloaded layer and token, the normed hidden
 *     state and the routing (ids and weights) go down and the experts' output comes up; the token lookup runs
 *     on the host (the token table stays there under offload, as llama.cpp keeps it), so x goes up instead of
 *     the token id — nothing else beyond what -ngl 99 moves;
 *   (MTP drafting with offload: test-cuda-mtp.)
 * Without a device the device part prints SKIP and the test exits 77 after the checks above.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "forward.h"
#include "gpu_like.h"
#include "logits_pair.h"
#include "model.h"
#include "t.h"
#ifdef INFER_EMU
#include "emu_api.h"
#endif

enum { N_LAYER = 4, N_PROMPT = 40, N_DECODE = 12, N_CTX = 128, ALL = 99 };

static enum pair_mode mode = PAIR_DEVICE; /* set by the probe */
static char dir[] = "/tmp/test-cuda-offload-XXXXXX";

static const char *synth_file(const char *arch, const char *ftype) {
    static char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 17, sp.n_layer = N_LAYER;
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, arch, ftype);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return NULL;
    }
    return path;
}

/* A load with n_gpu_layers ngl, and n_cpu_moe ncm or the tensor overrides ot (when not NULL). */
static infer_model *load(const char *path, int32_t ngl, int32_t ncm, const char *ot) {
    infer_model_params p = infer_model_params_default();
    p.n_gpu_layers = ngl, p.n_cpu_moe = ncm, p.tensor_overrides = ot;
    p.no_repack = ngl == 0; /* a host model here is the reference the GPU-like backend runs: the file's layout */
    infer_model *m = NULL;
    if (infer_model_load(path, &p, &m) != INFER_OK)
        T_CHECK(0, "load %s -ngl %d --n-cpu-moe %d -ot %s: %s", path, ngl, ncm, ot ? ot : "-", infer_last_error());
    return m;
}

static infer_ctx_params ctx_params(void) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_CTX, p.n_batch = 64, p.n_seq = 1, p.n_threads = 2;
    return p;
}

static infer_ctx *make_ctx(const infer_model *m) {
    const infer_ctx_params p = ctx_params();
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) T_CHECK(0, "context: %s", infer_last_error());
    return c;
}

/* A host model placed as (ngl, ncm) with the "GPU" part on make's backend and the experts on the CPU (the hook). */
static infer_ctx *make_offload(const infer_model *m, int32_t ngl, int32_t ncm, ctx_backend_fn make) {
    const infer_ctx_params p = ctx_params();
    infer_ctx *c = NULL;
    if (ctx_create_offload_on(m, &p, ngl, ncm, make, &c) != INFER_OK)
        T_CHECK(0, "offload context: %s", infer_last_error());
    return c;
}

/* The stage that runs the GPU part (the public context, or its device stage in a split). */
static const infer_ctx *gpu_stage(const infer_ctx *c) { return c->next_stage ? c->next_stage : c; }

static int32_t n_offloaded(const infer_ctx *c) {
    const infer_ctx *g = gpu_stage(c);
    int32_t n = 0;
    for (int64_t il = 0; g->off_layer && il < c->m->hp.n_layer_all; il++) n += g->off_layer[il];
    return n;
}

/* ---- on any machine ---- */

static void check_cpu_offload(const char *arch, int32_t ngl, int32_t ncm, int32_t want_off) {
    const char *path = synth_file(arch, "F32");
    infer_model *m = path ? load(path, 0, 0, NULL) : NULL;
    infer_ctx *a = m ? make_offload(m, ngl, ncm, backend_cpu_create) : NULL, *b = m ? make_ctx(m) : NULL;
    struct pair_stats s;
    pair_stats_init(&s);
    if (a && b) {
        T_CHECK(n_offloaded(a) == want_off && gpu_stage(a)->off_be, "%s -ngl %d --n-cpu-moe %d: %d layers offload "
                "their experts, expected %d", arch, ngl, ncm, n_offloaded(a), want_off);
        const infer_status st = pair_basic(a, b, N_PROMPT, N_DECODE, &s);
        T_CHECK(st == INFER_OK && s.rows > 0 && s.identical == s.rows, "%s -ngl %d --n-cpu-moe %d on the CPU: %d of %d "
                "rows bit-identical to the plain context%s%s", arch, ngl, ncm, s.identical, s.rows,
                st == INFER_OK ? "" : "; ", st == INFER_OK ? "" : pair_error());
    }
    pair_stats_free(&s);
    infer_ctx_free(a), infer_ctx_free(b), infer_model_free(m);
    if (path) unlink(path);
}

/* ---- on a device ---- */

static void probe_mode(void) {
    char msg[700];
    T_CHECK(pair_probe_mode(&mode, msg, sizeof msg), "%s", msg);
    printf("%s\n", msg);
}

/* The offloaded layers' experts have no device copy: they are the file's own tensors (the mapping), or where this CPU
 * repacks them the host's strips (model_repack.c). */
static int experts_on_host(const infer_model *m, int32_t want_off) {
    int32_t n = 0, ok = m->n_gpu == 1;
    for (int64_t il = m->gpu_layer0; ok && il < m->hp.n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *copies = m->gpu[m->layer_gpu[il]].tensors;
        if (!L->exps_host) {
            ok &= L->ffn_gate_exps != NULL && L->ffn_gate_exps >= copies && L->ffn_gate_exps < copies + m->gguf->n_tensors;
            continue;
        }
        n++;
        const struct gguf_tensor *t[3] = {L->ffn_gate_exps, L->ffn_up_exps, L->ffn_down_exps};
        for (int i = 0; i < 3; i++) {
            const int64_t k = t[i] - m->gguf->tensors, c = t[i] - m->repacked_tensors;
            ok &= (k >= 0 && k < m->gguf->n_tensors && copies[k].data == NULL) ||
                  (m->repacked_tensors && c >= 0 && c < m->n_repacked);
        }
    }
    return ok && n == want_off;
}

/* The file loaded with (ngl, ncm | ot) against the offload reference; the reference against the plain CPU. */
static void check_offload(const char *arch, const char *ftype, int32_t ngl, int32_t ncm, const char *ot, int32_t ref_ncm,
                          int32_t want_off) {
    const char *path = synth_file(arch, ftype);
    if (!path) return;
    infer_model *mg = load(path, ngl, ncm, ot), *mh = load(path, 0, 0, NULL);
    infer_ctx *g = mg ? make_ctx(mg) : NULL, *r = mh ? make_offload(mh, ngl, ref_ncm, gpu_like_backend_create) : NULL;
    infer_ctx *r2 = mh ? make_offload(mh, ngl, ref_ncm, gpu_like_backend_create) : NULL, *cpu = mh ? make_ctx(mh) : NULL;
    struct pair_stats s, sc;
    pair_stats_init(&s), pair_stats_init(&sc);
    char what[160];
    snprintf(what, sizeof what, "%s %s -ngl %d %s%d", arch, ftype, ngl, ot ? "-ot " : "--n-cpu-moe ", ot ? 0 : ncm);
    if (ot) snprintf(what, sizeof what, "%s %s -ngl %d -ot '%s'", arch, ftype, ngl, ot);
    if (g && r && r2 && cpu) {
        T_CHECK(experts_on_host(mg, want_off) && n_offloaded(g) == want_off && n_offloaded(r) == want_off,
                "%s: %d layers offloaded (reference %d), expected %d, experts in host memory", what, n_offloaded(g),
                n_offloaded(r), want_off);
        infer_status st = pair_basic(g, r, N_PROMPT, N_DECODE, &s);
        T_CHECK(st == INFER_OK, "%s: %s", what, pair_error());
        st = pair_basic(r2, cpu, N_PROMPT, N_DECODE, &sc);
        T_CHECK(st == INFER_OK, "%s reference against the CPU: %s", what, pair_error());
        char msg[256], msg_cpu[256];
        T_CHECK(pair_within(&s, mode, ftype, msg, sizeof msg), "%s (%s mode): %s", what,
                mode == PAIR_EXACT ? "exact" : "device", msg);
        T_CHECK(pair_within(&sc, PAIR_LOOSE, ftype, msg_cpu, sizeof msg_cpu), "%s reference against the CPU (loose): %s",
                what, msg_cpu);
        printf("  %-48s %s\n", what, msg);
    }
    pair_stats_free(&s), pair_stats_free(&sc);
    infer_ctx_free(g), infer_ctx_free(r), infer_ctx_free(r2), infer_ctx_free(cpu);
    infer_model_free(mg), infer_model_free(mh);
    unlink(path);
}

#ifdef INFER_EMU
/* Decode steps with two offloaded layers of qwen35moe (shared experts): graph launches per step, logits the same
 * without graphs, and the bus per step against -ngl 99 without offload. */
static void check_graphs_and_bus(void) {
    const char *path = synth_file("qwen35moe", "Q4_K_M");
    infer_model *m = path ? load(path, ALL, 2, NULL) : NULL, *m0 = path ? load(path, ALL, 0, NULL) : NULL;
    infer_ctx *ctx[3] = {NULL, NULL, NULL};
    for (int k = 0; m && m0 && k < 3; k++) {
        if (k == 1) setenv("INFER_CUDA_GRAPHS", "0", 1);
        ctx[k] = make_ctx(k == 2 ? m0 : m);
        unsetenv("INFER_CUDA_GRAPHS");
    }
    int32_t t = 9, diff = 0, steps = 0;
    uint64_t launches = 0, captured = 0, h2d[3] = {0}, d2h[3] = {0}, bus[3] = {0};
    for (int s = 0; ctx[0] && ctx[1] && ctx[2] && s < 6; s++, steps++) {
        const float *l[3];
        for (int k = 0; k < 3; k++) {
            infer_batch b = {1, &t, NULL, NULL, NULL};
            struct emu_counters c0, c1;
            const uint64_t bus0 = infer_ctx_bus_bytes(ctx[k]);
            emu_counters_get(0, &c0);
            if (infer_decode(ctx[k], &b) != INFER_OK) T_CHECK(0, "decode: %s", infer_last_error());
            l[k] = infer_logits(ctx[k], -1);
            emu_counters_get(0, &c1);
            if (k == 0) launches += c1.graph_launches - c0.graph_launches;
            if (s == 0) continue; /* the first step also captures */
            if (k == 0) captured += c1.launches - c0.launches; /* kernels launched outside a replay */
            h2d[k] += c1.h2d_bytes - c0.h2d_bytes, d2h[k] += c1.d2h_bytes - c0.d2h_bytes;
            bus[k] += infer_ctx_bus_bytes(ctx[k]) - bus0;
        }
        if (!l[0] || !l[1] || !l[2]) break;
        diff += memcmp(l[0], l[1], (size_t)infer_vocab_size(m) * sizeof(float)) != 0;
        int32_t best = 0;
        for (int32_t v = 1; v < infer_vocab_size(m); v++)
            if (l[0][v] > l[0][best]) best = v;
        t = best;
    }
    T_CHECK(steps == 6 && diff == 0, "offload decode with graphs vs INFER_CUDA_GRAPHS=0: %d of %d steps differ", diff,
            steps);
    /* 3 pieces (two offloaded layers cut the segment twice) and 2 shared experts per step */
    T_CHECK(launches == (uint64_t)steps * 5, "graph launches: %llu in %d steps, expected 5 per step",
            (unsigned long long)launches, steps);
    /* each piece keeps its own graph: after the first step nothing is captured again */
    T_CHECK(captured == 0, "decode steps after the first launched %llu kernels outside their graphs (a piece "
            "re-captured)", (unsigned long long)captured);
    if (m) {
        const uint64_t n = (uint64_t)(steps - 1), x = (uint64_t)m->hp.n_embd * sizeof(float);
        const uint64_t route = (uint64_t)m->hp.n_expert_used * (sizeof(int32_t) + sizeof(float));
        printf("  bus per decode step: -ngl 99 %llu B in, %llu B out; two layers offloaded %llu B in, %llu B out\n",
               (unsigned long long)(h2d[2] / n), (unsigned long long)(d2h[2] / n), (unsigned long long)(h2d[0] / n),
               (unsigned long long)(d2h[0] / n));
        /* in: each offloaded layer's experts' output, and x from the host's token lookup instead of the token id */
        const uint64_t in = 2 * x + x - sizeof(int32_t), out = 2 * (x + route);
        T_CHECK(h2d[0] == h2d[2] + n * in && d2h[0] == d2h[2] + n * out,
                "two offloaded layers add %llu B in and %llu B out per step, expected %llu and %llu",
                (unsigned long long)((h2d[0] - h2d[2]) / n), (unsigned long long)((d2h[0] - d2h[2]) / n),
                (unsigned long long)in, (unsigned long long)out);
        T_CHECK(bus[0] == h2d[0] + d2h[0] && bus[2] == h2d[2] + d2h[2], "infer_ctx_bus_bytes %llu and %llu, the "
                "emulator counted %llu and %llu", (unsigned long long)bus[0], (unsigned long long)bus[2],
                (unsigned long long)(h2d[0] + d2h[0]), (unsigned long long)(h2d[2] + d2h[2]));
    }
    for (int k = 0; k < 3; k++) infer_ctx_free(ctx[k]);
    infer_model_free(m), infer_model_free(m0);
    if (path) unlink(path);
}
#endif

int main(void) {
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return t_done();
    }
    const char *archs[] = {"qwen3moe", "qwen35moe", "qwen3next"};
    for (size_t a = 0; a < 3; a++) {
        check_cpu_offload(archs[a], ALL, ALL, N_LAYER);
        check_cpu_offload(archs[a], ALL, 2, 2);
        check_cpu_offload(archs[a], 3, ALL, 3);
    }
    const char *why = NULL;
    if (device_count(&why) == 0) {
        rmdir(dir);
        T_SKIP("no CUDA device: %s; expert offload on a device", why ? why : "none");
        const int rc = t_done();
        return rc ? rc : 77;
    }
    probe_mode();
    const char *ot01 = "blk\\.[01]\\.ffn_.*_exps=CPU";
    for (size_t a = 0; a < 3; a++) {
        /* t_quick: each placement on one arch, --cpu-moe on all */
        check_offload(archs[a], "F32", ALL, ALL, NULL, ALL, N_LAYER);
        if (!t_quick() || a == 0) check_offload(archs[a], "F32", ALL, 2, NULL, 2, 2);
        if (!t_quick() || a == 1) check_offload(archs[a], "F32", ALL, 0, ot01, 2, 2);
        if (!t_quick() || a == 2) check_offload(archs[a], "F32", 3, ALL, NULL, ALL, 3);
    }
    check_offload("qwen35moe", "Q4_K_M", ALL, ALL, NULL, ALL, N_LAYER);
    check_offload("qwen3moe", "Q4_K_M", 3, 2, NULL, 2, 1);
#ifdef INFER_EMU
    check_graphs_and_bus();
#endif
    rmdir(dir);
    return t_done();
}
