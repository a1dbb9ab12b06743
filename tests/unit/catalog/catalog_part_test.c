/*
 * catalog_part_test.c — the catalog partition (node/catalog/catalog_part.c) served
 * over a real nng socket, read through the catalog cache
 * (proto/cluster/catalog_cache.c): create table/index, errors with reasons,
 * backfill → ready, idempotent repeats, persistence across reopen, borrowed
 * versions staying valid, concurrent cache readers, a change that would
 * make the catalog too large to fetch refused (its bound lowered through
 * SHARDEX_CATALOG_MAX_KB), and request ids: a change asked again under its
 * id answered with the version it made, not applied twice, across a
 * reopen too, the oldest ids forgotten past 256.
 * Links node_catalog. Argument: a scratch dir (default: a fresh one under
 * $TMPDIR or /tmp, removed afterwards unless a check failed).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "catalog_cache.h"
#include "catalog_part.h"
#include "check.h"
#include "msg.h"
#include "net.h"
#include "scratch.h"
#include "sx_errors.h"

static catp *g_catp; /* the served partition; swapped only while stopped */

static void handler(void *arg, const uint8_t *req, size_t n, mp_buf *out)
{
    msg_type t;
    int is_reply;

    (void)arg;
    if (msg_peek(req, n, &t, &is_reply) != 0 || is_reply) {
        msg_encode_err(MSG_PING, SX_EPROTO, "bad frame", out);
        return;
    }
    catp_handle(g_catp, t, req, n, out);
}

static net_peer *g_cli;
static char g_err[256];

/* Sends a request struct of type t and decodes the reply into *rep (its
 * type's reply struct, zeroed first), which borrows from *resp: the caller
 * frees both (msg_free_rep, free) whatever the outcome. */
static int call_into(msg_type t, const void *req, void *rep, uint8_t **resp)
{
    mp_buf b;
    uint8_t *f = NULL;
    size_t fn = 0, rn = 0;
    int rc;

    g_err[0] = '\0';
    *resp = NULL;
    mp_buf_init(&b);
    rc = msg_encode_req(t, req, &b);
    if (rc == 0)
        rc = mp_buf_take(&b, &f, &fn);
    mp_buf_free(&b);
    if (rc == 0)
        rc = net_peer_call_sync(g_cli, f, fn, 5000, resp, &rn);
    free(f);
    if (rc == 0)
        rc = msg_decode_rep(t, *resp, rn, rep, g_err, sizeof(g_err));
    return rc;
}

/* Sends a request struct of type t; decodes the reply into rep (version). */
static int call(msg_type t, const void *req, uint64_t *version)
{
    msg_CAT_UPDATE_rep rep; /* same shape as CAT_BACKFILLED's reply */
    uint8_t *r = NULL;
    int rc;

    memset(&rep, 0, sizeof(rep));
    rc = call_into(t, req, &rep, &r);
    if (rc == 0 && version)
        *version = rep.version;
    msg_free_rep(t, &rep);
    free(r);
    return rc;
}

/* CATALOG with since: *version and whether the catalog came back nil. */
static int catalog_since(uint64_t since, uint64_t *version, bool *nil)
{
    msg_CATALOG_req rq = { .since = since };
    msg_CATALOG_rep rep;
    uint8_t *r = NULL;
    int rc;

    memset(&rep, 0, sizeof(rep));
    rc = call_into(MSG_CATALOG, &rq, &rep, &r);
    if (rc == 0) {
        *version = rep.version;
        *nil = rep.catalog.n == 1 && rep.catalog.p[0] == 0xc0;
    }
    msg_free_rep(MSG_CATALOG, &rep);
    free(r);
    return rc;
}

static mp_span S(const char *s)
{
    mp_span b = { (const uint8_t *)s, strlen(s) };
    return b;
}

static mp_span g_rid; /* the request id the helpers below send (none: empty) */

static int create_table(const char *name, const char *pk, const char *sk, uint64_t *v)
{
    msg_CAT_UPDATE_req r;

    memset(&r, 0, sizeof(r));
    r.op = CATOP_CREATE_TABLE;
    r.rid = g_rid;
    r.table = S(name);
    r.pk = S(pk);
    r.sk = S(sk);
    return call(MSG_CAT_UPDATE, &r, v);
}

