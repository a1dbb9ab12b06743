/*
 * host_test.c — tests of the Raft host (node/raft/host.c, host_store.c):
 * three or five hosts in one process, each with its own durable log store
 * in a scratch folder and a small key-value state machine, joined by an
 * in-memory network the test drives tick by tick (messages can be cut per
 * direction).  Elections in several groups, proposals with their results
 * on every replica, refusals with a leader hint, linearizable reads,
 * failover after a host dies (its pending proposals end RHOST_GONE),
 * restart from the store, a deposed leader's proposal ending RHOST_LOST,
 * snapshots streamed to a replica that fell behind compaction, a failed
 * durable write failing the host, callbacks that propose again, a
 * compaction queued just before a received snapshot is installed (the
 * durable meta must end at the snapshot), and the cores' allocator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "host_store.h"

#include "check.h"
#include "fixture.h" /* the key-value state machine */
#include "scratch.h"

#define MAXN 5

/* ---- the network and the nodes ---- */

typedef struct qmsg {
    int to; /* node */
    raft_msg m;
    struct qmsg *next;
} qmsg;

#define NGROUPS 2
static const uint64_t group_ids[NGROUPS] = { 10, 20 };

typedef struct tnode {
    int up;
    rhost *h;
    raft_store *st;
    kv sm[NGROUPS];
    int fail_persist;
    int crash_phase; /* the phase hook crashes the host there */
    int phases_seen;
    char path[512];
} tnode;

static tnode nodes[MAXN + 1]; /* 1..n */
static int nn;
static int cut[MAXN + 1][MAXN + 1]; /* cut[a][b]: a's messages to b are lost */
static int drop_heartbeats;         /* HEARTBEAT messages are lost */
static qmsg *qhead, *qtail;
static rhost_config base_cfg;
static char root[256];

static void qmsg_free(qmsg *q)
{
    for (uint32_t i = 0; i < q->m.n_entries; i++)
        free(q->m.entries[i].data);
    free(q->m.entries);
    free((void *)q->m.data);
    free(q);
}

/* The transport: a deep copy of m, queued for its node. */
static void net_send(void *ctx, const raft_msg *m)
{
    int from = (int)(intptr_t)ctx;
    int to = rhost_node_of(m->to);
    if (to < 1 || to > nn || cut[from][to] || (drop_heartbeats && m->type == RAFT_MSG_HEARTBEAT))
        return;
    qmsg *q = calloc(1, sizeof *q);
    if (!q)
        return;
    q->to = to;
    q->m = *m;
    q->m.entries = NULL;
    q->m.data = NULL;
    if (m->n_entries) {
        q->m.entries = calloc(m->n_entries, sizeof *q->m.entries);
        for (uint32_t i = 0; q->m.entries && i < m->n_entries; i++) {
            q->m.entries[i] = m->entries[i];
            q->m.entries[i].data = NULL;
            if (m->entries[i].len) {
                q->m.entries[i].data = malloc(m->entries[i].len);
                if (q->m.entries[i].data)
                    memcpy(q->m.entries[i].data, m->entries[i].data, m->entries[i].len);
            }
        }
    }
    if (m->type == RAFT_MSG_SNAP && m->len) {
        uint8_t *d = malloc(m->len);
        if (d)
            memcpy(d, m->data, m->len);
        q->m.data = d;
    }
    if (qtail)
        qtail->next = q;
    else
        qhead = q;
    qtail = q;
}

static int persist(void *ctx, size_t n, const uint64_t *groups, raft_ready *const *rds,
                   size_t ncomp, const uint64_t *cg, const raft_snap_meta *comps)
{
    tnode *nd = &nodes[(int)(intptr_t)ctx];
    if (nd->fail_persist)
        return -1;
    return rhost_store_persist(nd->st, n, groups, rds, ncomp, cg, comps);
}

static int phase_hook(void *ctx, int phase)
{
    tnode *nd = &nodes[(int)(intptr_t)ctx];
    nd->phases_seen |= phase;
    return nd->crash_phase == phase;
}

static int group_slot(uint64_t g)
{
    for (int i = 0; i < NGROUPS; i++)
        if (group_ids[i] == g)
            return i;
    return -1;
}

