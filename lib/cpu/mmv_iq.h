/* mmv_iq: the lattice and ternary types' dot products with Q8_K activations (mmv_iq.c), for mmv.c's table:
 * cpu_dot_<t> (scalar) and cpu_dot_<t>_avx2 (x86 only), and for some types cpu_dot_<t>_avx512 (mmv_iq512.c: AVX-512
 * with VBMI, only where cpu_iq512_ready; elsewhere AVX-512 machines run the AVX2 dot), all bit for bit equal. */
#ifndef INFER_CPU_MMV_IQ_H
#define INFER_CPU_MMV_IQ_H

#include <stdint.h>

#define MMV_IQ_DECLARE(t)                                                                                    \
    float cpu_dot_##t(int64_t n, const void *w, const void *x);                                              \
    float cpu_dot_##t##_avx2(int64_t n, const void *w, const void *x);
MMV_IQ_DECLARE(iq2_xxs)
MMV_IQ_DECLARE(iq2_xs)
MMV_IQ_DECLARE(iq2_s)
MMV_IQ_DECLARE(iq3_xxs)
MMV_IQ_DECLARE(iq3_s)
MMV_IQ_DECLARE(iq1_s)
MMV_IQ_DECLARE(iq1_m)
MMV_IQ_DECLARE(tq1_0)
MMV_IQ_DECLARE(tq2_0)
#undef MMV_IQ_DECLARE
float cpu_dot_iq2_xxs_avx512(int64_t n, const void *w, const void *x);
float cpu_dot_iq2_xs_avx512(int64_t n, const void *w, const void *x);
float cpu_dot_iq3_xxs_avx512(int64_t n, const void *w, const void *x);
float cpu_dot_iq3_s_avx512(int64_t n, const void *w, const void *x);
/* Whether the CPU runs mmv_iq512.c's dots (AVX-512 VBMI) and their tables are built. */
int cpu_iq512_ready(void);

/* One 256-value block in an integer form: v[256] int8 values, ls[32] the groups' integer scales, f the block's
 * factor, and for Q2_K a min per 16 values m[16] with its factor fm (0 elsewhere); value e is
 * f * (ls[e / 8] * v[e]) - fm * m[e / 16]. Its dot with a Q8_K block is (f d_x) Σ ls v x - (fm d_x) Σ m bsums,
 * the integers exact: the scalar dots' steps. */
struct iq_block {
    int8_t v[256];
    int32_t ls[32];
    float f;
    int32_t m[16];
    float fm;
};
/* Unpacks block i of a row. */
typedef void (*cpu_iq_unpack_fn)(const void *w, int64_t i, struct iq_block *u);
/* The unpacker of a lattice or ternary type, Q2_K or Q3_K; NULL for any other type. */
cpu_iq_unpack_fn cpu_iq_unpacker(int32_t type);

#endif
