/* test-tools: llm-gguf as a user runs it: usage errors exit 2 with one line naming the problem,
 * failures exit 1 with the library's message, and the outputs have the promised form (a table line
 * per tensor, 4 bytes per element from dequant equal to the F32 data itself, valid JSON with arrays
 * over 16 elements summarised, even for hostile strings and NaN/Inf values, checked by a strict
 * RFC 8259 validator below). tokenize / detokenize on llama.cpp's vocabularies (vocabulary-only GGUFs)
 * give llama_tokenize's ids and llama_detokenize's text (the peer; SKIP without it) and our library's,
 * and round-trip. llm-run and llm-bench: -ngl is parsed, passed on, and refused in one line where it
 * cannot run; an error line says each clause once. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/ftype.h"
#include "conformance/llama_peer.h"
#include "gguf.h"
#include "quant.h"
#include "t.h"
#include "tokenizer.h"

static char tool[512], dir[] = "/tmp/test-tools-XXXXXX";

/* Runs "tool args" capturing stdout, and stderr too when merge (else it is dropped); out is NUL-terminated,
 * *len (if not NULL) its bytes. Returns the exit status. */
static int run_io(const char *args, char *out, size_t cap, int merge, size_t *len) {
    char cmd[12288]; /* detokenize takes the ids as arguments */
    snprintf(cmd, sizeof cmd, "%s %s %s", tool, args, merge ? "2>&1" : "2>/dev/null");
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    if (len) *len = n;
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs "tool args" capturing stdout+stderr; returns the exit status. */
static int run(const char *args, char *out, size_t cap) { return run_io(args, out, cap, 1, NULL); }

/* An error as the tools promise it: one line, no clause (the parts between ": ") twice, not ending in ':'. */
static int one_clean_line(const char *out) {
    const size_t n = strlen(out);
    if (n < 2 || out[n - 1] != '\n' || strchr(out, '\n') != out + n - 1) return 0;
    if (out[n - 2] == ':' || out[n - 2] == ' ') return 0;
    char line[4096], *part[64];
    int k = 0;
    snprintf(line, sizeof line, "%.*s", (int)(n - 1), out);
    for (char *c = line; k < 64;) {
        part[k++] = c;
        char *sep = strstr(c, ": ");
        if (!sep) break;
        *sep = 0;
        c = sep + 2;
    }
    for (int i = 0; i < k; i++)
        for (int j = i + 1; j < k; j++)
            if (!strcmp(part[i], part[j])) return 0;
    return 1;
}

/* Occurrences of needle in s. */
static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---- a strict JSON validator (RFC 8259, strings must be valid UTF-8): returns the end or NULL ---- */

static const char *json_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p) {
    if (*p++ != '"') return NULL;
    for (;;) {
        const unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL; /* also the end of input */
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                for (int k = 1; k <= 4; k++)
                    if (!strchr("0123456789abcdefABCDEF", p[k]) || !p[k]) return NULL;
                p += 5;
            } else if (*p && strchr("\"\\/bfnrt", *p)) {
                p++;
            } else {
                return NULL;
            }
        } else if (c < 0x80) {
            p++;
        } else {
            const int n = c >= 0xF0 && c <= 0xF4   ? 4
                          : c >= 0xE0 && c <= 0xEF ? 3
                          : c >= 0xC2 && c <= 0xDF ? 2
                                                   : 0;
            if (!n) return NULL;
            const unsigned char c1 = (unsigned char)p[1];
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
                (c == 0xF4 && c1 >= 0x90))
                return NULL;
            for (int k = 1; k < n; k++)
                if (((unsigned char)p[k] & 0xC0) != 0x80) return NULL;
            p += n;
        }
    }
}

static const char *json_value(const char *p, int depth) {
    p = json_ws(p);
    if (depth > 64) return NULL;
    if (*p == '"') return json_string(p);
    if (*p == '{' || *p == '[') {
        const char close = *p == '{' ? '}' : ']';
        p = json_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = json_string(json_ws(p)))) return NULL;
                p = json_ws(p);
                if (*p++ != ':') return NULL;
            }
            if (!(p = json_value(p, depth + 1))) return NULL;
            p = json_ws(p);
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    if (!strncmp(p, "null", 4)) return p + 4;
    const char *q = p;
    if (*q == '-') q++;
    if (*q == '0')
        q++;
    else if (*q >= '1' && *q <= '9')
        while (*q >= '0' && *q <= '9')
            q++;
    else
        return NULL;
    if (*q == '.') {
        if (*++q < '0' || *q > '9') return NULL;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (*q < '0' || *q > '9') return NULL;
        while (*q >= '0' && *q <= '9')
            q++;
    }
    return q;
}

static int json_valid(const char *s) {
    const char *end = json_value(s, 0);
    return end && *json_ws(end) == 0;
}

/* A file no converter would write: hostile strings, non-finite floats, long and short arrays, and a
 * tensor of a type llm-gguf has no decoder for (NVFP4, id 40). */
static int write_hostile(const char *path) {
    struct gguf_writer *w;
    if (gguf_writer_create(&w) != INFER_OK) return 0;
    static const float small[3] = {1.5f, NAN, -INFINITY};
    float big[17];
    for (int i = 0; i < 17; i++)
        big[i] = (float)i;
    const char *strs[2] = {"tab\there", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}; /* é € 😀 stay as they are */
    const int64_t ne_fp4[2] = {256, 2}, ne_f32[2] = {32, 3};
    static uint8_t fp4[2 * 4 * 36];
    static float f32[96];
    for (int i = 0; i < 96; i++)
        f32[i] = (float)i * 0.25f - 3.0f;
    int ok =
        gguf_writer_set_str(w, "general.architecture", "gpt9") == INFER_OK &&
        gguf_writer_set_str(w, "ctl",
                            "a\x01"
                            "b\x1f\"q\"\\\n\x7f") == INFER_OK &&
        gguf_writer_set_str(w, "bad.utf8", "x\xff\xc3(\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80z") == INFER_OK &&
        gguf_writer_set_str(w,
                            "k\x02"
                            "ey",
                            "v") == INFER_OK &&
        gguf_writer_set_f32(w, "nan", NAN) == INFER_OK &&
        gguf_writer_set_f32(w, "inf", INFINITY) == INFER_OK &&
        gguf_writer_set_arr(w, "small", GGUF_F32, small, 3) == INFER_OK &&
        gguf_writer_set_arr(w, "big", GGUF_F32, big, 17) == INFER_OK &&
        gguf_writer_set_str_arr(w, "strs", strs, 2) == INFER_OK &&
        gguf_writer_add_tensor(w, "fp4", 40, 2, ne_fp4, fp4) == INFER_OK &&
        gguf_writer_add_tensor(w, "f32", INFER_TYPE_F32, 2, ne_f32, f32) == INFER_OK &&
        gguf_writer_write(w, path, NULL, NULL) == INFER_OK;
    gguf_writer_free(w);
    return ok;
}