static raft_conf boot_conf(void)
{
    raft_conf c;
    memset(&c, 0, sizeof c);
    for (int i = 1; i <= nn; i++) {
        c.m[c.n].id = rhost_first_id((uint8_t)i);
        c.m[c.n].voter = 1;
        c.n++;
    }
    c.max_id = rhost_first_id((uint8_t)nn);
    return c;
}

static int node_start(int i)
{
    tnode *nd = &nodes[i];
    rhost_env env = { (void *)(intptr_t)i, NULL, net_send, NULL, NULL, phase_hook };
    env.persist = persist;
    snprintf(nd->path, sizeof nd->path, "%s/n%d", root, i);
    char err[256];
    if (raft_store_open(nd->path, 0, &nd->st, err, sizeof err) != RAFT_OK) {
        fprintf(stderr, "store %s: %s\n", nd->path, err);
        return -1;
    }
    rhost_config cfg = base_cfg;
    cfg.seed = 1000 + (uint64_t)i * 77;
    if (rhost_new((uint8_t)i, &cfg, &env, &nd->h) != RAFT_OK)
        return -1;
    raft_conf boot = boot_conf();
    for (int g = 0; g < NGROUPS; g++) {
        int rc = rhost_store_load_group(nd->h, nd->st, group_ids[g], rhost_first_id((uint8_t)i),
                                        &boot, SNAPLEN, nd->sm[g].applied, &kv_ops, &nd->sm[g],
                                        NULL, err, sizeof err);
        if (rc != RAFT_OK) {
            fprintf(stderr, "node %d: %s\n", i, err);
            return -1;
        }
    }
    nd->up = 1;
    return 0;
}

/* kill -9: the host and its store go; the state machine keeps what it had
 * made durable */
static void node_crash(int i)
{
    tnode *nd = &nodes[i];
    rhost_free(nd->h);
    raft_store_close(nd->st);
    nd->h = NULL;
    nd->st = NULL;
    nd->up = 0;
    for (int g = 0; g < NGROUPS; g++)
        kv_crash(&nd->sm[g]);
}

static void deliver(void)
{
    qmsg *q = qhead;
    qhead = qtail = NULL;
    while (q) {
        qmsg *next = q->next;
        if (nodes[q->to].up)
            rhost_step(nodes[q->to].h, &q->m);
        qmsg_free(q);
        q = next;
    }
}

/* Rounds and deliveries until nothing moves (bounded). */
static void settle(void)
{
    for (int k = 0; k < 100; k++) {
        int any = 0;
        for (int i = 1; i <= nn; i++) {
            int did = 0;
            if (nodes[i].up && rhost_round(nodes[i].h, &did) == RAFT_OK)
                any |= did;
        }
        if (!any && !qhead)
            return;
        deliver();
    }
}

static void run(int ticks)
{
    for (int t = 0; t < ticks; t++) {
        for (int i = 1; i <= nn; i++)
            if (nodes[i].up)
                rhost_tick(nodes[i].h);
        settle();
    }
}

/* The node leading group slot g, or 0; fails the test if two nodes think
 * they lead in the same term. */
static int leader_of(int g)
{
    int who = 0;
    uint64_t best = 0;
    for (int i = 1; i <= nn; i++) {
        int role;
        uint64_t term;
        if (!nodes[i].up ||
            rhost_group_state(nodes[i].h, group_ids[g], &role, NULL, &term) != RAFT_OK ||
            role != RAFT_LEADER)
            continue;
        CHECKF(term != best, "two leaders in term %llu", (unsigned long long)term);
        if (term > best) {
            best = term;
            who = i;
        }
    }
    return who;
}

static int wait_leader(int g, int max_ticks)
{
    for (int t = 0; t < max_ticks; t++) {
        int l = leader_of(g);
        if (l) {
            /* a leader able to serve: its no-op committed */
            const raft_group *c = rhost_group_core(nodes[l].h, group_ids[g]);
            if (raft_commit(c) >= raft_last_index(c))
                return l;
        }
        run(1);
    }
    return 0;
}

static void setup(int n)
{
    nn = n;
    memset(cut, 0, sizeof cut);
    for (int i = 1; i <= nn; i++) {
        memset(&nodes[i], 0, sizeof nodes[i]);
        if (node_start(i))
            CHECKF(0, "node %d did not start", i);
    }
}

static void teardown(void)
{
    for (int i = 1; i <= nn; i++)
        if (nodes[i].up)
            node_crash(i);
    deliver(); /* drops what is left: every node is down */
    char cmd[600];
    for (int i = 1; i <= nn; i++) {
        snprintf(cmd, sizeof cmd, "%s/n%d", root, i);
        scratch_remove(cmd);
    }
}

