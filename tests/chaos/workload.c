/*
 * workload.c — shardex-chaos-workload: the workloads of the chaos harness.
 * N client threads run one model's operations against a table through the
 * routers and record every operation, as an invocation line before the call
 * and a completion line after it, in the history format of
 * tests/chaos/README.md, for `shardex-chaos-check --model MODEL`:
 *
 *   register  put, get and delete a few hot keys; items {"id": "k<i>",
 *             "v": <int64>}, each put writing a value no other put writes:
 *             (thread + 1) * 1e9 + counter.
 *   set       add unique elements (a put of {"id": "e<n>", "s": 1}, n
 *             unique as above; the history's value is n) and read the set
 *             (a full scan of the table, every page).
 *   index     move keys between the values of an indexed attribute (a put
 *             of {"id": "k<i>", "g": X}, or a delete: the key leaves the
 *             index) and query the index "by_g" for a value at `strong` or
 *             `verified`, every page; the index (on g, keys projected) is
 *             made when missing and waited for until ready.
 *
 * Usage:
 *   shardex-chaos-workload --router URL[,URL...] --table NAME --out FILE
 *       [--model register|set|index] [--clients N] [--keys K]
 *       [--duration SECONDS] [--seed N] [--timeout-ms MS] [--backoff-ms MS]
 *
 * The table (partition key "id", no sort key) is made with
 * sx_table_create(c, NAME, "id", NULL) when missing (SX_EEXIST is fine).
 * Each thread has its own sx_client (a client is one thread at a time) and
 * starts as process <thread>. With several router URLs, thread t's client
 * is given the list rotated to begin at URL (t + m) mod n, m the model's
 * number (register 0, set 1, index 2): libshardex calls the first router of
 * its list until that one fails, so the threads are spread over the
 * routers, as independent clients would be. In the register model each
 * get goes instead through one router drawn at random, alone (a client of
 * that router only, thread t's pin[j], with a timeout of at most 1 s): it
 * reads what that router's node can reach, as a client given a single
 * router URL does. Clients of the
 * whole list leave a router that stops answering at their first timeout,
 * so without these a node cut off by a partition is never read through
 * its own router; its completion line names the router ("router": j, the
 * URL's index in the list); after an operation ends "info" the thread
 * goes on as a new process (thread + N * m), as Jepsen does with a crashed
 * process. When the duration is over, one more process makes the final
 * reads, each retried up to 20 times until ok: register a get of every
 * key, set one read, index a strong query of every value. The index model
 * then checks the quiescent index against the facts (final_index_check):
 * for every value an eventual query (the index alone) must equal the keys
 * a full scan finds with that value, retried for up to 10 s while the
 * index catches up; it prints "index-quiescent: pass (...)" or
 * "index-quiescent: FAIL ..." (then exit status 3).
 *
 * Outcomes (see outcome()): 0 is ok, and so is SX_ENOTFOUND for a get
 * (value null) and for a delete (the key is absent after it either way).
 * fail, certainly not made: SX_EINVAL, SX_EKEY, SX_ETOOBIG (the request
 * itself is refused, on every attempt alike), for queries also
 * SX_ENOINDEX and SX_ENOTREADY; with a single router also SX_ENOTABLE,
 * SX_ESTALECAT and SX_EDEADLINE (refused before any write; with several
 * routers an earlier attempt that timed out on another router may have
 * been applied). Anything else (SX_ETIMEDOUT, SX_ENET, SX_EUNAVAIL,
 * SX_EIO, ...) is info: unknown.
 *
 * A thread pauses --backoff-ms (default 100) after an operation that did
 * not end ok, as a client backs off from a failing cluster: without it a
 * thread whose key's node is down fails as fast as the router answers, and
 * every info write of that outage is one the checker must try to place at
 * any instant after its invocation, which can make its search give up.
 *
 * Every line is written whole under one mutex, its "time" (CLOCK_MONOTONIC
 * nanoseconds) taken under that mutex, so times never decrease in the file.
 * Exit status: 0 when the workload ran (whatever its operations' outcomes),
 * 1 when it could not start (router URL, table, index, output file), 2 on a
 * usage error, 3 when the index model's quiescent check failed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "shardex.h"

#define FINAL_TRIES 20
#define INDEX_NAME "by_g"
#define NVALUES 4
#define READY_WAIT_MS 60000
#define QUIESCENT_WAIT_MS 10000
#define MAX_KEYS 1000
/* A pinned get's timeout at most (a read is safe to give up): a thread
 * whose get meets a paused router is held that long, not --timeout-ms. */