/* Writes src as two parts <prefix>-0000{1,2}-of-00002.gguf the way gguf-split does: every key in part
 * one, the split.* keys in both, the tensors halved. */
static int write_split(const char *src, const char *prefix) {
    struct gguf_file *f;
    if (gguf_open(src, &f) != INFER_OK) return 0;
    int ok = 1;
    const int64_t half = f->n_tensors / 2;
    for (int part = 0; part < 2 && ok; part++) {
        struct gguf_writer *w;
        if (gguf_writer_create(&w) != INFER_OK) break;
        for (int64_t i = 0; part == 0 && ok && i < f->n_kv; i++)
            ok = gguf_writer_set(w, f->kv[i].key, &f->kv[i].val) == INFER_OK;
        struct gguf_value no = {.type = GGUF_U16, .elem_type = GGUF_U16, .n = 1, .v.u = (uint64_t)part};
        struct gguf_value count = {.type = GGUF_U16, .elem_type = GGUF_U16, .n = 1, .v.u = 2};
        ok = ok && gguf_writer_set(w, "split.no", &no) == INFER_OK &&
             gguf_writer_set(w, "split.count", &count) == INFER_OK &&
             gguf_writer_set_i32(w, "split.tensors.count", (int32_t)f->n_tensors) == INFER_OK;
        for (int64_t i = part ? half : 0; ok && i < (part ? f->n_tensors : half); i++) {
            const struct gguf_tensor *t = &f->tensors[i];
            ok = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data) == INFER_OK;
        }
        char path[700];
        snprintf(path, sizeof path, "%s-%05d-of-00002.gguf", prefix, part + 1);
        ok = ok && gguf_writer_write(w, path, NULL, NULL) == INFER_OK;
        gguf_writer_free(w);
    }
    gguf_close(f);
    return ok;
}

/* 1 if the two files hold the same tensors (names, types, shapes, bytes) in the same order. */
static int same_tensors(const char *a, const char *b) {
    struct gguf_file *x = NULL, *y = NULL;
    int same = gguf_open(a, &x) == INFER_OK && gguf_open(b, &y) == INFER_OK && x->n_tensors == y->n_tensors;
    for (int64_t i = 0; same && i < x->n_tensors; i++) {
        const struct gguf_tensor *p = &x->tensors[i], *q = &y->tensors[i];
        same = !strcmp(p->name, q->name) && p->type == q->type && !memcmp(p->ne, q->ne, sizeof p->ne) &&
               p->nbytes == q->nbytes && !memcmp(p->data, q->data, p->nbytes);
    }
    gguf_close(x);
    gguf_close(y);
    return same;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---- tokenize / detokenize ---- */

struct tok_text {
    const char *name, *text;
    int argv;     /* given as TEXT (no quote or backslash in it), else through -f FILE */
    int specials; /* holds control-token texts: all four flag settings, and --special must change the ids */
};

/* Control tokens of each vocabulary compared: Qwen's <|im_start|> / <|im_end|>, Llama 3's <|begin_of_text|>,
 * SPM's <s> / </s>. No " ." or " 's" (llama-bpe's clean-up of spaces would change them on the way back). */
static const struct tok_text tok_texts[] = {
    {"ASCII", "Hello world! It is 2026: 3.14 + 42 = x_y; fn(a, b) -> [c]", 1, 0},
    {"Unicode",
     "h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 \xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c "
     "\xf0\x9f\xa6\x99 \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xcc\x81\xd1\x82 e\xcc\x81 "
     "\xc3\x9f\xe2\x84\xa2",
     0, 0},
    {"whitespace runs", "  two leading\t\ttabs\n\n\nthree newlines   \r\n  trailing   ", 0, 0},
    {"control tokens", "<|im_start|>user\nhi there<|im_end|>\n<|begin_of_text|>ok<s> and </s>", 0, 1},
    {"empty", "", 1, 0},
};

/* The ids of a tokenize line ("1 2 3\n"); -1 if it is not one. */
static int32_t parse_id_line(const char *s, int32_t *ids, int32_t cap) {
    int32_t n = 0;
    while (*s && *s != '\n') {
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || n == cap) return -1;
        ids[n++] = (int32_t)v;
        s = end;
        if (*s == ' ') s++;
    }
    return *s == '\n' && s[1] == 0 ? n : -1;
}

/* "A B C" of ids into buf (a detokenize argument). */
static void id_args(const int32_t *ids, int32_t n, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < n && k + 16 < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? " " : "", ids[i]);
}

