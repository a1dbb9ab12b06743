/*
 * sim.h — shared types of shardex-sim, the deterministic cluster simulator
 * for the Raft core and the host code that drives it in every node: one
 * process, one seed, a simulated clock, a faulty network (sim_net.c),
 * nodes that are each an rhost (node/raft/host.c) whose durable write is an
 * in-memory disk that loses unsynced or torn writes and whose state machine
 * is a key-value register set (sim_host.c, sim_disk.c), clients
 * (sim_client.c), invariant checks after every step (sim_check.c) and a
 * linearizability checker (lincheck.c, declared in lincheck.h).
 * sim_main.c runs seeds and the fault schedule.
 */
#ifndef SHARDEX_SIM_H
#define SHARDEX_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "host.h"
#include "lincheck.h"
#include "raft.h"
#include "raft_dedup.h"
#include "raft_log_store.h"

#define SIM_TICK 10 /* time units per tick */
#define SIM_MAX_NODES 48
#define SIM_MAX_GROUPS 4
#define SIM_MAX_KEYS 4
#define SIM_MAX_CLIENTS 4

/* ---- deterministic randomness ---- */
typedef struct sim_rng {
    uint64_t s;
} sim_rng;
uint64_t sim_rand(sim_rng *r);
/* Uniform in [lo, hi]. */
uint64_t sim_range(sim_rng *r, uint64_t lo, uint64_t hi);
/* 1 with probability p. */
int sim_chance(sim_rng *r, double p);

/* ---- events ---- */
enum { EV_MSG = 1, EV_CREQ, EV_CRESP };

typedef struct sim_creq {
    int client; /* index within the group */
    int group;
    int op; /* OP_PUT / OP_GET / OP_BARRIER */
    uint32_t key;
    uint64_t value;
    uint64_t seq;
} sim_creq;

enum { OP_BARRIER = 3 }; /* after lincheck.h's OP_PUT, OP_GET */
enum { CR_OK = 0, CR_RETRY = 1 };

typedef struct sim_cresp {
    int client, group;
    uint64_t seq;
    int status;     /* CR_* */
    uint64_t hint;  /* leader hint on retry: its node id (0: unknown) */
    uint64_t value; /* GET result */
} sim_cresp;

typedef struct sim_event {
    uint64_t time, order;
    int type;
    int node;      /* destination node slot (EV_MSG, EV_CREQ) */
    raft_msg *msg; /* EV_MSG: deep copy, owned by the event */
    sim_creq req;
    sim_cresp resp;
} sim_event;

/* ---- disk model ---- */
typedef struct sim_dent {
    raft_entry e;   /* data owned */
    uint64_t chain; /* hash of the log prefix ending here */
} sim_dent;

/* A snapshot file of the state machine (index 0: none). */
typedef struct sim_snapfile {
    uint64_t index, size;
    uint64_t chain; /* the applied chain at index */
    uint8_t *data;  /* owned */
} sim_snapfile;

/* What survives a crash of one replica: the Raft log, written by the host's
 * persist (hard state, snapshot meta, entries), and the state machine's
 * files, written by its rhost_sm_ops (its latest snapshot, older ones a
 * transfer may still stream, the staging area of a received snapshot). */
typedef struct sim_disk {
    raft_hard_state hs;
    raft_snap_meta snap;
    uint64_t snap_chain;
    sim_dent *log; /* entries snap.index+1 .. */
    size_t n, cap;
    sim_snapfile sm;     /* the state machine's latest snapshot */
    sim_snapfile old[4]; /* older ones, kept while a transfer streams them */
    int n_old;
    uint8_t *staging;
    uint64_t staging_index, staging_len;
} sim_disk;

struct sim;

/* ---- a replica of one group on one node: its disk and state machine ---- */
typedef struct sim_replica {
    int hosted;
    struct sim *s; /* back pointers for the rhost_sm_ops */
    int slot, g;
    uint64_t id; /* replica id (rhost_first_id of the node) */
    sim_disk disk;
    /* state machine (volatile; rebuilt from disk.sm at restart) */
    uint64_t kv[SIM_MAX_KEYS];
    raft_dedup dedup;
    uint64_t applied;
    uint64_t applied_chain;
    /* soft state seen (rhost_env.on_role) */
    int role;
    uint64_t term;
    uint64_t created_tick;
} sim_replica;

/* A node: an rhost over its replicas' disks.  Its number is `id` (1..48),
 * a replica's id is rhost_first_id(id). */
