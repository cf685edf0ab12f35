/* nccl_shm.cc: the shared-memory segment of an NCCL clique (the interface and layout in nccl_shm.h).
 *
 * The segment lives in /dev/shm (shm_open); where a machine has none usable (a container without it, a read-only
 * one), in a file of the same name under $TMPDIR (else /tmp): every process of the machine decides alike. The
 * creator allocates the pages (posix_fallocate), so a full /dev/shm is an error at the join, not a SIGBUS later.
 *
 * Waits sleep on a futex in the segment (process-shared, so a partner's wake reaches them), waking every
 * WAKE_MS to look for partners that have exited: kill(pid, 0) fails, or /proc shows a zombie (a child not
 * yet reaped by the process waiting for it). The barrier is a counter of arrived ranks and a phase number:
 * the rank that completes the count resets it and advances the phase, which releases the others.
 */
#include "nccl_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace emu {

static constexpr uint32_t READY = 0x4e43434cu; /* "NCCL": the creator has laid the segment out */
static constexpr int WAKE_MS = 20;

struct shm_head {
    std::atomic<uint32_t> ready;
    int32_t nranks;
    std::atomic<uint32_t> joined;  /* ranks that joined (a futex word) */
    std::atomic<uint32_t> failed;  /* a process gave up: the clique is dead */
    std::atomic<uint32_t> arrived; /* barrier: ranks arrived in the current phase */
    std::atomic<uint32_t> phase;   /* barrier: phases completed (a futex word) */
};
struct shm_rank {
    std::atomic<int32_t> pid; /* 0 until the rank joins */
    shm_call call;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free,
              "atomics shared between processes must be lock-free");

struct shm_seg {
    std::string name;
    bool shm; /* in /dev/shm, else a file (shm_usable) */
    char *base;
    size_t size;
    double timeout;
    shm_head *head() const { return (shm_head *)base; }
};

/* Layout: the head, the ranks, then the slots, each at a 64-byte boundary. */
static size_t ranks_offset() { return (sizeof(shm_head) + 63) & ~(size_t)63; }
static size_t slots_offset(int nranks) {
    return (ranks_offset() + (size_t)nranks * sizeof(shm_rank) + 63) & ~(size_t)63;
}
static size_t seg_size(int nranks) { return slots_offset(nranks) + (size_t)nranks * SLOT_BYTES; }

static shm_rank *rank_of(shm_seg *s, int r) { return (shm_rank *)(s->base + ranks_offset()) + r; }
shm_call *shm_call_of(shm_seg *s, int rank) { return &rank_of(s, rank)->call; }
char *shm_slot(shm_seg *s, int rank) {
    return s->base + slots_offset(s->head()->nranks) + (size_t)rank * SLOT_BYTES;
}

static double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps while *word == seen, at most WAKE_MS. */
static void futex_wait(std::atomic<uint32_t> &word, uint32_t seen) {
#ifdef __linux__
    struct timespec ts = {0, WAKE_MS * 1000000L};
    syscall(SYS_futex, (uint32_t *)&word, FUTEX_WAIT, seen, &ts, nullptr, 0);
#else
    (void)word, (void)seen;
    struct timespec ts = {0, 200000L};
    nanosleep(&ts, nullptr);
#endif
}

