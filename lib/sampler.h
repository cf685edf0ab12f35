/* sampler: internals of lib/sampler.c shared with tests (the public API is in include/infer.h). */
#ifndef INFER_SAMPLER_H
#define INFER_SAMPLER_H

#include "status.h"

struct sampler_cand {
    int32_t id;
    float logit;
};

/* The chain without the draw: penalties, top-k, top-p, min-p, temperature applied to logits (not
 * modified). Returns the survivor count n and points *out at them (borrowed until the next call on s),
 * logits divided by temp; with temp <= 0 the argmax alone. Records nothing for the penalties. */
int32_t sampler_filter(infer_sampler *s, const float *logits, const struct sampler_cand **out);

#endif
