/*
 * raft.c — a Raft group's lifecycle and event entry points: creation from
 * durable state, ticks, message dispatch (term rules), proposals, the ready
 * set / advance contract, memory accounting, and accessors.  The rules
 * themselves live in election.c, replication.c, readindex.c, snapshot.c and
 * membership.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raft_int.h"

/* raft_strerror: contract (arguments, ownership, errors) in raft.h. */
const char *raft_strerror(int err)
{
    switch (err) {
#define RAFT_ERR_CASE(name, num, text) \
    case num: return text;
        RAFT_ERRORS(RAFT_ERR_CASE)
#undef RAFT_ERR_CASE
    default: return "unknown error";
    }
}

static void *default_alloc(void *ctx, size_t n)
{
    (void)ctx;
    return malloc(n);
}
static void default_free(void *ctx, void *p, size_t n)
{
    (void)ctx;
    (void)n;
    free(p);
}

/* Allocates n bytes through the host's allocator (NULL on failure). */
void *raft__alloc(raft_group *g, size_t n)
{
    if (n == 0)
        n = 1;
    return g->cfg.alloc.alloc(g->cfg.alloc.ctx, n);
}

/* Frees p (n bytes, as allocated); accepts NULL. */
void raft__free(raft_group *g, void *p, size_t n)
{
    if (!p)
        return;
    if (n == 0)
        n = 1;
    g->cfg.alloc.free(g->cfg.alloc.ctx, p, n);
}

/* Ready-set scratch memory: valid until raft_advance.  NULL on failure. */
void *raft__arena(raft_group *g, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    raft_arena_blk *b = g->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = raft__alloc(g, sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        b->next = g->arena;
        g->arena = b;
    }
    void *p = (uint8_t *)(b + 1) + b->used;
    b->used += n;
    return p;
}

/* Frees every arena block. */
void raft__arena_reset(raft_group *g)
{
    while (g->arena) {
        raft_arena_blk *b = g->arena;
        g->arena = b->next;
        raft__free(g, b, sizeof *b + b->cap);
    }
}

/* Queues a new zeroed message of type to `to`; NULL on allocation failure. */
raft_msg *raft__msg(raft_group *g, int type, uint64_t to)
{
    if (g->n_msgs == g->msgs_cap) {
        size_t ncap = g->msgs_cap ? g->msgs_cap * 2 : 16;
        raft_msg *nm = raft__alloc(g, ncap * sizeof *nm);
        if (!nm)
            return NULL;
        if (g->n_msgs)
            memcpy(nm, g->msgs, g->n_msgs * sizeof *nm);
        raft__free(g, g->msgs, g->msgs_cap * sizeof *g->msgs);
        g->msgs = nm;
        g->msgs_cap = ncap;
    }
    raft_msg *m = &g->msgs[g->n_msgs++];
    memset(m, 0, sizeof *m);
    m->type = (uint8_t)type;
    m->group = g->cfg.group;
    m->from = g->cfg.id;
    m->to = to;
    m->term = g->term;
    return m;
}

/* splitmix64 over the group's seed: deterministic, host-supplied. */
uint64_t raft__rand(raft_group *g)
{
    uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Votes needed for a majority of the current configuration's voters. */
uint32_t raft__quorum(const raft_group *g)
{
    return raft_conf_voters(&g->conf) / 2 + 1;
}

/* Returns 1 if id is a voter of the current configuration. */
int raft__is_voter(const raft_group *g, uint64_t id)
{
    int p = raft_conf_find(&g->conf, id);
    return p >= 0 && g->conf.m[p].voter;
}

/* raft_config_default: contract (arguments, ownership, errors) in raft.h. */
void raft_config_default(raft_config *cfg, uint64_t id, uint64_t group)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->id = id;
    cfg->group = group;
    cfg->election_ticks = 10;
    cfg->heartbeat_ticks = 1;
    cfg->max_inflight = 8;
    cfg->max_msg_entries = 64;
    cfg->max_msg_bytes = 1 << 20;
    cfg->snap_chunk = 64 * 1024;
    cfg->seed = id * 0x2545f4914f6cdd1dull + group;
}

