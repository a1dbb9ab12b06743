/*
 * fz_seeds.c — the cluster as sx-fuzzframe sees it: what it holds at the
 * start (fz_setup: the catalog, the --read and --write tables, some items,
 * continuation tokens, the index partitions' watermarks), which frames
 * could touch anything but the --write table and so are withheld
 * (fz_unsafe; the rules are in fuzzframe.c's header comment), and the
 * VALID seed frames of every message type each port serves, built with
 * proto/'s encoders from the cluster's real contents.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catalog.h"
#include "config.h"
#include "hash.h"
#include "item.h"
#include "msg.h"
#include "mp.h"
#include "sx_errors.h"
#include "tuple.h"
#include "fz.h"

#define HW_SANE 1000000000000000ull /* 10^15 µs: below every real hw */
#define FAKE_INDEX 0xfffffff0u      /* an index id no table holds (as sx-ibuild) */

/* ---- the cluster as the fuzzer sees it ------------------------------------------------ */

static bool protected_table(const fz_ctx *x, mp_span name)
{
    for (int i = 0; i < x->nprotect; i++)
        if (mp_span_eq_cstr(name, x->protect[i]))
            return true;
    return false;
}

static bool protected_index(const fz_ctx *x, uint64_t id)
{
    for (int i = 0; i < x->npix; i++)
        if (x->pix[i] == id)
            return true;
    return false;
}

static uint64_t wm_at_start(const fz_ctx *x, uint64_t part, uint64_t source)
{
    for (int i = 0; i < x->nwms; i++)
        if (x->wms[i].part == part && x->wms[i].source == source)
            return x->wms[i].wm;
    return 0;
}

/* Whether request p..n, decoded as its server will, could change anything
 * but the throwaway table (see fuzzframe.c's header comment). */
bool fz_unsafe(const fz_ctx *x, const uint8_t *p, size_t n, int depth)
{
    union {
        msg_MULTI_req mu;
        msg_PUT_req put;
        msg_DELETE_req del;
        msg_INDEX_CREATE_req ic;
        msg_INDEX_DROP_req id;
        msg_S_WRITE_req sw;
        msg_CAT_UPDATE_req cu;
        msg_CAT_BACKFILLED_req cb;
        msg_I_APPLY_req ia;
        msg_I_BUILD_req ib;
    } u;
    msg_type t;
    int is_reply;
    bool bad = false;

    memset(&u, 0, sizeof u);
    if (msg_peek(p, n, &t, &is_reply) != 0 || is_reply)
        return false;
    switch (t) {
    case MSG_MULTI:
        if (depth == 0 && msg_decode_req(t, p, n, &u) == 0)
            for (uint32_t i = 0; i < u.mu.frames.n && !bad; i++)
                bad = fz_unsafe(x, u.mu.frames.v[i].p, u.mu.frames.v[i].n, depth + 1);
        break;
    case MSG_PUT: bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.put.table); break;
    case MSG_DELETE:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.del.table);
        break;
    case MSG_INDEX_CREATE:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.ic.table);
        break;
    case MSG_INDEX_DROP:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.id.table);
        break;
    case MSG_CAT_UPDATE:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_table(x, u.cu.table);
        break;
    case MSG_S_WRITE: bad = msg_decode_req(t, p, n, &u) == 0 && u.sw.table_id != x->wt->id; break;
    case MSG_CAT_BACKFILLED:
        bad = msg_decode_req(t, p, n, &u) == 0 && protected_index(x, u.cb.index_id);
        break;
    case MSG_I_APPLY:
        bad = msg_decode_req(t, p, n, &u) == 0 &&
              (u.ia.upto > wm_at_start(x, u.ia.part, u.ia.source) || u.ia.hw > HW_SANE);
        break;
    case MSG_I_BUILD:
        if (msg_decode_req(t, p, n, &u) == 0)
            for (uint32_t i = 0; i < u.ib.keys.n && !bad; i++)
                bad = u.ib.keys.v[i].n < 4 || protected_index(x, be_get32(u.ib.keys.v[i].p));
        break;
    default: return false;
    }
    msg_free_req(t, &u); /* safe on the zeroed union, decoded or not */
    return bad;
}

/* ---- seed frames per port ---------------------------------------------------------- */

