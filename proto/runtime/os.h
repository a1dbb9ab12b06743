/*
 * os.h — what a process asks of its operating system beyond I/O: the
 * monotonic and real-time clocks, deadlines for condition variables,
 * thread names, and integer tunables read from the environment.
 */
#ifndef SX_OS_H
#define SX_OS_H

#include <time.h>

/* A tunable from the environment: variable name's value when it is an
 * integer in lo..hi; unset or empty gives dflt, and anything else is
 * reported (one warning) and gives dflt too. */
long os_env_long(const char *name, long lo, long hi, long dflt);

/* Milliseconds of a monotonic clock, for durations and deadlines. */
unsigned long long os_mono_ms(void);

/* Microseconds of the same clock, for short durations. */
unsigned long long os_mono_us(void);

/* Milliseconds of Unix time (CLOCK_REALTIME): what a write's deadline is
 * given in, since it crosses hosts (msg.h, deadline_ms). */
unsigned long long os_real_ms(void);

/* Sets *ts to clock clk's now plus ms milliseconds: a deadline for
 * pthread_cond_timedwait on a condition variable using that clock. */
void os_deadline_in(struct timespec *ts, clockid_t clk, long ms);

/* Names the calling thread (what top -H, perf and gdb show); at most 15
 * characters are kept. Best effort: a failure changes nothing else. */
void os_thread_name(const char *name);

#endif
