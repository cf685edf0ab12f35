/* fiber.cc: a CUDA thread as a fiber. Each host thread that runs kernels owns a pool of up to 1024 fibers
 * (a block's threads), each with its own stack below a guard page. Switching saves the callee-saved
 * registers on the old stack and loads the new stack pointer
 * (x86-64 System V; other machines use ucontext). Under AddressSanitizer every switch is announced with
 * __sanitizer_start/finish_switch_fiber so ASan tracks which stack is live.
 */
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#if EMU_ASAN
enum { STACK_BYTES = 256 << 10 }; /* ASan's redzones make frames several times larger */
#else
enum { STACK_BYTES = 64 << 10 };
#endif
enum { MAX_FIBERS = 1024 };

#if defined(__x86_64__)
/* emu_switch(save, to): pushes rbp rbx r12-r15, stores rsp in *save, loads rsp = to and pops the same from
 * there. The floating-point control words are not switched: every fiber runs with the thread's. A new fiber's stack is laid out as if it had been
 * switched out just before emu_trampoline, which calls the entry function found in r12. */
extern "C" void emu_switch(void **save, void *to);
extern "C" void emu_trampoline();
asm(R"(
    .text
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch

    .globl emu_trampoline
    .hidden emu_trampoline
    .type emu_trampoline, @function
emu_trampoline:
    andq $-16, %rsp
    callq *%r12
    ud2
    .size emu_trampoline, .-emu_trampoline
)");
#else
#include <ucontext.h>
#endif

namespace emu {

static thread_local fiber_pool tls_pool;
static thread_local void (*tls_entry)();

#if !defined(__x86_64__)
static thread_local ucontext_t tls_sched_ctx;
static thread_local ucontext_t tls_fiber_ctx[MAX_FIBERS];
#endif

static size_t page_size() {
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

fiber_pool *pool_get(int n_threads) {
    fiber_pool *p = &tls_pool;
    if (!p->fibers) {
        p->fibers = (fiber *)calloc(MAX_FIBERS, sizeof(fiber));
        if (!p->fibers) {
            fprintf(stderr, "emu: out of host memory for fibers\n");
            abort();
        }
    }
    while (p->n < n_threads) { /* stacks are mapped once per host thread and kept */
        const size_t guard = page_size(), span = guard + STACK_BYTES;
        char *m = (char *)mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED || mprotect(m, guard, PROT_NONE) != 0) {
            fprintf(stderr, "emu: cannot map a fiber stack\n");
            abort();
        }
        fiber *f = &p->fibers[p->n++];
        f->stack_lo = m + guard;
        f->stack_size = STACK_BYTES;
    }
    return p;
}

static inline void asan_enter(void **save, const void *lo, size_t size) {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(save, lo, size);
#else
    (void)save, (void)lo, (void)size;
#endif
}
static inline void asan_entered(void *save, const void **old_lo, size_t *old_size) {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(save, old_lo, old_size);
#else
    (void)save, (void)old_lo, (void)old_size;
#endif
}

/* After a switch into a fiber: ASan's side of it; the scheduler's stack is learnt from a switch it made. */
static inline void entered_fiber(fiber_pool *p, void *fake) {
    const void *lo = nullptr;
    size_t size = 0;
    asan_entered(fake, &lo, &size);
    if (p->from_sched) p->sched_stack_lo = lo, p->sched_stack_size = size;
}

/* First code of every fiber: finish ASan's switch, then the launch's entry. */
static void fiber_main() {
    fiber_pool *p = &tls_pool;
    entered_fiber(p, nullptr);
    tls_entry();
    fprintf(stderr, "emu: a fiber's entry returned\n");
    abort();
}

void fiber_start(fiber_pool *p, fiber *f, void (*entry)()) {
    tls_entry = entry;
#if EMU_ASAN
    if (p->dirty) __asan_unpoison_memory_region(f->stack_lo, f->stack_size);
#endif
    f->asan_fake = nullptr;
#if defined(__x86_64__)
    /* stacks are 64 KiB + a page apart: start each at its own cache-line offset (0..16 KiB down) so that
     * the fibers' hot frames do not all fall into the same cache sets */
    const size_t color = (size_t)(((f - p->fibers) * 67) % 256) * 64;
    uint64_t *top = (uint64_t *)(f->stack_lo + f->stack_size - color);
    top -= 2;           /* 16 bytes of room above the return address */
    *--top = (uint64_t)(void *)emu_trampoline;
    *--top = 0;                             /* rbp */
    *--top = 0;                             /* rbx */
    *--top = (uint64_t)(void *)fiber_main; /* r12: what the trampoline calls */
    *--top = 0;                             /* r13 */
    *--top = 0;                             /* r14 */
    *--top = 0;                             /* r15 */
    f->sp = top;
#else
    ucontext_t *c = &tls_fiber_ctx[f - p->fibers];
    getcontext(c);
    c->uc_stack.ss_sp = f->stack_lo;
    c->uc_stack.ss_size = f->stack_size;
    c->uc_link = nullptr;
    makecontext(c, fiber_main, 0);
    f->sp = c;
#endif
}

void fiber_resume(fiber_pool *p, fiber *f) {
    asan_enter(&p->sched_fake, f->stack_lo, f->stack_size);
    p->from_sched = true;
#if defined(__x86_64__)
    emu_switch(&p->sched_sp, f->sp);
#else
    swapcontext(&tls_sched_ctx, (ucontext_t *)f->sp);
#endif
    asan_entered(p->sched_fake, nullptr, nullptr);
}

/* From fiber f to fiber `to`, or back to the scheduler when to is NULL; keep = 0: f never runs again. */
static void switch_from(fiber_pool *p, fiber *f, fiber *to, bool keep) {
    void **fake = keep ? &f->asan_fake : nullptr; /* nullptr: f's fake stack goes */
    if (to) asan_enter(fake, to->stack_lo, to->stack_size);
    else asan_enter(fake, p->sched_stack_lo, p->sched_stack_size);
    p->from_sched = false;
#if defined(__x86_64__)
    emu_switch(&f->sp, to ? to->sp : p->sched_sp);
#else
    swapcontext(&tls_fiber_ctx[f - p->fibers], to ? (ucontext_t *)to->sp : &tls_sched_ctx);
#endif
    if (keep) entered_fiber(p, f->asan_fake);
}

void fiber_yield(fiber_pool *p, fiber *f, fiber *to) { switch_from(p, f, to, true); }

void fiber_exit(fiber_pool *p, fiber *f, fiber *to) {
    switch_from(p, f, to, false);
    __builtin_unreachable();
}

} /* namespace emu */
