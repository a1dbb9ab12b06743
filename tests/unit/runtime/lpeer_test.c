/*
 * lpeer_test.c — a link server (net_server_open_link) and a link
 * peer (net_peer_open_link) over real IPC and TCP sockets:
 *   1. 300 calls submitted at once all answered, each once, each its own;
 *      quick requests run on the link's thread, in order;
 *   2. an error reply and a ~6 MiB reply come back whole;
 *   3. a call whose handler is held past its deadline fails SX_ETIMEDOUT
 *      once, and its late reply is dropped;
 *   4. the same calls against a server running requests as fibers;
 *   6. the window: with one batch unanswered (held in a handler), calls
 *      wait unsent (a solo call sent after them is answered first, though
 *      the link runs quick requests in order), then leave together;
 *   5. the server stops: a call in flight fails (SX_EUNAVAIL, or the
 *      server's "stopping" reply); a call made while it is down waits and
 *      is answered once a new server listens on the same URL;
 *   7. a connection drops under two sent calls (a server that never
 *      answers closes it): the read goes out again on the next connection
 *      and is answered there, the write fails SX_EUNAVAIL;
 *   8. a connection silent for a second while a call on it expires is
 *      closed as dead: a write in flight on it fails SX_EUNAVAIL, later
 *      calls are answered on a new connection;
 *   9. calls that ask whether they were sent (net_peer_call.unsent): with
 *      nothing listening, one fails at once, unsent; with the window held
 *      by a batch a server never answers, the calls queued behind it fail
 *      at once, unsent, when the connection drops, while the batch's own
 *      (a read among them: not sent again) fail sent and a call that does
 *      not ask still waits; at their deadline the sent one and the queued
 *      one say which they were; a connection found dead sends none of the
 *      calls queued behind the expired one.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "link.h"
#include "nettest_util.h"

void nettest_reset_local(void)
{
}

/* Waits until every call of c[0..n) completed (g_finished counts them). */
static bool wait_done(int want)
{
    return wait_ge(&g_finished, want);
}

static void many_calls(net_peer *p, bool quick_order)
{
    enum { N = 300 };
    pcall *c = calloc(N, sizeof(*c));
    net_peer_call *v = calloc(N, sizeof(*v));

    if (c == NULL || v == NULL) {
        CHECK(false);
        free(c);
        free(v);
        return;
    }
    reset_state();
    for (int i = 0; i < N; i++) {
        pcall_init(&c[i], i % 3 == 0 ? "quick" : "echo", i);
        c[i].submit_rc = 0;
        v[i] = (net_peer_call){
            .req = c[i].req, .n = c[i].req_n, .done = pcall_done, .arg = &c[i]
        };
    }
    CHECK_INT(net_peer_submit_n(p, v, N, WAIT_MS), 0);
    CHECK(wait_done(N));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < N; i++) {
        CHECK_INT(c[i].ndone, 1);
        CHECK_INT(c[i].err, 0);
        CHECK(c[i].resp != NULL && is_echo(c[i].resp, c[i].resp_n, i));
    }
    if (quick_order) {
        /* quick frames of one link run on the thread reading it, one at a time */
        CHECK_INT(g_quick_max, 1);
        CHECK(g_quick_n >= 1);
    }
    pthread_mutex_unlock(&g_mu);
    pcall_free(c, N);
    free(c);
    free(v);
}

