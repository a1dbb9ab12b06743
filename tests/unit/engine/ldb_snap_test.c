/*
 * ldb_snap_test.c — node/engine/ldb_snap.c: a snapshot of one partition's
 * range among others installs into a second leveldb, replacing what that
 * range held there and leaving the other ranges alone; the caller's extra
 * writes go into the last batch (the marker still present and the records
 * in place when it is filled, its key written with the marker's removal);
 * a snapshot at a leveldb snapshot point ignores later writes; a file
 * streamed through the staging calls in odd chunk sizes verifies and is
 * byte for byte the original, and a changed byte anywhere in it fails
 * verify; every single-byte change and every truncation of a small file
 * fails verify, and install writes nothing then; chunks out of order are refused with the staged
 * length; an empty range; the whole key space; a 1 MiB value and 100,000 small records through
 * leveldbs with small memtables; an install that stops before its last batch leaves the marker,
 * across a reopen; a marker inside the range; make's failures leave no file. Links node_engine.
 * Argument: a scratch dir (default: a fresh one under $TMPDIR or /tmp,
 * removed afterwards).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sodium.h>
#include "check.h"
#include "hash.h"
#include "ldb.h"
#include "ldb_snap.h"
#include "scratch.h"
#include "sx_errors.h"

static const char *root; /* the scratch dir */

/* root/name into buf. */
static const char *at(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", root, name);
    return buf;
}

/* A fresh leveldb at root/name with memtables of mem bytes. */
static ldb *db_open(const char *name, size_t mem)
{
    char p[512];
    ldb *d = NULL;

    CHECK_RC(ldb_open_mem(at(p, sizeof(p), name), mem, &d), SX_OK);
    return d;
}

/* A partition's 8-byte prefix. */
static void prefix(uint8_t *p, uint64_t part)
{
    be_put64(p, part);
}

/* Key of record i of partition part: prefix | i (4 bytes). */
static size_t rec_key(uint8_t *k, uint64_t part, uint32_t i)
{
    prefix(k, part);
    be_put32(k + 8, i);
    return 12;
}

/* Writes n records of partition part (i from first), values of vlen bytes
 * derived from part, i and salt, in lazy batches. */
static void fill(ldb *d, uint64_t part, uint32_t first, uint32_t n, size_t vlen, uint8_t salt)
{
    leveldb_writebatch_t *b = leveldb_writebatch_create();
    uint8_t *v = malloc(vlen ? vlen : 1);
    uint8_t k[12];

    CHECK(b != NULL && v != NULL);
    if (b == NULL || v == NULL)
        goto out;
    for (uint32_t i = first; i < first + n; i++) {
        for (size_t j = 0; j < vlen; j++)
            v[j] = (uint8_t)(part * 31 + i * 7 + j + salt);
        leveldb_writebatch_put(b, (const char *)k, rec_key(k, part, i), (const char *)v, vlen);
        if ((i - first) % 1000 == 999) {
            CHECK_RC(ldb_write_lazy(d, b), SX_OK);
            leveldb_writebatch_clear(b);
        }
    }
    CHECK_RC(ldb_write_sync(d, b), SX_OK);
out:
    if (b != NULL)
        leveldb_writebatch_destroy(b);
    free(v);
}

static void put(ldb *d, const void *k, size_t kn, const void *v, size_t vn)
{
    leveldb_writebatch_t *b = leveldb_writebatch_create();

    leveldb_writebatch_put(b, k, kn, v, vn);
    CHECK_RC(ldb_write_sync(d, b), SX_OK);
    leveldb_writebatch_destroy(b);
}

static void del(ldb *d, const void *k, size_t kn)
{
    leveldb_writebatch_t *b = leveldb_writebatch_create();

    leveldb_writebatch_delete(b, k, kn);
    CHECK_RC(ldb_write_sync(d, b), SX_OK);
    leveldb_writebatch_destroy(b);
}

/* A range's contents summed up: its records and a hash of them all. */
typedef struct digest {
    uint64_t n;
    uint8_t sum[32];
    crypto_generichash_state h;
} digest;

static int digest_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    digest *g = arg;
    uint8_t len[8];

    be_put32(len, (uint32_t)kn);
    be_put32(len + 4, (uint32_t)vn);
    crypto_generichash_update(&g->h, len, sizeof(len));
    crypto_generichash_update(&g->h, k, kn);
    crypto_generichash_update(&g->h, v, vn);
    g->n++;
    return 0;
}

