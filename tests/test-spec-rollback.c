/* test-spec-rollback: MTP rollback at every acceptance depth, bit for bit (lib/spec.c, lib/cache.c).
 *
 * The models are random-weight hybrids (qwen35, qwen35moe, qwen3next in F32 and Q4_K_M): every output
 * projection is non-zero, so the attention KV cells, the conv window and the recurrent state all move
 * the logits, and a state restored one position off changes them. Their random MTP heads are almost
 * never accepted, so the test hook spec_force_accept makes infer_spec_step keep exactly `a` drafts
 * (a = 0..n_draft) whatever the sampler says; the depths follow a schedule in which every ordered pair
 * (depth, next depth) occurs, for n_draft 1..4. After each step:
 *   - every kept row of the verification batch (the logits after last, d_0 .. d_{a-1}) equals, bit for
 *     bit, the logits of a plain context (n_draft 0) fed the same tokens one at a time; the next step's
 *     rows then read the rolled-back caches;
 *   - the MTP head's first draft logits of the next step equal, bit for bit, the MTP block evaluated
 *     (spec_mtp_eval) on a drafting context that only ever ran infer_decode over the same tokens: the
 *     MTP block's cells and the hidden state were rolled back too.
 * Why one token at a time is the right reference: every CPU op computes a token's row from that token's
 * inputs alone (a matmul row per token, and the multi-token dots are the single-token dot bit for bit;
 * norms, RoPE, attention per token and head; the conv and the delta rule token by token below 64 tokens),
 * so a token's logits do not depend on the batch that carried it. The plain context checks exactly that.
 * Every few steps the drafting context also decodes 1..n_draft extra tokens and truncates them again (a
 * rollback through the ring after plain decodes); at the end all three contexts go back to the checkpoint
 * taken after the prompt and the whole schedule runs again.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "spec.h"
#include "t.h"

enum { N_PROMPT = 16, N_CTX = 256, EXTRA_EVERY = 5 };

static char dir[] = "/tmp/test-spec-rollback-XXXXXX";

/* The three contexts of one run and what the test tracks between steps. */
struct rig {
    const char *name;
    int32_t n_draft, n_vocab, n_embd;
    infer_ctx *spec;    /* drafting context under test: infer_spec_step with forced depths */
    infer_ctx *plain;   /* n_draft 0, fed the kept tokens one at a time */
    infer_ctx *follow;  /* drafting context fed the kept tokens one at a time by infer_decode only */
    infer_sampler *smp; /* greedy */
    float *h_last;      /* follow's hidden state of its last position (the MTP input of the next draft) */
    float *draft_ref;   /* (n_vocab) the MTP logits follow's cells give for the next first draft */
    int32_t len;        /* positions every context holds */
    long n_rows, n_drafts, n_bad_rows, n_bad_drafts, n_bad_follow, n_bad_tokens;
};

/* The random-weight model with an MTP layer; its n_embd into *n_embd. */
static infer_model *make_model(const char *arch, const char *ftype, int32_t *n_embd) {
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 11, sp.mtp = 1;
    *n_embd = sp.n_embd;
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, arch, ftype);
    infer_model *m = NULL;
    if (synth_write(&sp, path) != INFER_OK || infer_model_load(path, NULL, &m) != INFER_OK)
        T_CHECK(0, "%s %s: synth and load: %s", arch, ftype, infer_last_error());
    unlink(path);
    return m;
}

/* One thread: results do not depend on it (threads split output rows), and on a loaded 2-core machine the
 * pool's waits made this test six times slower. */
static infer_ctx *make_ctx(const infer_model *m, int32_t n_draft) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_CTX, p.n_batch = 32, p.n_threads = 1, p.n_draft = n_draft;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) T_CHECK(0, "infer_ctx_create n_draft %d: %s", n_draft, infer_last_error());
    return c;
}

static int same_bits(const float *a, const float *b, int32_t n) { return a && b && !memcmp(a, b, (size_t)n * sizeof(float)); }

