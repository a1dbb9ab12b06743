/*
 * storage_part.c — a fact partition's lifecycle and its durable bookkeeping:
 * open (metadata, backfill table, outbox size), its keyspace in the node's
 * shared leveldb (the st_k* prefix functions), the outbox chunks a batch
 * builds (their format is outbox.c's), and
 * the synced commit that publishes head/hw/items and wakes the shipper.
 * The S_WRITE group commit is in storage_write.c, reads in storage_read.c.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hash.h"
#include "log.h"
#include "pgroup.h"
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

uint64_t st_fact_tag(const uint8_t *k, size_t kn)
{
    return hash_fnv64(k, kn);
}

size_t st_fact_key(uint8_t *k, uint32_t tid, const uint8_t *local, size_t n)
{
    k[0] = ST_FACT_PREFIX;
    be_put32(k + 1, tid);
    memcpy(k + ST_FACT_HDR, local, n);
    return ST_FACT_HDR + n;
}

void st_fact_encode(mp_buf *out, uint64_t ver, const uint8_t *item, size_t n)
{
    mp_put_array(out, 2);
    mp_put_u64(out, ver);
    mp_put_raw(out, item, n);
}

int st_fact_decode(const uint8_t *v, size_t vn, uint64_t *ver, mp_span *item)
{
    mp_cur c = mp_cur_make(v, vn);
    uint32_t cnt;

    if (mp_read_array(&c, &cnt) != 0 || cnt != 2 || mp_read_u64(&c, ver) != 0 ||
        mp_read_raw(&c, item) != 0)
        return SX_EIO;
    return 0;
}

/* pfx | k into buf (ST_PFX_LEN + ST_KEY_MAX bytes); 0, or SX_EINVAL when
 * k is too long. */
static int pkey(const st_part *p, uint8_t *buf, const void *k, size_t kn)
{
    if (kn > ST_KEY_MAX)
        return SX_EINVAL;
    memcpy(buf, p->pfx, ST_PFX_LEN);
    if (kn > 0)
        memcpy(buf + ST_PFX_LEN, k, kn);
    return 0;
}

int st_kget(st_part *p, const leveldb_snapshot_t *snap, const void *k, size_t kn, uint8_t **val,
            size_t *vn)
{
    uint8_t buf[ST_PFX_LEN + ST_KEY_MAX];
    int rc = pkey(p, buf, k, kn);

    return rc ? rc : ldb_get_snap(p->store->db, snap, buf, ST_PFX_LEN + kn, val, vn);
}

/* st_kscan's visitor: the caller's, with the prefix stripped. */
typedef struct kscan {
    ldb_visit fn;
    void *arg;
} kscan;

static int kscan_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    kscan *ks = arg;

    if (kn < ST_PFX_LEN)
        return SX_EIO;
    return ks->fn(ks->arg, k + ST_PFX_LEN, kn - ST_PFX_LEN, v, vn);
}

/* st_kscan (fill_cache) and st_ksweep (neither desc nor fill_cache). */
static int kscan_range(st_part *p, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
                       const void *hi, size_t hi_n, bool desc, bool fill_cache, ldb_visit fn,
                       void *arg)
{
    uint8_t l[ST_PFX_LEN + ST_KEY_MAX], h[ST_PFX_LEN + ST_KEY_MAX];
    size_t hn = ST_PFX_LEN + hi_n;
    kscan ks = { fn, arg };
    int rc = pkey(p, l, lo, lo_n);

    if (rc == 0)
        rc = pkey(p, h, hi, hi_n);
    if (rc != 0)
        return rc;
    if (hi_n == 0) { /* the end of the partition: the next id */
        if (p->id == UINT64_MAX)
            hn = 0;
        else
            be_put64(h, p->id + 1);
    }
    if (!fill_cache)
        return ldb_scan_nocache(p->store->db, snap, l, ST_PFX_LEN + lo_n, h, hn, kscan_visit, &ks);
    return ldb_scan(p->store->db, snap, l, ST_PFX_LEN + lo_n, h, hn, desc, kscan_visit, &ks);
}

int st_kscan(st_part *p, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
             const void *hi, size_t hi_n, bool desc, ldb_visit fn, void *arg)
{
    return kscan_range(p, snap, lo, lo_n, hi, hi_n, desc, true, fn, arg);
}

int st_ksweep(st_part *p, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
              const void *hi, size_t hi_n, ldb_visit fn, void *arg)
{
    return kscan_range(p, snap, lo, lo_n, hi, hi_n, false, false, fn, arg);
}