static fz_seed *seed_add(fz_port *pt, const char *name, tup_bytes frame, int weight)
{
    fz_seed *s;

    if (pt->nseeds >= MAX_SEEDS) {
        fprintf(stderr, "sx-fuzzframe: too many seeds (programming error)\n");
        exit(2);
    }
    s = &pt->seeds[pt->nseeds++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->frame = frame;
    s->weight = weight;
    return s;
}

tup_bytes fz_ping_frame(void)
{
    msg_PING_req rq;

    memset(&rq, 0, sizeof rq);
    return fz_encode_req(MSG_PING, &rq);
}

static mp_span cbuf(const char *s)
{
    return (mp_span){ (const uint8_t *)s, strlen(s) };
}

static mp_span bbuf(const tup_bytes *b)
{
    return (mp_span){ b->p, b->n };
}

/* An item of the throwaway table: key kv, a little of every value type. */
static tup_bytes scratch_item(const fz_ctx *x, int64_t kv, const char *town)
{
    mp_buf m;

    mp_buf_init(&m);
    mp_put_map(&m, 7);
    mp_put_cstr(&m, x->wt->pk);
    mp_put_i64(&m, kv);
    mp_put_cstr(&m, "town");
    mp_put_cstr(&m, town);
    mp_put_cstr(&m, "lastname");
    mp_put_cstr(&m, "Fuzz");
    mp_put_cstr(&m, "score");
    mp_put_double(&m, -2.5);
    mp_put_cstr(&m, "tags");
    mp_put_array(&m, 2);
    mp_put_cstr(&m, "a");
    mp_put_nil(&m);
    mp_put_cstr(&m, "blob");
    mp_put_bin(&m, "\x00\xff\x01", 3);
    mp_put_cstr(&m, "ok");
    mp_put_bool(&m, true);
    return fz_take_buf(&m);
}

/* The key map (only the key attributes) of item it of table t. */
static tup_bytes key_of(const cat_table *t, const tup_bytes *it)
{
    mp_buf m;

    mp_buf_init(&m);
    if (item_select(t, it->p, it->n, NULL, 0, &m) != 0)
        fz_die_oom();
    return fz_take_buf(&m);
}

/* h | pk of item it of table t (a fact-local key) and its shard hash. */
static tup_bytes fact_key(const fz_ctx *x, const cat_table *t, const tup_bytes *it, uint64_t *h)
{
    tup_bytes pk = { 0 }, k = { 0 };
    size_t pkl;
    uint8_t hb[8];

    if (item_primary_key(t, it->p, it->n, &pk, &pkl) != 0) {
        fprintf(stderr, "sx-fuzzframe: an item without a valid key\n");
        exit(2);
    }
    *h = hash_shard(x->cfg->hash_key, pk.p, pkl);
    be_put64(hb, *h);
    fz_add(&k, hb, 8);
    fz_add(&k, pk.p, pk.n);
    tup_bytes_free(&pk);
    return k;
}

/* Value of attribute a of item it (raw msgpack), or nil. */
static mp_span attr_of(const tup_bytes *it, const char *a)
{
    static const uint8_t nil = 0xc0;
    mp_span v;

    if (item_get(it->p, it->n, a, &v) != 0)
        return (mp_span){ &nil, 1 };
    return v;
}

/* A one-element msgpack array holding raw value v. */
static tup_bytes array1(mp_span v)
{
    mp_buf m;

    mp_buf_init(&m);
    mp_put_array(&m, 1);
    mp_put_raw(&m, v.p, v.n);
    return fz_take_buf(&m);
}

static tup_bytes map1(const char *k, mp_span v)
{
    mp_buf m;

    mp_buf_init(&m);
    mp_put_map(&m, 1);
    mp_put_cstr(&m, k);
    mp_put_raw(&m, v.p, v.n);
    return fz_take_buf(&m);
}

static void router_seeds(const fz_ctx *x, fz_port *pt)
{
    const tup_bytes *it0 = &x->items[0], *it1 = &x->items[x->nitems > 1 ? 1 : 0];
    tup_bytes rkey = key_of(x->rt, it0), s1 = scratch_item(x, 1, "Redmond"),
              s2 = scratch_item(x, 2, "Zurich"), wkey;
    mp_span town = attr_of(it0, x->rix->attrs[0]);
    tup_bytes eq = array1(town), where = map1(x->rix->attrs[0], town),
              peq = array1(attr_of(it1, x->rt->pk));
    mp_span items[2] = { bbuf(&s1), bbuf(&s2) }, a2[2] = { cbuf("town"), cbuf("lastname") };
    mp_span pa[1] = { cbuf("email") }, rattrs[2];
    static const uint8_t empty_arr = 0x90, nil = 0xc0;
    const char *rix = x->rix->name;

    wkey = key_of(x->wt, &s2);
    rattrs[0] = cbuf(x->rix->attrs[0]);
    rattrs[1] = cbuf(x->rt->pk);
    seed_add(pt, "PING", fz_ping_frame(), 50);
    {
        msg_TABLE_CREATE_req r = { .table = cbuf("fzt_a"), .pk = cbuf("id"), .sk = cbuf("") };
        seed_add(pt, "TABLE_CREATE", fz_encode_req(MSG_TABLE_CREATE, &r), 50);
        r.table = cbuf("fzt_b");
        r.sk = cbuf("ts");
        seed_add(pt, "TABLE_CREATE/sk", fz_encode_req(MSG_TABLE_CREATE, &r), 50);
    }
    {
        msg_INDEX_CREATE_req r = { .table = cbuf(x->wt->name),
                                   .index = cbuf("fzi_a"),
                                   .attrs = { 2, a2 },
                                   .proj = CAT_PROJ_LIST,
                                   .proj_attrs = { 1, pa } };
        seed_add(pt, "INDEX_CREATE", fz_encode_req(MSG_INDEX_CREATE, &r), 50);
    }
    {
        msg_INDEX_DROP_req r = { .table = cbuf(x->wt->name), .index = cbuf("fzi_a") };
        seed_add(pt, "INDEX_DROP", fz_encode_req(MSG_INDEX_DROP, &r), 30);
    }
    {
        msg_INDEX_LIST_req r = { .table = cbuf(x->rt->name) };
        seed_add(pt, "INDEX_LIST", fz_encode_req(MSG_INDEX_LIST, &r), 50);
    }
    {
        msg_PUT_req r = { .table = cbuf(x->wt->name), .items = { 2, items } };
        seed_add(pt, "PUT", fz_encode_req(MSG_PUT, &r), 100);
    }
    {
        msg_GET_req r = { .table = cbuf(x->rt->name), .key = bbuf(&rkey) };
        seed_add(pt, "GET", fz_encode_req(MSG_GET, &r), 100);
        r.table = cbuf(x->wt->name);
        r.key = bbuf(&wkey);
        seed_add(pt, "GET/write table", fz_encode_req(MSG_GET, &r), 40);
    }
    {
        msg_DELETE_req r = { .table = cbuf(x->wt->name), .key = bbuf(&wkey) };
        seed_add(pt, "DELETE", fz_encode_req(MSG_DELETE, &r), 100);
    }
    {
        msg_QUERY_req r = { .table = cbuf(x->rt->name),
                            .index = cbuf(rix),
                            .eq = bbuf(&eq),
                            .cond = Q_COND_PREFIX,
                            .from = { &nil, 1 },
                            .to = { &nil, 1 },
                            .prefix = cbuf("S"),
                            .limit = 10,
                            .attrs = { 2, rattrs },
                            .consistency = Q_VERIFIED };
        seed_add(pt, "QUERY/prefix", fz_encode_req(MSG_QUERY, &r), 100);
        r.cond = Q_COND_RANGE;
        r.prefix = cbuf("");
        r.eq = (mp_span){ &empty_arr, 1 };
        r.from = town;
        r.to = (mp_span){ (const uint8_t *)"\xa1z", 2 };
        r.attrs.n = 0;
        r.desc = 1;
        r.consistency = Q_EVENTUAL;
        seed_add(pt, "QUERY/range", fz_encode_req(MSG_QUERY, &r), 100);
        r.cond = Q_COND_NONE;
        r.from = r.to = (mp_span){ &nil, 1 };
        r.eq = bbuf(&eq);
        r.desc = 0;
        r.consistency = Q_STRONG;
        r.timeout_ms = 3000;
        seed_add(pt, "QUERY/strong", fz_encode_req(MSG_QUERY, &r), 100);
        r.eq = (mp_span){ &empty_arr, 1 };
        r.consistency = Q_EVENTUAL;
        r.timeout_ms = 0;
        r.limit = 1;
        r.token = bbuf(&x->qtoken);
        seed_add(pt, "QUERY/token", fz_encode_req(MSG_QUERY, &r), 100);
        r.index = cbuf("primary");
        r.token = (mp_span){ NULL, 0 };
        r.eq = bbuf(&peq);
        r.limit = 5;
        seed_add(pt, "QUERY/primary", fz_encode_req(MSG_QUERY, &r), 60);
    }
    {
        msg_SCAN_req r = { .table = cbuf(x->rt->name), .where = bbuf(&where), .limit = 5 };
        seed_add(pt, "SCAN", fz_encode_req(MSG_SCAN, &r), 100);
        r.where = (mp_span){ &nil, 1 };
        r.limit = 2;
        r.token = bbuf(&x->stoken);
        seed_add(pt, "SCAN/token", fz_encode_req(MSG_SCAN, &r), 100);
    }
    {
        msg_STATUS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "STATUS", fz_encode_req(MSG_STATUS, &r), 30);
    }
    {
        msg_CATALOG_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "CATALOG", fz_encode_req(MSG_CATALOG, &r), 40);
    }
    tup_bytes_free(&rkey);
    tup_bytes_free(&wkey);
    tup_bytes_free(&s1);
    tup_bytes_free(&s2);
    tup_bytes_free(&eq);
    tup_bytes_free(&peq);
    tup_bytes_free(&where);
}

