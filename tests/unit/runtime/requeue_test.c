/*
 * requeue_test.c — net_server_opts.defer_flush and net_reply_requeue
 * (proto/runtime/server.c) over real nng sockets, on a thread server and a fiber
 * server: the way the router gathers a frame's PUTs and hands back those
 * it will not answer itself (router/wcomb.c).
 *
 * The defer function takes DELETE "maybe" requests into a list of its
 * thread and declines everything else; the flush function records how many
 * the thread holds, checks it runs on the thread that took them, and hands
 * every one back with net_reply_requeue, so nettest_util's handler answers
 * them (its DELETE echo).
 *
 * Covered:
 *   a. a plain frame taken: one flush holding it; the handler's answer;
 *      a plain frame declined: no flush, the handler's answer;
 *   b. one MULTI of taken, declined and quick frames: exactly one flush,
 *      holding every taken frame of it, and every call its own answer in
 *      order; a MULTI with nothing taken: no flush;
 *   c. many callers at once through a peer (MULTIs formed by the peer):
 *      every call answered once, by the handler, and the flushes together
 *      held every taken request exactly once.
 * Links test_support (tests/lib/nettest_util.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nettest_util.h"

#define HELD_MAX 256
#define RQ_PEER_N 96

static __thread net_reply *tl_held[HELD_MAX];
static __thread int tl_nheld;
static __thread int tl_took; /* taken on this thread since its last flush */

static int g_flushes;           /* flush calls */
static int g_flush_sizes[1024]; /* requests each flush held, in turn */
static int g_requeued;          /* requests handed back */
static int g_flush_bad;         /* a flush holding nothing, or a wrong arg */
static int g_arg;               /* the server arg both callbacks must get */

void nettest_reset_local(void)
{
    g_flushes = 0;
    g_requeued = 0;
    memset(g_flush_sizes, 0, sizeof(g_flush_sizes));
}

static bool rq_defer(void *arg, msg_type t, const uint8_t *p, size_t n, net_reply *r)
{
    msg_DELETE_req d;
    bool take = false;

    if (arg != &g_arg)
        return false;
    if (t == MSG_DELETE && msg_decode_req(MSG_DELETE, p, n, &d) == 0) {
        take = mp_span_eq_cstr(d.table, "maybe") && tl_nheld < HELD_MAX;
        msg_free_req(MSG_DELETE, &d);
    }
    if (!take)
        return false;
    tl_held[tl_nheld++] = r;
    tl_took++;
    return true;
}

static void rq_flush(void *arg)
{
    int n = tl_nheld;

    pthread_mutex_lock(&g_mu);
    if (arg != &g_arg || n == 0 || tl_took != n)
        g_flush_bad++;
    if (g_flushes < (int)(sizeof(g_flush_sizes) / sizeof(g_flush_sizes[0])))
        g_flush_sizes[g_flushes] = n;
    g_flushes++;
    g_requeued += n;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    tl_nheld = 0;
    tl_took = 0;
    for (int i = 0; i < n; i++)
        net_reply_requeue(tl_held[i]);
}

/* a. plain frames */
static void test_plain(const char *url)
{
    nng_socket s;
    uint8_t *f, *r;
    size_t fn, rn = 0;

    reset_state();
    CHECK_INT(net_dial(url, &s), 0);
    f = make_req_t(MSG_DELETE, "maybe", 1, &fn);
    r = raw_call(s, f, fn, &rn);
    CHECK(is_del_echo(r, rn, 1));
    free(r);
    free(f);
    f = make_req_t(MSG_DELETE, "echo", 2, &fn);
    r = raw_call(s, f, fn, &rn);
    CHECK(is_del_echo(r, rn, 2));
    free(r);
    free(f);
    nng_close(s);
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_flushes, 1);
    CHECK_INT(g_flush_sizes[0], 1);
    CHECK_INT(g_requeued, 1);
    CHECK_INT(g_runs[K_MAYBE], 1);
    CHECK_INT(g_runs[K_ECHO], 1);
    pthread_mutex_unlock(&g_mu);
}

