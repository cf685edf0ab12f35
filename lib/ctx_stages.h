/* ctx_stages: the stages and segments of a context (forward.h) from where the model's parts live.
 *
 * Why one function: infer_ctx_create builds its stages from it and the placement planner (plan.c) sizes each
 * home's scratch from the same list, so the plan counts exactly the stages a context makes.
 * Rules: the pass is cut into SEGMENTS, runs of consecutive trunk layers with one home, in order; the token
 * lookup opens the first (a segment of its own, without layers, when the token table lives elsewhere than
 * layer 0) and the head closes the last (again its own when it lives elsewhere than the last layer). Each home
 * is one STAGE, in the order of first use; a home's trunk layers are contiguous (the host's come first), so a
 * stage holds the cells of one range of layers and, when it runs the head, the MTP blocks'. On a device, a stage
 * of a pass with more than one segment gets the page-locked x_host its hidden state crosses the bus through,
 * and one whose layers keep routed experts in host memory the buffers of expert offload.
 */
#ifndef INFER_CTX_STAGES_H
#define INFER_CTX_STAGES_H

#include <stdint.h>

#include "model.h"

#define CTX_HOST (-1)                       /* the home of what runs on the CPU; >= 0: a device */
#define CTX_MAX_STAGES (INFER_MAX_DEVICES + 1)
#define CTX_MAX_SEGS (INFER_MAX_DEVICES + 3)

struct ctx_stage_desc {
    int32_t home;       /* CTX_HOST or a device */
    int32_t il0, il1;   /* its trunk layers */
    int heads;          /* it runs the head (and holds the MTP blocks' cells) */
    int x_host;         /* a device stage of a pass of several segments */
    int exps_host;      /* a device stage with layers whose routed experts run on the host */
    int embd_away;      /* it runs the head on a device without the token table the MTP block reads (expert offload
                           keeps it on the host, -sm layer on the first device unless the head's device has a copy,
                           model.mtp_embd): the block's token rows come up */
    int64_t head_v0, head_rows; /* a rank of a tensor-parallel group of several: its vocabulary rows of the head */
};

struct ctx_seg_desc {
    int32_t stage;      /* index into the stages */
    int32_t il0, il1;
    int embeds, heads;
};

struct ctx_stages {
    struct ctx_stage_desc st[CTX_MAX_STAGES];
    int32_t n_st;
    struct ctx_seg_desc seg[CTX_MAX_SEGS];
    int32_t n_seg;
};

/* The stages of m with layer il at layer_home[il] (n_layer_all; the MTP blocks follow the head), the token table
 * at embd_home (embd_head: and a copy of it at head_home, model.mtp_embd), the head at head_home and the layers
 * flagged in exps_host (NULL: none) keeping their routed experts on the host. INFER_E_ARG when a home's trunk
 * layers are not contiguous. */
infer_status ctx_stages_make(const struct infer_model *m, const int32_t *layer_home, int32_t embd_home,
                             int32_t head_home, int embd_head, const uint8_t *exps_host, struct ctx_stages *out);

#endif
