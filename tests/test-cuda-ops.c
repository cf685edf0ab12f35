/* test-cuda-ops: the CUDA norm, act and rope kernels against their CPU twins (lib/cpu, run with a NULL
 * pool on the same inputs; test-ops checks those against float64), and the CUDA backend's memory and
 * op table.
 *
 * Every case builds whole buffers (rows with their stride gaps) that start identical on both sides,
 * outputs poisoned with NaN; elements an op must write are compared with a per-op tolerance, all
 * others must come back bit-identical (nothing written outside the rows). Tolerances, relative to the
 * CPU value: norm 1e-5 (the GPU sums squares in float, the CPU in double), act elementwise 2e-6
 * (CUDA expf is 2 ulp against libm's ~0.5: at worst ~6 ulp apart after the divide and product) and
 * ADD exact, softmax 1e-5 (float sum) plus 1e-12 absolute, rope 1e-5 of the pair's |x0| + |x1|
 * (sincosf against libm, the same angles). A host port of the kernels' float reductions stays
 * within 1/30 of the norm and softmax bounds.
 * Shapes: 1 and many rows (beyond the 65535 grid limit), odd and aligned n, both norm paths (warp
 * and block per row), strided rows, y == x (and y == x2) where the contract allows it.
 * The fused forms (norm_q, rope_norm) must equal the unfused pair on the device bit for bit: norm then
 * quantize for norm_q (both paths, y == x), norm then rope for rope_norm (NeoX and normal, partial
 * rotation, the gated query read from (query, gate) pairs, in place for k).
 * Launcher refusals (bad shapes return cudaErrorInvalidValue before touching the device) and
 * backend_cuda_create's error without a device run everywhere; the rest prints SKIP (no CUDA device),
 * and the test then exits 77 (skipped) unless a host check failed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu.h"
#include "device.h"
#include "kernels.h"
#include "quant.h"
#include "t.h"

/* Runs everywhere: the error of backend_cuda_create on a machine (or build) without a device. */
static void check_create_without_device(void) {
    struct infer_backend *b = (struct infer_backend *)&b; /* not NULL: create must clear it */
    infer_status st = backend_cuda_create(0, &b);
#ifdef INFER_CUDA
    const infer_status want = INFER_E_DEVICE;
#else
    const infer_status want = INFER_E_UNSUPPORTED;
#endif
    const char *msg = infer_last_error();
    T_CHECK(st == want && b == NULL && msg && strstr(msg, "cuda backend"),
            "backend_cuda_create without a device: status %d (want %d), out %p, message '%s'", st, want, (void *)b,
            msg ? msg : "(null)");
}

#ifdef INFER_CUDA
#include <cuda_runtime_api.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f; }
static void fill(float *p, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) p[i] = frand(lo, hi) * (rnd() % 61 == 0 ? 10.0f : 1.0f);
}
static void fill_nan(float *p, size_t n) { memset(p, 0xFF, n * sizeof *p); }

/* tol[j] >= 0: |got - want| <= tol[j]; tol[j] < 0: got must be bit-identical to want (untouched). */
static void check_close(const char *what, const float *got, const float *want, const double *tol, size_t total) {
    size_t bad = 0, first = 0;
    for (size_t j = 0; j < total; j++) {
        int ok = tol[j] < 0 ? memcmp(&got[j], &want[j], sizeof(float)) == 0
                            : fabs((double)got[j] - (double)want[j]) <= tol[j];
        if (!ok && bad++ == 0) first = j;
    }
    T_CHECK(bad == 0, "%s: %zu of %zu elements off (first at %zu: got %.9g, want %.9g, tol %g)", what, bad, total, first,
            bad ? (double)got[first] : 0.0, bad ? (double)want[first] : 0.0, bad ? tol[first] : 0.0);
}

#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudaError_t ck_ = (x);                                                                               \
        T_CHECK(ck_ == cudaSuccess, "%s: %s", #x, cudaGetErrorString(ck_));                                  \
    } while (0)

static void *dev_from(const void *h, size_t bytes) {
    void *d = NULL;
    CK(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes) CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void host_from(void *h, const void *d, size_t bytes) { CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost)); }

