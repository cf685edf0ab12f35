/* mm_f: the AVX-512 and AVX2 prefill GEMM for float weights (mm_f.c), called by cpu_mm. */
#ifndef INFER_CPU_MM_F_H
#define INFER_CPU_MM_F_H

#include "cpu.h"

/* Whether cpu_mm_f computes this call: F32, F16 or BF16 weights, 2 tokens or more, rows a multiple of 32 values at
 * this CPU's (or the variant's) AVX-512 level, of 16 values at AVX2. Every element equals what cpu_mm's row-by-row
 * dots at that level give bit for bit. */
int cpu_mm_f_takes(const struct mm_args *a);
/* y = epilogue(W x) for a call cpu_mm_f_takes; a is already validated by cpu_mm. */
infer_status cpu_mm_f(const struct mm_args *a, struct pool *p);

#endif
