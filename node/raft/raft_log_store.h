/*
 * raft_log_store.h — the durable Raft log of a node: one leveldb holding the
 * logs, hard states and snapshot metas of all the node's groups, keyed by
 * (group, index) in big-endian so leveldb's order is (group, index) order.
 * Each ready round becomes one synced WriteBatch covering every group
 * (group commit).  Every record carries a CRC-32C (raft_codec.h); loading
 * verifies the CRCs and that the log is contiguous, and refuses a damaged
 * log with RAFT_ERR_CORRUPT rather than guess (an acknowledged entry may not
 * silently vanish).  A torn last write is handled by leveldb's own log
 * recovery, which drops the incomplete batch as a whole.
 *
 * Keys:  'h' group            → hard state record
 *        's' group            → snapshot meta record
 *        'e' group index      → entry record
 *        'r' group            → this node's replica id in the group, when
 *                               it is not the node's first (a replica that
 *                               joined to replace a lost one): crc|id
 *
 * Threading: a raft_store and its batches belong to one thread at a time.
 */
#ifndef SHARDEX_RAFT_LOG_STORE_H
#define SHARDEX_RAFT_LOG_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "raft.h"

typedef struct raft_store raft_store;
typedef struct raft_store_batch raft_store_batch;

/* Opens (creating if missing) the store at path.  sync: 1 to sync every
 * commit (production), 0 for tests that do not need durability.  On
 * success *out owns the store (raft_store_close).  Returns RAFT_OK,
 * RAFT_ERR_IO (message in err, if err is non-NULL, NUL-terminated), NOMEM. */
int raft_store_open(const char *path, int sync, raft_store **out, char *err, size_t errlen);
/* Closes the store; accepts NULL. */
void raft_store_close(raft_store *s);

/* Lists the groups that have any record: up to max ids into groups, *n gets
 * the count found (may exceed max).  Returns RAFT_OK or RAFT_ERR_IO. */
int raft_store_groups(raft_store *s, uint64_t *groups, size_t max, size_t *n);

/* Callback for raft_store_load: one entry, borrowed for the call.  Return
 * RAFT_OK to continue, anything else stops loading with that code. */
typedef int (*raft_store_entry_fn)(void *ctx, const raft_entry *e);

/* Loads group's durable state: *hs (zero if none), *snap (index 0, empty
 * configuration if none), then every entry after snap->index in order via
 * fn.  Returns RAFT_OK, RAFT_ERR_CORRUPT (bad CRC, gap, entry below the
 * snapshot, commit beyond the log; *bad_index, if non-NULL, gets the index
 * at fault or 0), RAFT_ERR_IO, NOMEM, or fn's error. */
int raft_store_load(raft_store *s, uint64_t group, raft_hard_state *hs, raft_snap_meta *snap,
                    raft_store_entry_fn fn, void *ctx, uint64_t *bad_index);

/* Records, synced, that this node's replica of group has id `id` (a
 * replica that joined with a fresh id).  Returns RAFT_OK, RAFT_ERR_IO,
 * NOMEM. */
int raft_store_set_replica(raft_store *s, uint64_t group, uint64_t id);
/* The replica id recorded for group, or 0 when none was.  Returns RAFT_OK,
 * RAFT_ERR_IO or RAFT_ERR_CORRUPT (a record whose CRC fails). */
int raft_store_get_replica(raft_store *s, uint64_t group, uint64_t *id);

/* Starts a batch (one per ready round).  Returns RAFT_OK or NOMEM. */
int raft_store_batch_new(raft_store *s, raft_store_batch **out);
/* Adds a group's ready set: snapshot meta (if rd->has_snap), hard state (if
 * changed), entries (replacing the durable log from entries[0].index on).
 * Snapshot chunk bytes and installing them are the host's business.
 * Returns RAFT_OK, RAFT_ERR_IO, NOMEM. */
int raft_store_batch_ready(raft_store_batch *b, uint64_t group, const raft_ready *rd);
/* Adds a compaction: the snapshot meta (from raft_snap_meta_get after
 * raft_compact) and the deletion of entries <= meta->index. */
int raft_store_batch_compact(raft_store_batch *b, uint64_t group, const raft_snap_meta *meta);
/* Writes the batch atomically (synced if the store syncs) and frees it.
 * Returns RAFT_OK or RAFT_ERR_IO (the batch is freed either way; on error
 * the host must treat the node as crashed: drop its cores and reload). */
int raft_store_commit(raft_store_batch *b, char *err, size_t errlen);
/* Frees an uncommitted batch; accepts NULL. */
void raft_store_batch_free(raft_store_batch *b);

#endif
