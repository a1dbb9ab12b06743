/*
 * query.h — what the parts of QUERY share: the per-request query state
 * (validated request, catalog entries, key range, accumulated results and
 * counters) and the two execution paths: the primary key (qprimary.c, one
 * fact partition) and secondary indexes (qindex.c, index partitions then
 * facts), plus the strong-read wait (strong.c).
 *
 * A rt_query lives on one worker's stack for one request; not shared.
 */
#ifndef SX_RT_QUERY_H
#define SX_RT_QUERY_H

#include <stdbool.h>
#include <stdint.h>
#include "range.h"
#include "router.h"

#define RT_QUERY_DEFAULT_LIMIT 100
#define RT_QUERY_MAX_LIMIT 10000
#define RT_STRONG_DEFAULT_MS 5000
#define RT_STRONG_MAX_MS 60000 /* a worker waits at most this long */

/* A small set of partition ids, in first-touched order. */
typedef struct rt_ids {
    uint32_t n, cap;
    uint64_t *v;
} rt_ids;

typedef struct rt_query {
    router *rt;
    const msg_QUERY_req *q;
    const cat_table *t;
    const cat_index *ix; /* NULL for the primary key */
    char **attrs;        /* q->attrs as C strings (NULL when none) */
    uint32_t nattrs;
    uint32_t limit;
    bool desc;
    rt_range range; /* the whole query's range (token binding) */
    rt_range cur;   /* what is left to read */
    /* results: items appended to acc, item i at [off[i], off[i+1]) */
    mp_buf acc;
    size_t *off;
    uint32_t nres, cap;
    tup_bytes last; /* last key consumed (token position) */
    bool exhausted;
    uint64_t entries, stale;
    bool covering;
    bool projectable; /* verified or strong, and the index
                       * projects every attribute asked for:
                       * fresh pages answer from the index */
    bool fetched;     /* some page read facts */
    rt_ids index_parts, fact_parts;
} rt_query;

/* Adds id to s unless present. Returns 0 or SX_ENOMEM. */
int rt_ids_add(rt_ids *s, uint64_t id);

/* Appends one result item (selected down to qc->attrs when given). The
 * item must be one whole msgpack value, as every element of a decoded
 * reply's RAWS list is (msg_decode_rep skipped over it, which checks its
 * form): it is copied as it is, not parsed again, unless selected. When
 * the results reach RT_REPLY_BYTES the page's limit shrinks to what it
 * holds. Returns 0, SX_EPROTO (an item to select from that is not a map),
 * SX_ENOMEM. */
int rt_q_add(rt_query *qc, const uint8_t *item, size_t n);

/* Records the last consumed key. Returns 0 or SX_ENOMEM. */
int rt_q_mark(rt_query *qc, const uint8_t *key, size_t n);

/* Runs a primary-key query: eq = [partition key value], cond on the sort
 * key, one fact partition via S_RANGE. Fills results; returns 0 or an
 * sx_err with the reason in e. */
int rt_q_primary(rt_query *qc, rt_err *e);

/* Builds the primary query's range into qc->range (before any token).
 * Returns 0 or an sx_err (reason in e). */
int rt_q_primary_range(rt_query *qc, rt_err *e);

/* Builds a secondary-index query's tuple range into qc->range. */
int rt_q_index_range(rt_query *qc, rt_err *e);

/* Runs a secondary-index query over qc->cur. Returns 0 or an sx_err. */
int rt_q_index(rt_query *qc, rt_err *e);

/* Fills calls[] (room for one per node) with an S_HEADS to every storage
 * node, replies into reps[]; returns how many. req is an empty request. A
 * node holding only partitions of several replicas is asked with a bounded
 * wait (RT_LW_READ_ATTEMPT_MS), and not at all while it is unanswered
 * (rt_leader_unanswered): the partitions it leads are then missing
 * (rt_heads_missing) unless another replica reports them. */
int rt_heads_calls(router *rt, const msg_S_HEADS_req *req, rt_rpc *calls, msg_S_HEADS_rep *reps);

/* Reads m finished S_HEADS calls into heads[k] and got[k] (for
 * cfg->storage[k]): a partition reported sets got[k] and raises heads[k]
 * to its head (the highest when several nodes report it; an earlier value
 * otherwise stays), and its reporter becomes its cached leader. A failed
 * call fails the heads (as rt_rpc_fail) when its node holds a partition of
 * one replica not in got yet, or no partition of several replicas; else
 * its partitions are only left to other nodes (rt_heads_missing). Returns
 * 0, that error, or SX_EPROTO (reason in e). */
int rt_heads_collect(router *rt, const rt_rpc *calls, const msg_S_HEADS_rep *reps, int m,
                     uint64_t *heads, bool *got, rt_err *e);

/* The index in cfg->storage of the first partition of several replicas
 * whose head is not in got (rt_heads_collect), or -1 when there is none:
 * heads without it must not be relied on. */
int rt_heads_missing(const router *rt, const bool *got);

/* Strong read: waits until every index partition in cfg->index[first ..
 * first+count) has applied, from every storage partition, everything that
 * partition had written when this call began. Returns 0, SX_ETIMEDOUT
 * (naming the lagging pair), SX_ENOTLEADER or SX_EUNAVAIL (a partition of
 * several replicas none of which reported its head as its leader within
 * timeout_ms, named), or a network error (reason in e). */
int rt_strong_wait(router *rt, int first, int count, uint64_t timeout_ms, rt_err *e);

#endif
