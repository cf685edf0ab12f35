/* test-gpu-tools: llm-run and llm-bench with -ngl 99 and with splits as a user runs them, on a CUDA device (a
 * real one, or the emulator in build-emu, where `make check-emu` runs this).
 *   - every architecture (llama, qwen3, qwen3moe, qwen35, qwen35moe, qwen3next) in F32, and qwen3 / qwen35 in
 *     Q8_0: `llm-run --temp 0 --print-ids` gives the same 24 greedy tokens with -ngl 99 as with -ngl 0 (a
 *     divergence is accepted only at a near-tie: the CPU's top-2 logit gap at that step below 1e-3, printed);
 *   - the same with splits: -ngl 1 for every architecture in F32 (one layer on the GPU; two for the dense
 *     ones, four for the hybrid ones), -ngl 2 for llama (the layer count: every layer on the GPU, the head
 *     on the CPU) and qwen35 Q8_0 (half);
 *   - `llm-bench -ngl 99` runs pp and tg and prints CUDA rows (and, on the emulator, its per-call counters);
 *     `-ngl 1` prints CUDA+CPU rows.
 *   - expert offload, for qwen3moe and qwen35moe in F32: the same greedy ids as -ngl 0 with --cpu-moe -ngl 99,
 *     --n-cpu-moe 2 -ngl 99, -ot "blk\.1\.ffn_.*_exps=CPU" -ngl 99 and -ngl 3 --n-cpu-moe 99 (a layer split
 *     with offload; for the two-layer qwen3moe -ngl 3 is the whole model);
 *   - `llm-bench -ngl 0,99 --n-cpu-moe 0,2 -o csv` runs every combination, each row tagged with its placement
 *     (n_gpu_layers, n_cpu_moe, backend CPU / CUDA / CUDA+CPU(moe)), with bus bytes per token 0 on the CPU,
 *     above 0 on the GPU and larger with the experts offloaded than without; -ot's alternative sets (llama-bench's
 *     ',' between sets, ';' within one) are rows of their own, the set of two layers moving more than the set of
 *     one; -ngl 3 --cpu-moe is labelled CUDA+CPU(layers,moe) in md with its ngl and n_cpu_moe columns;
 *   - refusals: -sm row (exit 2, pointing at -sm tensor), -sm tensor with -ngl 3 (exit 1, one line), -ot foo
 *     (exit 2, one line naming 'foo'), and an -ot the library cannot run (an attention weight to the CPU under
 *     -ngl 99: exit 1, one line naming the tensor).
 * Emulator only (the device's memory and count are set by environment there):
 *   - INFER_EMU_MEM below what the weights need: -ngl 99 is one line naming the MiB needed and free, exit 1;
 *     so is the split -ngl 1 with 200M, naming the layers; with 260M (the 256 MiB reserve, then 4 MiB) the
 *     whole model (5.8 MiB) is refused while -ngl 1 (2.3 MiB) loads and gives the CPU's tokens: the fit
 *     counts only what goes to the device; with 300M the weights fit but a context of 10^6 cells does not:
 *     infer_ctx_create refuses it with what it needs and what is free, before allocating any cell; under -sm tensor
 *     over 2 devices a rank's shards that do not fit (200M) and a context whose rank part does not (300M,
 *     -c 2000000) are each one line with both numbers;
 *   - INFER_EMU_DEVICES=2 with -mg 1: the same tokens, and the emulator's exit statistics (INFER_EMU_STATS=1)
 *     show device 0 untouched (no launch, allocation, sync or copy) and device 1 doing the work;
 *   - INFER_EMU_DEVICES=2 with -sm layer: the CPU's tokens (-ngl 99 -ts 1,1 on qwen35moe, -ngl 3 on qwen35: the
 *     host and both devices), and so does -sm tensor (qwen35moe -ngl 99), also over two processes as README's
 *     commands run it (a --tp-serve follower in the background, which then ends silently with the leader);
 *     llm-bench -sm none,layer,tensor gives a row of each; llm-run -sm tensor --mtp 2 (qwen35 with an MTP head)
 *     gives the CPU's plain greedy ids.
 * Without a device: SKIP (exit 77). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "t.h"

enum { N_GEN = 24 };
static const char *prompt = "--ids 5,17,29,3,41,7,11,2";
static char dir[] = "/tmp/test-gpu-tools-XXXXXX", build[400];

/* Runs "env tool args" with stdout and stderr in out; returns the exit status. */
static int run(const char *env, const char *tool, const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "env %s %s/%s %s 2>&1", env, build, tool, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    while (fgetc(p) != EOF) {
    }
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The line of out that starts with a digit (--print-ids' output), or "". */
static void ids_line(const char *out, char *ids, size_t cap) {
    ids[0] = 0;
    for (const char *l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (*l >= '0' && *l <= '9') {
            size_t n = strcspn(l, "\n");
            if (n >= cap) n = cap - 1;
            memcpy(ids, l, n);
            ids[n] = 0;
            return;
        }
}

static int with_mtp; /* synth() writes files with an MTP head (for llm-run --mtp) */

static const char *synth(const char *arch, const char *ftype) {
    static char path[512];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 7, sp.mtp = with_mtp;
    snprintf(path, sizeof path, "%s/%s-%s%s.gguf", dir, arch, ftype, with_mtp ? "-mtp" : "");
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s: %s", arch, ftype, infer_last_error());
        return NULL;
    }
    return path;
}

/* The gap between the CPU's two largest logits after prompt + the first `step` generated ids. */
static double cpu_gap(const char *path, const char *ids, int step) {
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    double gap = INFINITY;
    int32_t tok[64] = {5, 17, 29, 3, 41, 7, 11, 2};
    int n = 8;
    const char *s = ids;
    for (int i = 0; i < step && n < 64; i++) {
        tok[n++] = (int32_t)strtol(s, (char **)&s, 10);
    }
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = 64, cp.n_threads = 1;
    if (infer_model_load(path, NULL, &m) == INFER_OK && infer_ctx_create(m, &cp, &c) == INFER_OK) {
        infer_batch b = {n, tok, NULL, NULL, NULL};
        if (infer_decode(c, &b) == INFER_OK) {
            const float *l = infer_logits(c, -1);
            double a = -INFINITY, b2 = -INFINITY;
            for (int32_t v = 0; v < infer_vocab_size(m); v++) {
                if (l[v] > a) b2 = a, a = l[v];
                else if (l[v] > b2) b2 = l[v];
            }
            gap = a - b2;
        }
    }
    infer_ctx_free(c);
    infer_model_free(m);
    return gap;
}

static void greedy_same(const char *arch, const char *ftype, const char *env, const char *gpu_flags) {
    const char *path = synth(arch, ftype);
    if (!path) return;
    char args[1024], out_cpu[8192], out_gpu[8192], cpu[1024], gpu[1024];
    snprintf(args, sizeof args, "-m %s %s -n %d --temp 0 --print-ids -t 1", path, prompt, N_GEN);
    int rc = run("", "llm-run", args, out_cpu, sizeof out_cpu);
    T_CHECK(rc == 0, "%s %s llm-run -ngl 0 (exit %d): %s", arch, ftype, rc, out_cpu);
    snprintf(args, sizeof args, "-m %s %s -n %d --temp 0 --print-ids -t 1 %s", path, prompt, N_GEN, gpu_flags);
    rc = run(env, "llm-run", args, out_gpu, sizeof out_gpu);
    T_CHECK(rc == 0, "%s %s llm-run %s (exit %d): %s", arch, ftype, gpu_flags, rc, out_gpu);
    ids_line(out_cpu, cpu, sizeof cpu);
    ids_line(out_gpu, gpu, sizeof gpu);
    if (!strcmp(cpu, gpu) && cpu[0]) {
        T_CHECK(1, "same ids");
        printf("  %-9s %-6s %s: the same %d greedy ids\n", arch, ftype, gpu_flags, N_GEN);
        return;
    }
    int step = 0; /* the first generated token that differs */
    const char *a = cpu, *b = gpu;
    while (*a && *b && strtol(a, NULL, 10) == strtol(b, NULL, 10)) {
        a = strchr(a, ' '), b = strchr(b, ' ');
        if (!a || !b) break;
        a++, b++, step++;
    }
    const double gap = cpu_gap(path, cpu, step);
    printf("  %-9s %-6s %s: ids differ at step %d, CPU top-2 gap there %.3g\n", arch, ftype, gpu_flags, step, gap);
    T_CHECK(cpu[0] && gap < 1e-3, "%s %s: -ngl 0 and %s greedy ids differ at step %d (not a near-tie: gap %.3g)\n  cpu %s\n  gpu %s",
            arch, ftype, gpu_flags, step, gap, cpu, gpu);
}

static void bench(void) {
    const char *path = synth("qwen35", "Q8_0");
    if (!path) return;
    char args[1024], out[16384];
    snprintf(args, sizeof args, "-m %s -p 16 -n 4 -r 1 -t 1 -ngl 99", path);
    const int rc = run("", "llm-bench", args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "| CUDA |") && strstr(out, "pp16") && strstr(out, "tg4"),
            "llm-bench -ngl 99 (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s -p 16 -n 4 -r 1 -t 1 -ngl 1", path);
    const int rc1 = run("", "llm-bench", args, out, sizeof out);
    T_CHECK(rc1 == 0 && strstr(out, "| CUDA+CPU |") && strstr(out, "pp16") && strstr(out, "tg4") &&
                strstr(out, "% of roofline"),
            "llm-bench -ngl 1, a split (exit %d): %s", rc1, out);
#ifdef INFER_EMU
    T_CHECK(strstr(out, "per infer_decode call") != NULL, "llm-bench prints the emulator's counters per call: %s", out);
#endif
}

static int n_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The field of CSV line `line` in column col (0-based; double quotes removed) in f. */
static void csv_field(const char *line, int col, char *f, size_t cap) {
    size_t n = 0;
    int quoted = 0;
    for (const char *c = line; *c && *c != '\n'; c++) {
        if (*c == '"') {
            quoted = !quoted;
            continue;
        }
        if (*c == ',' && !quoted) {
            if (col-- == 0) break;
            continue;
        }
        if (col == 0 && n + 1 < cap) f[n++] = *c;
    }
    f[n] = 0;
}

/* The column of name in the CSV header line hdr, or -1. */
static int csv_col(const char *hdr, const char *name) {
    char f[64];
    for (int col = 0; col < 64; col++) {
        csv_field(hdr, col, f, sizeof f);
        if (!strcmp(f, name)) return col;
    }
    return -1;
}

struct bench_row {
    int ngl, n_cpu_moe, pp;
    double bus;
    char backend[32], ot[128];
};

/* The data rows of llm-bench -o csv output (stderr mixed in: the header starts "model,", a row '"'). */
static int bench_rows(const char *out, struct bench_row *r, int cap) {
    const char *hdr = strstr(out, "model,model_path,");
    if (!hdr) return -1;
    const int c_ngl = csv_col(hdr, "n_gpu_layers"), c_moe = csv_col(hdr, "n_cpu_moe"), c_pp = csv_col(hdr, "n_prompt");
    const int c_bus = csv_col(hdr, "bus_bytes_per_token"), c_be = csv_col(hdr, "backend");
    const int c_ot = csv_col(hdr, "override_tensors");
    if (c_ngl < 0 || c_moe < 0 || c_pp < 0 || c_bus < 0 || c_be < 0 || c_ot < 0) return -1;
    int n = 0;
    char f[128];
    for (const char *l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (*l != '"' || n == cap) continue;
        csv_field(l, c_ngl, f, sizeof f);
        r[n].ngl = atoi(f);
        csv_field(l, c_moe, f, sizeof f);
        r[n].n_cpu_moe = atoi(f);
        csv_field(l, c_pp, f, sizeof f);
        r[n].pp = atoi(f) > 0;
        csv_field(l, c_bus, f, sizeof f);
        r[n].bus = atof(f);
        csv_field(l, c_be, r[n].backend, sizeof r[n].backend);
        csv_field(l, c_ot, r[n].ot, sizeof r[n].ot);
        n++;
    }
    return n;
}

/* The row of rows[0..n) with this placement and test (pp 1, tg 0), or NULL. */
static const struct bench_row *bench_find(const struct bench_row *rows, int n, int ngl, int n_cpu_moe, int pp) {
    for (int i = 0; i < n; i++)
        if (rows[i].ngl == ngl && rows[i].n_cpu_moe == n_cpu_moe && rows[i].pp == pp) return &rows[i];
    return NULL;
}

/* llm-bench's placements: -ngl x --n-cpu-moe (every combination), -ot's sets, the labels and the bus column. */
static void bench_offload(void) {
    const char *path = synth("qwen35moe", "F32");
    if (!path) return;
    static char out[32768];
    char args[1024];
    struct bench_row rows[16];
    snprintf(args, sizeof args, "-m %s -ngl 0,99 --n-cpu-moe 0,2 -p 8 -n 4 -r 1 -t 1 -o csv", path);
    int rc = run("", "llm-bench", args, out, sizeof out);
    int n = bench_rows(out, rows, 16);
    T_CHECK(rc == 0 && n == 8, "llm-bench -ngl 0,99 --n-cpu-moe 0,2: 2 x 2 placements x pp, tg (exit %d, %d rows): %s",
            rc, n, out);
    for (int pp = 0; pp < 2 && n == 8; pp++) {
        const struct bench_row *cpu0 = bench_find(rows, n, 0, 0, pp), *cpu2 = bench_find(rows, n, 0, 2, pp);
        const struct bench_row *gpu = bench_find(rows, n, 99, 0, pp), *off = bench_find(rows, n, 99, 2, pp);
        T_CHECK(cpu0 && cpu2 && gpu && off, "%s: a row for each placement: %s", pp ? "pp8" : "tg4", out);
        if (!cpu0 || !cpu2 || !gpu || !off) continue;
        printf("  llm-bench %s bus bytes/token: -ngl 0: %.1f, %.1f; -ngl 99: %.1f; -ngl 99 --n-cpu-moe 2: %.1f\n",
               pp ? "pp8" : "tg4", cpu0->bus, cpu2->bus, gpu->bus, off->bus);
        T_CHECK(!strcmp(cpu0->backend, "CPU") && !strcmp(cpu2->backend, "CPU") && !strcmp(gpu->backend, "CUDA") &&
                    !strcmp(off->backend, "CUDA+CPU(moe)"),
                "backends %s %s %s %s", cpu0->backend, cpu2->backend, gpu->backend, off->backend);
        T_CHECK(cpu0->bus == 0 && cpu2->bus == 0, "no bus bytes on the CPU: %.1f %.1f", cpu0->bus, cpu2->bus);
        T_CHECK(gpu->bus > 0 && off->bus > gpu->bus, "%s: bus bytes per token above 0 on the GPU (%.1f) and more with "
                "the experts offloaded (%.1f)", pp ? "pp8" : "tg4", gpu->bus, off->bus);
    }
    /* -ot: llama-bench's sets, ',' between them, ';' within one */
    snprintf(args, sizeof args, "-m %s -ngl 99 -ot 'blk\\.1\\.ffn_.*_exps=CPU;blk\\.2\\.ffn_.*_exps=CPU,"
             "blk\\.1\\.ffn_.*_exps=CPU' -p 8 -n 0 -r 1 -t 1 -o csv", path);
    rc = run("", "llm-bench", args, out, sizeof out);
    n = bench_rows(out, rows, 16);
    T_CHECK(rc == 0 && n == 2 && !strcmp(rows[0].ot, "blk\\.1\\.ffn_.*_exps=CPU,blk\\.2\\.ffn_.*_exps=CPU") &&
                !strcmp(rows[1].ot, "blk\\.1\\.ffn_.*_exps=CPU") && !strcmp(rows[0].backend, "CUDA+CPU(moe)") &&
                rows[0].bus > rows[1].bus && rows[1].bus > 0,
            "llm-bench -ot with two sets: two rows, the set of two layers moving more (exit %d, %d rows): %s", rc, n,
            out);
    /* a layer split with the experts of its GPU layers on the host, in md */
    snprintf(args, sizeof args, "-m %s -ngl 3 --cpu-moe -p 8 -n 0 -r 1 -t 1", path);
    rc = run("", "llm-bench", args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "| backend | ngl | n_cpu_moe | threads |") &&
                strstr(out, "| CUDA+CPU(layers,moe) | 3 | all | 1 | pp8 |") && strstr(out, "bus KB/token |"),
            "llm-bench -ngl 3 --cpu-moe (exit %d): %s", rc, out);
    /* refusals */
    snprintf(args, sizeof args, "-m %s -ngl 99 -sm row -p 8 -n 0 -r 1", path);
    rc = run("", "llm-bench", args, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "-sm row") && strstr(out, "-sm tensor") && n_lines(out) == 1,
            "llm-bench -sm row: refused, pointing at -sm tensor (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 3 -sm tensor", path, prompt);
    rc = run("", "llm-run", args, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "split_mode tensor") && strstr(out, "n_gpu_layers 3") && n_lines(out) == 1,
            "llm-run -sm tensor -ngl 3: one line saying it takes every layer (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s -ngl 99 -ot foo -p 8 -n 0 -r 1", path);
    rc = run("", "llm-bench", args, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "-ot: 'foo'") && strstr(out, "PATTERN=DEVICE") && n_lines(out) == 1,
            "llm-bench -ot foo: one line naming it (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 99 -ot foo", path, prompt);
    rc = run("", "llm-run", args, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "-ot: 'foo'") && strstr(out, "PATTERN=DEVICE") && n_lines(out) == 1,
            "llm-run -ot foo: one line naming it (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 99 -ot 'blk\\.3\\.attn_q\\.weight=CPU'", path, prompt);
    rc = run("", "llm-run", args, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "blk.3.attn_q.weight") && n_lines(out) == 1,
            "llm-run -ot of an attention weight to the CPU under -ngl 99: one line naming it (exit %d): %s", rc, out);
}

