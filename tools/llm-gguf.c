/* llm-gguf: inspect, convert and synthesise GGUF files.
 *
 *   llm-gguf info [--json] FILE          metadata and tensor table
 *   llm-gguf dequant FILE TENSOR OUT     one tensor as raw little-endian f32
 *   llm-gguf quantize IN OUT TYPE        a llama-quantize file type (Q4_K_M, Q3_K_S, Q4_0, ...) from an
 *                                        F32/F16/BF16 file, with llama-quantize's per-tensor types
 *   llm-gguf synth --arch A ... -o OUT   a synthetic model with random weights and real shapes
 *   llm-gguf tokenize MODEL TEXT         token ids, as llama_tokenize (-f FILE, --special, --add-special)
 *   llm-gguf detokenize MODEL ID...      text, as llama_detokenize (remove_special off, unparse_special on)
 *
 * info reads with gguf_open alone, so it works on any architecture and any tensor type; quantize
 * needs a known architecture (its type rules depend on the layer count and head layout); tokenize and
 * detokenize read only the tokenizer's metadata, so a vocabulary-only GGUF will do. Errors are one
 * line on stderr ("llm-gguf: <what>") and exit status 1; usage errors exit 2.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "arch.h"
#include "ftype.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "synth.h"
#include "tokenizer.h"

#define JSON_MAX_ARRAY 16 /* longer arrays are summarised as {"type":…, "length":…} */

static int fail(void) {
    fprintf(stderr, "llm-gguf: %s\n", infer_last_error());
    return 1;
}

static int usage(const char *msg) {
    if (msg) fprintf(stderr, "llm-gguf: %s\n", msg);
    fprintf(
        msg ? stderr : stdout,
        "usage:\n"
        "  llm-gguf info [--json] FILE          metadata; tensors: name, type, shape, bytes, offset\n"
        "  llm-gguf dequant FILE TENSOR OUT     the tensor as raw little-endian f32\n"
        "  llm-gguf quantize IN OUT TYPE        from an F32/F16/BF16 file to one of F32 F16 BF16 Q8_0\n"
        "                                       Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_M Q6_K\n"
        "                                       MXFP4_MOE Q2_K_S IQ4_NL IQ4_XS\n"
        "  llm-gguf synth --arch ARCH [options] -o OUT\n"
        "      --arch      llama qwen3 qwen3moe qwen3next qwen35 qwen35moe\n"
        "      --type      a quantize TYPE (default F32), or one of IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS\n"
        "                  IQ3_XS IQ3_S IQ3_M IQ1_S IQ1_M TQ1_0 TQ2_0 (no quantiser here: their IQ / TQ\n"
        "                  tensors get random blocks, the others are quantised as usual)\n"
        "      --preset    real shapes: llama3-8b qwen3-0.6b qwen3-8b qwen3-30b-a3b qwen35-0.8b qwen35-9b\n"
        "                  qwen35-27b qwen35-35b-a3b qwen3next-80b-a3b qwen35moe-1b\n"
        "      --mtp       add the MTP (nextn) layer (qwen3next, qwen35, qwen35moe)\n"
        "      --tied      no output.weight (LM head tied to token_embd)\n"
        "      --mtp-agree a bigram model whose MTP head agrees with it (implies --mtp, untied)\n"
        "      --mtp-noise SIGMA  noise on the MTP pass-through (implies --mtp-agree); the MTP then\n"
        "                  agrees on 0.90 / 0.78 of the tokens at 0.18 / 0.20 with vocab 32000 (see synth.h)\n"
        "      --random-blocks  random valid quantised blocks (fast for 8B-27B shapes)\n"
        "      --sparse    header and tensor infos only, the file extended to full size with ftruncate: the data\n"
        "                  reads as zeros and takes no disk (a real shape for llm-run --dry-run in seconds)\n"
        "      --seed N    (default 1)\n"
        "      --n-vocab --n-embd --n-layer --n-head --n-head-kv --head-dim --n-ff --n-expert\n"
        "      --n-expert-used --n-ff-exp --n-ff-shexp --ssm-d-state --ssm-n-group --ssm-dt-rank\n"
        "      --ssm-d-conv --full-attention-interval --n-ctx-train N   override one dimension\n"
        "  llm-gguf tokenize [options] MODEL (TEXT | -f FILE)\n"
        "                  the ids of TEXT (or of FILE's bytes; - for stdin) on one line, as llama_tokenize\n"
        "                  MODEL: any GGUF with a tokenizer (only that is read); -- ends the options\n"
        "      --special   control tokens written in the text become their ids (llama.cpp's parse_special)\n"
        "      --add-special  BOS / EOS as the vocabulary asks (llama.cpp's add_special)\n"
        "      --pieces    one \"ID -> 'piece'\" line per token (llama-tokenize's form; \\n, \\xNN escaped)\n"
        "      --ids       the ids on one line (the default)\n"
        "  llm-gguf detokenize [options] MODEL (ID... | -f FILE)\n"
        "                  the text of the ids (spaces or commas between them; -f: from FILE, - for stdin),\n"
        "                  as llama_detokenize, remove_special off, unparse_special on; no newline added\n"
        "      --remove-special  drop a leading BOS / trailing EOS the vocabulary adds\n"
        "      --no-special      control tokens give no text\n");
    return msg ? 2 : 0;
}

