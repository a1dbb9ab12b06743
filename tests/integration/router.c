/*
 * router.c — the router's end-to-end checks through libshardex against a
 * running cluster (started by router.sh): paging with continuation
 * tokens (secondary index across index partitions, ascending and
 * descending; primary key; scan); a token bound to its query (a genuine
 * token refused with a query that differs from its own only in direction,
 * bounds, index or table, and still taken by its own), tampered and forged
 * tokens refused; range and prefix conditions on composite indexes,
 * covering vs verified reads, updates seen by strong reads, and clear
 * errors.
 *
 *   sx-router-it URL main              all of the above (creates its own tables)
 *   sx-router-it URL strong-timeout    a strong query must fail with SX_ETIMEDOUT
 *                               (the script has frozen an index node)
 *   sx-router-it URL strong-after      a strong query sees the write made while
 *                               the index node was frozen
 *   sx-router-it URL refresh-storm     many clients at once ask for a table the
 *                               router does not know, so that its fibers
 *                               refresh the catalog concurrently: every
 *                               call must answer SX_ENOTABLE in time (no
 *                               fiber may block the others while it
 *                               fetches the catalog)
 *   sx-router-it URL scan-slice        after main: a filtered scan of its table
 *                               takes several pages (the script restarted
 *                               the storage nodes with
 *                               SHARDEX_SCAN_SLICE_MS=0) and returns each
 *                               match once
 * Exit 0 when every check passed; failed checks are printed (tests/lib/check.h).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "shardex.h"

static const char *G[3] = { "Alpha", "Mike", "Zulu" };
#define NITEMS 300

static int64_t item_int(const sx_item *it, const char *name)
{
    int64_t v = -1;

    sx_item_get_int(it, name, &v);
    return v;
}

/* Runs a query page by page; collects attribute `attr` of each item into
 * out (capacity cap). Returns the number of items, or -rc on error;
 * *pages counts pages. */
static long run_pages(sx_client *c, const char *table, const char *index, sx_query_opts o,
                      const char *attr, int64_t *out, long cap, int *pages)
{
    char *tok = NULL;
    long n = 0;

    *pages = 0;
    for (;;) {
        sx_result *r = NULL;
        int rc;
        o.token = tok;
        rc = sx_query(c, table, index, &o, &r);
        free(tok);
        tok = NULL;
        if (rc != 0) {
            fprintf(stderr, "query %s.%s: %s\n", table, index, sx_client_errmsg(c));
            return -rc;
        }
        (*pages)++;
        for (size_t i = 0; i < sx_result_count(r); i++)
            if (n < cap)
                out[n++] = item_int(sx_result_item(r, i), attr);
        if (sx_result_token(r) != NULL)
            tok = strdup(sx_result_token(r));
        sx_result_free(r);
        if (tok == NULL || *pages > 10000)
            break;
    }
    free(tok);
    return n;
}