/* d's records in [lo, hi) of partition bounds (lo/hi as 8-byte prefixes;
 * hi 0: to the end), as of snap (may be NULL). */
static digest range_digest(ldb *d, const leveldb_snapshot_t *snap, uint64_t lo, uint64_t hi)
{
    digest g = { 0 };
    uint8_t l[8], h[8];

    prefix(l, lo);
    prefix(h, hi);
    crypto_generichash_init(&g.h, NULL, 0, sizeof(g.sum));
    CHECK_RC(ldb_scan(d, snap, l, lo ? 8 : 0, h, hi ? 8 : 0, false, digest_visit, &g), SX_OK);
    crypto_generichash_final(&g.h, g.sum, sizeof(g.sum));
    return g;
}

static bool digest_eq(digest a, digest b)
{
    return a.n == b.n && memcmp(a.sum, b.sum, sizeof(a.sum)) == 0;
}

/* Makes a snapshot of d's partition part (its prefix's range) at path. */
static int make_part(ldb *d, const leveldb_snapshot_t *snap, uint64_t part, uint64_t applied,
                     const char *path, uint64_t *size)
{
    uint8_t lo[8], hi[8];
    char err[512] = "";
    int rc;

    prefix(lo, part);
    prefix(hi, part + 1);
    rc = ldb_snap_make(d, snap, lo, 8, hi, 8, applied, "term=7", 6, path, size, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "make: %s\n", err);
    return rc;
}

static const uint8_t marker_out[] = "\xff\xffinstalling"; /* outside every partition */
static const uint8_t applied_key[] = "\xff\xff"
                                     "applied";

/* The extra function's view: the state when it was called. */
typedef struct extra_seen {
    ldb *d;
    const uint8_t *marker; /* NULL: marker_out */
    size_t marker_n;
    int calls;
    bool marker_then, applied_then;
    digest range_then;
    uint64_t part;
    uint64_t applied;
    int fail; /* returned instead of adding (a crash before the last batch) */
} extra_seen;

static int extra_fn(void *arg, leveldb_writebatch_t *b, const ldb_snap_info *info)
{
    extra_seen *s = arg;
    uint8_t v[8];

    s->calls++;
    if (s->marker == NULL) {
        s->marker = marker_out;
        s->marker_n = sizeof(marker_out) - 1;
    }
    CHECK_RC(ldb_snap_marker_present(s->d, s->marker, s->marker_n, &s->marker_then), SX_OK);
    CHECK_RC(ldb_snap_marker_present(s->d, applied_key, sizeof(applied_key) - 1, &s->applied_then),
             SX_OK);
    s->range_then = range_digest(s->d, NULL, s->part, s->part + 1);
    s->applied = info->applied;
    if (s->fail)
        return s->fail;
    be_put64(v, info->applied);
    leveldb_writebatch_put(b, (const char *)applied_key, sizeof(applied_key) - 1, (const char *)v,
                           sizeof(v));
    return 0;
}

/* A partition among others: snapshot, verify, install into a leveldb with
 * other data in the range (removed) and around it (kept). */
