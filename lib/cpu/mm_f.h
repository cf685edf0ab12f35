/* mm_f: the AVX-512 prefill GEMM for float weights (mm_f.c), called by cpu_mm. */
#ifndef INFER_CPU_MM_F_H
#define INFER_CPU_MM_F_H

#include "cpu.h"

/* Whether cpu_mm_f computes this call: F32, F16 or BF16 weights, rows a multiple of 32 values, 2 tokens or more,
 * this CPU's (or the variant's) AVX-512 level. Every element equals what cpu_mm's row-by-row dots give bit for bit. */
int cpu_mm_f_takes(const struct mm_args *a);
/* y = epilogue(W x) for a call cpu_mm_f_takes; a is already validated by cpu_mm. */
infer_status cpu_mm_f(const struct mm_args *a, struct pool *p);

/* The same GEMM on AVX2 (mm_f_avx2.c), where AVX2 is the level that runs (this CPU's best, or a->variant): rows of a
 * multiple of 16 values, 2 tokens or more; each element the AVX2 dot's bits. */
int cpu_mm_f_avx2_takes(const struct mm_args *a);
infer_status cpu_mm_f_avx2(const struct mm_args *a, struct pool *p);

#endif
