/*
 * ldb_test.c — what an index build's unsynced writes rely on in
 * node/engine/ldb.c: a log whose unsynced tail a machine crash tore (simulated by
 * overwriting it with garbage) makes leveldb's paranoid open fail;
 * ldb_recover_lenient then opens it, every synced record is still there
 * and the records it kept of the torn tail are intact; afterwards the
 * usual open works. Also ldb_sync_logs (counts the logs it synced), a
 * failed one remembered by ldb_sound, and the
 * marker files (set, state, clear, clear again; a state that cannot be told
 * is an error, not "absent"). And fail-stop after a failed log write (the
 * file size limit, RLIMIT_FSIZE, makes leveldb's write fail half-way): every
 * later write is refused, and after a reopen every acknowledged record is
 * there (leveldb itself would have carried on after the torn record, and
 * the records acknowledged after it would have been lost). And the logs
 * preallocated by node/engine/ldb_log.c: a new log's file is 64 MiB at once, a
 * record torn half-way (its later fragments zeros) does not stop the usual
 * open, and the zero tails it cuts before an open (and only those). And
 * ldb_open_mem's memtable size (a store's 128 MiB: its log preallocated so).
 * Links node_engine.
 * Argument: a scratch dir (default: a fresh one under $TMPDIR or /tmp, removed
 * afterwards).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "check.h"
#include "hash.h"
#include "ldb.h"
#include "scratch.h"
#include "sx_errors.h"

#define NSYNC 200 /* records written synced */
#define NLAZY 200 /* then written unsynced, the log's tail */
#define VLEN 1000

/* Record i under prefix c: key c | i (4 BE), a value derived from both. */
static size_t rec_key(uint8_t *k, char c, uint32_t i)
{
    k[0] = (uint8_t)c;
    be_put32(k + 1, i);
    return 5;
}

static void rec_val(uint8_t *v, char c, uint32_t i)
{
    for (size_t j = 0; j < VLEN; j++)
        v[j] = (uint8_t)(i * 13 + (uint8_t)c + j);
}

/* Writes n records under prefix c, one batch each, synced or not. */
static int write_recs(ldb *d, char c, uint32_t n, bool sync)
{
    static uint8_t v[VLEN];
    uint8_t k[5];
    int rc = 0;

    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        leveldb_writebatch_t *b = leveldb_writebatch_create();

        if (b == NULL)
            return SX_ENOMEM;
        rec_val(v, c, i);
        leveldb_writebatch_put(b, (const char *)k, rec_key(k, c, i), (const char *)v, VLEN);
        rc = sync ? ldb_write_sync(d, b) : ldb_write_lazy(d, b);
        leveldb_writebatch_destroy(b);
    }
    return rc;
}

typedef struct tally {
    char c;
    uint32_t n, bad;
} tally;

static int tally_visit(void *arg, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    static uint8_t want[VLEN];
    tally *t = arg;

    if (kn != 5 || vn != VLEN) {
        t->bad++;
        return 0;
    }
    rec_val(want, t->c, be_get32(k + 1));
    if (memcmp(v, want, VLEN) != 0)
        t->bad++;
    t->n++;
    return 0;
}

/* Counts the records under prefix c (t->bad: those with a wrong value). */
static int count(ldb *d, char c, tally *t)
{
    uint8_t lo = (uint8_t)c, hi = (uint8_t)(c + 1);

    memset(t, 0, sizeof(*t));
    t->c = c;
    return ldb_scan(d, NULL, &lo, 1, &hi, 1, false, tally_visit, t);
}

/* The path of the database's one log into path; 0, or -1 when there is not
 * exactly one. */
static int one_log(const char *dir, char *path, size_t cap)
{
    int logs = 0;
    struct dirent *e;
    DIR *d = opendir(dir);

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);

        if (l > 4 && strcmp(e->d_name + l - 4, ".log") == 0 &&
            snprintf(path, cap, "%s/%s", dir, e->d_name) < (int)cap)
            logs++;
    }
    closedir(d);
    return logs == 1 ? 0 : -1;
}

/* Where the records of the database's one log end (its preallocated zeros
 * follow), or -1. */
static off_t log_size(const char *dir)
{
    char path[4200];
    off_t end = -1;

    if (one_log(dir, path, sizeof(path)) != 0 || ldb_log_end(path, &end) != 0)
        return -1;
    return end;
}

/* The file size of the database's one log, or -1. */
static off_t log_file_size(const char *dir)
{
    char path[4200];
    struct stat st;

    if (one_log(dir, path, sizeof(path)) != 0 || stat(path, &st) != 0)
        return -1;
    return st.st_size;
}