static void wait_ready(sx_client *c, const char *table, const char *index)
{
    time_t end = time(NULL) + 60;

    while (time(NULL) < end) {
        sx_index_info *l = NULL;
        size_t n = 0;
        bool ready = false;
        if (sx_index_list(c, table, &l, &n) == 0) {
            for (size_t i = 0; i < n; i++)
                if (strcmp(l[i].name, index) == 0 && l[i].ready)
                    ready = true;
            sx_index_list_free(l, n);
        }
        if (ready)
            return;
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    CHECKF(false, "index %s.%s not ready after 60 s", table, index);
}

static void setup(sx_client *c)
{
    const char *by_g[] = { "g" }, *by_gn[] = { "g", "n" };
    sx_item *items[NITEMS];
    int rc;

    rc = sx_table_create(c, "pg", "id", NULL);
    CHECKF(rc == 0, "table create: %s", sx_client_errmsg(c));
    rc = sx_index_create(c, "pg", "by_g", by_g, 1, SX_PROJ_KEYS, NULL, 0);
    CHECKF(rc == 0, "index create: %s", sx_client_errmsg(c));
    for (int i = 0; i < NITEMS; i++) {
        items[i] = sx_item_new();
        sx_item_set_int(items[i], "id", i);
        sx_item_set_str(items[i], "g", G[i % 3]);
        sx_item_set_int(items[i], "n", i % 10);
        sx_item_set_str(items[i], "pad", "some payload to carry along");
    }
    rc = sx_put_batch(c, "pg", (const sx_item *const *)items, NITEMS, NULL);
    CHECKF(rc == 0, "put batch: %s", sx_client_errmsg(c));
    for (int i = 0; i < NITEMS; i++)
        sx_item_free(items[i]);
    /* created after the load: exercised by backfill */
    rc = sx_index_create(c, "pg", "by_gn", by_gn, 2, SX_PROJ_ALL, NULL, 0);
    CHECKF(rc == 0, "index create: %s", sx_client_errmsg(c));
    /* the same as by_g under another name (token binding: tokens) */
    rc = sx_index_create(c, "pg", "by_g2", by_g, 1, SX_PROJ_KEYS, NULL, 0);
    CHECKF(rc == 0, "index create: %s", sx_client_errmsg(c));
    wait_ready(c, "pg", "by_g");
    wait_ready(c, "pg", "by_gn");
    wait_ready(c, "pg", "by_g2");
}

static void paging_secondary(sx_client *c)
{
    int64_t got[NITEMS + 10];
    sx_value eq = sx_val_str("Alpha");
    sx_query_opts o;
    int pages;
    long n;
    bool ok = true;

    memset(&o, 0, sizeof(o));
    o.eq = &eq;
    o.neq = 1;
    o.limit = 7;
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    CHECKF(n == 100, "Alpha: %ld items", n);
    for (long i = 0; i < n; i++)
        ok = ok && got[i] == i * 3;
    CHECKF(ok, "Alpha ids are 0,3,6,... in order");
    CHECKF(pages == 15, "Alpha in pages of 7: %d pages", pages);

    o.desc = 1;
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    ok = n == 100;
    for (long i = 0; ok && i < n; i++)
        ok = got[i] == (99 - i) * 3;
    CHECKF(ok, "Alpha descending: %ld items", n);

    /* whole index, crossing from index partition 101 to 102 */
    memset(&o, 0, sizeof(o));
    o.limit = 50;
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    ok = n == NITEMS;
    for (long i = 0; ok && i < n; i++)
        ok = got[i] == (i % 100) * 3 + i / 100;
    CHECKF(ok, "whole index in (g, id) order: %ld items", n);
    CHECKF(pages >= 6 && pages <= 7, "whole index: %d pages of 50", pages);
    o.limit = 1000; /* one page; ~75 facts per storage partition */
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    ok = n == NITEMS && pages == 1;
    for (long i = 0; ok && i < n; i++)
        ok = got[i] == (i % 100) * 3 + i / 100;
    CHECKF(ok, "whole index in one page of 1000: %ld items, %d pages", n, pages);
    o.limit = 50;
    o.desc = 1;
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    ok = n == NITEMS;
    for (long i = 0; ok && i < n; i++)
        ok = got[NITEMS - 1 - i] == (i % 100) * 3 + i / 100;
    CHECKF(ok, "whole index descending: %ld items", n);
    printf("ok   paging over a secondary index (eq, whole index, both directions)\n");
}

/* The first page of query o on table.index (its token unset): its token,
 * strdup'd, or NULL (a failed check). */
static char *first_token(sx_client *c, const char *what, const char *table, const char *index,
                         sx_query_opts o)
{
    sx_result *r = NULL;
    char *tok = NULL;
    int rc;

    o.token = NULL;
    rc = sx_query(c, table, index, &o, &r);
    CHECKF(rc == 0 && sx_result_token(r) != NULL, "%s: a first page with a token: rc %d (%s)", what,
           rc, sx_client_errmsg(c));
    if (rc == 0) {
        if (sx_result_token(r) != NULL)
            tok = strdup(sx_result_token(r));
        sx_result_free(r);
    }
    return tok;
}

/* Query o on table.index with token tok: the next page comes, its first
 * item's attribute attr equal to want (the token is genuine and this is
 * its query). */
static void token_accepted(sx_client *c, const char *what, const char *table, const char *index,
                           sx_query_opts o, const char *tok, const char *attr, int64_t want)
{
    sx_result *r = NULL;
    int64_t first = -1;
    int rc;

    o.token = tok;
    rc = sx_query(c, table, index, &o, &r);
    if (rc == 0 && sx_result_count(r) > 0)
        first = item_int(sx_result_item(r, 0), attr);
    CHECKF(rc == 0 && first == want,
           "%s: the token's own query goes on at %s %lld: rc %d "
           "(%s), first %s %lld",
           what, attr, (long long)want, rc, sx_client_errmsg(c), attr, (long long)first);
    if (rc == 0)
        sx_result_free(r);
}

/* The router's answer to a token that does not open for the query it
 * comes with (router/query.c) */
#define ANOTHER_QUERY "belongs to another query"

/* Query o on table.index with token tok, a genuine token of another query
 * (token_accepted takes it with its own): refused as SX_ETOKEN with the
 * router's message. */
static void token_refused(sx_client *c, const char *what, const char *table, const char *index,
                          sx_query_opts o, const char *tok)
{
    sx_result *r = NULL;
    int rc;

    o.token = tok;
    rc = sx_query(c, table, index, &o, &r);
    CHECKF(rc == SX_ETOKEN && strstr(sx_client_errmsg(c), ANOTHER_QUERY) != NULL,
           "%s: rc %d (%s)%s", what, rc, sx_client_errmsg(c),
           rc == 0 ? ": the router answered a page with the other query's token" : "");
    if (rc == 0)
        sx_result_free(r);
}

/* Two tables of one shape, tk_a and tk_b (key k, sort key s; k = 1 with
 * s = 1..20 in each): false when they could not be made. */
static bool twin_tables(sx_client *c)
{
    const char *names[2] = { "tk_a", "tk_b" };
    sx_item *items[20];
    int rc = 0;

    for (int t = 0; t < 2 && rc == 0; t++) {
        rc = sx_table_create(c, names[t], "k", "s");
        CHECKF(rc == 0, "table create %s: %s", names[t], sx_client_errmsg(c));
        for (int i = 0; i < 20; i++) {
            items[i] = sx_item_new();
            sx_item_set_int(items[i], "k", 1);
            sx_item_set_int(items[i], "s", i + 1);
        }
        if (rc == 0) {
            rc = sx_put_batch(c, names[t], (const sx_item *const *)items, 20, NULL);
            CHECKF(rc == 0, "put %s: %s", names[t], sx_client_errmsg(c));
        }
        for (int i = 0; i < 20; i++)
            sx_item_free(items[i]);
    }
    return rc == 0;
}

/* Continuation tokens. A token is bound to its query (kind, table, index,
 * direction, bounds: router/token.h): each binding check presents a
 * genuine, unmodified token — one its own query goes on with, before and
 * after — with a query that differs from its own in one bound attribute
 * only, chosen so that the token's position lies inside the other query's
 * range (other direction, other bounds around it, another index of the
 * same attribute and entries, another table of the same shape and keys):
 * without the binding the router would answer a page. A token with one
 * character changed fails its MAC; a forged one too. */
static void tokens(sx_client *c)
{
    sx_value a = sx_val_str("Alpha"), z = sx_val_str("Zulu"), k1 = sx_val_int(1);
    sx_query_opts o, q;
    sx_result *r = NULL;
    char *tok, *bad;
    size_t k, n;
    int rc;

    memset(&o, 0, sizeof(o));
    o.eq = &a;
    o.neq = 1;
    o.limit = 7;
    tok = first_token(c, "Alpha by 7", "pg", "by_g", o);
    if (tok == NULL)
        return;
    token_accepted(c, "Alpha by 7", "pg", "by_g", o, tok, "id", 21);

    /* tampered: one character of the body, then of the MAC, changed */
    n = strlen(tok);
    for (int part = 0; part < 2; part++) {
        bad = strdup(tok);
        k = part == 0 ? n / 4 : n - 3;
        bad[k] = bad[k] == 'A' ? 'B' : 'A';
        o.token = bad;
        rc = sx_query(c, "pg", "by_g", &o, &r);
        CHECKF(rc == SX_ETOKEN && strstr(sx_client_errmsg(c), "tampered") != NULL,
               "token with a character of its %s changed: rc %d (%s)", part == 0 ? "body" : "MAC",
               rc, sx_client_errmsg(c));
        if (rc == 0)
            sx_result_free(r);
        free(bad);
    }
    o.token = NULL;

    /* the same token with a query that differs in one bound attribute */
    q = o;
    q.desc = 1;
    token_refused(c, "token given with the other direction", "pg", "by_g", q, tok);
    q = o;
    q.eq = NULL;
    q.neq = 0;
    q.prefix = "Al";
    token_refused(c, "token given with other bounds around its position (prefix Al)", "pg", "by_g",
                  q, tok);
    q = o;
    q.eq = &z;
    token_refused(c, "token given with other bounds (g = Zulu)", "pg", "by_g", q, tok);
    token_refused(c, "token given with another index of the same attribute (by_g2)", "pg", "by_g2",
                  o, tok);
    rc = sx_scan(c, "pg", NULL, 10, tok, &r);
    CHECKF(rc == SX_ETOKEN, "query token given to a scan: rc %d (%s)", rc, sx_client_errmsg(c));
    if (rc == 0)
        sx_result_free(r);
    /* and it was the query, not the token: its own still takes it */
    token_accepted(c, "Alpha by 7, after the other queries", "pg", "by_g", o, tok, "id", 21);
    free(tok);

    /* another table of the same shape: the same keys, the same range */
    if (twin_tables(c)) {
        memset(&q, 0, sizeof(q));
        q.eq = &k1;
        q.neq = 1;
        q.limit = 5;
        tok = first_token(c, "tk_a k=1 by 5", "tk_a", "primary", q);
        if (tok != NULL) {
            token_accepted(c, "tk_a k=1 by 5", "tk_a", "primary", q, tok, "s", 6);
            token_refused(c, "token given with another table of the same shape", "tk_b", "primary",
                          q, tok);
            token_accepted(c, "tk_a k=1 by 5, after", "tk_a", "primary", q, tok, "s", 6);
            free(tok);
        }
    }

    o.token = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    rc = sx_query(c, "pg", "by_g", &o, &r);
    CHECKF(rc == SX_ETOKEN, "forged token: rc %d (%s)", rc, sx_client_errmsg(c));
    if (rc == 0)
        sx_result_free(r);
    printf("ok   tokens: bound to their direction, bounds, index and table; tampered and "
           "forged ones refused (SX_ETOKEN)\n");
}

static void conditions(sx_client *c)
{
    int64_t got[NITEMS];
    sx_value eq = sx_val_str("Mike"), from = sx_val_int(3), to = sx_val_int(5);
    sx_query_opts o;
    sx_result *r = NULL;
    sx_explain ex;
    long n, want = 0;
    int pages, rc;
    bool ok = true;

    memset(&o, 0, sizeof(o));
    o.eq = &eq;
    o.neq = 1;
    o.from = &from;
    o.to = &to;
    n = run_pages(c, "pg", "by_gn", o, "id", got, NITEMS, &pages);
    for (int i = 0; i < NITEMS; i++)
        want += i % 3 == 1 && i % 10 >= 3 && i % 10 <= 5;
    CHECKF(n == want, "Mike n in 3..5: %ld items, want %ld", n, want);
    for (long i = 1; i < n; i++)
        ok = ok && (got[i - 1] % 10 < got[i] % 10 ||
                    (got[i - 1] % 10 == got[i] % 10 && got[i - 1] < got[i]));
    CHECKF(ok, "ordered by (n, id)");

    memset(&o, 0, sizeof(o));
    o.prefix = "Zu";
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS, &pages);
    CHECKF(n == 100 && got[0] == 2, "prefix Zu: %ld items", n);

    /* covering eventual (projection all) vs verified */
    memset(&o, 0, sizeof(o));
    o.eq = &eq;
    o.neq = 1;
    o.consistency = SX_EVENTUAL;
    rc = sx_query(c, "pg", "by_gn", &o, &r);
    CHECKF(rc == 0, "eventual query: %s", sx_client_errmsg(c));
    if (rc == 0) {
        sx_result_explain(r, &ex);
        CHECKF(ex.covering == 1 && ex.nfact_parts == 0 && sx_result_count(r) == 100,
               "eventual on a projection-all index is covering, reads no fact");
        sx_result_free(r);
    }
    /* verified on a projection-all index: once the index has applied
     * everything (a strong query waits for that), a verified page is proved
     * current by watermarks >= heads and answers from the index alone */
    o.consistency = SX_STRONG;
    rc = sx_query(c, "pg", "by_gn", &o, &r);
    CHECKF(rc == 0, "strong query: %s", sx_client_errmsg(c));
    if (rc == 0)
        sx_result_free(r);
    o.consistency = SX_VERIFIED;
    rc = sx_query(c, "pg", "by_gn", &o, &r);
    CHECKF(rc == 0, "verified query: %s", sx_client_errmsg(c));
    if (rc == 0) {
        sx_result_explain(r, &ex);
        CHECKF(ex.covering == 1 && ex.nfact_parts == 0 && ex.stale == 0 &&
                   sx_result_count(r) == 100,
               "verified, index current: answered from the index");
        sx_result_free(r);
    }
    /* an index that does not project what is asked: facts are read */
    rc = sx_query(c, "pg", "by_g", &o, &r);
    CHECKF(rc == 0, "verified query on a keys-only index: %s", sx_client_errmsg(c));
    if (rc == 0) {
        sx_result_explain(r, &ex);
        CHECKF(ex.covering == 0 && ex.nfact_parts > 0 && ex.stale == 0 && sx_result_count(r) == 100,
               "verified on a keys-only index reads facts");
        sx_result_free(r);
    }
    printf("ok   range and prefix conditions; covering vs verified\n");
}

