/*
 * rloop.c — a node's Raft loop (rloop.h): the thread that owns the Raft
 * host, its inbox, its tick, and the per-node encoding of outgoing batches.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "host_store.h"
#include "raft_wire.h"
#include "rloop.h"
#include "sx_errors.h"

enum { IT_BATCH = 1, IT_PROPOSE, IT_READ, IT_CALL };

typedef struct call_wait {
    int done;
    int result;
} call_wait;

typedef struct item {
    int kind;
    uint8_t from;
    uint64_t group;
    uint8_t *data;
    size_t len;
    rloop_done_fn done;
    void *arg;
    int (*fn)(rhost *h, raft_store *st, void *arg);
    call_wait *wait;
    struct item *next;
} item;

/* What rhost calls back for a proposal or read made by the loop. */
typedef struct pend {
    rloop *l;
    uint64_t group;
    rloop_done_fn done;
    void *arg;
} pend;

typedef struct outq {
    mp_buf buf;
    raft_wire_enc enc;
    int open;
} outq;

struct rloop {
    rloop_config cfg;
    raft_store *st;
    rhost *h;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* the loop: inbox or stop */
    pthread_cond_t called; /* rloop_call's waiters */
    item *head, *tail;
    int stop;
    atomic_int failed; /* set by the loop thread, read by every caller */
    size_t queued;     /* bytes of received batches in the inbox (under mu) */
    outq out[256];
    rloop_stats st_;
};

/* Counters are bumped on the loop thread and read by any: atomically. */
#define STAT_ADD(l, field, n) __atomic_fetch_add(&(l)->st_.field, (uint64_t)(n), __ATOMIC_RELAXED)

/* The most bytes of received batches the inbox holds: past it a batch is
 * dropped (Raft sends again), so a flood cannot grow the node's memory. */
#define RLOOP_MAX_QUEUED ((size_t)64 << 20)

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* rloop_config_default: contract in rloop.h. */
void rloop_config_default(rloop_config *cfg, uint8_t node)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->node = node;
    cfg->tick_ms = 50;
    cfg->max_batch = 8u << 20;
    rhost_config_default(&cfg->host);
}

/* ---- the transport side of the host ---- */

static void out_send(rloop *l, uint8_t to)
{
    outq *q = &l->out[to];
    if (!q->open)
        return;
    q->open = 0;
    if (raft_wire_enc_end(&q->enc) == 0 && !q->buf.oom) {
        l->cfg.send(l->cfg.send_ctx, to, (const uint8_t *)q->buf.sb.data, q->buf.sb.size);
        STAT_ADD(l, batches_out, 1);
        STAT_ADD(l, bytes_out, q->buf.sb.size);
    }
    q->buf.sb.size = 0; /* the memory is kept for the next round */
    q->buf.oom = false;
}

static void env_send(void *ctx, const raft_msg *m)
{
    rloop *l = ctx;
    uint8_t to = rhost_node_of(m->to);
    if (!to || to == l->cfg.node)
        return;
    outq *q = &l->out[to];
    if (q->open && q->buf.sb.size + raft_wire_msg_bound(m) > l->cfg.max_batch)
        out_send(l, to); /* a frame's budget: start another batch */
    if (!q->open) {
        raft_wire_enc_begin(&q->enc, &q->buf);
        q->open = 1;
    }
    char err[128];
    int rc = raft_wire_enc_add(&q->enc, m, err, sizeof err);
    if (rc == SX_ETOOBIG) {
        out_send(l, to);
        raft_wire_enc_begin(&q->enc, &q->buf);
        q->open = 1;
        rc = raft_wire_enc_add(&q->enc, m, err, sizeof err);
    }
    /* a message the encoder refuses (a host bug: SX_EINVAL) or cannot
     * hold (SX_ENOMEM) is lost, as on the network, and counted */
    if (rc != 0)
        STAT_ADD(l, dropped_out, 1);
}