/* ---- completions ---- */

typedef struct waiter {
    int called;
    int err;
    uint64_t index;
    int code;
    uint64_t prev;
    int have_prev;
} waiter;

static void on_done(void *arg, int err, uint64_t index, rhost_result *res)
{
    waiter *w = arg;
    w->called++;
    w->err = err;
    w->index = index;
    if (err == RAFT_OK && res) {
        w->code = res->code;
        if (res->reply && res->reply_len == 8) {
            memcpy(&w->prev, res->reply, 8);
            w->have_prev = 1;
        }
        free(res->reply);
        res->reply = NULL;
    }
}

static int put(int node, int g, uint8_t key, uint64_t v, waiter *w, uint64_t *leader)
{
    uint8_t cmd[KV_CMD_LEN];
    kv_cmd(cmd, key, v);
    memset(w, 0, sizeof *w);
    return rhost_propose(nodes[node].h, group_ids[g], cmd, sizeof cmd, on_done, w, leader);
}

static int wait_called(waiter *w, int max_ticks)
{
    for (int t = 0; t < max_ticks && !w->called; t++) {
        settle();
        if (!w->called)
            run(1);
    }
    return w->called;
}

/* ---- tests ---- */

static void t_elect_and_propose(void)
{
    setup(3);
    int l0 = wait_leader(0, 200), l1 = wait_leader(1, 200);
    CHECK(l0 > 0);
    CHECK(l1 > 0);
    if (!l0 || !l1)
        goto out;
    CHECK_INT(group_slot(group_ids[1]), 1);
    /* every replica knows the leader */
    for (int i = 1; i <= nn; i++) {
        uint64_t lid;
        CHECK_INT(rhost_group_state(nodes[i].h, group_ids[0], NULL, &lid, NULL), RAFT_OK);
        CHECK_INT(lid, rhost_first_id((uint8_t)l0));
    }
    waiter w;
    CHECK_INT(put(l0, 0, 3, 42, &w, NULL), RAFT_OK);
    CHECK(wait_called(&w, 20));
    CHECK_INT(w.err, RAFT_OK);
    CHECK_INT(w.code, 0);
    CHECK(w.have_prev && w.prev == 0);
    CHECK(w.index >= 3); /* bootstrap 1, no-op 2 */
    CHECK_INT(put(l0, 0, 3, 43, &w, NULL), RAFT_OK);
    CHECK(wait_called(&w, 20));
    CHECK(w.err == RAFT_OK && w.have_prev && w.prev == 42);
    /* a malformed command: applied as an error result everywhere */
    uint8_t bad[2] = { 99, 0 };
    memset(&w, 0, sizeof w);
    CHECK_INT(rhost_propose(nodes[l0].h, group_ids[0], bad, 2, on_done, &w, NULL), RAFT_OK);
    CHECK(wait_called(&w, 20));
    CHECK(w.err == RAFT_OK && w.code == 1);
    run(3); /* followers learn the commit */
    for (int i = 1; i <= nn; i++) {
        CHECK_INT(nodes[i].sm[0].vals[3], 43);
        CHECK_INT(nodes[i].sm[0].applied, nodes[l0].sm[0].applied);
        CHECK_INT(nodes[i].sm[1].vals[3], 0); /* the other group untouched */
    }
    /* a follower refuses, naming the leader */
    int f = l0 % 3 + 1;
    uint64_t hint = 0;
    CHECK_INT(put(f, 0, 1, 1, &w, &hint), RAFT_ERR_NOT_LEADER);
    CHECK_INT(hint, rhost_first_id((uint8_t)l0));
    CHECK_INT(w.called, 0);
    /* unknown group */
    CHECK_INT(rhost_propose(nodes[l0].h, 99, "x", 1, on_done, &w, NULL), RAFT_ERR_INVALID);
out:
    teardown();
}

