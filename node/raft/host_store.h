/*
 * host_store.h — the durable side of a node's Raft host (host.h) on the
 * node's Raft log store (raft_log_store.h): the persist function that makes
 * each round one synced WriteBatch for every group, and loading a group's
 * replica from the store, or bootstrapping it when the store holds nothing
 * of it and the caller gives the initial configuration.
 */
#ifndef SHARDEX_RAFT_HOST_STORE_H
#define SHARDEX_RAFT_HOST_STORE_H

#include "host.h"
#include "raft_log_store.h"

/* An rhost_env.persist for ctx = a raft_store *: every ready set and
 * compaction of the round in one batch, committed (synced if the store
 * syncs).  Returns 0 or -1. */
int rhost_store_persist(void *ctx, size_t n, const uint64_t *groups, raft_ready *const *rds,
                        size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps);

/* Loads replica `id` of `group` from st into h (rhost_group_add), with the
 * state machine's durable applied index.  When st holds nothing of the
 * group: with boot (the initial voters; boot_size the size of the state
 * machine's empty-state snapshot) the group is bootstrapped (snapshot meta
 * index 1, term 1, conf *boot, persisted and synced before returning);
 * without, the replica starts empty, to join as a learner.  Returns
 * RAFT_OK, RAFT_ERR_CORRUPT (*bad_index, if non-NULL, gets the index at
 * fault), RAFT_ERR_IO, RAFT_ERR_INVALID, RAFT_ERR_NOMEM; err (may be NULL)
 * gets a message. */
int rhost_store_load_group(rhost *h, raft_store *st, uint64_t group, uint64_t id,
                           const raft_conf *boot, uint64_t boot_size, uint64_t applied,
                           const rhost_sm_ops *ops, void *sm, uint64_t *bad_index, char *err,
                           size_t errlen);

#endif
