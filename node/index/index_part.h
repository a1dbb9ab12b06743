/*
 * index_part.h — one index partition: a leveldb at DATA/p<ID> holding the
 * entries of every index whose tuples fall in the partition's [lo, hi), the
 * per-source watermarks, and the in-memory counters and locks around them.
 *
 * leveldb layout (all integers big-endian):
 *   'E' | index-local key            -> [live bool, version u64, h u64, proj map|nil]
 *   'T' | version (8) | index-local  -> ""   (one per tombstone, for GC by version)
 *   'W' | source part id (8)         -> [watermark u64, hw_seen u64]
 *   'C'                              -> [entries u64, tombstones u64]
 *   'S'                              -> [source u64, wm u64, hw u64, ...]
 * where index-local key = index id (4) | tuple. 'S' is the published
 * (synced) state when the batch holding it was written: several groups
 * may be written before one sync covers them, and a machine
 * crash may then lose an earlier one and keep a later one (its 'W' records
 * claiming what was lost), so an open takes each source's watermark and
 * hw_seen from 'S' (what it says is on disk whatever was lost), and the
 * sources ship again what follows (redeliveries apply idempotently); a
 * clean close writes 'S' equal to the final state. A batch writes 'S'
 * whenever the published state moved since the last one it wrote, and
 * once such a batch is synced its values are what answers report as a
 * source's synced watermark (ix_apply_cb). Every change (entries,
 * tombstone records, watermarks, counters) is written in one batch whose
 * log is fsynced before any of it is acknowledged as durable or its
 * watermarks published (written unsynced, then every log synced: the bytes leveldb's
 * synced write leaves on disk, but readers see the entries while the sync
 * runs), but for a group of build records only (I_BUILD, msg.h): those are
 * written unsynced once the marker file DATA/p<ID>.unsealed exists
 * (created durably before the first of them), and a seal (an I_BUILD
 * without records, sent by each building source at its end) fsyncs every
 * log, then removes the marker. A machine crash can thus lose only build
 * records written while the marker exists, and only there can a log's
 * unsynced tail be torn: reopening with the marker first lets leveldb
 * recover without its paranoid checks (skipping what it cannot read,
 * which can only be unsealed build records: a synced write syncs its
 * whole log), then recounts the counters (a later synced group may have
 * counted lost entries) and removes the marker; the sources see the
 * node's new epoch (I_BUILD's reply) and build again. A clean stop seals
 * what is unsealed (ix_part_close), so only a crash leads there, and the
 * node keeps its epoch across it (ix_epoch.h): the builds go on. After a
 * failed log sync (or any failed write) the partition's leveldb refuses
 * every later write, seals included, until the node restarts (ldb.h: the
 * kernel may have dropped the pages it could not write, and a failed
 * write may have left a torn record that nothing may follow; only a
 * restart and the rebuilds it causes make that safe); a seal's sync is its
 * group's, so a failed one fails the group's every request.
 *
 * Locking: apply_mu serialises writers (the committer and the collectors
 * of tombstones and of dropped indexes); state_mu guards the published watermarks, hw_seen
 * and counters (written after a successful sync, by an apply_mu holder or
 * by the syncer, read by anyone); q_mu guards the apply queue and the
 * committer's flags, commit_cv wakes the committer, done_cv wakes
 * synchronous callers; sync_mu guards the syncer's queue and flags.
 *
 * Applies run on the partition's committer thread (ix_part_open starts it,
 * ix_part_close stops it): I_APPLYs are validated on the thread that
 * received them and queued; the committer takes everything queued
 * (bounded), applies it as one group and writes it. A group of I_APPLYs
 * only is written unsynced and handed to the partition's syncer thread,
 * which fsyncs the logs once for every group handed over meanwhile, then
 * publishes the last one's state and answers their requests; the
 * committer goes on with the next group during that sync (pipelined group
 * commit: a slow sync does not hold up the next group's entries, so the
 * index lag does not include it). A request that
 * asked to be answered early (I_APPLY's early, msg.h) is answered right
 * after its group's write, with what is synced so far. Any other group
 * (build records, a seal, a partition whose sync failed), and a collector,
 * first waits for the syncer to finish what it holds (ix_sync_drain), so
 * the marker file, seals and counters keep their order.
 */
