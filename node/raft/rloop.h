/*
 * rloop.h — a node's Raft loop: one thread that owns the node's Raft host
 * (host.h) and its durable log store, and turns the outside world into the
 * host's events.
 *
 * Any thread may hand the loop a received RAFT batch (rloop_deliver), a
 * proposal (rloop_propose), a linearizable read (rloop_read) or a function
 * to run with the host (rloop_call); they queue in the loop's inbox and are
 * taken together at the start of the next round, so every proposal that
 * arrives while a round's durable write is in progress goes into the next
 * write: the group commit of every group of the node is one fsync per
 * round.  The loop ticks the host every tick_ms of the monotonic clock.
 *
 * Messages out: every message of a round bound for one node is encoded
 * into one RAFT batch (raft_wire.h; split only past a frame's budget) and
 * handed to the transport's send once the round has persisted them.
 * Messages in: a batch from node N is decoded on the loop thread; a message
 * whose sender replica does not belong to N is dropped (a node cannot speak
 * for another's replicas).
 *
 * Completions (rloop_done_fn) run on the loop thread: keep them short
 * (e.g. send a reply).  If the host fails (a durable write, a snapshot
 * install or an apply failed), the loop stops serving: every call then
 * fails with RAFT_ERR_IO and the config's on_fail runs once, on the loop
 * thread; the node must stop (fail-stop) and restart from disk.
 */
#ifndef SHARDEX_RAFT_RLOOP_H
#define SHARDEX_RAFT_RLOOP_H

#include <stddef.h>
#include <stdint.h>

#include "host.h"
#include "raft_log_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rloop rloop;

/* Sends one encoded RAFT batch (bytes borrowed for the call) to node `to`.
 * Runs on the loop thread; it must not block for long (queue and return);
 * a batch it cannot send is simply lost (Raft retries). */
typedef void (*rloop_send_fn)(void *ctx, uint8_t to, const uint8_t *batch, size_t len);

typedef struct rloop_config {
    uint8_t node;      /* this node's number, 1..255 */
    unsigned tick_ms;  /* the host's tick; default 50 */
    rhost_config host; /* rhost_config_default's, seed set per start */
    size_t max_batch;  /* bytes of one RAFT batch before another starts;
                        * default 8 MiB (a frame holds 16) */
    rloop_send_fn send;
    void *send_ctx;
    /* called once, on the loop thread, when the host failed; may be NULL */
    void (*on_fail)(void *ctx, const char *why);
    void *fail_ctx;
    /* called on the loop thread when a group's role, leader or term
     * changes; may be NULL */
    void (*on_role)(void *ctx, uint64_t group, int role, uint64_t leader, uint64_t term);
    void *role_ctx;
    /* called on the loop thread after every tick, with the host (e.g. to
     * drive membership changes); may be NULL */
    void (*on_tick)(void *ctx, rhost *h);
    void *tick_ctx;
} rloop_config;

/* A completion: err RAFT_OK, RHOST_LOST, RHOST_GONE, RAFT_ERR_NOT_LEADER,
 * RAFT_ERR_BUSY, RAFT_ERR_INVALID (unknown group), RAFT_ERR_NOMEM or
 * RAFT_ERR_IO (the loop failed or stopped); leader: the group's leader
 * replica as this node knows it (0: unknown), for redirecting a refused
 * call.  res: as rhost_done_fn's (the reply is the callback's on RAFT_OK). */
typedef void (*rloop_done_fn)(void *arg, int err, uint64_t index, rhost_result *res,
                              uint64_t leader);

/* Fills cfg's defaults (tick 50 ms, max_batch 8 MiB, host defaults). */
void rloop_config_default(rloop_config *cfg, uint8_t node);

/* Starts the loop over the open store st (borrowed; the caller closes it
 * after rloop_stop).  Returns RAFT_OK, RAFT_ERR_INVALID (no send, node 0),
 * RAFT_ERR_NOMEM or RAFT_ERR_IO (no thread).  *out owns the loop. */
int rloop_start(const rloop_config *cfg, raft_store *st, rloop **out);
/* Stops the thread, completes what is pending with RHOST_GONE (inbox
 * proposals and reads included) and frees the loop.  Accepts NULL. */
void rloop_stop(rloop *l);

/* Runs fn(h, st, arg) on the loop thread, between rounds, and waits for it
 * (e.g. to load a group with rhost_store_load_group, or read status).
 * Returns fn's result, or RAFT_ERR_IO if the loop has failed or stopped.
 * Every call into a loop (this and the ones below) must return before
 * rloop_stop is called on it: the owner guards that (node/repl does). */
int rloop_call(rloop *l, int (*fn)(rhost *h, raft_store *st, void *arg), void *arg);

/* Hands the loop a RAFT batch received from node `from` (copied).  Never
 * blocks beyond a short lock; a batch for a failed loop, or one that would
 * take the inbox past 64 MiB of batches, is dropped (counted in
 * dropped_in; Raft sends again). */
void rloop_deliver(rloop *l, uint8_t from, const uint8_t *batch, size_t len);

/* Proposes data (copied) in group; done runs exactly once, on the loop
 * thread (also for a refusal: NOT_LEADER with the leader's id).  Returns
 * RAFT_OK, or RAFT_ERR_NOMEM / RAFT_ERR_IO when it could not even be
 * queued (done is then not called). */
int rloop_propose(rloop *l, uint64_t group, const void *data, uint32_t len, rloop_done_fn done,
                  void *arg);
/* A linearizable read in group: done(arg, RAFT_OK, index, NULL, leader)
 * once this replica, the leader, has applied everything committed before
 * the call; same rules as rloop_propose. */
int rloop_read(rloop *l, uint64_t group, rloop_done_fn done, void *arg);

/* Rounds run and the messages and bytes sent, for status and tests. */
typedef struct rloop_stats {
    uint64_t rounds, batches_out, bytes_out;
    uint64_t dropped_out; /* messages the encoder refused: a host bug */
    uint64_t batches_in, msgs_in;
    uint64_t dropped_in; /* undecodable batches and forged senders */
} rloop_stats;
void rloop_stats_get(rloop *l, rloop_stats *out);

#ifdef __cplusplus
}
#endif
#endif
