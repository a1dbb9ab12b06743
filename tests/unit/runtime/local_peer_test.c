/*
 * local_peer_test.c — in-process calls: net_peer_open_local and
 * net_server_call_local (proto/runtime/peer.c, proto/runtime/server.c), the path a router
 * hosted by a storage node takes to that node. Each scenario runs on a
 * thread server and on a fiber server (GET quick; a defer function that
 * takes DELETEs of table "defer", held until the test answers them, and
 * answers those of table "dsync" before it returns); the servers also
 * listen on a socket, which the in-process calls never touch.
 *
 * Covered:
 *   a. a quick GET completes inside net_peer_submit, on the submitting
 *      thread, with the handler's answer;
 *   b. a DELETE runs on a worker: the submit returns while the handler
 *      waits on a gate (no completion yet), and completes once it opens;
 *      an error answer reaches the caller as the reply it is;
 *   c. a deferred DELETE is held with no completion until the daemon
 *      answers it (from this thread, later), then completes once with that
 *      answer; one answered inside the defer function completes inside the
 *      submit;
 *   d. net_peer_submit_n and net_peer_submit_solo: 24 mixed calls (quick,
 *      worker, deferred, failing) each complete exactly once with its own
 *      answer; the request bytes are only borrowed (ASan runs check they
 *      are not read after the completion, when the test frees them);
 *   e. a local peer says it is connected; net_peer_close frees it.
 * Links test_support (tests/lib/nettest_util.h). main() returns non-zero
 * on failure.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nettest_util.h"

/* ---- the defer function's state, guarded by g_mu ---- */

#define HELD_MAX 32
static net_reply *g_held[HELD_MAX]; /* taken "defer" DELETEs, by arrival */
static int g_held_id[HELD_MAX];
static int g_held_n;
static int g_dsync; /* answered inside the defer function */

void nettest_reset_local(void)
{
    CHECK_INT(g_held_n, 0); /* nothing left unanswered */
    g_dsync = 0;
}

/* The key id of DELETE p..n when its table is `table`, else -1. */
static int delete_id(const uint8_t *p, size_t n, const char *table)
{
    msg_DELETE_req d;
    int id = -1;

    if (msg_decode_req(MSG_DELETE, p, n, &d) == 0 && mp_span_eq_cstr(d.table, table))
        id = key_id(d.key);
    return id;
}

/* The answer the test gives a held request: SX_EEXIST "deferred k<id>". */
static void deferred_answer(int id, mp_buf *out)
{
    char msg[32];

    snprintf(msg, sizeof(msg), "deferred k%d", id);
    msg_encode_err(MSG_DELETE, SX_EEXIST, msg, out);
}

/* net_defer_fn: holds "defer" DELETEs, answers "dsync" ones at once,
 * declines the rest. */
static bool ln_defer(void *arg, msg_type t, const uint8_t *p, size_t n, net_reply *r)
{
    int id;

    (void)arg;
    if (t != MSG_DELETE)
        return false;
    if ((id = delete_id(p, n, "dsync")) >= 0) {
        mp_buf out;

        mp_buf_init(&out);
        deferred_answer(id, &out);
        net_reply_send(r, &out);
        pthread_mutex_lock(&g_mu);
        g_dsync++;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        return true;
    }
    if ((id = delete_id(p, n, "defer")) < 0)
        return false;
    pthread_mutex_lock(&g_mu);
    if (g_held_n == HELD_MAX) {
        pthread_mutex_unlock(&g_mu);
        return false;
    }
    g_held[g_held_n] = r;
    g_held_id[g_held_n++] = id;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return true;
}

/* Answers every held request, newest first. */
static void answer_held(void)
{
    for (;;) {
        net_reply *r;
        int id;
        mp_buf out;

        pthread_mutex_lock(&g_mu);
        if (g_held_n == 0) {
            pthread_mutex_unlock(&g_mu);
            return;
        }
        r = g_held[--g_held_n];
        id = g_held_id[g_held_n];
        pthread_mutex_unlock(&g_mu);
        mp_buf_init(&out);
        deferred_answer(id, &out);
        net_reply_send(r, &out);
    }
}

/* ndone of c, read under g_mu. */
static int ndone(const pcall *c)
{
    return get_int(&c->ndone);
}

/* a. a quick GET completes inside the submit, on this thread */
static void test_quick(net_peer *p)
{
    pcall c;

    reset_state();
    pcall_init(&c, "quick", 1);
    pcall_submit(p, &c);
    CHECK_INT(c.submit_rc, 0);
    CHECK_INT(ndone(&c), 1); /* before the submit returned */
    pthread_mutex_lock(&g_mu);
    CHECK_INT(c.err, 0);
    CHECK(is_echo(c.resp, c.resp_n, 1));
    CHECK_INT(g_quick_n, 1);
    CHECK(g_quick_n == 1 && pthread_equal(g_quick_thr[0], pthread_self()));
    pthread_mutex_unlock(&g_mu);
    pcall_free(&c, 1);
}

/* b. a worker's request completes after the submit; errors come back as
 * replies */
