/* tokenizer: byte-level BPE and SPM tokenisation from GGUF metadata, bit-identical to llama.cpp.
 *
 * Why this design: llama.cpp is the reference, so every step follows its observable behaviour
 * (docs/tokenizer.md), but the implementation is ours: the pre-tokenizer regexes are hand-written
 * scanners over code points (no regex engine), vocabulary and merge lookups are open-addressing
 * hash tables over byte strings, and both merge loops share one binary heap.
 *
 * Layout: token table + hash maps and loading; special-token partition; SPM; BPE pre-tokenizers;
 * BPE merges; encode; pieces, detokenisation and streaming.
 */
#include "tokenizer.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

enum pre_kind { PRE_GPT2 = 1, PRE_LLAMA3, PRE_QWEN2, PRE_QWEN35 };

struct token {
    const char *text; /* in t->arena, NUL-terminated */
    uint32_t len;
    uint32_t attr;
    float score;
};

struct merge {
    const char *text; /* left and right concatenated, in t->arena */
    uint32_t len, left_len;
    int32_t rank;
};

struct tokenizer {
    enum tokenizer_kind kind;
    enum pre_kind pre;
    int32_t n_vocab;
    struct token *tokens;     /* (n_vocab) */
    uint32_t *vocab_slots;    /* (vocab_cap) id+1, 0 = empty */
    uint32_t vocab_cap;       /* power of two */
    struct merge *merges;     /* (n_merges) */
    uint32_t *merge_slots;    /* (merge_cap) index+1 */
    uint32_t merge_cap;
    int32_t n_merges;
    int32_t *specials;        /* (n_specials) control/user-defined/unknown ids, longest text first */
    int32_t n_specials;
    char **pieces;            /* (n_vocab) token_to_piece(id, special) */
    uint32_t *piece_len;      /* (n_vocab) */
    int32_t byte_token[256];  /* SPM byte fallback ids, -1 if absent */
    char byte_enc[256][3];    /* GPT-2 byte -> UTF-8 of its code point */
    uint8_t byte_enc_len[256];
    int32_t bos, eos, unk;
    int add_bos, add_eos, add_space_prefix, clean_spaces, ignore_merges;
    uint8_t *eog;             /* (n_vocab) */
    char *arena;              /* token and merge texts */
};

/* ---- hashing ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix so low bits are usable */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

static uint32_t table_cap(int64_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* The id of the token whose text is s[0..n), or -1. */
static int32_t vocab_find(const struct tokenizer *t, const char *s, size_t n) {
    uint32_t mask = t->vocab_cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->vocab_slots[i];
        if (!v) return -1;
        const struct token *tk = &t->tokens[v - 1];
        if (tk->len == n && memcmp(tk->text, s, n) == 0) return (int32_t)(v - 1);
    }
}

/* Later duplicates replace earlier ones, as llama.cpp's token_to_id[text] = id does. */
static void vocab_insert(struct tokenizer *t, int32_t id) {
    const struct token *tk = &t->tokens[id];
    uint32_t mask = t->vocab_cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(tk->text, tk->len) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->vocab_slots[i];
        if (v && (t->tokens[v - 1].len != tk->len || memcmp(t->tokens[v - 1].text, tk->text, tk->len))) continue;
        t->vocab_slots[i] = (uint32_t)id + 1;
        return;
    }
}

/* Rank of merging left s[0..left_len) with right s[left_len..n), or -1. */
static int32_t merge_find(const struct tokenizer *t, const char *s, size_t n, size_t left_len) {
    if (!t->n_merges) return -1;
    uint32_t mask = t->merge_cap - 1;
    for (uint32_t i = (uint32_t)(hash_bytes(s, n) + left_len * 0x9e3779b9u) & mask;; i = (i + 1) & mask) {
        uint32_t v = t->merge_slots[i];
        if (!v) return -1;
        const struct merge *m = &t->merges[v - 1];
        if (m->len == n && m->left_len == left_len && memcmp(m->text, s, n) == 0) return m->rank;
    }
}

/* ---- loading ---- */

/* A linear scan: a few dozen lookups per load, and it keeps this module free of gguf.c. */
static const struct gguf_value *meta(const struct gguf_file *f, const char *key) {
    for (int64_t i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key) == 0) return &f->kv[i].val;
    return NULL;
}

static infer_status meta_bool(const struct gguf_file *f, const char *key, int *out) {
    const struct gguf_value *v = meta(f, key);
    if (!v) return INFER_OK;
    if (v->type != GGUF_BOOL) return infer_fail(INFER_E_FORMAT, "%s: %s: expected a bool", f->path, key);
    *out = v->v.u != 0;
    return INFER_OK;
}

/* Special ids are u32 (any integer type is tolerated); out-of-range ids keep the default. */
static infer_status meta_id(const struct tokenizer *t, const struct gguf_file *f, const char *key, int32_t *out) {
    const struct gguf_value *v = meta(f, key);
    if (!v) return INFER_OK;
    int64_t id;
    if (v->type == GGUF_U8 || v->type == GGUF_U16 || v->type == GGUF_U32 || v->type == GGUF_U64) id = (int64_t)v->v.u;
    else if (v->type == GGUF_I8 || v->type == GGUF_I16 || v->type == GGUF_I32 || v->type == GGUF_I64) id = v->v.i;
    else return infer_fail(INFER_E_FORMAT, "%s: %s: expected an integer token id", f->path, key);
    if (id >= 0 && id < t->n_vocab) *out = (int32_t)id;
    else infer_log(INFER_LOG_WARN, "%s: %s = %lld is not a token id, ignored", f->path, key, (long long)id);
    return INFER_OK;
}

