/* runtime.cc: the CUDA runtime API on the CPU.
 *
 * Devices: INFER_EMU_DEVICES (default 1; 0: no device, cudaErrorNoDevice), each with INFER_EMU_MEM bytes
 * (default 80G; suffixes K M G T) and sm_86's launch limits. The current device is per host thread.
 * Memory: every cudaMalloc is its own heap block (so ASan sees device out-of-bounds accesses and use
 * after free), counted against its device; cudaMallocHost / cudaHostRegister memory is "pinned".
 * Streams are queues run lazily, in order, only when CUDA guarantees completion: stream, event and
 * device synchronisation, a blocking copy (cudaMemcpy to or from the host, cudaMemcpyAsync into pageable
 * memory), cudaFree, stream destruction, a polled query the second time. So a result read before a
 * synchronisation CUDA would require is stale here, whatever the timing. The legacy default stream
 * orders itself against blocking streams as CUDA does; non-blocking streams do not. Host sources of
 * asynchronous copies from pageable memory are staged at the call, pinned ones read when the copy runs.
 * Graphs: capture records kernels, copies, memsets and host work (cuBLAS, NCCL) as a chain; calls CUDA
 * forbids while capturing fail with CUDA's error and invalidate the capture; cudaGraphExecUpdate follows
 * CUDA's rules for a chain; a launched graph keeps the arguments it was launched with.
 * Errors: a launch that would fail on a GPU fails here with the same cudaError_t (cudaGetLastError); a
 * bug found while running (exec.cc's reports, results that depend on thread order, a kernel given another
 * device's memory) is printed as "emu: ..." and makes the device's context fail with
 * cudaErrorLaunchFailure from then on, as a GPU fault does.
 */
#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <set>
#include <thread>

#include "internal.h"

struct emu_stream {};
struct emu_event {};
struct emu_graph {};
struct emu_graph_exec {};

namespace emu {

std::mutex big_lock;
std::condition_variable big_cond;

/* ---- settings ---- */

static size_t parse_size(const char *s, size_t dflt) {
    if (!s || !*s) return dflt;
    char *end = nullptr;
    const double v = strtod(s, &end);
    if (end == s || v < 0) return dflt;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; break;
    case 'm': case 'M': mul = 1048576.0; break;
    case 'g': case 'G': mul = 1073741824.0; break;
    case 't': case 'T': mul = 1099511627776.0; break;
    default: break;
    }
    return (size_t)(v * mul);
}

static settings make_settings() {
    settings s;
    const char *d = getenv("INFER_EMU_DEVICES");
    s.devices = d && *d ? atoi(d) : 1;
    if (s.devices < 0) s.devices = 0;
    if (s.devices > 16) s.devices = 16;
    s.mem = parse_size(getenv("INFER_EMU_MEM"), (size_t)80 << 30);
    const char *o = getenv("INFER_EMU_ORDER");
    s.order_mode = !o || !*o || !strcmp(o, "check") ? EMU_ORDER_CHECK
                   : !strcmp(o, "forward")           ? EMU_ORDER_FORWARD
                   : !strcmp(o, "reverse")           ? EMU_ORDER_REVERSE
                                                     : EMU_ORDER_RANDOM;
    const char *seed = getenv("INFER_EMU_SEED");
    s.seed = seed && *seed ? strtoull(seed, nullptr, 0) : 0x5eed;
    const char *checks = getenv("INFER_EMU_CHECKS");
    s.checks_per_site = checks && *checks ? atoi(checks) : 2;
    const char *ab = getenv("INFER_EMU_ABORT");
    s.abort_on_report = ab && *ab && strcmp(ab, "0") != 0;
    return s;
}

const settings &config() {
    static const settings s = make_settings();
    return s;
}

/* ---- state ---- */

enum item_kind { K_KERNEL, K_COPY, K_SET, K_RECORD, K_WAIT, K_HOST };
struct stream;
struct event_state;
struct item {
    int kind;
    uint64_t seq = 0;
    std::shared_ptr<const kernel_call> k;
    void *dst = nullptr;
    const void *src = nullptr;
    size_t bytes = 0;
    int value = 0, dir = 0, src_device = 0, dst_device = 0;
    std::shared_ptr<std::vector<char>> staged; /* a pageable host source, copied at the call */
    event_state *ev = nullptr;                  /* K_RECORD */
    stream *wait_stream = nullptr;              /* K_WAIT: until that stream has run wait_seq */
    uint64_t wait_seq = 0;
    std::function<void(guard &)> fn;            /* K_HOST */
    const char *what = "";
    const void *tag = nullptr;                  /* K_HOST: a collective's communicator (nccl.cc) */
    std::vector<std::pair<stream *, uint64_t>> deps; /* the legacy stream's implicit ordering */
};

struct graph_state : emu_graph {
    std::vector<item> nodes;
    int device;
};
struct graph_exec_state : emu_graph_exec {
    std::vector<item> nodes;
    int device;
};

struct stream : emu_stream {
    int device;
    unsigned flags;
    bool legacy, alive = true;
    std::deque<item> q;
    uint64_t next_seq = 1, done_seq = 0;
    bool busy = false; /* an item of it is running (a collective may wait inside) */
    /* capture */
    bool capturing = false, invalidated = false;
    int mode = 0;
    std::thread::id cap_thread;
    graph_state *cap = nullptr;
};

struct event_state : emu_event {
    int device;
    unsigned flags;
    bool alive = true, recorded = false, complete = false;
    stream *s = nullptr;
    uint64_t seq = 0;
    double time = 0;
    int polls = 0;
};

struct device_state {
    size_t total, used = 0;
    emu_counters c = {};
    stream *legacy = nullptr;
    std::vector<stream *> streams; /* alive, the legacy one included */
    cudaError_t sticky = cudaSuccess;
};

