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

#include <math.h>
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
 * (mmv_act_type): the CPU pairs K-quants and IQ4_XS with Q8_K, Q8_0/Q4_0/Q5_0/IQ4_NL with Q8_0 and
 * Q4_1/Q5_1 with Q8_1 (ggml's block_q8_1, s = d * sum q) like llama.cpp's CPU path; CUDA pairs every
 * quantised type with Q8_1 in the q8 split layout above.
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

/* ---- mmv_multi: up to MMV_MULTI_MAX mmv products in one launch (decode: the products of one normed input) ----
 * p[0 .. n-1] are whole mmv ops, each with its own type, weights, rows, output and epilogue, all with the same
 * n_tokens; every output row is computed exactly as mmv computes it, so y is that of n separate mmv calls, bit
 * for bit. Parts run concurrently: no part's y may overlap another part's y, x or add (mmv_multi_disjoint).
 * Mixed types are the point: a Q4_K_M file mixes Q4_K, Q5_K and Q6_K (and F32 routers) among the products of one
 * input; on CUDA every quantised type reads the same q8 split activations and float types the f32 x, so one
 * launch takes any mix. The CPU twin runs the parts in turn (cpu_mmv each). */
enum { MMV_MULTI_MAX = 4 };

struct mmv_multi_args {
    int32_t n;                         /* 1..MMV_MULTI_MAX */
    struct mmv_args p[MMV_MULTI_MAX];
};

/* Whether [a, a + na) and [b, b + nb) (floats) share an element. */
static inline int mmv_multi_overlap(const float *a, int64_t na, const float *b, int64_t nb) {
    const uintptr_t a0 = (uintptr_t)a, a1 = a0 + (uintptr_t)na * sizeof(float);
    const uintptr_t b0 = (uintptr_t)b, b1 = b0 + (uintptr_t)nb * sizeof(float);
    return a && b && na > 0 && nb > 0 && a0 < b1 && b0 < a1;
}

/* 1 when no part's output overlaps another part's output, f32 input or residual (a part's own add may alias its
 * own y, as in mmv); the n_tokens and sizes are the parts' own, assumed already checked. */
static inline int mmv_multi_disjoint(const struct mmv_multi_args *a) {
    for (int32_t i = 0; i < a->n; i++) {
        const struct mmv_args *p = &a->p[i];
        const int64_t ny = (int64_t)p->n_tokens * p->n_out;
        for (int32_t j = 0; j < a->n; j++) {
            const struct mmv_args *o = &a->p[j];
            if (j == i) continue;
            if (mmv_multi_overlap(p->y, ny, o->y, (int64_t)o->n_tokens * o->n_out) ||
                mmv_multi_overlap(p->y, ny, o->x, (int64_t)o->n_tokens * o->n_in) ||
                mmv_multi_overlap(p->y, ny, o->add, (int64_t)o->n_tokens * o->n_out))
                return 0;
        }
    }
    return 1;
}

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

/* CUDA mm (kernels/mm.cu) has two modes, chosen once per cuda_mm_state from env INFER_MATMUL:
 * "mma" (or unset), the tensor-core kernel, and "cublas", the baseline that dequantises W to f16 in
 * row chunks and x to f16 in token chunks inside one fixed scratch, then runs cublasGemmEx. The
 * scratch is [x f16: tokens * n_in][W f16: rows * n_in][SwiGLU up product f32: rows * tokens], each
 * part MM_SCRATCH_ALIGN-aligned; mm_plan_chunks picks the chunk sizes (0: the row does not fit). */
#define MM_SCRATCH_BYTES ((size_t)64 << 20)
enum { MM_SCRATCH_ALIGN = 256, MM_CHUNK_ALIGN = 64 };
struct mm_chunks {
    int64_t tokens, rows;   /* per chunk; the last chunk may be shorter */
    size_t w_off, t_off;    /* byte offsets of the W and SwiGLU parts in the scratch */
};
static inline INFER_HD size_t mm_align_up(size_t n) { return (n + MM_SCRATCH_ALIGN - 1) & ~(size_t)(MM_SCRATCH_ALIGN - 1); }
/* Half the scratch holds x (whole token multiples of MM_CHUNK_ALIGN when it cannot hold all of it),
 * W rows take the rest (multiples of MM_CHUNK_ALIGN unless all rows fit), minus the SwiGLU part. */
static inline INFER_HD int mm_plan_chunks(int64_t n_in, int64_t n_out, int64_t n_tokens, int swiglu, size_t scratch,
                                          struct mm_chunks *c) {
    c->tokens = c->rows = 0, c->w_off = c->t_off = 0;
    if (n_in < 1 || n_out < 1 || n_tokens < 1 || scratch < 4 * (size_t)MM_SCRATCH_ALIGN) return 0;
    const size_t avail = scratch - 4 * (size_t)MM_SCRATCH_ALIGN; /* room for the three parts' alignment */
    int64_t t = (int64_t)(avail / 2 / (2 * (size_t)n_in));
    if (t >= n_tokens) t = n_tokens;
    else if (t >= MM_CHUNK_ALIGN) t -= t % MM_CHUNK_ALIGN;
    if (t < 1) return 0;
    const size_t xbytes = mm_align_up((size_t)t * (size_t)n_in * 2);
    if (xbytes >= avail) return 0;
    const size_t per_row = 2 * (size_t)n_in + (swiglu ? 4 * (size_t)t : 0);
    int64_t r = (int64_t)((avail - xbytes) / per_row);
    if (r >= n_out) r = n_out;
    else if (r >= MM_CHUNK_ALIGN) r -= r % MM_CHUNK_ALIGN;
    if (r < 1) return 0;
    c->tokens = t, c->rows = r;
    c->w_off = xbytes, c->t_off = xbytes + mm_align_up((size_t)r * (size_t)n_in * 2);
    return 1;
}

/* ---- norm: RMSNorm  y = x / sqrt(mean(x^2) + eps) * w  (w NULL: no weight)
 * gated (gate not NULL, the GDN output norm): y = RMSNorm(x) * w * silu(gate), gate rows gate_stride
 * floats apart (llama.cpp build_norm_gated: norm, weight multiply, then the SiLU product). ---- */
struct norm_args {
    const float *x;      /* (n_rows, n), rows x_stride floats apart */
    const float *w;      /* (n) or NULL */
    float *y;            /* (n_rows, n), rows y_stride floats apart; may alias x */
    int64_t n;
    int32_t n_rows;
    int64_t x_stride, y_stride;
    float eps;
    const float *gate;   /* (n_rows, n), rows gate_stride floats apart, or NULL */
    int64_t gate_stride;
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

/* ---- fused forms (device backends; the CPU runs the two unfused ops, which are their reference, and
 * the CUDA kernels give bit-identical results to that pair on the device) ----
 *   norm_q     the norm op, then y quantised to q_type into yq exactly as quantize would from y (the
 *              RMSNorm that feeds a matmul also writes its 8-bit activations): q_type Q8_1 (the q8 split
 *              layout), n a multiple of 32, gate NULL; yq rows packed (n_rows, n).
 *   rope_norm  per head: x = rope(RMSNorm(src) * w) (QK-norm, then RoPE, in one pass): head h of token t
 *              of src at src + t*src_token_stride + h*src_head_stride; src may be x itself (same strides).
 *              head_dim <= 1024, n_rot < head_dim allowed (the rest is only normed). ---- */
struct norm_q_args {
    struct norm_args norm;
    int32_t q_type;
    void *yq;
};
struct rope_norm_args {
    struct rope_args rope;
    const float *src;
    int64_t src_token_stride, src_head_stride;
    const float *w;      /* (head_dim) */
    float eps;
};

/* ---- act: elementwise activations and row softmax ----
 *   ACT_SILU             y = x * sigmoid(x)
 *   ACT_SWIGLU           y = silu(x) * x2                  (x = gate, x2 = up)
 *   ACT_SOFTMAX          y = softmax(scale * x) per row, max-subtracted
 *   ACT_SIGMOID_MUL      y = x * sigmoid(x2)               (the gated-attention output gate)
 *   ACT_SIGMOID_MUL_ROW  y[r][i] = x[r][i] * sigmoid(x2[r * x2_stride])   (shared-expert gate: one
 *                        scalar per row)
 *   ACT_ADD              y = x + x2                        (residual adds)
 * x2 rows are x2_stride floats apart (0: n, packed); x and y rows are packed. ---- */
enum { ACT_SILU = 0, ACT_SWIGLU = 1, ACT_SOFTMAX = 2, ACT_SIGMOID_MUL = 3, ACT_SIGMOID_MUL_ROW = 4, ACT_ADD = 5 };
struct act_args {
    int32_t op;
    const float *x;      /* (n_rows, n), rows packed */
    const float *x2;     /* SWIGLU, SIGMOID_MUL(_ROW), ADD: second input; else NULL. May alias y. */
    float *y;            /* (n_rows, n); may alias x */
    int64_t n;
    int32_t n_rows;
    float scale;         /* ACT_SOFTMAX */
    int64_t x2_stride;   /* floats between x2 rows; 0 means n */
};

/* ---- ssm_conv: the causal depthwise conv1d of a Gated DeltaNet layer, with its carried window, then
 * SiLU (llama.cpp ggml_ssm_conv + silu). The window is a ring of ssm_conv_ring(d_conv) slots of n_ch
 * floats indexed by position: the pre-conv input of position p lives in slot p mod ring (p < 0: slot
 * (p mod ring + ring) mod ring; a fresh sequence's ring is zero). With p0 = *pos the position of token 0
 * and X(p) = x row p - p0 for p >= p0, else ring slot of p:
 *   y[t][ch] = silu( sum_{i<d_conv} w[ch][i] * X(p0 + t - (d_conv-1) + i)[ch] )  (taps summed in float in
 * order i = 0..d_conv-1; tap d_conv-1 multiplies the current token), and afterwards the slot of every
 * position p0 .. p0+n_tokens-1 holds its input (each overwrites the input ring positions older, which no
 * token from p0 on reads). Why a ring and not a shifted window: a fused GDN decode kernel (gdn_conv)
 * reads a key head's q / k window from every column block of the head while one block stores the new
 * inputs; with ring >= d_conv-1 + MMV_MAX_TOKENS the slots a run of up to MMV_MAX_TOKENS tokens writes
 * are none that any of its tokens reads, so there is no race and no grid-wide barrier.
 * pos is backend memory (one int32: the context's device copy of the positions), so a replayed CUDA graph
 * reads each step's position instead of baking it in.
 * Snapshots (speculative rollback): token t >= snap_from also writes the window after token t, the d_conv-1
 * rows of positions p0+t-d_conv+2 .. p0+t in position order (row i: position p0+t-d_conv+2+i), to snap +
 * ((snap_pos0 + t) % snap_ring) * snap_stride; snap NULL: none. Only the window, not the ring image: it is
 * all a later token reads, and restoring puts row i back into the slot of its position (cache.c), the
 * other slots being rewritten before they are read. ---- */
static inline INFER_HD int32_t ssm_conv_ring(int32_t d_conv) { return d_conv - 1 + MMV_MAX_TOKENS; }
static inline INFER_HD int64_t ssm_conv_slot(int64_t pos, int64_t ring) { return ((pos % ring) + ring) % ring; }
struct ssm_conv_args {
    const float *x;      /* (n_tokens, n_ch), rows x_stride floats apart */
    float *state;        /* (ssm_conv_ring(d_conv), n_ch) f32 ring, read then updated */
    const float *w;      /* (n_ch, d_conv) f32: ssm_conv1d.weight */
    float *y;            /* (n_tokens, n_ch) packed; must not alias x */
    int64_t n_ch, x_stride;
    int32_t n_tokens, d_conv;
    float *snap;         /* ring of windows (d_conv-1, n_ch), or NULL */
    int64_t snap_stride; /* floats between snapshot slots, >= (d_conv-1) n_ch */
    int32_t snap_ring, snap_pos0, snap_from;
    const int32_t *pos;  /* (1): the position of token 0, >= 0 (backend memory) */
};

/* ---- gdn: the gated delta rule of a Gated DeltaNet layer over n_tokens of one sequence
 * (docs/qwen35.md §4.4 steps 2, 5-7). Per token t and value head j, with key head
 * g(j) = grouped ? j / (n_vhead / n_group) : j % n_group:
 *   beta = sigmoid(b[t][j]);  gdecay = softplus(a[t][j] + dt_bias[j]) * ssm_a[j]   (softplus(x) = x for x > 20)
 *   q, k = L2-normalised q[t][g], k[t][g]:  x / sqrt(||x||^2 + eps), computed as llama.cpp 3.22's
 *          graph does (rms_norm with eps/n, then a scale by 1/sqrt(n); the sum of squares in double)
 *   S = exp(gdecay) S;  u = beta (v[t][j] - S^T k);  S += k u^T;  out[t][j] = (S^T q) / sqrt(d_state)
 * S is (d_state [k] x d_state [v]) per head, stored column-major like llama.cpp: element S[i][c] (key
 * index i, value index c) at state[j][c][i]. a/b index: head j reads a[t*ab_stride + idx(j)] with
 * idx(j) = j, or for ab_group = r > 0 (qwen3next's fused ssm_ba, grouped by key head, b then a per
 * group: pass b = ba, a = ba + r) idx(j) = (j / r) * 2r + j % r.
 * Variants: GDN_RECURRENT steps token by token; GDN_CHUNKED is the WY/UT chunked form (chunk 64, §5.2; CUDA:
 * tensor cores, chunk 32 above d_state 128); GDN_AUTO (0) runs chunked from 64 tokens on, recurrent below.
 * With snapshots the chunked form covers tokens [0, snap_from) and the recurrence the rest. Both must agree
 * with a float64 recurrence to f32 rounding.
 * Snapshots as in ssm_conv: token t >= snap_from writes S after token t to
 * snap + ((snap_pos0 + t) % snap_ring) * snap_stride (n_vhead * d_state^2 floats). ---- */
enum { GDN_AUTO = 0, GDN_RECURRENT = 1, GDN_CHUNKED = 2 };
struct gdn_args {
    const float *q, *k;  /* (n_tokens, n_group, d_state) conv outputs, not yet normalised; rows qk_stride apart */
    const float *v;      /* (n_tokens, n_vhead, d_state), rows v_stride apart */
    const float *a, *b;  /* raw alpha / beta projections, rows ab_stride apart (see idx above) */
    const float *dt_bias;/* (n_vhead) */
    const float *ssm_a;  /* (n_vhead): -exp(A_log) */
    float *state;        /* (n_vhead, d_state [v], d_state [k]) f32, read then replaced */
    float *out;          /* (n_tokens, n_vhead, d_state) packed */
    int32_t n_tokens, n_group, n_vhead, d_state;
    int64_t qk_stride, v_stride, ab_stride;
    int32_t grouped;     /* value-head order: 0 tiled (qwen35*), 1 grouped (qwen3next) */
    int32_t ab_group;    /* 0, or r = n_vhead / n_group for a fused grouped ssm_ba */
    float eps;           /* of the L2 norm (the model's rms eps) */
    int32_t variant;     /* GDN_* */
    float *snap;         /* ring of states, or NULL */
    int64_t snap_stride;
    int32_t snap_ring, snap_pos0, snap_from;
};
struct op_cost gdn_cost(const struct gdn_args *a);

/* ---- gdn_conv (fused form, device backends; the CPU runs ssm_conv, gdn and norm, its reference): a decode run
 * of 1..MMV_MAX_TOKENS tokens of one sequence in one launch, the conv over the ring, the SiLU, the q / k L2
 * norms, the gates, the recurrence and (norm_done not NULL) the output's gated RMSNorm, bit for bit that chain
 * on the device. conv.x holds the raw channels [q (n_group d) | k (n_group d) | v (n_vhead d)] (conv.n_ch =
 * (2 n_group + n_vhead) d), conv.y is not written (may be NULL); gdn.q / k / v and their strides are unused,
 * gdn.variant is taken as recurrent; both snapshot sets as in the unfused ops.
 * The output norm: every (token, value head) row of d values of gdn.out becomes RMSNorm(row) * norm_w *
 * SiLU(norm_gate row), exactly the norm op with x = y = gdn.out, n = d_state, n_rows = n_tokens * n_vhead,
 * every stride d_state, w = norm_w, gate = norm_gate, eps = norm_eps. A head's rows are finished by the last of
 * its column blocks to arrive, counted in norm_done[head]: device memory, zero before the launch and left zero
 * after it (so a CUDA graph replays), not shared with a launch that may run at the same time. ---- */
struct gdn_conv_args {
    struct ssm_conv_args conv;
    struct gdn_args gdn;
    const float *norm_w;    /* (d_state) ssm_norm, or NULL */
    const float *norm_gate; /* (n_tokens, n_vhead, d_state) packed like gdn.out: z, or NULL */
    float norm_eps;
    uint32_t *norm_done;    /* (n_vhead) arrival counters, or NULL: out stays unnormed (the norm op follows) */
};

/* ---- attn: softmax(scale * q k^T) v over a KV cache of f16 or Q8_0 cells, GQA (head h reads kv head
 * h / (n_head / n_head_kv)), causal: query t sees cells 0..pos[t] (cell j holds position j).
 * Cells: value i of kv head g in cell j is element j * kv_stride + g * head_dim + i of k (v) read as a
 * row of kv_type: f16 halves, or Q8_0 blocks of 32 (element e in block e / 32, so kv_stride and
 * head_dim must be multiples of 32; a head is head_dim / 32 whole blocks). Strides count values,
 * never bytes: kv_cell_bytes() converts.
 * Q8_0 scores: the CPU rounds each q head row to Q8_0 and takes the integer block dots, like llama.cpp's
 * CPU flash attention (ggml_vec_dot_q8_0_q8_0); CUDA keeps q in f32 (like llama.cpp's CUDA tile kernels):
 * ATTN_SIMT dequantises K, ATTN_MMA splits q into f16 hi + lo and applies K's block scales to the partial
 * dots in f32. V is dequantised exactly (q * d) on both; the accumulation is f32.
 * Rotation (llama.cpp's attn_rot_k / attn_rot_v for quantised caches): the cells then hold K and V
 * rows rotated by kv_hadamard in chunks of rot_k / rot_v values (kv_store's rot); attn rotates each q
 * head row in chunks of rot_k before its dots and its output rows in chunks of rot_v (H is its own
 * inverse, so the result is the unrotated attention up to the cells' rounding). 0: none. ---- */
struct attn_args {
    const float *q;      /* (n_tokens, n_head, head_dim), rows q_stride floats apart */
    const void *k;       /* (n_kv, n_head_kv, head_dim) cells of kv_type, cells kv_stride values apart */
    const void *v;       /* (n_kv, n_head_kv, head_dim), same type and strides */
    float *out;          /* (n_tokens, n_head, head_dim), rows out_stride floats apart */
    const int32_t *pos;  /* (n_tokens), each < n_kv */
    int32_t n_tokens, n_head, n_head_kv, head_dim, n_kv;
    int64_t q_stride, kv_stride, out_stride; /* floats, values (of kv_type), floats */
    float scale;
    float *scratch;      /* CUDA split-K partials, attn_scratch_floats(a) floats; NULL: no split (CPU ignores) */
    int32_t variant;     /* ATTN_* (CUDA; the CPU ignores it) */
    int32_t kv_type;     /* INFER_TYPE_F16 | INFER_TYPE_Q8_0: the cells' type */
    int32_t rot_k, rot_v;/* Q8_0 only: Hadamard chunk sizes (powers of two dividing head_dim, <= 512), 0: none */
};

/* The Walsh-Hadamard rotation of n values (n a power of two), ggml-cpu's fwht (what llama.cpp's
 * llama_mul_mat_hadamard runs on the CPU): x *= 1/sqrt(n), then the butterflies (u, v) -> (u + v, u - v)
 * at distance 1, 2, ..., n/2. Orthonormal and symmetric: applying it twice gives x back. */
static inline INFER_HD void kv_hadamard(float *x, int n) {
    const float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] *= s;
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float u = x[j], v = x[j + len];
                x[j] = u + v, x[j + len] = u - v;
            }
}
/* llama.cpp's rotation sizes for a quantised cache of head_dim hd (llama-kv-cache.cpp): K by the largest
 * power of two >= 64 dividing hd, V by 64; none when hd is not a multiple of 64. */
