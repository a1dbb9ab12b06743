/*
 * leader.h — which replica of a partition the router sends a call to, how
 * long it waits for that replica, and where the call goes next when the
 * replica cannot serve it. Pure: no sockets, no clock of its own (callers
 * pass the time), no sleeping; conns.c (rt_rpc_run) and wcomb.c drive it.
 *
 * A storage or index partition of several replicas (cfg_part.nrep > 1) is
 * a Raft group: only its leader serves it (S_WRITE, S_GET, S_RANGE; I_RANGE,
 * I_WATERMARKS). Another replica answers SX_ENOTLEADER with a hint, the
 * config "id" of the node it believes leads (0: it knows none), having done
 * nothing. The leader cache holds, per partition (storage and index alike,
 * keyed by the cfg_part's place in cfg->storage or cfg->index), the node
 * believed to lead it (first its first replica, part->node), and what the
 * router saw of each node lately:
 *   - a node that failed a call on the way (nothing came back: not
 *     connected, not sent, timed out, connection lost) and has answered
 *     nothing since is "unanswered"; for RT_LW_SUSPECT_MS after that
 *     failure it is also "suspect" (paused, cut off or dead: an election
 *     will replace it as leader);
 *   - a replica that left a call for its partition unanswered (sent, no
 *     reply) is suspect for that partition for RT_LW_SUSPECT_MS, unless it
 *     serves one of the partition's calls meanwhile.
 * A walk is one call's way through the replicas:
 *   - it starts at the cached leader, or, when that node is suspect or
 *     unanswered, at the next replica that is neither;
 *   - each attempt is bounded (rt_lw_attempt_ms: RT_LW_READ_ATTEMPT_MS for
 *     a read, RT_LW_WRITE_ATTEMPT_MS for an S_WRITE), so a stalled leader
 *     holds a call that long, not for the call's whole time;
 *   - a success is final, and its node becomes the partition's cached
 *     leader;
 *   - SX_ENOTLEADER goes to the hinted node when it holds a replica of the
 *     partition, is not the one that answered and is not suspect (the cache
 *     then names it too); otherwise (hint 0, a node holding no replica, the
 *     replying node itself, a suspect node: a follower still names the
 *     stalled leader until the election is over) to the next replica not yet
 *     tried in this cycle, not suspect, preferring those not unanswered, in
 *     the order of part->rep after the one that answered;
 *   - a call that was never sent (no connection, or the connection dropped,
 *     or its attempt's time ran out, before it left) goes to the next
 *     replica, a write too;
 *   - a read that failed on the way (timed out, lost its connection) goes to
 *     the next replica; a write that did has an unknown outcome and is final
 *     (rt_lw_unknown says so), as is every other error reply;
 *   - every nrep attempts without success, or earlier when no replica is
 *     left to try but suspect ones, close a cycle: the next attempt waits
 *     first (rt_lw_pause_ms: 20 ms, doubling up to 100 ms) and goes to the
 *     first replica after the last one tried that is not suspect (any, when
 *     all are).
 * The walk never gives up by itself: its driver stops it when what is left
 * of the call's time after the pause is under RT_LW_ATTEMPT_MIN_MS
 * (rt_lw_giveup says so). A partition of one replica, or a partition that
 * is not one of the cache's config, is never walked: one attempt, the
 * call's whole time, its answer final, as it always was.
 *
 * Threading: the cache is read and written with atomics by any thread; a
 * walk belongs to one call.
 */
#ifndef SX_RT_LEADER_H
#define SX_RT_LEADER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* The first pause, after the first cycle without success, and the longest. */
#define RT_LW_PAUSE_MIN_MS 20
#define RT_LW_PAUSE_MAX_MS 100
/* A driver starts no further attempt with less than this left of the
 * call's time (after the pause): it gives up instead, rather than turn a
 * clean SX_ENOTLEADER into a timeout (for a write: of unknown outcome). */
#define RT_LW_ATTEMPT_MIN_MS 50

