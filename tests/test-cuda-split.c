/* test-cuda-split: layer splits between the CPU and one GPU (0 < n_gpu_layers <= n_layer, llama.cpp's rule:
 * the last N layers on the GPU, the token lookup and the head on the CPU; N > n_layer: everything).
 *
 * On any machine:
 *   - model_placement: N = 0, 1, n_layer / 2, n_layer, n_layer + 1, 99, -1 put the first GPU layer and the
 *     head where llama.cpp does;
 *   - the fit check counts only what goes to the device: against a stand-in backend whose free memory holds
 *     the reserve plus the last layer but not every layer, n_gpu_layers 1 passes the check (its one
 *     allocation reaches the backend) and "everything" is INFER_E_OOM with both numbers and no allocation;
 *     after either the model is untouched (no device, the layers on the file's descriptors);
 *   - the segments themselves, without a device: a host model split by the test hook ctx_create_split_on with
 *     the CPU backend on both sides gives the plain CPU context's logits bit for bit (llama, qwen35: one
 *     backend's numerics, so any difference is the split: a layer run twice or skipped, x not handed over,
 *     the wrong stage's cells), and so does sequence bookkeeping through it: checkpoint, a refused
 *     truncation that changes no stage, a truncation to the checkpoint, and decoding on.
 * On a device (the emulator in check-emu):
 *   - llama, qwen3moe, qwen35, qwen35moe and qwen3next (4 layers each) in F32 and Q4_K_M, loaded with
 *     n_gpu_layers 1, 2, 4 (the layer count: the head stays on the CPU) and 5 (everything): a 40-token prompt
 *     (every row asked), 12 decode steps (the GPU segment replays a CUDA graph) and a 3-token batch, against
 *     the reference: the same file split at the same layer by ctx_create_split_on, its CPU segments on the
 *     CPU backend and its GPU segment on tests/gpu_like.c. Why that reference: a split context runs the CPU
 *     backend's numerics up to the boundary and the kernels' after it, and x crosses it as an exact f32 copy;
 *     this reference does exactly that, with gpu_like standing in for the kernels (bit-identical to them on
 *     a device that passes gpu_like_probe, e.g. the emulator). So the bounds are test-cuda-e2e's, chosen by
 *     the same probe: exact mode every row rel <= 1e-4 and every argmax equal (the rows are bit-identical
 *     there; the count is printed), device mode the device bounds. The single-device CPU context is no
 *     tight reference (the GPU segment's q8 split activations and f16 mm operands move quantised rows by
 *     1e-2 from it); the reference is held to test-gpu-like's loose bounds (PAIR_LOOSE) against it;
 *   - two sequences in one batch and then decoded side by side (llama F32 n_gpu_layers 2, qwen35moe Q4_K_M
 *     n_gpu_layers 1), against the reference;
 *   - graphs: a split's decode steps launch one graph each (emulator counters), and their logits are the
 *     same bit for bit with INFER_CUDA_GRAPHS=0;
 *   - the bus (emulator counters): a decode step of a split (-ngl 2, and -ngl 4 = the layer count, whose head
 *     stays on the CPU) moves one x each way per token (n_embd floats in and out of the GPU segment) plus
 *     what -ngl 99 moves for the same step, less the token ids and the asked rows (the lookup and the head
 *     are on the CPU); reading its logits moves nothing more (they are on the host), where -ngl 99
 *     downloads n_vocab floats;
 *   - bad input, one clear error at load or creation: a device that does not exist; n_gpu_layers < 0 is
 *     everything. (MTP drafting with the head on the GPU: test-cuda-mtp.)
 * Without a device the device part prints SKIP and the test exits 77 after the checks above.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "forward.h"
#include "gpu_like.h"
#include "logits_pair.h"
#include "model.h"
#include "stream.h"
#include "t.h"
#ifdef INFER_EMU
#include "emu_api.h"
#endif

enum { N_LAYER = 4, N_PROMPT = 40, N_DECODE = 12, N_CTX = 128 };

static enum pair_mode mode = PAIR_DEVICE; /* set by the probe */
static char dir[] = "/tmp/test-cuda-split-XXXXXX";

