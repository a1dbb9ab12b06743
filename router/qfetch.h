/*
 * qfetch.h — turning one page of index entries into query results: under
 * `eventual` with a covering projection, the projections themselves;
 * otherwise the facts, fetched with one S_GET per storage partition in
 * parallel and merged back into index order, verified against the entry
 * (verified/strong) or only checked to exist (eventual).
 */
#ifndef SX_RT_QFETCH_H
#define SX_RT_QFETCH_H

#include "query.h"

/* Appends the results of page (already checked: parallel lists, keys of
 * qc->ix) to qc in index order, counting stale entries and touched fact
 * partitions, and stops once qc holds qc->limit results: *used is the
 * number of entries consumed (the rest are left for the next page).
 * Returns 0 or an sx_err with the reason in e. */
int rt_qfetch_page(rt_query *qc, const msg_I_RANGE_rep *page, bool covering, uint32_t *used,
                   rt_err *e);

#endif
