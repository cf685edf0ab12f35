/* randw: random valid weights for the kernel tests (see randw.h). */
#include "randw.h"

#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "quant.h"

/* Where the f16 scale fields of each quantised block type are. */
struct randw_scales {
    int32_t type;
    int n;
    int off[2];
};
static const struct randw_scales randw_scales[] = {
    {INFER_TYPE_Q8_0, 1, {0}},    {INFER_TYPE_Q4_0, 1, {0}},    {INFER_TYPE_IQ4_NL, 1, {0}}, {INFER_TYPE_IQ4_XS, 1, {0}},
    {INFER_TYPE_Q4_1, 2, {0, 2}}, {INFER_TYPE_Q5_0, 1, {0}},    {INFER_TYPE_Q5_1, 2, {0, 2}},
    {INFER_TYPE_Q2_K, 2, {80, 82}}, {INFER_TYPE_Q3_K, 1, {108}},
    {INFER_TYPE_Q4_K, 2, {0, 2}}, {INFER_TYPE_Q5_K, 2, {0, 2}}, {INFER_TYPE_Q6_K, 1, {208}},
    {INFER_TYPE_IQ2_XXS, 1, {0}}, {INFER_TYPE_IQ2_XS, 1, {0}}, {INFER_TYPE_IQ2_S, 1, {0}}, {INFER_TYPE_IQ3_XXS, 1, {0}},
    {INFER_TYPE_IQ3_S, 1, {0}},   {INFER_TYPE_IQ1_S, 1, {0}},  {INFER_TYPE_TQ1_0, 1, {52}}, {INFER_TYPE_TQ2_0, 1, {64}},
};

static float randw_f(uint32_t (*rnd)(void), float lo, float hi) {
    return lo + (hi - lo) * (float)(rnd() % 1000001) / 1000000.0f;
}

void randw_weights(int32_t type, uint8_t *w, int64_t n_in, int64_t n_out, uint32_t (*rnd)(void)) {
    const struct quant_type *qt = quant_type(type);
    const size_t rb = quant_row_bytes(type, n_in), bytes = rb * (size_t)n_out;
    if (qt->blck == 1) {
        float *row = malloc(sizeof(float) * (size_t)n_in);
        for (int64_t r = 0; row && r < n_out; r++) {
            for (int64_t c = 0; c < n_in; c++) row[c] = randw_f(rnd, -1, 1);
            quant_quantize_row(type, row, w + rb * (size_t)r, n_in);
        }
        free(row);
        return;
    }
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    /* MXFP4: exponents 119..122, |w| up to 12 * 2^-6 */
    for (size_t b = 0; type == INFER_TYPE_MXFP4 && b < bytes / (size_t)qt->bytes; b++)
        w[b * (size_t)qt->bytes] = (uint8_t)(119 + rnd() % 4);
    /* IQ1_M: the f16 scale is the four top nibbles of the scale words @48 */
    for (size_t b = 0; type == INFER_TYPE_IQ1_M && b < bytes / (size_t)qt->bytes; b++) {
        const uint16_t h = quant_f32_to_f16(randw_f(rnd, 0.001f, 0.02f) * (rnd() % 4 == 0 ? -1.0f : 1.0f));
        for (int k = 0; k < 4; k++) {
            uint8_t *hi = w + b * (size_t)qt->bytes + 48 + 2 * k + 1;
            *hi = (uint8_t)((*hi & 0x0F) | ((h >> (4 * k)) & 0xF) << 4);
        }
    }
    for (size_t f = 0; f < sizeof randw_scales / sizeof *randw_scales; f++) {
        if (randw_scales[f].type != type) continue;
        for (size_t b = 0; b < bytes / (size_t)qt->bytes; b++)
            for (int k = 0; k < randw_scales[f].n; k++) {
                uint16_t h = quant_f32_to_f16(randw_f(rnd, 0.001f, 0.02f) * (rnd() % 4 == 0 ? -1.0f : 1.0f));
                memcpy(w + b * (size_t)qt->bytes + randw_scales[f].off[k], &h, 2);
            }
    }
}