#define PIN_TIMEOUT_MS 1000

/* The indexed values: two below the local cluster's index split "M", two
 * above it (one replica a partition; with 3 replicas the splits are "H"
 * and "P": two, one and one), so that moves cross index partitions. */
static const char *const g_values[NVALUES] = { "Amber", "Blue", "Red", "Teal" };

enum model { M_REGISTER, M_SET, M_INDEX };
enum { F_PUT, F_GET, F_DELETE, F_ADD, F_READ, F_MOVE, F_QUERY };
static const char *const f_names[] = { "put", "get", "delete", "add", "read", "move", "query" };

typedef struct opts {
    const char *router;
    const char *table;
    const char *out;
    enum model model;
    int clients;
    int keys;
    int duration;
    uint64_t seed;
    int timeout_ms;
    int backoff_ms;
    bool one_router;
} opts;

typedef struct worker {
    const opts *o;
    int thread;
    sx_client *c;
    sx_client **pin; /* register gets: a client of each router alone, or NULL */
    int npin;
    uint64_t rng;
    long ops, ok, fail, info;
    int err; /* nonzero when the thread stopped on a local error */
} worker;

/* A growable text buffer (a history line's fields, a result array). */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *out_f;
static int out_err; /* a write to out_f failed */
static uint64_t end_ns;

/* The comma-separated list with its URLs rotated to begin at URL by mod
 * their count (malloc'd; NULL when out of memory). */
static char *rotated(const char *list, int by)
{
    size_t len = strlen(list);
    char *out = malloc(len + 1);
    int n = 1;

    if (out == NULL)
        return NULL;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    const char *start = list;
    for (int k = by % n; k > 0; k--)
        start = strchr(start, ',') + 1;
    /* from start to the end, a comma, then the URLs before start */
    size_t head = (size_t)(start - list);
    memcpy(out, start, len - head);
    if (head > 0) {
        out[len - head] = ',';
        memcpy(out + len - head + 1, list, head - 1);
    }
    out[len] = '\0';
    return out;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s; /* xorshift64* */

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void sleep_ms(int ms)
{
    struct timespec d = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
    while (nanosleep(&d, &d) != 0 && errno == EINTR)
        ;
}

/* Appends printf-style text to b (sets b->oom on failure). */
static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int need;

    if (b->oom)
        return;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        need = vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (need < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)need < room) {
            b->n += (size_t)need;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap - b->n <= (size_t)need)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Writes one history line {"process", "type", "f"<fields>, "time"[, "error"]}
 * with the time taken now under the mutex; fields is text that starts with
 * ", " (or is empty); err (a static string or NULL) becomes "error". */
static void record(int64_t process, const char *type, int f, const char *fields, const char *err)
{
    char errf[96] = "";

    if (err != NULL)
        snprintf(errf, sizeof(errf), ", \"error\": \"%s\"", err);
    pthread_mutex_lock(&out_mu);
    if (fprintf(out_f,
                "{\"process\": %" PRId64 ", \"type\": \"%s\", \"f\": \"%s\"%s, \"time\": %" PRIu64
                "%s}\n",
                process, type, f_names[f], fields, now_ns(), errf) < 0)
        out_err = 1;
    pthread_mutex_unlock(&out_mu);
}

/* The outcome of an operation f that returned rc: "ok", "fail" or "info". */
static const char *outcome(const opts *o, int f, int rc)
{
    if (rc == SX_OK || (rc == SX_ENOTFOUND && (f == F_GET || f == F_DELETE || f == F_MOVE)))
        return "ok";
    switch (rc) {
    case SX_EINVAL:
    case SX_EKEY:
    case SX_ETOOBIG: return "fail";
    case SX_ENOINDEX:
    case SX_ENOTREADY: return f == F_QUERY ? "fail" : "info";
    case SX_ENOTABLE:
    case SX_ESTALECAT:
    case SX_EDEADLINE: return o->one_router ? "fail" : "info";
    default: return "info";
    }
}

/* An item {"id": "<prefix><n>"}, or NULL when out of memory. Caller frees
 * with sx_item_free. */
