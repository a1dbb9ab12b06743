/*
 * pgroup.h — a replicated key range of a leveldb whose Raft entries are
 * write batches: the state machine of a fact partition (and of any group
 * whose leader computes its changes itself).
 *
 * The model: the leader computes a change under its own lock, reading its
 * applied state (which holds every committed entry: see pg_ready), and
 * proposes the resulting leveldb write batch as one entry; every replica,
 * the leader included, applies the same bytes, with the applied index in
 * the same write. Apply reads no clock and no catalog: whatever the change
 * depended on (versions, the catalog, deadlines) was decided by the leader
 * and is in the bytes, so the replicas cannot diverge.
 *
 * Applies are unsynced (ldb_write_lazy): the Raft log, synced by the loop
 * before anything is acknowledged, is the write-ahead log. After a crash
 * the state is as of some applied index (the applied key is in each
 * entry's batch) and the host applies the log from there.
 *
 * An entry is also stamped with the term its leader computed it in; one
 * applied in another term (leadership moved between the computation and
 * the proposal, so the state it was computed from may be stale) is
 * skipped by every replica, and its proposer told SX_ENOTLEADER.
 *
 * Entry format (integers big-endian): version u8 (1), term u64, then
 * records until the end: op u8 ('P' put, 'D' delete), kn u32, key, and for
 * a put vn u32, value. Every key lies in the group's range.
 *
 * Built with -DSHARDEX_TEST_HOOKS=ON only, the chaos harness's planted bug
 * "stale-leader-read" (tests/chaos/README.md, "Planted bugs"): with
 * SHARDEX_PLANT=stale-leader-read in the node's environment,
 * pg_read_barrier skips the ReadIndex on a replica that knows of no other
 * leader: a leader cut off by a partition (or a replica cut off with it)
 * goes on serving what it holds. Never reachable from a config file;
 * absent from other builds.
 *
 * Threading: pg_open and pg_close on the node's main thread; the rest
 * from any thread. Hooks run on the node's Raft loop thread: keep them
 * short.
 */
#ifndef SX_PGROUP_H
#define SX_PGROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "ldb.h"
#include "repl.h"

typedef struct pgroup pgroup;

/* The owner's side, all on the loop thread. */
typedef struct pg_hooks {
    void *arg;
    /* An entry's batch was written: its records (pg_records_each walks
     * them), for the owner to bring its in-memory state along. */
    void (*applied)(void *arg, const uint8_t *recs, size_t n);
    /* The range was replaced (a snapshot installed, or emptied to join
     * as a new replica): reload everything. Returns 0 or -1 (fail-stop). */
    int (*reloaded)(void *arg);
    /* Leadership changed: term > 0, this replica leads in that term and
     * has applied every entry committed before it (pg_ready); 0, it no
     * longer does. */
    void (*leading)(void *arg, uint64_t term);
} pg_hooks;

typedef struct pg_config {
    uint64_t group;
    const int *nodes; /* the configured replicas' cfg.nodes indexes */
    int n;
    ldb *db;
    const void *lo, *hi; /* the range [lo, hi) */
    size_t lo_n, hi_n;   /* hi_n 0: to the end of the key space */
    const void *marker;  /* a snapshot install's marker key */
    size_t marker_n;
    const void *akey; /* the applied index's key */
    size_t akey_n;
    const char *dir;  /* its snapshot folder (snapdir.h) */
    const char *what; /* "partition 3", for log lines */
    pg_hooks hooks;
} pg_config;

/* Opens the group's state machine over its range and loads its replica in
 * r (repl_group_add: bootstrapped, loaded, or joined as a new replica).
 * The owner must be ready for its hooks before this is called. An
 * interrupted snapshot install found here empties the range and calls
 * hooks.reloaded before loading. Returns 0, SX_EINVAL, SX_EIO (logged) or
 * SX_ENOMEM; *out is freed by pg_close (after repl_stop). */
int pg_open(repl *r, const pg_config *cfg, pgroup **out);

/* Frees g (its loop must be stopped). Accepts NULL. */
void pg_close(pgroup *g);

/* The term in which this replica leads and has applied everything
 * committed before it (so its state is the group's), or 0. Lock-free. */
uint64_t pg_ready(const pgroup *g);

/* The config id of the node this replica last knew leading (for an
 * SX_ENOTLEADER hint), or 0. Lock-free. */
int pg_leader_hint(const pgroup *g);

/* True when this replica does not lead and knows which other node does
 * (*hint its config id): a request for the leader can be refused at once,
 * without asking the group. Lock-free. */
bool pg_redirect(const pgroup *g, int *hint);

/* A proposal's or barrier's outcome, for pg_propose's callback and the
 * blocking calls: 0 (applied here / confirmed); SX_ENOTLEADER (certainly
 * not applied; hint the leader's config id or 0); SX_ETIMEDOUT (the
 * replica stopped first: the outcome is unknown); SX_EUNAVAIL (the
 * service stopped before it was proposed: not applied); SX_ENOMEM;
 * SX_EIO (the loop failed: unknown); SX_ETOOBIG (the batch is larger
 * than PG_MAX_ENTRY: not proposed). */
#define PG_MAX_ENTRY ((size_t)12 << 20)
typedef void (*pg_done_fn)(void *arg, int rc, int hint);

/* Encodes batch b (every key in the range) stamped with term (the
 * pg_ready term it was computed in) and proposes it; done runs once, on
 * the loop thread, after this replica applied it (or with the failure).
 * Returns 0, or the failure without calling done. */
int pg_propose(pgroup *g, leveldb_writebatch_t *b, uint64_t term, pg_done_fn done, void *arg);

/* pg_propose and a wait for its outcome (*hint as pg_done_fn's). */
int pg_commit(pgroup *g, leveldb_writebatch_t *b, uint64_t term, int *hint);

/* A linearizable barrier: returns 0 once this replica, the leader, has
 * applied everything committed before the call (ReadIndex), with *term
 * (may be NULL) its ready term; else as pg_done_fn's codes. Blocks. */
int pg_barrier(pgroup *g, uint64_t *term, int *hint);

/* What an owner calls, each refusing at once (SX_ENOTLEADER, *hint) a
 * replica that knows another leader (pg_redirect), and asking the group
 * only otherwise:
 * pg_lead: before computing a change: 0 with *term the term this replica
 *   leads in with the group's state applied (pg_ready, else a barrier);
 * pg_read_barrier: before a read that must see every acknowledged write
 *   (pg_barrier);
 * pg_commit_ready: pg_commit of b in the current ready term (SX_ENOTLEADER
 *   when this replica does not lead). Each blocks; codes as pg_done_fn's. */
int pg_lead(pgroup *g, uint64_t *term, int *hint);
int pg_read_barrier(pgroup *g, int *hint);
int pg_commit_ready(pgroup *g, leveldb_writebatch_t *b, int *hint);

/* Calls fn for each record of an entry's records (hooks.applied's recs):
 * put (del false, val/vn its value) or delete. Stops at fn's non-zero
 * return and returns it; SX_EPROTO for malformed bytes. */
typedef int (*pg_rec_fn)(void *arg, bool del, const uint8_t *k, size_t kn, const uint8_t *v,
                         size_t vn);
int pg_records_each(const uint8_t *recs, size_t n, pg_rec_fn fn, void *arg);

#endif