static std::vector<device_state> devs;
static std::map<uintptr_t, allocation> allocs;           /* by base address */
static std::list<stream> all_streams;                    /* kept to the end: handles stay valid */
static std::list<event_state> all_events;
static std::list<graph_state> all_graphs;
static std::list<graph_exec_state> all_execs;
static std::set<const void *> live_streams, live_events, live_graphs, live_execs;
static std::map<const void *, int> func_max_smem;       /* cudaFuncAttributeMaxDynamicSharedMemorySize */
struct site_key {
    const site *s;
    unsigned g[3], b[3];
    size_t smem;
    bool operator<(const site_key &o) const { return memcmp(this, &o, sizeof *this) < 0; }
};
static std::map<site_key, uint64_t> site_runs;
static uint64_t n_reports, n_kernels_run;
static std::string last_report;

static thread_local int cur_dev;
static thread_local cudaError_t last_err = cudaSuccess;

enum { MAX_THREADS = 1024, MAX_DIM_Z = 64, MAX_GRID_YZ = 65535 };
static constexpr size_t SMEM_STATIC = 48 << 10, SMEM_OPTIN = 101376; /* sm_86 / sm_89 / sm_120 opt-in */

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* INFER_EMU_STATS=1: each device's counters on stderr at exit (what a tool run touched where). */
static void print_stats() {
    for (size_t i = 0; i < devs.size(); i++) {
        const emu_counters &c = devs[i].c;
        fprintf(stderr,
                "emu stats: device %zu: %llu launches, %llu kernels run, %llu graph launches, %llu syncs, %llu B to the "
                "device, %llu B from it, %llu B within it, %llu allocations, %llu B held\n",
                i, (unsigned long long)c.launches, (unsigned long long)c.kernels, (unsigned long long)c.graph_launches,
                (unsigned long long)c.syncs, (unsigned long long)c.h2d_bytes, (unsigned long long)c.d2h_bytes,
                (unsigned long long)c.d2d_bytes, (unsigned long long)c.allocs, (unsigned long long)c.bytes_in_use);
    }
}

static void init() {
    if (!devs.empty() || config().devices == 0) return;
    const char *stats = getenv("INFER_EMU_STATS");
    if (stats && *stats && strcmp(stats, "0") != 0) atexit(print_stats);
    devs.resize((size_t)config().devices);
    for (size_t i = 0; i < devs.size(); i++) {
        devs[i].total = config().mem;
        all_streams.emplace_back();
        stream *s = &all_streams.back();
        s->device = (int)i, s->flags = 0, s->legacy = true;
        devs[i].legacy = s;
        devs[i].streams.push_back(s);
    }
}

static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) last_err = e;
    return e;
}

/* Validity of the current device; its sticky error once a bug was found there. */
static cudaError_t dev_check() {
    init();
    if (devs.empty()) return cudaErrorNoDevice;
    return devs[(size_t)cur_dev].sticky;
}

void report(int device, const std::string &what) {
    n_reports++;
    last_report = what;
    fprintf(stderr, "emu: %s\n", what.c_str());
    fflush(stderr);
    if (device >= 0 && device < (int)devs.size()) devs[(size_t)device].sticky = cudaErrorLaunchFailure;
    if (config().abort_on_report) abort();
}

void fail_device(int device) {
    if (device >= 0 && device < (int)devs.size()) devs[(size_t)device].sticky = cudaErrorLaunchFailure;
}

const allocation *find_allocation(const void *p) {
    const uintptr_t u = (uintptr_t)p;
    auto it = allocs.upper_bound(u);
    if (it == allocs.begin()) return nullptr;
    --it;
    return u < it->first + it->second.size ? &it->second : nullptr;
}


/* ---- capture rules ---- */

static std::vector<stream *> capturing_streams() {
    std::vector<stream *> v;
    for (const void *h : live_streams) {
        stream *s = (stream *)(emu_stream *)h;
        if (s->capturing) v.push_back(s);
    }
    return v;
}

/* CUDA refuses "potentially unsafe" calls (allocation, synchronisation, blocking copies) from a thread
 * that is capturing in global or thread-local mode, or from any thread while a global-mode capture runs;
 * the capture is invalidated. */
static cudaError_t capture_forbids() {
    cudaError_t e = cudaSuccess;
    for (stream *s : capturing_streams()) {
        const bool mine = s->cap_thread == std::this_thread::get_id();
        if ((mine && s->mode != cudaStreamCaptureModeRelaxed) || s->mode == cudaStreamCaptureModeGlobal) {
            s->invalidated = true;
            e = cudaErrorStreamCaptureUnsupported;
        }
    }
    return e;
}

/* ---- streams ---- */

static stream *resolve(cudaStream_t h) {
    init();
    if (devs.empty()) return nullptr;
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) return devs[(size_t)cur_dev].legacy;
    if (!live_streams.count((const void *)h)) return nullptr;
    return (stream *)(emu_stream *)h;
}

int stream_device(cudaStream_t h) {
    stream *s = resolve(h);
    return s ? s->device : -1;
}

static void run_until(stream *s, uint64_t target, guard &g);

static bool region_in(const allocation *a, const void *p, size_t n) {
    return a && (uintptr_t)p + n <= (uintptr_t)a->base + a->size;
}

