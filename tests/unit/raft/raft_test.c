/*
 * raft_test.c — unit tests of the Raft core's rules, one scenario each,
 * on a tiny in-process harness (reliable, ordered delivery unless a test
 * cuts links): election with pre-vote, pre-vote not disrupting, check-quorum
 * step-down, the voter lease, the up-to-date rule, the current-term commit
 * rule (and its plant), persist-before-send of the vote, flow control,
 * ReadIndex, compaction + chunked snapshots, membership via learners,
 * leadership transfer, deduplication, the record codec, and allocation
 * failure injected through the allocator.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "raft.h"
#include "raft_codec.h"
#include "raft_dedup.h"

#include "check.h" /* tests/unit: CHECK, check_failures */

/* ---- harness ---- */
#define TN 5
typedef struct qmsg {
    raft_msg m;
    raft_entry ents[64];
    uint8_t data[4096];
} qmsg;

typedef struct tc {
    int n;
    raft_group *g[TN + 1]; /* by id 1..n (+1 for a joiner) */
    int cut[TN + 2][TN + 2];
    qmsg *q;
    size_t nq, capq;
    uint64_t applied_n[TN + 2];
    uint64_t reads_ok[TN + 2], reads_fail[TN + 2], last_read_index[TN + 2];
    uint8_t snap_bytes[256];
    uint64_t snap_size;
    uint32_t max_chunk_seen;
    int saw_vote_hs_before_resp;
    uint32_t plants;
    int drop_type; /* drop every message of this type (0: none) */
    raft_alloc alloc;
} tc;

static void tc_cfg(tc *t, raft_config *c, uint64_t id)
{
    raft_config_default(c, id, 7);
    c->election_ticks = 10;
    c->heartbeat_ticks = 2;
    c->max_inflight = 2;
    c->max_msg_entries = 2;
    c->snap_chunk = 10;
    c->seed = id * 977;
    c->plants = t->plants;
    c->alloc = t->alloc;
}

static int tc_init(tc *t, int n, uint32_t plants, raft_alloc *alloc)
{
    memset(t, 0, sizeof *t);
    t->n = n;
    t->plants = plants;
    if (alloc)
        t->alloc = *alloc;
    raft_snap_meta s;
    memset(&s, 0, sizeof s);
    s.index = 1;
    s.term = 1;
    for (int i = 0; i < n; i++) {
        s.conf.m[i].id = (uint64_t)i + 1;
        s.conf.m[i].voter = 1;
    }
    s.conf.n = (uint32_t)n;
    s.conf.max_id = (uint64_t)n;
    raft_hard_state hs = { 1, 0, 1 };
    for (int i = 1; i <= n; i++) {
        raft_config c;
        tc_cfg(t, &c, (uint64_t)i);
        int rc = raft_group_new(&c, &s, &hs, 1, &t->g[i]);
        if (rc)
            return rc;
        rc = raft_load_done(t->g[i]);
        if (rc)
            return rc;
    }
    return 0;
}

static void tc_free(tc *t)
{
    for (int i = 0; i <= TN; i++)
        raft_group_free(t->g[i]);
    free(t->q);
}

static void tc_queue(tc *t, const raft_msg *m)
{
    if (m->to > TN + 1 || t->cut[m->from][m->to] || m->type == t->drop_type)
        return;
    if (t->nq == t->capq) {
        t->capq = t->capq ? t->capq * 2 : 64;
        t->q = realloc(t->q, t->capq * sizeof *t->q);
        if (!t->q)
            abort();
    }
    qmsg *x = &t->q[t->nq++];
    x->m = *m;
    size_t off = 0;
    for (uint32_t i = 0; i < m->n_entries && i < 64; i++) {
        x->ents[i] = m->entries[i];
        if (m->entries[i].len) {
            memcpy(x->data + off, m->entries[i].data, m->entries[i].len);
            x->ents[i].data = x->data + off;
            off += m->entries[i].len;
        }
    }
    x->m.entries = x->ents;
    if (m->type == RAFT_MSG_SNAP) {
        if (m->len > t->max_chunk_seen)
            t->max_chunk_seen = m->len;
        memcpy(x->data, t->snap_bytes + m->offset, m->len);
        x->m.data = x->data;
    }
}

