/* spec: internals of lib/spec.c shared with the tests (the public API is infer_spec_step). */
#ifndef INFER_SPEC_H
#define INFER_SPEC_H

#include "status.h"

/* The rejection-sampling test for one draft d drawn from q against the target distribution p (both
 * dense over the sampler's vocabulary): returns d with *accepted = 1 with probability
 * min(1, p[d] / q[d]), else a token drawn from norm(max(0, p - q)) (resid: scratch of n_vocab floats)
 * with *accepted = 0. Over d ~ q the result is distributed exactly as p. Records nothing in s. */
int32_t spec_accept(infer_sampler *s, const float *p, const float *q, int32_t d, float *resid, int *accepted);

/* For tests: runs the MTP block of a drafting context over n tokens of seq at positions pos0.. with
 * hidden states h (n, n_embd; row i is the h token i pairs with: the target's hidden state of the
 * position before it), writing its KV cells (cells before pos0 must hold what the target's batches
 * put there) and the logits of every row into out (n, n_vocab). The cells it writes past the
 * sequence's end are not counted as held. */
infer_status spec_mtp_eval(infer_ctx *c, int32_t seq, int32_t pos0, const int32_t *tokens, const float *h, int32_t n,
                           float *out);
/* For tests: the target's post-output_norm hidden states of every token of the last infer_decode on a
 * drafting context, (n_tokens, n_embd); NULL for other contexts. */
const float *spec_hidden(const infer_ctx *c);

#endif
