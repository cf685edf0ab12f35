/* llm-run: generate text with a GGUF model on the CPU or a GPU.
 *
 *   llm-run -m MODEL -p PROMPT [-n N] [--chat] [sampling flags]   streams the generated text to stdout
 *   llm-run -m MODEL --dry-run [-ngl N] [--cpu-moe] [-ot P=D] ... prints the placement plan, loads nothing
 *
 * The prompt (-p, -f FILE, or token ids with --ids) is tokenised with the special tokens the model's
 * metadata asks for, run through the context in chunks of n_batch, then tokens are sampled one at a
 * time until -n tokens, an end-of-generation token or a full context. Only the generated text goes
 * to stdout (UTF-8 safe through a token stream); loading progress, the seed (so that a run with
 * -s -1 can be repeated) and the speeds go to stderr. --print-ids prints the generated ids on one
 * line instead of the text; --verbose-prompt lists the prompt's token ids (after --chat's template) on
 * stderr. --logits-out writes the logits of every prompt position,
 * [n_prompt][n_vocab] little-endian f32, for comparisons. Errors are one line on stderr and exit status 1; usage errors exit 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"

#define PROGRESS_MIN_BYTES (256ll << 20) /* below this a load is too quick for a progress line */

static int usage(const char *tool, int to_err) {
    fprintf(to_err ? stderr : stdout,
            "usage: %s -m MODEL (-p PROMPT | -f FILE | --ids 1,2,3) [options]\n"
            "       %s -m MODEL --dry-run [-ngl N|auto] [--cpu-moe] [-ot P=D] [-c N] [-ctk T] [--dry-run-mem 12G]\n"
            "  -n N                  tokens to generate (default 32; -1: until end of generation or a full context)\n"
            "  -c N                  context size (default min(training context, 4096))\n"
            "  -b N                  tokens per decode call while reading the prompt (default 512)\n"
            "  -t N                  threads (default: all cores)\n"
            "  -s SEED               sampling seed (default -1: from the clock; printed on stderr)\n"
            "  --temp T              temperature (default 0.8; <= 0: greedy)\n"
            "  --top-k K             (default 40; 0: off)      --top-p P   (default 0.95; 1: off)\n"
            "  --min-p P             (default 0.05; 0: off)\n"
            "  --repeat-penalty F    (default 1: off)  --presence-penalty F  --frequency-penalty F (default 0)\n"
            "  --repeat-last-n N     tokens the penalties look back over (default 64; -1: the context size)\n"
            "  --chat                wrap the prompt in the model's chat template (ChatML for qwen3*, Llama 3)\n"
            "  --ids 1,2,3           the prompt as token ids (no tokenisation)\n"
            "  --print-ids           print the generated token ids on one line instead of the text\n"
            "  --verbose-prompt      the prompt's tokens on stderr before generating, one a line as llama.cpp\n"
            "                        prints them: \"    ID -> 'piece'\" (control bytes escaped: \\n, \\xNN)\n"
            "  --logits-out FILE     logits of every prompt position, [n_prompt][n_vocab] little-endian f32\n"
            "  -ctk T, -ctv T        KV cache type of K and V: f16 (default) or q8_0 (both the same)\n"
            "  --mtp N               speculative decoding with the model's MTP head, N = 1..4 drafts per step\n"
            "  -np N                 sequences the context holds (default 1; llm-run generates into the first)\n"
            "  -ngl N|auto|all       layers on CUDA device -mg, llama.cpp's meaning: 0 = CPU (default); 1..the\n"
            "                        layer count: the last N (a split: the token lookup and the head stay on the\n"
            "                        CPU, the hidden state crosses the bus twice per batch); above it (all, 99):\n"
            "                        every layer and the head; auto: fit to the GPU's free memory (see --fit)\n"
            "  -mg N                 the CUDA device for -ngl (default 0)\n"
            "  -sm none|layer|tensor split mode: none (default) puts the GPU part on -mg; layer spreads the GPU\n"
            "                        layers over every device in the ratio -ts, in order (the hidden state\n"
            "                        crosses through host memory once per device boundary); tensor: tensor\n"
            "                        parallelism over NCCL, every layer on every device, each holding its\n"
            "                        share of the heads and FFN columns, one all-reduce per block (needs -ngl 99)\n"
            "  -ts A,B,...           with -sm layer, each device's share of the GPU layers (default: in\n"
            "                        proportion to each device's free memory); with -sm tensor the devices with\n"
            "                        a share > 0 (equal shares)\n"
            "  --tp-world N --tp-rank0 R --tp-id FILE  -sm tensor over several processes (hosts): N ranks in all,\n"
            "                        this process's devices being ranks R, R+1, ...; rank 0's process (R = 0) runs\n"
            "                        the prompt and writes the group's NCCL id to FILE (a path every host sees; or\n"
            "                        set INFER_TP_ID to the id's hex on every host), the others wait for it\n"
            "  --tp-serve            a process with R > 0: follow rank 0's process until it ends (no prompt)\n"
            "  --n-cpu-moe N         keep the routed experts of the first N MoE layers in host memory (expert\n"
            "                        offload: with -ngl the router, the shared expert and the rest of each layer\n"
            "                        run on the GPU, the selected experts on the CPU)\n"
            "  --cpu-moe             keep every routed expert in host memory (as --n-cpu-moe with all layers)\n"
            "  -ot, --override-tensor PATTERN=DEVICE[,...]  llama.cpp's tensor placement: the tensors whose names\n"
            "                        PATTERN (an extended regular expression; \\d allowed) finds go to DEVICE, CPU\n"
            "                        or CUDA<i>; the first match wins, over --n-cpu-moe; repeated flags add up.\n"
            "                        Routed experts may go to the CPU under GPU layers (expert offload), e.g.\n"
            "                        -ot \"blk\\.[0-9]\\.ffn_.*_exps=CPU\"; other moves are refused, naming\n"
            "                        the tensor\n"
            "  --fit on|off          with -ngl auto: on (default) puts the whole model on the GPU if it fits the\n"
            "                        context (-c), else (MoE) as few leading layers' experts as needed on the host\n"
            "                        (expert offload), else (dense) as many trailing layers as fit (a layer\n"
            "                        split); off: everything on the GPU\n"
            "  --no-repack           compute the CPU's weights as stored (default: the Q8_0, Q4_0, Q4_1, Q5_0,\n"
            "                        Q5_1, IQ4_NL, MXFP4, Q2_K-Q6_K and IQ4_XS matrices, routed experts included,\n"
            "                        are repacked at load for AVX-512 VNNI (AVX2: Q4_K, Q5_K, IQ4_XS, Q4_0, Q4_1,\n"
            "                        IQ4_NL, MXFP4), about the same size, same results)\n"
            "  --dry-run             print the placement plan (what lives where, MiB per device: weights, KV,\n"
            "                        state, scratch, overhead; KV bytes per token; the context that would fit) and\n"
            "                        exit without loading weights; no prompt needed\n"
            "  --dry-run-mem 12G[,24G]  plan for devices 0, 1, ... with this much free memory (K M G T, binary)\n"
            "                        instead of measuring them: planning a card you do not have\n",
            tool, tool);
    return to_err ? 2 : 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int progress_open; /* a progress line without its newline is on stderr */

static int progress(float x, void *user) {
    if (x <= 0.1f) return 0; /* nothing shown until the file is bound: a refused file is then one line */
    fprintf(stderr, "\rloading %s: %3.0f%%%s", (const char *)user, 100.0 * x, x >= 1.0f ? "\n" : "");
    progress_open = x < 1.0f;
    return 0;
}

/* The whole file as a NUL-terminated string (xmalloc'd), or NULL with errno set. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) break;
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f) || !buf;
    fclose(f);
    if (err) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* --verbose-prompt: the prompt's ids and pieces on stderr, one token a line like llama.cpp's
 * "%6d -> '%s'", with control bytes escaped so that a "\n" token stays on its line. */
static void print_prompt(const infer_model *m, const int32_t *ids, int32_t n) {
    char piece[256];
    fprintf(stderr, "llm-run: prompt: %d tokens\n", n);
    for (int32_t i = 0; i < n; i++) {
        int32_t k = infer_token_to_piece(m, ids[i], piece, (int32_t)sizeof piece, 1);
        if (k > (int32_t)sizeof piece) k = (int32_t)sizeof piece;
        fprintf(stderr, "%6d -> '", ids[i]);
        for (int32_t j = 0; j < k; j++) {
            const unsigned char ch = (unsigned char)piece[j];
            if (ch == '\n') {
                fputs("\\n", stderr);
            } else if (ch < 0x20 || ch == 0x7f) {
                fprintf(stderr, "\\x%02x", ch);
            } else {
                fputc(ch, stderr);
            }
        }
        fputs("'\n", stderr);
    }
}

/* The chat template around prompt for the model's family (malloc'd), or NULL for an unknown family. */
static char *chat_wrap(const char *arch, const char *prompt, size_t len) {
    const char *pre, *post;
    if (!strncmp(arch, "qwen3", 5) || !strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe")) {
        pre = "<|im_start|>user\n";
        post = "<|im_end|>\n<|im_start|>assistant\n";
    } else if (!strcmp(arch, "llama")) { /* llama.cpp's Llama 3 template trims the message */
        while (len && strchr(" \t\n\r", prompt[0])) prompt++, len--;
        while (len && strchr(" \t\n\r", prompt[len - 1])) len--;
        pre = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n";
        post = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    } else {
        return NULL;
    }
    size_t n = strlen(pre) + len + strlen(post);
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, pre, strlen(pre));
    memcpy(s + strlen(pre), prompt, len);
    memcpy(s + strlen(pre) + len, post, strlen(post) + 1);
    return s;
}