/* raft_group_new: contract (arguments, ownership, errors) in raft.h. */
int raft_group_new(const raft_config *cfg, const raft_snap_meta *snap, const raft_hard_state *hs,
                   uint64_t applied, raft_group **out)
{
    *out = NULL;
    if (!cfg || !snap || cfg->id == 0 || cfg->election_ticks < 2 || cfg->heartbeat_ticks == 0 ||
        cfg->heartbeat_ticks >= cfg->election_ticks || cfg->max_inflight == 0 ||
        cfg->max_inflight > RAFT_MAX_INFLIGHT || cfg->max_msg_entries == 0 ||
        cfg->snap_chunk == 0 || snap->conf.n > RAFT_MAX_MEMBERS || applied < snap->index)
        return RAFT_ERR_INVALID;
    raft_alloc a = cfg->alloc;
    if (!a.alloc || !a.free) {
        a.alloc = default_alloc;
        a.free = default_free;
        a.ctx = NULL;
    }
    raft_group *g = a.alloc(a.ctx, sizeof *g);
    if (!g)
        return RAFT_ERR_NOMEM;
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->cfg.alloc = a;
    g->rng = cfg->seed ^ (cfg->id * 0x9e3779b97f4a7c15ull);
    g->snap = *snap;
    g->conf = snap->conf;
    if (hs) {
        g->term = hs->term;
        g->vote = hs->vote;
        g->commit = hs->commit;
        g->prev_hs = *hs;
    }
    g->applied = applied;
    g->stable = snap->index;
    g->unstable_from = snap->index + 1;
    g->loading = 1;
    g->role = RAFT_FOLLOWER;
    raft__reset_timeout(g);
    *out = g;
    return RAFT_OK;
}

/* raft_load_entry: contract (arguments, ownership, errors) in raft.h. */
int raft_load_entry(raft_group *g, const raft_entry *e)
{
    if (!g->loading || e->index != raft__last_index(g) + 1 || e->type > RAFT_ENTRY_CONF ||
        (e->len && !e->data))
        return RAFT_ERR_INVALID;
    /* terms never decrease along a log and never exceed the durable term */
    if (e->term < raft__last_term(g) || e->term > g->term)
        return RAFT_ERR_CORRUPT;
    int rc = raft__log_append(g, e->term, e->type, e->data, e->len);
    if (rc)
        return rc;
    g->stable = raft__last_index(g);
    g->unstable_from = raft__last_index(g) + 1;
    return RAFT_OK;
}

/* raft_load_done: contract (arguments, ownership, errors) in raft.h. */
int raft_load_done(raft_group *g)
{
    if (!g->loading)
        return RAFT_ERR_STATE;
    g->loading = 0;
    if (g->commit < g->snap.index)
        g->commit = g->snap.index;
    if (g->commit < g->applied)
        g->commit = g->applied;
    if (g->commit > raft__last_index(g))
        return RAFT_ERR_CORRUPT;
    g->prev_role = g->role;
    return RAFT_OK;
}

/* raft_group_free: contract (arguments, ownership, errors) in raft.h. */
void raft_group_free(raft_group *g)
{
    if (!g)
        return;
    raft__log_free(g);
    raft__progress_free(g);
    raft__read_free(g);
    raft__free(g, g->msgs, g->msgs_cap * sizeof *g->msgs);
    raft__free(g, g->chunk, g->chunk_cap);
    raft__arena_reset(g);
    raft_alloc a = g->cfg.alloc;
    a.free(a.ctx, g, sizeof *g);
}

/* raft_tick: contract (arguments, ownership, errors) in raft.h. */
int raft_tick(raft_group *g)
{
    if (g->in_ready || g->loading)
        return RAFT_ERR_STATE;
    return raft__tick_election(g);
}

static int respond_stale(raft_group *g, const raft_msg *m)
{
    /* A stale leader or pre-candidate learns our term and steps down. */
    if (m->type == RAFT_MSG_APPEND || m->type == RAFT_MSG_HEARTBEAT || m->type == RAFT_MSG_SNAP) {
        raft_msg *r = raft__msg(g, RAFT_MSG_APPEND_RESP, m->from);
        if (!r)
            return RAFT_ERR_NOMEM;
        r->reject = 1;
        r->index = 0; /* never matches an outstanding probe */
    } else if (m->type == RAFT_MSG_PREVOTE) {
        raft_msg *r = raft__msg(g, RAFT_MSG_PREVOTE_RESP, m->from);
        if (!r)
            return RAFT_ERR_NOMEM;
        r->reject = 1;
    }
    return RAFT_OK;
}

