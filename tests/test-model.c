/* test-model: the loader against synthetic models of every architecture, and against broken copies.
 *
 * Each arch is written by synth_write and loaded; the hyperparameters and the bound tensors are checked
 * against the values we asked for (hand-computed expectations, not the table under test). Broken
 * files are made by copying a good one through the GGUF writer with one change (a key dropped or
 * replaced, a tensor dropped, reshaped, retyped or added), and must fail with the right status and a
 * message naming the item. For qwen35, qwen35moe and qwen3next (with MTP) this is a sweep: a copy without
 * each key and each tensor the file holds (refused naming it, or loads where a hand-written list says it
 * is optional), then a list of inconsistent dims (GDN sizes, kernel, MTP count, layer pattern, rope).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"
#include "scratch.h"
#include "t.h"


/* ---- one-change copies ---- */

struct edit {
    const char *drop_key;
    const char *set_u32_key; /* replaced (or added) with set_u32 */
    uint32_t set_u32;
    const char *set_str_key;
    const char *set_str;
    const char *arr_key; /* replaced by a per-layer u32 array of arr_n values arr[] */
    const uint32_t *arr;
    uint64_t arr_n;
    const char *drop_tensor;
    const char *retype_tensor;
    int32_t new_type;
    const char *reshape_tensor;
    int64_t new_ne[4];
    int new_n_dims;
    const char *extra_tensor;
    const char *nan_tensor; /* F32 tensor whose element 3 becomes NaN */
    const char *sect_key;   /* replaced by the i32[4] sect[] */
    const int32_t *sect;
};

#define EDIT(...) (memset(&e, 0, sizeof e), e = (struct edit){__VA_ARGS__}, &e)

static uint8_t *zero_buf; /* big enough for any replaced tensor here */

static infer_status copy_with_edit(const char *src, const char *dst, const struct edit *e) {
    infer_status st = INFER_OK;
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    uint8_t *nan_copy = NULL;
    TRY(gguf_open(src, &f));
    TRY(gguf_writer_create(&w));
    for (int64_t i = 0; i < f->n_kv; i++) {
        const char *k = f->kv[i].key;
        if (e->drop_key && strcmp(k, e->drop_key) == 0) continue;
        TRY(gguf_writer_set(w, k, &f->kv[i].val));
    }
    if (e->set_u32_key) TRY(gguf_writer_set_u32(w, e->set_u32_key, e->set_u32));
    if (e->set_str_key) TRY(gguf_writer_set_str(w, e->set_str_key, e->set_str));
    if (e->arr_key) TRY(gguf_writer_set_arr(w, e->arr_key, GGUF_U32, e->arr, e->arr_n));
    if (e->sect_key) TRY(gguf_writer_set_arr(w, e->sect_key, GGUF_I32, e->sect, 4));
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (e->drop_tensor && strcmp(t->name, e->drop_tensor) == 0) continue;
        if (e->retype_tensor && strcmp(t->name, e->retype_tensor) == 0) {
            TRY(gguf_writer_add_tensor(w, t->name, e->new_type, t->n_dims, t->ne, zero_buf));
        } else if (e->reshape_tensor && strcmp(t->name, e->reshape_tensor) == 0) {
            TRY(gguf_writer_add_tensor(w, t->name, t->type, e->new_n_dims, e->new_ne, zero_buf));
        } else if (e->nan_tensor && strcmp(t->name, e->nan_tensor) == 0) {
            nan_copy = malloc(t->nbytes);
            memcpy(nan_copy, t->data, t->nbytes);
            float nan = NAN;
            memcpy(nan_copy + 12, &nan, 4);
            TRY(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, nan_copy));
        } else {
            TRY(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
        }
    }
    if (e->extra_tensor) {
        const int64_t ne[4] = {32, 1, 1, 1};
        TRY(gguf_writer_add_tensor(w, e->extra_tensor, INFER_TYPE_F32, 1, ne, zero_buf));
    }
    TRY(gguf_writer_write(w, dst, NULL, NULL));
fail:
    gguf_writer_free(w);
    gguf_close(f);
    free(nan_copy);
    return st;
}

