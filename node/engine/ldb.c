/*
 * ldb.c — leveldb C API wrapper: open/close, synced batches, gets and
 * bounded ordered scans, and the block cache every leveldb of the process
 * shares. See ldb.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ldb.h"
#include "sx_errors.h"
#include "log.h"

/* leveldb runs the compactions of every leveldb in the process on one
 * background thread, started the first time one needs it, by the thread
 * that needed it, whose name it inherits (usually a committer's). So the
 * first open is made under the name "sx-leveldb": an open that schedules a
 * compaction starts the thread then; one that does not is followed by a
 * compaction of a key range that holds no key (every key shardex writes
 * sorts below nine 0xff bytes), which switches to a new memtable (a few
 * bytes of log) and flushes the empty one on that thread. That runs only
 * when no compaction is under way, so it never waits for one. */
static atomic_bool compactor_named;

/* Large memtables by default (ldb_open): a bulk load of 1,000,000 items
 * with 2 indexes runs 15-40 % faster with 64 MiB than with 8 MiB (the index
 * nodes' CPU 12 s against 23 s: fewer level-0 files, less compaction). The
 * cost: up to two memtables (128 MiB) per leveldb under heavy writes, and
 * up to 64 MiB of log to replay when a node restarts. Each log is
 * preallocated to its memtable's size too (ldb_log.h): disk space reserved
 * while it lives. A storage node's store takes larger ones (ldb_open_mem,
 * storage_store.h). */
#define LDB_MEMTABLE_BYTES (64u << 20)

/* The block cache (uncompressed table blocks) that every leveldb of the
 * process shares: one budget per process, whatever the number of
 * partitions it holds. Made by the first open with the size
 * ldb_cache_configure set, and never destroyed: it must outlive every
 * database that uses it, and it lives as long as the process. */
_Static_assert(sizeof(size_t) >= 8, "LDB_CACHE_MAX_MB MiB must fit a size_t");
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static leveldb_cache_t *shared_cache;
static size_t cache_mb = LDB_CACHE_DEFAULT_MB;

int ldb_cache_configure(size_t mb)
{
    int rc = 0;

    if (mb < 1 || mb > LDB_CACHE_MAX_MB)
        return SX_EINVAL;
    pthread_mutex_lock(&cache_mu);
    if (shared_cache != NULL && mb != cache_mb)
        rc = SX_EINVAL; /* too late: a database is using it */
    else
        cache_mb = mb;
    pthread_mutex_unlock(&cache_mu);
    return rc;
}

size_t ldb_cache_mb(void)
{
    size_t mb;

    pthread_mutex_lock(&cache_mu);
    mb = cache_mb;
    pthread_mutex_unlock(&cache_mu);
    return mb;
}

/* The shared cache, made on first use; NULL when out of memory. */
static leveldb_cache_t *cache_get(void)
{
    leveldb_cache_t *c;

    pthread_mutex_lock(&cache_mu);
    if (shared_cache == NULL)
        shared_cache = leveldb_cache_create_lru(cache_mb << 20);
    c = shared_cache;
    pthread_mutex_unlock(&cache_mu);
    return c;
}

/* True when a thread of this process other than the caller is named
 * "sx-leveldb" (the caller's own name is restored before). */
static bool compactor_running(void)
{
    DIR *dir = opendir("/proc/self/task");
    struct dirent *e;
    bool found = false;

    if (dir == NULL)
        return true; /* cannot tell: leave it */
    while (!found && (e = readdir(dir)) != NULL) {
        char path[64], comm[32] = { 0 };
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.20s/comm", e->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        if (fgets(comm, sizeof(comm), f) != NULL)
            found = strncmp(comm, "sx-leveldb", 10) == 0;
        fclose(f);
    }
    closedir(dir);
    return found;
}

/* ldb_open_ex's leveldb_open, under the compactor's name the first time. */
static leveldb_t *open_named(const leveldb_options_t *opts, const char *dir, char **err)
{
    static const char k[] = "\xff\xff\xff\xff\xff\xff\xff\xff\xff";
    char name[17] = { 0 };
    leveldb_t *db;

    if (atomic_exchange(&compactor_named, true) ||
        prctl(PR_GET_NAME, (unsigned long)name, 0ul, 0ul, 0ul) != 0)
        return leveldb_open(opts, dir, err);
    os_thread_name("sx-leveldb");
    db = leveldb_open(opts, dir, err);
    os_thread_name(name);
    if (*err == NULL && !compactor_running()) {
        os_thread_name("sx-leveldb");
        leveldb_compact_range(db, k, sizeof(k) - 1, k, sizeof(k) - 1);
        os_thread_name(name);
    }
    return db;
}

