/* gdn: placeholder until the gated delta rule lands (see kernels.h gdn_args). */
#include "cpu.h"

infer_status cpu_gdn(const struct gdn_args *a, struct pool *p) {
    (void)a, (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_gdn: not implemented yet");
}
