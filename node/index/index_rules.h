/*
 * index_rules.h — the index partition's apply and collection rules as pure
 * functions (no leveldb, no nng, no allocation), so they can be tested alone
 * (tests/unit/index/index_rules_test.c) and every caller decides alike:
 *   - a shipped record with seq <= watermark[source] is a redelivery: ignore;
 *   - a put applies iff its version > the stored version (live or tombstone);
 *   - a delete writes a tombstone iff its version > the stored version;
 *   - a tombstone of version v may be collected once every storage partition
 *     has reported hw_seen > v.
 */
#ifndef SX_INDEX_RULES_H
#define SX_INDEX_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What to do with one shipped record. */
typedef enum ix_action {
    IX_SKIP = 0,       /* not newer than what is stored: leave it */
    IX_WRITE_LIVE = 1, /* store a live entry with the record's version */
    IX_WRITE_TOMB = 2  /* store a tombstone with the record's version */
} ix_action;

/* Decides one record against the stored entry for its key.
 * have: an entry (live or tombstone) is stored; stored_version: its version
 * (ignored when !have). rec_kind: OUT_PUT (0) or OUT_DEL (1); any other kind
 * yields IX_SKIP. Pure; thread-safe. */
ix_action ix_decide(bool have, uint64_t stored_version, int rec_kind, uint64_t rec_version);

/* True when a record with sequence seq from a source whose applied
 * watermark is wm was already applied (redelivery). Pure. */
bool ix_redelivered(uint64_t seq, uint64_t wm);

/* The new watermark (or hw_seen) after a batch: max(old, reported). Pure. */
uint64_t ix_advance(uint64_t old, uint64_t reported);

/* The collection horizon: the minimum of hw_seen over the n storage
 * partitions of the config (0 when n == 0: nothing may be collected). */
uint64_t ix_gc_horizon(const uint64_t *hw_seen, int n);

/* True when a tombstone of version v may be deleted under horizon. */
bool ix_gc_collectible(uint64_t v, uint64_t horizon);

/* Checks a batch's sequence numbers: strictly increasing, and the last one
 * <= upto. Returns true when well-formed (an empty batch always is). */
bool ix_seqs_ok(const uint64_t *seqs, uint32_t n, uint64_t upto);

/* Bytewise key order (shorter prefix first): <0, 0, >0. */
int ix_keycmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn);

/* True when tuple t..tn lies in the half-open range [lo, hi) where
 * lo_n == 0 means unbounded below and hi_n == 0 unbounded above. */
bool ix_tuple_in_range(const uint8_t *t, size_t tn, const uint8_t *lo, size_t lo_n,
                       const uint8_t *hi, size_t hi_n);

#endif