static int create_index(const char *table, const char *name, const char **attrs, uint32_t na,
                        uint64_t proj, const char **pa, uint32_t np, uint64_t *v)
{
    msg_CAT_UPDATE_req r;
    mp_span a[CAT_MAX_ATTRS + 2], p[CAT_MAX_ATTRS + 2];

    memset(&r, 0, sizeof(r));
    for (uint32_t i = 0; i < na; i++)
        a[i] = S(attrs[i]);
    for (uint32_t i = 0; i < np; i++)
        p[i] = S(pa[i]);
    r.op = CATOP_CREATE_INDEX;
    r.rid = g_rid;
    r.table = S(table);
    r.index = S(name);
    r.attrs.n = na;
    r.attrs.v = a;
    r.proj = proj;
    r.proj_attrs.n = np;
    r.proj_attrs.v = p;
    return call(MSG_CAT_UPDATE, &r, v);
}

static int backfilled(uint64_t index_id, uint64_t part, uint64_t *v)
{
    msg_CAT_BACKFILLED_req r;

    memset(&r, 0, sizeof(r));
    r.index_id = index_id;
    r.part = part;
    return call(MSG_CAT_BACKFILLED, &r, v);
}

static int drop_index(const char *table, const char *name, uint64_t *v)
{
    msg_CAT_UPDATE_req r;

    memset(&r, 0, sizeof(r));
    r.op = CATOP_DROP_INDEX;
    r.rid = g_rid;
    r.table = S(table);
    r.index = S(name);
    return call(MSG_CAT_UPDATE, &r, v);
}

static bool err_has(const char *needle)
{
    if (strstr(g_err, needle) != NULL)
        return true;
    fprintf(stderr, "reason '%s' lacks '%s'\n", g_err, needle);
    return false;
}

static void test_errors(void)
{
    const char *city[] = { "city" }, *rep[] = { "city", "city" };
    const char *pa[] = { "name", "name" };
    uint64_t v = 0;

    CHECK_RC(create_table("users", "id", "", &v), SX_EEXIST);
    CHECK(err_has("table 'users' already exists"));
    CHECK_RC(create_table("users", "other", "", &v), SX_EEXIST);
    CHECK(err_has("different key"));
    CHECK_RC(create_table("bad name", "id", "", &v), SX_EINVAL);
    CHECK(err_has("invalid table name 'bad name'"));
    CHECK_RC(create_table("t2", "primary", "", &v), SX_EINVAL);
    CHECK(err_has("reserved"));
    CHECK_RC(create_index("nope", "x", city, 1, CAT_PROJ_ALL, NULL, 0, &v), SX_ENOTABLE);
    CHECK(err_has("table 'nope' does not exist"));
    CHECK_RC(create_index("users", "x", rep, 2, CAT_PROJ_ALL, NULL, 0, &v), SX_EINVAL);
    CHECK(err_has("index attribute 'city' repeated"));
    CHECK_RC(create_index("users", "x", city, 1, CAT_PROJ_LIST, pa, 2, &v), SX_EINVAL);
    CHECK(err_has("projection attribute 'name' repeated"));
    CHECK_RC(create_index("users", "x", city, 1, CAT_PROJ_KEYS, pa, 1, &v), SX_EINVAL);
    CHECK(err_has("projection attributes are only allowed"));
    CHECK_RC(create_index("users", "x", city, 1, 7, NULL, 0, &v), SX_EINVAL);
    CHECK(err_has("unknown projection"));
    CHECK_RC(create_index("users", "by_city", city, 1, CAT_PROJ_ALL, NULL, 0, &v), SX_EEXIST);
    CHECK(err_has("index 'by_city' already exists on table 'users'"));
    CHECK_RC(drop_index("users", "nope", &v), SX_ENOINDEX);
    CHECK_RC(backfilled(9999, 1, &v), SX_ENOINDEX);
    CHECK_RC(backfilled(2, 77, &v), SX_EINVAL);
    CHECK(err_has("partition 77 is not a storage partition"));
}

typedef struct reader {
    catcache *cc;
    uint64_t want;
    int rc;
    uint64_t got;
} reader;

static void *read_thread(void *p)
{
    reader *r = p;
    const cat_catalog *cat = NULL;

    r->rc = catcache_get(r->cc, r->want, &cat);
    r->got = cat ? cat->version : 0;
    return NULL;
}

