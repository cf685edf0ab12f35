/* infer: the public model API (include/infer.h) over gguf + model.
 *
 * infer_model_load = gguf_open (validate the container) + model_bind (the architecture's tensors,
 * shapes and types) + optionally a NaN/Inf scan of the data + with n_gpu_layers the upload of the
 * weights the plan (plan.c) places on the devices (model_upload.c), or with split_mode tensor of each
 * rank's shards (model_tp.c). Progress is reported at the start, after binding, while scanning (by bytes)
 * and at the end; a nonzero return from the callback cancels.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "model.h"
#include "plan.h"
#include "quant.h"

INFER_API infer_model_params infer_model_params_default(void) {
    infer_model_params p;
    memset(&p, 0, sizeof p);
    p.fit = 1;
    return p;
}

/* Where the f16 scale fields of a quantised block are: n of them from byte offset off. */
struct infer_scales {
    int32_t type;
    int off, n;
};
static const struct infer_scales infer_scale_table[] = {
    {INFER_TYPE_Q4_0, 0, 1}, {INFER_TYPE_Q4_1, 0, 2},   {INFER_TYPE_Q5_0, 0, 1}, {INFER_TYPE_Q5_1, 0, 2},
    {INFER_TYPE_Q8_0, 0, 1}, {INFER_TYPE_Q2_K, 80, 2},  {INFER_TYPE_Q3_K, 108, 1}, {INFER_TYPE_Q4_K, 0, 2},
    {INFER_TYPE_Q5_K, 0, 2}, {INFER_TYPE_Q6_K, 208, 1}, {INFER_TYPE_IQ4_NL, 0, 1}, {INFER_TYPE_IQ4_XS, 0, 1},
    {INFER_TYPE_IQ2_XXS, 0, 1}, {INFER_TYPE_IQ2_XS, 0, 1}, {INFER_TYPE_IQ2_S, 0, 1}, {INFER_TYPE_IQ3_XXS, 0, 1},
    {INFER_TYPE_IQ3_S, 0, 1}, {INFER_TYPE_IQ1_S, 0, 1}, {INFER_TYPE_TQ1_0, 52, 1}, {INFER_TYPE_TQ2_0, 64, 1},
};

static int infer_f16_bad(const uint8_t *p) {
    uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    return (h & 0x7c00) == 0x7c00; /* exponent all ones: Inf or NaN */
}

/* Scans one tensor; *bad_elem is the element (float types) or block index of the first NaN/Inf. */
static int infer_scan_tensor(const struct gguf_tensor *t, uint64_t *bad) {
    const uint8_t *d = t->data;
    if (t->type == INFER_TYPE_F32) {
        for (uint64_t i = 0; i < t->nbytes / 4; i++) {
            float x;
            memcpy(&x, d + 4 * i, 4);
            if (!isfinite(x)) return *bad = i, 1;
        }
    } else if (t->type == INFER_TYPE_F16 || t->type == INFER_TYPE_BF16) {
        for (uint64_t i = 0; i < t->nbytes / 2; i++) {
            uint16_t h = (uint16_t)(d[2 * i] | d[2 * i + 1] << 8);
            int badv = t->type == INFER_TYPE_F16 ? (h & 0x7c00) == 0x7c00 : (h & 0x7f80) == 0x7f80;
            if (badv) return *bad = i, 1;
        }
    } else {
        const struct quant_type *qt = quant_type(t->type);
        for (size_t k = 0; qt && k < sizeof infer_scale_table / sizeof infer_scale_table[0]; k++) {
            const struct infer_scales *s = &infer_scale_table[k];
            if (s->type != t->type) continue;
            for (uint64_t b = 0; b < t->nbytes / (uint64_t)qt->bytes; b++)
                for (int j = 0; j < s->n; j++)
                    if (infer_f16_bad(d + b * (uint64_t)qt->bytes + s->off + 2 * j)) return *bad = b, 1;
        }
    }
    return 0;
}

static infer_status infer_progress(const infer_model_params *p, float x) {
    if (p->progress && p->progress(x, p->progress_user))
        return infer_fail(INFER_E_CANCELLED, "model load cancelled by the progress callback at %.0f%%", 100.0 * x);
    return INFER_OK;
}

