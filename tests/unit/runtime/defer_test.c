/*
 * defer_test.c — deferred replies end to end over real nng sockets:
 * net_server_opts.defer and net_reply_send (proto/runtime/server.c), on a thread
 * server and a fiber server, both with GET quick. Requests the defer
 * function declines run nettest_util's handler (echo the key, wait on a
 * gate, fail with a chosen code, by the table name); its relay ("proxy")
 * logs the frames a peer really sends. The defer function (dfn) hands some
 * DELETEs to a completer thread (which answers them when let go, newest
 * first), answers others itself before returning, and declines the rest.
 *
 * Covered (7 in the sections below):
 *   a. a taken DELETE is answered by the completer (SX_EEXIST "deferred
 *      k<id>"), never by the handler; held, its caller waits while a
 *      declined request beside it is answered; PING and other tables
 *      are declined (the handler answers), a GET is never offered;
 *   b. declined by content (odd key ids): answered by workers while the
 *      taken ones are held, each call its own reply;
 *   c. one MULTI (through a relay: one frame) mixing taken frames
 *      answered newest first, frames answered inside the defer function,
 *      quick, declined and failing frames: no reply while any is held,
 *      every call its own reply; the last answer comes from the
 *      completer, or (held_worker) from a worker still running after it;
 *   d. net_reply_send inside the defer function before it returns: a
 *      plain frame, MULTIs of only such frames (1 and 5), and mixed;
 *   e. net_server_stop with taken requests held (plain frames and in a
 *      MULTI): it returns only after the completer answered them all
 *      (sequence numbers), and the callers get those replies, also with
 *      the plain frames on one connection (replies queued behind one
 *      another must still leave before the socket closes);
 *   the defer function gets the server's arg and request bytes that are
 *   still intact when the completer answers (ASan runs check the rest).
 * Links test_support (tests/lib/nettest_util.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nettest_util.h"

/* ---- this program's state: guarded by g_mu (but the atomics), changes signal g_cv ---- */

/* what the defer function took, and the completer thread that answers it */
typedef struct dreq {
    net_reply *r;
    msg_type t;
    int id;
    const uint8_t *p; /* the request: valid until answered */
    size_t n;
} dreq;

#define DQ_MAX 256
static dreq g_dq[DQ_MAX]; /* held by the completer, oldest first */
static int g_dq_n;
static int g_offered[K_N]; /* defer function calls per kind */
static int g_taken;        /* handed to the completer */
static int g_declined;     /* declined: run by the handler */
static int g_dsync;        /* answered inside the defer function */
static int g_answered;     /* completer answers (after net_reply_send) */
static int g_defer_bad;    /* wrong arg/type/bytes, encode failure, out not emptied */
static int g_comp_hold;    /* the completer answers nothing while set */
static int g_comp_quit;
static int g_comp_late; /* answers begun after net_server_stop returned */
static int g_stop_called, g_stop_returned;
static atomic_int g_seq;        /* orders the events below */
static atomic_int g_answer_seq; /* when the completer's last answer began */
static atomic_int g_stop_seq;   /* when net_server_stop returned */
static int g_dfn_arg;           /* the server arg the defer function must get */

/* Called by reset_state with g_mu held. */
void nettest_reset_local(void)
{
    CHECK_INT(g_dq_n, 0); /* no deferred request left unanswered */
    memset(g_offered, 0, sizeof(g_offered));
    g_taken = g_declined = g_dsync = g_answered = g_defer_bad = 0;
    g_comp_hold = g_comp_late = 0;
    g_stop_called = g_stop_returned = 0;
    atomic_store(&g_seq, 0);
    atomic_store(&g_answer_seq, 0);
    atomic_store(&g_stop_seq, 0);
}

/* ---- 7. deferred replies (net_server_opts.defer, net_reply_send) ---- */

/* The defer function of the servers below (dfn) hands DELETE "defer", and
 * DELETE "maybe" with an even key id, to the completer thread; answers
 * DELETE "dsync" itself with net_reply_send before it returns; declines
 * everything else (odd "maybe", "echo", "err", gates, PING), which the
 * handler then runs. GET is quick on these servers, so a GET is never
 * offered. The completer answers "deferred k<id>" and dfn "sync k<id>",
 * both SX_EEXIST errors, which the handler never sends: a reply tells who
 * answered, and g_runs[K_DEFER] / g_runs[K_DSYNC] count handler runs that
 * must not happen. */

/* Decodes GET or DELETE request p..n: its type, kind (or -1) and key id
 * (or -1). */
