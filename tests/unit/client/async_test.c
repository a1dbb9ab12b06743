/*
 * async_test.c — the asynchronous API of libshardex (sx_*_async) against
 * an in-process fake router (a REP server over TCP loopback answering PUT,
 * GET, DELETE, QUERY and SCAN with fixed, checkable replies): every
 * callback runs exactly once with the reply's contents; server errors and
 * "not found" arrive as the operation's status and message; callbacks may
 * chain further requests; sx_client_wait and sx_client_close wait for
 * everything in flight; a router that does not answer fails each
 * operation with a transport error; bad arguments are refused without a
 * callback. No sleeps: every wait is on a condition with a deadline.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "shardex.h"
#include "msg.h"
#include "net.h"
#include "mp.h"

/* ---- the fake router ---- */

/* The int attribute "id" of a msgpack map, or -1. */
static int64_t key_id(mp_span m)
{
    mp_cur c = mp_cur_make(m.p, m.n);
    uint32_t n;
    if (mp_read_map(&c, &n))
        return -1;
    for (uint32_t k = 0; k < n; k++) {
        mp_span name;
        mp_val v;
        if (mp_read_str(&c, &name) || mp_read(&c, &v))
            return -1;
        if (name.n == 2 && memcmp(name.p, "id", 2) == 0)
            return v.kind == MP_UINT ? (int64_t)v.u : v.kind == MP_INT ? v.i : -1;
    }
    return -1;
}

static void fake(void *arg, const uint8_t *p, size_t n, mp_buf *out)
{
    msg_type t;
    int is_rep;
    (void)arg;
    if (msg_peek(p, n, &t, &is_rep)) {
        msg_encode_err(MSG_PING, SX_EPROTO, "bad frame", out);
        return;
    }
    if (t == MSG_PUT) {
        msg_PUT_req q;
        msg_PUT_rep r = { 0 };
        uint64_t v[64];
        if (msg_decode_req(t, p, n, &q) || q.items.n > 64) {
            msg_encode_err(t, SX_EPROTO, "bad put", out);
            return;
        }
        for (uint32_t k = 0; k < q.items.n; k++)
            v[k] = 100 + k;
        r.versions = (msg_u64s){ q.items.n, v };
        msg_encode_rep(t, &r, out);
        msg_free_req(t, &q);
    } else if (t == MSG_GET || t == MSG_DELETE) {
        msg_GET_req q;
        msg_DELETE_req dq;
        int rc = t == MSG_GET ? msg_decode_req(t, p, n, &q) : msg_decode_req(t, p, n, &dq);
        if (rc) {
            msg_encode_err(t, SX_EPROTO, "bad key", out);
            return;
        }
        if (t == MSG_DELETE)
            q.key = dq.key;
        int64_t id = key_id(q.key);
        if (id == 500) {
            msg_encode_err(t, SX_ENOTABLE, "no table 'nope'", out);
        } else if (t == MSG_DELETE) {
            msg_DELETE_rep r = { .version = 9 };
            msg_encode_rep(t, &r, out);
        } else {
            msg_GET_rep r = { .version = 7 };
            uint8_t nil = 0xc0;
            r.item = id == 404 ? (mp_span){ &nil, 1 } : q.key; /* echo the key as the item */
            msg_encode_rep(t, &r, out);
        }
        msg_free_req(t, t == MSG_GET ? (void *)&q : (void *)&dq);
    } else if (t == MSG_QUERY || t == MSG_SCAN) {
        mp_buf items[3];
        mp_span v[3];
        for (int k = 0; k < 3; k++) {
            mp_buf_init(&items[k]);
            mp_put_map(&items[k], 1);
            mp_put_cstr(&items[k], "id");
            mp_put_i64(&items[k], k);
            v[k] = (mp_span){ (const uint8_t *)items[k].sb.data, items[k].sb.size };
        }
        if (t == MSG_QUERY) {
            uint64_t parts[1] = { 101 };
            msg_QUERY_rep r = { .items = { 3, v },
                                .token = { (const uint8_t *)"tok", 3 },
                                .index_parts = { 1, parts },
                                .entries = 3,
                                .covering = 1 };
            msg_encode_rep(t, &r, out);
        } else {
            msg_SCAN_rep r = { .items = { 3, v } };
            msg_encode_rep(t, &r, out);
        }
        for (int k = 0; k < 3; k++)
            mp_buf_free(&items[k]);
    } else {
        msg_encode_err(t, SX_EINVAL, "unexpected", out);
    }
}

