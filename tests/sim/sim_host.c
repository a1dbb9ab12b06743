/*
 * sim_host.c — the simulated hosts (their disks are in sim_disk.c).  Each node hosts replicas of
 * several groups and drives their cores exactly as the ready-set contract says: one ready round per
 * node covers every group; the round's durable writes form one CRC-framed batch (persisted,
 * possibly torn, or failed by a disk error), then messages are sent, then committed entries are
 * applied to the key-value state machine (with client deduplication) and reads answered, then each
 * core is advanced.  A crash loses everything volatile: the core, the state machine, pending client
 * work; restart rebuilds from the disk model (snapshot + hard state + log) and replays committed
 * entries.
 */
#include <stdlib.h>
#include <string.h>

#include "raft_codec.h"
#include "sim.h"

/* ---- allocator: counts the core's memory per replica ---- */
static void *acct_alloc(void *ctx, size_t n)
{
    sim_replica *r = ctx;
    void *p = malloc(n);
    if (p) {
        r->live_bytes += (int64_t)n;
        r->live_allocs++;
    }
    return p;
}
static void acct_free(void *ctx, void *p, size_t n)
{
    sim_replica *r = ctx;
    r->live_bytes -= (int64_t)n;
    r->live_allocs--;
    free(p);
}

/* ---- state machine encoding ---- */
#define CMD_LEN 28

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

/* ---- disk model ---- */
/* ---- replicas ---- */
static void make_cfg(sim *s, int slot, int g, raft_config *cfg)
{
    sim_node *nd = &s->nodes[slot];
    raft_config_default(cfg, nd->id, (uint64_t)g);
    cfg->election_ticks = 10;
    cfg->heartbeat_ticks = 2;
    cfg->max_inflight = s->max_inflight;
    cfg->max_msg_entries = s->max_msg_entries;
    cfg->snap_chunk = s->snap_chunk;
    cfg->seed = s->seed * 1000003u + nd->id * 7919u + (uint64_t)g * 31u + nd->incarnation * 104729u;
    cfg->plants = s->o.plants;
    cfg->alloc.alloc = acct_alloc;
    cfg->alloc.free = acct_free;
    cfg->alloc.ctx = &nd->rep[g];
}

static int replica_start(sim *s, int slot, int g)
{
    sim_replica *r = &s->nodes[slot].rep[g];
    sim_disk *d = &r->disk;
    raft_config cfg;
    make_cfg(s, slot, g, &cfg);
    int rc = raft_group_new(&cfg, &d->snap, &d->hs, d->snap.index, &r->rg);
    for (size_t i = 0; rc == RAFT_OK && i < d->n; i++)
        rc = raft_load_entry(r->rg, &d->log[i].e);
    if (rc == RAFT_OK)
        rc = raft_load_done(r->rg);
    if (rc) {
        sim_fail(s, "node %llu group %d: restart failed: %s", (unsigned long long)s->nodes[slot].id,
                 g, raft_strerror(rc));
        return -1;
    }
    if (sm_decode(r, s->n_keys, d->snap_data, d->snap.size)) {
        sim_fail(s, "node %llu group %d: snapshot decode failed",
                 (unsigned long long)s->nodes[slot].id, g);
        return -1;
    }
    r->applied = d->snap.index;
    r->applied_chain = d->snap_chain;
    r->role = RAFT_FOLLOWER;
    r->term = d->hs.term;
    r->n_reads = r->n_puts = 0;
    r->dirty = 1;
    return 0;
}

static void replica_stop(sim *s, int slot, int g)
{
    sim_replica *r = &s->nodes[slot].rep[g];
    raft_group_free(r->rg);
    r->rg = NULL;
    if (r->live_bytes != 0 || r->live_allocs != 0)
        sim_fail(s, "node %llu group %d: core leaked %lld bytes in %lld blocks",
                 (unsigned long long)s->nodes[slot].id, g, (long long)r->live_bytes,
                 (long long)r->live_allocs);
    raft_dedup_free(&r->dedup);
    r->n_reads = r->n_puts = 0;
    sim_disk_prune_old(&r->disk, 0); /* no transfers after a restart */
    free(r->disk.staging);           /* a partial transfer restarts from zero */
    r->disk.staging = NULL;
    r->disk.staging_len = r->disk.staging_index = 0;
}