/* ---- launcher refusals: checked before any CUDA call, so they need no device ---- */
static void check_refusals(void) {
    float buf[64] = {0};
    int32_t pos[2] = {0, 1};
    struct norm_args n = {buf, NULL, buf, 8, 2, 8, 8, 1e-6f, NULL, 0};
    n.n = 0;
    T_CHECK(cuda_norm(&n, 0) == cudaErrorInvalidValue, "norm n = 0 is refused");
    n.n = 8, n.x_stride = 7;
    T_CHECK(cuda_norm(&n, 0) == cudaErrorInvalidValue, "norm x_stride < n is refused");
    n.x_stride = 8, n.gate = buf, n.gate_stride = 4;
    T_CHECK(cuda_norm(&n, 0) == cudaErrorInvalidValue, "norm gate_stride < n is refused");
    n.gate = NULL, n.eps = -1.0f;
    T_CHECK(cuda_norm(&n, 0) == cudaErrorInvalidValue, "norm eps < 0 is refused");

    struct act_args a = {6, buf, buf + 32, buf, 8, 2, 1.0f, 0};
    T_CHECK(cuda_act(&a, 0) == cudaErrorInvalidValue, "act op 6 is refused");
    a.op = ACT_SWIGLU, a.x2 = NULL;
    T_CHECK(cuda_act(&a, 0) == cudaErrorInvalidValue, "act SWIGLU without x2 is refused");
    a.x2 = buf + 32, a.x2_stride = 4;
    T_CHECK(cuda_act(&a, 0) == cudaErrorInvalidValue, "act x2_stride < n is refused");
    a.op = ACT_SIGMOID_MUL_ROW, a.x2 = buf + 8, a.x2_stride = 1; /* the gates lie inside y */
    T_CHECK(cuda_act(&a, 0) == cudaErrorInvalidValue, "act SIGMOID_MUL_ROW with gates inside y is refused");

    struct rope_args r = {buf, pos, 2, 1, 8, 5, 8, 8, ROPE_NORMAL, 10000.0f, 1.0f};
    T_CHECK(cuda_rope(&r, 0) == cudaErrorInvalidValue, "rope odd n_rot is refused");
    r.n_rot = 10;
    T_CHECK(cuda_rope(&r, 0) == cudaErrorInvalidValue, "rope n_rot > head_dim is refused");
    r.n_rot = 8, r.mode = 1;
    T_CHECK(cuda_rope(&r, 0) == cudaErrorInvalidValue, "rope mode 1 is refused");

    uint8_t cells[4 * 34];
    struct kv_store_args kv = {buf, cells, pos, 40, 40, 64, 1, INFER_TYPE_Q8_0, 0};
    T_CHECK(cuda_kv_store(&kv, 0) == cudaErrorInvalidValue, "kv_store Q8_0 with row 40 (not whole blocks) is refused");
    kv.row = 32, kv.x_stride = 32, kv.cell_stride = 40;
    T_CHECK(cuda_kv_store(&kv, 0) == cudaErrorInvalidValue, "kv_store Q8_0 with cell_stride 40 is refused");
    kv.cell_stride = 32, kv.rot = 64;
    T_CHECK(cuda_kv_store(&kv, 0) == cudaErrorInvalidValue, "kv_store Q8_0 rot 64 over rows of 32 is refused");
    kv.rot = 0, kv.type = INFER_TYPE_F32;
    T_CHECK(cuda_kv_store(&kv, 0) == cudaErrorInvalidValue, "kv_store into f32 cells is refused");
    struct norm_q_args nq = {{buf, NULL, buf, 40, 1, 40, 40, 1e-6f, NULL, 0}, INFER_TYPE_Q8_1, buf};
    T_CHECK(cuda_norm_q(&nq, 0) == cudaErrorInvalidValue, "norm_q n not a multiple of 32 is refused");
    nq.norm.n = nq.norm.x_stride = nq.norm.y_stride = 32, nq.q_type = INFER_TYPE_Q8_0;
    T_CHECK(cuda_norm_q(&nq, 0) == cudaErrorInvalidValue, "norm_q q_type Q8_0 is refused");
    struct rope_norm_args rn = {{buf, pos, 2, 1, 8, 8, 8, 8, ROPE_NEOX, 1e4f, 1.0f}, buf, 8, 8, NULL, 1e-6f};
    T_CHECK(cuda_rope_norm(&rn, 0) == cudaErrorInvalidValue, "rope_norm without a weight is refused");
}

/* ---- norm ---- */
struct norm_case {
    int64_t n;
    int32_t rows;
    int64_t xpad, ypad, gpad; /* stride - n */
    int weight, gated, alias; /* alias: y is x (ypad ignored) */
};