static void env_flush(void *ctx)
{
    rloop *l = ctx;
    for (int i = 1; i < 256; i++)
        if (l->out[i].open)
            out_send(l, (uint8_t)i);
}

static void env_role(void *ctx, uint64_t group, int role, uint64_t leader, uint64_t term)
{
    rloop *l = ctx;
    if (l->cfg.on_role)
        l->cfg.on_role(l->cfg.role_ctx, group, role, leader, term);
}

/* ---- completions ---- */

static uint64_t leader_of(rloop *l, uint64_t group)
{
    uint64_t leader = 0;
    if (l->h)
        rhost_group_state(l->h, group, NULL, &leader, NULL);
    return leader;
}

static void on_pend(void *arg, int err, uint64_t index, rhost_result *res)
{
    pend *p = arg;
    p->done(p->arg, err, index, res, err == RAFT_OK ? 0 : leader_of(p->l, p->group));
    free(p);
}

static void item_fail(item *it, int err)
{
    if (it->kind == IT_PROPOSE || it->kind == IT_READ)
        it->done(it->arg, err, 0, NULL, 0);
    free(it->data);
    free(it);
}

/* Runs one inbox item on the loop thread. */
static void item_run(rloop *l, item *it)
{
    switch (it->kind) {
    case IT_BATCH: {
        raft_wire_batch b;
        if (raft_wire_decode(it->data, it->len, NULL, &b, NULL, 0) != 0) {
            STAT_ADD(l, dropped_in, 1);
            break;
        }
        STAT_ADD(l, batches_in, 1);
        for (size_t i = 0; i < b.n_msgs; i++) {
            if (rhost_node_of(b.msgs[i].from) != it->from) {
                STAT_ADD(l, dropped_in, 1);
                continue;
            }
            STAT_ADD(l, msgs_in, 1);
            rhost_step(l->h, &b.msgs[i]);
        }
        raft_wire_batch_free(&b);
        break;
    }
    case IT_PROPOSE:
    case IT_READ: {
        pend *p = malloc(sizeof *p);
        if (!p) {
            it->done(it->arg, RAFT_ERR_NOMEM, 0, NULL, 0);
            break;
        }
        *p = (pend){ l, it->group, it->done, it->arg };
        uint64_t leader = 0;
        int rc = it->kind == IT_PROPOSE ? rhost_propose(l->h, it->group, it->data,
                                                        (uint32_t)it->len, on_pend, p, &leader)
                                        : rhost_read(l->h, it->group, on_pend, p, &leader);
        if (rc != RAFT_OK) {
            free(p);
            it->done(it->arg, rc, 0, NULL, leader);
        }
        break;
    }
    case IT_CALL: {
        int r = it->fn(l->h, l->st, it->arg);
        pthread_mutex_lock(&l->mu);
        it->wait->result = r;
        it->wait->done = 1;
        pthread_cond_broadcast(&l->called);
        pthread_mutex_unlock(&l->mu);
        break;
    }
    }
    free(it->data);
    free(it);
}

/* Ends the loop's service: everything queued and pending fails. */
static void fail_inbox(rloop *l, item *list, int err)
{
    while (list) {
        item *next = list->next;
        if (list->kind == IT_CALL) {
            pthread_mutex_lock(&l->mu);
            list->wait->result = RAFT_ERR_IO;
            list->wait->done = 1;
            pthread_cond_broadcast(&l->called);
            pthread_mutex_unlock(&l->mu);
            free(list);
        } else {
            item_fail(list, err);
        }
        list = next;
    }
}

