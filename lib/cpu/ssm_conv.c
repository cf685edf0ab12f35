/* ssm_conv: placeholder until the GDN conv lands (see kernels.h ssm_conv_args). */
#include "cpu.h"

infer_status cpu_ssm_conv(const struct ssm_conv_args *a, struct pool *p) {
    (void)a, (void)p;
    return infer_fail(INFER_E_UNSUPPORTED, "cpu_ssm_conv: not implemented yet");
}
