/* exec.cc: one kernel launch on the CPU.
 *
 * Blocks run one after another on the calling host thread, in the launch's order (forward, reverse or a
 * seeded permutation). A block's threads are fibers; the scheduler runs in phases: every ready thread
 * runs, in the order, until it waits (a barrier, a collective) or returns; then
 *   - each warp's collectives whose lanes have all arrived are computed and their lanes made ready;
 *   - when no collective can complete and every live thread waits at __syncthreads, the barrier opens;
 *   - anything else is a bug in the kernel, reported with the block, warp and lanes: a collective whose
 *     mask omits the caller, names a lane beyond the block, a lane that exited or one waiting elsewhere;
 *     lanes of one mask at different collectives; __syncthreads reached by only part of the block (a
 *     thread that returned early counts as absent); mma.sync without all 32 lanes.
 * A reversed or shuffled order inside each phase changes which thread writes shared memory first, so a
 * missing barrier gives a different result in another order (runtime.cc compares them).
 */
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>

#include "internal.h"

namespace emu {

thread_local fiber_view *cur_thread INFER_EMU_TLS;
thread_local dim3 cur_block INFER_EMU_TLS, cur_block_dim INFER_EMU_TLS, cur_grid_dim INFER_EMU_TLS;
thread_local unsigned char *cur_dyn_smem INFER_EMU_TLS;

static thread_local fiber_pool *run_pool;
static thread_local fiber *run_fiber;
static thread_local const kernel_call *run_call;

struct block_run {
    fiber_pool *p;
    int n;                     /* threads */
    std::string why;           /* the report, when the block failed */
    dim3 bidx;
    std::vector<int> ready;    /* fibers to run in the next phase, ascending */
    std::vector<int> phase;    /* this phase's fibers in the order they run */
    size_t pos;                /* the next of them to run */
    std::vector<int> waiting;  /* per warp: lanes waiting in a collective */
    int n_done, n_bar;
};
static thread_local block_run *run_block_state;

const char *order_name(int o) { return o == ORDER_FORWARD ? "forward" : o == ORDER_REVERSE ? "reverse" : "random"; }

static const char *op_name(int op) {
    static const char *const names[] = {"__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                        "__shfl_xor_sync", "__ballot_sync", "__any_sync", "__all_sync",
                                        "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
                                        "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
                                        "__reduce_or_sync", "__reduce_xor_sync", "mma.sync m16n8k16"};
    return op >= 0 && op < (int)(sizeof names / sizeof names[0]) ? names[op] : "?";
}

std::string describe(const kernel_call &k) {
    char b[512];
    snprintf(b, sizeof b, "launch_kernel(%s) at %s:%d, grid (%u,%u,%u) block (%u,%u,%u) shared %zu", k.where->text,
             k.where->file, k.where->line, k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z, k.smem);
    return b;
}

/* ---- from inside a fiber ---- */

/* The next fiber of the phase, made current; NULL when the phase is over (back to the scheduler). */
static fiber *phase_next() {
    block_run &b = *run_block_state;
    if (b.pos == b.phase.size()) return nullptr;
    fiber *n = &b.p->fibers[b.phase[b.pos++]];
    run_fiber = n;
    cur_thread = &n->view;
    return n;
}

static void block_entry() {
    fiber *f = run_fiber;
    run_call->args->invoke();
    f->state = F_DONE;
    run_block_state->n_done++;
    fiber_exit(run_pool, f, phase_next());
}

uint64_t warp_op(int kind, unsigned mask, uint64_t value, int arg, int width) {
    fiber *f = run_fiber;
    f->op = kind, f->mask = mask, f->in = value, f->arg = arg, f->width = width;
    f->state = F_WARP;
    run_block_state->waiting[(size_t)(f->linear / 32)]++;
    fiber_yield(run_pool, f, phase_next());
    return f->out;
}

int block_barrier(int kind, int pred) {
    fiber *f = run_fiber;
    f->op = kind, f->pred = pred != 0;
    f->state = F_BARRIER;
    run_block_state->n_bar++;
    fiber_yield(run_pool, f, phase_next());
    return (int)f->out;
}

void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    fiber *f = run_fiber;
    memcpy(f->mma_a, a, sizeof f->mma_a);
    f->mma_b[0] = b0, f->mma_b[1] = b1;
    memcpy(f->mma_c, c, sizeof f->mma_c);
    warp_op(WOP_MMA_16816, 0xffffffffu, 0, 0, 32);
    memcpy(c, f->mma_c, sizeof f->mma_c);
}