/* One ready round for group i: "persist", send, apply, advance. */
static int tc_ready(tc *t, int i)
{
    raft_group *g = t->g[i];
    if (!g)
        return 0;
    raft_ready rd;
    if (!raft_ready_get(g, &rd))
        return 0;
    for (size_t k = 0; k < rd.n_msgs; k++) {
        if (rd.msgs[k].type == RAFT_MSG_VOTE_RESP && !rd.msgs[k].reject && rd.hs_changed &&
            rd.hs.vote == rd.msgs[k].to)
            t->saw_vote_hs_before_resp = 1;
        tc_queue(t, &rd.msgs[k]);
    }
    t->applied_n[i] += rd.n_committed;
    for (size_t k = 0; k < rd.n_reads; k++) {
        if (rd.reads[k].ok) {
            t->reads_ok[i]++;
            t->last_read_index[i] = rd.reads[k].index;
        } else {
            t->reads_fail[i]++;
        }
    }
    raft_advance(g, &rd);
    return 1;
}

/* Delivers everything queued (and what it causes) until quiet. */
static void tc_settle(tc *t)
{
    for (int guard = 0; guard < 10000; guard++) {
        int any = 0;
        for (int i = 0; i <= TN + 1; i++)
            if (i < TN + 1 && t->g[i])
                any |= tc_ready(t, i);
        if (t->nq) {
            qmsg *batch = t->q;
            size_t n = t->nq;
            t->q = NULL;
            t->nq = t->capq = 0;
            for (size_t k = 0; k < n; k++) {
                uint64_t to = batch[k].m.to;
                if (to <= TN && t->g[to] && !t->cut[batch[k].m.from][to])
                    raft_step(t->g[to], &batch[k].m);
            }
            free(batch);
            any = 1;
        }
        if (!any)
            return;
    }
}

static void tc_tick(tc *t, int ticks)
{
    for (int k = 0; k < ticks; k++) {
        for (int i = 1; i <= TN; i++)
            if (t->g[i])
                raft_tick(t->g[i]);
        tc_settle(t);
    }
}

static int tc_leader(tc *t)
{
    int l = 0;
    uint64_t term = 0;
    for (int i = 1; i <= TN; i++)
        if (t->g[i] && raft_role(t->g[i]) == RAFT_LEADER && raft_term(t->g[i]) >= term) {
            l = i;
            term = raft_term(t->g[i]);
        }
    return l;
}

static void isolate(tc *t, int x, int on)
{
    for (int i = 0; i <= TN + 1; i++)
        t->cut[x][i] = t->cut[i][x] = on;
}

/* ---- tests ---- */
static void test_election(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    CHECK(l != 0);
    int leaders = 0;
    for (int i = 1; i <= 3; i++)
        leaders += raft_role(t.g[i]) == RAFT_LEADER;
    CHECK(leaders == 1);
    /* the new leader's no-op is committed and applied everywhere */
    const raft_entry *e = raft_entry_at(t.g[l], 2);
    CHECK(e && e->type == RAFT_ENTRY_NOOP && e->term == raft_term(t.g[l]));
    tc_tick(&t, 3);
    for (int i = 1; i <= 3; i++)
        CHECK(raft_commit(t.g[i]) == 2);
    CHECK(t.saw_vote_hs_before_resp); /* vote persisted in the same ready */
    tc_free(&t);
}

static void test_prevote_no_disruption(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    uint64_t term = raft_term(t.g[l]);
    int x = l == 1 ? 2 : 1;
    isolate(&t, x, 1);
    tc_tick(&t, 100);
    /* pre-vote: the isolated node never raised its term */
    CHECK(raft_term(t.g[x]) == term);
    isolate(&t, x, 0);
    tc_tick(&t, 5);
    CHECK(tc_leader(&t) == l && raft_term(t.g[l]) == term);
    tc_free(&t);
}

static void test_check_quorum(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    isolate(&t, l, 1);
    tc_tick(&t, 25);
    CHECK(raft_role(t.g[l]) != RAFT_LEADER); /* stepped down on its own */
    int l2 = tc_leader(&t);
    CHECK(l2 != 0 && l2 != l);
    tc_free(&t);
}

