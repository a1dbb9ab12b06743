/*
 * shipper.c — outbox shipping: one thread per (storage node, destination
 * index partition), serving every fact partition of the node. See
 * shipper.h and docs/ARCHITECTURE.md ("Write path").
 *
 * A round takes, for each partition with something to say (its head is
 * past what the destination acknowledged, or its heartbeat is due), ONE
 * leveldb snapshot of that partition: the metadata (head, hw) and up to
 * SHIP_BATCH records of the destination's queue ('O' | dest | seq, whole
 * chunks of records: outbox.h). It
 * builds that partition's I_APPLY with upto = the last seq included, or,
 * when it took every pending record for this destination, the snapshot's
 * head (and then hw too; a partial batch sends hw 0, claiming nothing).
 * The round's I_APPLYs (one per source partition) go to the destination's
 * node together, in one write on the node's link (net_call_all over the
 * node's peer): the index node reads them as one burst and commits them in
 * one group, instead of one group per partition.
 *
 * Each I_APPLY asks to be answered early: once its records are applied
 * (readable), before their sync; the reply says how far the stream's
 * records are synced. So a slow sync at the index holds up no round (the
 * index lag does not include it): the next round may
 * leave at once, and carries `after`, the seq its records follow, which
 * the index refuses while its watermark is below it (records it had
 * applied were lost before their sync, in a restart). The shipper keeps
 * each answered round's outbox keys until a reply says they are synced,
 * then hands their deletion to the partition (the next synced group
 * carries it, or, once the partition's head has not moved for
 * SHIP_IDLE_MS, the shipper writes it; a lost deletion only causes a
 * redelivery the index ignores) and records the synced watermark
 * (`acked`). A stream whose I_APPLY (or outbox read) failed is retried,
 * after its own delay, from what is known synced, while the others go on.
 *
 * Each (destination, partition) stream stays in seq order: the thread has
 * one round in flight at a time.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hash.h"
#include "ixroute.h"
#include "log.h"
#include "net.h"
#include "outbox.h"
#include "pgroup.h"
#include "shipper.h"
#include "storage_part.h"
#include "tuple.h"
#include "sx_errors.h"

/* Records a round takes per stream: only a backlog fills it (a bulk load, a
 * backfill, a destination back from an outage). 4,096 rather than 512 (with
 * index groups of up to 32,768 records): a 1,000,000-item load with two
 * indexes runs ~6 % faster and the index nodes spend ~8 % less CPU, their
 * groups larger and sorted runs denser (docs/PERFORMANCE.md). */
#define SHIP_BATCH 4096
_Static_assert(OB_CHUNK_MAX_RECORDS <= SHIP_BATCH, "a chunk fits in one batch");
#define SHIP_MAX_BYTES (4u << 20)
#define SHIP_IDLE_MS 1000
/* A stream whose answered records are not known synced asks again (a
 * heartbeat's reply says how far they are) after this long without a
 * round, so that a burst's outbox records leave soon after it ends. */
#define SHIP_SYNCED_MS 50
/* Answered rounds a stream keeps waiting for their sync, at most: past
 * it (an index node whose syncs stall) the stream sends only heartbeats,
 * which carry no record, until a reply says some are synced. */
#define SHIP_PEND_MAX 64
/* A partition whose head has not moved for this long gets its version
 * high-water raised to the clock before a heartbeat (st_hw_advance): one
 * tiny synced write per idle partition this often (and one at each index
 * partition its heartbeat then moves), so that tombstones of deletes
 * elsewhere can be collected while it takes no writes. */
#define SHIP_HW_IDLE_MS 10000
#define SHIP_TIMEOUT_MS 5000
/* A round's bound at a replicated destination: an index leader answers a
 * round in milliseconds, so one silent for a second is stalled or dead,
 * and strong queries wait for its records (their deadline is 5 s) */
#define SHIP_REPL_ATTEMPT_MS 1000
#define SHIP_BACKOFF_MIN_MS 10
#define SHIP_BACKOFF_MAX_MS 1000
/* Back-to-back rounds linger: a round that would carry fewer than
 * SHIP_LINGER_RECORDS starts no sooner than the linger (SHIP_LINGER_MS, or
 * SHARDEX_SHIP_LINGER_MS from the environment, 0..1000) after the previous
 * round started. Under a stream of small commits this turns many one-record
 * I_APPLYs (each a synced group at the index) into a few larger ones, at the
 * cost of at most the linger of index lag. */
