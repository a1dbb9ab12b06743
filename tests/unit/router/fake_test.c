/*
 * fake_test.c — the router's query semantics against scripted nodes: a
 * fake storage node (catalog, S_GET, S_HEADS) and a fake index node
 * (I_RANGE, I_WATERMARKS) served in-process over links on IPC sockets (the
 * router tests' fixture.h), with the router's handler called directly on
 * request frames. Checks what a real cluster cannot force on demand:
 *   - verified drops hits whose fact is gone or no longer carries the
 *     entry's values, and counts them stale; eventual drops only missing
 *     facts; a covering eventual read returns projections, reads no fact;
 *   - limit + token pages resume exactly after the last entry;
 *   - a strong read polls watermarks until they reach the heads, and times
 *     out with a message naming the lagging partitions;
 *   - a building index answers SX_ENOTREADY;
 *   - PUT versions come back in input order across partitions, and a
 *     storage node's failed operation is named by the item's position;
 *     GET/DELETE of an absent key answer SX_ENOTFOUND;
 *   - PUTs through the router's own server (router/wcomb.c): a MULTI of
 *     PUTs leaves as one S_WRITE per partition and each PUT gets its own
 *     items' versions; when one partition refuses an operation before
 *     writing, a PUT only elsewhere is answered, a PUT only there runs again
 *     alone, and a PUT with items in both gets that partition's error and
 *     is never run again.
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

#define NENT 5

/* The scripted cluster. Guarded by mu (the fake servers run on nng worker
 * threads; the catalog they answer with is the fixture's). */
typedef struct fake {
    pthread_mutex_t mu;
    uint8_t hash_key[SX_HASH_KEY_BYTES];
    /* index entries (index-local keys, sorted) and their facts */
    tup_bytes ekey[NENT], efact[NENT]; /* efact: fact-local key h|pk */
    uint64_t ehash[NENT];
    mp_buf eproj[NENT];
    mp_buf fact[NENT]; /* current fact item; empty = deleted */
    uint64_t head, wm, wm_step;
    int wm_polls;
    int fail_part2_op; /* S_WRITE to partition 2 fails this op (-1: none) */
} fake;

static fake F;
static rtf R; /* the nodes, answering from F */

/* ---- the fake nodes' handlers ---- */

static void serve_s_get(const uint8_t *p, size_t n, mp_buf *out)
{
    uint64_t part;

    rtf_serve_s_get(p, n, F.efact, F.fact, NENT, &part, out);
}

static void serve_i_range(const uint8_t *p, size_t n, mp_buf *out)
{
    msg_I_RANGE_req q;
    msg_I_RANGE_rep r;
    mp_span keys[NENT], projs[NENT];
    uint64_t hashes[NENT], vers[NENT];
    uint32_t m = 0;

    if (msg_decode_req(MSG_I_RANGE, p, n, &q) != 0) {
        msg_encode_err(MSG_I_RANGE, SX_EPROTO, "bad I_RANGE", out);
        return;
    }
    for (int j = 0; j < NENT && m < q.limit; j++) {
        int k = q.desc ? NENT - 1 - j : j;
        const tup_bytes *key = &F.ekey[k];
        if (tup_keycmp(key->p, key->n, q.lo.p, q.lo.n) < 0)
            continue;
        if (q.hi.n > 0 && tup_keycmp(key->p, key->n, q.hi.p, q.hi.n) >= 0)
            continue;
        keys[m] = (mp_span){ key->p, key->n };
        projs[m] = (mp_span){ (const uint8_t *)F.eproj[k].sb.data, F.eproj[k].sb.size };
        hashes[m] = F.ehash[k];
        vers[m] = 5;
        m++;
    }
    memset(&r, 0, sizeof(r));
    r.keys = (msg_spans){ m, keys };
    r.projs = (msg_spans){ m, projs };
    r.hashes = (msg_u64s){ m, hashes };
    r.versions = (msg_u64s){ m, vers };
    msg_encode_rep(MSG_I_RANGE, &r, out);
    msg_free_req(MSG_I_RANGE, &q);
}