static void t_reads(void)
{
    setup(3);
    int l = wait_leader(0, 200);
    CHECK(l > 0);
    if (!l)
        goto out;
    waiter w, r1, r2;
    CHECK_INT(put(l, 0, 5, 7, &w, NULL), RAFT_OK);
    /* a read asked after the put: sees it once answered */
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    CHECK_INT(rhost_read(nodes[l].h, group_ids[0], on_done, &r1, NULL), RAFT_OK);
    CHECK_INT(rhost_read(nodes[l].h, group_ids[0], on_done, &r2, NULL), RAFT_OK);
    CHECK(wait_called(&r1, 20));
    CHECK(wait_called(&r2, 20));
    CHECK_INT(r1.err, RAFT_OK);
    CHECK_INT(r2.err, RAFT_OK);
    CHECK(w.called && w.err == RAFT_OK);
    CHECK(nodes[l].sm[0].applied >= r1.index);
    /* a follower does not serve reads */
    int f = l % 3 + 1;
    uint64_t hint = 0;
    memset(&r1, 0, sizeof r1);
    CHECK_INT(rhost_read(nodes[f].h, group_ids[0], on_done, &r1, &hint), RAFT_ERR_NOT_LEADER);
    CHECK_INT(hint, rhost_first_id((uint8_t)l));
    /* a leader cut off from everyone cannot confirm a read: it fails once
     * it steps down (check-quorum) */
    for (int i = 1; i <= nn; i++)
        if (i != l)
            cut[l][i] = cut[i][l] = 1;
    memset(&r1, 0, sizeof r1);
    CHECK_INT(rhost_read(nodes[l].h, group_ids[0], on_done, &r1, NULL), RAFT_OK);
    CHECK(wait_called(&r1, 100));
    CHECK_INT(r1.err, RAFT_ERR_NOT_LEADER);
out:
    teardown();
}

/* A read asked after a write was acknowledged must not share the
 * ReadIndex of a read asked before that write committed. */
static void t_read_window(void)
{
    setup(3);
    int l = wait_leader(0, 200);
    CHECK(l > 0);
    if (!l)
        goto out;
    waiter w, r1, r2;
    memset(&r1, 0, sizeof r1);
    memset(&r2, 0, sizeof r2);
    drop_heartbeats = 1; /* r1's confirmation cannot arrive yet */
    CHECK_INT(put(l, 0, 2, 22, &w, NULL), RAFT_OK);
    CHECK_INT(rhost_read(nodes[l].h, group_ids[0], on_done, &r1, NULL), RAFT_OK);
    for (int k = 0; k < 20 && !w.called; k++)
        settle();
    CHECK(w.called && w.err == RAFT_OK);
    CHECK_INT(r1.called, 0);
    CHECK_INT(rhost_read(nodes[l].h, group_ids[0], on_done, &r2, NULL), RAFT_OK);
    drop_heartbeats = 0;
    CHECK(wait_called(&r2, 20));
    CHECK(wait_called(&r1, 20));
    CHECK_INT(r2.err, RAFT_OK);
    CHECKF(r2.index >= w.index, "read index %llu below the acknowledged write's %llu",
           (unsigned long long)r2.index, (unsigned long long)w.index);
out:
    drop_heartbeats = 0;
    teardown();
}

static void t_failover_restart(void)
{
    setup(3);
    int l = wait_leader(0, 200);
    CHECK(l > 0);
    if (!l)
        goto out;
    waiter w, doomed;
    CHECK_INT(put(l, 0, 1, 100, &w, NULL), RAFT_OK);
    CHECK(wait_called(&w, 20) && w.err == RAFT_OK);
    /* a proposal not yet sent when its leader dies: the outcome is unknown */
    CHECK_INT(put(l, 0, 2, 200, &doomed, NULL), RAFT_OK);
    node_crash(l);
    CHECK_INT(doomed.called, 1);
    CHECK_INT(doomed.err, RHOST_GONE);
    int l2 = wait_leader(0, 300);
    CHECK(l2 > 0 && l2 != l);
    if (!l2)
        goto out;
    CHECK_INT(put(l2, 0, 1, 101, &w, NULL), RAFT_OK);
    CHECK(wait_called(&w, 30));
    CHECK(w.err == RAFT_OK && w.have_prev && w.prev == 100);
    /* the dead node comes back from its store and catches up */
    CHECK_INT(node_start(l), 0);
    run(20);
    CHECK_INT(nodes[l].sm[0].vals[1], 101);
    CHECK_INT(nodes[l].sm[0].vals[2], 0);
    CHECK_INT(nodes[l].sm[0].applied, nodes[l2].sm[0].applied);
out:
    teardown();
}

