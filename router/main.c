/*
 * main.c — shardex-router's entry point: command line, config, logging,
 * the serving loop, and a clean stop on SIGTERM/SIGINT.
 *
 *   shardex-router --config FILE --name NAME [--log FILE] [--workers N]
 *
 * Usage errors exit 2; start-up failures exit 1. Prints "ready" on stdout
 * once it serves on its URL from the config, and nothing else.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <nng/nng.h>

#include "router.h"
#include "config.h"
#include "hash.h"
#include "heap.h"
#include "link_auth.h"
#include "log.h"
#include "net.h"
#include "sx_errors.h"

typedef struct rt_opts {
    const char *config;
    const char *name;
    const char *log;
    int workers;
} rt_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: shardex-router --config FILE --name NAME [--log FILE] [--workers N]\n"
            "  --config FILE  cluster config (JSON)\n"
            "  --name NAME    this router's name in the config\n"
            "  --log FILE     log file (default: stderr)\n"
            "  --workers N    requests served at once, each a fiber (default %d),\n"
            "                 on one thread per CPU (2..8)\n"
            "  --help         print this help\n",
            RT_DEFAULT_WORKERS);
}

/* Parses argv into o. Returns 0, 1 for --help, or 2 for a usage error
 * (reason printed on stderr). */
static int parse_args(int argc, char **argv, rt_opts *o)
{
    int i;

    memset(o, 0, sizeof(*o));
    o->workers = RT_DEFAULT_WORKERS;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return 1;
        if (i + 1 >= argc) {
            fprintf(stderr, "shardex-router: %s: unknown option or missing value\n", a);
            return 2;
        }
        if (strcmp(a, "--config") == 0) {
            o->config = argv[++i];
        } else if (strcmp(a, "--name") == 0) {
            o->name = argv[++i];
        } else if (strcmp(a, "--log") == 0) {
            o->log = argv[++i];
        } else if (strcmp(a, "--workers") == 0) {
            char *end;
            long w;
            errno = 0;
            w = strtol(argv[++i], &end, 10);
            if (errno != 0 || *end != '\0' || w < 1 || w > 1024) {
                fprintf(stderr, "shardex-router: --workers wants 1..1024, got '%s'\n", argv[i]);
                return 2;
            }
            o->workers = (int)w;
        } else {
            fprintf(stderr, "shardex-router: unknown option %s\n", a);
            return 2;
        }
    }
    if (o->config == NULL || o->name == NULL) {
        fprintf(stderr, "shardex-router: --config and --name are required\n");
        return 2;
    }
    return 0;
}

/* Loads the config and finds this router in it. Returns 0 or 1 (reason on
 * stderr). */
static int load_config(const rt_opts *o, cfg_cluster **cfg, int *self)
{
    char err[256] = "";

    if (cfg_load(o->config, cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "shardex-router: %s: %s\n", o->config, err);
        return 1;
    }
    if (cfg_check_supported(*cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "shardex-router: %s: %s\n", o->config, err);
        cfg_free(*cfg);
        *cfg = NULL;
        return 1;
    }
    /* links to and from the other processes: authenticated with the key */
    link_auth_set_key((*cfg)->has_link_key ? (*cfg)->link_key : NULL, (*cfg)->cluster);
    *self = cfg_node_by_name(*cfg, o->name);
    if (*self < 0 || (*cfg)->nodes[*self].role != SX_ROLE_ROUTER) {
        fprintf(stderr, "shardex-router: %s: no router named '%s'\n", o->config, o->name);
        cfg_free(*cfg);
        *cfg = NULL;
        return 1;
    }
    if ((*cfg)->nodes[*self].host >= 0) {
        fprintf(stderr,
                "shardex-router: %s: router '%s' runs inside storage node '%s' "
                "(its \"host\"): start shardex-node %s, not shardex-router\n",
                o->config, o->name, (*cfg)->nodes[(*cfg)->nodes[*self].host].name,
                (*cfg)->nodes[(*cfg)->nodes[*self].host].name);
        cfg_free(*cfg);
        *cfg = NULL;
        return 1;
    }
    return 0;
}

/* Serves until SIGTERM or SIGINT. The signals are blocked in every thread
 * (the mask is set before any thread starts) and taken here by sigwait. */
static int serve(const rt_opts *o, const cfg_cluster *cfg, int self, const sigset_t *sigs)
{
    rt_serving *s = NULL;
    int sig = 0;

    if (rt_serve_start(cfg, self, o->workers, NULL, &s) != 0)
        return 1;
    printf("ready\n");
    fflush(stdout);
    while (sigwait(sigs, &sig) != 0 || (sig != SIGTERM && sig != SIGINT))
        ;
    LOG_INFO("router %s: signal %d, stopping", o->name, sig);
    net_shutdown_guard(NET_SHUTDOWN_GRACE_S);
    rt_serve_stop(s);
    LOG_INFO("router %s: stopped", o->name);
    return 0;
}

int main(int argc, char **argv)
{
    rt_opts o;
    cfg_cluster *cfg = NULL;
    sigset_t sigs;
    int rc, self = -1;

    heap_tune();
    rc = parse_args(argc, argv, &o);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc != 0) {
        usage(stderr);
        return 2;
    }
    if (proto_init() != 0) {
        fprintf(stderr, "shardex-router: cannot initialise libsodium\n");
        return 1;
    }
    if (o.log != NULL && log_open(o.log) != 0) {
        fprintf(stderr, "shardex-router: cannot open log file %s\n", o.log);
        return 1;
    }
    if (load_config(&o, &cfg, &self) != 0)
        return 1;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    signal(SIGPIPE, SIG_IGN);
    if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0) {
        fprintf(stderr, "shardex-router: cannot block signals\n");
        cfg_free(cfg);
        return 1;
    }
    rc = serve(&o, cfg, self, &sigs);
    cfg_free(cfg);
    /* Every socket is closed by now, but nng frees a closed connection's
     * pipe (and a request that reached it after the server stopped
     * listening) on its reaper thread, later: wait for that, so that the
     * process ends with nothing of nng's still held. */
    nng_fini();
    return rc;
}
