/* pool: a fixed set of pthreads that run one parallel-for at a time.
 *
 * Why: every op splits rows of its output over threads; creating threads per op would cost more than a
 * decode-sized matmul. The calling thread is worker 0, so -t 1 never touches a thread or a lock.
 * Protocol: the caller publishes (fn, ctx, n, grain, the claim size), sets `pending`, then bumps `gen` under
 * the mutex and broadcasts; every thread, the caller too, claims chunks until none is left (pool_claim), then a
 * worker decrements `pending`; the one reaching 0 signals `done`. Claims instead of fixed equal shares: Qwen3-0.6B
 * Q8_0 decode, 2 Zen 4 threads, four alternating runs each: 37.2-41.3 t/s against 33.4-42.4.
 * note: both sides spin briefly (POOL_SPIN pauses, ~tens of µs) before sleeping on the condition variable: a
 * decode step issues hundreds of short ops and a futex wake-up per op cost ~60 µs here, while unbounded spinning
 * would starve the neighbours on a shared machine.
 */
#include <pthread.h>

#include "cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POOL_RELAX() _mm_pause()
#else
#define POOL_RELAX() ((void)0)
#endif

enum { POOL_SPIN = 4000, POOL_CLAIMS = 4 };

struct pool {
    int n_threads;
    pthread_t *threads;    /* (n_threads - 1) */
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t gen;          /* bumped per job; atomic */
    int pending;           /* workers still running the current job; atomic */
    int quit;              /* atomic */
    pool_fn fn;            /* the job: written before gen is bumped, read after it is seen */
    void *ctx;
    int64_t n, grain;
    int64_t chunk;         /* elements a claim takes (whole grains) */
    int64_t next;          /* the next unclaimed chunk; atomic */
};

struct pool_worker {
    struct pool *p;
    int ith;
};

/* Runs claims of the current job until none is left: chunks of whole grains taken in turn from an atomic counter, so
 * a thread slowed by its neighbours (a shared memory bus, a VM's steal) takes fewer and no one waits on it. Every op
 * computes each element of its range independently, so which thread took a chunk never changes a result. */
static void pool_claim(struct pool *p, int ith) {
    for (;;) {
        const int64_t c = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        const int64_t b = c * p->chunk;
        if (b >= p->n) return;
        p->fn(p->ctx, b, b + p->chunk < p->n ? b + p->chunk : p->n, ith);
    }
}

static void *pool_main(void *arg) {
    struct pool_worker *w = arg;
    struct pool *p = w->p;
    uint64_t seen = 0;
    for (;;) {
        for (int s = 0; s < POOL_SPIN && __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen; s++) POOL_RELAX();
        if (__atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen) {
            pthread_mutex_lock(&p->mu);
            while (!__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE) && __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen)
                pthread_cond_wait(&p->wake, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE)) break;
        seen = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE);
        pool_claim(p, w->ith);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    xfree(w);
    return NULL;
}

infer_status pool_create(int n_threads, struct pool **out) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024)
        return infer_fail(INFER_E_ARG, "pool: n_threads %d: expected 1..1024", n_threads);
    struct pool *p = xcalloc(1, sizeof *p);
    if (!p) return INFER_OOM("thread pool");
    p->n_threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (n_threads > 1) {
        p->threads = xcalloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            pool_free(p);
            return INFER_OOM("thread pool");
        }
    }
    for (int i = 1; i < n_threads; i++) {
        struct pool_worker *w = xmalloc(sizeof *w);
        if (!w) {
            pool_free(p);
            return INFER_OOM("thread pool worker");
        }
        w->p = p;
        w->ith = i;
        if (pthread_create(&p->threads[i - 1], NULL, pool_main, w) != 0) {
            xfree(w);
            pool_free(p);
            return infer_fail(INFER_E_INTERNAL, "pool: pthread_create failed for worker %d of %d", i, n_threads);
        }
        p->n_threads = i + 1;
    }
    *out = p;
    return INFER_OK;
}

void pool_free(struct pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->quit, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads - 1; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    xfree(p->threads);
    xfree(p);
}

int pool_threads(const struct pool *p) { return p ? p->n_threads : 1; }

void pool_for(struct pool *p, int64_t n, int64_t grain, pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    /* about POOL_CLAIMS claims a thread: small enough to even out, large enough that claiming costs nothing */
    const int64_t grains = (n + grain - 1) / grain, per = grains / ((int64_t)p->n_threads * POOL_CLAIMS);
    p->chunk = (per > 1 ? per : 1) * grain;
    __atomic_store_n(&p->next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&p->pending, p->n_threads - 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&p->mu); /* bumping gen under the mutex: a worker about to sleep cannot miss it */
    __atomic_add_fetch(&p->gen, 1, __ATOMIC_ACQ_REL);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pool_claim(p, 0);
    for (int s = 0; s < POOL_SPIN && __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0; s++) POOL_RELAX();
    if (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0) {
        pthread_mutex_lock(&p->mu);
        while (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