static void test_vote_lease_and_up_to_date(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    int f = l == 1 ? 2 : 1;
    uint64_t term = raft_term(t.g[f]);
    /* a vote request at a higher term, while the leader is fresh: ignored */
    raft_msg m;
    memset(&m, 0, sizeof m);
    m.type = RAFT_MSG_VOTE;
    m.group = 7;
    m.from = 3 == l ? (f == 1 ? 2 : 1) : 3;
    m.to = (uint64_t)f;
    m.term = term + 5;
    m.index = 100;
    m.log_term = term;
    CHECK(raft_step(t.g[f], &m) == RAFT_OK);
    CHECK(raft_term(t.g[f]) == term);
    /* after the lease expires: an out-of-date candidate is refused */
    isolate(&t, l, 1);
    for (int k = 0; k < 25; k++)
        raft_tick(t.g[f]);
    tc_ready(&t, f);
    t.nq = 0;
    m.index = 1;
    m.log_term = 1; /* shorter log than f's (which has the no-op) */
    m.term = raft_term(t.g[f]) + 5;
    raft_step(t.g[f], &m);
    raft_ready rd;
    CHECK(raft_ready_get(t.g[f], &rd) == 1);
    int refused = 0;
    for (size_t k = 0; k < rd.n_msgs; k++)
        if (rd.msgs[k].type == RAFT_MSG_VOTE_RESP)
            refused = rd.msgs[k].reject;
    CHECK(refused);
    CHECK(rd.hs.vote == 0);
    raft_advance(t.g[f], &rd);
    tc_free(&t);
}

/* A leader must not commit an entry of an earlier term by counting
 * replicas; the planted bug does. */
