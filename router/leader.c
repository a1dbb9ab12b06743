/*
 * leader.c — the router's leader cache and the walk of one call through a
 * partition's replicas (leader.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader.h"
#include "sx_errors.h"

int rt_leaders_init(rt_leaders *lc, const cfg_cluster *cfg)
{
    int n = cfg->nstorage + cfg->nindex, nn = cfg->nnodes;
    size_t nl = (size_t)(n > 0 ? n : 1) * CFG_MAX_REPLICAS;

    memset(lc, 0, sizeof(*lc));
    lc->cfg = cfg;
    lc->nparts = n;
    lc->node = malloc((size_t)(n > 0 ? n : 1) * sizeof(*lc->node));
    lc->lost_at = malloc(nl * sizeof(*lc->lost_at));
    lc->stall_at = malloc((size_t)(nn > 0 ? nn : 1) * sizeof(*lc->stall_at));
    lc->answer_at = malloc((size_t)(nn > 0 ? nn : 1) * sizeof(*lc->answer_at));
    if (lc->node == NULL || lc->lost_at == NULL || lc->stall_at == NULL || lc->answer_at == NULL) {
        rt_leaders_free(lc);
        return SX_ENOMEM;
    }
    for (int g = 0; g < n; g++)
        atomic_init(&lc->node[g],
                    g < cfg->nstorage ? cfg->storage[g].node : cfg->index[g - cfg->nstorage].node);
    for (size_t k = 0; k < nl; k++)
        atomic_init(&lc->lost_at[k], 0);
    for (int i = 0; i < nn; i++) {
        atomic_init(&lc->stall_at[i], 0);
        atomic_init(&lc->answer_at[i], 0);
    }
    return 0;
}

void rt_leaders_free(rt_leaders *lc)
{
    free(lc->node);
    free(lc->lost_at);
    free(lc->stall_at);
    free(lc->answer_at);
    lc->node = NULL;
    lc->lost_at = NULL;
    lc->stall_at = NULL;
    lc->answer_at = NULL;
    lc->nparts = 0;
}

/* Where p lies in array parts[0..n), or -1 (compared as addresses: p may
 * point anywhere). */
static int index_in(const cfg_part *parts, int n, const cfg_part *p)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)parts, hi = (uintptr_t)(parts + n);

    if (parts == NULL || n <= 0 || a < lo || a >= hi || (a - lo) % sizeof(*p) != 0)
        return -1;
    return (int)((a - lo) / sizeof(*p));
}

/* p's index in lc's partitions (storage, then index), or -1 when it is not
 * one of them. */
static int part_index(const rt_leaders *lc, const cfg_part *p)
{
    const cfg_cluster *cfg = lc->cfg;
    int k;

    if (p == NULL || cfg == NULL || lc->node == NULL)
        return -1;
    if ((k = index_in(cfg->storage, cfg->nstorage, p)) >= 0)
        return k;
    if ((k = index_in(cfg->index, cfg->nindex, p)) >= 0)
        return cfg->nstorage + k;
    return -1;
}

bool rt_leader_walks(const rt_leaders *lc, const cfg_part *p)
{
    return part_index(lc, p) >= 0 && p->nrep > 1;
}

int rt_leader_get(const rt_leaders *lc, const cfg_part *p)
{
    if (p == NULL)
        return -1;
    if (!rt_leader_walks(lc, p))
        return p->node;
    return atomic_load_explicit(&lc->node[part_index(lc, p)], memory_order_relaxed);
}

void rt_leader_note(rt_leaders *lc, const cfg_part *p, int node)
{
    if (rt_leader_walks(lc, p) && cfg_part_on(p, node))
        atomic_store_explicit(&lc->node[part_index(lc, p)], node, memory_order_relaxed);
}

/* True when node is an index into lc's nodes (and lc has its records). */
static bool node_ok(const rt_leaders *lc, int node)
{
    return lc->cfg != NULL && lc->stall_at != NULL && node >= 0 && node < lc->cfg->nnodes;
}

void rt_leader_seen(rt_leaders *lc, int node, rt_lhow how, uint64_t now_ms)
{
    if (!node_ok(lc, node) || how == RT_LH_LOCAL)
        return;
    if (now_ms == 0)
        now_ms = 1; /* 0 is "never" */
    if (how == RT_LH_ANSWERED)
        atomic_store_explicit(&lc->answer_at[node], now_ms, memory_order_relaxed);
    else
        atomic_store_explicit(&lc->stall_at[node], now_ms, memory_order_relaxed);
}

