/*
 * sim_main.c — shardex-sim: runs seeds of the deterministic cluster
 * simulation and reports.  One run: a cluster of --replicas nodes, each an
 * rhost (the host code of a real node) hosting --groups Raft groups, a
 * fault phase (network faults, crashes that lose
 * unsynced or torn writes, disk write errors, membership changes and
 * leadership transfers), then the network heals and the liveness phase
 * requires a leader per group and timely client operations, then clients
 * stop, each leader commits a barrier and hands leadership over, and every
 * member must end with the whole log committed and applied alike.  Safety
 * invariants are checked after every step (sim_check.c); the client history
 * is judged linearizable per key at the end (lincheck.c).
 *
 * Usage: shardex-sim [--seeds N] [--first S] [--replicas 3|5] [--groups G]
 *                    [--plant BUG]... [--expect-catch] [--fault-ticks T]
 *                    [--store DIR] [-v]
 * Each failure is reported with the class of violation it is (election
 * safety, log matching, commit safety, linearizability, liveness, other).
 * Exits 0 only if every seed passed. With --expect-catch (and a --plant)
 * the run stops at the first failed seed and exits 0 only if there is one
 * and it is a violation the planted bug causes: forget-vote two leaders in
 * a term (election safety, or log matching: their entries at one index
 * and term), no-leader-noop liveness, local-read a history that is not
 * linearizable, old-term-commit commit safety; a failure of another kind,
 * or none, exits 1. The last line is "N passed, M failed".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* sim_rand: contract (arguments, ownership, errors) in sim.h. */
