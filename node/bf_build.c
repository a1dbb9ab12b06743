/*
 * bf_build.c — one index build (backfill) of a fact partition: the snapshot,
 * the scan into sorted runs, their emission straight to the index
 * partitions (I_BUILD), the final records. See bf_build.h and, for the
 * whole, backfill.h.
 */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <string.h>
#include "bf_build.h"
#include "bf_sort.h"
#include "hash.h"
#include "item.h"
#include "log.h"
#include "msg.h"
#include "net.h"
#include "node.h"
#include "storage_part.h"
#include "sx_errors.h"
#include "u64set.h"

#define BF_EMIT 4096              /* records checked and sent under one write lock */
/* An I_BUILD's deadline: the write lock is held meanwhile, so a hung index
 * node stalls the partition's writes this long at most (one that is down
 * is found before the lock is taken: bf_connect). */
#define BF_SEND_TIMEOUT_MS 10000
#define BF_CONNECT_WAIT_MS 5000
/* Facts written during a build that the build remembers exactly (a table of
 * 64 MiB at most); past that every record is checked against its fact with
 * a read, which is slower but as right. */
#define BF_TOUCH_MAX (4u << 20)
#define BF_STOP_EVERY 65536       /* facts scanned between stop checks */

/* One destination index partition's share of a chunk: I_BUILD's lists,
 * each with room for BF_EMIT records (kinds stay 0: puts). */
typedef struct bf_dest {
    msg_I_BUILD_req rq;
    uint8_t *frame;
    size_t fn;
} bf_dest;

typedef struct bf_scan {
    st_part *p;
    const cat_table *t;
    const cat_index **ix;     /* the indexes built together */
    uint32_t nix;
    const leveldb_snapshot_t *snap;
    u64set touch;             /* facts written since the snapshot (p->bf_touch) */
    bf_recs run;
    size_t run_max;           /* bytes a run holds at most */
    leveldb_writebatch_t *b;
    net_peer **peers;         /* by config node: index nodes, opened when needed */
    bf_dest *dests;           /* by destination (cfg->index order) */
    net_job *jobs;            /* one per destination a chunk has records for */
    sx_bytes key;
    mp_buf proj;
    uint64_t scanned, records, skipped, runs;
    uint8_t resume[ST_FACT_KEY_MAX + 1];
    size_t resume_n;          /* > 0: the run is full; resume at this key */
    bool stop;                /* the node stops or an index was dropped */
    bool dropped;
} bf_scan;

/* Publishes the build's progress for NODE_STATUS (st_part.build). */
static void bf_publish(const bf_scan *s, bool active)
{
    st_part *p = s->p;

    pthread_mutex_lock(&p->mu);
    p->build.active = active;
    p->build.scanned = s->scanned;
    p->build.emitted = s->records;
    p->build.runs = s->runs;
    pthread_mutex_unlock(&p->mu);
}

/* Adds the records of one fact of the snapshot to the run, or stops the
 * scan when the run is full (resume at k) or the node stops. */
