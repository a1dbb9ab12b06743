/*
 * log.c — timestamped, levelled log lines to one file (see log.h).
 * The only mutable globals of the module are the output stream and level,
 * set once at start-up and guarded by log_lock afterwards.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include "log.h"
#include "sx_errors.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_out;                     /* guarded by log_lock; NULL = stderr */
static sx_log_level log_min = SX_LOG_INFO; /* guarded by log_lock */

int sx_log_open(const char *path)
{
    FILE *f = fopen(path, "a");

    if (f == NULL)
        return SX_EIO;
    setvbuf(f, NULL, _IOLBF, 0);
    pthread_mutex_lock(&log_lock);
    if (log_out)
        fclose(log_out);
    log_out = f;
    pthread_mutex_unlock(&log_lock);
    return 0;
}

void sx_log_level_set(sx_log_level lvl)
{
    pthread_mutex_lock(&log_lock);
    log_min = lvl;
    pthread_mutex_unlock(&log_lock);
}

void sx_log(sx_log_level lvl, const char *fmt, ...)
{
    static const char *names[] = { "DEBUG", "INFO", "WARN", "ERROR" };
    struct timespec ts;
    struct tm tm;
    char when[32];
    va_list ap;
    FILE *f;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    pthread_mutex_lock(&log_lock);
    if (lvl >= log_min) {
        f = log_out ? log_out : stderr;
        fprintf(f, "%s.%03ldZ %s ", when, ts.tv_nsec / 1000000, names[lvl]);
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
        fputc('\n', f);
    }
    pthread_mutex_unlock(&log_lock);
}

unsigned long long sx_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

unsigned long long sx_real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000ull + (unsigned long long)ts.tv_nsec / 1000000ull;
}

unsigned long long sx_mono_ms(void)
{
    return sx_mono_us() / 1000ull;
}

void sx_deadline_in(struct timespec *ts, clockid_t clk, long ms)
{
    clock_gettime(clk, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void sx_thread_name(const char *name)
{
    (void)prctl(PR_SET_NAME, (unsigned long)name, 0ul, 0ul, 0ul);
}

int sx_ratelimit_ok(sx_ratelimit *r, unsigned long long interval_ms, unsigned *skipped)
{
    unsigned long long now = sx_mono_ms();

    if (now < r->next_ms) {
        r->skipped++;
        return 0;
    }
    r->next_ms = now + interval_ms;
    *skipped = r->skipped;
    r->skipped = 0;
    return 1;
}

long sx_env_long(const char *name, long lo, long hi, long dflt)
{
    const char *env = getenv(name);
    char *end = NULL;
    long v;

    if (env == NULL || *env == '\0')
        return dflt;
    errno = 0;
    v = strtol(env, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        sx_log(SX_LOG_WARN, "%s=%s is not %ld..%ld: using %ld", name, env, lo, hi, dflt);
        return dflt;
    }
    return v;
}
