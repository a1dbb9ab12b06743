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
#include "ixroute.h"
#include "storage_part.h"
#include "sx_errors.h"
#include "u64set.h"

/* Records one destination's share of a chunk holds at most; a chunk holds
 * at most BF_CHUNK of them, all checked and sent under one write lock. */
#define BF_EMIT 4096
#define BF_CHUNK (4 * BF_EMIT)
/* The most one destination's share of a chunk holds (keys and projections;
 * a frame may hold 16 MiB): a chunk ends early at it. A record larger than
 * this goes alone. SHARDEX_BACKFILL_SEND_KB (1..8192) sets it, for tests. */
#define BF_SEND_KB_DEFAULT 4096
#define BF_SEND_KB_MAX 8192
/* An I_BUILD's deadline. While the index nodes answer, the write lock is
 * held through the call, so a node that hangs stalls the writes waiting
 * for this partition's lock (its node's committer with them) this long at
 * most, once: a round to a node whose link is down, and the attempts after
 * a call that got no answer, release the lock before they wait (bf_emit).
 * Below the node's stop grace (8 s). */
#define BF_SEND_TIMEOUT_MS 5000
#define BF_RETRY_MIN_MS 100  /* a failed chunk is retried after this, */
#define BF_RETRY_MAX_MS 5000 /* doubling up to this */
/* Facts written during a build that the build remembers exactly (a table of
 * 64 MiB at most); past that every record is checked against its fact with
 * a read, which is slower but as right. */
#define BF_TOUCH_MAX (4u << 20)
#define BF_STOP_EVERY 65536 /* facts scanned between stop checks */

/* One destination index partition's share of a chunk: I_BUILD's lists,
 * each with room for BF_EMIT records (kinds stay 0: puts). */
typedef struct bf_dest {
    msg_I_BUILD_req rq;
    uint64_t epoch; /* the index node's, from the first reply to
                     * this build (0: none yet); see bf_seal */
    size_t bytes;   /* keys and projections held */
    mp_buf frame;   /* the encoded request, its memory kept
                     * from round to round */
} bf_dest;

