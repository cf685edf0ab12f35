/* test-run: llm-run and llm-bench as a user runs them, on a synthetic qwen3 model.
 *
 * The reference for what the tools print is the public API driven here step by step: --logits-out
 * must hold exactly the logits infer_logits gives for every prompt position, and greedy --print-ids
 * must be the argmax chain computed here (one thread on both sides, so the sums run in one order).
 * The library's logits themselves are checked against llama.cpp by test-llama-logits. Usage errors
 * exit 2 with one line naming the flag; failures exit 1 with one line. Skips (loudly) when the forward
 * pass reports the architecture unsupported.
 *   --chat: the prompt ids (--verbose-prompt) equal hand-written ChatML (qwen3) and Llama 3 (llama)
 *   sequences, derived below from the synthetic vocabulary;
 *   --top-k 1 at temperature 1 gives exactly the greedy ids (also with --mtp 3);
 *   each sampling flag (-s, --temp, --top-k, --top-p, --min-p, the three penalties, --repeat-last-n) gives
 *   the ids the API gives with that parameter, and different ids than without it; no flags give the
 *   documented defaults.
 *   Placement flags without a GPU: -ot's form is checked by the tools (a bad entry is one line naming it, exit
 *   2), -ot reaches the plan (--dry-run for a card we do not have refuses an attention weight on the CPU,
 *   naming it, also when it is the second of two -ot flags: they accumulate), -sm tensor is refused as not
 *   implemented; llm-bench's --n-cpu-moe and -sm lists give a row per combination with the n_cpu_moe,
 *   split_mode, override_tensors and bus_bytes_per_token columns (0 on the CPU), and md shows n_cpu_moe. */
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

/* The ids of llm-run's --verbose-prompt lines ("%6d -> 'piece'") in out; returns their count. */
static int prompt_ids(const char *out, int32_t *ids, int cap) {
    int n = 0;
    for (const char *line = out; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        int id;
        char quote;
        if (sscanf(line, "%d -> %c", &id, &quote) == 2 && quote == '\'' && n < cap) ids[n++] = id;
    }
    return n;
}

/* The synthetic vocabulary (tools/synth.c): byte b is token b; merged token 256 + k joins L[k / 16] (L: the
 * letters 'a'..'p', then the merged tokens) with the letter 'a' + k % 16, rank k; the control tokens are the
 * last ids of the 640. So "el" is k = 4 * 16 + 11 = 75 (331), "lo" k = 11 * 16 + 14 = 190 (446), "an"
 * k = 13 (269); "Hello" merges "el" (rank 75) before "ll" (187) and "lo" (190), then "lo": H el lo. Only
 * pairs ending in a..p merge, so "user" and the rest of "assistant" stay bytes. */
enum { NL = 10, QWEN_IM_START = 638, QWEN_IM_END = 639 };                    /* <|endoftext|> is 637 */
enum { L3_BOT = 635, L3_START_HEADER = 637, L3_END_HEADER = 638, L3_EOT = 639 }; /* <|end_of_text|> is 636 */
#define IDS_USER 117, 115, 101, 114
#define IDS_ASSISTANT 97, 115, 115, 105, 115, 116, 269, 116
#define IDS_HELLO 72, 331, 446
/* "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n" (llama.cpp's chatml, no BOS for qwen) */
static const int32_t chatml_hello[] = {QWEN_IM_START, IDS_USER, NL, IDS_HELLO, QWEN_IM_END, NL,
                                       QWEN_IM_START, IDS_ASSISTANT, NL};
/* "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant
 * <|end_header_id|>\n\n": one BOS, the message trimmed, "\n\n" two byte tokens in this vocabulary */
static const int32_t llama3_hello[] = {L3_BOT, L3_START_HEADER, IDS_USER, L3_END_HEADER, NL, NL, IDS_HELLO,
                                       L3_EOT, L3_START_HEADER, IDS_ASSISTANT, L3_END_HEADER, NL, NL};

