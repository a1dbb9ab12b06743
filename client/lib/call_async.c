/*
 * call_async.c — the asynchronous call path of libshardex: a pool of
 * operations per client, started by the *_async calls (ops_async.c) and
 * sent through one net_peer per router (proto/runtime/peer.c), whose completion
 * decodes the reply and runs the caller's callback.
 *
 * The peer sends a call alone while one of its few contexts is idle; when
 * many operations are in flight they share MULTI frames, so 64 gets cost a
 * few round trips, not 64. An operation goes: submit → reply (or transport
 * failure) → decode → user callback → back to the client's free list.
 * Transport failures that allow failover resend the same frame to the next
 * router. The peers are closed by sx_client_close once nothing is in flight.
 */
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include "internal.h"
#include "call_async.h"
#include "net.h"

int cl_async_init(sx_client *c)
{
    if (pthread_mutex_init(&c->alock, NULL) != 0)
        return SX_ENOMEM;
    if (pthread_cond_init(&c->aidle, NULL) != 0) {
        pthread_mutex_destroy(&c->alock);
        return SX_ENOMEM;
    }
    c->alock_ok = true;
    return SX_OK;
}

int cl_async_peers(sx_client *c)
{
    int frames = net_batch_frames(NET_BATCH_FRAMES_CLIENT);

    c->peers = calloc((size_t)c->nrouters, sizeof *c->peers);
    if (!c->peers)
        return SX_ENOMEM;
    for (int k = 0; k < c->nrouters; k++) {
        /* coalescing off: enough contexts that every call goes alone */
        int rc = net_peer_open(c->socks[k], frames > 0 ? frames : NET_PEER_ALONE, &c->peers[k]);
        if (rc)
            return rc;
    }
    return SX_OK;
}

void cl_async_fini(sx_client *c)
{
    if (!c->alock_ok)
        return;
    sx_client_wait(c, -1);
    for (int k = 0; c->peers && k < c->nrouters; k++)
        net_peer_close(c->peers[k]);
    free(c->peers);
    c->peers = NULL;
    sx_op *op = c->aall;
    while (op) {
        sx_op *next = op->next_all;
        free(op);
        op = next;
    }
    c->aall = c->afree = NULL;
    pthread_cond_destroy(&c->aidle);
    pthread_mutex_destroy(&c->alock);
    c->alock_ok = false;
}

size_t sx_client_inflight(sx_client *c)
{
    if (!c || !c->alock_ok)
        return 0;
    pthread_mutex_lock(&c->alock);
    size_t n = c->ainflight;
    pthread_mutex_unlock(&c->alock);
    return n;
}

int sx_client_wait(sx_client *c, int timeout_ms)
{
    if (!c || !c->alock_ok)
        return SX_EINVAL;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms >= 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    int rc = SX_OK;
    pthread_mutex_lock(&c->alock);
    while (c->ainflight > 0) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&c->aidle, &c->alock);
        } else if (pthread_cond_timedwait(&c->aidle, &c->alock, &until) == ETIMEDOUT) {
            rc = c->ainflight > 0 ? SX_ETIMEDOUT : SX_OK;
            break;
        }
    }
    pthread_mutex_unlock(&c->alock);
    return rc;
}

/* Takes an idle operation from c's pool or makes one; counts it in flight.
 * Returns NULL when out of memory. */
static sx_op *op_get(sx_client *c)
{
    pthread_mutex_lock(&c->alock);
    sx_op *op = c->afree;
    if (op)
        c->afree = op->next_free;
    c->ainflight++;
    pthread_mutex_unlock(&c->alock);
    if (op)
        return op;
    op = calloc(1, sizeof *op);
    pthread_mutex_lock(&c->alock);
    if (!op) {
        if (--c->ainflight == 0)
            pthread_cond_broadcast(&c->aidle);
    } else {
        op->c = c;
        op->next_all = c->aall;
        c->aall = op;
    }
    pthread_mutex_unlock(&c->alock);
    return op;
}

/* Returns op to the pool; the last touch of op by this thread. */
static void op_put(sx_op *op)
{
    sx_client *c = op->c;
    pthread_mutex_lock(&c->alock);
    op->next_free = c->afree;
    c->afree = op;
    if (--c->ainflight == 0)
        pthread_cond_broadcast(&c->aidle);
    pthread_mutex_unlock(&c->alock);
}

/* Drops what decoding a reply left in op (before it is sent again). */
static void op_clear_reply(sx_op *op)
{
    free(op->versions);
    sx_item_free(op->item);
    sx_result_free(op->result);
    op->versions = NULL;
    op->item = NULL;
    op->result = NULL;
    op->nversions = 0;
    op->rc = SX_OK;
}

/* Clears what a finished operation held. */
static void op_clear(sx_op *op)
{
    op_clear_reply(op);
    free(op->wire);
    op->wire = NULL;
}