typedef struct bf_scan {
    st_part *p;
    const cat_table *t;
    const cat_index **ix; /* the indexes built together */
    uint32_t nix;
    const leveldb_snapshot_t *snap;
    u64set touch; /* facts written since the snapshot (p->bf_touch) */
    bf_recs run;
    size_t run_max; /* bytes a run holds at most */
    /* The sorted run by destination: ord[dfirst[d] .. dfirst[d + 1]) are
     * the places (bf_recs_get) of destination d's records in key order;
     * dnext[d] is the first not yet applied, dstop[d] where the chunk being
     * sent ends. Each chunk takes from every destination at once, so that
     * every index node applies its share of it while the others do. */
    uint32_t *ord, *odest; /* run.n each; odest: a record's destination */
    size_t ocap;
    size_t *dfirst, *dnext, *dstop;
    int drr; /* the destination a chunk starts with (in turn) */
    leveldb_writebatch_t *b;
    net_peer **peers; /* by config node: index nodes, opened when needed */
    ixroute *ixr;     /* where each destination's calls go (its leader):
                       * the node's (st_store.ixr), else the scan's own */
    bool own_ixr;
    bf_dest *dests; /* by destination (cfg->index order) */
    net_job *jobs;  /* one per destination a chunk has records for */
    int *jobdest;   /* the destination of each job */
    int *jobnode;   /* the node each job went to */
    tup_bytes key;
    mp_buf proj;
    item_view view; /* the fact being scanned, read once */
    uint64_t scanned, records, skipped, runs;
    uint64_t rounds;                                       /* chunks sent (and applied) */
    uint64_t us_scan, us_sort, us_check, us_send, us_seal; /* where the time
                                                            * went (monotonic) */
    unsigned fails;                                        /* attempts in a row a chunk failed */
    size_t send_max; /* bytes a destination's share holds at most */
    uint8_t resume[ST_FACT_KEY_MAX + 1];
    size_t resume_n; /* > 0: the run is full; resume at this key */
    bool stop;       /* the node stops or an index was dropped */
    bool lost;       /* an index node restarted during the build:
                      * what it had not sealed may be lost */
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
    mp_span item;
    uint64_t ver;
    int rc;

    if (kn > ST_FACT_KEY_MAX)
        return SX_EIO;
    if (bf_recs_bytes(&s->run) >= s->run_max) {
        memcpy(s->resume, k, kn); /* k is not done: resume at it */
        s->resume_n = kn;
        return 1;
    }
    if (++s->scanned % BF_STOP_EVERY == 0 && node_should_stop()) {
        s->stop = true;
        return 1;
    }
    if (s->scanned % BF_EMIT == 0)
        bf_publish(s, true);
    if (kn < ST_FACT_HDR + 9 || st_fact_decode(v, vn, &ver, &item) != 0)
        return SX_EIO;
    rc = item_view_parse(&s->view, item.p, item.n);
    if (rc == SX_ENOMEM)
        return rc;
    if (rc != 0)
        return 0; /* not a map: in no index */
    for (uint32_t i = 0; i < s->nix; i++) {
        const cat_index *ix = s->ix[i];
        uint8_t id[4];

        s->key.n = 0;
        be_put32(id, ix->id);
        rc = tup_bytes_append(&s->key, id, 4);
        if (rc == 0)
            rc = item_index_tuple_view(s->t, ix, &s->view, &s->key);
        if (rc == SX_ENOMEM)
            return rc;
        if (rc != 0)
            continue; /* not in this index (sparse) */
        s->proj.sb.size = 0;
        rc = item_project_view(s->t, ix, &s->view, &s->proj);
        if (rc == 0 && s->proj.oom)
            rc = SX_ENOMEM;
        if (rc == 0)
            rc = bf_recs_add(&s->run, k, kn, ver, be_get64(k + ST_FACT_HDR), s->key.p, s->key.n,
                             (const uint8_t *)s->proj.sb.data, s->proj.sb.size);
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
    uint64_t ver = 0;
    mp_span item;
    int rc = st_kget(s->p, NULL, r->fkey, r->fkn, &val, &vn);

    if (rc == SX_ENOTFOUND)
        return false;
    if (rc == 0)
        rc = st_fact_decode(val, vn, &ver, &item);
    free(val);
    if (rc != 0)
        *err = rc;
    return rc == 0 && ver == r->version;
}

/* Allocates the per-destination lists of a chunk. Returns 0 or SX_ENOMEM. */
static int bf_dests_init(bf_scan *s)
{
    const cfg_cluster *cfg = s->p->cfg;
    int n = cfg->nindex ? cfg->nindex : 1;

    s->dests = calloc((size_t)n, sizeof(*s->dests));
    s->jobs = calloc((size_t)n, sizeof(*s->jobs));
    s->jobdest = calloc((size_t)n, sizeof(*s->jobdest));
    s->jobnode = calloc((size_t)n, sizeof(*s->jobnode));
    s->peers = calloc((size_t)cfg->nnodes, sizeof(*s->peers));
    s->dfirst = calloc((size_t)n + 1, sizeof(*s->dfirst));
    s->dnext = calloc((size_t)n, sizeof(*s->dnext));
    s->dstop = calloc((size_t)n, sizeof(*s->dstop));
    if (s->dests == NULL || s->jobs == NULL || s->jobdest == NULL || s->jobnode == NULL ||
        s->peers == NULL || s->dfirst == NULL || s->dnext == NULL || s->dstop == NULL)
        return SX_ENOMEM;
    s->ixr = s->p->store->ixr;
    if (s->ixr == NULL) {
        if (ixroute_new(cfg, &s->ixr) != 0)
            return SX_ENOMEM;
        s->own_ixr = true;
    }
    for (int d = 0; d < cfg->nindex; d++) {
        msg_I_BUILD_req *rq = &s->dests[d].rq;

        mp_buf_init(&s->dests[d].frame);
        rq->kinds.v = calloc(BF_EMIT, sizeof(uint64_t));
        rq->versions.v = calloc(BF_EMIT, sizeof(uint64_t));
        rq->hashes.v = calloc(BF_EMIT, sizeof(uint64_t));
        rq->keys.v = calloc(BF_EMIT, sizeof(mp_span));
        rq->projs.v = calloc(BF_EMIT, sizeof(mp_span));
        if (!rq->kinds.v || !rq->versions.v || !rq->hashes.v || !rq->keys.v || !rq->projs.v)
            return SX_ENOMEM;
    }
    return 0;
}

static void bf_dests_free(bf_scan *s)
{
    const cfg_cluster *cfg = s->p->cfg;

    for (int d = 0; s->dests != NULL && d < cfg->nindex; d++) {
        msg_I_BUILD_req *rq = &s->dests[d].rq;

        free(rq->kinds.v);
        free(rq->versions.v);
        free(rq->hashes.v);
        free(rq->keys.v);
        free(rq->projs.v);
        mp_buf_free(&s->dests[d].frame);
    }
    for (int k = 0; s->peers != NULL && k < cfg->nnodes; k++)
        net_peer_close(s->peers[k]);
    free(s->dests);
    free(s->jobs);
    free(s->jobdest);
    free(s->jobnode);
    free(s->peers);
    if (s->own_ixr)
        ixroute_free(s->ixr);
    s->ixr = NULL;
    free(s->dfirst);
    free(s->dnext);
    free(s->dstop);
    free(s->ord);
    free(s->odest);
}

/* Opens a link to every index node that has none yet. Returns 0,
 * SX_ENOMEM or SX_EINVAL. */
static int bf_connect(bf_scan *s)
{
    const cfg_cluster *cfg = s->p->cfg;
    int rc = 0;

    for (int d = 0; rc == 0 && d < cfg->nindex; d++) {
        for (int r = 0; rc == 0 && r < cfg->index[d].nrep; r++) {
            int node = cfg->index[d].rep[r];

            if (s->peers[node] == NULL)
                rc = net_peer_open_link(cfg->nodes[node].url, 1, &s->peers[node]);
        }
    }
    return rc;
}

/* Whether the link to every destination the gathered chunk has records for
 * is up (a call to one that is down would wait for its redial). */
static bool bf_reachable(bf_scan *s)
{
    const cfg_cluster *cfg = s->p->cfg;

    for (int d = 0; d < cfg->nindex; d++)
        if (s->dests[d].rq.versions.n > 0 && !net_peer_connected(s->peers[ixroute_node(s->ixr, d)]))
            return false;
    return true;
}

/* Record r of the run joins destination d's I_BUILD; *full (nothing added)
 * when that share would pass s->send_max bytes with it. */
static int bf_dest_add(bf_scan *s, int d, const bf_rec *r, bool *full)
{
    static const uint8_t nil = 0xc0; /* msgpack nil: no projection */
    bf_dest *bd = &s->dests[d];
    msg_I_BUILD_req *rq = &bd->rq;
    uint32_t i = rq->versions.n;

    *full = i > 0 && bd->bytes + r->kn + r->pn > s->send_max;
    if (*full)
        return 0;
    if (i >= BF_EMIT)
        return SX_EINTERNAL;
    bd->bytes += r->kn + r->pn;
    rq->versions.v[i] = r->version;
    rq->hashes.v[i] = r->h;
    rq->keys.v[i] = (mp_span){ r->key, r->kn };
    rq->projs.v[i] = r->pn > 0 ? (mp_span){ r->proj, r->pn } : (mp_span){ &nil, 1 };
    rq->kinds.n = rq->versions.n = rq->hashes.n = rq->keys.n = rq->projs.n = i + 1;
    return 0;
}

/* Once the run is sorted: orders its records by destination (a counting
 * sort, keeping key order within each) into s->ord, s->dfirst, and sets
 * every destination's cursor to its first record. Returns 0, SX_ENOMEM,
 * or SX_EINTERNAL for a record without an index id. */
static int bf_route(bf_scan *s)
{
    const cfg_cluster *cfg = s->p->cfg;
    size_t n = s->run.n;

    if (n > UINT32_MAX || (n > 0 && cfg->nindex <= 0))
        return SX_EINTERNAL;
    if (n > s->ocap) {
        uint32_t *o = realloc(s->ord, n * sizeof(*o)), *od;

        if (o == NULL)
            return SX_ENOMEM;
        s->ord = o;
        od = realloc(s->odest, n * sizeof(*od));
        if (od == NULL)
            return SX_ENOMEM;
        s->odest = od;
        s->ocap = n;
    }
    memset(s->dfirst, 0, ((size_t)cfg->nindex + 1) * sizeof(*s->dfirst));
    for (size_t i = 0; i < n; i++) {
        bf_rec r;

        bf_recs_get(&s->run, i, &r);
        if (r.kn < 4)
            return SX_EINTERNAL;
        s->odest[i] = (uint32_t)(cfg_index_for(cfg, r.key + 4, r.kn - 4) - cfg->index);
        s->dfirst[s->odest[i] + 1]++;
    }
    for (int d = 0; d < cfg->nindex; d++) {
        s->dfirst[d + 1] += s->dfirst[d];
        s->dnext[d] = s->dfirst[d];
    }
    for (size_t i = 0; i < n; i++)
        s->ord[s->dnext[s->odest[i]]++] = (uint32_t)i;
    for (int d = 0; d < cfg->nindex; d++)
        s->dnext[d] = s->dfirst[d];
    return 0;
}

/* Whether every destination's records of the run were applied. */
static bool bf_routed_all(const bf_scan *s)
{
    for (int d = 0; d < s->p->cfg->nindex; d++)
        if (s->dnext[d] < s->dfirst[d + 1])
            return false;
    return true;
}

/* Empties every destination's share. */
static void bf_dests_reset(bf_scan *s)
{
    for (int d = 0; d < s->p->cfg->nindex; d++) {
        bf_dest *bd = &s->dests[d];

        msgpack_sbuffer_clear(&bd->frame.sb); /* keeps its memory */
        bd->frame.oom = false;
        bd->bytes = 0;
        bd->rq.kinds.n = bd->rq.versions.n = bd->rq.hashes.n = 0;
        bd->rq.keys.n = bd->rq.projs.n = 0;
    }
}

/* Checks the epoch of destination d's reply: the first one is kept; a
 * different one later means the index node restarted and may have lost
 * unsealed rounds (s->lost, logged). Returns 0 or SX_EUNAVAIL. */
static int bf_check_epoch(bf_scan *s, int d, uint64_t epoch)
{
    bf_dest *bd = &s->dests[d];

    if (bd->epoch == 0 || bd->epoch == epoch) {
        bd->epoch = epoch;
        return 0;
    }
    if (!s->lost)
        LOG_WARN("partition %llu: index build: index partition %llu's node restarted "
                 "during the build (epoch %016llx, then %016llx): records it had not "
                 "sealed may be lost, so the build starts again",
                 (unsigned long long)s->p->id, (unsigned long long)s->p->cfg->index[d].id,
                 (unsigned long long)bd->epoch, (unsigned long long)epoch);
    s->lost = true;
    return SX_EUNAVAIL;
}

/* Sends every destination's I_BUILD (upto = at) at once, waits for all and
 * empties the shares; with seal, an empty one (a seal, msg.h) to every
 * destination that answered a round of this build. Returns 0 when every
 * one was applied, else the first error (logged once per failure streak:
 * s->fails); *unresponsive when a call got no answer (timed out, no
 * connection) rather than an error. */
static int bf_send(bf_scan *s, uint64_t at, bool seal, bool *unresponsive)
{
    const cfg_cluster *cfg = s->p->cfg;
    int m = 0, rc = 0;

    for (int d = 0; rc == 0 && d < cfg->nindex; d++) {
        bf_dest *bd = &s->dests[d];

        if (seal ? bd->epoch == 0 : bd->rq.versions.n == 0)
            continue;
        bd->rq.part = cfg->index[d].id;
        bd->rq.source = s->p->id;
        bd->rq.upto = at;
        bd->rq.seals = 1; /* bf_seal ends every build */
        rc = msg_encode_req(MSG_I_BUILD, &bd->rq, &bd->frame);
        s->jobs[m] = (net_job){ .peer = s->peers[ixroute_node(s->ixr, d)],
                                .req = (const uint8_t *)bd->frame.sb.data,
                                .req_n = bd->frame.sb.size };
        s->jobdest[m] = d;
        s->jobnode[m] = ixroute_node(s->ixr, d);
        m++;
    }
    if (rc == 0 && m > 0)
        rc = net_call_all(s->jobs, m, BF_SEND_TIMEOUT_MS);
    for (int k = 0; k < m; k++) {
        net_job *j = &s->jobs[k];
        msg_I_BUILD_rep rep;
        char emsg[200] = "";
        int jrc = j->err;

        if (rc == 0 && jrc != 0)
            *unresponsive = true;
        if (rc == 0 && jrc == 0)
            jrc = msg_decode_rep(MSG_I_BUILD, j->resp, j->resp_n, &rep, emsg, sizeof(emsg));
        /* a replicated destination: on to its leader (ixroute.h) */
        if (j->err != 0 || rc != 0)
            ixroute_fail(s->ixr, s->jobdest[k], s->jobnode[k], rc != 0 ? rc : j->err, 0);
        else if (jrc == SX_ENOTLEADER)
            ixroute_fail(s->ixr, s->jobdest[k], s->jobnode[k], jrc,
                         msg_err_hint(j->resp, j->resp_n));
        if (rc == 0 && jrc == 0)
            jrc = bf_check_epoch(s, s->jobdest[k], rep.epoch);
        if (rc == 0 && jrc != 0 && !s->lost) {
            if (s->fails == 0)
                LOG_WARN("partition %llu: index build: sending %s: %s%s%s (retrying)",
                         (unsigned long long)s->p->id, seal ? "the seal" : "records",
                         sx_strerror(jrc), emsg[0] ? ": " : "", emsg);
        }
        if (rc == 0 && jrc != 0)
            rc = jrc;
        free(j->resp);
    }
    bf_dests_reset(s);
    return rc;
}

/* Under wlock: gathers the next chunk of the sorted run into the
 * destinations' shares: from each destination in turn (starting with a
 * different one each chunk), its records from its cursor on, up to BF_EMIT
 * or until its share is full, BF_CHUNK in all, leaving out those no longer
 * current; s->dstop[d] is where destination d's part of the chunk ends,
 * *sent how many it holds, *skipped how many it left out. */
static int bf_gather(bf_scan *s, uint64_t *sent, uint64_t *skipped)
{
    int nd = s->p->cfg->nindex, rc = 0;
    size_t total = 0;

    *sent = *skipped = 0;
    for (int k = 0; k < nd; k++) {
        int d = (s->drr + k) % nd;
        size_t i = s->dnext[d], end = s->dfirst[d + 1];
        bool full = false;

        for (; rc == 0 && i < end && total < BF_CHUNK && s->dests[d].rq.versions.n < BF_EMIT; i++) {
            bf_rec r;

            bf_recs_get(&s->run, s->ord[i], &r);
            if (u64set_has(&s->touch, st_fact_tag(r.fkey, r.fkn)) && !bf_current(s, &r, &rc)) {
                *skipped += rc == 0;
                total++;
                continue;
            }
            rc = bf_dest_add(s, d, &r, &full);
            if (full)
                break;
            *sent += rc == 0;
            total++;
        }
        s->dstop[d] = i;
    }
    s->drr = nd > 0 ? (s->drr + 1) % nd : 0;
    return rc;
}

/* The pause before the next attempt after one more failure: doubling from
 * BF_RETRY_MIN_MS up to BF_RETRY_MAX_MS. */
static int bf_next_pause(int pause)
{
    pause = pause ? pause * 2 : BF_RETRY_MIN_MS;
    return pause > BF_RETRY_MAX_MS ? BF_RETRY_MAX_MS : pause;
}

/* Waits ms (in steps, so that a stop is seen). */
static void bf_pause(int ms)
{
    struct timespec ts = { 0, 20 * 1000000L };

    for (int t = 0; t < ms && !node_should_stop(); t += 20)
        nanosleep(&ts, NULL);
}

/* True when the newest catalog the node holds no longer has index id: it
 * was dropped while being backfilled (the index nodes collect what was
 * applied of it). */
static bool bf_dropped(st_part *p, uint32_t id)
{
    const cat_catalog *cat = NULL;

    return st_cat_peek(p->cc, 0, &cat) == 0 && cat_index_by_id(cat, id, NULL) == NULL;
}

/* Sets s->stop when the node stops or one of the indexes built was dropped
 * (then s->dropped too); returns s->stop. */
static bool bf_check_stop(bf_scan *s)
{
    if (node_should_stop())
        s->stop = true;
    for (uint32_t k = 0; k < s->nix && !s->stop; k++)
        if (bf_dropped(s->p, s->ix[k]->id))
            s->stop = s->dropped = true;
    return s->stop;
}

/* Sorts the run and sends it to the index partitions chunk by chunk, each
 * chunk holding the next records of every destination (bf_gather). Each
 * chunk's records are checked against their facts under the write lock,
 * and the lock is held until the destinations applied them: no write of
 * the partition comes between a record's check and its application, so
 * none is refused (an index partition refuses a chunk whose source's
 * watermark is past the head it was read at: msg.h, I_BUILD). A chunk
 * that fails is checked and sent again after a pause (BF_RETRY_MIN_MS,
 * doubling), fresh: what a failed attempt applied changes nothing, and a
 * late copy of it is refused if a later write came first. A chunk for an
 * index node whose link is down, and the attempts after a call that got
 * no answer, release the lock before they wait (they may then be refused,
 * and are sent again), so a hung index node holds the partition's writes
 * once at most and one that is down not at all. Stops between
 * chunks when the node stops or an index is dropped. Returns 0 or an error
 * no retry mends (SX_ENOMEM, SX_EIO, or an index node's refusal of the
 * request as invalid). */
static int bf_emit(bf_scan *s)
{
    st_part *p = s->p;
    bool hold = true;
    int rc = 0, pause = 0;
    uint64_t t = os_mono_us(), t2;

    bf_recs_sort(&s->run);
    rc = bf_route(s);
    s->runs++;
    s->us_sort += os_mono_us() - t;
    while (rc == 0 && !bf_routed_all(s) && !s->stop) {
        uint64_t sent = 0, skipped = 0, at;
        bool unresponsive = false, locked = false;

        rc = bf_connect(s);
        if (rc == 0) {
            pthread_mutex_lock(&p->wlock);
            st_part_sync_working(p);
            t = os_mono_us();
            rc = bf_gather(s, &sent, &skipped);
            at = p->w_head;
            t2 = os_mono_us();
            s->us_check += t2 - t;
            locked = hold && bf_reachable(s);
            if (rc == 0 && locked)
                rc = bf_send(s, at, false, &unresponsive);
            pthread_mutex_unlock(&p->wlock);
            if (rc == 0 && !locked)
                rc = bf_send(s, at, false, &unresponsive);
            bf_dests_reset(s);
            s->us_send += os_mono_us() - t2;
        }
        if (s->lost || (rc != 0 && rc != SX_EUNAVAIL && rc != SX_ETIMEDOUT && rc != SX_ENET))
            return rc; /* not mended by trying again */
        if (rc == 0) {
            memcpy(s->dnext, s->dstop, (size_t)s->p->cfg->nindex * sizeof(*s->dnext));
            s->records += sent;
            s->skipped += skipped;
            s->rounds++;
            if (s->fails > 0)
                LOG_INFO("partition %llu: index build: sending records again after %u "
                         "failed attempt(s)",
                         (unsigned long long)p->id, s->fails);
            s->fails = 0;
            pause = 0;
            hold = true;
        } else {
            s->fails++;
            hold = !unresponsive;
            pause = bf_next_pause(pause);
            if ((s->fails & (s->fails - 1)) == 0 && s->fails > 1)
                LOG_WARN("partition %llu: index build: sending records failed %u times in a "
                         "row, last: %s (retrying every %d ms at most)",
                         (unsigned long long)p->id, s->fails, sx_strerror(rc), BF_RETRY_MAX_MS);
            bf_pause(pause);
            rc = 0;
        }
        bf_publish(s, true);
        bf_check_stop(s);
    }
    return rc;
}

/* Seals the build at every destination that applied a round of it (an
 * I_BUILD without records, msg.h): once each has answered with the epoch
 * it answered the first round with, every record of the build is durable
 * there (index_part.h). Retried like a round, without the write lock (a
 * seal checks nothing against the facts); gives up when the node stops or
 * an index is dropped (s->stop). Returns 0, or SX_EUNAVAIL with s->lost
 * when an index node restarted (the build starts again), or an error no
 * retry mends. */
static int bf_seal(bf_scan *s)
{
    uint64_t t = os_mono_us();
    int rc, pause = 0;

    for (;;) {
        bool unresponsive = false;

        rc = bf_connect(s);
        if (rc == 0)
            rc = bf_send(s, 0, true, &unresponsive);
        if (rc == 0 || s->lost || (rc != SX_EUNAVAIL && rc != SX_ETIMEDOUT && rc != SX_ENET))
            break;
        s->fails++;
        pause = bf_next_pause(pause);
        bf_pause(pause);
        if (bf_check_stop(s)) {
            rc = 0;
            break;
        }
    }
    if (rc == 0 && s->fails > 0)
        LOG_INFO("partition %llu: index build sealed after %u failed attempt(s)",
                 (unsigned long long)s->p->id, s->fails);
    s->fails = 0;
    s->us_seal += os_mono_us() - t;
    return rc;
}

/* Under wlock: commits the backfill records ('M' 'B' | index id -> the
 * outbox head, which covers every record of the writes made during the
 * build; the build's own were applied before) of every index built, and
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
        be_put32(k + 2, s->ix[i]->id);
        be_put64(v, last);
        rc = st_kput(p, s->b, k, sizeof(k), v, sizeof(v));
    }
    if (rc != 0) {
        st_commit_abort(p);
        return rc;
    }
    rc = st_commit(p, s->b, 0);
    if (rc != 0 || p->pg != NULL) /* a replica loads them as it applies them */
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
static void join_names(char *buf, size_t n, const cat_table *t, const cat_index **ix, uint32_t nix,
                       bool ids)
{
    size_t used = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < nix && used < n; i++) {
        int w = ids ? snprintf(buf + used, n - used, "%s%u (%s.%s)", i ? ", " : "", ix[i]->id,
                               t->name, ix[i]->name)
                    : snprintf(buf + used, n - used, "%s%s.%s", i ? "," : "", t->name, ix[i]->name);
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
                 "dropped (the others start again)",
                 (unsigned long long)s->p->id, names);
    else if (rc == 0 && !s->stop)
        LOG_INFO("partition %llu: backfilled index(es) %s: %llu items, %llu records "
                 "in %llu sorted run(s) sent in %llu round(s), %llu left to later writes, "
                 "%.2f s (scan %.2f, sort %.2f, check %.2f, send %.2f, seal %.2f)",
                 (unsigned long long)s->p->id, names, (unsigned long long)s->scanned,
                 (unsigned long long)s->records, (unsigned long long)s->runs,
                 (unsigned long long)s->rounds, (unsigned long long)s->skipped, secs,
                 (double)s->us_scan / 1e6, (double)s->us_sort / 1e6, (double)s->us_check / 1e6,
                 (double)s->us_send / 1e6, (double)s->us_seal / 1e6);
    else if (s->lost)
        LOG_WARN("partition %llu: backfill of index(es) %s stopped: an index node "
                 "restarted during it (will start again)",
                 (unsigned long long)s->p->id, names);
    else if (rc != 0)
        LOG_ERROR("partition %llu: backfill of index(es) %s failed: %s (will start "
                  "again)",
                  (unsigned long long)s->p->id, names, sx_strerror(rc));
}