/* Loads dst made from src with edit e; checks the status and that the message holds `want`. */
static void expect_fail(const char *what, const char *src, const struct edit *e, infer_status want_st,
                        const char *want_msg) {
    const char *dst = tmp_path("edit.gguf");
    infer_status st = copy_with_edit(src, dst, e);
    T_CHECK(st == INFER_OK, "%s: making the file: %s", what, infer_last_error());
    if (st != INFER_OK) return;
    infer_model *m = (infer_model *)0x1;
    st = infer_model_load(dst, NULL, &m);
    T_CHECK(st == want_st, "%s: status %s, expected %s (%s)", what, infer_status_str(st), infer_status_str(want_st),
            infer_last_error());
    T_CHECK(m == NULL, "%s: *out not NULL on failure", what);
    T_CHECK(strstr(infer_last_error(), want_msg) != NULL, "%s: message '%s' lacks '%s'", what, infer_last_error(),
            want_msg);
    if (m) infer_model_free(m);
}

/* ---- every item of a hybrid file ---- */

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* Loads a copy of src with edit e: 1 if it loads, 0 if refused (message in msg), -1 if the copy failed. */
static int try_load(const char *src, const struct edit *e, char *msg, size_t cap) {
    const char *dst = tmp_path("sweep.gguf");
    if (copy_with_edit(src, dst, e) != INFER_OK) {
        snprintf(msg, cap, "making the file: %s", infer_last_error());
        return -1;
    }
    infer_model *m = (infer_model *)0x1;
    infer_status st = infer_model_load(dst, NULL, &m);
    snprintf(msg, cap, "%s", st == INFER_OK ? "" : infer_last_error());
    if (st != INFER_OK && m) return -1; /* *out must be NULL on failure */
    infer_model_free(m);
    return st == INFER_OK;
}

/* Keys a hybrid file may lack, by hand from llama.cpp's loader: 'L' loads (a default that agrees with the
 * synth dims), 'T' refused naming a tensor whose shape the default contradicts; any other key must be
 * refused with a message naming it. */
