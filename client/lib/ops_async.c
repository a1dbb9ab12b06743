/*
 * ops_async.c — the public asynchronous calls (sx_*_async): each encodes
 * its request exactly as its synchronous twin does and hands the frame to
 * cl_async_start; the reply is decoded here (cl_async_decode) and read by
 * the caller's callback through the sx_op_* readers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "call_async.h"

int sx_put_batch_async(sx_client *c, const char *table, const sx_item *const *items, size_t n,
                       sx_done_fn cb, void *arg)
{
    if (!c || !cb || !table || n == 0 || !items || n > MSG_MAX_LIST)
        return SX_EINVAL;
    msg_PUT_req req = { 0 };
    mp_buf ib;
    uint8_t *wire = NULL;
    size_t wire_n = 0, bad = 0;
    req.table = cl_cstr_buf(table);
    req.deadline_ms = CL_DEADLINE_UNSET;
    req.items.v = calloc(n, sizeof *req.items.v);
    if (!req.items.v)
        return SX_ENOMEM;
    req.items.n = (uint32_t)n;
    mp_buf_init(&ib);
    int rc = cl_items_encode(items, n, &ib, req.items.v, &bad);
    if (!rc)
        rc = cl_req_encode(MSG_PUT, &req, &wire, &wire_n);
    mp_buf_free(&ib);
    free(req.items.v);
    if (rc)
        return rc;
    return cl_async_start(c, MSG_PUT, wire, wire_n, 0, n, cb, arg);
}

int sx_put_async(sx_client *c, const char *table, const sx_item *item, sx_done_fn cb, void *arg)
{
    return sx_put_batch_async(c, table, &item, 1, cb, arg);
}

/* GET and DELETE: a table and a key map. */
static int key_async(sx_client *c, msg_type t, const char *table, const sx_item *key, sx_done_fn cb,
                     void *arg)
{
    if (!c || !cb || !table || !key)
        return SX_EINVAL;
    uint8_t *kb = NULL, *wire = NULL;
    size_t kn, wire_n = 0;
    int rc = cl_item_bytes(key, &kb, &kn);
    if (rc)
        return rc;
    if (t == MSG_GET) {
        msg_GET_req req = { 0 };
        req.table = cl_cstr_buf(table);
        req.key = (mp_span){ kb, kn };
        rc = cl_req_encode(t, &req, &wire, &wire_n);
    } else {
        msg_DELETE_req req = { 0 };
        req.table = cl_cstr_buf(table);
        req.deadline_ms = CL_DEADLINE_UNSET;
        req.key = (mp_span){ kb, kn };
        rc = cl_req_encode(t, &req, &wire, &wire_n);
    }
    free(kb);
    if (rc)
        return rc;
    return cl_async_start(c, t, wire, wire_n, 0, 0, cb, arg);
}

int sx_get_async(sx_client *c, const char *table, const sx_item *key, sx_done_fn cb, void *arg)
{
    return key_async(c, MSG_GET, table, key, cb, arg);
}

int sx_delete_async(sx_client *c, const char *table, const sx_item *key, sx_done_fn cb, void *arg)
{
    return key_async(c, MSG_DELETE, table, key, cb, arg);
}

int sx_query_async(sx_client *c, const char *table, const char *index, const sx_query_opts *opts,
                   sx_done_fn cb, void *arg)
{
    if (!c || !cb || !table || !index)
        return SX_EINVAL;
    sx_query_opts none = { 0 };
    const sx_query_opts *o = opts ? opts : &none;
    msg_QUERY_req req = { 0 };
    uint8_t *tok = NULL, *wire = NULL;
    size_t wire_n = 0;
    req.table = cl_cstr_buf(table);
    req.index = cl_cstr_buf(index);
    /* cl_query_req_fill reports through a client's message: give it a
     * scratch client so c's (owned by its synchronous user) is untouched. */
    sx_client *scratch = calloc(1, sizeof *scratch);
    int rc = scratch ? cl_query_req_fill(scratch, o, &req, &tok) : SX_ENOMEM;
    free(scratch);
    if (!rc)
        rc = cl_req_encode(MSG_QUERY, &req, &wire, &wire_n);
    free((void *)req.eq.p);
    free((void *)req.from.p);
    free((void *)req.to.p);
    free(req.attrs.v);
    free(tok);
    if (rc)
        return rc;
    return cl_async_start(c, MSG_QUERY, wire, wire_n, cl_query_wait_ms(o), 0, cb, arg);
}

int sx_scan_async(sx_client *c, const char *table, const sx_item *where, uint64_t limit,
                  const char *token, sx_done_fn cb, void *arg)
{
    if (!c || !cb || !table)
        return SX_EINVAL;
    msg_SCAN_req req = { 0 };
    uint8_t *tok = NULL, *wb = NULL, *wire = NULL;
    size_t n, wire_n = 0;
    int rc = cl_item_bytes(where, &wb, &n);
    if (rc)
        return rc;
    req.table = cl_cstr_buf(table);
    req.where = (mp_span){ wb, n };
    req.limit = limit;
    if (token && *token) {
        rc = cl_b64_decode(token, &tok, &n);
        req.token = (mp_span){ tok, tok ? n : 0 };
    }
    if (!rc)
        rc = cl_req_encode(MSG_SCAN, &req, &wire, &wire_n);
    free(wb);
    free(tok);
    if (rc)
        return rc;
    return cl_async_start(c, MSG_SCAN, wire, wire_n, 0, 0, cb, arg);
}

