/* test-cuda-tp: tensor parallelism (split_mode tensor, lib/tp.c, model_tp.c, forward_tp.c) over NCCL.
 *
 * On any machine:
 *   - the shards worked by hand: each rank's query / KV heads, FFN, experts' and shared expert's columns and Gated
 *     DeltaNet key heads for 2 and 4 ranks, even and uneven (KV heads 3 over 2: 1 | 2; KV heads 2 over 4: each
 *     replicated over two ranks with one query head each), and the rows and columns a rank takes of attn_q (gated:
 *     query and gate rows per head), ssm_qkv (q | k | v parts, tiled value heads: one run per repeat), ssm_out;
 *   - a sliced tensor's bytes against a copy made element by element;
 *   - refusals naming the dimension: KV heads that neither split nor replicate evenly, a cut inside a
 *     quantisation block (attention heads of 64 values in Q4_K's blocks of 256), more ranks than GDN key heads,
 *     FFN columns in fewer blocks than ranks; at load: -sm tensor with fewer than all layers, with expert
 *     offload, unequal -ts shares.
 * On the emulator with four devices (INFER_EMU_DEVICES=4, set here) or a machine with two or more GPUs:
 *   - llama, qwen3moe, qwen35, qwen35moe and qwen3next loaded with -sm tensor over 2 devices, in F32 and Q4_K_M,
 *     and over 4 devices in F32 (KV heads replicated there), and uneven heads (llama 6 query / 3 KV heads and
 *     qwen35 3 key / 6 value heads over 2) give the one-device load's logits within test-cuda-e2e's device bounds
 *     (pair_within PAIR_DEVICE: the sums are the same but in another order) over a prompt, decode steps and a
 *     3-token batch; the greedy tokens of 12 steps equal the one device's;
 *   - each rank holds its heads' cells only: rank hparams as worked by hand; the views' KV rows;
 *   - the head cut at vocabulary rows: each rank's view holds rows V*r/n.. of it and its context computes them
 *     (also a tied qwen35 with an odd vocabulary of 643: rank 0's rows inside its whole token table), the logits
 *     above being their reduce into rank 0's;
 *   - one rank (also on a machine with one GPU): NCCL's path, bit-identical to the one-device load;
 *   - (emulator) a load with -ngl auto (the plan's fit over the group) and a context hold on each device exactly the
 *     plan's bytes for it (qwen35moe over 2, qwen3moe over devices 1 and 2 of 4, llama over 4 with replicated KV
 *     heads), nothing outside the group, the load's ranks on the plan's devices;
 *   - greedy infer_sample with a repeat penalty picks one device's tokens without gathering the vocabulary (each
 *     rank's argmax of its rows compared), and infer_logits afterwards gathers the row once; at temp 0.8 with the
 *     default chain the same (each rank lists its rows' top k, the host chains the union: lib/sampler.c
 *     sample_tp_topk);
 *   - MTP drafting under -sm tensor (qwen35, qwen35moe, qwen3next; F32 and Q4_K_M; 2 and 4 devices, uneven key heads;
 *     n_draft 1-4): the greedy
 *     stream equals plain decoding of the same group with a random and a noisy head; at temp 0.8 (the drafts' lists
 *     and the acceptance on rank 0) reproducible with the seed and no row of logits over the bus; with a penalty (the
 *     host path) tokens come; the group drafts the one-device load's drafts; over two processes --mtp is refused
 *     with one clear error (not built yet);
 *   - (emulator) CUDA graphs of the group (check_graphs): the same tokens and logits bits as without graphs, a steady
 *     decode step one graph launch per rank, a steady MTP step of 3 drafts 5 per rank.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "device.h"
#include "forward.h"
#include "logits_pair.h"
#include "model.h"
#include "quant.h"
#include "spec.h"
#include "stream.h"
#include "t.h"
#include "tp.h"
#ifdef INFER_EMU
#include "emu_api.h"
#endif

enum { N_PROMPT = 12, N_DECODE = 4, N_CTX = 48, N_GREEDY = 8, ALL = 99 };

static char dir[] = "/tmp/test-cuda-tp-XXXXXX";

static infer_ctx *make_ctx(const infer_model *m, int32_t n_draft);

/* The shapes every cut below falls on whole Q4_K blocks for 2 ranks: heads of 128 values, FFN and experts' columns
 * in two blocks of 256, eight GDN key heads of 64 (one value head each). */
static void shapes_q4k(struct synth_params *sp) {
    sp->head_dim = 128;
    if (sp->n_expert) sp->n_ff_exp = 512;
    if (sp->n_ff_shexp) sp->n_ff_shexp = 512;
    if (sp->ssm_d_state) sp->ssm_n_group = 8, sp->ssm_dt_rank = 8;
}

/* Four GDN key heads (two value heads each, tiled): the hybrids over 4 ranks. */
static void shapes_g4(struct synth_params *sp) {
    if (sp->ssm_d_state) sp->ssm_n_group = 4, sp->ssm_dt_rank = 8;
}

/* The shards worked by hand below: heads of 128, experts' and shared columns 512, 4 key heads of 128 (2 value heads
 * each). */
static void shapes_tp(struct synth_params *sp) {
    sp->head_dim = 128;
    if (sp->n_expert) sp->n_ff_exp = 512;
    if (sp->n_ff_shexp) sp->n_ff_shexp = 512;
    if (sp->ssm_d_state) sp->ssm_d_state = 128, sp->ssm_n_group = 4, sp->ssm_dt_rank = 8;
}

static const char *synth_file(const char *arch, const char *ftype, void (*shape)(struct synth_params *), const char *tag) {
    static char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 31;
    if (shape) shape(&sp);
    snprintf(path, sizeof path, "%s/%s-%s-%s.gguf", dir, arch, ftype, tag);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s %s: %s", arch, ftype, tag, infer_last_error());
        return NULL;
    }
    return path;
}

/* The file's tensors as the shard planner reads them at a tensor-parallel load (which repacks nothing for the CPU). */
static infer_model *load_host(const char *path) {
    infer_model *m = NULL;
    infer_model_params mp = infer_model_params_default();
    mp.no_repack = 1;
    if (infer_model_load(path, &mp, &m) != INFER_OK) T_CHECK(0, "load %s: %s", path, infer_last_error());
    return m;
}

/* ---- shards (any machine) ---- */

