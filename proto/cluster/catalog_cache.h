/*
 * catalog_cache.h — a node's (or router's) cached copy of the catalog.
 *
 * Fetched with the CATALOG message from the catalog node over a link (the
 * catalog node itself fetches from its own URL too: one path, no special
 * case). Catalog versions
 * are immutable once published: catcache_get returns a borrowed pointer
 * that stays valid until catcache_free (old versions are kept, not freed —
 * catalog changes are rare, so the memory is bounded by their number).
 */
#ifndef SX_CATALOG_CACHE_H
#define SX_CATALOG_CACHE_H

#include <stdint.h>
#include "catalog.h"
#include "catclient.h"
#include "config.h"

typedef struct catcache catcache;

/* Creates a cache for cfg, with links to the catalog's replicas (its
 * leader found as catclient.h does). Returns 0 or SX_ENOMEM / SX_ENET /
 * SX_ECONFIG. No fetch happens yet. */
int catcache_new(const cfg_cluster *cfg, catcache **out);

/* Frees the cache and every catalog version it handed out; accepts NULL. */
void catcache_free(catcache *cc);

/* Returns the newest catalog, first refreshing if the cached version is
 * below min_version (or nothing is cached yet). *cat is borrowed (valid
 * until catcache_free). Returns 0, or SX_EUNAVAIL/SX_ETIMEDOUT when the
 * catalog node cannot be reached and nothing new enough is cached.
 * Thread-safe. */
int catcache_get(catcache *cc, uint64_t min_version, const cat_catalog **cat);

/* Like catcache_get, but never fetches: SX_ESTALECAT when nothing cached
 * is at least min_version. */
int catcache_peek(catcache *cc, uint64_t min_version, const cat_catalog **cat);

/* Brings the cache up to at least the catalog the catalog node held when
 * the call began: returns once a fetch started after that has succeeded
 * (its own, or another caller's it shares). Returns 0 or an sx_err (that
 * fetch's). Thread-safe; a fiber is parked, not its thread, while it
 * waits. */
int catcache_refresh(catcache *cc);

/* Fetches started so far and callers waiting for the one in flight (for
 * tests); either pointer may be NULL. Thread-safe. */
void catcache_counts(catcache *cc, uint64_t *started, unsigned *waiting);

/* The cache's client of the catalog's leader, for the caller's own
 * catalog calls (a router's changes): borrowed, valid until
 * catcache_free. */
catclient *catcache_client(catcache *cc);

#endif
