/*
 * replicas_test.c — the router against scripted storage and index nodes
 * that hold replicas of replicated partitions and behave as the nodes'
 * contract says: fact partition 1 has replicas on s1, s2 and s3 (config
 * ids 1, 2, 3), of which only the one the test names the leader serves
 * S_WRITE, S_GET and S_RANGE and reports the partition's head in S_HEADS;
 * index partition 101 has replicas on i1, i2 and i3 (ids 11, 12, 13), of
 * which only the one the test names serves I_RANGE and I_WATERMARKS; the
 * others answer SX_ENOTLEADER with a hint (the leader's id, 0 during an
 * election, or whatever the test makes them say). Partition 2 has one
 * replica, on s4. A node can be frozen (every request waits, as a node
 * stopped with SIGSTOP) while the others elect a new leader and keep
 * naming the frozen one until then. Each node is a link server on an IPC
 * socket in a scratch dir; the router's handler is called directly (and
 * through a server of its own for the combined PUT path). Checks, through
 * the router's real calls:
 *   - GET and PUT go to the cached leader, follow a hint, and keep the
 *     leader they found for the next call; a hint naming a node that holds
 *     no replica is passed over;
 *   - during an election (every replica: hint 0) the call retries with
 *     pauses until a leader appears; with none at all it fails after the
 *     call's time with SX_ENOTLEADER naming the partition and the replicas;
 *   - an S_WRITE that timed out at the leader is not sent to another
 *     replica;
 *   - combined PUTs (router/wcomb.c) follow hints and wait out an election
 *     without being run again alone;
 *   - a strong read's heads come from each partition's leader, are asked
 *     again while no replica leads, and fail naming the partition when none
 *     does; a failed node holding only replicated partitions does not fail
 *     them, one holding a partition of one replica does;
 *   - a replica down is passed over, for reads and writes;
 *   - a query's I_RANGE and a strong read's I_WATERMARKS go to the index
 *     partition's leader: they follow hints, keep the leader found, wait
 *     out an election, and give up naming the index partition;
 *   - a frozen leader holds a GET for about a second, then the GET is served
 *     by the replica elected meanwhile, and the next goes straight there; a
 *     PUT at a frozen leader fails within 2 s as of unknown outcome and is
 *     sent nowhere else, and the next PUT (alone or combined) goes to the
 *     new leader at once; a frozen index leader holds a strong read about a
 *     second; a frozen storage node holding only replicated partitions
 *     holds the heads about a second, and is then not asked until it
 *     answers again.
 */
#define CHECK_TALLY_SHARED /* fixture.c checks too */
#define CHECK_TALLY_DEFINE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "router.h"
#include "query.h"
#include "catalog.h"
#include "hash.h"
#include "net.h"
#include "scratch.h"
#include "tuple.h"
#include "sx_errors.h"

#define CALL_MS 1500 /* the router's call timeout (SHARDEX_ROUTER_CALL_MS) */

enum { S1, S2, S3, S4, I1, I2, I3, NNODES };

/* One scripted node. */
typedef struct fnode {
    const char *name;
    int id; /* config "id" */
    net_server *srv;
    int calls[64]; /* requests received, by type */
} fnode;

/* The scripted cluster; everything under mu. */
static struct {
    pthread_mutex_t mu;
    fnode n[NNODES];
    int lead;          /* id of partition 1's leader (0: none) */
    uint64_t elect_at; /* lead 0: at this time (rt_now_ms) elect becomes it (0: never) */
    int elect;
    int hint;       /* >= 0: what every non-leader hints (-1: the leader's id) */
    int elect_hint; /* T.hint once elect becomes the leader */
    int ilead;      /* id of index partition 101's leader (0: none) */
    int ihint;      /* >= 0: what its other replicas hint (-1: ilead) */
    uint64_t ielect_at;
    int ielect, ielect_hint; /* as elect_at, elect, elect_hint for 101 */
    int stall_id;            /* the node whose S_WRITEs answer only after stall_ms */
    int stall_ms;
    int frozen_id;    /* the node every request of which waits until thaw_at */
    uint64_t thaw_at; /* (rt_now_ms) */
    uint8_t *cat;     /* the catalog CATALOG answers */
    size_t catn;
    uint64_t catver;
    uint8_t hash_key[SX_HASH_KEY_BYTES];
} T;

static char dir[256];
static cfg_cluster *cfg;

/* ---- the nodes ---- */

/* The partition a request of type t names (0: none or not decodable). */
static uint64_t req_part(msg_type t, const uint8_t *p, size_t n)
{
    uint64_t part = 0;

    if (t == MSG_S_GET) {
        msg_S_GET_req q;
        if (msg_decode_req(t, p, n, &q) == 0)
            part = q.part;
        msg_free_req(t, &q);
    } else if (t == MSG_S_WRITE) {
        msg_S_WRITE_req q;
        if (msg_decode_req(t, p, n, &q) == 0)
            part = q.part;
        msg_free_req(t, &q);
    } else if (t == MSG_S_RANGE) {
        msg_S_RANGE_req q;
        if (msg_decode_req(t, p, n, &q) == 0)
            part = q.part;
        msg_free_req(t, &q);
    } else if (t == MSG_I_RANGE) {
        msg_I_RANGE_req q;
        if (msg_decode_req(t, p, n, &q) == 0)
            part = q.part;
        msg_free_req(t, &q);
    } else if (t == MSG_I_WATERMARKS) {
        msg_I_WATERMARKS_req q;
        if (msg_decode_req(t, p, n, &q) == 0)
            part = q.part;
        msg_free_req(t, &q);
    }
    return part;
}

