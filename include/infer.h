/* libinfer: LLM inference from GGUF files, in C with CUDA kernels.
 *
 * This header is the manual. Conventions:
 *   - Every fallible call returns infer_status; results come back through out-parameters. On failure
 *     *out is NULL, nothing leaks, and infer_last_error() names the file, the item and what was expected.
 *   - Handles are opaque. Params structs are taken from *_default() and edited; NULL means defaults.
 *   - The library never prints and never exits; log lines go to the callback set by infer_set_log().
 *   - Ownership is stated per function: _load/_create give, _free takes (NULL is a no-op). Returned
 *     pointers are borrowed for the stated lifetime. Caller buffers come with a capacity and the
 *     return value is the count needed (the snprintf rule).
 */
#ifndef INFER_H
#define INFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(INFER_BUILD) && defined(__GNUC__)
#define INFER_API __attribute__((visibility("default")))
#else
#define INFER_API
#endif

typedef enum {
    INFER_OK = 0,
    INFER_E_ARG,         /* a caller argument is invalid */
    INFER_E_IO,          /* open/read/write/mmap failed */
    INFER_E_FORMAT,      /* malformed or inconsistent file */
    INFER_E_UNSUPPORTED, /* well-formed, but not something libinfer runs (type, arch) */
    INFER_E_OOM,         /* host or device allocation failed */
    INFER_E_DEVICE,      /* a CUDA call failed, or no usable device */
    INFER_E_CTX_FULL,    /* the context has no room for the tokens */
    INFER_E_CANCELLED,   /* a callback asked to stop */
    INFER_E_INTERNAL     /* a bug in libinfer */
} infer_status;

/* Tensor element types; the values are ggml's type ids as stored in GGUF files. */
typedef enum {
    INFER_TYPE_F32 = 0,
    INFER_TYPE_F16 = 1,
    INFER_TYPE_Q4_0 = 2,
    INFER_TYPE_Q4_1 = 3,
    INFER_TYPE_Q5_0 = 6,
    INFER_TYPE_Q5_1 = 7,
    INFER_TYPE_Q8_0 = 8,
    INFER_TYPE_Q8_1 = 9,
    INFER_TYPE_Q2_K = 10,
    INFER_TYPE_Q3_K = 11,
    INFER_TYPE_Q4_K = 12,
    INFER_TYPE_Q5_K = 13,
    INFER_TYPE_Q6_K = 14,
    INFER_TYPE_Q8_K = 15,
    INFER_TYPE_IQ2_XXS = 16,
    INFER_TYPE_IQ2_XS = 17,
    INFER_TYPE_IQ3_XXS = 18,
    INFER_TYPE_IQ1_S = 19,
    INFER_TYPE_IQ4_NL = 20,
    INFER_TYPE_IQ3_S = 21,
    INFER_TYPE_IQ2_S = 22,
    INFER_TYPE_IQ4_XS = 23,
    INFER_TYPE_IQ1_M = 29,
    INFER_TYPE_BF16 = 30,
    INFER_TYPE_TQ1_0 = 34,
    INFER_TYPE_TQ2_0 = 35,
    INFER_TYPE_MXFP4 = 39,
    INFER_TYPE_COUNT = 43 /* ids below this may appear in a GGUF file */
} infer_type;

/* ---- status and logging ---- */

/* A static string naming the status ("INFER_E_FORMAT: malformed file"). */
INFER_API const char *infer_status_str(infer_status s);
/* Detail of the last failure on this thread; "" if none. Borrowed until the next failing call. */
INFER_API const char *infer_last_error(void);

typedef enum { INFER_LOG_ERROR = 0, INFER_LOG_WARN, INFER_LOG_INFO, INFER_LOG_DEBUG } infer_log_level;
typedef void (*infer_log_fn)(infer_log_level level, const char *msg, void *user);
/* Sets the process-wide log sink; NULL (the default) discards everything. */
INFER_API void infer_set_log(infer_log_fn cb, void *user);

/* ---- types ---- */

/* "Q4_K", "F32", ...; NULL for an id with no layout (unknown or removed). */
INFER_API const char *infer_type_name(int32_t type);
/* Elements per block and bytes per block; 0 for an id with no layout. */
INFER_API int32_t infer_type_block_size(int32_t type);
INFER_API int32_t infer_type_block_bytes(int32_t type);
/* 1 if libinfer computes with weights of this type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K
 * Q6_K IQ4_NL IQ4_XS MXFP4). */
