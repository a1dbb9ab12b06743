/*
 * leader.c — the router's leader cache and the walk of one call through a
 * storage partition's replicas (leader.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader.h"
#include "sx_errors.h"

int rt_leaders_init(rt_leaders *lc, const cfg_cluster *cfg)
{
    int n = cfg->nstorage;

    lc->cfg = cfg;
    lc->node = malloc((size_t)(n > 0 ? n : 1) * sizeof(*lc->node));
    if (lc->node == NULL)
        return SX_ENOMEM;
    for (int g = 0; g < n; g++)
        atomic_init(&lc->node[g], cfg->storage[g].node);
    return 0;
}

void rt_leaders_free(rt_leaders *lc)
{
    free(lc->node);
    lc->node = NULL;
}

/* p's index in lc's storage partitions, or -1 when it is not one. */
static int part_index(const rt_leaders *lc, const cfg_part *p)
{
    const cfg_cluster *cfg = lc->cfg;
    uintptr_t a = (uintptr_t)p, lo, hi;

    if (p == NULL || cfg == NULL || lc->node == NULL || cfg->nstorage <= 0)
        return -1;
    /* compared as addresses: p may point anywhere (an index partition) */
    lo = (uintptr_t)cfg->storage;
    hi = (uintptr_t)(cfg->storage + cfg->nstorage);
    if (a < lo || a >= hi || (a - lo) % sizeof(*p) != 0)
        return -1;
    return (int)((a - lo) / sizeof(*p));
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

int rt_lw_pause_ms(int cycle)
{
    int ms = RT_LW_PAUSE_MIN_MS;

    for (int k = 0; k < cycle && ms < RT_LW_PAUSE_MAX_MS; k++)
        ms *= 2;
    return ms < RT_LW_PAUSE_MAX_MS ? ms : RT_LW_PAUSE_MAX_MS;
}

void rt_lw_start(rt_lwalk *w, rt_leaders *lc, const cfg_part *p, bool write)
{
    memset(w, 0, sizeof(*w));
    w->lc = lc;
    w->part = p;
    w->write = write;
    w->walks = rt_leader_walks(lc, p);
    w->node = rt_leader_get(lc, p);
}

/* The slot of node in w's partition's replicas, or -1. */
static int slot_of(const rt_lwalk *w, int node)
{
    for (int k = 0; k < w->part->nrep; k++)
        if (w->part->rep[k] == node)
            return k;
    return -1;
}

/* Whether a failed attempt may be made again at another replica: the node
 * did nothing (SX_ENOTLEADER, or nothing was sent), or it was a read. */
static bool may_retry(const rt_lwalk *w, int err, bool down)
{
    if (down || err == SX_ENOTLEADER)
        return true;
    return !w->write && (err == SX_ETIMEDOUT || err == SX_ENET || err == SX_EUNAVAIL);
}

/* The replica after slot `from` in rotation not yet tried in this cycle;
 * when every one was, simply the one after it. */
static int next_replica(const rt_lwalk *w, int from)
{
    int n = w->part->nrep;

    for (int d = 1; d <= n; d++) {
        int k = (from + d) % n;
        if (!(w->in_cycle_tried & (1u << k)))
            return w->part->rep[k];
    }
    return w->part->rep[(from + 1) % n];
}

rt_lstep rt_lw_next(rt_lwalk *w, int err, uint64_t hint, bool down)
{
    int slot, next = -1;

    w->attempts++;
    w->pause_ms = 0;
    if (!w->walks)
        return RT_LW_DONE;
    slot = slot_of(w, w->node);
    if (slot >= 0) {
        w->tried |= 1u << slot;
        w->in_cycle_tried |= 1u << slot;
    }
    w->in_cycle++;
    if (err == 0 && !down) {
        rt_leader_note(w->lc, w->part, w->node);
        return RT_LW_DONE;
    }
    if (!may_retry(w, err, down))
        return RT_LW_DONE;
    if (err == SX_ENOTLEADER && !down && hint != 0 && hint <= 255) {
        int h = cfg_node_by_id(w->lc->cfg, (int)hint);
        if (h >= 0 && h != w->node && cfg_part_on(w->part, h)) {
            next = h;
            rt_leader_note(w->lc, w->part, h);
        }
    }
    if (next < 0)
        next = next_replica(w, slot >= 0 ? slot : w->part->nrep - 1);
    if (w->in_cycle >= w->part->nrep) {
        w->pause_ms = rt_lw_pause_ms(w->cycles++);
        w->in_cycle = 0;
        w->in_cycle_tried = 0;
    }
    w->node = next;
    return RT_LW_RETRY;
}

int rt_lw_giveup(const rt_lwalk *w, int last_err, const char *last_msg, uint64_t waited_ms,
                 char *msg, size_t len)
{
    const cfg_cluster *cfg = w->lc->cfg;
    char names[CFG_MAX_REPLICAS * 64] = "";
    size_t used = 0;

    for (int k = 0; k < w->part->nrep; k++) {
        int nd = w->part->rep[k];
        if (!(w->tried & (1u << k)) || nd < 0 || nd >= cfg->nnodes || used >= sizeof(names))
            continue;
        int r = snprintf(names + used, sizeof(names) - used, "%s%s", used > 0 ? ", " : "",
                         cfg->nodes[nd].name);
        used = r < 0 ? sizeof(names) : used + (size_t)r;
    }
    snprintf(msg, len,
             "storage partition %llu: no leader answered within %llu ms (tried %s; last: %s)",
             (unsigned long long)w->part->id, (unsigned long long)waited_ms,
             names[0] ? names : "none", last_msg != NULL ? last_msg : "?");
    return last_err == SX_ENOTLEADER ? SX_ENOTLEADER : SX_EUNAVAIL;
}
