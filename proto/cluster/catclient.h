/*
 * catclient.h — calls to the catalog, wherever its leader is.
 *
 * The catalog has one replica or several (config "catalog_node", an array
 * for several: a Raft group on those storage nodes).  Only its leader
 * answers CATALOG, CAT_UPDATE and CAT_BACKFILLED; another replica answers
 * SX_ENOTLEADER naming the leader's node id when it knows it.  A catclient
 * holds a link to every replica and sends each call to the replica it last
 * found leading: on SX_ENOTLEADER it goes where the hint says (or to the
 * next replica), on a replica that cannot be reached (SX_EUNAVAIL, SX_ENET,
 * SX_ETIMEDOUT of one attempt) or that answers it cannot serve (an error
 * reply SX_EUNAVAIL or SX_EIO, with several replicas) to the next one,
 * until the call's deadline.
 *
 * Retrying elsewhere is safe for every catalog call: CATALOG only reads;
 * a CAT_UPDATE carries its request id, so a change made once is answered
 * with its version when asked again; a repeated CAT_BACKFILLED changes
 * nothing.
 */
#ifndef SX_CATCLIENT_H
#define SX_CATCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

typedef struct catclient catclient;

/* Opens links to every catalog replica of cfg (dialed in the background).
 * cfg must outlive the client.  Returns 0, SX_ECONFIG, SX_ENOMEM, or
 * SX_EINVAL (a bad URL). */
int catclient_new(const cfg_cluster *cfg, catclient **out);

/* Closes the links (failing calls in flight) and frees; accepts NULL. */
void catclient_free(catclient *c);

/* Sends request frame req[n] to the catalog's leader and waits (a fiber
 * parks, not its thread) up to timeout_ms in all.  On 0, *resp (malloc'd,
 * the caller frees it) is the leader's reply frame, which may be an error
 * reply of the request's own (SX_EEXIST...).  Returns 0, or the last
 * failure when no replica answered as leader in time: SX_EUNAVAIL,
 * SX_ETIMEDOUT, SX_ENOTLEADER (replicas answered but none leads: an
 * election in progress that outlasted the call), SX_ENOMEM. */
int catclient_call(catclient *c, const uint8_t *req, size_t n, int timeout_ms, uint8_t **resp,
                   size_t *resp_n);

/* The node (index into cfg.nodes) the client last found leading. */
int catclient_leader(catclient *c);

#endif
