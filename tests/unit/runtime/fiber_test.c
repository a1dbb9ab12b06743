/*
 * fiber_test.c — the fiber pool and its waits (proto/runtime/fiber.c):
 *   - every task runs once, as a fiber (fib_self inside, NULL outside);
 *   - a fiber parked on an event set from another thread resumes, on the
 *     thread it started on;
 *   - no more than maxfibers tasks are in progress at once, and parked
 *     fibers do not block their thread (a pool of 1 thread serves many
 *     parked tasks);
 *   - fib_sleep_ms parks for at least the time asked;
 *   - events work between plain threads too (set before or during wait);
 *   - freeing the pool hands never-started tasks to drop.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "fiber.h"

#define NTASKS 400

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits (polling, with a deadline) until *v reaches want. */
static bool wait_count(atomic_int *v, int want, int ms)
{
    uint64_t until = now_ms() + (uint64_t)ms;
    struct timespec pause = { 0, 1000000 };

    while (atomic_load(v) < want) {
        if (now_ms() > until)
            return false;
        nanosleep(&pause, NULL);
    }
    return true;
}

/* ---- tasks that park on an event set by another thread ---- */

typedef struct park_task {
    fib_event ev;
    atomic_int *started, *done, *running, *max_running, *in_fiber, *same_thread;
} park_task;

static void park_run(void *arg)
{
    park_task *t = arg;
    pthread_t before = pthread_self();
    int r = atomic_fetch_add(t->running, 1) + 1;
    int m = atomic_load(t->max_running);

    while (r > m && !atomic_compare_exchange_weak(t->max_running, &m, r))
        ;
    if (fib_self() != NULL)
        atomic_fetch_add(t->in_fiber, 1);
    atomic_fetch_add(t->started, 1);
    ev_wait(&t->ev);
    if (pthread_equal(before, pthread_self()))
        atomic_fetch_add(t->same_thread, 1);
    atomic_fetch_sub(t->running, 1);
    atomic_fetch_add(t->done, 1);
}

typedef struct setter {
    park_task *tasks;
    int n;
    atomic_int *started;
} setter;

/* Sets each task's event once that task has started (so most are parked
 * when woken), from a plain thread. */
static void *setter_main(void *arg)
{
    setter *st = arg;

    for (int i = 0; i < st->n; i++) {
        wait_count(st->started, i + 1, 10000);
        ev_set(&st->tasks[i].ev);
    }
    return NULL;
}

static void test_park(int nthreads, int maxfibers)
{
    fib_pool *p = NULL;
    park_task *tasks = calloc(NTASKS, sizeof(*tasks));
    atomic_int started = 0, done = 0, running = 0, max_running = 0, in_fiber = 0, same = 0;
    pthread_t th;
    setter st = { tasks, NTASKS, &started };

    CHECK(tasks != NULL);
    if (tasks == NULL)
        return;
    CHECK(fib_pool_new(nthreads, maxfibers, 64 * 1024, &p) == 0);
    for (int i = 0; i < NTASKS; i++) {
        CHECK(ev_init(&tasks[i].ev) == 0);
        tasks[i].started = &started;
        tasks[i].done = &done;
        tasks[i].running = &running;
        tasks[i].max_running = &max_running;
        tasks[i].in_fiber = &in_fiber;
        tasks[i].same_thread = &same;
    }
    CHECK(pthread_create(&th, NULL, setter_main, &st) == 0);
    for (int i = 0; i < NTASKS; i++)
        CHECK(fib_pool_submit(p, park_run, &tasks[i]) == 0);
    CHECK(wait_count(&done, NTASKS, 20000));
    pthread_join(th, NULL);
    CHECK(atomic_load(&in_fiber) == NTASKS);
    CHECK(atomic_load(&same) == NTASKS);
    CHECK(atomic_load(&max_running) <= maxfibers);
    /* parked fibers free their thread: more tasks than threads were
     * waiting at once */
    CHECK(atomic_load(&max_running) > nthreads);
    fib_pool_free(p, NULL);
    for (int i = 0; i < NTASKS; i++)
        ev_destroy(&tasks[i].ev);
    free(tasks);
    CHECK(fib_self() == NULL);
}