INFER_API int infer_type_supported(int32_t type);

/* ---- devices ---- */

/* CUDA devices this process can use: 0 when built without CUDA or when the driver or the device is
 * missing; infer_last_error() then says why. Device i is CUDA device i (n_gpu_layers uses device 0). */
INFER_API int32_t infer_device_count(void);
/* Writes device i's name and compute capability ("NVIDIA H100 80GB HBM3 (sm_90)") like snprintf and
 * returns the length needed without the NUL, or -1 if there is no device i. */
INFER_API int32_t infer_device_name(int32_t i, char *buf, int32_t cap);
/* Total and currently free memory of device i, in bytes (either pointer may be NULL). */
INFER_API infer_status infer_device_memory(int32_t i, uint64_t *total, uint64_t *free_bytes);
/* Measures device i's memory bandwidth: a copy kernel from one buffer to another, 1 GiB each (a
 * quarter of the free memory each if that is less), timed with CUDA events, best of 20 runs;
 * *bytes_per_s counts the bytes read plus the bytes written. Takes about a second; the buffers are
 * freed before it returns. */
INFER_API infer_status infer_device_bandwidth(int32_t i, double *bytes_per_s);

/* ---- models ---- */

typedef struct infer_model infer_model; /* immutable after load; may be shared across threads */

/* Returns nonzero to cancel the load (INFER_E_CANCELLED). progress is in [0, 1]. */
typedef int (*infer_progress_fn)(float progress, void *user);

/* n_gpu_layers: choose by the device's free memory (see infer_model_params.fit). */
#define INFER_GPU_LAYERS_AUTO INT32_MIN
/* Most CUDA devices a placement plan knows of. */
#define INFER_MAX_DEVICES 16

typedef struct infer_ctx_params infer_ctx_params;

/* infer_model_params.split_mode: how the GPU part spreads over several CUDA devices (llama.cpp's -sm). */
enum { INFER_SPLIT_NONE = 0, INFER_SPLIT_LAYER = 1, INFER_SPLIT_TENSOR = 2 };

