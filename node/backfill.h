/*
 * backfill.h — building a new index from a fact partition's existing items.
 *
 * Driven by the storage node's catalog poll: for every index that is
 * `building` and not yet done for this partition, once: under the write
 * lock, switch the partition to the catalog that has the index, scan the
 * table's items and append an OUT_PUT record (with the item's existing
 * version) per indexed item to the outbox, in synced batches; remember the
 * seq of the last record ('M' 'B' | index id, persisted). Later polls, once
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
