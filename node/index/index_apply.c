/*
 * index_apply.c — I_APPLY on one index partition: request validation, group
 * commit (concurrent batches from many sources share one leveldb
 * WriteBatch and one log sync), and the apply rules of index_rules.h against stored entries.
 *
 * Group commit: a request is validated on the thread that received it and
 * queued; the partition's committer thread takes the queued ops (bounded),
 * and under apply_mu drops redeliveries and advances watermarks op by op in
 * queue order, then
 * applies the records sorted by key (stable: one key's records keep queue
 * order, so the outcome is queue order's) with an in-memory overlay so
 * later records in the group see earlier ones, and writes one batch
 * (entries, tombstone records, watermarks, counters). A group of I_APPLYs
 * only is written unsynced and handed to the syncer thread (index_sync.c), which fsyncs
 * the logs once for all it was handed meanwhile, publishes the state the
 * last of them reached and answers their ops, while the committer goes on
 * with the next group (pipelined group commit: a slow sync holds up no
 * entry's visibility, only acknowledgements); ops that asked for it
 * (early) are answered right after the write. Any other group is written
 * and synced by the committer itself once the syncer holds nothing
 * (write_group), and answered by it. Either way the entries are visible to
 * readers during the sync, and an op is answered through its callback
 * (the index node's deferred I_APPLY: no worker thread sleeps through the
 * sync, and no leader/follower hand-off) or, synchronous, by waking its
 * caller.
 * The committer keeps its WriteBatch (emptied) from one large group to the
 * next, and frees it after a small one (COMMIT_KEEP_MIN_RECORDS).
 *
 * I_BUILD (a backfill's records, msg.h) shares all of it: its records join
 * the group like any others, but move no watermark, and the whole request
 * is refused when, in queue order, its source's watermark is already past
 * the head its records were read at. A group of build records only is
 * written without a sync once the partition's marker file exists, and an
 * I_BUILD without records (a seal) fsyncs the logs and removes it
 * (index_part.h): a build's records are then made durable once per source
 * partition, instead of once per round (docs/PERFORMANCE.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "index_part.h"
#include "index_commit.h"
#include "index_rules.h"
#include "keyfilter.h"
#include "hash.h"
#include "item.h"
#include "log.h"
#include "sx_errors.h"

_Static_assert(OUT_PUT == 0 && OUT_DEL == 1, "index_rules.c mirrors OUT_PUT/OUT_DEL");

#define GROUP_MAX_OPS 64
#define GROUP_MAX_RECORDS 32768 /* 8 rounds of a backlogged shipper (SHIP_BATCH) */
/* The committer keeps its batch after a group of at least this many records
 * (a build round, a loaded shipper's): the next is likely as large. After
 * a smaller one (a heartbeat, a trickle of writes) it frees it, so the
 * MiBs of a build are not held for the life of the node. */
#define COMMIT_KEEP_MIN_RECORDS 1024

/* ---- validation ---- */

static int fail(char *err, size_t errlen, int code, const char *what)
{
    snprintf(err, errlen, "%s", what);
    return code;
}

/* Records in op's request: an I_BUILD has no seqs. */
static uint32_t op_records(const msg_I_APPLY_req *m, bool build)
{
    return build ? m->versions.n : m->seqs.n;
}

