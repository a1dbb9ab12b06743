/*
 * model_test.c — model-based random integration test of a running shardex
 * cluster, through the public client API only.
 *
 *   model_test ROUTER-URL [--seed N] [--ops N] [--keys N]
 *
 * Thousands of random puts (a small key space, so most are updates),
 * batches and deletes go to the cluster and to an in-memory model. Updates
 * move index entries between index partitions: the index is on
 * (town, lastname) and the towns lie on both sides of the split point "M".
 * Some items lack lastname (sparse index). Read-your-writes is checked
 * after many writes with a strong query, and verified queries made while
 * the index lags must return only current, matching items. Afterwards, for each consistency
 * level (strong, verified, eventual), a set of queries (eq town; eq town and
 * lastname; eq town + prefix on lastname; ranges on town; the full index;
 * descending; limits; pages followed by continuation tokens) must equal the
 * same query over the model, in order. Before the verified and eventual
 * rounds a strong full-index query (retried up to a deadline) proves that
 * the index lag is zero. An index created after the writes (backfill) is
 * checked the same way. The seed is printed; rerun with --seed.
 *
 * Exit status 0 when everything matched, 1 on a mismatch or error.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "shardex.h"

static const char *TOWNS[] = { "Auburn", "Bellevue", "Kent", "Redmond", "Seattle", "Tacoma" };
static const char *LASTS[] = { "Adams", "Baker", "Bakerson", "Jones", "Johnson",
                               "Smith", "Smyth", "Snow",     "Zimmer" };
#define NTOWNS (sizeof TOWNS / sizeof TOWNS[0])
#define NLASTS (sizeof LASTS / sizeof LASTS[0])

/* One key of the model. last < 0: the item has no lastname attribute. */
typedef struct mitem {
    bool present;
    int town, last;
    int64_t n; /* write counter: every put changes it */
    double score;
    bool flag;
} mitem;

typedef struct test {
    sx_client *c;
    char table[64];
    uint64_t rng;
    int nkeys;
    mitem *m;
    int64_t writes;
    long queries, failures;
    uint64_t stale_dropped; /* summed over the soundness checks */
} test;

/* ---- helpers ---- */

static uint64_t rnd(test *t)
{
    t->rng ^= t->rng << 13;
    t->rng ^= t->rng >> 7;
    t->rng ^= t->rng << 17;
    return t->rng;
}

