/* emu_device.h: the device side of the CUDA emulator, for kernel sources compiled by g++ (INFER_EMU).
 *
 * Each CUDA thread of a block is a fiber (emu/fiber.cc); a block runs on the host thread that executes
 * its launch, its threads interleaved only at barriers and warp collectives (emu/exec.cc). So:
 *   - keywords compile away, except __shared__, which makes a variable static thread_local: one copy per
 *     host thread, which all fibers of the block running there share;
 *   - threadIdx, blockIdx, blockDim, gridDim read the running fiber's and block's values;
 *   - __syncthreads and every *_sync collective switch back to the scheduler, which releases them when
 *     every thread involved has arrived, computes collectives from all lanes' inputs, and reports a
 *     collective whose mask names a lane that exited or waits elsewhere;
 *   - atomics are plain read-modify-writes (fibers never preempt each other);
 *   - float intrinsics are the IEEE operations (__fmul_rn etc. exactly; __expf as exp2f(x * log2 e), not
 *     the GPU's approximation).
 * launch_kernel() records the launch (arguments copied by value, as CUDA does) on the stream; it runs
 * when CUDA would guarantee it has completed (emu/runtime.cc).
 */
#ifndef INFER_EMU_DEVICE_H
#define INFER_EMU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmath>
#include <memory>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#if defined(__SANITIZE_ADDRESS__) /* see the Makefile: UBSan's checks and ld's TLS relaxation disagree */
#define INFER_EMU_TLS
#else
#define INFER_EMU_TLS __attribute__((tls_model("initial-exec")))
#endif

/* ---- keywords ---- */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
/* __launch_bounds__(n): ceil(n / 32) single-byte NOPs before the kernel's entry, recorded by GCC in
 * __patchable_function_entries, which is how the launch (runtime.cc) learns the bound and refuses a
 * block above it as a GPU does (cudaErrorInvalidValue on CUDA 13.0, as an H100 returned). */
#define __launch_bounds__(...) EMU_LAUNCH_BOUNDS_(__VA_ARGS__, 0)
#define EMU_LAUNCH_BOUNDS_(n, ...) __attribute__((patchable_function_entry(((n) + 31) / 32, ((n) + 31) / 32)))
#define __grid_constant__
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))

/* ---- vector types (alignment as CUDA's) ---- */
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(4))) char4 { signed char x, y, z, w; };
struct __attribute__((aligned(4))) uchar4 { unsigned char x, y, z, w; };
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
static inline int2 make_int2(int x, int y) { return {x, y}; }
static inline float2 make_float2(float x, float y) { return {x, y}; }

namespace emu {

/* ---- the running thread (emu/exec.cc) ---- */
struct fiber;
struct fiber_view { /* what a kernel may read of its fiber */
    dim3 tid;
};
extern thread_local fiber_view *cur_thread INFER_EMU_TLS;
extern thread_local dim3 cur_block INFER_EMU_TLS, cur_block_dim INFER_EMU_TLS, cur_grid_dim INFER_EMU_TLS;
extern thread_local unsigned char *cur_dyn_smem INFER_EMU_TLS;

/* Collectives: the calling fiber waits for its partners; the scheduler computes the result. */
enum warp_op_kind {
    WOP_SYNCWARP, WOP_SHFL_IDX, WOP_SHFL_UP, WOP_SHFL_DOWN, WOP_SHFL_XOR, WOP_BALLOT, WOP_ANY, WOP_ALL,
    WOP_RED_ADD, WOP_RED_MIN_U, WOP_RED_MAX_U, WOP_RED_MIN_I, WOP_RED_MAX_I, WOP_RED_AND, WOP_RED_OR, WOP_RED_XOR,
    WOP_MMA_16816
};
enum bar_kind { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };
uint64_t warp_op(int kind, unsigned mask, uint64_t value, int arg, int width);
int block_barrier(int kind, int pred);
void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
[[noreturn]] void device_trap(const char *why);

/* ---- launches ---- */
struct site { /* one launch_kernel in the source */
    const char *text, *file;
    int line;
};
struct kernel_args { /* a launch's arguments, copied by value */
    virtual ~kernel_args() {}
    virtual void invoke() const = 0; /* the kernel body on the running fiber */
    virtual const void *bytes() const = 0;
    virtual size_t size() const = 0;
};
template <typename... P> struct kernel_args_of final : kernel_args {
    using tuple = std::tuple<P...>;
    void (*fn)(P...);
    alignas(tuple) unsigned char store[sizeof(tuple)];
    template <typename... A> explicit kernel_args_of(void (*f)(P...), A &&...a) : fn(f) {
        /* no stale bytes in padding for the pointer scan: zeroed, then each element built in place from its
         * argument (a converted temporary first would bring its own uninitialised padding along) */
        memset(store, 0, sizeof store);
        /* g++ -O2 drops a store made before an object's construction (-flifetime-dse) unless something may
         * read it first: without this the tuple's own padding kept the heap's old bytes */
        asm volatile("" : : "r"(store) : "memory");
        new (store) tuple(std::forward<A>(a)...);
    }
    ~kernel_args_of() override { ((tuple *)store)->~tuple(); }
    void invoke() const override { std::apply(fn, *(const tuple *)store); }
    const void *bytes() const override { return store; }
    size_t size() const override { return sizeof store; }
};
void submit_kernel(const site *s, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   std::shared_ptr<const kernel_args> args);

template <typename... P, typename... A>
static inline void launch(const site *s, void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          A &&...a) {
    static_assert(sizeof...(P) == sizeof...(A), "launch_kernel: argument count differs from the kernel's");
    submit_kernel(s, (const void *)k, grid, block, smem, stream,
                  std::make_shared<const kernel_args_of<P...>>(k, std::forward<A>(a)...));
}

template <typename T> static inline uint64_t bits_of(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> static inline T of_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}

} /* namespace emu */

