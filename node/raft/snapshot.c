/*
 * snapshot.c — log compaction and snapshot streaming in chunks.
 * The host owns snapshot bytes: it tells the core when it has one
 * (raft_compact), the core drops the covered entries and, for a follower
 * that needs compacted entries, emits SNAP messages naming a byte range
 * [offset, offset+len) of a snapshot that the host fills when sending.  A
 * transfer keeps streaming the snapshot it started with even if a newer one
 * appears (else frequent compaction could starve a slow follower forever);
 * raft_snap_pinned tells the host the oldest snapshot still being streamed.
 * One chunk is in flight per follower; the follower acknowledges each chunk
 * once persisted (SNAP_RESP with the next offset wanted) and the last one
 * with an APPEND_RESP at the snapshot index.  Neither side ever holds more
 * than one chunk.  A chunk that does not continue the transfer in progress
 * is rejected with the offset the follower wants; the leader resumes there.
 */
#include <string.h>

#include "raft_int.h"

/* raft_compact: contract (arguments, ownership, errors) in raft.h. */
int raft_compact(raft_group *g, uint64_t index, uint64_t size)
{
    if (g->in_ready || g->loading)
        return RAFT_ERR_STATE;
    if (index <= g->snap.index || index > g->applied || index > raft__last_index(g))
        return RAFT_ERR_INVALID;
    raft_snap_meta s;
    memset(&s, 0, sizeof s);
    s.index = index;
    s.term = raft__term_at(g, index, NULL);
    s.size = size;
    s.conf = g->snap.conf;
    for (uint64_t i = raft__first_index(g); i <= index; i++) {
        raft_entry *e = raft__entry(g, i);
        int op;
        uint64_t id;
        if (e->type == RAFT_ENTRY_CONF &&
            raft_conf_entry_decode(e->data, e->len, &op, &id) == RAFT_OK)
            (void)raft_conf_apply(&s.conf, op, id);
    }
    raft__log_compact_to(g, &s);
    if (g->conf_index <= index)
        g->conf_index = 0;
    /* transfers in progress keep streaming the snapshot they started with
     * (raft_snap_pinned tells the host which one it must keep) */
    return RAFT_OK;
}

/* Starts streaming the current snapshot to pr from offset 0. */
void raft__snap_start(raft_group *g, raft_progress *pr)
{
    pr->snap = g->snap;
    pr->snap_index = g->snap.index;
    pr->snap_offset = 0;
    pr->snap_stall = 0;
}

/* raft_snap_pinned: contract in raft.h. */
uint64_t raft_snap_pinned(const raft_group *g)
{
    uint64_t lo = 0;
    for (uint32_t i = 0; i < g->n_prs; i++) {
        const raft_progress *pr = &g->prs[i];
        if (pr->state == PR_SNAPSHOT && (lo == 0 || pr->snap_index < lo))
            lo = pr->snap_index;
    }
    return lo;
}

/* Emits the chunk at pr->snap_offset of the snapshot pr is streaming. */
int raft__send_snap_chunk(raft_group *g, raft_progress *pr)
{
    raft_msg *m = raft__msg(g, RAFT_MSG_SNAP, pr->id);
    if (!m)
        return RAFT_ERR_NOMEM;
    const raft_snap_meta *sn = &pr->snap;
    uint64_t left = sn->size > pr->snap_offset ? sn->size - pr->snap_offset : 0;
    m->snap = *sn;
    m->offset = pr->snap_offset;
    m->len = (uint32_t)(left < g->cfg.snap_chunk ? left : g->cfg.snap_chunk);
    m->done = pr->snap_offset + m->len >= sn->size;
    m->commit = g->commit;
    pr->snap_idle = 0;
    return RAFT_OK;
}

/* Leader tick: resend a chunk that got no answer for two heartbeats; a
 * transfer that made no progress for two election timeouts (the follower
 * restarted, or the host could not serve the pinned snapshot) starts over
 * with the current snapshot. */
void raft__snap_tick(raft_group *g)
{
    for (uint32_t i = 0; i < g->n_prs; i++) {
        raft_progress *pr = &g->prs[i];
        if (pr->state != PR_SNAPSHOT)
            continue;
        if (++pr->snap_stall >= 2 * g->cfg.election_ticks && pr->snap_index != g->snap.index) {
            raft__snap_start(g, pr);
            (void)raft__send_snap_chunk(g, pr);
        } else if (++pr->snap_idle >= 2 * g->cfg.heartbeat_ticks + 1) {
            (void)raft__send_snap_chunk(g, pr); /* NOMEM: retried next tick */
        }
    }
}