static int validate(ix_part *p, const msg_I_APPLY_req *m, bool build, int *src, char *err,
                    size_t errlen)
{
    const cfg_part *cp = p->cp;
    uint32_t n = op_records(m, build), i;

    *src = ix_part_src_index(p, m->source);
    if (*src < 0 || *src >= p->ncfg)
        return fail(err, errlen, SX_EINVAL, "unknown source partition");
    if (m->kinds.n != n || m->versions.n != n || m->keys.n != n || m->hashes.n != n ||
        m->projs.n != n)
        return fail(err, errlen, SX_EINVAL, "record lists differ in length");
    if (build && (m->seqs.n != 0 || m->hw != 0))
        return fail(err, errlen, SX_EINVAL, "a build carries no seqs and no hw");
    if (!build && !ix_seqs_ok(m->seqs.v, n, m->upto))
        return fail(err, errlen, SX_EINVAL, "seqs not strictly increasing or above upto");
    for (i = 0; i < n; i++) {
        mp_span k = m->keys.v[i], pj = m->projs.v[i];
        mp_cur c = mp_cur_make(pj.p, pj.n);
        mp_val v;

        if (m->kinds.v[i] != OUT_PUT && (build || m->kinds.v[i] != OUT_DEL))
            return fail(err, errlen, SX_EINVAL,
                        build ? "a build record is not a put" : "unknown record kind");
        if (k.n < 5 || k.n > IX_MAX_LOCAL)
            return fail(err, errlen, k.n > IX_MAX_LOCAL ? SX_ETOOBIG : SX_EINVAL,
                        "index key empty or too long");
        if (!ix_tuple_in_range(k.p + 4, k.n - 4, cp->lo, cp->lo_n, cp->hi, cp->hi_n))
            return fail(err, errlen, SX_EWRONGPART, "index key outside this partition");
        if (pj.n > SX_MAX_ITEM)
            return fail(err, errlen, SX_ETOOBIG, "projection too large");
        if (mp_read(&c, &v) != 0 || (v.kind != MP_NIL && v.kind != MP_MAP))
            return fail(err, errlen, SX_EPROTO, "projection is neither nil nor a map");
    }
    return 0;
}

/* ---- the overlay: entries written earlier in the current group ---- */

typedef struct ov_slot {
    const uint8_t *k; /* borrowed from a request frame; NULL = empty */
    size_t kn;
    bool live;
    uint64_t version;
} ov_slot;

typedef struct overlay {
    ov_slot *s;
    size_t cap; /* power of two */
} overlay;

static int ov_init(overlay *o, size_t records)
{
    o->cap = 16;
    while (o->cap < records * 2)
        o->cap <<= 1;
    o->s = calloc(o->cap, sizeof(*o->s));
    return o->s ? 0 : SX_ENOMEM;
}

/* The slot for key k, whose hash is h (empty when absent); the table
 * never fills. */
static ov_slot *ov_find(overlay *o, uint64_t h, const uint8_t *k, size_t kn)
{
    size_t i = (size_t)h & (o->cap - 1);

    while (o->s[i].k != NULL && !(o->s[i].kn == kn && memcmp(o->s[i].k, k, kn) == 0))
        i = (i + 1) & (o->cap - 1);
    return &o->s[i];
}

/* ---- applying a group ---- */

typedef struct group_ctx {
    ix_part *p;
    leveldb_writebatch_t *b;
    overlay ov;
    mp_buf vb;
    uint64_t entries, tombstones;
    size_t changes; /* entries written + watermarks moved */
    uint8_t key[IX_MAX_DBKEY];
} group_ctx;

/* Looks up the stored state of local key k: overlay first, then the
 * absent-key filter (fk: k's hashes), then leveldb. */
static int stored_state(group_ctx *g, ov_slot *slot, const uint8_t *k, size_t kn, const kf_key *fk,
                        bool *have, bool *live, uint64_t *version)
{
    uint8_t *v = NULL;
    size_t vn = 0, ekn;
    ix_entry e;
    int rc;

    if (slot->k != NULL) {
        *have = true;
        *live = slot->live;
        *version = slot->version;
        return 0;
    }
    if (g->p->kf != NULL && kf_absent_key(g->p->kf, *fk)) {
        *have = false; /* never stored: no read needed */
        return 0;
    }
    ekn = ix_ekey(g->key, k, kn);
    rc = ldb_get(g->p->db, g->key, ekn, &v, &vn);
    if (rc == SX_ENOTFOUND) {
        *have = false;
        return 0;
    }
    if (rc != 0)
        return rc;
    rc = ix_entry_decode(v, vn, &e);
    free(v);
    if (rc != 0) {
        LOG_ERROR("index p%llu: corrupt stored entry", (unsigned long long)g->p->id);
        return rc;
    }
    *have = true;
    *live = e.live;
    *version = e.version;
    return 0;
}