/* 1 if b names the file a already is: writing it would truncate the input under its mapping. */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* ---- info ---- */

static void json_shape(FILE *o, const struct gguf_tensor *t) {
    int n = t->n_dims > 0 ? t->n_dims : 1;
    fputc('[', o);
    for (int d = 0; d < n; d++)
        fprintf(o, "%s%" PRId64, d ? "," : "", t->ne[d]);
    fputc(']', o);
}

static const char *type_name(int32_t type) {
    const struct quant_type *q = quant_type(type);
    return q ? q->name : "?";
}

/* general.file_type as llama.cpp names it ("Q3_K - Medium"); NULL for other keys and unknown ids. */
static const char *file_type_desc(const struct gguf_kv *kv) {
    if (strcmp(kv->key, "general.file_type") != 0 || kv->val.type != GGUF_U32) return NULL;
    return ftype_desc((int32_t)kv->val.v.u);
}

static int info_text(const struct gguf_file *f) {
    char buf[1024];
    printf("%s: GGUF v%" PRIu32 ", %" PRId64 " keys, %" PRId64 " tensors, alignment %" PRIu32, f->path,
           f->version, f->n_kv, f->n_tensors, f->alignment);
    if (f->n_splits > 1) printf(", %d parts", f->n_splits);
    printf("\n\n");
    for (int64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_value *v = &f->kv[i].val;
        gguf_value_format(v, buf, sizeof buf, JSON_MAX_ARRAY);
        if (v->type == GGUF_ARR)
            printf("%-48s %s[%" PRIu64 "] = %s\n", f->kv[i].key, gguf_vtype_name(v->elem_type), v->n, buf);
        else if (file_type_desc(&f->kv[i]))
            printf("%-48s %s = %s (%s)\n", f->kv[i].key, gguf_vtype_name(v->type), buf, file_type_desc(&f->kv[i]));
        else
            printf("%-48s %s = %s\n", f->kv[i].key, gguf_vtype_name(v->type), buf);
    }
    printf("\n%-40s %-7s %-28s %14s %14s\n", "tensor", "type", "shape", "bytes", "offset");
    uint64_t total = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        char shape[64];
        int n = t->n_dims > 0 ? t->n_dims : 1, k = 0;
        for (int d = 0; d < n; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%" PRId64, d ? " x " : "", t->ne[d]);
        printf("%-40s %-7s %-28s %14" PRIu64 " %14" PRIu64, t->name, type_name(t->type), shape, t->nbytes,
               t->offset);
        if (f->n_splits > 1) printf("  part %d", t->split + 1);
        printf("\n");
        total += t->nbytes;
    }
    printf("\n%" PRId64 " tensors, %.2f MiB of weights\n", f->n_tensors, (double)total / (1 << 20));
    return 0;
}

/* JSON string: escapes quotes, backslashes and control characters; bytes that are not valid UTF-8
 * become U+FFFD so the output is always valid JSON. */
static void json_str(FILE *o, const char *s, uint64_t len) {
    fputc('"', o);
    for (uint64_t i = 0; i < len;) {
        const uint8_t c = (uint8_t)s[i];
        if (c == '"' || c == '\\')
            fprintf(o, "\\%c", c), i++;
        else if (c == '\n')
            fputs("\\n", o), i++;
        else if (c == '\t')
            fputs("\\t", o), i++;
        else if (c == '\r')
            fputs("\\r", o), i++;
        else if (c < 0x20 || c == 0x7f)
            fprintf(o, "\\u%04x", c), i++;
        else if (c < 0x80)
            fputc(c, o), i++;
        else {
            int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
            int ok = n > 0 && i + (uint64_t)n <= len;
            for (int k = 1; ok && k < n; k++)
                ok = ((uint8_t)s[i + (uint64_t)k] & 0xC0) == 0x80;
            if (ok && n == 3) { /* no overlongs or surrogates */
                const uint8_t c1 = (uint8_t)s[i + 1];
                ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
            }
            if (ok && n == 4) {
                const uint8_t c1 = (uint8_t)s[i + 1];
                ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
            }
            if (ok)
                fwrite(s + i, 1, (size_t)n, o), i += (uint64_t)n;
            else
                fputs("\\ufffd", o), i++;
        }
    }
    fputc('"', o);
}

