/* gen-grids: writes kernels/grids.h, the lattice codebooks of the IQ1/IQ2/IQ3 types, read out of the real
 * llama.cpp (the npm peer's libggml-base, `make peer`) through its public dequantize_row_<t> functions.
 *
 * Each codebook entry is a group of 8 (IQ1/IQ2) or 4 (IQ3) small values. A block is built whose groups name
 * entries k, k+1, ... with every sign bit clear and a known power-of-two step, the peer decodes it, and the
 * values divided by the step are the entry's bytes. The tables are facts of the file format (the same bytes
 * every GGUF reader must use); this program only transcribes them. test-quant then checks, through the peer,
 * that every type decodes bit for bit as ggml does.
 *
 * Usage (from the repository root): make grids   (builds build/gen-grids and writes kernels/grids.h)
 * Not part of the library or the tools: main() here is a developer's generator, built only by `make grids`.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tests/peer.h"

typedef void (*deq_fn)(const void *x, float *y, int64_t k);

static deq_fn peer_deq(const char *name) {
    const char *why = "";
    void *h = peer_open("libggml-base.so", &why);
    deq_fn f = h ? (deq_fn)peer_sym(h, name) : NULL;
    if (!f) {
        fprintf(stderr, "gen-grids: %s: %s\n", name, h ? "symbol missing" : why);
        exit(1);
    }
    return f;
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* One decoded value as a grid byte: v = step * g + delta, g an integer (signed for IQ1). */
static uint8_t grid_byte(float v, float step, float delta) {
    const float g = (v - delta) / step;
    const int gi = (int)(g < 0 ? g - 0.5f : g + 0.5f);
    if ((float)gi != g || gi < -128 || gi > 255) {
        fprintf(stderr, "gen-grids: value %g is not step %g * integer + %g\n", (double)v, (double)step, (double)delta);
        exit(1);
    }
    return (uint8_t)gi;
}

/* The codebook entries named by a decoded 256-value block: entries first..first+n_groups-1, groups of w. */
static void read_entries(const float *y, int n_groups, int w, float step, float delta, uint64_t *grid) {
    for (int g = 0; g < n_groups; g++) {
        uint64_t e = 0;
        for (int j = 0; j < w; j++) e |= (uint64_t)grid_byte(y[g * w + j], step, delta) << (8 * j);
        grid[g] = e;
    }
}

enum { F16_ONE = 0x3C00 };

/* IQ2_XXS (66 B): d, then per 32 values two words: four 8-bit entry indices, then signs (7 bits x 4) and a
 * 4-bit scale s in the top bits; step d * (0.5 + s) / 4 = 1/8 for s = 0. */
static void gen_iq2xxs(uint64_t *grid) {
    const deq_fn f = peer_deq("dequantize_row_iq2_xxs");
    for (int b = 0; b < 256 / 32; b++) {
        uint8_t blk[66] = {0};
        float y[256];
        put16(blk, F16_ONE);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) blk[2 + 8 * ib + l] = (uint8_t)(32 * b + 4 * ib + l);
        f(blk, y, 256);
        read_entries(y, 32, 8, 0.125f, 0, grid + 32 * b);
    }
}

/* IQ2_XS (74 B): d, 32 x u16 (9-bit index | signs << 9), scales[8]; step 1/8 for scale 0. */
static void gen_iq2xs(uint64_t *grid) {
    const deq_fn f = peer_deq("dequantize_row_iq2_xs");
    for (int b = 0; b < 512 / 32; b++) {
        uint8_t blk[74] = {0};
        float y[256];
        put16(blk, F16_ONE);
        for (int i = 0; i < 32; i++) put16(blk + 2 + 2 * i, (uint16_t)(32 * b + i));
        f(blk, y, 256);
        read_entries(y, 32, 8, 0.125f, 0, grid + 32 * b);
    }
}

/* IQ2_S (82 B): d, qs[64] (32 low index bytes, then 32 sign bytes), qh[8] (2 high index bits per group), scales[8]. */
static void gen_iq2s(uint64_t *grid) {
    const deq_fn f = peer_deq("dequantize_row_iq2_s");
    for (int b = 0; b < 1024 / 32; b++) {
        uint8_t blk[82] = {0};
        float y[256];
        put16(blk, F16_ONE);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const int k = 32 * b + 4 * ib + l;
                blk[2 + 4 * ib + l] = (uint8_t)k;
                blk[66 + ib] |= (uint8_t)((k >> 8) << (2 * l));
            }
        f(blk, y, 256);
        read_entries(y, 32, 8, 0.125f, 0, grid + 32 * b);
    }
}

