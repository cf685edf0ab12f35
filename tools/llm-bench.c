/* llm-bench: prompt-processing and generation speed, llama-bench style.
 *
 *   llm-bench -m MODEL [-m MODEL ...] [-p 512] [-n 128] [-d 0] [-r 5] [-t N] [-ngl 0] [--n-cpu-moe 0]
 *             [-ot P=D;P=D,...] [-sm none|layer] [-o md|csv|json]
 *
 * Tests: ppP reads P random tokens as one batch; tgN decodes N tokens one at a time. With -d D the
 * sequence is first filled to D positions (untimed), so the test measures attention over a deep
 * context too. Each test runs once to warm up, then -r times; t/s is mean ± standard deviation. A
 * timed run ends when its work is done: infer_logits waits for a GPU context's queued work (as
 * llama-bench's llama_synchronize).
 *
 * -ngl 0 (the default) runs on the CPU; -ngl N above the model's layer count (99) loads every layer and
 * the head onto CUDA device 0 (backend column CUDA); 1 <= N <= the layer count puts the last N layers there
 * and keeps the token lookup and the head on the CPU (CUDA+CPU; each batch copies the hidden state to the
 * GPU and back). The library refuses a machine without a device with its own message. A list (-ngl 0,2,99)
 * benchmarks each in turn.
 *
 * Placements, as llama-bench: every combination of -ngl x --n-cpu-moe x -sm x -ot runs, the model loaded
 * once per combination. --n-cpu-moe N[,N...] (--cpu-moe adds "all") keeps the routed experts of the first N
 * MoE layers in host memory; under GPU layers that is expert offload (backend CUDA+CPU(moe): the router, the
 * shared expert and the rest of the layer on the GPU, the selected experts on the CPU; CUDA+CPU(layers,moe)
 * with a layer split too). -ot takes llama-bench's form: ',' separates alternative override sets, ';' the
 * PATTERN=DEVICE entries of one set. -sm none|layer|tensor: the GPU part on -mg, spread by layers over the
 * devices (-ts), or tensor parallel over NCCL (every layer on every device); row is refused. The md table shows
 * the ngl, n_cpu_moe, sm and ot columns when they were given; csv and json always carry them.
 *
 * Every row also gives the bytes the test moved between host and device memory (infer_ctx_bus_bytes over the
 * timed runs; both ways) per token: per prompt token for pp, per generated token for tg; 0 (md: "-") for a
 * context wholly on the CPU. It shows what a placement costs in bus traffic: a layer split moves the hidden
 * state across each boundary, expert offload the normed hidden state, the routing and the experts' output of
 * every offloaded layer.
 *
 * For tg the table also gives what bounds it on a CPU or a GPU: the weight bytes one decode step reads (every
 * layer's weights and the LM head; not token_embd, of which one row is read, unless it is the tied LM
 * head; for MoE layers the routed experts count for n_expert_used / n_expert of their bytes; MTP
 * layers are not run), the rate that implies, and that rate as a share of the memory bandwidth this
 * run measured: on the CPU a threaded memcpy of a 1 GiB buffer, on CUDA infer_device_bandwidth (a copy
 * kernel over 1 GiB, CUDA events, best of 20), both in read + write bytes per second. The same
 * weight-bytes model is used for CUDA rows: % of roofline = (bytes per token x tokens/s) / bandwidth. A
 * split reads its two parts at two speeds: the roofline time of a token is the CPU part's bytes over the
 * host's bandwidth plus the GPU part's over the device's, and the bandwidth a row reports (bw_gb_s) is the
 * bytes per token over that time; under expert offload the experts in host memory are the CPU part.
 *
 * --mtp N adds, after each tgN, the same test generated greedily with MTP speculative decoding (N
 * drafts per step) from a one-token prompt, with the mean accepted length per step and the tokens per
 * forward pass of the model; its t/s counts generated tokens.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "ftype.h"
#include "model.h"
#ifdef INFER_EMU
#include "emu_api.h"
#endif

#define BW_BYTES ((size_t)1 << 30)

static int usage(int to_err) {
    fprintf(to_err ? stderr : stdout,
            "usage: llm-bench -m MODEL [-m MODEL ...] [options]\n"
            "  -p N[,N...]   prompt sizes, one batch each (default 512; 0 skips)\n"
            "  -n N[,N...]   tokens generated one at a time (default 128; 0 skips)\n"
            "  -d N[,N...]   context depth filled before each test (default 0)\n"
            "  -r N          repetitions (default 5)\n"
            "  -t N          threads (default: all cores)\n"
            "  -o FMT        md (default), csv or json\n"
            "  -ctk/-ctv T   KV cache type: f16 (default) or q8_0 (both the same; q8_0 tags the test name)\n"
            "  --mtp N       also run each tg test with MTP speculative decoding, N = 1..4 drafts per step\n"
            "  -ngl N[,N...] layers on CUDA device -mg: 0 = CPU (default); 1..the layer count = the last N (the\n"
            "                head on the CPU; x crosses the bus twice per batch); above it (99) = all\n"
            "  -mg N         the CUDA device for -ngl (default 0)\n"
            "  --n-cpu-moe N[,N...]  keep the routed experts of the first N MoE layers in host memory (default 0);\n"
            "                under GPU layers the selected experts run on the CPU (expert offload)\n"
            "  --cpu-moe     adds every layer's experts in host memory (\"all\") to the --n-cpu-moe list\n"
            "  -ot P=D[;P=D...][,...]  tensor overrides (PATTERN=DEVICE, DEVICE CPU or CUDA<i>), llama-bench's\n"
            "                form: ';' joins the entries of one set, ',' separates sets benchmarked in turn\n"
            "  -sm M[,M...]  split mode: none (default: the GPU part on -mg), layer (the GPU layers spread over\n"
            "                the devices, -ts) or tensor (tensor parallelism over NCCL on every device, or those\n"
            "                -ts gives a share; needs -ngl 99)\n"
            "  -ts A/B/...   with -sm layer, each device's share of the GPU layers (default: by free memory)\n"
            "  --no-repack   compute the CPU's weights as stored (default: repacked at load where this CPU has a\n"
            "                faster layout: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K-Q6_K, IQ4_XS on\n"
            "                AVX-512 VNNI, Q4_K, Q5_K, IQ4_XS, Q4_0, Q4_1, IQ4_NL, MXFP4 on AVX2, routed experts\n"
            "                included)\n"
            "Every combination of -ngl, --n-cpu-moe, -sm and -ot runs. Rows give the bytes moved over the bus per\n"
            "token (bus KB/token; csv, json: bus_bytes_per_token).\n");
    return to_err ? 2 : 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- memory bandwidth ---- */

