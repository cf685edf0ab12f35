/* mm_iq: the AVX-512 VNNI prefill GEMM for the lattice and ternary types, Q2_K and Q3_K (mm_iq.c), called by cpu_mm. */
#ifndef INFER_CPU_MM_IQ_H
#define INFER_CPU_MM_IQ_H

#include "cpu.h"

/* Whether cpu_mm_iq computes this call: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0 or TQ2_0
 * weights (3 tokens or more), Q2_K or Q3_K (6 or more), this CPU's (or the variant's) ISA level. Every element equals what cpu_mm's
 * row-by-row dots give (and the scalar reference dot) bit for bit. */
int cpu_mm_iq_takes(const struct mm_args *a);
/* y = epilogue(W x) for a call cpu_mm_iq_takes, or for Q2_K / Q3_K strips of mm_r16.c (a->type | CPU_R16, more than 8
 * tokens, AVX-512 VNNI); a is already validated by cpu_mm / cpu_mm_r16. */
infer_status cpu_mm_iq(const struct mm_args *a, struct pool *p);

#endif