static const struct gguf_value *meta_arr(const struct gguf_file *f, const char *key, infer_status *st) {
    const struct gguf_value *v = meta(f, key);
    *st = INFER_OK;
    if (v && v->type != GGUF_ARR) {
        *st = infer_fail(INFER_E_FORMAT, "%s: %s: expected an array", f->path, key);
        return NULL;
    }
    return v;
}

static int text_in(const char *s, const char *const *list) {
    for (; *list; list++)
        if (strcmp(s, *list) == 0) return 1;
    return 0;
}

/* Texts llama.cpp forces to CONTROL: end-of-generation markers always; FIM markers when their id key
 * is absent (then the vocabulary is searched for them). */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "[e~[", NULL};
static const char *const fim_texts[][9] = {
    {"tokenizer.ggml.fim_pre_token_id", "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
     "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"},
    {"tokenizer.ggml.fim_suf_token_id", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
     "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"},
    {"tokenizer.ggml.fim_mid_token_id", "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
     "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"},
    {"tokenizer.ggml.fim_pad_token_id", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
    {"tokenizer.ggml.fim_rep_token_id", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
    {"tokenizer.ggml.fim_sep_token_id", "<|file_sep|>", NULL},
    {"tokenizer.ggml.eom_token_id", "<|eom_id|>", NULL},
};

static int special_cmp_len_desc(const void *a, const void *b, void *u) {
    const struct tokenizer *t = u;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tokens[x].len != t->tokens[y].len) return t->tokens[x].len > t->tokens[y].len ? -1 : 1;
    return x < y ? -1 : x > y;
}

static infer_status build_pieces(struct tokenizer *t);

static infer_status load_merges(struct tokenizer *t, const struct gguf_value *mv, char **arena_pos) {
    const struct gguf_str *m = mv->v.arr;
    t->merges = xcalloc(mv->n ? mv->n : 1, sizeof *t->merges);
    t->merge_cap = table_cap((int64_t)mv->n);
    t->merge_slots = xcalloc(t->merge_cap, sizeof *t->merge_slots);
    if (!t->merges || !t->merge_slots) return INFER_OOM("tokenizer merges");
    for (uint64_t r = 0; r < mv->n; r++) {
        const char *sp = m[r].len > 1 ? memchr(m[r].s + 1, ' ', m[r].len - 1) : NULL;
        if (!sp) continue; /* no "left right" split: can never match a symbol pair */
        struct merge *e = &t->merges[t->n_merges];
        e->left_len = (uint32_t)(sp - m[r].s);
        e->len = (uint32_t)m[r].len - 1;
        e->rank = (int32_t)r;
        char *p = *arena_pos;
        memcpy(p, m[r].s, e->left_len);
        memcpy(p + e->left_len, sp + 1, e->len - e->left_len);
        e->text = p;
        *arena_pos += e->len;
        uint32_t mask = t->merge_cap - 1, i = (uint32_t)(hash_bytes(p, e->len) + e->left_len * 0x9e3779b9u) & mask;
        int dup = 0;
        for (;; i = (i + 1) & mask) {
            uint32_t v = t->merge_slots[i];
            if (!v) break;
            const struct merge *o = &t->merges[v - 1];
            if (o->len == e->len && o->left_len == e->left_len && memcmp(o->text, p, e->len) == 0) {
                dup = 1; /* the first rank wins */
                break;
            }
        }
        if (dup) continue;
        t->merge_slots[i] = (uint32_t)t->n_merges + 1;
        t->n_merges++;
    }
    return INFER_OK;
}

infer_status tokenizer_load(const struct gguf_file *f, struct tokenizer **out) {
    infer_status st = INFER_OK;
    struct tokenizer *t = NULL;
    *out = NULL;
    const char *path = f->path ? f->path : "(gguf)";
    const struct gguf_value *mv = meta(f, "tokenizer.ggml.model");
    if (!mv || mv->type != GGUF_STR)
        return infer_fail(INFER_E_FORMAT, "%s: tokenizer.ggml.model: expected a string", path);
    const char *model = mv->v.str.s;
    const struct gguf_value *tv, *sv, *yv, *gv = NULL;
    if (!(tv = meta_arr(f, "tokenizer.ggml.tokens", &st)) || tv->elem_type != GGUF_STR) {
        return st ? st : infer_fail(INFER_E_FORMAT, "%s: tokenizer.ggml.tokens: expected an array of strings", path);
    }
    sv = meta_arr(f, "tokenizer.ggml.scores", &st);
    if (st) return st;
    yv = meta_arr(f, "tokenizer.ggml.token_type", &st);
    if (st) return st;
    if (tv->n == 0 || tv->n > (1u << 24))
        return infer_fail(INFER_E_FORMAT, "%s: tokenizer.ggml.tokens: %llu tokens, expected 1..16777216", path,
                          (unsigned long long)tv->n);
    int32_t n = (int32_t)tv->n;
    if (sv && (sv->n < tv->n || (sv->elem_type != GGUF_F32 && sv->elem_type != GGUF_I32)))
        return infer_fail(INFER_E_FORMAT, "%s: tokenizer.ggml.scores: expected >= %d f32 or i32 values", path, n);
    if (yv && (yv->n < tv->n || yv->elem_type != GGUF_I32))
        return infer_fail(INFER_E_FORMAT, "%s: tokenizer.ggml.token_type: expected >= %d i32 values", path, n);

    t = xcalloc(1, sizeof *t);
    if (!t) return INFER_OOM("tokenizer");
    t->n_vocab = n;
    t->bos = t->eos = t->unk = -1;
    if (strcmp(model, "llama") == 0) {
        t->kind = TOKENIZER_SPM;
        t->bos = n > 1 ? 1 : -1;
        t->eos = n > 2 ? 2 : -1;
        t->unk = 0;
        t->add_bos = 1;
        t->add_space_prefix = 1;
    } else if (strcmp(model, "gpt2") == 0) {
        t->kind = TOKENIZER_BPE;
        t->bos = t->eos = n > 11 ? 11 : -1;
        t->clean_spaces = 1;
        const struct gguf_value *pv = meta(f, "tokenizer.ggml.pre");
        const char *pre = pv && pv->type == GGUF_STR ? pv->v.str.s : "default";
        static const char *const gpt2[] = {"gpt-2", "phi-2", NULL};
        static const char *const llama3[] = {"llama3", "llama-v3", "llama-bpe", NULL};
        static const char *const qwen2[] = {"qwen2", "deepseek-r1-qwen", NULL};
        if (text_in(pre, gpt2)) {
            t->pre = PRE_GPT2;
        } else if (text_in(pre, llama3)) {
            t->pre = PRE_LLAMA3;
            t->ignore_merges = t->add_bos = 1;
        } else if (text_in(pre, qwen2)) {
            t->pre = PRE_QWEN2;
            t->clean_spaces = 0;
        } else if (strcmp(pre, "qwen35") == 0) {
            t->pre = PRE_QWEN35;
            t->clean_spaces = 0;
        } else {
            st = infer_fail(INFER_E_UNSUPPORTED,
                            "%s: tokenizer.ggml.pre: '%s' is not supported (gpt-2, llama-bpe, qwen2, qwen35)", path, pre);
            goto fail;
        }
        if (!(gv = meta_arr(f, "tokenizer.ggml.merges", &st)) || gv->elem_type != GGUF_STR) {
            if (!st) st = infer_fail(INFER_E_FORMAT, "%s: tokenizer.ggml.merges: expected an array of strings", path);
            goto fail;
        }
    } else {
        st = infer_fail(INFER_E_UNSUPPORTED, "%s: tokenizer.ggml.model: '%s' is not supported (llama, gpt2)", path, model);
        goto fail;
    }

    /* token texts and merges live in one arena */
    const struct gguf_str *words = tv->v.arr;
    size_t bytes = 0;
    for (int32_t i = 0; i < n; i++) bytes += (words[i].len ? words[i].len : 24) + 1;
    if (gv)
        for (uint64_t i = 0; i < gv->n; i++) bytes += ((const struct gguf_str *)gv->v.arr)[i].len;
    t->arena = xmalloc(bytes + 1);
    t->tokens = xcalloc((size_t)n, sizeof *t->tokens);
    t->vocab_cap = table_cap(n);
    t->vocab_slots = xcalloc(t->vocab_cap, sizeof *t->vocab_slots);
    t->eog = xcalloc((size_t)n, 1);
    if (!t->arena || !t->tokens || !t->vocab_slots || !t->eog) {
        st = INFER_OOM("tokenizer vocabulary");
        goto fail;
    }
    char *p = t->arena;
    for (int32_t i = 0; i < n; i++) {
        struct token *tk = &t->tokens[i];
        tk->text = p;
        if (words[i].len) {
            memcpy(p, words[i].s, words[i].len);
            tk->len = (uint32_t)words[i].len;
        } else {
            tk->len = (uint32_t)sprintf(p, "[EMPTY_%d]", (int)i); /* llama.cpp's name for an empty token */
        }
        p[tk->len] = 0;
        p += tk->len + 1;
        if (sv) tk->score = sv->elem_type == GGUF_F32 ? ((const float *)sv->v.arr)[i] : (float)((const int32_t *)sv->v.arr)[i];
        tk->attr = TOKEN_ATTR_NORMAL;
        if (yv) {
            static const uint32_t attr_of_type[7] = {0, TOKEN_ATTR_NORMAL, TOKEN_ATTR_UNKNOWN, TOKEN_ATTR_CONTROL,
                                                     TOKEN_ATTR_USER_DEFINED, TOKEN_ATTR_UNUSED, TOKEN_ATTR_BYTE};
            int32_t ty = ((const int32_t *)yv->v.arr)[i];
            tk->attr = ty >= 0 && ty < 7 ? attr_of_type[ty] : 0;
        }
        vocab_insert(t, i);
    }
    if (gv) TRY(load_merges(t, gv, &p));

    TRY(meta_id(t, f, "tokenizer.ggml.bos_token_id", &t->bos));
    TRY(meta_id(t, f, "tokenizer.ggml.eos_token_id", &t->eos));
    TRY(meta_id(t, f, "tokenizer.ggml.unknown_token_id", &t->unk));
    TRY(meta_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos));
    TRY(meta_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos));
    TRY(meta_bool(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix));

    /* attributes llama.cpp derives from the texts (docs/tokenizer.md §2) */
    for (int32_t i = 0; i < n; i++) {
        struct token *tk = &t->tokens[i];
        if (text_in(tk->text, eog_texts)) {
            tk->attr |= TOKEN_ATTR_CONTROL;
            t->eog[i] = 1;
        }
    }
    for (size_t k = 0; k < sizeof fim_texts / sizeof fim_texts[0]; k++) {
        int32_t key_id = -1;
        TRY(meta_id(t, f, fim_texts[k][0], &key_id));
        if (meta(f, fim_texts[k][0])) {
            if (key_id >= 0 && k >= 3) t->eog[key_id] = 1; /* fim pad/rep/sep and eom end generation */
            continue;
        }
        for (int j = 1; j < 9 && fim_texts[k][j]; j++) {
            int32_t id = vocab_find(t, fim_texts[k][j], strlen(fim_texts[k][j]));
            if (id < 0) continue;
            t->tokens[id].attr |= TOKEN_ATTR_CONTROL;
            if (k >= 3) t->eog[id] = 1;
            break;
        }
    }
    static const char *const harmony_user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (int32_t i = 0; i < n; i++) {
        struct token *tk = &t->tokens[i];
        if ((tk->attr & TOKEN_ATTR_CONTROL) && strstr(tk->text, "unused")) tk->attr |= TOKEN_ATTR_UNUSED;
        if (text_in(tk->text, harmony_user)) tk->attr = TOKEN_ATTR_USER_DEFINED;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    int32_t eot = -1;
    TRY(meta_id(t, f, "tokenizer.ggml.eot_token_id", &eot));
    if (eot >= 0) t->eog[eot] = 1;
    /* gpt-oss style vocabularies: <|end|> ends a message, not the generation */
    int32_t end = vocab_find(t, "<|end|>", 7), ret = vocab_find(t, "<|return|>", 10), flush = vocab_find(t, "<|flush|>", 9);
    int32_t call = vocab_find(t, "<|call|>", 8);
    if (call < 0) call = vocab_find(t, "<|calls|>", 9);
    if (end >= 0 && t->eog[end] && call >= 0 && t->eog[call] && ((ret >= 0 && t->eog[ret]) || (flush >= 0 && t->eog[flush]))) {
        t->eog[end] = 0;
        t->tokens[end].attr = TOKEN_ATTR_USER_DEFINED;
    }

    /* special tokens, longest first (ties by id: llama.cpp's order among equal lengths is unspecified) */
    t->specials = xmalloc((size_t)n * sizeof *t->specials);
    if (!t->specials) {
        st = INFER_OOM("tokenizer special tokens");
        goto fail;
    }
    for (int32_t i = 0; i < n; i++)
        if (t->tokens[i].attr & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED | TOKEN_ATTR_UNKNOWN))
            t->specials[t->n_specials++] = i;
    qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, special_cmp_len_desc, t);

    /* phi-3 files strip the whitespace after their special tokens (llama.cpp keys this on general.name) */
    const struct gguf_value *nv = meta(f, "general.name");
    if (nv && nv->type == GGUF_STR) {
        char name[256];
        size_t k = 0;
        for (; k + 1 < sizeof name && nv->v.str.s[k]; k++) name[k] = (char)tolower((unsigned char)nv->v.str.s[k]);
        name[k] = 0;
        if (strstr(name, "phi-3") || strstr(name, "phi3")) {
            for (int32_t i = 0; i < t->n_specials; i++) t->tokens[t->specials[i]].attr |= TOKEN_ATTR_RSTRIP;
            static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
            int32_t id = vocab_find(t, "</s>", 4);
            if (id >= 0) t->tokens[id].attr |= TOKEN_ATTR_RSTRIP;
            for (int j = 0; j < 3; j++)
                if ((id = vocab_find(t, keep[j], strlen(keep[j]))) >= 0) t->tokens[id].attr &= ~(uint32_t)TOKEN_ATTR_RSTRIP;
        }
    }

    for (int b = 0; b < 256; b++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->byte_token[b] = vocab_find(t, hex, 6);
        if (t->byte_token[b] < 0) {
            char one = (char)b;
            t->byte_token[b] = vocab_find(t, &one, 1);
        }
        t->byte_enc_len[b] = (uint8_t)unicode_utf8_encode(unicode_byte_to_cp((uint8_t)b), t->byte_enc[b]);
    }
    TRY(build_pieces(t));
    *out = t;
    return INFER_OK;