static inline INFER_HD int32_t kv_rot_k(int64_t hd) {
    int32_t n = 64;
    if (hd % 64) return 0;
    while (hd % (2 * n) == 0 && 2 * n <= 512) n *= 2;
    return n;
}
static inline INFER_HD int32_t kv_rot_v(int64_t hd) { return hd % 64 ? 0 : 64; }
/* Whether rot is a valid chunk size for rows of n values: 0, or a power of two 32..512 dividing n. */
static inline INFER_HD int kv_rot_valid(int32_t rot, int64_t n) {
    return rot == 0 || (rot >= 32 && rot <= 512 && !(rot & (rot - 1)) && n % rot == 0);
}

/* Bytes of n values of KV cells of type t (n a multiple of 32 for Q8_0); 0 for a type KV cells never have. */
static inline INFER_HD size_t kv_cell_bytes(int32_t t, int64_t n) {
    return t == INFER_TYPE_F16 ? (size_t)n * 2 : t == INFER_TYPE_Q8_0 ? (size_t)(n / 32) * 34 : 0;
}

/* CUDA attention variants: ATTN_AUTO (0) picks (attn_auto_variant); ATTN_SIMT is the CUDA-core kernel (decode
 * split-K and prefill, any head_dim); ATTN_MMA the tensor-core prefill kernel (head_dim 64/128/256, no split, f16
 * and Q8_0 cells). */
