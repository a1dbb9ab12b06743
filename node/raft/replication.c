/*
 * replication.c — log replication: per-follower progress with flow control
 * (probe: one append per heartbeat until the match point is found;
 * replicate: up to max_inflight appends in flight; snapshot: streaming),
 * the follower's append/heartbeat handling (consistency check, conflict
 * truncation, commit from the leader), and the leader's commit rule: an
 * index is committed when a quorum of voters holds it AND it belongs to the
 * leader's current term (earlier entries commit with it, Raft §5.4.2).
 */
#include <stdlib.h>
#include <string.h>

#include "raft_int.h"

/* Returns the progress of follower id, or NULL (leader only). */
raft_progress *raft__progress(raft_group *g, uint64_t id)
{
    for (uint32_t i = 0; i < g->n_prs; i++)
        if (g->prs[i].id == id)
            return &g->prs[i];
    return NULL;
}

/* Frees all progress records. */
void raft__progress_free(raft_group *g)
{
    raft__free(g, g->prs, (size_t)g->n_prs * sizeof *g->prs);
    g->prs = NULL;
    g->n_prs = 0;
}

/* Rebuilds progress to match the configuration, keeping known followers.
 * A member removed by a configuration entry that is not committed yet keeps
 * a non-voting progress, so it still receives the entry that removes it
 * (and so learns not to campaign); it is dropped once that entry commits. */
int raft__progress_rebuild(raft_group *g)
{
    uint32_t n = 0;
    int leaving_ok = g->conf_index > g->commit;
    for (uint32_t i = 0; i < g->conf.n; i++)
        if (g->conf.m[i].id != g->cfg.id)
            n++;
    for (uint32_t i = 0; leaving_ok && i < g->n_prs; i++)
        if (raft_conf_find(&g->conf, g->prs[i].id) < 0)
            n++;
    raft_progress *np = NULL;
    if (n) {
        np = raft__alloc(g, (size_t)n * sizeof *np);
        if (!np)
            return RAFT_ERR_NOMEM;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->conf.n; i++) {
        const raft_member *mb = &g->conf.m[i];
        if (mb->id == g->cfg.id)
            continue;
        raft_progress *old = raft__progress(g, mb->id);
        if (old) {
            np[k] = *old;
        } else {
            memset(&np[k], 0, sizeof np[k]);
            np[k].id = mb->id;
            np[k].next = raft__last_index(g) + 1;
            np[k].state = PR_PROBE;
            np[k].recent_active = 1; /* a fresh member gets one round of grace */
        }
        np[k].voter = mb->voter;
        np[k].leaving = 0;
        k++;
    }
    for (uint32_t i = 0; leaving_ok && i < g->n_prs; i++) {
        if (raft_conf_find(&g->conf, g->prs[i].id) >= 0)
            continue;
        np[k] = g->prs[i];
        np[k].voter = 0;
        np[k].leaving = 1;
        k++;
    }
    raft__progress_free(g);
    g->prs = np;
    g->n_prs = n;
    return RAFT_OK;
}

static void inflight_add(raft_progress *pr, uint64_t last)
{
    uint32_t pos = (pr->in_head + pr->inflight) % RAFT_MAX_INFLIGHT;
    pr->in_last[pos] = last;
    pr->inflight++;
}

static void inflight_free_to(raft_progress *pr, uint64_t index)
{
    while (pr->inflight && pr->in_last[pr->in_head] <= index) {
        pr->in_head = (pr->in_head + 1) % RAFT_MAX_INFLIGHT;
        pr->inflight--;
    }
}

static void become_probe(raft_progress *pr, uint64_t next)
{
    pr->state = PR_PROBE;
    pr->next = next > pr->match + 1 ? next : pr->match + 1;
    pr->paused = 0;
    pr->inflight = 0;
    pr->in_head = 0;
}

static void become_replicate(raft_progress *pr)
{
    pr->state = PR_REPLICATE;
    pr->next = pr->match + 1;
    pr->paused = 0;
    pr->inflight = 0;
    pr->in_head = 0;
}

