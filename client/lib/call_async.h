/*
 * call_async.h — internals of libshardex's asynchronous calls, shared by
 * call_async.c (the aio state machine and the pool) and ops_async.c (the
 * public *_async calls, reply decoding, sx_op readers). Not installed.
 */
#ifndef SX_CLIENT_CALL_ASYNC_H
#define SX_CLIENT_CALL_ASYNC_H

#include "internal.h"

/* One asynchronous operation. Owned by its client's pool; between
 * submission and the end of its callback only the thread completing its
 * call touches it. */
struct sx_op {
    sx_client *c;
    struct sx_op *next_free; /* in c->afree (under c->alock) */
    struct sx_op *next_all;  /* in c->aall (under c->alock) */
    int k;                   /* router of the current attempt */
    int tries;
    msg_type t;
    sx_done_fn cb;
    void *arg;
    uint8_t *wire; /* the encoded request (kept for resends) */
    size_t wire_n;
    int extra_ms;
    size_t expect; /* PUT: number of items sent */
    int rc;
    char errmsg[CL_ERRMSG_LEN];
    uint64_t *versions; /* PUT, DELETE */
    size_t nversions;
    sx_item *item;     /* GET */
    sx_result *result; /* QUERY, SCAN */
};

/* Starts request frame wire (malloc'd; ownership passes to the operation
 * in every case) of type t on c. extra_ms is added to the client's
 * timeout; expect is the number of items of a PUT. Returns 0 (cb will run
 * exactly once) or an sx_err (cb will not run). Thread-safe. */
int cl_async_start(sx_client *c, msg_type t, uint8_t *wire, size_t wire_n, int extra_ms,
                   size_t expect, sx_done_fn cb, void *arg);

/* Decodes the reply frame p..n of op's type into op's rc, errmsg and
 * results. Runs on the callback thread. */
void cl_async_decode(sx_op *op, const uint8_t *p, size_t n);

#endif