static void err_and_big(net_peer *p)
{
    pcall e, b;

    reset_state();
    pcall_init(&e, "err", 5);
    pcall_init(&b, "big", 6);
    pcall_submit(p, &e);
    pcall_submit(p, &b);
    CHECK_INT(e.submit_rc, 0);
    CHECK_INT(b.submit_rc, 0);
    CHECK(wait_done(2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(e.err, 0);
    CHECK(e.resp != NULL && is_err(e.resp, e.resp_n, MSG_GET, err_of(5), NULL));
    CHECK_INT(b.err, 0);
    CHECK(b.resp != NULL && is_big(b.resp, b.resp_n, 6));
    pthread_mutex_unlock(&g_mu);
    pcall_free(&e, 1);
    pcall_free(&b, 1);
}

static void timeout_call(net_peer *p)
{
    pcall g;

    reset_state();
    pcall_init_t(&g, MSG_DELETE, "gate0", 9); /* DELETE: not quick, a worker waits */
    g.submit_rc = net_peer_submit(p, g.req, g.req_n, 200, pcall_done, &g);
    CHECK_INT(g.submit_rc, 0);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    CHECK(wait_done(1));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g.err, SX_ETIMEDOUT);
    pthread_mutex_unlock(&g_mu);
    set_int(&g_gate_open[0], 1); /* the handler answers late */
    CHECK(wait_le(&g_gate_waiting[0], 0));
    CHECK(wait_ge(&g_runs[K_GATE0], 1));
    /* a later call is answered, and the late reply completed nothing */
    many_calls(p, false);
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g.ndone, 1);
    pthread_mutex_unlock(&g_mu);
    pcall_free(&g, 1);
}

/* A connection that answers nothing while a call sent on it expires
 * after a second of silence is taken for dead: closed and dialed again. A
 * write still in flight on it fails SX_EUNAVAIL (without the rule it would
 * wait for its handler), and calls after it are answered on the next
 * connection. */