/* Creates node `id` hosting the groups in group_mask.  bootstrap: the
 * initial members (snapshot at index 1 with voters 1..replicas); otherwise
 * an empty replica that joins as a learner.  Returns the slot or -1. */
int sim_node_add(sim *s, uint64_t id, int group_mask, int bootstrap)
{
    if (s->n_nodes >= SIM_MAX_NODES)
        return -1;
    int slot = s->n_nodes++;
    sim_node *nd = &s->nodes[slot];
    memset(nd, 0, sizeof *nd);
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
        r->created_tick = sim_tick_now(s);
        raft_dedup_init(&r->dedup);
        if (bootstrap) {
            sim_disk *d = &r->disk;
            d->snap.index = 1;
            d->snap.term = 1;
            for (int v = 0; v < s->o.replicas; v++) {
                d->snap.conf.m[v].id = (uint64_t)v + 1;
                d->snap.conf.m[v].voter = 1;
            }
            d->snap.conf.n = (uint32_t)s->o.replicas;
            d->snap.conf.max_id = (uint64_t)s->o.replicas;
            r->applied = 1;
            d->snap.size = sm_encode(r, s->n_keys, &d->snap_data);
            d->snap_chain = 1;
            d->hs.term = 1;
        }
        sim_store_bootstrap(s, slot, g, &r->disk);
        if (replica_start(s, slot, g))
            return -1;
    }
    return slot;
}

/* Crashes the node: everything not on the disk model is lost. */
void sim_node_crash(sim *s, int slot, const char *why)
{
    sim_node_crash_for(s, slot, why, sim_range(&s->rng, 1, s->restart_max));
}

/* Crashes the node; it restarts down_ticks later (while faults run). */
void sim_node_crash_for(sim *s, int slot, const char *why, uint64_t down_ticks)
{
    sim_node *nd = &s->nodes[slot];
    if (!nd->alive)
        return;
    sim_log(s, "crash node %llu (%s)", (unsigned long long)nd->id, why);
    s->st_crashes++;
    for (int g = 0; g < s->o.groups; g++)
        if (nd->rep[g].hosted)
            replica_stop(s, slot, g);
    nd->alive = 0;
    sim_store_close(s, slot);
    nd->crash_at = 0;
    nd->restart_at = sim_tick_now(s) + (down_ticks ? down_ticks : 1);
}

/* Restarts a crashed node from its disk.  Returns 0 or -1. */
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
    for (int g = 0; g < s->o.groups; g++) {
        if (!nd->rep[g].hosted)
            continue;
        raft_dedup_init(&nd->rep[g].dedup);
        if (replica_start(s, slot, g))
            return -1;
    }
    return 0;
}

/* Removes group g's replica from the node (decommissioned member). */
void sim_replica_drop(sim *s, int slot, int g)
{
    sim_replica *r = &s->nodes[slot].rep[g];
    if (!r->hosted)
        return;
    sim_log(s, "drop replica node %llu group %d", (unsigned long long)s->nodes[slot].id, g);
    if (r->rg)
        replica_stop(s, slot, g);
    sim_disk_free(&r->disk);
    r->hosted = 0;
}

/* Frees everything of a node at the end of a run. */
void sim_node_free(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    if (!s->failed && nd->alive)
        sim_store_verify(s, slot);
    sim_store_destroy(s, slot);
    for (int g = 0; g < SIM_MAX_GROUPS; g++) {
        if (!nd->rep[g].hosted)
            continue;
        if (nd->rep[g].rg)
            replica_stop(s, slot, g);
        raft_dedup_free(&nd->rep[g].dedup);
        sim_disk_free(&nd->rep[g].disk);
        nd->rep[g].hosted = 0;
    }
    nd->used = 0;
}

/* Returns the alive leader of group g with the highest term (NULL if none);
 * *slot gets its node slot. */
raft_group *sim_leader(sim *s, int g, int *slot)
{
    raft_group *best = NULL;
    for (int i = 0; i < s->n_nodes; i++) {
        sim_node *nd = &s->nodes[i];
        if (!nd->used || !nd->alive || !nd->rep[g].hosted || !nd->rep[g].rg)
            continue;
        raft_group *rg = nd->rep[g].rg;
        if (raft_role(rg) != RAFT_LEADER)
            continue;
        if (!best || raft_term(rg) > raft_term(best)) {
            best = rg;
            *slot = i;
        }
    }
    return best;
}

