/*
 * catalog.c — the router's catalog lookups over the shared catalog cache
 * (proto/cluster/catalog_cache.h): find a table or index in the newest cached
 * catalog, refreshing once when it is missing (another router may have
 * just created it), and turn a miss into a clear error.
 */
#include <stdio.h>

#include "router.h"
#include "sx_errors.h"

/* Newest cached catalog, fetching it if nothing is cached; refresh first
 * when asked. */
static int cat_now(router *rt, bool refresh, const cat_catalog **cat, rt_err *e)
{
    int rc;

    if (refresh) {
        rc = catcache_refresh(rt->cc);
        if (rc != 0)
            return rt_errf(e, rc, "cannot refresh the catalog from node %s: %s",
                           rt->cfg->nodes[rt->cfg->catalog_node].name, sx_strerror(rc));
    }
    rc = catcache_get(rt->cc, 0, cat);
    if (rc != 0 || *cat == NULL)
        return rt_errf(e, rc != 0 ? rc : SX_EUNAVAIL, "cannot fetch the catalog from node %s: %s",
                       rt->cfg->nodes[rt->cfg->catalog_node].name,
                       sx_strerror(rc != 0 ? rc : SX_EUNAVAIL));
    return 0;
}

int rt_table(router *rt, mp_span name, const cat_catalog **cat, const cat_table **t, rt_err *e)
{
    int pass, rc;

    for (pass = 0; pass < 2; pass++) {
        rc = cat_now(rt, pass == 1, cat, e);
        if (rc != 0)
            return rc;
        *t = cat_table_by_name(*cat, (const char *)name.p, name.n);
        if (*t != NULL)
            return 0;
    }
    return rt_errf(e, SX_ENOTABLE, "no table '%.*s'", (int)name.n, (const char *)name.p);
}

int rt_index(router *rt, mp_span table, mp_span index, const cat_catalog **cat, const cat_table **t,
             const cat_index **ix, rt_err *e)
{
    int pass, rc;

    for (pass = 0; pass < 2; pass++) {
        rc = cat_now(rt, pass == 1, cat, e);
        if (rc != 0)
            return rc;
        *t = cat_table_by_name(*cat, (const char *)table.p, table.n);
        *ix = *t != NULL ? cat_index_by_name(*t, (const char *)index.p, index.n) : NULL;
        if (*ix != NULL)
            return 0;
    }
    if (*t == NULL)
        return rt_errf(e, SX_ENOTABLE, "no table '%.*s'", (int)table.n, (const char *)table.p);
    return rt_errf(e, SX_ENOINDEX, "no index '%.*s' on table '%.*s'", (int)index.n,
                   (const char *)index.p, (int)table.n, (const char *)table.p);
}
