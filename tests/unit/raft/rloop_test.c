/*
 * rloop_test.c — tests of a node's Raft loop (node/raft/rloop.c): three
 * loops, each a thread with its own durable log store in a scratch folder,
 * exchange real RAFT batches (raft_wire) through a transport that hands
 * each batch to the destination loop; time is the real monotonic clock
 * (10 ms ticks).  A leader is elected in each group; a proposal made on any
 * node completes on the leader with its result and is refused elsewhere
 * with the leader's id; reads; many proposals from several threads at once
 * all land, equal on every replica; the leader's loop stopped (its pending
 * work ends RHOST_GONE), a new leader elected, the old node restarted from
 * its store catching up; a batch naming another node's replica is dropped;
 * the owner's tick hook runs with the host.
 * Every wait is for a condition, with a deadline.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_store.h"
#include "raft_wire.h"
#include "rloop.h"

#include "check.h"
#include "fixture.h"
#include "scratch.h"

#define N 3
#define NG 2
static const uint64_t groups[NG] = { 7, 9 };

typedef struct tnode {
    rloop *l;
    raft_store *st;
    kv sm[NG];
} tnode;

static tnode nodes[N + 1];
static pthread_mutex_t net_mu = PTHREAD_MUTEX_INITIALIZER;
static rloop *live[N + 1]; /* under net_mu: the loops batches reach */
static char root[256];

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void net_send(void *ctx, uint8_t to, const uint8_t *batch, size_t len)
{
    (void)ctx;
    pthread_mutex_lock(&net_mu);
    if (to >= 1 && to <= N && live[to])
        rloop_deliver(live[to], (uint8_t)(intptr_t)ctx, batch, len);
    pthread_mutex_unlock(&net_mu);
}

static int ticks_seen; /* on_tick calls, every loop */
static void on_tick(void *ctx, rhost *h)
{
    (void)ctx;
    if (h != NULL)
        __atomic_fetch_add(&ticks_seen, 1, __ATOMIC_RELAXED);
}

static int failed_loops;
static void on_fail(void *ctx, const char *why)
{
    (void)ctx;
    (void)why;
    __atomic_fetch_add(&failed_loops, 1, __ATOMIC_RELAXED);
}

/* runs on the loop thread: load both groups */
static int load_groups(rhost *h, raft_store *st, void *arg)
{
    int i = (int)(intptr_t)arg;
    raft_conf boot;
    memset(&boot, 0, sizeof boot);
    for (int k = 1; k <= N; k++)
        boot.m[boot.n++] = (raft_member){ rhost_first_id((uint8_t)k), 1 };
    boot.max_id = rhost_first_id(N);
    char err[256];
    for (int g = 0; g < NG; g++) {
        int rc = rhost_store_load_group(h, st, groups[g], rhost_first_id((uint8_t)i), &boot,
                                        SNAPLEN, nodes[i].sm[g].applied, &kv_ops, &nodes[i].sm[g],
                                        NULL, err, sizeof err);
        if (rc != RAFT_OK) {
            fprintf(stderr, "node %d: %s\n", i, err);
            return rc;
        }
    }
    return RAFT_OK;
}

static int start(int i)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/n%d", root, i);
    if (raft_store_open(path, 1, &nodes[i].st, err, sizeof err) != RAFT_OK) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    rloop_config cfg;
    rloop_config_default(&cfg, (uint8_t)i);
    cfg.tick_ms = 10;
    cfg.host.seed = 31 * (uint64_t)i + (uint64_t)now_ms();
    cfg.send = net_send;
    cfg.send_ctx = (void *)(intptr_t)i;
    cfg.on_fail = on_fail;
    cfg.on_tick = on_tick;
    if (rloop_start(&cfg, nodes[i].st, &nodes[i].l) != RAFT_OK)
        return -1;
    if (rloop_call(nodes[i].l, load_groups, (void *)(intptr_t)i) != RAFT_OK)
        return -1;
    pthread_mutex_lock(&net_mu);
    live[i] = nodes[i].l;
    pthread_mutex_unlock(&net_mu);
    return 0;
}

static void stop(int i)
{
    pthread_mutex_lock(&net_mu);
    live[i] = NULL;
    pthread_mutex_unlock(&net_mu);
    rloop_stop(nodes[i].l);
    raft_store_close(nodes[i].st);
    nodes[i].l = NULL;
    nodes[i].st = NULL;
    for (int g = 0; g < NG; g++)
        kv_crash(&nodes[i].sm[g]);
}

/* ---- asking the loops ---- */

typedef struct gstate {
    uint64_t group;
    int role;
    uint64_t leader, applied, commit, last;
    uint64_t vals[NKEYS];
    int node;
} gstate;

