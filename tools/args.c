/* args: strict llama.cpp-style flag parsing for llm-run and llm-bench (see args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int args_bad(const struct args *a, const char *flag, const char *val, const char *what) {
    fprintf(stderr, "%s: %s: '%s' %s\n", a->tool, flag, val, what);
    return 2;
}

static int args_int(const struct args *a, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno) return args_bad(a, flag, s, "is not an integer");
    if (v < lo || v > hi) {
        fprintf(stderr, "%s: %s: %lld is out of range [%lld, %lld]\n", a->tool, flag, v, (long long)lo, (long long)hi);
        return 2;
    }
    *out = v;
    return 0;
}

static int args_i32(const struct args *a, const char *flag, const char *s, int32_t lo, int32_t *out) {
    int64_t v;
    if (args_int(a, flag, s, lo, INT32_MAX, &v)) return 2;
    *out = (int32_t)v;
    return 0;
}

static int args_float(const struct args *a, const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (!*s || *end || errno || !isfinite(v)) return args_bad(a, flag, s, "is not a finite number");
    *out = v;
    return 0;
}

/* -ctk / -ctv: a KV cell type by llama.cpp's name (f16 or q8_0). */
static int args_kv_type(const struct args *a, const char *flag, const char *s, int32_t *out) {
    if (!strcmp(s, "f16")) *out = INFER_TYPE_F16;
    else if (!strcmp(s, "q8_0")) *out = INFER_TYPE_Q8_0;
    else return args_bad(a, flag, s, "is not a supported KV cache type (f16 or q8_0)");
    return 0;
}

/* -ngl: a layer count, auto (INFER_GPU_LAYERS_AUTO) or all (-1). */
static int args_ngl(const struct args *a, const char *flag, const char *s, int32_t *out) {
    if (!strcmp(s, "auto")) *out = INFER_GPU_LAYERS_AUTO;
    else if (!strcmp(s, "all")) *out = -1;
    else return args_i32(a, flag, s, 0, out);
    return 0;
}

/* One memory size: a number with an optional binary suffix K, M, G or T ("12G", "11.5G", "16384M"). */
static int args_size(const struct args *a, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    double unit = 1;
    if (*end == 'K') unit = 1024.0;
    if (*end == 'M') unit = 1048576.0;
    if (*end == 'G') unit = 1073741824.0;
    if (*end == 'T') unit = 1099511627776.0;
    if (unit > 1) end++;
    if (end == s || *end || errno || !(v > 0) || v * unit > 1e18)
        return args_bad(a, flag, s, "is not a memory size (e.g. 12G, 11.5G, 16384M)");
    *out = (uint64_t)(v * unit);
    return 0;
}

/* --dry-run-mem 12G,24G: the free memory of devices 0, 1, ... */
static int args_sizes(struct args *a, const char *flag, const char *s) {
    char buf[64];
    a->n_dry_mem = 0;
    for (const char *p = s;;) {
        const char *c = strchr(p, ',');
        const size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len >= sizeof buf) return args_bad(a, flag, s, "has an element that is too long");
        if (a->n_dry_mem == INFER_MAX_DEVICES) {
            fprintf(stderr, "%s: %s: more than %d devices\n", a->tool, flag, INFER_MAX_DEVICES);
            return 2;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        if (args_size(a, flag, buf, &a->dry_mem[a->n_dry_mem++])) return 2;
        if (!c) return 0;
        p = c + 1;
    }
}