/* I_RANGE: an empty page (the partition holds nothing in range). */
static void serve_irange(mp_buf *out)
{
    msg_I_RANGE_rep r;

    memset(&r, 0, sizeof(r));
    msg_encode_rep(MSG_I_RANGE, &r, out);
}

/* S_GET: every key holds {"id": 1}, at version 100 * the node's id. */
static void serve_get(const fnode *nd, const uint8_t *p, size_t n, mp_buf *out)
{
    msg_S_GET_req q;
    msg_S_GET_rep r;
    mp_span items[8];
    uint64_t vers[8];
    static const uint8_t item[] = { 0x81, 0xa2, 'i', 'd', 0x01 };

    if (msg_decode_req(MSG_S_GET, p, n, &q) != 0 || q.keys.n > 8) {
        msg_encode_err(MSG_S_GET, SX_EPROTO, "bad S_GET", out);
        msg_free_req(MSG_S_GET, &q);
        return;
    }
    for (uint32_t i = 0; i < q.keys.n; i++) {
        items[i] = (mp_span){ item, sizeof(item) };
        vers[i] = 100u * (uint64_t)nd->id;
    }
    memset(&r, 0, sizeof(r));
    r.items = (msg_spans){ q.keys.n, items };
    r.versions = (msg_u64s){ q.keys.n, vers };
    msg_encode_rep(MSG_S_GET, &r, out);
    msg_free_req(MSG_S_GET, &q);
}

/* S_WRITE: operation i gets version 100 * the node's id + i. */
static void serve_write(const fnode *nd, const uint8_t *p, size_t n, mp_buf *out)
{
    msg_S_WRITE_req q;
    msg_S_WRITE_rep r;
    uint64_t vers[16], found[16];

    if (msg_decode_req(MSG_S_WRITE, p, n, &q) != 0 || q.objs.n > 16) {
        msg_encode_err(MSG_S_WRITE, SX_EPROTO, "bad S_WRITE", out);
        msg_free_req(MSG_S_WRITE, &q);
        return;
    }
    if (T.stall_id == nd->id) {
        pthread_mutex_unlock(&T.mu);
        usleep((useconds_t)T.stall_ms * 1000u);
        pthread_mutex_lock(&T.mu);
    }
    for (uint32_t i = 0; i < q.objs.n; i++) {
        vers[i] = 100u * (uint64_t)nd->id + i;
        found[i] = 1;
    }
    memset(&r, 0, sizeof(r));
    r.versions = (msg_u64s){ q.objs.n, vers };
    r.found = (msg_u64s){ q.objs.n, found };
    msg_encode_rep(MSG_S_WRITE, &r, out);
    msg_free_req(MSG_S_WRITE, &q);
}

/* S_HEADS: partition 1 (head 5) from its leader, partition 2 (head 9)
 * from s4. */
static void serve_heads(const fnode *nd, mp_buf *out)
{
    uint64_t part = nd->id == 4 ? 2 : 1, head = nd->id == 4 ? 9 : 5;
    bool has = nd->id == 4 || nd->id == T.lead;
    msg_S_HEADS_rep r = { 0, { has ? 1 : 0, &part }, { has ? 1 : 0, &head } };

    msg_encode_rep(MSG_S_HEADS, &r, out);
}

static void serve_watermarks(mp_buf *out)
{
    uint64_t src[2] = { 1, 2 }, wm[2] = { 50, 50 };
    msg_I_WATERMARKS_rep r = { 0, { 2, src }, { 2, wm } };

    msg_encode_rep(MSG_I_WATERMARKS, &r, out);
}

static void handler(void *arg, const uint8_t *p, size_t n, mp_buf *out)
{
    fnode *nd = arg;
    msg_type t;
    int is_rep;

    if (msg_peek(p, n, &t, &is_rep) != 0) {
        msg_encode_err(MSG_PING, SX_EPROTO, "bad frame", out);
        return;
    }
    pthread_mutex_lock(&T.mu);
    if ((int)t < 64)
        nd->calls[t]++;
    while (T.frozen_id == nd->id && rt_now_ms() < T.thaw_at) {
        pthread_mutex_unlock(&T.mu);
        usleep(5 * 1000);
        pthread_mutex_lock(&T.mu);
    }
    if (T.lead == 0 && T.elect_at != 0 && rt_now_ms() >= T.elect_at) {
        T.lead = T.elect;
        T.hint = T.elect_hint;
        T.elect_at = 0;
    }
    if (T.ilead == 0 && T.ielect_at != 0 && rt_now_ms() >= T.ielect_at) {
        T.ilead = T.ielect;
        T.ihint = T.ielect_hint;
        T.ielect_at = 0;
    }
    uint64_t part = req_part(t, p, n);
    if (t == MSG_CATALOG) {
        msg_CATALOG_rep r = { 0 };
        r.version = T.catver;
        r.catalog = (mp_span){ T.cat, T.catn };
        msg_encode_rep(MSG_CATALOG, &r, out);
    } else if (part == 1 && nd->id != T.lead) {
        msg_encode_err_hint(t, SX_ENOTLEADER, "not the leader of partition 1",
                            (uint64_t)(T.hint >= 0 ? T.hint : T.lead), out);
    } else if (part == 101 && nd->id != T.ilead) {
        msg_encode_err_hint(t, SX_ENOTLEADER, "not the leader of index partition 101",
                            (uint64_t)(T.ihint >= 0 ? T.ihint : T.ilead), out);
    } else if (t == MSG_I_RANGE) {
        serve_irange(out);
    } else if (t == MSG_S_GET) {
        serve_get(nd, p, n, out);
    } else if (t == MSG_S_WRITE) {
        serve_write(nd, p, n, out);
    } else if (t == MSG_S_HEADS) {
        serve_heads(nd, out);
    } else if (t == MSG_I_WATERMARKS) {
        serve_watermarks(out);
    } else {
        msg_encode_err(t, SX_EINVAL, "not scripted", out);
    }
    pthread_mutex_unlock(&T.mu);
}