static sx_item *id_item(const char *prefix, int64_t n)
{
    char id[32];
    sx_item *it = sx_item_new();

    snprintf(id, sizeof(id), "%s%" PRId64, prefix, n);
    if (it == NULL || sx_item_set_str(it, "id", id) != 0) {
        sx_item_free(it);
        return NULL;
    }
    return it;
}

/* Counts outcome res of w's operation and moves *process on after info. */
static void tally(worker *w, int64_t *process, const char *res)
{
    w->ops++;
    if (strcmp(res, "ok") == 0)
        w->ok++;
    else if (strcmp(res, "fail") == 0)
        w->fail++;
    else {
        w->info++;
        *process += w->o->clients; /* a crashed process: go on as a new one */
    }
}

/* ---- register -------------------------------------------------------------- */

/* Runs and records register operation f on key as process *process
 * (value: what a put writes) through w's client, or through its pinned
 * client via when via >= 0. Returns the outcome, or NULL on a local error
 * (out of memory) with nothing recorded. */
static const char *reg_op(worker *w, int64_t *process, int f, int key, int64_t value, int via)
{
    const opts *o = w->o;
    sx_client *c = via >= 0 ? w->pin[via] : w->c;
    sx_item *it = id_item("k", key);
    sx_item *got = NULL;
    const char *res;
    char fields[96];
    int64_t v = 0;
    bool is_null = true;
    int rc;

    if (it == NULL || (f == F_PUT && sx_item_set_int(it, "v", value) != 0)) {
        sx_item_free(it);
        return NULL;
    }
    if (f == F_PUT)
        snprintf(fields, sizeof(fields), ", \"key\": \"k%d\", \"value\": %" PRId64, key, value);
    else
        snprintf(fields, sizeof(fields), ", \"key\": \"k%d\"", key);
    record(*process, "invoke", f, fields, NULL);
    if (f == F_PUT)
        rc = sx_put(c, o->table, it, NULL);
    else if (f == F_GET)
        rc = sx_get(c, o->table, it, &got);
    else
        rc = sx_delete(c, o->table, it);
    res = outcome(o, f, rc);
    if (f == F_GET && rc == SX_OK) {
        if (sx_item_get_int(got, "v", &v) == 0)
            is_null = false;
        else /* an item of this key without an integer v: none of ours */
            rc = SX_EPROTO, res = "info";
    }
    if (f == F_GET && strcmp(res, "ok") == 0) {
        if (is_null)
            snprintf(fields, sizeof(fields), ", \"key\": \"k%d\", \"value\": null", key);
        else
            snprintf(fields, sizeof(fields), ", \"key\": \"k%d\", \"value\": %" PRId64, key, v);
    }
    if (via >= 0) {
        size_t n = strlen(fields);
        snprintf(fields + n, sizeof(fields) - n, ", \"router\": %d", via);
    }
    record(*process, res, f, fields, rc ? sx_strerror(rc) : NULL);
    sx_item_free(got);
    sx_item_free(it);
    tally(w, process, res);
    return res;
}

/* One random register operation (4 puts, 4 gets, 2 deletes in 10). */
static const char *reg_step(worker *w, int64_t *process, int64_t *counter)
{
    uint64_t r = rng_next(&w->rng);
    int key = (int)(r % (uint64_t)w->o->keys);
    int pick = (int)((r >> 20) % 10);
    int f = pick < 4 ? F_PUT : pick < 8 ? F_GET : F_DELETE;
    int64_t value = (int64_t)(w->thread + 1) * 1000000000 + ++*counter;
    int via = f == F_GET && w->npin > 0 ? (int)((r >> 40) % (uint64_t)w->npin) : -1;

    return reg_op(w, process, f, key, value, via);
}

/* ---- set ------------------------------------------------------------------- */

/* Reads every item of the table (all scan pages) as a JSON array of the
 * numbers of its "e<n>" ids into b. Returns 0 or the sx_err of the page
 * that failed (b then holds a partial array). */
