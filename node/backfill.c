/*
 * backfill.c — index backfill for one fact partition and the CAT_BACKFILLED
 * notification. See backfill.h.
 */
#include <stdlib.h>
#include <string.h>
#include "backfill.h"
#include "hash.h"
#include "item.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "node.h"
#include "shipper.h"
#include "storage_part.h"
#include "sx_errors.h"

#define BF_CHUNK 512              /* items scanned per chunk (one synced batch) */
#define BF_NOTIFY_TIMEOUT_MS 2000

typedef struct bf_scan {
    st_part *p;
    const cat_table *t;
    const cat_index *ix;
    leveldb_writebatch_t *b;
    uint32_t scanned;         /* items seen in this chunk */
    uint64_t pending, records;
    sx_bytes key;
    mp_buf proj;
    uint8_t resume[ST_FACT_KEY_MAX + 1];
    size_t resume_n;          /* > 0: the chunk stopped; resume at this key */
} bf_scan;

static int bf_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    bf_scan *s = arg;
    mp_cur c = mp_cur_make(v, vn);
    uint8_t id[4];
    uint32_t cnt;
    uint64_t ver;
    sx_buf item;
    int rc;

    if (kn > ST_FACT_KEY_MAX)
        return SX_EIO;
    if (s->scanned >= BF_CHUNK) {
        memcpy(s->resume, k, kn);         /* k is not done: resume at it */
        s->resume_n = kn;
        return 1;
    }
    s->scanned++;
    if (kn < ST_FACT_HDR + 9 || mp_read_array(&c, &cnt) != 0 || cnt != 2 ||
        mp_read_u64(&c, &ver) != 0 || mp_read_raw(&c, &item) != 0)
        return SX_EIO;
    s->key.n = 0;
    sx_put_be32(id, s->ix->id);
    rc = bytes_append(&s->key, id, 4);
    if (rc == 0)
        rc = item_index_tuple(s->t, s->ix, item.p, item.n, &s->key);
    if (rc == SX_ENOMEM)
        return rc;
    if (rc != 0)
        return 0;  /* not in this index (sparse) */
    s->proj.sb.size = 0;
    rc = item_project(s->t, s->ix, item.p, item.n, &s->proj);
    if (rc == 0 && s->proj.oom)
        rc = SX_ENOMEM;
    if (rc == 0)
        rc = st_outbox_append(s->p, s->b, OUT_PUT, ver, s->key.p, s->key.n,
                              sx_get_be64(k + ST_FACT_HDR),
                              (const uint8_t *)s->proj.sb.data, s->proj.sb.size,
                              &s->pending);
    if (rc == 0)
        s->records++;
    return rc;
}

/* Adds to the final chunk's batch the persisted record of the backfill's
 * last seq, and remembers it in memory once committed. */
static int bf_finish(bf_scan *s)
{
    st_part *p = s->p;
    uint8_t k[6], v[8];
    st_bf *nb;
    uint64_t last = p->w_head;
    int rc;

    k[0] = ST_META_PREFIX;
    k[1] = 'B';
    sx_put_be32(k + 2, s->ix->id);
    sx_put_be64(v, last);
    rc = st_kput(p, s->b, k, sizeof(k), v, sizeof(v));
    if (rc != 0) {
        st_commit_abort(p);
        return rc;
    }
    rc = st_commit(p, s->b, s->pending);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&p->mu);
    nb = realloc(p->bf, (p->nbf + 1) * sizeof(*nb));
    if (nb != NULL) {
        p->bf = nb;
        nb[p->nbf].index_id = s->ix->id;
        nb[p->nbf].last_seq = last;
        p->nbf++;
    }
    pthread_mutex_unlock(&p->mu);
    return nb ? 0 : SX_ENOMEM;
}

/* One chunk: under the write lock, scans up to BF_CHUNK items from lo and
 * commits their records (the last chunk also the backfill record). Reading
 * the current facts under the lock, after the catalog switch, makes the
 * chunks safe to interleave with writes: a write after the switch emits its
 * own records, and a chunk re-emitting an item at the same version is a
 * no-op at the index. Returns 0 and sets s->resume_n (0: done), or an error. */
static int bf_chunk(bf_scan *s, const uint8_t *lo, size_t lo_n, const uint8_t *hi,
                    size_t hi_n)
{
    st_part *p = s->p;
    int rc;

    s->scanned = 0;
    s->pending = 0;
    s->resume_n = 0;
    leveldb_writebatch_clear(s->b);
    pthread_mutex_lock(&p->wlock);
    rc = st_kscan(p, NULL, lo, lo_n, hi, hi_n, false, bf_visit, s);
    if (rc == 0 && s->resume_n > 0)
        rc = s->pending > 0 ? st_commit(p, s->b, s->pending) : 0;
    else if (rc == 0)
        rc = bf_finish(s);
    else
        st_commit_abort(p);
    pthread_mutex_unlock(&p->wlock);
    return rc;
}

/* True when the newest catalog the node holds no longer has index id: it
 * was dropped while being backfilled (the index nodes collect what was
 * shipped of it). */
static bool bf_dropped(st_part *p, uint32_t id)
{
    const sx_catalog *cat = NULL;

    return st_cat_peek(p->cc, 0, &cat) == 0 && cat_index_by_id(cat, id, NULL) == NULL;
}

/* Backfills index ix of table t (both from cat): switches the partition's
 * write catalog to cat, then scans the table chunk by chunk, stopping early
 * when the node stops or the index is dropped. */
