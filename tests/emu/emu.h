/* emu.h: stands in for kernels/common.cuh so that a kernel's source compiles with g++ and runs on the
 * CPU, one block at a time as 1024 cooperative fibers (fibers.inc). For checking a kernel's logic on a
 * machine without a GPU; nothing about speed or memory-model subtleties can be learnt from it.
 * Emulated: __syncthreads (all live threads of the block), __ballot_sync / __shfl_xor_sync (the 32
 * lanes of a warp; each is a warp barrier, and a warp whose lanes wait at different kinds of barrier is
 * reported as divergence), shared atomics (fibers never preempt each other), the bit casts, __popc,
 * __fadd_rn / __fmul_rn (plain float ops: compile with -ffp-contract=off). Device expf / exp are glibc's.
 */
#ifndef INFER_EMU_H
#define INFER_EMU_H

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels.h"

using std::isnan;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __grid_constant__
#define __shared__ static /* one block runs at a time */
#define WARP_SIZE 32

struct emu_dim3 {
    unsigned x, y, z;
};
extern emu_dim3 threadIdx, blockIdx;
extern int emu_cur;              /* the running fiber = threadIdx.x */
extern uint64_t emu_slot[1024];  /* warp exchange slots */
void emu_wait(int kind);         /* 1: block barrier, 2: warp barrier */

static inline void __syncthreads() { emu_wait(1); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) {
    const unsigned o = *p;
    *p += v;
    return o;
}
static inline int min(int a, int b) { return a < b ? a : b; }
static inline unsigned __ballot_sync(unsigned, bool pred) {
    emu_slot[emu_cur] = pred;
    emu_wait(2);
    unsigned m = 0;
    for (int l = 0; l < 32; l++)
        if (emu_slot[(emu_cur & ~31) + l]) m |= 1u << l;
    emu_wait(2);
    return m;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int o) {
    uint64_t w = 0;
    memcpy(&w, &v, sizeof v);
    emu_slot[emu_cur] = w;
    emu_wait(2);
    const uint64_t x = emu_slot[(emu_cur & ~31) | ((emu_cur & 31) ^ o)];
    T r;
    memcpy(&r, &x, sizeof r);
    emu_wait(2);
    return r;
}
static inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

#endif