static int scan_ids(sx_client *c, const char *table, sbuf *b, const char *prefix)
{
    char *token = NULL;
    int rc = 0, first = 1;
    size_t pl = strlen(prefix);

    sb_printf(b, "[");
    do {
        sx_result *r = NULL;
        rc = sx_scan(c, table, NULL, 0, token, &r);
        free(token);
        token = NULL;
        if (rc != 0)
            break;
        for (size_t i = 0; i < sx_result_count(r); i++) {
            const char *id;
            size_t n;
            if (sx_item_get_str(sx_result_item(r, i), "id", &id, &n) != 0 || n <= pl ||
                strncmp(id, prefix, pl) != 0)
                continue;
            if (prefix[0] == 'e')
                sb_printf(b, "%s%.*s", first ? "" : ", ", (int)(n - pl), id + pl);
            else
                sb_printf(b, "%s\"%.*s\"", first ? "" : ", ", (int)n, id);
            first = 0;
        }
        if (sx_result_token(r) != NULL && (token = strdup(sx_result_token(r))) == NULL)
            rc = SX_ENOMEM;
        sx_result_free(r);
    } while (rc == 0 && token != NULL);
    free(token);
    sb_printf(b, "]");
    return rc;
}

/* Runs and records a set add of element n (f F_ADD) or a read (F_READ). */
static const char *set_op(worker *w, int64_t *process, int f, int64_t n)
{
    const opts *o = w->o;
    char fields[64] = "";
    sbuf b = { 0 };
    const char *res;
    int rc;

    if (f == F_ADD) {
        sx_item *it = id_item("e", n);
        if (it == NULL || sx_item_set_int(it, "s", 1) != 0) {
            sx_item_free(it);
            return NULL;
        }
        snprintf(fields, sizeof(fields), ", \"value\": %" PRId64, n);
        record(*process, "invoke", f, fields, NULL);
        rc = sx_put(w->c, o->table, it, NULL);
        sx_item_free(it);
        res = outcome(o, f, rc);
        record(*process, res, f, fields, rc ? sx_strerror(rc) : NULL);
    } else {
        record(*process, "invoke", f, "", NULL);
        sb_printf(&b, ", \"value\": ");
        rc = scan_ids(w->c, o->table, &b, "e");
        if (b.oom) {
            free(b.p);
            return NULL;
        }
        res = outcome(o, f, rc);
        record(*process, res, f, rc == 0 ? b.p : "", rc ? sx_strerror(rc) : NULL);
        free(b.p);
    }
    tally(w, process, res);
    return res;
}

/* One random set operation: 39 adds in 40, else a read. */
static const char *set_step(worker *w, int64_t *process, int64_t *counter)
{
    uint64_t r = rng_next(&w->rng);

    if (r % 40 == 0)
        return set_op(w, process, F_READ, 0);
    return set_op(w, process, F_ADD, (int64_t)(w->thread + 1) * 1000000000 + ++*counter);
}

/* ---- index ----------------------------------------------------------------- */

/* Queries index by_g for value (every page) at consistency cons, into b as
 * a JSON array of the "id" strings. Returns 0 or an sx_err. */
static int query_ids(sx_client *c, const char *table, const char *value, sx_consistency cons,
                     sbuf *b)
{
    sx_value eq = sx_val_str(value);
    char *token = NULL;
    int rc = 0, first = 1;

    sb_printf(b, "[");
    do {
        sx_query_opts q = { .eq = &eq, .neq = 1, .consistency = cons, .token = token };
        sx_result *r = NULL;
        if (cons == SX_STRONG)
            q.timeout_ms = 1500;
        rc = sx_query(c, table, INDEX_NAME, &q, &r);
        free(token);
        token = NULL;
        if (rc != 0)
            break;
        for (size_t i = 0; i < sx_result_count(r); i++) {
            const char *id;
            size_t n;
            if (sx_item_get_str(sx_result_item(r, i), "id", &id, &n) != 0)
                continue;
            sb_printf(b, "%s\"%.*s\"", first ? "" : ", ", (int)n, id);
            first = 0;
        }
        if (sx_result_token(r) != NULL && (token = strdup(sx_result_token(r))) == NULL)
            rc = SX_ENOMEM;
        sx_result_free(r);
    } while (rc == 0 && token != NULL);
    free(token);
    sb_printf(b, "]");
    return rc;
}

/* Runs and records a move of key to value vi (-1: the key leaves the index,
 * a delete). */