static void scan_regions(const kernel_call &k, int device, std::vector<const allocation *> &out, std::string *bad) {
    const unsigned char *b = (const unsigned char *)k.args->bytes();
    for (size_t o = 0; o + 8 <= k.args->size(); o += 8) {
        uintptr_t v;
        memcpy(&v, b + o, 8);
        const allocation *a = find_allocation((const void *)v);
        if (!a) continue;
        if (a->device >= 0 && a->device != device && bad->empty()) {
            char m[320];
            snprintf(m, sizeof m, "argument bytes %zu..%zu (0x%llx) point into device %d's memory (an allocation of "
                     "%zu bytes at %p), but the kernel runs on device %d", o, o + 7, (unsigned long long)v, a->device,
                     a->size, a->base, device);
            *bad = m;
        }
        if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
}

/* Runs a kernel: the first runs of each launch site and shape in three thread orders, comparing every
 * byte of the memory its arguments point into (INFER_EMU_ORDER=check); otherwise in one order. */
static void exec_kernel(const kernel_call &k, int device) {
    device_state &d = devs[(size_t)device];
    if (d.sticky) return; /* a failed context runs nothing more */
    d.c.kernels++;
    n_kernels_run++;
    const settings &cfg = config();
    const site_key key = {k.where, {k.grid.x, k.grid.y, k.grid.z}, {k.block.x, k.block.y, k.block.z}, k.smem};
    const uint64_t runs = site_runs[key]++;
    const uint64_t seed = cfg.seed + n_kernels_run * 0x9E3779B97F4A7C15ull;
    std::vector<const allocation *> regions;
    std::string bad, why;
    scan_regions(k, device, regions, &bad);
    if (!bad.empty()) {
        report(device, describe(k) + ": " + bad);
        return;
    }
    const bool check = cfg.order_mode == EMU_ORDER_CHECK && runs < (uint64_t)cfg.checks_per_site;
    if (!check) {
        const int order = cfg.order_mode == EMU_ORDER_CHECK ? (int)(runs % 3) : cfg.order_mode - 1;
        if (!run_kernel(k, order, seed, &why)) report(device, describe(k) + ": " + why);
        return;
    }
    std::vector<std::vector<char>> before(regions.size()), first(regions.size());
    for (size_t i = 0; i < regions.size(); i++) before[i].assign(regions[i]->base, regions[i]->base + regions[i]->size);
    if (!run_kernel(k, ORDER_FORWARD, seed, &why)) {
        report(device, describe(k) + ": " + why);
        return;
    }
    for (size_t i = 0; i < regions.size(); i++) first[i].assign(regions[i]->base, regions[i]->base + regions[i]->size);
    for (int order : {ORDER_REVERSE, ORDER_RANDOM}) {
        for (size_t i = 0; i < regions.size(); i++) memcpy(regions[i]->base, before[i].data(), regions[i]->size);
        if (!run_kernel(k, order, seed, &why)) {
            report(device, describe(k) + " (" + order_name(order) + " order): " + why);
            return;
        }
        for (size_t i = 0; i < regions.size(); i++) {
            if (!memcmp(regions[i]->base, first[i].data(), regions[i]->size)) continue;
            size_t o = 0;
            while (regions[i]->base[o] == first[i][o]) o++;
            char m[400];
            snprintf(m, sizeof m, ": the result depends on thread order: forward and %s differ in the %zu-byte "
                     "allocation at %p, first at byte %zu (0x%02x vs 0x%02x): a missing __syncthreads or __syncwarp, or "
                     "a race between threads or blocks", order_name(order), regions[i]->size, (void *)regions[i]->base,
                     o, (unsigned char)first[i][o], (unsigned char)regions[i]->base[o]);
            report(device, describe(k) + m);
            return;
        }
    }
}

static void count_copy(int dir, int device, size_t n) {
    emu_counters &c = devs[(size_t)device].c;
    if (dir == cudaMemcpyHostToDevice) c.h2d_bytes += n;
    else if (dir == cudaMemcpyDeviceToHost) c.d2h_bytes += n;
    else if (dir == cudaMemcpyDeviceToDevice) c.d2d_bytes += n;
}

static void exec_item(stream *s, item &it, guard &g) {
    for (auto &dep : it.deps) run_until(dep.first, dep.second, g);
    switch (it.kind) {
    case K_KERNEL: exec_kernel(*it.k, s->device); break;
    case K_COPY:
        if (devs[(size_t)s->device].sticky) break;
        memmove(it.dst, it.staged ? (const void *)it.staged->data() : it.src, it.bytes);
        count_copy(it.dir, s->device, it.bytes);
        break;
    case K_SET:
        if (!devs[(size_t)s->device].sticky) memset(it.dst, it.value, it.bytes);
        break;
    case K_RECORD:
        if (it.ev->alive && it.ev->s == s && it.ev->seq == it.seq) it.ev->complete = true, it.ev->time = now_s();
        break;
    case K_WAIT: run_until(it.wait_stream, it.wait_seq, g); break;
    case K_HOST:
        if (!devs[(size_t)s->device].sticky) it.fn(g);
        break;
    default: break;
    }
}

/* Runs s's queue until item `target` has run. Another thread may be running an item of s (waiting in a
 * collective): then this one waits for it. */
static void run_until(stream *s, uint64_t target, guard &g) {
    while (s->done_seq < target) {
        if (s->busy) {
            big_cond.wait(g);
            continue;
        }
        s->busy = true;
        item it = std::move(s->q.front());
        s->q.pop_front();
        exec_item(s, it, g);
        s->done_seq = it.seq;
        s->busy = false;
        big_cond.notify_all();
    }
}

static void run_stream(stream *s, guard &g) { run_until(s, s->next_seq - 1, g); }

static void run_device(int device, guard &g) {
    std::vector<stream *> v = devs[(size_t)device].streams;
    for (stream *s : v) run_stream(s, g);
}

/* Queues an item on s, or records it into s's capture. */
static cudaError_t submit(stream *s, item &&it) {
    if (s->capturing) {
        if (s->invalidated) return cudaErrorStreamCaptureInvalidated;
        if (it.kind == K_RECORD || it.kind == K_WAIT) {
            s->invalidated = true;
            return cudaErrorStreamCaptureUnsupported; /* cross-stream capture: not emulated */
        }
        s->cap->nodes.push_back(std::move(it));
        return cudaSuccess;
    }
    device_state &d = devs[(size_t)s->device];
    if (s->legacy) { /* the legacy stream waits for every blocking stream's earlier work */
        for (stream *o : d.streams)
            if (o != s && !(o->flags & cudaStreamNonBlocking)) {
                if (o->capturing) {
                    o->invalidated = true;
                    return cudaErrorStreamCaptureImplicit;
                }
                if (o->next_seq - 1 > o->done_seq) it.deps.push_back({o, o->next_seq - 1});
            }
    } else if (!(s->flags & cudaStreamNonBlocking) && d.legacy->next_seq - 1 > d.legacy->done_seq) {
        it.deps.push_back({d.legacy, d.legacy->next_seq - 1}); /* and blocking streams wait for it */
    }
    it.seq = s->next_seq++;
    s->q.push_back(std::move(it));
    return cudaSuccess;
}

cudaError_t enqueue_host_work(cudaStream_t h, std::function<void(guard &)> fn, const char *what, const void *tag) {
    stream *s = resolve(h);
    if (!s) return cudaErrorInvalidResourceHandle;
    if (devs[(size_t)s->device].sticky) return devs[(size_t)s->device].sticky;
    item it;
    it.kind = K_HOST;
    it.fn = std::move(fn);
    it.what = what;
    it.tag = tag;
    return submit(s, std::move(it));
}

bool run_through_tagged(cudaStream_t h, const void *tag, guard &g) {
    stream *s = resolve(h);
    if (!s || s->busy) return false;
    for (const item &it : s->q)
        if (it.kind == K_HOST && it.tag == tag) {
            run_until(s, it.seq, g);
            return true;
        }
    return false;
}

/* The kernel's __launch_bounds__ (emu_device.h): n NOP bytes just before its entry, their address listed in
 * __patchable_function_entries, mean a bound of 32 n threads; 0: none. */
extern "C" const uintptr_t __start___patchable_function_entries[] __attribute__((weak, visibility("hidden")));
extern "C" const uintptr_t __stop___patchable_function_entries[] __attribute__((weak, visibility("hidden")));
static unsigned launch_bound(const void *fn) {
    static std::map<const void *, unsigned> known;
    const auto it = known.find(fn);
    if (it != known.end()) return it->second;
    unsigned bound = 0;
    const uintptr_t a = (uintptr_t)fn;
    for (const uintptr_t *e = __start___patchable_function_entries; e && e < __stop___patchable_function_entries; e++) {
        if (*e >= a || a - *e > 32) continue;
        bool nops = true;
        for (uintptr_t p = *e; p < a; p++) nops = nops && *(const unsigned char *)p == 0x90;
        if (nops) bound = (unsigned)(a - *e) * 32;
    }
    known[fn] = bound;
    return bound;
}

void submit_kernel(const site *where, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t h,
                   std::shared_ptr<const kernel_args> args) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) {
        ret(e);
        return;
    }
    stream *s = resolve(h);
    if (!s || s->device != cur_dev) { /* a stream of another device, or no stream */
        ret(cudaErrorInvalidResourceHandle);
        return;
    }
    const uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || block.x > MAX_THREADS || block.y > MAX_THREADS || block.z > MAX_DIM_Z ||
        threads > MAX_THREADS || !grid.x || !grid.y || !grid.z || grid.x > 0x7FFFFFFFu || grid.y > MAX_GRID_YZ ||
        grid.z > MAX_GRID_YZ) {
        ret(cudaErrorInvalidValue); /* what CUDA 13.0 (driver 580) returned on an H100, 2026-11-26 */
        return;
    }
    const unsigned bound = launch_bound(fn);
    if (bound && threads > bound) {
        ret(cudaErrorInvalidValue); /* likewise: not cudaErrorLaunchOutOfResources */
        return;
    }
    const auto attr = func_max_smem.find(fn);
    const size_t smem_max = attr != func_max_smem.end() && (size_t)attr->second > SMEM_STATIC ? (size_t)attr->second : SMEM_STATIC;
    if (smem > smem_max) {
        ret(cudaErrorInvalidValue);
        return;
    }
    devs[(size_t)s->device].c.launches++;
    item it;
    it.kind = K_KERNEL;
    it.k = std::make_shared<const kernel_call>(kernel_call{where, fn, grid, block, smem, std::move(args)});
    e = submit(s, std::move(it));
    if (e != cudaSuccess) ret(e);
}

} /* namespace emu */

