/* ptx.cuh: every inline-PTX instruction the kernels use, each behind one named wrapper, so that the
 * CUDA emulator (emu/, INFER_EMU) can give each its twin, written from the PTX ISA's definition of the
 * instruction (fragment layouts included). A kernel never writes asm() itself.
 *   ptx_mma_16816     mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: c += A (16x16, row) x B (16x8,
 *                     col) for the warp; a[4], b0 b1 and c[4] are this lane's fragments (PTX ISA
 *                     "Matrix Fragments for mma.m16n8k16 with floating point type"): lane = 4 g + t,
 *                     a holds A[g][2t..2t+1], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..] (low half
 *                     first), b0 B[2t..2t+1][g], b1 B[2t+8..2t+9][g], c C[g][2t..2t+1], C[g+8][2t..2t+1].
 *   ptx_cvt_f32_f16   cvt.f32.f16: an IEEE half to float (exact).
 */
#ifndef INFER_PTX_CUH
#define INFER_PTX_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef INFER_EMU
#define ptx_mma_16816 emu_mma_16816
#define ptx_cvt_f32_f16 emu_cvt_f32_f16
#else
static __device__ __forceinline__ void ptx_mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ float ptx_cvt_f32_f16(uint16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
#endif

#endif