static void check_ranks_by_hand(void) {
    const char *path = synth_file("qwen35moe", "F32", shapes_tp, "ranks");
    infer_model *m = path ? load_host(path) : NULL;
    if (!m) return;
    struct tp_rank rk[4];
    /* 4 query heads, 2 KV heads, 4 key heads, experts' and shared columns 512 (F32: blocks of 1) */
    T_CHECK(tp_ranks(m, 2, rk) == INFER_OK, "2 ranks: %s", infer_last_error());
    T_CHECK(rk[0].q0 == 0 && rk[0].q1 == 2 && rk[1].q0 == 2 && rk[1].q1 == 4 && rk[0].kv0 == 0 && rk[0].kv1 == 1 &&
            rk[1].kv0 == 1 && rk[1].kv1 == 2, "2 ranks: heads q %lld-%lld kv %lld-%lld | q %lld-%lld kv %lld-%lld",
            (long long)rk[0].q0, (long long)rk[0].q1, (long long)rk[0].kv0, (long long)rk[0].kv1, (long long)rk[1].q0,
            (long long)rk[1].q1, (long long)rk[1].kv0, (long long)rk[1].kv1);
    T_CHECK(rk[0].e0 == 0 && rk[0].e1 == 256 && rk[1].e0 == 256 && rk[1].e1 == 512 && rk[1].s0 == 256 &&
            rk[1].s1 == 512 && rk[0].g0 == 0 && rk[0].g1 == 2 && rk[1].g0 == 2 && rk[1].g1 == 4,
            "2 ranks: experts' columns, shared columns, key heads");
    T_CHECK(tp_ranks(m, 4, rk) == INFER_OK, "4 ranks: %s", infer_last_error());
    /* KV heads 2 over 4 ranks: each replicated over two ranks, one query head each */
    int ok = 1;
    for (int r = 0; r < 4; r++) ok &= rk[r].q0 == r && rk[r].q1 == r + 1 && rk[r].kv0 == r / 2 && rk[r].kv1 == r / 2 + 1;
    T_CHECK(ok, "4 ranks: KV head r/2 replicated, query head r");
    struct arch_hparams hp;
    tp_hparams(m, &rk[3], &hp);
    T_CHECK(hp.n_head == 1 && hp.n_head_kv == 1 && hp.n_group == 1 && hp.dt_rank == 2 && hp.d_inner == 256 &&
            hp.n_ff_exp == 128 && hp.n_ff_shexp == 128 && hp.n_embd == m->hp.n_embd,
            "rank 3 of 4: n_head %lld n_head_kv %lld n_group %lld dt_rank %lld d_inner %lld n_ff_exp %lld",
            (long long)hp.n_head, (long long)hp.n_head_kv, (long long)hp.n_group, (long long)hp.dt_rank,
            (long long)hp.d_inner, (long long)hp.n_ff_exp);
    /* slices of rank 1 of 2: gated attn_q takes 2 heads x (query 128 + gate 128) rows from row 512; ssm_qkv the q rows
     * of key heads 2-3, the k rows, and (tiled: value head i*4+k reads key head k) value heads 2,3 and 6,7 */
    T_CHECK(tp_ranks(m, 2, rk) == INFER_OK, "2 ranks again");
    int64_t il_attn = 3, il_gdn = 0;
    struct tp_slice s;
    tp_slice_of(m, il_attn, ARCH_T_ATTN_Q, m->layers[il_attn].attn_q, 1, &rk[1], &s);
    T_CHECK(s.copy && s.n_rows == 1 && s.rows[0][0] == 512 && s.rows[0][1] == 1024 && s.n_cols == 0,
            "attn_q rank 1: rows %lld-%lld", (long long)s.rows[0][0], (long long)s.rows[0][1]);
    tp_slice_of(m, il_gdn, ARCH_T_SSM_QKV, m->layers[il_gdn].ssm_qkv, 1, &rk[1], &s);
    const int64_t want[4][2] = {{256, 512}, {768, 1024}, {1024 + 256, 1024 + 512}, {1024 + 768, 1024 + 1024}};
    ok = s.n_rows == 4;
    for (int i = 0; ok && i < 4; i++) ok &= s.rows[i][0] == want[i][0] && s.rows[i][1] == want[i][1];
    T_CHECK(ok, "ssm_qkv rank 1: %d runs, q | k | v (tiled: two runs)", s.n_rows);
    tp_slice_of(m, il_gdn, ARCH_T_SSM_OUT, m->layers[il_gdn].ssm_out, 1, &rk[1], &s);
    T_CHECK(s.n_cols == 2 && s.cols[0][0] == 256 && s.cols[0][1] == 512 && s.cols[1][0] == 768 && s.cols[1][1] == 1024,
            "ssm_out rank 1: columns of value heads 2,3 and 6,7");
    /* the sliced bytes against an element-by-element copy (F32: a value is 4 bytes) */
    const struct gguf_tensor *t = m->layers[il_gdn].ssm_out;
    const struct gguf_tensor d = tp_slice_tensor(t, &s);
    float *got = malloc((size_t)d.nbytes);
    ok = got && d.ne[0] == 512 && d.ne[1] == t->ne[1];
    if (ok) {
        tp_slice_copy(t, &s, got);
        const float *src = t->data;
        for (int64_t r = 0; r < t->ne[1]; r++)
            for (int64_t c = 0; c < 512; c++) {
                const int64_t col = c < 256 ? 256 + c : 768 + (c - 256);
                ok &= got[r * 512 + c] == src[r * t->ne[0] + col];
            }
    }
    T_CHECK(ok, "ssm_out rank 1: %lld x %lld values equal to the element-by-element copy", (long long)d.ne[0],
            (long long)d.ne[1]);
    free(got);
    infer_model_free(m);
    unlink(path);
}

static void shapes_uneven_kv(struct synth_params *sp) { sp->n_head = 6, sp->n_head_kv = 3; }
static void shapes_uneven_gdn(struct synth_params *sp) { sp->ssm_n_group = 3, sp->ssm_dt_rank = 6; }
static void shapes_exp256(struct synth_params *sp) { sp->head_dim = 128; } /* experts keep 256 columns */
static void shapes_tied(struct synth_params *sp) { sp->tied = 1, sp->n_vocab = 643; } /* rows 321 | 322 */

