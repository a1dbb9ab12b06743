/*
 * internal.h — libshardex internals shared by client/lib/ (not installed).
 *
 * Internal names carry the `cl_` prefix; they are hidden from the shared
 * library's exports (-fvisibility=hidden plus exports.map).
 */
#ifndef SX_CLIENT_INTERNAL_H
#define SX_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <string.h>
#include <pthread.h>
#include <nng/nng.h>
#include "shardex.h"
#include "mp.h"
#include "msg.h"

#define CL_ERRMSG_LEN 512

/* One value held inside an item or list (owned by its container). */
typedef struct cl_val {
    sx_type type;
    int b;
    int64_t i;
    double d;
    char *s; /* SX_STR / SX_BIN: malloc'd copy, NUL-terminated */
    size_t len;
    sx_list *list; /* SX_LIST */
    sx_item *map;  /* SX_MAP */
} cl_val;

struct sx_item {
    size_t n, cap;
    char **names;
    cl_val *vals;
    /* A decoded item's names and top-level strings, in one block (one
     * allocation instead of one each); a name or value pointing into it
     * is not freed on its own. NULL for an item built by hand. */
    char *blob;
    size_t blob_n;
};

struct sx_list {
    size_t n, cap;
    cl_val *vals;
};

struct sx_client {
    int nrouters;
    char **urls;
    nng_socket *socks;
    struct net_peer **peers; /* per router: the asynchronous calls'
                              * coalescing (call_async.c) */
    int cur;                 /* router tried first */
    bool tls;                /* the routers are dialed over TLS */
    int timeout_ms;
    char errmsg[CL_ERRMSG_LEN];
    /* asynchronous operations (call_async.c); alock guards the rest */
    pthread_mutex_t alock;
    pthread_cond_t aidle; /* signalled when ainflight drops to 0 */
    bool alock_ok;
    struct sx_op *afree; /* idle operations, reused */
    struct sx_op *aall;  /* every operation ever made (for close) */
    size_t ainflight;
    int acur;                    /* router tried first (atomic access) */
    int alive_from, alive_k;     /* with several routers: the first connected
                                  * one from alive_from, as last checked */
    unsigned long long alive_at; /* when (ms, monotonic; 0: never) */
};

struct sx_result {
    size_t n;
    sx_item **items;
    char *token; /* base64url text or NULL */
    uint64_t *index_parts;
    size_t nindex_parts;
    uint64_t *fact_parts;
    size_t nfact_parts;
    uint64_t entries, stale;
    int covering;
};

/* ---- item.c ---- */
/* Appends the msgpack map of it to b. */
void cl_item_encode(const sx_item *it, mp_buf *b);
/* Encodes it (NULL: msgpack nil, e.g. a scan without a filter) into a
 * malloc'd msgpack span (*p, *n; the caller frees *p). Returns 0 or
 * SX_ENOMEM. */
int cl_item_bytes(const sx_item *it, uint8_t **p, size_t *n);
/* Encodes items[0..n) one after another into b (a batch's items share one
 * buffer: no allocation per item) and points out[k] at item k's bytes in
 * b, valid until b changes. Returns 0, SX_ENOMEM, or SX_EINVAL when
 * items[*bad] is NULL. */
int cl_items_encode(const sx_item *const *items, size_t n, mp_buf *b, mp_span *out, size_t *bad);
/* Appends a scalar/nested value view to b (caller-filled views: scalars;
 * library views: any). Returns 0 or SX_EINVAL. */
int cl_value_encode(const sx_value *v, mp_buf *b);
/* Decodes one msgpack map at raw into a new item (*out, sx_item_free).
 * Returns 0, SX_EPROTO, SX_ENOMEM. */
int cl_item_decode(const uint8_t *p, size_t n, sx_item **out);

/* ---- shared helpers ---- */
/* A view of C string s ("" for NULL); s must outlive the view. */
static inline mp_span cl_cstr_buf(const char *s)
{
    mp_span b = { (const uint8_t *)(s ? s : ""), s ? strlen(s) : 0 };
    return b;
}

/* ---- client.c ---- */
/* Encodes request t from req into a malloc'd frame (*wire, *n; the caller
 * frees *wire). Returns 0 or an sx_err (SX_ENOMEM, SX_EINVAL). */
int cl_req_encode(msg_type t, const void *req, uint8_t **wire, size_t *n);
/* What to add to the message of a call to router k that failed with rc:
 * when it timed out without any connection to the router, why that may be
 * (with TLS, a certificate refused either way); else "". Static text. */
const char *cl_conn_hint(sx_client *c, int k, int rc);
/* Writes into buf[n] the message of call t that failed on router k with
 * transport error rc after waiting ms (sync and async alike); unless retry
 * (the next router is tried), says what a write that timed out may have
 * done. */
void cl_call_msg(sx_client *c, int k, msg_type t, int rc, long long ms, bool retry, char *buf,
                 size_t n);