static void t_install_range(void)
{
    ldb *a = db_open("range-a", 4u << 20), *b = db_open("range-b", 4u << 20);
    char path[512], err[512] = "";
    ldb_snap_info *info = calloc(1, sizeof(*info));
    extra_seen seen = { .d = b, .part = 2 };
    digest want, b1, b3;
    uint64_t size = 0;
    uint8_t *v = NULL;
    size_t vn = 0;
    bool present = true;

    if (!a || !b || !info) {
        CHECK(!"setup");
        goto out;
    }
    fill(a, 1, 0, 50, 20, 0);
    fill(a, 2, 0, 300, 100, 0);
    fill(a, 3, 0, 50, 20, 0);
    fill(b, 1, 0, 70, 30, 9);
    fill(b, 2, 100, 400, 50, 9); /* overlaps a's keys 100..299, and more */
    fill(b, 3, 0, 70, 30, 9);
    want = range_digest(a, NULL, 2, 3);
    b1 = range_digest(b, NULL, 1, 2);
    b3 = range_digest(b, NULL, 3, 4);
    CHECK(!digest_eq(want, range_digest(b, NULL, 2, 3)));

    at(path, sizeof(path), "range.snap");
    CHECK_RC(make_part(a, NULL, 2, 1234, path, &size), SX_OK);
    CHECK_RC(ldb_snap_verify(path, info, err, sizeof(err)), SX_OK);
    CHECKF(err[0] == '\0', "%s", err);
    CHECK_INT(info->records, 300);
    CHECK_INT(info->size, size);
    CHECK_INT(info->applied, 1234);
    CHECK(info->meta_n == 6 && memcmp(info->meta, "term=7", 6) == 0);
    CHECK(info->lo_n == 8 && be_get64(info->lo) == 2);
    CHECK(info->hi_n == 8 && be_get64(info->hi) == 3);
    {
        char tmp[600];
        struct stat st;

        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        CHECK(stat(tmp, &st) != 0);
        CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == size);
    }

    memset(info, 0, sizeof(*info));
    CHECK_RC(ldb_snap_install(b, path, marker_out, sizeof(marker_out) - 1, extra_fn, &seen, info,
                              err, sizeof(err)),
             SX_OK);
    CHECKF(err[0] == '\0', "%s", err);
    CHECK_INT(info->records, 300);
    CHECK(digest_eq(want, range_digest(b, NULL, 2, 3)));
    CHECK(digest_eq(b1, range_digest(b, NULL, 1, 2)));
    CHECK(digest_eq(b3, range_digest(b, NULL, 3, 4)));
    /* the last batch: when extra was called the marker was there and the
     * records in place, and its key was not written yet */
    CHECK_INT(seen.calls, 1);
    CHECK(seen.marker_then);
    CHECK(!seen.applied_then);
    CHECK(digest_eq(want, seen.range_then));
    CHECK_INT(seen.applied, 1234);
    CHECK_RC(ldb_snap_marker_present(b, marker_out, sizeof(marker_out) - 1, &present), SX_OK);
    CHECK(!present);
    CHECK_RC(ldb_get(b, applied_key, sizeof(applied_key) - 1, &v, &vn), SX_OK);
    CHECK(vn == 8 && v != NULL && be_get64(v) == 1234);
out:
    free(v);
    free(info);
    ldb_close(a);
    ldb_close(b);
}

/* A snapshot at a leveldb snapshot point holds the range as it was then. */
static void t_snapshot_point(void)
{
    ldb *a = db_open("point-a", 4u << 20), *b = db_open("point-b", 4u << 20);
    const leveldb_snapshot_t *s;
    char path[512], err[512] = "";
    uint8_t k[12];
    digest then;

    if (!a || !b) {
        CHECK(!"setup");
        goto out;
    }
    fill(a, 5, 0, 100, 40, 1);
    s = leveldb_create_snapshot(a->db);
    then = range_digest(a, s, 5, 6);
    fill(a, 5, 50, 100, 40, 2); /* overwrites 50..99, adds 100..149 */
    del(a, k, rec_key(k, 5, 3));
    CHECK(!digest_eq(then, range_digest(a, NULL, 5, 6)));
    at(path, sizeof(path), "point.snap");
    CHECK_RC(make_part(a, s, 5, 1, path, NULL), SX_OK);
    leveldb_release_snapshot(a->db, s);
    CHECK_RC(ldb_snap_install(b, path, marker_out, sizeof(marker_out) - 1, NULL, NULL, NULL, err,
                              sizeof(err)),
             SX_OK);
    CHECKF(err[0] == '\0', "%s", err);
    CHECK(digest_eq(then, range_digest(b, NULL, 5, 6)));
    CHECK_INT(range_digest(b, NULL, 5, 6).n, 100);
out:
    ldb_close(a);
    ldb_close(b);
}

/* Streams src through ldb_snap_read and the staging calls in chunks of
 * the sizes in steps (cycled); returns the staged length. */
static uint64_t stream(const char *src, const char *stage, const size_t *steps, size_t nsteps)
{
    static uint8_t buf[70000];
    uint64_t off = 0, staged = 0;
    char err[512] = "";

    for (size_t i = 0;; i++) {
        size_t want = steps[i % nsteps], got = 0;
        int rc = ldb_snap_read(src, off, buf, want, &got, err, sizeof(err));

        CHECKF(rc == 0, "%s", err);
        if (rc != 0 || got == 0)
            break;
        CHECK(got <= want);
        CHECK_RC(ldb_snap_stage_write(stage, off, buf, got, &staged, err, sizeof(err)), SX_OK);
        off += got;
        CHECK_INT(staged, off);
    }
    CHECK_RC(ldb_snap_stage_sync(stage, err, sizeof(err)), SX_OK);
    return off;
}

