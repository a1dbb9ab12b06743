/*
 * repl.c — a node's replication service (repl.h): its Raft loop, log
 * store and the RAFT transport over links.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "host_store.h"
#include "log.h"
#include "msg.h"
#include "repl.h"
#include "os.h"
#include "sx_errors.h"
#include "tuple.h"

#define REPL_MAX_GROUPS 4096
#define REPL_MAX_HELD 64       /* groups a node holds replicas of */
#define REPL_JOIN_RETRY_MS 500 /* between a join's attempts */
#define REPL_JOIN_CALL_MS 2000 /* one probe or join call */
#define REPL_SEND_TIMEOUT_MS 2000
#define REPL_COMPACT_ENTRIES 10000 /* entries applied between two snapshots */

typedef struct leader_rec {
    uint64_t group;
    int node; /* index into cfg.nodes, -1 unknown */
} leader_rec;

/* A group this node holds (or is joining) a replica of. */
typedef struct held {
    uint64_t group;
    int nodes[CFG_MAX_REPLICAS];
    int n;
    const rhost_sm_ops *ops;
    void *sm;
    uint64_t boot_size, applied;
    bool joining; /* not loaded yet: the join thread works on it */
    repl_role_fn role;
    void *role_arg;
} held;

struct repl {
    const cfg_cluster *cfg;
    int self;
    bool bootstrap;
    held groups[REPL_MAX_HELD];
    int ngroups; /* guarded by mu once the join thread runs */
    pthread_t join_th;
    bool join_started;
    pthread_cond_t join_cv; /* stop (under mu) */
    raft_store *st;
    rloop *loop;
    net_peer *peer[256]; /* by node id; opened by the loop thread */
    pthread_mutex_t mu;  /* leaders, stopped */
    bool stopped;        /* the loop is gone: RAFT frames are dropped */
    atomic_bool failed;  /* the loop failed (on_fail): the node must stop */
    int users;           /* callers inside the loop's API (repl_enter) */
    pthread_cond_t idle; /* users dropped to 0 */
    leader_rec *leaders;
    size_t nleaders, capleaders;
    uint32_t lead_ticks[REPL_MAX_HELD]; /* loop thread: ticks each held
                                         * group has been led here */
};

static void sent(void *arg, int err, const uint8_t *resp, size_t n)
{
    (void)err;
    (void)resp;
    (void)n;
    free(arg); /* the frame; a lost one is Raft's to retry */
}

/* rloop's transport: one RAFT frame to node id `to`. */
static void send_batch(void *ctx, uint8_t to, const uint8_t *batch, size_t len)
{
    repl *r = ctx;
    int k = cfg_node_by_id(r->cfg, to);
    if (k < 0 || k == r->self)
        return;
    if (r->peer[to] == NULL && net_peer_open_link(r->cfg->nodes[k].url, 4, &r->peer[to]) != 0) {
        r->peer[to] = NULL;
        return;
    }
    msg_RAFT_req q = { .from = (uint64_t)r->cfg->nodes[r->self].id };
    q.msgs.p = batch;
    q.msgs.n = len;
    uint8_t *frame;
    size_t fn;
    int rc = msg_encode_req_bytes(MSG_RAFT, &q, &frame, &fn);
    if (rc != 0)
        return;
    if (net_peer_submit(r->peer[to], frame, fn, REPL_SEND_TIMEOUT_MS, sent, frame) != 0)
        free(frame);
}

static void on_fail(void *ctx, const char *why)
{
    repl *r = ctx;
    LOG_ERROR("replication on node %s failed: %s. The node stops (its replicas are reloaded "
              "from disk at its next start; the other replicas serve meanwhile).",
              r->cfg->nodes[r->self].name, why);
    atomic_store(&r->failed, true);
}

static const char *group_name(const repl *r, uint64_t group, char *buf, size_t n);

static void on_role(void *ctx, uint64_t group, int role, uint64_t leader, uint64_t term)
{
    repl *r = ctx;
    int node = leader ? cfg_node_by_id(r->cfg, rhost_node_of(leader)) : -1;
    pthread_mutex_lock(&r->mu);
    size_t i;
    for (i = 0; i < r->nleaders && r->leaders[i].group != group; i++)
        ;
    if (i == r->nleaders && r->nleaders < REPL_MAX_GROUPS) {
        if (r->nleaders == r->capleaders) {
            size_t nc = r->capleaders ? r->capleaders * 2 : 16;
            leader_rec *p = realloc(r->leaders, nc * sizeof *p);
            if (p != NULL) {
                r->leaders = p;
                r->capleaders = nc;
            }
        }
        if (r->nleaders < r->capleaders)
            r->leaders[r->nleaders++] = (leader_rec){ group, -1 };
    }
    int changed = i < r->nleaders && r->leaders[i].node != node;
    if (i < r->nleaders)
        r->leaders[i].node = node;
    repl_role_fn fn = NULL;
    void *fn_arg = NULL;
    for (int k = 0; k < r->ngroups; k++)
        if (r->groups[k].group == group) {
            fn = r->groups[k].role;
            fn_arg = r->groups[k].role_arg;
        }
    pthread_mutex_unlock(&r->mu);
    if (fn != NULL)
        fn(fn_arg, role, leader, term);
    char gn[64];
    if (changed || role == RAFT_LEADER)
        LOG_INFO("%s: %s, term %llu, leader %s", group_name(r, group, gn, sizeof gn),
                 role == RAFT_LEADER     ? "leading"
                 : role == RAFT_FOLLOWER ? "following"
                                         : "campaigning",
                 (unsigned long long)term, node >= 0 ? r->cfg->nodes[node].name : "unknown");
}

