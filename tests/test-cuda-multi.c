/* test-cuda-multi: several GPUs with a layer split (split_mode layer, tensor_split: llama.cpp's -sm layer -ts).
 *
 * On any machine (plans only, devices stated):
 *   - where the layers go, worked by hand from llama.cpp's rule (GPU entry i of n — the GPU layers, then the
 *     head — on the first device whose cumulative share exceeds i / n): 8 layers + head over -ts 1,1 (layers
 *     0-4 | 5-7 and the head), -ts 1,1,1 (0-2 | 3-5 | 6-7 and the head), -ts 3,1 (0-6 | 7 and the head), -ts 0,1
 *     (all on device 1), no -ts with 8 and 24 GiB free (shares 1:3: 0-2 | 3-7 and the head), and -ngl 5 over
 *     -ts 1,1 (host 0-2, then 3-5 | 6-7, the head on the host); the token table with layer 0 when the head is
 *     on a GPU; each device's weights and KV bytes are those of its own layers;
 *   - split_mode tensor over -ts 1,1 planned (the degree, every layer's home the group's first device, device 0
 *     holding the token table beside its shards, the head cut in two: test-plan works each rank's bytes out);
 *   - bad input: a share for a device that is not there, a negative share, a split mode out of range.
 * On the emulator with three devices (INFER_EMU_DEVICES=3, set here) or a machine with two or more GPUs:
 *   - llama, qwen3moe, qwen35, qwen35moe and qwen3next (8 layers) loaded with -sm layer over 2 devices (llama and
 *     qwen35moe over 3 too) give the single-device (-ngl 99) load's logits bit for bit over a prompt, decode steps and a 3-token batch (the
 *     same kernels on each device; only where they run differs, and x crosses as an exact f32 copy), and so do a
 *     split with the host (-ngl 5 over 2 devices against -ngl 5 on one) and expert offload over 2 devices
 *     (qwen35moe --n-cpu-moe 3);
 *   - the load put each layer where the plan says, and each device holds exactly the plan's bytes (weights,
 *     cells, state, scratch: emulator counters per device);
 *   - the bus: a decode step over 2 devices copies x once out of the first and once into the second;
 *   - a qwen35 with an MTP block loaded and a context made for drafts over -ts 1,1: each device holds exactly the
 *     plan's bytes, the head's device the token table's copy.
 * With one GPU only the plan checks run (exit 77 when there is no device at all).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "forward.h"
#include "logits_pair.h"
#include "model.h"
#include "t.h"
#ifdef INFER_EMU
#include "emu_api.h"
#endif

enum { N_LAYER = 8, N_PROMPT = 24, N_DECODE = 6, N_CTX = 96, ALL = 99 };

static char dir[] = "/tmp/test-cuda-multi-XXXXXX";

/* A synthetic file of arch in ftype with N_LAYER layers (mtp: and an MTP block); NULL on failure. The path is
 * static: the next call overwrites it. */
static const char *synth_file_of(const char *arch, const char *ftype, int mtp) {
    static char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 23, sp.n_layer = N_LAYER, sp.mtp = mtp;
    snprintf(path, sizeof path, "%s/%s-%s%s.gguf", dir, arch, ftype, mtp ? "-mtp" : "");
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s%s: %s", arch, ftype, mtp ? " with MTP" : "", infer_last_error());
        return NULL;
    }
    return path;
}

static const char *synth_file(const char *arch, const char *ftype) { return synth_file_of(arch, ftype, 0); }

/* Model params: n_gpu_layers ngl, a layer split over the n_ts shares ts (n_ts 0: none), n_cpu_moe ncm. */
static infer_model_params params(int32_t ngl, const float *ts, int n_ts, int32_t ncm) {
    infer_model_params p = infer_model_params_default();
    p.n_gpu_layers = ngl, p.n_cpu_moe = ncm;
    p.split_mode = n_ts > 0 ? INFER_SPLIT_LAYER : INFER_SPLIT_NONE;
    for (int i = 0; i < n_ts; i++) p.tensor_split[i] = ts[i];
    return p;
}