/* S_WRITE: version = 1000 * part + place in the batch; found = 0 for a
 * delete; partition 2 may be told to fail one operation. */
static void serve_s_write(const uint8_t *p, size_t n, mp_buf *out)
{
    msg_S_WRITE_req q;
    msg_S_WRITE_rep r;
    uint64_t vers[64], found[64];
    char msg[64];

    if (msg_decode_req(MSG_S_WRITE, p, n, &q) != 0 || q.objs.n > 64 || q.dels.n != q.objs.n) {
        msg_encode_err(MSG_S_WRITE, SX_EPROTO, "bad S_WRITE", out);
        return;
    }
    if (q.part == 2 && F.fail_part2_op >= 0 && (uint32_t)F.fail_part2_op < q.objs.n) {
        snprintf(msg, sizeof(msg), "operation %d: bad key: too long", F.fail_part2_op);
        msg_encode_err(MSG_S_WRITE, SX_EKEY, msg, out);
        msg_free_req(MSG_S_WRITE, &q);
        return;
    }
    for (uint32_t i = 0; i < q.objs.n; i++) {
        vers[i] = 1000 * q.part + i;
        found[i] = 0;
    }
    memset(&r, 0, sizeof(r));
    r.versions = (msg_u64s){ q.objs.n, vers };
    r.found = (msg_u64s){ q.objs.n, found };
    msg_encode_rep(MSG_S_WRITE, &r, out);
    msg_free_req(MSG_S_WRITE, &q);
}

static void serve_s_heads(const uint8_t *p, size_t n, mp_buf *out)
{
    uint64_t part = 1, head = F.head;
    msg_S_HEADS_rep r = { 0, { 1, &part }, { 1, &head } };

    (void)p;
    (void)n;
    msg_encode_rep(MSG_S_HEADS, &r, out);
}

static void serve_watermarks(const uint8_t *p, size_t n, mp_buf *out)
{
    uint64_t src = 1, wm = F.wm;
    msg_I_WATERMARKS_rep r = { 0, { 1, &src }, { 1, &wm } };

    (void)p;
    (void)n;
    F.wm += F.wm_step;
    F.wm_polls++;
    msg_encode_rep(MSG_I_WATERMARKS, &r, out);
}

static const rtf_script scripts[] = {
    { MSG_S_GET, serve_s_get },
    { MSG_I_RANGE, serve_i_range },
    { MSG_S_WRITE, serve_s_write },
    { MSG_S_HEADS, serve_s_heads },
    { MSG_I_WATERMARKS, serve_watermarks },
};

/* ---- set-up ---- */

/* Publishes the catalog: table t(id), index by_g(g) keys-only, ready or not. */
static uint32_t make_catalog(bool ready)
{
    cat_catalog *cat = cat_new();
    const char *attrs[] = { "g" };
    uint64_t parts[] = { 1 };
    const cat_index *ix;
    mp_buf b;
    uint32_t id;

    cat_create_table(cat, "t", "id", NULL);
    cat_create_index(cat, "t", "by_g", attrs, 1, CAT_PROJ_KEYS, NULL, 0);
    ix = cat_index_by_name(cat_table_by_name(cat, "t", 1), "by_g", 4);
    id = ix->id;
    if (ready)
        cat_mark_backfilled(cat, id, 1, parts, 1);
    mp_buf_init(&b);
    cat_encode(cat, &b);
    rtf_publish(&R, &b, cat->version);
    mp_buf_free(&b);
    cat_free(cat);
    return id;
}

/* Entries for ids 1..5 all indexed under g = "a" (index partition 102:
 * "a" sorts after "M"); then the facts: id 2
 * deleted, id 3 moved to g = "b", the others as indexed. */
