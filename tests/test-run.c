/* test-run: llm-run and llm-bench as a user runs them, on a synthetic qwen3 model.
 *
 * The reference for what the tools print is the public API driven here step by step: --logits-out
 * must hold exactly the logits infer_logits gives for every prompt position, and greedy --print-ids
 * must be the argmax chain computed here (one thread on both sides, so the sums run in one order).
 * The library's logits themselves are checked against llama.cpp by test-llama-logits. Usage errors
 * exit 2 with one line naming the flag; failures exit 1 with one line. Skips (loudly) when the forward
 * pass reports the architecture unsupported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "t.h"

static char run_tool[512], bench_tool[512], dir[] = "/tmp/test-run-XXXXXX";

/* Runs "tool args" capturing stdout (and stderr unless quiet); returns the exit status. */
static int run(const char *tool, const char *args, int with_err, char *out, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s %s", tool, args, with_err ? "2>&1" : "2>/dev/null");
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

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

int main(void) {
    static char out[1 << 20];
    char args[2048], model[600], logits[640];
    const char *b = getenv("INFER_BUILD_DIR");
    snprintf(run_tool, sizeof run_tool, "%s/llm-run", b ? b : "build");
    snprintf(bench_tool, sizeof bench_tool, "%s/llm-bench", b ? b : "build");
    if (access(run_tool, X_OK) != 0 || access(bench_tool, X_OK) != 0 || !mkdtemp(dir)) {
        T_CHECK(0, "%s or %s not built", run_tool, bench_tool);
        return t_done();
    }
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(logits, sizeof logits, "%s/l.f32", dir);

    /* ---- usage errors: exit 2, one line naming the problem ---- */
    T_CHECK(run(run_tool, "--help", 1, out, sizeof out) == 0 && strstr(out, "--logits-out"), "help");
    T_CHECK(run(run_tool, "-p hi", 1, out, sizeof out) == 2 && strstr(out, "-m MODEL is required"), "no model: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -n 12x", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "-n: '12x' is not an integer"), "bad -n: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi --temp nan", 1, out, sizeof out) == 2 && strstr(out, "--temp"),
            "bad --temp: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi --top-k 99999999999", 1, out, sizeof out) == 2 && strstr(out, "out of range"),
            "huge --top-k: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi --bogus 1", 1, out, sizeof out) == 2 && strstr(out, "'--bogus'"),
            "unknown flag: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -ngl x", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "-ngl: 'x' is not an integer"), "-ngl x: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi --mtp 5", 1, out, sizeof out) == 2 && strstr(out, "--mtp: '5'"),
            "--mtp 5: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi --ids 1,2", 1, out, sizeof out) == 2 && strstr(out, "exactly one"),
            "-p and --ids: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf --ids 1,,2", 1, out, sizeof out) == 2 && strstr(out, "--ids"), "bad --ids: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -ctk q4_0 -ctv q4_0", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "-ctk: 'q4_0'"), "-ctk q4_0: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -ctk q8_0", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "different types"), "-ctk q8_0 with an f16 V cache: %s", out);
    T_CHECK(run(run_tool, "-m /nonexistent.gguf -p hi", 1, out, sizeof out) == 1 && count_lines(out) == 1 &&
                strstr(out, "/nonexistent.gguf"), "missing model: %s", out);
    T_CHECK(run(bench_tool, "-m x.gguf -o xml", 1, out, sizeof out) == 2 && strstr(out, "-o: 'xml'"), "bench -o: %s", out);
    T_CHECK(run(bench_tool, "-m x.gguf -p 1,a", 1, out, sizeof out) == 2 && strstr(out, "-p"), "bench -p: %s", out);
    T_CHECK(run(bench_tool, "-m /nonexistent.gguf", 1, out, sizeof out) == 1 && count_lines(out) == 1,
            "bench missing model: %s", out);

    /* ---- the model; skip the rest when there is no forward pass for it ---- */
    struct synth_params sp;
    synth_params_default("qwen3", &sp);
    sp.ftype = "Q8_0";
    sp.seed = 7;
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_threads = 1;
    if (synth_write(&sp, model) != INFER_OK || infer_model_load(model, NULL, &m) != INFER_OK) {
        T_CHECK(0, "synthetic model: %s", infer_last_error());
        return t_done();
    }
    infer_status st = infer_ctx_create(m, &cp, &c);
    if (st == INFER_E_UNSUPPORTED) {
        printf("**************** no forward pass for qwen3 yet: llm-run/llm-bench generation tests skipped ****\n");
        T_SKIP("infer_ctx_create: %s", infer_last_error());
        infer_model_free(m);
        return t_done();
    }
    T_CHECK(st == INFER_OK, "context: %s", infer_last_error());
    const int n_vocab = infer_vocab_size(m);

    /* reference: logits of every prompt position and the greedy chain, through the API */
    const int32_t prompt[] = {5, 17, 42, 3, 99, 250};
    const int n_prompt = 6, n_gen = 8;
    float *ref = malloc(sizeof(float) * (size_t)n_prompt * (size_t)n_vocab);
    int32_t chain[8];
    int8_t all[6] = {1, 1, 1, 1, 1, 1};
    infer_batch batch = {n_prompt, prompt, NULL, NULL, all};
    T_CHECK(infer_decode(c, &batch) == INFER_OK, "decode: %s", infer_last_error());
    for (int i = 0; i < n_prompt; i++) memcpy(ref + (size_t)i * n_vocab, infer_logits(c, i), sizeof(float) * n_vocab);
    for (int i = 0; i < n_gen; i++) {
        chain[i] = argmax(infer_logits(c, -1), n_vocab);
        infer_batch one = {1, &chain[i], NULL, NULL, NULL};
        if (i + 1 < n_gen) T_CHECK(infer_decode(c, &one) == INFER_OK, "decode step %d", i);
    }
    infer_ctx_free(c);

    snprintf(args, sizeof args, "-m %s --ids 5,17,42,3,99,250 -n 8 --temp 0 -t 1 --print-ids --logits-out %s", model,
             logits);
    T_CHECK(run(run_tool, args, 0, out, sizeof out) == 0, "llm-run greedy: %s", out);
    char want[256];
    int k = 0;
    for (int i = 0; i < n_gen; i++) k += snprintf(want + k, sizeof want - (size_t)k, "%s%d", i ? " " : "", chain[i]);
    snprintf(want + k, sizeof want - (size_t)k, "\n");
    T_CHECK(!strcmp(out, want), "greedy ids '%s', expected '%s'", out, want);
    FILE *f = fopen(logits, "rb");
    float *got = malloc(sizeof(float) * (size_t)(n_prompt * n_vocab + 1));
    size_t n_read = f ? fread(got, sizeof(float), (size_t)(n_prompt * n_vocab + 1), f) : 0;
    if (f) fclose(f);
    T_CHECK(n_read == (size_t)(n_prompt * n_vocab), "--logits-out holds %zu floats, expected %d x %d", n_read, n_prompt,
            n_vocab);
    T_CHECK(n_read == (size_t)(n_prompt * n_vocab) && !memcmp(got, ref, n_read * sizeof(float)),
            "--logits-out equals infer_logits for every position");
    /* the same logits when the prompt is read in chunks of 4 (two decode calls) */
    snprintf(args, sizeof args, "-m %s --ids 5,17,42,3,99,250 -n 0 -b 4 -t 1 --logits-out %s", model, logits);
    T_CHECK(run(run_tool, args, 0, out, sizeof out) == 0, "chunked prompt");
    f = fopen(logits, "rb");
    n_read = f ? fread(got, sizeof(float), (size_t)(n_prompt * n_vocab + 1), f) : 0;
    if (f) fclose(f);
    int close = n_read == (size_t)(n_prompt * n_vocab);
    for (size_t i = 0; close && i < n_read; i++) close = fabsf(got[i] - ref[i]) <= 1e-3f * (1 + fabsf(ref[i]));
    T_CHECK(close, "chunked prompt logits match one batch (%zu floats)", n_read);
    free(got);
    free(ref);

    /* sampling: the same seed gives the same text, and -n bounds it */
    char out2[4096];
    snprintf(args, sizeof args, "-m %s -p 'Once upon a time' -n 12 -s 5 --temp 1.0 --print-ids", model);
    T_CHECK(run(run_tool, args, 0, out, sizeof out) == 0, "sampled run");
    T_CHECK(run(run_tool, args, 0, out2, sizeof out2) == 0 && !strcmp(out, out2), "same seed, same ids: %s / %s", out,
            out2);
    int n_ids = 0;
    for (char *p = strtok(out, " \n"); p; p = strtok(NULL, " \n")) n_ids++;
    T_CHECK(n_ids <= 12 && n_ids > 0, "-n 12 gives %d ids", n_ids);
    snprintf(args, sizeof args, "-m %s -p 'Once upon a time' -n 12 -s 5 --repeat-penalty 1.3 --presence-penalty 0.5 "
             "--frequency-penalty 0.2 --top-k 5 --top-p 0.9 --min-p 0.1", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 0 && strstr(out, "generation") && strstr(out, "t/s"),
            "all sampling flags, speeds on stderr: %s", out);
    snprintf(args, sizeof args, "-m %s -p 'Hello' --chat -n 4 -s 1", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 0, "--chat on qwen3: %s", out);
    snprintf(args, sizeof args, "-m %s -p 'a b c d e f g h i j k l m n o p' -c 4", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 1 && count_lines(out) == 1 && strstr(out, "does not fit"),
            "prompt longer than the context: %s", out);
    snprintf(args, sizeof args, "-m %s --ids %d", model, n_vocab);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 1 && strstr(out, "outside the vocabulary"), "id out of range: %s",
            out);
    snprintf(args, sizeof args, "-m %s -p 'a b c' -c 6 -n -1 --temp 0 --print-ids", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 0 && strstr(out, "context full"), "-n -1 stops at a full context: %s",
            out);

    /* ---- llm-bench ---- */
    snprintf(args, sizeof args, "-m %s -p 16 -n 4 -r 2 -t 1", model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && strstr(out, "| model | size | params | backend | threads "
            "| test | t/s |") && strstr(out, "| pp16 |") && strstr(out, "| tg4 |") && strstr(out, " ± "),
            "bench markdown: %s", out);
    snprintf(args, sizeof args, "-m %s -m %s -p 8 -n 2 -d 0,8 -r 2 -t 1 -o csv", model, model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && count_lines(out) == 9 && strstr(out, ",8,0,8,"),
            "bench csv: 2 models x 2 depths x 2 tests + header: %s", out);
    snprintf(args, sizeof args, "-m %s -p 8 -n 2 -r 1 -t 1 -o json", model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && out[0] == '[' && strstr(out, "\"n_gen\": 2") &&
                strstr(out, "]\n"), "bench json: %s", out);
    snprintf(args, sizeof args, "-m %s -p 8 -n 2 -r 1 -t 1 -ctk q8_0 -ctv q8_0", model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && strstr(out, "| pp8 kv q8_0 |") && strstr(out, "| tg2 kv q8_0 |"),
            "bench with a q8_0 cache: %s", out);
    snprintf(args, sizeof args, "-m %s --ids 5,17,42 -n 4 --temp 0 -t 1 --print-ids -ctk q8_0 -ctv q8_0", model);
    T_CHECK(run(run_tool, args, 0, out, sizeof out) == 0 && count_lines(out) == 1, "llm-run with a q8_0 cache: %s", out);

    /* ---- --mtp: refused without an MTP layer; on a model whose MTP head agrees with it, the same ids
     * as plain greedy decoding with every draft accepted; llm-bench adds the drafted tg row ---- */
    snprintf(args, sizeof args, "-m %s -p hi --mtp 2", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 1 && count_lines(out) == 1 && strstr(out, "no MTP layer"),
            "--mtp on qwen3: %s", out);
    char mtp_model[640];
    snprintf(mtp_model, sizeof mtp_model, "%s/mtp.gguf", dir);
    synth_params_default("qwen35moe", &sp);
    sp.ftype = "Q8_0", sp.seed = 3, sp.mtp = 1, sp.mtp_agree = 1;
    T_CHECK(synth_write(&sp, mtp_model) == INFER_OK, "synth qwen35moe --mtp-agree: %s", infer_last_error());
    snprintf(args, sizeof args, "-m %s --ids 5,17,42 -n 40 --temp 0 -t 1 --print-ids", mtp_model);
    T_CHECK(run(run_tool, args, 0, out, sizeof out) == 0, "plain greedy on the MTP model");
    snprintf(args, sizeof args, "-m %s --ids 5,17,42 -n 40 --temp 0 -t 1 --print-ids --mtp 3", mtp_model);
    T_CHECK(run(run_tool, args, 0, out2, sizeof out2) == 0 && !strcmp(out, out2), "--mtp 3 gives the same ids: %s / %s",
            out, out2);
    T_CHECK(run(run_tool, args, 1, out2, sizeof out2) == 0 && strstr(out2, "mean accepted length 3.000") &&
                strstr(out2, "4.000 tokens per forward"), "--mtp 3 reports full acceptance: %s", out2);
    snprintf(args, sizeof args, "-m %s -p 0 -n 8 -r 1 -t 1 --mtp 2", mtp_model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && strstr(out, "| tg8 |") && strstr(out, "| tg8 mtp2 |") &&
                strstr(out, "accepted/step") && strstr(out, "| 2.00 | 3.00 |"), "bench --mtp 2: %s", out);

    infer_model_free(m);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    if (system(args) != 0) printf("note: could not remove %s\n", dir);
    return t_done();
}
