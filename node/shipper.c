/*
 * shipper.c — outbox shipping, one thread per (fact partition, destination
 * index partition). See shipper.h and the brief's "Shipper" paragraph.
 *
 * A round reads, from ONE leveldb snapshot, the partition metadata (head,
 * hw) and up to SHIP_BATCH records of the destination's queue
 * ('O' | dest | seq). It sends I_APPLY with upto = the last seq included,
 * or, when it took every pending record for this destination, the
 * snapshot's head (and then hw too; a partial batch sends hw 0, claiming
 * nothing). On success it hands the shipped records' deletion to the
 * partition (the next synced group carries it, or a shipper idle for
 * SHIP_IDLE_MS writes it; a lost deletion only causes a redelivery the
 * index ignores) and records the acknowledged watermark.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hash.h"
#include "log.h"
#include "net.h"
#include "shipper.h"
#include "storage_part.h"
#include "tuple.h"
#include "sx_errors.h"

#define SHIP_BATCH 512
#define SHIP_MAX_BYTES (4u << 20)
#define SHIP_IDLE_MS 1000
#define SHIP_TIMEOUT_MS 5000
#define SHIP_BACKOFF_MIN_MS 10
#define SHIP_BACKOFF_MAX_MS 1000
/* Back-to-back rounds linger: a round that would carry fewer than
 * SHIP_LINGER_RECORDS starts no sooner than the linger (SHIP_LINGER_MS, or
 * SHARDEX_SHIP_LINGER_MS from the environment, 0..1000) after the previous
 * round started. Under a stream of small commits this turns many one-record
 * I_APPLYs (each a synced group at the index) into a few larger ones, at the
 * cost of at most the linger of index lag. */
#define SHIP_LINGER_MS 10
#define SHIP_LINGER_MAX_MS 1000
#define SHIP_LINGER_RECORDS 128

typedef struct ship_dest {
    struct ship *s;
    const cfg_part *dest;
    nng_socket sock;
    pthread_t th;
    bool started;
    uint64_t acked;           /* guarded by p->mu */
    uint64_t next_seq;        /* shipping thread only */
    bool failing;             /* shipping thread only: log once per outage */
    sx_ratelimit slow;        /* shipping thread only: slow-round warnings */
} ship_dest;

struct ship {
    st_part *p;
    int n;
    int linger_ms;
    ship_dest *d;
    bool stop;                /* guarded by p->mu */
};

/* Records of one round, copied out of the snapshot. */
typedef struct ship_batch {
    uint32_t n;
    uint64_t seqs[SHIP_BATCH];
    size_t offs[SHIP_BATCH + 1];
    sx_bytes vals;
    bool complete;
} ship_batch;

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static int collect_visit(void *arg, const uint8_t *k, size_t kn,
                         const uint8_t *v, size_t vn)
{
    ship_batch *b = arg;

    if (b->n >= SHIP_BATCH || b->vals.n >= SHIP_MAX_BYTES) {
        b->complete = false;
        return 1;
    }
    if (kn != 17)
        return 0;
    if (bytes_append(&b->vals, v, vn) != 0)
        return SX_ENOMEM;
    b->seqs[b->n] = sx_get_be64(k + 9);
    b->n++;
    b->offs[b->n] = b->vals.n;
    return 0;
}

/* Reads the snapshot's head and hw from the metadata record. */
static int snap_meta(st_part *p, const leveldb_snapshot_t *snap, uint64_t *head,
                     uint64_t *hw)
{
    static const char key[2] = { ST_META_PREFIX, 'm' };
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    char *err = NULL, *v;
    size_t vn = 0;

    if (ro == NULL)
        return SX_ENOMEM;
    leveldb_readoptions_set_snapshot(ro, snap);
    v = leveldb_get(p->db->db, ro, key, sizeof(key), &vn, &err);
    leveldb_readoptions_destroy(ro);
    if (err != NULL) {
        LOG_ERROR("shipper: metadata read: %s", err);
        leveldb_free(err);
        return SX_EIO;
    }
    *head = *hw = 0;
    if (v != NULL && vn == 24) {
        *hw = sx_get_be64((uint8_t *)v);
        *head = sx_get_be64((uint8_t *)v + 8);
    }
    leveldb_free(v);
    return 0;
}