fail:
    tokenizer_free(t);
    return st;
}

void tokenizer_free(struct tokenizer *t) {
    if (!t) return;
    if (t->pieces) xfree(t->pieces[0]);
    xfree(t->pieces);
    xfree(t->piece_len);
    xfree(t->tokens);
    xfree(t->vocab_slots);
    xfree(t->merges);
    xfree(t->merge_slots);
    xfree(t->specials);
    xfree(t->eog);
    xfree(t->arena);
    xfree(t);
}

enum tokenizer_kind tokenizer_kind(const struct tokenizer *t) { return t->kind; }
int32_t tokenizer_n_vocab(const struct tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos(const struct tokenizer *t) { return t->bos; }
int32_t tokenizer_eos(const struct tokenizer *t) { return t->eos; }
int tokenizer_is_eog(const struct tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->eog[id]; }
uint32_t tokenizer_attr(const struct tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->tokens[id].attr : 0;
}
const char *tokenizer_text(const struct tokenizer *t, int32_t id, uint32_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->tokens[id].len;
    return t->tokens[id].text;
}

/* ---- growable buffers used while encoding ---- */

struct ids {
    int32_t *v;
    size_t n, cap;
};

static int ids_push(struct ids *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        int32_t *v = xrealloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

/* ---- the merge loop shared by SPM and BPE ---- */

struct symbol {
    const char *text;
    uint32_t n;
    int32_t prev, next;
};

struct bigram {
    double key; /* lower pops first: -score for SPM, rank for BPE */
    int32_t left, right;
    uint32_t size;
};

struct heap {
    struct bigram *v;
    size_t n, cap;
};

static int bigram_before(const struct bigram *a, const struct bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

static int heap_push(struct heap *h, struct bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct bigram *v = xrealloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && bigram_before(&b, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = b;
    return 0;
}

static struct bigram heap_pop(struct heap *h) {
    struct bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

struct session {
    const struct tokenizer *t;
    struct symbol *sym;
    size_t n_sym, cap_sym;
    struct heap heap;
    char *buf; /* the escaped (SPM) or byte-encoded (BPE) text of the current piece */
    size_t cap_buf;
    uint32_t *cps;
    size_t cap_cps;
    struct ids out;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = xrealloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Splits s->buf[0..len) into UTF-8 characters (lead-byte length, truncated at the end). */
static int symbols_init(struct session *s, const char *text, size_t len) {
    if (grow((void **)&s->sym, &s->cap_sym, len, sizeof *s->sym)) return -1;
    s->n_sym = 0;
    for (size_t off = 0; off < len;) {
        size_t n = (size_t)unicode_utf8_len((uint8_t)text[off]);
        if (n > len - off) n = len - off;
        struct symbol *y = &s->sym[s->n_sym];
        y->text = text + off;
        y->n = (uint32_t)n;
        y->prev = (int32_t)s->n_sym - 1;
        off += n;
        y->next = off == len ? -1 : (int32_t)s->n_sym + 1;
        s->n_sym++;
    }
    return 0;
}

static int try_bigram(struct session *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const struct symbol *l = &s->sym[left], *r = &s->sym[right];
    size_t size = l->n + r->n; /* adjacent symbols are contiguous in the text */
    struct bigram b = {0, left, right, (uint32_t)size};
    if (s->t->kind == TOKENIZER_SPM) {
        int32_t id = vocab_find(s->t, l->text, size);
        if (id < 0) return 0;
        b.key = -(double)s->t->tokens[id].score;
    } else {
        int32_t rank = merge_find(s->t, l->text, size, l->n);
        if (rank < 0) return 0;
        b.key = rank;
    }
    return heap_push(&s->heap, b);
}

/* Highest score (SPM) or lowest rank (BPE) first, ties to the left; stale entries are skipped. */
static int merge_all(struct session *s) {
    s->heap.n = 0;
    for (size_t i = 1; i < s->n_sym; i++)
        if (try_bigram(s, (int32_t)i - 1, (int32_t)i)) return -1;
    while (s->heap.n) {
        struct bigram b = heap_pop(&s->heap);
        struct symbol *l = &s->sym[b.left], *r = &s->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = b.left;
        if (try_bigram(s, l->prev, b.left) || try_bigram(s, b.left, l->next)) return -1;
    }
    return 0;
}

/* ---- SPM ---- */

static int spm_piece(struct session *s, const char *text, size_t len, int space_prefix) {
    const struct tokenizer *t = s->t;
    if (grow((void **)&s->buf, &s->cap_buf, 3 * len + 3, 1)) return -1;
    size_t n = 0;
    if (space_prefix) {
        memcpy(s->buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->buf + n, "\xe2\x96\x81", 3); /* U+2581 */
            n += 3;
        } else {
            s->buf[n++] = text[i];
        }
    }
    if (symbols_init(s, s->buf, n) || merge_all(s)) return -1;
    for (int32_t i = s->n_sym ? 0 : -1; i != -1; i = s->sym[i].next) {
        const struct symbol *y = &s->sym[i];
        int32_t id = vocab_find(t, y->text, y->n);
        if (id >= 0) {
            if (ids_push(&s->out, id)) return -1;
            continue;
        }
        for (uint32_t k = 0; k < y->n; k++) {
            /* llama.cpp throws when a byte has no token; we fall back to unk, else drop the byte */
            int32_t b = t->byte_token[(uint8_t)y->text[k]];
            if (b < 0) b = t->unk;
            if (b >= 0 && ids_push(&s->out, b)) return -1;
        }
    }
    return 0;
}

/* ---- BPE pre-tokenizers: hand-written forms of the regexes of docs/tokenizer.md §6 ----
 * They work on the code points cp[0..n) of one raw fragment and append word lengths (in code
 * points) to *words. Positions outside the fragment have no class and read as OUT. */

#define OUT 0xFFFFFFFFu

struct split {
    const uint32_t *cp;
    uint32_t *fl; /* (n) flags of cp */
    size_t n;
};

static uint32_t sp_cp(const struct split *x, size_t i) { return i < x->n ? x->cp[i] : OUT; }
static uint32_t sp_fl(const struct split *x, size_t i) { return i < x->n ? x->fl[i] : 0; }

static int is_contraction(const struct split *x, size_t pos, int fold, size_t *len) {
    if (x->cp[pos] != '\'' || pos + 1 >= x->n) return 0;
    uint32_t a = sp_cp(x, pos + 1);
    if (fold) a = unicode_tolower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        *len = 2;
        return 1;
    }
    if (pos + 2 >= x->n) return 0;
    uint32_t b = sp_cp(x, pos + 2);
    if (fold) b = unicode_tolower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        *len = 3;
        return 1;
    }
    return 0;
}

#define W UNICODE_WHITESPACE
#define L UNICODE_LETTER
#define N UNICODE_NUMBER
#define M UNICODE_MARK

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static size_t split_gpt2(const struct split *x, size_t pos) {
    size_t len;
    if (is_contraction(x, pos, 0, &len)) return pos + len;
    uint32_t cp = x->cp[pos], f2 = cp == ' ' ? sp_fl(x, pos + 1) : x->fl[pos];
    size_t p = pos + (cp == ' ');
    if (f2 & L) {
        while (sp_fl(x, p) & L) p++;
        return p;
    }
    if (f2 & N) {
        while (sp_fl(x, p) & N) p++;
        return p;
    }
    if (!(f2 & (W | L | N)) && f2) {
        for (uint32_t f; (f = sp_fl(x, p)) && !(f & (W | L | N));) p++;
        return p;
    }
    size_t k = 0;
    while (sp_fl(x, pos + k) & W) k++;
    if (k > 1 && pos + k < x->n) return pos + k - 1;
    if (k > 0) return pos + k;
    return pos + 1;
}

/* Llama 3 / Qwen2 / Qwen3.5:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with single digits for Qwen2, and for Qwen3.5 marks joining letters ([\p{L}\p{M}]+, no M in others).
 * Returns the end of the word that starts at pos. */
static size_t split_llama3(const struct split *x, size_t pos, enum pre_kind pre) {
    size_t len;
    if (is_contraction(x, pos, 1, &len)) return pos + len;
    uint32_t cp = x->cp[pos], fl = x->fl[pos];
    uint32_t word = pre == PRE_QWEN35 ? (L | M) : L;
    if (!(cp == '\r' || cp == '\n' || (fl & N)) && ((fl & word) || (sp_fl(x, pos + 1) & word))) {
        size_t p = pos + 1;
        while (sp_fl(x, p) & word) p++;
        return p;
    }
    if (fl & N) {
        size_t max = pre == PRE_LLAMA3 ? 3 : 1, p = pos;
        while (p - pos < max && (sp_fl(x, p) & N)) p++;
        return p;
    }
    uint32_t other_excl = W | N | word;
    uint32_t f2 = cp == ' ' ? sp_fl(x, pos + 1) : fl;
    if (!(f2 & other_excl) && fl) {
        size_t p = pos + (cp == ' ');
        for (uint32_t f; (f = sp_fl(x, p)) && !(f & other_excl);) p++;
        for (uint32_t c; (c = sp_cp(x, p)) == '\r' || c == '\n';) p++;
        return p;
    }
    size_t k = 0, last_nl = 0;
    while (sp_fl(x, pos + k) & W) {
        uint32_t c = x->cp[pos + k];
        if (c == '\r' || c == '\n') last_nl = pos + k + 1;
        k++;
    }
    if (last_nl) return last_nl;
    if (k > 1 && pos + k < x->n) return pos + k - 1;
    if (k > 0) return pos + k;
    return pos + 1;
}

#undef W
#undef L
#undef N
#undef M

/* ---- BPE ---- */

static int bpe_word(struct session *s, const uint32_t *cp, size_t n) {
    const struct tokenizer *t = s->t;
    /* the word's UTF-8, each byte replaced by the UTF-8 of its GPT-2 code point */
    if (grow((void **)&s->buf, &s->cap_buf, 8 * n, 1)) return -1;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        int k = unicode_utf8_encode(cp[i], u);
        for (int j = 0; j < k; j++) {
            uint8_t b = (uint8_t)u[j];
            memcpy(s->buf + len, t->byte_enc[b], t->byte_enc_len[b]);
            len += t->byte_enc_len[b];
        }
    }
    if (t->ignore_merges) {
        int32_t id = vocab_find(t, s->buf, len);
        if (id >= 0) return ids_push(&s->out, id);
    }
    if (symbols_init(s, s->buf, len) || merge_all(s)) return -1;
    for (size_t i = 0; i < s->n_sym; i++) {
        const struct symbol *y = &s->sym[i];
        if (!y->n) continue;
        int32_t id = vocab_find(t, y->text, y->n);
        if (id >= 0) {
            if (ids_push(&s->out, id)) return -1;
            continue;
        }
        for (uint32_t k = 0; k < y->n; k++) /* single bytes that are tokens; the rest is dropped */
            if ((id = vocab_find(t, y->text + k, 1)) >= 0 && ids_push(&s->out, id)) return -1;
    }
    return 0;
}

static int bpe_piece(struct session *s, const char *text, size_t len) {
    if (grow((void **)&s->cps, &s->cap_cps, 2 * len + 1, sizeof *s->cps)) return -1;
    uint32_t *cp = s->cps; /* (n) code points, then (n) their flags; n <= len */
    size_t n = 0;
    for (size_t i = 0; i < len;) cp[n++] = unicode_utf8_decode((const uint8_t *)text, len, &i);
    uint32_t *fl = s->cps + n;
    for (size_t i = 0; i < n; i++) fl[i] = unicode_flags(cp[i]);
    struct split x = {cp, fl, n};
    for (size_t pos = 0; pos < n;) {
        size_t end = s->t->pre == PRE_GPT2 ? split_gpt2(&x, pos) : split_llama3(&x, pos, s->t->pre);
        if (bpe_word(s, cp + pos, end - pos)) return -1;
        pos = end;
    }
    return 0;
}

/* ---- encode ---- */

struct frag {
    size_t off, len;
    int32_t id; /* -1 for raw text */
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static int frags_push(struct frags *a, size_t off, size_t len, int32_t id) {
    if (grow((void **)&a->v, &a->cap, a->n + 1, sizeof *a->v)) return -1;
    a->v[a->n++] = (struct frag){off, len, id};
    return 0;
}

static int is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Splits the text at special tokens, longest first, leftmost occurrences (docs/tokenizer.md §3). */
static int partition(const struct tokenizer *t, const char *text, size_t len, int parse_special, struct frags *cur,
                     struct frags *next) {
    cur->n = 0;
    if (len && frags_push(cur, 0, len, -1)) return -1;
    for (int32_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        const struct token *tk = &t->tokens[id];
        if (!parse_special && (tk->attr & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_UNKNOWN))) continue;
        next->n = 0;
        int found = 0;
        for (size_t f = 0; f < cur->n; f++) {
            struct frag fr = cur->v[f];
            if (fr.id >= 0 || fr.len < tk->len) {
                if (frags_push(next, fr.off, fr.len, fr.id)) return -1;
                continue;
            }
            size_t off = fr.off, end = fr.off + fr.len;
            for (;;) {
                const char *m = memmem(text + off, end - off, tk->text, tk->len);
                if (!m) break;
                found = 1;
                size_t at = (size_t)(m - text), left = at - off;
                if (tk->attr & TOKEN_ATTR_LSTRIP)
                    while (left > 0 && is_c_space(text[off + left - 1])) left--;
                if (left && frags_push(next, off, left, -1)) return -1;
                if (frags_push(next, at, tk->len, id)) return -1;
                off = at + tk->len;
                if (tk->attr & TOKEN_ATTR_RSTRIP)
                    while (off < end && is_c_space(text[off])) off++;
            }
            if (off < end && frags_push(next, off, end - off, -1)) return -1;
        }
        if (found) {
            struct frags tmp = *cur;
            *cur = *next;
            *next = tmp;
        }
    }
    return 0;
}

int32_t tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int add_special, int parse_special,
                         int32_t *out, int32_t cap) {
    if (len > (1u << 30) || (!text && len)) {
        infer_fail(INFER_E_ARG, "tokenizer_encode: text of %zu bytes at %p, expected at most 1 GiB", len, (const void *)text);
        return -1;
    }
    struct session s = {.t = t};
    struct frags cur = {0}, next = {0};
    int32_t result = -1;
    if (partition(t, text, len, parse_special, &cur, &next)) goto oom;
    if (add_special && t->add_bos && t->bos >= 0 && ids_push(&s.out, t->bos)) goto oom;
    int prev_special = 1;
    for (size_t f = 0; f < cur.n; f++) {
        const struct frag *fr = &cur.v[f];
        if (fr->id >= 0) {
            if (ids_push(&s.out, fr->id)) goto oom;
            prev_special = 1;
            continue;
        }
        int r = t->kind == TOKENIZER_SPM ? spm_piece(&s, text + fr->off, fr->len, t->add_space_prefix && prev_special)
                                         : bpe_piece(&s, text + fr->off, fr->len);
        if (r) goto oom;
        prev_special = 0;
    }
    if (add_special && t->add_eos && t->eos >= 0 && ids_push(&s.out, t->eos)) goto oom;
    if (s.out.n > INT32_MAX) {
        infer_fail(INFER_E_ARG, "tokenizer_encode: more than 2^31 tokens");
        goto done;
    }
    if (out && cap > 0 && s.out.n) memcpy(out, s.out.v, (s.out.n < (size_t)cap ? s.out.n : (size_t)cap) * sizeof *out);
    result = (int32_t)s.out.n;
    goto done;
oom:
    INFER_OOM("tokenizer_encode scratch");
done:
    xfree(s.sym);
    xfree(s.heap.v);
    xfree(s.buf);
    xfree(s.cps);
    xfree(s.out.v);
    xfree(cur.v);
    xfree(next.v);
    return result;
}

/* ---- pieces and detokenisation ---- */

/* Byte value of a "<0xXX>" token, as llama.cpp reads it (two hex digits at offset 3). */
static int byte_of_token(const struct token *tk) {
    int v = 0;
    for (uint32_t i = 3; i < 5 && i < tk->len; i++) {
        char c = tk->text[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) break;
        v = v * 16 + d;
    }
    return v;
}

/* Writes the piece of id (special rendering on) to dst (NULL: measure only); returns its length. */
static size_t piece_of(const struct tokenizer *t, int32_t id, char *dst) {
    const struct token *tk = &t->tokens[id];
    uint32_t a = tk->attr;
    if (a & (TOKEN_ATTR_UNKNOWN | TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED)) {
        if (dst) memcpy(dst, tk->text, tk->len);
        return tk->len;
    }
    if (a & TOKEN_ATTR_NORMAL) {
        size_t n = 0;
        if (t->kind == TOKENIZER_SPM) {
            for (uint32_t i = 0; i < tk->len; i++) {
                if (i + 2 < tk->len && memcmp(tk->text + i, "\xe2\x96\x81", 3) == 0) {
                    if (dst) dst[n] = ' ';
                    n++;
                    i += 2;
                } else {
                    if (dst) dst[n] = tk->text[i];
                    n++;
                }
            }
            return n;
        }
        for (size_t i = 0; i < tk->len;) {
            uint32_t cp = unicode_utf8_decode((const uint8_t *)tk->text, tk->len, &i);
            int b = unicode_cp_to_byte(cp);
            if (b >= 0) {
                if (dst) dst[n] = (char)b;
                n++;
                continue;
            }
            /* llama.cpp's marker for a code point outside the byte map */
            char u[4], tmp[32];
            int k = unicode_utf8_encode(cp, u);
            size_t m = (size_t)snprintf(tmp, sizeof tmp, "[UNK_BYTE_0x");
            for (int j = 0; j < k; j++) m += (size_t)snprintf(tmp + m, sizeof tmp - m, "%02x", (uint8_t)u[j]);
            if (dst) memcpy(dst + n, tmp, m);
            n += m;
            if (dst) memcpy(dst + n, tk->text, tk->len);
            n += tk->len;
            if (dst) dst[n] = ']';
            n++;
        }
        return n;
    }
    if (a & TOKEN_ATTR_BYTE) {
        if (dst) dst[0] = (char)byte_of_token(tk);
        return 1;
    }
    return 0;
}

static infer_status build_pieces(struct tokenizer *t) {
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += piece_of(t, i, NULL);
    t->pieces = xcalloc((size_t)t->n_vocab, sizeof *t->pieces);
    t->piece_len = xcalloc((size_t)t->n_vocab, sizeof *t->piece_len);
    char *arena = xmalloc(total + 1);
    if (!t->pieces || !t->piece_len || !arena) {
        xfree(arena);
        return INFER_OOM("tokenizer pieces");
    }
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->pieces[i] = arena;
        t->piece_len[i] = (uint32_t)piece_of(t, i, arena);
        arena += t->piece_len[i];
    }
    return INFER_OK;
}

