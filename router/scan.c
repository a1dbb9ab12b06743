/*
 * scan.c — SCAN: every storage partition in parallel, each an S_RANGE over
 * the whole table with the server-side equality filter `where`, the page
 * limit shared among the partitions still running, the reply bounded to
 * RT_REPLY_BYTES. The continuation token holds one position per storage
 * partition, MAC'd and bound to the table and the filter: the last key it
 * examined, empty once it is done, or the single byte 0x00 for "not read
 * yet" (a page cut short by the byte budget). Fact-local keys are at least
 * 9 bytes, so the marker cannot be a key.
 */
#include <stdlib.h>
#include <string.h>

#include "router.h"
#include "range.h"
#include "token.h"
#include "tuple.h"
#include "sx_errors.h"

#define RT_SCAN_DEFAULT_LIMIT 1000
#define RT_SCAN_MAX_LIMIT 10000

/* Checks where is nil or a map of attribute names to scalars. */
static int where_check(mp_span w, rt_err *e)
{
    mp_cur c;
    uint32_t cnt, i;

    if (rt_raw_nil(w))
        return 0;
    c = mp_cur_make(w.p, w.n);
    if (mp_read_map(&c, &cnt) != 0)
        return rt_errf(e, SX_EINVAL,
                       "where must be a map of attribute names to "
                       "scalar values");
    for (i = 0; i < cnt; i++) {
        mp_span k;
        tup_bytes tmp = { 0 };
        int rc;
        if (mp_read_str(&c, &k) != 0 || k.n == 0 || k.n > CAT_MAX_NAME)
            return rt_errf(e, SX_EINVAL, "where: key %u is not an attribute name", i);
        rc = tup_encode_mp(&tmp, &c);
        tup_bytes_free(&tmp);
        if (rc == SX_ENOMEM)
            return rt_errf(e, rc, "out of memory");
        if (rc != 0)
            return rt_errf(e, SX_EINVAL,
                           "where: the value of '%.*s' must be a "
                           "scalar",
                           (int)k.n, (const char *)k.p);
    }
    return 0;
}

/* Per-request scan state. */
typedef struct scan_st {
    int nst;
    tup_bytes *pos; /* per storage partition: resume key */
    bool *done;
    msg_S_RANGE_req *reqs;
    msg_S_RANGE_rep *reps;
    rt_rpc *calls;
    int *part_of; /* call -> storage partition index */
    int ncalls;
} scan_st;

static void scan_free(scan_st *s)
{
    int i;

    if (s->calls != NULL)
        rt_rpc_release(s->calls, s->ncalls);
    if (s->pos != NULL)
        for (i = 0; i < s->nst; i++)
            tup_bytes_free(&s->pos[i]);
    free(s->pos);
    free(s->done);
    free(s->reqs);
    free(s->reps);
    free(s->calls);
    free(s->part_of);
}

/* Loads positions from the request's token (or starts every partition). */
static int scan_start(scan_st *s, router *rt, const rt_tokctx *ctx, mp_span tok, rt_err *e)
{
    static const uint8_t zero = 0;
    mp_span *pos = NULL;
    uint32_t npos = 0;
    int i, rc;

    if (tok.n == 0)
        return 0;
    rc = rt_token_open(rt->cfg->token_key, ctx, tok.p, tok.n, &pos, &npos);
    if (rc == 0 && npos != (uint32_t)s->nst)
        rc = SX_ETOKEN;
    for (i = 0; rc == 0 && i < s->nst; i++) {
        s->done[i] = pos[i].n == 0;
        if (pos[i].n == 1 && pos[i].p[0] == 0)
            continue; /* not read yet: from the start */
        if (!s->done[i] && (tup_bytes_append(&s->pos[i], pos[i].p, pos[i].n) != 0 ||
                            tup_bytes_append(&s->pos[i], &zero, 1) != 0))
            rc = SX_ENOMEM;
    }
    free(pos);
    if (rc == SX_ETOKEN)
        return rt_errf(e, rc,
                       "continuation token is invalid, tampered with, or "
                       "belongs to another scan");
    return rc != 0 ? rt_errf(e, rc, "out of memory") : 0;
}

/* Sends one S_RANGE per running partition. */
static int scan_run(scan_st *s, router *rt, const cat_table *t, mp_span where, uint32_t limit,
                    rt_err *e)
{
    int i, active = 0;
    uint32_t per;

    for (i = 0; i < s->nst; i++)
        active += !s->done[i];
    if (active == 0)
        return 0;
    per = (limit + (uint32_t)active - 1) / (uint32_t)active;
    for (i = 0; i < s->nst; i++) {
        int m = s->ncalls;
        if (s->done[i])
            continue;
        s->reqs[m].part = rt->cfg->storage[i].id;
        s->reqs[m].table_id = t->id;
        s->reqs[m].lo = (mp_span){ s->pos[i].p, s->pos[i].n };
        s->reqs[m].limit = per;
        s->reqs[m].where = rt_raw_nil(where) ? (mp_span){ NULL, 0 } : where;
        s->calls[m] = (rt_rpc){ .part = &rt->cfg->storage[i],
                                .type = MSG_S_RANGE,
                                .req = &s->reqs[m],
                                .rep = &s->reps[m] };
        s->part_of[m] = i;
        s->ncalls++;
    }
    if (rt_rpc_run(rt, s->calls, s->ncalls) != 0)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    for (i = 0; i < s->ncalls; i++)
        if (s->calls[i].err != 0)
            return rt_rpc_fail(rt, &s->calls[i], e);
    return 0;
}

