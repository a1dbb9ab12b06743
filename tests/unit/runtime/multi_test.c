/*
 * multi_test.c — MULTI frames end to end over real nng sockets: net_peer
 * (proto/runtime/peer.c) coalescing concurrent calls into MULTI frames, and
 * net_server (proto/runtime/server.c) splitting them into jobs and joining the
 * replies. The servers run nettest_util's handler (echo the key, wait on a
 * gate, fail with a chosen code, answer ~6 MiB, record quick frames, by
 * the table name); its relay ("proxy") logs the frames a peer really
 * sends. Deferred replies are defer_test.c's.
 *
 * Covered:
 *   1. coalescing: max_frames 1, first call held by a gate, 49 more from
 *      several threads ride ONE MULTI frame; every call gets its own reply;
 *      net_call_all over an idle peer sends one MULTI (a solo job beside);
 *      net_peer_submit_n sends one frame; a solo call passes a held one;
 *   1c. a carrier whose reply to a lone call finds nothing queued is idle
 *      before the call's callback runs (two calls made there leave as two
 *      plain frames, the first at once, not together once the callback
 *      returns); with calls queued, the callback's call joins them in the
 *      next frame;
 *   2. order and errors: a MULTI mixing successes and error replies (and a
 *      handler's own SX_ETOOBIG) answers each call with its own frame;
 *   3. raw REQ socket: MULTI of 3 in order, empty MULTI, malformed and
 *      truncated MULTI (error reply), nested MULTI (SX_EPROTO for that frame
 *      only, its siblings answered);
 *   4. oversize: 4 replies of 6 MiB in one MULTI exceed SX_MAX_FRAME, the
 *      server marks the largest SX_ETOOBIG and the peer resends them alone;
 *      every call gets its full reply;
 *   5. quick predicate (net_server_start_q): quick frames of a MULTI run in
 *      turn on one thread and are answered in order, mixed with others;
 *   6. net_peer_close with plain frames, a MULTI frame or a solo call in
 *      flight and calls queued: every done callback runs exactly once with
 *      an error, no hang, the server keeps serving;
 *   2-4 again against a server running requests as fibers (net_server_open).
 *   6b. net_peer_close racing with frames in every phase: each done exactly
 *      once (MULTI_NETTEST_CLOSE_RACE=0 skips it).
 *   7. timeouts run from submission: calls queued behind a frame the server
 *      holds fail with SX_ETIMEDOUT at their own deadline (not a whole
 *      timeout after the held frame's), each exactly once; one with a
 *      shorter timeout than the held frame's fails first, never sent.
 * Links test_support (tests/lib/nettest_util.h).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "nettest_util.h"
#include <nng/supplemental/util/platform.h>

static int g_closed; /* the close thread returned; under g_mu */

/* Called by reset_state with g_mu held. */
void nettest_reset_local(void)
{
    g_closed = 0;
}

/* ---- 1. coalescing ---- */

#define CO_THREADS 5
#define CO_PER 10
#define CO_N (CO_THREADS * CO_PER)

typedef struct co_arg {
    net_peer *p;
    pcall *calls;
} co_arg;

static void *co_submit(void *arg)
{
    co_arg *a = arg;

    for (int i = 0; i < CO_PER; i++)
        pcall_submit(a->p, &a->calls[i]);
    return NULL;
}

static void test_coalescing(const char *px_url, proxy *px)
{
    nng_socket sock;
    net_peer *p;
    pcall calls[CO_N];
    pthread_t th[CO_THREADS];
    co_arg args[CO_THREADS];
    net_job jobs[20];
    uint8_t *reqs[20];

    reset_state();
    proxy_reset(px);
    p = peer_open(px_url, 1, &sock);
    for (int i = 0; i < CO_N; i++)
        pcall_init(&calls[i], "gate0", i);
    for (int t = 0; t < CO_THREADS; t++) {
        args[t].p = p;
        args[t].calls = &calls[t * CO_PER];
        CHECK(pthread_create(&th[t], NULL, co_submit, &args[t]) == 0);
    }
    for (int t = 0; t < CO_THREADS; t++)
        pthread_join(th[t], NULL);
    for (int i = 0; i < CO_N; i++)
        CHECK_INT(calls[i].submit_rc, 0);
    /* the one carrier is held by the first call: everything else queues */
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    CHECK_INT(get_int(&px->nframes), 1);
    CHECK_INT(get_int(&g_finished), 0);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, CO_N));

    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < CO_N; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
        CHECK(is_echo(calls[i].resp, calls[i].resp_n, calls[i].id));
    }
    CHECK_INT(g_runs[K_GATE0], CO_N);
    /* one plain frame, then ONE MULTI with all 49 queued calls */
    CHECK_INT(px->nframes, 2);
    CHECK_INT(px->inner[0], 0);
    CHECK_INT(px->inner[1], CO_N - 1);
    CHECK_INT(px->failed, 0);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, CO_N);
    peer_done(p, sock);

    /* net_call_all over an idle peer: its calls leave together, in one
     * MULTI frame; a solo job goes alone beside it */
    reset_state();
    proxy_reset(px);
    p = peer_open(px_url, 1, &sock);
    memset(jobs, 0, sizeof(jobs));
    for (int i = 0; i < 20; i++) {
        reqs[i] = make_req(i == 7 ? "err" : "echo", 100 + i, &jobs[i].req_n);
        jobs[i].req = reqs[i];
        jobs[i].peer = p;
    }
    CHECK_INT(net_call_all(jobs, 20, WAIT_MS), 0);
    for (int i = 0; i < 20; i++) {
        CHECK_INT(jobs[i].err, 0);
        if (i == 7)
            CHECK(is_err(jobs[i].resp, jobs[i].resp_n, MSG_GET, err_of(107), "err k107"));
        else
            CHECK(is_echo(jobs[i].resp, jobs[i].resp_n, 100 + i));
        free(jobs[i].resp);
    }
    CHECK_INT(get_int(&px->nframes), 1);
    CHECK_INT(get_int(&px->inner[0]), 20);
    proxy_reset(px);
    jobs[3].solo = true;
    CHECK_INT(net_call_all(jobs, 20, WAIT_MS), 0);
    for (int i = 0; i < 20; i++) {
        CHECK_INT(jobs[i].err, 0);
        if (i != 7)
            CHECK(is_echo(jobs[i].resp, jobs[i].resp_n, 100 + i));
        free(jobs[i].resp);
        free(reqs[i]);
    }
    pthread_mutex_lock(&g_mu);
    CHECK_INT(px->nframes, 2); /* the solo call alone, the 19 others together */
    CHECK((px->inner[0] == 0 && px->inner[1] == 19) || (px->inner[0] == 19 && px->inner[1] == 0));
    CHECK_INT(g_runs[K_ECHO], 2 * 19);
    pthread_mutex_unlock(&g_mu);
    peer_done(p, sock);
}

