/*
 * log.c — the in-memory Raft log of one group: the entries after the last
 * snapshot (snap.index, last], with their payloads, plus the rules that look
 * at it (term lookup, up-to-date comparison, append, truncate, compact).
 * The host's durable log mirrors it through the ready set.
 */
#include <string.h>

#include "raft_int.h"

/* Returns the index of the last entry (snap.index if the log is empty). */
uint64_t raft__last_index(const raft_group *g)
{
    return g->snap.index + g->n;
}

/* Returns the first index held in memory (snap.index + 1). */
uint64_t raft__first_index(const raft_group *g)
{
    return g->snap.index + 1;
}

/* Returns the entry at index if held in memory, else NULL.  Borrowed. */
raft_entry *raft__entry(const raft_group *g, uint64_t index)
{
    if (index <= g->snap.index || index > raft__last_index(g))
        return NULL;
    return &g->ents[g->off + (index - g->snap.index - 1)];
}

/* Returns the term at index; *ok (may be NULL) is 0 when it is unknown
 * (compacted below the snapshot or past the end). */
uint64_t raft__term_at(const raft_group *g, uint64_t index, int *ok)
{
    if (ok)
        *ok = 1;
    if (index == g->snap.index)
        return g->snap.term;
    raft_entry *e = raft__entry(g, index);
    if (e)
        return e->term;
    if (ok)
        *ok = 0;
    return 0;
}

/* Returns the term of the last entry. */
uint64_t raft__last_term(const raft_group *g)
{
    return raft__term_at(g, raft__last_index(g), NULL);
}

/* Returns 1 when a log ending at (last_index, last_term) is at least as
 * up-to-date as ours (Raft §5.4.1). */
int raft__log_up_to_date(const raft_group *g, uint64_t last_index, uint64_t last_term)
{
    uint64_t lt = raft__last_term(g);
    return last_term > lt || (last_term == lt && last_index >= raft__last_index(g));
}

static int grow(raft_group *g)
{
    if (g->off + g->n < g->ents_cap)
        return RAFT_OK;
    if (g->off > 0 && g->off >= g->ents_cap / 2) {
        memmove(g->ents, g->ents + g->off, g->n * sizeof *g->ents);
        g->off = 0;
        return RAFT_OK;
    }
    size_t ncap = g->ents_cap ? g->ents_cap * 2 : 64;
    raft_entry *ne = raft__alloc(g, ncap * sizeof *ne);
    if (!ne)
        return RAFT_ERR_NOMEM;
    if (g->n)
        memcpy(ne, g->ents + g->off, g->n * sizeof *ne);
    raft__free(g, g->ents, g->ents_cap * sizeof *g->ents);
    g->ents = ne;
    g->ents_cap = ncap;
    g->off = 0;
    return RAFT_OK;
}

/* Appends an entry at last+1 with a copy of data.  Updates the configuration
 * if it is a configuration entry.  Returns RAFT_OK or RAFT_ERR_NOMEM. */
int raft__log_append(raft_group *g, uint64_t term, uint8_t type, const void *data, uint32_t len)
{
    int rc = grow(g);
    if (rc)
        return rc;
    uint8_t *copy = NULL;
    if (len) {
        copy = raft__alloc(g, len);
        if (!copy)
            return RAFT_ERR_NOMEM;
        memcpy(copy, data, len);
    }
    raft_entry *e = &g->ents[g->off + g->n];
    e->term = term;
    e->index = raft__last_index(g) + 1;
    e->type = type;
    e->len = len;
    e->data = copy;
    g->n++;
    if (type == RAFT_ENTRY_CONF)
        raft__conf_on_append(g, e);
    return RAFT_OK;
}

static void free_range(raft_group *g, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        raft_entry *e = &g->ents[g->off + i];
        raft__free(g, e->data, e->len);
        e->data = NULL;
    }
}

/* Removes entries at index >= from (from > commit is the caller's duty).
 * Recomputes the configuration if a configuration entry was removed. */
void raft__log_truncate(raft_group *g, uint64_t from)
{
    if (from > raft__last_index(g))
        return;
    if (from <= g->snap.index)
        from = g->snap.index + 1;
    size_t keep = (size_t)(from - g->snap.index - 1);
    free_range(g, keep, g->n);
    g->n = keep;
    if (g->stable >= from)
        g->stable = from - 1;
    if (g->unstable_from > from)
        g->unstable_from = from;
    if (g->conf_index >= from)
        raft__conf_recompute(g);
}

/* Discards the whole log and restarts it after snapshot s. */
void raft__log_reset(raft_group *g, const raft_snap_meta *s)
{
    free_range(g, 0, g->n);
    g->n = 0;
    g->off = 0;
    g->snap = *s;
    g->stable = s->index;
    g->unstable_from = s->index + 1;
    g->conf = s->conf;
    g->conf_index = 0;
}

/* Frees every entry and the array. */
void raft__log_free(raft_group *g)
{
    free_range(g, 0, g->n);
    raft__free(g, g->ents, g->ents_cap * sizeof *g->ents);
    g->ents = NULL;
    g->ents_cap = g->n = g->off = 0;
}

/* Drops entries <= upto from memory and records s as the snapshot; s->index
 * must equal upto and lie within (snap.index, last]. */
void raft__log_compact_to(raft_group *g, const raft_snap_meta *s)
{
    uint64_t upto = s->index;
    size_t drop = (size_t)(upto - g->snap.index);
    free_range(g, 0, drop);
    g->off += drop;
    g->n -= drop;
    g->snap = *s;
    if (g->n == 0)
        g->off = 0;
}