static void run_norm(const struct norm_case *c) {
    const int64_t xs = c->n + c->xpad, ys = c->alias ? xs : c->n + c->ypad, gs = c->n + c->gpad;
    const size_t xt = (size_t)(xs * c->rows), yt = (size_t)(ys * c->rows), gt = (size_t)(gs * c->rows);
    float *x = malloc(xt * 4), *w = malloc((size_t)c->n * 4), *g = malloc(gt * 4), *y = malloc(yt * 4), *yd = malloc(yt * 4);
    double *tol = malloc(yt * sizeof *tol);
    fill(x, xt, -3, 3);
    fill(w, (size_t)c->n, -1.5f, 1.5f);
    fill(g, gt, -6, 6);
    fill_nan(y, yt);
    float *dx = dev_from(x, xt * 4), *dw = dev_from(w, (size_t)c->n * 4), *dg = dev_from(g, gt * 4);
    float *dy = c->alias ? dx : dev_from(y, yt * 4);
    struct norm_args a = {dx, c->weight ? dw : NULL, dy, c->n, c->rows, xs, ys, 1e-6f, c->gated ? dg : NULL, gs};
    CK(cuda_norm(&a, 0));
    CK(cudaDeviceSynchronize());
    host_from(yd, dy, yt * 4);

    float *yc = c->alias ? x : y;
    a.x = x, a.w = c->weight ? w : NULL, a.y = yc, a.gate = c->gated ? g : NULL;
    T_CHECK(cpu_norm(&a, NULL) == INFER_OK, "cpu_norm: %s", infer_last_error());
    for (size_t j = 0; j < yt; j++) tol[j] = (int64_t)(j % (size_t)ys) < c->n ? 1e-5 * fabs((double)yc[j]) + 1e-12 : -1;
    char what[160];
    snprintf(what, sizeof what, "norm n=%lld rows=%d pads %lld/%lld/%lld weight=%d gated=%d alias=%d", (long long)c->n,
             c->rows, (long long)c->xpad, (long long)c->ypad, (long long)c->gpad, c->weight, c->gated, c->alias);
    check_close(what, yd, yc, tol, yt);
    cudaFree(dx), cudaFree(dw), cudaFree(dg);
    if (!c->alias) cudaFree(dy);
    free(x), free(w), free(g), free(y), free(yd), free(tol);
}

/* ---- act ---- */
struct act_case {
    int32_t op;
    int64_t n;
    int32_t rows;
    int64_t x2_stride;
    int alias; /* 0 none, 1 y is x, 2 y is x2 (x2_stride 0 or n) */
    float scale;
};

static void run_act(const struct act_case *c) {
    const int64_t s2 = c->x2_stride ? c->x2_stride : c->n;
    const size_t xt = (size_t)(c->n * c->rows), x2t = (size_t)(s2 * c->rows);
    float *x = malloc(xt * 4), *x2 = malloc(x2t * 4), *y = malloc(xt * 4), *yd = malloc((xt > x2t ? xt : x2t) * 4);
    if (c->op == ACT_SOFTMAX) fill(x, xt, -100, 100); /* exp(scale * x) overflows without the max subtraction */
    else fill(x, xt, -8, 8);
    fill(x2, x2t, -8, 8);
    fill_nan(y, xt);
    float *dx = dev_from(x, xt * 4), *dx2 = dev_from(x2, x2t * 4);
    float *dy = c->alias == 1 ? dx : c->alias == 2 ? dx2 : dev_from(y, xt * 4);
    const int two = c->op != ACT_SILU && c->op != ACT_SOFTMAX;
    struct act_args a = {c->op, dx, two ? dx2 : NULL, dy, c->n, c->rows, c->scale, c->x2_stride};
    CK(cuda_act(&a, 0));
    CK(cudaDeviceSynchronize());
    /* the whole output buffer: y, or x2 with its stride gaps when y is x2 */
    const size_t ot = c->alias == 2 ? x2t : xt;
    host_from(yd, dy, ot * 4);

    float *yc = c->alias == 1 ? x : c->alias == 2 ? x2 : y;
    a.x = x, a.x2 = two ? x2 : NULL, a.y = yc;
    T_CHECK(cpu_act(&a, NULL) == INFER_OK, "cpu_act: %s", infer_last_error());
    double *tol = malloc(ot * sizeof *tol);
    for (size_t j = 0; j < ot; j++) {
        const double v = fabs((double)yc[j]);
        tol[j] = c->op == ACT_ADD ? 0 : c->op == ACT_SOFTMAX ? 1e-5 * v + 1e-12 : 2e-6 * v + 1e-30;
    }
    char what[160];
    snprintf(what, sizeof what, "act op=%d n=%lld rows=%d x2_stride=%lld alias=%d scale=%g", c->op, (long long)c->n,
             c->rows, (long long)c->x2_stride, c->alias, (double)c->scale);
    check_close(what, yd, yc, tol, ot);
    cudaFree(dx), cudaFree(dx2);
    if (!c->alias) cudaFree(dy);
    free(x), free(x2), free(y), free(yd), free(tol);
}

/* ---- rope ---- */
struct rope_case {
    int32_t mode, n_tokens, n_head, head_dim, n_rot;
    int64_t tpad, hpad; /* token_stride = n_head * head_stride + tpad, head_stride = head_dim + hpad */
    float freq_base, freq_scale;
    int32_t max_pos;
};

