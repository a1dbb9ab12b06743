/*
 * bench.h — shardex-bench internals: one benchmark run (a workload at a
 * given number of concurrent requests over one client) and its slots.
 *
 * A run keeps `conc` requests in flight through the asynchronous API: each
 * slot issues one request, and its completion callback (on an nng thread)
 * records the latency and issues the slot's next request, until the run's
 * end time. Requests started after the warm-up and before the end are
 * measured; throughput = measured requests / (from the end of the warm-up
 * to the last measured completion).
 */
#ifndef SX_BENCH_H
#define SX_BENCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "shardex.h"
#include "hist.h"

enum { W1 = 1, W2, W3, W4, W5, W6, W7, W8 };

typedef struct bench bench;

/* One request stream of a run. Touched only by the thread running its
 * current callback (or the starter before the first request). */
typedef struct slot {
    bench *b;
    int idx;
    uint64_t rng;
    uint64_t t0;    /* start of the current measured operation */
    int kind;       /* W8: the current operation's kind */
    uint64_t pair;  /* W3/W4/W5: the pair asked for */
    uint64_t id;    /* W2/W8: the key asked for */
    size_t got;     /* W5: matches collected so far */
    uint64_t tack;  /* W7: acknowledgement time of the probe */
    uint64_t probe; /* W7: the current probe's number */
} slot;

struct bench {
    sx_client *c;
    const char *table;
    const char *index;
    uint64_t n, seed;
    int wl, conc;
    int batch;   /* W6: items per put */
    double rate; /* W7: background writes per second */
    uint64_t t_measure, t_end;
    hist h;
    uint64_t ops, errors, bad; /* atomics */
    uint64_t last_done;        /* atomic max, ns */
    uint64_t next;             /* atomic: W1 ids, W6 batches, W7 probes */
    uint64_t id_base;          /* W1/W7 fresh ids start here */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    int active;         /* slots still issuing */
    char firsterr[256]; /* under lock */
    slot *slots;
};

/* Records a failed operation (message kept once). Thread-safe. */
void bench_error(bench *b, const char *what, int rc, const char *msg);
/* Ends one measured operation of s: records its latency when it started
 * inside the measured window, then issues s's next request while the run
 * lasts (or retires s). ok=false counts a failed check ("bad"). */
void slot_done(slot *s, bool ok);
/* Issues s's next request for workloads W1–W5 and W8 (run.c). On a
 * submission failure records it and retires s. */
void slot_issue(slot *s);
/* Retires s (it issues nothing more). Thread-safe. */
void slot_retire(slot *s);

/* Runs b's closed loop: conc slots, warm-up until t_measure, end at
 * t_end; waits for every slot. Returns 0. */
int bench_loop(bench *b);

/* W6 (load.c): creates b->table and loads b->n items in batches with conc
 * batches in flight. With after=false its nidx indexes are created first
 * and maintained by the load, which ends when they have applied every
 * write; with after=true they are created once the items are loaded (as
 * PostgreSQL's COPY, then CREATE INDEX) and the load ends when they are
 * built. Fills *items_per_s. Returns 0 or an sx_err. */
int bench_load(bench *b, int nidx, bool after, double *items_per_s);

/* W7 (lag.c): a background write load at b->rate puts per second while
 * b->conc probes, one after another in each slot, measure for each of
 * their puts the time from acknowledgement to visibility in an eventual
 * query (into b->h). Fills *write_rate with the achieved background rate.
 * Returns 0, or SX_ENOMEM. */
int bench_lag(bench *b, double *write_rate);

/* Starts a request on the slot's behalf, recording a submission failure. */
#define SLOT_SUBMIT(s, call)                                      \
    do {                                                          \
        int rc_ = (call);                                         \
        if (rc_) {                                                \
            bench_error((s)->b, "submit", rc_, sx_strerror(rc_)); \
            slot_retire(s);                                       \
        }                                                         \
    } while (0)

#endif