#define launch_kernel(...)                                                                                   \
    do {                                                                                                     \
        static const emu::site emu_site_ = {#__VA_ARGS__, __FILE__, __LINE__};                               \
        emu::launch(&emu_site_, __VA_ARGS__);                                                                \
    } while (0)

template <typename T> static inline T *dyn_smem() { return (T *)emu::cur_dyn_smem; }

/* ---- built-in variables ---- */
#define threadIdx (emu::cur_thread->tid)
#define blockIdx (emu::cur_block)
#define blockDim (emu::cur_block_dim)
#define gridDim (emu::cur_grid_dim)
static constexpr int warpSize = 32;

/* ---- barriers and collectives ---- */
static inline void __syncthreads() { emu::block_barrier(emu::BAR_SYNC, 1); }
static inline int __syncthreads_count(int p) { return emu::block_barrier(emu::BAR_COUNT, p); }
static inline int __syncthreads_and(int p) { return emu::block_barrier(emu::BAR_AND, p); }
static inline int __syncthreads_or(int p) { return emu::block_barrier(emu::BAR_OR, p); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_op(emu::WOP_SYNCWARP, mask, 0, 0, 32); }
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)emu::warp_op(emu::WOP_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned mask, int pred) { return (int)emu::warp_op(emu::WOP_ANY, mask, pred != 0, 0, 32); }
static inline int __all_sync(unsigned mask, int pred) { return (int)emu::warp_op(emu::WOP_ALL, mask, pred != 0, 0, 32); }
template <typename T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::WOP_SHFL_IDX, mask, emu::bits_of(v), src, width));
}
template <typename T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::WOP_SHFL_UP, mask, emu::bits_of(v), (int)delta, width));
}
template <typename T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::WOP_SHFL_DOWN, mask, emu::bits_of(v), (int)delta, width));
}
template <typename T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return emu::of_bits<T>(emu::warp_op(emu::WOP_SHFL_XOR, mask, emu::bits_of(v), lane_mask, width));
}
static inline unsigned __reduce_add_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::WOP_RED_ADD, mask, v, 0, 32); }
static inline int __reduce_add_sync(unsigned mask, int v) { return (int)emu::warp_op(emu::WOP_RED_ADD, mask, (unsigned)v, 0, 32); }
static inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::WOP_RED_MIN_U, mask, v, 0, 32); }
static inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::WOP_RED_MAX_U, mask, v, 0, 32); }
static inline int __reduce_min_sync(unsigned mask, int v) { return (int)emu::warp_op(emu::WOP_RED_MIN_I, mask, (uint32_t)v, 0, 32); }
static inline int __reduce_max_sync(unsigned mask, int v) { return (int)emu::warp_op(emu::WOP_RED_MAX_I, mask, (uint32_t)v, 0, 32); }
static inline unsigned __reduce_and_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::WOP_RED_AND, mask, v, 0, 32); }
static inline unsigned __reduce_or_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::WOP_RED_OR, mask, v, 0, 32); }
static inline unsigned __reduce_xor_sync(unsigned mask, unsigned v) { return (unsigned)emu::warp_op(emu::WOP_RED_XOR, mask, v, 0, 32); }
static inline void __trap() { emu::device_trap("__trap()"); }

