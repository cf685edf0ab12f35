/* test-plan: placement plans (lib/plan.c, infer_model_plan, llm-run --dry-run) against byte counts worked out
 * by hand from the published shapes.
 *
 *   - Qwen3.5-35B-A3B (MoE) and Qwen3.6-27B (dense, preset qwen35-27b) in Q4_K_M, as sparse synthetic files
 *     (llm-gguf synth --sparse: the header and tensor infos, the data a hole), planned with -ngl auto for 12 /
 *     24 GiB and 16 / 24 GiB at 32k and 128k context, f16 and q8_0 KV: which layers and experts land where,
 *     weights, KV, state and scratch bytes per device, the context that would fit. The expected numbers come
 *     from the tensor shapes and llama-quantize's type rules written out below, and the fit rule re-done here;
 *   - llama.cpp's semantics on a small model: -ngl N takes the LAST N layers (the head only when N > the
 *     layer count), --n-cpu-moe N the experts of the first N MoE layers; KV only for attention layers;
 *   - what a context allocates equals what the plan counts: a counting CPU backend (every build) and the
 *     emulator's allocation counter for a device context and for both stages of a layer split (EMU=1 builds);
 *     the split's layers and head where the plan puts them (the load follows the plan's rule);
 *   - split_mode tensor over 2 stated devices (a small qwen35moe in F32): the degree, the devices (-ts 0,1,1: the
 *     last two), every layer's home the group, each rank's weights (its halves of every cut tensor, the replicated
 *     ones whole, the head cut at vocabulary rows, rank 0 the token table), cells and state of its own heads,
 *     scratch and overhead (with NCCL's reserve), all worked out below from the shapes; the automatic fit over the group (a rank short of
 *     memory refused, naming it); the load's refusals with its words (-ngl 3 word for word as the load says it,
 *     --n-cpu-moe, -ot, unequal shares, a share for a missing device, dimensions that do not cut);
 *   - the overhead: 512 MiB per GPU for stated memory; for measured devices (the emulator) the floor plus two
 *     CUDA backends as measured, which with INFER_MATMUL=cublas is the 96 MiB the emulator's counters see one
 *     backend take, measuring leaving nothing allocated;
 *   - bad inputs (negative n_cpu_moe, a device index out of range, memory too small for even the part without
 *     experts) are one clear error each; llm-run --dry-run prints the plan and exits 0 (-sm layer and -sm tensor
 *     over two stated GPUs; -sm tensor -ngl 3 is the load's one line, exit 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../include/infer.h"
#include "../tools/synth.h"
#include "forward.h"
#include "model.h"
#include "scratch.h"
#include "t.h"
#ifdef INFER_EMU
#include "emu_api.h"
#endif

#define MIB(x) ((uint64_t)(x) << 20)
#define GIB(x) ((uint64_t)(x) << 30)
#define OVERHEAD MIB(512) /* the planner's reserve per GPU for stated memory (plan.h PLAN_GPU_OVERHEAD), restated */
#define FLOOR MIB(320)    /* ... and its floor for measured devices (PLAN_GPU_FLOOR), restated */
#define NCCL_RESERVE MIB(512) /* ... and NCCL's per rank under split_mode tensor (PLAN_TP_NCCL_RESERVE), restated */
#define T 512             /* the default n_batch: scratch rows */

/* ---- hand-worked bytes ---- */

static uint64_t r256(uint64_t n) { return (n + 255) / 256 * 256; }
/* Rows of n values: Q4_K is 144 bytes per 256 values, Q6_K 210, F32 4 bytes a value. */
static uint64_t q4k(uint64_t n, uint64_t rows) { return n / 256 * 144 * rows; }
static uint64_t q6k(uint64_t n, uint64_t rows) { return n / 256 * 210 * rows; }
static uint64_t f32(uint64_t n) { return 4 * n; }

struct w {
    uint64_t dev, host; /* on a device each tensor is rounded up to 256 bytes; on the host it is the file's bytes */
};
static void add(struct w *w, uint64_t bytes) {
    w->dev += r256(bytes);
    w->host += bytes;
}

/* llama-quantize's use_more_bits (attn_v, attn_qkv, ffn_down* get Q6_K in Q4_K_M): the first and last eighth
 * and every third layer between, i.e. i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, written out. */
static const int more40[40] = {1, 1, 1, 1, 1, 0, 0, 1, 0, 0, /* 0-9 */
                               1, 0, 0, 1, 0, 0, 1, 0, 0, 1, /* 10-19 */
                               0, 0, 1, 0, 0, 1, 0, 0, 1, 0, /* 20-29 */
                               0, 1, 0, 0, 1, 1, 1, 1, 1, 1};
static const int more64[64] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, /* 0-9 */
                               1, 0, 0, 1, 0, 0, 1, 0, 0, 1, /* 10-19 */
                               0, 0, 1, 0, 0, 1, 0, 0, 1, 0, /* 20-29 */
                               0, 1, 0, 0, 1, 0, 0, 1, 0, 0, /* 30-39 */
                               1, 0, 0, 1, 0, 0, 1, 0, 0, 1, /* 40-49 */
                               0, 0, 1, 0, 0, 1, 1, 1, 1, 1, /* 50-59 */
                               1, 1, 1, 1};

/* Qwen3.5-35B-A3B: n_embd 2048, 40 layers, full attention every 4th (il % 4 == 3: 16 query heads with their
 * gates, 2 KV heads of 256), Gated DeltaNet elsewhere (16 k-heads, 32 v-heads of 128: qkv 2*16*128 + 4096 =
 * 8192 channels, conv kernel 4), 256 experts of 512 (top-8) + a shared expert of 512, vocab 248320. */
static void layer35(int il, struct w *rest, struct w *exps) {
    const int mb = more40[il];
    add(rest, f32(2048)); /* attn_norm */
    add(rest, f32(2048)); /* post_attention_norm */
    if (il % 4 == 3) {
        add(rest, q4k(2048, 2 * 16 * 256));               /* attn_q: query + gate */
        add(rest, q4k(2048, 2 * 256));                    /* attn_k */
        add(rest, mb ? q6k(2048, 512) : q4k(2048, 512)); /* attn_v */
        add(rest, q4k(16 * 256, 2048));                   /* attn_output */
        add(rest, f32(256));                              /* attn_q_norm */
        add(rest, f32(256));                              /* attn_k_norm */
    } else {
        add(rest, mb ? q6k(2048, 8192) : q4k(2048, 8192)); /* attn_qkv */
        add(rest, q4k(2048, 4096));                         /* attn_gate */
        add(rest, q4k(2048, 32));                           /* ssm_beta */
        add(rest, q4k(2048, 32));                           /* ssm_alpha */
        add(rest, f32(4 * 8192));                           /* ssm_conv1d */
        add(rest, f32(32));                                 /* ssm_dt.bias: 128 bytes, 256 on a device */
        add(rest, f32(32));                                 /* ssm_a */
        add(rest, f32(128));                                /* ssm_norm */
        add(rest, q4k(4096, 2048));                         /* ssm_out */
    }
    add(rest, f32(2048 * 256));                          /* ffn_gate_inp */
    add(rest, f32(2048));                                /* ffn_gate_inp_shexp */
    add(rest, q4k(2048, 512));                           /* ffn_gate_shexp */
    add(rest, q4k(2048, 512));                           /* ffn_up_shexp */
    add(rest, mb ? q6k(512, 2048) : q4k(512, 2048));     /* ffn_down_shexp */
    add(exps, q4k(2048, 512 * 256));                     /* ffn_gate_exps */
    add(exps, q4k(2048, 512 * 256));                     /* ffn_up_exps */
    add(exps, mb ? q6k(512, 2048 * 256) : q4k(512, 2048 * 256)); /* ffn_down_exps */
}

/* Qwen3.6-27B (qwen35-27b): n_embd 5120, 64 layers, attention every 4th (24 query heads + gates, 4 KV heads of
 * 256), Gated DeltaNet 16 k-heads / 48 v-heads of 128 (qkv 4096 + 6144 = 10240 channels), FFN 17408. */
static void layer27(int il, struct w *w) {
    const int mb = more64[il];
    add(w, f32(5120)); /* attn_norm */
    add(w, f32(5120)); /* post_attention_norm */
    if (il % 4 == 3) {
        add(w, q4k(5120, 2 * 24 * 256));                /* attn_q */
        add(w, q4k(5120, 4 * 256));                     /* attn_k */
        add(w, mb ? q6k(5120, 1024) : q4k(5120, 1024)); /* attn_v */
        add(w, q4k(24 * 256, 5120));                    /* attn_output */
        add(w, f32(256));
        add(w, f32(256));
    } else {
        add(w, mb ? q6k(5120, 10240) : q4k(5120, 10240)); /* attn_qkv */
        add(w, q4k(5120, 6144));                            /* attn_gate */
        add(w, q4k(5120, 48));                              /* ssm_beta */
        add(w, q4k(5120, 48));                              /* ssm_alpha */
        add(w, f32(4 * 10240));                             /* ssm_conv1d */
        add(w, f32(48));                                    /* ssm_dt.bias */
        add(w, f32(48));                                    /* ssm_a */
        add(w, f32(128));                                   /* ssm_norm */
        add(w, q4k(6144, 5120));                            /* ssm_out */
    }
    add(w, q4k(5120, 17408));                             /* ffn_gate */
    add(w, q4k(5120, 17408));                             /* ffn_up */
    add(w, mb ? q6k(17408, 5120) : q4k(17408, 5120));     /* ffn_down */
}