static sim_replica *live_replica(sim *s, int slot, int g)
{
    if (slot < 0 || g < 0 || g >= s->o.groups)
        return NULL;
    sim_node *nd = &s->nodes[slot];
    if (!nd->used || !nd->alive || !nd->rep[g].hosted || !nd->rep[g].rg)
        return NULL;
    return &nd->rep[g];
}

/* Delivers a message to a node (dropped if it is down or lacks the group). */
void sim_deliver_msg(sim *s, int slot, const raft_msg *m)
{
    if (m->group >= (uint64_t)s->o.groups)
        return;
    sim_replica *r = live_replica(s, slot, (int)m->group);
    if (!r)
        return;
    int rc = raft_step(r->rg, m);
    if (rc && rc != RAFT_ERR_INVALID)
        sim_fail(s, "raft_step: %s", raft_strerror(rc));
    r->dirty = 1;
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
    sim_replica *r = live_replica(s, slot, q->group);
    if (!r)
        return;
    uint64_t lead = raft_leader(r->rg);
    if (raft_role(r->rg) != RAFT_LEADER) {
        sim_client_reply(s, q->group, q->client, q->seq, CR_RETRY, lead, 0);
        return;
    }
    r->dirty = 1;
    uint64_t cid = (uint64_t)q->group * SIM_MAX_CLIENTS + (uint64_t)q->client + 1;
    if (q->op == OP_BARRIER) {
        uint8_t b[CMD_LEN];
        encode_cmd(b, 0, 0, 0, 0);
        (void)raft_propose(r->rg, b, CMD_LEN, NULL);
        return;
    }
    if (q->op == OP_PUT) {
        uint64_t res;
        int d = raft_dedup_check(&r->dedup, cid, q->seq, &res);
        if (d == RAFT_DEDUP_DUP) {
            sim_client_reply(s, q->group, q->client, q->seq, CR_OK, 0, 0);
            return;
        }
        if (d == RAFT_DEDUP_STALE)
            return;
        uint8_t b[CMD_LEN];
        encode_cmd(b, cid, q->seq, q->key, q->value);
        int rc = raft_propose(r->rg, b, CMD_LEN, NULL);
        if (rc) {
            sim_client_reply(s, q->group, q->client, q->seq, CR_RETRY, lead, 0);
            return;
        }
        if (r->n_puts == 64) {
            memmove(r->puts, r->puts + 1, 63 * sizeof r->puts[0]);
            r->n_puts--;
        }
        r->puts[r->n_puts].client = q->client;
        r->puts[r->n_puts].seq = q->seq;
        r->n_puts++;
        return;
    }
    /* OP_GET: ReadIndex */
    if (r->n_reads == 64) {
        sim_client_reply(s, q->group, q->client, q->seq, CR_RETRY, lead, 0);
        return;
    }
    uint64_t ctx = ++s->next_ctx;
    int rc = raft_read_index(r->rg, ctx);
    if (rc) {
        sim_client_reply(s, q->group, q->client, q->seq, CR_RETRY, lead, 0);
        return;
    }
    sim_pread *p = &r->reads[r->n_reads++];
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->client = q->client;
    p->seq = q->seq;
    p->key = q->key;
}

static void reply_puts(sim *s, int g, sim_replica *r, uint64_t cid, uint64_t seq)
{
    for (int i = 0; i < r->n_puts; i++) {
        uint64_t pc = (uint64_t)g * SIM_MAX_CLIENTS + (uint64_t)r->puts[i].client + 1;
        if (pc == cid && r->puts[i].seq == seq) {
            sim_client_reply(s, g, r->puts[i].client, seq, CR_OK, 0, 0);
            r->puts[i] = r->puts[--r->n_puts];
            i--;
        }
    }
}