static void t_lost(void)
{
    setup(3);
    int l = wait_leader(0, 200);
    CHECK(l > 0);
    if (!l)
        goto out;
    for (int i = 1; i <= nn; i++)
        if (i != l)
            cut[l][i] = cut[i][l] = 1;
    waiter lost, w;
    CHECK_INT(put(l, 0, 4, 444, &lost, NULL), RAFT_OK);
    settle();
    int l2 = 0;
    for (int t = 0; t < 300 && !l2; t++) {
        run(1);
        for (int i = 1; i <= nn; i++) {
            int role;
            if (i != l && rhost_group_state(nodes[i].h, group_ids[0], &role, NULL, NULL) == 0 &&
                role == RAFT_LEADER)
                l2 = i;
        }
    }
    CHECK(l2 > 0);
    if (!l2)
        goto out;
    CHECK_INT(put(l2, 0, 4, 555, &w, NULL), RAFT_OK);
    CHECK(wait_called(&w, 30) && w.err == RAFT_OK);
    CHECK_INT(lost.called, 0);
    memset(cut, 0, sizeof cut);
    CHECK(wait_called(&lost, 100));
    CHECK_INT(lost.err, RHOST_LOST);
    run(5);
    for (int i = 1; i <= nn; i++)
        CHECK_INT(nodes[i].sm[0].vals[4], 555);
out:
    teardown();
}

static void t_snapshot(void)
{
    rhost_config keep = base_cfg;
    base_cfg.compact_entries = 5;
    base_cfg.snap_chunk = 20; /* several chunks per snapshot */
    setup(3);
    int l = wait_leader(0, 200);
    CHECK(l > 0);
    if (!l)
        goto out;
    int behind = l % 3 + 1;
    node_crash(behind);
    waiter w;
    for (uint64_t v = 1; v <= 30; v++) {
        CHECK_INT(put(l, 0, (uint8_t)(v % NKEYS), v, &w, NULL), RAFT_OK);
        CHECK(wait_called(&w, 30) && w.err == RAFT_OK);
    }
    const raft_group *c = rhost_group_core(nodes[l].h, group_ids[0]);
    CHECK(raft_snap_meta_get(c)->index > 20); /* compacted */
    int installs = nodes[behind].sm[0].installs;
    CHECK_INT(node_start(behind), 0);
    run(30);
    CHECK(nodes[behind].sm[0].installs > installs);
    CHECK_INT(nodes[behind].sm[0].applied, nodes[l].sm[0].applied);
    CHECK(memcmp(nodes[behind].sm[0].vals, nodes[l].sm[0].vals, sizeof nodes[l].sm[0].vals) == 0);
    /* and it restarts from its own snapshot and log */
    node_crash(behind);
    CHECK_INT(node_start(behind), 0);
    run(5);
    CHECK(memcmp(nodes[behind].sm[0].vals, nodes[l].sm[0].vals, sizeof nodes[l].sm[0].vals) == 0);
out:
    teardown();
    base_cfg = keep;
}

static void t_disk_failure(void)
{
    setup(3);
    int l = wait_leader(0, 200);
    CHECK(l > 0);
    if (!l)
        goto out;
    waiter w;
    /* the phase hook sees both phases, and can crash the host at one */
    CHECK_INT(nodes[l].phases_seen, RHOST_PHASE_PERSISTED | RHOST_PHASE_SENT);
    int f2 = (l + 1) % 3 + 1;
    nodes[f2].crash_phase = RHOST_PHASE_SENT;
    int rc2 = RAFT_OK;
    for (int t = 0; t < 20 && rc2 == RAFT_OK; t++) {
        run(1); /* the leader's heartbeats give it a round */
        rc2 = rhost_round(nodes[f2].h, NULL);
    }
    CHECK_INT(rc2, RAFT_ERR_IO);
    nodes[f2].crash_phase = 0;
    node_crash(f2);
    CHECK_INT(node_start(f2), 0);
    nodes[l].fail_persist = 1;
    CHECK_INT(put(l, 0, 1, 1, &w, NULL), RAFT_OK);
    CHECK_INT(rhost_round(nodes[l].h, NULL), RAFT_ERR_IO);
    CHECK_INT(rhost_tick(nodes[l].h), RAFT_ERR_IO);
    CHECK_INT(put(l, 0, 1, 2, &w, NULL), RAFT_ERR_IO);
    /* a state machine that cannot apply fails its host too */
    int f = l % 3 + 1;
    nodes[f].sm[0].fail_apply = 1;
    nodes[l].up = 0; /* the failed host takes no part any more */
    int rc = RAFT_OK;
    for (int t = 0; t < 400 && rc == RAFT_OK; t++) {
        rhost_tick(nodes[f].h);
        for (int i = 1; i <= nn; i++)
            if (nodes[i].up && i != f)
                rhost_tick(nodes[i].h);
        for (int k = 0; k < 10 && rc == RAFT_OK; k++) {
            for (int i = 1; i <= nn; i++)
                if (nodes[i].up && i != f)
                    rhost_round(nodes[i].h, NULL);
            rc = rhost_round(nodes[f].h, NULL);
            deliver();
        }
    }
    CHECK_INT(rc, RAFT_ERR_IO); /* the new leader's no-op reached it */
    nodes[l].up = 1;
    nodes[f].sm[0].fail_apply = 0;
out:
    teardown();
}

