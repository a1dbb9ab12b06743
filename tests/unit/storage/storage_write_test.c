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
 * Links node_storage and the storage tests' fixture. Argument: a scratch dir
 * (default: a fresh one under $TMPDIR or /tmp, removed afterwards).
 */
#define CHECK_TALLY_SHARED /* fixture.c checks too */
#define CHECK_TALLY_DEFINE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "fixture.h"
#include "hash.h"
#include "outbox.h"
#include "scratch.h"
#include "sx_errors.h"
#include "tuple.h"

#define DEST 101
#define MAXREC 64

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

/* t(id); by_g on g, ready; by_h on h, building. Sets the ids and the
 * catalog version. */
static int make_catalog(catp *c, uint32_t *g_id, uint32_t *h_id, uint64_t *version)
{
    cat_catalog *cat;
    int rc;

    if ((rc = stf_create_t(c, version)) != 0 ||
        (rc = stf_create_index(c, "by_g", "g", version)) != 0 ||
        (rc = stf_create_index(c, "by_h", "h", version)) != 0)
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
    return stf_backfilled(c, *g_id, version);
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
    memset(o, 0, sizeof(*o));
    CHECK(stf_outbox_scan(p, DEST, outbox_visit, o) >= 0);
    CHECK(!o->bad);
}

/* The index-local key of index ix for value val of id. */
static void ikey(tup_bytes *b, uint32_t ix, const char *val, int64_t id)
{
    uint8_t be[4];

    b->n = 0;
    be_put32(be, ix);
    CHECK(tup_bytes_append(b, be, 4) == 0 && tup_encode_str(b, val, strlen(val)) == 0 &&
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
    tup_bytes k = { 0 };
    bool found = false;

    ikey(&k, ix, val, id);
    for (int i = 0; i < o->n && !found; i++)
        found = o->r[i].version == v && o->r[i].kind == kind && o->r[i].kn == k.n &&
                memcmp(o->r[i].key, k.p, k.n) == 0;
    tup_bytes_free(&k);
    return found;
}

static bool run(const char *dir)
{
    stf f;
    st_part *p;
    uint32_t gid = 0, hid = 0;
    uint64_t catver = 0, vers[8], found[8], preset;
    mp_buf it[8];
    outbox ob;

    if (!stf_open(&f, dir, "stwrite", false))
        return false;
    CHECK(f.cp != NULL && make_catalog(f.cp, &gid, &hid, &catver) == 0);
    stf_start(&f);
    p = f.p;
    if (p == NULL || gid == 0) {
        stf_close(&f);
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
    CHECK(stf_write(p, catver, it, NULL, 3, vers, found) == 0);
    item(&it[0], 4, "b", "q", 4);
    CHECK(stf_write(p, catver, it, NULL, 1, vers + 3, found + 3) == 0);
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
    CHECK(stf_write(p, catver, it, NULL, 1, vers + 4, found + 4) == 0);
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
    CHECK(stf_write(p, catver, it, NULL, 1, vers + 5, found + 5) == 0);
    read_outbox(p, &ob);
    CHECK(records_of(&ob, vers[5]) == 1);
    CHECK(has_record(&ob, vers[5], OUT_PUT, hid, "p", 2));

    /* delete id 3, then delete it again (absent now) */
    {
        uint64_t del[1] = { 1 };
        item(&it[0], 3, "b", "q", 3);
        CHECK(stf_write(p, catver, it, del, 1, vers + 6, found + 6) == 0);
        CHECK(found[6] == 1 && vers[6] > vers[5]);
        item(&it[0], 3, "b", "q", 3);
        CHECK(stf_write(p, catver, it, del, 1, vers + 7, found + 7) == 0);
        CHECK(found[7] == 0 && vers[7] == 0);
        read_outbox(p, &ob);
        CHECK(records_of(&ob, vers[6]) == 2);
        CHECK(has_record(&ob, vers[6], OUT_DEL, gid, "b", 3) &&
              has_record(&ob, vers[6], OUT_DEL, hid, "q", 3));
        CHECK(ob.n == 8 + 3 + 1 + 2);
    }

    stf_close(&f);
    return true;
}

int main(int argc, char **argv)
{
    CHECK(proto_init() == 0);
    return scratch_run(argc, argv, "sx-stwrite", run) ? CHECK_DONE() : 1;
}