static int get_state(rhost *h, raft_store *st, void *arg)
{
    (void)st;
    gstate *s = arg;
    if (rhost_group_state(h, s->group, &s->role, &s->leader, NULL) != RAFT_OK)
        return RAFT_ERR_INVALID;
    const raft_group *c = rhost_group_core(h, s->group);
    s->commit = raft_commit(c);
    s->last = raft_last_index(c);
    for (int g = 0; g < NG; g++)
        if (groups[g] == s->group) {
            s->applied = nodes[s->node].sm[g].applied;
            memcpy(s->vals, nodes[s->node].sm[g].vals, sizeof s->vals);
        }
    return RAFT_OK;
}

static int state_of(int i, int g, gstate *s)
{
    memset(s, 0, sizeof *s);
    s->group = groups[g];
    s->node = i;
    return nodes[i].l ? rloop_call(nodes[i].l, get_state, s) : RAFT_ERR_IO;
}

/* Waits (up to ms) for a node to lead group g with its no-op committed. */
static int wait_leader(int g, int ms)
{
    uint64_t end = now_ms() + (uint64_t)ms;
    while (now_ms() < end) {
        for (int i = 1; i <= N; i++) {
            gstate s;
            if (state_of(i, g, &s) == RAFT_OK && s.role == RAFT_LEADER && s.commit >= s.last &&
                s.commit >= 2)
                return i;
        }
        struct timespec ts = { 0, 5000000 };
        nanosleep(&ts, NULL); /* polling interval of the condition */
    }
    return 0;
}

/* ---- completions ---- */

static pthread_mutex_t w_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t w_cv = PTHREAD_COND_INITIALIZER;

typedef struct waiter {
    int called, err, code;
    uint64_t index, leader, prev;
} waiter;

static void on_done(void *arg, int err, uint64_t index, rhost_result *res, uint64_t leader)
{
    waiter *w = arg;
    pthread_mutex_lock(&w_mu);
    w->err = err;
    w->index = index;
    w->leader = leader;
    if (err == RAFT_OK && res) {
        w->code = res->code;
        if (res->reply_len == 8)
            memcpy(&w->prev, res->reply, 8);
        free(res->reply);
        res->reply = NULL;
    }
    w->called++;
    pthread_cond_broadcast(&w_cv);
    pthread_mutex_unlock(&w_mu);
}

static int wait_done(waiter *w, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w_mu);
    int rc = 0;
    while (!w->called && rc == 0)
        rc = pthread_cond_timedwait(&w_cv, &w_mu, &ts);
    int called = w->called;
    pthread_mutex_unlock(&w_mu);
    return called;
}

static int propose(int i, int g, uint8_t key, uint64_t v, waiter *w)
{
    uint8_t cmd[KV_CMD_LEN];
    kv_cmd(cmd, key, v);
    memset(w, 0, sizeof *w);
    return rloop_propose(nodes[i].l, groups[g], cmd, sizeof cmd, on_done, w);
}

/* ---- many writers ---- */

typedef struct writer {
    int node, g, n, ok;
    uint8_t key;
} writer;

static void *write_many(void *arg)
{
    writer *wr = arg;
    for (int k = 0; k < wr->n; k++) {
        waiter w;
        if (propose(wr->node, wr->g, wr->key, (uint64_t)k + 1, &w) != RAFT_OK)
            break;
        if (!wait_done(&w, 5000) || w.err != RAFT_OK)
            break;
        wr->ok++;
    }
    return NULL;
}

