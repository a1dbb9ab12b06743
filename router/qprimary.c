/*
 * qprimary.c — queries on the primary key: every item of one partition key
 * lives in one fact partition, under fact-local keys h (8 BE) | tup(pk) |
 * tup(sk); a condition on the sort key is one contiguous range there, read
 * with S_RANGE pages until the limit or the range ends.
 */
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "hash.h"
#include "item.h"
#include "sx_errors.h"

int rt_q_primary_range(rt_query *qc, rt_err *e)
{
    const msg_QUERY_req *q = qc->q;
    tup_bytes pk = { 0 }, base = { 0 };
    uint8_t hb[8];
    uint32_t k = 0;
    int rc;

    rc = rt_eq_encode(q->eq, 1, &pk, &k, e);
    if (rc != 0)
        goto out;
    if (k != 1) {
        rc = rt_errf(e, SX_EINVAL, "a primary-key query needs eq = [value of '%s']", qc->t->pk);
        goto out;
    }
    if (q->cond != Q_COND_NONE && qc->t->sk == NULL) {
        rc = rt_errf(e, SX_EINVAL,
                     "table '%s' has no sort key: a primary-key query "
                     "on it takes no condition",
                     qc->t->name);
        goto out;
    }
    be_put64(hb, hash_shard(qc->rt->cfg->hash_key, pk.p, pk.n));
    if (tup_bytes_append(&base, hb, 8) != 0 || tup_bytes_append(&base, pk.p, pk.n) != 0) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    rc = rt_range_build(base.p, base.n, q->cond, q->from, q->to, q->prefix,
                        qc->t->sk != NULL ? qc->t->sk : qc->t->pk, &qc->range, e);
out:
    tup_bytes_free(&pk);
    tup_bytes_free(&base);
    return rc;
}

/* Takes one S_RANGE page's items into the results and notes where the
 * page stopped: `next`, or, when the reply budget cut the page short, the
 * key of the last item taken. *more is false once the range has ended. */
static int take_page(rt_query *qc, const msg_S_RANGE_rep *rep, bool *more, rt_err *e)
{
    tup_bytes key = { 0 };
    uint32_t i;
    int rc;

    for (i = 0; i < rep->items.n && qc->nres < qc->limit; i++) {
        rc = rt_q_add(qc, rep->items.v[i].p, rep->items.v[i].n);
        if (rc != 0)
            return rt_errf(e, rc, "cannot take item %u of a range page: %s", i, sx_strerror(rc));
    }
    qc->entries += i;
    *more = rep->next.n > 0;
    if (i > 0 && i < rep->items.n) {
        /* cut short: resume after the last item taken */
        const mp_span *it = &rep->items.v[i - 1];
        rc = rt_item_key(qc->rt, qc->t, it->p, it->n, &key);
        if (rc == 0)
            rc = rt_q_mark(qc, key.p, key.n);
        tup_bytes_free(&key);
        *more = true;
        return rc != 0 ? rt_errf(e, rc, "cannot read a returned item's key") : 0;
    }
    if (rep->next.n > 0 && rt_q_mark(qc, rep->next.p, rep->next.n) != 0)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    return 0;
}

int rt_q_primary(rt_query *qc, rt_err *e)
{
    const cfg_cluster *cfg = qc->rt->cfg;
    const cfg_part *part;
    msg_S_RANGE_req req;
    msg_S_RANGE_rep rep;
    rt_rpc c;
    bool more = false;
    int rc = 0;

    part = cfg_storage_for(cfg, be_get64(qc->cur.lo.p));
    if (rt_ids_add(&qc->fact_parts, part->id) != 0)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    while (qc->nres < qc->limit) {
        memset(&req, 0, sizeof(req));
        memset(&rep, 0, sizeof(rep));
        memset(&c, 0, sizeof(c));
        req.part = part->id;
        req.table_id = qc->t->id;
        req.lo = (mp_span){ qc->cur.lo.p, qc->cur.lo.n };
        req.hi = (mp_span){ qc->cur.hi.p, qc->cur.hi_open ? 0 : qc->cur.hi.n };
        req.desc = qc->desc;
        req.limit = qc->limit - qc->nres;
        c.part = part;
        c.type = MSG_S_RANGE;
        c.req = &req;
        c.rep = &rep;
        rc = rt_rpc_run(qc->rt, &c, 1);
        if (rc != 0)
            rc = rt_errf(e, rc, "out of memory");
        else if (c.err != 0)
            rc = rt_rpc_fail(qc->rt, &c, e);
        else
            rc = take_page(qc, &rep, &more, e);
        if (rc == 0 && !more)
            qc->exhausted = true;
        if (rc == 0 && !qc->exhausted)
            rc = rt_range_resume(&qc->cur, qc->last.p, qc->last.n, qc->desc);
        rt_rpc_release(&c, 1);
        if (rc == SX_ETOKEN)
            return rt_errf(e, SX_EINTERNAL, "storage returned a key outside the range");
        if (rc != 0 || qc->exhausted)
            return rc;
    }
    return 0;
}
