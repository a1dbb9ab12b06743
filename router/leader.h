/*
 * leader.h — which replica of a storage partition the router sends a call
 * to, and where it goes next when that replica cannot serve it. Pure: no
 * sockets, no clock, no sleeping; conns.c (rt_rpc_run) and wcomb.c drive it.
 *
 * A storage partition of several replicas (cfg_part.nrep > 1) is a Raft
 * group: only its leader serves S_WRITE, S_GET and S_RANGE. Another replica
 * answers SX_ENOTLEADER with a hint, the config "id" of the node it believes
 * leads (0: it knows none), having done nothing. The leader cache holds, per
 * storage partition, the node believed to lead it (first its first replica,
 * part->node); a walk is one call's way through the replicas:
 *   - a success is final, and its node becomes the partition's cached leader;
 *   - SX_ENOTLEADER goes to the hinted node when it holds a replica of the
 *     partition and is not the one that answered (the cache then names it
 *     too); otherwise (hint 0, a node that holds no replica, the replying
 *     node itself) to the next replica not yet tried in this cycle, in the
 *     order of part->rep after the one that answered;
 *   - a node with no connection (nothing was sent) goes to the next replica;
 *   - a read (anything but S_WRITE) that failed on the way (timed out, lost
 *     its connection) goes to the next replica; a write that did so has an
 *     unknown outcome and is final, as is every other error reply;
 *   - every nrep attempts without success close a cycle: the next attempt
 *     waits first (rt_lw_pause_ms: 20 ms, doubling up to 100 ms).
 * The walk never gives up by itself: its driver stops it when what is left
 * of the call's time after the pause is under RT_LW_ATTEMPT_MIN_MS
 * (rt_lw_giveup says so). A partition of one replica, or a
 * partition that is not one of the cache's storage partitions, is never
 * walked: the first answer is final, as it always was.
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

/* The leader cache: per storage partition of cfg (cfg->storage[g]), the
 * node (index into cfg->nodes) believed to lead it. */
typedef struct rt_leaders {
    const cfg_cluster *cfg; /* borrowed; outlives the cache */
    atomic_int *node;       /* [cfg->nstorage] */
} rt_leaders;

/* Fills lc for cfg: every partition's cached leader is its first replica
 * (part->node). Returns 0 or SX_ENOMEM (lc then holds nothing to free). */
int rt_leaders_init(rt_leaders *lc, const cfg_cluster *cfg);

/* Frees what rt_leaders_init allocated; safe on a zeroed or freed cache. */
void rt_leaders_free(rt_leaders *lc);

/* True when calls for p are walked: p is one of lc's storage partitions
 * (a pointer into lc->cfg->storage) and has more than one replica. */
bool rt_leader_walks(const rt_leaders *lc, const cfg_part *p);

/* The node to send a call for p to first: its cached leader when p is
 * walked, else p->node (-1 for p NULL). */
int rt_leader_get(const rt_leaders *lc, const cfg_part *p);

/* Records node as p's leader. Ignored unless p is walked and node holds a
 * replica of it. */
void rt_leader_note(rt_leaders *lc, const cfg_part *p, int node);

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
} rt_lwalk;

/* Starts a walk for a call for p (an S_WRITE when write) through cache lc:
 * its first attempt goes to w->node (rt_leader_get). p may be any
 * partition, or NULL (a call addressed to a node); one that is not walked
 * is attempted once. */
void rt_lw_start(rt_lwalk *w, rt_leaders *lc, const cfg_part *p, bool write);

/* Takes the result of the attempt at w->node: err (0, the node's error
 * code, or a network code), hint (an SX_ENOTLEADER reply's leader node id,
 * 0: none) and down (the node had no connection: nothing was sent).
 * Updates the cache (a success, a usable hint). Returns RT_LW_DONE when
 * the result is final (see the file comment), or RT_LW_RETRY with the next
 * attempt's node in w->node and its pause in w->pause_ms. */
rt_lstep rt_lw_next(rt_lwalk *w, int err, uint64_t hint, bool down);

/* The failure of a walk its driver stops, waited_ms after it began, with a
 * retry still wanted: "storage partition P: no leader answered within N ms
 * (tried s1, s2, s3; last: LAST)" into msg[len] (LAST: last_msg, the last
 * attempt's failure). Returns its code: SX_ENOTLEADER when the last
 * attempt was answered so, else SX_EUNAVAIL. */
int rt_lw_giveup(const rt_lwalk *w, int last_err, const char *last_msg, uint64_t waited_ms,
                 char *msg, size_t len);

#endif