/* Applies record i of m (already past the redelivery check). */
static int apply_record(group_ctx *g, const msg_I_APPLY_req *m, uint32_t i)
{
    mp_span k = m->keys.v[i];
    kf_key fk = kf_key_of(g->p->id, k.p, k.n); /* for the overlay and the filter */
    ov_slot *slot = ov_find(&g->ov, fk.a, k.p, k.n);
    bool have = false, live = false, nlive;
    uint64_t ver = 0, nver = m->versions.v[i];
    ix_action act;
    size_t kn;
    int rc;

    rc = stored_state(g, slot, k.p, k.n, &fk, &have, &live, &ver);
    if (rc != 0)
        return rc;
    act = ix_decide(have, ver, (int)m->kinds.v[i], nver);
    if (act == IX_SKIP)
        return 0;
    nlive = act == IX_WRITE_LIVE;
    if (have && live) {
        g->entries--;
    } else if (have) {
        g->tombstones--;
        kn = ix_tkey(g->key, ver, k.p, k.n);
        leveldb_writebatch_delete(g->b, (const char *)g->key, kn);
    }
    if (nlive) {
        g->entries++;
    } else {
        g->tombstones++;
        kn = ix_tkey(g->key, nver, k.p, k.n);
        leveldb_writebatch_put(g->b, (const char *)g->key, kn, "", 0);
    }
    msgpack_sbuffer_clear(&g->vb.sb);
    ix_entry_encode(&g->vb, nlive, nver, m->hashes.v[i],
                    nlive ? m->projs.v[i] : (mp_span){ NULL, 0 });
    if (g->vb.oom)
        return SX_ENOMEM;
    kn = ix_ekey(g->key, k.p, k.n);
    leveldb_writebatch_put(g->b, (const char *)g->key, kn, g->vb.sb.data, g->vb.sb.size);
    if (!have && g->p->kf != NULL) /* a stored key is in the filter already */
        kf_add_key(g->p->kf, fk);
    slot->k = k.p;
    slot->kn = k.n;
    slot->live = nlive;
    slot->version = nver;
    g->changes++;
    return 0;
}

/* A record of the group that is not a redelivery, in queue order (pos). */
typedef struct rec_ref {
    const msg_I_APPLY_req *m;
    uint32_t i;
    uint32_t pos;
} rec_ref;

static int rec_cmp(const void *a, const void *b)
{
    const rec_ref *x = a, *y = b;
    mp_span kx = x->m->keys.v[x->i], ky = y->m->keys.v[y->i];
    size_t n = kx.n < ky.n ? kx.n : ky.n;
    int c = memcmp(kx.p, ky.p, n);

    if (c == 0)
        c = kx.n < ky.n ? -1 : kx.n > ky.n;
    if (c == 0)
        c = x->pos < y->pos ? -1 : x->pos > y->pos;
    return c;
}

/* Collects op's records that are not redeliveries into refs (advancing
 * *nref) and moves the source's watermark past them, in queue order. An
 * I_BUILD's records are all collected, and move nothing, unless the
 * source's watermark is already past the head they were checked at: then
 * a later write's records came first, and none of them is (op->stale).
 * An I_APPLY whose after is past the source's watermark is refused whole
 * (op->gap): records it follows were applied once and lost before their
 * sync (a machine crash); the source resends from what was synced. */
static void collect_op(group_ctx *g, ix_apply_op *op, rec_ref *refs, size_t *nref)
{
    ix_part *p = g->p;
    const msg_I_APPLY_req *m = op->m;
    int s = op->src;
    uint64_t wm, hw;

    if (op->build) {
        op->stale = !op->seal && p->work_wm[s] > m->upto;
        for (uint32_t i = 0; !op->stale && i < m->versions.n; i++) {
            refs[*nref] = (rec_ref){ m, i, (uint32_t)*nref };
            (*nref)++;
        }
        op->wm = p->work_wm[s];
        return;
    }
    if (m->after > p->work_wm[s]) { /* records it follows were lost */
        op->gap = true;
        op->wm = p->work_wm[s];
        return;
    }
    for (uint32_t i = 0; i < m->seqs.n; i++) {
        if (ix_redelivered(m->seqs.v[i], p->work_wm[s]))
            continue;
        refs[*nref] = (rec_ref){ m, i, (uint32_t)*nref };
        (*nref)++;
    }
    wm = ix_advance(p->work_wm[s], m->upto);
    hw = ix_advance(p->work_hw[s], m->hw);
    if (wm != p->work_wm[s] || hw != p->work_hw[s]) {
        p->work_wm[s] = wm;
        p->work_hw[s] = hw;
        p->work_dirty[s] = true;
        g->changes++;
    }
    op->wm = p->work_wm[s];
}