static int rnd_below(test *t, int n)
{
    return (int)(rnd(t) % (uint64_t)n);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void die(test *t, int rc, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "model_test: FATAL: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, ": %s (%s)\n", sx_strerror(rc), t->c ? sx_client_errmsg(t->c) : "");
    exit(1);
}

/* ---- model items ---- */

static sx_item *model_item(test *t, int id)
{
    const mitem *mi = &t->m[id];
    sx_item *it = sx_item_new();
    if (!it)
        die(t, SX_ENOMEM, "sx_item_new");
    int rc = sx_item_set_int(it, "id", id);
    rc |= sx_item_set_str(it, "town", TOWNS[mi->town]);
    if (mi->last >= 0)
        rc |= sx_item_set_str(it, "lastname", LASTS[mi->last]);
    rc |= sx_item_set_int(it, "n", mi->n);
    rc |= sx_item_set_double(it, "score", mi->score);
    rc |= sx_item_set_bool(it, "flag", mi->flag);
    if (rc)
        die(t, SX_ENOMEM, "building item %d", id);
    return it;
}

static void random_update(test *t, int id)
{
    mitem *mi = &t->m[id];
    mi->present = true;
    mi->town = rnd_below(t, NTOWNS);
    mi->last = rnd_below(t, 10) == 0 ? -1 : rnd_below(t, NLASTS);
    mi->n = ++t->writes;
    mi->score = (double)rnd_below(t, 100000) / 8.0;
    mi->flag = rnd_below(t, 2);
}

/* Compares a returned item with the model's item id (attrs: only those
 * attribute names plus id are expected; NULL = whole item). */
static bool item_equal(test *t, const sx_item *got, int id, const char *const *attrs, int nattrs)
{
    sx_item *want = model_item(t, id);
    bool ok = true;
    if (attrs) {
        sx_item *sel = sx_item_new();
        sx_value v;
        sx_item_get(want, "id", &v);
        sx_item_set_value(sel, "id", &v);
        for (int k = 0; k < nattrs; k++)
            if (sx_item_get(want, attrs[k], &v) == SX_OK)
                sx_item_set_value(sel, attrs[k], &v);
        sx_item_free(want);
        want = sel;
    }
    if (sx_item_count(got) != sx_item_count(want))
        ok = false;
    for (size_t k = 0; ok && k < sx_item_count(want); k++) {
        const char *name;
        sx_value a, b;
        sx_item_attr(want, k, &name, &a);
        if (sx_item_get(got, name, &b) != SX_OK || a.type != b.type) {
            ok = false;
            break;
        }
        switch (a.type) {
        case SX_INT: ok = a.i == b.i; break;
        case SX_DOUBLE: ok = a.d == b.d; break;
        case SX_BOOL: ok = a.b == b.b; break;
        case SX_STR: ok = a.len == b.len && memcmp(a.s, b.s, a.len) == 0; break;
        default: break;
        }
    }
    sx_item_free(want);
    return ok;
}

/* ---- queries over the model ---- */

/* A query in model terms. k = number of eq values on (town, lastname). */
typedef struct mquery {
    const char *index; /* "by_tl" (town, lastname), "by_town" (town), "by_last" */
    int k;
    int eq_town, eq_last;
    const char *from, *to; /* range on the next attribute (strings), NULL = open */
    bool has_range;
    const char *prefix;
    bool desc;
    uint64_t limit; /* total wanted; 0 = all */
    uint64_t page;  /* page size asked per call; 0 = server default */
    const char *const *attrs;
    int nattrs;
} mquery;

/* The index's attributes as model fields: 0 town, 1 lastname. */
static int index_attrs(const char *index, int out[2])
{
    if (strcmp(index, "by_tl") == 0) {
        out[0] = 0;
        out[1] = 1;
        return 2;
    }
    if (strcmp(index, "by_town") == 0) {
        out[0] = 0;
        return 1;
    }
    out[0] = 1;
    return 1;
}

static const char *field(const mitem *mi, int f)
{
    return f == 0 ? TOWNS[mi->town] : (mi->last >= 0 ? LASTS[mi->last] : NULL);
}

static bool model_match(const test *t, const mquery *q, int id)
{
    const mitem *mi = &t->m[id];
    int attrs[2];
    int na = index_attrs(q->index, attrs);
    if (!mi->present)
        return false;
    for (int a = 0; a < na; a++)
        if (!field(mi, attrs[a]))
            return false; /* sparse: not in the index */
    int eqv[2] = { q->eq_town, q->eq_last };
    for (int a = 0; a < q->k; a++) {
        const char *want = attrs[a] == 0 ? TOWNS[eqv[a]] : LASTS[eqv[a]];
        if (strcmp(field(mi, attrs[a]), want) != 0)
            return false;
    }
    if (q->k < na) {
        const char *v = field(mi, attrs[q->k]);
        if (q->prefix && strncmp(v, q->prefix, strlen(q->prefix)) != 0)
            return false;
        if (q->has_range && q->from && strcmp(v, q->from) < 0)
            return false;
        if (q->has_range && q->to && strcmp(v, q->to) > 0)
            return false;
    }
    return true;
}

static const test *g_sort_test;
static const char *g_sort_index;

/* Index order: indexed values, then the primary key. */
static int model_cmp(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    int attrs[2];
    int na = index_attrs(g_sort_index, attrs);
    for (int k = 0; k < na; k++) {
        int c = strcmp(field(&g_sort_test->m[a], attrs[k]), field(&g_sort_test->m[b], attrs[k]));
        if (c)
            return c;
    }
    return (a > b) - (a < b);
}

/* Fills ids with the model's answer; returns the count. */
static int model_query(const test *t, const mquery *q, int *ids)
{
    int n = 0;
    for (int id = 0; id < t->nkeys; id++)
        if (model_match(t, q, id))
            ids[n++] = id;
    g_sort_test = t;
    g_sort_index = q->index;
    qsort(ids, (size_t)n, sizeof *ids, model_cmp);
    if (q->desc)
        for (int k = 0; k < n / 2; k++) {
            int x = ids[k];
            ids[k] = ids[n - 1 - k];
            ids[n - 1 - k] = x;
        }
    if (q->limit && (uint64_t)n > q->limit)
        n = (int)q->limit;
    return n;
}

/* ---- queries over the cluster ---- */

typedef struct got_list {
    sx_item **v;
    size_t n, cap;
} got_list;

static void got_free(got_list *g)
{
    for (size_t k = 0; k < g->n; k++)
        sx_item_free(g->v[k]);
    free(g->v);
    memset(g, 0, sizeof *g);
}

static void got_push(test *t, got_list *g, sx_item *it)
{
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        g->v = realloc(g->v, g->cap * sizeof *g->v);
        if (!g->v)
            die(t, SX_ENOMEM, "realloc");
    }
    g->v[g->n++] = it;
}