int st_kput(st_part *p, leveldb_writebatch_t *b, const void *k, size_t kn, const void *v, size_t vn)
{
    uint8_t buf[ST_PFX_LEN + ST_KEY_MAX];
    int rc = pkey(p, buf, k, kn);

    if (rc == 0)
        leveldb_writebatch_put(b, (const char *)buf, ST_PFX_LEN + kn, (const char *)v, vn);
    return rc;
}

int st_kdel(st_part *p, leveldb_writebatch_t *b, const void *k, size_t kn)
{
    uint8_t buf[ST_PFX_LEN + ST_KEY_MAX];
    int rc = pkey(p, buf, k, kn);

    if (rc == 0)
        leveldb_writebatch_delete(b, (const char *)buf, ST_PFX_LEN + kn);
    return rc;
}

static int load_meta(st_part *p)
{
    uint8_t *v = NULL;
    size_t n = 0;
    int rc = st_kget(p, NULL, meta_key, sizeof(meta_key), &v, &n);

    if (rc == SX_ENOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (n != 24) {
        LOG_ERROR("partition %llu: bad metadata record (%zu bytes)", (unsigned long long)p->id, n);
        free(v);
        return SX_EIO;
    }
    p->hw = be_get64(v);
    p->head = be_get64(v + 8);
    p->items = be_get64(v + 16);
    free(v);
    return 0;
}

static int load_bf_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    st_part *p = arg;
    st_bf *nb;

    if (kn != 6 || vn != 8)
        return 0;
    nb = realloc(p->bf, (p->nbf + 1) * sizeof(*nb));
    if (nb == NULL)
        return SX_ENOMEM;
    p->bf = nb;
    nb[p->nbf].index_id = be_get32(k + 2);
    nb[p->nbf].last_seq = be_get64(v);
    p->nbf++;
    return 0;
}

/* Counts outbox records (a chunk holds several, outbox.h); the shippers'
 * queue end markers (sequence 2^64-1, see shipper.c) are not records. */
static int count_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    if (kn == 17 && be_get64(k + 9) == UINT64_MAX)
        return 0;
    *(uint64_t *)arg += ob_value_count(v, vn);
    return 0;
}

static const uint8_t bf_lo[2] = { ST_META_PREFIX, 'B' };
static const uint8_t bf_hi[2] = { ST_META_PREFIX, 'C' };
static const uint8_t out_lo[1] = { ST_OUT_PREFIX };
static const uint8_t out_hi[1] = { ST_OUT_PREFIX + 1 };

static int load_state(st_part *p)
{
    int rc = load_meta(p);

    if (rc == 0)
        rc = st_kscan(p, NULL, bf_lo, 2, bf_hi, 2, false, load_bf_visit, p);
    if (rc == 0)
        rc = st_kscan(p, NULL, out_lo, 1, out_hi, 1, false, count_visit, &p->outbox);
    p->w_hw = p->hw;
    p->w_head = p->head;
    p->w_items = p->items;
    return rc;
}

int st_part_load_bf(st_part *p)
{
    pthread_mutex_lock(&p->mu);
    free(p->bf);
    p->bf = NULL;
    p->nbf = 0;
    int rc = st_kscan(p, NULL, bf_lo, 2, bf_hi, 2, false, load_bf_visit, p);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int st_part_count_outbox(st_part *p)
{
    uint64_t n = 0;
    int rc = st_kscan(p, NULL, out_lo, 1, out_hi, 1, false, count_visit, &n);

    if (rc == 0) {
        pthread_mutex_lock(&p->mu);
        p->outbox = n;
        pthread_mutex_unlock(&p->mu);
    }
    return rc;
}

int st_part_reload(st_part *p)
{
    pthread_mutex_lock(&p->mu);
    p->hw = p->head = p->items = 0;
    int rc = load_meta(p);
    pthread_mutex_unlock(&p->mu);
    if (rc == 0)
        rc = st_part_load_bf(p);
    if (rc == 0)
        rc = st_part_count_outbox(p);
    return rc;
}

void st_part_sync_working(st_part *p)
{
    if (p->pg == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->w_hw = p->hw;
    p->w_head = p->head;
    p->w_items = p->items;
    pthread_mutex_unlock(&p->mu);
}

int st_part_open(const cfg_cluster *cfg, const cfg_part *cp, st_cat *cc, st_store *store,
                 st_part **out)
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
    p->store = store;
    p->range_slice_us = (uint64_t)os_env_long("SHARDEX_SCAN_SLICE_MS", 0, ST_RANGE_SLICE_MAX_MS,
                                              ST_RANGE_SLICE_MS) *
                        1000u;
    be_put64(p->pfx, p->id);
    pthread_mutex_init(&p->wlock, NULL);
    pthread_mutex_init(&p->mu, NULL);
    p->chunks = calloc(cfg->nindex > 0 ? (size_t)cfg->nindex : 1, sizeof(*p->chunks));
    if (p->chunks == NULL) {
        st_part_close(p);
        return SX_ENOMEM;
    }
    for (int i = 0; i < cfg->nindex; i++)
        ob_chunk_init(&p->chunks[i]);
    rc = load_state(p);
    if (rc != 0) {
        st_part_close(p);
        return rc;
    }
    LOG_INFO("partition %llu open: head %llu hw %llu items %llu outbox %llu backfills %u",
             (unsigned long long)p->id, (unsigned long long)p->head, (unsigned long long)p->hw,
             (unsigned long long)p->items, (unsigned long long)p->outbox, p->nbf);
    *out = p;
    return 0;
}

void st_part_close(st_part *p)
{
    if (p == NULL)
        return;
    st_shipped_flush(p);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->wlock);
    for (int i = 0; p->chunks != NULL && i < p->cfg->nindex; i++)
        ob_chunk_free(&p->chunks[i]);
    free(p->chunks);
    free(p->bf);
    pg_close(p->pg);
    free(p);
}

