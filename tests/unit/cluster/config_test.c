/*
 * config_test.c — the cluster map: config validation errors, hash-range
 * lookup at partition boundaries, index-range lookup for point tuples and
 * for query ranges, the keyed shard hash (deterministic, key-dependent),
 * the link key: optional on loopback, required when a process listens
 * beyond it; replicas (node ids, a partition's "replicas", the catalog's
 * array) and their errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "config.h"
#include "hash.h"
#include "tuple.h"
#include "sx_errors.h"

static const char *GOOD =
    "{\"cluster\":\"t\",\"hash_key\":\"000102030405060708090a0b0c0d0e0f\","
    "\"token_key\":\"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\","
    "\"catalog_node\":\"s1\",\"routers\":[{\"name\":\"r1\",\"url\":\"tcp://127.0.0.1:1\"}],"
    "\"storage\":[{\"name\":\"s1\",\"url\":\"tcp://127.0.0.1:2\",\"partitions\":["
    "{\"id\":2,\"lo\":\"8000000000000000\",\"hi\":\"ffffffffffffffff\"},"
    "{\"id\":1,\"lo\":\"0000000000000000\",\"hi\":\"7fffffffffffffff\"}]}],"
    "\"index\":[{\"name\":\"i1\",\"url\":\"tcp://127.0.0.1:3\",\"partitions\":["
    "{\"id\":11,\"lo\":null,\"hi\":[\"M\"]},{\"id\":13,\"lo\":[\"T\"],\"hi\":null},"
    "{\"id\":12,\"lo\":[\"M\"],\"hi\":[\"T\"]}]}]}";

static int load(const char *text, cfg_cluster **c, char *err, size_t n)
{
    char path[] = "/tmp/sx_routing_XXXXXX";
    int fd = mkstemp(path), rc;
    FILE *f;

    if (fd < 0)
        return -1;
    f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    rc = cfg_load(path, c, err, n);
    unlink(path);
    return rc;
}

/* text with its first `from` replaced by `to` (malloc'd). */
static char *subst(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);

    if (out == NULL || at == NULL) {
        free(out);
        return strdup(text);
    }
    snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return out;
}

#define LKEY          \
    "\"link_key\":\"" \
    "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff000102030405060708090a0b0c0d0e0f\","

/* max_clock_skew_ms: 100 when absent; an integer 0..60000; anything else
 * refused with its name. */
static void skew_cases(void)
{
    static const struct {
        const char *val;
        int rc, ms;
    } cases[] = {
        { NULL, 0, 100 },           { "0", 0, 0 },
        { "250", 0, 250 },          { "60000", 0, 60000 },
        { "60001", SX_ECONFIG, 0 }, { "-1", SX_ECONFIG, 0 },
        { "1.5", SX_ECONFIG, 0 },   { "\"100\"", SX_ECONFIG, 0 },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cfg_cluster *c = NULL;
        char err[256] = "", field[64];
        snprintf(field, sizeof(field), "\"max_clock_skew_ms\":%s,\"catalog_node\"",
                 cases[i].val ? cases[i].val : "");
        char *text = cases[i].val ? subst(GOOD, "\"catalog_node\"", field) : strdup(GOOD);
        int rc = load(text, &c, err, sizeof(err));
        CHECK(rc == cases[i].rc);
        if (rc == 0)
            CHECK(c && c->max_clock_skew_ms == cases[i].ms);
        else
            CHECK(c == NULL && strstr(err, "max_clock_skew_ms") != NULL);
        cfg_free(c);
        free(text);
    }
}

/* A router's "host": absent, the router is a process of its own (-1);
 * else it must name a storage node, which hosts at most one router. */
