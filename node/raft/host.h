/*
 * host.h — the host side of the Raft core: drives every Raft group of one
 * node by the ready-set contract of raft.h (docs/RAFT.md, "The ready set").
 *
 * A node holds many groups (its replicas of fact partitions, index
 * partitions and the catalog).  rhost owns their cores and runs them in
 * rounds: one round takes the ready set of every group that has one,
 * persists all of them in ONE durable write (group commit: the Raft log is
 * the node's write-ahead log), sends their messages (the transport may
 * coalesce everything bound for one node into one frame, see `flush`),
 * installs received snapshots, applies committed entries to each group's
 * state machine, answers linearizable reads, and advances the cores.
 *
 * What rhost adds to the core:
 *   - proposals with completion callbacks: the callback runs once the entry
 *     is applied on this replica (with the state machine's reply), or when
 *     it can no longer be (RHOST_LOST: another entry took its index, so it
 *     was certainly not applied; RHOST_GONE: the group or host closed, the
 *     outcome is unknown);
 *   - linearizable reads (ReadIndex), coalesced: every read asked in one
 *     round shares one ReadIndex; the callback runs once the state machine
 *     has applied the read's index (or with RAFT_ERR_NOT_LEADER);
 *   - compaction: when a group has applied `compact_entries` entries past
 *     its snapshot, the state machine is asked for a snapshot, and the
 *     snapshot meta is persisted with the next round;
 *   - snapshot streaming: the chunk bytes of outgoing SNAP messages are read
 *     from the state machine, received chunks handed to it for staging.
 *
 * What it leaves to others: the durable write (env.persist; rhost_store.c
 * implements it over raft_log_store.h), the transport (env.send/flush), the
 * clock (the caller calls rhost_tick at its tick interval), threads (every
 * call on one rhost is made from one thread; a node runs it in its loop).
 *
 * Replica ids: a group's replicas are numbered so that an id is never
 * reused (raft.h); rhost_node_of() gives the node (its number in the
 * cluster, 1..255) an id belongs to: the low 8 bits.  A node's first
 * replica of a group has id (1 << 8) | node; a replacement replica gets
 * ((conf.max_id >> 8) + 1) << 8 | node (rhost_next_id).
 */
#ifndef SHARDEX_RAFT_HOST_H
#define SHARDEX_RAFT_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "raft.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rhost rhost;

/* Outcomes of a proposal beyond RAFT_OK / RAFT_ERR_*. */
enum {
    RHOST_LOST = 100, /* another entry took its index: certainly not applied */
    RHOST_GONE = 101  /* the group or the host closed first: unknown */
};

/* What applying one entry produced for its proposer: `code` (0 for
 * success, else the state machine's own error number) and optional reply
 * bytes (malloc'd by the state machine; ownership passes to the proposer's
 * callback, or rhost frees them when no proposer waits on this replica). */
typedef struct rhost_result {
    int code;
    uint8_t *reply;
    size_t reply_len;
} rhost_result;

/* A group's state machine.  Every function runs on the host's thread,
 * inside rhost_round.  Apply must be deterministic: the same entries give
 * the same state and results on every replica (no clock, no randomness). */
typedef struct rhost_sm_ops {
    /* Applies committed entry e (types NORMAL, NOOP, CONF; only NORMAL
     * carries data) and records e->index as applied, atomically with the
     * state it describes.  A state machine that applied nothing (applied
     * 0) holds the empty state of the bootstrap snapshot (index 1): its
     * first entry is index 2.  For NORMAL entries it may fill *res.  Returns 0,
     * or -1 when the state could not be written (a disk error): the round
     * fails and the host must be stopped (fail-stop). */
    int (*apply)(void *sm, const raft_entry *e, rhost_result *res);
    /* Makes a snapshot of the state at its applied index (which it returns
     * in *index) and its size in *size; the bytes stay readable by
     * snap_read(index, ...) until a newer snapshot replaces them, and the
     * state at *index is durable once this returns.  Returns 0 or -1 (no
     * snapshot taken; the host tries again later). */
    int (*snap_make)(void *sm, uint64_t *index, uint64_t *size);
    /* Reads bytes [off, off+len) of snapshot `index` (made by snap_make, or
     * the bootstrap snapshot at index 1: the empty state) into buf.
     * Returns 0, or -1 if that snapshot is no longer held (the transfer
     * then restarts with a newer one). */
    int (*snap_read)(void *sm, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len);
    /* Stages a received chunk: offset 0 starts a new staging area for
     * snapshot `index`.  Durable once it returns.  Returns 0 or -1. */
    int (*snap_stage)(void *sm, uint64_t index, uint64_t off, const uint8_t *p, uint32_t len);
    /* The staged snapshot is complete (meta, incl. its size): checks it and
     * replaces the state with it; applied becomes meta->index.  Also called
     * at open when the state machine's applied index is below the durable
     * snapshot's (a crash between persisting the meta and installing).
     * Returns 0 or -1 (the round fails: fail-stop). */
    int (*snap_install)(void *sm, const raft_snap_meta *meta);
    /* Optional (may be NULL).  The staged snapshot is complete (meta):
     * checks it (e.g. its checksum, size and index) before the round
     * persists its meta.  Returns 0, or -1: the round fails (the host
     * fail-stops) without persisting the meta, so a restart fetches the
     * snapshot again instead of installing a bad one at every start. */
    int (*snap_verify)(void *sm, const raft_snap_meta *meta);
    /* Optional (may be NULL).  Replaces the state with the empty state
     * (applied 0): called before a replica joins a group as a new member
     * over a state machine that may hold an older replica's data.
     * Returns 0 or -1. */
    int (*reset)(void *sm);
} rhost_sm_ops;

