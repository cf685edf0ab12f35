#!/bin/sh
# run-sample.sh: tests/test-cuda-sample.c against kernels/sample.cu's kernel run on the CPU (tests/emu/emu.h,
# fibers.inc), for checking the kernel's logic where there is no GPU. Slow (~1 minute per 1000 rows of
# small vocabularies; 32000 logits take ~0.2 s a row): pass the vocabulary sizes to try, e.g.
#   tests/emu/run-sample.sh "1, 7, 1000, 1024, 1025"      (default)   or   "32000"
# Needs build/libinfer.a (make INFER_CUDA=0 is enough). The launcher is not compiled (<<< >>>): its
# checks are repeated in emu_sample below and must be kept in step with cuda_sample.
set -e
cd "$(dirname "$0")/../.."
VOCABS=${1:-1, 7, 1000, 1024, 1025}
B=${BUILD:-build}/emu
mkdir -p "$B"
{
    sed -e 's|#include "common.cuh"|#include "emu.h"|' -e '/^cudaError_t cuda_sample/,$d' kernels/sample.cu
    cat tests/emu/fibers.inc
    cat <<'EOC'
static struct sample_args emu_a;
static float emu_lmp;
static void emu_entry() {
    sample_kernel(emu_a, emu_lmp);
    emu_state[emu_cur] = 3;
}
extern "C" int emu_sample(const struct sample_args *a) { /* cuda_sample's checks, then the blocks */
    if (!a->logits || !a->out || !a->scratch || a->n_rows < 0 || a->n_vocab < 1 || a->stride < a->n_vocab ||
        a->n_pen < 0 || (a->n_pen && !a->pen) || (a->temp > 0.0f && !a->u))
        return 1;
    const bool small_k = a->top_k > 0 && a->top_k <= SAMPLE_MAX_CAND;
    if (a->temp > 0.0f && a->n_vocab > SAMPLE_MAX_CAND && !small_k && !(a->top_p < 1.0f) && !(a->min_p > 0.0f))
        return 1;
    emu_a = *a, emu_lmp = a->min_p > 0.0f ? logf(a->min_p) : 0.0f;
    for (int r = 0; r < a->n_rows; r++)
        if (emu_block((unsigned)r)) return 2;
    return 0;
}
EOC
} > "$B/sample_emu.cc"
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Wno-unknown-pragmas -Itests/emu -Iinclude -Ikernels -c "$B/sample_emu.cc" -o "$B/sample_emu.o"
gcc -std=c11 -D_GNU_SOURCE -O1 -ffp-contract=off -Wall -DSAMPLE_EMU "-DSAMPLE_VOCABS=$VOCABS" -Iinclude -Ilib -Ikernels -Itests \
    -c tests/test-cuda-sample.c -o "$B/test-cuda-sample.o"
gcc -std=c11 -O1 -Wall -Iinclude -c tests/sample_rows.c -o "$B/sample_rows.o"
g++ -o "$B/test-cuda-sample" "$B/test-cuda-sample.o" "$B/sample_rows.o" "$B/sample_emu.o" "${BUILD:-build}/libinfer.a" -lpthread -lm -ldl
exec "$B/test-cuda-sample"