static void apply_entry(sim *s, int g, sim_node *nd, const raft_entry *e)
{
    sim_replica *r = &nd->rep[g];
    if (e->index != r->applied + 1) {
        sim_fail(s, "node %llu group %d: applies %llu after %llu", (unsigned long long)nd->id, g,
                 (unsigned long long)e->index, (unsigned long long)r->applied);
        return;
    }
    sim_dent *x = sim_disk_at(&r->disk, e->index);
    uint64_t chain = x ? x->chain : sim_chain(r->applied_chain, e);
    sim_check_apply(s, g, nd->id, e->index, e->term, chain);
    r->applied = e->index;
    r->applied_chain = chain;
    if (e->type != RAFT_ENTRY_NORMAL || e->len != CMD_LEN)
        return;
    uint64_t cid = raft_get64(e->data), seq = raft_get64(e->data + 8);
    uint32_t key = raft_get32(e->data + 16);
    uint64_t val = raft_get64(e->data + 20);
    if (cid == 0 || key >= (uint32_t)s->n_keys)
        return; /* barrier */
    int d = raft_dedup_check(&r->dedup, cid, seq, NULL);
    if (d == RAFT_DEDUP_NEW) {
        r->kv[key] = val;
        if (raft_dedup_record(&r->dedup, cid, seq, 0))
            abort();
    }
    if (d != RAFT_DEDUP_STALE)
        reply_puts(s, g, r, cid, seq);
}

static void answer_reads(sim *s, int g, sim_replica *r)
{
    for (int i = 0; i < r->n_reads; i++) {
        sim_pread *p = &r->reads[i];
        if (!p->ready || p->index > r->applied)
            continue;
        sim_client_reply(s, g, p->client, p->seq, CR_OK, 0, r->kv[p->key]);
        r->reads[i] = r->reads[--r->n_reads];
        i--;
    }
}

static void maybe_compact(sim *s, int g, sim_node *nd)
{
    sim_replica *r = &nd->rep[g];
    sim_disk *d = &r->disk;
    if (r->applied < d->snap.index + s->compact_every)
        return;
    uint8_t *blob;
    size_t len = sm_encode(r, s->n_keys, &blob);
    int rc = raft_compact(r->rg, r->applied, len);
    if (rc) {
        free(blob);
        sim_fail(s, "raft_compact: %s", raft_strerror(rc));
        return;
    }
    /* one atomic durable step: new snapshot, entries up to it dropped; the
     * old snapshot is kept while a transfer streams it (at most 4 kept: a
     * transfer whose snapshot is gone stalls and restarts with a newer one) */
    uint64_t pinned = raft_snap_pinned(r->rg);
    if (pinned && pinned <= d->snap.index && d->snap_data) {
        if (d->n_old == 4) {
            free(d->old[0].data);
            memmove(&d->old[0], &d->old[1], 3 * sizeof d->old[0]);
            d->n_old--;
        }
        d->old[d->n_old].index = d->snap.index;
        d->old[d->n_old].size = d->snap.size;
        d->old[d->n_old].data = d->snap_data;
        d->n_old++;
    } else {
        free(d->snap_data);
    }
    sim_disk_prune_old(d, pinned);
    d->snap_data = blob;
    d->snap = *raft_snap_meta_get(r->rg);
    d->snap_chain = r->applied_chain;
    sim_disk_drop_prefix(d, d->snap.index);
    sim_store_compact(s, (int)(nd - s->nodes), g, &d->snap);
    r->dirty = 1;
}

