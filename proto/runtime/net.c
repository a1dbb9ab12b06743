/*
 * net.c — nng sockets, calls and the worker-pool server (see net.h).
 *
 * Calls use one REQ context per request, so many threads can share one
 * socket. The server is in server.c, coalesced calls in peer.c.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "net.h"
#include <nng/supplemental/util/platform.h>
#include "fiber.h"
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include "log.h"
#include "sx_errors.h"

int net_map_nng(int rv)
{
    switch (rv) {
    case 0: return 0;
    case NNG_ETIMEDOUT: return SX_ETIMEDOUT;
    case NNG_ENOMEM: return SX_ENOMEM;
    case NNG_ECLOSED:
    case NNG_ECONNREFUSED:
    case NNG_ECONNSHUT:
    case NNG_ECONNRESET:
    case NNG_ECONNABORTED:
    case NNG_EADDRINVAL: return SX_EUNAVAIL;
    default: return SX_ENET;
    }
}

int net_msg_copy(nng_msg **m, const void *p, size_t n)
{
    int rv = nng_msg_alloc(m, 0);

    if (rv != 0) {
        *m = NULL;
        return rv;
    }
    if ((rv = nng_msg_reserve(*m, n)) == 0)
        rv = nng_msg_append(*m, p, n);
    if (rv != 0) {
        nng_msg_free(*m);
        *m = NULL;
    }
    return rv;
}

int net_listen(const char *url, nng_socket *out)
{
    int rv = nng_rep0_open(out);

    if (rv != 0) {
        LOG_ERROR("rep socket: %s", nng_strerror(rv));
        return SX_ENET;
    }
    rv = nng_socket_set_size(*out, NNG_OPT_RECVMAXSZ, SX_MAX_FRAME);
    if (rv == 0)
        rv = nng_listen(*out, url, NULL, 0);
    if (rv != 0) {
        LOG_ERROR("listen %s: %s", url, nng_strerror(rv));
        nng_close(*out);
        return SX_ENET;
    }
    return 0;
}

int net_req_options(nng_socket s)
{
    int rv = nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, SX_MAX_FRAME);

    /* Callers own retries (writes must not be resent behind their back on
     * a timer); nng still resends when a pipe closes under a request. */
    if (rv == 0)
        rv = nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (rv == 0)
        rv = nng_socket_set_ms(s, NNG_OPT_RECONNMINT, 20);
    if (rv == 0)
        rv = nng_socket_set_ms(s, NNG_OPT_RECONNMAXT, 500);
    return rv;
}

int net_dial(const char *url, nng_socket *out)
{
    int rv = nng_req0_open(out);

    if (rv != 0) {
        LOG_ERROR("req socket: %s", nng_strerror(rv));
        return SX_ENET;
    }
    rv = net_req_options(*out);
    if (rv == 0)
        rv = nng_dial(*out, url, NULL, NNG_FLAG_NONBLOCK);
    if (rv != 0) { /* not logged: the client library's caller reports it */
        nng_close(*out);
        return SX_ENET;
    }
    return 0;
}

typedef struct call_state {
    nng_ctx ctx;
    nng_aio *aio;
    int open;
} call_state;

/* Peer calls of one net_call_all: counts what is still out; the last
 * sets done (which parks a fiber caller instead of its thread). */
typedef struct peer_wait {
    atomic_int left;
    fib_event done;
} peer_wait;

typedef struct peer_job {
    net_job *job;
    peer_wait *w;
} peer_job;

static void peer_job_done(void *arg, int err, const uint8_t *resp, size_t n)
{
    peer_job *pj = arg;
    net_job *j = pj->job;

    j->err = err;
    if (err == 0) {
        j->resp = malloc(n ? n : 1);
        if (j->resp == NULL) {
            j->err = SX_ENOMEM;
        } else {
            memcpy(j->resp, resp, n);
            j->resp_n = n;
        }
    }
    if (atomic_fetch_sub(&pj->w->left, 1) == 1)
        ev_set(&pj->w->done);
}

/* Job j's timeout: its own, else the call's. */
static int job_timeout(const net_job *j, int timeout_ms)
{
    return j->timeout_ms > 0 ? j->timeout_ms : timeout_ms;
}