/* ---- 1b. net_peer_submit_n and solo calls ---- */

static void test_submit_n_solo(const char *px_url, const char *srv_url, proxy *px)
{
    nng_socket sock;
    net_peer *p;
    pcall calls[12];
    net_peer_call pc[8];

    /* n calls on an idle peer: one MULTI frame */
    reset_state();
    proxy_reset(px);
    p = peer_open(px_url, 1, &sock);
    for (int i = 0; i < 8; i++) {
        pcall_init(&calls[i], "echo", 200 + i);
        pc[i].req = calls[i].req;
        pc[i].n = calls[i].req_n;
        pc[i].done = pcall_done;
        pc[i].arg = &calls[i];
        pc[i].unsent = NULL;
    }
    CHECK_INT(net_peer_submit_n(p, pc, 8, WAIT_MS), 0);
    CHECK(wait_ge(&g_finished, 8));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < 8; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
        CHECK(is_echo(calls[i].resp, calls[i].resp_n, 200 + i));
    }
    CHECK_INT(px->nframes, 1);
    CHECK_INT(px->inner[0], 8);
    pthread_mutex_unlock(&g_mu);
    CHECK_INT(net_peer_submit_n(p, pc, 0, WAIT_MS), 0);
    pcall_free(calls, 8);
    peer_done(p, sock);

    /* a solo call does not wait for the busy context (straight to the
     * server: the relay answers one frame at a time) */
    reset_state();
    p = peer_open(srv_url, 1, &sock);
    pcall_init(&calls[0], "gate0", 300);
    pcall_init(&calls[1], "echo", 301);
    pcall_init(&calls[2], "echo", 302);
    pcall_init(&calls[3], "err", 303);
    pcall_submit(p, &calls[0]);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    pcall_submit(p, &calls[1]); /* queued behind the held context */
    calls[2].submit_rc = net_peer_submit_solo(p, calls[2].req, calls[2].req_n, WAIT_MS, pcall_done,
                                              &calls[2]);
    CHECK(wait_ge(&g_finished, 1));
    calls[3].submit_rc = net_peer_submit_solo(p, calls[3].req, calls[3].req_n, WAIT_MS, pcall_done,
                                              &calls[3]);
    CHECK(wait_ge(&g_finished, 2));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(calls[0].ndone, 0); /* still held */
    CHECK_INT(calls[1].ndone, 0); /* still queued */
    CHECK_INT(calls[2].ndone, 1);
    CHECK_INT(calls[2].err, 0);
    CHECK(is_echo(calls[2].resp, calls[2].resp_n, 302));
    CHECK_INT(calls[3].ndone, 1); /* a second solo call: also at once */
    CHECK_INT(calls[3].err, 0);
    CHECK(is_err(calls[3].resp, calls[3].resp_n, MSG_GET, err_of(303), "err k303"));
    pthread_mutex_unlock(&g_mu);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, 4));
    pthread_mutex_lock(&g_mu);
    check_calls_ok(calls, 4);
    CHECK(is_echo(calls[0].resp, calls[0].resp_n, 300));
    CHECK(is_echo(calls[1].resp, calls[1].resp_n, 301));
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, 4);
    peer_done(p, sock);
}

/* ---- 1c. when a carrier comes back: before or after its callbacks ---- */

/* A call whose done callback submits further calls (next[0..nnext)) on
 * the same peer, one after another, and returns: it never waits for the
 * network, since nng may run it on a thread that network progress needs
 * (waiting there for the server to see a call would stall this test under
 * load). A chained call may
 * be answered before the submit that sent it has returned its code to
 * the callback, so a test reads the codes once the callback has returned
 * (returned, g_mu-guarded). */