static const char *synth_file(const char *arch, const char *ftype, int mtp) {
    static char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 13, sp.n_layer = N_LAYER, sp.mtp = mtp;
    snprintf(path, sizeof path, "%s/%s-%s%s.gguf", dir, arch, ftype, mtp ? "-mtp" : "");
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return NULL;
    }
    return path;
}

static infer_model *load(const char *path, int32_t ngl) {
    infer_model_params p = infer_model_params_default();
    p.n_gpu_layers = ngl;
    p.no_repack = ngl == 0; /* a host model here is the reference the GPU-like backend runs: the file's layout */
    infer_model *m = NULL;
    if (infer_model_load(path, &p, &m) != INFER_OK) T_CHECK(0, "load %s -ngl %d: %s", path, ngl, infer_last_error());
    return m;
}

static infer_ctx_params ctx_params(int32_t n_seq) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_CTX, p.n_batch = 64, p.n_seq = n_seq, p.n_threads = 2;
    return p;
}

static infer_ctx *make_ctx(const infer_model *m, int32_t n_seq) {
    const infer_ctx_params p = ctx_params(n_seq);
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) T_CHECK(0, "context: %s", infer_last_error());
    return c;
}

/* A host model split at n_gpu_layers with the "GPU" part on make's backend (the test hook). */
static infer_ctx *make_split(const infer_model *m, int32_t ngl, ctx_backend_fn make, int32_t n_seq) {
    const infer_ctx_params p = ctx_params(n_seq);
    infer_ctx *c = NULL;
    if (ctx_create_split_on(m, &p, ngl, make, &c) != INFER_OK) T_CHECK(0, "split context: %s", infer_last_error());
    return c;
}

/* ---- on any machine ---- */

static void check_placement(void) {
    struct arch_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = N_LAYER;
    const struct { int32_t n, layer0; int head; } want[] = {
        {0, 4, 0}, {1, 3, 0}, {2, 2, 0}, {4, 0, 0}, {5, 0, 1}, {99, 0, 1}, {-1, 0, 1},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int32_t layer0 = -7;
        int head = -7;
        model_placement(&hp, want[i].n, &layer0, &head);
        T_CHECK(layer0 == want[i].layer0 && head == want[i].head, "n_gpu_layers %d of %d: first GPU layer %d head %d, "
                "expected %d %d", want[i].n, N_LAYER, layer0, head, want[i].layer0, want[i].head);
    }
}

/* A stand-in device whose free memory is set per case; every allocation fails (and is counted). */
static size_t fake_free;
static int fake_allocs;
static infer_status fake_mem_info(struct infer_backend *b, size_t *f, size_t *t) {
    (void)b;
    *f = fake_free, *t = (size_t)80 << 30;
    return INFER_OK;
}
static infer_status fake_alloc(struct infer_backend *b, size_t n, void **out) {
    (void)b, (void)n;
    fake_allocs++;
    *out = NULL;
    return infer_fail(INFER_E_OOM, "fake allocation");
}
static void fake_free_buf(struct infer_backend *b, void *p) { (void)b, (void)p; }

static void fake_destroy(struct infer_backend *b) { (void)b; }
static struct infer_backend_ops fake_ops;
static struct infer_backend fake_be = {&fake_ops, NULL};
static infer_status fake_make(int device, struct infer_backend **out) {
    (void)device;
    *out = &fake_be;
    return INFER_OK;
}