/* The node's durable write and transport. */
typedef struct rhost_env {
    void *ctx;
    /* Persists one round in one durable (synced) write: for i < n, group
     * groups[i]'s ready set rds[i] (hard state, entries, snapshot meta: see
     * raft_log_store.h's raft_store_batch_ready) and then the compactions
     * (ncomp snapshot metas of groups comp_groups[i]; never one below a
     * snapshot the same call installs for its group: the host drops a
     * compaction a received snapshot supersedes).  Returns 0, or -1 if
     * the write failed: rhost_round then fails and the host must be
     * stopped and reloaded from disk. */
    int (*persist)(void *ctx, size_t n, const uint64_t *groups, raft_ready *const *rds,
                   size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps);
    /* Queues m (borrowed for the call; SNAP chunk bytes filled in) for the
     * node rhost_node_of(m->to). */
    void (*send)(void *ctx, const raft_msg *m);
    /* Sends what send queued in this round (one frame per node). May be
     * NULL. */
    void (*flush)(void *ctx);
    /* Called when a group's soft state changes (role, leader, term); may be
     * NULL.  For routing caches and logs. */
    void (*on_role)(void *ctx, uint64_t group, int role, uint64_t leader, uint64_t term);
    /* Called between a round's phases (RHOST_PHASE_*); may be NULL.  A
     * non-zero return ends the round there as a crash would: the host is
     * failed (RAFT_ERR_IO).  For fault injection (the simulator); a node
     * leaves it NULL. */
    int (*phase)(void *ctx, int phase);
} rhost_env;

/* Phases of a round, for rhost_env.phase. */
enum {
    RHOST_PHASE_PERSISTED = 1, /* persisted, nothing sent yet */
    RHOST_PHASE_SENT = 2       /* sent and flushed, nothing applied yet */
};

/* Tunables of every group of a host. */
typedef struct rhost_config {
    uint32_t election_ticks;  /* raft_config's; default 10 */
    uint32_t heartbeat_ticks; /* default 1 */
    uint32_t max_inflight;    /* default 8 */
    uint32_t max_msg_entries; /* default 64 */
    uint32_t max_msg_bytes;   /* default 1 MiB */
    uint32_t snap_chunk;      /* default 256 KiB */
    uint64_t compact_entries; /* entries applied past the snapshot before
                               * compacting; 0: never; default 10,000 */
    uint64_t seed;            /* per host start (e.g. from getrandom) */
    uint32_t plants;          /* RAFT_PLANT_*: test only, 0 in production */
    raft_alloc alloc;         /* every core's allocator (raft_config's, ctx
                               * shared by the host's groups); NULL
                               * functions: malloc/free; default NULL.  A
                               * core frees all it took by the time
                               * rhost_group_remove or rhost_free returns */
} rhost_config;

/* Proposal and read completions: err is RAFT_OK, RHOST_LOST, RHOST_GONE or
 * RAFT_ERR_NOT_LEADER (reads: leadership was lost before the read could be
 * confirmed; retry at the leader).  For proposals, index is the entry's and
 * res its result (reply owned by the callback) when err is RAFT_OK. */
typedef void (*rhost_done_fn)(void *arg, int err, uint64_t index, rhost_result *res);

/* Fills cfg with the defaults above. */
void rhost_config_default(rhost_config *cfg);