/* Borrowed piece of id with llama.cpp's rules for special and lstrip; NULL for an invalid id. */
static const char *piece_get(const struct tokenizer *t, int32_t id, int32_t lstrip, int special, uint32_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = 0;
    if (!special && (t->tokens[id].attr & (TOKEN_ATTR_UNKNOWN | TOKEN_ATTR_CONTROL))) return "";
    const char *p = t->pieces[id];
    uint32_t n = t->piece_len[id];
    for (int32_t i = 0; i < lstrip && n && *p == ' '; i++) p++, n--;
    *len = n;
    return p;
}

int32_t tokenizer_token_to_piece(const struct tokenizer *t, int32_t id, char *buf, int32_t cap, int32_t lstrip,
                                 int special) {
    uint32_t n;
    const char *p = piece_get(t, id, lstrip, special, &n);
    if (!p) {
        infer_fail(INFER_E_ARG, "tokenizer_token_to_piece: token id %d, expected 0..%d", (int)id, (int)t->n_vocab - 1);
        return -1;
    }
    if (buf && cap > 0) memcpy(buf, p, n < (uint32_t)cap ? n : (uint32_t)cap);
    return (int32_t)n;
}

/* llama.cpp's clean-up of spaces before punctuation and in contractions, three in-place passes. */
static size_t clean_spaces(char *s, size_t n) {
    size_t total = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) { /* " ?", " !", " .", " ," lose the space */
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
        s[total++] = x;
    }
    n = total;
    total = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) { /* " ' " -> "'" */
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            total--;
            s[++i] = 0;
        }
        s[total++] = x;
    }
    n = total;
    total = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) { /* " 's", " 'm", " 're", " 've" lose the space */
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
            if (a == 's' || a == 'm') total--;
            else if (a != 't' && a != 'd' && i + 2 < n && ((a == 'r' && b == 'e') || (a == 'v' && b == 'e'))) total--;
        }
        s[total++] = x;
    }
    return total;
}

