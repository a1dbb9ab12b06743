/*
 * index_read_test.c — I_RANGE on an index partition (node/index/index_read.c):
 * the live entries of one index in [lo, hi) — hi empty: to the end of lo's
 * index, not into the next one — in key order, ascending or descending, at
 * most `limit` of them; a deleted entry (its tombstone) is left out; the
 * reply carries the partition's watermark of every source.
 * Links node_index. Argument: a scratch dir (default: a fresh mkdtemp under /tmp).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "config.h"
#include "index_part.h"
#include "ldb.h"
#include "sx_errors.h"
#include "tuple.h"

#define PART 101

static const char *config_text =
    "{\"cluster\": \"ixread\", \"hash_key\": \"000102030405060708090a0b0c0d0e0f\",\n"
    " \"token_key\": \"000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f\",\n"
    " \"catalog_node\": \"s1\",\n"
    " \"routers\": [{\"name\": \"r1\", \"url\": \"tcp://127.0.0.1:1\"}],\n"
    " \"storage\": [{\"name\": \"s1\", \"url\": \"tcp://127.0.0.1:2\", \"partitions\": [\n"
    "   {\"id\": 1, \"lo\": \"0000000000000000\", \"hi\": \"7fffffffffffffff\"},\n"
    "   {\"id\": 2, \"lo\": \"8000000000000000\", \"hi\": \"ffffffffffffffff\"}]}],\n"
    " \"index\": [{\"name\": \"i1\", \"url\": \"tcp://127.0.0.1:3\", \"partitions\": [\n"
    "   {\"id\": 101, \"lo\": null, \"hi\": null}]}]}\n";

/* One request: n records (kind, version, key name) of source `source`,
 * seqs[i] for an I_APPLY, none for a build. */
typedef struct req {
    msg_I_APPLY_req m;
    uint64_t seqs[4], kinds[4], versions[4], hashes[4];
    mp_span keys[4], projs[4];
    tuple_bytes kb[4];
} req;

static const uint8_t nil = 0xc0;

/* The index-local key of name: index id 7, tuple (name); a name starting
 * with 'x' is in index 8 instead. */
static void local_key(tuple_bytes *b, const char *name)
{
    b->n = 0;
    CHECK(bytes_append(b, name[0] == 'x' ? "\0\0\0\10" : "\0\0\0\7", 4) == 0 &&
          tup_encode_str(b, name, strlen(name)) == 0);
}

static void req_make(req *r, uint64_t source, uint32_t n, const uint64_t *seqs,
                     const uint64_t *kinds, const uint64_t *versions, const char *const *names,
                     uint64_t upto, uint64_t hw, uint64_t after)
{
    memset(r, 0, sizeof(*r));
    for (uint32_t i = 0; i < n; i++) {
        local_key(&r->kb[i], names[i]);
        if (seqs != NULL)
            r->seqs[i] = seqs[i];
        r->kinds[i] = kinds[i];
        r->versions[i] = versions[i];
        r->hashes[i] = 42;
        r->keys[i] = (mp_span){ r->kb[i].p, r->kb[i].n };
        r->projs[i] = (mp_span){ &nil, 1 };
    }
    r->m.part = PART;
    r->m.source = source;
    r->m.upto = upto;
    r->m.hw = hw;
    r->m.after = after;
    r->m.seqs = (msg_u64s){ .n = seqs != NULL ? n : 0, .v = r->seqs };
    r->m.kinds = (msg_u64s){ .n = n, .v = r->kinds };
    r->m.versions = (msg_u64s){ .n = n, .v = r->versions };
    r->m.hashes = (msg_u64s){ .n = n, .v = r->hashes };
    r->m.keys = (msg_spans){ .n = n, .v = r->keys };
    r->m.projs = (msg_spans){ .n = n, .v = r->projs };
}

static void req_free(req *r)
{
    for (int i = 0; i < 4; i++)
        bytes_free(&r->kb[i]);
}

/* Applies r (answered once synced); returns its error. */
static int apply(ix_part *p, req *r)
{
    uint64_t wm = 0, synced = 0;
    char err[300] = "";
    int rc = ix_part_apply(p, &r->m, false, &wm, &synced, err, sizeof(err));

    if (rc != 0)
        fprintf(stderr, "apply: %s: %s\n", sx_strerror(rc), err);
    req_free(r);
    return rc;
}

/* One I_RANGE over [lo, hi) (names; hi NULL: open; lo NULL: the start of
 * index 7); the names of the keys returned, space-separated, into got. */