typedef struct chain {
    pcall *self;
    pcall *next[2];
    int nnext;
    net_peer *p;
    int returned;
} chain;

static void chain_done(void *arg, int err, const uint8_t *resp, size_t n)
{
    chain *c = arg;

    pcall_done(c->self, err, resp, n);
    for (int i = 0; i < c->nnext; i++)
        pcall_submit(c->p, c->next[i]);
    set_int(&c->returned, 1);
}

static void test_carrier_return(const char *px_url, proxy *px)
{
    nng_socket sock;
    net_peer *p;
    pcall calls[4];
    chain ch;

    /* Nothing queued when a lone call's reply comes: the one carrier is
     * idle before the call's callback runs, so the first call made there
     * goes out at once, alone, and the second, made while the first is in
     * flight, follows alone too. Were the carrier still held by the
     * callback, both would wait for it and leave together as one MULTI. */
    reset_state();
    proxy_reset(px);
    p = peer_open(px_url, 1, &sock);
    pcall_init(&calls[0], "echo", 400);
    pcall_init(&calls[1], "echo", 401);
    pcall_init(&calls[2], "echo", 402);
    ch = (chain){ .self = &calls[0], .next = { &calls[1], &calls[2] }, .nnext = 2, .p = p };
    calls[0].submit_rc = net_peer_submit(p, calls[0].req, calls[0].req_n, WAIT_MS, chain_done, &ch);
    CHECK(wait_ge(&g_finished, 3));
    CHECK(wait_ge(&ch.returned, 1));
    pthread_mutex_lock(&g_mu);
    check_calls_ok(calls, 3);
    for (int i = 0; i < 3; i++)
        CHECK(is_echo(calls[i].resp, calls[i].resp_n, 400 + i));
    CHECK_INT(px->nframes, 3);
    CHECK_INT(px->inner[0], 0);
    CHECK_INT(px->inner[1], 0); /* the first chained call alone, plain */
    CHECK_INT(px->inner[2], 0); /* and the second after it */
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, 3);
    peer_done(p, sock);

    /* Calls queued when a reply comes: its callback runs first, and the
     * call it makes joins the queued ones in the next frame. */
    reset_state();
    proxy_reset(px);
    p = peer_open(px_url, 1, &sock);
    pcall_init(&calls[0], "gate0", 410);
    pcall_init(&calls[1], "echo", 411);
    pcall_init(&calls[2], "echo", 412);
    pcall_init(&calls[3], "echo", 413);
    ch = (chain){ .self = &calls[0], .next = { &calls[3] }, .nnext = 1, .p = p };
    calls[0].submit_rc = net_peer_submit(p, calls[0].req, calls[0].req_n, WAIT_MS, chain_done, &ch);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    pcall_submit(p, &calls[1]); /* queued behind the held carrier */
    pcall_submit(p, &calls[2]);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, 4));
    CHECK(wait_ge(&ch.returned, 1));
    pthread_mutex_lock(&g_mu);
    check_calls_ok(calls, 4);
    CHECK(is_echo(calls[0].resp, calls[0].resp_n, 410));
    for (int i = 1; i < 4; i++)
        CHECK(is_echo(calls[i].resp, calls[i].resp_n, 410 + i));
    CHECK_INT(px->nframes, 2);
    CHECK_INT(px->inner[0], 0);
    CHECK_INT(px->inner[1], 3); /* 411, 412 and the callback's 413 */
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, 4);
    peer_done(p, sock);
}

/* ---- 2. order and errors in one MULTI ---- */

#define OE_N 22

static void test_order_errors(const char *px_url, proxy *px)
{
    nng_socket sock;
    net_peer *p;
    pcall calls[OE_N];
    char msg[64];

    reset_state();
    proxy_reset(px);
    p = peer_open(px_url, 1, &sock);
    pcall_init(&calls[0], "gate0", 0);
    for (int i = 1; i < OE_N - 1; i++)
        pcall_init(&calls[i], i % 2 ? "echo" : "err", i);
    pcall_init(&calls[OE_N - 1], "toobig", OE_N - 1);
    pcall_submit(p, &calls[0]);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    for (int i = 1; i < OE_N; i++)
        pcall_submit(p, &calls[i]);
    for (int i = 0; i < OE_N; i++)
        CHECK_INT(calls[i].submit_rc, 0);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, OE_N));

    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < OE_N; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
    }
    CHECK(is_echo(calls[0].resp, calls[0].resp_n, 0));
    for (int i = 1; i < OE_N - 1; i++) {
        if (i % 2) {
            CHECK(is_echo(calls[i].resp, calls[i].resp_n, i));
        } else {
            snprintf(msg, sizeof(msg), "err k%d", i);
            CHECK(is_err(calls[i].resp, calls[i].resp_n, MSG_GET, err_of(i), msg));
        }
    }
    /* the handler's own SX_ETOOBIG reaches the caller (after a solo resend) */
    CHECK(is_err(calls[OE_N - 1].resp, calls[OE_N - 1].resp_n, MSG_GET, SX_ETOOBIG,
                 "handler says too big"));
    CHECK(px->nframes >= 2);
    CHECK_INT(px->inner[0], 0);
    CHECK_INT(px->inner[1], OE_N - 1);
    CHECK_INT(g_runs[K_ECHO], (OE_N - 2 + 1) / 2);
    CHECK_INT(g_runs[K_ERR], (OE_N - 2) / 2);
    if (g_runs[K_TOOBIG] != 1)
        printf("note: a request whose handler answers SX_ETOOBIG inside a MULTI ran %d "
               "times (the peer resends it alone)\n",
               g_runs[K_TOOBIG]);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, OE_N);
    peer_done(p, sock);
}

