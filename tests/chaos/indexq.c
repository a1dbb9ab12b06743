/*
 * indexq.c — the chaos checker's index checker (model index): moves set a
 * key's indexed value, queries ask which keys hold a value.  Every key an
 * ok query returns must have been able to hold the value during the query;
 * a strong query must also return every key that certainly held it from
 * before the query began until it ended.  README.md states the rules; in
 * short, for a query Q for value X:
 *   returned key K: some move of K to X that did not fail was invoked by
 *     Q's completion and no ok move of K to another value was invoked after
 *     it completed and completed before Q was invoked;
 *   strong, key K not returned: no ok move of K to X completed before Q was
 *     invoked such that every move of K to another value that did not fail
 *     completed before that move was invoked or was invoked after Q
 *     completed.
 */
#include <stdlib.h>
#include <string.h>

#include "chk.h"

#define MAX_SHOWN 10 /* superseded moves shown in a counterexample */

enum { V_MISSING = 1, V_UNEXPECTED };

/* The ok move completing first, among those at or after a position. */
typedef struct best {
    uint64_t ret, value;
    size_t at; /* index in the moves array; SIZE_MAX: none */
} best;

typedef struct ictx {
    const chk_hist *h;
    const chk_op **mv; /* moves by (key, call, line) */
    size_t n;
    best *b1, *b2; /* per position: the best ok move, the best of another value */
    uint64_t *sup_ret;
    size_t *sup_at; /* per move: the ok move of another value that certainly
                     * follows it and completes first; SIZE_MAX: none */
} ictx;

static int cmp_move(const void *a, const void *b)
{
    const chk_op *x = *(const chk_op *const *)a, *y = *(const chk_op *const *)b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->call != y->call)
        return x->call < y->call ? -1 : 1;
    return (x->inv_line > y->inv_line) - (x->inv_line < y->inv_line);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The moves of key: [*a, *b) of c->mv. */
static void key_range(const ictx *c, uint64_t key, size_t *a, size_t *b)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->mv[mid]->key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    *a = lo;
    while (lo < c->n && c->mv[lo]->key == key)
        lo++;
    *b = lo;
}

/* Fills each move's certain superseder (sup_ret, sup_at). */
static void supersede(ictx *c)
{
    const best none = { CHK_INF, 0, SIZE_MAX };
    for (size_t a = 0; a < c->n;) {
        size_t b;
        key_range(c, c->mv[a]->key, &a, &b);
        best b1 = none, b2 = none;
        c->b1[b] = b1; /* position b: past the key's moves (b < n + 1) */
        c->b2[b] = b2;
        for (size_t p = b; p-- > a;) {
            const chk_op *m = c->mv[p];
            if (m->outcome == CHK_OK) {
                best x = { m->ret, m->value, p };
                if (b1.at != SIZE_MAX && x.value == b1.value) {
                    if (x.ret < b1.ret)
                        b1 = x;
                } else if (x.ret < b1.ret) {
                    b2 = b1;
                    b1 = x;
                } else if (x.ret < b2.ret) {
                    b2 = x;
                }
            }
            c->b1[p] = b1;
            c->b2[p] = b2;
        }
        for (size_t i = a; i < b; i++) {
            c->sup_ret[i] = CHK_INF;
            c->sup_at[i] = SIZE_MAX;
            uint64_t after = c->mv[i]->ret;
            if (after == CHK_INF)
                continue;
            size_t lo = a, hi = b; /* first position invoked after it completed */
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (c->mv[mid]->call <= after)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            const best *x = c->b1[lo].at != SIZE_MAX && c->b1[lo].value != c->mv[i]->value
                                ? &c->b1[lo]
                                : &c->b2[lo];
            c->sup_ret[i] = x->ret;
            c->sup_at[i] = x->at;
        }
        a = b;
    }
}

/* 1 if key K (moves [a, b)) may hold x during query q. */
static int may_hold(const ictx *c, size_t a, size_t b, uint64_t x, const chk_op *q)
{
    for (size_t i = a; i < b; i++) {
        const chk_op *m = c->mv[i];
        if (m->value == x && m->outcome != CHK_FAIL && m->call <= q->ret &&
            c->sup_ret[i] >= q->call)
            return 1;
    }
    return 0;
}

/* The ok move of K (moves [a, b)) to x that proves K held x throughout
 * strong query q, or NULL. */
static const chk_op *must_hold(const ictx *c, size_t a, size_t b, uint64_t x, const chk_op *q)
{
    int conflict = 0;
    uint64_t maxret = 0;
    for (size_t i = a; i < b; i++) {
        const chk_op *m = c->mv[i];
        if (m->value != x && m->outcome != CHK_FAIL && m->call <= q->ret) {
            conflict = 1;
            maxret = m->ret > maxret ? m->ret : maxret;
        }
    }
    const chk_op *proof = NULL;
    for (size_t i = a; i < b; i++) {
        const chk_op *m = c->mv[i];
        if (m->value == x && m->outcome == CHK_OK && m->ret < q->call &&
            (!conflict || (maxret != CHK_INF && m->call > maxret)) &&
            (!proof || m->ret > proof->ret))
            proof = m;
    }
    return proof;
}

