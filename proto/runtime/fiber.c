/*
 * fiber.c — the fiber pool and its waits (see fiber.h).
 *
 * Each worker thread runs a scheduler loop: resume a fiber of its own that
 * became runnable, else start a queued task on an idle fiber (its own free
 * list, or a new one while under the pool's limit), else sleep on its
 * condition. A fiber's stack is an mmap'd region with a guard page below
 * it; a finished fiber waits in its worker's free list for the next task,
 * suspended inside fiber_main's loop, so stacks are reused, never freed
 * before the pool. Under AddressSanitizer every switch is announced with
 * __sanitizer_{start,finish}_switch_fiber.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <nng/nng.h>

#include "fiber.h"
#include "log.h"
#include "sx_errors.h"

#if defined(__SANITIZE_ADDRESS__)
#define FIB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FIB_ASAN 1
#endif
#endif
#ifndef FIB_ASAN
#define FIB_ASAN 0
#endif
#if FIB_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

typedef struct fib_worker fib_worker;

struct fib_fiber {
    ucontext_t ctx;
    fib_worker *home;
    void *map; /* the mapping: guard page, then the stack */
    size_t map_n;
    fib_fn fn;
    void *arg;
    bool done;
    fib_fiber *next; /* in its worker's run queue or free list */
    void *asan_fake;
};

typedef struct fib_task {
    fib_fn fn;
    void *arg;
    struct fib_task *next;
} fib_task;

struct fib_worker {
    fib_pool *pool;
    pthread_t th;
    ucontext_t sched;
    pthread_cond_t cv;
    bool idle;
    int nlive; /* its fibers running or parked */
    fib_fiber *rq_head, *rq_tail;
    fib_fiber *free;
    const void *asan_stack; /* the thread's own stack, for switching back */
    size_t asan_stack_n;
};

struct fib_pool {
    pthread_mutex_t mu;
    fib_worker *w;
    int nw, started;
    fib_task *th, *tt;
    int live, maxfibers;
    size_t stack;
    bool stopping;
};

static __thread fib_worker *tl_worker;
static __thread fib_fiber *tl_fiber;

fib_fiber *fib_self(void)
{
    return tl_fiber;
}

/* ---- switching ---- */

static void fiber_main(void);

/* Scheduler → fiber f, until f parks or finishes. */
static void switch_in(fib_worker *w, fib_fiber *f)
{
    tl_fiber = f;
#if FIB_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, (char *)f->map + getpagesize(),
                                   f->map_n - (size_t)getpagesize());
#endif
    swapcontext(&w->sched, &f->ctx);
#if FIB_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
    tl_fiber = NULL;
}

/* Fiber f → its scheduler; returns when f is resumed. */
static void switch_out(fib_fiber *f)
{
    fib_worker *w = f->home;
#if FIB_ASAN
    __sanitizer_start_switch_fiber(&f->asan_fake, w->asan_stack, w->asan_stack_n);
#endif
    swapcontext(&f->ctx, &w->sched);
#if FIB_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, &w->asan_stack, &w->asan_stack_n);
#endif
}

static void fiber_main(void)
{
    fib_fiber *f = tl_fiber;

#if FIB_ASAN
    __sanitizer_finish_switch_fiber(NULL, &f->home->asan_stack, &f->home->asan_stack_n);
#endif
    for (;;) {
        f->fn(f->arg);
        f->done = true;
        switch_out(f);
    }
}

/* getcontext, kept out of fiber_new: it "returns twice" as far as the
 * compiler knows, which would pin fiber_new's locals. */
__attribute__((noinline)) static int ctx_get(ucontext_t *c)
{
    return getcontext(c);
}

/* A new fiber homed on w, or NULL (out of memory). */
static fib_fiber *fiber_new(fib_worker *w)
{
    size_t page = (size_t)getpagesize();
    size_t n = ((w->pool->stack + page - 1) / page + 1) * page;
    fib_fiber *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                  0);
    if (f->map == MAP_FAILED) {
        free(f);
        return NULL;
    }
    f->map_n = n;
    if (mprotect(f->map, page, PROT_NONE) != 0 || ctx_get(&f->ctx) != 0) {
        munmap(f->map, n);
        free(f);
        return NULL;
    }
    f->ctx.uc_stack.ss_sp = (char *)f->map + page;
    f->ctx.uc_stack.ss_size = n - page;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, fiber_main, 0);
    f->home = w;
    return f;
}

static void fiber_free(fib_fiber *f)
{
    munmap(f->map, f->map_n);
    free(f);
}

/* ---- the pool ---- */