/* -ts 3,1 (or llama-bench's 3/1): each device's share of the GPU layers with -sm layer; finite, >= 0, one > 0. */
static int args_ts(struct args *a, const char *flag, const char *s) {
    char buf[64];
    float sum = 0;
    a->n_ts = 0;
    for (const char *p = s;;) {
        const size_t len = strcspn(p, ",/");
        if (len >= sizeof buf) return args_bad(a, flag, s, "has an element that is too long");
        if (a->n_ts == INFER_MAX_DEVICES) {
            fprintf(stderr, "%s: %s: more than %d devices\n", a->tool, flag, INFER_MAX_DEVICES);
            return 2;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        float v;
        if (args_float(a, flag, buf, &v)) return 2;
        if (v < 0) return args_bad(a, flag, buf, "is a negative share");
        a->ts[a->n_ts++] = v;
        sum += v;
        if (!p[len]) break;
        p += len + 1;
    }
    return sum > 0 ? 0 : args_bad(a, flag, s, "gives no device a share");
}

/* "1,2,3" into out (at most cap); lo is the smallest value allowed. */
static int args_list(const struct args *a, const char *flag, const char *s, int32_t lo, int32_t *out, int cap,
                     int *n) {
    char buf[64];
    *n = 0;
    for (const char *p = s;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len >= sizeof buf) return args_bad(a, flag, s, "has an element that is too long");
        if (*n == cap) {
            fprintf(stderr, "%s: %s: more than %d values\n", a->tool, flag, cap);
            return 2;
        }
        memcpy(buf, p, len);
        buf[len] = 0;
        if (args_i32(a, flag, buf, lo, &out[(*n)++])) return 2;
        if (!c) return 0;
        p = c + 1;
    }
}

/* One -ot entry s[0..len): PATTERN=DEVICE, the pattern non-empty and a valid extended regular expression (\d
 * read as [0-9], as the library reads it), DEVICE CPU or CUDA<i>. Whether the placement it asks for runs is
 * the library's check, at load. */
static int args_ot_entry(const struct args *a, const char *flag, const char *s, size_t len) {
    char e[512], pat[5 * sizeof e]; /* \d grows to [0-9] */
    if (len >= sizeof e) return args_bad(a, flag, s, "has a pattern that is too long");
    memcpy(e, s, len);
    e[len] = 0;
    char *eq = strchr(e, '='); /* the first '=', as the library splits it */
    const char *dev = eq ? eq + 1 : "";
    const int cuda = !strncmp(dev, "CUDA", 4);
    const size_t digits = cuda ? strspn(dev + 4, "0123456789") : 0;
    const int dev_ok = !strcmp(dev, "CPU") || (cuda && digits > 0 && !dev[4 + digits]);
    if (!eq || eq == e || !dev_ok)
        return args_bad(a, flag, e, "is not PATTERN=DEVICE (DEVICE: CPU or CUDA0, CUDA1, ...)");
    size_t o = 0;
    for (const char *c = e; c < eq; c++) {
        if (c[0] == '\\' && c + 1 < eq && c[1] == 'd') {
            memcpy(pat + o, "[0-9]", 5);
            o += 5;
            c++;
            continue;
        }
        pat[o++] = *c;
    }
    pat[o] = 0;
    regex_t re;
    if (regcomp(&re, pat, REG_EXTENDED | REG_NOSUB)) {
        *eq = 0;
        return args_bad(a, flag, e, "is not a valid extended regular expression");
    }
    regfree(&re);
    return 0;
}

/* Appends s[0..len) to a->ot, after sep unless sep is 0; keeps it NUL-terminated. */
static int args_ot_put(struct args *a, const char *flag, char sep, const char *s, size_t len) {
    if (a->ot_len + (sep != 0) + len + 1 > sizeof a->ot) {
        fprintf(stderr, "%s: %s: the overrides are longer than %zu bytes in all\n", a->tool, flag, sizeof a->ot - 1);
        return 2;
    }
    if (sep) a->ot[a->ot_len++] = sep;
    memcpy(a->ot + a->ot_len, s, len);
    a->ot_len += len;
    a->ot[a->ot_len] = 0;
    return 0;
}

/* llm-run -ot A=D[,B=D...]: every entry checked, then appended to what earlier -ot flags gave (llama.cpp's
 * flags accumulate). */
static int args_ot(struct args *a, const char *flag, const char *v) {
    for (const char *p = v;;) {
        const size_t len = strcspn(p, ",");
        if (len == 0) return args_bad(a, flag, v, "has an empty entry (expected PATTERN=DEVICE[,PATTERN=DEVICE...])");
        if (args_ot_entry(a, flag, p, len)) return 2;
        if (args_ot_put(a, flag, a->ot_len ? ',' : 0, p, len)) return 2;
        if (!p[len]) return 0;
        p += len + 1;
    }
}