/* ---- sleeps ---- */

typedef struct sleep_task {
    int ms;
    uint64_t slept;
    atomic_int *done;
} sleep_task;

static void sleep_run(void *arg)
{
    sleep_task *t = arg;
    uint64_t t0 = now_ms();

    fib_sleep_ms(t->ms);
    t->slept = now_ms() - t0;
    atomic_fetch_add(t->done, 1);
}

static void test_sleep(void)
{
    fib_pool *p = NULL;
    sleep_task t[20];
    atomic_int done = 0;
    uint64_t t0 = now_ms();

    CHECK(fib_pool_new(1, 64, 64 * 1024, &p) == 0);
    for (int i = 0; i < 20; i++) {
        t[i] = (sleep_task){ .ms = 50, .done = &done };
        CHECK(fib_pool_submit(p, sleep_run, &t[i]) == 0);
    }
    CHECK(wait_count(&done, 20, 10000));
    for (int i = 0; i < 20; i++)
        CHECK(t[i].slept >= 49);
    /* 20 sleeps of 50 ms on one thread overlap: far less than 20 x 50 */
    CHECK(now_ms() - t0 < 800);
    fib_pool_free(p, NULL);

    /* on a plain thread it blocks */
    t0 = now_ms();
    fib_sleep_ms(20);
    CHECK(now_ms() - t0 >= 19);
}

/* ---- events between plain threads ---- */

static void *set_later(void *arg)
{
    struct timespec ts = { 0, 20 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    ev_set(arg);
    return NULL;
}

static void test_plain_events(void)
{
    fib_event ev;
    pthread_t th;

    CHECK(ev_init(&ev) == 0);
    ev_set(&ev);
    ev_wait(&ev); /* already set: returns at once */
    ev_clear(&ev);
    CHECK(pthread_create(&th, NULL, set_later, &ev) == 0);
    ev_wait(&ev); /* set while waiting */
    pthread_join(th, NULL);
    CHECK(ev.set);
    ev_destroy(&ev);
}

/* ---- dropping tasks never started ---- */

static fib_event g_gate[5];
static atomic_int g_dropped, g_ran;

static void gate_run(void *arg)
{
    atomic_fetch_add(&g_ran, 1);
    ev_wait(arg);
}

static void count_drop(void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_dropped, 1);
}

/* Opens the gates once fib_pool_free(p) has begun (it must then wait for
 * the two parked tasks, and start none of the queued ones). */
static void *open_gates(void *arg)
{
    fib_pool *p = arg;
    uint64_t until = now_ms() + 10000;
    struct timespec pause = { 0, 1000000 };

    while (!fib_pool_stopping(p) && now_ms() < until)
        nanosleep(&pause, NULL);
    for (int i = 0; i < 5; i++)
        ev_set(&g_gate[i]);
    return NULL;
}

static void test_drop(void)
{
    fib_pool *p = NULL;
    pthread_t th;

    for (int i = 0; i < 5; i++)
        CHECK(ev_init(&g_gate[i]) == 0);
    CHECK(fib_pool_new(1, 2, 64 * 1024, &p) == 0);
    /* two tasks take both fibers and park; the other three wait for a
     * fiber, but the gates open only as the pool is being freed, and a
     * stopping pool starts nothing new: they are dropped */
    for (int i = 0; i < 5; i++)
        CHECK(fib_pool_submit(p, gate_run, &g_gate[i]) == 0);
    CHECK(wait_count(&g_ran, 2, 10000));
    CHECK(pthread_create(&th, NULL, open_gates, p) == 0);
    fib_pool_free(p, count_drop);
    pthread_join(th, NULL);
    CHECK(atomic_load(&g_ran) == 2);
    CHECK(atomic_load(&g_dropped) == 3);
    for (int i = 0; i < 5; i++)
        ev_destroy(&g_gate[i]);
}

int main(void)
{
    test_park(1, 64);
    test_park(2, 1000);
    test_sleep();
    test_plain_events();
    test_drop();
    return CHECK_DONE();
}