/* Runs q at consistency cons, following tokens. Returns 0 or the error. */
static int cluster_query(test *t, const mquery *q, sx_consistency cons, got_list *g)
{
    sx_value eq[2], from, to;
    const char *tok = NULL;
    char *tokcopy = NULL;
    int attrs[2];
    index_attrs(q->index, attrs);
    int eqv[2] = { q->eq_town, q->eq_last };
    for (int a = 0; a < q->k; a++)
        eq[a] = sx_val_str(attrs[a] == 0 ? TOWNS[eqv[a]] : LASTS[eqv[a]]);
    if (q->from)
        from = sx_val_str(q->from);
    if (q->to)
        to = sx_val_str(q->to);
    int rc = 0;
    for (int pages = 0; pages < 100000; pages++) {
        sx_query_opts o = { 0 };
        o.eq = eq;
        o.neq = (size_t)q->k;
        o.from = q->has_range && q->from ? &from : NULL;
        o.to = q->has_range && q->to ? &to : NULL;
        o.prefix = q->prefix;
        o.desc = q->desc;
        o.attrs = q->attrs;
        o.nattrs = (size_t)q->nattrs;
        o.consistency = cons;
        o.token = tok;
        uint64_t want = q->limit ? q->limit - g->n : 0;
        o.limit = q->page && (!want || q->page < want) ? q->page : want;
        sx_result *r = NULL;
        rc = sx_query(t->c, t->table, q->index, &o, &r);
        if (rc)
            break;
        if (o.limit && sx_result_count(r) > o.limit) {
            fprintf(stderr, "model_test: page of %zu items exceeds limit %" PRIu64 "\n",
                    sx_result_count(r), o.limit);
            t->failures++;
        }
        for (size_t k = 0; k < sx_result_count(r); k++)
            got_push(t, g, sx_result_take(r, k));
        free(tokcopy);
        tokcopy = sx_result_token(r) ? strdup(sx_result_token(r)) : NULL;
        tok = tokcopy;
        sx_result_free(r);
        if (!tok || (q->limit && g->n >= q->limit))
            break;
    }
    free(tokcopy);
    return rc;
}

static const char *cons_name(sx_consistency c)
{
    return c == SX_EVENTUAL ? "eventual" : c == SX_STRONG ? "strong" : "verified";
}

static void describe(const mquery *q, sx_consistency cons, char *buf, size_t n)
{
    snprintf(buf, n, "%s %s k=%d eq=[%s%s%s] %s%s%s%s%s%s limit=%" PRIu64 " page=%" PRIu64 "%s%s",
             cons_name(cons), q->index, q->k, q->k > 0 ? TOWNS[q->eq_town] : "",
             q->k > 1 ? "," : "", q->k > 1 ? LASTS[q->eq_last] : "", q->has_range ? "from=" : "",
             q->has_range && q->from ? q->from : "", q->has_range ? " to=" : "",
             q->has_range && q->to ? q->to : "", q->prefix ? "prefix=" : "",
             q->prefix ? q->prefix : "", q->limit, q->page, q->desc ? " desc" : "",
             q->attrs ? " attrs" : "");
}