/* When node's last failure on the way happened if it answered nothing
 * since, else 0. */
static uint64_t unanswered_since(const rt_leaders *lc, int node)
{
    uint64_t st, an;

    if (!node_ok(lc, node))
        return 0;
    st = atomic_load_explicit(&lc->stall_at[node], memory_order_relaxed);
    an = atomic_load_explicit(&lc->answer_at[node], memory_order_relaxed);
    return st > an ? st : 0;
}

bool rt_leader_unanswered(const rt_leaders *lc, int node)
{
    return unanswered_since(lc, node) != 0;
}

/* Whether a mark made at `at` (0: none) is less than RT_LW_SUSPECT_MS old
 * at now (a mark from another thread may be a little ahead of now). */
static bool fresh(uint64_t at, uint64_t now)
{
    return at != 0 && now < at + RT_LW_SUSPECT_MS;
}

/* The slot of node in p's replicas, or -1. */
static int slot_in(const cfg_part *p, int node)
{
    for (int k = 0; k < p->nrep; k++)
        if (p->rep[k] == node)
            return k;
    return -1;
}

bool rt_leader_suspect(const rt_leaders *lc, const cfg_part *p, int node, uint64_t now_ms)
{
    int pi, k;

    if (fresh(unanswered_since(lc, node), now_ms))
        return true;
    if (!rt_leader_walks(lc, p) || (k = slot_in(p, node)) < 0)
        return false;
    pi = part_index(lc, p);
    return fresh(atomic_load_explicit(&lc->lost_at[(size_t)pi * CFG_MAX_REPLICAS + (size_t)k],
                                      memory_order_relaxed),
                 now_ms);
}

int rt_lw_pause_ms(int cycle)
{
    int ms = RT_LW_PAUSE_MIN_MS;

    for (int k = 0; k < cycle && ms < RT_LW_PAUSE_MAX_MS; k++)
        ms *= 2;
    return ms < RT_LW_PAUSE_MAX_MS ? ms : RT_LW_PAUSE_MAX_MS;
}

/* How much a replica is to be avoided at now: 0 not at all, 1 unanswered
 * (since a while), 2 suspect. */
static int avoid(const rt_lwalk *w, int node, uint64_t now)
{
    if (rt_leader_suspect(w->lc, w->part, node, now))
        return 2;
    return rt_leader_unanswered(w->lc, node) ? 1 : 0;
}

/* The replica to try after slot `from`, in the order of part->rep, least
 * avoided first (the first of those in rotation). untried: only replicas
 * not tried in this cycle and not suspect (-1 when there is none); else
 * any, itself last. */
static int pick(const rt_lwalk *w, int from, bool untried, uint64_t now)
{
    int n = w->part->nrep, best = -1, best_level = 3;

    for (int d = 1; d <= n; d++) {
        int k = (from + d) % n, level;

        if (untried && (w->in_cycle_tried & (1u << k)))
            continue;
        level = avoid(w, w->part->rep[k], now);
        if ((untried && level == 2) || level >= best_level)
            continue;
        best = w->part->rep[k];
        best_level = level;
    }
    return best;
}

void rt_lw_start(rt_lwalk *w, rt_leaders *lc, const cfg_part *p, bool write, uint64_t now_ms)
{
    memset(w, 0, sizeof(*w));
    w->lc = lc;
    w->part = p;
    w->write = write;
    w->walks = rt_leader_walks(lc, p);
    w->node = rt_leader_get(lc, p);
    if (w->walks) {
        int k = slot_in(p, w->node), level = avoid(w, w->node, now_ms);
        if (k < 0)
            k = p->nrep - 1;
        if (level > 0) {
            int other = pick(w, k, false, now_ms);
            if (other >= 0 && avoid(w, other, now_ms) < level)
                w->node = other;
        }
    }
}

int rt_lw_attempt_ms(const rt_lwalk *w, int left_ms)
{
    int bound = w->write ? RT_LW_WRITE_ATTEMPT_MS : RT_LW_READ_ATTEMPT_MS, k;

    if (left_ms < 1)
        return 1;
    if (!w->walks)
        return left_ms;
    k = slot_in(w->part, w->node);
    if (k >= 0 && (w->lost & (1u << k)))
        return left_ms; /* it timed out once already: slow, not stalled */
    return left_ms < bound ? left_ms : bound;
}

/* Whether a failed attempt may be made again at another replica: the node
 * did nothing (SX_ENOTLEADER, or nothing was sent), or it was a read. */