static int bf_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    bf_scan *s = arg;
    mp_cur c = mp_cur_make(v, vn);
    uint32_t cnt;
    uint64_t ver;
    sx_buf item;

    if (kn > ST_FACT_KEY_MAX)
        return SX_EIO;
    if (bf_recs_bytes(&s->run) >= s->run_max) {
        memcpy(s->resume, k, kn);         /* k is not done: resume at it */
        s->resume_n = kn;
        return 1;
    }
    if (++s->scanned % BF_STOP_EVERY == 0 && node_should_stop()) {
        s->stop = true;
        return 1;
    }
    if (s->scanned % BF_EMIT == 0)
        bf_publish(s, true);
    if (kn < ST_FACT_HDR + 9 || mp_read_array(&c, &cnt) != 0 || cnt != 2 ||
        mp_read_u64(&c, &ver) != 0 || mp_read_raw(&c, &item) != 0)
        return SX_EIO;
    for (uint32_t i = 0; i < s->nix; i++) {
        const cat_index *ix = s->ix[i];
        uint8_t id[4];
        int rc;

        s->key.n = 0;
        sx_put_be32(id, ix->id);
        rc = bytes_append(&s->key, id, 4);
        if (rc == 0)
            rc = item_index_tuple(s->t, ix, item.p, item.n, &s->key);
        if (rc == SX_ENOMEM)
            return rc;
        if (rc != 0)
            continue;                     /* not in this index (sparse) */
        s->proj.sb.size = 0;
        rc = item_project(s->t, ix, item.p, item.n, &s->proj);
        if (rc == 0 && s->proj.oom)
            rc = SX_ENOMEM;
        if (rc == 0)
            rc = bf_recs_add(&s->run, k, kn, ver, sx_get_be64(k + ST_FACT_HDR),
                             s->key.p, s->key.n, (const uint8_t *)s->proj.sb.data,
                             s->proj.sb.size);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Under wlock, for a record of a fact written since the snapshot (or
 * sharing its tag with one): true when the fact still has the record's
 * version, so the record is current; false when it was rewritten or
 * deleted since, whose write emitted the index's records itself. */
static bool bf_current(bf_scan *s, const bf_rec *r, int *err)
{
    uint8_t *val = NULL;
    size_t vn = 0;
    uint32_t cnt;
    uint64_t ver = 0;
    mp_cur c;
    int rc = st_kget(s->p, NULL, r->fkey, r->fkn, &val, &vn);

    if (rc == SX_ENOTFOUND)
        return false;
    if (rc == 0) {
        c = mp_cur_make(val, vn);
        if (mp_read_array(&c, &cnt) != 0 || cnt != 2 || mp_read_u64(&c, &ver) != 0)
            rc = SX_EIO;
    }
    free(val);
    if (rc != 0)
        *err = rc;
    return rc == 0 && ver == r->version;
}

/* Allocates the per-destination lists of a chunk. Returns 0 or SX_ENOMEM. */
static int bf_dests_init(bf_scan *s)
{
    const sx_config *cfg = s->p->cfg;
    int n = cfg->nindex ? cfg->nindex : 1;

    s->dests = calloc((size_t)n, sizeof(*s->dests));
    s->jobs = calloc((size_t)n, sizeof(*s->jobs));
    s->peers = calloc((size_t)cfg->nnodes, sizeof(*s->peers));
    if (s->dests == NULL || s->jobs == NULL || s->peers == NULL)
        return SX_ENOMEM;
    for (int d = 0; d < cfg->nindex; d++) {
        msg_I_BUILD_req *rq = &s->dests[d].rq;

        rq->kinds.v = calloc(BF_EMIT, sizeof(uint64_t));
        rq->versions.v = calloc(BF_EMIT, sizeof(uint64_t));
        rq->hashes.v = calloc(BF_EMIT, sizeof(uint64_t));
        rq->keys.v = calloc(BF_EMIT, sizeof(sx_buf));
        rq->projs.v = calloc(BF_EMIT, sizeof(sx_buf));
        if (!rq->kinds.v || !rq->versions.v || !rq->hashes.v || !rq->keys.v || !rq->projs.v)
            return SX_ENOMEM;
    }
    return 0;
}

static void bf_dests_free(bf_scan *s)
{
    const sx_config *cfg = s->p->cfg;

    for (int d = 0; s->dests != NULL && d < cfg->nindex; d++) {
        msg_I_BUILD_req *rq = &s->dests[d].rq;

        free(rq->kinds.v);
        free(rq->versions.v);
        free(rq->hashes.v);
        free(rq->keys.v);
        free(rq->projs.v);
        free(s->dests[d].frame);
    }
    for (int k = 0; s->peers != NULL && k < cfg->nnodes; k++)
        net_peer_close(s->peers[k]);
    free(s->dests);
    free(s->jobs);
    free(s->peers);
}

/* Without the write lock: opens a link to every index node that does not
 * have one yet and waits (up to BF_CONNECT_WAIT_MS) until all are up, so
 * that an index node that is down fails the build here rather than while
 * the partition's writes wait for a chunk. Returns 0 or SX_EUNAVAIL
 * (SX_ENOMEM, SX_EINVAL from opening). */
static int bf_connect(bf_scan *s)
{
    const sx_config *cfg = s->p->cfg;
    struct timespec ts = { 0, 10 * 1000000L };
    int rc = 0, waited = 0;
    bool up = false;

    for (int d = 0; rc == 0 && d < cfg->nindex; d++) {
        int node = cfg->index[d].node;

        if (s->peers[node] == NULL)
            rc = net_peer_open_link(cfg->nodes[node].url, 1, &s->peers[node]);
    }
    while (rc == 0 && !up) {
        up = true;
        for (int k = 0; k < cfg->nnodes; k++)
            up = up && (s->peers[k] == NULL || net_peer_connected(s->peers[k]));
        if (up)
            break;
        if (waited >= BF_CONNECT_WAIT_MS || node_should_stop())
            return SX_EUNAVAIL;
        nanosleep(&ts, NULL);
        waited += 10;
    }
    return rc;
}

/* Record r of the run joins its destination's I_BUILD. */
static int bf_dest_add(bf_scan *s, const bf_rec *r)
{
    static const uint8_t nil = 0xc0;       /* msgpack nil: no projection */
    const sx_config *cfg = s->p->cfg;
    const cfg_part *dp;
    msg_I_BUILD_req *rq;
    uint32_t i;

    if (r->kn < 4)
        return SX_EINTERNAL;
    dp = cfg_index_for(cfg, r->key + 4, r->kn - 4);
    rq = &s->dests[dp - cfg->index].rq;
    i = rq->versions.n;
    if (i >= BF_EMIT)
        return SX_EINTERNAL;
    rq->versions.v[i] = r->version;
    rq->hashes.v[i] = r->h;
    rq->keys.v[i] = (sx_buf){ r->key, r->kn };
    rq->projs.v[i] = r->pn > 0 ? (sx_buf){ r->proj, r->pn } : (sx_buf){ &nil, 1 };
    rq->kinds.n = rq->versions.n = rq->hashes.n = rq->keys.n = rq->projs.n = i + 1;
    return 0;
}

/* Sends every destination's I_BUILD (upto = at) at once and waits for all.
 * Returns 0 when every one was applied, else the first error (logged). */
static int bf_send(bf_scan *s, uint64_t at)
{
    const sx_config *cfg = s->p->cfg;
    int m = 0, rc = 0;

    for (int d = 0; rc == 0 && d < cfg->nindex; d++) {
        bf_dest *bd = &s->dests[d];
        mp_buf out;

        if (bd->rq.versions.n == 0)
            continue;
        bd->rq.part = cfg->index[d].id;
        bd->rq.source = s->p->id;
        bd->rq.upto = at;
        mp_buf_init(&out);
        rc = msg_encode_req(MSG_I_BUILD, &bd->rq, &out);
        if (rc == 0)
            rc = mp_buf_take(&out, &bd->frame, &bd->fn);
        mp_buf_free(&out);
        s->jobs[m] = (net_job){ .peer = s->peers[cfg->index[d].node], .req = bd->frame,
                                .req_n = bd->fn };
        m++;
    }
    if (rc == 0 && m > 0)
        rc = net_call_all(s->jobs, m, BF_SEND_TIMEOUT_MS);
    for (int k = 0; k < m; k++) {
        net_job *j = &s->jobs[k];
        msg_I_BUILD_rep rep;
        char emsg[200] = "";
        int jrc = j->err;

        if (rc == 0 && jrc == 0)
            jrc = msg_decode_rep(MSG_I_BUILD, j->resp, j->resp_n, &rep, emsg, sizeof(emsg));
        if (rc == 0 && jrc != 0) {
            LOG_WARN("partition %llu: index build: sending records: %s%s%s",
                     (unsigned long long)s->p->id, sx_strerror(jrc), emsg[0] ? ": " : "",
                     emsg);
            rc = jrc;
        }
        free(j->resp);
    }
    for (int d = 0; d < cfg->nindex; d++) {
        bf_dest *bd = &s->dests[d];

        free(bd->frame);
        bd->frame = NULL;
        bd->rq.kinds.n = bd->rq.versions.n = bd->rq.hashes.n = 0;
        bd->rq.keys.n = bd->rq.projs.n = 0;
    }
    return rc;
}

/* Under wlock: sends records [from, to) of the sorted run to their index
 * partitions, leaving out those no longer current, and holds the lock until
 * they are applied: no write of the partition comes between a record's
 * check and its application, and the index partitions refuse the records
 * if a later write's records were applied first anyway (a send that timed
 * out and arrived late; msg.h, I_BUILD). */
static int bf_emit_chunk(bf_scan *s, size_t from, size_t to)
{
    uint64_t sent = 0;
    int rc = 0;

    for (size_t i = from; rc == 0 && i < to; i++) {
        bf_rec r;

        bf_recs_get(&s->run, i, &r);
        if (u64set_has(&s->touch, st_fact_tag(r.fkey, r.fkn)) && !bf_current(s, &r, &rc)) {
            s->skipped++;
            continue;
        }
        rc = bf_dest_add(s, &r);
        sent++;
    }
    if (rc == 0)
        rc = bf_send(s, s->p->w_head);
    if (rc == 0)
        s->records += sent;
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

/* Sorts the run and emits it chunk by chunk, each chunk under the write
 * lock (writes wait for one chunk at most), stopping between chunks when
 * the node stops or an index is dropped. */
static int bf_emit(bf_scan *s)
{
    st_part *p = s->p;
    int rc = 0;

    bf_recs_sort(&s->run);
    s->runs++;
    for (size_t i = 0; rc == 0 && i < s->run.n && !s->stop; i += BF_EMIT) {
        size_t to = s->run.n - i < BF_EMIT ? s->run.n : i + BF_EMIT;

        rc = bf_connect(s);
        if (rc != 0)
            break;
        pthread_mutex_lock(&p->wlock);
        rc = bf_emit_chunk(s, i, to);
        pthread_mutex_unlock(&p->wlock);
        bf_publish(s, true);
        if (node_should_stop())
            s->stop = true;
        for (uint32_t k = 0; k < s->nix && !s->stop; k++)
            if (bf_dropped(p, s->ix[k]->id))
                s->stop = s->dropped = true;
    }
    return rc;
}

/* Under wlock: commits the backfill records ('M' 'B' | index id -> the
 * last seq, which covers every record emitted) of every index built, and
 * remembers them in memory once committed. */
static int bf_finish(bf_scan *s)
{
    st_part *p = s->p;
    uint64_t last = p->w_head;
    st_bf *nb = NULL;
    int rc = 0;

    leveldb_writebatch_clear(s->b);
    for (uint32_t i = 0; rc == 0 && i < s->nix; i++) {
        uint8_t k[6], v[8];

        k[0] = ST_META_PREFIX;
        k[1] = 'B';
        sx_put_be32(k + 2, s->ix[i]->id);
        sx_put_be64(v, last);
        rc = st_kput(p, s->b, k, sizeof(k), v, sizeof(v));
    }
    if (rc != 0) {
        st_commit_abort(p);
        return rc;
    }
    rc = st_commit(p, s->b, 0);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&p->mu);
    nb = realloc(p->bf, (p->nbf + s->nix) * sizeof(*nb));
    if (nb != NULL) {
        p->bf = nb;
        for (uint32_t i = 0; i < s->nix; i++) {
            nb[p->nbf].index_id = s->ix[i]->id;
            nb[p->nbf].last_seq = last;
            p->nbf++;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return nb ? 0 : SX_ENOMEM;
}

/* Writes the names of indexes ix[0..nix) of table t into buf (n bytes,
 * truncated if need be): "t.a,t.b", or with ids "2 (t.a), 3 (t.b)". */
static void join_names(char *buf, size_t n, const cat_table *t, const cat_index **ix,
                       uint32_t nix, bool ids)
{
    size_t used = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < nix && used < n; i++) {
        int w = ids ? snprintf(buf + used, n - used, "%s%u (%s.%s)", i ? ", " : "",
                               ix[i]->id, t->name, ix[i]->name)
                    : snprintf(buf + used, n - used, "%s%s.%s", i ? "," : "", t->name,
                               ix[i]->name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* Logs how the backfill of s's indexes ended. */
static void bf_report(const bf_scan *s, int rc, double secs)
{
    char names[256];

    join_names(names, sizeof(names), s->t, s->ix, s->nix, true);
    if (s->dropped)
        LOG_INFO("partition %llu: backfill of index(es) %s stopped: an index was "
                 "dropped (the others start again)", (unsigned long long)s->p->id, names);
    else if (rc == 0 && !s->stop)
        LOG_INFO("partition %llu: backfilled index(es) %s: %llu items, %llu records "
                 "in %llu sorted run(s), %llu left to later writes, %.2f s",
                 (unsigned long long)s->p->id, names, (unsigned long long)s->scanned,
                 (unsigned long long)s->records, (unsigned long long)s->runs,
                 (unsigned long long)s->skipped, secs);
    else if (rc != 0)
        LOG_ERROR("partition %llu: backfill of index(es) %s failed: %s (will start "
                  "again)", (unsigned long long)s->p->id, names, sx_strerror(rc));
}

/* The test hooks SHARDEX_BACKFILL_HOLD=FILE and SHARDEX_BACKFILL_HOLD_RUN=FILE:
 * while FILE exists, a backfill waits, having taken its snapshot (HOLD) or
 * having emitted a run other than its last (HOLD_RUN), so that a test can
 * write, or kill the node, at those points deterministically. The node's
 * stop ends the wait. Logged once per wait. */
static void bf_hold(const bf_scan *s, const char *var, const char *where)
{
    const char *f = getenv(var);
    struct timespec ts = { 0, 20 * 1000000L };

    if (f == NULL || *f == '\0' || access(f, F_OK) != 0)
        return;
    LOG_INFO("partition %llu: backfill of table %s holds %s while %s exists (%s)",
             (unsigned long long)s->p->id, s->t->name, where, f, var);
    while (access(f, F_OK) == 0 && !node_should_stop())
        nanosleep(&ts, NULL);
}

int bf_build(st_part *p, const sx_catalog *cat, const cat_table *t,
             const cat_index **ix, uint32_t nix, size_t run_max)
{
    bf_scan s;
    uint8_t lo[ST_FACT_KEY_MAX + 1], hi[ST_FACT_HDR];
    size_t lo_n = ST_FACT_HDR, hi_n = ST_FACT_HDR;
    uint64_t t0 = st_now_us();
    int rc = 0;

    memset(&s, 0, sizeof(s));
    s.p = p;
    s.t = t;
    s.ix = ix;
    s.nix = nix;
    s.run_max = run_max;
    u64set_init(&s.touch);
    s.touch.max = BF_TOUCH_MAX;
    bf_recs_init(&s.run);
    mp_buf_init(&s.proj);
    s.b = leveldb_writebatch_create();
    if (s.b == NULL || bf_dests_init(&s) != 0) {
        LOG_ERROR("partition %llu: index build: out of memory (will start again)",
                  (unsigned long long)p->id);
        if (s.b != NULL)
            leveldb_writebatch_destroy(s.b);
        bf_dests_free(&s);
        return SX_ENOMEM;
    }
    lo[0] = hi[0] = ST_FACT_PREFIX;
    sx_put_be32(lo + 1, t->id);
    sx_put_be32(hi + 1, t->id + 1);
    if (t->id == UINT32_MAX) {
        hi[0] = ST_FACT_PREFIX + 1;   /* hi = "G": the end of every fact */
        hi_n = 1;
    }
    pthread_mutex_lock(&p->mu);
    join_names(p->build.indexes, sizeof(p->build.indexes), t, ix, nix, false);
    pthread_mutex_unlock(&p->mu);
    bf_publish(&s, true);
    pthread_mutex_lock(&p->wlock);
    st_part_use_catalog(p, cat);
    s.snap = leveldb_create_snapshot(p->store->db->db);
    p->bf_touch = &s.touch;
    pthread_mutex_unlock(&p->wlock);
    bf_hold(&s, "SHARDEX_BACKFILL_HOLD", "at its snapshot");
    s.stop = node_should_stop();
    while (!s.stop) {
        bf_recs_clear(&s.run);
        s.resume_n = 0;
        rc = st_kscan(p, s.snap, lo, lo_n, hi, hi_n, false, bf_visit, &s);
        if (rc == 0 && s.resume_n == 0) {
            /* scanned to the end: while the snapshot lives leveldb's
             * compactions keep every outbox record written and deleted
             * after it, so let it go before the last run is emitted */
            leveldb_release_snapshot(p->store->db->db, s.snap);
            s.snap = NULL;
        }
        if (rc == 0 && !s.stop)
            rc = bf_emit(&s);
        if (rc == 0 && s.resume_n > 0) {
            memcpy(lo, s.resume, s.resume_n);
            lo_n = s.resume_n;
            LOG_INFO("partition %llu: backfill of table %s: %llu items scanned, %llu "
                     "records emitted so far", (unsigned long long)p->id, t->name,
                     (unsigned long long)s.scanned, (unsigned long long)s.records);
            bf_hold(&s, "SHARDEX_BACKFILL_HOLD_RUN", "after a run");
            s.stop = s.stop || node_should_stop();
        }
        if (rc != 0 || s.resume_n == 0)
            break;
    }
    pthread_mutex_lock(&p->wlock);
    if (rc == 0 && !s.stop)
        rc = bf_finish(&s);
    p->bf_touch = NULL;
    pthread_mutex_unlock(&p->wlock);
    if (s.snap != NULL)
        leveldb_release_snapshot(p->store->db->db, s.snap);
    bf_publish(&s, false);
    bf_report(&s, rc, (double)(st_now_us() - t0) / 1e6);
    leveldb_writebatch_destroy(s.b);
    bf_dests_free(&s);
    bytes_free(&s.key);
    mp_buf_free(&s.proj);
    bf_recs_free(&s.run);
    u64set_free(&s.touch);
    return rc;
}
