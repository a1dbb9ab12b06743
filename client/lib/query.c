/*
 * query.c — sx_query and sx_scan (one page each), sx_result, and the
 * continuation token's text form (the router's opaque bytes as base64url).
 */
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include "internal.h"
#include "catalog.h"

#define B64_VARIANT sodium_base64_VARIANT_URLSAFE_NO_PADDING

char *cl_b64_encode(const uint8_t *p, size_t n)
{
    size_t len = sodium_base64_encoded_len(n, B64_VARIANT);
    char *s = malloc(len);
    if (!s)
        return NULL;
    sodium_bin2base64(s, len, p, n, B64_VARIANT);
    return s;
}

int cl_b64_decode(const char *s, uint8_t **out, size_t *n)
{
    size_t slen = strlen(s);
    uint8_t *b = malloc(slen ? slen : 1);
    if (!b)
        return SX_ENOMEM;
    if (sodium_base642bin(b, slen ? slen : 1, s, slen, NULL, n, NULL, B64_VARIANT) != 0) {
        free(b);
        return SX_ETOKEN;
    }
    *out = b;
    return SX_OK;
}

/* ---- results ---- */

size_t sx_result_count(const sx_result *r)
{
    return r ? r->n : 0;
}

const sx_item *sx_result_item(const sx_result *r, size_t i)
{
    return r && i < r->n ? r->items[i] : NULL;
}

sx_item *sx_result_take(sx_result *r, size_t i)
{
    if (!r || i >= r->n)
        return NULL;
    sx_item *it = r->items[i];
    r->items[i] = NULL;
    return it;
}

const char *sx_result_token(const sx_result *r)
{
    return r ? r->token : NULL;
}

void sx_result_explain(const sx_result *r, sx_explain *out)
{
    memset(out, 0, sizeof *out);
    if (!r)
        return;
    out->index_parts = r->index_parts;
    out->nindex_parts = r->nindex_parts;
    out->fact_parts = r->fact_parts;
    out->nfact_parts = r->nfact_parts;
    out->entries = r->entries;
    out->stale = r->stale;
    out->covering = r->covering;
}

void sx_result_free(sx_result *r)
{
    if (!r)
        return;
    for (size_t k = 0; k < r->n; k++)
        sx_item_free(r->items[k]);
    free(r->items);
    free(r->token);
    free(r->index_parts);
    free(r->fact_parts);
    free(r);
}

int cl_copy_u64s(const msg_u64s *in, uint64_t **out, size_t *n)
{
    *n = 0;
    if (in->n == 0)
        return SX_OK;
    *out = malloc(in->n * sizeof **out);
    if (!*out)
        return SX_ENOMEM;
    memcpy(*out, in->v, in->n * sizeof **out);
    *n = in->n;
    return SX_OK;
}

/* Builds a result from a page of raw items and a token. */
int cl_result_make(const msg_spans *items, mp_span token, sx_result **out)
{
    sx_result *r = calloc(1, sizeof *r);
    if (!r)
        return SX_ENOMEM;
    int rc = SX_ENOMEM;
    r->items = calloc(items->n ? items->n : 1, sizeof *r->items);
    if (!r->items)
        goto fail;
    for (uint32_t k = 0; k < items->n; k++) {
        rc = cl_item_decode(items->v[k].p, items->v[k].n, &r->items[k]);
        if (rc)
            goto fail;
        r->n = k + 1;
    }
    if (token.n) {
        r->token = cl_b64_encode(token.p, token.n);
        if (!r->token) {
            rc = SX_ENOMEM;
            goto fail;
        }
    }
    *out = r;
    return SX_OK;
fail:
    sx_result_free(r);
    return rc;
}

/* ---- query ---- */

/* Encodes one caller-given scalar (or nil when v is NULL) into a malloc'd
 * span. */
static int value_bytes(const sx_value *v, uint8_t **p, size_t *n)
{
    mp_buf b;
    mp_buf_init(&b);
    int rc = SX_OK;
    if (!v)
        mp_put_nil(&b);
    else
        rc = cl_value_encode(v, &b);
    if (!rc)
        rc = mp_buf_take(&b, p, n);
    mp_buf_free(&b);
    return rc;
}

static int eq_bytes(const sx_value *eq, size_t neq, uint8_t **p, size_t *n)
{
    mp_buf b;
    mp_buf_init(&b);
    int rc = SX_OK;
    mp_put_array(&b, (uint32_t)neq);
    for (size_t k = 0; k < neq && !rc; k++)
        rc = cl_value_encode(&eq[k], &b);
    if (!rc)
        rc = mp_buf_take(&b, p, n);
    mp_buf_free(&b);
    return rc;
}

static int consistency_wire(sx_consistency c)
{
    switch (c) {
    case SX_EVENTUAL: return Q_EVENTUAL;
    case SX_STRONG: return Q_STRONG;
    case SX_CONSISTENCY_DEFAULT:
    case SX_VERIFIED: return Q_VERIFIED;
    }
    return -1;
}

