/* test-synth: synthetic models are deterministic, valid, and typed like llama-quantize types them.
 *
 * 1. Same seed -> the same bytes; another seed -> other bytes.
 * 2. The vocabulary: no duplicate token, every merge "a b" has a, b and ab in the vocabulary.
 * 3. random_blocks files load with check_tensors (finite scales everywhere).
 * 4. Against the real llama.cpp (peer): an F32 synth model of every arch is quantised by
 *    llama_model_quantize (which reads its hyperparameters) to each file type; every tensor's type in its output must equal
 *    ftype_tensor_type() (which synth uses to write a file of that type directly).
 * 5. mtp_agree, without our forward pass: the set tensors dequantise to the promised values (zero output
 *    projections, identity eh_proj, ones, equal norms); a float64 bigram table computed here from the file
 *    (main: output*RMSNorm(E[x])*output_norm; MTP: docs/qwen35.md §6.1 with zero block outputs) has the same argmax
 *    for every token and is one cycle through the vocabulary; with mtp_noise the agreement falls as
 *    documented in synth.h; and llama.cpp's greedy token after each single token x is the table's.
 */
#include <math.h>
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

/* Our loader on a file: it loads when every tensor type is supported, else it refuses with
 * "unsupported tensor type <ggml's name> in", naming one of the file's unsupported types. */
static void check_load(const char *path, const char *what) {
    struct gguf_file *f = NULL;
    T_CHECK(gguf_open(path, &f) == INFER_OK, "%s: open: %s", what, infer_last_error());
    if (!f) return;
    int all_supported = 1;
    for (int64_t i = 0; i < f->n_tensors; i++) all_supported &= infer_type_supported(f->tensors[i].type);
    infer_model *m = NULL;
    infer_status st = infer_model_load(path, NULL, &m);
    if (all_supported) {
        T_CHECK(st == INFER_OK, "%s: load: %s", what, infer_last_error());
    } else {
        const char *e = strstr(infer_last_error(), "unsupported tensor type ");
        int named = 0;
        for (int64_t i = 0; e && i < f->n_tensors; i++) {
            const int32_t ty = f->tensors[i].type;
            char want[64];
            snprintf(want, sizeof want, "unsupported tensor type %s in ", quant_type(ty)->name);
            named |= !infer_type_supported(ty) && strncmp(e, want, strlen(want)) == 0;
        }
        T_CHECK(st == INFER_E_UNSUPPORTED && named, "%s: refusal names an unsupported type of the file: %s", what,
                infer_last_error());
    }
    infer_model_free(m);
    gguf_close(f);
}

/* The file types llama-quantize refuses without an importance matrix ("this quantization requires an
 * imatrix"): they give some tensor an IQ1_S/M, IQ2_XXS/XS/S or IQ3_XXS type (Q2_K_S: Q2_K). */
static int needs_imatrix(int32_t ft) {
    return ft == FTYPE_IQ2_XXS || ft == FTYPE_IQ2_XS || ft == FTYPE_IQ2_S || ft == FTYPE_IQ2_M ||
           ft == FTYPE_IQ1_S || ft == FTYPE_IQ1_M || ft == FTYPE_IQ3_XXS || ft == FTYPE_IQ3_XS ||
           ft == FTYPE_Q2_K_S;
}

/* llama_model_quantize with a dummy importance matrix (all ones, ne[0] * ne[2] per tensor of 2 or 3 dims:
 * the size llama.cpp checks) when the file type needs one, so that llama.cpp writes the file at all. */