/* a completion that proposes the next write, up to a count */
typedef struct chain {
    int node, left, done;
    int err;
} chain;

static void on_chain(void *arg, int err, uint64_t index, rhost_result *res)
{
    chain *c = arg;
    (void)index;
    if (res)
        free(res->reply);
    if (err != RAFT_OK) {
        c->err = err;
        c->done = 1;
        return;
    }
    if (--c->left == 0) {
        c->done = 1;
        return;
    }
    uint8_t cmd[9] = { 6, (uint8_t)c->left };
    int rc = rhost_propose(nodes[c->node].h, group_ids[1], cmd, 9, on_chain, c, NULL);
    if (rc != RAFT_OK) {
        c->err = rc;
        c->done = 1;
    }
}

static void t_reentrant(void)
{
    setup(5);
    int l = wait_leader(1, 300);
    CHECK(l > 0);
    if (!l)
        goto out;
    chain c = { l, 10, 0, 0 };
    uint8_t cmd[9] = { 6, 10 };
    CHECK_INT(rhost_propose(nodes[l].h, group_ids[1], cmd, 9, on_chain, &c, NULL), RAFT_OK);
    for (int t = 0; t < 100 && !c.done; t++)
        run(1);
    CHECK(c.done);
    CHECK_INT(c.err, 0);
    CHECK_INT(c.left, 0);
    run(3);
    for (int i = 1; i <= nn; i++)
        CHECK_INT(nodes[i].sm[1].vals[6], 1);
out:
    teardown();
}

/* One replica driven by hand (node 1; the others never run): messages
 * from a leader at node 2 are written here, so a round's ready set is
 * exactly what the test wants. */
static raft_msg from_leader(int type, uint64_t term)
{
    raft_msg m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.group = group_ids[0];
    m.from = rhost_first_id(2);
    m.to = rhost_first_id(1);
    m.term = term;
    return m;
}

/* A compaction queued at the end of a round and a snapshot installed by
 * the next round: the durable snapshot meta must end at the installed
 * snapshot, never move back to the compaction's (the store would then
 * hold a commit index beyond its log, and the node could not restart). */