static infer_status infer_check_tensors(const struct infer_model *m, const infer_model_params *p) {
    const struct gguf_file *f = m->gguf;
    uint64_t total = 0, done = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) total += f->tensors[i].nbytes;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        uint64_t bad;
        if (infer_scan_tensor(t, &bad)) {
            int blocky = t->type != INFER_TYPE_F32 && t->type != INFER_TYPE_F16 && t->type != INFER_TYPE_BF16;
            return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' has a NaN or Inf %s at %s %" PRIu64, f->path, t->name,
                              blocky ? "scale" : "value", blocky ? "block" : "element", bad);
        }
        done += t->nbytes;
        const float span = p->n_gpu_layers ? 0.05f : 0.85f; /* the upload takes 0.15 .. 0.95 */
        infer_status st = infer_progress(p, 0.1f + span * (total ? (float)((double)done / (double)total) : 1.0f));
        if (st != INFER_OK) return st;
    }
    return INFER_OK;
}

/* The group's id (a group over several processes): INFER_TP_ID, else the file tp_id, written anew by rank 0's
 * process (to a temporary name, then renamed, so no reader sees half of it) and waited for by the others. The text
 * is the id's bytes in hex. */
static infer_status infer_tp_id(const infer_model_params *p, uint8_t id[INFER_TP_ID_BYTES]) {
    const char *env = getenv("INFER_TP_ID");
    char text[2 * INFER_TP_ID_BYTES + 2] = "";
    if (env && *env) {
        snprintf(text, sizeof text, "%s", env);
    } else if (!p->tp_id || !*p->tp_id) {
        return infer_fail(INFER_E_ARG, "split_mode tensor over %d ranks in several processes: no group id (tp_id, "
                          "llm-run --tp-id FILE, or INFER_TP_ID)", p->tp_world);
    } else if (p->tp_rank0 == 0) {
        infer_status st = backend_cuda_tp_id(id);
        if (st != INFER_OK) return st;
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", p->tp_id, (int)getpid());
        FILE *f = fopen(tmp, "w");
        int ok = f != NULL;
        for (int i = 0; ok && i < INFER_TP_ID_BYTES; i++) ok = fprintf(f, "%02x", id[i]) == 2;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok || rename(tmp, p->tp_id) != 0) {
            remove(tmp);
            return infer_fail(INFER_E_IO, "split_mode tensor: writing the group id to %s: %s", p->tp_id, strerror(errno));
        }
        return INFER_OK;
    } else {
        const char *t = getenv("INFER_TP_TIMEOUT");
        const long limit = t && *t ? atol(t) : 600;
        for (long waited = 0;; waited++) { /* tenths of a second */
            FILE *f = fopen(p->tp_id, "r");
            if (f) {
                const size_t got = fread(text, 1, sizeof text - 1, f);
                fclose(f);
                text[got] = 0;
                break;
            }
            if (waited >= limit * 10)
                return infer_fail(INFER_E_IO, "split_mode tensor: no group id in %s after %ld s (rank 0's process "
                                  "writes it)", p->tp_id, limit);
            usleep(100000);
        }
    }
    for (int i = 0; i < INFER_TP_ID_BYTES; i++) {
        unsigned v;
        if (sscanf(text + 2 * i, "%2x", &v) != 1)
            return infer_fail(INFER_E_FORMAT, "split_mode tensor: the group id (%s) is not %d bytes in hex",
                              env && *env ? "INFER_TP_ID" : p->tp_id, INFER_TP_ID_BYTES);
        id[i] = (uint8_t)v;
    }
    return INFER_OK;
}

/* split_mode tensor's upload to the plan's devices (ranks): the whole group, or with tp_world this process's part of a
 * group over several processes, joined through the group's id. */
static infer_status infer_tp_upload(struct infer_model *m, const infer_model_params *p, const int *devs, int32_t n) {
    if (p->tp_world == 0 || p->tp_world == n) return model_upload_tp(m, devs, n, NULL, p, 0.15f, 0.95f);
    if (p->n_gpu_layers == INFER_GPU_LAYERS_AUTO)
        return infer_fail(INFER_E_UNSUPPORTED, "split_mode tensor over several processes (tp_world %d): the automatic "
                          "fit sees this process's devices only; give n_gpu_layers above the layer count (-ngl 99)",
                          p->tp_world);
    if (p->tp_rank0 < 0 || p->tp_rank0 + n > p->tp_world)
        return infer_fail(INFER_E_ARG, "split_mode tensor: this process's %d device%s as ranks %d.. of tp_world %d", n,
                          n == 1 ? "" : "s", p->tp_rank0, p->tp_world);
    uint8_t id[INFER_TP_ID_BYTES];
    infer_status st = infer_tp_id(p, id);
    if (st != INFER_OK) return st;
    return model_upload_tp_ranks(m, devs, n, p->tp_world, p->tp_rank0, id, NULL, p, 0.15f, 0.95f);
}