static void updates(sx_client *c)
{
    sx_item *it = sx_item_new();
    sx_value a = sx_val_str("Alpha"), z = sx_val_str("Zulu");
    sx_query_opts o;
    int64_t got[NITEMS + 10];
    long n;
    int pages, rc;
    bool in_a = false, in_z = false;

    sx_item_set_int(it, "id", 3);
    sx_item_set_str(it, "g", "Zulu");
    sx_item_set_int(it, "n", 3);
    rc = sx_put(c, "pg", it, NULL);
    CHECKF(rc == 0, "update: %s", sx_client_errmsg(c));
    sx_item_free(it);
    memset(&o, 0, sizeof(o));
    o.neq = 1;
    o.consistency = SX_STRONG;
    o.eq = &a;
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    for (long i = 0; i < n; i++)
        in_a = in_a || got[i] == 3;
    o.eq = &z;
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    for (long i = 0; i < n; i++)
        in_z = in_z || got[i] == 3;
    CHECKF(!in_a && in_z, "strong reads see item 3 move from Alpha to Zulu");
    printf("ok   an update is seen by the next strong queries\n");
}

static void primary(sx_client *c)
{
    sx_item *items[260];
    int64_t got[300];
    sx_value k1 = sx_val_int(1), from = sx_val_int(100), to = sx_val_int(119);
    sx_query_opts o;
    long n;
    int pages, rc, m = 0;
    bool ok = true;

    rc = sx_table_create(c, "pk2", "k", "s");
    CHECKF(rc == 0, "table create: %s", sx_client_errmsg(c));
    for (int i = 0; i < 260; i++) {
        items[m] = sx_item_new();
        sx_item_set_int(items[m], "k", i < 250 ? 1 : 2);
        sx_item_set_int(items[m], "s", i < 250 ? 250 - i : i);
        m++;
    }
    rc = sx_put_batch(c, "pk2", (const sx_item *const *)items, (size_t)m, NULL);
    CHECKF(rc == 0, "put: %s", sx_client_errmsg(c));
    for (int i = 0; i < m; i++)
        sx_item_free(items[i]);
    memset(&o, 0, sizeof(o));
    o.eq = &k1;
    o.neq = 1;
    o.limit = 40;
    n = run_pages(c, "pk2", "primary", o, "s", got, 300, &pages);
    for (long i = 0; i < n; i++)
        ok = ok && got[i] == i + 1;
    CHECKF(n == 250 && ok, "primary k=1: %ld items in sort order", n);
    CHECKF(pages == 7, "primary in pages of 40: %d", pages);
    o.desc = 1;
    n = run_pages(c, "pk2", "primary", o, "s", got, 300, &pages);
    CHECKF(n == 250 && got[0] == 250 && got[249] == 1, "primary descending");
    o.desc = 0;
    o.from = &from;
    o.to = &to;
    n = run_pages(c, "pk2", "primary", o, "s", got, 300, &pages);
    CHECKF(n == 20 && got[0] == 100 && got[19] == 119, "primary range 100..119: %ld", n);
    printf("ok   primary-key paging and sort-key range\n");
}