/* Items of the throwaway table whose hash falls in partition cp: n of them,
 * keys from *next on. */
static void scratch_in_part(const fz_ctx *x, const cfg_part *cp, tup_bytes *out, int n,
                            int64_t *next)
{
    for (int k = 0; k < n;) {
        tup_bytes it = scratch_item(x, (*next)++, k ? "Zurich" : "Redmond"), fk;
        uint64_t h;

        fk = fact_key(x, x->wt, &it, &h);
        tup_bytes_free(&fk);
        if (h >= cp->hlo && h <= cp->hhi)
            out[k++] = it;
        else
            tup_bytes_free(&it);
    }
}

static void storage_seeds(const fz_ctx *x, fz_port *pt)
{
    const cfg_part *cp = NULL;
    tup_bytes wi[2], dk, keys[8];
    mp_span objs[2], kb[8];
    uint64_t dels[2] = { 0, 0 }, one = 1, h;
    int64_t next = 1000 + 1000 * pt->idx;
    uint32_t nk = 0;
    static const uint8_t nil = 0xc0;
    tup_bytes where = map1(x->rix->attrs[0], attr_of(&x->items[0], x->rix->attrs[0]));

    for (int i = 0; i < x->cfg->nstorage; i++)
        if (&x->cfg->nodes[x->cfg->storage[i].node] == pt->node) {
            cp = &x->cfg->storage[i];
            break;
        }
    if (cp == NULL) {
        fprintf(stderr, "sx-fuzzframe: storage node %s has no partition\n", pt->node->name);
        exit(2);
    }
    scratch_in_part(x, cp, wi, 2, &next);
    for (int i = 0; i < x->nitems && nk < 8; i++) {
        tup_bytes k = fact_key(x, x->rt, &x->items[i], &h);
        if (h >= cp->hlo && h <= cp->hhi) {
            keys[nk] = k;
            kb[nk] = bbuf(&keys[nk]);
            nk++;
        } else {
            tup_bytes_free(&k);
        }
    }
    seed_add(pt, "PING", fz_ping_frame(), 40);
    objs[0] = bbuf(&wi[0]);
    objs[1] = bbuf(&wi[1]);
    {
        msg_S_WRITE_req r = { .part = cp->id,
                              .catver = x->cat->version,
                              .table_id = x->wt->id,
                              .dels = { 2, dels },
                              .objs = { 2, objs } };
        seed_add(pt, "S_WRITE", fz_encode_req(MSG_S_WRITE, &r), 100);
        dk = key_of(x->wt, &wi[1]);
        objs[0] = bbuf(&dk);
        r.dels = (msg_u64s){ 1, &one };
        r.objs = (msg_spans){ 1, objs };
        seed_add(pt, "S_WRITE/delete", fz_encode_req(MSG_S_WRITE, &r), 60);
    }
    {
        msg_S_GET_req r = { .part = cp->id, .table_id = x->rt->id, .keys = { nk, kb } };
        seed_add(pt, "S_GET", fz_encode_req(MSG_S_GET, &r), 100);
    }
    {
        msg_S_RANGE_req r = {
            .part = cp->id, .table_id = x->rt->id, .limit = 10, .where = bbuf(&where)
        };
        seed_add(pt, "S_RANGE", fz_encode_req(MSG_S_RANGE, &r), 100);
        if (nk > 0)
            r.lo = kb[0];
        r.desc = 1;
        r.limit = 3;
        r.where = (mp_span){ &nil, 1 };
        seed_add(pt, "S_RANGE/desc", fz_encode_req(MSG_S_RANGE, &r), 60);
    }
    {
        msg_S_HEADS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "S_HEADS", fz_encode_req(MSG_S_HEADS, &r), 40);
    }
    {
        msg_NODE_STATUS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "NODE_STATUS", fz_encode_req(MSG_NODE_STATUS, &r), 30);
    }
    {
        msg_CATALOG_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "CATALOG", fz_encode_req(MSG_CATALOG, &r), 30);
    }
    { /* served by the catalog node only; elsewhere an error */
        mp_span a1[1] = { cbuf("town") };
        msg_CAT_UPDATE_req r = { .op = CATOP_CREATE_TABLE,
                                 .table = cbuf("fzc_a"),
                                 .index = cbuf(""),
                                 .pk = cbuf("id"),
                                 .sk = cbuf("") };
        seed_add(pt, "CAT_UPDATE/table", fz_encode_req(MSG_CAT_UPDATE, &r), 40);
        r.op = CATOP_CREATE_INDEX;
        r.table = cbuf(x->wt->name);
        r.index = cbuf("fzc_i");
        r.pk = r.sk = cbuf("");
        r.attrs = (msg_spans){ 1, a1 };
        r.proj = CAT_PROJ_ALL;
        seed_add(pt, "CAT_UPDATE/index", fz_encode_req(MSG_CAT_UPDATE, &r), 40);
        r.op = CATOP_DROP_INDEX;
        r.attrs.n = 0;
        r.proj = 0;
        seed_add(pt, "CAT_UPDATE/drop", fz_encode_req(MSG_CAT_UPDATE, &r), 30);
    }
    {
        msg_CAT_BACKFILLED_req r = { .index_id = x->wix ? x->wix->id : FAKE_INDEX, .part = cp->id };
        seed_add(pt, "CAT_BACKFILLED", fz_encode_req(MSG_CAT_BACKFILLED, &r), 40);
    }
    { /* replication: served by nodes holding a replicated group (else an
       * error): a batch of one heartbeat for the catalog group, as node 1's
       * replica to node 2's (raft_wire's layout, PROTOCOL.md), a probe and
       * a join */
        static const uint8_t batch[] = {
            0xdd, 0,    0,    0,    1,                            /* array32 of 1 message */
            0x97,                                                 /* [7 elements] */
            7,                                                    /* HEARTBEAT */
            0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* group */
            0xcd, 0x01, 0x01,                                     /* from 257 */
            0xcd, 0x01, 0x02,                                     /* to 258 */
            1,    1,    0                                         /* term, commit, ctx */
        };
        msg_RAFT_req r = { .from = 1, .msgs = { batch, sizeof batch } };
        seed_add(pt, "RAFT", fz_encode_req(MSG_RAFT, &r), 20);
        msg_R_PROBE_req q = { .group = UINT64_MAX };
        seed_add(pt, "R_PROBE", fz_encode_req(MSG_R_PROBE, &q), 10);
        msg_R_JOIN_req j = { .group = UINT64_MAX, .node = 1 };
        seed_add(pt, "R_JOIN", fz_encode_req(MSG_R_JOIN, &j), 10);
    }
    for (uint32_t i = 0; i < nk; i++)
        tup_bytes_free(&keys[i]);
    tup_bytes_free(&wi[0]);
    tup_bytes_free(&wi[1]);
    tup_bytes_free(&dk);
    tup_bytes_free(&where);
}