/* ---- plans (any machine) ---- */

static infer_plan *plan_of(const char *path, const infer_model_params *mp, const uint64_t *mem, int n_dev) {
    infer_plan_params pp = infer_plan_params_default();
    pp.n_devices = n_dev;
    for (int i = 0; i < n_dev; i++) pp.free_bytes[i] = mem[i];
    infer_plan *p = NULL;
    if (infer_model_plan(path, mp, NULL, &pp, &p) != INFER_OK) T_CHECK(0, "plan: %s", infer_last_error());
    return p;
}

/* want: the home of each of the 8 layers, then of the head; embd: of the token table. */
static void check_homes(const char *path, const char *what, const infer_model_params *mp, const uint64_t *mem, int n_dev,
                        const int32_t *want, int32_t embd) {
    infer_plan *p = plan_of(path, mp, mem, n_dev);
    if (!p) return;
    const infer_plan_info in = infer_plan_get_info(p);
    char got[128] = "";
    int ok = in.home_head == want[N_LAYER] && in.home_embd == embd;
    for (int32_t il = 0; il < N_LAYER; il++) {
        ok &= infer_plan_layer_home(p, il) == want[il];
        snprintf(got + strlen(got), sizeof got - strlen(got), "%d ", infer_plan_layer_home(p, il));
    }
    T_CHECK(ok, "%s: layer homes %s| head %d embd %d", what, got, in.home_head, in.home_embd);
    /* every device's KV cells are its own attention layers' (qwen35: every 4th layer is attention) */
    uint64_t kv_total = 0;
    for (int d = 0; d < n_dev; d++) {
        infer_plan_memory mm;
        if (infer_plan_get_memory(p, d, &mm) == INFER_OK) kv_total += mm.kv;
    }
    infer_plan_memory host;
    infer_plan_get_memory(p, -1, &host);
    T_CHECK(kv_total + host.kv > 0, "%s: KV bytes placed", what);
    infer_plan_free(p);
}

