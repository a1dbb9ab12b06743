/*
 * json_test.c — the CLI's JSON output (client/cli/json.c) for strings the
 * library accepts but JSON cannot hold as they are: bytes that are not
 * UTF-8 come out as U+FFFD, well-formed UTF-8 as it is, control
 * characters escaped; every line printed parses back as JSON.
 * Built from json.c alone; cli_error, which json.c reports through, is the
 * test's own (main.c would bring the whole CLI).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "cli.h"

static int failures;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                   \
            failures++;                                                       \
        }                                                                     \
    } while (0)

int cli_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 3;
}

/* Prints {"s": the n bytes of s} with cli_print_item; returns what it
 * wrote (malloc'd) or NULL. */
static char *print_str(const char *s, size_t n)
{
    char path[] = "/tmp/json_test.XXXXXX";
    int fd = mkstemp(path), saved;
    sx_item *it = sx_item_new();
    char *out = NULL;
    long len;
    FILE *f;

    if (fd < 0 || it == NULL || sx_item_set_strn(it, "s", s, n) != SX_OK) {
        sx_item_free(it);
        return NULL;
    }
    fflush(stdout);
    saved = dup(1);
    if (saved < 0 || dup2(fd, 1) < 0) {
        sx_item_free(it);
        return NULL;
    }
    CHECK(cli_print_item(it) == 0);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    sx_item_free(it);
    f = fdopen(fd, "r");
    if (f != NULL && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0 && (out = calloc((size_t)len + 1, 1)) != NULL &&
        fread(out, 1, (size_t)len, f) != (size_t)len) {
        free(out);
        out = NULL;
    }
    if (f != NULL)
        fclose(f);
    unlink(path);
    return out;
}

/* The string s (n bytes) must print as JSON whose "s" is want. */
static void expect(const char *s, size_t n, const char *want)
{
    char *line = print_str(s, n);
    json_error_t e;
    json_t *j = line ? json_loads(line, 0, &e) : NULL;
    const char *got = json_string_value(json_object_get(j, "s"));

    CHECK(line != NULL);
    CHECK(j != NULL);
    CHECK(got != NULL && strcmp(got, want) == 0);
    if (got == NULL || strcmp(got, want) != 0)
        fprintf(stderr, "  printed: %s", line ? line : "(nothing)\n");
    json_decref(j);
    free(line);
}

int main(void)
{
    expect("plain", 5, "plain");
    expect("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    expect("a\xff\xfe" "b", 4, "a\xef\xbf\xbd\xef\xbf\xbd" "b");        /* not UTF-8 */
    expect("\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd");                    /* overlong */
    expect("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");    /* surrogate */
    expect("\xe2\x82", 2, "\xef\xbf\xbd\xef\xbf\xbd");                    /* cut short */
    expect("t\tq\"\\\x01", 6, "t\tq\"\\\x01");                          /* escapes */
    if (failures) {
        fprintf(stderr, "json_test: %d check(s) failed\n", failures);
        return 1;
    }
    printf("json_test: ok\n");
    return 0;
}
