/* test-spec: MTP speculative decoding (lib/spec.c, infer_spec_step).
 *   - rejection sampling: over drafts d ~ q, spec_accept's output is distributed as p (200,000 trials,
 *     every token within 5 standard deviations; p and q differ enough that returning the draft, or
 *     drawing from p - q without the acceptance test, fails);
 *   - greedy decoding with n_draft 1..4 gives exactly the tokens of plain decoding, 160 of them, for
 *     qwen35, qwen35moe and qwen3next in F32, Q8_0 and Q4_K_M with random MTP weights, and on the
 *     synthetic "agreeing" model (llm-gguf synth --mtp-agree) where every draft must be accepted, and
 *     on a noisy one where acceptance lies strictly between;
 *   - truncated and resumed: back into the snapshot ring and back to a checkpoint, the speculative
 *     continuation still equals the plain stream;
 *   - temperature > 0 runs, is reproducible with the seed, and accepts some drafts on the agreeing model;
 *   - misuse is refused: no MTP layer, n_draft out of range, a context without drafting. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "sampler.h"
#include "spec.h"
#include "stream.h"
#include "t.h"

/* N_GEN covers check_truncate's deepest read (about HALF + 2 * N_DRAFT + 2 + 40 tokens into the stream) */
enum { N_PROMPT = 16, N_GEN = 160, V_TEST = 6, N_TRIALS = 200000 };

static char dir[] = "/tmp/test-spec-XXXXXX";

static void check_accept_distribution(void) {
    const float p[V_TEST] = {0.05f, 0.40f, 0.00f, 0.25f, 0.10f, 0.20f};
    const float q[V_TEST] = {0.30f, 0.10f, 0.20f, 0.25f, 0.15f, 0.00f};
    infer_sampler_params sp = infer_sampler_params_default();
    sp.seed = 99;
    infer_sampler *s = NULL;
    if (infer_sampler_create(&sp, V_TEST, &s) != INFER_OK) {
        T_CHECK(0, "sampler");
        return;
    }
    float resid[V_TEST];
    long count[V_TEST] = {0}, acc = 0, bad = 0;
    for (int i = 0; i < N_TRIALS; i++) {
        int32_t d = sampler_draw(s, q, 1.0);
        int accepted = -1;
        int32_t t = spec_accept(s, p, q, d, resid, &accepted);
        if (t < 0 || t >= V_TEST || !(accepted == 0 || (accepted == 1 && t == d))) {
            bad++;
            continue;
        }
        count[t]++, acc += accepted;
    }
    T_CHECK(bad == 0, "%ld trials returned a token out of range or an accepted token other than the draft", bad);
    for (int v = 0; v < V_TEST; v++) {
        double f = (double)count[v] / N_TRIALS, sd = sqrt(p[v] * (1 - p[v]) / N_TRIALS);
        T_CHECK(p[v] == 0 ? count[v] == 0 : fabs(f - p[v]) <= 5 * sd + 1e-12,
                "token %d: frequency %.5f, target probability %.2f (5 sd = %.5f)", v, f, p[v], 5 * sd);
    }
    /* acceptance rate = sum_v min(p, q) = 0.05 + 0.10 + 0 + 0.25 + 0.10 + 0 = 0.50 */
    T_NEAR((double)acc / N_TRIALS, 0.50, 5 * sqrt(0.25 / N_TRIALS));
    infer_sampler_free(s);
}

static infer_model *make_model(const char *arch, const char *ftype, int agree, float noise, const char *tag) {
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 5, sp.mtp = 1, sp.mtp_agree = agree, sp.mtp_noise = noise;
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%s-%s.gguf", dir, arch, ftype, tag);
    infer_model *m = NULL;
    if (synth_write(&sp, path) != INFER_OK || infer_model_load(path, NULL, &m) != INFER_OK)
        T_CHECK(0, "%s %s %s: synth and load: %s", arch, ftype, tag, infer_last_error());
    unlink(path);
    return m;
}