/* Enters the loop's API: false once the service stopped (the loop may be
 * gone); else repl_stop waits for the matching repl_leave. */
static bool repl_enter(repl *r)
{
    pthread_mutex_lock(&r->mu);
    bool ok = !r->stopped;
    if (ok)
        r->users++;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static void repl_leave(repl *r)
{
    pthread_mutex_lock(&r->mu);
    if (--r->users == 0)
        pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->mu);
}

/* rloop_call, unless the service stopped (RAFT_ERR_IO). */
static int loop_call(repl *r, int (*fn)(rhost *h, raft_store *st, void *arg), void *arg)
{
    if (!repl_enter(r))
        return RAFT_ERR_IO;
    int rc = rloop_call(r->loop, fn, arg);
    repl_leave(r);
    return rc;
}

int repl_propose(repl *r, uint64_t group, const void *data, uint32_t len, rloop_done_fn done,
                 void *arg)
{
    if (!repl_enter(r))
        return RAFT_ERR_IO;
    int rc = rloop_propose(r->loop, group, data, len, done, arg);
    repl_leave(r);
    return rc;
}

int repl_read(repl *r, uint64_t group, rloop_done_fn done, void *arg)
{
    if (!repl_enter(r))
        return RAFT_ERR_IO;
    int rc = rloop_read(r->loop, group, done, arg);
    repl_leave(r);
    return rc;
}

/* ---- membership, driven by a group's leader on its ticks ---- */

static const char *group_name(const repl *r, uint64_t group, char *buf, size_t n)
{
    bool index = false;
    for (int i = 0; i < r->cfg->nindex; i++)
        index = index || r->cfg->index[i].id == group;
    if (group == CFG_CATALOG_GROUP)
        snprintf(buf, n, "the catalog");
    else
        snprintf(buf, n, "%s partition %llu", index ? "index" : "fact", (unsigned long long)group);
    return buf;
}

static const char *node_name(const repl *r, uint64_t replica)
{
    int k = cfg_node_by_id(r->cfg, rhost_node_of(replica));
    return k >= 0 ? r->cfg->nodes[k].name : "?";
}

/* True when replica id's node is one of the group's configured nodes. */
static bool configured_member(const repl *r, const int *nodes, int n, uint64_t id)
{
    for (int k = 0; k < n; k++)
        if (r->cfg->nodes[nodes[k]].id == (int)rhost_node_of(id))
            return true;
    return false;
}

/* How long a leader leads before it hands leadership to the group's
 * preferred replica (so that a node just back is not handed it while it
 * still catches up, and leadership does not swing after every election). */
#define REPL_PREFER_TICKS 40 /* 2 s of 50 ms ticks */

/* One change at a time, on the leader (held g: its configured nodes,
 * nodes[0] the preferred one; *lead_ticks counts the ticks it has led):
 *   1. promote a caught-up learner;
 *   2. remove a voter that a newer voter on the same node replaced (the
 *      node lost its data and joined again);
 *   3. remove a member whose node the config no longer lists for the
 *      group (a replica moved, a dead node removed: the operator changed
 *      the config), once as many voters as the config lists sit on its
 *      nodes; a leader that is such a member hands leadership over first;
 *   4. after REPL_PREFER_TICKS of leading, hand leadership to the replica
 *      on the preferred node once it is a voter that has every entry, so
 *      that each node leads the partitions listed first on it and the
 *      load spreads as the config lays it out. */