void device_trap(const char *why) {
    fprintf(stderr, "emu: device trap in %s: %s\n", run_call ? describe(*run_call).c_str() : "?", why);
    abort();
}

/* ---- the scheduler ---- */


static std::string where(const block_run &b, int warp, const char *what) {
    char s[600];
    snprintf(s, sizeof s, "block (%u,%u,%u) warp %d: %s", b.bidx.x, b.bidx.y, b.bidx.z, warp, what);
    return s;
}

/* The lanes of a mask as ranges: "0-15,20". */
static std::string lanes_str(unsigned m) {
    std::string s;
    for (int l = 0; l < 32; l++) {
        if (!(m >> l & 1)) continue;
        int e = l;
        while (e + 1 < 32 && (m >> (e + 1) & 1)) e++;
        s += (s.empty() ? "" : ",") + std::to_string(l) + (e > l ? "-" + std::to_string(e) : "");
        l = e;
    }
    return s.empty() ? "none" : s;
}

/* The source lane lane reads in a shuffle, or -1: its own value (out of its segment). */
static int shfl_source(const fiber &f, int lane) {
    const int w = f.width, seg = lane & ~(w - 1);
    switch (f.op) {
    case WOP_SHFL_IDX: return seg | (f.arg & (w - 1));
    case WOP_SHFL_UP: return (lane & (w - 1)) >= f.arg ? lane - f.arg : lane;
    case WOP_SHFL_DOWN: return (lane & (w - 1)) + f.arg < w ? lane + f.arg : lane;
    default: {
        const int s = lane ^ f.arg;
        return s >= seg + w ? lane : s; /* xor: a later segment gives the lane its own value */
    }
    }
}

/* The mma.sync m16n8k16 product of the warp's fragments, as the PTX ISA lays them out: lane 4g + t
 * holds A rows g, g+8 at columns 2t, 2t+1 (a0, a1 / a2, a3) and 2t+8, 2t+9 (a4..a7); B rows 2t, 2t+1
 * (b0) and 2t+8, 2t+9 (b1) of column g; C/D rows g (c0, c1) and g+8 (c2, c3) at columns 2t, 2t+1.
 * Products of halves are exact in float; the 16 of each element are summed in float in k order, then added
 * to C (a tensor core adds them in wider arithmetic, in an order of its own: results agree to rounding). */
static void mma_resolve(fiber *lanes) {
    static const std::vector<float> half_to_float = [] { /* every binary16 value as float: a table lookup */
        std::vector<float> t(65536);
        for (uint32_t h = 0; h < 65536; h++) t[h] = emu_f16_bits_to_f32((uint16_t)h);
        return t;
    }();
    const float *h2f = half_to_float.data();
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        const fiber &f = lanes[lane];
        for (int i = 0; i < 8; i++) {
            const uint32_t word = f.mma_a[i / 2];
            const uint16_t h = (uint16_t)(i & 1 ? word >> 16 : word & 0xFFFF);
            const int row = g + ((i / 2) % 2 ? 8 : 0), col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = h2f[h];
        }
        for (int i = 0; i < 4; i++) {
            const uint32_t word = f.mma_b[i / 2];
            const uint16_t h = (uint16_t)(i & 1 ? word >> 16 : word & 0xFFFF);
            B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = h2f[h];
        }
        for (int i = 0; i < 4; i++) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = f.mma_c[i];
    }
    for (int r = 0; r < 16; r++) { /* per element: the 16 products summed in k order, then added to C */
        float S[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k = 0; k < 16; k++) {
            const float a = A[r][k];
            for (int c = 0; c < 8; c++) S[c] += a * B[k][c];
        }
        for (int c = 0; c < 8; c++) C[r][c] += S[c];
    }
    for (int lane = 0; lane < 32; lane++) {
        const int g = lane / 4, t = lane % 4;
        for (int i = 0; i < 4; i++) lanes[lane].mma_c[i] = C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)];
    }
}

