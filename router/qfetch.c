/*
 * qfetch.c — from index entries to results (see qfetch.h). An entry's key
 * is index id (4 BE) | indexed values | pk; its fact is fetched by the
 * fact-local key h (8 BE) | pk from the storage partition owning h.
 */
#include <stdlib.h>
#include <string.h>

#include "qfetch.h"
#include "hash.h"
#include "item.h"
#include "sx_errors.h"

/* Keys per S_GET: the reply must fit the 16 MiB frame even when every
 * item has the maximum size (40 x 400 KiB + overhead < 16 MiB); a group
 * with more keys is split into several calls, all run in parallel. */
#define RT_SGET_MAX_KEYS 40

/* The page's fact fetch: per entry its group (storage partition index in
 * cfg->storage) and slot in that group's key list; per group one call per
 * RT_SGET_MAX_KEYS keys (the group's first is call_of[group]). */
typedef struct fetch {
    uint32_t n;
    tup_bytes arena; /* fact-local keys, concatenated */
    size_t *koff, *klen;
    int *grp;
    uint32_t *slot;
    int nst;         /* cfg->nstorage */
    uint32_t *cnt;   /* keys per group */
    int *call_of;    /* group -> call index, -1 when none */
    mp_span **gkeys; /* group -> its keys */
    msg_S_GET_req *reqs;
    msg_S_GET_rep *reps;
    rt_rpc *calls;
    int ncalls;
} fetch;

static void fetch_free(fetch *f)
{
    int g;

    if (f->calls != NULL)
        rt_rpc_release(f->calls, f->ncalls);
    if (f->gkeys != NULL)
        for (g = 0; g < f->nst; g++)
            free(f->gkeys[g]);
    free(f->gkeys);
    free(f->calls);
    free(f->reqs);
    free(f->reps);
    free(f->call_of);
    free(f->cnt);
    free(f->slot);
    free(f->grp);
    free(f->klen);
    free(f->koff);
    tup_bytes_free(&f->arena);
}

static int fetch_alloc(fetch *f, uint32_t n, int nst)
{
    f->n = n;
    f->nst = nst;
    f->koff = calloc(n + 1, sizeof(*f->koff));
    f->klen = calloc(n + 1, sizeof(*f->klen));
    f->grp = calloc(n + 1, sizeof(*f->grp));
    f->slot = calloc(n + 1, sizeof(*f->slot));
    f->cnt = calloc((size_t)nst, sizeof(*f->cnt));
    f->call_of = calloc((size_t)nst, sizeof(*f->call_of));
    f->gkeys = calloc((size_t)nst, sizeof(*f->gkeys));
    f->reqs = calloc((size_t)nst + n / RT_SGET_MAX_KEYS + 1, sizeof(*f->reqs));
    f->reps = calloc((size_t)nst + n / RT_SGET_MAX_KEYS + 1, sizeof(*f->reps));
    f->calls = calloc((size_t)nst + n / RT_SGET_MAX_KEYS + 1, sizeof(*f->calls));
    if (!f->koff || !f->klen || !f->grp || !f->slot || !f->cnt || !f->call_of || !f->gkeys ||
        !f->reqs || !f->reps || !f->calls)
        return SX_ENOMEM;
    return 0;
}

/* Derives every entry's fact-local key and group. */
static int fetch_keys(fetch *f, const rt_query *qc, const msg_I_RANGE_rep *page, rt_err *e)
{
    const cfg_cluster *cfg = qc->rt->cfg;
    uint32_t i;

    for (i = 0; i < f->n; i++) {
        const uint8_t *tup = page->keys.v[i].p + 4;
        size_t tn = page->keys.v[i].n - 4, hl = 0;
        uint64_t h = page->hashes.v[i];
        uint8_t hb[8];

        if (tup_split(tup, tn, qc->ix->nattrs, &hl) != 0 || hl >= tn)
            return rt_errf(e, SX_EPROTO, "index entry %u has a malformed key", i);
        be_put64(hb, h);
        f->koff[i] = f->arena.n;
        if (tup_bytes_append(&f->arena, hb, 8) != 0 ||
            tup_bytes_append(&f->arena, tup + hl, tn - hl) != 0)
            return rt_errf(e, SX_ENOMEM, "out of memory");
        f->klen[i] = f->arena.n - f->koff[i];
        f->grp[i] = (int)(cfg_storage_for(cfg, h) - cfg->storage);
        f->slot[i] = f->cnt[f->grp[i]]++;
    }
    return 0;
}

/* Builds the S_GETs of one group (its keys in chunks). */
static void group_calls(fetch *f, const rt_query *qc, int g)
{
    const cfg_cluster *cfg = qc->rt->cfg;
    uint32_t off;

    f->call_of[g] = f->ncalls;
    for (off = 0; off < f->cnt[g]; off += RT_SGET_MAX_KEYS) {
        int m = f->ncalls++;
        uint32_t k = f->cnt[g] - off;
        if (k > RT_SGET_MAX_KEYS)
            k = RT_SGET_MAX_KEYS;
        f->reqs[m].part = cfg->storage[g].id;
        f->reqs[m].table_id = qc->t->id;
        f->reqs[m].keys = (msg_spans){ k, f->gkeys[g] + off };
        f->calls[m].part = &cfg->storage[g];
        f->calls[m].type = MSG_S_GET;
        f->calls[m].req = &f->reqs[m];
        f->calls[m].rep = &f->reps[m];
    }
}

