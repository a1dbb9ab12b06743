/*
 * catalog_part.h — the catalog partition: the cluster's durable catalog of
 * tables and indexes, hosted by the storage node the config names
 * (catalog_node), in its own leveldb (DATA/catalog). Every mutation goes
 * through one apply path (so replication can later wrap it), bumps the
 * version, and is synced before the reply.
 */
#ifndef SX_CATALOG_PART_H
#define SX_CATALOG_PART_H

#include <stdint.h>
#include "catalog.h"
#include "config.h"
#include "msg.h"

typedef struct catp catp;

/* Opens (or creates) the catalog partition in dir. Returns 0, SX_EIO,
 * SX_ENOMEM. *out is freed with catp_close. */
int catp_open(const char *dir, const cfg_cluster *cfg, catp **out);

/* Closes and frees; accepts NULL. */
void catp_close(catp *c);

/* Serves one CATALOG, CAT_UPDATE or CAT_BACKFILLED request frame, appending
 * the reply frame to out. Thread-safe (internally locked). */
void catp_handle(catp *c, msg_type t, const uint8_t *req, size_t n, mp_buf *out);

/* The current catalog's version. Thread-safe. */
uint64_t catp_version(catp *c);

/* A deep copy of the current catalog (caller frees with cat_free), or NULL
 * on allocation failure. Thread-safe. */
cat_catalog *catp_snapshot(catp *c);

#endif
