/* test-repack: load-time repacking (lib/model_repack.c, lib/cpu/mm_r16.c) as a user meets it.
 *
 * Each model is loaded twice, repacked (the default) and as stored (no_repack), and both run the same batches: a
 * 20-token prompt with every row's logits (more than 8 tokens: the GEMMs of mm_kq.c, mm_q32.c, mm_iq.c reading
 * strips), three single tokens (the strips' one-token product), a 3-token batch (two sweeps of the strips) and,
 * with an MTP layer, the MTP head's drafts through infer_spec_step. The logits must agree bit for bit (the repacked
 * kernels add the same exact integers and take the same f32 steps as the dots; below AVX-512 within a bound, see
 * check). On a CPU with AVX-512 VNNI the
 * model must have repacked exactly the matrices the host multiplies of the repacked types (with AVX2 only, or
 * INFER_CPU_ISA=avx2, those of Q4_K, Q5_K, IQ4_XS, Q4_0, Q4_1, IQ4_NL, MXFP4: mm_r16_avx2.c): every 2-D Q2_K / Q3_K /
 * Q4_K / Q5_K / Q6_K / IQ4_XS tensor and every 2-D tensor of a 32-value type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * MXFP4) whose rows are whole pairs of blocks, except the token tables, and every routed-expert tensor of those types
 * whose experts are whole strips of 16 rows (counted here from the file's names, not by model_repack's slot list);
 * without AVX2 a SKIP. The MoE files' prompts run the experts' grouped prefill through
 * strips, their single tokens the strips' one-token product per selected expert.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/synth.h"
#include "cpu/cpu.h"
#include "model.h"
#include "t.h"

/* What the test expects repacked: a repacked type (rows of whole 256-value blocks; the 32-value types' rows a multiple
 * of 64 values), 2-D and not a token table (the tied head is the token table: it is repacked as the head), or routed
 * experts of whole strips. */
static int64_t expected_repacked(const struct infer_model *m) {
    int64_t n = 0;
    for (int64_t i = 0; i < m->gguf->n_tensors; i++) {
        const struct gguf_tensor *t = &m->gguf->tensors[i];
        /* below AVX-512 VNNI (mm_r16_avx2.c) only the types whose strips beat AVX2's dots */
        const int avx512 = cpu_isa_has(CPU_ISA_AVX512);
        const int kq = t->type == INFER_TYPE_Q4_K || t->type == INFER_TYPE_Q5_K || t->type == INFER_TYPE_IQ4_XS ||
                       (avx512 && (t->type == INFER_TYPE_Q2_K || t->type == INFER_TYPE_Q3_K || t->type == INFER_TYPE_Q6_K));
        const int q32 = t->type == INFER_TYPE_Q4_0 || t->type == INFER_TYPE_Q4_1 || t->type == INFER_TYPE_IQ4_NL ||
                        t->type == INFER_TYPE_MXFP4 ||
                        (avx512 && (t->type == INFER_TYPE_Q8_0 || t->type == INFER_TYPE_Q5_0 || t->type == INFER_TYPE_Q5_1));
        const int typed = (kq && t->ne[0] % 256 == 0) || (q32 && t->ne[0] % 64 == 0);
        const int table = strstr(t->name, "token_embd") || strstr(t->name, "embed_tokens");
        const int experts = strstr(t->name, "_exps") != NULL; /* whole strips of 16 rows per expert */
        if (typed && experts && t->ne[1] % 16 == 0) n++;
        if (typed && t->ne[2] == 1 && !experts && (!table || (m->tied && !strcmp(t->name, "token_embd.weight")))) n++;
    }
    return n;
}

/* logits of every asked row of the batch, appended to out (n_vocab floats each) */
static int run_batch(infer_ctx *c, const int32_t *tok, int32_t n, int all, float *out, int32_t n_vocab) {
    int8_t ask[32];
    for (int32_t i = 0; i < n; i++) ask[i] = (int8_t)(all || i == n - 1);
    infer_batch b = {.n_tokens = n, .token = tok, .logits = ask};
    if (infer_decode(c, &b) != INFER_OK) return -1;
    int rows = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!ask[i]) continue;
        const float *l = infer_logits(c, i);
        if (!l) return -1;
        memcpy(out + (size_t)rows * (size_t)n_vocab, l, sizeof(float) * (size_t)n_vocab);
        rows++;
    }
    return rows;
}