/* Builds the S_GETs of every group and runs them in parallel. */
static int fetch_run(fetch *f, rt_query *qc, rt_err *e)
{
    const cfg_cluster *cfg = qc->rt->cfg;
    uint32_t i;
    int g, rc;

    for (g = 0; g < f->nst; g++) {
        f->call_of[g] = -1;
        if (f->cnt[g] == 0)
            continue;
        f->gkeys[g] = calloc(f->cnt[g], sizeof(mp_span));
        if (f->gkeys[g] == NULL)
            return rt_errf(e, SX_ENOMEM, "out of memory");
    }
    for (i = 0; i < f->n; i++)
        f->gkeys[f->grp[i]][f->slot[i]] = (mp_span){ f->arena.p + f->koff[i], f->klen[i] };
    for (g = 0; g < f->nst; g++) {
        if (f->cnt[g] == 0)
            continue;
        group_calls(f, qc, g);
        if (rt_ids_add(&qc->fact_parts, cfg->storage[g].id) != 0)
            return rt_errf(e, SX_ENOMEM, "out of memory");
    }
    rc = rt_rpc_run(qc->rt, f->calls, f->ncalls);
    if (rc != 0)
        return rt_errf(e, rc, "out of memory");
    for (g = 0; g < f->ncalls; g++) {
        if (f->calls[g].err != 0)
            return rt_rpc_fail(qc->rt, &f->calls[g], e);
        if (f->reps[g].items.n != f->reqs[g].keys.n)
            return rt_errf(e, SX_EPROTO,
                           "storage partition %llu answered %u of %u "
                           "keys",
                           (unsigned long long)f->reqs[g].part, f->reps[g].items.n,
                           f->reqs[g].keys.n);
    }
    return 0;
}

/* True when the fact still carries the entry's index tuple. */
static int fact_matches(const rt_query *qc, const mp_span *item, const mp_span *key, bool *match)
{
    tup_bytes cur = { 0 };
    int rc = item_index_tuple(qc->t, qc->ix, item->p, item->n, &cur);

    *match = false;
    if (rc == SX_ENOTFOUND || rc == SX_EKEY)
        rc = 0;
    else if (rc == 0)
        *match = tup_keycmp(cur.p, cur.n, key->p + 4, key->n - 4) == 0;
    tup_bytes_free(&cur);
    return rc;
}

/* Merges the facts back in index order into the results, until the limit;
 * *used = entries consumed. */
static int fetch_merge(fetch *f, rt_query *qc, const msg_I_RANGE_rep *page, uint32_t *used,
                       rt_err *e)
{
    bool verify = qc->q->consistency != Q_EVENTUAL;
    uint32_t i;
    int rc;

    for (i = 0; i < f->n && qc->nres < qc->limit; i++) {
        *used = i + 1;
        const msg_S_GET_rep *r = &f->reps[f->call_of[f->grp[i]] + f->slot[i] / RT_SGET_MAX_KEYS];
        const mp_span *item = &r->items.v[f->slot[i] % RT_SGET_MAX_KEYS];
        bool ok = !rt_raw_nil(*item);

        if (ok && verify) {
            rc = fact_matches(qc, item, &page->keys.v[i], &ok);
            if (rc != 0)
                return rt_errf(e, rc,
                               "cannot verify index entry %u against its "
                               "fact: %s",
                               i, sx_strerror(rc));
        }
        if (!ok) {
            qc->stale++;
            continue;
        }
        rc = rt_q_add(qc, item->p, item->n);
        if (rc != 0)
            return rt_errf(e, rc, "cannot take a fact: %s", sx_strerror(rc));
    }
    return 0;
}

/* Covering eventual read: the projections are the results. */
static int take_projections(rt_query *qc, const msg_I_RANGE_rep *page, uint32_t *used, rt_err *e)
{
    uint32_t i;
    int rc;

    for (i = 0; i < page->projs.n && qc->nres < qc->limit; i++) {
        const mp_span *pr = &page->projs.v[i];
        *used = i + 1;
        if (rt_raw_nil(*pr))
            return rt_errf(e, SX_EPROTO, "index entry %u has no projection", i);
        rc = rt_q_add(qc, pr->p, pr->n);
        if (rc != 0)
            return rt_errf(e, rc, "cannot take projection %u: %s", i, sx_strerror(rc));
    }
    return 0;
}

int rt_qfetch_page(rt_query *qc, const msg_I_RANGE_rep *page, bool covering, uint32_t *used,
                   rt_err *e)
{
    fetch f;
    int rc;

    *used = 0;
    if (page->keys.n == 0)
        return 0;
    if (covering)
        return take_projections(qc, page, used, e);
    qc->fetched = true;
    memset(&f, 0, sizeof(f));
    rc = fetch_alloc(&f, page->keys.n, qc->rt->cfg->nstorage);
    if (rc != 0)
        rc = rt_errf(e, rc, "out of memory");
    if (rc == 0)
        rc = fetch_keys(&f, qc, page, e);
    if (rc == 0)
        rc = fetch_run(&f, qc, e);
    if (rc == 0)
        rc = fetch_merge(&f, qc, page, used, e);
    fetch_free(&f);
    return rc;
}