static const char *move_op(worker *w, int64_t *process, int key, int vi)
{
    const opts *o = w->o;
    sx_item *it = id_item("k", key);
    char fields[96];
    const char *res;
    int rc;

    if (it == NULL || (vi >= 0 && sx_item_set_str(it, "g", g_values[vi]) != 0)) {
        sx_item_free(it);
        return NULL;
    }
    if (vi >= 0)
        snprintf(fields, sizeof(fields), ", \"key\": \"k%d\", \"value\": \"%s\"", key,
                 g_values[vi]);
    else
        snprintf(fields, sizeof(fields), ", \"key\": \"k%d\", \"value\": null", key);
    record(*process, "invoke", F_MOVE, fields, NULL);
    rc = vi >= 0 ? sx_put(w->c, o->table, it, NULL) : sx_delete(w->c, o->table, it);
    sx_item_free(it);
    res = outcome(o, F_MOVE, rc);
    record(*process, res, F_MOVE, fields, rc ? sx_strerror(rc) : NULL);
    tally(w, process, res);
    return res;
}

/* Runs and records a query for value vi at strong or verified. */
static const char *query_op(worker *w, int64_t *process, int vi, bool strong)
{
    const opts *o = w->o;
    char fields[96];
    sbuf b = { 0 };
    const char *res;
    int rc;

    snprintf(fields, sizeof(fields), ", \"value\": \"%s\", \"consistency\": \"%s\"", g_values[vi],
             strong ? "strong" : "verified");
    record(*process, "invoke", F_QUERY, fields, NULL);
    sb_printf(&b, "%s, \"result\": ", fields);
    rc = query_ids(w->c, o->table, g_values[vi], strong ? SX_STRONG : SX_VERIFIED, &b);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    res = outcome(o, F_QUERY, rc);
    record(*process, res, F_QUERY, rc == 0 ? b.p : fields, rc ? sx_strerror(rc) : NULL);
    free(b.p);
    tally(w, process, res);
    return res;
}

/* One random index operation: 2 moves (1 in 8 of them out of the index), 1
 * strong and 1 verified query in 4. */
static const char *index_step(worker *w, int64_t *process, int64_t *counter)
{
    uint64_t r = rng_next(&w->rng);
    int key = (int)(r % (uint64_t)w->o->keys);
    int pick = (int)((r >> 20) % 4);
    int vi = (int)((r >> 30) % NVALUES);

    (void)counter;
    if (pick < 2)
        return move_op(w, process, key, (r >> 40) % 8 == 0 ? -1 : vi);
    return query_op(w, process, vi, pick == 2);
}

/* Makes index by_g on g (keys projected) when missing and waits until it
 * answers; 0, or -1 (said why). */
static int index_setup(sx_client *c, const char *table)
{
    const char *on[] = { "g" };
    uint64_t deadline = now_ns() + (uint64_t)READY_WAIT_MS * 1000000u;
    int rc = sx_index_create(c, table, INDEX_NAME, on, 1, SX_PROJ_KEYS, NULL, 0);

    if (rc != 0 && rc != SX_EEXIST) {
        fprintf(stderr, "shardex-chaos-workload: cannot create index %s: %s\n", INDEX_NAME,
                sx_client_errmsg(c));
        return -1;
    }
    for (;;) {
        sbuf b = { 0 };
        rc = query_ids(c, table, g_values[0], SX_EVENTUAL, &b);
        free(b.p);
        if (rc == 0)
            return 0;
        if (now_ns() > deadline) {
            fprintf(stderr, "shardex-chaos-workload: index %s not ready after %d ms: %s\n",
                    INDEX_NAME, READY_WAIT_MS, sx_strerror(rc));
            return -1;
        }
        sleep_ms(50);
    }
}

/* The quiescent check: for every value, an eventual query (the index
 * alone) equals the keys a full scan finds with that value. Retried for up
 * to QUIESCENT_WAIT_MS while they differ (the index catching up). Prints
 * the verdict; returns 0 (pass), 3 (fail) or 1 (could not tell: a query
 * or scan kept failing). */
