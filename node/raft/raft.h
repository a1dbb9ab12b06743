/*
 * raft.h — public API of shardex's Raft replication core.
 *
 * The core is a pure state machine: it performs no I/O, reads no clock, starts
 * no threads and allocates only through the allocator the host passes in its
 * config (so every byte is in the host's accounting).  Time arrives as ticks,
 * everything else as events (messages, proposals, reads, host notifications).
 *
 * After feeding events, the host asks for a ready set (raft_ready_get), then:
 *   1. persists the hard state, the entries and any snapshot chunk/install,
 *      in one synced batch (for all groups of the node at once);
 *   2. sends the messages;
 *   3. applies the committed entries and answers the read states;
 *   4. calls raft_advance.
 * No other call may be made on the group between raft_ready_get and
 * raft_advance (they return RAFT_ERR_STATE).  See docs/RAFT.md.
 *
 * Threading: a raft_group is not thread-safe; one thread owns it.  Distinct
 * groups share nothing and may be driven by different threads.
 */
#ifndef SHARDEX_RAFT_H
#define SHARDEX_RAFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes.  Numbers are stable (they may be logged or sent). */
#define RAFT_ERRORS(X)                                                       \
    X(RAFT_OK, 0, "ok")                                                      \
    X(RAFT_ERR_NOMEM, 1, "out of memory")                                    \
    X(RAFT_ERR_NOT_LEADER, 2, "not the leader")                              \
    X(RAFT_ERR_BUSY, 3, "a configuration change or transfer is in progress") \
    X(RAFT_ERR_INVALID, 4, "invalid argument")                               \
    X(RAFT_ERR_CORRUPT, 5, "corrupt record")                                 \
    X(RAFT_ERR_IO, 6, "i/o error")                                           \
    X(RAFT_ERR_STATE, 7, "call not allowed in this state")                   \
    X(RAFT_ERR_NOT_CAUGHT_UP, 8, "learner has not caught up")                \
    X(RAFT_ERR_TOO_BIG, 9, "too big")

enum raft_err {
#define RAFT_ERR_ENUM(name, num, text) name = num,
    RAFT_ERRORS(RAFT_ERR_ENUM)
#undef RAFT_ERR_ENUM
};

/* Returns a static, never-freed description of err (any value). */
const char *raft_strerror(int err);

#define RAFT_MAX_MEMBERS 16

/* Entry types. */
enum { RAFT_ENTRY_NORMAL = 0, RAFT_ENTRY_NOOP = 1, RAFT_ENTRY_CONF = 2 };

/* Configuration change operations (one server at a time). */
enum { RAFT_CONF_ADD_LEARNER = 1, RAFT_CONF_PROMOTE = 2, RAFT_CONF_REMOVE = 3 };

typedef struct raft_entry {
    uint64_t term;
    uint64_t index;
    uint8_t type;  /* RAFT_ENTRY_* */
    uint32_t len;  /* bytes at data */
    uint8_t *data; /* owner depends on where the entry is found (see uses) */
} raft_entry;

typedef struct raft_member {
    uint64_t id;   /* node id, never 0, never reused */
    uint8_t voter; /* 1 voter, 0 learner */
} raft_member;

typedef struct raft_conf {
    uint32_t n;
    raft_member m[RAFT_MAX_MEMBERS];
    uint64_t max_id; /* highest id ever added: new ids must exceed it */
} raft_conf;

typedef struct raft_hard_state {
    uint64_t term;
    uint64_t vote;
    uint64_t commit;
} raft_hard_state;

typedef struct raft_snap_meta {
    uint64_t index; /* last log index the snapshot covers (0: none) */
    uint64_t term;  /* term of that entry */
    uint64_t size;  /* bytes of snapshot data (host-defined encoding) */
    raft_conf conf; /* configuration as of index */
} raft_snap_meta;

enum {
    RAFT_MSG_PREVOTE = 1,
    RAFT_MSG_PREVOTE_RESP,
    RAFT_MSG_VOTE,
    RAFT_MSG_VOTE_RESP,
    RAFT_MSG_APPEND,
    RAFT_MSG_APPEND_RESP,
    RAFT_MSG_HEARTBEAT,
    RAFT_MSG_HEARTBEAT_RESP,
    RAFT_MSG_SNAP,
    RAFT_MSG_SNAP_RESP,
    RAFT_MSG_TIMEOUT_NOW,
    RAFT_MSG_TYPE_MAX
};

