/*
 * sim_host.c — the simulated nodes.  Each node is an rhost (node/raft/host.c), the host code
 * every real node runs: the simulator feeds it ticks, messages, proposals, reads, membership
 * steps and transfers, and runs its rounds; everything else is the node's environment, defined
 * here:
 *   - rhost_env.persist: the node's disk model (sim_disk.c): one CRC-framed batch per round for
 *     every group (and, with --store, the same round through rhost_store_persist on leveldb).
 *     It also plans the round's crash: before the write (nothing written), torn (a prefix
 *     written; recovery must reject it whole), or a disk error — each returns -1, failing the
 *     round; after the write but before sending, or after sending but before applying, fail it
 *     through the phase hook (RHOST_PHASE_PERSISTED, RHOST_PHASE_SENT).  A nemesis aims at
 *     votes: a round that grants one may crash before its write (had the vote left the node,
 *     it could vote twice in a term), or right after it sent it (decided from what send saw).  A
 *     failed round is a crash: the rhost is freed, and the node restarts later from its disk,
 *     each group loaded with rhost_group_add;
 *   - rhost_env.send: the simulated network; on_role: leader bookkeeping and the election
 *     checks;
 *   - rhost_sm_ops: each replica's state machine, a few registers with client deduplication and
 *     a hash chained over the applied entries (state machine safety), its snapshots kept on the
 *     disk (the latest, up to 4 older ones while a transfer streams them, the staging area);
 *     reading a snapshot may fail (a fault): the chunk is not sent and the core resends it or
 *     restarts the transfer;
 *   - the cores' allocator counts every node's core memory, which must be back to zero once
 *     the host is freed.
 */
#include <stdlib.h>
#include <string.h>

#include "raft_codec.h"
#include "sim.h"

/* ---- allocator: counts the cores' memory per node ---- */
static void *acct_alloc(void *ctx, size_t n)
{
    sim_node *nd = ctx;
    void *p = malloc(n);
    if (p) {
        nd->live_bytes += (int64_t)n;
        nd->live_allocs++;
    }
    return p;
}
static void acct_free(void *ctx, void *p, size_t n)
{
    sim_node *nd = ctx;
    nd->live_bytes -= (int64_t)n;
    nd->live_allocs--;
    free(p);
}

/* ---- state machine encoding ---- */
#define CMD_LEN 28
#define RES_STALE 1 /* an apply's result code: the client gave this request up */

static size_t sm_encode(const sim_replica *r, int nkeys, uint8_t **out)
{
    size_t len = 8 + (size_t)nkeys * 8 + raft_dedup_encoded_size(&r->dedup);
    uint8_t *b = malloc(len);
    if (!b)
        abort();
    raft_put64(b, r->applied);
    for (int k = 0; k < nkeys; k++)
        raft_put64(b + 8 + 8 * k, r->kv[k]);
    raft_dedup_encode(&r->dedup, b + 8 + 8 * (size_t)nkeys);
    *out = b;
    return len;
}

static int sm_decode(sim_replica *r, int nkeys, const uint8_t *b, size_t len)
{
    memset(r->kv, 0, sizeof r->kv);
    raft_dedup_free(&r->dedup);
    if (len == 0)
        return 0;
    if (len < 8 + (size_t)nkeys * 8)
        return -1;
    for (int k = 0; k < nkeys; k++)
        r->kv[k] = raft_get64(b + 8 + 8 * k);
    size_t used;
    return raft_dedup_decode(&r->dedup, b + 8 + 8 * (size_t)nkeys, len - 8 - 8 * (size_t)nkeys,
                             &used);
}

/* ---- the state machine (rhost_sm_ops; sm is the sim_replica) ---- */

static uint64_t node_id(const sim_replica *r)
{
    return r->s->nodes[r->slot].id;
}

