/*
 * write.c — PUT: a batch of items. Each item's primary key and shard hash
 * are computed here with the table's schema; items are grouped by the
 * storage partition owning their hash and sent as one S_WRITE per
 * partition (carrying the router's catalog version), all in parallel. The
 * reply lists each item's new version in input order. Any item error fails
 * the request with a message naming the item's position; a partition that
 * finds the router's catalog stale is retried once after a refresh.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "router.h"
#include "hash.h"
#include "item.h"
#include "log.h"
#include "sx_errors.h"

/* A PUT's grouping: per item its partition index and slot there. */
typedef struct put_plan {
    uint32_t n;
    int nst;
    int *grp;
    uint32_t *slot;
    uint32_t *cnt;   /* items per partition index */
    int *first;      /* first item (input position) per partition */
    mp_span **objs;  /* per partition: its items */
    uint64_t **dels; /* per partition: zeros */
    int *call_of;    /* partition index -> call, -1 when none */
    msg_S_WRITE_req *reqs;
    msg_S_WRITE_rep *reps;
    rt_rpc *calls;
    int ncalls;
    uint64_t deadline; /* the client's (msg.h, deadline_ms), 0: none */
} put_plan;

static void plan_free(put_plan *pl)
{
    int g;

    if (pl->calls != NULL)
        rt_rpc_release(pl->calls, pl->ncalls);
    for (g = 0; g < pl->nst; g++) {
        if (pl->objs != NULL)
            free(pl->objs[g]);
        if (pl->dels != NULL)
            free(pl->dels[g]);
    }
    free(pl->objs);
    free(pl->dels);
    free(pl->grp);
    free(pl->slot);
    free(pl->cnt);
    free(pl->first);
    free(pl->call_of);
    free(pl->reqs);
    free(pl->reps);
    free(pl->calls);
}

static int plan_alloc(put_plan *pl, uint32_t n, int nst)
{
    pl->n = n;
    pl->nst = nst;
    pl->grp = calloc((size_t)n + 1, sizeof(*pl->grp));
    pl->slot = calloc((size_t)n + 1, sizeof(*pl->slot));
    pl->cnt = calloc((size_t)nst, sizeof(*pl->cnt));
    pl->first = calloc((size_t)nst, sizeof(*pl->first));
    pl->objs = calloc((size_t)nst, sizeof(*pl->objs));
    pl->dels = calloc((size_t)nst, sizeof(*pl->dels));
    pl->call_of = calloc((size_t)nst, sizeof(*pl->call_of));
    pl->reqs = calloc((size_t)nst, sizeof(*pl->reqs));
    pl->reps = calloc((size_t)nst, sizeof(*pl->reps));
    pl->calls = calloc((size_t)nst, sizeof(*pl->calls));
    return pl->grp && pl->slot && pl->cnt && pl->first && pl->objs && pl->dels && pl->call_of &&
                   pl->reqs && pl->reps && pl->calls
               ? 0
               : SX_ENOMEM;
}

int rt_put_place(router *rt, const cat_table *t, const mp_span *it, uint32_t i, int *g, rt_err *e)
{
    tup_bytes pk = { 0 };
    size_t pklen = 0;
    uint64_t h = 0;
    int rc;

    if (it->n > SX_MAX_ITEM)
        return rt_errf(e, SX_ETOOBIG, "item %u is %zu bytes; the limit is %d", i, it->n,
                       SX_MAX_ITEM);
    rc = item_validate(it->p, it->n);
    if (rc != 0)
        return rt_errf(e, rc,
                       "item %u is not a valid item (a map of "
                       "attribute names to values)",
                       i);
    rc = item_primary_key(t, it->p, it->n, &pk, &pklen);
    if (rc == 0)
        h = hash_shard(rt->cfg->hash_key, pk.p, pklen);
    if (rc == SX_EKEY) {
        char what[32];
        snprintf(what, sizeof(what), "item %u", i);
        rt_key_errf(e, t, pk.n, what);
    }
    tup_bytes_free(&pk);
    if (rc == SX_EKEY)
        return rc;
    if (rc != 0)
        return rt_errf(e, rc, "item %u: %s", i, sx_strerror(rc));
    *g = (int)(cfg_storage_for(rt->cfg, h) - rt->cfg->storage);
    return 0;
}