#ifdef SHARDEX_TEST_HOOKS
/* The test hooks SHARDEX_BACKFILL_HOLD=FILE, SHARDEX_BACKFILL_HOLD_RUN=FILE
 * and SHARDEX_BACKFILL_HOLD_SEAL=FILE, compiled in only by the test builds
 * (cmake -DSHARDEX_TEST_HOOKS=ON): while FILE exists, a backfill waits,
 * having taken its snapshot (HOLD), having emitted a run other than its
 * last (HOLD_RUN) or before its seal (HOLD_SEAL), so that a test can
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
#else
/* Release builds have no test hooks. */
static void bf_hold(const bf_scan *s, const char *var, const char *where)
{
    (void)s;
    (void)var;
    (void)where;
}
#endif

int bf_build(st_part *p, const cat_catalog *cat, const cat_table *t, const cat_index **ix,
             uint32_t nix, size_t run_max)
{
    bf_scan s;
    uint8_t lo[ST_FACT_KEY_MAX + 1], hi[ST_FACT_HDR];
    size_t lo_n = ST_FACT_HDR, hi_n = ST_FACT_HDR;
    uint64_t t0 = os_mono_us();
    int rc = 0;

    memset(&s, 0, sizeof(s));
    s.p = p;
    s.t = t;
    s.ix = ix;
    s.nix = nix;
    s.run_max = run_max;
    s.send_max =
        (size_t)os_env_long("SHARDEX_BACKFILL_SEND_KB", 1, BF_SEND_KB_MAX, BF_SEND_KB_DEFAULT)
        << 10;
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
    be_put32(lo + 1, t->id);
    be_put32(hi + 1, t->id + 1);
    if (t->id == UINT32_MAX) {
        hi[0] = ST_FACT_PREFIX + 1; /* hi = "G": the end of every fact */
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
        uint64_t ts = os_mono_us();

        rc = st_ksweep(p, s.snap, lo, lo_n, hi, hi_n, bf_visit, &s);
        s.us_scan += os_mono_us() - ts;
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
                     "records emitted so far",
                     (unsigned long long)p->id, t->name, (unsigned long long)s.scanned,
                     (unsigned long long)s.records);
            bf_hold(&s, "SHARDEX_BACKFILL_HOLD_RUN", "after a run");
            s.stop = s.stop || node_should_stop();
        }
        if (rc != 0 || s.resume_n == 0)
            break;
    }
    if (rc == 0 && !s.stop) {
        bf_hold(&s, "SHARDEX_BACKFILL_HOLD_SEAL", "before its seal");
        rc = bf_seal(&s);
    }
    pthread_mutex_lock(&p->wlock);
    st_part_sync_working(p);
    if (rc == 0 && !s.stop)
        rc = bf_finish(&s);
    p->bf_touch = NULL;
    pthread_mutex_unlock(&p->wlock);
    if (s.snap != NULL)
        leveldb_release_snapshot(p->store->db->db, s.snap);
    bf_publish(&s, false);
    bf_report(&s, rc, (double)(os_mono_us() - t0) / 1e6);
    leveldb_writebatch_destroy(s.b);
    bf_dests_free(&s);
    tup_bytes_free(&s.key);
    mp_buf_free(&s.proj);
    item_view_free(&s.view);
    bf_recs_free(&s.run);
    u64set_free(&s.touch);
    return rc;
}