static int sm_apply(void *sm, const raft_entry *e, rhost_result *res)
{
    sim_replica *r = sm;
    sim *s = r->s;
    if (r->applied == 0) {
        /* the empty state is the bootstrap snapshot's (index 1; host.h),
         * also for a joining replica that persisted that snapshot's meta
         * but crashed before installing it */
        r->applied = 1;
        r->applied_chain = 1;
    }
    if (e->index != r->applied + 1) {
        sim_fail(s, "node %llu group %d: applies %llu after %llu", (unsigned long long)node_id(r),
                 r->g, (unsigned long long)e->index, (unsigned long long)r->applied);
        return -1;
    }
    sim_dent *x = sim_disk_at(&r->disk, e->index);
    uint64_t chain = x ? x->chain : sim_chain(r->applied_chain, e);
    sim_check_apply(s, r->g, node_id(r), e->index, e->term, chain);
    r->applied = e->index;
    r->applied_chain = chain;
    if (e->type != RAFT_ENTRY_NORMAL || e->len != CMD_LEN)
        return 0;
    uint64_t cid = raft_get64(e->data), seq = raft_get64(e->data + 8);
    uint32_t key = raft_get32(e->data + 16);
    uint64_t val = raft_get64(e->data + 20);
    if (cid == 0 || key >= (uint32_t)s->n_keys)
        return 0; /* barrier */
    int d = raft_dedup_check(&r->dedup, cid, seq, NULL);
    if (d == RAFT_DEDUP_NEW) {
        r->kv[key] = val;
        if (raft_dedup_record(&r->dedup, cid, seq, 0))
            abort();
    }
    res->code = d == RAFT_DEDUP_STALE ? RES_STALE : 0;
    return 0;
}

static int sm_snap_make(void *sm, uint64_t *index, uint64_t *size)
{
    sim_replica *r = sm;
    sim_snapfile f = { r->applied, 0, r->applied_chain, NULL };
    f.size = sm_encode(r, r->s->n_keys, &f.data);
    sim_disk_snap_replace(&r->disk, &f);
    *index = f.index;
    *size = f.size;
    return 0;
}

/* The bootstrap snapshot (index 1): the empty state, also for a replica
 * that holds no file of it (host.h). */
static size_t sm_empty(const sim *s, uint8_t **out)
{
    sim_replica z;
    memset(&z, 0, sizeof z);
    raft_dedup_init(&z.dedup);
    z.applied = 1;
    size_t len = sm_encode(&z, s->n_keys, out);
    raft_dedup_free(&z.dedup);
    return len;
}

static int sm_snap_read(void *sm, uint64_t index, uint64_t off, uint8_t *buf, uint32_t len)
{
    sim_replica *r = sm;
    const sim_snapfile *f = sim_disk_snapfile(&r->disk, index);
    uint8_t *empty = NULL;
    sim_snapfile e = { 1, 0, 1, NULL };
    if (!f && index == 1) {
        e.size = sm_empty(r->s, &empty);
        e.data = empty;
        f = &e;
    }
    int rc = -1; /* not held (any more): the core restarts the transfer */
    if (f && off <= f->size && len <= f->size - off) {
        memcpy(buf, f->data + off, len);
        rc = 0;
    }
    free(empty);
    /* a read error of the snapshot file (fault): the chunk is not sent */
    if (rc == 0 && r->s->faults_on && sim_chance(&r->s->rng, r->s->p_snap_read_err))
        rc = -1;
    return rc;
}

static int sm_snap_stage(void *sm, uint64_t index, uint64_t off, const uint8_t *p, uint32_t len)
{
    sim_replica *r = sm;
    sim_disk *d = &r->disk;
    if (off == 0) {
        free(d->staging);
        d->staging = NULL;
        d->staging_len = 0;
        d->staging_index = index;
    }
    if (d->staging_index != index || d->staging_len != off) {
        sim_fail(r->s, "node %llu group %d: snapshot chunk out of order",
                 (unsigned long long)node_id(r), r->g);
        return -1;
    }
    uint8_t *ns = realloc(d->staging, (size_t)(off + len) + 1);
    if (!ns)
        abort();
    if (len)
        memcpy(ns + off, p, len);
    d->staging = ns;
    d->staging_len = off + len;
    return 0;
}