static void drive_membership(repl *r, rhost *h, const held *g, uint32_t *lead_ticks)
{
    int role;
    char gn[64];
    uint64_t group = g->group;
    if (rhost_group_state(h, group, &role, NULL, NULL) != RAFT_OK || role != RAFT_LEADER) {
        *lead_ticks = 0;
        return;
    }
    if (*lead_ticks < UINT32_MAX)
        (*lead_ticks)++;
    const raft_group *core = rhost_group_core(h, group);
    const raft_conf *c = raft_conf_get(core);
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->m[i].voter)
            continue;
        uint64_t id = c->m[i].id;
        if (rhost_conf(h, group, RAFT_CONF_PROMOTE, id) == RAFT_OK) {
            LOG_INFO("%s: replica %llu on %s caught up: promoted to voter",
                     group_name(r, group, gn, sizeof gn), (unsigned long long)id, node_name(r, id));
            return;
        }
    }
    for (uint32_t i = 0; i < c->n; i++) {
        for (uint32_t j = 0; j < c->n; j++) {
            /* copies: the change takes effect in c at once */
            raft_member old = c->m[i], nw = c->m[j];
            if (!old.voter || !nw.voter || old.id >= nw.id ||
                rhost_node_of(old.id) != rhost_node_of(nw.id))
                continue;
            if (rhost_conf(h, group, RAFT_CONF_REMOVE, old.id) == RAFT_OK)
                LOG_INFO("%s: replica %llu on %s, replaced by %llu, removed",
                         group_name(r, group, gn, sizeof gn), (unsigned long long)old.id,
                         node_name(r, old.id), (unsigned long long)nw.id);
            return;
        }
    }
    uint32_t placed = 0;
    uint64_t stray = 0, self = raft_id(core), last = raft_last_index(core);
    for (uint32_t i = 0; i < c->n; i++) {
        if (configured_member(r, g->nodes, g->n, c->m[i].id))
            placed += c->m[i].voter;
        else if (stray == 0 || c->m[i].id != self)
            stray = c->m[i].id; /* the leader's own last */
    }
    if (stray != 0 && placed >= (uint32_t)g->n) {
        if (stray != self) {
            uint64_t id = stray;
            if (rhost_conf(h, group, RAFT_CONF_REMOVE, id) == RAFT_OK)
                LOG_INFO("%s: replica %llu on %s, a node the config no longer lists for it, "
                         "removed",
                         group_name(r, group, gn, sizeof gn), (unsigned long long)id,
                         node_name(r, id));
            return;
        }
        for (uint32_t i = 0; i < c->n; i++) { /* the leader leaves: hand over first */
            uint64_t match = 0;
            if (c->m[i].voter && c->m[i].id != self &&
                configured_member(r, g->nodes, g->n, c->m[i].id) &&
                raft_progress_of(core, c->m[i].id, &match, NULL) == RAFT_OK && match == last) {
                if (rhost_transfer(h, group, c->m[i].id) == RAFT_OK)
                    LOG_INFO("%s: this node is no longer configured for it: leadership handed "
                             "to %s",
                             group_name(r, group, gn, sizeof gn), node_name(r, c->m[i].id));
                return;
            }
        }
        return;
    }
    if (*lead_ticks < REPL_PREFER_TICKS || g->n < 2 ||
        r->cfg->nodes[g->nodes[0]].id == r->cfg->nodes[r->self].id)
        return;
    for (uint32_t i = 0; i < c->n; i++) {
        uint64_t match = 0;
        int active = 0;
        if (!c->m[i].voter || (int)rhost_node_of(c->m[i].id) != r->cfg->nodes[g->nodes[0]].id)
            continue;
        if (raft_progress_of(core, c->m[i].id, &match, &active) == RAFT_OK && active &&
            match == last && rhost_transfer(h, group, c->m[i].id) == RAFT_OK) {
            LOG_INFO("%s: leadership handed to its preferred replica on %s",
                     group_name(r, group, gn, sizeof gn), node_name(r, c->m[i].id));
            *lead_ticks = 0;
        }
        return;
    }
}

static void on_tick(void *ctx, rhost *h)
{
    repl *r = ctx;
    pthread_mutex_lock(&r->mu);
    int n = r->ngroups;
    held g[REPL_MAX_HELD];
    for (int i = 0; i < n; i++)
        g[i] = r->groups[i];
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < n; i++)
        if (!g[i].joining)
            drive_membership(r, h, &g[i], &r->lead_ticks[i]);
}

int repl_open(const cfg_cluster *cfg, int self, const char *data_dir, bool bootstrap, repl **out)
{
    *out = NULL;
    if (cfg->nodes[self].id <= 0)
        return SX_ECONFIG;
    repl *r = calloc(1, sizeof *r);
    if (r == NULL)
        return SX_ENOMEM;
    r->cfg = cfg;
    r->self = self;
    r->bootstrap = bootstrap;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return SX_ENOMEM;
    }
    if (pthread_cond_init(&r->join_cv, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        free(r);
        return SX_ENOMEM;
    }
    if (pthread_cond_init(&r->idle, NULL) != 0) {
        pthread_cond_destroy(&r->join_cv);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return SX_ENOMEM;
    }
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/raft", data_dir);
    if (raft_store_open(path, 1, &r->st, err, sizeof err) != RAFT_OK) {
        LOG_ERROR("cannot open the Raft log at %s: %s", path, err);
        repl_close(r);
        return SX_EIO;
    }
    rloop_config lc;
    rloop_config_default(&lc, (uint8_t)cfg->nodes[self].id);
    if (getrandom(&lc.host.seed, sizeof lc.host.seed, 0) != (ssize_t)sizeof lc.host.seed)
        lc.host.seed ^= (uint64_t)(uintptr_t)r;
    /* 50 ms ticks: elections in 0.5-1 s, a leader's failure found in
     * 0.5-1 s, heartbeats every tick */
    lc.send = send_batch;
    lc.send_ctx = r;
    lc.on_fail = on_fail;
    lc.fail_ctx = r;
    lc.on_role = on_role;
    lc.role_ctx = r;
    lc.on_tick = on_tick;
    lc.tick_ctx = r;
    /* a snapshot of a partition is a scan of it (in the background:
     * snapdir_make_bg), so not too often; the log between two is kept
     * meanwhile (SHARDEX_RAFT_COMPACT_ENTRIES: tests lower it) */
    lc.host.compact_entries = (uint64_t)os_env_long("SHARDEX_RAFT_COMPACT_ENTRIES", 16, 100000000,
                                                    REPL_COMPACT_ENTRIES);
    int rc = rloop_start(&lc, r->st, &r->loop);
    if (rc != RAFT_OK) {
        repl_close(r);
        return rc == RAFT_ERR_NOMEM ? SX_ENOMEM : SX_EIO;
    }
    *out = r;
    return 0;
}

