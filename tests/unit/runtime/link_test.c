/*
 * link_test.c — links (proto/runtime/link.c) over real loopback TCP and IPC
 * sockets: frames echoed in order and whole (empty, small, 1 MiB, from
 * several threads at once), a frame too large refused before it is sent, a
 * malformed length closing the connection on the server (a whole frame
 * just before it handed over as the burst's last), a listener's close
 * reaching the dialed side, a link that holds its cap of unanswered
 * requests reading no more until half are answered, a link whose peer
 * does not read its replies reading no more until they have left, and
 * dial errors; the echo and the cap again on authenticated links (a link
 * key set; link_auth_test checks what they refuse).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <nng/nng.h>

#include "check.h"
#include "hash.h"
#include "link.h"
#include "link_auth.h"
#include "net.h"
#include "rawstream.h"
#include "scratch.h"
#include "sx_errors.h"

/* ---- the server: echoes every frame, counts closes ---- */

typedef struct srv_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int closed;
    int last_err;
} srv_state;

/* The last frame echo_frame saw: its id and more flag (under g_more_mu). */
static pthread_mutex_t g_more_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_last_id;
static int g_last_more = -1;

static void echo_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    pthread_mutex_lock(&g_more_mu);
    g_last_id = id;
    g_last_more = more;
    pthread_mutex_unlock(&g_more_mu);
    (void)arg;
    (void)more;
    (void)link_send(l, id, frame, n);
    free(frame);
}

static void srv_closed(void *arg, link_conn *l, int err)
{
    srv_state *s = arg;

    (void)l;
    pthread_mutex_lock(&s->mu);
    s->closed++;
    s->last_err = err;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the client: checks what comes back ---- */

typedef struct cli_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t got;     /* frames received */
    uint64_t bad;     /* payloads not matching their id */
    uint64_t next_id; /* in-order check (single sender only) */
    bool ordered;
    bool out_of_order;
    uint64_t id_sum;
    bool closed;
    int close_err;
} cli_state;

/* The payload of frame id: n bytes derived from id. */
static size_t size_of(uint64_t id)
{
    if (id % 97 == 0)
        return 1u << 20;
    return (size_t)((id * 37) % 2000); /* 0 included */
}

static void fill(uint8_t *p, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(id * 131 + i * 7);
}

static void cli_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    cli_state *c = arg;
    size_t want = size_of(id);
    bool ok = n == want;

    (void)l;
    (void)more;
    for (size_t i = 0; ok && i < n; i++)
        ok = frame[i] == (uint8_t)(id * 131 + i * 7);
    free(frame);
    pthread_mutex_lock(&c->mu);
    if (!ok)
        c->bad++;
    if (c->ordered) {
        if (id != c->next_id)
            c->out_of_order = true;
        c->next_id = id + 1;
    }
    c->id_sum += id;
    c->got++;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void cli_closed(void *arg, link_conn *l, int err)
{
    cli_state *c = arg;

    (void)l;
    pthread_mutex_lock(&c->mu);
    c->closed = true;
    c->close_err = err;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void deadline_in(struct timespec *ts, int seconds)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += seconds;
}

