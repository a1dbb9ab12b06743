/*
 * hist.c — the log-linear latency histogram (see hist.h).
 */
#include <time.h>
#include <string.h>
#include "hist.h"

void hist_init(hist *h)
{
    memset(h, 0, sizeof *h);
}

/* Bucket of v: values below HIST_SUB map to themselves; above, the top
 * bit's position picks the group and the next 4 bits the sub-bucket. */
static int bucket_of(uint64_t v)
{
    if (v < HIST_SUB)
        return (int)v;
    int top = 63 - __builtin_clzll(v); /* >= 4 */
    int sub = (int)((v >> (top - 4)) & (HIST_SUB - 1));
    return (top - 3) * HIST_SUB + sub;
}

/* Lower bound and width of bucket b. */
static void bucket_range(int b, double *lo, double *width)
{
    if (b < HIST_SUB) {
        *lo = b;
        *width = 1;
        return;
    }
    int top = b / HIST_SUB + 3, sub = b % HIST_SUB;
    double base = (double)(1ULL << top);
    *width = base / HIST_SUB;
    *lo = base + sub * *width;
}

void hist_add(hist *h, uint64_t ns)
{
    int b = bucket_of(ns);
    if (b >= HIST_BUCKETS)
        b = HIST_BUCKETS - 1;
    __atomic_fetch_add(&h->n[b], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
}

double hist_quantile_us(const hist *h, double q)
{
    uint64_t total = __atomic_load_n(&h->count, __ATOMIC_RELAXED);
    if (total == 0)
        return 0;
    uint64_t want = (uint64_t)(q * (double)total + 0.999999);
    if (want < 1)
        want = 1;
    uint64_t seen = 0;
    for (int b = 0; b < HIST_BUCKETS; b++) {
        seen += __atomic_load_n(&h->n[b], __ATOMIC_RELAXED);
        if (seen >= want) {
            double lo, w;
            bucket_range(b, &lo, &w);
            return (lo + w / 2) / 1000.0;
        }
    }
    return 0;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