/* The file size of the database's newest log, or -1. */
static off_t newest_log_size(const char *dir)
{
    char path[4300];
    unsigned long long best = 0;
    off_t size = -1;
    struct dirent *e;
    struct stat st;
    DIR *d = opendir(dir);

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        unsigned long long num = strtoull(e->d_name, NULL, 10);

        if (l > 4 && strcmp(e->d_name + l - 4, ".log") == 0 && num >= best &&
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path) &&
            stat(path, &st) == 0) {
            best = num;
            size = st.st_size;
        }
    }
    closedir(d);
    return size;
}

/* Fills [from, to) of the database's one log with byte c; 0 or -1. */
static int fill_log(const char *dir, off_t from, off_t to, int c)
{
    char path[4200];
    char *buf;
    int fd, rc = -1;

    if (to <= from || one_log(dir, path, sizeof(path)) != 0 || (fd = open(path, O_WRONLY)) < 0)
        return -1;
    if ((buf = malloc((size_t)(to - from))) != NULL) {
        memset(buf, c, (size_t)(to - from));
        rc = pwrite(fd, buf, (size_t)(to - from), from) == (ssize_t)(to - from) ? 0 : -1;
        free(buf);
    }
    close(fd);
    return rc;
}

/* Overwrites the last `n` bytes of the database's one log's records with
 * garbage; returns 0, or -1 when there is no single log or it is too short. */
static int tear_log(const char *dir, off_t n)
{
    off_t end = log_size(dir);

    return end > n ? fill_log(dir, end - n, end, 0xab) : -1;
}

/* Whether the disk under dir has room to preallocate a log of log_bytes
 * (node/engine/ldb_log.c leaves a disk with less than 16 logs' worth free alone). */
static bool room_for_prealloc(const char *dir, uint64_t log_bytes)
{
    struct statvfs v;

    return statvfs(dir, &v) == 0 && (uint64_t)v.f_bavail * v.f_frsize >= 16 * log_bytes;
}

/* ldb_open_mem: a memtable under LDB_MEMTABLE_MIN_BYTES is refused and
 * nothing is opened; a database opened with 128 MiB memtables (a store's)
 * gets its log preallocated to that, and holds what it was given after a
 * reopen with ldb_open's default. */
static void memtable_sized(const char *dir)
{
    ldb *d = NULL;
    tally t;

    CHECK(ldb_open_mem(dir, LDB_MEMTABLE_MIN_BYTES - 1, &d) == SX_EINVAL && d == NULL);
    CHECK(ldb_open_mem(dir, (size_t)128 << 20, &d) == 0);
    if (d == NULL)
        return;
    CHECK(!room_for_prealloc(dir, (uint64_t)128 << 20) || log_file_size(dir) >= (off_t)128 << 20);
    CHECK(write_recs(d, 'M', 50, true) == 0);
    ldb_close(d);
    d = NULL;
    CHECK(ldb_open(dir, &d) == 0);
    if (d == NULL)
        return;
    CHECK(count(d, 'M', &t) == 0 && t.n == 50 && t.bad == 0);
    ldb_close(d);
}

/* Preallocated logs: a new log's file is 64 MiB at once (the one an open
 * starts, and one started later, seen by the watch after the next write);
 * a second open of a database in use is refused and cuts nothing; a
 * process killed half-way through a record of several fragments leaves
 * its first ones followed by zeros, and the usual (paranoid) open still
 * works, without the torn record (the zero tail is cut first: leveldb
 * would otherwise report an error in the middle of a record); a clean
 * close leaves no zero tail. dir is made in folder base. */