/* IQ3_XXS (98 B): d, 64 index bytes (groups of 4), then per 32 values a word of signs and scale; step 1/4. */
static void gen_iq3xxs(uint64_t *grid) {
    const deq_fn f = peer_deq("dequantize_row_iq3_xxs");
    for (int b = 0; b < 256 / 64; b++) {
        uint8_t blk[98] = {0};
        float y[256];
        put16(blk, F16_ONE);
        for (int i = 0; i < 64; i++) blk[2 + i] = (uint8_t)(64 * b + i);
        f(blk, y, 256);
        read_entries(y, 64, 4, 0.25f, 0, grid + 64 * b);
    }
}

/* IQ3_S (110 B): d, qs[64] (low index bytes), qh[8] (bit i of qh[ib] = bit 8 of group 8ib+i), signs[32],
 * scales[4]; step d * (1 + 2 * 0) = 1. */
static void gen_iq3s(uint64_t *grid) {
    const deq_fn f = peer_deq("dequantize_row_iq3_s");
    for (int b = 0; b < 512 / 64; b++) {
        uint8_t blk[110] = {0};
        float y[256];
        put16(blk, F16_ONE);
        for (int i = 0; i < 64; i++) {
            const int k = 64 * b + i;
            blk[2 + i] = (uint8_t)k;
            blk[66 + i / 8] |= (uint8_t)((k >> 8) << (i % 8));
        }
        f(blk, y, 256);
        read_entries(y, 64, 4, 1.0f, 0, grid + 64 * b);
    }
}

/* IQ1_S (50 B): d, qs[32] (low index bytes), qh[8] as u16 (3 high bits per group, scale in bits 12..14, delta
 * sign in bit 15); values d * (2*0 + 1) * (g + 1/8). */
static void gen_iq1s(uint64_t *grid) {
    const deq_fn f = peer_deq("dequantize_row_iq1_s");
    for (int b = 0; b < 2048 / 32; b++) {
        uint8_t blk[50] = {0};
        float y[256];
        put16(blk, F16_ONE);
        for (int ib = 0; ib < 8; ib++) {
            uint16_t qh = 0;
            for (int l = 0; l < 4; l++) {
                const int k = 32 * b + 4 * ib + l;
                blk[2 + 4 * ib + l] = (uint8_t)k;
                qh |= (uint16_t)((k >> 8) << (3 * l));
            }
            put16(blk + 34 + 2 * ib, qh);
        }
        f(blk, y, 256);
        read_entries(y, 32, 8, 1.0f, 0.125f, grid + 32 * b);
    }
}

static void print_table(const char *macro, const uint64_t *g, int n, int bytes) {
    printf("#define %s \\\n    { \\\n", macro);
    const int per_line = bytes == 8 ? 4 : 8;
    for (int i = 0; i < n; i++) {
        if (i % per_line == 0) printf("        ");
        if (bytes == 8) printf("0x%016" PRIx64 "ull,", g[i]);
        else printf("0x%08" PRIx32 "u,", (uint32_t)g[i]);
        printf(i % per_line == per_line - 1 || i == n - 1 ? " \\\n" : " ");
    }
    printf("    }\n\n");
}

int main(void) {
    static uint64_t iq2xxs[256], iq2xs[512], iq2s[1024], iq3xxs[256], iq3s[512], iq1s[2048];
    gen_iq2xxs(iq2xxs);
    gen_iq2xs(iq2xs);
    gen_iq2s(iq2s);
    gen_iq3xxs(iq3xxs);
    gen_iq3s(iq3s);
    gen_iq1s(iq1s);
    printf("/* grids.h: the lattice codebooks of the IQ1_S/IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S types, as\n"
           " * value lists for blocks.h (which declares them for the host and the device). Generated by tools/dev/gen-grids.c\n"
           " * (`make grids`) from llama.cpp's own decoder; do not edit. Entry k of a grid is one group of 8 (IQ1, IQ2) or\n"
           " * 4 (IQ3) values, byte j = value j: IQ2 bytes are 8, 25 or 43 (IQ2_XXS/XS) and up to 43 (IQ2_S), IQ3 bytes\n"
           " * are odd steps up to 62, IQ1 bytes are -1, 0, 1 as int8. */\n"
           "#ifndef INFER_GRIDS_H\n#define INFER_GRIDS_H\n\n");
    print_table("BLOCKS_IQ2XXS_GRID", iq2xxs, 256, 8);
    print_table("BLOCKS_IQ2XS_GRID", iq2xs, 512, 8);
    print_table("BLOCKS_IQ2S_GRID", iq2s, 1024, 8);
    print_table("BLOCKS_IQ3XXS_GRID", iq3xxs, 256, 4);
    print_table("BLOCKS_IQ3S_GRID", iq3s, 512, 4);
    print_table("BLOCKS_IQ1S_GRID", iq1s, 2048, 8);
    printf("#endif\n");
    return 0;
}