typedef struct sim_node {
    uint64_t id;
    struct sim *s; /* back pointer for the rhost_env */
    int slot;
    int used;
    int alive;
    uint64_t restart_at; /* tick; 0: none */
    uint32_t phase;      /* tick phase offset within SIM_TICK */
    uint32_t incarnation;
    uint64_t crash_at;     /* time unit of a scheduled crash; 0: none */
    raft_store *st;        /* --store: the node's leveldb log store */
    rhost *h;              /* NULL while down */
    int dirty;             /* fed something since its last round */
    int crashing;          /* completions run by rhost_free die with the node */
    int crash_mode;        /* this round's planned crash (sim_host.c) */
    int sent_vote;         /* this round's send phase granted a vote */
    const char *crash_why; /* a round's hook failed it: the crash to do */
    uint64_t crash_down;   /* its down ticks (0: drawn) */
    /* the cores' memory (rhost_config.alloc) */
    int64_t live_bytes;
    int64_t live_allocs;
    sim_replica rep[SIM_MAX_GROUPS];
} sim_node;

/* ---- client history (sim_hop: lincheck.h) ---- */
typedef struct sim_hist {
    sim_hop *ops;
    size_t n, cap;
} sim_hist;

typedef struct sim_client {
    int busy;
    sim_creq req;
    uint64_t call; /* time of the first attempt */
    uint64_t attempt_deadline, op_deadline, next_op_at;
    int target; /* node slot */
    uint64_t hint;
} sim_client;

/* ---- global checker state per group ---- */
typedef struct sim_seen {
    uint64_t index, term, chain;
} sim_seen;

typedef struct sim_gcheck {
    uint64_t *leader_of_term; /* by term */
    size_t n_terms;
    sim_seen *seen; /* open addressing on (index, term) */
    size_t seen_cap, seen_n;
    uint64_t *commit_term, *commit_chain; /* by index */
    size_t commit_cap;
    uint64_t commit_max;
} sim_gcheck;

/* What a failure violates: sim_fail_as names it (sim_fail: SIM_V_OTHER).
 * A planted bug must be caught as the violation it causes (--expect-catch,
 * sim_main.c). */
typedef enum sim_violation {
    SIM_V_NONE = 0,
    SIM_V_OTHER,        /* anything else: a failed call, a leak, a torn batch... */
    SIM_V_ELECTION,     /* election safety: two leaders in one term */
    SIM_V_LOG_MATCHING, /* one (index, term) naming two log prefixes */
    SIM_V_COMMIT,       /* a committed entry lost, changed, missing from a
                         * leader, or applied otherwise (leader completeness,
                         * state machine safety) */
    SIM_V_LINEARIZABLE, /* a client history that is not linearizable */
    SIM_V_LIVENESS,     /* no leader, commit or answer long after the heal */
    SIM_V_COUNT
} sim_violation;

typedef struct sim_opts {
    uint64_t first, seeds;
    int replicas, groups;
    uint32_t plants;
    int expect_catch;
    int verbose;
    const char *store_dir; /* --store: mirror into leveldb stores here */
    uint64_t fault_ticks;  /* length of the fault phase */
} sim_opts;

typedef struct sim {
    sim_opts o;
    uint64_t seed;
    sim_rng rng;
    uint64_t now; /* time units */
    /* event heap */
    sim_event *ev;
    size_t n_ev, cap_ev;
    uint64_t ev_order;
    /* nodes */
    sim_node nodes[SIM_MAX_NODES];
    int n_nodes;
    uint64_t next_id;
    /* network */
    uint8_t cut[SIM_MAX_NODES][SIM_MAX_NODES]; /* cut[a][b]: a->b dropped */
    double p_drop, p_dup;
    uint32_t delay_max;
    /* faults */
    int faults_on;
    double p_crash_round, p_disk_err;
    uint64_t restart_max;   /* ticks a crashed node stays down, at most */
    double p_young;         /* nemesis: a new leader crashes soon after */
    double p_vote_crash;    /* nemesis: a voter crashes right after voting */
    double p_snap_read_err; /* a snapshot chunk cannot be read (not sent) */
    uint32_t max_msg_entries, max_inflight, compact_every, snap_chunk;
    /* clients */
    sim_client clients[SIM_MAX_GROUPS][SIM_MAX_CLIENTS];
    int n_clients, n_keys;
    int clients_on;
    uint64_t next_value;
    sim_hist hist[SIM_MAX_GROUPS][SIM_MAX_KEYS];
    uint64_t heal_tick, live_tick;
    /* checks */
    sim_gcheck gc[SIM_MAX_GROUPS];
    char failure[512];
    int failed;
    sim_violation violation; /* of the first failure */
    /* stats */
    uint64_t st_msgs, st_ops_ok, st_ops_timeout, st_crashes, st_snaps, st_conf, st_transfers,
        st_elections;
} sim;

/* sim_main.c */
/* Records the first failure (and its violation class); the run stops at
 * the next step. sim_fail records it as SIM_V_OTHER. */
