/*
 * query_test.c — the wiring of a router's queries, puts and gets across
 * partitions (router/query.c, qindex.c, strong.c, write.c, read.c), against
 * scripted nodes: a fake storage node holding partitions 1 and 2 (catalog,
 * S_GET, S_HEADS) and a fake index node holding partitions 101 (tuples
 * below "M") and 102, each with its own watermarks per storage partition
 * (I_RANGE, I_WATERMARKS), served over links on IPC sockets (the router
 * tests' fixture.h), with the router's handler called directly. Checks:
 *   - a query over both index partitions pages through them in order,
 *     ascending and descending, and a page that fills exactly at the end of
 *     the first partition still carries a token;
 *   - a continuation token is bound to its query: replayed on the other
 *     direction, on a query with another lower bound, or on another index
 *     of the table, it is refused with SX_ETOKEN;
 *   - a strong read returns only once every covering index partition has
 *     reported, for every storage partition, a watermark at or past that
 *     partition's head;
 *   - a verified read through an index projecting what it asks answers from
 *     the index alone only when the page's watermarks reached every head
 *     (not one record short), and else reads the facts;
 *   - on a table with a sort key, puts are placed, and gets sent, by the
 *     hash of the partition key alone.
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
#include "catalog.h"
#include "hash.h"
#include "item.h"
#include "net.h"
#include "tuple.h"
#include "sx_errors.h"

#define NID 6 /* ids 1..3: g = "B" (partition 101); 4..6: g = "b" (102) */
#define NIX 3 /* indexes by_g, by_g2 (keys only) and by_gx (projects x) */
#define MAXE (NID * NIX)

/* One index entry (index-local key) and the fact it points at. */
typedef struct entry {
    uint32_t ix;
    int64_t id;
    tup_bytes key;   /* be32(index id) | tup(g) | tup(id) */
    tup_bytes tuple; /* tup(g) | tup(id): what partitions are chosen by */
    uint64_t hash;
    mp_buf proj;
} entry;

/* The scripted cluster; guarded by mu (the fake servers run on nng threads;
 * the catalog they answer with is the fixture's). */
typedef struct fake {
    pthread_mutex_t mu;
    uint8_t hash_key[SX_HASH_KEY_BYTES];
    entry e[MAXE];
    int ne;
    tup_bytes fkey[NID]; /* fact-local keys h | tup(id) */
    mp_buf fact[NID];
    uint64_t head[3];       /* by storage partition id 1, 2 */
    uint64_t wm[2][3];      /* [index partition 101/102][storage partition] */
    uint64_t wm_step[2][3]; /* added after each I_WATERMARKS reply */
    uint64_t seen[2][3];    /* the highest watermark each has reported */
    int wm_polls[2];
    tup_bytes split;    /* tup("M"): where partition 102 starts */
    uint64_t sget_part; /* the part of the last S_GET */
    int sgets;
} fake;

static fake F;
static rtf R; /* the nodes, answering from F */

static int ipart(uint64_t id)
{
    return id == 101 ? 0 : id == 102 ? 1 : -1;
}

/* ---- the fake nodes ---- */

static void serve_s_get(const uint8_t *p, size_t n, mp_buf *out)
{
    uint64_t part;

    if (rtf_serve_s_get(p, n, F.fkey, F.fact, NID, &part, out)) {
        F.sget_part = part;
        F.sgets++;
    }
}

/* I_RANGE: the entries of [lo, hi) that lie in the asked partition, in the
 * asked direction, with the partition's watermarks. */