/* Creates a host for node `node` (1..255).  env is copied.  Returns
 * RAFT_OK, RAFT_ERR_INVALID or RAFT_ERR_NOMEM; *out owns the host. */
int rhost_new(uint8_t node, const rhost_config *cfg, const rhost_env *env, rhost **out);
/* Frees the host and its groups; pending proposals and reads complete with
 * RHOST_GONE.  Accepts NULL. */
void rhost_free(rhost *h);

/* The node a replica id belongs to. */
static inline uint8_t rhost_node_of(uint64_t replica)
{
    return (uint8_t)(replica & 0xff);
}
/* The id of `node`'s first replica of a group. */
static inline uint64_t rhost_first_id(uint8_t node)
{
    return (1u << 8) | node;
}
/* A fresh id for a replica of `node` joining a group whose highest id so
 * far is max_id: above max_id, so never reused. */
static inline uint64_t rhost_next_id(uint64_t max_id, uint8_t node)
{
    return (((max_id >> 8) + 1) << 8) | node;
}

/* Loads a group's replica into the host.  id: this replica's id (its low 8
 * bits must be the host's node).  snap/hs: the durable snapshot meta and
 * hard state (raft_group_new's); entries[0..n): the durable entries after
 * snap->index (copied); applied: the state machine's durable applied index.
 * If applied < snap->index the staged snapshot is installed first
 * (ops->snap_install).  ops/sm: the state machine (borrowed until the group
 * is removed).  Returns RAFT_OK, RAFT_ERR_INVALID (bad id, group already
 * loaded), RAFT_ERR_CORRUPT (the durable state is inconsistent), NOMEM, or
 * RAFT_ERR_IO (the snapshot could not be installed). */
int rhost_group_add(rhost *h, uint64_t group, uint64_t id, const raft_snap_meta *snap,
                    const raft_hard_state *hs, const raft_entry *entries, size_t n,
                    uint64_t applied, const rhost_sm_ops *ops, void *sm);
/* Removes a group (its pending proposals and reads complete with
 * RHOST_GONE).  Returns RAFT_OK or RAFT_ERR_INVALID (unknown group). */
int rhost_group_remove(rhost *h, uint64_t group);

/* One tick for every group.  Returns RAFT_OK or the first error. */
int rhost_tick(rhost *h);
/* Feeds a message from the network (borrowed).  Unknown groups and
 * messages for another replica are ignored (RAFT_OK). */
int rhost_step(rhost *h, const raft_msg *m);
/* Proposes data (copied) in group; on RAFT_OK, done(arg, ...) runs exactly
 * once later, from rhost_round or rhost_free.  Otherwise (NOT_LEADER, BUSY,
 * INVALID: unknown group, NOMEM) done is never called; *leader (may be
 * NULL) gets the leader's replica id when known (0 if not). */
int rhost_propose(rhost *h, uint64_t group, const void *data, uint32_t len, rhost_done_fn done,
                  void *arg, uint64_t *leader);
/* Asks for a linearizable read in group: done(arg, RAFT_OK, index, NULL)
 * runs once the state machine has applied every entry committed before the
 * call, and leadership was confirmed after it.  Same return and callback
 * rules as rhost_propose. */
int rhost_read(rhost *h, uint64_t group, rhost_done_fn done, void *arg, uint64_t *leader);
/* Proposes a membership change (raft_propose_conf). */
int rhost_conf(rhost *h, uint64_t group, int op, uint64_t id);
/* Hands leadership of group to replica `to`. */
int rhost_transfer(rhost *h, uint64_t group, uint64_t to);

/* Runs one round (see the file comment).  Returns RAFT_OK (also when there
 * was nothing to do), or RAFT_ERR_IO when persisting, staging, installing
 * or applying failed: the host is then failed, every later call returns
 * RAFT_ERR_IO, and the node must stop (fail-stop) and reload from disk.
 * *did (may be NULL) gets 1 if the round had any ready set. */
int rhost_round(rhost *h, int *did);

/* Soft state of a group: role (RAFT_LEADER...), leader's replica id (0:
 * unknown), term.  Returns RAFT_OK or RAFT_ERR_INVALID (unknown group). */
int rhost_group_state(const rhost *h, uint64_t group, int *role, uint64_t *leader, uint64_t *term);
/* The core of a group (for status: commit, applied, conf, describe), or
 * NULL.  Borrowed: valid until the group is removed. */
const raft_group *rhost_group_core(const rhost *h, uint64_t group);
/* Number of groups loaded. */
size_t rhost_group_count(const rhost *h);

#ifdef __cplusplus
}
#endif
#endif
