/* mm_r16: matrices repacked once at load into strips of 16 rows (mm_r16.c), for the AVX-512 VNNI kernels there and the
 * AVX2 ones of mm_r16_avx2.c. */
#ifndef INFER_CPU_MM_R16_H
#define INFER_CPU_MM_R16_H

#include "cpu.h"

/* A repacked matrix's type id: its file type | CPU_R16. Never in a file (ids there are below INFER_TYPE_COUNT); only
 * the CPU backend computes with it. */
enum { CPU_R16 = 0x100, CPU_R16_ROWS = 16, CPU_R16_MAX_TOKENS = 8 /* more go to mm_kq.c's GEMM */ };

static inline int cpu_r16_is(int32_t type) { return (type & CPU_R16) != 0; }
static inline int32_t cpu_r16_base(int32_t type) { return type & ~(int32_t)CPU_R16; }

/* The vector of a strip block (mm_r16.c) holding dword d of its 16 rows' blocks: the order the kernels read them in,
 * so that a strip streams from memory front to back (read out of order, a block streams at half the speed on Zen 4).
 * Q4_K: d, dmin | scales, then qs dword 8p+u at 4u+p; Q5_K: likewise with qh dword u before qs dwords 8p+u; Q6_K:
 * scales and d first, then per half h, u = 0..3 and u + 4 in turn, the ql dwords 16h+u, 16h+8+u and the qh dword
 * 32+8h+u; IQ4_XS: d | scales_h, scales_l, then qs dword 4j+u at 16(j/4) + 4u + j%4; Q2_K: d | dmin, then the
 * scales and qs as stored; Q3_K: d, the scales, hmask dword u and qs dword 8+u in turn, then qs 16..23 (the second
 * half reads hmask again, from cache). */
static inline int cpu_r16_pos(int32_t type, int d) {
    switch (type) {
    case INFER_TYPE_Q2_K: return (d + 1) % 21;
    case INFER_TYPE_Q3_K: return d == 27 ? 0 : d >= 24 ? d - 23 : d < 8 ? 4 + 2 * d : d < 16 ? 5 + 2 * (d - 8) : d + 4;
    case INFER_TYPE_Q4_K: return d < 4 ? d : 4 + 4 * ((d - 4) % 8) + (d - 4) / 8;
    case INFER_TYPE_Q5_K: return d < 4 ? d : d < 12 ? 4 + 5 * (d - 4) : 5 + 5 * ((d - 12) % 8) + (d - 12) / 8;
    case INFER_TYPE_Q6_K: {
        if (d >= 48) return d - 48;
        const int h = d < 32 ? d / 16 : (d - 32) / 8, u = d < 32 ? d % 8 : (d - 32) % 8;
        const int which = d < 32 ? (d % 16) / 8 : 2; /* ql low half, ql high half, qh */
        return 5 + 24 * h + 6 * (u % 4) + 3 * (u / 4) + which;
    }
    case INFER_TYPE_IQ4_XS: return d < 2 ? d : 2 + 16 * ((d - 2) / 16) + 4 * ((d - 2) % 4) + ((d - 2) / 4) % 4;
    default: return d;
    }
}

/* The 32-value types' unit: two blocks (64 values) of the 16 rows. First the header: Q4_1 / Q5_1 vector e holds block
 * e's d | m << 16 in lane r; the others one vector, bytes 32e + 2r block e's d (MXFP4: its exponent byte, then 0).
 * Then Q5_0 / Q5_1's qh, vector e block e's 32 bits; then vector 2g + e holds qs dword g of block e: Q8_0 its 8
 * dwords, each byte + 128 (vpdpbusd's unsigned operand), the 4-bit types their 4 dwords as stored. */
