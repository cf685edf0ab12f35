/* args: the llama.cpp-style command line shared by llm-run and llm-bench.
 *
 * One parser for both tools so a flag means the same thing everywhere. Parsing is strict: a value
 * that is not entirely a number in range, a missing value or an unknown flag is one line on stderr
 * ("llm-run: -n: 'x' is not an integer") and args_parse returns 2 (the usage exit status). Flags that
 * only one tool uses are unknown to the other. */
#ifndef INFER_TOOLS_ARGS_H
#define INFER_TOOLS_ARGS_H

#include <stdint.h>

#include "../include/infer.h"

#define ARGS_MAX_MODELS 16
#define ARGS_MAX_LIST 64

/* -sm: none puts the GPU part on device -mg; layer spreads the GPU layers over the devices (-ts) */
enum { ARGS_SM_NONE, ARGS_SM_LAYER, ARGS_SM_TENSOR };

struct args {
    const char *tool;                       /* program name for messages */
    const char *model[ARGS_MAX_MODELS];     /* -m, repeatable in llm-bench */
    int n_model;
    const char *prompt, *prompt_file;       /* -p, -f */
    int32_t n_predict;                      /* -n (default 32; -1: until EOG or the context is full) */
    int32_t n_ctx, n_batch, n_threads;      /* -c, -b, -t (0: library defaults) */
    int64_t seed;                           /* -s (-1: from the clock) */
    infer_sampler_params sp;                /* --temp --top-k --top-p --min-p --repeat-* penalties */
    int32_t repeat_last_n;                  /* --repeat-last-n (-1: the context size) */
    int32_t n_gpu_layers;                   /* -ngl N|auto|all (llm-run): 0 = CPU, the last N layers on CUDA
                                               (llama.cpp's meaning; a split when N <= the layer count), > the
                                               layer count: all; auto: INFER_GPU_LAYERS_AUTO; all: -1 */
    int32_t main_gpu;                       /* -mg N: the CUDA device -ngl loads onto (0) */
    int32_t n_cpu_moe;                      /* --n-cpu-moe N / --cpu-moe (INT32_MAX): experts kept on the host */
    char ot[4096];                          /* -ot PATTERN=DEVICE[,...]: llm-run: every -ot joined with commas (the
                                               library's tensor_overrides); llm-bench: the sets of ot_set */
    size_t ot_len;                          /* bytes of ot in use */
    int32_t fit;                            /* --fit on|off (1): the automatic fit of -ngl auto */
    int32_t no_repack;                      /* --no-repack: the CPU computes the weights as stored */
    int32_t n_seq;                          /* -np N: sequences the context holds (0: the library's 1) */
    int dry_run;                            /* --dry-run: print the placement plan and exit */
    int32_t n_dry_mem;                      /* --dry-run-mem 12G[,24G]: the devices' free memory to plan for */
    uint64_t dry_mem[INFER_MAX_DEVICES];
    int32_t mtp;                            /* --mtp N: MTP speculative decoding, N drafts per step (0: off) */
    int32_t type_k, type_v;                 /* -ctk, -ctv: KV cache cell types (INFER_TYPE_F16 | Q8_0), equal */
    int chat, print_ids, verbose_prompt;    /* --chat, --print-ids, --verbose-prompt */
    int32_t ids[4096];                      /* --ids 1,2,3 */
    int n_ids;
    const char *logits_out;                 /* --logits-out FILE */
    int32_t tp_world, tp_rank0;             /* --tp-world N --tp-rank0 R: -sm tensor over several processes */
    const char *tp_id;                      /* --tp-id FILE: the group's id (rank 0's process writes it) */
    int tp_serve;                           /* --tp-serve: follow rank 0's process (infer_tp_serve), no prompt */
    /* llm-bench */
    int32_t pp[ARGS_MAX_LIST], tg[ARGS_MAX_LIST], depth[ARGS_MAX_LIST], ngl[ARGS_MAX_LIST];
    int n_pp, n_tg, n_depth, n_ngl;         /* -ngl is a list in llm-bench (n_gpu_layers stays 0) */
    int32_t ncmoe[ARGS_MAX_LIST];           /* --n-cpu-moe N[,N...] (--cpu-moe adds INT32_MAX) */
    int n_ncmoe;
    int32_t sm[ARGS_MAX_LIST];              /* -sm none|layer|tensor (llm-bench: a list): ARGS_SM_*; none given: none */
    int n_sm;
    float ts[INFER_MAX_DEVICES];            /* -ts 3,1 (or 3/1): the devices' shares with -sm layer */
    int n_ts;
    const char *ot_set[ARGS_MAX_LIST];      /* -ot, llama-bench's form: ',' separates alternative sets, ';' the
                                               patterns of one set; each set in the library's comma form, in ot;
                                               "" for an empty set (no overrides) */
    int n_ot_set;
    int32_t reps;                           /* -r */
    const char *output;                     /* -o md|csv|json */
    int help;
};

/* Parses argv into a (defaults first). bench = 1 gives -p/-n llm-bench's meaning (lists of token
 * counts) and accepts -r -d -o; its -ngl, --n-cpu-moe and -sm are lists too, and its -ot takes alternative
 * sets. Each -ot pattern is checked here (PATTERN=DEVICE, DEVICE CPU or CUDA<i>, the pattern a valid
 * extended regular expression), so that a bad one is refused even where no GPU would read it.
 * Returns 0, or 2 after printing one line. */
int args_parse(struct args *a, int argc, char **argv, int bench);

#endif
