/*
 * log.h — process logging: one line per event, with UTC time and level, to
 * the file a daemon is given (stderr until then). Thread-safe.
 */
#ifndef SX_LOG_H
#define SX_LOG_H

#include <time.h>
#include "os.h"

typedef enum log_level { SX_LOG_DEBUG, SX_LOG_INFO, SX_LOG_WARN, SX_LOG_ERROR } log_level;

/* Opens path for appending and sends later lines there. Returns 0 or
 * SX_EIO. Call once at start-up, before threads. */
int log_open(const char *path);

/* Sets the lowest level written (default INFO). */
void log_level_set(log_level lvl);

/* Writes one line: "2026-11-29T23:59:59.123Z LEVEL message". */
void log_line(log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A warning that may repeat often (a slow round, a slow sync) is written at
 * most once per interval: log_ratelimit_ok returns true when it is due and
 * sets *skipped to how many were held back since the last one it let
 * through. One owner thread per log_ratelimit (not locked); zero it first. */
typedef struct log_ratelimit {
    unsigned long long next_ms;
    unsigned skipped;
} log_ratelimit;
int log_ratelimit_ok(log_ratelimit *r, unsigned long long interval_ms, unsigned *skipped);

/* Durations at or above this are logged as slow (shipping rounds, synced
 * groups), at most once a second per shipper or partition. */
#define SX_SLOW_MS 50

#define LOG_DEBUG(...) log_line(SX_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...) log_line(SX_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...) log_line(SX_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) log_line(SX_LOG_ERROR, __VA_ARGS__)

#endif