using namespace emu;

/* ---- errors ---- */

extern "C" cudaError_t cudaGetLastError(void) {
    guard g(big_lock);
    cudaError_t e = last_err;
    last_err = cudaSuccess;
    if (e == cudaSuccess && !devs.empty() && devs[(size_t)cur_dev].sticky) e = devs[(size_t)cur_dev].sticky;
    return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void) {
    guard g(big_lock);
    if (last_err == cudaSuccess && !devs.empty() && devs[(size_t)cur_dev].sticky) return devs[(size_t)cur_dev].sticky;
    return last_err;
}

extern "C" const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define EMU_NAME(x) case x: return #x;
        EMU_NAME(cudaSuccess) EMU_NAME(cudaErrorInvalidValue) EMU_NAME(cudaErrorMemoryAllocation)
        EMU_NAME(cudaErrorInitializationError) EMU_NAME(cudaErrorInvalidConfiguration)
        EMU_NAME(cudaErrorInvalidDevicePointer) EMU_NAME(cudaErrorInvalidMemcpyDirection)
        EMU_NAME(cudaErrorInsufficientDriver) EMU_NAME(cudaErrorNoDevice) EMU_NAME(cudaErrorInvalidDevice)
        EMU_NAME(cudaErrorInvalidResourceHandle) EMU_NAME(cudaErrorIllegalState) EMU_NAME(cudaErrorNotReady)
        EMU_NAME(cudaErrorIllegalAddress) EMU_NAME(cudaErrorLaunchOutOfResources)
        EMU_NAME(cudaErrorHostMemoryAlreadyRegistered) EMU_NAME(cudaErrorHostMemoryNotRegistered)
        EMU_NAME(cudaErrorLaunchFailure) EMU_NAME(cudaErrorNotSupported) EMU_NAME(cudaErrorStreamCaptureUnsupported)
        EMU_NAME(cudaErrorStreamCaptureInvalidated) EMU_NAME(cudaErrorStreamCaptureUnmatched)
        EMU_NAME(cudaErrorStreamCaptureImplicit) EMU_NAME(cudaErrorStreamCaptureWrongThread)
        EMU_NAME(cudaErrorGraphExecUpdateFailure) EMU_NAME(cudaErrorUnknown)