static void t_compact_then_install(void)
{
    rhost_config keep = base_cfg;
    base_cfg.compact_entries = 5;
    setup(3);
    rhost *h = nodes[1].h;
    /* entries 2..8 of term 2, all committed: applying them compacts */
    raft_entry es[7];
    uint8_t cmds[7][KV_CMD_LEN];
    for (int i = 0; i < 7; i++) {
        kv_cmd(cmds[i], (uint8_t)i, 100 + (uint64_t)i);
        es[i] = (raft_entry){ .term = 2,
                              .index = 2 + (uint64_t)i,
                              .type = RAFT_ENTRY_NORMAL,
                              .len = KV_CMD_LEN,
                              .data = cmds[i] };
    }
    raft_msg app = from_leader(RAFT_MSG_APPEND, 2);
    app.index = 1;
    app.log_term = 1;
    app.commit = 8;
    app.entries = es;
    app.n_entries = 7;
    CHECK_INT(rhost_step(h, &app), RAFT_OK);
    CHECK_INT(rhost_round(h, NULL), RAFT_OK);
    CHECK_INT(nodes[1].sm[0].applied, 8);
    CHECK_INT(nodes[1].sm[0].snap_index, 8); /* compacted; its meta waits for a round */
    /* before that round, the leader's snapshot at 20 arrives whole */
    kv src = { .applied = 20 };
    src.vals[3] = 33;
    uint64_t idx, size;
    CHECK_INT(kv_ops.snap_make(&src, &idx, &size), 0);
    raft_msg sn = from_leader(RAFT_MSG_SNAP, 2);
    sn.snap.index = 20;
    sn.snap.term = 2;
    sn.snap.size = SNAPLEN;
    sn.snap.conf = boot_conf();
    sn.offset = 0;
    sn.len = SNAPLEN;
    sn.done = 1;
    sn.commit = 20;
    sn.data = src.snap;
    CHECK_INT(rhost_step(h, &sn), RAFT_OK);
    CHECK_INT(rhost_round(h, NULL), RAFT_OK);
    CHECK_INT(nodes[1].sm[0].applied, 20);
    CHECK_INT(nodes[1].sm[0].vals[3], 33);
    raft_hard_state hs;
    raft_snap_meta meta;
    uint64_t bad = 0;
    CHECK_INT(raft_store_load(nodes[1].st, group_ids[0], &hs, &meta, NULL, NULL, &bad), RAFT_OK);
    CHECK_INT(meta.index, 20);
    CHECK_INT(hs.commit, 20);
    /* and the replica restarts from it */
    node_crash(1);
    int started = node_start(1);
    CHECK_INT(started, 0);
    if (started == 0) {
        const raft_group *c = rhost_group_core(nodes[1].h, group_ids[0]);
        CHECK(c && raft_snap_meta_get(c)->index == 20);
        CHECK_INT(nodes[1].sm[0].vals[3], 33);
    } else {
        rhost_free(nodes[1].h);
        raft_store_close(nodes[1].st);
        nodes[1].h = NULL;
        nodes[1].st = NULL;
    }
    teardown();
    base_cfg = keep;
}

/* rhost_config.alloc: every core allocates through it, and has returned
 * everything once its group is removed or the host freed. */
typedef struct acct {
    long long bytes, blocks, calls;
} acct;

static void *acct_alloc(void *ctx, size_t n)
{
    acct *a = ctx;
    void *p = malloc(n);
    if (p) {
        a->bytes += (long long)n;
        a->blocks++;
        a->calls++;
    }
    return p;
}

static void acct_free(void *ctx, void *p, size_t n)
{
    acct *a = ctx;
    if (!p)
        return;
    a->bytes -= (long long)n;
    a->blocks--;
    free(p);
}

static void t_alloc(void)
{
    rhost_config keep = base_cfg;
    acct a[MAXN + 1];
    memset(a, 0, sizeof a);
    nn = 3;
    memset(cut, 0, sizeof cut);
    for (int i = 1; i <= nn; i++) {
        memset(&nodes[i], 0, sizeof nodes[i]);
        base_cfg.alloc = (raft_alloc){ acct_alloc, acct_free, &a[i] };
        CHECK_INT(node_start(i), 0);
    }
    base_cfg = keep;
    int l = wait_leader(0, 200);
    CHECK(l > 0);
    waiter w;
    if (l) {
        CHECK_INT(put(l, 0, 1, 7, &w, NULL), RAFT_OK);
        CHECK(wait_called(&w, 30) && w.err == RAFT_OK);
    }
    for (int i = 1; i <= nn; i++) {
        CHECK(a[i].calls > 0);
        CHECK(a[i].bytes > 0);
    }
    /* removing a group returns its core's memory; freeing the host the rest */
    long long before = a[1].bytes;
    CHECK_INT(rhost_group_remove(nodes[1].h, group_ids[1]), RAFT_OK);
    CHECK(a[1].bytes < before && a[1].bytes > 0);
    teardown();
    for (int i = 1; i <= nn; i++) {
        CHECK_INT(a[i].bytes, 0);
        CHECK_INT(a[i].blocks, 0);
    }
}

static bool run_all(const char *dir)
{
    snprintf(root, sizeof root, "%s", dir);
    rhost_config_default(&base_cfg);
    t_elect_and_propose();
    t_reads();
    t_read_window();
    t_failover_restart();
    t_lost();
    t_snapshot();
    t_disk_failure();
    t_reentrant();
    t_compact_then_install();
    t_alloc();
    return true;
}

int main(int argc, char **argv)
{
    if (!scratch_run(argc, argv, "sx-rhost", run_all))
        return 1;
    return CHECK_DONE();
}