/*
 * A message.  The fields used depend on type (docs/RAFT.md has the table).
 * Messages in a ready set are owned by the core until raft_advance: the host
 * must serialise or copy them before that.  Messages passed to raft_step are
 * borrowed for the duration of the call only.
 */
typedef struct raft_msg {
    uint8_t type;
    uint8_t reject; /* responses: 1 = rejected / not granted */
    uint8_t force;  /* VOTE/PREVOTE from a leadership transfer */
    uint8_t done;   /* SNAP: last chunk */
    uint64_t group;
    uint64_t from, to;
    uint64_t term;
    uint64_t index;    /* APPEND: prev index; VOTE: last index; resp: index */
    uint64_t log_term; /* APPEND: prev term; VOTE: last term */
    uint64_t commit;   /* APPEND/HEARTBEAT: leader commit for this peer */
    uint64_t hint;     /* APPEND_RESP reject: follower's last index */
    uint64_t ctx;      /* HEARTBEAT(_RESP): ReadIndex round */
    uint32_t n_entries;
    raft_entry *entries; /* APPEND */
    /* SNAP / SNAP_RESP */
    raft_snap_meta snap;
    uint64_t offset;     /* SNAP: chunk offset; SNAP_RESP: next offset wanted */
    uint32_t len;        /* SNAP: chunk bytes */
    const uint8_t *data; /* SNAP: chunk bytes; NULL in a ready set: the host
                            fills the chunk [offset, offset+len) of its snapshot
                            snap.index before sending */
} raft_msg;

typedef struct raft_read_state {
    uint64_t ctx;   /* the host's request context from raft_read_index */
    uint64_t index; /* answer once applied >= index */
    uint8_t ok;     /* 0: leadership lost, the read must be retried elsewhere */
} raft_read_state;

enum { RAFT_FOLLOWER = 0, RAFT_PRECANDIDATE, RAFT_CANDIDATE, RAFT_LEADER };

/*
 * The ready set.  Every pointer is owned by the core and valid until
 * raft_advance on the same group.  Entries in `entries` replace the log from
 * entries[0].index on (the host deletes any durable entries at or above it).
 */
typedef struct raft_ready {
    uint8_t hs_changed;
    raft_hard_state hs;  /* persist if hs_changed */
    raft_entry *entries; /* persist (append/overwrite) */
    size_t n_entries;
    raft_msg *msgs; /* send, after persisting */
    size_t n_msgs;
    raft_entry *committed; /* apply in order, after persisting */
    size_t n_committed;
    /* snapshot being received: write chunk bytes at offset into staging */
    uint8_t has_chunk;
    uint64_t chunk_index; /* snapshot index the chunk belongs to */
    uint64_t chunk_offset;
    uint32_t chunk_len;
    const uint8_t *chunk_data;
    /* snapshot complete (after writing this round's chunk, if any): the
     * staged bytes become the snapshot; persist the meta; drop every durable
     * entry <= snap.index, and all of them if the durable log does not hold
     * entry (snap.index, snap.term); then, before applying `committed`
     * (which start after snap.index), replace the state machine with it. */
    uint8_t has_snap;
    raft_snap_meta snap;
    raft_read_state *reads; /* answer after applying */
    size_t n_reads;
    /* soft state, informational */
    uint8_t role;
    uint64_t leader;
    uint64_t term;
} raft_ready;

/* Allocator: all core memory goes through it; sizes are passed to free. */
typedef struct raft_alloc {
    void *(*alloc)(void *ctx, size_t n);
    void (*free)(void *ctx, void *p, size_t n);
    void *ctx;
} raft_alloc;

/* Planted bugs: TEST ONLY.  Never set in production; see docs/RAFT.md. */
enum {
    RAFT_PLANT_OLD_TERM_COMMIT = 1u << 0, /* count old-term entries to commit */
    RAFT_PLANT_FORGET_VOTE = 1u << 1,     /* never report the vote to persist */
    RAFT_PLANT_NO_LEADER_NOOP = 1u << 2,  /* new leaders append no no-op */
    RAFT_PLANT_LOCAL_READ = 1u << 3       /* ReadIndex answers locally */
};

