/* t.h: the whole test harness. One line per failed check; a summary line at exit.
 *   T_CHECK(cond, fmt, ...)  records a pass or a failure with a message
 *   T_NEAR(a, b, tol)        |a - b| <= tol
 *   T_SKIP(why)              prints "SKIP (why)" and counts a skip
 *   T_SKIP_PEER(why)         a skip because an oracle (the llama.cpp peer, its vocabularies) is missing;
 *                            under INFER_REQUIRE_PEER=1 (set by CI) a failure, so comparisons cannot vanish
 *   return t_done();         prints "name: N passed, N failed, N skipped", exits 0 / 1 / 77 (all skipped)
 *   t_quick()                1 under INFER_TEST_QUICK=1 (tests/run.sh sets it for SAN=1): the heaviest tests then
 *                            run a subset of their matrix that still reaches each code path (every arch, every
 *                            weight type, every placement kind) once; the plain run checks the whole matrix
 */
#ifndef T_H
#define T_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_pass, t_fail, t_skip;

#define T_CHECK(cond, ...)                                                                                   \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            t_pass++;                                                                                        \
        } else {                                                                                             \
            t_fail++;                                                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
            fflush(stdout);                                                                                  \
        }                                                                                                    \
    } while (0)

#define T_NEAR(a, b, tol)                                                                                    \
    do {                                                                                                     \
        double t_a_ = (double)(a), t_b_ = (double)(b);                                                       \
        T_CHECK(fabs(t_a_ - t_b_) <= (tol), "%s = %.9g, %s = %.9g, |diff| > %g", #a, t_a_, #b, t_b_, (double)(tol)); \
    } while (0)

#define T_SKIP(...)                                                                                          \
    do {                                                                                                     \
        t_skip++;                                                                                            \
        printf("SKIP (");                                                                                    \
        printf(__VA_ARGS__);                                                                                 \
        printf(")\n");                                                                                       \
        fflush(stdout);                                                                                      \
    } while (0)

/* INFER_REQUIRE_PEER set to anything but "" or "0" */
static inline int t_require_peer(void) {
    const char *e = getenv("INFER_REQUIRE_PEER");
    return e && *e && strcmp(e, "0") != 0;
}

static inline int t_quick(void) {
    const char *e = getenv("INFER_TEST_QUICK");
    return e && strcmp(e, "1") == 0;
}

#define T_SKIP_PEER(...)                                                                                     \
    do {                                                                                                     \
        if (t_require_peer()) {                                                                              \
            T_CHECK(0, "INFER_REQUIRE_PEER=1 but the oracle is missing: " __VA_ARGS__);                      \
        } else {                                                                                             \
            T_SKIP(__VA_ARGS__);                                                                             \
        }                                                                                                    \
    } while (0)

static inline int t_done_named(const char *name) {
    printf("%s: %d passed, %d failed, %d skipped\n", name, t_pass, t_fail, t_skip);
    if (t_fail) return 1;
    if (t_pass == 0 && t_skip > 0) return 77;
    return 0;
}
#define t_done() t_done_named(__FILE__)

#endif
