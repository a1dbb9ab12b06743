/*
 * serve.h — a router serving its clients (serve.c): what shardex-router's
 * main and a storage node hosting a router (config "host") start and stop.
 * Kept apart from router.h so that the node includes only this.
 */
#ifndef SX_RT_SERVE_H
#define SX_RT_SERVE_H

#include "config.h"
#include "net.h"

#define RT_DEFAULT_WORKERS 256 /* requests at once (fibers) */

typedef struct rt_serving rt_serving;

/* Starts router node `self` of cfg (which outlives it): builds the router,
 * listens on its URL (TLS when the config has "client_tls") and serves
 * with `fibers` requests at once (0 or less: RT_DEFAULT_WORKERS). local: the
 * server of the storage node this process is, when the router is the one that
 * node hosts (config "host"): calls to that node then go to local in-process;
 * NULL otherwise. Stop it before local. Returns 0, or an sx_err (logged). */
int rt_serve_start(const cfg_cluster *cfg, int self, int fibers, net_server *local,
                   rt_serving **out);

/* Stops serving (answers what is in hand) and frees; accepts NULL. */
void rt_serve_stop(rt_serving *s);

#endif
