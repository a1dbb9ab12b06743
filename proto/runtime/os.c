/*
 * os.c — the process's clocks, thread names and tunables from the
 * environment (see os.h). No state of its own.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <sys/prctl.h>
#include "log.h"
#include "os.h"

unsigned long long os_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

unsigned long long os_real_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000ull + (unsigned long long)ts.tv_nsec / 1000000ull;
}

unsigned long long os_mono_ms(void)
{
    return os_mono_us() / 1000ull;
}

void os_deadline_in(struct timespec *ts, clockid_t clk, long ms)
{
    clock_gettime(clk, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

void os_thread_name(const char *name)
{
    (void)prctl(PR_SET_NAME, (unsigned long)name, 0ul, 0ul, 0ul);
}

long os_env_long(const char *name, long lo, long hi, long dflt)
{
    const char *env = getenv(name);
    char *end = NULL;
    long v;

    if (env == NULL || *env == '\0')
        return dflt;
    errno = 0;
    v = strtol(env, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi) {
        log_line(SX_LOG_WARN, "%s=%s is not %ld..%ld: using %ld", name, env, lo, hi, dflt);
        return dflt;
    }
    return v;
}
