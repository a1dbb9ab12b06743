/*
 * index_gc_test.c — a deleted entry's tombstone through an index partition's
 * apply path and its collection (node/index/index_apply.c, index_gc.c), with
 * two storage partitions as sources:
 *   - the tombstone blocks an older put that arrives after it (a backfill's
 *     I_BUILD record read before the delete): the entry stays deleted;
 *   - it is collected only once EVERY source has reported a version
 *     high-water (hw_seen) past it, not when one has: then the entry and its
 *     tombstone are gone and the counters say so;
 *   - once it is collected, the put it deleted, shipped again by its source
 *     (a resend from before its watermark), is a redelivery and is dropped:
 *     the version rule can no longer stop it, the watermark must.
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
    "{\"cluster\": \"ixgc\", \"hash_key\": \"000102030405060708090a0b0c0d0e0f\",\n"
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

/* Applies r (synchronously: answered once synced); returns its error. */
static int apply(ix_part *p, req *r, bool build)
{
    uint64_t wm = 0, synced = 0;
    char err[300] = "";
    int rc = ix_part_apply(p, &r->m, build, &wm, &synced, err, sizeof(err));

    if (rc != 0)
        fprintf(stderr, "apply (source %llu, build %d): %s: %s\n", (unsigned long long)r->m.source,
                build, sx_strerror(rc), err);
    req_free(r);
    return rc;
}

/* A heartbeat of source: no record, its watermark at upto, hw_seen hw. */
static int heartbeat(ix_part *p, uint64_t source, uint64_t upto, uint64_t hw)
{
    req r;

    req_make(&r, source, 0, NULL, NULL, NULL, NULL, upto, hw, upto);
    return apply(p, &r, false);
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

static void counts(ix_part *p, uint64_t *entries, uint64_t *tombs)
{
    ix_part_state(p, entries, tombs, NULL, NULL);
}

static bool run(const char *dir)
{
    static const uint64_t PUT = OUT_PUT, DEL = OUT_DEL;
    const char *k1[] = { "k1" }, *k1k2[] = { "k1", "k2" };
    char path[4200], err[300];
    cfg_cluster *cfg = NULL;
    ix_part *p = NULL;
    uint64_t entries = 0, tombs = 0, ver = 0, collected = 0;
    req r;
    FILE *f;

    if (snprintf(path, sizeof(path), "%s/cluster.json", dir) >= (int)sizeof(path) ||
        (f = fopen(path, "w")) == NULL) {
        fprintf(stderr, "index_gc_test: scratch dir unusable: %s\n", dir);
        return false;
    }
    CHECK(fputs(config_text, f) >= 0);
    CHECK(fclose(f) == 0);
    if (cfg_load(path, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "index_gc_test: config: %s\n", err);
        return false;
    }
    CHECK(ix_part_open(cfg, &cfg->index[0], dir, &p) == 0);
    if (p == NULL) {
        cfg_free(cfg);
        return false;
    }

    /* source 1: put k1 at version 100 and k2 at 110 (seqs 1, 2), then
     * delete k1 at version 200 (seq 3) */
    req_make(&r, 1, 2, (const uint64_t[]){ 1, 2 }, (const uint64_t[]){ PUT, PUT },
             (const uint64_t[]){ 100, 110 }, k1k2, 2, 0, 0);
    CHECK(apply(p, &r, false) == 0);
    req_make(&r, 1, 1, (const uint64_t[]){ 3 }, &DEL, (const uint64_t[]){ 200 }, k1, 3, 0, 2);
    CHECK(apply(p, &r, false) == 0);
    CHECK(stored(p, "k1", &ver) == 2 && ver == 200);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 1);

    /* a backfill record of k1 read before the delete (version 100) comes
     * after it: the tombstone blocks it */
    req_make(&r, 1, 1, NULL, &PUT, (const uint64_t[]){ 100 }, k1, 3, 0, 0);
    CHECK(apply(p, &r, true) == 0);
    CHECK(stored(p, "k1", &ver) == 2 && ver == 200);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 1);

    /* collection: source 1 has seen versions up to 500, source 2 only up
     * to 150: a put of k1 older than 200 could still come: kept */
    CHECK(heartbeat(p, 1, 3, 500) == 0);
    CHECK(heartbeat(p, 2, 0, 150) == 0);
    CHECK(ix_part_gc(p, 10, &collected) == 0);
    CHECK(collected == 0);
    CHECK(stored(p, "k1", &ver) == 2 && ver == 200);
    counts(p, &entries, &tombs);
    CHECK(tombs == 1);
    if (collected != 0)
        fprintf(stderr, "a tombstone at 200 was collected below source 2's hw_seen 150\n");

    /* every source past 200: collected */
    CHECK(heartbeat(p, 2, 0, 300) == 0);
    CHECK(ix_part_gc(p, 10, &collected) == 0);
    CHECK(collected == 1);
    CHECK(stored(p, "k1", NULL) == 0);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 0);
    CHECK(stored(p, "k2", &ver) == 1 && ver == 110); /* a live entry stays */

    /* source 1 sends its records again from the start (after 0): all are
     * at or below its watermark 3, so none applies; k1 stays deleted */
    req_make(&r, 1, 2, (const uint64_t[]){ 1, 2 }, (const uint64_t[]){ PUT, PUT },
             (const uint64_t[]){ 100, 110 }, k1k2, 2, 0, 0);
    CHECK(apply(p, &r, false) == 0);
    CHECK(stored(p, "k1", NULL) == 0);
    counts(p, &entries, &tombs);
    CHECK(entries == 1 && tombs == 0);
    if (stored(p, "k1", NULL) != 0)
        fprintf(stderr, "a redelivered put resurrected an entry whose tombstone was "
                        "collected\n");

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
    char tmpl[] = "/tmp/sx-ixgc-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmpl);
    bool ok;

    if (dir == NULL) {
        perror("index_gc_test: mkdtemp");
        return 1;
    }
    ok = run(dir);
    if (argc <= 1)
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return ok ? CHECK_DONE() : 1;
}