/* What a scan read, page by page (scan_all). */
typedef struct scan_tally {
    long n, dups, other; /* items marked in seen, seen twice, outside it */
    int pages, over;     /* pages read; pages over the limit */
} scan_tally;

/* Scans table (where: NULL = all; limit 0 = the server's page) to its last
 * page, at most 2 * nseen + 10 pages: an item whose integer attribute attr
 * is in [0, nseen) marks seen[attr] (cleared first), the others count in
 * t->other. Returns false after a failed call (reported). */
static bool scan_all(sx_client *c, const char *table, const sx_item *where, uint32_t limit,
                     const char *attr, bool *seen, long nseen, scan_tally *t)
{
    char *tok = NULL;
    int rc = 0;

    memset(seen, 0, (size_t)nseen * sizeof(*seen));
    memset(t, 0, sizeof(*t));
    do {
        sx_result *r = NULL;
        rc = sx_scan(c, table, where, limit, tok, &r);
        free(tok);
        tok = NULL;
        CHECKF(rc == 0, "scan %s: %s", table, sx_client_errmsg(c));
        if (rc != 0)
            break;
        t->pages++;
        t->over += limit > 0 && sx_result_count(r) > limit;
        for (size_t i = 0; i < sx_result_count(r); i++) {
            int64_t v = item_int(sx_result_item(r, i), attr);
            if (v >= 0 && v < nseen) {
                t->dups += seen[v];
                seen[v] = true;
                t->n++;
            } else {
                t->other++;
            }
        }
        if (sx_result_token(r))
            tok = strdup(sx_result_token(r));
        sx_result_free(r);
    } while (tok != NULL && t->pages < 2 * nseen + 10);
    free(tok);
    return rc == 0;
}