static int final_index_check(sx_client *c, const opts *o)
{
    uint64_t deadline = now_ns() + (uint64_t)QUIESCENT_WAIT_MS * 1000000u;
    char why[512] = "";
    int tries = 0;

    for (;;) {
        int bad = 0, err = 0;
        tries++;
        for (int vi = 0; vi < NVALUES && !bad && !err; vi++) {
            sbuf q = { 0 }, s = { 0 };
            sx_value eq = sx_val_str(g_values[vi]);
            int rc = query_ids(c, o->table, g_values[vi], SX_EVENTUAL, &q);
            /* the facts: a scan with where g = value */
            char *token = NULL;
            int first = 1;
            sx_item *where = sx_item_new();
            if (rc == 0 && (where == NULL || sx_item_set_value(where, "g", &eq) != 0))
                rc = SX_ENOMEM;
            sb_printf(&s, "[");
            while (rc == 0) {
                sx_result *r = NULL;
                rc = sx_scan(c, o->table, where, 0, token, &r);
                free(token);
                token = NULL;
                if (rc != 0)
                    break;
                for (size_t i = 0; i < sx_result_count(r); i++) {
                    const char *id;
                    size_t n;
                    if (sx_item_get_str(sx_result_item(r, i), "id", &id, &n) == 0) {
                        sb_printf(&s, "%s\"%.*s\"", first ? "" : ", ", (int)n, id);
                        first = 0;
                    }
                }
                if (sx_result_token(r) != NULL && (token = strdup(sx_result_token(r))) == NULL)
                    rc = SX_ENOMEM;
                sx_result_free(r);
                if (token == NULL)
                    break;
            }
            free(token);
            sx_item_free(where);
            sb_printf(&s, "]");
            if (rc != 0 || q.oom || s.oom) {
                err = 1;
                snprintf(why, sizeof(why), "value \"%s\": %s", g_values[vi],
                         rc ? sx_strerror(rc) : "out of memory");
            } else {
                /* compare as sets: every id of one in the other, same count */
                int nq = 0, ns = 0, missing = 0;
                for (char *p = q.p; (p = strchr(p, '"')) != NULL; p = strchr(p + 1, '"') + 1)
                    nq++;
                for (char *p = s.p; (p = strchr(p, '"')) != NULL; p = strchr(p + 1, '"') + 1) {
                    char *e = strchr(p + 1, '"');
                    char id[64];
                    snprintf(id, sizeof(id), "%.*s", (int)(e - p + 1), p);
                    if (strstr(q.p, id) == NULL)
                        missing++;
                    ns++;
                }
                if (nq != ns || missing) {
                    bad = 1;
                    snprintf(why, sizeof(why),
                             "value \"%s\": the index alone answers %.150s, the facts are %.150s",
                             g_values[vi], q.p, s.p);
                }
            }
            free(q.p);
            free(s.p);
        }
        if (!bad && !err) {
            printf("index-quiescent: pass (%d values, index equal to the facts after %d "
                   "round%s)\n",
                   NVALUES, tries, tries == 1 ? "" : "s");
            return 0;
        }
        if (now_ns() > deadline) {
            printf("index-quiescent: %s %s after %d ms\n", bad ? "FAIL" : "UNKNOWN", why,
                   QUIESCENT_WAIT_MS);
            return bad ? 3 : 1;
        }
        sleep_ms(200);
    }
}

/* ---- the run --------------------------------------------------------------- */

/* Opens w's pinned clients, one for each router of the list alone; 0, or 1
 * (said on stderr). */
static int open_pins(worker *w)
{
    int n = 1;

    for (const char *p = w->o->router; *p; p++)
        n += *p == ',';
    if ((w->pin = calloc((size_t)n, sizeof(*w->pin))) == NULL) {
        fprintf(stderr, "shardex-chaos-workload: out of memory\n");
        return 1;
    }
    for (int j = 0; j < n; j++) {
        char *url = rotated(w->o->router, j), *comma;
        if (url == NULL) {
            fprintf(stderr, "shardex-chaos-workload: out of memory\n");
            return 1;
        }
        if ((comma = strchr(url, ',')) != NULL)
            *comma = '\0';
        int err = sx_client_open(url, &w->pin[j]);
        if (err != 0) {
            fprintf(stderr, "shardex-chaos-workload: cannot open %s: %s\n", url, sx_strerror(err));
            free(url);
            return 1;
        }
        free(url);
        sx_client_set_timeout(w->pin[j], w->o->timeout_ms < PIN_TIMEOUT_MS ? w->o->timeout_ms
                                                                           : PIN_TIMEOUT_MS);
        w->npin++;
    }
    return 0;
}