/* How long one attempt at a replica of a walked partition may take, and
 * how long a replica that failed one stays suspect. The replicas elect a
 * new leader within about 1-1.5 s of their leader's stall, so a call
 * should leave a stalled leader about then:
 *   - a read is cheap to send elsewhere: 1 s, after which the replicas are
 *     asked, and by the time the walk is back the election is over (a
 *     replica whose attempt already timed out once in the walk gets the
 *     call's remaining time: a leader that is merely slow is not starved);
 *   - a write that times out has an unknown outcome and fails, so its bound
 *     must stay clear of slow but healthy answers: a group commit on a busy
 *     node can take hundreds of ms (a fsync under load), so 2 s;
 *   - suspicion lasts 2 s: past the election, so that followers' hints
 *     naming the old leader are passed over until they name the new one.
 * node/repl's timing (a leader's failure found in 0.5-1 s, then an
 * election) is what these are measured against; they move with it. */
#define RT_LW_READ_ATTEMPT_MS 1000
#define RT_LW_WRITE_ATTEMPT_MS 2000
#define RT_LW_SUSPECT_MS 2000

/* The leader cache: per partition of cfg (cfg->storage[g] at g,
 * cfg->index[j] at cfg->nstorage + j), the node (index into cfg->nodes)
 * believed to lead it, and what the router saw of the nodes (see the file
 * comment). Times are the callers' monotonic milliseconds (0: never). */
typedef struct rt_leaders {
    const cfg_cluster *cfg;      /* borrowed; outlives the cache */
    int nparts;                  /* cfg->nstorage + cfg->nindex */
    atomic_int *node;            /* [nparts] */
    _Atomic uint64_t *lost_at;   /* [nparts * CFG_MAX_REPLICAS]: when a call
                                  * sent to replica k (part->rep[k]) went
                                  * unanswered (0: none since it served one) */
    _Atomic uint64_t *stall_at;  /* [cfg->nnodes]: when a call to the node
                                  * last failed on the way */
    _Atomic uint64_t *answer_at; /* [cfg->nnodes]: when it last answered */
} rt_leaders;

/* Fills lc for cfg: every partition's cached leader is its first replica
 * (part->node); nothing seen of any node. Returns 0 or SX_ENOMEM (lc then
 * holds nothing to free). */
int rt_leaders_init(rt_leaders *lc, const cfg_cluster *cfg);

/* Frees what rt_leaders_init allocated; safe on a zeroed or freed cache. */
void rt_leaders_free(rt_leaders *lc);

/* True when calls for p are walked: p is one of lc's storage or index
 * partitions (a pointer into lc->cfg->storage or lc->cfg->index) and has
 * more than one replica. */
bool rt_leader_walks(const rt_leaders *lc, const cfg_part *p);

/* The cached leader of p when p is walked, else p->node (-1 for p NULL). */
int rt_leader_get(const rt_leaders *lc, const cfg_part *p);

/* Records node as p's leader. Ignored unless p is walked and node holds a
 * replica of it. */
void rt_leader_note(rt_leaders *lc, const cfg_part *p, int node);

/* How an attempt at a node ended. */
typedef enum rt_lhow {
    RT_LH_ANSWERED = 0, /* the node replied: err is its code (0: served) */
    RT_LH_UNSENT,       /* nothing reached it (no connection; the connection
                         * dropped, or the attempt's time ran out, before it
                         * was sent): safe to send anywhere */
    RT_LH_LOST,         /* sent, and no reply (timed out, or the connection
                         * dropped): a write's outcome is unknown */
    RT_LH_LOCAL         /* failed here before sending (encoding, size):
                         * says nothing of the node */
} rt_lhow;

/* Records what an attempt at node (any call, walked or not) showed of it at
 * now_ms: answered, or failed on the way (unsent or lost). Ignores
 * RT_LH_LOCAL and nodes out of range. */
void rt_leader_seen(rt_leaders *lc, int node, rt_lhow how, uint64_t now_ms);

/* True when node failed a call on the way and has answered nothing since. */
bool rt_leader_unanswered(const rt_leaders *lc, int node);

/* True when node is suspect at now_ms: unanswered since a failure less
 * than RT_LW_SUSPECT_MS ago, or (p walked) a replica of p that left a call
 * for p unanswered less than RT_LW_SUSPECT_MS ago and served none since.
 * p may be NULL (the node alone). */