int ldb_open(const char *dir, ldb **out)
{
    return ldb_open_ex(dir, true, out);
}

/* ldb_open_ex with leveldb's paranoid checks on or off, and memtables of
 * mem bytes. */
static int open_checked(const char *dir, bool create, bool paranoid, size_t mem, ldb **out)
{
    ldb *d = calloc(1, sizeof(*d));
    leveldb_cache_t *cache;
    char *err = NULL;

    if (d == NULL)
        return SX_ENOMEM;
    atomic_init(&d->failed, false);
    atomic_init(&d->refusing, false);
    d->logs.wd = -1;
    d->logs.lockfd = -1;
    d->opts = leveldb_options_create();
    d->ropts = leveldb_readoptions_create();
    d->wsync = leveldb_writeoptions_create();
    d->wlazy = leveldb_writeoptions_create();
    d->dir = strdup(dir);
    d->filter = leveldb_filterpolicy_create_bloom(10);
    cache = cache_get();
    if (!d->opts || !d->ropts || !d->wsync || !d->wlazy || !d->dir || !cache || !d->filter) {
        ldb_close(d);
        return SX_ENOMEM;
    }
    leveldb_options_set_create_if_missing(d->opts, create);
    leveldb_options_set_paranoid_checks(d->opts, paranoid);
    leveldb_options_set_cache(d->opts, cache);
    leveldb_options_set_filter_policy(d->opts, d->filter);
    /* large memtables: see LDB_MEMTABLE_BYTES */
    leveldb_options_set_write_buffer_size(d->opts, mem);
    /* 8 MiB tables. leveldb's 2 MiB default made a 2-index load of
     * 1,000,000 items ~12 % faster only by leaving compaction for later:
     * 340 MB compacted during the load with 8 MiB, against 170 during it
     * plus 460 after (the reads that followed set off most of it: leveldb
     * compacts a table after size/16 KiB reads that checked it in vain;
     * docs/PERFORMANCE.md). */
    leveldb_options_set_max_file_size(d->opts, 8u << 20);
    leveldb_writeoptions_set_sync(d->wsync, 1);
    /* the folder locked, and the preallocated zeros after the logs'
     * records cut (ldb_log.h) */
    if (ldb_logs_open(&d->logs, dir) != 0) {
        ldb_close(d);
        return SX_EIO;
    }
    d->db = open_named(d->opts, dir, &err);
    if (err != NULL) {
        LOG_ERROR("leveldb open %s: %s", dir, err);
        leveldb_free(err);
        ldb_close(d);
        return SX_EIO;
    }
    /* a log holds one memtable's writes: preallocated to that */
    ldb_logs_watch(&d->logs, dir, mem);
    *out = d;
    return 0;
}

int ldb_open_ex(const char *dir, bool create, ldb **out)
{
    return open_checked(dir, create, true, LDB_MEMTABLE_BYTES, out);
}

int ldb_open_mem(const char *dir, size_t memtable_bytes, ldb **out)
{
    if (memtable_bytes < LDB_MEMTABLE_MIN_BYTES)
        return SX_EINVAL;
    return open_checked(dir, true, true, memtable_bytes, out);
}

int ldb_recover_lenient(const char *dir)
{
    ldb *d = NULL;
    int rc = open_checked(dir, false, false, LDB_MEMTABLE_BYTES, &d);

    ldb_close(d);
    return rc;
}

void ldb_close(ldb *d)
{
    if (d == NULL)
        return;
    if (d->db)
        leveldb_close(d->db);
    ldb_logs_close(&d->logs, d->dir);
    if (d->opts)
        leveldb_options_destroy(d->opts);
    if (d->filter)
        leveldb_filterpolicy_destroy(d->filter);
    if (d->ropts)
        leveldb_readoptions_destroy(d->ropts);
    if (d->wsync)
        leveldb_writeoptions_destroy(d->wsync);
    if (d->wlazy)
        leveldb_writeoptions_destroy(d->wlazy);
    free(d->dir);
    free(d);
}

int ldb_get(ldb *d, const void *key, size_t kn, uint8_t **val, size_t *vn)
{
    return ldb_get_snap(d, NULL, key, kn, val, vn);
}

