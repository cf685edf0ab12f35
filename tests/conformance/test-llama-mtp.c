/* test-llama-mtp: our MTP (nextn) block against llama.cpp's on synthetic qwen35, qwen35moe and qwen3next
 * models with their MTP layer, in F32, F16, Q8_0 and Q4_K_M.
 *
 * llama.cpp exposes its MTP head (src/llama-ext.h): a target context with embeddings_nextn on keeps
 * h_nextn, the post-output_norm hidden state of every token; a context of type MTP decodes batches that
 * carry both token[] and embd[] (row i: token x_i at pos_i with the h it pairs with) and returns the
 * head's logits, and with embeddings_nextn on, its own output y (the h of the next draft step). Its
 * driver (common/speculative.cpp, draft-mtp) pairs x_k with h_{k-1}, and the first row of a sequence
 * with zeros (pending_h starts as zeros) — our convention too (lib/spec.h).
 *
 * Per model, a 48-token prompt in one batch in both engines, then:
 *   (1) the target's h rows: ours (spec_hidden) against llama.cpp's h_nextn;
 *   (2) the MTP logits of every prompt row, both engines fed the SAME h rows (llama.cpp's h shifted by
 *       one, zeros for row 0), so the comparison isolates the MTP block;
 *   (3) 4 draft steps after the prompt: row j = (d_j at 48 + j, y_{j-1}) with d_0 a fixed token, y_{-1}
 *       the target's h of the last prompt token, d_j (j > 0) llama.cpp's argmax of row j - 1 and y its
 *       MTP output there. llama.cpp decodes each step as one row on its MTP context; ours runs
 *       spec_mtp_eval(pos0 48, rows 0..j) and takes the last row (the hook only writes from pos0 <= the
 *       MTP cells held, and the cells a draft writes past the sequence end are not held), so only step 0
 *       is a one-row pass on our side; the others are the same math in one batch.
 * Bounds as test-llama-logits: F32/F16 relative L2 <= 1e-3 at every row and the same argmax; Q8_0 and
 * Q4_K_M within 2x llama.cpp's own spread between its settings (flash attention on against off, weight
 * repacking off against on, the larger; llama.cpp's other runs take the same tokens and h rows) or
 * 1e-3, whichever is larger, in mean relative L2, and argmax agreement no more than 3 points below
 * llama.cpp's self-agreement. The measured numbers are printed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/synth.h"
#include "../t.h"
#include "llama_peer.h"
#include "logits_cmp.h"
#include "spec.h"

enum { N_PROMPT = 48, N_DRAFT = 4, N_ROWS = N_PROMPT + N_DRAFT };

static char dir[] = "/tmp/test-llama-mtp-XXXXXX";

/* What the engines share: tok (N_ROWS) and hin (N_ROWS, n_embd), the token and h of every MTP row. */
struct rows {
    int32_t tok[N_ROWS];
    float *hin;
};

static void *llama_ctx(const struct llama_peer *pe, void *model, int flash, int32_t ctx_type, void *other) {
    struct llama_peer_context_params cp = pe->context_default_params(); /* layout checked by llama_peer_load */
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 64;
    cp.n_threads = cp.n_threads_batch = 1; /* the test machine is small and shared, and its pool spins */
    cp.flash_attn_type = flash;
    cp.ctx_type = ctx_type, cp.ctx_other = other;
    void *c = pe->init_from_model(model, cp);
    if (c) pe->set_embeddings_nextn(c, true, ctx_type == LLAMA_PEER_CTX_MTP); /* MTP: outputs only */
    return c;
}

/* llama.cpp: the target's h of the prompt into h (N_PROMPT, n_embd), the MTP logits of every row into
 * logits (N_ROWS, n_vocab). fill: this is the reference run, which sets r's rows from its own h and
 * drafts; otherwise r is taken as it is. flash: flash attention on (1) or off (0). 0 on failure. */
