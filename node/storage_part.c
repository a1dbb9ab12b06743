/*
 * storage_part.c — a fact partition's lifecycle and its durable bookkeeping:
 * open (leveldb, metadata, backfill table, outbox size), outbox record
 * encoding, and the synced commit that publishes head/hw/items and wakes
 * the shipper. The S_WRITE group commit is in storage_write.c, reads in
 * storage_read.c.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hash.h"
#include "log.h"
#include "shipper.h"
#include "storage_part.h"
#include "sx_errors.h"

static const uint8_t meta_key[2] = { ST_META_PREFIX, 'm' };

uint64_t st_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

size_t st_fact_key(uint8_t *k, uint32_t tid, const uint8_t *local, size_t n)
{
    k[0] = ST_FACT_PREFIX;
    sx_put_be32(k + 1, tid);
    memcpy(k + ST_FACT_HDR, local, n);
    return ST_FACT_HDR + n;
}

static int load_meta(st_part *p)
{
    uint8_t *v = NULL;
    size_t n = 0;
    int rc = ldb_get(p->db, meta_key, sizeof(meta_key), &v, &n);

    if (rc == SX_ENOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (n != 24) {
        LOG_ERROR("partition %llu: bad metadata record (%zu bytes)",
                  (unsigned long long)p->id, n);
        free(v);
        return SX_EIO;
    }
    p->hw = sx_get_be64(v);
    p->head = sx_get_be64(v + 8);
    p->items = sx_get_be64(v + 16);
    free(v);
    return 0;
}

static int load_bf_visit(void *arg, const uint8_t *k, size_t kn,
                         const uint8_t *v, size_t vn)
{
    st_part *p = arg;
    st_bf *nb;

    if (kn != 6 || vn != 8)
        return 0;
    nb = realloc(p->bf, (p->nbf + 1) * sizeof(*nb));
    if (nb == NULL)
        return SX_ENOMEM;
    p->bf = nb;
    nb[p->nbf].index_id = sx_get_be32(k + 2);
    nb[p->nbf].last_seq = sx_get_be64(v);
    p->nbf++;
    return 0;
}

/* Counts outbox records; the shippers' queue end markers (sequence
 * 2^64-1, see shipper.c) are not records. */
static int count_visit(void *arg, const uint8_t *k, size_t kn,
                       const uint8_t *v, size_t vn)
{
    (void)v; (void)vn;
    if (kn == 17 && sx_get_be64(k + 9) == UINT64_MAX)
        return 0;
    (*(uint64_t *)arg)++;
    return 0;
}

static int load_state(st_part *p)
{
    static const uint8_t bf_lo[2] = { ST_META_PREFIX, 'B' };
    static const uint8_t bf_hi[2] = { ST_META_PREFIX, 'C' };
    static const uint8_t out_lo[1] = { ST_OUT_PREFIX };
    static const uint8_t out_hi[1] = { ST_OUT_PREFIX + 1 };
    int rc = load_meta(p);

    if (rc == 0)
        rc = ldb_scan(p->db, NULL, bf_lo, 2, bf_hi, 2, false, load_bf_visit, p);
    if (rc == 0)
        rc = ldb_scan(p->db, NULL, out_lo, 1, out_hi, 1, false, count_visit, &p->outbox);
    p->w_hw = p->hw;
    p->w_head = p->head;
    p->w_items = p->items;
    return rc;
}