/* ---- set-up ---- */

static bool write_config(void)
{
    char path[400];
    FILE *f;
    int w;

    snprintf(path, sizeof(path), "%s/cluster.json", dir);
    if ((f = fopen(path, "w")) == NULL)
        return false;
    w = fprintf(
        f,
        "{\"cluster\": \"replicas\", \"hash_key\": \"000102030405060708090a0b0c0d0e0f\",\n"
        " \"token_key\": \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\",\n"
        " \"catalog_node\": \"s1\",\n"
        " \"routers\": [{\"name\": \"r1\", \"url\": \"inproc://replicas-r1\"}],\n"
        " \"storage\": [\n"
        "  {\"name\": \"s1\", \"id\": 1, \"url\": \"ipc://%s/s1.sock\", \"partitions\": [\n"
        "   {\"id\": 1, \"lo\": \"0000000000000000\", \"hi\": \"7fffffffffffffff\",\n"
        "    \"replicas\": [\"s1\", \"s2\", \"s3\"]}]},\n"
        "  {\"name\": \"s2\", \"id\": 2, \"url\": \"ipc://%s/s2.sock\", \"partitions\": []},\n"
        "  {\"name\": \"s3\", \"id\": 3, \"url\": \"ipc://%s/s3.sock\", \"partitions\": []},\n"
        "  {\"name\": \"s4\", \"id\": 4, \"url\": \"ipc://%s/s4.sock\", \"partitions\": [\n"
        "   {\"id\": 2, \"lo\": \"8000000000000000\", \"hi\": \"ffffffffffffffff\"}]}],\n"
        " \"index\": [{\"name\": \"i1\", \"id\": 11, \"url\": \"ipc://%s/i1.sock\",\n"
        "   \"partitions\": [{\"id\": 101, \"lo\": null, \"hi\": null,\n"
        "                   \"replicas\": [\"i1\", \"i2\", \"i3\"]}]},\n"
        "  {\"name\": \"i2\", \"id\": 12, \"url\": \"ipc://%s/i2.sock\", \"partitions\": []},\n"
        "  {\"name\": \"i3\", \"id\": 13, \"url\": \"ipc://%s/i3.sock\", \"partitions\": []}]}\n",
        dir, dir, dir, dir, dir, dir, dir);
    return fclose(f) == 0 && w > 0;
}

static bool open_nodes(void)
{
    static const char *names[NNODES] = { "s1", "s2", "s3", "s4", "i1", "i2", "i3" };
    char path[400], err[300];
    net_server_opts no = { .workers = 2 };

    if (scratch_make("sx-router-replicas", dir, sizeof(dir)) == NULL || !write_config())
        return false;
    snprintf(path, sizeof(path), "%s/cluster.json", dir);
    if (cfg_load(path, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "replicas: config: %s\n", err);
        return false;
    }
    memcpy(T.hash_key, cfg->hash_key, sizeof(T.hash_key));
    for (int k = 0; k < NNODES; k++) {
        T.n[k].name = names[k];
        T.n[k].id = k < I1 ? k + 1 : 11 + (k - I1);
        snprintf(path, sizeof(path), "ipc://%s/%s.sock", dir, names[k]);
        CHECK(net_server_open_link(path, &no, handler, &T.n[k], &T.n[k].srv) == 0);
    }
    return true;
}

/* Publishes the catalog: table t, key id, index by_x on x (ready). */
static void make_catalog(void)
{
    cat_catalog *cat = cat_new();
    const char *attrs[] = { "x" };
    uint64_t parts[] = { 1, 2 };
    mp_buf b;

    CHECK(cat != NULL);
    if (cat == NULL)
        return;
    CHECK(cat_create_table(cat, "t", "id", NULL) == 0);
    CHECK(cat_create_index(cat, "t", "by_x", attrs, 1, CAT_PROJ_KEYS, NULL, 0) == 0);
    const cat_index *ix = cat_index_by_name(cat_table_by_name(cat, "t", 1), "by_x", 4);
    CHECK(ix != NULL);
    if (ix != NULL) {
        CHECK(cat_mark_backfilled(cat, ix->id, 1, parts, 2) == 0);
        CHECK(cat_mark_backfilled(cat, ix->id, 2, parts, 2) == 0);
    }
    mp_buf_init(&b);
    CHECK(cat_encode(cat, &b) == 0);
    CHECK(mp_buf_take(&b, &T.cat, &T.catn) == 0);
    T.catver = cat->version;
    mp_buf_free(&b);
    cat_free(cat);
}

/* ---- helpers ---- */

/* The first id >= from whose shard hash falls in partition part (1: low
 * half, 2: high half). */
static int id_in(int part, int from)
{
    for (int id = from;; id++) {
        tup_bytes pk = { 0 };
        tup_encode_int(&pk, id);
        int p = hash_shard(T.hash_key, pk.p, pk.n) <= 0x7fffffffffffffffull ? 1 : 2;
        tup_bytes_free(&pk);
        if (p == part)
            return id;
    }
}

/* Sets the scripted state of partition 1 (once elected, the others hint
 * the leader). */