static uint32_t peer_quantize(const struct llama_peer *pe, const char *in, const char *out, int32_t ftype) {
    if (!needs_imatrix(ftype)) return llama_peer_quantize(pe, in, out, ftype);
    struct gguf_file *f = NULL;
    if (gguf_open(in, &f) != INFER_OK) return 1;
    struct llama_peer_imatrix *im = calloc((size_t)f->n_tensors + 1, sizeof *im);
    int64_t n = 0, max = 1;
    for (int64_t i = 0; i < f->n_tensors; i++)
        max =
            f->tensors[i].ne[0] * f->tensors[i].ne[2] > max ? f->tensors[i].ne[0] * f->tensors[i].ne[2] : max;
    float *ones = malloc(sizeof(float) * (size_t)max);
    uint32_t rc = 1;
    if (im && ones) {
        for (int64_t i = 0; i < max; i++)
            ones[i] = 1.0f;
        for (int64_t i = 0; i < f->n_tensors; i++) {
            const struct gguf_tensor *t = &f->tensors[i];
            if (t->n_dims >= 2 && t->ne[1] > 1)
                im[n++] = (struct llama_peer_imatrix){
                    .name = t->name, .data = ones, .size = (size_t)(t->ne[0] * t->ne[2])};
        }
        rc = llama_peer_quantize_imatrix(pe, in, out, ftype, im);
    }
    free(ones), free(im);
    gguf_close(f);
    return rc;
}

/* The imatrix changes the rules of one of these file types only (has_imatrix in llama_tensor_get_type_impl):
 * IQ3_XXS keeps IQ3_XXS for attn_v-like tensors (no imatrix: IQ3_S) and for ffn_down (no imatrix: Q4_K /
 * Q3_K; after the fallback IQ4_NL, not Q5_0 / Q4_0). ftype_tensor_type gives the rules without one. */
