/*
 * main.c — shardex-node: command line, config, logging, signals, and the
 * dispatch to the storage or index role (st_node_run / ix_node_run).
 *
 *   shardex-node --config FILE --name NAME --data DIR [--log FILE]
 *                [--role storage|index] [--workers N] [--cache-mb N] [--bootstrap] [--help]
 *
 * Usage errors print one line on stderr and exit 2; start-up failures exit 1.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "config.h"
#include "serve.h"
#include "hash.h"
#include "heap.h"
#include "ldb.h"
#include "link_auth.h"
#include "log.h"
#include "node.h"
#include "sx_errors.h"

/* The router a storage node hosts (config "host"): this is the one place
 * where a router is composed into a node. fibers <= 0 takes the router's
 * own default. */
typedef struct hosted_router {
    int fibers;
    rt_serving *serving;
} hosted_router;

static int hosted_start(void *arg, const cfg_cluster *cfg, int router, net_server *srv)
{
    hosted_router *h = arg;

    return rt_serve_start(cfg, router, h->fibers, srv, &h->serving);
}

static void hosted_stop(void *arg)
{
    hosted_router *h = arg;

    rt_serve_stop(h->serving);
    h->serving = NULL;
}

/* The only mutable global: set from the signal handler, read by any
 * thread. A lock-free atomic (async-signal-safe) instead of a lock. */
static atomic_int g_stop;

bool node_should_stop(void)
{
    return atomic_load(&g_stop) != 0;
}

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&g_stop, 1);
}

static const char *usage_text =
    "usage: shardex-node --config FILE --name NAME --data DIR [--log FILE]\n"
    "                    [--role storage|index] [--workers N] [--cache-mb N] [--bootstrap]\n"
    "                    [--help]\n"
    "  --config FILE   cluster config (JSON)\n"
    "  --name NAME     this node's name in the config\n"
    "  --data DIR      data directory (created if missing)\n"
    "  --log FILE      log file (default DIR/node.log)\n"
    "  --role ROLE     must match the node's role in the config, if given\n"
    "  --workers N     request-serving threads (default 16; a storage node's\n"
    "                  writes are committed and answered by one thread per partition);\n"
    "                  given, also the requests at once of the router a storage node\n"
    "                  hosts (config \"host\"; else shardex-router's default, 256)\n"
    "  --cache-mb N    MiB of leveldb block cache, shared by every partition of\n"
    "                  this node (default 128; 1..1048576)\n"
    "  --bootstrap     the cluster's first start: create the replicated groups\n"
    "                  (the catalog's) whose Raft log this node does not hold yet;\n"
    "                  without it such a group is joined as a new replica (the\n"
    "                  node's data was lost); ignored for groups it holds\n"
#ifdef SHARDEX_TEST_HOOKS
    "built with test hooks (SHARDEX_BACKFILL_HOLD, _RUN, _SEAL): not for production\n"
#endif
    ;

typedef struct cli {
    const char *config, *name, *data, *log, *role;
    int workers;
    bool workers_set; /* --workers given */
    bool bootstrap;   /* --bootstrap */
    long cache_mb;
} cli;

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "shardex-node: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (try --help)\n");
    return 2;
}

/* Parses a whole decimal number in [lo, hi] into *v: 0, or -1. */
static int parse_long(const char *s, long lo, long hi, long *v)
{
    char *end = NULL;
    long x;

    if (*s < '0' || *s > '9') /* no sign, no leading space */
        return -1;
    errno = 0;
    x = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

/* Parses argv into c. Returns -1 to go on, or an exit status (0 for --help). */
static int parse_args(int argc, char **argv, cli *c)
{
    memset(c, 0, sizeof(*c));
    c->workers = 16;
    c->cache_mb = LDB_CACHE_DEFAULT_MB;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (strcmp(a, "--bootstrap") == 0) {
            c->bootstrap = true;
            continue;
        }
        if (strcmp(a, "--config") == 0)
            slot = &c->config;
        else if (strcmp(a, "--name") == 0)
            slot = &c->name;
        else if (strcmp(a, "--data") == 0)
            slot = &c->data;
        else if (strcmp(a, "--log") == 0)
            slot = &c->log;
        else if (strcmp(a, "--role") == 0)
            slot = &c->role;
        else if (strcmp(a, "--workers") != 0 && strcmp(a, "--cache-mb") != 0)
            return usage_error("unknown option '%s'", a);
        if (i + 1 >= argc || argv[i + 1][0] == '\0')
            return usage_error("option '%s' needs a value", a);
        if (slot != NULL) {
            *slot = argv[++i];
        } else if (strcmp(a, "--workers") == 0) {
            long w;

            if (parse_long(argv[++i], 1, 256, &w) != 0)
                return usage_error("--workers must be 1..256, got '%s'", argv[i]);
            c->workers = (int)w;
            c->workers_set = true;
        } else if (parse_long(argv[++i], 1, LDB_CACHE_MAX_MB, &c->cache_mb) != 0) {
            return usage_error("--cache-mb must be 1..1048576 (MiB), got '%s'", argv[i]);
        }
    }
    if (c->config == NULL)
        return usage_error("%s", "missing --config FILE");
    if (c->name == NULL)
        return usage_error("%s", "missing --name NAME");
    if (c->data == NULL)
        return usage_error("%s", "missing --data DIR");
    if (c->role && strcmp(c->role, "storage") && strcmp(c->role, "index"))
        return usage_error("--role must be storage or index, got '%s'", c->role);
    return -1;
}

