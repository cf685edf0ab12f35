/* attn: causal attention of f32 queries over an f16 or Q8_0 KV cache with grouped-query heads.
 *
 * out[t][h] = Σ_j softmax_j(scale · q[t][h]·k[j][g]) v[j][g],  g = h / (n_head / n_head_kv),
 * j = 0..pos[t] (cell j holds position j of the sequence). One (token, head) pair per work item; the
 * softmax is the online (flash) form — running max and sum, accumulator rescaled — so no n_kv-sized
 * scratch is needed. f16 K/V are widened exactly; dots and sums are f32.
 * Q8_0 cells follow llama.cpp's CPU flash attention (ggml-cpu ops.cpp flash_attn_ext_f16_one_chunk with
 * a q8_0 K/V): the q head row is rounded to Q8_0 (K's vec_dot type), scores are the integer block dots
 * of the Q8_0 x Q8_0 matmul kernel, and each V row is dequantised (q * d) then accumulated in f32.
 * With rot_k / rot_v (llama.cpp's Hadamard rotation of quantised caches) q is rotated before it is
 * rounded and the output row after the division by the sum, as llama.cpp's graph does around the op.
 * note: the AVX2 + F16C path widens 8 halves per instruction and runs the q.k dot and the v update
 * as fused multiply-adds over the head dimension; in prefill this op was 69% of the time (perf, 512
 * tokens, Qwen3-0.6B shape) with the scalar widening.
 */
#include "attn_tile.h"
#include "cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTN_X86 1
#endif

enum { ATTN_MAX_HEAD_DIM = 512 };

static void attn_items(void *ctx, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const struct attn_args *a = ctx;
    const int group = a->n_head / a->n_head_kv, d = a->head_dim;
    float acc[ATTN_MAX_HEAD_DIM];
    for (int64_t it = i0; it < i1; it++) {
        int64_t t = it / a->n_head;
        int h = (int)(it % a->n_head), g = h / group;
        const float *q = a->q + t * a->q_stride + (int64_t)h * d;
        int32_t last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
        float m = -INFINITY, l = 0;
        for (int i = 0; i < d; i++) acc[i] = 0;
        for (int32_t j = 0; j <= last; j++) {
            const uint16_t *k = (const uint16_t *)a->k + j * a->kv_stride + (int64_t)g * d;
            const uint16_t *v = (const uint16_t *)a->v + j * a->kv_stride + (int64_t)g * d;
            float s = 0;
            for (int i = 0; i < d; i++) s += q[i] * blocks_f16_to_f32(k[i]);
            s *= a->scale;
            if (s > m) { /* new max: rescale what was accumulated */
                float c = expf(m - s);
                l *= c;
                for (int i = 0; i < d; i++) acc[i] *= c;
                m = s;
            }
            float e = expf(s - m);
            l += e;
            for (int i = 0; i < d; i++) acc[i] += e * blocks_f16_to_f32(v[i]);
        }
        float *o = a->out + t * a->out_stride + (int64_t)h * d;
        float inv = l > 0 ? 1.0f / l : 0.0f;
        for (int i = 0; i < d; i++) o[i] = acc[i] * inv;
    }
}

/* Q8_0 cells: the dot is the Q8_0 x Q8_0 kernel of cpu_mmv (this CPU's best level). */
struct attn_q8_job {
    const struct attn_args *a;
    cpu_vec_dot_fn dot;
};

static void attn_items_q8_0(void *ctx, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const struct attn_q8_job *jb = ctx;
    const struct attn_args *a = jb->a;
    const int group = a->n_head / a->n_head_kv, d = a->head_dim, nb = d / QK8_0;
    const int64_t cell = a->kv_stride / QK8_0; /* blocks between cells */
    const block_q8_0 *kc = a->k, *vc = a->v;
    float acc[ATTN_MAX_HEAD_DIM], vf[ATTN_MAX_HEAD_DIM], qr[ATTN_MAX_HEAD_DIM];
    block_q8_0 qq[ATTN_MAX_HEAD_DIM / QK8_0];
    for (int64_t it = i0; it < i1; it++) {
        int64_t t = it / a->n_head;
        int h = (int)(it % a->n_head), g = h / group;
        const float *q = a->q + t * a->q_stride + (int64_t)h * d;
        if (a->rot_k) {
            memcpy(qr, q, sizeof(float) * (size_t)d);
            for (int c = 0; c < d; c += a->rot_k) kv_hadamard(qr + c, a->rot_k);
            q = qr;
        }
        struct quantize_args qa = {INFER_TYPE_Q8_0, q, qq, d, 1, d};
        (void)cpu_quantize(&qa, NULL); /* valid by construction: d is a multiple of 32 */
        int32_t last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
        float m = -INFINITY, l = 0;
        for (int i = 0; i < d; i++) acc[i] = 0;
        for (int32_t j = 0; j <= last; j++) {
            const block_q8_0 *k = kc + j * cell + (int64_t)g * nb, *v = vc + j * cell + (int64_t)g * nb;
            const float s = jb->dot(d, k, qq) * a->scale;
            if (s > m) { /* new max: rescale what was accumulated */
                float c = expf(m - s);
                l *= c;
                for (int i = 0; i < d; i++) acc[i] *= c;
                m = s;
            }
            float e = expf(s - m);
            l += e;
            for (int b = 0; b < nb; b++) {
                const float dv = blocks_f16_to_f32(v[b].d);
                for (int i = 0; i < QK8_0; i++) vf[b * QK8_0 + i] = (float)v[b].qs[i] * dv;
            }
            for (int i = 0; i < d; i++) acc[i] += e * vf[i];
        }
        float *o = a->out + t * a->out_stride + (int64_t)h * d;
        float inv = l > 0 ? 1.0f / l : 0.0f;
        for (int i = 0; i < d; i++) o[i] = acc[i] * inv;
        for (int c = 0; a->rot_v && c < d; c += a->rot_v) kv_hadamard(o + c, a->rot_v);
    }
}