static void script(int lead, uint64_t elect_in_ms, int elect, int hint)
{
    pthread_mutex_lock(&T.mu);
    T.lead = lead;
    T.elect_at = elect_in_ms != 0 ? rt_now_ms() + elect_in_ms : 0;
    T.elect = elect;
    T.hint = hint;
    T.elect_hint = -1;
    pthread_mutex_unlock(&T.mu);
}

/* The same for index partition 101. */
static void iscript(int lead, uint64_t elect_in_ms, int elect, int hint)
{
    pthread_mutex_lock(&T.mu);
    T.ilead = lead;
    T.ielect_at = elect_in_ms != 0 ? rt_now_ms() + elect_in_ms : 0;
    T.ielect = elect;
    T.ihint = hint;
    T.ielect_hint = -1;
    pthread_mutex_unlock(&T.mu);
}

/* Freezes node id's requests for ms (0: none frozen). */
static void freeze(int id, int ms)
{
    pthread_mutex_lock(&T.mu);
    T.frozen_id = id;
    T.thaw_at = rt_now_ms() + (uint64_t)ms;
    pthread_mutex_unlock(&T.mu);
}

/* Waits until no node is frozen any more, then tells the router every node
 * answers again (as its next answered call would). */
static void thaw_all(router *rt)
{
    uint64_t at;

    pthread_mutex_lock(&T.mu);
    at = T.thaw_at;
    pthread_mutex_unlock(&T.mu);
    while (rt_now_ms() < at + 50)
        usleep(10 * 1000);
    freeze(0, 0);
    for (int k = 0; k < cfg->nnodes; k++)
        rt_leader_seen(&rt->leaders, k, RT_LH_ANSWERED, rt_now_ms() + 1);
    for (int k = 0; k < rt->leaders.nparts * CFG_MAX_REPLICAS; k++)
        atomic_store(&rt->leaders.lost_at[k], 0); /* (as a success there would) */
}

/* Requests of type t node k received so far. */
static int calls(int k, msg_type t)
{
    pthread_mutex_lock(&T.mu);
    int c = T.n[k].calls[t];
    pthread_mutex_unlock(&T.mu);
    return c;
}

/* The node index of cfg node name. */
static int node(const char *name)
{
    return cfg_node_by_name(cfg, name);
}

/* A GET of {"id": id} through the router's handler: its code, the version
 * it answered (the serving node's id * 100), its message. */
static int get(router *rt, int id, uint64_t *version, char *msg, size_t mlen)
{
    msg_GET_req q;
    msg_GET_rep r;
    mp_buf key, req, out;
    int rc;

    mp_buf_init(&key);
    mp_put_map(&key, 1);
    mp_put_cstr(&key, "id");
    mp_put_i64(&key, id);
    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.key = (mp_span){ (const uint8_t *)key.sb.data, key.sb.size };
    mp_buf_init(&req);
    mp_buf_init(&out);
    CHECK(msg_encode_req(MSG_GET, &q, &req) == 0);
    rt_handle(rt, (const uint8_t *)req.sb.data, req.sb.size, &out);
    memset(&r, 0, sizeof(r));
    rc = msg_decode_rep(MSG_GET, (const uint8_t *)out.sb.data, out.sb.size, &r, msg, mlen);
    *version = rc == 0 ? r.version : 0;
    msg_free_rep(MSG_GET, &r);
    mp_buf_free(&key);
    mp_buf_free(&req);
    mp_buf_free(&out);
    return rc;
}

/* A PUT frame of table t with item {"id": id}, into b. */
static void put_frame(int id, mp_buf *b)
{
    mp_buf it;
    mp_span raw;
    msg_PUT_req q;

    mp_buf_init(&it);
    mp_put_map(&it, 1);
    mp_put_cstr(&it, "id");
    mp_put_i64(&it, id);
    raw = (mp_span){ (const uint8_t *)it.sb.data, it.sb.size };
    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.items = (msg_spans){ 1, &raw };
    mp_buf_init(b);
    CHECK(msg_encode_req(MSG_PUT, &q, b) == 0);
    mp_buf_free(&it);
}

/* Decodes PUT reply frame p..n: its code, its first version, its message. */
static int put_reply(const uint8_t *p, size_t n, uint64_t *version, char *msg, size_t mlen)
{
    msg_PUT_rep r;
    int rc;

    memset(&r, 0, sizeof(r));
    rc = msg_decode_rep(MSG_PUT, p, n, &r, msg, mlen);
    *version = rc == 0 && r.versions.n == 1 ? r.versions.v[0] : 0;
    msg_free_rep(MSG_PUT, &r);
    return rc;
}

/* A PUT of {"id": id} through the router's handler (write.c's path). */
static int put(router *rt, int id, uint64_t *version, char *msg, size_t mlen)
{
    mp_buf req, out;
    int rc;

    put_frame(id, &req);
    mp_buf_init(&out);
    rt_handle(rt, (const uint8_t *)req.sb.data, req.sb.size, &out);
    rc = put_reply((const uint8_t *)out.sb.data, out.sb.size, version, msg, mlen);
    mp_buf_free(&req);
    mp_buf_free(&out);
    return rc;
}

/* ---- the checks ---- */

