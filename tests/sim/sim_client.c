/*
 * sim_client.c — simulated clients of the key-value model.  Each client has
 * one operation outstanding: a put of a unique value or a get, on one of a
 * few keys of its group.  It sends to the node it believes leads, retries
 * (same client id and sequence, so the state machine deduplicates) on a
 * redirect or after a timeout, and gives up after a deadline: a put that
 * gave up is recorded as taking effect at any time after its call (or
 * never), a get that gave up is dropped.  Completed operations enter the
 * per-key history that lincheck.c judges at the end of the run.  In the
 * liveness phase an operation that does not complete in time is a failure.
 */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define ATTEMPT_TICKS 25
#define OP_TICKS 300
#define LIVE_OP_TICKS 120

static void hist_add(sim *s, int g, uint32_t key, const sim_hop *op)
{
    sim_hist *h = &s->hist[g][key];
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->ops = realloc(h->ops, h->cap * sizeof *h->ops);
        if (!h->ops)
            abort();
    }
    h->ops[h->n++] = *op;
}

/* Frees every history. */
void sim_hist_free(sim *s)
{
    for (int g = 0; g < SIM_MAX_GROUPS; g++)
        for (int k = 0; k < SIM_MAX_KEYS; k++) {
            free(s->hist[g][k].ops);
            memset(&s->hist[g][k], 0, sizeof s->hist[g][k]);
        }
}

static int pick_node(sim *s, int g, uint64_t hint)
{
    if (hint) {
        int slot = sim_slot_of(s, hint);
        if (slot >= 0)
            return slot;
    }
    int cands[SIM_MAX_NODES], n = 0;
    for (int i = 0; i < s->n_nodes; i++)
        if (s->nodes[i].used && s->nodes[i].rep[g].hosted)
            cands[n++] = i;
    if (n == 0)
        return 0;
    return cands[sim_range(&s->rng, 0, (uint64_t)n - 1)];
}

static void send_req(sim *s, sim_client *c)
{
    sim_log(s, "client %d/%d seq %llu op %d key %u -> node %llu", c->req.group, c->req.client,
            (unsigned long long)c->req.seq, c->req.op, c->req.key,
            (unsigned long long)s->nodes[c->target].id);
    sim_event e;
    memset(&e, 0, sizeof e);
    e.type = EV_CREQ;
    e.node = c->target;
    e.req = c->req;
    e.time = s->now + 1 + sim_range(&s->rng, 0, 8);
    sim_ev_push(s, &e);
    c->attempt_deadline = sim_tick_now(s) + ATTEMPT_TICKS;
}

/* Queues a reply from a node to client `client` of group g. */
void sim_client_reply(sim *s, int g, int client, uint64_t seq, int status, uint64_t hint,
                      uint64_t value)
{
    sim_event e;
    memset(&e, 0, sizeof e);
    e.type = EV_CRESP;
    e.resp.client = client;
    e.resp.group = g;
    e.resp.seq = seq;
    e.resp.status = status;
    e.resp.hint = hint;
    e.resp.value = value;
    e.time = s->now + 1 + sim_range(&s->rng, 0, 8);
    sim_ev_push(s, &e);
}

static void finish(sim *s, int g, sim_client *c, int ok, uint64_t value)
{
    sim_hop op;
    memset(&op, 0, sizeof op);
    op.client = (int)(c - s->clients[g]);
    op.kind = c->req.op;
    op.in = c->req.value;
    op.out = value;
    op.call = c->call;
    op.ret = ok ? s->now : SIM_INF;
    if (ok) {
        s->st_ops_ok++;
        hist_add(s, g, c->req.key, &op);
    } else {
        s->st_ops_timeout++;
        if (c->req.op == OP_PUT)
            hist_add(s, g, c->req.key, &op);
        if (s->live_tick && c->call >= s->live_tick * SIM_TICK)
            sim_fail_as(s, SIM_V_LIVENESS,
                        "liveness: group %d client %d op (seq %llu) called at tick %llu "
                        "did not complete within %d ticks after the network healed",
                        g, op.client, (unsigned long long)c->req.seq,
                        (unsigned long long)(c->call / SIM_TICK), LIVE_OP_TICKS);
    }
    c->busy = 0;
    c->next_op_at = sim_tick_now(s) + sim_range(&s->rng, 0, 6);
}

/* A reply reached a client. */
void sim_client_resp(sim *s, const sim_cresp *r)
{
    sim_client *c = &s->clients[r->group][r->client];
    if (!c->busy || c->req.seq != r->seq)
        return; /* stale */
    if (r->status == CR_OK) {
        c->hint = s->nodes[c->target].id;
        finish(s, r->group, c, 1, r->value);
        return;
    }
    c->hint = r->hint;
    c->target = pick_node(s, r->group, r->hint);
    send_req(s, c);
}

/* Per tick: start new operations, retry timed-out attempts, give up. */
void sim_clients_step(sim *s)
{
    uint64_t t = sim_tick_now(s);
    for (int g = 0; g < s->o.groups; g++) {
        for (int i = 0; i < s->n_clients; i++) {
            sim_client *c = &s->clients[g][i];
            if (c->busy) {
                if (t >= c->op_deadline) {
                    finish(s, g, c, 0, 0);
                } else if (t >= c->attempt_deadline) {
                    c->target = pick_node(s, g, 0);
                    send_req(s, c);
                }
                continue;
            }
            if (!s->clients_on || t < c->next_op_at)
                continue;
            c->busy = 1;
            c->req.client = i;
            c->req.group = g;
            c->req.seq++;
            c->req.key = (uint32_t)sim_range(&s->rng, 0, (uint64_t)s->n_keys - 1);
            if (sim_chance(&s->rng, 0.5)) {
                c->req.op = OP_PUT;
                c->req.value = ++s->next_value;
            } else {
                c->req.op = OP_GET;
                c->req.value = 0;
            }
            c->call = s->now;
            int live = s->live_tick && s->now >= s->live_tick * SIM_TICK;
            c->op_deadline = t + (live ? LIVE_OP_TICKS : OP_TICKS);
            c->target = pick_node(s, g, c->hint);
            send_req(s, c);
        }
    }
}
