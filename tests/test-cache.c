/* test-cache: the caches and the context API around them. Truncating a sequence and resuming gives
 * logits bit-identical to a fresh run (for the hybrid archs the recurrent state comes back from the
 * snapshot ring or the checkpoint, and a truncation neither can serve is refused with nothing
 * changed); two sequences in one batch equal two separate runs; a batch that would overflow n_ctx
 * fails with INFER_E_CTX_FULL and changes nothing; malformed batches are INFER_E_ARG; unsupported
 * parameters are refused; fault injection on creation gives INFER_E_OOM. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "t.h"

enum { N_P = 12, N_D = 4 };

static int g_draft; /* n_draft of the contexts mk makes: N_D for the hybrid archs (a ring of N_D + 1 states) */

static infer_ctx *mk(const infer_model *m, int32_t n_ctx, int32_t n_seq) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = n_ctx, p.n_batch = 32, p.n_seq = n_seq, p.n_threads = 2, p.n_draft = g_draft;
    infer_ctx *c = NULL;
    infer_status st = infer_ctx_create(m, &p, &c);
    T_CHECK(st == INFER_OK, "infer_ctx_create: %s", infer_last_error());
    return c;
}

/* decodes n tokens of sequence 0 one at a time; copies the last logits into out */
static int steps(infer_ctx *c, const int32_t *tok, int n, float *out, int n_vocab) {
    for (int i = 0; i < n; i++) {
        infer_batch b = {1, tok + i, NULL, NULL, NULL};
        if (infer_decode(c, &b) != INFER_OK) return 0;
        memcpy(out + (size_t)i * n_vocab, infer_logits(c, -1), (size_t)n_vocab * sizeof(float));
    }
    return 1;
}

