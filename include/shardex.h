/*
 * shardex.h — the one public header of libshardex, the shardex client.
 *
 * Anything not declared here (or in sx_errors.h, which it includes) is not
 * part of the library's interface.
 *
 * Conventions
 *  - Every function returns an sx_err code (0 == SX_OK) unless it says
 *    otherwise. On failure, sx_client_errmsg() holds a one-line reason (the
 *    server's own message when the error came from a server).
 *  - Constructors take an out-parameter; destructors return void and accept
 *    NULL.
 *  - Memory the library hands out says who frees it and with what; borrowed
 *    views say until when they stay valid.
 *  - Threading: an sx_client may be used by one thread at a time (its last
 *    error message is per client). Use one client per thread for
 *    concurrency. Items and results are plain data, not shared state.
 *
 * Values: null, bool, int64, double, UTF-8 string, binary; lists and maps as
 * non-key values. Items are maps from attribute names to values; build them
 * with sx_item_new + sx_item_set_*, read them with sx_item_get / the
 * attribute iteration below.
 */
#ifndef SHARDEX_H
#define SHARDEX_H

#include <stddef.h>
#include <stdint.h>
#include "sx_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SX_BUILDING_LIBRARY)
#define SX_API __attribute__((visibility("default")))
#else
#define SX_API
#endif

/* ------------------------------------------------------------------ */
/* Opaque handles                                                       */
/* ------------------------------------------------------------------ */

typedef struct sx_client sx_client; /* a connection to one or more routers */
typedef struct sx_item sx_item;     /* an item: a map of attributes (also a nested map) */
typedef struct sx_list sx_list;     /* a list value (nested in an item or standalone) */
typedef struct sx_result sx_result; /* a page of query or scan results */

/* ------------------------------------------------------------------ */
/* Values                                                               */
/* ------------------------------------------------------------------ */

typedef enum sx_type {
    SX_NULL = 0,
    SX_BOOL = 1,
    SX_INT = 2,
    SX_DOUBLE = 3,
    SX_STR = 4,
    SX_BIN = 5,
    SX_LIST = 6,
    SX_MAP = 7
} sx_type;

/* A borrowed view of one value. When the library fills an sx_value (from an
 * item, list or result) every pointer in it borrows from the container and
 * stays valid until that container is modified or freed. When the caller
 * fills one (query bounds, list appends) only scalar kinds are accepted and
 * the library copies what it needs.
 *   SX_BOOL   b
 *   SX_INT    i
 *   SX_DOUBLE d
 *   SX_STR    s (NUL-terminated; the string may itself hold NULs: use len), len
 *   SX_BIN    s (bytes), len
 *   SX_LIST   list, len = element count
 *   SX_MAP    map,  len = attribute count (read it with the sx_item_* readers) */
typedef struct sx_value {
    sx_type type;
    int b;
    int64_t i;
    double d;
    const char *s;
    size_t len;
    const sx_list *list;
    const sx_item *map;
} sx_value;

/* Convenience constructors for caller-filled scalar views. sx_val_str keeps
 * a pointer to s (borrowed; no copy is made until the view is used). */
SX_API sx_value sx_val_null(void);
SX_API sx_value sx_val_bool(int b);
SX_API sx_value sx_val_int(int64_t i);
SX_API sx_value sx_val_double(double d);
SX_API sx_value sx_val_str(const char *s);
SX_API sx_value sx_val_strn(const char *s, size_t len);
SX_API sx_value sx_val_bin(const void *p, size_t len);

/* ------------------------------------------------------------------ */
/* Items                                                                */
/* ------------------------------------------------------------------ */

/* Creates an empty item. Returns NULL when out of memory. Free with
 * sx_item_free. */
SX_API sx_item *sx_item_new(void);

/* Frees an item and everything nested in it. Accepts NULL. Never call it on
 * a nested map obtained from another item (that one belongs to its parent). */
SX_API void sx_item_free(sx_item *it);

/* Deep copy; NULL when out of memory. Caller frees with sx_item_free. */
SX_API sx_item *sx_item_clone(const sx_item *it);