/* Whether two files hold the same bytes. */
static bool same_file(const char *p, const char *q)
{
    FILE *f = fopen(p, "rb"), *g = fopen(q, "rb");
    bool same = f != NULL && g != NULL;

    while (same) {
        int c = fgetc(f), d = fgetc(g);

        same = c == d;
        if (c == EOF)
            break;
    }
    if (f)
        fclose(f);
    if (g)
        fclose(g);
    return same;
}

/* Chunks of odd sizes through read and stage_write; the staged file
 * verifies and is the original; reads at and past the end. */
static void t_stream(void)
{
    static const size_t steps[] = { 1, 7, 4093, 65537, 333, 2 };
    static const size_t big[] = { 65536 };
    ldb *a = db_open("stream-a", 4u << 20);
    char path[512], stage[512], err[512] = "";
    ldb_snap_info *info = calloc(1, sizeof(*info));
    uint64_t size = 0, len = 1;
    uint8_t byte;
    size_t got = 7;

    if (!a || !info) {
        CHECK(!"setup");
        goto out;
    }
    fill(a, 7, 0, 2000, 150, 3);
    at(path, sizeof(path), "stream.snap");
    at(stage, sizeof(stage), "stream.stage");
    CHECK_RC(make_part(a, NULL, 7, 99, path, &size), SX_OK);
    CHECK(size > 300000);
    CHECK_RC(ldb_snap_stage_size(stage, &len, err, sizeof(err)), SX_OK);
    CHECK_INT(len, 0);
    CHECK_INT(stream(path, stage, steps, sizeof(steps) / sizeof(steps[0])), size);
    CHECK(same_file(path, stage));
    CHECK_RC(ldb_snap_verify(stage, info, err, sizeof(err)), SX_OK);
    CHECK_INT(info->records, 2000);
    CHECK_INT(info->applied, 99);
    /* again from 0 over the staged file: offset 0 starts over */
    CHECK_INT(stream(path, stage, big, 1), size);
    CHECK(same_file(path, stage));
    CHECK_RC(ldb_snap_stage_size(stage, &len, err, sizeof(err)), SX_OK);
    CHECK_INT(len, size);

    /* a byte changed anywhere in a file of many buffers fails too */
    for (uint64_t i = 0, x = 0x9e3779b97f4a7c15ull; i < 16; i++) {
        uint64_t pos;
        uint8_t c = 0, one;

        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pos = x % size;
        CHECK_RC(ldb_snap_read(path, pos, &c, 1, &got, err, sizeof(err)), SX_OK);
        CHECK_RC(ldb_snap_stage_write(stage, 0, NULL, 0, NULL, err, sizeof(err)), SX_OK);
        CHECK_INT(stream(path, stage, big, 1), size);
        one = (uint8_t)(c ^ (uint8_t)(1u << (x >> 61)));
        {
            int fd = open(stage, O_WRONLY);

            CHECK(fd >= 0 && pwrite(fd, &one, 1, (off_t)pos) == 1);
            if (fd >= 0)
                close(fd);
        }
        err[0] = '\0';
        CHECK(ldb_snap_verify(stage, info, err, sizeof(err)) != SX_OK);
        CHECKF(err[0] != '\0', "byte %llu", (unsigned long long)pos);
    }

    CHECK_RC(ldb_snap_read(path, size, &byte, 1, &got, err, sizeof(err)), SX_OK);
    CHECK_INT(got, 0);
    CHECK_RC(ldb_snap_read(path, size - 1, &byte, 1, &got, err, sizeof(err)), SX_OK);
    CHECK_INT(got, 1);
    CHECK_RC(ldb_snap_read(path, size + 1, &byte, 1, &got, err, sizeof(err)), SX_EINVAL);
    CHECK_INT(got, 0);
    at(stage, sizeof(stage), "absent.snap");
    CHECK_RC(ldb_snap_read(stage, 0, &byte, 1, &got, err, sizeof(err)), SX_ENOTFOUND);
    CHECK_RC(ldb_snap_verify(stage, info, err, sizeof(err)), SX_ENOTFOUND);
out:
    free(info);
    ldb_close(a);
}