static int sm_snap_install(void *sm, const raft_snap_meta *m)
{
    sim_replica *r = sm;
    sim *s = r->s;
    sim_disk *d = &r->disk;
    if (!d->staging || d->staging_index != m->index || d->staging_len != m->size) {
        sim_fail(s, "node %llu group %d: installs snapshot %llu without its bytes",
                 (unsigned long long)node_id(r), r->g, (unsigned long long)m->index);
        return -1;
    }
    uint64_t chain;
    if (!sim_committed_chain(s, r->g, m->index, &chain)) {
        sim_fail_as(s, SIM_V_COMMIT, "group %d: snapshot at uncommitted index %llu", r->g,
                    (unsigned long long)m->index);
        return -1;
    }
    free(d->sm.data);
    d->sm = (sim_snapfile){ m->index, m->size, chain, d->staging };
    d->staging = NULL;
    d->staging_len = 0;
    if (sm_decode(r, s->n_keys, d->sm.data, d->sm.size)) {
        sim_fail(s, "installed snapshot does not decode");
        return -1;
    }
    r->applied = m->index;
    r->applied_chain = chain;
    return 0;
}

static const rhost_sm_ops sim_sm_ops = { sm_apply,        sm_snap_make, sm_snap_read, sm_snap_stage,
                                         sm_snap_install, NULL,         NULL };

/* ---- the node's environment (rhost_env; ctx is the sim_node) ---- */

/* A round's planned crash (persist draws it). */
enum { CRASH_NONE, CRASH_BEFORE_SYNC, CRASH_TORN, CRASH_AFTER_SYNC, CRASH_AFTER_SEND };

/* Fails the round: sim_node_ready crashes the node once rhost_round returns. */
static int crash_req(sim_node *nd, const char *why, uint64_t down_ticks)
{
    nd->crash_why = why;
    nd->crash_down = down_ticks;
    return -1;
}

static int grants_vote(size_t n, raft_ready *const *rds)
{
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < rds[k]->n_msgs; i++)
            if (rds[k]->msgs[i].type == RAFT_MSG_VOTE_RESP && !rds[k]->msgs[i].reject)
                return 1;
    return 0;
}

static int env_persist(void *ctx, size_t n, const uint64_t *groups, raft_ready *const *rds,
                       size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps)
{
    sim_node *nd = ctx;
    sim *s = nd->s;
    nd->sent_vote = 0;
    nd->crash_mode = CRASH_NONE;
    if (s->faults_on && sim_chance(&s->rng, s->p_crash_round))
        nd->crash_mode = (int)sim_range(&s->rng, CRASH_BEFORE_SYNC, CRASH_AFTER_SEND);
    int disk_err = s->faults_on && sim_chance(&s->rng, s->p_disk_err);
    if (nd->crash_mode == CRASH_BEFORE_SYNC)
        return crash_req(nd, "before sync", 0);
    if (disk_err)
        return crash_req(nd, "disk write error", 0);
    /* nemesis: a round that grants a vote crashes before its write (the
     * vote must not have left the node: persisted before sent) */
    if (s->faults_on && s->p_vote_crash > 0 && grants_vote(n, rds) &&
        sim_chance(&s->rng, s->p_vote_crash / 2))
        return crash_req(nd, "nemesis: voting, before the write", 1);
    sim_buf b = { 0 };
    sim_disk_build_batch(s, n, groups, rds, ncomp, comp_groups, comps, &b);
    size_t wlen = b.n;
    if (nd->crash_mode == CRASH_TORN)
        wlen = (size_t)sim_range(&s->rng, 0, b.n - 1);
    int torn = sim_disk_apply_batch(s, nd, b.p, wlen);
    free(b.p);
    if (nd->crash_mode == CRASH_TORN) {
        if (!torn)
            sim_fail(s, "torn batch was not detected");
        return crash_req(nd, "torn write", 0);
    }
    if (torn) {
        sim_fail(s, "intact batch rejected");
        return -1;
    }
    if (sim_store_persist(s, nd->slot, n, groups, rds, ncomp, comp_groups, comps))
        return -1;
    for (size_t k = 0; k < n; k++)
        sim_check_commit(s, (int)groups[k], nd->id, &nd->rep[groups[k]].disk);
    return 0;
}