/* ---- replies ---- */

static void decode_put(sx_op *op, const uint8_t *p, size_t n)
{
    msg_PUT_rep rep = { 0 };
    op->rc = msg_decode_rep(MSG_PUT, p, n, &rep, op->errmsg, sizeof op->errmsg);
    if (!op->rc && rep.versions.n != op->expect) {
        op->rc = SX_EPROTO;
        snprintf(op->errmsg, sizeof op->errmsg, "router acknowledged %u of %zu items",
                 rep.versions.n, op->expect);
    } else if (!op->rc && cl_copy_u64s(&rep.versions, &op->versions, &op->nversions)) {
        op->rc = SX_ENOMEM;
    }
    msg_free_rep(MSG_PUT, &rep);
}

static void decode_get(sx_op *op, const uint8_t *p, size_t n)
{
    msg_GET_rep rep = { 0 };
    op->rc = msg_decode_rep(MSG_GET, p, n, &rep, op->errmsg, sizeof op->errmsg);
    if (!op->rc) {
        if (rep.item.n == 0 || rep.item.p[0] == 0xc0) {
            op->rc = SX_ENOTFOUND;
            snprintf(op->errmsg, sizeof op->errmsg, "not found");
        } else if ((op->rc = cl_item_decode(rep.item.p, rep.item.n, &op->item))) {
            snprintf(op->errmsg, sizeof op->errmsg, "malformed item from the router");
        }
    }
    msg_free_rep(MSG_GET, &rep);
}

static void decode_delete(sx_op *op, const uint8_t *p, size_t n)
{
    msg_DELETE_rep rep = { 0 };
    op->rc = msg_decode_rep(MSG_DELETE, p, n, &rep, op->errmsg, sizeof op->errmsg);
    if (!op->rc) {
        op->versions = malloc(sizeof *op->versions);
        if (!op->versions) {
            op->rc = SX_ENOMEM;
        } else {
            op->versions[0] = rep.version;
            op->nversions = 1;
        }
    }
    msg_free_rep(MSG_DELETE, &rep);
}

static void decode_query(sx_op *op, const uint8_t *p, size_t n)
{
    msg_QUERY_rep rep = { 0 };
    op->rc = msg_decode_rep(MSG_QUERY, p, n, &rep, op->errmsg, sizeof op->errmsg);
    if (!op->rc) {
        sx_result *r = NULL;
        int rc = cl_result_make(&rep.items, rep.token, &r);
        if (!rc && !(rc = cl_copy_u64s(&rep.index_parts, &r->index_parts, &r->nindex_parts)))
            rc = cl_copy_u64s(&rep.fact_parts, &r->fact_parts, &r->nfact_parts);
        if (rc) {
            sx_result_free(r);
            op->rc = rc;
            snprintf(op->errmsg, sizeof op->errmsg, "malformed query reply");
        } else {
            r->entries = rep.entries;
            r->stale = rep.stale;
            r->covering = rep.covering != 0;
            op->result = r;
        }
    }
    msg_free_rep(MSG_QUERY, &rep);
}

static void decode_scan(sx_op *op, const uint8_t *p, size_t n)
{
    msg_SCAN_rep rep = { 0 };
    op->rc = msg_decode_rep(MSG_SCAN, p, n, &rep, op->errmsg, sizeof op->errmsg);
    if (!op->rc && (op->rc = cl_result_make(&rep.items, rep.token, &op->result)))
        snprintf(op->errmsg, sizeof op->errmsg, "malformed scan reply");
    msg_free_rep(MSG_SCAN, &rep);
}

void cl_async_decode(sx_op *op, const uint8_t *p, size_t n)
{
    op->errmsg[0] = '\0';
    switch (op->t) {
    case MSG_PUT: decode_put(op, p, n); break;
    case MSG_GET: decode_get(op, p, n); break;
    case MSG_DELETE: decode_delete(op, p, n); break;
    case MSG_QUERY: decode_query(op, p, n); break;
    case MSG_SCAN: decode_scan(op, p, n); break;
    default:
        op->rc = SX_EINTERNAL;
        snprintf(op->errmsg, sizeof op->errmsg, "unexpected operation");
        break;
    }
}

/* ---- readers ---- */

int sx_op_status(const sx_op *op)
{
    return op ? op->rc : SX_EINVAL;
}

const char *sx_op_errmsg(const sx_op *op)
{
    return op ? op->errmsg : "no operation";
}

size_t sx_op_nversions(const sx_op *op)
{
    return op ? op->nversions : 0;
}

uint64_t sx_op_version(const sx_op *op, size_t i)
{
    return op && i < op->nversions ? op->versions[i] : 0;
}

sx_item *sx_op_take_item(sx_op *op)
{
    if (!op)
        return NULL;
    sx_item *it = op->item;
    op->item = NULL;
    return it;
}

sx_result *sx_op_take_result(sx_op *op)
{
    if (!op)
        return NULL;
    sx_result *r = op->result;
    op->result = NULL;
    return r;
}