/* JSON has no NaN or Inf: they become null. 9 significant digits round-trip a float, 17 a double. */
static void json_number(FILE *o, double v, int digits) {
    if (isfinite(v))
        fprintf(o, "%.*g", digits, v);
    else
        fputs("null", o);
}

static void json_scalar(FILE *o, enum gguf_vtype t, const struct gguf_value *v) {
    switch (t) {
    case GGUF_U8:
    case GGUF_U16:
    case GGUF_U32:
    case GGUF_U64:
        fprintf(o, "%" PRIu64, v->v.u);
        break;
    case GGUF_I8:
    case GGUF_I16:
    case GGUF_I32:
    case GGUF_I64:
        fprintf(o, "%" PRId64, v->v.i);
        break;
    case GGUF_F32:
        json_number(o, v->v.f, 9);
        break;
    case GGUF_F64:
        json_number(o, v->v.f, 17);
        break;
    case GGUF_BOOL:
        fputs(v->v.u ? "true" : "false", o);
        break;
    case GGUF_STR:
        json_str(o, v->v.str.s, v->v.str.len);
        break;
    default:
        fputs("null", o);
    }
}

static void json_array_elem(FILE *o, const struct gguf_value *v, uint64_t i) {
    struct gguf_value e;
    memset(&e, 0, sizeof e);
    switch (v->elem_type) {
    case GGUF_U8:
        e.v.u = ((const uint8_t *)v->v.arr)[i];
        break;
    case GGUF_I8:
        e.v.i = ((const int8_t *)v->v.arr)[i];
        break;
    case GGUF_U16:
        e.v.u = ((const uint16_t *)v->v.arr)[i];
        break;
    case GGUF_I16:
        e.v.i = ((const int16_t *)v->v.arr)[i];
        break;
    case GGUF_U32:
        e.v.u = ((const uint32_t *)v->v.arr)[i];
        break;
    case GGUF_I32:
        e.v.i = ((const int32_t *)v->v.arr)[i];
        break;
    case GGUF_F32:
        e.v.f = ((const float *)v->v.arr)[i];
        break;
    case GGUF_BOOL:
        e.v.u = ((const uint8_t *)v->v.arr)[i];
        break;
    case GGUF_U64:
        e.v.u = ((const uint64_t *)v->v.arr)[i];
        break;
    case GGUF_I64:
        e.v.i = ((const int64_t *)v->v.arr)[i];
        break;
    case GGUF_F64:
        e.v.f = ((const double *)v->v.arr)[i];
        break;
    case GGUF_STR:
        e.v.str = ((const struct gguf_str *)v->v.arr)[i];
        break;
    default:
        break;
    }
    json_scalar(o, v->elem_type, &e);
}

static int info_json(const struct gguf_file *f) {
    FILE *o = stdout;
    fprintf(o, "{\"version\":%" PRIu32 ",\"metadata\":{", f->version);
    for (int64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_value *v = &f->kv[i].val;
        if (i) fputc(',', o);
        json_str(o, f->kv[i].key, strlen(f->kv[i].key));
        fputc(':', o);
        if (v->type != GGUF_ARR) {
            json_scalar(o, v->type, v);
        } else if (v->n > JSON_MAX_ARRAY) {
            fprintf(o, "{\"type\":\"%s\",\"length\":%" PRIu64 "}", gguf_vtype_name(v->elem_type), v->n);
        } else {
            fputc('[', o);
            for (uint64_t k = 0; k < v->n; k++) {
                if (k) fputc(',', o);
                json_array_elem(o, v, k);
            }
            fputc(']', o);
        }
    }
    fputs("},\"tensors\":[", o);
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        fprintf(o, "%s{\"name\":", i ? "," : "");
        json_str(o, t->name, strlen(t->name));
        fprintf(o, ",\"type\":\"%s\",\"shape\":", type_name(t->type));
        json_shape(o, t);
        fprintf(o, ",\"offset\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", t->offset, t->nbytes);
    }
    fputs("]}\n", o);
    return ferror(o) ? 1 : 0;
}

