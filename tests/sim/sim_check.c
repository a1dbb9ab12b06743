/*
 * sim_check.c — the Raft safety invariants, checked as the simulation runs:
 *  - election safety: at most one leader per term (per group);
 *  - log matching: an (index, term) pair names one log prefix forever (every
 *    persisted entry carries a hash chained over its prefix; the first chain
 *    seen for a pair is recorded and every later one must equal it);
 *  - no committed entry lost: once an index is committed (a node persisted a
 *    commit index covering it) its entry never changes, and no node ever
 *    truncates an entry equal to a committed one;
 *  - leader completeness: a new leader's log holds every committed entry;
 *  - state machine safety: every replica applies, at each index, exactly the
 *    committed entry.
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static sim_gcheck *gcheck(sim *s, int g)
{
    return &s->gc[g];
}

/* Election safety. */
void sim_check_leader(sim *s, int g, uint64_t term, uint64_t id)
{
    sim_gcheck *c = gcheck(s, g);
    if (term >= c->n_terms) {
        size_t n = c->n_terms ? c->n_terms : 64;
        while (n <= term)
            n *= 2;
        uint64_t *t = realloc(c->leader_of_term, n * sizeof *t);
        if (!t)
            abort();
        memset(t + c->n_terms, 0, (n - c->n_terms) * sizeof *t);
        c->leader_of_term = t;
        c->n_terms = n;
    }
    if (c->leader_of_term[term] && c->leader_of_term[term] != id)
        sim_fail_as(s, SIM_V_ELECTION, "group %d: two leaders in term %llu: %llu and %llu", g,
                    (unsigned long long)term, (unsigned long long)c->leader_of_term[term],
                    (unsigned long long)id);
    c->leader_of_term[term] = id;
}

static size_t seen_slot(const sim_gcheck *c, uint64_t index, uint64_t term)
{
    uint64_t h = index * 0x9e3779b97f4a7c15ull ^ term * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 29;
    size_t j = (size_t)h & (c->seen_cap - 1);
    while (c->seen[j].index && !(c->seen[j].index == index && c->seen[j].term == term))
        j = (j + 1) & (c->seen_cap - 1);
    return j;
}

static void seen_grow(sim_gcheck *c)
{
    size_t ncap = c->seen_cap ? c->seen_cap * 2 : 1024;
    sim_seen *old = c->seen;
    size_t ocap = c->seen_cap;
    c->seen = calloc(ncap, sizeof *c->seen);
    if (!c->seen)
        abort();
    c->seen_cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].index)
            c->seen[seen_slot(c, old[i].index, old[i].term)] = old[i];
    free(old);
}

/* Log matching, on every entry a node persists. */
void sim_check_append(sim *s, int g, uint64_t node, const sim_dent *d)
{
    sim_gcheck *c = gcheck(s, g);
    if ((c->seen_n + 1) * 2 > c->seen_cap)
        seen_grow(c);
    size_t j = seen_slot(c, d->e.index, d->e.term);
    if (!c->seen[j].index) {
        c->seen[j].index = d->e.index;
        c->seen[j].term = d->e.term;
        c->seen[j].chain = d->chain;
        c->seen_n++;
        return;
    }
    if (c->seen[j].chain != d->chain)
        sim_fail_as(s, SIM_V_LOG_MATCHING,
                    "group %d: log matching violated at node %llu index %llu term %llu", g,
                    (unsigned long long)node, (unsigned long long)d->e.index,
                    (unsigned long long)d->e.term);
}

/* Returns 1 and the chain of the committed entry at index, if known. */
int sim_committed_chain(sim *s, int g, uint64_t index, uint64_t *chain)
{
    sim_gcheck *c = gcheck(s, g);
    if (index == 1) { /* the bootstrap snapshot */
        *chain = 1;
        return 1;
    }
    if (index > c->commit_max || index >= c->commit_cap || !c->commit_term[index])
        return 0;
    *chain = c->commit_chain[index];
    return 1;
}

/* A node removes an entry from its log: it must not be a committed one. */
void sim_check_truncate(sim *s, int g, uint64_t node, const sim_dent *d)
{
    uint64_t chain;
    if (sim_committed_chain(s, g, d->e.index, &chain) && chain == d->chain)
        sim_fail_as(s, SIM_V_COMMIT,
                    "group %d: node %llu truncated committed entry %llu (term %llu)", g,
                    (unsigned long long)node, (unsigned long long)d->e.index,
                    (unsigned long long)d->e.term);
}

