/*
 * backfill.h — building new indexes from a fact partition's existing items.
 *
 * Driven by the storage node's catalog poll. For the indexes of a table that
 * are `building` and not yet done for this partition, together, once the
 * polls (every 50 ms) have seen the same such indexes for 100 ms (so that
 * indexes created one command after the other share one scan):
 *   1. under the write lock: switch the partition to the catalog that has
 *      the indexes, take a leveldb snapshot, and start recording (by a tag
 *      of the fact key, st_fact_tag) every fact written from then on
 *      (st_part.bf_touch); every such write emits its own records for the
 *      new indexes, since the catalog it uses has them;
 *   2. scan the snapshot's items without the lock, gathering each item's
 *      records for every index into an in-memory run (bf_sort.h) of at
 *      most SHARDEX_BACKFILL_RUN_KB (default 64 MiB; at most
 *      SHARDEX_BACKFILL_RUNNING partitions of a node build at once, default
 *      2, the others wait for a later poll, so a node holds at most that
 *      many runs);
 *   3. sort the run by index key and send it in that order straight to the
 *      index partitions (I_BUILD, msg.h), in rounds that take the next
 *      records of every destination at once (up to 4,096 or 4 MiB each,
 *      16,384 in all), so that every index node applies its share while
 *      the others do; each round under the write lock held until every
 *      destination applied its share (so writes wait for one such round at
 *      most). A round that fails is checked and sent
 *      again after a pause, doubling from 100 ms to 5 s, for as long as it
 *      takes (an index node down holds the build, not the writes: after a
 *      call that got no answer the lock is released before the next one
 *      waits); an index partition refuses a round read at a head below its
 *      watermark for the source, which only a late copy can be. A record of a fact
 *      written since the snapshot is sent only if the fact still has the
 *      snapshot's version (read under the lock): otherwise that later write
 *      already emitted the records of the fact's current state, and an
 *      older record applied after them could outlive their tombstones;
 *   4. repeat 2–3 from where the run stopped until the table is done, then
 *      seal the build at every destination that applied a round of it
 *      (an I_BUILD without records: its records, applied without a sync,
 *      are then durable; a destination whose node restarted since the
 *      build's first round there, seen by its epoch, may have lost some,
 *      and the build starts again), then persist, per index, the
 *      partition's outbox head ('M' 'B' | index id): every write made
 *      during the build has its records at or below it, and the build's
 *      own records are applied already.
 * While an index is `building` a write emits the records of its new state
 * even where they repeat the old one (storage_write.c: emit_one), since the
 * index may not hold the old entry yet: so "that later write emitted the
 * records of the fact's current state" holds for every write in step 3.
 * Sorted runs are the point: an index node then inserts its entries in key
 * order, beside the previous one, instead of at random (bf_sort.h has the
 * figures). Nothing of an unfinished backfill is recorded, so one stopped
 * by a crash, a stop, a failed send or a dropped index starts again from
 * the beginning; records it had sent change nothing at the index (same
 * version).
 * A build that fails (an unreadable item, out of memory) is started again
 * on that partition after 1 s, doubling to a minute, per table, so that
 * neither a whole scan every poll nor one table holds back the others.
 * Later polls, once every destination acknowledged past an index's seq,
 * tell the catalog node CAT_BACKFILLED(index, part), retrying each poll
 * until the catalog lists the partition as done.
 *
 * Test hooks, in test builds only (cmake -DSHARDEX_TEST_HOOKS=ON, as
 * scripts/setup builds build/ and build-asan/): SHARDEX_BACKFILL_HOLD=FILE
 * makes a backfill wait after step 1 while FILE exists,
 * SHARDEX_BACKFILL_HOLD_RUN=FILE after each run of step 3 but the last,
 * SHARDEX_BACKFILL_HOLD_SEAL=FILE before the seal of step 4 (see bf_build.c).
 */
#ifndef SX_BACKFILL_H
#define SX_BACKFILL_H

#include "catalog.h"
#include "catclient.h"
#include "net.h"

struct st_part;

/* One poll step for partition p against catalog cat (borrowed, must live
 * as long as the catalog cache): switches the write catalog if cat is
 * newer, runs pending backfills and notifies finished ones through catpeer
 * (calls to the catalog's leader). Errors are logged and retried on the next
 * step. Call from one thread (the poll thread). */
void bf_step(struct st_part *p, const cat_catalog *cat, catclient *catpeer);

#endif
