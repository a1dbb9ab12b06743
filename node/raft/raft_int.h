/*
 * raft_int.h — private state of a Raft group and the internal functions that
 * the core's files (raft.c, log.c, election.c, replication.c, readindex.c,
 * snapshot.c, membership.c) share.  Not for use outside node/raft/.
 */
#ifndef SHARDEX_RAFT_INT_H
#define SHARDEX_RAFT_INT_H

#include "raft.h"

#define RAFT_MAX_INFLIGHT 64

enum { PR_PROBE = 0, PR_REPLICATE, PR_SNAPSHOT };

typedef struct raft_progress {
    uint64_t id;
    uint8_t voter;
    uint8_t state;         /* PR_* */
    uint8_t recent_active; /* heard from since the last check-quorum round */
    uint8_t paused;        /* probe: one append per heartbeat interval */
    uint8_t leaving;       /* removed by an uncommitted configuration entry */
    uint64_t match, next;
    uint64_t read_ack; /* highest ReadIndex round acknowledged */
    /* in-flight appends (replicate): last index of each, oldest first */
    uint32_t inflight;
    uint32_t in_head;
    uint64_t in_last[RAFT_MAX_INFLIGHT];
    /* snapshot streaming */
    raft_snap_meta snap;  /* the snapshot being streamed (pinned) */
    uint64_t snap_index;  /* = snap.index */
    uint64_t snap_offset; /* next offset to send */
    uint32_t snap_idle;   /* ticks since the last chunk was sent */
    uint32_t snap_stall;  /* ticks since the follower last made progress */
} raft_progress;

typedef struct raft_pending_read {
    uint64_t ctx;
    uint64_t index;
    uint64_t round; /* heartbeat round that confirms it (0: waiting for
                       the leader's first commit in its term) */
} raft_pending_read;

/* A bump allocator for ready-set data (message entries), freed on advance. */
typedef struct raft_arena_blk {
    struct raft_arena_blk *next;
    size_t cap, used;
    /* data follows */
} raft_arena_blk;

struct raft_group {
    raft_config cfg;
    /* persistent */
    uint64_t term, vote, commit;
    /* in-memory log: entries (snap.index, last] at ents[off .. off+n) */
    raft_snap_meta snap;
    raft_entry *ents;
    size_t ents_cap, off, n;
    /* volatile */
    uint64_t applied;
    uint64_t stable;        /* entries <= stable have been handed out to persist */
    uint64_t unstable_from; /* first index to hand out (after truncation) */
    raft_conf conf;         /* latest in the log (applied on append) */
    uint64_t conf_index;    /* index of the entry that set conf (0: snapshot) */
    uint8_t role;
    uint64_t leader;
    uint32_t election_elapsed, heartbeat_elapsed, rand_timeout;
    uint64_t rng;
    /* election */
    uint64_t votes_for[RAFT_MAX_MEMBERS];
    uint32_t n_granted, n_rejected;
    /* leader */
    raft_progress *prs; /* one per member other than self, conf order */
    uint32_t n_prs;
    uint64_t noop_index; /* first index of this leader's term */
    uint64_t transfer_to;
    uint32_t transfer_elapsed;
    /* ReadIndex */
    raft_pending_read *reads;
    size_t n_reads, reads_cap;
    uint64_t read_round;
    raft_read_state *rs_out;
    size_t n_rs_out, rs_out_cap;
    /* follower snapshot receive */
    uint64_t recv_index, recv_offset;
    uint8_t *chunk; /* copy of the last accepted chunk */
    uint32_t chunk_len, chunk_cap;
    uint64_t chunk_index, chunk_offset;
    uint8_t has_chunk, has_snap_install;
    /* ready bookkeeping */
    raft_msg *msgs;
    size_t n_msgs, msgs_cap;
    raft_arena_blk *arena;
    raft_hard_state prev_hs;
    uint8_t in_ready;
    uint8_t loading;
    uint8_t prev_role;
    uint64_t prev_leader;
};

/* raft.c: memory */
void *raft__alloc(raft_group *g, size_t n);
void raft__free(raft_group *g, void *p, size_t n);
void *raft__arena(raft_group *g, size_t n);
void raft__arena_reset(raft_group *g);
/* raft.c: messages */
raft_msg *raft__msg(raft_group *g, int type, uint64_t to);
uint64_t raft__rand(raft_group *g);
uint32_t raft__quorum(const raft_group *g);
int raft__is_voter(const raft_group *g, uint64_t id);

/* log.c */
uint64_t raft__last_index(const raft_group *g);
uint64_t raft__last_term(const raft_group *g);
uint64_t raft__first_index(const raft_group *g);
uint64_t raft__term_at(const raft_group *g, uint64_t index, int *ok);
raft_entry *raft__entry(const raft_group *g, uint64_t index);
int raft__log_append(raft_group *g, uint64_t term, uint8_t type, const void *data, uint32_t len);
void raft__log_truncate(raft_group *g, uint64_t from);
void raft__log_compact_to(raft_group *g, const raft_snap_meta *s);
void raft__log_reset(raft_group *g, const raft_snap_meta *s);
void raft__log_free(raft_group *g);
int raft__log_up_to_date(const raft_group *g, uint64_t last_index, uint64_t last_term);

/* election.c */
void raft__become_follower(raft_group *g, uint64_t term, uint64_t leader);
int raft__become_leader(raft_group *g);
int raft__campaign(raft_group *g, int pre, int force);
int raft__tick_election(raft_group *g);
int raft__step_vote(raft_group *g, const raft_msg *m);
int raft__step_vote_resp(raft_group *g, const raft_msg *m);
int raft__step_timeout_now(raft_group *g, const raft_msg *m);
void raft__reset_timeout(raft_group *g);

/* replication.c */
int raft__send_append(raft_group *g, raft_progress *pr, int allow_empty);
int raft__bcast_append(raft_group *g);
int raft__bcast_heartbeat(raft_group *g, uint64_t ctx);
int raft__step_append(raft_group *g, const raft_msg *m);
int raft__step_append_resp(raft_group *g, const raft_msg *m);
int raft__step_heartbeat(raft_group *g, const raft_msg *m);
int raft__step_heartbeat_resp(raft_group *g, const raft_msg *m);
int raft__maybe_commit(raft_group *g);
raft_progress *raft__progress(raft_group *g, uint64_t id);
int raft__progress_rebuild(raft_group *g);
void raft__progress_free(raft_group *g);

/* readindex.c */
int raft__read_on_commit(raft_group *g);
int raft__read_on_ack(raft_group *g);
void raft__read_abort_all(raft_group *g);
int raft__read_emit(raft_group *g, uint64_t ctx, uint64_t index, int ok);
void raft__read_free(raft_group *g);

/* snapshot.c */
int raft__send_snap_chunk(raft_group *g, raft_progress *pr);
int raft__step_snap(raft_group *g, const raft_msg *m);
int raft__step_snap_resp(raft_group *g, const raft_msg *m);
void raft__snap_tick(raft_group *g);
void raft__snap_start(raft_group *g, raft_progress *pr);

/* membership.c */
void raft__conf_recompute(raft_group *g);
void raft__conf_on_append(raft_group *g, const raft_entry *e);

#endif