/* The tool on one vocabulary against llama.cpp (pv: its vocabulary; NULL: no peer) and our library. */
static void test_tokenize_vocab(const char *path, const struct llama_peer *p, const void *pv, char *out,
                                size_t cap) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    struct gguf_file *f = NULL;
    struct tokenizer *t = NULL;
    if (gguf_open(path, &f) == INFER_OK) tokenizer_load(f, &t);
    gguf_close(f);
    T_CHECK(t != NULL, "%s: our tokenizer: %s", base, infer_last_error());
    if (!t) return;
    enum { CAP = 512 };
    static char args[8192], text_file[700], want[4096];
    static int32_t got[CAP], lib[CAP], ref[CAP], plain[CAP];
    snprintf(text_file, sizeof text_file, "%s/text.txt", dir);
    for (size_t k = 0; k < sizeof tok_texts / sizeof *tok_texts; k++) {
        const struct tok_text *x = &tok_texts[k];
        const size_t len = strlen(x->text);
        FILE *tf = fopen(text_file, "wb");
        if (tf) fwrite(x->text, 1, len, tf), fclose(tf);
        int32_t n_plain = -1;
        for (int flags = 0; flags < 4; flags++) {
            const int special = flags & 1, add = flags >> 1;
            if (special && !x->specials) continue; /* the same ids: the control-token text covers --special */
            if (x->argv)
                snprintf(args, sizeof args, "tokenize %s%s'%s' '%s'", special ? "--special " : "",
                         add ? "--add-special " : "", path, x->text);
            else
                snprintf(args, sizeof args, "tokenize %s%s'%s' -f '%s'", special ? "--special " : "",
                         add ? "--add-special " : "", path, text_file);
            const int rc = run_io(args, out, cap, 0, NULL);
            const int32_t n = rc == 0 ? parse_id_line(out, got, CAP) : -1;
            const int32_t n_lib = tokenizer_encode(t, x->text, len, add, special, lib, CAP);
            T_CHECK(
                n >= 0 && n == n_lib && !memcmp(got, lib, sizeof *got * (size_t)n),
                "%s, %s, special %d add_special %d: tokenize (exit %d) gives '%.200s', the library %d ids",
                base, x->name, special, add, rc, out, n_lib);
            if (n < 0) continue;
            if (pv) {
                const int32_t n_ref = p->tokenize(pv, x->text, (int32_t)len, ref, CAP, add, special);
                T_CHECK(
                    n == n_ref && !memcmp(got, ref, sizeof *got * (size_t)n),
                    "%s, %s, special %d add_special %d: tokenize's %d ids differ from llama_tokenize's %d",
                    base, x->name, special, add, n, n_ref);
            }
            if (flags == 0) {
                n_plain = n;
                memcpy(plain, got, sizeof *got * (size_t)n);
            } else if (flags == 1) { /* each vocabulary has one of the control tokens in the text */
                T_CHECK(n != n_plain || memcmp(got, plain, sizeof *got * (size_t)n),
                        "%s, %s: --special parses no control token", base, x->name);
            }

            /* back to text: llama_detokenize with remove_special false, unparse_special true (the default),
             * and the other two flags on the ids that have BOS / EOS and control tokens */
            for (int other = 0; other < 1 + (flags == 3); other++) {
                char *a = args + snprintf(args, sizeof args, "detokenize %s'%s' ",
                                          other ? "--remove-special --no-special " : "", path);
                id_args(got, n, a, sizeof args - (size_t)(a - args));
                size_t n_out = 0;
                const int drc = run_io(args, out, cap, 0, &n_out);
                const int32_t n_want = tokenizer_detokenize(t, got, n, want, sizeof want, other, !other);
                T_CHECK(drc == 0 && n_want >= 0 && n_out == (size_t)n_want && !memcmp(out, want, n_out),
                        "%s, %s, flags %d%s: detokenize (exit %d) gives '%.200s', the library '%.*s'", base,
                        x->name, flags, other ? " --remove-special --no-special" : "", drc, out,
                        n_want > 0 ? n_want : 0, want);
                if (pv) {
                    const int32_t n_ref = p->detokenize(pv, got, n, want, sizeof want, other, !other);
                    T_CHECK(drc == 0 && n_out == (size_t)n_ref && !memcmp(out, want, n_out),
                            "%s, %s, flags %d%s: detokenize gives '%.200s', llama_detokenize '%.*s'", base,
                            x->name, flags, other ? " --remove-special --no-special" : "", out,
                            n_ref > 0 ? n_ref : 0, want);
                }
                if (flags == 0 && !other)
                    T_CHECK(drc == 0 && n_out == len && !memcmp(out, x->text, len),
                            "%s, %s: detokenize(tokenize(text)) is '%.200s'", base, x->name, out);
            }
        }
    }
    tokenizer_free(t);
}

/* tokenize and detokenize: their errors, a model with weights (only its tokenizer is read), --pieces, and the
 * real vocabularies against llama.cpp. */
static void test_tokenize(const char *model, const char *hostile, char *out, size_t cap) {
    char args[4096], ids[512];
    T_CHECK(run("tokenize", out, cap) == 2 && strstr(out, "tokenize needs MODEL"), "tokenize alone: %s", out);
    snprintf(args, sizeof args, "tokenize %s", model);
    T_CHECK(run(args, out, cap) == 2 && strstr(out, "TEXT"), "tokenize without a text: %s", out);
    snprintf(args, sizeof args, "tokenize %s a b", model);
    T_CHECK(run(args, out, cap) == 2 && strstr(out, "one TEXT"), "tokenize with two texts: %s", out);
    snprintf(args, sizeof args, "tokenize --bogus %s a", model);
    T_CHECK(run(args, out, cap) == 2 && strstr(out, "'--bogus'") && count_lines(out) == 1,
            "unknown option: %s", out);
    snprintf(args, sizeof args, "tokenize %s -f /nonexistent.txt", model);
    T_CHECK(run(args, out, cap) == 1 && strstr(out, "/nonexistent.txt: cannot open") && one_clean_line(out),
            "tokenize -f of a missing file: %s", out);
    snprintf(args, sizeof args, "tokenize %s hi", hostile);
    T_CHECK(run(args, out, cap) == 1 && strstr(out, "no tokenizer") && one_clean_line(out),
            "tokenize on a file without a tokenizer: %s", out);
    T_CHECK(run("tokenize /nonexistent.gguf hi", out, cap) == 1 && one_clean_line(out), "missing model: %s",
            out);

    /* a model with weights: its tokenizer alone; the text after -- may look like an option */
    struct gguf_file *f = NULL;
    struct tokenizer *t = NULL;
    if (gguf_open(model, &f) == INFER_OK) tokenizer_load(f, &t);
    gguf_close(f);
    int32_t want[64], got[64], n_want = t ? tokenizer_encode(t, "--special hello", 15, 0, 0, want, 64) : -1;
    snprintf(args, sizeof args, "tokenize %s -- --special\\ hello", model);
    int rc = run_io(args, out, cap, 0, NULL);
    int32_t n = parse_id_line(out, got, 64);
    T_CHECK(rc == 0 && n_want > 0 && n == n_want && !memcmp(got, want, sizeof *got * (size_t)n),
            "tokenize of a synth model after --: '%s', the library %d ids", out, n_want);
    id_args(got, n > 0 ? n : 0, ids, sizeof ids);
    snprintf(args, sizeof args, "detokenize %s %s", model, ids);
    size_t n_out = 0;
    T_CHECK(run_io(args, out, cap, 0, &n_out) == 0 && n_out == 15 && !memcmp(out, "--special hello", 15),
            "detokenize of a synth model: '%s'", out);
    /* a pipeline: the text on stdin, the ids through a pipe into detokenize -f - */
    char hello[640];
    snprintf(hello, sizeof hello, "%s/hello.txt", dir);
    FILE *hf = fopen(hello, "wb");
    if (hf) fputs("--special hello\n\tworld", hf), fclose(hf);
    snprintf(args, sizeof args, "tokenize %s -f - < %s | %s detokenize %s -f -", model, hello, tool, model);
    T_CHECK(run_io(args, out, cap, 0, &n_out) == 0 && n_out == 22 &&
                !memcmp(out, "--special hello\n\tworld", 22),
            "tokenize -f - | detokenize -f -: '%s'", out);
    snprintf(args, sizeof args, "detokenize %s -f %s", model, hello);
    T_CHECK(run(args, out, cap) == 1 && strstr(out, "hello.txt: not a list of token ids") &&
                one_clean_line(out),
            "detokenize -f of a text: %s", out);
    snprintf(args, sizeof args, "detokenize %s %d,%d -- %d", model, n > 2 ? got[0] : 0, n > 2 ? got[1] : 0,
             n > 2 ? got[2] : 0); /* the llm-run --ids form, and separate arguments */
    char three[64];
    const int32_t n_three = t && n > 2 ? tokenizer_detokenize(t, got, 3, three, sizeof three, 0, 1) : -1;
    T_CHECK(run_io(args, out, cap, 0, &n_out) == 0 && n_three > 0 && n_out == (size_t)n_three &&
                !memcmp(out, three, n_out),
            "detokenize of 'A,B -- C': '%s'", out);
    snprintf(args, sizeof args, "detokenize %s 1,x", model);
    T_CHECK(run(args, out, cap) == 2 && strstr(out, "'1,x'") && count_lines(out) == 1, "a bad id list: %s",
            out);
    snprintf(args, sizeof args, "detokenize %s 5 99999999", model);
    T_CHECK(run(args, out, cap) == 1 && strstr(out, "token id 99999999") && one_clean_line(out),
            "an id outside the vocabulary: %s", out);
    T_CHECK(run("detokenize", out, cap) == 2 && strstr(out, "detokenize needs MODEL"), "detokenize alone: %s",
            out);
    snprintf(args, sizeof args, "detokenize %s", model);
    T_CHECK(run_io(args, out, cap, 0, &n_out) == 0 && n_out == 0, "detokenize of no ids: '%s'", out);
    tokenizer_free(t);

    /* every vocabulary llama.cpp's tests ship that a supported Qwen / Llama model uses */
    const char *vd = getenv("INFER_VOCAB_DIR");
    if (!vd) vd = "build/vocab";
    static const char *const vocabs[] = {"qwen35", "qwen2", "llama-bpe", "llama-spm"};
    struct llama_peer p;
    const char *why = NULL;
    const int peer = llama_peer_load(&p, &why);
    if (peer < 0) T_CHECK(0, "the llama.cpp peer is there but does not bind: %s", why);
    if (peer == 0) T_SKIP_PEER("llama.cpp peer: %s; tokenize is compared with our library alone", why);
    for (size_t v = 0; v < sizeof vocabs / sizeof *vocabs; v++) {
        char path[700];
        snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", vd, vocabs[v]);
        if (access(path, R_OK) != 0) {
            T_SKIP_PEER("%s missing (make peer brings it)", path);
            continue;
        }
        void *pm = peer > 0 ? llama_peer_vocab_load(&p, path) : NULL;
        if (peer > 0) T_CHECK(pm != NULL, "llama.cpp cannot load %s", path);
        test_tokenize_vocab(path, &p, pm ? p.model_get_vocab(pm) : NULL, out, cap);
        if (pm) p.model_free(pm);

        /* --pieces: one "ID -> 'piece'" line per token, control bytes escaped */
        if (strcmp(vocabs[v], "qwen35")) continue;
        char text_file[700];
        snprintf(text_file, sizeof text_file, "%s/pieces.txt", dir);
        FILE *tf = fopen(text_file, "wb");
        if (tf) fputs("a\n\tb<|im_start|>", tf), fclose(tf);
        snprintf(args, sizeof args, "tokenize --pieces --special '%s' -f '%s'", path, text_file);
        T_CHECK(run_io(args, out, cap, 0, NULL) == 0 && count_lines(out) == 4 &&
                    strstr(out, "    64 -> 'a'\n") && strstr(out, "   198 -> '\\n'\n") &&
                    strstr(out, "  2233 -> '\\x09b'\n") && strstr(out, "151644 -> '<|im_start|>'\n"),
                "tokenize --pieces: %s", out);
    }
}

