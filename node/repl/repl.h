/*
 * repl.h — a node's replication service: the Raft loop (rloop.h) of every
 * replicated group the node holds a replica of, its durable log store
 * (DATA/raft), and the transport between nodes: RAFT frames over the
 * authenticated links (a link to each node it shares a group with, dialed
 * when first needed), received by the node's own server (repl_defer).
 *
 * A node's Raft number is its config "id"; its replica of a group it was
 * configured with is rhost_first_id(id). A group whose log store holds
 * nothing yet is bootstrapped with the configured replicas as voters.
 *
 * Threading: repl_group_add and repl_close from the node's main thread;
 * the rest from any thread (each is safe against a concurrent repl_stop:
 * once stopped they refuse, and repl_stop waits for the calls inside).
 */
#ifndef SX_REPL_H
#define SX_REPL_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "net.h"
#include "rloop.h"

typedef struct repl repl;

/* Opens DATA/raft and starts the loop for node cfg->nodes[self] (which
 * must have an id). cfg must outlive the service. bootstrap: the
 * cluster's first start (shardex-node --bootstrap): a group whose log is
 * empty here is created with the configured replicas; without it such a
 * group is joined as a new replica (below). Returns 0, SX_ECONFIG (no id),
 * SX_EIO (the store: the reason is logged), SX_ENOMEM. */
int repl_open(const cfg_cluster *cfg, int self, const char *data_dir, bool bootstrap, repl **out);

/* Stops the loop: pending proposals and reads complete with RHOST_GONE,
 * and RAFT frames received from then on are answered but dropped (the
 * node's server may still be running). Accepts NULL. */
void repl_stop(repl *r);

/* repl_stop if not done, then closes the links and the store and frees.
 * Call once nothing calls repl_defer any more (the server stopped).
 * Accepts NULL. */
void repl_close(repl *r);

/* Loads this node's replica of group, whose replicas are on cfg nodes
 * nodes[0..n), over state machine ops/sm (applied: its durable applied
 * index; boot_size: the size of its empty-state snapshot). A group whose
 * log here is empty is bootstrapped (with bootstrap) or joined: in the
 * background, the service asks the group's other nodes for its leader
 * (R_PROBE) and the leader to add this node as a new replica (R_JOIN),
 * records the replica id it got, and starts the replica empty, to receive
 * a snapshot and the log; the leader promotes it once caught up and
 * removes the node's lost replica (membership changes one at a time, on
 * the leader's ticks). Until then the group is not served here. Returns
 * 0, or SX_EIO with the reason logged (a damaged log: the replica must be
 * replaced), SX_EINVAL, SX_ENOMEM. */
/* role (may be NULL) is called with role_arg on the loop thread whenever
 * this replica's view of the group changes: its role (RAFT_LEADER, ...),
 * the leader's replica id (0: unknown) and the term. */
typedef void (*repl_role_fn)(void *arg, int role, uint64_t leader, uint64_t term);
int repl_group_add(repl *r, uint64_t group, const int *nodes, int n, const rhost_sm_ops *ops,
                   void *sm, uint64_t boot_size, uint64_t applied, repl_role_fn role,
                   void *role_arg);

/* The node's server's defer hook for MSG_RAFT: hands the frame's batch to
 * the loop and answers at once. Returns false for any other type (and
 * for a malformed frame, which a worker then refuses). */
bool repl_defer(repl *r, msg_type t, const uint8_t *req, size_t n, net_reply *rep);

/* Serves R_PROBE and R_JOIN (on a worker: they wait for the loop) into
 * out; false for any other type. */
bool repl_handle(repl *r, msg_type t, const uint8_t *req, size_t n, mp_buf *out);

/* Appends to out (msgpack) an array with one map per group this node holds
 * a replica of (NODE_STATUS's "groups", PROTOCOL.md): kind, id, this
 * replica's id, state, role, term, leader, commit, applied, last index,
 * and the members with, on the leader, each one's match, lag and whether
 * it answered lately. Waits for the loop; returns 0, or an sx_err with
 * nothing appended. */
int repl_status(repl *r, mp_buf *out);

/* rloop_propose and rloop_read on the node's loop (rloop.h: done runs
 * once, on the loop thread), or RAFT_ERR_IO once the service stopped (done
 * is then not called). Thread-safe, also against repl_stop. */
int repl_propose(repl *r, uint64_t group, const void *data, uint32_t len, rloop_done_fn done,
                 void *arg);
int repl_read(repl *r, uint64_t group, rloop_done_fn done, void *arg);

/* The node (index into cfg.nodes) this node last knew leading group, or
 * -1. Thread-safe. */
int repl_leader(repl *r, uint64_t group);

/* True once the loop failed (a durable write, snapshot install or apply
 * failed): the node must stop (fail-stop) and reload from disk at its
 * next start. Accepts NULL (false). Thread-safe. */
bool repl_failed(repl *r);

/* The config id of node index `node` (for hints), 0 if none. */
int repl_node_id(const repl *r, int node);

/* The config id of this node. */
int repl_self_id(const repl *r);

#endif