static void env_send(void *ctx, const raft_msg *m)
{
    sim_node *nd = ctx;
    if (m->type == RAFT_MSG_VOTE_RESP && !m->reject)
        nd->sent_vote = 1;
    sim_net_send(nd->s, nd->slot, m);
}

static int env_phase(void *ctx, int phase)
{
    sim_node *nd = ctx;
    sim *s = nd->s;
    if (phase == RHOST_PHASE_PERSISTED)
        return nd->crash_mode == CRASH_AFTER_SYNC ? crash_req(nd, "after sync, before send", 0) : 0;
    if (nd->crash_mode == CRASH_AFTER_SEND)
        return crash_req(nd, "after send, before apply", 0);
    if (s->faults_on && s->p_vote_crash > 0 && nd->sent_vote &&
        sim_chance(&s->rng, s->p_vote_crash))
        return crash_req(nd, "nemesis: right after voting", 1);
    return 0;
}

static void env_on_role(void *ctx, uint64_t group, int role, uint64_t leader, uint64_t term)
{
    sim_node *nd = ctx;
    sim *s = nd->s;
    int g = (int)group;
    sim_replica *r = &nd->rep[g];
    if (role == RAFT_LEADER && (r->role != RAFT_LEADER || r->term != term)) {
        s->st_elections++;
        sim_log(s, "group %d: node %llu leader of term %llu", g, (unsigned long long)nd->id,
                (unsigned long long)term);
        sim_check_leader(s, g, term, nd->id);
        if (s->faults_on && !nd->crash_at && sim_chance(&s->rng, s->p_young))
            nd->crash_at = s->now + sim_range(&s->rng, 1, 40);
        sim_check_completeness(s, g, nd->id, &r->disk);
    }
    if (role != r->role || term != r->term)
        sim_log(s, "group %d: node %llu role %d term %llu (leader %llu)", g,
                (unsigned long long)nd->id, role, (unsigned long long)term,
                (unsigned long long)rhost_node_of(leader));
    r->role = role;
    r->term = term;
}

/* ---- nodes ---- */

/* Loads group g's replica from its disk into the node's host. */
static int replica_load(sim *s, int slot, int g)
{
    sim_node *nd = &s->nodes[slot];
    sim_replica *r = &nd->rep[g];
    sim_disk *d = &r->disk;
    raft_dedup_init(&r->dedup);
    memset(r->kv, 0, sizeof r->kv);
    r->applied = 0;
    r->applied_chain = 0;
    if (d->sm.data) { /* the state machine restarts from its latest snapshot */
        if (sm_decode(r, s->n_keys, d->sm.data, d->sm.size)) {
            sim_fail(s, "node %llu group %d: snapshot decode failed", (unsigned long long)nd->id,
                     g);
            return -1;
        }
        r->applied = d->sm.index;
        r->applied_chain = d->sm.chain;
    }
    r->role = RAFT_FOLLOWER;
    r->term = d->hs.term;
    raft_entry *es = NULL;
    if (d->n) {
        es = malloc(d->n * sizeof *es);
        if (!es)
            abort();
        for (size_t i = 0; i < d->n; i++)
            es[i] = d->log[i].e;
    }
    int rc = rhost_group_add(nd->h, (uint64_t)g, r->id, &d->snap, &d->hs, es, d->n, r->applied,
                             &sim_sm_ops, r);
    free(es);
    if (rc != RAFT_OK) {
        sim_fail(s, "node %llu group %d: restart failed: %s", (unsigned long long)nd->id, g,
                 raft_strerror(rc));
        return -1;
    }
    return 0;
}