void repl_stop(repl *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    bool was = r->stopped;
    r->stopped = true;
    pthread_cond_broadcast(&r->join_cv);
    while (r->users > 0) /* calls already inside finish on the running loop */
        pthread_cond_wait(&r->idle, &r->mu);
    pthread_mutex_unlock(&r->mu);
    if (r->join_started) {
        pthread_join(r->join_th, NULL);
        r->join_started = false;
    }
    if (!was) {
        rloop_stop(r->loop); /* no more sends after this */
        r->loop = NULL;
    }
}

void repl_close(repl *r)
{
    if (r == NULL)
        return;
    repl_stop(r);
    for (int i = 0; i < 256; i++)
        net_peer_close(r->peer[i]);
    raft_store_close(r->st);
    free(r->leaders);
    pthread_cond_destroy(&r->join_cv);
    pthread_cond_destroy(&r->idle);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* ---- loading a group: load, bootstrap or join ---- */

typedef struct add_args {
    repl *r;
    held *g;
    uint64_t id; /* join: the id the leader gave; else 0 */
    raft_conf boot;
    char err[256];
    uint64_t bad;
    bool need_join; /* out: empty here, no bootstrap: join */
} add_args;

static int count_entry(void *ctx, const raft_entry *e)
{
    (void)e;
    (*(size_t *)ctx)++;
    return RAFT_OK;
}

/* On the loop thread: loads the group (with its recorded replica id, or
 * the node's first), bootstraps it, or reports that it must be joined. */
static int do_add(rhost *h, raft_store *st, void *arg)
{
    add_args *a = arg;
    held *g = a->g;
    uint64_t id = a->id;
    int rc;
    if (id != 0) {
        uint8_t me = (uint8_t)a->r->cfg->nodes[a->r->self].id;
        if (rhost_node_of(id) != me || id <= rhost_first_id(me)) {
            snprintf(a->err, sizeof a->err,
                     "the leader gave replica id %llu, not a new one of this node's",
                     (unsigned long long)id);
            return RAFT_ERR_INVALID;
        }
        /* a new member starts from the empty state, whatever an older
         * replica left in the state machine */
        if (g->ops->reset && g->ops->reset(g->sm) != 0) {
            snprintf(a->err, sizeof a->err, "cannot empty its state machine");
            return RAFT_ERR_IO;
        }
        g->applied = 0;
        /* joined: record the id first, so a restart comes back as it */
        rc = raft_store_set_replica(st, g->group, id);
        if (rc != RAFT_OK) {
            snprintf(a->err, sizeof a->err, "cannot record its replica id: %s", raft_strerror(rc));
            return rc;
        }
        return rhost_store_load_group(h, st, g->group, id, NULL, g->boot_size, g->applied, g->ops,
                                      g->sm, &a->bad, a->err, sizeof a->err);
    }
    rc = raft_store_get_replica(st, g->group, &id);
    if (rc != RAFT_OK) {
        snprintf(a->err, sizeof a->err, "its recorded replica id is damaged");
        return rc;
    }
    if (id != 0) /* a replica that joined earlier */
        return rhost_store_load_group(h, st, g->group, id, NULL, g->boot_size, g->applied, g->ops,
                                      g->sm, &a->bad, a->err, sizeof a->err);
    raft_hard_state hs;
    raft_snap_meta snap;
    size_t n = 0;
    rc = raft_store_load(st, g->group, &hs, &snap, count_entry, &n, &a->bad);
    if (rc != RAFT_OK) {
        snprintf(a->err, sizeof a->err, "cannot read its Raft log: %s", raft_strerror(rc));
        return rc;
    }
    bool empty = !hs.term && !hs.commit && !snap.index && !n;
    if (empty && !a->r->bootstrap) {
        a->need_join = true;
        return RAFT_OK;
    }
    return rhost_store_load_group(
        h, st, g->group, rhost_first_id((uint8_t)a->r->cfg->nodes[a->r->self].id), &a->boot,
        g->boot_size, g->applied, g->ops, g->sm, &a->bad, a->err, sizeof a->err);
}

static int add_result(repl *r, held *g, int rc, const add_args *a)
{
    char gn[64];
    (void)r;
    if (rc == RAFT_OK)
        return 0;
    LOG_ERROR("the replica of %s on this node cannot start: %s%s",
              group_name(r, g->group, gn, sizeof gn), a->err[0] ? a->err : raft_strerror(rc),
              a->bad ? " (its Raft log is damaged: replace the replica)" : "");
    return rc == RAFT_ERR_NOMEM ? SX_ENOMEM : rc == RAFT_ERR_INVALID ? SX_EINVAL : SX_EIO;
}

/* One call to node k's server, on a link of its own: 0 and *resp (the
 * caller frees it), or an sx_err. */
static int call_node(repl *r, int k, const uint8_t *req, size_t n, uint8_t **resp, size_t *rn)
{
    net_peer *p;
    int rc = net_peer_open_link(r->cfg->nodes[k].url, 1, &p);
    if (rc != 0)
        return rc;
    rc = net_peer_call_sync(p, req, n, REPL_JOIN_CALL_MS, resp, rn);
    net_peer_close(p);
    return rc;
}

/* One attempt to join group g: find its leader among the other replicas'
 * nodes, ask it for a replica id. Returns the id, or 0 (try again). */
static uint64_t try_join(repl *r, held *g)
{
    char gn[64];
    int leader = -1, answered = 0, holders = 0;
    uint8_t *frame, *resp;
    size_t fn, rn;
    msg_R_PROBE_req pq = { .group = g->group };
    if (msg_encode_req_bytes(MSG_R_PROBE, &pq, &frame, &fn) != 0)
        return 0;
    for (int i = 0; i < g->n && leader < 0; i++) {
        int k = g->nodes[i];
        if (k == r->self)
            continue;
        msg_R_PROBE_rep rep;
        if (call_node(r, k, frame, fn, &resp, &rn) != 0)
            continue;
        if (msg_decode_rep(MSG_R_PROBE, resp, rn, &rep, NULL, 0) == 0) {
            answered++;
            holders += rep.state != 0;
            if (rep.leader)
                leader = cfg_node_by_id(r->cfg, (int)rep.leader);
        }
        msg_free_rep(MSG_R_PROBE, &rep);
        free(resp);
    }
    free(frame);
    if (leader < 0) {
        LOG_INFO("joining %s: %d of its other nodes answered, %d hold a replica, no leader "
                 "known yet (a new cluster's nodes start with --bootstrap)",
                 group_name(r, g->group, gn, sizeof gn), answered, holders);
        return 0;
    }
    msg_R_JOIN_req jq = { .group = g->group, .node = (uint64_t)r->cfg->nodes[r->self].id };
    if (msg_encode_req_bytes(MSG_R_JOIN, &jq, &frame, &fn) != 0)
        return 0;
    uint64_t id = 0;
    char emsg[200] = "";
    int rc = call_node(r, leader, frame, fn, &resp, &rn);
    free(frame);
    if (rc == 0) {
        msg_R_JOIN_rep rep;
        rc = msg_decode_rep(MSG_R_JOIN, resp, rn, &rep, emsg, sizeof emsg);
        if (rc == 0)
            id = rep.id;
        msg_free_rep(MSG_R_JOIN, &rep);
        free(resp);
    }
    if (id == 0)
        LOG_INFO("joining %s: its leader %s did not add this node yet: %s %s",
                 group_name(r, g->group, gn, sizeof gn), r->cfg->nodes[leader].name,
                 sx_strerror(rc), emsg);
    return id;
}

/* Tries to join held group g once (R_PROBE, R_JOIN, then loading it
 * empty); true once it is loaded. */
static bool join_one(repl *r, held *g)
{
    char gn[64];
    uint64_t id = try_join(r, g);
    if (id == 0)
        return false;
    add_args a;
    memset(&a, 0, sizeof a);
    a.r = r;
    a.g = g;
    a.id = id;
    int rc = loop_call(r, do_add, &a);
    if (rc != RAFT_OK) {
        add_result(r, g, rc, &a);
        return false;
    }
    LOG_INFO("%s: this node joined as replica %llu; it receives a snapshot and the "
             "log, and the leader promotes it once it has caught up",
             group_name(r, g->group, gn, sizeof gn), (unsigned long long)id);
    pthread_mutex_lock(&r->mu);
    g->joining = false;
    pthread_mutex_unlock(&r->mu);
    return true;
}

/* The join thread: each pass tries every group still joining (a leader
 * answers a join once the learner's addition committed, so most need a
 * second pass), then waits REPL_JOIN_RETRY_MS, until none is left. */
static void *join_main(void *arg)
{
    repl *r = arg;
    os_thread_name("sx-join");
    for (;;) {
        held *todo[REPL_MAX_HELD];
        int n = 0;
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < r->ngroups; i++)
            if (r->groups[i].joining)
                todo[n++] = &r->groups[i];
        bool stop = r->stopped;
        pthread_mutex_unlock(&r->mu);
        if (stop || n == 0)
            return NULL;
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&r->mu);
            stop = r->stopped;
            pthread_mutex_unlock(&r->mu);
            if (stop)
                return NULL;
            join_one(r, todo[i]);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REPL_JOIN_RETRY_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&r->mu);
        if (!r->stopped)
            pthread_cond_timedwait(&r->join_cv, &r->mu, &ts);
        pthread_mutex_unlock(&r->mu);
    }
}