/* A context too large for memory: llm-run -c 100000000 fails in one line that names the cause once (it said
 * it twice, the backend's message formatted into itself, and ended in ": "). The model's K cells are 32 KiB a
 * position, 3.3 TB at that context: no machine's allocator grants it. */
static void test_error_line(const char *build, char *out, size_t cap) {
    char args[2048], kv[640];
    snprintf(kv, sizeof kv, "%s/kv.gguf", dir);
    snprintf(args, sizeof args,
             "synth --arch qwen3 --type Q8_0 --n-layer 1 --n-embd 64 --n-head 32 --n-head-kv 32 "
             "--head-dim 512 -o %s",
             kv);
    T_CHECK(run(args, out, cap) == 0, "synth of the wide-KV model: %s", out);
    snprintf(tool, sizeof tool, "%s/llm-run", build);
    snprintf(args, sizeof args, "-c 100000000 -m %s --ids 1,2,3 -n 1", kv);
    /* under SAN=1 ASan aborts on a request that large unless told to return NULL as malloc does */
    const char *asan = getenv("ASAN_OPTIONS");
    char saved[1024], opts[1100];
    snprintf(saved, sizeof saved, "%s", asan ? asan : "");
    snprintf(opts, sizeof opts, "%s%sallocator_may_return_null=1", saved, asan && *asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    const int rc = run(args, out, cap);
    if (asan)
        setenv("ASAN_OPTIONS", saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    for (;;) { /* the line ASan then prints for the refusal is its own, not the tool's */
        char *nl = strchr(out, '\n');
        if (strncmp(out, "==", 2) || !nl ||
            !memmem(out, (size_t)(nl - out), "AddressSanitizer failed to allocate", 35))
            break;
        memmove(out, nl + 1, strlen(nl + 1) + 1);
    }
    T_CHECK(rc == 1 && !strncmp(out, "llm-run: ", 9) && one_clean_line(out) &&
                count_of(out, "K cells") == 1 && count_of(out, "out of memory") == 1 &&
                count_of(out, "3276800000000 bytes") == 1,
            "llm-run -c 100000000: one line, the cause once, no trailing colon: %s", out);
    snprintf(tool, sizeof tool, "%s/llm-gguf", build);
}

/* -ngl in llm-run and llm-bench. Only the number is the tools' business: without a device the refusal
 * is one line naming CUDA or the device, with one the model runs, whole (99) or split (2 of its 3 layers;
 * splits themselves: test-cuda-split, test-gpu-tools). */
static void test_ngl(const char *build, const char *model, char *out, size_t cap) {
    char args[2048];
    const int n_dev = infer_device_count();
    snprintf(tool, sizeof tool, "%s/llm-run", build);
    snprintf(args, sizeof args, "-m %s --ids 1,2,3 -n 2 --temp 0 -ngl 99", model);
    int rc = run(args, out, cap);
    if (n_dev == 0)
        T_CHECK(rc == 1 && count_lines(out) == 1 && (strstr(out, "CUDA") || strstr(out, "device")) &&
                    !strncmp(out, "llm-run: ", 9),
                "llm-run -ngl 99 without a device: exit 1 and one line (exit %d): %s", rc, out);
    else
        T_CHECK(rc == 0, "llm-run -ngl 99 on device 0 (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s --ids 1,2,3 -n 2 --temp 0 -ngl 2", model);
    rc = run(args, out, cap);
    if (n_dev == 0)
        T_CHECK(rc == 1 && count_lines(out) == 1 && (strstr(out, "CUDA") || strstr(out, "device")),
                "llm-run -ngl 2 of 3 layers without a device: exit 1 and one line (exit %d): %s", rc, out);
    else
        T_CHECK(rc == 0, "llm-run -ngl 2 of 3 layers, a split (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s --ids 1 -ngl -1", model);
    T_CHECK(run(args, out, cap) == 2 && strstr(out, "-ngl") && count_lines(out) == 1, "-ngl -1: %s", out);
    T_CHECK(run("--help", out, cap) == 0 && strstr(out, "-ngl N"), "llm-run --help documents -ngl");

    snprintf(tool, sizeof tool, "%s/llm-bench", build);
    snprintf(args, sizeof args, "-m %s -p 8 -n 4 -r 1 -t 1 -ngl 99", model);
    rc = run(args, out, cap);
    if (n_dev == 0)
        T_CHECK(rc == 1 && count_lines(out) == 1 && (strstr(out, "CUDA") || strstr(out, "device")) &&
                    !strncmp(out, "llm-bench: -ngl 99: ", 20),
                "llm-bench -ngl 99 without a device: exit 1 and one line (exit %d): %s", rc, out);
    else
        T_CHECK(rc == 0 && strstr(out, "| CUDA |") && strstr(out, "% of roofline") && strstr(out, "CUDA device 0: "),
                "llm-bench -ngl 99 on device 0 (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s -p 8 -n 4 -r 1 -t 1 -ngl 0,99 -o csv", model);
    rc = run(args, out, cap);
    if (n_dev == 0)
        T_CHECK(rc == 1 && count_lines(out) == 1, "llm-bench -ngl 0,99 without a device: one line (exit %d): %s", rc,
                out);
    else
        T_CHECK(rc == 0 && strstr(out, ",CPU,1,8,0,0,") && strstr(out, ",CUDA,1,8,0,0,"),
                "llm-bench -ngl 0,99: a CPU and a CUDA row (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s -ngl 0,x", model);
    T_CHECK(run(args, out, cap) == 2 && strstr(out, "-ngl") && count_lines(out) == 1, "-ngl 0,x: %s", out);
    T_CHECK(run("--help", out, cap) == 0 && strstr(out, "-ngl N[,N...]"), "llm-bench --help documents -ngl");
    snprintf(tool, sizeof tool, "%s/llm-gguf", build);
}

/* --no-repack in llm-run and llm-bench: documented, and the weights as stored give the same greedy tokens as the
 * repacked ones (the library's equality is test-repack's; this is the flag reaching it). */
static void test_no_repack(const char *build, const char *dir, char *out, size_t cap) {
    char args[2048], path[512], with[4096];
    snprintf(path, sizeof path, "%s/repack.gguf", dir);
    snprintf(tool, sizeof tool, "%s/llm-gguf", build);
    snprintf(args, sizeof args, "synth --arch qwen3 --type Q4_K_M -o %s", path);
    T_CHECK(run(args, out, cap) == 0, "synth a Q4_K_M model: %s", out);
    snprintf(tool, sizeof tool, "%s/llm-run", build);
    snprintf(args, sizeof args, "-m %s --ids 1,2,3 -n 8 --temp 0 --print-ids", path);
    const int rc = run_io(args, with, sizeof with, 0, NULL);
    snprintf(args, sizeof args, "-m %s --ids 1,2,3 -n 8 --temp 0 --print-ids --no-repack", path);
    T_CHECK(rc == 0 && run_io(args, out, cap, 0, NULL) == 0 && strlen(out) > 8 && !strcmp(out, with),
            "llm-run --no-repack: the same greedy ids (%s vs %s)", with, out);
    T_CHECK(run("--help", out, cap) == 0 && strstr(out, "--no-repack"), "llm-run --help documents --no-repack");
    snprintf(tool, sizeof tool, "%s/llm-bench", build);
    snprintf(args, sizeof args, "-m %s -p 8 -n 2 -r 1 -t 1 --no-repack -o csv", path);
    T_CHECK(run(args, out, cap) == 0 && strstr(out, ",CPU,"), "llm-bench --no-repack runs: %s", out);
    T_CHECK(run("--help", out, cap) == 0 && strstr(out, "--no-repack"), "llm-bench --help documents --no-repack");
    snprintf(tool, sizeof tool, "%s/llm-gguf", build);
    unlink(path);
}

/* The type rules' view of a file without MTP layers: block count, n_head / n_head_kv, experts, tied. */
static struct ftype_model file_model(const struct gguf_file *f) {
    struct ftype_model m = {0, 1, 0, gguf_find_tensor(f, "output.weight") == NULL,
                            gguf_find_tensor(f, "blk.0.ffn_down_shexp.weight") != NULL};
    const char *arch = "";
    char key[128];
    uint32_t v = 0, kv = 0;
    gguf_get_str(f, "general.architecture", &arch);
    snprintf(key, sizeof key, "%s.block_count", arch);
    if (gguf_get_u32(f, key, &v) == INFER_OK) m.n_layer = (int32_t)v;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    gguf_get_u32(f, key, &v);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (gguf_get_u32(f, key, &kv) == INFER_OK && kv) m.n_gqa = (int32_t)(v / kv);
    snprintf(key, sizeof key, "%s.expert_count", arch);
    v = 0; /* an absent key leaves v as it is */
    if (gguf_get_u32_opt(f, key, &v) == INFER_OK) m.n_expert = (int32_t)v;
    return m;
}

/* Every tensor of `path` has the type ftype_tensor_type gives it and file_type is `ftype`; with `src`
 * (the F32 file it was quantised from) its bytes are quant_quantize_row's of the source rows and
 * decode to within `max_rel` (RMS, relative) of them. Returns the number of mismatches. */
static int check_typed_file(const char *path, int32_t ftype, const char *src, double max_rel, const char *what) {
    struct gguf_file *f = NULL, *in = NULL;
    T_CHECK(gguf_open(path, &f) == INFER_OK, "%s: open: %s", what, infer_last_error());
    if (!f) return 1;
    if (src) gguf_open(src, &in);
    uint32_t ft = 999;
    gguf_get_u32(f, "general.file_type", &ft);
    T_CHECK(ft == (uint32_t)ftype, "%s: general.file_type %u, expected %d", what, ft, (int)ftype);
    const struct ftype_model fm = file_model(f);
    int bad_type = 0, bad_bytes = 0, bad_err = 0, n_quant = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const int32_t want = ftype_tensor_type(ftype, t->name, t->n_dims, t->ne, &fm);
        if (t->type != want && bad_type++ < 3)
            printf("  %s: %s is %s, the rules say %s\n", what, t->name, quant_type(t->type)->name,
                   quant_type(want)->name);
        const struct gguf_tensor *s = in ? gguf_find_tensor(in, t->name) : NULL;
        if (!s || s->type != INFER_TYPE_F32) continue;
        n_quant += t->type != INFER_TYPE_F32;
        const int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
        const size_t rb = quant_row_bytes(t->type, ne0);
        float *y = malloc(sizeof(float) * (size_t)ne0);
        uint8_t *q = malloc(rb);
        double e = 0, n2 = 0;
        for (int64_t r = 0; y && q && r < rows; r++) {
            const float *x = (const float *)s->data + r * ne0;
            const uint8_t *got = (const uint8_t *)t->data + (size_t)r * rb;
            quant_quantize_row(t->type, x, q, ne0);
            bad_bytes += memcmp(q, got, rb) != 0;
            quant_dequant_row(t->type, got, y, ne0);
            for (int64_t k = 0; k < ne0; k++) {
                e += ((double)y[k] - x[k]) * ((double)y[k] - x[k]);
                n2 += (double)x[k] * x[k];
            }
        }
        bad_err += n2 > 0 && sqrt(e / n2) > max_rel;
        free(y);
        free(q);
    }
    T_CHECK(bad_type == 0, "%s: %d tensors of another type than the rules give", what, bad_type);
    if (in) {
        T_CHECK(n_quant > 0 && bad_bytes == 0, "%s: %d rows differ from quant_quantize_row (%d quantised tensors)",
                what, bad_bytes, n_quant);
        T_CHECK(bad_err == 0, "%s: %d tensors decode with a relative RMS error above %.2f", what, bad_err, max_rel);
    }
    gguf_close(in);
    gguf_close(f);
    return bad_type + bad_bytes + bad_err;
}

/* The legacy and Q2_K/Q3_K file types: quantize and synth --type write them, info names them as
 * llama.cpp does. n_gqa 4 and 3 layers so that Q2_K's and Q3_K_M's attn_v rules both show. */
static void test_file_types(char *out, size_t cap) {
    static const struct { const char *name, *desc; double max_rel; } k[] = {
        {"Q4_0", "Q4_0", 0.12},          {"Q4_1", "Q4_1", 0.10},          {"Q5_0", "Q5_0", 0.06},
        {"Q5_1", "Q5_1", 0.05},          {"Q2_K", "Q2_K - Medium", 0.35}, {"Q3_K_S", "Q3_K - Small", 0.20},
        {"Q3_K_M", "Q3_K - Medium", 0.20}, {"Q3_K_L", "Q3_K - Large", 0.20},
    };
    char src[640], dst[640], args[2048];
    snprintf(src, sizeof src, "%s/types-f32.gguf", dir);
    snprintf(dst, sizeof dst, "%s/types-q.gguf", dir);
    snprintf(args, sizeof args, "synth --arch llama --n-layer 3 --n-head 8 --n-head-kv 2 -o %s", src);
    T_CHECK(run(args, out, cap) == 0, "synth the F32 source: %s", out);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const int32_t ft = ftype_by_name(k[i].name);
        T_CHECK(ft >= 0 && strcmp(ftype_name(ft), k[i].name) == 0 && strcmp(ftype_desc(ft), k[i].desc) == 0,
                "%s: ftype table", k[i].name);
        char what[64];
        snprintf(args, sizeof args, "quantize %s %s %s", src, dst, k[i].name);
        T_CHECK(run(args, out, cap) == 0, "quantize to %s: %s", k[i].name, out);
        snprintf(what, sizeof what, "quantize %s", k[i].name);
        check_typed_file(dst, ft, src, k[i].max_rel, what);
        char want[80];
        snprintf(want, sizeof want, "u32 = %d (%s)\n", (int)ft, k[i].desc);
        snprintf(args, sizeof args, "info %s", dst);
        T_CHECK(run(args, out, cap) == 0 && strstr(out, want), "info names file type %s as llama.cpp: %s", k[i].name,
                want);
        /* synth --type, with random blocks every other type; qwen3moe: the 8-expert rules */
        snprintf(args, sizeof args, "synth --arch qwen3moe --type %s%s -o %s", k[i].name,
                 i % 2 ? " --random-blocks" : "", dst);
        T_CHECK(run(args, out, cap) == 0, "synth --type %s: %s", k[i].name, out);
        snprintf(what, sizeof what, "synth --type %s", k[i].name);
        check_typed_file(dst, ft, NULL, 0, what);
    }
    snprintf(args, sizeof args, "quantize %s %s Q3_K", src, dst);
    T_CHECK(run(args, out, cap) == 2 && strstr(out, "Q3_K_M") && strstr(out, "Q4_0"),
            "quantize's usage lists the file types: %s", out);
}