/* Where partition index pi stands after a page that took `take` of the
 * `n` items its call returned: its `next` when all were taken; the key of
 * the last item taken; or, when none was, where it stood before. The key
 * is built in *key when needed. */
static int next_pos(const scan_st *s, router *rt, const cat_table *t, int ci, uint32_t take,
                    tup_bytes *key, mp_span *pos)
{
    static const uint8_t start = 0;
    const msg_S_RANGE_rep *r = &s->reps[ci];
    int pi = s->part_of[ci], rc;

    if (take == r->items.n) {
        *pos = r->next;
        return 0;
    }
    if (take > 0) {
        rc = rt_item_key(rt, t, r->items.v[take - 1].p, r->items.v[take - 1].n, key);
        *pos = (mp_span){ key->p, key->n };
        return rc;
    }
    if (s->pos[pi].n == 0)
        *pos = (mp_span){ &start, 1 };
    else /* s->pos holds "last key | 0x00" */
        *pos = (mp_span){ s->pos[pi].p, s->pos[pi].n - 1 };
    return 0;
}

/* Encodes the items of every call (in partition order, up to limit items
 * and the byte budget: each partition was asked for its share rounded up,
 * so together they may return a few more) and the next token. */
static int scan_reply(scan_st *s, router *rt, const cat_table *t, const rt_tokctx *ctx,
                      uint32_t limit, mp_buf *out, rt_err *e)
{
    msg_SCAN_rep rep;
    mp_span *items = NULL, *pos = NULL;
    tup_bytes *keys = NULL;
    uint32_t total = 0, k = 0, j;
    uint8_t *tok = NULL;
    size_t tokn = 0, bytes = 0;
    bool more = false, full = false;
    int i, rc = 0;

    for (i = 0; i < s->ncalls; i++)
        total += s->reps[i].items.n;
    items = calloc((size_t)total + 1, sizeof(*items));
    pos = calloc((size_t)s->nst + 1, sizeof(*pos));
    keys = calloc((size_t)s->nst + 1, sizeof(*keys));
    if (items == NULL || pos == NULL || keys == NULL) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    /* Partitions not called this time are done (their position is empty). */
    for (i = 0; i < s->ncalls; i++) {
        const msg_spans *v = &s->reps[i].items;
        for (j = 0; j < v->n && !full; j++) {
            if (k == limit || (k > 0 && bytes + v->v[j].n > RT_REPLY_BYTES)) {
                full = true;
                break;
            }
            bytes += v->v[j].n;
            items[k++] = v->v[j];
        }
        rc = next_pos(s, rt, t, i, full ? j : v->n, &keys[i], &pos[s->part_of[i]]);
        if (rc != 0) {
            rc = rt_errf(e, rc, "cannot read a returned item's key");
            goto out;
        }
        more = more || pos[s->part_of[i]].n > 0;
    }
    if (more &&
        (rc = rt_token_seal(rt->cfg->token_key, ctx, pos, (uint32_t)s->nst, &tok, &tokn)) != 0) {
        rc = rt_errf(e, rc, "cannot make a continuation token");
        goto out;
    }
    memset(&rep, 0, sizeof(rep));
    rep.items = (msg_spans){ k, items };
    rep.token = (mp_span){ tok, tokn };
    if (msg_encode_rep(MSG_SCAN, &rep, out) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
out:
    if (keys != NULL)
        for (i = 0; i < s->nst; i++)
            tup_bytes_free(&keys[i]);
    free(keys);
    free(tok);
    free(items);
    free(pos);
    return rc;
}

int rt_h_scan(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_SCAN_req q;
    const cat_catalog *cat;
    const cat_table *t;
    rt_tokctx ctx;
    scan_st s;
    uint32_t limit;
    int rc, ns = rt->cfg->nstorage;

    memset(&s, 0, sizeof(s));
    rc = msg_decode_req(MSG_SCAN, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed SCAN request");
    /* at most RT_SCAN_MAX_LIMIT items a page, whatever is asked */
    limit = q.limit == 0                  ? RT_SCAN_DEFAULT_LIMIT
            : q.limit > RT_SCAN_MAX_LIMIT ? RT_SCAN_MAX_LIMIT
                                          : (uint32_t)q.limit;
    if ((rc = where_check(q.where, e)) != 0 || (rc = rt_table(rt, q.table, &cat, &t, e)) != 0)
        goto out;
    memset(&ctx, 0, sizeof(ctx));
    ctx.kind = RT_TOK_SCAN;
    ctx.table_id = t->id;
    if (!rt_raw_nil(q.where))
        ctx.lo = q.where;
    s.nst = ns;
    s.pos = calloc((size_t)ns, sizeof(*s.pos));
    s.done = calloc((size_t)ns, sizeof(*s.done));
    s.reqs = calloc((size_t)ns, sizeof(*s.reqs));
    s.reps = calloc((size_t)ns, sizeof(*s.reps));
    s.calls = calloc((size_t)ns, sizeof(*s.calls));
    s.part_of = calloc((size_t)ns, sizeof(*s.part_of));
    if (!s.pos || !s.done || !s.reqs || !s.reps || !s.calls || !s.part_of) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    rc = scan_start(&s, rt, &ctx, q.token, e);
    if (rc == 0)
        rc = scan_run(&s, rt, t, q.where, limit, e);
    if (rc == 0)
        rc = scan_reply(&s, rt, t, &ctx, limit, out, e);
out:
    scan_free(&s);
    msg_free_req(MSG_SCAN, &q);
    return rc;
}