static bool run_all(const char *dir)
{
    snprintf(root, sizeof root, "%s", dir);
    for (int i = 1; i <= N; i++)
        if (start(i)) {
            CHECKF(0, "node %d did not start", i);
            return false;
        }
    int l = wait_leader(0, 10000);
    CHECK(l > 0);
    CHECK(wait_leader(1, 10000) > 0);
    if (!l)
        goto out;

    /* a proposal on every node: the leader applies it, the others name it */
    for (int i = 1; i <= N; i++) {
        waiter w;
        CHECK_INT(propose(i, 0, 1, 100 + (uint64_t)i, &w), RAFT_OK);
        CHECK(wait_done(&w, 5000));
        if (i == l) {
            CHECK_INT(w.err, RAFT_OK);
            CHECK_INT(w.code, 0);
        } else {
            CHECK_INT(w.err, RAFT_ERR_NOT_LEADER);
            CHECK_INT(w.leader, rhost_first_id((uint8_t)l));
        }
    }
    waiter r;
    memset(&r, 0, sizeof r);
    CHECK_INT(rloop_read(nodes[l].l, groups[0], on_done, &r), RAFT_OK);
    CHECK(wait_done(&r, 5000));
    CHECK_INT(r.err, RAFT_OK);
    gstate s;
    CHECK_INT(state_of(l, 0, &s), RAFT_OK);
    CHECK(s.applied >= r.index);
    CHECK_INT(s.vals[1], 100 + (uint64_t)l);
    /* an unknown group is refused on the loop thread */
    waiter u;
    CHECK_INT(propose(l, 0, 1, 1, &u), RAFT_OK); /* keep the leader busy */
    memset(&u, 0, sizeof u);
    CHECK_INT(rloop_propose(nodes[l].l, 12345, "x", 1, on_done, &u), RAFT_OK);
    CHECK(wait_done(&u, 5000));
    CHECK_INT(u.err, RAFT_ERR_INVALID);

    /* four writers at once, two per group */
    int l1 = wait_leader(1, 5000);
    writer wr[4] = {
        { l, 0, 150, 0, 2 }, { l, 0, 150, 0, 3 }, { l1, 1, 150, 0, 2 }, { l1, 1, 150, 0, 3 }
    };
    pthread_t th[4];
    for (int k = 0; k < 4; k++)
        CHECK_INT(pthread_create(&th[k], NULL, write_many, &wr[k]), 0);
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        CHECK_INT(wr[k].ok, 150);
    }
    /* every replica converges */
    uint64_t end = now_ms() + 5000;
    int same = 0;
    while (!same && now_ms() < end) {
        gstate a[N + 1];
        same = 1;
        for (int i = 1; i <= N; i++)
            same &= state_of(i, 1, &a[i]) == RAFT_OK;
        for (int i = 2; same && i <= N; i++)
            same &= a[i].applied == a[1].applied && !memcmp(a[i].vals, a[1].vals, sizeof a[1].vals);
        same &= a[1].vals[2] == 150 && a[1].vals[3] == 150;
        if (!same) {
            struct timespec ts = { 0, 5000000 };
            nanosleep(&ts, NULL);
        }
    }
    CHECK(same);

    /* a batch from node 1 speaking for node 2's replica is dropped */
    {
        int other = l % N + 1, liar = other % N + 1;
        raft_msg m;
        memset(&m, 0, sizeof m);
        m.type = RAFT_MSG_HEARTBEAT;
        m.group = groups[0];
        m.from = rhost_first_id((uint8_t)other);
        m.to = rhost_first_id((uint8_t)liar);
        m.term = 1000; /* would depose everyone if believed */
        mp_buf b;
        mp_buf_init(&b);
        CHECK_INT(raft_wire_encode(&m, 1, &b, NULL, 0), 0);
        rloop_stats before, after;
        rloop_stats_get(nodes[liar].l, &before);
        rloop_deliver(nodes[liar].l, (uint8_t)l, (const uint8_t *)b.sb.data, b.sb.size);
        mp_buf_free(&b);
        gstate t;
        CHECK_INT(state_of(liar, 0, &t), RAFT_OK); /* the batch ran before this call */
        rloop_stats_get(nodes[liar].l, &after);
        CHECK_INT(after.dropped_in, before.dropped_in + 1);
        CHECK_INT(state_of(l, 0, &t), RAFT_OK);
        CHECK_INT(t.role, RAFT_LEADER);
    }

    /* the leader of group 0 stops: its pending proposal ends GONE or
     * committed; another leads; the old one comes back and catches up */
    {
        waiter pending;
        CHECK_INT(propose(l, 0, 4, 44, &pending), RAFT_OK);
        stop(l);
        CHECK(wait_done(&pending, 1000));
        CHECK(pending.err == RHOST_GONE || pending.err == RAFT_OK);
        int l2 = wait_leader(0, 10000);
        CHECK(l2 > 0 && l2 != l);
        if (!l2)
            goto out;
        waiter w;
        CHECK_INT(propose(l2, 0, 5, 55, &w), RAFT_OK);
        CHECK(wait_done(&w, 5000));
        CHECK_INT(w.err, RAFT_OK);
        CHECK_INT(start(l), 0);
        end = now_ms() + 5000;
        gstate a, b;
        int ok = 0;
        while (!ok && now_ms() < end) {
            ok = state_of(l, 0, &a) == RAFT_OK && state_of(l2, 0, &b) == RAFT_OK &&
                 a.vals[5] == 55 && a.applied == b.applied;
            if (!ok) {
                struct timespec ts = { 0, 5000000 };
                nanosleep(&ts, NULL);
            }
        }
        CHECK(ok);
    }
    CHECK_INT(__atomic_load_n(&failed_loops, __ATOMIC_RELAXED), 0);
    CHECK(__atomic_load_n(&ticks_seen, __ATOMIC_RELAXED) > 0);
    for (int i = 1; i <= N; i++) {
        rloop_stats st;
        if (!nodes[i].l)
            continue;
        rloop_stats_get(nodes[i].l, &st);
        CHECK_INT(st.dropped_out, 0);
        CHECK(st.batches_in > 0 && st.batches_out > 0);
    }
out:
    for (int i = 1; i <= N; i++)
        if (nodes[i].l)
            stop(i);
    return true;
}

int main(int argc, char **argv)
{
    if (!scratch_run(argc, argv, "sx-rloop", run_all))
        return 1;
    return CHECK_DONE();
}