struct bw_job {
    char *dst;
    const char *src;
    size_t n;
};

static void *bw_copy(void *p) {
    struct bw_job *j = p;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

/* Best of 3 threaded copies of a 1 GiB buffer, in (read + write) bytes per second; 0 if it cannot run. */
static double bw_measure(int n_threads) {
    char *src = malloc(BW_BYTES), *dst = malloc(BW_BYTES);
    double best = 0;
    if (!src || !dst) goto out;
    memset(src, 1, BW_BYTES);
    memset(dst, 0, BW_BYTES); /* fault the pages in before timing */
    if (n_threads > 64) n_threads = 64;
    pthread_t th[64];
    struct bw_job job[64];
    const size_t per = BW_BYTES / (size_t)n_threads;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now_s();
        int ok[64] = {0};
        for (int i = 0; i < n_threads; i++)
            job[i] = (struct bw_job){dst + per * (size_t)i, src + per * (size_t)i,
                                     i == n_threads - 1 ? BW_BYTES - per * (size_t)i : per};
        for (int i = 1; i < n_threads; i++) ok[i] = pthread_create(&th[i], NULL, bw_copy, &job[i]) == 0;
        for (int i = 0; i < n_threads; i++)
            if (i == 0 || !ok[i]) bw_copy(&job[i]); /* a thread that did not start: its share runs here */
        for (int i = 1; i < n_threads; i++)
            if (ok[i]) pthread_join(th[i], NULL);
        const double r = 2.0 * (double)BW_BYTES / (now_s() - t0);
        if (r > best) best = r;
    }
out:
    free(src);
    free(dst);
    return best;
}