static int send_one(raft_group *g, raft_progress *pr, int allow_empty, int *sent)
{
    *sent = 0;
    if (pr->state == PR_SNAPSHOT)
        return RAFT_OK;
    if (pr->state == PR_PROBE && pr->paused)
        return RAFT_OK;
    if (pr->state == PR_REPLICATE && pr->inflight >= g->cfg.max_inflight)
        return RAFT_OK;
    if (pr->next > raft__last_index(g) + 1)
        pr->next = raft__last_index(g) + 1;
    uint64_t prev = pr->next - 1;
    int ok;
    uint64_t prev_term = raft__term_at(g, prev, &ok);
    if (!ok) {
        /* the entries it needs are compacted: stream the snapshot */
        pr->state = PR_SNAPSHOT;
        raft__snap_start(g, pr);
        pr->inflight = 0;
        pr->in_head = 0;
        return raft__send_snap_chunk(g, pr);
    }
    uint64_t last = raft__last_index(g);
    uint32_t n = 0;
    size_t bytes = 0;
    while (pr->next + n <= last && n < g->cfg.max_msg_entries) {
        raft_entry *e = raft__entry(g, pr->next + n);
        if (n > 0 && bytes + e->len > g->cfg.max_msg_bytes)
            break;
        bytes += e->len;
        n++;
    }
    if (n == 0 && !allow_empty)
        return RAFT_OK;
    raft_msg *m = raft__msg(g, RAFT_MSG_APPEND, pr->id);
    if (!m)
        return RAFT_ERR_NOMEM;
    m->index = prev;
    m->log_term = prev_term;
    m->commit = g->commit;
    if (n) {
        raft_entry *es = raft__arena(g, (size_t)n * sizeof *es);
        uint8_t *buf = raft__arena(g, bytes);
        if (!es || !buf) {
            g->n_msgs--;
            return RAFT_ERR_NOMEM;
        }
        for (uint32_t i = 0; i < n; i++) {
            raft_entry *e = raft__entry(g, pr->next + i);
            es[i] = *e;
            es[i].data = e->len ? buf : NULL;
            if (e->len)
                memcpy(buf, e->data, e->len);
            buf += e->len;
        }
        m->entries = es;
        m->n_entries = n;
    }
    *sent = 1;
    if (pr->state == PR_REPLICATE) {
        if (n) {
            pr->next += n;
            inflight_add(pr, pr->next - 1);
        }
    } else {
        pr->paused = 1;
    }
    return RAFT_OK;
}

/* Sends what flow control allows to one follower; with allow_empty, at
 * least one (possibly empty) append to carry the commit index. */
int raft__send_append(raft_group *g, raft_progress *pr, int allow_empty)
{
    int sent, rc = send_one(g, pr, allow_empty, &sent);
    while (rc == RAFT_OK && sent && pr->state == PR_REPLICATE && pr->next <= raft__last_index(g))
        rc = send_one(g, pr, 0, &sent);
    return rc;
}

/* Sends new entries (and the commit index) to every follower. */
int raft__bcast_append(raft_group *g)
{
    for (uint32_t i = 0; i < g->n_prs; i++) {
        int rc = raft__send_append(g, &g->prs[i], 0);
        if (rc)
            return rc;
    }
    return RAFT_OK;
}

/* Heartbeats carry commit (capped at the follower's match) and the ReadIndex
 * round ctx; they also unpause probing followers. */