/* Waits until c has received want frames (false after 20 s). */
static bool wait_got(cli_state *c, uint64_t want)
{
    struct timespec ts;
    int rv = 0;

    deadline_in(&ts, 20);
    pthread_mutex_lock(&c->mu);
    while (c->got < want && rv == 0)
        rv = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    bool ok = c->got >= want;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static bool wait_cli_closed(cli_state *c)
{
    struct timespec ts;
    int rv = 0;

    deadline_in(&ts, 20);
    pthread_mutex_lock(&c->mu);
    while (!c->closed && rv == 0)
        rv = pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    bool ok = c->closed;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static bool wait_srv_closed(srv_state *s, int want)
{
    struct timespec ts;
    int rv = 0;

    deadline_in(&ts, 20);
    pthread_mutex_lock(&s->mu);
    while (s->closed < want && rv == 0)
        rv = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    bool ok = s->closed >= want;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static void cli_init(cli_state *c, bool ordered)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->ordered = ordered;
    c->next_id = 1;
}

/* Sends frames first..last on l; returns how many link_send refused. */
static int send_range(link_conn *l, uint64_t first, uint64_t last)
{
    uint8_t *buf = malloc(1u << 20);
    int refused = 0;

    if (buf == NULL)
        return (int)(last - first + 1);
    for (uint64_t id = first; id <= last; id++) {
        size_t n = size_of(id);
        fill(buf, n, id);
        if (link_send(l, id, buf, n) != 0)
            refused++;
    }
    free(buf);
    return refused;
}

typedef struct sender {
    link_conn *l;
    uint64_t first, last;
    int refused;
} sender;

static void *sender_main(void *arg)
{
    sender *s = arg;

    s->refused = send_range(s->l, s->first, s->last);
    return NULL;
}

/* Echo over url: in order from one sender, then from four at once. */
static void echo_case(const char *url)
{
    srv_state ss = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    link_listener *ls = NULL;
    cli_state cs;
    link_conn *l = NULL;

    cli_init(&cs, true);
    CHECK_INT(link_listen(url, echo_frame, srv_closed, &ss, 0, &ls), 0);
    if (ls == NULL)
        return;
    CHECK_INT(link_dial(url, 5000, cli_frame, cli_closed, &cs, &l), 0);
    if (l == NULL) {
        link_listener_close(ls);
        return;
    }
    CHECK_INT(send_range(l, 1, 1000), 0);
    CHECK(wait_got(&cs, 1000));
    CHECK_INT(cs.bad, 0);
    CHECK(!cs.out_of_order);

    /* four threads at once: every frame comes back whole, each once */
    pthread_mutex_lock(&cs.mu);
    cs.ordered = false;
    cs.got = 0;
    cs.id_sum = 0;
    pthread_mutex_unlock(&cs.mu);
    sender sd[4];
    pthread_t th[4];
    uint64_t want_sum = 0;
    for (int i = 0; i < 4; i++) {
        sd[i] = (sender){ .l = l,
                          .first = 10000u * (uint64_t)(i + 1),
                          .last = 10000u * (uint64_t)(i + 1) + 499 };
        for (uint64_t id = sd[i].first; id <= sd[i].last; id++)
            want_sum += id;
        CHECK_INT(pthread_create(&th[i], NULL, sender_main, &sd[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(sd[i].refused, 0);
    }
    CHECK(wait_got(&cs, 2000));
    CHECK_INT(cs.got, 2000);
    CHECK_INT(cs.bad, 0);
    CHECK(cs.id_sum == want_sum);

    /* too large: refused here, the link stays up */
    {
        uint8_t *big = calloc(1, SX_MAX_FRAME + 1u);
        CHECK(big != NULL);
        if (big != NULL) {
            CHECK_INT(link_send(l, 7, big, SX_MAX_FRAME + 1u), SX_ETOOBIG);
            free(big);
        }
        uint8_t b37[37]; /* id 1's payload: size_of(1) bytes */
        fill(b37, sizeof(b37), 1);
        CHECK_INT(link_send(l, 1, b37, sizeof(b37)), 0);
        CHECK(wait_got(&cs, 2001));
        CHECK_INT(cs.bad, 0);
    }

    /* the listener closes: the dialed side hears it, sends fail after */
    link_listener_close(ls);
    CHECK(wait_cli_closed(&cs));
    CHECK(cs.close_err != 0);
    CHECK_INT(link_send(l, 2, NULL, 0), SX_EUNAVAIL);
    CHECK(wait_srv_closed(&ss, 1));
    link_unref(l);
}

/* A malformed length closes the connection on the server (SX_EPROTO). */
static void bad_length_case(const char *url)
{
    srv_state ss = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    link_listener *ls = NULL;
    nng_stream_dialer *d = NULL;
    nng_aio *aio = NULL;
    nng_stream *s = NULL;

    CHECK_INT(link_listen(url, echo_frame, srv_closed, &ss, 0, &ls), 0);
    if (ls == NULL)
        return;
    s = raw_dial(url, 5000, &d, &aio);
    if (s != NULL) {
        /* a whole frame (id 41, 2 bytes), then a header too short for
         * its own id, in one write */
        uint8_t hdr[2 * LINK_HDR + 2];
        nng_iov iov = { hdr, sizeof(hdr) };
        be_put32(hdr, 10);
        be_put64(hdr + 4, 41);
        hdr[12] = 'o';
        hdr[13] = 'k';
        be_put32(hdr + 14, 3);
        be_put64(hdr + 18, 42);
        nng_aio_set_iov(aio, 1, &iov);
        nng_stream_send(s, aio);
        nng_aio_wait(aio);
        CHECK_INT(nng_aio_result(aio), 0);
        CHECK(wait_srv_closed(&ss, 1));
        CHECK_INT(ss.last_err, SX_EPROTO);
        pthread_mutex_lock(&g_more_mu);
        CHECK_INT(g_last_id, 41); /* handed over, and as the last */
        CHECK_INT(g_last_more, 0);
        pthread_mutex_unlock(&g_more_mu);
        /* and this side sees the connection end, after frame 41's echo
         * (14 bytes) at most */
        uint8_t b[64];
        size_t got = 0;
        int rv = 0;
        for (int i = 0; i < 16 && rv == 0; i++) {
            nng_iov riov = { b, sizeof(b) };
            nng_aio_set_iov(aio, 1, &riov);
            nng_stream_recv(s, aio);
            nng_aio_wait(aio);
            rv = nng_aio_result(aio);
            if (rv == 0)
                got += nng_aio_count(aio);
        }
        CHECK(rv != 0);
        CHECK(got <= 14);
        nng_stream_free(s);
    }
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    link_listener_close(ls);
}

/* ---- back-pressure: a server that holds its replies ---- */

typedef struct holder {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    link_conn *l;
    uint64_t ids[16];
    int n; /* requests held (ids 1..), not answered */
} holder;

/* Id 100 is answered at once; every other is held (link_hold) for the
 * test to answer. */
static void hold_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    holder *h = arg;

    (void)more;
    if (id == 100) {
        (void)link_send(l, id, frame, n);
        free(frame);
        return;
    }
    free(frame);
    link_hold(l);
    pthread_mutex_lock(&h->mu);
    if (h->l == NULL)
        link_ref(l); /* the test answers on it, maybe after a close */
    h->l = l;
    if (h->n < 16)
        h->ids[h->n++] = id;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* The client's view: the order replies arrived in. */
typedef struct arrivals {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t ids[16];
    int n;
} arrivals;

static void arrive_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    arrivals *a = arg;

    (void)l;
    (void)n;
    (void)more;
    free(frame);
    pthread_mutex_lock(&a->mu);
    if (a->n < 16)
        a->ids[a->n++] = id;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Waits (polling, at most 20 s) until l's reading is as wanted. */
static bool wait_reading(link_conn *l, bool want)
{
    for (int i = 0; i < 20000; i++) {
        if (link_reading(l) == want)
            return true;
        struct timespec ms = { 0, 1000000L };
        nanosleep(&ms, NULL);
    }
    return false;
}

/* A link with 4 requests held (its cap) stops reading, stays stopped at
 * 3, reads again at 2 (half), and a ping sent meanwhile is answered. */
static void backpressure_case(const char *url)
{
    holder h = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    arrivals a = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    link_listener *ls = NULL;
    link_conn *l = NULL;
    struct timespec ts;
    uint8_t b = 'x';
    int rv = 0;

    CHECK_INT(link_listen(url, hold_frame, NULL, &h, 4, &ls), 0);
    CHECK_INT(link_dial(url, 5000, arrive_frame, NULL, &a, &l), 0);
    if (ls == NULL || l == NULL) {
        if (l != NULL)
            link_unref(l);
        link_listener_close(ls);
        return;
    }
    link_out v[4] = { { 1, &b, 1 }, { 2, &b, 1 }, { 3, &b, 1 }, { 4, &b, 1 } };
    CHECK_INT(link_sendv(l, v, 4), 0);
    deadline_in(&ts, 20);
    pthread_mutex_lock(&h.mu);
    while (h.n < 4 && rv == 0)
        rv = pthread_cond_timedwait(&h.cv, &h.mu, &ts);
    CHECK_INT(h.n, 4);
    pthread_mutex_unlock(&h.mu);
    if (h.n == 4 && h.l != NULL) {
        CHECK(wait_reading(h.l, false));        /* at the cap */
        CHECK_INT(link_send(l, 100, &b, 1), 0); /* a ping, unread for now */
        CHECK_INT(link_send(h.l, h.ids[0], &b, 1), 0);
        link_release(h.l);
        CHECK(!link_reading(h.l)); /* 3 held: still stopped */
        CHECK_INT(link_send(h.l, h.ids[1], &b, 1), 0);
        link_release(h.l);
        CHECK(link_reading(h.l)); /* 2: half the cap */
        for (int i = 2; i < 4; i++) {
            CHECK_INT(link_send(h.l, h.ids[i], &b, 1), 0);
            link_release(h.l);
        }
    }
    deadline_in(&ts, 20);
    rv = 0;
    pthread_mutex_lock(&a.mu);
    while (a.n < 5 && rv == 0)
        rv = pthread_cond_timedwait(&a.cv, &a.mu, &ts);
    CHECK_INT(a.n, 5); /* the ping answered too */
    pthread_mutex_unlock(&a.mu);

    /* at the cap again, the listener closes: it must not wait for a
     * receive that will never come */
    v[0].id = 5, v[1].id = 6, v[2].id = 7, v[3].id = 8;
    CHECK_INT(link_sendv(l, v, 4), 0);
    deadline_in(&ts, 20);
    rv = 0;
    pthread_mutex_lock(&h.mu);
    while (h.n < 8 && rv == 0)
        rv = pthread_cond_timedwait(&h.cv, &h.mu, &ts);
    CHECK_INT(h.n, 8);
    pthread_mutex_unlock(&h.mu);
    if (h.l != NULL)
        CHECK(wait_reading(h.l, false));
    link_listener_close(ls); /* returns: the link settled */
    for (int i = 4; i < 8 && h.l != NULL; i++) {
        CHECK_INT(link_send(h.l, h.ids[i], &b, 1), SX_EUNAVAIL);
        link_release(h.l);
    }
    if (h.l != NULL)
        link_unref(h.l);
    link_close(l);
    link_unref(l);
}

/* ---- back-pressure: a peer that does not read its replies ---- */

#define BIG_REPLY (1u << 20)
#define BIG_ASKS 64 /* 64 MiB of replies: past the link's unsent cap */

static link_conn *g_big_link; /* the server's side, kept by big_frame */
static pthread_mutex_t g_big_mu = PTHREAD_MUTEX_INITIALIZER;

/* Answers every request at once with BIG_REPLY bytes. */
static void big_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    static uint8_t reply[BIG_REPLY];

    (void)arg;
    (void)n;
    (void)more;
    free(frame);
    pthread_mutex_lock(&g_big_mu);
    if (g_big_link == NULL) {
        link_ref(l);
        g_big_link = l;
    }
    pthread_mutex_unlock(&g_big_mu);
    (void)link_send(l, id, reply, sizeof(reply));
}

/* A raw client asks for BIG_ASKS large replies and reads none: the server's
 * link stops reading (its unsent replies, not its memory, hold the peer
 * back); once the client reads them all, the link reads again. */
static void unread_case(const char *url)
{
    link_listener *ls = NULL;
    nng_stream_dialer *d = NULL;
    nng_aio *aio = NULL;
    nng_stream *s = NULL;

    CHECK_INT(link_listen(url, big_frame, NULL, NULL, 1024, &ls), 0);
    if (ls == NULL || (s = raw_dial(url, 20000, &d, &aio)) == NULL)
        goto out;
    uint8_t asks[BIG_ASKS][LINK_HDR + 1];
    for (int i = 0; i < BIG_ASKS; i++) {
        be_put32(asks[i], 9);
        be_put64(asks[i] + 4, (uint64_t)i + 1);
        asks[i][LINK_HDR] = 'x';
    }
    nng_iov iov = { asks, sizeof(asks) };
    nng_aio_set_iov(aio, 1, &iov);
    nng_stream_send(s, aio);
    nng_aio_wait(aio);
    CHECK_INT(nng_aio_result(aio), 0);
    for (int i = 0; i < 20000 && g_big_link == NULL; i++) {
        struct timespec ms = { 0, 1000000L };
        nanosleep(&ms, NULL); /* poll: the first request in */
    }
    CHECK(g_big_link != NULL);
    if (g_big_link != NULL)
        CHECK(wait_reading(g_big_link, false)); /* replies unsent: stopped */
    /* read every reply; the link then reads again */
    size_t want = (size_t)BIG_ASKS * (LINK_HDR + BIG_REPLY), got = 0;
    uint8_t *buf = malloc(1u << 20);
    int rv = 0;
    while (buf != NULL && got < want && rv == 0) {
        nng_iov riov = { buf, 1u << 20 };
        nng_aio_set_iov(aio, 1, &riov);
        nng_stream_recv(s, aio);
        nng_aio_wait(aio);
        rv = nng_aio_result(aio);
        if (rv == 0)
            got += nng_aio_count(aio);
    }
    free(buf);
    CHECK(got == want);
    if (g_big_link != NULL) {
        CHECK(wait_reading(g_big_link, true));
        link_unref(g_big_link);
        g_big_link = NULL;
    }
    nng_stream_free(s);
out:
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    link_listener_close(ls);
}

int main(void)
{
    char base[128], url[256];
    cli_state cs;
    link_conn *l = NULL;

    if (scratch_make("sx-link-test", base, sizeof(base)) == NULL)
        return 1;
    snprintf(url, sizeof(url), "ipc://%s/echo.sock", base);
    echo_case(url);
    snprintf(url, sizeof(url), "ipc://%s/bad.sock", base);
    bad_length_case(url);
    snprintf(url, sizeof(url), "ipc://%s/hold.sock", base);
    backpressure_case(url);
    snprintf(url, sizeof(url), "ipc://%s/unread.sock", base);
    unread_case(url);

    /* authenticated: hellos first, a tag after every frame, the same
     * frames handed over (1 MiB ones, four senders at once, the cap) */
    uint8_t key[LINK_KEY_BYTES];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (uint8_t)(i * 29 + 3);
    CHECK_INT(proto_init(), 0);
    link_auth_set_key(key, "test");
    snprintf(url, sizeof(url), "ipc://%s/echo-auth.sock", base);
    echo_case(url);
    snprintf(url, sizeof(url), "ipc://%s/hold-auth.sock", base);
    backpressure_case(url);
    link_auth_set_key(NULL, NULL);

    /* TCP: find a free port by listening on 0 is not offered by
     * link_listen, so pick one from the pid and retry on a busy one. */
    for (int i = 0; i < 20; i++) {
        link_listener *probe = NULL;
        snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", 20000 + (getpid() * 7 + i * 131) % 30000);
        if (link_listen(url, echo_frame, NULL, NULL, 0, &probe) == 0) {
            link_listener_close(probe);
            break;
        }
    }
    echo_case(url);

    /* dial errors: nobody listening, a bad URL */
    cli_init(&cs, false);
    snprintf(url, sizeof(url), "ipc://%s/nobody.sock", base);
    CHECK_INT(link_dial(url, 2000, cli_frame, cli_closed, &cs, &l), SX_EUNAVAIL);
    CHECK_INT(link_dial("nosuch://x", 2000, cli_frame, cli_closed, &cs, &l), SX_EINVAL);
    CHECK(l == NULL);

    scratch_remove(base);
    return CHECK_DONE();
}
