/*
 * index_gc.c — tombstone collection for one index partition.
 *
 * A tombstone of version v is deleted once every storage partition of the
 * config has reported hw_seen > v (index_rules.h: ix_gc_horizon,
 * ix_gc_collectible): every source has then shipped everything it wrote up
 * to v, so no older put for that key can still arrive. Tombstones are found
 * through their 'T' | version | key records, in version order, so a round
 * reads only what it deletes. Each batch holds apply_mu (so no apply races
 * the check-and-delete) and is bounded; the lock is released between batches.
 */
#include <stdlib.h>
#include <string.h>
#include "index_part.h"
#include "pgroup.h"
#include "index_rules.h"
#include "hash.h"
#include "log.h"
#include "sx_errors.h"

#define GC_BATCH 1000

typedef struct gc_ctx {
    ix_part *p;
    leveldb_writebatch_t *b;
    uint32_t n;    /* tombstones deleted in this batch */
    uint32_t seen; /* 'T' records visited */
    uint64_t horizon;
    uint8_t key[1 + IX_MAX_LOCAL];
} gc_ctx;

/* One 'T' | version | local record below the horizon: delete it and, when
 * the entry is still that tombstone, the entry too. */
static int gc_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    gc_ctx *g = arg;
    uint8_t *ev = NULL;
    size_t evn = 0, ekn;
    uint64_t ver;
    ix_entry e;
    int rc;

    (void)v;
    (void)vn;
    if (kn < 9 + 5 || kn > 9 + IX_MAX_LOCAL)
        return SX_EIO;
    ver = be_get64(k + 1);
    if (!ix_gc_collectible(ver, g->horizon))
        return 1; /* the scan bound already excludes these */
    leveldb_writebatch_delete(g->b, (const char *)k, kn);
    g->seen++;
    ekn = ix_ekey(g->key, k + 9, kn - 9);
    rc = ldb_get(g->p->db, g->key, ekn, &ev, &evn);
    if (rc == 0) {
        rc = ix_entry_decode(ev, evn, &e);
        free(ev);
        if (rc != 0)
            return rc;
        if (!e.live && e.version == ver) {
            leveldb_writebatch_delete(g->b, (const char *)g->key, ekn);
            g->n++;
        } else {
            LOG_WARN("index p%llu: stale tombstone record dropped", (unsigned long long)g->p->id);
        }
    } else if (rc != SX_ENOTFOUND) {
        return rc;
    }
    return g->seen >= GC_BATCH ? 1 : 0;
}

/* One bounded batch under apply_mu; *more says the batch was full. */
static int gc_batch(ix_part *p, uint64_t horizon, uint64_t *collected, bool *more)
{
    gc_ctx g;
    uint8_t lo[9], hi[9];
    int rc;

    memset(&g, 0, sizeof(g));
    g.p = p;
    g.horizon = horizon;
    *more = false;
    g.b = leveldb_writebatch_create();
    if (g.b == NULL)
        return SX_ENOMEM;
    lo[0] = hi[0] = IX_PFX_TOMB;
    be_put64(lo + 1, 0);
    be_put64(hi + 1, horizon); /* versions < horizon */
    pthread_mutex_lock(&p->apply_mu);
    /* past the block cache: these records are read once, then deleted */
    rc = ldb_scan_nocache(p->db, NULL, lo, 9, hi, 9, gc_visit, &g);
    if (rc == 0 && g.seen > 0) {
        rc = ix_commit_removal(p, g.b, 0, g.n);
        if (rc == 0) {
            *collected += g.n;
            *more = g.seen >= GC_BATCH;
        }
    }
    pthread_mutex_unlock(&p->apply_mu);
    leveldb_writebatch_destroy(g.b);
    return rc;
}

int ix_part_gc(ix_part *p, int max_batches, uint64_t *collected)
{
    uint64_t *hw, horizon, tombs, total = 0;
    bool more = true;
    int rc = 0, i;

    ix_part_state(p, NULL, &tombs, NULL, NULL);
    if (collected)
        *collected = 0;
    if (tombs == 0 || p->ncfg == 0 || (p->pg != NULL && pg_ready(p->pg) == 0))
        return 0; /* (a replicated partition's leader collects) */
    hw = calloc((size_t)p->nsrc + 1, sizeof(*hw));
    if (hw == NULL)
        return SX_ENOMEM;
    ix_part_state(p, NULL, NULL, NULL, hw);
    horizon = ix_gc_horizon(hw, p->ncfg); /* config sources come first */
    free(hw);
    for (i = 0; i < max_batches && more && horizon > 0 && rc == 0; i++)
        rc = gc_batch(p, horizon, &total, &more);
    if (total > 0)
        LOG_INFO("index p%llu: collected %llu tombstones below version %llu",
                 (unsigned long long)p->id, (unsigned long long)total, (unsigned long long)horizon);
    if (collected)
        *collected = total;
    return rc;
}