static void run_rope(const struct rope_case *c) {
    const int64_t hs = c->head_dim + c->hpad, ts = c->n_head * hs + c->tpad, total = ts * c->n_tokens;
    float *x = malloc((size_t)total * 4), *x0 = malloc((size_t)total * 4), *xd = malloc((size_t)total * 4);
    int32_t *pos = malloc((size_t)c->n_tokens * 4);
    double *tol = malloc((size_t)total * sizeof *tol);
    fill_nan(x, (size_t)total); /* the gaps between heads and tokens stay NaN */
    for (int64_t j = 0; j < total; j++) tol[j] = -1;
    for (int t = 0; t < c->n_tokens; t++) {
        pos[t] = t == 0 ? 0 : (int32_t)(rnd() % (uint32_t)c->max_pos);
        for (int h = 0; h < c->n_head; h++)
            for (int i = 0; i < c->head_dim; i++) x[t * ts + h * hs + i] = frand(-2, 2);
    }
    memcpy(x0, x, (size_t)total * 4);
    const int half = c->n_rot / 2;
    for (int t = 0; t < c->n_tokens; t++)
        for (int h = 0; h < c->n_head; h++)
            for (int i = 0; i < half; i++) {
                const int64_t b = t * ts + h * hs;
                const int64_t i0 = b + (c->mode == ROPE_NEOX ? i : 2 * i), i1 = b + (c->mode == ROPE_NEOX ? i + half : 2 * i + 1);
                tol[i0] = tol[i1] = 1e-5 * (fabs((double)x[i0]) + fabs((double)x[i1])) + 1e-30;
            }
    float *dx = dev_from(x, (size_t)total * 4);
    int32_t *dpos = dev_from(pos, (size_t)c->n_tokens * 4);
    struct rope_args a = {dx, dpos, c->n_tokens, c->n_head, c->head_dim, c->n_rot, ts, hs, c->mode, c->freq_base, c->freq_scale};
    CK(cuda_rope(&a, 0));
    CK(cudaDeviceSynchronize());
    host_from(xd, dx, (size_t)total * 4);
    a.x = x, a.pos = pos;
    T_CHECK(cpu_rope(&a, NULL) == INFER_OK, "cpu_rope: %s", infer_last_error());
    char what[192];
    snprintf(what, sizeof what, "rope mode=%d tokens=%d heads=%d head_dim=%d n_rot=%d pads %lld/%lld base=%g scale=%g",
             c->mode, c->n_tokens, c->n_head, c->head_dim, c->n_rot, (long long)c->tpad, (long long)c->hpad,
             (double)c->freq_base, (double)c->freq_scale);
    check_close(what, xd, x, tol, (size_t)total);
    /* and it did rotate: some rotated value moved (pos > 0 somewhere) */
    int moved = 0;
    for (int64_t j = 0; j < total && !moved; j++) moved = tol[j] >= 0 && xd[j] != x0[j];
    T_CHECK(moved || c->n_tokens == 1, "%s: nothing rotated", what);
    cudaFree(dx), cudaFree(dpos);
    free(x), free(x0), free(xd), free(pos), free(tol);
}

/* ---- embed and kv_store: bit-identical to the CPU twins (both decode with blocks.h / round to
 * nearest-even halves) ---- */
static void run_embed(int32_t type) {
    enum { N_EMBD = 512, N_ROWS = 33, N_TOK = 9 };
    const size_t rb = quant_row_bytes(type, N_EMBD);
    uint8_t *table = malloc(rb * N_ROWS);
    float row[N_EMBD];
    int ok = rb > 0;
    for (int r = 0; ok && r < N_ROWS; r++) {
        fill(row, N_EMBD, -1, 1);
        ok = quant_quantize_row(type, row, table + (size_t)r * rb, N_EMBD) == INFER_OK;
    }
    if (!ok) {
        T_CHECK(0, "embed %s: quantising the table: %s", infer_type_name(type), infer_last_error());
        free(table);
        return;
    }
    int32_t ids[N_TOK];
    for (int t = 0; t < N_TOK; t++) ids[t] = (int32_t)(rnd() % N_ROWS);
    ids[0] = N_ROWS - 1;
    float *want = malloc(sizeof(float) * N_EMBD * N_TOK), *got = malloc(sizeof(float) * N_EMBD * N_TOK);
    fill_nan(got, (size_t)N_EMBD * N_TOK);
    struct embed_args a = {type, table, N_EMBD, N_ROWS, ids, N_TOK, want};
    T_CHECK(cpu_embed(&a, NULL) == INFER_OK, "cpu_embed: %s", infer_last_error());
    a.table = dev_from(table, rb * N_ROWS), a.ids = dev_from(ids, sizeof ids);
    a.y = dev_from(got, sizeof(float) * N_EMBD * N_TOK);
    CK(cuda_embed(&a, 0));
    CK(cudaDeviceSynchronize());
    host_from(got, a.y, sizeof(float) * N_EMBD * N_TOK);
    T_CHECK(!memcmp(got, want, sizeof(float) * N_EMBD * N_TOK), "embed %s: rows bit-identical to cpu_embed",
            infer_type_name(type));
    cudaFree((void *)a.table), cudaFree((void *)a.ids), cudaFree(a.y);
    free(table), free(want), free(got);
}