/* Serves the partition at dir on url; runs the scenario. */
static void test_served(const char *dir, const char *url, const cfg_cluster *cfg)
{
    net_server_opts so = { .workers = 4 };
    net_server *srv = NULL;
    catcache *cc = NULL;
    const cat_catalog *c0 = NULL, *c1 = NULL, *cat = NULL;
    const char *city[] = { "city" }, *pa[] = { "name" };
    const cat_table *t;
    const cat_index *ix;
    uint64_t v = 0, v2 = 0, id;
    cat_catalog *snap;
    reader rd[8];
    pthread_t th[8];

    CHECK_RC(catp_open(dir, cfg, &g_catp), 0);
    CHECK_RC(net_server_open_link(url, &so, handler, NULL, &srv), 0);
    CHECK_RC(net_peer_open_link(url, 1, &g_cli), 0);
    CHECK_RC(catcache_new(cfg, &cc), 0);

    CHECK_RC(catcache_get(cc, 0, &c0), 0);
    CHECK(c0 != NULL && c0->version == 0 && c0->ntables == 0);

    CHECK_RC(create_table("users", "id", "", &v), 0);
    CHECK(v == 1);
    CHECK_RC(create_table("events", "user", "ts", &v), 0);
    CHECK(v == 2);
    CHECK_RC(create_index("users", "by_city", city, 1, CAT_PROJ_LIST, pa, 1, &v), 0);
    CHECK(v == 3);
    test_errors();

    CHECK_RC(catcache_get(cc, 3, &c1), 0);
    CHECK(c1 != NULL && c1->version == 3 && c1->ntables == 2);
    CHECK(c0 != NULL && c0->version == 0 && c0->ntables == 0); /* still valid */
    t = c1 ? cat_table_by_name(c1, "users", 5) : NULL;
    ix = t ? cat_index_by_name(t, "by_city", 7) : NULL;
    CHECK(ix != NULL && ix->state == CAT_BUILDING && ix->nproj == 1);
    id = ix ? ix->id : 0;
    t = c1 ? cat_table_by_name(c1, "events", 6) : NULL;
    CHECK(t != NULL && t->sk != NULL && strcmp(t->sk, "ts") == 0);

    CHECK_RC(backfilled(id, 2, &v), 0);
    CHECK(v == 4);
    CHECK_RC(backfilled(id, 2, &v2), 0); /* repeat: no change */
    CHECK(v2 == 4);
    CHECK_RC(backfilled(id, 1, &v), 0);
    CHECK(v == 5);
    CHECK_RC(backfilled(id, 1, &v2), 0); /* ready: no change */
    CHECK(v2 == 5);

    /* concurrent readers wanting the new version all get it */
    for (int i = 0; i < 8; i++) {
        rd[i] = (reader){ cc, 5, -1, 0 };
        CHECK(pthread_create(&th[i], NULL, read_thread, &rd[i]) == 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK(rd[i].rc == 0 && rd[i].got == 5);
    }
    CHECK_RC(catcache_get(cc, 5, &cat), 0);
    t = cat ? cat_table_by_name(cat, "users", 5) : NULL;
    ix = t ? cat_index_by_name(t, "by_city", 7) : NULL;
    CHECK(ix != NULL && ix->state == CAT_READY && ix->ndone == 2);
    /* a version the node does not have yet */
    CHECK_RC(catcache_get(cc, 99, &cat), SX_ESTALECAT);

    snap = catp_snapshot(g_catp);
    CHECK(snap != NULL && snap->version == 5);
    cat_free(snap);

    CHECK_RC(drop_index("users", "by_city", &v), 0);
    CHECK(v == 6);
    CHECK_RC(catcache_refresh(cc), 0);
    CHECK_RC(catcache_get(cc, 0, &cat), 0);
    CHECK(cat != NULL && cat->version == 6);
    CHECK(c1 != NULL && c1->version == 3);
    /* CATALOG's since: the catalog only from that version on */
    {
        uint64_t ver = 0;
        bool nil = true;

        CHECK(catp_version(g_catp) == 6);
        CHECK(catalog_since(0, &ver, &nil) == 0 && ver == 6 && !nil);
        CHECK(catalog_since(6, &ver, &nil) == 0 && ver == 6 && !nil);
        CHECK(catalog_since(7, &ver, &nil) == 0 && ver == 6 && nil);
    }
    /* a poll while nothing changed (the cache asks from 7 on) keeps v6 */
    CHECK_RC(catcache_refresh(cc), 0);
    CHECK_RC(catcache_get(cc, 0, &cat), 0);
    CHECK(cat != NULL && cat->version == 6 && cat->ntables == 2);

    net_server_stop(srv);
    catp_close(g_catp);
    g_catp = NULL;
    /* the node is down: a newer version cannot be had, the cached one can */
    CHECK(catcache_get(cc, 7, &cat) != 0);
    CHECK_RC(catcache_get(cc, 6, &cat), 0);
    catcache_free(cc);
    net_peer_close(g_cli);
}

/* Reopens the partition: the catalog survived. */
static void test_reopen(const char *dir, const cfg_cluster *cfg)
{
    catp *c = NULL;
    cat_catalog *snap;

    CHECK_RC(catp_open(dir, cfg, &c), 0);
    snap = c ? catp_snapshot(c) : NULL;
    CHECK(snap != NULL && snap->version == 6 && snap->ntables == 2 && snap->next_id == 4);
    cat_free(snap);
    catp_close(c);
}

/* A catalog bounded to 2 KiB: tables are created until one would cross it;
 * that one is refused with a reason, nothing changes, and the stored
 * catalog still opens. */
static void test_too_big(const char *dir, const char *url, const cfg_cluster *cfg)
{
    net_server_opts so = { .workers = 2 };
    net_server *srv = NULL;
    uint64_t v = 0, last = 0;
    char name[64];
    cat_catalog *snap;
    catp *c = NULL;
    int i, rc = 0;

    CHECK(setenv("SHARDEX_CATALOG_MAX_KB", "2", 1) == 0);
    CHECK_RC(catp_open(dir, cfg, &g_catp), 0);
    CHECK_RC(net_server_open_link(url, &so, handler, NULL, &srv), 0);
    CHECK_RC(net_peer_open_link(url, 1, &g_cli), 0);
    for (i = 0; i < 200 && rc == 0; i++) {
        snprintf(name, sizeof(name), "a_table_with_a_long_name_%03d", i);
        rc = create_table(name, "id", "", &v);
        if (rc == 0)
            last = v;
    }
    CHECK_RC(rc, SX_ETOOBIG);
    CHECK(i > 5 && i < 200); /* some fit, then one did not */
    CHECK(err_has("would grow past 2 KiB"));
    CHECK(v == last); /* nothing changed */
    net_server_stop(srv);
    catp_close(g_catp);
    g_catp = NULL;
    net_peer_close(g_cli);
    g_cli = NULL;
    CHECK(unsetenv("SHARDEX_CATALOG_MAX_KB") == 0);
    CHECK_RC(catp_open(dir, cfg, &c), 0);
    snap = c ? catp_snapshot(c) : NULL;
    CHECK(snap != NULL && snap->version == last && snap->ntables == (uint32_t)(i - 1));
    cat_free(snap);
    catp_close(c);
}

/* Sets g_rid to 16 bytes derived from k (rid_buf holds them). */
static uint8_t rid_buf[16];
static void use_rid(unsigned k)
{
    memset(rid_buf, 0, sizeof rid_buf);
    memcpy(rid_buf, &k, sizeof k);
    rid_buf[15] = 0x5a;
    g_rid = (mp_span){ rid_buf, sizeof rid_buf };
}

/* Request ids (CAT_UPDATE's rid). */
static void test_rids(const char *dir, const char *url, const cfg_cluster *cfg)
{
    net_server_opts so = { .workers = 2 };
    net_server *srv = NULL;
    uint64_t v1 = 0, v2 = 0, v3 = 0, v = 0;
    const char *attrs[] = { "town" };
    cat_catalog *snap;
    char name[32];

    CHECK_RC(catp_open(dir, cfg, &g_catp), 0);
    CHECK_RC(net_server_open_link(url, &so, handler, NULL, &srv), 0);
    CHECK_RC(net_peer_open_link(url, 1, &g_cli), 0);
    use_rid(1);
    CHECK_RC(create_table("t", "id", "", &v1), 0);
    CHECK_RC(create_table("t", "id", "", &v), 0); /* asked again */
    CHECK(v == v1);
    snap = catp_snapshot(g_catp);
    CHECK(snap != NULL && snap->version == v1); /* not applied twice */
    cat_free(snap);
    use_rid(2);
    CHECK_RC(create_table("t", "id", "", &v), SX_EEXIST); /* another request */
    CHECK_RC(create_table("t2", "id", "", &v), 0);        /* a refusal is not kept */
    CHECK(v == v1 + 1);
    v1 = v; /* (t's version: v1 - 1) */
    use_rid(1);
    CHECK_RC(create_table("other", "id", "", &v), SX_EINVAL); /* id 1, another change */
    CHECK(err_has("another catalog change"));
    use_rid(3);
    CHECK_RC(create_index("t", "ix", attrs, 1, 0, NULL, 0, &v2), 0);
    CHECK_RC(create_index("t", "ix", attrs, 1, 0, NULL, 0, &v), 0);
    CHECK(v == v2 && v2 == v1 + 1);
    use_rid(4);
    CHECK_RC(drop_index("t", "ix", &v3), 0);
    CHECK_RC(drop_index("t", "ix", &v), 0); /* not "no such index" */
    CHECK(v == v3 && v3 == v2 + 1);
    g_rid = (mp_span){ rid_buf, 5 };
    CHECK_RC(create_table("u", "id", "", &v), SX_EINVAL);
    CHECK(err_has("request id"));
    g_rid = (mp_span){ NULL, 0 };
    CHECK_RC(drop_index("t", "ix", &v), SX_ENOINDEX); /* no id: as before */
    net_server_stop(srv);
    catp_close(g_catp);
    g_catp = NULL;
    net_peer_close(g_cli);
    g_cli = NULL;

    /* reopened: the ids are remembered; past 256 newer ones, the oldest not */
    CHECK_RC(catp_open(dir, cfg, &g_catp), 0);
    CHECK_RC(net_server_open_link(url, &so, handler, NULL, &srv), 0);
    CHECK_RC(net_peer_open_link(url, 1, &g_cli), 0);
    use_rid(4);
    CHECK_RC(drop_index("t", "ix", &v), 0);
    CHECK(v == v3);
    use_rid(1);
    CHECK_RC(create_table("t", "id", "", &v), 0);
    CHECK(v == v1 - 1);
    for (unsigned k = 100; k < 100 + 256; k++) {
        use_rid(k);
        snprintf(name, sizeof name, "t%u", k);
        CHECK_RC(create_table(name, "id", "", &v), 0);
    }
    use_rid(1);
    CHECK_RC(create_table("t", "id", "", &v), SX_EEXIST); /* forgotten */
    use_rid(100);
    CHECK_RC(create_table("t100", "id", "", &v), 0); /* the oldest kept */
    use_rid(355);
    CHECK_RC(create_table("t355", "id", "", &v), 0); /* the newest: kept */
    g_rid = (mp_span){ NULL, 0 };
    net_server_stop(srv);
    catp_close(g_catp);
    g_catp = NULL;
    net_peer_close(g_cli);
    g_cli = NULL;
}

int main(int argc, char **argv)
{
    char tmpl[400], dir[512], url[600];
    cfg_part parts[2];
    cfg_node node;
    cfg_cluster cfg;
    const char *base = argc > 1 ? argv[1] : scratch_make("catalog_part_test", tmpl, sizeof(tmpl));

    if (base == NULL)
        return 1;
    snprintf(dir, sizeof(dir), "%s/catalog", base);
    snprintf(url, sizeof(url), "ipc://%s/cat.sock", base);
    memset(&cfg, 0, sizeof(cfg));
    memset(parts, 0, sizeof(parts));
    node.name = "s1";
    node.role = SX_ROLE_STORAGE;
    node.url = url;
    parts[0].id = 1;
    parts[1].id = 2;
    cfg.cluster = "test";
    cfg.nnodes = 1;
    cfg.nodes = &node;
    cfg.catalog_node = 0;
    cfg.nstorage = 2;
    cfg.storage = parts;

    test_served(dir, url, &cfg);
    test_reopen(dir, &cfg);
    snprintf(dir, sizeof(dir), "%s/catalog-small", base);
    snprintf(url, sizeof(url), "ipc://%s/cat-small.sock", base);
    test_too_big(dir, url, &cfg);
    snprintf(dir, sizeof(dir), "%s/catalog-rids", base);
    snprintf(url, sizeof(url), "ipc://%s/cat-rids.sock", base);
    test_rids(dir, url, &cfg);
    if (CHECK_FAILED() != 0) {
        fprintf(stderr, "catalog_part_test: data kept in %s\n", base);
        return CHECK_DONE();
    }
    if (argc <= 1)
        scratch_remove(base);
    return CHECK_DONE();
}
