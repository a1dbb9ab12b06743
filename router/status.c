/*
 * status.c — STATUS: asks every storage and index node for NODE_STATUS in
 * parallel and answers one map per node (the router itself first):
 *   {"name", "role", "url", "state": "up"|"down", "status": <node's map>}
 * or, for a node that did not answer, "error": reason instead of "status".
 */
#include <stdlib.h>
#include <string.h>

#include "router.h"
#include "sx_errors.h"
#include "link_auth.h"

/* The router's own figures: whether its links are authenticated and its
 * clients must show a certificate (TLS), requests served, failed, what the
 * combined PUT path did (wcomb.c), calls made in-process to the storage
 * node hosting it (0 for a router process), catalog version. */
static void put_self(router *rt, mp_buf *acc)
{
    const cat_catalog *cat = NULL;
    uint64_t local = 0;

    for (int i = 0; i < rt->cfg->nnodes; i++)
        local += net_peer_local_calls(rt->peers[i]);
    mp_put_map(acc, 9);
    mp_put_cstr(acc, "links_authenticated");
    mp_put_bool(acc, link_auth_enabled());
    mp_put_cstr(acc, "clients_tls"); /* client certificates required */
    mp_put_bool(acc, rt->cfg->tls_ca != NULL);
    mp_put_cstr(acc, "requests");
    mp_put_u64(acc, atomic_load_explicit(&rt->nreq, memory_order_relaxed));
    mp_put_cstr(acc, "errors");
    mp_put_u64(acc, atomic_load_explicit(&rt->nerr, memory_order_relaxed));
    mp_put_cstr(acc, "combined_puts");
    mp_put_u64(acc, atomic_load_explicit(&rt->comb_puts, memory_order_relaxed));
    mp_put_cstr(acc, "combined_writes");
    mp_put_u64(acc, atomic_load_explicit(&rt->comb_writes, memory_order_relaxed));
    mp_put_cstr(acc, "combined_reruns");
    mp_put_u64(acc, atomic_load_explicit(&rt->comb_reruns, memory_order_relaxed));
    mp_put_cstr(acc, "in_process_calls");
    mp_put_u64(acc, local);
    mp_put_cstr(acc, "catalog_version");
    if (catcache_get(rt->cc, 0, &cat) == 0 && cat != NULL)
        mp_put_u64(acc, cat->version);
    else
        mp_put_nil(acc);
}

/* Appends one node's map to acc (c == NULL: this router). */
static void put_node(router *rt, mp_buf *acc, const cfg_node *nd, const rt_rpc *c,
                     const msg_NODE_STATUS_rep *rep)
{
    bool up = c == NULL || c->err == 0;

    mp_put_map(acc, 5);
    mp_put_cstr(acc, "name");
    mp_put_cstr(acc, nd->name);
    mp_put_cstr(acc, "role");
    mp_put_cstr(acc, rt_role_name(nd->role));
    mp_put_cstr(acc, "url");
    mp_put_cstr(acc, nd->url);
    mp_put_cstr(acc, "state");
    mp_put_cstr(acc, up ? "up" : "down");
    if (c == NULL) {
        mp_put_cstr(acc, "status");
        put_self(rt, acc);
    } else if (up && rep->status.n > 0) {
        mp_put_cstr(acc, "status");
        mp_put_raw(acc, rep->status.p, rep->status.n);
    } else if (up) {
        mp_put_cstr(acc, "status");
        mp_put_nil(acc);
    } else {
        mp_put_cstr(acc, "error");
        mp_put_cstr(acc, c->msg);
    }
}

int rt_h_status(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    const cfg_cluster *cfg = rt->cfg;
    rt_rpc *calls = NULL;
    msg_NODE_STATUS_rep *reps = NULL;
    msg_NODE_STATUS_req req;
    msg_STATUS_rep rep;
    size_t *off = NULL;
    mp_buf acc;
    int i, m = 0, k, rc = 0;

    (void)p;
    (void)n;
    memset(&req, 0, sizeof(req));
    memset(&rep, 0, sizeof(rep));
    mp_buf_init(&acc);
    calls = calloc((size_t)cfg->nnodes + 1, sizeof(*calls));
    reps = calloc((size_t)cfg->nnodes + 1, sizeof(*reps));
    off = calloc((size_t)cfg->nnodes + 2, sizeof(*off));
    rep.nodes.v = calloc((size_t)cfg->nnodes + 1, sizeof(mp_span));
    if (calls == NULL || reps == NULL || off == NULL || rep.nodes.v == NULL) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    for (i = 0; i < cfg->nnodes; i++) {
        if (!rt->dialed[i])
            continue;
        calls[m].node = i;
        calls[m].type = MSG_NODE_STATUS;
        calls[m].req = &req;
        calls[m].rep = &reps[m];
        m++;
    }
    rc = rt_rpc_run(rt, calls, m);
    if (rc != 0) {
        rc = rt_errf(e, rc, "out of memory");
        goto out;
    }
    off[0] = 0;
    put_node(rt, &acc, &cfg->nodes[rt->self], NULL, NULL);
    for (k = 0; k < m; k++) {
        off[k + 1] = acc.sb.size;
        put_node(rt, &acc, &cfg->nodes[calls[k].node], &calls[k], &reps[k]);
    }
    off[m + 1] = acc.sb.size;
    if (acc.oom) {
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
        goto out;
    }
    for (k = 0; k <= m; k++) {
        rep.nodes.v[k].p = (const uint8_t *)acc.sb.data + off[k];
        rep.nodes.v[k].n = off[k + 1] - off[k];
    }
    rep.nodes.n = (uint32_t)m + 1;
    if (msg_encode_rep(MSG_STATUS, &rep, out) != 0)
        rc = rt_errf(e, SX_ENOMEM, "out of memory");
out:
    if (calls != NULL)
        rt_rpc_release(calls, m);
    free(calls);
    free(reps);
    free(off);
    free(rep.nodes.v);
    mp_buf_free(&acc);
    return rc;
}
