/*
 * check.h — the unit tests' tiny assertion kit: CHECK records a failure
 * (with file, line and the failed expression) and goes on; CHECK_DONE
 * prints the tally and yields main's exit status; CHECK_INT compares two
 * integers and prints both on failure. The tally is per file unless the
 * includer defines CHECK_TALLY_SHARED: then it is one for the program, and
 * exactly one of its files defines CHECK_TALLY_DEFINE too (a test program
 * whose helpers in another file CHECK as well).
 */
#ifndef SX_CHECK_H
#define SX_CHECK_H

#include <stdio.h>

#if defined(CHECK_TALLY_SHARED) && defined(CHECK_TALLY_DEFINE)
int check_failures;
int check_count;          /* CHECK is for one thread at a time: not atomic */
#elif defined(CHECK_TALLY_SHARED)
extern int check_failures;
extern int check_count;
#else
static int check_failures;
static int check_count;
#endif

#define CHECK(cond)                                                           \
    do {                                                                      \
        check_count++;                                                        \
        if (!(cond)) {                                                        \
            check_failures++;                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                     \
    } while (0)

#define CHECK_INT(a, b)                                                       \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        check_count++;                                                        \
        if (a_ != b_) {                                                       \
            check_failures++;                                                 \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n", \
                    __FILE__, __LINE__, #a, #b, a_, b_);                      \
        }                                                                     \
    } while (0)

#define CHECK_DONE()                                                          \
    (printf("%d checks, %d failed\n", check_count, check_failures),           \
     check_failures ? 1 : 0)

#endif