static int32_t with_imatrix(int32_t ftype, const char *name, int32_t t) {
    if (ftype != FTYPE_IQ3_XXS) return t;
    if ((strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight")) && t == INFER_TYPE_IQ3_S)
        return INFER_TYPE_IQ3_XXS;
    if (strstr(name, "ffn_down") && (t == INFER_TYPE_Q4_K || t == INFER_TYPE_Q3_K)) return INFER_TYPE_IQ3_XXS;
    if (strstr(name, "ffn_down") && (t == INFER_TYPE_Q5_0 || t == INFER_TYPE_Q4_0)) return INFER_TYPE_IQ4_NL;
    return t;
}

/* odd 1: rows of 96 and 160 values, which no K-quant block divides: llama.cpp's fallback types;
 * odd 2: one KV head for 4 query heads (n_gqa 4: Q2_K's attn_v rule);
 * odd 3: 4 experts (the IQ1/IQ2 types' n_expert >= 4 rule without the 8-expert ones) */
static void peer_compare(const struct llama_peer *pe, const char *arch, int tied, int mtp, int32_t ftype, int32_t n_layer, int odd) {
    struct synth_params p;
    synth_params_default(arch, &p);
    if (n_layer) p.n_layer = n_layer;
    if (odd == 1) p.n_embd = 96, p.n_head = 3, p.n_head_kv = 1, p.head_dim = 32, p.n_ff = 160;
    if (odd == 2) p.n_head_kv = 1;
    if (odd == 3) p.n_expert = 4, p.n_expert_used = 2;
    /* all-zero weights for the file types with IQ / TQ tensors: llama.cpp's IQ quantisers search a grid per
     * block (up to 40 s a file on one thread), a zero block takes their fast path, and only types count */
    p.sparse = ftype >= FTYPE_IQ2_XXS && ftype != FTYPE_BF16 && ftype != FTYPE_MXFP4_MOE;
    p.tied = tied;
    p.mtp = mtp;
    const char *in = tmp_path("peer-in.gguf"), *out = tmp_path("peer-out.gguf");
    T_CHECK(synth_write(&p, in) == INFER_OK, "synth %s: %s", arch, infer_last_error());
    uint32_t rc = peer_quantize(pe, in, out, ftype);
    T_CHECK(rc == 0, "%s %s: llama_model_quantize failed (%u)", arch, ftype_name(ftype), rc);
    if (rc) return;
    struct gguf_file *f = NULL;
    T_CHECK(gguf_open(out, &f) == INFER_OK, "open quantised: %s", infer_last_error());
    if (!f) return;
    const struct ftype_model fm = {p.n_layer + (mtp ? 1 : 0), p.n_head / p.n_head_kv, p.n_expert, tied,
                                   p.n_ff_shexp > 0};
    int diffs = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        int32_t ours = with_imatrix(ftype, t->name, ftype_tensor_type(ftype, t->name, t->n_dims, t->ne, &fm));
        if (ours != t->type && diffs++ < 5)
            printf("  %s %s tied=%d: %s is %s in llama.cpp's file, ftype says %s\n", arch, ftype_name(ftype), tied,
                   t->name, quant_type(t->type) ? quant_type(t->type)->name : "?",
                   quant_type(ours) ? quant_type(ours)->name : "?");
    }
    T_CHECK(diffs == 0, "%s %s tied=%d mtp=%d: %d tensor types differ from llama-quantize", arch, ftype_name(ftype), tied,
            mtp, diffs);
    gguf_close(f);
    /* and our loader takes llama.cpp's file (odd shapes included: their fallback types are computed too) */
    char what[96];
    snprintf(what, sizeof what, "llama.cpp's %s %s file (odd %d)", arch, ftype_name(ftype), odd);
    check_load(out, what);
}

/* Every file type we write, as llama.cpp names it: llama_model_desc of the file llama_model_quantize
 * writes for that id ends with ftype_desc (what llm-gguf info shows), and the names round-trip. */
static void peer_desc(const struct llama_peer *pe) {
    struct synth_params p;
    synth_params_default("llama", &p);
    p.sparse = 1; /* zero weights: llama.cpp's IQ quantisers take their fast path (see peer_compare) */
    const char *in = tmp_path("desc-in.gguf"), *out = tmp_path("desc-out.gguf");
    T_CHECK(synth_write(&p, in) == INFER_OK, "synth: %s", infer_last_error());
    char names[320];
    snprintf(names, sizeof names, "%s", ftype_names());
    for (char *save = NULL, *n = strtok_r(names, " ", &save); n; n = strtok_r(NULL, " ", &save)) {
        const int32_t ft = ftype_by_name(n);
        T_CHECK(ft >= 0 && strcmp(ftype_name(ft), n) == 0 && ftype_desc(ft), "%s: name round trip", n);
        if (ft < 0) continue;
        /* needs_imatrix is llama.cpp's: it refuses exactly those without one */
        T_CHECK(!needs_imatrix(ft) || llama_peer_quantize(pe, in, out, ft) != 0,
                "llama.cpp writes %s without an imatrix", n);
        const uint32_t rc = peer_quantize(pe, in, out, ft);
        T_CHECK(rc == 0, "llama.cpp writes a %s file (%u)", n, rc);
        if (rc) continue;
        const char *why = NULL;
        void *m = llama_peer_model_load(pe, out, 0, NULL, &why);
        T_CHECK(m != NULL, "llama.cpp loads its own %s file: %s", n, why ? why : "");
        if (!m) continue;
        char desc[128] = "";
        pe->model_desc(m, desc, sizeof desc);
        const size_t nd = strlen(desc), nw = strlen(ftype_desc(ft));
        T_CHECK(nd > nw && desc[nd - nw - 1] == ' ' && strcmp(desc + nd - nw, ftype_desc(ft)) == 0,
                "%s (file_type %d): llama.cpp says '%s', we say '%s'", n, (int)ft, desc, ftype_desc(ft));
        pe->model_free(m);
    }
}

/* ---- mtp_agree ---- */

/* The tensor dequantised to float64, rows of ne[0]; NULL if absent. */
static double *deq(const struct gguf_file *f, const char *name, int64_t *ne0, int64_t *rows) {
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) return NULL;
    *ne0 = t->ne[0], *rows = t->ne[1] * t->ne[2] * t->ne[3];
    float *row = malloc((size_t)*ne0 * sizeof *row);
    double *out = malloc((size_t)(*ne0 * *rows) * sizeof *out);
    const size_t rb = quant_row_bytes(t->type, *ne0);
    for (int64_t r = 0; r < *rows; r++) {
        quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, row, *ne0);
        for (int64_t i = 0; i < *ne0; i++) out[r * *ne0 + i] = row[i];
    }
    free(row);
    return out;
}

static void rmsnorm(const double *x, const double *w, double *y, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const double s = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s * (w ? w[i] : 1.0);
}

