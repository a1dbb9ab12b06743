/*
 * index_apply_test.c — an index partition's applies (node/index/index_apply.c)
 * with its pipelined group commit: an I_APPLY that asks to be answered
 * early is answered once applied, with how far its source is synced (never
 * past what it applied), and its watermark is published once the syncer
 * has synced it; one whose `after` is past the source's watermark is
 * refused (SX_EUNAVAIL, "out of order"), applying nothing and moving
 * nothing; one whose after is at or below it is applied (records at or
 * below the watermark dropped as redeliveries, even those whose version
 * is newer than the stored entry's: a put of a key never stored, a delete
 * and a put of stored keys change nothing); a synchronous apply
 * returns only once its watermark is published (synced), early or not;
 * what answers report as synced never passes what is published, and
 * reaches the watermark once an apply that moves nothing has written the
 * synced-state record and it is synced (a shipper's heartbeats); a clean
 * close syncs everything, and a reopen finds the watermark and the
 * counters where they were; a reopen whose synced-state record is behind
 * the watermark records (what a machine crash can leave: an earlier group
 * lost, a later one kept) takes the watermark from it, and the records
 * shipped again from there apply as redeliveries.
 * Links node_index and the index tests' fixture. Argument: a scratch dir
 * (default: a fresh one under $TMPDIR or /tmp, removed afterwards).
 */
#define CHECK_TALLY_SHARED /* fixture.c checks too */
#define CHECK_TALLY_DEFINE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "fixture.h"
#include "ldb.h"
#include "scratch.h"
#include "sx_errors.h"

#define SOURCE 1
#define WAIT_MS 10000

/* What one asynchronous apply's callback said. */
typedef struct answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int err;
    uint64_t wm, synced;
    char msg[300];
} answer;