/* Runs q against the cluster and the model; counts a mismatch. */
static void check_query(test *t, const mquery *q, sx_consistency cons)
{
    int *ids = malloc((size_t)t->nkeys * sizeof *ids);
    got_list g = { 0 };
    char what[256];
    if (!ids)
        die(t, SX_ENOMEM, "malloc");
    describe(q, cons, what, sizeof what);
    int n = model_query(t, q, ids);
    int rc = cluster_query(t, q, cons, &g);
    t->queries++;
    bool ok = rc == 0 && g.n == (size_t)n;
    for (int k = 0; ok && k < n; k++)
        ok = item_equal(t, g.v[k], ids[k], q->attrs, q->nattrs);
    if (!ok) {
        t->failures++;
        fprintf(stderr, "MISMATCH %s: %s\n  want %d ids:", what, rc ? sx_client_errmsg(t->c) : "",
                n);
        for (int k = 0; k < n && k < 40; k++)
            fprintf(stderr, " %d", ids[k]);
        fprintf(stderr, "\n  got %zu ids:", g.n);
        for (size_t k = 0; k < g.n && k < 40; k++) {
            int64_t id = -1;
            sx_item_get_int(g.v[k], "id", &id);
            fprintf(stderr, " %" PRId64, id);
        }
        fprintf(stderr, "\n");
    }
    got_free(&g);
    free(ids);
}

/* ---- the write phase ---- */

static sx_item *key_item(test *t, int id)
{
    sx_item *k = sx_item_new();
    if (!k || sx_item_set_int(k, "id", id))
        die(t, SX_ENOMEM, "key item");
    return k;
}

/* A strong query on the item's (town, lastname) or town must show it as
 * the model has it (read-your-writes). */
static void check_ryw(test *t, int id)
{
    const mitem *mi = &t->m[id];
    mquery q = { 0 };
    q.index = mi->last >= 0 ? "by_tl" : "by_town";
    q.k = mi->last >= 0 ? 2 : 1;
    q.eq_town = mi->town;
    q.eq_last = mi->last;
    check_query(t, &q, SX_STRONG);
}

/* One strong query for a deleted key: it must be gone. */
static void check_ryw_deleted(test *t, int id, int town)
{
    sx_value eq = sx_val_str(TOWNS[town]);
    sx_query_opts o = { .eq = &eq, .neq = 1, .consistency = SX_STRONG };
    const char *tok = NULL;
    char *copy = NULL;
    t->queries++;
    for (;;) {
        sx_result *r;
        o.token = tok;
        int rc = sx_query(t->c, t->table, "by_town", &o, &r);
        if (rc)
            die(t, rc, "strong query after delete of %d", id);
        for (size_t k = 0; k < sx_result_count(r); k++) {
            int64_t got;
            if (sx_item_get_int(sx_result_item(r, k), "id", &got) == SX_OK && got == id) {
                fprintf(stderr, "MISMATCH: deleted id %d still returned by a strong query\n", id);
                t->failures++;
            }
        }
        free(copy);
        copy = sx_result_token(r) ? strdup(sx_result_token(r)) : NULL;
        tok = copy;
        sx_result_free(r);
        if (!tok)
            break;
    }
}

static void do_put(test *t, int id, bool ryw)
{
    random_update(t, id);
    sx_item *it = model_item(t, id);
    uint64_t v = 0;
    int rc = sx_put(t->c, t->table, it, &v);
    sx_item_free(it);
    if (rc)
        die(t, rc, "put %d", id);
    if (ryw)
        check_ryw(t, id);
}

static void do_batch(test *t)
{
    sx_item *items[16];
    uint64_t versions[16];
    int n = 2 + rnd_below(t, 14), used[16];
    for (int k = 0; k < n; k++) {
        int id;
        bool dup;
        do { /* distinct keys: the model cannot tell which duplicate wins */
            id = rnd_below(t, t->nkeys);
            dup = false;
            for (int j = 0; j < k; j++)
                dup |= used[j] == id;
        } while (dup);
        used[k] = id;
        random_update(t, id);
        items[k] = model_item(t, id);
    }
    int rc = sx_put_batch(t->c, t->table, (const sx_item *const *)items, (size_t)n, versions);
    for (int k = 0; k < n; k++)
        sx_item_free(items[k]);
    if (rc)
        die(t, rc, "put batch of %d", n);
}

static void do_delete(test *t, int id, bool ryw)
{
    sx_item *k = key_item(t, id);
    int rc = sx_delete(t->c, t->table, k);
    sx_item_free(k);
    bool was = t->m[id].present;
    if (rc && !(rc == SX_ENOTFOUND && !was))
        die(t, rc, "delete %d (present in the model: %d)", id, was);
    t->m[id].present = false;
    if (ryw && was)
        check_ryw_deleted(t, id, t->m[id].town);
}