static void preallocated(const char *base, const char *dir)
{
    static uint8_t big[100000];
    ldb *d = NULL, *d2 = NULL;
    off_t e1, e2, cut;
    leveldb_writebatch_t *b;
    bool room = room_for_prealloc(base, (uint64_t)64 << 20);
    tally t;

    if (!room)
        printf("preallocated: under 1 GiB free here, the logs' sizes are not checked\n");
    CHECK(ldb_open(dir, &d) == 0);
    if (d == NULL)
        return;
    CHECK(!room || log_file_size(dir) >= (off_t)64 << 20);
    CHECK(write_recs(d, 'P', 50, true) == 0);
    e1 = log_size(dir);
    CHECK(e1 > 50 * VLEN && (!room || e1 < log_file_size(dir)));
    CHECK(ldb_open(dir, &d2) != 0 && d2 == NULL); /* in use: refused */
    CHECK(log_size(dir) == e1 && (!room || log_file_size(dir) >= (off_t)64 << 20));
    /* a new log (leveldb switches memtables to compact), preallocated once
     * a write through ldb sees it */
    leveldb_compact_range(d->db, NULL, 0, NULL, 0);
    CHECK(write_recs(d, 'P', 50, true) == 0); /* the same records again */
    CHECK(!room || newest_log_size(dir) >= (off_t)64 << 20);
    ldb_close(d);
    d = NULL;
    CHECK(log_file_size(dir) == log_size(dir)); /* a clean close: no zeros */
    CHECK(ldb_open(dir, &d) == 0);
    if (d == NULL)
        return;
    e1 = log_size(dir);
    memset(big, 0x5a, sizeof(big));
    b = leveldb_writebatch_create();
    CHECK(b != NULL);
    if (b == NULL) {
        ldb_close(d);
        return;
    }
    leveldb_writebatch_put(b, "Q", 1, (const char *)big, sizeof(big));
    CHECK(ldb_write_sync(d, b) == 0);
    leveldb_writebatch_destroy(b);
    e2 = log_size(dir);
    CHECK(e2 > e1 + (off_t)sizeof(big));
    /* killed: the big record's fragments after its first one never
     * written (a copy of the folder as the kill left it: a clean close
     * would cut the tail itself) */
    cut = (e1 / 32768 + 1) * 32768;
    CHECK(cut < e2 && fill_log(dir, cut, e2, 0) == 0);
    close(d->logs.lockfd); /* as a kill: no cut at close */
    d->logs.lockfd = -1;
    ldb_close(d);
    CHECK(log_file_size(dir) > e2); /* the zeros still there */
    d = NULL;
    CHECK(ldb_open(dir, &d) == 0); /* paranoid, and it opens */
    if (d == NULL)
        return;
    CHECK(count(d, 'P', &t) == 0);
    CHECK(t.n == 50 && t.bad == 0);
    CHECK(count(d, 'Q', &t) == 0);
    CHECK(t.n == 0); /* the torn record: gone */
    ldb_close(d);
}

/* Writes a log file at path: parts of (bytes, n) in order. */
static int write_file(const char *path, const void *const *parts, const size_t *ns, int k)
{
    FILE *f = fopen(path, "w");
    int rc = 0;

    if (f == NULL)
        return -1;
    for (int i = 0; i < k; i++)
        if (fwrite(parts[i], 1, ns[i], f) != ns[i])
            rc = -1;
    return fclose(f) == 0 ? rc : -1;
}

static off_t file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* ldb_logs_trim on logs made of a real record (one leveldb wrote): records
 * then zeros are cut after the records; a record cut short by the zeros is
 * cut off; zeros then a record, or a bad checksum the zeros do not reach,
 * or a header running past its block, are left alone. */