static int llama_run(const struct llama_peer *pe, void *model, const int32_t *prompt, int n_embd, int n_vocab,
                     int flash, int fill, struct rows *r, float *h, float *logits) {
    const size_t row = (size_t)n_embd * sizeof(float);
    void *tgt = llama_ctx(pe, model, flash, LLAMA_PEER_CTX_DEFAULT, NULL);
    void *mtp = tgt ? llama_ctx(pe, model, flash, LLAMA_PEER_CTX_MTP, tgt) : NULL;
    int ok = mtp != NULL;
    int32_t ptok[N_PROMPT];
    memcpy(ptok, prompt, sizeof ptok);
    if (ok) ok = pe->decode(tgt, pe->batch_get_one(ptok, N_PROMPT)) == 0;
    for (int i = 0; ok && i < N_PROMPT; i++) {
        const float *hi = pe->get_embeddings_nextn_ith(tgt, i);
        if (!hi) ok = 0;
        else memcpy(h + (size_t)i * n_embd, hi, row);
    }
    if (ok && fill) { /* row k pairs x_k with h_{k-1}; row 0 with zeros, as llama.cpp's driver does */
        memset(r->hin, 0, row);
        memcpy(r->hin + n_embd, h, (size_t)N_PROMPT * row); /* rows 1..N_PROMPT */
        memcpy(r->tok, prompt, (N_PROMPT + 1) * sizeof(int32_t));
    }
    int32_t pos[N_ROWS], n_seq[N_ROWS], seq0 = 0, *seq[N_ROWS];
    int8_t flags[N_ROWS];
    for (int i = 0; i < N_ROWS; i++) pos[i] = i, n_seq[i] = 1, seq[i] = &seq0, flags[i] = 1;
    struct llama_peer_batch b = {N_PROMPT, r->tok, r->hin, pos, n_seq, seq, flags};
    if (ok) ok = pe->decode(mtp, b) == 0;
    for (int i = 0; ok && i < N_PROMPT; i++) {
        const float *l = pe->get_logits_ith(mtp, i);
        if (!l) ok = 0;
        else memcpy(logits + (size_t)i * n_vocab, l, (size_t)n_vocab * sizeof(float));
    }
    for (int j = 0; ok && j < N_DRAFT; j++) { /* draft steps: one row each on the MTP context */
        const int k = N_PROMPT + j;
        struct llama_peer_batch s = {1, r->tok + k, r->hin + (size_t)k * n_embd, pos + k, n_seq, seq, flags};
        const float *l = pe->decode(mtp, s) == 0 ? pe->get_logits_ith(mtp, 0) : NULL;
        const float *y = l ? pe->get_embeddings_nextn_ith(mtp, 0) : NULL;
        if (!l || !y) ok = 0;
        else memcpy(logits + (size_t)k * n_vocab, l, (size_t)n_vocab * sizeof(float));
        if (ok && fill && j + 1 < N_DRAFT) {
            r->tok[k + 1] = cmp_argmax(l, n_vocab);
            memcpy(r->hin + (size_t)(k + 1) * n_embd, y, row);
        }
    }
    if (mtp) pe->ctx_free(mtp);
    if (tgt) pe->ctx_free(tgt);
    T_CHECK(ok, "llama.cpp: target prompt, MTP prompt batch and %d draft steps (flash %d)", N_DRAFT, flash);
    return ok;
}

/* Ours on a drafting context: the prompt through infer_decode (h from spec_hidden), then the MTP block
 * over r's rows through spec_mtp_eval. 0 on failure. */