static void serve_i_range(const uint8_t *p, size_t n, mp_buf *out)
{
    msg_I_RANGE_req q;
    msg_I_RANGE_rep r;
    mp_span keys[MAXE], projs[MAXE];
    uint64_t hashes[MAXE], vers[MAXE], srcs[2] = { 1, 2 }, wms[2];
    uint32_t m = 0;
    int ip;

    if (msg_decode_req(MSG_I_RANGE, p, n, &q) != 0 || (ip = ipart(q.part)) < 0) {
        msg_encode_err(MSG_I_RANGE, SX_EPROTO, "bad I_RANGE", out);
        return;
    }
    for (int j = 0; j < F.ne && m < q.limit; j++) {
        const entry *e = &F.e[q.desc ? F.ne - 1 - j : j];
        bool in_101 = tup_keycmp(e->tuple.p, e->tuple.n, F.split.p, F.split.n) < 0;

        if (in_101 != (ip == 0))
            continue;
        if (tup_keycmp(e->key.p, e->key.n, q.lo.p, q.lo.n) < 0)
            continue;
        if (q.hi.n > 0 && tup_keycmp(e->key.p, e->key.n, q.hi.p, q.hi.n) >= 0)
            continue;
        if (q.hi.n == 0 && memcmp(e->key.p, q.lo.p, 4) != 0)
            continue; /* hi open: to the end of lo's index */
        keys[m] = (mp_span){ e->key.p, e->key.n };
        projs[m] = (mp_span){ (const uint8_t *)e->proj.sb.data, e->proj.sb.size };
        hashes[m] = e->hash;
        vers[m] = 5;
        m++;
    }
    wms[0] = F.wm[ip][1];
    wms[1] = F.wm[ip][2];
    memset(&r, 0, sizeof(r));
    r.keys = (msg_spans){ m, keys };
    r.projs = (msg_spans){ m, projs };
    r.hashes = (msg_u64s){ m, hashes };
    r.versions = (msg_u64s){ m, vers };
    r.sources = (msg_u64s){ 2, srcs };
    r.wms = (msg_u64s){ 2, wms };
    msg_encode_rep(MSG_I_RANGE, &r, out);
    msg_free_req(MSG_I_RANGE, &q);
}

static void serve_watermarks(const uint8_t *p, size_t n, mp_buf *out)
{
    msg_I_WATERMARKS_req q;
    uint64_t srcs[2] = { 1, 2 }, wms[2];
    int ip;

    if (msg_decode_req(MSG_I_WATERMARKS, p, n, &q) != 0 || (ip = ipart(q.part)) < 0) {
        msg_encode_err(MSG_I_WATERMARKS, SX_EPROTO, "bad I_WATERMARKS", out);
        return;
    }
    for (int s = 1; s <= 2; s++) {
        wms[s - 1] = F.wm[ip][s];
        if (F.wm[ip][s] > F.seen[ip][s])
            F.seen[ip][s] = F.wm[ip][s];
        F.wm[ip][s] += F.wm_step[ip][s];
    }
    F.wm_polls[ip]++;
    msg_I_WATERMARKS_rep r = { 0, { 2, srcs }, { 2, wms } };
    msg_encode_rep(MSG_I_WATERMARKS, &r, out);
    msg_free_req(MSG_I_WATERMARKS, &q);
}

static void serve_s_heads(const uint8_t *p, size_t n, mp_buf *out)
{
    uint64_t parts[2] = { 1, 2 }, heads[2] = { F.head[1], F.head[2] };
    msg_S_HEADS_rep r = { 0, { 2, parts }, { 2, heads } };

    (void)p;
    (void)n;
    msg_encode_rep(MSG_S_HEADS, &r, out);
}

static const rtf_script scripts[] = {
    { MSG_S_GET, serve_s_get },
    { MSG_I_RANGE, serve_i_range },
    { MSG_I_WATERMARKS, serve_watermarks },
    { MSG_S_HEADS, serve_s_heads },
};

/* ---- set-up ---- */

/* The catalog: table t(id) with indexes by_g, by_g2 (keys only) and by_gx
 * (projecting x), all ready; table u(k, sort key s). ixid[] gets the ids. */
static void make_catalog(uint32_t ixid[NIX])
{
    static const char *const names[NIX] = { "by_g", "by_g2", "by_gx" };
    const char *attrs[] = { "g" }, *proj[] = { "x" };
    uint64_t parts[] = { 1, 2 };
    cat_catalog *cat = cat_new();
    mp_buf b;

    CHECK(cat != NULL);
    if (cat == NULL)
        return;
    CHECK(cat_create_table(cat, "t", "id", NULL) == 0);
    CHECK(cat_create_table(cat, "u", "k", "s") == 0);
    for (int x = 0; x < NIX; x++) {
        const cat_index *ix;
        CHECK(cat_create_index(cat, "t", names[x], attrs, 1, x == 2 ? CAT_PROJ_LIST : CAT_PROJ_KEYS,
                               x == 2 ? proj : NULL, x == 2 ? 1 : 0) == 0);
        ix = cat_index_by_name(cat_table_by_name(cat, "t", 1), names[x], strlen(names[x]));
        ixid[x] = ix ? ix->id : 0;
        CHECK(ix != NULL && cat_mark_backfilled(cat, ixid[x], 1, parts, 2) == 0 &&
              cat_mark_backfilled(cat, ixid[x], 2, parts, 2) == 0);
    }
    mp_buf_init(&b);
    CHECK(cat_encode(cat, &b) == 0);
    CHECK(rtf_publish(&R, &b, cat->version) == 0);
    mp_buf_free(&b);
    cat_free(cat);
}

