/*
 * net.c — nng sockets, calls and the worker-pool server (see net.h).
 *
 * Calls use one REQ context per request, so many threads can share one
 * socket. The server runs N threads, each looping recv → handler → send on
 * its own REP context.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "net.h"
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
    case NNG_ECLOSED: case NNG_ECONNREFUSED: case NNG_ECONNSHUT:
    case NNG_ECONNRESET: case NNG_ECONNABORTED: case NNG_EADDRINVAL:
        return SX_EUNAVAIL;
    default: return SX_ENET;
    }
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

int net_dial(const char *url, nng_socket *out)
{
    int rv = nng_req0_open(out);

    if (rv != 0) {
        LOG_ERROR("req socket: %s", nng_strerror(rv));
        return SX_ENET;
    }
    rv = nng_socket_set_size(*out, NNG_OPT_RECVMAXSZ, SX_MAX_FRAME);
    /* Callers own retries (writes must not be resent behind their back on
     * a timer); nng still resends when a pipe closes under a request. */
    if (rv == 0)
        rv = nng_socket_set_ms(*out, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    if (rv == 0)
        rv = nng_socket_set_ms(*out, NNG_OPT_RECONNMINT, 20);
    if (rv == 0)
        rv = nng_socket_set_ms(*out, NNG_OPT_RECONNMAXT, 500);
    if (rv == 0)
        rv = nng_dial(*out, url, NULL, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        LOG_ERROR("dial %s: %s", url, nng_strerror(rv));
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

int net_call_all(net_job *jobs, int n, int timeout_ms)
{
    call_state *st;

    if (n <= 0)
        return 0;
    st = calloc((size_t)n, sizeof(*st));
    if (st == NULL)
        return SX_ENOMEM;
    for (int i = 0; i < n; i++) {
        nng_msg *m = NULL;
        int rv;

        jobs[i].err = 0;
        jobs[i].resp = NULL;
        jobs[i].resp_n = 0;
        rv = nng_ctx_open(&st[i].ctx, jobs[i].sock);
        if (rv == 0) {
            st[i].open = 1;
            rv = nng_aio_alloc(&st[i].aio, NULL, NULL);
        }
        if (rv == 0)
            rv = nng_msg_alloc(&m, 0);
        if (rv == 0)
            rv = nng_msg_append(m, jobs[i].req, jobs[i].req_n);
        if (rv != 0) {
            if (m)
                nng_msg_free(m);
            jobs[i].err = net_map_nng(rv);
            continue;
        }
        nng_aio_set_timeout(st[i].aio, timeout_ms);
        nng_aio_set_msg(st[i].aio, m);
        nng_ctx_send(st[i].ctx, st[i].aio);
    }
    for (int i = 0; i < n; i++) {
        int rv;

        if (jobs[i].err || st[i].aio == NULL)
            continue;
        nng_aio_wait(st[i].aio);
        rv = nng_aio_result(st[i].aio);
        if (rv != 0) {
            nng_msg_free(nng_aio_get_msg(st[i].aio));
            jobs[i].err = net_map_nng(rv);
            continue;
        }
        nng_aio_set_timeout(st[i].aio, timeout_ms);
        nng_ctx_recv(st[i].ctx, st[i].aio);
    }
    for (int i = 0; i < n; i++) {
        nng_msg *m;
        int rv;

        if (jobs[i].err || st[i].aio == NULL)
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
    free(st);
    return 0;
}

int net_call(nng_socket s, const uint8_t *req, size_t n, int timeout_ms,
             uint8_t **resp, size_t *resp_n)
{
    net_job j;
    int rc;

    memset(&j, 0, sizeof(j));
    j.sock = s;
    j.req = req;
    j.req_n = n;
    rc = net_call_all(&j, 1, timeout_ms);
    if (rc)
        return rc;
    if (j.err)
        return j.err;
    *resp = j.resp;
    *resp_n = j.resp_n;
    return 0;
}

/* ---- server ---- */

struct net_server {
    nng_socket sock;
    net_handler handler;
    void *arg;
    int nworkers;
    pthread_t *threads;
    int started;
};

static void *worker(void *p)
{
    net_server *srv = p;
    nng_ctx ctx;
    nng_aio *aio;

    if (nng_ctx_open(&ctx, srv->sock) != 0)
        return NULL;
    if (nng_aio_alloc(&aio, NULL, NULL) != 0) {
        nng_ctx_close(ctx);
        return NULL;
    }
    for (;;) {
        nng_msg *m;
        mp_buf out;
        int rv;

        nng_ctx_recv(ctx, aio);
        nng_aio_wait(aio);
        rv = nng_aio_result(aio);
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0)
            continue;
        m = nng_aio_get_msg(aio);
        mp_buf_init(&out);
        srv->handler(srv->arg, nng_msg_body(m), nng_msg_len(m), &out);
        nng_msg_clear(m);
        if (out.oom || nng_msg_append(m, out.sb.data, out.sb.size) != 0) {
            /* Out of memory: drop the request; the caller times out. */
            LOG_ERROR("reply dropped: out of memory");
            nng_msg_free(m);
            mp_buf_free(&out);
            continue;
        }
        mp_buf_free(&out);
        nng_aio_set_msg(aio, m);
        nng_ctx_send(ctx, aio);
        nng_aio_wait(aio);
        if (nng_aio_result(aio) != 0)
            nng_msg_free(nng_aio_get_msg(aio));
    }
    nng_aio_free(aio);
    nng_ctx_close(ctx);
    return NULL;
}

int net_server_start(nng_socket sock, int nworkers, net_handler h, void *arg,
                     net_server **out)
{
    net_server *srv = calloc(1, sizeof(*srv));

    if (srv == NULL)
        return SX_ENOMEM;
    if (nworkers < 1)
        nworkers = 1;
    srv->sock = sock;
    srv->handler = h;
    srv->arg = arg;
    srv->nworkers = nworkers;
    srv->threads = calloc((size_t)nworkers, sizeof(pthread_t));
    if (srv->threads == NULL) {
        free(srv);
        return SX_ENOMEM;
    }
    for (int i = 0; i < nworkers; i++) {
        if (pthread_create(&srv->threads[i], NULL, worker, srv) != 0) {
            net_server_stop(srv);
            return SX_ENOMEM;
        }
        srv->started++;
    }
    *out = srv;
    return 0;
}

void net_server_stop(net_server *srv)
{
    if (srv == NULL)
        return;
    nng_close(srv->sock);
    for (int i = 0; i < srv->started; i++)
        pthread_join(srv->threads[i], NULL);
    free(srv->threads);
    free(srv);
}