enum { ATTN_AUTO = 0, ATTN_SIMT = 1, ATTN_MMA = 2 };

/* CUDA flash-decoding splits the KV cells of a call with at most ATTN_SPLIT_TOKENS tokens over
 * attn_splits() blocks per KV group; each writes (m, l, acc[head_dim]) per (token, head) to scratch
 * and a second kernel merges them. A function of the shapes only, so a graph can size it once. */
enum { ATTN_SPLIT_TOKENS = 8, ATTN_SPLIT_CELLS = 256, ATTN_SPLIT_MAX = 32 };
static inline INFER_HD int32_t attn_splits(const struct attn_args *a) {
    if (a->n_tokens < 1 || a->n_tokens > ATTN_SPLIT_TOKENS || a->n_kv < 2 * ATTN_SPLIT_CELLS) return 1;
    const int32_t n = a->n_kv / ATTN_SPLIT_CELLS;
    return n < ATTN_SPLIT_MAX ? n : ATTN_SPLIT_MAX;
}
/* The cells each split takes: the live cells of the call (up to the last visible position of any of its tokens,
 * read from pos on the device, so a graph sized from n_kv stays valid) shared evenly over the n_split splits in
 * whole tiles of tk cells. Sized from n_kv instead, a short conversation in a long context would leave all but the
 * first splits empty. */