static void *worker_main(void *arg)
{
    fib_worker *w = arg;
    fib_pool *p = w->pool;

    os_thread_name("sx-fibers");

    tl_worker = w;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        fib_fiber *f = NULL;

        if (w->rq_head != NULL) {
            f = w->rq_head;
            w->rq_head = f->next;
            if (w->rq_head == NULL)
                w->rq_tail = NULL;
        } else if (p->th != NULL && !p->stopping && p->live < p->maxfibers) {
            fib_task *t = p->th;
            p->th = t->next;
            if (p->th == NULL)
                p->tt = NULL;
            f = w->free;
            if (f != NULL)
                w->free = f->next;
            p->live++;
            w->nlive++;
            pthread_mutex_unlock(&p->mu);
            if (f == NULL)
                f = fiber_new(w);
            if (f == NULL) {
                /* no stack to be had: run it on this thread (its waits
                 * then block the thread) */
                t->fn(t->arg);
                free(t);
                pthread_mutex_lock(&p->mu);
                p->live--;
                w->nlive--;
                continue;
            }
            f->fn = t->fn;
            f->arg = t->arg;
            f->done = false;
            free(t);
            pthread_mutex_lock(&p->mu);
        } else if (p->stopping && w->nlive == 0) {
            break;
        } else {
            w->idle = true;
            pthread_cond_wait(&w->cv, &p->mu);
            w->idle = false;
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        f->next = NULL;
        switch_in(w, f);
        pthread_mutex_lock(&p->mu);
        if (f->done) {
            p->live--;
            w->nlive--;
            f->next = w->free;
            w->free = f;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Wakes one idle worker (caller holds p->mu). */
static void wake_one(fib_pool *p)
{
    for (int i = 0; i < p->started; i++) {
        if (p->w[i].idle) {
            p->w[i].idle = false;
            pthread_cond_signal(&p->w[i].cv);
            return;
        }
    }
}

int fib_pool_new(int nthreads, int maxfibers, size_t stack_bytes, fib_pool **out)
{
    fib_pool *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return SX_ENOMEM;
    if (nthreads < 1)
        nthreads = 1;
    p->maxfibers = maxfibers < 1 ? 1 : maxfibers;
    p->stack = stack_bytes;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return SX_ENOMEM;
    }
    p->w = calloc((size_t)nthreads, sizeof(*p->w));
    if (p->w == NULL) {
        fib_pool_free(p, NULL);
        return SX_ENOMEM;
    }
    for (int i = 0; i < nthreads; i++) {
        fib_worker *w = &p->w[i];
        w->pool = p;
        if (pthread_cond_init(&w->cv, NULL) != 0) {
            fib_pool_free(p, NULL);
            return SX_ENOMEM;
        }
        p->nw++;
        if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
            fib_pool_free(p, NULL);
            return SX_ENOMEM;
        }
        pthread_mutex_lock(&p->mu);
        p->started++;
        pthread_mutex_unlock(&p->mu);
    }
    *out = p;
    return 0;
}

int fib_pool_submit(fib_pool *p, fib_fn fn, void *arg)
{
    fib_task *t = malloc(sizeof(*t));

    if (t == NULL)
        return SX_ENOMEM;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->tt)
        p->tt->next = t;
    else
        p->th = t;
    p->tt = t;
    wake_one(p);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void fib_pool_free(fib_pool *p, fib_fn drop)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    for (int i = 0; i < p->started; i++)
        pthread_cond_signal(&p->w[i].cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->w[i].th, NULL);
    while (p->th != NULL) {
        fib_task *t = p->th;
        p->th = t->next;
        if (drop)
            drop(t->arg);
        free(t);
    }
    for (int i = 0; p->w && i < p->nw; i++) {
        while (p->w[i].free) {
            fib_fiber *f = p->w[i].free;
            p->w[i].free = f->next;
            fiber_free(f);
        }
        pthread_cond_destroy(&p->w[i].cv);
    }
    free(p->w);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

bool fib_pool_stopping(fib_pool *p)
{
    pthread_mutex_lock(&p->mu);
    bool stopping = p->stopping;
    pthread_mutex_unlock(&p->mu);
    return stopping;
}

/* Makes parked fiber f runnable on its home worker. */
static void fib_unpark(fib_fiber *f)
{
    fib_worker *w = f->home;
    fib_pool *p = w->pool;

    pthread_mutex_lock(&p->mu);
    f->next = NULL;
    if (w->rq_tail)
        w->rq_tail->next = f;
    else
        w->rq_head = f;
    w->rq_tail = f;
    if (w->idle) {
        w->idle = false;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

/* ---- events and sleeps ---- */

int ev_init(fib_event *ev)
{
    ev->set = false;
    ev->waiter = NULL;
    if (pthread_mutex_init(&ev->mu, NULL) != 0)
        return SX_ENOMEM;
    if (pthread_cond_init(&ev->cv, NULL) != 0) {
        pthread_mutex_destroy(&ev->mu);
        return SX_ENOMEM;
    }
    return 0;
}

void ev_destroy(fib_event *ev)
{
    pthread_cond_destroy(&ev->cv);
    pthread_mutex_destroy(&ev->mu);
}

void ev_wait(fib_event *ev)
{
    pthread_mutex_lock(&ev->mu);
    while (!ev->set) {
        fib_fiber *f = tl_fiber;
        if (f != NULL) {
            ev->waiter = f;
            pthread_mutex_unlock(&ev->mu);
            switch_out(f); /* ev_set unparks it; only this thread resumes it */
            pthread_mutex_lock(&ev->mu);
        } else {
            pthread_cond_wait(&ev->cv, &ev->mu);
        }
    }
    pthread_mutex_unlock(&ev->mu);
}

void ev_set(fib_event *ev)
{
    fib_fiber *f;

    pthread_mutex_lock(&ev->mu);
    ev->set = true;
    f = ev->waiter;
    ev->waiter = NULL;
    if (f == NULL)
        pthread_cond_broadcast(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
    if (f != NULL)
        fib_unpark(f); /* ev is not touched again: it may be gone */
}

void ev_clear(fib_event *ev)
{
    pthread_mutex_lock(&ev->mu);
    ev->set = false;
    pthread_mutex_unlock(&ev->mu);
}

static void sleep_done(void *arg)
{
    ev_set(arg);
}

void fib_sleep_ms(int ms)
{
    if (ms <= 0)
        return;
    if (tl_fiber != NULL) {
        fib_event ev;
        nng_aio *aio = NULL;

        if (ev_init(&ev) == 0) {
            if (nng_aio_alloc(&aio, sleep_done, &ev) == 0) {
                nng_sleep_aio((nng_duration)ms, aio);
                ev_wait(&ev);
                nng_aio_free(aio);
                ev_destroy(&ev);
                return;
            }
            ev_destroy(&ev);
        }
        /* no timer to be had: fall through and block the thread */
    }
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}