static char key_absent(const char *arch, const char *key) {
    static const char *const loads[] = {"general.name", "general.file_type", "general.quantization_version",
                                        ".attention.key_length", ".attention.value_length", ".rope.dimension_count",
                                        ".rope.freq_base", ".full_attention_interval", "tokenizer.ggml.token_type",
                                        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token"};
    for (size_t i = 0; i < sizeof loads / sizeof loads[0]; i++)
        if (ends_with(key, loads[i])) return 'L';
    const int next = !strcmp(arch, "qwen3next");
    /* qwen3next: n_ff 512 / 2 used = the 256 of n_ff_exp; n_ff itself only feeds those derivations */
    if (next && (ends_with(key, ".feed_forward_length") || ends_with(key, ".expert_feed_forward_length")))
        return 'L';
    if (ends_with(key, ".attention.head_count_kv")) return 'T';                   /* = head_count: attn_k wider */
    if (next && ends_with(key, ".expert_shared_feed_forward_length")) return 'T'; /* = n_ff 512 */
    return 'K';
}

static int is_optional_tensor(const char *name) {
    return !strcmp(name, "output.weight") || ends_with(name, ".nextn.shared_head_norm.weight");
}

/* A hybrid model with MTP: a copy without any one key or tensor is refused naming it (or loads, for what is
 * optional), and inconsistent dims are refused naming the item. */
static void hybrid_sweep(const char *arch) {
    struct synth_params p;
    synth_params_default(arch, &p);
    p.mtp = 1;
    char good[512], msg[1024], want[256];
    snprintf(good, sizeof good, "%s", tmp_path("sweep-good.gguf"));
    T_CHECK(synth_write(&p, good) == INFER_OK, "write %s: %s", arch, infer_last_error());
    struct gguf_file *f = NULL;
    T_CHECK(gguf_open(good, &f) == INFER_OK, "open %s", arch);
    if (!f) return;
    struct edit e;
    int n_keys = 0, n_tensors = 0, n_optional = 0;
    for (int64_t i = 0; i < f->n_kv; i++, n_keys++) {
        const char *key = f->kv[i].key;
        const char kind = key_absent(arch, key);
        const int ok = try_load(good, EDIT(.drop_key = key), msg, sizeof msg);
        if (kind == 'L') T_CHECK(ok == 1, "%s without %s: %s", arch, key, msg);
        else if (kind == 'T')
            T_CHECK(ok == 0 && strstr(msg, "tensor 'blk."), "%s without %s: '%s'", arch, key, msg);
        else T_CHECK(ok == 0 && strstr(msg, key), "%s without %s: '%s' does not name it", arch, key, msg);
    }
    for (int64_t i = 0; i < f->n_tensors; i++, n_tensors++) {
        const char *name = f->tensors[i].name;
        const int ok = try_load(good, EDIT(.drop_tensor = name), msg, sizeof msg);
        snprintf(want, sizeof want, "missing tensor '%s' of shape [", name);
        if (is_optional_tensor(name)) {
            T_CHECK(ok == 1, "%s without optional %s: %s", arch, name, msg);
            n_optional++;
        } else {
            T_CHECK(ok == 0 && strstr(msg, want), "%s without %s: '%s'", arch, name, msg);
        }
    }
    T_CHECK(n_keys >= 30 && n_tensors >= 60 && n_optional == 2, "%s: %d keys, %d tensors, %d optional", arch, n_keys,
            n_tensors, n_optional);
    gguf_close(f);

    /* inconsistent dims; synth's: n_embd 256, 4 layers + MTP, conv 4, d_state 64, groups 2, rank 4, inner 256 */
    char k_inner[96], k_group[96], k_rank[96], k_state[96], k_conv[96], k_nextn[96], k_fai[96], k_kv[96], k_rot[96],
        k_sect[96], k_used[96];
#define KEY(buf, suffix) snprintf(buf, sizeof buf, "%s." suffix, arch)
    KEY(k_inner, "ssm.inner_size"), KEY(k_group, "ssm.group_count"), KEY(k_rank, "ssm.time_step_rank");
    KEY(k_state, "ssm.state_size"), KEY(k_conv, "ssm.conv_kernel"), KEY(k_nextn, "nextn_predict_layers");
    KEY(k_fai, "full_attention_interval"), KEY(k_kv, "attention.head_count_kv");
    KEY(k_rot, "rope.dimension_count");
    KEY(k_sect, "rope.dimension_sections"), KEY(k_used, "expert_used_count");
#undef KEY
    static const int32_t zero4[4] = {0, 0, 0, 0};
    const int next = !strcmp(arch, "qwen3next");
#define U(key, v) {.set_u32_key = (key), .set_u32 = (v)}
#define R(name, a, b) {.reshape_tensor = (name), .new_ne = {(a), (b), 1, 1}, .new_n_dims = (b) > 1 ? 2 : 1}
    const struct { const char *what; struct edit e; const char *want; } cases[] = {
        {"inner != rank*state", U(k_inner, 200), "inner_size' = 200, expected time_step_rank*state_size = 256"},
        {"groups do not divide rank", U(k_group, 3), "expected a multiple of ssm.group_count (3)"},
        {"more groups than rank", U(k_group, 8), "expected a multiple of ssm.group_count (8)"},
        {"zero groups", U(k_group, 0), "ssm.group_count' = 0"},
        {"zero rank", U(k_rank, 0), "ssm.time_step_rank' = 0"},
        {"zero state", U(k_state, 0), "ssm.state_size' = 0"},
        {"state vs inner", U(k_state, 32), "inner_size' = 256, expected time_step_rank*state_size = 128"},
        {"conv_kernel vs tensor", U(k_conv, 3),
         "tensor 'blk.0.ssm_conv1d.weight' has shape [4, 512], expected [3, 512] (conv_kernel"},
        {"conv1d kernel", R("blk.0.ssm_conv1d.weight", 3, 512),
         "tensor 'blk.0.ssm_conv1d.weight' has shape [3, 512], expected [4, 512]"},
        {"attn_qkv width", R("blk.1.attn_qkv.weight", 256, 576),
         "tensor 'blk.1.attn_qkv.weight' has shape [256, 576], expected [256, 512] "
         "(n_embd, 2*group_count*state_size+inner_size)"},
        {"ssm_a length", R("blk.2.ssm_a", 8, 1), "tensor 'blk.2.ssm_a' has shape [8], expected [4] (time_step_rank)"},
        {"ssm_norm length", R("blk.0.ssm_norm.weight", 128, 1),
         "tensor 'blk.0.ssm_norm.weight' has shape [128], expected [64] (state_size)"},
        {"eh_proj shape", R("blk.4.nextn.eh_proj.weight", 256, 256),
         "tensor 'blk.4.nextn.eh_proj.weight' has shape [256, 256], expected [512, 256] (2*n_embd, n_embd)"},
        {"nextn > block_count", U(k_nextn, 6), "nextn_predict_layers' = 6, expected less than block_count (5)"},
        {"nextn = block_count", U(k_nextn, 5), "nextn_predict_layers' = 5, expected less than block_count (5)"},
        {"nextn 0 with MTP tensors", U(k_nextn, 0),
         "nextn_predict_layers' is 0 or absent, but the file holds MTP tensor 'blk.4.nextn."},
        {"nextn 2", U(k_nextn, 2), "missing tensor 'blk.3.nextn.eh_proj.weight'"},
        {"interval 0", U(k_fai, 0), "full_attention_interval' = 0"},
        {"interval 2", U(k_fai, 2), "missing tensor 'blk.1.attn_q.weight'"},
        {"kv heads", U(k_kv, 3), "attention.head_count_kv' = 3, expected a divisor of head_count (4)"},
        {"odd n_rot", U(k_rot, 17), "rope.dimension_count' = 17"},
        {"n_rot > head_dim", U(k_rot, 128), "rope.dimension_count' = 128"},
        {"attn_q without gate", R("blk.3.attn_q.weight", 256, 256),
         "tensor 'blk.3.attn_q.weight' has shape [256, 256], expected [256, 512] (n_embd, 2*n_head*head_dim)"},
        {"beta/alpha width",
         next ? (struct edit)R("blk.0.ssm_ba.weight", 256, 4) : (struct edit)R("blk.0.ssm_beta.weight", 256, 8),
         next ? "tensor 'blk.0.ssm_ba.weight' has shape [256, 4], expected [256, 8] (n_embd, 2*time_step_rank)"
              : "tensor 'blk.0.ssm_beta.weight' has shape [256, 8], expected [256, 4] (n_embd, time_step_rank)"},
        {next ? "extra tensor" : "zero sections",
         next ? (struct edit){.extra_tensor = "blk.0.ssm_bogus"} : (struct edit){.sect_key = k_sect, .sect = zero4},
         next ? "unexpected tensor 'blk.0.ssm_bogus'" : "rope.dimension_sections' = [0, 0, 0, 0]"},
    };
#undef U
#undef R
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int ok = try_load(good, &cases[i].e, msg, sizeof msg);
        T_CHECK(ok == 0 && strstr(msg, cases[i].want), "%s %s: '%s' lacks '%s'", arch, cases[i].what, msg,
                cases[i].want);
    }
    if (p.n_expert) {
        const int ok = try_load(good, EDIT(.set_u32_key = k_used, .set_u32 = 9), msg, sizeof msg);
        T_CHECK(ok == 0 && strstr(msg, "expert_used_count' = 9, expected 1..expert_count (8)"), "%s used: %s", arch,
                msg);
        const int ok2 = try_load(good,
                                 EDIT(.reshape_tensor = "blk.4.ffn_down_exps.weight", .new_ne = {256, 256, 4, 1},
                                      .new_n_dims = 3),
                                 msg, sizeof msg);
        T_CHECK(ok2 == 0 && strstr(msg, "'blk.4.ffn_down_exps.weight' has shape [256, 256, 4], expected [256, 256, 8]"),
                "%s experts: %s", arch, msg);
    }
}