uint64_t sim_rand(sim_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* sim_range: contract (arguments, ownership, errors) in sim.h. */
uint64_t sim_range(sim_rng *r, uint64_t lo, uint64_t hi)
{
    if (hi <= lo)
        return lo;
    return lo + sim_rand(r) % (hi - lo + 1);
}

/* sim_chance: contract (arguments, ownership, errors) in sim.h. */
int sim_chance(sim_rng *r, double p)
{
    if (p <= 0)
        return 0;
    return (double)(sim_rand(r) >> 11) * (1.0 / 9007199254740992.0) < p;
}

/* sim_tick_now: contract (arguments, ownership, errors) in sim.h. */
uint64_t sim_tick_now(const sim *s)
{
    return s->now / SIM_TICK;
}

static void fail_v(sim *s, sim_violation v, const char *fmt, va_list ap)
{
    if (s->failed)
        return;
    s->failed = 1;
    s->violation = v;
    int n = snprintf(s->failure, sizeof s->failure,
                     "tick %llu: ", (unsigned long long)sim_tick_now(s));
    vsnprintf(s->failure + n, sizeof s->failure - (size_t)n, fmt, ap);
}

/* sim_fail: contract in sim.h. */
void sim_fail(sim *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(s, SIM_V_OTHER, fmt, ap);
    va_end(ap);
}

/* sim_fail_as: contract in sim.h. */
void sim_fail_as(sim *s, sim_violation v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(s, v, fmt, ap);
    va_end(ap);
}

/* sim_violation_name: contract in sim.h. */
const char *sim_violation_name(sim_violation v)
{
    static const char *const names[SIM_V_COUNT] = { [SIM_V_NONE] = "none",
                                                    [SIM_V_OTHER] = "other",
                                                    [SIM_V_ELECTION] = "election-safety",
                                                    [SIM_V_LOG_MATCHING] = "log-matching",
                                                    [SIM_V_COMMIT] = "commit-safety",
                                                    [SIM_V_LINEARIZABLE] = "linearizability",
                                                    [SIM_V_LIVENESS] = "liveness" };
    return v >= 0 && v < SIM_V_COUNT ? names[v] : "?";
}

/* Prints a trace line with -v. */
void sim_log(sim *s, const char *fmt, ...)
{
    if (!s->o.verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("[%6llu.%llu] ", (unsigned long long)sim_tick_now(s),
           (unsigned long long)(s->now % SIM_TICK));
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

#define V(x) (1u << (x))

/* The planted bugs (raft_config.plants) and the violations each causes:
 * what --expect-catch accepts as its catch. A forgotten vote lets a node
 * vote twice in a term: two leaders of one term, seen as such or through
 * the entries both append at one index and term. */
static const struct {
    const char *name;
    uint32_t bit;
    uint32_t causes; /* V(SIM_V_*) */
} plants[] = { { "old-term-commit", RAFT_PLANT_OLD_TERM_COMMIT, V(SIM_V_COMMIT) },
               { "forget-vote", RAFT_PLANT_FORGET_VOTE, V(SIM_V_ELECTION) | V(SIM_V_LOG_MATCHING) },
               { "no-leader-noop", RAFT_PLANT_NO_LEADER_NOOP, V(SIM_V_LIVENESS) },
               { "local-read", RAFT_PLANT_LOCAL_READ, V(SIM_V_LINEARIZABLE) } };

static void membership_op(sim *s)
{
    int g = (int)sim_range(&s->rng, 0, (uint64_t)s->o.groups - 1), slot;
    const raft_group *l = sim_leader(s, g, &slot);
    if (!l)
        return;
    rhost *h = s->nodes[slot].h;
    const raft_conf *c = raft_conf_get(l);
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->m[i].voter)
            continue;
        int rc = rhost_conf(h, (uint64_t)g, RAFT_CONF_PROMOTE, c->m[i].id);
        sim_log(s, "group %d: promote %llu: %s", g, (unsigned long long)c->m[i].id,
                raft_strerror(rc));
        if (!rc)
            s->st_conf++;
        s->nodes[slot].dirty = 1;
        return;
    }
    if ((int)raft_conf_voters(c) > s->o.replicas) {
        uint64_t victims[RAFT_MAX_MEMBERS];
        int n = 0;
        for (uint32_t i = 0; i < c->n; i++)
            if (c->m[i].id != raft_id(l))
                victims[n++] = c->m[i].id;
        uint64_t v = victims[sim_range(&s->rng, 0, (uint64_t)n - 1)];
        int rc = rhost_conf(h, (uint64_t)g, RAFT_CONF_REMOVE, v);
        sim_log(s, "group %d: remove %llu: %s", g, (unsigned long long)v, raft_strerror(rc));
        if (!rc)
            s->st_conf++;
        s->nodes[slot].dirty = 1;
        return;
    }
    if (s->n_nodes >= SIM_MAX_NODES)
        return;
    /* a learner on a new node: its first replica id, above every id so far */
    uint64_t node = s->next_id, id = rhost_first_id((uint8_t)node);
    int rc = rhost_conf(h, (uint64_t)g, RAFT_CONF_ADD_LEARNER, id);
    sim_log(s, "group %d: add learner %llu: %s", g, (unsigned long long)id, raft_strerror(rc));
    s->nodes[slot].dirty = 1;
    if (rc)
        return;
    s->st_conf++;
    s->next_id++;
    if (sim_node_add(s, node, 1 << g, 0) < 0)
        sim_fail(s, "cannot add node");
}

static void decommission(sim *s)
{
    for (int g = 0; g < s->o.groups; g++) {
        int lslot;
        const raft_group *l = sim_leader(s, g, &lslot);
        if (!l || raft_commit(l) != raft_last_index(l))
            continue;
        const raft_conf *c = raft_conf_get(l);
        for (int i = 0; i < s->n_nodes; i++) {
            sim_node *nd = &s->nodes[i];
            if (!nd->used || !nd->rep[g].hosted || raft_conf_find(c, nd->rep[g].id) >= 0)
                continue;
            if (sim_tick_now(s) < nd->rep[g].created_tick + 200)
                continue;
            sim_replica_drop(s, i, g);
        }
    }
}

static void transfer_op(sim *s)
{
    int g = (int)sim_range(&s->rng, 0, (uint64_t)s->o.groups - 1), slot;
    const raft_group *l = sim_leader(s, g, &slot);
    if (!l)
        return;
    const raft_conf *c = raft_conf_get(l);
    uint64_t cands[RAFT_MAX_MEMBERS];
    int n = 0;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->m[i].voter && c->m[i].id != raft_id(l))
            cands[n++] = c->m[i].id;
    if (!n)
        return;
    uint64_t to = cands[sim_range(&s->rng, 0, (uint64_t)n - 1)];
    int rc = rhost_transfer(s->nodes[slot].h, (uint64_t)g, to);
    sim_log(s, "group %d: transfer %llu -> %llu: %s", g, (unsigned long long)raft_id(l),
            (unsigned long long)to, raft_strerror(rc));
    if (!rc)
        s->st_transfers++;
    s->nodes[slot].dirty = 1;
}

