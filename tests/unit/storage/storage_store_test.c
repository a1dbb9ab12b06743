/*
 * storage_store_test.c — the storage node's shared leveldb
 * (node/storage/storage_store.c): a partition directory of the older layout (one
 * leveldb per partition) is copied under the partition's id prefix, every
 * record with its value, next to another partition's records without
 * mixing; the old directory is renamed *.migrated; a copy repeated after a
 * crash (the old directory still there) gives the same store; a file, or
 * a folder holding no leveldb, is refused and left alone.
 * Links node_storage.
 * Argument: a scratch dir (default: a fresh one under $TMPDIR or /tmp, removed
 * afterwards).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "hash.h"
#include "ldb.h"
#include "scratch.h"
#include "storage_store.h"
#include "sx_errors.h"

#define NREC 3000 /* more than one 4 MiB copy batch with 2 KiB values */

static bool exists(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0;
}

/* Record i of partition `part`: key 'F' | i (4 BE) | part, a value of
 * 2 KiB derived from both. */
static size_t rec_key(uint8_t *k, uint64_t part, uint32_t i)
{
    k[0] = 'F';
    be_put32(k + 1, i);
    be_put64(k + 5, part);
    return 13;
}

static void rec_val(uint8_t *v, uint64_t part, uint32_t i)
{
    for (size_t j = 0; j < 2048; j++)
        v[j] = (uint8_t)(i * 31 + part * 7 + j);
}

/* Writes an old-layout partition leveldb at dir with NREC records. */
static int make_old(const char *dir, uint64_t part)
{
    static uint8_t v[2048];
    uint8_t k[16];
    ldb *d = NULL;
    leveldb_writebatch_t *b;
    int rc = ldb_open(dir, &d);

    if (rc != 0)
        return rc;
    b = leveldb_writebatch_create();
    if (b == NULL) {
        ldb_close(d);
        return SX_ENOMEM;
    }
    for (uint32_t i = 0; i < NREC; i++) {
        size_t kn = rec_key(k, part, i);

        rec_val(v, part, i);
        leveldb_writebatch_put(b, (const char *)k, kn, (const char *)v, sizeof(v));
    }
    rc = ldb_write_sync(d, b);
    leveldb_writebatch_destroy(b);
    ldb_close(d);
    return rc;
}

/* Counts the store's records under part's prefix and checks each. */
typedef struct seen {
    uint64_t part;
    uint32_t n, bad;
} seen;

static int seen_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    static uint8_t want[2048];
    seen *s = arg;
    uint8_t wk[16];

    if (kn != 8 + 13 || be_get64(k) != s->part) {
        s->bad++;
        return 0;
    }
    uint32_t i = be_get32(k + 9);
    rec_key(wk, s->part, i);
    rec_val(want, s->part, i);
    if (memcmp(k + 8, wk, 13) != 0 || vn != sizeof(want) || memcmp(v, want, vn) != 0 || i != s->n)
        s->bad++;
    s->n++;
    return 0;
}

static seen scan_part(st_store *s, uint64_t part)
{
    uint8_t lo[8], hi[8];
    seen sn = { part, 0, 0 };

    be_put64(lo, part);
    be_put64(hi, part + 1);
    CHECK_INT(ldb_scan(s->db, NULL, lo, 8, hi, 8, false, seen_visit, &sn), 0);
    return sn;
}

/* Every check, in scratch dir base. */
static bool run(const char *base)
{
    char store_dir[512], p7[512], p8[512], moved[600], notdb[512];
    st_store *s = NULL;

    snprintf(store_dir, sizeof(store_dir), "%s/store", base);
    snprintf(p7, sizeof(p7), "%s/p7", base);
    snprintf(p8, sizeof(p8), "%s/p8", base);
    snprintf(moved, sizeof(moved), "%s/p7.migrated", base);
    snprintf(notdb, sizeof(notdb), "%s/p9", base);

    /* two old partitions copied side by side */
    CHECK_INT(make_old(p7, 7), 0);
    CHECK_INT(make_old(p8, 8), 0);
    CHECK_INT(st_store_open(store_dir, &s), 0);
    if (s == NULL)
        return true; /* a failed check: CHECK_DONE says so */
    CHECK_INT(st_store_migrate(s, p7, 7), 0);
    CHECK_INT(st_store_migrate(s, p8, 8), 0);
    seen a = scan_part(s, 7), b = scan_part(s, 8);
    CHECK_INT(a.n, NREC);
    CHECK_INT(a.bad, 0);
    CHECK_INT(b.n, NREC);
    CHECK_INT(b.bad, 0);
    CHECK(!exists(p7));
    CHECK(exists(moved));

    /* a crash after the copy, before the rename: the old directory is
     * still there, and copying again changes nothing */
    CHECK_INT(rename(moved, p7), 0);
    CHECK_INT(st_store_migrate(s, p7, 7), 0);
    a = scan_part(s, 7);
    CHECK_INT(a.n, NREC);
    CHECK_INT(a.bad, 0);
    CHECK(!exists(p7));

    /* the copies survive a reopen (they were synced) */
    st_store_close(s);
    s = NULL;
    CHECK_INT(st_store_open(store_dir, &s), 0);
    if (s != NULL) {
        a = scan_part(s, 7);
        b = scan_part(s, 8);
        CHECK_INT(a.n + b.n, 2 * NREC);
        CHECK_INT(a.bad + b.bad, 0);
    }

    /* not a leveldb: refused, left in place */
    FILE *f = fopen(notdb, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fputs("not a database\n", f);
        fclose(f);
    }
    if (s != NULL) {
        CHECK(st_store_migrate(s, notdb, 9) != 0);
        CHECK(exists(notdb));
    }

    /* a folder holding no leveldb (empty): refused, not opened as a new
     * empty database and "copied" */
    char empty[512], empty_moved[600];
    snprintf(empty, sizeof(empty), "%s/p10", base);
    snprintf(empty_moved, sizeof(empty_moved), "%s/p10.migrated", base);
    CHECK_INT(mkdir(empty, 0700), 0);
    if (s != NULL) {
        CHECK(st_store_migrate(s, empty, 10) != 0);
        CHECK(exists(empty));
        CHECK(!exists(empty_moved));
        st_store_close(s);
    }
    return true;
}

int main(int argc, char **argv)
{
    return scratch_run(argc, argv, "sx-store", run) ? CHECK_DONE() : 2;
}