int ldb_get_snap(ldb *d, const leveldb_snapshot_t *snap, const void *key, size_t kn, uint8_t **val,
                 size_t *vn)
{
    leveldb_readoptions_t *ro = d->ropts;
    char *err = NULL;
    size_t n = 0;
    char *v;

    if (snap != NULL) {
        ro = leveldb_readoptions_create();
        if (ro == NULL)
            return SX_ENOMEM;
        leveldb_readoptions_set_snapshot(ro, snap);
    }
    v = leveldb_get(d->db, ro, key, kn, &n, &err);
    if (ro != d->ropts)
        leveldb_readoptions_destroy(ro);

    if (err != NULL) {
        LOG_ERROR("leveldb get: %s", err);
        leveldb_free(err);
        return SX_EIO;
    }
    if (v == NULL)
        return SX_ENOTFOUND;
    /* leveldb's buffer must be released with leveldb_free; hand out malloc'd */
    *val = malloc(n ? n : 1);
    if (*val == NULL) {
        leveldb_free(v);
        return SX_ENOMEM;
    }
    memcpy(*val, v, n);
    *vn = n;
    leveldb_free(v);
    return 0;
}

/* Writes b with options o; refuses once any write or log sync through d
 * failed. leveldb 1.23 stops writing by itself only after a failed sync:
 * after a failed log write (a full disk, an I/O error) it carries on, the
 * torn record stays in the log and every later record follows it at an
 * offset its reader will not find, so writes acknowledged after it would
 * be lost at the next open. Refusing them keeps the log ending at the torn
 * record, which the next open reads as the end of the log; the node must
 * be restarted to write to this database again. */
static int write_opts(ldb *d, const leveldb_writeoptions_t *o, leveldb_writebatch_t *b)
{
    char *err = NULL;

    if (atomic_load(&d->failed)) {
        if (!atomic_exchange(&d->refusing, true))
            LOG_ERROR("leveldb %s: an earlier write or log sync failed; refusing every "
                      "write to it until the node restarts (what was acknowledged is safe)",
                      d->dir);
        return SX_EIO;
    }
    leveldb_write(d->db, o, b, &err);
    if (err != NULL) {
        LOG_ERROR("leveldb write: %s", err);
        leveldb_free(err);
        atomic_store(&d->failed, true);
        return SX_EIO;
    }
    ldb_logs_poll(); /* a log this write started */
    return 0;
}

int ldb_write_sync(ldb *d, leveldb_writebatch_t *b)
{
    return write_opts(d, d->wsync, b);
}

int ldb_write_lazy(ldb *d, leveldb_writebatch_t *b)
{
    return write_opts(d, d->wlazy, b);
}

/* fsyncs file name of folder fd dfd; one that no longer exists is fine. */
static int sync_one(int dfd, const char *dir, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        LOG_ERROR("leveldb %s: open %s to sync it: %s", dir, name, strerror(errno));
        return SX_EIO;
    }
    if (fdatasync(fd) != 0) {
        LOG_ERROR("leveldb %s: sync %s: %s", dir, name, strerror(errno));
        close(fd);
        return SX_EIO;
    }
    close(fd);
    return 0;
}

int ldb_sync_logs(ldb *d, unsigned *synced)
{
    DIR *dir = opendir(d->dir);
    struct dirent *e;
    int rc = 0;

    if (dir == NULL) {
        LOG_ERROR("leveldb %s: cannot list it to sync its logs: %s", d->dir, strerror(errno));
        atomic_store(&d->failed, true);
        return SX_EIO;
    }
    for (;;) {
        errno = 0;
        if ((e = readdir(dir)) == NULL)
            break;
        size_t n = strlen(e->d_name);

        if (n <= 4 || strcmp(e->d_name + n - 4, ".log") != 0)
            continue;
        if ((rc = sync_one(dirfd(dir), d->dir, e->d_name)) != 0)
            break;
        (*synced)++;
    }
    if (rc == 0 && errno != 0) { /* readdir failed: not every log seen */
        LOG_ERROR("leveldb %s: listing it to sync its logs: %s", d->dir, strerror(errno));
        rc = SX_EIO;
    }
    closedir(dir);
    if (rc != 0)
        atomic_store(&d->failed, true);
    return rc;
}

bool ldb_sound(ldb *d)
{
    leveldb_writebatch_t *b;
    int rc;

    if (atomic_load(&d->failed))
        return false;
    if ((b = leveldb_writebatch_create()) == NULL)
        return false;
    rc = ldb_write_sync(d, b);
    leveldb_writebatch_destroy(b);
    return rc == 0;
}

