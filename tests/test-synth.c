/* test-synth: synthetic models are deterministic, valid, and typed like llama-quantize types them.
 *
 * 1. Same seed -> the same bytes; another seed -> other bytes.
 * 2. The vocabulary: no duplicate token, every merge "a b" has a, b and ab in the vocabulary.
 * 3. random_blocks files load with check_tensors (finite scales everywhere).
 * 4. Against the real llama.cpp (peer): an F32 synth model of every arch is quantised by
 *    llama_model_quantize (which reads its hyperparameters) to each file type; every tensor's type in its output must equal
 *    ftype_tensor_type() (which synth uses to write a file of that type directly).
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/ftype.h"
#include "../tools/synth.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "conformance/llama_peer.h"
#include "scratch.h"
#include "t.h"


static int files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = 0;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int in_sorted(const char **v, int64_t n, const char *s) {
    return bsearch(&s, v, (size_t)n, sizeof *v, cmp_str) != NULL;
}

static void check_vocab(const char *path) {
    struct gguf_file *f = NULL;
    T_CHECK(gguf_open(path, &f) == INFER_OK, "open %s: %s", path, infer_last_error());
    if (!f) return;
    const struct gguf_kv *tk = gguf_find_kv(f, "tokenizer.ggml.tokens"), *mk = gguf_find_kv(f, "tokenizer.ggml.merges");
    T_CHECK(tk && mk && tk->val.elem_type == GGUF_STR && mk->val.elem_type == GGUF_STR, "tokenizer arrays");
    if (tk && mk) {
        const struct gguf_str *toks = tk->val.v.arr, *merges = mk->val.v.arr;
        int64_t n = (int64_t)tk->val.n;
        const char **sorted = malloc((size_t)n * sizeof *sorted);
        for (int64_t i = 0; i < n; i++) sorted[i] = toks[i].s;
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_str);
        int dup = 0, bad = 0;
        for (int64_t i = 1; i < n; i++) dup += strcmp(sorted[i - 1], sorted[i]) == 0;
        for (uint64_t i = 0; i < mk->val.n; i++) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", merges[i].s);
            char *sp = strchr(buf + 1, ' ');
            if (!sp) {
                bad++;
                continue;
            }
            *sp = 0;
            char joined[256];
            snprintf(joined, sizeof joined, "%s%s", buf, sp + 1);
            bad += !in_sorted(sorted, n, buf) || !in_sorted(sorted, n, sp + 1) || !in_sorted(sorted, n, joined);
        }
        T_CHECK(dup == 0 && bad == 0, "vocab: %d duplicates, %d bad merges of %llu", dup, bad,
                (unsigned long long)mk->val.n);
        free(sorted);
    }
    gguf_close(f);
}

/* ---- the peer ---- */

/* llama.cpp loads our file: its loader checks every tensor name and shape against its own tables. */
static void peer_load_model(const struct llama_peer *pe, const char *arch, int tied, int mtp, const char *ftype) {
    struct synth_params p;
    synth_params_default(arch, &p);
    p.tied = tied, p.mtp = mtp, p.ftype = ftype;
    const char *path = tmp_path("peer-load.gguf");
    T_CHECK(synth_write(&p, path) == INFER_OK, "synth %s: %s", arch, infer_last_error());
    /* llama_model_n_layer counts the trunk: block_count - nextn_predict_layers */
    const struct llama_peer_expect e = {p.n_embd, p.n_layer, 0, 0, 0, 0};
    const char *why = "";
    void *m = llama_peer_model_load(pe, path, mtp, &e, &why);
    T_CHECK(m != NULL, "llama.cpp refuses our %s %s model (tied=%d mtp=%d): %s", arch, ftype, tied, mtp, why);
    if (m) pe->model_free(m);
}