static int req_kind_id(const uint8_t *p, size_t n, msg_type *t, int *id)
{
    int is_reply = 0, kind = -1;
    mp_span table, key;

    *id = -1;
    if (msg_peek(p, n, t, &is_reply) != 0 || is_reply)
        return -1;
    if (*t == MSG_DELETE) {
        msg_DELETE_req d;
        if (msg_decode_req(MSG_DELETE, p, n, &d) != 0)
            return -1;
        table = d.table;
        key = d.key;
        msg_free_req(MSG_DELETE, &d);
    } else if (*t == MSG_GET) {
        msg_GET_req g;
        if (msg_decode_req(MSG_GET, p, n, &g) != 0)
            return -1;
        table = g.table;
        key = g.key;
        msg_free_req(MSG_GET, &g);
    } else {
        return -1;
    }
    for (int k = 0; k < (int)(sizeof(kind_names) / sizeof(kind_names[0])); k++)
        if (mp_span_eq_cstr(table, kind_names[k]))
            kind = k;
    *id = key_id(key);
    return kind;
}

static void note_bad(int bad)
{
    if (!bad)
        return;
    pthread_mutex_lock(&g_mu);
    g_defer_bad += bad;
    pthread_mutex_unlock(&g_mu);
}

static bool dfn(void *arg, msg_type t, const uint8_t *p, size_t n, net_reply *r)
{
    msg_type rt = MSG_MULTI;
    int id, kind = req_kind_id(p, n, &rt, &id);
    int bad = arg != &g_dfn_arg || (kind >= 0 && rt != t);

    pthread_mutex_lock(&g_mu);
    g_defer_bad += bad;
    g_offered[t == MSG_PING ? K_PING : kind >= 0 ? kind : K_BAD]++;
    pthread_mutex_unlock(&g_mu);
    if (kind == K_DSYNC && id >= 0) {
        /* answered before the defer function returns */
        mp_buf out;
        char msg[32];
        int rc;

        snprintf(msg, sizeof(msg), "sync k%d", id);
        mp_buf_init(&out);
        rc = msg_encode_err(t, SX_EEXIST, msg, &out);
        pthread_mutex_lock(&g_mu);
        g_dsync++;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        net_reply_send(r, &out);
        note_bad((rc != 0) + (out.sb.size != 0)); /* out is left empty */
        mp_buf_free(&out);
        return true;
    }
    if ((kind == K_DEFER || (kind == K_MAYBE && id % 2 == 0)) && id >= 0) {
        pthread_mutex_lock(&g_mu);
        if (g_dq_n < DQ_MAX) {
            dreq d = { r, t, id, p, n };
            g_dq[g_dq_n++] = d;
            g_taken++;
            pthread_cond_broadcast(&g_cv);
            pthread_mutex_unlock(&g_mu);
            return true;
        }
        g_defer_bad++; /* the test holds too many */
        pthread_mutex_unlock(&g_mu);
    }
    pthread_mutex_lock(&g_mu);
    g_declined++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return false;
}