static int install(raft_group *g, const raft_snap_meta *s)
{
    int ok;
    uint64_t t = raft__term_at(g, s->index, &ok);
    if (ok && t == s->term && s->index <= raft__last_index(g)) {
        /* we hold the entry: keep the suffix, drop the prefix */
        raft__log_compact_to(g, s);
        raft__conf_recompute(g);
        if (g->unstable_from <= s->index)
            g->unstable_from = s->index + 1;
        if (g->stable < s->index)
            g->stable = s->index;
        /* the host drops entries <= s->index and installs; nothing to re-append */
    } else {
        raft__log_reset(g, s);
    }
    if (g->commit < s->index)
        g->commit = s->index;
    g->applied = s->index;
    g->has_snap_install = 1;
    return RAFT_OK;
}

/* Follower: a SNAP chunk from the current leader. */
int raft__step_snap(raft_group *g, const raft_msg *m)
{
    const raft_snap_meta *s = &m->snap;
    if (s->index <= g->commit) {
        raft_msg *r = raft__msg(g, RAFT_MSG_APPEND_RESP, m->from);
        if (!r)
            return RAFT_ERR_NOMEM;
        r->index = g->commit;
        return RAFT_OK;
    }
    if (g->has_chunk || g->has_snap_install)
        return RAFT_OK; /* one per round */
    if (m->offset == 0) {
        g->recv_index = s->index;
        g->recv_offset = 0;
    }
    if (s->index != g->recv_index || m->offset != g->recv_offset || (m->len && !m->data) ||
        s->conf.n > RAFT_MAX_MEMBERS || m->offset + m->len > s->size) {
        raft_msg *r = raft__msg(g, RAFT_MSG_SNAP_RESP, m->from);
        if (!r)
            return RAFT_ERR_NOMEM;
        r->reject = 1;
        r->snap.index = s->index;
        r->offset = s->index == g->recv_index ? g->recv_offset : 0;
        return RAFT_OK;
    }
    if (m->len > g->chunk_cap) {
        uint8_t *c = raft__alloc(g, m->len);
        if (!c)
            return RAFT_ERR_NOMEM;
        raft__free(g, g->chunk, g->chunk_cap);
        g->chunk = c;
        g->chunk_cap = m->len;
    }
    if (m->len)
        memcpy(g->chunk, m->data, m->len);
    g->chunk_len = m->len;
    g->chunk_index = s->index;
    g->chunk_offset = m->offset;
    g->has_chunk = 1;
    g->recv_offset += m->len;
    if (!m->done) {
        raft_msg *r = raft__msg(g, RAFT_MSG_SNAP_RESP, m->from);
        if (!r)
            return RAFT_ERR_NOMEM;
        r->snap.index = s->index;
        r->offset = g->recv_offset;
        return RAFT_OK;
    }
    if (g->recv_offset != s->size)
        return RAFT_OK; /* inconsistent: ignore */
    g->recv_index = g->recv_offset = 0;
    int rc = install(g, s);
    if (rc)
        return rc;
    raft_msg *r = raft__msg(g, RAFT_MSG_APPEND_RESP, m->from);
    if (!r)
        return RAFT_ERR_NOMEM;
    r->index = s->index;
    return RAFT_OK;
}

/* Leader: SNAP_RESP: continue with the offset the follower wants. */
int raft__step_snap_resp(raft_group *g, const raft_msg *m)
{
    raft_progress *pr = raft__progress(g, m->from);
    if (!pr)
        return RAFT_OK;
    pr->recent_active = 1;
    if (pr->state != PR_SNAPSHOT || m->snap.index != pr->snap_index)
        return RAFT_OK;
    if (m->offset > pr->snap.size)
        return RAFT_OK;
    if (!m->reject && m->offset <= pr->snap_offset && m->offset != 0)
        return RAFT_OK; /* dup */
    if (!m->reject)
        pr->snap_stall = 0;
    pr->snap_offset = m->offset;
    if (pr->snap_offset >= pr->snap.size && !m->reject)
        return RAFT_OK;
    return raft__send_snap_chunk(g, pr);
}