/* ---- good models ---- */

static int64_t expected_tensor_count(const struct synth_params *p, int attn_layers, int gdn_layers, int mtp) {
    int64_t per_attn = 5 + (strcmp(p->arch, "llama") ? 2 : 0); /* norm q k v o (+ q/k norm) */
    int64_t per_gdn = strcmp(p->arch, "qwen3next") ? 10 : 9;  /* norm qkv gate beta alpha|ba conv dt a ssm_norm out */
    int64_t ffn = 1 + (p->n_expert ? 4 : 3) + (p->n_ff_shexp ? 4 : 0);
    int64_t n = 2 + !p->tied;
    n += attn_layers * (per_attn + ffn) + gdn_layers * (per_gdn + ffn);
    if (mtp) n += per_attn + ffn + 4; /* eh_proj enorm hnorm shared_head_norm */
    return n;
}

static void check_arch(const char *arch, int mtp, int tied, const char *ftype) {
    struct synth_params p;
    T_CHECK(synth_params_default(arch, &p) == INFER_OK, "default %s", arch);
    p.mtp = mtp;
    p.tied = tied;
    p.ftype = ftype;
    const char *path = tmp_path("good.gguf");
    infer_status st = synth_write(&p, path);
    T_CHECK(st == INFER_OK, "%s: synth_write: %s", arch, infer_last_error());
    if (st != INFER_OK) return;
    infer_model *m = NULL;
    infer_model_params mp = infer_model_params_default();
    mp.no_repack = 1; /* the binding as the file has it (test-repack checks the repacked copies) */
    st = infer_model_load(path, &mp, &m);
    T_CHECK(st == INFER_OK, "%s mtp=%d tied=%d %s: load: %s", arch, mtp, tied, ftype, infer_last_error());
    if (st != INFER_OK) return;
    const int hybrid = !strcmp(arch, "qwen3next") || !strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe");
    const int has_mtp = hybrid && mtp;
    T_CHECK(strcmp(infer_model_arch(m), arch) == 0, "arch %s", infer_model_arch(m));
    const struct arch_hparams *hp = &m->hp;
    T_CHECK(hp->n_vocab == p.n_vocab && hp->n_embd == p.n_embd && hp->n_layer == p.n_layer, "%s dims", arch);
    T_CHECK(hp->n_layer_nextn == has_mtp && hp->n_layer_all == p.n_layer + has_mtp, "%s nextn %lld", arch,
            (long long)hp->n_layer_nextn);
    T_CHECK(hp->n_head == p.n_head && hp->n_head_kv == p.n_head_kv && hp->head_dim == p.head_dim, "%s heads", arch);
    T_CHECK(hp->n_rot == (hybrid ? p.head_dim / 4 : p.head_dim), "%s n_rot %lld", arch, (long long)hp->n_rot);
    T_NEAR(hp->rms_eps, 1e-6, 1e-12);
    T_CHECK(m->tied == tied && (tied ? m->output == m->token_embd : m->output != m->token_embd), "%s tied", arch);
    int attn = 0, gdn = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *l = &m->layers[il];
        int want_attn = !hybrid || (il + 1) % 4 == 0;
        T_CHECK(l->kind == (want_attn ? ARCH_LAYER_ATTN : ARCH_LAYER_GDN), "%s layer %lld kind", arch, (long long)il);
        if (want_attn) {
            attn++;
            T_CHECK(l->attn_q && l->attn_k && l->attn_v && l->attn_out && !l->ssm_qkv, "%s layer %lld attn", arch,
                    (long long)il);
            int64_t q_rows = (hybrid ? 2 : 1) * p.n_head * p.head_dim;
            T_CHECK(l->attn_q->ne[0] == p.n_embd && l->attn_q->ne[1] == q_rows, "%s attn_q shape", arch);
        } else {
            gdn++;
            T_CHECK(l->ssm_qkv && l->ssm_conv1d && l->ssm_a && l->ssm_out && !l->attn_q, "%s layer %lld gdn", arch,
                    (long long)il);
            int64_t cd = 2 * p.ssm_n_group * p.ssm_d_state + p.ssm_dt_rank * p.ssm_d_state;
            T_CHECK(l->ssm_conv1d->ne[0] == 4 && l->ssm_conv1d->ne[1] == cd, "%s conv1d shape", arch);
            T_CHECK(!strcmp(arch, "qwen3next") ? l->ssm_ba && !l->ssm_beta : l->ssm_beta && !l->ssm_ba, "%s ba",
                    arch);
        }
        if (p.n_expert) {
            T_CHECK(l->ffn_gate_exps && l->ffn_gate_exps->ne[2] == p.n_expert && !l->ffn_gate, "%s experts", arch);
            T_CHECK(!!l->ffn_down_shexp == !!p.n_ff_shexp, "%s shared expert", arch);
        } else {
            T_CHECK(l->ffn_gate && l->ffn_down && l->ffn_down->ne[0] == p.n_ff, "%s dense ffn", arch);
        }
        T_CHECK(hybrid ? l->post_attn_norm && !l->ffn_norm : l->ffn_norm && !l->post_attn_norm, "%s ffn norm", arch);
    }
    if (has_mtp) {
        const struct model_layer *l = &m->layers[p.n_layer];
        T_CHECK(l->is_mtp && l->kind == ARCH_LAYER_ATTN && l->nextn_eh_proj && l->nextn_eh_proj->ne[0] == 2 * p.n_embd,
                "%s mtp layer", arch);
    }
    T_CHECK(infer_model_tensor_count(m) == expected_tensor_count(&p, attn, gdn, has_mtp), "%s: %lld tensors, expected %lld",
            arch, (long long)infer_model_tensor_count(m), (long long)expected_tensor_count(&p, attn, gdn, has_mtp));
    int64_t idx = infer_model_find_tensor(m, "output_norm.weight");
    infer_tensor_info ti;
    T_CHECK(idx >= 0 && infer_model_tensor(m, idx, &ti) == INFER_OK && ti.type == INFER_TYPE_F32 && ti.ne[0] == p.n_embd,
            "%s output_norm info", arch);
    T_CHECK(infer_model_tensor(m, -1, &ti) == INFER_E_ARG, "tensor(-1)");
    char buf[64];
    int32_t need = infer_model_meta_str(m, "general.architecture", NULL, 0);
    T_CHECK(need == (int32_t)strlen(arch), "meta_str length %d", need);
    T_CHECK(infer_model_meta_str(m, "general.architecture", buf, sizeof buf) == need && !strcmp(buf, arch),
            "meta_str %s", buf);
    T_CHECK(infer_model_meta_str(m, "no.such.key", buf, sizeof buf) == -1, "absent key");
    infer_model_free(m);
}