/* Answers deferred request d from the completer thread. */
static void complete_one(const dreq *d)
{
    msg_type rt = MSG_MULTI;
    int id, kind = req_kind_id(d->p, d->n, &rt, &id); /* its bytes still there */
    int bad = !((kind == K_DEFER || kind == K_MAYBE) && id == d->id && rt == d->t);
    mp_buf out;
    char msg[32];
    int late = atomic_load(&g_stop_seq) != 0;

    snprintf(msg, sizeof(msg), "deferred k%d", d->id);
    mp_buf_init(&out);
    bad += msg_encode_err(d->t, SX_EEXIST, msg, &out) != 0;
    atomic_store(&g_answer_seq, atomic_fetch_add(&g_seq, 1) + 1);
    net_reply_send(d->r, &out);
    bad += out.sb.size != 0;
    mp_buf_free(&out);
    pthread_mutex_lock(&g_mu);
    g_defer_bad += bad;
    g_comp_late += late;
    g_answered++;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

/* The completer: while not held, takes every request dfn handed over and
 * answers them newest first (out of order); at quit, answers what is left
 * even when held. */
static void *completer_main(void *arg)
{
    static dreq batch[DQ_MAX];

    (void)arg;
    pthread_mutex_lock(&g_mu);
    for (;;) {
        while (!g_comp_quit && (g_comp_hold || g_dq_n == 0))
            pthread_cond_wait(&g_cv, &g_mu);
        int n = g_dq_n;
        if (n == 0)
            break; /* quit */
        memcpy(batch, g_dq, (size_t)n * sizeof(dreq));
        g_dq_n = 0;
        pthread_mutex_unlock(&g_mu);
        for (int i = n - 1; i >= 0; i--)
            complete_one(&batch[i]);
        pthread_mutex_lock(&g_mu);
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

static uint8_t *make_ping(size_t *n)
{
    mp_buf b;
    uint8_t *f = NULL;
    msg_PING_req pq;

    memset(&pq, 0, sizeof(pq));
    mp_buf_init(&b);
    if (msg_encode_req(MSG_PING, &pq, &b) != 0 || mp_buf_take(&b, &f, n) != 0) {
        fprintf(stderr, "make_ping: out of memory\n");
        exit(1);
    }
    mp_buf_free(&b);
    return f;
}

static bool is_deferred(const uint8_t *r, size_t n, msg_type t, int id)
{
    char msg[32];

    snprintf(msg, sizeof(msg), "deferred k%d", id);
    return is_err(r, n, t, SX_EEXIST, msg);
}

static bool is_dsync(const uint8_t *r, size_t n, msg_type t, int id)
{
    char msg[32];

    snprintf(msg, sizeof(msg), "sync k%d", id);
    return is_err(r, n, t, SX_EEXIST, msg);
}

/* Checks the defer function saw nothing wrong and the completer holds nothing. */
static void check_defer_clean(void)
{
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_defer_bad, 0);
    CHECK_INT(g_dq_n, 0);
    CHECK_INT(g_offered[K_BAD], 0);
    CHECK_INT(g_offered[K_QUICK], 0); /* GET is quick here: never offered */
    CHECK_INT(g_runs[K_DEFER], 0);
    CHECK_INT(g_runs[K_DSYNC], 0);
    CHECK_INT(g_comp_late, 0);
    pthread_mutex_unlock(&g_mu);
}

/* 7a. single deferred requests */
static void test_defer_single(const char *url)
{
    nng_socket s, sock;
    uint8_t *f, *r;
    size_t fn, rn = 0;
    net_peer *p;
    pcall calls[2];

    reset_state();
    CHECK_INT(net_dial(url, &s), 0);

    /* taken: the completer answers it, the handler never runs */
    f = make_req_t(MSG_DELETE, "defer", 1, &fn);
    r = raw_call(s, f, fn, &rn);
    CHECK(is_deferred(r, rn, MSG_DELETE, 1));
    free(r);
    free(f);
    CHECK(wait_ge(&g_answered, 1));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_offered[K_DEFER], 1);
    CHECK_INT(g_taken, 1);
    CHECK_INT(g_declined, 0);
    pthread_mutex_unlock(&g_mu);

    /* the same request for another table: declined, the handler answers */
    f = make_req_t(MSG_DELETE, "echo", 2, &fn);
    r = raw_call(s, f, fn, &rn);
    CHECK(is_del_echo(r, rn, 2));
    free(r);
    free(f);

    /* PING is offered too (not quick here), declined, the handler answers */
    f = make_ping(&fn);
    r = raw_call(s, f, fn, &rn);
    if (r != NULL) {
        msg_PING_rep pr;
        CHECK_INT(msg_decode_rep(MSG_PING, r, rn, &pr, NULL, 0), 0);
        CHECK(mp_span_eq_cstr(pr.role, "test"));
        msg_free_rep(MSG_PING, &pr);
    }
    free(r);
    free(f);

    /* GET is quick: never offered, even for table "defer" */
    f = make_req("defer", 3, &fn);
    r = raw_call(s, f, fn, &rn);
    CHECK(is_echo(r, rn, 3));
    free(r);
    free(f);
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_offered[K_DEFER], 1);
    CHECK_INT(g_offered[K_ECHO], 1);
    CHECK_INT(g_offered[K_PING], 1);
    CHECK_INT(g_declined, 2);
    CHECK_INT(g_runs[K_ECHO], 1);
    CHECK_INT(g_runs[K_PING], 1);
    CHECK_INT(g_runs[K_DEFER], 1); /* the quick GET */
    g_runs[K_DEFER] = 0;           /* check_defer_clean: no handler run of a DELETE */
    pthread_mutex_unlock(&g_mu);
    nng_close(s);

    /* held: no reply until the completer answers, on its own thread; a
     * declined request on the same socket meanwhile is answered */
    set_int(&g_comp_hold, 1);
    p = peer_open(url, 2, &sock);
    pcall_init_t(&calls[0], MSG_DELETE, "defer", 5);
    pcall_init_t(&calls[1], MSG_DELETE, "echo", 6);
    pcall_submit(p, &calls[0]);
    CHECK(wait_ge(&g_dq_n, 1));
    pcall_submit(p, &calls[1]);
    CHECK(wait_ge(&g_finished, 1));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(calls[0].submit_rc, 0);
    CHECK_INT(calls[1].submit_rc, 0);
    CHECK_INT(calls[0].ndone, 0); /* held by the completer */
    CHECK_INT(calls[1].ndone, 1);
    CHECK_INT(calls[1].err, 0);
    CHECK(is_del_echo(calls[1].resp, calls[1].resp_n, 6));
    pthread_mutex_unlock(&g_mu);
    set_int(&g_comp_hold, 0);
    CHECK(wait_ge(&g_finished, 2));
    CHECK(wait_ge(&g_answered, 2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(calls[0].ndone, 1);
    CHECK_INT(calls[0].err, 0);
    CHECK(is_deferred(calls[0].resp, calls[0].resp_n, MSG_DELETE, 5));
    CHECK_INT(g_taken, 2);
    CHECK_INT(g_runs[K_ECHO], 2);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, 2);
    peer_done(p, sock);
    check_defer_clean();
}

/* 7b. declined by content: "maybe" with an odd id runs on a worker */

/* A deferred request keeps its receive slot (one per worker on a thread
 * server) until answered: hold fewer than NWORKERS at once, or the server
 * receives nothing more. */
#define DC_N 6

static void test_defer_decline(const char *url)
{
    nng_socket s, sock;
    uint8_t *f, *r;
    size_t fn, rn = 0;
    net_peer *p;
    pcall calls[DC_N];

    reset_state();
    CHECK_INT(net_dial(url, &s), 0);
    for (int i = 0; i < DC_N; i++) {
        int id = 10 + i;
        f = make_req_t(MSG_DELETE, "maybe", id, &fn);
        r = raw_call(s, f, fn, &rn);
        if (id % 2 == 0)
            CHECK(is_deferred(r, rn, MSG_DELETE, id));
        else
            CHECK(is_del_echo(r, rn, id));
        free(r);
        free(f);
    }
    nng_close(s);
    CHECK(wait_ge(&g_answered, DC_N / 2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_offered[K_MAYBE], DC_N);
    CHECK_INT(g_taken, DC_N / 2);
    CHECK_INT(g_declined, DC_N / 2);
    CHECK_INT(g_runs[K_MAYBE], DC_N / 2);
    pthread_mutex_unlock(&g_mu);

    /* concurrently, the taken ones held: the declined ones are answered
     * meanwhile, the taken ones only once the completer answers */
    reset_state();
    set_int(&g_comp_hold, 1);
    p = peer_open(url, DC_N, &sock);
    for (int i = 0; i < DC_N; i++) {
        pcall_init_t(&calls[i], MSG_DELETE, "maybe", 20 + i);
        pcall_submit(p, &calls[i]);
    }
    CHECK(wait_ge(&g_dq_n, DC_N / 2));
    CHECK(wait_ge(&g_finished, DC_N / 2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_finished, DC_N / 2);
    for (int i = 0; i < DC_N; i++) {
        CHECK_INT(calls[i].submit_rc, 0);
        if (i % 2 == 0) {
            CHECK_INT(calls[i].ndone, 0);
        } else {
            CHECK_INT(calls[i].ndone, 1);
            CHECK_INT(calls[i].err, 0);
            CHECK(is_del_echo(calls[i].resp, calls[i].resp_n, 20 + i));
        }
    }
    pthread_mutex_unlock(&g_mu);
    set_int(&g_comp_hold, 0);
    CHECK(wait_ge(&g_finished, DC_N));
    CHECK(wait_ge(&g_answered, DC_N / 2));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < DC_N; i += 2) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
        CHECK(is_deferred(calls[i].resp, calls[i].resp_n, MSG_DELETE, 20 + i));
    }
    CHECK_INT(g_runs[K_MAYBE], DC_N / 2);
    CHECK_INT(g_taken, DC_N / 2);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, DC_N);
    peer_done(p, sock);
    check_defer_clean();
}

