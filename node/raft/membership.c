/*
 * membership.c — cluster membership of a group: one server at a time.
 * A configuration takes effect as soon as its entry is in the log (appended,
 * not committed, as in Ongaro's single-server changes) and is recomputed from
 * the snapshot's configuration if a truncation removes it.  New servers join
 * as learners (replicated to, never counted) and are promoted only once
 * caught up.  Ids are never reused: conf.max_id only grows.  The leader
 * proposes a change only when the previous one is committed and it has
 * committed an entry of its own term (its no-op), which closes the known
 * single-server-change hole.
 */
#include <string.h>

#include "raft_int.h"

/* Returns the position of id in c, or -1. */
int raft_conf_find(const raft_conf *c, uint64_t id)
{
    for (uint32_t i = 0; i < c->n; i++)
        if (c->m[i].id == id)
            return (int)i;
    return -1;
}

/* Returns the number of voters in c. */
uint32_t raft_conf_voters(const raft_conf *c)
{
    uint32_t v = 0;
    for (uint32_t i = 0; i < c->n; i++)
        v += c->m[i].voter ? 1 : 0;
    return v;
}

/* Applies one change to c.  Returns RAFT_OK, or RAFT_ERR_INVALID leaving c
 * unchanged (unknown op, reused id, full, not a learner...). */
int raft_conf_apply(raft_conf *c, int op, uint64_t id)
{
    int pos = raft_conf_find(c, id);
    switch (op) {
    case RAFT_CONF_ADD_LEARNER:
        if (id == 0 || id <= c->max_id || pos >= 0 || c->n >= RAFT_MAX_MEMBERS)
            return RAFT_ERR_INVALID;
        c->m[c->n].id = id;
        c->m[c->n].voter = 0;
        c->n++;
        c->max_id = id;
        return RAFT_OK;
    case RAFT_CONF_PROMOTE:
        if (pos < 0 || c->m[pos].voter)
            return RAFT_ERR_INVALID;
        c->m[pos].voter = 1;
        return RAFT_OK;
    case RAFT_CONF_REMOVE:
        if (pos < 0)
            return RAFT_ERR_INVALID;
        if (c->m[pos].voter && raft_conf_voters(c) <= 1)
            return RAFT_ERR_INVALID;
        memmove(&c->m[pos], &c->m[pos + 1], (c->n - (uint32_t)pos - 1) * sizeof c->m[0]);
        c->n--;
        return RAFT_OK;
    default: return RAFT_ERR_INVALID;
    }
}

/* Encodes a configuration change payload: op byte, id little-endian. */
void raft_conf_entry_encode(uint8_t out[RAFT_CONF_ENTRY_LEN], int op, uint64_t id)
{
    out[0] = (uint8_t)op;
    for (int i = 0; i < 8; i++)
        out[1 + i] = (uint8_t)(id >> (8 * i));
}

/* Decodes a configuration change payload.  Returns RAFT_OK or
 * RAFT_ERR_CORRUPT for a payload of the wrong size. */
int raft_conf_entry_decode(const uint8_t *p, uint32_t len, int *op, uint64_t *id)
{
    if (len != RAFT_CONF_ENTRY_LEN || !p)
        return RAFT_ERR_CORRUPT;
    *op = p[0];
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[1 + i] << (8 * i);
    *id = v;
    return RAFT_OK;
}

/* Called when a configuration entry enters the log: it takes effect now.
 * An entry that does not apply (corrupt or invalid) changes nothing. */
void raft__conf_on_append(raft_group *g, const raft_entry *e)
{
    int op;
    uint64_t id;
    if (raft_conf_entry_decode(e->data, e->len, &op, &id))
        return;
    raft_conf c = g->conf;
    if (raft_conf_apply(&c, op, id))
        return;
    g->conf = c;
    g->conf_index = e->index;
    if (g->role == RAFT_LEADER && !g->loading)
        (void)raft__progress_rebuild(g);
}

/* Recomputes the configuration from the snapshot's and the log's entries
 * (after a truncation removed the entry that set it). */
void raft__conf_recompute(raft_group *g)
{
    g->conf = g->snap.conf;
    g->conf_index = 0;
    for (uint64_t i = raft__first_index(g); i <= raft__last_index(g); i++) {
        raft_entry *e = raft__entry(g, i);
        if (e->type == RAFT_ENTRY_CONF)
            raft__conf_on_append(g, e);
    }
}

/* Proposes a configuration change; see raft.h. */
int raft_propose_conf(raft_group *g, int op, uint64_t id)
{
    if (g->in_ready)
        return RAFT_ERR_STATE;
    if (g->role != RAFT_LEADER)
        return RAFT_ERR_NOT_LEADER;
    if (g->transfer_to)
        return RAFT_ERR_BUSY;
    if (g->conf_index > g->commit || g->commit < g->noop_index)
        return RAFT_ERR_BUSY;
    if (op == RAFT_CONF_REMOVE && id == g->cfg.id)
        return RAFT_ERR_INVALID;
    if (op == RAFT_CONF_PROMOTE) {
        raft_progress *pr = raft__progress(g, id);
        if (!pr || pr->voter)
            return RAFT_ERR_INVALID;
        /* caught up: holds everything committed so far */
        if (pr->match < g->commit)
            return RAFT_ERR_NOT_CAUGHT_UP;
    }
    raft_conf c = g->conf;
    if (raft_conf_apply(&c, op, id))
        return RAFT_ERR_INVALID;
    uint8_t buf[RAFT_CONF_ENTRY_LEN];
    raft_conf_entry_encode(buf, op, id);
    int rc = raft__log_append(g, g->term, RAFT_ENTRY_CONF, buf, sizeof buf);
    if (rc)
        return rc;
    return raft__bcast_append(g);
}
