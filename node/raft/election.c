/*
 * election.c — leader election: randomized timeouts (from the host's seed),
 * pre-vote (a candidate first asks whether it could win, without raising
 * its term), votes with the up-to-date rule, check-quorum (a leader that has
 * not heard from a quorum within an election timeout steps down, and voters
 * that heard from a leader recently ignore vote requests), the new leader's
 * no-op, and leadership transfer (TIMEOUT_NOW to a caught-up voter).
 */
#include <string.h>

#include "raft_int.h"

/* Draws a new randomized election timeout in [E, 2E). */
void raft__reset_timeout(raft_group *g)
{
    uint32_t e = g->cfg.election_ticks;
    g->rand_timeout = e + (uint32_t)(raft__rand(g) % e);
}

/* Steps down (or stays) as follower of `leader` (0: unknown) at `term`.
 * A higher term clears the vote.  Pending reads fail; transfer aborts. */
void raft__become_follower(raft_group *g, uint64_t term, uint64_t leader)
{
    if (term > g->term) {
        g->term = term;
        g->vote = 0;
    }
    if (g->role == RAFT_LEADER) {
        raft__read_abort_all(g);
        raft__progress_free(g);
    }
    g->role = RAFT_FOLLOWER;
    g->leader = leader;
    g->election_elapsed = 0;
    g->heartbeat_elapsed = 0;
    g->transfer_to = 0;
    raft__reset_timeout(g);
}

static int count_vote(raft_group *g, uint64_t from, int granted)
{
    if (!raft__is_voter(g, from))
        return 0;
    for (uint32_t i = 0; i < g->n_granted + g->n_rejected; i++)
        if (g->votes_for[i] == from)
            return 0;
    if (g->n_granted + g->n_rejected >= RAFT_MAX_MEMBERS)
        return 0;
    g->votes_for[g->n_granted + g->n_rejected] = from;
    if (granted)
        g->n_granted++;
    else
        g->n_rejected++;
    return 1;
}

/* Becomes leader of the current term: progress for every member, then the
 * no-op that lets it commit (and serve reads) in its own term. */
int raft__become_leader(raft_group *g)
{
    g->role = RAFT_LEADER;
    g->leader = g->cfg.id;
    g->election_elapsed = 0;
    g->heartbeat_elapsed = 0;
    g->transfer_to = 0;
    int rc = raft__progress_rebuild(g);
    if (rc)
        return rc;
    g->noop_index = raft__last_index(g) + 1;
    if (!(g->cfg.plants & RAFT_PLANT_NO_LEADER_NOOP)) {
        rc = raft__log_append(g, g->term, RAFT_ENTRY_NOOP, NULL, 0);
        if (rc)
            return rc;
    }
    if (raft__quorum(g) == 1 && raft__maybe_commit(g) < 0)
        return RAFT_ERR_NOMEM;
    return raft__bcast_append(g);
}

/* Starts a (pre-)election.  force: from a leadership transfer (skips the
 * lease check at voters).  Returns RAFT_OK or RAFT_ERR_NOMEM. */
int raft__campaign(raft_group *g, int pre, int force)
{
    if (!raft__is_voter(g, g->cfg.id))
        return RAFT_OK;
    g->n_granted = g->n_rejected = 0;
    g->election_elapsed = 0;
    raft__reset_timeout(g);
    if (g->role == RAFT_LEADER) {
        raft__read_abort_all(g);
        raft__progress_free(g);
    }
    uint64_t term;
    if (pre) {
        g->role = RAFT_PRECANDIDATE;
        term = g->term + 1;
    } else {
        g->role = RAFT_CANDIDATE;
        g->term++;
        g->vote = g->cfg.id;
        term = g->term;
    }
    g->leader = 0;
    count_vote(g, g->cfg.id, 1);
    if (g->n_granted >= raft__quorum(g)) {
        if (pre)
            return raft__campaign(g, 0, force);
        return raft__become_leader(g);
    }
    for (uint32_t i = 0; i < g->conf.n; i++) {
        const raft_member *mb = &g->conf.m[i];
        if (!mb->voter || mb->id == g->cfg.id)
            continue;
        raft_msg *m = raft__msg(g, pre ? RAFT_MSG_PREVOTE : RAFT_MSG_VOTE, mb->id);
        if (!m)
            return RAFT_ERR_NOMEM;
        m->term = term;
        m->index = raft__last_index(g);
        m->log_term = raft__last_term(g);
        m->force = (uint8_t)force;
    }
    return RAFT_OK;
}