/* 7c. a MULTI mixing deferred (answered newest first), answered-in-defer,
 * quick, declined and failing frames; with held_worker, a declined frame
 * is still running when the completer has answered (the worker finishes
 * the MULTI), else the completer's last answer finishes it */

#define DM_M 32 /* mixed calls after the first */
#define DM_MAX (1 + DM_M + 1)

/* The kind of mixed call i (1..DM_M, its key id i) by i % 8. */
static int dm_kind(int i)
{
    static const int k[8] = { K_DEFER, K_MAYBE /* odd: declined */, K_QUICK, K_ECHO, K_DSYNC,
                              K_ERR,   K_MAYBE /* even: taken */,   K_DEFER };
    return k[i % 8];
}

static void test_defer_multi(const char *px_url, proxy *px, bool held_worker)
{
    nng_socket sock;
    net_peer *p;
    pcall calls[DM_MAX];
    int n = 1 + DM_M + (held_worker ? 1 : 0), ntaken = 0, nsync = 0, nrun[K_N];
    char msg[64];

    reset_state();
    proxy_reset(px);
    memset(nrun, 0, sizeof(nrun));
    set_int(&g_comp_hold, 1);
    p = peer_open(px_url, 1, &sock);
    pcall_init_t(&calls[0], MSG_DELETE, "gate0", 0);
    for (int i = 1; i <= DM_M; i++) {
        int k = dm_kind(i);
        pcall_init_t(&calls[i], k == K_QUICK ? MSG_GET : MSG_DELETE, kind_names[k], i);
        if (k == K_DEFER || (k == K_MAYBE && i % 2 == 0))
            ntaken++;
        else if (k == K_DSYNC)
            nsync++;
        else
            nrun[k]++;
    }
    if (held_worker)
        pcall_init_t(&calls[n - 1], MSG_DELETE, "gate1", n - 1);
    pcall_submit(p, &calls[0]);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    for (int i = 1; i < n; i++)
        pcall_submit(p, &calls[i]);
    for (int i = 0; i < n; i++)
        CHECK_INT(calls[i].submit_rc, 0);
    set_int(&g_gate_open[0], 1);

    /* the MULTI is in: its taken frames held, the others run */
    CHECK(wait_ge(&g_dq_n, ntaken));
    CHECK(wait_ge(&g_dsync, nsync));
    for (int k = 0; k < K_N; k++)
        if (nrun[k] > 0)
            CHECK(wait_ge(&g_runs[k], nrun[k]));
    if (held_worker)
        CHECK(wait_ge(&g_gate_waiting[1], 1));
    CHECK_INT(get_int(&g_finished), 1); /* only the first call: the MULTI waits */

    set_int(&g_comp_hold, 0);
    CHECK(wait_ge(&g_answered, ntaken));
    if (held_worker) {
        CHECK_INT(get_int(&g_finished), 1); /* its gate1 frame still runs */
        set_int(&g_gate_open[1], 1);
    }
    CHECK(wait_ge(&g_finished, n));

    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < n; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
    }
    CHECK(is_del_echo(calls[0].resp, calls[0].resp_n, 0));
    if (held_worker)
        CHECK(is_del_echo(calls[n - 1].resp, calls[n - 1].resp_n, n - 1));
    for (int i = 1; i <= DM_M; i++) {
        const uint8_t *r = calls[i].resp;
        size_t rn = calls[i].resp_n;
        switch (dm_kind(i)) {
        case K_DEFER: CHECK(is_deferred(r, rn, MSG_DELETE, i)); break;
        case K_MAYBE:
            CHECK(i % 2 == 0 ? is_deferred(r, rn, MSG_DELETE, i) : is_del_echo(r, rn, i));
            break;
        case K_QUICK: CHECK(is_echo(r, rn, i)); break;
        case K_ECHO: CHECK(is_del_echo(r, rn, i)); break;
        case K_DSYNC: CHECK(is_dsync(r, rn, MSG_DELETE, i)); break;
        case K_ERR:
            snprintf(msg, sizeof(msg), "err k%d", i);
            CHECK(is_err(r, rn, MSG_DELETE, err_of(i), msg));
            break;
        default: CHECK(0);
        }
    }
    /* one plain frame, then ONE MULTI with every other call */
    CHECK_INT(px->nframes, 2);
    CHECK_INT(px->inner[0], 0);
    CHECK_INT(px->inner[1], n - 1);
    CHECK_INT(px->failed, 0);
    CHECK_INT(g_taken, ntaken);
    CHECK_INT(g_dsync, nsync);
    for (int k = 0; k < K_N; k++)
        if (k != K_GATE0 && k != K_GATE1)
            CHECK_INT(g_runs[k], nrun[k]);
    CHECK_INT(g_runs[K_GATE1], held_worker ? 1 : 0);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, n);
    peer_done(p, sock);
    check_defer_clean();
}

