/* embed: embedding lookup (ggml_get_rows) and KV cache writes (f32 rows rounded to f16 cells, or
 * quantised to Q8_0 cells by the Q8_0 activation quantiser, quantize_row_q8_0_ref's math, after
 * llama.cpp's Hadamard rotation when rot is set).
 * Both are pure data movement, split over tokens; kept as ops so a device backend runs them where the
 * data lives instead of in a host loop.
 */
#include "cpu.h"
#include "quant.h"

static void embed_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct embed_args *a = ctx;
    const size_t row = quant_row_bytes(a->type, a->n_embd);
    for (int64_t t = t0; t < t1; t++)
        quant_dequant_row(a->type, (const char *)a->table + (size_t)a->ids[t] * row, a->y + t * a->n_embd, a->n_embd);
}

infer_status cpu_embed(const struct embed_args *a, struct pool *p) {
    const struct quant_type *qt = quant_type(a->type);
    if (!a->table || !a->ids || !a->y || a->n_embd <= 0 || a->n_tokens < 0 || !qt || !qt->dequant ||
        a->n_embd % qt->blck)
        return infer_fail(INFER_E_ARG, "cpu_embed: type %d n_embd %lld: expected a dequantisable type and n_embd a "
                          "multiple of its block", a->type, (long long)a->n_embd);
    for (int32_t t = 0; t < a->n_tokens; t++)
        if (a->ids[t] < 0 || a->ids[t] >= a->n_rows)
            return infer_fail(INFER_E_ARG, "cpu_embed: ids[%d] = %d: expected 0..%lld", t, a->ids[t],
                              (long long)a->n_rows - 1);
    pool_for(p, a->n_tokens, 1, embed_rows, (void *)a);
    return INFER_OK;
}

/* a row of f32 as f16 cells, rounded as blocks_f32_to_f16 rounds (to nearest even; a NaN as its sign | 0x7E00) */
static void kv_f16_row_scalar(const float *src, uint16_t *h, int64_t n) {
    for (int64_t i = 0; i < n; i++) h[i] = quant_f32_to_f16(src[i]);
}

#if defined(__x86_64__)
#include <immintrin.h>
/* The same with F16C, 8 values an instruction (a call per value was 0.6 % of a one-thread Qwen3-0.6B decode). Its
 * rounding is the same for every number; a NaN keeps part of its payload there, so a group holding one is redone
 * by the scalar form. */
__attribute__((target("avx,f16c"))) static void kv_f16_row_f16c(const float *src, uint16_t *h, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) kv_f16_row_scalar(src + i, h + i, 8);
        else _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    kv_f16_row_scalar(src + i, h + i, n - i);
}
#endif

static void kv_f16_row(const float *src, uint16_t *h, int64_t n) {
#if defined(__x86_64__)
    if (cpu_isa_has(CPU_ISA_AVX2) && __builtin_cpu_supports("f16c")) {
        kv_f16_row_f16c(src, h, n);
        return;
    }
#endif
    kv_f16_row_scalar(src, h, n);
}

static void kv_store_rows(void *ctx, int64_t t0, int64_t t1, int ith) {
    (void)ith;
    const struct kv_store_args *a = ctx;
    for (int64_t t = t0; t < t1; t++) {
        const float *src = a->x + t * a->x_stride;
        char *dst = (char *)a->cells + kv_cell_bytes(a->type, (int64_t)a->pos[t] * a->cell_stride);
        if (a->type == INFER_TYPE_Q8_0 && a->rot) { /* chunk by chunk: rotate, then quantise */
            float buf[512];
            for (int64_t c = 0; c < a->row; c += a->rot) {
                memcpy(buf, src + c, sizeof(float) * (size_t)a->rot);
                kv_hadamard(buf, a->rot);
                struct quantize_args q = {INFER_TYPE_Q8_0, buf, dst + kv_cell_bytes(INFER_TYPE_Q8_0, c), a->rot, 1, a->rot};
                (void)cpu_quantize(&q, NULL); /* valid: rot checked to be a multiple of 32 */
            }
        } else if (a->type == INFER_TYPE_Q8_0) {
            struct quantize_args q = {INFER_TYPE_Q8_0, src, dst, a->row, 1, a->row};
            (void)cpu_quantize(&q, NULL); /* valid: row checked to be a multiple of 32 */
        } else {
            kv_f16_row(src, (uint16_t *)dst, a->row);
        }
    }
}

infer_status cpu_kv_store(const struct kv_store_args *a, struct pool *p) {
    if (!a->x || !a->cells || !a->pos || a->row <= 0 || a->n_tokens < 0 || a->x_stride < a->row ||
        a->cell_stride < a->row)
        return infer_fail(INFER_E_ARG, "cpu_kv_store: row %lld, strides %lld/%lld: expected row > 0 and strides >= row",
                          (long long)a->row, (long long)a->x_stride, (long long)a->cell_stride);
    if (a->type != INFER_TYPE_F16 && a->type != INFER_TYPE_Q8_0)
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_kv_store: type %d: expected F16 or Q8_0 cells", a->type);
    if (a->type == INFER_TYPE_Q8_0 && (a->row % QK8_0 || a->cell_stride % QK8_0))
        return infer_fail(INFER_E_ARG, "cpu_kv_store: Q8_0 cells with row %lld, cell_stride %lld: expected multiples "
                          "of %d", (long long)a->row, (long long)a->cell_stride, QK8_0);
    if (!kv_rot_valid(a->rot, a->row) || (a->rot && a->type != INFER_TYPE_Q8_0))
        return infer_fail(INFER_E_ARG, "cpu_kv_store: rot %d (type %d, row %lld): expected 0, or for Q8_0 cells a "
                          "power of two 32..512 dividing row", a->rot, a->type, (long long)a->row);
    for (int32_t t = 0; t < a->n_tokens; t++)
        if (a->pos[t] < 0)
            return infer_fail(INFER_E_ARG, "cpu_kv_store: pos[%d] = %d: expected >= 0", t, a->pos[t]);
    pool_for(p, a->n_tokens, 1, kv_store_rows, (void *)a);
    return INFER_OK;
}
