/* nccl.cc: NCCL with ranks as host threads, of this process or of several, each on its own emulated device.
 *
 * ncclGetUniqueId gives an id naming a shared-memory segment (nccl_shm.cc) that does not exist yet; it may
 * be handed to other processes (a file, an environment variable). ncclCommInitRank maps the segment (the
 * first rank creates it), claims its rank there and waits until all nranks ranks have joined, from this
 * process or others (inside ncclGroupStart / End the wait moves to ncclGroupEnd, so one thread can create
 * several ranks). ncclCommInitAll makes a whole clique of this process at once, without a segment. A
 * rank's device is the one current when it joined.
 * A collective is host work queued on the rank's stream (captured into graphs like any other): when the
 * stream reaches it, the rank arrives. A rank whose partners in this process have not arrived runs their
 * streams up to the same collective (any host thread may, as a GPU would progress on its own) and waits
 * for partners that have not queued it yet, so a thread driving several ranks brings all of them before
 * it waits for other processes. When the last rank of this process arrives:
 *   - every rank lives here (thread mode): it performs the collective for all, reading every rank's send
 *     buffer and writing every receive buffer;
 *   - some live in other processes (process mode): exchange() passes the data through the segment in
 *     rounds of SLOT_BYTES per rank, each process computing its own ranks' results from all the data.
 * Either way sums are taken in rank order in the element type's float (halves widened to float, rounded
 * back), so every rank gets the same bits, in both modes. The n-th collective of each rank on a
 * communicator meets the n-th of every other; a mismatch of kind, count, type, operation or root is
 * reported as a bug. A partner process that exits, or keeps one wait (the join, one step of a collective)
 * longer than INFER_EMU_NCCL_TIMEOUT seconds (read at ncclCommInitRank; default 600, 0: for ever), fails
 * a waiting ncclCommInitRank / ncclGroupEnd with ncclRemoteError; in a collective it is reported, the
 * devices of this process's ranks fail, and their communicators' asynchronous error
 * (ncclCommGetAsyncError) becomes ncclRemoteError.
 */
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "cuda_fp16.h"
#include "internal.h"
#include "nccl.h"
#include "nccl_shm.h"

namespace emu {

enum coll_kind { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER };

struct clique;
struct rank_call {
    const void *send;
    void *recv;
    size_t count;
    int type, op, root, kind;
};
struct instance {
    std::vector<rank_call> calls;
    std::vector<bool> arrived;
    int n_arrived = 0, n_left = 0;
    bool started = false; /* a thread performs it (in process mode partly without big_lock) */
    bool done = false;
};

} /* namespace emu */

struct emu_nccl_comm {
    emu::clique *c;
    int rank, device;
    uint64_t next; /* this rank's collectives executed so far */
    std::vector<cudaStream_t> streams; /* streams it queued collectives on */
    bool alive;
    ncclResult_t async; /* ncclCommGetAsyncError: ncclRemoteError once a partner process was lost */
};