static void check_fit(void) {
    const char *path = synth_file("qwen3", "F32", 0);
    infer_model *m = path ? load(path, 0) : NULL;
    if (!m) return;
    int32_t layer_last[64], layer_all[64];
    struct model_homes h_last, h_all;
    model_homes_one(m, 1, 0, layer_last, &h_last);
    model_homes_one(m, -1, 0, layer_all, &h_all);
    const uint64_t last = model_weight_bytes(m, &h_last, 0), all = model_weight_bytes(m, &h_all, 0);
    T_CHECK(last > 0 && last * N_LAYER < all, "bytes of the last layer %llu, of everything %llu",
            (unsigned long long)last, (unsigned long long)all);
    memset(&fake_ops, 0, sizeof fake_ops);
    fake_ops.name = "fake", fake_ops.mem_info = fake_mem_info, fake_ops.alloc = fake_alloc;
    fake_ops.free = fake_free_buf, fake_ops.destroy = fake_destroy;
    infer_model_params p = infer_model_params_default();
    fake_free = (size_t)(MODEL_UPLOAD_RESERVE + last + (all - last) / 2);
    fake_allocs = 0;
    infer_status st = model_upload(m, &h_last, fake_make, &p, 0.0f, 1.0f);
    T_CHECK(st == INFER_E_OOM && fake_allocs == 1 && strstr(infer_last_error(), "fake allocation"),
            "n_gpu_layers 1 fits (the check passes, the allocation is tried): status %d, %d allocations, '%s'", st,
            fake_allocs, infer_last_error());
    fake_allocs = 0;
    st = model_upload(m, &h_all, fake_make, &p, 0.0f, 1.0f);
    const char *msg = infer_last_error();
    T_CHECK(st == INFER_E_OOM && fake_allocs == 0 && strstr(msg, "MiB free") && strstr(msg, "need") &&
                strstr(msg, "every layer and the head"),
            "everything does not fit: status %d, %d allocations, '%s'", st, fake_allocs, msg);
    const int64_t iq = infer_model_find_tensor(m, "blk.3.attn_q.weight");
    T_CHECK(m->n_gpu == 0 && m->layer_gpu == NULL && m->gpu_layer0 == N_LAYER && iq >= 0 &&
                m->layers[3].attn_q == &m->gguf->tensors[iq],
            "the model is untouched after a failed upload");
    infer_model_free(m);
    unlink(path);
}

/* The CPU backend on both sides of the split: the plain CPU context's logits bit for bit. */
static void check_cpu_split(const char *arch, int32_t ngl) {
    const char *path = synth_file(arch, "F32", 0);
    infer_model *m = path ? load(path, 0) : NULL;
    infer_ctx *a = m ? make_split(m, ngl, backend_cpu_create, 1) : NULL, *b = m ? make_ctx(m, 1) : NULL;
    struct pair_stats s;
    pair_stats_init(&s);
    if (a && b) {
        const infer_status st = pair_basic(a, b, N_PROMPT, N_DECODE, &s);
        T_CHECK(st == INFER_OK && s.rows > 0 && s.identical == s.rows, "%s split at %d on the CPU: %d of %d rows "
                "bit-identical to the plain context%s%s", arch, ngl, s.identical, s.rows, st == INFER_OK ? "" : "; ",
                st == INFER_OK ? "" : pair_error());
        T_CHECK(a->n_seg == (ngl > 0 && ngl <= N_LAYER ? 3 : 1), "%s -ngl %d: %d segments", arch, ngl, a->n_seg);
    }
    pair_stats_free(&s);
    infer_ctx_free(a), infer_ctx_free(b), infer_model_free(m);
    if (path) unlink(path);
}

/* Decodes n tokens (logits of the last) into both contexts; whether both succeeded and agree bit for bit. */
static int decode_both(infer_ctx *a, infer_ctx *b, const int32_t *tok, int32_t n) {
    infer_batch batch = {n, tok, NULL, NULL, NULL};
    const infer_status sa = infer_decode(a, &batch), sb = infer_decode(b, &batch);
    if (sa != INFER_OK || sb != INFER_OK) return 0;
    const float *la = infer_logits(a, -1), *lb = infer_logits(b, -1);
    return la && lb && !memcmp(la, lb, (size_t)infer_vocab_size(b->m) * sizeof(float));
}

