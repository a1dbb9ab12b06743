/*
 * run.c — shardex-bench's closed loop (bench_loop) and the request kinds
 * of W1 (durable put), W2 (point get), W3 (verified query, ~10 items),
 * W4 (covering eventual query), W5 (scan with a filter, every page), W8
 * (90% get, 5% put, 5% query) and W9 (W8's mix, accounted per kind by
 * failover.c). Checks: a get must find its item with
 * the asked id; a query or scan must return exactly the pair's 10 items,
 * each with the asked town and last name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"
#include "data.h"

void bench_error(bench *b, const char *what, int rc, const char *msg)
{
    __atomic_fetch_add(&b->errors, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&b->lock);
    if (!b->firsterr[0])
        snprintf(b->firsterr, sizeof b->firsterr, "%s: %s (%s)", what, sx_strerror(rc),
                 msg ? msg : "");
    pthread_mutex_unlock(&b->lock);
}

void slot_retire(slot *s)
{
    bench *b = s->b;
    pthread_mutex_lock(&b->lock);
    if (--b->active == 0)
        pthread_cond_broadcast(&b->idle);
    pthread_mutex_unlock(&b->lock);
}

void slot_done(slot *s, int rc, bool ok)
{
    bench *b = s->b;
    if (b->wl == W9) {
        w9_record(s, rc, ok);
        if (now_ns() >= w9_end(b)) {
            slot_retire(s);
            return;
        }
        slot_issue(s);
        return;
    }
    uint64_t t = now_ns();
    if (s->t0 >= b->t_measure && s->t0 < b->t_end) {
        hist_add(&b->h, t - s->t0);
        __atomic_fetch_add(&b->ops, 1, __ATOMIC_RELAXED);
        uint64_t last = __atomic_load_n(&b->last_done, __ATOMIC_RELAXED);
        while (t > last && !__atomic_compare_exchange_n(&b->last_done, &last, t, true,
                                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
    if (!ok)
        __atomic_fetch_add(&b->bad, 1, __ATOMIC_RELAXED);
    if (t >= b->t_end) {
        slot_retire(s);
        return;
    }
    slot_issue(s);
}

/* The id attribute of it equals id. */
static bool id_is(const sx_item *it, uint64_t id)
{
    int64_t v;
    return it && sx_item_get_int(it, "id", &v) == SX_OK && (uint64_t)v == id;
}

/* it has the town and last name of pair p. */
static bool pair_is(const sx_item *it, uint64_t p)
{
    char t[16], l[16];
    const char *s;
    data_pair(p, t, l);
    return it && sx_item_get_str(it, "town", &s, NULL) == SX_OK && strcmp(s, t) == 0 &&
           sx_item_get_str(it, "lastname", &s, NULL) == SX_OK && strcmp(s, l) == 0;
}

/* ---- completions ---- */

static void done_put(sx_op *op, void *arg)
{
    slot *s = arg;
    int rc = sx_op_status(op);
    if (rc)
        bench_error(s->b, "put", rc, sx_op_errmsg(op));
    slot_done(s, rc, rc == SX_OK);
}

static void done_get(sx_op *op, void *arg)
{
    slot *s = arg;
    int rc = sx_op_status(op);
    if (rc)
        bench_error(s->b, "get", rc, sx_op_errmsg(op));
    sx_item *it = sx_op_take_item(op);
    bool ok = rc == SX_OK && id_is(it, s->id);
    sx_item_free(it);
    slot_done(s, rc, ok);
}

static void done_query(sx_op *op, void *arg)
{
    slot *s = arg;
    int rc = sx_op_status(op);
    if (rc)
        bench_error(s->b, "query", rc, sx_op_errmsg(op));
    sx_result *r = sx_op_take_result(op);
    bool ok = rc == SX_OK && sx_result_count(r) == DATA_PER_PAIR;
    for (size_t k = 0; ok && k < sx_result_count(r); k++)
        ok = pair_is(sx_result_item(r, k), s->pair);
    sx_result_free(r);
    slot_done(s, rc, ok);
}

static int issue_scan_page(slot *s, const char *token);

static void done_scan(sx_op *op, void *arg)
{
    slot *s = arg;
    int rc = sx_op_status(op);
    sx_result *r = sx_op_take_result(op);
    if (rc) {
        bench_error(s->b, "scan", rc, sx_op_errmsg(op));
        slot_done(s, rc, false);
        return;
    }
    bool ok = true;
    for (size_t k = 0; k < sx_result_count(r); k++)
        ok = ok && pair_is(sx_result_item(r, k), s->pair);
    s->got += sx_result_count(r);
    const char *tok = sx_result_token(r);
    if (ok && tok) { /* the same measured operation goes on */
        rc = issue_scan_page(s, tok);
        sx_result_free(r);
        if (rc) {
            bench_error(s->b, "scan page", rc, sx_strerror(rc));
            slot_done(s, rc, false);
        }
        return;
    }
    sx_result_free(r);
    slot_done(s, SX_OK, ok && s->got == DATA_PER_PAIR);
}