/* Setters: add attribute name (copied) or replace its value. Strings and
 * binaries are copied. Return 0, SX_EINVAL (NULL or empty name), SX_ENOMEM.
 * Replacing an attribute invalidates views previously read from it. */
SX_API int sx_item_set_null(sx_item *it, const char *name);
SX_API int sx_item_set_bool(sx_item *it, const char *name, int v);
SX_API int sx_item_set_int(sx_item *it, const char *name, int64_t v);
SX_API int sx_item_set_double(sx_item *it, const char *name, double v);
SX_API int sx_item_set_str(sx_item *it, const char *name, const char *s);
SX_API int sx_item_set_strn(sx_item *it, const char *name, const char *s, size_t len);
SX_API int sx_item_set_bin(sx_item *it, const char *name, const void *p, size_t len);
/* Sets a scalar from a view (SX_NULL..SX_BIN; lists/maps are deep-copied). */
SX_API int sx_item_set_value(sx_item *it, const char *name, const sx_value *v);
/* Sets name to a new empty nested map / list and hands back a borrowed
 * pointer to fill it (owned by it; valid until the attribute is replaced,
 * removed, or it is freed). */
SX_API int sx_item_set_map(sx_item *it, const char *name, sx_item **map);
SX_API int sx_item_set_list(sx_item *it, const char *name, sx_list **list);

/* Removes an attribute. Returns 0 or SX_ENOTFOUND. */
SX_API int sx_item_remove(sx_item *it, const char *name);

/* Reads attribute name into *v (a borrowed view, see sx_value). Returns 0,
 * SX_ENOTFOUND, or SX_EINVAL. */
SX_API int sx_item_get(const sx_item *it, const char *name, sx_value *v);

/* Typed readers: return 0, SX_ENOTFOUND, or SX_EINVAL when the attribute has
 * another type. sx_item_get_str's *s borrows from the item. */
SX_API int sx_item_get_int(const sx_item *it, const char *name, int64_t *v);
SX_API int sx_item_get_double(const sx_item *it, const char *name, double *v);
SX_API int sx_item_get_bool(const sx_item *it, const char *name, int *v);
SX_API int sx_item_get_str(const sx_item *it, const char *name, const char **s, size_t *len);

/* Attribute iteration, in the item's order (insertion order for built items,
 * wire order for received ones): i in [0, sx_item_count). *name and *v
 * borrow from the item. Returns 0 or SX_EINVAL (i out of range). */
SX_API size_t sx_item_count(const sx_item *it);
SX_API int sx_item_attr(const sx_item *it, size_t i, const char **name, sx_value *v);

/* ------------------------------------------------------------------ */
/* Lists                                                                */
/* ------------------------------------------------------------------ */

/* A standalone list (e.g. to build values to nest elsewhere). Free with
 * sx_list_free; lists nested in items belong to the item. */
SX_API sx_list *sx_list_new(void);
SX_API void sx_list_free(sx_list *l);

/* Appends a copy of a scalar or (deep copy) list/map value. Returns 0,
 * SX_EINVAL, SX_ENOMEM. */
SX_API int sx_list_append(sx_list *l, const sx_value *v);
/* Appends a new empty nested map / list and hands back a borrowed pointer
 * (owned by l) to fill it. */
SX_API int sx_list_append_map(sx_list *l, sx_item **map);
SX_API int sx_list_append_list(sx_list *l, sx_list **list);

SX_API size_t sx_list_len(const sx_list *l);
/* Reads element i as a borrowed view. Returns 0 or SX_EINVAL. */
SX_API int sx_list_at(const sx_list *l, size_t i, sx_value *v);

/* ------------------------------------------------------------------ */
/* Client                                                               */
/* ------------------------------------------------------------------ */

