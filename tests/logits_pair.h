/* logits_pair: two contexts of the same model fed the same batches, their logits compared row by row
 * (test-cuda-e2e: the GPU against the gpu_like reference; test-gpu-like: the reference against the
 * CPU and against its perturbed variant). Context b is the trusted one: decode steps feed b's argmax.
 *
 * The scenarios (pair_basic, pair_long, pair_two_seq) and the tight bounds of test-cuda-e2e live here
 * so that test-gpu-like checks, on every machine, that a device whose only differences are the ones
 * the reference cannot know (gpu_like.h "perturbed") stays well inside them.
 * Nothing here records a check (t.h counts per binary): failures come back as a status and a message
 * in pair_error.
 */
#ifndef TEST_LOGITS_PAIR_H
#define TEST_LOGITS_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "infer.h"

/* Bounds (why these values: test-cuda-e2e's header; test-gpu-like measures what they rest on). A "row" is
 * one logits row; rel = ||a - b|| / ||b|| over the vocabulary.
 * Exact mode: a device whose ops pass gpu_like_probe (bit-identical to the reference on its inputs, e.g.
 * the emulator, which runs the kernels' float operations as written): every row within PAIR_EXACT_REL_L2
 * and every argmax equal. */
#define PAIR_EXACT_REL_L2 1e-4
/* Device mode: a device whose rounding differs (nvcc's FMA contraction, CUDA's expf, the tensor cores'
 * accumulation). One ulp anywhere flips some 8-bit or f16 rounding downstream, now and then a MoE router's
 * top-k (a row moves by ~0.2, and in a hybrid model the recurrent state carries it to the rows after) or
 * a near-tied argmax: per case the mean rel within PAIR_DEVICE_MEAN_*, all rows but PAIR_DEVICE_OUTLIERS
 * of them within PAIR_DEVICE_ROW_*, every row within PAIR_ROW_MAX, the argmax of all but PAIR_FLIPS of
 * the rows equal (fractions of the case's rows, rounded up). */
#define PAIR_DEVICE_MEAN_F32 5e-3
#define PAIR_DEVICE_MEAN_QUANT 1e-2
#define PAIR_DEVICE_ROW_F32 2e-3
#define PAIR_DEVICE_ROW_QUANT 3e-2
#define PAIR_DEVICE_OUTLIERS 0.15
#define PAIR_ROW_MAX 0.5 /* a flipped expert moves a row by ~0.2, a broken kernel by ~1 */
#define PAIR_FLIPS 0.03
/* Loose mode, the old bounds of test-cuda-e2e (which compared the GPU with the plain CPU): all rows but
 * PAIR_LOOSE_OUTLIERS within PAIR_LOOSE_*, every row within PAIR_ROW_MAX, the argmax of at least 90% of
 * the rows equal. test-gpu-like holds the reference to them against the CPU, and quantised files to a
 * mean rel of at least PAIR_MIN_QUANT_DIFF (the two backends' activation roundings really differ). */
#define PAIR_LOOSE_F32 2e-3
#define PAIR_LOOSE_QUANT 5e-2
#define PAIR_LOOSE_OUTLIERS 0.1
#define PAIR_MIN_QUANT_DIFF 2e-3

enum pair_mode { PAIR_EXACT, PAIR_DEVICE, PAIR_LOOSE };

struct pair_stats {
    int rows;             /* logits rows compared */
    int argmax_differ;    /* rows whose argmax differ */
    int identical;        /* rows equal bit for bit */
    double worst;         /* max rel over rows (INFINITY: a NaN or a missing row) */
    double sum_rel;       /* sum of the rows' rel */
    double min_tie_ratio; /* min over rows of b's top-2 gap / (2 max |a - b|): below 1 a difference of this
                             size could flip that row's argmax (INFINITY when a == b everywhere) */
    double *rel;          /* (rows) each row's rel, in order */
    int cap;
};

void pair_stats_init(struct pair_stats *s);
void pair_stats_free(struct pair_stats *s);
/* Whether s meets mode's bounds for a file of ftype ("F32", "Q8_0", ...); the verdict and the numbers it
 * rests on in msg. */
int pair_within(const struct pair_stats *s, enum pair_mode mode, const char *ftype, char *msg, size_t msg_size);
/* The mode a device's logits are held to: PAIR_EXACT when every op gpu_like_probe tries on CUDA device 0 is
 * bit-identical to tests/gpu_like.c, else PAIR_DEVICE. msg says which (or why not). Returns 0 when the device's
 * backend cannot be made, the probe fails, or an op no device may round differently differs. */
int pair_probe_mode(enum pair_mode *mode, char *msg, size_t msg_size);

/* The index of the largest of n logits (the first of equals): greedy decoding's pick. */
int32_t pair_argmax(const float *x, int32_t n);

/* The last failure of a pair_* call (a decode that failed on one side, a missing row). */
const char *pair_error(void);

/* Prompt of n_prompt tokens in one batch (every row asked), n_decode single-token steps, then the
 * 3-token batch {3, 5, 7} (every row asked), on sequence 0 of fresh contexts. */
infer_status pair_basic(infer_ctx *a, infer_ctx *b, int32_t n_prompt, int32_t n_decode, struct pair_stats *s);
/* Long context (contexts of n_ctx >= 4096, n_batch >= PAIR_LONG_BATCH): PAIR_LONG_BATCH prompt tokens in
 * one batch, then PAIR_LONG_FILL more in a second (it attends over the first's cells), every row asked;
 * then PAIR_LONG_DECODE single-token steps and a 3-token batch at positions past ATTN_SPLIT_CELLS, so the
 * decode attention on a device splits the live cells over the 16 blocks 4096 cells give (attn_splits,
 * attn_split_cells), and merges them. */
enum { PAIR_LONG_BATCH = 320, PAIR_LONG_FILL = 16, PAIR_LONG_DECODE = 4 };
infer_status pair_long(infer_ctx *a, infer_ctx *b, struct pair_stats *s);
/* Two sequences (contexts with n_seq 2): 4 + 4 tokens in one batch, then 6 steps of one token each. */
infer_status pair_two_seq(infer_ctx *a, infer_ctx *b, struct pair_stats *s);
/* Two sequences prefilled in one batch (contexts with n_seq 2, n_ctx >= 80, n_batch >= the sum): PAIR_TWO_PREFILL_0
 * tokens of sequence 0 then PAIR_TWO_PREFILL_1 of sequence 1, every row asked (a hybrid model runs its GDN op once
 * per sequence, each over >= 64 tokens: the device's chunked form, a full chunk and a partial one), then 3 steps
 * of one token for each sequence. */
enum { PAIR_TWO_PREFILL_0 = 70, PAIR_TWO_PREFILL_1 = 66 };
infer_status pair_two_prefill(infer_ctx *a, infer_ctx *b, struct pair_stats *s);

#endif