static void host_cases(void)
{
    static const char *const R2 = ",{\"name\":\"r2\",\"url\":\"tcp://127.0.0.1:4\"";
    static const struct {
        const char *r1, *r2;
        int rc;
        const char *why;
    } cases[] = {
        { "", NULL, 0, NULL },
        { ",\"host\":\"s1\"", NULL, 0, NULL },
        { ",\"host\":\"s1\"", "", 0, NULL },
        { ",\"host\":\"i1\"", NULL, SX_ECONFIG, "router 'r1': \"host\" must name a storage node" },
        { ",\"host\":\"r1\"", NULL, SX_ECONFIG, "must name a storage node" },
        { ",\"host\":\"nope\"", NULL, SX_ECONFIG, "must name a storage node" },
        { ",\"host\":7", NULL, SX_ECONFIG, "must name a storage node" },
        { ",\"host\":\"s1\"", ",\"host\":\"s1\"", SX_ECONFIG,
          "storage node 's1' hosts two routers ('r1' and 'r2')" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cfg_cluster *c = NULL;
        char err[256] = "", r1[128], rs[256];
        snprintf(r1, sizeof(r1), "\"url\":\"tcp://127.0.0.1:1\"%s}", cases[i].r1);
        snprintf(rs, sizeof(rs), "%s%s%s%s", r1, cases[i].r2 ? R2 : "",
                 cases[i].r2 ? cases[i].r2 : "", cases[i].r2 ? "}" : "");
        char *text = subst(GOOD, "\"url\":\"tcp://127.0.0.1:1\"}", rs);
        int rc = load(text, &c, err, sizeof(err));
        CHECK_INT(rc, cases[i].rc);
        if (rc == 0 && c != NULL) {
            int r = cfg_node_by_name(c, "r1"), s = cfg_node_by_name(c, "s1");
            CHECK_INT(c->nodes[r].host, cases[i].r1[0] ? s : -1);
            CHECK_INT(c->nodes[s].host, -1);
            if (cases[i].r2)
                CHECK_INT(c->nodes[cfg_node_by_name(c, "r2")].host, -1);
        } else if (rc != 0) {
            CHECK(c == NULL && strstr(err, cases[i].why) != NULL);
            if (strstr(err, cases[i].why) == NULL)
                fprintf(stderr, "host case %zu: %s\n", i, err);
        }
        cfg_free(c);
        free(text);
    }
    /* a hosted router on its node's own url: refused */
    cfg_cluster *c = NULL;
    char err[256] = "";
    char *same = subst(GOOD, "\"url\":\"tcp://127.0.0.1:1\"}",
                       "\"url\":\"tcp://127.0.0.1:2\",\"host\":\"s1\"}");
    CHECK_INT(load(same, &c, err, sizeof(err)), SX_ECONFIG);
    CHECK(c == NULL && strstr(err, "router 'r1' and its host 's1' have the same url") != NULL);
    free(same);
}

/* A config of three storage and three index nodes, every partition and the
 * catalog on all three of their role, with replacements applied. */
static const char *REP =
    "{\"cluster\":\"t\",\"hash_key\":\"000102030405060708090a0b0c0d0e0f\","
    "\"token_key\":\"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\","
    "\"catalog_node\":[\"s1\",\"s2\",\"s3\"],"
    "\"storage\":["
    "{\"name\":\"s1\",\"id\":1,\"url\":\"tcp://127.0.0.1:2\",\"partitions\":["
    "{\"id\":1,\"lo\":\"0000000000000000\",\"hi\":\"7fffffffffffffff\","
    "\"replicas\":[\"s1\",\"s2\",\"s3\"]}]},"
    "{\"name\":\"s2\",\"id\":2,\"url\":\"tcp://127.0.0.1:3\",\"partitions\":["
    "{\"id\":2,\"lo\":\"8000000000000000\",\"hi\":\"ffffffffffffffff\","
    "\"replicas\":[\"s2\",\"s3\",\"s1\"]}]},"
    "{\"name\":\"s3\",\"id\":3,\"url\":\"tcp://127.0.0.1:4\",\"partitions\":[]}],"
    "\"index\":[{\"name\":\"i1\",\"id\":4,\"url\":\"tcp://127.0.0.1:5\",\"partitions\":["
    "{\"id\":11,\"lo\":null,\"hi\":null,\"replicas\":[\"i1\",\"i2\",\"i3\"]}]},"
    "{\"name\":\"i2\",\"id\":5,\"url\":\"tcp://127.0.0.1:6\",\"partitions\":[]},"
    "{\"name\":\"i3\",\"id\":6,\"url\":\"tcp://127.0.0.1:7\",\"partitions\":[]}]}";

static void replica_cases(void)
{
    cfg_cluster *c = NULL;
    char err[256] = "";
    CHECK_INT(load(REP, &c, err, sizeof(err)), 0);
    if (c != NULL) {
        int s1 = cfg_node_by_name(c, "s1"), s2 = cfg_node_by_name(c, "s2"),
            s3 = cfg_node_by_name(c, "s3"), i3 = cfg_node_by_name(c, "i3");
        CHECK_INT(c->ncatalog, 3);
        CHECK_INT(c->catalog_node, s1);
        CHECK(cfg_catalog_on(c, s3) && !cfg_catalog_on(c, i3));
        const cfg_part *p2 = cfg_part_by_id(c, 2, NULL), *p11 = cfg_part_by_id(c, 11, NULL);
        CHECK(p2 != NULL && p11 != NULL);
        if (p2 && p11) {
            CHECK_INT(p2->nrep, 3);
            CHECK_INT(p2->node, s2);
            CHECK(p2->rep[0] == s2 && p2->rep[1] == s3 && p2->rep[2] == s1);
            CHECK(cfg_part_on(p2, s1) && !cfg_part_on(p2, i3));
            CHECK(cfg_part_on(p11, i3));
        }
        CHECK_INT(cfg_node_by_id(c, 5), cfg_node_by_name(c, "i2"));
        CHECK_INT(cfg_node_by_id(c, 9), -1);
        CHECK_INT(cfg_node_by_id(c, 0), -1);
        CHECK_INT(c->nodes[s2].id, 2);
        /* the daemons serve every replicated group */
        CHECK_INT(cfg_check_supported(c, err, sizeof(err)), 0);
        cfg_free(c);
        c = NULL;
    }
    /* the single-replica form: one replica, the node listed under */
    CHECK_INT(load(GOOD, &c, err, sizeof(err)), 0);
    if (c != NULL) {
        CHECK_INT(c->ncatalog, 1);
        CHECK_INT(c->storage[0].nrep, 1);
        CHECK_INT(c->storage[0].rep[0], c->storage[0].node);
        CHECK_INT(c->nodes[0].id, 0);
        CHECK_INT(cfg_check_supported(c, err, sizeof(err)), 0);
        cfg_free(c);
        c = NULL;
    }
    static const struct {
        const char *from, *to, *why;
    } bad[] = {
        { "\"id\":2,", "", "node 's2' holds a replica of partition 1: it needs an \"id\"" },
        { "\"id\":2,", "\"id\":1,", "node 's2': \"id\" 1 is another node's" },
        { "\"id\":2,", "\"id\":256,", "node 's2': \"id\" must be an integer from 1 to 255" },
        { "\"id\":2,", "\"id\":\"2\",", "must be an integer from 1 to 255" },
        { "[\"s2\",\"s3\",\"s1\"]", "[\"s3\",\"s2\"]",
          "partition 2's \"replicas\" must start with 's2', the node it is listed under" },
        { "[\"s2\",\"s3\",\"s1\"]", "[\"s2\",\"s2\"]",
          "partition 2's \"replicas\" names 's2' twice" },
        { "[\"s2\",\"s3\",\"s1\"]", "[\"s2\",\"i1\"]",
          "partition 2's \"replicas\": 'i1' is not a storage node of this cluster" },
        { "[\"s2\",\"s3\",\"s1\"]", "[]", "must be an array of 1 to 7 node names" },
        { "[\"s2\",\"s3\",\"s1\"]", "\"s2\"", "must be an array of 1 to 7 node names" },
        { "[\"s1\",\"s2\",\"s3\"],", "[\"s1\",\"i2\"],",
          "\"catalog_node\": 'i2' is not a storage node" },
        { "[\"s1\",\"s2\",\"s3\"],", "7,", "\"catalog_node\" must name a storage node" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *text = subst(REP, bad[i].from, bad[i].to);
        c = NULL;
        err[0] = '\0';
        CHECK_INT(load(text, &c, err, sizeof(err)), SX_ECONFIG);
        CHECKF(c == NULL && strstr(err, bad[i].why) != NULL, "case %zu: %s", i, err);
        cfg_free(c);
        free(text);
    }
}

/* The link key's rules (DESIGN.md, "Security"). */
static void link_key_cases(void)
{
    cfg_cluster *c = NULL;
    char err[256] = "";

    CHECK(load(GOOD, &c, err, sizeof(err)) == 0 && c && !c->has_link_key);
    cfg_free(c);
    c = NULL;

    char *remote = subst(GOOD, "tcp://127.0.0.1:2", "tcp://10.1.2.3:7101");
    CHECK(load(remote, &c, err, sizeof(err)) == SX_ECONFIG && c == NULL);
    CHECK(strstr(err, "link_key") != NULL && strstr(err, "'s1'") != NULL);
    char *keyed = subst(remote, "\"catalog_node\"", LKEY "\"catalog_node\"");
    CHECK(load(keyed, &c, err, sizeof(err)) == 0 && c && c->has_link_key);
    CHECK(c && c->link_key[0] == 0xf0 && c->link_key[31] == 0x0f);
    cfg_free(c);
    c = NULL;
    char *badkey = subst(keyed, "f0f1f2", "f0fzf2"); /* 64 digits, one not hex */
    CHECK(load(badkey, &c, err, sizeof(err)) == SX_ECONFIG && strstr(err, "link_key"));
    free(badkey);
    free(keyed);
    free(remote);
    char *any = subst(GOOD, "tcp://127.0.0.1:1", "tcp://0.0.0.0:7100"); /* a router */
    CHECK(load(any, &c, err, sizeof(err)) == SX_ECONFIG && strstr(err, "'r1'"));
    free(any);

    static const struct {
        const char *url;
        bool local;
    } urls[] = {
        { "ipc:///tmp/x.sock", true },
        { "tcp://127.0.0.1:1", true },
        { "tcp://127.9.8.7:1", true },
        { "tcp://localhost:5", true },
        { "tcp://[::1]:5", true },
        { "tls+tcp://127.0.0.1:5", true },
        { "tcp4://127.0.0.1:5", true },
        { "tcp://:5", false },
        { "tcp://0.0.0.0:5", false },
        { "tcp://10.0.0.1:5", false },
        { "tcp://127.evil.example:5", false },
        { "tcp://example.com:5", false },
        { "tcp://[::]:5", false },
        { "tcp://[fe80::1]:5", false },
        { "nonsense", false },
        { "tcp://[::1]@0.0.0.0:7101", false },
        { "tcp://127.0.0.1@10.0.0.1:5", false },
        { "TCP://127.0.0.1:5", true },
        { "tcp://[::ffff:127.0.0.1]:5", false },
        { "tcp://localhost.:5", false },
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++)
        if (cfg_url_is_local(urls[i].url) != urls[i].local) {
            fprintf(stderr, "cfg_url_is_local(%s) is not %d\n", urls[i].url, urls[i].local);
            CHECK(false);
        }
}

static tup_bytes str_tuple(const char *s)
{
    tup_bytes b = { 0 };
    tup_encode_str(&b, s, strlen(s));
    return b;
}

int main(void)
{
    cfg_cluster *c = NULL;
    char err[256];

    CHECK(proto_init() == 0);
    CHECK(load(GOOD, &c, err, sizeof(err)) == 0);
    if (c == NULL) {
        fprintf(stderr, "config: %s\n", err);
        return 1;
    }
    CHECK(c->nstorage == 2 && c->storage[0].id == 1); /* sorted by hash */
    CHECK(cfg_storage_for(c, 0)->id == 1);
    CHECK(cfg_storage_for(c, 0x7fffffffffffffffULL)->id == 1);
    CHECK(cfg_storage_for(c, 0x8000000000000000ULL)->id == 2);
    CHECK(cfg_storage_for(c, UINT64_MAX)->id == 2);
    CHECK(c->nindex == 3 && c->index[1].id == 12); /* sorted by lo */

    tup_bytes a = str_tuple("Auburn"), m = str_tuple("M"), r = str_tuple("Redmond"),
              z = str_tuple("Zurich");
    CHECK(cfg_index_for(c, a.p, a.n)->id == 11);
    CHECK(cfg_index_for(c, m.p, m.n)->id == 12); /* lo is inclusive */
    CHECK(cfg_index_for(c, r.p, r.n)->id == 12);
    CHECK(cfg_index_for(c, z.p, z.n)->id == 13);
    int first, count;
    cfg_index_range(c, a.p, a.n, m.p, m.n, &first, &count); /* hi exclusive: only 11 */
    CHECK(first == 0 && count == 1);
    cfg_index_range(c, a.p, a.n, r.p, r.n, &first, &count);
    CHECK(first == 0 && count == 2);
    cfg_index_range(c, r.p, r.n, NULL, 0, &first, &count);
    CHECK(first == 1 && count == 2);
    cfg_index_range(c, NULL, 0, NULL, 0, &first, &count);
    CHECK(first == 0 && count == 3);
    tup_bytes_free(&a);
    tup_bytes_free(&m);
    tup_bytes_free(&r);
    tup_bytes_free(&z);
    host_cases();

    uint64_t h1 = hash_shard(c->hash_key, "abc", 3), h2 = hash_shard(c->hash_key, "abc", 3);
    uint8_t other[16] = { 1 };
    CHECK(h1 == h2);
    CHECK(hash_shard(other, "abc", 3) != h1);
    CHECK(hash_shard(c->hash_key, "abd", 3) != h1);
    cfg_free(c);

    /* invalid configs are refused with a reason */
    char *bad = strdup(GOOD);
    char *gap = strstr(bad, "8000000000000000");
    memcpy(gap, "8000000000000001", 16);
    CHECK(load(bad, &c, err, sizeof(err)) == SX_ECONFIG && strstr(err, "gap") != NULL);
    free(bad);
    bad = strdup(GOOD);
    memcpy(strstr(bad, "[\"T\"],\"hi\":null"), "[\"U\"]", 5);
    CHECK(load(bad, &c, err, sizeof(err)) == SX_ECONFIG && strstr(err, "must end where") != NULL);
    free(bad);
    CHECK(load("{\"hash_key\":\"zz\"}", &c, err, sizeof(err)) == SX_ECONFIG &&
          strstr(err, "hash_key"));
    CHECK(load("{not json", &c, err, sizeof(err)) == SX_ECONFIG);
    link_key_cases();
    skew_cases();
    replica_cases();
    return CHECK_DONE();
}
