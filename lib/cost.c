/* cost: bytes moved and flops of an op call, for the roofline columns of bench-ops and llm-bench.
 * Counts the minimum traffic (every input read once, every output written once); backends that
 * read more show it as a lower % of roofline. */
#include "kernels.h"
#include "quant.h"

struct op_cost mmv_cost(const struct mmv_args *a) {
    struct op_cost c = {0, 0, 0};
    const double w = (double)quant_row_bytes(a->type, a->n_in) * (double)a->n_out;
    const double n_w = a->epilogue == MMV_SWIGLU ? 2.0 : 1.0;
    /* the CPU's partner blocks (Q8_0, Q8_1 or Q8_K; CUDA's q8 split is Q8_1's size), or f32 */
    const int32_t at = mmv_act_type_cpu(a->type);
    const double act = at < 0 ? 4.0 * (double)a->n_in : (double)quant_row_bytes(at, a->n_in);
    c.bytes_read = n_w * w + (double)a->n_tokens * act + (a->epilogue == MMV_ADD ? 4.0 * (double)(a->n_tokens * a->n_out) : 0);
    c.bytes_written = 4.0 * (double)(a->n_tokens * a->n_out);
    c.flops = 2.0 * n_w * (double)a->n_in * (double)a->n_out * (double)a->n_tokens;
    return c;
}

struct op_cost gdn_cost(const struct gdn_args *a) {
    /* the state is read and written once per call; q, k, v, a, b read and out written per token */
    const double state = (double)a->n_vhead * a->d_state * a->d_state * sizeof(float);
    const double per_tok = ((double)2 * a->n_group * a->d_state + 2.0 * a->n_vhead * a->d_state + 2.0 * a->n_vhead) *
                           sizeof(float);
    struct op_cost c = {state + per_tok * a->n_tokens, state + (double)a->n_tokens * a->n_vhead * a->d_state * 4,
                        (double)a->n_tokens * a->n_vhead * a->d_state * a->d_state * 8};
    return c;
}