/* The logits of the whole script on a model loaded with no_repack; *rows: how many vectors. NULL on failure. */
static float *run_script(const char *path, int no_repack, int64_t *n_repacked, int64_t *expected, int *rows) {
    infer_model_params mp = infer_model_params_default();
    mp.no_repack = no_repack;
    infer_model *m = NULL;
    if (infer_model_load(path, &mp, &m) != INFER_OK) return NULL;
    *n_repacked = m->n_repacked;
    *expected = expected_repacked(m);
    const int32_t nv = infer_vocab_size(m);
    infer_ctx_params cp = infer_ctx_params_default();
    cp.n_ctx = 128;
    cp.n_threads = 2;
    infer_ctx *c = NULL;
    float *out = malloc(sizeof(float) * (size_t)nv * 40);
    int r = 0, k;
    if (!out || infer_ctx_create(m, &cp, &c) != INFER_OK) goto fail;
    int32_t prompt[20], one, three[3];
    for (int i = 0; i < 20; i++) prompt[i] = (7 * i + 3) % nv;
    if ((k = run_batch(c, prompt, 20, 1, out, nv)) < 0) goto fail;
    r += k;
    for (int i = 0; i < 3; i++) {
        one = (11 * i + 5) % nv;
        if ((k = run_batch(c, &one, 1, 1, out + (size_t)r * (size_t)nv, nv)) < 0) goto fail;
        r += k;
    }
    for (int i = 0; i < 3; i++) three[i] = (13 * i + 2) % nv;
    if ((k = run_batch(c, three, 3, 1, out + (size_t)r * (size_t)nv, nv)) < 0) goto fail;
    r += k;
    *rows = r;
    infer_ctx_free(c);
    infer_model_free(m);
    return out;
fail:
    T_CHECK(0, "%s (no_repack %d): %s", path, no_repack, infer_last_error());
    free(out);
    infer_ctx_free(c);
    infer_model_free(m);
    return NULL;
}

/* With an MTP layer: greedy speculative decoding gives the same tokens and acceptance either way. */
static void check_mtp(const char *path) {
    int32_t toks[2][24];
    int32_t n[2] = {0, 0};
    for (int nr = 0; nr < 2; nr++) {
        infer_model_params mp = infer_model_params_default();
        mp.no_repack = nr;
        infer_model *m = NULL;
        infer_ctx *c = NULL;
        infer_ctx_params cp = infer_ctx_params_default();
        cp.n_ctx = 128;
        cp.n_threads = 2;
        cp.n_draft = 3;
        T_CHECK(infer_model_load(path, &mp, &m) == INFER_OK && infer_ctx_create(m, &cp, &c) == INFER_OK, "mtp load: %s",
                infer_last_error());
        infer_sampler_params sp = infer_sampler_params_default();
        sp.temp = 0; /* greedy */
        infer_sampler *s = NULL;
        if (!c || infer_sampler_create(&sp, infer_vocab_size(m), &s) != INFER_OK) {
            infer_ctx_free(c);
            infer_model_free(m);
            return;
        }
        int32_t prompt[6] = {3, 9, 27, 81, 243, 100};
        infer_batch b = {.n_tokens = 6, .token = prompt};
        T_CHECK(infer_decode(c, &b) == INFER_OK, "mtp prompt: %s", infer_last_error());
        int32_t last = 0;
        const float *l = infer_logits(c, -1);
        for (int32_t v = 1; l && v < infer_vocab_size(m); v++)
            if (l[v] > l[last]) last = v;
        while (n[nr] < 20) {
            int32_t out[INFER_MAX_DRAFT + 1];
            int32_t got = 0;
            if (infer_spec_step(c, s, 0, last, out, INFER_MAX_DRAFT + 1, &got) != INFER_OK || got < 1) break;
            for (int32_t i = 0; i < got && n[nr] < 24; i++) toks[nr][n[nr]++] = out[i];
            last = out[got - 1];
        }
        infer_sampler_free(s);
        infer_ctx_free(c);
        infer_model_free(m);
    }
    T_CHECK(n[0] >= 20 && n[0] == n[1] && !memcmp(toks[0], toks[1], sizeof(int32_t) * (size_t)n[0]),
            "%s: MTP greedy streams differ repacked / as stored (%d, %d tokens)", path, n[0], n[1]);
}

