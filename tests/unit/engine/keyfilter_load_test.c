/*
 * keyfilter_load_test.c — node/engine/keyfilter_load.c, the scan that fills
 * an absent-key filter from a real leveldb, while a writer adds keys the
 * way the committers do (kf_add before its batch commits): once the filter
 * is ready it calls no stored key absent (stored before the scan, during
 * it, or across its chunks of 65,536 keys, with the filter growing from
 * its smallest segment), it holds no key outside its ranges, it counts the
 * scanned keys, a stopped scan leaves the filter not ready, and
 * SHARDEX_KEYFILTER_MB=0 gives no filter.
 * Links node_engine. Argument: a scratch dir (default: a fresh one under
 * $TMPDIR or /tmp, removed afterwards).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"
#include "hash.h"
#include "keyfilter_load.h"
#include "ldb.h"
#include "scratch.h"

#define BEFORE 200000u /* keys stored before the scan: four chunks */
#define DURING 60000u  /* keys written while it runs */
#define PART 7

/* Stored key `pfx` | i (8 bytes BE); returns its length. */
static size_t skey(uint8_t *k, uint8_t pfx, uint64_t i)
{
    k[0] = pfx;
    be_put64(k + 1, i);
    return 9;
}

/* Stores keys [from, to) with prefix pfx in synced batches of 10,000; adds
 * each to kf (unless NULL) before its batch commits. */
static int store_keys(ldb *db, keyfilter *kf, uint8_t pfx, uint64_t from, uint64_t to)
{
    uint8_t k[9];

    for (uint64_t i = from; i < to;) {
        leveldb_writebatch_t *b = leveldb_writebatch_create();
        for (uint64_t e = i + 10000 < to ? i + 10000 : to; i < e; i++) {
            skey(k, pfx, i);
            leveldb_writebatch_put(b, (const char *)k, 9, "v", 1);
            if (kf != NULL)
                kf_add(kf, PART, k + 1, 8); /* the filter's key: skip 1 */
        }
        int rc = ldb_write_sync(db, b);
        leveldb_writebatch_destroy(b);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* How many of keys [from, to) (prefix dropped) the filter calls absent. */
static uint64_t count_absent(keyfilter *kf, uint64_t from, uint64_t to)
{
    uint8_t k[9];
    uint64_t n = 0;

    for (uint64_t i = from; i < to; i++) {
        skey(k, 'E', i);
        n += kf_absent(kf, PART, k + 1, 8);
    }
    return n;
}

typedef struct writer {
    ldb *db;
    keyfilter *kf;
    int rc;
} writer;

static void *writer_main(void *arg)
{
    writer *w = arg;

    w->rc = store_keys(w->db, w->kf, 'E', 1000000, 1000000 + DURING);
    return NULL;
}

static bool wait_ready(keyfilter *kf)
{
    struct timespec ts = { 0, 10 * 1000000L };

    for (int i = 0; i < 6000; i++) {
        bool ready = false;
        kf_stats(kf, NULL, NULL, NULL, &ready, NULL);
        if (ready)
            return true;
        nanosleep(&ts, NULL);
    }
    return false;
}

static kf_range range_e(void)
{
    kf_range r;

    memset(&r, 0, sizeof(r));
    r.lo[0] = 'E';
    r.hi[0] = 'F';
    r.lo_n = r.hi_n = 1;
    r.skip = 1;
    r.part = PART;
    return r;
}

static void test_scan_with_writer(ldb *db)
{
    kf_range r = range_e();
    keyfilter *kf = NULL;
    kf_loader *l = NULL;
    writer w = { db, NULL, 0 };
    pthread_t t;
    uint64_t keys = 0;
    bool on = false;

    kf_load_start(db, &r, 1, 0, "test", &kf, &l); /* expect 0: grows while scanning */
    CHECK(kf != NULL && l != NULL);
    if (kf == NULL)
        return;
    w.kf = kf;
    CHECK(pthread_create(&t, NULL, writer_main, &w) == 0);
    pthread_join(t, NULL);
    CHECK_INT(w.rc, 0);
    CHECK(wait_ready(kf));
    /* nothing stored is absent: before the scan, or written during it */
    CHECK_INT(count_absent(kf, 0, BEFORE), 0);
    CHECK_INT(count_absent(kf, 1000000, 1000000 + DURING), 0);
    /* never stored: mostly absent */
    uint64_t absent = count_absent(kf, 5000000, 5100000);
    printf("scan with a writer: %llu of 100000 never-stored keys absent\n",
           (unsigned long long)absent);
    CHECK(absent > 90000);
    /* stored under 'D' and 'F', outside the range: the scan must not have
     * added them (as 'E' keys they are mostly absent) */
    CHECK(count_absent(kf, 8000000, 8010000) > 9000);
    CHECK(count_absent(kf, 9000000, 9010000) > 9000);
    kf_stats(kf, &keys, NULL, NULL, NULL, &on);
    CHECK(on);
    /* every key in range counted once by the scan or the writer, at most
     * twice (a key the writer added and the scan then saw) */
    CHECK(keys >= BEFORE + DURING && keys <= BEFORE + 2 * DURING);
    kf_load_stop(l);
    kf_destroy(kf);
}

static void test_stop_early(ldb *db)
{
    kf_range r = range_e();
    keyfilter *kf = NULL;
    kf_loader *l = NULL;
    bool ready = true;

    kf_load_start(db, &r, 1, BEFORE, "test", &kf, &l);
    CHECK(kf != NULL && l != NULL);
    if (kf == NULL)
        return;
    kf_load_stop(l); /* at once: the scan stops between chunks */
    kf_stats(kf, NULL, NULL, NULL, &ready, NULL);
    if (!ready)
        CHECK_INT(count_absent(kf, 5000000, 5001000), 0); /* says nothing */
    else
        CHECK_INT(count_absent(kf, 0, BEFORE), 0);
    kf_destroy(kf);
}

static void test_turned_off(ldb *db)
{
    kf_range r = range_e();
    keyfilter *kf = (keyfilter *)&r;
    kf_loader *l = (kf_loader *)&r;

    setenv("SHARDEX_KEYFILTER_MB", "0", 1);
    kf_load_start(db, &r, 1, 10, "test", &kf, &l);
    CHECK(kf == NULL && l == NULL);
    unsetenv("SHARDEX_KEYFILTER_MB");
    kf_load_stop(NULL);
}

/* Every check, on a leveldb in scratch dir dir; false when it could not
 * be opened. */
static bool run(const char *dir)
{
    ldb *db = NULL;

    if (ldb_open(dir, &db) != 0) {
        fprintf(stderr, "cannot open a leveldb in a scratch folder\n");
        return false;
    }
    CHECK_INT(store_keys(db, NULL, 'D', 9000000, 9010000), 0); /* outside the range */
    CHECK_INT(store_keys(db, NULL, 'F', 8000000, 8010000), 0);
    CHECK_INT(store_keys(db, NULL, 'E', 0, BEFORE), 0);
    test_scan_with_writer(db);
    test_stop_early(db);
    test_turned_off(db);
    ldb_close(db);
    return true;
}

int main(int argc, char **argv)
{
    return scratch_run(argc, argv, "sx-kfload", run) ? CHECK_DONE() : 1;
}