static infer_ctx *make_ctx(const infer_model *m, int32_t n_draft) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_PROMPT + N_GEN + 8, p.n_batch = 32, p.n_threads = 2, p.n_draft = n_draft;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) T_CHECK(0, "infer_ctx_create n_draft %d: %s", n_draft, infer_last_error());
    return c;
}

static infer_sampler *make_sampler(const infer_model *m, float temp) {
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = temp, sp.seed = 7;
    infer_sampler *s = NULL;
    infer_sampler_create(&sp, infer_vocab_size(m), &s);
    return s;
}

/* Greedy tokens after the prompt: out[0] is sampled from the prompt's logits, out[i] from those after
 * decoding out[i-1] (its position N_PROMPT + i). Plain one-token decoding. */
static int plain_stream(const infer_model *m, const int32_t *prompt, int32_t *out) {
    infer_ctx *c = make_ctx(m, 0);
    infer_sampler *s = make_sampler(m, 0);
    const int ok = c && s && stream_run(c, s, STREAM_PLAIN_HOST, prompt, N_PROMPT, out, N_GEN, NULL) == N_GEN;
    infer_sampler_free(s), infer_ctx_free(c);
    return ok;
}

/* Continues seq 0 of c, whose next token `last` is known and not decoded, with spec steps until out
 * holds n tokens (out[0] = last). */
static int spec_continue(infer_ctx *c, infer_sampler *s, int32_t last, int32_t *out, int n) {
    const int ok = stream_continue(c, s, STREAM_SPEC, last, out, n, NULL, NULL) == n;
    if (!ok) T_CHECK(0, "infer_spec_step: %s", infer_last_error());
    return ok;
}

/* Prompt, then spec steps with n_draft; out as plain_stream. The acceptance counters go to *stats. */
static int spec_stream(const infer_model *m, int32_t n_draft, const int32_t *prompt, int32_t *out,
                       infer_spec_stats *stats) {
    infer_ctx *c = make_ctx(m, n_draft);
    infer_sampler *s = make_sampler(m, 0);
    infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
    int ok = c && s && infer_decode(c, &b) == INFER_OK;
    ok = ok && spec_continue(c, s, infer_sampler_sample(s, infer_logits(c, -1)), out, N_GEN);
    *stats = infer_spec_get_stats(c);
    infer_sampler_free(s), infer_ctx_free(c);
    return ok;
}

static int first_diff(const int32_t *a, const int32_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return i;
    return -1;
}

