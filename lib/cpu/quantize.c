/* quantize: f32 activations -> 8-bit blocks, once per matmul input (the CPU's vec_dot_type).
 *
 * Q8_0 follows quantize_row_q8_0_ref (d = amax/127, q = roundf(x / d) via the f32 reciprocal, d stored as
 * f16); Q8_1 (the partner of Q4_1/Q5_1) is Q8_0 plus s = f16(d * Σq), quantize_row_q8_1_ref; Q8_K follows
 * quantize_row_q8_K_ref (signed max, iscale = -127/max, nearest-even, bsums per 16).
 * All three are bit-exact with libggml-base's *_ref functions, which the tests check. Note: llama.cpp's AVX2
 * quantize_row_q8_0 rounds half-to-even instead, so a tie can differ by one step from an AVX2 llama.cpp
 * build; the ref form is the one every ISA can reproduce.
 * The blocks are lib/quant.c's (quant_quantize_row, the file quantiser's); rows are split over the pool.
 */
#include "cpu.h"
#include "quant.h"

struct quantize_job {
    const struct quantize_args *a;
    size_t row_bytes;
};

static void quantize_rows(void *ctx, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const struct quantize_job *j = ctx;
    const struct quantize_args *a = j->a;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->x + r * a->x_stride;
        void *y = (char *)a->y + r * j->row_bytes;
        (void)quant_quantize_row(a->type, x, y, a->n); /* valid: cpu_quantize checked type and n */
    }
}

infer_status cpu_quantize(const struct quantize_args *a, struct pool *p) {
    int64_t blck;
    size_t bytes;
    if (a->type == INFER_TYPE_Q8_0) {
        blck = QK8_0;
        bytes = sizeof(block_q8_0);
    } else if (a->type == INFER_TYPE_Q8_1) {
        blck = QK8_0;
        bytes = sizeof(block_q8_1);
    } else if (a->type == INFER_TYPE_Q8_K) {
        blck = QK_K;
        bytes = sizeof(block_q8_K);
    } else {
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_quantize: type %d: expected Q8_0, Q8_1 or Q8_K", a->type);
    }
    if (a->n <= 0 || a->n % blck || a->n_rows < 0 || a->x_stride < a->n)
        return infer_fail(INFER_E_ARG, "cpu_quantize: n %lld: expected a positive multiple of %lld",
                          (long long)a->n, (long long)blck);
    struct quantize_job j = {a, (size_t)(a->n / blck) * bytes};
    pool_for(p, a->n_rows, 1, quantize_rows, &j);
    return INFER_OK;
}