/* Applies the group's records sorted by key (stable, so records of one
 * key keep their queue order and the outcome is that of queue order):
 * the lookups and the memtable inserts then walk the keys in order,
 * which keeps leveldb's skiplist paths in cache on large groups. */
static int apply_ops(group_ctx *g, ix_apply_op *group, size_t nrec)
{
    rec_ref *refs = malloc((nrec ? nrec : 1) * sizeof(*refs));
    size_t n = 0;
    int rc = 0;

    if (refs == NULL)
        return SX_ENOMEM;
    for (ix_apply_op *op = group; op != NULL; op = op->next)
        collect_op(g, op, refs, &n);
    if (n > 1)
        qsort(refs, n, sizeof(*refs), rec_cmp);
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = apply_record(g, refs[k].m, refs[k].i);
    free(refs);
    return rc;
}

static int put_watermarks(group_ctx *g)
{
    ix_part *p = g->p;
    uint8_t k[9];
    int s;

    for (s = 0; s < p->nsrc; s++) {
        if (!p->work_dirty[s])
            continue;
        msgpack_sbuffer_clear(&g->vb.sb);
        mp_put_array(&g->vb, 2);
        mp_put_u64(&g->vb, p->work_wm[s]);
        mp_put_u64(&g->vb, p->work_hw[s]);
        if (g->vb.oom)
            return SX_ENOMEM;
        k[0] = IX_PFX_WM;
        be_put64(k + 1, p->src[s]);
        leveldb_writebatch_put(g->b, (const char *)k, 9, g->vb.sb.data, g->vb.sb.size);
    }
    return 0;
}

/* ---- the committer ---- */

/* Whether group may be written unsynced and left to the syncer: I_APPLYs
 * only, on a partition whose syncs have not failed. */
static bool group_pipelined(ix_part *p, const ix_apply_op *group)
{
    if (__atomic_load_n(&p->seal_broken, __ATOMIC_ACQUIRE))
        return false;
    for (const ix_apply_op *op = group; op != NULL; op = op->next)
        if (op->build)
            return false;
    return true;
}

/* Under apply_mu: makes p->work_* the published state when they are not
 * the last written one (first group, or after a failure or a collector);
 * the syncer then holds nothing. */
static void work_load(ix_part *p)
{
    if (p->work_valid)
        return;
    ix_sync_drain(p);
    pthread_mutex_lock(&p->state_mu);
    memcpy(p->work_wm, p->wm, sizeof(uint64_t) * (size_t)p->nsrc);
    memcpy(p->work_hw, p->hw, sizeof(uint64_t) * (size_t)p->nsrc);
    p->work_entries = p->entries;
    p->work_tombstones = p->tombstones;
    pthread_mutex_unlock(&p->state_mu);
    p->work_valid = true;
}

/* Applies the ops of group (n records in all) in one batch and writes
 * it: unsynced, handed to the syncer (group_pipelined), or else synced
 * here and published. Sets the err of every op it answers, and returns
 * those ops (the caller answers them: ix_finish_group); the syncer answers
 * the others. Takes apply_mu. The batch is *wb, created when NULL, else
 * emptied: the committer keeps it across large groups, so a build does
 * not regrow (copy and fault in) a batch of MiBs for every group. */