int32_t tokenizer_detokenize(const struct tokenizer *t, const int32_t *ids, int32_t n_ids, char *buf, int32_t cap,
                             int remove_special, int unparse_special) {
    int32_t remove_space = t->add_space_prefix;
    if (remove_special && t->add_bos && n_ids > 0 && ids[0] == t->bos) {
        remove_space = 0;
        ids++;
        n_ids--;
    }
    if (remove_special && t->add_eos && n_ids > 0 && ids[n_ids - 1] == t->eos) n_ids--;
    size_t total = 0;
    for (int32_t i = 0; i < n_ids; i++) {
        uint32_t n;
        if (!piece_get(t, ids[i], i == 0 ? remove_space : 0, unparse_special, &n)) {
            infer_fail(INFER_E_ARG, "tokenizer_detokenize: token %d is %d, expected 0..%d", (int)i, (int)ids[i],
                       (int)t->n_vocab - 1);
            return -1;
        }
        total += n;
    }
    if (total > INT32_MAX) {
        infer_fail(INFER_E_ARG, "tokenizer_detokenize: text over 2 GiB");
        return -1;
    }
    char *s = xmalloc(total + 1);
    if (!s) {
        INFER_OOM("tokenizer_detokenize text");
        return -1;
    }
    size_t n = 0;
    for (int32_t i = 0; i < n_ids; i++) {
        uint32_t k;
        const char *p = piece_get(t, ids[i], i == 0 ? remove_space : 0, unparse_special, &k);
        memcpy(s + n, p, k);
        n += k;
    }
    if (t->kind == TOKENIZER_BPE && t->clean_spaces) n = clean_spaces(s, n);
    if (buf && cap > 0) memcpy(buf, s, n < (size_t)cap ? n : (size_t)cap);
    xfree(s);
    return (int32_t)n;
}