int repl_group_add(repl *r, uint64_t group, const int *nodes, int n, const rhost_sm_ops *ops,
                   void *sm, uint64_t boot_size, uint64_t applied, repl_role_fn role,
                   void *role_arg)
{
    add_args a;
    memset(&a, 0, sizeof a);
    if (n < 1 || n > CFG_MAX_REPLICAS || r->ngroups >= REPL_MAX_HELD)
        return SX_EINVAL;
    for (int i = 0; i < n; i++) {
        int id = r->cfg->nodes[nodes[i]].id;
        if (id <= 0)
            return SX_EINVAL;
        a.boot.m[a.boot.n++] = (raft_member){ rhost_first_id((uint8_t)id), 1 };
        if (rhost_first_id((uint8_t)id) > a.boot.max_id)
            a.boot.max_id = rhost_first_id((uint8_t)id);
    }
    pthread_mutex_lock(&r->mu);
    held *g = &r->groups[r->ngroups];
    memset(g, 0, sizeof *g);
    g->group = group;
    memcpy(g->nodes, nodes, (size_t)n * sizeof *nodes);
    g->n = n;
    g->ops = ops;
    g->sm = sm;
    g->boot_size = boot_size;
    g->applied = applied;
    g->role = role;
    g->role_arg = role_arg;
    g->joining = true; /* not ticked by the membership driver yet */
    r->ngroups++;
    pthread_mutex_unlock(&r->mu);
    a.r = r;
    a.g = g;
    int rc = loop_call(r, do_add, &a);
    if (rc != RAFT_OK) {
        pthread_mutex_lock(&r->mu);
        r->ngroups--;
        pthread_mutex_unlock(&r->mu);
        return add_result(r, g, rc, &a);
    }
    if (!a.need_join) {
        pthread_mutex_lock(&r->mu);
        g->joining = false;
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    char gn[64];
    LOG_WARN("%s: this node's Raft log holds nothing of it and it was not started with "
             "--bootstrap: it joins as a new replica (its data was lost or is new)",
             group_name(r, group, gn, sizeof gn));
    if (!r->join_started) {
        if (pthread_create(&r->join_th, NULL, join_main, r) != 0)
            return SX_EINTERNAL;
        r->join_started = true;
    }
    return 0;
}

/* ---- R_PROBE and R_JOIN, on the loop thread ---- */

typedef struct serve_args {
    uint64_t group, node;
    bool held, leading;
    uint64_t leader; /* replica id */
    uint64_t id;     /* join: the replica id */
    int rc;          /* join: a raft error */
} serve_args;

static int do_probe(rhost *h, raft_store *st, void *arg)
{
    (void)st;
    serve_args *a = arg;
    int role;
    a->held = rhost_group_state(h, a->group, &role, &a->leader, NULL) == RAFT_OK;
    return RAFT_OK;
}

/* True while the leader's log holds a membership change it has not
 * committed yet. */
static bool conf_pending(const raft_group *c)
{
    for (uint64_t i = raft_commit(c) + 1; i <= raft_last_index(c); i++) {
        const raft_entry *e = raft_entry_at(c, i);
        if (e && e->type == RAFT_ENTRY_CONF)
            return true;
    }
    return false;
}

/* On the leader: answers the node's replica id once its addition as a
 * learner is committed (a.id), or asks it to come back (a.rc BUSY): the
 * learner was just proposed, or an older learner of that node that had
 * already taken entries is being removed first (a node that lost its data
 * again must not come back as a replica the leader thinks holds them). */
static int do_join(rhost *h, raft_store *st, void *arg)
{
    (void)st;
    serve_args *a = arg;
    int role;
    if (rhost_group_state(h, a->group, &role, &a->leader, NULL) != RAFT_OK) {
        a->rc = RAFT_ERR_INVALID;
        return RAFT_OK;
    }
    if (role != RAFT_LEADER) {
        a->rc = RAFT_ERR_NOT_LEADER;
        return RAFT_OK;
    }
    const raft_group *core = rhost_group_core(h, a->group);
    const raft_conf *c = raft_conf_get(core);
    bool pending = conf_pending(core);
    for (uint32_t i = 0; i < c->n; i++) {
        uint64_t id = c->m[i].id, match = 0;
        if (c->m[i].voter || rhost_node_of(id) != a->node)
            continue;
        raft_progress_of(core, id, &match, NULL);
        if (match > 0) {
            a->rc = pending ? RAFT_ERR_BUSY : rhost_conf(h, a->group, RAFT_CONF_REMOVE, id);
            if (a->rc == RAFT_OK)
                a->rc = RAFT_ERR_BUSY;
        } else if (pending) {
            a->rc = RAFT_ERR_BUSY; /* its addition is not committed yet */
        } else {
            a->id = id; /* committed, and it never took an entry: it is the node's */
        }
        return RAFT_OK;
    }
    uint64_t id = rhost_next_id(c->max_id, (uint8_t)a->node);
    a->rc = pending ? RAFT_ERR_BUSY : rhost_conf(h, a->group, RAFT_CONF_ADD_LEARNER, id);
    if (a->rc == RAFT_OK)
        a->rc = RAFT_ERR_BUSY; /* answered once the addition commits */
    return RAFT_OK;
}

/* True when node id `node` is configured to hold a replica of group. */
static bool configured_on(repl *r, uint64_t group, uint64_t node)
{
    bool yes = false;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->ngroups && !yes; i++)
        if (r->groups[i].group == group)
            for (int k = 0; k < r->groups[i].n && !yes; k++)
                yes = (uint64_t)r->cfg->nodes[r->groups[i].nodes[k]].id == node;
    pthread_mutex_unlock(&r->mu);
    return yes;
}