static ix_apply_op *run_group(ix_part *p, ix_apply_op *group, size_t nrec,
                              leveldb_writebatch_t **wb)
{
    unsigned long long t0 = os_mono_us(), t1 = t0, t2 = t0;
    unsigned skipped;
    group_ctx g;
    ix_apply_op *op, *nx, *now = NULL, *later = NULL, **now_end = &now, **later_end = &later;
    bool lazy = true, seal = false, wrote = false;
    /* a replicated partition's groups are durable once applied: no syncer */
    bool piped = p->pg == NULL && group_pipelined(p, group);
    uint64_t term = 0;
    bool s_moved = false;
    size_t ns = (size_t)p->nsrc;
    uint64_t *snap = NULL; /* the published state: ns watermarks, ns hw_seen */
    int rc, seal_rc = 0;

    memset(&g, 0, sizeof(g));
    g.p = p;
    mp_buf_init(&g.vb);
    pthread_mutex_lock(&p->apply_mu);
    if (!piped)
        ix_sync_drain(p); /* marker, seals and syncs keep their order */
    if (__atomic_load_n(&p->seal_broken, __ATOMIC_ACQUIRE))
        p->work_valid = false; /* what the failed sync held is not published */
    int lrc = 0;
    if (p->pg != NULL) {
        /* computed from the applied state, by the leader only */
        p->work_valid = false;
        lrc = ix_part_leading(p, &term);
    }
    work_load(p);
    g.entries = p->work_entries;
    g.tombstones = p->work_tombstones;
    memset(p->work_dirty, 0, sizeof(bool) * (size_t)p->nsrc);

    if (*wb == NULL)
        *wb = leveldb_writebatch_create();
    else
        leveldb_writebatch_clear(*wb);
    g.b = *wb;
    rc = lrc != 0 ? lrc : g.b ? ov_init(&g.ov, nrec) : SX_ENOMEM;
    if (rc == 0)
        rc = apply_ops(&g, group, nrec);
    for (op = group; op != NULL; op = op->next) {
        lazy = lazy && op->build && !op->seal;
        seal = seal || op->seal;
    }
    seal = seal && p->build_open; /* nothing unsealed: a seal is a no-op */
    /* the 'S' record follows the published state (index_part.h) */
    if (rc == 0 && (snap = malloc(2 * (ns ? ns : 1) * sizeof(uint64_t))) == NULL)
        rc = SX_ENOMEM;
    if (rc == 0) {
        pthread_mutex_lock(&p->state_mu);
        memcpy(snap, p->wm, ns * sizeof(uint64_t));
        memcpy(snap + ns, p->hw, ns * sizeof(uint64_t));
        pthread_mutex_unlock(&p->state_mu);
        s_moved = memcmp(snap, p->s_wm, ns * sizeof(uint64_t)) != 0 ||
                  memcmp(snap + ns, p->s_hw, ns * sizeof(uint64_t)) != 0;
    }
    if (rc == 0 && (g.changes > 0 || seal || s_moved)) { /* repeated heartbeats: nothing */
        rc = put_watermarks(&g);
        if (rc == 0 && s_moved)
            rc = ix_put_synced(p, g.b, snap, snap + ns);
        if (rc == 0)
            rc = ix_put_counts(g.b, g.entries, g.tombstones);
        t1 = os_mono_us();
        if (rc == 0)
            rc = piped           ? ldb_write_lazy(p->db, g.b)
                 : p->pg != NULL ? ix_part_durable(p, g.b, term)
                                 : ix_write_group(p, g.b, lazy, seal, &seal_rc);
        t2 = os_mono_us();
        wrote = rc == 0;
        if (t2 - t0 >= SX_SLOW_MS * 1000ull && log_ratelimit_ok(&p->slow, 1000, &skipped))
            LOG_WARN("index p%llu: slow group: %zu records, apply %llu ms, write %llu ms "
                     "(%u more slow groups since the last report)",
                     (unsigned long long)p->id, nrec, (t1 - t0) / 1000, (t2 - t1) / 1000, skipped);
    }
    if (rc == 0) {
        p->work_entries = g.entries;
        p->work_tombstones = g.tombstones;
        if (wrote && s_moved) {
            memcpy(p->s_wm, snap, ns * sizeof(uint64_t));
            memcpy(p->s_hw, snap + ns, ns * sizeof(uint64_t));
        }
        if (!piped && wrote) { /* synced here, with everything before, unless lazy */
            cstats_add(&p->commits, nrec, t1 - t0, t2 - t1);
            ix_publish(p, p->work_wm, p->work_hw, g.entries, g.tombstones,
                       p->pg != NULL ? p->work_wm
                       : lazy        ? NULL
                                     : p->s_wm);
        }
    } else {
        if (rc != SX_ENOTLEADER)
            LOG_ERROR("index p%llu: apply group failed: %s", (unsigned long long)p->id,
                      sx_strerror(rc));
        p->work_valid = false; /* the next group starts from what is published */
    }
    for (op = group; op != NULL; op = op->next)
        op->err = rc != 0 ? rc : op->gap || op->stale ? SX_EUNAVAIL : op->seal ? seal_rc : 0;
    /* Pipelined: ops answered now are the early ones and the refused ones;
     * the rest wait for the sync of this group (and of what it follows). */
    for (op = group; op != NULL; op = nx) {
        nx = op->next;
        op->next = NULL;
        if (!piped || rc != 0 || op->early || op->err != 0) {
            *now_end = op;
            now_end = &op->next;
        } else {
            *later_end = op;
            later_end = &op->next;
        }
    }
    if (piped && rc == 0 && (wrote || later != NULL)) {
        ix_written *w = ix_written_new(p, later, nrec, t1 - t0, t2 - t1);

        if (w != NULL) {
            ix_sync_hand(p, w);
        } else { /* no memory for it: synced and answered here */
            unsigned synced = 0;
            int src;

            ix_sync_drain(p); /* what it follows first */
            src = ix_sync_logs(p, &synced);
            if (src == 0)
                ix_publish(p, p->work_wm, p->work_hw, g.entries, g.tombstones, p->s_wm);
            else
                p->work_valid = false;
            for (op = later; op != NULL; op = op->next)
                op->err = src;
            *now_end = later;
        }
    }
    pthread_mutex_unlock(&p->apply_mu);
    free(snap);
    free(g.ov.s);
    mp_buf_free(&g.vb);
    return now;
}