/* ---- 3. raw REQ socket ---- */

/* The error code of reply frame r..n of type t (must be a reply of t), or -1. */
static long reply_code(const uint8_t *r, size_t n, msg_type t)
{
    mp_cur c = mp_cur_make(r, n);
    uint32_t cnt;
    uint64_t ver, type, err;

    if (mp_read_array(&c, &cnt) != 0 || cnt < 3 || mp_read_u64(&c, &ver) != 0 ||
        mp_read_u64(&c, &type) != 0 || mp_read_u64(&c, &err) != 0 || ver != PROTO_VERSION ||
        type != ((uint64_t)t | MSG_REPLY))
        return -1;
    return (long)err;
}

static void test_raw(const char *srv_url)
{
    nng_socket s;
    uint8_t *g[3], *inner, *r, *m;
    size_t gn[3], inner_n, rn = 0, len = 0;
    mp_span f[3];
    msg_MULTI_rep rep;
    mp_buf b;

    reset_state();
    CHECK_INT(net_dial(srv_url, &s), 0);
    for (int i = 0; i < 3; i++) {
        g[i] = make_req("echo", 10 + i, &gn[i]);
        f[i].p = g[i];
        f[i].n = gn[i];
    }

    /* three frames: three replies, in order */
    r = raw_multi(s, f, 3, &rep);
    if (r != NULL) {
        for (uint32_t i = 0; i < 3; i++)
            CHECK(is_echo(rep.frames.v[i].p, rep.frames.v[i].n, 10 + (int)i));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    CHECK_INT(get_int(&g_runs[K_ECHO]), 3);

    /* empty: an empty MULTI reply */
    r = raw_multi(s, f, 0, &rep);
    if (r != NULL) {
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }

    /* malformed: frames is not an array */
    mp_buf_init(&b);
    mp_put_array(&b, 3);
    mp_put_u64(&b, PROTO_VERSION);
    mp_put_u64(&b, MSG_MULTI);
    mp_put_cstr(&b, "not an array");
    r = raw_call(s, (const uint8_t *)b.sb.data, b.sb.size, &rn);
    if (r != NULL) {
        CHECK(reply_code(r, rn, MSG_MULTI) > 0);
        CHECK(is_err(r, rn, MSG_MULTI, SX_EPROTO, NULL));
        free(r);
    }
    mp_buf_free(&b);

    /* malformed: an inner frame is not a bin */
    mp_buf_init(&b);
    mp_put_array(&b, 3);
    mp_put_u64(&b, PROTO_VERSION);
    mp_put_u64(&b, MSG_MULTI);
    mp_put_array(&b, 2);
    mp_put_bin(&b, g[0], gn[0]);
    mp_put_u64(&b, 5);
    r = raw_call(s, (const uint8_t *)b.sb.data, b.sb.size, &rn);
    if (r != NULL) {
        CHECK(reply_code(r, rn, MSG_MULTI) > 0);
        free(r);
    }
    mp_buf_free(&b);

    /* truncated: a valid MULTI of 3 cut short inside its last frame */
    m = make_multi(f, 3, &len);
    r = raw_call(s, m, len - 3, &rn);
    if (r != NULL) {
        CHECK(reply_code(r, rn, MSG_MULTI) > 0);
        free(r);
    }
    free(m);
    CHECK_INT(get_int(&g_runs[K_ECHO]), 3); /* nothing of those ran */

    /* nested: that frame alone is refused with SX_EPROTO */
    inner = make_multi(&f[1], 1, &inner_n);
    {
        mp_span nf[3] = { f[0], { inner, inner_n }, f[2] };
        r = raw_multi(s, nf, 3, &rep);
    }
    if (r != NULL) {
        CHECK(is_echo(rep.frames.v[0].p, rep.frames.v[0].n, 10));
        CHECK_INT(reply_code(rep.frames.v[1].p, rep.frames.v[1].n, MSG_MULTI), SX_EPROTO);
        CHECK(is_echo(rep.frames.v[2].p, rep.frames.v[2].n, 12));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    free(inner);
    CHECK_INT(get_int(&g_runs[K_ECHO]), 5); /* 3 + the nested MULTI's siblings */

    /* a plain request still works on the same socket */
    r = raw_call(s, g[1], gn[1], &rn);
    if (r != NULL) {
        CHECK(is_echo(r, rn, 11));
        free(r);
    }
    CHECK_INT(get_int(&g_runs[K_BAD]), 0);
    for (int i = 0; i < 3; i++)
        free(g[i]);
    nng_close(s);
}

/* ---- 4. oversize replies in one MULTI ---- */

#define BIG_N 4

static void test_oversize(const char *px_url, proxy *px)
{
    nng_socket sock;
    net_peer *p;
    pcall calls[1 + BIG_N];

    reset_state();
    proxy_reset(px);
    p = peer_open(px_url, 1, &sock);
    pcall_init(&calls[0], "gate0", 0);
    for (int i = 1; i <= BIG_N; i++)
        pcall_init(&calls[i], "big", i);
    pcall_submit(p, &calls[0]);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    for (int i = 1; i <= BIG_N; i++)
        pcall_submit(p, &calls[i]);
    for (int i = 0; i <= BIG_N; i++)
        CHECK_INT(calls[i].submit_rc, 0);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, 1 + BIG_N));

    pthread_mutex_lock(&g_mu);
    CHECK_INT(calls[0].err, 0);
    CHECK(is_echo(calls[0].resp, calls[0].resp_n, 0));
    for (int i = 1; i <= BIG_N; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
        CHECK(calls[i].resp_n > BIG_SIZE);
        CHECK(is_big(calls[i].resp, calls[i].resp_n, i));
    }
    /* 4 x 6 MiB do not fit 16 MiB: two are refused SX_ETOOBIG in the MULTI
     * and resent alone, one frame each */
    CHECK_INT(px->nframes, 4);
    CHECK_INT(px->inner[0], 0);
    CHECK_INT(px->inner[1], BIG_N);
    CHECK_INT(px->inner[2], 0);
    CHECK_INT(px->inner[3], 0);
    CHECK_INT(px->failed, 0);
    CHECK_INT(g_runs[K_BIG], BIG_N + 2);
    pthread_mutex_unlock(&g_mu);
    pcall_free(calls, 1 + BIG_N);
    peer_done(p, sock);
}

