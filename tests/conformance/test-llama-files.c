/* test-llama-files: our reader and tools on files that llama.cpp itself wrote.
 * From one F32 synthetic model, llama.cpp's own quantizer (llama_model_quantize) writes Q4_K_M, Q8_0,
 * Q6_K, IQ4_NL, IQ4_XS, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_M and MXFP4_MOE files. For each:
 *   - our reader agrees with llama.cpp's gguf reader: version, keys and their types, tensor names,
 *     types, offsets, data offset;
 *   - `llm-gguf info --json` lists every tensor with llama.cpp's type, shape, offset and size;
 *   - `llm-gguf dequant` of EVERY tensor is bit-identical to ggml's dequantize_row_<type>.
 * Then `llm-gguf quantize` turns the same F32 file into Q8_0, Q4_K_M, Q6_K, F16 and the seven types after
 * BF16 above: every tensor gets
 * the type llama.cpp chose and byte-identical data (both run the reference quantisers), and
 * llama.cpp loads and decodes the result. */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../tools/synth.h"
#include "../peer.h"
#include "../t.h"
#include "gguf.h"
#include "llama_peer.h"
#include "quant.h"

static char dir[] = "/tmp/test-llama-files-XXXXXX";
static char tool[512];

struct peer_gguf_params {
    bool no_alloc;
    void **ctx;
};

struct peer_gguf {
    void *(*init)(const char *, struct peer_gguf_params);
    void (*free_)(void *);
    int64_t (*n_kv)(const void *), (*n_tensors)(const void *);
    const char *(*key)(const void *, int64_t);
    int (*kv_type)(const void *, int64_t), (*arr_type)(const void *, int64_t);
    const void *(*val_data)(const void *, int64_t), *(*arr_data)(const void *, int64_t);
    const char *(*val_str)(const void *, int64_t);
    const char *(*arr_str)(const void *, int64_t, size_t);
    size_t (*arr_n)(const void *, int64_t);
    uint32_t (*version)(const void *);
    size_t (*alignment)(const void *);
    const char *(*tname)(const void *, int64_t);
    const int64_t *(*tne)(const void *, int64_t);
    size_t (*toff)(const void *, int64_t), (*tsize)(const void *, int64_t), (*data_off)(const void *);
    int (*ttype)(const void *, int64_t);
};

static int bind_gguf(struct peer_gguf *g) {
    static const struct {
        size_t off;
        const char *sym;
    } fns[] = {
        {offsetof(struct peer_gguf, init), "gguf_init_from_file"},
        {offsetof(struct peer_gguf, free_), "gguf_free"},
        {offsetof(struct peer_gguf, n_kv), "gguf_get_n_kv"},
        {offsetof(struct peer_gguf, n_tensors), "gguf_get_n_tensors"},
        {offsetof(struct peer_gguf, key), "gguf_get_key"},
        {offsetof(struct peer_gguf, kv_type), "gguf_get_kv_type"},
        {offsetof(struct peer_gguf, arr_type), "gguf_get_arr_type"},
        {offsetof(struct peer_gguf, val_data), "gguf_get_val_data"},
        {offsetof(struct peer_gguf, arr_data), "gguf_get_arr_data"},
        {offsetof(struct peer_gguf, val_str), "gguf_get_val_str"},
        {offsetof(struct peer_gguf, arr_str), "gguf_get_arr_str"},
        {offsetof(struct peer_gguf, arr_n), "gguf_get_arr_n"},
        {offsetof(struct peer_gguf, version), "gguf_get_version"},
        {offsetof(struct peer_gguf, alignment), "gguf_get_alignment"},
        {offsetof(struct peer_gguf, tname), "gguf_get_tensor_name"},
        {offsetof(struct peer_gguf, tne), "gguf_get_tensor_ne"},
        {offsetof(struct peer_gguf, toff), "gguf_get_tensor_offset"},
        {offsetof(struct peer_gguf, tsize), "gguf_get_tensor_size"},
        {offsetof(struct peer_gguf, data_off), "gguf_get_data_offset"},
        {offsetof(struct peer_gguf, ttype), "gguf_get_tensor_type"},
    };
    void *h = peer_open("libggml-base.so", NULL);
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++)
        if (!(*(void **)((char *)g + fns[i].off) = peer_sym(h, fns[i].sym))) return 0;
    return 1;
}