/* Checks every item and finds its partition. */
static int plan_items(put_plan *pl, router *rt, const cat_table *t, const msg_spans *items,
                      rt_err *e)
{
    uint32_t i;

    for (i = 0; i < pl->n; i++) {
        int rc = rt_put_place(rt, t, &items->v[i], i, &pl->grp[i], e);

        if (rc != 0)
            return rc;
        if (pl->cnt[pl->grp[i]] == 0)
            pl->first[pl->grp[i]] = (int)i;
        pl->slot[i] = pl->cnt[pl->grp[i]]++;
    }
    return 0;
}

/* Builds one S_WRITE per partition, each with the PUT's deadline (capped:
 * rt_write_deadline). */
static int plan_calls(put_plan *pl, router *rt, const cat_table *t, uint64_t catver,
                      const msg_PUT_req *q, rt_err *e)
{
    uint32_t i;
    int g;

    for (g = 0; g < pl->nst; g++) {
        pl->call_of[g] = -1;
        if (pl->cnt[g] == 0)
            continue;
        pl->objs[g] = calloc(pl->cnt[g], sizeof(mp_span));
        pl->dels[g] = calloc(pl->cnt[g], sizeof(uint64_t));
        if (pl->objs[g] == NULL || pl->dels[g] == NULL)
            return rt_errf(e, SX_ENOMEM, "out of memory");
    }
    for (i = 0; i < pl->n; i++)
        pl->objs[pl->grp[i]][pl->slot[i]] = q->items.v[i];
    for (g = 0; g < pl->nst; g++) {
        int m = pl->ncalls;
        if (pl->cnt[g] == 0)
            continue;
        pl->reqs[m].part = rt->cfg->storage[g].id;
        pl->reqs[m].catver = catver;
        pl->reqs[m].table_id = t->id;
        pl->reqs[m].dels = (msg_u64s){ pl->cnt[g], pl->dels[g] };
        pl->reqs[m].objs = (msg_spans){ pl->cnt[g], pl->objs[g] };
        pl->reqs[m].deadline_ms = rt_write_deadline(rt, q->deadline_ms);
        pl->calls[m] = (rt_rpc){ .part = &rt->cfg->storage[g],
                                 .type = MSG_S_WRITE,
                                 .req = &pl->reqs[m],
                                 .rep = &pl->reps[m] };
        pl->call_of[g] = m;
        pl->ncalls++;
    }
    return 0;
}

/* Runs the calls; retries once those that found the catalog stale. */
static int plan_run(put_plan *pl, router *rt, rt_err *e)
{
    const cat_catalog *cat;
    int m, retry = 0;

    if (rt_rpc_run(rt, pl->calls, pl->ncalls) != 0)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    for (m = 0; m < pl->ncalls; m++)
        if (pl->calls[m].err == SX_ESTALECAT)
            retry = 1;
    if (!retry)
        return 0;
    if (catcache_refresh(rt->cc) != 0 || catcache_get(rt->cc, 0, &cat) != 0)
        return 0; /* the stale-catalog errors stand */
    for (m = 0; m < pl->ncalls; m++) {
        if (pl->calls[m].err != SX_ESTALECAT)
            continue;
        rt_rpc_release(&pl->calls[m], 1);
        memset(pl->calls[m].rep, 0, sizeof(msg_S_WRITE_rep));
        pl->reqs[m].catver = cat->version;
        pl->reqs[m].deadline_ms = rt_write_deadline(rt, pl->deadline);
        if (rt_rpc_run(rt, &pl->calls[m], 1) != 0)
            return rt_errf(e, SX_ENOMEM, "out of memory");
    }
    return 0;
}

/* The input position of the item in slot k of partition index g, or -1. */
static long input_pos(const put_plan *pl, int g, unsigned long k)
{
    uint32_t i;

    for (i = 0; i < pl->n; i++)
        if (pl->grp[i] == g && pl->slot[i] == k)
            return (long)i;
    return -1;
}

/* Reports partition g's failure. A storage node names a failed item by
 * its place in the partition's batch ("operation K: ..."); that is turned
 * into the item's position in the request. */