#ifndef SX_INDEX_PART_H
#define SX_INDEX_PART_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "catalog.h"
#include "commit_stats.h"
#include "config.h"
#include "ldb.h"
#include "log.h"
#include "mp.h"
#include "msg.h"
#include "tuple.h"

#define IX_PFX_ENTRY 'E'
#define IX_PFX_TOMB 'T'
#define IX_PFX_WM 'W'
#define IX_PFX_COUNT 'C'
#define IX_PFX_SYNCED 'S'

/* Longest index-local key: 4-byte index id + tuple. */
#define IX_MAX_LOCAL (SX_MAX_KEY + 4)
/* Largest leveldb key we build: 'T' | version | local key. */
#define IX_MAX_DBKEY (1 + 8 + IX_MAX_LOCAL)

struct ix_apply_op;
struct ix_written;
struct pgroup;
struct repl;

typedef struct ix_part {
    uint64_t id;
    const cfg_part *cp; /* borrowed from the config */
    ldb *db;
    /* Sources: the config's storage partitions first (ncfg of them, in
     * config order), then ids only found on disk. Immutable after open. */
    int nsrc, ncfg;
    uint64_t *src;

    pthread_mutex_t state_mu; /* guards wm, hw, entries, tombstones, dur_wm */
    uint64_t *wm, *hw;
    uint64_t entries, tombstones;
    uint64_t *dur_wm; /* each source's watermark in the last 'S'
                       * record known synced: what answers report */

    pthread_mutex_t apply_mu;               /* one writer at a time */
    uint64_t *work_wm, *work_hw;            /* the last written state (apply_mu): */
    uint64_t work_entries, work_tombstones; /* ahead of the published one
                                             * by the groups the syncer holds */
    bool work_valid;                        /* (apply_mu) work_* hold it; false: copy the
                                             * published state (nothing held) first */
    bool *work_dirty;
    uint64_t *s_wm, *s_hw;                    /* (apply_mu) the last 'S' record written */
    char *unsealed;                           /* the marker file's path (index_part.h) */
    bool build_open;                          /* the marker exists (apply_mu): build
                                               * records may sit in unsynced logs */
    bool seal_broken;                         /* a log sync failed: no more seals, no more
                                               * pipelined groups (atomic access) */
    bool opened;                              /* ix_part_open succeeded (close then records
                                               * the final state) */
    bool recovered;                           /* opened with the marker there: unsealed
                                               * records may have been lost (immutable) */
    uint64_t lazy_groups, seals, logs_synced; /* committer; atomic reads:
                                               * NODE_STATUS "builds" */

    pthread_mutex_t q_mu;     /* guards the queue and the flags below */
    pthread_cond_t commit_cv; /* the committer: work, or quit */
    pthread_cond_t done_cv;   /* a synchronous caller's op is done */
    struct ix_apply_op *q_head, *q_tail;
    pthread_t committer;
    bool committer_started;
    bool committer_idle; /* waiting on commit_cv */
    bool committer_quit;
    bool stopping;                      /* no more applies are queued */
    log_ratelimit slow;                 /* committer only: slow-group warnings */
    pthread_mutex_t sync_mu;            /* guards the syncer's queue and flags */
    pthread_cond_t sync_cv;             /* the syncer: groups to sync, or quit */
    pthread_cond_t drained_cv;          /* the syncer holds nothing */
    struct ix_written *w_head, *w_tail; /* written, not yet synced */
    pthread_t syncer;
    bool syncer_started;
    bool syncer_busy; /* syncing groups it took off the queue */
    bool syncer_quit;
    log_ratelimit slow_sync;   /* syncer only: slow-sync warnings */
    commit_stats commits;      /* the committer's figures, for status */
    struct keyfilter *kf;      /* absent-key filter over entry keys (NULL: none);
                                * the committer skips the read of a key it
                                * proves never stored */
    struct kf_loader *kf_load; /* the scan that fills it after open */
    struct pgroup *pg;         /* its Raft group (index_repl.c), or NULL: a
                                * partition of one replica */
} ix_part;

/* A decoded stored entry; proj borrows from the value bytes. */
typedef struct ix_entry {
    bool live;
    uint64_t version;
    uint64_t h;
    mp_span proj;
} ix_entry;