static void futex_wake(std::atomic<uint32_t> &word) {
#ifdef __linux__
    syscall(SYS_futex, (uint32_t *)&word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
#else
    (void)word;
#endif
}

/* The process has exited: gone, or a zombie its parent has not reaped yet. */
static bool exited(pid_t pid) {
    if (kill(pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Waits until done() holds; word changes whenever it may. */
template <typename F>
static ncclResult_t wait_for(shm_seg *s, std::atomic<uint32_t> &word, F done, std::string *why) {
    shm_head *h = s->head();
    const double t0 = now_s();
    const pid_t self = getpid();
    for (;;) {
        const uint32_t seen = word.load(std::memory_order_acquire);
        if (done()) return ncclSuccess;
        if (h->failed.load(std::memory_order_acquire)) {
            *why = "another process of the clique gave up";
            return ncclRemoteError;
        }
        for (int r = 0; r < h->nranks; r++) {
            const pid_t pid = rank_of(s, r)->pid.load(std::memory_order_acquire);
            if (!pid || pid == self || !exited(pid)) continue;
            if (done()) return ncclSuccess; /* it finished its part before it exited */
            *why = "rank " + std::to_string(r) + " (process " + std::to_string(pid) + ") has exited";
            return ncclRemoteError;
        }
        if (s->timeout > 0 && now_s() - t0 > s->timeout) {
            char m[160];
            snprintf(m, sizeof m, "waited %g s for the other processes' ranks (INFER_EMU_NCCL_TIMEOUT)", s->timeout);
            *why = m;
            return ncclRemoteError;
        }
        futex_wait(word, seen);
    }
}

/* Whether /dev/shm takes a segment here, probed with a name of this process's own at each attach (every process of
 * the machine finds the same). INFER_EMU_NCCL_SHM=file takes the file instead (tests/test-cuda-tp.c runs both). */
static bool shm_usable() {
    const char *e = getenv("INFER_EMU_NCCL_SHM");
    if (e && !strcmp(e, "file")) return false;
    char probe[64];
    snprintf(probe, sizeof probe, "/emu-nccl-probe-%d", (int)getpid());
    const int fd = shm_open(probe, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return errno == EEXIST; /* a crashed process's probe of the same pid: /dev/shm works */
    close(fd);
    shm_unlink(probe);
    return true;
}

/* The file standing in for /dev/shm's entry `name` (which begins with '/'). */
static std::string file_path(const char *name) {
    const char *dir = getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + name;
}

static int seg_open(bool shm, const char *name, int flags, mode_t mode) {
    return shm ? shm_open(name, flags, mode) : open(file_path(name).c_str(), flags | O_CLOEXEC, mode);
}

static void seg_unlink(bool shm, const char *name) {
    if (shm)
        shm_unlink(name);
    else
        unlink(file_path(name).c_str());
}

ncclResult_t shm_attach(const char *name, int nranks, double timeout_s, shm_seg **out) {
    const size_t size = seg_size(nranks);
    const bool shm = shm_usable();
    for (int attempt = 0; attempt < 100; attempt++) {
        bool creator = true;
        int fd = seg_open(shm, name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0) {
            if (errno != EEXIST) return ncclSystemError;
            creator = false;
            fd = seg_open(shm, name, O_RDWR, 0);
            if (fd < 0 && errno == ENOENT) continue; /* removed meanwhile (that clique is complete): create anew */
            if (fd < 0) return ncclSystemError;
        } else if (posix_fallocate(fd, 0, (off_t)size) != 0) { /* sized and backed: no SIGBUS when it is full */
            close(fd);
            seg_unlink(shm, name);
            return ncclSystemError;
        }
        /* an opener may come between the creator's open and its posix_fallocate */
        struct stat st = {};
        const double t0 = now_s();
        for (;;) {
            if (fstat(fd, &st) != 0) {
                close(fd);
                return ncclSystemError;
            }
            if (st.st_size || (timeout_s > 0 && now_s() - t0 >= timeout_s)) break;
            sched_yield();
        }
        if ((size_t)st.st_size != size) {
            close(fd);
            return st.st_size ? ncclInvalidUsage : ncclRemoteError; /* another nranks; a creator that died */
        }
        void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            if (creator) seg_unlink(shm, name);
            return ncclSystemError;
        }
        shm_head *h = (shm_head *)p;
        if (creator) {
            new (h) shm_head();
            h->nranks = nranks;
            for (int r = 0; r < nranks; r++)
                new ((char *)p + ranks_offset() + (size_t)r * sizeof(shm_rank)) shm_rank();
            h->ready.store(READY, std::memory_order_release);
        } else {
            while (h->ready.load(std::memory_order_acquire) != READY && (timeout_s <= 0 || now_s() - t0 < timeout_s))
                sched_yield();
            if (h->ready.load(std::memory_order_acquire) != READY) {
                munmap(p, size);
                return ncclRemoteError;
            }
        }
        *out = new shm_seg{name, shm, (char *)p, size, timeout_s};
        return ncclSuccess;
    }
    return ncclSystemError;
}

void shm_detach(shm_seg *s) {
    munmap(s->base, s->size);
    delete s;
}

ncclResult_t shm_join(shm_seg *s, int rank) {
    int32_t none = 0;
    if (!rank_of(s, rank)->pid.compare_exchange_strong(none, (int32_t)getpid())) return ncclInvalidUsage;
    shm_head *h = s->head();
    if ((int)h->joined.fetch_add(1, std::memory_order_acq_rel) + 1 == h->nranks) seg_unlink(s->shm, s->name.c_str());
    futex_wake(h->joined);
    return ncclSuccess;
}

ncclResult_t shm_wait_joined(shm_seg *s, std::string *why) {
    shm_head *h = s->head();
    return wait_for(s, h->joined, [h] { return (int)h->joined.load(std::memory_order_acquire) == h->nranks; }, why);
}

ncclResult_t shm_barrier(shm_seg *s, int arrivals, std::string *why) {
    shm_head *h = s->head();
    const uint32_t phase = h->phase.load(std::memory_order_acquire); /* cannot advance before we arrive */
    const uint32_t before = h->arrived.fetch_add((uint32_t)arrivals, std::memory_order_acq_rel);
    if ((int)(before + (uint32_t)arrivals) == h->nranks) {
        h->arrived.store(0, std::memory_order_relaxed); /* ordered before the phase: nobody re-arrives earlier */
        h->phase.fetch_add(1, std::memory_order_release);
        futex_wake(h->phase);
        return ncclSuccess;
    }
    return wait_for(s, h->phase, [h, phase] { return h->phase.load(std::memory_order_acquire) != phase; }, why);
}

void shm_give_up(shm_seg *s) {
    shm_head *h = s->head();
    h->failed.store(1, std::memory_order_release);
    futex_wake(h->joined);
    futex_wake(h->phase);
    seg_unlink(s->shm, s->name.c_str()); /* ENOENT when every rank had joined: nothing left to remove */
}

} /* namespace emu */