static void *loop_main(void *arg)
{
    rloop *l = arg;
    uint64_t next_tick = mono_ms() + l->cfg.tick_ms;
    int busy = 0;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->stop && !l->head && !busy) {
            uint64_t now = mono_ms();
            if (now >= next_tick)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t wait = next_tick - now;
            ts.tv_sec += (time_t)(wait / 1000);
            ts.tv_nsec += (long)(wait % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            int rc = pthread_cond_timedwait(&l->wake, &l->mu, &ts);
            if (rc && rc != ETIMEDOUT && rc != EINTR)
                break;
        }
        item *list = l->head;
        l->head = l->tail = NULL;
        l->queued = 0; /* every batch queued is taken */
        int stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        if (stop) {
            fail_inbox(l, list, RHOST_GONE);
            break;
        }
        if (atomic_load(&l->failed)) {
            fail_inbox(l, list, RAFT_ERR_IO);
            busy = 0;
            next_tick = mono_ms() + l->cfg.tick_ms;
            continue;
        }
        while (list) {
            item *next = list->next;
            item_run(l, list);
            list = next;
        }
        uint64_t now = mono_ms();
        if (now >= next_tick) {
            rhost_tick(l->h);
            if (l->cfg.on_tick)
                l->cfg.on_tick(l->cfg.tick_ctx, l->h);
            next_tick += l->cfg.tick_ms;
            if (next_tick <= now) /* far behind (a long stall): no burst */
                next_tick = now + l->cfg.tick_ms;
        }
        int did = 0;
        int rc = rhost_round(l->h, &did);
        STAT_ADD(l, rounds, did ? 1 : 0);
        busy = did;
        if (rc == RAFT_ERR_IO) {
            atomic_store(&l->failed, 1);
            busy = 0;
            if (l->cfg.on_fail)
                l->cfg.on_fail(l->cfg.fail_ctx, "a durable write, snapshot or apply failed");
        }
    }
    return NULL;
}

static int env_persist(void *ctx, size_t n, const uint64_t *groups, raft_ready *const *rds,
                       size_t ncomp, const uint64_t *cg, const raft_snap_meta *comps)
{
    rloop *l = ctx;
    return rhost_store_persist(l->st, n, groups, rds, ncomp, cg, comps);
}

/* rloop_start: contract in rloop.h. */
int rloop_start(const rloop_config *cfg, raft_store *st, rloop **out)
{
    *out = NULL;
    if (!cfg || !cfg->node || !cfg->send || !cfg->tick_ms || !st)
        return RAFT_ERR_INVALID;
    rloop *l = calloc(1, sizeof *l);
    if (!l)
        return RAFT_ERR_NOMEM;
    l->cfg = *cfg;
    if (!l->cfg.max_batch)
        l->cfg.max_batch = 8u << 20;
    l->st = st;
    for (int i = 0; i < 256; i++)
        mp_buf_init(&l->out[i].buf);
    rhost_env env = { l, env_persist, env_send, env_flush, env_role, NULL };
    int rc = RAFT_ERR_NOMEM;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca))
        goto fail;
    int bad = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) || pthread_cond_init(&l->wake, &ca) ||
              pthread_cond_init(&l->called, NULL) || pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_destroy(&ca);
    if (bad)
        goto fail;
    rc = rhost_new(cfg->node, &cfg->host, &env, &l->h);
    if (rc != RAFT_OK)
        goto fail;
    if (pthread_create(&l->thread, NULL, loop_main, l)) {
        rc = RAFT_ERR_IO;
        goto fail;
    }
    l->started = 1;
    *out = l;
    return RAFT_OK;
fail:
    rhost_free(l->h);
    for (int i = 0; i < 256; i++)
        mp_buf_free(&l->out[i].buf);
    free(l);
    return rc;
}

