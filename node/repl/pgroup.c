/*
 * pgroup.c — a replicated key range whose entries are write batches
 * (pgroup.h).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "log.h"
#include "pgroup.h"
#ifdef SHARDEX_TEST_HOOKS
#include "plant.h"
#endif
#include "snapdir.h"
#include "sx_errors.h"

#define PG_ENTRY_VERSION 1
#define PG_HDR 9 /* version, term */

struct pgroup {
    repl *r;
    uint64_t group;
    snapdir sd;
    pg_hooks h;
    uint64_t applied;            /* loop thread */
    uint64_t role_term;          /* loop thread: the term it leads in, or 0 */
    _Atomic uint64_t ready_term; /* pg_ready */
    _Atomic int hint;            /* the leader's config id, 0 unknown */
};

/* ---- the entry's bytes ---- */

typedef struct enc {
    uint8_t *p;
    size_t n, cap;
    bool oom, big;
} enc;

static void enc_add(enc *e, const void *d, size_t n)
{
    if (e->oom || e->big)
        return;
    if (e->n + n > PG_MAX_ENTRY) {
        e->big = true;
        return;
    }
    if (e->n + n > e->cap) {
        size_t nc = e->cap ? e->cap : 256;
        while (nc < e->n + n)
            nc *= 2;
        uint8_t *np = realloc(e->p, nc);
        if (np == NULL) {
            e->oom = true;
            return;
        }
        e->p = np;
        e->cap = nc;
    }
    memcpy(e->p + e->n, d, n);
    e->n += n;
}

static void enc_rec(enc *e, uint8_t op, const char *k, size_t kn, const char *v, size_t vn)
{
    uint8_t h[5];
    h[0] = op;
    be_put32(h + 1, (uint32_t)kn);
    enc_add(e, h, 5);
    enc_add(e, k, kn);
    if (op == 'P') {
        be_put32(h, (uint32_t)vn);
        enc_add(e, h, 4);
        enc_add(e, v, vn);
    }
}

static void enc_put(void *arg, const char *k, size_t kn, const char *v, size_t vn)
{
    enc_rec(arg, 'P', k, kn, v, vn);
}

static void enc_del(void *arg, const char *k, size_t kn)
{
    enc_rec(arg, 'D', k, kn, NULL, 0);
}

