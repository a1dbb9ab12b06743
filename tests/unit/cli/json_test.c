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
#include "check.h"
#include "cli.h"

int cli_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 3;
}

/* Prints {"s": the n bytes of s} with cli_print_item, its stdout a pipe
 * for the call; returns what it wrote (malloc'd) or NULL. A line this
 * short fits the pipe's buffer, so nothing waits for a reader. */
static char *print_str(const char *s, size_t n)
{
    sx_item *it = sx_item_new();
    char *out = calloc(4096, 1);
    int fds[2] = { -1, -1 }, saved = -1;
    size_t got = 0;
    ssize_t r;

    if (it == NULL || out == NULL || sx_item_set_strn(it, "s", s, n) != SX_OK || pipe(fds) != 0 ||
        fflush(stdout) != 0 || (saved = dup(1)) < 0 || dup2(fds[1], 1) < 0) {
        if (saved >= 0)
            close(saved);
        for (int i = 0; i < 2; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        sx_item_free(it);
        free(out);
        return NULL;
    }
    CHECK(cli_print_item(it) == 0);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(fds[1]);
    sx_item_free(it);
    while (got < 4095 && (r = read(fds[0], out + got, 4095 - got)) > 0)
        got += (size_t)r;
    close(fds[0]);
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
    expect("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14,
           "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    expect("a\xff\xfe"
           "b",
           4,
           "a\xef\xbf\xbd\xef\xbf\xbd"
           "b");                                                       /* not UTF-8 */
    expect("\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd");                 /* overlong */
    expect("\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* surrogate */
    expect("\xe2\x82", 2, "\xef\xbf\xbd\xef\xbf\xbd");                 /* cut short */
    expect("t\tq\"\\\x01", 6, "t\tq\"\\\x01");                         /* escapes */
    return CHECK_DONE();
}
