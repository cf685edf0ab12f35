/* stream: see stream.h. */
#include "stream.h"

#include "spec.h"

/* The next token after the last decoded row, as the mode samples it. */
static int stream_pick(infer_ctx *c, infer_sampler *s, enum stream_mode mode, int32_t *t) {
    if (mode != STREAM_PLAIN_HOST) return infer_sample(c, s, -1, t) == INFER_OK;
    const float *row = infer_logits(c, -1);
    if (!row) return 0;
    *t = infer_sampler_sample(s, row);
    return 1;
}

int32_t stream_continue(infer_ctx *c, infer_sampler *s, enum stream_mode mode, int32_t last, int32_t *out, int32_t n,
                        int32_t *next, struct stream_rec *r) {
    int32_t got = 0;
    if (n < 1) return 0;
    out[got++] = last;
    while (got < n) {
        if (mode != STREAM_SPEC) {
            infer_batch one = {1, &last, NULL, NULL, NULL};
            if (infer_decode(c, &one) != INFER_OK || !stream_pick(c, s, mode, &last)) return got;
            out[got++] = last;
            continue;
        }
        int32_t step[INFER_MAX_DRAFT + 1], k = 0;
        const uint64_t bus0 = infer_ctx_bus_bytes(c);
        if (infer_spec_step(c, s, 0, last, step, INFER_MAX_DRAFT + 1, &k) != INFER_OK || k < 1) return got;
        if (r) r->bus += infer_ctx_bus_bytes(c) - bus0;
        if (r && r->drafts) {
            int32_t ids[INFER_MAX_DRAFT];
            const int32_t nd = spec_last_drafts(c, ids);
            for (int32_t i = 0; i < nd && r->n_drafts < r->cap; i++) r->drafts[r->n_drafts++] = ids[i];
        }
        for (int32_t i = 0; i < k && got < n; i++) out[got++] = step[i];
        last = step[k - 1];
    }
    if (next) *next = last;
    return got;
}

int32_t stream_run(infer_ctx *c, infer_sampler *s, enum stream_mode mode, const int32_t *prompt, int32_t n_prompt,
                   int32_t *out, int32_t n, struct stream_rec *r) {
    infer_batch b = {n_prompt, prompt, NULL, NULL, NULL};
    int32_t first = -1;
    if (infer_decode(c, &b) != INFER_OK || !stream_pick(c, s, mode == STREAM_SPEC ? STREAM_PLAIN : mode, &first))
        return 0;
    return stream_continue(c, s, mode, first, out, n, NULL, r);
}