/* Connects to one or more routers: urls is a comma-separated list of nng
 * URLs ("tcp://127.0.0.1:7100,tcp://127.0.0.1:7200"). Dialing happens in the
 * background (and reconnects by itself), so an unreachable router is
 * detected at a call. Each call goes to the router that answered last;
 * with several routers, those with a live connection are tried before the
 * others (a call to an unconnected router only fails at its timeout).
 * Failover: a call is retried on the next router, until each was tried
 * once, when its router cannot be reached (SX_ENET); a read also when the
 * router answers SX_EUNAVAIL (e.g. it is stopping); a read, a put or a
 * delete also when it times out (SX_ETIMEDOUT); a catalog change (table or
 * index create, index drop) after a timeout only when its router's
 * connection is gone (it crashed, or the network failed). A write is never
 * retried after an SX_EUNAVAIL answer (the router's link to a node may have
 * broken after the write was applied).
 * Deadlines: each attempt of a put or delete carries a deadline, its send
 * time plus the timeout (in Unix time); the router caps it at its own
 * call's timeout; and a storage node refuses a write whose deadline is
 * within the cluster's max_clock_skew_ms (default 100 ms) of its clock,
 * with SX_EDEADLINE, nothing of it written there. So a put or delete that
 * timed out may or may not have been applied (and may become visible a
 * moment after the call returned), but it is never ordered after a write
 * made once the call has returned: it cannot undo the caller's next
 * writes. That holds while every host's clock, the clients' included, is
 * within the skew of the others, and while every router and storage node
 * is of this version (upgrade storage nodes, then routers, then clients).
 * A write has its timeout less the skew to reach its storage node: a
 * timeout at or below the skew fails every write. A retried
 * put or delete may already have been applied through the router that
 * failed: a put then stores the same item again, a delete may report
 * SX_ENOTFOUND. A catalog change has no deadline: one that timed out on a
 * router still connected returns SX_ETIMEDOUT and may yet be made later.
 * A retried catalog change is not made twice: each call carries a request
 * id, and the catalog node answers a change it already made under that id
 * with the version it made (it remembers the last 256 changes' ids). A
 * new call after a failed one is a new request: SX_EEXIST (SX_ENOINDEX
 * for a drop) then tells that the first was made.
 * On success *out is owned by the caller
 * (sx_client_close). Returns 0, SX_EINVAL (empty list), SX_ENET (bad URL),
 * SX_ENOMEM. */
SX_API int sx_client_open(const char *urls, sx_client **out);

/* TLS to routers whose URLs are tls+tcp:// (a cluster whose config has
 * "client_tls"): paths of PEM files. ca_file: the CA that signed the
 * routers' certificates (and the clients'); a router whose certificate it
 * did not sign, or whose certificate does not name the host dialed (or
 * server_name), gets no connection. cert_file, key_file: this client's
 * certificate and its unencrypted private key: a router accepts only
 * clients whose certificate its CA signed, so without them every call
 * times out. server_name: the name to check the routers' certificates
 * against, NULL for the host of each URL. */
typedef struct sx_client_tls {
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    const char *server_name;
} sx_client_tls;

/* As sx_client_open, over TLS when tls is not NULL: then every URL must be
 * tls+tcp://, and a tls+tcp:// URL needs tls. The files are read here.
 * Returns as sx_client_open, and SX_EINVAL for an unreadable or unusable
 * file or a URL of the wrong kind, with the reason in err[errlen] (err
 * may be NULL). */
SX_API int sx_client_open_tls(const char *urls, const sx_client_tls *tls, sx_client **out,
                              char *err, size_t errlen);

/* Closes every connection and frees the client. Accepts NULL. Returns
 * within about 2 s once the client's operations have ended (an operation
 * in flight is waited for, up to its timeout): nng 1.5 can hang closing a
 * socket after a call timed out, and such a socket is then left to close
 * in the background (its memory is released only if it ever does). */
SX_API void sx_client_close(sx_client *c);

/* The last failed call's one-line message (never NULL; "" after success).
 * Borrowed: valid until the next call on c. */
SX_API const char *sx_client_errmsg(const sx_client *c);

/* Per-call network timeout in milliseconds (default 10000). Queries add
 * their own timeout_ms to it. */
SX_API void sx_client_set_timeout(sx_client *c, int timeout_ms);

/* Frees memory the library returned with "free with sx_free". Accepts NULL. */
SX_API void sx_free(void *p);

/* ------------------------------------------------------------------ */
/* Tables and indexes                                                   */
/* ------------------------------------------------------------------ */

/* Creates table with partition key attribute pk and optional sort key sk
 * (NULL for none). Returns 0, SX_EEXIST, SX_EINVAL, or a transport error. */
