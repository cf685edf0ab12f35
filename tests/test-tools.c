/* test-tools: llm-gguf as a user runs it: usage errors exit 2 with one line naming the problem,
 * failures exit 1 with the library's message, and the outputs have the promised form (a table line
 * per tensor, 4 bytes per element from dequant equal to the F32 data itself, valid JSON with arrays
 * over 16 elements summarised, even for hostile strings and NaN/Inf values, checked by a strict
 * RFC 8259 validator below). llm-run and llm-bench: -ngl is parsed, passed on, and refused in one line
 * where it cannot run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf.h"
#include "t.h"

static char tool[512], dir[] = "/tmp/test-tools-XXXXXX";

/* Runs "tool args" capturing stdout+stderr; returns the exit status. */
static int run(const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", tool, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
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
 * tensor of a type llm-gguf has no decoder for (IQ2_XXS, id 16). */
static int write_hostile(const char *path) {
    struct gguf_writer *w;
    if (gguf_writer_create(&w) != INFER_OK) return 0;
    static const float small[3] = {1.5f, NAN, -INFINITY};
    float big[17];
    for (int i = 0; i < 17; i++)
        big[i] = (float)i;
    const char *strs[2] = {"tab\there", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}; /* é € 😀 stay as they are */
    const int64_t ne_iq2[2] = {256, 2}, ne_f32[2] = {32, 3};
    static uint8_t iq2[2 * 66];
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
        gguf_writer_add_tensor(w, "iq2", 16, 2, ne_iq2, iq2) == INFER_OK &&
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
                   "{\"name\":\"iq2\",\"type\":\"IQ2_XXS\",\"shape\":[256,2],\"offset\":0,\"bytes\":132}") !=
                NULL,
            "info lists a type it cannot decode: %s", json);
    snprintf(res, sizeof res, "%s/iq2.f32", dir);
    snprintf(args, sizeof args, "dequant %s iq2 %s", hostile, res);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "tensor 'iq2'") && strstr(out, "IQ2_XXS") &&
                strstr(out, "no decoder") && count_lines(out) == 1 && access(res, F_OK) != 0,
            "dequant refuses IQ2_XXS with the library's message and writes nothing: %s", out);
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

    test_ngl(b ? b : "build", model, out, sizeof out);

    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    if (system(args) != 0) printf("note: could not remove %s\n", dir);
    return t_done();
}