/* KV bytes of n attention layers: K and V, n_ctx cells of n_head_kv * 256 values, f16 (2 bytes) or q8_0 (34
 * bytes per 32); each of K and V one device allocation. */
static uint64_t kv_bytes(int n_layers, int n_head_kv, int64_t n_ctx, int q8) {
    const uint64_t row = q8 ? (uint64_t)n_head_kv * 256 / 32 * 34 : (uint64_t)n_head_kv * 256 * 2;
    return 2 * r256((uint64_t)n_layers * (uint64_t)n_ctx * row);
}

/* Recurrent state of n GDN layers, one sequence, f32: the live conv ring (ssm_conv_ring(kernel 4) = 11 slots) *
 * channels, the checkpoint's conv window (kernel 4 - 1 = 3 rows) * channels, and the delta-rule state v_heads * 128 *
 * 128 live and in the checkpoint cache.c always keeps. */
static uint64_t state_bytes(int n_gdn, int channels, int v_heads) {
    return r256((uint64_t)n_gdn * 11 * channels * 4) + r256((uint64_t)n_gdn * 3 * channels * 4) +
           2 * r256((uint64_t)n_gdn * v_heads * 128 * 128 * 4);
}

/* The experts' scratch of a T-token batch, for the grouped path (T >= MOE_GROUPED_TOKENS): per (token, expert) pair
 * its hidden vector (n_ff_exp 512) and down projection (n_embd 2048), then ints: the pairs sorted by expert and the
 * tile list, 3 per tile, at most pairs / 64 + 256 tiles (256 experts), and its count; rounded up to 256 bytes. */
static const uint64_t moe_scratch35 =
    (((uint64_t)T * 8 * (512 + 2048) + (uint64_t)T * 8 + 3 * ((uint64_t)T * 8 / 64 + 256) + 1) * 4 + 255) / 256 * 256;
/* gdn_conv's output-norm counters of a device context: a uint32 per value head (32 in the 35B, 48 in the 27B), one
 * allocation rounded up to 256 bytes. */
static const uint64_t gdn_done_bytes = 256;
/* The device scratch of a T-token context (every buffer a multiple of 256): floats per token of each buffer. */
static const uint64_t scratch35 =
    (uint64_t)T * 4 * (2048 /* x */ + 4096 /* xn */ + 4096 /* q */ + 8192 /* qg */ + 512 + 512 /* k v */ +
                       4096 /* att */ + 2048 /* h */ + 512 + 1 /* sh shg */ + 4096 /* xq */ + 256 /* router */ +
                       8 + 8 /* moe ids, weights */ + 8192 + 8192 + 4096 + 64 + 4096 /* gdn qkv conv z ab out */ +
                       248320 /* logits */ + 3 /* dtok dpos dout */) +
    32 * 8 * 16 * 258 * 4 /* split-K attention: 32 splits x 8 tokens x 16 heads x (256 + 2) */ + moe_scratch35 +
    gdn_done_bytes;
static const uint64_t scratch27 =
    (uint64_t)T * 4 * (5120 + 6144 + 6144 + 12288 + 1024 + 1024 + 6144 + 17408 /* h */ + 17408 /* xq: n_ff */ +
                       1 + 1 + 1 /* router, ids, weights of one "expert" */ + 10240 + 10240 + 6144 + 96 + 6144 +
                       248320 + 3) +
    32 * 8 * 24 * 258 * 4 + gdn_done_bytes;
/* a context's host arrays: pos, seq, out_row, out_ids, next (1 sequence) */
static const uint64_t host_arrays = (uint64_t)T * 4 * 4 + 4;
/* host side of a device context running the head: its host arrays and the logits' host copy */
static const uint64_t host_scratch_dev = host_arrays + (uint64_t)T * 248320 * 4;
/* the logits of a T-token batch (248320-token vocabulary): only in the stage that runs the head */
static const uint64_t logits_bytes = (uint64_t)T * 248320 * 4;

/* The largest n_ctx (>= 8192, so attention has its 32 splits) whose cells fit in avail bytes. */
static int64_t ctx_that_fits(uint64_t avail, int n_layers, int n_head_kv, int q8) {
    const uint64_t row = q8 ? (uint64_t)n_head_kv * 256 / 32 * 34 : (uint64_t)n_head_kv * 256 * 2;
    int64_t n = (int64_t)(avail / (2 * (uint64_t)n_layers * row)); /* before K's and V's rounding to 256 */
    while (n > 0 && kv_bytes(n_layers, n_head_kv, n, q8) > avail) n--;
    return n > 262144 ? 262144 : n;
}

/* ---- helpers ---- */

static infer_plan *plan_for(const char *path, int32_t ngl, int32_t n_cpu_moe, int32_t n_ctx, int q8, uint64_t mem) {
    infer_model_params mp = infer_model_params_default();
    infer_ctx_params cp = infer_ctx_params_default();
    infer_plan_params pp = infer_plan_params_default();
    infer_plan *p = NULL;
    mp.n_gpu_layers = ngl;
    mp.n_cpu_moe = n_cpu_moe;
    cp.n_ctx = n_ctx;
    cp.kv_type = q8 ? INFER_TYPE_Q8_0 : INFER_TYPE_F16;
    pp.n_devices = 1;
    pp.free_bytes[0] = mem;
    if (infer_model_plan(path, &mp, &cp, &pp, &p) != INFER_OK) T_CHECK(0, "plan %s: %s", path, infer_last_error());
    return p;
}

static infer_plan_memory mem_of(const infer_plan *p, int32_t home) {
    infer_plan_memory m = {0};
    if (p && infer_plan_get_memory(p, home, &m) != INFER_OK) T_CHECK(0, "memory of %d: %s", home, infer_last_error());
    return m;
}

static infer_status synth(const char *preset, const char *arch, int mtp, const char *path) {
    struct synth_params sp;
    memset(&sp, 0, sizeof sp);
    sp.ftype = "Q4_K_M";
    sp.mtp = mtp;
    sp.sparse = 1;
    infer_status st = preset ? synth_preset(preset, &sp) : synth_params_default(arch, &sp);
    sp.ftype = "Q4_K_M";
    sp.mtp = mtp;
    sp.sparse = 1;
    return st == INFER_OK ? synth_write(&sp, path) : st;
}

/* ---- Qwen3.5-35B-A3B ---- */