bool rt_leader_suspect(const rt_leaders *lc, const cfg_part *p, int node, uint64_t now_ms);

/* The pause before the next attempt once `cycle` cycles (0 the first)
 * ended without success: RT_LW_PAUSE_MIN_MS doubling per cycle, at most
 * RT_LW_PAUSE_MAX_MS. */
int rt_lw_pause_ms(int cycle);

/* What follows an attempt (rt_lw_next). */
typedef enum rt_lstep {
    RT_LW_DONE = 0, /* the attempt's result is the call's */
    RT_LW_RETRY     /* try again at w->node after w->pause_ms */
} rt_lstep;

/* One call's way through a partition's replicas. Filled by rt_lw_start;
 * read node and pause_ms, leave the rest to rt_lw_next. */
typedef struct rt_lwalk {
    rt_leaders *lc;
    const cfg_part *part;
    bool walks;              /* rt_leader_walks: false, and every result is final */
    bool write;              /* an S_WRITE: not resent after it may have been applied */
    int node;                /* the node of the attempt under way, then of the next */
    int pause_ms;            /* after RT_LW_RETRY: wait this long first (0: none) */
    int attempts;            /* attempts made */
    int in_cycle;            /* attempts since the last pause */
    int cycles;              /* cycles closed (pauses taken) */
    unsigned tried;          /* replicas tried: bit k for part->rep[k] */
    unsigned in_cycle_tried; /* the same for the current cycle */
    unsigned lost;           /* replicas that left an attempt unanswered */
} rt_lwalk;

/* Starts a walk, at now_ms, for a call for p (an S_WRITE when write)
 * through cache lc: its first attempt goes to w->node (the cached leader,
 * or the next replica when that one is suspect or unanswered). p may be any
 * partition, or NULL (a call addressed to a node); one that is not walked
 * is attempted once, at p->node. */
void rt_lw_start(rt_lwalk *w, rt_leaders *lc, const cfg_part *p, bool write, uint64_t now_ms);

/* How long the attempt at w->node may wait, with left_ms of the call's
 * time left: left_ms when the call is not walked, or w->node already left
 * an attempt of this walk unanswered; else at most RT_LW_WRITE_ATTEMPT_MS
 * (a write) or RT_LW_READ_ATTEMPT_MS. At least 1. */
int rt_lw_attempt_ms(const rt_lwalk *w, int left_ms);

/* Takes the result of the attempt at w->node at now_ms: err (0, the
 * node's error code, or a network code), hint (an SX_ENOTLEADER reply's
 * leader node id, 0: none) and how it ended. Updates the cache (a success,
 * a usable hint, a replica that left it unanswered; not the node's own
 * record: rt_leader_seen). Returns RT_LW_DONE when the result is final (see
 * the file comment), or RT_LW_RETRY with the next attempt's node in w->node
 * and its pause in w->pause_ms. */
rt_lstep rt_lw_next(rt_lwalk *w, int err, uint64_t hint, rt_lhow how, uint64_t now_ms);

/* True when a walk's final result is a write left unanswered (how
 * RT_LH_LOST): whether it was applied is unknown (rt_lw_unknown). */
bool rt_lw_unknown_outcome(const rt_lwalk *w, rt_lhow how);

/* The reason of a write left unanswered after waited_ms (err: SX_ETIMEDOUT,
 * or the connection's loss), into msg[len]: "no answer within N ms:
 * outcome unknown (...)". */
void rt_lw_unknown(int err, int waited_ms, char *msg, size_t len);

/* The failure of a walk its driver stops, waited_ms after it began, with a
 * retry still wanted: "storage partition P: no leader answered within N ms
 * (tried s1, s2, s3; last: LAST)" (or "index partition P") into msg[len]
 * (LAST: last_msg, the last attempt's failure). Returns its code:
 * SX_ENOTLEADER when the last attempt was answered so, else SX_EUNAVAIL. */
int rt_lw_giveup(const rt_lwalk *w, int last_err, const char *last_msg, uint64_t waited_ms,
                 char *msg, size_t len);

#endif
