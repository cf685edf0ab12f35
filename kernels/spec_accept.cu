/* spec_accept.cu: the acceptance of k MTP drafts on the device (kernels.h spec_accept_args), so that a speculative
 * step brings back k + 2 ints instead of 2k + 1 rows of n_vocab floats (temperature > 0) or the drafts and every
 * row's pick (greedy: one thread compares the picks with the drafts, spec_accept_greedy).
 * One block walks the rows in order (a row matters only when every draft before it was kept). Thread 0 looks up
 * p(d) and q(d) and decides; on a rejection every thread takes some of p's survivors and computes their residual
 * max(0, p(c) - q(c)) (a scan of q's list each) into shared memory, and thread 0 sums and walks them in p's order
 * (spec_residual_pick, which the CPU twin calls too), so the two backends agree bit for bit.
 * Cost: lists of at most SAMPLE_MAX_CAND survivors; with the default chain (top-k 40) a few thousand compares. A
 * malformed list (n outside 1..SAMPLE_MAX_CAND) makes out[0] = 0, which the caller reports.
 */
#include "common.cuh"

enum { SPEC_ACCEPT_THREADS = 256 };

static __global__ void __launch_bounds__(SPEC_ACCEPT_THREADS) spec_accept_kernel(const __grid_constant__ struct spec_accept_args a) {
    __shared__ double r[SAMPLE_MAX_CAND];
    __shared__ int32_t verdict; /* -1: the step goes on to the next row; else the row that ends it */
    __shared__ int32_t n, ended;
    if (!a.target) { /* greedy: a compare per row */
        if (threadIdx.x == 0) spec_accept_greedy(&a);
        return;
    }
    if (threadIdx.x == 0) {
        n = 0, ended = 0;
        for (int32_t i = 0; i <= a.k; i++)
            if (a.target[i].n < 1 || a.target[i].n > SAMPLE_MAX_CAND ||
                (i < a.k && (a.draft[i].n < 1 || a.draft[i].n > SAMPLE_MAX_CAND)))
                n = -1;
    }
    __syncthreads();
    if (n < 0) {
        if (threadIdx.x == 0) a.out[0] = 0;
        return;
    }
    for (int32_t i = 0; i < a.k; i++) {
        if (threadIdx.x == 0) {
            const int32_t d = a.drafts[i];
            const double pd = sample_list_prob(a.target + i, d), qd = sample_list_prob(a.draft + i, d);
            verdict = i; /* rejected */
            if ((a.force >= 0 && i < a.force) || (qd > 0 && a.u_acc[i] * qd < pd)) {
                a.out[1 + n++] = d;
                verdict = i == a.force ? -2 : -1; /* -2: kept, and the test hook ends the step here */
            }
        }
        __syncthreads();
        const int32_t v = verdict;
        if (v == -2) {
            if (threadIdx.x == 0) ended = 1;
            break;
        }
        if (v == -1) {
            __syncthreads(); /* verdict is rewritten by the next row */
            continue;
        }
        const struct sample_list *p = a.target + i;
        for (int32_t c = threadIdx.x; c < p->n; c += SPEC_ACCEPT_THREADS) r[c] = spec_residual(p, a.draft + i, c);
        __syncthreads();
        if (threadIdx.x == 0) a.out[1 + n++] = spec_residual_pick(p, r, a.u_res[i], a.p_draw[i]), ended = 1;
        break;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        if (!ended) a.out[1 + n++] = a.p_draw[a.k]; /* every draft kept: the bonus token */
        a.out[0] = n;
    }
}

cudaError_t cuda_spec_accept(const struct spec_accept_args *a, cudaStream_t s) {
    const int greedy = !a->target && !a->draft && !a->u_acc && !a->u_res;
    if ((!greedy && (!a->target || !a->draft || !a->u_acc || !a->u_res)) || !a->drafts || !a->p_draw || !a->out ||
        a->k < 0 || a->k > 64)
        return cudaErrorInvalidValue;
    launch_kernel(spec_accept_kernel, 1, SPEC_ACCEPT_THREADS, 0, s, *a);
    return cudaGetLastError();
}