static inline INFER_HD int32_t attn_split_cells(const struct attn_args *a, int32_t n_split, int32_t tk) {
    if (n_split <= 1) return a->n_kv;
    int32_t live = 1;
    for (int32_t t = 0; t < a->n_tokens; t++) {
        const int32_t last = a->pos[t] < a->n_kv ? a->pos[t] : a->n_kv - 1;
        if (last + 1 > live) live = last + 1;
    }
    const int32_t per = (live + n_split - 1) / n_split;
    return (per + tk - 1) / tk * tk;
}
/* The variant ATTN_AUTO runs (why: attn.cu's header): ATTN_MMA for prefill, i.e. more than ATTN_SPLIT_TOKENS
 * tokens, with at least ATTN_MMA_MIN_ROWS (token, head) rows per KV group (half the tensor kernel's 64-row tile
 * live), at head_dim 64/128/256 where its loads are aligned (f16 cells: 4-byte pairs); ATTN_SIMT for decode
 * (flash-decoding splits), smaller batches and every other head_dim. A function of the shapes and pointers only. */
enum { ATTN_MMA_MIN_ROWS = 32 };
static inline INFER_HD int32_t attn_auto_variant(const struct attn_args *a) {
    const int hd = a->head_dim == 64 || a->head_dim == 128 || a->head_dim == 256;
    const int aligned =
        a->kv_type == INFER_TYPE_Q8_0 || (a->kv_stride % 2 == 0 && ((uintptr_t)a->k | (uintptr_t)a->v) % 4 == 0);
    const int64_t rows = a->n_head_kv > 0 ? (int64_t)a->n_tokens * (a->n_head / a->n_head_kv) : 0;
    return a->n_tokens > ATTN_SPLIT_TOKENS && rows >= ATTN_MMA_MIN_ROWS && hd && aligned ? ATTN_MMA : ATTN_SIMT;
}
static inline INFER_HD size_t attn_scratch_floats(const struct attn_args *a) {
    const int32_t n = attn_splits(a);
    return n > 1 ? (size_t)n * (size_t)a->n_tokens * (size_t)a->n_head * (size_t)(a->head_dim + 2) : 0;
}

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
    float *scratch;      /* CUDA: the hidden vectors, moe_ffn_scratch_floats(a) floats (CPU ignores it) */
};
/* CUDA moe_ffn keeps h = silu(gate x) * (up x) per (token, selected expert) in scratch between its
 * kernels: (n_tokens, n_expert_used, n_ff) f32. Batches of MOE_GROUPED_TOKENS tokens or more take the
 * grouped tensor-core path (moe_mm.cu), which also keeps each pair's down projection ((n_tokens,
 * n_expert_used, n_embd) f32) and its plan: the pairs sorted by expert, then the tile list and its count
 * (int32, moe_grouped_max_tiles entries of 3). The first batch size where the dense matmuls leave mmv for
 * the tensor cores (MMV_MAX_TOKENS + 1) is where experts start to be shared by several tokens of a batch;
 * decode and MTP verification batches stay on the f32 per-pair kernels. */