static void check_plans(const char *path) {
    const uint64_t g24 = (uint64_t)24 << 30, g8 = (uint64_t)8 << 30;
    const uint64_t mem3[3] = {g24, g24, g24}, mem_8_24[2] = {g8, g24};
    const float ts11[2] = {1, 1}, ts111[3] = {1, 1, 1}, ts31[2] = {3, 1}, ts01[2] = {0, 1};
    infer_model_params mp = params(ALL, ts11, 2, 0);
    check_homes(path, "-sm layer -ts 1,1", &mp, mem3, 2, (const int32_t[]){0, 0, 0, 0, 0, 1, 1, 1, 1}, 0);
    mp = params(ALL, ts111, 3, 0);
    check_homes(path, "-sm layer -ts 1,1,1", &mp, mem3, 3, (const int32_t[]){0, 0, 0, 1, 1, 1, 2, 2, 2}, 0);
    mp = params(ALL, ts31, 2, 0);
    check_homes(path, "-sm layer -ts 3,1", &mp, mem3, 2, (const int32_t[]){0, 0, 0, 0, 0, 0, 0, 1, 1}, 0);
    mp = params(ALL, ts01, 2, 0);
    check_homes(path, "-sm layer -ts 0,1", &mp, mem3, 2, (const int32_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, 1);
    mp = params(ALL, NULL, 0, 0);
    mp.split_mode = INFER_SPLIT_LAYER; /* no -ts: shares by free memory, 8 and 24 GiB = 1:3 */
    check_homes(path, "-sm layer, 8 and 24 GiB free", &mp, mem_8_24, 2, (const int32_t[]){0, 0, 0, 1, 1, 1, 1, 1, 1}, 0);
    /* -ngl 5: layers 3-7 on the GPUs (5 entries, no head): 3 4 5 | 6 7; the token table and head on the host */
    mp = params(5, ts11, 2, 0);
    check_homes(path, "-ngl 5 -sm layer -ts 1,1", &mp, mem3, 2, (const int32_t[]){-1, -1, -1, 0, 0, 0, 1, 1, -1}, -1);
    /* bad input */
    infer_plan_params pp = infer_plan_params_default();
    pp.n_devices = 2;
    pp.free_bytes[0] = pp.free_bytes[1] = g24;
    infer_plan *p = NULL;
    /* -sm tensor -ts 1,1: every layer on both devices (its home the first), the token table on device 0, the head
     * cut in two: the devices' weights differ by the table (F32: 640 x 256), every cut being even */
    mp = params(ALL, ts11, 2, 0);
    mp.split_mode = INFER_SPLIT_TENSOR;
    infer_status st = infer_model_plan(path, &mp, NULL, &pp, &p);
    int tp_ok = st == INFER_OK && p;
    for (int32_t il = 0; tp_ok && il < N_LAYER; il++) tp_ok &= infer_plan_layer_home(p, il) == 0;
    infer_plan_memory m0 = {0}, m1 = {0};
    if (tp_ok) {
        const infer_plan_info in = infer_plan_get_info(p);
        infer_plan_get_memory(p, 0, &m0);
        infer_plan_get_memory(p, 1, &m1);
        tp_ok &= in.tp == 2 && infer_plan_tp_device(p, 0) == 0 && infer_plan_tp_device(p, 1) == 1 &&
                 in.home_head == 0 && in.home_embd == 0 &&
                 m0.weights - m1.weights == (uint64_t)640 * 256 * 4 && m1.kv == m0.kv && m1.kv > 0;
    }
    T_CHECK(tp_ok, "-sm tensor -ts 1,1: %d '%s', weights %llu | %llu", st, st == INFER_OK ? "" : infer_last_error(),
            (unsigned long long)m0.weights, (unsigned long long)m1.weights);
    infer_plan_free(p);
    p = NULL;
    mp = params(ALL, ts111, 3, 0);
    st = infer_model_plan(path, &mp, NULL, &pp, &p);
    T_CHECK(st == INFER_E_ARG && !p && strstr(infer_last_error(), "device 2"), "-ts 1,1,1 with 2 devices: %d '%s'", st,
            infer_last_error());
    const float neg[2] = {1, -1};
    mp = params(ALL, neg, 2, 0);
    st = infer_model_plan(path, &mp, NULL, &pp, &p);
    T_CHECK(st == INFER_E_ARG && !p && strstr(infer_last_error(), "tensor_split[1]"), "-ts 1,-1: %d '%s'", st,
            infer_last_error());
    mp = params(ALL, NULL, 0, 0);
    mp.split_mode = 7;
    st = infer_model_plan(path, &mp, NULL, &pp, &p);
    T_CHECK(st == INFER_E_ARG && !p && strstr(infer_last_error(), "split_mode 7"), "split_mode 7: %d '%s'", st,
            infer_last_error());
}

/* ---- loads (two or more devices) ---- */

static infer_model *load(const char *path, const infer_model_params *mp) {
    infer_model *m = NULL;
    if (infer_model_load(path, mp, &m) != INFER_OK) T_CHECK(0, "load %s: %s", path, infer_last_error());
    return m;
}

static infer_ctx *make_ctx(const infer_model *m) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_CTX, p.n_batch = 32, p.n_seq = 1, p.n_threads = 2;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) T_CHECK(0, "context: %s", infer_last_error());
    return c;
}

