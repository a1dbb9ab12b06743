/*
 * config.c — loads and validates the cluster config file (see config.h and
 * deploy/README.md for the format).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <jansson.h>
#include <nng/nng.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "config.h"
#include "tuple.h"
#include "sx_errors.h"

typedef struct cfg_err {
    char *buf;
    size_t len;
} cfg_err;

static int fail(cfg_err *e, const char *fmt, ...)
{
    va_list ap;

    if (e->buf && e->len) {
        va_start(ap, fmt);
        vsnprintf(e->buf, e->len, fmt, ap);
        va_end(ap);
    }
    return SX_ECONFIG;
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);

    if (d)
        memcpy(d, s, n + 1);
    return d;
}

/* n bytes from exactly 2n hex digits (sscanf's %2x alone would take "fz"
 * as 0x0f). */
static int hex_decode(const char *hex, uint8_t *out, size_t n)
{
    if (hex == NULL || strlen(hex) != n * 2)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (!isxdigit((unsigned char)hex[2 * i]) || !isxdigit((unsigned char)hex[2 * i + 1]) ||
            sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

static int parse_u64hex(const char *s, uint64_t *out)
{
    uint8_t b[8];

    if (hex_decode(s, b, 8))
        return -1;
    *out = be_get64(b);
    return 0;
}

/* Encodes a JSON array of scalars as a tuple prefix. */
static int json_tuple(json_t *a, uint8_t **out, size_t *n)
{
    tup_bytes k = { 0 };
    size_t i;
    json_t *v;
    int rc = 0;

    *out = NULL;
    *n = 0;
    if (a == NULL || json_is_null(a))
        return 0;
    if (!json_is_array(a) || json_array_size(a) == 0)
        return -1;
    json_array_foreach(a, i, v) {
        if (json_is_string(v))
            rc = tup_encode_str(&k, json_string_value(v), json_string_length(v));
        else if (json_is_integer(v))
            rc = tup_encode_int(&k, (int64_t)json_integer_value(v));
        else if (json_is_real(v))
            rc = tup_encode_double(&k, json_real_value(v));
        else if (json_is_boolean(v))
            rc = tup_encode_bool(&k, json_is_true(v));
        else
            rc = -1;
        if (rc) {
            tup_bytes_free(&k);
            return -1;
        }
    }
    *out = k.p;
    *n = k.n;
    return 0;
}

static int add_node(cfg_cluster *c, json_t *jn, int role, cfg_err *e)
{
    const char *name = json_string_value(json_object_get(jn, "name"));
    const char *url = json_string_value(json_object_get(jn, "url"));
    cfg_node *v;

    if (name == NULL || url == NULL || !*name || !*url)
        return fail(e, "every node needs \"name\" and \"url\" strings");
    if (cfg_node_by_name(c, name) >= 0)
        return fail(e, "node name '%s' used twice", name);
    v = realloc(c->nodes, (size_t)(c->nnodes + 1) * sizeof(cfg_node));
    if (v == NULL)
        return SX_ENOMEM;
    c->nodes = v;
    v[c->nnodes].name = dupstr(name);
    v[c->nnodes].url = dupstr(url);
    v[c->nnodes].role = role;
    v[c->nnodes].host = -1;
    v[c->nnodes].id = 0;
    c->nnodes++;
    if (!v[c->nnodes - 1].name || !v[c->nnodes - 1].url)
        return SX_ENOMEM;
    json_t *id = json_object_get(jn, "id");
    if (id != NULL) {
        if (!json_is_integer(id) || json_integer_value(id) < 1 || json_integer_value(id) > 255)
            return fail(e, "node '%s': \"id\" must be an integer from 1 to 255", name);
        if (cfg_node_by_id(c, (int)json_integer_value(id)) >= 0)
            return fail(e, "node '%s': \"id\" %d is another node's", name,
                        (int)json_integer_value(id));
        v[c->nnodes - 1].id = (int)json_integer_value(id);
    }
    return 0;
}

static int add_parts(cfg_cluster *c, json_t *jn, int role, cfg_err *e)
{
    json_t *parts = json_object_get(jn, "partitions"), *jp;
    size_t i;

    /* a node may be listed under no partition: it holds replicas of
     * partitions listed under others ("replicas") */
    if (parts == NULL)
        return 0;
    if (!json_is_array(parts))
        return fail(e, "node '%s': \"partitions\" must be an array", c->nodes[c->nnodes - 1].name);
    json_array_foreach(parts, i, jp) {
        int *count = role == SX_ROLE_STORAGE ? &c->nstorage : &c->nindex;
        cfg_part **arr = role == SX_ROLE_STORAGE ? &c->storage : &c->index;
        cfg_part *v = realloc(*arr, (size_t)(*count + 1) * sizeof(cfg_part));
        cfg_part *p;
        json_t *id = json_object_get(jp, "id");

        if (v == NULL)
            return SX_ENOMEM;
        *arr = v;
        p = &v[*count];
        memset(p, 0, sizeof(*p));
        (*count)++;
        p->node = c->nnodes - 1;
        p->nrep = 1;
        p->rep[0] = p->node;
        if (!json_is_integer(id) || json_integer_value(id) <= 0)
            return fail(e, "partition ids must be positive integers");
        p->id = (uint64_t)json_integer_value(id);
        if (role == SX_ROLE_STORAGE) {
            if (parse_u64hex(json_string_value(json_object_get(jp, "lo")), &p->hlo) ||
                parse_u64hex(json_string_value(json_object_get(jp, "hi")), &p->hhi) ||
                p->hlo > p->hhi)
                return fail(e,
                            "storage partition %llu: \"lo\"/\"hi\" must be 16 hex digits, lo <= hi",
                            (unsigned long long)p->id);
        } else if (json_tuple(json_object_get(jp, "lo"), &p->lo, &p->lo_n) ||
                   json_tuple(json_object_get(jp, "hi"), &p->hi, &p->hi_n)) {
            return fail(e, "index partition %llu: \"lo\"/\"hi\" must be null or arrays of scalars",
                        (unsigned long long)p->id);
        }
    }
    return 0;
}

/* Reads a list of node names of one role (a partition's "replicas", the
 * "catalog_node" array) into nodes[*n]; what names the list in errors. */
static int load_node_list(cfg_cluster *c, json_t *list, int role, const char *what, int *nodes,
                          int *n, cfg_err *e)
{
    size_t i;
    json_t *jn;

    if (!json_is_array(list) || json_array_size(list) < 1 ||
        json_array_size(list) > CFG_MAX_REPLICAS)
        return fail(e, "%s must be an array of 1 to %d node names", what, CFG_MAX_REPLICAS);
    *n = 0;
    json_array_foreach(list, i, jn) {
        const char *name = json_string_value(jn);
        int k = name ? cfg_node_by_name(c, name) : -1;
        if (k < 0 || c->nodes[k].role != role)
            return fail(e, "%s: '%s' is not a %s node of this cluster", what,
                        name ? name : "(not a string)",
                        role == SX_ROLE_STORAGE ? "storage" : "index");
        for (int j = 0; j < *n; j++)
            if (nodes[j] == k)
                return fail(e, "%s names '%s' twice: replicas are on distinct nodes", what, name);
        nodes[(*n)++] = k;
    }
    return 0;
}

/* The partitions' "replicas" (once every node is loaded and partition ids
 * are known to be unique): the node a partition is listed under first. */
static int load_replicas(cfg_cluster *c, json_t *root, cfg_err *e)
{
    static const char *const keys[2] = { "storage", "index" };
    for (int r = 0; r < 2; r++) {
        json_t *arr = json_object_get(root, keys[r]), *jn, *jp;
        size_t i, j;
        json_array_foreach(arr, i, jn) {
            json_array_foreach(json_object_get(jn, "partitions"), j, jp) {
                json_t *list = json_object_get(jp, "replicas");
                if (list == NULL)
                    continue;
                uint64_t id = (uint64_t)json_integer_value(json_object_get(jp, "id"));
                cfg_part *p = (cfg_part *)cfg_part_by_id(c, id, NULL);
                if (p == NULL)
                    return fail(e, "partition %llu: unknown", (unsigned long long)id);
                char what[64];
                snprintf(what, sizeof what, "partition %llu's \"replicas\"",
                         (unsigned long long)id);
                int rc = load_node_list(c, list, r == 0 ? SX_ROLE_STORAGE : SX_ROLE_INDEX, what,
                                        p->rep, &p->nrep, e);
                if (rc)
                    return rc;
                if (p->rep[0] != p->node)
                    return fail(e, "%s must start with '%s', the node it is listed under", what,
                                c->nodes[p->node].name);
            }
        }
    }
    return 0;
}

/* "catalog_node": a storage node's name, or an array of them (the
 * catalog's replicas). */
static int load_catalog(cfg_cluster *c, json_t *root, cfg_err *e)
{
    json_t *v = json_object_get(root, "catalog_node");
    const char *s = json_string_value(v);
    if (json_is_array(v)) {
        int rc = load_node_list(c, v, SX_ROLE_STORAGE, "\"catalog_node\"", c->catalog, &c->ncatalog,
                                e);
        if (rc)
            return rc;
    } else {
        c->catalog[0] = s ? cfg_node_by_name(c, s) : -1;
        c->ncatalog = 1;
        if (c->catalog[0] < 0 || c->nodes[c->catalog[0]].role != SX_ROLE_STORAGE)
            return fail(e, "\"catalog_node\" must name a storage node, or be an array of them");
    }
    c->catalog_node = c->catalog[0];
    return 0;
}

/* Every node holding a replica of a replicated group (more than one
 * replica) has an "id": replica ids are made of it, and must never change. */
static int check_ids(const cfg_cluster *c, cfg_err *e)
{
    for (int k = 0; k < c->nstorage + c->nindex; k++) {
        const cfg_part *p = k < c->nstorage ? &c->storage[k] : &c->index[k - c->nstorage];
        for (int j = 0; p->nrep > 1 && j < p->nrep; j++)
            if (!c->nodes[p->rep[j]].id)
                return fail(e, "node '%s' holds a replica of partition %llu: it needs an \"id\"",
                            c->nodes[p->rep[j]].name, (unsigned long long)p->id);
    }
    for (int j = 0; c->ncatalog > 1 && j < c->ncatalog; j++)
        if (!c->nodes[c->catalog[j]].id)
            return fail(e, "node '%s' holds a replica of the catalog: it needs an \"id\"",
                        c->nodes[c->catalog[j]].name);
    return 0;
}

static int cmp_storage(const void *a, const void *b)
{
    const cfg_part *x = a, *y = b;

    return x->hlo < y->hlo ? -1 : x->hlo > y->hlo;
}

static int cmp_index(const void *a, const void *b)
{
    const cfg_part *x = a, *y = b;

    if (x->lo_n == 0 || y->lo_n == 0)
        return (x->lo_n != 0) - (y->lo_n != 0);
    return tup_keycmp(x->lo, x->lo_n, y->lo, y->lo_n);
}

static int check_coverage(cfg_cluster *c, cfg_err *e)
{
    if (c->nstorage == 0 || c->nindex == 0)
        return fail(e, "the cluster needs at least one storage and one index partition");
    qsort(c->storage, (size_t)c->nstorage, sizeof(cfg_part), cmp_storage);
    qsort(c->index, (size_t)c->nindex, sizeof(cfg_part), cmp_index);
    if (c->storage[0].hlo != 0 || c->storage[c->nstorage - 1].hhi != UINT64_MAX)
        return fail(e, "storage partitions must cover hashes 0000000000000000..ffffffffffffffff");
    for (int i = 1; i < c->nstorage; i++)
        if (c->storage[i].hlo != c->storage[i - 1].hhi + 1)
            return fail(e, "storage partitions %llu and %llu leave a gap or overlap",
                        (unsigned long long)c->storage[i - 1].id,
                        (unsigned long long)c->storage[i].id);
    if (c->index[0].lo_n != 0 || c->index[c->nindex - 1].hi_n != 0)
        return fail(e, "the first index partition needs \"lo\": null and the last \"hi\": null");
    for (int i = 1; i < c->nindex; i++) {
        cfg_part *a = &c->index[i - 1], *b = &c->index[i];
        if (a->hi_n == 0 || tup_keycmp(a->hi, a->hi_n, b->lo, b->lo_n) != 0)
            return fail(e, "index partition %llu must end where %llu begins",
                        (unsigned long long)a->id, (unsigned long long)b->id);
    }
    for (int i = 0; i < c->nstorage + c->nindex; i++)
        for (int j = 0; j < i; j++) {
            uint64_t a = i < c->nstorage ? c->storage[i].id : c->index[i - c->nstorage].id;
            uint64_t b = j < c->nstorage ? c->storage[j].id : c->index[j - c->nstorage].id;
            if (a == b)
                return fail(e, "partition id %llu used twice", (unsigned long long)a);
        }
    return 0;
}

bool cfg_url_is_local(const char *url)
{
    nng_url *u = NULL;

    if (nng_url_parse(&u, url) != 0)
        return false;
    /* nng's own parse, as the listener will read it (a "user@" part
     * before the host is not the host) */
    bool local = false;
    const char *h = u->u_hostname;
    if (strcmp(u->u_scheme, "ipc") == 0 || strcmp(u->u_scheme, "inproc") == 0 ||
        strcmp(u->u_scheme, "abstract") == 0) {
        local = true;
    } else if ((u->u_userinfo == NULL || u->u_userinfo[0] == '\0') && h != NULL && h[0]) {
        struct in_addr a4;
        struct in6_addr a6;
        if (inet_pton(AF_INET, h, &a4) == 1)
            local = (ntohl(a4.s_addr) >> 24) == 127;
        else if (inet_pton(AF_INET6, h, &a6) == 1)
            local = IN6_IS_ADDR_LOOPBACK(&a6);
        else
            local = strcmp(h, "localhost") == 0;
    }
    nng_url_free(u);
    return local;
}

/* A cluster whose processes listen beyond this host must have a link key:
 * anyone who can reach an inter-node port could otherwise write and read
 * as a router does (DESIGN.md, "Security"). */
static int check_link_key(const cfg_cluster *c, cfg_err *e)
{
    if (c->has_link_key)
        return 0;
    for (int i = 0; i < c->nnodes; i++)
        if (!cfg_url_is_local(c->nodes[i].url))
            return fail(e,
                        "node '%s' listens on %s, not on loopback: a cluster that spans "
                        "hosts needs \"link_key\" (64 hex digits, 32 random bytes) so that its "
                        "processes authenticate each other",
                        c->nodes[i].name, c->nodes[i].url);
    return 0;
}

static int load_nodes(cfg_cluster *c, json_t *root, const char *key, int role, cfg_err *e)
{
    json_t *arr = json_object_get(root, key), *jn;
    size_t i;
    int rc;

    if (arr == NULL)
        return 0;
    if (!json_is_array(arr))
        return fail(e, "\"%s\" must be an array", key);
    json_array_foreach(arr, i, jn) {
        if ((rc = add_node(c, jn, role, e)) != 0)
            return rc;
        if (role != SX_ROLE_ROUTER && (rc = add_parts(c, jn, role, e)) != 0)
            return rc;
    }
    return 0;
}

/* The routers' "host": a storage node whose process runs the router
 * (calling that node in-process); each storage node hosts at most one.
 * Runs once every node is loaded. */
static int load_hosts(cfg_cluster *c, json_t *root, cfg_err *e)
{
    json_t *arr = json_object_get(root, "routers"), *jn;
    size_t i;

    json_array_foreach(arr, i, jn) {
        json_t *h = json_object_get(jn, "host");
        const char *name = json_string_value(json_object_get(jn, "name"));
        int self = name ? cfg_node_by_name(c, name) : -1, host;

        if (h == NULL || self < 0)
            continue;
        host = json_is_string(h) ? cfg_node_by_name(c, json_string_value(h)) : -1;
        if (host < 0 || c->nodes[host].role != SX_ROLE_STORAGE)
            return fail(e, "router '%s': \"host\" must name a storage node", name);
        if (strcmp(c->nodes[self].url, c->nodes[host].url) == 0)
            return fail(e,
                        "router '%s' and its host '%s' have the same url: the node "
                        "listens on both",
                        name, c->nodes[host].name);
        for (int k = 0; k < c->nnodes; k++)
            if (c->nodes[k].host == host)
                return fail(e, "storage node '%s' hosts two routers ('%s' and '%s')",
                            c->nodes[host].name, c->nodes[k].name, name);
        c->nodes[self].host = host;
    }
    return 0;
}

/* "max_clock_skew_ms": the most any two hosts' clocks may differ (msg.h,
 * deadline_ms); CFG_SKEW_DEFAULT_MS when absent. */
static int load_skew(cfg_cluster *c, json_t *root, cfg_err *e)
{
    json_t *v = json_object_get(root, "max_clock_skew_ms");

    c->max_clock_skew_ms = CFG_SKEW_DEFAULT_MS;
    if (v == NULL)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > CFG_SKEW_MAX_MS)
        return fail(e,
                    "\"max_clock_skew_ms\" must be an integer from 0 to %d "
                    "(milliseconds)",
                    CFG_SKEW_MAX_MS);
    c->max_clock_skew_ms = (int)json_integer_value(v);
    return 0;
}

/* path as given, or, when relative, joined to the folder of the config
 * file cfgpath (malloc'd; NULL when out of memory). */
static char *resolve(const char *cfgpath, const char *path)
{
    const char *slash = strrchr(cfgpath, '/');
    size_t dn = slash ? (size_t)(slash - cfgpath) + 1 : 0, n = dn + strlen(path) + 1;
    char *out;

    if (path[0] == '/' || dn == 0)
        return dupstr(path);
    out = malloc(n);
    if (out != NULL)
        snprintf(out, n, "%.*s%s", (int)dn, cfgpath, path);
    return out;
}

/* A router URL's kind: 1 TLS (tls+tcp, tls+tcp4, tls+tcp6), 0 plain (tcp,
 * tcp4, tcp6, ipc, abstract, inproc), -1 anything else (ws, wss, a URL nng
 * cannot parse), on which a router does not serve clients. */
static int router_url_kind(const char *url)
{
    static const char *const plain[] = { "tcp", "tcp4", "tcp6", "ipc", "abstract", "inproc" };
    nng_url *u = NULL;
    int kind = -1;

    if (nng_url_parse(&u, url) != 0)
        return -1;
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        char tls[16];
        snprintf(tls, sizeof(tls), "tls+%s", plain[i]);
        if (strcasecmp(u->u_scheme, plain[i]) == 0)
            kind = 0;
        else if (i < 3 && strcasecmp(u->u_scheme, tls) == 0)
            kind = 1;
    }
    nng_url_free(u);
    return kind;
}

