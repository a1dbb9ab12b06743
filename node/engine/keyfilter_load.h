/*
 * keyfilter_load.h — creates an absent-key filter (keyfilter.h) for a
 * leveldb and fills it with the keys already stored, on a background
 * thread, marking it ready when done. Shared by the storage store (fact
 * keys) and the index partitions (entry keys).
 *
 * The scan goes in chunks of 65,536 keys, each an iterator of its own (a
 * long-lived iterator would pin memtables and compacted files) that does
 * not fill the block cache; keys written after a chunk's snapshot are
 * added by their writer (kf_add), which the caller's writers do from the
 * moment the filter exists, so the filter misses none. A scan that fails
 * turns the filter off ("maybe" for every key, its memory freed), which is
 * how a store without a filter behaves. SHARDEX_KEYFILTER_MB caps each
 * filter's memory (default 256 MiB, ~2 bytes a key); 0 turns filters
 * off (no filter is created).
 */
#ifndef SX_KEYFILTER_LOAD_H
#define SX_KEYFILTER_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include "keyfilter.h"
#include "ldb.h"
#include "mp.h"

/* Stored keys in [lo, hi) go into the filter as (part, key minus its first
 * skip bytes). */
typedef struct kf_range {
    uint8_t lo[16], hi[16];
    size_t lo_n, hi_n;
    size_t skip;
    uint64_t part;
} kf_range;

typedef struct kf_loader kf_loader;

/* Creates a filter sized for `expect` keys and starts the scan of db over
 * ranges[0..n-1] (copied). what names the filter in the log ("store",
 * "index p101"). On success *kf is the filter and *out the scan, to stop
 * with kf_load_stop before the filter is destroyed and before db closes.
 * The filter is optional: when filters are turned off, or one cannot be
 * set up (logged), *kf and *out are NULL and every write reads. */
void kf_load_start(ldb *db, const kf_range *ranges, int n, uint64_t expect, const char *what,
                   keyfilter **kf, kf_loader **out);

/* Stops the scan if it still runs, waits for its thread and frees the
 * loader (not the filter); accepts NULL. */
void kf_load_stop(kf_loader *l);

/* Appends to a status map the key "keyfilter" and the state of kf (NULL:
 * none): a map {on, ready, keys, spared, bytes}; ready only while on. */
void kf_status(keyfilter *kf, mp_buf *b);

#endif
