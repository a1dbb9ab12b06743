/*
 * sim_store.c — optional (--store DIR): every node also writes its durable
 * state through the real leveldb log store (raft_log_store.h) with the
 * host's own persist (rhost_store_persist, host_store.h), exactly as a
 * production node does: one store per node, one WriteBatch per round
 * covering all its groups and the compactions queued since.  Whenever a node
 * restarts, and at the end of the run, the store is reloaded and compared
 * with the simulator's disk model: hard state, snapshot meta and every entry
 * must be identical.  Crash points that lose the batch in the model skip the
 * store write too; leveldb itself is not torn here (log_store_test.c covers
 * torn leveldb writes).  Syncing is off: the simulated crash is a close.
 */
#include <leveldb/c.h>
#include <stdio.h>
#include <string.h>

#include "host_store.h"
#include "sim.h"

static void store_path(sim *s, int slot, char *out, size_t n)
{
    snprintf(out, n, "%s/seed%llu-node%llu", s->o.store_dir, (unsigned long long)s->seed,
             (unsigned long long)s->nodes[slot].id);
}

/* Opens the node's store (fresh on first use).  Returns 0 or -1 (failed). */
int sim_store_open(sim *s, int slot)
{
    if (!s->o.store_dir)
        return 0;
    sim_node *nd = &s->nodes[slot];
    char p[512], err[256] = "";
    store_path(s, slot, p, sizeof p);
    if (nd->incarnation == 0 && !nd->st) {
        leveldb_options_t *o = leveldb_options_create();
        char *e = NULL;
        leveldb_destroy_db(o, p, &e);
        leveldb_free(e);
        leveldb_options_destroy(o);
    }
    if (raft_store_open(p, 0, &nd->st, err, sizeof err)) {
        sim_fail(s, "store: open %s: %s", p, err);
        return -1;
    }
    return 0;
}

/* Closes the node's store (a crash, as far as the store is concerned). */
void sim_store_close(sim *s, int slot)
{
    raft_store_close(s->nodes[slot].st);
    s->nodes[slot].st = NULL;
}

/* Closes and deletes the node's store at the end of a run. */
void sim_store_destroy(sim *s, int slot)
{
    if (!s->o.store_dir)
        return;
    sim_store_close(s, slot);
    char p[512];
    store_path(s, slot, p, sizeof p);
    leveldb_options_t *o = leveldb_options_create();
    char *e = NULL;
    leveldb_destroy_db(o, p, &e);
    leveldb_free(e);
    leveldb_options_destroy(o);
}

static void commit(sim *s, raft_store_batch *b)
{
    char err[256] = "";
    if (raft_store_commit(b, err, sizeof err))
        sim_fail(s, "store: commit: %s", err);
}

/* Writes the initial state of a bootstrapped or joining replica. */
void sim_store_bootstrap(sim *s, int slot, int g, const sim_disk *d)
{
    raft_store *st = s->nodes[slot].st;
    if (!st)
        return;
    raft_store_batch *b;
    if (raft_store_batch_new(st, &b)) {
        sim_fail(s, "store: no memory");
        return;
    }
    raft_ready rd;
    memset(&rd, 0, sizeof rd);
    rd.hs_changed = 1;
    rd.hs = d->hs;
    if (raft_store_batch_compact(b, (uint64_t)g, &d->snap) ||
        raft_store_batch_ready(b, (uint64_t)g, &rd)) {
        raft_store_batch_free(b);
        sim_fail(s, "store: batch");
        return;
    }
    commit(s, b);
}

/* sim_store_persist: contract in sim.h. */
int sim_store_persist(sim *s, int slot, size_t n, const uint64_t *groups, raft_ready *const *rds,
                      size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps)
{
    raft_store *st = s->nodes[slot].st;
    if (!st)
        return 0;
    if (rhost_store_persist(st, n, groups, rds, ncomp, comp_groups, comps)) {
        sim_fail(s, "store: node %llu: the round's batch failed",
                 (unsigned long long)s->nodes[slot].id);
        return -1;
    }
    return 0;
}

typedef struct cmp_ctx {
    sim *s;
    const sim_disk *d;
    size_t next; /* position in d->log */
    int bad;
} cmp_ctx;

static int cmp_entry(void *ctx, const raft_entry *e)
{
    cmp_ctx *c = ctx;
    if (c->next >= c->d->n) {
        c->bad = 1;
        return RAFT_ERR_CORRUPT;
    }
    const raft_entry *m = &c->d->log[c->next++].e;
    if (m->index != e->index || m->term != e->term || m->type != e->type || m->len != e->len ||
        (e->len && memcmp(m->data, e->data, e->len))) {
        c->bad = 1;
        return RAFT_ERR_CORRUPT;
    }
    return RAFT_OK;
}

/* Reloads every hosted group from the store and compares with the model. */
void sim_store_verify(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    if (!nd->st)
        return;
    for (int g = 0; g < s->o.groups && !s->failed; g++) {
        const sim_disk *d = &nd->rep[g].disk;
        if (!nd->rep[g].hosted)
            continue;
        raft_hard_state hs;
        raft_snap_meta sm;
        cmp_ctx c = { s, d, 0, 0 };
        uint64_t bad = 0;
        int rc = raft_store_load(nd->st, (uint64_t)g, &hs, &sm, cmp_entry, &c, &bad);
        if (rc || c.bad || c.next != d->n || memcmp(&hs, &d->hs, sizeof hs) ||
            sm.index != d->snap.index || sm.term != d->snap.term || sm.size != d->snap.size ||
            sm.conf.n != d->snap.conf.n || sm.conf.max_id != d->snap.conf.max_id)
            sim_fail(s,
                     "store: node %llu group %d diverges from the disk model "
                     "(%s at %llu; entries %zu/%zu; commit %llu/%llu; snap %llu/%llu)",
                     (unsigned long long)nd->id, g, raft_strerror(rc), (unsigned long long)bad,
                     c.next, d->n, (unsigned long long)hs.commit, (unsigned long long)d->hs.commit,
                     (unsigned long long)sm.index, (unsigned long long)d->snap.index);
    }
}