static int ours_run(infer_model *m, const struct rows *r, int n_embd, int n_vocab, float *h, float *logits) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = 64, p.n_batch = 64, p.n_threads = 2, p.n_draft = 1;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK) {
        T_CHECK(0, "infer_ctx_create: %s", infer_last_error());
        return 0;
    }
    float *step = malloc((size_t)N_DRAFT * n_vocab * sizeof(float));
    infer_batch b = {N_PROMPT, r->tok, NULL, NULL, NULL};
    int ok = step && infer_decode(c, &b) == INFER_OK;
    const float *hid = ok ? spec_hidden(c) : NULL;
    if (hid) memcpy(h, hid, (size_t)N_PROMPT * n_embd * sizeof(float));
    ok = hid && spec_mtp_eval(c, 0, 0, r->tok, r->hin, N_PROMPT, logits) == INFER_OK;
    for (int j = 0; ok && j < N_DRAFT; j++) {
        ok = spec_mtp_eval(c, 0, N_PROMPT, r->tok + N_PROMPT, r->hin + (size_t)N_PROMPT * n_embd, j + 1, step) ==
             INFER_OK;
        if (ok)
            memcpy(logits + (size_t)(N_PROMPT + j) * n_vocab, step + (size_t)j * n_vocab,
                   (size_t)n_vocab * sizeof(float));
    }
    T_CHECK(ok, "ours: prompt, MTP rows: %s", infer_last_error());
    free(step);
    infer_ctx_free(c);
    return ok;
}

