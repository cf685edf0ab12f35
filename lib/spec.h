/* spec: internals of lib/spec.c shared with the tests (the public API is infer_spec_step). */
#ifndef INFER_SPEC_H
#define INFER_SPEC_H

#include "status.h"

/* The rejection-sampling test for one draft d drawn from q against the target distribution p (both
 * dense over the sampler's vocabulary): returns d with *accepted = 1 with probability
 * min(1, p[d] / q[d]), else a token drawn from norm(max(0, p - q)) (resid: scratch of n_vocab floats)
 * with *accepted = 0. Over d ~ q the result is distributed exactly as p. Records nothing in s. */
int32_t spec_accept(infer_sampler *s, const float *p, const float *q, int32_t d, float *resid, int *accepted);

#endif
