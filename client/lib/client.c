/*
 * client.c — sx_client: connections to one or more routers, the call path
 * with router failover, and the last-error message.
 */
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "internal.h"
#include "net.h"
#include "hash.h"
#include "log.h"

int cl_fail(sx_client *c, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    return err;
}

static void client_free(sx_client *c)
{
    cl_async_fini(c);
    if (c->socks)
        cl_close_sockets(c->socks, c->nrouters);
    for (int k = 0; k < c->nrouters; k++)
        if (c->urls)
            free(c->urls[k]);
    free(c->socks);
    free(c->urls);
    free(c);
}

/* Splits urls on commas (trimming blanks) into c->urls. */
static int split_urls(sx_client *c, const char *urls)
{
    int max = 1;
    for (const char *p = urls; *p; p++)
        max += *p == ',';
    c->urls = calloc((size_t)max, sizeof *c->urls);
    c->socks = calloc((size_t)max, sizeof *c->socks);
    if (!c->urls || !c->socks)
        return SX_ENOMEM;
    const char *p = urls;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && t[-1] == ' ')
            t--;
        if (t > p) {
            char *u = strndup(p, (size_t)(t - p));
            if (!u)
                return SX_ENOMEM;
            c->urls[c->nrouters++] = u;
        }
        p = e;
    }
    return c->nrouters ? SX_OK : SX_EINVAL;
}

/* Writes the reason for a failed open into err[errlen] (may be NULL). */
static int open_fail(char *err, size_t errlen, int rc, const char *what, const char *url)
{
    if (err && errlen)
        snprintf(err, errlen, "%s%s", what, url);
    return rc;
}

int sx_client_open(const char *urls, sx_client **out)
{
    return sx_client_open_tls(urls, NULL, out, NULL, 0);
}

int sx_client_open_tls(const char *urls, const sx_client_tls *tls, sx_client **out, char *err,
                       size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!urls || !out)
        return open_fail(err, errlen, SX_EINVAL, "no router URL given", "");
    *out = NULL;
    if (proto_init())
        return SX_EINTERNAL;
    sx_client *c = calloc(1, sizeof *c);
    if (!c)
        return SX_ENOMEM;
    c->timeout_ms = SX_CALL_TIMEOUT_MS;
    int rc = cl_async_init(c);
    if (!rc)
        rc = split_urls(c, urls);
    if (rc) {
        open_fail(err, errlen, rc, rc == SX_EINVAL ? "no router URL given" : "out of memory", "");
        goto fail;
    }
    c->tls = tls != NULL;
    net_tls nt = { .ca = tls ? tls->ca_file : NULL,
                   .cert = tls ? tls->cert_file : NULL,
                   .key = tls ? tls->key_file : NULL,
                   .server_name = tls ? tls->server_name : NULL };
    for (int k = 0; k < c->nrouters; k++) {
        bool want = strncasecmp(c->urls[k], "tls+", 4) == 0;
        if (want != (tls != NULL)) {
            rc = open_fail(err, errlen, SX_EINVAL,
                           want ? "a TLS router URL needs TLS files "
                                  "(the CA, and this client's certificate and key): "
                                : "with TLS files every router URL must be tls+tcp://, not ",
                           c->urls[k]);
            goto fail;
        }
        rc = net_dial_tls(c->urls[k], tls ? &nt : NULL, &c->socks[k], err, errlen);
        if (rc) {
            if (err && errlen && !err[0])
                open_fail(err, errlen, rc, "cannot dial ", c->urls[k]);
            goto fail;
        }
    }
    rc = cl_async_peers(c);
    if (rc)
        goto fail;
    *out = c;
    return SX_OK;
fail:
    client_free(c);
    return rc;
}

void sx_client_close(sx_client *c)
{
    if (c)
        client_free(c);
}

const char *sx_client_errmsg(const sx_client *c)
{
    return c ? c->errmsg : "no client";
}

void sx_client_set_timeout(sx_client *c, int timeout_ms)
{
    if (c && timeout_ms > 0)
        c->timeout_ms = timeout_ms;
}

void sx_free(void *p)
{
    free(p);
}

/* The child of stat s named name, or NULL. */
static nng_stat *stat_child(nng_stat *s, const char *name)
{
    for (nng_stat *c = nng_stat_child(s); c; c = nng_stat_next(c))
        if (strcmp(nng_stat_name(c), name) == 0)
            return c;
    return NULL;
}

