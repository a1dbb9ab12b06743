/*
 * index_commit.h — the index partition's group commit, shared by its two
 * threads: the committer (index_apply.c: validation, the queue, a group's
 * apply and write) and the syncer (index_sync.c: the log syncs, and the
 * groups written unsynced, made durable and answered). Private to those
 * two files; index_part.h is the partition's interface.
 */
#ifndef SX_INDEX_COMMIT_H
#define SX_INDEX_COMMIT_H

#include <stdbool.h>
#include <stdint.h>
#include "index_part.h"

typedef struct ix_apply_op {
    const msg_I_APPLY_req *m;
    bool build; /* I_BUILD: m->upto is the source's head at */
    bool stale; /* build refused: the source's watermark passed at */
    bool seal;  /* an I_BUILD without records */
    bool early; /* answer once written (I_APPLY's early) */
    bool gap;   /* refused: its after is past the watermark */
    int src;    /* position in p->src */
    int err;
    uint64_t wm;
    ix_apply_cb cb; /* NULL: a synchronous caller waits on done */
    void *cb_arg;
    bool done; /* guarded by q_mu */
    struct ix_apply_op *next;
} ix_apply_op;

/* A group the committer wrote and handed to the syncer: the ops to
 * answer once it is synced, and the state the partition reaches with it
 * (published then). */
typedef struct ix_written {
    ix_apply_op *ops;  /* not answered yet (not early) */
    uint64_t *wm, *hw; /* p->nsrc each (one allocation) */
    uint64_t *s;       /* the last 'S' record's watermarks as of it */
    uint64_t entries, tombstones;
    uint64_t nrec, apply_us, write_us; /* for the committer's figures */
    struct ix_written *next;
} ix_written;

/* Answers the ops of group (their err set): callbacks first (an op with
 * one is freed here), each told how far its source is synced now, then
 * the synchronous callers, which may return (and drop their op) as soon
 * as they see done. (index_apply.c) */
void ix_finish_group(ix_part *p, ix_apply_op *group);

/* fsyncs every log of p (ldb_sync_logs, counting them in *synced), unless
 * a sync failed before; a failure makes the partition fail-stop
 * (p->seal_broken, reported once). Returns 0 or SX_EIO. The committer's
 * and the syncer's one way to make groups durable. */
int ix_sync_logs(ix_part *p, unsigned *synced);

/* Under apply_mu, with the syncer holding nothing: writes a group's batch
 * b, synced (every log fsynced before it returns; with seal, the marker
 * file removed after, *seal_rc telling how that went) or, for a group of
 * build records only (lazy), unsynced after the marker file is created
 * durably. Returns 0 or the write's or sync's error (fail-stop). */
int ix_write_group(ix_part *p, leveldb_writebatch_t *b, bool lazy, bool seal, int *seal_rc);

/* Publishes a state the partition reached (its synced groups'): the
 * nsrc watermarks and hw_seen values, the counters and, when dur is not
 * NULL, the watermarks of the last 'S' record now known synced (what
 * answers report as synced: index_part.h). */
void ix_publish(ix_part *p, const uint64_t *wm, const uint64_t *hw, uint64_t entries,
                uint64_t tombstones, const uint64_t *dur);

/* Under apply_mu, after a written group: a record of it for the syncer,
 * with the state it reached (p->work_*), ops to answer after the sync and
 * the group's timings. NULL when out of memory. */
ix_written *ix_written_new(ix_part *p, ix_apply_op *ops, uint64_t nrec, uint64_t apply_us,
                           uint64_t write_us);

/* Hands written group w to the syncer, which owns it from then on. */
void ix_sync_hand(ix_part *p, ix_written *w);

/* Starts the syncer thread (0, or SX_EINTERNAL); stops it once it synced
 * and answered every group it holds (a thread never started is fine). */
int ix_syncer_start(ix_part *p);
void ix_syncer_stop(ix_part *p);

#endif
