/*
 * host.c — drives the Raft groups of one node by the ready-set contract
 * (host.h): rounds of collect, persist once, send, install, apply, answer,
 * advance; proposals and reads with completion callbacks; compaction.
 *
 * Completions are queued during a round and run after every group has
 * advanced, so a callback may propose or read again (a core between
 * raft_ready_get and raft_advance refuses every call).
 */
#include <stdlib.h>
#include <string.h>

#include "host.h"

typedef struct prop {
    uint64_t index, term;
    rhost_done_fn done;
    void *arg;
} prop;

typedef struct rread {
    uint64_t ctx;
    uint64_t index; /* 0 until the read state arrived */
    rhost_done_fn done;
    void *arg;
} rread;

typedef struct hgroup {
    uint64_t id;      /* group id */
    uint64_t replica; /* this replica's id */
    raft_group *rg;
    const rhost_sm_ops *ops;
    void *sm;
    prop *props; /* by index, ascending */
    size_t nprops, capprops;
    rread *reads;
    size_t nreads, capreads;
    uint64_t open_ctx; /* a ReadIndex later reads may still share (0: none) */
    int role;
    uint64_t leader, term;
    uint64_t applied;
    raft_ready rd;
    int in_round;
} hgroup;

typedef struct done_item {
    rhost_done_fn done;
    void *arg;
    int err;
    uint64_t index;
    rhost_result res;
} done_item;

struct rhost {
    uint8_t node;
    rhost_config cfg;
    rhost_env env;
    hgroup **g; /* by group id, ascending */
    size_t ng, capg;
    uint64_t next_ctx;
    int failed;
    /* compactions to persist with the next round */
    uint64_t *comp_groups;
    raft_snap_meta *comps;
    size_t ncomp, capcomp;
    /* one round's arrays */
    uint64_t *r_ids;
    raft_ready **r_rds;
    hgroup **r_gs;
    size_t r_cap;
    done_item *dones;
    size_t ndones, capdones;
    int in_dones;
    uint8_t *chunk;
    size_t chunk_cap;
};

/* grow: makes room for one more element of size sz in *p (count n, room
 * *cap). Returns 0 or -1 (out of memory; *p unchanged). */
static int grow(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 8;
    void *q = realloc(*p, nc * sz);
    if (!q)
        return -1;
    *p = q;
    *cap = nc;
    return 0;
}

/* rhost_config_default: contract in host.h. */
void rhost_config_default(rhost_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->election_ticks = 10;
    cfg->heartbeat_ticks = 1;
    cfg->max_inflight = 8;
    cfg->max_msg_entries = 64;
    cfg->max_msg_bytes = 1u << 20;
    cfg->snap_chunk = 256u << 10;
    cfg->compact_entries = 10000;
}

/* rhost_new: contract in host.h. */
int rhost_new(uint8_t node, const rhost_config *cfg, const rhost_env *env, rhost **out)
{
    *out = NULL;
    if (!node || !cfg || !env || !env->persist || !env->send || !cfg->election_ticks ||
        cfg->heartbeat_ticks >= cfg->election_ticks || !cfg->snap_chunk)
        return RAFT_ERR_INVALID;
    rhost *h = calloc(1, sizeof *h);
    if (!h)
        return RAFT_ERR_NOMEM;
    h->node = node;
    h->cfg = *cfg;
    h->env = *env;
    *out = h;
    return RAFT_OK;
}