/* "client_tls": {"ca", "cert", "key"}, the routers' TLS files (relative
 * to the config file's folder); with it every router URL must be TLS, and
 * without it none may be. */
static int load_client_tls(cfg_cluster *c, json_t *root, const char *path, cfg_err *e)
{
    json_t *t = json_object_get(root, "client_tls");
    const char *names[3] = { "ca", "cert", "key" };
    char **dst[3] = { &c->tls_ca, &c->tls_cert, &c->tls_key };

    if (t != NULL) {
        if (!json_is_object(t))
            return fail(e, "\"client_tls\" must be an object with \"ca\", \"cert\" and "
                           "\"key\" (PEM file paths)");
        for (int i = 0; i < 3; i++) {
            const char *v = json_string_value(json_object_get(t, names[i]));
            if (v == NULL || *v == '\0')
                return fail(e, "\"client_tls\" needs \"%s\" (a PEM file path)", names[i]);
            if ((*dst[i] = resolve(path, v)) == NULL)
                return SX_ENOMEM;
        }
    }
    for (int i = 0; i < c->nnodes; i++) {
        int kind = c->nodes[i].role == SX_ROLE_ROUTER ? router_url_kind(c->nodes[i].url) : 0;
        if (kind < 0)
            return fail(e,
                        "router '%s': a router serves clients on tcp://, ipc:// or, with "
                        "\"client_tls\", tls+tcp:// URLs, not %s",
                        c->nodes[i].name, c->nodes[i].url);
        if (c->nodes[i].role != SX_ROLE_ROUTER || kind == (t != NULL))
            continue;
        return fail(e,
                    t != NULL
                        ? "router '%s' must listen on a tls+tcp:// URL: the config has "
                          "\"client_tls\""
                        : "router '%s' listens on a TLS URL but the config has no \"client_tls\"",
                    c->nodes[i].name);
    }
    return 0;
}