SX_API int sx_table_create(sx_client *c, const char *table, const char *pk, const char *sk);

/* Reads table's key attributes from the router's catalog: *pk the
 * partition key's name, *sk the sort key's or NULL when the table has none
 * (both free with sx_free). Returns 0, SX_ENOTABLE, or a transport error. */
SX_API int sx_table_key(sx_client *c, const char *table, char **pk, char **sk);

typedef enum sx_projection {
    SX_PROJ_KEYS = 0, /* keys and indexed attributes only */
    SX_PROJ_ALL = 1,  /* the whole item */
    SX_PROJ_LIST = 2  /* keys, indexed attributes and the listed ones */
} sx_projection;

/* Creates index on table over attrs[0..nattrs) (composite, in order) with the
 * given projection (proj_attrs used only for SX_PROJ_LIST). The index starts
 * "building" and becomes "ready" once existing items are indexed; a query on
 * a building index fails with SX_ENOTREADY. Returns 0, SX_ENOTABLE,
 * SX_EEXIST, SX_EINVAL, or a transport error. */
SX_API int sx_index_create(sx_client *c, const char *table, const char *index,
                           const char *const *attrs, size_t nattrs, sx_projection proj,
                           const char *const *proj_attrs, size_t nproj);

/* Drops an index: it stops answering at once, and the index nodes delete its
 * entries in the background (within seconds; a node that is down does so
 * once it is back). The name may then be reused by a new index. Returns 0,
 * SX_ENOTABLE, SX_ENOINDEX, or a transport error. */
SX_API int sx_index_drop(sx_client *c, const char *table, const char *index);

/* One index as sx_index_list describes it. */
typedef struct sx_index_info {
    char *name;
    char **attrs;
    size_t nattrs;
    sx_projection proj;
    char **proj_attrs;
    size_t nproj;
    int ready; /* 1 ready, 0 building */
} sx_index_info;

/* Lists table's indexes. On success *out is an array of *n entries owned by
 * the caller: free with sx_index_list_free(*out, *n). */
SX_API int sx_index_list(sx_client *c, const char *table, sx_index_info **out, size_t *n);
SX_API void sx_index_list_free(sx_index_info *list, size_t n);

/* ------------------------------------------------------------------ */
/* Items: put, get, delete                                              */
/* ------------------------------------------------------------------ */

/* Stores item (it must hold the table's key attributes as scalars). The
 * item stays the caller's. *version (may be NULL) receives the version the
 * store assigned. Returns 0, SX_ENOTABLE, SX_EKEY, SX_ETOOBIG, ...
 * SX_EIO (here and from sx_delete): the storage node met a disk error
 * while writing; the write may or may not have been made durable (a
 * failed sync can leave it in the log), which is known once that node
 * has restarted: it refuses writes until then (reads go on). */
SX_API int sx_put(sx_client *c, const char *table, const sx_item *item, uint64_t *version);

/* Stores n items in one request (they may land in different partitions; the
 * call succeeds only when all were stored). versions (may be NULL) is an
 * array of n the caller provides. On failure some items may have been
 * stored; putting them again is harmless. */
SX_API int sx_put_batch(sx_client *c, const char *table, const sx_item *const *items, size_t n,
                        uint64_t *versions);

/* Reads the item whose key attributes are those of key (extra attributes of
 * key are ignored). On success *out is owned by the caller (sx_item_free).
 * Returns 0, SX_ENOTFOUND, SX_ENOTABLE, SX_EKEY, ... */
SX_API int sx_get(sx_client *c, const char *table, const sx_item *key, sx_item **out);

/* Deletes the item with key's key attributes. Returns 0, SX_ENOTFOUND
 * when there was no such item (nothing changed), SX_ENOTABLE, SX_EKEY, ... */
SX_API int sx_delete(sx_client *c, const char *table, const sx_item *key);

/* ------------------------------------------------------------------ */
/* Queries and scans                                                    */
/* ------------------------------------------------------------------ */