static int old_term_scenario(uint32_t plants)
{
    tc t;
    CHECK(tc_init(&t, 3, plants | RAFT_PLANT_NO_LEADER_NOOP, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    /* entry 2, in l's term, kept by l only */
    isolate(&t, l, 1);
    CHECK(raft_propose(t.g[l], "x", 1, NULL) == RAFT_OK);
    tc_tick(&t, 40); /* l steps down; another node leads a later term */
    int l2 = tc_leader(&t);
    CHECK(l2 && l2 != l && !raft_entry_at(t.g[l2], 2));
    /* l2 goes away; l comes back: only l can win (the third node's log is
     * behind l's), in a term later than entry 2's */
    isolate(&t, l, 0);
    isolate(&t, l2, 1);
    int won = 0;
    for (int k = 0; k < 200 && !won; k++) {
        tc_tick(&t, 1);
        won = raft_role(t.g[l]) == RAFT_LEADER;
    }
    CHECK(won);
    tc_tick(&t, 5); /* entry 2 now sits on a majority (l and the third) */
    int f = 6 - l - l2;
    CHECK(raft_term_at(t.g[f], 2) == raft_term_at(t.g[l], 2));
    CHECK(raft_term_at(t.g[l], 2) < raft_term(t.g[l]));
    int c = (int)raft_commit(t.g[l]);
    tc_free(&t);
    return c;
}

static void test_commit_rule(void)
{
    /* correct core without a no-op: the old-term entry stays uncommitted */
    CHECK(old_term_scenario(0) < 2);
    /* with the planted bug it commits by counting */
    CHECK(old_term_scenario(RAFT_PLANT_OLD_TERM_COMMIT) == 2);
}

static void test_flow_control(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    for (int k = 0; k < 20; k++)
        CHECK(raft_propose(t.g[l], "abc", 3, NULL) == 0);
    raft_ready rd;
    CHECK(raft_ready_get(t.g[l], &rd) == 1);
    int per[TN + 2] = { 0 };
    for (size_t k = 0; k < rd.n_msgs; k++)
        if (rd.msgs[k].type == RAFT_MSG_APPEND) {
            per[rd.msgs[k].to]++;
            CHECK(rd.msgs[k].n_entries <= 2); /* max_msg_entries */
        }
    for (int i = 1; i <= 3; i++)
        CHECK(per[i] <= 2); /* max_inflight */
    /* proposals may not be made between get and advance */
    CHECK(raft_propose(t.g[l], "z", 1, NULL) == RAFT_ERR_STATE);
    for (size_t k = 0; k < rd.n_msgs; k++)
        tc_queue(&t, &rd.msgs[k]);
    raft_advance(t.g[l], &rd);
    tc_tick(&t, 10);
    for (int i = 1; i <= 3; i++)
        CHECK(raft_commit(t.g[i]) == raft_last_index(t.g[l]));
    tc_free(&t);
}

static void test_read_index(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    int f = l == 1 ? 2 : 1;
    CHECK(raft_read_index(t.g[f], 1) == RAFT_ERR_NOT_LEADER);
    CHECK(raft_propose(t.g[l], "v", 1, NULL) == 0);
    tc_settle(&t);
    /* cut the leader off: the read cannot be confirmed */
    isolate(&t, l, 1);
    CHECK(raft_read_index(t.g[l], 42) == RAFT_OK);
    tc_ready(&t, l);
    CHECK(t.reads_ok[l] == 0);
    isolate(&t, l, 0);
    tc_tick(&t, 3);
    CHECK(t.reads_ok[l] == 1);
    CHECK(t.last_read_index[l] == raft_commit(t.g[l]));
    /* reads pending when leadership is lost fail */
    isolate(&t, l, 1);
    CHECK(raft_read_index(t.g[l], 43) == RAFT_OK);
    tc_tick(&t, 25);
    CHECK(t.reads_fail[l] == 1);
    tc_free(&t);
}

static void test_read_waits_for_noop(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    /* from now on no append gets through: a new leader's no-op cannot commit */
    t.drop_type = RAFT_MSG_APPEND;
    isolate(&t, l, 1);
    tc_tick(&t, 40);
    int l2 = tc_leader(&t);
    CHECK(l2 && l2 != l);
    if (!l2) {
        tc_free(&t);
        return;
    }
    CHECK(raft_commit(t.g[l2]) < raft_last_index(t.g[l2]));
    CHECK(raft_read_index(t.g[l2], 5) == RAFT_OK);
    tc_tick(&t, 4); /* heartbeats flow and are acknowledged, still no answer */
    CHECK(t.reads_ok[l2] == 0);
    t.drop_type = 0;
    tc_tick(&t, 4);
    CHECK(t.reads_ok[l2] == 1);
    CHECK(t.last_read_index[l2] == raft_last_index(t.g[l2]));
    tc_free(&t);
}

static void test_snapshot_chunks(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    int f = l == 1 ? 2 : 1;
    isolate(&t, f, 1);
    for (int k = 0; k < 30; k++)
        CHECK(raft_propose(t.g[l], "p", 1, NULL) == 0);
    tc_tick(&t, 5);
    uint64_t c = raft_commit(t.g[l]);
    CHECK(c >= 30);
    for (int i = 0; i < 95; i++)
        t.snap_bytes[i] = (uint8_t)(i * 7);
    CHECK(raft_compact(t.g[l], c + 1, 95) == RAFT_ERR_INVALID); /* > applied */
    CHECK(raft_compact(t.g[l], c, 95) == RAFT_OK);
    CHECK(raft_entry_at(t.g[l], c) == NULL);
    CHECK(raft_snap_meta_get(t.g[l])->index == c);
    t.drop_type = RAFT_MSG_SNAP_RESP; /* hold the transfer after a chunk */
    isolate(&t, f, 0);
    tc_tick(&t, 2);
    CHECK(raft_snap_pinned(t.g[l]) == c); /* streaming snapshot c */
    /* a newer snapshot does not restart the transfer in progress */
    for (int k = 0; k < 5; k++)
        CHECK(raft_propose(t.g[l], "q", 1, NULL) == 0);
    tc_tick(&t, 1);
    uint64_t c2 = raft_commit(t.g[l]);
    CHECK(c2 > c && raft_compact(t.g[l], c2, 95) == RAFT_OK);
    CHECK(raft_snap_pinned(t.g[l]) == c);
    t.drop_type = 0;
    tc_tick(&t, 60);
    CHECK(raft_snap_pinned(t.g[l]) == 0);
    CHECK(raft_snap_meta_get(t.g[f])->index == c2); /* c, then c2 */
    CHECK(raft_commit(t.g[f]) == raft_commit(t.g[l]));
    CHECK(t.max_chunk_seen == 10); /* 95 bytes went as 10-byte chunks */
    tc_free(&t);
}

static void test_membership(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    raft_group *L = t.g[l];
    CHECK(raft_propose_conf(L, RAFT_CONF_ADD_LEARNER, 2) == RAFT_ERR_INVALID); /* reuse */
    CHECK(raft_propose_conf(L, RAFT_CONF_REMOVE, (uint64_t)l) == RAFT_ERR_INVALID);
    /* the joiner: empty replica, id 4 */
    raft_config c;
    tc_cfg(&t, &c, 4);
    raft_snap_meta empty;
    memset(&empty, 0, sizeof empty);
    CHECK(raft_group_new(&c, &empty, NULL, 0, &t.g[4]) == 0);
    CHECK(raft_load_done(t.g[4]) == 0);
    t.cut[l][4] = t.cut[4][l] = 1; /* not reachable yet */
    CHECK(raft_propose_conf(L, RAFT_CONF_ADD_LEARNER, 4) == RAFT_OK);
    CHECK(raft_propose_conf(L, RAFT_CONF_PROMOTE, 4) == RAFT_ERR_BUSY);
    tc_tick(&t, 3);
    CHECK(raft_conf_find(raft_conf_get(L), 4) >= 0);
    CHECK(raft_conf_voters(raft_conf_get(L)) == 3);
    CHECK(raft_propose_conf(L, RAFT_CONF_PROMOTE, 4) == RAFT_ERR_NOT_CAUGHT_UP);
    t.cut[l][4] = t.cut[4][l] = 0;
    tc_tick(&t, 10);
    CHECK(raft_role(t.g[4]) == RAFT_FOLLOWER && raft_leader(t.g[4]) == (uint64_t)l);
    CHECK(raft_propose_conf(L, RAFT_CONF_PROMOTE, 4) == RAFT_OK);
    tc_tick(&t, 5);
    CHECK(raft_conf_voters(raft_conf_get(t.g[4])) == 4);
    int victim = l == 1 ? 2 : 1;
    CHECK(raft_propose_conf(L, RAFT_CONF_REMOVE, (uint64_t)victim) == RAFT_OK);
    tc_tick(&t, 5);
    CHECK(raft_conf_find(raft_conf_get(L), (uint64_t)victim) < 0);
    CHECK(raft_conf_get(L)->max_id == 4);
    /* the removed node received the entry that removes it ... */
    CHECK(raft_conf_find(raft_conf_get(t.g[victim]), (uint64_t)victim) < 0);
    /* ... so it never campaigns, and cannot disrupt the group */
    uint64_t term = raft_term(L);
    isolate(&t, victim, 1);
    tc_tick(&t, 50);
    CHECK(raft_role(t.g[victim]) == RAFT_FOLLOWER);
    isolate(&t, victim, 0);
    tc_tick(&t, 50);
    CHECK(tc_leader(&t) == l && raft_term(L) == term);
    /* the conf helpers refuse an id that was used before */
    raft_conf cc = *raft_conf_get(L);
    CHECK(raft_conf_apply(&cc, RAFT_CONF_ADD_LEARNER, (uint64_t)victim) == RAFT_ERR_INVALID);
    tc_free(&t);
}

static void test_step_event(void)
{
    tc t;
    CHECK(tc_init(&t, 1, 0, NULL) == 0);
    raft_event ev;
    memset(&ev, 0, sizeof ev);
    ev.type = RAFT_EV_TICK;
    for (int k = 0; k < 25 && raft_role(t.g[1]) != RAFT_LEADER; k++)
        CHECK(raft_step_event(t.g[1], &ev) == RAFT_OK);
    CHECK(raft_role(t.g[1]) == RAFT_LEADER);
    tc_settle(&t);
    uint64_t idx = 0;
    ev.type = RAFT_EV_PROPOSE;
    ev.data = "abc";
    ev.len = 3;
    ev.index_out = &idx;
    CHECK(raft_step_event(t.g[1], &ev) == RAFT_OK && idx == raft_last_index(t.g[1]));
    tc_settle(&t);
    CHECK(raft_commit(t.g[1]) == idx && raft_applied(t.g[1]) == idx);
    ev.type = RAFT_EV_READ;
    ev.ctx = 3;
    CHECK(raft_step_event(t.g[1], &ev) == RAFT_OK);
    tc_settle(&t);
    CHECK(t.reads_ok[1] == 1 && t.last_read_index[1] == idx);
    ev.type = RAFT_EV_COMPACT;
    ev.index = idx;
    ev.size = 4;
    CHECK(raft_step_event(t.g[1], &ev) == RAFT_OK);
    CHECK(raft_snap_meta_get(t.g[1])->index == idx);
    ev.type = 99;
    CHECK(raft_step_event(t.g[1], &ev) == RAFT_ERR_INVALID);
    tc_free(&t);
}

static void test_transfer(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    int l = tc_leader(&t);
    int to = l == 3 ? 1 : 3;
    CHECK(raft_transfer_leader(t.g[l], (uint64_t)l) == RAFT_ERR_INVALID);
    CHECK(raft_transfer_leader(t.g[l], (uint64_t)to) == RAFT_OK);
    CHECK(raft_propose(t.g[l], "x", 1, NULL) == RAFT_ERR_BUSY);
    tc_settle(&t);
    CHECK(tc_leader(&t) == to);
    tc_tick(&t, 3);
    CHECK(raft_role(t.g[l]) == RAFT_FOLLOWER);
    tc_free(&t);
}

/* Allocation failure injected through the allocator: every call fails
 * cleanly (an error code), nothing leaks, nothing crashes. */
typedef struct fail_alloc {
    long budget; /* allocations left before failing */
    long live;
} fail_alloc;
static void *fa_alloc(void *ctx, size_t n)
{
    fail_alloc *f = ctx;
    if (f->budget-- <= 0)
        return NULL;
    f->live++;
    return malloc(n);
}
static void fa_free(void *ctx, void *p, size_t n)
{
    (void)n;
    fail_alloc *f = ctx;
    f->live--;
    free(p);
}

static void test_alloc_failures(void)
{
    for (long budget = 0; budget < 400; budget += 3) {
        fail_alloc fa = { budget, 0 };
        raft_alloc a = { fa_alloc, fa_free, &fa };
        tc t;
        if (tc_init(&t, 3, 0, &a) == 0) {
            tc_tick(&t, 25);
            int l = tc_leader(&t);
            if (l) {
                for (int k = 0; k < 5; k++)
                    (void)raft_propose(t.g[l], "q", 1, NULL);
                (void)raft_read_index(t.g[l], 1);
                tc_tick(&t, 5);
            }
        }
        tc_free(&t);
        CHECK(fa.live == 0);
    }
}

/* Random, often nonsensical messages never crash a group or break its
 * local invariants (run under ASan+UBSan in the sanitizer build). */
static uint64_t fz_state = 88172645463325252ull;
static uint64_t fz(uint64_t n)
{
    fz_state ^= fz_state << 13;
    fz_state ^= fz_state >> 7;
    fz_state ^= fz_state << 17;
    return n ? fz_state % n : fz_state;
}

static void test_fuzz_messages(void)
{
    tc t;
    CHECK(tc_init(&t, 3, 0, NULL) == 0);
    tc_tick(&t, 25);
    raft_entry ents[4];
    uint8_t data[64];
    for (int k = 0; k < 20000; k++) {
        raft_msg m;
        memset(&m, 0, sizeof m);
        m.type = (uint8_t)fz(RAFT_MSG_TYPE_MAX + 1);
        m.group = 7;
        m.to = 1 + fz(3);
        m.from = fz(5);
        m.term = fz(4) ? raft_term(t.g[m.to]) + fz(3) - 1 : fz(0);
        m.index = fz(3) ? fz(raft_last_index(t.g[m.to]) + 3) : fz(0);
        m.log_term = fz(4) ? fz(raft_term(t.g[m.to]) + 2) : fz(0);
        m.commit = fz(3) ? fz(raft_last_index(t.g[m.to]) + 3) : fz(0);
        m.hint = fz(3) ? fz(40) : fz(0);
        m.ctx = fz(10);
        m.reject = (uint8_t)fz(2);
        m.force = (uint8_t)fz(2);
        m.done = (uint8_t)fz(2);
        m.n_entries = (uint32_t)fz(5);
        for (uint32_t i = 0; i < m.n_entries; i++) {
            ents[i].term = fz(raft_term(t.g[m.to]) + 2);
            ents[i].index = fz(4) ? m.index + 1 + i : fz(0);
            ents[i].type = (uint8_t)fz(4);
            ents[i].len = (uint32_t)fz(10);
            ents[i].data = fz(8) ? data : NULL;
        }
        m.entries = fz(8) ? ents : NULL;
        m.snap.index = fz(3) ? fz(raft_last_index(t.g[m.to]) + 5) : fz(0);
        m.snap.term = fz(5);
        m.snap.size = fz(100);
        m.snap.conf.n = (uint32_t)fz(RAFT_MAX_MEMBERS + 3);
        m.offset = fz(3) ? fz(100) : fz(0);
        m.len = (uint32_t)fz(64);
        m.data = fz(8) ? data : NULL;
        raft_group *g = t.g[m.to];
        int rc = raft_step(g, &m);
        CHECK(rc == RAFT_OK || rc == RAFT_ERR_INVALID);
        if (fz(10) == 0)
            raft_tick(g);
        tc_ready(&t, (int)m.to);
        t.nq = 0;
        CHECK(raft_commit(g) <= raft_last_index(g));
        CHECK(raft_applied(g) <= raft_commit(g));
    }
    tc_free(&t);
}

static void test_dedup(void)
{
    raft_dedup d;
    raft_dedup_init(&d);
    uint64_t r = 0;
    CHECK(raft_dedup_check(&d, 5, 1, &r) == RAFT_DEDUP_NEW);
    CHECK(raft_dedup_record(&d, 5, 1, 77) == 0);
    CHECK(raft_dedup_record(&d, 3, 9, 11) == 0);
    CHECK(raft_dedup_check(&d, 5, 1, &r) == RAFT_DEDUP_DUP && r == 77);
    CHECK(raft_dedup_check(&d, 5, 2, &r) == RAFT_DEDUP_NEW);
    CHECK(raft_dedup_check(&d, 3, 8, &r) == RAFT_DEDUP_STALE);
    uint8_t buf[256];
    size_t n = raft_dedup_encoded_size(&d), used = 0;
    CHECK(n <= sizeof buf);
    raft_dedup_encode(&d, buf);
    raft_dedup e;
    raft_dedup_init(&e);
    CHECK(raft_dedup_decode(&e, buf, n, &used) == 0 && used == n);
    CHECK(raft_dedup_check(&e, 3, 9, &r) == RAFT_DEDUP_DUP && r == 11);
    buf[0] = 200; /* count larger than the bytes left */
    CHECK(raft_dedup_decode(&e, buf, n, &used) == -1);
    raft_dedup_free(&d);
    raft_dedup_free(&e);
}

static void test_codec(void)
{
    uint8_t data[5] = { 1, 2, 3, 4, 5 };
    raft_entry e = { 7, 42, RAFT_ENTRY_NORMAL, 5, data }, o;
    uint8_t buf[64];
    size_t n = raft_codec_entry_size(&e);
    raft_codec_entry_encode(&e, buf);
    CHECK(raft_codec_entry_decode(buf, n, &o) == RAFT_OK);
    CHECK(o.term == 7 && o.index == 42 && o.len == 5 && !memcmp(o.data, data, 5));
    for (size_t cut = 0; cut < n; cut++) /* torn */
        CHECK(raft_codec_entry_decode(buf, cut, &o) == RAFT_ERR_CORRUPT);
    for (size_t k = 0; k < n; k++) { /* any flipped bit */
        buf[k] ^= 0x10;
        CHECK(raft_codec_entry_decode(buf, n, &o) == RAFT_ERR_CORRUPT);
        buf[k] ^= 0x10;
    }
    raft_hard_state hs = { 3, 2, 9 }, hs2;
    uint8_t h[RAFT_CODEC_HS_LEN];
    raft_codec_hs_encode(&hs, h);
    CHECK(raft_codec_hs_decode(h, sizeof h, &hs2) == RAFT_OK && hs2.vote == 2);
    h[5] ^= 1;
    CHECK(raft_codec_hs_decode(h, sizeof h, &hs2) == RAFT_ERR_CORRUPT);
    CHECK(raft_crc32c(0, "123456789", 9) == 0xE3069283u); /* CRC-32C check */
    raft_snap_meta s, s2;
    memset(&s, 0, sizeof s);
    s.index = 10;
    s.conf.n = 2;
    s.conf.m[0].id = 1;
    s.conf.m[1].id = 9;
    s.conf.m[1].voter = 1;
    uint8_t sb[RAFT_CODEC_SNAP_MAX];
    size_t sl = raft_codec_snap_encode(&s, sb);
    CHECK(raft_codec_snap_decode(sb, sl, &s2) == RAFT_OK && s2.conf.m[1].id == 9);
    CHECK(raft_codec_snap_decode(sb, sl - 1, &s2) == RAFT_ERR_CORRUPT);
}

static void test_restart_from_durable(void)
{
    /* loading checks: commit beyond the log is corruption */
    raft_config c;
    raft_config_default(&c, 1, 1);
    raft_snap_meta s;
    memset(&s, 0, sizeof s);
    s.index = 1;
    s.term = 1;
    s.conf.n = 1;
    s.conf.m[0].id = 1;
    s.conf.m[0].voter = 1;
    raft_hard_state hs = { 3, 1, 5 };
    raft_group *g;
    CHECK(raft_group_new(&c, &s, &hs, 1, &g) == 0);
    raft_entry e = { 2, 2, RAFT_ENTRY_NOOP, 0, NULL };
    CHECK(raft_load_entry(g, &e) == 0);
    e.index = 4; /* gap */
    CHECK(raft_load_entry(g, &e) == RAFT_ERR_INVALID);
    e.index = 3;
    e.term = 1; /* below the previous entry's term */
    CHECK(raft_load_entry(g, &e) == RAFT_ERR_CORRUPT);
    e.term = 9; /* above the durable term */
    CHECK(raft_load_entry(g, &e) == RAFT_ERR_CORRUPT);
    e.term = 2;
    CHECK(raft_load_done(g) == RAFT_ERR_CORRUPT);
    raft_group_free(g);
    hs.commit = 2;
    CHECK(raft_group_new(&c, &s, &hs, 1, &g) == 0);
    e.index = 2;
    CHECK(raft_load_entry(g, &e) == 0);
    CHECK(raft_load_done(g) == 0);
    /* committed entries after applied are delivered again */
    raft_ready rd;
    CHECK(raft_ready_get(g, &rd) == 1);
    CHECK(rd.n_committed == 1 && rd.committed[0].index == 2);
    CHECK(rd.n_entries == 0); /* loaded entries are already durable */
    raft_advance(g, &rd);
    /* single voter: elects itself and commits alone */
    for (int k = 0; k < 25 && raft_role(g) != RAFT_LEADER; k++)
        raft_tick(g);
    CHECK(raft_role(g) == RAFT_LEADER && raft_term(g) == 4);
    CHECK(raft_commit(g) == 3);
    raft_group_free(g);
}

int main(void)
{
    test_election();
    test_prevote_no_disruption();
    test_check_quorum();
    test_vote_lease_and_up_to_date();
    test_commit_rule();
    test_flow_control();
    test_read_index();
    test_read_waits_for_noop();
    test_snapshot_chunks();
    test_membership();
    test_transfer();
    test_step_event();
    test_alloc_failures();
    test_fuzz_messages();
    test_dedup();
    test_codec();
    test_restart_from_durable();
    if (check_failures) {
        fprintf(stderr, "%d check(s) failed\n", check_failures);
        return 1;
    }
    printf("all raft rule tests passed\n");
    return 0;
}