static void check_refusals(void) {
    struct tp_rank rk[4];
    const char *path = synth_file("llama", "F32", shapes_uneven_kv, "kv3");
    infer_model *m = path ? load_host(path) : NULL;
    if (m) {
        T_CHECK(tp_ranks(m, 2, rk) == INFER_OK && rk[0].kv1 == 1 && rk[1].kv0 == 1 && rk[1].kv1 == 3 && rk[1].q0 == 2 &&
                rk[1].q1 == 6, "KV heads 3 over 2: 1 | 2 (query 2 | 4)");
        const infer_status st = tp_ranks(m, 4, rk);
        T_CHECK(st == INFER_E_UNSUPPORTED && strstr(infer_last_error(), "head_count_kv 3"), "KV heads 3 over 4: %s",
                infer_last_error());
        infer_model_free(m);
        unlink(path);
    }
    path = synth_file("llama", "F32", NULL, "serve");
    m = path ? load_host(path) : NULL;
    if (m) { /* only a follower of a group over several processes serves */
        infer_ctx *c = make_ctx(m, 0);
        const infer_status st = infer_tp_serve(c);
        T_CHECK(c && st == INFER_E_ARG && strstr(infer_last_error(), "not a follower"), "infer_tp_serve on a CPU "
                "context: %s", infer_last_error());
        infer_ctx_free(c);
        infer_model_free(m);
        unlink(path);
    }
    path = synth_file("qwen3", "Q4_K_M", NULL, "hd64");
    m = path ? load_host(path) : NULL;
    if (m) { /* 2 heads of 64 values: rank 1's attn_output columns start at 128, inside a Q4_K block */
        const infer_status st = tp_ranks(m, 2, rk);
        T_CHECK(st == INFER_E_UNSUPPORTED && strstr(infer_last_error(), "inside a block of 256") &&
                strstr(infer_last_error(), "attn_output"), "heads of 64 values in Q4_K: %s", infer_last_error());
        infer_model_free(m);
        unlink(path);
    }
    path = synth_file("qwen35", "F32", shapes_tp, "gdn4");
    m = path ? load_host(path) : NULL;
    if (m) {
        infer_status st = tp_ranks(m, 8, rk);
        T_CHECK(st == INFER_E_UNSUPPORTED && strstr(infer_last_error(), "ssm.group_count 4"), "8 ranks, 4 key heads: %s",
                infer_last_error());
        infer_model_free(m);
    }
    if (path) { /* at load, before any device is touched */
        infer_model_params mp = infer_model_params_default();
        mp.split_mode = INFER_SPLIT_TENSOR, mp.n_gpu_layers = 2;
        m = NULL;
        infer_status st = infer_model_load(path, &mp, &m);
        T_CHECK(st == INFER_E_UNSUPPORTED && !m && strstr(infer_last_error(), "n_gpu_layers 2"), "-sm tensor -ngl 2: %s",
                infer_last_error());
        mp.n_gpu_layers = ALL, mp.n_cpu_moe = 2;
        st = infer_model_load(path, &mp, &m);
        T_CHECK(st == INFER_E_UNSUPPORTED && !m && strstr(infer_last_error(), "n_cpu_moe 2"), "-sm tensor --n-cpu-moe 2: %s",
                infer_last_error());
        unlink(path);
    }
    path = synth_file("qwen3moe", "Q4_K_M", shapes_exp256, "exp256");
    m = path ? load_host(path) : NULL;
    if (m) { /* experts' 256 columns are one Q4_K/Q6_K block: one rank at most */
        const infer_status st = tp_ranks(m, 2, rk);
        T_CHECK(st == INFER_E_UNSUPPORTED && strstr(infer_last_error(), "expert_feed_forward_length 256"),
                "Q4_K experts of 256 columns over 2: %s", infer_last_error());
        infer_model_free(m);
        unlink(path);
    }
}

/* ---- loads (two or more devices) ---- */

static infer_model *load_tp(const char *path, int32_t n_dev) {
    infer_model_params mp = infer_model_params_default();
    mp.n_gpu_layers = ALL;
    if (n_dev > 0) {
        mp.split_mode = INFER_SPLIT_TENSOR;
        for (int d = 0; d < n_dev; d++) mp.tensor_split[d] = 1;
    }
    infer_model *m = NULL;
    if (infer_model_load(path, &mp, &m) != INFER_OK) T_CHECK(0, "load %s over %d: %s", path, n_dev, infer_last_error());
    return m;
}

static infer_ctx *make_ctx(const infer_model *m, int32_t n_draft) {
    infer_ctx_params p = infer_ctx_params_default();
    p.n_ctx = N_CTX, p.n_batch = 32, p.n_seq = 1, p.n_threads = 2, p.n_draft = n_draft;
    infer_ctx *c = NULL;
    if (infer_ctx_create(m, &p, &c) != INFER_OK && n_draft == 0) T_CHECK(0, "context: %s", infer_last_error());
    return c;
}

/* Greedy tokens of N_GREEDY single-token steps after a short prompt. */
static int greedy(infer_ctx *c, int32_t n_vocab, int32_t *out) {
    const int32_t prompt[4] = {7, 3, 11, 5};
    infer_batch b = {4, prompt, NULL, NULL, NULL};
    if (infer_decode(c, &b) != INFER_OK) return 0;
    for (int i = 0; i < N_GREEDY; i++) {
        const float *l = infer_logits(c, -1);
        if (!l) return 0;
        out[i] = pair_argmax(l, n_vocab);
        infer_batch d = {1, &out[i], NULL, NULL, NULL};
        if (infer_decode(c, &d) != INFER_OK) return 0;
    }
    return 1;
}

/* Tokens through infer_sample with a repeat penalty over N_GREEDY steps, greedy or at temp (the default chain: top-k
 * 40, top-p 0.95, min-p 0.05, seed 3); *gathers: the head reduces the context ran meanwhile (-1 for a context that is
 * no group). */
static int sampled(infer_ctx *c, int32_t *out, int *gathers, float temp) {
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = temp, sp.seed = 3;
    sp.repeat_penalty = 1.5f;
    sp.penalty_last_n = 16;
    infer_sampler *s = NULL;
    if (infer_sampler_create(&sp, infer_vocab_size(c->m), &s) != INFER_OK) return 0;
    const int32_t prompt[4] = {7, 3, 11, 5};
    infer_batch b = {4, prompt, NULL, NULL, NULL};
    int ok = infer_decode(c, &b) == INFER_OK;
    const int g0 = c->tp_gathers;
    for (int i = 0; ok && i < N_GREEDY; i++) {
        ok = infer_sample(c, s, -1, &out[i]) == INFER_OK;
        infer_batch d = {1, &out[i], NULL, NULL, NULL};
        ok = ok && infer_decode(c, &d) == INFER_OK;
    }
    *gathers = c->tp_n > 1 ? c->tp_gathers - g0 : -1;
    infer_sampler_free(s);
    return ok;
}

/* sampled()'s run at temp 0.8, each step's infer_sample token against infer_sampler_sample (a twin sampler, the same
 * seed) on the row infer_logits then gathers: how many steps agree (-1: an error). */
static int sampled_vs_row(infer_ctx *c) {
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = 0.8f, sp.seed = 3, sp.repeat_penalty = 1.5f, sp.penalty_last_n = 16;
    infer_sampler *s = NULL, *twin = NULL;
    const int32_t prompt[4] = {7, 3, 11, 5};
    infer_batch b = {4, prompt, NULL, NULL, NULL};
    int ok = infer_sampler_create(&sp, infer_vocab_size(c->m), &s) == INFER_OK &&
             infer_sampler_create(&sp, infer_vocab_size(c->m), &twin) == INFER_OK && infer_decode(c, &b) == INFER_OK;
    int same = 0;
    for (int i = 0; ok && i < N_GREEDY; i++) {
        int32_t t = -1;
        ok = infer_sample(c, s, -1, &t) == INFER_OK;
        const float *row = ok ? infer_logits(c, -1) : NULL;
        ok = row != NULL;
        same += ok && infer_sampler_sample(twin, row) == t;
        infer_batch d = {1, &t, NULL, NULL, NULL};
        ok = ok && infer_decode(c, &d) == INFER_OK;
    }
    infer_sampler_free(s), infer_sampler_free(twin);
    return ok ? same : -1;
}

/* The head cut at vocabulary rows: rank r of n holds rows V*r/n .. V*(r+1)/n - 1 (worked here, not by tp.c), a tied
 * head's rows on rank 0 being those rows of its whole token table, and its context computes them. */
