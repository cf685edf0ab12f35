/* util: the op tests' shared helpers (see util.h). */
#include "util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "randw.h"
#include "ref.h"

#ifdef INFER_CUDA
#include <cuda_runtime_api.h>
#endif

static uint64_t util_rng = 0x9E3779B97F4A7C15ull;

void util_seed(uint64_t seed) { util_rng = seed ? seed : 0x9E3779B97F4A7C15ull; }

uint32_t util_u32(void) {
    util_rng ^= util_rng << 13;
    util_rng ^= util_rng >> 7;
    util_rng ^= util_rng << 17;
    return (uint32_t)(util_rng >> 16);
}

float util_unif(float lo, float hi) { return lo + (hi - lo) * (float)(util_u32() & 0xffffff) / 16777216.0f; }

void util_fill(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++)
        x[i] = util_unif(lo, hi);
}

float *util_nan(int64_t n) {
    float *y = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        y[i] = NAN;
    return y;
}

int util_blck(int32_t t) {
    return t == INFER_TYPE_F32 || t == INFER_TYPE_F16 || t == INFER_TYPE_BF16       ? 1
           : t == INFER_TYPE_Q8_0 || t == INFER_TYPE_Q4_0 || t == INFER_TYPE_IQ4_NL || t == INFER_TYPE_Q4_1 ||
                   t == INFER_TYPE_MXFP4 ||
                   t == INFER_TYPE_Q5_0 || t == INFER_TYPE_Q5_1 || t == INFER_TYPE_Q8_1
               ? 32
               : 256;
}

void *util_weights(int32_t type, int64_t n_rows, int64_t n) {
    const size_t bytes = ref_row_bytes(type, n) * (size_t)n_rows;
    uint8_t *w = malloc(bytes ? bytes : 1);
    randw_weights(type, w, n, n_rows, util_u32);
    return w;
}

void *util_weights_quantised(int32_t type, int64_t n_rows, int64_t n) {
    const size_t rb = ref_row_bytes(type, n);
    uint8_t *w = malloc(rb * (size_t)n_rows);
    float *row = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n; i++)
            row[i] = 0.02f * (util_unif(-1, 1) + util_unif(-1, 1) + util_unif(-1, 1));
        if (quant_quantize_row(type, row, w + r * rb, n) != INFER_OK) memset(w + r * rb, 0, rb);
    }
    free(row);
    return w;
}

double util_nmse(const float *y, const double *r, int64_t n, int *nan) {
    double num = 0, den = 0;
    *nan = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) *nan = 1;
        num += (y[i] - r[i]) * (y[i] - r[i]);
        den += r[i] * r[i];
    }
    return den > 0 ? num / den : num;
}

double util_max_diff(const float *y, const double *r, int64_t n, int64_t *at, double *rmax) {
    double m = 0, rm = 0;
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)y[i] - r[i]);
        if (!(d <= m)) {
            m = isnan(d) ? INFINITY : d;
            w = i;
        }
        if (fabs(r[i]) > rm) rm = fabs(r[i]);
    }
    if (at) *at = w;
    if (rmax) *rmax = rm;
    return m;
}

/* ---- device mirrors ---- */

void dm_add(struct dmirror *m, void *field, size_t bytes, int out) {
    void *host;
    memcpy(&host, field, sizeof host);
    if (!host || !bytes) return;
    if (m->n == DM_MAX) {
        m->err = m->err ? m->err : -1;
        return;
    }
    m->e[m->n].field = field;
    m->e[m->n].host = (uintptr_t)host;
    m->e[m->n].bytes = bytes;
    m->e[m->n].out = out;
    m->n++;
}

#ifdef INFER_CUDA
int dm_upload(struct dmirror *m) {
    if (m->err) return m->err;
    /* union of the overlapping host ranges, one device buffer each */
    for (int i = 0; i < m->n; i++) {
        uintptr_t lo = m->e[i].host, hi = lo + m->e[i].bytes;
        int out = m->e[i].out;
        for (int merged = 1; merged;) {
            merged = 0;
            for (int j = 0; j < m->nb; j++) {
                if (m->b[j].lo >= hi || lo >= m->b[j].hi) continue;
                lo = lo < m->b[j].lo ? lo : m->b[j].lo;
                hi = hi > m->b[j].hi ? hi : m->b[j].hi;
                out |= m->b[j].out;
                m->b[j] = m->b[--m->nb];
                merged = 1;
                break;
            }
        }
        m->b[m->nb].lo = lo, m->b[m->nb].hi = hi, m->b[m->nb].out = out, m->b[m->nb].dev = NULL;
        m->nb++;
    }
    for (int j = 0; j < m->nb; j++) {
        const size_t bytes = m->b[j].hi - m->b[j].lo;
        cudaError_t e = cudaMalloc(&m->b[j].dev, bytes);
        if (e == cudaSuccess)
            e = cudaMemcpy(m->b[j].dev, (const void *)m->b[j].lo, bytes, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) return m->err = (int)e;
    }
    for (int i = 0; i < m->n; i++)
        for (int j = 0; j < m->nb; j++)
            if (m->e[i].host >= m->b[j].lo && m->e[i].host < m->b[j].hi) {
                void *d = (char *)m->b[j].dev + (m->e[i].host - m->b[j].lo);
                memcpy(m->e[i].field, &d, sizeof d);
            }
    return 0;
}

int dm_finish(struct dmirror *m, int launch_err) {
    int err = launch_err ? launch_err : m->err;
    if (!err) err = (int)cudaDeviceSynchronize();
    for (int j = 0; j < m->nb; j++) {
        const size_t bytes = m->b[j].hi - m->b[j].lo;
        if (!err && m->b[j].out) {
            err = (int)cudaMemcpy((void *)m->b[j].lo, m->b[j].dev, bytes, cudaMemcpyDeviceToHost);
        } else if (!err) { /* an input must come back as it went */
            void *back = malloc(bytes);
            err = (int)cudaMemcpy(back, m->b[j].dev, bytes, cudaMemcpyDeviceToHost);
            if (!err && memcmp(back, (const void *)m->b[j].lo, bytes)) err = DM_INPUT_WRITTEN;
            free(back);
        }
        if (m->b[j].dev) cudaFree(m->b[j].dev);
    }
    cudaGetLastError(); /* a refused launch leaves nothing sticky for the next case */
    m->n = m->nb = 0;
    return err;
}
#else
int dm_upload(struct dmirror *m) { return m->err = m->err ? m->err : -1; }
int dm_finish(struct dmirror *m, int launch_err) {
    m->n = m->nb = 0;
    return launch_err ? launch_err : -1;
}
#endif