static void check(const char *dir, const char *arch, const char *ftype, int random_blocks, int tied, int mtp) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s-%s.gguf", dir, arch, ftype);
    struct synth_params sp;
    T_CHECK(synth_params_default(arch, &sp) == INFER_OK, "defaults %s", arch);
    sp.ftype = ftype;
    sp.random_blocks = random_blocks;
    sp.tied = tied;
    sp.mtp = mtp;
    sp.seed = 7;
    T_CHECK(synth_write(&sp, path) == INFER_OK, "synth %s: %s", path, infer_last_error());
    int64_t nr[2], ex[2];
    int rows[2] = {0, 0};
    float *a = run_script(path, 0, &nr[0], &ex[0], &rows[0]);
    float *b = run_script(path, 1, &nr[1], &ex[1], &rows[1]);
    if (a && b) {
        /* Bit for bit on AVX-512 VNNI, where the dots as stored keep the scalar reference's f32 steps as the strips
         * do. Below it the strips still do (the same bits as the AVX-512 and scalar levels: test-ops checks each
         * product), but AVX2's dots as stored sum their f32 terms in vector lanes, and these small random models
         * amplify that rounding (measured: relative L2 up to 1.1e-2 per row, qwen3 Q4_0): there each row within
         * 5e-2, which a wrong strip kernel exceeds many times. */
        const size_t n = (size_t)rows[0] * (size_t)sp.n_vocab;
        size_t at = n;
        if (cpu_isa_has(CPU_ISA_AVX512)) {
            for (size_t i = 0; i < n && at == n; i++)
                if (memcmp(&a[i], &b[i], sizeof(float))) at = i;
        } else {
            for (size_t r = 0; r < (size_t)rows[0] && at == n; r++) {
                const float *ra = a + r * (size_t)sp.n_vocab, *rb = b + r * (size_t)sp.n_vocab;
                double num = 0, den = 0;
                for (int32_t v = 0; v < sp.n_vocab; v++) num += (ra[v] - rb[v]) * (ra[v] - rb[v]), den += rb[v] * rb[v];
                if (!(sqrt(num / (den > 0 ? den : 1)) <= 5e-2)) at = r * (size_t)sp.n_vocab;
            }
        }
        T_CHECK(rows[0] == 26 && rows[0] == rows[1] && at == n, "%s: logits repacked vs as stored differ at %zu of %zu "
                "(%.9g vs %.9g, %s)", path, at, n, at < n ? a[at] : 0.0, at < n ? b[at] : 0.0, cpu_isa());
        T_CHECK(nr[1] == 0, "%s: no_repack still repacked %lld matrices", path, (long long)nr[1]);
        T_CHECK(nr[0] == ex[0] && (ex[0] > 0 || !cpu_isa_has(CPU_ISA_AVX512)), "%s: %lld matrices repacked, expected %lld "
                "(%s)", path, (long long)nr[0], (long long)ex[0], cpu_isa());
    }
    free(a);
    free(b);
    if (mtp) check_mtp(path);
    unlink(path);
}

int main(void) {
    char dir[] = "/tmp/test-repack-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    if (!cpu_isa_has(CPU_ISA_AVX2)) T_SKIP("this CPU (or INFER_CPU_ISA) lacks AVX2: nothing is repacked");
    printf("CPU level: %s\n", cpu_isa());
    check(dir, "qwen3", "Q4_K_M", 0, 1, 0);    /* Q4_K and Q6_K, the head tied to the token table */
    check(dir, "qwen3", "Q8_0", 0, 0, 0);      /* Q8_0 */
    check(dir, "llama", "Q3_K_L", 0, 0, 0);    /* Q3_K, Q5_K (attn_v, ffn_down), an own Q6_K head */
    check(dir, "qwen35", "Q2_K", 0, 0, 0);     /* Q2_K (and Q3_K, Q4_K where llama-quantize's rules put them) */
    check(dir, "qwen35", "Q4_K_M", 0, 0, 1);   /* Gated DeltaNet projections, the MTP layer and its drafts */
    check(dir, "qwen35moe", "IQ4_XS", 1, 0, 0); /* IQ4_XS, the shared expert, the routed experts */
    check(dir, "qwen3", "Q4_0", 0, 0, 0);      /* Q4_0 (and Q4_1, Q6_K where llama-quantize's rules put them) */
    check(dir, "qwen35", "IQ4_NL", 0, 0, 0);   /* IQ4_NL, Gated DeltaNet */
    check(dir, "llama", "Q5_1", 0, 0, 0);      /* Q5_1 */
    check(dir, "llama", "Q4_1", 0, 0, 0);      /* Q4_1 */
    check(dir, "qwen3", "Q5_0", 0, 0, 0);      /* Q5_0 */
    check(dir, "qwen35moe", "MXFP4_MOE", 1, 0, 0); /* MXFP4 experts; the rest Q8_0 */
    check(dir, "qwen35moe", "Q4_K_M", 0, 0, 1);    /* Q4_K / Q6_K experts, the MTP layer's experts and its drafts */
    rmdir(dir);
    return t_done();
}