/* Starts the node's host and loads every group it hosts. */
static int host_start(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    rhost_config cfg;
    rhost_config_default(&cfg);
    cfg.election_ticks = 10;
    cfg.heartbeat_ticks = 2;
    cfg.max_inflight = s->max_inflight;
    cfg.max_msg_entries = s->max_msg_entries;
    cfg.snap_chunk = s->snap_chunk;
    cfg.compact_entries = s->compact_every;
    cfg.seed = s->seed * 1000003u + nd->id * 7919u + nd->incarnation * 104729u;
    cfg.plants = s->o.plants;
    cfg.alloc = (raft_alloc){ acct_alloc, acct_free, nd };
    rhost_env env = { .ctx = nd,
                      .persist = env_persist,
                      .send = env_send,
                      .on_role = env_on_role,
                      .phase = env_phase };
    int rc = rhost_new((uint8_t)nd->id, &cfg, &env, &nd->h);
    if (rc != RAFT_OK) {
        sim_fail(s, "node %llu: rhost_new: %s", (unsigned long long)nd->id, raft_strerror(rc));
        return -1;
    }
    for (int g = 0; g < s->o.groups; g++)
        if (nd->rep[g].hosted && replica_load(s, slot, g))
            return -1;
    nd->dirty = 1;
    return 0;
}

/* Frees the node's host: pending completions die with it (a crashed node
 * answers nobody), and every core must have returned its memory. */
static void host_stop(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    nd->crashing = 1;
    rhost_free(nd->h);
    nd->h = NULL;
    nd->crashing = 0;
    if (nd->live_bytes != 0 || nd->live_allocs != 0)
        sim_fail(s, "node %llu: the cores leaked %lld bytes in %lld blocks",
                 (unsigned long long)nd->id, (long long)nd->live_bytes, (long long)nd->live_allocs);
}

/* sim_node_add: contract in sim.h. */
int sim_node_add(sim *s, uint64_t id, int group_mask, int bootstrap)
{
    if (s->n_nodes >= SIM_MAX_NODES)
        return -1;
    int slot = s->n_nodes++;
    sim_node *nd = &s->nodes[slot];
    memset(nd, 0, sizeof *nd);
    nd->s = s;
    nd->slot = slot;
    nd->id = id;
    nd->used = 1;
    nd->alive = 1;
    nd->phase = (uint32_t)sim_range(&s->rng, 0, SIM_TICK - 1);
    if (sim_store_open(s, slot))
        return -1;
    for (int g = 0; g < s->o.groups; g++) {
        if (!(group_mask & (1 << g)))
            continue;
        sim_replica *r = &nd->rep[g];
        r->hosted = 1;
        r->s = s;
        r->slot = slot;
        r->g = g;
        r->id = rhost_first_id((uint8_t)id);
        r->created_tick = sim_tick_now(s);
        if (bootstrap) {
            sim_disk *d = &r->disk;
            d->snap.index = 1;
            d->snap.term = 1;
            for (int v = 0; v < s->o.replicas; v++) {
                d->snap.conf.m[v].id = rhost_first_id((uint8_t)(v + 1));
                d->snap.conf.m[v].voter = 1;
            }
            d->snap.conf.n = (uint32_t)s->o.replicas;
            d->snap.conf.max_id = rhost_first_id((uint8_t)s->o.replicas);
            /* the empty state, as the bootstrap snapshot's file */
            sim_snapfile f = { 1, 0, 1, NULL };
            f.size = sm_empty(s, &f.data);
            d->sm = f;
            d->snap.size = f.size;
            d->snap_chain = 1;
            d->hs.term = 1;
        }
        sim_store_bootstrap(s, slot, g, &r->disk);
    }
    if (host_start(s, slot))
        return -1;
    return slot;
}

/* sim_node_crash: contract in sim.h. */
void sim_node_crash(sim *s, int slot, const char *why)
{
    sim_node_crash_for(s, slot, why, sim_range(&s->rng, 1, s->restart_max));
}

/* sim_node_crash_for: contract in sim.h. */
void sim_node_crash_for(sim *s, int slot, const char *why, uint64_t down_ticks)
{
    sim_node *nd = &s->nodes[slot];
    if (!nd->alive)
        return;
    sim_log(s, "crash node %llu (%s)", (unsigned long long)nd->id, why);
    s->st_crashes++;
    host_stop(s, slot);
    for (int g = 0; g < s->o.groups; g++) {
        sim_replica *r = &nd->rep[g];
        if (!r->hosted)
            continue;
        raft_dedup_free(&r->dedup);
        sim_disk_prune_old(&r->disk, 0); /* no transfers after a restart */
    }
    nd->alive = 0;
    sim_store_close(s, slot);
    nd->crash_at = 0;
    nd->restart_at = sim_tick_now(s) + (down_ticks ? down_ticks : 1);
}