/* An index-local key of index id whose tuple (a string, then an int
 * primary key) falls in index partition cp. */
static tup_bytes index_key(const fz_ctx *x, const cfg_part *cp, uint32_t id, int64_t pk)
{
    static const char *const cands[] = { "Chicago", "Redmond", "0", "A", "M",
                                         "Z",       "a",       "m", "z", "\x7f" };
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        tup_bytes k = { 0 };
        uint8_t idb[4];

        be_put32(idb, id);
        fz_add(&k, idb, 4);
        if (tup_encode_str(&k, cands[i], strlen(cands[i])) != 0 || tup_encode_int(&k, pk) != 0)
            fz_die_oom();
        if (cfg_index_for(x->cfg, k.p + 4, k.n - 4) == cp)
            return k;
        tup_bytes_free(&k);
    }
    fprintf(stderr, "sx-fuzzframe: no test value falls in index partition %" PRIu64 "\n", cp->id);
    exit(2);
}

static void index_seeds(const fz_ctx *x, fz_port *pt)
{
    const cfg_part *cp = NULL;
    tup_bytes k1, k2, lo, hi = { 0 }, ilo, ihi;
    uint8_t idb[4];
    uint64_t src = x->cfg->storage[0].id, upto = 0, seqs[2], kinds[2] = { 0, 1 },
             vers[2] = { 7, 8 }, hashes[2] = { 42, 43 };
    static const uint8_t nil = 0xc0, fixmap_proj[] = { 0x81, 0xa1, 'x', 0x01 };
    mp_span keys[2], projs[2] = { { fixmap_proj, sizeof fixmap_proj }, { &nil, 1 } };

    for (int i = 0; i < x->cfg->nindex; i++)
        if (&x->cfg->nodes[x->cfg->index[i].node] == pt->node) {
            cp = &x->cfg->index[i];
            break;
        }
    if (cp == NULL) {
        fprintf(stderr, "sx-fuzzframe: index node %s has no partition\n", pt->node->name);
        exit(2);
    }
    for (int i = 0; i < x->cfg->nstorage; i++) /* the source furthest along */
        if (wm_at_start(x, cp->id, x->cfg->storage[i].id) > upto) {
            upto = wm_at_start(x, cp->id, x->cfg->storage[i].id);
            src = x->cfg->storage[i].id;
        }
    seqs[0] = upto > 1 ? upto - 1 : 0;
    seqs[1] = upto;
    k1 = index_key(x, cp, FAKE_INDEX, 1);
    k2 = index_key(x, cp, x->wix ? x->wix->id : FAKE_INDEX, 2);
    keys[0] = bbuf(&k1);
    keys[1] = bbuf(&k2);
    /* the read index, from a value in this partition to the end of it */
    lo = index_key(x, cp, x->rix->id, 0);
    lo.n -= 9; /* drop the int pk component */
    be_put32(idb, x->rix->id + 1);
    fz_add(&hi, idb, 4);
    ilo = (tup_bytes){ 0 };
    ihi = (tup_bytes){ 0 };
    be_put32(idb, x->rix->id);
    fz_add(&ilo, idb, 4);

    seed_add(pt, "PING", fz_ping_frame(), 40);
    {
        msg_NODE_STATUS_req r;
        memset(&r, 0, sizeof r);
        seed_add(pt, "NODE_STATUS", fz_encode_req(MSG_NODE_STATUS, &r), 30);
    }
    {
        msg_I_WATERMARKS_req r = { .part = cp->id };
        seed_add(pt, "I_WATERMARKS", fz_encode_req(MSG_I_WATERMARKS, &r), 60);
    }
    {
        msg_I_RANGE_req r = { .part = cp->id, .lo = bbuf(&lo), .hi = bbuf(&hi), .limit = 10 };
        seed_add(pt, "I_RANGE", fz_encode_req(MSG_I_RANGE, &r), 100);
        r.lo = bbuf(&ilo);
        r.hi = bbuf(&ihi);
        r.desc = 1;
        r.limit = 0;
        seed_add(pt, "I_RANGE/desc", fz_encode_req(MSG_I_RANGE, &r), 60);
    }
    { /* records at or below the watermark: redeliveries, nothing moves */
        msg_I_APPLY_req r = { .part = cp->id,
                              .source = src,
                              .upto = upto,
                              .hw = 0,
                              .seqs = { upto > 1 ? 2 : 0, seqs },
                              .kinds = { 2, kinds },
                              .versions = { 2, vers },
                              .keys = { 2, keys },
                              .hashes = { 2, hashes },
                              .projs = { 2, projs } };
        if (upto <= 1) { /* no room for two seqs: no records */
            r.kinds.n = r.versions.n = r.keys.n = r.hashes.n = r.projs.n = 0;
        }
        seed_add(pt, "I_APPLY", fz_encode_req(MSG_I_APPLY, &r), 100);
    }
    { /* a build's records under a fake index and the throwaway one's (its upto
       * far ahead: a build moves no watermark and is then never refused) */
        uint64_t bk[2] = { 0, 0 };
        msg_I_BUILD_req r = { .part = cp->id,
                              .source = src,
                              .upto = upto + (1u << 20),
                              .kinds = { 2, bk },
                              .versions = { 2, vers },
                              .keys = { 2, keys },
                              .hashes = { 2, hashes },
                              .projs = { 2, projs },
                              .seals = 1 };
        seed_add(pt, "I_BUILD", fz_encode_req(MSG_I_BUILD, &r), 100);
        r.kinds.n = r.versions.n = r.keys.n = r.hashes.n = r.projs.n = 0;
        seed_add(pt, "I_BUILD/seal", fz_encode_req(MSG_I_BUILD, &r), 40);
    }
    tup_bytes_free(&k1);
    tup_bytes_free(&k2);
    tup_bytes_free(&lo);
    tup_bytes_free(&hi);
    tup_bytes_free(&ilo);
    tup_bytes_free(&ihi);
}

