/*
 * log.c — timestamped, levelled log lines to one file (see log.h).
 * The only mutable globals of the module are the output stream and level,
 * set once at start-up and guarded by log_lock afterwards.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include "log.h"
#include "sx_errors.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_out;                   /* guarded by log_lock; NULL = stderr */
static log_level log_min = SX_LOG_INFO; /* guarded by log_lock */

int log_open(const char *path)
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

void log_level_set(log_level lvl)
{
    pthread_mutex_lock(&log_lock);
    log_min = lvl;
    pthread_mutex_unlock(&log_lock);
}

void log_line(log_level lvl, const char *fmt, ...)
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

int log_ratelimit_ok(log_ratelimit *r, unsigned long long interval_ms, unsigned *skipped)
{
    unsigned long long now = os_mono_ms();

    if (now < r->next_ms) {
        r->skipped++;
        return 0;
    }
    r->next_ms = now + interval_ms;
    *skipped = r->skipped;
    r->skipped = 0;
    return 1;
}