static void check_head_rows(const infer_model *a, const infer_ctx *ca, const char *what) {
    const int64_t V = a->hp.n_vocab, n = a->tp_n;
    int ok = 1;
    for (int64_t r = 0; r < n; r++) {
        const struct infer_model *v = a->tp_view[r];
        const int64_t v0 = V * r / n, v1 = V * (r + 1) / n;
        ok &= v->output->ne[1] == v1 - v0 && v->output->ne[0] == a->hp.n_embd && v->output->type == a->output->type;
        ok &= ca->tp[r]->head_v0 == v0 && ca->tp[r]->head_rows == v1 - v0;
        if (a->tied && r == 0)
            ok &= (const char *)v->output->data ==
                  (const char *)v->token_embd->data + v0 * (int64_t)(v->token_embd->nbytes / (uint64_t)V);
        if (r > 0) ok &= v->output_norm->data != a->output_norm->data; /* the rank's own copy, not the mapping */
    }
    T_CHECK(ok, "%s: rank r of %lld holds and computes vocabulary rows %lld*r/%lld.. of the head%s", what, (long long)n,
            (long long)V, (long long)n, a->tied ? " (tied: rank 0's inside its token table)" : "");
}

static void check_same(const char *arch, const char *ftype, int32_t n_dev, void (*shape)(struct synth_params *),
                       const char *tag) {
    const char *path = synth_file(arch, ftype, shape, tag);
    if (!path) return;
    infer_model *a = load_tp(path, n_dev), *b = load_tp(path, 0);
    infer_ctx *ca = a ? make_ctx(a, 0) : NULL, *cb = b ? make_ctx(b, 0) : NULL;
    char what[96];
    snprintf(what, sizeof what, "%s %s -sm tensor over %d (%s)", arch, ftype, n_dev, tag);
    struct pair_stats s;
    pair_stats_init(&s);
    if (ca && cb) {
        T_CHECK(a->tp_n == n_dev && a->n_gpu == n_dev, "%s: %d ranks", what, a->tp_n);
        const infer_status st = pair_basic(ca, cb, N_PROMPT, N_DECODE, &s);
        char msg[256];
        T_CHECK(st == INFER_OK && pair_within(&s, PAIR_DEVICE, ftype, msg, sizeof msg), "%s: %s", what,
                st == INFER_OK ? msg : pair_error());
        /* one rank: NCCL's path with nothing to add, the same kernels and sums as one device */
        if (n_dev == 1)
            T_CHECK(st == INFER_OK && s.identical == s.rows, "%s: %d of %d rows bit-identical to one device", what,
                    s.identical, s.rows);
        printf("  %-44s worst rel %.2e, %d of %d argmax equal\n", what, s.worst, s.rows - s.argmax_differ, s.rows);
        infer_ctx_free(ca), infer_ctx_free(cb);
        ca = make_ctx(a, 0), cb = make_ctx(b, 0);
        const int32_t nv = infer_vocab_size(a);
        int32_t ga[N_GREEDY], gb[N_GREEDY];
        T_CHECK(ca && cb && greedy(ca, nv, ga) && greedy(cb, nv, gb) && !memcmp(ga, gb, sizeof ga),
                "%s: greedy tokens equal to one device's", what);
        /* each rank's cells hold its own KV heads */
        int ok = 1;
        for (int32_t r = 0; ca && r < n_dev; r++) ok &= ca->tp[r]->kv->row == a->tp_view[r]->hp.n_head_kv * a->hp.head_dim;
        T_CHECK(ok, "%s: each rank's K/V rows are its own heads'", what);
        if (ca && n_dev > 1) check_head_rows(a, ca, what);
        /* greedy sampling over the group compares one pick per rank: no reduce of the vocabulary, the tokens one
         * device's (penalties mapped to each rank's rows); asked for afterwards, the logits are gathered once */
        infer_ctx_free(ca), infer_ctx_free(cb);
        ca = make_ctx(a, 0), cb = make_ctx(b, 0);
        int gathers = 0, unused = 0;
        T_CHECK(ca && cb && sampled(ca, ga, &gathers, 0) && sampled(cb, gb, &unused, 0) && !memcmp(ga, gb, sizeof ga),
                "%s: infer_sample's greedy tokens with a repeat penalty equal to one device's", what);
        if (ca && n_dev > 1)
            T_CHECK(gathers == 0, "%s: greedy sampling reduced the vocabulary %d times, expected none", what, gathers);
        /* at temp > 0 each rank lists its rows' top k and the host chains the union: no reduce, and at every step the
         * token the host's chain draws from the whole (then gathered) row with the same uniform */
        infer_ctx_free(ca);
        ca = make_ctx(a, 0);
        T_CHECK(ca && sampled(ca, ga, &gathers, 0.8f), "%s: infer_sample at temp 0.8: %s", what, infer_last_error());
        infer_ctx_free(ca);
        ca = make_ctx(a, 0);
        if (ca && n_dev > 1) T_CHECK(gathers == 0, "%s: sampling at temp 0.8 reduced the vocabulary %d times, expected "
                                     "none", what, gathers);
        const int same = ca ? sampled_vs_row(ca) : -1;
        T_CHECK(same == N_GREEDY, "%s: at temp 0.8 infer_sample's token is the host chain's on the whole row at %d of "
                "%d steps", what, same, N_GREEDY);
        if (ca && n_dev > 1) {
            const int before = ca->tp_gathers;
            T_CHECK(infer_logits(ca, -1) && infer_logits(ca, -1) && ca->tp_gathers == before + 1,
                    "%s: infer_logits after sampling gathers the row once (%d)", what, ca->tp_gathers - before);
        }
    }
    pair_stats_free(&s);
    infer_ctx_free(ca), infer_ctx_free(cb), infer_model_free(a), infer_model_free(b);
    unlink(path);
}

/* ---- a group over two processes (the second this binary run again as a follower) ---- */

static infer_model *load_ranks(const char *path, int32_t world, int32_t rank0, int device, const char *id_file) {
    infer_model_params mp = infer_model_params_default();
    mp.n_gpu_layers = ALL, mp.split_mode = INFER_SPLIT_TENSOR;
    mp.tensor_split[device] = 1;
    mp.tp_world = world, mp.tp_rank0 = rank0, mp.tp_id = id_file;
    infer_model *m = NULL;
    if (infer_model_load(path, &mp, &m) != INFER_OK)
        printf("load as rank %d of %d: %s\n", rank0, world, infer_last_error());
    return m;
}

/* The follower: rank 1 of 2 on its device 1, serving until rank 0's context ends. Exit status 0 when it did. */
static int follower(void) {
    infer_model *m = load_ranks(getenv("TEST_TP_MODEL"), 2, 1, 1, getenv("TEST_TP_ID"));
    infer_ctx *c = m ? make_ctx(m, 0) : NULL;
    const infer_status st = c ? infer_tp_serve(c) : INFER_E_ARG;
    if (st != INFER_OK) printf("follower: %s\n", infer_last_error());
    infer_ctx_free(c), infer_model_free(m);
    return st == INFER_OK ? 0 : 1;
}

/* How long the leader waits for the follower to end once its context has gone; the follower then is killed. Each wait
 * of one process for the other (the id file, the join, one collective) is bounded alike (main sets the timeouts),
 * so a partner that broke fails the check within minutes and never hangs the suite. */
enum { FOLLOWER_END_S = 120 };