static void test_35b(const char *path) {
    struct w embd = {0}, head = {0}, rest[40], exps[40];
    add(&embd, q4k(2048, 248320)); /* token_embd */
    add(&head, f32(2048));         /* output_norm */
    add(&head, q6k(2048, 248320)); /* output */
    for (int il = 0; il < 40; il++) {
        rest[il] = exps[il] = (struct w){0};
        layer35(il, &rest[il], &exps[il]);
    }
    const uint64_t state = state_bytes(30, 8192, 32);
    const uint64_t mems[2] = {GIB(12), GIB(24)};
    const int64_t ctxs[2] = {32768, 131072};
    for (int im = 0; im < 2; im++)
        for (int ic = 0; ic < 2; ic++)
            for (int q8 = 0; q8 < 2; q8++) {
                const uint64_t mem = mems[im], kv = kv_bytes(10, 2, ctxs[ic], q8);
                /* the fit: the whole model, else the experts of the first k layers on the host, k as small as fits */
                int k = 0;
                uint64_t wdev = 0, whost = 0;
                for (; k <= 40; k++) {
                    wdev = head.dev + (k == 0 ? embd.dev : 0), whost = k == 0 ? 0 : embd.host;
                    for (int il = 0; il < 40; il++) {
                        wdev += rest[il].dev + (il >= k ? exps[il].dev : 0);
                        whost += il < k ? exps[il].host : 0;
                    }
                    if (wdev + kv + state + scratch35 + OVERHEAD <= mem) break;
                }
                const int64_t fit = ctx_that_fits(mem - (wdev + state + scratch35 + OVERHEAD), 10, 2, q8);
                infer_plan *p = plan_for(path, INFER_GPU_LAYERS_AUTO, 0, (int32_t)ctxs[ic], q8, mem);
                if (!p) continue;
                const infer_plan_info in = infer_plan_get_info(p);
                const infer_plan_memory d = mem_of(p, 0), h = mem_of(p, -1);
                printf("35B-A3B %2d GiB ctx %6lld %s: n_cpu_moe %2d (expected %2d), GPU %.1f MiB, fits %lld\n",
                       (int)(mem >> 30), (long long)ctxs[ic], q8 ? "q8_0" : "f16 ", in.n_cpu_moe, k,
                       (double)d.total / 1048576.0, (long long)in.n_ctx_fit);
                T_CHECK(k <= 40, "35B on %d GiB: the hand fit found no k", (int)(mem >> 30));
                T_CHECK(in.auto_fit && in.n_gpu_layers == 41 && in.n_cpu_moe == k && in.home_head == 0 &&
                            in.home_embd == (k ? -1 : 0) && in.split == (k > 0) && in.fits,
                        "35B %d GiB ctx %lld q8 %d: n_gpu_layers %d n_cpu_moe %d (expected 41, %d) head %d embd %d split %d",
                        (int)(mem >> 30), (long long)ctxs[ic], q8, in.n_gpu_layers, in.n_cpu_moe, k, in.home_head,
                        in.home_embd, in.split);
                int homes_ok = 1;
                for (int il = 0; il < 40; il++)
                    homes_ok &= infer_plan_layer_home(p, il) == 0 && infer_plan_experts_home(p, il) == (il < k ? -1 : 0);
                T_CHECK(homes_ok, "35B %d GiB: layer / expert homes differ from 'experts of layers 0..%d on the host'",
                        (int)(mem >> 30), k - 1);
                T_CHECK(d.weights == wdev && d.kv == kv && d.state == state && d.scratch == scratch35 &&
                            d.overhead == OVERHEAD && d.free_bytes == mem,
                        "35B %d GiB ctx %lld q8 %d: GPU weights %llu kv %llu state %llu scratch %llu, expected %llu %llu "
                        "%llu %llu", (int)(mem >> 30), (long long)ctxs[ic], q8, (unsigned long long)d.weights,
                        (unsigned long long)d.kv, (unsigned long long)d.state, (unsigned long long)d.scratch,
                        (unsigned long long)wdev, (unsigned long long)kv, (unsigned long long)state,
                        (unsigned long long)scratch35);
                /* expert offload: the token lookup runs on the host, in a CPU stage with its host arrays and scratch
                 * (no device extras, no logits: the head runs on the GPU); the device stage has page-locked copies
                 * of the normed hidden state, the routing (8 ids, 8 weights) and the experts' output per token, the
                 * x it receives, and one flag per layer */
                const uint64_t cpu_scratch = k ? host_arrays + scratch35 - (uint64_t)T * 4 * 3 - 32 * 8 * 16 * 258 * 4 -
                                                     moe_scratch35 - gdn_done_bytes - logits_bytes +
                                                     (uint64_t)T * 4 * (2048 + 8 + 8 + 2048 + 2048) + 40
                                               : 0;
                T_CHECK(h.weights == whost && h.kv == 0 && h.state == 0 && h.scratch == host_scratch_dev + cpu_scratch,
                        "35B %d GiB: host weights %llu scratch %llu, expected %llu %llu", (int)(mem >> 30),
                        (unsigned long long)h.weights, (unsigned long long)h.scratch, (unsigned long long)whost,
                        (unsigned long long)(host_scratch_dev + cpu_scratch));
                T_CHECK(in.kv_bytes_per_token == (q8 ? 10 * 2 * 544u : 10 * 2 * 1024u), "35B: KV per token %llu",
                        (unsigned long long)in.kv_bytes_per_token);
                T_CHECK(fit >= 8192 && in.n_ctx_fit == fit, "35B %d GiB ctx %lld q8 %d: context that fits %d, expected %lld",
                        (int)(mem >> 30), (long long)ctxs[ic], q8, in.n_ctx_fit, (long long)fit);
                infer_plan_free(p);
            }
    /* the whole model: weights as llama.cpp's Q4_K_M file of this shape holds them (every tensor) */
    uint64_t all = embd.dev + head.dev;
    for (int il = 0; il < 40; il++) all += rest[il].dev + exps[il].dev;
    infer_plan *p = plan_for(path, 99, 0, 4096, 0, GIB(80));
    T_CHECK(p && mem_of(p, 0).weights == all && !infer_plan_get_info(p).split, "35B -ngl 99: weights %llu, expected %llu",
            (unsigned long long)mem_of(p, 0).weights, (unsigned long long)all);
    infer_plan_free(p);
    /* --cpu-moe: every expert on the host, the rest on the GPU */
    p = plan_for(path, 99, INT32_MAX, 4096, 0, GIB(80));
    uint64_t ex = 0;
    for (int il = 0; il < 40; il++) ex += exps[il].dev;
    T_CHECK(p && infer_plan_get_info(p).n_cpu_moe == 40 && mem_of(p, 0).weights == all - ex - embd.dev,
            "35B --cpu-moe: n_cpu_moe %d, GPU weights %llu, expected 40, %llu", p ? infer_plan_get_info(p).n_cpu_moe : -1,
            (unsigned long long)mem_of(p, 0).weights, (unsigned long long)(all - ex - embd.dev));
    infer_plan_free(p);
    /* too little memory for even the part without experts: one clear error */
    infer_model_params mp = infer_model_params_default();
    infer_plan_params pp = infer_plan_params_default();
    mp.n_gpu_layers = INFER_GPU_LAYERS_AUTO;
    pp.n_devices = 1;
    pp.free_bytes[0] = GIB(2);
    p = NULL;
    const infer_status st = infer_model_plan(path, &mp, NULL, &pp, &p);
    T_CHECK(st == INFER_E_OOM && !p && strstr(infer_last_error(), "with every routed expert in host memory") &&
                strstr(infer_last_error(), "2048.0 MiB free"),
            "35B auto on 2 GiB: status %d, '%s'", st, infer_last_error());
}

/* ---- Qwen3.6-27B ---- */

static void test_27b(const char *path) {
    struct w embd = {0}, head = {0}, layer[64];
    add(&embd, q4k(5120, 248320));
    add(&head, f32(5120));
    add(&head, q6k(5120, 248320));
    for (int il = 0; il < 64; il++) {
        layer[il] = (struct w){0};
        layer27(il, &layer[il]);
    }
    const uint64_t mems[2] = {GIB(16), GIB(24)};
    const int64_t ctxs[2] = {32768, 131072};
    for (int im = 0; im < 2; im++)
        for (int ic = 0; ic < 2; ic++)
            for (int q8 = 0; q8 < 2; q8++) {
                const uint64_t mem = mems[im];
                /* the fit: everything (n = 65), else as many trailing layers as fit, the head on the host (a
                 * split: the GPU's stage has no logits) */
                int n = 65, n_attn = 0, n_gdn = 0;
                uint64_t wdev = 0, kv = 0, state = 0, scratch = scratch27;
                for (; n >= 0; n--) {
                    scratch = n == 65 ? scratch27 : scratch27 - logits_bytes;
                    wdev = n == 65 ? embd.dev + head.dev : 0, n_attn = n_gdn = 0;
                    for (int il = 64 - (n > 64 ? 64 : n); il < 64; il++) {
                        wdev += layer[il].dev;
                        n_attn += il % 4 == 3;
                        n_gdn += il % 4 != 3;
                    }
                    kv = kv_bytes(n_attn, 4, ctxs[ic], q8), state = state_bytes(n_gdn, 10240, 48);
                    if (wdev + kv + state + scratch + OVERHEAD <= mem) break;
                }
                const int64_t fit = ctx_that_fits(mem - (wdev + state + scratch + OVERHEAD), n_attn, 4, q8);
                infer_plan *p = plan_for(path, INFER_GPU_LAYERS_AUTO, 0, (int32_t)ctxs[ic], q8, mem);
                if (!p) continue;
                const infer_plan_info in = infer_plan_get_info(p);
                const infer_plan_memory d = mem_of(p, 0), h = mem_of(p, -1);
                printf("27B     %2d GiB ctx %6lld %s: n_gpu_layers %2d (expected %2d), GPU %.1f MiB, fits %lld\n",
                       (int)(mem >> 30), (long long)ctxs[ic], q8 ? "q8_0" : "f16 ", in.n_gpu_layers, n,
                       (double)d.total / 1048576.0, (long long)in.n_ctx_fit);
                T_CHECK(n > 0 && in.auto_fit && in.n_gpu_layers == n && in.n_cpu_moe == 0 &&
                            in.home_head == (n == 65 ? 0 : -1) && in.split == (n < 65) && in.fits,
                        "27B %d GiB ctx %lld q8 %d: n_gpu_layers %d (expected %d) head %d", (int)(mem >> 30),
                        (long long)ctxs[ic], q8, in.n_gpu_layers, n, in.home_head);
                int homes_ok = 1;
                for (int il = 0; il < 64; il++) homes_ok &= infer_plan_layer_home(p, il) == (il >= 64 - n ? 0 : -1);
                T_CHECK(homes_ok, "27B %d GiB: layer homes differ from 'the last %d layers on the GPU'", (int)(mem >> 30), n);
                T_CHECK(d.weights == wdev && d.kv == kv && d.state == state && d.scratch == scratch,
                        "27B %d GiB ctx %lld q8 %d: GPU weights %llu kv %llu state %llu scratch %llu, expected %llu %llu "
                        "%llu %llu", (int)(mem >> 30), (long long)ctxs[ic], q8, (unsigned long long)d.weights,
                        (unsigned long long)d.kv, (unsigned long long)d.state, (unsigned long long)d.scratch,
                        (unsigned long long)wdev, (unsigned long long)kv, (unsigned long long)state,
                        (unsigned long long)scratch);
                /* a split's host: the CPU stage (host arrays, scratch without the device extras, the logits) and
                 * the GPU stage's host arrays and page-locked x (T x 5120 floats); else the GPU context's */
                const uint64_t host_split = 2 * host_arrays + scratch27 - (uint64_t)T * 4 * 3 - 32 * 8 * 24 * 258 * 4 -
                                            gdn_done_bytes + (uint64_t)T * 5120 * 4;
                T_CHECK(h.scratch == (n == 65 ? host_scratch_dev : host_split), "27B %d GiB ctx %lld q8 %d: host "
                        "scratch %llu, expected %llu", (int)(mem >> 30), (long long)ctxs[ic], q8,
                        (unsigned long long)h.scratch, (unsigned long long)(n == 65 ? host_scratch_dev : host_split));
                T_CHECK(in.kv_bytes_per_token == (q8 ? 16 * 2 * 1088u : 16 * 2 * 2048u), "27B: KV per token %llu",
                        (unsigned long long)in.kv_bytes_per_token);
                T_CHECK(fit >= 8192 && in.n_ctx_fit == fit, "27B %d GiB ctx %lld q8 %d: context that fits %d, expected %lld",
                        (int)(mem >> 30), (long long)ctxs[ic], q8, in.n_ctx_fit, (long long)fit);
                infer_plan_free(p);
            }
}