/* Point gets of every key must match the model. */
static void check_gets(test *t)
{
    for (int id = 0; id < t->nkeys; id++) {
        sx_item *k = key_item(t, id), *got = NULL;
        int rc = sx_get(t->c, t->table, k, &got);
        sx_item_free(k);
        t->queries++;
        if (t->m[id].present ? (rc || !item_equal(t, got, id, NULL, 0)) : rc != SX_ENOTFOUND) {
            fprintf(stderr, "MISMATCH get %d: rc %d (%s), present %d\n", id, rc, sx_strerror(rc),
                    t->m[id].present);
            t->failures++;
        }
        sx_item_free(got);
    }
}

/* Under index lag a verified query may miss items, but every item it
 * returns must be current (equal to the model, which is up to date: this
 * test writes from one thread) and match the query, in index order. */
static void check_verified_sound(test *t, int town)
{
    sx_value eq = sx_val_str(TOWNS[town]);
    sx_query_opts o = { .eq = &eq, .neq = 1, .consistency = SX_VERIFIED };
    sx_result *r = NULL;
    sx_explain ex;
    int prev = -1;
    t->queries++;
    int rc = sx_query(t->c, t->table, "by_tl", &o, &r);
    if (rc)
        die(t, rc, "verified query during writes");
    sx_result_explain(r, &ex);
    t->stale_dropped += ex.stale;
    for (size_t k = 0; k < sx_result_count(r); k++) {
        int64_t id = -1;
        const sx_item *it = sx_result_item(r, k);
        bool ok = sx_item_get_int(it, "id", &id) == SX_OK && id >= 0 && id < t->nkeys &&
                  t->m[id].present && t->m[id].town == town && t->m[id].last >= 0 &&
                  item_equal(t, it, (int)id, NULL, 0);
        if (ok && prev >= 0) {
            g_sort_test = t;
            g_sort_index = "by_tl";
            ok = model_cmp(&prev, &(int){ (int)id }) < 0;
        }
        if (!ok) {
            fprintf(stderr,
                    "MISMATCH: verified query for %s returned stale, foreign or "
                    "misordered item id %" PRId64 "\n",
                    TOWNS[town], id);
            t->failures++;
        }
        prev = (int)id;
    }
    sx_result_free(r);
}

static void write_phase(test *t, int ops, int ryw_every)
{
    for (int op = 0; op < ops; op++) {
        int dice = rnd_below(t, 100), id = rnd_below(t, t->nkeys);
        bool ryw = ryw_every && op % ryw_every == 0;
        if (dice < 70)
            do_put(t, id, ryw);
        else if (dice < 80)
            do_batch(t);
        else
            do_delete(t, id, ryw);
        if (ryw_every && op % ryw_every == ryw_every / 2)
            check_verified_sound(t, rnd_below(t, NTOWNS));
    }
}

/* ---- waiting ---- */

/* Waits until index answers queries (SX_ENOTREADY while it is building;
 * the router refreshes its catalog on that path). */
static void wait_ready(test *t, const char *index)
{
    double deadline = now_s() + 60;
    for (;;) {
        sx_query_opts o = { .consistency = SX_EVENTUAL, .limit = 1 };
        sx_result *r = NULL;
        int rc = sx_query(t->c, t->table, index, &o, &r);
        sx_result_free(r);
        if (rc == SX_OK)
            return;
        if (rc != SX_ENOTREADY)
            die(t, rc, "query on index %s", index);
        if (now_s() > deadline)
            die(t, SX_ETIMEDOUT, "index %s not ready after 60 s", index);
        pause_ms(20);
    }
}

/* A strong full-index query returns only once every covering index
 * partition has applied every write acknowledged before it began: after
 * that the index lag is zero (no writes follow). Retried up to a deadline
 * when the strong wait times out. */
static void wait_lag_zero(test *t, const char *index)
{
    double deadline = now_s() + 60;
    for (;;) {
        sx_query_opts o = { .consistency = SX_STRONG, .limit = 1 };
        sx_result *r = NULL;
        int rc = sx_query(t->c, t->table, index, &o, &r);
        sx_result_free(r);
        if (rc == SX_OK)
            return;
        if (rc != SX_ETIMEDOUT || now_s() > deadline)
            die(t, rc, "waiting for index %s to catch up", index);
    }
}

