/*
 * catalog_repl.h — serving a replicated catalog: this node's replica of
 * the catalog group (catalog_sm.h over the catalog partition), and its
 * requests served through Raft by the group's leader.
 *
 * CATALOG is a linearizable read (ReadIndex): answered by the leader once
 * it has applied every change committed before the request. CAT_UPDATE and
 * CAT_BACKFILLED are proposed as entries and answered with the reply their
 * apply produced, once applied on the leader (so after a quorum of the
 * replicas has them durably). A replica that is not the leader answers
 * SX_ENOTLEADER naming the leader's node id (msg_encode_err_hint) when it
 * knows it; catclient.h follows it.
 *
 * Every request is taken on the server's receiving thread without
 * blocking (net_defer_fn) and answered from the Raft loop's thread.
 */
#ifndef SX_CATALOG_REPL_H
#define SX_CATALOG_REPL_H

#include <stdbool.h>
#include <stdint.h>

#include "catalog_part.h"
#include "config.h"
#include "net.h"
#include "repl.h"

typedef struct catrepl catrepl;

/* Starts this node's replica of the catalog group (replicas: the config's
 * catalog nodes) over the open partition c, its snapshots in snapdir, in
 * the replication service r. c, r and cfg must outlive it. Returns 0,
 * SX_EIO (logged), SX_ENOMEM. */
int catrepl_start(catp *c, repl *r, const cfg_cluster *cfg, const char *snapdir, catrepl **out);

/* The server's defer hook for CATALOG, CAT_UPDATE and CAT_BACKFILLED:
 * true when taken (answered later), false for other types and malformed
 * frames (a worker refuses those). */
bool catrepl_defer(catrepl *cr, msg_type t, const uint8_t *req, size_t n, net_reply *rep);

/* From now on every request is answered SX_EUNAVAIL at once; call before
 * repl_stop. */
void catrepl_quiesce(catrepl *cr);

/* Frees (after repl_stop: nothing is pending). Accepts NULL. */
void catrepl_free(catrepl *cr);

#endif
