/*
 * failover.c — shardex-bench's W9 accounting: W8's mix (90 % get, 5 % put,
 * 5 % verified query) while another program disturbs the cluster, and for
 * each disturbance the longest gap in service of each kind of operation.
 *
 * The disturber marks each event by sending SIGUSR1 just before it acts (a
 * kill -9 of a node), and ends the run with SIGTERM. Event e opens window
 * e, which lasts until the next event (or the end of the run). The gap of a
 * kind in window e is the longest time in it without a success of that
 * kind: from the event to the first success, or between two successes, or
 * from the last success to the window's end; a window with no success of a
 * kind at all counts whole. A success is a completed operation whose
 * status is SX_OK and whose check passed; its time is taken when its
 * completion is recorded (under the lock, so successes are recorded in time
 * order); where in its window each longest gap began is kept beside it
 * (at the event, or later: a node's restart, a leadership handed back).
 * Failed operations (any error status: expected while a partition
 * has no leader) are counted per kind and do not fail the run; a failed
 * check (an item or a query result that is wrong) does.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "bench.h"

static const char *const kind_name[W9_KINDS] = { "put", "get", "query" };

/* Set by the signal handlers (async-signal-safe: lock-free atomics and
 * clock_gettime only); read by the completion threads. */
static uint64_t g_marks[W9_MARKS]; /* event times, now_ns() */
static int g_nmarks;
static uint64_t g_stop_t; /* now_ns() of the SIGTERM, or 0 */

static void on_mark(int sig)
{
    (void)sig;
    int n = __atomic_load_n(&g_nmarks, __ATOMIC_ACQUIRE);
    if (n < W9_MARKS) {
        __atomic_store_n(&g_marks[n], now_ns(), __ATOMIC_RELAXED);
        __atomic_store_n(&g_nmarks, n + 1, __ATOMIC_RELEASE);
    }
}