static void test_worker(net_peer *p)
{
    pcall c[2];

    reset_state();
    pcall_init_t(&c[0], MSG_DELETE, "gate0", 2);
    pcall_submit(p, &c[0]);
    CHECK_INT(c[0].submit_rc, 0);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    CHECK_INT(ndone(&c[0]), 0); /* held by the gate */
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, 1));
    pcall_init_t(&c[1], MSG_DELETE, "err", 3);
    pcall_submit(p, &c[1]);
    CHECK(wait_ge(&g_finished, 2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(c[0].ndone, 1);
    CHECK_INT(c[0].err, 0);
    CHECK(is_del_echo(c[0].resp, c[0].resp_n, 2));
    CHECK_INT(c[1].ndone, 1);
    CHECK_INT(c[1].err, 0);
    CHECK(is_err(c[1].resp, c[1].resp_n, MSG_DELETE, err_of(3), "err k3"));
    pthread_mutex_unlock(&g_mu);
    pcall_free(c, 2);
}

/* c. deferred requests: held until answered; answered inside the defer
 * function */
static void test_deferred(net_peer *p)
{
    pcall c[2];

    reset_state();
    pcall_init_t(&c[0], MSG_DELETE, "defer", 4);
    pcall_submit(p, &c[0]);
    CHECK_INT(c[0].submit_rc, 0);
    CHECK_INT(get_int(&g_held_n), 1); /* taken inside the submit */
    CHECK_INT(ndone(&c[0]), 0);
    answer_held();
    CHECK_INT(ndone(&c[0]), 1); /* answered on this thread */
    pcall_init_t(&c[1], MSG_DELETE, "dsync", 5);
    pcall_submit(p, &c[1]);
    CHECK_INT(ndone(&c[1]), 1);
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_dsync, 1);
    CHECK_INT(c[0].err, 0);
    CHECK(is_err(c[0].resp, c[0].resp_n, MSG_DELETE, SX_EEXIST, "deferred k4"));
    CHECK_INT(c[1].err, 0);
    CHECK(is_err(c[1].resp, c[1].resp_n, MSG_DELETE, SX_EEXIST, "deferred k5"));
    CHECK_INT(g_runs[K_DEFER] + g_runs[K_DSYNC], 0); /* never the handler */
    pthread_mutex_unlock(&g_mu);
    pcall_free(c, 2);
}

#define LN_MANY 24

/* d. many calls at once: each completes once, with its own answer */
static void test_many(net_peer *p)
{
    pcall c[LN_MANY];
    net_peer_call pc[LN_MANY];
    int solo = LN_MANY - 1, rc;

    reset_state();
    for (int i = 0; i < LN_MANY; i++) {
        static const char *const kinds[] = { "quick", "echo", "defer", "dsync", "err" };
        const char *k = kinds[i % 5];
        pcall_init_t(&c[i], strcmp(k, "quick") == 0 ? MSG_GET : MSG_DELETE, k, 100 + i);
        pc[i] = (net_peer_call){
            .req = c[i].req, .n = c[i].req_n, .done = pcall_done, .arg = &c[i]
        };
        c[i].submit_rc = 0;
    }
    rc = net_peer_submit_n(p, pc, solo, WAIT_MS);
    CHECK_INT(rc, 0);
    rc = net_peer_submit_solo(p, c[solo].req, c[solo].req_n, WAIT_MS, pcall_done, &c[solo]);
    CHECK_INT(rc, 0);
    int held = 0;
    for (int i = 0; i < LN_MANY; i++)
        held += i % 5 == 2;
    CHECK(wait_ge(&g_held_n, held));
    CHECK(wait_ge(&g_finished, LN_MANY - held));
    answer_held();
    CHECK(wait_ge(&g_finished, LN_MANY));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < LN_MANY; i++) {
        int id = 100 + i;
        char msg[32];

        CHECK_INT(c[i].ndone, 1);
        CHECK_INT(c[i].err, 0);
        switch (i % 5) {
        case 0: CHECK(is_echo(c[i].resp, c[i].resp_n, id)); break;
        case 1: CHECK(is_del_echo(c[i].resp, c[i].resp_n, id)); break;
        case 2:
        case 3:
            snprintf(msg, sizeof(msg), "deferred k%d", id);
            CHECK(is_err(c[i].resp, c[i].resp_n, MSG_DELETE, SX_EEXIST, msg));
            break;
        default:
            snprintf(msg, sizeof(msg), "err k%d", id);
            CHECK(is_err(c[i].resp, c[i].resp_n, MSG_DELETE, err_of(id), msg));
            break;
        }
    }
    pthread_mutex_unlock(&g_mu);
    pcall_free(c, LN_MANY);
}

/* Runs every scenario through a local peer on srv. */
static void run_all(net_server *srv)
{
    net_peer *p = NULL;

    CHECK_INT(net_peer_open_local(srv, &p), 0);
    if (p == NULL)
        return;
    CHECK(net_peer_connected(p));
    test_quick(p);
    test_worker(p);
    test_deferred(p);
    test_many(p);
    net_peer_close(p);
}

int main(void)
{
    char dirbuf[256];
    char t_url[128], f_url[128];
    const char *base = nettest_setup("local_peer_test", dirbuf, sizeof(dirbuf));
    net_server *st = NULL, *sf = NULL;
    net_server_opts to = { .workers = NWORKERS, .quick = quick_get, .defer = ln_defer };
    net_server_opts fo = { .workers = 2, .fibers = 16, .quick = quick_get, .defer = ln_defer };
    nng_socket ts, fs;

    if (base == NULL)
        return 1;
    snprintf(t_url, sizeof(t_url), "ipc://%s/t.sock", base);
    snprintf(f_url, sizeof(f_url), "ipc://%s/f.sock", base);
    if (net_listen(t_url, &ts) != 0 || net_server_open(ts, &to, handler, NULL, &st) != 0 ||
        net_listen(f_url, &fs) != 0 || net_server_open(fs, &fo, handler, NULL, &sf) != 0) {
        fprintf(stderr, "local_peer_test: setup failed\n");
        return 1;
    }
    run_all(st);
    run_all(sf);
    reset_state();
    net_server_stop(st);
    net_server_stop(sf);
    CHECK_INT(get_int(&g_runs[K_BAD]), 0);
    nettest_teardown(base);
    return CHECK_DONE();
}