/* Orders (value, key) pairs. */
static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}

static int has(const uint64_t *sorted, size_t n, uint64_t v)
{
    return bsearch(&v, sorted, n, sizeof v, cmp_u64) != NULL;
}

static json_t *value_json(const chk_hist *h, uint64_t id)
{
    return json_loads(chk_intern_name(&h->in, id), JSON_DECODE_ANY, NULL);
}

/* The counterexample of an unexpected key: q, the moves of the key to x
 * invoked by q's completion and what overwrote each, or else the key's
 * last ok move completed before q. */
static int unexpected_cx(const ictx *c, chk_result *r, size_t a, size_t b, uint64_t x,
                         const chk_op *q, const char *val, char *why, size_t n)
{
    if (chk_result_add_op(r, q))
        return -1;
    size_t shown = 0;
    const chk_op *last = NULL, *by = NULL;
    for (size_t i = a; i < b; i++) {
        const chk_op *m = c->mv[i];
        if (m->value == x && m->outcome != CHK_FAIL && m->call <= q->ret && shown < MAX_SHOWN) {
            shown++;
            if (chk_result_add_op(r, m) ||
                (c->sup_at[i] != SIZE_MAX && chk_result_add_op(r, c->mv[c->sup_at[i]])))
                return -1;
            if (!last || m->call > last->call) {
                last = m;
                by = c->sup_at[i] != SIZE_MAX ? c->mv[c->sup_at[i]] : NULL;
            }
        }
    }
    if (last && by) {
        snprintf(
            why, n,
            "each move of it to %s invoked before the query ended was overwritten before the query began (the last at lines %ld-%ld, by lines %ld-%ld)",
            val, last->inv_line, last->done_line, by->inv_line, by->done_line);
        return 0;
    }
    snprintf(why, n, "no move of it to %s was invoked before the query completed", val);
    const chk_op *prev = NULL;
    for (size_t i = a; i < b; i++)
        if (c->mv[i]->outcome == CHK_OK && c->mv[i]->ret < q->call &&
            (!prev || c->mv[i]->ret > prev->ret))
            prev = c->mv[i];
    return prev ? chk_result_add_op(r, prev) : 0;
}