typedef enum sx_consistency {
    SX_CONSISTENCY_DEFAULT = 0, /* verified */
    SX_EVENTUAL = 1,            /* the index alone; may be stale */
    SX_VERIFIED = 2,            /* every hit checked against its item; stale hits dropped
                                   (or, when the index projects what is asked and has
                                   applied every write up to each partition's head at
                                   query time, answered from the index: explain then
                                   shows covering) */
    SX_STRONG = 3               /* wait for the index to cover every write acknowledged
                                   before the query began, then verified */
} sx_consistency;

/* Query options; zero-initialise, then fill what you need. Every pointer is
 * borrowed for the duration of the call only.
 *  eq, neq       equality on the first neq indexed attributes (for the
 *                "primary" index: the partition key value)
 *  from, to      range on the next attribute, both inclusive; NULL = open
 *  prefix        string prefix on the next attribute (instead of from/to)
 *  limit         at most this many items in this page; 0 = the server's page
 *  desc          non-zero: descending index order
 *  attrs, nattrs return only the keys and these attributes (0 = whole items)
 *  consistency   see sx_consistency
 *  token         continuation token from sx_result_token, or NULL
 *  timeout_ms    bound on a strong query's wait; 0 = server default (5 s);
 *                at most 60 s (the router's bound) */
typedef struct sx_query_opts {
    const sx_value *eq;
    size_t neq;
    const sx_value *from;
    const sx_value *to;
    const char *prefix;
    uint64_t limit;
    int desc;
    const char *const *attrs;
    size_t nattrs;
    sx_consistency consistency;
    const char *token;
    uint32_t timeout_ms;
} sx_query_opts;

/* What a query did (from the router). */
typedef struct sx_explain {
    const uint64_t *index_parts; /* index partition ids touched */
    size_t nindex_parts;
    const uint64_t *fact_parts; /* storage partition ids touched */
    size_t nfact_parts;
    uint64_t entries; /* index entries read */
    uint64_t stale;   /* stale hits dropped */
    int covering;     /* answered from the index projection alone */
} sx_explain;

/* Runs one page of a query on index of table (index "primary" queries the
 * table by key: eq = [partition key], range/prefix on the sort key). On
 * success *out is owned by the caller (sx_result_free). Follow
 * sx_result_token to get further pages. Returns 0, SX_ENOTABLE,
 * SX_ENOINDEX, SX_ENOTREADY, SX_ETOKEN, SX_ETIMEDOUT (strong wait), ... */
SX_API int sx_query(sx_client *c, const char *table, const char *index, const sx_query_opts *opts,
                    sx_result **out);

/* Scans a table (all partitions) keeping items whose attributes equal every
 * attribute of where (NULL = all). A page holds at most limit items (0 = the
 * server's page); it may hold fewer, even none, and still carry a token:
 * each storage partition answers its share after a time slice or byte
 * budget, with what it found so far. Follow sx_result_token until it is
 * NULL to read the whole table. token as for queries. *out as for
 * sx_query. */
SX_API int sx_scan(sx_client *c, const char *table, const sx_item *where, uint64_t limit,
                   const char *token, sx_result **out);

/* Result accessors. Items borrow from r (valid until sx_result_free). */
SX_API size_t sx_result_count(const sx_result *r);
SX_API const sx_item *sx_result_item(const sx_result *r, size_t i);
/* Detaches item i: the caller then owns it (sx_item_free) and the result
 * holds NULL in its place. */
SX_API sx_item *sx_result_take(sx_result *r, size_t i);
/* The continuation token (a NUL-terminated opaque string, borrowed from r),
 * or NULL when there are no more pages. */
SX_API const char *sx_result_token(const sx_result *r);
/* The query's explain figures (pointers borrow from r). All zero for scans. */
SX_API void sx_result_explain(const sx_result *r, sx_explain *out);
SX_API void sx_result_free(sx_result *r);

/* ------------------------------------------------------------------ */
/* Status                                                               */
/* ------------------------------------------------------------------ */

/* The cluster's status as one JSON text: {"nodes":[<node status>...]}, each
 * node status as the router reports it (msgpack turned into JSON; binaries
 * as {"$bin":"<base64>"}). On success *json is owned by the caller: free
 * with sx_free. */
SX_API int sx_status(sx_client *c, char **json);

/* ------------------------------------------------------------------ */
/* Asynchronous calls                                                   */
/* ------------------------------------------------------------------ */