typedef struct {
    int32_t n_gpu_layers;          /* layers on the GPU (weights uploaded at load), llama.cpp's
                                      rule: 0: CPU only (the default); 1..the layer count: the last n layers (a
                                      split: the token lookup and the head stay on the CPU, and each batch copies
                                      the hidden state to the GPU and back); above the layer count (e.g. 99) or
                                      < 0: every layer and the head; INFER_GPU_LAYERS_AUTO: automatic fit (below).
                                      With split_mode layer the GPU part spreads over several devices */
    int32_t main_gpu;              /* the CUDA device n_gpu_layers loads onto with split_mode NONE (default 0) */
    int32_t check_tensors;         /* 1: scan every tensor's data for NaN/Inf in scales and floats */
    infer_progress_fn progress;    /* may be NULL */
    void *progress_user;
    int32_t n_cpu_moe;             /* keep the routed experts (ffn_*_exps) of the first N MoE layers in host memory;
                                      >= the layer count: all of them (llm-run --cpu-moe); 0 (default): none;
                                      negative: INFER_E_ARG. Under GPU layers (expert offload) the router, the
                                      shared expert and the rest of the layer run on the GPU, the selected
                                      experts on the CPU: only the normed hidden state, the routing and the
                                      experts' output cross the bus */
    int32_t fit;                   /* with INFER_GPU_LAYERS_AUTO: 1 (default) places the whole model on the GPU if
                                      it fits with the context fit_ctx, else (MoE) the experts of as few leading
                                      layers as needed on the host (expert offload, as n_cpu_moe), else
                                      (dense) as many trailing layers as fit (a layer split, which loads); no CUDA
                                      device: the CPU. With INFER_SPLIT_TENSOR nothing is chosen: every rank's
                                      part must fit its device, else INFER_E_OOM with the numbers. 0: everything
                                      on the GPU, unchecked */
    const infer_ctx_params *fit_ctx; /* the context the automatic fit sizes for; NULL: infer_ctx_params_default().
                                        Borrowed for the call */
    const char *tensor_overrides;  /* llama.cpp's --override-tensor: "PATTERN=DEVICE[,PATTERN=DEVICE...]", each
                                      PATTERN a POSIX extended regular expression searched in the tensor names
                                      (\d is read as [0-9]), DEVICE "CPU" or "CUDA<i>"; the first match wins, and
                                      it wins over n_cpu_moe. Routed experts (ffn_*_exps) may go to the CPU under
                                      GPU layers (expert offload) or name the GPU their layer is on; any other
                                      tensor moved away from its layer's home is INFER_E_UNSUPPORTED, naming it.
                                      NULL or "": none. Borrowed for the call */
    int32_t split_mode;            /* INFER_SPLIT_NONE (default): the GPU part on main_gpu. INFER_SPLIT_LAYER:
                                      the GPU layers (and the head) spread over the devices in the ratio
                                      tensor_split, in order, as llama.cpp's -sm layer -ts: each GPU runs a
                                      contiguous run of layers and the hidden state crosses between them
                                      through host memory once per batch. INFER_SPLIT_TENSOR (tensor
                                      parallelism over NCCL, vLLM's tensor_parallel_size): every layer on
                                      every device, each holding its share of the attention and Gated DeltaNet
                                      heads and of the FFN and experts' columns, with one all-reduce per block;
                                      the token table and the head on the first device. Needs every layer on
                                      the GPU (n_gpu_layers < 0, INFER_GPU_LAYERS_AUTO or above the layer
                                      count), no expert offload, no MTP drafting; shapes that do not cut are
                                      INFER_E_UNSUPPORTED naming the dimension */
    float tensor_split[INFER_MAX_DEVICES]; /* -ts a,b,...: each device's share of the GPU layers with
                                      INFER_SPLIT_LAYER (any scale; 0: none for that device); all 0 (default):
                                      in proportion to each device's free memory. With INFER_SPLIT_TENSOR the
                                      devices with a share > 0 (all 0: every device), shares equal */
    /* INFER_SPLIT_TENSOR over several processes (hosts), each driving its own devices (tensor_split): */
    int32_t tp_world;              /* the group's ranks in all processes; 0 (default): this process's devices */
    int32_t tp_rank0;              /* the group rank of this process's first device: its devices are ranks
                                      tp_rank0, tp_rank0 + 1, ...; the process of rank 0 runs the program (the
                                      token table, the head, the logits), the others infer_tp_serve */
    const char *tp_id;             /* the group's NCCL unique id, as text: the environment's INFER_TP_ID when set,
                                      else this file, which rank 0's process writes (anew) and the others wait
                                      for (up to INFER_TP_TIMEOUT seconds, default 600). Borrowed for the call */
    int32_t no_repack;             /* 0 (default): the matrices the CPU computes (the host's layers and head, routed
                                      experts included) whose type has a faster layout on this CPU (the 4- to
                                      8-bit types on AVX-512 VNNI and AVX2) are repacked once at load into it, the same
                                      size, and the file's pages of them released: the same results bit for bit.
                                      1: computed as stored (llama.cpp's --no-repack) */
} infer_model_params;

INFER_API infer_model_params infer_model_params_default(void);


/* Opens a GGUF file (or the first part of a split model: name-00001-of-0000N.gguf), validates it,
 * binds its tensors to the architecture's table and checks every shape and type.
 * Gives *out; free with infer_model_free. */
INFER_API infer_status infer_model_load(const char *path, const infer_model_params *p, infer_model **out);
/* Takes m. NULL is a no-op. */
INFER_API void infer_model_free(infer_model *m);

/* general.architecture, borrowed for the model's lifetime. */
INFER_API const char *infer_model_arch(const infer_model *m);

/* Metadata: entries in file order. The key is borrowed for the model's lifetime. */
INFER_API int64_t infer_model_meta_count(const infer_model *m);
INFER_API const char *infer_model_meta_key(const infer_model *m, int64_t i);
/* Writes the value of key as text (strings verbatim, numbers in C notation, arrays as [a, b, ...]
 * with at most 16 elements then "..."). Returns the length needed without the NUL, or -1 if the key
 * is absent. buf may be NULL when cap is 0. */
INFER_API int32_t infer_model_meta_str(const infer_model *m, const char *key, char *buf, int32_t cap);

