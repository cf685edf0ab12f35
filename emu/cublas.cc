/* cublas.cc: the cuBLAS calls libinfer makes. A handle belongs to the device current at cublasCreate and
 * works on its stream (cublasSetStream; the legacy stream by default). cublasGemmEx checks its arguments
 * as cuBLAS does (CUBLAS_STATUS_INVALID_VALUE, _NOT_SUPPORTED) and that A, B and C lie in the device's
 * memory (a GPU would fault: reported as a bug), then queues the product: each element of C a float sum
 * over l = 0..k-1 of exact products of the inputs, alpha * sum + beta * C (C not read when beta is 0).
 * The sum order is not cuBLAS's: results agree to float rounding, not bit for bit. */
#include <cstring>

#include "cublas_v2.h"
#include "cuda_fp16.h"
#include "internal.h"

struct emu_cublas {
    int device;
    cudaStream_t stream;
    bool alive;
};

namespace emu {

static std::list<emu_cublas> handles; /* kept to the end: a destroyed handle stays recognisable */

static bool live(cublasHandle_t h) {
    for (const emu_cublas &x : handles)
        if (&x == h) return x.alive;
    return false;
}

static float load(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    const uint16_t u = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F) return emu_f16_bits_to_f32(u);
    const uint32_t b = (uint32_t)u << 16; /* CUDA_R_16BF */
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static size_t type_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : 2; }

/* The bytes an operand of rows x cols (column-major, ld apart) spans. */
static size_t span(int rows, int cols, int ld, cudaDataType t) {
    return rows && cols ? ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * type_size(t) : 0;
}

static bool on_device(const void *p, size_t bytes, int device) {
    const allocation *a = find_allocation(p);
    return !bytes || (a && a->device == device && (uintptr_t)p + bytes <= (uintptr_t)a->base + a->size);
}

} /* namespace emu */

using namespace emu;

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
    guard g(big_lock);
    handles.push_back(emu_cublas{device, nullptr, true});
    *h = &handles.back();
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t h) {
    guard g(big_lock);
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->alive = false;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    guard g(big_lock);
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (stream_device(s) != h->device) return CUBLAS_STATUS_INVALID_VALUE;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes) {
    guard g(big_lock);
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !on_device(workspace, bytes, h->device)) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "unknown error";
    }
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                       int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                       const void *B, cudaDataType bt, int ldb, const void *beta, void *C,
                                       cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    guard g(big_lock);
    if (!live(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1) ||
        !alpha || !beta || ta > CUBLAS_OP_C || tb > CUBLAS_OP_C)
        return CUBLAS_STATUS_INVALID_VALUE;
    const auto ok_in = [](cudaDataType t) { return t == CUDA_R_16F || t == CUDA_R_16BF || t == CUDA_R_32F; };
    if (!ok_in(at) || bt != at || (ct != CUDA_R_32F && ct != CUDA_R_16F) ||
        (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if (!on_device(A, span(ar, ac, lda, at), h->device) || !on_device(B, span(br, bc, ldb, bt), h->device) ||
        !on_device(C, span(m, n, ldc, ct), h->device)) {
        report(h->device, "cublasGemmEx: A, B or C is not wholly in the handle's device memory (a GPU would fault)");
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const float al = *(const float *)alpha, be = *(const float *)beta;
    const cudaError_t e = enqueue_host_work(
        h->stream,
        [=](guard &) {
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    float acc = 0.0f;
                    for (int l = 0; l < k; l++) {
                        const size_t ai = ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda : (size_t)l + (size_t)i * lda;
                        const size_t bi = tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb : (size_t)j + (size_t)l * ldb;
                        acc += load(A, at, ai) * load(B, bt, bi);
                    }
                    const size_t ci = (size_t)i + (size_t)j * ldc;
                    float v = al * acc;
                    if (be != 0.0f) v += be * load(C, ct, ci);
                    if (ct == CUDA_R_32F) ((float *)C)[ci] = v;
                    else ((uint16_t *)C)[ci] = emu_f32_to_f16_bits(v);
                }
        },
        "cublasGemmEx", nullptr);
    return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