static void reads_and_writes(router *rt, int k1)
{
    const cfg_part *p1 = &cfg->storage[0];
    uint64_t v;
    char msg[256];
    int g0, g2;

    /* s2 leads; the cache starts at s1, which names s2 */
    script(2, 0, 0, -1);
    CHECK_INT(rt_leader_get(&rt->leaders, p1), node("s1"));
    g0 = calls(S1, MSG_S_GET);
    g2 = calls(S2, MSG_S_GET);
    CHECK_RC(get(rt, k1, &v, msg, sizeof(msg)), 0);
    CHECK_INT((int)v, 200);
    CHECK_INT(calls(S1, MSG_S_GET) - g0, 1);
    CHECK_INT(calls(S2, MSG_S_GET) - g2, 1);
    CHECK_INT(rt_leader_get(&rt->leaders, p1), node("s2"));
    /* the next call goes straight to s2 */
    g0 = calls(S1, MSG_S_GET);
    CHECK_RC(get(rt, k1, &v, msg, sizeof(msg)), 0);
    CHECK_INT((int)v, 200);
    CHECK_INT(calls(S1, MSG_S_GET) - g0, 0);

    /* leadership moves to s3: a PUT follows s2's hint */
    script(3, 0, 0, -1);
    CHECK_RC(put(rt, k1, &v, msg, sizeof(msg)), 0);
    CHECK_INT((int)v, 300);
    CHECK_INT(rt_leader_get(&rt->leaders, p1), node("s3"));

    /* a hint naming s4 (no replica of partition 1): passed over, s1 next */
    script(1, 0, 0, 4);
    g0 = calls(S1, MSG_S_GET);
    CHECK_RC(get(rt, k1, &v, msg, sizeof(msg)), 0);
    CHECK_INT((int)v, 100);
    CHECK_INT(calls(S1, MSG_S_GET) - g0, 1);
    CHECK_INT(calls(S4, MSG_S_GET), 0);
    CHECK_INT(rt_leader_get(&rt->leaders, p1), node("s1"));

    /* partition 2 (one replica) is untouched by all this */
    int k2 = id_in(2, 1);
    CHECK_RC(get(rt, k2, &v, msg, sizeof(msg)), 0);
    CHECK_INT((int)v, 400);
    CHECK_RC(put(rt, k2, &v, msg, sizeof(msg)), 0);
    CHECK_INT((int)v, 400);
}

static void elections(router *rt, int k1)
{
    uint64_t v, t0;
    char msg[256];
    int rc;

    /* no leader for 300 ms, then s2: a GET waits it out */
    script(0, 300, 2, 0);
    t0 = rt_now_ms();
    rc = get(rt, k1, &v, msg, sizeof(msg));
    CHECKF(rc == 0, "%d %s", rc, msg);
    CHECK_INT((int)v, 200);
    CHECK(rt_now_ms() - t0 >= 250);
    CHECK(rt_now_ms() - t0 < CALL_MS);

    /* the same for a PUT, s3 elected */
    script(0, 300, 3, 0);
    rc = put(rt, k1, &v, msg, sizeof(msg));
    CHECKF(rc == 0, "%d %s", rc, msg);
    CHECK_INT((int)v, 300);

    /* no leader at all: the call's time, then SX_ENOTLEADER naming it */
    script(0, 0, 0, 0);
    t0 = rt_now_ms();
    rc = get(rt, k1, &v, msg, sizeof(msg));
    CHECK_RC(rc, SX_ENOTLEADER);
    CHECKF(strstr(msg, "storage partition 1: no leader answered within ") != NULL &&
               strstr(msg, "(tried s1, s2, s3; last: storage node s") != NULL,
           "%s", msg);
    CHECK(rt_now_ms() - t0 >= CALL_MS - 150);
    CHECK(rt_now_ms() - t0 < CALL_MS + 1000);
    rc = put(rt, k1, &v, msg, sizeof(msg));
    CHECK_RC(rc, SX_ENOTLEADER);
    CHECKF(strstr(msg, "not written: storage partition 1: no leader answered within ") != NULL,
           "%s", msg);
}

/* A write that timed out at the leader is never sent to another replica. */
static void write_timeout(router *rt, int k1)
{
    uint64_t v;
    char msg[256];
    int w1, w3, rc;

    script(2, 0, 0, -1);
    CHECK_RC(get(rt, k1, &v, msg, sizeof(msg)), 0); /* the cache: s2 */
    pthread_mutex_lock(&T.mu);
    T.stall_id = 2;
    T.stall_ms = CALL_MS + 500;
    pthread_mutex_unlock(&T.mu);
    w1 = calls(S1, MSG_S_WRITE);
    w3 = calls(S3, MSG_S_WRITE);
    rc = put(rt, k1, &v, msg, sizeof(msg));
    CHECK_RC(rc, SX_ETIMEDOUT);
    CHECKF(strstr(msg, "storage node s2") != NULL, "%s", msg);
    CHECK_INT(calls(S1, MSG_S_WRITE) - w1, 0);
    CHECK_INT(calls(S3, MSG_S_WRITE) - w3, 0);
    pthread_mutex_lock(&T.mu);
    T.stall_id = 0;
    pthread_mutex_unlock(&T.mu);
    usleep(1000 * 1000); /* the stalled answer leaves */
}