/* raft_step: contract (arguments, ownership, errors) in raft.h. */
int raft_step(raft_group *g, const raft_msg *m)
{
    if (g->in_ready || g->loading)
        return RAFT_ERR_STATE;
    if (!m || m->to != g->cfg.id || m->group != g->cfg.group)
        return RAFT_ERR_INVALID;
    if (m->type == 0 || m->type >= RAFT_MSG_TYPE_MAX || m->from == 0 || m->from == g->cfg.id ||
        (m->n_entries && !m->entries) || (m->len && !m->data))
        return RAFT_OK; /* malformed: ignored, never trusted */
    if (m->term > g->term) {
        int vote_req = m->type == RAFT_MSG_PREVOTE || m->type == RAFT_MSG_VOTE;
        if (vote_req && !m->force && g->leader != 0 && g->election_elapsed < g->cfg.election_ticks)
            return RAFT_OK; /* check-quorum lease: a leader was heard recently */
        if (m->type == RAFT_MSG_PREVOTE) {
            /* a pre-vote does not change our term */
        } else if (m->type == RAFT_MSG_PREVOTE_RESP && !m->reject) {
            /* a granted pre-vote carries the future term */
        } else {
            uint64_t lead = 0;
            if (m->type == RAFT_MSG_APPEND || m->type == RAFT_MSG_HEARTBEAT ||
                m->type == RAFT_MSG_SNAP)
                lead = m->from;
            raft__become_follower(g, m->term, lead);
        }
    } else if (m->term < g->term) {
        return respond_stale(g, m);
    }
    switch (m->type) {
    case RAFT_MSG_PREVOTE:
    case RAFT_MSG_VOTE: return raft__step_vote(g, m);
    case RAFT_MSG_PREVOTE_RESP:
    case RAFT_MSG_VOTE_RESP: return raft__step_vote_resp(g, m);
    case RAFT_MSG_APPEND:
    case RAFT_MSG_HEARTBEAT:
    case RAFT_MSG_SNAP:
        if (g->role == RAFT_LEADER)
            return RAFT_OK; /* cannot happen: 1/term */
        if (g->role != RAFT_FOLLOWER || g->leader != m->from)
            raft__become_follower(g, m->term, m->from);
        g->election_elapsed = 0;
        if (m->type == RAFT_MSG_APPEND)
            return raft__step_append(g, m);
        if (m->type == RAFT_MSG_HEARTBEAT)
            return raft__step_heartbeat(g, m);
        return raft__step_snap(g, m);
    case RAFT_MSG_APPEND_RESP:
        if (g->role != RAFT_LEADER)
            return RAFT_OK;
        return raft__step_append_resp(g, m);
    case RAFT_MSG_HEARTBEAT_RESP:
        if (g->role != RAFT_LEADER)
            return RAFT_OK;
        return raft__step_heartbeat_resp(g, m);
    case RAFT_MSG_SNAP_RESP:
        if (g->role != RAFT_LEADER)
            return RAFT_OK;
        return raft__step_snap_resp(g, m);
    case RAFT_MSG_TIMEOUT_NOW: return raft__step_timeout_now(g, m);
    default: return RAFT_OK;
    }
}

/* raft_propose: contract (arguments, ownership, errors) in raft.h. */
int raft_propose(raft_group *g, const void *data, uint32_t len, uint64_t *index)
{
    if (g->in_ready || g->loading)
        return RAFT_ERR_STATE;
    if (g->role != RAFT_LEADER)
        return RAFT_ERR_NOT_LEADER;
    if (g->transfer_to)
        return RAFT_ERR_BUSY;
    if (len && !data)
        return RAFT_ERR_INVALID;
    int rc = raft__log_append(g, g->term, RAFT_ENTRY_NORMAL, data, len);
    if (rc)
        return rc;
    if (index)
        *index = raft__last_index(g);
    if (raft__quorum(g) == 1) {
        rc = raft__maybe_commit(g) < 0 ? RAFT_ERR_NOMEM : RAFT_OK;
        if (rc)
            return rc;
    }
    return raft__bcast_append(g);
}

/* raft_step_event: contract (arguments, ownership, errors) in raft.h. */
int raft_step_event(raft_group *g, const raft_event *ev)
{
    if (!ev)
        return RAFT_ERR_INVALID;
    switch (ev->type) {
    case RAFT_EV_TICK: return raft_tick(g);
    case RAFT_EV_MSG: return raft_step(g, ev->msg);
    case RAFT_EV_PROPOSE: return raft_propose(g, ev->data, ev->len, ev->index_out);
    case RAFT_EV_CONF: return raft_propose_conf(g, ev->conf_op, ev->id);
    case RAFT_EV_READ: return raft_read_index(g, ev->ctx);
    case RAFT_EV_TRANSFER: return raft_transfer_leader(g, ev->id);
    case RAFT_EV_COMPACT: return raft_compact(g, ev->index, ev->size);
    default: return RAFT_ERR_INVALID;
    }
}