/* The follower's exit status, or -1 when it had not ended within FOLLOWER_END_S (then it is killed). */
static int wait_follower(pid_t pid) {
    int status = 0;
    for (int tenth = 0; tenth < FOLLOWER_END_S * 10; tenth++) {
        const pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0) return -1;
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* Rank 0 in this process, rank 1 in another (sharing nothing but NCCL's id, through a file): the same logits, bit
 * for bit, as the two ranks as threads of this process (the same shards, the same sums in the same order).
 * shm_mode: the emulator's segment in /dev/shm ("shm") or in a file ("file", its fallback), for both processes. */
static void check_processes(const char *arch, const char *shm_mode) {
    const char *p = synth_file(arch, "F32", NULL, "proc");
    if (!p) return;
    char path[256], id_file[300], exe[4096];
    snprintf(path, sizeof path, "%s", p);
    snprintf(id_file, sizeof id_file, "%s/%s.id", dir, arch);
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        T_CHECK(0, "readlink /proc/self/exe");
        return;
    }
    exe[len] = 0;
    /* the follower's environment is set here: between fork and exec the child only calls what is safe there */
    setenv("TEST_TP_ROLE", "follower", 1);
    setenv("TEST_TP_MODEL", path, 1);
    setenv("TEST_TP_ID", id_file, 1);
    setenv("INFER_EMU_NCCL_SHM", shm_mode, 1);
    const pid_t parent = getpid();
    const time_t t0 = time(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a leader that dies takes its follower along */
        if (getppid() != parent) _exit(126);
        execl(exe, exe, (char *)NULL);
        _exit(127);
    }
    unsetenv("TEST_TP_ROLE");
    infer_model *a = load_ranks(path, 2, 0, 0, id_file), *b = load_tp(path, 2);
    infer_ctx *ca = a ? make_ctx(a, 0) : NULL, *cb = b ? make_ctx(b, 0) : NULL;
    struct pair_stats s;
    pair_stats_init(&s);
    T_CHECK(ca && cb && a->tp_world == 2 && a->tp_n == 1, "%s: rank 0 of 2 in this process: %s", arch,
            ca ? "" : infer_last_error());
    infer_ctx *cd = a ? make_ctx(a, 2) : NULL; /* MTP drafting over several processes: not built, refused */
    T_CHECK(a && !cd && strstr(infer_last_error(), "MTP drafting under tensor parallelism over several processes"),
            "%s: --mtp over two processes: '%s'", arch, infer_last_error());
    infer_ctx_free(cd);
    if (ca && cb) {
        const infer_status st = pair_basic(ca, cb, N_PROMPT, N_DECODE, &s);
        T_CHECK(st == INFER_OK && s.rows > 0 && s.identical == s.rows, "%s over two processes: %d of %d rows "
                "bit-identical to the ranks as threads%s%s", arch, s.identical, s.rows, st == INFER_OK ? "" : "; ",
                st == INFER_OK ? "" : pair_error());
        printf("  %-9s over two processes: %d of %d rows bit-identical to two ranks as threads\n", arch, s.identical,
               s.rows);
        /* sequence edits followed: cleared, 3 tokens, a checkpoint, 1 more, back to the checkpoint, another */
        const int32_t t3[3] = {9, 2, 7}, t1 = 4, t1b = 5;
        const infer_batch b3 = {3, t3, NULL, NULL, NULL}, b1 = {1, &t1, NULL, NULL, NULL};
        const infer_batch b1b = {1, &t1b, NULL, NULL, NULL};
        infer_ctx *both[2] = {ca, cb};
        int ok = 1;
        for (int k = 0; k < 2; k++)
            ok &= infer_seq_rm(both[k], 0, 0, -1) == INFER_OK && infer_decode(both[k], &b3) == INFER_OK &&
                  infer_seq_checkpoint(both[k], 0) == INFER_OK && infer_decode(both[k], &b1) == INFER_OK &&
                  infer_seq_rm(both[k], 0, 3, -1) == INFER_OK && infer_decode(both[k], &b1b) == INFER_OK;
        const float *la = ok ? infer_logits(ca, -1) : NULL, *lb = ok ? infer_logits(cb, -1) : NULL;
        T_CHECK(la && lb && !memcmp(la, lb, (size_t)infer_vocab_size(a) * sizeof(float)),
                "%s: after a clear, a checkpoint and a truncation to it, the same logits: %s", arch,
                ok ? "" : infer_last_error());
    }
    pair_stats_free(&s);
    infer_ctx_free(ca); /* the follower stops */
    const int end = pid > 0 ? wait_follower(pid) : -1;
    T_CHECK(end == 0, "%s (%s): the follower process ended with %d (-1: not within %d s, killed)", arch, shm_mode, end,
            FOLLOWER_END_S);
    printf("  %-9s over two processes (segment: %s): %ld s\n", arch, shm_mode, (long)(time(NULL) - t0));
    unsetenv("INFER_EMU_NCCL_SHM");
    infer_ctx_free(cb), infer_model_free(a), infer_model_free(b);
    unlink(path);
    unlink(id_file);
}
#ifdef INFER_EMU
/* A load with -ngl auto (the automatic fit over the group, devices measured) over n of the 4 emulated devices and a
 * context: each device holds exactly what the plan counts there (the rank's shards, the cells and state of its
 * heads, its stage's scratch; emulator counters per device), the devices outside the group nothing, and the load's
 * ranks are on the plan's devices. */
static void check_bytes(const char *arch, int32_t first, int32_t n_dev, void (*shape)(struct synth_params *),
                        const char *tag) {
    const char *path = synth_file(arch, "F32", shape, tag);
    if (!path) return;
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = N_CTX, cp.n_batch = 32, cp.n_seq = 1, cp.n_threads = 2;
    infer_model_params mp = infer_model_params_default();
    mp.n_gpu_layers = INFER_GPU_LAYERS_AUTO;
    mp.split_mode = INFER_SPLIT_TENSOR;
    mp.fit_ctx = &cp;
    for (int32_t d = first; d < first + n_dev; d++) mp.tensor_split[d] = 1;
    struct emu_counters before[4], after[4];
    for (int d = 0; d < 4; d++) emu_counters_get(d, &before[d]);
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    infer_plan *p = NULL;
    if (infer_model_load(path, &mp, &m) != INFER_OK) T_CHECK(0, "%s -sm tensor -ngl auto over %d: %s", arch, n_dev,
                                                            infer_last_error());
    if (m && infer_ctx_create(m, &cp, &c) != INFER_OK) T_CHECK(0, "%s: context: %s", arch, infer_last_error());
    for (int d = 0; d < 4; d++) emu_counters_get(d, &after[d]);
    infer_plan_params pp = infer_plan_params_default();
    pp.n_devices = 4;
    for (int d = 0; d < 4; d++) pp.free_bytes[d] = (uint64_t)64 << 30;
    if (infer_model_plan(path, &mp, &cp, &pp, &p) != INFER_OK) T_CHECK(0, "%s: plan: %s", arch, infer_last_error());
    if (!m || !c || !p) goto done;
    int ranks_ok = m->tp_n == n_dev && infer_plan_get_info(p).tp == n_dev;
    for (int32_t r = 0; r < n_dev; r++) ranks_ok &= m->gpu[r].device == infer_plan_tp_device(p, r);
    T_CHECK(ranks_ok, "%s over %d: the load's ranks (%d) on the plan's devices", arch, n_dev, m->tp_n);
    for (int d = 0; d < 4; d++) {
        infer_plan_memory pm;
        infer_plan_get_memory(p, d, &pm);
        const uint64_t used = after[d].bytes_in_use - before[d].bytes_in_use;
        const uint64_t want = pm.weights + pm.kv + pm.state + pm.scratch;
        const int in_group = d >= first && d < first + n_dev;
        T_CHECK(used == want && in_group == (used > 0), "%s over %d: device %d holds %llu bytes, the plan counts %llu "
                "(weights %llu kv %llu state %llu scratch %llu)", arch, n_dev, d, (unsigned long long)used,
                (unsigned long long)want, (unsigned long long)pm.weights, (unsigned long long)pm.kv,
                (unsigned long long)pm.state, (unsigned long long)pm.scratch);
    }
done:
    infer_plan_free(p);
    infer_ctx_free(c);
    infer_model_free(m);
    unlink(path);
}
#endif

/* n_gen tokens of c after the prompt every stream here starts from (stream.h). */
static int32_t stream(infer_ctx *c, enum stream_mode mode, infer_sampler *s, int32_t *out, int32_t n_gen,
                      struct stream_rec *r) {
    static const int32_t prompt[5] = {11, 3, 27, 8, 19};
    return stream_run(c, s, mode, prompt, 5, out, n_gen, r);
}

static infer_sampler *make_sampler(const infer_model *m, float temp, float repeat_penalty) {
    infer_sampler_params sp = infer_sampler_params_default();
    sp.temp = temp, sp.seed = 5, sp.repeat_penalty = repeat_penalty;
    infer_sampler *s = NULL;
    if (infer_sampler_create(&sp, infer_vocab_size(m), &s) != INFER_OK) T_CHECK(0, "sampler: %s", infer_last_error());
    return s;
}

/* MTP drafting under -sm tensor (forward_tp_mtp): each rank runs its heads' part of the MTP block with its own cells,
 * an all-reduce after each part as in the trunk, the draft's row gathered into rank 0's memory where the sample op
 * picks it; each rank's recurrent state rolls back from its own snapshot ring. Greedy: the stream of infer_spec_step
 * equals plain greedy decoding of the same group token for token, with a random head (noise 0: every draft rejected,
 * a rollback at every step) and a noisy agreeing head (drafts kept and rejected), the drafts staying on rank 0's
 * device (each greedy step's bus bytes worked out by hand; 181 instead of 112 at 3 drafts over 2 when the drafts come
 * down and the picks come one per rank and row). At temp 0.8 with the default chain
 * (SPEC_LISTS): reproducible with the seed, and no row of logits crosses the bus, with a repeat penalty too (each
 * verification row penalised on rank 0 by the window after the drafts before it). */
static void check_mtp(const char *arch, const char *ftype, int32_t n_dev, void (*shape)(struct synth_params *),
                      float noise, int32_t n_draft, int temp_too) {
    enum { N_GEN = 24 };
    char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = ftype, sp.seed = 31, sp.mtp = 1, sp.mtp_noise = noise;
    if (shape) shape(&sp);
    snprintf(path, sizeof path, "%s/%s-%s-mtp.gguf", dir, arch, ftype);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s %s with an MTP head: %s", arch, ftype, infer_last_error());
        return;
    }
    infer_model *m = load_tp(path, n_dev);
    infer_ctx *d = m ? make_ctx(m, n_draft) : NULL, *plain = m ? make_ctx(m, 0) : NULL;
    T_CHECK(!m || d, "%s %s over %d with n_draft %d: %s", arch, ftype, n_dev, n_draft, infer_last_error());
    /* the one-device load's drafts: the group's MTP block must draft the same tokens, not only some that verify */
    infer_model *one = m ? load_tp(path, 0) : NULL;
    infer_ctx *d1 = one ? make_ctx(one, n_draft) : NULL;
    infer_sampler *g1 = m ? make_sampler(m, 0.0f, 1.0f) : NULL, *g2 = m ? make_sampler(m, 0.0f, 1.0f) : NULL;
    infer_sampler *g3 = m ? make_sampler(m, 0.0f, 1.0f) : NULL;
    int32_t a[N_GEN], b[N_GEN], a1[N_GEN];
    static int32_t drafts[256], drafts1[256];
    struct stream_rec da = {.drafts = drafts, .cap = 256}, d1a = {.drafts = drafts1, .cap = 256};
    if (d && plain && d1 && g1 && g2 && g3) {
        const int32_t na = stream(d, STREAM_SPEC, g1, a, N_GEN, &da);
        const int32_t nb = stream(plain, STREAM_PLAIN, g2, b, N_GEN, NULL);
        const int32_t n1 = stream(d1, STREAM_SPEC, g3, a1, N_GEN, &d1a);
        int32_t same = 0, same_drafts = 0;
        while (same < na && same < nb && a[same] == b[same]) same++;
        while (same_drafts < da.n_drafts && same_drafts < d1a.n_drafts && drafts[same_drafts] == drafts1[same_drafts])
            same_drafts++;
        const infer_spec_stats st = infer_spec_get_stats(d);
        T_CHECK(na == N_GEN && nb == N_GEN && same == N_GEN && d->tp_n == n_dev &&
                    (noise == 0 ? st.n_accepted < st.n_drafted : st.n_accepted > 0),
                "%s %s -sm tensor over %d, --mtp %d%s: the greedy stream equals plain decoding for %d of %d tokens "
                "(%lld drafted, %lld accepted)%s%s", arch, ftype, n_dev, n_draft, noise > 0 ? " (noisy head)" : "",
                same, N_GEN, (long long)st.n_drafted, (long long)st.n_accepted, na < N_GEN ? ": " : "",
                na < N_GEN ? infer_last_error() : "");
        T_CHECK(n1 == N_GEN && da.n_drafts == d1a.n_drafts && same_drafts == da.n_drafts,
                "%s %s -sm tensor over %d, --mtp %d: %d of %d drafts equal to one device's (%d)", arch, ftype, n_dev,
                n_draft, same_drafts, da.n_drafts, d1a.n_drafts);
        /* the drafts stay on rank 0's device (spec.c spec_resident): a greedy step moves last, each rank's positions
         * of the drafts and of the batch, the batch's rows to each rank computing logits, and the k + 2 ints of the
         * acceptance; no draft id, no row of logits */
        const uint64_t k = (uint64_t)n_draft, i4 = sizeof(int32_t), ranks = (uint64_t)n_dev;
        uint64_t heads = 0;
        for (int32_t r = 0; d && r < d->tp_n; r++) heads += r == 0 || d->tp[r]->head_rows > 0;
        const uint64_t want = i4 + k * ranks * i4 + (k + 1) * ranks * i4 + (k + 1) * heads * i4 + (k + 2) * i4;
        T_CHECK(st.n_steps > 0 && da.bus == (uint64_t)st.n_steps * want,
                "%s %s -sm tensor over %d, --mtp %d: %llu bus bytes in %lld greedy steps, expected %llu a step", arch,
                ftype, n_dev, n_draft, (unsigned long long)da.bus, (long long)st.n_steps, (unsigned long long)want);
        printf("  %-9s %-6s -sm tensor x%d --mtp %d%s: MTP stream = plain for %d tokens, %lld of %lld drafts kept, "
               "%d of %d drafts = one device's\n", arch, ftype, n_dev, n_draft, noise > 0 ? " noisy" : " random", same,
               (long long)st.n_accepted, (long long)st.n_drafted, same_drafts, d1a.n_drafts);
    }
    infer_sampler_free(g1), infer_sampler_free(g2), infer_sampler_free(g3);
    infer_ctx_free(d), infer_ctx_free(plain), infer_ctx_free(d1);
    infer_model_free(one);
    if (m && temp_too) {
        infer_ctx *t1 = make_ctx(m, n_draft), *t2 = make_ctx(m, n_draft), *tp = make_ctx(m, n_draft);
        infer_sampler *s1 = make_sampler(m, 0.8f, 1.0f), *s2 = make_sampler(m, 0.8f, 1.0f);
        infer_sampler *sp3 = make_sampler(m, 0.8f, 1.3f);
        int32_t x[N_GEN], y[N_GEN], z[N_GEN];
        if (t1 && t2 && tp && s1 && s2 && sp3) {
            struct stream_rec rx = {0};
            const int32_t nx = stream(t1, STREAM_SPEC, s1, x, N_GEN, &rx);
            const infer_spec_stats st = infer_spec_get_stats(t1);
            const uint64_t per_step = st.n_steps ? rx.bus / (uint64_t)st.n_steps : 0;
            const int32_t ny = stream(t2, STREAM_SPEC, s2, y, N_GEN, NULL);
            struct stream_rec rz = {0};
            const int32_t nz = stream(tp, STREAM_SPEC, sp3, z, N_GEN, &rz);
            const infer_spec_stats sz = infer_spec_get_stats(tp);
            const uint64_t per_step_pen = sz.n_steps ? rz.bus / (uint64_t)sz.n_steps : 0;
            int ok = nx == N_GEN && ny == N_GEN && nz == N_GEN && !memcmp(x, y, sizeof x) && st.n_steps > 0;
            for (int32_t i = 0; i < nz; i++) ok &= z[i] >= 0 && z[i] < infer_vocab_size(m);
            ok &= sz.n_steps > 0 && per_step_pen < (uint64_t)infer_vocab_size(m) * sizeof(float);
            T_CHECK(ok && per_step < (uint64_t)infer_vocab_size(m) * sizeof(float),
                    "%s %s over %d, --mtp %d at temp 0.8: %d / %d / %d tokens, the same with the seed: %s, %llu bus "
                    "bytes a step, %llu with a penalty (a row: %llu): %s", arch, ftype, n_dev, n_draft, nx, ny, nz,
                    memcmp(x, y, sizeof x) ? "no" : "yes", (unsigned long long)per_step,
                    (unsigned long long)per_step_pen,
                    (unsigned long long)infer_vocab_size(m) * sizeof(float), infer_last_error());
        }
        infer_sampler_free(s1), infer_sampler_free(s2), infer_sampler_free(sp3);
        infer_ctx_free(t1), infer_ctx_free(t2), infer_ctx_free(tp);
    }
    infer_model_free(m);
    unlink(path);
}