/* Chunks that do not continue the staged bytes are refused, with the
 * staged length to restart from, and change nothing. */
static void t_stage_order(void)
{
    char stage[512], err[512] = "";
    uint8_t data[100];
    uint64_t staged = 77, len = 0;

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)i;
    at(stage, sizeof(stage), "order.stage");
    CHECK_RC(ldb_snap_stage_write(stage, 10, data, 10, &staged, err, sizeof(err)), SX_EINVAL);
    CHECK_INT(staged, 0);
    CHECK(err[0] != '\0');
    CHECK_RC(ldb_snap_stage_size(stage, &len, err, sizeof(err)), SX_OK);
    CHECK_INT(len, 0);
    CHECK_RC(ldb_snap_stage_sync(stage, err, sizeof(err)), SX_ENOTFOUND);
    CHECK_RC(ldb_snap_stage_write(stage, 0, data, 10, &staged, err, sizeof(err)), SX_OK);
    CHECK_INT(staged, 10);
    CHECK_RC(ldb_snap_stage_write(stage, 20, data + 20, 10, &staged, err, sizeof(err)), SX_EINVAL);
    CHECK_INT(staged, 10);
    CHECK_RC(ldb_snap_stage_write(stage, 5, data + 5, 10, &staged, err, sizeof(err)), SX_EINVAL);
    CHECK_INT(staged, 10);
    CHECK_RC(ldb_snap_stage_size(stage, &len, err, sizeof(err)), SX_OK);
    CHECK_INT(len, 10);
    CHECK_RC(ldb_snap_stage_write(stage, 10, data + 10, 90, &staged, err, sizeof(err)), SX_OK);
    CHECK_INT(staged, 100);
    CHECK_RC(ldb_snap_stage_sync(stage, err, sizeof(err)), SX_OK);
    {
        uint8_t back[101];
        size_t got = 0;

        CHECK_RC(ldb_snap_read(stage, 0, back, sizeof(back), &got, err, sizeof(err)), SX_OK);
        CHECK(got == 100 && memcmp(back, data, 100) == 0);
    }
    /* offset 0 starts over */
    CHECK_RC(ldb_snap_stage_write(stage, 0, data, 3, &staged, err, sizeof(err)), SX_OK);
    CHECK_RC(ldb_snap_stage_size(stage, &len, err, sizeof(err)), SX_OK);
    CHECK_INT(len, 3);
}

/* Reads the whole file at path into *buf (malloc'd); its size, or 0. */
static size_t slurp(const char *path, uint8_t **buf)
{
    FILE *f = fopen(path, "rb");
    long n;

    *buf = NULL;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (*buf = malloc((size_t)n)) == NULL ||
        fread(*buf, 1, (size_t)n, f) != (size_t)n) {
        if (f)
            fclose(f);
        free(*buf);
        *buf = NULL;
        return 0;
    }
    fclose(f);
    return (size_t)n;
}

