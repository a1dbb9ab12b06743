/*
 * ddl.c — catalog requests from clients: TABLE_CREATE, INDEX_CREATE and
 * INDEX_DROP are forwarded as CAT_UPDATE to the catalog's leader (which checks
 * names and applies durably, once per request id: a client's retry of a
 * change already made is answered with its version), after which the router's cache is brought up
 * to the new version; INDEX_LIST answers from the cache; CATALOG is
 * forwarded as is.
 */
#include <stdlib.h>
#include <string.h>

#include "router.h"
#include "log.h"
#include "sx_errors.h"

/* Sends frame req[n] to the catalog's leader (catclient.h: it finds it
 * among the catalog's replicas); on 0, *resp (malloc'd) is its reply. */
static int cat_call(router *rt, const uint8_t *req, size_t n, uint8_t **resp, size_t *resp_n,
                    rt_err *e)
{
    int rc = catclient_call(catcache_client(rt->cc), req, n, rt->timeout_ms, resp, resp_n);
    if (rc != 0)
        return rt_errf(e, rc == SX_ENOTLEADER ? SX_EUNAVAIL : rc,
                       "the catalog (on node %s%s) did not answer: %s",
                       rt->cfg->nodes[rt->cfg->catalog_node].name,
                       rt->cfg->ncatalog > 1 ? " and its other replicas" : "",
                       rc == SX_ENOTLEADER ? "no replica is leading it yet" : sx_strerror(rc));
    return 0;
}

/* Sends upd to the catalog's leader, waits until the cache holds the new
 * version, and replies {catver} with message type t. */
static int cat_update(router *rt, msg_type t, const msg_CAT_UPDATE_req *upd, mp_buf *out, rt_err *e)
{
    msg_CAT_UPDATE_rep rep;
    const cat_catalog *cat;
    uint64_t version;
    uint8_t *frame = NULL, *resp = NULL;
    size_t fn = 0, rn = 0;
    char emsg[512];
    int rc;

    memset(&rep, 0, sizeof(rep));
    rc = msg_encode_req_bytes(MSG_CAT_UPDATE, upd, &frame, &fn);
    if (rc != 0)
        return rt_errf(e, rc, "out of memory");
    rc = cat_call(rt, frame, fn, &resp, &rn, e);
    free(frame);
    if (rc != 0)
        return rc;
    rc = msg_decode_rep(MSG_CAT_UPDATE, resp, rn, &rep, emsg, sizeof(emsg));
    free(resp);
    if (rc != 0) {
        msg_free_rep(MSG_CAT_UPDATE, &rep);
        /* The catalog's own message already names the table/index. */
        return rt_errf(e, rc, "%s", emsg[0] ? emsg : sx_strerror(rc));
    }
    version = rep.version;
    msg_free_rep(MSG_CAT_UPDATE, &rep);
    rc = catcache_get(rt->cc, version, &cat);
    if (rc != 0)
        return rt_errf(e, rc,
                       "catalog changed to version %llu but the router "
                       "cannot fetch it: %s",
                       (unsigned long long)version, sx_strerror(rc));
    /* Every *_CREATE/DROP reply is {catver}: identical layouts. */
    {
        msg_TABLE_CREATE_rep r;
        memset(&r, 0, sizeof(r));
        r.catver = version;
        if (msg_encode_rep(t, &r, out) != 0)
            return rt_errf(e, SX_ENOMEM, "out of memory");
    }
    return 0;
}