/* PUTs through the router's own server: the combined path. */
static void combined(router *rt, int k1)
{
    net_server_opts so = {
        .workers = 2, .fibers = 16, .defer = rt_defer, .defer_flush = rt_defer_flush
    };
    nng_socket rs, c;
    net_server *srv = NULL;
    mp_buf f;
    uint64_t v;
    char msg[256];
    void *r = NULL;
    size_t rn = 0;

    CHECK(net_listen("inproc://replicas-r1", &rs) == 0);
    CHECK(net_server_open(rs, &so, rt_handle, rt, &srv) == 0);
    CHECK(net_dial("inproc://replicas-r1", &c) == 0);
    CHECK(nng_socket_set_ms(c, NNG_OPT_RECVTIMEO, 10000) == 0);
    put_frame(k1, &f);

    for (int round = 0; round < 3; round++) {
        unsigned long long p0 = atomic_load(&rt->comb_puts), r0 = atomic_load(&rt->comb_reruns);
        uint64_t t0 = rt_now_ms();
        int rc;

        if (round == 0)
            script(3, 0, 0, -1); /* the cache names s2: it hints s3 */
        else if (round == 1)
            script(0, 300, 1, 0); /* an election, then s1 */
        else
            script(0, 0, 0, 0); /* no leader */
        CHECK(nng_send(c, f.sb.data, f.sb.size, 0) == 0);
        CHECK(nng_recv(c, &r, &rn, NNG_FLAG_ALLOC) == 0);
        rc = put_reply(r, rn, &v, msg, sizeof(msg));
        if (r != NULL)
            nng_free(r, rn);
        r = NULL;
        if (round < 2) {
            CHECKF(rc == 0, "round %d: %d %s", round, rc, msg);
            CHECK_INT((int)v, round == 0 ? 300 : 100);
            CHECK_INT((int)(atomic_load(&rt->comb_puts) - p0), 1);
        } else {
            CHECK_RC(rc, SX_ENOTLEADER);
            CHECKF(strstr(msg, "storage partition 1: no leader answered within ") != NULL, "%s",
                   msg);
            CHECK(rt_now_ms() - t0 < 2 * CALL_MS); /* not run again alone */
        }
        CHECK_INT((int)(atomic_load(&rt->comb_reruns) - r0), 0);
        if (round == 1)
            CHECK(rt_now_ms() - t0 >= 250);
    }

    /* a frozen leader (s2), s3 elected after 600 ms: the combined PUT at
     * s2 fails within 2 s as of unknown outcome, not run again alone; the
     * next goes to s3 at once */
    int saved = rt->timeout_ms, w2;
    rt->timeout_ms = 5000;
    script(2, 0, 0, -1);
    rt_leader_note(&rt->leaders, &cfg->storage[0], node("s2"));
    freeze(2, 3000);
    script(0, 600, 3, 2);
    w2 = calls(S2, MSG_S_WRITE);
    for (int round = 0; round < 2; round++) {
        unsigned long long r0 = atomic_load(&rt->comb_reruns);
        uint64_t t0 = rt_now_ms(), dt;
        int rc;

        CHECK(nng_send(c, f.sb.data, f.sb.size, 0) == 0);
        CHECK(nng_recv(c, &r, &rn, NNG_FLAG_ALLOC) == 0);
        dt = rt_now_ms() - t0;
        rc = put_reply(r, rn, &v, msg, sizeof(msg));
        if (r != NULL)
            nng_free(r, rn);
        r = NULL;
        if (round == 0) {
            CHECK_RC(rc, SX_ETIMEDOUT);
            CHECKF(strstr(msg, "storage node s2") != NULL && strstr(msg, "outcome unknown") != NULL,
                   "%s", msg);
            CHECKF(dt >= 1900 && dt < 3500, "%llu ms", (unsigned long long)dt);
        } else {
            CHECKF(rc == 0, "%d %s", rc, msg);
            CHECK_INT((int)v, 300);
            CHECKF(dt < 1500, "%llu ms", (unsigned long long)dt);
        }
        CHECK_INT((int)(atomic_load(&rt->comb_reruns) - r0), 0);
    }
    CHECK_INT(calls(S2, MSG_S_WRITE) - w2, 1);
    thaw_all(rt);
    rt->timeout_ms = saved;
    mp_buf_free(&f);
    nng_close(c);
    net_server_stop(srv);
}

static void heads(router *rt)
{
    rt_err e;
    uint64_t t0;
    int rc;

    /* s3 leads: its head (and s4's) are taken, the cache learns s3 */
    script(3, 0, 0, -1);
    rt_leader_note(&rt->leaders, &cfg->storage[0], node("s1"));
    rc = rt_strong_wait(rt, 0, 1, 1000, &e);
    CHECKF(rc == 0, "%s", e.msg);
    CHECK_INT(rt_leader_get(&rt->leaders, &cfg->storage[0]), node("s3"));

    /* no leader for 200 ms: partition 1 is asked again until s2 leads */
    script(0, 200, 2, 0);
    t0 = rt_now_ms();
    rc = rt_strong_wait(rt, 0, 1, 1000, &e);
    CHECKF(rc == 0, "%s", e.msg);
    CHECK(rt_now_ms() - t0 >= 150);

    /* none at all: the strong read fails naming partition 1 */
    script(0, 0, 0, 0);
    rc = rt_strong_wait(rt, 0, 1, 600, &e);
    CHECK_RC(rc, SX_ENOTLEADER);
    CHECKF(strstr(e.msg, "strong read: cannot take the storage heads: storage partition 1: no "
                         "leader reported its head within ") != NULL &&
               strstr(e.msg, "(asked s1, s2, s3)") != NULL,
           "%s", e.msg);
}

/* Stops node k's server and waits (up to 5 s) until the router's link to
 * it is down: a call sent meanwhile would only time out. */
static void stop_node(router *rt, int k)
{
    int nd = node(T.n[k].name);

    net_server_stop(T.n[k].srv);
    T.n[k].srv = NULL;
    for (int waited = 0; waited < 5000 && net_peer_connected(rt->peers[nd]); waited += 10)
        usleep(10 * 1000);
    CHECK(!net_peer_connected(rt->peers[nd]));
}

/* s1 stopped: passed over by reads, writes and heads; s4 stopped (the one
 * replica of partition 2): heads fail as they always did. */