#undef EMU_NAME
    }
    return "cudaErrorUnknown";
}

extern "C" const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure (the CUDA emulator reported a bug: see its emu: line)";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    default: return "unknown error";
    }
}

/* ---- devices ---- */

extern "C" cudaError_t cudaGetDeviceCount(int *count) {
    guard g(big_lock);
    init();
    if (!count) return ret(cudaErrorInvalidValue);
    *count = (int)devs.size();
    return devs.empty() ? ret(cudaErrorNoDevice) : cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *device) {
    guard g(big_lock);
    init();
    if (!device) return ret(cudaErrorInvalidValue);
    if (devs.empty()) return ret(cudaErrorNoDevice);
    *device = cur_dev;
    return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int device) {
    guard g(big_lock);
    init();
    if (devs.empty()) return ret(cudaErrorNoDevice);
    if (device < 0 || device >= (int)devs.size()) return ret(cudaErrorInvalidDevice);
    cur_dev = device;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    guard g(big_lock);
    init();
    if (!p) return ret(cudaErrorInvalidValue);
    if (devs.empty()) return ret(cudaErrorNoDevice);
    if (device < 0 || device >= (int)devs.size()) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "libinfer CUDA emulator");
    p->totalGlobalMem = devs[(size_t)device].total;
    p->sharedMemPerBlock = SMEM_STATIC;
    p->sharedMemPerBlockOptin = SMEM_OPTIN;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = MAX_THREADS;
    p->maxThreadsDim[0] = MAX_THREADS, p->maxThreadsDim[1] = MAX_THREADS, p->maxThreadsDim[2] = MAX_DIM_Z;
    p->maxGridSize[0] = 0x7FFFFFFF, p->maxGridSize[1] = MAX_GRID_YZ, p->maxGridSize[2] = MAX_GRID_YZ;
    p->major = 8, p->minor = 6;
    p->multiProcessorCount = 1;
    p->l2CacheSize = 4 << 20;
    p->memoryBusWidth = 64;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e == cudaErrorNoDevice) return ret(e);
    if ((e = capture_forbids()) != cudaSuccess) return ret(e);
    devs[(size_t)cur_dev].c.syncs++;
    run_device(cur_dev, g);
    return ret(devs[(size_t)cur_dev].sticky);
}

extern "C" cudaError_t cudaDeviceReset(void) {
    guard g(big_lock);
    init();
    if (devs.empty()) return ret(cudaErrorNoDevice);
    run_device(cur_dev, g);
    for (auto it = allocs.begin(); it != allocs.end();)
        if (it->second.device == cur_dev) {
            free(it->second.base);
            it = allocs.erase(it);
        } else {
            ++it;
        }
    devs[(size_t)cur_dev].used = 0;
    devs[(size_t)cur_dev].sticky = cudaSuccess;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    if (!free_bytes || !total_bytes) return ret(cudaErrorInvalidValue);
    const device_state &d = devs[(size_t)cur_dev];
    *free_bytes = d.total - d.used;
    *total_bytes = d.total;
    return cudaSuccess;
}

extern "C" cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return ret(cudaErrorInvalidValue);
    *v = CUDART_VERSION;
    return cudaSuccess;
}

extern "C" cudaError_t cudaRuntimeGetVersion(int *v) { return cudaDriverGetVersion(v); }

/* ---- memory ---- */

static size_t round_alloc(size_t n) { return (n + 255) & ~(size_t)255; }

extern "C" cudaError_t cudaMalloc(void **ptr, size_t size) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    if ((e = capture_forbids()) != cudaSuccess) return ret(e);
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (!size) return cudaSuccess;
    device_state &d = devs[(size_t)cur_dev];
    if (round_alloc(size) > d.total - d.used) return ret(cudaErrorMemoryAllocation);
    void *p = aligned_alloc(256, round_alloc(size));
    if (!p) return ret(cudaErrorMemoryAllocation);
    memset(p, 0xA5, size); /* fresh device memory holds garbage, not zeros */
    allocs[(uintptr_t)p] = allocation{(char *)p, size, cur_dev, false};
    d.used += round_alloc(size);
    d.c.allocs++;
    d.c.bytes_in_use = d.used;
    *ptr = p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *ptr) {
    guard g(big_lock);
    init();
    if (!ptr) return cudaSuccess;
    cudaError_t e = capture_forbids();
    if (e != cudaSuccess) return ret(e);
    auto it = allocs.find((uintptr_t)ptr);
    if (it == allocs.end() || it->second.device < 0) return ret(cudaErrorInvalidValue);
    const int device = it->second.device;
    run_device(device, g); /* cudaFree waits for the device's work */
    it = allocs.find((uintptr_t)ptr);
    if (it == allocs.end()) return ret(cudaErrorInvalidValue);
    devs[(size_t)device].used -= round_alloc(it->second.size);
    devs[(size_t)device].c.bytes_in_use = devs[(size_t)device].used;
    free(it->second.base);
    allocs.erase(it);
    return ret(devs[(size_t)device].sticky);
}

extern "C" cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
    (void)flags;
    guard g(big_lock);
    init();
    cudaError_t e = capture_forbids();
    if (e != cudaSuccess) return ret(e);
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = nullptr;
    if (!size) return cudaSuccess;
    void *p = aligned_alloc(256, round_alloc(size));
    if (!p) return ret(cudaErrorMemoryAllocation);
    allocs[(uintptr_t)p] = allocation{(char *)p, size, -1, false};
    *ptr = p;
    return cudaSuccess;
}