static int range(ix_part *p, const char *lo, const char *hi, bool desc, uint64_t limit, char *got,
                 size_t gn, uint64_t *wm1)
{
    msg_I_RANGE_req q;
    msg_I_RANGE_rep r;
    tuple_bytes lk = { 0 }, hk = { 0 };
    mp_buf out;
    char msg[200] = "";
    size_t used = 0;
    int rc;

    if (lo != NULL)
        local_key(&lk, lo);
    else
        CHECK(bytes_append(&lk, "\0\0\0\7", 4) == 0);
    if (hi != NULL)
        local_key(&hk, hi);
    memset(&q, 0, sizeof(q));
    q.part = PART;
    q.lo = (mp_span){ lk.p, lk.n };
    q.hi = (mp_span){ hk.p, hk.n };
    q.desc = desc;
    q.limit = limit;
    mp_buf_init(&out);
    ix_part_range(p, &q, &out);
    memset(&r, 0, sizeof(r));
    rc = msg_decode_rep(MSG_I_RANGE, (const uint8_t *)out.sb.data, out.sb.size, &r, msg,
                        sizeof(msg));
    got[0] = '\0';
    if (rc == 0) {
        CHECK(r.hashes.n == r.keys.n && r.versions.n == r.keys.n && r.projs.n == r.keys.n);
        for (uint32_t i = 0; i < r.keys.n; i++) {
            mp_buf name;
            mp_cur c;
            mp_span s = { NULL, 0 };

            /* the key is index id | tup(name): decode the name back */
            mp_buf_init(&name);
            CHECK(r.keys.v[i].n > 4 &&
                  tup_decode_to_mp(r.keys.v[i].p + 4, r.keys.v[i].n - 4, &name) > 0);
            c = mp_cur_make((const uint8_t *)name.sb.data, name.sb.size);
            CHECK(mp_read_str(&c, &s) == 0);
            used += (size_t)snprintf(got + used, used < gn ? gn - used : 0, "%s%.*s", i ? " " : "",
                                     (int)s.n, s.p ? (const char *)s.p : "");
            mp_buf_free(&name);
        }
        *wm1 = 0;
        for (uint32_t i = 0; i < r.sources.n && i < r.wms.n; i++)
            if (r.sources.v[i] == 1)
                *wm1 = r.wms.v[i];
    } else {
        fprintf(stderr, "I_RANGE: %s: %s\n", sx_strerror(rc), msg);
    }
    msg_free_rep(MSG_I_RANGE, &r);
    mp_buf_free(&out);
    bytes_free(&lk);
    bytes_free(&hk);
    return rc;
}

/* Checks one range read returns exactly want. */
static void expect(ix_part *p, const char *lo, const char *hi, bool desc, uint64_t limit,
                   const char *want)
{
    char got[256];
    uint64_t wm1 = 0;

    CHECK(range(p, lo, hi, desc, limit, got, sizeof(got), &wm1) == 0);
    CHECKF(strcmp(got, want) == 0, "[%s, %s) %s limit %llu: got '%s', want '%s'", lo ? lo : "start",
           hi ? hi : "end", desc ? "desc" : "asc", (unsigned long long)limit, got, want);
    CHECK(wm1 == 7);
}

static bool run(const char *dir)
{
    static const uint64_t PUT = OUT_PUT, DEL = OUT_DEL;
    const uint64_t puts[3] = { PUT, PUT, PUT };
    char path[4200], err[300];
    cfg_cluster *cfg = NULL;
    ix_part *p = NULL;
    req r;
    FILE *f;

    if (snprintf(path, sizeof(path), "%s/cluster.json", dir) >= (int)sizeof(path) ||
        (f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "index_read_test: scratch dir unusable: %s\n", dir);
        return false;
    }
    CHECK(fputs(config_text, f) >= 0);
    CHECK(fclose(f) == 0);
    if (cfg_load(path, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "index_read_test: config: %s\n", err);
        return false;
    }
    CHECK(ix_part_open(cfg, &cfg->index[0], dir, &p) == 0);
    if (p == NULL) {
        cfg_free(cfg);
        return false;
    }

    /* index 7: k1 .. k5, then k3 deleted; index 8: x1 */
    req_make(&r, 1, 3, (const uint64_t[]){ 1, 2, 3 }, puts, (const uint64_t[]){ 10, 20, 30 },
             (const char *const[]){ "k1", "k2", "k3" }, 3, 0, 0);
    CHECK(apply(p, &r) == 0);
    req_make(&r, 1, 3, (const uint64_t[]){ 4, 5, 6 }, puts, (const uint64_t[]){ 40, 50, 60 },
             (const char *const[]){ "k4", "k5", "x1" }, 6, 0, 3);
    CHECK(apply(p, &r) == 0);
    req_make(&r, 1, 1, (const uint64_t[]){ 7 }, &DEL, (const uint64_t[]){ 70 },
             (const char *const[]){ "k3" }, 7, 0, 6);
    CHECK(apply(p, &r) == 0);

    expect(p, NULL, NULL, false, 0, "k1 k2 k4 k5");
    expect(p, NULL, NULL, true, 0, "k5 k4 k2 k1");
    expect(p, NULL, NULL, false, 2, "k1 k2");
    expect(p, NULL, NULL, true, 2, "k5 k4");
    expect(p, "k2", "k5", false, 0, "k2 k4");
    expect(p, "k2", "k5", true, 0, "k4 k2");
    expect(p, "k3", NULL, true, 1, "k5");

    CHECK(ix_part_close(p));
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
    char tmpl[] = "/tmp/sx-ixread-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpl);
    bool ok;

    if (dir == NULL) {
        perror("index_read_test: mkdtemp");
        return 1;
    }
    ok = run(dir);
    if (argc <= 1)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return ok ? CHECK_DONE() : 1;
}
