/*
 * log.h — process logging: one line per event, with UTC time and level, to
 * the file a daemon is given (stderr until then). Thread-safe.
 */
#ifndef SX_LOG_H
#define SX_LOG_H

#include <time.h>

typedef enum sx_log_level { SX_LOG_DEBUG, SX_LOG_INFO, SX_LOG_WARN, SX_LOG_ERROR } sx_log_level;

/* Opens path for appending and sends later lines there. Returns 0 or
 * SX_EIO. Call once at start-up, before threads. */
int sx_log_open(const char *path);

/* Sets the lowest level written (default INFO). */
void sx_log_level_set(sx_log_level lvl);

/* Writes one line: "2026-11-29T23:59:59.123Z LEVEL message". */
void sx_log(sx_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A tunable from the environment: variable name's value when it is an
 * integer in lo..hi; unset or empty gives dflt, and anything else is
 * reported (one warning) and gives dflt too. */
long sx_env_long(const char *name, long lo, long hi, long dflt);

/* Milliseconds of a monotonic clock, for durations and deadlines. */
unsigned long long sx_mono_ms(void);

/* Microseconds of the same clock, for short durations. */
unsigned long long sx_mono_us(void);

/* Milliseconds of Unix time (CLOCK_REALTIME): what a write's deadline is
 * given in, since it crosses hosts (msg.h, deadline_ms). */
unsigned long long sx_real_ms(void);

/* Sets *ts to clock clk's now plus ms milliseconds: a deadline for
 * pthread_cond_timedwait on a condition variable using that clock. */
void sx_deadline_in(struct timespec *ts, clockid_t clk, long ms);

/* Names the calling thread (what top -H, perf and gdb show); at most 15
 * characters are kept. Best effort: a failure changes nothing else. */
void sx_thread_name(const char *name);

/* A warning that may repeat often (a slow round, a slow sync) is written at
 * most once per interval: sx_ratelimit_ok returns true when it is due and
 * sets *skipped to how many were held back since the last one it let
 * through. One owner thread per sx_ratelimit (not locked); zero it first. */
typedef struct sx_ratelimit {
    unsigned long long next_ms;
    unsigned skipped;
} sx_ratelimit;
int sx_ratelimit_ok(sx_ratelimit *r, unsigned long long interval_ms, unsigned *skipped);

/* Durations at or above this are logged as slow (shipping rounds, synced
 * groups), at most once a second per shipper or partition. */
#define SX_SLOW_MS 50

#define LOG_DEBUG(...) sx_log(SX_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...) sx_log(SX_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...) sx_log(SX_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) sx_log(SX_LOG_ERROR, __VA_ARGS__)

#endif