static int64_t argmax_rows(const double *m, const double *v, int64_t rows, int64_t n, double *margin) {
    int64_t best = 0;
    double b1 = -1e300, b2 = -1e300;
    for (int64_t r = 0; r < rows; r++) {
        double d = 0;
        for (int64_t i = 0; i < n; i++) d += m[r * n + i] * v[i];
        if (d > b1) b2 = b1, b1 = d, best = r;
        else if (d > b2) b2 = d;
    }
    if (margin) *margin = b1 - b2;
    return best;
}

struct bigram {
    int64_t V, E, n_normal;
    double *emb, *out, *onorm, *eh, *enorm, *hnorm, *shnorm;
};

static int bigram_open(const struct gguf_file *f, struct bigram *b) {
    int64_t ne0, rows;
    memset(b, 0, sizeof *b);
    b->emb = deq(f, "token_embd.weight", &b->E, &b->V);
    b->out = deq(f, "output.weight", &ne0, &rows);
    b->onorm = deq(f, "output_norm.weight", &ne0, &rows);
    char name[64];
    const struct gguf_kv *kv = gguf_find_kv(f, "general.architecture");
    char key[96];
    snprintf(key, sizeof key, "%s.block_count", kv->val.v.str.s);
    const int64_t mtp_layer = (int64_t)gguf_find_kv(f, key)->val.v.u - 1;
#define NEXTN(field, suffix)                                                                                  \
    snprintf(name, sizeof name, "blk.%lld.nextn.%s", (long long)mtp_layer, suffix), b->field = deq(f, name, &ne0, &rows)
    NEXTN(eh, "eh_proj.weight");
    NEXTN(enorm, "enorm.weight");
    NEXTN(hnorm, "hnorm.weight");
    NEXTN(shnorm, "shared_head_norm.weight");
#undef NEXTN
    const struct gguf_kv *tt = gguf_find_kv(f, "tokenizer.ggml.token_type");
    for (uint64_t i = 0; tt && i < tt->val.n; i++) b->n_normal += ((const int32_t *)tt->val.v.arr)[i] == 1;
    return b->emb && b->out && b->onorm && b->eh && b->enorm && b->hnorm && b->shnorm;
}

static void bigram_free(struct bigram *b) {
    free(b->emb), free(b->out), free(b->onorm), free(b->eh), free(b->enorm), free(b->hnorm), free(b->shnorm);
}

/* The main model's next token after x (its post-norm hidden to *hn): zero block outputs leave h = E[x]. */
static int64_t bigram_main(const struct bigram *b, int64_t x, double *hn, double *margin) {
    rmsnorm(b->emb + x * b->E, b->onorm, hn, b->E, 1e-6);
    return argmax_rows(b->out, hn, b->V, b->E, margin);
}

/* docs/qwen35.md §6.1 with attn_output / ffn_down* zero: u = eh_proj*[RMSNorm(E[x])*enorm; RMSNorm(h)*hnorm], the block
 * adds nothing, y = RMSNorm(u)*shared_head_norm, logits = output*y. */
static int64_t bigram_mtp(const struct bigram *b, int64_t x, const double *h) {
    const int64_t E = b->E;
    double *cat = malloc((size_t)(3 * E) * sizeof *cat), *u = cat + 2 * E;
    rmsnorm(b->emb + x * E, b->enorm, cat, E, 1e-6);
    rmsnorm(h, b->hnorm, cat + E, E, 1e-6);
    for (int64_t r = 0; r < E; r++) {
        u[r] = 0;
        for (int64_t c = 0; c < 2 * E; c++) u[r] += b->eh[r * 2 * E + c] * cat[c];
    }
    rmsnorm(u, b->shnorm, cat, E, 1e-6);
    int64_t y = argmax_rows(b->out, cat, b->V, E, NULL);
    free(cat);
    return y;
}

/* Fraction of the sampled tokens (every stride-th, the MTP's h from the previous sample) on which the MTP's
 * argmax is the main model's. */