/* b. MULTI frames: taken (i % 3 == 0), declined DELETEs, quick GETs */
#define MB_N 12
static void test_multi(const char *url)
{
    nng_socket s;
    mp_span fr[MB_N];
    msg_MULTI_rep rep;
    uint8_t *r;

    reset_state();
    CHECK_INT(net_dial(url, &s), 0);
    for (int i = 0; i < MB_N; i++) {
        size_t n;
        const char *table = i % 3 == 0 ? "maybe" : "echo";
        uint8_t *p = make_req_t(i % 3 == 2 ? MSG_GET : MSG_DELETE, table, 100 + i, &n);
        fr[i] = (mp_span){ p, n };
    }
    r = raw_multi(s, fr, MB_N, &rep);
    if (r != NULL) {
        for (int i = 0; i < MB_N; i++) {
            if (i % 3 == 2)
                CHECK(is_echo(rep.frames.v[i].p, rep.frames.v[i].n, 100 + i));
            else
                CHECK(is_del_echo(rep.frames.v[i].p, rep.frames.v[i].n, 100 + i));
        }
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_flushes, 1);
    CHECK_INT(g_flush_sizes[0], MB_N / 3);
    CHECK_INT(g_runs[K_MAYBE], MB_N / 3);
    CHECK_INT(g_runs[K_ECHO], MB_N - MB_N / 3);
    pthread_mutex_unlock(&g_mu);
    /* nothing taken: no flush */
    r = raw_multi(s, fr + 1, 2, &rep);
    if (r != NULL) {
        CHECK(is_del_echo(rep.frames.v[0].p, rep.frames.v[0].n, 101));
        CHECK(is_echo(rep.frames.v[1].p, rep.frames.v[1].n, 102));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    CHECK_INT(get_int(&g_flushes), 1);
    for (int i = 0; i < MB_N; i++)
        free((void *)fr[i].p);
    nng_close(s);
}

/* c. many calls at once through a peer */
static void test_peer(const char *url)
{
    nng_socket sock;
    net_peer *p;
    pcall calls[RQ_PEER_N];

    reset_state();
    p = peer_open(url, 2, &sock);
    for (int i = 0; i < RQ_PEER_N; i++) {
        pcall_init_t(&calls[i], MSG_DELETE, i % 2 ? "maybe" : "echo", 200 + i);
        pcall_submit(p, &calls[i]);
    }
    CHECK(wait_ge(&g_finished, RQ_PEER_N));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < RQ_PEER_N; i++) {
        CHECK_INT(calls[i].submit_rc, 0);
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
        CHECK(is_del_echo(calls[i].resp, calls[i].resp_n, 200 + i));
    }
    CHECK_INT(g_requeued, RQ_PEER_N / 2);
    CHECK_INT(g_runs[K_MAYBE], RQ_PEER_N / 2);
    CHECK(g_flushes >= 1 && g_flushes <= RQ_PEER_N / 2);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, RQ_PEER_N);
    peer_done(p, sock);
}

int main(void)
{
    char dirbuf[256];
    char t_url[128], f_url[128];
    const char *base = nettest_setup("requeue_test", dirbuf, sizeof(dirbuf));
    net_server *st = NULL, *sf = NULL;
    net_server_opts to = {
        .workers = NWORKERS, .quick = quick_get, .defer = rq_defer, .defer_flush = rq_flush
    };
    net_server_opts fo = {
        .workers = 2, .fibers = 16, .quick = quick_get, .defer = rq_defer, .defer_flush = rq_flush
    };
    nng_socket ts, fs;

    if (base == NULL)
        return 1;
    snprintf(t_url, sizeof(t_url), "ipc://%s/t.sock", base);
    snprintf(f_url, sizeof(f_url), "ipc://%s/f.sock", base);
    if (net_listen(t_url, &ts) != 0 || net_server_open(ts, &to, handler, &g_arg, &st) != 0 ||
        net_listen(f_url, &fs) != 0 || net_server_open(fs, &fo, handler, &g_arg, &sf) != 0) {
        fprintf(stderr, "requeue_test: setup failed\n");
        return 1;
    }
    test_plain(t_url);
    test_multi(t_url);
    test_peer(t_url);
    test_plain(f_url);
    test_multi(f_url);
    test_peer(f_url);
    reset_state();
    net_server_stop(st);
    net_server_stop(sf);
    CHECK_INT(get_int(&g_flush_bad), 0);
    CHECK_INT(get_int(&g_runs[K_BAD]), 0);
    nettest_teardown(base);
    return CHECK_DONE();
}