static int bf_run(st_part *p, const sx_catalog *cat, const cat_table *t,
                  const cat_index *ix)
{
    bf_scan s;
    uint8_t lo[ST_FACT_KEY_MAX + 1], hi[ST_FACT_HDR];
    size_t lo_n = ST_FACT_HDR, hi_n = ST_FACT_HDR;
    bool dropped = false;
    int rc;

    memset(&s, 0, sizeof(s));
    s.p = p;
    s.t = t;
    s.ix = ix;
    mp_buf_init(&s.proj);
    s.b = leveldb_writebatch_create();
    if (s.b == NULL)
        return SX_ENOMEM;
    lo[0] = hi[0] = ST_FACT_PREFIX;
    sx_put_be32(lo + 1, t->id);
    sx_put_be32(hi + 1, t->id + 1);
    if (t->id == UINT32_MAX) {
        hi[0] = ST_FACT_PREFIX + 1;   /* hi = "G": the end of every fact */
        hi_n = 1;
    }
    pthread_mutex_lock(&p->wlock);
    st_part_use_catalog(p, cat);
    pthread_mutex_unlock(&p->wlock);
    do {
        rc = bf_chunk(&s, lo, lo_n, hi, hi_n);
        if (rc == 0 && s.resume_n > 0) {
            memcpy(lo, s.resume, s.resume_n);
            lo_n = s.resume_n;
        }
    } while (rc == 0 && s.resume_n > 0 && !node_should_stop() &&
             !(dropped = bf_dropped(p, ix->id)));
    if (dropped)
        LOG_INFO("partition %llu: backfill of index %u (%s.%s) stopped: the index "
                 "was dropped", (unsigned long long)p->id, ix->id, t->name, ix->name);
    else if (rc == 0 && s.resume_n == 0)
        LOG_INFO("partition %llu: backfilled index %u (%s.%s): %llu records",
                 (unsigned long long)p->id, ix->id, t->name, ix->name,
                 (unsigned long long)s.records);
    else if (rc != 0)
        LOG_ERROR("partition %llu: backfill of index %u failed: %s (will retry)",
                  (unsigned long long)p->id, ix->id, sx_strerror(rc));
    leveldb_writebatch_destroy(s.b);
    bytes_free(&s.key);
    mp_buf_free(&s.proj);
    return rc;
}

static void bf_notify(st_part *p, const cat_index *ix, nng_socket catsock)
{
    msg_CAT_BACKFILLED_req rq;
    msg_CAT_BACKFILLED_rep rep;
    mp_buf b;
    uint8_t *frame = NULL, *resp = NULL;
    size_t fn = 0, rn = 0;
    char emsg[160] = "";
    int rc;

    memset(&rq, 0, sizeof(rq));
    memset(&rep, 0, sizeof(rep));
    rq.index_id = ix->id;
    rq.part = p->id;
    mp_buf_init(&b);
    rc = msg_encode_req(MSG_CAT_BACKFILLED, &rq, &b);
    if (rc == 0)
        rc = mp_buf_take(&b, &frame, &fn);
    mp_buf_free(&b);
    if (rc == 0)
        rc = net_call(catsock, frame, fn, BF_NOTIFY_TIMEOUT_MS, &resp, &rn);
    if (rc == 0)
        rc = msg_decode_rep(MSG_CAT_BACKFILLED, resp, rn, &rep, emsg, sizeof(emsg));
    msg_free_rep(MSG_CAT_BACKFILLED, &rep);
    if (rc == 0)
        LOG_INFO("partition %llu: index %u backfill shipped; catalog told (version %llu)",
                 (unsigned long long)p->id, ix->id, (unsigned long long)rep.version);
    else
        LOG_WARN("partition %llu: CAT_BACKFILLED for index %u failed: %s %s (will retry)",
                 (unsigned long long)p->id, ix->id, sx_strerror(rc), emsg);
    free(frame);
    free(resp);
}

static bool part_done(const cat_index *ix, uint64_t part)
{
    for (uint32_t i = 0; i < ix->ndone; i++)
        if (ix->done_parts[i] == part)
            return true;
    return false;
}

/* The recorded last seq of a backfill of index id, or false if none. */
static bool bf_lookup(st_part *p, uint32_t id, uint64_t *last)
{
    bool found = false;

    pthread_mutex_lock(&p->mu);
    for (uint32_t i = 0; i < p->nbf && !found; i++) {
        if (p->bf[i].index_id == id) {
            *last = p->bf[i].last_seq;
            found = true;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return found;
}

void bf_step(st_part *p, const sx_catalog *cat, nng_socket catsock)
{
    if (cat == NULL)
        return;
    pthread_mutex_lock(&p->wlock);
    st_part_use_catalog(p, cat);
    pthread_mutex_unlock(&p->wlock);
    for (uint32_t ti = 0; ti < cat->ntables; ti++) {
        const cat_table *t = &cat->tables[ti];

        for (uint32_t ii = 0; ii < t->nindexes; ii++) {
            const cat_index *ix = &t->indexes[ii];
            uint64_t last = 0;

            if (ix->state != CAT_BUILDING || part_done(ix, p->id))
                continue;
            if (!bf_lookup(p, ix->id, &last)) {
                bf_run(p, cat, t, ix);
                continue;
            }
            if (p->ship != NULL && ship_acked_all(p->ship, p, last))
                bf_notify(p, ix, catsock);
        }
    }
}
