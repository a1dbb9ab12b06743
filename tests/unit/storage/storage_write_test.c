/*
 * storage_write_test.c — a fact partition's write path
 * (node/storage/storage_write.c) through S_WRITE, with its catalog from a
 * local catalog partition: table t(id) with index by_g on g (ready) and
 * by_h on h (still building). Checks the versions and the outbox records a
 * write leaves for the index partitions:
 *   - versions are distinct within a request and increase across requests,
 *     also when the clock is behind the partition's version high-water (a
 *     clock stepped back, or two writes in one microsecond);
 *   - a put emits one put record per index, at the write's version;
 *   - a rewrite that moves an item to another key of an index emits a delete
 *     of the old key and a put of the new one, both at the write's version;
 *   - a rewrite that leaves an index's entry unchanged emits nothing for a
 *     ready index, and a put for an index still being built (the backfill
 *     leaves an item written during the build to the write);
 *   - deleting an absent key answers version 0, not found, and emits nothing.
 * Links node_storage. Argument: a scratch dir (default: a fresh mkdtemp under /tmp).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "check.h"
#include "catalog_part.h"
#include "config.h"
#include "hash.h"
#include "outbox.h"
#include "storage_cat.h"
#include "storage_part.h"
#include "storage_store.h"
#include "sx_errors.h"
#include "tuple.h"

#define DEST 101
#define MAXREC 64

static const char *config_text =
    "{\"cluster\": \"stwrite\", \"hash_key\": \"000102030405060708090a0b0c0d0e0f\",\n"
    " \"token_key\": \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\",\n"
    " \"catalog_node\": \"s1\",\n"
    " \"routers\": [{\"name\": \"r1\", \"url\": \"tcp://127.0.0.1:1\"}],\n"
    " \"storage\": [{\"name\": \"s1\", \"url\": \"tcp://127.0.0.1:2\", \"partitions\": [\n"
    "   {\"id\": 1, \"lo\": \"0000000000000000\", \"hi\": \"ffffffffffffffff\"}]}],\n"
    " \"index\": [{\"name\": \"i1\", \"url\": \"tcp://127.0.0.1:3\", \"partitions\": [\n"
    "   {\"id\": 101, \"lo\": null, \"hi\": null}]}]}\n";

/* An outbox record, copied out. */
typedef struct orec {
    uint64_t seq, kind, version;
    uint8_t key[64];
    size_t kn;
} orec;

typedef struct outbox {
    orec r[MAXREC];
    int n;
    bool bad;
} outbox;

/* ---- the catalog ---- */

/* Sends one catalog request (type t, req) to c; returns its error and the
 * version in *version. */
static int cat_call(catp *c, msg_type t, const void *req, uint64_t *version)
{
    mp_buf b, out;
    char msg[256] = "";
    int rc;

    mp_buf_init(&b);
    mp_buf_init(&out);
    rc = msg_encode_req(t, req, &b);
    if (rc == 0) {
        catp_handle(c, t, (const uint8_t *)b.sb.data, b.sb.size, &out);
        if (t == MSG_CAT_UPDATE) {
            msg_CAT_UPDATE_rep r;
            memset(&r, 0, sizeof(r));
            rc = msg_decode_rep(t, (const uint8_t *)out.sb.data, out.sb.size, &r, msg, sizeof(msg));
            *version = r.version;
            msg_free_rep(t, &r);
        } else {
            msg_CAT_BACKFILLED_rep r;
            memset(&r, 0, sizeof(r));
            rc = msg_decode_rep(t, (const uint8_t *)out.sb.data, out.sb.size, &r, msg, sizeof(msg));
            *version = r.version;
            msg_free_rep(t, &r);
        }
    }
    if (rc != 0)
        fprintf(stderr, "catalog request %s: %s: %s\n", msg_name(t), sx_strerror(rc), msg);
    mp_buf_free(&b);
    mp_buf_free(&out);
    return rc;
}

static mp_span S(const char *s)
{
    return (mp_span){ (const uint8_t *)s, strlen(s) };
}

/* t(id); by_g on g, ready; by_h on h, building. Sets the ids and the
 * catalog version. */