/* Thread body: random operations of the model until end_ns. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    int64_t process = w->thread;
    int64_t counter = 0;

    while (now_ns() < end_ns) {
        const char *res = w->o->model == M_REGISTER ? reg_step(w, &process, &counter)
                          : w->o->model == M_SET    ? set_step(w, &process, &counter)
                                                    : index_step(w, &process, &counter);

        if (res == NULL) {
            w->err = 1;
            break;
        }
        if (strcmp(res, "ok") != 0 && w->o->backoff_ms > 0)
            sleep_ms(w->o->backoff_ms);
    }
    return NULL;
}

/* The final reads by worker fin (see the header). */
static void final_reads(worker *fin)
{
    const opts *o = fin->o;
    int64_t process = INT64_C(1) << 40; /* beyond every worker's process ids */
    int n = o->model == M_REGISTER ? o->keys : o->model == M_SET ? 1 : NVALUES;

    for (int k = 0; k < n; k++) {
        const char *res = NULL;
        for (int t = 0; t < FINAL_TRIES && (res == NULL || strcmp(res, "ok") != 0); t++) {
            if (t > 0)
                sleep_ms(o->backoff_ms);
            res = o->model == M_REGISTER ? reg_op(fin, &process, F_GET, k, 0, -1)
                  : o->model == M_SET    ? set_op(fin, &process, F_READ, 0)
                                         : query_op(fin, &process, k, true);
            if (res == NULL)
                return;
        }
        if (strcmp(res, "ok") != 0)
            fprintf(stderr, "shardex-chaos-workload: final read %d never succeeded\n", k);
    }
}

static int usage(const char *why)
{
    fprintf(stderr,
            "shardex-chaos-workload: %s\n"
            "usage: shardex-chaos-workload --router URL[,URL...] --table NAME --out FILE\n"
            "       [--model register|set|index (register)] [--clients N (4)] [--keys K (5)]\n"
            "       [--duration SECONDS (5)] [--seed N] [--timeout-ms MS (2000)]\n"
            "       [--backoff-ms MS (100)]\n",
            why);
    return 2;
}

/* Parses a decimal integer in [lo, hi] into *v; false when it is not one. */
static bool parse_int(const char *s, long long lo, long long hi, long long *v)
{
    char *end;

    errno = 0;
    *v = strtoll(s, &end, 10);
    return errno == 0 && end != s && *end == '\0' && *v >= lo && *v <= hi;
}