/* rloop_stop: contract in rloop.h. */
void rloop_stop(rloop *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    /* what arrived after the loop's last look at its inbox */
    item *list = l->head;
    l->head = l->tail = NULL;
    fail_inbox(l, list, RHOST_GONE);
    rhost_free(l->h); /* pending proposals and reads: RHOST_GONE */
    for (int i = 0; i < 256; i++)
        mp_buf_free(&l->out[i].buf);
    pthread_cond_destroy(&l->wake);
    pthread_cond_destroy(&l->called);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* Queues it; returns 0, or -1 when the loop no longer takes work or, for a
 * received batch, when the inbox holds RLOOP_MAX_QUEUED bytes of them. */
static int enqueue(rloop *l, item *it)
{
    pthread_mutex_lock(&l->mu);
    bool batch = it->kind == IT_BATCH;
    if (l->stop || atomic_load(&l->failed) || (batch && l->queued + it->len > RLOOP_MAX_QUEUED)) {
        pthread_mutex_unlock(&l->mu);
        return -1;
    }
    if (batch)
        l->queued += it->len;
    if (l->tail)
        l->tail->next = it;
    else
        l->head = it;
    l->tail = it;
    pthread_cond_signal(&l->wake);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* A new item of kind with a copy of data[len]; NULL when out of memory. */
static item *item_new(int kind, const void *data, size_t len)
{
    item *it = calloc(1, sizeof *it);
    if (!it)
        return NULL;
    it->kind = kind;
    if (len) {
        it->data = malloc(len);
        if (!it->data) {
            free(it);
            return NULL;
        }
        memcpy(it->data, data, len);
        it->len = len;
    }
    return it;
}

/* rloop_call: contract in rloop.h. */
int rloop_call(rloop *l, int (*fn)(rhost *h, raft_store *st, void *arg), void *arg)
{
    call_wait w = { 0, 0 };
    item *it = item_new(IT_CALL, NULL, 0);
    if (!it)
        return RAFT_ERR_NOMEM;
    it->fn = fn;
    it->arg = arg;
    it->wait = &w;
    if (enqueue(l, it)) {
        free(it);
        return RAFT_ERR_IO;
    }
    pthread_mutex_lock(&l->mu);
    while (!w.done)
        pthread_cond_wait(&l->called, &l->mu);
    pthread_mutex_unlock(&l->mu);
    return w.result;
}

/* rloop_deliver: contract in rloop.h. */
void rloop_deliver(rloop *l, uint8_t from, const uint8_t *batch, size_t len)
{
    item *it = item_new(IT_BATCH, batch, len);
    if (!it)
        return;
    it->from = from;
    if (enqueue(l, it) == 0)
        return;
    STAT_ADD(l, dropped_in, 1);
    free(it->data);
    free(it);
}

static int submit(rloop *l, int kind, uint64_t group, const void *data, uint32_t len,
                  rloop_done_fn done, void *arg)
{
    if (!done)
        return RAFT_ERR_INVALID;
    item *it = item_new(kind, data, len);
    if (!it)
        return RAFT_ERR_NOMEM;
    it->group = group;
    it->done = done;
    it->arg = arg;
    if (enqueue(l, it)) {
        free(it->data);
        free(it);
        return RAFT_ERR_IO;
    }
    return RAFT_OK;
}

/* rloop_propose: contract in rloop.h. */
int rloop_propose(rloop *l, uint64_t group, const void *data, uint32_t len, rloop_done_fn done,
                  void *arg)
{
    return submit(l, IT_PROPOSE, group, data, len, done, arg);
}

/* rloop_read: contract in rloop.h. */
int rloop_read(rloop *l, uint64_t group, rloop_done_fn done, void *arg)
{
    return submit(l, IT_READ, group, NULL, 0, done, arg);
}

/* rloop_stats_get: contract in rloop.h. */
void rloop_stats_get(rloop *l, rloop_stats *out)
{
    out->rounds = __atomic_load_n(&l->st_.rounds, __ATOMIC_RELAXED);
    out->batches_out = __atomic_load_n(&l->st_.batches_out, __ATOMIC_RELAXED);
    out->bytes_out = __atomic_load_n(&l->st_.bytes_out, __ATOMIC_RELAXED);
    out->dropped_out = __atomic_load_n(&l->st_.dropped_out, __ATOMIC_RELAXED);
    out->batches_in = __atomic_load_n(&l->st_.batches_in, __ATOMIC_RELAXED);
    out->msgs_in = __atomic_load_n(&l->st_.msgs_in, __ATOMIC_RELAXED);
    out->dropped_in = __atomic_load_n(&l->st_.dropped_in, __ATOMIC_RELAXED);
}