int pg_records_each(const uint8_t *recs, size_t n, pg_rec_fn fn, void *arg)
{
    size_t off = 0;
    while (off < n) {
        if (n - off < 5)
            return SX_EPROTO;
        uint8_t op = recs[off];
        size_t kn = be_get32(recs + off + 1);
        off += 5;
        if ((op != 'P' && op != 'D') || kn > n - off)
            return SX_EPROTO;
        const uint8_t *k = recs + off, *v = NULL;
        size_t vn = 0;
        off += kn;
        if (op == 'P') {
            if (n - off < 4)
                return SX_EPROTO;
            vn = be_get32(recs + off);
            off += 4;
            if (vn > n - off)
                return SX_EPROTO;
            v = recs + off;
            off += vn;
        }
        int rc = fn(arg, op == 'D', k, kn, v, vn);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ---- the state machine (loop thread) ---- */

static bool in_range(const snapdir *s, const uint8_t *k, size_t kn)
{
    size_t m = kn < s->lo_n ? kn : s->lo_n;
    int c = memcmp(k, s->lo, m);
    if (c < 0 || (c == 0 && kn < s->lo_n))
        return false;
    if (s->hi_n == 0)
        return true;
    m = kn < s->hi_n ? kn : s->hi_n;
    c = memcmp(k, s->hi, m);
    return c < 0 || (c == 0 && kn < s->hi_n);
}

typedef struct build_st {
    pgroup *g;
    leveldb_writebatch_t *b;
} build_st;

static int build_rec(void *arg, bool del, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    build_st *st = arg;
    if (!in_range(&st->g->sd, k, kn))
        return SX_EPROTO;
    if (del)
        leveldb_writebatch_delete(st->b, (const char *)k, kn);
    else
        leveldb_writebatch_put(st->b, (const char *)k, kn, (const char *)v, vn);
    return 0;
}

/* Writes the applied index alone (an entry with nothing to apply). */
static int mark_applied(pgroup *g, uint64_t index)
{
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    if (b == NULL)
        return -1;
    snapdir_put_applied(&g->sd, b, index);
    int rc = ldb_write_lazy(g->sd.db, b);
    leveldb_writebatch_destroy(b);
    if (rc != 0)
        return -1;
    g->applied = index;
    return 0;
}

static int apply(void *sm, const raft_entry *e, rhost_result *res)
{
    pgroup *g = sm;
    if (e->type != RAFT_ENTRY_NORMAL)
        return mark_applied(g, e->index);
    if (e->len < PG_HDR || e->data[0] != PG_ENTRY_VERSION) {
        LOG_ERROR("%s: entry %llu is not a batch this version reads (%u bytes, version %u)",
                  g->sd.what, (unsigned long long)e->index, e->len, e->len ? e->data[0] : 0);
        return -1;
    }
    if (be_get64(e->data + 1) != e->term) {
        /* computed by a leader of another term: skipped everywhere */
        res->code = SX_ENOTLEADER;
        return mark_applied(g, e->index);
    }
    build_st st = { g, leveldb_writebatch_create() };
    if (st.b == NULL)
        return -1;
    const uint8_t *recs = e->data + PG_HDR;
    size_t n = e->len - PG_HDR;
    int rc = pg_records_each(recs, n, build_rec, &st);
    if (rc != 0) {
        LOG_ERROR("%s: entry %llu is malformed or writes outside the group's range", g->sd.what,
                  (unsigned long long)e->index);
        leveldb_writebatch_destroy(st.b);
        return -1;
    }
    snapdir_put_applied(&g->sd, st.b, e->index);
    rc = ldb_write_lazy(g->sd.db, st.b);
    leveldb_writebatch_destroy(st.b);
    if (rc != 0)
        return -1;
    g->applied = e->index;
    if (g->h.applied != NULL)
        g->h.applied(g->h.arg, recs, n);
    return 0;
}

static int snap_make(void *sm, uint64_t *index, uint64_t *size)
{
    pgroup *g = sm;
    return snapdir_make_bg(&g->sd, g->applied, index, size);
}

static int snap_read(void *sm, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len)
{
    pgroup *g = sm;
    return snapdir_read(&g->sd, index, off, buf, len);
}

static int snap_stage(void *sm, uint64_t index, uint64_t off, const uint8_t *p, uint32_t len)
{
    pgroup *g = sm;
    (void)index;
    return snapdir_stage(&g->sd, off, p, len);
}

static int snap_verify(void *sm, const raft_snap_meta *m)
{
    pgroup *g = sm;
    return snapdir_verify(&g->sd, m);
}

static int reload(pgroup *g)
{
    if (g->h.reloaded != NULL && g->h.reloaded(g->h.arg) != 0) {
        LOG_ERROR("%s: its state does not load after being replaced", g->sd.what);
        return -1;
    }
    return 0;
}

static int snap_install(void *sm, const raft_snap_meta *m)
{
    pgroup *g = sm;
    if (snapdir_install(&g->sd, m) != 0)
        return -1;
    g->applied = m->index;
    return reload(g);
}

static int reset(void *sm)
{
    pgroup *g = sm;
    if (snapdir_wipe(&g->sd) != 0)
        return -1;
    g->applied = 0;
    return reload(g);
}

static const rhost_sm_ops pg_ops = { apply,        snap_make,   snap_read, snap_stage,
                                     snap_install, snap_verify, reset };

/* ---- leadership ---- */

typedef struct barrier_arg {
    pgroup *g;
    uint64_t term;
} barrier_arg;

static void set_ready(pgroup *g, uint64_t term)
{
    if (atomic_exchange(&g->ready_term, term) != term && g->h.leading != NULL)
        g->h.leading(g->h.arg, term);
}

/* The barrier a new leader runs on its own: once it has applied what was
 * committed before, its state is the group's. */
static void lead_done(void *arg, int err, uint64_t index, rhost_result *res, uint64_t leader)
{
    barrier_arg *b = arg;
    (void)index;
    (void)res;
    (void)leader;
    if (err == RAFT_OK && b->g->role_term == b->term)
        set_ready(b->g, b->term);
    free(b);
}

static void on_role(void *arg, int role, uint64_t leader, uint64_t term)
{
    pgroup *g = arg;
    atomic_store(&g->hint, leader ? (int)rhost_node_of(leader) : 0);
    uint64_t want = role == RAFT_LEADER ? term : 0;
    if (want == g->role_term)
        return;
    g->role_term = want;
    set_ready(g, 0);
    if (want == 0)
        return;
    barrier_arg *b = malloc(sizeof *b);
    if (b == NULL)
        return; /* pg_barrier's callers confirm it later */
    *b = (barrier_arg){ g, want };
    if (repl_read(g->r, g->group, lead_done, b) != RAFT_OK)
        free(b);
}

uint64_t pg_ready(const pgroup *g)
{
    return atomic_load(&((pgroup *)g)->ready_term);
}

int pg_leader_hint(const pgroup *g)
{
    return atomic_load(&((pgroup *)g)->hint);
}

bool pg_redirect(const pgroup *g, int *hint)
{
    *hint = pg_leader_hint(g);
    return pg_ready(g) == 0 && *hint != 0 && *hint != repl_self_id(g->r);
}

/* ---- proposals and barriers ---- */

static int outcome(pgroup *g, int err, uint64_t leader, int *hint)
{
    *hint = leader ? (int)rhost_node_of(leader) : pg_leader_hint(g);
    switch (err) {
    case RAFT_OK: return 0;
    case RAFT_ERR_NOT_LEADER:
    case RAFT_ERR_INVALID: /* still joining */
    case RAFT_ERR_BUSY:
    case RHOST_LOST: return SX_ENOTLEADER;
    case RAFT_ERR_NOMEM: return SX_ENOMEM;
    case RHOST_GONE: return SX_ETIMEDOUT;
    default: return SX_EIO;
    }
}

typedef struct prop_arg {
    pgroup *g;
    pg_done_fn done;
    void *arg;
} prop_arg;

static void prop_done(void *arg, int err, uint64_t index, rhost_result *res, uint64_t leader)
{
    prop_arg *p = arg;
    int hint = 0;
    (void)index;
    int rc = outcome(p->g, err, leader, &hint);
    if (rc == 0 && res != NULL && res->code != 0)
        rc = res->code; /* skipped: computed in another term */
    if (res != NULL) {
        free(res->reply);
        res->reply = NULL;
    }
    p->done(p->arg, rc, hint);
    free(p);
}

int pg_propose(pgroup *g, leveldb_writebatch_t *b, uint64_t term, pg_done_fn done, void *arg)
{
    enc e = { 0 };
    uint8_t hdr[PG_HDR];
    hdr[0] = PG_ENTRY_VERSION;
    be_put64(hdr + 1, term);
    enc_add(&e, hdr, sizeof hdr);
    leveldb_writebatch_iterate(b, &e, enc_put, enc_del);
    prop_arg *p = malloc(sizeof *p);
    int rc = e.big ? SX_ETOOBIG : e.oom || p == NULL ? SX_ENOMEM : 0;
    if (rc == 0) {
        *p = (prop_arg){ g, done, arg };
        int err = repl_propose(g->r, g->group, e.p, (uint32_t)e.n, prop_done, p);
        if (err != RAFT_OK) {
            int hint;
            rc = err == RAFT_ERR_IO ? SX_EUNAVAIL : outcome(g, err, 0, &hint);
            if (rc == SX_ETIMEDOUT || rc == SX_EIO)
                rc = SX_EUNAVAIL; /* refused at once: not proposed */
        }
    }
    if (rc != 0)
        free(p);
    free(e.p);
    return rc;
}

/* A blocking caller's wait. */
typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int rc, hint;
    uint64_t term;
    pgroup *g;
} waiter;

static void waiter_init(waiter *w, pgroup *g)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->g = g;
}

