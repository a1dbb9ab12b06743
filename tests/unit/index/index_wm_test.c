/*
 * index_wm_test.c — an index partition's watermark per source moves only
 * contiguously (node/index/index_apply.c): an I_APPLY whose `after` is past
 * the watermark, even by one (after = wm + 1: a record the partition never
 * got, lost before its sync), is refused whole (SX_EUNAVAIL, "out of order")
 * and applies and moves nothing; one at the watermark applies; a late
 * I_APPLY with an older upto (a duplicate of a round already applied) leaves
 * the watermark where it is; records at or below the watermark are dropped
 * as redeliveries even when the version rule would take them (a key never
 * stored, a newer version), also when their request's after is below them.
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
    "{\"cluster\": \"ixwm\", \"hash_key\": \"000102030405060708090a0b0c0d0e0f\",\n"
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

/* The index-local key of name: index id 7, tuple (name). */
static void local_key(tuple_bytes *b, const char *name)
{
    b->n = 0;
    CHECK(bytes_append(b, "\0\0\0\7", 4) == 0 && tup_encode_str(b, name, strlen(name)) == 0);
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

/* The stored state of key name: 0 absent, 1 live, 2 tombstone; *version. */
static int stored(ix_part *p, const char *name, uint64_t *version)
{
    tuple_bytes k = { 0 };
    uint8_t ek[64];
    uint8_t *v = NULL;
    size_t vn = 0, en;
    ix_entry e;
    int rc, st = 0;

    local_key(&k, name);
    en = ix_ekey(ek, k.p, k.n);
    rc = ldb_get(p->db, ek, en, &v, &vn);
    if (rc == 0) {
        CHECK(ix_entry_decode(v, vn, &e) == 0);
        st = e.live ? 1 : 2;
        if (version)
            *version = e.version;
    } else {
        CHECK(rc == SX_ENOTFOUND);
    }
    free(v);
    bytes_free(&k);
    return st;
}

/* Applies r (answered once synced): returns its error and, in *wm, the
 * watermark its answer reports. */
static int apply_wm(ix_part *p, req *r, uint64_t *wm)
{
    uint64_t synced = 0;
    char err[300] = "";
    int rc = ix_part_apply(p, &r->m, false, wm, &synced, err, sizeof(err));

    if (rc == SX_EUNAVAIL)
        CHECK(strstr(err, "out of order") != NULL);
    req_free(r);
    return rc;
}

/* Source 1's published watermark. */
static uint64_t published(ix_part *p)
{
    uint64_t wm[4] = { 0 }, hw[4] = { 0 };
    int s = ix_part_src_index(p, 1);

    CHECK(s >= 0 && s < 4 && p->nsrc <= 4);
    ix_part_state(p, NULL, NULL, wm, hw);
    return s >= 0 && s < 4 ? wm[s] : 0;
}

static bool run(const char *dir)
{
    static const uint64_t PUT = OUT_PUT;
    const uint64_t puts[3] = { PUT, PUT, PUT };
    char path[4200], err[300];
    cfg_cluster *cfg = NULL;
    ix_part *p = NULL;
    uint64_t entries = 0, wm = 0, ver = 0;
    req r;
    FILE *f;

    if (snprintf(path, sizeof(path), "%s/cluster.json", dir) >= (int)sizeof(path) ||
        (f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "index_wm_test: scratch dir unusable: %s\n", dir);
        return false;
    }
    CHECK(fputs(config_text, f) >= 0);
    CHECK(fclose(f) == 0);
    if (cfg_load(path, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "index_wm_test: config: %s\n", err);
        return false;
    }
    CHECK(ix_part_open(cfg, &cfg->index[0], dir, &p) == 0);
    if (p == NULL) {
        cfg_free(cfg);
        return false;
    }

    /* seqs 1, 2 (keys a1, a2 at versions 10, 20): watermark 2 */
    req_make(&r, 1, 2, (const uint64_t[]){ 1, 2 }, puts, (const uint64_t[]){ 10, 20 },
             (const char *const[]){ "a1", "a2" }, 2, 0, 0);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 2);
    CHECK(published(p) == 2);

    /* after 3: seq 3 never arrived; refused, nothing applied or moved */
    req_make(&r, 1, 1, (const uint64_t[]){ 4 }, puts, (const uint64_t[]){ 40 },
             (const char *const[]){ "a4" }, 4, 0, 3);
    CHECK(apply_wm(p, &r, &wm) == SX_EUNAVAIL);
    CHECK(published(p) == 2);
    CHECK(stored(p, "a4", NULL) == 0);
    ix_part_state(p, &entries, NULL, NULL, NULL);
    CHECK(entries == 2);

    /* after 2 (at the watermark): seqs 3, 4 apply */
    req_make(&r, 1, 2, (const uint64_t[]){ 3, 4 }, puts, (const uint64_t[]){ 30, 40 },
             (const char *const[]){ "a3", "a4" }, 4, 0, 2);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 4);
    CHECK(published(p) == 4);
    CHECK(stored(p, "a3", &ver) == 1 && ver == 30);

    /* a late copy of the round of seq 3 (upto 3): the watermark stays 4 */
    req_make(&r, 1, 1, (const uint64_t[]){ 3 }, puts, (const uint64_t[]){ 30 },
             (const char *const[]){ "a3" }, 3, 0, 2);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 4);
    CHECK(published(p) == 4);
    if (published(p) != 4)
        fprintf(stderr, "a late I_APPLY with upto 3 moved the watermark from 4 to %llu\n",
                (unsigned long long)published(p));

    /* records at or below the watermark are redeliveries, whatever their
     * version or key: seq 2 with a key never stored, seq 3 with a newer
     * version of a3; after 1 is below both */
    req_make(&r, 1, 2, (const uint64_t[]){ 2, 3 }, puts, (const uint64_t[]){ 99, 98 },
             (const char *const[]){ "z2", "a3" }, 4, 0, 1);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 4);
    CHECK(stored(p, "z2", NULL) == 0);
    CHECK(stored(p, "a3", &ver) == 1 && ver == 30);
    ix_part_state(p, &entries, NULL, NULL, NULL);
    CHECK(entries == 4);

    /* and the stream goes on after 4 */
    req_make(&r, 1, 1, (const uint64_t[]){ 5 }, puts, (const uint64_t[]){ 50 },
             (const char *const[]){ "a5" }, 5, 0, 4);
    CHECK(apply_wm(p, &r, &wm) == 0 && wm == 5);
    CHECK(published(p) == 5 && stored(p, "a5", NULL) == 1);

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
    char tmpl[] = "/tmp/sx-ixwm-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpl);
    bool ok;

    if (dir == NULL) {
        perror("index_wm_test: mkdtemp");
        return 1;
    }
    ok = run(dir);
    if (argc <= 1)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return ok ? CHECK_DONE() : 1;
}
