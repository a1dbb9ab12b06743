/*
 * commit_stats.h — cumulative figures of one group committer (a storage
 * node's, an index partition's), reported by NODE_STATUS as "commits":
 *   groups       synced writes made (groups that wrote nothing are not
 *                counted; an index group may carry only watermarks: an
 *                I_APPLY of no record still advances its source's mark)
 *   ops          operations offered to those groups (storage: puts and
 *                deletes, those of a partition whose share failed included;
 *                index: shipped records, redeliveries included)
 *   apply_us     time from the group's start to its synced write: computing
 *                it, and waiting for a lock a backfill chunk, a drop or a
 *                collection held
 *   sync_us      time from there to the group's end: the write and its
 *                fsync, then publishing the new state (storage: releasing
 *                each partition and failing any failed share's requests)
 *   max_sync_us  the longest such time since the node started
 * Counters only grow, so a tool takes two readings and divides: ops per
 * group tells how well group commit batches, sync_us per second how busy
 * the committer is with the disk. One writer (the committer), any number of
 * readers, no lock: each field is read on its own (a reading may mix two
 * groups' figures; every field is exact once the committer is idle).
 */
#ifndef SX_COMMIT_STATS_H
#define SX_COMMIT_STATS_H

#include <stdint.h>
#include "mp.h"

typedef struct commit_stats {
    uint64_t groups, ops, apply_us, sync_us, max_sync_us; /* atomic access only */
} commit_stats;

/* Adds one synced group of ops operations that took apply_us to compute and
 * sync_us to write. Only the committer that owns s calls it. */
void cstats_add(commit_stats *s, uint64_t ops, uint64_t apply_us, uint64_t sync_us);

/* Appends the pair "commits": {groups, ops, apply_us, sync_us, max_sync_us}
 * to the map being written in b (the caller counts it as one entry). */
void cstats_put(const commit_stats *s, mp_buf *b);

#endif
