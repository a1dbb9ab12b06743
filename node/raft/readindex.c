/*
 * readindex.c — linearizable reads without writing to the log (Raft thesis
 * §6.4).  The leader records its commit index as the read's index, but only
 * once it has committed an entry of its own term (its no-op: before that its
 * commit index may lag the cluster's).  It then confirms it is still leader
 * with a heartbeat round (ctx = round number); once a quorum of voters has
 * acknowledged that round, the read state {ctx, index} is released and the
 * host answers after applying up to index.  Reads pending when leadership is
 * lost are released with ok = 0 so the host can fail them.
 */
#include <string.h>

#include "raft_int.h"

/* Queues a read state for the ready set.  Returns RAFT_OK / NOMEM. */
int raft__read_emit(raft_group *g, uint64_t ctx, uint64_t index, int ok)
{
    if (g->n_rs_out == g->rs_out_cap) {
        size_t ncap = g->rs_out_cap ? g->rs_out_cap * 2 : 8;
        raft_read_state *n = raft__alloc(g, ncap * sizeof *n);
        if (!n)
            return RAFT_ERR_NOMEM;
        if (g->n_rs_out)
            memcpy(n, g->rs_out, g->n_rs_out * sizeof *n);
        raft__free(g, g->rs_out, g->rs_out_cap * sizeof *g->rs_out);
        g->rs_out = n;
        g->rs_out_cap = ncap;
    }
    raft_read_state *r = &g->rs_out[g->n_rs_out++];
    r->ctx = ctx;
    r->index = index;
    r->ok = (uint8_t)ok;
    return RAFT_OK;
}

static int committed_in_term(const raft_group *g)
{
    return g->commit >= g->noop_index && raft__term_at(g, g->commit, NULL) == g->term;
}

/* raft_read_index: contract (arguments, ownership, errors) in raft.h. */
int raft_read_index(raft_group *g, uint64_t ctx)
{
    if (g->in_ready || g->loading)
        return RAFT_ERR_STATE;
    if (g->role != RAFT_LEADER)
        return RAFT_ERR_NOT_LEADER;
    if (g->cfg.plants & RAFT_PLANT_LOCAL_READ) /* planted bug: no quorum */
        return raft__read_emit(g, ctx, g->commit, 1);
    if (raft__quorum(g) == 1 && committed_in_term(g))
        return raft__read_emit(g, ctx, g->commit, 1);
    if (g->n_reads == g->reads_cap) {
        size_t ncap = g->reads_cap ? g->reads_cap * 2 : 8;
        raft_pending_read *n = raft__alloc(g, ncap * sizeof *n);
        if (!n)
            return RAFT_ERR_NOMEM;
        if (g->n_reads)
            memcpy(n, g->reads, g->n_reads * sizeof *n);
        raft__free(g, g->reads, g->reads_cap * sizeof *g->reads);
        g->reads = n;
        g->reads_cap = ncap;
    }
    raft_pending_read *p = &g->reads[g->n_reads++];
    p->ctx = ctx;
    p->index = g->commit;
    p->round = 0;
    if (!committed_in_term(g))
        return RAFT_OK; /* wait for the no-op */
    p->round = ++g->read_round;
    return raft__bcast_heartbeat(g, p->round);
}

static int release(raft_group *g)
{
    uint32_t q = raft__quorum(g);
    size_t done = 0;
    while (done < g->n_reads) {
        raft_pending_read *p = &g->reads[done];
        if (p->round == 0)
            break;
        uint32_t acks = raft__is_voter(g, g->cfg.id) ? 1 : 0;
        for (uint32_t i = 0; i < g->n_prs; i++)
            if (raft__is_voter(g, g->prs[i].id) && g->prs[i].read_ack >= p->round)
                acks++;
        if (acks < q)
            break;
        int rc = raft__read_emit(g, p->ctx, p->index, 1);
        if (rc)
            return rc;
        done++;
    }
    if (done) {
        memmove(g->reads, g->reads + done, (g->n_reads - done) * sizeof *g->reads);
        g->n_reads -= done;
    }
    return RAFT_OK;
}

/* Leader's commit advanced: reads waiting for the first commit in the term
 * get their index and a heartbeat round.  Returns RAFT_OK or NOMEM. */
int raft__read_on_commit(raft_group *g)
{
    if (!g->n_reads || !committed_in_term(g))
        return RAFT_OK;
    int assigned = 0;
    for (size_t i = 0; i < g->n_reads; i++) {
        if (g->reads[i].round)
            continue;
        if (!assigned) {
            ++g->read_round;
            assigned = 1;
        }
        g->reads[i].index = g->commit;
        g->reads[i].round = g->read_round;
    }
    if (!assigned)
        return RAFT_OK;
    if (raft__quorum(g) == 1)
        return release(g);
    return raft__bcast_heartbeat(g, g->read_round);
}

/* A follower acknowledged a heartbeat round: release confirmed reads. */
int raft__read_on_ack(raft_group *g)
{
    return release(g);
}

/* Leadership lost: every pending read fails (ok = 0).  Allocation failure
 * here drops the notification; the host's own timeout then fails the read. */
void raft__read_abort_all(raft_group *g)
{
    for (size_t i = 0; i < g->n_reads; i++)
        (void)raft__read_emit(g, g->reads[i].ctx, 0, 0);
    g->n_reads = 0;
}

/* Frees the read queues. */
void raft__read_free(raft_group *g)
{
    raft__free(g, g->reads, g->reads_cap * sizeof *g->reads);
    raft__free(g, g->rs_out, g->rs_out_cap * sizeof *g->rs_out);
    g->reads = NULL;
    g->rs_out = NULL;
    g->n_reads = g->reads_cap = g->n_rs_out = g->rs_out_cap = 0;
}