/* ---- semantics on a small hybrid MoE model with an MTP block (4 trunk layers: GDN, GDN, GDN, attention) ---- */

static void test_semantics(const char *path) {
    infer_plan *p = plan_for(path, 2, 0, 256, 0, GIB(1));
    T_CHECK(p && infer_plan_layer_home(p, 0) == -1 && infer_plan_layer_home(p, 1) == -1 &&
                infer_plan_layer_home(p, 2) == 0 && infer_plan_layer_home(p, 3) == 0 &&
                infer_plan_layer_home(p, 4) == -1 && infer_plan_get_info(p).home_head == -1 &&
                infer_plan_get_info(p).split && infer_plan_get_info(p).loads,
            "-ngl 2 of 4: the last two layers on the GPU, the head and the MTP block on the host; a split that loads");
    /* KV for the one attention layer (3) only: 2 x 256 cells x 2 heads x 64 x f16; layers 0-2 are GDN */
    T_CHECK(mem_of(p, 0).kv == 2 * 256 * 2 * 64 * 2 && mem_of(p, -1).kv == 0, "-ngl 2: KV GPU %llu host %llu",
            (unsigned long long)mem_of(p, 0).kv, (unsigned long long)mem_of(p, -1).kv);
    /* state: GDN layer 2 on the GPU, 0 and 1 on the host, per layer: a live conv ring of 11 slots (kernel 4 - 1 + 8)
     * x (2 x 2 x 64 + 4 x 64 = 512) floats, the checkpoint's conv window of 3 rows x 512 floats, and 4 v-heads x 64 x
     * 64 floats live and in the checkpoint */
    T_CHECK(mem_of(p, 0).state == r256(11 * 512 * 4) + r256(3 * 512 * 4) + 2 * r256(4 * 64 * 64 * 4) &&
                mem_of(p, -1).state == 2 * 11 * 512 * 4 + 2 * 3 * 512 * 4 + 2 * 2 * 4 * 64 * 64 * 4,
            "-ngl 2: state GPU %llu host %llu", (unsigned long long)mem_of(p, 0).state,
            (unsigned long long)mem_of(p, -1).state);
    infer_plan_free(p);
    p = plan_for(path, 4, 0, 256, 0, GIB(1));
    T_CHECK(p && infer_plan_layer_home(p, 0) == 0 && infer_plan_get_info(p).home_head == -1 &&
                infer_plan_layer_home(p, 4) == -1,
            "-ngl 4 = the layer count: every layer on the GPU, the head on the host");
    infer_plan_free(p);
    p = plan_for(path, 5, 0, 256, 0, GIB(1));
    T_CHECK(p && infer_plan_get_info(p).home_head == 0 && infer_plan_get_info(p).home_embd == 0 &&
                infer_plan_layer_home(p, 4) == 0 && !infer_plan_get_info(p).split,
            "-ngl 5: everything on the GPU");
    infer_plan_free(p);
    p = plan_for(path, 99, 3, 256, 0, GIB(1));
    int ok = p != NULL;
    for (int il = 0; p && il < 5; il++)
        ok &= infer_plan_layer_home(p, il) == 0 && infer_plan_experts_home(p, il) == (il < 3 ? -1 : 0);
    T_CHECK(ok && infer_plan_get_info(p).n_cpu_moe == 3 && infer_plan_get_info(p).loads &&
                infer_plan_get_info(p).offloads_experts,
            "--n-cpu-moe 3: the experts of layers 0-2 on the host (expert offload)");
    char text[4096];
    infer_plan_text(p, text, (int32_t)sizeof text);
    T_CHECK(strstr(text, "experts of layers 0-2") && strstr(text, "host (CPU)") && strstr(text, "layers 0-3"),
            "the text names the expert override:\n%s", text);
    T_CHECK(infer_plan_text(p, NULL, 0) == (int32_t)strlen(text), "infer_plan_text's length");
    infer_plan_free(p);
    /* with MTP drafting the MTP block has cells and the head's home keeps the hidden states */
    infer_model_params mp = infer_model_params_default();
    infer_ctx_params cp = infer_ctx_params_default();
    infer_plan_params pp = infer_plan_params_default();
    mp.n_gpu_layers = 99;
    cp.n_ctx = 256;
    cp.n_draft = 2;
    pp.n_devices = 1;
    pp.free_bytes[0] = GIB(1);
    p = NULL;
    T_CHECK(infer_model_plan(path, &mp, &cp, &pp, &p) == INFER_OK && mem_of(p, 0).kv == 2 * 2 * 256 * 2 * 64 * 2 &&
                infer_plan_get_info(p).kv_bytes_per_token == 2 * 2 * 2 * 64 * 2,
            "n_draft 2: KV of the attention layer and the MTP block: %llu", (unsigned long long)mem_of(p, 0).kv);
    /* and a ring of n_draft + 1 = 3 snapshots: for the 3 GDN layers, each snapshot the conv window (3 rows x 512
     * floats) and the 4 x 64 x 64 state; the hidden state (n_embd 256 floats) live, in each snapshot and in the
     * checkpoint. Live: conv 3 x 11 x 512 x 4 = 67584, ssm 3 x 4 x 64 x 64 x 4 = 196608, h 1024; ring: conv 3 x 3 x 3 x
     * 512 x 4 = 55296, ssm 3 x 196608, h 3 x 1024; checkpoint: conv 3 x 3 x 512 x 4 = 18432, ssm 196608, h 1024 (each
     * a multiple of 256) */
    const uint64_t drafting_state = 67584 + 196608 + 1024 + 55296 + 3 * 196608 + 3 * 1024 + 18432 + 196608 + 1024;
    T_CHECK(p && mem_of(p, 0).state == drafting_state, "n_draft 2: state %llu, expected %llu",
            p ? (unsigned long long)mem_of(p, 0).state : 0ULL, (unsigned long long)drafting_state);
    infer_plan_free(p);
}

/* ---- errors ---- */

static void test_errors(const char *path) {
    infer_model_params mp = infer_model_params_default();
    infer_plan_params pp = infer_plan_params_default();
    infer_plan *p = NULL;
    pp.n_devices = 1;
    pp.free_bytes[0] = GIB(8);
    mp.n_cpu_moe = -1;
    T_CHECK(infer_model_plan(path, &mp, NULL, &pp, &p) == INFER_E_ARG && !p && strstr(infer_last_error(), "n_cpu_moe -1"),
            "n_cpu_moe -1: '%s'", infer_last_error());
    infer_model *m = NULL;
    T_CHECK(infer_model_load(path, &mp, &m) == INFER_E_ARG && !m && strstr(infer_last_error(), "n_cpu_moe -1"),
            "load with n_cpu_moe -1: '%s'", infer_last_error());
    mp.n_cpu_moe = 0;
    mp.n_gpu_layers = 99;
    mp.main_gpu = 1;
    T_CHECK(infer_model_plan(path, &mp, NULL, &pp, &p) == INFER_E_ARG && !p && strstr(infer_last_error(), "main_gpu 1"),
            "main_gpu 1 of 1 device: '%s'", infer_last_error());
    mp.main_gpu = 0;
    pp.n_devices = INFER_MAX_DEVICES + 1;
    T_CHECK(infer_model_plan(path, &mp, NULL, &pp, &p) == INFER_E_ARG && !p, "n_devices %d: '%s'", pp.n_devices,
            infer_last_error());
    pp.n_devices = 1;
    infer_ctx_params cp = infer_ctx_params_default();
    cp.kv_type = INFER_TYPE_Q4_K;
    T_CHECK(infer_model_plan(path, &mp, &cp, &pp, &p) == INFER_E_ARG && !p && strstr(infer_last_error(), "kv_type"),
            "kv_type Q4_K: '%s'", infer_last_error());
    T_CHECK(infer_model_plan("/nonexistent.gguf", &mp, NULL, &pp, &p) == INFER_E_IO && !p, "a missing file: '%s'",
            infer_last_error());
    /* tensor overrides: experts to the CPU under GPU layers plan as n_cpu_moe does; what cannot run is refused */
    mp.n_gpu_layers = 99;
    mp.tensor_overrides = "blk\\.(1|3)\\.ffn_.*_exps=CPU";
    T_CHECK(infer_model_plan(path, &mp, NULL, &pp, &p) == INFER_OK, "-ot experts of 1 and 3: %s", infer_last_error());
    int ot_ok = p != NULL;
    for (int32_t il = 0; p && il < infer_plan_get_info(p).n_layer; il++)
        ot_ok &= infer_plan_layer_home(p, il) == 0 && infer_plan_experts_home(p, il) == (il == 1 || il == 3 ? -1 : 0);
    T_CHECK(ot_ok, "-ot blk.(1|3).ffn_.*_exps=CPU: experts of layers 1 and 3 on the host, everything else on CUDA0");
    infer_plan_free(p);
    p = NULL;
    mp.n_cpu_moe = 2; /* an override wins over n_cpu_moe: layer 0 and 1 by n_cpu_moe, 1 and 3 by the pattern */
    mp.tensor_overrides = "blk\\.\\d\\.ffn_(gate|up|down)_exps=CUDA0,blk\\.3\\.=CPU";
    T_CHECK(infer_model_plan(path, &mp, NULL, &pp, &p) == INFER_E_UNSUPPORTED && !p &&
                strstr(infer_last_error(), "blk.3.") && strstr(infer_last_error(), "only routed experts"),
            "-ot blk.3.=CPU moves attention: '%s'", infer_last_error());
    mp.tensor_overrides = "blk\\.\\d\\.ffn_(gate|up|down)_exps=CUDA0";
    T_CHECK(infer_model_plan(path, &mp, NULL, &pp, &p) == INFER_OK && p && infer_plan_get_info(p).n_cpu_moe == 2 &&
                infer_plan_experts_home(p, 0) == 0 && infer_plan_experts_home(p, 1) == 0,
            "-ot ...=CUDA0 keeps the experts of 0 and 1 on the GPU over n_cpu_moe 2: %s", infer_last_error());
    infer_plan_free(p);
    p = NULL;
    mp.n_cpu_moe = 0;
    const char *bad[] = {"exps", "exps=GPU", "exps=CUDA", "=CPU", "(=CPU", "blk\\.0\\.ffn_up_exps=CPU"};
    const char *why[] = {"PATTERN=DEVICE", "unknown device", "unknown device", "PATTERN=DEVICE", "regular expression",
                         "different devices"};
    for (int i = 0; i < 6; i++) {
        mp.tensor_overrides = bad[i];
        const infer_status st = infer_model_plan(path, &mp, NULL, &pp, &p);
        T_CHECK(st != INFER_OK && !p && strstr(infer_last_error(), why[i]), "-ot %s: %d '%s'", bad[i], st,
                infer_last_error());
    }
    mp.n_gpu_layers = 2; /* layers 0 and 1 on the host: their experts cannot go to the GPU */
    mp.tensor_overrides = "blk\\.0\\.ffn_.*_exps=CUDA0";
    T_CHECK(infer_model_plan(path, &mp, NULL, &pp, &p) == INFER_E_UNSUPPORTED && !p &&
                strstr(infer_last_error(), "not the other way"),
            "-ot experts of a CPU layer to CUDA0: '%s'", infer_last_error());
    mp.tensor_overrides = NULL;
}