/* A MULTI seed of a port: PING and two of its other seeds. */
static void multi_seed(fz_port *pt)
{
    const tup_bytes *f[3] = { &pt->ping, &pt->seeds[pt->nseeds > 2 ? 2 : 0].frame,
                              &pt->seeds[pt->nseeds - 1].frame };

    seed_add(pt, "MULTI", fz_multi_of(f, 3), 100);
}

void fz_port_seeds(const fz_ctx *x, fz_port *pt)
{
    if (pt->node->role == SX_ROLE_ROUTER)
        router_seeds(x, pt);
    else if (pt->node->role == SX_ROLE_STORAGE)
        storage_seeds(x, pt);
    else
        index_seeds(x, pt);
    multi_seed(pt);
}

/* ---- set-up: what the cluster holds ------------------------------------------------------ */

/* One call to the router or a node for set-up, decoded into rep, whose
 * views borrow from *keep (the reply: the caller frees it after rep);
 * exits when it fails. */
static void setup_call(fz_conn *c, msg_type t, const void *rq, void *rep, tup_bytes *keep)
{
    tup_bytes f = fz_encode_req(t, rq);
    char em[200];
    int rc;

    if (fz_conn_call(c, f.p, f.n, keep) != R_REPLY) {
        fprintf(stderr, "sx-fuzzframe: set-up: no %s reply from %s\n", msg_name(t), c->url);
        exit(2);
    }
    tup_bytes_free(&f);
    rc = msg_decode_rep(t, keep->p, keep->n, rep, em, sizeof em);
    if (rc != 0) {
        fprintf(stderr, "sx-fuzzframe: set-up: %s from %s: %s %s\n", msg_name(t), c->url,
                sx_strerror(rc), em);
        exit(2);
    }
}