int st_part_open(const sx_config *cfg, const cfg_part *cp, st_cat *cc,
                 const char *dir, st_part **out)
{
    st_part *p = calloc(1, sizeof(*p));
    int rc;

    if (p == NULL)
        return SX_ENOMEM;
    p->id = cp->id;
    p->hlo = cp->hlo;
    p->hhi = cp->hhi;
    p->cfg = cfg;
    p->cc = cc;
    pthread_mutex_init(&p->wlock, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->commit_cv, NULL);
    p->wnosync = leveldb_writeoptions_create();
    if (p->wnosync == NULL) {
        rc = SX_ENOMEM;
        goto fail;
    }
    rc = ldb_open(dir, &p->db);
    if (rc != 0)
        goto fail;
    rc = load_state(p);
    if (rc == 0)
        rc = st_committer_start(p);
    if (rc != 0)
        goto fail;
    LOG_INFO("partition %llu open: head %llu hw %llu items %llu outbox %llu backfills %u",
             (unsigned long long)p->id, (unsigned long long)p->head,
             (unsigned long long)p->hw, (unsigned long long)p->items,
             (unsigned long long)p->outbox, p->nbf);
    *out = p;
    return 0;
fail:
    st_part_close(p);
    return rc;
}

void st_part_close(st_part *p)
{
    if (p == NULL)
        return;
    st_committer_stop(p);
    if (p->db != NULL && p->wnosync != NULL)
        st_shipped_flush(p);
    else if (p->shipped != NULL)
        leveldb_writebatch_destroy(p->shipped);
    ldb_close(p->db);
    if (p->wnosync)
        leveldb_writeoptions_destroy(p->wnosync);
    pthread_cond_destroy(&p->commit_cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->wlock);
    free(p->bf);
    free(p);
}

void st_part_stats(st_part *p, uint64_t *head, uint64_t *hw, uint64_t *items,
                   uint64_t *outbox)
{
    pthread_mutex_lock(&p->mu);
    if (head) *head = p->head;
    if (hw) *hw = p->hw;
    if (items) *items = p->items;
    if (outbox) *outbox = p->outbox;
    pthread_mutex_unlock(&p->mu);
}

const cat_table *st_table(st_part *p, uint64_t tid)
{
    const sx_catalog *cat = NULL;
    const cat_table *t = NULL;

    if (tid == 0 || tid > UINT32_MAX)
        return NULL;
    if (st_cat_get(p->cc, 0, &cat) == 0)
        t = cat_table_by_id(cat, (uint32_t)tid);
    if (t == NULL && cat != NULL && st_cat_get(p->cc, cat->version + 1, &cat) == 0)
        t = cat_table_by_id(cat, (uint32_t)tid);
    return t;
}

void st_part_use_catalog(st_part *p, const sx_catalog *cat)
{
    if (cat != NULL && (p->cat == NULL || cat->version > p->cat->version)) {
        LOG_INFO("partition %llu: catalog version %llu", (unsigned long long)p->id,
                 (unsigned long long)cat->version);
        p->cat = cat;
    }
}

int st_outbox_append(st_part *p, leveldb_writebatch_t *b, int kind, uint64_t v,
                     const uint8_t *key, size_t kn, uint64_t h,
                     const uint8_t *proj, size_t pn, uint64_t *pending)
{
    const cfg_part *dest;
    uint8_t okey[17];
    mp_buf val;
    uint64_t seq;

    if (kn < 4)
        return SX_EINTERNAL;
    dest = cfg_index_for(p->cfg, key + 4, kn - 4);
    seq = ++p->w_head;
    okey[0] = ST_OUT_PREFIX;
    sx_put_be64(okey + 1, dest->id);
    sx_put_be64(okey + 9, seq);
    mp_buf_init(&val);
    mp_put_array(&val, 5);
    mp_put_u64(&val, (uint64_t)kind);
    mp_put_u64(&val, v);
    mp_put_bin(&val, key, kn);
    mp_put_u64(&val, h);
    if (proj != NULL)
        mp_put_raw(&val, proj, pn);
    else
        mp_put_nil(&val);
    if (val.oom) {
        mp_buf_free(&val);
        return SX_ENOMEM;
    }
    leveldb_writebatch_put(b, (const char *)okey, sizeof(okey), val.sb.data, val.sb.size);
    mp_buf_free(&val);
    (*pending)++;
    return 0;
}