static void make_data(uint32_t ixid)
{
    for (int k = 0; k < NENT; k++) {
        tup_bytes pk = { 0 };
        uint8_t be[8];
        int64_t id = k + 1;

        tup_encode_int(&pk, id);
        F.ehash[k] = hash_shard(F.hash_key, pk.p, pk.n);
        be_put32(be, ixid);
        tup_bytes_append(&F.ekey[k], be, 4);
        tup_encode_str(&F.ekey[k], "a", 1);
        tup_bytes_append(&F.ekey[k], pk.p, pk.n);
        be_put64(be, F.ehash[k]);
        tup_bytes_append(&F.efact[k], be, 8);
        tup_bytes_append(&F.efact[k], pk.p, pk.n);
        tup_bytes_free(&pk);

        mp_buf_init(&F.eproj[k]);
        mp_put_map(&F.eproj[k], 2);
        mp_put_cstr(&F.eproj[k], "id");
        mp_put_i64(&F.eproj[k], id);
        mp_put_cstr(&F.eproj[k], "g");
        mp_put_cstr(&F.eproj[k], "a");

        mp_buf_init(&F.fact[k]);
        if (id == 2)
            continue;
        mp_put_map(&F.fact[k], 3);
        mp_put_cstr(&F.fact[k], "id");
        mp_put_i64(&F.fact[k], id);
        mp_put_cstr(&F.fact[k], "g");
        mp_put_cstr(&F.fact[k], id == 3 ? "b" : "a");
        mp_put_cstr(&F.fact[k], "x");
        mp_put_i64(&F.fact[k], id * 10);
    }
}

/* ---- running queries through the router ---- */

typedef rtf_qres qres;

static void query(router *rt, uint64_t consistency, uint64_t limit, const char *attr,
                  const qres *prev, uint64_t timeout_ms, qres *res)
{
    msg_QUERY_req q;
    mp_buf eq;
    mp_span attrv = { (const uint8_t *)attr, attr ? strlen(attr) : 0 };

    mp_buf_init(&eq);
    mp_put_array(&eq, 1);
    mp_put_cstr(&eq, "a");
    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.index = (mp_span){ (const uint8_t *)"by_g", 4 };
    q.eq = (mp_span){ (const uint8_t *)eq.sb.data, eq.sb.size };
    q.limit = limit;
    q.consistency = consistency;
    q.timeout_ms = timeout_ms;
    if (attr != NULL)
        q.attrs = (msg_spans){ 1, &attrv };
    rtf_query(rt, &q, prev, res);
    mp_buf_free(&eq);
}

static bool ids_are(const qres *r, const int64_t *want, uint32_t n)
{
    if (r->n != n)
        return false;
    for (uint32_t i = 0; i < n; i++)
        if (r->ids[i] != want[i])
            return false;
    return true;
}

static void consistency_levels(router *rt)
{
    qres r, r2;
    static const int64_t verified[] = { 1, 4, 5 }, eventual[] = { 1, 3, 4, 5 },
                         all[] = { 1, 2, 3, 4, 5 };

    query(rt, Q_VERIFIED, 0, NULL, NULL, 0, &r);
    CHECK(r.rc == 0);
    CHECK(ids_are(&r, verified, 3));
    CHECK(r.entries == 5 && r.stale == 2 && r.covering == 0 && r.nfact >= 1);
    CHECK(r.tokn == 0);

    query(rt, Q_EVENTUAL, 0, NULL, NULL, 0, &r);
    CHECK(r.rc == 0);
    CHECK(ids_are(&r, eventual, 4)); /* keys-only: not covering */
    CHECK(r.stale == 1 && r.covering == 0);

    query(rt, Q_EVENTUAL, 0, "g", NULL, 0, &r); /* g is projected: covering */
    CHECK(r.rc == 0);
    CHECK(ids_are(&r, all, 5));
    CHECK(r.covering == 1 && r.nfact == 0 && r.stale == 0);

    /* pages of 2 under verified: [1] (2 stale) then [4] (3 stale)... */
    query(rt, Q_VERIFIED, 2, NULL, NULL, 0, &r);
    CHECK(r.rc == 0 && r.tokn > 0);
    CHECK(r.n == 2 && r.ids[0] == 1 && r.ids[1] == 4);
    query(rt, Q_VERIFIED, 2, NULL, &r, 0, &r2);
    CHECK(r2.rc == 0 && r2.n == 1 && r2.ids[0] == 5);
    CHECK(r2.entries == 1);
    /* the token bound to verified paging is refused when altered */
    r.token[r.tokn / 2] ^= 0x20;
    query(rt, Q_VERIFIED, 2, NULL, &r, 0, &r2);
    CHECK(r2.rc == SX_ETOKEN);
}

