/* spec: internals of lib/spec.c shared with the tests (the public API is infer_spec_step). */
#ifndef INFER_SPEC_H
#define INFER_SPEC_H

#include "status.h"

/* The rejection-sampling test for one draft d drawn from q against the target distribution p (both
 * dense over the sampler's vocabulary): returns d with *accepted = 1 with probability
 * min(1, p[d] / q[d]), else a token drawn from norm(max(0, p - q)) (resid: scratch of n_vocab floats)
 * with *accepted = 0. Over d ~ q the result is distributed exactly as p. Records nothing in s. */
int32_t spec_accept(infer_sampler *s, const float *p, const float *q, int32_t d, float *resid, int *accepted);

/* For tests: runs the MTP block of a drafting context on the CPU over n tokens of seq at positions pos0.. with
 * hidden states h (n, n_embd; row i is the h token i pairs with: the target's hidden state of the
 * position before it), writing its KV cells (cells before pos0 must hold what the target's batches
 * put there) and the logits of every row into out (n, n_vocab). The cells it writes past the
 * sequence's end are not counted as held. */
infer_status spec_mtp_eval(infer_ctx *c, int32_t seq, int32_t pos0, const int32_t *tokens, const float *h, int32_t n,
                           float *out);
/* For tests: the target's post-output_norm hidden states of every token of the last infer_decode on a
 * drafting context, (n_tokens, n_embd); NULL for other contexts and on a device. */
const float *spec_hidden(const infer_ctx *c);

/* Test hook: the next infer_spec_step on c keeps exactly min(n, drafts made) drafts whatever the
 * acceptance rule says (each recorded in the sampler as if accepted), then emits the sampler's own
 * token from the next row, so every rollback depth can be reached on any model. n < 0: off (the
 * default). One step only. */
void spec_force_accept(infer_ctx *c, int32_t n);
/* For tests: the target's logits of row i of the last infer_spec_step's verification batch (row i:
 * after the token at its position n_past + i), for the rows it kept (i < its n_out); NULL otherwise,
 * after an infer_decode, and on a device. Borrowed until the next step or infer_decode on c. */
const float *spec_verify_logits(const infer_ctx *c, int32_t i);
/* For tests: the draft ids of the last infer_spec_step on c into ids (room for INFER_MAX_DRAFT); returns how many. */
int32_t spec_last_drafts(const infer_ctx *c, int32_t *ids);
/* For tests: the MTP head's logits for draft j of the last infer_spec_step; NULL past the drafts it made and on a
 * device. */
const float *spec_draft_logits(const infer_ctx *c, int32_t j);

#endif