#ifdef INFER_EMU
enum { GRAPH_DRAFTS = 3, GRAPH_GEN = 12 };

/* What a run of check_graphs saw: tokens, the last logits row, and per rank the graph launches and the kernel
 * launches outside graphs of a counted decode step and a counted MTP step. */
struct graph_run {
    int32_t tok[N_GREEDY], spec[GRAPH_GEN + GRAPH_DRAFTS + 1];
    float *last;
    uint64_t graphs[4], launches[4], spec_graphs[4], spec_launches[4];
};

/* Counters of devices 0 .. n - 1 into c. */
static void counters(int32_t n, struct emu_counters *c) {
    for (int32_t r = 0; r < n; r++) emu_counters_get(r, &c[r]);
}

/* One run of check_graphs on m (graphs on or off, as INFER_CUDA_GRAPHS says at context creation). */
static int graph_run(infer_model *m, int32_t n_dev, struct graph_run *g) {
    const int32_t nv = infer_vocab_size(m);
    infer_ctx *c = make_ctx(m, 0), *d = make_ctx(m, GRAPH_DRAFTS);
    infer_sampler *s = make_sampler(m, 0.0f, 1.0f);
    struct emu_counters c0[4], c1[4];
    int ok = c && d && s && greedy(c, nv, g->tok);
    counters(n_dev, c0);
    infer_batch b = {1, &g->tok[N_GREEDY - 1], NULL, NULL, NULL};
    ok = ok && infer_decode(c, &b) == INFER_OK;
    counters(n_dev, c1);
    for (int32_t r = 0; r < n_dev; r++) {
        g->graphs[r] = c1[r].graph_launches - c0[r].graph_launches;
        g->launches[r] = c1[r].launches - c0[r].launches;
    }
    const float *l = ok ? infer_logits(c, -1) : NULL;
    ok = ok && l && memcpy(g->last, l, (size_t)nv * sizeof(float));
    /* greedy MTP steps with an agreeing head (every step the same shapes), then one counted */
    const int32_t prompt[5] = {11, 3, 27, 8, 19};
    infer_batch pb = {5, prompt, NULL, NULL, NULL};
    int32_t first = -1, next = -1, k = 0;
    ok = ok && infer_decode(d, &pb) == INFER_OK && infer_sample(d, s, -1, &first) == INFER_OK &&
         stream_continue(d, s, STREAM_SPEC, first, g->spec, GRAPH_GEN, &next, NULL) == GRAPH_GEN;
    counters(n_dev, c0);
    ok = ok && infer_spec_step(d, s, 0, next, g->spec + GRAPH_GEN, GRAPH_DRAFTS + 1, &k) == INFER_OK &&
         k == GRAPH_DRAFTS + 1;
    counters(n_dev, c1);
    for (int32_t r = 0; r < n_dev; r++) {
        g->spec_graphs[r] = c1[r].graph_launches - c0[r].graph_launches;
        g->spec_launches[r] = c1[r].launches - c0[r].launches;
    }
    infer_sampler_free(s);
    infer_ctx_free(c), infer_ctx_free(d);
    return ok;
}