/* chk_index: contract in chk.h. */
int chk_index(const chk_hist *h, chk_result *r)
{
    int rc = -1;
    ictx c = { h, NULL, 0, NULL, NULL, NULL, NULL };
    size_t n = h->n_ops ? h->n_ops : 1;
    c.mv = malloc(n * sizeof *c.mv);
    c.b1 = malloc((n + 1) * sizeof *c.b1);
    c.b2 = malloc((n + 1) * sizeof *c.b2);
    c.sup_ret = malloc(n * sizeof *c.sup_ret);
    c.sup_at = malloc(n * sizeof *c.sup_at);
    uint64_t *pairs = malloc(2 * n * sizeof *pairs); /* (value, key) of ok moves */
    uint64_t *res = malloc(n * sizeof *res);
    size_t res_cap = n;
    json_t *viol = json_array();
    if (!c.mv || !c.b1 || !c.b2 || !c.sup_ret || !c.sup_at || !pairs || !res || !viol)
        goto out;
    size_t n_pairs = 0, queries = 0, strong = 0, checked = 0, n_keys = 0;
    for (size_t i = 0; i < h->n_ops; i++) {
        const chk_op *op = &h->ops[i];
        if (op->f == CHK_F_MOVE) {
            c.mv[c.n++] = op;
        } else {
            queries++;
            checked += op->outcome == CHK_OK;
            strong += op->outcome == CHK_OK && op->strong;
        }
    }
    qsort(c.mv, c.n, sizeof *c.mv, cmp_move);
    supersede(&c);
    for (size_t i = 0; i < c.n; i++) {
        n_keys += !i || c.mv[i]->key != c.mv[i - 1]->key;
        if (c.mv[i]->outcome == CHK_OK) {
            pairs[2 * n_pairs] = c.mv[i]->value;
            pairs[2 * n_pairs++ + 1] = c.mv[i]->key;
        }
    }
    qsort(pairs, n_pairs, 2 * sizeof *pairs, cmp_pair);

    size_t n_missing = 0, n_unexp = 0;
    const chk_op *bad_q = NULL, *bad_m = NULL;
    uint64_t bad_key = 0;
    int bad_kind = 0;
    for (size_t i = 0; i < h->n_ops; i++) {
        const chk_op *q = &h->ops[i];
        if (q->f != CHK_F_QUERY || q->outcome != CHK_OK)
            continue;
        if (q->n_items > res_cap) {
            uint64_t *nr = realloc(res, q->n_items * sizeof *nr);
            if (!nr)
                goto out;
            res = nr;
            res_cap = q->n_items;
        }
        memcpy(res, q->items, q->n_items * sizeof *res);
        qsort(res, q->n_items, sizeof *res, cmp_u64);
        for (size_t k = 0; k < q->n_items; k++) {
            size_t a, b;
            if (k && res[k] == res[k - 1])
                continue;
            key_range(&c, res[k], &a, &b);
            if (may_hold(&c, a, b, q->value, q))
                continue;
            if (n_missing + n_unexp < 100 &&
                json_array_append_new(viol, json_pack("{s:s,s:I,s:o}", "kind", "unexpected",
                                                      "query_line", (json_int_t)q->inv_line, "key",
                                                      value_json(h, res[k]))))
                goto out;
            n_unexp++;
            if (!bad_q) {
                bad_q = q;
                bad_key = res[k];
                bad_kind = V_UNEXPECTED;
            }
        }
        if (!q->strong)
            continue;
        size_t lo = 0, hi = n_pairs;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (pairs[2 * mid] < q->value)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t p = lo; p < n_pairs && pairs[2 * p] == q->value; p++) {
            uint64_t key = pairs[2 * p + 1];
            if ((p > lo && key == pairs[2 * p - 1]) || has(res, q->n_items, key))
                continue;
            size_t a, b;
            key_range(&c, key, &a, &b);
            const chk_op *m = must_hold(&c, a, b, q->value, q);
            if (!m)
                continue;
            if (n_missing + n_unexp < 100 &&
                json_array_append_new(viol, json_pack("{s:s,s:I,s:o}", "kind", "missing",
                                                      "query_line", (json_int_t)q->inv_line, "key",
                                                      value_json(h, key))))
                goto out;
            n_missing++;
            if (!bad_q) {
                bad_q = q;
                bad_m = m;
                bad_key = key;
                bad_kind = V_MISSING;
            }
        }
    }

    if (chk_result_fig(r, "queries", (long long)queries) ||
        chk_result_fig(r, "queries_checked", (long long)checked) ||
        chk_result_fig(r, "strong", (long long)strong) ||
        chk_result_fig(r, "verified", (long long)(checked - strong)) ||
        chk_result_fig(r, "moves", (long long)c.n) ||
        chk_result_fig(r, "keys", (long long)n_keys) ||
        chk_result_fig(r, "missing", (long long)n_missing) ||
        chk_result_fig(r, "unexpected", (long long)n_unexp))
        goto out;
    if (!bad_q) {
        rc = chk_result_set(
            r, CHK_PASS,
            "pass (%zu quer%s checked: %zu strong, %zu verified; %zu move%s of %zu key%s)", checked,
            checked == 1 ? "y" : "ies", strong, checked - strong, c.n, chk_s(c.n), n_keys,
            chk_s(n_keys));
        goto out;
    }
    char why[640], key[80], val[80];
    chk_short(chk_intern_name(&h->in, bad_key), key, sizeof key, 64);
    chk_short(chk_intern_name(&h->in, bad_q->value), val, sizeof val, 64);
    if (bad_kind == V_MISSING) {
        if (chk_result_add_op(r, bad_m) || chk_result_add_op(r, bad_q))
            goto out;
        snprintf(
            why, sizeof why,
            "misses key %s, moved to %s at lines %ld-%ld with no move of it elsewhere that could take effect before the query ended",
            key, val, bad_m->inv_line, bad_m->done_line);
    } else {
        size_t a, b;
        char detail[400];
        key_range(&c, bad_key, &a, &b);
        if (unexpected_cx(&c, r, a, b, bad_q->value, bad_q, val, detail, sizeof detail))
            goto out;
        snprintf(why, sizeof why, "returned key %s, which cannot have held %s then: %s", key, val,
                 detail);
    }
    if (json_object_set_new(r->cx, "kind",
                            json_string(bad_kind == V_MISSING ? "missing" : "unexpected")) ||
        json_object_set_new(r->cx, "key", value_json(h, bad_key)) ||
        json_object_set_new(r->cx, "value", value_json(h, bad_q->value)) ||
        json_object_set(r->cx, "violations", viol))
        goto out;
    rc = chk_result_set(
        r, CHK_FAILED,
        "FAIL %s query for %s (lines %ld-%ld) %s [%zu missing, %zu unexpected in %zu quer%s]",
        bad_q->strong ? "strong" : "verified", val, bad_q->inv_line, bad_q->done_line, why,
        n_missing, n_unexp, checked, checked == 1 ? "y" : "ies");
out:
    free(c.mv);
    free(c.b1);
    free(c.b2);
    free(c.sup_ret);
    free(c.sup_at);
    free(pairs);
    free(res);
    json_decref(viol);
    return rc;
}