/* The IQ / TQ file types and Q2_K_S: synth --type writes them by the rules (random blocks for the IQ / TQ
 * tensors: we have no quantiser for them), info names them as llama.cpp; quantize writes Q2_K_S and refuses
 * the others with one clean line, leaving no output file. llama with n_gqa 4 and 9 layers (the first-eighth
 * rules) and qwen35moe with its MTP layer (8 experts, a shared expert) in turn. */
static void test_iq_file_types(char *out, size_t cap) {
    static const struct {
        const char *name, *desc;
    } k[] = {
        {"Q2_K_S", "Q2_K - Small"},
        {"IQ2_XXS", "IQ2_XXS - 2.0625 bpw"},
        {"IQ2_XS", "IQ2_XS - 2.3125 bpw"},
        {"IQ2_S", "IQ2_S - 2.5 bpw"},
        {"IQ2_M", "IQ2_M - 2.7 bpw"},
        {"IQ3_XXS", "IQ3_XXS - 3.0625 bpw"},
        {"IQ3_XS", "IQ3_XS - 3.3 bpw"},
        {"IQ3_S", "IQ3_S - 3.4375 bpw"},
        {"IQ3_M", "IQ3_S mix - 3.66 bpw"},
        {"IQ1_S", "IQ1_S - 1.5625 bpw"},
        {"IQ1_M", "IQ1_M - 1.75 bpw"},
        {"TQ1_0", "TQ1_0 - 1.69 bpw ternary"},
        {"TQ2_0", "TQ2_0 - 2.06 bpw ternary"},
    };
    char src[640], dst[640], args[2048], what[64], want[80];
    snprintf(src, sizeof src, "%s/iq-f32.gguf", dir);
    snprintf(dst, sizeof dst, "%s/iq-q.gguf", dir);
    snprintf(args, sizeof args, "synth --arch llama --n-layer 9 --n-head 8 --n-head-kv 2 -o %s", src);
    T_CHECK(run(args, out, cap) == 0, "synth the F32 source: %s", out);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const int32_t ft = ftype_by_name(k[i].name);
        T_CHECK(ft >= 0 && strcmp(ftype_name(ft), k[i].name) == 0 && strcmp(ftype_desc(ft), k[i].desc) == 0,
                "%s: ftype table", k[i].name);
        if (i % 2)
            snprintf(args, sizeof args, "synth --arch qwen35moe --mtp --type %s -o %s", k[i].name, dst);
        else
            snprintf(args, sizeof args,
                     "synth --arch llama --n-layer 9 --n-head 8 --n-head-kv 2 --type %s -o %s", k[i].name,
                     dst);
        T_CHECK(run(args, out, cap) == 0, "synth --type %s: %s", k[i].name, out);
        snprintf(what, sizeof what, "synth --type %s", k[i].name);
        check_typed_file(dst, ft, NULL, 0, what);
        snprintf(want, sizeof want, "u32 = %d (%s)\n", (int)ft, k[i].desc);
        snprintf(args, sizeof args, "info %s", dst);
        T_CHECK(run(args, out, cap) == 0 && strstr(out, want), "info names file type %s as llama.cpp: %s",
                k[i].name, want);
        unlink(dst);
        snprintf(args, sizeof args, "quantize %s %s %s", src, dst, k[i].name);
        const int rc = run(args, out, cap);
        snprintf(what, sizeof what, "quantize %s", k[i].name);
        if (ft == FTYPE_Q2_K_S) {
            T_CHECK(rc == 0, "quantize to Q2_K_S: %s", out);
            check_typed_file(dst, ft, src, 0.35, what);
        } else {
            T_CHECK(rc == 1 && one_clean_line(out) &&
                        (strstr(out, "no quantiser for IQ") || strstr(out, "no quantiser for TQ")),
                    "quantize to %s is refused in one line naming the type: %s", k[i].name, out);
            T_CHECK(access(dst, F_OK) != 0, "quantize to %s leaves no output file", k[i].name);
        }
    }
}