static int cmd_info(int argc, char **argv) {
    int json = 0;
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!path)
            path = argv[i];
        else
            return usage("info takes one FILE");
    }
    if (!path) return usage("info needs a FILE");
    struct gguf_file *f;
    if (gguf_open(path, &f) != INFER_OK) return fail();
    int rc = json ? info_json(f) : info_text(f);
    gguf_close(f);
    return rc;
}

/* ---- dequant ---- */

static int cmd_dequant(int argc, char **argv) {
    if (argc != 3) return usage("dequant needs FILE TENSOR OUT");
    struct gguf_file *f;
    if (gguf_open(argv[0], &f) != INFER_OK) return fail();
    int rc = 1;
    float *row = NULL;
    FILE *o = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(f, argv[1]);
    if (!t) {
        infer_fail(INFER_E_ARG, "%s: no tensor named '%s'", argv[0], argv[1]);
        goto done;
    }
    const size_t rb = quant_row_bytes(t->type, t->ne[0]);
    const int64_t rows = t->ne[0] ? (int64_t)(t->nbytes / (rb ? rb : 1)) : 0;
    row = malloc(sizeof(float) * (size_t)(t->ne[0] ? t->ne[0] : 1));
    if (!row) {
        infer_fail(INFER_E_OOM, "out of memory for a row of %" PRId64 " floats", t->ne[0]);
        goto done;
    }
    /* the first row goes through the decoder before OUT exists, so an undecodable type (the
     * library names it) leaves no empty file behind */
    if (quant_dequant_row(t->type, rows > 0 ? t->data : (const void *)row, row, rows > 0 ? t->ne[0] : 0) !=
        INFER_OK) {
        infer_fail_context(INFER_E_UNSUPPORTED, "%s: tensor '%s'", argv[0], t->name);
        goto done;
    }
    if (same_file(argv[0], argv[2])) {
        infer_fail(INFER_E_ARG, "%s: is the input file; choose another output", argv[2]);
        goto done;
    }
    if (!(o = fopen(argv[2], "wb"))) {
        infer_fail(INFER_E_IO, "%s: cannot create: %s", argv[2], strerror(errno));
        goto done;
    }
    for (int64_t r = 0; r < rows; r++) {
        if (quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, row, t->ne[0]) != INFER_OK)
            goto done;
        if (fwrite(row, sizeof(float), (size_t)t->ne[0], o) != (size_t)t->ne[0]) {
            infer_fail(INFER_E_IO, "%s: write failed: %s", argv[2], strerror(errno));
            goto done;
        }
    }
    rc = 0;
done:
    if (o && fclose(o) != 0 && rc == 0) rc = (infer_fail(INFER_E_IO, "%s: write failed", argv[2]), 1);
    if (rc) fail();
    free(row);
    gguf_close(f);
    return rc;
}

/* ---- quantize ---- */

struct quantize_job {
    const struct gguf_file *in;
    int32_t *types; /* (n_tensors) output type per tensor */
    float *row;     /* (max ne0) */
};

static infer_status quantize_fill(void *user, int64_t index, void *dst, size_t nbytes) {
    struct quantize_job *j = user;
    const struct gguf_tensor *t = &j->in->tensors[index];
    const int32_t to = j->types[index];
    const size_t rin = quant_row_bytes(t->type, t->ne[0]), rout = quant_row_bytes(to, t->ne[0]);
    const int64_t rows = rout ? (int64_t)(nbytes / rout) : 0;
    if (t->type == to) {
        memcpy(dst, t->data, nbytes);
        return INFER_OK;
    }
    for (int64_t r = 0; r < rows; r++) {
        infer_status st =
            quant_dequant_row(t->type, (const uint8_t *)t->data + (size_t)r * rin, j->row, t->ne[0]);
        if (st == INFER_OK) st = quant_quantize_row(to, j->row, (uint8_t *)dst + (size_t)r * rout, t->ne[0]);
        if (st) return infer_fail_context(st, "tensor '%s'", t->name);
    }
    return INFER_OK;
}

