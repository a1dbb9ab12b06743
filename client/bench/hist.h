/*
 * hist.h — a lock-free latency histogram for the benchmarks: log-linear
 * buckets (16 per power of two) over nanoseconds, counters updated with
 * atomic adds so nng callback threads can record concurrently. Relative
 * error of a reported percentile: under 1/16.
 */
#ifndef SX_BENCH_HIST_H
#define SX_BENCH_HIST_H

#include <stdint.h>

#define HIST_SUB 16
#define HIST_BUCKETS (64 * HIST_SUB)

typedef struct hist {
    uint64_t n[HIST_BUCKETS];
    uint64_t count;
} hist;

/* Zeroes h. */
void hist_init(hist *h);
/* Records one value in nanoseconds. Thread-safe. */
void hist_add(hist *h, uint64_t ns);
/* The q-quantile (0 < q <= 1) in microseconds (a bucket's midpoint), or 0
 * when h is empty. Call once recording has stopped. */
double hist_quantile_us(const hist *h, double q);
/* Monotonic clock in nanoseconds. */
uint64_t now_ns(void);

#endif