static int make_catalog(catp *c, uint32_t *g_id, uint32_t *h_id, uint64_t *version)
{
    msg_CAT_UPDATE_req u;
    msg_CAT_BACKFILLED_req b;
    mp_span ga = S("g"), ha = S("h");
    cat_catalog *cat;
    int rc;

    memset(&u, 0, sizeof(u));
    u.op = CATOP_CREATE_TABLE;
    u.table = S("t");
    u.pk = S("id");
    if ((rc = cat_call(c, MSG_CAT_UPDATE, &u, version)) != 0)
        return rc;
    u.op = CATOP_CREATE_INDEX;
    u.pk = (mp_span){ NULL, 0 };
    u.index = S("by_g");
    u.attrs = (msg_spans){ 1, &ga };
    if ((rc = cat_call(c, MSG_CAT_UPDATE, &u, version)) != 0)
        return rc;
    u.index = S("by_h");
    u.attrs = (msg_spans){ 1, &ha };
    if ((rc = cat_call(c, MSG_CAT_UPDATE, &u, version)) != 0)
        return rc;
    cat = catp_snapshot(c);
    if (cat == NULL)
        return SX_ENOMEM;
    const cat_table *t = cat_table_by_name(cat, "t", 1);
    const cat_index *g = t ? cat_index_by_name(t, "by_g", 4) : NULL;
    const cat_index *h = t ? cat_index_by_name(t, "by_h", 4) : NULL;
    *g_id = g ? g->id : 0;
    *h_id = h ? h->id : 0;
    cat_free(cat);
    if (*g_id == 0 || *h_id == 0)
        return SX_EINTERNAL;
    memset(&b, 0, sizeof(b));
    b.index_id = *g_id;
    b.part = 1;
    return cat_call(c, MSG_CAT_BACKFILLED, &b, version);
}

/* ---- writes ---- */

/* An item {"id": id, "g": g, "h": h, "x": x}. */
static void item(mp_buf *b, int64_t id, const char *g, const char *h, int64_t x)
{
    mp_buf_init(b);
    mp_put_map(b, 4);
    mp_put_cstr(b, "id");
    mp_put_i64(b, id);
    mp_put_cstr(b, "g");
    mp_put_cstr(b, g);
    mp_put_cstr(b, "h");
    mp_put_cstr(b, h);
    mp_put_cstr(b, "x");
    mp_put_i64(b, x);
}

/* One S_WRITE of n items (dels[i]: a delete of that item's key); the
 * answered versions and found flags into vers/found. Returns its error. */
static int s_write(st_part *p, uint64_t catver, mp_buf *items, const uint64_t *dels, uint32_t n,
                   uint64_t *vers, uint64_t *found)
{
    msg_S_WRITE_req q;
    msg_S_WRITE_rep r;
    mp_span objs[8];
    uint64_t nodel[8] = { 0 };
    mp_buf out;
    char msg[256] = "";
    int rc;

    for (uint32_t i = 0; i < n; i++)
        objs[i] = (mp_span){ (const uint8_t *)items[i].sb.data, items[i].sb.size };
    memset(&q, 0, sizeof(q));
    q.part = 1;
    q.catver = catver;
    q.table_id = 1;
    q.objs = (msg_spans){ n, objs };
    q.dels = (msg_u64s){ n, (uint64_t *)(dels != NULL ? dels : nodel) };
    mp_buf_init(&out);
    st_write(p, &q, &out);
    memset(&r, 0, sizeof(r));
    rc = msg_decode_rep(MSG_S_WRITE, (const uint8_t *)out.sb.data, out.sb.size, &r, msg,
                        sizeof(msg));
    if (rc == 0) {
        CHECK(r.versions.n == n && r.found.n == n);
        for (uint32_t i = 0; i < n && i < r.versions.n && i < r.found.n; i++) {
            vers[i] = r.versions.v[i];
            found[i] = r.found.v[i];
        }
    } else {
        fprintf(stderr, "S_WRITE: %s: %s\n", sx_strerror(rc), msg);
    }
    msg_free_rep(MSG_S_WRITE, &r);
    mp_buf_free(&out);
    for (uint32_t i = 0; i < n; i++)
        mp_buf_free(&items[i]);
    return rc;
}

/* ---- the outbox ---- */

static int outbox_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    outbox *o = arg;
    ob_reader r;
    ob_rec rec;
    uint32_t cnt;

    if (kn != 17 || be_get64(k + 9) == UINT64_MAX)
        return 0;
    if (ob_reader_open(&r, v, vn, be_get64(k + 9), &cnt) != 0) {
        o->bad = true;
        return 0;
    }
    while (ob_reader_next(&r, &rec) == 0) {
        if (o->n >= MAXREC || rec.key.n > sizeof(o->r[0].key)) {
            o->bad = true;
            return 1;
        }
        orec *x = &o->r[o->n++];
        x->seq = rec.seq;
        x->kind = rec.kind;
        x->version = rec.version;
        memcpy(x->key, rec.key.p, rec.key.n);
        x->kn = rec.key.n;
    }
    return 0;
}