static void strong(router *rt)
{
    qres r;

    pthread_mutex_lock(&F.mu);
    F.head = 10;
    F.wm = 4;
    F.wm_step = 2; /* 4, 6, 8, 10: caught up at the 4th poll */
    F.wm_polls = 0;
    pthread_mutex_unlock(&F.mu);
    query(rt, Q_STRONG, 0, NULL, NULL, 5000, &r);
    CHECK(r.rc == 0 && r.n == 3 && r.stale == 2);
    pthread_mutex_lock(&F.mu);
    CHECK(F.wm_polls == 4);
    F.wm = 5;
    F.wm_step = 0; /* stuck */
    pthread_mutex_unlock(&F.mu);
    query(rt, Q_STRONG, 0, NULL, NULL, 400, &r);
    CHECK(r.rc == SX_ETIMEDOUT);
    CHECK(strstr(r.msg, "index partition 102 still behind storage partition 1 "
                        "(watermark 5 < head 10) after 400 ms") != NULL);
    if (strstr(r.msg, "watermark 5 < head 10") == NULL)
        fprintf(stderr, "strong: rc %d %s\n", r.rc, r.msg);
}

/* Sends request frame req of type t through the router; decodes into rep. */
static int call(router *rt, msg_type t, const void *req, void *rep, char *msg, size_t mlen,
                mp_buf *out)
{
    mp_buf b;
    int rc;

    mp_buf_init(&b);
    mp_buf_init(out);
    msg_encode_req(t, req, &b);
    rt_handle(rt, (const uint8_t *)b.sb.data, b.sb.size, out);
    rc = msg_decode_rep(t, (const uint8_t *)out->sb.data, out->sb.size, rep, msg, mlen);
    mp_buf_free(&b);
    return rc;
}

/* PUT: versions come back in input order across two partitions; a failed
 * operation is named by the item's position in the request. GET of an
 * absent key and DELETE of one answer SX_ENOTFOUND. */