/* ---- 5. quick frames ---- */

#define QK_N 30

static void check_quick_one_thread(int want)
{
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_quick_n, want);
    CHECK_INT(g_quick_max, 1);
    for (int i = 1; i < g_quick_n; i++)
        CHECK(pthread_equal(g_quick_thr[i], g_quick_thr[0]));
    pthread_mutex_unlock(&g_mu);
}

static void test_quick(const char *srvq_url, const char *pxq_url, proxy *pxq)
{
    nng_socket s, sock;
    uint8_t *fr[11], *r;
    size_t frn[11];
    mp_span f[8];
    msg_MULTI_rep rep;
    net_peer *p;
    pcall calls[1 + QK_N];

    /* raw: 8 quick frames, then quick and other frames mixed */
    reset_state();
    CHECK_INT(net_dial(srvq_url, &s), 0);
    for (int i = 0; i < 8; i++)
        fr[i] = make_req("quick", 20 + i, &frn[i]);
    for (int i = 0; i < 8; i++) {
        f[i].p = fr[i];
        f[i].n = frn[i];
    }
    r = raw_multi(s, f, 8, &rep);
    if (r != NULL) {
        for (uint32_t i = 0; i < 8; i++)
            CHECK(is_echo(rep.frames.v[i].p, rep.frames.v[i].n, 20 + (int)i));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    check_quick_one_thread(8);

    reset_state();
    {
        mp_buf b;
        uint8_t *ping = NULL;
        size_t ping_n = 0;
        msg_PING_req pq;

        memset(&pq, 0, sizeof(pq));
        mp_buf_init(&b);
        CHECK_INT(msg_encode_req(MSG_PING, &pq, &b), 0);
        CHECK_INT(mp_buf_take(&b, &ping, &ping_n), 0);
        mp_buf_free(&b);
        fr[8] = ping;
        frn[8] = ping_n;
    }
    fr[9] = make_req("err", 29, &frn[9]);
    fr[10] = make_req("quick", 31, &frn[10]);
    {
        /* quick, ping, quick, err (a quick type too), ping, quick, quick */
        mp_span mix[7] = { { fr[0], frn[0] }, { fr[8], frn[8] }, { fr[1], frn[1] },
                           { fr[9], frn[9] }, { fr[8], frn[8] }, { fr[10], frn[10] },
                           { fr[2], frn[2] } };
        r = raw_multi(s, mix, 7, &rep);
    }
    if (r != NULL) {
        msg_PING_rep pr;

        CHECK(is_echo(rep.frames.v[0].p, rep.frames.v[0].n, 20));
        CHECK_INT(msg_decode_rep(MSG_PING, rep.frames.v[1].p, rep.frames.v[1].n, &pr, NULL, 0), 0);
        CHECK(mp_span_eq_cstr(pr.role, "test"));
        msg_free_rep(MSG_PING, &pr);
        CHECK(is_echo(rep.frames.v[2].p, rep.frames.v[2].n, 21));
        CHECK(is_err(rep.frames.v[3].p, rep.frames.v[3].n, MSG_GET, err_of(29), "err k29"));
        CHECK_INT(reply_code(rep.frames.v[4].p, rep.frames.v[4].n, MSG_PING), 0);
        CHECK(is_echo(rep.frames.v[5].p, rep.frames.v[5].n, 31));
        CHECK(is_echo(rep.frames.v[6].p, rep.frames.v[6].n, 22));
        msg_free_rep(MSG_MULTI, &rep);
        free(r);
    }
    check_quick_one_thread(4);
    CHECK_INT(get_int(&g_runs[K_PING]), 2);
    for (int i = 0; i < 11; i++)
        free(fr[i]);
    nng_close(s);

    /* through a peer: the queued quick calls ride one MULTI */
    reset_state();
    proxy_reset(pxq);
    p = peer_open(pxq_url, 1, &sock);
    pcall_init_t(&calls[0], MSG_DELETE, "gate0", 0); /* not quick: may wait */
    for (int i = 1; i <= QK_N; i++)
        pcall_init(&calls[i], "quick", i);
    pcall_submit(p, &calls[0]);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    for (int i = 1; i <= QK_N; i++)
        pcall_submit(p, &calls[i]);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, 1 + QK_N));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i <= QK_N; i++) {
        CHECK_INT(calls[i].submit_rc, 0);
        CHECK_INT(calls[i].ndone, 1);
        CHECK_INT(calls[i].err, 0);
        if (i > 0)
            CHECK(is_echo(calls[i].resp, calls[i].resp_n, i));
    }
    CHECK(is_del_echo(calls[0].resp, calls[0].resp_n, 0));
    CHECK_INT(pxq->nframes, 2);
    CHECK_INT(pxq->inner[1], QK_N);
    pthread_mutex_unlock(&g_mu);
    check_quick_one_thread(QK_N);
    pcall_free(calls, 1 + QK_N);
    peer_done(p, sock);
}