bool repl_handle(repl *r, msg_type t, const uint8_t *req, size_t n, mp_buf *out)
{
    char gn[64];
    if (t == MSG_R_PROBE) {
        msg_R_PROBE_req q;
        if (msg_decode_req(MSG_R_PROBE, req, n, &q) != 0) {
            msg_encode_err(t, SX_EPROTO, "malformed R_PROBE", out);
            return true;
        }
        serve_args a = { .group = q.group };
        msg_free_req(MSG_R_PROBE, &q);
        if (loop_call(r, do_probe, &a) != RAFT_OK) {
            msg_encode_err(t, SX_EUNAVAIL, "this node's replication has stopped", out);
            return true;
        }
        msg_R_PROBE_rep rep = { .state = a.held, .leader = a.leader ? rhost_node_of(a.leader) : 0 };
        msg_encode_rep(t, &rep, out);
        return true;
    }
    if (t != MSG_R_JOIN)
        return false;
    msg_R_JOIN_req q;
    if (msg_decode_req(MSG_R_JOIN, req, n, &q) != 0 || q.node < 1 || q.node > 255 ||
        cfg_node_by_id(r->cfg, (int)q.node) < 0) {
        msg_free_req(MSG_R_JOIN, &q);
        msg_encode_err(t, SX_EINVAL, "malformed R_JOIN, or a node id not in the config", out);
        return true;
    }
    serve_args a = { .group = q.group, .node = q.node };
    msg_free_req(MSG_R_JOIN, &q);
    if (!configured_on(r, a.group, a.node)) {
        msg_encode_err(t, SX_EINVAL, "that node holds no replica of that group in the config", out);
        return true;
    }
    int rc = loop_call(r, do_join, &a);
    if (rc != RAFT_OK || a.rc == RAFT_ERR_INVALID) {
        msg_encode_err(t, SX_EUNAVAIL, "no replica of that group on this node", out);
    } else if (a.rc == RAFT_ERR_NOT_LEADER) {
        msg_encode_err_hint(t, SX_ENOTLEADER, "not the group's leader",
                            a.leader ? rhost_node_of(a.leader) : 0, out);
    } else if (a.rc == RAFT_ERR_BUSY) {
        msg_encode_err(t, SX_EUNAVAIL,
                       "the replica is being added (or an older one removed): ask again", out);
    } else if (a.rc != RAFT_OK) {
        msg_encode_err(t, SX_EUNAVAIL, raft_strerror(a.rc), out);
    } else {
        msg_R_JOIN_rep rep = { .id = a.id };
        msg_encode_rep(t, &rep, out);
        LOG_INFO("%s: node %s asked to join: its replica %llu is a learner",
                 group_name(r, a.group, gn, sizeof gn), node_name(r, a.id),
                 (unsigned long long)a.id);
    }
    return true;
}

