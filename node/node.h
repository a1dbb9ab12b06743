/*
 * node.h — what the parts of shardex-node share: the role entry points that
 * main.c dispatches to, and the stop flag set by SIGTERM/SIGINT.
 */
#ifndef SX_NODE_H
#define SX_NODE_H

#include <stdbool.h>
#include "config.h"
#include "net.h"

/* What a storage node starts beside its own server: the router it hosts
 * (config "host"). main.c, the one place that composes the router into a
 * node, fills it; the storage role calls start once its server listens
 * (calls to this node then go to srv in-process) and stop first thing on
 * its way down. start returns 0 or an sx_err. */
typedef struct node_hosted {
    int (*start)(void *arg, const cfg_cluster *cfg, int router, net_server *srv);
    void (*stop)(void *arg);
    void *arg;
} node_hosted;

/* Node start-up options, filled by main.c from the command line. */
typedef struct node_opts {
    const cfg_cluster *cfg; /* the cluster map; outlives the node */
    int self;               /* index of this node in cfg->nodes */
    const char *data_dir;   /* existing directory for this node's databases */
    int workers;            /* request-serving threads (default 16) */
    node_hosted hosted;     /* the router a storage node hosts; start NULL: none */
    bool bootstrap;         /* --bootstrap: create replicated groups new here
                             * (repl.h); else join them */
} node_opts;

/* Runs a storage node (fact partitions; plus the catalog partition when
 * this node is cfg->catalog_node; plus the router whose config "host" it
 * is, if any, serving its clients from this process) until
 * node_should_stop(). Prints "ready"
 * on stdout once serving. Returns 0 on a clean stop or an sx_err when it
 * cannot start (message logged). Implemented in storage_node.c. */
int st_node_run(const node_opts *o);

/* Runs an index node (index partitions) until node_should_stop(). Prints
 * "ready" on stdout once serving. Returns 0 or an sx_err. Implemented in
 * index_node.c. */
int ix_node_run(const node_opts *o);

/* True once SIGTERM or SIGINT arrived. Thread-safe. Implemented in main.c. */
bool node_should_stop(void);

#endif