/* ---- 6. net_peer_close with calls in flight ---- */

static void *close_main(void *arg)
{
    net_peer_close(arg);
    set_int(&g_closed, 1);
    return NULL;
}

/* Closes p on a thread; fails the run (exits) if that does not return. */
static void close_with_deadline(net_peer *p)
{
    pthread_t th;

    CHECK(pthread_create(&th, NULL, close_main, p) == 0);
    if (!wait_ge(&g_closed, 1)) {
        fprintf(stderr, "%s:%d: net_peer_close hangs with calls in flight\n", __FILE__, __LINE__);
        exit(1);
    }
    pthread_join(th, NULL);
}

#define CL_N 10

static void test_close(const char *srv_url)
{
    nng_socket sock, s;
    net_peer *p;
    pcall calls[CL_N];
    uint8_t *f, *r;
    size_t fn, rn = 0;

    /* two plain frames held by the handler, eight calls queued */
    reset_state();
    p = peer_open(srv_url, 2, &sock);
    for (int i = 0; i < CL_N; i++)
        pcall_init(&calls[i], "gate0", i);
    for (int i = 0; i < CL_N; i++)
        pcall_submit(p, &calls[i]);
    for (int i = 0; i < CL_N; i++)
        CHECK_INT(calls[i].submit_rc, 0);
    CHECK(wait_ge(&g_gate_waiting[0], 2));
    CHECK_INT(get_int(&g_finished), 0);
    close_with_deadline(p);
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_finished, CL_N);
    for (int i = 0; i < CL_N; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK(calls[i].err != 0);
        CHECK(calls[i].resp == NULL);
        if (i >= 2)
            CHECK_INT(calls[i].err, SX_EUNAVAIL);
    }
    pthread_mutex_unlock(&g_mu);
    /* the socket goes before the server answers: with nng 1.5.2, nng_close
     * of a REQ socket can hang for good when a reply for a closed context
     * arrives meanwhile) */
    nng_close(sock);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_le(&g_gate_waiting[0], 0));
    CHECK_INT(get_int(&g_finished), CL_N); /* nothing ran twice */
    pcall_free(calls, CL_N);

    /* a MULTI frame in flight (its frames held), three calls queued */
    reset_state();
    p = peer_open(srv_url, 1, &sock);
    pcall_init(&calls[0], "gate0", 0);
    for (int i = 1; i < CL_N; i++)
        pcall_init(&calls[i], "gate1", i);
    pcall_submit(p, &calls[0]);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    for (int i = 1; i <= 6; i++)
        pcall_submit(p, &calls[i]);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_ge(&g_finished, 1));
    /* the MULTI of calls 1..6 is in: its frames hold every worker */
    CHECK(wait_ge(&g_gate_waiting[1], NWORKERS));
    for (int i = 7; i < CL_N; i++)
        pcall_submit(p, &calls[i]);
    for (int i = 0; i < CL_N; i++)
        CHECK_INT(calls[i].submit_rc, 0);
    close_with_deadline(p);
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_finished, CL_N);
    CHECK_INT(calls[0].ndone, 1);
    CHECK_INT(calls[0].err, 0);
    CHECK(is_echo(calls[0].resp, calls[0].resp_n, 0));
    for (int i = 1; i < CL_N; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK(calls[i].err != 0);
        if (i >= 7)
            CHECK_INT(calls[i].err, SX_EUNAVAIL);
    }
    pthread_mutex_unlock(&g_mu);
    nng_close(sock);
    set_int(&g_gate_open[1], 1);
    CHECK(wait_ge(&g_runs[K_GATE1], 6));
    CHECK(wait_le(&g_gate_waiting[1], 0));
    CHECK_INT(get_int(&g_finished), CL_N);
    pcall_free(calls, CL_N);

    /* a solo call in flight beside a held frame and queued calls */
    reset_state();
    p = peer_open(srv_url, 1, &sock);
    pcall_init(&calls[0], "gate0", 0);
    pcall_init(&calls[1], "gate1", 1);
    for (int i = 2; i < 5; i++)
        pcall_init(&calls[i], "echo", i);
    pcall_submit(p, &calls[0]);
    calls[1].submit_rc = net_peer_submit_solo(p, calls[1].req, calls[1].req_n, WAIT_MS, pcall_done,
                                              &calls[1]);
    for (int i = 2; i < 5; i++)
        pcall_submit(p, &calls[i]);
    for (int i = 0; i < 5; i++)
        CHECK_INT(calls[i].submit_rc, 0);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    CHECK(wait_ge(&g_gate_waiting[1], 1));
    close_with_deadline(p);
    pthread_mutex_lock(&g_mu);
    CHECK_INT(g_finished, 5);
    for (int i = 0; i < 5; i++) {
        CHECK_INT(calls[i].ndone, 1);
        CHECK(calls[i].err != 0);
        if (i >= 2)
            CHECK_INT(calls[i].err, SX_EUNAVAIL);
    }
    pthread_mutex_unlock(&g_mu);
    nng_close(sock);
    set_int(&g_gate_open[0], 1);
    set_int(&g_gate_open[1], 1);
    CHECK(wait_le(&g_gate_waiting[0], 0));
    CHECK(wait_le(&g_gate_waiting[1], 0));
    CHECK_INT(get_int(&g_finished), 5);
    pcall_free(calls, 5);

    /* the server still answers */
    CHECK_INT(net_dial(srv_url, &s), 0);
    f = make_req("echo", 77, &fn);
    r = raw_call(s, f, fn, &rn);
    CHECK(is_echo(r, rn, 77));
    free(r);
    free(f);
    nng_close(s);
}