extern "C" cudaError_t cudaMallocHost(void **ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }

extern "C" cudaError_t cudaFreeHost(void *ptr) {
    guard g(big_lock);
    init();
    if (!ptr) return cudaSuccess;
    cudaError_t e = capture_forbids();
    if (e != cudaSuccess) return ret(e);
    auto it = allocs.find((uintptr_t)ptr);
    if (it == allocs.end() || it->second.device >= 0 || it->second.registered) return ret(cudaErrorInvalidValue);
    for (size_t d = 0; d < devs.size(); d++) run_device((int)d, g); /* queued copies may still read or write it */
    it = allocs.find((uintptr_t)ptr);
    free(it->second.base);
    allocs.erase(it);
    return cudaSuccess;
}

extern "C" cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    (void)flags;
    guard g(big_lock);
    init();
    if (!ptr || !size) return ret(cudaErrorInvalidValue);
    auto it = allocs.lower_bound((uintptr_t)ptr);
    if (find_allocation(ptr) || (it != allocs.end() && it->first < (uintptr_t)ptr + size))
        return ret(cudaErrorHostMemoryAlreadyRegistered);
    allocs[(uintptr_t)ptr] = allocation{(char *)ptr, size, -1, true};
    return cudaSuccess;
}

extern "C" cudaError_t cudaHostUnregister(void *ptr) {
    guard g(big_lock);
    init();
    auto it = allocs.find((uintptr_t)ptr);
    if (it == allocs.end() || !it->second.registered) return ret(cudaErrorHostMemoryNotRegistered);
    for (size_t d = 0; d < devs.size(); d++) run_device((int)d, g);
    allocs.erase((uintptr_t)ptr);
    return cudaSuccess;
}

/* Where a copy's side lives: a device (>= 0), pinned host memory (-1), pageable host memory (-2); and
 * whether the n bytes lie inside the allocation. */
static int where_is(const void *p, size_t n, bool *in_bounds) {
    const allocation *a = find_allocation(p);
    *in_bounds = !a || region_in(a, p, n);
    return a ? a->device : -2;
}

/* Builds the copy item after CUDA's checks of direction and bounds. */
static cudaError_t make_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, item *it) {
    bool in_d, in_s;
    const int wd = where_is(dst, n, &in_d), ws = where_is(src, n, &in_s);
    if (!in_d || !in_s) return cudaErrorInvalidValue; /* past the end of an allocation */
    int dir = kind;
    if (kind == cudaMemcpyDefault) dir = wd >= 0 ? (ws >= 0 ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                                 : (ws >= 0 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    const bool ok = (dir == cudaMemcpyHostToDevice && wd >= 0 && ws < 0) ||
                    (dir == cudaMemcpyDeviceToHost && wd < 0 && ws >= 0) ||
                    (dir == cudaMemcpyDeviceToDevice && wd >= 0 && ws >= 0) ||
                    (dir == cudaMemcpyHostToHost && wd < 0 && ws < 0);
    if (kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    if (!ok) return cudaErrorInvalidValue;
    it->kind = K_COPY;
    it->dst = dst, it->src = src, it->bytes = n, it->dir = dir;
    it->dst_device = wd, it->src_device = ws;
    return cudaSuccess;
}

static cudaError_t memcpy_on(stream *s, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, bool async,
                             guard &g) {
    item it;
    cudaError_t e = make_copy(dst, src, n, kind, &it);
    if (e != cudaSuccess) return e;
    if (!n) return cudaSuccess;
    const bool pageable_src = it.src_device == -2, pageable_dst = it.dst_device == -2;
    if (s->capturing && (pageable_src || pageable_dst || !async)) {
        s->invalidated = true;
        return cudaErrorStreamCaptureUnsupported;
    }
    if (pageable_src && it.dir == cudaMemcpyHostToDevice) /* staged now: the caller may reuse src at once */
        it.staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    const int dir = it.dir;
    if ((e = submit(s, std::move(it))) != cudaSuccess) return e;
    /* blocking: every synchronous copy touching the host, and asynchronous ones into pageable memory */
    const bool blocking = dir != cudaMemcpyDeviceToDevice && (!async || (dir == cudaMemcpyDeviceToHost && pageable_dst) ||
                                                              dir == cudaMemcpyHostToHost);
    if (blocking && !s->capturing) {
        devs[(size_t)s->device].c.syncs++;
        run_until(s, s->next_seq - 1, g);
    }
    return devs[(size_t)s->device].sticky;
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    if (kind != cudaMemcpyDeviceToDevice && (e = capture_forbids()) != cudaSuccess) return ret(e);
    return ret(memcpy_on(devs[(size_t)cur_dev].legacy, dst, src, count, kind, false, g));
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                       cudaStream_t sh) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    stream *s = resolve(sh);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    return ret(memcpy_on(s, dst, src, count, kind, true, g));
}

extern "C" cudaError_t cudaMemcpyPeer(void *dst, int dst_device, const void *src, int src_device, size_t count) {
    (void)dst_device, (void)src_device;
    return cudaMemcpy(dst, src, count, cudaMemcpyDeviceToDevice);
}

extern "C" cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src, int src_device, size_t count,
                                           cudaStream_t stream) {
    (void)dst_device, (void)src_device;
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

static cudaError_t memset_on(stream *s, void *p, int value, size_t n) {
    const allocation *a = find_allocation(p);
    if (!a || !region_in(a, p, n)) return cudaErrorInvalidValue;
    if (!n) return cudaSuccess;
    item it;
    it.kind = K_SET;
    it.dst = p, it.value = value, it.bytes = n;
    return submit(s, std::move(it));
}

extern "C" cudaError_t cudaMemset(void *ptr, int value, size_t count) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    return ret(memset_on(devs[(size_t)cur_dev].legacy, ptr, value, count));
}

extern "C" cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t sh) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    stream *s = resolve(sh);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    return ret(memset_on(s, ptr, value, count));
}

