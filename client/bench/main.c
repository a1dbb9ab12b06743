/*
 * main.c — shardex-bench: YCSB-like workloads on the customers schema
 * through libshardex's asynchronous API (many requests in flight on one
 * client, not a thread per request). One invocation runs one workload at
 * one concurrency and prints one JSON object on stdout:
 *   {"name","system":"shardex","clients","ops_per_s","p50_us","p99_us",
 *    "p999_us","ops","errors","bad","items","seconds","resent"}
 * ("resent": W6's batches sent again after a timeout, load.c; 0 for the
 * others)
 *
 * Usage:
 *   shardex-bench --router URL --workload W1..W9 [--clients N] [--items N]
 *                 [--duration S] [--warmup S] [--seed N] [--table T]
 *                 [--indexes 0|1|2] [--index-order before|after] [--batch N]
 *                 [--rate R] [--name NAME]
 *   shardex-bench --csv N [--seed N]     the data set as CSV on stdout
 *
 * W6's --index-order: "before" (the default) creates the indexes before the
 * load, which maintains them; "after" creates them once the items are in,
 * and the load ends when they are built (PostgreSQL's COPY, then CREATE
 * INDEX). W6 sends --batch items a request (default 2,000, as `shardex load`
 * does), --clients requests in flight. W7 runs --clients probes at once
 * over its background load of --rate puts per second (lag.c).
 *
 * W9 runs W8's mix until SIGTERM (or --duration after the warm-up): each
 * SIGUSR1 marks an event (tests/bench/failover: a kill -9 of a partition's
 * leader), and each kind of operation's longest gap in service after each
 * event is reported (failover.c): lines named W9-put, W9-get and W9-query,
 * with "marks", "gaps_ms", "gap_max_ms" and "gap_median_ms" besides the
 * fields above. Failed operations are counted in "errors" and do not set
 * the exit status; failed checks do.
 *
 * Exit status: 0, 1 when any request failed or a check failed (W2 item
 * absent, W3/W5 not exactly the pair's 10 items; W4 mismatches are only
 * reported: eventual may lag), 2 usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bench.h"
#include "data.h"
#include "heap.h" /* proto/ */

typedef struct opts {
    const char *router, *table, *name;
    int wl, clients, indexes, batch;
    bool index_after;
    uint64_t items, seed, csv;
    double duration, warmup, rate;
} opts;

static int usage(const char *why)
{
    if (why)
        fprintf(stderr, "shardex-bench: %s\n", why);
    fprintf(stderr,
            "usage: shardex-bench --router URL --workload W1..W9 [--clients N] [--items N]\n"
            "                     [--duration S] [--warmup S] [--seed N] [--table T]\n"
            "                     [--indexes 0|1|2] [--index-order before|after] [--batch N]\n"
            "                     [--rate R] [--name NAME]\n"
            "       shardex-bench --csv N [--seed N]\n");
    return 2;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){ .table = "customers",
                 .clients = 1,
                 .indexes = 2,
                 .batch = 2000,
                 .items = 100000,
                 .seed = 42,
                 .duration = 10,
                 .warmup = 2 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return -1;
        if (i + 1 >= argc)
            return -2;
        const char *v = argv[++i];
        char *end = NULL;
        if (strcmp(a, "--router") == 0)
            o->router = v;
        else if (strcmp(a, "--table") == 0)
            o->table = v;
        else if (strcmp(a, "--name") == 0)
            o->name = v;
        else if (strcmp(a, "--workload") == 0) {
            if ((v[0] != 'W' && v[0] != 'w') || v[1] < '1' || v[1] > '9' || v[2])
                return -2;
            o->wl = v[1] - '0';
        } else if (strcmp(a, "--clients") == 0)
            o->clients = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--indexes") == 0)
            o->indexes = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--index-order") == 0) {
            if (strcmp(v, "before") && strcmp(v, "after"))
                return -2;
            o->index_after = strcmp(v, "after") == 0;
        } else if (strcmp(a, "--batch") == 0)
            o->batch = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--items") == 0)
            o->items = strtoull(v, &end, 10);
        else if (strcmp(a, "--seed") == 0)
            o->seed = strtoull(v, &end, 10);
        else if (strcmp(a, "--csv") == 0)
            o->csv = strtoull(v, &end, 10);
        else if (strcmp(a, "--duration") == 0)
            o->duration = strtod(v, &end);
        else if (strcmp(a, "--warmup") == 0)
            o->warmup = strtod(v, &end);
        else if (strcmp(a, "--rate") == 0)
            o->rate = strtod(v, &end);
        else
            return -2;
        if (end && *end)
            return -2;
    }
    if (o->csv)
        return 0;
    if (!o->router || !o->wl || o->clients < 1 || o->clients > 4096 || o->items < 1000 ||
        o->items % 1000 || o->indexes < 0 || o->indexes > 2 || o->batch < 1 || o->batch > 10000 ||
        o->duration <= 0 || o->warmup < 0 || (o->wl == W7 && o->rate <= 0))
        return -2;
    return 0;
}