/* Writes deletion batch dels (taken off p) unsynced and destroys it. */
static void shipped_write(st_part *p, leveldb_writebatch_t *dels)
{
    char *err = NULL;

    leveldb_write(p->db->db, p->wnosync, dels, &err);
    if (err != NULL) {
        LOG_WARN("partition %llu: deleting shipped outbox records: %s",
                 (unsigned long long)p->id, err);
        leveldb_free(err);
    }
    leveldb_writebatch_destroy(dels);
}

/* Takes the pending deletions off p (NULL: none). Needs p->mu. */
static leveldb_writebatch_t *shipped_take_locked(st_part *p)
{
    leveldb_writebatch_t *dels = p->shipped;

    p->shipped = NULL;
    p->nshipped = 0;
    return dels;
}

void st_shipped_add(st_part *p, uint64_t dest, const uint64_t *seqs, uint32_t n)
{
    leveldb_writebatch_t *full = NULL;
    uint8_t k[17];

    if (n == 0)
        return;
    k[0] = ST_OUT_PREFIX;
    sx_put_be64(k + 1, dest);
    pthread_mutex_lock(&p->mu);
    if (p->shipped == NULL)
        p->shipped = leveldb_writebatch_create();
    if (p->shipped != NULL) {       /* else lost: a redelivery, ignored */
        for (uint32_t i = 0; i < n; i++) {
            sx_put_be64(k + 9, seqs[i]);
            leveldb_writebatch_delete(p->shipped, (const char *)k, sizeof(k));
        }
        p->nshipped += n;
        if (p->nshipped >= ST_SHIPPED_MAX)
            full = shipped_take_locked(p);
    }
    pthread_mutex_unlock(&p->mu);
    if (full != NULL)
        shipped_write(p, full);
}

void st_shipped_flush(st_part *p)
{
    pthread_mutex_lock(&p->mu);
    leveldb_writebatch_t *dels = shipped_take_locked(p);
    pthread_mutex_unlock(&p->mu);
    if (dels != NULL)
        shipped_write(p, dels);
}

int st_commit(st_part *p, leveldb_writebatch_t *b, uint64_t pending)
{
    leveldb_writebatch_t *dels;
    uint32_t ndels;
    uint8_t mv[24];
    int rc;

    sx_put_be64(mv, p->w_hw);
    sx_put_be64(mv + 8, p->w_head);
    sx_put_be64(mv + 16, p->w_items);
    leveldb_writebatch_put(b, (const char *)meta_key, sizeof(meta_key),
                           (const char *)mv, sizeof(mv));
    /* count the records before they become visible, so a shipper that
     * ships them at once never subtracts before this adds */
    pthread_mutex_lock(&p->mu);
    p->outbox += pending;
    ndels = p->nshipped;
    dels = shipped_take_locked(p);
    pthread_mutex_unlock(&p->mu);
    if (dels != NULL)
        leveldb_writebatch_append(b, dels);
    rc = ldb_write_sync(p->db, b);
    pthread_mutex_lock(&p->mu);
    if (rc != 0 && dels != NULL) {     /* still to do: back in front */
        if (p->shipped != NULL) {
            leveldb_writebatch_append(dels, p->shipped);
            leveldb_writebatch_destroy(p->shipped);
        }
        p->shipped = dels;
        p->nshipped += ndels;
        dels = NULL;
    }
    if (rc == 0) {
        p->hw = p->w_hw;
        p->head = p->w_head;
        p->items = p->w_items;
    } else {
        p->outbox -= pending;
        p->w_hw = p->hw;
        p->w_head = p->head;
        p->w_items = p->items;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == 0 && p->ship != NULL)
        ship_notify(p->ship);
    if (dels != NULL)
        leveldb_writebatch_destroy(dels);
    return rc;
}

void st_commit_abort(st_part *p)
{
    pthread_mutex_lock(&p->mu);
    p->w_hw = p->hw;
    p->w_head = p->head;
    p->w_items = p->items;
    pthread_mutex_unlock(&p->mu);
}
