/*
 * catalog_cache.c — a process's cached copy of the catalog (see
 * catalog_cache.h).
 *
 * Fetches with CATALOG from the catalog node over one link (net_peer). Every
 * version ever handed out is kept (in `all`) until catcache_free, so
 * borrowed pointers never dangle. One lock, mu, guards everything and is
 * held only briefly, never across the network call: callers may be fibers
 * (the router's), and a fiber that holds a mutex while its call parks it
 * would block every other fiber of its thread that reaches for the mutex,
 * itself included, for good (fiber.h). Callers that need a newer catalog
 * while a fetch is in flight share it: they queue an sx_event (which parks
 * a fiber, or blocks a plain thread) and take that fetch's outcome.
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
    sx_event done;
    int rc;                  /* the fetch's outcome, set before done */
    struct cc_waiter *next;
} cc_waiter;

struct catcache {
    net_peer *peer;
    pthread_mutex_t mu;
    bool fetching;           /* a fetch is in flight */
    cc_waiter *waiters;      /* callers sharing it */
    const sx_catalog *cur;   /* newest version (one of all[]), or NULL */
    sx_catalog **all;        /* every version handed out (owned) */
    size_t nall, cap;
    uint64_t gen;            /* completed successful fetches */
};

int catcache_new(const sx_config *cfg, catcache **out)
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
    rc = net_peer_open_link(cfg->nodes[cfg->catalog_node].url, 1, &cc->peer);
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
    net_peer_close(cc->peer);
    for (i = 0; i < cc->nall; i++)
        cat_free(cc->all[i]);
    free(cc->all);
    pthread_mutex_destroy(&cc->mu);
    free(cc);
}

/* One CATALOG round trip; on success *out is a new catalog (caller owns). */
static int catcache_fetch(catcache *cc, sx_catalog **out)
{
    msg_CATALOG_req req;
    msg_CATALOG_rep rep;
    mp_buf b;
    uint8_t *frame = NULL, *resp = NULL;
    size_t frame_n = 0, resp_n = 0;
    int rc;

    memset(&req, 0, sizeof(req));
    memset(&rep, 0, sizeof(rep));
    mp_buf_init(&b);
    rc = msg_encode_req(MSG_CATALOG, &req, &b);
    if (rc == 0)
        rc = mp_buf_take(&b, &frame, &frame_n);
    mp_buf_free(&b);
    if (rc != 0)
        return rc;
    rc = net_peer_call_sync(cc->peer, frame, frame_n, CATCACHE_TIMEOUT_MS, &resp, &resp_n);
    free(frame);
    if (rc != 0)
        return rc == SX_ENET ? SX_EUNAVAIL : rc;
    rc = msg_decode_rep(MSG_CATALOG, resp, resp_n, &rep, NULL, 0);
    if (rc == 0) {
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
static int catcache_publish(catcache *cc, sx_catalog *cat)
{
    if (cc->cur != NULL && cat->version <= cc->cur->version) {
        cat_free(cat);
        return 0;
    }
    if (cc->nall == cc->cap) {
        size_t cap = cc->cap ? cc->cap * 2 : 8;
        sx_catalog **all = realloc(cc->all, cap * sizeof(*all));
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

/* Fetches and publishes unless another fetch completed since seen_gen; a
 * caller that finds a fetch in flight waits for it and takes its outcome
 * (it started before this caller looked: catcache_get's second round
 * fetches on its own behalf when that was not new enough). Never holds mu
 * across the network call or the wait. */
static int catcache_fetch_shared(catcache *cc, uint64_t seen_gen)
{
    sx_catalog *cat = NULL;
    cc_waiter me, *w, *next;
    int rc;

    pthread_mutex_lock(&cc->mu);
    if (cc->gen != seen_gen) {
        /* someone fetched since we looked: that result is fresh enough */
        pthread_mutex_unlock(&cc->mu);
        return 0;
    }
    if (cc->fetching) {
        if (ev_init(&me.done) != 0) {
            pthread_mutex_unlock(&cc->mu);
            return SX_ENOMEM;
        }
        me.rc = 0;
        me.next = cc->waiters;
        cc->waiters = &me;
        pthread_mutex_unlock(&cc->mu);
        ev_wait(&me.done);
        ev_destroy(&me.done);
        return me.rc;
    }
    cc->fetching = true;
    pthread_mutex_unlock(&cc->mu);

    rc = catcache_fetch(cc, &cat);
    pthread_mutex_lock(&cc->mu);
    if (rc == 0)
        rc = catcache_publish(cc, cat);
    if (rc == 0)
        cc->gen++;
    cc->fetching = false;
    w = cc->waiters;
    cc->waiters = NULL;
    pthread_mutex_unlock(&cc->mu);
    for (; w != NULL; w = next) {
        next = w->next;         /* read before ev_set: w may be gone after it */
        w->rc = rc;
        ev_set(&w->done);
    }
    return rc;
}

int catcache_refresh(catcache *cc)
{
    uint64_t gen;

    pthread_mutex_lock(&cc->mu);
    gen = cc->gen;
    pthread_mutex_unlock(&cc->mu);
    return catcache_fetch_shared(cc, gen);
}

/* Returns the newest catalog if it is at least min_version, else NULL.
 * Also reports the fetch generation it saw. */
static const sx_catalog *catcache_current(catcache *cc, uint64_t min_version,
                                          uint64_t *gen)
{
    const sx_catalog *cat;

    pthread_mutex_lock(&cc->mu);
    cat = cc->cur;
    *gen = cc->gen;
    pthread_mutex_unlock(&cc->mu);
    if (cat != NULL && cat->version >= min_version)
        return cat;
    return NULL;
}

int catcache_peek(catcache *cc, uint64_t min_version, const sx_catalog **cat)
{
    uint64_t gen;

    *cat = catcache_current(cc, min_version, &gen);
    return *cat != NULL ? 0 : SX_ESTALECAT;
}

/* Beyond the header's codes: SX_ESTALECAT when the catalog node answered
 * but its catalog is still older than min_version. */
int catcache_get(catcache *cc, uint64_t min_version, const sx_catalog **cat)
{
    uint64_t gen;
    int attempt, rc = 0;

    /* two rounds: a shared fetch may have started before min_version was
     * published; the second round then fetches on our own behalf */
    for (attempt = 0; attempt < 2; attempt++) {
        if ((*cat = catcache_current(cc, min_version, &gen)) != NULL)
            return 0;
        rc = catcache_fetch_shared(cc, gen);
        if (rc != 0)
            return rc;
    }
    if ((*cat = catcache_current(cc, min_version, &gen)) != NULL)
        return 0;
    return SX_ESTALECAT;
}