/* ---- the query rounds ---- */

static void query_round(test *t, sx_consistency cons)
{
    static const char *prefixes[] = { "Ba", "Jo", "Sm", "S", "Q", "" };
    static const char *const sel[] = { "town", "lastname" };
    mquery q;
    for (int town = 0; town < (int)NTOWNS; town++) {
        for (int desc = 0; desc < 2; desc++) {
            q = (mquery){ .index = "by_tl", .k = 1, .eq_town = town, .desc = desc };
            check_query(t, &q, cons);
            q.index = "by_town";
            check_query(t, &q, cons);
        }
        q = (mquery){ .index = "by_tl", .k = 2, .eq_town = town, .eq_last = rnd_below(t, NLASTS) };
        check_query(t, &q, cons);
        for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++) {
            q = (mquery){
                .index = "by_tl", .k = 1, .eq_town = town, .prefix = prefixes[p], .desc = (int)p % 2
            };
            check_query(t, &q, cons);
        }
        q = (mquery){ .index = "by_tl",
                      .k = 1,
                      .eq_town = town,
                      .has_range = true,
                      .from = "Baker",
                      .to = "Smith" };
        check_query(t, &q, cons);
        /* only covered attributes: answered from the keys-only index */
        q = (mquery){ .index = "by_town", .k = 1, .eq_town = town, .attrs = sel, .nattrs = 1 };
        check_query(t, &q, cons);
    }
    /* ranges on town (k = 0), across the split point M */
    const char *bounds[][2] = { { "Bellevue", "Redmond" }, { "Kent", NULL }, { NULL, "Kent" },
                                { "Kent", "Kent" },        { "B", "S" },     { "Z", NULL } };
    for (size_t b = 0; b < sizeof bounds / sizeof *bounds; b++) {
        q = (mquery){ .index = "by_tl",
                      .has_range = true,
                      .from = bounds[b][0],
                      .to = bounds[b][1],
                      .desc = (int)b % 2 };
        check_query(t, &q, cons);
    }
    /* the whole index, both orders; limits; small pages with tokens */
    for (int desc = 0; desc < 2; desc++) {
        q = (mquery){ .index = "by_tl", .desc = desc };
        check_query(t, &q, cons);
        q.limit = 1;
        check_query(t, &q, cons);
        q.limit = 17;
        check_query(t, &q, cons);
        q.limit = 0;
        q.page = 7;
        check_query(t, &q, cons);
        q.limit = 50;
        check_query(t, &q, cons);
        q = (mquery){ .index = "by_town", .desc = desc, .page = 13 };
        check_query(t, &q, cons);
        q = (mquery){ .index = "by_tl",
                      .k = 1,
                      .eq_town = 3,
                      .desc = desc,
                      .page = 3,
                      .attrs = sel,
                      .nattrs = 2 };
        check_query(t, &q, cons);
    }
}

/* The index created after the writes (backfilled) must match too. */
static void backfill_round(test *t, sx_consistency cons)
{
    mquery q = { .index = "by_last" };
    check_query(t, &q, cons);
    q.desc = true;
    q.page = 11;
    check_query(t, &q, cons);
    q = (mquery){ .index = "by_last", .prefix = "Sm" };
    check_query(t, &q, cons);
}

/* ---- main ---- */

/* sx_table_key: the key attributes of the test's table (no sort key), of a
 * table with one, and SX_ENOTABLE for an unknown table. */
static void check_table_key(test *t)
{
    char *pk = NULL, *sk = NULL, name[96];
    int rc = sx_table_key(t->c, t->table, &pk, &sk);
    if (rc || !pk || strcmp(pk, "id") != 0 || sk != NULL)
        die(t, rc ? rc : SX_EPROTO, "table_key %s: pk %s sk %s", t->table, pk ? pk : "(null)",
            sk ? sk : "(null)");
    sx_free(pk);
    snprintf(name, sizeof name, "%s_sk", t->table);
    if ((rc = sx_table_create(t->c, name, "u", "n")))
        die(t, rc, "table create %s", name);
    rc = sx_table_key(t->c, name, &pk, &sk);
    if (rc || !pk || !sk || strcmp(pk, "u") != 0 || strcmp(sk, "n") != 0)
        die(t, rc ? rc : SX_EPROTO, "table_key %s: pk %s sk %s", name, pk ? pk : "(null)",
            sk ? sk : "(null)");
    sx_free(pk);
    sx_free(sk);
    rc = sx_table_key(t->c, "no_such_table_here", &pk, &sk);
    if (rc != SX_ENOTABLE || pk || sk)
        die(t, rc ? rc : SX_EPROTO, "table_key of an unknown table: %d, expected SX_ENOTABLE", rc);
}