void fz_setup(fz_ctx *x, const char *rname, const char *wname)
{
    const cfg_node *r = NULL;
    fz_conn c = { .fd = -1, .timeout_ms = x->timeout_ms };
    tup_bytes keep = { 0 };

    for (int i = 0; i < x->cfg->nnodes && !r; i++)
        if (x->cfg->nodes[i].role == SX_ROLE_ROUTER)
            r = &x->cfg->nodes[i];
    if (r == NULL) {
        fprintf(stderr, "sx-fuzzframe: the config has no router\n");
        exit(2);
    }
    c.url = r->url;
    {
        msg_CATALOG_req rq;
        msg_CATALOG_rep rep;
        memset(&rq, 0, sizeof rq);
        setup_call(&c, MSG_CATALOG, &rq, &rep, &keep);
        if (cat_decode(rep.catalog.p, rep.catalog.n, &x->cat) != 0) {
            fprintf(stderr, "sx-fuzzframe: set-up: the catalog does not decode\n");
            exit(2);
        }
        msg_free_rep(MSG_CATALOG, &rep);
    }
    x->rt = cat_table_by_name(x->cat, rname, strlen(rname));
    x->wt = cat_table_by_name(x->cat, wname, strlen(wname));
    if (!x->rt || !x->wt || x->rt == x->wt || x->rt->nindexes == 0) {
        fprintf(stderr, "sx-fuzzframe: set-up: need tables %s (with an index) and %s\n", rname,
                wname);
        exit(2);
    }
    x->rix = &x->rt->indexes[0];
    x->wix = x->wt->nindexes ? &x->wt->indexes[0] : NULL;
    x->protect = fz_xcalloc(x->cat->ntables, sizeof *x->protect);
    for (uint32_t i = 0; i < x->cat->ntables; i++) {
        const cat_table *t = &x->cat->tables[i];
        if (t == x->wt)
            continue;
        x->protect[x->nprotect++] = t->name;
        x->npix += (int)t->nindexes;
    }
    x->pix = fz_xcalloc((size_t)x->npix, sizeof *x->pix);
    x->npix = 0;
    for (uint32_t i = 0; i < x->cat->ntables; i++)
        for (uint32_t j = 0; &x->cat->tables[i] != x->wt && j < x->cat->tables[i].nindexes; j++)
            x->pix[x->npix++] = x->cat->tables[i].indexes[j].id;
    { /* some items, and a scan token */
        static const uint8_t nil = 0xc0;
        msg_SCAN_req rq = { .table = cbuf(rname), .where = { &nil, 1 }, .limit = 8 };
        msg_SCAN_rep rep;
        setup_call(&c, MSG_SCAN, &rq, &rep, &keep);
        for (uint32_t i = 0; i < rep.items.n && x->nitems < 8; i++)
            fz_add(&x->items[x->nitems++], rep.items.v[i].p, rep.items.v[i].n);
        fz_add(&x->stoken, rep.token.p, rep.token.n);
        msg_free_rep(MSG_SCAN, &rep);
        if (x->nitems == 0 || x->stoken.n == 0) {
            fprintf(stderr, "sx-fuzzframe: set-up: %s needs more than 8 items\n", rname);
            exit(2);
        }
    }
    { /* a query token */
        static const uint8_t nil = 0xc0, empty = 0x90;
        msg_QUERY_req rq = { .table = cbuf(rname),
                             .index = cbuf(x->rix->name),
                             .eq = { &empty, 1 },
                             .from = { &nil, 1 },
                             .to = { &nil, 1 },
                             .limit = 1 };
        msg_QUERY_rep rep;
        setup_call(&c, MSG_QUERY, &rq, &rep, &keep);
        fz_add(&x->qtoken, rep.token.p, rep.token.n);
        msg_free_rep(MSG_QUERY, &rep);
    }
    fz_conn_close(&c);
    x->wms = fz_xcalloc((size_t)x->cfg->nindex * (size_t)x->cfg->nstorage + 1, sizeof *x->wms);
    for (int i = 0; i < x->cfg->nindex; i++) {
        const cfg_part *cp = &x->cfg->index[i];
        fz_conn lc = {
            .url = x->cfg->nodes[cp->node].url, .link = true, .fd = -1, .timeout_ms = x->timeout_ms
        };
        msg_I_WATERMARKS_req rq = { .part = cp->id };
        msg_I_WATERMARKS_rep rep;

        setup_call(&lc, MSG_I_WATERMARKS, &rq, &rep, &keep);
        for (uint32_t j = 0;
             j < rep.sources.n && j < rep.wms.n && x->nwms < x->cfg->nindex * x->cfg->nstorage; j++)
            x->wms[x->nwms++] = (fz_wm){ cp->id, rep.sources.v[j], rep.wms.v[j] };
        msg_free_rep(MSG_I_WATERMARKS, &rep);
        fz_conn_close(&lc);
    }
    tup_bytes_free(&keep);
}

void fz_ctx_free(fz_ctx *x)
{
    for (int i = 0; i < x->nitems; i++)
        tup_bytes_free(&x->items[i]);
    tup_bytes_free(&x->qtoken);
    tup_bytes_free(&x->stoken);
    free(x->protect);
    free(x->pix);
    free(x->wms);
    cat_free(x->cat);
    cfg_free(x->cfg);
}