static const char *g_of(int64_t id)
{
    return id <= 3 ? "B" : "b";
}

/* Entries of every index for ids 1..NID, sorted by key (index, g, id), and
 * the facts {"id", "g", "x": 10 * id}. */
static void make_data(const uint32_t ixid[NIX])
{
    for (int64_t id = 1; id <= NID; id++) {
        tup_bytes pk = { 0 };
        uint8_t be[8];
        uint64_t h;

        tup_encode_int(&pk, id);
        h = hash_shard(F.hash_key, pk.p, pk.n);
        be_put64(be, h);
        tup_bytes_append(&F.fkey[id - 1], be, 8);
        tup_bytes_append(&F.fkey[id - 1], pk.p, pk.n);
        mp_buf_init(&F.fact[id - 1]);
        mp_put_map(&F.fact[id - 1], 3);
        mp_put_cstr(&F.fact[id - 1], "id");
        mp_put_i64(&F.fact[id - 1], id);
        mp_put_cstr(&F.fact[id - 1], "g");
        mp_put_cstr(&F.fact[id - 1], g_of(id));
        mp_put_cstr(&F.fact[id - 1], "x");
        mp_put_i64(&F.fact[id - 1], 10 * id);
        for (int x = 0; x < NIX; x++) {
            entry *e = &F.e[x * NID + (id - 1)];

            e->ix = ixid[x];
            e->id = id;
            e->hash = h;
            tup_encode_str(&e->tuple, g_of(id), 1);
            tup_bytes_append(&e->tuple, pk.p, pk.n);
            be_put32(be, ixid[x]);
            tup_bytes_append(&e->key, be, 4);
            tup_bytes_append(&e->key, e->tuple.p, e->tuple.n);
            mp_buf_init(&e->proj);
            mp_put_map(&e->proj, x == 2 ? 3 : 2);
            mp_put_cstr(&e->proj, "id");
            mp_put_i64(&e->proj, id);
            mp_put_cstr(&e->proj, "g");
            mp_put_cstr(&e->proj, g_of(id));
            if (x == 2) {
                mp_put_cstr(&e->proj, "x");
                mp_put_i64(&e->proj, 10 * id);
            }
        }
        tup_bytes_free(&pk);
    }
    F.ne = MAXE;
    /* index ids ascend with x, and within an index "B" < "b" and ids ascend:
     * F.e is already in key order */
    for (int k = 1; k < F.ne; k++)
        CHECK(tup_keycmp(F.e[k - 1].key.p, F.e[k - 1].key.n, F.e[k].key.p, F.e[k].key.n) < 0);
}

/* Sets every watermark to wm (no steps), every head to head. */
static void set_wms(uint64_t head, uint64_t wm)
{
    pthread_mutex_lock(&F.mu);
    F.head[1] = F.head[2] = head;
    for (int ip = 0; ip < 2; ip++) {
        for (int s = 1; s <= 2; s++) {
            F.wm[ip][s] = wm;
            F.wm_step[ip][s] = 0;
            F.seen[ip][s] = 0;
        }
        F.wm_polls[ip] = 0;
    }
    pthread_mutex_unlock(&F.mu);
}

/* ---- queries through the router ---- */

typedef struct qspec {
    const char *index;
    uint64_t consistency, limit, desc, cond;
    const char *from; /* Q_COND_RANGE lower bound (a string), NULL: none */
    const char *attr; /* one attribute asked for, or NULL */
} qspec;

typedef rtf_qres qres;

static void query(router *rt, const qspec *s, const qres *prev, qres *res)
{
    msg_QUERY_req q;
    mp_buf from;
    mp_span attrv = { (const uint8_t *)s->attr, s->attr ? strlen(s->attr) : 0 };

    mp_buf_init(&from);
    if (s->from != NULL)
        mp_put_cstr(&from, s->from);
    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.index = (mp_span){ (const uint8_t *)s->index, strlen(s->index) };
    q.cond = s->cond;
    q.from = (mp_span){ (const uint8_t *)from.sb.data, from.sb.size };
    q.limit = s->limit;
    q.desc = s->desc;
    q.consistency = s->consistency;
    q.timeout_ms = 5000;
    if (s->attr != NULL)
        q.attrs = (msg_spans){ 1, &attrv };
    CHECK(rtf_query(rt, &q, prev, res) == 0);
    if (res->rc == 0)
        CHECK(!res->token_cut);
    mp_buf_free(&from);
}