static int cmd_quantize(int argc, char **argv) {
    if (argc != 3) return usage("quantize needs IN OUT TYPE");
    const int32_t ftype = ftype_by_name(argv[2]);
    if (ftype < 0) {
        char msg[320];
        snprintf(msg, sizeof msg, "quantize TYPE must be one of %s", ftype_names());
        return usage(msg);
    }
    if (same_file(argv[0], argv[1])) {
        fprintf(stderr, "llm-gguf: %s: is the input file; choose another output\n", argv[1]);
        return 1;
    }
    struct gguf_file *f;
    if (gguf_open(argv[0], &f) != INFER_OK) return fail();
    infer_status st = INFER_OK;
    struct gguf_writer *w = NULL;
    struct quantize_job job = {f, NULL, NULL};
    const char *arch_name;
    TRY(gguf_get_str(f, "general.architecture", &arch_name));
    const struct arch_row *a = arch_find(arch_name);
    if (!a) {
        st = infer_fail(INFER_E_UNSUPPORTED, "%s: architecture '%s' has no type rules here", argv[0],
                        arch_name);
        goto fail;
    }
    struct arch_hparams hp;
    TRY(model_read_hparams(f, a, &hp));
    const struct ftype_model fm = {
        (int32_t)hp.n_layer_all, (int32_t)(hp.n_head_kv ? hp.n_head / hp.n_head_kv : 1), (int32_t)hp.n_expert,
        gguf_find_tensor(f, "output.weight") == NULL, hp.n_ff_shexp > 0};
    job.types = calloc((size_t)f->n_tensors + 1, sizeof *job.types);
    int64_t max_ne0 = 1;
    for (int64_t i = 0; i < f->n_tensors; i++)
        max_ne0 = f->tensors[i].ne[0] > max_ne0 ? f->tensors[i].ne[0] : max_ne0;
    job.row = malloc(sizeof(float) * (size_t)max_ne0);
    if (!job.types || !job.row) {
        st = INFER_OOM("the quantize buffers");
        goto fail;
    }
    TRY(gguf_writer_create(&w));
    for (int64_t i = 0; i < f->n_kv; i++) /* all but split.*: the output is one file */
        if (strncmp(f->kv[i].key, "split.", 6) != 0) TRY(gguf_writer_set(w, f->kv[i].key, &f->kv[i].val));
    TRY(gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype));
    TRY(gguf_writer_set_u32(w, "general.quantization_version", 2));
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const struct quant_type *in = quant_type(t->type);
        if (in->blck != 1 || !in->dequant) {
            st = infer_fail(INFER_E_UNSUPPORTED,
                            "%s: tensor '%s' is %s; quantize reads F32, F16 or BF16 files", argv[0], t->name,
                            in->name);
            goto fail;
        }
        job.types[i] = ftype_tensor_type(ftype, t->name, t->n_dims, t->ne, &fm);
        /* the IQ / TQ types have a decoder but no quantiser (llama-quantize's need an imatrix) */
        if (!quant_type(job.types[i])->quantize) {
            st = infer_fail(
                INFER_E_UNSUPPORTED,
                "quantize %s: no quantiser for %s (tensor '%s'); `llm-gguf synth --type %s` writes such "
                "files with random blocks",
                argv[2], quant_type(job.types[i])->name, t->name, ftype_name(ftype));
            goto fail;
        }
        TRY(gguf_writer_add_tensor(w, t->name, job.types[i], t->n_dims > 0 ? t->n_dims : 1, t->ne, NULL));
    }
    TRY(gguf_writer_write(w, argv[1], quantize_fill, &job));
fail:
    gguf_writer_free(w);
    free(job.types);
    free(job.row);
    gguf_close(f);
    return st ? fail() : 0;
}

/* ---- tokenize, detokenize ---- */

/* The tokenizer of any GGUF file that has one: the metadata alone, no weights read (a vocabulary-only
 * file works). NULL with infer_last_error() set. */
static struct tokenizer *open_tokenizer(const char *path) {
    struct gguf_file *f;
    if (gguf_open(path, &f) != INFER_OK) return NULL;
    struct tokenizer *t = NULL;
    if (!gguf_find_kv(f, "tokenizer.ggml.model"))
        infer_fail(INFER_E_FORMAT, "%s: no tokenizer (no tokenizer.ggml.model key)", path);
    else
        tokenizer_load(f, &t); /* borrows f only during the call */
    gguf_close(f);
    return t;
}

/* The whole of FILE ("-": stdin) into a malloc'd buffer, *len its size (NUL bytes included), a NUL after. */
static char *read_all(const char *path, size_t *len) {
    FILE *in = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!in) {
        infer_fail(INFER_E_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, in);
        if (n < cap) break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    if (buf) buf[n] = 0; /* n < cap: the loop ends on a short read */
    const int bad = buf && ferror(in);
    if (in != stdin) fclose(in);
    if (!buf) {
        infer_fail(INFER_E_OOM, "%s: out of memory reading it", path);
        return NULL;
    }
    if (bad) {
        free(buf);
        infer_fail(INFER_E_IO, "%s: read failed", path);
        return NULL;
    }
    *len = n;
    return buf;
}

