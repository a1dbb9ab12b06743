/*
 * status.c — `shardex status`: the cluster's nodes, partitions and index
 * lag and the group committers' figures as readable tables (from sx_status's
 * JSON).
 *
 * Storage partitions are expected to report "head" (outbox sequence) and
 * index partitions "watermarks" as [[source, watermark], ...]; every other
 * scalar a partition reports is printed as name=value, so new fields show
 * up without changes here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

static const char *USAGE =
    "usage: shardex status [--json]\n"
    "  Prints every node (role, name, url, state), every partition (items,\n"
    "  outbox, head / entries, watermarks, ...) and the index lag: for each index\n"
    "  partition and source storage partition, head - watermark; and each group\n"
    "  committer's figures since its node started (synced groups, operations per\n"
    "  group, time computing and syncing a group, the longest sync); and each\n"
    "  replicated group (fact and index partitions of several replicas, the\n"
    "  catalog): its kind and key range (a fact partition's shard hash range,\n"
    "  inclusive; an index partition's tuple range [lo, hi), null unbounded),\n"
    "  every replica's role, term, leader, commit and applied index, and, from\n"
    "  the leader, each member's lag and whether it is reachable.\n"
    "  --json prints the raw status instead.\n";

#define MAX_HEADS 1024

typedef struct heads {
    uint64_t part[MAX_HEADS], head[MAX_HEADS];
    size_t n;
} heads;

static const char *str_or(const json_t *o, const char *k, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : dflt;
}

/* Prints the scalar fields of a partition map as name=value. */
static void print_fields(const json_t *part)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)part, k, v) {
        if (strcmp(k, "id") == 0 || json_is_array(v) || json_is_object(v))
            continue;
        char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (s) {
            printf(" %s=%s", k, s);
            free(s);
        }
    }
}

static const json_t *node_parts(const json_t *node)
{
    const json_t *st = json_object_get(node, "status");
    const json_t *parts = json_object_get(st, "partitions");
    return json_is_array(parts) ? parts : NULL;
}

static void print_nodes(const json_t *nodes, heads *h)
{
    size_t k, j;
    json_t *node, *part;
    printf("%-10s %-8s %-28s %s\n", "NODE", "ROLE", "URL", "STATE");
    json_array_foreach(nodes, k, node) {
        printf("%-10s %-8s %-28s %s", str_or(node, "name", "?"), str_or(node, "role", "?"),
               str_or(node, "url", "?"), str_or(node, "state", "?"));
        if (json_object_get(node, "error"))
            printf(" (%s)", str_or(node, "error", ""));
        printf("\n");
    }
    printf("\n%-10s %-10s %-8s %s\n", "PARTITION", "NODE", "ROLE", "FIGURES");
    json_array_foreach(nodes, k, node) {
        const json_t *parts = node_parts(node);
        json_array_foreach(parts, j, part) {
            json_int_t id = json_integer_value(json_object_get(part, "id"));
            printf("%-10" JSON_INTEGER_FORMAT " %-10s %-8s", id, str_or(node, "name", "?"),
                   str_or(node, "role", "?"));
            print_fields(part);
            printf("\n");
            const json_t *hd = json_object_get(part, "head");
            if (json_is_integer(hd) && h->n < MAX_HEADS) {
                h->part[h->n] = (uint64_t)id;
                h->head[h->n++] = (uint64_t)json_integer_value(hd);
            }
        }
    }
}

static void print_lag(const json_t *nodes, const heads *h)
{
    size_t k, j, w;
    json_t *node, *part, *pair;
    printf("\n%-16s %-16s %s\n", "INDEX PARTITION", "SOURCE", "LAG (head - watermark)");
    json_array_foreach(nodes, k, node) {
        json_array_foreach(node_parts(node), j, part) {
            const json_t *wms = json_object_get(part, "watermarks");
            if (!json_is_array(wms))
                continue;
            json_int_t id = json_integer_value(json_object_get(part, "id"));
            json_array_foreach(wms, w, pair) {
                uint64_t src = (uint64_t)json_integer_value(json_array_get(pair, 0));
                uint64_t wm = (uint64_t)json_integer_value(json_array_get(pair, 1));
                size_t s = 0;
                while (s < h->n && h->part[s] != src)
                    s++;
                printf("%-16" JSON_INTEGER_FORMAT " %-16" PRIu64 " ", id, src);
                if (s == h->n)
                    printf("? (watermark %" PRIu64 ", head unknown)\n", wm);
                else
                    printf("%" PRIu64 "\n", h->head[s] > wm ? h->head[s] - wm : 0);
            }
        }
    }
}

/* One committer's row: its counters since the node started, as averages. */
static void print_commit_row(const char *node, const char *part, const json_t *c)
{
    uint64_t v[5];
    static const char *const names[] = { "groups", "ops", "apply_us", "sync_us", "max_sync_us" };

    for (int i = 0; i < 5; i++)
        v[i] = (uint64_t)json_integer_value(json_object_get(c, names[i]));
    printf("%-10s %-10s %12" PRIu64 " %10.1f %12.1f %12.1f %12.1f\n", node, part, v[0],
           v[0] ? (double)v[1] / (double)v[0] : 0.0,
           v[0] ? (double)v[2] / (double)v[0] / 1000 : 0.0,
           v[0] ? (double)v[3] / (double)v[0] / 1000 : 0.0, (double)v[4] / 1000);
}

/* The group committers: a storage node's (one per node) and each index
 * partition's. */
