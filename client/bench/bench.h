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

enum { W1 = 1, W2, W3, W4, W5, W6, W7, W8, W9 };

/* W9 (failover.c): kinds of operation, and the most events (SIGUSR1) a run
 * accounts for. */
enum { W9_PUT, W9_GET, W9_QUERY, W9_KINDS };
#define W9_MARKS 64

typedef struct bench bench;

/* W9's figures per kind of operation; gaps in ns, per event window. */
typedef struct w9 {
    pthread_mutex_t lock;
    hist h[W9_KINDS];                 /* latencies of successes */
    uint64_t ok[W9_KINDS];            /* atomics: successes started after the warm-up */
    uint64_t errors[W9_KINDS];        /* atomics: failed operations */
    uint64_t bad[W9_KINDS];           /* atomics: failed checks */
    uint64_t last[W9_KINDS];          /* under lock: the kind's last success */
    uint64_t gap[W9_MARKS][W9_KINDS]; /* under lock: longest gap per window */
    uint64_t at[W9_MARKS][W9_KINDS];  /* under lock: its start, from the event */
} w9;

/* One request stream of a run. Touched only by the thread running its
 * current callback (or the starter before the first request). */
typedef struct slot {
    bench *b;
    int idx;
    uint64_t rng;
    uint64_t t0;    /* start of the current measured operation */
    int kind;       /* W8/W9: the current operation's kind (W9_PUT...) */
    uint64_t pair;  /* W3/W4/W5: the pair asked for; W6: the batch's number */
    uint64_t id;    /* W2/W8: the key asked for */
    size_t got;     /* W5: matches collected so far */
    uint64_t tack;  /* W7: acknowledgement time of the probe */
    uint64_t probe; /* W7: the current probe's number */
    int resends;    /* W6: times the current batch was sent again */
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
    uint64_t resent;           /* atomic: W6 batches sent again after a timeout */
    uint64_t last_done;        /* atomic max, ns */
    uint64_t next;             /* atomic: W1 ids, W6 batches, W7 probes */
    uint64_t id_base;          /* W1/W7 fresh ids start here */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    int active;         /* slots still issuing */
    char firsterr[256]; /* under lock */
    slot *slots;
    w9 w9; /* W9 only */
};

/* Records a failed operation (message kept once). Thread-safe. */
void bench_error(bench *b, const char *what, int rc, const char *msg);
/* Ends one measured operation of s whose status was rc: records its
 * latency when it started inside the measured window, then issues s's next
 * request while the run lasts (or retires s). ok=false counts a failed
 * check ("bad"; pass ok=false with any rc other than SX_OK). W9 hands the
 * operation to w9_record instead. */
void slot_done(slot *s, int rc, bool ok);
/* Issues s's next request for workloads W1–W5, W8 and W9 (run.c). On a
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

/* W9 (failover.c): resets b->w9 (b->t_measure set) and installs the
 * handlers of SIGUSR1 (an event: opens the next window) and SIGTERM or
 * SIGINT (ends the run). Returns 0, SX_ENOMEM or SX_EINVAL. */
int w9_init(bench *b);
/* W9: when the run ends: b->t_end, or the SIGTERM's time if earlier. */
uint64_t w9_end(const bench *b);
/* W9: accounts one completed operation of slot s (kind s->kind, status
 * rc, check ok): a success raises the gaps of the windows since the
 * kind's previous one; a failure is counted (an error, or a failed check,
 * which also counts in b->bad). Thread-safe. */
void w9_record(slot *s, int rc, bool ok);
/* W9: once every slot is retired, closes the windows at the run's end and
 * prints one JSON line per kind, named NAME-put, NAME-get, NAME-query
 * (main.c's fields, then "marks": events seen, "gaps_ms": the kind's gap in
 * each window, "gaps_at_ms": when each began, from its event, "gap_max_ms",
 * "gap_median_ms"). Returns 0 or SX_EIO. */
int w9_report(bench *b, const char *name, uint64_t items);

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