void sim_fail(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sim_fail_as(sim *s, sim_violation v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The violation's name ("election-safety", ...). */
const char *sim_violation_name(sim_violation v);
void sim_log(sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t sim_tick_now(const sim *s);

/* sim_net.c: event queue and network */
void sim_ev_push(sim *s, sim_event *e);
int sim_ev_pop_due(sim *s, uint64_t now, sim_event *out);
void sim_ev_free_all(sim *s);
void sim_net_send(sim *s, int from_slot, const raft_msg *m);
void sim_net_fault(sim *s);
void sim_net_heal(sim *s);
int sim_slot_of(const sim *s, uint64_t id);

/* sim_host.c: nodes (each an rhost), its env, the state machine */
/* Adds node `id` hosting the groups in group_mask (bootstrapped members,
 * or empty replicas joining as learners).  Returns its slot or -1. */
int sim_node_add(sim *s, uint64_t id, int group_mask, int bootstrap);
/* Crashes the node (frees its rhost): everything not on disk is lost; it
 * restarts after 1..restart_max ticks, or down_ticks with _for. */
void sim_node_crash(sim *s, int slot, const char *why);
void sim_node_crash_for(sim *s, int slot, const char *why, uint64_t down_ticks);
/* Restarts a crashed node: a new rhost, every group loaded from its disk
 * with rhost_group_add.  Returns 0 or -1. */
int sim_node_restart(sim *s, int slot);
/* Frees everything of a node at the end of a run. */
void sim_node_free(sim *s, int slot);
/* Runs one rhost_round of the node if it was fed since its last one (a
 * failed round crashes it as the round's hooks planned).  Returns 1 if
 * the round had work. */
int sim_node_ready(sim *s, int slot);
void sim_deliver_msg(sim *s, int slot, const raft_msg *m);
void sim_deliver_creq(sim *s, int slot, const sim_creq *r);
/* Decommissions group g's replica on the node (rhost_group_remove). */
void sim_replica_drop(sim *s, int slot, int group);
/* The alive leader of group g with the highest term (NULL if none), its
 * core borrowed from the node's rhost; *slot gets the node's slot. */
const raft_group *sim_leader(sim *s, int group, int *slot);

/* sim_client.c */
void sim_clients_step(sim *s);
void sim_client_resp(sim *s, const sim_cresp *r);
void sim_client_reply(sim *s, int group, int client, uint64_t seq, int status, uint64_t hint,
                      uint64_t value);
void sim_hist_free(sim *s);

/* sim_check.c */
void sim_check_leader(sim *s, int group, uint64_t term, uint64_t id);
void sim_check_append(sim *s, int group, uint64_t node, const sim_dent *d);
void sim_check_truncate(sim *s, int group, uint64_t node, const sim_dent *d);
void sim_check_commit(sim *s, int group, uint64_t node, const sim_disk *disk);
void sim_check_apply(sim *s, int group, uint64_t node, uint64_t index, uint64_t term,
                     uint64_t chain);
void sim_check_completeness(sim *s, int group, uint64_t node, const sim_disk *disk);
int sim_committed_chain(sim *s, int group, uint64_t index, uint64_t *chain);
void sim_check_free(sim *s);
uint64_t sim_chain(uint64_t prev, const raft_entry *e);

/* sim_disk.c: the disk model */
typedef struct sim_buf {
    uint8_t *p;
    size_t n, cap;
} sim_buf;
void sim_disk_prune_old(sim_disk *d, uint64_t pinned);
/* The state machine's snapshot file `index`, if held (NULL if not). */
const sim_snapfile *sim_disk_snapfile(const sim_disk *d, uint64_t index);
/* Makes f the latest snapshot file; the previous one becomes an old one
 * (at most 4 kept: the oldest is dropped). */
void sim_disk_snap_replace(sim_disk *d, const sim_snapfile *f);
void sim_disk_free(sim_disk *d);
uint64_t sim_disk_last(const sim_disk *d);
sim_dent *sim_disk_at(const sim_disk *d, uint64_t index);
uint64_t sim_disk_chain_at(const sim_disk *d, uint64_t index);
void sim_disk_drop_prefix(sim_disk *d, uint64_t upto);
/* Encodes one persist call of the host (rhost_env.persist's arguments) as
 * one CRC-framed batch. */
void sim_disk_build_batch(sim *s, size_t n, const uint64_t *groups, raft_ready *const *rds,
                          size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps,
                          sim_buf *b);
/* Recovers a batch onto the node's disks: returns 0 and applies it if
 * intact, -1 if torn. */
int sim_disk_apply_batch(sim *s, sim_node *nd, const uint8_t *p, size_t n);

/* sim_store.c: optional mirror into the real leveldb log store */
int sim_store_open(sim *s, int slot);
void sim_store_close(sim *s, int slot);
void sim_store_destroy(sim *s, int slot);
void sim_store_bootstrap(sim *s, int slot, int g, const sim_disk *d);
/* The round's write through the host's own persist (host_store.h) on the
 * node's store; no-op without --store.  Returns 0 or -1 (failed). */
int sim_store_persist(sim *s, int slot, size_t n, const uint64_t *groups, raft_ready *const *rds,
                      size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps);
void sim_store_verify(sim *s, int slot);

#endif