static hgroup *find(const rhost *h, uint64_t id, size_t *pos)
{
    size_t lo = 0, hi = h->ng;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->g[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (pos)
        *pos = lo;
    return lo < h->ng && h->g[lo]->id == id ? h->g[lo] : NULL;
}

/* Queues a completion; when out of memory it runs at once (a callback may
 * then see the host mid-round, but it is never lost). */
static void done_add(rhost *h, rhost_done_fn fn, void *arg, int err, uint64_t index,
                     rhost_result *res)
{
    rhost_result r = { 0 };
    if (res)
        r = *res;
    if (grow((void **)&h->dones, &h->capdones, h->ndones, sizeof *h->dones)) {
        fn(arg, err, index, &r);
        return;
    }
    h->dones[h->ndones++] = (done_item){ fn, arg, err, index, r };
}

static void done_run(rhost *h)
{
    if (h->in_dones)
        return; /* the outer run reaches what was queued since */
    h->in_dones = 1;
    /* by position: a callback may queue more (rhost_group_remove from a
     * callback does; rhost_free from one is not allowed) */
    for (size_t i = 0; i < h->ndones; i++) {
        done_item d = h->dones[i];
        d.done(d.arg, d.err, d.index, &d.res);
    }
    h->ndones = 0;
    h->in_dones = 0;
}

/* Ends every pending proposal and read of g with err. */
static void group_fail_all(rhost *h, hgroup *g, int err)
{
    for (size_t i = 0; i < g->nprops; i++)
        done_add(h, g->props[i].done, g->props[i].arg, err, g->props[i].index, NULL);
    g->nprops = 0;
    for (size_t i = 0; i < g->nreads; i++)
        done_add(h, g->reads[i].done, g->reads[i].arg, err, 0, NULL);
    g->nreads = 0;
}

static void group_free(hgroup *g)
{
    raft_group_free(g->rg);
    free(g->props);
    free(g->reads);
    free(g);
}

/* rhost_free: contract in host.h. */
void rhost_free(rhost *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < h->ng; i++)
        group_fail_all(h, h->g[i], RHOST_GONE);
    done_run(h);
    for (size_t i = 0; i < h->ng; i++)
        group_free(h->g[i]);
    free(h->g);
    free(h->comp_groups);
    free(h->comps);
    free(h->r_ids);
    free(h->r_rds);
    free(h->r_gs);
    free(h->dones);
    free(h->chunk);
    free(h);
}

/* rhost_group_add: contract in host.h. */
int rhost_group_add(rhost *h, uint64_t group, uint64_t id, const raft_snap_meta *snap,
                    const raft_hard_state *hs, const raft_entry *entries, size_t n,
                    uint64_t applied, const rhost_sm_ops *ops, void *sm)
{
    if (h->failed)
        return RAFT_ERR_IO;
    size_t pos;
    if (!id || rhost_node_of(id) != h->node || !ops || !ops->apply || !ops->snap_make ||
        !ops->snap_read || !ops->snap_stage || !ops->snap_install || find(h, group, &pos))
        return RAFT_ERR_INVALID;
    if (grow((void **)&h->g, &h->capg, h->ng, sizeof *h->g))
        return RAFT_ERR_NOMEM;
    hgroup *g = calloc(1, sizeof *g);
    if (!g)
        return RAFT_ERR_NOMEM;
    g->id = group;
    g->replica = id;
    g->ops = ops;
    g->sm = sm;
    /* a state machine that applied nothing holds the empty state, which is
     * what a bootstrap snapshot (index 1) is */
    if (applied == 0 && snap->index == 1)
        applied = 1;
    if (applied < snap->index) {
        if (ops->snap_install(sm, snap)) {
            free(g);
            return RAFT_ERR_IO;
        }
        applied = snap->index;
    }
    g->applied = applied;
    raft_config rc;
    raft_config_default(&rc, id, group);
    rc.election_ticks = h->cfg.election_ticks;
    rc.heartbeat_ticks = h->cfg.heartbeat_ticks;
    rc.max_inflight = h->cfg.max_inflight;
    rc.max_msg_entries = h->cfg.max_msg_entries;
    rc.max_msg_bytes = h->cfg.max_msg_bytes;
    rc.snap_chunk = h->cfg.snap_chunk;
    rc.plants = h->cfg.plants;
    if (h->cfg.alloc.alloc && h->cfg.alloc.free)
        rc.alloc = h->cfg.alloc;
    /* each replica and each start its own election randomness */
    rc.seed = h->cfg.seed ^ (group * 0x9e3779b97f4a7c15ull) ^ (id * 0xbf58476d1ce4e5b9ull);
    int rc2 = raft_group_new(&rc, snap, hs, applied, &g->rg);
    for (size_t i = 0; rc2 == RAFT_OK && i < n; i++)
        rc2 = raft_load_entry(g->rg, &entries[i]);
    if (rc2 == RAFT_OK)
        rc2 = raft_load_done(g->rg);
    if (rc2 != RAFT_OK) {
        group_free(g);
        return rc2;
    }
    g->role = raft_role(g->rg);
    g->term = raft_term(g->rg);
    g->leader = raft_leader(g->rg);
    memmove(&h->g[pos + 1], &h->g[pos], (h->ng - pos) * sizeof *h->g);
    h->g[pos] = g;
    h->ng++;
    return RAFT_OK;
}