typedef struct {
    const char *name;   /* borrowed for the model's lifetime */
    int32_t type;       /* infer_type id */
    int32_t n_dims;
    int64_t ne[4];      /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint64_t offset;    /* byte offset in its file's data section */
    uint64_t nbytes;
    int32_t split;      /* which file of a split model holds it (0-based) */
} infer_tensor_info;

INFER_API int64_t infer_model_tensor_count(const infer_model *m);
/* i in [0, count); INFER_E_ARG otherwise. */
INFER_API infer_status infer_model_tensor(const infer_model *m, int64_t i, infer_tensor_info *out);
/* Index of the tensor with that name, or -1. */
INFER_API int64_t infer_model_find_tensor(const infer_model *m, const char *name);

/* ---- tokens ---- */

#define INFER_TOKENIZE_ADD_SPECIAL 1u     /* add BOS/EOS as the model's metadata asks */
#define INFER_TOKENIZE_PARSE_SPECIAL 2u   /* control tokens written in the text become their ids */
#define INFER_DETOKENIZE_REMOVE_SPECIAL 1u /* drop the BOS/EOS that tokenizing with ADD_SPECIAL added */
#define INFER_DETOKENIZE_UNPARSE_SPECIAL 2u /* render control tokens as their text */

/* Tokenizes text[0..len) exactly as llama.cpp does with the model's vocabulary. Writes min(n, cap)
 * ids to out and returns n (out may be NULL when cap is 0), or -1 on failure. */
INFER_API int32_t infer_tokenize(const infer_model *m, const char *text, size_t len, int32_t *out, int32_t cap,
                                 uint32_t flags);
/* The bytes of one token, no NUL; special = 1 renders control tokens. Returns the length; -1 for an
 * id outside [0, infer_vocab_size). A piece may end inside a UTF-8 sequence: use a stream to print. */
INFER_API int32_t infer_token_to_piece(const infer_model *m, int32_t id, char *buf, int32_t cap, int special);
/* Whole-sequence text as llama_detokenize (INFER_DETOKENIZE_* flags). Returns the length; -1 on failure. */
INFER_API int32_t infer_detokenize(const infer_model *m, const int32_t *ids, int32_t n, char *buf, int32_t cap,
                                   uint32_t flags);

/* Streaming detokenisation: each call writes the bytes that are now complete UTF-8, holding back
 * an unfinished sequence until the token that completes it. Zero-initialise; one per stream. */
typedef struct {
    char pending[4];
    int32_t n_pending;
} infer_token_stream;
/* Appends token id and returns the byte count written; if cap is too small nothing is consumed and
 * the count needed is returned (piece length + 4 always suffices); -1 for an invalid id. */
INFER_API int32_t infer_token_stream_put(const infer_model *m, infer_token_stream *s, int32_t id, int special,
                                         char *buf, int32_t cap);
/* Writes what is still held back (an incomplete sequence at the end) and resets s. */
INFER_API int32_t infer_token_stream_flush(infer_token_stream *s, char *buf, int32_t cap);

INFER_API int32_t infer_vocab_size(const infer_model *m);
INFER_API int32_t infer_token_bos(const infer_model *m); /* -1 if none */
INFER_API int32_t infer_token_eos(const infer_model *m); /* -1 if none */
/* 1 if id ends generation (EOS, EOT, <|im_end|>, ... as llama.cpp's EOG set). */
INFER_API int infer_token_is_eog(const infer_model *m, int32_t id);

/* ---- contexts: caches + scratch for running a model ---- */

typedef struct infer_ctx infer_ctx; /* one thread at a time; the model must outlive it */

#define INFER_MAX_DRAFT 4 /* most tokens infer_spec_step drafts */

struct infer_ctx_params {
    int32_t n_ctx;     /* positions each sequence's KV cache holds; 0: min(training context, 4096) */
    int32_t n_batch;   /* most tokens one infer_decode call takes (default 512) */
    int32_t n_seq;     /* independent sequences (default 1) */
    int32_t n_threads; /* CPU threads; 0: all online cores. INFER_MAX_THREADS in the environment caps it */
    int32_t kv_type;   /* INFER_TYPE_F16 (default) or INFER_TYPE_Q8_0 (head_dim a multiple of 32) */
    int32_t n_draft;   /* MTP speculative decoding (infer_spec_step): tokens drafted per step, 0..4 (0: off,
                        * the default); needs a model with an MTP layer (infer_model_n_mtp). It also keeps
                        * the recurrent state of each sequence's last n_draft + 1 positions (see
                        * infer_seq_rm). */
};