/* clang-format off */
#define SHIP_LINGER_MS 20   /* against 10 ms, at 1,000,000 items: a quarter
                             * less index-node CPU per put and ~10 % more W1
                             * (docs/PERFORMANCE.md) */
/* clang-format on */
#define SHIP_LINGER_MAX_MS 1000
#define SHIP_LINGER_RECORDS 128

/* Records of one round, copied out of the snapshot: the outbox values
 * (chunks, outbox.h) they came from, whole. */
typedef struct ship_batch {
    uint32_t n;                  /* records */
    uint32_t nkeys;              /* values */
    uint64_t keys[SHIP_BATCH];   /* each value's key seq (to delete it) */
    size_t offs[SHIP_BATCH + 1]; /* each value's bytes in vals */
    tup_bytes vals;
    bool complete;
} ship_batch;

/* An answered round's records not known synced at the destination yet:
 * the keys of their outbox values, deleted once they are. */
typedef struct ship_pend {
    uint64_t upto; /* the round's upto */
    uint32_t n;    /* records */
    uint32_t nkeys;
    uint64_t *keys;
} ship_pend;

/* One stream: a partition's queue for one destination. */
typedef struct ship_src {
    st_part *p;
    uint64_t acked;    /* synced at the destination; guarded by p->mu */
    uint64_t next_seq; /* shipping thread only, from here on */
    ship_pend *pend;   /* answered rounds not synced yet, oldest first */
    int npend, pend_cap;
    bool refused;       /* the last I_APPLY was refused as out of order */
    uint64_t last_ms;   /* when this stream last shipped */
    uint64_t seen_head; /* the partition's head when last looked at */
    uint64_t head_ms;   /* when that head was first seen */
    uint64_t retry_ms;  /* after a failure: not before this time */
    int backoff_ms;     /* the current retry delay; 0: not failing
                         * (an outage is logged once, at its start) */
    uint64_t term;      /* a replicated partition's: the term in which
                         * this replica leads, as the stream last saw
                         * it (0: it does not lead, and does not ship) */
    ship_batch b;
    msg_I_APPLY_req rq; /* this round's request, when in it */
    uint8_t *frame;     /* its encoding */
    size_t fn;
} ship_src;

typedef struct ship_dest {
    struct ship *s;
    const cfg_part *dest;
    pthread_t th;
    bool started;
    ship_src *src;      /* s->nparts streams */
    net_job *jobs;      /* s->nparts */
    int *job_src;       /* s->nparts: the stream of each job */
    log_ratelimit slow; /* shipping thread only: slow-round warnings */
} ship_dest;

struct ship {
    st_part **parts;
    int nparts;
    const cfg_cluster *cfg;
    int linger_ms;
    int n;
    ship_dest *d;
    net_peer **peers;   /* by cfg node index (index nodes only) */
    ixroute *ixr;       /* where each destination's calls go (its leader) */
    pthread_mutex_t mu; /* guards gen, idle, stop */
    pthread_cond_t cv;  /* a commit (broadcast only when idle > 0), or stop */
    uint64_t gen;       /* commits notified so far */
    int idle;           /* threads waiting on cv for work */
    bool stop;
};

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

/* Takes whole outbox values while the batch stays within SHIP_BATCH
 * records and SHIP_MAX_BYTES (the first value always: a chunk holds at most
 * OB_CHUNK_MAX_RECORDS). */
static int collect_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    ship_batch *b = arg;
    uint32_t cnt;

    if (kn != 17)
        return 0;
    cnt = ob_value_count(v, vn);
    if (cnt == 0) {
        LOG_ERROR("shipper: corrupt outbox value seq %llu", (unsigned long long)be_get64(k + 9));
        return SX_EIO;
    }
    if (b->nkeys > 0 &&
        (b->nkeys >= SHIP_BATCH || b->n + cnt > SHIP_BATCH || b->vals.n + vn > SHIP_MAX_BYTES)) {
        b->complete = false;
        return 1;
    }
    if (tup_bytes_append(&b->vals, v, vn) != 0)
        return SX_ENOMEM;
    b->keys[b->nkeys] = be_get64(k + 9);
    b->nkeys++;
    b->offs[b->nkeys] = b->vals.n;
    b->n += cnt;
    return 0;
}

/* Reads the snapshot's head and hw from the metadata record. */
static int snap_meta(st_part *p, const leveldb_snapshot_t *snap, uint64_t *head, uint64_t *hw)
{
    static const uint8_t key[2] = { ST_META_PREFIX, 'm' };
    uint8_t *v = NULL;
    size_t vn = 0;
    int rc = st_kget(p, snap, key, sizeof(key), &v, &vn);

    *head = *hw = 0;
    if (rc == SX_ENOTFOUND)
        return 0;
    if (rc != 0) {
        LOG_ERROR("shipper: metadata read: %s", sx_strerror(rc));
        return rc;
    }
    if (vn == 24) {
        *hw = be_get64(v);
        *head = be_get64(v + 8);
    }
    free(v);
    return 0;
}

