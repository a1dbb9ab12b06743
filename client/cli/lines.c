/*
 * lines.c — input read line by line from a file descriptor, with a
 * callback while the input is idle: a bulk load fed by a stream that
 * pauses must neither hold back the lines it has read nor hide an answer
 * that failed until more input comes (load.c). See cli.h.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"

#define LINES_BUF_MIN (1u << 20)

void cli_lines_init(cli_lines *r, int fd)
{
    memset(r, 0, sizeof *r);
    r->fd = fd;
}

void cli_lines_free(cli_lines *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* Makes room for more input: moves the unread part to the front, and
 * doubles the buffer when that part fills it. Returns 0 or ENOMEM. */
static int make_room(cli_lines *r)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->scanned -= r->start;
        r->start = 0;
    }
    if (r->end + 1 < r->cap) /* (one byte kept for a last NUL) */
        return 0;
    size_t cap = r->cap ? r->cap * 2 : LINES_BUF_MIN;
    char *b = realloc(r->buf, cap);
    if (!b)
        return ENOMEM;
    r->buf = b;
    r->cap = cap;
    return 0;
}

/* Hands out buf[start, end) as the next line (end at a newline or at the
 * input's end), NUL-terminated. */
static int take(cli_lines *r, size_t end, char **line, size_t *len)
{
    r->buf[end] = '\0';
    *line = r->buf + r->start;
    *len = end - r->start;
    r->start = r->scanned = end < r->end ? end + 1 : end;
    return 1;
}

int cli_lines_next(cli_lines *r, char **line, size_t *len, int idle_ms, bool (*idle)(void *arg),
                   void *arg)
{
    for (;;) {
        char *nl = r->end > r->scanned ? memchr(r->buf + r->scanned, '\n', r->end - r->scanned)
                                       : NULL;
        if (nl)
            return take(r, (size_t)(nl - r->buf), line, len);
        r->scanned = r->end;
        if (r->eof)
            return r->start < r->end ? take(r, r->end, line, len) : 0;
        if ((r->err = make_room(r)) != 0)
            return -1;
        struct pollfd p = { .fd = r->fd, .events = POLLIN };
        int pr = poll(&p, 1, idle_ms);
        if (pr < 0 && errno != EINTR) {
            r->err = errno;
            return -1;
        }
        if (pr == 0 && idle && !idle(arg))
            return -1; /* r->err stays 0: stopped */
        if (pr <= 0)
            continue;
        ssize_t n = read(r->fd, r->buf + r->end, r->cap - 1 - r->end);
        if (n < 0 && errno != EINTR && errno != EAGAIN) {
            r->err = errno;
            return -1;
        }
        if (n == 0)
            r->eof = true;
        else if (n > 0)
            r->end += (size_t)n;
    }
}
