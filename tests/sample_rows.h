/* sample_rows: logit rows for the sampling tests (test-sample-op, test-ops), in the shapes that
 * stress a sampler: continuous, many ties, one peak, NaN / -inf entries, all equal. */
#ifndef TEST_SAMPLE_ROWS_H
#define TEST_SAMPLE_ROWS_H

#include <stdint.h>

enum { MODE_CONT, MODE_TIES, MODE_PEAK, MODE_NAN, MODE_FLAT, MODE_N };
extern const char *const sample_mode_name[MODE_N];

/* n logits of kind mode into l, from the caller's generator (32 random bits per call). */
void sample_fill_row(float *l, int32_t n, int mode, uint32_t (*rnd)(void));

#endif
