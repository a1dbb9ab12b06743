/*
 * host_store.c — persisting a Raft host's rounds and loading its groups on
 * the node's Raft log store (host_store.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_store.h"

/* rhost_store_persist: contract in host_store.h. */
int rhost_store_persist(void *ctx, size_t n, const uint64_t *groups, raft_ready *const *rds,
                        size_t ncomp, const uint64_t *comp_groups, const raft_snap_meta *comps)
{
    raft_store *st = ctx;
    raft_store_batch *b;
    if (raft_store_batch_new(st, &b) != RAFT_OK)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (raft_store_batch_ready(b, groups[i], rds[i]) != RAFT_OK)
            goto bad;
    for (size_t i = 0; i < ncomp; i++)
        if (raft_store_batch_compact(b, comp_groups[i], &comps[i]) != RAFT_OK)
            goto bad;
    return raft_store_commit(b, NULL, 0) == RAFT_OK ? 0 : -1;
bad:
    raft_store_batch_free(b);
    return -1;
}

typedef struct loaded {
    raft_entry *e;
    size_t n, cap;
} loaded;

static int on_entry(void *ctx, const raft_entry *e)
{
    loaded *l = ctx;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        raft_entry *p = realloc(l->e, nc * sizeof *p);
        if (!p)
            return RAFT_ERR_NOMEM;
        l->e = p;
        l->cap = nc;
    }
    raft_entry c = *e;
    c.data = NULL;
    if (e->len) {
        c.data = malloc(e->len);
        if (!c.data)
            return RAFT_ERR_NOMEM;
        memcpy(c.data, e->data, e->len);
    }
    l->e[l->n++] = c;
    return RAFT_OK;
}

static void loaded_free(loaded *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->e[i].data);
    free(l->e);
}

static void msg(char *err, size_t errlen, const char *fmt, unsigned long long group,
                const char *what)
{
    if (err && errlen)
        snprintf(err, errlen, fmt, group, what);
}

/* rhost_store_load_group: contract in host_store.h. */
int rhost_store_load_group(rhost *h, raft_store *st, uint64_t group, uint64_t id,
                           const raft_conf *boot, uint64_t boot_size, uint64_t applied,
                           const rhost_sm_ops *ops, void *sm, uint64_t *bad_index, char *err,
                           size_t errlen)
{
    raft_hard_state hs;
    raft_snap_meta snap;
    loaded l = { 0 };
    if (bad_index)
        *bad_index = 0;
    int rc = raft_store_load(st, group, &hs, &snap, on_entry, &l, bad_index);
    if (rc != RAFT_OK) {
        loaded_free(&l);
        msg(err, errlen, "group %llu: cannot load its Raft log: %s", (unsigned long long)group,
            raft_strerror(rc));
        return rc;
    }
    int empty = !hs.term && !hs.commit && !snap.index && !l.n;
    if (empty && boot) {
        memset(&snap, 0, sizeof snap);
        snap.index = 1;
        snap.term = 1;
        snap.size = boot_size;
        snap.conf = *boot;
        raft_store_batch *b;
        rc = raft_store_batch_new(st, &b);
        if (rc == RAFT_OK) {
            rc = raft_store_batch_compact(b, group, &snap);
            if (rc == RAFT_OK)
                rc = raft_store_commit(b, NULL, 0);
            else
                raft_store_batch_free(b);
        }
        if (rc != RAFT_OK) {
            msg(err, errlen, "group %llu: cannot persist its bootstrap: %s",
                (unsigned long long)group, raft_strerror(rc));
            return rc;
        }
    }
    rc = rhost_group_add(h, group, id, &snap, &hs, l.e, l.n, applied, ops, sm);
    loaded_free(&l);
    if (rc != RAFT_OK)
        msg(err, errlen, "group %llu: cannot start its replica: %s", (unsigned long long)group,
            raft_strerror(rc));
    return rc;
}