void st_part_stats(st_part *p, uint64_t *head, uint64_t *hw, uint64_t *items, uint64_t *outbox)
{
    pthread_mutex_lock(&p->mu);
    if (head)
        *head = p->head;
    if (hw)
        *hw = p->hw;
    if (items)
        *items = p->items;
    if (outbox)
        *outbox = p->outbox;
    pthread_mutex_unlock(&p->mu);
}

void st_part_build(st_part *p, st_build *b)
{
    pthread_mutex_lock(&p->mu);
    *b = p->build;
    pthread_mutex_unlock(&p->mu);
}

const cat_table *st_table(st_part *p, uint64_t tid)
{
    const cat_catalog *cat = NULL;
    const cat_table *t = NULL;

    if (tid == 0 || tid > UINT32_MAX)
        return NULL;
    if (st_cat_get(p->cc, 0, &cat) == 0)
        t = cat_table_by_id(cat, (uint32_t)tid);
    if (t == NULL && cat != NULL && st_cat_get(p->cc, cat->version + 1, &cat) == 0)
        t = cat_table_by_id(cat, (uint32_t)tid);
    return t;
}

void st_part_use_catalog(st_part *p, const cat_catalog *cat)
{
    if (cat != NULL && (p->cat == NULL || cat->version > p->cat->version)) {
        LOG_INFO("partition %llu: catalog version %llu", (unsigned long long)p->id,
                 (unsigned long long)cat->version);
        p->cat = cat;
    }
}

/* Writes chunk c of destination dest into b under the key of its last
 * record, and empties it. (st_kput fails only for a key longer than
 * ST_KEY_MAX; this one has 17 bytes, so st_commit_prepare need not check.) */
static int chunk_write(st_part *p, leveldb_writebatch_t *b, uint64_t dest, ob_chunk *c)
{
    uint8_t okey[17];
    const uint8_t *v;
    size_t vn;
    int rc;

    okey[0] = ST_OUT_PREFIX;
    be_put64(okey + 1, dest);
    be_put64(okey + 9, c->last);
    v = ob_chunk_value(c, &vn);
    rc = st_kput(p, b, okey, sizeof(okey), v, vn);
    ob_chunk_reset(c);
    return rc;
}

int st_outbox_append(st_part *p, leveldb_writebatch_t *b, int kind, uint64_t v, const uint8_t *key,
                     size_t kn, uint64_t h, const uint8_t *proj, size_t pn, uint64_t *pending)
{
    const cfg_part *dest;
    ob_chunk *c;
    int rc;

    if (kn < 4)
        return SX_EINTERNAL;
    dest = cfg_index_for(p->cfg, key + 4, kn - 4);
    c = &p->chunks[dest - p->cfg->index];
    rc = ob_chunk_add(c, p->w_head + 1, (uint64_t)kind, v, key, kn, h, proj, pn);
    if (rc != 0)
        return rc;
    p->w_head++;
    (*pending)++;
    return ob_chunk_full(c) ? chunk_write(p, b, dest->id, c) : 0;
}