/* llm-run --chat --verbose-prompt on model with prompt: its prompt ids equal want[0..n). */
static void check_chat(const char *model, const char *prompt, const char *what, const int32_t *want, int n) {
    static char out[1 << 16];
    char args[1024];
    int32_t got[64];
    snprintf(args, sizeof args, "-m %s -p %s --chat --verbose-prompt -n 0 -t 1", model, prompt);
    const int rc = run(run_tool, args, 1, out, sizeof out), n_got = prompt_ids(out, got, 64);
    int first = -1;
    for (int i = 0; i < n || i < n_got; i++)
        if (i >= n || i >= n_got || got[i] != want[i]) {
            first = i;
            break;
        }
    T_CHECK(rc == 0 && first < 0, "--chat %s: %d prompt ids, expected %d, first difference at %d (got %d, want %d):\n%s",
            what, n_got, n, first, first >= 0 && first < n_got ? got[first] : -1, first >= 0 && first < n ? want[first] : -1,
            out);
}

/* The reference for llm-run --ids PROMPT -n n_gen -t 1 --print-ids with sampler sp: the API as llm-run drives
 * it — the prompt in one batch and recorded in the sampler, then each token sampled from the last logits
 * and decoded, up to an end of generation — printed as llm-run prints it ("a b c\n"). 0 on failure. */
static int api_ids(const infer_model *m, const int32_t *prompt, int n_prompt, infer_sampler_params sp, int n_gen,
                   char *out, size_t cap) {
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_threads = 1;
    infer_ctx *c = NULL;
    infer_sampler *s = NULL;
    infer_batch b = {n_prompt, prompt, NULL, NULL, NULL};
    int ok = infer_ctx_create(m, &cp, &c) == INFER_OK && infer_sampler_create(&sp, infer_vocab_size(m), &s) == INFER_OK &&
             infer_decode(c, &b) == INFER_OK;
    for (int i = 0; ok && i < n_prompt; i++) infer_sampler_accept(s, prompt[i]);
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; ok && i < n_gen; i++) {
        int32_t t = infer_sampler_sample(s, infer_logits(c, -1));
        if (infer_token_is_eog(m, t)) break;
        k += (size_t)snprintf(out + k, cap - k, "%s%d", i ? " " : "", t);
        infer_batch one = {1, &t, NULL, NULL, NULL};
        ok = k < cap && (i + 1 == n_gen || infer_decode(c, &one) == INFER_OK);
    }
    ok = ok && (size_t)snprintf(out + k, cap - k, "\n") < cap - k;
    infer_sampler_free(s), infer_ctx_free(c);
    return ok;
}

/* Each sampling flag on top of a base with every filter off: llm-run's ids equal the API's with that one
 * parameter set, and differ from the ids without it (so the flag reached the sampler and mattered). */