/* CUDA graphs of the group (backend_cuda_group_run: one graph per rank, captured together, the all-reduces inside,
 * ranks 1.. launched from threads of their own): plain greedy decoding and greedy MTP steps give the same tokens and
 * the same last logits, bit for bit, as with INFER_CUDA_GRAPHS=0 (every op launched); a steady one-token step is one
 * graph launch per rank and no kernel launched outside them; a steady MTP step of 3 drafts (all kept) is 5 graph
 * launches per rank (each draft step, the verification batch, the MTP block's follow-up) and, on rank 0 only, the
 * acceptance's two kernels. Emulator counters. */
static void check_graphs(const char *arch, int32_t n_dev, void (*shape)(struct synth_params *)) {
    char path[256];
    struct synth_params sp;
    synth_params_default(arch, &sp);
    sp.ftype = "F32", sp.seed = 31, sp.mtp = 1, sp.mtp_agree = 1;
    if (shape) shape(&sp);
    snprintf(path, sizeof path, "%s/%s-graphs.gguf", dir, arch);
    if (synth_write(&sp, path) != INFER_OK) {
        T_CHECK(0, "synth %s with an MTP head: %s", arch, infer_last_error());
        return;
    }
    infer_model *m = load_tp(path, n_dev);
    const size_t row = m ? (size_t)infer_vocab_size(m) * sizeof(float) : 0;
    struct graph_run g[2] = {{.last = m ? malloc(row) : NULL}, {.last = m ? malloc(row) : NULL}};
    int ok = m && g[0].last && g[1].last;
    ok = ok && graph_run(m, n_dev, &g[0]);
    setenv("INFER_CUDA_GRAPHS", "0", 1); /* read at context creation */
    ok = ok && graph_run(m, n_dev, &g[1]);
    unsetenv("INFER_CUDA_GRAPHS");
    T_CHECK(ok, "%s over %d: the graphs' runs: %s", arch, n_dev, infer_last_error());
    if (ok) {
        int steady = 1, off = 1;
        for (int32_t r = 0; r < n_dev; r++) {
            steady &= g[0].graphs[r] == 1 && g[0].launches[r] == 0 && g[0].spec_graphs[r] == GRAPH_DRAFTS + 2 &&
                      g[0].spec_launches[r] == (r == 0 ? 2u : 0u);
            off &= g[1].graphs[r] == 0 && g[1].launches[r] > 10 && g[1].spec_graphs[r] == 0;
        }
        T_CHECK(!memcmp(g[0].tok, g[1].tok, sizeof g[0].tok) && !memcmp(g[0].last, g[1].last, row) &&
                    !memcmp(g[0].spec, g[1].spec, sizeof g[0].spec),
                "%s over %d: tokens, last logits and MTP tokens with graphs = without", arch, n_dev);
        T_CHECK(steady && off, "%s over %d: a decode step %llu graphs / %llu launches on rank 0 (%llu / %llu on rank "
                "1), an MTP step %llu / %llu (%llu / %llu); expected 1 / 0 and %d / 2 (rank 1: %d / 0); without "
                "graphs %llu / %llu", arch, n_dev, (unsigned long long)g[0].graphs[0],
                (unsigned long long)g[0].launches[0], (unsigned long long)g[0].graphs[1],
                (unsigned long long)g[0].launches[1], (unsigned long long)g[0].spec_graphs[0],
                (unsigned long long)g[0].spec_launches[0], (unsigned long long)g[0].spec_graphs[1],
                (unsigned long long)g[0].spec_launches[1], GRAPH_DRAFTS + 2, GRAPH_DRAFTS + 2,
                (unsigned long long)g[1].graphs[0], (unsigned long long)g[1].launches[0]);
        printf("  %-9s -sm tensor x%d graphs: a decode step %llu graph launch a rank, an MTP step of %d drafts %llu "
               "(rank 0 also %llu kernels); %llu launches on rank 0 a decode step without graphs\n", arch, n_dev,
               (unsigned long long)g[0].graphs[0], GRAPH_DRAFTS, (unsigned long long)g[0].spec_graphs[0],
               (unsigned long long)g[0].spec_launches[0], (unsigned long long)g[1].launches[0]);
    }
    free(g[0].last), free(g[1].last);
    infer_model_free(m);
    unlink(path);
}
#endif