enum { MOE_GROUPED_TOKENS = MMV_MAX_TOKENS + 1, MOE_TILE_PAIRS = 64 };
static inline INFER_HD int64_t moe_grouped_max_tiles(int64_t pairs, int32_t n_expert) {
    /* an expert with c pairs has floor(c / 64) full tiles and at most one partial */
    return pairs / MOE_TILE_PAIRS + (pairs < n_expert ? pairs : n_expert);
}
static inline INFER_HD size_t moe_grouped_scratch_floats(const struct moe_ffn_args *a) {
    const size_t pairs = (size_t)a->n_tokens * (size_t)a->n_expert_used;
    const size_t tiles = (size_t)moe_grouped_max_tiles((int64_t)pairs, a->n_expert);
    return pairs * ((size_t)a->n_ff + (size_t)a->n_embd) + pairs + 3 * tiles + 1;
}
static inline INFER_HD size_t moe_ffn_scratch_floats(const struct moe_ffn_args *a) {
    if (a->n_tokens >= MOE_GROUPED_TOKENS) return moe_grouped_scratch_floats(a);
    return (size_t)a->n_tokens * (size_t)a->n_expert_used * (size_t)a->n_ff;
}

/* ---- embed: y[t] = row ids[t] of an embedding table, dequantised to f32 (ggml_get_rows) ---- */
struct embed_args {
    int32_t type;        /* the table's type (any weight type) */
    const void *table;   /* (n_rows, n_embd) rows packed */
    int64_t n_embd, n_rows;
    const int32_t *ids;  /* (n_tokens), each in 0..n_rows-1 */
    int32_t n_tokens;
    float *y;            /* (n_tokens, n_embd) packed */
};