/* Sequence bookkeeping through a split of a hybrid model (GDN state in both stages): the same as plain. */
static void check_cpu_split_seq(void) {
    const char *path = synth_file("qwen35", "F32", 0);
    infer_model *m = path ? load(path, 0) : NULL;
    infer_ctx *a = m ? make_split(m, 2, backend_cpu_create, 1) : NULL, *b = m ? make_ctx(m, 1) : NULL;
    if (!a || !b) goto out;
    const int32_t p1[6] = {5, 9, 13, 17, 21, 25}, p2[4] = {31, 37, 41, 43}, p3[3] = {47, 53, 59};
    T_CHECK(decode_both(a, b, p1, 6), "prompt");
    T_CHECK(infer_seq_checkpoint(a, 0) == INFER_OK && infer_seq_checkpoint(b, 0) == INFER_OK, "checkpoint: %s",
            infer_last_error());
    T_CHECK(decode_both(a, b, p2, 4), "after the checkpoint");
    const infer_status ra = infer_seq_rm(a, 0, 8, -1), rb = infer_seq_rm(b, 0, 8, -1);
    T_CHECK(ra == INFER_E_UNSUPPORTED && rb == ra && infer_seq_pos_max(a, 0) == 9 && a->next_stage &&
                a->next_stage->kv->len[0] == 10,
            "a truncation no snapshot holds is refused and changes no stage: %d %d, lengths %d %d", ra, rb,
            infer_seq_pos_max(a, 0) + 1, a->next_stage ? a->next_stage->kv->len[0] : -1);
    T_CHECK(infer_seq_rm(a, 0, 6, -1) == INFER_OK && infer_seq_rm(b, 0, 6, -1) == INFER_OK &&
                a->next_stage->kv->len[0] == 6,
            "truncation to the checkpoint: %s", infer_last_error());
    T_CHECK(decode_both(a, b, p3, 3), "decoding on after the truncation: the restored state is the same");
    T_CHECK(infer_seq_rm(a, 0, -1, -1) == INFER_OK && infer_seq_rm(b, 0, -1, -1) == INFER_OK, "clear");
    T_CHECK(decode_both(a, b, p2, 4), "decoding after clearing the sequence");
out:
    infer_ctx_free(a), infer_ctx_free(b), infer_model_free(m);
    if (path) unlink(path);
}


/* n_gen greedy tokens of c after prompt (n tokens), by the mode's steps (stream.h). */
static int32_t greedy_stream(infer_ctx *c, enum stream_mode mode, const int32_t *prompt, int32_t n, int32_t *out,
                             int32_t n_gen) {
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = 0;
    infer_sampler *smp = NULL;
    if (infer_sampler_create(&sp, infer_vocab_size(c->m), &smp) != INFER_OK) return 0;
    const int32_t got = stream_run(c, smp, mode, prompt, n, out, n_gen, NULL);
    infer_sampler_free(smp);
    return got;
}

/* MTP drafting through a split whose head (and MTP block) is on the CPU: the greedy stream of infer_spec_step
 * equals plain greedy decoding of the same placement, the device stage's recurrent state rolled back from its
 * own snapshot ring after each rejected draft. make: the GPU part's backend (NULL: a load with -ngl ngl). */