/* Q8_0 cells: one warp per block on the GPU, the same arithmetic as the CPU (and the same Hadamard
 * butterflies in the same order with rot), so bit-identical too (rows of 512 values = 16 blocks, cells
 * 544 values apart, inputs past the f16 range) */
static void run_kv_store_q8_0(int32_t rot) {
    enum { ROW = 512, STRIDE = 544, N_CELLS = 17, N_TOK = 5, CB = STRIDE / 32 * 34 };
    static float x[ROW * N_TOK];
    fill(x, ROW * N_TOK, -70000, 70000);
    for (int i = 0; i < 32; i++) x[64 + i] = 0.0f; /* an all-zero block: d = 0 */
    int32_t pos[N_TOK] = {3, 0, 16, 7, 8};
    uint8_t *want = malloc(CB * N_CELLS), *got = malloc(CB * N_CELLS);
    memset(want, 0xAB, CB * N_CELLS);
    struct kv_store_args a = {x, want, pos, ROW, ROW, STRIDE, N_TOK, INFER_TYPE_Q8_0, rot};
    T_CHECK(cpu_kv_store(&a, NULL) == INFER_OK, "cpu_kv_store: %s", infer_last_error());
    memset(got, 0xAB, CB * N_CELLS);
    a.x = dev_from(x, sizeof x), a.pos = dev_from(pos, sizeof pos), a.cells = dev_from(got, CB * N_CELLS);
    CK(cuda_kv_store(&a, 0));
    CK(cudaDeviceSynchronize());
    host_from(got, a.cells, CB * N_CELLS);
    T_CHECK(!memcmp(got, want, CB * N_CELLS), "kv_store q8_0 rot %d: cells bit-identical to cpu_kv_store, others "
            "untouched", rot);
    cudaFree((void *)a.x), cudaFree((void *)a.pos), cudaFree(a.cells);
    free(want), free(got);
}

static void run_kv_store(void) {
    enum { ROW = 520, STRIDE = 523, N_CELLS = 17, N_TOK = 5 };
    float x[ROW * N_TOK];
    fill(x, ROW * N_TOK, -70000, 70000); /* past the f16 range too */
    int32_t pos[N_TOK] = {3, 0, 16, 7, 8};
    uint16_t *want = malloc(2 * STRIDE * N_CELLS), *got = malloc(2 * STRIDE * N_CELLS);
    memset(want, 0xAB, 2 * STRIDE * N_CELLS);
    struct kv_store_args a = {x, want, pos, ROW, ROW, STRIDE, N_TOK, INFER_TYPE_F16, 0};
    T_CHECK(cpu_kv_store(&a, NULL) == INFER_OK, "cpu_kv_store: %s", infer_last_error());
    memset(got, 0xAB, 2 * STRIDE * N_CELLS);
    a.x = dev_from(x, sizeof x), a.pos = dev_from(pos, sizeof pos), a.cells = dev_from(got, 2 * STRIDE * N_CELLS);
    CK(cuda_kv_store(&a, 0));
    CK(cudaDeviceSynchronize());
    host_from(got, a.cells, 2 * STRIDE * N_CELLS);
    T_CHECK(!memcmp(got, want, 2 * STRIDE * N_CELLS), "kv_store: cells bit-identical to cpu_kv_store, others untouched");
    cudaFree((void *)a.x), cudaFree((void *)a.pos), cudaFree(a.cells);
    free(want), free(got);
}

