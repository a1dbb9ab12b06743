/*
 * keyfilter.h — an absent-key filter: a blocked Bloom filter over the keys
 * a leveldb holds, so that a write of a key it has never held skips the
 * read of what it would replace. A storage node keeps one over its fact
 * keys, an index partition one over its entry keys (keyfilter_load.h fills
 * them; storage_filter.c and index_part.c use them).
 *
 * Why: every put reads the fact it replaces (its version and old index
 * tuples), and every index apply the entry it replaces (its version). For
 * a new key that read is a leveldb miss, which walks the memtable's
 * skiplist and checks every table's filter: 20 % of a storage node's CPU
 * during a bulk load of new items, 30 % of an index node's under W1 (perf,
 * docs/PERFORMANCE.md). The filter answers "certainly absent" for ~98 % of
 * never-written keys with one cache line read per segment.
 *
 * Contract: kf_absent is true only when the key was never kf_add'ed and the
 * filter is ready. Writers add a key when a write of it enters a batch and
 * the key was not stored before (before the batch commits: a batch that
 * fails leaves a harmless false positive; a key already stored is in the
 * filter already). After a start the filter is not ready until kf_set_ready,
 * called once a background scan has added every key on disk (keys written
 * during the scan are added by their writers, so none is missed). Deleted
 * keys stay in the filter (a false positive: one read). The filter grows by
 * segments, each twice the keys of all before it; past max_bytes it turns
 * itself off for good (every answer "maybe", memory freed): ~1.9 bytes a
 * key when sized by the stored count, up to ~3.75 after growth steps.
 *
 * Thread-safe: one mutex; add and absent are a hash and one cache line per
 * segment (a lookup fetches its segments' lines together). A caller that
 * asks and then adds the same key hashes it once: kf_key_of, then the
 * _key forms.
 */
#ifndef SX_KEYFILTER_H
#define SX_KEYFILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct keyfilter keyfilter;

/* A new, empty, not-ready filter that may use up to max_bytes, its first
 * segment sized for 1.5 x expect keys (the store's item count; at least
 * 65,536 keys, 80 KiB; at most what max_bytes holds). When not even the
 * smallest segment fits, the filter is off from the start. Returns 0 or
 * SX_ENOMEM (the filter itself). */
int kf_create(uint64_t expect, size_t max_bytes, keyfilter **out);

/* Frees the filter; accepts NULL. */
void kf_destroy(keyfilter *f);

/* A key's hashes: what the filter keeps of (part, k). */
typedef struct kf_key {
    uint64_t a, b;
} kf_key;

/* The hashes of key k of partition part (pure: no filter needed). */
kf_key kf_key_of(uint64_t part, const uint8_t *k, size_t kn);

/* kf_add and kf_absent of a key already hashed by kf_key_of. */
void kf_add_key(keyfilter *f, kf_key h);
bool kf_absent_key(keyfilter *f, kf_key h);

/* Adds key k of partition part. Never fails: when memory runs out or the
 * byte cap is reached the filter turns off (see above). */
void kf_add(keyfilter *f, uint64_t part, const uint8_t *k, size_t kn);

/* True only when key k of partition part is certainly not in the store:
 * the filter is ready, on, and no segment holds the key. */
bool kf_absent(keyfilter *f, uint64_t part, const uint8_t *k, size_t kn);

/* Marks the filter complete: every key on disk has been added. */
void kf_set_ready(keyfilter *f);

/* Turns the filter off for good (every answer "maybe") and frees its
 * memory: for a filter whose scan failed. */
void kf_disable(keyfilter *f);

/* Counters for logs, status and tests: keys added, reads spared (lookups
 * that answered absent), bytes held, and whether the filter is ready and
 * on. Any pointer may be NULL. */
void kf_stats(keyfilter *f, uint64_t *keys, uint64_t *spared, size_t *bytes, bool *ready, bool *on);

#endif