static void record_commit(sim *s, int g, uint64_t node, uint64_t index, uint64_t term,
                          uint64_t chain)
{
    sim_gcheck *c = gcheck(s, g);
    if (index >= c->commit_cap) {
        size_t n = c->commit_cap ? c->commit_cap : 256;
        while (n <= index)
            n *= 2;
        uint64_t *t = realloc(c->commit_term, n * sizeof *t);
        if (!t)
            abort();
        c->commit_term = t;
        uint64_t *h = realloc(c->commit_chain, n * sizeof *h);
        if (!h)
            abort();
        c->commit_chain = h;
        memset(t + c->commit_cap, 0, (n - c->commit_cap) * sizeof *t);
        memset(h + c->commit_cap, 0, (n - c->commit_cap) * sizeof *h);
        c->commit_cap = n;
    }
    if (c->commit_term[index]) {
        if (c->commit_chain[index] != chain)
            sim_fail_as(s, SIM_V_COMMIT,
                        "group %d: committed entry %llu changed (term %llu -> %llu at node %llu)",
                        g, (unsigned long long)index, (unsigned long long)c->commit_term[index],
                        (unsigned long long)term, (unsigned long long)node);
        return;
    }
    c->commit_term[index] = term;
    c->commit_chain[index] = chain;
    if (index > c->commit_max)
        c->commit_max = index;
}

/* A node persisted its commit index: record / compare committed entries. */
void sim_check_commit(sim *s, int g, uint64_t node, const sim_disk *d)
{
    uint64_t hi = d->hs.commit;
    uint64_t last = d->snap.index + d->n;
    if (hi > last) {
        sim_fail_as(s, SIM_V_COMMIT,
                    "group %d: node %llu persisted commit %llu beyond its log %llu", g,
                    (unsigned long long)node, (unsigned long long)hi, (unsigned long long)last);
        return;
    }
    /* only entries not yet checked against this node's log need a look; the
     * disk keeps them all, so walk back from commit while unrecorded */
    for (uint64_t i = hi; i > d->snap.index; i--) {
        const sim_dent *x = &d->log[i - d->snap.index - 1];
        sim_gcheck *c = gcheck(s, g);
        int known = i < c->commit_cap && c->commit_term[i];
        record_commit(s, g, node, i, x->e.term, x->chain);
        if (known)
            break; /* the chain covers the prefix below */
    }
}

/* State machine safety. */
void sim_check_apply(sim *s, int g, uint64_t node, uint64_t index, uint64_t term, uint64_t chain)
{
    uint64_t want;
    if (!sim_committed_chain(s, g, index, &want)) {
        sim_fail_as(s, SIM_V_COMMIT,
                    "group %d: node %llu applied %llu (term %llu) before anyone committed it", g,
                    (unsigned long long)node, (unsigned long long)index, (unsigned long long)term);
        return;
    }
    if (want != chain)
        sim_fail_as(s, SIM_V_COMMIT,
                    "group %d: node %llu applied a different entry at %llu (term %llu)", g,
                    (unsigned long long)node, (unsigned long long)index, (unsigned long long)term);
}

/* Leader completeness: every committed index is in the new leader's log. */
void sim_check_completeness(sim *s, int g, uint64_t node, const sim_disk *d)
{
    sim_gcheck *c = gcheck(s, g);
    uint64_t last = d->snap.index + d->n;
    if (c->commit_max > last) {
        sim_fail_as(s, SIM_V_COMMIT, "group %d: leader %llu lacks committed entries %llu..%llu", g,
                    (unsigned long long)node, (unsigned long long)last + 1,
                    (unsigned long long)c->commit_max);
        return;
    }
    uint64_t want;
    if (c->commit_max > d->snap.index && sim_committed_chain(s, g, c->commit_max, &want)) {
        const sim_dent *x = &d->log[c->commit_max - d->snap.index - 1];
        if (x->chain != want)
            sim_fail_as(s, SIM_V_COMMIT,
                        "group %d: leader %llu has a different entry at committed index %llu", g,
                        (unsigned long long)node, (unsigned long long)c->commit_max);
    } else if (c->commit_max <= d->snap.index && c->commit_max > 1) {
        /* the snapshot covers it: its chain must continue the committed one */
        if (sim_committed_chain(s, g, d->snap.index, &want) && want != d->snap_chain)
            sim_fail_as(s, SIM_V_COMMIT, "group %d: leader %llu snapshot diverges", g,
                        (unsigned long long)node);
    }
}

/* Frees the checker state. */
void sim_check_free(sim *s)
{
    for (int g = 0; g < SIM_MAX_GROUPS; g++) {
        sim_gcheck *c = &s->gc[g];
        free(c->leader_of_term);
        free(c->seen);
        free(c->commit_term);
        free(c->commit_chain);
        memset(c, 0, sizeof *c);
    }
}
