/* sampler: internals of lib/sampler.c shared with tests (the public API is in include/infer.h). */
#ifndef INFER_SAMPLER_H
#define INFER_SAMPLER_H

#include "kernels.h"
#include "status.h"

struct sampler_cand {
    int32_t id;
    float logit;
};

/* The chain without the draw: penalties, top-k, top-p, min-p, temperature applied to logits (not
 * modified). Returns the survivor count n and points *out at them (borrowed until the next call on s),
 * logits divided by temp; with temp <= 0 the argmax alone. Records nothing for the penalties. */
int32_t sampler_filter(infer_sampler *s, const float *logits, const struct sampler_cand **out);

/* sampler_filter's stages after the penalties, on n candidates {id, penalised logit} in id order:
 * filters c in place and returns the survivor count (logits divided by temp; greedy: the argmax). */
int32_t sampler_chain(struct sampler_cand *c, int32_t n, const infer_sampler_params *p);
/* The draw over n survivors of sampler_chain with the uniform u in [0, 1): the first whose running sum
 * of exp(logit - max) (double, in their order) exceeds u * total, else the last. */
int32_t sampler_pick(const struct sampler_cand *c, int32_t n, double u);
/* infer_sampler_sample's pick with the uniform u (ignored when greedy); records nothing. */
int32_t sampler_sample_u(infer_sampler *s, const float *logits, double u);
/* The penalties as distinct (token, count) pairs (pairs: room for 2 * penalty_last_n ints), in the order
 * of the window; 0 when the penalties are off. Records nothing. */
int32_t sampler_penalty_pairs(infer_sampler *s, int32_t *pairs);

/* The vocabulary size s was created for. */
int32_t sampler_vocab(const infer_sampler *s);
/* 1 when s is greedy (temp <= 0). */
int sampler_is_greedy(const infer_sampler *s);
/* 1 when s applies a repeat, frequency or presence penalty. */
int sampler_has_penalties(const infer_sampler *s);
/* The distribution s draws from for these logits, dense: probs (n_vocab) sums to 1, zero outside the
 * survivors of the chain (one-hot at the argmax when greedy). Records nothing. */
void sampler_probs(infer_sampler *s, const float *logits, float *probs);
/* One draw from a dense distribution (n_vocab probabilities summing to total > 0) with s's generator;
 * records nothing. */
int32_t sampler_draw(infer_sampler *s, const float *probs, double total);
/* A uniform double in [0, 1) from s's generator. */
double sampler_uniform(infer_sampler *s);
/* 1 when s's chain can run on a device as the sample op's lists (sample_args.list, for spec_accept): temp > 0 and
 * a list holds every survivor (top-k within SAMPLE_MAX_CAND, or a vocabulary that small). */
int sampler_lists_ok(const infer_sampler *s);
/* s's penalties for n_rows (<= INFER_MAX_DRAFT + 1) rows that each see one more token of push (n_rows - 1 ids in c's
 * memory: the drafts of an MTP step) in s's window than the row before, as the verification rows would after
 * accepting them: s's pairs and the token each push moves out of the window, uploaded to c's infer_sample buffer and
 * set in a (pen, n_pen, pen_push, pen_drop and the three penalties). Nothing when s has no penalties. */
infer_status sampler_rows_penalties(infer_ctx *c, infer_sampler *s, int32_t n_rows, const int32_t *push,
                                    struct sample_args *a);
/* The sample op's arguments for n_rows rows of logits (stride n_vocab) under s's chain without penalties, with the
 * caller's u, out, scratch and list (all in the backend's memory). */
struct sample_args sampler_list_args(const infer_sampler *s, const float *logits, int32_t n_rows, const double *u,
                                     int32_t *out, void *scratch, struct sample_list *list);
/* What fixes the chain's arguments, for a graph key: top-k and the bits of temp, top-p and min-p. */
void sampler_chain_key(const infer_sampler *s, int32_t key[4]);

#endif