/* Largest |a - b| over n floats, for the failure message. */
static double max_diff(const float *a, const float *b, int32_t n) {
    double d = 0;
    for (int32_t i = 0; a && b && i < n; i++)
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
    return d;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Decodes one token on plain and follow; follow's new hidden state goes to h_last. */
static int feed_one(struct rig *r, int32_t tok) {
    infer_batch b = {1, &tok, NULL, NULL, NULL};
    if (infer_decode(r->plain, &b) != INFER_OK || infer_decode(r->follow, &b) != INFER_OK) return 0;
    memcpy(r->h_last, spec_hidden(r->follow), (size_t)r->n_embd * sizeof(float));
    r->len++;
    return 1;
}

/* One speculative step keeping `depth` drafts after `last`; returns the next last token, -1 on failure. */
static int32_t forced_step(struct rig *r, int32_t last, int32_t depth) {
    int32_t out[INFER_MAX_DRAFT + 1], n = 0;
    /* the reference first draft: follow's MTP cells and hidden state, position len */
    if (spec_mtp_eval(r->follow, 0, r->len, &last, r->h_last, 1, r->draft_ref) != INFER_OK) {
        T_CHECK(0, "%s: spec_mtp_eval at %d: %s", r->name, r->len, infer_last_error());
        return -1;
    }
    spec_force_accept(r->spec, depth);
    if (infer_spec_step(r->spec, r->smp, 0, last, out, INFER_MAX_DRAFT + 1, &n) != INFER_OK) {
        T_CHECK(0, "%s: infer_spec_step at %d: %s", r->name, r->len, infer_last_error());
        return -1;
    }
    const int32_t len0 = r->len, want_n = depth + 1, held = infer_seq_pos_max(r->spec, 0) + 1;
    if (n != want_n || held != len0 + want_n) { /* the run cannot go on in step with the references */
        T_CHECK(0, "%s: forced depth %d at %d: %d tokens out (expected %d), %d positions held (expected %d)", r->name,
                depth, len0, n, want_n, held, len0 + want_n);
        return -1;
    }
    const float *draft = spec_draft_logits(r->spec, 0);
    r->n_drafts++;
    if (!same_bits(draft, r->draft_ref, r->n_vocab) && r->n_bad_drafts++ < 3)
        printf("  %s: depth %d: the first draft at position %d differs from the MTP block on follow's cells (max "
               "|diff| %.3g)\n", r->name, depth, len0, max_diff(draft, r->draft_ref, r->n_vocab));
    /* the kept tokens: last, then the accepted drafts out[0..n-2]; row j is the logits after token j */
    for (int32_t j = 0; j < n; j++) {
        const int32_t tok = j == 0 ? last : out[j - 1];
        if (!feed_one(r, tok)) {
            T_CHECK(0, "%s: plain decode at %d: %s", r->name, r->len, infer_last_error());
            return -1;
        }
        const float *got = spec_verify_logits(r->spec, j), *want = infer_logits(r->plain, -1);
        r->n_rows++;
        if (!same_bits(got, want, r->n_vocab) && r->n_bad_rows++ < 3)
            printf("  %s: depth %d, row %d (position %d) differs from the plain context (max |diff| %.3g)\n", r->name,
                   depth, j, len0 + j, max_diff(got, want, r->n_vocab));
        if (!same_bits(infer_logits(r->follow, -1), want, r->n_vocab)) r->n_bad_follow++;
    }
    /* greedy: the emitted token is the argmax of the last kept row */
    if (out[n - 1] != argmax(infer_logits(r->plain, -1), r->n_vocab)) r->n_bad_tokens++;
    return out[n - 1];
}

/* 1..n_draft extra tokens on the drafting context, then truncated away again. */
static int extra_and_back(struct rig *r, int32_t step) {
    int32_t extra[INFER_MAX_DRAFT];
    const int32_t g = 1 + step % r->n_draft;
    for (int32_t i = 0; i < g; i++) extra[i] = (step * 37 + i * 11) % (r->n_vocab - 8);
    infer_batch b = {g, extra, NULL, NULL, NULL};
    int ok = infer_decode(r->spec, &b) == INFER_OK && infer_seq_rm(r->spec, 0, r->len, -1) == INFER_OK;
    T_CHECK(ok && infer_seq_pos_max(r->spec, 0) == r->len - 1, "%s: %d extra tokens at %d, truncated back: %s", r->name,
            g, r->len, infer_last_error());
    return ok;
}

/* The schedule: depth pairs (j / (D + 1), j % (D + 1)) for j = 0 .. (D + 1)^2 - 1, so every ordered pair of
 * consecutive depths occurs. Returns 1 when every step ran. */
static int run_schedule(struct rig *r, int32_t last) {
    const int32_t d1 = r->n_draft + 1, n_steps = 2 * d1 * d1;
    for (int32_t i = 0; i < n_steps; i++) {
        const int32_t depth = i % 2 ? (i / 2) % d1 : (i / 2) / d1;
        if ((last = forced_step(r, last, depth)) < 0) return 0;
        if (i % EXTRA_EVERY == EXTRA_EVERY - 1 && !extra_and_back(r, i)) return 0;
    }
    return 1;
}

/* The prompt on all three contexts, checkpoints, the schedule, back to the checkpoint, the schedule again. */
static void check_run(const infer_model *m, const char *model_name, int32_t n_embd, int32_t n_draft, long *n_rows) {
    char name[128];
    snprintf(name, sizeof name, "%s n_draft %d", model_name, n_draft);
    struct rig r = {.name = name, .n_draft = n_draft, .n_vocab = infer_vocab_size(m), .n_embd = n_embd};
    r.spec = make_ctx(m, n_draft), r.plain = make_ctx(m, 0), r.follow = make_ctx(m, n_draft);
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = 0;
    infer_sampler_create(&sp, r.n_vocab, &r.smp);
    r.h_last = malloc((size_t)n_embd * sizeof(float));
    r.draft_ref = malloc((size_t)r.n_vocab * sizeof(float));
    float *h_prompt = malloc((size_t)n_embd * sizeof(float));
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((i * 29 + 3) % (r.n_vocab - 8));
    infer_batch b = {N_PROMPT, prompt, NULL, NULL, NULL};
    int ok = r.spec && r.plain && r.follow && r.smp && r.h_last && r.draft_ref && h_prompt &&
             infer_decode(r.spec, &b) == INFER_OK && infer_decode(r.plain, &b) == INFER_OK &&
             infer_decode(r.follow, &b) == INFER_OK && infer_seq_checkpoint(r.spec, 0) == INFER_OK &&
             infer_seq_checkpoint(r.plain, 0) == INFER_OK && infer_seq_checkpoint(r.follow, 0) == INFER_OK;
    T_CHECK(ok, "%s: contexts, prompt and checkpoints: %s", name, infer_last_error());
    if (!ok) goto done;
    memcpy(h_prompt, spec_hidden(r.follow) + (size_t)(N_PROMPT - 1) * n_embd, (size_t)n_embd * sizeof(float));
    const int32_t first = argmax(infer_logits(r.plain, -1), r.n_vocab);
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* everything back to the checkpoint after the prompt */
            ok = infer_seq_rm(r.spec, 0, N_PROMPT, -1) == INFER_OK && infer_seq_rm(r.plain, 0, N_PROMPT, -1) == INFER_OK &&
                 infer_seq_rm(r.follow, 0, N_PROMPT, -1) == INFER_OK;
            T_CHECK(ok, "%s: back to the checkpoint: %s", name, infer_last_error());
            if (!ok) break;
        }
        r.len = N_PROMPT;
        memcpy(r.h_last, h_prompt, (size_t)n_embd * sizeof(float));
        infer_sampler_reset(r.smp);
        if (!run_schedule(&r, first)) break;
    }
    T_CHECK(r.n_rows > 0 && r.n_bad_rows == 0, "%s: %ld of %ld kept verification rows differ from the plain context", name,
            r.n_bad_rows, r.n_rows);
    T_CHECK(r.n_drafts > 0 && r.n_bad_drafts == 0, "%s: %ld of %ld first drafts differ from the MTP block on "
            "non-speculative cells", name, r.n_bad_drafts, r.n_drafts);
    T_CHECK(r.n_bad_tokens == 0, "%s: %ld steps emitted a token other than the argmax of their last kept row", name,
            r.n_bad_tokens);
    *n_rows += r.n_rows;
    T_CHECK(r.n_bad_follow == 0, "%s: %ld rows of the drafting context fed by infer_decode differ from the plain one",
            name, r.n_bad_follow);
done:
    free(h_prompt), free(r.h_last), free(r.draft_ref);
    infer_sampler_free(r.smp);
    infer_ctx_free(r.spec), infer_ctx_free(r.plain), infer_ctx_free(r.follow);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    static const char *const archs[] = {"qwen35", "qwen35moe", "qwen3next"};
    static const char *const types[] = {"F32", "Q4_K_M"};
    for (int a = 0; a < 3; a++)
        for (int f = 0; f < 2; f++) {
            int32_t n_embd = 0;
            infer_model *m = make_model(archs[a], types[f], &n_embd);
            if (!m) continue;
            char name[64];
            snprintf(name, sizeof name, "%s %s", archs[a], types[f]);
            long n_rows = 0;
            for (int32_t n_draft = 1; n_draft <= INFER_MAX_DRAFT; n_draft++) check_run(m, name, n_embd, n_draft, &n_rows);
            printf("  %-18s n_draft 1..4, every depth pair twice: %ld verification rows compared\n", name, n_rows);
            infer_model_free(m);
        }
    rmdir(dir);
    return t_done();
}