#ifdef INFER_EMU
static void too_small(void) {
    const char *path = synth("qwen3", "F32");
    if (!path) return;
    char args[1024], out[8192];
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 99", path, prompt);
    const int rc = run("INFER_EMU_MEM=200M", "llm-run", args, out, sizeof out);
    int lines = 0;
    for (const char *s = out; *s; s++) lines += *s == '\n';
    T_CHECK(rc == 1 && lines == 1 && strstr(out, "need") && strstr(out, "MiB free"),
            "INFER_EMU_MEM=200M: one line naming what is needed and free, exit 1 (exit %d): %s", rc, out);
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 1", path, prompt);
    const int rc1 = run("INFER_EMU_MEM=200M", "llm-run", args, out, sizeof out);
    lines = 0;
    for (const char *s = out; *s; s++) lines += *s == '\n';
    T_CHECK(rc1 == 1 && lines == 1 && strstr(out, "need") && strstr(out, "MiB free") && strstr(out, "last 1 of 2"),
            "INFER_EMU_MEM=200M, -ngl 1: one line naming the layers, what is needed and free, exit 1 (exit %d): %s",
            rc1, out);
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 99", path, prompt);
    const int rc99 = run("INFER_EMU_MEM=260M", "llm-run", args, out, sizeof out);
    T_CHECK(rc99 == 1 && strstr(out, "every layer and the head"), "INFER_EMU_MEM=260M: -ngl 99 does not fit (exit "
            "%d): %s", rc99, out);
    greedy_same("qwen3", "F32", "INFER_EMU_MEM=260M", "-ngl 1");
    /* weights that fit, a context that does not: refused at creation with both numbers, before any cell exists */
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 99 -c 1000000", path, prompt);
    const int rcc = run("INFER_EMU_MEM=300M", "llm-run", args, out, sizeof out);
    lines = 0;
    for (const char *s = out; *s; s++) lines += *s == '\n';
    T_CHECK(rcc == 1 && lines == 1 && strstr(out, "infer_ctx_create: the context's part on CUDA device 0") &&
                strstr(out, "MiB free") && strstr(out, "needs"),
            "INFER_EMU_MEM=300M, -c 1000000: one line with what the context needs and what is free, exit 1 (exit %d): "
            "%s", rcc, out);
    /* -sm tensor over 2 devices: a rank's shards that do not fit are refused at load, a context whose part on a rank
     * does not fit at creation, each in one line with both numbers */
    const char *hy = synth("qwen35moe", "F32");
    if (!hy) return;
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 99 -sm tensor", hy, prompt);
    const int rct = run("INFER_EMU_DEVICES=2 INFER_EMU_MEM=200M", "llm-run", args, out, sizeof out);
    T_CHECK(rct == 1 && n_lines(out) == 1 && strstr(out, "rank 0's shards on CUDA device 0 need") &&
                strstr(out, "MiB free"),
            "-sm tensor, INFER_EMU_MEM=200M: one line naming the rank, what it needs and what is free (exit %d): %s",
            rct, out);
    snprintf(args, sizeof args, "-m %s %s -n 2 -ngl 99 -sm tensor -c 2000000", hy, prompt);
    const int rctc = run("INFER_EMU_DEVICES=2 INFER_EMU_MEM=300M", "llm-run", args, out, sizeof out);
    T_CHECK(rctc == 1 && n_lines(out) == 1 && strstr(out, "infer_ctx_create: the context's part on CUDA device 0") &&
                strstr(out, "MiB free") && strstr(out, "needs"),
            "-sm tensor, INFER_EMU_MEM=300M, -c 2000000: one line with what a rank's part needs and what is free "
            "(exit %d): %s", rctc, out);
}