#ifdef ATTN_X86
__attribute__((target("avx2,fma,f16c"))) static inline float attn_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The same computation with head_dim a multiple of 8. */
__attribute__((target("avx2,fma,f16c"))) static void attn_items_avx2(void *ctx, int64_t i0, int64_t i1, int ith) {
    (void)ith;
    const struct attn_args *a = ctx;
    const int group = a->n_head / a->n_head_kv, d = a->head_dim;
    float acc[ATTN_MAX_HEAD_DIM];
    for (int64_t it = i0; it < i1; it++) {
        int64_t t = it / a->n_head;
        int h = (int)(it % a->n_head), g = h / group;
        const float *q = a->q + t * a->q_stride + (int64_t)h * d;
        int32_t last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
        float m = -INFINITY, l = 0;
        for (int i = 0; i < d; i++) acc[i] = 0;
        for (int32_t j = 0; j <= last; j++) {
            const uint16_t *k = (const uint16_t *)a->k + j * a->kv_stride + (int64_t)g * d;
            const uint16_t *v = (const uint16_t *)a->v + j * a->kv_stride + (int64_t)g * d;
            __m256 sv = _mm256_setzero_ps();
            for (int i = 0; i < d; i += 8)
                sv = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i))), sv);
            const float s = attn_hsum(sv) * a->scale;
            if (s > m) { /* new max: rescale what was accumulated */
                const __m256 c = _mm256_set1_ps(expf(m - s));
                l *= _mm256_cvtss_f32(c);
                for (int i = 0; i < d; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(_mm256_loadu_ps(acc + i), c));
                m = s;
            }
            const float e = expf(s - m);
            const __m256 ev = _mm256_set1_ps(e);
            l += e;
            for (int i = 0; i < d; i += 8)
                _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(ev, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i))),
                                                          _mm256_loadu_ps(acc + i)));
        }
        float *o = a->out + t * a->out_stride + (int64_t)h * d;
        const float inv = l > 0 ? 1.0f / l : 0.0f;
        for (int i = 0; i < d; i++) o[i] = acc[i] * inv;
    }
}
#endif

infer_status cpu_attn(const struct attn_args *a, struct pool *p) {
    if (!a->q || !a->k || !a->v || !a->out || !a->pos || a->n_tokens < 0 || a->n_head_kv < 1 ||
        a->n_head % a->n_head_kv || a->head_dim < 1 || a->head_dim > ATTN_MAX_HEAD_DIM || a->n_kv < 1)
        return infer_fail(INFER_E_ARG, "cpu_attn: n_head %d n_head_kv %d head_dim %d n_kv %d: expected n_head a "
                          "multiple of n_head_kv, head_dim 1..%d, n_kv >= 1", a->n_head, a->n_head_kv, a->head_dim,
                          a->n_kv, ATTN_MAX_HEAD_DIM);
    if (a->kv_type != INFER_TYPE_F16 && a->kv_type != INFER_TYPE_Q8_0)
        return infer_fail(INFER_E_UNSUPPORTED, "cpu_attn: kv_type %d: expected F16 or Q8_0 cells", a->kv_type);
    if (a->kv_type == INFER_TYPE_Q8_0 && (a->head_dim % QK8_0 || a->kv_stride % QK8_0))
        return infer_fail(INFER_E_ARG, "cpu_attn: Q8_0 cells with head_dim %d, kv_stride %lld: expected multiples "
                          "of %d", a->head_dim, (long long)a->kv_stride, QK8_0);
    if (!kv_rot_valid(a->rot_k, a->head_dim) || !kv_rot_valid(a->rot_v, a->head_dim) ||
        ((a->rot_k || a->rot_v) && a->kv_type != INFER_TYPE_Q8_0))
        return infer_fail(INFER_E_ARG, "cpu_attn: rot_k %d rot_v %d (kv_type %d, head_dim %d): expected 0, or for Q8_0 "
                          "cells powers of two 32..512 dividing head_dim", a->rot_k, a->rot_v, a->kv_type, a->head_dim);
    for (int32_t t = 0; t < a->n_tokens; t++)
        if (a->pos[t] < 0)
            return infer_fail(INFER_E_ARG, "cpu_attn: pos[%d] = %d: expected >= 0", t, a->pos[t]);
    if (a->kv_type == INFER_TYPE_Q8_0) {
        struct attn_q8_job jb = {a, cpu_vec_dot(INFER_TYPE_Q8_0, CPU_ISA_BEST)};
        if (!jb.dot) return infer_fail(INFER_E_UNSUPPORTED, "cpu_attn: no Q8_0 dot product on this CPU");
        pool_for(p, (int64_t)a->n_tokens * a->n_head, 1, attn_items_q8_0, &jb);
        return INFER_OK;
    }
    if (cpu_attn_tile_takes(a)) return cpu_attn_tile(a, p);
    if (cpu_attn_tile_avx2_takes(a)) return cpu_attn_tile_avx2(a, p);
    void (*items)(void *, int64_t, int64_t, int) = attn_items;
#ifdef ATTN_X86
    if (a->head_dim % 8 == 0 && cpu_isa_has(CPU_ISA_AVX2) && __builtin_cpu_supports("f16c")) items = attn_items_avx2;
#endif
    pool_for(p, (int64_t)a->n_tokens * a->n_head, 1, items, (void *)a);
    return INFER_OK;
}