/* The speculative continuation after truncating to the checkpoint (the prompt) and into the ring. */
static void check_truncate(const infer_model *m, const char *name, const int32_t *prompt, const int32_t *want) {
    enum { N_DRAFT = 3, HALF = 100 };
    infer_ctx *c = make_ctx(m, N_DRAFT);
    infer_sampler *s = make_sampler(m, 0);
    int32_t got[N_GEN];
    infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
    if (!c || !s || infer_decode(c, &b) != INFER_OK || infer_seq_checkpoint(c, 0) != INFER_OK) {
        T_CHECK(0, "%s: prompt and checkpoint", name);
        goto done;
    }
    /* generate, go back to the checkpoint, generate again: the same tokens as the plain stream */
    for (int round = 0; round < 2; round++) {
        infer_sampler_reset(s);
        int ok = spec_continue(c, s, want[0], got, HALF);
        T_CHECK(ok && first_diff(got, want, HALF) < 0, "%s: round %d after the checkpoint differs at %d", name,
                round, first_diff(got, want, HALF));
        T_CHECK(infer_seq_rm(c, 0, N_PROMPT, -1) == INFER_OK && infer_seq_pos_max(c, 0) == N_PROMPT - 1,
                "%s: back to the checkpoint: %s", name, infer_last_error());
    }
    /* into the ring: after plain one-token decodes, up to n_draft positions can be taken back (right
     * after a spec step only its own accepted state is kept) */
    for (int back = 1; back <= N_DRAFT; back++) {
        int ok = infer_seq_rm(c, 0, N_PROMPT, -1) == INFER_OK && spec_continue(c, s, want[0], got, HALF);
        int32_t len = infer_seq_pos_max(c, 0) + 1;
        for (int i = 0; ok && i < N_DRAFT + 1; i++, len++) { /* the stream's next tokens, one by one */
            infer_batch d = {1, &want[len - N_PROMPT], NULL, NULL, NULL};
            ok = infer_decode(c, &d) == INFER_OK;
        }
        const int32_t keep = len - back; /* want[keep - N_PROMPT] comes next */
        ok = ok && infer_seq_rm(c, 0, keep, -1) == INFER_OK;
        T_CHECK(ok, "%s: %d positions back: %s", name, back, infer_last_error());
        ok = ok && spec_continue(c, s, want[keep - N_PROMPT], got, 40);
        T_CHECK(ok && first_diff(got, want + (keep - N_PROMPT), 40) < 0, "%s: resumed %d positions back differs at %d",
                name, back, first_diff(got, want + (keep - N_PROMPT), 40));
    }
    /* past the ring and not the checkpoint: refused, nothing changed */
    const int32_t len = infer_seq_pos_max(c, 0) + 1;
    T_CHECK(infer_seq_rm(c, 0, len - N_DRAFT - 2, -1) == INFER_E_UNSUPPORTED && infer_seq_pos_max(c, 0) == len - 1,
            "%s: truncation past the ring is INFER_E_UNSUPPORTED and changes nothing", name);
done:
    infer_sampler_free(s), infer_ctx_free(c);
}

static void check_model(const char *arch, const char *ftype, int agree, float noise) {
    const char *tag = noise > 0 ? "noise" : agree ? "agree" : "random";
    char name[96];
    snprintf(name, sizeof name, "%s %s %s", arch, ftype, tag);
    infer_model *m = make_model(arch, ftype, agree, noise, tag);
    if (!m) return;
    const int nv = infer_vocab_size(m);
    int32_t prompt[N_PROMPT], want[N_GEN], got[N_GEN];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((i * 29 + 3) % (nv - 8));
    if (!plain_stream(m, prompt, want)) {
        T_CHECK(0, "%s: plain stream", name);
        infer_model_free(m);
        return;
    }
    for (int32_t n = 1; n <= INFER_MAX_DRAFT; n++) {
        if (t_quick() && n != 1 && n != 3) continue; /* the shortest draft and the one printed below */
        infer_spec_stats st;
        int ok = spec_stream(m, n, prompt, got, &st);
        T_CHECK(ok && first_diff(got, want, N_GEN) < 0, "%s n_draft %d: first difference at token %d", name, n,
                first_diff(got, want, N_GEN));
        const double rate = st.n_drafted ? (double)st.n_accepted / (double)st.n_drafted : 0;
        if (agree && noise == 0)
            T_CHECK(st.n_drafted > 0 && st.n_accepted == st.n_drafted, "%s n_draft %d: every draft accepted (%lld of %lld)",
                    name, n, (long long)st.n_accepted, (long long)st.n_drafted);
        if (noise > 0) T_CHECK(rate > 0.05 && rate < 0.999, "%s n_draft %d: acceptance %.3f strictly inside", name, n, rate);
        if (n == 3) printf("  %-28s n_draft %d: %lld steps, acceptance %.3f\n", name, n, (long long)st.n_steps, rate);
    }
    check_truncate(m, name, prompt, want);
    infer_model_free(m);
}

