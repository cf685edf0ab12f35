/* amx: Intel AMX-INT8 tiles for the strip GEMMs (mm_q32.c, mm_kq.c), on the hardware or emulated in C.
 *
 * Why: a TDPBSUD multiplies a 16-token x K-byte activation tile by a K x 16-row weight tile in one instruction
 * (16·16·K multiply-adds), where vpdpbusd does 64. The strip GEMMs already keep their unpacked weights in the
 * layout a B tile wants (byte 4r+k of vector g: row r's element 4g+k, unsigned), so a block's or sub-block's
 * exact integer sums for 16 tokens x 16 rows come from one tile load of each side and one TDPBSUD; the per-block
 * f32 steps stay as in the AVX-512 tiles, so the results are the same bits.
 *
 * The tile file, as the GEMMs use it (one configuration per call, k_bytes = the values per sub-block, 32 or 16):
 * tmm0..3 = C, 16 tokens x 16 rows of int32; tmm4, tmm6 = A, 16 tokens x k_bytes signed activation bytes;
 * tmm5, tmm7 = B, k_bytes / 4 rows of 64 unsigned weight bytes.
 *
 * Modes (cpu_amx_mode): AMX_HW on a CPU with AMX-TILE and AMX-INT8 whose kernel grants the tile state
 * (arch_prctl ARCH_REQ_XCOMP_PERM); AMX_EMU when INFER_CPU_AMX=emu on an AVX-512 VNNI CPU without them: each tile
 * instruction done in C on a per-thread tile file, so that the tile kernels' layouts and arithmetic are tested on
 * every machine (tests/run.sh runs test-ops' matmuls and test-repack so). INFER_CPU_AMX=off (or INFER_CPU_ISA
 * below amx) turns AMX off. */
#ifndef INFER_CPU_AMX_H
#define INFER_CPU_AMX_H

#include <stddef.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { AMX_NONE, AMX_HW, AMX_EMU };
/* tokens per A tile (its rows), the GEMMs' token step on AMX */
enum { AMX_TOK = 16 };

/* What this process has: AMX_NONE, AMX_HW or AMX_EMU (probed once; the tile state requested once). */
int cpu_amx_probe(void);
/* The mode a matmul of ISA variant `variant` (enum cpu_isa_level) runs its tiles in: AMX_NONE unless the variant is
 * CPU_ISA_AMX or CPU_ISA_BEST on a machine whose best level is AMX. */
int cpu_amx_for(int variant);

/* Configures this thread's tiles as above (k_bytes 32 or 16); amx_end releases them. */
void amx_begin(int mode, int k_bytes);
void amx_end(int mode);

/* The emulated instructions on this thread's tile file (Intel SDM semantics for the configured shapes). */
void amx_emu_load(int tile, const void *base, size_t stride);
void amx_emu_store(int tile, void *base, size_t stride);
void amx_emu_zero(int tile);
void amx_emu_dpbsud(int c, int a, int b);

/* Tile operations with literal tile numbers (the instructions encode them). A load is preceded by a compiler
 * barrier: the intrinsics' asm does not tell the compiler it reads memory the caller has just written. */
#define AMX_ZERO(mode, t)                                                                                          \
    do {                                                                                                           \
        if ((mode) == AMX_EMU) amx_emu_zero(t);                                                                    \
        else _tile_zero(t);                                                                                        \
    } while (0)
#define AMX_LOAD(mode, t, base, stride)                                                                            \
    do {                                                                                                           \
        if ((mode) == AMX_EMU) {                                                                                   \
            amx_emu_load(t, base, stride);                                                                         \
        } else {                                                                                                   \
            __asm__ volatile("" ::: "memory");                                                                     \
            _tile_loadd(t, base, stride);                                                                          \
        }                                                                                                          \
    } while (0)
#define AMX_STORE(mode, t, base, stride)                                                                           \
    do {                                                                                                           \
        if ((mode) == AMX_EMU) amx_emu_store(t, base, stride);                                                     \
        else _tile_stored(t, base, stride);                                                                        \
    } while (0)
#define AMX_DPBSUD(mode, c, a, b)                                                                                  \
    do {                                                                                                           \
        if ((mode) == AMX_EMU) amx_emu_dpbsud(c, a, b);                                                            \
        else _tile_dpbsud(c, a, b);                                                                                \
    } while (0)

#endif