/* ---- tensor parallelism (split_mode tensor) ---- */

/* One tensor of a rank's shards: each device allocation rounded up to 256; a cut tensor holds half (2 ranks). */
static uint64_t shard(uint64_t bytes, int cut) { return r256(cut ? bytes / 2 : bytes); }

/* Rank r of 2's weights on its device for the default synthetic qwen35moe in F32 (n_embd 256; layers 0-2 Gated
 * DeltaNet: 2 key heads of 64, 4 value heads, qkv 2*128 + 256 = 512 channels, conv kernel 4; layer 3 attention:
 * 4 query heads with gates and 2 KV heads of 64; every layer 8 experts of 256 and a shared expert of 256; vocab
 * 640). Rank r holds query heads 2r, 2r+1, KV head r, key head r with value heads 2r, 2r+1 (tiled: r and r+2,
 * still half), experts' and shared columns 128r..128r+127, vocabulary rows 320r..320r+319 of the head: half of every
 * cut tensor; norms and routers whole; the token table on rank 0. */
static uint64_t tp_weights_by_hand(int r) {
    uint64_t w = 0;
    for (int il = 0; il < 4; il++) {
        w += shard(f32(256), 0) + shard(f32(256), 0);  /* attn_norm, post_attention_norm */
        if (il == 3) {
            w += shard(f32(256 * 512), 1);                 /* attn_q: 4 heads x (64 query + 64 gate) rows */
            w += shard(f32(256 * 128), 1);                 /* attn_k: 2 KV heads */
            w += shard(f32(256 * 128), 1);                 /* attn_v */
            w += shard(f32(256 * 256), 1);                 /* attn_output: the heads' columns */
            w += shard(f32(64), 0) + shard(f32(64), 0);    /* attn_q_norm, attn_k_norm */
        } else {
            w += shard(f32(256 * 512), 1);                 /* attn_qkv: q | k | v rows of its key head */
            w += shard(f32(256 * 256), 1);                 /* attn_gate: its value heads */
            w += shard(f32(256 * 4), 1);                   /* ssm_beta */
            w += shard(f32(256 * 4), 1);                   /* ssm_alpha */
            w += shard(f32(4 * 512), 1);                   /* ssm_conv1d: the qkv channels */
            w += shard(f32(4), 1) + shard(f32(4), 1);      /* ssm_dt.bias, ssm_a: 8 bytes, 256 on a device */
            w += shard(f32(64), 0);                        /* ssm_norm */
            w += shard(f32(256 * 256), 1);                 /* ssm_out: its value heads' columns */
        }
        w += shard(f32(256 * 8), 0) + shard(f32(256), 0); /* ffn_gate_inp, ffn_gate_inp_shexp */
        w += 3 * shard(f32(256 * 256), 1);                 /* ffn_{gate,up,down}_shexp */
        w += 3 * shard(f32(256 * 256 * 8), 1);             /* ffn_{gate,up,down}_exps */
    }
    w += r256(f32(256)) + r256(f32(256 * 320)); /* output_norm; output: vocabulary rows 320r..320r+319 */
    if (r == 0) w += r256(f32(256 * 640));      /* token_embd */
    return w;
}

/* Rank r's stage's device scratch for T tokens at n_ctx 1024 (rank 1 of 2: its 2 query heads, 1 KV head, 1 key head
 * with 2 value heads, 128 experts' and shared columns; its logits of half the vocabulary, the whole rows only on
 * rank 0): floats per token of each buffer, each rounded up to 256 bytes. */
static uint64_t tp_scratch_by_hand(int r, uint64_t t) {
    const uint64_t per_token[] = {256 /* x */, 256 /* xn */, 128 /* q */, 256 /* qg */, 64, 64 /* k v */,
                                  128 /* att */, 256 /* h: n_embd (MoE) */, 128 /* sh */, 1 /* shg */, 256 /* xq */,
                                  8 /* router */, 2, 2 /* moe ids, weights */, 256, 256 /* gdn qkv, conv */,
                                  128 /* z */, 4 /* ab */, 128 /* out */, 1, 1, 1 /* dtok dpos dout */};
    uint64_t b = 0;
    for (size_t i = 0; i < sizeof per_token / sizeof *per_token; i++) b += r256(t * per_token[i] * 4);
    /* the experts' grouped-path scratch: per (token, expert) pair (2 per token) its 128 hidden columns and its 256
     * outputs, then ints: the sorted pairs, 3 per tile (at most pairs / 64 + 8 tiles: 8 experts) and the count */
    b += r256(4 * (t * 2 * (128 + 256) + t * 2 + 3 * (t * 2 / 64 + 8) + 1));
    b += r256(4 * 8 * 2 * 66 * 4); /* split-K attention at 1024 cells: 4 splits x 8 tokens x 2 heads x (64 + 2) */
    b += gdn_done_bytes;           /* gdn_conv's counters: one per value head */
    b += r256(t * 320 * 4);                  /* head_part: the logits of its 320 vocabulary rows */
    if (r == 0) b += r256(t * 640 * 4);      /* logits */
    if (r == 1) b += r256(8 * 640 * 4);      /* head_sum: its part of the reduce, 8 outputs at a time */
    return b;
}