static int install_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    sa.sa_handler = SIG_IGN;
    /* SIGXFSZ too: a file past the size limit is a write error (EFBIG),
     * which the stores handle (ldb.h: refused until a restart), not a kill */
    if (sigaction(SIGPIPE, &sa, NULL) != 0)
        return -1;
    return sigaction(SIGXFSZ, &sa, NULL);
}

/* Creates dir and any missing parents (like mkdir -p). Returns 0 or -1
 * with errno set. */
static int mkdir_p(const char *dir)
{
    char path[4096];
    size_t n = strlen(dir);

    if (n == 0 || n >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        path[i] = i < n ? '/' : '\0';
    }
    return 0;
}

/* Loads the config and finds this node. Returns 0 or an exit status. */
static int load_config(const cli *c, cfg_cluster **cfg, int *self)
{
    char err[256] = "";
    int rc = cfg_load(c->config, cfg, err, sizeof(err));
    int role;

    if (rc == 0 && (rc = cfg_check_supported(*cfg, err, sizeof(err))) != 0) {
        cfg_free(*cfg);
        *cfg = NULL;
    }
    if (rc != 0) {
        fprintf(stderr, "shardex-node: config %s: %s\n", c->config, err[0] ? err : sx_strerror(rc));
        return 2;
    }
    /* links to and from the other processes: authenticated with the key */
    link_auth_set_key((*cfg)->has_link_key ? (*cfg)->link_key : NULL, (*cfg)->cluster);
    *self = cfg_node_by_name(*cfg, c->name);
    if (*self < 0) {
        fprintf(stderr, "shardex-node: no node named '%s' in %s\n", c->name, c->config);
        return 2;
    }
    role = (*cfg)->nodes[*self].role;
    if (role != SX_ROLE_STORAGE && role != SX_ROLE_INDEX) {
        fprintf(stderr, "shardex-node: node '%s' is not a storage or index node\n", c->name);
        return 2;
    }
    if (c->role != NULL && (strcmp(c->role, "storage") == 0) != (role == SX_ROLE_STORAGE)) {
        fprintf(stderr, "shardex-node: --role %s does not match node '%s' in the config\n", c->role,
                c->name);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    cli c;
    cfg_cluster *cfg = NULL;
    node_opts o;
    hosted_router hosted = { 0 };
    char logpath[4096];
    int self = -1, rc;

    heap_tune();
    rc = parse_args(argc, argv, &c);
    if (rc >= 0)
        return rc;
    rc = load_config(&c, &cfg, &self);
    if (rc != 0)
        goto out;
    if (mkdir_p(c.data) != 0) {
        fprintf(stderr, "shardex-node: cannot create data dir %s: %s\n", c.data, strerror(errno));
        rc = 1;
        goto out;
    }
    if (c.log == NULL) {
        snprintf(logpath, sizeof(logpath), "%s/node.log", c.data);
        c.log = logpath;
    }
    if (log_open(c.log) != 0) {
        fprintf(stderr, "shardex-node: cannot open log %s\n", c.log);
        rc = 1;
        goto out;
    }
    if (proto_init() != 0 || install_signals() != 0) {
        fprintf(stderr, "shardex-node: initialisation failed\n");
        rc = 1;
        goto out;
    }
    if (ldb_cache_configure((size_t)c.cache_mb) != 0) { /* before any leveldb opens */
        /* cannot happen: the range is checked and no leveldb is open yet */
        fprintf(stderr,
                "shardex-node: cannot set the block cache to %ld MiB (a leveldb "
                "is already open)\n",
                c.cache_mb);
        rc = 1;
        goto out;
    }
    o.cfg = cfg;
    o.self = self;
    o.data_dir = c.data;
    o.workers = c.workers;
    o.bootstrap = c.bootstrap;
    hosted.fibers = c.workers_set ? c.workers : 0;
    o.hosted = (node_hosted){ .start = hosted_start, .stop = hosted_stop, .arg = &hosted };
    LOG_INFO("shardex-node %s starting (%s, %d workers, %ld MiB block cache)", c.name,
             cfg->nodes[self].role == SX_ROLE_STORAGE ? "storage" : "index", c.workers, c.cache_mb);
    rc = cfg->nodes[self].role == SX_ROLE_STORAGE ? st_node_run(&o) : ix_node_run(&o);
    if (rc != 0) {
        fprintf(stderr, "shardex-node: %s: %s (see %s)\n", c.name, sx_strerror(rc), c.log);
        rc = 1;
    } else {
        LOG_INFO("shardex-node %s stopped", c.name);
    }
out:
    cfg_free(cfg);
    return rc;
}