/* Fills the I_APPLY lists from the batch; returns 0 or SX_EIO/SX_ENOMEM. */
static int build_apply(const ship_batch *b, msg_I_APPLY_req *rq)
{
    uint32_t n = b->n;

    rq->seqs.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->kinds.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->versions.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->hashes.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->keys.v = calloc(n ? n : 1, sizeof(sx_buf));
    rq->projs.v = calloc(n ? n : 1, sizeof(sx_buf));
    if (!rq->seqs.v || !rq->kinds.v || !rq->versions.v || !rq->hashes.v ||
        !rq->keys.v || !rq->projs.v)
        return SX_ENOMEM;
    rq->seqs.n = rq->kinds.n = rq->versions.n = rq->hashes.n = n;
    rq->keys.n = rq->projs.n = n;
    for (uint32_t i = 0; i < n; i++) {
        mp_cur c = mp_cur_make(b->vals.p + b->offs[i], b->offs[i + 1] - b->offs[i]);
        uint32_t cnt;

        rq->seqs.v[i] = b->seqs[i];
        if (mp_read_array(&c, &cnt) != 0 || cnt != 5 ||
            mp_read_u64(&c, &rq->kinds.v[i]) != 0 ||
            mp_read_u64(&c, &rq->versions.v[i]) != 0 ||
            mp_read_bin(&c, &rq->keys.v[i]) != 0 ||
            mp_read_u64(&c, &rq->hashes.v[i]) != 0 ||
            mp_read_raw(&c, &rq->projs.v[i]) != 0) {
            LOG_ERROR("shipper: corrupt outbox record seq %llu",
                      (unsigned long long)b->seqs[i]);
            return SX_EIO;
        }
    }
    return 0;
}

static void free_apply(msg_I_APPLY_req *rq)
{
    free(rq->seqs.v);
    free(rq->kinds.v);
    free(rq->versions.v);
    free(rq->hashes.v);
    free(rq->keys.v);
    free(rq->projs.v);
}

/* Sends the round's I_APPLY; on success sets *wm. */
static int send_apply(ship_dest *d, const msg_I_APPLY_req *rq, uint64_t *wm)
{
    mp_buf req;
    uint8_t *frame = NULL, *resp = NULL;
    size_t fn = 0, rn = 0;
    msg_I_APPLY_rep rep;
    char emsg[160] = "";
    int rc;

    mp_buf_init(&req);
    rc = msg_encode_req(MSG_I_APPLY, rq, &req);
    if (rc == 0)
        rc = mp_buf_take(&req, &frame, &fn);
    mp_buf_free(&req);
    if (rc == 0)
        rc = net_call(d->sock, frame, fn, SHIP_TIMEOUT_MS, &resp, &rn);
    if (rc == 0) {
        memset(&rep, 0, sizeof(rep));
        rc = msg_decode_rep(MSG_I_APPLY, resp, rn, &rep, emsg, sizeof(emsg));
        if (rc == 0)
            *wm = rep.watermark;
        msg_free_rep(MSG_I_APPLY, &rep);
    }
    if (rc != 0 && !d->failing)
        LOG_WARN("shipper %llu -> %llu: I_APPLY failed: %s%s%s (retrying)",
                 (unsigned long long)d->s->p->id, (unsigned long long)d->dest->id,
                 sx_strerror(rc), emsg[0] ? ": " : "", emsg);
    free(frame);
    free(resp);
    return rc;
}

/* Hands the shipped records' deletion to the partition (st_shipped_add)
 * and publishes the new ack. */
static void ack_round(ship_dest *d, const ship_batch *b, uint64_t upto, uint64_t wm)
{
    st_part *p = d->s->p;

    st_shipped_add(p, d->dest->id, b->seqs, b->n);
    pthread_mutex_lock(&p->mu);
    if (upto > d->acked)
        d->acked = upto;
    if (wm > d->acked)
        d->acked = wm;
    p->outbox = p->outbox >= b->n ? p->outbox - b->n : 0;
    pthread_mutex_unlock(&p->mu);
}

/* Reports a round that took SX_SLOW_MS or more (at most once a second):
 * records, and the time reading them, in the I_APPLY round trip (the
 * index's synced group included) and acknowledging them. t0..t2 are the round's
 * start, the end of the read and the end of the call. */
static void slow_round(ship_dest *d, uint32_t n, uint64_t t0, uint64_t t1, uint64_t t2)
{
    uint64_t t3 = (uint64_t)sx_mono_ms();
    unsigned skipped;

    if (t3 - t0 < SX_SLOW_MS || !sx_ratelimit_ok(&d->slow, 1000, &skipped))
        return;
    LOG_WARN("shipper %llu -> %llu: slow round: %u records, read %llu ms, I_APPLY %llu ms, "
             "ack %llu ms (%u more slow rounds since the last report)",
             (unsigned long long)d->s->p->id, (unsigned long long)d->dest->id, n,
             (unsigned long long)(t1 - t0), (unsigned long long)(t2 - t1),
             (unsigned long long)(t3 - t2), skipped);
}