static void on_done(void *arg, int err, uint64_t wm, uint64_t synced, const char *msg)
{
    answer *a = arg;

    pthread_mutex_lock(&a->mu);
    a->done = true;
    a->err = err;
    a->wm = wm;
    a->synced = synced;
    snprintf(a->msg, sizeof(a->msg), "%s", msg);
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* One I_APPLY of source SOURCE: records seqs[0..n) (puts of index-local
 * keys "k<seq>" under index id 7, version = seq), upto, after, early. */
typedef struct req {
    msg_I_APPLY_req m;
    uint64_t seqs[8], kinds[8], versions[8], hashes[8];
    mp_span keys[8], projs[8];
    tup_bytes kb[8];
} req;

static void req_make(req *r, const uint64_t *seqs, uint32_t n, uint64_t upto, uint64_t after,
                     bool early)
{
    static const uint8_t nil = 0xc0;

    memset(r, 0, sizeof(*r));
    for (uint32_t i = 0; i < n; i++) {
        char s[32];

        snprintf(s, sizeof(s), "k%llu", (unsigned long long)seqs[i]);
        ixf_local_key(&r->kb[i], s);
        r->seqs[i] = seqs[i];
        r->versions[i] = seqs[i];
        r->hashes[i] = 1000 + seqs[i];
        r->keys[i] = (mp_span){ r->kb[i].p, r->kb[i].n };
        r->projs[i] = (mp_span){ &nil, 1 };
    }
    r->m.part = IXF_PART;
    r->m.source = SOURCE;
    r->m.upto = upto;
    r->m.seqs = (msg_u64s){ .n = n, .v = r->seqs };
    r->m.kinds = (msg_u64s){ .n = n, .v = r->kinds };
    r->m.versions = (msg_u64s){ .n = n, .v = r->versions };
    r->m.hashes = (msg_u64s){ .n = n, .v = r->hashes };
    r->m.keys = (msg_spans){ .n = n, .v = r->keys };
    r->m.projs = (msg_spans){ .n = n, .v = r->projs };
    r->m.after = after;
    r->m.early = early;
}

static void req_free(req *r)
{
    for (int i = 0; i < 8; i++)
        tup_bytes_free(&r->kb[i]);
}

static uint64_t ms_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Applies r asynchronously and waits for its answer (at most WAIT_MS). */
static answer apply_async(ix_part *p, req *r)
{
    answer a;
    char err[200];
    struct timespec ts;

    memset(&a, 0, sizeof(a));
    pthread_mutex_init(&a.mu, NULL);
    pthread_cond_init(&a.cv, NULL);
    CHECK(ix_part_apply_start(p, &r->m, false, on_done, &a, err, sizeof(err)) == 0);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&a.mu);
    while (!a.done && pthread_cond_timedwait(&a.cv, &a.mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&a.mu);
    CHECK(a.done);
    pthread_mutex_destroy(&a.mu);
    pthread_cond_destroy(&a.cv);
    return a;
}

/* The published watermark of SOURCE (p has one source: it). */
static uint64_t published(ix_part *p, uint64_t *entries)
{
    uint64_t wm[4] = { 0 }, hw[4] = { 0 };

    CHECK(p->nsrc >= 1 && p->nsrc <= 4);
    ix_part_state(p, entries, NULL, wm, hw);
    return wm[0];
}

/* Waits (at most WAIT_MS) until the published watermark reaches want. */
static bool published_reaches(ix_part *p, uint64_t want)
{
    uint64_t deadline = ms_now() + WAIT_MS;

    while (published(p, NULL) < want) {
        if (ms_now() > deadline)
            return false;
        ix_sync_drain(p); /* the syncer holds nothing once it returns */
    }
    return true;
}

/* The stored entry of index-local key "k<name>" (index id 7, as req_make
 * builds them): true when one is stored (live or a tombstone), with its
 * state in *e (proj not kept). */
static bool stored(ix_part *p, const char *name, ix_entry *e)
{
    tup_bytes local = { 0 };
    uint8_t key[IX_MAX_DBKEY], *v = NULL;
    size_t kn, vn = 0;
    bool have = false;

    memset(e, 0, sizeof(*e));
    ixf_local_key(&local, name);
    kn = ix_ekey(key, local.p, local.n);
    int rc = ldb_get(p->db, key, kn, &v, &vn);
    CHECK(rc == 0 || rc == SX_ENOTFOUND);
    if (rc == 0) {
        have = true;
        CHECK(ix_entry_decode(v, vn, e) == 0);
        e->proj = (mp_span){ NULL, 0 };
    }
    free(v);
    tup_bytes_free(&local);
    return have;
}

/* Every check, in scratch dir `dir`; false when the set-up failed (the
 * config or the partition could not be opened). */
static bool run(const char *dir)
{
    char err[300];
    cfg_cluster *cfg = NULL;
    ix_part *p = NULL;
    uint64_t entries = 0, wm = 0;
    req r;
    answer a;

    if (!ixf_open(dir, "ixapply", 1, &cfg, &p))
        return false;

    /* answered early: applied through 3, synced no further than that;
     * published once the syncer has synced it */
    req_make(&r, (const uint64_t[]){ 1, 2, 3 }, 3, 3, 0, true);
    a = apply_async(p, &r);
    CHECK(a.err == 0 && a.wm == 3 && a.synced <= 3);
    CHECK(published_reaches(p, 3));
    published(p, &entries);
    CHECK(entries == 3);
    req_free(&r);

    /* after past the watermark: refused whole, nothing moves */
    req_make(&r, (const uint64_t[]){ 4, 5 }, 2, 5, 9, true);
    a = apply_async(p, &r);
    CHECK(a.err == SX_EUNAVAIL && strstr(a.msg, "out of order") != NULL);
    ix_sync_drain(p);
    CHECK(published(p, &entries) == 3 && entries == 3);
    req_free(&r);

    /* after at the watermark: applied */
    req_make(&r, (const uint64_t[]){ 4, 5 }, 2, 5, 3, true);
    a = apply_async(p, &r);
    CHECK(a.err == 0 && a.wm == 5 && a.synced <= 5);
    req_free(&r);

    /* a synchronous apply (early asked for, and ignored) returns once its
     * watermark is published */
    req_make(&r, (const uint64_t[]){ 6 }, 1, 6, 5, true);
    uint64_t synced = 0;
    CHECK(ix_part_apply(p, &r.m, false, &wm, &synced, err, sizeof(err)) == 0 && wm == 6);
    CHECK(synced <= 6);
    CHECK(published(p, &entries) == 6 && entries == 6);
    req_free(&r);

    /* after below the watermark: redeliveries dropped, the rest applied */
    req_make(&r, (const uint64_t[]){ 5, 6, 7 }, 3, 7, 2, false);
    a = apply_async(p, &r);
    CHECK(a.err == 0 && a.wm == 7 && a.synced <= 7); /* answered once synced */
    CHECK(published(p, &entries) == 7 && entries == 7);
    req_free(&r);

    /* redeliveries (seq at or below the watermark, 7) that the version
     * rule alone would apply: a put of a key never stored, a delete and a
     * put of stored keys, each with a version newer than the stored one.
     * Only the redelivery rule stops them: nothing changes. */
    ix_entry e;
    uint64_t tombs = 0;
    req_make(&r, (const uint64_t[]){ 5, 6, 7 }, 3, 7, 7, false);
    ixf_local_key(&r.kb[0], "k500"); /* record 0 under key "k500", never stored */
    r.keys[0] = (mp_span){ r.kb[0].p, r.kb[0].n };
    r.versions[0] = 500;
    r.kinds[1] = 1; /* OUT_DEL of k6, version 600 > 6 */
    r.versions[1] = 600;
    r.versions[2] = 700; /* OUT_PUT of k7, version 700 > 7 */
    r.hashes[2] = 4242;
    CHECK(!stored(p, "k500", &e));
    CHECK(stored(p, "k6", &e) && e.live && e.version == 6);
    a = apply_async(p, &r);
    CHECK(a.err == 0 && a.wm == 7);
    ix_sync_drain(p);
    ix_part_state(p, &entries, &tombs, NULL, NULL);
    CHECK_INT(entries, 7);
    CHECK_INT(tombs, 0);
    CHECK(!stored(p, "k500", &e));
    CHECK(stored(p, "k6", &e) && e.live && e.version == 6);
    CHECK(stored(p, "k7", &e) && e.live && e.version == 7 && e.h == 1007);
    req_free(&r);

    /* heartbeats (nothing new): the synced-state record catches up, and
     * once it is synced answers report the watermark as synced */
    for (int i = 0; i < 2; i++) {
        req_make(&r, NULL, 0, 7, 7, true);
        a = apply_async(p, &r);
        CHECK(a.err == 0 && a.wm == 7);
        ix_sync_drain(p);
        req_free(&r);
    }
    req_make(&r, NULL, 0, 7, 7, true);
    a = apply_async(p, &r);
    CHECK(a.err == 0 && a.wm == 7 && a.synced == 7);
    req_free(&r);

    /* one more answered early, then a clean close and a reopen */
    req_make(&r, (const uint64_t[]){ 8 }, 1, 8, 7, true);
    a = apply_async(p, &r);
    CHECK(a.err == 0 && a.wm == 8);
    req_free(&r);
    CHECK(ix_part_close(p));
    p = NULL;
    CHECK(ix_part_open(cfg, &cfg->index[0], dir, &p) == 0);
    if (p != NULL) {
        CHECK(published(p, &entries) == 8 && entries == 8);
        CHECK(ix_part_close(p));
    }

    /* the synced-state record behind the watermark records, as a machine
     * crash can leave it: the reopen takes the watermark from it */
    ldb *d = NULL;
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    char pdir[4300];
    p = calloc(1, sizeof(*p));
    uint64_t src[1] = { SOURCE }, swm[1] = { 3 }, shw[1] = { 0 };
    snprintf(pdir, sizeof(pdir), "%s/p%d", dir, IXF_PART);
    CHECK(p != NULL && b != NULL && ldb_open(pdir, &d) == 0);
    if (p != NULL && b != NULL && d != NULL) {
        p->nsrc = 1;
        p->src = src;
        CHECK(ix_put_synced(p, b, swm, shw) == 0);
        CHECK(ldb_write_sync(d, b) == 0);
    }
    if (b != NULL)
        leveldb_writebatch_destroy(b);
    ldb_close(d);
    free(p);
    p = NULL;
    CHECK(ix_part_open(cfg, &cfg->index[0], dir, &p) == 0);
    if (p != NULL) {
        CHECK(published(p, &entries) == 3);
        req_make(&r, (const uint64_t[]){ 4, 5, 6, 7, 8 }, 5, 8, 3, true);
        a = apply_async(p, &r); /* shipped again from the synced point */
        CHECK(a.err == 0 && a.wm == 8);
        CHECK(published_reaches(p, 8));
        published(p, &entries);
        CHECK(entries == 8); /* redeliveries: no entry twice */
        req_free(&r);
        CHECK(ix_part_close(p));
    }
    cfg_free(cfg);
    return true;
}

int main(int argc, char **argv)
{
    return scratch_run(argc, argv, "sx-ixapply", run) ? CHECK_DONE() : 1;
}
