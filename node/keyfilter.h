/*
 * keyfilter.h — a storage node's absent-key filter: a blocked Bloom filter
 * over every fact key of the node's store, so that a write of a key the
 * store has never held skips the read of its stored fact.
 *
 * Why: every put reads the fact it replaces (its version and old index
 * tuples). For a new key that read is a leveldb miss, which walks the
 * memtable's skiplist and checks every table's filter: 20 % of a storage
 * node's CPU during a bulk load of new items (perf, docs/PERFORMANCE.md).
 * The filter answers "certainly absent" for ~98 % of never-written keys
 * with one cache line read.
 *
 * Contract: kf_absent is true only when the key was never kf_add'ed and the
 * filter is ready. A key is added when a write of it enters a batch (before
 * the batch commits: a batch that fails leaves a harmless false positive).
 * After a start the filter is not ready until kf_set_ready, which the store
 * calls once a background scan has added every fact key on disk (keys
 * written during the scan are added by their writers, so none is missed).
 * Deleted keys stay in the filter (a false positive: one read). The filter
 * grows by segments, each twice the keys of all before it; past max_bytes
 * it turns itself off for good (every answer "maybe", memory freed), so
 * its memory stays bounded: ~1.25 bytes per key while on.
 *
 * Thread-safe: one mutex; add and absent are a hash and one cache line.
 */
#ifndef SX_KEYFILTER_H
#define SX_KEYFILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct keyfilter keyfilter;

/* A new, empty, not-ready filter that may use up to max_bytes, its first
 * segment sized for 1.5 x expect keys (the store's item count; at least
 * 65,536 keys, 80 KiB). When not even the smallest segment fits, the filter
 * is off from the start. Returns 0 or SX_ENOMEM (the filter itself). */
int kf_create(uint64_t expect, size_t max_bytes, keyfilter **out);

/* Frees the filter; accepts NULL. */
void kf_destroy(keyfilter *f);

/* Adds key k of partition part. Never fails: when memory runs out or the
 * byte cap is reached the filter turns off (see above). */
void kf_add(keyfilter *f, uint64_t part, const uint8_t *k, size_t kn);

/* True only when key k of partition part is certainly not in the store:
 * the filter is ready, on, and no segment holds the key. */
bool kf_absent(keyfilter *f, uint64_t part, const uint8_t *k, size_t kn);

/* Marks the filter complete: every key on disk has been added. */
void kf_set_ready(keyfilter *f);

/* Counters for logs and tests: keys added, bytes held, and whether the
 * filter is ready and on. Any pointer may be NULL. */
void kf_stats(keyfilter *f, uint64_t *keys, size_t *bytes, bool *ready, bool *on);

#endif