/* raft_ready_get: contract (arguments, ownership, errors) in raft.h. */
int raft_ready_get(raft_group *g, raft_ready *rd)
{
    memset(rd, 0, sizeof *rd);
    if (g->in_ready || g->loading)
        return 0;
    raft_hard_state hs = { g->term, g->vote, g->commit };
    if (g->cfg.plants & RAFT_PLANT_FORGET_VOTE)
        hs.vote = 0;
    rd->hs = hs;
    rd->hs_changed = memcmp(&hs, &g->prev_hs, sizeof hs) != 0;
    uint64_t last = raft__last_index(g);
    if (g->unstable_from <= last) {
        rd->entries = raft__entry(g, g->unstable_from);
        rd->n_entries = (size_t)(last - g->unstable_from + 1);
    }
    rd->msgs = g->msgs;
    rd->n_msgs = g->n_msgs;
    uint64_t c = g->commit < last ? g->commit : last;
    if (c > g->applied) {
        rd->committed = raft__entry(g, g->applied + 1);
        rd->n_committed = rd->committed ? (size_t)(c - g->applied) : 0;
    }
    if (g->has_chunk) {
        rd->has_chunk = 1;
        rd->chunk_index = g->chunk_index;
        rd->chunk_offset = g->chunk_offset;
        rd->chunk_len = g->chunk_len;
        rd->chunk_data = g->chunk;
    }
    if (g->has_snap_install) {
        rd->has_snap = 1;
        rd->snap = g->snap;
    }
    rd->reads = g->rs_out;
    rd->n_reads = g->n_rs_out;
    rd->role = g->role;
    rd->leader = g->leader;
    rd->term = g->term;
    int any = rd->hs_changed || rd->n_entries || rd->n_msgs || rd->n_committed || rd->has_chunk ||
              rd->has_snap || rd->n_reads || g->role != g->prev_role || g->leader != g->prev_leader;
    if (!any)
        return 0;
    g->in_ready = 1;
    return 1;
}

/* raft_advance: contract (arguments, ownership, errors) in raft.h. */
int raft_advance(raft_group *g, const raft_ready *rd)
{
    if (!g->in_ready)
        return RAFT_ERR_STATE;
    g->in_ready = 0;
    g->prev_hs = rd->hs;
    if (rd->n_entries) {
        uint64_t l = rd->entries[rd->n_entries - 1].index;
        g->stable = l;
        g->unstable_from = l + 1;
    }
    if (rd->n_committed)
        g->applied = rd->committed[rd->n_committed - 1].index;
    g->n_msgs = 0;
    raft__arena_reset(g);
    g->n_rs_out = 0;
    g->has_chunk = 0;
    g->has_snap_install = 0;
    g->prev_role = rd->role;
    g->prev_leader = rd->leader;
    return RAFT_OK;
}

/* raft_id: contract (arguments, ownership, errors) in raft.h. */
uint64_t raft_id(const raft_group *g)
{
    return g->cfg.id;
}
/* raft_role: contract (arguments, ownership, errors) in raft.h. */
int raft_role(const raft_group *g)
{
    return g->role;
}
/* raft_leader: contract (arguments, ownership, errors) in raft.h. */
uint64_t raft_leader(const raft_group *g)
{
    return g->leader;
}
/* raft_term: contract (arguments, ownership, errors) in raft.h. */
uint64_t raft_term(const raft_group *g)
{
    return g->term;
}
/* raft_commit: contract (arguments, ownership, errors) in raft.h. */
uint64_t raft_commit(const raft_group *g)
{
    return g->commit;
}
/* raft_applied: contract (arguments, ownership, errors) in raft.h. */
uint64_t raft_applied(const raft_group *g)
{
    return g->applied;
}
/* raft_last_index: contract (arguments, ownership, errors) in raft.h. */
uint64_t raft_last_index(const raft_group *g)
{
    return raft__last_index(g);
}
/* raft_conf_get: contract (arguments, ownership, errors) in raft.h. */
const raft_conf *raft_conf_get(const raft_group *g)
{
    return &g->conf;
}
/* raft_snap_meta_get: contract (arguments, ownership, errors) in raft.h. */
const raft_snap_meta *raft_snap_meta_get(const raft_group *g)
{
    return &g->snap;
}
/* raft_term_at: contract (arguments, ownership, errors) in raft.h. */
uint64_t raft_term_at(const raft_group *g, uint64_t index)
{
    return raft__term_at(g, index, NULL);
}
/* raft_entry_at: contract (arguments, ownership, errors) in raft.h. */
const raft_entry *raft_entry_at(const raft_group *g, uint64_t index)
{
    return raft__entry(g, index);
}

/* raft_describe: contract (arguments, ownership, errors) in raft.h. */
void raft_describe(const raft_group *g, char *buf, size_t len)
{
    size_t n = 0;
    if (!len)
        return;
    buf[0] = 0;
    n += (size_t)snprintf(buf, len, "noop %llu reads %zu round %llu",
                          (unsigned long long)g->noop_index, g->n_reads,
                          (unsigned long long)g->read_round);
    for (uint32_t i = 0; i < g->n_prs && n < len; i++) {
        const raft_progress *p = &g->prs[i];
        n += (size_t)snprintf(buf + n, len - n, " [%llu st %d m %llu n %llu inf %u p %d ack %llu]",
                              (unsigned long long)p->id, p->state, (unsigned long long)p->match,
                              (unsigned long long)p->next, p->inflight, p->paused,
                              (unsigned long long)p->read_ack);
    }
}