/* Opens (creating if missing) partition cp's database under data_dir,
 * loads watermarks and counters (counting by one scan if never persisted),
 * starts the committer. Returns 0, SX_EIO, SX_ENOMEM, SX_EINTERNAL. *out is
 * freed with ix_part_close. */
int ix_part_open(const cfg_cluster *cfg, const cfg_part *cp, const char *data_dir, ix_part **out);

/* Stops the committer (answering every queued apply first), seals what a
 * build left unsealed, closes the database and frees p; accepts NULL. No
 * request may be running. Returns true when every build record applied is
 * known durable: nothing left unsealed, and no write or sync of the
 * database ever failed (ldb_sound); false otherwise. */
bool ix_part_close(ix_part *p);

/* The position of source id in p->src, or -1. Thread-safe (immutable). */
int ix_part_src_index(const ix_part *p, uint64_t source);

/* Copies the published state: counters and, when wm/hw are not NULL, the
 * p->nsrc watermarks and hw_seen values. Thread-safe. */
void ix_part_state(ix_part *p, uint64_t *entries, uint64_t *tombstones, uint64_t *wm, uint64_t *hw);

/* Decodes a stored entry value. Returns 0 or SX_EIO (corrupt). */
int ix_entry_decode(const uint8_t *v, size_t n, ix_entry *e);

/* Appends an entry value [live, version, h, proj] to out; proj.n == 0
 * stores nil. */
void ix_entry_encode(mp_buf *out, bool live, uint64_t version, uint64_t h, mp_span proj);

/* Writes 'E' | local into k (capacity >= 1 + ln); returns its length. */
size_t ix_ekey(uint8_t *k, const uint8_t *local, size_t ln);
/* Writes 'T' | version | local into k (>= 9 + ln); returns its length. */
size_t ix_tkey(uint8_t *k, uint64_t version, const uint8_t *local, size_t ln);

/* Appends the synced-state record 'S' (the layout above) holding the
 * p->nsrc watermarks wm and hw_seen values hw to batch b. Returns 0 or
 * SX_ENOMEM. */
int ix_put_synced(ix_part *p, leveldb_writebatch_t *b, const uint64_t *wm, const uint64_t *hw);

/* Appends the counters record 'C' to batch b. Returns 0 or SX_ENOMEM. */
int ix_put_counts(leveldb_writebatch_t *b, uint64_t entries, uint64_t tombstones);

/* Under apply_mu: waits for the syncer to finish the groups it holds
 * (ix_sync_drain), writes batch b, which deletes `live` entries and `tombs`
 * tombstones, synced with the counters lowered to match, then publishes
 * the counters. Returns 0, SX_ENOMEM or SX_EIO (nothing published). */
int ix_commit_removal(ix_part *p, leveldb_writebatch_t *b, uint64_t live, uint64_t tombs);

/* How an asynchronous apply ends: err 0, the source's watermark wm (what
 * is applied) and synced (what of it is known durable whatever a crash
 * loses: the last synced 'S' record's, which may lag wm, even for a
 * request answered after its sync), or an sx_err with a one-line reason
 * msg (borrowed for the call). */
typedef void (*ix_apply_cb)(void *arg, int err, uint64_t wm, uint64_t synced, const char *msg);

/* Starts I_APPLY for this partition (index_apply.c), or with build an
 * I_BUILD (m is then the I_BUILD's fields: msg.h): validates the request
 * against the partition (keys, ranges, lists, source) and queues it for the
 * committer, which applies it in a group (synced, except a group of build
 * records only: see the layout above) and then calls cb(arg, ...) exactly
 * once, on the committer thread or the syncer's: once the group is synced,
 * or (an I_APPLY with early set) once it is written. An I_APPLY whose
 * after is past the source's watermark applies nothing and fails with
 * SX_EUNAVAIL. An I_BUILD whose source's watermark is
 * past m->upto by then applies nothing and fails with SX_EUNAVAIL; one
 * without records (a seal) is answered once every build record applied
 * before it is durable. Returns 0 when queued; otherwise
 * an sx_err with a one-line reason in err[errlen] (SX_EUNAVAIL once the
 * partition is stopping), and cb is never called. m and its frame must stay
 * valid until cb returns. Does not block. Thread-safe. */