/* llm-bench -ot A=D;B=D,C=D: llama-bench's form, ',' between alternative sets (each a run of its own) and ';'
 * between the patterns of one set; an empty set means no overrides. Each set goes into a->ot in the library's
 * comma form, NUL-terminated, with a->ot_set[] pointing at it; further -ot flags add sets. */
static int args_ot_sets(struct args *a, const char *flag, const char *v) {
    for (const char *g = v;;) {
        const size_t glen = strcspn(g, ",");
        if (a->n_ot_set == ARGS_MAX_LIST) {
            fprintf(stderr, "%s: %s: more than %d override sets\n", a->tool, flag, ARGS_MAX_LIST);
            return 2;
        }
        if (a->n_ot_set > 0 && args_ot_put(a, flag, 0, "", 1)) return 2; /* past the previous set's NUL */
        char *set = a->ot + a->ot_len;
        const size_t set0 = a->ot_len;
        for (const char *p = g; p < g + glen;) {
            const size_t len = strcspn(p, ";,");
            if (len && args_ot_entry(a, flag, p, len)) return 2;
            if (len && args_ot_put(a, flag, a->ot_len > set0 ? ',' : 0, p, len)) return 2;
            p += len + (p[len] == ';');
        }
        a->ot_set[a->n_ot_set++] = set;
        if (!g[glen]) return 0;
        g += glen + 1;
    }
}

/* -sm none|layer|tensor (llm-bench: a list); row (llama.cpp's older row split) is refused by name. */
static int args_sm(struct args *a, const char *flag, const char *v) {
    char w[32];
    a->n_sm = 0;
    for (const char *p = v;;) {
        const size_t len = strcspn(p, ",");
        if (len >= sizeof w) return args_bad(a, flag, v, "has an element that is too long");
        if (a->n_sm == ARGS_MAX_LIST) {
            fprintf(stderr, "%s: %s: more than %d values\n", a->tool, flag, ARGS_MAX_LIST);
            return 2;
        }
        memcpy(w, p, len);
        w[len] = 0;
        if (!strcmp(w, "none")) {
            a->sm[a->n_sm++] = ARGS_SM_NONE;
        } else if (!strcmp(w, "layer")) {
            a->sm[a->n_sm++] = ARGS_SM_LAYER;
        } else if (!strcmp(w, "tensor")) {
            a->sm[a->n_sm++] = ARGS_SM_TENSOR;
        } else if (!strcmp(w, "row")) {
            fprintf(stderr, "%s: %s row: llama.cpp's row split is not supported; tensor parallelism is -sm tensor\n",
                    a->tool, flag);
            return 2;
        } else {
            return args_bad(a, flag, w, "is not a split mode (none, layer or tensor)");
        }
        if (!p[len]) return 0;
        p += len + 1;
    }
}