/* ---- 6b. net_peer_close racing with frames in flight (opt-in) ---- */

#define RACE_ROUNDS 400
#define RACE_MAX 32

/* Closes fresh peers on sock right after submitting (some calls solo), so
 * that the close meets frames in every phase; every done must run exactly
 * once. Leaves sock open: the server may still answer (nng 1.5.2 can hang
 * closing a REQ socket while a reply for a closed context arrives). */
static void test_close_race(nng_socket sock)
{
    pcall calls[RACE_MAX];
    int lost = 0, twice = 0;

    reset_state();
    for (int r = 0; r < RACE_ROUNDS; r++) {
        net_peer *p = NULL;
        int n = 1 + r % RACE_MAX;

        CHECK_INT(net_peer_open(sock, 1 + r % 3, &p), 0);
        if (p == NULL)
            return;
        for (int i = 0; i < n; i++) {
            pcall_init(&calls[i], "echo", i);
            if (i % 7 == 3)
                calls[i].submit_rc = net_peer_submit_solo(p, calls[i].req, calls[i].req_n, WAIT_MS,
                                                          pcall_done, &calls[i]);
            else
                pcall_submit(p, &calls[i]);
        }
        close_with_deadline(p);
        set_int(&g_closed, 0);
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < n; i++) {
            CHECK_INT(calls[i].submit_rc, 0);
            lost += calls[i].ndone == 0;
            twice += calls[i].ndone > 1;
            if (calls[i].ndone == 1 && calls[i].err == 0)
                CHECK(is_echo(calls[i].resp, calls[i].resp_n, i));
        }
        pthread_mutex_unlock(&g_mu);
        pcall_free(calls, n);
    }
    if (lost != 0 || twice != 0)
        fprintf(stderr, "close race: %d done callbacks never ran, %d ran twice\n", lost, twice);
    CHECK_INT(lost, 0);
    CHECK_INT(twice, 0);
}

/* ---- main ---- */

/* ---- 7. timeouts run from submission ---- */

#define TO_MS 1000

/* A peer call and when its done callback first ran (under g_mu). */
typedef struct tcall {
    pcall c; /* first: pcall_done gets &t->c */
    nng_time at;
} tcall;

static void tcall_done(void *arg, int err, const uint8_t *resp, size_t n)
{
    tcall *t = arg;
    nng_time now = nng_clock();

    pthread_mutex_lock(&g_mu);
    if (t->at == 0)
        t->at = now;
    pthread_mutex_unlock(&g_mu);
    pcall_done(&t->c, err, resp, n);
}