static void test_tp(const char *small_q4k) {
    const char *path = tmp_path("tp.gguf");
    struct synth_params sp;
    synth_params_default("qwen35moe", &sp);
    sp.ftype = "F32";
    T_CHECK(synth_write(&sp, path) == INFER_OK, "synth qwen35moe F32: %s", infer_last_error());
    infer_model_params mp = infer_model_params_default();
    infer_ctx_params cp = infer_ctx_params_default();
    infer_plan_params pp = infer_plan_params_default();
    mp.n_gpu_layers = 99;
    mp.split_mode = INFER_SPLIT_TENSOR;
    cp.n_ctx = 1024;
    cp.n_batch = 32;
    pp.n_devices = 2;
    pp.free_bytes[0] = pp.free_bytes[1] = GIB(8);
    infer_plan *p = NULL;
    T_CHECK(infer_model_plan(path, &mp, &cp, &pp, &p) == INFER_OK, "-sm tensor over 2: %s", infer_last_error());
    if (!p) return;
    const infer_plan_info in = infer_plan_get_info(p);
    int homes_ok = in.tp == 2 && infer_plan_tp_device(p, 0) == 0 && infer_plan_tp_device(p, 1) == 1 &&
                   infer_plan_tp_device(p, 2) == -2 && in.home_embd == 0 && in.home_head == 0 && in.gpu == 0 &&
                   in.n_gpu_layers == 5 && !in.split && in.loads && !in.offloads_experts && in.fits && !in.auto_fit;
    for (int il = 0; il < 4; il++) homes_ok &= infer_plan_layer_home(p, il) == 0 && infer_plan_experts_home(p, il) == 0;
    T_CHECK(homes_ok, "-sm tensor over 2: degree %d, devices %d %d, every layer's home the group (its first device)",
            in.tp, infer_plan_tp_device(p, 0), infer_plan_tp_device(p, 1));
    /* each rank: its heads' cells (1 KV head of 64, f16, 1024 cells, K and V) and state (3 GDN layers, f32: a live
     * conv ring of 11 slots x 256 channels, the checkpoint's window of 3 rows x 256, and 2 value heads x 64 x 64 live
     * and in the checkpoint) */
    const uint64_t kv = 2 * r256(1024 * 64 * 2),
                   state = r256(3 * 11 * 256 * 4) + r256(3 * 3 * 256 * 4) + 2 * r256(3 * 2 * 64 * 64 * 4);
    for (int r = 0; r < 2; r++) {
        const infer_plan_memory d = mem_of(p, r);
        const uint64_t w = tp_weights_by_hand(r), sc = tp_scratch_by_hand(r, 32);
        T_CHECK(d.weights == w && d.kv == kv && d.state == state && d.scratch == sc &&
                    d.overhead == OVERHEAD + NCCL_RESERVE && d.total == w + kv + state + sc + OVERHEAD + NCCL_RESERVE,
                "-sm tensor rank %d: weights %llu kv %llu state %llu scratch %llu overhead %llu, expected %llu %llu "
                "%llu %llu %llu", r, (unsigned long long)d.weights, (unsigned long long)d.kv, (unsigned long long)d.state,
                (unsigned long long)d.scratch, (unsigned long long)d.overhead, (unsigned long long)w,
                (unsigned long long)kv, (unsigned long long)state, (unsigned long long)sc,
                (unsigned long long)(OVERHEAD + NCCL_RESERVE));
    }
    /* the host: no weights (no MTP block), each stage's host arrays (pos, seq, out_row, out_ids, next) and rank 0's
     * copy of the logits */
    const infer_plan_memory h = mem_of(p, -1);
    T_CHECK(h.weights == 0 && h.kv == 0 && h.state == 0 && h.scratch == 2 * (32 * 4 * 4 + 4) + 32 * 640 * 4,
            "-sm tensor: host weights %llu scratch %llu", (unsigned long long)h.weights, (unsigned long long)h.scratch);
    char text[4096];
    infer_plan_text(p, text, (int32_t)sizeof text);
    T_CHECK(strstr(text, "split mode tensor, tensor parallel 2 (CUDA0+CUDA1)") &&
                strstr(text, "layers 0-3                 CUDA0+CUDA1 (shards)") && strstr(text, "NCCL"),
            "-sm tensor's text:\n%s", text);
    const uint64_t total0 = mem_of(p, 0).total, total1 = mem_of(p, 1).total;
    infer_plan_free(p);
    p = NULL;
    /* -ts 0,1,1 over three: devices 1 and 2, the first untouched */
    mp.tensor_split[1] = mp.tensor_split[2] = 1;
    pp.n_devices = 3;
    pp.free_bytes[2] = GIB(8);
    T_CHECK(infer_model_plan(path, &mp, &cp, &pp, &p) == INFER_OK && infer_plan_tp_device(p, 0) == 1 &&
                infer_plan_tp_device(p, 1) == 2 && infer_plan_layer_home(p, 0) == 1 &&
                infer_plan_get_info(p).home_head == 1 && mem_of(p, 0).total == 0 && mem_of(p, 1).total == total0 && mem_of(p, 2).total == total1,
            "-sm tensor -ts 0,1,1: ranks on devices 1 and 2, device 0 empty: %s", infer_last_error());
    infer_plan_free(p);
    p = NULL;
    memset(mp.tensor_split, 0, sizeof mp.tensor_split);
    pp.n_devices = 2;
    /* the automatic fit: every rank must fit its device; rank 1 fits exactly, rank 0 (the token table, the head, the
     * logits) does not */
    mp.n_gpu_layers = INFER_GPU_LAYERS_AUTO;
    pp.free_bytes[0] = pp.free_bytes[1] = total1;
    infer_status st = infer_model_plan(path, &mp, &cp, &pp, &p);
    T_CHECK(st == INFER_E_OOM && !p && strstr(infer_last_error(), "split_mode tensor over 2 devices: rank 0's part") &&
                strstr(infer_last_error(), "CUDA device 0"),
            "-sm tensor -ngl auto, rank 0 short: %d '%s'", st, infer_last_error());
    pp.free_bytes[0] = total0;
    T_CHECK(infer_model_plan(path, &mp, &cp, &pp, &p) == INFER_OK && infer_plan_get_info(p).auto_fit &&
                infer_plan_get_info(p).fits && infer_plan_get_info(p).tp == 2,
            "-sm tensor -ngl auto with exactly enough: %s", infer_last_error());
    infer_plan_free(p);
    p = NULL;
    pp.free_bytes[0] = pp.free_bytes[1] = GIB(8);
    /* refusals with the load's words */
    mp.n_gpu_layers = 3;
    st = infer_model_plan(path, &mp, &cp, &pp, &p);
    char plan_msg[512];
    snprintf(plan_msg, sizeof plan_msg, "%s", infer_last_error());
    infer_model *m = NULL;
    const infer_status load_st = infer_model_load(path, &mp, &m);
    T_CHECK(st == INFER_E_UNSUPPORTED && !p && strstr(plan_msg, "n_gpu_layers 3") && load_st == st && !m &&
                !strcmp(plan_msg, infer_last_error()),
            "-sm tensor -ngl 3: plan '%s', load '%s'", plan_msg, infer_last_error());
    mp.n_gpu_layers = 99;
    mp.n_cpu_moe = 2;
    st = infer_model_plan(path, &mp, &cp, &pp, &p);
    T_CHECK(st == INFER_E_UNSUPPORTED && !p && strstr(infer_last_error(), "n_cpu_moe 2"),
            "-sm tensor --n-cpu-moe 2: '%s'", infer_last_error());
    mp.n_cpu_moe = 0;
    mp.tensor_overrides = "blk\\.1\\.ffn_.*_exps=CPU";
    st = infer_model_plan(path, &mp, &cp, &pp, &p);
    T_CHECK(st == INFER_E_UNSUPPORTED && !p && strstr(infer_last_error(), "tensor overrides"), "-sm tensor -ot: '%s'",
            infer_last_error());
    mp.tensor_overrides = NULL;
    mp.tensor_split[0] = 1, mp.tensor_split[1] = 2;
    st = infer_model_plan(path, &mp, &cp, &pp, &p);
    T_CHECK(st == INFER_E_UNSUPPORTED && !p && strstr(infer_last_error(), "tensor_split[1] = 2"),
            "-sm tensor -ts 1,2: '%s'", infer_last_error());
    mp.tensor_split[1] = 1, mp.tensor_split[2] = 1;
    st = infer_model_plan(path, &mp, &cp, &pp, &p);
    T_CHECK(st == INFER_E_ARG && !p && strstr(infer_last_error(), "gives device 2 a share but 2 devices are known"),
            "-sm tensor -ts 1,1,1 of 2 devices: '%s'", infer_last_error());
    memset(mp.tensor_split, 0, sizeof mp.tensor_split);
    pp.n_devices = 3;
    st = infer_model_plan(path, &mp, &cp, &pp, &p); /* 2 GDN key heads over 3 devices */
    T_CHECK(st == INFER_E_UNSUPPORTED && !p && strstr(infer_last_error(), "ssm.group_count 2"),
            "-sm tensor over 3: '%s'", infer_last_error());
    pp.n_devices = 2;
    st = infer_model_plan(small_q4k, &mp, &cp, &pp, &p); /* experts of 256 columns: one Q4_K block, one rank */
    T_CHECK(st == INFER_E_UNSUPPORTED && !p && strstr(infer_last_error(), "expert_feed_forward_length 256"),
            "-sm tensor, Q4_K experts of 256 columns: '%s'", infer_last_error());
    unlink(path);
}

/* ---- what a context allocates = what the plan counts ---- */

static uint64_t counted; /* bytes the counting backend handed out */
static struct infer_backend_ops counting_ops;
static infer_status (*inner_alloc)(struct infer_backend *, size_t, void **);
static void (*inner_destroy)(struct infer_backend *);
struct counting {
    struct infer_backend base; /* first: ops see the CPU backend's impl through it */
    struct infer_backend *inner;
};

static infer_status counting_alloc(struct infer_backend *b, size_t bytes, void **out) {
    infer_status st = inner_alloc(b, bytes, out);
    if (st == INFER_OK) counted += bytes;
    return st;
}

static void counting_destroy(struct infer_backend *b) {
    struct counting *c = (struct counting *)b;
    inner_destroy(c->inner);
    free(c);
}

static infer_status counting_create(int n_threads, struct infer_backend **out) {
    struct infer_backend *inner = NULL;
    infer_status st = backend_cpu_create(n_threads, &inner);
    if (st != INFER_OK) return st;
    struct counting *c = calloc(1, sizeof *c);
    counting_ops = *inner->ops;
    inner_alloc = inner->ops->alloc;
    inner_destroy = inner->ops->destroy;
    counting_ops.alloc = counting_alloc;
    counting_ops.destroy = counting_destroy;
    c->base = (struct infer_backend){.ops = &counting_ops, .impl = inner->impl};
    c->inner = inner;
    *out = &c->base;
    return INFER_OK;
}