int args_parse(struct args *a, int argc, char **argv, int bench) {
    const char *tool = a->tool;
    memset(a, 0, sizeof *a);
    a->tool = tool;
    a->n_predict = 32;
    a->seed = -1;
    a->sp = infer_sampler_params_default();
    a->repeat_last_n = a->sp.penalty_last_n;
    a->reps = 5;
    a->output = "md";
    a->type_k = a->type_v = INFER_TYPE_F16;
    a->fit = 1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            a->help = 1;
            continue;
        }
        if (!strcmp(f, "--chat")) {
            a->chat = 1;
            continue;
        }
        if (!strcmp(f, "--print-ids")) {
            a->print_ids = 1;
            continue;
        }
        if (!strcmp(f, "--verbose-prompt")) {
            a->verbose_prompt = 1;
            continue;
        }
        if (!strcmp(f, "--no-repack")) {
            a->no_repack = 1;
            continue;
        }
        if (!bench && !strcmp(f, "--dry-run")) {
            a->dry_run = 1;
            continue;
        }
        if (!bench && !strcmp(f, "--tp-serve")) {
            a->tp_serve = 1;
            continue;
        }
        if (!strcmp(f, "--cpu-moe")) {
            if (bench && a->n_ncmoe == ARGS_MAX_LIST) {
                fprintf(stderr, "%s: %s: more than %d values\n", tool, f, ARGS_MAX_LIST);
                return 2;
            }
            if (bench)
                a->ncmoe[a->n_ncmoe++] = INT32_MAX; /* one more value of the --n-cpu-moe list */
            else
                a->n_cpu_moe = INT32_MAX;
            continue;
        }
        if (f[0] != '-') {
            fprintf(stderr, "%s: unexpected argument '%s'\n", tool, f);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value (or is unknown: see --help)\n", tool, f);
            return 2;
        }
        const char *v = argv[++i];
        int64_t x;
        int rc = 0;
        if (!strcmp(f, "-m") || !strcmp(f, "--model")) {
            if (a->n_model == ARGS_MAX_MODELS || (a->n_model == 1 && !bench)) {
                fprintf(stderr, "%s: -m: %s\n", tool, bench ? "too many models" : "one model only");
                return 2;
            }
            a->model[a->n_model++] = v;
        } else if (bench && (!strcmp(f, "-p") || !strcmp(f, "--n-prompt"))) {
            rc = args_list(a, f, v, 0, a->pp, ARGS_MAX_LIST, &a->n_pp);
        } else if (bench && (!strcmp(f, "-n") || !strcmp(f, "--n-gen"))) {
            rc = args_list(a, f, v, 0, a->tg, ARGS_MAX_LIST, &a->n_tg);
        } else if (bench && (!strcmp(f, "-d") || !strcmp(f, "--n-depth"))) {
            rc = args_list(a, f, v, 0, a->depth, ARGS_MAX_LIST, &a->n_depth);
        } else if (bench && (!strcmp(f, "-r") || !strcmp(f, "--repetitions"))) {
            rc = args_i32(a, f, v, 1, &a->reps);
        } else if (bench && (!strcmp(f, "-o") || !strcmp(f, "--output"))) {
            if (strcmp(v, "md") && strcmp(v, "csv") && strcmp(v, "json")) return args_bad(a, f, v, "is not md, csv or json");
            a->output = v;
        } else if (!bench && (!strcmp(f, "-p") || !strcmp(f, "--prompt"))) {
            a->prompt = v;
        } else if (!bench && (!strcmp(f, "-f") || !strcmp(f, "--file"))) {
            a->prompt_file = v;
        } else if (!bench && (!strcmp(f, "-n") || !strcmp(f, "--n-predict"))) {
            rc = args_i32(a, f, v, -1, &a->n_predict);
        } else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) {
            rc = args_i32(a, f, v, 0, &a->n_ctx);
        } else if (!strcmp(f, "-b") || !strcmp(f, "--batch-size")) {
            rc = args_i32(a, f, v, 1, &a->n_batch);
        } else if (!strcmp(f, "--mtp")) {
            rc = args_i32(a, f, v, 0, &a->mtp);
            if (!rc && a->mtp > INFER_MAX_DRAFT) return args_bad(a, f, v, "is more than 4 (INFER_MAX_DRAFT)");
        } else if (!strcmp(f, "-ctk") || !strcmp(f, "--cache-type-k")) {
            rc = args_kv_type(a, f, v, &a->type_k);
        } else if (!strcmp(f, "-ctv") || !strcmp(f, "--cache-type-v")) {
            rc = args_kv_type(a, f, v, &a->type_v);
        } else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) {
            rc = args_i32(a, f, v, 0, &a->n_threads);
        } else if (!strcmp(f, "-ngl") || !strcmp(f, "--n-gpu-layers")) {
            /* note: only the number is checked here; the library refuses a value it cannot run (no device,
             * a model or split larger than the device's memory) with its own message */
            if (bench)
                rc = args_list(a, f, v, 0, a->ngl, ARGS_MAX_LIST, &a->n_ngl);
            else
                rc = args_ngl(a, f, v, &a->n_gpu_layers);
        } else if (!strcmp(f, "-mg") || !strcmp(f, "--main-gpu")) {
            rc = args_i32(a, f, v, 0, &a->main_gpu);
        } else if (!bench && !strcmp(f, "--tp-world")) {
            rc = args_i32(a, f, v, 1, &a->tp_world);
        } else if (!bench && !strcmp(f, "--tp-rank0")) {
            rc = args_i32(a, f, v, 0, &a->tp_rank0);
        } else if (!bench && !strcmp(f, "--tp-id")) {
            a->tp_id = v;
        } else if (!bench && !strcmp(f, "--n-cpu-moe")) {
            rc = args_i32(a, f, v, 0, &a->n_cpu_moe);
        } else if (bench && !strcmp(f, "--n-cpu-moe")) {
            /* appends, so that --cpu-moe before or after adds to the list */
            int32_t vals[ARGS_MAX_LIST];
            int n = 0;
            rc = args_list(a, f, v, 0, vals, ARGS_MAX_LIST, &n);
            if (!rc && a->n_ncmoe + n > ARGS_MAX_LIST) {
                fprintf(stderr, "%s: %s: more than %d values\n", tool, f, ARGS_MAX_LIST);
                return 2;
            }
            for (int k = 0; !rc && k < n; k++) a->ncmoe[a->n_ncmoe++] = vals[k];
        } else if (!strcmp(f, "-ot") || !strcmp(f, "--override-tensor")) {
            rc = bench ? args_ot_sets(a, f, v) : args_ot(a, f, v);
        } else if (!strcmp(f, "-sm") || !strcmp(f, "--split-mode")) {
            rc = args_sm(a, f, v);
            if (!rc && !bench && a->n_sm > 1) return args_bad(a, f, v, "is a list (llm-bench takes lists)");
        } else if (!strcmp(f, "-ts") || !strcmp(f, "--tensor-split")) {
            rc = args_ts(a, f, v);
        } else if (!bench && !strcmp(f, "--fit")) {
            if (strcmp(v, "on") && strcmp(v, "off")) return args_bad(a, f, v, "is not on or off");
            a->fit = !strcmp(v, "on");
        } else if (!bench && !strcmp(f, "--dry-run-mem")) {
            rc = args_sizes(a, f, v);
        } else if (!bench && (!strcmp(f, "-np") || !strcmp(f, "--parallel"))) {
            rc = args_i32(a, f, v, 1, &a->n_seq);
            if (!rc && a->n_seq > 256) return args_bad(a, f, v, "is more than 256 sequences");
        } else if (!bench && (!strcmp(f, "-s") || !strcmp(f, "--seed"))) {
            rc = args_int(a, f, v, -1, INT64_MAX, &x);
            a->seed = x;
        } else if (!bench && !strcmp(f, "--temp")) {
            rc = args_float(a, f, v, &a->sp.temp);
        } else if (!bench && !strcmp(f, "--top-k")) {
            rc = args_i32(a, f, v, 0, &a->sp.top_k);
        } else if (!bench && !strcmp(f, "--top-p")) {
            rc = args_float(a, f, v, &a->sp.top_p);
        } else if (!bench && !strcmp(f, "--min-p")) {
            rc = args_float(a, f, v, &a->sp.min_p);
        } else if (!bench && !strcmp(f, "--repeat-penalty")) {
            rc = args_float(a, f, v, &a->sp.repeat_penalty);
            if (!rc && a->sp.repeat_penalty <= 0) return args_bad(a, f, v, "must be > 0");
        } else if (!bench && !strcmp(f, "--presence-penalty")) {
            rc = args_float(a, f, v, &a->sp.presence_penalty);
        } else if (!bench && !strcmp(f, "--frequency-penalty")) {
            rc = args_float(a, f, v, &a->sp.frequency_penalty);
        } else if (!bench && !strcmp(f, "--repeat-last-n")) {
            rc = args_i32(a, f, v, -1, &a->repeat_last_n);
        } else if (!bench && !strcmp(f, "--ids")) {
            rc = args_list(a, f, v, 0, a->ids, (int)(sizeof a->ids / sizeof *a->ids), &a->n_ids);
        } else if (!bench && !strcmp(f, "--logits-out")) {
            a->logits_out = v;
        } else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", tool, f);
            return 2;
        }
        if (rc) return rc;
    }
    if (a->type_k != a->type_v) {
        fprintf(stderr, "%s: -ctk %s -ctv %s: K and V caches of different types are not supported; give both the "
                "same type\n", tool, a->type_k == INFER_TYPE_Q8_0 ? "q8_0" : "f16",
                a->type_v == INFER_TYPE_Q8_0 ? "q8_0" : "f16");
        return 2;
    }
    return 0;
}