/* --dry-run: the placement plan on stdout, no weights read; exit 0, or 1 with the library's message. */
/* --tp-serve: this process's ranks of a group over several processes, following rank 0's (which runs the prompt). */
static int tp_serve(const struct args *a, const infer_model_params *mp, const infer_ctx_params *cp) {
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    infer_status st = infer_model_load(a->model[0], mp, &m);
    if (st == INFER_OK) st = infer_ctx_create(m, cp, &c);
    if (st == INFER_OK) st = infer_tp_serve(c);
    if (st != INFER_OK) fprintf(stderr, "llm-run: %s\n", infer_last_error());
    infer_ctx_free(c);
    infer_model_free(m);
    return st == INFER_OK ? 0 : 1;
}

static int dry_run(const struct args *a, const infer_model_params *mp, const infer_ctx_params *cp) {
    infer_plan_params pp = infer_plan_params_default();
    infer_plan *plan = NULL;
    pp.n_devices = a->n_dry_mem;
    for (int32_t i = 0; i < a->n_dry_mem; i++) pp.free_bytes[i] = a->dry_mem[i];
    if (infer_model_plan(a->model[0], mp, cp, &pp, &plan) != INFER_OK) {
        fprintf(stderr, "llm-run: %s\n", infer_last_error());
        return 1;
    }
    const int32_t n = infer_plan_text(plan, NULL, 0);
    char *text = malloc((size_t)n + 1);
    if (!text) {
        infer_plan_free(plan);
        fprintf(stderr, "llm-run: out of memory\n");
        return 1;
    }
    infer_plan_text(plan, text, n + 1);
    printf("model: %s\n%s", a->model[0], text);
    free(text);
    infer_plan_free(plan);
    return 0;
}

