/*
 * catalog_cache.c — a process's cached copy of the catalog (see
 * catalog_cache.h).
 *
 * Fetches with CATALOG from the catalog's leader (catclient.h). Every
 * version ever handed out is kept (in `all`) until catcache_free, so
 * borrowed pointers never dangle. One lock, mu, guards everything and is
 * held only briefly, never across the network call: callers may be fibers
 * (the router's), and a fiber that holds a mutex while its call parks it
 * would block every other fiber of its thread that reaches for the mutex,
 * itself included, for good (fiber.h). One fetch is in flight at a time;
 * fetches are numbered as they start. A caller that wants the catalog as
 * of its call needs a fetch numbered above the count when it came in (one
 * that started earlier may have been answered before a version the caller
 * was told of): it takes the outcome of a later fetch in flight, waits out
 * an earlier one and then starts or joins another. Waiting is an fib_event
 * (it parks a fiber, or blocks a plain thread).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "catalog_cache.h"
#include "fiber.h"
#include "msg.h"
#include "net.h"
#include "sx_errors.h"

#define CATCACHE_TIMEOUT_MS 2000

/* A caller waiting for the fetch in flight; on the waiter's stack. */
typedef struct cc_waiter {
    fib_event done;
    int rc;       /* the fetch's outcome and number, set before */
    uint64_t seq; /* done */
    struct cc_waiter *next;
} cc_waiter;

struct catcache {
    catclient *cl; /* the catalog's replicas, its leader found */
    pthread_mutex_t mu;
    bool fetching;          /* fetch number `started` is in flight */
    uint64_t started;       /* fetches started */
    uint64_t fresh;         /* the number of the last that succeeded (0: none) */
    cc_waiter *waiters;     /* callers waiting for the one in flight */
    const cat_catalog *cur; /* newest version (one of all[]), or NULL */
    cat_catalog **all;      /* every version handed out (owned) */
    size_t nall, cap;
};

int catcache_new(const cfg_cluster *cfg, catcache **out)
{
    catcache *cc;
    int rc;

    if (cfg->catalog_node < 0 || cfg->catalog_node >= cfg->nnodes)
        return SX_ECONFIG;
    cc = calloc(1, sizeof(*cc));
    if (cc == NULL)
        return SX_ENOMEM;
    if (pthread_mutex_init(&cc->mu, NULL) != 0) {
        free(cc);
        return SX_ENOMEM;
    }
    rc = catclient_new(cfg, &cc->cl);
    if (rc != 0) {
        pthread_mutex_destroy(&cc->mu);
        free(cc);
        return rc;
    }
    *out = cc;
    return 0;
}

void catcache_free(catcache *cc)
{
    size_t i;

    if (cc == NULL)
        return;
    catclient_free(cc->cl);
    for (i = 0; i < cc->nall; i++)
        cat_free(cc->all[i]);
    free(cc->all);
    pthread_mutex_destroy(&cc->mu);
    free(cc);
}

/* One CATALOG round trip asking for versions from `since` on (0: any);
 * on success *out is a new catalog (caller owns), or NULL when the catalog
 * node's is older than since (unchanged for the caller). */
static int catcache_fetch(catcache *cc, uint64_t since, cat_catalog **out)
{
    msg_CATALOG_req req;
    msg_CATALOG_rep rep;
    uint8_t *frame = NULL, *resp = NULL;
    size_t frame_n = 0, resp_n = 0;
    int rc;

    memset(&req, 0, sizeof(req));
    memset(&rep, 0, sizeof(rep));
    req.since = since;
    *out = NULL;
    rc = msg_encode_req_bytes(MSG_CATALOG, &req, &frame, &frame_n);
    if (rc != 0)
        return rc;
    rc = catclient_call(cc->cl, frame, frame_n, CATCACHE_TIMEOUT_MS, &resp, &resp_n);
    free(frame);
    if (rc != 0)
        return rc == SX_ENET || rc == SX_ENOTLEADER ? SX_EUNAVAIL : rc;
    rc = msg_decode_rep(MSG_CATALOG, resp, resp_n, &rep, NULL, 0);
    if (rc == 0 && rep.catalog.n == 1 && rep.catalog.p[0] == 0xc0) {
        /* nil: only below since (a node before `since` always sends it) */
        rc = since > 0 && rep.version < since ? 0 : SX_EPROTO;
    } else if (rc == 0) {
        rc = cat_decode(rep.catalog.p, rep.catalog.n, out);
        if (rc == 0 && (*out)->version != rep.version) {
            cat_free(*out);
            *out = NULL;
            rc = SX_EPROTO;
        }
    }
    msg_free_rep(MSG_CATALOG, &rep);
    free(resp);
    return rc;
}

/* Publishes a fetched catalog if it is newer than cur (else frees it).
 * Caller holds mu. Returns 0 or SX_ENOMEM. */
