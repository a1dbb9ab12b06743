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

/* ---- a replica of a replicated catalog (catalog_sm.c drives these) ----
 * Its state changes only by applying Raft entries, in order, on one
 * thread; writes are lazy, each carrying the applied index. */

/* Applies the Raft entry at index: entry[0] a msg_type (CAT_UPDATE or
 * CAT_BACKFILLED), then that request's frame. Appends to reply the reply
 * frame the proposer gets (a success, or the change's own error: a refused
 * change is applied as a refusal on every replica). Returns 0, or SX_EIO
 * when the state could not be written (the replica must stop), SX_ENOMEM.
 * Deterministic: every replica gets the same state and reply. */
int catp_apply_entry(catp *c, uint64_t index, const uint8_t *entry, size_t n, mp_buf *reply);
/* Records index as applied without a change (a no-op or membership
 * entry). Returns 0, SX_EIO or SX_ENOMEM. */
int catp_mark_applied(catp *c, uint64_t index);
/* The Raft index applied so far (0: none). Thread-safe. */
uint64_t catp_applied(catp *c);
/* The partition's leveldb (its snapshots are taken and installed whole). */
struct ldb;
struct ldb *catp_db(catp *c);
/* The key holding the applied index (an installed snapshot sets it). */
const char *catp_applied_key(size_t *n);
/* Reloads the catalog, request ids and applied index from the leveldb
 * (after a snapshot was installed into it). Returns 0, or an sx_err with
 * the previous state kept. */
int catp_reload(catp *c);

#endif
