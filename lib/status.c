/* status: thread-local error messages, the allocation wrapper with fault injection and the huge-page hint, and
 * logging. */
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define ERROR_CAP 1024

static _Thread_local char last_error[ERROR_CAP];

INFER_API const char *infer_status_str(infer_status s) {
    switch (s) {
    case INFER_OK: return "INFER_OK: success";
    case INFER_E_ARG: return "INFER_E_ARG: invalid argument";
    case INFER_E_IO: return "INFER_E_IO: input/output error";
    case INFER_E_FORMAT: return "INFER_E_FORMAT: malformed file";
    case INFER_E_UNSUPPORTED: return "INFER_E_UNSUPPORTED: not supported";
    case INFER_E_OOM: return "INFER_E_OOM: out of memory";
    case INFER_E_DEVICE: return "INFER_E_DEVICE: device error";
    case INFER_E_CTX_FULL: return "INFER_E_CTX_FULL: context full";
    case INFER_E_CANCELLED: return "INFER_E_CANCELLED: cancelled";
    case INFER_E_INTERNAL: return "INFER_E_INTERNAL: internal error";
    }
    return "unknown status";
}

INFER_API const char *infer_last_error(void) { return last_error; }

void infer_clear_error(void) { last_error[0] = 0; }

infer_status infer_fail(infer_status s, const char *fmt, ...) {
    /* formatted apart first: an argument may be infer_last_error() itself (a caller adding to the last
     * message), and vsnprintf into the buffer it reads would garble it */
    char msg[ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, ERROR_CAP);
    return s;
}

infer_status infer_fail_context(infer_status s, const char *fmt, ...) {
    char prefix[256], old[ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_error, ERROR_CAP);
    size_t n = strlen(prefix);
    /* each clause once: no cause, no ": " after the prefix; a cause that starts with it stays as is */
    if (!old[0]) {
        memcpy(last_error, prefix, n + 1);
        return s;
    }
    if (!strncmp(old, prefix, n) && (old[n] == 0 || (old[n] == ':' && old[n + 1] == ' '))) return s;
    /* note: truncation of an over-long message is acceptable; it stays NUL-terminated */
    if (n > ERROR_CAP - 3) n = ERROR_CAP - 3;
    memcpy(last_error, prefix, n);
    memcpy(last_error + n, ": ", 2);
    size_t m = strlen(old);
    if (m > ERROR_CAP - 1 - n - 2) m = ERROR_CAP - 1 - n - 2;
    memcpy(last_error + n + 2, old, m);
    last_error[n + 2 + m] = 0;
    return s;
}

/* ---- allocation with fault injection ---- */

/* note: a process-wide counter; fault-injection tests are single-threaded. */
static long fault_countdown = -1; /* -1: read the environment on first use; 0: off */

void status_fault_alloc(long n) { fault_countdown = n; }

static int fault_hit(void) {
    if (fault_countdown < 0) {
        const char *e = getenv("INFER_FAULT_ALLOC");
        fault_countdown = e ? atol(e) : 0;
        if (fault_countdown < 0) fault_countdown = 0;
    }
    if (fault_countdown == 0) return 0;
    return --fault_countdown == 0;
}

void *xmalloc(size_t n) { return fault_hit() ? NULL : malloc(n ? n : 1); }

void *xcalloc(size_t count, size_t size) {
    if (fault_hit()) return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *xrealloc(void *p, size_t n) { return fault_hit() ? NULL : realloc(p, n ? n : 1); }

void xhuge_hint(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    const uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + n) & ~(huge - 1);
    if (p && hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)p, (void)n;
#endif
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = xmalloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void xfree(void *p) { free(p); }

/* ---- logging ---- */

static infer_log_fn log_cb;
static void *log_user;

INFER_API void infer_set_log(infer_log_fn cb, void *user) {
    log_cb = cb;
    log_user = user;
}

void infer_log(infer_log_level level, const char *fmt, ...) {
    if (!log_cb) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_cb(level, msg, log_user);
}