/* Every record in the outbox of destination DEST. */
static void read_outbox(st_part *p, outbox *o)
{
    uint8_t lo[17], hi[17];

    memset(o, 0, sizeof(*o));
    lo[0] = hi[0] = ST_OUT_PREFIX;
    be_put64(lo + 1, DEST);
    be_put64(lo + 9, 0);
    be_put64(hi + 1, DEST);
    be_put64(hi + 9, UINT64_MAX);
    CHECK(st_kscan(p, NULL, lo, sizeof(lo), hi, sizeof(hi), false, outbox_visit, o) >= 0);
    CHECK(!o->bad);
}

/* The index-local key of index ix for value val of id. */
static void ikey(tuple_bytes *b, uint32_t ix, const char *val, int64_t id)
{
    uint8_t be[4];

    b->n = 0;
    be_put32(be, ix);
    CHECK(bytes_append(b, be, 4) == 0 && tup_encode_str(b, val, strlen(val)) == 0 &&
          tup_encode_int(b, id) == 0);
}

/* How many records of version v the outbox holds, and whether one of them
 * is (kind, key of ix/val/id). */
static int records_of(const outbox *o, uint64_t v)
{
    int n = 0;

    for (int i = 0; i < o->n; i++)
        n += o->r[i].version == v;
    return n;
}

static bool has_record(const outbox *o, uint64_t v, uint64_t kind, uint32_t ix, const char *val,
                       int64_t id)
{
    tuple_bytes k = { 0 };
    bool found = false;

    ikey(&k, ix, val, id);
    for (int i = 0; i < o->n && !found; i++)
        found = o->r[i].version == v && o->r[i].kind == kind && o->r[i].kn == k.n &&
                memcmp(o->r[i].key, k.p, k.n) == 0;
    bytes_free(&k);
    return found;
}