static double bigram_agreement(const struct bigram *b, int64_t stride) {
    double *hn = malloc((size_t)b->E * sizeof *hn), *hprev = calloc((size_t)b->E, sizeof *hprev);
    int64_t n = 0, same = 0;
    for (int64_t x = 0; x < b->n_normal; x += stride, n++) {
        int64_t main_next = bigram_main(b, x, hn, NULL);
        same += bigram_mtp(b, x, hprev) == main_next;
        memcpy(hprev, hn, (size_t)b->E * sizeof *hn);
    }
    free(hn), free(hprev);
    return n ? (double)same / (double)n : 0;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* (a) the set tensors, (b) the bigram property and the cycle. */
static void check_agree_file(const char *arch, const char *ftype, int random_blocks) {
    struct synth_params p;
    synth_params_default(arch, &p);
    p.ftype = ftype, p.mtp_agree = 1, p.random_blocks = random_blocks;
    const char *path = tmp_path("agree.gguf");
    T_CHECK(synth_write(&p, path) == INFER_OK, "agree %s %s: %s", arch, ftype, infer_last_error());
    struct gguf_file *f = NULL;
    T_CHECK(gguf_open(path, &f) == INFER_OK, "open: %s", infer_last_error());
    if (!f) return;
    /* (a) every output projection dequantises to zeros */
    int n_zero = 0, nonzero = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const char *nm = f->tensors[i].name;
        if (!ends_with(nm, "attn_output.weight") && !ends_with(nm, "ssm_out.weight") &&
            !ends_with(nm, "ffn_down.weight") && !ends_with(nm, "ffn_down_exps.weight") &&
            !ends_with(nm, "ffn_down_shexp.weight"))
            continue;
        int64_t ne0, rows;
        double *v = deq(f, nm, &ne0, &rows);
        for (int64_t k = 0; k < ne0 * rows; k++) nonzero += v[k] != 0.0;
        free(v);
        n_zero++;
    }
    /* per layer (trunk and MTP): the mixer's output, then ffn_down or ffn_down_exps (+ ffn_down_shexp) */
    const int per_layer = 1 + 1 + (p.n_ff_shexp ? 1 : 0);
    T_CHECK(n_zero == (p.n_layer + 1) * per_layer && nonzero == 0, "%s %s: %d output projections, %d nonzero values",
            arch, ftype, n_zero, nonzero);
    struct bigram b;
    T_CHECK(bigram_open(f, &b), "%s: bigram tensors", arch);
    const struct gguf_tensor *eht = gguf_find_tensor(f, "blk.4.nextn.eh_proj.weight");
    T_CHECK(eht && eht->type == (strcmp(ftype, "F32") ? INFER_TYPE_F16 : INFER_TYPE_F32), "%s %s: eh_proj type", arch,
            ftype);
    int bad_eh = 0, bad_norm = 0;
    for (int64_t r = 0; r < b.E; r++)
        for (int64_t c = 0; c < 2 * b.E; c++) bad_eh += b.eh[r * 2 * b.E + c] != (c == r ? 1.0 : 0.0);
    for (int64_t i = 0; i < b.E; i++) bad_norm += b.enorm[i] != 1.0 || b.shnorm[i] != b.onorm[i];
    T_CHECK(bad_eh == 0 && bad_norm == 0, "%s: eh_proj %d values not identity, %d norm values off", arch, bad_eh,
            bad_norm);
    /* eh_proj*[e;h] reproduces e */
    {
        uint64_t s = 7;
        double err = 0;
        double *cat = malloc((size_t)(2 * b.E) * sizeof *cat);
        for (int64_t c = 0; c < 2 * b.E; c++) {
            s = s * 6364136223846793005ull + 1;
            cat[c] = (double)(s >> 40) / 16777216.0 - 0.5;
        }
        for (int64_t r = 0; r < b.E; r++) {
            double u = 0;
            for (int64_t c = 0; c < 2 * b.E; c++) u += b.eh[r * 2 * b.E + c] * cat[c];
            err = fmax(err, fabs(u - cat[r]));
        }
        T_CHECK(err < 1e-3, "%s: |eh_proj*[e;h] - e| = %g", arch, err);
        free(cat);
    }
    /* (b) same argmax for every token; the greedy chain from token 0 visits every normal token once */
    const double agree = bigram_agreement(&b, 1);
    T_CHECK(agree == 1.0, "%s %s: MTP agrees on %.4f of the tokens", arch, ftype, agree);
    double *hn = malloc((size_t)b.E * sizeof *hn);
    char *seen = calloc((size_t)b.V, 1);
    int64_t x = 0, distinct = 0;
    double min_margin = 1e300, margin;
    for (int64_t k = 0; k < b.n_normal; k++) {
        distinct += !seen[x];
        seen[x] = 1;
        x = bigram_main(&b, x, hn, &margin);
        min_margin = fmin(min_margin, margin);
    }
    T_CHECK(distinct == b.n_normal && x == 0, "%s: greedy chain visits %lld of %lld tokens", arch, (long long)distinct,
            (long long)b.n_normal);
    printf("  %s %s agree: MTP = main on %.4f of %lld tokens, one cycle of %lld, smallest top-2 margin %.3f\n", arch,
           ftype, agree, (long long)b.n_normal, (long long)distinct, min_margin);
    free(hn), free(seen);
    bigram_free(&b);
    gguf_close(f);
}