int main(int argc, char **argv) {
    struct args a = {.tool = "llm-run"};
    int rc = args_parse(&a, argc, argv, 0);
    if (rc) return rc;
    if (a.help) return usage(a.tool, 0);
    if (a.n_model != 1) {
        fprintf(stderr, "llm-run: -m MODEL is required\n");
        return usage(a.tool, 1);
    }
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = a.n_ctx;
    if (a.n_batch) cp.n_batch = a.n_batch;
    cp.n_seq = a.n_seq;
    cp.n_threads = a.n_threads;
    cp.n_draft = a.mtp;
    cp.kv_type = a.type_k;
    infer_model_params mp = infer_model_params_default();
    mp.n_gpu_layers = a.n_gpu_layers;
    mp.main_gpu = a.main_gpu;
    mp.split_mode = !a.n_sm                        ? INFER_SPLIT_NONE
                    : a.sm[0] == ARGS_SM_LAYER    ? INFER_SPLIT_LAYER
                    : a.sm[0] == ARGS_SM_TENSOR   ? INFER_SPLIT_TENSOR
                                                  : INFER_SPLIT_NONE;
    for (int d = 0; d < a.n_ts; d++) mp.tensor_split[d] = a.ts[d];
    mp.n_cpu_moe = a.n_cpu_moe;
    mp.tensor_overrides = a.ot_len ? a.ot : NULL;
    mp.fit = a.fit;
    mp.no_repack = a.no_repack;
    mp.fit_ctx = &cp;
    mp.tp_world = a.tp_world, mp.tp_rank0 = a.tp_rank0, mp.tp_id = a.tp_id;
    if (a.dry_run) return dry_run(&a, &mp, &cp);
    if (a.tp_serve) return tp_serve(&a, &mp, &cp);
    if (!!a.prompt + !!a.prompt_file + !!a.n_ids != 1) {
        fprintf(stderr, "llm-run: give exactly one of -p PROMPT, -f FILE, --ids 1,2,3\n");
        return 2;
    }
    if (a.chat && a.n_ids) {
        fprintf(stderr, "llm-run: --chat needs text (-p or -f), not --ids\n");
        return 2;
    }
    int ret = 1;
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    infer_sampler *smp = NULL;
    char *text = NULL, *chat = NULL;
    int32_t *ids = NULL, *gen = NULL;
    FILE *lf = NULL;
    size_t text_len = 0;
    infer_status st;

    /* ---- model and context ---- */
    struct stat sb;
    if (stat(a.model[0], &sb) == 0 && sb.st_size >= PROGRESS_MIN_BYTES) {
        mp.progress = progress;
        mp.progress_user = (void *)a.model[0];
    }
    if ((st = infer_model_load(a.model[0], &mp, &m)) != INFER_OK) goto lib_fail;
    if (a.mtp > 0 && infer_model_n_mtp(m) < 1) {
        fprintf(stderr, "llm-run: --mtp %d: %s has no MTP layer\n", a.mtp, a.model[0]);
        goto out;
    }
    if ((st = infer_ctx_create(m, &cp, &c)) != INFER_OK) goto lib_fail;
    const int32_t n_vocab = infer_vocab_size(m), n_batch = cp.n_batch;

    /* ---- prompt ---- */
    int32_t n_prompt;
    if (a.n_ids) {
        ids = malloc((size_t)a.n_ids * sizeof *ids);
        if (!ids) goto oom;
        for (int i = 0; i < a.n_ids; i++) {
            if (a.ids[i] >= n_vocab) {
                fprintf(stderr, "llm-run: --ids: token %d is outside the vocabulary of %d\n", a.ids[i], n_vocab);
                goto out;
            }
            ids[i] = a.ids[i];
        }
        n_prompt = a.n_ids;
    } else {
        if (a.prompt_file) {
            text = read_file(a.prompt_file, &text_len);
            if (!text) {
                fprintf(stderr, "llm-run: %s: cannot read the prompt file\n", a.prompt_file);
                goto out;
            }
        } else {
            text_len = strlen(a.prompt);
        }
        const char *src = text ? text : a.prompt;
        uint32_t flags = INFER_TOKENIZE_ADD_SPECIAL;
        if (a.chat) {
            chat = chat_wrap(infer_model_arch(m), src, text_len);
            if (!chat) {
                fprintf(stderr, "llm-run: --chat: no chat template for architecture %s\n", infer_model_arch(m));
                goto out;
            }
            src = chat, text_len = strlen(chat), flags |= INFER_TOKENIZE_PARSE_SPECIAL;
        }
        n_prompt = infer_tokenize(m, src, text_len, NULL, 0, flags);
        if (n_prompt < 0) goto lib_fail_tok;
        ids = malloc((size_t)(n_prompt ? n_prompt : 1) * sizeof *ids);
        if (!ids) goto oom;
        if (infer_tokenize(m, src, text_len, ids, n_prompt, flags) != n_prompt) goto lib_fail_tok;
        /* the Llama 3 template writes <|begin_of_text|> itself; ADD_SPECIAL may have added it too */
        const int32_t bos = infer_token_bos(m);
        if (a.chat && n_prompt >= 2 && bos >= 0 && ids[0] == bos && ids[1] == bos)
            memmove(ids, ids + 1, (size_t)--n_prompt * sizeof *ids);
    }
    if (n_prompt == 0) {
        fprintf(stderr, "llm-run: the prompt is empty after tokenisation\n");
        goto out;
    }
    if (a.verbose_prompt) print_prompt(m, ids, n_prompt);

    /* ---- sampler ---- */
    infer_sampler_params sp = a.sp;
    sp.seed = a.seed >= 0 ? (uint64_t)a.seed : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    sp.penalty_last_n = a.repeat_last_n >= 0 ? a.repeat_last_n : (a.n_ctx ? a.n_ctx : 4096);
    if ((st = infer_sampler_create(&sp, n_vocab, &smp)) != INFER_OK) goto lib_fail;
    for (int32_t i = 0; i < n_prompt; i++) infer_sampler_accept(smp, ids[i]);

    /* ---- prompt in chunks of n_batch ---- */
    if (a.logits_out && !(lf = fopen(a.logits_out, "wb"))) {
        fprintf(stderr, "llm-run: %s: cannot open for writing\n", a.logits_out);
        goto out;
    }
    int8_t *want = calloc((size_t)n_batch, 1);
    if (!want) goto oom;
    const double t0 = now_s();
    for (int32_t i0 = 0; i0 < n_prompt; i0 += n_batch) {
        const int32_t n = n_prompt - i0 < n_batch ? n_prompt - i0 : n_batch;
        for (int32_t i = 0; i < n; i++) want[i] = lf || (i0 + i == n_prompt - 1);
        infer_batch b = {n, ids + i0, NULL, NULL, want};
        if ((st = infer_decode(c, &b)) != INFER_OK) {
            free(want);
            if (st == INFER_E_CTX_FULL)
                fprintf(stderr, "llm-run: the prompt of %d tokens does not fit the context (-c): %s\n", n_prompt,
                        infer_last_error());
            else
                fprintf(stderr, "llm-run: %s\n", infer_last_error());
            goto out;
        }
        for (int32_t i = 0; lf && i < n; i++)
            if (fwrite(infer_logits(c, i), sizeof(float), (size_t)n_vocab, lf) != (size_t)n_vocab) {
                free(want);
                fprintf(stderr, "llm-run: %s: write failed\n", a.logits_out);
                goto out;
            }
    }
    free(want);
    if (lf) {
        int bad = fclose(lf) != 0;
        lf = NULL;
        if (bad) {
            fprintf(stderr, "llm-run: %s: write failed\n", a.logits_out);
            goto out;
        }
    }
    const double t1 = now_s();

    /* ---- generation ---- */
    const int32_t n_max = a.n_predict >= 0 ? a.n_predict : INT32_MAX;
    int32_t n_gen = 0, cap_gen = 256;
    gen = malloc((size_t)cap_gen * sizeof *gen);
    if (!gen) goto oom;
    infer_token_stream ts = {{0}, 0};
    char piece[512];
    const char *stop = NULL;
    /* t is always the next token to print; with --mtp, pend holds the rest of the last step's tokens
     * (accepted drafts, already decoded, then the model's own token, not decoded yet) */
    int32_t t = -1, pend[INFER_MAX_DRAFT + 1];
    if ((st = infer_sample(c, smp, -1, &t)) != INFER_OK) goto lib_fail; /* on the device with -ngl */
    int32_t n_pend = 0, i_pend = 0;
    while (n_gen < n_max) {
        if (t < 0 || infer_token_is_eog(m, t)) {
            stop = "end of generation";
            break;
        }
        if (n_gen == cap_gen) {
            int32_t *ng = realloc(gen, (size_t)(cap_gen *= 2) * sizeof *gen);
            if (!ng) goto oom;
            gen = ng;
        }
        gen[n_gen++] = t;
        if (!a.print_ids) {
            int32_t k = infer_token_stream_put(m, &ts, t, 0, piece, (int32_t)sizeof piece);
            if (k > 0 && k <= (int32_t)sizeof piece) fwrite(piece, 1, (size_t)k, stdout);
            fflush(stdout);
        }
        if (n_gen == n_max) break;
        if (i_pend < n_pend) {
            t = pend[i_pend++];
            continue;
        }
        if (a.mtp) {
            st = infer_spec_step(c, smp, 0, t, pend, INFER_MAX_DRAFT + 1, &n_pend);
            i_pend = 0;
        } else {
            infer_batch b = {1, &t, NULL, NULL, NULL};
            st = infer_decode(c, &b);
        }
        if (st == INFER_E_CTX_FULL) {
            stop = "context full";
            break;
        }
        if (st != INFER_OK) {
            fprintf(stderr, "\nllm-run: %s\n", infer_last_error());
            goto out;
        }
        if (a.mtp) {
            t = pend[i_pend++];
        } else if ((st = infer_sample(c, smp, -1, &t)) != INFER_OK) {
            fprintf(stderr, "\nllm-run: %s\n", infer_last_error());
            goto out;
        }
    }
    const double t2 = now_s();
    if (a.print_ids) {
        for (int32_t i = 0; i < n_gen; i++) printf("%s%d", i ? " " : "", gen[i]);
        printf("\n");
    } else {
        int32_t k = infer_token_stream_flush(&ts, piece, (int32_t)sizeof piece);
        if (k > 0) fwrite(piece, 1, (size_t)k, stdout);
        printf("\n");
    }
    fflush(stdout);
    fprintf(stderr, "llm-run: seed %llu; prompt %d tokens in %.3f s (%.2f t/s); generation %d tokens in %.3f s (%.2f t/s)%s%s\n",
            (unsigned long long)sp.seed, n_prompt, t1 - t0, n_prompt / (t1 - t0), n_gen, t2 - t1, n_gen > 0 ? n_gen / (t2 - t1) : 0.0,
            stop ? "; stopped: " : "", stop ? stop : "");
    if (a.mtp) {
        infer_spec_stats ss = infer_spec_get_stats(c);
        fprintf(stderr, "llm-run: mtp %d: %lld steps, %lld of %lld drafts accepted (%.3f), mean accepted length %.3f, "
                "%.3f tokens per forward\n", a.mtp, (long long)ss.n_steps, (long long)ss.n_accepted,
                (long long)ss.n_drafted, ss.n_drafted ? (double)ss.n_accepted / (double)ss.n_drafted : 0.0,
                ss.n_steps ? (double)ss.n_accepted / (double)ss.n_steps : 0.0,
                ss.n_steps ? (double)(ss.n_accepted + ss.n_steps) / (double)ss.n_steps : 0.0);
    }
    ret = 0;
    goto out;

lib_fail_tok:
    fprintf(stderr, "llm-run: tokenising the prompt: %s\n", infer_last_error());
    goto out;
oom:
    fprintf(stderr, "llm-run: out of memory\n");
    goto out;
lib_fail:
    fprintf(stderr, "%sllm-run: %s\n", progress_open ? "\n" : "", infer_last_error());
    (void)st;
out:
    if (lf) fclose(lf);
    free(gen);
    free(ids);
    free(text);
    free(chat);
    infer_sampler_free(smp);
    infer_ctx_free(c);
    infer_model_free(m);
    return ret;
}
