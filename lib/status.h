/* status: how lib/ reports failure.
 *
 * Every fallible function returns infer_status. infer_fail() records a formatted, thread-local
 * message and returns its status, so a failure site is one line:
 *     return infer_fail(INFER_E_FORMAT, "%s: tensor '%s' has %d dims, expected <= 4", path, name, n);
 * TRY() propagates inside a function that declares `infer_status st = INFER_OK;` and ends in a
 * single `fail:` label that cleans up and returns st.
 * All host allocations go through xmalloc/xcalloc/xrealloc so tests can fail the N-th one
 * (INFER_FAULT_ALLOC=N in the environment, or status_fault_alloc(N)).
 */
#ifndef INFER_STATUS_H
#define INFER_STATUS_H

#include <stdarg.h>
#include <stddef.h>

#include "../include/infer.h"

#if defined(__GNUC__)
#define INFER_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define INFER_PRINTF(a, b)
#endif

#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((st = (x)) != INFER_OK) goto fail;                                                               \
    } while (0)

/* Records msg for infer_last_error() and returns s. */
infer_status infer_fail(infer_status s, const char *fmt, ...) INFER_PRINTF(2, 3);
/* Prefixes the current message with "ctx: " (for callers that add where a failure happened); with no
 * current message the result is ctx alone, and a message that already starts with "ctx: " is kept. Callers
 * wrap a callee's message this way rather than formatting infer_last_error() into a new one. */
infer_status infer_fail_context(infer_status s, const char *fmt, ...) INFER_PRINTF(2, 3);
/* Clears the thread's message. */
void infer_clear_error(void);

/* Allocation: NULL on failure (real or injected); callers turn NULL into INFER_E_OOM. */
void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
void xfree(void *p);
/* Asks for 2 MiB pages over the whole 2 MiB stretches of [p, p + n), before they are first written (a hint: where
 * transparent huge pages are off or "never", nothing changes). For the big buffers a decode step streams through
 * (repacked weights, KV cells): with 4 KiB pages each 4 KiB of the stream costs a TLB walk. */
void xhuge_hint(void *p, size_t n);
/* The N-th allocation from now fails (1-based); 0 disables. Overrides INFER_FAULT_ALLOC. */
void status_fault_alloc(long n);
/* Shorthand for the usual out-of-memory failure. */
#define INFER_OOM(what) infer_fail(INFER_E_OOM, "out of memory allocating %s", (what))

/* Logging through the user's callback; a no-op when none is set. */
void infer_log(infer_log_level level, const char *fmt, ...) INFER_PRINTF(2, 3);

/* Records INFER_E_INTERNAL and returns from the enclosing function; never aborts. */
#define INFER_ASSERT(cond)                                                                                   \
    do {                                                                                                     \
        if (!(cond)) return infer_fail(INFER_E_INTERNAL, "%s:%d: assertion failed: %s", __FILE__, __LINE__, #cond); \
    } while (0)

#endif