/* ---- model facts ---- */

struct bench_model {
    const char *path;
    char name[96];
    double size, params, tg_bytes; /* bytes of weights, elements, bytes read per decode step */
    double tg_bytes_dev;           /* of tg_bytes, those on the device (the model's placement) */
    int on_gpu;                    /* weights on a CUDA device */
    int split;                     /* layers on the GPU, the head on the CPU */
    int moe_host;                  /* a layer on the GPU keeps its routed experts in host memory (expert offload) */
};

static void model_facts(const infer_model *m, const char *path, struct bench_model *bm) {
    const struct arch_hparams *hp = &m->hp;
    char ft[32];
    bm->path = path;
    if (infer_model_meta_str(m, "general.file_type", ft, sizeof ft) > 0 && ftype_name(atoi(ft)))
        snprintf(bm->name, sizeof bm->name, "%s %s", infer_model_arch(m), ftype_name(atoi(ft)));
    else
        snprintf(bm->name, sizeof bm->name, "%s", infer_model_arch(m));
    bm->size = bm->params = bm->tg_bytes = bm->tg_bytes_dev = 0;
    bm->on_gpu = m->n_gpu > 0;
    bm->split = m->n_gpu > 0 && !m->gpu_head;
    bm->moe_host = 0;
    for (int64_t il = 0; il < hp->n_layer_all; il++) bm->moe_host |= m->layers[il].exps_host;
    for (int64_t i = 0; i < infer_model_tensor_count(m); i++) {
        infer_tensor_info t;
        if (infer_model_tensor(m, i, &t) != INFER_OK) continue;
        bm->size += (double)t.nbytes;
        bm->params += (double)t.ne[0] * (double)t.ne[1] * (double)t.ne[2] * (double)t.ne[3];
        long layer = -1;
        if (sscanf(t.name, "blk.%ld.", &layer) == 1 && layer >= hp->n_layer) continue; /* MTP: not run */
        if (!strcmp(t.name, "token_embd.weight") && !m->tied) continue;
        double share = 1.0;
        if (strstr(t.name, "_exps.") && hp->n_expert > 0) share = (double)hp->n_expert_used / (double)hp->n_expert;
        bm->tg_bytes += share * (double)t.nbytes;
        const int offloaded = layer >= 0 && strstr(t.name, "_exps.") && m->layers[layer].exps_host; /* on the host */
        if (m->n_gpu > 0 && !offloaded && (layer >= 0 ? layer >= m->gpu_layer0 : m->gpu_head))
            bm->tg_bytes_dev += share * (double)t.nbytes;
    }
}

/* ---- one test ---- */

struct bench_result {
    const struct bench_model *bm;
    int threads;
    int32_t ngl;              /* 0: CPU; > 0: CUDA (see backend_name) */
    int32_t n_cpu_moe;        /* INT32_MAX: all (--cpu-moe) */
    int32_t sm;               /* ARGS_SM_* */
    const char *ot;           /* the override set ("": none) */
    int32_t n_prompt, n_gen, depth, mtp;
    double mean, sd;          /* tokens per second */
    double acc_len, tok_fwd;  /* mtp: mean accepted drafts per step, tokens per forward pass */
    double bus;               /* bytes over the bus per token of the test, mean of the timed runs */
};

/* Appends n random tokens to sequence 0 in chunks of n_batch. */
static infer_status feed(infer_ctx *c, const int32_t *tok, int32_t n, int32_t n_batch) {
    for (int32_t i = 0; i < n; i += n_batch) {
        infer_batch b = {n - i < n_batch ? n - i : n_batch, tok + i, NULL, NULL, NULL};
        infer_status st = infer_decode(c, &b);
        if (st != INFER_OK) return st;
    }
    return INFER_OK;
}

/* Generates n tokens greedily with MTP steps after the one-token prompt tok (untimed prefill). */
static infer_status spec_gen(infer_ctx *c, infer_sampler *smp, const int32_t *tok, int32_t n, int32_t mtp,
                             double *seconds) {
    infer_status st = feed(c, tok, 1, 1);
    if (st != INFER_OK) return st;
    int32_t out[INFER_MAX_DRAFT + 1], got = 0, k = 0, last = infer_sampler_sample(smp, infer_logits(c, -1));
    const double t0 = now_s();
    while (got < n && st == INFER_OK) {
        st = infer_spec_step(c, smp, 0, last, out, mtp + 1, &k);
        got += k, last = out[k > 0 ? k - 1 : 0];
    }
    *seconds = now_s() - t0;
    return st;
}

