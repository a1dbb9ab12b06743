/*
 * qindex.c — queries on a secondary index: the query's tuple range names a
 * contiguous run of index partitions (cfg_index_range); each is read in
 * order (reverse for descending) with I_RANGE pages clipped to its bounds
 * (from its leader: a partition of several replicas is walked, leader.h),
 * and each page's entries go to qfetch.c (facts, verification) until the
 * limit is reached or the range ends. Strong reads first wait for the
 * index to catch up (strong.c).
 */
#include <stdlib.h>
#include <string.h>

#include "query.h"
#include "qfetch.h"
#include "item.h"
#include "sx_errors.h"

/* An I_RANGE page shorter than asked is the end of the partition's range,
 * unless the node stopped at its reply byte budget (8 MiB in
 * node/index/index_read.c); a page holding this many bytes is treated as cut
 * short and read on (at worst one extra, empty page). */
#define RT_IRANGE_CUT_BYTES (4u * 1024u * 1024u)
#define RT_IRANGE_MAX_LIMIT 1000
#define RT_IRANGE_MARGIN 8

int rt_q_index_range(rt_query *qc, rt_err *e)
{
    const msg_QUERY_req *q = qc->q;
    const cat_index *ix = qc->ix;
    tup_bytes base = { 0 };
    uint32_t k = 0;
    int rc;

    rc = rt_eq_encode(q->eq, ix->nattrs, &base, &k, e);
    if (rc != 0)
        goto out;
    if (k == ix->nattrs && q->cond != Q_COND_NONE) {
        rc = rt_errf(e, SX_EINVAL,
                     "eq gives all %u attributes of index '%s': no "
                     "attribute is left for a condition",
                     k, ix->name);
        goto out;
    }
    rc = rt_range_build(base.p, base.n, q->cond, q->from, q->to, q->prefix,
                        k < ix->nattrs ? ix->attrs[k] : ix->name, &qc->range, e);
out:
    tup_bytes_free(&base);
    return rc;
}

/* Checks an I_RANGE reply's lists are parallel, its keys belong to the
 * index, lie in the range asked, [lo, hi) (hi empty: open), and move in the
 * query's direction: a faulty node's page could otherwise answer for
 * entries outside the query, or move the read back over ground covered. */
static int page_check(const rt_query *qc, const msg_I_RANGE_rep *r, const tup_bytes *lo,
                      const tup_bytes *hi, rt_err *e)
{
    uint32_t i, n = r->keys.n;

    if (r->hashes.n != n || r->versions.n != n || r->projs.n != n)
        return rt_errf(e, SX_EPROTO, "index node sent a malformed range page");
    for (i = 0; i < n; i++) {
        const mp_span *k = &r->keys.v[i];

        if (k->n <= 4 || be_get32(k->p) != qc->ix->id)
            return rt_errf(e, SX_EPROTO, "index node sent a key of another index");
        if (tup_keycmp(k->p, k->n, lo->p, lo->n) < 0 ||
            (hi->n > 0 && tup_keycmp(k->p, k->n, hi->p, hi->n) >= 0))
            return rt_errf(e, SX_EPROTO, "index node sent a key outside the range asked");
        if (i > 0) {
            int c = tup_keycmp(r->keys.v[i - 1].p, r->keys.v[i - 1].n, k->p, k->n);

            if (qc->desc ? c <= 0 : c >= 0)
                return rt_errf(e, SX_EPROTO, "index node sent keys out of order");
        }
    }
    return 0;
}

/* True when the index partition that sent page had applied, from every
 * storage partition, at least up to heads[k] (for cfg->storage[k]) before
 * it read the page: its entries are then the facts' current state. */
