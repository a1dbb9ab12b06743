/*
 * range.h — the pure key arithmetic of queries: turning a query's
 * equality values and condition into one contiguous byte range, resuming a
 * range after a consumed key, and clipping a tuple range to an index
 * partition as index-local keys (4-byte BE index id | tuple).
 *
 * Two spaces use the same helpers: the index TUPLE space (secondary
 * indexes; base = the encoded eq values) and the fact-local key space of
 * one partition key (primary queries; base = h (8 BE) | tup(pk value)).
 * No I/O; thread-safe.
 */
#ifndef SX_RT_RANGE_H
#define SX_RT_RANGE_H

#include <stdbool.h>
#include <stdint.h>
#include "config.h"
#include "mp.h"
#include "tuple.h"
#include "router.h"

/* A byte range [lo, hi); hi_open means no upper bound. */
typedef struct rt_range {
    tup_bytes lo;
    tup_bytes hi;
    bool hi_open;
} rt_range;

/* True when the msgpack value raw is absent or nil. */
bool rt_raw_nil(mp_span raw);

/* Encodes the msgpack array eq (nil: no values) as consecutive tuple
 * components appended to out; *k is the number of values. At most max_k
 * values are accepted. Returns 0, SX_EINVAL or SX_EKEY (reason in e),
 * SX_ENOMEM. */
int rt_eq_encode(mp_span eq, uint32_t max_k, tup_bytes *out, uint32_t *k, rt_err *e);

/* Builds r (zeroed by the caller) from base (the equality prefix) and a
 * condition on the next component: Q_COND_NONE (everything under base),
 * Q_COND_RANGE (from..to inclusive, nil bounds open), Q_COND_PREFIX
 * (strings starting with prefix). `what` names the conditioned attribute
 * in messages. Returns 0, SX_EINVAL/SX_EKEY (reason in e), SX_ENOMEM. */
int rt_range_build(const uint8_t *base, size_t bn, uint64_t cond, mp_span from, mp_span to,
                   mp_span prefix, const char *what, rt_range *r, rt_err *e);

/* True when r holds no key. */
bool rt_range_empty(const rt_range *r);

/* Narrows r to the keys after pos (ascending: lo = pos | 0x00) or before
 * pos (descending: hi = pos). Returns 0, SX_ETOKEN when pos is outside r,
 * SX_ENOMEM. */
int rt_range_resume(rt_range *r, const uint8_t *pos, size_t n, bool desc);

/* Clips tuple range r to index partition p and writes index-local keys
 * for index_id into lo/hi (appended; hi left empty when unbounded, which
 * I_RANGE reads as "to the end of this index"). Returns 1 when the clip is
 * non-empty, 0 when empty, or -SX_ENOMEM. */
int rt_range_clip(const rt_range *r, const cfg_part *p, uint32_t index_id, tup_bytes *lo,
                  tup_bytes *hi);

/* Frees r's bytes (accepts a zeroed range). */
void rt_range_free(rt_range *r);

#endif