/* ---- requests ---- */

static void issue_put(slot *s, uint64_t id, const char *town, const char *last)
{
    sx_item *it = data_item_with(s->b->seed + s->t0, id, town, last);
    if (!it) {
        bench_error(s->b, "put", SX_ENOMEM, "out of memory");
        slot_retire(s);
        return;
    }
    SLOT_SUBMIT(s, sx_put_async(s->b->c, s->b->table, it, done_put, s));
    sx_item_free(it);
}

static void issue_get(slot *s)
{
    sx_item *key = sx_item_new();
    s->id = rng_next(&s->rng) % s->b->n;
    if (!key || sx_item_set_int(key, "id", (int64_t)s->id)) {
        sx_item_free(key);
        bench_error(s->b, "get", SX_ENOMEM, "out of memory");
        slot_retire(s);
        return;
    }
    SLOT_SUBMIT(s, sx_get_async(s->b->c, s->b->table, key, done_get, s));
    sx_item_free(key);
}

static void issue_query(slot *s, sx_consistency cons)
{
    char t[16], l[16];
    s->pair = rng_next(&s->rng) % data_npairs(s->b->n);
    data_pair(s->pair, t, l);
    sx_value eq[2] = { sx_val_str(t), sx_val_str(l) };
    sx_query_opts q = { .eq = eq, .neq = 2, .limit = 100, .consistency = cons };
    SLOT_SUBMIT(s, sx_query_async(s->b->c, s->b->table, s->b->index, &q, done_query, s));
}

static int issue_scan_page(slot *s, const char *token)
{
    char t[16], l[16];
    data_pair(s->pair, t, l);
    sx_item *w = sx_item_new();
    if (!w || sx_item_set_str(w, "town", t) || sx_item_set_str(w, "lastname", l)) {
        sx_item_free(w);
        return SX_ENOMEM;
    }
    int rc = sx_scan_async(s->b->c, s->b->table, w, 0, token, done_scan, s);
    sx_item_free(w);
    return rc;
}

static void issue_fresh_put(slot *s)
{
    char t[16], l[16];
    uint64_t k = __atomic_fetch_add(&s->b->next, 1, __ATOMIC_RELAXED);
    data_fresh_pair(rng_next(&s->rng) % data_npairs(s->b->n), t, l);
    issue_put(s, s->b->id_base + k, t, l);
}

void slot_issue(slot *s)
{
    bench *b = s->b;
    s->t0 = now_ns();
    switch (b->wl) {
    case W1: issue_fresh_put(s); break;
    case W2: issue_get(s); break;
    case W3: issue_query(s, SX_VERIFIED); break;
    case W4: issue_query(s, SX_EVENTUAL); break;
    case W5: {
        s->pair = rng_next(&s->rng) % data_npairs(b->n);
        s->got = 0;
        int rc = issue_scan_page(s, NULL);
        if (rc) {
            bench_error(b, "scan", rc, sx_strerror(rc));
            slot_retire(s);
        }
        break;
    }
    case W8:
    case W9: {
        uint64_t r = rng_next(&s->rng) % 100;
        if (r < 90) {
            s->kind = W9_GET;
            issue_get(s);
        } else if (r < 95) { /* overwrite an item of the data set, same pair */
            char t[16], l[16];
            uint64_t id = rng_next(&s->rng) % b->n;
            s->kind = W9_PUT;
            data_pair(id % data_npairs(b->n), t, l);
            issue_put(s, id, t, l);
        } else {
            s->kind = W9_QUERY;
            issue_query(s, SX_VERIFIED);
        }
        break;
    }
    default: bench_error(b, "workload", SX_EINVAL, "not a closed-loop workload"); slot_retire(s);
    }
}

int bench_loop(bench *b)
{
    b->slots = calloc((size_t)b->conc, sizeof *b->slots);
    if (!b->slots)
        return SX_ENOMEM;
    b->active = b->conc;
    for (int k = 0; k < b->conc; k++) {
        b->slots[k] = (slot){ .b = b,
                              .idx = k,
                              .rng = b->seed * 1000003ULL + (uint64_t)k * 7919ULL + 1 };
        slot_issue(&b->slots[k]);
    }
    pthread_mutex_lock(&b->lock);
    while (b->active > 0)
        pthread_cond_wait(&b->idle, &b->lock);
    pthread_mutex_unlock(&b->lock);
    sx_client_wait(b->c, -1);
    return SX_OK;
}