/* rhost_group_remove: contract in host.h. */
int rhost_group_remove(rhost *h, uint64_t group)
{
    size_t pos;
    hgroup *g = find(h, group, &pos);
    if (!g)
        return RAFT_ERR_INVALID;
    group_fail_all(h, g, RHOST_GONE);
    memmove(&h->g[pos], &h->g[pos + 1], (h->ng - pos - 1) * sizeof *h->g);
    h->ng--;
    /* a compaction queued for it is still persisted: harmless, and the
     * caller erases the group's durable state separately */
    group_free(g);
    done_run(h);
    return RAFT_OK;
}

/* rhost_tick: contract in host.h. */
int rhost_tick(rhost *h)
{
    if (h->failed)
        return RAFT_ERR_IO;
    int first = RAFT_OK;
    for (size_t i = 0; i < h->ng; i++) {
        int rc = raft_tick(h->g[i]->rg);
        if (rc && !first)
            first = rc;
    }
    return first;
}

/* closes the ReadIndex windows: after a message or a round, a new read
 * must see what they may have committed */
static void close_reads(rhost *h)
{
    for (size_t i = 0; i < h->ng; i++)
        h->g[i]->open_ctx = 0;
}

/* rhost_step: contract in host.h. */
int rhost_step(rhost *h, const raft_msg *m)
{
    if (h->failed)
        return RAFT_ERR_IO;
    hgroup *g = find(h, m->group, NULL);
    if (!g || m->to != g->replica)
        return RAFT_OK;
    g->open_ctx = 0;
    int rc = raft_step(g->rg, m);
    return rc == RAFT_ERR_INVALID ? RAFT_OK : rc;
}

/* The group a proposal or read names, or NULL with *rc the refusal
 * (a failed host, an unknown group, no callback); *leader (may be NULL)
 * starts at 0. */
static hgroup *request_group(rhost *h, uint64_t group, rhost_done_fn done, uint64_t *leader,
                             int *rc)
{
    if (leader)
        *leader = 0;
    *rc = h->failed ? RAFT_ERR_IO : RAFT_ERR_INVALID;
    hgroup *g = h->failed ? NULL : find(h, group, NULL);
    return g && done ? g : NULL;
}

/* rhost_propose: contract in host.h. */
int rhost_propose(rhost *h, uint64_t group, const void *data, uint32_t len, rhost_done_fn done,
                  void *arg, uint64_t *leader)
{
    int rc;
    hgroup *g = request_group(h, group, done, leader, &rc);
    if (!g)
        return rc;
    if (grow((void **)&g->props, &g->capprops, g->nprops, sizeof *g->props))
        return RAFT_ERR_NOMEM;
    uint64_t index;
    rc = raft_propose(g->rg, data, len, &index);
    if (rc != RAFT_OK) {
        if (leader)
            *leader = raft_leader(g->rg);
        return rc;
    }
    g->open_ctx = 0;
    /* keep props ordered by index: after a truncation a new entry may take
     * an index below an older, doomed proposal's */
    size_t at = g->nprops;
    while (at > 0 && g->props[at - 1].index > index)
        at--;
    memmove(&g->props[at + 1], &g->props[at], (g->nprops - at) * sizeof *g->props);
    g->props[at] = (prop){ index, raft_term(g->rg), done, arg };
    g->nprops++;
    return RAFT_OK;
}