static void setup(test *t)
{
    const char *tl[] = { "town", "lastname" }, *town[] = { "town" };
    int rc = sx_table_create(t->c, t->table, "id", NULL);
    if (rc)
        die(t, rc, "table create %s", t->table);
    check_table_key(t);
    if ((rc = sx_index_create(t->c, t->table, "by_tl", tl, 2, SX_PROJ_ALL, NULL, 0)))
        die(t, rc, "index create by_tl");
    if ((rc = sx_index_create(t->c, t->table, "by_town", town, 1, SX_PROJ_KEYS, NULL, 0)))
        die(t, rc, "index create by_town");
    wait_ready(t, "by_tl");
    wait_ready(t, "by_town");
}

int main(int argc, char **argv)
{
    test t = { 0 };
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    int ops = 3000;
    const char *url = NULL;
    t.nkeys = 150;
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--seed") == 0 && k + 1 < argc)
            seed = strtoull(argv[++k], NULL, 10);
        else if (strcmp(argv[k], "--ops") == 0 && k + 1 < argc)
            ops = atoi(argv[++k]);
        else if (strcmp(argv[k], "--keys") == 0 && k + 1 < argc)
            t.nkeys = atoi(argv[++k]);
        else if (argv[k][0] != '-' && !url)
            url = argv[k];
        else {
            fprintf(stderr, "usage: model_test ROUTER-URL [--seed N] [--ops N] [--keys N]\n");
            return 2;
        }
    }
    if (!url || ops < 0 || t.nkeys < 1) {
        fprintf(stderr, "usage: model_test ROUTER-URL [--seed N] [--ops N] [--keys N]\n");
        return 2;
    }
    printf("model_test: seed %" PRIu64 " (rerun with --seed %" PRIu64 "), %d ops, %d keys\n", seed,
           seed, ops, t.nkeys);
    fflush(stdout);
    t.rng = seed ? seed : 1;
    t.m = calloc((size_t)t.nkeys, sizeof *t.m);
    if (!t.m)
        return 1;
    snprintf(t.table, sizeof t.table, "model_%" PRIu64 "_%d", seed % 1000000000u, (int)getpid());
    int rc = sx_client_open(url, &t.c);
    if (rc)
        die(&t, rc, "open %s", url);
    setup(&t);
    double t0 = now_s();
    write_phase(&t, ops, 25);
    printf("model_test: %d ops in %.1f s; verified queries during the writes dropped %" PRIu64
           " stale hits\n",
           ops, now_s() - t0, t.stale_dropped);
    check_gets(&t);
    const char *last[] = { "lastname" };
    if ((rc = sx_index_create(t.c, t.table, "by_last", last, 1, SX_PROJ_ALL, NULL, 0)))
        die(&t, rc, "index create by_last");
    wait_ready(&t, "by_last");
    sx_consistency levels[] = { SX_STRONG, SX_VERIFIED, SX_EVENTUAL };
    for (int l = 0; l < 3; l++) {
        if (levels[l] != SX_STRONG) {
            wait_lag_zero(&t, "by_tl");
            wait_lag_zero(&t, "by_town");
            wait_lag_zero(&t, "by_last");
        }
        long before = t.failures;
        query_round(&t, levels[l]);
        backfill_round(&t, levels[l]);
        printf("model_test: %s round: %s\n", cons_name(levels[l]),
               t.failures == before ? "ok" : "MISMATCHES");
        fflush(stdout);
    }
    printf("model_test: %ld checks, %ld failures (seed %" PRIu64 ")\n", t.queries, t.failures,
           seed);
    sx_client_close(t.c);
    free(t.m);
    return t.failures ? 1 : 0;
}