namespace emu {

static const char ID_PREFIX[] = "/emu-nccl-";

struct clique {
    std::string id;
    int nranks;
    std::vector<emu_nccl_comm *> ranks; /* this process's ranks (NULL: a rank of another process) */
    std::vector<int> local;             /* their numbers, once every rank has joined (settled) */
    std::map<uint64_t, instance> inst;
    /* the segment: mapped from ncclCommInitRank until the clique proves to live here alone, or until
     * this process's ranks are all destroyed */
    shm_seg *seg = nullptr;
    bool settled = false; /* every rank has joined */
    bool remote = false;  /* some rank lives in another process */
    bool failed = false;  /* a partner process was lost: for good */
    int live = 0;         /* this process's communicators not destroyed */
    int unlocked = 0;     /* threads waiting on the segment without big_lock: it stays mapped */
};

static std::list<clique> cliques;
static std::list<emu_nccl_comm> comms;
static thread_local int group_depth;
static thread_local std::vector<clique *> group_pending;

static size_t type_size(int t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

static double get(const void *p, int t, size_t i) {
    switch (t) {
    case ncclInt8: return ((const int8_t *)p)[i];
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclUint32: return ((const uint32_t *)p)[i];
    case ncclInt64: return (double)((const int64_t *)p)[i];
    case ncclUint64: return (double)((const uint64_t *)p)[i];
    case ncclFloat16: return emu_f16_bits_to_f32(((const uint16_t *)p)[i]);
    case ncclBfloat16: {
        const uint32_t b = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case ncclFloat32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static void put(void *p, int t, size_t i, double v) {
    switch (t) {
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)p)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t *)p)[i] = emu_f32_to_f16_bits((float)v); break;
    case ncclBfloat16: {
        const float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        b += 0x7FFFu + ((b >> 16) & 1); /* round to nearest even */
        ((uint16_t *)p)[i] = (uint16_t)(b >> 16);
        break;
    }
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

/* a op b in the element type (floats: each step rounded to float, as a GPU reduction would) */
static double combine(double a, double b, int op, int t) {
    double r = op == ncclProd ? a * b : op == ncclMax ? (a > b ? a : b) : op == ncclMin ? (a < b ? a : b) : a + b;
    if (t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16) r = (float)r;
    return r;
}

/* Element i of the reduction of the ranks' buffers, in rank order (both modes: the same bits everywhere). */
static double reduce_at(const std::vector<const void *> &bufs, int t, int op, size_t i) {
    double v = get(bufs[0], t, i);
    for (size_t r = 1; r < bufs.size(); r++) v = combine(v, get(bufs[r], t, i), op, t);
    if (op == ncclAvg) v /= (double)bufs.size();
    return v;
}

/* Elements a collective walks through: the send buffer's. */
static size_t elements(const rank_call &k, int nranks) {
    return k.kind == C_REDUCESCATTER ? k.count * (size_t)nranks : k.count;
}

/* Thread mode: every rank is here; one pass over all of them. */
static void perform(clique *c, instance &in) {
    const int n = c->nranks;
    const rank_call &k0 = in.calls[0];
    const size_t es = type_size(k0.type), cnt = k0.count;
    switch (k0.kind) {
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_REDUCESCATTER: {
        std::vector<const void *> sends((size_t)n);
        for (int r = 0; r < n; r++) sends[(size_t)r] = in.calls[(size_t)r].send;
        const size_t total = elements(k0, n);
        std::vector<double> acc(total);
        for (size_t i = 0; i < total; i++) acc[i] = reduce_at(sends, k0.type, k0.op, i);
        for (int r = 0; r < n; r++) {
            if (k0.kind == C_REDUCE && r != k0.root) continue;
            const size_t off = k0.kind == C_REDUCESCATTER ? cnt * (size_t)r : 0;
            for (size_t i = 0; i < cnt; i++) put(in.calls[(size_t)r].recv, k0.type, i, acc[off + i]);
        }
        break;
    }
    case C_BROADCAST: {
        std::vector<char> src((const char *)in.calls[(size_t)k0.root].send,
                              (const char *)in.calls[(size_t)k0.root].send + cnt * es);
        for (int r = 0; r < n; r++) memcpy(in.calls[(size_t)r].recv, src.data(), cnt * es);
        break;
    }
    case C_ALLGATHER: {
        std::vector<char> all(cnt * es * (size_t)n);
        for (int r = 0; r < n; r++) memcpy(all.data() + cnt * es * (size_t)r, in.calls[(size_t)r].send, cnt * es);
        for (int r = 0; r < n; r++) memcpy(in.calls[(size_t)r].recv, all.data(), all.size());
        break;
    }
    default: break;
    }
}

static const char *kind_name(int k) {
    static const char *const names[] = {"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather",
                                        "ncclReduceScatter"};
    return names[k];
}

/* The ranks' calls of collective n agree (reported on `device` when not). */
static bool same_calls(const std::vector<shm_call> &k, uint64_t n, int device) {
    for (size_t r = 1; r < k.size(); r++)
        if (k[r].kind != k[0].kind || k[r].count != k[0].count || k[r].type != k[0].type || k[r].op != k[0].op ||
            k[r].root != k[0].root) {
            report(device, std::string("NCCL: collective #") + std::to_string(n) + " differs between ranks: rank 0 " +
                               kind_name(k[0].kind) + " of " + std::to_string(k[0].count) + ", rank " + std::to_string(r) +
                               " " + kind_name(k[r].kind) + " of " + std::to_string(k[r].count));
            return false;
        }
    return true;
}

static shm_call as_shm_call(const rank_call &k) { return shm_call{k.count, k.kind, k.type, k.op, k.root}; }

/* Unmaps the segment once nothing here needs it: every rank lives here, or every rank here is destroyed. */
static void release_segment(clique *c) {
    if (c->seg && !c->unlocked && ((c->settled && !c->remote) || !c->live)) {
        shm_detach(c->seg);
        c->seg = nullptr;
    }
}

static void settle(clique *c) {
    if (c->settled) return;
    c->settled = true;
    for (int r = 0; r < c->nranks; r++)
        if (c->ranks[(size_t)r]) c->local.push_back(r);
    c->remote = (int)c->local.size() < c->nranks;
}

/* A partner process was lost: the clique fails for good, here and (through the segment) everywhere. In a
 * collective (device >= 0) that is reported and every device of this process's ranks fails. */
static void lose(clique *c, int device, const std::string &why) {
    if (c->seg) shm_give_up(c->seg);
    c->failed = true;
    for (emu_nccl_comm *x : c->ranks)
        if (x) x->async = ncclRemoteError;
    if (device < 0) return;
    report(device, why);
    for (emu_nccl_comm *x : c->ranks)
        if (x && x->device != device) fail_device(x->device);
}

/* Waits until every rank of c has joined, from any process. */
static ncclResult_t wait_joined(clique *c, guard &g) {
    if (c->failed) return ncclRemoteError;
    if (c->settled) return ncclSuccess;
    if (!c->seg) return ncclInvalidUsage; /* its ranks here were destroyed before the others joined */
    std::string why;
    c->unlocked++;
    g.unlock();
    const ncclResult_t e = shm_wait_joined(c->seg, &why);
    g.lock();
    c->unlocked--;
    if (e == ncclSuccess) settle(c);
    else if (!c->failed) lose(c, -1, why);
    release_segment(c);
    return c->failed ? ncclRemoteError : ncclSuccess;
}

/* The segment's barrier, waited at without big_lock; false when a partner process was lost (reported). */
static bool barrier(clique *c, emu_nccl_comm *me, uint64_t n, int kind, guard &g) {
    std::string why;
    c->unlocked++;
    g.unlock();
    const ncclResult_t e = shm_barrier(c->seg, (int)c->local.size(), &why);
    g.lock();
    c->unlocked--;
    if (e == ncclSuccess) return true;
    if (!c->failed)
        lose(c, me->device, "NCCL: collective #" + std::to_string(n) + " (" + kind_name(kind) + "): " + why);
    return false;
}

/* Process mode, collective n, every rank of this process arrived. Each round this process copies the next
 * chunk of its ranks' send buffers into their slots, waits for every rank, computes its own ranks' results
 * for that chunk from all the slots, and waits again before the slots are reused. Fixed slots and rounds
 * (rather than a segment grown to the largest call) keep the segment small and its mapping fixed. The
 * first wait also publishes every rank's call: each process finds a mismatch itself, and all stop there. */
static void exchange(clique *c, instance &in, uint64_t n, emu_nccl_comm *me, guard &g) {
    if (!c->seg) {
        report(me->device, std::string("NCCL: collective #") + std::to_string(n) +
                               " runs after every communicator of its clique in this process was destroyed");
        return;
    }
    shm_seg *s = c->seg;
    const int nr = c->nranks;
    std::vector<const void *> slots((size_t)nr);
    for (int r = 0; r < nr; r++) slots[(size_t)r] = shm_slot(s, r);
    for (int r : c->local) *shm_call_of(s, r) = as_shm_call(in.calls[(size_t)r]);
    const rank_call &k = in.calls[(size_t)c->local[0]]; /* every rank's, once the first round has checked */
    const size_t es = type_size(k.type), step = SLOT_BYTES / es, total = elements(k, nr);
    for (size_t a = 0, round = 0; round == 0 || a < total; a += step, round++) {
        for (int r : c->local) { /* each by its own call: they may differ until checked */
            const rank_call &x = in.calls[(size_t)r];
            const size_t xes = type_size(x.type), xtotal = elements(x, nr);
            if (a < xtotal && (x.kind != C_BROADCAST || r == x.root))
                memcpy(shm_slot(s, r), (const char *)x.send + a * xes,
                       std::min(SLOT_BYTES / xes, xtotal - a) * xes);
        }
        if (!barrier(c, me, n, k.kind, g)) return;
        if (round == 0) {
            std::vector<shm_call> calls((size_t)nr);
            for (int r = 0; r < nr; r++) calls[(size_t)r] = *shm_call_of(s, r);
            if (!same_calls(calls, n, me->device)) {
                barrier(c, me, n, k.kind, g);
                return;
            }
        }
        const size_t b = std::min(a + step, total);
        switch (k.kind) {
        case C_ALLREDUCE:
        case C_REDUCE:
        case C_REDUCESCATTER:
            if (k.kind == C_REDUCE && !c->ranks[(size_t)k.root]) break; /* the root is elsewhere */
            for (size_t i = a; i < b; i++) {
                const double v = reduce_at(slots, k.type, k.op, i - a);
                for (int r : c->local) {
                    void *recv = in.calls[(size_t)r].recv;
                    if (k.kind == C_ALLREDUCE || (k.kind == C_REDUCE && r == k.root)) put(recv, k.type, i, v);
                    else if (k.kind == C_REDUCESCATTER && i / k.count == (size_t)r)
                        put(recv, k.type, i - k.count * (size_t)r, v);
                }
            }
            break;
        case C_BROADCAST:
            for (int r : c->local)
                memcpy((char *)in.calls[(size_t)r].recv + a * es, slots[(size_t)k.root], (b - a) * es);
            break;
        case C_ALLGATHER:
            for (int r : c->local)
                for (int q = 0; q < nr; q++) {
                    char *dst = (char *)in.calls[(size_t)r].recv + (k.count * (size_t)q + a) * es;
                    memcpy(dst, slots[(size_t)q], (b - a) * es);
                }
            break;
        default: break;
        }
        if (!barrier(c, me, n, k.kind, g)) return;
    }
}

/* Runs the stream of a rank here that has not arrived up to this collective; false when none could. */
static bool help(clique *c, const instance &in, guard &g) {
    for (int r : c->local) {
        if (in.arrived[(size_t)r]) continue;
        for (cudaStream_t s : c->ranks[(size_t)r]->streams)
            if (run_through_tagged(s, c->ranks[(size_t)r], g)) return true;
    }
    return false;
}

/* Rank me's stream has reached its collective: arrive, help the others here get there; the last to arrive
 * here performs it (thread mode) or exchanges with the other processes (process mode). */
static void arrive(emu_nccl_comm *me, rank_call call, guard &g) {
    clique *c = me->c;
    if (wait_joined(c, g) != ncclSuccess) return; /* queued in the group that created it, and the join failed */
    const uint64_t n = me->next++;
    const int here = (int)c->local.size();
    instance &in = c->inst[n];
    if (in.calls.empty()) in.calls.resize((size_t)c->nranks), in.arrived.assign((size_t)c->nranks, false);
    in.calls[(size_t)me->rank] = call;
    in.arrived[(size_t)me->rank] = true;
    in.n_arrived++;
    big_cond.notify_all();
    while (!in.done && !c->failed) {
        if (in.n_arrived == here && !in.started) {
            in.started = true;
            if (c->remote) {
                exchange(c, in, n, me, g);
            } else {
                std::vector<shm_call> calls((size_t)c->nranks);
                for (int r = 0; r < c->nranks; r++) calls[(size_t)r] = as_shm_call(in.calls[(size_t)r]);
                if (same_calls(calls, n, me->device)) perform(c, in);
            }
            in.done = true;
            big_cond.notify_all();
            break;
        }
        if (in.started || !help(c, in, g)) big_cond.wait(g);
    }
    if (++in.n_left == here) c->inst.erase(n);
    release_segment(c); /* the last communicator here may have been destroyed meanwhile */
}

static ncclResult_t enqueue(emu_nccl_comm *me, rank_call call, cudaStream_t s) {
    guard g(big_lock);
    bool known = false;
    for (const emu_nccl_comm &x : comms) known = known || (&x == me && x.alive);
    if (!known) return ncclInvalidArgument;
    if (me->async != ncclSuccess) return me->async;
    if (stream_device(s) != me->device) return ncclInvalidArgument; /* the stream must be on the rank's device */
    if (std::find(me->streams.begin(), me->streams.end(), s) == me->streams.end()) me->streams.push_back(s);
    const cudaError_t e = enqueue_host_work(s, [me, call](guard &gg) { arrive(me, call, gg); }, kind_name(call.kind), me);
    big_cond.notify_all();
    return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

static clique *new_clique(const std::string &id, int nranks) {
    cliques.emplace_back();
    clique *c = &cliques.back();
    c->id = id, c->nranks = nranks;
    c->ranks.assign((size_t)nranks, nullptr);
    return c;
}

static emu_nccl_comm *add_rank(clique *c, int rank, int device) {
    comms.push_back(emu_nccl_comm{c, rank, device, 0, {}, true, ncclSuccess});
    c->ranks[(size_t)rank] = &comms.back();
    c->live++;
    return &comms.back();
}

/* INFER_EMU_NCCL_TIMEOUT: seconds one wait for other processes may last (<= 0: for ever). */
static double timeout_setting() {
    const char *t = getenv("INFER_EMU_NCCL_TIMEOUT");
    return t && *t ? strtod(t, nullptr) : 600;
}

} /* namespace emu */

using namespace emu;

extern "C" ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* The name of a segment not created yet: this process and a random number, so that ids never collide. */
extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    static std::mutex m;
    static std::mt19937_64 rng(std::random_device{}());
    std::lock_guard<std::mutex> l(m);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "%s%d-%016llx", ID_PREFIX, (int)getpid(), (unsigned long long)rng());
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
    if (key.compare(0, sizeof ID_PREFIX - 1, ID_PREFIX) != 0 || key.size() == sizeof id.internal)
        return ncclInvalidArgument; /* not from ncclGetUniqueId */
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return ncclUnhandledCudaError;
    guard g(big_lock);
    clique *c = nullptr;
    for (clique &x : cliques)
        if (x.id == key && x.seg && !x.settled && !x.failed) c = &x;
    if (!c) {
        shm_seg *seg = nullptr;
        const ncclResult_t e = shm_attach(key.c_str(), nranks, timeout_setting(), &seg);
        if (e != ncclSuccess) return e;
        c = new_clique(key, nranks);
        c->seg = seg;
    }
    if (c->nranks != nranks || c->ranks[(size_t)rank]) return ncclInvalidUsage;
    const ncclResult_t e = shm_join(c->seg, rank); /* ncclInvalidUsage: another process has that rank */
    if (e != ncclSuccess) {
        release_segment(c);
        return e;
    }
    *out = add_rank(c, rank, device);
    if (group_depth) {
        group_pending.push_back(c);
        return ncclSuccess;
    }
    return wait_joined(c, g);
}

/* Every rank in this process: no segment, no other process can join. */
extern "C" ncclResult_t ncclCommInitAll(ncclComm_t *out, int ndev, const int *devlist) {
    if (!out || ndev < 1) return ncclInvalidArgument;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return ncclUnhandledCudaError;
    for (int r = 0; r < ndev; r++)
        if ((devlist ? devlist[r] : r) < 0 || (devlist ? devlist[r] : r) >= n) return ncclInvalidArgument;
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    guard g(big_lock);
    clique *c = new_clique(id.internal, ndev);
    for (int r = 0; r < ndev; r++) out[r] = add_rank(c, r, devlist ? devlist[r] : r);
    settle(c);
    return ncclSuccess;
}

static ncclResult_t destroy(ncclComm_t comm) {
    guard g(big_lock);
    for (emu_nccl_comm &x : comms)
        if (&x == comm && x.alive) {
            x.alive = false;
            x.c->live--;
            release_segment(x.c);
            return ncclSuccess;
        }
    return ncclInvalidArgument;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) { return destroy(comm); }
extern "C" ncclResult_t ncclCommAbort(ncclComm_t comm) { return destroy(comm); }

extern "C" ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err) {
    if (!comm || !err) return ncclInvalidArgument;
    guard g(big_lock);
    *err = comm->async;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCount(ncclComm_t comm, int *count) {
    if (!comm || !count) return ncclInvalidArgument;
    *count = comm->c->nranks;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *device) {
    if (!comm || !device) return ncclInvalidArgument;
    *device = comm->device;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank) {
    if (!comm || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

extern "C" const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

extern "C" ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

/* The joins of the group's ncclCommInitRank calls: every rank of this thread has registered by now. */
extern "C" ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) return ncclInvalidUsage;
    if (--group_depth) return ncclSuccess;
    guard g(big_lock);
    ncclResult_t r = ncclSuccess;
    for (clique *c : group_pending) {
        const ncclResult_t e = wait_joined(c, g);
        if (r == ncclSuccess) r = e;
    }
    group_pending.clear();
    return r;
}

extern "C" ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t comm, cudaStream_t s) {
    return enqueue(comm, rank_call{send, recv, count, t, op, 0, C_ALLREDUCE}, s);
}

extern "C" ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                                      ncclComm_t comm, cudaStream_t s) {
    return enqueue(comm, rank_call{send, recv, count, t, 0, root, C_BROADCAST}, s);
}

extern "C" ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                   int root, ncclComm_t comm, cudaStream_t s) {
    return enqueue(comm, rank_call{send, recv, count, t, op, root, C_REDUCE}, s);
}

extern "C" ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,
                                      cudaStream_t s) {
    return enqueue(comm, rank_call{send, recv, count, t, 0, 0, C_ALLGATHER}, s);
}

extern "C" ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t,
                                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
    return enqueue(comm, rank_call{send, recv, count, t, op, 0, C_REDUCESCATTER}, s);
}
