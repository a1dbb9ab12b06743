/*
 * repl.c — a node's replication service (repl.h): its Raft loop, log
 * store and the RAFT transport over links.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "host_store.h"
#include "log.h"
#include "msg.h"
#include "repl.h"
#include "sx_errors.h"

#define REPL_MAX_GROUPS 4096
#define REPL_SEND_TIMEOUT_MS 2000

typedef struct leader_rec {
    uint64_t group;
    int node; /* index into cfg.nodes, -1 unknown */
} leader_rec;

struct repl {
    const cfg_cluster *cfg;
    int self;
    raft_store *st;
    rloop *loop;
    net_peer *peer[256]; /* by node id; opened by the loop thread */
    pthread_mutex_t mu;  /* leaders, stopped */
    bool stopped;        /* the loop is gone: RAFT frames are dropped */
    leader_rec *leaders;
    size_t nleaders, capleaders;
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
    mp_buf b;
    uint8_t *frame;
    size_t fn;
    mp_buf_init(&b);
    int rc = msg_encode_req(MSG_RAFT, &q, &b);
    if (rc == 0)
        rc = mp_buf_take(&b, &frame, &fn);
    mp_buf_free(&b);
    if (rc != 0)
        return;
    if (net_peer_submit(r->peer[to], frame, fn, REPL_SEND_TIMEOUT_MS, sent, frame) != 0)
        free(frame);
}

static void on_fail(void *ctx, const char *why)
{
    repl *r = ctx;
    LOG_ERROR("replication on node %s stopped: %s. Its replicas take no further part (the "
              "other replicas serve); restart the node.",
              r->cfg->nodes[r->self].name, why);
}

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
    pthread_mutex_unlock(&r->mu);
    if (changed || role == RAFT_LEADER)
        LOG_INFO("group %s: %s, term %llu, leader %s",
                 group == CFG_CATALOG_GROUP ? "catalog" : "partition",
                 role == RAFT_LEADER     ? "leading"
                 : role == RAFT_FOLLOWER ? "following"
                                         : "campaigning",
                 (unsigned long long)term, node >= 0 ? r->cfg->nodes[node].name : "unknown");
}

int repl_open(const cfg_cluster *cfg, int self, const char *data_dir, repl **out)
{
    *out = NULL;
    if (cfg->nodes[self].id <= 0)
        return SX_ECONFIG;
    repl *r = calloc(1, sizeof *r);
    if (r == NULL)
        return SX_ENOMEM;
    r->cfg = cfg;
    r->self = self;
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
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
    lc.host.compact_entries = 1000;
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
    pthread_mutex_unlock(&r->mu);
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
    pthread_mutex_destroy(&r->mu);
    free(r);
}

typedef struct add_args {
    uint64_t group, id, boot_size, applied;
    raft_conf boot;
    const rhost_sm_ops *ops;
    void *sm;
    char err[256];
    uint64_t bad;
} add_args;

static int do_add(rhost *h, raft_store *st, void *arg)
{
    add_args *a = arg;
    return rhost_store_load_group(h, st, a->group, a->id, &a->boot, a->boot_size, a->applied,
                                  a->ops, a->sm, &a->bad, a->err, sizeof a->err);
}

int repl_group_add(repl *r, uint64_t group, const int *nodes, int n, const rhost_sm_ops *ops,
                   void *sm, uint64_t boot_size, uint64_t applied)
{
    add_args a;
    memset(&a, 0, sizeof a);
    if (n < 1 || n > RAFT_MAX_MEMBERS)
        return SX_EINVAL;
    for (int i = 0; i < n; i++) {
        int id = r->cfg->nodes[nodes[i]].id;
        if (id <= 0)
            return SX_EINVAL;
        a.boot.m[a.boot.n++] = (raft_member){ rhost_first_id((uint8_t)id), 1 };
        if (rhost_first_id((uint8_t)id) > a.boot.max_id)
            a.boot.max_id = rhost_first_id((uint8_t)id);
    }
    a.group = group;
    a.id = rhost_first_id((uint8_t)r->cfg->nodes[r->self].id);
    a.boot_size = boot_size;
    a.applied = applied;
    a.ops = ops;
    a.sm = sm;
    int rc = rloop_call(r->loop, do_add, &a);
    if (rc == RAFT_OK)
        return 0;
    LOG_ERROR("replica of %s%s on this node cannot start: %s",
              group == CFG_CATALOG_GROUP ? "the catalog" : "a partition",
              a.bad ? " (its Raft log is damaged: replace the replica)" : "",
              a.err[0] ? a.err : raft_strerror(rc));
    return rc == RAFT_ERR_NOMEM ? SX_ENOMEM : rc == RAFT_ERR_INVALID ? SX_EINVAL : SX_EIO;
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
    pthread_mutex_lock(&r->mu);
    if (!r->stopped)
        rloop_deliver(r->loop, (uint8_t)q.from, q.msgs.p, q.msgs.n);
    pthread_mutex_unlock(&r->mu);
    msg_free_req(MSG_RAFT, &q);
    mp_buf out;
    mp_buf_init(&out);
    msg_RAFT_rep ok;
    memset(&ok, 0, sizeof ok);
    msg_encode_rep(MSG_RAFT, &ok, &out);
    net_reply_send(rep, &out);
    return true;
}

rloop *repl_loop(repl *r)
{
    return r->loop;
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

int repl_node_id(const repl *r, int node)
{
    return node >= 0 && node < r->cfg->nnodes ? r->cfg->nodes[node].id : 0;
}