static void down(router *rt, int k1)
{
    uint64_t v;
    char msg[256];
    rt_err e;
    int rc;

    stop_node(rt, S1);
    script(2, 0, 0, -1);
    rt_leader_note(&rt->leaders, &cfg->storage[0], node("s1"));
    rc = get(rt, k1, &v, msg, sizeof(msg));
    CHECKF(rc == 0, "%s", msg);
    CHECK_INT((int)v, 200);
    rt_leader_note(&rt->leaders, &cfg->storage[0], node("s1"));
    rc = put(rt, k1, &v, msg, sizeof(msg));
    CHECKF(rc == 0, "%s", msg);
    CHECK_INT((int)v, 200);
    rc = rt_strong_wait(rt, 0, 1, 1000, &e);
    CHECKF(rc == 0, "%s", e.msg);

    stop_node(rt, S4);
    rc = rt_strong_wait(rt, 0, 1, 1000, &e);
    CHECK_RC(rc, SX_EUNAVAIL);
    CHECKF(strstr(e.msg, "storage node s4") != NULL, "%s", e.msg);
}

/* A query on by_x (eventual: I_RANGE pages only; every page is empty):
 * its code and message. */
static int query_x(router *rt, char *msg, size_t mlen)
{
    msg_QUERY_req q;
    rtf_qres r;
    mp_buf eq;

    mp_buf_init(&eq);
    mp_put_array(&eq, 1);
    mp_put_cstr(&eq, "a");
    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.index = (mp_span){ (const uint8_t *)"by_x", 4 };
    q.eq = (mp_span){ (const uint8_t *)eq.sb.data, eq.sb.size };
    q.limit = 10;
    q.consistency = Q_EVENTUAL;
    rtf_query(rt, &q, NULL, &r);
    mp_buf_free(&eq);
    snprintf(msg, mlen, "%s", r.msg);
    return r.rc;
}

/* I_RANGE and I_WATERMARKS go to index partition 101's leader. */
static void index_leaders(router *rt)
{
    const cfg_part *ix = &cfg->index[0];
    char msg[256];
    rt_err e;
    uint64_t t0;
    int r1, r2, rc;

    script(1, 0, 0, -1);
    /* i2 leads; the cache starts at i1, which names it */
    iscript(12, 0, 0, -1);
    CHECK(rt_leader_walks(&rt->leaders, ix));
    CHECK_INT(rt_leader_get(&rt->leaders, ix), node("i1"));
    r1 = calls(I1, MSG_I_RANGE);
    r2 = calls(I2, MSG_I_RANGE);
    rc = query_x(rt, msg, sizeof(msg));
    CHECKF(rc == 0, "%d %s", rc, msg);
    CHECK_INT(calls(I1, MSG_I_RANGE) - r1, 1);
    CHECK_INT(calls(I2, MSG_I_RANGE) - r2, 1);
    CHECK_INT(rt_leader_get(&rt->leaders, ix), node("i2"));
    rc = query_x(rt, msg, sizeof(msg)); /* straight to i2 */
    CHECKF(rc == 0, "%d %s", rc, msg);
    CHECK_INT(calls(I1, MSG_I_RANGE) - r1, 1);
    CHECK_INT(calls(I2, MSG_I_RANGE) - r2, 2);

    /* a strong read's watermarks: i3 leads now, i2 names it */
    iscript(13, 0, 0, -1);
    int w3 = calls(I3, MSG_I_WATERMARKS);
    rc = rt_strong_wait(rt, 0, 1, 1000, &e);
    CHECKF(rc == 0, "%s", e.msg);
    CHECK_INT(calls(I3, MSG_I_WATERMARKS) - w3, 1);
    CHECK_INT(rt_leader_get(&rt->leaders, ix), node("i3"));

    /* an election of 300 ms, then i1 */
    iscript(0, 300, 11, 0);
    t0 = rt_now_ms();
    rc = rt_strong_wait(rt, 0, 1, 1200, &e);
    CHECKF(rc == 0, "%s", e.msg);
    CHECK(rt_now_ms() - t0 >= 250);
    CHECK_INT(rt_leader_get(&rt->leaders, ix), node("i1"));
    iscript(0, 300, 12, 0);
    rc = query_x(rt, msg, sizeof(msg));
    CHECKF(rc == 0, "%d %s", rc, msg);
    CHECK_INT(rt_leader_get(&rt->leaders, ix), node("i2"));

    /* no leader at all: the index partition is named */
    iscript(0, 0, 0, 0);
    rc = query_x(rt, msg, sizeof(msg));
    CHECK_RC(rc, SX_ENOTLEADER);
    CHECKF(strstr(msg, "index partition 101: no leader answered within ") != NULL &&
               strstr(msg, "(tried i1, i2, i3; last: index node i") != NULL,
           "%s", msg);
    rc = rt_strong_wait(rt, 0, 1, 600, &e);
    CHECK_RC(rc, SX_ENOTLEADER);
    CHECKF(strstr(e.msg, "index partition 101: no leader answered within ") != NULL, "%s", e.msg);
    iscript(11, 0, 0, -1);
}

/* Frozen leaders (a node paused: its connection stays up, nothing comes
 * back), while the other replicas elect another after 600 ms and name
 * the frozen one until then. */