int main(int argc, char **argv)
{
    opts o;
    heap_tune();
    int pr = parse(argc, argv, &o);
    if (pr == -1) {
        usage(NULL);
        return 0;
    }
    if (pr)
        return usage("bad arguments (items: a multiple of 1000; W7 needs --rate)");
    if (o.csv)
        return data_csv(stdout, o.seed, o.csv) == 0 ? 0 : 1;

    bench b = { .table = o.table,
                .index = "by_town",
                .n = o.items,
                .seed = o.seed,
                .wl = o.wl,
                .conc = o.clients,
                .batch = o.batch,
                .rate = o.rate };
    hist_init(&b.h);
    pthread_mutex_init(&b.lock, NULL);
    pthread_cond_init(&b.idle, NULL);
    b.id_base = (1ULL << 50) + ((uint64_t)getpid() << 24);
    int rc = sx_client_open(o.router, &b.c);
    if (rc) {
        fprintf(stderr, "shardex-bench: open %s: %s\n", o.router, sx_strerror(rc));
        return 1;
    }
    sx_client_set_timeout(b.c, 60000);
    uint64_t t0 = now_ns();
    b.t_measure = t0 + (uint64_t)(o.warmup * 1e9);
    b.t_end = b.t_measure + (uint64_t)(o.duration * 1e9);
    double ops_per_s = 0, secs = 0;
    if (o.wl == W6) {
        rc = bench_load(&b, o.indexes, o.index_after, &ops_per_s);
        secs = (double)(now_ns() - t0) / 1e9;
    } else if (o.wl == W7) {
        b.t_measure = t0;
        b.t_end = t0 + (uint64_t)((o.warmup + o.duration) * 1e9);
        rc = bench_lag(&b, &ops_per_s);
        secs = (double)(b.t_end - t0) / 1e9;
    } else if (o.wl == W9) {
        rc = w9_init(&b);
        if (!rc) { /* (the signals' handlers are in place from here on) */
            fprintf(stderr, "shardex-bench: W9 running: SIGUSR1 marks an event, SIGTERM ends\n");
            rc = bench_loop(&b);
        }
    } else {
        rc = bench_loop(&b);
        uint64_t last = b.last_done > b.t_end ? b.last_done : b.t_end;
        secs = (double)(last - b.t_measure) / 1e9;
        ops_per_s = secs > 0 ? (double)b.ops / secs : 0;
    }
    char name[64];
    if (o.name)
        snprintf(name, sizeof name, "%s", o.name);
    else if (o.wl == W6)
        snprintf(name, sizeof name, "W6-%didx%s", o.indexes, o.index_after ? "-after" : "");
    else
        snprintf(name, sizeof name, "W%d", o.wl);
    if (o.wl == W9) {
        int wrc = w9_report(&b, name, o.items);
        if (wrc) {
            fprintf(stderr, "shardex-bench: %s: cannot write its rows: %s\n", name,
                    sx_strerror(wrc));
            rc = wrc;
        }
    } else if (printf(
                   "{\"name\":\"%s\",\"system\":\"shardex\",\"clients\":%d,\"ops_per_s\":%.3f,"
                   "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"ops\":%llu,\"errors\":%llu,"
                   "\"bad\":%llu,\"items\":%llu,\"seconds\":%.2f,\"resent\":%llu}\n",
                   name, o.clients, ops_per_s, hist_quantile_us(&b.h, 0.5),
                   hist_quantile_us(&b.h, 0.99), hist_quantile_us(&b.h, 0.999),
                   (unsigned long long)b.ops, (unsigned long long)b.errors,
                   (unsigned long long)b.bad, (unsigned long long)o.items, secs,
                   (unsigned long long)b.resent) < 0 ||
               fflush(stdout)) {
        fprintf(stderr, "shardex-bench: %s: cannot write its row\n", name);
        rc = SX_EIO;
    }
    if (b.firsterr[0])
        fprintf(stderr, "shardex-bench: %s: first error: %s\n", name, b.firsterr);
    if (b.bad && o.wl != W4)
        fprintf(stderr, "shardex-bench: %s: %llu operations failed their check\n", name,
                (unsigned long long)b.bad);
    if (b.errors && o.wl == W9)
        fprintf(stderr, "shardex-bench: %s: %llu operations failed (counted per kind)\n", name,
                (unsigned long long)b.errors);
    int status = rc || (b.errors && o.wl != W9) || (b.bad && o.wl != W4) ? 1 : 0;
    sx_client_close(b.c);
    if (o.wl == W9)
        pthread_mutex_destroy(&b.w9.lock);
    free(b.slots);
    pthread_mutex_destroy(&b.lock);
    pthread_cond_destroy(&b.idle);
    return status;
}