/* Writes deletion batch dels (taken off p) unsynced and destroys it; a
 * replicated partition's leader proposes it (a follower drops it: the
 * leader ships, and deletes, its own). */
static void shipped_write(st_part *p, leveldb_writebatch_t *dels)
{
    int hint,
        rc = p->pg != NULL ? st_part_durable(p, dels, &hint) : ldb_write_lazy(p->store->db, dels);

    if (rc != 0 && rc != SX_ENOTLEADER) /* logged by ldb */
        LOG_WARN("partition %llu: shipped outbox records not deleted (shipped again "
                 "after a restart: harmless): %s",
                 (unsigned long long)p->id, sx_strerror(rc));
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
    be_put64(k + 1, dest);
    pthread_mutex_lock(&p->mu);
    if (p->shipped == NULL)
        p->shipped = leveldb_writebatch_create();
    if (p->shipped != NULL) { /* else lost: a redelivery, ignored */
        for (uint32_t i = 0; i < n; i++) {
            be_put64(k + 9, seqs[i]);
            st_kdel(p, p->shipped, k, sizeof(k));
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

void st_commit_prepare(st_part *p, leveldb_writebatch_t *b, uint64_t pending, st_commit_st *c)
{
    uint8_t mv[24];

    for (int i = 0; i < p->cfg->nindex; i++)
        if (p->chunks[i].n > 0)
            chunk_write(p, b, p->cfg->index[i].id, &p->chunks[i]);
    be_put64(mv, p->w_hw);
    be_put64(mv + 8, p->w_head);
    be_put64(mv + 16, p->w_items);
    st_kput(p, b, meta_key, sizeof(meta_key), mv, sizeof(mv));
    /* count the records before they become visible, so a shipper that
     * ships them at once never subtracts before this adds */
    pthread_mutex_lock(&p->mu);
    p->outbox += pending;
    c->pending = pending;
    c->ndels = p->nshipped;
    c->dels = shipped_take_locked(p);
    pthread_mutex_unlock(&p->mu);
    if (c->dels != NULL)
        leveldb_writebatch_append(b, c->dels);
}

void st_commit_done(st_part *p, int rc, st_commit_st *c)
{
    leveldb_writebatch_t *dels = c->dels;

    pthread_mutex_lock(&p->mu);
    if (rc != 0 && dels != NULL) { /* still to do: back in front */
        if (p->shipped != NULL) {
            leveldb_writebatch_append(dels, p->shipped);
            leveldb_writebatch_destroy(p->shipped);
        }
        p->shipped = dels;
        p->nshipped += c->ndels;
        dels = NULL;
    }
    if (rc == 0) {
        p->hw = p->w_hw;
        p->head = p->w_head;
        p->items = p->w_items;
    } else {
        p->outbox -= c->pending;
        p->w_hw = p->hw;
        p->w_head = p->head;
        p->w_items = p->items;
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == 0 && p->ship != NULL)
        ship_notify(p->ship);
    if (dels != NULL)
        leveldb_writebatch_destroy(dels);
    c->dels = NULL;
}

int st_commit(st_part *p, leveldb_writebatch_t *b, uint64_t pending)
{
    st_commit_st c;
    int rc;

    int hint;

    st_commit_prepare(p, b, pending, &c);
    rc = st_part_durable(p, b, &hint);
    st_commit_done(p, rc, &c);
    return rc;
}

int st_hw_advance(st_part *p, uint64_t idle_us)
{
    leveldb_writebatch_t *b;
    uint64_t now;
    int rc = 0;

    if (p->pg != NULL && pg_ready(p->pg) == 0)
        return 0; /* its leader's to do */
    pthread_mutex_lock(&p->wlock);
    st_part_sync_working(p);
    now = st_now_us();
    if (now > p->w_hw && now - p->w_hw >= idle_us) {
        b = leveldb_writebatch_create();
        if (b == NULL) {
            rc = SX_ENOMEM;
        } else {
            p->w_hw = now;
            rc = st_commit(p, b, 0); /* restores w_hw on failure */
            leveldb_writebatch_destroy(b);
        }
    }
    pthread_mutex_unlock(&p->wlock);
    return rc;
}

void st_commit_abort(st_part *p)
{
    for (int i = 0; i < p->cfg->nindex; i++)
        ob_chunk_reset(&p->chunks[i]);
    pthread_mutex_lock(&p->mu);
    p->w_hw = p->hw;
    p->w_head = p->head;
    p->w_items = p->items;
    pthread_mutex_unlock(&p->mu);
}