/* The file loaded as mp against the same file loaded as ref (one device): bit-identical logits. */
static void check_same(const char *arch, const char *ftype, const char *what, const infer_model_params *mp,
                       const infer_model_params *ref, int32_t want_gpus) {
    const char *path = synth_file(arch, ftype);
    if (!path) return;
    infer_model *a = load(path, mp), *b = load(path, ref);
    infer_ctx *ca = a ? make_ctx(a) : NULL, *cb = b ? make_ctx(b) : NULL;
    struct pair_stats s;
    pair_stats_init(&s);
    if (ca && cb) {
        T_CHECK(a->n_gpu == want_gpus, "%s %s %s: %d devices hold weights, expected %d", arch, ftype, what, a->n_gpu,
                want_gpus);
        const infer_status st = pair_basic(ca, cb, N_PROMPT, N_DECODE, &s);
        T_CHECK(st == INFER_OK && s.rows > 0 && s.identical == s.rows, "%s %s %s: %d of %d rows bit-identical to one "
                "device%s%s", arch, ftype, what, s.identical, s.rows, st == INFER_OK ? "" : "; ",
                st == INFER_OK ? "" : pair_error());
        printf("  %-9s %-6s %-34s %d of %d rows bit-identical\n", arch, ftype, what, s.identical, s.rows);
    }
    pair_stats_free(&s);
    infer_ctx_free(ca), infer_ctx_free(cb), infer_model_free(a), infer_model_free(b);
    unlink(path);
}

#ifdef INFER_EMU
/* Each of devices 0 .. n - 1 gained exactly what plan p counts there between the counters before and after. */
static void check_plan_bytes(const infer_plan *p, const struct emu_counters *before, const struct emu_counters *after,
                             int n, const char *what) {
    for (int d = 0; d < n; d++) {
        infer_plan_memory pm;
        infer_plan_get_memory(p, d, &pm);
        const uint64_t used = after[d].bytes_in_use - before[d].bytes_in_use;
        const uint64_t want = pm.weights + pm.kv + pm.state + pm.scratch;
        T_CHECK(used == want, "%s: device %d holds %llu bytes, the plan counts %llu (weights %llu kv %llu state %llu "
                "scratch %llu)", what, d, (unsigned long long)used, (unsigned long long)want,
                (unsigned long long)pm.weights, (unsigned long long)pm.kv, (unsigned long long)pm.state,
                (unsigned long long)pm.scratch);
    }
}

/* The load and a context over 3 devices hold on each exactly what the plan counts there, and the layers are where
 * the plan puts them; then a decode step's bus between devices. */
static void check_bytes_and_bus(void) {
    const char *path = synth_file("qwen35", "F32");
    if (!path) return;
    const float ts[3] = {1, 1, 1};
    const infer_model_params mp = params(ALL, ts, 3, 0);
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = N_CTX, cp.n_batch = 32, cp.n_threads = 2;
    struct emu_counters before[3], after[3], mid[3];
    for (int d = 0; d < 3; d++) emu_counters_get(d, &before[d]);
    infer_model *m = load(path, &mp);
    infer_ctx *c = NULL;
    if (m && infer_ctx_create(m, &cp, &c) != INFER_OK) T_CHECK(0, "context: %s", infer_last_error());
    for (int d = 0; d < 3; d++) emu_counters_get(d, &after[d]);
    infer_plan_params pp = infer_plan_params_default();
    pp.n_devices = 3;
    for (int d = 0; d < 3; d++) pp.free_bytes[d] = (uint64_t)64 << 30;
    infer_plan *p = NULL;
    if (infer_model_plan(path, &mp, &cp, &pp, &p) != INFER_OK) T_CHECK(0, "plan: %s", infer_last_error());
    if (!m || !c || !p) goto done;
    int homes_ok = 1;
    for (int32_t il = 0; il < N_LAYER; il++)
        homes_ok &= m->layer_gpu[il] >= 0 && m->gpu[m->layer_gpu[il]].device == infer_plan_layer_home(p, il);
    T_CHECK(homes_ok && m->n_gpu == 3, "the load's layers are where the plan puts them (%d devices)", m->n_gpu);
    check_plan_bytes(p, before, after, 3, "-sm layer over 3");
    /* a decode step: x leaves devices 0 and 1 and enters devices 1 and 2, once each */
    const int32_t prompt[3] = {3, 1, 4}, t = 5;
    infer_batch b = {3, prompt, NULL, NULL, NULL}, b1 = {1, &t, NULL, NULL, NULL};
    if (infer_decode(c, &b) != INFER_OK) T_CHECK(0, "prompt: %s", infer_last_error());
    for (int d = 0; d < 3; d++) emu_counters_get(d, &mid[d]);
    if (infer_decode(c, &b1) != INFER_OK) T_CHECK(0, "decode: %s", infer_last_error());
    for (int d = 0; d < 3; d++) emu_counters_get(d, &after[d]);
    const uint64_t x = (uint64_t)m->hp.n_embd * sizeof(float), id = sizeof(int32_t);
    const uint64_t in[3] = {2 * id, x + id, x + 2 * id}, out[3] = {x, x, 0}; /* tokens and positions; asked rows */
    for (int d = 0; d < 3; d++) {
        const uint64_t h2d = after[d].h2d_bytes - mid[d].h2d_bytes, d2h = after[d].d2h_bytes - mid[d].d2h_bytes;
        T_CHECK(h2d == in[d] && d2h == out[d], "device %d: a decode step moved %llu B in and %llu B out, expected %llu "
                "and %llu", d, (unsigned long long)h2d, (unsigned long long)d2h, (unsigned long long)in[d],
                (unsigned long long)out[d]);
    }
done:
    infer_plan_free(p);
    infer_ctx_free(c);
    infer_model_free(m);
    unlink(path);
}
#endif