static bool page_fresh(const rt_query *qc, const msg_I_RANGE_rep *page, const uint64_t *heads)
{
    const cfg_cluster *cfg = qc->rt->cfg;

    if (page->sources.n == 0 || page->sources.n != page->wms.n)
        return false;
    for (int k = 0; k < cfg->nstorage; k++) {
        uint64_t wm = 0;
        for (uint32_t i = 0; i < page->sources.n; i++)
            if (page->sources.v[i] == cfg->storage[k].id)
                wm = page->wms.v[i];
        if (heads[k] != 0 && wm < heads[k])
            return false;
    }
    return true;
}

/* One I_RANGE page on part over [lo, hi) (index-local keys). On return
 * *done tells whether the partition's range is exhausted; lo/hi are moved
 * past the page. */
static int read_page(rt_query *qc, const cfg_part *part, bool covering, tup_bytes *lo,
                     tup_bytes *hi, bool *done, rt_err *e)
{
    static const uint8_t zero = 0;
    const cfg_cluster *cfg = qc->rt->cfg;
    msg_I_RANGE_req req;
    msg_I_RANGE_rep rep;
    msg_S_HEADS_req hreq;
    uint32_t ask, i, n, used = 0;
    size_t bytes = 0;
    int nheads = 0, rc;
    rt_rpc *calls = calloc((size_t)cfg->nnodes + 1, sizeof(*calls));
    msg_S_HEADS_rep *hreps = calloc((size_t)cfg->nnodes + 1, sizeof(*hreps));
    uint64_t *heads = calloc((size_t)cfg->nstorage + 1, sizeof(*heads));
    bool *got = calloc((size_t)cfg->nstorage + 1, sizeof(*got));

    memset(&hreq, 0, sizeof(hreq));
    if (calls == NULL || hreps == NULL) {
        free(calls);
        free(hreps);
        free(heads);
        free(got);
        return rt_errf(e, SX_ENOMEM, "out of memory");
    }

    /* Stale hits are dropped, so a verifying read asks for a margin more
     * than it needs (the surplus stays unconsumed: the token resumes at
     * the last entry used); a covering read cannot lose entries. */
    ask = qc->limit - qc->nres;
    if (!covering)
        ask += ask / 4 + RT_IRANGE_MARGIN;
    if (ask > RT_IRANGE_MAX_LIMIT)
        ask = RT_IRANGE_MAX_LIMIT;
    memset(&req, 0, sizeof(req));
    memset(&rep, 0, sizeof(rep));
    req.part = part->id;
    req.lo = (mp_span){ lo->p, lo->n };
    req.hi = (mp_span){ hi->p, hi->n };
    req.desc = qc->desc;
    req.limit = ask;
    calls[0].part = part; /* to its leader (walked when it has several replicas) */
    calls[0].type = MSG_I_RANGE;
    calls[0].req = &req;
    calls[0].rep = &rep;
    /* A verified read through an index that projects what is asked also
     * takes every storage partition's head, in the same round trip: if the
     * page's watermarks have reached them, the page is current and answers
     * alone; else its hits are checked against their facts. */
    if (!covering && qc->projectable && heads != NULL && got != NULL)
        nheads = rt_heads_calls(qc->rt, &hreq, calls + 1, hreps);
    rc = rt_rpc_run(qc->rt, calls, 1 + nheads);
    if (rc != 0) {
        rc = rt_errf(e, rc, "out of memory");
        goto out;
    }
    if (calls[0].err != 0) {
        rc = rt_rpc_fail(qc->rt, &calls[0], e);
        goto out;
    }
    if (nheads > 0) {
        rt_err ignored;
        /* a storage node that cannot answer, or a replicated partition
         * no node reported as its leader, only costs the shortcut */
        if (rt_heads_collect(qc->rt, calls + 1, hreps, nheads, heads, got, &ignored) == 0 &&
            rt_heads_missing(qc->rt, got) < 0 && page_fresh(qc, &rep, heads))
            covering = true;
    }
    if ((rc = page_check(qc, &rep, lo, hi, e)) != 0)
        goto out;
    n = rep.keys.n;
    if (n > ask) {
        rc = rt_errf(e, SX_EPROTO,
                     "index partition %llu sent %u entries for a "
                     "limit of %u",
                     (unsigned long long)part->id, n, ask);
        goto out;
    }
    qc->entries += n;
    rc = rt_qfetch_page(qc, &rep, covering, &used, e);
    if (rc != 0 || n == 0) {
        *done = true;
        goto out;
    }
    if (used == 0) { /* cannot happen: read only while below the limit */
        rc = rt_errf(e, SX_EINTERNAL, "index page consumed no entry");
        goto out;
    }
    for (i = 0; i < n; i++)
        bytes += rep.keys.v[i].n + rep.projs.v[i].n;
    /* entries left unconsumed mean the partition has more */
    *done = used == n && n < ask && bytes < RT_IRANGE_CUT_BYTES;
    {
        const mp_span *k = &rep.keys.v[used - 1];
        tup_bytes *b = qc->desc ? hi : lo;
        rc = rt_q_mark(qc, k->p + 4, k->n - 4);
        b->n = 0;
        if (rc == 0 && (tup_bytes_append(b, k->p, k->n) != 0 ||
                        (!qc->desc && tup_bytes_append(b, &zero, 1) != 0)))
            rc = SX_ENOMEM;
        if (rc != 0)
            rc = rt_errf(e, rc, "out of memory");
    }
out:
    rt_rpc_release(calls, 1 + nheads);
    free(calls);
    free(hreps);
    free(heads);
    free(got);
    return rc;
}

