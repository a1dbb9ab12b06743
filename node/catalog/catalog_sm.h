/*
 * catalog_sm.h — the catalog partition as the state machine of a Raft
 * group (host.h's rhost_sm_ops): entries are catalog changes (a msg_type
 * byte and the CAT_UPDATE or CAT_BACKFILLED frame), applied through
 * catp_apply_entry; snapshots are ldb_snap files of the catalog's whole
 * leveldb, kept in a folder of their own:
 *   DIR/snap-1      the empty state (the bootstrap snapshot), made when the
 *                   replica's leveldb is first created
 *   DIR/snap-<N>    the newest snapshot taken or installed, at index N
 *   DIR/stage       a snapshot being received
 * A snapshot installed over the catalog replaces it whole and sets its
 * applied index in the same synced batch (ldb_snap_install, with the
 * marker key "raft_installing": found at a start, the install is redone
 * from the snapshot file before the replica serves).
 */
#ifndef SX_CATALOG_SM_H
#define SX_CATALOG_SM_H

#include <stdint.h>

#include "catalog_part.h"
#include "host.h"

typedef struct catsm catsm;

/* Opens the state machine over c (borrowed; it must outlive the state
 * machine) with its snapshot folder dir (made if missing). *boot_size
 * gets the size of the empty-state snapshot, *applied the replica's
 * applied index (0 when an interrupted install leaves the state to be
 * replaced). Returns 0, SX_EIO or SX_ENOMEM. */
int catsm_open(catp *c, const char *dir, catsm **out, uint64_t *boot_size, uint64_t *applied);
/* Frees; accepts NULL. */
void catsm_close(catsm *s);
/* The functions rhost calls (sm: the catsm). */
extern const rhost_sm_ops catsm_ops;

#endif