/* The PTX twins of kernels/ptx.cuh. */
static inline void emu_mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) { emu::mma_16816(c, a, b0, b1); }
float emu_cvt_f32_f16(uint16_t h);

/* ---- atomics: plain read-modify-writes ---- */
template <typename T> static inline T atomicAdd(T *p, T v) {
    const T o = *p;
    *p = o + v;
    return o;
}
template <typename T> static inline T atomicSub(T *p, T v) {
    const T o = *p;
    *p = o - v;
    return o;
}
template <typename T> static inline T atomicExch(T *p, T v) {
    const T o = *p;
    *p = v;
    return o;
}
template <typename T> static inline T atomicMax(T *p, T v) {
    const T o = *p;
    *p = o > v ? o : v;
    return o;
}
template <typename T> static inline T atomicMin(T *p, T v) {
    const T o = *p;
    *p = o < v ? o : v;
    return o;
}
template <typename T> static inline T atomicCAS(T *p, T cmp, T v) {
    const T o = *p;
    if (o == cmp) *p = v;
    return o;
}
template <typename T> static inline T atomicAnd(T *p, T v) {
    const T o = *p;
    *p = o & v;
    return o;
}
template <typename T> static inline T atomicOr(T *p, T v) {
    const T o = *p;
    *p = o | v;
    return o;
}

/* ---- loads, bit casts, integer intrinsics ---- */
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline float __int_as_float(int i) { return emu::of_bits<float>((uint32_t)i); }
static inline int __float_as_int(float f) { return (int)(uint32_t)emu::bits_of(f); }
static inline float __uint_as_float(unsigned u) { return emu::of_bits<float>(u); }
static inline unsigned __float_as_uint(float f) { return (unsigned)emu::bits_of(f); }
static inline double __longlong_as_double(long long i) { return emu::of_bits<double>((uint64_t)i); }
static inline long long __double_as_longlong(double d) { return (long long)emu::bits_of(d); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
/* dp4a: the four signed byte products of a and b added to c. */
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++) c += ((a >> (8 * i)) & 0xFFu) * ((b >> (8 * i)) & 0xFFu);
    return c;
}
/* vsubss4: bytewise signed subtraction, saturated to -128..127. */
static inline int __vsubss4(int a, int b) {
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        int d = (int)(int8_t)(a >> (8 * i)) - (int)(int8_t)(b >> (8 * i));
        d = d < -128 ? -128 : d > 127 ? 127 : d;
        r |= (unsigned)(uint8_t)d << (8 * i);
    }
    return (int)r;
}
static inline unsigned __vsubss4(unsigned a, unsigned b) { return (unsigned)__vsubss4((int)a, (int)b); }

/* ---- float intrinsics: IEEE single precision, no contraction (kernels are built -ffp-contract=off) ---- */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fdividef(float a, float b) { return a / b; }
/* glibc declares its own __expf etc.: CUDA's names become macros */
static inline float emu_fast_expf(float x) { return exp2f(x * 1.44269504088896341f); }
#define __expf(x) emu_fast_expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __powf(a, b) powf(a, b)
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x != x ? 0.0f : x; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline float __int2float_rn(int x) { return (float)x; }
using std::isinf;
using std::isnan;

/* CUDA's integer min / max overloads (device code calls them unqualified). */
template <typename A, typename B> static inline typename std::common_type<A, B>::type min(A a, B b) {
    return a < b ? a : b;
}
template <typename A, typename B> static inline typename std::common_type<A, B>::type max(A a, B b) {
    return a > b ? a : b;
}

static inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

#include "cuda_fp16.h"

#endif