/* rhost_read: contract in host.h. */
int rhost_read(rhost *h, uint64_t group, rhost_done_fn done, void *arg, uint64_t *leader)
{
    int rc;
    hgroup *g = request_group(h, group, done, leader, &rc);
    if (!g)
        return rc;
    if (grow((void **)&g->reads, &g->capreads, g->nreads, sizeof *g->reads))
        return RAFT_ERR_NOMEM;
    if (!g->open_ctx) {
        uint64_t ctx = ++h->next_ctx;
        rc = raft_read_index(g->rg, ctx);
        if (rc != RAFT_OK) {
            if (leader)
                *leader = raft_leader(g->rg);
            return rc;
        }
        g->open_ctx = ctx;
    }
    g->reads[g->nreads++] = (rread){ g->open_ctx, 0, done, arg };
    return RAFT_OK;
}

/* rhost_conf: contract in host.h. */
int rhost_conf(rhost *h, uint64_t group, int op, uint64_t id)
{
    if (h->failed)
        return RAFT_ERR_IO;
    hgroup *g = find(h, group, NULL);
    return g ? raft_propose_conf(g->rg, op, id) : RAFT_ERR_INVALID;
}

/* rhost_transfer: contract in host.h. */
int rhost_transfer(rhost *h, uint64_t group, uint64_t to)
{
    if (h->failed)
        return RAFT_ERR_IO;
    hgroup *g = find(h, group, NULL);
    return g ? raft_transfer_leader(g->rg, to) : RAFT_ERR_INVALID;
}

/* Resolves the proposals at or below index: the one at index with the
 * entry's term gets res; the others were overwritten (LOST) or skipped by
 * a snapshot (GONE: they may be in it). */
static void resolve_props(rhost *h, hgroup *g, uint64_t index, uint64_t term, rhost_result *res,
                          int from_snap)
{
    size_t k = 0;
    int used = 0;
    while (k < g->nprops && g->props[k].index <= index) {
        prop *p = &g->props[k++];
        if (from_snap) {
            done_add(h, p->done, p->arg, RHOST_GONE, p->index, NULL);
        } else if (p->index == index && p->term == term && !used) {
            done_add(h, p->done, p->arg, RAFT_OK, index, res);
            used = 1;
        } else {
            done_add(h, p->done, p->arg, RHOST_LOST, p->index, NULL);
        }
    }
    if (k) {
        memmove(g->props, g->props + k, (g->nprops - k) * sizeof *g->props);
        g->nprops -= k;
    }
    if (res && !used) {
        free(res->reply);
        res->reply = NULL;
    }
}

/* Answers the reads whose index is applied. */
static void answer_reads(rhost *h, hgroup *g)
{
    size_t w = 0;
    for (size_t i = 0; i < g->nreads; i++) {
        rread *r = &g->reads[i];
        if (r->index && r->index <= g->applied)
            done_add(h, r->done, r->arg, RAFT_OK, r->index, NULL);
        else
            g->reads[w++] = *r;
    }
    g->nreads = w;
}

/* Takes in the read states of a ready set. */
static void take_reads(rhost *h, hgroup *g, const raft_ready *rd)
{
    for (size_t j = 0; j < rd->n_reads; j++) {
        const raft_read_state *s = &rd->reads[j];
        size_t w = 0;
        for (size_t i = 0; i < g->nreads; i++) {
            rread *r = &g->reads[i];
            if (r->ctx != s->ctx) {
                g->reads[w++] = *r;
                continue;
            }
            if (!s->ok) {
                done_add(h, r->done, r->arg, RAFT_ERR_NOT_LEADER, 0, NULL);
                continue;
            }
            /* index 0 cannot happen (a leader has committed its no-op),
             * but 1 keeps "known" distinct from "waiting" */
            r->index = s->index ? s->index : 1;
            g->reads[w++] = *r;
        }
        g->nreads = w;
        if (g->open_ctx == s->ctx)
            g->open_ctx = 0;
    }
}