static void test_timeouts(const char *srv_url)
{
    nng_socket sock;
    net_peer *p;
    tcall t[4];
    nng_time t0;

    /* one carrier: call 0 is held at the gate, calls 1 and 2 queue behind
     * it with the same TO_MS, call 3 with TO_MS / 2. Before deadlines ran
     * from submission, the queued calls waited for call 0 to time out and
     * then a whole timeout more; call 3 now fails at its own deadline by
     * the peer's timer, never sent. */
    reset_state();
    memset(t, 0, sizeof(t));
    p = peer_open(srv_url, 1, &sock);
    for (int i = 0; i < 4; i++)
        pcall_init_t(&t[i].c, MSG_DELETE, "gate0", i);
    t[0].c.submit_rc = net_peer_submit(p, t[0].c.req, t[0].c.req_n, TO_MS, tcall_done, &t[0]);
    CHECK(wait_ge(&g_gate_waiting[0], 1));
    t0 = nng_clock();
    for (int i = 1; i < 4; i++)
        t[i].c.submit_rc = net_peer_submit(p, t[i].c.req, t[i].c.req_n, i == 3 ? TO_MS / 2 : TO_MS,
                                           tcall_done, &t[i]);
    CHECK(wait_ge(&g_finished, 1));
    pthread_mutex_lock(&g_mu);
    CHECK_INT(t[3].c.ndone, 1); /* the short one first */
    CHECK_INT(t[0].c.ndone, 0);
    CHECK_INT(g_runs[K_GATE0], 1); /* only call 0 reached the server */
    CHECK_INT(g_gate_waiting[0], 1);
    pthread_mutex_unlock(&g_mu);
    CHECK(wait_ge(&g_finished, 4));
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < 4; i++) {
        CHECK_INT(t[i].c.submit_rc, 0);
        CHECK_INT(t[i].c.ndone, 1);
        CHECK_INT(t[i].c.err, SX_ETIMEDOUT);
    }
    for (int i = 1; i < 4; i++) {
        int want = i == 3 ? TO_MS / 2 : TO_MS;
        int took = (int)(t[i].at - t0);

        if (took < want - 5 || took > want + TO_MS / 2)
            fprintf(stderr, "queued call %d timed out after %d ms (timeout %d ms)\n", i, took,
                    want);
        CHECK(took >= want - 5);         /* not before its deadline */
        CHECK(took <= want + TO_MS / 2); /* nor a whole timeout late */
    }
    pthread_mutex_unlock(&g_mu);
    /* the socket goes before the server answers (see test_close) */
    nng_close(sock);
    close_with_deadline(p);
    set_int(&g_gate_open[0], 1);
    CHECK(wait_le(&g_gate_waiting[0], 0));
    CHECK_INT(get_int(&g_finished), 4); /* nothing completed twice */
    for (int i = 0; i < 4; i++)
        pcall_free(&t[i].c, 1);
}

int main(void)
{
    char dirbuf[256];
    char srv_url[128], srvq_url[128], srvf_url[128], px_url[128], pxq_url[128], pxf_url[128];
    const char *base = nettest_setup("multi_test", dirbuf, sizeof(dirbuf));
    nng_socket srv_sock, srvq_sock, srvf_sock, race_sock;
    const char *race = getenv("MULTI_NETTEST_CLOSE_RACE");
    bool do_race = race == NULL || strcmp(race, "0") != 0;
    net_server *srv = NULL, *srvq = NULL, *srvf = NULL;
    net_server_opts fo = { .workers = 2, .fibers = 16 };
    proxy px, pxq, pxf;

    if (base == NULL)
        return 1;
    snprintf(srv_url, sizeof(srv_url), "ipc://%s/srv.sock", base);
    snprintf(srvq_url, sizeof(srvq_url), "ipc://%s/srvq.sock", base);
    snprintf(px_url, sizeof(px_url), "ipc://%s/px.sock", base);
    snprintf(pxq_url, sizeof(pxq_url), "ipc://%s/pxq.sock", base);
    snprintf(srvf_url, sizeof(srvf_url), "ipc://%s/srvf.sock", base);
    snprintf(pxf_url, sizeof(pxf_url), "ipc://%s/pxf.sock", base);

    if (net_listen(srv_url, &srv_sock) != 0 ||
        net_server_start(srv_sock, NWORKERS, handler, NULL, &srv) != 0 ||
        net_listen(srvq_url, &srvq_sock) != 0 ||
        net_server_start_q(srvq_sock, NWORKERS, handler, quick_get, NULL, &srvq) != 0 ||
        net_listen(srvf_url, &srvf_sock) != 0 ||
        net_server_open(srvf_sock, &fo, handler, NULL, &srvf) != 0 ||
        proxy_start(&px, px_url, srv_url) != 0 || proxy_start(&pxq, pxq_url, srvq_url) != 0 ||
        proxy_start(&pxf, pxf_url, srvf_url) != 0) {
        fprintf(stderr, "multi_test: setup failed\n");
        return 1;
    }

    test_coalescing(px_url, &px);
    test_submit_n_solo(px_url, srv_url, &px);
    test_carrier_return(px_url, &px);
    test_order_errors(px_url, &px);
    test_raw(srv_url);
    test_oversize(px_url, &px);
    test_quick(srvq_url, pxq_url, &pxq);
    test_close(srv_url);
    test_timeouts(srv_url);
    /* the same MULTI handling on a server running requests as fibers */
    test_raw(srvf_url);
    test_order_errors(pxf_url, &pxf);
    test_oversize(pxf_url, &pxf);
    /* On unless MULTI_NETTEST_CLOSE_RACE=0. */
    if (do_race) {
        CHECK_INT(net_dial(srv_url, &race_sock), 0);
        test_close_race(race_sock);
    }

    reset_state();
    proxy_stop(&px);
    proxy_stop(&pxq);
    proxy_stop(&pxf);
    net_server_stop(srv);
    net_server_stop(srvq);
    net_server_stop(srvf);
    if (do_race)
        nng_close(race_sock); /* the server is gone: no reply can arrive now */
    CHECK_INT(get_int(&g_gate_timeouts), 0);
    CHECK_INT(get_int(&g_runs[K_BAD]), 0);
    nettest_teardown(base);
    return CHECK_DONE();
}
