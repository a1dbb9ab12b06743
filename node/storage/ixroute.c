/*
 * ixroute.c — the storage node's routes to index partition leaders
 * (ixroute.h).
 */
#include <stdbool.h>
#include <stdlib.h>

#include "ixroute.h"
#include "sx_errors.h"

int ixroute_new(const cfg_cluster *cfg, ixroute **out)
{
    ixroute *r = calloc(1, sizeof(*r));

    *out = NULL;
    if (r == NULL)
        return SX_ENOMEM;
    r->cfg = cfg;
    r->node = calloc(cfg->nindex > 0 ? (size_t)cfg->nindex : 1, sizeof(*r->node));
    if (r->node == NULL) {
        free(r);
        return SX_ENOMEM;
    }
    for (int d = 0; d < cfg->nindex; d++)
        atomic_init(&r->node[d], cfg->index[d].node);
    *out = r;
    return 0;
}

void ixroute_free(ixroute *r)
{
    if (r == NULL)
        return;
    free(r->node);
    free(r);
}

int ixroute_node(const ixroute *r, int d)
{
    return atomic_load(&r->node[d]);
}

/* Errors after which another replica may serve the call. */
static bool moves(int err)
{
    return err == SX_ENOTLEADER || err == SX_ENET || err == SX_ETIMEDOUT || err == SX_EUNAVAIL;
}

void ixroute_fail(ixroute *r, int d, int node, int err, uint64_t hint)
{
    const cfg_part *p = &r->cfg->index[d];
    int next = -1, k;

    if (p->nrep < 2 || !moves(err))
        return;
    if (err == SX_ENOTLEADER && hint > 0 && hint <= 255) {
        int h = cfg_node_by_id(r->cfg, (int)hint);

        if (h >= 0 && h != node && cfg_part_on(p, h))
            next = h;
    }
    if (next < 0) {
        for (k = 0; k < p->nrep && p->rep[k] != node; k++)
            ;
        next = k < p->nrep ? p->rep[(k + 1) % p->nrep] : p->rep[0];
    }
    /* only the route that failed moves: a concurrent success elsewhere
     * may have moved it already */
    atomic_compare_exchange_strong(&r->node[d], &node, next);
}