int rt_h_table_create(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_TABLE_CREATE_req q;
    msg_CAT_UPDATE_req upd;
    int rc;

    rc = msg_decode_req(MSG_TABLE_CREATE, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed TABLE_CREATE request");
    memset(&upd, 0, sizeof(upd));
    upd.op = CATOP_CREATE_TABLE;
    upd.table = q.table;
    upd.pk = q.pk;
    upd.sk = q.sk;
    upd.rid = q.rid;
    rc = cat_update(rt, MSG_TABLE_CREATE, &upd, out, e);
    msg_free_req(MSG_TABLE_CREATE, &q);
    return rc;
}

int rt_h_index_create(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_INDEX_CREATE_req q;
    msg_CAT_UPDATE_req upd;
    int rc;

    rc = msg_decode_req(MSG_INDEX_CREATE, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed INDEX_CREATE request");
    if (q.proj > CAT_PROJ_LIST) {
        rc = rt_errf(e, SX_EINVAL,
                     "projection must be keys (0), all (1) or a "
                     "list (2), got %llu",
                     (unsigned long long)q.proj);
        goto out;
    }
    if (q.attrs.n == 0) {
        rc = rt_errf(e, SX_EINVAL, "an index needs at least one attribute");
        goto out;
    }
    memset(&upd, 0, sizeof(upd));
    upd.op = CATOP_CREATE_INDEX;
    upd.table = q.table;
    upd.index = q.index;
    upd.attrs = q.attrs;
    upd.proj = q.proj;
    upd.proj_attrs = q.proj_attrs;
    upd.rid = q.rid;
    rc = cat_update(rt, MSG_INDEX_CREATE, &upd, out, e);
out:
    msg_free_req(MSG_INDEX_CREATE, &q);
    return rc;
}

int rt_h_index_drop(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_INDEX_DROP_req q;
    msg_CAT_UPDATE_req upd;
    int rc;

    rc = msg_decode_req(MSG_INDEX_DROP, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed INDEX_DROP request");
    memset(&upd, 0, sizeof(upd));
    upd.op = CATOP_DROP_INDEX;
    upd.table = q.table;
    upd.index = q.index;
    upd.rid = q.rid;
    rc = cat_update(rt, MSG_INDEX_DROP, &upd, out, e);
    msg_free_req(MSG_INDEX_DROP, &q);
    return rc;
}

int rt_h_index_list(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_INDEX_LIST_req q;
    msg_INDEX_LIST_rep rep;
    const cat_catalog *cat;
    const cat_table *t;
    mp_buf acc;
    size_t *off = NULL;
    uint32_t i;
    int rc;

    memset(&rep, 0, sizeof(rep));
    mp_buf_init(&acc);
    rc = msg_decode_req(MSG_INDEX_LIST, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed INDEX_LIST request");
    /* Listing shows index states, which change without the router's
     * knowledge (backfills finishing): answer from a fresh copy. */
    if (catcache_refresh(rt->cc) != 0)
        LOG_WARN("router: INDEX_LIST answers from the cached catalog: refresh failed");
    rc = rt_table(rt, q.table, &cat, &t, e);
    if (rc != 0)
        goto out;
    off = calloc((size_t)t->nindexes + 1, sizeof(*off));
    rep.indexes.v = calloc((size_t)t->nindexes + 1, sizeof(mp_span));
    if (off == NULL || rep.indexes.v == NULL) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    for (i = 0; i < t->nindexes; i++) {
        off[i] = acc.sb.size;
        cat_encode_index(&t->indexes[i], &acc);
    }
    off[t->nindexes] = acc.sb.size;
    if (acc.oom) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    for (i = 0; i < t->nindexes; i++) {
        rep.indexes.v[i].p = (const uint8_t *)acc.sb.data + off[i];
        rep.indexes.v[i].n = off[i + 1] - off[i];
    }
    rep.indexes.n = t->nindexes;
    if (msg_encode_rep(MSG_INDEX_LIST, &rep, out) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
out:
    free(rep.indexes.v);
    free(off);
    mp_buf_free(&acc);
    msg_free_req(MSG_INDEX_LIST, &q);
    return rc;
}

int rt_h_catalog(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    uint8_t *resp = NULL;
    size_t rn = 0;
    int rc = cat_call(rt, p, n, &resp, &rn, e);
    if (rc != 0)
        return rc;
    mp_put_raw(out, resp, rn);
    free(resp);
    return out->oom ? rt_errf(e, SX_ENOMEM, "out of memory") : 0;
}