static void check_sampling_flags(const char *model, const infer_model *m) {
    enum { N_GEN = 16, N_CASES = 11 };
    static const int32_t prompt[] = {5, 17, 42, 3, 99, 250, 5, 17};
    const char *base_flags = "--temp 1 --top-k 0 --top-p 1 --min-p 0 --repeat-last-n 64 -s 5";
    infer_sampler_params base = infer_sampler_params_default();
    base.temp = 1, base.top_k = 0, base.top_p = 1, base.min_p = 0, base.penalty_last_n = 64, base.seed = 5;
    /* extra flags (after the base: the last value of a flag wins), the parameters they set, and a case whose
     * ids they must change besides the base's: for --repeat-last-n the penalty it shortens, for --top-k 1 the
     * temperature alone (random weights give nearly flat logits: a flag moves the picks by a few ids) */
    static const char *const extra[N_CASES] = {"", "-s 6", "--temp 0.3", "--top-k 3", "--top-p 0.5", "--min-p 0.9",
                                               "--repeat-penalty 3", "--presence-penalty 2", "--frequency-penalty 2",
                                               "--repeat-penalty 3 --repeat-last-n 4", "--temp 0.3 --top-k 1"};
    infer_sampler_params sp[N_CASES];
    int against[N_CASES];
    for (int i = 0; i < N_CASES; i++) sp[i] = base, against[i] = 0;
    sp[1].seed = 6, sp[2].temp = 0.3f, sp[3].top_k = 3, sp[4].top_p = 0.5f, sp[5].min_p = 0.9f;
    sp[6].repeat_penalty = 3, sp[7].presence_penalty = 2, sp[8].frequency_penalty = 2;
    sp[9].repeat_penalty = 3, sp[9].penalty_last_n = 4, against[9] = 6;
    sp[10].temp = 0.3f, sp[10].top_k = 1, against[10] = 2;
    static char want[N_CASES][512], got[4096];
    char args[1024];
    for (int i = 0; i < N_CASES; i++) {
        if (!api_ids(m, prompt, 8, sp[i], N_GEN, want[i], sizeof want[i])) {
            T_CHECK(0, "API reference for '%s': %s", extra[i], infer_last_error());
            continue;
        }
        snprintf(args, sizeof args, "-m %s --ids 5,17,42,3,99,250,5,17 -n %d -t 1 --print-ids %s %s", model, N_GEN,
                 base_flags, extra[i]);
        T_CHECK(run(run_tool, args, 0, got, sizeof got) == 0 && !strcmp(got, want[i]),
                "sampling '%s': llm-run gives %s       the API gives %s", extra[i], got, want[i]);
        if (i > 0)
            T_CHECK(strcmp(want[i], want[0]) != 0 && strcmp(want[i], want[against[i]]) != 0,
                    "sampling '%s' gives the ids of the base or of '%s': %s", extra[i], extra[against[i]], want[i]);
    }
    /* no sampling flags but the seed: the documented defaults (0.8, 40, 0.95, 0.05, penalties off) */
    infer_sampler_params d = infer_sampler_params_default();
    d.seed = 5;
    snprintf(args, sizeof args, "-m %s --ids 5,17,42,3,99,250,5,17 -n %d -t 1 --print-ids -s 5", model, N_GEN);
    T_CHECK(api_ids(m, prompt, 8, d, N_GEN, want[0], sizeof want[0]) && run(run_tool, args, 0, got, sizeof got) == 0 &&
            !strcmp(got, want[0]), "default sampling: llm-run gives %s       the API gives %s", got, want[0]);
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
    T_CHECK(run(run_tool, "-m x.gguf -p hi -ot foo", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "-ot: 'foo' is not PATTERN=DEVICE"), "-ot foo: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -ot 'a=CPU,b=GPU0'", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "'b=GPU0'"), "-ot with an unknown device: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -ot 'blk(=CPU'", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "'blk(' is not a valid extended regular expression"), "-ot with a bad pattern: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi --override-tensor 'a=CUDA0,'", 1, out, sizeof out) == 2 &&
                count_lines(out) == 1 && strstr(out, "empty entry"), "-ot with an empty entry: %s", out);
    T_CHECK(run(bench_tool, "-m x.gguf -ot 'a=CPU;b=CUDAx'", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "'b=CUDAx'"), "bench -ot with a bad device in a set: %s", out);
    T_CHECK(run(bench_tool, "-m x.gguf -sm row", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "-sm row: llama.cpp's row split is not supported") && strstr(out, "-sm tensor"),
            "bench -sm row: %s", out);
    T_CHECK(run(bench_tool, "-m x.gguf -sm none,rows", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "'rows'"), "bench -sm rows: %s", out);
    T_CHECK(run(bench_tool, "-m x.gguf --n-cpu-moe 0,x", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "--n-cpu-moe: 'x'"), "bench --n-cpu-moe 0,x: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -sm none,layer", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "is a list"), "llm-run -sm takes one mode: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -sm row", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "not supported"), "llm-run -sm row: %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -sm tensor", 1, out, sizeof out) == 1 && count_lines(out) == 1 &&
                strstr(out, "x.gguf: cannot open"), "llm-run -sm tensor is a split mode (the load fails): %s", out);
    T_CHECK(run(run_tool, "-m x.gguf -p hi -ts 1,-1", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "negative share"), "-ts 1,-1: %s", out);
    T_CHECK(run(bench_tool, "-m x.gguf -ts 0/0", 1, out, sizeof out) == 2 && count_lines(out) == 1 &&
                strstr(out, "no device a share"), "bench -ts 0/0: %s", out);
    T_CHECK(run(run_tool, "--help", 1, out, sizeof out) == 0 && strstr(out, "--override-tensor") &&
                strstr(out, "expert offload") && !strstr(out, "planned") && !strstr(out, "refused at load"),
            "llm-run --help: -ot, and expert offload runs: %s", out);
    T_CHECK(run(bench_tool, "--help", 1, out, sizeof out) == 0 && strstr(out, "--n-cpu-moe N[,N...]") &&
                strstr(out, "-ot P=D") && strstr(out, "-sm M[,M...]"), "llm-bench --help: %s", out);

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
    check_chat(model, "Hello", "qwen3 (ChatML)", chatml_hello, (int)(sizeof chatml_hello / sizeof *chatml_hello));
    char llama_model[640];
    snprintf(llama_model, sizeof llama_model, "%s/llama.gguf", dir);
    struct synth_params lp;
    synth_params_default("llama", &lp);
    T_CHECK(synth_write(&lp, llama_model) == INFER_OK, "synth llama: %s", infer_last_error());
    check_chat(llama_model, "' Hello \n'", "llama (Llama 3)", llama3_hello, (int)(sizeof llama3_hello / sizeof *llama3_hello));
    check_sampling_flags(model, m);
    /* --top-k 1 leaves one candidate: at temperature 1 and any seed, the greedy chain */
    snprintf(args, sizeof args, "-m %s --ids 5,17,42,3,99,250 -n 8 --temp 1 --top-k 1 --top-p 1 --min-p 0 -s 123 -t 1 "
             "--print-ids", model);
    T_CHECK(run(run_tool, args, 0, out, sizeof out) == 0 && !strcmp(out, want), "--top-k 1: '%s', greedy '%s'", out, want);
    snprintf(args, sizeof args, "-m %s -p 'a b c d e f g h i j k l m n o p' -c 4", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 1 && count_lines(out) == 1 && strstr(out, "does not fit"),
            "prompt longer than the context: %s", out);
    snprintf(args, sizeof args, "-m %s --ids %d", model, n_vocab);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 1 && strstr(out, "outside the vocabulary"), "id out of range: %s",
            out);
    snprintf(args, sizeof args, "-m %s -p 'a b c' -c 6 -n -1 --temp 0 --print-ids", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 0 && strstr(out, "context full"), "-n -1 stops at a full context: %s",
            out);

    /* ---- placement flags reach the plan: --dry-run for a card we do not have ---- */
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 99 --dry-run-mem 8G", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 0, "--dry-run -ngl 99: %s", out);
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 99 --dry-run-mem 8G -ot 'nothing\\.matches=CPU' "
             "-ot 'blk\\.0\\.attn_q\\.weight=CPU'", model);
    T_CHECK(run(run_tool, args, 1, out, sizeof out) == 1 && count_lines(out) == 1 && strstr(out, "blk.0.attn_q.weight"),
            "--dry-run with an attention weight to the CPU (the second -ot): refused, naming it: %s", out);

    /* ---- llm-bench ---- */
    snprintf(args, sizeof args, "-m %s -p 8 -n 2 -r 1 -t 1 --n-cpu-moe 0,2 -sm none -o csv", model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && count_lines(out) == 5 &&
                strstr(out, ",n_cpu_moe,split_mode,override_tensors,bus_bytes_per_token\n") &&
                strstr(out, ",0,none,\"\",0.0\n") && strstr(out, ",2,none,\"\",0.0\n"),
            "bench csv: --n-cpu-moe 0,2 on the CPU, 2 placements x 2 tests + header: %s", out);
    snprintf(args, sizeof args, "-m %s -p 8 -n 0 -r 1 -t 1 --cpu-moe", model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && strstr(out, "| backend | n_cpu_moe | threads |") &&
                strstr(out, "| CPU | all | 1 | pp8 |") && !strstr(out, "bus KB/token"),
            "bench md --cpu-moe: %s", out);
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
    /* rejection sampling against one-candidate distributions (top-p and min-p off, which alone would leave
     * this bigram model one candidate): the greedy ids again */
    snprintf(args, sizeof args, "-m %s --ids 5,17,42 -n 40 --temp 20 --top-k 1 --top-p 1 --min-p 0 -s 9 -t 1 "
             "--print-ids --mtp 3", mtp_model);
    T_CHECK(run(run_tool, args, 0, out2, sizeof out2) == 0 && !strcmp(out, out2),
            "--mtp 3 --top-k 1 at temperature 20 gives the greedy ids: %s / %s", out, out2);
    snprintf(args, sizeof args, "-m %s -p 0 -n 8 -r 1 -t 1 --mtp 2", mtp_model);
    T_CHECK(run(bench_tool, args, 0, out, sizeof out) == 0 && strstr(out, "| tg8 |") && strstr(out, "| tg8 mtp2 |") &&
                strstr(out, "accepted/step") && strstr(out, "| 2.00 | 3.00 |"), "bench --mtp 2: %s", out);

    infer_model_free(m);
    snprintf(args, sizeof args, "rm -rf %s", dir);
    if (system(args) != 0) printf("note: could not remove %s\n", dir);
    return t_done();
}