/* Whether router k has a live connection (true when nng cannot tell).
 * Reads nng's statistics: not free. */
bool cl_router_connected(sx_client *c, int k);
/* Closes socks[0..n) (those open), waiting at most 2 s: nng 1.5's
 * nng_close can hang, and the rest then finishes (or not) on a thread of
 * its own (close.c). */
void cl_close_sockets(const nng_socket *socks, int n);

/* Calls that change data: put, delete, a catalog change. A catalog change
 * that may have reached a router that is still connected is not sent to
 * another: that router may still run it late, after the caller's next
 * changes, which it would then undo. (It carries a request id, msg.h: rid,
 * so one retried after its router crashed is not made twice; but an id is
 * remembered for the last 256 changes only, and a caller who gives up
 * makes a new request.) A put or delete carries a deadline instead
 * (cl_stamp_deadline), past which no storage node applies it. */
bool cl_is_write(msg_type t);
/* A put's or delete's deadline_ms (msg.h) as the request is encoded: each
 * attempt overwrites it with cl_stamp_deadline. UINT64_MAX takes the 9
 * bytes (0xcf, then 8 big-endian) that any real time takes too. */
#define CL_DEADLINE_UNSET UINT64_MAX
/* For a PUT or DELETE frame wire[n] (encoded with its deadline last, set
 * to CL_DEADLINE_UNSET or an earlier stamp): sets the deadline to now plus
 * ms, in Unix milliseconds, the attempt's own. Other types are untouched.
 * False when the frame does not end with a deadline (it must not be sent:
 * its retries would not be protected). */
bool cl_stamp_deadline(msg_type t, uint8_t *wire, size_t n, long long ms);
/* Whether a call of type t that failed on router k with transport error
 * rc may be sent to the next router: on SX_ENET and SX_EUNAVAIL, and on
 * SX_ETIMEDOUT for a read, a put or a delete (its deadline has passed
 * when the client gives up, so the first attempt can no longer land after
 * the retry), or for a catalog change when router k's connection is gone.
 * (An SX_EUNAVAIL reply is retried elsewhere for reads only.) */
bool cl_may_failover(sx_client *c, int k, msg_type t, int rc);
/* Sets c's error message (printf style) and returns err. */
int cl_fail(sx_client *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Encodes request t from req, sends it to a router (failing over), decodes
 * the reply of type t into rep (release with msg_free_rep) and keeps the
 * frame in *frame (borrowed views in rep point into it; free() it after
 * msg_free_rep). extra_ms is added to the call timeout. Returns 0 or an
 * sx_err with c's message set. */
int cl_call(sx_client *c, msg_type t, const void *req, void *rep, uint8_t **frame, int extra_ms);

/* ---- asynchronous calls (call_async.c) ---- */
/* Prepares c's async state (mutex, condition). Returns 0 or SX_ENOMEM. */
int cl_async_init(sx_client *c);
/* Waits for every operation in flight, then frees the pool. Called by
 * sx_client_close before the sockets close. */
void cl_async_fini(sx_client *c);
/* Opens c's per-router peers (after the sockets are dialed). Returns 0
 * or an sx_err; cl_async_fini closes what was opened. */
int cl_async_peers(sx_client *c);

/* ---- query helpers (query.c), shared with query_async.c ---- */
/* What a query adds to its call's timeout: the wait a strong query may
 * spend in the router (its timeout_ms, 5 s when 0, at most the router's
 * 60 s), else 0. */
int cl_query_wait_ms(const sx_query_opts *o);
/* Fills a QUERY request from options; on failure c's message is set.
 * The caller frees req->eq.p, from.p, to.p, attrs.v and *tok. */
int cl_query_req_fill(sx_client *c, const sx_query_opts *o, msg_QUERY_req *req, uint8_t **tok);
/* Builds a result (*out, sx_result_free) from a page of raw items and a
 * token. Returns 0, SX_EPROTO, SX_ENOMEM. */
int cl_result_make(const msg_spans *items, mp_span token, sx_result **out);
/* Copies a u64 list into a malloc'd array (*out, *n). */
int cl_copy_u64s(const msg_u64s *in, uint64_t **out, size_t *n);

/* ---- base64 helpers (query.c) ---- */
/* Returns a malloc'd base64url text for bytes, or NULL. */
char *cl_b64_encode(const uint8_t *p, size_t n);
/* Decodes base64url text into a malloc'd buffer. Returns 0, SX_ETOKEN,
 * SX_ENOMEM. */
int cl_b64_decode(const char *s, uint8_t **out, size_t *n);

/* ---- status.c ---- */
/* Appends the JSON form of one msgpack value (read from cur) to a growable
 * string. Returns 0, SX_EPROTO, SX_ENOMEM. */
typedef struct cl_str {
    char *p;
    size_t n, cap;
    bool oom;
} cl_str;
void cl_str_add(cl_str *s, const char *p, size_t n);
int cl_json_from_mp(mp_cur *cur, cl_str *out, int depth);

#endif
