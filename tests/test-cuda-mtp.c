/* test-cuda-mtp: MTP speculative decoding with the head, the MTP block, its cells and the hidden states on a device
 * (lib/spec.c, lib/layer_mtp.c; docs/DESIGN.md §10). The reference is plain greedy decoding of the same placement:
 * greedy acceptance keeps a draft only where it is the token plain decoding picks, so any difference in the stream
 * is a fault of drafting, verification or rollback, never of the kernels' rounding.
 * On a device (the emulator in check-emu):
 *   - qwen35, qwen35moe and qwen3next in F32 and Q4_K_M, -ngl 99, with a random MTP head (nearly every draft
 *     rejected: a rollback of the device's recurrent state at nearly every step), an agreeing one (every draft
 *     accepted) and a noisy one (some): the greedy streams of n_draft 1..4 equal the plain stream token for
 *     token, with the acceptance each head implies (t_quick, the sanitizers' run: qwen35 F32 only, n_draft 1..4
 *     with the agreeing head and 3 with the others, and one model per placement below);
 *   - the drafts themselves, which greedy acceptance would hide when wrong (fewer kept, the stream still right): with
 *     a random head (its argmax depends on everything the MTP block reads) the device's draft ids equal the CPU
 *     engine's on the same file, step by step in lockstep, and every draft's logits within 5e-4 of the CPU's
 *     (F32: the engines differ by rounding, ~2e-6; a draft at the wrong position moves them by ~6e-3);
 *   - what crosses the bus in a greedy step: the step's last token, each draft's position, the verification batch's
 *     positions and rows, and the k + 2 ints of the acceptance (its count and emitted ids) — no logits row (the
 *     drafts' argmax, the verification's picks and their compare with the drafts run on the device), no draft id
 *     (the batch copies them from the drafts' buffer on the device) and no second copy of the ids for the MTP block;
 *   - rollback on the device: a checkpoint after the prompt, generation, back to the checkpoint and again, then
 *     truncations 1..n_draft positions back into the snapshot ring after plain decodes, each resumed: the plain
 *     stream again;
 *   - temp > 0 with the default chain (lib/spec.c SPEC_LISTS: drafts drawn, listed and accepted on the device): a
 *     run is reproducible with the seed, accepts drafts on the agreeing head, and a step moves only positions, the
 *     step's uniforms and the emitted ids over the bus (the distribution is test-spec-dist's, which runs on the device
 *     too); with a repeat penalty the same, plus the window's pairs and the drafts' drops;
 *   - greedy with penalties (the agreeing head, F32; windows of 4 and 16 tokens): the stream equals plain decoding
 *     with the same penalties, sampled on the host, and a step moves no logits row: each verification row is
 *     penalised on the device by the window after the drafts before it (kernels.h sample_args.pen_push);
 *   - CUDA graphs (agreeing head, F32): streams, acceptance and drafts' logits with graphs equal those without;
 *     on the emulator a steady greedy step of 3 drafts is 5 graph launches (the drafts, the verification, the
 *     MTP block's follow-up) and two kernel launches outside them (the sample op over the 4 verification rows and
 *     spec_accept's compare);
 *   - placements: --n-cpu-moe 1 (the first MoE layer's routed experts in host memory, and the token table, which
 *     the MTP block reads, with them: the block's rows come up from the host), --cpu-moe (the MTP block's own
 *     experts on the host too) and -sm layer over two devices (the head and the MTP block on the second, the token
 *     table on the first): the same equality, under -sm layer with penalties too. (-sm tensor: test-cuda-tp.)
 * Without a device the test prints SKIP and exits 77.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "forward.h"
#include "sampler.h"
#include "spec.h"
#include "stream.h"
#include "t.h"
#ifdef INFER_EMU
#include "emu_api.h"
#endif

enum { N_PROMPT = 8, N_GEN = 24, N_CTX = N_PROMPT + 2 * N_GEN + 16 };

static char dir[] = "/tmp/test-cuda-mtp-XXXXXX";

struct placement {
    int32_t n_cpu_moe;  /* routed experts of the first N MoE layers in host memory */
    int sm_layer;       /* -sm layer over two devices */
    int32_t fit_draft;  /* the load's fit context drafts this many: the head's device gets a copy of the token table */
};