/* Scans table pg in pages of at most `limit` items: every item once, no
 * page over the limit (each partition is asked for its share rounded up,
 * so together they may return more: the router cuts the page). */
static void scan_pages(sx_client *c, uint32_t limit)
{
    static bool seen[NITEMS];
    scan_tally t;

    if (!scan_all(c, "pg", NULL, limit, "id", seen, NITEMS, &t))
        return;
    CHECKF(t.n == NITEMS && t.dups == 0, "scan by %u: %ld items, %ld duplicates", limit, t.n,
           t.dups);
    CHECKF(t.pages >= NITEMS / (int)limit, "scan by %u: %d pages", limit, t.pages);
    CHECKF(t.over == 0, "scan by %u: %d pages over the limit", limit, t.over);
}

/* Scans table pg where g = Mike (a third of its items: the ids i with
 * i % 3 == 1) to the last page, checking each of the 100 comes once and
 * nothing else does. Returns the pages it took (0 on an error). */
static int scan_mike(sx_client *c)
{
    static bool seen[NITEMS];
    sx_item *where = sx_item_new();
    scan_tally t;
    long wrong = 0;
    bool ok;

    if (where == NULL || sx_item_set_str(where, "g", "Mike") != 0) {
        CHECKF(0, "out of memory");
        sx_item_free(where);
        return 0;
    }
    ok = scan_all(c, "pg", where, 0, "id", seen, NITEMS, &t);
    sx_item_free(where);
    if (!ok)
        return 0;
    for (int i = 0; i < NITEMS; i++)
        wrong += seen[i] != (i % 3 == 1);
    CHECKF(t.n == 100 && t.dups == 0 && t.other == 0 && wrong == 0,
           "scan where g=Mike: %ld items, %ld duplicates, %ld others, %ld wrong ids, %d pages", t.n,
           t.dups, t.other, wrong, t.pages);
    return t.pages;
}