static void silent_connection(net_peer *p)
{
    pcall a, b;

    reset_state();
    pcall_init_t(&a, MSG_DELETE, "gate0", 21); /* both held: nothing answers */
    pcall_init_t(&b, MSG_DELETE, "gate1", 22);
    a.submit_rc = net_peer_submit_solo(p, a.req, a.req_n, 1300, pcall_done, &a);
    b.submit_rc = net_peer_submit_solo(p, b.req, b.req_n, WAIT_MS, pcall_done, &b);
    CHECK_INT(a.submit_rc, 0);
    CHECK_INT(b.submit_rc, 0);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    CHECK(wait_ge(&g_gate_waiting[1], 1));
    CHECK(wait_done(2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(a.err, SX_ETIMEDOUT);
    CHECK_INT(b.err, SX_EUNAVAIL);
    pthread_mutex_unlock(&g_mu);
    set_int(&g_gate_open[0], 1);
    set_int(&g_gate_open[1], 1);
    CHECK(wait_le(&g_gate_waiting[0], 0));
    CHECK(wait_le(&g_gate_waiting[1], 0));
    many_calls(p, false);
    pcall_free(&a, 1);
    pcall_free(&b, 1);
}

/* Peer p has a window of one batch. */
static void window(net_peer *p)
{
    enum { N = 10 };
    pcall g, s, e[N];

    reset_state();
    pcall_init_t(&g, MSG_DELETE, "gate0", 1); /* a worker holds it */
    pcall_submit(p, &g);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    for (int i = 0; i < N; i++) {
        pcall_init(&e[i], "echo", 100 + i); /* quick: run in order */
        pcall_submit(p, &e[i]);
        CHECK_INT(e[i].submit_rc, 0);
    }
    pcall_init(&s, "quick", 7);
    s.submit_rc = net_peer_submit_solo(p, s.req, s.req_n, WAIT_MS, pcall_done, &s);
    CHECK_INT(s.submit_rc, 0);
    CHECK(wait_ge(&s.ndone, 1));
    CHECK_INT(get_int(&g_runs[K_ECHO]), 0); /* held, not sent */
    set_int(&g_gate_open[0], 1);
    CHECK(wait_done(N + 2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(s.err, 0);
    CHECK_INT(g.err, 0);
    check_calls_ok(e, N);
    for (int i = 0; i < N; i++)
        CHECK(e[i].resp != NULL && is_echo(e[i].resp, e[i].resp_n, 100 + i));
    pthread_mutex_unlock(&g_mu);
    pcall_free(&g, 1);
    pcall_free(&s, 1);
    pcall_free(e, N);
}

/* A server that takes frames and never answers: counts them in *arg. */
static void mute_frame(void *arg, link_conn *l, uint64_t id, uint8_t *frame, size_t n, bool more)
{
    int *got = arg;

    (void)l;
    (void)id;
    (void)n;
    (void)more;
    free(frame);
    pthread_mutex_lock(&g_mu);
    (*got)++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static void lost_connection(const char *url, const net_server_opts *o)
{
    link_listener *mute = NULL;
    net_server *srv = NULL;
    net_peer *p = NULL;
    pcall rd, wr;
    int got = 0;

    reset_state();
    CHECK_INT(link_listen(url, mute_frame, NULL, &got, 0, &mute), 0);
    CHECK_INT(net_peer_open_link(url, 4, &p), 0);
    if (mute == NULL || p == NULL) {
        net_peer_close(p);
        link_listener_close(mute);
        return;
    }
    pcall_init(&rd, "echo", 5);               /* GET: a read */
    pcall_init_t(&wr, MSG_DELETE, "echo", 6); /* a write */
    pcall_submit(p, &rd);
    pcall_submit(p, &wr);
    CHECK(wait_ge(&got, 2));   /* both sent */
    link_listener_close(mute); /* the connection drops */
    CHECK(wait_ge(&wr.ndone, 1));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(wr.err, SX_EUNAVAIL);
    CHECK_INT(rd.ndone, 0); /* waits for the next link */
    pthread_mutex_unlock(&g_mu);
    CHECK_INT(net_server_open_link(url, o, handler, NULL, &srv), 0);
    CHECK(wait_ge(&rd.ndone, 1));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(rd.err, 0);
    CHECK(rd.resp != NULL && is_echo(rd.resp, rd.resp_n, 5));
    pthread_mutex_unlock(&g_mu);
    net_peer_close(p);
    net_server_stop(srv);
    pcall_free(&rd, 1);
    pcall_free(&wr, 1);
}

/* Starts call c (kind "echo", id; a GET unless write) on p with timeout
 * ms, asking whether it was sent (*unsent). */
static void submit_asking(net_peer *p, pcall *c, bool write, int id, int ms, bool *unsent)
{
    net_peer_call v;

    pcall_init_t(c, write ? MSG_DELETE : MSG_GET, "echo", id);
    *unsent = false;
    v = (net_peer_call){
        .req = c->req, .n = c->req_n, .done = pcall_done, .arg = c, .unsent = unsent
    };
    c->submit_rc = net_peer_submit_n(p, &v, 1, ms);
    CHECK_INT(c->submit_rc, 0);
}

/* Checks that call c ended once with err, *unsent as want. */
static void check_ended(const pcall *c, int err, const bool *unsent, bool want)
{
    pthread_mutex_lock(&g_mu);
    CHECK_INT(c->ndone, 1);
    CHECK_INT(c->err, err);
    CHECK(*unsent == want);
    pthread_mutex_unlock(&g_mu);
}

/* Scenario 9 (see the file comment), against a server at url that never
 * answers (mute) and, first, nothing at all. */
static void asking_unsent(const char *url)
{
    link_listener *mute = NULL;
    net_peer *p = NULL;
    pcall a, b, c, d, e;
    bool ua, ub, uc, ud;
    int got = 0;

    /* nothing listens: failed at once, unsent */
    reset_state();
    CHECK_INT(net_peer_open_link(url, 1, &p), 0);
    if (p == NULL)
        return;
    submit_asking(p, &a, true, 1, WAIT_MS, &ua);
    check_ended(&a, SX_EUNAVAIL, &ua, true);
    pcall_free(&a, 1);
    net_peer_close(p);
    p = NULL;

    /* a batch of a read and a write sent, never answered; a write and a
     * read queued behind it, asking; a read queued, not asking */
    reset_state();
    CHECK_INT(link_listen(url, mute_frame, NULL, &got, 0, &mute), 0);
    CHECK_INT(net_peer_open_link(url, 1, &p), 0);
    if (mute == NULL || p == NULL) {
        net_peer_close(p);
        link_listener_close(mute);
        return;
    }
    for (int waited = 0; waited < WAIT_MS && !net_peer_connected(p); waited += 10)
        usleep(10 * 1000);
    {
        net_peer_call v[2];
        pcall_init(&a, "echo", 10);
        pcall_init_t(&b, MSG_DELETE, "echo", 11);
        v[0] = (net_peer_call){
            .req = a.req, .n = a.req_n, .done = pcall_done, .arg = &a, .unsent = &ua
        };
        v[1] = (net_peer_call){
            .req = b.req, .n = b.req_n, .done = pcall_done, .arg = &b, .unsent = &ub
        };
        CHECK_INT(net_peer_submit_n(p, v, 2, WAIT_MS), 0);
    }
    CHECK(wait_ge(&got, 2)); /* the batch went out */
    submit_asking(p, &c, true, 12, WAIT_MS, &uc);
    submit_asking(p, &d, false, 13, WAIT_MS, &ud);
    pcall_init(&e, "echo", 14);
    pcall_submit(p, &e);
    usleep(100 * 1000);
    CHECK_INT(get_int(&got), 2); /* the window held the rest */
    link_listener_close(mute);   /* the connection drops */
    mute = NULL;
    CHECK(wait_ge_for(&d.ndone, 1, 1000)); /* at once, not at the deadline */
    CHECK(wait_ge_for(&c.ndone, 1, 1000));
    CHECK(wait_ge_for(&b.ndone, 1, 1000));
    CHECK(wait_ge_for(&a.ndone, 1, 1000));
    check_ended(&a, SX_EUNAVAIL, &ua, false); /* a read, asking: not sent again */
    check_ended(&b, SX_EUNAVAIL, &ub, false);
    check_ended(&c, SX_EUNAVAIL, &uc, true);
    check_ended(&d, SX_EUNAVAIL, &ud, true);
    CHECK_INT(get_int(&e.ndone), 0); /* not asking: waits for a connection */
    net_peer_close(p);               /* fails it */
    CHECK_INT(get_int(&e.ndone), 1);
    pcall_free(&a, 1);
    pcall_free(&b, 1);
    pcall_free(&c, 1);
    pcall_free(&d, 1);
    pcall_free(&e, 1);

    /* deadlines: the sent call and the one queued behind it say which they
     * were; a second of silence before the first expires: the connection
     * is dead, and the one queued behind (a later deadline) is not sent on
     * it but fails unsent when it closes */
    for (int dead = 0; dead < 2; dead++) {
        reset_state();
        got = 0;
        p = NULL;
        CHECK_INT(link_listen(url, mute_frame, NULL, &got, 0, &mute), 0);
        CHECK_INT(net_peer_open_link(url, 1, &p), 0);
        if (mute == NULL || p == NULL) {
            net_peer_close(p);
            link_listener_close(mute);
            return;
        }
        for (int waited = 0; waited < WAIT_MS && !net_peer_connected(p); waited += 10)
            usleep(10 * 1000);
        submit_asking(p, &a, true, 20, dead ? 1100 : 300, &ua);
        CHECK(wait_ge(&got, 1));
        submit_asking(p, &b, true, 21, dead ? WAIT_MS : 300, &ub);
        CHECK(wait_ge_for(&a.ndone, 1, 3000));
        CHECK(wait_ge_for(&b.ndone, 1, 3000));
        check_ended(&a, SX_ETIMEDOUT, &ua, false);
        check_ended(&b, dead ? SX_EUNAVAIL : SX_ETIMEDOUT, &ub, true);
        usleep(100 * 1000);
        CHECK_INT(get_int(&got), 1); /* b never went out */
        net_peer_close(p);
        link_listener_close(mute);
        mute = NULL;
        pcall_free(&a, 1);
        pcall_free(&b, 1);
    }
}

static void restart(const char *url, net_server **srv, const net_server_opts *o)
{
    net_peer *p = NULL;
    pcall held, later;

    reset_state();
    CHECK_INT(net_peer_open_link(url, 2, &p), 0);
    if (p == NULL)
        return;
    many_calls(p, false); /* connected */
    CHECK(net_peer_connected(p));
    reset_state();
    pcall_init_t(&held, MSG_DELETE, "gate1", 1);
    pcall_submit(p, &held);
    CHECK(wait_ge(&g_gate_waiting[1], 1));
    set_int(&g_gate_open[1], 1); /* lets the stop finish the job in hand */
    net_server_stop(*srv);
    *srv = NULL;
    CHECK(wait_done(1));
    pthread_mutex_lock(&g_mu);
    /* answered before the stop closed the link, or failed by the loss */
    CHECK(held.err == SX_EUNAVAIL || (held.err == 0 && held.resp != NULL));
    pthread_mutex_unlock(&g_mu);

    /* down: a call waits (its deadline is long) until a server is back */
    pcall_init(&later, "echo", 77);
    pcall_submit(p, &later);
    CHECK_INT(later.submit_rc, 0);
    CHECK_INT(net_server_open_link(url, o, handler, NULL, srv), 0);
    CHECK(wait_done(2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(later.err, 0);
    CHECK(later.resp != NULL && is_echo(later.resp, later.resp_n, 77));
    pthread_mutex_unlock(&g_mu);
    CHECK(net_peer_connected(p));
    net_peer_close(p);
    pcall_free(&held, 1);
    pcall_free(&later, 1);
}

int main(void)
{
    char dirbuf[256];
    char url[128], furl[128], turl[64];
    const char *base = nettest_setup("lpeer_test", dirbuf, sizeof(dirbuf));
    net_server_opts wo = { .workers = NWORKERS, .quick = quick_get };
    net_server_opts fo = { .workers = 2, .fibers = 16, .quick = quick_get };
    net_server *srv = NULL, *srvf = NULL, *srvt = NULL;
    net_peer *p = NULL, *pf = NULL, *pt = NULL;

    if (base == NULL)
        return 1;
    snprintf(url, sizeof(url), "ipc://%s/srv.sock", base);
    snprintf(furl, sizeof(furl), "ipc://%s/srvf.sock", base);
    if (net_server_open_link(url, &wo, handler, NULL, &srv) != 0 ||
        net_server_open_link(furl, &fo, handler, NULL, &srvf) != 0 ||
        net_peer_open_link(url, 1, &p) != 0 || net_peer_open_link(furl, NET_PEER_ALONE, &pf) != 0) {
        fprintf(stderr, "lpeer_test: setup failed\n");
        return 1;
    }
    many_calls(p, true);
    err_and_big(p);
    timeout_call(p);
    silent_connection(p);
    window(p);
    many_calls(pf, true);
    err_and_big(pf);
    timeout_call(pf);
    net_peer_close(pf);
    net_server_stop(srvf);

    /* over loopback TCP too (a port from the pid; the next one if taken) */
    for (int i = 0; i < 20 && srvt == NULL; i++) {
        snprintf(turl, sizeof(turl), "tcp://127.0.0.1:%d",
                 21000 + (getpid() * 11 + i * 173) % 29000);
        if (net_server_open_link(turl, &wo, handler, NULL, &srvt) != 0)
            srvt = NULL;
    }
    CHECK(srvt != NULL);
    if (srvt != NULL && net_peer_open_link(turl, 4, &pt) == 0) {
        many_calls(pt, true);
        err_and_big(pt);
        net_peer_close(pt);
    }
    net_server_stop(srvt);

    restart(url, &srv, &wo);
    snprintf(furl, sizeof(furl), "ipc://%s/lost.sock", base);
    lost_connection(furl, &wo);
    snprintf(furl, sizeof(furl), "ipc://%s/asking.sock", base);
    asking_unsent(furl);
    net_peer_close(p);
    reset_state();
    net_server_stop(srv);
    CHECK_INT(get_int(&g_gate_timeouts), 0);
    nettest_teardown(base);
    return CHECK_DONE();
}