/* Agreement against mtp_noise for a shape. */
static double agree_at(const char *arch, int32_t n_embd, int32_t n_vocab, float sigma, int64_t stride) {
    struct synth_params p;
    synth_params_default(arch, &p);
    p.ftype = "Q8_0", p.mtp_noise = sigma, p.n_embd = n_embd, p.n_vocab = n_vocab, p.n_layer = 4;
    p.random_blocks = 1;
    const char *path = tmp_path("noise.gguf");
    T_CHECK(synth_write(&p, path) == INFER_OK, "noise %g: %s", (double)sigma, infer_last_error());
    struct gguf_file *f = NULL;
    double agree = -1;
    if (gguf_open(path, &f) != INFER_OK) return agree;
    struct bigram b;
    if (bigram_open(f, &b)) {
        /* the pass-through block's deviation from I is the noise; the hidden half stays zero */
        double ss = 0;
        int hidden = 0;
        for (int64_t r = 0; r < b.E; r++)
            for (int64_t c = 0; c < 2 * b.E; c++) {
                double d = b.eh[r * 2 * b.E + c] - (c == r);
                if (c < b.E) ss += d * d;
                else hidden += d != 0;
            }
        T_NEAR(sqrt(ss / (double)(b.E * b.E)), sigma, 0.02 * sigma + 1e-9);
        T_CHECK(hidden == 0, "noise: %d nonzero hidden-half values", hidden);
        agree = bigram_agreement(&b, stride);
    }
    bigram_free(&b);
    gguf_close(f);
    return agree;
}