static void scans(sx_client *c)
{
    int pages;

    scan_pages(c, 64);
    scan_pages(c, 7);
    scan_pages(c, 1);
    /* (how many pages it takes depends on the storage nodes' time slice
     * and on how fast they run: scan-slice checks the count) */
    pages = scan_mike(c);
    CHECKF(pages >= 1, "scan where g=Mike: no page");
    printf("ok   scan paging and filter\n");
}

/* The storage nodes run with SHARDEX_SCAN_SLICE_MS=0: an S_RANGE page
 * stops after ST_RANGE_SLICE_ITEMS (16) items examined, so the filtered
 * scan (75 items a partition, a page's limit 1,000: one page without the
 * slice) takes several, and still returns each match once. */
static int scan_slice(sx_client *c)
{
    int pages = scan_mike(c);

    CHECKF(pages >= 4,
           "scan where g=Mike, time slice 0: %d pages, expected at least 4 "
           "(75 items a partition, each page stopping after 16)",
           pages);
    if (CHECK_FAILED() == 0)
        printf("ok   a filtered scan cut by the storage nodes' time slice: %d pages, "
               "each match once\n",
               pages);
    return CHECK_FAILED() ? 1 : 0;
}

/* Items of ~350 KB: pages are cut by the reply byte budget, not the
 * limit, and still resume exactly (primary query, covering index query,
 * scan). */
static void big_items(sx_client *c)
{
    enum { NB = 60, SZ = 350 * 1024 };
    const char *by_tag[] = { "tag" };
    char *blob = malloc(SZ + 1);
    sx_item *items[NB];
    int64_t got[NB + 10];
    sx_value k1 = sx_val_int(7), tag = sx_val_str("t");
    sx_query_opts o;
    long n;
    int pages, rc;
    bool ok = true;

    if (blob == NULL)
        return;
    memset(blob, 'b', SZ);
    blob[SZ] = '\0';
    rc = sx_table_create(c, "big", "k", "s");
    CHECKF(rc == 0, "table create: %s", sx_client_errmsg(c));
    rc = sx_index_create(c, "big", "by_tag", by_tag, 1, SX_PROJ_ALL, NULL, 0);
    CHECKF(rc == 0, "index create: %s", sx_client_errmsg(c));
    /* keys only: a verified page fetches every fact from the one partition
     * (more than a 16 MiB frame in one S_GET) */
    rc = sx_index_create(c, "big", "by_tag_k", by_tag, 1, SX_PROJ_KEYS, NULL, 0);
    CHECKF(rc == 0, "index create: %s", sx_client_errmsg(c));
    for (int i = 0; i < NB; i++) {
        items[i] = sx_item_new();
        sx_item_set_int(items[i], "k", 7);
        sx_item_set_int(items[i], "s", i);
        sx_item_set_str(items[i], "tag", "t");
        sx_item_set_str(items[i], "blob", blob);
    }
    for (int i = 0; i < NB; i += 20) {
        rc = sx_put_batch(c, "big", (const sx_item *const *)items + i, 20, NULL);
        CHECKF(rc == 0, "put big: %s", sx_client_errmsg(c));
    }
    /* the same items with distinct partition keys, spread over every
     * storage partition, for the scan */
    rc = sx_table_create(c, "big2", "s", NULL);
    CHECKF(rc == 0, "table create: %s", sx_client_errmsg(c));
    for (int i = 0; i < NB; i += 20) {
        rc = sx_put_batch(c, "big2", (const sx_item *const *)items + i, 20, NULL);
        CHECKF(rc == 0, "put big2: %s", sx_client_errmsg(c));
    }
    for (int i = 0; i < NB; i++)
        sx_item_free(items[i]);
    free(blob);
    wait_ready(c, "big", "by_tag");

    memset(&o, 0, sizeof(o));
    o.eq = &k1;
    o.neq = 1;
    n = run_pages(c, "big", "primary", o, "s", got, NB + 10, &pages);
    for (long i = 0; i < n; i++)
        ok = ok && got[i] == i;
    CHECKF(n == NB && ok, "big primary: %ld items in order", n);
    CHECKF(pages >= 2, "big primary: %d pages (cut by bytes)", pages);

    memset(&o, 0, sizeof(o));
    o.eq = &tag;
    o.neq = 1;
    o.consistency = SX_STRONG;
    n = run_pages(c, "big", "by_tag", o, "s", got, NB + 10, &pages);
    ok = true;
    for (long i = 0; i < n; i++)
        ok = ok && got[i] == i;
    CHECKF(n == NB && ok && pages >= 2, "big index query: %ld items, %d pages", n, pages);
    o.consistency = SX_EVENTUAL;
    n = run_pages(c, "big", "by_tag", o, "s", got, NB + 10, &pages);
    CHECKF(n == NB && pages >= 2, "big covering query: %ld items, %d pages", n, pages);
    wait_ready(c, "big", "by_tag_k");
    o.consistency = SX_VERIFIED;
    n = run_pages(c, "big", "by_tag_k", o, "s", got, NB + 10, &pages);
    ok = true;
    for (long i = 0; i < n; i++)
        ok = ok && got[i] == i;
    CHECKF(n == NB && ok && pages >= 2, "big keys-only verified: %ld items, %d pages", n, pages);

    {
        bool seen[NB];
        scan_tally t;

        if (scan_all(c, "big2", NULL, 0, "s", seen, NB, &t))
            CHECKF(t.n == NB && t.dups == 0 && t.pages >= 2,
                   "big scan: %ld items, %ld dups, "
                   "%d pages",
                   t.n, t.dups, t.pages);
    }
    printf("ok   pages of big items are cut by the reply byte budget and resume\n");
}