/* Bytes of one element of a scalar gguf type; 0 for strings and arrays. */
static size_t vtype_size(int t) {
    static const size_t size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t >= 0 && t < 13 ? size[t] : 0;
}

/* 1 if our decoded value i equals llama.cpp's value of key i: same type, same bits. */
static int same_value(const struct peer_gguf *pg, const void *g, int64_t i, const struct gguf_value *v) {
    const int t = pg->kv_type(g, i);
    if (t != (int)v->type) return 0;
    if (t == GGUF_STR)
        return strlen(pg->val_str(g, i)) == v->v.str.len && !strcmp(pg->val_str(g, i), v->v.str.s);
    if (t != GGUF_ARR) {
        uint8_t ours[8];
        const size_t n = vtype_size(t);
        if (t == GGUF_F32) {
            const float x = (float)v->v.f;
            memcpy(ours, &x, 4);
        } else if (t == GGUF_F64) {
            memcpy(ours, &v->v.f, 8);
        } else {
            memcpy(ours, &v->v.u, 8); /* little-endian: the low n bytes of the (sign-extended) integer */
        }
        return memcmp(ours, pg->val_data(g, i), n) == 0;
    }
    if (pg->arr_type(g, i) != (int)v->elem_type || pg->arr_n(g, i) != v->n) return 0;
    if (v->elem_type == GGUF_STR) {
        const struct gguf_str *s = v->v.arr;
        for (uint64_t k = 0; k < v->n; k++)
            if (strlen(pg->arr_str(g, i, k)) != s[k].len || strcmp(pg->arr_str(g, i, k), s[k].s)) return 0;
        return 1;
    }
    return v->n == 0 || memcmp(pg->arr_data(g, i), v->v.arr, v->n * vtype_size(v->elem_type)) == 0;
}

static char *run(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    size_t k;
    while ((k = fread(out + n, 1, cap - n - 1, p)) > 0)
        if ((n += k) + 1 == cap) out = realloc(out, cap *= 2);
    out[n] = 0;
    if (pclose(p) != 0) out[0] = 0;
    return out;
}

