/*
 * storage_cat.c — a storage node's catalog source: the catalog cache, or
 * the local catalog partition on the catalog node. See storage_cat.h.
 */
#include <pthread.h>
#include <stdlib.h>
#include "catalog_cache.h"
#include "storage_cat.h"
#include "sx_errors.h"

struct st_cat {
    catcache *cc;       /* remote source, or NULL */
    catp *local;        /* local source, or NULL */
    pthread_mutex_t mu; /* guards the fields below (local source) */
    const cat_catalog *cur;
    cat_catalog **all; /* every version handed out, freed at the end */
    size_t n, cap;
};

int st_cat_new(const cfg_cluster *cfg, catp *local, st_cat **out)
{
    st_cat *c = calloc(1, sizeof(*c));
    int rc = 0;

    if (c == NULL)
        return SX_ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    c->local = local;
    if (local == NULL)
        rc = catcache_new(cfg, &c->cc);
    if (rc != 0) {
        st_cat_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void st_cat_free(st_cat *c)
{
    if (c == NULL)
        return;
    catcache_free(c->cc);
    for (size_t i = 0; i < c->n; i++)
        cat_free(c->all[i]);
    free(c->all);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Takes a snapshot of the local partition if it is newer and keeps it.
 * Holds mu. */
static int local_refresh(st_cat *c)
{
    cat_catalog *snap;

    if (c->cur != NULL && catp_version(c->local) <= c->cur->version)
        return 0; /* unchanged: no copy (polled often) */
    snap = catp_snapshot(c->local);

    if (snap == NULL)
        return SX_ENOMEM;
    if (c->cur != NULL && snap->version <= c->cur->version) {
        cat_free(snap);
        return 0;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        cat_catalog **all = realloc(c->all, cap * sizeof(*all));

        if (all == NULL) {
            cat_free(snap);
            return SX_ENOMEM;
        }
        c->all = all;
        c->cap = cap;
    }
    c->all[c->n++] = snap;
    c->cur = snap;
    return 0;
}

int st_cat_get(st_cat *c, uint64_t min_version, const cat_catalog **cat)
{
    int rc = 0;

    if (c->cc != NULL)
        return catcache_get(c->cc, min_version, cat);
    pthread_mutex_lock(&c->mu);
    if (c->cur == NULL || c->cur->version < min_version)
        rc = local_refresh(c);
    if (rc == 0 && c->cur->version < min_version)
        rc = SX_ESTALECAT;
    if (rc == 0)
        *cat = c->cur;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int st_cat_peek(st_cat *c, uint64_t min_version, const cat_catalog **cat)
{
    int rc = SX_ESTALECAT;

    if (c->cc != NULL)
        return catcache_peek(c->cc, min_version, cat);
    /* a refresh holds mu across a read of the local catalog partition,
     * which can wait for a catalog change's sync: do not wait for it */
    if (pthread_mutex_trylock(&c->mu) != 0)
        return SX_ESTALECAT;
    if (c->cur != NULL && c->cur->version >= min_version) {
        *cat = c->cur;
        rc = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int st_cat_refresh(st_cat *c)
{
    int rc;

    if (c->cc != NULL)
        return catcache_refresh(c->cc);
    pthread_mutex_lock(&c->mu);
    rc = local_refresh(c);
    pthread_mutex_unlock(&c->mu);
    return rc;
}
