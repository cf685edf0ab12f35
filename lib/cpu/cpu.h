/* cpu: the CPU twins of the kernels (cpu_<op>, one op family per lib/cpu/<op>.c, the same names as
 * kernels/<op>.cu) and the thread pool they share.
 *
 * Each op takes the args struct of kernels/kernels.h plus the pool (NULL: run on the calling thread).
 * Work is split over rows of the output; an op returns INFER_E_UNSUPPORTED / INFER_E_ARG for a type or
 * shape it does not handle, never asserts. The quantised dot products mirror llama.cpp's CPU path:
 * activations in Q8_K (K-quants, IQ4_XS) or Q8_0 (Q8_0, Q4_0, IQ4_NL), exact integer sums per block,
 * f32 scale products; scalar code is the reference, AVX2 variants are picked at run time.
 */
#ifndef INFER_CPU_H
#define INFER_CPU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "status.h"

/* ---- pool: persistent pthreads; the calling thread is worker 0 ---- */
struct pool;
/* fn runs rows [begin, end) on worker ith; ranges are contiguous and multiples of the grain. */
typedef void (*pool_fn)(void *ctx, int64_t begin, int64_t end, int ith);
infer_status pool_create(int n_threads, struct pool **out);
void pool_free(struct pool *p); /* NULL is a no-op */
int pool_threads(const struct pool *p);
/* Splits [0, n) into one range per worker (grain-aligned) and waits for all. p NULL: fn(ctx, 0, n, 0). */
void pool_for(struct pool *p, int64_t n, int64_t grain, pool_fn fn, void *ctx);

/* ---- the ops ---- */
infer_status cpu_quantize(const struct quantize_args *a, struct pool *p);
infer_status cpu_mmv(const struct mmv_args *a, struct pool *p);
infer_status cpu_mm(const struct mm_args *a, struct pool *p);
infer_status cpu_norm(const struct norm_args *a, struct pool *p);
infer_status cpu_rope(const struct rope_args *a, struct pool *p);
infer_status cpu_act(const struct act_args *a, struct pool *p);
infer_status cpu_attn(const struct attn_args *a, struct pool *p);
infer_status cpu_moe_route(const struct moe_route_args *a, struct pool *p);
infer_status cpu_moe_ffn(const struct moe_ffn_args *a, struct pool *p);

/* One quantised (or float) dot product of a weight row with one activation row of n elements:
 * the kernel cpu_mmv uses, exposed for the tests. variant 0 = best for this CPU, 1 = scalar. */
typedef float (*cpu_vec_dot_fn)(int64_t n, const void *w, const void *x);
cpu_vec_dot_fn cpu_vec_dot(int32_t weight_type, int variant);
/* Bytes of one activation row of n elements for a weight type (the mmv_act_type_cpu blocks, or f32). */
size_t cpu_act_row_bytes(int32_t weight_type, int64_t n);
/* "avx2" or "scalar": what variant 0 picks on this machine (INFER_CPU_SCALAR=1 forces scalar). */
const char *cpu_isa(void);

/* ---- block layouts used by the dot products (ggml-common.h; spec §3) ---- */
enum { QK4_0 = 32, QK8_0 = 32, QK_K = 256 };
struct cpu_q8_0 { uint16_t d; int8_t qs[32]; };
struct cpu_q4_0 { uint16_t d; uint8_t qs[16]; };
struct cpu_iq4_nl { uint16_t d; uint8_t qs[16]; };
struct cpu_q8_k { float d; int8_t qs[256]; int16_t bsums[16]; };
struct cpu_q4_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct cpu_q5_k { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct cpu_q6_k { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct cpu_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

extern const int8_t cpu_kvalues_iq4nl[16];

/* Exact IEEE half -> float (subnormals, Inf, NaN kept). */
static inline float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        float f = (float)man * (1.0f / 16777216.0f); /* man * 2^-24, exact */
        memcpy(&u, &f, 4);
        u |= sign;
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* float -> half, round to nearest even, overflow to Inf, NaN to 0x7e00|sign (ggml's rule). */
static inline uint16_t cpu_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;
    if (a >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to Inf */
    if (a < 0x38800000u) {                       /* subnormal half: scale by 2^24 and round */
        float v;
        memcpy(&v, &a, 4);
        v *= 16777216.0f;
        /* the products are exact; nearbyint rounds half to even in the default mode */
        return sign | (uint16_t)__builtin_nearbyintf(v);
    }
    uint32_t r = a + 0x0fffu + ((a >> 13) & 1); /* round mantissa to 10 bits, ties to even */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

static inline float cpu_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t cpu_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (get_scale_min_k4). */
static inline void cpu_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static inline float cpu_silu(float x) { return x / (1.0f + expf(-x)); }

#endif