static void crash_op(sim *s)
{
    int cands[SIM_MAX_NODES], n = 0;
    for (int i = 0; i < s->n_nodes; i++)
        if (s->nodes[i].used && s->nodes[i].alive)
            cands[n++] = i;
    if (n)
        sim_node_crash(s, cands[sim_range(&s->rng, 0, (uint64_t)n - 1)], "crash");
}

static void heal(sim *s)
{
    sim_log(s, "=== heal ===");
    s->faults_on = 0;
    sim_net_heal(s);
    for (int i = 0; i < s->n_nodes; i++)
        if (s->nodes[i].used && !s->nodes[i].alive)
            sim_node_restart(s, i);
}

static void barrier_and_transfer(sim *s)
{
    for (int g = 0; g < s->o.groups; g++) {
        int slot;
        const raft_group *l = sim_leader(s, g, &slot);
        if (!l)
            continue;
        sim_creq q;
        memset(&q, 0, sizeof q);
        q.group = g;
        q.op = OP_BARRIER;
        sim_deliver_creq(s, slot, &q);
        transfer_op(s); /* may pick another group: also fine */
    }
}

static void final_check(sim *s)
{
    for (int g = 0; g < s->o.groups && !s->failed; g++) {
        int ls;
        const raft_group *l = sim_leader(s, g, &ls);
        if (!l) {
            sim_fail_as(s, SIM_V_LIVENESS, "liveness: group %d has no leader at the end", g);
            return;
        }
        uint64_t last = raft_last_index(l);
        if (raft_commit(l) != last) {
            sim_fail_as(s, SIM_V_LIVENESS,
                        "liveness: group %d leader %llu has uncommitted entries %llu..%llu "
                        "long after the network healed",
                        g, (unsigned long long)raft_id(l), (unsigned long long)raft_commit(l) + 1,
                        (unsigned long long)last);
            return;
        }
        const raft_conf *c = raft_conf_get(l);
        const sim_replica *lr = &s->nodes[ls].rep[g];
        for (uint32_t i = 0; i < c->n; i++) {
            int slot = sim_slot_of(s, rhost_node_of(c->m[i].id));
            if (slot < 0 || !s->nodes[slot].rep[g].hosted)
                continue;
            const sim_replica *r = &s->nodes[slot].rep[g];
            if (!s->nodes[slot].alive || r->applied != last) {
                sim_fail_as(s, SIM_V_LIVENESS,
                            "liveness: group %d member %llu applied %llu of %llu at the end", g,
                            (unsigned long long)c->m[i].id, (unsigned long long)r->applied,
                            (unsigned long long)last);
                return;
            }
            if (memcmp(r->kv, lr->kv, sizeof r->kv))
                sim_fail_as(s, SIM_V_COMMIT,
                            "group %d: member %llu state differs from the leader's", g,
                            (unsigned long long)c->m[i].id);
        }
    }
}

static void dump_state(sim *s)
{
    for (int i = 0; i < s->n_nodes; i++) {
        sim_node *nd = &s->nodes[i];
        for (int g = 0; g < s->o.groups; g++) {
            sim_replica *r = &nd->rep[g];
            if (!nd->used || !r->hosted)
                continue;
            const raft_group *rg = nd->h ? rhost_group_core(nd->h, (uint64_t)g) : NULL;
            if (!rg) {
                printf("  node %llu group %d: down\n", (unsigned long long)nd->id, g);
                continue;
            }
            const raft_conf *c = raft_conf_get(rg);
            printf("  node %llu group %d: role %d term %llu leader %llu commit %llu last %llu "
                   "applied %llu snap %llu sm-snap %llu conf",
                   (unsigned long long)nd->id, g, raft_role(rg), (unsigned long long)raft_term(rg),
                   (unsigned long long)raft_leader(rg), (unsigned long long)raft_commit(rg),
                   (unsigned long long)raft_last_index(rg), (unsigned long long)r->applied,
                   (unsigned long long)r->disk.snap.index, (unsigned long long)r->disk.sm.index);
            for (uint32_t k = 0; k < c->n; k++)
                printf(" %llu%s", (unsigned long long)c->m[k].id, c->m[k].voter ? "" : "(l)");
            char d[512];
            raft_describe(rg, d, sizeof d);
            printf("\n    %s\n", d);
        }
    }
}