int ix_part_apply_start(ix_part *p, const msg_I_APPLY_req *m, bool build, ix_apply_cb cb, void *arg,
                        char *err, size_t errlen);

/* ix_part_apply_start (never early: m->early is ignored), then waits until
 * the group holding the request is written and synced (or, for build
 * records only, written): returns 0 with *wm set to the source's
 * watermark and *synced to what an answer reports as synced (ix_apply_cb),
 * or an sx_err with a one-line reason in err[errlen]. Thread-safe. */
int ix_part_apply(ix_part *p, const msg_I_APPLY_req *m, bool build, uint64_t *wm, uint64_t *synced,
                  char *err, size_t errlen);

/* Starts and stops the partition's committer and syncer threads
 * (ix_part_open and ix_part_close call them). Stopping first applies,
 * syncs and answers everything queued; applies started afterwards fail
 * with SX_EUNAVAIL. Returns 0 or SX_EINTERNAL. */
int ix_committer_start(ix_part *p);
void ix_committer_stop(ix_part *p);

/* Waits until the syncer has synced, published and answered every group
 * handed to it. Under apply_mu (so that no group is handed over meanwhile);
 * the syncer never takes apply_mu. */
void ix_sync_drain(ix_part *p);

/* Serves I_RANGE (index_read.c): live entries of one index in [lo, hi)
 * (index-local keys; empty hi = to the end of lo's index id), ascending or
 * descending, at most limit (0 or > 1000 means 1000) and stopping early once
 * the reply holds ~8 MB (callers resume after the last key returned).
 * Appends the reply (or an error reply) frame to out. Thread-safe. */
void ix_part_range(ix_part *p, const msg_I_RANGE_req *m, mp_buf *out);

/* Collects tombstones below the current horizon (index_gc.c), at most
 * max_batches batches of a bounded size, releasing apply_mu between them.
 * Returns 0 or an sx_err; *collected (may be NULL) counts deletions. */
int ix_part_gc(ix_part *p, int max_batches, uint64_t *collected);

/* Deletes the entries of indexes that cat shows as dropped (index_drop.c:
 * ids below cat->next_id that no table holds), at most max_batches bounded
 * synced batches, releasing apply_mu between them; counters follow.
 * Returns 0 or an sx_err; *collected (may be NULL) counts deleted entries;
 * *unfinished says the batch budget ran out with work possibly left. */
int ix_part_drop_gc(ix_part *p, const cat_catalog *cat, int max_batches, uint64_t *collected,
                    bool *unfinished);

/* ---- replication (index_repl.c; ix_part_reload in index_part.c) ---- */

/* Makes p (open, cp->nrep > 1) a replica of its Raft group in r, its
 * snapshots in DATA/p<ID>.raft. Its state then changes only by the entries
 * its replica applies; it applies, serves and collects only while it
 * leads. Returns 0 or as pg_open. */
int ix_part_replicate(ix_part *p, struct repl *r, const char *data_dir);

/* A replicated partition's committer, under apply_mu before a group: 0
 * with *term the term this replica leads in (its state holding every
 * committed entry: pg_ready, or a barrier now), else SX_ENOTLEADER or
 * another pgroup.h code. */
int ix_part_leading(ix_part *p, uint64_t *term);

/* Makes batch b durable: synced into the leveldb (one replica), or
 * proposed in term (0: the current ready term) and applied here
 * (replicated). Returns 0 or an sx_err (SX_ENOTLEADER: not the leader). */
int ix_part_durable(ix_part *p, leveldb_writebatch_t *b, uint64_t term);

/* Before a read that must see every acknowledged apply: 0 at once for one
 * replica; for a replicated partition, once this replica confirmed it
 * leads (ReadIndex), else SX_ENOTLEADER (*hint: the leader's config id or
 * 0) or another pgroup.h code. */
int ix_part_read_barrier(ix_part *p, int *hint);

/* The config id of the node last known leading p's group, or 0. */
int ix_part_leader_hint(const ix_part *p);

/* Reloads the published state (each source's watermark and hw_seen from
 * its 'W' record, the counters) from the leveldb after its contents were
 * replaced. Returns 0 or an sx_err. */
int ix_part_reload(ix_part *p);

#endif