static int progress_calls;
static int cancel_at_second(float x, void *user) {
    (void)x, (void)user;
    return ++progress_calls == 2;
}
static int count_progress(float x, void *user) {
    (void)user;
    progress_calls++;
    return x < 0 || x > 1;
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test-model-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    zero_buf = calloc(1, 1 << 22);

    static const char *const archs[] = {"llama", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe"};
    for (int i = 0; i < 6; i++) {
        check_arch(archs[i], 0, 0, "F32");
        check_arch(archs[i], 1, 1, "Q4_K_M");
    }
    check_arch("qwen35", 1, 0, "Q8_0");
    check_arch("qwen35moe", 0, 1, "F16");

    hybrid_sweep("qwen35");
    hybrid_sweep("qwen35moe");
    hybrid_sweep("qwen3next");

    /* broken copies of a good qwen35 (with MTP) and llama file */
    struct synth_params p;
    synth_params_default("qwen35", &p);
    p.mtp = 1;
    char good[512], good_llama[512];
    snprintf(good, sizeof good, "%s", tmp_path("q35.gguf"));
    snprintf(good_llama, sizeof good_llama, "%s", tmp_path("llama.gguf"));
    T_CHECK(synth_write(&p, good) == INFER_OK, "write qwen35: %s", infer_last_error());
    synth_params_default("llama", &p);
    T_CHECK(synth_write(&p, good_llama) == INFER_OK, "write llama: %s", infer_last_error());

    struct edit e;
    expect_fail("missing key", good, EDIT(.drop_key = "qwen35.ssm.inner_size"), INFER_E_FORMAT,
                "missing key 'qwen35.ssm.inner_size'");
    expect_fail("missing sections", good, EDIT(.drop_key = "qwen35.rope.dimension_sections"), INFER_E_FORMAT,
                "qwen35.rope.dimension_sections");
    expect_fail("missing tensor", good, EDIT(.drop_tensor = "blk.3.attn_k.weight"), INFER_E_FORMAT,
                "missing tensor 'blk.3.attn_k.weight' of shape [256, 128] (n_embd, n_head_kv*head_dim)");
    expect_fail("missing mtp tensor", good, EDIT(.drop_tensor = "blk.4.nextn.eh_proj.weight"), INFER_E_FORMAT,
                "blk.4.nextn.eh_proj.weight");
    expect_fail("wrong shape", good,
                EDIT(.reshape_tensor = "blk.3.attn_k.weight", .new_ne = {256, 256, 1, 1}, .new_n_dims = 2),
                INFER_E_FORMAT,
                "tensor 'blk.3.attn_k.weight' has shape [256, 256], expected [256, 128] (n_embd, n_head_kv*head_dim)");
    expect_fail("wrong dims", good,
                EDIT(.reshape_tensor = "output_norm.weight", .new_ne = {256, 2, 1, 1}, .new_n_dims = 2),
                INFER_E_FORMAT, "has shape [256, 2], expected [256]");
    expect_fail("NVFP4", good, EDIT(.retype_tensor = "blk.0.attn_qkv.weight", .new_type = 40 /* NVFP4 */),
                INFER_E_UNSUPPORTED, "unsupported tensor type NVFP4 in blk.0.attn_qkv.weight");
    expect_fail("Q1_0", good_llama, EDIT(.retype_tensor = "blk.1.ffn_up.weight", .new_type = 41 /* Q1_0 */),
                INFER_E_UNSUPPORTED, "unsupported tensor type Q1_0 in blk.1.ffn_up.weight");
    expect_fail("unknown arch", good_llama, EDIT(.set_str_key = "general.architecture", .set_str = "gpt9"),
                INFER_E_UNSUPPORTED, "unknown architecture 'gpt9'");
    expect_fail("kv heads", good_llama, EDIT(.set_u32_key = "llama.attention.head_count_kv", .set_u32 = 3),
                INFER_E_FORMAT, "llama.attention.head_count_kv' = 3");
    expect_fail("inner size", good, EDIT(.set_u32_key = "qwen35.ssm.inner_size", .set_u32 = 200), INFER_E_FORMAT,
                "qwen35.ssm.inner_size' = 200, expected time_step_rank*state_size = 256");
    expect_fail("extra tensor", good_llama, EDIT(.extra_tensor = "blk.0.attn_bogus.weight"), INFER_E_FORMAT,
                "unexpected tensor 'blk.0.attn_bogus.weight'");
    expect_fail("vocab vs token_embd", good_llama, EDIT(.drop_tensor = "output.weight",
                .reshape_tensor = "token_embd.weight", .new_ne = {256, 600, 1, 1}, .new_n_dims = 2),
                INFER_E_FORMAT, "tensor 'token_embd.weight' has shape [256, 600], expected [256, 640]");
    expect_fail("huge block_count", good_llama, EDIT(.set_u32_key = "llama.block_count", .set_u32 = 0xffffffffu),
                INFER_E_FORMAT, "key 'llama.block_count' = 4294967295, expected 1..4096");
    expect_fail("zero n_embd", good_llama, EDIT(.set_u32_key = "llama.embedding_length", .set_u32 = 0),
                INFER_E_FORMAT, "key 'llama.embedding_length' = 0");
    expect_fail("nextn too big", good, EDIT(.set_u32_key = "qwen35.nextn_predict_layers", .set_u32 = 5),
                INFER_E_FORMAT, "qwen35.nextn_predict_layers' = 5, expected less than block_count (5)");
    expect_fail("key type", good_llama, EDIT(.set_str_key = "llama.attention.head_count", .set_str = "32"),
                INFER_E_FORMAT, "key 'llama.attention.head_count' has type ");
    expect_fail("eps type", good_llama, EDIT(.set_u32_key = "llama.attention.layer_norm_rms_epsilon", .set_u32 = 1),
                INFER_E_FORMAT, "key 'llama.attention.layer_norm_rms_epsilon' has type ");
    {
        struct synth_params q;
        synth_params_default("qwen3moe", &q);
        const char *moe = tmp_path("moe.gguf");
        T_CHECK(synth_write(&q, moe) == INFER_OK, "write qwen3moe: %s", infer_last_error());
        expect_fail("experts used", moe, EDIT(.set_u32_key = "qwen3moe.expert_used_count", .set_u32 = 9),
                    INFER_E_FORMAT, "qwen3moe.expert_used_count' = 9, expected 1..expert_count (8)");
        expect_fail("expert count vs tensors", moe, EDIT(.set_u32_key = "qwen3moe.expert_count", .set_u32 = 4),
                    INFER_E_FORMAT, "tensor 'blk.0.ffn_gate_inp.weight' has shape [256, 8], expected [256, 4]");
    }
    static const uint32_t heads_mixed[2] = {4, 2}, heads_same[2] = {4, 4};
    expect_fail("per-layer heads", good_llama,
                EDIT(.arr_key = "llama.attention.head_count", .arr = heads_mixed, .arr_n = 2), INFER_E_UNSUPPORTED,
                "key 'llama.attention.head_count' differs per layer");
    {
        const char *dst = tmp_path("arr.gguf");
        T_CHECK(copy_with_edit(good_llama, dst, EDIT(.arr_key = "llama.attention.head_count", .arr = heads_same,
                                                     .arr_n = 2)) == INFER_OK, "arr copy");
        infer_model *m = NULL;
        T_CHECK(infer_model_load(dst, NULL, &m) == INFER_OK && m->hp.n_head == 4, "uniform per-layer array: %s",
                infer_last_error());
        infer_model_free(m);
    }

    /* check_tensors: a NaN in an F32 tensor is found only when asked */
    {
        const char *dst = tmp_path("nan.gguf");
        T_CHECK(copy_with_edit(good, dst, EDIT(.nan_tensor = "blk.2.attn_norm.weight")) == INFER_OK, "nan copy");
        infer_model *m = NULL;
        T_CHECK(infer_model_load(dst, NULL, &m) == INFER_OK, "nan without check: %s", infer_last_error());
        infer_model_free(m);
        infer_model_params mp = infer_model_params_default();
        mp.check_tensors = 1;
        m = NULL;
        infer_status st = infer_model_load(dst, &mp, &m);
        T_CHECK(st == INFER_E_FORMAT && m == NULL && strstr(infer_last_error(), "blk.2.attn_norm.weight") &&
                    strstr(infer_last_error(), "element 3"),
                "nan check: %s", infer_last_error());
        T_CHECK(infer_model_load(good, &mp, &m) == INFER_OK, "clean file with check: %s", infer_last_error());
        infer_model_free(m);
    }

    /* progress: called with 0 and 1 at least; a nonzero return cancels */
    {
        infer_model_params mp = infer_model_params_default();
        mp.progress = count_progress;
        progress_calls = 0;
        infer_model *m = NULL;
        T_CHECK(infer_model_load(good, &mp, &m) == INFER_OK && progress_calls >= 2, "progress calls %d",
                progress_calls);
        infer_model_free(m);
        mp.progress = cancel_at_second;
        progress_calls = 0;
        m = NULL;
        T_CHECK(infer_model_load(good, &mp, &m) == INFER_E_CANCELLED && m == NULL, "cancel: %s", infer_last_error());
    }
    T_CHECK(infer_model_load(tmp_path("absent.gguf"), NULL, &(infer_model *){NULL}) == INFER_E_IO, "absent file");

    /* fault injection: every failing allocation is INFER_E_OOM, until the load succeeds */
    {
        int n, bad = 0;
        for (n = 1; n < 20000; n++) {
            infer_model *m = NULL;
            status_fault_alloc(n);
            infer_status st = infer_model_load(good, NULL, &m);
            status_fault_alloc(0);
            if (st == INFER_OK) {
                infer_model_free(m);
                break;
            }
            if (st != INFER_E_OOM || m) bad++;
        }
        T_CHECK(bad == 0 && n > 1 && n < 20000, "fault injection: %d non-OOM failures, %d allocations", bad, n);
    }

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) printf("note: could not remove %s\n", tmpdir);
    free(zero_buf);
    return t_done();
}
