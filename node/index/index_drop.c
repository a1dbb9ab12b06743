/*
 * index_drop.c — collects the entries of dropped indexes from one index
 * partition.
 *
 * Index ids are never reused (the catalog's next_id only grows), so an id
 * below next_id that no table of the catalog holds belongs to a dropped
 * index, and every entry under it ('E' | id | tuple) is dead weight: no
 * query reaches it again. Ids at or above next_id are indexes created after
 * that catalog version and are left alone. The collector walks the ids
 * present in the partition (one seek per id), and deletes a dropped id's
 * entries, with the 'T' companion of each tombstone, in bounded synced
 * batches under apply_mu (released between batches), updating the
 * counters in the same batch. A record of a dropped index that a shipper
 * still delivers afterwards is applied as usual and collected next round.
 */
#include <stdlib.h>
#include <string.h>
#include "index_part.h"
#include "pgroup.h"
#include "hash.h"
#include "log.h"
#include "sx_errors.h"

#define DROP_BATCH 1000

typedef struct drop_ctx {
    ix_part *p;
    leveldb_writebatch_t *b;
    uint32_t seen;        /* entries deleted in this batch */
    uint64_t live, tombs; /* of them, live entries and tombstones */
    uint8_t tkey[IX_MAX_DBKEY];
} drop_ctx;

/* True when index id is dropped in cat (see the file comment). */
static bool is_dropped(const cat_catalog *cat, uint32_t id)
{
    return id != 0 && id < cat->next_id && cat_index_by_id(cat, id, NULL) == NULL;
}

/* Records the index id of the first entry key visited and stops. */
static int first_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    uint64_t *out = arg;

    (void)v;
    (void)vn;
    if (kn < 5)
        return SX_EIO;
    *out = be_get32(k + 1);
    return 1;
}

/* The first index id with an entry at or after id from: *any false when
 * there is none. Returns 0 or an sx_err. */
static int next_id(ix_part *p, uint64_t from, bool *any, uint32_t *id)
{
    uint8_t lo[5], hi[1] = { IX_PFX_ENTRY + 1 };
    uint64_t found = UINT64_MAX;
    int rc;

    *any = false;
    if (from > UINT32_MAX)
        return 0;
    lo[0] = IX_PFX_ENTRY;
    be_put32(lo + 1, (uint32_t)from);
    rc = ldb_scan(p->db, NULL, lo, sizeof(lo), hi, sizeof(hi), false, first_visit, &found);
    if (rc != 0)
        return rc;
    if (found != UINT64_MAX) {
        *any = true;
        *id = (uint32_t)found;
    }
    return 0;
}

/* One entry of a dropped index: delete it and, for a tombstone, its 'T'
 * companion. */
static int drop_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    drop_ctx *d = arg;
    ix_entry e;
    size_t tn;
    int rc;

    if (kn < 1 + 5 || kn > 1 + IX_MAX_LOCAL)
        return SX_EIO;
    rc = ix_entry_decode(v, vn, &e);
    if (rc != 0)
        return rc;
    leveldb_writebatch_delete(d->b, (const char *)k, kn);
    if (e.live) {
        d->live++;
    } else {
        tn = ix_tkey(d->tkey, e.version, k + 1, kn - 1);
        leveldb_writebatch_delete(d->b, (const char *)d->tkey, tn);
        d->tombs++;
    }
    d->seen++;
    return d->seen >= DROP_BATCH ? 1 : 0;
}

/* One bounded batch of index id's entries under apply_mu; *more says the
 * batch was full. */
static int drop_batch(ix_part *p, uint32_t id, uint64_t *collected, bool *more)
{
    drop_ctx d;
    uint8_t lo[5], hi[5];
    int rc;

    memset(&d, 0, sizeof(d));
    d.p = p;
    *more = false;
    d.b = leveldb_writebatch_create();
    if (d.b == NULL)
        return SX_ENOMEM;
    lo[0] = hi[0] = IX_PFX_ENTRY;
    be_put32(lo + 1, id);
    if (id == UINT32_MAX) {
        hi[0] = IX_PFX_ENTRY + 1;
        memset(hi + 1, 0, 4);
    } else {
        be_put32(hi + 1, id + 1);
    }
    pthread_mutex_lock(&p->apply_mu);
    /* past the block cache (shared by every partition of the node): a
     * sweep reads each block once and would only evict what reads use */
    rc = ldb_scan_nocache(p->db, NULL, lo, sizeof(lo), hi, sizeof(hi), drop_visit, &d);
    if (rc == 0 && d.seen > 0) {
        rc = ix_commit_removal(p, d.b, d.live, d.tombs);
        if (rc == 0) {
            *collected += d.seen;
            *more = d.seen >= DROP_BATCH;
        }
    }
    pthread_mutex_unlock(&p->apply_mu);
    leveldb_writebatch_destroy(d.b);
    return rc;
}

int ix_part_drop_gc(ix_part *p, const cat_catalog *cat, int max_batches, uint64_t *collected,
                    bool *unfinished)
{
    uint64_t from = 0, total = 0, before;
    int batches = 0, rc = 0;
    bool any = true, more = false;
    uint32_t id;

    if (collected)
        *collected = 0;
    *unfinished = false;
    if (p->pg != NULL && pg_ready(p->pg) == 0)
        return 0; /* a replicated partition's leader collects */
    while (rc == 0 && batches < max_batches) {
        rc = next_id(p, from, &any, &id);
        if (rc != 0 || !any)
            break;
        from = (uint64_t)id + 1;
        if (!is_dropped(cat, id))
            continue;
        before = total;
        more = true;
        while (rc == 0 && more && batches < max_batches) {
            rc = drop_batch(p, id, &total, &more);
            batches++;
        }
        if (total > before)
            LOG_INFO("index p%llu: collected %llu entries of dropped index %u%s",
                     (unsigned long long)p->id, (unsigned long long)(total - before), id,
                     more ? " (more next round)" : "");
    }
    if (collected)
        *collected = total;
    *unfinished = rc == 0 && batches >= max_batches;
    return rc;
}