static void writes(router *rt)
{
    enum { N = 12 };
    mp_buf items[N], out;
    mp_span raw[N];
    int part[N], slot[N], cnt[3] = { 0, 0, 0 }, second2 = -1;
    msg_PUT_req q;
    msg_PUT_rep r;
    char msg[256] = "";
    bool ok;
    int rc;

    for (int i = 0; i < N; i++) {
        tup_bytes pk = { 0 };
        tup_encode_int(&pk, 100 + i);
        part[i] = hash_shard(F.hash_key, pk.p, pk.n) <= 0x7fffffffffffffffull ? 1 : 2;
        slot[i] = cnt[part[i]]++;
        if (part[i] == 2 && slot[i] == 1)
            second2 = i;
        tup_bytes_free(&pk);
        mp_buf_init(&items[i]);
        mp_put_map(&items[i], 1);
        mp_put_cstr(&items[i], "id");
        mp_put_i64(&items[i], 100 + i);
        raw[i] = (mp_span){ (const uint8_t *)items[i].sb.data, items[i].sb.size };
    }
    CHECK(cnt[1] > 0 && cnt[2] > 1); /* both partitions used */
    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.items = (msg_spans){ N, raw };
    memset(&r, 0, sizeof(r));
    rc = call(rt, MSG_PUT, &q, &r, msg, sizeof(msg), &out);
    CHECK(rc == 0 && r.versions.n == N);
    ok = rc == 0 && r.versions.n == N;
    for (int i = 0; ok && i < N; i++)
        ok = r.versions.v[i] == (uint64_t)(1000 * part[i] + slot[i]);
    CHECK(ok);
    msg_free_rep(MSG_PUT, &r);
    mp_buf_free(&out);

    pthread_mutex_lock(&F.mu);
    F.fail_part2_op = 1;
    pthread_mutex_unlock(&F.mu);
    memset(&r, 0, sizeof(r));
    rc = call(rt, MSG_PUT, &q, &r, msg, sizeof(msg), &out);
    CHECK(rc == SX_EKEY);
    {
        char want[32];
        snprintf(want, sizeof(want), "item %d: bad key", second2);
        CHECK(strncmp(msg, want, strlen(want)) == 0);
        if (strncmp(msg, want, strlen(want)) != 0)
            fprintf(stderr, "put error: want '%s...', got '%s'\n", want, msg);
    }
    msg_free_rep(MSG_PUT, &r);
    mp_buf_free(&out);
    pthread_mutex_lock(&F.mu);
    F.fail_part2_op = -1;
    pthread_mutex_unlock(&F.mu);

    /* a key the router cannot route: no 'id' */
    {
        mp_buf bad;
        mp_span one[1];
        mp_buf_init(&bad);
        mp_put_map(&bad, 1);
        mp_put_cstr(&bad, "x");
        mp_put_i64(&bad, 1);
        one[0] = (mp_span){ (const uint8_t *)bad.sb.data, bad.sb.size };
        q.items = (msg_spans){ 1, one };
        memset(&r, 0, sizeof(r));
        rc = call(rt, MSG_PUT, &q, &r, msg, sizeof(msg), &out);
        CHECK(rc == SX_EKEY && strstr(msg, "item 0") != NULL && strstr(msg, "'id'") != NULL);
        msg_free_rep(MSG_PUT, &r);
        mp_buf_free(&out);
        /* GET and DELETE of an absent key */
        {
            msg_GET_req g;
            msg_GET_rep gr;
            msg_DELETE_req d;
            msg_DELETE_rep dr;
            mp_buf key;
            mp_buf_init(&key);
            mp_put_map(&key, 1);
            mp_put_cstr(&key, "id");
            mp_put_i64(&key, 424242);
            memset(&g, 0, sizeof(g));
            g.table = q.table;
            g.key = (mp_span){ (const uint8_t *)key.sb.data, key.sb.size };
            memset(&gr, 0, sizeof(gr));
            rc = call(rt, MSG_GET, &g, &gr, msg, sizeof(msg), &out);
            CHECK(rc == SX_ENOTFOUND);
            msg_free_rep(MSG_GET, &gr);
            mp_buf_free(&out);
            memset(&d, 0, sizeof(d));
            d.table = q.table;
            d.key = g.key;
            memset(&dr, 0, sizeof(dr));
            rc = call(rt, MSG_DELETE, &d, &dr, msg, sizeof(msg), &out);
            CHECK(rc == SX_ENOTFOUND);
            msg_free_rep(MSG_DELETE, &dr);
            mp_buf_free(&out);
            mp_buf_free(&key);
        }
        mp_buf_free(&bad);
    }
    for (int i = 0; i < N; i++)
        mp_buf_free(&items[i]);
}

/* The id of the first key >= from whose shard hash falls in partition
 * part (1: low half, 2: high half). */
static int id_in(int part, int from)
{
    for (int id = from;; id++) {
        tup_bytes pk = { 0 };
        tup_encode_int(&pk, id);
        int p = hash_shard(F.hash_key, pk.p, pk.n) <= 0x7fffffffffffffffull ? 1 : 2;
        tup_bytes_free(&pk);
        if (p == part)
            return id;
    }
}

/* A PUT request of table t for items {"id": ids[k]}, into b. */
static void put_frame(const int *ids, int n, mp_buf *b)
{
    mp_buf it[4];
    mp_span raw[4];
    msg_PUT_req q;

    for (int k = 0; k < n; k++) {
        mp_buf_init(&it[k]);
        mp_put_map(&it[k], 1);
        mp_put_cstr(&it[k], "id");
        mp_put_i64(&it[k], ids[k]);
        raw[k] = (mp_span){ (const uint8_t *)it[k].sb.data, it[k].sb.size };
    }
    memset(&q, 0, sizeof(q));
    q.table = (mp_span){ (const uint8_t *)"t", 1 };
    q.items = (msg_spans){ (uint32_t)n, raw };
    mp_buf_init(b);
    msg_encode_req(MSG_PUT, &q, b);
    for (int k = 0; k < n; k++)
        mp_buf_free(&it[k]);
}