/* MTP (nextn) layers the model carries (0 or 1). */
INFER_API int32_t infer_model_n_mtp(const infer_model *m);

INFER_API infer_ctx_params infer_ctx_params_default(void);
/* Gives *out; INFER_E_OOM (with the sizes) when the caches do not fit. */
INFER_API infer_status infer_ctx_create(const infer_model *m, const infer_ctx_params *p, infer_ctx **out);
/* Takes c. NULL is a no-op. */
INFER_API void infer_ctx_free(infer_ctx *c);
/* A process of a tensor-parallel group over several processes other than rank 0's (tp_rank0 > 0): follows rank 0's
 * process, making every batch and sequence edit it makes on c (a context made with the same parameters as rank 0's),
 * until rank 0's context is freed; then returns INFER_OK (free c then). INFER_E_ARG for any other context. */
INFER_API infer_status infer_tp_serve(infer_ctx *c);
/* Bytes c's batches have moved between host and device memory since creation (both ways): the batch's token
 * ids, positions and asked rows going up, the hidden state crossing each boundary of a layer split, the
 * offloaded experts' inputs (normed hidden state, expert ids and weights) and outputs, and the logits read
 * back. 0 for a context wholly on the CPU. */
INFER_API uint64_t infer_ctx_bus_bytes(const infer_ctx *c);

/* ---- placement plans: where a model would live, without loading it ---- */

typedef struct infer_plan infer_plan; /* immutable */

typedef struct {
    int32_t n_devices;                      /* 0 (default): measure the CUDA devices (infer_device_memory); > 0:
                                               plan for devices 0..n_devices-1 with the free memory below, whether
                                               they exist or not (planning a card you do not have) */
    uint64_t free_bytes[INFER_MAX_DEVICES]; /* the free memory of each stated device, in bytes */
} infer_plan_params;

INFER_API infer_plan_params infer_plan_params_default(void);
/* Plans the placement of the model at path (a GGUF file, or the first part of a split model) for model
 * params mp, context params cp and the devices of pp (each NULL: defaults) as infer_model_load and
 * infer_ctx_create would size it: parses the header and tensor infos only (no tensor data is read, nothing
 * stays allocated on a device: measuring a device makes and frees one CUDA backend there, to see what it
 * takes). INFER_E_ARG for bad params (negative n_cpu_moe, main_gpu not a known device when layers go to a
 * GPU); what infer_model_load refuses, with its words (split_mode tensor without every layer on the GPU or
 * with expert offload, unequal tensor_split shares, shapes that do not cut over the devices); INFER_E_OOM
 * when the automatic fit finds no placement, with the numbers; the file's errors as infer_model_load. Gives
 * *out; free with infer_plan_free. */
INFER_API infer_status infer_model_plan(const char *path, const infer_model_params *mp, const infer_ctx_params *cp,
                                        const infer_plan_params *pp, infer_plan **out);
/* Takes p. NULL is a no-op. */
INFER_API void infer_plan_free(infer_plan *p);
/* The plan as text (what lives where, bytes per device, KV bytes per token, the context that would fit), like
 * snprintf: returns the length needed without the NUL; buf may be NULL when cap is 0. */
INFER_API int32_t infer_plan_text(const infer_plan *p, char *buf, int32_t cap);

#define INFER_PLAN_HOST (-1) /* a home: host memory (the CPU); a home >= 0 is that CUDA device */

