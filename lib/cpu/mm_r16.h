/* mm_r16: matrices repacked once at load into strips of 16 rows (mm_r16.c), for the AVX-512 VNNI kernels. */
#ifndef INFER_CPU_MM_R16_H
#define INFER_CPU_MM_R16_H

#include "cpu.h"

/* A repacked matrix's type id: its file type | CPU_R16. Never in a file (ids there are below INFER_TYPE_COUNT); only
 * the CPU backend computes with it. */
enum { CPU_R16 = 0x100, CPU_R16_ROWS = 16, CPU_R16_MAX_TOKENS = 8 /* more go to mm_kq.c's GEMM */ };

static inline int cpu_r16_is(int32_t type) { return (type & CPU_R16) != 0; }
static inline int32_t cpu_r16_base(int32_t type) { return type & ~(int32_t)CPU_R16; }

/* Whether this CPU (capped by INFER_CPU_ISA) computes an (n_out, n_in) matrix of `type` faster repacked: Q4_K, Q5_K,
 * Q6_K and IQ4_XS on AVX-512 VNNI. */
int cpu_r16_takes(int32_t type, int64_t n_in);
/* Bytes of the repacked form: the rows padded with zero rows to a multiple of 16 (Q6_K: 2 bytes more per block). */
size_t cpu_r16_bytes(int32_t type, int64_t n_in, int64_t n_out);
/* dst (cpu_r16_bytes, any alignment) = the repacked form of src's n_out rows. */
void cpu_r16_pack(int32_t type, const void *src, int64_t n_in, int64_t n_out, void *dst);
/* Row `row` of a repacked matrix back in the file's layout (quant_row_bytes bytes into dst). */
void cpu_r16_row(int32_t type, const void *r16, int64_t n_in, int64_t row, void *dst);
/* y = epilogue(W x) for a repacked W (a->type | CPU_R16): 1..8 tokens here, more through mm_kq.c's GEMM. */
infer_status cpu_mm_r16(const struct mm_args *a, struct pool *p);

#endif
