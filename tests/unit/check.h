/*
 * check.h — the unit tests' tiny assertion kit: CHECK records a failure
 * (with file, line and the failed expression) and goes on; CHECK_DONE
 * prints the tally and yields main's exit status.
 */
#ifndef SX_CHECK_H
#define SX_CHECK_H

#include <stdio.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                           \
    do {                                                                      \
        check_count++;                                                        \
        if (!(cond)) {                                                        \
            check_failures++;                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                     \
    } while (0)

#define CHECK_DONE()                                                          \
    (printf("%d checks, %d failed\n", check_count, check_failures),           \
     check_failures ? 1 : 0)

#endif