/* Sends the 3 PUT frames f as one MULTI on REQ socket c; fills rc, the
 * versions and messages of each reply. Returns false when the exchange
 * itself failed. */
static bool put_multi(nng_socket c, mp_buf *f, int rc[3], uint64_t v[3][2], uint32_t nv[3],
                      char msg[3][256])
{
    msg_MULTI_req rq;
    msg_MULTI_rep rep;
    mp_span fr[3];
    mp_buf b;
    void *r = NULL;
    size_t rn = 0;
    bool ok;

    for (int k = 0; k < 3; k++)
        fr[k] = (mp_span){ (const uint8_t *)f[k].sb.data, f[k].sb.size };
    rq.frames = (msg_spans){ 3, fr };
    mp_buf_init(&b);
    ok = msg_encode_req(MSG_MULTI, &rq, &b) == 0 && nng_send(c, b.sb.data, b.sb.size, 0) == 0 &&
         nng_recv(c, &r, &rn, NNG_FLAG_ALLOC) == 0;
    mp_buf_free(&b);
    memset(&rep, 0, sizeof(rep));
    ok = ok && msg_decode_rep(MSG_MULTI, r, rn, &rep, NULL, 0) == 0 && rep.frames.n == 3;
    for (int k = 0; ok && k < 3; k++) {
        msg_PUT_rep pr;
        memset(&pr, 0, sizeof(pr));
        msg[k][0] = '\0';
        rc[k] = msg_decode_rep(MSG_PUT, rep.frames.v[k].p, rep.frames.v[k].n, &pr, msg[k], 256);
        nv[k] = rc[k] == 0 ? pr.versions.n : 0;
        for (uint32_t i = 0; i < nv[k] && i < 2; i++)
            v[k][i] = pr.versions.v[i];
        msg_free_rep(MSG_PUT, &pr);
    }
    msg_free_rep(MSG_MULTI, &rep);
    if (r != NULL)
        nng_free(r, rn);
    return ok;
}