int cfg_load(const char *path, cfg_cluster **out, char *err, size_t errlen)
{
    cfg_err e = { err, errlen };
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    cfg_cluster *c;
    const char *s;
    int rc;

    if (root == NULL)
        return fail(&e, "%s:%d: %s", path, jerr.line, jerr.text);
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        json_decref(root);
        return SX_ENOMEM;
    }
    s = json_string_value(json_object_get(root, "cluster"));
    c->cluster = dupstr(s ? s : "shardex");
    c->catalog_node = -1;
    if (c->cluster == NULL)
        rc = SX_ENOMEM;
    else if (hex_decode(json_string_value(json_object_get(root, "hash_key")), c->hash_key,
                        SX_HASH_KEY_BYTES))
        rc = fail(&e, "\"hash_key\" must be 32 hex digits (16 random bytes)");
    else if (hex_decode(json_string_value(json_object_get(root, "token_key")), c->token_key,
                        sizeof(c->token_key)))
        rc = fail(&e, "\"token_key\" must be 64 hex digits (32 random bytes)");
    else if ((c->has_link_key = json_object_get(root, "link_key") != NULL) &&
             hex_decode(json_string_value(json_object_get(root, "link_key")), c->link_key,
                        sizeof(c->link_key)))
        rc = fail(&e, "\"link_key\" must be 64 hex digits (32 random bytes)");
    else if ((rc = load_skew(c, root, &e)) == 0 &&
             (rc = load_nodes(c, root, "routers", SX_ROLE_ROUTER, &e)) == 0 &&
             (rc = load_nodes(c, root, "storage", SX_ROLE_STORAGE, &e)) == 0 &&
             (rc = load_nodes(c, root, "index", SX_ROLE_INDEX, &e)) == 0 &&
             (rc = load_hosts(c, root, &e)) == 0 && (rc = check_coverage(c, &e)) == 0 &&
             (rc = check_link_key(c, &e)) == 0 && (rc = load_client_tls(c, root, path, &e)) == 0 &&
             (rc = load_replicas(c, root, &e)) == 0 && (rc = load_catalog(c, root, &e)) == 0)
        rc = check_ids(c, &e);
    json_decref(root);
    if (rc) {
        cfg_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void cfg_free(cfg_cluster *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < c->nnodes; i++) {
        free(c->nodes[i].name);
        free(c->nodes[i].url);
    }
    for (int i = 0; i < c->nindex; i++) {
        free(c->index[i].lo);
        free(c->index[i].hi);
    }
    free(c->nodes);
    free(c->storage);
    free(c->index);
    free(c->cluster);
    free(c->tls_ca);
    free(c->tls_cert);
    free(c->tls_key);
    free(c);
}

