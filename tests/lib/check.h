/*
 * check.h — the tests' one assertion kit. A check counts in the tally; a
 * failed one also counts as a failure and is printed on stderr (file, line,
 * the failed expression) and the test goes on:
 *   CHECK(cond)               the condition holds
 *   CHECKF(cond, fmt, ...)    the same, and on failure prints a printf-style
 *                             message after the expression
 *   CHECK_INT(a, b)           two integers are equal (both printed on failure)
 *   CHECK_RC(expr, want)      a call returning an sx_err code returned want
 *                             (both codes printed with sx_strerror's text: the
 *                             includer includes sx_errors.h or shardex.h)
 *   CHECK_FAILED()            the failures so far
 *   CHECK_DONE()              prints "N checks, M failed" on stdout and
 *                             yields main's exit status (0 when none failed)
 * The tally is kept with atomic operations, so checks may run on any
 * thread (callbacks, helper threads), and a failure is printed with one
 * write, whole.
 *
 * The tally is per file unless the includer defines CHECK_TALLY_SHARED:
 * then it is one for the program, and exactly one of its files defines
 * CHECK_TALLY_DEFINE too (a test program whose helpers in another file
 * CHECK as well).
 */
#ifndef SX_CHECK_H
#define SX_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#if defined(CHECK_TALLY_SHARED) && defined(CHECK_TALLY_DEFINE)
int check_failures;
int check_count;
#elif defined(CHECK_TALLY_SHARED)
extern int check_failures;
extern int check_count;
#else
static int check_failures;
static int check_count;
#endif

/* Counts one check. */
static inline void check_counted_(void)
{
    __atomic_fetch_add(&check_count, 1, __ATOMIC_RELAXED);
}

/* Counts and prints one failure: "FILE:LINE: check failed: EXPR", then
 * ": " and the message formatted from fmt. */
static inline void check_reportf_(const char *file, int line, const char *expr, const char *fmt,
                                  ...) __attribute__((format(printf, 4, 5)));

static inline void check_reportf_(const char *file, int line, const char *expr, const char *fmt,
                                  ...)
{
    char m[2048];
    int n;
    va_list ap;

    __atomic_fetch_add(&check_failures, 1, __ATOMIC_RELAXED);
    n = snprintf(m, sizeof(m), "%s:%d: check failed: %s: ", file, line, expr);
    if (n < 0 || (size_t)n >= sizeof(m))
        n = 0;
    va_start(ap, fmt);
    vsnprintf(m + n, sizeof(m) - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", m);
}

/* The same without a message. */
static inline void check_report_(const char *file, int line, const char *expr)
{
    __atomic_fetch_add(&check_failures, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "%s:%d: check failed: %s\n", file, line, expr);
}

#define CHECK(cond)                                   \
    do {                                              \
        check_counted_();                             \
        if (!(cond))                                  \
            check_report_(__FILE__, __LINE__, #cond); \
    } while (0)

#define CHECKF(cond, ...)                                           \
    do {                                                            \
        check_counted_();                                           \
        if (!(cond))                                                \
            check_reportf_(__FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

#define CHECK_INT(a, b)                                                               \
    do {                                                                              \
        long long a_ = (long long)(a), b_ = (long long)(b);                           \
        check_counted_();                                                             \
        if (a_ != b_)                                                                 \
            check_reportf_(__FILE__, __LINE__, #a " == " #b, "%lld != %lld", a_, b_); \
    } while (0)

#define CHECK_RC(expr, want)                                                               \
    do {                                                                                   \
        int rc_ = (expr), want_ = (want);                                                  \
        check_counted_();                                                                  \
        if (rc_ != want_)                                                                  \
            check_reportf_(__FILE__, __LINE__, #expr " == " #want,                         \
                           "returned %d (%s), want %d (%s)", rc_, sx_strerror(rc_), want_, \
                           sx_strerror(want_));                                            \
    } while (0)

#define CHECK_FAILED() __atomic_load_n(&check_failures, __ATOMIC_RELAXED)

#define CHECK_DONE()                                                                   \
    (printf("%d checks, %d failed\n", __atomic_load_n(&check_count, __ATOMIC_RELAXED), \
            CHECK_FAILED()),                                                           \
     CHECK_FAILED() ? 1 : 0)

#endif