/* -sm layer -ts 1,1 of a qwen35 with an MTP block: the head's device (1) keeps its own copy of the token table
 * (F32 640 x 256) for the block when the context drafts, and only then: its weights grow by exactly the table,
 * device 0's do not, and the plan's text says so; with the head on the table's device (-ts 0,1) there is no copy.
 * (test-cuda-mtp loads it and checks the block reads the copy.) */
static void check_table_copy(void) {
    const char *path = synth_file_of("qwen35", "F32", 1);
    if (!path) return;
    const float ts11[2] = {1, 1}, ts01[2] = {0, 1};
    infer_plan_params pp = infer_plan_params_default();
    pp.n_devices = 2;
    pp.free_bytes[0] = pp.free_bytes[1] = (uint64_t)24 << 30;
    for (int split = 0; split < 2; split++) {
        const infer_model_params mp = params(ALL, split ? ts11 : ts01, 2, 0);
        uint64_t w[2][2] = {{0}}; /* [drafts][device] */
        int says[2] = {0}, ok = 1;
        for (int draft = 0; draft < 2; draft++) {
            infer_ctx_params cp = infer_ctx_params_default();
            cp.n_ctx = N_CTX, cp.n_draft = draft ? 3 : 0;
            infer_plan *p = NULL;
            char text[4096];
            ok &= infer_model_plan(path, &mp, &cp, &pp, &p) == INFER_OK;
            for (int d = 0; ok && d < 2; d++) {
                infer_plan_memory mm;
                ok &= infer_plan_get_memory(p, d, &mm) == INFER_OK;
                w[draft][d] = mm.weights;
            }
            says[draft] = ok && infer_plan_text(p, text, sizeof text) < (int32_t)sizeof text &&
                          strstr(text, "its copy for the MTP block") != NULL;
            infer_plan_free(p);
        }
        const uint64_t table = split ? (uint64_t)640 * 256 * 4 : 0;
        T_CHECK(ok && w[1][0] == w[0][0] && w[1][1] == w[0][1] + table && says[1] == split && !says[0],
                "-sm layer -ts %s with MTP: device 1's weights %llu without drafts, %llu with (expected %llu more), "
                "device 0's %llu / %llu, the text names the copy %d / %d (%s)", split ? "1,1" : "0,1",
                (unsigned long long)w[0][1], (unsigned long long)w[1][1], (unsigned long long)table,
                (unsigned long long)w[0][0], (unsigned long long)w[1][0], says[0], says[1],
                ok ? "" : infer_last_error());
    }
    unlink(path);
}