static void judge_history(sim *s)
{
    for (int g = 0; g < s->o.groups && !s->failed; g++)
        for (int k = 0; k < s->n_keys && !s->failed; k++) {
            sim_hist *h = &s->hist[g][k];
            int r = lincheck_register(h->ops, h->n);
            if (r == 0)
                sim_fail_as(s, SIM_V_LINEARIZABLE,
                            "group %d key %d: history of %zu operations is not linearizable", g, k,
                            h->n);
            else if (r < 0)
                fprintf(stderr, "seed %llu: group %d key %d: linearizability check gave up\n",
                        (unsigned long long)s->seed, g, k);
        }
}

/* Runs one seed; returns 1 if it passed.  *why gets the failure, *viol
 * its violation class. */
static int run_seed(const sim_opts *o, uint64_t seed, char *why, size_t whylen, sim_violation *viol,
                    sim *s, uint64_t tot[8])
{
    memset(s, 0, sizeof *s);
    s->o = *o;
    s->seed = seed;
    s->rng.s = seed * 0x2545f4914f6cdd1dull + 12345;
    s->p_drop = (double)sim_range(&s->rng, 0, 10) / 100.0;
    s->p_dup = (double)sim_range(&s->rng, 0, 3) / 100.0;
    s->delay_max = (uint32_t)sim_range(&s->rng, 2, sim_chance(&s->rng, 0.3) ? 150 : 40);
    s->p_crash_round = (double)sim_range(&s->rng, 1, 20) / 10000.0;
    s->p_disk_err = (double)sim_range(&s->rng, 0, 5) / 10000.0;
    static const uint32_t ents[] = { 1, 1, 3, 64 }, infl[] = { 1, 2, 4, 8 },
                          comp[] = { 8, 25, 60, 0 /* never */ }, chunk[] = { 7, 16, 64, 4096 };
    s->max_msg_entries = ents[sim_range(&s->rng, 0, 3)];
    s->max_inflight = infl[sim_range(&s->rng, 0, 3)];
    s->compact_every = comp[sim_range(&s->rng, 0, 3)];
    s->snap_chunk = chunk[sim_range(&s->rng, 0, 3)];
    s->n_keys = 3;
    s->n_clients = 3;
    uint64_t F = o->fault_ticks;
    uint64_t fault_every = sim_range(&s->rng, 4, 50);
    s->restart_max = sim_chance(&s->rng, 0.5) ? 6 : 120;
    s->p_young = sim_chance(&s->rng, 0.5) ? (double)sim_range(&s->rng, 10, 60) / 100.0 : 0;
    s->p_vote_crash = sim_chance(&s->rng, 0.5) ? (double)sim_range(&s->rng, 5, 40) / 100.0 : 0;
    s->p_snap_read_err = sim_chance(&s->rng, 0.5) ? (double)sim_range(&s->rng, 1, 10) / 100.0 : 0;
    for (int i = 0; i < o->replicas; i++)
        if (sim_node_add(s, (uint64_t)i + 1, (1 << o->groups) - 1, 1) < 0)
            break;
    s->next_id = (uint64_t)o->replicas + 1;
    s->faults_on = 1;
    s->clients_on = 1;
    uint64_t t_leader = F + 150, t_stop = F + 320, t_barrier = F + 440, t_end = F + 640;
    for (s->now = 0; s->now <= t_end * SIM_TICK && !s->failed; s->now++) {
        sim_event e;
        while (!s->failed && sim_ev_pop_due(s, s->now, &e)) {
            if (e.type == EV_MSG) {
                sim_deliver_msg(s, e.node, e.msg);
                free(e.msg);
            } else if (e.type == EV_CREQ) {
                sim_deliver_creq(s, e.node, &e.req);
            } else if (e.type == EV_CRESP) {
                sim_client_resp(s, &e.resp);
            }
        }
        uint64_t t = sim_tick_now(s);
        for (int i = 0; i < s->n_nodes; i++)
            if (s->faults_on && s->nodes[i].crash_at && s->now >= s->nodes[i].crash_at &&
                s->nodes[i].alive)
                sim_node_crash(s, i, "nemesis: young leader");
        for (int i = 0; i < s->n_nodes; i++) {
            sim_node *nd = &s->nodes[i];
            if (!nd->used || !nd->alive || s->now % SIM_TICK != nd->phase)
                continue;
            if (rhost_tick(nd->h))
                sim_fail(s, "rhost_tick failed");
            nd->dirty = 1;
        }
        if (s->now % SIM_TICK == 0) {
            for (int i = 0; i < s->n_nodes; i++)
                if (s->nodes[i].used && !s->nodes[i].alive && s->nodes[i].restart_at &&
                    t >= s->nodes[i].restart_at && s->faults_on)
                    sim_node_restart(s, i);
            if (t < F && t > 0 && t % fault_every == 0) {
                uint64_t k = sim_range(&s->rng, 0, 9);
                if (k < 4)
                    sim_net_fault(s);
                else if (k < 6)
                    crash_op(s);
                else if (k < 8)
                    membership_op(s);
                else
                    transfer_op(s);
            }
            if (t == F) {
                heal(s);
                s->heal_tick = F;
                s->live_tick = t_leader;
            }
            if (t == t_leader)
                for (int g = 0; g < o->groups; g++) {
                    int sl;
                    if (!sim_leader(s, g, &sl))
                        sim_fail_as(s, SIM_V_LIVENESS,
                                    "liveness: group %d has no leader %llu ticks after the "
                                    "network healed",
                                    g, (unsigned long long)(t_leader - F));
                }
            if (t == t_stop)
                s->clients_on = 0;
            if (t == t_barrier)
                barrier_and_transfer(s);
            if (t % 10 == 0 && t < t_barrier)
                decommission(s);
            sim_clients_step(s);
        }
        for (int i = 0; i < s->n_nodes; i++)
            sim_node_ready(s, i);
    }
    if (!s->failed)
        final_check(s);
    if (s->failed && o->verbose)
        dump_state(s);
    if (!s->failed)
        judge_history(s);
    int ok = !s->failed;
    if (!ok)
        snprintf(why, whylen, "%s", s->failure);
    *viol = ok ? SIM_V_NONE : s->violation;
    if (o->verbose)
        printf("seed %llu: msgs %llu ops %llu ok %llu timeout, crashes %llu, snaps "
               "%llu, conf %llu, transfers %llu, elections %llu\n",
               (unsigned long long)seed, (unsigned long long)s->st_msgs,
               (unsigned long long)s->st_ops_ok, (unsigned long long)s->st_ops_timeout,
               (unsigned long long)s->st_crashes, (unsigned long long)s->st_snaps,
               (unsigned long long)s->st_conf, (unsigned long long)s->st_transfers,
               (unsigned long long)s->st_elections);
    tot[0] += s->st_ops_ok;
    tot[1] += s->st_ops_timeout;
    tot[2] += s->st_crashes;
    tot[3] += s->st_snaps;
    tot[4] += s->st_conf;
    tot[5] += s->st_transfers;
    tot[6] += s->st_elections;
    tot[7] += s->st_msgs;
    sim_ev_free_all(s);
    for (int i = 0; i < s->n_nodes; i++)
        sim_node_free(s, i);
    sim_hist_free(s);
    sim_check_free(s);
    return ok;
}