/* -mg 1 of 2 devices: device 0 untouched. */
static void second_device(void) {
    greedy_same("qwen35", "F32", "INFER_EMU_DEVICES=2", "-ngl 99 -mg 1");
    const char *path = synth("qwen35", "F32");
    if (!path) return;
    char args[1024], out[16384];
    snprintf(args, sizeof args, "-m %s %s -n 4 --temp 0 -ngl 99 -mg 1", path, prompt);
    const int rc = run("INFER_EMU_DEVICES=2 INFER_EMU_STATS=1", "llm-run", args, out, sizeof out);
    const char *d0 = strstr(out, "emu stats: device 0: "), *d1 = strstr(out, "emu stats: device 1: ");
    unsigned long long l1 = 0;
    T_CHECK(rc == 0 && d0 && d1, "llm-run -mg 1 with statistics (exit %d): %s", rc, out);
    if (!d0 || !d1) return;
    static const char untouched[] = "0 launches, 0 kernels run, 0 graph launches, 0 syncs, 0 B to the device, 0 B from "
                                    "it, 0 B within it, 0 allocations, 0 B held";
    T_CHECK(!strncmp(d0 + strlen("emu stats: device 0: "), untouched, sizeof untouched - 1), "device 0 untouched: %.200s", d0);
    T_CHECK(sscanf(d1 + strlen("emu stats: device 1: "), "%llu launches", &l1) == 1 && l1 > 0, "device 1 did the work: %.200s",
            d1);
}