/* ---- the backend: memory round trip, an op through the table, errors ---- */
static void run_backend(int n_dev) {
    struct infer_backend *b = NULL;
    infer_status st = backend_cuda_create(0, &b);
    T_CHECK(st == INFER_OK && b, "backend_cuda_create(0): %s", infer_last_error());
    if (!b) return;
    T_CHECK(strcmp(b->ops->name, "cuda") == 0 && b->ops->mm == NULL && b->ops->attn == NULL && b->ops->norm != NULL,
            "the cuda op table: name '%s', mm/attn not yet implemented, norm present", b->ops->name);
    T_CHECK(b->ops->mmv_act_type(INFER_TYPE_Q4_K) == INFER_TYPE_Q8_1 && b->ops->mmv_act_type(INFER_TYPE_F16) == -1,
            "cuda mmv_act_type pairs quantised weights with Q8_1, float weights with f32");

    enum { N = 4099 };
    float *h = malloc(N * 4), *back = malloc(N * 4), *want = malloc(N * 4);
    double *tol = malloc(N * sizeof *tol);
    fill(h, N, -3, 3);
    fill_nan(back, N);
    void *d = NULL, *d0 = NULL;
    T_CHECK(b->ops->alloc(b, N * 4, &d) == INFER_OK && d, "alloc %d bytes: %s", N * 4, infer_last_error());
    T_CHECK(b->ops->alloc(b, 0, &d0) == INFER_OK && d0, "alloc 0 bytes gives a pointer: %s", infer_last_error());
    if (d) {
        T_CHECK(b->ops->upload(b, d, h, N * 4) == INFER_OK, "upload: %s", infer_last_error());
        T_CHECK(b->ops->download(b, back, d, N * 4) == INFER_OK, "download: %s", infer_last_error());
        T_CHECK(memcmp(back, h, N * 4) == 0, "upload / download round trip is bit-exact");
        /* norm in place through the table (on the backend's stream), 1 row of 4096 + the rest as 3 */
        struct norm_args a = {d, NULL, d, 4096, 1, 4096, 4096, 1e-5f, NULL, 0};
        T_CHECK(b->ops->norm(b, &a) == INFER_OK, "norm through the table: %s", infer_last_error());
        T_CHECK(b->ops->sync(b) == INFER_OK, "sync: %s", infer_last_error());
        T_CHECK(b->ops->download(b, back, d, N * 4) == INFER_OK, "download: %s", infer_last_error());
        memcpy(want, h, N * 4);
        a.x = a.y = want;
        T_CHECK(cpu_norm(&a, NULL) == INFER_OK, "cpu_norm: %s", infer_last_error());
        for (int j = 0; j < N; j++) tol[j] = j < 4096 ? 1e-5 * fabs((double)want[j]) + 1e-12 : -1;
        check_close("backend norm", back, want, tol, N);
        /* a launcher refusal is INFER_E_UNSUPPORTED naming the op */
        struct act_args bad = {ACT_ADD, d, NULL, d, 16, 1, 0, 0};
        st = b->ops->act(b, &bad);
        T_CHECK(st == INFER_E_UNSUPPORTED && strstr(infer_last_error(), "act"), "ADD without x2: status %d, '%s'", st,
                infer_last_error());
    }
    /* out of device memory is INFER_E_OOM with the sizes, and leaves nothing sticky behind */
    void *huge = (void *)&huge;
    st = b->ops->alloc(b, (size_t)1 << 50, &huge);
    T_CHECK(st == INFER_E_OOM && huge == NULL && strstr(infer_last_error(), "free"), "1 PiB: status %d, '%s'", st,
            infer_last_error());
    if (d) {
        struct norm_args a = {d, NULL, d, 64, 1, 64, 64, 1e-5f, NULL, 0};
        T_CHECK(b->ops->norm(b, &a) == INFER_OK && b->ops->sync(b) == INFER_OK, "an op after the OOM still runs: %s",
                infer_last_error());
    }
    b->ops->free(b, d);
    b->ops->free(b, d0);
    b->ops->free(b, NULL);
    backend_free(b);
    backend_free(NULL);
    struct infer_backend *b2 = (struct infer_backend *)&b2;
    st = backend_cuda_create(n_dev, &b2);
    T_CHECK(st == INFER_E_ARG && b2 == NULL, "backend_cuda_create(%d) of %d devices: status %d", n_dev, n_dev, st);
    free(h), free(back), free(want), free(tol);
}

static const struct norm_case norm_cases[] = {
    /* n, rows, xpad, ypad, gpad, weight, gated, alias */
    {1, 1, 0, 0, 0, 1, 0, 0},      {7, 3, 0, 0, 0, 1, 0, 0},       {64, 37, 0, 0, 0, 1, 0, 1},     /* head norm in place */
    {128, 300, 128, 0, 0, 1, 0, 0}, /* q norm read from the (q, gate) pairs */
    {128, 64, 0, 0, 0, 1, 1, 1},    /* GDN gated output norm in place */
    {100, 9, 5, 3, 7, 1, 1, 0},     {1000, 5, 1, 2, 0, 0, 0, 0},    {1023, 2, 0, 0, 0, 1, 0, 0},
    {1024, 3, 0, 0, 0, 1, 0, 0},    /* the block-per-row path from here */
    {4096, 1, 0, 0, 0, 1, 0, 0},    {4096, 7, 0, 4096, 0, 1, 0, 0}, /* MTP: two norms into one (n, 2n) buffer */
    {5003, 4, 2, 1, 9, 1, 1, 0},    {8192, 2, 0, 0, 0, 1, 0, 1},    {5, 70001, 0, 0, 0, 1, 0, 0},
};