int raft__bcast_heartbeat(raft_group *g, uint64_t ctx)
{
    for (uint32_t i = 0; i < g->n_prs; i++) {
        raft_progress *pr = &g->prs[i];
        raft_msg *m = raft__msg(g, RAFT_MSG_HEARTBEAT, pr->id);
        if (!m)
            return RAFT_ERR_NOMEM;
        m->commit = pr->match < g->commit ? pr->match : g->commit;
        m->ctx = ctx;
        pr->paused = 0;
    }
    return RAFT_OK;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Leader: advances commit per the quorum and current-term rules.  Returns 1
 * if commit advanced, 0 if not, -1 on allocation failure. */
int raft__maybe_commit(raft_group *g)
{
    uint64_t m[RAFT_MAX_MEMBERS];
    uint32_t n = 0;
    if (raft__is_voter(g, g->cfg.id))
        m[n++] = raft__last_index(g);
    for (uint32_t i = 0; i < g->n_prs && n < RAFT_MAX_MEMBERS; i++)
        if (raft__is_voter(g, g->prs[i].id))
            m[n++] = g->prs[i].match;
    uint32_t q = raft__quorum(g);
    if (n < q)
        return 0;
    qsort(m, n, sizeof m[0], cmp_desc);
    uint64_t idx = m[q - 1];
    if (idx <= g->commit)
        return 0;
    int old_ok = (g->cfg.plants & RAFT_PLANT_OLD_TERM_COMMIT) != 0;
    if (!old_ok && raft__term_at(g, idx, NULL) != g->term)
        return 0;
    g->commit = idx;
    for (uint32_t i = 0; i < g->n_prs; i++)
        if (g->prs[i].leaving && g->commit >= g->conf_index) {
            if (raft__progress_rebuild(g))
                return -1; /* removal committed */
            break;
        }
    return raft__read_on_commit(g) ? -1 : 1;
}

/* Follower: APPEND from the current leader. */
int raft__step_append(raft_group *g, const raft_msg *m)
{
    raft_msg *r = raft__msg(g, RAFT_MSG_APPEND_RESP, m->from);
    if (!r)
        return RAFT_ERR_NOMEM;
    uint64_t last = raft__last_index(g);
    if (m->index < g->commit) {
        r->index = g->commit; /* already have everything up to commit */
        return RAFT_OK;
    }
    int ok;
    uint64_t t = raft__term_at(g, m->index, &ok);
    if (!ok || t != m->log_term) {
        r->reject = 1;
        r->index = m->index;
        r->hint = m->index < last ? m->index : last;
        r->log_term = raft__term_at(g, r->hint, NULL);
        return RAFT_OK;
    }
    /* find the first entry we do not already hold */
    uint32_t i = 0;
    for (; i < m->n_entries; i++) {
        const raft_entry *e = &m->entries[i];
        if (e->index != m->index + 1 + i) {
            g->n_msgs--; /* malformed: drop silently */
            return RAFT_OK;
        }
        int have;
        uint64_t et = raft__term_at(g, e->index, &have);
        if (!have || et != e->term)
            break;
    }
    if (i < m->n_entries) {
        uint64_t from = m->entries[i].index;
        if (from <= g->commit) { /* would erase a committed entry: refuse */
            g->n_msgs--;
            return RAFT_OK;
        }
        raft__log_truncate(g, from);
        for (; i < m->n_entries; i++) {
            const raft_entry *e = &m->entries[i];
            if (e->type > RAFT_ENTRY_CONF || (e->len && !e->data))
                break;
            int rc = raft__log_append(g, e->term, e->type, e->data, e->len);
            if (rc) {
                g->n_msgs--; /* no acknowledgement for a partial append */
                return rc;
            }
        }
    }
    uint64_t last_new = m->index + i;
    if (i < m->n_entries)
        last_new = raft__last_index(g);
    uint64_t c = m->commit < last_new ? m->commit : last_new;
    if (c > g->commit)
        g->commit = c;
    r->index = last_new;
    return RAFT_OK;
}

/* Leader: APPEND_RESP. */
int raft__step_append_resp(raft_group *g, const raft_msg *m)
{
    raft_progress *pr = raft__progress(g, m->from);
    if (!pr)
        return RAFT_OK;
    pr->recent_active = 1;
    if (m->reject) {
        if (pr->state == PR_SNAPSHOT || m->index <= pr->match)
            return RAFT_OK;
        if (pr->state == PR_PROBE && m->index != pr->next - 1)
            return RAFT_OK;
        /* back off: the largest index <= hint whose term could match */
        uint64_t i = m->hint < raft__last_index(g) ? m->hint : raft__last_index(g);
        while (i > g->snap.index && raft__term_at(g, i, NULL) > m->log_term)
            i--;
        uint64_t next = i + 1;
        if (next > m->index)
            next = m->index;
        if (next < 1)
            next = 1;
        become_probe(pr, next);
        return raft__send_append(g, pr, 1);
    }
    if (m->index > raft__last_index(g))
        return RAFT_OK; /* bogus */
    int progressed = 0;
    if (m->index > pr->match) {
        pr->match = m->index;
        progressed = 1;
    }
    if (pr->next <= pr->match)
        pr->next = pr->match + 1;
    if (pr->state == PR_PROBE || (pr->state == PR_SNAPSHOT && pr->match >= pr->snap_index))
        become_replicate(pr);
    else if (pr->state == PR_REPLICATE)
        inflight_free_to(pr, m->index);
    if (progressed) {
        uint64_t id = pr->id;
        int c = raft__maybe_commit(g); /* may rebuild the progress array */
        if (c < 0)
            return RAFT_ERR_NOMEM;
        pr = raft__progress(g, id);
        if (!pr)
            return RAFT_OK; /* a leaving member, now dropped */
        if (c > 0) {
            for (uint32_t k = 0; k < g->n_prs; k++) {
                int rc = raft__send_append(g, &g->prs[k], g->prs[k].id != id);
                if (rc)
                    return rc;
            }
        }
    }
    int rc = raft__send_append(g, pr, 0);
    if (rc)
        return rc;
    if (g->transfer_to == pr->id && pr->match == raft__last_index(g)) {
        raft_msg *t = raft__msg(g, RAFT_MSG_TIMEOUT_NOW, pr->id);
        if (!t)
            return RAFT_ERR_NOMEM;
    }
    return RAFT_OK;
}

/* Follower: HEARTBEAT. */
int raft__step_heartbeat(raft_group *g, const raft_msg *m)
{
    uint64_t last = raft__last_index(g);
    uint64_t c = m->commit < last ? m->commit : last;
    if (c > g->commit)
        g->commit = c;
    raft_msg *r = raft__msg(g, RAFT_MSG_HEARTBEAT_RESP, m->from);
    if (!r)
        return RAFT_ERR_NOMEM;
    r->ctx = m->ctx;
    return RAFT_OK;
}

/* Leader: HEARTBEAT_RESP: liveness, ReadIndex acks, resume replication. */
int raft__step_heartbeat_resp(raft_group *g, const raft_msg *m)
{
    raft_progress *pr = raft__progress(g, m->from);
    if (!pr)
        return RAFT_OK;
    pr->recent_active = 1;
    pr->paused = 0;
    if (m->ctx > pr->read_ack)
        pr->read_ack = m->ctx;
    int rc = raft__read_on_ack(g);
    if (rc)
        return rc;
    if (pr->match < raft__last_index(g)) {
        if (pr->state == PR_REPLICATE && pr->inflight >= g->cfg.max_inflight) {
            /* let one more through; a gap makes the follower reject and we probe */
            pr->in_head = (pr->in_head + 1) % RAFT_MAX_INFLIGHT;
            pr->inflight--;
        }
        /* an append (empty if nothing is new) at next-1: if earlier appends
         * were lost the follower rejects it and we fall back to probing */
        return raft__send_append(g, pr, 1);
    }
    return RAFT_OK;
}

/* raft_progress_of: contract in raft.h. */
int raft_progress_of(const raft_group *g, uint64_t id, uint64_t *match, int *active)
{
    if (g->role != RAFT_LEADER)
        return RAFT_ERR_NOT_LEADER;
    for (uint32_t i = 0; i < g->n_prs; i++)
        if (g->prs[i].id == id) {
            if (match)
                *match = g->prs[i].match;
            if (active)
                *active = g->prs[i].recent_active;
            return RAFT_OK;
        }
    return RAFT_ERR_INVALID;
}