static void test_scratch_equality(const char *path, const char *what, const infer_ctx_params *cp) {
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    infer_plan *p = NULL;
    infer_plan_params pp = infer_plan_params_default();
    pp.n_devices = 1;
    if (infer_model_load(path, NULL, &m) != INFER_OK) {
        T_CHECK(0, "%s: %s", what, infer_last_error());
        return;
    }
    counted = 0;
    T_CHECK(ctx_create_on(m, cp, counting_create, &c) == INFER_OK, "%s: %s", what, infer_last_error());
    T_CHECK(infer_model_plan(path, NULL, cp, &pp, &p) == INFER_OK, "%s: %s", what, infer_last_error());
    const infer_plan_memory h = mem_of(p, -1);
    /* the plan's host scratch also counts the host arrays: pos, seq, out_row, out_ids (n_batch each), next, and
     * with drafting the sampler's rows: q of each draft, p and the residual (n_vocab each) */
    const struct ctx_dims *d = c ? &c->dims : NULL;
    const uint64_t rows = d && d->n_draft ? (uint64_t)(d->n_draft + 2) * (uint64_t)m->hp.n_vocab * 4 : 0;
    const uint64_t arrays = d ? (uint64_t)d->n_batch * 4 * 4 + (uint64_t)d->n_seq * 4 + rows : 0;
    T_CHECK(c && counted == h.kv + h.state + h.scratch - arrays,
            "%s: the context allocated %llu bytes on its backend, the plan counts %llu", what,
            (unsigned long long)counted, (unsigned long long)(h.kv + h.state + h.scratch - arrays));
    infer_ctx_free(c);
    infer_plan_free(p);
    infer_model_free(m);
}

static void test_scratch_equality_device(const char *path, const char *what, const infer_ctx_params *cp) {
#ifdef INFER_EMU
    infer_model_params mp = infer_model_params_default();
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    infer_plan *p = NULL;
    struct emu_counters before, after;
    mp.n_gpu_layers = 99;
    if (infer_model_load(path, &mp, &m) != INFER_OK) {
        T_CHECK(0, "%s on the device: %s", what, infer_last_error());
        return;
    }
    emu_counters_get(0, &before);
    T_CHECK(infer_ctx_create(m, cp, &c) == INFER_OK, "%s: %s", what, infer_last_error());
    emu_counters_get(0, &after);
    T_CHECK(infer_model_plan(path, &mp, cp, NULL, &p) == INFER_OK, "%s: %s", what, infer_last_error()); /* measured */
    const infer_plan_memory d = mem_of(p, 0);
    uint64_t free_b = 0;
    infer_device_memory(0, NULL, &free_b);
    T_CHECK(after.bytes_in_use - before.bytes_in_use == d.kv + d.state + d.scratch,
            "%s: the device context took %llu bytes, the plan counts %llu", what,
            (unsigned long long)(after.bytes_in_use - before.bytes_in_use),
            (unsigned long long)(d.kv + d.state + d.scratch));
    /* measured: what the device had free when the plan was made, with the model and the context on it */
    T_CHECK(d.free_bytes == free_b, "%s: measured free %llu, the device says %llu", what,
            (unsigned long long)d.free_bytes, (unsigned long long)free_b);
    /* the overhead of measured devices: the floor and two backends as measured, none (a stream, no cuBLAS state
     * in the default matmul mode) on the emulator */
    T_CHECK(d.overhead == FLOOR, "%s: measured overhead %llu, expected the floor %llu", what,
            (unsigned long long)d.overhead, (unsigned long long)FLOOR);
    infer_ctx_free(c);
    infer_plan_free(p);
    infer_model_free(m);
#else
    (void)path, (void)what, (void)cp;
#endif
}

/* The overhead of measured devices with INFER_MATMUL=cublas on the emulator: a CUDA backend then holds cuBLAS's
 * 32 MiB workspace and 64 MiB scratch (the emulator's counters say what it took), the plan's overhead is the floor
 * and two of those, and measuring leaves nothing allocated. */
static void test_overhead_measured(const char *path) {
#ifdef INFER_EMU
    infer_model_params mp = infer_model_params_default();
    infer_plan *p = NULL;
    struct infer_backend *be = NULL;
    struct emu_counters before, after;
    mp.n_gpu_layers = 99;
    setenv("INFER_MATMUL", "cublas", 1);
    emu_counters_get(0, &before);
    T_CHECK(backend_cuda_create(0, &be) == INFER_OK, "a cuBLAS backend: %s", infer_last_error());
    emu_counters_get(0, &after);
    const uint64_t backend = after.bytes_in_use - before.bytes_in_use;
    if (be) be->ops->destroy(be);
    T_CHECK(backend == MIB(32) + MIB(64), "a cuBLAS backend took %llu bytes, expected its workspace and scratch "
            "(96 MiB)", (unsigned long long)backend);
    emu_counters_get(0, &before);
    T_CHECK(infer_model_plan(path, &mp, NULL, NULL, &p) == INFER_OK, "measured plan: %s", infer_last_error());
    emu_counters_get(0, &after);
    const infer_plan_memory d = mem_of(p, 0);
    T_CHECK(d.overhead == FLOOR + 2 * backend, "measured overhead with cuBLAS %llu, expected %llu (floor and two "
            "backends)", (unsigned long long)d.overhead, (unsigned long long)(FLOOR + 2 * backend));
    T_CHECK(after.bytes_in_use == before.bytes_in_use && after.allocs == before.allocs + 2,
            "measuring made one backend (%llu allocations) and left %lld bytes", (unsigned long long)(after.allocs -
            before.allocs), (long long)(after.bytes_in_use - before.bytes_in_use));
    infer_plan_free(p);
    unsetenv("INFER_MATMUL");
#else
    (void)path;
#endif
}

#ifdef INFER_EMU
/* What stage s holds in host memory: its host arrays and page-locked buffers, and on the CPU its scratch and
 * its cache (sized by the layers the cache really took). */
static uint64_t stage_host_bytes(const infer_ctx *s) {
    uint64_t total = 0;
    for (int32_t i = 0; i < s->n_scratch; i++)
        if (s->scratch[i].place != CTX_SCRATCH_BACKEND || !s->on_device) total += ctx_scratch_entry_bytes(&s->scratch[i]);
    if (s->on_device) return total;
    const struct kv_cache *kv = s->kv;
    struct kv_cache_bytes b;
    kv_cache_bytes_of(&s->m->hp, kv->n_kv_layer, kv->n_gdn, kv->n_embd_h > 0, kv->n_seq, kv->n_ctx, kv->n_ring,
                      kv->type, &b);
    const double parts[] = {b.k, b.v, b.conv, b.ssm, b.ring_conv, b.ring_ssm, b.ckpt_conv, b.ckpt_ssm, b.h, b.ring_h,
                            b.ckpt_h};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) total += (uint64_t)parts[i];
    return total;
}
#endif

/* A layer split (-ngl n of more layers) or expert offload (n_cpu_moe under GPU layers) on the emulator: the load
 * placed the layers, their experts and the head where the plan says, the device stage took what the plan counts
 * on the GPU, and the stages' host memory is the plan's. */
