/* util: what the op tests share (test-ops' ref, cpu and cuda columns, bench-free): one seeded
 * generator, inputs in ranges, outputs pre-filled with NaN, random weights of every type, NMSE, and
 * device mirrors of host buffers so that one runner drives the CPU op and the CUDA launcher alike.
 */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* ---- the generator (xorshift64; one stream for the whole binary, so a case depends on what ran before
 * it only through this state: util_seed at the start of each case keeps -o / -t selections reproducible) ----
 */
void util_seed(uint64_t seed);
uint32_t util_u32(void);
float util_unif(float lo, float hi);
void util_fill(float *x, int64_t n, float lo, float hi);
/* n floats of NaN (malloc; n 0 gives a valid pointer) */
float *util_nan(int64_t n);

/* Block size of a weight type (1 for float types). */
int util_blck(int32_t type);
/* n_rows rows of n weights of any type from this generator (randw.h: random bits with small finite
 * scales, float types uniform in [-1, 1]). */
void *util_weights(int32_t type, int64_t n_rows, int64_t n);
/* The same through lib/quant.c's quantisers (llama-quantize's values) from gaussian-ish rows. */
void *util_weights_quantised(int32_t type, int64_t n_rows, int64_t n);

/* sum (y - r)^2 / sum r^2 (or the plain sum when r is 0); *nan = 1 if y holds a NaN or Inf. */
double util_nmse(const float *y, const double *r, int64_t n, int *nan);
/* max |y - r| over n values (NaN: infinite) and where; *rmax = max |r| when not NULL. */
double util_max_diff(const float *y, const double *r, int64_t n, int64_t *at, double *rmax);

/* ---- device mirrors (INFER_CUDA builds): register the pointer fields of an args struct that is a copy of
 * the host one, then upload: host ranges that overlap (y aliasing x, b and a inside one ba buffer) become
 * one device buffer, so aliasing is kept; each field is rewritten to its device address. finish waits
 * for the device, copies the outputs back over the host buffers and frees everything. Device buffers are
 * exactly the registered bytes (the emulator's ASan build catches a kernel reading past them). ---- */
enum { DM_IN = 0, DM_OUT = 1, DM_MAX = 24, DM_INPUT_WRITTEN = -2 };
struct dmirror {
    int n, nb, err;
    struct {
        void *field; /* address of a pointer field in the device args */
        uintptr_t host;
        size_t bytes;
        int out;
    } e[DM_MAX];
    struct {
        uintptr_t lo, hi;
        void *dev;
        int out;
    } b[DM_MAX];
};
/* field: the address of a pointer member (any pointer type); a NULL pointer or 0 bytes is skipped. */
void dm_add(struct dmirror *m, void *field, size_t bytes, int out);
/* 0 or the first cudaError_t of the uploads. */
int dm_upload(struct dmirror *m);
/* launch_err: what the launcher returned (0 = cudaSuccess); outputs are copied back only after a
 * launch that succeeded, and every input-only buffer is read back and compared with its host copy.
 * Returns launch_err, else the first runtime error, else DM_INPUT_WRITTEN (an input changed), else 0. */
int dm_finish(struct dmirror *m, int launch_err);

#endif