/* odd: rows of 96 and 160 values, which no K-quant block divides: llama.cpp's fallback types */
static void peer_compare(const struct llama_peer *pe, const char *arch, int tied, int mtp, int32_t ftype, int32_t n_layer, int odd) {
    struct synth_params p;
    synth_params_default(arch, &p);
    if (n_layer) p.n_layer = n_layer;
    if (odd) p.n_embd = 96, p.n_head = 3, p.n_head_kv = 1, p.head_dim = 32, p.n_ff = 160;
    p.tied = tied;
    p.mtp = mtp;
    const char *in = tmp_path("peer-in.gguf"), *out = tmp_path("peer-out.gguf");
    T_CHECK(synth_write(&p, in) == INFER_OK, "synth %s: %s", arch, infer_last_error());
    uint32_t rc = llama_peer_quantize(pe, in, out, ftype);
    T_CHECK(rc == 0, "%s %s: llama_model_quantize failed (%u)", arch, ftype_name(ftype), rc);
    if (rc) return;
    struct gguf_file *f = NULL;
    T_CHECK(gguf_open(out, &f) == INFER_OK, "open quantised: %s", infer_last_error());
    if (!f) return;
    const struct ftype_model fm = {p.n_layer + (mtp ? 1 : 0), p.n_head / p.n_head_kv, p.n_expert, tied};
    int diffs = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        int32_t ours = ftype_tensor_type(ftype, t->name, t->n_dims, t->ne, &fm);
        if (ours != t->type && diffs++ < 5)
            printf("  %s %s tied=%d: %s is %s in llama.cpp's file, ftype says %s\n", arch, ftype_name(ftype), tied,
                   t->name, quant_type(t->type) ? quant_type(t->type)->name : "?",
                   quant_type(ours) ? quant_type(ours)->name : "?");
    }
    T_CHECK(diffs == 0, "%s %s tied=%d mtp=%d: %d tensor types differ from llama-quantize", arch, ftype_name(ftype), tied,
            mtp, diffs);
    gguf_close(f);
    /* and our loader takes llama.cpp's file (fallback Q5_0 is a type we refuse) */
    infer_model *m = NULL;
    infer_status st = infer_model_load(out, NULL, &m);
    if (odd && ftype == FTYPE_Q4_K_M)
        T_CHECK(st == INFER_E_UNSUPPORTED && strstr(infer_last_error(), "unsupported tensor type Q5_0 in "),
                "fallback file: %s", infer_last_error());
    else
        T_CHECK(st == INFER_OK, "%s %s: loading llama.cpp's quantised file: %s", arch, ftype_name(ftype),
                infer_last_error());
    infer_model_free(m);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test-synth-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    static const char *const archs[] = {"llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe"};

    /* 1. determinism */
    for (int i = 0; i < 6; i++) {
        struct synth_params p;
        synth_params_default(archs[i], &p);
        p.ftype = "Q4_K_M";
        p.mtp = 1;
        const char *a = tmp_path("a.gguf"), *b = tmp_path("b.gguf");
        T_CHECK(synth_write(&p, a) == INFER_OK && synth_write(&p, b) == INFER_OK, "write %s: %s", archs[i],
                infer_last_error());
        T_CHECK(files_equal(a, b), "%s: same seed, different bytes", archs[i]);
        p.seed++;
        T_CHECK(synth_write(&p, b) == INFER_OK && !files_equal(a, b), "%s: another seed, same bytes", archs[i]);
        check_vocab(a);
    }

    /* 2. every file type and random blocks load, with the NaN/Inf scan */
    static const char *const ftypes[] = {"F32", "F16", "BF16", "Q8_0", "Q4_K_M", "Q6_K"};
    for (int i = 0; i < 6; i++)
        for (int rb = 0; rb < 2; rb++) {
            struct synth_params p;
            synth_params_default(archs[(i + rb) % 6], &p);
            p.ftype = ftypes[i];
            p.random_blocks = rb;
            p.mtp = 1;
            const char *path = tmp_path("ft.gguf");
            T_CHECK(synth_write(&p, path) == INFER_OK, "write %s %s: %s", p.arch, p.ftype, infer_last_error());
            infer_model_params mp = infer_model_params_default();
            mp.check_tensors = 1;
            infer_model *m = NULL;
            infer_status st = infer_model_load(path, &mp, &m);
            T_CHECK(st == INFER_OK, "load %s %s rb=%d: %s", p.arch, p.ftype, rb, infer_last_error());
            if (m) {
                char buf[32];
                infer_model_meta_str(m, "general.file_type", buf, sizeof buf);
                T_CHECK(atoi(buf) == ftype_by_name(ftypes[i]), "file_type %s", buf);
            }
            infer_model_free(m);
        }
    /* a real-size vocabulary */
    {
        struct synth_params p;
        synth_params_default("qwen35", &p);
        p.n_vocab = 248320;
        p.random_blocks = 1;
        p.ftype = "Q4_K_M";
        const char *path = tmp_path("bigvocab.gguf");
        T_CHECK(synth_write(&p, path) == INFER_OK, "big vocab: %s", infer_last_error());
        check_vocab(path);
    }
    T_CHECK(synth_preset("qwen35-27b", &(struct synth_params){0}) == INFER_OK, "preset");
    T_CHECK(synth_preset("gpt-5", &(struct synth_params){0}) == INFER_E_ARG, "bad preset");

    /* 3. llama.cpp */
    struct llama_peer pe;
    const char *why = NULL;
    const int got = llama_peer_load(&pe, &why);
    T_CHECK(got >= 0, "llama.cpp peer: %s", why ? why : ""); /* a layout mismatch fails, never skips */
    if (got == 0) {
        T_SKIP("%s", why ? why : "llama.cpp peer unavailable");
    } else if (got == 1) {
        static const int32_t qtypes[] = {FTYPE_Q4_K_M, FTYPE_Q8_0, FTYPE_Q6_K, FTYPE_F16, FTYPE_BF16};
        for (int i = 0; i < 6; i++)
            for (int q = 0; q < 5; q++) peer_compare(&pe, archs[i], q == 0, q == 0 && i >= 3, qtypes[q], 0, 0);
        peer_compare(&pe, "qwen35", 0, 1, FTYPE_Q4_K_M, 0, 0);
        /* deeper stacks: the first/last eighth and every-third-layer boundaries of use_more_bits */
        peer_compare(&pe, "llama", 0, 0, FTYPE_Q4_K_M, 17, 0);
        peer_compare(&pe, "qwen35", 1, 1, FTYPE_Q4_K_M, 24, 0);
        peer_compare(&pe, "qwen35moe", 0, 1, FTYPE_Q4_K_M, 16, 0);
        for (int q = 0; q < 3; q++) {
            peer_compare(&pe, "llama", 0, 0, qtypes[q], 0, 1);
            peer_compare(&pe, "qwen3", 1, 0, qtypes[q], 0, 1);
        }
        for (int i = 0; i < 6; i++) {
            peer_load_model(&pe, archs[i], 0, 0, "F32");
            peer_load_model(&pe, archs[i], 1, 1, "Q4_K_M");
        }
    }

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) printf("note: could not remove %s\n", tmpdir);
    return t_done();
}