bool repl_defer(repl *r, msg_type t, const uint8_t *req, size_t n, net_reply *rep)
{
    if (t != MSG_RAFT)
        return false;
    msg_RAFT_req q;
    if (msg_decode_req(MSG_RAFT, req, n, &q) != 0 || q.from < 1 || q.from > 255 ||
        cfg_node_by_id(r->cfg, (int)q.from) < 0) {
        msg_free_req(MSG_RAFT, &q);
        return false;
    }
    if (repl_enter(r)) { /* the copy is made outside the lock */
        rloop_deliver(r->loop, (uint8_t)q.from, q.msgs.p, q.msgs.n);
        repl_leave(r);
    }
    msg_free_req(MSG_RAFT, &q);
    mp_buf out;
    mp_buf_init(&out);
    msg_RAFT_rep ok;
    memset(&ok, 0, sizeof ok);
    msg_encode_rep(MSG_RAFT, &ok, &out);
    net_reply_send(rep, &out);
    return true;
}

int repl_leader(repl *r, uint64_t group)
{
    int node = -1;
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->nleaders; i++)
        if (r->leaders[i].group == group)
            node = r->leaders[i].node;
    pthread_mutex_unlock(&r->mu);
    return node;
}

int repl_self_id(const repl *r)
{
    return r->cfg->nodes[r->self].id;
}

int repl_node_id(const repl *r, int node)
{
    return node >= 0 && node < r->cfg->nnodes ? r->cfg->nodes[node].id : 0;
}

/* ---- status ---- */

typedef struct status_args {
    repl *r;
    mp_buf *out;
} status_args;

static const char *role_name(int role)
{
    switch (role) {
    case RAFT_LEADER: return "leader";
    case RAFT_CANDIDATE: return "candidate";
    case RAFT_PRECANDIDATE: return "pre-candidate";
    default: return "follower";
    }
}

/* A bound of an index partition's tuple range: its values as an array
 * (the config's form), nil when unbounded. */
static void put_bound(mp_buf *b, const uint8_t *t, size_t n)
{
    uint32_t count = 0;
    size_t off = 0, len;

    if (n == 0) {
        mp_put_nil(b);
        return;
    }
    while (off < n && (len = tup_component_len(t + off, n - off)) > 0) {
        count++;
        off += len;
    }
    mp_put_array(b, count);
    for (off = 0; count > 0; count--)
        off += tup_decode_to_mp(t + off, n - off, b);
}

/* The group's kind, id and key range: "fact" with "range", its hash range
 * as "lo-hi" (inclusive, 16 hex digits each); "index" with "lo" and "hi",
 * its tuple range [lo, hi); "catalog" (id 0) with neither. */
static const cfg_part *group_part(const repl *r, uint64_t group, int *role)
{
    *role = 0;
    return group == CFG_CATALOG_GROUP ? NULL : cfg_part_by_id(r->cfg, group, role);
}

