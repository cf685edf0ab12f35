/* sample_rows: logit rows for the sampling tests (see sample_rows.h). */
#include "sample_rows.h"

#include <math.h>

const char *const sample_mode_name[MODE_N] = {"continuous", "ties", "peaked", "nan/-inf", "all equal"};

void sample_fill_row(float *l, int32_t n, int mode, uint32_t (*rnd)(void)) {
    for (int32_t i = 0; i < n; i++) {
        switch (mode) {
        case MODE_CONT: l[i] = (float)((double)rnd() / 4294967296.0 * 20 - 10); break;
        case MODE_TIES: l[i] = (float)(rnd() % 6) * 0.75f - 2; break;
        case MODE_PEAK: l[i] = (float)((double)rnd() / 4294967296.0 * 4 - 2) + (rnd() % 50 == 0 ? 9.0f : 0.0f); break;
        case MODE_NAN: {
            const uint32_t r = rnd() % 10;
            l[i] = r == 0 ? NAN : r == 1 ? -INFINITY : (float)(rnd() % 40) * 0.25f - 5;
            break;
        }
        default: l[i] = 1.5f; break;
        }
    }
}