static infer_model *make_model(const char *arch, const char *ftype, int agree, float noise, struct placement pl) {
    const char *tag = noise > 0 ? "noise" : agree ? "agree" : "random";
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 5, sp.mtp = 1, sp.mtp_agree = agree, sp.mtp_noise = noise;
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%s-%s.gguf", dir, arch, ftype, tag);
    infer_model_params p = infer_model_params_default();
    p.n_gpu_layers = 99, p.n_cpu_moe = pl.n_cpu_moe;
    if (pl.sm_layer) p.split_mode = INFER_SPLIT_LAYER;
    infer_ctx_params fit = infer_ctx_params_default();
    fit.n_ctx = N_CTX, fit.n_draft = pl.fit_draft;
    p.fit_ctx = &fit;
    infer_model *m = NULL;
    if (synth_write(&sp, path) != INFER_OK || infer_model_load(path, &p, &m) != INFER_OK)
        T_CHECK(0, "%s %s %s: synth and load: %s", arch, ftype, tag, infer_last_error());
    unlink(path);
    return m;
}

static infer_ctx *make_ctx(const infer_model *m, int32_t n_draft) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_CTX, p.n_batch = 16, p.n_threads = 2, p.n_draft = n_draft;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) T_CHECK(0, "infer_ctx_create n_draft %d: %s", n_draft, infer_last_error());
    return c;
}

static infer_sampler *make_sampler(const infer_model *m, float temp, uint64_t seed) {
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = temp, sp.seed = seed;
    infer_sampler *s = NULL;
    if (infer_sampler_create(&sp, infer_vocab_size(m), &s) != INFER_OK) T_CHECK(0, "sampler: %s", infer_last_error());
    return s;
}

/* Greedy tokens after the prompt by plain one-token decoding, sampled on the host from the downloaded logits. */
static int plain_stream(infer_ctx *c, const infer_model *m, const int32_t *prompt, int32_t *out, int32_t n) {
    infer_sampler *s = make_sampler(m, 0, 7);
    const int ok = c && s && stream_run(c, s, STREAM_PLAIN_HOST, prompt, N_PROMPT, out, n, NULL) == n;
    infer_sampler_free(s);
    return ok;
}

/* Spec steps on seq 0 of c from `last` (known, not decoded) until out holds n tokens (out[0] = last); *next: the
 * last step's last token (not decoded), where the next step starts. */
static int spec_continue(infer_ctx *c, infer_sampler *s, int32_t last, int32_t *out, int32_t n, int32_t *next) {
    const int ok = stream_continue(c, s, STREAM_SPEC, last, out, n, next, NULL) == n;
    if (!ok) T_CHECK(0, "infer_spec_step: %s", infer_last_error());
    return ok;
}