/* Fills the I_APPLY lists from the batch's records; returns 0 or
 * SX_EIO/SX_ENOMEM. */
static int build_apply(const ship_batch *b, msg_I_APPLY_req *rq)
{
    uint32_t n = b->n, i = 0;

    rq->seqs.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->kinds.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->versions.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->hashes.v = calloc(n ? n : 1, sizeof(uint64_t));
    rq->keys.v = calloc(n ? n : 1, sizeof(mp_span));
    rq->projs.v = calloc(n ? n : 1, sizeof(mp_span));
    if (!rq->seqs.v || !rq->kinds.v || !rq->versions.v || !rq->hashes.v || !rq->keys.v ||
        !rq->projs.v)
        return SX_ENOMEM;
    rq->seqs.n = rq->kinds.n = rq->versions.n = rq->hashes.n = n;
    rq->keys.n = rq->projs.n = n;
    for (uint32_t k = 0; k < b->nkeys; k++) {
        ob_reader r;
        ob_rec rec = { 0 };
        uint32_t cnt;
        int rc = ob_reader_open(&r, b->vals.p + b->offs[k], b->offs[k + 1] - b->offs[k], b->keys[k],
                                &cnt);

        while (rc == 0 && r.left > 0 && i < n && (rc = ob_reader_next(&r, &rec)) == 0) {
            /* the batch's seqs ascend, and a value's last is its key's seq
             * (outbox.h) */
            if ((i > 0 && rec.seq <= rq->seqs.v[i - 1]) || (r.left == 0 && rec.seq != b->keys[k])) {
                rc = SX_EIO;
                break;
            }
            rq->seqs.v[i] = rec.seq;
            rq->kinds.v[i] = rec.kind;
            rq->versions.v[i] = rec.version;
            rq->keys.v[i] = rec.key;
            rq->hashes.v[i] = rec.h;
            rq->projs.v[i] = rec.proj;
            i++;
        }
        if (rc != 0 || r.left != 0) {
            LOG_ERROR("shipper: corrupt outbox value seq %llu", (unsigned long long)b->keys[k]);
            return SX_EIO;
        }
    }
    return i == n ? 0 : SX_EIO;
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

/* Frees the round's request of stream c. */
static void src_clear(ship_src *c)
{
    free_apply(&c->rq);
    memset(&c->rq, 0, sizeof(c->rq));
    free(c->frame);
    c->frame = NULL;
    c->fn = 0;
}

/* Reads stream c's snapshot (metadata, up to SHIP_BATCH records; none
 * while SHIP_PEND_MAX rounds wait for their sync: a heartbeat claiming
 * only what was sent) and encodes its I_APPLY for destination dest into
 * c->frame. Returns 0 or an sx_err (nothing to send then). */
static int src_prepare(ship_src *c, uint64_t dest)
{
    st_part *p = c->p;
    const leveldb_snapshot_t *snap = leveldb_create_snapshot(p->store->db->db);
    ship_batch *b = &c->b;
    uint8_t lo[17], hi[17];
    uint64_t head = 0, hw = 0;
    mp_buf req;
    int rc;

    b->n = 0;
    b->nkeys = 0;
    b->vals.n = 0;
    b->complete = true;
    lo[0] = hi[0] = ST_OUT_PREFIX;
    be_put64(lo + 1, dest);
    be_put64(lo + 9, c->next_seq);
    be_put64(hi + 1, dest);
    be_put64(hi + 9, UINT64_MAX);
    rc = snap_meta(p, snap, &head, &hw);
    if (rc == 0 && c->npend >= SHIP_PEND_MAX)
        b->complete = false; /* a heartbeat: no record, no claim */
    else if (rc == 0)
        rc = st_kscan(p, snap, lo, sizeof(lo), hi, sizeof(hi), false, collect_visit, b);
    leveldb_release_snapshot(p->store->db->db, snap);
    if (rc < 0 || rc > 1)
        return rc;
    rc = build_apply(b, &c->rq);
    if (rc != 0) {
        src_clear(c);
        return rc;
    }
    c->rq.part = dest;
    c->rq.source = p->id;
    c->rq.upto = b->complete       ? head
                 : b->nkeys > 0    ? b->keys[b->nkeys - 1]
                 : c->next_seq > 0 ? c->next_seq - 1
                                   : 0;
    c->rq.hw = b->complete ? hw : 0;
    c->rq.after = c->next_seq > 0 ? c->next_seq - 1 : 0;
    c->rq.early = 1;
    mp_buf_init(&req);
    rc = msg_encode_req(MSG_I_APPLY, &c->rq, &req);
    if (rc == 0)
        rc = mp_buf_take(&req, &c->frame, &c->fn);
    mp_buf_free(&req);
    if (rc != 0)
        src_clear(c);
    return rc;
}

/* Stream c failed: it is retried from the same seq after its own delay,
 * doubling from SHIP_BACKOFF_MIN_MS to SHIP_BACKOFF_MAX_MS, while the
 * thread's other streams go on. */
static void src_backoff(ship_src *c)
{
    c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : SHIP_BACKOFF_MIN_MS;
    if (c->backoff_ms > SHIP_BACKOFF_MAX_MS)
        c->backoff_ms = SHIP_BACKOFF_MAX_MS;
    c->retry_ms = (uint64_t)os_mono_ms() + (uint64_t)c->backoff_ms;
}

/* Keeps the keys of the round stream c just had answered until the
 * destination reports them synced. Returns 0 or SX_ENOMEM. */
static int pend_push(ship_src *c)
{
    const ship_batch *b = &c->b;
    ship_pend *e;

    if (b->n == 0 && b->nkeys == 0)
        return 0;
    if (c->npend == c->pend_cap) {
        int cap = c->pend_cap ? 2 * c->pend_cap : 8;
        ship_pend *np = realloc(c->pend, (size_t)cap * sizeof(*np));

        if (np == NULL)
            return SX_ENOMEM;
        c->pend = np;
        c->pend_cap = cap;
    }
    e = &c->pend[c->npend];
    e->keys = malloc((b->nkeys ? b->nkeys : 1) * sizeof(uint64_t));
    if (e->keys == NULL)
        return SX_ENOMEM;
    memcpy(e->keys, b->keys, b->nkeys * sizeof(uint64_t));
    e->nkeys = b->nkeys;
    e->n = b->n;
    e->upto = c->rq.upto;
    c->npend++;
    return 0;
}

/* The destination has stream c's records synced up to synced: hands the
 * deletion of the answered rounds it covers to the partition and records
 * the synced watermark. */
static void pend_settle(ship_dest *d, ship_src *c, uint64_t synced)
{
    st_part *p = c->p;
    uint64_t gone = 0;
    int k = 0;

    for (; k < c->npend && c->pend[k].upto <= synced; k++) {
        st_shipped_add(p, d->dest->id, c->pend[k].keys, c->pend[k].nkeys);
        gone += c->pend[k].n;
        free(c->pend[k].keys);
    }
    if (k > 0) {
        memmove(c->pend, c->pend + k, (size_t)(c->npend - k) * sizeof(*c->pend));
        c->npend -= k;
    }
    pthread_mutex_lock(&p->mu);
    if (synced > c->acked)
        c->acked = synced;
    p->outbox = p->outbox >= gone ? p->outbox - gone : 0;
    pthread_mutex_unlock(&p->mu);
}

/* Forgets stream c's answered rounds that are not known synced (their
 * records stay in the outbox, and are read again). */
static void pend_drop(ship_src *c)
{
    for (int k = 0; k < c->npend; k++)
        free(c->pend[k].keys);
    c->npend = 0;
}

/* Stream c's reply: on success keeps the shipped records' keys until they
 * are synced (pend_push), settles what the reply says is synced and moves
 * next_seq on; on failure the stream goes back to what is known synced:
 * the records after it are read and sent again (the index ignores those
 * it has), once its delay is over. Returns 0 or the call's error. */
static int src_finish(ship_dest *d, ship_src *c, const net_job *j)
{
    st_part *p = c->p;
    msg_I_APPLY_rep rep;
    char emsg[300] = "";
    int rc = j->err;

    memset(&rep, 0, sizeof(rep));
    if (rc == 0)
        rc = msg_decode_rep(MSG_I_APPLY, j->resp, j->resp_n, &rep, emsg, sizeof(emsg));
    if (rc == 0 && (rc = pend_push(c)) != 0)
        snprintf(emsg, sizeof(emsg), "keeping the shipped records' keys");
    if (rc != 0) {
        if (c->backoff_ms == 0)
            LOG_WARN("shipper %llu -> %llu: I_APPLY failed: %s%s%s (retrying)",
                     (unsigned long long)p->id, (unsigned long long)d->dest->id, sx_strerror(rc),
                     emsg[0] ? ": " : "", emsg);
        src_backoff(c);
        msg_free_rep(MSG_I_APPLY, &rep);
        /* from what is known synced, or from the oldest round kept (one
         * that a reply covered only in part: its values up to the synced
         * point were not deleted) */
        pthread_mutex_lock(&p->mu);
        uint64_t from = c->acked > 0 ? c->acked + 1 : 0;
        pthread_mutex_unlock(&p->mu);
        if (c->npend > 0 && c->pend[0].nkeys > 0 && c->pend[0].keys[0] < from)
            from = c->pend[0].keys[0];
        /* refused again from what it reported synced: the partition holds
         * less than it said (its data restored from an older copy): the
         * whole outbox goes again, after 0, checked by nothing */
        bool gap = rc == SX_EUNAVAIL && strstr(emsg, "out of order") != NULL;
        if (gap && c->refused && c->rq.after + 1 >= from && from > 0) {
            LOG_WARN("shipper %llu -> %llu: the index partition holds less than it reported "
                     "synced (restored from an older copy?): shipping the whole outbox again; "
                     "records that had left it need the index rebuilt",
                     (unsigned long long)p->id, (unsigned long long)d->dest->id);
            from = 0;
        }
        c->refused = gap;
        pend_drop(c);
        c->next_seq = from;
        return rc;
    }
    c->refused = false;
    pend_settle(d, c, rep.synced);
    msg_free_rep(MSG_I_APPLY, &rep);
    c->next_seq = c->rq.upto + 1;
    c->last_ms = (uint64_t)os_mono_ms();
    if (c->backoff_ms != 0)
        LOG_INFO("shipper %llu -> %llu: recovered", (unsigned long long)p->id,
                 (unsigned long long)d->dest->id);
    c->backoff_ms = 0;
    c->retry_ms = 0;
    return 0;
}

/* Reports a round that took SX_SLOW_MS or more (at most once a second):
 * partitions and records, and the time reading them, in the I_APPLY round
 * trip (the index's synced group included) and acknowledging them. t0..t2
 * are the round's start, the end of the reads and the end of the call. */
static void slow_round(ship_dest *d, int nsrc, uint32_t n, uint64_t t0, uint64_t t1, uint64_t t2)
{
    uint64_t t3 = (uint64_t)os_mono_ms();
    unsigned skipped;

    if (t3 - t0 < SX_SLOW_MS || !log_ratelimit_ok(&d->slow, 1000, &skipped))
        return;
    LOG_WARN("shipper -> %llu: slow round: %d partitions, %u records, read %llu ms, "
             "I_APPLY %llu ms, ack %llu ms (%u more slow rounds since the last report)",
             (unsigned long long)d->dest->id, nsrc, n, (unsigned long long)(t1 - t0),
             (unsigned long long)(t2 - t1), (unsigned long long)(t3 - t2), skipped);
}

/* A replicated partition's stream ships only while its replica leads.
 * When it starts leading (again), the stream starts over as a restarted
 * node's does: from the start of the outbox (records the destination has
 * are ignored there) and with nothing known synced. Returns whether it
 * leads. */
static bool src_leads(ship_src *c)
{
    uint64_t term = pg_ready(c->p->pg);

    if (term != c->term) {
        pend_drop(c);
        c->next_seq = 0;
        c->refused = false;
        c->backoff_ms = 0;
        c->retry_ms = 0;
        c->last_ms = 0;
        pthread_mutex_lock(&c->p->mu);
        c->acked = 0;
        pthread_mutex_unlock(&c->p->mu);
        c->term = term;
    }
    return term != 0;
}

/* Whether stream c has something to say now: records or a head past what
 * it sent (unless SHIP_PEND_MAX rounds wait for their sync), what it sent
 * not known synced for SHIP_SYNCED_MS (a heartbeat's reply says whether
 * it is now), or a heartbeat due (idle for SHIP_IDLE_MS), unless it waits
 * out a failure's delay. Adds its pending count to *pending and lowers
 * *next to the time it becomes due, when it is not. */
static bool src_due(ship_src *c, uint64_t now, uint64_t *pending, uint64_t *next)
{
    st_part *p = c->p;
    uint64_t head, acked, sent, at, idle;

    if (p->pg != NULL && !src_leads(c))
        return false; /* its leader ships; ship_notify wakes this one if it leads */
    sent = c->next_seq > 0 ? c->next_seq - 1 : 0;

    pthread_mutex_lock(&p->mu);
    head = p->head;
    acked = c->acked;
    pthread_mutex_unlock(&p->mu);
    idle = c->npend > 0 || acked < sent ? SHIP_SYNCED_MS : SHIP_IDLE_MS;
    if (head != c->seen_head) {
        c->seen_head = head;
        c->head_ms = now;
    }
    if (now < c->retry_ms) {
        at = c->retry_ms;
    } else if (head > sent && c->npend < SHIP_PEND_MAX) {
        *pending += head - sent;
        return true;
    } else if (now >= c->last_ms + idle) {
        return true;
    } else {
        at = c->last_ms + idle;
    }
    if (at < *next)
        *next = at;
    return false;
}

/* One shipping round for destination d; *behind is set when a stream
 * left records for the next round. Streams that fail wait out their own
 * delay (src_backoff). */
static void ship_round(ship_dest *d, bool *behind)
{
    ship *s = d->s;
    uint64_t t0 = (uint64_t)os_mono_ms(), t1, t2, pending = 0, next = UINT64_MAX;
    uint32_t nrec = 0;
    int m = 0;

    *behind = false;
    int di = (int)(d - s->d), node = ixroute_node(s->ixr, di);
    for (int i = 0; i < s->nparts; i++) {
        ship_src *c = &d->src[i];
        int prc;

        if (!src_due(c, t0, &pending, &next))
            continue;
        if (t0 >= c->head_ms + SHIP_HW_IDLE_MS &&
            (prc = st_hw_advance(c->p, SHIP_HW_IDLE_MS * 1000ull)) != 0)
            LOG_WARN("shipper %llu -> %llu: cannot raise the idle partition's version "
                     "high-water: %s",
                     (unsigned long long)c->p->id, (unsigned long long)d->dest->id,
                     sx_strerror(prc));
        prc = src_prepare(c, d->dest->id);
        if (prc != 0) {
            if (c->backoff_ms == 0)
                LOG_ERROR("shipper %llu -> %llu: cannot read the outbox: %s (retrying)",
                          (unsigned long long)c->p->id, (unsigned long long)d->dest->id,
                          sx_strerror(prc));
            src_backoff(c);
            continue;
        }
        memset(&d->jobs[m], 0, sizeof(d->jobs[m]));
        d->jobs[m].peer = s->peers[node];
        d->jobs[m].req = c->frame;
        d->jobs[m].req_n = c->fn;
        if (d->dest->nrep > 1) {
            /* a replicated destination's leader may be stalled or gone:
             * after SHIP_REPL_ATTEMPT_MS the round ends and the next goes
             * to another replica (ixroute.h); records sent twice are
             * applied once (watermarks) */
            d->jobs[m].timeout_ms = SHIP_REPL_ATTEMPT_MS;
            d->jobs[m].fail_unsent = true;
        }
        d->job_src[m] = i;
        nrec += c->b.n;
        m++;
    }
    if (m == 0)
        return;
    t1 = (uint64_t)os_mono_ms();
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stop; /* ship_stop closes the sockets next: no new calls */
    pthread_mutex_unlock(&s->mu);
    int crc = stopping ? SX_EUNAVAIL : net_call_all(d->jobs, m, SHIP_TIMEOUT_MS);
    t2 = (uint64_t)os_mono_ms();
    for (int k = 0; k < m; k++) {
        ship_src *c = &d->src[d->job_src[k]];

        if (crc != 0)
            d->jobs[k].err = crc;
        int terr = d->jobs[k].err, frc = src_finish(d, c, &d->jobs[k]);
        if (frc == 0 && !c->b.complete)
            *behind = true;
        /* a replicated destination: on to its leader (ixroute.h) */
        if (terr != 0)
            ixroute_fail(s->ixr, di, node, terr, 0);
        else if (frc == SX_ENOTLEADER)
            ixroute_fail(s->ixr, di, node, frc, msg_err_hint(d->jobs[k].resp, d->jobs[k].resp_n));
        free(d->jobs[k].resp);
        d->jobs[k].resp = NULL;
        src_clear(c);
    }
    slow_round(d, m, nrec, t0, t1, t2);
}

/* Records pending for d across its streams that are due; *due is set when
 * some stream has anything to say, *next (when none has) to the earliest
 * time one will (see src_due). */
static uint64_t dest_pending(ship_dest *d, bool *due, uint64_t *next)
{
    uint64_t pending = 0, now = (uint64_t)os_mono_ms();

    *due = false;
    *next = UINT64_MAX;
    for (int i = 0; i < d->s->nparts; i++)
        if (src_due(&d->src[i], now, &pending, next))
            *due = true;
    return pending;
}

/* Writes the deletions of shipped records no group has carried, for the
 * partitions whose head has not moved for SHIP_IDLE_MS (no group is likely
 * to carry them soon). */
static void flush_idle(ship_dest *d)
{
    uint64_t now = (uint64_t)os_mono_ms();

    for (int i = 0; i < d->s->nparts; i++)
        if (now >= d->src[i].head_ms + SHIP_IDLE_MS)
            st_shipped_flush(d->src[i].p);
}

/* Sleeps until the monotonic time until_ms unless the ship stops first
 * (a commit's wake-up meant for idle threads may wake it early: it sleeps
 * on). Needs s->mu. */
static void sleep_until_locked(ship *s, uint64_t until_ms)
{
    while (!s->stop) {
        uint64_t now = (uint64_t)os_mono_ms();
        struct timespec ts;

        if (now >= until_ms)
            break;
        deadline_in(&ts, (int)(until_ms - now));
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
}

/* Waits until some stream of d has something to say, then lingers (see
 * SHIP_LINGER_MS) if the previous round began at started_ms, took all
 * that was pending (not behind) and little is pending now. Writes idle
 * partitions' pending deletions on the way. False on stop. */
static bool wait_work(ship_dest *d, uint64_t started_ms, bool behind)
{
    ship *s = d->s;
    uint64_t pending = 0, next = UINT64_MAX;
    bool due = false, flushed = false;

    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        uint64_t gen = s->gen;

        pthread_mutex_unlock(&s->mu);
        pending = dest_pending(d, &due, &next);
        if (!flushed) {
            flush_idle(d);
            flushed = true;
        }
        pthread_mutex_lock(&s->mu);
        if (due || s->stop)
            break;
        if (s->gen != gen)
            continue;
        uint64_t now = (uint64_t)os_mono_ms();
        uint64_t wait = next > now ? next - now : 1;
        struct timespec ts;

        deadline_in(&ts, (int)(wait < SHIP_IDLE_MS ? wait : SHIP_IDLE_MS));
        s->idle++;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        s->idle--;
        flushed = false;
    }
    if (!behind && pending > 0 && pending < SHIP_LINGER_RECORDS)
        sleep_until_locked(s, started_ms + (uint64_t)s->linger_ms);
    bool go = !s->stop;
    pthread_mutex_unlock(&s->mu);
    return go;
}

/* Writes the live end marker 'O' | dest | 2^64-1 (empty value) after the
 * destination's queue. leveldb's Seek and Next skip deletion markers one by
 * one, so without it a scan of this queue that runs past its last record
 * walks every not-yet-compacted deleted record of the next destination's
 * queue (after a bulk load: hundreds of thousands per round). The marker
 * equals the scan's exclusive upper bound, so the scan stops on it. Not
 * synced: a marker lost in a crash is written again at the next start. */
static void write_end_marker(st_part *p, uint64_t dest)
{
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    uint8_t k[17];

    if (b == NULL) {
        LOG_WARN("shipper: writing the queue end marker: out of memory");
        return;
    }
    k[0] = ST_OUT_PREFIX;
    be_put64(k + 1, dest);
    be_put64(k + 9, UINT64_MAX);
    st_kput(p, b, k, sizeof(k), "", 0);
    if (ldb_write_lazy(p->store->db, b) != 0) /* logged; the store refuses writes now */
        LOG_WARN("shipper: the queue end marker of destination %llu was not written",
                 (unsigned long long)dest);
    leveldb_writebatch_destroy(b);
}

static void *ship_main(void *arg)
{
    ship_dest *d = arg;
    ship *s = d->s;
    uint64_t started = 0;
    bool behind = false;

    os_thread_name("sx-ship");

    for (int i = 0; i < s->nparts; i++)
        write_end_marker(d->src[i].p, d->dest->id);
    while (wait_work(d, started, behind)) {
        started = (uint64_t)os_mono_ms();
        ship_round(d, &behind);
    }
    return NULL;
}

/* The linger: SHARDEX_SHIP_LINGER_MS when set to 0..SHIP_LINGER_MAX_MS
 * (anything else is reported and ignored), else SHIP_LINGER_MS. */
static int linger_from_env(void)
{
    return (int)os_env_long("SHARDEX_SHIP_LINGER_MS", 0, SHIP_LINGER_MAX_MS, SHIP_LINGER_MS);
}

/* Frees what ship_start allocated (threads joined, peers closed). */
static void ship_free(ship *s)
{
    for (int i = 0; s->d && i < s->n; i++) {
        ship_dest *d = &s->d[i];

        for (int k = 0; d->src && k < s->nparts; k++) {
            src_clear(&d->src[k]);
            tup_bytes_free(&d->src[k].b.vals);
            pend_drop(&d->src[k]);
            free(d->src[k].pend);
        }
        free(d->src);
        free(d->jobs);
        free(d->job_src);
    }
    for (int i = 0; s->peers && i < s->cfg->nnodes; i++)
        net_peer_close(s->peers[i]);
    free(s->peers);
    ixroute_free(s->ixr);
    free(s->d);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Allocates d's streams and job arrays. Returns 0 or SX_ENOMEM. */
static int dest_init(ship *s, ship_dest *d, const cfg_part *dest)
{
    size_t np = s->nparts ? (size_t)s->nparts : 1;

    d->s = s;
    d->dest = dest;
    d->src = calloc(np, sizeof(*d->src));
    d->jobs = calloc(np, sizeof(*d->jobs));
    d->job_src = calloc(np, sizeof(*d->job_src));
    if (d->src == NULL || d->jobs == NULL || d->job_src == NULL)
        return SX_ENOMEM;
    for (int k = 0; k < s->nparts; k++)
        d->src[k].p = s->parts[k];
    return 0;
}

int ship_start(st_part **parts, int nparts, const cfg_cluster *cfg, ship **out)
{
    ship *s = calloc(1, sizeof(*s));
    int rc = 0;

    if (s == NULL)
        return SX_ENOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->parts = parts;
    s->nparts = nparts;
    s->cfg = cfg;
    s->n = cfg->nindex;
    s->linger_ms = linger_from_env();
    s->d = calloc(s->n ? (size_t)s->n : 1, sizeof(*s->d));
    s->peers = calloc((size_t)cfg->nnodes, sizeof(*s->peers));
    if (s->d == NULL || s->peers == NULL || ixroute_new(cfg, &s->ixr) != 0) {
        ship_free(s);
        return SX_ENOMEM;
    }
    /* one link per index node holding a replica, shared by its
     * destinations' threads, each with one round in flight: as many
     * batches as destinations there */
    for (int i = 0; i < s->n && rc == 0; i++) {
        for (int r = 0; r < cfg->index[i].nrep && rc == 0; r++) {
            int node = cfg->index[i].rep[r], batches = 0;

            if (s->peers[node] != NULL)
                continue;
            for (int k = 0; k < s->n; k++)
                batches += cfg_part_on(&cfg->index[k], node);
            if (net_batch_frames(1) == 0)
                batches = NET_PEER_ALONE;
            rc = net_peer_open_link(cfg->nodes[node].url, batches, &s->peers[node]);
        }
    }
    for (int i = 0; i < s->n && rc == 0; i++)
        rc = dest_init(s, &s->d[i], &cfg->index[i]);
    if (rc != 0) {
        ship_free(s);
        return rc;
    }
    for (int k = 0; k < nparts; k++)
        parts[k]->ship = s;
    for (int i = 0; i < s->n; i++) {
        if (pthread_create(&s->d[i].th, NULL, ship_main, &s->d[i]) != 0) {
            ship_stop(s);
            return SX_EINTERNAL;
        }
        s->d[i].started = true;
    }
    *out = s;
    return 0;
}

void ship_quiesce(ship *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void ship_stop(ship *s)
{
    if (s == NULL)
        return;
    ship_quiesce(s);
    for (int i = 0; s->peers && i < s->cfg->nnodes; i++)
        net_peer_shut(s->peers[i]); /* (accepts NULL) */
    for (int i = 0; i < s->n; i++)
        if (s->d[i].started)
            pthread_join(s->d[i].th, NULL);
    for (int k = 0; k < s->nparts; k++)
        s->parts[k]->ship = NULL;
    ship_free(s);
}

void ship_notify(ship *s)
{
    pthread_mutex_lock(&s->mu);
    s->gen++;
    if (s->idle > 0) /* lingering shippers need no wake-up */
        pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

bool ship_acked_all(ship *s, st_part *p, uint64_t seq)
{
    return ship_min_acked(s, p) >= seq;
}

uint64_t ship_min_acked(ship *s, st_part *p)
{
    uint64_t m = UINT64_MAX;
    int k = 0;

    while (k < s->nparts && s->parts[k] != p)
        k++;
    if (k == s->nparts)
        return 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < s->n; i++)
        if (s->d[i].src[k].acked < m)
            m = s->d[i].src[k].acked;
    pthread_mutex_unlock(&p->mu);
    return m;
}
