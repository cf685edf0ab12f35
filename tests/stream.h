/* stream: the token streams the MTP tests compare (test-spec, test-cuda-mtp, -split, -tp): sequence 0 of a context
 * continued token by token (plain decoding) or by infer_spec_step (drafting). */
#ifndef TEST_STREAM_H
#define TEST_STREAM_H

#include <stdint.h>

#include "infer.h"

enum stream_mode {
    STREAM_PLAIN,      /* one-token decodes, each token from infer_sample (where the logits are: a device samples) */
    STREAM_PLAIN_HOST, /* the same, each token the host sampler's on the downloaded row: a reference that does not
                        * share the device's sample op with what it checks */
    STREAM_SPEC,       /* infer_spec_step's steps */
};

/* What a drafted stream records besides its tokens; every field is optional (drafts NULL: none kept). */
struct stream_rec {
    uint64_t bus;    /* bus bytes moved inside the infer_spec_step calls (infer_ctx_bus_bytes) */
    int32_t *drafts; /* each step's drafts in order (spec_last_drafts), up to cap */
    int32_t n_drafts, cap;
};

/* From `last` (sampled, not decoded yet): out[0] = last, then steps of the mode until out holds n tokens; *next
 * (optional): the token that comes next, not decoded. Returns how many tokens out holds: n, or fewer when a call
 * failed (infer_last_error says why). */
int32_t stream_continue(infer_ctx *c, infer_sampler *s, enum stream_mode mode, int32_t last, int32_t *out, int32_t n,
                        int32_t *next, struct stream_rec *r);

/* The prompt decoded and its next token sampled (as the mode samples), then stream_continue from it. */
int32_t stream_run(infer_ctx *c, infer_sampler *s, enum stream_mode mode, const int32_t *prompt, int32_t n_prompt,
                   int32_t *out, int32_t n, struct stream_rec *r);

#endif