/* ---- streams ---- */

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    if (!out || flags > cudaStreamNonBlocking) return ret(cudaErrorInvalidValue);
    all_streams.emplace_back();
    stream *s = &all_streams.back();
    s->device = cur_dev, s->flags = flags, s->legacy = false;
    devs[(size_t)cur_dev].streams.push_back(s);
    live_streams.insert((emu_stream *)s);
    *out = s;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, 0); }

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t h) {
    guard g(big_lock);
    init();
    if (!h || !live_streams.count((const void *)h)) return ret(cudaErrorInvalidResourceHandle);
    stream *s = (stream *)(emu_stream *)h;
    if (s->capturing) return ret(cudaErrorIllegalState);
    run_stream(s, g); /* its work completes; only then is it gone */
    s->alive = false;
    live_streams.erase((const void *)h);
    auto &v = devs[(size_t)s->device].streams;
    v.erase(std::find(v.begin(), v.end(), s));
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t h) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e == cudaErrorNoDevice) return ret(e);
    stream *s = resolve(h);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (s->capturing) {
        s->invalidated = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if ((e = capture_forbids()) != cudaSuccess) return ret(e);
    devs[(size_t)s->device].c.syncs++;
    run_stream(s, g);
    return ret(devs[(size_t)s->device].sticky);
}

extern "C" cudaError_t cudaStreamQuery(cudaStream_t h) {
    guard g(big_lock);
    init();
    stream *s = resolve(h);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (s->capturing) {
        s->invalidated = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (s->done_seq == s->next_seq - 1) return devs[(size_t)s->device].sticky;
    static thread_local const void *last_polled = nullptr; /* not ready the first time: progress the next */
    if (last_polled != (const void *)s) {
        last_polled = s;
        return cudaErrorNotReady;
    }
    last_polled = nullptr;
    run_stream(s, g);
    return ret(devs[(size_t)s->device].sticky);
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int flags) {
    guard g(big_lock);
    init();
    stream *s = resolve(h);
    if (!s || !ev || !live_events.count((const void *)ev) || flags) return ret(cudaErrorInvalidResourceHandle);
    event_state *e = (event_state *)(emu_event *)ev;
    if (!e->recorded) return cudaSuccess; /* never recorded: nothing to wait for */
    item it;
    it.kind = K_WAIT;
    it.wait_stream = e->s, it.wait_seq = e->seq;
    return ret(submit(s, std::move(it)));
}

extern "C" cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void *user_data) {
    guard g(big_lock);
    if (!fn) return ret(cudaErrorInvalidValue);
    return ret(enqueue_host_work(h, [fn, user_data](guard &) { fn(user_data); }, "cudaLaunchHostFunc", nullptr));
}

/* ---- events ---- */

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    if (!out) return ret(cudaErrorInvalidValue);
    all_events.emplace_back();
    event_state *ev = &all_events.back();
    ev->device = cur_dev, ev->flags = flags;
    live_events.insert((emu_event *)ev);
    *out = ev;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, 0); }

static event_state *event_of(cudaEvent_t h) {
    return h && live_events.count((const void *)h) ? (event_state *)(emu_event *)h : nullptr;
}

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t h) {
    guard g(big_lock);
    event_state *e = event_of(h);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    e->alive = false;
    live_events.erase((const void *)h);
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t sh) {
    guard g(big_lock);
    init();
    event_state *e = event_of(h);
    stream *s = resolve(sh);
    if (!e || !s || e->device != s->device) return ret(cudaErrorInvalidResourceHandle);
    item it;
    it.kind = K_RECORD;
    it.ev = e;
    const uint64_t seq = s->next_seq;
    const cudaError_t err = submit(s, std::move(it));
    if (err != cudaSuccess) return ret(err);
    e->recorded = true, e->complete = false, e->s = s, e->seq = seq, e->polls = 0;
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t h) {
    guard g(big_lock);
    event_state *e = event_of(h);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    cudaError_t err = capture_forbids();
    if (err != cudaSuccess) return ret(err);
    if (!e->recorded) return cudaSuccess;
    devs[(size_t)e->device].c.syncs++;
    run_until(e->s, e->seq, g);
    return ret(devs[(size_t)e->device].sticky);
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t h) {
    guard g(big_lock);
    event_state *e = event_of(h);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (!e->recorded || e->complete) return cudaSuccess;
    if (e->polls++ == 0) return cudaErrorNotReady; /* not yet; the next poll makes progress */
    run_until(e->s, e->seq, g);
    return ret(devs[(size_t)e->device].sticky);
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    guard g(big_lock);
    event_state *a = event_of(start), *b = event_of(end);
    if (!ms || !a || !b) return ret(cudaErrorInvalidValue);
    if ((a->flags | b->flags) & cudaEventDisableTiming) return ret(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded) return ret(cudaErrorInvalidResourceHandle);
    if (!a->complete || !b->complete) return ret(cudaErrorNotReady);
    *ms = (float)((b->time - a->time) * 1e3);
    return cudaSuccess;
}

/* ---- graphs ---- */