/* How many map entries put_kind puts. */
static uint32_t kind_entries(const repl *r, uint64_t group)
{
    int role;
    const cfg_part *p = group_part(r, group, &role);

    return p == NULL ? 2 : role == SX_ROLE_INDEX ? 4 : 3;
}

static void put_kind(const repl *r, uint64_t group, mp_buf *b)
{
    int role;
    const cfg_part *p = group_part(r, group, &role);

    mp_put_cstr(b, "kind");
    mp_put_cstr(b, group == CFG_CATALOG_GROUP ? "catalog"
                   : p == NULL                ? "partition" /* not in the config */
                   : role == SX_ROLE_INDEX    ? "index"
                                              : "fact");
    mp_put_cstr(b, "id");
    mp_put_u64(b, group == CFG_CATALOG_GROUP ? 0 : group);
    if (p == NULL)
        return;
    if (role == SX_ROLE_INDEX) {
        mp_put_cstr(b, "lo");
        put_bound(b, p->lo, p->lo_n);
        mp_put_cstr(b, "hi");
        put_bound(b, p->hi, p->hi_n);
        return;
    }
    char range[40];
    snprintf(range, sizeof range, "%016llx-%016llx", (unsigned long long)p->hlo,
             (unsigned long long)p->hhi);
    mp_put_cstr(b, "range");
    mp_put_cstr(b, range);
}

static void put_group(repl *r, rhost *h, const held *g, mp_buf *b)
{
    const raft_group *c = rhost_group_core(h, g->group);
    uint32_t kn = kind_entries(r, g->group);
    if (g->joining || c == NULL) {
        mp_put_map(b, kn + 1);
        put_kind(r, g->group, b);
        mp_put_cstr(b, "state");
        mp_put_cstr(b, "joining");
        return;
    }
    int role;
    uint64_t leader, term;
    rhost_group_state(h, g->group, &role, &leader, &term);
    const raft_conf *conf = raft_conf_get(c);
    mp_put_map(b, kn + 9);
    put_kind(r, g->group, b);
    mp_put_cstr(b, "replica");
    mp_put_u64(b, raft_id(c));
    mp_put_cstr(b, "state");
    mp_put_cstr(b, raft_conf_find(conf, raft_id(c)) >= 0 ? "member" : "not a member yet");
    mp_put_cstr(b, "role");
    mp_put_cstr(b, role_name(role));
    mp_put_cstr(b, "term");
    mp_put_u64(b, term);
    mp_put_cstr(b, "leader");
    if (leader)
        mp_put_cstr(b, node_name(r, leader));
    else
        mp_put_nil(b);
    mp_put_cstr(b, "commit");
    mp_put_u64(b, raft_commit(c));
    mp_put_cstr(b, "applied");
    mp_put_u64(b, raft_applied(c));
    mp_put_cstr(b, "last");
    mp_put_u64(b, raft_last_index(c));
    mp_put_cstr(b, "members");
    mp_put_array(b, conf->n);
    for (uint32_t i = 0; i < conf->n; i++) {
        uint64_t id = conf->m[i].id, match = 0;
        int active = 0;
        bool self = id == raft_id(c);
        bool known = role == RAFT_LEADER &&
                     (self || raft_progress_of(c, id, &match, &active) == RAFT_OK);
        if (self) {
            match = raft_last_index(c);
            active = 1;
        }
        mp_put_map(b, known ? 6 : 3);
        mp_put_cstr(b, "id");
        mp_put_u64(b, id);
        mp_put_cstr(b, "node");
        mp_put_cstr(b, node_name(r, id));
        mp_put_cstr(b, "voter");
        mp_put_bool(b, conf->m[i].voter != 0);
        if (known) {
            mp_put_cstr(b, "match");
            mp_put_u64(b, match);
            mp_put_cstr(b, "lag");
            mp_put_u64(b, raft_commit(c) > match ? raft_commit(c) - match : 0);
            mp_put_cstr(b, "reachable");
            mp_put_bool(b, active != 0);
        }
    }
}

static int do_status(rhost *h, raft_store *st, void *arg)
{
    (void)st;
    status_args *a = arg;
    repl *r = a->r;
    pthread_mutex_lock(&r->mu);
    int n = r->ngroups;
    held g[REPL_MAX_HELD];
    memcpy(g, r->groups, (size_t)n * sizeof *g);
    pthread_mutex_unlock(&r->mu);
    mp_put_array(a->out, (uint32_t)n);
    for (int i = 0; i < n; i++)
        put_group(r, h, &g[i], a->out);
    return RAFT_OK;
}

int repl_status(repl *r, mp_buf *out)
{
    mp_buf b;
    mp_buf_init(&b);
    status_args a = { r, &b };
    int rc = loop_call(r, do_status, &a);
    if (rc != RAFT_OK || b.oom) {
        mp_buf_free(&b);
        return rc == RAFT_OK ? SX_ENOMEM : SX_EUNAVAIL;
    }
    mp_put_raw(out, b.sb.data, b.sb.size);
    mp_buf_free(&b);
    return 0;
}

bool repl_failed(repl *r)
{
    return r != NULL && atomic_load(&r->failed);
}