typedef struct raft_config {
    uint64_t id;              /* this replica's node id (non-zero) */
    uint64_t group;           /* stamped on every message */
    uint32_t election_ticks;  /* base election timeout; randomised in
                                 [election_ticks, 2*election_ticks) */
    uint32_t heartbeat_ticks; /* < election_ticks */
    uint32_t max_inflight;    /* in-flight appends per follower (>=1) */
    uint32_t max_msg_entries; /* entries per append (>=1) */
    uint32_t max_msg_bytes;   /* soft byte cap per append */
    uint32_t snap_chunk;      /* snapshot chunk bytes (>=1) */
    uint64_t seed;            /* randomness for election timeouts */
    uint32_t plants;          /* RAFT_PLANT_* (test only, 0 in production) */
    raft_alloc alloc;         /* NULL functions: malloc/free */
} raft_config;

typedef struct raft_group raft_group;

/* Fills cfg with defaults (election 10, heartbeat 1, inflight 8, ...). */
void raft_config_default(raft_config *cfg, uint64_t id, uint64_t group);

/*
 * Creates a group replica.  `snap` is the durable snapshot meta (index 0
 * with the bootstrap configuration for a new group, or index 0 with an empty
 * configuration for a replica that will join as a learner), `hs` the durable
 * hard state (may be NULL: zero).  Durable entries after snap->index are then
 * fed with raft_load_entry, in index order, and raft_load_done ends loading.
 * `applied` is the host state machine's applied index (>= snap->index);
 * committed entries after it are delivered again for apply.
 * On success *out owns the group (free with raft_group_free).
 * Returns RAFT_OK, RAFT_ERR_INVALID or RAFT_ERR_NOMEM.
 */
int raft_group_new(const raft_config *cfg, const raft_snap_meta *snap, const raft_hard_state *hs,
                   uint64_t applied, raft_group **out);
/* Appends one durable entry while loading (data is copied).  Entries must be
 * contiguous from snap->index+1.  Returns RAFT_OK, RAFT_ERR_INVALID (not
 * contiguous, bad type), RAFT_ERR_CORRUPT (a term below the previous entry's
 * or above the hard state's), RAFT_ERR_NOMEM. */
int raft_load_entry(raft_group *g, const raft_entry *e);
/* Ends loading; checks hs.commit against the loaded log.  Returns RAFT_OK or
 * RAFT_ERR_CORRUPT (commit beyond the log: the durable state is damaged). */
int raft_load_done(raft_group *g);
/* Frees the group and everything it owns.  Accepts NULL. */
void raft_group_free(raft_group *g);

/* One logical clock tick.  Returns RAFT_OK or an error (NOMEM, STATE). */
int raft_tick(raft_group *g);
/* Feeds a message from the network (borrowed for the call).  Malformed or
 * stale messages are ignored (RAFT_OK); RAFT_ERR_INVALID for a message not
 * addressed to this replica/group; NOMEM on allocation failure. */
int raft_step(raft_group *g, const raft_msg *m);
/* Proposes a normal entry (data copied).  Leader only.  *index (may be NULL)
 * receives the entry's index.  Returns OK, NOT_LEADER, BUSY (transfer in
 * progress), NOMEM, STATE. */
int raft_propose(raft_group *g, const void *data, uint32_t len, uint64_t *index);
/* Proposes a configuration change (one at a time).  ADD_LEARNER needs an id
 * above conf.max_id; PROMOTE needs a caught-up learner; REMOVE may not name
 * the leader itself (transfer leadership first).  Returns OK, NOT_LEADER,
 * BUSY (a change is still uncommitted), INVALID, NOT_CAUGHT_UP, NOMEM. */
int raft_propose_conf(raft_group *g, int op, uint64_t id);
/* Starts a linearizable read: once a quorum confirms leadership, a read state
 * {ctx, index} appears in a ready set.  Leader only (NOT_LEADER otherwise). */
int raft_read_index(raft_group *g, uint64_t ctx);
/* Asks the leader to hand leadership to voter `to`.  OK, NOT_LEADER, INVALID,
 * BUSY. */