static inline int cpu_r16_q32(int32_t type) {
    return type == INFER_TYPE_Q8_0 || type == INFER_TYPE_Q4_0 || type == INFER_TYPE_Q4_1 || type == INFER_TYPE_Q5_0 ||
           type == INFER_TYPE_Q5_1 || type == INFER_TYPE_IQ4_NL || type == INFER_TYPE_MXFP4;
}
static inline int cpu_r16_q32_min(int32_t type) { return type == INFER_TYPE_Q4_1 || type == INFER_TYPE_Q5_1; }
static inline int cpu_r16_q32_q5(int32_t type) { return type == INFER_TYPE_Q5_0 || type == INFER_TYPE_Q5_1; }
/* the first qh vector, the first qs vector, the qs dwords per block, the vectors per unit */
static inline int cpu_r16_q32_qh(int32_t type) { return 1 + cpu_r16_q32_min(type); }
static inline int cpu_r16_q32_qs(int32_t type) { return cpu_r16_q32_qh(type) + 2 * cpu_r16_q32_q5(type); }
static inline int cpu_r16_q32_dwords(int32_t type) { return type == INFER_TYPE_Q8_0 ? 8 : 4; }
static inline int cpu_r16_q32_vectors(int32_t type) { return cpu_r16_q32_qs(type) + 2 * cpu_r16_q32_dwords(type); }

struct mm_q32_act;

/* Whether this CPU (capped by INFER_CPU_ISA) computes an (n_out, n_in) matrix of `type` faster repacked: the 32-value
 * types Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (n_in a multiple of 64), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
 * on AVX-512 VNNI; Q4_K, Q5_K, IQ4_XS, Q4_0, Q4_1, IQ4_NL and MXFP4 on AVX2 (mm_r16_avx2.c). */
int cpu_r16_takes(int32_t type, int64_t n_in);
/* Bytes of the repacked form: the rows padded with zero rows to a multiple of 16 (Q3_K, Q6_K: 2 bytes more per block,
 * MXFP4 1 more, the others the file's size). */
size_t cpu_r16_bytes(int32_t type, int64_t n_in, int64_t n_out);
/* dst (cpu_r16_bytes, any alignment) = the repacked form of src's n_out rows. */
void cpu_r16_pack(int32_t type, const void *src, int64_t n_in, int64_t n_out, void *dst);
/* Row `row` of a repacked matrix back in the file's layout (quant_row_bytes bytes into dst). */
void cpu_r16_row(int32_t type, const void *r16, int64_t n_in, int64_t row, void *dst);
/* Unit i (a 256-value block; the 32-value types: two blocks) of row r (0..15) of one strip back in the file's
 * layout into dst: the GEMMs that unpack rows block by block (mm_iq.c) read strips through it. */
void cpu_r16_unit(int32_t type, const void *strip, int64_t i, int r, void *dst);
/* out[r] = the dot of row r of one strip (16 rows of a repacked `type` matrix, type the file's) with one token's
 * activations xq (act: a 32-value type's table from mm_q32_act_fill, else NULL): what cpu_mm gives for those rows, bit
 * for bit. The routed experts' decode (moe.c) reads its selected experts' strips through it. */
void cpu_r16_strip_dot(int32_t type, const void *strip, int64_t n_in, const void *xq, const struct mm_q32_act *act,
                       float out[CPU_R16_ROWS]);
/* Whether mm_r16_avx2.c has an AVX2 kernel for `type`'s strips (an AVX2 CPU without AVX-512 VNNI repacks those). */
int cpu_r16_avx2_has(int32_t type);
/* out[t][r] for nt tokens (x_row bytes apart; act: a 32-value type's table, nb entries a token, else NULL) and the
 * 16 rows of one strip (nb blocks a row) on AVX2: the same bits as the AVX-512 kernels. */
void cpu_r16_tile_avx2(int32_t type, const char *strip, int64_t nb, const char *x, size_t x_row,
                       const struct mm_q32_act *act, int nt, float out[][CPU_R16_ROWS]);
/* y = epilogue(W x) for a repacked W (a->type | CPU_R16): 1..8 tokens here, more through the GEMMs of mm_kq.c,
 * mm_q32.c or mm_iq.c (Q2_K, Q3_K). */
infer_status cpu_mm_r16(const struct mm_args *a, struct pool *p);

#endif
