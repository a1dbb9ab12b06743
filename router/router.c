/*
 * router.c — the router's life cycle (dial every node, create the catalog
 * cache) and the dispatcher that turns one client frame into one handler
 * call and one reply frame (or one error reply). Also PING.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "router.h"
#include "net.h"
#include "log.h"
#include "sx_errors.h"

int rt_new(const cfg_cluster *cfg, int self, router **out)
{
    router *rt;
    int i, rc;

    rt = calloc(1, sizeof(*rt));
    if (rt == NULL)
        return SX_ENOMEM;
    rt->cfg = cfg;
    rt->self = self;
    if (pthread_mutex_init(&rt->mu, NULL) != 0) {
        free(rt);
        return SX_ENOMEM;
    }
    {
        pthread_condattr_t ca;
        int bad = pthread_condattr_init(&ca) != 0;
        bad = bad || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
              pthread_cond_init(&rt->cv, &ca) != 0;
        pthread_condattr_destroy(&ca);
        if (bad) {
            pthread_mutex_destroy(&rt->mu);
            free(rt);
            return SX_ENOMEM;
        }
    }
    /* (a test lowers it, to see a write the router gave up on refused) */
    rt->timeout_ms = (int)os_env_long("SHARDEX_ROUTER_CALL_MS", 100, SX_CALL_TIMEOUT_MS,
                                      SX_CALL_TIMEOUT_MS);
    rt->peers = calloc((size_t)cfg->nnodes, sizeof(*rt->peers));
    rt->dialed = calloc((size_t)cfg->nnodes, sizeof(*rt->dialed));
    rt->down_until = calloc((size_t)cfg->nnodes, sizeof(*rt->down_until));
    if (rt->peers == NULL || rt->dialed == NULL || rt->down_until == NULL ||
        rt_leaders_init(&rt->leaders, cfg) != 0) {
        rc = SX_ENOMEM;
        goto fail;
    }
    for (i = 0; i < cfg->nnodes; i++) {
        if (cfg->nodes[i].role == SX_ROLE_ROUTER)
            continue;
        int frames = net_batch_frames(NET_BATCH_FRAMES_ROUTER);
        rc = net_peer_open_link(cfg->nodes[i].url, frames > 0 ? frames : NET_PEER_ALONE,
                                &rt->peers[i]);
        if (rc != 0) {
            LOG_ERROR("router: cannot dial %s at %s: %s", cfg->nodes[i].name, cfg->nodes[i].url,
                      sx_strerror(rc));
            goto fail;
        }
        rt->dialed[i] = true;
    }
    rc = catcache_new(cfg, &rt->cc);
    if (rc != 0) {
        LOG_ERROR("router: cannot create the catalog cache: %s", sx_strerror(rc));
        goto fail;
    }
    rc = rt_refresher_start(rt);
    if (rc != 0) {
        LOG_ERROR("router: cannot start the catalog refresher");
        goto fail;
    }
    *out = rt;
    return 0;
fail:
    rt_free(rt);
    return rc;
}

void rt_free(router *rt)
{
    int i;

    if (rt == NULL)
        return;
    rt_refresher_stop(rt);
    catcache_free(rt->cc);
    if (rt->peers != NULL)
        for (i = 0; i < rt->cfg->nnodes; i++)
            net_peer_close(rt->peers[i]);
    free(rt->peers);
    free(rt->dialed);
    free(rt->down_until);
    rt_leaders_free(&rt->leaders);
    pthread_cond_destroy(&rt->cv);
    pthread_mutex_destroy(&rt->mu);
    free(rt);
}

int rt_h_ping(router *rt, const uint8_t *p, size_t n, mp_buf *out, rt_err *e)
{
    msg_PING_rep rep;
    const char *name = rt->cfg->nodes[rt->self].name;

    (void)p;
    (void)n;
    memset(&rep, 0, sizeof(rep));
    rep.role.p = (const uint8_t *)"router";
    rep.role.n = strlen("router");
    rep.name.p = (const uint8_t *)name;
    rep.name.n = strlen(name);
    if (msg_encode_rep(MSG_PING, &rep, out) != 0)
        return rt_errf(e, SX_ENOMEM, "out of memory");
    return 0;
}

typedef int (*rt_handler_fn)(router *, const uint8_t *, size_t, mp_buf *, rt_err *);

/* The handler serving client message t, or NULL when the router does not
 * serve it (inter-node messages). */
static rt_handler_fn handler_for(msg_type t)
{
    switch (t) {
    case MSG_PING: return rt_h_ping;
    case MSG_TABLE_CREATE: return rt_h_table_create;
    case MSG_INDEX_CREATE: return rt_h_index_create;
    case MSG_INDEX_DROP: return rt_h_index_drop;
    case MSG_INDEX_LIST: return rt_h_index_list;
    case MSG_PUT: return rt_h_put;
    case MSG_GET: return rt_h_get;
    case MSG_DELETE: return rt_h_delete;
    case MSG_QUERY: return rt_h_query;
    case MSG_SCAN: return rt_h_scan;
    case MSG_STATUS: return rt_h_status;
    case MSG_CATALOG: return rt_h_catalog;
    default: return NULL;
    }
}

void rt_handle(void *arg, const uint8_t *req, size_t n, mp_buf *out)
{
    router *rt = arg;
    msg_type t = MSG_PING;
    int is_reply = 0, rc;
    rt_handler_fn fn;
    rt_err e;

    e.msg[0] = '\0';
    atomic_fetch_add_explicit(&rt->nreq, 1, memory_order_relaxed);
    rc = msg_peek(req, n, &t, &is_reply);
    if (rc != 0) {
        rt_errf(&e, rc, "cannot read the request frame: %s", sx_strerror(rc));
    } else if (is_reply) {
        rc = rt_errf(&e, SX_EPROTO, "expected a request, got a %s reply", msg_name(t));
    } else if ((fn = handler_for(t)) == NULL) {
        rc = rt_errf(&e, SX_EINVAL, "the router does not serve %s requests", msg_name(t));
    } else {
        rc = fn(rt, req, n, out, &e);
    }
    if (rc == 0 && !out->oom)
        return;
    atomic_fetch_add_explicit(&rt->nerr, 1, memory_order_relaxed);
    if (rc == 0)
        rc = rt_errf(&e, SX_ENOMEM, "out of memory encoding the reply");
    if (e.msg[0] == '\0')
        rt_errf(&e, rc, "%s", sx_strerror(rc));
    LOG_DEBUG("router: %s failed: %s", msg_name(t), e.msg);
    mp_buf_free(out);
    mp_buf_init(out);
    if (msg_encode_err(t, rc, e.msg, out) != 0)
        LOG_ERROR("router: cannot encode an error reply to %s", msg_name(t));
}
