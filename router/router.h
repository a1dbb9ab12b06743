/*
 * router.h — what the parts of shardex-router share: the router state (the
 * cluster map, one link peer per node, the catalog cache), the error
 * context every handler fills, the RPC helpers (conns.c), catalog lookups
 * (catalog.c) and the per-message handlers (one file per concept).
 *
 * Threading: a router is built once by rt_new and then only read; every
 * handler may run concurrently on the server's worker threads. Link peers,
 * the catalog cache and the leader cache are thread-safe; nothing else is
 * mutated after start-up.
 */
#ifndef SX_ROUTER_H
#define SX_ROUTER_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <pthread.h>
#include <nng/nng.h>

#include "catalog.h"
#include "catalog_cache.h"
#include "net.h"
#include "config.h"
#include "msg.h"
#include "mp.h"
#include "tuple.h"
#include "serve.h"
#include "leader.h"

#define RT_ERRLEN 256
/* Items in one QUERY/SCAN reply stop growing past this many bytes (the
 * frame limit is SX_MAX_FRAME, 16 MiB; one item is at most 400 KiB): the
 * page then ends early with a token. */
#define RT_REPLY_BYTES (8u * 1024u * 1024u)

/* The router. Immutable after rt_new (see the file comment). */
typedef struct router {
    const cfg_cluster *cfg;       /* borrowed; outlives the router */
    int self;                     /* this router's index in cfg->nodes */
    net_peer **peers;             /* per cfg node: its link; every call goes through it */
    bool *dialed;                 /* per cfg node: has a link (not routers) */
    _Atomic uint64_t *down_until; /* per cfg node: found unconnected; calls
                                   * fail at once until then (monotonic ms) */
    catcache *cc;
    rt_leaders leaders; /* per storage and index partition: the replica
                         * believed to lead it, and what calls saw of each
                         * node (leader.h); atomics, written by any call */
    int timeout_ms;     /* per inter-node call */
    /* the catalog refresher thread (refresh.c); stop/cv guarded by mu */
    pthread_t refresher;
    bool refresher_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    atomic_bool stopping; /* rt_serve_stop began: long waits give up */
    /* counters for STATUS (relaxed atomics) */
    atomic_ullong nreq, nerr;
    /* wcomb.c: PUTs answered by the combined path, the S_WRITEs that
     * carried them, and PUTs handed back to the handler after one failed */
    atomic_ullong comb_puts, comb_writes, comb_reruns;
} router;

/* A handler's error: the code it returns plus a one-line reason. */
typedef struct rt_err {
    char msg[RT_ERRLEN];
} rt_err;

