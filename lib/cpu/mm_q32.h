/* mm_q32: the prefill GEMM for the 32-value block types on AVX-512 VNNI (mm_q32.c) and AVX2 (mm_q32_avx2.c), called
 * by cpu_mm and cpu_mm_r16. */
#ifndef INFER_CPU_MM_Q32_H
#define INFER_CPU_MM_Q32_H

#include "cpu.h"

/* Whether cpu_mm_q32 computes this call: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL or MXFP4 weights, this CPU's (or
 * the variant's) ISA level, the token count where repacking pays. Every element equals what cpu_mm's
 * row-by-row dots give (and the scalar reference dot) bit for bit. */
int cpu_mm_q32_takes(const struct mm_args *a);
/* y = epilogue(W x) for a call cpu_mm_q32_takes, or for mm_r16.c's strips of these types (a->type | CPU_R16, more
 * than 8 tokens, AVX-512 VNNI); a is already validated by cpu_mm / cpu_mm_r16. */
infer_status cpu_mm_q32(const struct mm_args *a, struct pool *p);
/* The same GEMM on AVX2 (mm_q32_avx2.c): the file's layout, or mm_r16.c's strips of the types AVX2 repacks, where AVX2
 * is the level that runs (this CPU's best, or a->variant) and the batch is long enough; the same bits. */
int cpu_mm_q32_avx2_takes(const struct mm_args *a);
infer_status cpu_mm_q32_avx2(const struct mm_args *a, struct pool *p);

/* One activation block of these types' integer dots: its d, and off·Σq for Q8_0 activations (off: what the weights'
 * unsigned codes add to their values: 128, 8, 16) or s for Q8_1 ones (Q4_1, Q5_1). */
struct mm_q32_act {
    float d;
    union {
        int32_t c;
        float s;
    };
};
/* act[t·nb + i] for tokens t0..t1 of xq (x_row bytes a token, nb blocks), the activations of `type`'s weights
 * (elsewhere than x86-64 nothing: no strips to read it). */
void mm_q32_act_fill(int32_t type, const void *xq, size_t x_row, int64_t nb, int64_t t0, int64_t t1,
                     struct mm_q32_act *act);

#endif