static void waiter_finish(waiter *w, int rc, int hint)
{
    pthread_mutex_lock(&w->mu);
    w->rc = rc;
    w->hint = hint;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void waiter_wait(waiter *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

static void commit_done(void *arg, int rc, int hint)
{
    waiter_finish(arg, rc, hint);
}

int pg_commit(pgroup *g, leveldb_writebatch_t *b, uint64_t term, int *hint)
{
    waiter w;
    waiter_init(&w, g);
    int rc = pg_propose(g, b, term, commit_done, &w);
    if (rc != 0) {
        *hint = pg_leader_hint(g);
        waiter_finish(&w, rc, *hint);
    }
    waiter_wait(&w);
    *hint = w.hint;
    return w.rc;
}

static void barrier_done(void *arg, int err, uint64_t index, rhost_result *res, uint64_t leader)
{
    waiter *w = arg;
    pgroup *g = w->g;
    int hint = 0;
    (void)index;
    (void)res;
    int rc = outcome(g, err, leader, &hint);
    /* on the loop thread, in order with on_role: the role seen here is
     * the one the read was confirmed in */
    if (rc == 0 && g->role_term == 0)
        rc = SX_ENOTLEADER;
    if (rc == 0) {
        w->term = g->role_term;
        set_ready(g, g->role_term);
    }
    waiter_finish(w, rc, hint);
}

int pg_barrier(pgroup *g, uint64_t *term, int *hint)
{
    waiter w;
    waiter_init(&w, g);
    int err = repl_read(g->r, g->group, barrier_done, &w);
    if (err != RAFT_OK) {
        int h = 0;
        int rc = err == RAFT_ERR_IO ? SX_EUNAVAIL : outcome(g, err, 0, &h);
        waiter_finish(&w, rc, h);
    }
    waiter_wait(&w);
    if (term != NULL)
        *term = w.term;
    *hint = w.hint;
    return w.rc;
}

int pg_lead(pgroup *g, uint64_t *term, int *hint)
{
    *hint = 0;
    *term = pg_ready(g);
    if (*term != 0)
        return 0;
    return pg_redirect(g, hint) ? SX_ENOTLEADER : pg_barrier(g, term, hint);
}

int pg_read_barrier(pgroup *g, int *hint)
{
    *hint = 0;
    if (pg_redirect(g, hint))
        return SX_ENOTLEADER;
#ifdef SHARDEX_TEST_HOOKS
    if (plant_on("stale-leader-read")) /* planted: no ReadIndex */
        return 0;
#endif
    return pg_barrier(g, NULL, hint);
}

int pg_commit_ready(pgroup *g, leveldb_writebatch_t *b, int *hint)
{
    uint64_t term = pg_ready(g);
    if (term == 0) {
        *hint = pg_leader_hint(g);
        return SX_ENOTLEADER;
    }
    return pg_commit(g, b, term, hint);
}

/* ---- open and close ---- */

int pg_open(repl *r, const pg_config *c, pgroup **out)
{
    *out = NULL;
    pgroup *g = calloc(1, sizeof *g);
    if (g == NULL)
        return SX_ENOMEM;
    g->r = r;
    g->group = c->group;
    g->h = c->hooks;
    atomic_init(&g->ready_term, 0);
    atomic_init(&g->hint, 0);
    bool wiped = false;
    uint64_t boot_size = 0;
    int rc = snapdir_open(&g->sd, c->dir, c->what, c->db, c->lo, c->lo_n, c->hi, c->hi_n, c->marker,
                          c->marker_n, c->akey, c->akey_n, &wiped, &boot_size, &g->applied);
    if (rc == 0 && wiped && reload(g) != 0)
        rc = SX_EIO;
    if (rc == 0)
        rc = repl_group_add(r, c->group, c->nodes, c->n, &pg_ops, g, boot_size, g->applied, on_role,
                            g);
    if (rc != 0) {
        snapdir_close(&g->sd);
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void pg_close(pgroup *g)
{
    if (g == NULL)
        return;
    snapdir_close(&g->sd);
    free(g);
}