static void test_scratch_equality_placed(const char *path, const char *what, int32_t n_gpu_layers, int32_t n_cpu_moe,
                                         const infer_ctx_params *cp) {
#ifdef INFER_EMU
    infer_model_params mp = infer_model_params_default();
    infer_model *m = NULL;
    infer_ctx *c = NULL;
    infer_plan *p = NULL;
    struct emu_counters before, after;
    uint8_t exps_host[64] = {0};
    mp.n_gpu_layers = n_gpu_layers;
    mp.n_cpu_moe = n_cpu_moe;
    if (infer_model_load(path, &mp, &m) != INFER_OK) {
        T_CHECK(0, "%s -ngl %d: %s", what, n_gpu_layers, infer_last_error());
        return;
    }
    emu_counters_get(0, &before);
    T_CHECK(infer_ctx_create(m, cp, &c) == INFER_OK, "%s -ngl %d: %s", what, n_gpu_layers, infer_last_error());
    emu_counters_get(0, &after);
    T_CHECK(infer_model_plan(path, &mp, cp, NULL, &p) == INFER_OK, "%s: %s", what, infer_last_error());
    if (!c || !p) goto done;
    const infer_plan_info in = infer_plan_get_info(p);
    /* segments: the GPU's alone, after the host's token lookup when experts are offloaded, or host-GPU-host */
    const int32_t want_seg = m->gpu_head ? 1 + (m->embd_gpu < 0) : 3;
    int homes_ok = in.split && in.loads && in.offloads_experts == (n_cpu_moe > 0) &&
                   in.home_head == (m->gpu_head ? 0 : -1) && in.home_embd == (m->embd_gpu < 0 ? -1 : 0) &&
                   (want_seg > 1) == (c->next_stage != NULL) && c->n_seg == want_seg;
    int32_t n_off = 0;
    for (int32_t il = 0; il < in.n_layer; il++) {
        const int32_t home = il >= m->gpu_layer0 ? 0 : -1;
        exps_host[il] = (uint8_t)m->layers[il].exps_host;
        n_off += exps_host[il];
        homes_ok &= infer_plan_layer_home(p, il) == home;
        if (m->layers[il].ffn_gate_exps) homes_ok &= infer_plan_experts_home(p, il) == (exps_host[il] ? -1 : home);
    }
    T_CHECK(homes_ok, "%s -ngl %d --n-cpu-moe %d: the plan's homes differ from the load's placement (first GPU layer "
            "%d, head %d)", what, n_gpu_layers, n_cpu_moe, m->gpu_layer0, m->gpu_head);
    T_CHECK(n_cpu_moe == 0 || n_off > 0, "%s --n-cpu-moe %d: no layer offloads its experts", what, n_cpu_moe);
    const infer_plan_memory d = mem_of(p, 0), h = mem_of(p, -1);
    int32_t layer_home[64];
    for (int64_t il = 0; il < m->hp.n_layer_all && il < 64; il++)
        layer_home[il] = m->layer_gpu[il] >= 0 ? m->gpu[m->layer_gpu[il]].device : -1;
    const struct model_homes homes = {.layer = layer_home, .exps_host = exps_host,
                                      .embd = m->embd_gpu >= 0 ? m->gpu[m->embd_gpu].device : -1,
                                      .head = m->head_gpu >= 0 ? m->gpu[m->head_gpu].device : -1};
    const uint64_t up = model_weight_bytes(m, &homes, 0);
    T_CHECK(d.weights == up, "%s -ngl %d: GPU weights %llu, uploaded %llu", what, n_gpu_layers,
            (unsigned long long)d.weights, (unsigned long long)up);
    T_CHECK(after.bytes_in_use - before.bytes_in_use == d.kv + d.state + d.scratch,
            "%s -ngl %d: the device stage took %llu bytes, the plan counts %llu", what, n_gpu_layers,
            (unsigned long long)(after.bytes_in_use - before.bytes_in_use), (unsigned long long)(d.kv + d.state + d.scratch));
    const uint64_t host = stage_host_bytes(c) + (c->next_stage ? stage_host_bytes(c->next_stage) : 0);
    T_CHECK(host == h.kv + h.state + h.scratch, "%s -ngl %d: the stages hold %llu bytes of host memory, the plan "
            "counts %llu", what, n_gpu_layers, (unsigned long long)host, (unsigned long long)(h.kv + h.state + h.scratch));
done:
    infer_ctx_free(c);
    infer_plan_free(p);
    infer_model_free(m);
#else
    (void)path, (void)what, (void)n_gpu_layers, (void)n_cpu_moe, (void)cp;
#endif
}

/* ---- llm-run --dry-run ---- */

static int run(const char *args, char *out, size_t cap) {
    char cmd[2048];
    const char *b = getenv("INFER_BUILD_DIR");
    snprintf(cmd, sizeof cmd, "%s/llm-run %s 2>&1", b ? b : "build", args);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    const size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    while (fgetc(f) != EOF) {
    }
    const int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_dry_run(const char *path35) {
    static char out[1 << 16];
    char args[1024];
    snprintf(args, sizeof args, "-m %s --dry-run -ngl auto -c 32768 --dry-run-mem 24G", path35);
    int rc = run(args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "placement (automatic fit)") && strstr(out, "CUDA0") &&
                strstr(out, "KV cache: 20480 bytes per token") && strstr(out, "context that would fit on the GPU"),
            "llm-run --dry-run (exit %d):\n%s", rc, out);
    /* the last 38 layers on CUDA1; the experts of layers 0-3 on the host: 2 and 3 are the GPU's layers' override */
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 38 --n-cpu-moe 4 -ctk q8_0 -ctv q8_0 --dry-run-mem 12G,24G -mg 1",
             path35);
    rc = run(args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "layers 0-1 ") && strstr(out, "layers 2-39") && strstr(out, "experts of layers 2-3") &&
                strstr(out, "CUDA1") && strstr(out, "expert offload:"),
            "llm-run --dry-run -ngl 38 --n-cpu-moe 4 -mg 1 (exit %d):\n%s", rc, out);
    /* a layer split over two GPUs (-sm layer -ts 1,3): GPU entry i of 41 (40 layers, the head) on CUDA0 while
     * i / 41 < 1/4, so layers 0-10 there, the rest and the head on CUDA1 */
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 99 -sm layer -ts 1,3 --dry-run-mem 24G,24G", path35);
    rc = run(args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "split mode layer") && strstr(out, "layers 0-10 ") && strstr(out, "layers 11-39") &&
                strstr(out, "CUDA1"),
            "llm-run --dry-run -sm layer -ts 1,3 (exit %d):\n%s", rc, out);
    /* tensor parallelism over two stated GPUs: the degree, the group as the trunk's home, a memory row per device */
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 99 -sm tensor --dry-run-mem 24G,24G", path35);
    rc = run(args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "split mode tensor, tensor parallel 2 (CUDA0+CUDA1)") &&
                strstr(out, "layers 0-39                CUDA0+CUDA1 (shards)") && strstr(out, "\n  CUDA1 ") &&
                strstr(out, "note: tensor parallelism over CUDA0+CUDA1"),
            "llm-run --dry-run -sm tensor (exit %d):\n%s", rc, out);
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 3 -sm tensor --dry-run-mem 24G,24G", path35);
    rc = run(args, out, sizeof out);
    const char *nl = strchr(out, '\n');
    T_CHECK(rc == 1 && strstr(out, "split_mode tensor puts every layer on every device") &&
                strstr(out, "n_gpu_layers 3") && nl && !strchr(nl + 1, '\n'),
            "llm-run --dry-run -sm tensor -ngl 3: one line, the load's (exit %d):\n%s", rc, out);
    /* a layer split loads: the plan says so */
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 20 --dry-run-mem 24G", path35);
    rc = run(args, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "layers 0-19 ") && strstr(out, "layers 20-39") && strstr(out, "it loads and runs") &&
                !strstr(out, "not supported"),
            "llm-run --dry-run -ngl 20 (exit %d):\n%s", rc, out);
    snprintf(args, sizeof args, "-m %s --dry-run --dry-run-mem 12X", path35);
    T_CHECK(run(args, out, sizeof out) == 2 && strstr(out, "is not a memory size"), "--dry-run-mem 12X: %s", out);
    snprintf(args, sizeof args, "-m %s --dry-run --fit maybe", path35);
    T_CHECK(run(args, out, sizeof out) == 2 && strstr(out, "is not on or off"), "--fit maybe: %s", out);
    snprintf(args, sizeof args, "-m %s --dry-run -ngl 99 -mg 3 --dry-run-mem 12G", path35);
    T_CHECK(run(args, out, sizeof out) == 1 && strstr(out, "main_gpu 3"), "-mg 3 of 1 stated device: %s", out);
    T_CHECK(run("--help", out, sizeof out) == 0 && strstr(out, "--dry-run-mem") && strstr(out, "--n-cpu-moe"),
            "llm-run --help names the placement flags");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test-plan-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    const char *p35 = tmp_path("q35-35b-a3b.gguf"), *p27 = tmp_path("q35-27b.gguf"), *small = tmp_path("small.gguf");
    T_CHECK(synth("qwen35-35b-a3b", NULL, 0, p35) == INFER_OK, "synth 35B: %s", infer_last_error());
    T_CHECK(synth("qwen35-27b", NULL, 0, p27) == INFER_OK, "synth 27B: %s", infer_last_error());
    T_CHECK(synth(NULL, "qwen35moe", 1, small) == INFER_OK, "synth small: %s", infer_last_error());
    test_35b(p35);
    test_27b(p27);
    test_semantics(small);
    test_errors(small);
    test_tp(small);
    /* equality on small models of each family: plain, q8_0 cells with 3 sequences and MTP drafting */
    const char *archs[] = {"llama", "qwen3moe", "qwen35", "qwen35moe"};
    infer_ctx_params cp = infer_ctx_params_default(), draft = infer_ctx_params_default();
    cp.n_ctx = 700;
    cp.n_batch = 48;
    draft.n_ctx = 300;
    draft.n_seq = 3;
    draft.kv_type = INFER_TYPE_Q8_0;
    draft.n_draft = 2;
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        const char *path = tmp_path("eq.gguf");
        T_CHECK(synth(NULL, archs[i], 0, path) == INFER_OK, "synth %s", archs[i]);
        test_scratch_equality(path, archs[i], &cp);
        test_scratch_equality_device(path, archs[i], &cp);
        test_scratch_equality_placed(path, archs[i], 1, 0, &cp);
        if (strstr(archs[i], "moe")) test_scratch_equality_placed(path, archs[i], 99, 2, &cp);
        if (strstr(archs[i], "moe")) test_scratch_equality_placed(path, archs[i], 3, 99, &cp);
    }
    test_scratch_equality(small, "qwen35moe + MTP drafting", &draft);
    draft.n_draft = 0;
    test_scratch_equality_device(small, "qwen35moe, 3 sequences, q8_0", &draft);
    test_overhead_measured(small);
    test_scratch_equality_placed(small, "qwen35moe + MTP block, 3 sequences, q8_0", 2, 0, &draft);
    test_scratch_equality_placed(small, "qwen35moe + MTP block, 3 sequences, q8_0", 4, 0, &draft);
    test_dry_run(p35);
    unlink(p35);
    unlink(p27);
    unlink(small);
    unlink(tmp_path("eq.gguf"));
    rmdir(tmpdir);
    return t_done();
}
