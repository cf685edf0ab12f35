/* mm_kq: the prefill GEMM for Q4_K, Q5_K, Q6_K and IQ4_XS weights on AVX-512 VNNI (mm_kq.c) and AVX2 (mm_kq_avx2.c),
 * called by cpu_mm and cpu_mm_r16. */
#ifndef INFER_CPU_MM_KQ_H
#define INFER_CPU_MM_KQ_H

#include "cpu.h"

/* Whether cpu_mm_kq computes this call: its weight type, this CPU's (or the variant's) ISA level, the
 * token count where repacking pays. Every element equals what cpu_mm's row-by-row dots give. */
int cpu_mm_kq_takes(const struct mm_args *a);
/* y = epilogue(W x) for a call cpu_mm_kq_takes, or for mm_r16.c's strips (a->type | CPU_R16, more than 8 tokens,
 * AVX-512 VNNI); a is already validated by cpu_mm / cpu_mm_r16. */
infer_status cpu_mm_kq(const struct mm_args *a, struct pool *p);
/* The same GEMM on AVX2 (mm_kq_avx2.c): for Q4_K, Q5_K, Q6_K and IQ4_XS, the file's layout or mm_r16.c's strips, where
 * AVX2 is the level that runs (this CPU's best, or a->variant) and the batch is long enough; the same bits. */
int cpu_mm_kq_avx2_takes(const struct mm_args *a);
infer_status cpu_mm_kq_avx2(const struct mm_args *a, struct pool *p);

#endif
