/*
 * frame_limit_test.c — the frame limit, 16 MiB (proto/PROTOCOL.md,
 * "Transport"; SX_MAX_FRAME), held at every way into a process
 * (proto/runtime/net.c, link.c):
 *   - a listening socket (net_listen: every REP port, a router's client
 *     port) and a dialing one (net_dial: clients, a router's calls) are set
 *     to take frames of at most 16 MiB (nng drops the connection of a larger
 *     one before it is handed over);
 *   - a link (node ports) closes a connection whose frame header claims a
 *     byte past the limit, before its payload comes, and hands over a frame
 *     of exactly the limit.
 * Every wait is for a condition (a close, a frame), bounded by WAIT_MS.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <nng/nng.h>

#include "check.h"
#include "hash.h"
#include "link.h"
#include "net.h"
#include "rawstream.h"
#include "scratch.h"
#include "sx_errors.h"

#define LIMIT (16u * 1024u * 1024u) /* what the protocol promises */
#define WAIT_MS 10000

/* What the link test waits for, signalled from nng's threads. */
typedef struct events {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int closed; /* link closed callbacks */
    int close_err;
    int frames; /* link frames handed over */
    size_t frame_n;
} events;

static events E = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void reset(void)
{
    pthread_mutex_lock(&E.mu);
    E.closed = E.frames = 0;
    E.frame_n = 0;
    E.close_err = 0;
    pthread_mutex_unlock(&E.mu);
}

/* Waits at most WAIT_MS until *what is nonzero; true if it happened. */
static bool wait_for(int *what)
{
    struct timespec ts;
    bool ok;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&E.mu);
    while (*what == 0 && pthread_cond_timedwait(&E.cv, &E.mu, &ts) == 0)
        ;
    ok = *what != 0;
    pthread_mutex_unlock(&E.mu);
    return ok;
}

/* ---- sockets ---- */

/* A listening socket (net_listen: every REP port; a router's client port
 * when it is not TLS) and a dialing one (net_dial) take frames of at most
 * the limit: nng then drops, unanswered, a connection whose frame is
 * larger (proto/PROTOCOL.md). */
static void sockets(const char *url)
{
    nng_socket srv, c;
    size_t sz = 0;

    CHECK_INT(net_listen(url, &srv), 0);
    CHECK_INT(nng_socket_get_size(srv, NNG_OPT_RECVMAXSZ, &sz), 0);
    CHECKF(sz == LIMIT, "listening socket: %zu", sz);
    CHECK_INT(net_dial(url, &c), 0);
    sz = 0;
    CHECK_INT(nng_socket_get_size(c, NNG_OPT_RECVMAXSZ, &sz), 0);
    CHECKF(sz == LIMIT, "dialing socket: %zu", sz);
    /* One round trip of a small frame before closing: nng 1.5 leaks the
     * pipe of a dialer closed while it is still connecting (NONBLOCK). */
    char buf[8];
    size_t n = sizeof(buf);
    CHECK_INT(nng_socket_set_ms(srv, NNG_OPT_RECVTIMEO, WAIT_MS), 0);
    CHECK_INT(nng_socket_set_ms(c, NNG_OPT_RECVTIMEO, WAIT_MS), 0);
    CHECK_INT(nng_send(c, "ping", 4, 0), 0);
    CHECK_INT(nng_recv(srv, buf, &n, 0), 0);
    CHECK_INT(nng_send(srv, buf, n, 0), 0);
    n = sizeof(buf);
    CHECK_INT(nng_recv(c, buf, &n, 0), 0);
    CHECK(n == 4 && memcmp(buf, "ping", 4) == 0);
    nng_close(c);
    nng_close(srv);
}

/* ---- a link ---- */

static void on_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    (void)arg;
    (void)l;
    (void)id;
    (void)more;
    free(frame);
    pthread_mutex_lock(&E.mu);
    E.frames++;
    E.frame_n = n;
    pthread_cond_broadcast(&E.cv);
    pthread_mutex_unlock(&E.mu);
}

static void on_closed(void *arg, link_conn *l, int err)
{
    (void)arg;
    (void)l;
    pthread_mutex_lock(&E.mu);
    E.closed++;
    E.close_err = err;
    pthread_cond_broadcast(&E.cv);
    pthread_mutex_unlock(&E.mu);
}

static void linked(const char *url)
{
    link_listener *ls = NULL;
    nng_stream_dialer *d = NULL;
    nng_aio *aio = NULL;
    nng_stream *s;
    uint8_t hdr[LINK_HDR];

    CHECK_INT(link_listen(url, on_frame, on_closed, NULL, 0, &ls), 0);
    if (ls == NULL)
        return;

    /* a header claiming a byte past the limit: closed at once */
    reset();
    s = raw_dial(url, WAIT_MS, &d, &aio);
    if (s != NULL) {
        be_put32(hdr, 8u + LIMIT + 1u);
        be_put64(hdr + 4, 1);
        CHECK_INT(raw_io(s, aio, hdr, sizeof(hdr), true), 0);
        CHECK(wait_for(&E.closed));
        pthread_mutex_lock(&E.mu);
        CHECK_INT(E.close_err, SX_EPROTO);
        CHECK_INT(E.frames, 0);
        pthread_mutex_unlock(&E.mu);
        nng_stream_free(s);
    }
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    aio = NULL;
    d = NULL;

    /* a frame of exactly the limit: handed over */
    reset();
    s = raw_dial(url, WAIT_MS, &d, &aio);
    uint8_t *frame = calloc(1, LINK_HDR + (size_t)LIMIT);
    CHECK(frame != NULL);
    if (s != NULL && frame != NULL) {
        be_put32(frame, 8u + LIMIT);
        be_put64(frame + 4, 2);
        CHECK_INT(raw_io(s, aio, frame, LINK_HDR + (size_t)LIMIT, true), 0);
        CHECK(wait_for(&E.frames));
        pthread_mutex_lock(&E.mu);
        CHECK(E.frame_n == LIMIT);
        CHECK_INT(E.closed, 0);
        pthread_mutex_unlock(&E.mu);
    }
    free(frame);
    if (s != NULL)
        nng_stream_free(s);
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    link_listener_close(ls);
}

int main(void)
{
    char base[128], url[256];

    if (scratch_make("sx-frame-limit", base, sizeof(base)) == NULL)
        return 1;
    CHECK(SX_MAX_FRAME == LIMIT);
    snprintf(url, sizeof(url), "ipc://%s/sock.sock", base);
    sockets(url);
    snprintf(url, sizeof(url), "ipc://%s/link.sock", base);
    linked(url);
    scratch_remove(base);
    return CHECK_DONE();
}