/* Formats a reason into e and returns code (so `return rt_errf(...)`). */
int rt_errf(rt_err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Formats the reason for an SX_EKEY from item_primary_key into e and
 * returns SX_EKEY. what names the object ("item 3", "key"); enc_len is the
 * encoded length item_primary_key reached (too long when > SX_MAX_KEY). */
int rt_key_errf(rt_err *e, const cat_table *t, size_t enc_len, const char *what);

/* ---- router.c: life cycle and dispatch ---- */

/* Builds a router for node `self` of cfg: dials every storage and index
 * node and creates the catalog cache (no network round trip yet). On
 * success *out is owned by the caller (rt_free). Returns 0, SX_ENOMEM,
 * SX_ENET. */
int rt_new(const cfg_cluster *cfg, int self, router **out);

/* Closes sockets, frees the cache and the router; accepts NULL. */
void rt_free(router *rt);

/* ---- serve.c: a router serving its clients: see serve.h ---- */

/* net_handler: decodes a client frame, runs its handler and appends the
 * reply (or an error reply) to out. Never aborts on input. Thread-safe. */
void rt_handle(void *arg, const uint8_t *req, size_t n, mp_buf *out);

/* ---- refresh.c: keeps the cached catalog fresh ---- */

/* Starts a thread that refreshes the catalog cache about every second (so
 * dropped indexes and finished backfills are seen without a miss), off
 * the request path. Returns 0 or SX_ENOMEM. */
int rt_refresher_start(router *rt);

/* Stops and joins the thread; safe when it never started. */
void rt_refresher_stop(router *rt);

/* ---- conns.c: calls to storage and index nodes ---- */

/* One call of a fan-out. Fill node (or part), type and req and point rep
 * at a zeroed reply struct of that type; rt_rpc_run fills the rest.
 *
 * A call for a storage or index partition sets part instead of node:
 * rt_rpc_run sends it to the partition's cached leader and, for a partition
 * of several replicas, walks its replicas (leader.h: each attempt bounded,
 * a stalled replica passed over) until one serves it or the call's time is
 * spent; node then names the replica that gave the result. A partition of
 * one replica gets one attempt at part->node, for the call's whole time. */
typedef struct rt_rpc {
    int node;             /* in: index into cfg->nodes (set from part when
                           * part is set); out: the node that answered */
    const cfg_part *part; /* in, optional: the partition (an element of
                           * cfg->storage or cfg->index) the call is for */
    msg_type type;        /* in */
    const void *req;      /* in: request struct (msg_<type>_req) */
    void *rep;            /* in: zeroed msg_<type>_rep to fill */
    int bound_ms;         /* in, optional (a call not walked): > 0, its one
                           * attempt waits at most this long, and fails at
                           * once, unsent, on a connection that drops or is
                           * down (a call whose failure only costs a
                           * shortcut, or that is asked elsewhere too) */
    int err;              /* out: 0, the peer's code, or a network code */
    char msg[RT_ERRLEN];  /* out: reason when err != 0 */
    uint8_t *frame;       /* out: reply bytes that rep borrows from */
    uint64_t hint;        /* out: an SX_ENOTLEADER reply's leader hint (the
                           * node's config "id", 0: none) */
    rt_lhow how;          /* out: how the last attempt ended (leader.h) */
    bool down;            /* out: nothing was sent (no connection, or it
                           * dropped or stayed busy before the call left):
                           * how == RT_LH_UNSENT */
    bool no_leader;       /* out: the walk ran out of time; msg says which
                           * replicas were tried (rt_lw_giveup) */
    /* rt_rpc_run's own, per attempt */
    int attempt_ms;   /* how long it may wait */
    bool fail_unsent; /* it asks its link whether it was sent */
} rt_rpc;

/* True when node i has a live connection, waiting briefly (a little over
 * the dialer's reconnect interval) for one when there is none, so a call
 * to a node that is down fails fast instead of at its timeout; a node
 * found down is then reported down at once for about a second (unless it
 * reconnects). Thread-safe. */
bool rt_conn_up(router *rt, int i);

/* Runs every call concurrently and waits for all, within rt->timeout_ms:
 * a call for a replicated partition (part set) may take several attempts
 * within that time (see rt_rpc), the others one. Every attempt's outcome
 * is recorded in the leader cache (rt_leader_seen). Returns 0 when the
 * calls ran (look at each err), SX_ENOMEM otherwise. Each call must later
 * be released with rt_rpc_release, whatever happened. Thread-safe. */
int rt_rpc_run(router *rt, rt_rpc *calls, int n);

/* Same within timeout_ms (e.g. a deadline's remainder). */
int rt_rpc_run_ms(router *rt, rt_rpc *calls, int n, int timeout_ms);

/* Monotonic clock in milliseconds. */
uint64_t rt_now_ms(void);

/* Frees a call's decoded lists and reply frame; safe to call twice. */
void rt_rpc_release(rt_rpc *calls, int n);

/* Copies call c's failure into e as "<role> node NAME: reason" (a walk
 * that ran out of time: its own message, rt_lw_giveup's) and returns its
 * code. */
int rt_rpc_fail(const router *rt, const rt_rpc *c, rt_err *e);

/* Sends raw request bytes to node and appends the raw reply to out.
 * Returns 0 or a network error (reason in e). */
int rt_forward(router *rt, int node, const uint8_t *req, size_t n, mp_buf *out, rt_err *e);

/* Role name of node i ("storage", "index", "router"). */
const char *rt_role_name(int role);

/* ---- catalog.c: cached catalog lookups ---- */

/* Finds table `name` in the newest cached catalog, refreshing the cache
 * once when it is not there. On success *cat and *t are borrowed (valid
 * for the router's life). Returns 0, SX_ENOTABLE, or a fetch error. */
int rt_table(router *rt, mp_span name, const cat_catalog **cat, const cat_table **t, rt_err *e);

/* Same for table + index (refreshing once when either is missing).
 * Returns 0, SX_ENOTABLE, SX_ENOINDEX, or a fetch error. */
int rt_index(router *rt, mp_span table, mp_span index, const cat_catalog **cat, const cat_table **t,
             const cat_index **ix, rt_err *e);

/* ---- write.c / wcomb.c: PUTs ---- */

/* Checks item i (it) of a PUT for table t (size, a valid item, its key)
 * and sets *g to the index of the storage partition owning it. Returns 0,
 * or an sx_err with the reason, naming the item by i, in e. */
int rt_put_place(router *rt, const cat_table *t, const mp_span *it, uint32_t i, int *g, rt_err *e);

/* The error of a PUT whose cnt items for storage partition index g, the
 * first at input position first, failed in call c: "item F (with N
 * item(s) for partition P) not written: <c's failure>". Returns c->err. */
int rt_put_unwritten(const router *rt, int g, const rt_rpc *c, long first, uint32_t cnt, rt_err *e);

/* The error of a PUT whose item at input position pos the storage node of
 * partition index g (node index node) refused before writing with err and
 * text why (its "operation K: " prefix stripped): "item POS: WHY (storage
 * node N, partition P)". Returns err. */
int rt_put_refused(const router *rt, int g, int node, int err, long pos, const char *why,
                   rt_err *e);

/* The deadline_ms (msg.h) for an S_WRITE sent now: the client's deadline
 * (0: none), capped at this router's own give-up time for the call (now
 * plus rt->timeout_ms), so that a write the router reported failed after
 * its call timed out cannot be applied later either, whatever the client
 * (one that sends no deadline: 0). */
uint64_t rt_write_deadline(const router *rt, uint64_t client_deadline);

/* Parses a storage node's "operation K: WHY" error text: true, with *k
 * and *why (pointing into msg), when msg has that form. */
bool rt_op_error(const char *msg, unsigned long *k, const char **why);

/* The router's net_defer_fn: takes a PUT on the plain path (see wcomb.c)
 * into this thread's batch; declines anything else. */
bool rt_defer(void *arg, msg_type t, const uint8_t *p, size_t n, net_reply *r);

/* The router's net_defer_flush_fn: sends this thread's batch, one S_WRITE
 * per storage partition; the PUTs are answered when the last returns. */
void rt_defer_flush(void *arg);

/* Appends the fact-local key h (8 BE) | pk of item p..n of table t to key.
 * Returns 0 or an sx_err (SX_EKEY, SX_ENOMEM, ...). */
int rt_item_key(const router *rt, const cat_table *t, const uint8_t *p, size_t n, tup_bytes *key);

/* ---- handlers: each decodes frame p..n, and on success appends its reply
 * to out and returns 0; on failure returns an sx_err with the reason in e
 * (the dispatcher then encodes the error reply). ---- */
int rt_h_ping(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_table_create(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_index_create(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_index_drop(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_index_list(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_catalog(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_put(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_get(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_delete(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_query(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_scan(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);
int rt_h_status(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e);

#endif