/* Number of connected pipes of s per nng's statistics, or -1 when unknown
 * (statistics unavailable). Walks the snapshot's top-level "socket" nodes
 * by their "id" child (nng_stat_find_socket/nng_stat_find did not give the
 * right node with several sockets in nng 1.5). */
static int pipes_of(nng_socket s)
{
    nng_stat *all = NULL;
    int n = -1;
    if (nng_stats_get(&all) != 0)
        return -1;
    for (nng_stat *k = nng_stat_child(all); k; k = nng_stat_next(k)) {
        nng_stat *id = stat_child(k, "id");
        if (strcmp(nng_stat_name(k), "socket") == 0 && id &&
            (int)nng_stat_value(id) == nng_socket_id(s)) {
            nng_stat *p = stat_child(k, "pipes");
            if (p)
                n = (int)nng_stat_value(p);
            break;
        }
    }
    nng_stats_free(all);
    return n;
}

bool cl_router_connected(sx_client *c, int k)
{
    return pipes_of(c->socks[k]) != 0; /* unknown (-1) counts as connected */
}

bool cl_is_write(msg_type t)
{
    return t == MSG_PUT || t == MSG_DELETE || t == MSG_TABLE_CREATE || t == MSG_INDEX_CREATE ||
           t == MSG_INDEX_DROP;
}

/* Whether t's frames end with a deadline (msg.h, deadline_ms). */
static bool has_deadline(msg_type t)
{
    return t == MSG_PUT || t == MSG_DELETE;
}

bool cl_stamp_deadline(msg_type t, uint8_t *wire, size_t n, long long ms)
{
    if (!has_deadline(t))
        return true;
    if (n < 9 || wire[n - 9] != 0xcf)
        return false;
    uint64_t d = (uint64_t)os_real_ms() + (uint64_t)(ms > 0 ? ms : 0);
    for (int i = 0; i < 8; i++)
        wire[n - 1 - i] = (uint8_t)(d >> (8 * i));
    return true;
}

bool cl_may_failover(sx_client *c, int k, msg_type t, int rc)
{
    if (rc == SX_ENET || rc == SX_EUNAVAIL)
        return true;
    if (rc != SX_ETIMEDOUT)
        return false;
    /* A read may always be asked again, and so may a put or a delete: no
     * storage node applies it once its deadline (this attempt's timeout)
     * has passed. A catalog change that timed out may still be run by its
     * router later — after a retry elsewhere and after the caller's next
     * changes, which it would then undo — unless that router is gone (no
     * connection left: it crashed or the network failed). */
    return !cl_is_write(t) || has_deadline(t) || pipes_of(c->socks[k]) == 0;
}

/* Orders the routers for one call into order[]: the current one first,
 * then the others; with several routers, those with a live connection go
 * before those without (a request to an unconnected REQ socket only fails
 * at its timeout). Waits up to CL_CONNECT_WAIT_MS for any connection when
 * none is up yet (dials run in the background). */