extern "C" cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    if (!h || h == cudaStreamLegacy || h == cudaStreamPerThread) return ret(cudaErrorStreamCaptureUnsupported);
    stream *s = resolve(h);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (s->capturing || mode > cudaStreamCaptureModeRelaxed) return ret(cudaErrorIllegalState);
    all_graphs.emplace_back();
    graph_state *gr = &all_graphs.back();
    gr->device = s->device;
    live_graphs.insert((emu_graph *)gr);
    s->capturing = true, s->invalidated = false, s->mode = mode, s->cap_thread = std::this_thread::get_id(), s->cap = gr;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *out) {
    guard g(big_lock);
    init();
    stream *s = resolve(h);
    if (!s || !out) return ret(cudaErrorInvalidValue);
    if (!s->capturing) return ret(cudaErrorIllegalState);
    if (s->mode != cudaStreamCaptureModeRelaxed && s->cap_thread != std::this_thread::get_id())
        return ret(cudaErrorStreamCaptureWrongThread);
    graph_state *gr = s->cap;
    s->capturing = false, s->cap = nullptr;
    if (s->invalidated) {
        live_graphs.erase((const void *)(emu_graph *)gr);
        *out = nullptr;
        return ret(cudaErrorStreamCaptureInvalidated);
    }
    *out = gr;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *status) {
    guard g(big_lock);
    stream *s = resolve(h);
    if (!s || !status) return ret(cudaErrorInvalidValue);
    *status = !s->capturing ? cudaStreamCaptureStatusNone
              : s->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

static graph_state *graph_of(cudaGraph_t h) {
    return h && live_graphs.count((const void *)h) ? (graph_state *)(emu_graph *)h : nullptr;
}
static graph_exec_state *exec_of(cudaGraphExec_t h) {
    return h && live_execs.count((const void *)h) ? (graph_exec_state *)(emu_graph_exec *)h : nullptr;
}

extern "C" cudaError_t cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t h, unsigned long long flags) {
    guard g(big_lock);
    graph_state *gr = graph_of(h);
    if (!out || !gr || flags) return ret(cudaErrorInvalidValue);
    all_execs.emplace_back();
    graph_exec_state *x = &all_execs.back();
    x->nodes = gr->nodes, x->device = gr->device;
    live_execs.insert((emu_graph_exec *)x);
    *out = x;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphLaunch(cudaGraphExec_t h, cudaStream_t sh) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    graph_exec_state *x = exec_of(h);
    stream *s = resolve(sh);
    if (!x || !s) return ret(cudaErrorInvalidResourceHandle);
    if (s->capturing) { /* a graph inside a capture: not emulated */
        s->invalidated = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (s->device != x->device) return ret(cudaErrorInvalidValue);
    devs[(size_t)s->device].c.graph_launches++;
    for (const item &n : x->nodes) { /* copies: a later update does not reach work already launched */
        item it = n;
        it.deps.clear();
        if ((e = submit(s, std::move(it))) != cudaSuccess) return ret(e);
    }
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphExecUpdate(cudaGraphExec_t h, cudaGraph_t gh, cudaGraphExecUpdateResultInfo *info) {
    guard g(big_lock);
    graph_exec_state *x = exec_of(h);
    graph_state *gr = graph_of(gh);
    if (!x || !gr || !info) return ret(cudaErrorInvalidValue);
    info->errorNode = info->errorFromNode = nullptr;
    info->result = cudaGraphExecUpdateSuccess;
    if (x->nodes.size() != gr->nodes.size() || x->device != gr->device) info->result = cudaGraphExecUpdateErrorTopologyChanged;
    for (size_t i = 0; i < x->nodes.size() && info->result == cudaGraphExecUpdateSuccess; i++) {
        const item &a = x->nodes[i], &b = gr->nodes[i];
        if (a.kind != b.kind) info->result = cudaGraphExecUpdateErrorNodeTypeChanged;
        else if (a.kind == K_COPY && (a.dir != b.dir || a.dst_device != b.dst_device || a.src_device != b.src_device))
            info->result = cudaGraphExecUpdateErrorParametersChanged; /* memory type or device of an operand */
        else if (a.kind == K_HOST) info->result = cudaGraphExecUpdateErrorNotSupported; /* not emulated */
    }
    if (info->result != cudaGraphExecUpdateSuccess) return ret(cudaErrorGraphExecUpdateFailure);
    x->nodes = gr->nodes;
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphExecDestroy(cudaGraphExec_t h) {
    guard g(big_lock);
    if (!exec_of(h)) return ret(cudaErrorInvalidValue);
    live_execs.erase((const void *)h);
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphDestroy(cudaGraph_t h) {
    guard g(big_lock);
    if (!graph_of(h)) return ret(cudaErrorInvalidValue);
    live_graphs.erase((const void *)h);
    return cudaSuccess;
}

extern "C" cudaError_t cudaGraphGetNodes(cudaGraph_t h, cudaGraphNode_t *nodes, size_t *num_nodes) {
    guard g(big_lock);
    graph_state *gr = graph_of(h);
    if (!gr || !num_nodes) return ret(cudaErrorInvalidValue);
    if (nodes)
        for (size_t i = 0; i < *num_nodes && i < gr->nodes.size(); i++) nodes[i] = (cudaGraphNode_t)(uintptr_t)(i + 1);
    *num_nodes = gr->nodes.size();
    return cudaSuccess;
}

/* ---- kernels ---- */

extern "C" cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    guard g(big_lock);
    cudaError_t e = dev_check();
    if (e != cudaSuccess) return ret(e);
    if (!func) return ret(cudaErrorInvalidValue); /* note: any pointer is taken as a kernel */
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > SMEM_OPTIN) return ret(cudaErrorInvalidValue);
        func_max_smem[func] = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return value < -1 || value > 100 ? ret(cudaErrorInvalidValue) : cudaSuccess;
    return ret(cudaErrorInvalidValue);
}

/* ---- emu_api.h ---- */

extern "C" int emu_device_count(void) {
    guard g(big_lock);
    init();
    return (int)devs.size();
}

extern "C" void emu_counters_get(int device, struct emu_counters *out) {
    guard g(big_lock);
    init();
    memset(out, 0, sizeof *out);
    if (device >= 0 && device < (int)devs.size()) *out = devs[(size_t)device].c;
}

extern "C" void emu_counters_reset(void) {
    guard g(big_lock);
    for (device_state &d : devs) {
        d.c = emu_counters{};
        d.c.bytes_in_use = d.used;
    }
}

extern "C" uint64_t emu_reports(void) {
    guard g(big_lock);
    return n_reports;
}

extern "C" const char *emu_last_report(void) {
    guard g(big_lock);
    return last_report.c_str();
}