/* Job j as a peer call completing into pj. */
static net_peer_call job_call(net_job *j, peer_job *pj)
{
    return (net_peer_call){ .req = j->req,
                            .n = j->req_n,
                            .done = peer_job_done,
                            .arg = pj,
                            .unsent = j->fail_unsent ? &j->unsent : NULL };
}

/* Starts every peer job, the jobs of one peer with the same timeout in one
 * net_peer_submit_n so that they can share a frame. A job that cannot
 * start completes at once with the error. */
static void submit_peers(net_job *jobs, peer_job *pj, int n, int timeout_ms)
{
    net_peer_call *calls = malloc((size_t)n * sizeof(*calls));
    bool *sent = calloc((size_t)n, sizeof(*sent));

    for (int i = 0; i < n; i++) {
        net_peer *peer = jobs[i].peer;
        int m = 0, rv, tmo = job_timeout(&jobs[i], timeout_ms);

        if (peer == NULL || (sent && sent[i]))
            continue;
        if (jobs[i].solo) {
            rv = net_peer_submit_solo(peer, jobs[i].req, jobs[i].req_n, tmo, peer_job_done, &pj[i]);
            if (rv != 0)
                peer_job_done(&pj[i], rv, NULL, 0);
            continue;
        }
        if (calls == NULL || sent == NULL) { /* no memory to group: one by one */
            net_peer_call one = job_call(&jobs[i], &pj[i]);
            rv = net_peer_submit_n(peer, &one, 1, tmo);
            if (rv != 0)
                peer_job_done(&pj[i], rv, NULL, 0);
            continue;
        }
        for (int k = i; k < n; k++) {
            if (jobs[k].peer != peer || jobs[k].solo || sent[k] ||
                job_timeout(&jobs[k], timeout_ms) != tmo)
                continue;
            sent[k] = true;
            calls[m++] = job_call(&jobs[k], &pj[k]);
        }
        rv = net_peer_submit_n(peer, calls, m, tmo);
        if (rv != 0)
            for (int k = 0; k < m; k++)
                peer_job_done(calls[k].arg, rv, NULL, 0);
    }
    free(calls);
    free(sent);
}

/* What is left of a call's timeout when its reply is awaited: the time to
 * deadline (at least 1 ms), so that sending and receiving together take at
 * most timeout_ms; a negative timeout (none) waits forever. */
static nng_duration recv_wait(nng_time deadline, int timeout_ms)
{
    nng_time now = nng_clock();

    if (timeout_ms < 0)
        return NNG_DURATION_INFINITE;
    return deadline > now + 1 ? (nng_duration)(deadline - now) : 1;
}

