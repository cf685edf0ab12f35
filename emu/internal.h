/* internal.h: what the emulator's parts share (emu/README.md has the whole picture).
 *   fiber.cc    a CUDA thread as a fiber: stacks and the context switch
 *   exec.cc     running one launch: blocks, barriers, warp collectives, thread orders, the order check
 *   runtime.cc  the runtime API: devices, memory, streams run lazily, events, graphs, errors, counters
 *   cublas.cc   the cuBLAS calls libinfer makes
 *   nccl.cc     NCCL with ranks as host threads of one process or of several;  nccl_shm.cc  the
 *               shared-memory segment through which a clique's processes meet (it needs no big_lock)
 * All state below is guarded by emu::big_lock: an API call takes it for its whole length, and device work
 * (kernels, copies, collectives) runs under it, on the host thread that needed the work done.
 */
#ifndef INFER_EMU_INTERNAL_H
#define INFER_EMU_INTERNAL_H

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "emu_api.h"

namespace emu {

extern std::mutex big_lock;
extern std::condition_variable big_cond; /* collectives waiting for their ranks, streams for their executor */
using guard = std::unique_lock<std::mutex>;

/* ---- fibers (fiber.cc) ---- */
enum fiber_state { F_READY, F_BARRIER, F_WARP, F_DONE };
struct fiber {
    fiber_view view;          /* threadIdx */
    void *sp;                 /* saved stack pointer while switched out */
    char *stack_lo;
    size_t stack_size;
    void *asan_fake;          /* ASan's fake stack of this fiber */
    int state, linear;
    /* a pending barrier or collective */
    int op;
    unsigned mask;
    int arg, width, pred;
    uint64_t in, out;
    uint32_t mma_a[4], mma_b[2];
    float mma_c[4];
};
struct fiber_pool { /* one per host thread */
    fiber *fibers;
    int n;                    /* fibers with stacks */
    void *sched_sp;
    const void *sched_stack_lo;
    size_t sched_stack_size;
    void *sched_fake;
    bool dirty;               /* a launch was abandoned: stacks must be unpoisoned before reuse */
    bool from_sched;          /* the last switch came from the scheduler */
};
fiber_pool *pool_get(int n_threads); /* this host thread's pool with at least n fibers */
void fiber_start(fiber_pool *p, fiber *f, void (*entry)());
void fiber_resume(fiber_pool *p, fiber *f);          /* from the scheduler into f */
void fiber_yield(fiber_pool *p, fiber *f, fiber *to); /* from inside f to fiber `to` (NULL: the scheduler) */
[[noreturn]] void fiber_exit(fiber_pool *p, fiber *f, fiber *to); /* the same, f never to run again */

/* ---- launches (exec.cc) ---- */
struct kernel_call {
    const site *where;
    const void *fn;
    dim3 grid, block;
    size_t smem;
    std::shared_ptr<const kernel_args> args;
};
enum order { ORDER_FORWARD, ORDER_REVERSE, ORDER_RANDOM };
const char *order_name(int o);
/* Runs every block of the call in the given thread/block order; on a bug in the kernel's use of barriers
 * or collectives returns false with the report in *why. */
bool run_kernel(const kernel_call &k, int order, uint64_t seed, std::string *why);
std::string describe(const kernel_call &k);

/* ---- device memory (runtime.cc) ---- */
struct allocation {
    char *base;
    size_t size;
    int device;   /* -1: pinned host memory */
    bool registered; /* cudaHostRegister'ed user memory (not ours to free) */
};
const allocation *find_allocation(const void *p); /* the allocation holding p, or NULL */
void report(int device, const std::string &what);  /* a bug found: printed, counted, sticky on the device */
void fail_device(int device);                      /* the device's context fails, as after a report, unprinted */

/* ---- settings (runtime.cc) ---- */
struct settings {
    int devices;
    size_t mem;
    int order_mode;   /* EMU_ORDER_* of emu_api.h */
    uint64_t seed;
    int checks_per_site;
    bool abort_on_report;
};
const settings &config();

/* ---- host work on a stream (cublas.cc, nccl.cc); callers hold big_lock ---- */
/* fn runs under big_lock when the stream reaches it (or is recorded into the stream's capture); tag marks
 * a collective's item so that another rank can run the stream up to it. */
cudaError_t enqueue_host_work(cudaStream_t s, std::function<void(guard &)> fn, const char *what, const void *tag);
/* Runs stream s through its first queued item tagged `tag`; false when there is none or s is busy. */
bool run_through_tagged(cudaStream_t s, const void *tag, guard &g);
int stream_device(cudaStream_t s); /* the stream's device, -1: not a stream (caller holds big_lock) */

} /* namespace emu */

#endif