/* (c) llama.cpp's greedy token after each single token is the bigram table's. */
static void peer_bigram(const struct llama_peer *pe, const char *arch, const char *ftype) {
    struct synth_params p;
    synth_params_default(arch, &p);
    p.ftype = ftype, p.mtp_agree = 1;
    const char *path = tmp_path("agree-peer.gguf");
    T_CHECK(synth_write(&p, path) == INFER_OK, "agree %s: %s", arch, infer_last_error());
    const struct llama_peer_expect e = {p.n_embd, p.n_layer, 0, 0, p.n_vocab, 0};
    const char *why = "";
    void *m = llama_peer_model_load(pe, path, 0, &e, &why);
    T_CHECK(m != NULL, "llama.cpp refuses the agree %s model: %s", arch, why);
    struct gguf_file *f = NULL;
    struct bigram b;
    if (!m || gguf_open(path, &f) != INFER_OK) goto done;
    if (!bigram_open(f, &b)) goto done_b;
    float *logits = malloc((size_t)b.V * sizeof *logits);
    double *hn = malloc((size_t)b.E * sizeof *hn);
    int same = 0, n = 0;
    for (int32_t x = 3; x < b.n_normal; x += b.n_normal / 6, n++) {
        void *ctx = llama_peer_context(pe, m, 16, LLAMA_PEER_CTX_DEFAULT, NULL);
        int32_t tok = x;
        int64_t ours = bigram_main(&b, x, hn, NULL), theirs = -1;
        if (ctx && llama_peer_eval(pe, ctx, &tok, 1, logits, (int32_t)b.V) == 0) {
            theirs = 0;
            for (int64_t y = 1; y < b.V; y++) theirs = logits[y] > logits[theirs] ? y : theirs;
        }
        same += ours == theirs;
        if (ours != theirs)
            printf("  %s: after %d llama.cpp says %lld, the bigram table %lld\n", arch, x, (long long)theirs,
                   (long long)ours);
        if (ctx) pe->ctx_free(ctx);
    }
    T_CHECK(n >= 6 && same == n, "%s: llama.cpp's greedy token = the bigram table's for %d of %d tokens", arch, same,
            n);
    free(logits), free(hn);
    bigram_free(&b);
done_b:
    gguf_close(f);
done:
    if (m) pe->model_free(m);
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

    /* 5. mtp_agree */
    check_agree_file("qwen35", "Q4_K_M", 0);
    check_agree_file("qwen35moe", "Q8_0", 1);
    check_agree_file("qwen3next", "F32", 0);
    {
        struct synth_params p;
        synth_params_default("qwen3", &p);
        p.mtp_agree = 1;
        T_CHECK(synth_write(&p, tmp_path("x.gguf")) == INFER_E_ARG, "agree without an MTP arch");
    }
    /* agreement falls with sigma and (slowly) with the vocabulary: ~Phi(1/sigma - sqrt(2 ln V)) */
    static const float sigmas[] = {0.1f, 0.2f, 0.3f};
    double a[3][2];
    for (int k = 0; k < 3; k++) {
        a[k][0] = agree_at("qwen35", 256, 640, sigmas[k], 1);
        a[k][1] = agree_at("qwen35moe", 1024, 4096, sigmas[k], 37);
        printf("  mtp_noise %.2f: agreement %.3f (n_embd 256, vocab 640), %.3f (n_embd 1024, vocab 4096)\n",
               (double)sigmas[k], a[k][0], a[k][1]);
    }
    T_CHECK(a[0][0] >= 0.99 && a[0][1] >= 0.99, "noise 0.1: %.3f %.3f", a[0][0], a[0][1]);
    T_CHECK(a[1][0] >= 0.9 && a[1][0] < 1 && a[1][1] >= 0.75 && a[1][1] <= 0.95, "noise 0.2: %.3f %.3f", a[1][0],
            a[1][1]);
    T_CHECK(a[2][0] < a[1][0] - 0.2 && a[2][1] < a[1][1] - 0.2, "noise 0.3: %.3f %.3f", a[2][0], a[2][1]);

    /* 3. llama.cpp */
    struct llama_peer pe;
    const char *why = NULL;
    const int got = llama_peer_load(&pe, &why);
    T_CHECK(got >= 0, "llama.cpp peer: %s", why ? why : ""); /* a layout mismatch fails, never skips */
    if (got == 0) {
        T_SKIP_PEER("llama.cpp peer: %s", why ? why : "unavailable");
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
        /* the legacy and Q2_K/Q3_K file types: every arch (tied, MTP alternating), the n_gqa 4 rule,
         * Q3_K_M's first-two-attn_v and first-sixteenth-ffn_down rules on deeper stacks, and the
         * fallbacks (Q2_K/Q3_K -> Q4_0) */
        static const int32_t newtypes[] = {FTYPE_Q4_0, FTYPE_Q4_1, FTYPE_Q5_0,   FTYPE_Q5_1,
                                           FTYPE_Q2_K, FTYPE_Q3_K_S, FTYPE_Q3_K_M, FTYPE_Q3_K_L};
        /* t_quick (the sanitizers' run): each file type on two archs */
        for (int q = 0; q < 8; q++)
            for (int i = 0; i < 6; i++)
                if (!t_quick() || (i + q) % 3 == 0)
                    peer_compare(&pe, archs[i], (i + q) % 2, i >= 3 && q % 2, newtypes[q], 0, 0);
        for (int i = 0; i < 6; i++) peer_compare(&pe, archs[i], 0, i >= 3, FTYPE_Q2_K, 0, 2);
        peer_compare(&pe, "llama", 0, 0, FTYPE_Q3_K_M, 17, 0);
        peer_compare(&pe, "qwen35", 1, 1, FTYPE_Q3_K_M, 24, 0);
        peer_compare(&pe, "qwen35moe", 0, 1, FTYPE_Q3_K_M, 16, 0);
        for (int q = 4; q < 8; q++) peer_compare(&pe, "llama", 0, 0, newtypes[q], 0, 1);
        peer_compare(&pe, "qwen3", 1, 0, FTYPE_Q4_1, 0, 1);
        /* MXFP4_MOE: expert tensors (3-D) MXFP4, every other quantisable tensor and the head Q8_0 (t_quick: the
         * dense llama and the hybrid MoE with MTP) */
        for (int i = 0; i < 6; i++)
            if (!t_quick() || i == 0 || i == 5) peer_compare(&pe, archs[i], i % 2, i == 5, FTYPE_MXFP4_MOE, 0, 0);
        peer_compare(&pe, "qwen3moe", 0, 0, FTYPE_MXFP4_MOE, 0, 1);
        /* the IQ / TQ file types and Q2_K_S (with a dummy imatrix where llama.cpp needs one; IQ3_XXS then
         * follows its imatrix rules, see with_imatrix): every arch (t_quick: two), the fallbacks (IQ ->
         * IQ4_NL, TQ -> Q4_0), the n_gqa 4 rules, 4 experts, and the first-eighth / middle rules on deeper
         * stacks (with a shared expert the IQ1/IQ2 types' ffn_down rule counts two tensors per block) */
        static const int32_t iqtypes[] = {
            FTYPE_IQ2_XXS, FTYPE_IQ2_XS, FTYPE_Q2_K_S, FTYPE_IQ3_XS, FTYPE_IQ3_XXS, FTYPE_IQ1_S, FTYPE_IQ3_S,
            FTYPE_IQ3_M,   FTYPE_IQ2_S,  FTYPE_IQ2_M,  FTYPE_IQ1_M,  FTYPE_TQ1_0,   FTYPE_TQ2_0};
        for (int q = 0; q < 13; q++) {
            for (int i = 0; i < 6; i++)
                if (!t_quick() || (i + q) % 3 == 0)
                    peer_compare(&pe, archs[i], (i + q) % 2, i >= 3 && q % 2, iqtypes[q], 0, 0);
            peer_compare(&pe, "llama", 0, 0, iqtypes[q], 0, 1);
            if (!t_quick() || q % 2) {
                peer_compare(&pe, "qwen35", 0, 1, iqtypes[q], 0, 2);
                peer_compare(&pe, "qwen3moe", 1, 0, iqtypes[q], 0, 3);
                peer_compare(&pe, "llama", 0, 0, iqtypes[q], 17, 0);
                peer_compare(&pe, "qwen35moe", 0, 1, iqtypes[q], 16, 0);
            }
        }
        /* IQ4_NL / IQ4_XS: their own attn_v (n_gqa 4), ffn_down (first eighth) and 8-expert rules, the IQ4_NL
         * fallback of IQ4_XS rows */
        static const int32_t iq4types[] = {FTYPE_IQ4_NL, FTYPE_IQ4_XS};
        for (int q = 0; q < 2; q++) {
            for (int i = 0; i < 6; i++)
                if (!t_quick() || (i + q) % 3 == 0) peer_compare(&pe, archs[i], (i + q) % 2, i >= 3 && q % 2, iq4types[q], 0, 0);
            peer_compare(&pe, "llama", 0, 0, iq4types[q], 0, 1);
            peer_compare(&pe, "qwen3moe", 1, 0, iq4types[q], 0, 3);
            if (!t_quick()) {
                peer_compare(&pe, "llama", 0, 0, iq4types[q], 17, 0);
                peer_compare(&pe, "qwen35moe", 0, 1, iq4types[q], 16, 0);
            }
        }
        peer_desc(&pe);
        for (int i = 0; i < 6; i++) {
            peer_load_model(&pe, archs[i], 0, 0, "F32");
            peer_load_model(&pe, archs[i], 1, 1, "Q4_K_M");
        }
        peer_bigram(&pe, "qwen35", "Q4_K_M");
        peer_bigram(&pe, "qwen35moe", "Q8_0");
        peer_bigram(&pe, "qwen3next", "F32");
    }

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) printf("note: could not remove %s\n", tmpdir);
    return t_done();
}