#define CL_CONNECT_WAIT_MS 500
static void call_order(sx_client *c, int *order)
{
    int n = 0;
    if (c->nrouters > 1) {
        for (int waited = 0;; waited += 10) {
            bool any = false;
            for (int t = 0; t < c->nrouters && !any; t++)
                any = pipes_of(c->socks[t]) != 0;
            if (any || waited >= CL_CONNECT_WAIT_MS)
                break;
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        for (int t = 0; t < c->nrouters; t++) {
            int k = (c->cur + t) % c->nrouters;
            if (pipes_of(c->socks[k]) != 0)
                order[n++] = k;
        }
    }
    for (int t = 0; t < c->nrouters; t++) {
        int k = (c->cur + t) % c->nrouters, seen = 0;
        for (int j = 0; j < n; j++)
            seen |= order[j] == k;
        if (!seen)
            order[n++] = k;
    }
}

/* The encoded size of a large request, ahead, so that its buffer is
 * allocated once (a batch of puts: its items' bytes and a few per item);
 * 0 for the others, which are small. */
static size_t req_size_hint(msg_type t, const void *req)
{
    if (t != MSG_PUT)
        return 0;
    const msg_PUT_req *r = req;
    size_t n = 64 + r->table.n;
    for (uint32_t k = 0; k < r->items.n; k++)
        n += r->items.v[k].n + 1; /* an empty item is sent as nil */
    return n;
}

int cl_req_encode(msg_type t, const void *req, uint8_t **wire, size_t *n)
{
    mp_buf b;
    mp_buf_init(&b);
    mp_buf_reserve(&b, req_size_hint(t, req));
    int rc = msg_encode_req(t, req, &b);
    if (!rc)
        rc = mp_buf_take(&b, wire, n);
    mp_buf_free(&b);
    return rc;
}

const char *cl_conn_hint(sx_client *c, int k, int rc)
{
    if (rc != SX_ETIMEDOUT || pipes_of(c->socks[k]) != 0)
        return "";
    return c->tls ? " (no connection: the router is down or unreachable, or refused this "
                    "client's TLS certificate, or this client refused the router's: not "
                    "signed by its CA, or not naming the host dialed)"
                  : " (no connection: the router is down or unreachable)";
}

void cl_call_msg(sx_client *c, int k, msg_type t, int rc, long long ms, bool retry, char *buf,
                 size_t n)
{
    const char *hint = cl_conn_hint(c, k, rc);

    if (rc == SX_ETIMEDOUT && !retry && has_deadline(t))
        snprintf(buf, n,
                 "router %s: timed out after %lld ms%s; the %s may or may not have "
                 "been applied, but not after any write made from now on (its deadline has "
                 "passed)",
                 c->urls[k], ms, hint, t == MSG_PUT ? "put" : "delete");
    else if (rc == SX_ETIMEDOUT && !retry && cl_is_write(t))
        snprintf(buf, n,
                 "router %s: timed out after %lld ms%s; the change may or may not "
                 "have been applied, and may still be (not retried elsewhere)",
                 c->urls[k], ms, hint);
    else if (rc == SX_ETIMEDOUT)
        snprintf(buf, n, "router %s: timed out after %lld ms%s", c->urls[k], ms, hint);
    else
        snprintf(buf, n, "router %s: %s", c->urls[k], sx_strerror(rc));
}

int cl_call(sx_client *c, msg_type t, const void *req, void *rep, uint8_t **frame, int extra_ms)
{
    uint8_t *wire = NULL;
    size_t wire_n = 0;
    c->errmsg[0] = '\0';
    *frame = NULL;
    int rc = cl_req_encode(t, req, &wire, &wire_n);
    if (rc)
        return cl_fail(c, rc, "cannot encode %s request: %s", msg_name(t), sx_strerror(rc));
    if (wire_n > NET_REQ_MAX) {
        free(wire);
        return cl_fail(c, SX_ETOOBIG, "%s request of %zu bytes exceeds the %u-byte limit",
                       msg_name(t), wire_n, NET_REQ_MAX);
    }
    int *order = malloc((size_t)c->nrouters * sizeof *order);
    if (!order) {
        free(wire);
        return cl_fail(c, SX_ENOMEM, "out of memory");
    }
    call_order(c, order);
    for (int tries = 0; tries < c->nrouters; tries++) {
        int k = order[tries];
        uint8_t *resp = NULL;
        size_t resp_n = 0;
        long long ms = (long long)c->timeout_ms + extra_ms;
        if (!cl_stamp_deadline(t, wire, wire_n, ms)) {
            rc = cl_fail(c, SX_EINTERNAL, "%s request does not end with its deadline", msg_name(t));
            break;
        }
        rc = net_call(c->socks[k], wire, wire_n, ms > INT_MAX ? INT_MAX : (int)ms, &resp, &resp_n);
        if (rc) {
            bool retry = cl_may_failover(c, k, t, rc) && tries + 1 < c->nrouters;
            cl_call_msg(c, k, t, rc, ms, retry, c->errmsg, sizeof c->errmsg);
            if (retry)
                continue;
            break;
        }
        c->cur = k; /* stick with the router that answered */
        char msg[CL_ERRMSG_LEN];
        msg[0] = '\0';
        rc = msg_decode_rep(t, resp, resp_n, rep, msg, sizeof msg);
        if (rc) {
            msg_free_rep(t, rep);
            free(resp);
            if (msg[0])
                cl_fail(c, rc, "%s", msg);
            else
                cl_fail(c, rc, "%s", sx_strerror(rc));
            /* a read answered "unavailable" (e.g. the router is stopping)
             * is asked again elsewhere; a write is not: the router also
             * says so when its link to a node broke mid-call, and the
             * write may then have been applied */
            if (rc == SX_EUNAVAIL && !cl_is_write(t) && tries + 1 < c->nrouters)
                continue;
            free(order);
            free(wire);
            return rc;
        }
        *frame = resp;
        free(order);
        free(wire);
        c->errmsg[0] = '\0'; /* a failover's message is not this call's */
        return SX_OK;
    }
    free(order);
    free(wire);
    return rc;
}