int raft_transfer_leader(raft_group *g, uint64_t to);
/* The host has a snapshot of its state machine at `index` (<= applied) of
 * `size` bytes; the core drops in-memory entries up to index and will stream
 * this snapshot to followers that need it.  The host must persist the meta
 * (raft_snap_meta_get) and may then delete durable entries <= index. */
int raft_compact(raft_group *g, uint64_t index, uint64_t size);

/* Leader: the index of the oldest snapshot still being streamed to some
 * follower (the host must keep its bytes), or 0 if none. */
uint64_t raft_snap_pinned(const raft_group *g);

/* One entry point for every event, step(group, event): a host loop may
 * queue raft_event values and feed them in order.  Each type maps to the
 * function above with the same arguments and returns what it returns. */
enum {
    RAFT_EV_TICK = 1, /* raft_tick */
    RAFT_EV_MSG,      /* raft_step(msg) */
    RAFT_EV_PROPOSE,  /* raft_propose(data, len, index_out) */
    RAFT_EV_CONF,     /* raft_propose_conf(conf_op, id) */
    RAFT_EV_READ,     /* raft_read_index(ctx) */
    RAFT_EV_TRANSFER, /* raft_transfer_leader(id) */
    RAFT_EV_COMPACT   /* raft_compact(index, size) */
};
typedef struct raft_event {
    int type;
    const raft_msg *msg;
    const void *data;
    uint32_t len;
    uint64_t *index_out;
    int conf_op;
    uint64_t id, ctx, index, size;
} raft_event;
int raft_step_event(raft_group *g, const raft_event *ev);

/* Fills rd; returns 1 if there is anything to do, 0 if not.  Calls between
 * get and advance fail with RAFT_ERR_STATE. */
int raft_ready_get(raft_group *g, raft_ready *rd);
/* The host has done everything rd asked; frees the ready set. */
int raft_advance(raft_group *g, const raft_ready *rd);

/* Accessors (no ownership transfer). */
uint64_t raft_id(const raft_group *g);
int raft_role(const raft_group *g);
uint64_t raft_leader(const raft_group *g);
uint64_t raft_term(const raft_group *g);
uint64_t raft_commit(const raft_group *g);
uint64_t raft_applied(const raft_group *g);
uint64_t raft_last_index(const raft_group *g);
const raft_conf *raft_conf_get(const raft_group *g);
const raft_snap_meta *raft_snap_meta_get(const raft_group *g);
/* Term of the in-memory entry at index (0 if unknown/compacted). */
uint64_t raft_term_at(const raft_group *g, uint64_t index);
/* Borrowed view of the in-memory entry at index, NULL if not held. */
const raft_entry *raft_entry_at(const raft_group *g, uint64_t index);

/* Leader: what it knows of member id's replication: *match the highest
 * index known to be on it, *active whether it was heard from since the
 * last check-quorum round (either pointer may be NULL).  Returns RAFT_OK,
 * RAFT_ERR_NOT_LEADER, or RAFT_ERR_INVALID (id is not a member, or is this
 * replica). */
int raft_progress_of(const raft_group *g, uint64_t id, uint64_t *match, int *active);

/* Writes a one-line human-readable description of the replication progress
 * (leader) into buf (always NUL-terminated); for diagnostics only. */
void raft_describe(const raft_group *g, char *buf, size_t len);

/* Configuration helpers. */
int raft_conf_find(const raft_conf *c, uint64_t id); /* position or -1 */
uint32_t raft_conf_voters(const raft_conf *c);
/* Applies a change to c; returns RAFT_OK or RAFT_ERR_INVALID (c unchanged). */
int raft_conf_apply(raft_conf *c, int op, uint64_t id);
/* Encodes/decodes the payload of a RAFT_ENTRY_CONF entry (9 bytes). */
#define RAFT_CONF_ENTRY_LEN 9
void raft_conf_entry_encode(uint8_t out[RAFT_CONF_ENTRY_LEN], int op, uint64_t id);
int raft_conf_entry_decode(const uint8_t *p, uint32_t len, int *op, uint64_t *id);

#ifdef __cplusplus
}
#endif
#endif
