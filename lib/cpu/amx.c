/* amx: the probe, the tile configuration and the C emulation of the four tile instructions the GEMMs use
 * (amx.h says why and how). */
#include "amx.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { AMX_TILES = 8, AMX_ROWS = 16, AMX_COLSB = 64 };
enum { ARCH_REQ_XCOMP_PERM_ = 0x1023, XFEATURE_XTILEDATA_ = 18 };

/* LDTILECFG's 64-byte operand: palette 1, per tile its bytes per row and its rows */
struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* CPUID.(7,0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8; then the kernel must grant the tile data state (Linux 5.16+) */
static int amx_hardware(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(d >> 24 & 1) || !(d >> 25 & 1)) return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM_, XFEATURE_XTILEDATA_) == 0;
}

int cpu_amx_probe(void) {
    static int cached = -1;
    if (cached >= 0) return cached;
    const char *e = getenv("INFER_CPU_AMX");
    int mode = AMX_NONE;
    if (e && !strcmp(e, "emu")) mode = AMX_EMU;
    else if (!(e && !strcmp(e, "off")) && amx_hardware()) mode = AMX_HW;
    cached = mode;
    return cached;
}

int cpu_amx_for(int variant) {
    if (variant != CPU_ISA_AMX && variant != CPU_ISA_BEST) return AMX_NONE;
    return cpu_isa_has(CPU_ISA_AMX) ? cpu_amx_probe() : AMX_NONE;
}

/* the emulated tile file of this thread */
static _Thread_local struct {
    uint8_t data[AMX_TILES][AMX_ROWS][AMX_COLSB];
    int rows[AMX_TILES], colsb[AMX_TILES];
} emu;

static void amx_shape(struct amx_config *c, int t, int rows, int colsb) {
    c->rows[t] = (uint8_t)rows;
    c->colsb[t] = (uint16_t)colsb;
}

void amx_begin(int mode, int k_bytes) {
    struct amx_config c __attribute__((aligned(64)));
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++) amx_shape(&c, t, AMX_ROWS, AMX_COLSB);
    amx_shape(&c, 4, AMX_ROWS, k_bytes);
    amx_shape(&c, 6, AMX_ROWS, k_bytes);
    amx_shape(&c, 5, k_bytes / 4, AMX_COLSB);
    amx_shape(&c, 7, k_bytes / 4, AMX_COLSB);
    if (mode == AMX_HW) {
        __asm__ volatile("ldtilecfg %0" ::"m"(c));
        return;
    }
    memset(emu.data, 0, sizeof emu.data);
    for (int t = 0; t < AMX_TILES; t++) {
        emu.rows[t] = c.rows[t];
        emu.colsb[t] = c.colsb[t];
    }
}

void amx_end(int mode) {
    if (mode == AMX_HW) __asm__ volatile("tilerelease" ::);
}

/* a load or zero clears the rest of the tile, as the hardware does */
void amx_emu_load(int tile, const void *base, size_t stride) {
    memset(emu.data[tile], 0, sizeof emu.data[tile]);
    for (int r = 0; r < emu.rows[tile]; r++)
        memcpy(emu.data[tile][r], (const char *)base + (size_t)r * stride, (size_t)emu.colsb[tile]);
}

void amx_emu_store(int tile, void *base, size_t stride) {
    for (int r = 0; r < emu.rows[tile]; r++)
        memcpy((char *)base + (size_t)r * stride, emu.data[tile][r], (size_t)emu.colsb[tile]);
}

void amx_emu_zero(int tile) { memset(emu.data[tile], 0, sizeof emu.data[tile]); }

/* C[m][n] += sum over k, i of int8 A[m][4k+i] · uint8 B[k][4n+i], int32 lanes wrapping. Shapes the hardware would
 * refuse (#UD) fill C with 0x7f bytes instead, so that a test sees them. */
void amx_emu_dpbsud(int c, int a, int b) {
    const int m_rows = emu.rows[c], n = emu.colsb[c] / 4, k = emu.colsb[a] / 4;
    if (emu.rows[a] != m_rows || emu.rows[b] != k || emu.colsb[b] != emu.colsb[c]) {
        memset(emu.data[c], 0x7f, sizeof emu.data[c]);
        return;
    }
    for (int m = 0; m < m_rows; m++)
        for (int j = 0; j < n; j++) {
            uint32_t acc;
            memcpy(&acc, &emu.data[c][m][4 * j], 4);
            for (int q = 0; q < k; q++)
                for (int i = 0; i < 4; i++)
                    acc += (uint32_t)((int32_t)(int8_t)emu.data[a][m][4 * q + i] * (int32_t)emu.data[b][q][4 * j + i]);
            memcpy(&emu.data[c][m][4 * j], &acc, 4);
        }
}

#else /* not x86-64: no tiles */
int cpu_amx_probe(void) { return AMX_NONE; }
int cpu_amx_for(int variant) {
    (void)variant;
    return AMX_NONE;
}
#endif