/* Sends one message, reading a SNAP's chunk from the state machine. */
static void send_msg(rhost *h, hgroup *g, const raft_msg *m)
{
    if (m->type != RAFT_MSG_SNAP || !m->len) {
        h->env.send(h->env.ctx, m);
        return;
    }
    if (h->chunk_cap < m->len) {
        uint8_t *p = realloc(h->chunk, m->len);
        if (!p)
            return; /* lost, as on the network: the transfer resumes */
        h->chunk = p;
        h->chunk_cap = m->len;
    }
    if (g->ops->snap_read(g->sm, m->snap.index, m->offset, h->chunk, m->len))
        return; /* snapshot gone: the core restarts with a newer one */
    raft_msg c = *m;
    c.data = h->chunk;
    h->env.send(h->env.ctx, &c);
}

/* Applies one group's ready set (after persisting and sending). */
static int apply_ready(rhost *h, hgroup *g)
{
    raft_ready *rd = &g->rd;
    if (rd->role != g->role || rd->leader != g->leader || rd->term != g->term) {
        g->role = rd->role;
        g->leader = rd->leader;
        g->term = rd->term;
        if (h->env.on_role)
            h->env.on_role(h->env.ctx, g->id, g->role, g->leader, g->term);
    }
    if (rd->has_snap) {
        if (g->ops->snap_install(g->sm, &rd->snap))
            return -1;
        g->applied = rd->snap.index;
        resolve_props(h, g, rd->snap.index, 0, NULL, 1);
    }
    for (size_t i = 0; i < rd->n_committed; i++) {
        const raft_entry *e = &rd->committed[i];
        rhost_result res = { 0 };
        if (g->ops->apply(g->sm, e, &res)) {
            free(res.reply);
            return -1;
        }
        g->applied = e->index;
        if (g->nprops && g->props[0].index <= e->index)
            resolve_props(h, g, e->index, e->term, &res, 0);
        else
            free(res.reply);
    }
    take_reads(h, g, rd);
    return 0;
}

/* Takes a snapshot of g if it applied enough past its last one. */
static void maybe_compact(rhost *h, hgroup *g)
{
    const raft_snap_meta *m = raft_snap_meta_get(g->rg);
    if (!h->cfg.compact_entries || g->applied < m->index + h->cfg.compact_entries ||
        raft_snap_pinned(g->rg))
        return;
    if (grow((void **)&h->comp_groups, &h->capcomp, h->ncomp, sizeof *h->comp_groups))
        return;
    size_t cap = h->capcomp; /* the metas follow the ids' room */
    raft_snap_meta *nc = realloc(h->comps, cap * sizeof *nc);
    if (!nc)
        return;
    h->comps = nc;
    uint64_t index, size;
    if (g->ops->snap_make(g->sm, &index, &size) || index < m->index || index > g->applied)
        return;
    if (index == m->index || raft_compact(g->rg, index, size) != RAFT_OK)
        return;
    h->comp_groups[h->ncomp] = g->id;
    h->comps[h->ncomp] = *raft_snap_meta_get(g->rg);
    h->ncomp++;
}

/* Drops the queued compactions that a snapshot installed in this round's n
 * ready sets supersedes.  A compaction is taken at or below the applied
 * index and a snapshot is installed only above the commit index, so the
 * installed one is newer: persisting the compaction after it would move
 * the durable snapshot meta back below it, over a log it no longer has. */
static void drop_superseded(rhost *h, size_t n)
{
    size_t w = 0;
    for (size_t k = 0; k < h->ncomp; k++) {
        int keep = 1;
        for (size_t i = 0; i < n && keep; i++)
            if (h->r_ids[i] == h->comp_groups[k] && h->r_rds[i]->has_snap &&
                h->r_rds[i]->snap.index >= h->comps[k].index)
                keep = 0;
        if (keep) {
            h->comp_groups[w] = h->comp_groups[k];
            h->comps[w] = h->comps[k];
            w++;
        }
    }
    h->ncomp = w;
}

static int round_room(rhost *h)
{
    if (h->r_cap >= h->ng)
        return 0;
    size_t n = h->ng;
    uint64_t *a = realloc(h->r_ids, n * sizeof *a);
    if (!a)
        return -1;
    h->r_ids = a;
    raft_ready **b = realloc(h->r_rds, n * sizeof *b);
    if (!b)
        return -1;
    h->r_rds = b;
    hgroup **c = realloc(h->r_gs, n * sizeof *c);
    if (!c)
        return -1;
    h->r_gs = c;
    h->r_cap = n;
    return 0;
}