static void errors(sx_client *c)
{
    sx_value v[3] = { sx_val_str("Mike"), sx_val_int(1), sx_val_int(2) }, f = sx_val_int(1);
    sx_query_opts o;
    sx_result *r = NULL;
    int rc;

    memset(&o, 0, sizeof(o));
    rc = sx_query(c, "pg", "nosuch", &o, &r);
    CHECKF(rc == SX_ENOINDEX && strstr(sx_client_errmsg(c), "nosuch") != NULL,
           "missing index: %d %s", rc, sx_client_errmsg(c));
    rc = sx_query(c, "nosuch", "by_g", &o, &r);
    CHECKF(rc == SX_ENOTABLE && strstr(sx_client_errmsg(c), "nosuch") != NULL,
           "missing table: %d %s", rc, sx_client_errmsg(c));
    o.eq = v;
    o.neq = 3;
    rc = sx_query(c, "pg", "by_gn", &o, &r);
    CHECKF(rc == SX_EINVAL, "too many eq values: %d %s", rc, sx_client_errmsg(c));
    o.neq = 2;
    o.from = &f;
    rc = sx_query(c, "pg", "by_gn", &o, &r);
    CHECKF(rc == SX_EINVAL, "condition with all attributes fixed: %d %s", rc, sx_client_errmsg(c));
    memset(&o, 0, sizeof(o));
    rc = sx_query(c, "pk2", "primary", &o, &r);
    CHECKF(rc == SX_EINVAL, "primary without eq: %d %s", rc, sx_client_errmsg(c));
    printf("ok   clear errors for bad queries\n");
}