static void on_stop(int sig)
{
    (void)sig;
    uint64_t zero = 0, t = now_ns();
    __atomic_compare_exchange_n(&g_stop_t, &zero, t, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

int w9_init(bench *b)
{
    w9 *w = &b->w9;
    memset(w, 0, sizeof *w);
    for (int k = 0; k < W9_KINDS; k++) {
        hist_init(&w->h[k]);
        w->last[k] = b->t_measure;
    }
    if (pthread_mutex_init(&w->lock, NULL))
        return SX_ENOMEM;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_mark;
    if (sigaction(SIGUSR1, &sa, NULL))
        return SX_EINVAL;
    sa.sa_handler = on_stop;
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
        return SX_EINVAL;
    return SX_OK;
}

uint64_t w9_end(const bench *b)
{
    uint64_t s = __atomic_load_n(&g_stop_t, __ATOMIC_ACQUIRE);
    return s && s < b->t_end ? s : b->t_end;
}

/* The window of time t: the last event at or before t, or -1 (before the
 * first event). */
static int window_of(uint64_t t, int nm)
{
    int j = nm - 1;
    while (j >= 0 && __atomic_load_n(&g_marks[j], __ATOMIC_RELAXED) > t)
        j--;
    return j;
}

/* Kind k was served at time t (under w->lock): the gap since its previous
 * success, split over the windows it spans, raises their gaps. */
static void served(w9 *w, int k, uint64_t t)
{
    uint64_t prev = w->last[k];
    if (t <= prev)
        return;
    int nm = __atomic_load_n(&g_nmarks, __ATOMIC_ACQUIRE);
    int i = window_of(prev, nm), j = window_of(t, nm);
    for (int e = i < 0 ? 0 : i; e <= j; e++) {
        uint64_t m = __atomic_load_n(&g_marks[e], __ATOMIC_RELAXED);
        uint64_t from = prev > m ? prev : m;
        uint64_t to = e < j ? __atomic_load_n(&g_marks[e + 1], __ATOMIC_RELAXED) : t;
        if (to > from && to - from > w->gap[e][k]) {
            w->gap[e][k] = to - from;
            w->at[e][k] = from - m;
        }
    }
    w->last[k] = t;
}

void w9_record(slot *s, int rc, bool ok)
{
    bench *b = s->b;
    w9 *w = &b->w9;
    int k = s->kind;
    pthread_mutex_lock(&w->lock);
    uint64_t t = now_ns(), end = w9_end(b);
    if (rc == SX_OK && ok && t <= end)
        served(w, k, t);
    pthread_mutex_unlock(&w->lock);
    if (s->t0 < b->t_measure || s->t0 >= end)
        return;
    if (rc != SX_OK) {
        __atomic_fetch_add(&w->errors[k], 1, __ATOMIC_RELAXED);
    } else if (!ok) {
        __atomic_fetch_add(&w->bad[k], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&b->bad, 1, __ATOMIC_RELAXED);
    } else {
        hist_add(&w->h[k], t - s->t0);
        __atomic_fetch_add(&w->ok[k], 1, __ATOMIC_RELAXED);
    }
}

/* Ascending sort of n doubles (n <= W9_MARKS: insertion sort). */
static void sort_doubles(double *v, int n)
{
    for (int i = 1; i < n; i++) {
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) {
            v[j + 1] = v[j];
            j--;
        }
        v[j + 1] = x;
    }
}

int w9_report(bench *b, const char *name, uint64_t items)
{
    w9 *w = &b->w9;
    uint64_t end = w9_end(b);
    int nm = __atomic_load_n(&g_nmarks, __ATOMIC_ACQUIRE);
    double secs = end > b->t_measure ? (double)(end - b->t_measure) / 1e9 : 0;
    pthread_mutex_lock(&w->lock);
    for (int k = 0; k < W9_KINDS; k++)
        served(w, k, end); /* the last windows run to the end */
    pthread_mutex_unlock(&w->lock);
    for (int k = 0; k < W9_KINDS; k++) {
        double g[W9_MARKS], max = 0, med = 0;
        for (int e = 0; e < nm; e++) {
            g[e] = (double)w->gap[e][k] / 1e6;
            if (g[e] > max)
                max = g[e];
        }
        if (printf("{\"name\":\"%s-%s\",\"system\":\"shardex\",\"clients\":%d,\"ops_per_s\":%.3f,"
                   "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"ops\":%llu,\"errors\":%llu,"
                   "\"bad\":%llu,\"items\":%llu,\"seconds\":%.2f,\"marks\":%d,\"gaps_ms\":[",
                   name, kind_name[k], b->conc, secs > 0 ? (double)w->ok[k] / secs : 0,
                   hist_quantile_us(&w->h[k], 0.5), hist_quantile_us(&w->h[k], 0.99),
                   hist_quantile_us(&w->h[k], 0.999), (unsigned long long)w->ok[k],
                   (unsigned long long)w->errors[k], (unsigned long long)w->bad[k],
                   (unsigned long long)items, secs, nm) < 0)
            return SX_EIO;
        for (int e = 0; e < nm; e++)
            if (printf("%s%.1f", e ? "," : "", g[e]) < 0)
                return SX_EIO;
        if (printf("],\"gaps_at_ms\":[") < 0)
            return SX_EIO;
        for (int e = 0; e < nm; e++)
            if (printf("%s%.1f", e ? "," : "", (double)w->at[e][k] / 1e6) < 0)
                return SX_EIO;
        sort_doubles(g, nm);
        if (nm)
            med = nm % 2 ? g[nm / 2] : (g[nm / 2 - 1] + g[nm / 2]) / 2;
        if (printf("],\"gap_max_ms\":%.1f,\"gap_median_ms\":%.1f}\n", max, med) < 0)
            return SX_EIO;
    }
    if (fflush(stdout))
        return SX_EIO;
    return SX_OK;
}