static void combined(router *rt)
{
    net_server_opts so = {
        .workers = 2, .fibers = 16, .defer = rt_defer, .defer_flush = rt_defer_flush
    };
    nng_socket rs, c;
    net_server *srv = NULL;
    int a1 = id_in(1, 500), b2 = id_in(2, 500), c1 = id_in(1, a1 + 1), c2 = id_in(2, b2 + 1);
    int ida[] = { a1 }, idb[] = { b2 }, idc[] = { c1, c2 };
    mp_buf f[3];
    int rc[3];
    uint64_t v[3][2];
    uint32_t nv[3];
    char msg[3][256];

    CHECK(net_listen("inproc://fake-r1", &rs) == 0);
    CHECK(net_server_open(rs, &so, rt_handle, rt, &srv) == 0);
    CHECK(net_dial("inproc://fake-r1", &c) == 0);
    CHECK(nng_socket_set_ms(c, NNG_OPT_RECVTIMEO, 10000) == 0);
    put_frame(ida, 1, &f[0]);
    put_frame(idb, 1, &f[1]);
    put_frame(idc, 2, &f[2]);

    /* all written: partition 1 gets [a1, c1], partition 2 [b2, c2] */
    unsigned long long p0 = atomic_load(&rt->comb_puts), w0 = atomic_load(&rt->comb_writes);
    CHECK(put_multi(c, f, rc, v, nv, msg));
    CHECK(rc[0] == 0 && nv[0] == 1 && v[0][0] == 1000);
    CHECK(rc[1] == 0 && nv[1] == 1 && v[1][0] == 2000);
    CHECK(rc[2] == 0 && nv[2] == 2 && v[2][0] == 1001 && v[2][1] == 2001);
    CHECK(atomic_load(&rt->comb_puts) - p0 == 3);
    CHECK(atomic_load(&rt->comb_writes) - w0 == 2);

    /* partition 2 refuses its second operation (c2) before writing */
    pthread_mutex_lock(&F.mu);
    F.fail_part2_op = 1;
    pthread_mutex_unlock(&F.mu);
    unsigned long long r0 = atomic_load(&rt->comb_reruns);
    CHECK(put_multi(c, f, rc, v, nv, msg));
    CHECK(rc[0] == 0 && nv[0] == 1 && v[0][0] == 1000); /* partition 1 only */
    CHECK(rc[1] == 0 && nv[1] == 1 && v[1][0] == 2000); /* run again alone */
    CHECK(rc[2] == SX_EKEY &&                           /* written in part: not again */
          strstr(msg[2], "item 1: bad key: too long (storage node ") != NULL &&
          strstr(msg[2], "partition 2)") != NULL); /* its own item, named */
    if (rc[2] != SX_EKEY || strstr(msg[2], "item 1: bad key") == NULL)
        fprintf(stderr, "combined: PUT C answered %d: %s\n", rc[2], msg[2]);
    CHECK(atomic_load(&rt->comb_reruns) - r0 == 1);

    /* partition 2 refuses its first operation (b2, PUT B's): B runs again
     * alone and gets its own error; C, written on partition 1, is told its
     * item for partition 2 was not written because of another request's */
    pthread_mutex_lock(&F.mu);
    F.fail_part2_op = 0;
    pthread_mutex_unlock(&F.mu);
    r0 = atomic_load(&rt->comb_reruns);
    CHECK(put_multi(c, f, rc, v, nv, msg));
    CHECK(rc[0] == 0 && nv[0] == 1 && v[0][0] == 1000);
    CHECK(rc[1] == SX_EKEY && strstr(msg[1], "item 0: bad key: too long (storage node ") != NULL);
    CHECK(rc[2] == SX_EKEY &&
          strstr(msg[2], "item 1 (with 1 item(s) for partition 2) not written") != NULL &&
          strstr(msg[2], "another request's item in the same combined write was refused: "
                         "bad key: too long") != NULL &&
          strstr(msg[2], "operation") == NULL);
    if (rc[1] != SX_EKEY || rc[2] != SX_EKEY)
        fprintf(stderr, "combined: PUT B answered %d: %s; PUT C %d: %s\n", rc[1], msg[1], rc[2],
                msg[2]);
    CHECK(atomic_load(&rt->comb_reruns) - r0 == 1);
    pthread_mutex_lock(&F.mu);
    F.fail_part2_op = -1;
    pthread_mutex_unlock(&F.mu);

    for (int k = 0; k < 3; k++)
        mp_buf_free(&f[k]);
    nng_close(c);
    net_server_stop(srv);
}

int main(void)
{
    router *rt = NULL;
    uint32_t ixid;
    qres r;

    pthread_mutex_init(&F.mu, NULL);
    F.fail_part2_op = -1;
    CHECK(proto_init() == 0);
    CHECK(rtf_open(&R, "fake", "11111111111111111111111111111111111111111111111111111111111111ff",
                   &F.mu, scripts, sizeof(scripts) / sizeof(scripts[0])));
    if (R.cfg == NULL)
        return CHECK_DONE();
    memcpy(F.hash_key, R.cfg->hash_key, sizeof(F.hash_key));

    ixid = make_catalog(false);
    make_data(ixid);
    CHECK(rt_new(R.cfg, cfg_node_by_name(R.cfg, "r1"), &rt) == 0);
    if (rt != NULL) {
        query(rt, Q_VERIFIED, 0, NULL, NULL, 0, &r);
        CHECK(r.rc == SX_ENOTREADY && strstr(r.msg, "by_g") != NULL);
        make_catalog(true);
        consistency_levels(rt);
        strong(rt);
        writes(rt);
        combined(rt);
    }
    rt_free(rt);
    rtf_close(&R);
    for (int k = 0; k < NENT; k++) {
        tup_bytes_free(&F.ekey[k]);
        tup_bytes_free(&F.efact[k]);
        mp_buf_free(&F.eproj[k]);
        mp_buf_free(&F.fact[k]);
    }
    return CHECK_DONE();
}