/* ---- completion bookkeeping ---- */

typedef struct done {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int count, want;
} done;

static done D = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };

static void finished(void)
{
    pthread_mutex_lock(&D.lock);
    D.count++;
    pthread_cond_broadcast(&D.cv);
    pthread_mutex_unlock(&D.lock);
}

static int count(void)
{
    pthread_mutex_lock(&D.lock);
    int n = D.count;
    pthread_mutex_unlock(&D.lock);
    return n;
}

static sx_item *key(int64_t id)
{
    sx_item *k = sx_item_new();
    if (k)
        sx_item_set_int(k, "id", id);
    return k;
}

static sx_client *chain_client;

static void got(sx_op *op, void *arg)
{
    int64_t id = (int64_t)(intptr_t)arg, v = -1;
    CHECK(sx_op_status(op) == SX_OK);
    CHECK(sx_op_errmsg(op)[0] == '\0');
    sx_item *it = sx_op_take_item(op);
    CHECK(it != NULL);
    CHECK(sx_op_take_item(op) == NULL); /* taken once */
    CHECK(it && sx_item_get_int(it, "id", &v) == SX_OK && v == id);
    sx_item_free(it);
    if (id < 1000) { /* chain: the next one from here */
        sx_item *k = key(id + 1000);
        CHECK(sx_get_async(chain_client, "t", k, got, (void *)(intptr_t)(id + 1000)) == SX_OK);
        sx_item_free(k);
    }
    finished();
}

static void absent(sx_op *op, void *arg)
{
    (void)arg;
    CHECK(sx_op_status(op) == SX_ENOTFOUND);
    CHECK(sx_op_take_item(op) == NULL);
    finished();
}

static void refused(sx_op *op, void *arg)
{
    (void)arg;
    CHECK(sx_op_status(op) == SX_ENOTABLE);
    CHECK(strcmp(sx_op_errmsg(op), "no table 'nope'") == 0);
    finished();
}

static void put_done(sx_op *op, void *arg)
{
    size_t n = (size_t)(intptr_t)arg;
    CHECK(sx_op_status(op) == SX_OK);
    CHECK(sx_op_nversions(op) == n);
    for (size_t k = 0; k < n; k++)
        CHECK(sx_op_version(op, k) == 100 + k);
    CHECK(sx_op_version(op, n) == 0);
    finished();
}

static void del_done(sx_op *op, void *arg)
{
    (void)arg;
    CHECK(sx_op_status(op) == SX_OK);
    CHECK(sx_op_nversions(op) == 1 && sx_op_version(op, 0) == 9);
    finished();
}

static void page_done(sx_op *op, void *arg)
{
    int is_query = (int)(intptr_t)arg;
    CHECK(sx_op_status(op) == SX_OK);
    sx_result *r = sx_op_take_result(op);
    CHECK(r && sx_result_count(r) == 3);
    int64_t v = -1;
    CHECK(r && sx_item_get_int(sx_result_item(r, 2), "id", &v) == SX_OK && v == 2);
    if (is_query) {
        sx_explain e;
        sx_result_explain(r, &e);
        CHECK(sx_result_token(r) != NULL);
        CHECK(e.entries == 3 && e.covering == 1 && e.nindex_parts == 1 && e.index_parts[0] == 101);
    } else {
        CHECK(sx_result_token(r) == NULL);
    }
    sx_result_free(r);
    finished();
}

static void unreachable(sx_op *op, void *arg)
{
    (void)arg;
    int rc = sx_op_status(op);
    CHECK(rc == SX_ETIMEDOUT || rc == SX_EUNAVAIL || rc == SX_ENET);
    CHECK(strstr(sx_op_errmsg(op), "router") != NULL);
    finished();
}