bool ldb_failed(ldb *d)
{
    return atomic_load(&d->failed);
}

int ldb_sync_parent(const char *path)
{
    char parent[4200];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    int fd, rc = 0;

    if (n >= sizeof(parent)) {
        LOG_ERROR("sync the folder of %s: path too long", path);
        return SX_EIO;
    }
    if (n == 0) {
        parent[0] = slash ? '/' : '.';
        parent[1] = '\0';
    } else {
        memcpy(parent, path, n);
        parent[n] = '\0';
    }
    fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        LOG_ERROR("sync folder %s: %s", parent, strerror(errno));
        rc = SX_EIO;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

int ldb_marker_set(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

    if (fd < 0 || fsync(fd) != 0) {
        LOG_ERROR("marker %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return SX_EIO;
    }
    close(fd);
    return ldb_sync_parent(path);
}

int ldb_marker_clear(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT) {
        LOG_ERROR("marker %s: remove: %s", path, strerror(errno));
        return SX_EIO;
    }
    return 0;
}

int ldb_marker_state(const char *path, bool *exists)
{
    struct stat st;

    *exists = stat(path, &st) == 0;
    if (*exists || errno == ENOENT)
        return 0;
    LOG_ERROR("marker %s: %s", path, strerror(errno));
    return SX_EIO;
}

static int key_lt(const char *k, size_t kn, const void *b, size_t bn)
{
    size_t m = kn < bn ? kn : bn;
    int c = memcmp(k, b, m);
    return c < 0 || (c == 0 && kn < bn);
}

static int scan_opts(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
                     const void *hi, size_t hi_n, bool desc, bool fill_cache, ldb_visit fn,
                     void *arg)
{
    leveldb_readoptions_t *ro = leveldb_readoptions_create();
    leveldb_iterator_t *it;
    char *err = NULL;
    int rc = 0;

    if (ro == NULL)
        return SX_ENOMEM;
    leveldb_readoptions_set_fill_cache(ro, fill_cache);
    if (snap != NULL)
        leveldb_readoptions_set_snapshot(ro, snap);
    it = leveldb_create_iterator(d->db, ro);
    if (it == NULL) {
        leveldb_readoptions_destroy(ro);
        return SX_ENOMEM;
    }
    if (!desc) {
        leveldb_iter_seek(it, lo, lo_n);
    } else if (hi_n > 0) {
        leveldb_iter_seek(it, hi, hi_n);
        if (leveldb_iter_valid(it))
            leveldb_iter_prev(it);
        else
            leveldb_iter_seek_to_last(it);
    } else {
        leveldb_iter_seek_to_last(it);
    }
    while (leveldb_iter_valid(it)) {
        size_t kn, vn;
        const char *k = leveldb_iter_key(it, &kn);
        const char *v = leveldb_iter_value(it, &vn);

        if (!desc && hi_n > 0 && !key_lt(k, kn, hi, hi_n))
            break;
        if (desc && key_lt(k, kn, lo, lo_n))
            break;
        if (desc && hi_n > 0 && !key_lt(k, kn, hi, hi_n)) {
            leveldb_iter_prev(it);
            continue;
        }
        rc = fn(arg, (const uint8_t *)k, kn, (const uint8_t *)v, vn);
        if (rc != 0)
            break;
        if (desc)
            leveldb_iter_prev(it);
        else
            leveldb_iter_next(it);
    }
    leveldb_iter_get_error(it, &err);
    if (err != NULL) {
        LOG_ERROR("leveldb iterate: %s", err);
        leveldb_free(err);
        rc = SX_EIO;
    }
    leveldb_iter_destroy(it);
    leveldb_readoptions_destroy(ro);
    return rc == 1 ? 0 : rc;
}

int ldb_scan(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n, const void *hi,
             size_t hi_n, bool desc, ldb_visit fn, void *arg)
{
    return scan_opts(d, snap, lo, lo_n, hi, hi_n, desc, true, fn, arg);
}

int ldb_scan_nocache(ldb *d, const leveldb_snapshot_t *snap, const void *lo, size_t lo_n,
                     const void *hi, size_t hi_n, ldb_visit fn, void *arg)
{
    return scan_opts(d, snap, lo, lo_n, hi, hi_n, false, false, fn, arg);
}
