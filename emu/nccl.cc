/* nccl.cc: NCCL with ranks as host threads of this process, each on its own emulated device.
 *
 * ncclGetUniqueId gives a random id; ncclCommInitRank waits until all nranks ranks have joined that id
 * (inside ncclGroupStart / End the wait moves to ncclGroupEnd, so one thread can create several ranks);
 * ncclCommInitAll makes a whole clique at once. A rank's device is the one current when it joined.
 * A collective is host work queued on the rank's stream (captured into graphs like any other): when the
 * stream reaches it, the rank arrives; the last rank to arrive performs it for all, reading every
 * rank's send buffer and writing every receive buffer. A rank whose partners have not arrived runs their
 * streams up to the same collective (any host thread may, as a GPU would progress on its own) and waits
 * for partners that have not queued it yet. The n-th collective of each rank on a communicator meets the
 * n-th of every other; a mismatch of kind, count, type or operation is reported as a bug. Sums are taken
 * in rank order in the element type's float (halves widened to float, rounded back).
 */
#include <cstdio>
#include <cstring>
#include <random>

#include "cuda_fp16.h"
#include "internal.h"
#include "nccl.h"

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
    bool done = false;
};

} /* namespace emu */

struct emu_nccl_comm {
    emu::clique *c;
    int rank, device;
    uint64_t next; /* this rank's collectives executed so far */
    std::vector<cudaStream_t> streams; /* streams it queued collectives on */
    bool alive;
};

namespace emu {

struct clique {
    std::string id;
    int nranks, joined = 0;
    std::vector<emu_nccl_comm *> ranks;
    std::map<uint64_t, instance> inst;
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

static void perform(clique *c, instance &in) {
    const int n = c->nranks;
    const rank_call &k0 = in.calls[0];
    const size_t es = type_size(k0.type), cnt = k0.count;
    switch (k0.kind) {
    case C_ALLREDUCE:
    case C_REDUCE:
    case C_REDUCESCATTER: {
        const size_t total = k0.kind == C_REDUCESCATTER ? cnt * (size_t)n : cnt;
        std::vector<double> acc(total);
        for (size_t i = 0; i < total; i++) {
            double v = get(in.calls[0].send, k0.type, i);
            for (int r = 1; r < n; r++) v = combine(v, get(in.calls[(size_t)r].send, k0.type, i), k0.op, k0.type);
            if (k0.op == ncclAvg) v /= n;
            acc[i] = v;
        }
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

/* Rank `self`'s stream has reached its collective: arrive, help the others get there, perform it last. */
static void arrive(emu_nccl_comm *me, rank_call call, guard &g) {
    clique *c = me->c;
    const uint64_t n = me->next++;
    instance &in = c->inst[n];
    if (in.calls.empty()) in.calls.resize((size_t)c->nranks), in.arrived.assign((size_t)c->nranks, false);
    in.calls[(size_t)me->rank] = call;
    in.arrived[(size_t)me->rank] = true;
    in.n_arrived++;
    big_cond.notify_all();
    while (!in.done) {
        if (in.n_arrived == c->nranks) {
            const rank_call &k0 = in.calls[0];
            for (int r = 1; r < c->nranks; r++) {
                const rank_call &k = in.calls[(size_t)r];
                if (k.kind != k0.kind || k.count != k0.count || k.type != k0.type || k.op != k0.op || k.root != k0.root) {
                    report(me->device, std::string("NCCL: collective #") + std::to_string(n) + " differs between ranks: rank 0 " +
                                           kind_name(k0.kind) + " of " + std::to_string(k0.count) + ", rank " +
                                           std::to_string(r) + " " + kind_name(k.kind) + " of " + std::to_string(k.count));
                    in.done = true;
                    break;
                }
            }
            if (!in.done) perform(c, in);
            in.done = true;
            big_cond.notify_all();
            break;
        }
        bool helped = false;
        for (int r = 0; r < c->nranks && !helped; r++) {
            if (in.arrived[(size_t)r]) continue;
            for (cudaStream_t s : c->ranks[(size_t)r]->streams)
                if (run_through_tagged(s, c->ranks[(size_t)r], g)) {
                    helped = true;
                    break;
                }
        }
        if (!helped) big_cond.wait(g);
    }
    if (++in.n_left == c->nranks) c->inst.erase(n);
}

static ncclResult_t enqueue(emu_nccl_comm *me, rank_call call, cudaStream_t s) {
    guard g(big_lock);
    bool known = false;
    for (const emu_nccl_comm &x : comms) known = known || (&x == me && x.alive);
    if (!known) return ncclInvalidArgument;
    if (stream_device(s) != me->device) return ncclInvalidArgument; /* the stream must be on the rank's device */
    if (std::find(me->streams.begin(), me->streams.end(), s) == me->streams.end()) me->streams.push_back(s);
    const cudaError_t e = enqueue_host_work(s, [me, call](guard &gg) { arrive(me, call, gg); }, kind_name(call.kind), me);
    big_cond.notify_all();
    return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

/* Waits until every rank of c has joined. */
static void wait_joined(clique *c, guard &g) {
    while (c->joined < c->nranks) big_cond.wait(g);
}

} /* namespace emu */

using namespace emu;

extern "C" ncclResult_t ncclGetVersion(int *v) {
    if (!v) return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    static std::mutex m;
    static std::mt19937_64 rng(std::random_device{}());
    std::lock_guard<std::mutex> l(m);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "emu-nccl-%016llx%016llx", (unsigned long long)rng(),
             (unsigned long long)rng());
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    if (!out || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return ncclUnhandledCudaError;
    guard g(big_lock);
    const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
    clique *c = nullptr;
    for (clique &x : cliques)
        if (x.id == key && x.joined < x.nranks) c = &x;
    if (!c) {
        cliques.emplace_back();
        c = &cliques.back();
        c->id = key, c->nranks = nranks;
        c->ranks.assign((size_t)nranks, nullptr);
    }
    if (c->nranks != nranks || c->ranks[(size_t)rank]) return ncclInvalidUsage;
    comms.push_back(emu_nccl_comm{c, rank, device, 0, {}, true});
    c->ranks[(size_t)rank] = &comms.back();
    c->joined++;
    big_cond.notify_all();
    *out = &comms.back();
    if (group_depth) group_pending.push_back(c);
    else wait_joined(c, g);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommInitAll(ncclComm_t *out, int ndev, const int *devlist) {
    if (!out || ndev < 1) return ncclInvalidArgument;
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess) return ncclUnhandledCudaError;
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclGroupStart();
    for (int r = 0; r < ndev; r++) {
        if (cudaSetDevice(devlist ? devlist[r] : r) != cudaSuccess) return ncclInvalidArgument;
        const ncclResult_t e = ncclCommInitRank(&out[r], ndev, id, r);
        if (e != ncclSuccess) return e;
    }
    ncclGroupEnd();
    cudaSetDevice(prev);
    return ncclSuccess;
}

extern "C" ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    guard g(big_lock);
    for (emu_nccl_comm &x : comms)
        if (&x == comm && x.alive) {
            x.alive = false;
            return ncclSuccess;
        }
    return ncclInvalidArgument;
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

extern "C" ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) return ncclInvalidUsage;
    if (--group_depth == 0) {
        guard g(big_lock);
        for (clique *c : group_pending) wait_joined(c, g);
        group_pending.clear();
    }
    return ncclSuccess;
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