static void trim_cases(const char *base)
{
    static uint8_t zeros[40000], rec[7 + 2 * VLEN], bad[7 + 2 * VLEN];
    char db[4200], dir[4200], path[4300], src[4300];
    size_t rn = 0;
    off_t end = -1;
    ldb *d = NULL;
    FILE *f;

    CHECK(snprintf(db, sizeof(db), "%s/db4", base) < (int)sizeof(db));
    CHECK(snprintf(dir, sizeof(dir), "%s/trim", base) < (int)sizeof(dir));
    CHECK(snprintf(path, sizeof(path), "%s/000001.log", dir) < (int)sizeof(path));
    CHECK(mkdir(dir, 0755) == 0);
    /* one record of leveldb's own: a batch with one put of VLEN bytes */
    CHECK(ldb_open(db, &d) == 0);
    if (d == NULL)
        return;
    CHECK(write_recs(d, 'T', 1, true) == 0);
    ldb_close(d);
    CHECK(one_log(db, src, sizeof(src)) == 0 && (f = fopen(src, "r")) != NULL);
    if (f == NULL)
        return;
    rn = fread(rec, 1, 7, f);
    if (rn == 7) {
        rn = 7 + ((size_t)rec[4] | (size_t)rec[5] << 8);
        CHECK(rn > 7 + VLEN && rn <= sizeof(rec) && fread(rec + 7, 1, rn - 7, f) == rn - 7);
    }
    fclose(f);
    CHECK(rn > 7 + VLEN);
    if (rn <= 7 + VLEN || rn > sizeof(rec))
        return;
    memcpy(bad, rec, rn);
    bad[rn - 1] ^= 0x55; /* its checksum no longer holds */
    {                    /* records, then zeros: cut right after the records; again: nothing */
        const void *pp[] = { rec, rec, zeros };
        size_t nn[] = { rn, rn, sizeof(zeros) };

        CHECK(write_file(path, pp, nn, 3) == 0);
        CHECK(ldb_log_end(path, &end) == 0 && end == 2 * (off_t)rn);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == 2 * (off_t)rn);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == 2 * (off_t)rn);
    }
    { /* a record cut short, the rest zeros: cut before it */
        const void *pp[] = { rec, rec, zeros };
        size_t nn[] = { rn, rn / 2, sizeof(zeros) };

        CHECK(write_file(path, pp, nn, 3) == 0);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == (off_t)rn);
    }
    { /* zeros, then a record: left alone */
        const void *pp[] = { rec, zeros, rec };
        size_t nn[] = { rn, sizeof(zeros), rn };

        CHECK(write_file(path, pp, nn, 3) == 0);
        CHECK(ldb_log_end(path, &end) == SX_EINVAL);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == 2 * (off_t)rn + (off_t)sizeof(zeros));
    }
    { /* a bad checksum the zeros do not reach: left alone */
        const void *pp[] = { rec, bad, zeros };
        size_t nn[] = { rn, rn, sizeof(zeros) };

        CHECK(write_file(path, pp, nn, 3) == 0);
        CHECK(ldb_log_end(path, &end) == SX_EINVAL);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == 2 * (off_t)rn + (off_t)sizeof(zeros));
    }
    { /* the file ends inside a record, or inside a header (a log that was
       * not preallocated, its writer stopped): left for leveldb, which
       * drops such a record at its end */
        const void *pp[] = { rec, rec };
        size_t nn[] = { rn, rn / 2 };

        CHECK(write_file(path, pp, nn, 2) == 0);
        CHECK(ldb_log_end(path, &end) == SX_EINVAL);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == (off_t)rn + (off_t)(rn / 2));
        nn[1] = 3;
        CHECK(write_file(path, pp, nn, 2) == 0);
        CHECK(ldb_log_end(path, &end) == SX_EINVAL);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == (off_t)rn + 3);
    }
    { /* a header running past its block: left alone */
        const void *pp[] = { rec, zeros };
        size_t nn[] = { rn, sizeof(zeros) };

        rec[4] = 0xff;
        rec[5] = 0xff;
        CHECK(write_file(path, pp, nn, 2) == 0);
        CHECK(ldb_log_end(path, &end) == SX_EINVAL);
        CHECK(ldb_logs_trim(dir) == 0 && file_size(path) == (off_t)rn + (off_t)sizeof(zeros));
    }
}

/* A log write that fails half-way: writes to d are refused from then on,
 * and a reopen finds every record that was acknowledged. */
static void failed_write(const char *dir)
{
    struct rlimit old, lim;
    off_t size;
    ldb *d = NULL;
    tally t;
    int acked = 0;

    CHECK(ldb_open(dir, &d) == 0);
    if (d == NULL)
        return;
    CHECK(write_recs(d, 'A', 20, true) == 0);
    size = log_size(dir);
    CHECK(size > 0);
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    CHECK(signal(SIGXFSZ, SIG_IGN) != SIG_ERR); /* EFBIG instead of the signal */
    lim = old;
    lim.rlim_cur = (rlim_t)size + VLEN / 2; /* the next record tears */
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(!ldb_failed(d));
    CHECK(write_recs(d, 'B', 1, true) == SX_EIO);
    CHECK(ldb_failed(d));                      /* status says so */
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0); /* the disk has room again */
    for (uint32_t i = 0; i < 10; i++) {        /* refused, every one */
        int rc = write_recs(d, 'C', 1, i % 2 == 0);

        CHECK(rc == SX_EIO);
        acked += rc == 0;
    }
    CHECK(!ldb_sound(d));
    ldb_close(d);
    d = NULL;
    CHECK(ldb_open(dir, &d) == 0); /* the torn record ends the log */
    if (d == NULL)
        return;
    CHECK(count(d, 'A', &t) == 0);
    CHECK(t.n == 20 && t.bad == 0);
    CHECK(count(d, 'C', &t) == 0);
    CHECK((int)t.n == acked && t.bad == 0);  /* nothing acknowledged lost */
    CHECK(write_recs(d, 'D', 1, true) == 0); /* a restart writes again */
    ldb_close(d);
}