/* Computes the collective of the lanes in mask m of the warp starting at fiber w0 (all arrived). */
static bool resolve_group(block_run &b, int warp, fiber *w0, unsigned m) {
    const int op = w0[__builtin_ctz(m)].op;
    if (op == WOP_MMA_16816) {
        if (m != 0xffffffffu) {
            b.why = where(b, warp, "mma.sync executed by only some lanes of the warp (needs all 32)");
            return false;
        }
        mma_resolve(w0);
        return true;
    }
    if (op >= WOP_SHFL_IDX && op <= WOP_SHFL_XOR) {
        for (int l = 0; l < 32; l++) {
            if (!(m >> l & 1)) continue;
            fiber &f = w0[l];
            if (f.width < 1 || f.width > 32 || (f.width & (f.width - 1))) {
                b.why = where(b, warp, (std::string(op_name(op)) + ": width " + std::to_string(f.width) +
                                        " is not a power of two in 1..32").c_str());
                return false;
            }
            const int src = shfl_source(f, l);
            if (!(m >> src & 1)) {
                b.why = where(b, warp, (std::string(op_name(op)) + ": lane " + std::to_string(l) + " reads lane " +
                                        std::to_string(src) + ", which is not in the mask " + lanes_str(m)).c_str());
                return false;
            }
            f.out = w0[src].in;
        }
        return true;
    }
    uint64_t acc = 0;
    bool first = true;
    for (int l = 0; l < 32; l++) {
        if (!(m >> l & 1)) continue;
        const uint64_t in = w0[l].in;
        const uint32_t v = (uint32_t)in;
        switch (op) {
        case WOP_BALLOT: acc |= (uint64_t)(in != 0) << l; break;
        case WOP_ANY: acc |= in != 0; break;
        case WOP_ALL: acc = first ? in != 0 : (acc && in != 0); break;
        case WOP_RED_ADD: acc = (uint32_t)(acc + v); break;
        case WOP_RED_MIN_U: acc = first || v < acc ? v : acc; break;
        case WOP_RED_MAX_U: acc = first || v > acc ? v : acc; break;
        case WOP_RED_MIN_I: acc = first || (int32_t)v < (int32_t)acc ? v : acc; break;
        case WOP_RED_MAX_I: acc = first || (int32_t)v > (int32_t)acc ? v : acc; break;
        case WOP_RED_AND: acc = first ? v : (acc & v); break;
        case WOP_RED_OR: acc |= v; break;
        case WOP_RED_XOR: acc ^= v; break;
        default: break; /* __syncwarp: nothing to compute */
        }
        first = false;
    }
    for (int l = 0; l < 32; l++)
        if (m >> l & 1) w0[l].out = acc;
    return true;
}

/* Makes the lanes in m of the warp at w0 ready again (they are queued in ascending order). */
static void release(block_run &b, int w0, unsigned m) {
    for (int k = 0; k < 32; k++)
        if (m >> k & 1) {
            b.p->fibers[w0 + k].state = F_READY;
            b.ready.push_back(w0 + k);
        }
    b.waiting[(size_t)(w0 / 32)] -= __builtin_popcount(m);
}

/* One pass over the warps: completes every collective whose lanes have all arrived. Returns 1 when
 * some completed, 0 when none, -1 on a bug (b.why). */