static int group_fail(const put_plan *pl, router *rt, int g, const rt_rpc *c, rt_err *e)
{
    const char *why = NULL;
    unsigned long k;
    long pos = -1;

    if (rt_op_error(c->msg, &k, &why) && k < pl->cnt[g])
        pos = input_pos(pl, g, k);
    if (pos >= 0)
        return rt_put_refused(rt, g, c->node, c->err, pos, why, e);
    return rt_put_unwritten(rt, g, c, pl->first[g], pl->cnt[g], e);
}

uint64_t rt_write_deadline(const router *rt, uint64_t client_deadline)
{
    uint64_t own = (uint64_t)os_real_ms() + (uint64_t)rt->timeout_ms;

    return client_deadline != 0 && client_deadline < own ? client_deadline : own;
}

bool rt_op_error(const char *msg, unsigned long *k, const char **why)
{
    char *end = NULL;

    if (strncmp(msg, "operation ", 10) != 0)
        return false;
    *k = strtoul(msg + 10, &end, 10);
    if (end == msg + 10 || end[0] != ':')
        return false;
    *why = end + 1 + (end[1] == ' ');
    return true;
}

int rt_put_refused(const router *rt, int g, int node, int err, long pos, const char *why, rt_err *e)
{
    return rt_errf(e, err, "item %ld: %s (storage node %s, partition %llu)", pos, why,
                   rt->cfg->nodes[node].name, (unsigned long long)rt->cfg->storage[g].id);
}

int rt_put_unwritten(const router *rt, int g, const rt_rpc *c, long first, uint32_t cnt, rt_err *e)
{
    rt_err ce;

    rt_rpc_fail(rt, c, &ce);
    return rt_errf(e, c->err,
                   "item %ld (with %u item(s) for partition %llu) "
                   "not written: %s",
                   first, cnt, (unsigned long long)rt->cfg->storage[g].id, ce.msg);
}

/* Collects versions in input order, or the first failure. */
static int plan_reply(put_plan *pl, router *rt, mp_buf *out, rt_err *e)
{
    msg_PUT_rep rep;
    uint64_t *v;
    uint32_t i;
    int g, rc = 0;

    for (g = 0; g < pl->nst; g++) {
        rt_rpc *c;
        if (pl->call_of[g] < 0)
            continue;
        c = &pl->calls[pl->call_of[g]];
        if (c->err != 0)
            return group_fail(pl, rt, g, c, e);
        if (pl->reps[pl->call_of[g]].versions.n != pl->cnt[g])
            return rt_errf(e, SX_EPROTO,
                           "partition %llu answered %u versions for "
                           "%u items",
                           (unsigned long long)rt->cfg->storage[g].id,
                           pl->reps[pl->call_of[g]].versions.n, pl->cnt[g]);
    }
    v = calloc((size_t)pl->n + 1, sizeof(*v));
    if (v == NULL)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    for (i = 0; i < pl->n; i++)
        v[i] = pl->reps[pl->call_of[pl->grp[i]]].versions.v[pl->slot[i]];
    memset(&rep, 0, sizeof(rep));
    rep.versions = (msg_u64s){ pl->n, v };
    if (msg_encode_rep(MSG_PUT, &rep, out) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
    free(v);
    return rc;
}

int rt_h_put(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_PUT_req q;
    const cat_catalog *cat;
    const cat_table *t;
    put_plan pl;
    int rc;

    memset(&pl, 0, sizeof(pl));
    rc = msg_decode_req(MSG_PUT, p, n, &q);
    if (rc != 0)
        return rt_errf(e, rc, "malformed PUT request");
    rc = rt_table(rt, q.table, &cat, &t, e);
    if (rc == 0 && plan_alloc(&pl, q.items.n, rt->cfg->nstorage) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
    if (rc == 0)
        rc = plan_items(&pl, rt, t, &q.items, e);
    pl.deadline = q.deadline_ms;
    if (rc == 0)
        rc = plan_calls(&pl, rt, t, cat->version, &q, e);
    if (rc == 0)
        rc = plan_run(&pl, rt, e);
    if (rc == 0)
        rc = plan_reply(&pl, rt, out, e);
    plan_free(&pl);
    msg_free_req(MSG_PUT, &q);
    return rc;
}
