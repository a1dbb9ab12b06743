/*
 * serve.c — a router serving its clients: the router (rt_new), its client
 * port (plain or TLS, from the config) and the request server on fibers.
 * shardex-router runs one on its own (main.c); a storage node runs the
 * router it hosts (config "host"; node/main.c composes it in, through
 * node_hosted in node/node.h), whose calls to that node then stay in the
 * process (net_peer_open_local): no socket, no thread hand-off, no copy of
 * the frame.
 */
#include <stdlib.h>
#include <unistd.h>

#include "router.h"
#include "log.h"
#include "sx_errors.h"

struct rt_serving {
    router *rt;
    net_server *srv;
};

int rt_serve_start(const cfg_cluster *cfg, int self, int fibers, net_server *local,
                   rt_serving **out)
{
    const cfg_node *me = &cfg->nodes[self];
    rt_serving *s = calloc(1, sizeof(*s));
    nng_socket sock;
    char why[256] = "";
    int rc;

    if (s == NULL)
        return SX_ENOMEM;
    if (fibers <= 0)
        fibers = RT_DEFAULT_WORKERS;
    rc = rt_new(cfg, self, &s->rt);
    if (rc != 0) {
        free(s);
        return rc;
    }
    if (local != NULL && me->host >= 0) {
        net_peer *p = NULL;
        rc = net_peer_open_local(local, &p);
        if (rc != 0) {
            LOG_ERROR("router %s: %s", me->name, sx_strerror(rc));
            rt_free(s->rt);
            free(s);
            return rc;
        }
        net_peer_close(s->rt->peers[me->host]); /* its link, unused */
        s->rt->peers[me->host] = p;
    }
    net_tls tls = { .ca = cfg->tls_ca, .cert = cfg->tls_cert, .key = cfg->tls_key };
    rc = net_listen_tls(me->url, cfg->tls_ca != NULL ? &tls : NULL, &sock, why, sizeof(why));
    if (rc != 0) {
        LOG_ERROR("router %s: cannot listen on %s: %s", me->name, me->url,
                  why[0] ? why : sx_strerror(rc));
        rt_free(s->rt);
        free(s);
        return rc;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    net_server_opts so = { .workers = ncpu < 2   ? 2
                                      : ncpu > 8 ? 8
                                                 : (int)ncpu,
                           .fibers = fibers,
                           .defer = rt_defer,
                           .defer_flush = rt_defer_flush };
    rc = net_server_open(sock, &so, rt_handle, s->rt, &s->srv);
    if (rc != 0) {
        LOG_ERROR("router %s: cannot start serving: %s", me->name, sx_strerror(rc));
        nng_close(sock);
        rt_free(s->rt);
        free(s);
        return rc;
    }
    if (me->host >= 0)
        LOG_INFO("router %s: serving on %s inside storage node %s: %d requests at once "
                 "on %d threads",
                 me->name, me->url, cfg->nodes[me->host].name, fibers, so.workers);
    else
        LOG_INFO("router %s: serving on %s: %d requests at once on %d threads", me->name, me->url,
                 fibers, so.workers);
    *out = s;
    return 0;
}

void rt_serve_stop(rt_serving *s)
{
    if (s == NULL)
        return;
    /* a strong read waiting for the index would hold the stop for up to
     * its deadline (and a hosted router's node with it) */
    atomic_store(&s->rt->stopping, true);
    net_server_stop(s->srv);
    rt_free(s->rt);
    free(s);
}
