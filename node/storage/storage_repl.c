/*
 * storage_repl.c — a replicated fact partition: its Raft group over the
 * partition's prefix of the node's store (pgroup.h), and the hooks that
 * keep the partition's in-memory state (published counters, backfill
 * table, absent-key filter, outbox count) in step with what its replica
 * applies.
 *
 * The leader computes each group of writes exactly as an unreplicated
 * partition does (storage_write.c) and proposes the resulting batch; every
 * replica applies it. A follower's counters come from the metadata record
 * of each batch it applies; its leader's working counters are reset from
 * the published ones at the start of each group (st_part.h), so a replica
 * that becomes leader computes from the group's state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "log.h"
#include "pgroup.h"
#include "shipper.h"
#include "storage_part.h"
#include "sx_errors.h"

/* Partition-local keys of the group's own bookkeeping (inside the range,
 * so snapshots carry them; 'M' metadata keys the partition does not use). */
static const uint8_t applied_local[2] = { ST_META_PREFIX, 'a' };
static const uint8_t marker_local[2] = { ST_META_PREFIX, 'i' };

typedef struct apply_st {
    st_part *p;
    bool meta, bf;
    uint64_t hw, head, items;
} apply_st;

static int applied_rec(void *arg, bool del, const uint8_t *k, size_t kn, const uint8_t *v,
                       size_t vn)
{
    apply_st *a = arg;
    if (kn <= ST_PFX_LEN)
        return 0;
    const uint8_t *l = k + ST_PFX_LEN;
    size_t ln = kn - ST_PFX_LEN;
    if (l[0] == ST_FACT_PREFIX && !del) {
        st_fact_written(a->p, kf_key_of(a->p->id, l, ln));
    } else if (l[0] == ST_META_PREFIX && ln == 2 && l[1] == 'm' && !del && vn == 24) {
        a->meta = true;
        a->hw = be_get64(v);
        a->head = be_get64(v + 8);
        a->items = be_get64(v + 16);
    } else if (l[0] == ST_META_PREFIX && ln >= 2 && l[1] == 'B') {
        a->bf = true;
    }
    return 0;
}

static void on_applied(void *arg, const uint8_t *recs, size_t n)
{
    apply_st a = { .p = arg };
    if (pg_records_each(recs, n, applied_rec, &a) != 0)
        return; /* pgroup checked the bytes before writing them */
    st_part *p = a.p;
    if (a.bf && st_part_load_bf(p) != 0)
        LOG_WARN("partition %llu: cannot reload its backfill table (its next build may "
                 "repeat work)",
                 (unsigned long long)p->id);
    if (a.meta) {
        pthread_mutex_lock(&p->mu);
        p->hw = a.hw;
        p->head = a.head;
        p->items = a.items;
        pthread_mutex_unlock(&p->mu);
    }
}

/* Tells the absent-key filter of every fact key of the partition (after
 * a snapshot replaced them). */
static int filter_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    st_part *p = arg;
    (void)v;
    (void)vn;
    st_fact_written(p, kf_key_of(p->id, k, kn));
    return 0;
}

static int on_reloaded(void *arg)
{
    st_part *p = arg;
    static const uint8_t f_lo[1] = { ST_FACT_PREFIX };
    static const uint8_t f_hi[1] = { ST_FACT_PREFIX + 1 };
    int rc = st_part_reload(p);
    if (rc == 0)
        rc = st_ksweep(p, NULL, f_lo, 1, f_hi, 1, filter_visit, p);
    if (rc != 0)
        LOG_ERROR("partition %llu: cannot reload its state: %s", (unsigned long long)p->id,
                  sx_strerror(rc));
    return rc == 0 ? 0 : -1;
}

static void on_leading(void *arg, uint64_t term)
{
    st_part *p = arg;
    if (term != 0) {
        LOG_INFO("partition %llu: this replica leads (term %llu): it serves and ships",
                 (unsigned long long)p->id, (unsigned long long)term);
        if (st_part_count_outbox(p) != 0)
            LOG_WARN("partition %llu: cannot count its outbox", (unsigned long long)p->id);
    }
    if (p->ship != NULL)
        ship_notify(p->ship);
}

int st_part_replicate(st_part *p, repl *r, const cfg_part *cp, const char *data_dir)
{
    uint8_t lo[ST_PFX_LEN], hi[ST_PFX_LEN], akey[ST_PFX_LEN + 2], marker[ST_PFX_LEN + 2];
    char dir[4096], what[64];
    size_t hi_n = ST_PFX_LEN;

    memcpy(lo, p->pfx, ST_PFX_LEN);
    if (p->id == UINT64_MAX)
        hi_n = 0;
    else
        be_put64(hi, p->id + 1);
    memcpy(akey, p->pfx, ST_PFX_LEN);
    memcpy(akey + ST_PFX_LEN, applied_local, 2);
    memcpy(marker, p->pfx, ST_PFX_LEN);
    memcpy(marker + ST_PFX_LEN, marker_local, 2);
    snprintf(dir, sizeof dir, "%s/p%llu.raft", data_dir, (unsigned long long)p->id);
    snprintf(what, sizeof what, "partition %llu", (unsigned long long)p->id);
    pg_config c = {
        .group = p->id,
        .nodes = cp->rep,
        .n = cp->nrep,
        .db = p->store->db,
        .lo = lo,
        .lo_n = ST_PFX_LEN,
        .hi = hi,
        .hi_n = hi_n,
        .marker = marker,
        .marker_n = sizeof marker,
        .akey = akey,
        .akey_n = sizeof akey,
        .dir = dir,
        .what = what,
        .hooks = { p, on_applied, on_reloaded, on_leading },
    };
    return pg_open(r, &c, &p->pg);
}

int st_part_durable(st_part *p, leveldb_writebatch_t *b, int *hint)
{
    *hint = 0;
    return p->pg == NULL ? ldb_write_sync(p->store->db, b) : pg_commit_ready(p->pg, b, hint);
}

int st_part_read_barrier(st_part *p, int *hint)
{
    *hint = 0;
    return p->pg == NULL ? 0 : pg_read_barrier(p->pg, hint);
}