/* ---- kv_store: cells[pos[t]] = x[t] rounded to the cells' type, for the n_tokens rows of one sequence
 * (KV cache writes). F16: nearest-even halves. Q8_0: per block of 32, d = amax / 127, q = roundf(x / d)
 * through the f32 reciprocal, d stored as f16 (ggml's quantize_row_q8_0_ref); row must be a multiple of
 * 32 and cell_stride too. rot > 0 (Q8_0 only): each chunk of rot values is rotated by kv_hadamard
 * first (see attn). ---- */
struct kv_store_args {
    const float *x;      /* (n_tokens, row), rows x_stride floats apart */
    void *cells;         /* the sequence's first cell; cells cell_stride values (of type) apart */
    const int32_t *pos;  /* (n_tokens) cell of each row */
    int64_t row, x_stride, cell_stride;
    int32_t n_tokens;
    int32_t type;        /* INFER_TYPE_F16 | INFER_TYPE_Q8_0 */
    int32_t rot;         /* Q8_0 only: Hadamard chunk size (a power of two dividing row, <= 512), 0: none */
};

/* ---- sample: one token per row of logits, exactly lib/sampler.c's chain (its header has the rules):
 * NaN -> -inf; penalties for each (token, count) pair; greedy (temp <= 0, or every logit -inf) = the
 * argmax, ties to the lowest id; else top-k (0 < top_k < n_vocab) in the order (logit desc, id asc),
 * top-p's normaliser z = sum expf(l - max) over that set, min-p (l >= max + logf(min_p)), top-p's
 * shortest prefix with cumulative expf(l - max) / z >= top_p (float, in the order), l / temp, and the
 * draw: total = sum exp((double)l - max') over the survivors (double, in their order: sorted when top-k
 * or top-p is on, else by id), the first survivor whose running sum exceeds u * total (else the last).
 * u is drawn by the caller (one per row, [0, 1)), so any backend gives the token the host chain gives.
 * CUDA bounds (see kernels/sample.cu): it keeps at most SAMPLE_MAX_CAND sorted candidates. When the set
 * could need more and no filter can cut it (top-k off or > SAMPLE_MAX_CAND, top_p >= 1, min_p <= 0,
 * n_vocab > SAMPLE_MAX_CAND) the launcher refuses (cudaErrorInvalidValue); when a row's cut falls
 * beyond them the kernel writes SAMPLE_REFUSED for that row. Either way the caller samples on the host.
 * The CPU twin has no bounds. Scratch: sample_scratch_bytes(); it carries nothing between calls. ---- */