/* sim_node_restart: contract in sim.h. */
int sim_node_restart(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    if (nd->alive)
        return 0;
    sim_log(s, "restart node %llu", (unsigned long long)nd->id);
    nd->alive = 1;
    nd->restart_at = 0;
    nd->incarnation++;
    if (sim_store_open(s, slot))
        return -1;
    sim_store_verify(s, slot);
    return host_start(s, slot);
}

/* sim_replica_drop: contract in sim.h. */
void sim_replica_drop(sim *s, int slot, int g)
{
    sim_node *nd = &s->nodes[slot];
    sim_replica *r = &nd->rep[g];
    if (!r->hosted)
        return;
    sim_log(s, "drop replica node %llu group %d", (unsigned long long)nd->id, g);
    if (nd->h) {
        int rc = rhost_group_remove(nd->h, (uint64_t)g);
        if (rc != RAFT_OK)
            sim_fail(s, "node %llu: rhost_group_remove(%d): %s", (unsigned long long)nd->id, g,
                     raft_strerror(rc));
        raft_dedup_free(&r->dedup);
    }
    sim_disk_free(&r->disk);
    r->hosted = 0;
}

/* sim_node_free: contract in sim.h. */
void sim_node_free(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    if (!s->failed && nd->alive)
        sim_store_verify(s, slot);
    if (nd->h)
        host_stop(s, slot);
    sim_store_destroy(s, slot);
    for (int g = 0; g < SIM_MAX_GROUPS; g++) {
        if (!nd->rep[g].hosted)
            continue;
        raft_dedup_free(&nd->rep[g].dedup);
        sim_disk_free(&nd->rep[g].disk);
        nd->rep[g].hosted = 0;
    }
    nd->used = 0;
}

/* sim_leader: contract in sim.h. */
const raft_group *sim_leader(sim *s, int g, int *slot)
{
    const raft_group *best = NULL;
    for (int i = 0; i < s->n_nodes; i++) {
        sim_node *nd = &s->nodes[i];
        if (!nd->used || !nd->alive || !nd->h || !nd->rep[g].hosted)
            continue;
        const raft_group *rg = rhost_group_core(nd->h, (uint64_t)g);
        if (!rg || raft_role(rg) != RAFT_LEADER)
            continue;
        if (!best || raft_term(rg) > raft_term(best)) {
            best = rg;
            *slot = i;
        }
    }
    return best;
}

/* The node in slot if it is up and hosts group g, else NULL. */
static sim_node *live_node(sim *s, int slot, int g)
{
    if (slot < 0 || g < 0 || g >= s->o.groups)
        return NULL;
    sim_node *nd = &s->nodes[slot];
    if (!nd->used || !nd->alive || !nd->h || !nd->rep[g].hosted)
        return NULL;
    return nd;
}

/* Delivers a message to a node (dropped if it is down or lacks the group). */
void sim_deliver_msg(sim *s, int slot, const raft_msg *m)
{
    if (m->group >= (uint64_t)s->o.groups)
        return;
    sim_node *nd = live_node(s, slot, (int)m->group);
    if (!nd)
        return;
    int rc = rhost_step(nd->h, m);
    if (rc != RAFT_OK)
        sim_fail(s, "rhost_step: %s", raft_strerror(rc));
    nd->dirty = 1;
}

/* ---- client requests: proposals and reads through the host ---- */

/* A client request waiting on the host (the completion's arg; freed by
 * the completion, which the host runs exactly once). */
typedef struct sim_call {
    sim *s;
    int slot;
    sim_creq q;
} sim_call;