#ifdef INFER_EMU
/* Built on the CUDA emulator: what the last timed run cost per infer_decode call (per infer_spec_step with --mtp)
 * on the device (kernel launches made and kernels run, graph launches, host waits, bytes over the bus). */
static void emu_per_call(const struct args *a, const struct bench_result *r, int32_t calls) {
    struct emu_counters c;
    emu_counters_get(a->main_gpu, &c);
    const double n = calls > 0 ? (double)calls : 1.0;
    char name[32];
    snprintf(name, sizeof name, "%s%d%s", r->n_prompt ? "pp" : "tg", r->n_prompt ? r->n_prompt : r->n_gen,
             r->mtp ? " mtp" : "");
    fprintf(stderr, "llm-bench: emulator, %s, per %s call (%d calls): %.1f kernel launches, %.1f kernels run, "
            "%.2f graph launches, %.2f host syncs, %.0f B to the device, %.0f B from it\n", name,
            r->mtp ? "infer_spec_step" : "infer_decode", calls, (double)c.launches / n, (double)c.kernels / n,
            (double)c.graph_launches / n, (double)c.syncs / n, (double)c.h2d_bytes / n, (double)c.d2h_bytes / n);
}
#endif

static infer_status run_test(const infer_model *m, const struct args *a, struct bench_result *r) {
    const int32_t n_tok = r->depth + (r->n_prompt ? r->n_prompt : r->n_gen);
    const int32_t n_vocab = infer_vocab_size(m);
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = n_tok + 2 + r->mtp + INFER_MAX_DRAFT;
    cp.n_batch = r->n_prompt > 512 ? r->n_prompt : 512;
    cp.n_threads = a->n_threads;
    cp.n_draft = r->mtp;
    cp.kv_type = a->type_k;
    infer_ctx *c = NULL;
    infer_sampler *smp = NULL;
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = 0;
    infer_status st = infer_ctx_create(m, &cp, &c);
    if (st == INFER_OK && r->mtp) st = infer_sampler_create(&sp, n_vocab, &smp);
    if (st != INFER_OK) {
        infer_ctx_free(c);
        return st;
    }
    uint64_t bus = 0; /* summed over the timed runs */
    int32_t *tok = malloc((size_t)n_tok * sizeof *tok);
    double *tps = malloc((size_t)(a->reps + 1) * sizeof *tps);
    if (!tok || !tps) {
        st = infer_fail(INFER_E_OOM, "llm-bench: token buffers");
        goto out;
    }
    uint64_t x = 88172645463325252ull;
    for (int32_t i = 0; i < n_tok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
    for (int rep = 0; rep <= a->reps; rep++) { /* rep 0 warms up */
        if ((st = infer_seq_rm(c, 0, 0, -1)) != INFER_OK) goto out;
        if ((st = feed(c, tok, r->depth, cp.n_batch)) != INFER_OK) goto out;
        if (r->depth) infer_logits(c, -1); /* the prefill finishes before the clock starts */
#ifdef INFER_EMU
        if (r->ngl > 0) emu_counters_reset();
#endif
        const uint64_t bus0 = infer_ctx_bus_bytes(c); /* after the untimed prefill */
        const double t0 = now_s();
        double dt = 0;
        infer_spec_stats s0 = infer_spec_get_stats(c);
        if (r->n_prompt) {
            st = feed(c, tok + r->depth, r->n_prompt, cp.n_batch);
        } else if (r->mtp) {
            infer_sampler_reset(smp);
            st = spec_gen(c, smp, tok + r->depth, r->n_gen, r->mtp, &dt);
        } else {
            for (int32_t i = 0; i < r->n_gen && st == INFER_OK; i++) st = feed(c, tok + r->depth + i, 1, 1);
        }
        if (st != INFER_OK) goto out;
        if (!r->mtp) {
            infer_logits(c, -1); /* waits for the GPU's queued work; at once on the CPU */
            dt = now_s() - t0;
        }
        tps[rep] = (r->n_prompt ? r->n_prompt : r->n_gen) / dt;
        if (rep > 0) bus += infer_ctx_bus_bytes(c) - bus0; /* the logits read back above included */
#ifdef INFER_EMU
        if (r->ngl > 0 && rep == a->reps && !r->mtp)
            emu_per_call(a, r, r->n_prompt ? (r->n_prompt + cp.n_batch - 1) / cp.n_batch : r->n_gen);
#endif
        if (r->mtp && rep > 0) {
            infer_spec_stats s1 = infer_spec_get_stats(c);
            const double steps = (double)(s1.n_steps - s0.n_steps), acc = (double)(s1.n_accepted - s0.n_accepted);
            r->acc_len += acc / steps / a->reps, r->tok_fwd += (acc + steps) / steps / a->reps;
#ifdef INFER_EMU
            if (r->ngl > 0 && rep == a->reps) emu_per_call(a, r, (int32_t)steps);
#endif
        }
    }
    double s = 0, s2 = 0;
    for (int rep = 1; rep <= a->reps; rep++) s += tps[rep];
    r->mean = s / a->reps;
    for (int rep = 1; rep <= a->reps; rep++) s2 += (tps[rep] - r->mean) * (tps[rep] - r->mean);
    r->sd = a->reps > 1 ? sqrt(s2 / (a->reps - 1)) : 0;
    r->bus = (double)bus / ((double)a->reps * (r->n_prompt ? r->n_prompt : r->n_gen));
out:
    free(tok);
    free(tps);
    infer_sampler_free(smp);
    infer_ctx_free(c);
    return st;
}

/* ---- output ---- */

static void test_name(const struct bench_result *r, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "%s%d", r->n_prompt ? "pp" : "tg", r->n_prompt ? r->n_prompt : r->n_gen);
    if (r->mtp) k += snprintf(buf + k, cap - (size_t)k, " mtp%d", r->mtp);
    if (r->depth) snprintf(buf + k, cap - (size_t)k, " @ d%d", r->depth);
}