static void check_file(const struct llama_peer *pe, const struct peer_gguf *pg, const char *path,
                       const char *what) {
    struct gguf_file *f;
    if (gguf_open(path, &f) != INFER_OK) {
        T_CHECK(0, "%s: we cannot read llama.cpp's file: %s", what, infer_last_error());
        return;
    }
    struct peer_gguf_params gp = {true, NULL};
    void *g = pg->init(path, gp);
    T_CHECK(g != NULL, "%s: llama.cpp reads its own file", what);
    if (!g) {
        gguf_close(f);
        return;
    }
    T_CHECK(pg->version(g) == f->version && pg->n_kv(g) == f->n_kv && pg->n_tensors(g) == f->n_tensors,
            "%s: version/keys/tensors %u/%lld/%lld vs ours %u/%lld/%lld", what, pg->version(g),
            (long long)pg->n_kv(g), (long long)pg->n_tensors(g), f->version, (long long)f->n_kv,
            (long long)f->n_tensors);
    int bad_kv = 0, bad_t = 0;
    for (int64_t i = 0; i < f->n_kv && i < pg->n_kv(g); i++) {
        const int ok = !strcmp(pg->key(g, i), f->kv[i].key) && same_value(pg, g, i, &f->kv[i].val);
        if (!ok && bad_kv++ < 3) printf("  %s: key %lld '%s' differs\n", what, (long long)i, f->kv[i].key);
    }
    const uint8_t *data0 = f->n_tensors ? (const uint8_t *)f->tensors[0].data - f->tensors[0].offset : NULL;
    for (int64_t i = 0; i < f->n_tensors && i < pg->n_tensors(g); i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const int64_t *ne = pg->tne(g, i);
        const int ok = !strcmp(pg->tname(g, i), t->name) && pg->ttype(g, i) == t->type &&
                       pg->toff(g, i) == t->offset && pg->tsize(g, i) == t->nbytes && ne[0] == t->ne[0] &&
                       ne[1] == t->ne[1] && ne[2] == t->ne[2] && ne[3] == t->ne[3] &&
                       (size_t)((const uint8_t *)t->data - data0) == t->offset;
        if (!ok && bad_t++ < 3) printf("  %s: tensor %lld '%s' differs\n", what, (long long)i, t->name);
    }
    T_CHECK(
        bad_kv == 0 && bad_t == 0 && pg->alignment(g) == f->alignment,
        "%s: %d keys and %d tensors (names, types, values, shapes, offsets) differ from llama.cpp's reading",
        what, bad_kv, bad_t);
    /* where the data section starts, as llama.cpp computes it, holds our first tensor's bytes */
    if (f->n_tensors) {
        FILE *fp = fopen(path, "rb");
        uint8_t head[64];
        const size_t n = f->tensors[0].nbytes < sizeof head ? (size_t)f->tensors[0].nbytes : sizeof head;
        const int same = fp && fseek(fp, (long)pg->data_off(g), SEEK_SET) == 0 &&
                         fread(head, 1, n, fp) == n && memcmp(head, f->tensors[0].data, n) == 0;
        T_CHECK(same, "%s: our tensor data starts where llama.cpp's data section does", what);
        if (fp) fclose(fp);
    }

    /* llm-gguf info --json */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s info --json '%s'", tool, path);
    char *json = run(cmd);
    int missing = 0;
    for (int64_t i = 0; json && i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        char want[512];
        int k = snprintf(want, sizeof want, "{\"name\":\"%s\",\"type\":\"%s\",\"shape\":[%lld", t->name,
                         quant_type(t->type)->name, (long long)t->ne[0]);
        for (int d = 1; d < t->n_dims; d++)
            k += snprintf(want + k, sizeof want - (size_t)k, ",%lld", (long long)t->ne[d]);
        snprintf(want + k, sizeof want - (size_t)k, "],\"offset\":%zu,\"bytes\":%zu}", pg->toff(g, i),
                 pg->tsize(g, i));
        missing += strstr(json, want) == NULL;
    }
    T_CHECK(json && json[0] == '{' && missing == 0, "%s: info --json misses %d tensors", what, missing);
    free(json);

    /* llm-gguf dequant of every tensor, against ggml */
    int mismatched = 0, compared = 0;
    char out[600];
    snprintf(out, sizeof out, "%s/dequant.f32", dir);
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        float *ref = malloc(sizeof(float) * (size_t)nel);
        if (t->type == INFER_TYPE_F32)
            memcpy(ref, t->data, sizeof(float) * (size_t)nel);
        else if (pe->dequantize_row[t->type])
            pe->dequantize_row[t->type](t->data, ref, nel);
        else {
            T_CHECK(0, "%s: no ggml decoder for %s", what, quant_type(t->type)->name);
            free(ref);
            continue;
        }
        snprintf(cmd, sizeof cmd, "%s dequant '%s' '%s' '%s'", tool, path, t->name, out);
        size_t got = 0;
        float *ours = NULL;
        if (system(cmd) == 0) {
            FILE *fp = fopen(out, "rb");
            ours = malloc(sizeof(float) * (size_t)nel + 4);
            if (fp) got = fread(ours, sizeof(float), (size_t)nel + 1, fp), fclose(fp);
        }
        compared++;
        if (got != (size_t)nel || memcmp(ours, ref, sizeof(float) * (size_t)nel) != 0) {
            if (mismatched++ < 3) printf("  %s: %s (%s) differs\n", what, t->name, quant_type(t->type)->name);
        }
        free(ours);
        free(ref);
    }
    int count[INFER_TYPE_COUNT] = {0};
    for (int64_t i = 0; i < f->n_tensors; i++)
        count[f->tensors[i].type]++;
    printf("%s: %lld tensors compared:", what, (long long)f->n_tensors);
    for (int k = 0; k < INFER_TYPE_COUNT; k++)
        if (count[k]) printf(" %s x%d", quant_type(k)->name, count[k]);
    printf("\n");
    T_CHECK(compared == f->n_tensors && mismatched == 0, "%s: dequant of %d of %d tensors differs from ggml",
            what, mismatched, compared);
    pg->free_(g);
    gguf_close(f);
}