static const struct act_case act_cases[] = {
    /* op, n, rows, x2_stride, alias, scale */
    {ACT_SILU, 1, 1, 0, 0, 0},           {ACT_SILU, 4097, 3, 0, 1, 0},         {ACT_SWIGLU, 7, 5, 0, 0, 0},
    {ACT_SWIGLU, 12288, 2, 0, 2, 0},     {ACT_SWIGLU, 256, 4, 300, 1, 0},      {ACT_SIGMOID_MUL, 128, 96, 256, 1, 0},
    {ACT_SIGMOID_MUL, 33, 3, 0, 2, 0},   {ACT_SIGMOID_MUL_ROW, 2048, 5, 1, 1, 0}, {ACT_SIGMOID_MUL_ROW, 100, 3, 107, 0, 0},
    {ACT_ADD, 4096, 1, 0, 1, 0},         {ACT_ADD, 999, 4, 1003, 0, 0},        {ACT_ADD, 3, 70001, 0, 2, 0},
    {ACT_SILU, 2, 70001, 0, 0, 0},       {ACT_SOFTMAX, 1, 1, 0, 0, 1.0f},      {ACT_SOFTMAX, 5, 7, 0, 1, 1.0f},
    {ACT_SOFTMAX, 300, 4, 0, 0, 0.0884f}, {ACT_SOFTMAX, 4097, 2, 0, 1, 1.0f},  {ACT_SOFTMAX, 3, 70001, 0, 0, 0.5f},
};

static const struct rope_case rope_cases[] = {
    /* mode, tokens, heads, head_dim, n_rot, tpad, hpad, base, scale, max_pos */
    {ROPE_NORMAL, 1, 1, 64, 64, 0, 0, 10000.0f, 1.0f, 1},       {ROPE_NORMAL, 5, 3, 128, 128, 0, 0, 10000.0f, 1.0f, 4096},
    {ROPE_NEOX, 7, 32, 128, 128, 0, 0, 1000000.0f, 1.0f, 40000}, {ROPE_NEOX, 3, 4, 256, 64, 0, 0, 10000000.0f, 1.0f, 100000},
    {ROPE_NEOX, 9, 5, 128, 64, 256, 128, 1000000.0f, 1.0f, 2000}, /* q read from (q, gate) pairs */
    {ROPE_NORMAL, 4, 2, 10, 6, 3, 1, 10000.0f, 0.25f, 500},      {ROPE_NEOX, 300, 8, 64, 32, 17, 0, 500000.0f, 1.0f, 131072},
};

/* ---- fused forms against the unfused pair on the device: bit-identical ---- */
static void run_norm_q(int64_t n, int32_t rows, int alias) {
    const size_t nx = (size_t)(n * rows), qb = q8_split_bytes(n, rows);
    float *hx = malloc(nx * sizeof(float)), *hw = malloc((size_t)n * sizeof(float));
    float *y1 = malloc(nx * sizeof(float)), *y2 = malloc(nx * sizeof(float));
    uint8_t *q1 = malloc(qb), *q2 = malloc(qb);
    fill(hx, nx, -3.0f, 3.0f), fill(hw, (size_t)n, 0.5f, 1.5f);
    hx[0] = 0.0f; /* a group with a zero... */
    for (int64_t i = 0; i < 32 && n >= 64; i++) hx[32 + i] = 0.0f; /* ...and an all-zero group (d = 0) */
    float *dx = dev_from(hx, nx * sizeof(float)), *dw = dev_from(hw, (size_t)n * sizeof(float));
    float *dy1 = dev_from(hx, nx * sizeof(float)), *dy2 = dev_from(hx, nx * sizeof(float));
    void *dq1 = dev_from(q1, qb), *dq2 = dev_from(q2, qb);
    struct norm_args na = {dx, dw, dy1, n, rows, n, n, 1e-6f, NULL, 0};
    CK(cuda_norm(&na, 0));
    struct quantize_args qa = {INFER_TYPE_Q8_1, dy1, dq1, n, rows, n};
    CK(cuda_quantize(&qa, 0));
    struct norm_q_args nq = {{alias ? dy2 : dx, dw, dy2, n, rows, n, n, 1e-6f, NULL, 0}, INFER_TYPE_Q8_1, dq2};
    CK(cuda_norm_q(&nq, 0));
    host_from(y1, dy1, nx * sizeof(float)), host_from(y2, dy2, nx * sizeof(float));
    host_from(q1, dq1, qb), host_from(q2, dq2, qb);
    T_CHECK(!memcmp(y1, y2, nx * sizeof(float)) && !memcmp(q1, q2, qb),
            "norm_q n %lld rows %d%s: y and the 8-bit activations equal norm + quantize", (long long)n, rows,
            alias ? " (y == x)" : "");
    cudaFree(dx), cudaFree(dw), cudaFree(dy1), cudaFree(dy2), cudaFree(dq1), cudaFree(dq2);
    free(hx), free(hw), free(y1), free(y2), free(q1), free(q2);
}