/* Takes a bounded prefix of the queue (at least one op). Needs q_mu. */
static ix_apply_op *take_group(ix_part *p, size_t *nrec)
{
    ix_apply_op *head = p->q_head, *last = head;
    size_t ops = 1;

    *nrec = op_records(head->m, head->build);
    while (last->next != NULL && ops < GROUP_MAX_OPS &&
           *nrec + op_records(last->next->m, last->next->build) <= GROUP_MAX_RECORDS) {
        last = last->next;
        *nrec += op_records(last->m, last->build);
        ops++;
    }
    p->q_head = last->next;
    if (p->q_head == NULL)
        p->q_tail = NULL;
    last->next = NULL;
    return head;
}

/* The one-line reason op failed. */
static void op_errmsg(const ix_apply_op *op, char *msg, size_t n)
{
    if (op->gap)
        snprintf(msg, n,
                 "records out of order: this partition holds the source's records "
                 "up to %llu, these follow %llu (records it had applied were lost before "
                 "their sync, in a restart): resend from what was synced",
                 (unsigned long long)op->wm, (unsigned long long)op->m->after);
    else if (op->stale)
        snprintf(msg, n,
                 "build records refused: the source's watermark %llu is past "
                 "the head %llu they were read at (a later write came first)",
                 (unsigned long long)op->wm, (unsigned long long)op->m->upto);
    else if (op->seal)
        snprintf(msg, n, "seal failed: %s%s", sx_strerror(op->err),
                 op->err == SX_EIO ? " (a log could not be synced or its marker removed: "
                                     "see the index node's log)"
                                   : "");
    else
        snprintf(msg, n, "apply failed: %s", sx_strerror(op->err));
}

/* Answers the ops of group: index_commit.h. */
void ix_finish_group(ix_part *p, ix_apply_op *group)
{
    ix_apply_op *waiting = NULL, *o, *nx;
    char msg[300];

    for (o = group; o != NULL; o = nx) {
        uint64_t synced = 0;

        nx = o->next;
        if (o->cb == NULL) {
            o->next = waiting;
            waiting = o;
            continue;
        }
        if (o->err != 0) {
            op_errmsg(o, msg, sizeof(msg));
        } else {
            pthread_mutex_lock(&p->state_mu);
            synced = p->dur_wm[o->src];
            pthread_mutex_unlock(&p->state_mu);
        }
        o->cb(o->cb_arg, o->err, o->wm, synced, o->err != 0 ? msg : "");
        free(o);
    }
    if (waiting == NULL)
        return;
    pthread_mutex_lock(&p->q_mu);
    for (o = waiting; o != NULL; o = nx) {
        nx = o->next;
        o->done = true;
    }
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->q_mu);
}