static void check_our_quantize(const struct llama_peer *pe, const char *f32, const struct synth_params *sp,
                               const char *ftype, int32_t ftype_id) {
    char ours[300], theirs[300], cmd[1000];
    snprintf(ours, sizeof ours, "%s/ours-%s.gguf", dir, ftype);
    snprintf(theirs, sizeof theirs, "%s/theirs-%s.gguf", dir, ftype);
    snprintf(cmd, sizeof cmd, "%s quantize '%s' '%s' %s", tool, f32, ours, ftype);
    T_CHECK(system(cmd) == 0, "llm-gguf quantize %s", ftype);
    T_CHECK(llama_peer_quantize(pe, f32, theirs, ftype_id) == 0, "llama.cpp quantize %s", ftype);
    struct gguf_file *a = NULL, *b = NULL;
    if (gguf_open(ours, &a) == INFER_OK && gguf_open(theirs, &b) == INFER_OK &&
        a->n_tensors == b->n_tensors) {
        int types = 0, bytes = 0;
        for (int64_t i = 0; i < a->n_tensors; i++) {
            const struct gguf_tensor *x = &a->tensors[i], *y = gguf_find_tensor(b, x->name);
            if (!y || x->type != y->type) {
                if (types++ < 3)
                    printf("  %s: %s is %s here, %s in llama.cpp's\n", ftype, x->name,
                           quant_type(x->type)->name, y ? quant_type(y->type)->name : "absent");
            } else if (x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes) != 0) {
                if (bytes++ < 3)
                    printf("  %s: %s (%s) bytes differ\n", ftype, x->name, quant_type(x->type)->name);
            }
        }
        T_CHECK(types == 0 && bytes == 0,
                "llm-gguf quantize %s: %d tensor types and %d tensor contents differ from llama.cpp", ftype,
                types, bytes);
    } else {
        T_CHECK(0, "%s: cannot compare the two quantised files: %s", ftype, infer_last_error());
    }
    gguf_close(a);
    gguf_close(b);
    const char *why = NULL;
    const struct llama_peer_expect want = {sp->n_embd,    sp->n_layer, sp->n_head,
                                           sp->n_head_kv, sp->n_vocab, sp->mtp};
    void *model = llama_peer_model_load(pe, ours, sp->mtp, &want, &why);
    T_CHECK(model != NULL, "llama.cpp loads our %s file: %s", ftype, why);
    if (!model) return;
    void *ctx = llama_peer_context(pe, model, 64, LLAMA_PEER_CTX_DEFAULT, NULL);
    int32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float logits[1024];
    const int32_t n_vocab = pe->vocab_n_tokens(pe->model_get_vocab(model));
    const int ok = ctx && n_vocab <= 1024 && llama_peer_eval(pe, ctx, tokens, 8, logits, n_vocab) == 0;
    T_CHECK(ok && isfinite(logits[0]) && isfinite(logits[n_vocab - 1]), "llama.cpp decodes our %s file",
            ftype);
    if (ctx) pe->ctx_free(ctx);
    pe->model_free(model);
}