/* -sm tensor over two processes as README's commands run it: the follower (--tp-serve, rank 1, its device 1) in
 * the background, then the leader (rank 0) whose greedy tokens must be the CPU's; the follower ends with the leader,
 * silently. */
static void tp_two_processes(void) {
    const char *path = synth("qwen35moe", "F32");
    if (!path) return;
    char id[512], log[512], pidf[512], copy[512], cmd[4096];
    snprintf(id, sizeof id, "%s/tp.id", dir);
    snprintf(log, sizeof log, "%s/follower.log", dir);
    snprintf(pidf, sizeof pidf, "%s/follower.pid", dir);
    snprintf(copy, sizeof copy, "%s/follower.gguf", dir); /* greedy_same writes the leader's file anew meanwhile */
    /* a partner that never comes fails the other within a minute instead of NCCL's ten */
    snprintf(cmd, sizeof cmd, "cp %s %s && (env INFER_EMU_DEVICES=2 INFER_EMU_NCCL_TIMEOUT=60 %s/llm-run -m %s -ngl 99 "
             "-sm tensor -ts 0,1 --tp-world 2 --tp-rank0 1 --tp-id %s --tp-serve > %s 2>&1 & echo $! > %s)", path,
             copy, build, copy, id, log, pidf);
    T_CHECK(system(cmd) == 0, "start the follower: %s", cmd);
    char flags[1024];
    snprintf(flags, sizeof flags, "-ngl 99 -sm tensor -ts 1 --tp-world 2 --tp-rank0 0 --tp-id %s", id);
    greedy_same("qwen35moe", "F32", "INFER_EMU_DEVICES=2 INFER_EMU_NCCL_TIMEOUT=60", flags);
    FILE *f = fopen(pidf, "r");
    long pid = 0;
    if (f && fscanf(f, "%ld", &pid) != 1) pid = 0;
    if (f) fclose(f);
    int waited = 0; /* the follower is not this process's child: wait for it to be gone */
    while (pid > 0 && kill((pid_t)pid, 0) == 0 && waited < 600) {
        usleep(100000);
        waited++;
    }
    char out[4096] = "";
    f = fopen(log, "r");
    const size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
    T_CHECK(pid > 0 && waited < 600 && n == 0, "the follower ended with the leader, silently (pid %ld, %d tenths of a "
            "second): %s", pid, waited, out);
}

