/* kernels.h: the op contract shared by the CPU backend (lib/cpu/<op>.c), the CUDA kernels
 * (kernels/<op>.cu) and the references in the tests. Plain C, included by gcc and nvcc.
 *
 * One args struct per op family, passed by value to CUDA kernels; one triple of functions per op:
 *   ref_<op>  (tests: float64, obviously correct)   cpu_<op>  (lib/cpu/<op>.c)   cuda_<op>  (kernels/<op>.cu)
 * A launcher does no allocation, no sync and no host reads (graph-capturable) and returns an error
 * for an unsupported type or shape instead of asserting. <op>_cost() gives the bytes and flops of a
 * call for the roofline figures of bench-ops and llm-bench.
 *
 * Conventions: matrices are row-major in ggml's sense — a weight {n_in, n_out} holds n_out rows of
 * n_in values (row r = output feature r); activations are (n_tokens, n) with rows n apart.
 */
#ifndef INFER_KERNELS_H
#define INFER_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "blocks.h" /* INFER_HD, block layouts */
#include "infer.h"

#ifdef __cplusplus
extern "C" {
#endif

struct op_cost {
    double bytes_read, bytes_written, flops;
};

/* ---- quantize: f32 activations -> 8-bit blocks (Q8_0, Q8_1 or Q8_K), once per matmul input ---- */
struct quantize_args {
    int32_t type;        /* INFER_TYPE_Q8_0 | Q8_1 | Q8_K */
    const float *x;      /* (n_rows, n) f32, rows x_stride floats apart */
    void *y;             /* (n_rows, n / blck) blocks, packed */
    int64_t n;           /* a multiple of the block size */
    int32_t n_rows;
    int64_t x_stride;
};

/* CUDA 8-bit activations ("q8 split", the CUDA form of Q8_1): for n_rows rows of n values, int8
 * q[n_rows][n] (so 16-byte loads line up with any weight layout), then at q8_split_ds_offset() a
 * float2 ds[n_rows][n/32] holding (d, d*sum(q)) per 32 values: x ~= d*q, d = amax/127. */
#define Q8_SPLIT_BLOCK 32
static inline INFER_HD size_t q8_split_ds_offset(int64_t n, int32_t n_rows) {
    return ((size_t)n * (size_t)n_rows + 15) & ~(size_t)15;
}
static inline INFER_HD size_t q8_split_bytes(int64_t n, int32_t n_rows) {
    return q8_split_ds_offset(n, n_rows) + (size_t)(n / Q8_SPLIT_BLOCK) * (size_t)n_rows * 2 * sizeof(float);
}

/* ---- mmv: quantised matrix x few vectors (decode, speculative verify: n_tokens 1..8) ----
 * y[t][r] = epilogue( sum_c W[r][c] * x[t][c] )
 *   MMV_PLAIN   y = W x
 *   MMV_ADD     y = W x + add                   (residual fused)
 *   MMV_SWIGLU  y = silu(W x) * (W2 x)          (gate / up fused; W2 of the same type and shape)
 * Activations arrive already quantised (xq) to the backend's activation type for this weight type
 * (mmv_act_type): the CPU pairs K-quants and IQ4_XS with Q8_K and Q8_0/Q4_0/IQ4_NL with Q8_0 like
 * llama.cpp's CPU path; CUDA pairs every quantised type with Q8_1 in the q8 split layout above.
 * F32/F16/BF16 weights take f32 x.
 */
enum { MMV_PLAIN = 0, MMV_ADD = 1, MMV_SWIGLU = 2 };
enum { MMV_MAX_TOKENS = 8 };

struct mmv_args {
    int32_t type;        /* weight type (infer_type id) */
    const void *w;       /* (n_out, n_in) in `type` blocks, rows packed */
    const void *w2;      /* MMV_SWIGLU: the up matrix, same type and shape; else NULL */
    int64_t n_in, n_out;
    int32_t n_tokens;    /* 1..MMV_MAX_TOKENS */
    const void *xq;      /* (n_tokens, n_in) quantised activations, rows packed; NULL for float weights */
    const float *x;      /* (n_tokens, n_in) f32 activations (float weights, and the reference) */
    float *y;            /* (n_tokens, n_out) */
    const float *add;    /* MMV_ADD: (n_tokens, n_out); else NULL. May alias y. */
    int32_t epilogue;    /* MMV_* */
    int32_t variant;     /* 0 = default */
};

/* The activation type a backend pairs with a weight type: -1 means f32 activations (float weights). */
int32_t mmv_act_type_cpu(int32_t weight_type);
int32_t mmv_act_type_cuda(int32_t weight_type);
struct op_cost mmv_cost(const struct mmv_args *a);

/* ---- mm: quantised matrix x many tokens (prefill). Same math and epilogues as mmv, any n_tokens;
 * xq/x/y/add are (n_tokens, n_in|n_out) with rows packed. ---- */
struct mm_args {
    int32_t type;        /* weight type */
    const void *w;       /* (n_out, n_in) */
    const void *w2;      /* MMV_SWIGLU: up matrix; else NULL */
    int64_t n_in, n_out;
    int64_t n_tokens;    /* >= 1 */
    const void *xq;      /* (n_tokens, n_in) in mmv_act_type blocks; NULL for float weights */
    const float *x;      /* (n_tokens, n_in) f32 */
    float *y;            /* (n_tokens, n_out) */
    const float *add;    /* MMV_ADD: (n_tokens, n_out); may alias y */
    int32_t epilogue;    /* MMV_* */
    int32_t variant;
};

/* ---- norm: RMSNorm  y = x / sqrt(mean(x^2) + eps) * w  (w NULL: no weight) ---- */
struct norm_args {
    const float *x;      /* (n_rows, n), rows x_stride floats apart */
    const float *w;      /* (n) or NULL */
    float *y;            /* (n_rows, n), rows y_stride floats apart; may alias x */
    int64_t n;
    int32_t n_rows;
    int64_t x_stride, y_stride;
    float eps;
};

/* ---- rope: rotate the first n_rot dims of each head in place, ggml's rope_f32 math.
 *   ROPE_NORMAL pairs (2i, 2i+1); ROPE_NEOX pairs (i, i + n_rot/2). theta_i = pos * freq_scale *
 *   freq_base^(-2i/n_rot); dims >= n_rot pass through (partial rotation). ---- */
enum { ROPE_NORMAL = 0, ROPE_NEOX = 2 };
struct rope_args {
    float *x;            /* (n_tokens, n_head, head_dim): token t head h at x + t*token_stride + h*head_stride */
    const int32_t *pos;  /* (n_tokens) */
    int32_t n_tokens, n_head, head_dim, n_rot;
    int64_t token_stride, head_stride;
    int32_t mode;        /* ROPE_NORMAL | ROPE_NEOX */
    float freq_base, freq_scale;
};

/* ---- act: elementwise activations and row softmax ----
 *   ACT_SILU     y = x * sigmoid(x)
 *   ACT_SWIGLU   y = silu(x) * x2                  (x = gate, x2 = up)
 *   ACT_SOFTMAX  y = softmax(scale * x) per row, max-subtracted ---- */
enum { ACT_SILU = 0, ACT_SWIGLU = 1, ACT_SOFTMAX = 2 };
struct act_args {
    int32_t op;
    const float *x;      /* (n_rows, n), rows packed */
    const float *x2;     /* ACT_SWIGLU: (n_rows, n); else NULL */
    float *y;            /* (n_rows, n); may alias x */
    int64_t n;
    int32_t n_rows;
    float scale;         /* ACT_SOFTMAX */
};

/* ---- attn: softmax(scale * q k^T) v over an f16 KV cache, GQA (head h reads kv head
 * h / (n_head / n_head_kv)), causal: query t sees cells 0..pos[t] (cell j holds position j). ---- */
struct attn_args {
    const float *q;      /* (n_tokens, n_head, head_dim), rows q_stride floats apart */
    const uint16_t *k;   /* (n_kv, n_head_kv, head_dim) f16, cells kv_stride halves apart */
    const uint16_t *v;   /* (n_kv, n_head_kv, head_dim) f16, same strides */
    float *out;          /* (n_tokens, n_head, head_dim), rows out_stride floats apart */
    const int32_t *pos;  /* (n_tokens), each < n_kv */
    int32_t n_tokens, n_head, n_head_kv, head_dim, n_kv;
    int64_t q_stride, kv_stride, out_stride;
    float scale;
};

/* ---- moe: router (softmax over experts, top-k, optional renormalisation of the k weights) and the
 * expert FFN  y[t] = sum_k w[t][k] * down_e( silu(gate_e x[t]) * up_e x[t] ),  e = ids[t][k]. ---- */
struct moe_route_args {
    const float *logits; /* (n_tokens, n_expert) */
    int32_t *ids;        /* (n_tokens, n_expert_used), by decreasing probability */
    float *weights;      /* (n_tokens, n_expert_used) */
    int32_t n_tokens, n_expert, n_expert_used;
    int32_t norm;        /* 1: weights divided by their sum over the selected experts */
};
struct moe_ffn_args {
    int32_t type_gate_up, type_down;
    const void *gate, *up; /* (n_expert, n_ff, n_embd) in type_gate_up, experts packed */
    const void *down;    /* (n_expert, n_embd, n_ff) in type_down */
    const float *x;      /* (n_tokens, n_embd) */
    const int32_t *ids;  /* (n_tokens, n_expert_used) */
    const float *weights;/* (n_tokens, n_expert_used) */
    float *y;            /* (n_tokens, n_embd) */
    int64_t n_embd, n_ff;
    int32_t n_expert, n_expert_used, n_tokens;
};

/* CUDA launchers (kernels/<op>.cu). The CPU twins are declared in lib/cpu/cpu.h. */
#if defined(INFER_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>
cudaError_t cuda_quantize(const struct quantize_args *a, cudaStream_t s);
cudaError_t cuda_mmv(const struct mmv_args *a, cudaStream_t s);
#endif

#ifdef __cplusplus
}
#endif
#endif