static void *committer_main(void *arg)
{
    ix_part *p = arg;
    leveldb_writebatch_t *wb = NULL; /* kept while there is work */

    os_thread_name("sx-ix-commit");

    pthread_mutex_lock(&p->q_mu);
    for (;;) {
        if (p->q_head == NULL) {
            if (p->committer_quit)
                break;
            p->committer_idle = true;
            pthread_cond_wait(&p->commit_cv, &p->q_mu);
            p->committer_idle = false;
            continue;
        }
        size_t nrec;
        ix_apply_op *g = take_group(p, &nrec);

        pthread_mutex_unlock(&p->q_mu);
        ix_finish_group(p, run_group(p, g, nrec, &wb));
        if (wb != NULL && nrec < COMMIT_KEEP_MIN_RECORDS) {
            leveldb_writebatch_destroy(wb); /* small groups: its memory back */
            wb = NULL;
        }
        pthread_mutex_lock(&p->q_mu);
    }
    pthread_mutex_unlock(&p->q_mu);
    if (wb != NULL)
        leveldb_writebatch_destroy(wb);
    return NULL;
}

int ix_committer_start(ix_part *p)
{
    if (ix_syncer_start(p) != 0)
        return SX_EINTERNAL;
    if (pthread_create(&p->committer, NULL, committer_main, p) != 0)
        return SX_EINTERNAL;
    p->committer_started = true;
    return 0;
}

void ix_committer_stop(ix_part *p)
{
    pthread_mutex_lock(&p->q_mu);
    p->stopping = true;
    p->committer_quit = true;
    pthread_cond_signal(&p->commit_cv);
    pthread_mutex_unlock(&p->q_mu);
    if (p->committer_started)
        pthread_join(p->committer, NULL);
    p->committer_started = false;
    ix_syncer_stop(p); /* it syncs and answers what it holds */
}

/* Validates m and queues op for it, answered once written when early (an
 * I_APPLY asking for it); see ix_part_apply_start. */
static int enqueue(ix_part *p, ix_apply_op *op, const msg_I_APPLY_req *m, bool build, bool early,
                   char *err, size_t errlen)
{
    int rc = validate(p, m, build, &op->src, err, errlen);

    if (rc != 0)
        return rc;
    op->m = m;
    op->build = build;
    op->seal = build && op_records(m, build) == 0;
    op->early = early && !build;
    pthread_mutex_lock(&p->q_mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->q_mu);
        return fail(err, errlen, SX_EUNAVAIL, "node is stopping");
    }
    if (p->q_tail)
        p->q_tail->next = op;
    else
        p->q_head = op;
    p->q_tail = op;
    if (p->committer_idle) {
        p->committer_idle = false; /* one wake-up is enough */
        pthread_cond_signal(&p->commit_cv);
    }
    pthread_mutex_unlock(&p->q_mu);
    return 0;
}

int ix_part_apply_start(ix_part *p, const msg_I_APPLY_req *m, bool build, ix_apply_cb cb, void *arg,
                        char *err, size_t errlen)
{
    ix_apply_op *op = calloc(1, sizeof(*op));
    int rc;

    if (op == NULL)
        return fail(err, errlen, SX_ENOMEM, "out of memory");
    op->cb = cb;
    op->cb_arg = arg;
    rc = enqueue(p, op, m, build, m->early != 0, err, errlen);
    if (rc != 0)
        free(op);
    return rc;
}

int ix_part_apply(ix_part *p, const msg_I_APPLY_req *m, bool build, uint64_t *wm, uint64_t *synced,
                  char *err, size_t errlen)
{
    ix_apply_op op;
    int rc;

    memset(&op, 0, sizeof(op));
    rc = enqueue(p, &op, m, build, false, err, errlen); /* answered once synced */
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&p->q_mu);
    while (!op.done)
        pthread_cond_wait(&p->done_cv, &p->q_mu);
    pthread_mutex_unlock(&p->q_mu);
    if (op.err != 0) {
        op_errmsg(&op, err, errlen);
        return op.err;
    }
    *wm = op.wm;
    pthread_mutex_lock(&p->state_mu);
    *synced = p->dur_wm[op.src];
    pthread_mutex_unlock(&p->state_mu);
    return 0;
}
