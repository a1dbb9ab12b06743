/*
 * u64set.h — a set of 64-bit values (open addressing, grows as it fills).
 *
 * A backfill uses one to remember which facts were written while it held a
 * snapshot (storage_part.h: bf_touch). A value of 0 is stored like any
 * other. Not thread-safe: the caller serialises (the partition's wlock).
 */
#ifndef SX_U64SET_H
#define SX_U64SET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct u64set {
    uint64_t *slot; /* 0 = empty; a stored 0 is kept in has_zero */
    size_t cap, n;  /* cap: 0 or a power of two */
    size_t max;     /* values held at most (0: no bound); past
                     * it the set is lost and frees its table */
    bool has_zero;
    bool lost; /* an add ran out of memory: membership is
                * unknown, so callers treat every value as
                * present */
} u64set;

/* An empty set (allocates nothing), without a bound (set s->max after). */
void u64set_init(u64set *s);

/* Frees the set's memory; it may be initialised again. */
void u64set_free(u64set *s);

/* Adds v. Returns 0, or SX_ENOMEM after setting s->lost (out of memory, or
 * past s->max values; once lost, an add does nothing and returns 0). */
int u64set_add(u64set *s, uint64_t v);

/* True when v was added, or when s->lost. */
bool u64set_has(const u64set *s, uint64_t v);

#endif