/* Marks the host failed; the groups keep their ready sets (never
 * advanced: the host is to be freed and reloaded from disk). */
static int fail(rhost *h)
{
    h->failed = 1;
    return RAFT_ERR_IO;
}

/* rhost_round: contract in host.h. */
int rhost_round(rhost *h, int *did)
{
    if (did)
        *did = 0;
    if (h->failed)
        return RAFT_ERR_IO;
    if (round_room(h))
        return RAFT_ERR_NOMEM;
    close_reads(h);
    size_t n = 0;
    for (size_t i = 0; i < h->ng; i++) {
        hgroup *g = h->g[i];
        if (!raft_ready_get(g->rg, &g->rd))
            continue;
        g->in_round = 1;
        h->r_ids[n] = g->id;
        h->r_rds[n] = &g->rd;
        h->r_gs[n] = g;
        n++;
    }
    if (n || h->ncomp) {
        if (did)
            *did = n > 0;
        /* received chunks are durable before the round acknowledges them */
        for (size_t i = 0; i < n; i++) {
            raft_ready *rd = h->r_rds[i];
            hgroup *g = h->r_gs[i];
            if (rd->has_chunk && g->ops->snap_stage(g->sm, rd->chunk_index, rd->chunk_offset,
                                                    rd->chunk_data, rd->chunk_len))
                return fail(h);
            if (rd->has_snap && g->ops->snap_verify && g->ops->snap_verify(g->sm, &rd->snap))
                return fail(h);
        }
        drop_superseded(h, n);
        /* a round with nothing durable to write (messages only: a
         * heartbeat, a ReadIndex round, their answers) skips the synced
         * write: a linearizable read then costs a round trip, not two
         * fsyncs */
        int durable = h->ncomp > 0;
        for (size_t i = 0; i < n && !durable; i++)
            durable = h->r_rds[i]->hs_changed || h->r_rds[i]->n_entries || h->r_rds[i]->has_snap;
        if (durable &&
            h->env.persist(h->env.ctx, n, h->r_ids, h->r_rds, h->ncomp, h->comp_groups, h->comps))
            return fail(h);
        h->ncomp = 0;
        if (h->env.phase && h->env.phase(h->env.ctx, RHOST_PHASE_PERSISTED))
            return fail(h);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < h->r_rds[i]->n_msgs; j++)
                send_msg(h, h->r_gs[i], &h->r_rds[i]->msgs[j]);
        if (n && h->env.flush)
            h->env.flush(h->env.ctx);
        if (h->env.phase && h->env.phase(h->env.ctx, RHOST_PHASE_SENT))
            return fail(h);
        for (size_t i = 0; i < n; i++)
            if (apply_ready(h, h->r_gs[i]))
                return fail(h);
        for (size_t i = 0; i < n; i++) {
            hgroup *g = h->r_gs[i];
            raft_advance(g->rg, &g->rd);
            g->in_round = 0;
        }
    }
    for (size_t i = 0; i < h->ng; i++) {
        hgroup *g = h->g[i];
        if (g->nreads)
            answer_reads(h, g);
        maybe_compact(h, g);
    }
    done_run(h);
    return RAFT_OK;
}

/* rhost_group_state: contract in host.h. */
int rhost_group_state(const rhost *h, uint64_t group, int *role, uint64_t *leader, uint64_t *term)
{
    hgroup *g = find(h, group, NULL);
    if (!g)
        return RAFT_ERR_INVALID;
    if (role)
        *role = g->role;
    if (leader)
        *leader = g->leader;
    if (term)
        *term = g->term;
    return RAFT_OK;
}

/* rhost_group_core: contract in host.h. */
const raft_group *rhost_group_core(const rhost *h, uint64_t group)
{
    hgroup *g = find(h, group, NULL);
    return g ? g->rg : NULL;
}

/* rhost_group_count: contract in host.h. */
size_t rhost_group_count(const rhost *h)
{
    return h->ng;
}
