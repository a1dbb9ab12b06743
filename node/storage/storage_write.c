/*
 * storage_write.c — S_WRITE: the group-commit write path of a storage node.
 *
 * A request is validated (items, primary keys, shard hashes within the
 * partition) without any lock, then queued on its partition. The node's
 * committer thread (one per node: the partitions share one leveldb, see
 * storage_store.h) takes what is queued on every partition and, for each
 * partition in turn, under that partition's write lock computes for every
 * operation, in fact-key order (stable, so one key's operations keep their
 * queue order), the old fact (or an earlier operation's result in the same
 * group), the new version, the fact change and one outbox record per
 * changed index entry, plus the partition's metadata. All the partitions'
 * shares are written as ONE synced WriteBatch (one fsync for the node's
 * group), then every request of the group is answered. While it syncs, the
 * next group gathers in the queues. A partition whose share fails (out of
 * memory, a read error) fails its own requests only.
 *
 * Two ways in: st_write_start (the server's deferred path: validated and
 * queued on the nng thread that received the request; the committer
 * encodes and sends the reply, so no thread sleeps per request) and
 * st_write (a worker that waits; used when validation needs a catalog
 * fetch first).
 *
 * Built with -DSHARDEX_TEST_HOOKS=ON only, the chaos harness's planted bug
 * "ack-before-commit" (tests/chaos/README.md, "Planted bugs"): with
 * SHARDEX_PLANT=ack-before-commit in the node's environment, a replicated
 * partition's leader answers the writes of its share of a group as soon
 * as the share is proposed, without waiting for a quorum to have it and
 * for its replica to apply it (the committer itself still waits for the
 * outcome before it computes the next group, so the state stays whole): a
 * write is acknowledged that a leader cut off before replicating it loses,
 * and that a read right after it may not see. Never reachable from a
 * config file; absent from other builds.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hash.h"
#include "u64set.h"
#include "item.h"
#include "log.h"
#include "pgroup.h"
#include "storage_part.h"
#include "sx_errors.h"

#ifdef SHARDEX_TEST_HOOKS
#include "plant.h"
#define plant_ack_before_commit() plant_on("ack-before-commit")

struct st_wreq;
static void finish_group(st_part *p, struct st_wreq *list);
#endif

/* The committer keeps its batches after a group of at least this many
 * operations (a load's); after a smaller one it frees them. */
#define COMMIT_KEEP_MIN_OPS 1024

/* One put or delete of a request, validated. */
typedef struct st_op {
    bool del;
    const uint8_t *obj; /* item (put) or key map (delete); borrowed */
    size_t on;
    uint64_t h;
    size_t koff, kn; /* fact key within the request's key arena */
} st_op;

typedef struct st_wreq {
    const msg_S_WRITE_req *rq;
    uint32_t n;
    st_op *ops;
    tup_bytes keys; /* fact keys of ops, concatenated */
    int err;
    int hint; /* SX_ENOTLEADER's: the leader's config id, or 0 */
    char msg[160];
    size_t bytes; /* the items' and keys' bytes (a replicated group's bound) */
    uint64_t *versions, *found;
    st_write_cb cb; /* st_write_start's (r is on the heap), or NULL: */
    void *cb_arg;
    bool done; /* st_write's: set under p->mu, then cv */
    pthread_cond_t cv;
    struct st_wreq *next;
} st_wreq;

/* The state of one fact key during a group: loaded or written earlier. */
typedef struct gm_ent {
    const uint8_t *key; /* NULL: empty slot */
    size_t kn;
    bool exists;
    uint64_t version;
    const uint8_t *item;
    size_t in;
    uint8_t *owned; /* leveldb value buffer backing item, or NULL */
    kf_key fk;      /* the key's hashes: its slot here, and the
                     * absent-key filter's lookup and add */
} gm_ent;

typedef struct gmap {
    gm_ent *e;
    size_t cap;
} gmap;

static int gm_init(gmap *m, size_t nops)
{
    m->cap = 16;
    while (m->cap < nops * 2)
        m->cap *= 2;
    m->e = calloc(m->cap, sizeof(*m->e));
    return m->e ? 0 : SX_ENOMEM;
}

static void gm_free(gmap *m)
{
    for (size_t i = 0; m->e && i < m->cap; i++)
        free(m->e[i].owned);
    free(m->e);
}