#ifdef INFER_EMU
/* The drafting load of check_table_copy's model over -ts 1,1 and a drafting context hold on each device exactly what
 * the plan counts there (device 1: the table's copy, and no buffers for token rows from the host). */
static void check_table_copy_bytes(void) {
    const char *path = synth_file_of("qwen35", "F32", 1);
    if (!path) return;
    const float ts11[2] = {1, 1};
    infer_model_params mp = params(ALL, ts11, 2, 0);
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = N_CTX, cp.n_batch = 32, cp.n_threads = 2, cp.n_draft = 3;
    mp.fit_ctx = &cp;
    struct emu_counters before[2], after[2];
    for (int d = 0; d < 2; d++) emu_counters_get(d, &before[d]);
    infer_model *m = load(path, &mp);
    infer_ctx *c = NULL;
    if (m && infer_ctx_create(m, &cp, &c) != INFER_OK) T_CHECK(0, "context: %s", infer_last_error());
    for (int d = 0; d < 2; d++) emu_counters_get(d, &after[d]);
    infer_plan_params pp = infer_plan_params_default();
    pp.n_devices = 2;
    pp.free_bytes[0] = pp.free_bytes[1] = (uint64_t)64 << 30;
    infer_plan *p = NULL;
    if (infer_model_plan(path, &mp, &cp, &pp, &p) != INFER_OK) T_CHECK(0, "plan: %s", infer_last_error());
    T_CHECK(m && c && p && m->mtp_embd, "-sm layer -ts 1,1 loaded for drafts: the head's device has the table's copy");
    if (m && c && p) check_plan_bytes(p, before, after, 2, "drafting -sm layer");
    infer_plan_free(p);
    infer_ctx_free(c);
    infer_model_free(m);
    unlink(path);
}
#endif

int main(void) {
#ifdef INFER_EMU
    setenv("INFER_EMU_DEVICES", "3", 0); /* before the emulator's first call */
#endif
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return t_done();
    }
    const char *path = synth_file("qwen35", "F32");
    if (path) check_plans(path);
    check_table_copy();
    const char *why = NULL;
    const int n_dev = device_count(&why);
    if (n_dev < 2) {
        printf("%d CUDA device%s (%s): the loads over several devices need 2\n", n_dev, n_dev == 1 ? "" : "s",
               why ? why : "one");
        rmdir(dir);
        const int rc = t_done();
        return rc ? rc : n_dev == 0 ? 77 : 0;
    }
    const float ts11[2] = {1, 1}, ts111[3] = {1, 1, 1};
    const infer_model_params one = params(ALL, NULL, 0, 0), two = params(ALL, ts11, 2, 0);
    const infer_model_params three = params(ALL, ts111, 3, 0);
    const char *archs[] = {"llama", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        check_same(archs[a], "F32", "-sm layer over 2", &two, &one, 2);
        /* three devices for a dense and a hybrid MoE model (the emulator's time is the suite's; t_quick: the
         * hybrid only) */
        if (n_dev >= 3 && (a == 3 || (a == 0 && !t_quick())))
            check_same(archs[a], "F32", "-sm layer over 3", &three, &one, 3);
    }
    if (!t_quick()) check_same("qwen35moe", "Q4_K_M", "-sm layer over 2", &two, &one, 2);
    const infer_model_params two5 = params(5, ts11, 2, 0), one5 = params(5, NULL, 0, 0);
    check_same("qwen35", "Q4_K_M", "-ngl 5 -sm layer over 2", &two5, &one5, 2);
    const infer_model_params two_moe = params(ALL, ts11, 2, 3), one_moe = params(ALL, NULL, 0, 3);
    check_same("qwen35moe", "F32", "--n-cpu-moe 3 -sm layer over 2", &two_moe, &one_moe, 2);
#ifdef INFER_EMU
    check_bytes_and_bus();
    check_table_copy_bytes();
#endif
    rmdir(dir);
    return t_done();
}