typedef struct {
    int32_t n_layer;            /* trunk layers (MTP blocks not counted; they live with the head) */
    int32_t n_gpu_layers;       /* trunk layers on the GPU (the last ones); n_layer + 1: the head there too */
    int32_t n_cpu_moe;          /* MoE layers (the first ones) whose routed experts stay in host memory */
    int32_t gpu;                /* the CUDA device of the GPU part (main_gpu) */
    int32_t home_embd, home_head; /* INFER_PLAN_HOST or a CUDA device */
    int32_t tp;                 /* tensor-parallel degree: 1, or with split_mode tensor the number of devices
                                   every trunk layer is cut over (infer_plan_tp_device names them) */
    int32_t auto_fit;           /* 1: chosen by the automatic fit */
    int32_t split;              /* 1: parts in more than one home (a layer split, expert offload); 0 with
                                   split_mode tensor (every device runs every layer) */
    int32_t loads;              /* 1: infer_model_load runs this plan (every plan infer_model_plan gives now) */
    int32_t offloads_experts;   /* 1: routed experts stay in host memory under layers on the GPU (expert offload) */
    int32_t fits;               /* 1: every device's total is within its free memory */
    int32_t n_ctx;              /* the context planned for (per sequence) */
    int32_t n_ctx_fit;          /* the largest n_ctx whose caches and scratch fit the GPU beside the placed
                                   weights, up to the model's training context; -1: nothing on a GPU */
    uint64_t kv_bytes_per_token; /* KV cells of one position of one sequence, every attention layer */
} infer_plan_info;

INFER_API infer_plan_info infer_plan_get_info(const infer_plan *p);

typedef struct {
    uint64_t weights;    /* tensors at this home (on a device each rounded up to 256 bytes); split_mode
                            tensor: the device's shards, and on the first device the token table and head */
    uint64_t kv;         /* KV cells of its attention layers */
    uint64_t state;      /* Gated DeltaNet conv + recurrent state, their checkpoint and MTP snapshots */
    uint64_t scratch;    /* what infer_ctx_create allocates there besides the caches */
    uint64_t overhead;   /* a reserve per GPU in use for CUDA and cuBLAS: with measured devices 320 MiB
                            plus twice what one CUDA backend (the model's, the context's) was measured to
                            take there; with memory stated in infer_plan_params 512 MiB, an assumption.
                            split_mode tensor adds 512 MiB per device for NCCL's buffers */
    uint64_t total;
    uint64_t free_bytes; /* what the device offers; 0 for the host (not checked) */
} infer_plan_memory;

/* The memory a home needs: home INFER_PLAN_HOST or a device of the plan; INFER_E_ARG otherwise. */
INFER_API infer_status infer_plan_get_memory(const infer_plan *p, int32_t home, infer_plan_memory *out);
/* The home of layer il (0 .. n_layer + MTP blocks - 1) and of its routed experts; -2 for no such layer.
 * With split_mode tensor a trunk layer lives on every device of the group, reported as its first
 * (infer_plan_tp_device(p, 0)); the MTP blocks stay in host memory (the file). */
INFER_API int32_t infer_plan_layer_home(const infer_plan *p, int32_t il);
INFER_API int32_t infer_plan_experts_home(const infer_plan *p, int32_t il);
/* With split_mode tensor: the CUDA device of rank 0 .. tp - 1 (infer_plan_info.tp); -2 otherwise. */
INFER_API int32_t infer_plan_tp_device(const infer_plan *p, int32_t rank);

/* A batch of tokens to append. Token i goes to sequence seq_id[i] (NULL: all to sequence 0) at
 * position pos[i] (NULL: each sequence continues where it ends). logits[i] != 0 asks for token i's
 * logits (NULL: only the last token's). Positions of one sequence must be consecutive and continue
 * that sequence. Borrowed for the call. */
typedef struct {
    int32_t n_tokens;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq_id;
    const int8_t *logits;
} infer_batch;

/* Runs the model over the batch, appending to the caches. INFER_E_CTX_FULL (nothing appended) when
 * a sequence would pass n_ctx; INFER_E_ARG for a token id outside the vocabulary, a bad sequence or
 * position, or more than n_batch tokens. */
INFER_API infer_status infer_decode(infer_ctx *c, const infer_batch *b);
/* Logits (n_vocab floats) of token i of the last batch (-1: its last token); NULL if they were not
 * asked for. Borrowed until the next infer_decode on c. */
