/*
 * backfill.h — building a new index from a fact partition's existing items.
 *
 * Driven by the storage node's catalog poll: for every index that is
 * `building` and not yet done for this partition, once: under the write
 * lock, switch the partition to the catalog that has the index; then scan
 * the table's items in chunks of a few hundred, each chunk under the write
 * lock and committed as one synced batch, appending an OUT_PUT record (with
 * the item's current version) per indexed item to the outbox; the last
 * chunk also persists the seq of the last record ('M' 'B' | index id).
 * Releasing the lock between chunks is safe: writes after the switch emit
 * their own records for the index, a chunk reads the facts as they are at
 * that moment, and a record repeating an entry at the same version changes
 * nothing at the index. Writes thus stall for one chunk at most, not for a
 * whole table. Later polls, once
 * every destination acknowledged past that seq, tell the catalog node
 * CAT_BACKFILLED(index, part), retrying each poll until the catalog lists
 * the partition as done.
 */
#ifndef SX_BACKFILL_H
#define SX_BACKFILL_H

#include <nng/nng.h>
#include "catalog.h"

struct st_part;

/* One poll step for partition p against catalog cat (borrowed, must live
 * as long as the catalog cache): switches the write catalog if cat is
 * newer, runs pending backfills and notifies finished ones through catsock
 * (a REQ socket to the catalog node). Errors are logged and retried on the
 * next step. Call from one thread (the poll thread). */
void bf_step(struct st_part *p, const sx_catalog *cat, nng_socket catsock);

#endif
