/* quant: the type table and the reference (de)quantisers on the CPU.
 *
 * The block layouts and the per-block decoders live once in kernels/blocks.h (shared with the CUDA
 * kernels); this module is the row-level API over them. Dequantisation is bit-exact with ggml's
 * dequantize_row_*. The quantisers are bit-exact with ggml's: Q4_0, Q8_0, Q8_1 (s = d * sum q), Q8_K,
 * Q4_K, Q5_K, Q6_K with quantize_row_<t>_ref (no importance matrix); IQ4_NL and IQ4_XS with
 * quantize_iq4_nl / quantize_iq4_xs without an imatrix (llama-quantize's search, ntry = 7; note that
 * quantize_row_iq4_nl_ref skips that search). One difference: for an all-zero Q8_K block ggml leaves
 * bsums unwritten, we write zeros. Inputs to the quantisers must be finite (NaN/Inf give unspecified
 * codes, never a crash). See docs/quant.md §2-4.
 */
#ifndef INFER_QUANT_H
#define INFER_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct quant_type {
    const char *name;   /* "Q4_K" */
    int32_t blck;       /* elements per block (1 for float types) */
    int32_t bytes;      /* bytes per block */
    int dequant;        /* 1: quant_dequant_row handles it */
    int quantize;       /* 1: quant_quantize_row handles it */
    int supported;      /* 1: a weight type libinfer computes with */
};

/* The entry for a ggml type id, or NULL for an unknown/removed id (no layout). */
const struct quant_type *quant_type(int32_t type);
/* Type id by name ("q4_k" or "Q4_K"), -1 if unknown. */
int32_t quant_type_by_name(const char *name);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type has no layout. */
size_t quant_row_bytes(int32_t type, int64_t n);

/* n must be a multiple of the type's block size. INFER_E_UNSUPPORTED for types without a decoder. */
infer_status quant_dequant_row(int32_t type, const void *src, float *dst, int64_t n);
infer_status quant_quantize_row(int32_t type, const float *src, void *dst, int64_t n);

/* Half and bfloat16 conversions, bit-exact with ggml (round to nearest even; NaN stays NaN). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif
#endif