/* "%6d -> 'piece'" as llama.cpp's llama-tokenize prints it, control bytes escaped so a line stays one. */
static void print_piece(const struct tokenizer *t, int32_t id) {
    char small[256], *piece = small;
    int32_t n = tokenizer_token_to_piece(t, id, small, (int32_t)sizeof small, 0, 1);
    if (n < 0) n = 0;
    if (n > (int32_t)sizeof small && (piece = malloc((size_t)n)) != NULL)
        tokenizer_token_to_piece(t, id, piece, n, 0, 1);
    if (!piece) { /* out of memory for an over-long piece: print the start */
        piece = small;
        n = (int32_t)sizeof small;
    }
    printf("%6d -> '", id);
    for (int32_t j = 0; j < n; j++) {
        const unsigned char ch = (unsigned char)piece[j];
        if (ch == '\n')
            fputs("\\n", stdout);
        else if (ch < 0x20 || ch == 0x7f)
            printf("\\x%02x", ch);
        else
            putchar(ch);
    }
    fputs("'\n", stdout);
    if (piece != small) free(piece);
}

static int cmd_tokenize(int argc, char **argv) {
    int special = 0, add_special = 0, pieces = 0, options = 1;
    const char *model = NULL, *text = NULL, *file = NULL;
    for (int i = 0; i < argc; i++) {
        if (options && !strcmp(argv[i], "--")) {
            options = 0;
        } else if (options && !strcmp(argv[i], "--special")) {
            special = 1;
        } else if (options && !strcmp(argv[i], "--add-special")) {
            add_special = 1;
        } else if (options && !strcmp(argv[i], "--pieces")) {
            pieces = 1;
        } else if (options && !strcmp(argv[i], "--ids")) {
            pieces = 0;
        } else if (options && !strcmp(argv[i], "-f")) {
            if (i + 1 >= argc || file) return usage("tokenize: -f needs one FILE");
            file = argv[++i];
        } else if (options && argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr,
                    "llm-gguf: tokenize: unknown option '%s' (a TEXT starting with '-' goes after --)\n",
                    argv[i]);
            return 2;
        } else if (!model) {
            model = argv[i];
        } else if (!text) {
            text = argv[i];
        } else {
            return usage("tokenize takes one TEXT (quote it)");
        }
    }
    if (!model || !text == !file) return usage("tokenize needs MODEL and one of TEXT, -f FILE");
    size_t len = text ? strlen(text) : 0;
    char *buf = file ? read_all(file, &len) : NULL;
    if (file && !buf) return fail();
    struct tokenizer *t = open_tokenizer(model);
    int32_t cap = 64, n = -1;
    int32_t *ids = t ? malloc(sizeof *ids * (size_t)cap) : NULL;
    if (ids) n = tokenizer_encode(t, file ? buf : text, len, add_special, special, ids, cap);
    if (n > cap) { /* the snprintf rule: n is the count, so a second call with room for it */
        free(ids);
        cap = n;
        ids = malloc(sizeof *ids * (size_t)cap);
        n = ids ? tokenizer_encode(t, file ? buf : text, len, add_special, special, ids, cap) : -1;
    }
    if (t && !ids) infer_fail(INFER_E_OOM, "out of memory for %d token ids", cap);
    const int ok = t && n >= 0;
    for (int32_t i = 0; ok && i < n; i++) {
        if (pieces)
            print_piece(t, ids[i]);
        else
            printf("%s%d", i ? " " : "", ids[i]);
    }
    if (ok && !pieces) putchar('\n');
    free(ids);
    free(buf);
    tokenizer_free(t);
    if (!ok) return fail();
    if (fflush(stdout) != 0) {
        fprintf(stderr, "llm-gguf: stdout: write failed\n");
        return 1;
    }
    return 0;
}

/* Token ids from one argument: separated by commas or white space, so both "1,2,3" (llm-run --ids) and
 * "$(llm-gguf tokenize ...)" work. 0 if something in it is not an integer. */