static bool may_retry(const rt_lwalk *w, int err, rt_lhow how)
{
    switch (how) {
    case RT_LH_UNSENT: return true;
    case RT_LH_LOCAL: return false;
    case RT_LH_LOST: return !w->write;
    case RT_LH_ANSWERED: break;
    }
    if (err == SX_ENOTLEADER)
        return true;
    return !w->write && (err == SX_ETIMEDOUT || err == SX_ENET || err == SX_EUNAVAIL);
}

/* Marks (at now, or clears: now 0) replica slot k of w's partition as
 * having left a call unanswered. */
static void mark_lost(rt_lwalk *w, int k, uint64_t now)
{
    int pi = part_index(w->lc, w->part);

    if (pi >= 0 && k >= 0)
        atomic_store_explicit(&w->lc->lost_at[(size_t)pi * CFG_MAX_REPLICAS + (size_t)k], now,
                              memory_order_relaxed);
}

rt_lstep rt_lw_next(rt_lwalk *w, int err, uint64_t hint, rt_lhow how, uint64_t now_ms)
{
    int slot, next = -1, n;

    w->attempts++;
    w->pause_ms = 0;
    if (!w->walks)
        return RT_LW_DONE;
    n = w->part->nrep;
    slot = slot_in(w->part, w->node);
    if (slot >= 0) {
        w->tried |= 1u << slot;
        w->in_cycle_tried |= 1u << slot;
    }
    w->in_cycle++;
    if (how == RT_LH_ANSWERED && err == 0) {
        rt_leader_note(w->lc, w->part, w->node);
        mark_lost(w, slot, 0);
        return RT_LW_DONE;
    }
    if (how == RT_LH_LOST && slot >= 0) {
        mark_lost(w, slot, now_ms != 0 ? now_ms : 1);
        w->lost |= 1u << slot;
    }
    if (!may_retry(w, err, how))
        return RT_LW_DONE;
    if (how == RT_LH_ANSWERED && err == SX_ENOTLEADER && hint != 0 && hint <= 255) {
        int h = cfg_node_by_id(w->lc->cfg, (int)hint);
        if (h >= 0 && h != w->node && cfg_part_on(w->part, h) &&
            !rt_leader_suspect(w->lc, w->part, h, now_ms)) {
            next = h;
            rt_leader_note(w->lc, w->part, h);
        }
    }
    if (slot < 0)
        slot = n - 1;
    if (next < 0)
        next = pick(w, slot, true, now_ms);
    if (next < 0 || w->in_cycle >= n) {
        w->pause_ms = rt_lw_pause_ms(w->cycles++);
        w->in_cycle = 0;
        w->in_cycle_tried = 0;
        if (next < 0)
            next = pick(w, slot, false, now_ms);
    }
    w->node = next;
    return RT_LW_RETRY;
}

bool rt_lw_unknown_outcome(const rt_lwalk *w, rt_lhow how)
{
    return w->walks && w->write && how == RT_LH_LOST;
}

void rt_lw_unknown(int err, int waited_ms, char *msg, size_t len)
{
    if (err == SX_ETIMEDOUT)
        snprintf(msg, len, "no answer within %d ms: outcome unknown (may or may not be applied)",
                 waited_ms);
    else
        snprintf(msg, len,
                 "sent, then the connection dropped (%s): outcome unknown (may or may not be "
                 "applied)",
                 sx_strerror(err));
}

int rt_lw_giveup(const rt_lwalk *w, int last_err, const char *last_msg, uint64_t waited_ms,
                 char *msg, size_t len)
{
    const cfg_cluster *cfg = w->lc->cfg;
    char names[CFG_MAX_REPLICAS * 64] = "";
    size_t used = 0;
    bool storage = part_index(w->lc, w->part) < cfg->nstorage;

    for (int k = 0; k < w->part->nrep; k++) {
        int nd = w->part->rep[k];
        if (!(w->tried & (1u << k)) || nd < 0 || nd >= cfg->nnodes || used >= sizeof(names))
            continue;
        int r = snprintf(names + used, sizeof(names) - used, "%s%s", used > 0 ? ", " : "",
                         cfg->nodes[nd].name);
        used = r < 0 ? sizeof(names) : used + (size_t)r;
    }
    snprintf(msg, len, "%s partition %llu: no leader answered within %llu ms (tried %s; last: %s)",
             storage ? "storage" : "index", (unsigned long long)w->part->id,
             (unsigned long long)waited_ms, names[0] ? names : "none",
             last_msg != NULL ? last_msg : "?");
    return last_err == SX_ENOTLEADER ? SX_ENOTLEADER : SX_EUNAVAIL;
}
