/*
 * ixroute.h — where a storage node sends an index partition's I_APPLY and
 * I_BUILD: to the replica believed to lead it. An index partition of
 * several replicas is a Raft group whose leader alone applies; another
 * replica answers SX_ENOTLEADER with a hint (the config "id" of the node it
 * believes leads, 0: none), having done nothing, and a node that is down
 * answers nothing. The shipper and the backfill report each failed call
 * (ixroute_fail) and send the next one where ixroute_node says: the hinted
 * node when it holds a replica, else the next replica in the partition's
 * order. Their own retry delays pace the walk (an election takes about a
 * second). A partition of one replica always goes to its node.
 *
 * Threading: any thread (atomics).
 */
#ifndef SX_IXROUTE_H
#define SX_IXROUTE_H

#include <stdatomic.h>
#include <stdint.h>

#include "config.h"

typedef struct ixroute {
    const cfg_cluster *cfg; /* borrowed */
    atomic_int *node;       /* [cfg->nindex]: the node to send to */
} ixroute;

/* Creates the routes of cfg's index partitions (each at its first replica).
 * Returns 0 or SX_ENOMEM. */
int ixroute_new(const cfg_cluster *cfg, ixroute **out);

/* Frees r; accepts NULL. */
void ixroute_free(ixroute *r);

/* The node (index into cfg->nodes) to send index partition d's
 * (cfg->index[d]) next call to. */
int ixroute_node(const ixroute *r, int d);

/* A call for partition d sent to node failed with err (an sx_err: of the
 * call, or of the reply; hint: the reply's, for SX_ENOTLEADER): moves the
 * route as described above. Errors that another replica would answer the
 * same way (a bad request) move nothing. */
void ixroute_fail(ixroute *r, int d, int node, int err, uint64_t hint);

#endif