static void print_commits(const json_t *nodes)
{
    size_t k, j;
    json_t *node, *part;
    printf("\n%-10s %-10s %12s %10s %12s %12s %12s\n", "COMMITTER", "PARTITION", "GROUPS",
           "OPS/GROUP", "APPLY ms/gr", "SYNC ms/gr", "MAX SYNC ms");
    json_array_foreach(nodes, k, node) {
        const char *name = str_or(node, "name", "?");
        const json_t *c = json_object_get(json_object_get(node, "status"), "commits");
        if (json_is_object(c))
            print_commit_row(name, "all", c);
        json_array_foreach(node_parts(node), j, part) {
            c = json_object_get(part, "commits");
            if (!json_is_object(c))
                continue;
            char id[32];
            snprintf(id, sizeof id, "%" JSON_INTEGER_FORMAT,
                     json_integer_value(json_object_get(part, "id")));
            print_commit_row(name, id, c);
        }
    }
}

/* A group's key range as text (into buf): a fact partition's "range"
 * (its hash range, inclusive), an index partition's [lo, hi) (the
 * config's JSON arrays, null unbounded), "-" for the catalog. */
static const char *group_range(const json_t *g, char *buf, size_t n)
{
    const char *range = json_string_value(json_object_get(g, "range"));
    const json_t *lo = json_object_get(g, "lo"), *hi = json_object_get(g, "hi");

    if (range != NULL)
        return range;
    if (lo == NULL && hi == NULL)
        return "-";
    char *l = json_dumps(lo ? lo : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
    char *h = json_dumps(hi ? hi : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
    snprintf(buf, n, "[%s, %s)", l ? l : "?", h ? h : "?");
    free(l);
    free(h);
    return buf;
}

/* Replicated groups: one row per replica, as its node reports it (the
 * group's kind and key range last), then the leader's view of each member
 * (its lag behind the commit index, and whether it answered lately: an
 * unreachable one is marked, not left out). */
static void print_groups(const json_t *nodes)
{
    size_t k, j, m;
    json_t *node, *g, *mem;
    bool any = false;
    json_array_foreach(nodes, k, node) {
        const json_t *gs = json_object_get(json_object_get(node, "status"), "groups");
        json_array_foreach(gs, j, g) {
            if (!any)
                printf("\n%-10s %-10s %-8s %-8s %-14s %6s %-10s %8s %8s  %s\n", "GROUP", "NODE",
                       "KIND", "REPLICA", "ROLE", "TERM", "LEADER", "COMMIT", "APPLIED", "RANGE");
            any = true;
            char id[32], range[512];
            const char *kind = str_or(g, "kind", "?");
            if (strcmp(kind, "catalog") == 0)
                snprintf(id, sizeof id, "catalog");
            else
                snprintf(id, sizeof id, "%" JSON_INTEGER_FORMAT,
                         json_integer_value(json_object_get(g, "id")));
            const char *state = str_or(g, "state", "?");
            if (strcmp(state, "joining") == 0) {
                const char *rg = group_range(g, range, sizeof range);
                bool has = strcmp(rg, "-") != 0;
                printf("%-10s %-10s %-8s %-8s joining: a new replica asking the leader for its "
                       "place%s%s%s\n",
                       id, str_or(node, "name", "?"), kind, "-", has ? " (range " : "",
                       has ? rg : "", has ? ")" : "");
                continue;
            }
            printf("%-10s %-10s %-8s %-8" JSON_INTEGER_FORMAT " %-14s %6" JSON_INTEGER_FORMAT
                   " %-10s %8" JSON_INTEGER_FORMAT " %8" JSON_INTEGER_FORMAT "  %s%s\n",
                   id, str_or(node, "name", "?"), kind,
                   json_integer_value(json_object_get(g, "replica")), str_or(g, "role", "?"),
                   json_integer_value(json_object_get(g, "term")), str_or(g, "leader", "-"),
                   json_integer_value(json_object_get(g, "commit")),
                   json_integer_value(json_object_get(g, "applied")),
                   group_range(g, range, sizeof range),
                   strcmp(state, "member") == 0 ? "" : " (not a member yet)");
            json_array_foreach(json_object_get(g, "members"), m, mem) {
                const json_t *lag = json_object_get(mem, "lag");
                if (!json_is_integer(lag))
                    continue; /* only the leader knows the others' progress */
                bool up = json_is_true(json_object_get(mem, "reachable"));
                printf("%-10s   member %" JSON_INTEGER_FORMAT
                       " on %s (%s): lag %" JSON_INTEGER_FORMAT "%s\n",
                       "", json_integer_value(json_object_get(mem, "id")), str_or(mem, "node", "?"),
                       json_is_true(json_object_get(mem, "voter")) ? "voter" : "learner",
                       json_integer_value(lag), up ? "" : ", UNREACHABLE");
            }
        }
    }
}

int cli_status(cli_ctx *ctx)
{
    const char *pos[1], *json_flag = NULL;
    cli_opt opts[] = { { "--json", false, &json_flag }, { NULL, 0, NULL } };
    char err[256];
    int npos, r = cli_parse(ctx, opts, pos, 0, &npos, USAGE);
    if (r < 0)
        return CLI_OK;
    if (r)
        return r;
    if ((r = cli_connect(ctx)))
        return r;
    char *text = NULL;
    int rc = sx_status(ctx->client, &text);
    if (rc)
        return cli_fail(ctx, rc);
    if (json_flag) {
        puts(text);
        sx_free(text);
        return CLI_OK;
    }
    json_t *j = cli_json_parse(text, err, sizeof err);
    sx_free(text);
    if (!j)
        return cli_error("unreadable status: %s", err);
    const json_t *nodes = json_object_get(j, "nodes");
    heads *h = calloc(1, sizeof *h);
    if (!h) {
        json_decref(j);
        return cli_error("out of memory");
    }
    print_nodes(nodes, h);
    print_lag(nodes, h);
    print_groups(nodes);
    print_commits(nodes);
    free(h);
    json_decref(j);
    return CLI_OK;
}
