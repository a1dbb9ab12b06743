/*
 * query.c — QUERY: validates the request, finds the table (and index),
 * builds the key range, resumes it from a continuation token, runs the
 * primary or secondary path, and encodes the page with its new token.
 */
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "token.h"
#include "item.h"
#include "sx_errors.h"

int rt_ids_add(rt_ids *s, uint64_t id)
{
    uint32_t i;

    for (i = 0; i < s->n; i++)
        if (s->v[i] == id)
            return 0;
    if (s->n == s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 8;
        uint64_t *nv = realloc(s->v, nc * sizeof(*nv));
        if (nv == NULL)
            return SX_ENOMEM;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = id;
    return 0;
}

int rt_q_add(rt_query *qc, const uint8_t *item, size_t n)
{
    int rc;

    if (qc->nres == qc->cap) {
        uint32_t nc = qc->cap ? qc->cap * 2 : 64;
        size_t *no = realloc(qc->off, nc * sizeof(*no));
        if (no == NULL)
            return SX_ENOMEM;
        qc->off = no;
        qc->cap = nc;
    }
    qc->off[qc->nres] = qc->acc.sb.size;
    if (qc->nattrs > 0) {
        rc = item_select(qc->t, item, n, qc->attrs, qc->nattrs, &qc->acc);
        if (rc != 0)
            return rc;
    } else {
        mp_put_raw(&qc->acc, item, n); /* one whole value: see query.h */
    }
    if (qc->acc.oom)
        return SX_ENOMEM;
    qc->nres++;
    if (qc->acc.sb.size >= RT_REPLY_BYTES)
        qc->limit = qc->nres; /* page full: end it here, with a token */
    return 0;
}

int rt_q_mark(rt_query *qc, const uint8_t *key, size_t n)
{
    qc->last.n = 0;
    return tup_bytes_append(&qc->last, key, n) != 0 ? SX_ENOMEM : 0;
}

/* Copies the request's attribute names into C strings. */
static int attrs_dup(rt_query *qc, rt_err *e)
{
    const msg_spans *a = &qc->q->attrs;
    uint32_t i;

    if (a->n == 0)
        return 0;
    if (a->n > 1024)
        return rt_errf(e, SX_EINVAL, "too many attrs (%u)", a->n);
    qc->attrs = calloc(a->n, sizeof(char *));
    if (qc->attrs == NULL)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    for (i = 0; i < a->n; i++) {
        if (a->v[i].n == 0 || a->v[i].n > CAT_MAX_NAME)
            return rt_errf(e, SX_EINVAL, "attrs[%u] is not a valid attribute name", i);
        qc->attrs[i] = malloc(a->v[i].n + 1);
        if (qc->attrs[i] == NULL)
            return rt_errf(e, SX_ENOMEM, "out of memory");
        qc->nattrs = i + 1;
        memcpy(qc->attrs[i], a->v[i].p, a->v[i].n);
        qc->attrs[i][a->v[i].n] = '\0';
    }
    return 0;
}

/* The token binding of this query. */
static rt_tokctx tok_ctx(const rt_query *qc)
{
    rt_tokctx c;

    memset(&c, 0, sizeof(c));
    c.kind = RT_TOK_QUERY;
    c.table_id = qc->t->id;
    c.index_id = qc->ix != NULL ? qc->ix->id : 0;
    c.desc = qc->desc;
    c.lo = (mp_span){ qc->range.lo.p, qc->range.lo.n };
    c.hi = (mp_span){ qc->range.hi.p, qc->range.hi_open ? 0 : qc->range.hi.n };
    return c;
}

/* Sets qc->cur to qc->range, narrowed by the request's token if any. */
static int apply_token(rt_query *qc, rt_err *e)
{
    rt_tokctx c = tok_ctx(qc);
    mp_span *pos = NULL;
    uint32_t npos = 0;
    int rc;

    qc->cur.hi_open = qc->range.hi_open;
    if (tup_bytes_append(&qc->cur.lo, qc->range.lo.p, qc->range.lo.n) != 0 ||
        tup_bytes_append(&qc->cur.hi, qc->range.hi.p, qc->range.hi.n) != 0)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    if (qc->q->token.n == 0)
        return 0;
    rc = rt_token_open(qc->rt->cfg->token_key, &c, qc->q->token.p, qc->q->token.n, &pos, &npos);
    if (rc == 0 && npos != 1)
        rc = SX_ETOKEN;
    if (rc == 0)
        rc = rt_range_resume(&qc->cur, pos[0].p, pos[0].n, qc->desc);
    free(pos);
    if (rc == SX_ETOKEN)
        return rt_errf(e, rc,
                       "continuation token is invalid, tampered with, or "
                       "belongs to another query");
    if (rc != 0)
        return rt_errf(e, rc, "out of memory");
    return 0;
}

/* Validates the request and finds its table/index and range. */
static int plan(rt_query *qc, rt_err *e)
{
    const msg_QUERY_req *q = qc->q;
    const cat_catalog *cat;
    int rc;

    /* A page holds at most RT_QUERY_MAX_LIMIT items; a larger limit gets a
     * full page and a token (the limit is "at most", per page). */
    qc->limit = q->limit == 0                   ? RT_QUERY_DEFAULT_LIMIT
                : q->limit > RT_QUERY_MAX_LIMIT ? RT_QUERY_MAX_LIMIT
                                                : (uint32_t)q->limit;
    qc->desc = q->desc != 0;
    if (q->consistency > Q_STRONG)
        return rt_errf(e, SX_EINVAL,
                       "consistency must be 0 (eventual), 1 (verified) "
                       "or 2 (strong), got %llu",
                       (unsigned long long)q->consistency);
    if ((rc = attrs_dup(qc, e)) != 0)
        return rc;
    if (q->index.n == 0 || mp_span_eq_cstr(q->index, "primary")) {
        if ((rc = rt_table(qc->rt, q->table, &cat, &qc->t, e)) != 0)
            return rc;
        rc = rt_q_primary_range(qc, e);
    } else {
        rc = rt_index(qc->rt, q->table, q->index, &cat, &qc->t, &qc->ix, e);
        if (rc != 0)
            return rc;
        /* The cache only learns of a finished backfill by refreshing. */
        if (qc->ix->state != CAT_READY && catcache_refresh(qc->rt->cc) == 0 &&
            (rc = rt_index(qc->rt, q->table, q->index, &cat, &qc->t, &qc->ix, e)) != 0)
            return rc;
        if (qc->ix->state != CAT_READY)
            return rt_errf(e, SX_ENOTREADY,
                           "index '%s' on table '%s' is still "
                           "building",
                           qc->ix->name, qc->t->name);
        rc = rt_q_index_range(qc, e);
    }
    if (rc != 0)
        return rc;
    return apply_token(qc, e);
}

/* Encodes the page: items, token, touched partitions, counters. */
static int reply(rt_query *qc, mp_buf *out, rt_err *e)
{
    msg_QUERY_rep rep;
    mp_span *items = NULL;
    uint8_t *tok = NULL;
    size_t tokn = 0;
    uint32_t i;
    int rc = 0;

    memset(&rep, 0, sizeof(rep));
    items = calloc((size_t)qc->nres + 1, sizeof(*items));
    if (items == NULL || qc->acc.oom)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    for (i = 0; i < qc->nres; i++) {
        size_t end = i + 1 < qc->nres ? qc->off[i + 1] : qc->acc.sb.size;
        items[i].p = (const uint8_t *)qc->acc.sb.data + qc->off[i];
        items[i].n = end - qc->off[i];
    }
    if (!qc->exhausted && qc->last.n > 0) {
        rt_tokctx c = tok_ctx(qc);
        mp_span pos = { qc->last.p, qc->last.n };
        rc = rt_token_seal(qc->rt->cfg->token_key, &c, &pos, 1, &tok, &tokn);
        if (rc != 0) {
            free(items);
            return rt_errf(e, rc, "cannot make a continuation token");
        }
    }
    rep.items = (msg_spans){ qc->nres, items };
    rep.token = (mp_span){ tok, tokn };
    rep.index_parts = (msg_u64s){ qc->index_parts.n, qc->index_parts.v };
    rep.fact_parts = (msg_u64s){ qc->fact_parts.n, qc->fact_parts.v };
    rep.entries = qc->entries;
    rep.stale = qc->stale;
    /* covering: answered from the index alone (a covering eventual read,
     * or verified/strong pages the index proved current) */
    rep.covering = qc->covering || (qc->projectable && !qc->fetched);
    if (msg_encode_rep(MSG_QUERY, &rep, out) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
    free(tok);
    free(items);
    return rc;
}

static void query_free(rt_query *qc)
{
    uint32_t i;

    for (i = 0; i < qc->nattrs; i++)
        free(qc->attrs[i]);
    free(qc->attrs);
    rt_range_free(&qc->range);
    rt_range_free(&qc->cur);
    mp_buf_free(&qc->acc);
    free(qc->off);
    tup_bytes_free(&qc->last);
    free(qc->index_parts.v);
    free(qc->fact_parts.v);
}

int rt_h_query(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_QUERY_req q;
    rt_query qc;
    int rc;

    rc = msg_decode_req(MSG_QUERY, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed QUERY request");
    memset(&qc, 0, sizeof(qc));
    mp_buf_init(&qc.acc);
    qc.rt = rt;
    qc.q = &q;
    rc = plan(&qc, e);
    if (rc == 0 && rt_range_empty(&qc.cur))
        qc.exhausted = true;
    else if (rc == 0 && qc.ix == NULL)
        rc = rt_q_primary(&qc, e);
    else if (rc == 0)
        rc = rt_q_index(&qc, e);
    if (rc == 0)
        rc = reply(&qc, out, e);
    query_free(&qc);
    msg_free_req(MSG_QUERY, &q);
    return rc;
}