/* Reads index partition part (clipped to the query) until the limit or
 * its end; *done as in read_page. */
static int read_part(rt_query *qc, const cfg_part *part, bool covering, bool *done, rt_err *e)
{
    tup_bytes lo = { 0 }, hi = { 0 };
    int rc;

    *done = false;
    rc = rt_range_clip(&qc->cur, part, qc->ix->id, &lo, &hi);
    if (rc < 0) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    if (rc == 0) {
        *done = true;
        goto out;
    }
    rc = rt_ids_add(&qc->index_parts, part->id);
    if (rc != 0) {
        rc = rt_errf(e, rc, "out of memory");
        goto out;
    }
    while (rc == 0 && !*done && qc->nres < qc->limit)
        rc = read_page(qc, part, covering, &lo, &hi, done, e);
out:
    tup_bytes_free(&lo);
    tup_bytes_free(&hi);
    return rc;
}

int rt_q_index(rt_query *qc, rt_err *e)
{
    const cfg_cluster *cfg = qc->rt->cfg;
    const msg_QUERY_req *q = qc->q;
    int first = 0, count = 0, j, rc;
    bool done = true;

    cfg_index_range(cfg, qc->cur.lo.p, qc->cur.lo.n, qc->cur.hi.p,
                    qc->cur.hi_open ? 0 : qc->cur.hi.n, &first, &count);
    qc->projectable = item_covers(qc->t, qc->ix, qc->attrs, qc->nattrs);
    qc->covering = q->consistency == Q_EVENTUAL && qc->projectable;
    qc->projectable = qc->projectable && q->consistency != Q_EVENTUAL;
    if (q->consistency == Q_STRONG) {
        rc = rt_strong_wait(qc->rt, first, count,
                            q->timeout_ms ? q->timeout_ms : RT_STRONG_DEFAULT_MS, e);
        if (rc != 0)
            return rc;
    }
    for (j = 0; j < count && qc->nres < qc->limit; j++) {
        int pi = qc->desc ? first + count - 1 - j : first + j;
        rc = read_part(qc, &cfg->index[pi], qc->covering, &done, e);
        if (rc != 0)
            return rc;
        if (!done)
            break;
    }
    /* Ended (every covering partition read to its end) only when the loop
     * ran out of partitions, not when the limit stopped it. */
    qc->exhausted = j >= count && done;
    return 0;
}
