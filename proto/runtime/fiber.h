/*
 * fiber.h — a pool of fibers: many requests served by a few threads, each
 * request on its own stack, suspended (not the thread) while it waits for a
 * reply or a timer.
 *
 * A waiting thread costs a context switch to sleep and another to wake; on
 * a small virtualised host that is ~14 µs each, more than the work of a
 * routed request. A fiber that waits costs a swapcontext. Handlers stay
 * plain synchronous code: the waits that matter (fib_event, fib_sleep_ms,
 * and through them net_call_all's peer calls) park the calling fiber when
 * there is one and block the thread otherwise.
 *
 * Rules for code running in a fiber: never hold a mutex across a wait that
 * may park (another fiber on the same thread could then block on it), and
 * do not rely on the wait being short. A fiber always resumes on the
 * thread it started on, so thread-local storage stays valid.
 */
#ifndef SX_FIBER_H
#define SX_FIBER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct fib_pool fib_pool;
typedef struct fib_fiber fib_fiber;

/* A task: runs once as a fiber. */
typedef void (*fib_fn)(void *arg);

/* Starts nthreads threads that run up to maxfibers tasks at a time, each on
 * a stack of stack_bytes (plus a guard page). Returns 0, SX_ENOMEM. */
int fib_pool_new(int nthreads, int maxfibers, size_t stack_bytes, fib_pool **out);

/* Queues task fn(arg). Returns 0 or SX_ENOMEM (not queued). Thread-safe. */
int fib_pool_submit(fib_pool *p, fib_fn fn, void *arg);

/* Stops the threads once every started task has finished; tasks never
 * started are handed to drop(arg) (may be NULL). Frees p. Accepts NULL. */
void fib_pool_free(fib_pool *p, fib_fn drop);

/* True once fib_pool_free has begun on p: no task starts any more.
 * Thread-safe (a long task may poll it to finish early). */
bool fib_pool_stopping(fib_pool *p);

/* The fiber running on this thread, or NULL on a plain thread. */
fib_fiber *fib_self(void);

/* A one-shot event for one waiter at a time: ev_wait returns once ev_set
 * has been called (before or during the wait); ev_clear re-arms it. Parks
 * the calling fiber, or blocks a plain thread. */
typedef struct fib_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool set;
    fib_fiber *waiter;
} fib_event;

int ev_init(fib_event *ev); /* 0 or SX_ENOMEM */
void ev_destroy(fib_event *ev);
void ev_wait(fib_event *ev);
void ev_set(fib_event *ev); /* any thread */
void ev_clear(fib_event *ev);

/* Sleeps ms milliseconds: parks a fiber (an nng timer wakes it), or
 * nanosleeps a plain thread. */
void fib_sleep_ms(int ms);

#endif