/* temp > 0: reproducible with the seed; on the agreeing model most drafts are accepted. */
static void check_sampling(void) {
    infer_model *m = make_model("qwen35", "F32", 1, 0, "agree-temp");
    if (!m) return;
    int32_t prompt[N_PROMPT], a[64], b[64];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = i + 40;
    for (int rep = 0; rep < 2; rep++) {
        infer_ctx *c = make_ctx(m, 3);
        infer_sampler *s = make_sampler(m, 0.8f);
        infer_batch bp = {N_PROMPT, prompt, NULL, NULL, NULL};
        int ok = c && s && infer_decode(c, &bp) == INFER_OK &&
                 spec_continue(c, s, infer_sampler_sample(s, infer_logits(c, -1)), rep ? b : a, 64);
        infer_spec_stats st = infer_spec_get_stats(c);
        T_CHECK(ok && st.n_accepted > st.n_drafted / 2, "temp 0.8 on the agreeing model: %lld of %lld accepted",
                (long long)st.n_accepted, (long long)st.n_drafted);
        infer_sampler_free(s), infer_ctx_free(c);
    }
    T_CHECK(!memcmp(a, b, sizeof a), "temp 0.8: the same seed gives the same tokens");
    infer_model_free(m);
}

static void check_misuse(void) {
    struct synth_params sp;
    synth_params_default("qwen35", &sp);
    sp.ftype = "F32", sp.mtp = 0;
    char path[256];
    snprintf(path, sizeof path, "%s/nomtp.gguf", dir);
    infer_model *m = NULL;
    if (synth_write(&sp, path) != INFER_OK || infer_model_load(path, NULL, &m) != INFER_OK) {
        T_CHECK(0, "synth without MTP");
        return;
    }
    unlink(path);
    infer_ctx_params p = infer_ctx_params_default();
    infer_ctx *c = NULL;
    p.n_draft = 2;
    T_CHECK(infer_ctx_create(m, &p, &c) == INFER_E_ARG && !c && strstr(infer_last_error(), "MTP"),
            "n_draft on a model without MTP: %s", infer_last_error());
    infer_model_free(m);
    m = make_model("qwen35", "F32", 0, 0, "misuse");
    if (!m) return;
    p.n_draft = INFER_MAX_DRAFT + 1;
    T_CHECK(infer_ctx_create(m, &p, &c) == INFER_E_ARG && !c, "n_draft %d is INFER_E_ARG", p.n_draft);
    p.n_draft = 0, p.n_ctx = 64;
    T_CHECK(infer_ctx_create(m, &p, &c) == INFER_OK, "plain context");
    infer_sampler *s = make_sampler(m, 0);
    int32_t out[8], n = -1, tok = 5;
    T_CHECK(infer_spec_step(c, s, 0, tok, out, 8, &n) == INFER_E_ARG && n == 0, "spec step without drafting");
    infer_ctx_free(c);
    p.n_draft = 2;
    T_CHECK(infer_ctx_create(m, &p, &c) == INFER_OK, "drafting context");
    T_CHECK(infer_spec_step(c, s, 0, tok, out, 8, &n) == INFER_E_ARG, "spec step on an empty sequence");
    infer_batch b = {1, &tok, NULL, NULL, NULL};
    T_CHECK(infer_decode(c, &b) == INFER_OK && infer_spec_step(c, s, 0, tok, out, 2, &n) == INFER_E_ARG,
            "cap below n_draft + 1");
    T_CHECK(infer_spec_step(c, s, 1, tok, out, 8, &n) == INFER_E_ARG, "bad sequence");
    infer_sampler_free(s), infer_ctx_free(c), infer_model_free(m);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    check_accept_distribution();
    static const char *const archs[] = {"qwen35", "qwen35moe", "qwen3next"};
    static const char *const types[] = {"F32", "Q8_0", "Q4_K_M"};
    /* t_quick (the sanitizers' run): Q8_0 only on the agreeing models, which also reach every arch */
    for (int a = 0; a < 3; a++)
        for (int f = 0; f < 3; f++)
            if (!t_quick() || f != 1) check_model(archs[a], types[f], 0, 0);
    for (int a = 0; a < 3; a++) check_model(archs[a], "Q8_0", 1, 0);
    check_model("qwen35moe", "Q4_K_M", 1, 0.2f);
    check_sampling();
    check_misuse();
    rmdir(dir);
    return t_done();
}