enum { SAMPLE_MAX_CAND = 1024, SAMPLE_REFUSED = -1 };
struct sample_args {
    const float *logits; /* (n_rows, n_vocab), rows stride floats apart; not modified */
    int64_t stride;
    int32_t n_rows, n_vocab;
    const int32_t *pen;  /* (n_pen, 2) (token, count > 0) pairs, distinct tokens, for every row; or NULL */
    int32_t n_pen;
    float repeat_penalty, frequency_penalty, presence_penalty;
    int32_t top_k;       /* <= 0: off */
    float top_p, min_p, temp;
    const double *u;     /* (n_rows) uniforms in [0, 1); unused when greedy (may be NULL then) */
    int32_t *out;        /* (n_rows) token ids (or SAMPLE_REFUSED, CUDA only) */
    void *scratch;       /* sample_scratch_bytes(n_rows, n_vocab) bytes */
    /* Optional (NULL: not written): each row's distribution, the draw's survivors in the draw's order with
     * probability exp((double)l - max') / total each and l, their logit as the draw weighed it (penalised, divided
     * by temp); greedy rows {argmax, 1, its penalised logit}; no survivor (min_p > 1) {the pick, 1, -inf}; a refused
     * row n = 0. */
    struct sample_list *list; /* (n_rows) */
    /* Rows that each see one more token in the window than the row before (MTP verification: row r comes after
     * r drafts). NULL: every row the pairs alone. Row r counts pen_push[0..r) once more each and pen_drop[0..r)
     * once less: pen_drop[j] is the token that left the window when pen_push[j] entered, -1 none, -2 - i the
     * pushed token pen_push[i] (i < j). Tokens outside 0..n_vocab-1 count for nothing (CUDA: the drafts are read
     * where they were drafted; the CPU twin refuses them). sample_row_count() gives a token's count. */
    const int32_t *pen_push, *pen_drop;
};
/* A row's distribution as the sample op drew from it (spec_accept reads two of them per draft). */
struct sample_list {
    int32_t n;
    int32_t id[SAMPLE_MAX_CAND];
    double p[SAMPLE_MAX_CAND];
    float l[SAMPLE_MAX_CAND];
};

/* ---- spec_accept: the acceptance of k MTP drafts at temperature > 0 (rejection sampling, Leviathan et
 * al. 2023), where the lists are. Row i = 0..k-1: with p = target[i], q = draft[i] (sample_list, looked up
 * by id; absent = 0) and d = drafts[i], d is kept when q(d) > 0 and u_acc[i] * q(d) < p(d); else the
 * row's token is drawn from r(c) = max(0, p(c) - q(c)) over p's survivors in p's order: the first whose
 * running sum (double, in that order) exceeds u_res[i] * sum r, else the last with r > 0; when sum r is 0
 * (p == q up to rounding) it is p_draw[i], the sample op's draw from p with the same u_res[i]. After k
 * kept drafts the bonus token p_draw[k]. Rows before `force` are kept whatever the rule says and the
 * step ends at row force (a test hook; -1: off). Writes out[0] = n emitted (1..k+1), out[1..n] their ids.
 * Both backends take every decision with the same arithmetic in the same order.
 * Greedy (target, draft, u_acc and u_res NULL): p_draw[i] is row i's argmax, the greedy token; d_i is kept while it
 * is that token (rows before force whatever it is) and the first row that differs (or row force) ends the step with
 * its token (spec_accept_greedy). ---- */
struct spec_accept_args {
    const struct sample_list *target; /* (k + 1) the verification rows' distributions; NULL: greedy */
    const struct sample_list *draft;  /* (k) the drafts' distributions; NULL: greedy */
    const int32_t *drafts;            /* (k) the drafted ids */
    const int32_t *p_draw;            /* (k + 1) the sample op's draws from target, with u_res (greedy: argmaxes) */
    const double *u_acc, *u_res;      /* (k), (k + 1) uniforms in [0, 1) */
    int32_t k, force;
    int32_t *out;                     /* (k + 2) */
};
/* spec_accept's greedy form, the same on both backends. */
static inline INFER_HD void spec_accept_greedy(const struct spec_accept_args *a) {
    int32_t n = 0;
    for (int32_t i = 0; i < a->k; i++) {
        const int kept = (a->force >= 0 && i < a->force) || a->p_draw[i] == a->drafts[i];
        a->out[1 + n++] = kept ? a->drafts[i] : a->p_draw[i];
        if (!kept || i == a->force) {
            a->out[0] = n;
            return;
        }
    }
    a->out[1 + n++] = a->p_draw[a->k]; /* every draft kept: the bonus token */
    a->out[0] = n;
}
/* The probability of token id in l (0 when absent). */
static inline INFER_HD double sample_list_prob(const struct sample_list *l, int32_t id) {
    for (int32_t i = 0; i < l->n; i++)
        if (l->id[i] == id) return l->p[i];
    return 0.0;
}
/* r(c) = max(0, p(c) - q(c)) of survivor c of p: spec_accept's residual. */
static inline INFER_HD double spec_residual(const struct sample_list *p, const struct sample_list *q, int32_t c) {
    const double r = p->p[c] - sample_list_prob(q, p->id[c]);
    return r > 0 ? r : 0.0;
}
/* The draw from the residuals r (p->n of them, p's order) with u, as spec_accept defines it; fallback when they
 * sum to 0. Sequential on purpose: both backends add in the same order. */
static inline INFER_HD int32_t spec_residual_pick(const struct sample_list *p, const double *r, double u,
                                                  int32_t fallback) {
    double total = 0.0, cum = 0.0;
    for (int32_t c = 0; c < p->n; c++) total += r[c];
    if (!(total > 0)) return fallback;
    u *= total;
    int32_t last = fallback;
    for (int32_t c = 0; c < p->n; c++) {
        if (!(r[c] > 0)) continue;
        cum += r[c];
        last = p->id[c];
        if (u < cum) return last;
    }
    return last; /* rounding left u at the very top */
}
static inline INFER_HD size_t sample_scratch_bytes(int32_t n_rows, int32_t n_vocab) {
    return (size_t)n_rows * (size_t)n_vocab * 8; /* CPU: {id, logit} candidates; CUDA: penalised rows */
}
/* The penalised logit of a token seen count > 0 times (both backends and lib/sampler.c use this, with
 * rounding spelt out so that nvcc cannot contract it into an FMA the host does not do). */