int main(void) {
#ifdef INFER_EMU
    setenv("INFER_EMU_DEVICES", "4", 0); /* before the emulator's first call */
#endif
    /* check_processes: each wait of one process for the other gives up after 5 minutes (not the default 10) */
    setenv("INFER_EMU_NCCL_TIMEOUT", "300", 0);
    setenv("INFER_TP_TIMEOUT", "300", 0);
    const char *role = getenv("TEST_TP_ROLE");
    if (role && !strcmp(role, "follower")) return follower();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return t_done();
    }
    check_ranks_by_hand();
    check_refusals();
    const char *why = NULL;
    const int n_dev = device_count(&why);
    if (n_dev >= 1) check_same("qwen35moe", "F32", 1, NULL, "one rank");
    if (n_dev < 2) {
        printf("%d CUDA device%s (%s): tensor parallelism needs 2\n", n_dev, n_dev == 1 ? "" : "s", why ? why : "one");
        rmdir(dir);
        const int rc = t_done();
        return rc ? rc : n_dev == 0 ? 77 : 0;
    }
    const char *archs[] = {"llama", "qwen3moe", "qwen35", "qwen35moe", "qwen3next"};
    for (size_t a = 0; a < sizeof archs / sizeof *archs; a++) {
        /* t_quick: llama's path runs in "kv3" below, qwen3moe's attention and experts inside qwen35moe */
        if (t_quick() && a < 2) continue;
        check_same(archs[a], "F32", 2, NULL, "default");
        /* t_quick: Q4_K_M and 4 devices on the hybrid MoE only */
        if (!t_quick() || a == 3) check_same(archs[a], "Q4_K_M", 2, shapes_q4k, "q4k");
        if (n_dev >= 4 && (!t_quick() || a == 3)) check_same(archs[a], "F32", 4, shapes_g4, "g4");
    }
#ifdef INFER_EMU
    check_bytes("qwen35moe", 0, 2, NULL, "bytes");
    if (n_dev >= 4) {
        check_bytes("qwen3moe", 1, 2, NULL, "bytes12");  /* -ts 0,1,1: devices 1 and 2, 0 and 3 untouched */
        check_bytes("llama", 0, 4, NULL, "bytes4"); /* KV heads replicated: each rank a copy of one */
    }
#endif
    check_same("llama", "F32", 2, shapes_uneven_kv, "kv3");
    check_same("qwen35", "F32", 2, shapes_uneven_gdn, "k3");
    check_same("qwen35", "F32", 2, shapes_tied, "tied"); /* the head cut inside rank 0's token table */
    check_processes("qwen35moe", "shm");
    if (!t_quick()) check_processes("llama", "file");
#ifdef INFER_EMU
    check_graphs("qwen35", 2, NULL);
    if (n_dev >= 4 && !t_quick()) check_graphs("qwen35moe", 4, shapes_g4);
#endif
    check_mtp("qwen35", "F32", 2, NULL, 0.19f, 3, 1);
    check_mtp("qwen35moe", "Q4_K_M", 2, shapes_q4k, 0.19f, 3, 0);
    check_mtp("qwen35", "F32", 2, NULL, 0.0f, 4, 0); /* a random head: every draft rejected */
    if (!t_quick()) { /* t_quick: the MTP block's dense, MoE and random-head paths above */
        if (n_dev >= 4) check_mtp("qwen35moe", "F32", 4, shapes_g4, 0.19f, 2, 0);
        check_mtp("qwen3next", "F32", 2, NULL, 0.19f, 2, 0);
        check_mtp("qwen35", "F32", 2, shapes_uneven_gdn, 0.19f, 3, 0); /* 3 key heads over 2 */
        check_mtp("qwen3next", "Q4_K_M", 2, shapes_q4k, 0.19f, 3, 0);
        check_mtp("qwen35moe", "F32", 2, NULL, 0.19f, 1, 1);
        check_mtp("qwen35", "Q4_K_M", 2, shapes_q4k, 0.19f, 3, 0);
        if (n_dev >= 4) check_mtp("qwen35", "F32", 4, shapes_g4, 0.19f, 4, 0);
    }
    rmdir(dir);
    return t_done();
}