int cfg_node_by_name(const cfg_cluster *c, const char *name)
{
    for (int i = 0; i < c->nnodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return i;
    return -1;
}

int cfg_check_supported(const cfg_cluster *c, char *err, size_t errlen)
{
    cfg_err e = { err, errlen };
    (void)e;
    return 0;
}

int cfg_node_by_id(const cfg_cluster *c, int id)
{
    for (int i = 0; id > 0 && i < c->nnodes; i++)
        if (c->nodes[i].id == id)
            return i;
    return -1;
}

bool cfg_part_on(const cfg_part *p, int node)
{
    for (int i = 0; i < p->nrep; i++)
        if (p->rep[i] == node)
            return true;
    return false;
}

bool cfg_catalog_on(const cfg_cluster *c, int node)
{
    for (int i = 0; i < c->ncatalog; i++)
        if (c->catalog[i] == node)
            return true;
    return false;
}

const cfg_part *cfg_storage_for(const cfg_cluster *c, uint64_t h)
{
    int lo = 0, hi = c->nstorage - 1;

    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (c->storage[mid].hlo <= h)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &c->storage[lo];
}

/* Index of the partition holding tuple t: the last one whose lo <= t. */
static int index_slot(const cfg_cluster *c, const uint8_t *t, size_t n)
{
    int slot = 0;

    for (int i = 1; i < c->nindex; i++)
        if (tup_keycmp(c->index[i].lo, c->index[i].lo_n, t, n) <= 0)
            slot = i;
    return slot;
}

const cfg_part *cfg_index_for(const cfg_cluster *c, const uint8_t *t, size_t n)
{
    return &c->index[index_slot(c, t, n)];
}

const cfg_part *cfg_part_by_id(const cfg_cluster *c, uint64_t id, int *role)
{
    for (int i = 0; i < c->nstorage; i++)
        if (c->storage[i].id == id) {
            if (role)
                *role = SX_ROLE_STORAGE;
            return &c->storage[i];
        }
    for (int i = 0; i < c->nindex; i++)
        if (c->index[i].id == id) {
            if (role)
                *role = SX_ROLE_INDEX;
            return &c->index[i];
        }
    return NULL;
}

void cfg_index_range(const cfg_cluster *c, const uint8_t *lo, size_t lo_n, const uint8_t *hi,
                     size_t hi_n, int *first, int *count)
{
    int a = index_slot(c, lo, lo_n);
    int b = c->nindex - 1;

    if (hi_n > 0) {
        /* the last partition whose lo < hi (hi is exclusive) */
        b = a;
        for (int i = a + 1; i < c->nindex; i++)
            if (tup_keycmp(c->index[i].lo, c->index[i].lo_n, hi, hi_n) < 0)
                b = i;
    }
    *first = a;
    *count = b - a + 1;
}
