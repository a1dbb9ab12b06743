/*
 * ldb_nodetest.c — what an index build's unsynced writes rely on in
 * node/ldb.c: a log whose unsynced tail a machine crash tore (simulated by
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
 * the records acknowledged after it would have been lost).
 * Standalone: builds from node/ldb.c + sx_proto + leveldb (named
 * *_nodetest.c so the plain unit-test glob skips it).
 * Argument: a scratch dir (default: a fresh mkdtemp under /tmp).
 */
#define _XOPEN_SOURCE 700 /* nftw */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "hash.h"
#include "ldb.h"
#include "sx_errors.h"

#define NSYNC 200    /* records written synced */
#define NLAZY 200    /* then written unsynced, the log's tail */
#define VLEN 1000

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(path);
}

/* Record i under prefix c: key c | i (4 BE), a value derived from both. */
static size_t rec_key(uint8_t *k, char c, uint32_t i)
{
    k[0] = (uint8_t)c;
    sx_put_be32(k + 1, i);
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
    rec_val(want, t->c, sx_get_be32(k + 1));
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

/* Overwrites the last `n` bytes of the database's one log with garbage;
 * returns 0, or -1 when there is no single log or it is too short. */
static int tear_log(const char *dir, off_t n)
{
    char path[4200] = "";
    int logs = 0, fd, rc = -1;
    struct dirent *e;
    DIR *d = opendir(dir);
    struct stat st;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);

        if (l > 4 && strcmp(e->d_name + l - 4, ".log") == 0 &&
            strlen(dir) + l + 2 <= sizeof(path)) {
            memcpy(path, dir, strlen(dir));
            path[strlen(dir)] = '/';
            memcpy(path + strlen(dir) + 1, e->d_name, l + 1);
            logs++;
        }
    }
    closedir(d);
    if (logs != 1 || (fd = open(path, O_WRONLY)) < 0)
        return -1;
    if (fstat(fd, &st) == 0 && st.st_size > n) {
        char *junk = malloc((size_t)n);

        if (junk != NULL) {
            memset(junk, 0xab, (size_t)n);
            rc = pwrite(fd, junk, (size_t)n, st.st_size - n) == (ssize_t)n ? 0 : -1;
            free(junk);
        }
    }
    close(fd);
    return rc;
}

/* The size of the database's one log, or -1 when there is not exactly one. */
static off_t log_size(const char *dir)
{
    char path[4200];
    int logs = 0;
    off_t size = -1;
    struct dirent *e;
    struct stat st;
    DIR *d = opendir(dir);

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);

        if (l > 4 && strcmp(e->d_name + l - 4, ".log") == 0 &&
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path) &&
            stat(path, &st) == 0) {
            size = st.st_size;
            logs++;
        }
    }
    closedir(d);
    return logs == 1 ? size : -1;
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
    CHECK(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);     /* EFBIG instead of the signal */
    lim = old;
    lim.rlim_cur = (rlim_t)size + VLEN / 2;         /* the next record tears */
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(!ldb_failed(d));
    CHECK(write_recs(d, 'B', 1, true) == SX_EIO);
    CHECK(ldb_failed(d));                           /* status says so */
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);      /* the disk has room again */
    for (uint32_t i = 0; i < 10; i++) {             /* refused, every one */
        int rc = write_recs(d, 'C', 1, i % 2 == 0);

        CHECK(rc == SX_EIO);
        acked += rc == 0;
    }
    CHECK(!ldb_sound(d));
    ldb_close(d);
    d = NULL;
    CHECK(ldb_open(dir, &d) == 0);                  /* the torn record ends the log */
    if (d == NULL)
        return;
    CHECK(count(d, 'A', &t) == 0);
    CHECK(t.n == 20 && t.bad == 0);
    CHECK(count(d, 'C', &t) == 0);
    CHECK((int)t.n == acked && t.bad == 0);         /* nothing acknowledged lost */
    CHECK(write_recs(d, 'D', 1, true) == 0);        /* a restart writes again */
    ldb_close(d);
}

int main(int argc, char **argv)
{
    char tmpl[] = "/tmp/sx-ldb-XXXXXX", dir[4200], marker[4200], inside[4200], moved[4200];
    char dir2[4200];
    const char *base = argc > 1 ? argv[1] : mkdtemp(tmpl);
    unsigned synced = 0;
    bool exists = false;
    ldb *d = NULL;
    tally t;
    int rc;

    if (base == NULL) {
        perror("ldb_nodetest: mkdtemp");
        return 1;
    }
    if (snprintf(dir, sizeof(dir), "%s/db", base) >= (int)sizeof(dir) ||
        snprintf(marker, sizeof(marker), "%s.unsealed", dir) >= (int)sizeof(marker) ||
        snprintf(inside, sizeof(inside), "%s/x", marker) >= (int)sizeof(inside) ||
        snprintf(moved, sizeof(moved), "%s/moved", base) >= (int)sizeof(moved) ||
        snprintf(dir2, sizeof(dir2), "%s/db2", base) >= (int)sizeof(dir2)) {
        fprintf(stderr, "ldb_nodetest: scratch dir path too long: %s\n", base);
        return 1;
    }

    /* marker files */
    CHECK(ldb_marker_state(marker, &exists) == 0 && !exists);
    CHECK(ldb_marker_set(marker) == 0);
    CHECK(ldb_marker_state(marker, &exists) == 0 && exists);
    /* a path under the marker (a file): whether it exists cannot be told */
    CHECK(ldb_marker_state(inside, &exists) == SX_EIO);
    CHECK(ldb_marker_clear(marker) == 0);
    CHECK(ldb_marker_state(marker, &exists) == 0 && !exists);
    CHECK(ldb_marker_clear(marker) == 0);            /* already gone: fine */

    /* synced records, then an unsynced tail; ldb_sync_logs syncs the log */
    CHECK(ldb_open(dir, &d) == 0);
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
    CHECK(rc == SX_EIO);                              /* paranoid: refuses */
    ldb_close(d);
    d = NULL;
    CHECK(ldb_recover_lenient(dir) == 0);
    CHECK(ldb_open(dir, &d) == 0);                    /* the usual open again */
    CHECK(count(d, 'S', &t) == 0);
    CHECK(t.n == NSYNC && t.bad == 0);                /* every synced record */
    CHECK(count(d, 'L', &t) == 0);
    CHECK(t.n < NLAZY && t.n >= NLAZY / 4 && t.bad == 0);   /* the tail's head, intact */
    printf("after the torn tail: %u of %d unsynced records kept\n", (unsigned)t.n, NLAZY);

    /* a failed log sync is remembered: the handle is no longer sound, even
     * once the folder is back (its folder moved away: the listing fails) */
    CHECK(ldb_sound(d));
    CHECK(rename(dir, moved) == 0);
    CHECK(ldb_sync_logs(d, &synced) == SX_EIO);
    CHECK(rename(moved, dir) == 0);
    CHECK(ldb_sync_logs(d, &synced) == 0);
    CHECK(!ldb_sound(d));
    CHECK(write_recs(d, 'X', 1, true) == SX_EIO);   /* and refuses writes */
    ldb_close(d);

    failed_write(dir2);

    if (argc <= 1)      /* a scratch dir of our own: removed; one given: kept */
        nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return CHECK_DONE();
}