static int check_quorum(raft_group *g)
{
    uint32_t active = raft__is_voter(g, g->cfg.id) ? 1 : 0;
    for (uint32_t i = 0; i < g->n_prs; i++) {
        raft_progress *pr = &g->prs[i];
        if (raft__is_voter(g, pr->id) && pr->recent_active)
            active++;
        pr->recent_active = 0;
    }
    return active >= raft__quorum(g);
}

/* Advances the election / heartbeat clocks by one tick. */
int raft__tick_election(raft_group *g)
{
    g->election_elapsed++;
    if (g->role != RAFT_LEADER) {
        if (g->election_elapsed >= g->rand_timeout && raft__is_voter(g, g->cfg.id))
            return raft__campaign(g, 1, 0);
        return RAFT_OK;
    }
    /* a progress rebuild that failed for memory is retried here */
    for (uint32_t i = 0; i < g->conf.n; i++)
        if (g->conf.m[i].id != g->cfg.id && !raft__progress(g, g->conf.m[i].id)) {
            int rc = raft__progress_rebuild(g);
            if (rc)
                return rc;
            break;
        }
    if (g->transfer_to && ++g->transfer_elapsed >= g->cfg.election_ticks)
        g->transfer_to = 0; /* give up: the target did not take over in time */
    raft__snap_tick(g);
    if (g->election_elapsed >= g->cfg.election_ticks) {
        g->election_elapsed = 0;
        if (!check_quorum(g)) {
            raft__become_follower(g, g->term, 0);
            return RAFT_OK;
        }
    }
    if (++g->heartbeat_elapsed >= g->cfg.heartbeat_ticks) {
        g->heartbeat_elapsed = 0;
        return raft__bcast_heartbeat(g, g->read_round);
    }
    return RAFT_OK;
}

/* Handles PREVOTE / VOTE (term rules already applied by raft_step). */
int raft__step_vote(raft_group *g, const raft_msg *m)
{
    int pre = m->type == RAFT_MSG_PREVOTE;
    int up = raft__log_up_to_date(g, m->index, m->log_term);
    int grant;
    if (pre)
        grant = up && m->term > g->term;
    else
        grant = up && m->term == g->term && (g->vote == 0 || g->vote == m->from);
    raft_msg *r = raft__msg(g, pre ? RAFT_MSG_PREVOTE_RESP : RAFT_MSG_VOTE_RESP, m->from);
    if (!r)
        return RAFT_ERR_NOMEM;
    r->reject = (uint8_t)!grant;
    if (grant) {
        r->term = m->term;
        if (!pre) {
            g->vote = m->from;
            g->election_elapsed = 0;
        }
    }
    return RAFT_OK;
}

/* Handles PREVOTE_RESP / VOTE_RESP. */
int raft__step_vote_resp(raft_group *g, const raft_msg *m)
{
    if (m->type == RAFT_MSG_PREVOTE_RESP) {
        if (g->role != RAFT_PRECANDIDATE)
            return RAFT_OK;
        if (!m->reject && m->term != g->term + 1)
            return RAFT_OK;
    } else {
        if (g->role != RAFT_CANDIDATE || m->term != g->term)
            return RAFT_OK;
    }
    count_vote(g, m->from, !m->reject);
    if (g->n_granted >= raft__quorum(g)) {
        if (g->role == RAFT_PRECANDIDATE)
            return raft__campaign(g, 0, 0);
        return raft__become_leader(g);
    }
    if (g->n_rejected >= raft__quorum(g))
        raft__become_follower(g, g->term, 0);
    return RAFT_OK;
}

/* TIMEOUT_NOW from the leader: campaign at once, bypassing pre-vote. */
int raft__step_timeout_now(raft_group *g, const raft_msg *m)
{
    (void)m;
    if (g->role == RAFT_LEADER || !raft__is_voter(g, g->cfg.id))
        return RAFT_OK;
    return raft__campaign(g, 0, 1);
}

/* raft_transfer_leader: contract (arguments, ownership, errors) in raft.h. */
int raft_transfer_leader(raft_group *g, uint64_t to)
{
    if (g->in_ready || g->loading)
        return RAFT_ERR_STATE;
    if (g->role != RAFT_LEADER)
        return RAFT_ERR_NOT_LEADER;
    if (to == g->cfg.id || !raft__is_voter(g, to))
        return RAFT_ERR_INVALID;
    if (g->transfer_to)
        return RAFT_ERR_BUSY;
    raft_progress *pr = raft__progress(g, to);
    if (!pr)
        return RAFT_ERR_INVALID;
    g->transfer_to = to;
    g->transfer_elapsed = 0;
    if (pr->match == raft__last_index(g)) {
        raft_msg *m = raft__msg(g, RAFT_MSG_TIMEOUT_NOW, to);
        return m ? RAFT_OK : RAFT_ERR_NOMEM;
    }
    return raft__send_append(g, pr, 0);
}