/* One shipping round for destination d. Returns 0 or an sx_err. */
static int ship_round(ship_dest *d, ship_batch *b)
{
    st_part *p = d->s->p;
    uint64_t t0 = (uint64_t)sx_mono_ms(), t1 = 0, t2 = 0;
    const leveldb_snapshot_t *snap = leveldb_create_snapshot(p->db->db);
    uint8_t lo[17], hi[17];
    uint64_t head = 0, hw = 0, wm = 0;
    msg_I_APPLY_req rq;
    int rc;

    b->n = 0;
    b->vals.n = 0;
    b->complete = true;
    memset(&rq, 0, sizeof(rq));
    lo[0] = hi[0] = ST_OUT_PREFIX;
    sx_put_be64(lo + 1, d->dest->id);
    sx_put_be64(lo + 9, d->next_seq);
    sx_put_be64(hi + 1, d->dest->id);
    sx_put_be64(hi + 9, UINT64_MAX);
    rc = snap_meta(p, snap, &head, &hw);
    if (rc == 0)
        rc = ldb_scan(p->db, snap, lo, sizeof(lo), hi, sizeof(hi), false,
                      collect_visit, b);
    leveldb_release_snapshot(p->db->db, snap);
    if (rc < 0 || rc > 1)
        return rc;
    rc = build_apply(b, &rq);
    t1 = (uint64_t)sx_mono_ms();
    if (rc == 0) {
        rq.part = d->dest->id;
        rq.source = p->id;
        rq.upto = b->complete ? head : b->seqs[b->n - 1];
        rq.hw = b->complete ? hw : 0;
        rc = send_apply(d, &rq, &wm);
    }
    t2 = (uint64_t)sx_mono_ms();
    if (rc == 0) {
        ack_round(d, b, rq.upto, wm);
        slow_round(d, b->n, t0, t1, t2);
        d->next_seq = b->complete ? head + 1 : b->seqs[b->n - 1] + 1;
        if (d->failing)
            LOG_INFO("shipper %llu -> %llu: recovered", (unsigned long long)p->id,
                     (unsigned long long)d->dest->id);
    }
    d->failing = rc != 0;
    free_apply(&rq);
    return rc;
}

/* Waits (under p->mu) until there is work or a heartbeat is due, then
 * lingers (see SHIP_LINGER_MS) if the previous round began at started_ms,
 * took all that was pending (not behind) and little is pending now; false
 * on stop. A lingering shipper is not woken by commits. */
static bool wait_work(ship_dest *d, uint64_t last_ms, uint64_t started_ms, bool behind)
{
    st_part *p = d->s->p;
    bool go = true;

    pthread_mutex_lock(&p->mu);
    while (!d->s->stop && p->head <= d->acked) {
        uint64_t now = (uint64_t)sx_mono_ms();
        struct timespec ts;

        if (now >= last_ms + SHIP_IDLE_MS) {
            /* idle for a while (no group will carry them soon): write
             * the deletions no group has carried */
            if (p->shipped != NULL) {
                pthread_mutex_unlock(&p->mu);
                st_shipped_flush(p);
                pthread_mutex_lock(&p->mu);
            }
            break;
        }
        deadline_in(&ts, (int)(last_ms + SHIP_IDLE_MS - now));
        p->ship_idle++;
        pthread_cond_timedwait(&p->ship_cv, &p->mu, &ts);
        p->ship_idle--;
    }
    while (!behind && !d->s->stop && p->head > d->acked &&
           p->head - d->acked < SHIP_LINGER_RECORDS) {
        uint64_t now = (uint64_t)sx_mono_ms();
        struct timespec ts;

        if (now >= started_ms + (uint64_t)d->s->linger_ms)
            break;
        deadline_in(&ts, (int)(started_ms + (uint64_t)d->s->linger_ms - now));
        pthread_cond_timedwait(&p->ship_cv, &p->mu, &ts);
    }
    go = !d->s->stop;
    pthread_mutex_unlock(&p->mu);
    return go;
}

