/*
 * probe.c — shardex-chaos-probe: the chaos runner's clock and its index lag
 * sampler (tests/chaos/README.md, "The runner").
 *
 *   shardex-chaos-probe now
 *       prints CLOCK_MONOTONIC in nanoseconds: the clock of every history,
 *       so that the runner's fault timeline (a shell script) shares it.
 *   shardex-chaos-probe lag --router URL --out FILE [--interval-ms MS]
 *       until SIGTERM or SIGINT: every MS (default 200) asks the cluster's
 *       status and appends one JSON line to FILE:
 *         {"time": NS, "ok": 1, "lag": L, "pairs": [[IDX, SRC, WM, HEAD], ...]}
 *       one pair per index partition IDX and source storage partition SRC
 *       with the partition's watermark for it and the source's outbox head;
 *       L = the sum of max(0, HEAD - WM). A pair whose head is unknown (its
 *       storage node did not answer) is left out. A status call that failed
 *       is {"time": NS, "ok": 0, "error": "..."}.
 *
 * Exit status: 0 (lag: once stopped by a signal), 1 when FILE or the router
 * cannot be opened, 2 on a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include "shardex.h"

#define MAX_PARTS 256

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "shardex-chaos-probe: %s\n"
            "usage: shardex-chaos-probe now\n"
            "       shardex-chaos-probe lag --router URL --out FILE [--interval-ms MS (200)]\n",
            why);
    return 2;
}

/* The storage partitions' heads in status, as ids[i] -> heads[i]; returns
 * how many (at most MAX_PARTS). */
static int collect_heads(json_t *nodes, uint64_t *ids, uint64_t *heads)
{
    size_t k, j;
    json_t *node, *part;
    int n = 0;

    json_array_foreach(nodes, k, node) {
        json_t *parts = json_object_get(json_object_get(node, "status"), "partitions");
        json_array_foreach(parts, j, part) {
            json_t *h = json_object_get(part, "head");
            if (json_is_integer(h) && n < MAX_PARTS) {
                ids[n] = (uint64_t)json_integer_value(json_object_get(part, "id"));
                heads[n++] = (uint64_t)json_integer_value(h);
            }
        }
    }
    return n;
}

/* Writes one sample line for the status text js to f; 0, or -1 when the
 * text is not the status JSON (then an ok 0 line is written instead). */
static int write_sample(FILE *f, uint64_t t, const char *js)
{
    uint64_t ids[MAX_PARTS], heads[MAX_PARTS], lag = 0;
    json_error_t jerr;
    json_t *root = json_loads(js, 0, &jerr);
    json_t *nodes = json_object_get(root, "nodes");
    size_t k, j, w;
    json_t *node, *part, *pair;
    int nh, first = 1;

    if (!json_is_array(nodes)) {
        fprintf(f, "{\"time\": %" PRIu64 ", \"ok\": 0, \"error\": \"unreadable status\"}\n", t);
        json_decref(root);
        return -1;
    }
    nh = collect_heads(nodes, ids, heads);
    fprintf(f, "{\"time\": %" PRIu64 ", \"ok\": 1, \"pairs\": [", t);
    json_array_foreach(nodes, k, node) {
        json_t *parts = json_object_get(json_object_get(node, "status"), "partitions");
        json_array_foreach(parts, j, part) {
            json_t *wms = json_object_get(part, "watermarks");
            uint64_t idx = (uint64_t)json_integer_value(json_object_get(part, "id"));
            if (!json_is_array(wms))
                continue;
            json_array_foreach(wms, w, pair) {
                uint64_t src = (uint64_t)json_integer_value(json_array_get(pair, 0));
                uint64_t wm = (uint64_t)json_integer_value(json_array_get(pair, 1));
                int s = 0;
                while (s < nh && ids[s] != src)
                    s++;
                if (s == nh)
                    continue;
                if (heads[s] > wm)
                    lag += heads[s] - wm;
                fprintf(f, "%s[%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 "]",
                        first ? "" : ", ", idx, src, wm, heads[s]);
                first = 0;
            }
        }
    }
    fprintf(f, "], \"lag\": %" PRIu64 "}\n", lag);
    json_decref(root);
    return 0;
}

/* The lag sampler's loop; returns the exit status. */
static int run_lag(const char *router, const char *out, long interval_ms)
{
    sx_client *c = NULL;
    FILE *f;
    int rc;

    if ((rc = sx_client_open(router, &c)) != 0) {
        fprintf(stderr, "shardex-chaos-probe: cannot open %s: %s\n", router, sx_strerror(rc));
        return 1;
    }
    sx_client_set_timeout(c, 1000);
    if ((f = fopen(out, "a")) == NULL) {
        fprintf(stderr, "shardex-chaos-probe: cannot open %s: %s\n", out, strerror(errno));
        sx_client_close(c);
        return 1;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    while (!g_stop) {
        uint64_t t = now_ns();
        char *js = NULL;

        rc = sx_status(c, &js);
        if (rc != 0)
            fprintf(f, "{\"time\": %" PRIu64 ", \"ok\": 0, \"error\": \"%s\"}\n", t,
                    sx_strerror(rc));
        else
            write_sample(f, t, js);
        sx_free(js);
        fflush(f);
        struct timespec d = { .tv_sec = interval_ms / 1000,
                              .tv_nsec = (interval_ms % 1000) * 1000000L };
        while (!g_stop && nanosleep(&d, &d) != 0 && errno == EINTR)
            ;
    }
    rc = fclose(f) == 0 ? 0 : 1;
    sx_client_close(c);
    return rc;
}

int main(int argc, char **argv)
{
    const char *router = NULL, *out = NULL;
    long interval_ms = 200;

    if (argc == 2 && strcmp(argv[1], "now") == 0) {
        printf("%" PRIu64 "\n", now_ns());
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "lag") != 0)
        return usage("the first argument is now or lag");
    for (int i = 2; i < argc; i++) {
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (val == NULL)
            return usage("an option without its value");
        if (strcmp(argv[i], "--router") == 0)
            router = val;
        else if (strcmp(argv[i], "--out") == 0)
            out = val;
        else if (strcmp(argv[i], "--interval-ms") == 0) {
            char *end;
            errno = 0;
            interval_ms = strtol(val, &end, 10);
            if (errno != 0 || *end != '\0' || interval_ms < 1 || interval_ms > 60000)
                return usage("--interval-ms takes 1..60000");
        } else
            return usage("unknown option");
        i++;
    }
    if (router == NULL || out == NULL)
        return usage("--router and --out are required");
    return run_lag(router, out, interval_ms);
}