static void frozen(router *rt, int k1)
{
    const cfg_part *p1 = &cfg->storage[0];
    int saved = rt->timeout_ms, g2, w1, w2, w3, h2, rc;
    uint64_t v, t0, dt;
    char msg[256];
    rt_err e;

    rt->timeout_ms = 5000; /* room for the attempts' own bounds */

    /* a GET: a second at s2, then s3, elected meanwhile */
    script(2, 0, 0, -1);
    rt_leader_note(&rt->leaders, p1, node("s2"));
    freeze(2, 2500);
    script(0, 600, 3, 2);
    g2 = calls(S2, MSG_S_GET);
    t0 = rt_now_ms();
    rc = get(rt, k1, &v, msg, sizeof(msg));
    dt = rt_now_ms() - t0;
    CHECKF(rc == 0, "%d %s", rc, msg);
    CHECK_INT((int)v, 300);
    CHECKF(dt >= 900 && dt < 2500, "%llu ms", (unsigned long long)dt);
    CHECK_INT(calls(S2, MSG_S_GET) - g2, 1);
    CHECK_INT(rt_leader_get(&rt->leaders, p1), node("s3"));
    t0 = rt_now_ms();
    CHECK_RC(get(rt, k1, &v, msg, sizeof(msg)), 0); /* straight to s3 */
    CHECK(rt_now_ms() - t0 < 900);
    CHECK_INT(calls(S2, MSG_S_GET) - g2, 1);
    thaw_all(rt);

    /* a PUT at a frozen s2: unknown outcome within 2 s, sent nowhere
     * else; the next PUT goes to s3 at once */
    script(2, 0, 0, -1);
    rt_leader_note(&rt->leaders, p1, node("s2"));
    freeze(2, 3000);
    script(0, 600, 3, 2);
    w1 = calls(S1, MSG_S_WRITE);
    w2 = calls(S2, MSG_S_WRITE);
    w3 = calls(S3, MSG_S_WRITE);
    t0 = rt_now_ms();
    rc = put(rt, k1, &v, msg, sizeof(msg));
    dt = rt_now_ms() - t0;
    CHECK_RC(rc, SX_ETIMEDOUT);
    CHECKF(strstr(msg, "storage node s2") != NULL && strstr(msg, "outcome unknown") != NULL, "%s",
           msg);
    CHECKF(dt >= 1900 && dt < 3500, "%llu ms", (unsigned long long)dt);
    CHECK_INT(calls(S1, MSG_S_WRITE) - w1, 0);
    CHECK_INT(calls(S3, MSG_S_WRITE) - w3, 0);
    t0 = rt_now_ms();
    rc = put(rt, k1, &v, msg, sizeof(msg));
    CHECKF(rc == 0, "%d %s", rc, msg);
    CHECK_INT((int)v, 300);
    CHECK(rt_now_ms() - t0 < 1500);
    CHECK_INT(calls(S2, MSG_S_WRITE) - w2, 1);
    thaw_all(rt);

    /* heads: s2 frozen holds only replicated partitions: a second, then
     * not asked again while it answers nothing */
    script(3, 0, 0, -1);
    freeze(2, 2500);
    h2 = calls(S2, MSG_S_HEADS);
    t0 = rt_now_ms();
    rc = rt_strong_wait(rt, 0, 1, 4000, &e);
    dt = rt_now_ms() - t0;
    CHECKF(rc == 0, "%s", e.msg);
    CHECKF(dt >= 900 && dt < 2500, "%llu ms", (unsigned long long)dt);
    CHECK_INT(calls(S2, MSG_S_HEADS) - h2, 1);
    t0 = rt_now_ms();
    rc = rt_strong_wait(rt, 0, 1, 4000, &e);
    CHECKF(rc == 0, "%s", e.msg);
    CHECK(rt_now_ms() - t0 < 900); /* s2 was not waited for */
    CHECK_INT(calls(S2, MSG_S_HEADS) - h2, 1);
    thaw_all(rt);

    /* a frozen index leader: the watermarks from i2, elected meanwhile */
    iscript(11, 0, 0, -1);
    rt_leader_note(&rt->leaders, &cfg->index[0], node("i1"));
    freeze(11, 2500);
    iscript(0, 600, 12, 11);
    t0 = rt_now_ms();
    rc = rt_strong_wait(rt, 0, 1, 4000, &e);
    dt = rt_now_ms() - t0;
    CHECKF(rc == 0, "%s", e.msg);
    CHECKF(dt >= 900 && dt < 2500, "%llu ms", (unsigned long long)dt);
    CHECK_INT(rt_leader_get(&rt->leaders, &cfg->index[0]), node("i2"));
    thaw_all(rt);
    iscript(11, 0, 0, -1);

    rt->timeout_ms = saved;
}

int main(void)
{
    router *rt = NULL;

    pthread_mutex_init(&T.mu, NULL);
    T.hint = -1;
    T.ihint = -1;
    T.ilead = 11;
    CHECK(proto_init() == 0);
    CHECK(setenv("SHARDEX_ROUTER_CALL_MS", "1500", 1) == 0);
    if (!open_nodes()) {
        fprintf(stderr, "replicas: no scratch dir or config\n");
        CHECK(false);
        return CHECK_DONE();
    }
    make_catalog();
    CHECK(rt_new(cfg, cfg_node_by_name(cfg, "r1"), &rt) == 0);
    if (rt != NULL) {
        int k1 = id_in(1, 1);
        CHECK_INT(rt->timeout_ms, CALL_MS);
        reads_and_writes(rt, k1);
        elections(rt, k1);
        write_timeout(rt, k1);
        combined(rt, k1);
        heads(rt);
        index_leaders(rt);
        frozen(rt, k1);
        down(rt, k1);
    }
    rt_free(rt);
    for (int k = 0; k < NNODES; k++)
        net_server_stop(T.n[k].srv);
    scratch_remove(dir);
    cfg_free(cfg);
    free(T.cat);
    return CHECK_DONE();
}