static int parse_ids(const char *s, int32_t **ids, int32_t *n, int32_t *cap) {
    while (*s) {
        if (strchr(", \t\r\n", *s)) {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        const long v = strtol(s, &end, 10);
        if (errno || end == s || v < INT32_MIN || v > INT32_MAX || (*end && !strchr(", \t\r\n", *end)))
            return 0;
        if (*n == *cap) {
            int32_t *more = realloc(*ids, sizeof **ids * (size_t)(*cap ? 2 * *cap : 64));
            if (!more) return -1;
            *ids = more;
            *cap = *cap ? 2 * *cap : 64;
        }
        (*ids)[(*n)++] = (int32_t)v;
        s = end;
    }
    return 1;
}

static int cmd_detokenize(int argc, char **argv) {
    int remove_special = 0, unparse_special = 1, options = 1, rc = 1;
    const char *model = NULL, *file = NULL;
    int32_t *ids = NULL, n = 0, cap = 0;
    char *text = NULL, *list = NULL;
    struct tokenizer *t = NULL;
    for (int i = 0; i < argc; i++) {
        if (options && !strcmp(argv[i], "--")) {
            options = 0;
        } else if (options && !strcmp(argv[i], "--remove-special")) {
            remove_special = 1;
        } else if (options && !strcmp(argv[i], "--no-special")) {
            unparse_special = 0;
        } else if (options && !strcmp(argv[i], "-f")) {
            if (i + 1 >= argc || file) {
                rc = usage("detokenize: -f needs one FILE");
                goto done;
            }
            file = argv[++i];
        } else if (options && argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "llm-gguf: detokenize: unknown option '%s'\n", argv[i]);
            rc = 2;
            goto done;
        } else if (!model) {
            model = argv[i];
        } else {
            const int got = parse_ids(argv[i], &ids, &n, &cap);
            if (got <= 0) {
                if (got < 0) {
                    infer_fail(INFER_E_OOM, "out of memory for %d token ids", n);
                    goto done;
                }
                fprintf(stderr, "llm-gguf: detokenize: '%s' is not a list of token ids\n", argv[i]);
                rc = 2;
                goto done;
            }
        }
    }
    if (!model) {
        rc = usage("detokenize needs MODEL and the token ids");
        goto done;
    }
    size_t list_len = 0;
    if (file && !(list = read_all(file, &list_len))) goto done;
    if (list) { /* after any ids given as arguments */
        const int got = parse_ids(list, &ids, &n, &cap);
        if (got < 0) infer_fail(INFER_E_OOM, "out of memory for %d token ids", n);
        if (got == 0)
            infer_fail(INFER_E_FORMAT, "%s: not a list of token ids", strcmp(file, "-") ? file : "stdin");
        if (got <= 0) goto done;
    }
    if (!(t = open_tokenizer(model))) goto done;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(t)) {
            infer_fail(INFER_E_ARG, "%s: token id %d: expected 0..%d", model, ids[i],
                       tokenizer_n_vocab(t) - 1);
            goto done;
        }
    int32_t room = n < (INT32_MAX - 64) / 4 ? 4 * n + 64 : INT32_MAX, len = -1; /* most pieces are short */
    for (int pass = 0; pass < 2; pass++) { /* a second pass only when the first guess was short */
        free(text);
        if (!(text = malloc((size_t)room))) {
            infer_fail(INFER_E_OOM, "out of memory for %d bytes of text", room);
            goto done;
        }
        len = tokenizer_detokenize(t, ids, n, text, room, remove_special, unparse_special);
        if (len < 0) goto done;
        if (len <= room) break;
        room = len;
    }
    /* the bytes alone, no newline added: the output tokenises back (tokenize -f -) */
    if (fwrite(text, 1, (size_t)len, stdout) != (size_t)len || fflush(stdout) != 0) {
        infer_fail(INFER_E_IO, "stdout: write failed");
        goto done;
    }
    rc = 0;
done:
    if (rc == 1) fail();
    free(text);
    free(list);
    free(ids);
    tokenizer_free(t);
    return rc;
}

/* ---- synth ---- */

struct dim_flag {
    const char *flag;
    size_t offset;
};

static const struct dim_flag dim_flags[] = {
    {"--n-vocab", offsetof(struct synth_params, n_vocab)},
    {"--n-embd", offsetof(struct synth_params, n_embd)},
    {"--n-layer", offsetof(struct synth_params, n_layer)},
    {"--n-head", offsetof(struct synth_params, n_head)},
    {"--n-head-kv", offsetof(struct synth_params, n_head_kv)},
    {"--head-dim", offsetof(struct synth_params, head_dim)},
    {"--n-ff", offsetof(struct synth_params, n_ff)},
    {"--n-expert", offsetof(struct synth_params, n_expert)},
    {"--n-expert-used", offsetof(struct synth_params, n_expert_used)},
    {"--n-ff-exp", offsetof(struct synth_params, n_ff_exp)},
    {"--n-ff-shexp", offsetof(struct synth_params, n_ff_shexp)},
    {"--ssm-d-state", offsetof(struct synth_params, ssm_d_state)},
    {"--ssm-n-group", offsetof(struct synth_params, ssm_n_group)},
    {"--ssm-dt-rank", offsetof(struct synth_params, ssm_dt_rank)},
    {"--ssm-d-conv", offsetof(struct synth_params, ssm_d_conv)},
    {"--full-attention-interval", offsetof(struct synth_params, full_attention_interval)},
    {"--n-ctx-train", offsetof(struct synth_params, n_ctx_train)},
};