static void spit(const char *path, const uint8_t *buf, size_t n)
{
    FILE *f = fopen(path, "wb");

    CHECK(f != NULL);
    if (f == NULL)
        return;
    CHECK(fwrite(buf, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

/* Every single-byte change and every truncation of a small file fails
 * verify (with a message); install of one writes nothing. */
static void t_corruption(void)
{
    ldb *a = db_open("corrupt-a", 4u << 20), *b = db_open("corrupt-b", 4u << 20);
    char path[512], bad[512], err[512];
    ldb_snap_info *info = calloc(1, sizeof(*info));
    uint8_t *file = NULL;
    size_t n = 0;
    int fails = 0, tried = 0;
    digest before;
    bool present = true;

    if (!a || !b || !info) {
        CHECK(!"setup");
        goto out;
    }
    fill(a, 4, 0, 3, 5, 0);
    fill(b, 4, 0, 10, 3, 1);
    before = range_digest(b, NULL, 0, 0);
    at(path, sizeof(path), "small.snap");
    at(bad, sizeof(bad), "bad.snap");
    CHECK_RC(make_part(a, NULL, 4, 5, path, NULL), SX_OK);
    n = slurp(path, &file);
    CHECK(n > LDB_SNAP_TRAILER && n < 400);
    if (file == NULL)
        goto out;
    CHECK_RC(ldb_snap_verify(path, NULL, err, sizeof(err)), SX_OK);

    for (size_t i = 0; i < n; i++) {
        static const uint8_t flips[] = { 0x01, 0x80, 0xff };

        for (size_t f = 0; f < sizeof(flips); f++) {
            int rc;

            file[i] ^= flips[f];
            spit(bad, file, n);
            file[i] ^= flips[f];
            err[0] = '\0';
            rc = ldb_snap_verify(bad, info, err, sizeof(err));
            tried++;
            if (rc == 0 || err[0] == '\0') {
                fails++;
                fprintf(stderr, "byte %zu ^ 0x%02x: rc %d, \"%s\"\n", i, flips[f], rc, err);
            }
        }
    }
    for (size_t len = 0; len < n; len++) {
        int rc;

        spit(bad, file, len);
        err[0] = '\0';
        rc = ldb_snap_verify(bad, info, err, sizeof(err));
        tried++;
        if (rc == 0 || err[0] == '\0') {
            fails++;
            fprintf(stderr, "truncated to %zu: rc %d\n", len, rc);
        }
    }
    { /* a byte appended */
        uint8_t *more = malloc(n + 1);

        CHECK(more != NULL);
        if (more != NULL) {
            memcpy(more, file, n);
            more[n] = 0;
            spit(bad, more, n + 1);
            CHECK_RC(ldb_snap_verify(bad, info, err, sizeof(err)), SX_EPROTO);
            free(more);
        }
    }
    CHECK_INT(fails, 0);
    CHECK(tried > 4 * 100);

    /* a version this build does not read */
    file[11] ^= 0x02;
    spit(bad, file, n);
    file[11] ^= 0x02;
    CHECK_RC(ldb_snap_verify(bad, info, err, sizeof(err)), SX_EVERSION);
    /* a checksum-only change is reported as such */
    file[n - 1] ^= 0x01;
    spit(bad, file, n);
    file[n - 1] ^= 0x01;
    CHECK_RC(ldb_snap_verify(bad, info, err, sizeof(err)), SX_EPROTO);
    CHECKF(strstr(err, "checksum") != NULL, "%s", err);

    /* install of a corrupt file: no marker, nothing changed */
    file[n / 2] ^= 0x10;
    spit(bad, file, n);
    CHECK_RC(ldb_snap_install(b, bad, marker_out, sizeof(marker_out) - 1, NULL, NULL, NULL, err,
                              sizeof(err)),
             SX_EPROTO);
    CHECK_RC(ldb_snap_marker_present(b, marker_out, sizeof(marker_out) - 1, &present), SX_OK);
    CHECK(!present);
    CHECK(digest_eq(before, range_digest(b, NULL, 0, 0)));
out:
    free(file);
    free(info);
    ldb_close(a);
    ldb_close(b);
}

/* An empty range: no record; install empties the range. The whole key
 * space: everything replaced. */
static void t_empty_and_whole(void)
{
    ldb *a = db_open("empty-a", 4u << 20), *b = db_open("empty-b", 4u << 20);
    char path[512], err[512] = "";
    ldb_snap_info *info = calloc(1, sizeof(*info));
    digest b1;

    if (!a || !b || !info) {
        CHECK(!"setup");
        goto out;
    }
    fill(a, 1, 0, 10, 10, 0);
    fill(a, 3, 0, 10, 10, 0);
    fill(b, 1, 0, 20, 10, 5);
    fill(b, 2, 0, 20, 10, 5);
    b1 = range_digest(b, NULL, 1, 2);
    at(path, sizeof(path), "empty.snap");
    CHECK_RC(make_part(a, NULL, 2, 8, path, NULL), SX_OK);
    CHECK_RC(ldb_snap_verify(path, info, err, sizeof(err)), SX_OK);
    CHECK_INT(info->records, 0);
    CHECK_RC(ldb_snap_install(b, path, marker_out, sizeof(marker_out) - 1, NULL, NULL, NULL, err,
                              sizeof(err)),
             SX_OK);
    CHECK_INT(range_digest(b, NULL, 2, 3).n, 0);
    CHECK(digest_eq(b1, range_digest(b, NULL, 1, 2)));

    /* the whole key space (an index partition's own leveldb) */
    at(path, sizeof(path), "whole.snap");
    CHECK_RC(ldb_snap_make(a, NULL, NULL, 0, NULL, 0, 11, NULL, 0, path, NULL, err, sizeof(err)),
             SX_OK);
    CHECK_RC(ldb_snap_install(b, path, marker_out, sizeof(marker_out) - 1, NULL, NULL, info, err,
                              sizeof(err)),
             SX_OK);
    CHECK_INT(info->records, 20);
    CHECK(info->lo_n == 0 && info->hi_n == 0 && info->meta_n == 0);
    CHECK(digest_eq(range_digest(a, NULL, 0, 0), range_digest(b, NULL, 0, 0)));
out:
    free(info);
    ldb_close(a);
    ldb_close(b);
}

/* A 1 MiB value and 100,000 small records, through leveldbs with 1 MiB
 * memtables (install's batches fill several logs: ldb_sync_logs). */
static void t_large(void)
{
    ldb *a = db_open("large-a", 1u << 20), *b = db_open("large-b", 1u << 20);
    char path[512], err[512] = "";
    ldb_snap_info *info = calloc(1, sizeof(*info));
    uint64_t size = 0;

    if (!a || !b || !info) {
        CHECK(!"setup");
        goto out;
    }
    fill(a, 9, 0, 100000, 16, 0);
    fill(a, 9, 100000, 1, 1u << 20, 0); /* one value of 1 MiB */
    fill(a, 9, 100001, 1, 3u << 20, 0); /* one of 3 MiB: past the file buffers */
    fill(b, 9, 50000, 100000, 8, 4);
    fill(b, 10, 0, 100, 8, 4);
    at(path, sizeof(path), "large.snap");
    CHECK_RC(make_part(a, NULL, 9, 42, path, &size), SX_OK);
    CHECK(size > (4u << 20) + 100000 * 28);
    CHECK_RC(ldb_snap_install(b, path, marker_out, sizeof(marker_out) - 1, NULL, NULL, info, err,
                              sizeof(err)),
             SX_OK);
    CHECKF(err[0] == '\0', "%s", err);
    CHECK_INT(info->records, 100002);
    CHECK(digest_eq(range_digest(a, NULL, 9, 10), range_digest(b, NULL, 9, 10)));
    CHECK_INT(range_digest(b, NULL, 10, 11).n, 100);
out:
    free(info);
    ldb_close(a);
    ldb_close(b);
}

/* An install that stops before its last batch (the extra function fails,
 * as a crash there would) leaves the marker, also after a reopen; a new
 * install then completes. */
static void t_crash_midway(void)
{
    ldb *a = db_open("crash-a", 4u << 20), *b = db_open("crash-b", 4u << 20);
    char path[512], err[512] = "";
    extra_seen seen = { .part = 6, .fail = SX_EINTERNAL };
    bool present = false;
    uint8_t *v = NULL;
    size_t vn = 0;

    if (!a || !b) {
        CHECK(!"setup");
        goto out;
    }
    seen.d = b;
    fill(a, 6, 0, 500, 30, 0);
    fill(b, 6, 200, 500, 30, 1);
    at(path, sizeof(path), "crash.snap");
    CHECK_RC(make_part(a, NULL, 6, 77, path, NULL), SX_OK);
    CHECK_RC(ldb_snap_install(b, path, marker_out, sizeof(marker_out) - 1, extra_fn, &seen, NULL,
                              err, sizeof(err)),
             SX_EINTERNAL);
    CHECK(err[0] != '\0');
    CHECK_INT(seen.calls, 1);
    ldb_close(b);
    b = db_open("crash-b", 4u << 20);
    if (b == NULL)
        goto out;
    CHECK_RC(ldb_snap_marker_present(b, marker_out, sizeof(marker_out) - 1, &present), SX_OK);
    CHECK(present);
    CHECK_RC(ldb_get(b, applied_key, sizeof(applied_key) - 1, &v, &vn), SX_ENOTFOUND);

    seen.d = b;
    seen.fail = 0;
    CHECK_RC(ldb_snap_install(b, path, marker_out, sizeof(marker_out) - 1, extra_fn, &seen, NULL,
                              err, sizeof(err)),
             SX_OK);
    CHECK_RC(ldb_snap_marker_present(b, marker_out, sizeof(marker_out) - 1, &present), SX_OK);
    CHECK(!present);
    CHECK(digest_eq(range_digest(a, NULL, 6, 7), range_digest(b, NULL, 6, 7)));
out:
    free(v);
    ldb_close(a);
    ldb_close(b);
}

/* A marker inside the range: kept while installing, gone afterwards; a
 * file holding the marker's key is refused before anything is written. */
static void t_marker_inside(void)
{
    ldb *a = db_open("inside-a", 4u << 20), *b = db_open("inside-b", 4u << 20);
    char path[512], err[512] = "";
    uint8_t mk[12];
    size_t mn = rec_key(mk, 8, 0xfffffff0u);
    bool present = true;
    extra_seen seen = { .d = b, .marker = mk, .marker_n = mn, .part = 8 };
    digest before;

    if (!a || !b) {
        CHECK(!"setup");
        goto out;
    }
    fill(a, 8, 0, 40, 10, 0);
    fill(b, 8, 10, 40, 10, 2);
    at(path, sizeof(path), "inside.snap");
    CHECK_RC(make_part(a, NULL, 8, 3, path, NULL), SX_OK);
    CHECK_RC(ldb_snap_install(b, path, mk, mn, extra_fn, &seen, NULL, err, sizeof(err)), SX_OK);
    CHECK(seen.marker_then);          /* kept while the range was cleared */
    CHECK_INT(seen.range_then.n, 41); /* the records and the marker */
    CHECK_RC(ldb_snap_marker_present(b, mk, mn, &present), SX_OK);
    CHECK(!present);
    CHECK(digest_eq(range_digest(a, NULL, 8, 9), range_digest(b, NULL, 8, 9)));

    /* the file holds the marker's key: refused, nothing written */
    put(a, mk, mn, "x", 1);
    fill(b, 8, 100, 5, 10, 2);
    before = range_digest(b, NULL, 0, 0);
    CHECK_RC(make_part(a, NULL, 8, 4, path, NULL), SX_OK);
    CHECK_RC(ldb_snap_install(b, path, mk, mn, NULL, NULL, NULL, err, sizeof(err)), SX_EINVAL);
    CHECK(digest_eq(before, range_digest(b, NULL, 0, 0)));
out:
    ldb_close(a);
    ldb_close(b);
}

/* make's refusals and failures leave no file behind. */
static void t_make_errors(void)
{
    ldb *a = db_open("errors-a", 4u << 20);
    char path[512], tmp[600], err[512] = "";
    uint8_t lo[8], hi[8], big[LDB_SNAP_META_MAX + 1] = { 0 };
    struct stat st;

    if (!a) {
        CHECK(!"setup");
        return;
    }
    fill(a, 1, 0, 10, 10, 0);
    prefix(lo, 2);
    prefix(hi, 1);
    at(path, sizeof(path), "no-such-folder/x.snap");
    CHECK_RC(ldb_snap_make(a, NULL, NULL, 0, NULL, 0, 0, NULL, 0, path, NULL, err, sizeof(err)),
             SX_EIO);
    CHECKF(strstr(err, "no-such-folder") != NULL, "%s", err);
    at(path, sizeof(path), "refused.snap");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    CHECK_RC(ldb_snap_make(a, NULL, lo, 8, hi, 8, 0, NULL, 0, path, NULL, err, sizeof(err)),
             SX_EINVAL); /* hi below lo */
    CHECK_RC(
        ldb_snap_make(a, NULL, NULL, 0, NULL, 0, 0, big, sizeof(big), path, NULL, err, sizeof(err)),
        SX_EINVAL);
    CHECK(stat(path, &st) != 0 && stat(tmp, &st) != 0);
    ldb_close(a);
}

static bool run(const char *dir)
{
    root = dir;
    t_install_range();
    t_snapshot_point();
    t_stream();
    t_stage_order();
    t_corruption();
    t_empty_and_whole();
    t_large();
    t_crash_midway();
    t_marker_inside();
    t_make_errors();
    return true;
}

int main(int argc, char **argv)
{
    setenv("SHARDEX_LOG_PREALLOC_MB", "0", 1); /* no 64 MiB logs for small tests */
    if (sodium_init() < 0)
        return 1;
    return scratch_run(argc, argv, "sx-ldb-snap", run) ? CHECK_DONE() : 1;
}