/* Bytes at the end of s[0..n) that start a UTF-8 sequence still missing continuation bytes. */
static int32_t utf8_incomplete_tail(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t b = (uint8_t)s[n - back];
        if ((b & 0xC0) == 0x80) continue; /* continuation: look further back */
        int need = b >= 0xF0 && b < 0xF8 ? 4 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xC0 && b < 0xE0 ? 2 : 1;
        return need > (int)back ? (int32_t)back : 0;
    }
    return 0;
}

int32_t tokenizer_stream_put(const struct tokenizer *t, infer_token_stream *s, int32_t id, int special, char *buf,
                             int32_t cap) {
    uint32_t n;
    const char *p = piece_get(t, id, 0, special, &n);
    if (!p) {
        infer_fail(INFER_E_ARG, "tokenizer_stream_put: token id %d, expected 0..%d", (int)id, (int)t->n_vocab - 1);
        return -1;
    }
    /* the held bytes plus this piece; only the last 3 bytes can be an unfinished sequence */
    char tail[8];
    size_t all = (size_t)s->n_pending + n, nt = all < 7 ? all : 7;
    for (size_t i = 0; i < nt; i++) {
        size_t at = all - nt + i;
        tail[i] = at < (size_t)s->n_pending ? s->pending[at] : p[at - (size_t)s->n_pending];
    }
    int32_t hold = utf8_incomplete_tail(tail, nt);
    int32_t emit = (int32_t)(all - (size_t)hold);
    if (emit > cap || (emit > 0 && !buf)) return emit;
    char keep[4];
    memcpy(keep, tail + nt - (size_t)hold, (size_t)hold);
    for (int32_t i = 0; i < emit; i++) buf[i] = i < s->n_pending ? s->pending[i] : p[i - s->n_pending];
    memcpy(s->pending, keep, (size_t)hold);
    s->n_pending = hold;
    return emit;
}

int32_t tokenizer_stream_flush(infer_token_stream *s, char *buf, int32_t cap) {
    int32_t n = s->n_pending;
    if (n > cap || (n > 0 && !buf)) return n;
    if (n) memcpy(buf, s->pending, (size_t)n);
    s->n_pending = 0;
    return n;
}