static int parse_int(const char *s, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < 0 || v > INT32_MAX) return 0;
    *out = (int32_t)v;
    return 1;
}

static int cmd_synth(int argc, char **argv) {
    const char *arch = NULL, *type = "F32", *preset = NULL, *out = NULL;
    int mtp = 0, random_blocks = 0, tied = -1, mtp_agree = 0, sparse = 0;
    float mtp_noise = 0;
    uint64_t seed = 1;
    int32_t dims[sizeof dim_flags / sizeof *dim_flags];
    int dim_set[sizeof dim_flags / sizeof *dim_flags] = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--mtp"))
            mtp = 1;
        else if (!strcmp(a, "--tied"))
            tied = 1;
        else if (!strcmp(a, "--random-blocks"))
            random_blocks = 1;
        else if (!strcmp(a, "--mtp-agree"))
            mtp_agree = 1;
        else if (!strcmp(a, "--sparse"))
            sparse = 1;
        else if (!next) {
            fprintf(stderr, "llm-gguf: %s needs a value\n", a);
            return 2;
        } else if (!strcmp(a, "--arch"))
            arch = argv[++i];
        else if (!strcmp(a, "--type"))
            type = argv[++i];
        else if (!strcmp(a, "--preset"))
            preset = argv[++i];
        else if (!strcmp(a, "-o"))
            out = argv[++i];
        else if (!strcmp(a, "--mtp-noise")) {
            char *end;
            errno = 0;
            double v = strtod(argv[++i], &end);
            if (errno || *end || end == argv[i] || !(v >= 0 && v < 100)) {
                fprintf(stderr, "llm-gguf: --mtp-noise wants a number in 0..100, got '%s'\n", argv[i]);
                return 2;
            }
            mtp_noise = (float)v;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            seed = strtoull(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || argv[i][0] == '-') {
                fprintf(stderr, "llm-gguf: --seed wants a non-negative integer, got '%s'\n", argv[i]);
                return 2;
            }
        } else {
            size_t k = 0;
            while (k < sizeof dim_flags / sizeof *dim_flags && strcmp(a, dim_flags[k].flag))
                k++;
            if (k == sizeof dim_flags / sizeof *dim_flags) {
                fprintf(stderr, "llm-gguf: unknown synth option %s\n", a);
                return 2;
            }
            if (!parse_int(argv[++i], &dims[k])) {
                fprintf(stderr, "llm-gguf: %s wants a non-negative integer, got '%s'\n", a, argv[i]);
                return 2;
            }
            dim_set[k] = 1;
        }
    }
    if (!out) return usage("synth needs -o OUT");
    if (!arch && !preset) return usage("synth needs --arch or --preset");
    struct synth_params p;
    memset(&p, 0, sizeof p);
    if (preset) {
        p.ftype = type, p.mtp = mtp, p.seed = seed, p.random_blocks = random_blocks;
        if (synth_preset(preset, &p) != INFER_OK) return fail();
        if (arch && strcmp(arch, p.arch)) {
            fprintf(stderr, "llm-gguf: preset %s is arch %s, not %s\n", preset, p.arch, arch);
            return 2;
        }
    } else if (synth_params_default(arch, &p) != INFER_OK) {
        return fail();
    }
    p.ftype = type, p.mtp = mtp, p.seed = seed, p.random_blocks = random_blocks;
    if (tied >= 0) p.tied = tied;
    p.mtp_agree = mtp_agree, p.mtp_noise = mtp_noise;
    p.sparse = sparse;
    for (size_t k = 0; k < sizeof dim_flags / sizeof *dim_flags; k++)
        if (dim_set[k]) *(int32_t *)((char *)&p + dim_flags[k].offset) = dims[k];
    if (synth_write(&p, out) != INFER_OK) return fail();
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage("missing command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) return usage(NULL);
    const int known = !strcmp(cmd, "info") || !strcmp(cmd, "dequant") || !strcmp(cmd, "quantize") ||
                      !strcmp(cmd, "synth") || !strcmp(cmd, "tokenize") || !strcmp(cmd, "detokenize");
    for (int i = 2; known && i < argc && strcmp(argv[i], "--"); i++) /* after --: a TEXT */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(NULL);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "dequant")) return cmd_dequant(argc - 2, argv + 2);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 2, argv + 2);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 2, argv + 2);
    fprintf(stderr, "llm-gguf: unknown command '%s'\n", cmd);
    return usage("run llm-gguf help for the commands");
}