/* The asynchronous API puts many requests in flight on one client (one
 * connection per router): each call encodes its request, starts it on its
 * own nng context and returns at once; when the reply (or an error)
 * arrives, the callback runs on one of nng's threads with the completed
 * operation.
 *
 *  - Threading: the *_async calls may be made from any thread at the same
 *    time, including from inside a callback (to chain requests). Callbacks
 *    of different operations may run concurrently on different threads;
 *    a callback must not block for long (it holds an nng worker).
 *    Synchronous calls on the same client stay "one thread at a time" and
 *    may run beside async operations. Async calls never touch
 *    sx_client_errmsg: each operation carries its own status and message.
 *  - Arguments are copied or encoded before the call returns (items,
 *    options, token), so they may be freed right after it.
 *  - Return value: 0 when the operation was started (its callback will run
 *    exactly once), or an error (SX_EINVAL, SX_ENOMEM, SX_ETOOBIG, ...)
 *    when it was not (the callback will not run).
 *  - Failover: as for the synchronous calls (sx_client_open), each
 *    router at most once; an operation starts on a router with a live
 *    connection.
 *  - A callback usually runs on one of nng's threads; when a request
 *    cannot be sent at all (its connection just failed), the callback may
 *    run before the *_async call that started it returns, on the caller's
 *    thread: do not hold, around an *_async call, a lock the callback
 *    takes.
 *  - The sx_op is the library's: it is valid only inside the callback and
 *    freed when the callback returns; take what you keep (sx_op_take_*).
 *  - sx_client_close waits for every operation in flight (each is bounded
 *    by the client's timeout) before closing. */
typedef struct sx_op sx_op;

/* Completion callback: op is the finished operation, arg the caller's
 * pointer given at submission. */
typedef void (*sx_done_fn)(sx_op *op, void *arg);

/* sx_put / sx_put_batch / sx_get / sx_delete / sx_query / sx_scan, started
 * asynchronously; cb(op, arg) runs on completion (see above). */
SX_API int sx_put_async(sx_client *c, const char *table, const sx_item *item, sx_done_fn cb,
                        void *arg);
SX_API int sx_put_batch_async(sx_client *c, const char *table, const sx_item *const *items,
                              size_t n, sx_done_fn cb, void *arg);
SX_API int sx_get_async(sx_client *c, const char *table, const sx_item *key, sx_done_fn cb,
                        void *arg);
SX_API int sx_delete_async(sx_client *c, const char *table, const sx_item *key, sx_done_fn cb,
                           void *arg);
SX_API int sx_query_async(sx_client *c, const char *table, const char *index,
                          const sx_query_opts *opts, sx_done_fn cb, void *arg);
SX_API int sx_scan_async(sx_client *c, const char *table, const sx_item *where, uint64_t limit,
                         const char *token, sx_done_fn cb, void *arg);

/* Readers of a completed operation (valid inside its callback only). */
/* Its status: 0 or the sx_err the synchronous call would have returned
 * (e.g. SX_ENOTFOUND for a get or delete of an absent item). */
SX_API int sx_op_status(const sx_op *op);
/* Its one-line error message ("" on success); borrowed from op. */
SX_API const char *sx_op_errmsg(const sx_op *op);
/* Versions assigned to a put's items (sx_op_nversions of them) or to a
 * delete (one); i out of range gives 0. */
SX_API size_t sx_op_nversions(const sx_op *op);
SX_API uint64_t sx_op_version(const sx_op *op, size_t i);
/* A get's item: the caller then owns it (sx_item_free); NULL for other
 * operations, on failure, or when already taken. */
SX_API sx_item *sx_op_take_item(sx_op *op);
/* A query's or scan's page: the caller then owns it (sx_result_free);
 * NULL for other operations, on failure, or when already taken. */
SX_API sx_result *sx_op_take_result(sx_op *op);

/* Operations started on c whose callbacks have not yet returned. */
SX_API size_t sx_client_inflight(sx_client *c);

/* Waits until no asynchronous operation of c is in flight, or timeout_ms
 * passes (< 0: no bound). Returns 0, or SX_ETIMEDOUT. Must not be called
 * from a callback. */
SX_API int sx_client_wait(sx_client *c, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