int net_call_all(net_job *jobs, int n, int timeout_ms)
{
    nng_time now = nng_clock();
    call_state *st;
    peer_job *pj;
    peer_wait w;
    int npeer = 0;

    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        npeer += jobs[i].peer != NULL;
    st = calloc((size_t)n, sizeof(*st));
    pj = npeer ? calloc((size_t)n, sizeof(*pj)) : NULL;
    if (st == NULL || (npeer && pj == NULL)) {
        free(st);
        free(pj);
        return SX_ENOMEM;
    }
    if (npeer) {
        if (ev_init(&w.done) != 0) {
            free(st);
            free(pj);
            return SX_ENOMEM;
        }
        atomic_init(&w.left, npeer);
    }
    for (int i = 0; i < n; i++) {
        nng_msg *m = NULL;
        int rv;

        jobs[i].err = 0;
        jobs[i].unsent = false;
        jobs[i].resp = NULL;
        jobs[i].resp_n = 0;
        if (jobs[i].peer != NULL) {
            pj[i].job = &jobs[i];
            pj[i].w = &w;
            continue; /* started below, grouped by peer */
        }
        rv = nng_ctx_open(&st[i].ctx, jobs[i].sock);
        if (rv == 0) {
            st[i].open = 1;
            rv = nng_aio_alloc(&st[i].aio, NULL, NULL);
        }
        if (rv == 0)
            rv = net_msg_copy(&m, jobs[i].req, jobs[i].req_n);
        if (rv != 0) {
            jobs[i].err = net_map_nng(rv);
            continue;
        }
        int tmo = job_timeout(&jobs[i], timeout_ms);
        nng_aio_set_timeout(st[i].aio, tmo < 0 ? NNG_DURATION_INFINITE : tmo);
        nng_aio_set_msg(st[i].aio, m);
        nng_ctx_send(st[i].ctx, st[i].aio);
    }
    if (npeer)
        submit_peers(jobs, pj, n, timeout_ms);
    for (int i = 0; i < n; i++) {
        int rv;

        if (st[i].aio == NULL || jobs[i].err)
            continue;
        nng_aio_wait(st[i].aio);
        rv = nng_aio_result(st[i].aio);
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(st[i].aio));
            jobs[i].err = net_map_nng(rv);
            continue;
        }
        int tmo = job_timeout(&jobs[i], timeout_ms);
        nng_aio_set_timeout(st[i].aio, recv_wait(now + (nng_time)(tmo > 0 ? tmo : 0), tmo));
        nng_ctx_recv(st[i].ctx, st[i].aio);
    }
    for (int i = 0; i < n; i++) {
        nng_msg *m;
        int rv;

        if (st[i].aio == NULL || jobs[i].err)
            continue;
        nng_aio_wait(st[i].aio);
        rv = nng_aio_result(st[i].aio);
        if (rv != 0) {
            jobs[i].err = net_map_nng(rv);
            continue;
        }
        m = nng_aio_get_msg(st[i].aio);
        jobs[i].resp_n = nng_msg_len(m);
        jobs[i].resp = malloc(jobs[i].resp_n ? jobs[i].resp_n : 1);
        if (jobs[i].resp == NULL)
            jobs[i].err = SX_ENOMEM;
        else
            memcpy(jobs[i].resp, nng_msg_body(m), jobs[i].resp_n);
        nng_msg_free(m);
    }
    for (int i = 0; i < n; i++) {
        if (st[i].aio)
            nng_aio_free(st[i].aio);
        if (st[i].open)
            nng_ctx_close(st[i].ctx);
    }
    if (npeer) {
        ev_wait(&w.done);
        ev_destroy(&w.done);
    }
    free(pj);
    free(st);
    return 0;
}

/* Runs the one call j (its target and request set) for net_call and
 * net_peer_call_sync. */
static int call_one(net_job *j, int timeout_ms, uint8_t **resp, size_t *resp_n)
{
    int rc = net_call_all(j, 1, timeout_ms);

    if (rc == 0)
        rc = j->err;
    if (rc != 0) {
        free(j->resp);
        return rc;
    }
    *resp = j->resp;
    *resp_n = j->resp_n;
    return 0;
}

int net_call(nng_socket s, const uint8_t *req, size_t n, int timeout_ms, uint8_t **resp,
             size_t *resp_n)
{
    net_job j = { .sock = s, .req = req, .req_n = n };

    return call_one(&j, timeout_ms, resp, resp_n);
}

int net_peer_call_sync(net_peer *p, const uint8_t *req, size_t n, int timeout_ms, uint8_t **resp,
                       size_t *resp_n)
{
    net_job j = { .peer = p, .solo = true, .req = req, .req_n = n };

    return call_one(&j, timeout_ms, resp, resp_n);
}

static void *guard_main(void *arg)
{
    int secs = (int)(intptr_t)arg;
    struct timespec ts = { secs, 0 };

    while (nanosleep(&ts, &ts) != 0)
        ;
    LOG_WARN("shutdown still not done after %d s (nng 1.5 can hang closing a socket); "
             "exiting now: everything acknowledged is already synced",
             secs);
    _exit(0);
}

void net_shutdown_guard(int seconds)
{
    pthread_t th;
    pthread_attr_t a;

    if (pthread_attr_init(&a) != 0)
        return;
    if (pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
        pthread_create(&th, &a, guard_main, (void *)(intptr_t)seconds) != 0)
        LOG_WARN("no shutdown guard: cannot start its thread");
    pthread_attr_destroy(&a);
}