/* Every check, in scratch dir base; false when its paths do not fit. */
static bool run(const char *base)
{
    char dir[4200], marker[4200], inside[4200], moved[4200];
    char dir2[4200], dir3[4200], dir4[4200];
    unsigned synced = 0;
    bool exists = false;
    ldb *d = NULL;
    tally t;
    int rc;

    if (snprintf(dir, sizeof(dir), "%s/db", base) >= (int)sizeof(dir) ||
        snprintf(marker, sizeof(marker), "%s.unsealed", dir) >= (int)sizeof(marker) ||
        snprintf(inside, sizeof(inside), "%s/x", marker) >= (int)sizeof(inside) ||
        snprintf(moved, sizeof(moved), "%s/moved", base) >= (int)sizeof(moved) ||
        snprintf(dir2, sizeof(dir2), "%s/db2", base) >= (int)sizeof(dir2) ||
        snprintf(dir3, sizeof(dir3), "%s/db3", base) >= (int)sizeof(dir3) ||
        snprintf(dir4, sizeof(dir4), "%s/db4", base) >= (int)sizeof(dir4)) {
        fprintf(stderr, "ldb_test: scratch dir path too long: %s\n", base);
        return false;
    }

    /* marker files */
    CHECK(ldb_marker_state(marker, &exists) == 0 && !exists);
    CHECK(ldb_marker_set(marker) == 0);
    CHECK(ldb_marker_state(marker, &exists) == 0 && exists);
    /* a path under the marker (a file): whether it exists cannot be told */
    CHECK(ldb_marker_state(inside, &exists) == SX_EIO);
    CHECK(ldb_marker_clear(marker) == 0);
    CHECK(ldb_marker_state(marker, &exists) == 0 && !exists);
    CHECK(ldb_marker_clear(marker) == 0); /* already gone: fine */

    /* the block cache all leveldbs of the process share: sized before the
     * first open (shardex-node --cache-mb), fixed from then on */
    CHECK(ldb_cache_mb() == LDB_CACHE_DEFAULT_MB);
    CHECK(ldb_cache_configure(0) == SX_EINVAL);
    CHECK(ldb_cache_configure((size_t)LDB_CACHE_MAX_MB + 1) == SX_EINVAL);
    CHECK(ldb_cache_mb() == LDB_CACHE_DEFAULT_MB);
    CHECK(ldb_cache_configure(16) == 0 && ldb_cache_mb() == 16);

    /* synced records, then an unsynced tail; ldb_sync_logs syncs the log */
    CHECK(ldb_open(dir, &d) == 0);
    CHECK(ldb_cache_configure(64) == SX_EINVAL && ldb_cache_mb() == 16);
    CHECK(ldb_cache_configure(16) == 0);
    CHECK(write_recs(d, 'S', NSYNC, true) == 0);
    CHECK(write_recs(d, 'L', NLAZY, false) == 0);
    CHECK(ldb_sync_logs(d, &synced) == 0);
    CHECK(synced == 1);
    CHECK(ldb_sound(d));
    ldb_close(d);
    d = NULL;

    /* a machine crash tears the unsynced tail (half of it) */
    CHECK(tear_log(dir, (off_t)NLAZY * VLEN / 2) == 0);
    rc = ldb_open(dir, &d);
    CHECK(rc == SX_EIO); /* paranoid: refuses */
    ldb_close(d);
    d = NULL;
    CHECK(ldb_recover_lenient(dir) == 0);
    CHECK(ldb_open(dir, &d) == 0); /* the usual open again */
    CHECK(count(d, 'S', &t) == 0);
    CHECK(t.n == NSYNC && t.bad == 0); /* every synced record */
    CHECK(count(d, 'L', &t) == 0);
    CHECK(t.n < NLAZY && t.n >= NLAZY / 4 && t.bad == 0); /* the tail's head, intact */
    printf("after the torn tail: %u of %d unsynced records kept\n", (unsigned)t.n, NLAZY);

    /* a failed log sync is remembered: the handle is no longer sound, even
     * once the folder is back (its folder moved away: the listing fails) */
    CHECK(ldb_sound(d));
    CHECK(rename(dir, moved) == 0);
    CHECK(ldb_sync_logs(d, &synced) == SX_EIO);
    CHECK(rename(moved, dir) == 0);
    CHECK(ldb_sync_logs(d, &synced) == 0);
    CHECK(!ldb_sound(d));
    CHECK(write_recs(d, 'X', 1, true) == SX_EIO); /* and refuses writes */
    ldb_close(d);

    failed_write(dir2);
    preallocated(base, dir3);
    memtable_sized(dir4);
    trim_cases(base);
    return true;
}

int main(int argc, char **argv)
{
    unsetenv("SHARDEX_LOG_PREALLOC_MB"); /* preallocation as shipped */
    return scratch_run(argc, argv, "sx-ldb", run) ? CHECK_DONE() : 1;
}