/* -sm layer and -sm tensor over 2 devices: the CPU's tokens from llm-run, and llm-bench rows for -sm
 * none,layer,tensor. */
static void layer_split_devices(void) {
    greedy_same("qwen35moe", "F32", "INFER_EMU_DEVICES=2", "-ngl 99 -sm layer -ts 1,1");
    greedy_same("qwen35", "F32", "INFER_EMU_DEVICES=2", "-ngl 3 -sm layer");
    greedy_same("qwen35moe", "F32", "INFER_EMU_DEVICES=2", "-ngl 99 -sm tensor");
    with_mtp = 1; /* MTP drafting under tensor parallelism: the plain greedy ids of the CPU */
    greedy_same("qwen35", "F32", "INFER_EMU_DEVICES=2", "-ngl 99 -sm tensor --mtp 2");
    with_mtp = 0;
    tp_two_processes();
    const char *path = synth("qwen35", "F32");
    if (!path) return;
    char args[1024], out[16384];
    snprintf(args, sizeof args, "-m %s -p 8 -n 4 -r 1 -ngl 99 -sm none,layer,tensor -ts 1/1 -o csv", path);
    const int rc = run("INFER_EMU_DEVICES=2", "llm-bench", args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, ",none,") && strstr(out, ",layer,") && strstr(out, ",tensor,"),
            "llm-bench -sm none,layer,tensor over 2 devices (exit %d): %s", rc, out);
}
#endif