INFER_API const float *infer_logits(const infer_ctx *c, int32_t i);
/* Removes positions [p0, p1) of sequence seq from the caches (p1 < 0: to the end). Only a suffix
 * can be removed (truncation), or the whole sequence; INFER_E_ARG otherwise. A hybrid (recurrent)
 * model cannot forget tokens, so it can be truncated only to a length whose state it kept: the length
 * at its checkpoint (infer_seq_checkpoint), 0, or (contexts with n_draft > 0) one of the last
 * n_draft + 1 positions it passed — up to n_draft back after infer_decode calls, only the current
 * length right after an infer_spec_step (whose verification used those snapshots);
 * INFER_E_UNSUPPORTED (nothing changed) otherwise. */
INFER_API infer_status infer_seq_rm(infer_ctx *c, int32_t seq, int32_t p0, int32_t p1);
/* Saves sequence seq's recurrent state at its current length, so that infer_seq_rm can later return
 * to exactly this point (one checkpoint per sequence; a new one replaces it). */
INFER_API infer_status infer_seq_checkpoint(infer_ctx *c, int32_t seq);
/* The last position held for seq, -1 when it is empty. */
INFER_API int32_t infer_seq_pos_max(const infer_ctx *c, int32_t seq);

/* ---- sampling ---- */

typedef struct infer_sampler infer_sampler;

typedef struct {
    float temp;              /* <= 0: greedy (default 0.8) */
    int32_t top_k;           /* <= 0: off (default 40) */
    float top_p;             /* >= 1: off (default 0.95) */
    float min_p;             /* <= 0: off (default 0.05) */
    float repeat_penalty;    /* 1: off (default 1) */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int32_t penalty_last_n;  /* tokens the penalties look back over (default 64) */
    uint64_t seed;           /* the same seed and inputs give the same tokens */
} infer_sampler_params;

INFER_API infer_sampler_params infer_sampler_params_default(void);
/* Gives *out. Order as llama.cpp's default chain: penalties, top-k, top-p, min-p, temperature, draw. */
INFER_API infer_status infer_sampler_create(const infer_sampler_params *p, int32_t n_vocab, infer_sampler **out);
INFER_API void infer_sampler_free(infer_sampler *s); /* NULL is a no-op */
/* Picks a token from n_vocab logits (not modified) and records it for the penalties. */
INFER_API int32_t infer_sampler_sample(infer_sampler *s, const float *logits);
/* Records a token (e.g. of the prompt) for the penalties without sampling. */
INFER_API void infer_sampler_accept(infer_sampler *s, int32_t token);
INFER_API void infer_sampler_reset(infer_sampler *s);
/* Picks a token from the logits of token i of c's last batch (negative: from the end, like
 * infer_logits) and records it in s: the token infer_sampler_sample(s, infer_logits(c, i)) gives, drawn
 * where the logits live (on a GPU context only the token is copied back; the host chain runs when the
 * device cannot). INFER_E_ARG when token i's logits were not asked for or s is for another vocabulary. */
INFER_API infer_status infer_sample(infer_ctx *c, infer_sampler *s, int32_t i, int32_t *token);

/* ---- speculative decoding with the model's MTP head (contexts with n_draft > 0) ---- */

/* One step for sequence seq, whose last sampled token `last` is not decoded yet: the MTP head drafts
 * up to n_draft tokens, the model verifies [last, drafts] in one batch, and the drafts are accepted
 * while they match what s picks (greedy), or by rejection sampling (temperature > 0: the output keeps
 * exactly the distribution s samples from). Writes the accepted drafts and then the model's own next
 * token to out (1..n_draft + 1 tokens; cap must be >= n_draft + 1) and their count to *n_out; the last
 * one is not decoded yet: pass it as `last` next time. Rejected positions are removed from the caches
 * and the recurrent state is restored to the last accepted position. Every token written was
 * recorded in s (infer_sampler_accept). */
INFER_API infer_status infer_spec_step(infer_ctx *c, infer_sampler *s, int32_t seq, int32_t last, int32_t *out,
                                       int32_t cap, int32_t *n_out);

typedef struct {
    int64_t n_steps;    /* infer_spec_step calls (= verifying forward passes) */
    int64_t n_drafted;  /* tokens the MTP head proposed */
    int64_t n_accepted; /* of those, accepted */
} infer_spec_stats;
/* Counters since the context was created. Tokens per forward = (n_accepted + n_steps) / n_steps. */
INFER_API infer_spec_stats infer_spec_get_stats(const infer_ctx *c);

#ifdef __cplusplus
}
#endif
#endif /* INFER_H */
