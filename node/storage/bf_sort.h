/*
 * bf_sort.h — a backfill's sorted run: the index records a scan of a fact
 * partition produced, held in memory, sorted by index key and read back in
 * that order.
 *
 * Why: an index node inserts each entry into a leveldb memtable; entries in
 * random order miss the cache at every level of its skiplist, and the tables
 * flushed from it all overlap and must be compacted. The same entries in key
 * order are inserted beside the previous one and flush into tables that do
 * not overlap (measured on this machine: 1,000,000 puts into a 64 MiB
 * memtable, 3.2 s of CPU in random order, 1.05 s sorted, 1.5 s in sorted
 * runs of 50,000). A backfill that emits its records in key order hands
 * the index nodes exactly that.
 *
 * Records are packed into one arena; the caller bounds a run by
 * bf_recs_bytes (memory used) and emits it before gathering the next.
 * Not thread-safe: one run belongs to one backfill.
 */
#ifndef SX_BF_SORT_H
#define SX_BF_SORT_H

#include <stddef.h>
#include <stdint.h>

struct bf_ent;

/* The most a run's arena holds (record offsets are 32-bit). */
#define BF_RECS_MAX_BYTES ((size_t)UINT32_MAX)

typedef struct bf_recs {
    uint8_t *a; /* arena of packed records */
    size_t an, acap;
    struct bf_ent *e; /* one per record: sort key and place */
    size_t n, cap;
    int sorted; /* e[] is sorted */
} bf_recs;

/* One record as read back; every pointer borrows from the run. */
typedef struct bf_rec {
    const uint8_t *fkey; /* the fact's partition-local key */
    size_t fkn;
    uint64_t version, h;
    const uint8_t *key; /* index-local entry key: index id | tuple */
    size_t kn;
    const uint8_t *proj; /* raw msgpack; NULL when pn == 0 */
    size_t pn;
} bf_rec;

/* An empty run (allocates nothing). */
void bf_recs_init(bf_recs *r);

/* Frees the run's memory; it may be initialised again. */
void bf_recs_free(bf_recs *r);

/* Empties the run, keeping its memory for the next one. */
void bf_recs_clear(bf_recs *r);

/* Appends one record (copied). Must not be called once sorted until
 * bf_recs_clear. Returns 0, SX_ENOMEM, or SX_ETOOBIG when the arena would
 * pass BF_RECS_MAX_BYTES. */
int bf_recs_add(bf_recs *r, const uint8_t *fkey, size_t fkn, uint64_t version, uint64_t h,
                const uint8_t *key, size_t kn, const uint8_t *proj, size_t pn);

/* Bytes the run holds (arena and index), for bounding it. */
size_t bf_recs_bytes(const bf_recs *r);

/* Sorts the records by entry key (bytewise, a shorter prefix first), then
 * by h, then by fact key: a total order, so equal inputs sort alike. */
void bf_recs_sort(bf_recs *r);

/* Record i (0 <= i < r->n) of a sorted run, in sorted order. */
void bf_recs_get(const bf_recs *r, size_t i, bf_rec *out);

#endif
