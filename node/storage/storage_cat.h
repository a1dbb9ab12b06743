/*
 * storage_cat.h — where a storage node gets its catalog.
 *
 * Usually from the catalog cache (CATALOG over nng to the catalog node).
 * On the node that hosts the catalog partition, straight from the partition
 * instead: a server worker waiting for the catalog must never depend on
 * another worker of the same server being free to answer CATALOG (with
 * every worker waiting, that is a deadlock broken only by timeouts).
 * Same contract as catcache_get: catalogs handed out stay valid until
 * st_cat_free.
 */
#ifndef SX_STORAGE_CAT_H
#define SX_STORAGE_CAT_H

#include <stdint.h>
#include "catalog.h"
#include "catalog_part.h"
#include "config.h"

typedef struct st_cat st_cat;

/* Creates the source: local (borrowed; must outlive it) when not NULL,
 * else a catalog cache dialing cfg's catalog node. Returns 0, SX_ENOMEM,
 * SX_ENET. */
int st_cat_new(const cfg_cluster *cfg, catp *local, st_cat **out);

/* Frees the source and every catalog it handed out; accepts NULL. */
void st_cat_free(st_cat *c);

/* The newest catalog, refreshed first when the cached one is older than
 * min_version (or none is cached). *cat is borrowed until st_cat_free.
 * Returns 0, SX_ESTALECAT (still older), SX_EUNAVAIL/SX_ETIMEDOUT (catalog
 * node unreachable), SX_ENOMEM. Thread-safe. */
int st_cat_get(st_cat *c, uint64_t min_version, const cat_catalog **cat);

/* Refreshes now. Returns 0 or an sx_err. Thread-safe. */
int st_cat_refresh(st_cat *c);

/* The newest catalog already held if it is at least min_version, without
 * fetching, reading or waiting for a refresh in progress: 0, or
 * SX_ESTALECAT (also when a refresh holds the source just now). */
int st_cat_peek(st_cat *c, uint64_t min_version, const cat_catalog **cat);

#endif
