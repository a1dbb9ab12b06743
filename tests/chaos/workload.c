/*
 * workload.c — shardex-chaos-workload: the register workload of the chaos
 * harness. N client threads put, get and delete a few hot keys of one table
 * through the routers and record every operation, as an invocation line
 * before the call and a completion line after it, in the history format of
 * tests/chaos/README.md, for `shardex-chaos-check --model register`.
 *
 * Usage:
 *   shardex-chaos-workload --router URL[,URL...] --table NAME --out FILE
 *       [--clients N] [--keys K] [--duration SECONDS] [--seed N]
 *       [--timeout-ms MS] [--backoff-ms MS]
 *
 * The table (partition key "id", no sort key) is made with
 * sx_table_create(c, NAME, "id", NULL) when missing (SX_EEXIST is fine).
 * Items are {"id": "k<i>", "v": <int64>}; each put writes a value no other
 * put writes: (thread + 1) * 1e9 + counter. Each thread has its own
 * sx_client (a client is one thread at a time) and starts as process
 * <thread>; after an operation ends "info" the thread goes on as a new
 * process (thread + N * m), as Jepsen does with a crashed process. When the
 * duration is over, one more process reads every key (retrying up to 20
 * times until a get is ok) so that the final state is judged too.
 *
 * Outcomes (see outcome()): 0 is ok, and so is SX_ENOTFOUND for a get
 * (value null) and for a delete (the key is absent after it either way).
 * fail, certainly not made: SX_EINVAL, SX_EKEY, SX_ETOOBIG (the request
 * itself is refused, on every attempt alike); with a single router also
 * SX_ENOTABLE, SX_ESTALECAT and SX_EDEADLINE (refused before any write;
 * with several routers an earlier attempt that timed out on another router
 * may have been applied). Anything else (SX_ETIMEDOUT, SX_ENET,
 * SX_EUNAVAIL, SX_EIO, ...) is info: unknown.
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
 * 1 when it could not start (router URL, table, output file), 2 on a usage
 * error.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "shardex.h"

#define FINAL_TRIES 20

enum { F_PUT, F_GET, F_DELETE };
static const char *const f_names[] = { "put", "get", "delete" };

typedef struct opts {
    const char *router;
    const char *table;
    const char *out;
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
    uint64_t rng;
    long ops, ok, fail, info;
    int err; /* nonzero when the thread stopped on a local error */
} worker;

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *out_f;
static int out_err; /* a write to out_f failed */
static uint64_t end_ns;

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

/* Writes one history line: type, f, key, and value ("null" when has_value
 * is 1 and is_null, none when has_value is 0), with the time taken now
 * under the mutex; err (a static string or NULL) as an "error" field. */
static void record(int64_t process, const char *type, int f, int key, int has_value, bool is_null,
                   int64_t value, const char *err)
{
    char val[48] = "";
    char errf[96] = "";

    if (has_value && is_null)
        snprintf(val, sizeof(val), ", \"value\": null");
    else if (has_value)
        snprintf(val, sizeof(val), ", \"value\": %" PRId64, value);
    if (err != NULL)
        snprintf(errf, sizeof(errf), ", \"error\": \"%s\"", err);
    pthread_mutex_lock(&out_mu);
    if (fprintf(out_f,
                "{\"process\": %" PRId64 ", \"type\": \"%s\", \"f\": \"%s\", \"key\": \"k%d\"%s, "
                "\"time\": %" PRIu64 "%s}\n",
                process, type, f_names[f], key, val, now_ns(), errf) < 0)
        out_err = 1;
    pthread_mutex_unlock(&out_mu);
}

/* The outcome of an operation that returned rc: "ok", "fail" or "info". */
static const char *outcome(const opts *o, int f, int rc)
{
    if (rc == SX_OK || (rc == SX_ENOTFOUND && f != F_PUT))
        return "ok";
    switch (rc) {
    case SX_EINVAL:
    case SX_EKEY:
    case SX_ETOOBIG: return "fail";
    case SX_ENOTABLE:
    case SX_ESTALECAT:
    case SX_EDEADLINE: return o->one_router ? "fail" : "info";
    default: return "info";
    }
}

/* An item {"id": "k<key>"} (and "v": value when with_value), or NULL when
 * out of memory. Caller frees with sx_item_free. */
static sx_item *key_item(int key, bool with_value, int64_t value)
{
    char id[24];
    sx_item *it = sx_item_new();

    snprintf(id, sizeof(id), "k%d", key);
    if (it == NULL || sx_item_set_str(it, "id", id) != 0 ||
        (with_value && sx_item_set_int(it, "v", value) != 0)) {
        sx_item_free(it);
        return NULL;
    }
    return it;
}

/* Runs and records operation f on key as process *process of worker w
 * (value: what a put writes). Moves *process on to a new process after an
 * info outcome. Returns the outcome ("ok", "fail", "info"), or NULL on a
 * local error (out of memory) with nothing recorded. */
