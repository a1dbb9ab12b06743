/*
 * catalog_cache.h — a node's (or router's) cached copy of the catalog.
 *
 * Fetched with the CATALOG message from the catalog node (or straight from
 * the local catalog partition when this process hosts it). Catalog versions
 * are immutable once published: catcache_get returns a borrowed pointer
 * that stays valid until catcache_free (old versions are kept, not freed —
 * catalog changes are rare, so the memory is bounded by their number).
 */
#ifndef SX_CATALOG_CACHE_H
#define SX_CATALOG_CACHE_H

#include <stdint.h>
#include "catalog.h"
#include "config.h"
#include "catalog_part.h"

typedef struct catcache catcache;

/* Creates a cache for cfg. local may be NULL (then the catalog is fetched
 * over nng from cfg->nodes[cfg->catalog_node].url). Returns 0 or SX_ENOMEM
 * / SX_ENET. No fetch happens yet. */
int catcache_new(const sx_config *cfg, catp *local, catcache **out);

/* Frees the cache and every catalog version it handed out; accepts NULL. */
void catcache_free(catcache *cc);

/* Returns the newest catalog, first refreshing if the cached version is
 * below min_version (or nothing is cached yet). *cat is borrowed (valid
 * until catcache_free). Returns 0, or SX_EUNAVAIL/SX_ETIMEDOUT when the
 * catalog node cannot be reached and nothing new enough is cached.
 * Thread-safe. */
int catcache_get(catcache *cc, uint64_t min_version, const sx_catalog **cat);

/* Fetches the catalog now; returns 0 or an sx_err. Thread-safe. */
int catcache_refresh(catcache *cc);

#endif