static bool run(const char *dir)
{
    char path[4200], err[300];
    cfg_cluster *cfg = NULL;
    catp *cp = NULL;
    st_cat *cc = NULL;
    st_store *store = NULL;
    st_part *p = NULL;
    uint32_t gid = 0, hid = 0;
    uint64_t catver = 0, vers[8], found[8], preset;
    mp_buf it[8];
    outbox ob;
    FILE *f;

    if (snprintf(path, sizeof(path), "%s/cluster.json", dir) >= (int)sizeof(path) ||
        (f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "storage_write_test: scratch dir unusable: %s\n", dir);
        return false;
    }
    CHECK(fputs(config_text, f) >= 0);
    CHECK(fclose(f) == 0);
    if (cfg_load(path, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "storage_write_test: config: %s\n", err);
        return false;
    }
    snprintf(path, sizeof(path), "%s/catalog", dir);
    CHECK(mkdir(path, 0700) == 0);
    CHECK(catp_open(path, cfg, &cp) == 0);
    CHECK(cp != NULL && make_catalog(cp, &gid, &hid, &catver) == 0);
    CHECK(cp != NULL && st_cat_new(cfg, cp, &cc) == 0);
    snprintf(path, sizeof(path), "%s/store", dir);
    CHECK(cc != NULL && st_store_open(path, &store) == 0);
    CHECK(store != NULL && st_part_open(cfg, &cfg->storage[0], cc, store, &p) == 0);
    CHECK(p != NULL && st_store_start(store, &p, 1) == 0);
    if (p == NULL || gid == 0) {
        st_part_close(p);
        st_store_close(store);
        st_cat_free(cc);
        catp_close(cp);
        cfg_free(cfg);
        return false;
    }

    /* the clock is a minute behind the partition's version high-water */
    pthread_mutex_lock(&p->wlock);
    preset = st_now_us() + 60ull * 1000 * 1000;
    p->w_hw = preset;
    pthread_mutex_unlock(&p->wlock);

    /* three puts in one request, one in the next: versions strictly
     * increase past the high-water; one put record per index each */
    item(&it[0], 1, "a", "p", 1);
    item(&it[1], 2, "a", "p", 2);
    item(&it[2], 3, "b", "q", 3);
    CHECK(s_write(p, catver, it, NULL, 3, vers, found) == 0);
    item(&it[0], 4, "b", "q", 4);
    CHECK(s_write(p, catver, it, NULL, 1, vers + 3, found + 3) == 0);
    /* (one request's operations are applied in key order, not input
     * order: its versions are distinct, not ascending by position) */
    for (int i = 0; i < 4; i++) {
        CHECK(found[i] == 0);
        CHECK(vers[i] > preset);
    }
    CHECK(vers[0] != vers[1] && vers[0] != vers[2] && vers[1] != vers[2]);
    CHECK(vers[3] > vers[0] && vers[3] > vers[1] && vers[3] > vers[2]);
    if (!(vers[0] > preset && vers[1] > preset && vers[2] > preset && vers[0] != vers[1] &&
          vers[0] != vers[2] && vers[1] != vers[2] && vers[3] > vers[0] && vers[3] > vers[1] &&
          vers[3] > vers[2]))
        fprintf(stderr, "versions %llu %llu %llu, then %llu, after high-water %llu\n",
                (unsigned long long)vers[0], (unsigned long long)vers[1],
                (unsigned long long)vers[2], (unsigned long long)vers[3],
                (unsigned long long)preset);
    read_outbox(p, &ob);
    CHECK(ob.n == 8);
    CHECK(has_record(&ob, vers[0], OUT_PUT, gid, "a", 1) &&
          has_record(&ob, vers[0], OUT_PUT, hid, "p", 1));
    CHECK(has_record(&ob, vers[2], OUT_PUT, gid, "b", 3) &&
          has_record(&ob, vers[2], OUT_PUT, hid, "q", 3));

    /* id 1 moves from g "a" to g "c" (h unchanged, x changed): by_g gets a
     * delete of the old key and a put of the new one; by_h, building, a put
     * of its unchanged entry */
    item(&it[0], 1, "c", "p", 10);
    CHECK(s_write(p, catver, it, NULL, 1, vers + 4, found + 4) == 0);
    CHECK(found[4] == 1 && vers[4] > vers[3]);
    read_outbox(p, &ob);
    CHECK(records_of(&ob, vers[4]) == 3);
    CHECK(has_record(&ob, vers[4], OUT_DEL, gid, "a", 1));
    CHECK(has_record(&ob, vers[4], OUT_PUT, gid, "c", 1));
    CHECK(has_record(&ob, vers[4], OUT_PUT, hid, "p", 1));
    if (!has_record(&ob, vers[4], OUT_DEL, gid, "a", 1))
        fprintf(stderr, "a move left no delete of the old entry\n");
    if (!has_record(&ob, vers[4], OUT_PUT, hid, "p", 1))
        fprintf(stderr, "an unchanged entry of a building index got no record\n");

    /* id 2 rewritten with only x changed: nothing for by_g (ready,
     * keys only: its entry is unchanged), a put for by_h (building) */
    item(&it[0], 2, "a", "p", 20);
    CHECK(s_write(p, catver, it, NULL, 1, vers + 5, found + 5) == 0);
    read_outbox(p, &ob);
    CHECK(records_of(&ob, vers[5]) == 1);
    CHECK(has_record(&ob, vers[5], OUT_PUT, hid, "p", 2));

    /* delete id 3, then delete it again (absent now) */
    {
        uint64_t del[1] = { 1 };
        item(&it[0], 3, "b", "q", 3);
        CHECK(s_write(p, catver, it, del, 1, vers + 6, found + 6) == 0);
        CHECK(found[6] == 1 && vers[6] > vers[5]);
        item(&it[0], 3, "b", "q", 3);
        CHECK(s_write(p, catver, it, del, 1, vers + 7, found + 7) == 0);
        CHECK(found[7] == 0 && vers[7] == 0);
        read_outbox(p, &ob);
        CHECK(records_of(&ob, vers[6]) == 2);
        CHECK(has_record(&ob, vers[6], OUT_DEL, gid, "b", 3) &&
              has_record(&ob, vers[6], OUT_DEL, hid, "q", 3));
        CHECK(ob.n == 8 + 3 + 1 + 2);
    }

    st_store_stop(store);
    st_part_close(p);
    st_store_close(store);
    st_cat_free(cc);
    catp_close(cp);
    cfg_free(cfg);
    return true;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(path);
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/sx-stwrite-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpl);
    bool ok;

    if (dir == NULL) {
        perror("storage_write_test: mkdtemp");
        return 1;
    }
    CHECK(proto_init() == 0);
    ok = run(dir);
    if (argc <= 1)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return ok ? CHECK_DONE() : 1;
}