/* 7d. net_reply_send inside the defer function, before it returns: single
 * frames, MULTI frames of only such frames (the last answer comes while the
 * MULTI is still being split), and mixed */
static void test_defer_sync(const char *url)
{
    nng_socket s;
    uint8_t *fr[16], *r;
    size_t frn[16], rn = 0;
    mp_span f[16];
    msg_MULTI_rep rep;

    reset_state();
    CHECK_INT(net_dial(url, &s), 0);
    fr[0] = make_req_t(MSG_DELETE, "dsync", 1, &frn[0]);
    r = raw_call(s, fr[0], frn[0], &rn);
    CHECK(is_dsync(r, rn, MSG_DELETE, 1));
    free(r);
    free(fr[0]);

    /* a MULTI of one, then of five, answered-in-defer frames */
    for (int i = 0; i < 5; i++) {
        fr[i] = make_req_t(MSG_DELETE, "dsync", 2 + i, &frn[i]);
        f[i].p = fr[i];
        f[i].n = frn[i];
    }
    r = raw_multi(s, f, 1, &rep);
    if (r != NULL) {
        CHECK(is_dsync(rep.frames.v[0].p, rep.frames.v[0].n, MSG_DELETE, 2));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    r = raw_multi(s, f, 5, &rep);
    if (r != NULL) {
        for (uint32_t i = 0; i < 5; i++)
            CHECK(is_dsync(rep.frames.v[i].p, rep.frames.v[i].n, MSG_DELETE, 2 + (int)i));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    for (int i = 0; i < 5; i++)
        free(fr[i]);

    /* mixed: sync, declined, quick, sync, deferred, sync, deferred, and a
     * quick frame last (its chain runs after the split) */
    fr[0] = make_req_t(MSG_DELETE, "dsync", 10, &frn[0]);
    fr[1] = make_req_t(MSG_DELETE, "echo", 11, &frn[1]);
    fr[2] = make_req("quick", 12, &frn[2]);
    fr[3] = make_req_t(MSG_DELETE, "dsync", 13, &frn[3]);
    fr[4] = make_req_t(MSG_DELETE, "defer", 14, &frn[4]);
    fr[5] = make_req_t(MSG_DELETE, "dsync", 15, &frn[5]);
    fr[6] = make_req_t(MSG_DELETE, "maybe", 16, &frn[6]);
    fr[7] = make_req("quick", 17, &frn[7]);
    for (int i = 0; i < 8; i++) {
        f[i].p = fr[i];
        f[i].n = frn[i];
    }
    r = raw_multi(s, f, 8, &rep);
    if (r != NULL) {
        CHECK(is_dsync(rep.frames.v[0].p, rep.frames.v[0].n, MSG_DELETE, 10));
        CHECK(is_del_echo(rep.frames.v[1].p, rep.frames.v[1].n, 11));
        CHECK(is_echo(rep.frames.v[2].p, rep.frames.v[2].n, 12));
        CHECK(is_dsync(rep.frames.v[3].p, rep.frames.v[3].n, MSG_DELETE, 13));
        CHECK(is_deferred(rep.frames.v[4].p, rep.frames.v[4].n, MSG_DELETE, 14));
        CHECK(is_dsync(rep.frames.v[5].p, rep.frames.v[5].n, MSG_DELETE, 15));
        CHECK(is_deferred(rep.frames.v[6].p, rep.frames.v[6].n, MSG_DELETE, 16));
        CHECK(is_echo(rep.frames.v[7].p, rep.frames.v[7].n, 17));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    /* quick frames then an answered-in-defer one last */
    {
        mp_span qf[3] = { f[2], f[7], f[5] };
        r = raw_multi(s, qf, 3, &rep);
    }
    if (r != NULL) {
        CHECK(is_echo(rep.frames.v[0].p, rep.frames.v[0].n, 12));
        CHECK(is_echo(rep.frames.v[1].p, rep.frames.v[1].n, 17));
        CHECK(is_dsync(rep.frames.v[2].p, rep.frames.v[2].n, MSG_DELETE, 15));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    for (int i = 0; i < 8; i++)
        free(fr[i]);
    nng_close(s);
    CHECK(wait_ge(&g_answered, 2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_dsync, 1 + 1 + 5 + 3 + 1);
    CHECK_INT(g_taken, 2);
    CHECK_INT(g_runs[K_ECHO], 1);
    CHECK_INT(g_runs[K_QUICK], 4);
    pthread_mutex_unlock(&g_mu);
    check_defer_clean();
}

/* 7e. net_server_stop with deferred requests unanswered: it must wait for
 * them (their replies go out on the live socket), in plain frames and in a
 * MULTI beside a worker-run, a quick and an answered-in-defer frame. The
 * plain frames come each on a connection of its own, or with same_pipe all
 * on one: their replies then queue in nng behind one another, and the stop
 * must let them leave (it waits for every started send) rather than cancel
 * them. */

#define DS_SINGLE 3
#define DS_MULTI 5

static void *stop_main(void *arg)
{
    set_int(&g_stop_called, 1);
    net_server_stop(arg);
    atomic_store(&g_stop_seq, atomic_fetch_add(&g_seq, 1) + 1);
    set_int(&g_stop_returned, 1);
    return NULL;
}

/* How long a stop that wrongly does not wait gets to show it (a bounded
 * wait for what must NOT happen; the test passes without it, but would not
 * notice such a stop as surely). */
#define STOP_EARLY_MS 100

static void test_defer_stop(const char *url, const net_server_opts *o, bool same_pipe)
{
    nng_socket ls, sa[DS_SINGLE], sb;
    net_server *srv = NULL;
    net_peer *pa[DS_SINGLE], *pb;
    pcall calls[DS_SINGLE + DS_MULTI];
    net_peer_call pc[DS_MULTI];
    pthread_t th;
    pcall *m = &calls[DS_SINGLE];

    reset_state();
    set_int(&g_comp_hold, 1);
    CHECK_INT(net_listen(url, &ls), 0);
    CHECK_INT(net_server_open(ls, o, handler, &g_dfn_arg, &srv), 0);
    if (srv == NULL)
        return;

    /* three plain frames, all taken */
    if (same_pipe)
        pa[0] = peer_open(url, DS_SINGLE, &sa[0]);
    for (int i = 0; i < DS_SINGLE; i++) {
        if (!same_pipe)
            pa[i] = peer_open(url, 1, &sa[i]);
        pcall_init_t(&calls[i], MSG_DELETE, "defer", i);
        pcall_submit(pa[same_pipe ? 0 : i], &calls[i]);
        CHECK_INT(calls[i].submit_rc, 0);
    }
    CHECK(wait_ge(&g_dq_n, DS_SINGLE));
    /* one MULTI: taken, declined, quick, taken, answered in defer */
    pb = peer_open(url, 1, &sb);
    pcall_init_t(&m[0], MSG_DELETE, "defer", 10);
    pcall_init_t(&m[1], MSG_DELETE, "echo", 11);
    pcall_init(&m[2], "quick", 12);
    pcall_init_t(&m[3], MSG_DELETE, "defer", 13);
    pcall_init_t(&m[4], MSG_DELETE, "dsync", 14);
    for (int i = 0; i < DS_MULTI; i++) {
        pc[i].req = m[i].req;
        pc[i].n = m[i].req_n;
        pc[i].done = pcall_done;
        pc[i].arg = &m[i];
        pc[i].unsent = NULL;
    }
    CHECK_INT(net_peer_submit_n(pb, pc, DS_MULTI, WAIT_MS), 0);
    CHECK(wait_ge(&g_dq_n, DS_SINGLE + 2));
    CHECK(wait_ge(&g_runs[K_ECHO], 1));
    CHECK(wait_ge(&g_runs[K_QUICK], 1));
    CHECK(wait_ge(&g_dsync, 1));
    CHECK_INT(get_int(&g_finished), 0);

    CHECK_INT(pthread_create(&th, NULL, stop_main, srv), 0);
    CHECK(wait_ge(&g_stop_called, 1));
    CHECK(!wait_ge_for(&g_stop_returned, 1, STOP_EARLY_MS));
    CHECK_INT(get_int(&g_answered), 0);
    set_int(&g_comp_hold, 0);
    if (!wait_ge(&g_stop_returned, 1)) {
        fprintf(stderr, "%s:%d: net_server_stop hangs with deferred requests answered\n", __FILE__,
                __LINE__);
        exit(1);
    }
    CHECK_INT(pthread_join(th, NULL), 0);
    CHECK(wait_ge(&g_answered, DS_SINGLE + 2));
    {
        int a = atomic_load(&g_answer_seq), st = atomic_load(&g_stop_seq);
        CHECK(a > 0);
        CHECK(a < st); /* every answer began before stop returned */
    }

    /* the replies went out before the socket closed */
    CHECK(wait_ge(&g_finished, DS_SINGLE + DS_MULTI));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < DS_SINGLE + DS_MULTI; i++) {
        CHECK_INT(calls[i].ndone, 1);
        if (calls[i].err != 0)
            fprintf(stderr, "error: net_server_stop on %s%s: the reply to k%d was lost (err %d)\n",
                    o->fibers > 0 ? "fibers" : "threads", same_pipe ? ", one connection" : "",
                    calls[i].id, calls[i].err);
        CHECK_INT(calls[i].err, 0);
    }
    for (int i = 0; i < DS_SINGLE; i++)
        CHECK(is_deferred(calls[i].resp, calls[i].resp_n, MSG_DELETE, i));
    CHECK(is_deferred(m[0].resp, m[0].resp_n, MSG_DELETE, 10));
    CHECK(is_del_echo(m[1].resp, m[1].resp_n, 11));
    CHECK(is_echo(m[2].resp, m[2].resp_n, 12));
    CHECK(is_deferred(m[3].resp, m[3].resp_n, MSG_DELETE, 13));
    CHECK(is_dsync(m[4].resp, m[4].resp_n, MSG_DELETE, 14));
    CHECK_INT(g_taken, DS_SINGLE + 2);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, DS_SINGLE + DS_MULTI);
    for (int i = 0; i < (same_pipe ? 1 : DS_SINGLE); i++)
        peer_done(pa[i], sa[i]);
    peer_done(pb, sb);
    check_defer_clean();
}

/* ---- main ---- */

int main(void)
{
    char dirbuf[256];
    char srvd_url[128], srvdf_url[128], pxd_url[128], pxdf_url[128], stop_url[128];
    const char *base = nettest_setup("defer_test", dirbuf, sizeof(dirbuf));
    net_server *srvd = NULL, *srvdf = NULL;
    net_server_opts d_o = { .workers = NWORKERS, .quick = quick_get, .defer = dfn };
    net_server_opts dfo = { .workers = 2, .fibers = 16, .quick = quick_get, .defer = dfn };
    nng_socket srvd_sock, srvdf_sock;
    pthread_t completer;
    proxy pxd, pxdf;

    if (base == NULL)
        return 1;
    snprintf(srvd_url, sizeof(srvd_url), "ipc://%s/srvd.sock", base);
    snprintf(srvdf_url, sizeof(srvdf_url), "ipc://%s/srvdf.sock", base);
    snprintf(pxd_url, sizeof(pxd_url), "ipc://%s/pxd.sock", base);
    snprintf(pxdf_url, sizeof(pxdf_url), "ipc://%s/pxdf.sock", base);
    snprintf(stop_url, sizeof(stop_url), "ipc://%s/stop.sock", base);

    if (net_listen(srvd_url, &srvd_sock) != 0 ||
        net_server_open(srvd_sock, &d_o, handler, &g_dfn_arg, &srvd) != 0 ||
        net_listen(srvdf_url, &srvdf_sock) != 0 ||
        net_server_open(srvdf_sock, &dfo, handler, &g_dfn_arg, &srvdf) != 0 ||
        proxy_start(&pxd, pxd_url, srvd_url) != 0 || proxy_start(&pxdf, pxdf_url, srvdf_url) != 0 ||
        pthread_create(&completer, NULL, completer_main, NULL) != 0) {
        fprintf(stderr, "defer_test: setup failed\n");
        return 1;
    }

    /* deferred replies, on threads and as fibers */
    test_defer_single(srvd_url);
    test_defer_decline(srvd_url);
    test_defer_multi(pxd_url, &pxd, false);
    test_defer_multi(pxd_url, &pxd, true);
    test_defer_sync(srvd_url);
    test_defer_stop(stop_url, &d_o, false);
    test_defer_stop(stop_url, &d_o, true);
    test_defer_single(srvdf_url);
    test_defer_decline(srvdf_url);
    test_defer_multi(pxdf_url, &pxdf, false);
    test_defer_multi(pxdf_url, &pxdf, true);
    test_defer_sync(srvdf_url);
    test_defer_stop(stop_url, &dfo, false);

    reset_state();
    proxy_stop(&pxd);
    proxy_stop(&pxdf);
    net_server_stop(srvd);
    net_server_stop(srvdf);
    set_int(&g_comp_quit, 1);
    CHECK_INT(pthread_join(completer, NULL), 0);
    check_defer_clean();
    CHECK_INT(get_int(&g_gate_timeouts), 0);
    CHECK_INT(get_int(&g_runs[K_BAD]), 0);
    nettest_teardown(base);
    return CHECK_DONE();
}