/* Runs one ready round for the node; returns 1 if it did anything. */
int sim_node_ready(sim *s, int slot)
{
    sim_node *nd = &s->nodes[slot];
    if (!nd->used || !nd->alive)
        return 0;
    raft_ready rd[SIM_MAX_GROUPS];
    int has[SIM_MAX_GROUPS] = { 0 }, any = 0;
    for (int g = 0; g < s->o.groups; g++) {
        sim_replica *r = &nd->rep[g];
        if (!r->hosted || !r->rg || !r->dirty)
            continue;
        r->dirty = 0;
        has[g] = raft_ready_get(r->rg, &rd[g]);
        any |= has[g];
    }
    if (!any)
        return 0;
    int mode = 0;
    if (s->faults_on && sim_chance(&s->rng, s->p_crash_round))
        mode = (int)sim_range(&s->rng, 1, 4);
    int disk_err = s->faults_on && sim_chance(&s->rng, s->p_disk_err);
    if (mode == 1) { /* crash before the write reached the disk */
        sim_node_crash(s, slot, "before sync");
        return 1;
    }
    if (disk_err) {
        sim_node_crash(s, slot, "disk write error");
        return 1;
    }
    sim_buf b = { 0 };
    sim_disk_build_batch(s, rd, has, &b);
    size_t wlen = b.n;
    if (mode == 2)
        wlen = (size_t)sim_range(&s->rng, 0, b.n - 1); /* torn */
    int torn = sim_disk_apply_batch(s, nd, b.p, wlen);
    free(b.p);
    if (mode == 2) {
        if (!torn)
            sim_fail(s, "torn batch was not detected");
        sim_node_crash(s, slot, "torn write");
        return 1;
    }
    if (torn) {
        sim_fail(s, "intact batch rejected");
        return 1;
    }
    sim_store_ready(s, slot, rd, has);
    for (int g = 0; g < s->o.groups; g++)
        if (has[g])
            sim_check_commit(s, g, nd->id, &nd->rep[g].disk);
    if (mode == 3) {
        sim_node_crash(s, slot, "after sync, before send");
        return 1;
    }
    for (int g = 0; g < s->o.groups; g++)
        for (size_t i = 0; has[g] && i < rd[g].n_msgs; i++)
            sim_net_send(s, slot, &rd[g].msgs[i]);
    if (mode == 4) {
        sim_node_crash(s, slot, "after send, before apply");
        return 1;
    }
    if (s->faults_on && s->p_vote_crash > 0) {
        int voted = 0;
        for (int g = 0; g < s->o.groups; g++)
            for (size_t i = 0; has[g] && i < rd[g].n_msgs; i++)
                voted |= rd[g].msgs[i].type == RAFT_MSG_VOTE_RESP && !rd[g].msgs[i].reject;
        if (voted && sim_chance(&s->rng, s->p_vote_crash)) {
            sim_node_crash_for(s, slot, "nemesis: right after voting", 1);
            return 1;
        }
    }
    for (int g = 0; g < s->o.groups; g++) {
        if (!has[g])
            continue;
        sim_replica *r = &nd->rep[g];
        raft_ready *x = &rd[g];
        if (x->role == RAFT_LEADER && (r->role != RAFT_LEADER || r->term != x->term)) {
            s->st_elections++;
            sim_log(s, "group %d: node %llu leader of term %llu", g, (unsigned long long)nd->id,
                    (unsigned long long)x->term);
            sim_check_leader(s, g, x->term, nd->id);
            if (s->faults_on && !nd->crash_at && sim_chance(&s->rng, s->p_young))
                nd->crash_at = s->now + sim_range(&s->rng, 1, 40);
            sim_check_completeness(s, g, nd->id, &r->disk);
        }
        if (x->role != r->role || x->term != r->term)
            sim_log(s, "group %d: node %llu role %d term %llu (leader %llu)", g,
                    (unsigned long long)nd->id, x->role, (unsigned long long)x->term,
                    (unsigned long long)x->leader);
        r->role = x->role;
        r->term = x->term;
        if (x->has_snap) {
            if (sm_decode(r, s->n_keys, r->disk.snap_data, r->disk.snap.size))
                sim_fail(s, "installed snapshot does not decode");
            r->applied = r->disk.snap.index;
            r->applied_chain = r->disk.snap_chain;
        }
        for (size_t i = 0; i < x->n_committed; i++)
            apply_entry(s, g, nd, &x->committed[i]);
        for (size_t i = 0; i < x->n_reads; i++) {
            for (int k = 0; k < r->n_reads; k++) {
                sim_pread *p = &r->reads[k];
                if (p->ctx != x->reads[i].ctx)
                    continue;
                if (x->reads[i].ok) {
                    p->ready = 1;
                    p->index = x->reads[i].index;
                } else {
                    sim_client_reply(s, g, p->client, p->seq, CR_RETRY, 0, 0);
                    r->reads[k] = r->reads[--r->n_reads];
                }
                break;
            }
        }
        answer_reads(s, g, r);
        if (raft_advance(r->rg, x))
            sim_fail(s, "raft_advance failed");
        if (r->disk.n_old)
            sim_disk_prune_old(&r->disk, raft_snap_pinned(r->rg));
        maybe_compact(s, g, nd);
    }
    return 1;
}