static int catcache_publish(catcache *cc, cat_catalog *cat)
{
    if (cat == NULL)
        return 0; /* unchanged */
    if (cc->cur != NULL && cat->version <= cc->cur->version) {
        cat_free(cat);
        return 0;
    }
    if (cc->nall == cc->cap) {
        size_t cap = cc->cap ? cc->cap * 2 : 8;
        cat_catalog **all = realloc(cc->all, cap * sizeof(*all));
        if (all == NULL) {
            cat_free(cat);
            return SX_ENOMEM;
        }
        cc->all = all;
        cc->cap = cap;
    }
    cc->all[cc->nall++] = cat;
    cc->cur = cat;
    return 0;
}

/* Waits, without mu, for the fetch in flight; returns with mu held and
 * its outcome and number in *w. Needs mu. */
static int wait_fetch(catcache *cc, cc_waiter *w)
{
    if (ev_init(&w->done) != 0)
        return SX_ENOMEM;
    w->rc = 0;
    w->seq = 0;
    w->next = cc->waiters;
    cc->waiters = w;
    pthread_mutex_unlock(&cc->mu);
    ev_wait(&w->done);
    ev_destroy(&w->done);
    pthread_mutex_lock(&cc->mu);
    return 0;
}

/* Runs fetch number n (mu not held) and publishes it; answers the callers
 * that waited for it. Returns its outcome. */
static int run_fetch(catcache *cc, uint64_t n)
{
    cat_catalog *cat = NULL;
    cc_waiter *w, *next;
    uint64_t since;
    int rc;

    pthread_mutex_lock(&cc->mu);
    since = cc->cur != NULL ? cc->cur->version + 1 : 0;
    pthread_mutex_unlock(&cc->mu);
    rc = catcache_fetch(cc, since, &cat);

    pthread_mutex_lock(&cc->mu);
    if (rc == 0)
        rc = catcache_publish(cc, cat);
    if (rc == 0)
        cc->fresh = n;
    cc->fetching = false;
    w = cc->waiters;
    cc->waiters = NULL;
    pthread_mutex_unlock(&cc->mu);
    for (; w != NULL; w = next) {
        next = w->next; /* read before ev_set: w may be gone after it */
        w->rc = rc;
        w->seq = n;
        ev_set(&w->done);
    }
    return rc;
}

int catcache_refresh(catcache *cc)
{
    cc_waiter me;
    uint64_t after, n;
    int rc;

    pthread_mutex_lock(&cc->mu);
    after = cc->started; /* fetches numbered above this start after us */
    for (;;) {
        if (cc->fresh > after) {
            pthread_mutex_unlock(&cc->mu);
            return 0;
        }
        if (!cc->fetching)
            break;
        if ((rc = wait_fetch(cc, &me)) != 0) {
            pthread_mutex_unlock(&cc->mu);
            return rc;
        }
        if (me.rc != 0 && me.seq > after) { /* one on our behalf failed */
            pthread_mutex_unlock(&cc->mu);
            return me.rc;
        }
    }
    n = ++cc->started;
    cc->fetching = true;
    pthread_mutex_unlock(&cc->mu);
    return run_fetch(cc, n);
}

/* Returns the newest catalog if it is at least min_version, else NULL. */
static const cat_catalog *catcache_current(catcache *cc, uint64_t min_version)
{
    const cat_catalog *cat;

    pthread_mutex_lock(&cc->mu);
    cat = cc->cur;
    pthread_mutex_unlock(&cc->mu);
    if (cat != NULL && cat->version >= min_version)
        return cat;
    return NULL;
}

int catcache_peek(catcache *cc, uint64_t min_version, const cat_catalog **cat)
{
    *cat = catcache_current(cc, min_version);
    return *cat != NULL ? 0 : SX_ESTALECAT;
}

/* Beyond the header's codes: SX_ESTALECAT when the catalog node answered
 * but its catalog is still older than min_version. One refresh is enough:
 * its fetch started after this call, so it saw every version published
 * before it. */
int catcache_get(catcache *cc, uint64_t min_version, const cat_catalog **cat)
{
    int rc;

    if ((*cat = catcache_current(cc, min_version)) != NULL)
        return 0;
    if ((rc = catcache_refresh(cc)) != 0)
        return rc;
    if ((*cat = catcache_current(cc, min_version)) != NULL)
        return 0;
    return SX_ESTALECAT;
}

void catcache_counts(catcache *cc, uint64_t *started, unsigned *waiting)
{
    unsigned n = 0;

    pthread_mutex_lock(&cc->mu);
    for (const cc_waiter *w = cc->waiters; w != NULL; w = w->next)
        n++;
    if (started != NULL)
        *started = cc->started;
    if (waiting != NULL)
        *waiting = n;
    pthread_mutex_unlock(&cc->mu);
}

catclient *catcache_client(catcache *cc)
{
    return cc->cl;
}