static void check_one(const struct llama_peer *pe, const char *arch, const char *ftype) {
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 13, sp.mtp = 1;
    char path[256];
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, arch, ftype);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return;
    }
    infer_model *m = NULL;
    void *lm = NULL, *lm_nr = NULL; /* lm_nr: the same file without weight repacking */
    struct rows r = {{0}, NULL};
    float *buf = NULL;
    if (infer_model_load(path, NULL, &m) != INFER_OK) {
        T_CHECK(0, "load %s: %s", path, infer_last_error());
        goto done;
    }
    const int n_vocab = infer_vocab_size(m), n_embd = sp.n_embd;
    const struct llama_peer_expect want = {n_embd, 0, 0, 0, n_vocab, 1};
    const char *why = NULL;
    lm = llama_peer_model_load(pe, path, 1, &want, &why);
    struct llama_peer_model_params nr = pe->model_default_params();
    nr.n_gpu_layers = 0, nr.load_mtp = 1, nr.use_extra_bufts = 0;
    lm_nr = lm ? pe->model_load(path, nr) : NULL;
    /* h: ours, ref, flash on, no repack (N_PROMPT rows each); logits: the same four (N_ROWS rows) */
    const size_t nh = (size_t)N_PROMPT * n_embd, nl = (size_t)N_ROWS * n_vocab;
    buf = calloc((size_t)N_ROWS * n_embd + 4 * nh + 4 * nl, sizeof(float));
    if (!lm || !lm_nr || !buf) {
        T_CHECK(0, "%s %s: llama.cpp loads the model with its MTP layer (%s), buffers", arch, ftype, why ? why : "");
        goto done;
    }
    r.hin = buf;
    float *h_ours = buf + (size_t)N_ROWS * n_embd, *h_ref = h_ours + nh, *h_on = h_ref + nh, *h_nr = h_on + nh;
    float *l_ours = h_nr + nh, *l_ref = l_ours + nl, *l_on = l_ref + nl, *l_nr = l_on + nl;
    int32_t prompt[N_PROMPT + 1];
    for (int i = 0; i <= N_PROMPT; i++) prompt[i] = (int32_t)((i * 37 + 11) % (n_vocab - 8));
    if (!llama_run(pe, lm, prompt, n_embd, n_vocab, 0, 1, &r, h_ref, l_ref) ||
        !llama_run(pe, lm, prompt, n_embd, n_vocab, 1, 0, &r, h_on, l_on) ||
        !llama_run(pe, lm_nr, prompt, n_embd, n_vocab, 0, 0, &r, h_nr, l_nr) ||
        !ours_run(m, &r, n_embd, n_vocab, h_ours, l_ours))
        goto done;
    const struct cmp hs = cmp_worse(cmp_rows(h_on, h_ref, n_embd, 0, N_PROMPT), cmp_rows(h_nr, h_ref, n_embd, 0, N_PROMPT));
    const struct cmp ls = cmp_worse(cmp_rows(l_on, l_ref, n_vocab, 0, N_ROWS), cmp_rows(l_nr, l_ref, n_vocab, 0, N_ROWS));
    const struct cmp ho = cmp_rows(h_ours, h_ref, n_embd, 0, N_PROMPT);
    const struct cmp lp = cmp_rows(l_ours, l_ref, n_vocab, 0, N_PROMPT),
                     ld = cmp_rows(l_ours, l_ref, n_vocab, N_PROMPT, N_ROWS);
    const struct cmp la = cmp_rows(l_ours, l_ref, n_vocab, 0, N_ROWS);
    printf("  %-9s %-6s h: max rel L2 %.2e mean %.2e (llama.cpp's settings: max %.2e mean %.2e) | MTP prompt: max "
           "%.2e mean %.2e argmax %d/%d | drafts: max %.2e argmax %d/%d | llama.cpp's settings: max %.2e mean %.2e "
           "argmax %d/%d\n", arch, ftype, ho.max_rel, ho.mean_rel, hs.max_rel, hs.mean_rel, lp.max_rel, lp.mean_rel,
           lp.agree, N_PROMPT, ld.max_rel, ld.agree, N_DRAFT, ls.max_rel, ls.mean_rel, ls.agree, N_ROWS);
    if (!strcmp(ftype, "F32") || !strcmp(ftype, "F16")) {
        T_CHECK(ho.max_rel <= 1e-3, "%s %s target h: max rel L2 %.3g (<= 1e-3)", arch, ftype, ho.max_rel);
        T_CHECK(lp.max_rel <= 1e-3 && lp.agree == N_PROMPT, "%s %s MTP prompt rows: max rel L2 %.3g (<= 1e-3), "
                "argmax %d/%d", arch, ftype, lp.max_rel, lp.agree, N_PROMPT);
        T_CHECK(ld.max_rel <= 1e-3 && ld.agree == N_DRAFT, "%s %s MTP draft steps: max rel L2 %.3g (<= 1e-3), "
                "argmax %d/%d", arch, ftype, ld.max_rel, ld.agree, N_DRAFT);
    } else {
        const double hb = 2 * hs.mean_rel > 1e-3 ? 2 * hs.mean_rel : 1e-3;
        const double lb = 2 * ls.mean_rel > 1e-3 ? 2 * ls.mean_rel : 1e-3;
        const double self_pct = 100.0 * ls.agree / N_ROWS, our_pct = 100.0 * la.agree / N_ROWS;
        T_CHECK(ho.mean_rel <= hb, "%s %s target h: mean rel L2 %.3g within max(2 x llama.cpp's spread %.3g, 1e-3)",
                arch, ftype, ho.mean_rel, hs.mean_rel);
        T_CHECK(la.mean_rel <= lb, "%s %s MTP logits: mean rel L2 %.3g within max(2 x llama.cpp's spread %.3g, 1e-3)",
                arch, ftype, la.mean_rel, ls.mean_rel);
        T_CHECK(our_pct >= self_pct - 3, "%s %s MTP argmax agreement %.1f%% >= llama.cpp's self-agreement %.1f%% - 3",
                arch, ftype, our_pct, self_pct);
    }
done:
    if (lm) pe->model_free(lm);
    if (lm_nr) pe->model_free(lm_nr);
    infer_model_free(m);
    free(buf);
    unlink(path);
}

int main(void) {
    struct llama_peer pe;
    const char *why = NULL;
    const int got = llama_peer_load(&pe, &why);
    if (got == 0) {
        T_SKIP("llama.cpp peer: %s", why);
        return t_done();
    }
    T_CHECK(got == 1, "llama.cpp peer: %s", why ? why : ""); /* a layout mismatch fails, never skips */
    if (got != 1) return t_done();
    if (!mkdtemp(dir)) return 1;
    static const char *const archs[] = {"qwen35", "qwen35moe", "qwen3next"};
    static const char *const ftypes[] = {"F32", "F16", "Q8_0", "Q4_K_M"};
    for (int a = 0; a < 3; a++)
        for (int f = 0; f < 4; f++) check_one(&pe, archs[a], ftypes[f]);
    rmdir(dir);
    return t_done();
}