static void on_done(void *arg, int err, uint64_t index, rhost_result *res)
{
    sim_call *c = arg;
    sim *s = c->s;
    sim_node *nd = &s->nodes[c->slot];
    const sim_creq *q = &c->q;
    (void)index;
    if (res)
        free(res->reply);
    if (nd->crashing || q->op == OP_BARRIER) {
        /* a crashed node answers nobody; barriers have no client */
    } else if (err != RAFT_OK) {
        /* RHOST_LOST (certainly not applied), RHOST_GONE (group removed, or
         * skipped by a snapshot: unknown), NOT_LEADER (reads): the client
         * retries with the same (client, seq), so a put applies once */
        sim_client_reply(s, q->group, q->client, q->seq, CR_RETRY, 0, 0);
    } else if (q->op == OP_GET) {
        sim_client_reply(s, q->group, q->client, q->seq, CR_OK, 0, nd->rep[q->group].kv[q->key]);
    } else if (res && res->code != RES_STALE) {
        sim_client_reply(s, q->group, q->client, q->seq, CR_OK, 0, 0);
    }
    free(c);
}

static void encode_cmd(uint8_t *b, uint64_t client, uint64_t seq, uint32_t key, uint64_t value)
{
    raft_put64(b, client);
    raft_put64(b + 8, seq);
    raft_put32(b + 16, key);
    raft_put64(b + 20, value);
}

/* Delivers a client request to a node. */
void sim_deliver_creq(sim *s, int slot, const sim_creq *q)
{
    sim_node *nd = live_node(s, slot, q->group);
    if (!nd)
        return;
    sim_replica *r = &nd->rep[q->group];
    const raft_group *core = rhost_group_core(nd->h, (uint64_t)q->group);
    uint64_t lead = raft_leader(core);
    if (raft_role(core) != RAFT_LEADER) {
        sim_client_reply(s, q->group, q->client, q->seq, CR_RETRY, rhost_node_of(lead), 0);
        return;
    }
    nd->dirty = 1;
    uint64_t cid = (uint64_t)q->group * SIM_MAX_CLIENTS + (uint64_t)q->client + 1;
    uint8_t b[CMD_LEN];
    if (q->op == OP_PUT) {
        uint64_t res;
        int d = raft_dedup_check(&r->dedup, cid, q->seq, &res);
        if (d == RAFT_DEDUP_DUP) {
            sim_client_reply(s, q->group, q->client, q->seq, CR_OK, 0, 0);
            return;
        }
        if (d == RAFT_DEDUP_STALE)
            return;
        encode_cmd(b, cid, q->seq, q->key, q->value);
    } else {
        encode_cmd(b, 0, 0, 0, 0); /* a barrier (GET sends nothing) */
    }
    sim_call *c = malloc(sizeof *c);
    if (!c)
        abort();
    c->s = s;
    c->slot = slot;
    c->q = *q;
    int rc = q->op == OP_GET
                 ? rhost_read(nd->h, (uint64_t)q->group, on_done, c, &lead)
                 : rhost_propose(nd->h, (uint64_t)q->group, b, CMD_LEN, on_done, c, &lead);
    if (rc != RAFT_OK) {
        free(c);
        if (q->op != OP_BARRIER)
            sim_client_reply(s, q->group, q->client, q->seq, CR_RETRY, rhost_node_of(lead), 0);
    }
}

/* sim_node_ready: contract in sim.h. */
int sim_node_ready(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    if (!nd->used || !nd->alive || !nd->dirty)
        return 0;
    nd->dirty = 0;
    nd->crash_why = NULL;
    nd->crash_mode = CRASH_NONE;
    int did = 0;
    int rc = rhost_round(nd->h, &did);
    if (rc != RAFT_OK) {
        if (rc == RAFT_ERR_IO && nd->crash_why)
            sim_node_crash_for(s, slot, nd->crash_why,
                               nd->crash_down ? nd->crash_down
                                              : sim_range(&s->rng, 1, s->restart_max));
        else
            sim_fail(s, "node %llu: round failed: %s", (unsigned long long)nd->id,
                     raft_strerror(rc));
        return 1;
    }
    /* another round next: it persists a compaction this one queued */
    nd->dirty = did;
    for (int g = 0; g < s->o.groups; g++) {
        sim_disk *d = &nd->rep[g].disk;
        if (nd->rep[g].hosted && d->n_old)
            sim_disk_prune_old(d, raft_snap_pinned(rhost_group_core(nd->h, (uint64_t)g)));
    }
    return did;
}