static void check_split_mtp(const char *arch, int32_t ngl, ctx_backend_fn make, float noise) {
    enum { N_GEN = 40 };
    /* noise > 0: an MTP head that agrees with the model but for noise (drafts accepted and rejected both);
     * 0: a random head (every draft rejected: a rollback at every step) */
    static char path_buf[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = "F32", sp.seed = 13, sp.n_layer = N_LAYER, sp.mtp = 1, sp.mtp_noise = noise;
    snprintf(path_buf, sizeof path_buf, "%s/%s-mtp-noise.gguf", dir, arch);
    const char *path = synth_write(&sp, path_buf) == INFER_OK ? path_buf : NULL;
    if (!path) T_CHECK(0, "synth %s with a noisy MTP head: %s", arch, infer_last_error());
    infer_model *m = path ? load(path, make ? 0 : ngl) : NULL;
    infer_ctx_params pd = ctx_params(1), pp = ctx_params(1);
    pd.n_draft = 3;
    infer_ctx *d = NULL, *plain = NULL;
    if (m && (make ? ctx_create_split_on(m, &pd, ngl, make, &d) : infer_ctx_create(m, &pd, &d)) != INFER_OK)
        T_CHECK(0, "%s -ngl %d with n_draft 3: %s", arch, ngl, infer_last_error());
    if (m && (make ? ctx_create_split_on(m, &pp, ngl, make, &plain) : infer_ctx_create(m, &pp, &plain)) != INFER_OK)
        T_CHECK(0, "%s -ngl %d: %s", arch, ngl, infer_last_error());
    const int32_t prompt[5] = {11, 3, 27, 8, 19};
    int32_t a[N_GEN], b[N_GEN];
    if (d && plain) {
        const int32_t na = greedy_stream(d, STREAM_SPEC, prompt, 5, a, N_GEN);
        const int32_t nb = greedy_stream(plain, STREAM_PLAIN_HOST, prompt, 5, b, N_GEN);
        int32_t same = 0;
        while (same < na && same < nb && a[same] == b[same]) same++;
        const infer_spec_stats st = infer_spec_get_stats(d);
        T_CHECK(na == N_GEN && nb == N_GEN && same == N_GEN && d->n_seg == 3 && st.n_accepted < st.n_drafted &&
                    (noise == 0 || st.n_accepted > 0),
                "%s -ngl %d%s: MTP greedy stream equals plain decoding for %d of %d tokens (%lld drafted, %lld "
                "accepted)", arch, ngl, make ? " (CPU both sides)" : "", same, N_GEN, (long long)st.n_drafted,
                (long long)st.n_accepted);
        printf("  %-9s -ngl %d%s: MTP stream = plain for %d tokens, %lld of %lld drafts accepted\n", arch, ngl,
               make ? " (CPU both sides)" : "", same, (long long)st.n_accepted, (long long)st.n_drafted);
    }
    infer_ctx_free(d), infer_ctx_free(plain), infer_model_free(m);
    if (path) unlink(path);
}

/* ---- on a device ---- */

static void probe_mode(void) {
    char msg[700];
    T_CHECK(pair_probe_mode(&mode, msg, sizeof msg), "%s", msg);
    printf("%s\n", msg);
}

enum { SCEN_BASIC, SCEN_TWO_SEQ };

/* The file loaded with n_gpu_layers ngl against the split reference; the reference against the plain CPU
 * (loose: what the GPU segment's numerics may move; in exact mode the split equals the reference). */
static void check_split(const char *arch, const char *ftype, int32_t ngl, int scen) {
    const char *path = synth_file(arch, ftype, 0);
    if (!path) return;
    const int32_t n_seq = scen == SCEN_TWO_SEQ ? 2 : 1;
    infer_model *mg = load(path, ngl), *mh = load(path, 0);
    infer_ctx *g = mg ? make_ctx(mg, n_seq) : NULL, *r = mh ? make_split(mh, ngl, gpu_like_backend_create, n_seq) : NULL;
    infer_ctx *r2 = mh ? make_split(mh, ngl, gpu_like_backend_create, n_seq) : NULL, *cpu = mh ? make_ctx(mh, n_seq) : NULL;
    struct pair_stats s, sc;
    pair_stats_init(&s), pair_stats_init(&sc);
    if (g && r && r2 && cpu) {
        T_CHECK(g->n_seg == (ngl <= N_LAYER ? 3 : 1) && r->n_seg == g->n_seg, "%s -ngl %d: %d segments", arch, ngl,
                g->n_seg);
        infer_status st = scen == SCEN_BASIC ? pair_basic(g, r, N_PROMPT, N_DECODE, &s) : pair_two_seq(g, r, &s);
        T_CHECK(st == INFER_OK, "%s %s -ngl %d: %s", arch, ftype, ngl, pair_error());
        st = scen == SCEN_BASIC ? pair_basic(r2, cpu, N_PROMPT, N_DECODE, &sc) : pair_two_seq(r2, cpu, &sc);
        T_CHECK(st == INFER_OK, "%s %s -ngl %d reference against the CPU: %s", arch, ftype, ngl, pair_error());
        char msg[256], msg_cpu[256];
        T_CHECK(pair_within(&s, mode, ftype, msg, sizeof msg), "%s %s -ngl %d%s (%s mode): %s", arch, ftype, ngl,
                n_seq > 1 ? " two sequences" : "", mode == PAIR_EXACT ? "exact" : "device", msg);
        T_CHECK(pair_within(&sc, PAIR_LOOSE, ftype, msg_cpu, sizeof msg_cpu), "%s %s -ngl %d reference against the CPU "
                "(loose): %s",
                arch, ftype, ngl, msg_cpu);
        printf("  %-9s %-6s -ngl %d%-15s %s\n", arch, ftype, ngl, n_seq > 1 ? " two sequences" : "", msg);
    }
    pair_stats_free(&s), pair_stats_free(&sc);
    infer_ctx_free(g), infer_ctx_free(r), infer_ctx_free(r2), infer_ctx_free(cpu);
    infer_model_free(mg), infer_model_free(mh);
    unlink(path);
}

/* Decode steps of a split: one graph launch each (emulator), and the same logits without graphs. */
static void check_graphs(void) {
    const char *path = synth_file("qwen35", "Q4_K_M", 0);
    infer_model *m = path ? load(path, 2) : NULL;
    infer_ctx *ctx[2] = {NULL, NULL};
    for (int k = 0; m && k < 2; k++) {
        if (k) setenv("INFER_CUDA_GRAPHS", "0", 1);
        ctx[k] = make_ctx(m, 1);
        unsetenv("INFER_CUDA_GRAPHS");
    }
    int32_t t = 9, diff = 0, steps = 0;
#ifdef INFER_EMU
    uint64_t launches = 0;
#endif
    for (int s = 0; ctx[0] && ctx[1] && s < 8; s++, steps++) {
        const float *l[2];
        for (int k = 0; k < 2; k++) {
            infer_batch b = {1, &t, NULL, NULL, NULL};
#ifdef INFER_EMU
            struct emu_counters c0, c1;
            emu_counters_get(0, &c0);
#endif
            if (infer_decode(ctx[k], &b) != INFER_OK) T_CHECK(0, "decode: %s", infer_last_error());
#ifdef INFER_EMU
            emu_counters_get(0, &c1);
            if (k == 0) launches += c1.graph_launches - c0.graph_launches;
#endif
            l[k] = infer_logits(ctx[k], -1);
        }
        if (!l[0] || !l[1]) break;
        diff += memcmp(l[0], l[1], (size_t)infer_vocab_size(m) * sizeof(float)) != 0;
        int32_t best = 0;
        for (int32_t v = 1; v < infer_vocab_size(m); v++)
            if (l[0][v] > l[0][best]) best = v;
        t = best;
    }
    T_CHECK(steps == 8 && diff == 0, "split decode with graphs vs INFER_CUDA_GRAPHS=0: %d of %d steps differ", diff, steps);
#ifdef INFER_EMU
    T_CHECK(launches == (uint64_t)steps, "one graph launch per split decode step: %llu in %d steps",
            (unsigned long long)launches, steps);
#endif
    infer_ctx_free(ctx[0]), infer_ctx_free(ctx[1]), infer_model_free(m);
    if (path) unlink(path);
}

#ifdef INFER_EMU
/* Bytes to and from the device of one decode of n tokens (every row asked), then of reading the logits. */
static void bus_bytes(infer_ctx *c, int32_t n, uint64_t *h2d, uint64_t *d2h, uint64_t *d2h_logits) {
    int32_t tok[2] = {7, 11}, seq[2] = {0, 0};
    int8_t want[2] = {1, 1};
    infer_batch b = {n, tok, NULL, seq, want};
    struct emu_counters c0, c1, c2;
    emu_counters_get(0, &c0);
    if (infer_decode(c, &b) != INFER_OK) T_CHECK(0, "decode: %s", infer_last_error());
    emu_counters_get(0, &c1);
    for (int32_t i = 0; i < n; i++)
        if (!infer_logits(c, i)) T_CHECK(0, "logits row %d: %s", i, infer_last_error());
    emu_counters_get(0, &c2);
    *h2d = c1.h2d_bytes - c0.h2d_bytes, *d2h = c1.d2h_bytes - c0.d2h_bytes, *d2h_logits = c2.d2h_bytes - c1.d2h_bytes;
}

static void check_bus(int32_t ngl) {
    const char *path = synth_file("llama", "F32", 0);
    infer_model *m99 = path ? load(path, 99) : NULL, *m2 = path ? load(path, ngl) : NULL;
    infer_ctx *c99 = m99 ? make_ctx(m99, 1) : NULL, *c2 = m2 ? make_ctx(m2, 1) : NULL;
    const int32_t prompt[4] = {3, 1, 4, 1};
    infer_batch b = {4, prompt, NULL, NULL, NULL};
    for (int k = 0; c99 && c2 && k < 2; k++)
        if (infer_decode(k ? c2 : c99, &b) != INFER_OK) T_CHECK(0, "prompt: %s", infer_last_error());
    for (int32_t n = 1; c99 && c2 && n <= 2; n++) {
        uint64_t h99, d99, l99, h2, d2, l2;
        bus_bytes(c99, n, &h99, &d99, &l99);
        bus_bytes(c2, n, &h2, &d2, &l2);
        const uint64_t x = (uint64_t)n * (uint64_t)m2->hp.n_embd * sizeof(float), ids = (uint64_t)n * sizeof(int32_t);
        const uint64_t logits = (uint64_t)n * (uint64_t)m2->hp.n_vocab * sizeof(float);
        printf("  bus per decode of %d token(s): -ngl 99 %llu B in, %llu B out (+%llu B of logits read); -ngl %d %llu "
               "B in, %llu B out (+%llu B)\n", n, (unsigned long long)h99, (unsigned long long)d99,
               (unsigned long long)l99, ngl, (unsigned long long)h2, (unsigned long long)d2, (unsigned long long)l2);
        /* -ngl 99: token ids, positions and asked rows in; the split: positions and x in, x out */
        T_CHECK(h99 == 3 * ids && d99 == 0 && l99 == logits, "-ngl 99, %d tokens: %llu B in, %llu B out, %llu B of "
                "logits", n, (unsigned long long)h99, (unsigned long long)d99, (unsigned long long)l99);
        T_CHECK(h2 == h99 - 2 * ids + x && d2 == d99 + x && l2 == 0, "-ngl %d of 4, %d tokens: %llu B in (expected "
                "%llu), %llu B out (expected %llu), %llu B of logits (expected 0)", ngl, n, (unsigned long long)h2,
                (unsigned long long)(h99 - 2 * ids + x), (unsigned long long)d2, (unsigned long long)(d99 + x),
                (unsigned long long)l2);
    }
    infer_ctx_free(c99), infer_ctx_free(c2), infer_model_free(m99), infer_model_free(m2);
    if (path) unlink(path);
}
#endif

static void check_bad_input(void) {
    const char *path = synth_file("qwen35", "F32", 1);
    if (!path) return;
    infer_model_params p = infer_model_params_default();
    infer_model *m = NULL;
    p.n_gpu_layers = 2, p.main_gpu = infer_device_count();
    infer_status st = infer_model_load(path, &p, &m);
    T_CHECK(st == INFER_E_ARG && !m && strstr(infer_last_error(), "device"), "a split on a device that does not "
            "exist: status %d, '%s'", st, infer_last_error());
    p.main_gpu = 0;
    m = load(path, -1);
    T_CHECK(m && m->gpu_head && m->gpu_layer0 == 0, "n_gpu_layers -1: every layer and the head on the GPU");
    infer_model_free(m);
    unlink(path);
}

int main(void) {
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return t_done();
    }
    check_placement();
    check_fit();
    const int32_t ngls[] = {0, 1, 2, N_LAYER, N_LAYER + 1};
    for (size_t k = 0; k < sizeof ngls / sizeof *ngls; k++) check_cpu_split("llama", ngls[k]);
    check_cpu_split("qwen35", 1);
    check_cpu_split_seq();
    check_split_mtp("qwen35", 2, backend_cpu_create, 0.0f);
    check_split_mtp("qwen35", 2, backend_cpu_create, 0.19f);
    check_split_mtp("qwen35moe", 1, backend_cpu_create, 0.19f);
    const char *why = NULL;
    if (device_count(&why) == 0) {
        rmdir(dir);
        T_SKIP("no CUDA device: %s; splits on a device", why ? why : "none");
        const int rc = t_done();
        return rc ? rc : 77;
    }
    probe_mode();
    const char *archs[] = {"llama", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"};
    const char *types[] = {"F32", "Q4_K_M"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++)
        for (size_t t = 0; t < sizeof types / sizeof *types; t++)
            for (size_t k = 1; k < sizeof ngls / sizeof *ngls; k++) {
                /* t_quick: every arch split at one layer and with only the head on the host, in F32 (the
                 * quantised kernels are test-cuda-e2e's); Q4_K_M once */
                const int quick_case = t == 0 ? ngls[k] == 1 || ngls[k] == N_LAYER : ngls[k] == 2 && a == 3;
                if (!t_quick() || quick_case) check_split(archs[a], types[t], ngls[k], SCEN_BASIC);
            }
    check_split("llama", "F32", 2, SCEN_TWO_SEQ);
    check_split("qwen35moe", "Q4_K_M", 1, SCEN_TWO_SEQ);
    check_graphs();
    check_split_mtp("qwen35", 2, NULL, 0.0f);
    check_split_mtp("qwen35moe", 4, NULL, 0.19f);
#ifdef INFER_EMU
    check_bus(2);
    check_bus(N_LAYER);
#endif
    check_bad_input();
    rmdir(dir);
    return t_done();
}