/* The backend column: where the row's weights live. */
static const char *backend_name(const struct bench_model *bm) {
    if (!bm->on_gpu) return "CPU";
    if (bm->split && bm->moe_host) return "CUDA+CPU(layers,moe)";
    if (bm->split) return "CUDA+CPU";
    if (bm->moe_host) return "CUDA+CPU(moe)";
    return "CUDA";
}

/* s between double quotes, escaped for JSON (patterns hold backslashes) or, json = 0, for CSV. */
static void print_quoted(const char *s, int json) {
    putchar('"');
    for (; *s; s++) {
        if (json && (unsigned char)*s < 0x20) {
            printf("\\u%04x", (unsigned)(unsigned char)*s);
            continue;
        }
        if (json && (*s == '"' || *s == '\\'))
            putchar('\\');
        else if (!json && *s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

/* bw: the roofline denominator of this row's backend; memcpy: the host figure (0: not measured). */
static void print_row(const struct args *a, const struct bench_result *r, double bw, double memcpy_bw, int any_gpu,
                      int first) {
    const struct bench_model *bm = r->bm;
    char test[64], size[32], params[32], mbt[32] = "-", gbs[32] = "-", pct[32] = "-", acc[32] = "-", tf[32] = "-";
    char ncmoe[16] = "all", bus[32] = "-";
    test_name(r, test, sizeof test);
    if (a->type_k == INFER_TYPE_Q8_0) strncat(test, " kv q8_0", sizeof test - strlen(test) - 1);
    if (bm->size >= (1 << 30))
        snprintf(size, sizeof size, "%.2f GiB", bm->size / (1 << 30));
    else
        snprintf(size, sizeof size, "%.2f MiB", bm->size / (1 << 20));
    if (bm->params >= 1e9)
        snprintf(params, sizeof params, "%.2f B", bm->params / 1e9);
    else
        snprintf(params, sizeof params, "%.2f M", bm->params / 1e6);
    const double rate = r->n_gen ? bm->tg_bytes * r->mean : 0;
    const char *sm_names[] = {[ARGS_SM_NONE] = "none", [ARGS_SM_LAYER] = "layer", [ARGS_SM_TENSOR] = "tensor"};
    const char *backend = backend_name(bm), *sm = sm_names[r->sm];
    if (r->mtp) snprintf(acc, sizeof acc, "%.2f", r->acc_len), snprintf(tf, sizeof tf, "%.2f", r->tok_fwd);
    if (r->n_gen) {
        snprintf(mbt, sizeof mbt, "%.2f", bm->tg_bytes / 1e6);
        snprintf(gbs, sizeof gbs, "%.2f", rate / 1e9);
        if (bw > 0) snprintf(pct, sizeof pct, "%.1f%%", 100.0 * rate / bw);
    }
    if (r->n_cpu_moe != INT32_MAX) snprintf(ncmoe, sizeof ncmoe, "%d", r->n_cpu_moe);
    if (bm->on_gpu) snprintf(bus, sizeof bus, "%.2f", r->bus / 1e3);
    if (!strcmp(a->output, "md")) {
        /* the placement columns llama-bench shows when given: ngl with GPU rows, the others when asked for */
        const int show_ngl = any_gpu, show_ncmoe = a->n_ncmoe > 0, show_sm = a->n_sm > 0, show_ot = a->n_ot_set > 0;
        if (first) {
            printf("| model | size | params | backend |%s%s%s%s threads | test | t/s | MB/token | GB/s "
                   "| %% of %s |%s%s\n",
                   show_ngl ? " ngl |" : "", show_ncmoe ? " n_cpu_moe |" : "", show_sm ? " sm |" : "",
                   show_ot ? " ot |" : "", any_gpu ? "roofline" : "memcpy", any_gpu ? " bus KB/token |" : "",
                   a->mtp ? " accepted/step | tokens/forward |" : "");
            printf("| --- | ---: | ---: | --- |%s%s%s%s ---: | ---: | ---: | ---: | ---: | ---: |%s%s\n",
                   show_ngl ? " ---: |" : "", show_ncmoe ? " ---: |" : "", show_sm ? " --- |" : "",
                   show_ot ? " --- |" : "", any_gpu ? " ---: |" : "", a->mtp ? " ---: | ---: |" : "");
        }
        printf("| %s | %s | %s | %s |", bm->name, size, params, backend);
        if (show_ngl) printf(" %d |", r->ngl);
        if (show_ncmoe) printf(" %s |", ncmoe);
        if (show_sm) printf(" %s |", sm);
        if (show_ot) {
            putchar(' ');
            for (const char *c = r->ot[0] ? r->ot : "-"; *c; c++) { /* a pattern's | would end the cell */
                if (*c == '|') putchar('\\');
                putchar(*c);
            }
            printf(" |");
        }
        printf(" %d | %s | %.2f ± %.2f | %s | %s | %s |", r->threads, test, r->mean, r->sd, mbt, gbs, pct);
        if (any_gpu) printf(" %s |", bus);
        if (a->mtp) printf(" %s | %s |", acc, tf);
        printf("\n");
    } else if (!strcmp(a->output, "csv")) {
        if (first)
            printf("model,model_path,size_bytes,params,backend,threads,n_prompt,n_gen,n_depth,avg_ts,stddev_ts,"
                   "bytes_per_token,gb_s,memcpy_gb_s,mtp,accepted_per_step,tokens_per_forward,n_gpu_layers,bw_gb_s,"
                   "n_cpu_moe,split_mode,override_tensors,bus_bytes_per_token\n");
        printf("\"%s\",\"%s\",%.0f,%.0f,%s,%d,%d,%d,%d,%.4f,%.4f,%.0f,%.4f,%.4f,%d,%.4f,%.4f,%d,%.4f,%d,%s,", bm->name,
               bm->path, bm->size, bm->params, backend, r->threads, r->n_prompt, r->n_gen, r->depth, r->mean, r->sd,
               r->n_gen ? bm->tg_bytes : 0, rate / 1e9, memcpy_bw / 1e9, r->mtp, r->acc_len, r->tok_fwd, r->ngl,
               bw / 1e9, r->n_cpu_moe, sm);
        print_quoted(r->ot, 0);
        printf(",%.1f\n", r->bus);
    } else {
        printf("%s  {\"model\": \"%s\", \"model_path\": \"%s\", \"size_bytes\": %.0f, \"params\": %.0f, "
               "\"backend\": \"%s\", \"threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, "
               "\"avg_ts\": %.4f, \"stddev_ts\": %.4f, \"bytes_per_token\": %.0f, \"gb_s\": %.4f, "
               "\"memcpy_gb_s\": %.4f, \"mtp\": %d, \"accepted_per_step\": %.4f, \"tokens_per_forward\": %.4f, "
               "\"n_gpu_layers\": %d, \"bw_gb_s\": %.4f, \"n_cpu_moe\": %d, \"split_mode\": \"%s\", "
               "\"override_tensors\": ",
               first ? "[\n" : ",\n", bm->name, bm->path, bm->size, bm->params, backend, r->threads, r->n_prompt,
               r->n_gen, r->depth, r->mean, r->sd, r->n_gen ? bm->tg_bytes : 0, rate / 1e9, memcpy_bw / 1e9, r->mtp,
               r->acc_len, r->tok_fwd, r->ngl, bw / 1e9, r->n_cpu_moe, sm);
        print_quoted(r->ot, 1);
        printf(", \"bus_bytes_per_token\": %.1f}", r->bus);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    struct args a = {.tool = "llm-bench"};
    int rc = args_parse(&a, argc, argv, 1);
    if (rc) return rc;
    if (a.help) return usage(0);
    if (a.n_model == 0) {
        fprintf(stderr, "llm-bench: -m MODEL is required\n");
        return usage(1);
    }
    for (int i = 0; i < a.n_model; i++) /* paths are checked before minutes of benchmarking */
        if (access(a.model[i], R_OK) != 0) {
            fprintf(stderr, "llm-bench: %s: cannot open\n", a.model[i]);
            return 1;
        }
    if (!a.n_pp) a.pp[a.n_pp++] = 512;
    if (!a.n_tg) a.tg[a.n_tg++] = 128;
    if (!a.n_depth) a.depth[a.n_depth++] = 0;
    if (!a.n_ngl) a.ngl[a.n_ngl++] = 0;
    const int n_ncmoe = a.n_ncmoe ? a.n_ncmoe : 1, n_sm = a.n_sm ? a.n_sm : 1, n_ot = a.n_ot_set ? a.n_ot_set : 1;
    int any_cpu = 0, any_gpu = 0, gpu_ngl = 0;
    for (int i = 0; i < a.n_ngl; i++)
        if (a.ngl[i] > 0)
            any_gpu = 1, gpu_ngl = a.ngl[i];
        else
            any_cpu = 1;
    if (any_gpu && infer_device_count() == 0) { /* one line, before any model is read */
        fprintf(stderr, "llm-bench: -ngl %d: %s\n", gpu_ngl, infer_last_error());
        return 1;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const int threads = a.n_threads ? a.n_threads : (int)(ncpu > 0 ? (ncpu < 64 ? ncpu : 64) : 1);
    double bw = 0, dev_bw = 0;
    if (any_cpu) {
        bw = bw_measure(threads);
        fprintf(stderr, "llm-bench: memcpy of 1 GiB with %d threads: %.2f GB/s (read + write)\n", threads, bw / 1e9);
    }
    if (any_gpu) {
        char name[256] = "?";
        uint64_t total = 0, avail = 0;
        const int dev = a.main_gpu;
        infer_device_name(dev, name, sizeof name);
        infer_device_memory(dev, &total, &avail);
        if (infer_device_bandwidth(dev, &dev_bw) != INFER_OK)
            fprintf(stderr, "llm-bench: device bandwidth: %s\n", infer_last_error());
        fprintf(stderr, "llm-bench: CUDA device %d: %s, %.1f GiB (%.1f free); copy kernel: %.2f GB/s (read + write)\n",
                dev, name, (double)total / (1 << 30), (double)avail / (1 << 30), dev_bw / 1e9);
    }
    int first = 1, ret = 0;
    /* every combination, as llama-bench; the model is loaded once per placement */
    const int n_place = a.n_ngl * n_ncmoe * n_sm * n_ot;
    for (int mi = 0; mi < a.n_model; mi++)
        for (int pi = 0; pi < n_place; pi++) {
            const int gi = pi / (n_ncmoe * n_sm * n_ot), ci = pi / (n_sm * n_ot) % n_ncmoe;
            const int si = pi / n_ot % n_sm, oi = pi % n_ot;
            const int32_t n_cpu_moe = a.n_ncmoe ? a.ncmoe[ci] : 0, sm = a.n_sm ? a.sm[si] : ARGS_SM_NONE;
            const char *ot = a.n_ot_set ? a.ot_set[oi] : "";
            infer_model *m = NULL;
            struct bench_model bm;
            infer_model_params mp = infer_model_params_default();
            mp.n_gpu_layers = a.ngl[gi];
            mp.main_gpu = a.main_gpu;
            mp.n_cpu_moe = n_cpu_moe;
            mp.tensor_overrides = ot;
            mp.no_repack = a.no_repack;
            mp.split_mode = sm == ARGS_SM_LAYER    ? INFER_SPLIT_LAYER
                            : sm == ARGS_SM_TENSOR ? INFER_SPLIT_TENSOR
                                                   : INFER_SPLIT_NONE;
            for (int d = 0; d < a.n_ts; d++) mp.tensor_split[d] = a.ts[d];
            infer_ctx_params fit = infer_ctx_params_default(); /* drafts: -sm layer copies the token table (plan.c) */
            fit.n_draft = a.mtp;
            mp.fit_ctx = &fit;
            if (infer_model_load(a.model[mi], &mp, &m) != INFER_OK) {
                fprintf(stderr, "llm-bench: %s\n", infer_last_error());
                ret = 1;
                continue;
            }
            model_facts(m, a.model[mi], &bm);
            if (a.mtp && infer_model_n_mtp(m) < 1) {
                fprintf(stderr, "llm-bench: --mtp %d: %s has no MTP layer\n", a.mtp, a.model[mi]);
                infer_model_free(m);
                ret = 1;
                continue;
            }
            const int host_part = bm.split || bm.moe_host; /* weights read at two speeds */
            if (host_part && bw == 0) { /* the CPU part's roofline */
                bw = bw_measure(threads);
                fprintf(stderr, "llm-bench: memcpy of 1 GiB with %d threads: %.2f GB/s (read + write)\n", threads,
                        bw / 1e9);
            }
            double row_bw = a.ngl[gi] > 0 ? dev_bw : bw;
            if (host_part && bw > 0 && dev_bw > 0) /* one token's bytes over its roofline time, part by part */
                row_bw = bm.tg_bytes / ((bm.tg_bytes - bm.tg_bytes_dev) / bw + bm.tg_bytes_dev / dev_bw);
            for (int di = 0; di < a.n_depth; di++)
                for (int k = 0; k < a.n_pp + 2 * a.n_tg; k++) { /* pp tests, then each tg plain and (--mtp) drafted */
                    const int tg = k >= a.n_pp, spec = tg && (k - a.n_pp) % 2 == 1;
                    struct bench_result r = {
                        .bm = &bm,
                        .threads = threads,
                        .ngl = a.ngl[gi],
                        .n_cpu_moe = n_cpu_moe,
                        .sm = sm,
                        .ot = ot,
                        .n_prompt = tg ? 0 : a.pp[k],
                        .n_gen = tg ? a.tg[(k - a.n_pp) / 2] : 0,
                        .depth = a.depth[di],
                        .mtp = spec ? a.mtp : 0,
                    };
                    if ((r.n_prompt == 0 && r.n_gen == 0) || (spec && !a.mtp)) continue;
                    if (run_test(m, &a, &r) != INFER_OK) {
                        fprintf(stderr, "llm-bench: %s: %s\n", a.model[mi], infer_last_error());
                        ret = 1;
                        break;
                    }
                    print_row(&a, &r, row_bw, bw, any_gpu, first);
                    first = 0;
                }
            infer_model_free(m);
        }
    if (!strcmp(a.output, "json") && !first) printf("\n]\n");
    return ret;
}