static const char *run_op(worker *w, int64_t *process, int f, int key, int64_t value)
{
    const opts *o = w->o;
    sx_item *it = key_item(key, f == F_PUT, value);
    sx_item *got = NULL;
    const char *res;
    int64_t v = 0;
    bool is_null = true;
    int rc;

    if (it == NULL)
        return NULL;
    record(*process, "invoke", f, key, f == F_PUT, false, value, NULL);
    if (f == F_PUT)
        rc = sx_put(w->c, o->table, it, NULL);
    else if (f == F_GET)
        rc = sx_get(w->c, o->table, it, &got);
    else
        rc = sx_delete(w->c, o->table, it);
    res = outcome(o, f, rc);
    if (f == F_GET && rc == SX_OK) {
        if (sx_item_get_int(got, "v", &v) == 0)
            is_null = false;
        else /* an item of this key without an integer v: none of ours */
            rc = SX_EPROTO, res = "info";
    }
    if (f == F_PUT)
        record(*process, res, f, key, 1, false, value, rc ? sx_strerror(rc) : NULL);
    else if (f == F_GET && strcmp(res, "ok") == 0)
        record(*process, res, f, key, 1, is_null, v, NULL);
    else
        record(*process, res, f, key, 0, false, 0, rc ? sx_strerror(rc) : NULL);
    sx_item_free(got);
    sx_item_free(it);
    w->ops++;
    if (strcmp(res, "ok") == 0)
        w->ok++;
    else if (strcmp(res, "fail") == 0)
        w->fail++;
    else {
        w->info++;
        *process += o->clients; /* a crashed process: go on as a new one */
    }
    return res;
}

/* Thread body: random operations on random keys until end_ns. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    int64_t process = w->thread;
    int64_t counter = 0;

    while (now_ns() < end_ns) {
        uint64_t r = rng_next(&w->rng);
        int key = (int)(r % (uint64_t)w->o->keys);
        int pick = (int)((r >> 20) % 10); /* 4 puts, 4 gets, 2 deletes in 10 */
        int f = pick < 4 ? F_PUT : pick < 8 ? F_GET : F_DELETE;
        int64_t value = (int64_t)(w->thread + 1) * 1000000000 + ++counter;

        const char *res = run_op(w, &process, f, key, value);

        if (res == NULL) {
            w->err = 1;
            break;
        }
        if (strcmp(res, "ok") != 0 && w->o->backoff_ms > 0) {
            struct timespec d = { .tv_sec = w->o->backoff_ms / 1000,
                                  .tv_nsec = (long)(w->o->backoff_ms % 1000) * 1000000 };
            while (nanosleep(&d, &d) != 0 && errno == EINTR)
                ;
        }
    }
    return NULL;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "shardex-chaos-workload: %s\n"
            "usage: shardex-chaos-workload --router URL[,URL...] --table NAME --out FILE\n"
            "       [--clients N (4)] [--keys K (5)] [--duration SECONDS (5)] [--seed N]\n"
            "       [--timeout-ms MS (2000)] [--backoff-ms MS (100)]\n",
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
            return usage("the register workload recorder"), 0;
        if (val == NULL)
            return usage("an option without its value, or an unknown argument");
        i++;
        if (strcmp(a, "--router") == 0)
            o.router = val;
        else if (strcmp(a, "--table") == 0)
            o.table = val;
        else if (strcmp(a, "--out") == 0)
            o.out = val;
        else if (strcmp(a, "--clients") == 0 && parse_int(val, 1, 1000, &v))
            o.clients = (int)v;
        else if (strcmp(a, "--keys") == 0 && parse_int(val, 1, 1000000, &v))
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
        if ((err = sx_client_open(o.router, &ws[t].c)) != 0) {
            fprintf(stderr, "shardex-chaos-workload: cannot open %s: %s\n", o.router,
                    sx_strerror(err));
            goto out;
        }
        sx_client_set_timeout(ws[t].c, o.timeout_ms);
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

    /* the final reads: one more process reads each key until a get is ok */
    worker fin = { .o = &o, .thread = o.clients, .c = c0 };
    int64_t process = INT64_C(1) << 40; /* beyond every worker's process ids */
    for (int k = 0; k < o.keys; k++) {
        const char *res = NULL;
        for (int n = 0; n < FINAL_TRIES && (res == NULL || strcmp(res, "ok") != 0); n++)
            if ((res = run_op(&fin, &process, F_GET, k, 0)) == NULL)
                break;
        if (res == NULL || strcmp(res, "ok") != 0)
            fprintf(stderr, "shardex-chaos-workload: no final read of k%d succeeded\n", k);
    }

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
    rc = 0;
out:
    if (ws != NULL)
        for (int t = 0; t < o.clients; t++)
            sx_client_close(ws[t].c);
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