/* Finds the group entry of key, loading the stored fact on first sight. */
static int gm_get(gmap *m, st_part *p, const uint8_t *key, size_t kn, gm_ent **out)
{
    kf_key fk = kf_key_of(p->id, key, kn);
    size_t i = (size_t)fk.a & (m->cap - 1);
    gm_ent *e;
    uint8_t *v = NULL;
    size_t vn = 0;
    mp_span item;
    int rc;

    while (m->e[i].key != NULL) {
        if (m->e[i].kn == kn && memcmp(m->e[i].key, key, kn) == 0) {
            *out = &m->e[i];
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    e = &m->e[i];
    rc = st_fact_absent(p, fk) ? SX_ENOTFOUND : st_kget(p, NULL, key, kn, &v, &vn);
    if (rc == SX_ENOTFOUND) {
        e->exists = false;
    } else if (rc != 0) {
        return rc;
    } else if (st_fact_decode(v, vn, &e->version, &item) != 0) {
        LOG_ERROR("corrupt fact value (%zu bytes)", vn);
        free(v);
        return SX_EIO;
    } else {
        e->exists = true;
        e->owned = v;
        e->item = item.p;
        e->in = item.n;
    }
    e->key = key;
    e->kn = kn;
    e->fk = fk;
    *out = e;
    return 0;
}

static uint64_t next_version(st_part *p)
{
    uint64_t now = st_now_us();

    p->w_hw = now > p->w_hw ? now : p->w_hw + 1;
    return p->w_hw;
}

/* Index-local key (index id | tuple) of item (NULL: none) for ix into k;
 * false when the item is not in the index (sparse, or key not encodable). */
static bool index_key(const cat_table *t, const cat_index *ix, const item_view *item, tup_bytes *k,
                      int *err)
{
    uint8_t id[4];
    int rc;

    k->n = 0;
    if (item == NULL)
        return false;
    be_put32(id, ix->id);
    rc = tup_bytes_append(k, id, 4);
    if (rc == 0)
        rc = item_index_tuple_view(t, ix, item, k);
    if (rc == SX_ENOMEM)
        *err = rc;
    return rc == 0;
}

/* Emits the outbox records that move index ix from item old to item nw
 * (either may be NULL) at version v. */
static int emit_one(st_part *p, leveldb_writebatch_t *b, const cat_table *t, const cat_index *ix,
                    const item_view *old, const item_view *nw, uint64_t v, uint64_t h,
                    uint64_t *pending, tup_bytes *ko, tup_bytes *kn)
{
    int err = 0, rc = 0;
    bool has_o = index_key(t, ix, old, ko, &err);
    bool has_n = index_key(t, ix, nw, kn, &err);
    bool same = has_o && has_n && ko->n == kn->n && memcmp(ko->p, kn->p, ko->n) == 0;
    mp_buf pn, po;

    if (err != 0)
        return err;
    if (has_o && !same)
        rc = st_outbox_append(p, b, OUT_DEL, v, ko->p, ko->n, h, NULL, 0, pending);
    if (rc != 0 || !has_n)
        return rc;
    mp_buf_init(&pn);
    mp_buf_init(&po);
    rc = item_project_view(t, ix, nw, &pn);
    if (rc == 0 && same)
        rc = item_project_view(t, ix, old, &po);
    if (rc == 0 && (pn.oom || po.oom))
        rc = SX_ENOMEM;
    /* an unchanged entry is left out, unless the index is being built: then
     * it may not hold the entry yet, and the backfill leaves this item to
     * this write (backfill.h) */
    if (rc == 0 && (!same || ix->state == CAT_BUILDING || po.sb.size != pn.sb.size ||
                    memcmp(po.sb.data, pn.sb.data, pn.sb.size) != 0))
        rc = st_outbox_append(p, b, OUT_PUT, v, kn->p, kn->n, h, (const uint8_t *)pn.sb.data,
                              pn.sb.size, pending);
    mp_buf_free(&pn);
    mp_buf_free(&po);
    return rc;
}

/* Emits the outbox records of every index of t for the write of nw (NULL:
 * a delete) over old (NULL: none), each item read once for all indexes. */
static int emit_all(st_part *p, leveldb_writebatch_t *b, const cat_table *t, const uint8_t *old,
                    size_t on, const uint8_t *nw, size_t nn, uint64_t v, uint64_t h,
                    uint64_t *pending)
{
    tup_bytes ko = { 0 }, kn = { 0 };
    item_view vo = { 0 }, vn = { 0 };
    int rc = 0;

    if (t->nindexes == 0)
        return 0;
    /* a stored item that cannot be read is in no index (as its tuples
     * could not be derived when it was written); the new one was
     * validated when it came in */
    int orc = old != NULL ? item_view_parse(&vo, old, on) : SX_ENOTFOUND;

    if (orc == SX_ENOMEM)
        rc = orc;
    if (rc == 0 && nw != NULL)
        rc = item_view_parse(&vn, nw, nn);
    for (uint32_t i = 0; rc == 0 && i < t->nindexes; i++)
        rc = emit_one(p, b, t, &t->indexes[i], orc == 0 ? &vo : NULL, nw ? &vn : NULL, v, h,
                      pending, &ko, &kn);
    item_view_free(&vo);
    item_view_free(&vn);
    tup_bytes_free(&ko);
    tup_bytes_free(&kn);
    return rc;
}

static int put_fact(st_part *p, leveldb_writebatch_t *b, const gm_ent *e, uint64_t v,
                    const uint8_t *item, size_t n)
{
    mp_buf val;
    int rc;

    mp_buf_init(&val);
    st_fact_encode(&val, v, item, n);
    if (val.oom) {
        mp_buf_free(&val);
        return SX_ENOMEM;
    }
    rc = st_kput(p, b, e->key, e->kn, val.sb.data, val.sb.size);
    mp_buf_free(&val);
    if (rc == 0 && !e->exists) /* an existing key is in the filter already */
        st_fact_written(p, e->fk);
    return rc;
}

/* Applies one operation to the batch; sets its version and found flag. */
static int apply_op(st_part *p, leveldb_writebatch_t *b, gmap *m, const cat_table *t, st_wreq *r,
                    uint32_t i, uint64_t *pending)
{
    st_op *op = &r->ops[i];
    gm_ent *e;
    uint64_t v;
    int rc = gm_get(m, p, r->keys.p + op->koff, op->kn, &e);

    if (rc != 0)
        return rc;
    r->found[i] = e->exists;
    if (op->del && !e->exists) {
        r->versions[i] = 0;
        return 0;
    }
    v = next_version(p);
    r->versions[i] = v;
    if (p->bf_touch != NULL) /* out of memory, the set counts every fact */
        (void)u64set_add(p->bf_touch, st_fact_tag(e->key, e->kn));
    rc = emit_all(p, b, t, e->exists ? e->item : NULL, e->in, op->del ? NULL : op->obj, op->on, v,
                  op->h, pending);
    if (rc != 0)
        return rc;
    if (op->del) {
        rc = st_kdel(p, b, e->key, e->kn);
        if (rc != 0)
            return rc;
        p->w_items--;
        e->exists = false;
        return 0;
    }
    rc = put_fact(p, b, e, v, op->obj, op->on);
    if (rc != 0)
        return rc;
    if (!e->exists)
        p->w_items++;
    e->exists = true;
    e->version = v;
    e->item = op->obj;
    e->in = op->on;
    return 0;
}

static void fail_req(st_wreq *r, int err, const char *msg)
{
    if (r->err == 0) {
        r->err = err;
        snprintf(r->msg, sizeof(r->msg), "%s", msg);
    }
}

/* Makes p->cat at least as new as every request of the group needs. */
static void group_catalog(st_part *p, st_wreq *list)
{
    uint64_t want = 0;
    const cat_catalog *cat = NULL;

    for (st_wreq *r = list; r; r = r->next)
        if (r->rq->catver > want)
            want = r->rq->catver;
    if (p->cat == NULL || p->cat->version < want) {
        if (st_cat_get(p->cc, want, &cat) == 0)
            st_part_use_catalog(p, cat);
    }
    /* a request validated against a newer cached catalog than its catver
     * (e.g. catver 0): move to the newest cached one */
    for (st_wreq *r = list; r; r = r->next) {
        if (r->err == 0 && p->cat != NULL &&
            cat_table_by_id(p->cat, (uint32_t)r->rq->table_id) == NULL &&
            st_cat_get(p->cc, 0, &cat) == 0) {
            st_part_use_catalog(p, cat);
            break;
        }
    }
    for (st_wreq *r = list; r; r = r->next) {
        if (p->cat == NULL || p->cat->version < r->rq->catver)
            fail_req(r, SX_EUNAVAIL, "storage cannot fetch the catalog version of this write");
        else if (cat_table_by_id(p->cat, (uint32_t)r->rq->table_id) == NULL)
            fail_req(r, SX_ENOTABLE, "no such table id in this catalog");
    }
}

/* Fails the requests whose deadline (msg.h, deadline_ms) has passed, or
 * is within the cluster's clock skew: they are not applied. Checked under
 * the partition's write lock before the group is computed, so a request
 * that passes is ordered before every write that reaches this node after
 * this moment, and so before any write its caller makes after giving up. */
static void group_deadlines(st_part *p, st_wreq *list)
{
    long long now = 0, skew = p->cfg->max_clock_skew_ms;

    for (st_wreq *r = list; r; r = r->next) {
        char msg[sizeof(r->msg)];
        long long left;

        if (r->err != 0 || r->rq->deadline_ms == 0)
            continue;
        if (now == 0)
            now = (long long)os_real_ms();
        left = r->rq->deadline_ms > (uint64_t)LLONG_MAX ? LLONG_MAX
                                                        : (long long)r->rq->deadline_ms - now;
        if (left > skew)
            continue;
        if (left < 0)
            snprintf(msg, sizeof(msg),
                     "not applied: its deadline passed %lld ms before "
                     "the storage node took it (it came late, or its client's clock is "
                     "behind this node's)",
                     -left);
        else
            snprintf(msg, sizeof(msg),
                     "not applied: its deadline was %lld ms away when "
                     "the storage node took it, within the cluster's max_clock_skew_ms "
                     "(%lld)",
                     left, skew);
        fail_req(r, SX_EDEADLINE, msg);
        __atomic_add_fetch(&p->store->late, 1, __ATOMIC_RELAXED);
    }
}

/* One operation of a group, for applying the group in key order. */
typedef struct op_ref {
    st_wreq *r;
    const cat_table *t;
    uint32_t i;
    uint32_t pos; /* in queue order */
} op_ref;

static int op_ref_cmp(const void *a, const void *b)
{
    const op_ref *x = a, *y = b;
    const st_op *ox = &x->r->ops[x->i], *oy = &y->r->ops[y->i];
    size_t n = ox->kn < oy->kn ? ox->kn : oy->kn;
    int c = memcmp(x->r->keys.p + ox->koff, y->r->keys.p + oy->koff, n);

    if (c == 0)
        c = ox->kn < oy->kn ? -1 : ox->kn > oy->kn;
    if (c == 0)
        c = x->pos < y->pos ? -1 : x->pos > y->pos;
    return c;
}

/* The group's operations (of requests not already failed) sorted by fact
 * key, stable: one key's operations keep their queue order, so the
 * outcome is queue order's, while the lookups and the memtable inserts
 * walk leveldb's skiplist in order and stay in cache. NULL when out of
 * memory; *n is the count. */
static op_ref *sorted_ops(st_part *p, st_wreq *list, size_t nops, size_t *n)
{
    op_ref *refs = malloc((nops ? nops : 1) * sizeof(*refs));

    *n = 0;
    if (refs == NULL)
        return NULL;
    for (st_wreq *r = list; r; r = r->next) {
        if (r->err != 0)
            continue;
        const cat_table *t = cat_table_by_id(p->cat, (uint32_t)r->rq->table_id);
        for (uint32_t i = 0; i < r->n; i++, (*n)++)
            refs[*n] = (op_ref){ r, t, i, (uint32_t)*n };
    }
    if (*n > 1)
        qsort(refs, *n, sizeof(*refs), op_ref_cmp);
    return refs;
}

/* The committer's wait for a group's proposals (replicated partitions). */
typedef struct prop_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int left;
} prop_wait;

/* One partition's share of a node group. */
typedef struct part_grp {
    st_part *p;
    st_wreq *list;           /* its requests, queue order */
    leveldb_writebatch_t *b; /* its share: the committer's scratch, kept across
                              * groups (committer_main), emptied for each */
    st_commit_st cs;
    size_t nops;
    bool locked; /* its write lock is held: in this group */
    bool commit; /* prepared: b goes into the synced write (or, for a
                  * replicated partition, its proposal) */
    int rc;
    uint64_t term;   /* replicated: the term the share was computed in */
    int hint;        /* replicated: SX_ENOTLEADER's hint */
    int prc;         /* replicated: the proposal's outcome */
    prop_wait *wait; /* replicated: the committer's, while proposed */
} part_grp;

/* A replicated partition's group is computed only by its leader, from a
 * state that holds every committed entry: g->term is the term in which
 * that was confirmed (at once when known, else by a barrier now, after a
 * leadership change). Returns 0, or SX_ENOTLEADER (g->hint) and the like. */
static int group_leading(part_grp *g)
{
    return pg_lead(g->p->pg, &g->term, &g->hint);
}

/* Under g->p's write lock (group_done releases it): computes its share of
 * the group into g->b: facts, outbox records, then the metadata and
 * pending deletions (st_commit_prepare). Sets g->rc on failure (the working
 * counters rolled back). */
static void group_build(part_grp *g)
{
    st_part *p = g->p;
    size_t applied = 0;
    uint64_t pending = 0;
    gmap m = { 0 };
    op_ref *refs = NULL;
    int rc;

    if (g->b == NULL) /* run_group reset the rest */
        g->b = leveldb_writebatch_create();
    else
        leveldb_writebatch_clear(g->b);
    rc = g->b ? 0 : SX_ENOMEM;
    if (rc == 0 && p->pg != NULL)
        rc = group_leading(g);
    if (rc != 0) {
        g->rc = rc;
        return;
    }
    st_part_sync_working(p);
    group_catalog(p, g->list);
    group_deadlines(p, g->list);
    for (st_wreq *r = g->list; r; r = r->next)
        g->nops += r->n;
    if (rc == 0)
        rc = gm_init(&m, g->nops);
    if (rc == 0 && (refs = sorted_ops(p, g->list, g->nops, &applied)) == NULL)
        rc = SX_ENOMEM;
    for (size_t k = 0; rc == 0 && k < applied; k++)
        rc = apply_op(p, g->b, &m, refs[k].t, refs[k].r, refs[k].i, &pending);
    free(refs);
    gm_free(&m); /* the batch holds copies */
    if (rc != 0) {
        st_commit_abort(p);
    } else if (applied > 0) { /* else every request failed: nothing to write */
        st_commit_prepare(p, g->b, pending, &g->cs);
        g->commit = true;
    }
    g->rc = rc;
}

/* After the synced write (wrc): publishes or rolls back g's partition,
 * releases its write lock, fails its requests on error. */
static void group_done(part_grp *g, int wrc)
{
    st_part *p = g->p;

    if (g->commit) {
        st_commit_done(p, wrc, &g->cs);
        if (g->rc == 0)
            g->rc = wrc;
    }
    pthread_mutex_unlock(&p->wlock);
    if (g->rc != 0) {
        const char *why = g->rc == SX_EIO
                              ? "storage write failed: a disk error on the storage node (this "
                                "write may or may not survive; the node refuses writes until it "
                                "restarts)"
                          : g->rc == SX_ENOTLEADER
                              ? "not applied: this replica does not lead the partition's group; "
                                "retry at its leader"
                          : g->rc == SX_ETIMEDOUT
                              ? "outcome unknown: the partition's replica stopped before the "
                                "write committed (it may or may not have been applied)"
                              : "storage write failed";
        if (g->rc != SX_ENOTLEADER)
            LOG_ERROR("partition %llu: group of %zu ops failed: %s", (unsigned long long)p->id,
                      g->nops, sx_strerror(g->rc));
        for (st_wreq *r = g->list; r; r = r->next) {
            if (r->err == 0)
                r->hint = g->hint;
            fail_req(r, g->rc, why);
        }
    }
}

/* A replicated share's proposal finished (on the loop thread). */
static void share_done(void *arg, int rc, int hint)
{
    part_grp *g = arg;
    prop_wait *w = g->wait;

    pthread_mutex_lock(&w->mu);
    g->prc = rc;
    g->hint = hint;
    if (--w->left == 0)
        pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Proposes the replicated partitions' shares of the group and waits until
 * each is applied here or failed; their outcomes in g[i].prc. */
static void propose_shares(part_grp *g, int n)
{
    prop_wait w = { .left = 1 }; /* this thread's own, dropped below */

    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    for (int i = 0; i < n; i++) {
        if (!g[i].commit || g[i].p->pg == NULL)
            continue;
        g[i].wait = &w;
        pthread_mutex_lock(&w.mu);
        w.left++;
        pthread_mutex_unlock(&w.mu);
        int rc = pg_propose(g[i].p->pg, g[i].b, g[i].term, share_done, &g[i]);
        if (rc != 0) {
            g[i].hint = pg_leader_hint(g[i].p->pg);
            share_done(&g[i], rc, g[i].hint);
        }
#ifdef SHARDEX_TEST_HOOKS
        if (rc == 0 && plant_ack_before_commit()) { /* planted: answered once proposed */
            finish_group(g[i].p, g[i].list);
            g[i].list = NULL; /* nothing left to answer or fail */
        }
#endif
    }
    pthread_mutex_lock(&w.mu);
    w.left--;
    while (w.left > 0)
        pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
}

/* The committer's work for one node group (n partitions with requests, in
 * the node's partition order): compute every share, write them as one
 * synced batch (*all: the committer's scratch for that, created when
 * NULL). A partition whose write lock is busy (a backfill chunk) stays out
 * of this group (g->locked false: its requests go back to its queue),
 * unless every one is busy: then the group waits for the first. Returns
 * the group's operations. */
static size_t run_group(st_store *s, part_grp *g, int n, leveldb_writebatch_t **all)
{
    unsigned long long t0 = os_mono_us(), t1, t2;
    leveldb_writebatch_t *one = NULL;
    unsigned skipped;
    size_t nops = 0;
    int shares = 0, wrc = 0, nlocked = 0, replicated = 0;

    for (int i = 0; i < n; i++) {
        g[i].commit = false; /* a partition left out has no share */
        g[i].nops = 0;
        g[i].rc = 0;
        g[i].prc = 0;
        g[i].hint = 0;
        g[i].term = 0;
        g[i].locked = pthread_mutex_trylock(&g[i].p->wlock) == 0;
        nlocked += g[i].locked;
    }
    if (nlocked == 0) {
        pthread_mutex_lock(&g[0].p->wlock);
        g[0].locked = true;
    }
    nlocked = 0;
    for (int i = 0; i < n; i++) {
        if (!g[i].locked)
            continue;
        nlocked++;
        group_build(&g[i]);
        nops += g[i].nops;
        if (g[i].commit && g[i].p->pg != NULL) {
            replicated++;
        } else if (g[i].commit) {
            one = g[i].b;
            shares++;
        }
    }
    t1 = os_mono_us();
    if (replicated > 0)
        propose_shares(g, n);
    if (shares > 1) { /* one batch, one log record, one fsync */
        if (*all == NULL)
            *all = leveldb_writebatch_create();
        else
            leveldb_writebatch_clear(*all);
        if (*all == NULL) {
            wrc = SX_ENOMEM;
        } else {
            for (int i = 0; i < n; i++)
                if (g[i].commit && g[i].p->pg == NULL)
                    leveldb_writebatch_append(*all, g[i].b);
            wrc = ldb_write_sync(s->db, *all);
        }
    } else if (shares == 1) {
        wrc = ldb_write_sync(s->db, one);
    }
    for (int i = 0; i < n; i++)
        if (g[i].locked)
            group_done(&g[i], g[i].p->pg != NULL ? g[i].prc : wrc);
    t2 = os_mono_us();
    if ((shares > 0 || replicated > 0) && wrc == 0)
        cstats_add(&s->commits, nops, t1 - t0, t2 - t1);
    if (t2 - t0 >= SX_SLOW_MS * 1000ull && log_ratelimit_ok(&s->slow, 1000, &skipped))
        LOG_WARN("slow group: %zu ops in %d partitions, apply %llu ms, synced write %llu ms "
                 "(%u more slow groups since the last report)",
                 nops, nlocked, (t1 - t0) / 1000, (t2 - t1) / 1000, skipped);
    return nops;
}

/* Frees the committer's scratch batches: after a small group (their
 * memory back, so a load's MiBs are not held for the life of the node),
 * and when it stops. */
static void scratch_free(part_grp *g, int n, leveldb_writebatch_t **all)
{
    for (int i = 0; i < n; i++) {
        if (g[i].b != NULL)
            leveldb_writebatch_destroy(g[i].b);
        g[i].b = NULL;
    }
    if (*all != NULL)
        leveldb_writebatch_destroy(*all);
    *all = NULL;
}

/* Queues r for the committer; false (r failed) when the partition is
 * stopping. */
static bool enqueue(st_part *p, st_wreq *r)
{
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        fail_req(r, SX_EUNAVAIL, "node is stopping");
        return false;
    }
    if (p->qtail)
        p->qtail->next = r;
    else
        p->qhead = r;
    p->qtail = r;
    /* still under p->mu: once a stopping store has set every partition's
     * `stopping`, each write queued before has told the committer */
    st_store *st = p->store;
    pthread_mutex_lock(&st->mu);
    st->work = true;
    if (st->idle) {
        st->idle = false; /* one wake-up is enough */
        pthread_cond_signal(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    pthread_mutex_unlock(&p->mu);
    return true;
}

/* The reply frame of finished request r. */
static void encode_reply(const st_wreq *r, mp_buf *out)
{
    msg_S_WRITE_rep rep;

    if (r->err == SX_ENOTLEADER) {
        msg_encode_err_hint(MSG_S_WRITE, r->err, r->msg, (uint64_t)r->hint, out);
        return;
    }
    if (r->err != 0) {
        msg_encode_err(MSG_S_WRITE, r->err, r->msg, out);
        return;
    }
    memset(&rep, 0, sizeof(rep));
    rep.versions.n = r->n;
    rep.versions.v = r->versions;
    rep.found.n = r->n;
    rep.found.v = r->found;
    if (msg_encode_rep(MSG_S_WRITE, &rep, out) != 0 || out->oom) {
        mp_buf_free(out);
        mp_buf_init(out);
        msg_encode_err(MSG_S_WRITE, SX_ENOMEM, "out of memory", out);
    }
}

static void free_req(st_wreq *r)
{
    free(r->ops);
    free(r->versions);
    free(r->found);
    tup_bytes_free(&r->keys);
}

/* Answers and frees st_write_start's request r. */
static void finish_async(st_wreq *r)
{
    mp_buf out;

    mp_buf_init(&out);
    encode_reply(r, &out);
    r->cb(r->cb_arg, &out);
    mp_buf_free(&out);
    free_req(r);
    free(r);
}

/* Answers a committed group: deferred requests through their callbacks,
 * then waiting workers (which may free r once it is done: nothing touches
 * r after that). */
static void finish_group(st_part *p, st_wreq *list)
{
    st_wreq *waiting = NULL, *next;

    for (st_wreq *r = list; r; r = next) {
        next = r->next;
        if (r->cb != NULL) {
            finish_async(r);
        } else {
            r->next = waiting;
            waiting = r;
        }
    }
    if (waiting == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    for (st_wreq *r = waiting; r; r = next) {
        next = r->next;
        r->done = true;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Puts list (a partition's requests left out of a group) back in front of
 * its queue, in order. */
static void requeue(st_part *p, st_wreq *list)
{
    st_wreq *last = list;

    while (last->next != NULL)
        last = last->next;
    pthread_mutex_lock(&p->mu);
    last->next = p->qhead;
    p->qhead = list;
    if (p->qtail == NULL)
        p->qtail = last;
    pthread_mutex_unlock(&p->mu);
}

/* Takes p's queued requests for a group (needs p->mu): all of them, or
 * for a replicated partition those within ST_REPL_GROUP_BYTES (at least
 * one), its proposal being one Raft entry; *more is set when some stay.
 * An entry is persisted, sent and applied whole on each replica's Raft
 * loop, which meanwhile sends no heartbeat: 1 MiB keeps that to tens of
 * milliseconds (4 MiB entries took over a second on a loaded machine,
 * long enough for followers to call elections and writers to time out). */
#define ST_REPL_GROUP_BYTES ((size_t)1 << 20)
static st_wreq *take_queue(st_part *p, bool *more)
{
    st_wreq *list = p->qhead, *last = NULL;
    size_t bytes = 0;

    if (p->pg == NULL || list == NULL) {
        p->qhead = p->qtail = NULL;
        return list;
    }
    for (st_wreq *r = list; r != NULL && (last == NULL || bytes + r->bytes <= ST_REPL_GROUP_BYTES);
         r = r->next) {
        bytes += r->bytes;
        last = r;
    }
    p->qhead = last->next;
    if (p->qhead == NULL)
        p->qtail = NULL;
    else
        *more = true;
    last->next = NULL;
    return list;
}

static void *committer_main(void *arg)
{
    st_store *s = arg;
    part_grp *g = s->grp;
    leveldb_writebatch_t *all = NULL;

    os_thread_name("sx-commit");

    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (!s->work) {
            if (s->quit)
                break;
            s->idle = true;
            pthread_cond_wait(&s->cv, &s->mu);
            s->idle = false;
            continue;
        }
        s->work = false;
        pthread_mutex_unlock(&s->mu);
        int n = 0;
        bool more = false;
        for (int i = 0; i < s->nparts; i++) {
            st_part *p = s->parts[i];

            pthread_mutex_lock(&p->mu);
            g[n].p = p;
            g[n].list = take_queue(p, &more);
            pthread_mutex_unlock(&p->mu);
            if (g[n].list != NULL)
                n++;
        }
        /* the batches are kept after a large group (a load's: the next is
         * likely as large), so that each is not regrown, copied and faulted
         * in anew */
        if (n > 0 && run_group(s, g, n, &all) < COMMIT_KEEP_MIN_OPS)
            scratch_free(g, s->nparts, &all);
        bool requeued = false;
        for (int i = 0; i < n; i++) {
            if (g[i].locked) {
                finish_group(g[i].p, g[i].list);
            } else {
                requeue(g[i].p, g[i].list);
                requeued = true;
            }
        }
        pthread_mutex_lock(&s->mu);
        if (requeued || more)
            s->work = true;
    }
    pthread_mutex_unlock(&s->mu);
    scratch_free(g, s->nparts, &all);
    return NULL;
}

int st_store_start(st_store *s, st_part **parts, int n)
{
    s->parts = parts;
    s->nparts = n;
    s->grp = calloc(n > 0 ? (size_t)n : 1, sizeof(part_grp));
    if (s->grp == NULL)
        return SX_ENOMEM;
    st_filter_start(s); /* optional: without it every write reads */
    if (pthread_create(&s->committer, NULL, committer_main, s) != 0) {
        st_filter_stop(s);
        free(s->grp);
        s->grp = NULL;
        return SX_EINTERNAL;
    }
    s->started = true;
    return 0;
}

void st_store_stop(st_store *s)
{
    if (s == NULL || !s->started)
        return;
    for (int i = 0; i < s->nparts; i++) {
        pthread_mutex_lock(&s->parts[i]->mu);
        s->parts[i]->stopping = true;
        pthread_mutex_unlock(&s->parts[i]->mu);
    }
    pthread_mutex_lock(&s->mu);
    s->quit = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->committer, NULL);
    st_filter_stop(s);
    s->started = false;
    free(s->grp);
    s->grp = NULL;
}

/* Validates op i of r against table t: item, primary key, hash range. */
static int prepare_op(st_part *p, const cat_table *t, st_wreq *r, uint32_t i)
{
    const msg_S_WRITE_req *rq = r->rq;
    st_op *op = &r->ops[i];
    tup_bytes pk = { 0 };
    size_t pklen = 0;
    uint8_t hdr[ST_FACT_HDR + 8];
    int rc;

    op->del = rq->dels.n > 0 && rq->dels.v[i] != 0;
    op->obj = rq->objs.v[i].p;
    op->on = rq->objs.v[i].n;
    if (op->on > SX_MAX_ITEM)
        return SX_ETOOBIG;
    rc = item_validate(op->obj, op->on);
    if (rc == 0)
        rc = item_primary_key(t, op->obj, op->on, &pk, &pklen);
    if (rc != 0)
        goto out;
    op->h = hash_shard(p->cfg->hash_key, pk.p, pklen);
    if (op->h < p->hlo || op->h > p->hhi) {
        rc = SX_EWRONGPART;
        goto out;
    }
    hdr[0] = ST_FACT_PREFIX;
    be_put32(hdr + 1, t->id);
    be_put64(hdr + ST_FACT_HDR, op->h);
    op->koff = r->keys.n;
    op->kn = sizeof(hdr) + pk.n;
    r->bytes += op->on + op->kn;
    rc = tup_bytes_append(&r->keys, hdr, sizeof(hdr));
    if (rc == 0)
        rc = tup_bytes_append(&r->keys, pk.p, pk.n);
out:
    tup_bytes_free(&pk);
    return rc;
}

/* Validates r. Without may_block, returns SX_ESTALECAT having set
 * nothing when the catalog version or the table is not cached yet. */
static int prepare(st_part *p, st_wreq *r, bool may_block)
{
    const msg_S_WRITE_req *rq = r->rq;
    const cat_catalog *cat = NULL;
    const cat_table *t;
    char msg[96];
    int rc;

    r->n = rq->objs.n;
    if (rq->dels.n != 0 && rq->dels.n != r->n) {
        fail_req(r, SX_EINVAL, "dels and objs differ in length");
        return SX_EINVAL;
    }
    if (p->pg != NULL && pg_redirect(p->pg, &r->hint)) { /* refused before any work */
        fail_req(r, SX_ENOTLEADER,
                 "not applied: this replica does not lead the partition's group; retry at its "
                 "leader");
        return SX_ENOTLEADER;
    }
    if (!may_block) { /* only what is cached: nothing else is set */
        if (st_cat_peek(p->cc, rq->catver, &cat) != 0)
            return SX_ESTALECAT;
    } else if ((rc = st_cat_get(p->cc, rq->catver, &cat)) != 0) {
        snprintf(msg, sizeof(msg), "storage cannot fetch catalog version %llu: %s",
                 (unsigned long long)rq->catver, sx_strerror(rc));
        fail_req(r, rc, msg);
        return rc;
    }
    t = rq->table_id <= UINT32_MAX ? cat_table_by_id(cat, (uint32_t)rq->table_id) : NULL;
    if (t == NULL && !may_block)
        return SX_ESTALECAT;
    if (t == NULL)
        t = st_table(p, rq->table_id); /* refreshes once: a new table? */
    if (t == NULL) {
        fail_req(r, SX_ENOTABLE, "no such table id");
        return SX_ENOTABLE;
    }
    r->ops = calloc(r->n ? r->n : 1, sizeof(*r->ops));
    r->versions = calloc(r->n ? r->n : 1, sizeof(uint64_t));
    r->found = calloc(r->n ? r->n : 1, sizeof(uint64_t));
    if (!r->ops || !r->versions || !r->found) {
        fail_req(r, SX_ENOMEM, "out of memory");
        return SX_ENOMEM;
    }
    for (uint32_t i = 0; i < r->n; i++) {
        rc = prepare_op(p, t, r, i);
        if (rc != 0) {
            snprintf(msg, sizeof(msg), "operation %u: %s%s", i, sx_strerror(rc),
                     rc == SX_EWRONGPART ? " (hash outside this partition)" : "");
            fail_req(r, rc, msg);
            return rc;
        }
    }
    return 0;
}

void st_write(st_part *p, const msg_S_WRITE_req *rq, mp_buf *out)
{
    st_wreq r;

    memset(&r, 0, sizeof(r));
    r.rq = rq;
    if (pthread_cond_init(&r.cv, NULL) != 0) {
        msg_encode_err(MSG_S_WRITE, SX_ENOMEM, "out of memory", out);
        return;
    }
    if (prepare(p, &r, true) == 0 && r.n > 0 && enqueue(p, &r)) {
        pthread_mutex_lock(&p->mu);
        while (!r.done)
            pthread_cond_wait(&r.cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_cond_destroy(&r.cv);
    encode_reply(&r, out);
    free_req(&r);
}

bool st_write_start(st_part *p, const msg_S_WRITE_req *rq, st_write_cb cb, void *arg)
{
    st_wreq *r = calloc(1, sizeof(*r));
    int rc;

    if (r == NULL)
        return false; /* the worker path answers out of memory */
    r->rq = rq;
    r->cb = cb;
    r->cb_arg = arg;
    rc = prepare(p, r, false);
    if (rc == SX_ESTALECAT && r->err == 0) {
        free_req(r);
        free(r);
        return false;
    }
    if (rc != 0 || r->n == 0 || !enqueue(p, r))
        finish_async(r); /* answered at once: invalid, empty, stopping */
    return true;
}