int main(void) {
    struct llama_peer pe;
    struct peer_gguf pg;
    const char *why = NULL;
    const int ready = llama_peer_load(&pe, &why);
    if (ready <= 0) {
        if (ready == 0)
            T_SKIP_PEER("llama.cpp peer: %s", why);
        else
            T_CHECK(0, "llama.cpp peer: %s", why);
        return t_done();
    }
    if (!bind_gguf(&pg)) {
        T_CHECK(0, "the peer lacks the gguf API");
        return t_done();
    }
    const char *b = getenv("INFER_BUILD_DIR");
    snprintf(tool, sizeof tool, "%s/llm-gguf", b ? b : "build");
    if (access(tool, X_OK) != 0) {
        T_CHECK(0, "%s not built", tool);
        return t_done();
    }
    if (!mkdtemp(dir)) return 1;
    /* a dense model, and a hybrid MoE one with MTP: 3-D expert tensors, SSM tensors whose short rows
     * make llama.cpp fall back to Q5_0/Q5_1/Q8_0, and the nextn layer */
    static const struct {
        const char *arch;
        int mtp, odd; /* odd: rows of 96 and 160 values, which fall back from K-quants to Q5_0/Q8_0 */
    } sources[] = {{"qwen3", 0, 0}, {"qwen35moe", 1, 0}, {"qwen3", 0, 1}};
    for (size_t s = 0; s < sizeof sources / sizeof *sources; s++) {
        struct synth_params sp;
        synth_params_default(sources[s].arch, &sp);
        sp.ftype = "F32", sp.mtp = sources[s].mtp, sp.seed = 3;
        if (!sp.mtp) sp.n_layer = 4;
        if (sources[s].odd) sp.n_embd = 96, sp.n_head = 3, sp.n_head_kv = 1, sp.head_dim = 32, sp.n_ff = 160;
        char f32[300], what[64], cmd[1200];
        snprintf(f32, sizeof f32, "%s/f32.gguf", dir);
        /* written through the command line, so its flags reach synth_params as they should */
        snprintf(cmd, sizeof cmd, "%s synth --arch %s --type F32 --seed 3 --n-layer %d %s %s -o '%s'", tool,
                 sp.arch, (int)sp.n_layer, sp.mtp ? "--mtp" : "",
                 sources[s].odd ? "--n-embd 96 --n-head 3 --n-head-kv 1 --head-dim 32 --n-ff 160" : "", f32);
        T_CHECK(system(cmd) == 0, "%s", cmd);
        static const struct {
            const char *name;
            int32_t id;
        } ftypes[] = {{"Q4_K_M", 15}, {"Q8_0", 7}, {"Q6_K", 18}, {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"F16", 1},
                      {"BF16", 32},   {"Q4_0", 2}, {"Q4_1", 3},  {"Q5_0", 8},    {"Q5_1", 9},    {"Q2_K", 10},
                      {"Q3_K_M", 12}, {"MXFP4_MOE", 38}};
        /* t_quick: every type on the first source, Q4_K_M (and its fallbacks) on the others */
        const int all_types = !t_quick() || s == 0;
        for (size_t i = 0; i < sizeof ftypes / sizeof *ftypes; i++) {
            if (!all_types && ftypes[i].id != 15) continue;
            char path[300];
            snprintf(path, sizeof path, "%s/llama-%s.gguf", dir, ftypes[i].name);
            snprintf(what, sizeof what, "%s %s by llama.cpp", sources[s].arch, ftypes[i].name);
            uint32_t rc = llama_peer_quantize(&pe, f32, path, ftypes[i].id);
            T_CHECK(rc == 0, "llama.cpp quantizes %s", what);
            if (rc == 0) check_file(&pe, &pg, path, what);
        }
        snprintf(what, sizeof what, "%s F32 by synth", sources[s].arch);
        check_file(&pe, &pg, f32, what);
        if (all_types) check_our_quantize(&pe, f32, &sp, "Q8_0", 7);
        check_our_quantize(&pe, f32, &sp, "Q4_K_M", 15);
        if (all_types) check_our_quantize(&pe, f32, &sp, "Q6_K", 18);
        if (all_types) check_our_quantize(&pe, f32, &sp, "F16", 1);
        /* the legacy and low-bit K types: the files test-llama-logits compares logits on are llama.cpp's bytes */
        static const struct {
            const char *name;
            int32_t id;
        } legacy[] = {{"Q4_0", 2},     {"Q4_1", 3},       {"Q5_0", 8},      {"Q5_1", 9},     {"Q2_K", 10},
                      {"Q3_K_M", 12}, {"MXFP4_MOE", 38}, {"IQ4_NL", 25}, {"IQ4_XS", 30}};
        for (size_t i = 0; all_types && i < sizeof legacy / sizeof *legacy; i++)
            check_our_quantize(&pe, f32, &sp, legacy[i].name, legacy[i].id);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return t_done();
}