/* A frozen index node: the strong wait must end at its deadline. */
static int strong_timeout(sx_client *c)
{
    sx_value z = sx_val_str("Zulu");
    sx_item *it = sx_item_new();
    sx_query_opts o;
    sx_result *r = NULL;
    struct timespec t0, t1;
    int rc;
    long ms;

    sx_item_set_int(it, "id", 1000);
    sx_item_set_str(it, "g", "Zulu");
    rc = sx_put(c, "pg", it, NULL);
    sx_item_free(it);
    CHECKF(rc == 0, "put while the index node is frozen: %s", sx_client_errmsg(c));
    memset(&o, 0, sizeof(o));
    o.eq = &z;
    o.neq = 1;
    o.consistency = SX_STRONG;
    o.timeout_ms = 700;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = sx_query(c, "pg", "by_g", &o, &r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECKF(rc == SX_ETIMEDOUT && strstr(sx_client_errmsg(c), "strong read") != NULL,
           "strong query with a frozen index node: rc %d (%s)", rc, sx_client_errmsg(c));
    CHECKF(ms >= 600 && ms < 5000, "gave up after %ld ms (timeout 700)", ms);
    if (rc == 0)
        sx_result_free(r);
    printf("ok   strong read times out (%ld ms): %s\n", ms, sx_client_errmsg(c));
    return CHECK_FAILED() ? 1 : 0;
}

static int strong_after(sx_client *c)
{
    sx_value z = sx_val_str("Zulu");
    sx_query_opts o;
    int64_t got[NITEMS + 10];
    int pages;
    long n;
    bool found = false;

    memset(&o, 0, sizeof(o));
    o.eq = &z;
    o.neq = 1;
    o.consistency = SX_STRONG;
    n = run_pages(c, "pg", "by_g", o, "id", got, NITEMS + 10, &pages);
    for (long i = 0; i < n; i++)
        found = found || got[i] == 1000;
    CHECKF(found, "strong query after the thaw sees item 1000 (%ld items)", n);
    printf("ok   strong read after the index node resumed sees the write\n");
    return CHECK_FAILED() ? 1 : 0;
}

/* ---- concurrent catalog refreshes ---- */

#define STORM_CLIENTS 16
#define STORM_ROUNDS 25

typedef struct storm_arg {
    const char *url;
    int bad;         /* calls that did not answer SX_ENOTABLE */
    char first[256]; /* the first of them */
} storm_arg;

/* One client: INDEX_LIST and GET on a missing table, alternately; each
 * makes the router refresh its catalog before it answers "no table". */
static void *storm_client(void *p)
{
    storm_arg *a = p;
    sx_client *c = NULL;
    int rc = sx_client_open(a->url, &c);

    if (rc != 0) {
        a->bad++;
        snprintf(a->first, sizeof(a->first), "open: %s", sx_strerror(rc));
        return NULL;
    }
    for (int i = 0; i < STORM_ROUNDS; i++) {
        sx_item *k = sx_item_new(), *got = NULL;
        sx_index_info *l = NULL;
        size_t n = 0;

        if (i % 2 == 0) {
            rc = sx_index_list(c, "rt_no_such_table", &l, &n);
            if (rc == 0)
                sx_index_list_free(l, n);
        } else {
            rc = k == NULL ? SX_ENOMEM : sx_item_set_int(k, "id", i);
            if (rc == 0)
                rc = sx_get(c, "rt_no_such_table", k, &got);
            sx_item_free(got);
        }
        sx_item_free(k);
        if (rc != SX_ENOTABLE && a->bad++ == 0)
            snprintf(a->first, sizeof(a->first), "round %d: %s (%s)", i, sx_strerror(rc),
                     sx_client_errmsg(c));
        if (rc == SX_ETIMEDOUT)
            break; /* the router hangs: one report is enough */
    }
    sx_client_close(c);
    return NULL;
}

static int refresh_storm(const char *url)
{
    pthread_t th[STORM_CLIENTS];
    storm_arg a[STORM_CLIENTS];
    int started = 0;

    memset(a, 0, sizeof(a));
    for (int i = 0; i < STORM_CLIENTS; i++) {
        a[i].url = url;
        if (pthread_create(&th[i], NULL, storm_client, &a[i]) != 0)
            break;
        started++;
    }
    CHECKF(started == STORM_CLIENTS, "only %d client threads started", started);
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        CHECKF(a[i].bad == 0, "client %d: %d call(s) not answered SX_ENOTABLE; first: %s", i,
               a[i].bad, a[i].first);
    }
    return CHECK_FAILED() ? 1 : 0;
}

int main(int argc, char **argv)
{
    sx_client *c = NULL;
    int rc;

    if (argc != 3) {
        fprintf(
            stderr,
            "usage: sx-router-it URL main|strong-timeout|strong-after|refresh-storm|scan-slice\n");
        return 2;
    }
    if (sx_client_open(argv[1], &c) != 0) {
        fprintf(stderr, "cannot open a client for %s\n", argv[1]);
        return 1;
    }
    if (strcmp(argv[2], "refresh-storm") == 0) {
        rc = refresh_storm(argv[1]);
    } else if (strcmp(argv[2], "strong-timeout") == 0) {
        rc = strong_timeout(c);
    } else if (strcmp(argv[2], "strong-after") == 0) {
        rc = strong_after(c);
    } else if (strcmp(argv[2], "scan-slice") == 0) {
        rc = scan_slice(c);
    } else {
        setup(c);
        paging_secondary(c);
        tokens(c);
        conditions(c);
        updates(c);
        primary(c);
        scans(c);
        big_items(c);
        errors(c);
        rc = CHECK_FAILED() ? 1 : 0;
    }
    sx_client_close(c);
    int done = CHECK_DONE();
    return rc != 0 ? rc : done;
}
