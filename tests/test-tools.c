/* test-tools: llm-gguf as a user runs it: usage errors exit 2 with one line naming the problem,
 * failures exit 1 with the library's message, and the outputs have the promised form (a table line
 * per tensor, 4 bytes per element from dequant, valid JSON with arrays over 16 elements summarised). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
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

    T_CHECK(run("", out, sizeof out) == 2 && strstr(out, "missing command"), "no command: %s", out);
    T_CHECK(run("frobnicate", out, sizeof out) == 2 && strstr(out, "unknown command 'frobnicate'"), "unknown command");
    T_CHECK(run("help", out, sizeof out) == 0 && strstr(out, "llm-gguf synth"), "help");
    T_CHECK(run("info", out, sizeof out) == 2 && strstr(out, "info needs a FILE"), "info without file");
    T_CHECK(run("info /nonexistent.gguf", out, sizeof out) == 1 && strstr(out, "llm-gguf: /nonexistent.gguf: cannot open") &&
                count_lines(out) == 1,
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
    T_CHECK(run(args, out, sizeof out) == 0 && out[0] == '{' && strstr(out, "\"tokenizer.ggml.tokens\":{\"type\":\"str\",\"length\":") &&
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
    T_CHECK(ne0 > 0 && sb.st_size == 4 * ne0 * ne1, "dequant wrote %lld bytes for %ld x %ld", (long long)sb.st_size, ne0, ne1);
    snprintf(args, sizeof args, "dequant %s no.such.tensor %s", model, f32);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "no tensor named 'no.such.tensor'"), "missing tensor: %s", out);
    snprintf(args, sizeof args, "dequant %s", model);
    T_CHECK(run(args, out, sizeof out) == 2, "dequant with missing arguments");
    snprintf(args, sizeof args, "quantize %s %s/q.gguf Q3_K", model, dir);
    T_CHECK(run(args, out, sizeof out) == 2 && strstr(out, "TYPE"), "unknown quantize type");
    snprintf(args, sizeof args, "quantize %s %s/q.gguf Q4_K_M", model, dir);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "Q8_0") && strstr(out, "F32, F16 or BF16"),
            "quantize refuses an already quantised input: %s", out);

    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    if (system(args) != 0) printf("note: could not remove %s\n", dir);
    return t_done();
}
