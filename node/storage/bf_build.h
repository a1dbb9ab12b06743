/*
 * bf_build.h — one index build (backfill) of a fact partition: steps 1–4 of
 * backfill.h (snapshot and tagging of later writes, scan into sorted runs,
 * their emission to the index partitions, the final records).
 */
#ifndef SX_BF_BUILD_H
#define SX_BF_BUILD_H

#include <stddef.h>
#include <stdint.h>
#include "catalog.h"

struct st_part;

/* Builds indexes ix[0..nix) of table t (all from cat, which must outlive
 * the call) for partition p in one scan, holding runs of at most run_max
 * bytes: under the write lock switches p's write catalog to cat, takes a
 * snapshot and starts tagging the facts written after it; scans the
 * snapshot into runs, sorts and emits each before gathering the next; then
 * commits the backfill records ('M' 'B' | index id) and remembers them in
 * p->bf. Stops early, recording nothing, when the node stops or an index
 * is dropped. Logs how it ended. Call from p's backfill thread only.
 * Returns 0 (finished or stopped) or an sx_err (SX_EIO, SX_ENOMEM, ...). */
int bf_build(struct st_part *p, const cat_catalog *cat, const cat_table *t, const cat_index **ix,
             uint32_t nix, size_t run_max);

#endif