#ifdef __CUDA_ARCH__
#define SAMPLE_MUL(a, b) __fmul_rn(a, b)
#define SAMPLE_ADD(a, b) __fadd_rn(a, b)
#else
#define SAMPLE_MUL(a, b) ((a) * (b))
#define SAMPLE_ADD(a, b) ((a) + (b))
#endif
static inline INFER_HD float sample_penalise(float l, int32_t count, float repeat, float freq, float presence) {
    l = l <= 0 ? SAMPLE_MUL(l, repeat) : l / repeat;
    return l - SAMPLE_ADD(SAMPLE_MUL((float)count, freq), presence);
}
/* Token t's count in row r's window (sample_args.pen_push): base (its pair's count, or 0), the pushed copies of t
 * before row r added, the dropped ones taken off. */
static inline INFER_HD int32_t sample_row_count(const int32_t *push, const int32_t *drop, int32_t r, int32_t t,
                                                int32_t base) {
    if (!push) return base;
    for (int32_t j = 0; j < r; j++) {
        const int32_t d = drop[j] <= -2 ? push[-2 - drop[j]] : drop[j];
        base += (push[j] == t) - (d == t);
    }
    return base;
}
/* 1 when pushed token push[i] is the first copy of itself in push[0..r) that no pair holds: the one row r
 * penalises it through (the pairs' tokens are penalised through their pairs). */
static inline INFER_HD int sample_push_first(const int32_t *push, int32_t i, const int32_t *pen, int32_t n_pen) {
    const int32_t t = push[i];
    for (int32_t j = 0; j < i; j++)
        if (push[j] == t) return 0;
    for (int32_t j = 0; j < n_pen; j++)
        if (pen[2 * j] == t) return 0;
    return 1;
}

/* CUDA launchers (kernels/<op>.cu). The CPU twins are declared in lib/cpu/cpu.h. */
#if defined(INFER_CUDA) || defined(__CUDACC__)
#include <cuda_runtime_api.h>
cudaError_t cuda_quantize(const struct quantize_args *a, cudaStream_t s);
cudaError_t cuda_mmv(const struct mmv_args *a, cudaStream_t s);
cudaError_t cuda_mmv_multi(const struct mmv_multi_args *a, cudaStream_t s);
cudaError_t cuda_norm(const struct norm_args *a, cudaStream_t s);
cudaError_t cuda_act(const struct act_args *a, cudaStream_t s);
cudaError_t cuda_rope(const struct rope_args *a, cudaStream_t s);
cudaError_t cuda_norm_q(const struct norm_q_args *a, cudaStream_t s);
cudaError_t cuda_rope_norm(const struct rope_norm_args *a, cudaStream_t s);
cudaError_t cuda_embed(const struct embed_args *a, cudaStream_t s);
cudaError_t cuda_kv_store(const struct kv_store_args *a, cudaStream_t s);
cudaError_t cuda_attn(const struct attn_args *a, cudaStream_t s);
cudaError_t cuda_ssm_conv(const struct ssm_conv_args *a, cudaStream_t s);
cudaError_t cuda_gdn(const struct gdn_args *a, cudaStream_t s);
cudaError_t cuda_gdn_conv(const struct gdn_conv_args *a, cudaStream_t s);
cudaError_t cuda_moe_route(const struct moe_route_args *a, cudaStream_t s);
cudaError_t cuda_moe_ffn(const struct moe_ffn_args *a, cudaStream_t s);
/* The grouped path alone, whatever n_tokens (cuda_moe_ffn takes it from MOE_GROUPED_TOKENS on), with
 * moe_grouped_scratch_floats of scratch. */
cudaError_t cuda_moe_ffn_grouped(const struct moe_ffn_args *a, cudaStream_t s);
cudaError_t cuda_sample(const struct sample_args *a, cudaStream_t s);
cudaError_t cuda_spec_accept(const struct spec_accept_args *a, cudaStream_t s);
/* mm keeps a state per backend, made on the backend's device: its mode from env INFER_MATMUL (unset
 * or "mma": nothing on the device; "cublas": a cuBLAS handle, a 32 MiB cuBLAS workspace and the
 * MM_SCRATCH_BYTES scratch; anything else: cudaErrorInvalidValue), all allocated here so cuda_mm
 * itself allocates nothing and never syncs (graph-capturable). cuda_mm returns cudaErrorInvalidValue
 * for an unsupported type or shape. */
struct cuda_mm_state;
cudaError_t cuda_mm_state_create(struct cuda_mm_state **out);
void cuda_mm_state_free(struct cuda_mm_state *s);
cudaError_t cuda_mm(const struct mm_args *a, struct cuda_mm_state *st, cudaStream_t s);
#endif

#ifdef __cplusplus
}
#endif
#endif