/* Sleeps ms unless the shipper stops first. */
static void backoff_sleep(ship_dest *d, int ms)
{
    st_part *p = d->s->p;
    uint64_t until = (uint64_t)sx_mono_ms() + (uint64_t)ms;

    pthread_mutex_lock(&p->mu);
    while (!d->s->stop) {
        uint64_t now = (uint64_t)sx_mono_ms();
        struct timespec ts;

        if (now >= until)
            break;
        deadline_in(&ts, (int)(until - now));
        pthread_cond_timedwait(&p->ship_cv, &p->mu, &ts);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Writes the live end marker 'O' | dest | 2^64-1 (empty value) after the
 * destination's queue. leveldb's Seek and Next skip deletion markers one by
 * one, so without it a scan of this queue that runs past its last record
 * walks every not-yet-compacted deleted record of the next destination's
 * queue (after a bulk load: hundreds of thousands per round). The marker
 * equals the scan's exclusive upper bound, so the scan stops on it. Not
 * synced: a marker lost in a crash is written again at the next start. */
static void write_end_marker(ship_dest *d)
{
    st_part *p = d->s->p;
    uint8_t k[17];
    char *err = NULL;

    k[0] = ST_OUT_PREFIX;
    sx_put_be64(k + 1, d->dest->id);
    sx_put_be64(k + 9, UINT64_MAX);
    leveldb_put(p->db->db, p->wnosync, (const char *)k, sizeof(k), "", 0, &err);
    if (err != NULL) {
        LOG_WARN("shipper: writing the queue end marker: %s", err);
        leveldb_free(err);
    }
}

static void *ship_main(void *arg)
{
    ship_dest *d = arg;
    ship_batch *b = calloc(1, sizeof(*b));
    uint64_t last = 0, started = 0;
    bool behind = false;
    int backoff = 0;

    write_end_marker(d);
    if (b == NULL) {
        LOG_ERROR("shipper: out of memory; destination %llu not shipped",
                  (unsigned long long)d->dest->id);
        return NULL;
    }
    while (wait_work(d, last, started, behind)) {
        int rc;

        started = (uint64_t)sx_mono_ms();
        rc = ship_round(d, b);
        last = (uint64_t)sx_mono_ms();
        behind = rc == 0 && !b->complete;   /* a full batch: more is waiting */
        if (rc == 0) {
            backoff = 0;
            continue;
        }
        backoff = backoff ? backoff * 2 : SHIP_BACKOFF_MIN_MS;
        if (backoff > SHIP_BACKOFF_MAX_MS)
            backoff = SHIP_BACKOFF_MAX_MS;
        backoff_sleep(d, backoff);
    }
    bytes_free(&b->vals);
    free(b);
    return NULL;
}

/* The linger: SHARDEX_SHIP_LINGER_MS when set to 0..SHIP_LINGER_MAX_MS
 * (anything else is reported and ignored), else SHIP_LINGER_MS. */
static int linger_from_env(void)
{
    const char *env = getenv("SHARDEX_SHIP_LINGER_MS");
    char *end = NULL;
    long v;

    if (env == NULL || *env == '\0')
        return SHIP_LINGER_MS;
    v = strtol(env, &end, 10);
    if (*end != '\0' || v < 0 || v > SHIP_LINGER_MAX_MS) {
        LOG_WARN("SHARDEX_SHIP_LINGER_MS=%s is not 0..%d ms: using %d", env,
                 SHIP_LINGER_MAX_MS, SHIP_LINGER_MS);
        return SHIP_LINGER_MS;
    }
    return (int)v;
}

int ship_start(st_part *p, const nng_socket *socks, ship **out)
{
    ship *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return SX_ENOMEM;
    s->p = p;
    s->n = p->cfg->nindex;
    s->linger_ms = linger_from_env();
    s->d = calloc(s->n ? (size_t)s->n : 1, sizeof(*s->d));
    if (s->d == NULL) {
        free(s);
        return SX_ENOMEM;
    }
    p->ship = s;
    for (int i = 0; i < s->n; i++) {
        ship_dest *d = &s->d[i];

        d->s = s;
        d->dest = &p->cfg->index[i];
        d->sock = socks[d->dest->node];
        if (pthread_create(&d->th, NULL, ship_main, d) != 0) {
            ship_stop(s);
            return SX_EINTERNAL;
        }
        d->started = true;
    }
    *out = s;
    return 0;
}

void ship_stop(ship *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->p->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->p->ship_cv);
    pthread_mutex_unlock(&s->p->mu);
    for (int i = 0; i < s->n; i++)
        if (s->d[i].started)
            pthread_join(s->d[i].th, NULL);
    s->p->ship = NULL;
    free(s->d);
    free(s);
}

bool ship_acked_all(ship *s, uint64_t seq)
{
    return ship_min_acked(s) >= seq;
}

uint64_t ship_min_acked(ship *s)
{
    uint64_t m = UINT64_MAX;

    pthread_mutex_lock(&s->p->mu);
    for (int i = 0; i < s->n; i++)
        if (s->d[i].acked < m)
            m = s->d[i].acked;
    pthread_mutex_unlock(&s->p->mu);
    return s->n ? m : UINT64_MAX;
}