static int resolve_warps(block_run &b) {
    int progress = 0;
    for (int w0 = 0; w0 < b.n; w0 += 32) {
        const int warp = w0 / 32;
        if (!b.waiting[(size_t)warp]) continue;
        fiber *lanes = &b.p->fibers[w0];
        const int nl = b.n - w0 < 32 ? b.n - w0 : 32;
        const unsigned exists = nl == 32 ? 0xffffffffu : (1u << nl) - 1;
        if (b.waiting[(size_t)warp] == nl) { /* the common case: the whole warp in one collective */
            bool same = lanes[0].mask == exists;
            for (int l = 1; l < nl && same; l++) same = lanes[l].mask == exists && lanes[l].op == lanes[0].op;
            if (same) {
                if (!resolve_group(b, warp, lanes, exists)) return -1;
                release(b, w0, exists);
                progress = 1;
                continue;
            }
        }
        for (int l = 0; l < nl; l++) {
            const fiber &f = lanes[l];
            if (f.state != F_WARP) continue;
            const unsigned m = f.mask;
            if (!(m >> l & 1)) {
                b.why = where(b, warp, (std::string(op_name(f.op)) + ": lane " + std::to_string(l) + "'s mask " +
                                        lanes_str(m) + " does not name the lane itself").c_str());
                return -1;
            }
            if (m & ~exists) {
                b.why = where(b, warp, (std::string(op_name(f.op)) + ": mask names lanes " + lanes_str(m & ~exists) +
                                        " beyond the block's last thread").c_str());
                return -1;
            }
            bool all = true;
            for (int k = 0; k < nl; k++) {
                if (!(m >> k & 1)) continue;
                const fiber &o = lanes[k];
                if (o.state == F_DONE) {
                    b.why = where(b, warp, (std::string(op_name(f.op)) + ": mask " + lanes_str(m) + " names lane " +
                                            std::to_string(k) + ", which has exited").c_str());
                    return -1;
                }
                if (o.state != F_WARP || o.mask != m || o.op != f.op) all = false;
            }
            if (!all) continue;
            if (!resolve_group(b, warp, lanes, m)) return -1;
            release(b, w0, m);
            progress = 1;
        }
    }
    return progress;
}

/* Nothing can move: say why. */
static std::string deadlock(block_run &b) {
    for (int w0 = 0; w0 < b.n; w0 += 32) {
        const fiber *lanes = &b.p->fibers[w0];
        const int nl = b.n - w0 < 32 ? b.n - w0 : 32;
        for (int l = 0; l < nl; l++) {
            if (lanes[l].state != F_WARP) continue;
            const unsigned m = lanes[l].mask;
            std::string at_bar, other;
            for (int k = 0; k < nl; k++) {
                if (!(m >> k & 1)) continue;
                if (lanes[k].state == F_BARRIER) at_bar += (at_bar.empty() ? "" : ",") + std::to_string(k);
                else if (lanes[k].op != lanes[l].op || lanes[k].mask != m)
                    other += (other.empty() ? "" : ",") + std::to_string(k) + " (" + op_name(lanes[k].op) + " mask " +
                             lanes_str(lanes[k].mask) + ")";
            }
            std::string s = std::string("divergent collective: lane ") + std::to_string(l) + " waits in " +
                            op_name(lanes[l].op) + " with mask " + lanes_str(m);
            if (!at_bar.empty()) s += "; lanes " + at_bar + " wait at __syncthreads";
            if (!other.empty()) s += "; lanes " + other + " wait in another collective";
            return where(b, w0 / 32, s.c_str());
        }
    }
    return where(b, 0, "deadlock");
}

/* The random orders' generator (xorshift64: cheap, and the sequence is fixed by the seed). */
struct order_rng {
    uint64_t s;
    explicit order_rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull | 1) {}
    uint64_t operator()() {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        return s;
    }
};