static void usage_to(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [--seeds N] [--first S] [--replicas 3|5] [--groups G]\n"
            "          [--plant old-term-commit|forget-vote|no-leader-noop|local-read]\n"
            "          [--expect-catch] [--fault-ticks T] [--store DIR] [-v] [--help]\n"
            "Runs seeds S..S+N-1 of the deterministic Raft cluster simulator; exits 0 only\n"
            "when every seed passed; the last line reads 'N passed, M failed'.\n"
            "--expect-catch (with --plant): stop at the first failed seed; exit 0 only\n"
            "if it is a violation the planted bug causes.\n"
            "Soak: --seeds 100000 (see docs/RAFT.md).\n",
            argv0);
}

static void usage(const char *argv0)
{
    usage_to(stderr, argv0);
}

/* main: contract (arguments, ownership, errors) in sim.h. */
int main(int argc, char **argv)
{
    sim_opts o;
    memset(&o, 0, sizeof o);
    o.first = 1;
    o.seeds = 100;
    o.replicas = 3;
    o.groups = 2;
    o.fault_ticks = 1200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--seeds") && v) {
            o.seeds = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--first") && v) {
            o.first = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--replicas") && v) {
            o.replicas = atoi(v);
            i++;
        } else if (!strcmp(a, "--groups") && v) {
            o.groups = atoi(v);
            i++;
        } else if (!strcmp(a, "--fault-ticks") && v) {
            o.fault_ticks = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--plant") && v) {
            size_t k;
            for (k = 0; k < sizeof plants / sizeof plants[0]; k++)
                if (!strcmp(v, plants[k].name))
                    break;
            if (k == sizeof plants / sizeof plants[0]) {
                usage(argv[0]);
                return 2;
            }
            o.plants |= plants[k].bit;
            i++;
        } else if (!strcmp(a, "--store") && v) {
            o.store_dir = v;
            i++;
        } else if (!strcmp(a, "--expect-catch")) {
            o.expect_catch = 1;
        } else if (!strcmp(a, "-v")) {
            o.verbose = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_to(stdout, argv[0]);
            return 0;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if ((o.replicas != 3 && o.replicas != 5) || o.groups < 1 || o.groups > SIM_MAX_GROUPS ||
        o.fault_ticks < 10 || (o.expect_catch && !o.plants)) {
        usage(argv[0]);
        return 2;
    }
    char extra[256] = "";
    size_t el = 0;
    uint32_t causes = 0; /* the violations the plants cause */
    for (size_t k = 0; k < sizeof plants / sizeof plants[0]; k++)
        if (o.plants & plants[k].bit) {
            el += (size_t)snprintf(extra + el, sizeof extra - el, " --plant %s", plants[k].name);
            causes |= plants[k].causes;
        }
    if (o.fault_ticks != 1200)
        el += (size_t)snprintf(extra + el, sizeof extra - el, " --fault-ticks %llu",
                               (unsigned long long)o.fault_ticks);
    if (o.store_dir)
        snprintf(extra + el, sizeof extra - el, " --store %s", o.store_dir);
    sim *s = calloc(1, sizeof *s);
    if (!s)
        return 2;
    uint64_t passed = 0, failed = 0, tot[8] = { 0 };
    int caught = 0; /* --expect-catch: the failure is the plant's */
    for (uint64_t seed = o.first; seed < o.first + o.seeds; seed++) {
        char why[600];
        sim_violation v = SIM_V_NONE;
        if (run_seed(&o, seed, why, sizeof why, &v, s, tot)) {
            passed++;
            continue;
        }
        failed++;
        printf("seed %llu FAILED: %s [%s]\n", (unsigned long long)seed, why, sim_violation_name(v));
        printf("  replay: %s --first %llu --seeds 1 --replicas %d --groups %d%s\n", argv[0],
               (unsigned long long)seed, o.replicas, o.groups, extra);
        fflush(stdout);
        if (o.expect_catch) {
            caught = (causes & V(v)) != 0;
            if (caught) {
                printf("caught after %llu seeds: %s, a violation the plant causes\n",
                       (unsigned long long)(seed - o.first + 1), sim_violation_name(v));
            } else {
                printf("NOT CAUGHT: seed %llu failed with a %s violation, which the plant does "
                       "not cause; it causes:",
                       (unsigned long long)seed, sim_violation_name(v));
                for (int c = 0; c < SIM_V_COUNT; c++)
                    if (causes & V(c))
                        printf(" %s", sim_violation_name((sim_violation)c));
                printf("\n");
            }
            break;
        }
    }
    free(s);
    printf("totals: %llu client ops completed, %llu timed out; %llu crashes, %llu "
           "snapshots installed, %llu membership changes, %llu transfers, %llu "
           "leaders elected, %llu messages\n",
           (unsigned long long)tot[0], (unsigned long long)tot[1], (unsigned long long)tot[2],
           (unsigned long long)tot[3], (unsigned long long)tot[4], (unsigned long long)tot[5],
           (unsigned long long)tot[6], (unsigned long long)tot[7]);
    printf("%llu passed, %llu failed\n", (unsigned long long)passed, (unsigned long long)failed);
    if (o.expect_catch) {
        if (!failed)
            printf("NOT CAUGHT: no seed failed\n");
        return caught ? 0 : 1;
    }
    return failed ? 1 : 0;
}