/* The placement n_gpu_layers / n_cpu_moe / split_mode ask for (plan.c). Explicit numbers need no memory: the upload
 * checks the fit as before; INFER_GPU_LAYERS_AUTO measures the devices (and what a CUDA backend takes on each, for
 * the overhead) and fits to fit_ctx; a split over devices needs their count (and with no -ts, their memory). */
static infer_status infer_placement(const struct infer_model *m, const infer_model_params *p, struct plan **out) {
    struct plan_devices dev;
    memset(&dev, 0, sizeof dev);
    const int automatic = p->n_gpu_layers == INFER_GPU_LAYERS_AUTO;
    if (p->split_mode == INFER_SPLIT_TENSOR) { /* its refusal before any device is touched */
        infer_status st = plan_tp_check(m, p);
        if (st != INFER_OK) return st;
    }
    if (automatic || p->split_mode == INFER_SPLIT_LAYER || p->split_mode == INFER_SPLIT_TENSOR) {
        infer_status st = plan_measure_devices(&dev, automatic && p->fit);
        if (st != INFER_OK) return st;
        return plan_make(m, p, p->fit_ctx, &dev, out);
    }
    dev.n = p->main_gpu >= 0 && p->main_gpu < PLAN_MAX_DEVICES ? p->main_gpu + 1 : 0;
    for (int32_t i = 0; i < dev.n; i++) dev.free[i] = UINT64_MAX; /* the placement only */
    return plan_make(m, p, NULL, &dev, out);
}

/* The plan's homes (plan.c): the last n_gpu_layers on the GPU(s), the head too past the layer count, spread over
 * the devices by split_mode and tensor_split, less the routed experts the plan keeps in host memory (expert
 * offload); or split_mode tensor's ranks, each its shards (model_tp.c). The devices' existence and the fit are
 * checked at upload. */
static infer_status infer_offload(struct infer_model *m, const infer_model_params *p) {
    infer_status st = INFER_OK;
    struct plan *pl = NULL;
    uint8_t *exps_host = NULL;
    TRY(infer_placement(m, p, &pl));
    if (pl->split_mode == INFER_SPLIT_TENSOR) {
        int devs[INFER_MAX_DEVICES];
        for (int32_t r = 0; r < pl->tp; r++) devs[r] = pl->tp_dev[r];
        st = infer_tp_upload(m, p, devs, pl->tp);
        goto fail;
    }
    if (pl->n_gpu_layers == 0) goto fail; /* the automatic fit chose the CPU */
    exps_host = xcalloc((size_t)pl->n_layer_all, 1);
    if (!exps_host) {
        st = INFER_OOM("expert offload flags");
        goto fail;
    }
    for (int32_t il = 0; il < pl->n_layer_all; il++)
        exps_host[il] = pl->exps_home[il] == PLAN_HOST && pl->layer_home[il] != PLAN_HOST;
    const struct model_homes h = {.layer = pl->layer_home, .exps_host = exps_host, .embd = pl->home_embd,
                                  .head = pl->home_head, .embd_head = pl->embd_head};
    st = model_upload(m, &h, NULL, p, 0.15f, 0.95f);
fail:
    xfree(exps_host);
    plan_free(pl);
    return st;
}

INFER_API infer_status infer_model_load(const char *path, const infer_model_params *params, infer_model **out) {
    infer_status st = INFER_OK;
    struct gguf_file *f = NULL;
    struct infer_model *m = NULL;
    infer_model_params p = params ? *params : infer_model_params_default();
    if (!out) return infer_fail(INFER_E_ARG, "infer_model_load: out is NULL");
    *out = NULL;
    if (!path) return infer_fail(INFER_E_ARG, "infer_model_load: path is NULL");
    if (p.n_cpu_moe < 0)
        return infer_fail(INFER_E_ARG, "infer_model_load: n_cpu_moe %d: expected 0 (none), N (the first N MoE layers) "
                          "or more than the layer count (all)", p.n_cpu_moe);
    TRY(infer_progress(&p, 0.0f));
    TRY(gguf_open(path, &f));
    st = model_bind(f, &m); /* takes f */
    f = NULL;
    if (st != INFER_OK) goto fail;
    TRY(infer_progress(&p, 0.1f));
    if (p.check_tensors) TRY(infer_check_tensors(m, &p));
    if (p.n_gpu_layers != 0 || p.split_mode == INFER_SPLIT_TENSOR) TRY(infer_offload(m, &p));
    if (!p.no_repack) TRY(model_repack(m));
    TRY(infer_progress(&p, 1.0f));
    *out = m;
    return INFER_OK;
fail:
    gguf_close(f);
    model_free(m);
    return st;
}

INFER_API void infer_model_free(infer_model *m) { model_free(m); }