int main(void) {
    const char *why = NULL;
    if (device_count(&why) == 0) {
        T_SKIP("no CUDA device: %s", why);
        return t_done();
    }
    const char *b = getenv("INFER_BUILD_DIR");
    snprintf(build, sizeof build, "%s", b ? b : "build");
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return t_done();
    }
    static const char *const archs[] = {"llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"};
    /* t_quick (the sanitizers' run): every arch once, on the GPU or split at layer 1; each offload flag once */
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!t_quick() || i % 2 == 0) greedy_same(archs[i], "F32", "", "-ngl 99");
    if (!t_quick()) greedy_same("qwen3", "Q8_0", "", "-ngl 99");
    greedy_same("qwen35", "Q8_0", "", "-ngl 99");
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (!t_quick() || i % 2 == 1) greedy_same(archs[i], "F32", "", "-ngl 1");
    greedy_same("llama", "F32", "", "-ngl 2");
    greedy_same("qwen35", "Q8_0", "", "-ngl 2");
    bench();
    static const char *const moe[] = {"qwen3moe", "qwen35moe"};
    static const char *const offload[] = {"--cpu-moe -ngl 99", "--n-cpu-moe 2 -ngl 99",
                                          "-ot 'blk\\.1\\.ffn_.*_exps=CPU' -ngl 99", "-ngl 3 --n-cpu-moe 99"};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++)
        for (size_t k = 0; k < sizeof offload / sizeof offload[0]; k++)
            if (!t_quick() || k % 2 == i) greedy_same(moe[i], "F32", "", offload[k]);
    bench_offload();
#ifdef INFER_EMU
    too_small();
    second_device();
    layer_split_devices();
#endif
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return t_done();
}