int main(void) {
    static char out[1 << 20];
    const char *b = getenv("INFER_BUILD_DIR");
    snprintf(tool, sizeof tool, "%s/llm-gguf", b ? b : "build");
    if (access(tool, X_OK) != 0 || !mkdtemp(dir)) {
        T_CHECK(0, "%s not built", tool);
        return t_done();
    }
    char args[2048], model[600];
    snprintf(model, sizeof model, "%s/m.gguf", dir);

    /* the validator itself: it must refuse what a sloppy writer produces */
    T_CHECK(json_valid("{\"a\":[1,-2.5e3,true,null,\"\\u00e9\\n\"],\"b\":{}}") && !json_valid("{\"a\":1,}") &&
                !json_valid("[nan]") && !json_valid("[1] x") && !json_valid("[\"\x01\"]") &&
                !json_valid("[\"\xff\"]") && !json_valid("[\"\xed\xa0\x80\"]") &&
                !json_valid("[\"\\x41\"]") && !json_valid("[01]") && !json_valid("{\"a\"}"),
            "the JSON validator accepts valid JSON and refuses invalid JSON");
    T_CHECK(run("", out, sizeof out) == 2 && strstr(out, "missing command"), "no command: %s", out);
    T_CHECK(run("frobnicate", out, sizeof out) == 2 && strstr(out, "unknown command 'frobnicate'"),
            "unknown command");
    T_CHECK(run("help", out, sizeof out) == 0 && strstr(out, "llm-gguf synth"), "help");
    T_CHECK(run("info", out, sizeof out) == 2 && strstr(out, "info needs a FILE"), "info without file");
    T_CHECK(run("info /nonexistent.gguf", out, sizeof out) == 1 &&
                strstr(out, "llm-gguf: /nonexistent.gguf: cannot open") && count_lines(out) == 1,
            "missing file is one line: %s", out);
    T_CHECK(run("synth --arch qwen3", out, sizeof out) == 2 && strstr(out, "-o OUT"), "synth without -o");
    snprintf(args, sizeof args, "synth --arch gpt9 -o %s", model);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "gpt9"), "unknown arch named: %s", out);
    snprintf(args, sizeof args, "synth --arch qwen3 --n-embd -5 -o %s", model);
    T_CHECK(run(args, out, sizeof out) == 2 && strstr(out, "--n-embd"), "bad dimension named: %s", out);
    snprintf(args, sizeof args, "synth --arch qwen3 --bogus 1 -o %s", model);
    T_CHECK(run(args, out, sizeof out) == 2 && strstr(out, "--bogus"), "unknown option named: %s", out);

    snprintf(args, sizeof args, "synth --arch qwen3 --type Q8_0 --n-layer 3 -o %s", model);
    T_CHECK(run(args, out, sizeof out) == 0, "synth: %s", out);
    snprintf(args, sizeof args, "info %s", model);
    T_CHECK(run(args, out, sizeof out) == 0 && strstr(out, "blk.2.ffn_down.weight") && strstr(out, "Q8_0") &&
                strstr(out, "qwen3.block_count") && !strstr(out, "blk.3."),
            "info lists the tensors and keys");
    snprintf(args, sizeof args, "info --json %s", model);
    T_CHECK(run(args, out, sizeof out) == 0 && out[0] == '{' &&
                strstr(out, "\"tokenizer.ggml.tokens\":{\"type\":\"str\",\"length\":") &&
                strstr(out, "\"blk.0.attn_q.weight\",\"type\":\"Q8_0\",\"shape\":["),
            "info --json summarises long arrays");

    char f32[640];
    snprintf(f32, sizeof f32, "%s/t.f32", dir);
    snprintf(args, sizeof args, "dequant %s blk.0.attn_q.weight %s", model, f32);
    struct stat sb;
    T_CHECK(run(args, out, sizeof out) == 0 && stat(f32, &sb) == 0, "dequant runs: %s", out);
    snprintf(args, sizeof args, "info --json %s", model);
    run(args, out, sizeof out);
    const char *q = strstr(out, "\"blk.0.attn_q.weight\",\"type\":\"Q8_0\",\"shape\":[");
    long ne0 = 0, ne1 = 0;
    if (q) sscanf(q + strlen("\"blk.0.attn_q.weight\",\"type\":\"Q8_0\",\"shape\":["), "%ld,%ld", &ne0, &ne1);
    T_CHECK(ne0 > 0 && sb.st_size == 4 * ne0 * ne1, "dequant wrote %lld bytes for %ld x %ld",
            (long long)sb.st_size, ne0, ne1);
    snprintf(args, sizeof args, "dequant %s no.such.tensor %s", model, f32);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "no tensor named 'no.such.tensor'"),
            "missing tensor: %s", out);
    snprintf(args, sizeof args, "dequant %s", model);
    T_CHECK(run(args, out, sizeof out) == 2, "dequant with missing arguments");
    snprintf(args, sizeof args, "quantize %s %s/q.gguf Q3_K", model, dir);
    T_CHECK(run(args, out, sizeof out) == 2 && strstr(out, "TYPE"), "unknown quantize type");
    snprintf(args, sizeof args, "quantize %s %s/q.gguf Q4_K_M", model, dir);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "Q8_0") && strstr(out, "F32, F16 or BF16"),
            "quantize refuses an already quantised input: %s", out);

    /* every tensor of the synth file appears in the table and in the JSON */
    struct gguf_file *gf = NULL;
    static char json[1 << 20];
    snprintf(args, sizeof args, "info %s", model);
    run(args, out, sizeof out);
    snprintf(args, sizeof args, "info --json %s", model);
    run(args, json, sizeof json);
    T_CHECK(json_valid(json), "info --json of a synth model is valid JSON");
    if (gguf_open(model, &gf) == INFER_OK) {
        int missing = 0;
        for (int64_t i = 0; i < gf->n_tensors; i++) {
            char line[128], entry[128];
            snprintf(line, sizeof line, "\n%s ", gf->tensors[i].name);
            snprintf(entry, sizeof entry, "{\"name\":\"%s\",", gf->tensors[i].name);
            missing += !strstr(out, line) || !strstr(json, entry);
        }
        T_CHECK(gf->n_tensors > 0 && missing == 0, "info lists all %lld tensors (%d missing)",
                (long long)gf->n_tensors, missing);
        gguf_close(gf);
    }
    snprintf(args, sizeof args, "info --help");
    T_CHECK(run(args, out, sizeof out) == 0 && strstr(out, "llm-gguf dequant"),
            "info --help prints the usage");

    /* hostile metadata: the JSON stays valid; control characters and bad UTF-8 are escaped */
    char hostile[640], res[700];
    snprintf(hostile, sizeof hostile, "%s/hostile.gguf", dir);
    T_CHECK(write_hostile(hostile), "write the hostile file: %s", infer_last_error());
    snprintf(args, sizeof args, "info --json %s", hostile);
    T_CHECK(run(args, json, sizeof json) == 0 && json_valid(json),
            "info --json of hostile metadata is valid JSON: %s", json);
    T_CHECK(strstr(json, "\"ctl\":\"a\\u0001b\\u001f\\\"q\\\"\\\\\\n\\u007f\"") != NULL,
            "control characters escaped: %s", json);
    T_CHECK(strstr(json, "\"bad.utf8\":\"x\\ufffd\\ufffd("
                         "\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffdz\"") != NULL,
            "each invalid UTF-8 byte becomes U+FFFD: %s", strstr(json, "bad.utf8"));
    T_CHECK(strstr(json, "\"k\\u0002ey\":\"v\"") && strstr(json, "\"nan\":null") &&
                strstr(json, "\"inf\":null") && strstr(json, "\"small\":[1.5,null,null]") &&
                strstr(json, "\"big\":{\"type\":\"f32\",\"length\":17}") &&
                strstr(json, "\"strs\":[\"tab\\there\",\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"]"),
            "keys escaped, NaN/Inf as null, arrays summarised past 16, valid UTF-8 kept");
    T_CHECK(strstr(json,
                   "{\"name\":\"fp4\",\"type\":\"NVFP4\",\"shape\":[256,2],\"offset\":0,\"bytes\":288}") !=
                NULL,
            "info lists a type it cannot decode: %s", json);
    snprintf(res, sizeof res, "%s/fp4.f32", dir);
    snprintf(args, sizeof args, "dequant %s fp4 %s", hostile, res);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "tensor 'fp4'") && strstr(out, "NVFP4") &&
                strstr(out, "no decoder") && count_lines(out) == 1 && access(res, F_OK) != 0,
            "dequant refuses NVFP4 with the library's message and writes nothing: %s", out);
    /* dequant of an F32 tensor gives back its bytes */
    snprintf(args, sizeof args, "dequant %s f32 %s", hostile, res);
    float back[97];
    FILE *fp = run(args, out, sizeof out) == 0 ? fopen(res, "rb") : NULL;
    size_t got = fp ? fread(back, sizeof(float), 97, fp) : 0;
    if (fp) fclose(fp);
    int same = got == 96;
    for (int i = 0; same && i < 96; i++)
        same = back[i] == (float)i * 0.25f - 3.0f;
    T_CHECK(same, "dequant of an F32 tensor returns its %zu values unchanged", got);
    /* outputs that would truncate the mapped input are refused */
    snprintf(args, sizeof args, "dequant %s f32 %s", hostile, hostile);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "is the input file") && stat(hostile, &sb) == 0 &&
                sb.st_size > 0,
            "dequant onto its input is refused: %s", out);
    snprintf(args, sizeof args, "quantize %s %s Q8_0", model, model);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "is the input file") && stat(model, &sb) == 0 &&
                sb.st_size > 0,
            "quantize onto its input is refused: %s", out);
    snprintf(args, sizeof args, "synth --arch qwen3 --seed x1 -o %s", res);
    T_CHECK(run(args, out, sizeof out) == 2 && strstr(out, "--seed"), "bad seed named: %s", out);

    /* a split F32 model: info shows which part holds a tensor; quantize reads all parts and writes
     * one file, without split.* keys, whose tensors equal those quantised from the unsplit model */
    char f32model[640], prefix[640], part1[700], q1[700], q2[700];
    snprintf(f32model, sizeof f32model, "%s/f32.gguf", dir);
    snprintf(prefix, sizeof prefix, "%s/split", dir);
    snprintf(part1, sizeof part1, "%s-00001-of-00002.gguf", prefix);
    snprintf(q1, sizeof q1, "%s/q-whole.gguf", dir);
    snprintf(q2, sizeof q2, "%s/q-split.gguf", dir);
    snprintf(args, sizeof args, "synth --arch llama --n-layer 2 -o %s", f32model);
    T_CHECK(run(args, out, sizeof out) == 0 && write_split(f32model, prefix), "write a split model: %s", out);
    snprintf(args, sizeof args, "info %s", part1);
    T_CHECK(run(args, out, sizeof out) == 0 && strstr(out, ", 2 parts") && strstr(out, "part 2\n") &&
                strstr(out, "output.weight"),
            "info of a split model: %s", out);
    snprintf(args, sizeof args, "quantize %s %s Q8_0", f32model, q1);
    const int whole = run(args, out, sizeof out);
    snprintf(args, sizeof args, "quantize %s %s Q8_0", part1, q2);
    T_CHECK(whole == 0 && run(args, out, sizeof out) == 0 && same_tensors(q1, q2),
            "quantize of a split model: %s", out);
    snprintf(args, sizeof args, "info --json %s", q2);
    T_CHECK(run(args, json, sizeof json) == 0 && !strstr(json, "\"split.") &&
                strstr(json, "\"general.file_type\":7"),
            "the quantised split model is one file with file_type 7");

    test_file_types(out, sizeof out);
    test_iq_file_types(out, sizeof out);
    test_tokenize(model, hostile, out, sizeof out);
    test_ngl(b ? b : "build", model, out, sizeof out);
    test_no_repack(b ? b : "build", dir, out, sizeof out);
    test_error_line(b ? b : "build", out, sizeof out);

    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    if (system(args) != 0) printf("note: could not remove %s\n", dir);
    return t_done();
}