/* Fills the request's encoded parts; the caller frees the spans. */
int cl_query_req_fill(sx_client *c, const sx_query_opts *o, msg_QUERY_req *req, uint8_t **tok)
{
    int rc;
    if ((o->from || o->to) && o->prefix)
        return cl_fail(c, SX_EINVAL, "a range and a prefix cannot be combined");
    if ((o->neq && !o->eq) || (o->nattrs && !o->attrs) || o->neq > CAT_MAX_ATTRS ||
        o->nattrs > MSG_MAX_LIST)
        return cl_fail(c, SX_EINVAL, "bad query options");
    int cons = consistency_wire(o->consistency);
    if (cons < 0)
        return cl_fail(c, SX_EINVAL, "bad consistency level");
    req->consistency = (uint64_t)cons;
    req->cond = o->prefix ? Q_COND_PREFIX : (o->from || o->to) ? Q_COND_RANGE : Q_COND_NONE;
    uint8_t *p;
    size_t n;
    if ((rc = eq_bytes(o->eq, o->neq, &p, &n)))
        return cl_fail(c, rc, "bad equality values");
    req->eq.p = p;
    req->eq.n = n;
    if ((rc = value_bytes(o->from, &p, &n)))
        return cl_fail(c, rc, "bad range start");
    req->from.p = p;
    req->from.n = n;
    if ((rc = value_bytes(o->to, &p, &n)))
        return cl_fail(c, rc, "bad range end");
    req->to.p = p;
    req->to.n = n;
    if (o->prefix) {
        req->prefix.p = (const uint8_t *)o->prefix;
        req->prefix.n = strlen(o->prefix);
    }
    req->limit = o->limit;
    req->desc = o->desc ? 1 : 0;
    req->timeout_ms = o->timeout_ms;
    if (o->nattrs) {
        req->attrs.v = calloc(o->nattrs, sizeof *req->attrs.v);
        if (!req->attrs.v)
            return cl_fail(c, SX_ENOMEM, "out of memory");
        for (size_t k = 0; k < o->nattrs; k++) {
            if (!o->attrs[k])
                return cl_fail(c, SX_EINVAL, "attribute %zu is NULL", k);
            req->attrs.v[k].p = (const uint8_t *)o->attrs[k];
            req->attrs.v[k].n = strlen(o->attrs[k]);
            req->attrs.n = (uint32_t)k + 1;
        }
    }
    if (o->token && *o->token) {
        if ((rc = cl_b64_decode(o->token, tok, &n)))
            return cl_fail(c, rc, "invalid continuation token");
        req->token.p = *tok;
        req->token.n = n;
    }
    return SX_OK;
}

int sx_query(sx_client *c, const char *table, const char *index, const sx_query_opts *opts,
             sx_result **out)
{
    if (!c || !out)
        return SX_EINVAL;
    if (!table || !index)
        return cl_fail(c, SX_EINVAL, "table and index are required");
    sx_query_opts none = { 0 };
    const sx_query_opts *o = opts ? opts : &none;
    msg_QUERY_req req = { 0 };
    msg_QUERY_rep rep = { 0 };
    uint8_t *frame = NULL, *tok = NULL;
    req.table.p = (const uint8_t *)table;
    req.table.n = strlen(table);
    req.index.p = (const uint8_t *)index;
    req.index.n = strlen(index);
    int rc = cl_query_req_fill(c, o, &req, &tok);
    if (rc)
        goto out;
    rc = cl_call(c, MSG_QUERY, &req, &rep, &frame, cl_query_wait_ms(o));
    if (rc)
        goto out;
    sx_result *r = NULL;
    rc = cl_result_make(&rep.items, rep.token, &r);
    if (!rc && !(rc = cl_copy_u64s(&rep.index_parts, &r->index_parts, &r->nindex_parts)))
        rc = cl_copy_u64s(&rep.fact_parts, &r->fact_parts, &r->nfact_parts);
    if (rc) {
        sx_result_free(r);
        cl_fail(c, rc, "malformed query reply");
    } else {
        r->entries = rep.entries;
        r->stale = rep.stale;
        r->covering = rep.covering != 0;
        *out = r;
    }
    msg_free_rep(MSG_QUERY, &rep);
out:
    free((void *)req.eq.p);
    free((void *)req.from.p);
    free((void *)req.to.p);
    free(req.attrs.v);
    free(tok);
    free(frame);
    return rc;
}

/* ---- scan ---- */

int sx_scan(sx_client *c, const char *table, const sx_item *where, uint64_t limit,
            const char *token, sx_result **out)
{
    if (!c || !out)
        return SX_EINVAL;
    if (!table)
        return cl_fail(c, SX_EINVAL, "table is required");
    msg_SCAN_req req = { 0 };
    msg_SCAN_rep rep = { 0 };
    uint8_t *frame = NULL, *tok = NULL, *wb = NULL;
    size_t n;
    int rc = cl_item_bytes(where, &wb, &n);
    if (rc)
        return cl_fail(c, rc, "out of memory");
    req.table = cl_cstr_buf(table);
    req.where.p = wb;
    req.where.n = n;
    req.limit = limit;
    if (token && *token) {
        if ((rc = cl_b64_decode(token, &tok, &n))) {
            cl_fail(c, rc, "invalid continuation token");
            goto out;
        }
        req.token.p = tok;
        req.token.n = n;
    }
    rc = cl_call(c, MSG_SCAN, &req, &rep, &frame, 0);
    if (rc)
        goto out;
    rc = cl_result_make(&rep.items, rep.token, out);
    if (rc)
        cl_fail(c, rc, "malformed scan reply");
    msg_free_rep(MSG_SCAN, &rep);
out:
    free(wb);
    free(tok);
    free(frame);
    return rc;
}

int cl_query_wait_ms(const sx_query_opts *o)
{
    if (o->consistency != SX_STRONG)
        return 0;
    if (o->timeout_ms == 0)
        return 5000;
    return o->timeout_ms > 60000 ? 60000 : (int)o->timeout_ms; /* router/query.h */
}