static void run_arch(const char *arch, const char *dir) {
    struct synth_params sp;
    synth_params_default(arch, &sp);
    const int hybrid = !strncmp(arch, "qwen35", 6) || !strcmp(arch, "qwen3next");
    sp.ftype = "Q8_0", sp.seed = 3, sp.mtp = hybrid;
    g_draft = hybrid ? N_D : 0;
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, arch);
    infer_model *m = NULL;
    if (synth_write(&sp, path) != INFER_OK || infer_model_load(path, NULL, &m) != INFER_OK) {
        T_CHECK(0, "%s: synth and load: %s", arch, infer_last_error());
        return;
    }
    const int nv = infer_vocab_size(m);
    int32_t prompt[N_P + 6], gen[N_D];
    for (int i = 0; i < N_P + 6; i++) prompt[i] = (i * 53 + 7) % (nv - 8);
    for (int i = 0; i < N_D; i++) gen[i] = (i * 91 + 5) % (nv - 8);
    float *fresh = malloc((size_t)N_D * nv * sizeof(float)), *again = malloc((size_t)N_D * nv * sizeof(float));

    /* fresh: prompt then N_D steps */
    infer_ctx *c = mk(m, 64, 2);
    infer_batch bp = {N_P, prompt, NULL, NULL, NULL};
    T_CHECK(infer_decode(c, &bp) == INFER_OK && steps(c, gen, N_D, fresh, nv), "%s fresh run", arch);
    T_CHECK(infer_seq_pos_max(c, 0) == N_P + N_D - 1 && infer_seq_pos_max(c, 1) == -1, "%s pos_max %d",
            arch, infer_seq_pos_max(c, 0));
    /* truncate the generated suffix and resume: same logits */
    T_CHECK(infer_seq_rm(c, 0, N_P, -1) == INFER_OK && infer_seq_pos_max(c, 0) == N_P - 1, "%s seq_rm suffix", arch);
    T_CHECK(steps(c, gen, N_D, again, nv) && !memcmp(fresh, again, (size_t)N_D * nv * sizeof(float)),
            "%s truncate + resume is bit-identical to the fresh run", arch);
    /* a longer prompt truncated back to N_P, then the same steps (hybrid: 6 positions back is past the
     * ring, so it is refused, nothing changed, until a checkpoint at N_P serves it) */
    T_CHECK(infer_seq_rm(c, 0, -1, -1) == INFER_OK && infer_seq_pos_max(c, 0) == -1, "%s clear", arch);
    infer_batch bl = {N_P + 6, prompt, NULL, NULL, NULL};
    if (hybrid) {
        T_CHECK(infer_decode(c, &bl) == INFER_OK && infer_seq_rm(c, 0, N_P, -1) == INFER_E_UNSUPPORTED &&
                    infer_seq_pos_max(c, 0) == N_P + 5, "%s truncation past the ring is refused, nothing changed", arch);
        infer_batch h1 = {N_P, prompt, NULL, NULL, NULL}, h2 = {6, prompt + N_P, NULL, NULL, NULL};
        T_CHECK(infer_seq_rm(c, 0, 0, -1) == INFER_OK && infer_decode(c, &h1) == INFER_OK &&
                    infer_seq_checkpoint(c, 0) == INFER_OK && infer_decode(c, &h2) == INFER_OK,
                "%s prompt, checkpoint, 6 more", arch);
    } else {
        T_CHECK(infer_decode(c, &bl) == INFER_OK, "%s long prompt", arch);
    }
    T_CHECK(infer_seq_rm(c, 0, N_P, -1) == INFER_OK, "%s long prompt truncated to %d", arch, N_P);
    T_CHECK(steps(c, gen, N_D, again, nv) && !memcmp(fresh, again, (size_t)N_D * nv * sizeof(float)),
            "%s longer prompt truncated + resume is bit-identical", arch);
    if (hybrid) { /* the checkpoint was used up by nothing: it serves again; then the ring, step by step */
        T_CHECK(infer_seq_rm(c, 0, N_P, -1) == INFER_OK && steps(c, gen, N_D, again, nv) &&
                    !memcmp(fresh, again, (size_t)N_D * nv * sizeof(float)), "%s checkpoint serves twice", arch);
        for (int back = 1; back <= N_D; back++) {
            const int32_t keep = N_P + N_D - back;
            T_CHECK(infer_seq_rm(c, 0, keep, -1) == INFER_OK &&
                        steps(c, gen + N_D - back, back, again, nv) &&
                        !memcmp(fresh + (size_t)(N_D - back) * nv, again, (size_t)back * nv * sizeof(float)),
                    "%s ring: %d positions back and resumed is bit-identical", arch, back);
        }
        /* the checkpoint after 12 more positions, which rewrite every slot of the live conv ring (11 slots: d_conv 4
         * - 1 + 8): the window comes back from the checkpoint alone, its rows (positions 9, 10, 11) wrapping past
         * the ring's end into slots 9, 10 and 0 */
        int32_t more[12];
        for (int i = 0; i < 12; i++) more[i] = (i * 29 + 11) % (nv - 8);
        infer_batch bm = {12, more, NULL, NULL, NULL};
        T_CHECK(infer_seq_rm(c, 0, N_P, -1) == INFER_OK && infer_decode(c, &bm) == INFER_OK &&
                    infer_seq_rm(c, 0, N_P, -1) == INFER_OK && steps(c, gen, N_D, again, nv) &&
                    !memcmp(fresh, again, (size_t)N_D * nv * sizeof(float)),
                "%s checkpoint after every conv slot was rewritten, resumed is bit-identical", arch);
    }
    /* the prompt in pieces of 5 and 7 (the few-token mmv path) with explicit positions: same logits */
    infer_ctx *cs = mk(m, 64, 1);
    int32_t pos7[7];
    for (int i = 0; i < 7; i++) pos7[i] = 5 + i;
    infer_batch p5 = {5, prompt, NULL, NULL, NULL}, p7 = {7, prompt + 5, pos7, NULL, NULL};
    T_CHECK(infer_decode(cs, &p5) == INFER_OK && infer_decode(cs, &p7) == INFER_OK && steps(cs, gen, N_D, again, nv) &&
                !memcmp(fresh, again, (size_t)N_D * nv * sizeof(float)),
            "%s prompt in batches of 5 + 7 gives the same logits as one batch", arch);
    infer_ctx_free(cs);
    T_CHECK(infer_seq_rm(c, 0, 2, 5) == INFER_E_ARG, "%s removing from the middle is INFER_E_ARG", arch);
    T_CHECK(infer_seq_checkpoint(c, 7) == INFER_E_ARG, "%s checkpoint of a bad sequence", arch);
    T_CHECK(infer_seq_rm(c, 7, 0, -1) == INFER_E_ARG, "%s seq_rm of a bad sequence", arch);

    /* two sequences in one interleaved batch == two separate runs */
    infer_ctx *c2 = mk(m, 64, 2);
    int32_t tok2[2 * N_P], seq2[2 * N_P];
    int8_t lg2[2 * N_P];
    for (int i = 0; i < N_P; i++) {
        tok2[2 * i] = prompt[i], seq2[2 * i] = 0, lg2[2 * i] = 1;
        tok2[2 * i + 1] = prompt[N_P - 1 - i], seq2[2 * i + 1] = 1, lg2[2 * i + 1] = 1;
    }
    infer_batch b2 = {2 * N_P, tok2, NULL, seq2, lg2};
    T_CHECK(infer_decode(c2, &b2) == INFER_OK, "%s two-sequence batch: %s", arch, infer_last_error());
    int32_t rev[N_P];
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < N_P; i++) rev[i] = s ? prompt[N_P - 1 - i] : prompt[i];
        infer_ctx *c1 = mk(m, 64, 1);
        int8_t all[N_P];
        memset(all, 1, sizeof all);
        infer_batch b1 = {N_P, rev, NULL, NULL, all};
        int same = infer_decode(c1, &b1) == INFER_OK;
        for (int i = 0; same && i < N_P; i++) {
            const float *a = infer_logits(c1, i), *b = infer_logits(c2, 2 * i + s);
            same = a && b && !memcmp(a, b, (size_t)nv * sizeof(float));
        }
        T_CHECK(same, "%s sequence %d of the shared batch equals its own run", arch, s);
        infer_ctx_free(c1);
    }
    T_CHECK(infer_seq_pos_max(c2, 0) == N_P - 1 && infer_seq_pos_max(c2, 1) == N_P - 1, "%s both sequences hold %d",
            arch, N_P);

    /* CTX_FULL: nothing changes, and the sequence continues as if the call never happened */
    infer_ctx *c3 = mk(m, N_P + 2, 1);
    int32_t big[N_P + 3];
    memcpy(big, prompt, sizeof big);
    infer_batch bb = {N_P + 3, big, NULL, NULL, NULL};
    T_CHECK(infer_decode(c3, &bb) == INFER_E_CTX_FULL && infer_seq_pos_max(c3, 0) == -1,
            "%s a prompt longer than n_ctx is INFER_E_CTX_FULL", arch);
    T_CHECK(infer_decode(c3, &bp) == INFER_OK, "%s prompt", arch);
    infer_batch b3 = {3, gen, NULL, NULL, NULL};
    T_CHECK(infer_decode(c3, &b3) == INFER_E_CTX_FULL && infer_seq_pos_max(c3, 0) == N_P - 1 &&
            infer_logits(c3, -1) == NULL, "%s overflowing batch: CTX_FULL, state untouched", arch);
    T_CHECK(steps(c3, gen, 2, again, nv) && !memcmp(fresh, again, 2 * (size_t)nv * sizeof(float)),
            "%s after CTX_FULL the sequence resumes bit-identically", arch);

    /* malformed batches */
    int32_t bad_tok = nv, bad_seq = 1, pos_gap = N_P + 5, neg = -1;
    infer_batch e1 = {1, &bad_tok, NULL, NULL, NULL}, e2 = {1, gen, NULL, &bad_seq, NULL},
                e3 = {1, gen, &pos_gap, NULL, NULL}, e4 = {0, gen, NULL, NULL, NULL}, e5 = {33, big, NULL, NULL, NULL},
                e6 = {1, &neg, NULL, NULL, NULL}, e7 = {1, NULL, NULL, NULL, NULL};
    const infer_batch *bad[] = {&e1, &e2, &e3, &e4, &e5, &e6, &e7};
    infer_ctx *c4 = mk(m, 64, 1);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        T_CHECK(infer_decode(c4, bad[i]) == INFER_E_ARG && infer_seq_pos_max(c4, 0) == -1,
                "%s bad batch %zu is INFER_E_ARG and appends nothing", arch, i);

    /* parameters */
    infer_ctx_params p = infer_ctx_params_default();
    infer_ctx *cx = NULL;
    p.kv_type = INFER_TYPE_F32;
    T_CHECK(infer_ctx_create(m, &p, &cx) == INFER_E_UNSUPPORTED && !cx, "%s kv_type F32 is UNSUPPORTED", arch);
    p = infer_ctx_params_default(), p.n_seq = -1;
    T_CHECK(infer_ctx_create(m, &p, &cx) == INFER_E_ARG && !cx, "%s n_seq -1 is INFER_E_ARG", arch);
    p = infer_ctx_params_default(), p.kv_type = INFER_TYPE_BF16;
    T_CHECK(infer_ctx_create(m, &p, &cx) == INFER_E_ARG && !cx, "%s kv_type BF16 is INFER_E_ARG", arch);
    /* a Q8_0 cache: the fresh run moves by the cells' rounding only (not zero: the cells are really Q8_0),
     * and truncate + resume is bit-identical as with f16 cells */
    p = infer_ctx_params_default(), p.n_ctx = 64, p.n_batch = 32, p.n_threads = 2, p.n_draft = g_draft;
    p.kv_type = INFER_TYPE_Q8_0;
    T_CHECK(infer_ctx_create(m, &p, &cx) == INFER_OK, "%s kv_type Q8_0: %s", arch, infer_last_error());
    if (cx) {
        float *q8 = malloc((size_t)N_D * nv * sizeof(float)), *q8b = malloc((size_t)N_D * nv * sizeof(float));
        T_CHECK(infer_decode(cx, &bp) == INFER_OK && steps(cx, gen, N_D, q8, nv), "%s Q8_0 cache run", arch);
        double dd = 0, nn = 0;
        for (size_t i = 0; i < (size_t)N_D * nv; i++) dd += (q8[i] - fresh[i]) * (double)(q8[i] - fresh[i]), nn += fresh[i] * (double)fresh[i];
        printf("  %s Q8_0 cache against f16: rel L2 %.3g\n", arch, sqrt(dd / nn));
        T_CHECK(dd > 0 && dd < 0.2 * 0.2 * nn, "%s Q8_0 cache against f16: rel L2 %.3g (expected in (0, 0.2))", arch,
                sqrt(dd / nn));
        T_CHECK(infer_seq_rm(cx, 0, N_P, -1) == INFER_OK && steps(cx, gen, N_D, q8b, nv) &&
                    !memcmp(q8, q8b, (size_t)N_D * nv * sizeof(float)), "%s Q8_0 cache: truncate + resume bit-identical", arch);
        free(q8), free(q8b);
        infer_ctx_free(cx), cx = NULL;
    }

    /* fault injection: every allocation of ctx create fails in turn -> INFER_E_OOM, nothing leaks (ASan) */
    p = infer_ctx_params_default(), p.n_ctx = 32, p.n_batch = 8, p.n_threads = 1;
    int oom = 0, n;
    for (n = 1; n < 200; n++) {
        status_fault_alloc(n);
        infer_status st = infer_ctx_create(m, &p, &cx);
        status_fault_alloc(0);
        if (st == INFER_OK) break;
        oom += st == INFER_E_OOM;
        T_CHECK(st == INFER_E_OOM && !cx, "%s allocation %d failing gives INFER_E_OOM (got %d)", arch, n, st);
    }
    T_CHECK(cx != NULL && oom == n - 1 && n > 5, "%s ctx create succeeds once faults pass (%d allocations)", arch, n);
    infer_ctx_free(cx);

    infer_ctx_free(c), infer_ctx_free(c2), infer_ctx_free(c3), infer_ctx_free(c4);
    free(fresh), free(again);
    infer_model_free(m);
    unlink(path);
}

int main(void) {
    char dir[] = "/tmp/test-cache-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    run_arch("llama", dir);
    run_arch("qwen3moe", dir);
    run_arch("qwen3next", dir);
    run_arch("qwen35moe", dir);
    rmdir(dir);
    return t_done();
}
