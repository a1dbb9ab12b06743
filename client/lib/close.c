/*
 * close.c — closing a client's router sockets without hanging the caller.
 *
 * nng 1.5's nng_close can wait forever: seen after a call timed out while
 * its router was still connected but stuck behind an unreachable node (the
 * REQ context's reaping never completes; tests/integration/partition.sh
 * hit it about once in twelve loads). The daemons guard their own shutdown
 * (net_shutdown_guard); a client library must not hang its caller in
 * sx_client_close either. So the sockets are closed on a thread of their
 * own, and the caller waits for it at most CL_CLOSE_WAIT_MS: past that it
 * returns, the thread goes on (it frees what it holds when nng lets it),
 * and the sockets' resources leak if nng never returns. Nothing is lost by
 * that: every call on those sockets has already returned.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "internal.h"
#include "log.h"

#define CL_CLOSE_WAIT_MS 2000

typedef struct closer {
    nng_socket *socks;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;      /* every socket closed */
    bool abandoned; /* the caller stopped waiting: the thread frees */
} closer;

static void closer_free(closer *k)
{
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    free(k->socks);
    free(k);
}

/* A closer holding a copy of socks[0..n), or NULL (no memory). */
static closer *closer_new(const nng_socket *socks, int n)
{
    closer *k = calloc(1, sizeof *k);

    if (k == NULL)
        return NULL;
    k->socks = malloc((size_t)(n > 0 ? n : 1) * sizeof *socks);
    if (k->socks == NULL || pthread_mutex_init(&k->mu, NULL) != 0) {
        free(k->socks);
        free(k);
        return NULL;
    }
    if (pthread_cond_init(&k->cv, NULL) != 0) {
        pthread_mutex_destroy(&k->mu);
        free(k->socks);
        free(k);
        return NULL;
    }
    memcpy(k->socks, socks, (size_t)n * sizeof *socks);
    k->n = n;
    return k;
}

static void close_all(const nng_socket *socks, int n)
{
    for (int i = 0; i < n; i++)
        if (nng_socket_id(socks[i]) > 0)
            nng_close(socks[i]);
}

static void *close_main(void *arg)
{
    closer *k = arg;

    close_all(k->socks, k->n);
    pthread_mutex_lock(&k->mu);
    k->done = true;
    bool mine = k->abandoned;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    if (mine)
        closer_free(k);
    return NULL;
}

/* Starts k's thread, detached; false when it cannot. */
static bool closer_start(closer *k)
{
    pthread_attr_t a;
    pthread_t th;
    bool ok;

    if (pthread_attr_init(&a) != 0)
        return false;
    ok = pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
         pthread_create(&th, &a, close_main, k) == 0;
    pthread_attr_destroy(&a);
    return ok;
}

void cl_close_sockets(const nng_socket *socks, int n)
{
    closer *k = closer_new(socks, n);

    if (k == NULL || !closer_start(k)) { /* no thread to spare: close here */
        if (k != NULL)
            closer_free(k);
        close_all(socks, n);
        return;
    }
    struct timespec until;
    os_deadline_in(&until, CLOCK_REALTIME, CL_CLOSE_WAIT_MS);
    pthread_mutex_lock(&k->mu);
    while (!k->done && pthread_cond_timedwait(&k->cv, &k->mu, &until) != ETIMEDOUT)
        ;
    bool done = k->done;
    if (!done)
        k->abandoned = true;
    pthread_mutex_unlock(&k->mu);
    if (done)
        closer_free(k);
}