int main(int argc, char **argv)
{
    opts o = { .clients = 4, .keys = 5, .duration = 5, .timeout_ms = 2000, .backoff_ms = 100 };
    long long v;
    worker *ws = NULL;
    pthread_t *tids = NULL;
    int started = 0, rc = 1;
    sx_client *c0 = NULL;

    o.seed = (uint64_t)now_ns();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return usage("the workload recorder of the chaos harness"), 0;
        if (val == NULL)
            return usage("an option without its value, or an unknown argument");
        i++;
        if (strcmp(a, "--router") == 0)
            o.router = val;
        else if (strcmp(a, "--table") == 0)
            o.table = val;
        else if (strcmp(a, "--out") == 0)
            o.out = val;
        else if (strcmp(a, "--model") == 0 && strcmp(val, "register") == 0)
            o.model = M_REGISTER;
        else if (strcmp(a, "--model") == 0 && strcmp(val, "set") == 0)
            o.model = M_SET;
        else if (strcmp(a, "--model") == 0 && strcmp(val, "index") == 0)
            o.model = M_INDEX;
        else if (strcmp(a, "--clients") == 0 && parse_int(val, 1, 1000, &v))
            o.clients = (int)v;
        else if (strcmp(a, "--keys") == 0 && parse_int(val, 1, MAX_KEYS, &v))
            o.keys = (int)v;
        else if (strcmp(a, "--duration") == 0 && parse_int(val, 0, 86400, &v))
            o.duration = (int)v;
        else if (strcmp(a, "--seed") == 0 && parse_int(val, 0, INT64_MAX, &v))
            o.seed = (uint64_t)v;
        else if (strcmp(a, "--timeout-ms") == 0 && parse_int(val, 1, 3600000, &v))
            o.timeout_ms = (int)v;
        else if (strcmp(a, "--backoff-ms") == 0 && parse_int(val, 0, 60000, &v))
            o.backoff_ms = (int)v;
        else
            return usage("unknown option or bad value");
    }
    if (o.router == NULL || o.table == NULL || o.out == NULL)
        return usage("--router, --table and --out are required");
    o.one_router = strchr(o.router, ',') == NULL;

    int err = sx_client_open(o.router, &c0);
    if (err != 0) {
        fprintf(stderr, "shardex-chaos-workload: cannot open %s: %s\n", o.router, sx_strerror(err));
        return 1;
    }
    sx_client_set_timeout(c0, o.timeout_ms);
    err = sx_table_create(c0, o.table, "id", NULL);
    if (err != 0 && err != SX_EEXIST) {
        fprintf(stderr, "shardex-chaos-workload: cannot create table %s: %s\n", o.table,
                sx_client_errmsg(c0));
        goto out;
    }
    if (o.model == M_INDEX && index_setup(c0, o.table) != 0)
        goto out;
    if ((out_f = fopen(o.out, "w")) == NULL) {
        fprintf(stderr, "shardex-chaos-workload: cannot open %s: %s\n", o.out, strerror(errno));
        goto out;
    }
    ws = calloc((size_t)o.clients, sizeof(*ws));
    tids = calloc((size_t)o.clients, sizeof(*tids));
    if (ws == NULL || tids == NULL) {
        fprintf(stderr, "shardex-chaos-workload: out of memory\n");
        goto out;
    }
    for (int t = 0; t < o.clients; t++) {
        ws[t].o = &o;
        ws[t].thread = t;
        ws[t].rng = (o.seed + 1) * 0x9E3779B97F4A7C15ULL + (uint64_t)t * 0xBF58476D1CE4E5B9ULL;
        if (ws[t].rng == 0)
            ws[t].rng = 1;
        char *urls = rotated(o.router, t + (int)o.model);
        if (urls == NULL) {
            fprintf(stderr, "shardex-chaos-workload: out of memory\n");
            goto out;
        }
        err = sx_client_open(urls, &ws[t].c);
        free(urls);
        if (err != 0) {
            fprintf(stderr, "shardex-chaos-workload: cannot open %s: %s\n", o.router,
                    sx_strerror(err));
            goto out;
        }
        sx_client_set_timeout(ws[t].c, o.timeout_ms);
        if (o.model == M_REGISTER && !o.one_router && open_pins(&ws[t]) != 0)
            goto out;
    }
    end_ns = now_ns() + (uint64_t)o.duration * 1000000000u;
    for (; started < o.clients; started++)
        if ((err = pthread_create(&tids[started], NULL, worker_main, &ws[started])) != 0) {
            fprintf(stderr, "shardex-chaos-workload: pthread_create: %s\n", strerror(err));
            end_ns = 0; /* the started ones stop after their operation */
            break;
        }
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (started < o.clients)
        goto out;

    worker fin = { .o = &o, .thread = o.clients, .c = c0 };
    final_reads(&fin);

    long ops = fin.ops, ok = fin.ok, fail = fin.fail, info = fin.info;
    bool local_err = fin.err != 0;
    for (int t = 0; t < o.clients; t++) {
        ops += ws[t].ops, ok += ws[t].ok, fail += ws[t].fail, info += ws[t].info;
        local_err = local_err || ws[t].err != 0;
    }
    if (local_err) {
        fprintf(stderr, "shardex-chaos-workload: out of memory in a client thread\n");
        goto out;
    }
    printf("operations %ld: ok %ld, fail %ld, info %ld\n", ops, ok, fail, info);
    rc = o.model == M_INDEX ? final_index_check(c0, &o) : 0;
    if (rc == 1) /* could not tell: the run itself went fine */
        rc = 0;
out:
    if (ws != NULL)
        for (int t = 0; t < o.clients; t++) {
            sx_client_close(ws[t].c);
            for (int j = 0; j < ws[t].npin; j++)
                sx_client_close(ws[t].pin[j]);
            free(ws[t].pin);
        }
    sx_client_close(c0);
    if (out_f != NULL) {
        if (fclose(out_f) != 0)
            out_err = 1;
        if (out_err) {
            fprintf(stderr, "shardex-chaos-workload: writing %s failed\n", o.out);
            rc = 1;
        }
    }
    free(ws);
    free(tids);
    return rc;
}