static int first_diff(const int32_t *a, const int32_t *b, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

/* One greedy step's bus bytes: infer_ctx_bus_bytes across it, against the ids and positions it must move. */
static void check_step_bus(infer_ctx *c, infer_sampler *s, int32_t last, const char *name) {
    int32_t step[INFER_MAX_DRAFT + 1], k = 0, pairs[2 * N_CTX];
    const int has_pen = sampler_has_penalties(s);
    const uint64_t n_pen = has_pen ? (uint64_t)sampler_penalty_pairs(s, pairs) : 0;
    const uint64_t before = infer_ctx_bus_bytes(c);
    const int ok = infer_spec_step(c, s, 0, last, step, INFER_MAX_DRAFT + 1, &k) == INFER_OK;
    const uint64_t moved = infer_ctx_bus_bytes(c) - before, d = (uint64_t)c->spec_drafts, i4 = sizeof(int32_t);
    /* drafting: last and a position per draft; verification: positions and rows (its ids are the drafts' buffer's,
     * copied on the device; the MTP block reads them there too); acceptance: the window's (token, count) pairs and
     * the token each draft moves out of it (penalties only), the count and the emitted ids */
    const uint64_t pen = has_pen ? (2 * n_pen + d) * i4 : 0;
    const uint64_t want = i4 + d * i4 + 2 * (d + 1) * i4 + pen + (d + 2) * i4;
    T_CHECK(ok && moved == want && moved < (uint64_t)c->m->hp.n_vocab * sizeof(float),
            "%s: a greedy step of %llu drafts moved %llu bytes over the bus, expected %llu (no logits row)", name,
            (unsigned long long)d, (unsigned long long)moved, (unsigned long long)want);
}

/* A greedy step under -sm layer over two devices: x crosses from the first device to the host and on to the second
 * once per verified token (d + 1 rows each way) and some ints go with it. With the token table's copy on the head's
 * device that is all (less than a row more); without it, at least each draft's row came up. */
static void check_split_bus(infer_ctx *c, infer_sampler *s, int32_t last, const char *name, int copy) {
    int32_t step[INFER_MAX_DRAFT + 1], k = 0;
    const uint64_t before = infer_ctx_bus_bytes(c);
    const int ok = infer_spec_step(c, s, 0, last, step, INFER_MAX_DRAFT + 1, &k) == INFER_OK;
    const uint64_t moved = infer_ctx_bus_bytes(c) - before, d = (uint64_t)c->spec_drafts;
    const uint64_t row = (uint64_t)c->m->hp.n_embd * sizeof(float), handoff = 2 * (d + 1) * row;
    const int want = copy ? moved >= handoff && moved - handoff < row : moved >= handoff + d * (row + sizeof(int32_t));
    T_CHECK(ok && d > 0 && want, "%s: a greedy step of %llu drafts moved %llu bytes over the bus: expected %s %llu",
            name, (unsigned long long)d, (unsigned long long)moved,
            copy ? "less than a row beyond the handoff's" : "the handoff's and the drafts' rows, at least",
            (unsigned long long)(copy ? handoff : handoff + d * row));
}

/* Greedy with penalties (lib/spec.c: verification row i penalised by the window after d_0 .. d_{i-1}, on the
 * device): the stream equals plain decoding with the same penalties sampled on the host, which differs from the
 * unpenalised stream want (so the penalties matter), with windows of 4 tokens (each of 4 drafts pushes the oldest
 * token out) and 16; drafts kept and rejected (the head proposes the unpenalised argmax); a step moves no logits
 * row (one stage). Under -sm layer the drafts come down for the first stage's batch and the acceptance is the head
 * device's all the same. (A draft pushing an earlier draft out is test-ops' and test-spec-dist's.) */
static void check_penalty(const infer_model *m, const char *name, const int32_t *prompt, const int32_t *want,
                          int one_stage) {
    static const int32_t last_n[2] = {4, 16}, n_draft[2] = {4, 3};
    for (int v = 0; v < 2; v++) {
        infer_sampler_params sp = infer_sampler_params_default();
        sp.temp = 0, sp.seed = 7, sp.penalty_last_n = last_n[v];
        sp.presence_penalty = -15.0f; /* a bonus: the bigram's next token leads by ~16 (synth.h mtp_agree), so a
                                       * token in the window wins where its own logit tops ~1: a cycle of 4 */
        int32_t plain[N_GEN], got[N_GEN], first = -1, next = -1;
        infer_sampler *s0 = NULL, *s1 = NULL;
        infer_ctx *c0 = make_ctx(m, 0), *c1 = make_ctx(m, n_draft[v]);
        infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
        int ok = c0 && c1 && infer_sampler_create(&sp, infer_vocab_size(m), &s0) == INFER_OK &&
                 infer_sampler_create(&sp, infer_vocab_size(m), &s1) == INFER_OK;
        ok = ok && stream_run(c0, s0, STREAM_PLAIN_HOST, prompt, N_PROMPT, plain, N_GEN, NULL) == N_GEN;
        ok = ok && infer_decode(c1, &b) == INFER_OK && infer_sample(c1, s1, -1, &first) == INFER_OK &&
             spec_continue(c1, s1, first, got, N_GEN, &next);
        const infer_spec_stats st = c1 ? infer_spec_get_stats(c1) : (infer_spec_stats){0, 0, 0};
        T_CHECK(ok && first_diff(got, plain, N_GEN) < 0 && first_diff(plain, want, N_GEN) >= 0 &&
                    st.n_accepted > 0 && st.n_accepted < st.n_drafted,
                "%s greedy, penalties over %d tokens, n_draft %d: the MTP stream differs from plain decoding at %d, "
                "the plain one from the unpenalised at %d, %lld of %lld drafts kept (%s)", name, last_n[v], n_draft[v],
                first_diff(got, plain, N_GEN), first_diff(plain, want, N_GEN), (long long)st.n_accepted,
                (long long)st.n_drafted, ok ? "" : infer_last_error());
        char what[160];
        snprintf(what, sizeof what, "%s penalties over %d", name, last_n[v]);
        if (ok && one_stage) check_step_bus(c1, s1, next, what);
        if (ok && first_diff(got, plain, N_GEN) < 0)
            printf("  %-40s penalties over %2d, n_draft %d: stream = plain, %lld of %lld drafts accepted\n", name,
                   last_n[v], n_draft[v], (long long)st.n_accepted, (long long)st.n_drafted);
        infer_sampler_free(s0), infer_sampler_free(s1), infer_ctx_free(c0), infer_ctx_free(c1);
    }
}

/* Back to the checkpoint after the prompt, then into the ring after plain decodes (test-spec's check_truncate on a
 * device): each continuation is the plain stream again. */
static void check_rollback(const infer_model *m, const char *name, const int32_t *prompt, const int32_t *want,
                           int32_t n_want) {
    enum { N_DRAFT = 3, RESUMED = 8 };
    infer_ctx *c = make_ctx(m, N_DRAFT);
    infer_sampler *s = make_sampler(m, 0, 7);
    int32_t got[2 * N_GEN];
    infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
    if (!c || !s || infer_decode(c, &b) != INFER_OK || infer_seq_checkpoint(c, 0) != INFER_OK) {
        T_CHECK(0, "%s: prompt and checkpoint: %s", name, infer_last_error());
        goto done;
    }
    for (int round = 0; round < 2; round++) {
        infer_sampler_reset(s);
        const int ok = spec_continue(c, s, want[0], got, N_GEN, NULL);
        T_CHECK(ok && first_diff(got, want, N_GEN) < 0, "%s: round %d after the checkpoint differs at %d", name,
                round, first_diff(got, want, N_GEN));
        T_CHECK(infer_seq_rm(c, 0, N_PROMPT, -1) == INFER_OK && infer_seq_pos_max(c, 0) == N_PROMPT - 1,
                "%s: back to the checkpoint: %s", name, infer_last_error());
    }
    for (int back = 1; back <= N_DRAFT; back++) {
        int ok = infer_seq_rm(c, 0, N_PROMPT, -1) == INFER_OK && spec_continue(c, s, want[0], got, N_GEN / 2, NULL);
        int32_t len = infer_seq_pos_max(c, 0) + 1;
        for (int i = 0; ok && i < N_DRAFT + 1; i++, len++) { /* the stream's next tokens, one by one */
            infer_batch d = {1, &want[len - N_PROMPT], NULL, NULL, NULL};
            ok = infer_decode(c, &d) == INFER_OK;
        }
        const int32_t keep = len - back; /* want[keep - N_PROMPT] comes next */
        ok = ok && keep - N_PROMPT + RESUMED <= n_want && infer_seq_rm(c, 0, keep, -1) == INFER_OK;
        T_CHECK(ok, "%s: %d positions back: %s", name, back, infer_last_error());
        ok = ok && spec_continue(c, s, want[keep - N_PROMPT], got, RESUMED, NULL);
        T_CHECK(ok && first_diff(got, want + (keep - N_PROMPT), RESUMED) < 0,
                "%s: resumed %d positions back differs at %d", name, back,
                first_diff(got, want + (keep - N_PROMPT), RESUMED));
    }
done:
    infer_sampler_free(s), infer_ctx_free(c);
}

/* temp > 0 on the device: reproducible with the seed; on the agreeing head most drafts are accepted. With the default
 * chain, and with a repeat penalty too, the device path's bus: per step the last token, the 3 n_draft + 1 uniforms, a
 * position per draft, the verification's positions and rows (its ids are the drafts, on the device), the window's
 * pairs and the drafts' drops (penalty only), and spec_accept's k + 2 ints. */
static void check_temp(const infer_model *m, const char *name, const int32_t *prompt) {
    for (int penalty = 0; penalty < 2; penalty++) {
        int32_t a[N_GEN], b[N_GEN];
        infer_spec_stats st = {0, 0, 0};
        uint64_t bus = 0;
        int ok = 1;
        for (int run = 0; run < 2 && ok; run++) {
            infer_ctx *c = make_ctx(m, 3);
            infer_sampler_params sp = infer_sampler_params_default();
            sp.temp = 0.8f, sp.seed = 11, sp.repeat_penalty = penalty ? 1.1f : 1.0f;
            infer_sampler *s = NULL;
            infer_batch bt = {N_PROMPT, prompt, NULL, NULL, NULL};
            int32_t first = -1, next = -1;
            ok = c && infer_sampler_create(&sp, infer_vocab_size(m), &s) == INFER_OK && infer_decode(c, &bt) == INFER_OK &&
                 infer_sample(c, s, -1, &first) == INFER_OK && spec_continue(c, s, first, run ? b : a, N_GEN, &next);
            if (c) st = infer_spec_get_stats(c);
            if (ok && run == 1) { /* one more step, measured */
                int32_t step[INFER_MAX_DRAFT + 1], k = 0, pairs[2 * 64];
                const uint64_t n_pen = penalty ? (uint64_t)sampler_penalty_pairs(s, pairs) : 0;
                const uint64_t before = infer_ctx_bus_bytes(c);
                ok = infer_spec_step(c, s, 0, next, step, INFER_MAX_DRAFT + 1, &k) == INFER_OK;
                bus = infer_ctx_bus_bytes(c) - before;
                const uint64_t d = (uint64_t)c->spec_drafts, i4 = sizeof(int32_t), nd = 3;
                const uint64_t pen = penalty ? (2 * n_pen + d) * i4 : 0; /* the window's pairs, the drafts' drops */
                const uint64_t want =
                    i4 + (3 * nd + 1) * sizeof(double) + d * i4 + 2 * (d + 1) * i4 + pen + (d + 2) * i4;
                T_CHECK(ok && bus == want, "%s temp 0.8%s: a step of %llu drafts moved %llu bytes over the bus, "
                        "expected %llu (no logits row)", name, penalty ? " + penalty" : "", (unsigned long long)d,
                        (unsigned long long)bus, (unsigned long long)want);
            }
            infer_sampler_free(s), infer_ctx_free(c);
        }
        T_CHECK(ok && first_diff(a, b, N_GEN) < 0 && st.n_accepted > st.n_drafted / 2,
                "%s temp 0.8%s: two runs with one seed differ at %d; %lld of %lld drafts accepted", name,
                penalty ? " + penalty" : "", first_diff(a, b, N_GEN), (long long)st.n_accepted, (long long)st.n_drafted);
    }
}

/* CUDA graphs of the draft-verify round (lib/spec.c spec_draft_body, context.c ctx_mtp_follow_body, forward.c
 * forward_graph_key with the ring slot): the streams, acceptance and drafts' logits with graphs equal those with
 * INFER_CUDA_GRAPHS=0 (a stale argument in a replayed draft would lose acceptance, in a replayed verification the
 * stream), and, on the emulator, a steady greedy step runs its k drafts, the verification and the MTP block's
 * follow-up as k + 2 graph launches, the only kernels launched outside a graph being one sample op over the
 * verification's k + 1 rows and spec_accept's compare of their picks with the drafts. */
static void check_graphs(const infer_model *m, const char *name, const int32_t *prompt) {
    enum { K = 3 };
    int32_t tok[2][N_GEN];
    infer_spec_stats st[2] = {{0, 0, 0}, {0, 0, 0}};
    float *drafts[2] = {NULL, NULL};
    const size_t nv = (size_t)infer_vocab_size(m);
    int ok = 1;
    for (int g = 0; g < 2 && ok; g++) {
        if (g == 1) setenv("INFER_CUDA_GRAPHS", "0", 1); /* read at context creation */
        infer_ctx *c = make_ctx(m, K);
        if (g == 1) unsetenv("INFER_CUDA_GRAPHS");
        infer_sampler *s = make_sampler(m, 0, 7);
        infer_batch bt = {N_PROMPT, prompt, NULL, NULL, NULL};
        int32_t first = -1, next = -1;
        ok = c && s && infer_decode(c, &bt) == INFER_OK && infer_sample(c, s, -1, &first) == INFER_OK &&
             spec_continue(c, s, first, tok[g], N_GEN, &next);
        if (c) st[g] = infer_spec_get_stats(c);
        if (ok) { /* the last step's drafts' logits */
            const infer_ctx *h = forward_head_stage(c);
            drafts[g] = malloc(K * nv * sizeof(float));
            ok = drafts[g] && h->be->ops->download(h->be, drafts[g], h->mtp_logits, K * nv * sizeof(float)) == INFER_OK;
        }
#ifdef INFER_EMU
        if (ok && g == 0) { /* one more step, counted (the ring slots repeat: every graph is captured by now) */
            struct emu_counters c0, c1;
            int32_t step[INFER_MAX_DRAFT + 1], k = 0;
            emu_counters_get(0, &c0);
            ok = infer_spec_step(c, s, 0, next, step, INFER_MAX_DRAFT + 1, &k) == INFER_OK;
            emu_counters_get(0, &c1);
            const uint64_t launches = c1.launches - c0.launches, graphs = c1.graph_launches - c0.graph_launches;
            T_CHECK(ok && k == K + 1 && graphs == K + 2 && launches == 2,
                    "%s: a steady step of %d drafts (%d kept) ran %llu graphs (expected %d) and %llu launches outside "
                    "graphs (expected 2: the sample op over the %d verification rows, spec_accept)", name, K, k - 1,
                    (unsigned long long)graphs, K + 2, (unsigned long long)launches, K + 1);
            printf("  %-40s a steady step: %llu graph launches, %llu kernels in them, %llu launches outside\n", name,
                   (unsigned long long)graphs, (unsigned long long)(c1.kernels - c0.kernels - launches),
                   (unsigned long long)launches);
        }
#endif
        infer_sampler_free(s), infer_ctx_free(c);
    }
    double worst = 0;
    for (size_t i = 0; ok && i < K * nv; i++) worst = fmax(worst, fabs((double)drafts[0][i] - drafts[1][i]));
    T_CHECK(ok && first_diff(tok[0], tok[1], N_GEN) < 0 && st[0].n_accepted == st[1].n_accepted &&
                st[0].n_drafted == st[1].n_drafted && worst == 0,
            "%s: graphs against none: streams differ at %d, %lld / %lld against %lld / %lld drafts accepted, drafts' "
            "logits max |diff| %g (%s)", name, first_diff(tok[0], tok[1], N_GEN), (long long)st[0].n_accepted,
            (long long)st[0].n_drafted, (long long)st[1].n_accepted, (long long)st[1].n_drafted, worst,
            ok ? "" : infer_last_error());
    free(drafts[0]), free(drafts[1]);
}

/* The drafts themselves (greedy acceptance hides wrong ones: the stream stays right, only fewer are kept): with a
 * random MTP head, whose argmax depends on everything the block reads (its token row, h, its cells at their
 * positions), the device's drafts equal those of the same file on the CPU, step by step in lockstep. */
static void check_drafts(const char *arch) {
    enum { N_STEPS = 12 };
    /* F32 rounding between the engines moves these logits by ~2e-6 (emulator); a draft at a wrong position by ~6e-3 */
    const double DRAFT_TOL = 5e-4;
    infer_model *m = make_model(arch, "F32", 0, 0, (struct placement){.n_cpu_moe = 0});
    char path[256];
    snprintf(path, sizeof path, "%s/%s-cpu.gguf", dir, arch);
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = "F32", sp.seed = 5, sp.mtp = 1;
    infer_model *m0 = NULL;
    if (synth_write(&sp, path) != INFER_OK || infer_model_load(path, NULL, &m0) != INFER_OK)
        T_CHECK(0, "%s on the CPU: %s", arch, infer_last_error());
    unlink(path);
    infer_ctx *c = m ? make_ctx(m, 3) : NULL, *c0 = m0 ? make_ctx(m0, 3) : NULL;
    infer_sampler *s = m ? make_sampler(m, 0, 7) : NULL, *s0 = m ? make_sampler(m, 0, 7) : NULL;
    const int32_t nv = m ? infer_vocab_size(m) : 9;
    int32_t prompt[N_PROMPT], same = 0, total = 0, last = -1;
    float *row = malloc((size_t)nv * sizeof(float));
    double max_err = 0;
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((i * 29 + 3) % (nv - 8));
    infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
    int ok = row && c && c0 && s && s0 && infer_decode(c, &b) == INFER_OK && infer_decode(c0, &b) == INFER_OK;
    if (ok) {
        last = infer_sampler_sample(s0, infer_logits(c0, -1));
        infer_sampler_accept(s, last);
    }
    for (int step = 0; ok && step < N_STEPS; step++) {
        int32_t out[INFER_MAX_DRAFT + 1], out0[INFER_MAX_DRAFT + 1], d[INFER_MAX_DRAFT], d0[INFER_MAX_DRAFT], k = 0, k0 = 0;
        ok = infer_spec_step(c, s, 0, last, out, INFER_MAX_DRAFT + 1, &k) == INFER_OK &&
             infer_spec_step(c0, s0, 0, last, out0, INFER_MAX_DRAFT + 1, &k0) == INFER_OK && k == k0 &&
             memcmp(out, out0, (size_t)k * sizeof *out) == 0;
        const int32_t n = spec_last_drafts(c, d);
        ok = ok && n == spec_last_drafts(c0, d0);
        for (int32_t j = 0; ok && j < n; j++) same += d[j] == d0[j], total++;
        const infer_ctx *h = forward_head_stage(c);
        for (int32_t j = 0; ok && j < n; j++) {
            const float *want = spec_draft_logits(c0, j);
            ok = want && h->be->ops->download(h->be, row, h->mtp_logits + (size_t)j * (size_t)nv,
                                              (size_t)nv * sizeof(float)) == INFER_OK;
            for (int32_t v = 0; ok && v < nv; v++) {
                const double e = fabs((double)row[v] - want[v]);
                if (e > max_err) max_err = e;
            }
        }
        if (ok) last = out[k - 1];
    }
    T_CHECK(ok && total > 0 && same == total && max_err <= DRAFT_TOL, "%s: the device's drafts equal the CPU's for %d "
            "of %d, their logits within %g: %.3g (%s)", arch, same, total, DRAFT_TOL, max_err,
            ok ? "in lockstep" : "the two streams parted");
    printf("  %-40s drafts on the device = the CPU's for %d of %d, drafts' logits max |diff| %.3g\n", arch,
           same, total, max_err);
    free(row);
    infer_sampler_free(s), infer_sampler_free(s0), infer_ctx_free(c), infer_ctx_free(c0);
    infer_model_free(m), infer_model_free(m0);
}

/* full: n_draft 1..4 (else 3 only); more: the rollback (noisy head) and temp > 0 (agreeing head) too. */
static void check_model(const char *arch, const char *ftype, int agree, float noise, struct placement pl, int full,
                        int more) {
    char name[128];
    char where[32] = "";
    if (pl.sm_layer) snprintf(where, sizeof where, pl.fit_draft ? " -sm layer, table copy" : " -sm layer");
    if (pl.n_cpu_moe) snprintf(where, sizeof where, pl.n_cpu_moe >= 99 ? " --cpu-moe" : " --n-cpu-moe %d", pl.n_cpu_moe);
    snprintf(name, sizeof name, "%s %s %s%s", arch, ftype, noise > 0 ? "noise" : agree ? "agree" : "random", where);
    infer_model *m = make_model(arch, ftype, agree, noise, pl);
    if (!m) return;
    const int32_t nv = infer_vocab_size(m);
    int32_t prompt[N_PROMPT], want[2 * N_GEN], got[N_GEN];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((i * 29 + 3) % (nv - 8));
    infer_ctx *plain = make_ctx(m, 0);
    const int rollback = more && noise > 0; /* it reads the stream further */
    const int ok_plain = plain_stream(plain, m, prompt, want, rollback ? 2 * N_GEN : N_GEN);
    infer_ctx_free(plain);
    if (!ok_plain) {
        T_CHECK(0, "%s: plain stream: %s", name, infer_last_error());
        infer_model_free(m);
        return;
    }
    for (int32_t n = 1; n <= INFER_MAX_DRAFT; n++) {
        if (!full && n != 3) continue;
        infer_ctx *c = make_ctx(m, n);
        infer_sampler *s = make_sampler(m, 0, 7);
        infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
        int32_t first = -1, next = -1;
        const int ok = c && s && infer_decode(c, &b) == INFER_OK && infer_sample(c, s, -1, &first) == INFER_OK &&
                       spec_continue(c, s, first, got, N_GEN, &next);
        const infer_spec_stats st = c ? infer_spec_get_stats(c) : (infer_spec_stats){0, 0, 0};
        T_CHECK(ok && first_diff(got, want, N_GEN) < 0, "%s n_draft %d: the MTP stream differs from plain decoding at "
                "token %d (%s)", name, n, first_diff(got, want, N_GEN), ok ? "" : infer_last_error());
        if (agree && noise == 0)
            T_CHECK(st.n_drafted > 0 && st.n_accepted == st.n_drafted, "%s n_draft %d: every draft accepted (%lld of "
                    "%lld)", name, n, (long long)st.n_accepted, (long long)st.n_drafted);
        else
            T_CHECK(st.n_accepted < st.n_drafted && (noise == 0 || st.n_accepted > 0), "%s n_draft %d: %lld of %lld "
                    "drafts accepted: expected %s", name, n, (long long)st.n_accepted, (long long)st.n_drafted,
                    noise > 0 ? "some, not all" : "not all");
        const infer_ctx *h = c ? forward_head_stage(c) : NULL;
        if (h && pl.fit_draft) { /* the head's device reads the rows from its copy of the table: no host step */
            const struct gguf_tensor *copy = c->m->mtp_embd;
            T_CHECK(h->on_device && !h->mtp_rows && copy && copy != c->m->token_embd &&
                        copy->data != c->m->token_embd->data && forward_mtp_graph_key(h, 0, 1, NULL, 0) != 0,
                    "%s: the head's device has its own copy of the token table, the MTP block reads it there and its "
                    "runs are captured as graphs", name);
        } else if (h && (pl.n_cpu_moe || pl.sm_layer)) { /* the placements this test means: rows from the host */
            const int32_t il = (int32_t)c->m->hp.n_layer;
            T_CHECK(h->on_device && h->mtp_rows && (pl.n_cpu_moe < 99) == !(h->off_layer && h->off_layer[il]),
                    "%s: the head's stage is on a device, reads the MTP block's token rows from the host and runs the "
                    "block's experts %s", name, pl.n_cpu_moe < 99 ? "on the device" : "on the host");
        }
        if (ok && n == 3) {
            if (!pl.n_cpu_moe && !pl.sm_layer) check_step_bus(c, s, next, name);
            if (pl.sm_layer) check_split_bus(c, s, next, name, pl.fit_draft > 0);
            printf("  %-40s n_draft %d: stream = plain for %d tokens, %lld of %lld drafts accepted\n", name, n,
                   N_GEN, (long long)st.n_accepted, (long long)st.n_drafted);
        }
        infer_sampler_free(s), infer_ctx_free(c);
    }
    if (rollback) check_rollback(m, name, prompt, want, 2 * N_GEN);
    if (more && agree && noise == 0) check_temp(m, name, prompt);
    if ((more || pl.sm_layer) && agree && noise == 0 && strcmp(ftype, "F32") == 0)
        check_penalty(m, name, prompt, want, !pl.sm_layer && !pl.n_cpu_moe);
    if (more && agree && noise == 0) check_graphs(m, name, prompt);
    infer_model_free(m);
}

int main(void) {
#ifdef INFER_EMU
    setenv("INFER_EMU_DEVICES", "2", 0); /* before the emulator's first call: -sm layer needs two */
#endif
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return t_done();
    }
    const char *why = NULL;
    if (device_count(&why) == 0) {
        rmdir(dir);
        T_SKIP("no CUDA device: %s; MTP drafting on a device", why ? why : "none");
        const int rc = t_done();
        return rc ? rc : 77;
    }
    static const char *const archs[] = {"qwen35", "qwen35moe", "qwen3next"};
    static const char *const types[] = {"F32", "Q4_K_M"};
    const struct placement one = {.n_cpu_moe = 0};
    for (int a = 0; a < 3; a++)
        for (int f = 0; f < 2; f++) {
            /* n_draft 1..4 in both types, the rollback and temp > 0 in F32. t_quick (the sanitizers' run): qwen35
             * F32 only, n_draft 1..4 with the agreeing head and 3 with the others */
            if (t_quick() && (a || f)) continue;
            check_model(archs[a], types[f], 0, 0, one, !t_quick(), f == 0);
            check_model(archs[a], types[f], 1, 0, one, 1, f == 0);
            check_model(archs[a], types[f], 1, 0.3f, one, !t_quick(), f == 0);
        }
    for (int a = 0; a < 3; a++)
        if (!t_quick() || a == 0) check_drafts(archs[a]);
    /* placements whose head's device lacks the token table: the MTP block's rows come from the host; and -sm layer
     * with the table's copy on the head's device */
    const struct placement away[4] = {{.n_cpu_moe = 1}, {.n_cpu_moe = 99}, {.sm_layer = 1},
                                      {.sm_layer = 1, .fit_draft = 3}};
    for (int k = 0; k < 4; k++) {
        if (away[k].sm_layer && infer_device_count() < 2) {
            T_SKIP("one device: -sm layer with MTP (INFER_EMU_DEVICES=2 runs it)");
            continue;
        }
        const char *arch = away[k].sm_layer ? "qwen35" : "qwen35moe", *type = k == 0 ? "Q4_K_M" : "F32";
        if (!t_quick() || k >= 2) check_model(arch, type, 1, 0, away[k], 0, 0); /* the drafts right: all accepted */
        if (!t_quick() || k == 1 || k == 3) check_model(arch, type, 1, 0.3f, away[k], 0, 0); /* and rolled back */
    }
    rmdir(dir);
    return t_done();
}