INFER_API const char *infer_model_arch(const infer_model *m) { return m ? m->arch->name : NULL; }
INFER_API int32_t infer_model_n_mtp(const infer_model *m) { return m ? (int32_t)m->hp.n_layer_nextn : 0; }

INFER_API int64_t infer_model_meta_count(const infer_model *m) { return m ? m->gguf->n_kv : 0; }

INFER_API const char *infer_model_meta_key(const infer_model *m, int64_t i) {
    if (!m || i < 0 || i >= m->gguf->n_kv) return NULL;
    return m->gguf->kv[i].key;
}

INFER_API int32_t infer_model_meta_str(const infer_model *m, const char *key, char *buf, int32_t cap) {
    if (!m || !key) return -1;
    const struct gguf_kv *kv = gguf_find_kv(m->gguf, key);
    if (!kv) return -1;
    char dummy[1];
    if (!buf || cap <= 0) return gguf_value_format(&kv->val, dummy, 0, 16);
    return gguf_value_format(&kv->val, buf, (size_t)cap, 16);
}

INFER_API int64_t infer_model_tensor_count(const infer_model *m) { return m ? m->gguf->n_tensors : 0; }

INFER_API infer_status infer_model_tensor(const infer_model *m, int64_t i, infer_tensor_info *out) {
    if (!m || !out) return infer_fail(INFER_E_ARG, "infer_model_tensor: NULL argument");
    if (i < 0 || i >= m->gguf->n_tensors)
        return infer_fail(INFER_E_ARG, "%s: tensor index %" PRId64 " out of range [0, %" PRId64 ")", m->gguf->path, i,
                          m->gguf->n_tensors);
    const struct gguf_tensor *t = &m->gguf->tensors[i];
    out->name = t->name;
    out->type = t->type;
    out->n_dims = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->offset = t->offset;
    out->nbytes = t->nbytes;
    out->split = t->split;
    return INFER_OK;
}

INFER_API int64_t infer_model_find_tensor(const infer_model *m, const char *name) {
    return m && name ? gguf_find_tensor_index(m->gguf, name) : -1;
}

/* ---- tokens: the model's tokenizer (lib/tokenizer.c) ---- */

INFER_API int32_t infer_tokenize(const infer_model *m, const char *text, size_t len, int32_t *out, int32_t cap,
                                 uint32_t flags) {
    if (!m || (!text && len) || cap < 0 || (!out && cap)) {
        infer_fail(INFER_E_ARG, "infer_tokenize: invalid argument");
        return -1;
    }
    return tokenizer_encode(m->tok, text ? text : "", len, (flags & INFER_TOKENIZE_ADD_SPECIAL) != 0,
                            (flags & INFER_TOKENIZE_PARSE_SPECIAL) != 0, out, cap);
}

INFER_API int32_t infer_token_to_piece(const infer_model *m, int32_t id, char *buf, int32_t cap, int special) {
    if (!m || cap < 0 || (!buf && cap)) return -1;
    return tokenizer_token_to_piece(m->tok, id, buf, cap, 0, special);
}

INFER_API int32_t infer_detokenize(const infer_model *m, const int32_t *ids, int32_t n, char *buf, int32_t cap,
                                   uint32_t flags) {
    if (!m || n < 0 || (!ids && n) || cap < 0 || (!buf && cap)) return -1;
    return tokenizer_detokenize(m->tok, ids, n, buf, cap, (flags & INFER_DETOKENIZE_REMOVE_SPECIAL) != 0,
                                (flags & INFER_DETOKENIZE_UNPARSE_SPECIAL) != 0);
}

INFER_API int32_t infer_token_stream_put(const infer_model *m, infer_token_stream *s, int32_t id, int special,
                                         char *buf, int32_t cap) {
    if (!m || !s || cap < 0 || (!buf && cap)) return -1;
    return tokenizer_stream_put(m->tok, s, id, special, buf, cap);
}

INFER_API int32_t infer_token_stream_flush(infer_token_stream *s, char *buf, int32_t cap) {
    if (!s || cap < 0 || (!buf && cap)) return -1;
    return tokenizer_stream_flush(s, buf, cap);
}

INFER_API int32_t infer_vocab_size(const infer_model *m) { return m ? tokenizer_n_vocab(m->tok) : -1; }
INFER_API int32_t infer_token_bos(const infer_model *m) { return m ? tokenizer_bos(m->tok) : -1; }
INFER_API int32_t infer_token_eos(const infer_model *m) { return m ? tokenizer_eos(m->tok) : -1; }
INFER_API int infer_token_is_eog(const infer_model *m, int32_t id) { return m ? tokenizer_is_eog(m->tok, id) : 0; }