/* gated: src holds (query, gate) pairs per head (head stride 2 head_dim); inplace: src is the output */
static void run_rope_norm(int32_t mode, int32_t n_tok, int32_t n_head, int32_t hd, int32_t n_rot, int gated, int inplace) {
    const int64_t shs = gated ? 2 * hd : hd, sts = shs * n_head, dts = (int64_t)hd * n_head;
    const size_t ns = (size_t)(sts * n_tok), nd = (size_t)(dts * n_tok);
    float *hs = malloc(ns * sizeof(float)), *hw = malloc((size_t)hd * sizeof(float));
    float *o1 = malloc(nd * sizeof(float)), *o2 = malloc(nd * sizeof(float));
    int32_t *hp = malloc((size_t)n_tok * sizeof(int32_t));
    fill(hs, ns, -2.0f, 2.0f), fill(hw, (size_t)hd, 0.5f, 1.5f);
    for (int32_t t = 0; t < n_tok; t++) hp[t] = 17 * t + 3;
    float *ds = dev_from(hs, ns * sizeof(float)), *dw = dev_from(hw, (size_t)hd * sizeof(float));
    float *d1 = dev_from(o1, nd * sizeof(float)), *d2 = inplace ? ds : dev_from(o2, nd * sizeof(float));
    int32_t *dp = dev_from(hp, (size_t)n_tok * sizeof(int32_t));
    struct norm_args na = {ds, dw, d1, hd, n_tok * n_head, shs, hd, 1e-6f, NULL, 0};
    CK(cuda_norm(&na, 0));
    struct rope_args r1 = {d1, dp, n_tok, n_head, hd, n_rot, dts, hd, mode, 1e6f, 1.0f};
    CK(cuda_rope(&r1, 0));
    struct rope_args r2 = r1;
    r2.x = d2;
    struct rope_norm_args rn = {r2, ds, sts, shs, dw, 1e-6f};
    CK(cuda_rope_norm(&rn, 0));
    host_from(o1, d1, nd * sizeof(float)), host_from(o2, d2, nd * sizeof(float));
    T_CHECK(!memcmp(o1, o2, nd * sizeof(float)), "rope_norm mode %d %dx%dx%d rot %d%s%s: equals norm + rope", mode, n_tok,
            n_head, hd, n_rot, gated ? " gated" : "", inplace ? " in place" : "");
    cudaFree(ds), cudaFree(dw), cudaFree(d1), cudaFree(dp);
    if (!inplace) cudaFree(d2);
    free(hs), free(hw), free(o1), free(o2), free(hp);
}

static void run_fused(void) {
    run_norm_q(64, 37, 0), run_norm_q(4096, 3, 0), run_norm_q(1024, 1, 1), run_norm_q(896, 9, 1);
    run_rope_norm(ROPE_NEOX, 5, 8, 128, 128, 0, 1);  /* qwen3 k, in place */
    run_rope_norm(ROPE_NEOX, 3, 16, 128, 128, 0, 0); /* qwen3 q */
    run_rope_norm(ROPE_NEOX, 4, 8, 256, 64, 1, 0);   /* qwen35 gated q, partial rotation */
    run_rope_norm(ROPE_NORMAL, 2, 3, 64, 64, 0, 0);
}

#define N_OF(a) (sizeof(a) / sizeof(a)[0])

int main(void) {
    check_refusals();
    const char *why = NULL;
    const int n_dev = device_count(&why);
    if (n_dev == 0) {
        check_create_without_device();
        T_SKIP("no CUDA device: norm, %zu cases (%s)", N_OF(norm_cases), why);
        T_SKIP("no CUDA device: act, %zu cases", N_OF(act_cases));
        T_SKIP("no CUDA device: rope, %zu cases", N_OF(rope_cases));
        T_SKIP("no CUDA device: fused norm_q and rope_norm against the unfused pairs");
        T_SKIP("no CUDA device: embed (10 weight types), kv_store");
        T_SKIP("no CUDA device: backend_cuda memory and op table");
        const int rc = t_done();
        return rc ? rc : 77; /* the host checks passed; the GPU groups did not run */
    }
    for (size_t i = 0; i < N_OF(norm_cases); i++) run_norm(&norm_cases[i]);
    for (size_t i = 0; i < N_OF(act_cases); i++) run_act(&act_cases[i]);
    for (size_t i = 0; i < N_OF(rope_cases); i++) run_rope(&rope_cases[i]);
    run_fused();
    static const int32_t embed_types[] = {INFER_TYPE_F32,  INFER_TYPE_F16,  INFER_TYPE_BF16, INFER_TYPE_Q8_0,
                                          INFER_TYPE_Q4_0, INFER_TYPE_Q4_K, INFER_TYPE_Q5_K, INFER_TYPE_Q6_K,
                                          INFER_TYPE_IQ4_NL, INFER_TYPE_IQ4_XS};
    for (size_t i = 0; i < N_OF(embed_types); i++) run_embed(embed_types[i]);
    run_kv_store();
    run_kv_store_q8_0(0);
    run_kv_store_q8_0(64);
    run_kv_store_q8_0(512);
    run_backend(n_dev);
    return t_done();
}

#else
int main(void) {
    check_create_without_device();
    T_SKIP("no CUDA device: built without CUDA (norm, act, rope, embed, kv_store, backend_cuda)");
    const int rc = t_done();
    return rc ? rc : 77;
}
#endif