/* Runs the user's callback, then recycles op. */
static void op_finish(sx_op *op)
{
    if (op->rc && !op->errmsg[0])
        snprintf(op->errmsg, sizeof op->errmsg, "%s", sx_strerror(op->rc));
    op->cb(op, op->arg);
    op_clear(op);
    op_put(op);
}

static void op_done(void *arg, int err, const uint8_t *resp, size_t n);

/* Starts op's frame on router op->k. Returns 0 (op_done will run) or an
 * sx_err. */
static int op_send(sx_op *op)
{
    sx_client *c = op->c;
    long long ms = (long long)c->timeout_ms + op->extra_ms;
    int timeout = ms > INT_MAX ? INT_MAX : (int)ms;

    if (!cl_stamp_deadline(op->t, op->wire, op->wire_n, ms))
        return SX_EINTERNAL;
    /* Scans (a page can take long) and strong queries (they wait for the
     * index) go alone: sharing a frame would hold up their frame-mates. */
    if (op->t == MSG_SCAN || op->extra_ms > 0)
        return net_peer_submit_solo(c->peers[op->k], op->wire, op->wire_n, timeout, op_done, op);
    return net_peer_submit(c->peers[op->k], op->wire, op->wire_n, timeout, op_done, op);
}

/* A failure on router op->k (a transport error, or an SX_EUNAVAIL reply
 * whose message is already in op->errmsg): resend to the next router when
 * cl_may_failover allows, else finish with rc. */
static void op_failed(sx_op *op, int rc, bool replied)
{
    sx_client *c = op->c;
    long long ms = (long long)c->timeout_ms + op->extra_ms;
    if (!replied)
        cl_call_msg(c, op->k, op->t, rc, ms,
                    cl_may_failover(c, op->k, op->t, rc) && op->tries + 1 < c->nrouters, op->errmsg,
                    sizeof op->errmsg);
    while (cl_may_failover(c, op->k, op->t, rc) && ++op->tries < c->nrouters) {
        op_clear_reply(op);
        op->k = (op->k + 1) % c->nrouters;
        __atomic_store_n(&c->acur, op->k, __ATOMIC_RELAXED);
        rc = op_send(op);
        if (rc == SX_OK)
            return;
        snprintf(op->errmsg, sizeof op->errmsg, "router %s: %s", c->urls[op->k], sx_strerror(rc));
    }
    op->rc = rc;
    op_finish(op);
}

static void op_done(void *arg, int err, const uint8_t *resp, size_t n)
{
    sx_op *op = arg;
    if (err) {
        op_failed(op, err, false);
        return;
    }
    cl_async_decode(op, resp, n);
    if (op->rc == SX_EUNAVAIL && !cl_is_write(op->t) && op->tries + 1 < op->c->nrouters) {
        op_failed(op, op->rc, true); /* a read: see cl_call */
        return;
    }
    op_finish(op);
}

/* How often the router an operation starts on is checked for a live
 * connection (reading nng's statistics for every operation would cost
 * more than the operation). */
#define CL_ALIVE_RECHECK_MS 200

/* The router an operation starts on: the current one, or with several the
 * first one from it with a live connection, as the synchronous calls do
 * (an unconnected router would only fail the operation at its timeout). */
static int first_router(sx_client *c)
{
    int k = __atomic_load_n(&c->acur, __ATOMIC_RELAXED) % c->nrouters;
    struct timespec ts;
    unsigned long long now;

    if (c->nrouters == 1)
        return k;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
    pthread_mutex_lock(&c->alock);
    if (c->alive_at == 0 || c->alive_from != k || now - c->alive_at >= CL_ALIVE_RECHECK_MS) {
        c->alive_from = k;
        c->alive_k = k;
        for (int t = 0; t < c->nrouters; t++) {
            int j = (k + t) % c->nrouters;
            if (cl_router_connected(c, j)) {
                c->alive_k = j;
                break;
            }
        }
        c->alive_at = now ? now : 1;
    }
    k = c->alive_k;
    pthread_mutex_unlock(&c->alock);
    return k;
}

int cl_async_start(sx_client *c, msg_type t, uint8_t *wire, size_t wire_n, int extra_ms,
                   size_t expect, sx_done_fn cb, void *arg)
{
    if (wire_n > NET_REQ_MAX) {
        free(wire);
        return SX_ETOOBIG;
    }
    sx_op *op = op_get(c);
    if (!op) {
        free(wire);
        return SX_ENOMEM;
    }
    op->t = t;
    op->cb = cb;
    op->arg = arg;
    op->wire = wire;
    op->wire_n = wire_n;
    op->extra_ms = extra_ms;
    op->expect = expect;
    op->tries = 0;
    op->rc = SX_OK;
    op->errmsg[0] = '\0';
    op->k = first_router(c);
    int rc = op_send(op);
    if (rc == SX_OK)
        return SX_OK;
    /* Not started: the callback will not run. */
    op_clear(op);
    op_put(op);
    return rc;
}
