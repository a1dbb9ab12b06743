/*
 * client.c — sx_client: connections to one or more routers, the call path
 * with router failover, and the last-error message.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "net.h"
#include "hash.h"

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
    for (int k = 0; k < c->nrouters; k++) {
        if (c->socks && nng_socket_id(c->socks[k]) > 0)
            nng_close(c->socks[k]);
        if (c->urls)
            free(c->urls[k]);
    }
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

int sx_client_open(const char *urls, sx_client **out)
{
    if (!urls || !out)
        return SX_EINVAL;
    if (sx_proto_init())
        return SX_EINTERNAL;
    sx_client *c = calloc(1, sizeof *c);
    if (!c)
        return SX_ENOMEM;
    c->timeout_ms = SX_CALL_TIMEOUT_MS;
    int rc = split_urls(c, urls);
    if (rc)
        goto fail;
    for (int k = 0; k < c->nrouters; k++) {
        rc = net_dial(c->urls[k], &c->socks[k]);
        if (rc)
            goto fail;
    }
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

static bool failover_err(int rc)
{
    return rc == SX_EUNAVAIL || rc == SX_ETIMEDOUT || rc == SX_ENET;
}

int cl_call(sx_client *c, msg_type t, const void *req, void *rep,
            uint8_t **frame, int extra_ms)
{
    mp_buf b;
    uint8_t *wire = NULL;
    size_t wire_n = 0;
    c->errmsg[0] = '\0';
    *frame = NULL;
    mp_buf_init(&b);
    int rc = msg_encode_req(t, req, &b);
    if (!rc)
        rc = mp_buf_take(&b, &wire, &wire_n);
    mp_buf_free(&b);
    if (rc)
        return cl_fail(c, rc, "cannot encode %s request: %s", msg_name(t), sx_strerror(rc));
    if (wire_n > SX_MAX_FRAME) {
        free(wire);
        return cl_fail(c, SX_ETOOBIG, "%s request of %zu bytes exceeds the frame limit",
                       msg_name(t), wire_n);
    }
    for (int tries = 0; tries < c->nrouters; tries++) {
        int k = (c->cur + tries) % c->nrouters;
        uint8_t *resp = NULL;
        size_t resp_n = 0;
        rc = net_call(c->socks[k], wire, wire_n, c->timeout_ms + extra_ms, &resp, &resp_n);
        if (rc) {
            cl_fail(c, rc, "router %s: %s", c->urls[k], sx_strerror(rc));
            if (failover_err(rc))
                continue;
            break;
        }
        c->cur = k;   /* stick with the router that answered */
        char msg[CL_ERRMSG_LEN];
        msg[0] = '\0';
        rc = msg_decode_rep(t, resp, resp_n, rep, msg, sizeof msg);
        if (rc) {
            msg_free_rep(t, rep);
            free(resp);
            if (msg[0])
                return cl_fail(c, rc, "%s", msg);
            return cl_fail(c, rc, "%s", sx_strerror(rc));
        }
        *frame = resp;
        free(wire);
        return SX_OK;
    }
    free(wire);
    return rc;
}