static bool ids_are(const qres *r, const int64_t *want, uint32_t n)
{
    if (r->rc != 0 || r->n != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (r->ids[i] != want[i])
            return false;
    return true;
}

static void show(const char *what, const qres *r)
{
    fprintf(stderr, "%s: rc %d (%s), %u items:", what, r->rc, r->msg, r->n);
    for (uint32_t i = 0; i < r->n; i++)
        fprintf(stderr, " %lld", (long long)r->ids[i]);
    fprintf(stderr, ", token %zu bytes\n", r->tokn);
}

/* Pages over both index partitions, each way. */
static void paging(router *rt)
{
    static const int64_t up1[] = { 1, 2, 3 }, up2[] = { 4, 5, 6 };
    static const int64_t down1[] = { 6, 5, 4, 3 }, down2[] = { 2, 1 };
    qspec s = { "by_g", Q_VERIFIED, 3, 0, Q_COND_NONE, NULL, NULL };
    qres a, b;

    /* the first page ends exactly at the end of partition 101: more follow */
    query(rt, &s, NULL, &a);
    CHECK(ids_are(&a, up1, 3));
    CHECK(a.tokn > 0);
    if (!ids_are(&a, up1, 3) || a.tokn == 0)
        show("ascending page 1", &a);
    query(rt, &s, &a, &b);
    CHECK(ids_are(&b, up2, 3));
    CHECK(b.tokn == 0);
    if (!ids_are(&b, up2, 3))
        show("ascending page 2", &b);

    /* descending: partition 102 first */
    s.desc = 1;
    s.limit = 4;
    query(rt, &s, NULL, &a);
    CHECK(ids_are(&a, down1, 4) && a.tokn > 0);
    if (!ids_are(&a, down1, 4))
        show("descending page 1", &a);
    query(rt, &s, &a, &b);
    CHECK(ids_are(&b, down2, 2) && b.tokn == 0);
    if (!ids_are(&b, down2, 2))
        show("descending page 2", &b);
}

/* A token opens only on the query it was made for. */
static void token_binding(router *rt)
{
    static const int64_t rest[] = { 3, 4, 5, 6 }, from_a[] = { 1, 2, 3, 4, 5, 6 };
    qspec asc = { "by_g", Q_EVENTUAL, 2, 0, Q_COND_NONE, NULL, NULL };
    qspec s;
    qres a, b;

    query(rt, &asc, NULL, &a);
    CHECK(a.rc == 0 && a.n == 2 && a.tokn > 0);
    /* the same query resumes */
    s = asc;
    s.limit = 10;
    query(rt, &s, &a, &b);
    CHECK(ids_are(&b, rest, 4));
    /* the other direction */
    s.desc = 1;
    query(rt, &s, &a, &b);
    CHECK(b.rc == SX_ETOKEN);
    if (b.rc != SX_ETOKEN)
        show("ascending token on a descending query", &b);
    /* another index of the table, same attributes and entries */
    s = asc;
    s.index = "by_g2";
    query(rt, &s, &a, &b);
    CHECK(b.rc == SX_ETOKEN);
    if (b.rc != SX_ETOKEN)
        show("by_g token on by_g2", &b);

    /* range from "B" (ids 1..6) and from "A" (the same entries): another
     * lower bound, so another query */
    s = asc;
    s.cond = Q_COND_RANGE;
    s.from = "B";
    query(rt, &s, NULL, &a);
    CHECK(ids_are(&a, from_a, 2) && a.tokn > 0);
    s.from = "A";
    s.limit = 10;
    query(rt, &s, NULL, &b);
    CHECK(ids_are(&b, from_a, 6)); /* the same entries */
    query(rt, &s, &a, &b);
    CHECK(b.rc == SX_ETOKEN);
    if (b.rc != SX_ETOKEN)
        show("token of range from B on range from A", &b);
    s.from = "B";
    query(rt, &s, &a, &b);
    CHECK(ids_are(&b, rest, 4)); /* its own query resumes */
}

/* A strong read waits until every covering partition caught up with every
 * head: partition `lag_ip`'s watermark from storage partition `lag_src`
 * starts 3 short and moves one a poll. */
static void strong_case(router *rt, int lag_ip, int lag_src)
{
    static const int64_t all[] = { 1, 2, 3, 4, 5, 6 };
    qspec s = { "by_g", Q_STRONG, 10, 0, Q_COND_NONE, NULL, NULL };
    qres r;

    set_wms(10, 10);
    pthread_mutex_lock(&F.mu);
    F.wm[lag_ip][lag_src] = 7;
    F.wm_step[lag_ip][lag_src] = 1;
    pthread_mutex_unlock(&F.mu);
    query(rt, &s, NULL, &r);
    CHECK(ids_are(&r, all, 6));
    pthread_mutex_lock(&F.mu);
    for (int ip = 0; ip < 2; ip++)
        for (int src = 1; src <= 2; src++) {
            CHECK(F.seen[ip][src] >= F.head[src]);
            if (F.seen[ip][src] < F.head[src])
                fprintf(stderr,
                        "strong read (lagging %d/%d) returned before index "
                        "partition %d reported storage partition %d's head %llu "
                        "(seen %llu)\n",
                        101 + lag_ip, lag_src, 101 + ip, src, (unsigned long long)F.head[src],
                        (unsigned long long)F.seen[ip][src]);
        }
    pthread_mutex_unlock(&F.mu);
}

static void strong(router *rt)
{
    strong_case(rt, 0, 1);
    strong_case(rt, 1, 1);
    strong_case(rt, 0, 2);
    strong_case(rt, 1, 2);
}

/* Verified reads through by_gx asking for x: covering only when current. */
static void fresh_pages(router *rt)
{
    static const int64_t all[] = { 1, 2, 3, 4, 5, 6 };
    qspec s = { "by_gx", Q_VERIFIED, 10, 0, Q_COND_NONE, NULL, "x" };
    qres r;

    set_wms(10, 10);
    pthread_mutex_lock(&F.mu);
    F.sgets = 0;
    pthread_mutex_unlock(&F.mu);
    query(rt, &s, NULL, &r);
    CHECK(ids_are(&r, all, 6));
    CHECK(r.covering == 1 && r.nfact == 0);
    pthread_mutex_lock(&F.mu);
    CHECK(F.sgets == 0);
    pthread_mutex_unlock(&F.mu);

    for (int src = 1; src <= 2; src++) {
        set_wms(10, 10);
        pthread_mutex_lock(&F.mu);
        F.wm[0][src] = 9; /* partition 101 one record behind */
        F.wm[1][src] = 9;
        F.sgets = 0;
        pthread_mutex_unlock(&F.mu);
        query(rt, &s, NULL, &r);
        CHECK(ids_are(&r, all, 6));
        CHECK(r.covering == 0 && r.nfact > 0);
        pthread_mutex_lock(&F.mu);
        CHECK(F.sgets > 0);
        pthread_mutex_unlock(&F.mu);
        if (r.covering != 0)
            fprintf(stderr,
                    "a page one record behind storage partition %d's head was "
                    "taken as current\n",
                    src);
    }
}

/* The storage partition index (0 or 1) of partition key value k. */
static int part_of(int64_t k)
{
    tup_bytes pk = { 0 };
    uint64_t h;

    tup_encode_int(&pk, k);
    h = hash_shard(F.hash_key, pk.p, pk.n);
    tup_bytes_free(&pk);
    return h <= 0x7fffffffffffffffull ? 0 : 1;
}

/* Table u(k, s): every item of one k goes to k's partition, whatever s. */
static void sort_key_routing(router *rt, const cfg_cluster *cfg)
{
    cat_catalog *cat = cat_new();
    const cat_table *t;
    int wrong = 0, parts_seen[2] = { 0, 0 };

    CHECK(cat != NULL && cat_create_table(cat, "u", "k", "s") == 0);
    t = cat != NULL ? cat_table_by_name(cat, "u", 1) : NULL;
    CHECK(t != NULL);
    for (int64_t k = 1; t != NULL && k <= 8; k++)
        for (int64_t sv = 0; sv < 8; sv++) {
            mp_buf it;
            mp_span sp;
            rt_err e;
            int g = -1;

            mp_buf_init(&it);
            mp_put_map(&it, 2);
            mp_put_cstr(&it, "k");
            mp_put_i64(&it, k);
            mp_put_cstr(&it, "s");
            mp_put_i64(&it, 1000 + sv);
            sp = (mp_span){ (const uint8_t *)it.sb.data, it.sb.size };
            memset(&e, 0, sizeof(e));
            CHECK(rt_put_place(rt, t, &sp, 0, &g, &e) == 0);
            if (g != part_of(k))
                wrong++;
            if (g >= 0 && g < 2)
                parts_seen[g] = 1;
            mp_buf_free(&it);
        }
    CHECK(wrong == 0);
    if (wrong != 0)
        fprintf(stderr, "%d of 64 puts placed by more than their partition key\n", wrong);
    CHECK(parts_seen[0] && parts_seen[1]); /* both partitions in play */
    cat_free(cat);

    /* gets: S_GET goes to k's partition */
    wrong = 0;
    for (int64_t k = 1; k <= 8; k++)
        for (int64_t sv = 0; sv < 4; sv++) {
            msg_GET_req g;
            msg_GET_rep gr;
            mp_buf key, req, out;
            char msg[256];
            int rc;

            mp_buf_init(&key);
            mp_put_map(&key, 2);
            mp_put_cstr(&key, "k");
            mp_put_i64(&key, k);
            mp_put_cstr(&key, "s");
            mp_put_i64(&key, 1000 + sv);
            memset(&g, 0, sizeof(g));
            g.table = (mp_span){ (const uint8_t *)"u", 1 };
            g.key = (mp_span){ (const uint8_t *)key.sb.data, key.sb.size };
            mp_buf_init(&req);
            mp_buf_init(&out);
            CHECK(msg_encode_req(MSG_GET, &g, &req) == 0);
            pthread_mutex_lock(&F.mu);
            F.sget_part = 0;
            pthread_mutex_unlock(&F.mu);
            rt_handle(rt, (const uint8_t *)req.sb.data, req.sb.size, &out);
            memset(&gr, 0, sizeof(gr));
            rc = msg_decode_rep(MSG_GET, (const uint8_t *)out.sb.data, out.sb.size, &gr, msg,
                                sizeof(msg));
            CHECK(rc == SX_ENOTFOUND); /* the fake holds no item of u */
            pthread_mutex_lock(&F.mu);
            if (F.sget_part != cfg->storage[part_of(k)].id)
                wrong++;
            pthread_mutex_unlock(&F.mu);
            msg_free_rep(MSG_GET, &gr);
            mp_buf_free(&key);
            mp_buf_free(&req);
            mp_buf_free(&out);
        }
    CHECK(wrong == 0);
    if (wrong != 0)
        fprintf(stderr, "%d of 32 gets sent to another partition than their partition key's\n",
                wrong);
}

int main(void)
{
    router *rt = NULL;
    uint32_t ixid[NIX] = { 0 };

    pthread_mutex_init(&F.mu, NULL);
    CHECK(proto_init() == 0);
    CHECK(rtf_open(&R, "fakeq", "22222222222222222222222222222222222222222222222222222222222222ff",
                   &F.mu, scripts, sizeof(scripts) / sizeof(scripts[0])));
    if (R.cfg == NULL)
        return CHECK_DONE();
    CHECK(R.cfg->nstorage == 2 && R.cfg->storage[0].id == 1 && R.cfg->nindex == 2 &&
          R.cfg->index[0].id == 101);
    memcpy(F.hash_key, R.cfg->hash_key, sizeof(F.hash_key));
    CHECK(tup_encode_str(&F.split, "M", 1) == 0);
    make_catalog(ixid);
    make_data(ixid);
    set_wms(10, 10);
    CHECK(rt_new(R.cfg, cfg_node_by_name(R.cfg, "r1"), &rt) == 0);
    if (rt != NULL) {
        paging(rt);
        token_binding(rt);
        strong(rt);
        fresh_pages(rt);
        sort_key_routing(rt, R.cfg);
    }
    rt_free(rt);
    rtf_close(&R);
    tup_bytes_free(&F.split);
    for (int k = 0; k < MAXE; k++) {
        tup_bytes_free(&F.e[k].key);
        tup_bytes_free(&F.e[k].tuple);
        mp_buf_free(&F.e[k].proj);
    }
    for (int k = 0; k < NID; k++) {
        tup_bytes_free(&F.fkey[k]);
        mp_buf_free(&F.fact[k]);
    }
    return CHECK_DONE();
}