static bool run_block(block_run &b, int order, order_rng &rng) {
    fiber *F = b.p->fibers;
    const dim3 bd = cur_block_dim;
    b.ready.clear();
    b.waiting.assign((size_t)(b.n + 31) / 32, 0);
    b.n_done = b.n_bar = 0;
    for (int i = 0; i < b.n; i++) {
        fiber &f = F[i];
        f.linear = i;
        f.view.tid = dim3((unsigned)i % bd.x, (unsigned)i / bd.x % bd.y, (unsigned)i / (bd.x * bd.y));
        f.state = F_READY;
        fiber_start(b.p, &f, block_entry);
        b.ready.push_back(i);
    }
    b.p->dirty = false;
    for (;;) {
        b.phase.swap(b.ready);
        b.ready.clear();
        if (order == ORDER_REVERSE) std::reverse(b.phase.begin(), b.phase.end());
        else if (order == ORDER_RANDOM)
            for (size_t i = b.phase.size(); i > 1; i--) std::swap(b.phase[i - 1], b.phase[(size_t)(rng() % i)]);
        b.pos = 0;
        if (fiber *first = phase_next()) fiber_resume(b.p, first); /* each fiber passes on to the next */
        const int r = resolve_warps(b);
        if (r < 0) break;
        if (r > 0) continue;
        if (b.n_done == b.n) return true;
        int n_warp = 0;
        for (int w : b.waiting) n_warp += w;
        if (n_warp) {
            b.why = deadlock(b);
            break;
        }
        if (b.n_done) {
            b.why = where(b, 0, ("__syncthreads reached by " + std::to_string(b.n_bar) + " of " + std::to_string(b.n) +
                                 " threads: " + std::to_string(b.n_done) + " returned before it").c_str());
            break;
        }
        const int kind = F[0].op;
        bool mixed = false;
        for (int i = 1; i < b.n; i++) mixed = mixed || F[i].op != kind;
        if (mixed) {
            b.why = where(b, 0, "threads wait at different kinds of block barrier (__syncthreads / _count / _and / _or)");
            break;
        }
        uint64_t acc = kind == BAR_AND ? 1 : 0; /* the barrier opens: its reduction for the _count/_and/_or forms */
        for (int i = 0; i < b.n; i++) {
            if (kind == BAR_COUNT) acc += (uint64_t)F[i].pred;
            else if (kind == BAR_AND) acc = acc && F[i].pred;
            else if (kind == BAR_OR) acc = acc || F[i].pred;
        }
        for (int i = 0; i < b.n; i++) {
            F[i].out = acc, F[i].state = F_READY;
            b.ready.push_back(i);
        }
        b.n_bar = 0;
    }
    b.p->dirty = true; /* fibers were left mid-kernel */
    return false;
}

bool run_kernel(const kernel_call &k, int order, uint64_t seed, std::string *why) {
    const int n = (int)(k.block.x * k.block.y * k.block.z);
    block_run b;
    b.p = pool_get(n);
    b.n = n;
    order_rng rng(seed);
    std::vector<unsigned char> smem(k.smem ? k.smem : 1);
    const kernel_call *saved_call = run_call;
    fiber_pool *saved_pool = run_pool;
    block_run *saved_block = run_block_state;
    run_call = &k;
    run_pool = b.p;
    run_block_state = &b;
    cur_grid_dim = k.grid;
    cur_block_dim = k.block;
    cur_dyn_smem = k.smem ? smem.data() : nullptr;
    const uint64_t nb = (uint64_t)k.grid.x * k.grid.y * k.grid.z;
    std::vector<uint64_t> blocks;
    if (order == ORDER_RANDOM) { /* a permutation of the blocks too (inter-block races) */
        blocks.resize(nb);
        for (uint64_t i = 0; i < nb; i++) blocks[i] = i;
        for (uint64_t i = nb - 1; i > 0 && nb > 1; i--) std::swap(blocks[i], blocks[rng() % (i + 1)]);
    }
    bool ok = true;
    for (uint64_t i = 0; i < nb && ok; i++) {
        const uint64_t bi = order == ORDER_FORWARD ? i : order == ORDER_REVERSE ? nb - 1 - i : blocks[i];
        b.bidx = dim3((unsigned)(bi % k.grid.x), (unsigned)(bi / k.grid.x % k.grid.y),
                      (unsigned)(bi / ((uint64_t)k.grid.x * k.grid.y)));
        cur_block = b.bidx;
        if (k.smem) memset(smem.data(), 0xFF, k.smem); /* garbage, as a GPU leaves it: NaN floats, -1 ints */
        ok = run_block(b, order, rng);
    }
    run_call = saved_call;
    run_pool = saved_pool;
    run_block_state = saved_block;
    if (!ok) *why = b.why;
    return ok;
}

} /* namespace emu */

float emu_cvt_f32_f16(uint16_t h) { return emu_f16_bits_to_f32(h); }