/* Waits up to 20 s for the completion count to reach want. */
static void await(int want)
{
    pthread_mutex_lock(&D.lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    while (D.count < want)
        if (pthread_cond_timedwait(&D.cv, &D.lock, &until) != 0)
            break;
    int n = D.count;
    pthread_mutex_unlock(&D.lock);
    if (n < want)
        fprintf(stderr, "only %d of %d callbacks ran\n", n, want);
    CHECK(n >= want);
}

int main(void)
{
    char url[64];
    nng_socket s;
    net_server *srv = NULL;
    int port = 0;
    for (int tries = 0; tries < 50 && !srv; tries++) {
        port = 40000 + (int)((getpid() + tries * 7919) % 9000);
        snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
        if (net_listen(url, &s) == 0 && net_server_start(s, 4, fake, NULL, &srv) != 0)
            srv = NULL;
    }
    if (!srv) {
        fprintf(stderr, "cannot start the fake router\n");
        return 1;
    }
    sx_client *c;
    CHECK(sx_client_open(url, &c) == SX_OK);
    chain_client = c;

    /* 100 gets in flight, each chaining one more from its callback */
    for (int k = 0; k < 100; k++) {
        sx_item *kk = key(k);
        CHECK(sx_get_async(c, "t", kk, got, (void *)(intptr_t)k) == SX_OK);
        sx_item_free(kk); /* arguments are copied at submission */
    }
    await(200);
    CHECK(sx_client_wait(c, 20000) == SX_OK);
    CHECK(sx_client_inflight(c) == 0);

    /* statuses, versions, results */
    int base = count();
    sx_item *k404 = key(404), *k500 = key(500), *k1 = key(1);
    const sx_item *batch[5] = { k1, k1, k1, k1, k1 };
    CHECK(sx_get_async(c, "t", k404, absent, NULL) == SX_OK);
    CHECK(sx_get_async(c, "t", k500, refused, NULL) == SX_OK);
    CHECK(sx_put_async(c, "t", k1, put_done, (void *)(intptr_t)1) == SX_OK);
    CHECK(sx_put_batch_async(c, "t", batch, 5, put_done, (void *)(intptr_t)5) == SX_OK);
    CHECK(sx_delete_async(c, "t", k1, del_done, NULL) == SX_OK);
    sx_value town = sx_val_str("Redmond");
    sx_query_opts q = { .eq = &town, .neq = 1, .consistency = SX_EVENTUAL };
    CHECK(sx_query_async(c, "t", "by_town", &q, page_done, (void *)(intptr_t)1) == SX_OK);
    CHECK(sx_scan_async(c, "t", k1, 0, NULL, page_done, (void *)(intptr_t)0) == SX_OK);
    await(base + 7);
    CHECK(sx_client_wait(c, 20000) == SX_OK);

    /* refused at submission: no callback */
    base = count();
    CHECK(sx_get_async(c, NULL, k1, got, NULL) == SX_EINVAL);
    CHECK(sx_get_async(c, "t", k1, NULL, NULL) == SX_EINVAL);
    CHECK(sx_put_batch_async(c, "t", batch, 0, put_done, NULL) == SX_EINVAL);
    const sx_item *holed[3] = { k1, NULL, k1 };
    CHECK(sx_put_batch_async(c, "t", holed, 3, put_done, NULL) == SX_EINVAL);
    sx_query_opts bad = { .prefix = "x", .from = &town };
    CHECK(sx_query_async(c, "t", "by_town", &bad, page_done, NULL) == SX_EINVAL);
    CHECK(sx_scan_async(c, "t", NULL, 0, "!!not base64!!", page_done, NULL) == SX_ETOKEN);
    CHECK(sx_client_wait(c, 1000) == SX_OK);
    CHECK(count() == base);
    CHECK(strcmp(sx_client_errmsg(c), "") == 0);              /* async calls leave it alone */
    CHECK(sx_put_batch(c, "t", holed, 3, NULL) == SX_EINVAL); /* so does the sync one */
    CHECK(strcmp(sx_client_errmsg(c), "item 1 is NULL") == 0);

    /* close waits for what is in flight: every callback has run when it returns */
    base = count();
    for (int k = 0; k < 50; k++)
        CHECK(sx_get_async(c, "t", k404, absent, NULL) == SX_OK);
    sx_client_close(c);
    CHECK(count() == base + 50);

    /* a router that never answers (nothing listens): transport errors */
    net_server_stop(srv);
    sx_client *dead;
    CHECK(sx_client_open(url, &dead) == SX_OK);
    sx_client_set_timeout(dead, 300);
    base = count();
    for (int k = 0; k < 10; k++)
        CHECK(sx_get_async(dead, "t", k1, unreachable, NULL) == SX_OK);
    await(base + 10);
    CHECK(sx_client_wait(dead, 20000) == SX_OK);
    sx_client_close(dead);

    sx_item_free(k404);
    sx_item_free(k500);
    sx_item_free(k1);
    return CHECK_DONE();
}
